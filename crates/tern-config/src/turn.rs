//! The `[turn]` section: the built-in STUN/TURN server.

use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};
use tern_rtc::peer_policy::Cidr;

use super::error::ConfigError;

/// The `[turn]` section: the built-in STUN/TURN server (RFC 8489, RFC 8656).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TurnSection {
    /// UDP and TCP listen address, e.g. `0.0.0.0:3478`. TURN is off when unset.
    pub listen: Option<SocketAddr>,
    /// TURN over TLS (RFC 8656 §3.1, `turns:`) listen address, e.g. `0.0.0.0:443` for
    /// networks that pass only TLS (`--turn-tls`). Needs `turn.listen` and the certificate
    /// `server.tls_cert`/`server.tls_key` (reloaded with it). Off when unset.
    pub tls_listen: Option<SocketAddr>,
    /// The host name `turns:` URLs carry, which the certificate must name (TLS clients check
    /// it). Default: the relay address (a certificate with that IP address in its names).
    pub tls_host: Option<String>,
    /// Long-term users, each `"name:password"`.
    pub users: Vec<String>,
    /// Shared secret for REST credentials (coturn's `static-auth-secret`). When unset, tern
    /// still mints REST credentials for its WHEP answers with a random secret made at start.
    pub secret: Option<String>,
    /// Address relay sockets bind to and announce; also the host in the `Link` headers.
    /// Default: the listen address if it is specific, else the ICE candidate address.
    pub relay_ip: Option<IpAddr>,
    /// Lowest relay port. Default 49152 (coturn's `min-port`, the IANA dynamic range).
    pub relay_port_min: u16,
    /// Highest relay port. Default 65535 (coturn's `max-port`).
    pub relay_port_max: u16,
    /// REALM of the long-term credentials. Default `tern`.
    pub realm: String,
    /// Allocations in total. Default 10000: under 1 KiB of heap each plus a socket; the
    /// open-file limit (20000 here) leaves room for viewers.
    pub max_allocations: usize,
    /// Allocations per username. Default 100.
    pub max_allocations_per_user: usize,
    /// Lifetime of the REST credentials tern puts in WHEP `Link` headers, seconds. Default
    /// 86400 (coturn's recommended TTL): a Refresh after expiry would fail, so this bounds
    /// how long a viewer can stay on the relay.
    pub credential_lifetime: u64,
    /// Peer ranges (CIDR) the relay may reach even where the defaults refuse them, e.g.
    /// `["10.0.0.0/8"]` for a deployment whose peers are on its private network. Wins over
    /// `denied_peers`, as in coturn. Default: none.
    pub allowed_peers: Vec<String>,
    /// Peer ranges (CIDR) refused on top of the defaults (loopback, unspecified, link-local,
    /// private, CGNAT, multicast, reserved, broadcast and the server's own addresses; see
    /// `tern_rtc::peer_policy`). Default: none.
    pub denied_peers: Vec<String>,
    /// Relayed bandwidth cap per allocation, bits per second, both directions together
    /// (coturn's `max-bps`); datagrams over it are dropped. Default 0: no cap.
    pub max_bps: u64,
}

impl Default for TurnSection {
    /// The reasons are on the fields.
    fn default() -> Self {
        TurnSection {
            listen: None,
            tls_listen: None,
            tls_host: None,
            users: Vec::new(),
            secret: None,
            relay_ip: None,
            relay_port_min: 49152,
            relay_port_max: 65535,
            realm: "tern".into(),
            max_allocations: 10_000,
            max_allocations_per_user: 100,
            credential_lifetime: 86_400,
            allowed_peers: Vec::new(),
            denied_peers: Vec::new(),
            max_bps: 0,
        }
    }
}

impl TurnSection {
    /// The peer policy's extra ranges: (allowed, denied); validated to parse.
    pub fn peer_ranges(&self) -> (Vec<Cidr>, Vec<Cidr>) {
        let parse = |v: &Vec<String>| v.iter().filter_map(|s| s.parse().ok()).collect();
        (parse(&self.allowed_peers), parse(&self.denied_peers))
    }

    /// The users as `(name, password)`; validated to contain a `:`.
    pub fn user_pairs(&self) -> Vec<(String, String)> {
        self.users
            .iter()
            .filter_map(|u| u.split_once(':'))
            .map(|(n, p)| (n.to_string(), p.to_string()))
            .collect()
    }

    /// The first bad key of the section.
    pub fn check(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, message: &str| Err(ConfigError::invalid(key, message));
        for (i, u) in self.users.iter().enumerate() {
            if !u
                .split_once(':')
                .is_some_and(|(n, p)| !n.is_empty() && !p.is_empty())
            {
                return bad(&format!("turn.users[{i}]"), "must be NAME:PASSWORD");
            }
        }
        for (list, name) in [
            (&self.allowed_peers, "allowed_peers"),
            (&self.denied_peers, "denied_peers"),
        ] {
            for (i, s) in list.iter().enumerate() {
                if let Err(e) = s.parse::<Cidr>() {
                    return bad(&format!("turn.{name}[{i}]"), &e.to_string());
                }
            }
        }
        if self.secret.as_deref().is_some_and(str::is_empty) {
            return bad("turn.secret", "must not be empty");
        }
        if self.relay_port_min == 0 || self.relay_port_min > self.relay_port_max {
            return bad(
                "turn.relay_port_min",
                "must be at least 1 and at most turn.relay_port_max",
            );
        }
        if self.realm.is_empty() || self.realm.len() > 127 {
            return bad("turn.realm", "must be 1-127 characters");
        }
        if self.max_allocations == 0 {
            return bad("turn.max_allocations", "must be at least 1");
        }
        if self.max_allocations_per_user == 0 {
            return bad("turn.max_allocations_per_user", "must be at least 1");
        }
        if !(60..=30 * 86_400).contains(&self.credential_lifetime) {
            return bad("turn.credential_lifetime", "must be between 60 and 2592000");
        }
        if self
            .relay_ip
            .is_some_and(|ip| ip.is_unspecified() || ip.is_multicast())
        {
            return bad("turn.relay_ip", "must be a unicast address");
        }
        if let Some(h) = &self.tls_host
            && (h.is_empty()
                || h.len() > 253
                || !h
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':')))
        {
            return bad(
                "turn.tls_host",
                "must be a host name or IP address (letters, digits, '.', '-', ':')",
            );
        }
        Ok(())
    }

    /// TURN over TLS needs TURN itself and the server's certificate (`has_cert`: both
    /// `server.tls_cert` and `server.tls_key` are set).
    pub fn check_tls(&self, has_cert: bool) -> Result<(), ConfigError> {
        let Some(addr) = self.tls_listen else {
            return Ok(());
        };
        let bad = |message: &str| Err(ConfigError::invalid("turn.tls_listen", message));
        if self.listen.is_none() {
            return bad("needs turn.listen (TURN over TLS shares its relays and credentials)");
        }
        if !has_cert {
            return bad("needs a certificate: server.tls_cert and server.tls_key (PEM files)");
        }
        if self.listen.is_some_and(|l| l == addr && l.port() != 0) {
            return bad("must differ from turn.listen (which takes TCP on the same port)");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    #[test]
    fn turn_section_parses_and_names_bad_keys() {
        let c = Config::parse(
            "[turn]\nlisten = \"127.0.0.1:3478\"\nusers = [\"a:b\"]\nsecret = \"s\"\nrelay_ip = \"127.0.0.1\"\n",
            "x.toml",
        )
        .expect("valid");
        assert_eq!(
            c.turn.user_pairs(),
            vec![("a".to_string(), "b".to_string())]
        );
        assert_eq!(c.turn.relay_port_min, 49152);
        for (text, key) in [
            ("[turn]\nusers = [\"nopassword\"]\n", "turn.users[0]"),
            ("[turn]\nsecret = \"\"\n", "turn.secret"),
            (
                "[turn]\nrelay_port_min = 6000\nrelay_port_max = 5000\n",
                "turn.relay_port_min",
            ),
            ("[turn]\nmax_allocations = 0\n", "turn.max_allocations"),
            ("[turn]\nrelay_ip = \"0.0.0.0\"\n", "turn.relay_ip"),
            ("[turn]\nlisten = \"nonsense\"\n", "listen"),
            ("[turn]\nlisen = \"1.2.3.4:5\"\n", "lisen"),
            (
                "[turn]\nallowed_peers = [\"10.0.0.0/8\", \"10.0.0.0/40\"]\n",
                "turn.allowed_peers[1]",
            ),
            (
                "[turn]\ndenied_peers = [\"nonsense\"]\n",
                "turn.denied_peers[0]",
            ),
            ("[turn]\ntls_host = \"a b\"\n", "turn.tls_host"),
            (
                "[turn]\nlisten = \"127.0.0.1:3478\"\ntls_listen = \"127.0.0.1:5349\"\n",
                "turn.tls_listen",
            ),
            (
                "[turn]\ntls_listen = \"127.0.0.1:5349\"\n[server]\ntls_cert = \"c.pem\"\ntls_key = \"k.pem\"\n",
                "turn.tls_listen",
            ),
            (
                "[turn]\nlisten = \"127.0.0.1:3478\"\ntls_listen = \"127.0.0.1:3478\"\n[server]\ntls_cert = \"c.pem\"\ntls_key = \"k.pem\"\n",
                "turn.tls_listen",
            ),
        ] {
            let e = Config::parse(text, "x.toml").expect_err(text);
            assert!(e.to_string().contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn names_the_bad_key() {
        assert!(TurnSection::default().check().is_ok());
        type Breaker = fn(&mut TurnSection);
        let cases: [(Breaker, &str); 12] = [
            (|t| t.users = vec![":p".into()], "turn.users[0]"),
            (
                |t| t.users = vec!["a:b".into(), "n:".into()],
                "turn.users[1]",
            ),
            (
                |t| t.denied_peers = vec!["1.2.3.4/33".into()],
                "turn.denied_peers[0]",
            ),
            (|t| t.secret = Some(String::new()), "turn.secret"),
            (|t| t.relay_port_min = 0, "turn.relay_port_min"),
            (|t| t.realm = String::new(), "turn.realm"),
            (|t| t.realm = "r".repeat(128), "turn.realm"),
            (
                |t| t.max_allocations_per_user = 0,
                "turn.max_allocations_per_user",
            ),
            (|t| t.credential_lifetime = 59, "turn.credential_lifetime"),
            (
                |t| t.credential_lifetime = 2_592_001,
                "turn.credential_lifetime",
            ),
            (|t| t.relay_ip = "224.0.0.1".parse().ok(), "turn.relay_ip"),
            (|t| t.relay_ip = "::".parse().ok(), "turn.relay_ip"),
        ];
        for (break_it, key) in cases {
            let mut t = TurnSection::default();
            break_it(&mut t);
            let e = t.check().expect_err(key);
            assert!(
                e.to_string().starts_with(&format!("config key `{key}`: ")),
                "{e}"
            );
        }
        // The bounds themselves are fine.
        let edges = TurnSection {
            relay_port_min: 1,
            relay_port_max: 1,
            realm: "r".repeat(127),
            credential_lifetime: 60,
            relay_ip: "10.1.2.3".parse().ok(),
            allowed_peers: vec!["10.0.0.0/8".into()],
            ..TurnSection::default()
        };
        assert!(edges.check().is_ok());
    }
}

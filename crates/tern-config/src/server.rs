//! The `[server]` section: listening addresses, worker counts, publisher timeouts.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;

use tern_rtc::peer_policy::Cidr;

use serde::{Deserialize, Serialize};

use super::error::ConfigError;

/// Most workers of each kind (`worker_count`, `app_worker_count`, `stream_worker_count`):
/// the media engine's viewer ids carry their worker in 8 bits.
pub const MAX_WORKERS: usize = 128;

/// Where `--rtmp` without a value listens: all interfaces, port 1935 (RTMP's registered port,
/// the one encoders assume when a URL names none).
pub const DEFAULT_RTMP: &str = "0.0.0.0:1935";

/// Where `--srt` without a value listens: all interfaces, UDP port 8890 (MediaMTX's, the one
/// encoders' SRT presets name).
pub const DEFAULT_SRT: &str = "0.0.0.0:8890";

/// Longest drain (`server.shutdown_drain_s`, `POST /v1/drain`'s `deadline_s`): a day.
pub const MAX_DRAIN_S: u64 = 86_400;

/// Default `publisher_connect_timeout` and `publisher_timeout`, seconds. 10: ICE and DTLS take
/// well under a second on any working path (a WHIP client retransmits its checks every
/// 50-500 ms), and an encoder sends dozens of packets a second, so 10 s of nothing is a dead
/// or stalled publisher, not a slow one.
pub const DEFAULT_PUBLISHER_TIMEOUT_S: u64 = 10;

/// Listening addresses.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// HTTP listener (WHEP, WHIP, pages, API). Default `0.0.0.0:8080`.
    pub http: SocketAddr,
    /// The one UDP port for all WebRTC media. Default `0.0.0.0:10000`.
    pub media: SocketAddr,
    /// Host addresses announced in ICE candidates, most preferred first: one address or a
    /// list (`candidate = ["203.0.113.7", "2001:db8::7"]`), each a candidate on the media port.
    /// Default: the media address if it is not unspecified; else `127.0.0.1` (`0.0.0.0`) or
    /// `127.0.0.1` and `::1` (`[::]`, which serves both families).
    #[serde(deserialize_with = "one_or_many")]
    pub candidate: Vec<IpAddr>,
    /// RTCP CNAME used in sender reports. Default `tern`.
    pub cname: String,
    /// Bearer token for the management API (`/v1/...` API routes, `/v1/events`,
    /// `/metrics`). Default: none, the API is open (bind `http` to a private address).
    pub api_token: Option<String>,
    /// Socket workers on the media port, each with its own socket (`SO_REUSEPORT`):
    /// OvenMediaEngine's `<Bind>...<WorkerCount>`. Default 1; 1 to 128.
    pub worker_count: usize,
    /// App workers: per-stream work (sources, ingest, rings); OvenMediaEngine's
    /// `AppWorkerCount`. Default 1; 1 to 128.
    pub app_worker_count: usize,
    /// Stream workers: per-viewer work (SRTP, RTCP, sends); OvenMediaEngine's
    /// `StreamWorkerCount`, where 0 means the app workers send. Default 1 (this is a
    /// per-core knob: raise it up to the core count when one stream worker is saturated).
    pub stream_worker_count: usize,
    /// RTMP ingest listener (`--rtmp`), e.g. `"0.0.0.0:1935"`, or `"none"` for no RTMP.
    /// Absent (`None`): [`DEFAULT_RTMP`] when that port is free; when it is taken (another
    /// tern, a test beside a server) start-up goes on without RTMP and says so. An address set
    /// here or on the command line that cannot be bound stops start-up.
    #[serde(deserialize_with = "de_rtmp", serialize_with = "ser_rtmp")]
    pub rtmp: Option<Option<SocketAddr>>,
    /// RTMPS ingest listener (`--rtmps`), e.g. `"0.0.0.0:1936"`: RTMP over TLS with the
    /// `tls_cert` certificate (reloaded as HTTPS's is), for encoders and services that send
    /// `rtmps://`. Needs `tls_cert` and `tls_key`. Default: none.
    pub rtmps: Option<SocketAddr>,
    /// SRT ingest listener (`--srt`), a UDP address such as `"0.0.0.0:8890"`
    /// ([`DEFAULT_SRT`]), or `"none"`. Default none: SRT is off unless asked for.
    #[serde(deserialize_with = "de_srt")]
    pub srt: Option<SocketAddr>,
    /// Seconds a WHIP publisher has from its answer to the end of ICE and DTLS before it is
    /// ended and its stream freed. Default 10 ([`DEFAULT_PUBLISHER_TIMEOUT_S`]); 1 to 300.
    pub publisher_connect_timeout: u64,
    /// Seconds a WHIP or RTMP publisher may go without sending media before it is ended and
    /// its stream freed. Default 10; 1 to 300.
    pub publisher_timeout: u64,
    /// HTTPS listener (`--https`), e.g. `"0.0.0.0:8443"`: everything the HTTP listener
    /// serves, over TLS with ALPN `h2` and `http/1.1`. Needs `tls_cert` and `tls_key`.
    /// Default: none.
    pub https: Option<SocketAddr>,
    /// The certificate chain for `https`, PEM, leaf first (`--tls-cert`). Watched: a
    /// renewed file is used for new connections within 10 s (and on SIGHUP).
    #[serde(serialize_with = "super::ser_path")]
    pub tls_cert: Option<PathBuf>,
    /// The private key for `tls_cert`, PEM: PKCS#8, PKCS#1 (RSA) or SEC1 (EC)
    /// (`--tls-key`).
    #[serde(serialize_with = "super::ser_path")]
    pub tls_key: Option<PathBuf>,
    /// With `https` on, the plain HTTP listener answers every request with a `308` to the
    /// same path on HTTPS instead of serving it. Default `false`.
    pub redirect_http: bool,
    /// Reverse proxies whose `X-Forwarded-For` / `Forwarded: for=` headers are believed,
    /// as CIDRs (`["127.0.0.1/32", "10.0.0.0/8"]`). For a connection from one of them the
    /// client is the right-most address in those headers that is not itself a trusted proxy:
    /// the per-address limits, admission, tokens, logs and snapshots see that address.
    /// From anyone else the headers are ignored. Default: none.
    pub trusted_proxies: Vec<String>,
    /// Certificates trusted for every `https://` tern calls (admission webhook, JWKS,
    /// `on_segment_url`, an edge's origin), as a PEM bundle, beside the system's roots: a
    /// private CA, or a service's self-signed certificate. Read at start; a file that does
    /// not load stops start-up. Default: none, the system's roots alone.
    #[serde(serialize_with = "super::ser_path")]
    pub ca_file: Option<PathBuf>,
    /// Seconds SIGTERM drains the node before it exits: no new publishers or viewers, open
    /// sessions go on until they end or this many seconds pass (`POST /v1/drain` does the
    /// same on demand). Default 0: SIGTERM stops at once. At most 86400.
    pub shutdown_drain_s: u64,
    /// Reload the configuration file when it changes (its modification time or size, looked
    /// at twice a second, then its text), as SIGHUP does: applied within a second. Default
    /// true; false: a changed file applies on SIGHUP or `POST /v1/config/reload` only.
    pub watch_config: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            http: SocketAddr::from(([0, 0, 0, 0], 8080)),
            media: SocketAddr::from(([0, 0, 0, 0], 10000)),
            candidate: Vec::new(),
            cname: "tern".into(),
            api_token: None,
            worker_count: 1,
            app_worker_count: 1,
            stream_worker_count: 1,
            rtmp: None,
            rtmps: None,
            srt: None,
            publisher_connect_timeout: DEFAULT_PUBLISHER_TIMEOUT_S,
            publisher_timeout: DEFAULT_PUBLISHER_TIMEOUT_S,
            https: None,
            tls_cert: None,
            tls_key: None,
            redirect_http: false,
            trusted_proxies: Vec::new(),
            ca_file: None,
            shutdown_drain_s: 0,
            watch_config: true,
        }
    }
}

impl ServerConfig {
    /// The first bad key of the section.
    pub fn check(&self) -> Result<(), ConfigError> {
        let max = MAX_WORKERS;
        if !(1..=max).contains(&self.worker_count) {
            return Err(ConfigError::invalid(
                "server.worker_count",
                format!("must be between 1 and {max}"),
            ));
        }
        if !(1..=max).contains(&self.app_worker_count) {
            return Err(ConfigError::invalid(
                "server.app_worker_count",
                format!("must be between 1 and {max}"),
            ));
        }
        if self.stream_worker_count > max {
            return Err(ConfigError::invalid(
                "server.stream_worker_count",
                format!("must be between 0 and {max} (0: app workers send)"),
            ));
        }
        for (key, v) in [
            (
                "server.publisher_connect_timeout",
                self.publisher_connect_timeout,
            ),
            ("server.publisher_timeout", self.publisher_timeout),
        ] {
            if !(1..=300).contains(&v) {
                return Err(ConfigError::invalid(
                    key,
                    "must be between 1 and 300 (seconds)",
                ));
            }
        }
        if self.shutdown_drain_s > MAX_DRAIN_S {
            return Err(ConfigError::invalid(
                "server.shutdown_drain_s",
                format!("must be between 0 and {MAX_DRAIN_S} (seconds)"),
            ));
        }
        for (i, s) in self.trusted_proxies.iter().enumerate() {
            if let Err(e) = s.parse::<Cidr>() {
                return Err(ConfigError::invalid(
                    format!("server.trusted_proxies[{i}]"),
                    format!("{s:?} is not a CIDR: {e}"),
                ));
            }
        }
        if self.candidate.len() > MAX_CANDIDATES {
            return Err(ConfigError::invalid(
                "server.candidate",
                format!("at most {MAX_CANDIDATES} addresses"),
            ));
        }
        for (i, ip) in self.candidate.iter().enumerate() {
            let key = if self.candidate.len() == 1 {
                "server.candidate".to_string()
            } else {
                format!("server.candidate[{i}]")
            };
            if ip.is_unspecified() || ip.is_multicast() {
                return Err(ConfigError::invalid(
                    key,
                    format!("{ip} cannot be reached: announce the address viewers reach"),
                ));
            }
            if self.candidate[..i].contains(ip) {
                return Err(ConfigError::invalid(key, format!("{ip} is listed twice")));
            }
            let media = self.media.ip();
            let v4 = ip.to_canonical().is_ipv4();
            let reachable = match media {
                IpAddr::V6(m) if m.is_unspecified() => true,
                m if m.is_unspecified() => v4,
                m => m.to_canonical().is_ipv4() == v4,
            };
            if !reachable {
                return Err(ConfigError::invalid(
                    key,
                    format!(
                        "{ip} is not of the media socket's family (server.media = {}); bind media to [::]:PORT to serve both",
                        self.media
                    ),
                ));
            }
        }
        for (on, what) in [
            (self.https.is_some(), "server.https"),
            (self.rtmps.is_some(), "server.rtmps"),
        ] {
            if on && self.tls_cert.is_none() {
                return Err(ConfigError::invalid(
                    "server.tls_cert",
                    format!("{what} needs a certificate (PEM file)"),
                ));
            }
            if on && self.tls_key.is_none() {
                return Err(ConfigError::invalid(
                    "server.tls_key",
                    format!("{what} needs a private key (PEM file)"),
                ));
            }
        }
        if self.https.is_none() && self.redirect_http {
            return Err(ConfigError::invalid(
                "server.redirect_http",
                "redirects to HTTPS, so it needs server.https",
            ));
        }
        Ok(())
    }

    /// The addresses announced in ICE candidates, most preferred first: `candidate`, or its
    /// default for the media address `media` (the bound one).
    pub fn candidates(&self, media: SocketAddr) -> Vec<IpAddr> {
        if !self.candidate.is_empty() {
            return self.candidate.clone();
        }
        match media.ip() {
            IpAddr::V6(m) if m.is_unspecified() => {
                vec![Ipv4Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into()]
            }
            m if m.is_unspecified() => vec![Ipv4Addr::LOCALHOST.into()],
            m => vec![m],
        }
    }

    /// The trusted proxies; validated to parse.
    pub fn trusted_proxy_ranges(&self) -> Vec<Cidr> {
        self.trusted_proxies
            .iter()
            .filter_map(|s| s.parse().ok())
            .collect()
    }
}

/// Most addresses in `candidate`: each is a line in every answer.
pub const MAX_CANDIDATES: usize = 8;

/// One address or a list of them (serde's untagged enums would only say that neither matched).
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<IpAddr>, D::Error> {
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = Vec<IpAddr>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an IP address or a list of IP addresses")
        }
        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
            s.parse()
                .map(|ip| vec![ip])
                .map_err(|_| E::custom(format!("{s:?} is not an IP address")))
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut a: A,
        ) -> Result<Self::Value, A::Error> {
            let mut v = Vec::new();
            while let Some(ip) = a.next_element()? {
                v.push(ip);
            }
            Ok(v)
        }
    }
    d.deserialize_any(V)
}

/// Parses an RTMP listener setting: `none` (off) or a socket address.
pub fn parse_rtmp(s: &str) -> Result<Option<SocketAddr>, String> {
    if s.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    s.parse()
        .map(Some)
        .map_err(|_| format!("`{s}` is neither `none` nor an address like 0.0.0.0:1935"))
}

/// Parses an SRT listener setting: `none` (off) or a socket address.
pub fn parse_srt(s: &str) -> Result<Option<SocketAddr>, String> {
    if s.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    s.parse()
        .map(Some)
        .map_err(|_| format!("`{s}` is neither `none` nor an address like {DEFAULT_SRT}"))
}

fn de_srt<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    let s = String::deserialize(d)?;
    parse_srt(&s).map_err(serde::de::Error::custom)
}

/// `rtmp` as the file spells it: absent (`None`), `"none"` or the address.
fn ser_rtmp<S: serde::Serializer>(v: &Option<Option<SocketAddr>>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        None => s.serialize_none(),
        Some(None) => s.serialize_some("none"),
        Some(Some(a)) => s.serialize_some(a),
    }
}

fn de_rtmp<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<SocketAddr>>, D::Error> {
    let s = String::deserialize(d)?;
    parse_rtmp(&s).map(Some).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    #[test]
    fn https_needs_its_pair_and_proxies_must_be_cidrs() {
        let with = |f: fn(&mut ServerConfig)| {
            let mut c = ServerConfig::default();
            f(&mut c);
            c.check().err().map(|e| e.to_string())
        };
        let https: SocketAddr = "127.0.0.1:8443".parse().expect("addr");
        let e = with(|c| c.https = Some("127.0.0.1:8443".parse().expect("addr")));
        assert!(e.is_some_and(|e| e.contains("server.tls_cert")));
        let e = with(|c| {
            c.https = Some("127.0.0.1:8443".parse().expect("addr"));
            c.tls_cert = Some("a.pem".into());
        });
        assert!(e.is_some_and(|e| e.contains("server.tls_key")));
        let e = with(|c| c.redirect_http = true);
        assert!(e.is_some_and(|e| e.contains("server.redirect_http")));
        // RTMPS needs the same pair.
        let e = with(|c| c.rtmps = Some("127.0.0.1:1936".parse().expect("addr")));
        assert!(e.is_some_and(|e| e.contains("server.tls_cert") && e.contains("server.rtmps")));
        let e = with(|c| {
            c.rtmps = Some("127.0.0.1:1936".parse().expect("addr"));
            c.tls_cert = Some("a.pem".into());
        });
        assert!(e.is_some_and(|e| e.contains("server.tls_key")));
        let e = with(|c| c.trusted_proxies = vec!["10.0.0.0/8".into(), "10.0.0.0/40".into()]);
        assert!(e.is_some_and(|e| e.contains("server.trusted_proxies[1]")));
        let ok = ServerConfig {
            https: Some(https),
            tls_cert: Some("a.pem".into()),
            tls_key: Some("a.key".into()),
            redirect_http: true,
            trusted_proxies: vec!["127.0.0.1/32".into(), "::1/128".into()],
            ..ServerConfig::default()
        };
        assert!(ok.check().is_ok());
        assert_eq!(ok.trusted_proxy_ranges().len(), 2);
    }

    #[test]
    fn candidates_are_one_address_or_a_list_each_reachable() {
        let parse = |t: &str| Config::parse(t, "test").map(|c| c.server);
        let one = parse("[server]\ncandidate = \"203.0.113.7\"\n").expect("one");
        assert_eq!(
            one.candidate,
            ["203.0.113.7".parse::<IpAddr>().expect("ip")]
        );
        let both = parse(
            "[server]\nmedia = \"[::]:10000\"\ncandidate = [\"203.0.113.7\", \"2001:db8::7\"]\n",
        )
        .expect("a list on a dual-stack socket");
        assert_eq!(both.candidates(both.media).len(), 2);
        let err = |t: &str| parse(t).err().map(|e| e.to_string()).unwrap_or_default();
        // A v6 address on an IPv4 media socket, a duplicate, an unspecified address.
        let e = err("[server]\ncandidate = [\"203.0.113.7\", \"2001:db8::7\"]\n");
        assert!(
            e.contains("server.candidate[1]") && e.contains("[::]"),
            "{e}"
        );
        let e = err("[server]\nmedia = \"[::]:1\"\ncandidate = [\"::1\", \"::1\"]\n");
        assert!(
            e.contains("server.candidate[1]") && e.contains("twice"),
            "{e}"
        );
        let e = err("[server]\ncandidate = \"0.0.0.0\"\n");
        assert!(e.contains("server.candidate"), "{e}");
        assert!(!err("[server]\ncandidate = 7\n").is_empty());
        // Defaults: the specific media address; loopback of each family the socket serves.
        let d = ServerConfig::default();
        let ips = |m: &str| d.candidates(m.parse().expect("addr"));
        assert_eq!(
            ips("192.0.2.1:9"),
            ["192.0.2.1".parse::<IpAddr>().expect("ip")]
        );
        assert_eq!(ips("0.0.0.0:9"), [IpAddr::from(Ipv4Addr::LOCALHOST)]);
        assert_eq!(
            ips("[::]:9"),
            [
                IpAddr::from(Ipv4Addr::LOCALHOST),
                Ipv6Addr::LOCALHOST.into()
            ]
        );
    }

    #[test]
    fn the_default_passes_its_check() {
        assert!(ServerConfig::default().check().is_ok());
        let max = ServerConfig {
            worker_count: MAX_WORKERS,
            app_worker_count: MAX_WORKERS,
            stream_worker_count: 0,
            publisher_connect_timeout: 1,
            publisher_timeout: 300,
            ..ServerConfig::default()
        };
        assert!(max.check().is_ok());
    }

    #[test]
    fn names_the_bad_key() {
        type Breaker = fn(&mut ServerConfig);
        let cases: [(Breaker, &str, &str); 8] = [
            (
                |s| s.worker_count = 0,
                "server.worker_count",
                "must be between 1 and 128",
            ),
            (
                |s| s.worker_count = 129,
                "server.worker_count",
                "must be between 1 and 128",
            ),
            (
                |s| s.app_worker_count = 0,
                "server.app_worker_count",
                "must be between 1 and 128",
            ),
            (
                |s| s.stream_worker_count = 129,
                "server.stream_worker_count",
                "must be between 0 and 128 (0: app workers send)",
            ),
            (
                |s| s.publisher_connect_timeout = 0,
                "server.publisher_connect_timeout",
                "must be between 1 and 300 (seconds)",
            ),
            (
                |s| s.publisher_timeout = 301,
                "server.publisher_timeout",
                "must be between 1 and 300 (seconds)",
            ),
            (
                |s| s.shutdown_drain_s = 86_401,
                "server.shutdown_drain_s",
                "must be between 0 and 86400 (seconds)",
            ),
            (
                |s| s.publisher_timeout = 0,
                "server.publisher_timeout",
                "must be between 1 and 300 (seconds)",
            ),
        ];
        for (break_it, key, message) in cases {
            let mut s = ServerConfig::default();
            break_it(&mut s);
            let e = s.check().expect_err(key);
            assert_eq!(e.to_string(), format!("config key `{key}`: {message}"));
        }
    }

    #[test]
    fn publisher_timeouts_are_named() {
        for (text, key) in [
            (
                "[server]\npublisher_timeout = 0\n",
                "server.publisher_timeout",
            ),
            (
                "[server]\npublisher_connect_timeout = 301\n",
                "server.publisher_connect_timeout",
            ),
        ] {
            let e = Config::parse(text, "x.toml").expect_err(text);
            assert!(e.to_string().contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn rtmp_listener() {
        assert_eq!(Config::default().server.rtmp, None);
        assert_eq!(
            parse_rtmp(DEFAULT_RTMP),
            Ok(Some(SocketAddr::from(([0, 0, 0, 0], 1935))))
        );
        let c = Config::parse("[server]\nrtmp = \"127.0.0.1:1936\"\n", "x.toml").expect("valid");
        assert_eq!(
            c.server.rtmp,
            Some(Some(SocketAddr::from(([127, 0, 0, 1], 1936))))
        );
        let c = Config::parse("[server]\nrtmp = \"none\"\n", "x.toml").expect("valid");
        assert_eq!(c.server.rtmp, Some(None));
        let e = Config::parse("[server]\nrtmp = \"yes\"\n", "x.toml").expect_err("bad");
        assert!(e.to_string().contains("rtmp"), "{e}");
    }
}

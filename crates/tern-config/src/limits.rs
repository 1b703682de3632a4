//! The `[limits]` section: what one client address may hold at once.

use serde::{Deserialize, Serialize};
use tern_rtc::peer_policy::Cidr;

use super::error::ConfigError;

/// The `[limits]` section: what one client address (IPv4, or IPv6 /64) may hold at once.
/// Past a limit HTTP answers 429 with `Retry-After`, RTMP and TURN refuse; the global caps
/// (`tunables.max_handshakes`, `tunables.max_viewers`, `turn.max_allocations`, the RTMP
/// connection cap) still apply on top.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsSection {
    /// WHEP, WHIP and OME-signalled sessions that have not finished ICE and DTLS. Default 50:
    /// a page starts one at a time, and a whole office behind one NAT rarely starts 50 in the
    /// same second, while one address alone can no longer fill the global handshake cap.
    pub pending_sessions_per_ip: usize,
    /// Open HTTP connections (WHEP, WHIP, API, pages, WebSockets). Default 64: a browser
    /// opens at most 6 per origin, so this leaves room for a NAT with a dozen browsers.
    pub http_connections_per_ip: usize,
    /// Open OvenMediaEngine signalling WebSockets. Default 32: one per playing tab.
    pub ome_connections_per_ip: usize,
    /// Open RTMP connections. Default 8: an encoder publishes one stream per connection.
    pub rtmp_connections_per_ip: usize,
    /// SRT connections, counted from the first handshake packet (so handshakes that are
    /// never finished count until they are dropped, 5 s later). Default 8: an encoder
    /// publishes one stream per connection.
    pub srt_connections_per_ip: usize,
    /// TURN allocations (UDP and TCP together). Default 64: a viewer uses one or two.
    pub turn_allocations_per_ip: usize,
    /// Streams publishers may make on names not declared in any app's `streams` (each a
    /// slot reserved at start; a publish past them gets 503). Default 1024.
    pub dynamic_streams: usize,
    /// Client ranges (CIDR) none of these limits count, except the TURN allocation quota.
    /// Default loopback (`127.0.0.0/8`, `::1/128`): a load tester on the same host, or a
    /// reverse proxy in front of tern, whose clients all share its address (limit them at
    /// the proxy). `[]` counts everyone.
    pub exempt: Vec<String>,
}

impl Default for LimitsSection {
    /// The reasons are on the fields.
    fn default() -> Self {
        LimitsSection {
            pending_sessions_per_ip: 50,
            http_connections_per_ip: 64,
            ome_connections_per_ip: 32,
            rtmp_connections_per_ip: 8,
            srt_connections_per_ip: 8,
            turn_allocations_per_ip: 64,
            dynamic_streams: 1024,
            exempt: vec!["127.0.0.0/8".into(), "::1/128".into()],
        }
    }
}

impl LimitsSection {
    /// The exempt ranges; validated to parse.
    pub fn exempt_ranges(&self) -> Vec<Cidr> {
        self.exempt.iter().filter_map(|s| s.parse().ok()).collect()
    }

    /// The first bad key of the section.
    pub fn check(&self) -> Result<(), ConfigError> {
        for (key, v) in [
            (
                "limits.pending_sessions_per_ip",
                self.pending_sessions_per_ip,
            ),
            (
                "limits.http_connections_per_ip",
                self.http_connections_per_ip,
            ),
            ("limits.ome_connections_per_ip", self.ome_connections_per_ip),
            (
                "limits.rtmp_connections_per_ip",
                self.rtmp_connections_per_ip,
            ),
            ("limits.srt_connections_per_ip", self.srt_connections_per_ip),
            (
                "limits.turn_allocations_per_ip",
                self.turn_allocations_per_ip,
            ),
        ] {
            if !(1..=100_000).contains(&v) {
                return Err(ConfigError::invalid(key, "must be between 1 and 100000"));
            }
        }
        for (i, s) in self.exempt.iter().enumerate() {
            if let Err(e) = s.parse::<Cidr>() {
                return Err(ConfigError::invalid(
                    format!("limits.exempt[{i}]"),
                    e.to_string(),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    #[test]
    fn names_the_bad_key() {
        let d = LimitsSection::default();
        assert!(d.check().is_ok());
        assert_eq!(d.exempt_ranges().len(), 2);
        type Breaker = fn(&mut LimitsSection);
        let cases: [(Breaker, &str); 8] = [
            (
                |l| l.pending_sessions_per_ip = 0,
                "limits.pending_sessions_per_ip",
            ),
            (
                |l| l.http_connections_per_ip = 100_001,
                "limits.http_connections_per_ip",
            ),
            (
                |l| l.ome_connections_per_ip = 0,
                "limits.ome_connections_per_ip",
            ),
            (
                |l| l.rtmp_connections_per_ip = 0,
                "limits.rtmp_connections_per_ip",
            ),
            (
                |l| l.turn_allocations_per_ip = 0,
                "limits.turn_allocations_per_ip",
            ),
            (|l| l.exempt = vec!["nonsense".into()], "limits.exempt[0]"),
            (|l| l.exempt.push("10.0.0.0/33".into()), "limits.exempt[2]"),
            (
                |l| l.exempt = vec!["::1/128".into(), "::1/129".into()],
                "limits.exempt[1]",
            ),
        ];
        for (break_it, key) in cases {
            let mut l = LimitsSection::default();
            break_it(&mut l);
            let e = l.check().expect_err(key);
            assert!(
                e.to_string().starts_with(&format!("config key `{key}`: ")),
                "{e}"
            );
        }
        // No limit on dynamic streams beyond memory; an empty exempt list counts everyone.
        let l = LimitsSection {
            dynamic_streams: 0,
            exempt: Vec::new(),
            ..LimitsSection::default()
        };
        assert!(l.check().is_ok());
    }

    #[test]
    fn zero_limits_are_named() {
        for (text, key) in [
            (
                "[limits]\npending_sessions_per_ip = 0\n",
                "limits.pending_sessions_per_ip",
            ),
            (
                "[limits]\nrtmp_connections_per_ip = 0\n",
                "limits.rtmp_connections_per_ip",
            ),
        ] {
            let e = Config::parse(text, "x.toml").expect_err(text);
            assert!(e.to_string().contains(key), "{text}: {e}");
        }
    }
}

//! The `[tunables]` section: packet sizes, rings, the buffer pool and the global session caps.

use serde::{Deserialize, Serialize};
use tern_proto::srtp::SrtpProfile;

use super::error::ConfigError;

/// An SRTP protection profile as `[tunables] srtp_profiles` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum SrtpProfileName {
    /// `SRTP_AEAD_AES_128_GCM` (RFC 7714).
    #[serde(rename = "aes128gcm")]
    Aes128Gcm,
    /// `SRTP_AEAD_AES_256_GCM` (RFC 7714).
    #[serde(rename = "aes256gcm")]
    Aes256Gcm,
    /// `SRTP_AES128_CM_HMAC_SHA1_80` (RFC 5764).
    #[serde(rename = "aes128cm")]
    Aes128Cm,
}

impl From<SrtpProfileName> for SrtpProfile {
    fn from(n: SrtpProfileName) -> Self {
        match n {
            SrtpProfileName::Aes128Gcm => SrtpProfile::AeadAes128Gcm,
            SrtpProfileName::Aes256Gcm => SrtpProfile::AeadAes256Gcm,
            SrtpProfileName::Aes128Cm => SrtpProfile::Aes128CmHmacSha1_80,
        }
    }
}

/// Tunables, each default justified.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Tunables {
    /// Largest RTP payload the packetizer and pool handle. Default 1200: fits a 1280-byte
    /// IPv6 minimum MTU path with IP/UDP/RTP/SRTP headers and the abs-capture-time extension.
    pub max_payload: usize,
    /// Video ring length in packets. Default 2048: ~5 s at 4 Mbps (≈400 packets/s), so a NACK
    /// arriving within several round trips and a 1 s GOP keyframe are always still held.
    pub video_ring: usize,
    /// Audio ring length in packets. Default 256: ~5 s of 20 ms Opus frames.
    pub audio_ring: usize,
    /// Packet buffers allocated and prefaulted at start. Default 4096: both rings full
    /// (2048 + 256) plus headroom for ingest bursts.
    pub pool_initial: usize,
    /// Free packet buffers kept before returning extras to the system. Default 8192.
    pub pool_max_free: usize,
    /// Seconds between housekeeping passes that give back what a burst left: packet buffers
    /// above `pool_initial` that the period since the last pass did not need, then the C
    /// allocator's free pages (glibc `malloc_trim`) once a MiB or more of heap was freed.
    /// Default 10; 0 keeps everything.
    pub pool_trim_s: u64,
    /// Maximum concurrent DTLS handshakes; further WHEP requests get 503 + Retry-After.
    /// Default 2000: at ~5 ms per handshake a burst of this size completes within seconds and
    /// bounds transient handshake memory (tens of KiB each) to tens of MiB.
    pub max_handshakes: usize,
    /// Maximum viewers in total. Default 20000: the open-file limit does not apply (one UDP
    /// port), memory at ~4 KiB per viewer is ~80 MiB.
    pub max_viewers: usize,
    /// SRTP protection profiles tern picks as the DTLS server, most preferred first, for
    /// viewers and WHIP publishers alike; a profile left out is never picked. Default
    /// `["aes128gcm", "aes256gcm", "aes128cm"]`: AES-128-GCM seals ~10 % cheaper than
    /// AES-256-GCM with the same tag and every browser offers it (BENCHMARKS.md).
    pub srtp_profiles: Vec<SrtpProfileName>,
    /// UDP GSO (`UDP_SEGMENT`) on the viewer fan-out: each viewer's run of equal-size
    /// packets in a send batch leaves as one message the kernel cuts into datagrams.
    /// Default `auto`: on when the kernel supports it (Linux 4.18+, probed at start), off
    /// for good after a GSO send fails with `EIO` or `EINVAL` (that batch is sent again
    /// without it). On this kind of machine it sends several times the packets per
    /// CPU-second of plain `sendmmsg` (BENCHMARKS.md). `off` never uses it.
    pub gso: GsoMode,
    /// A viewer of a single-layer stream whose bandwidth estimate stays below the stream's
    /// video rate has its video paused (its audio goes on) and resumed at a keyframe when
    /// probes find room again, with `viewer.video_paused` and `viewer.video_resumed`
    /// events. Its estimator starts only once its path shows trouble (2 % loss in a
    /// receiver report, or a NACK), and needs transport-wide
    /// feedback with RTX negotiated (browsers, pion, GStreamer). Default `true`; `false`
    /// sends every viewer all the video, whatever its path.
    pub pause_video_below_estimate: bool,
}

/// The values of `tunables.gso`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GsoMode {
    /// On when the kernel supports it.
    #[default]
    Auto,
    /// Never.
    Off,
}

impl Default for Tunables {
    /// The reasons are on the fields.
    fn default() -> Self {
        Tunables {
            max_payload: 1200,
            video_ring: 2048,
            audio_ring: 256,
            pool_initial: 4096,
            pool_max_free: 8192,
            pool_trim_s: 10,
            max_handshakes: 2000,
            max_viewers: 20000,
            srtp_profiles: vec![
                SrtpProfileName::Aes128Gcm,
                SrtpProfileName::Aes256Gcm,
                SrtpProfileName::Aes128Cm,
            ],
            gso: GsoMode::Auto,
            pause_video_below_estimate: true,
        }
    }
}

impl Tunables {
    /// The first bad key of the section.
    pub fn check(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, message: &str| Err(ConfigError::invalid(key, message));
        if !(200..=1400).contains(&self.max_payload) {
            return bad("tunables.max_payload", "must be between 200 and 1400");
        }
        if !(64..=65536).contains(&self.video_ring) {
            return bad("tunables.video_ring", "must be between 64 and 65536");
        }
        if !(16..=65536).contains(&self.audio_ring) {
            return bad("tunables.audio_ring", "must be between 16 and 65536");
        }
        if self.pool_max_free < self.pool_initial {
            return bad(
                "tunables.pool_max_free",
                "must be at least tunables.pool_initial",
            );
        }
        if self.pool_trim_s > 86_400 {
            return bad("tunables.pool_trim_s", "must be at most 86400 (a day)");
        }
        if self.max_handshakes == 0 {
            return bad("tunables.max_handshakes", "must be at least 1");
        }
        if self.max_viewers == 0 {
            return bad("tunables.max_viewers", "must be at least 1");
        }
        let p = &self.srtp_profiles;
        if p.is_empty() || (1..p.len()).any(|i| p[..i].contains(&p[i])) {
            return bad(
                "tunables.srtp_profiles",
                "must list one or more of \"aes128gcm\", \"aes256gcm\", \"aes128cm\", each once",
            );
        }
        Ok(())
    }

    /// `srtp_profiles` as the DTLS layers take them.
    pub fn srtp_profiles(&self) -> Vec<SrtpProfile> {
        self.srtp_profiles.iter().map(|&p| p.into()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_bad_key() {
        assert!(Tunables::default().check().is_ok());
        type Breaker = fn(&mut Tunables);
        let cases: [(Breaker, &str); 12] = [
            (|t| t.max_payload = 199, "tunables.max_payload"),
            (|t| t.max_payload = 1401, "tunables.max_payload"),
            (|t| t.video_ring = 63, "tunables.video_ring"),
            (|t| t.audio_ring = 65537, "tunables.audio_ring"),
            (|t| t.audio_ring = 15, "tunables.audio_ring"),
            (|t| t.pool_max_free = 4095, "tunables.pool_max_free"),
            (|t| t.pool_initial = 8193, "tunables.pool_max_free"),
            (|t| t.pool_trim_s = 86_401, "tunables.pool_trim_s"),
            (|t| t.max_handshakes = 0, "tunables.max_handshakes"),
            (|t| t.max_viewers = 0, "tunables.max_viewers"),
            (|t| t.srtp_profiles.clear(), "tunables.srtp_profiles"),
            (
                |t| t.srtp_profiles = vec![SrtpProfileName::Aes128Gcm; 2],
                "tunables.srtp_profiles",
            ),
        ];
        for (break_it, key) in cases {
            let mut t = Tunables::default();
            break_it(&mut t);
            let e = t.check().expect_err(key);
            assert!(
                e.to_string().starts_with(&format!("config key `{key}`: ")),
                "{e}"
            );
        }
        // The bounds themselves are fine.
        let edges = Tunables {
            max_payload: 200,
            video_ring: 65536,
            audio_ring: 16,
            pool_initial: 0,
            pool_max_free: 0,
            pool_trim_s: 86_400,
            max_handshakes: 1,
            max_viewers: 1,
            srtp_profiles: vec![SrtpProfileName::Aes128Cm],
            gso: GsoMode::Off,
            pause_video_below_estimate: false,
        };
        assert!(edges.check().is_ok());
    }

    #[test]
    fn gso_is_auto_or_off() {
        let t: Tunables = toml::from_str("gso = \"off\"").expect("off");
        assert_eq!(t.gso, GsoMode::Off);
        let t: Tunables = toml::from_str("gso = \"auto\"").expect("auto");
        assert_eq!(t.gso, GsoMode::Auto);
        assert_eq!(Tunables::default().gso, GsoMode::Auto);
        assert!(toml::from_str::<Tunables>("gso = \"on\"").is_err());
    }

    #[test]
    fn video_pauses_below_the_estimate_unless_turned_off() {
        assert!(Tunables::default().pause_video_below_estimate);
        let t: Tunables = toml::from_str("pause_video_below_estimate = false").expect("false");
        assert!(!t.pause_video_below_estimate);
        assert!(toml::from_str::<Tunables>("pause_video_below_estimate = 1").is_err());
    }
}

//! The `[hls]` section: Low-Latency HLS egress.

use serde::{Deserialize, Serialize};

use super::error::ConfigError;

/// The `[hls]` section: every H264 stream also as Low-Latency HLS (CMAF fMP4) at
/// `/{app}/{stream}/index.m3u8`, packaged only while someone reads it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HlsSection {
    /// Serve HLS at all. Default true.
    pub enabled: bool,
    /// Longest partial segment (ms). Default 500: Apple's guidance is 0.2-1 s; half a second
    /// keeps hls.js two or three parts (~1.5 s) behind live with a request every 0.5 s.
    pub part_target_ms: u64,
    /// Shortest segment (ms); a segment ends at the first keyframe after it. Default 2000:
    /// with a 1-2 s GOP every keyframe starts a segment, and a CDN caches one object per
    /// 2 s instead of one per part.
    pub segment_target_ms: u64,
    /// Shortest segment (ms) of a ladder (a stream packaged as several variants: simulcast
    /// layers or renditions). Default 1000. hls.js (1.7) measures its download rate and
    /// abandons a variant the link cannot carry only at the start of a segment once it is
    /// behind the live edge (it loads the rest of a segment's parts in a row), so a
    /// player whose link drops must get through the rest of a segment before it can move
    /// down: with 1.5 s of buffer and its link cut to 400 kbit/s, it stalled over 2 s in five
    /// of eight watches at 2 s, in none of 22 at 1 s (BENCHMARKS.md, "LL-HLS ladders: how
    /// long hls.js stalls"). A ladder lists and keeps the same span of time as a single
    /// variant (`window` × `segment_target_ms`), in more segments.
    pub ladder_segment_target_ms: u64,
    /// Complete segments listed and kept (older ones are freed). Default 6: 12 s at the
    /// default target, room for a player that starts at the live edge and a short stall.
    pub window: usize,
    /// A session (an admitted player) ends after this many seconds without a request; a
    /// stream's packaging stops when its last session ends. Default 30.
    pub session_timeout_s: u64,
    /// HLS sessions at once, all streams. Default 10,000: a session is a few hundred bytes;
    /// the packaged bytes are per stream, not per session.
    pub max_sessions: usize,
    /// HLS sessions one client address may hold (see `[limits]`; exempt ranges apply).
    /// Default 50.
    pub sessions_per_ip: usize,
    /// Where the player page loads hls.js from when it falls back to HLS (browsers without
    /// native HLS). Default `/assets/hls.min.js`, the pinned hls.js built into tern, so the
    /// fallback needs no other host; an `http(s)://` URL loads it from elsewhere.
    pub player_script: String,
}

impl Default for HlsSection {
    /// The reasons are on the fields.
    fn default() -> Self {
        HlsSection {
            enabled: true,
            part_target_ms: 500,
            segment_target_ms: 2000,
            ladder_segment_target_ms: 1000,
            window: 6,
            session_timeout_s: 30,
            max_sessions: 10_000,
            sessions_per_ip: 50,
            player_script: "/assets/hls.min.js".into(),
        }
    }
}

impl HlsSection {
    /// Complete segments a ladder lists and keeps: the span of `window` segments of
    /// `segment_target_ms` in segments of `ladder_segment_target_ms` (at most 100).
    pub fn ladder_window(&self) -> usize {
        let span = self.window as u64 * self.segment_target_ms;
        let n = span.div_ceil(self.ladder_segment_target_ms.max(1));
        let n = usize::try_from(n).unwrap_or(usize::MAX).max(self.window);
        n.min(100)
    }

    /// The first bad key of the section.
    pub fn check(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, message: &str| Err(ConfigError::invalid(key, message));
        if !(100..=5000).contains(&self.part_target_ms) {
            return bad("hls.part_target_ms", "must be between 100 and 5000");
        }
        if self.segment_target_ms < self.part_target_ms || self.segment_target_ms > 60_000 {
            return bad(
                "hls.segment_target_ms",
                "must be at least hls.part_target_ms and at most 60000",
            );
        }
        if self.ladder_segment_target_ms < self.part_target_ms
            || self.ladder_segment_target_ms > self.segment_target_ms
        {
            return bad(
                "hls.ladder_segment_target_ms",
                "must be at least hls.part_target_ms and at most hls.segment_target_ms",
            );
        }
        if !(2..=100).contains(&self.window) {
            return bad("hls.window", "must be between 2 and 100 (segments)");
        }
        let script = &self.player_script;
        if !(script.starts_with("https://")
            || script.starts_with("http://")
            || script.starts_with('/'))
            || script.contains(['"', '<', '>'])
        {
            return bad(
                "hls.player_script",
                "must be an http(s) URL or an absolute path, without quotes or angle brackets",
            );
        }
        if !(5..=3600).contains(&self.session_timeout_s) {
            return bad("hls.session_timeout_s", "must be between 5 and 3600");
        }
        for (key, v) in [
            ("hls.max_sessions", self.max_sessions),
            ("hls.sessions_per_ip", self.sessions_per_ip),
        ] {
            if v == 0 {
                return bad(key, "must be at least 1");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_bad_key() {
        assert!(HlsSection::default().check().is_ok());
        type Breaker = fn(&mut HlsSection);
        let cases: [(Breaker, &str); 14] = [
            (|h| h.part_target_ms = 99, "hls.part_target_ms"),
            (|h| h.part_target_ms = 5001, "hls.part_target_ms"),
            (|h| h.segment_target_ms = 499, "hls.segment_target_ms"),
            (|h| h.segment_target_ms = 60_001, "hls.segment_target_ms"),
            (
                |h| h.ladder_segment_target_ms = 499,
                "hls.ladder_segment_target_ms",
            ),
            (
                |h| h.ladder_segment_target_ms = 2001,
                "hls.ladder_segment_target_ms",
            ),
            (|h| h.window = 1, "hls.window"),
            (|h| h.window = 101, "hls.window"),
            (
                |h| h.player_script = "hls.min.js".into(),
                "hls.player_script",
            ),
            (
                |h| h.player_script = "/js/hls.js\"><script>".into(),
                "hls.player_script",
            ),
            (|h| h.session_timeout_s = 4, "hls.session_timeout_s"),
            (|h| h.session_timeout_s = 3601, "hls.session_timeout_s"),
            (|h| h.max_sessions = 0, "hls.max_sessions"),
            (|h| h.sessions_per_ip = 0, "hls.sessions_per_ip"),
        ];
        for (break_it, key) in cases {
            let mut h = HlsSection::default();
            break_it(&mut h);
            let e = h.check().expect_err(key);
            assert!(
                e.to_string().starts_with(&format!("config key `{key}`: ")),
                "{e}"
            );
        }
        // The bounds themselves are fine, and a local copy of hls.js.
        let edges = HlsSection {
            part_target_ms: 100,
            segment_target_ms: 100,
            ladder_segment_target_ms: 100,
            window: 100,
            session_timeout_s: 5,
            player_script: "/static/hls.min.js".into(),
            ..HlsSection::default()
        };
        assert!(edges.check().is_ok());
    }

    #[test]
    fn a_ladder_lists_the_same_span_in_more_segments() {
        let h = HlsSection::default();
        assert_eq!(h.ladder_window(), 12);
        let same = HlsSection {
            ladder_segment_target_ms: 2000,
            ..HlsSection::default()
        };
        assert_eq!(same.ladder_window(), 6);
        // Rounded up, and never over the window's bound.
        let odd = HlsSection {
            ladder_segment_target_ms: 1500,
            ..HlsSection::default()
        };
        assert_eq!(odd.ladder_window(), 8);
        let many = HlsSection {
            window: 100,
            ladder_segment_target_ms: 500,
            ..HlsSection::default()
        };
        assert_eq!(many.ladder_window(), 100);
    }
}

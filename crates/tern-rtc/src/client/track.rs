//! What the client counts per received track: the statistics a load tester reports and
//! the sequence window that tells new, duplicate and late packets apart.

use std::time::{Duration, Instant};

use tern_proto::codec::MediaKind;
use tern_proto::rtp;

/// Sequence window (in packets) kept to tell duplicates and late packets apart.
const WINDOW: u64 = 1024;

/// Statistics of one received track.
#[derive(Debug, Clone, Default)]
pub struct TrackStats {
    /// SSRC.
    pub ssrc: u32,
    /// Distinct packets received (duplicates not counted).
    pub packets: u64,
    /// Payload bytes of distinct packets.
    pub bytes: u64,
    /// Copies of packets already received.
    pub duplicates: u64,
    /// Packets that arrived after a later one (late fills of a gap), not counting those
    /// that came after a NACK (`recovered`).
    pub reordered: u64,
    /// Packets that arrived after we NACKed them.
    pub recovered: u64,
    /// Sequence numbers NACKed (each try counted).
    pub nacks_sent: u64,
    /// Packets failing SRTP authentication or parsing.
    pub bad: u64,
    /// Packets authenticated and decrypted (all of them unless the client samples: see
    /// [`crate::client::Client::set_verify_every`]).
    pub verified: u64,
    /// First and highest extended sequence number received.
    pub first_seq: u64,
    /// Highest extended sequence number received.
    pub max_seq: u64,
    /// Frames completed (video: marker bit).
    pub frames: u64,
    /// Frames that were keyframes (found by parsing the H264 payload).
    pub keyframes: u64,
    /// RFC 3550 interarrival jitter, in RTP clock units.
    pub jitter: f64,
    /// Latency samples (ms) from the sender's capture time: count, sum, min, max.
    pub latency_n: u64,
    /// Sum of latency samples (ms).
    pub latency_sum: f64,
    /// Smallest latency sample (ms).
    pub latency_min: f64,
    /// Largest latency sample (ms).
    pub latency_max: f64,
    /// The latest latency sample (ms).
    pub latency_last: f64,
    /// Packets captured before this client's DTLS handshake completed. No server can have
    /// sent those live: they come from a keyframe cache replayed at join, and their age is
    /// how long ago the cached frame was captured, not forwarding latency. They are counted
    /// here and kept out of `latency_*` (a server without a cache has none of them and
    /// makes its viewers wait for the next keyframe instead: see the first-frame time).
    pub catchup_packets: u64,
    /// OvenRtcTester's "delay", kept for comparison: wall time since this track's first
    /// packet minus RTP time since it, in ms, at the latest packet. It shows queueing and
    /// clock drift after the first packet, not latency (that is `latency_*`).
    pub drift_ms: f64,
    /// Longest time between two consecutive new packets: a freeze shows here.
    pub max_gap: Duration,
    /// When the first packet arrived.
    pub first_at: Option<Instant>,
    /// When the latest packet arrived.
    pub last_at: Option<Instant>,
}

impl TrackStats {
    /// Packets expected from the sequence numbers seen (RFC 3550 A.3).
    pub fn expected(&self) -> u64 {
        if self.packets == 0 {
            0
        } else {
            self.max_seq - self.first_seq + 1
        }
    }

    /// Packets never received: expected minus distinct received. Late packets fill gaps, so
    /// reordering is not loss.
    pub fn lost(&self) -> u64 {
        self.expected().saturating_sub(self.packets)
    }

    /// Mean latency in ms, if any sample.
    pub fn latency_avg(&self) -> Option<f64> {
        (self.latency_n > 0).then(|| self.latency_sum / self.latency_n as f64)
    }
}

/// One received track: its statistics and the state behind them.
pub(super) struct Track {
    pub(super) kind: MediaKind,
    pub(super) stats: TrackStats,
    pub(super) unwrap: rtp::SeqUnwrapper,
    /// Bit i set: `max_seq - i` received.
    window: [u64; (WINDOW / 64) as usize],
    pub(super) missing: Vec<Missing>,
    /// Expected and received at the previous RR, for fraction lost.
    pub(super) prior_expected: u64,
    pub(super) prior_received: u64,
    /// Transit time of the previous packet (RFC 3550 A.8), in clock units.
    pub(super) transit: Option<f64>,
    pub(super) frame_key: bool,
    /// The sender's last SR: (NTP, RTP ts, arrival) for LSR/DLSR and latency without the
    /// extension.
    pub(super) last_sr: Option<(u64, u32, Instant)>,
    /// Arrival and extended RTP timestamp of the first packet, for `drift_ms`.
    pub(super) rtp_origin: Option<(Instant, i64)>,
    /// Last RTP timestamp seen and its extension, to unwrap timestamps.
    pub(super) last_ts: (u32, i64),
}

/// A missing packet waiting for its NACKs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Missing {
    pub(super) seq: u64,
    pub(super) since: Instant,
    pub(super) last_nack: Option<Instant>,
    pub(super) tries: u8,
}

impl Track {
    pub(super) fn new(kind: MediaKind, ssrc: u32) -> Self {
        Track {
            kind,
            stats: TrackStats {
                ssrc,
                ..TrackStats::default()
            },
            unwrap: rtp::SeqUnwrapper::new(),
            window: [0; (WINDOW / 64) as usize],
            missing: Vec::new(),
            prior_expected: 0,
            prior_received: 0,
            transit: None,
            frame_key: false,
            last_sr: None,
            rtp_origin: None,
            last_ts: (0, 0),
        }
    }

    pub(super) fn seen(&self, seq: u64) -> bool {
        let max = self.stats.max_seq;
        if seq > max {
            return false;
        }
        let d = max - seq;
        if d >= WINDOW {
            return true; // too old to tell: treat as a duplicate, never as new
        }
        self.window[(d / 64) as usize] & (1 << (d % 64)) != 0
    }

    pub(super) fn mark(&mut self, seq: u64) {
        let max = self.stats.max_seq;
        if self.stats.packets == 0 {
            self.stats.first_seq = seq;
            self.stats.max_seq = seq;
            self.window = [0; (WINDOW / 64) as usize];
            self.window[0] = 1;
            return;
        }
        if seq > max {
            self.shift(seq - max);
            self.stats.max_seq = seq;
            self.window[0] |= 1;
        } else {
            let d = max - seq;
            if d < WINDOW {
                self.window[(d / 64) as usize] |= 1 << (d % 64);
            }
            if seq < self.stats.first_seq {
                self.stats.first_seq = seq;
            }
        }
    }

    fn shift(&mut self, by: u64) {
        if by >= WINDOW {
            self.window = [0; (WINDOW / 64) as usize];
            return;
        }
        let words = (by / 64) as usize;
        let bits = (by % 64) as u32;
        let n = self.window.len();
        for i in (0..n).rev() {
            let src = i.checked_sub(words);
            let hi = src.map_or(0, |s| self.window[s]);
            let lo = src
                .and_then(|s| s.checked_sub(1))
                .map_or(0, |s| self.window[s]);
            self.window[i] = if bits == 0 {
                hi
            } else {
                (hi << bits) | (lo >> (64 - bits))
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a full-ICE server that answers `a=setup:active` (pion's default): the
    /// client answers the server's signed binding request, then acts as the DTLS server,
    /// and decrypts media sealed with the DTLS client's (the server's) write keys.
    #[test]
    fn window_tells_duplicates_and_late_packets() {
        let mut t = Track::new(MediaKind::Video, 1);
        t.mark(100);
        t.stats.packets = 1;
        for s in [101u64, 103, 104, 300] {
            assert!(!t.seen(s));
            t.mark(s);
            t.stats.packets += 1;
        }
        assert!(t.seen(103));
        assert!(!t.seen(102));
        assert!(t.seen(101));
        assert!(!t.seen(200));
        t.mark(102);
        t.stats.packets += 1;
        assert!(t.seen(102));
        assert_eq!(t.stats.expected(), 201);
        assert_eq!(t.stats.lost(), 201 - 6);
        // A jump beyond the window forgets everything older.
        t.mark(300 + 2 * WINDOW);
        assert!(t.seen(300)); // too old: never counted as new
        assert!(!t.seen(300 + 2 * WINDOW - 1));
    }
}

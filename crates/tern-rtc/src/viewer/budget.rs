//! The state of a viewer's retransmission budget and round-trip time, and its live
//! figures (the budget's rules and the methods are in `resend.rs`).

/// Share of a viewer's estimate (or of the media it was sent) its retransmissions may use.
pub const RETRANSMIT_SHARE: f64 = 0.25;
/// A packet is not resent again within this, nor within the round-trip time when longer.
pub const MIN_RESEND_GAP_MS: u32 = 30;
/// Recently resent packets remembered for [`MIN_RESEND_GAP_MS`] (a burst of losses
/// NACKed again is mostly within this many packets).
pub(super) const RECENT: usize = 16;
/// The buckets hold this much time of their rate (ms): libwebrtc's limiter's window.
pub(super) const DEPTH_MS: u64 = 1_000;
/// A bucket always holds at least one full packet, so that a slow path can recover one.
pub(super) const MIN_DEPTH: i64 = 1_500;
/// Without an estimate the bucket holds at most this (bytes): ten packets.
pub(super) const NO_ESTIMATE_DEPTH: i64 = 12_000;
/// NACKed video packets the budget cannot pay for at once are kept, this many at most, and
/// resent as it refills (see `resend.rs`).
pub(super) const PENDING: usize = 32;
/// A kept packet is given up this long after its NACK (ms).
pub const PENDING_MAX_MS: u32 = 3_000;

/// A viewer's retransmission state (see the module).
#[derive(Debug, Default)]
pub(super) struct Resend {
    /// Bytes the retransmission bucket and the egress bucket hold.
    pub(super) rtx_tokens: i64,
    pub(super) egress_tokens: i64,
    /// Media bytes (sent minus resent) at the last refill, and when it was (ms since the
    /// viewer was made).
    pub(super) media_mark: u64,
    pub(super) at_ms: u32,
    /// Bytes and packets resent; NACKed packets not resent (too old, resent within an
    /// RTT, over budget).
    pub(super) resent_bytes: u64,
    pub(super) ignored: u32,
    /// The last packets resent: source sequence number (low 16 bits) << 16 | ms stamp
    /// (low 16 bits).
    pub(super) recent: [u32; RECENT],
    pub(super) next: u8,
    /// Video packets NACKed and kept for the budget: outgoing sequence number << 16 | ms
    /// stamp of the NACK (low 16 bits, never 0); 0: free.
    pub(super) pending: [u32; PENDING],
}

/// A viewer's figures for the API (`GET /v1/viewers/{id}`), read live.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ViewerLive {
    /// Bandwidth estimate (bit/s), from transport-wide feedback or REMB.
    pub estimate_bps: Option<u64>,
    /// Round-trip time from the viewer's receiver reports (ms).
    pub rtt_ms: Option<u32>,
    /// Fraction of video packets lost, from the latest receiver report (0 to 1).
    pub loss: Option<f64>,
    /// Sequence numbers NACKed.
    pub nacks: u64,
    /// Packets retransmitted.
    pub retransmits: u64,
    /// RTP bytes sent (media and retransmissions), and of them retransmitted.
    pub bytes_sent: u64,
    /// See `bytes_sent`.
    pub retransmitted_bytes: u64,
    /// NACKed packets not retransmitted (gone from the ring, resent within an RTT, over
    /// the budget).
    pub nacks_ignored: u64,
    /// Transport-wide feedback packets read, and dropped as malformed.
    pub twcc_parsed: u64,
    /// See `twcc_parsed`.
    pub twcc_dropped: u64,
    /// The simulcast layer sent.
    pub layer: Option<u8>,
    /// Whether its video is paused (a path too narrow for a single-layer stream).
    pub video_paused: bool,
}

/// What a viewer keeps to measure its round-trip time (RFC 3550 §6.4.1): the middle 32
/// bits of the NTP time of its latest video sender report and when it went (ms since the
/// viewer was made), and the last RTT measured (ms, 0: none). 12 bytes, inline.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Rtt {
    pub(super) sr_mid: u32,
    pub(super) sr_at_ms: u32,
    pub(super) rtt_ms: u16,
}

impl Rtt {
    /// A report block that echoes `lsr` after `dlsr` (1/65536 s) arrived at `now_ms`.
    pub(super) fn on_report(&mut self, lsr: u32, dlsr: u32, now_ms: u32) {
        if lsr == 0 || lsr != self.sr_mid {
            return;
        }
        let held = u64::from(dlsr) * 1000 / 65_536;
        let rtt = u64::from(now_ms.wrapping_sub(self.sr_at_ms)).saturating_sub(held);
        self.rtt_ms = rtt.clamp(1, u64::from(u16::MAX)) as u16;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_and_the_rtt_are_small() {
        // Boxed, made at a viewer's first NACK; and inline in every viewer.
        assert_eq!(std::mem::size_of::<Resend>(), 240);
        assert_eq!(std::mem::size_of::<Rtt>(), 12);
    }

    #[test]
    fn an_rtt_needs_the_echo_of_the_last_report() {
        let mut r = Rtt {
            sr_mid: 0x1234_5678,
            sr_at_ms: 1_000,
            rtt_ms: 0,
        };
        // Another report's echo, and none at all, say nothing.
        r.on_report(0x1234_0000, 0, 1_100);
        r.on_report(0, 0, 1_100);
        assert_eq!(r.rtt_ms, 0);
        // Held 50 ms (3,276.8 units of 1/65536 s) by the receiver, back 130 ms after.
        r.on_report(0x1234_5678, 3_277, 1_130);
        assert_eq!(r.rtt_ms, 80);
    }
}

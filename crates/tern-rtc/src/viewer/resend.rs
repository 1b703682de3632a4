//! What a viewer's NACKs may cost, and the live figures of a viewer.
//!
//! # The retransmission budget
//!
//! A receiver on a saturated path loses packets, NACKs them, and (pion's generator does
//! this every 100 ms until they arrive) NACKs them again: answered without a limit, the
//! retransmissions pile onto the path that lost the packets and the loss feeds itself. As
//! libwebrtc's retransmission rate limiter does, a viewer's retransmissions are held to a
//! share of what its path carries ([`RETRANSMIT_SHARE`] of its bandwidth estimate, or, with
//! no estimate, of the media it was sent), and, with an estimate, to what the estimate
//! leaves after the media actually sent: a NACK storm never raises the viewer's egress
//! above its estimate. Both are token buckets one second deep, refilled when a NACK is
//! judged (no per-packet work). A packet already resent within the round-trip time (at
//! least [`MIN_RESEND_GAP`]) is not sent again: its retransmission may still be on the way.
//!
//! The state is boxed and made at a viewer's first NACK: 144 bytes, for viewers whose
//! receivers NACK; the rest pay a pointer.

use std::time::Instant;

use super::Viewer;
use crate::clip::MediaKind;

/// Share of a viewer's estimate (or of the media it was sent) its retransmissions may use.
pub const RETRANSMIT_SHARE: f64 = 0.25;
/// A packet is not resent again within this, nor within the round-trip time when longer.
pub const MIN_RESEND_GAP_MS: u32 = 30;
/// Recently resent packets remembered for [`MIN_RESEND_GAP_MS`] (a burst of losses
/// NACKed again is mostly within this many packets).
const RECENT: usize = 16;
/// The buckets hold this much time of their rate (ms): libwebrtc's limiter's window.
const DEPTH_MS: u64 = 1_000;
/// A bucket always holds at least one full packet, so that a slow path can recover one.
const MIN_DEPTH: i64 = 1_500;
/// Without an estimate the bucket holds at most this (bytes): ten packets.
const NO_ESTIMATE_DEPTH: i64 = 12_000;

/// A viewer's retransmission state (see the module).
#[derive(Debug, Default)]
pub(super) struct Resend {
    /// Bytes the retransmission bucket and the egress bucket hold.
    rtx_tokens: i64,
    egress_tokens: i64,
    /// Media bytes (sent minus resent) at the last refill, and when it was (ms since the
    /// viewer was made).
    media_mark: u64,
    at_ms: u32,
    /// Bytes and packets resent; NACKed packets not resent (too old, resent within an
    /// RTT, over budget).
    pub(super) resent_bytes: u64,
    pub(super) ignored: u32,
    /// The last packets resent: source sequence number (low 16 bits) << 16 | ms stamp
    /// (low 16 bits).
    recent: [u32; RECENT],
    next: u8,
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
}

impl Viewer {
    /// Milliseconds since the viewer was made (wraps after 49 days).
    pub(super) fn ms(&self, now: Instant) -> u32 {
        now.saturating_duration_since(self.created).as_millis() as u32
    }

    /// Whether a NACKed packet (`kind`, source sequence number `seq`, `size` bytes on the
    /// wire) may be retransmitted now (see the module); a yes takes it from the budget.
    /// Call it for each NACKed packet that is still in the ring; one that is not is
    /// [`Viewer::nack_ignored`].
    pub fn may_retransmit(&mut self, kind: MediaKind, seq: u64, size: usize, now: Instant) -> bool {
        let now_ms = self.ms(now);
        let gap = self.rtt_ms().unwrap_or(0).max(MIN_RESEND_GAP_MS);
        let estimate = if kind == MediaKind::Video {
            self.estimate_bps()
        } else {
            None
        };
        let media = self.counters.bytes_sent;
        let r = self.resend.get_or_insert_with(|| {
            Box::new(Resend {
                at_ms: now_ms,
                media_mark: media,
                rtx_tokens: MIN_DEPTH,
                egress_tokens: MIN_DEPTH,
                ..Resend::default()
            })
        });
        let key = (seq as u32 & 0xffff) << 16;
        let again = r.recent.iter().any(|&e| {
            e & 0xffff_0000 == key && e != 0 && (now_ms as u16).wrapping_sub(e as u16) < gap as u16
        });
        if again {
            r.ignored += 1;
            return false;
        }
        // Refill: the time since the last, and the media sent since.
        let media_now = media.saturating_sub(r.resent_bytes);
        let media_since = media_now.saturating_sub(r.media_mark) as i64;
        let ms = u64::from(now_ms.wrapping_sub(r.at_ms));
        r.media_mark = media_now;
        r.at_ms = now_ms;
        match estimate {
            Some(bps) => {
                let depth = ((bps / 8) * DEPTH_MS / 1000) as i64;
                let earned = (bps / 8 * ms / 1000) as i64;
                r.rtx_tokens = (r.rtx_tokens + (earned as f64 * RETRANSMIT_SHARE) as i64)
                    .min(((depth as f64 * RETRANSMIT_SHARE) as i64).max(MIN_DEPTH));
                r.egress_tokens =
                    (r.egress_tokens + earned - media_since).min(depth.max(MIN_DEPTH));
            }
            None => {
                r.rtx_tokens = (r.rtx_tokens + (media_since as f64 * RETRANSMIT_SHARE) as i64)
                    .min(NO_ESTIMATE_DEPTH);
                r.egress_tokens = r.rtx_tokens;
            }
        }
        let size = size as i64;
        if size > r.rtx_tokens || size > r.egress_tokens {
            r.ignored += 1;
            return false;
        }
        r.rtx_tokens -= size;
        r.egress_tokens -= size;
        r.resent_bytes += size as u64;
        r.recent[usize::from(r.next) % RECENT] = key | u32::from(now_ms as u16).max(1);
        r.next = r.next.wrapping_add(1);
        true
    }

    /// A NACKed packet that is no longer in the ring (counted as ignored).
    pub fn nack_ignored(&mut self) {
        if let Some(r) = self.resend.as_mut() {
            r.ignored += 1;
        } else {
            self.resend = Some(Box::new(Resend {
                ignored: 1,
                media_mark: self.counters.bytes_sent,
                ..Resend::default()
            }));
        }
    }

    /// The round-trip time from the latest receiver report that echoed a sender report
    /// (ms).
    pub fn rtt_ms(&self) -> Option<u32> {
        (self.rtt.rtt_ms > 0).then_some(u32::from(self.rtt.rtt_ms))
    }

    /// The viewer's live figures (see [`ViewerLive`]).
    pub fn live(&self) -> ViewerLive {
        let (parsed, dropped) = self
            .bwe
            .as_ref()
            .map_or((0, 0), |b| (u64::from(b.parsed), u64::from(b.dropped)));
        ViewerLive {
            estimate_bps: self.estimate_bps(),
            rtt_ms: self.rtt_ms(),
            loss: self
                .reported_loss(MediaKind::Video)
                .map(|(f, _, _)| f64::from(f) / 256.0),
            nacks: self.counters.nacks,
            retransmits: self.counters.retransmits,
            bytes_sent: self.counters.bytes_sent,
            retransmitted_bytes: self.resend.as_ref().map_or(0, |r| r.resent_bytes),
            nacks_ignored: self.resend.as_ref().map_or(0, |r| u64::from(r.ignored)),
            twcc_parsed: parsed,
            twcc_dropped: dropped,
            layer: self.video_layer(),
        }
    }
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

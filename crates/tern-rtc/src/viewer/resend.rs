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
//! The state is boxed and made at a viewer's first NACK: 112 bytes, for viewers whose
//! receivers NACK; the rest pay a pointer.

use std::time::Instant;

use super::Viewer;
use super::budget::{
    DEPTH_MS, MIN_DEPTH, MIN_RESEND_GAP_MS, NO_ESTIMATE_DEPTH, RECENT, RETRANSMIT_SHARE, Resend,
    ViewerLive,
};
use crate::clip::MediaKind;

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
        // Video held back (paused, or a layer left for a narrower path) is not resent: the
        // point of holding it is to let the path drain.
        if kind == MediaKind::Video && self.video.as_ref().is_some_and(|t| t.hold || t.paused) {
            self.nack_ignored();
            return false;
        }
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
            video_paused: self.video_paused(),
        }
    }
}

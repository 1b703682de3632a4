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
//! least [`MIN_RESEND_GAP_MS`]) is not sent again: its retransmission may still be on the way.
//!
//! A video packet the budget cannot pay for at once is kept
//! ([`PENDING`](super::budget::PENDING) at most) and
//! offered again as the budget refills, for [`PENDING_MAX_MS`]: not every receiver NACKs a
//! packet again until it comes. aiortc's asks for the missing packets only when another one
//! goes missing, and its jitter buffer never skips one: a packet never resent stops its
//! video until 512 packets later (12-40 s on a narrow path). So the budget paces the
//! retransmissions, it does not drop them. Packets of the two layers sent before the last
//! two switches are resent too (`track.rs`, `PrevLayers`); paused video is not.
//!
//! The state is boxed and made at a viewer's first NACK: 240 bytes, for viewers whose
//! receivers NACK; the rest pay a pointer.

use std::time::Instant;

use tern_proto::codec::MediaKind;

use super::Viewer;
use super::budget::{
    DEPTH_MS, MIN_DEPTH, MIN_RESEND_GAP_MS, NO_ESTIMATE_DEPTH, PENDING_MAX_MS, RECENT,
    RETRANSMIT_SHARE, Resend, ViewerLive,
};

impl Viewer {
    /// Milliseconds since the viewer was made (wraps after 49 days).
    pub(super) fn ms(&self, now: Instant) -> u32 {
        now.saturating_duration_since(self.created).as_millis() as u32
    }

    /// Whether a NACKed packet (`kind`, source sequence number `seq`, sent as `out`,
    /// `size` bytes on the wire; `None`: no longer in the ring) may be retransmitted now
    /// (see the module); a yes takes it from the budget. A video packet the budget cannot
    /// pay for yet is kept and offered again by [`Viewer::due_resends`].
    pub fn may_retransmit(
        &mut self,
        kind: MediaKind,
        seq: u64,
        out: u16,
        size: Option<usize>,
        now: Instant,
    ) -> bool {
        let now_ms = self.ms(now);
        let media = self.counters.bytes_sent;
        let gap = self.rtt_ms().unwrap_or(0).max(MIN_RESEND_GAP_MS);
        let estimate = if kind == MediaKind::Video {
            self.estimate_bps()
        } else {
            None
        };
        // Paused video is not resent: the point of pausing it is to let the path drain.
        let paused = kind == MediaKind::Video && self.video.as_ref().is_some_and(|t| t.paused);
        let r = self.resend_state(now);
        let kept = r
            .pending
            .iter()
            .position(|&e| kind == MediaKind::Video && e != 0 && (e >> 16) as u16 == out)
            .map(|i| std::mem::take(&mut r.pending[i]));
        let Some(size) = size.filter(|_| !paused) else {
            r.ignored += 1;
            return false;
        };
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
            // Kept for later (with the stamp of its first NACK), while there is room.
            let stamp = kept.unwrap_or((u32::from(out) << 16) | u32::from(now_ms as u16).max(1));
            match r.pending.iter().position(|&e| e == 0) {
                Some(i) if kind == MediaKind::Video => r.pending[i] = stamp,
                _ => r.ignored += 1,
            }
            return false;
        }
        r.rtx_tokens -= size;
        r.egress_tokens -= size;
        r.resent_bytes += size as u64;
        r.recent[usize::from(r.next) % RECENT] = key | u32::from(now_ms as u16).max(1);
        r.next = r.next.wrapping_add(1);
        true
    }

    /// The retransmission state, made (buckets at their floor) at the first NACK.
    fn resend_state(&mut self, now: Instant) -> &mut Resend {
        let now_ms = self.ms(now);
        let media = self.counters.bytes_sent;
        self.resend.get_or_insert_with(|| {
            Box::new(Resend {
                at_ms: now_ms,
                media_mark: media,
                rtx_tokens: MIN_DEPTH,
                egress_tokens: MIN_DEPTH,
                ..Resend::default()
            })
        })
    }

    /// Counts a NACKed number that maps to no packet sent lately (see
    /// [`Viewer::may_retransmit`]) as ignored.
    pub(super) fn nack_unmapped(&mut self, now: Instant) {
        let r = self.resend_state(now);
        r.ignored = r.ignored.saturating_add(1);
    }

    /// Whether NACKed packets wait for the budget ([`Viewer::due_resends`]).
    pub fn has_due_resends(&self) -> bool {
        self.resend
            .as_ref()
            .is_some_and(|r| r.pending.iter().any(|&e| e != 0))
    }

    /// Offers again, to `f` as (kind, layer, source sequence number, outgoing number), the
    /// NACKed video packets kept for the budget: hand each to [`Viewer::may_retransmit`].
    /// Those kept longer than [`PENDING_MAX_MS`], or no longer mapped to a layer, are given
    /// up (counted as ignored).
    pub fn due_resends(&mut self, now: Instant, f: &mut dyn FnMut(MediaKind, u8, u64, u16)) {
        let now_ms = self.ms(now) as u16;
        let (Some(r), Some(t)) = (self.resend.as_mut(), self.video.as_ref()) else {
            return;
        };
        for e in &mut r.pending {
            if *e == 0 {
                continue;
            }
            let out = (*e >> 16) as u16;
            // Signed: a stamp of 0 was stored as 1, a tick ahead (entries are offered every
            // sweep, so none gets near the 32 s the 16 bits span).
            let age = i32::from(now_ms.wrapping_sub(*e as u16) as i16);
            match t.src_of(out, self.prev_layers.as_deref()) {
                Some((layer, src)) if age <= PENDING_MAX_MS as i32 => {
                    f(MediaKind::Video, layer, src, out)
                }
                _ => {
                    *e = 0;
                    r.ignored += 1;
                }
            }
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::viewer::budget::PENDING;
    use crate::viewer::track::TrackParams;
    use crate::viewer::{ViewerParams, ViewerTimeouts};

    /// A viewer whose video track has sent source packets 1000..=1100 as 0..=100, with no
    /// estimate: its budget is a share of the media it was sent.
    fn viewer(now: Instant) -> Viewer {
        let video = TrackParams {
            pt: 96,
            ssrc: 1,
            abs_capture_time_ext: None,
            transport_cc_ext: None,
            abs_send_time_ext: None,
            vp8: false,
            rtx: None,
            nack: true,
            initial_seq: 0,
            ts_offset: 0,
        };
        let mut v = Viewer::new(
            ViewerParams {
                local_ufrag: [b'a'; super::super::UFRAG_LEN],
                local_pwd: [b'b'; super::super::PWD_LEN],
                remote_ufrag: "remote".into(),
                remote_fingerprint: [0; 32],
                video: Some(video),
                audio: None,
                pin: None,
                timeouts: ViewerTimeouts::default(),
            },
            now,
        );
        let t = v.video.as_mut().expect("video");
        t.src_start = Some(1000);
        t.last_out = 100;
        t.packets = 101;
        v
    }

    /// What `due_resends` offers now.
    fn due(v: &mut Viewer, now: Instant) -> Vec<(u8, u64, u16)> {
        let mut out = Vec::new();
        v.due_resends(now, &mut |_, layer, seq, o| out.push((layer, seq, o)));
        out
    }

    fn ignored(v: &Viewer) -> u64 {
        v.live().nacks_ignored
    }

    #[test]
    fn a_packet_over_the_budget_is_kept_and_resent_as_the_budget_refills() {
        let t0 = Instant::now();
        let mut v = viewer(t0);
        let video = MediaKind::Video;
        // The first fills the bucket's floor (1,500 bytes); the second waits.
        assert!(v.may_retransmit(video, 1010, 10, Some(1_200), t0));
        assert!(!v.may_retransmit(video, 1011, 11, Some(1_200), t0));
        assert!(v.has_due_resends());
        assert_eq!(due(&mut v, t0), [(0, 1011, 11)]);
        // Offered again with no media sent since: still kept, not counted as ignored.
        let t1 = t0 + Duration::from_millis(100);
        assert!(!v.may_retransmit(video, 1011, 11, Some(1_200), t1));
        assert_eq!(due(&mut v, t1), [(0, 1011, 11)]);
        // 20 kB of media later the share (5 kB) pays for it, and nothing waits.
        v.counters.bytes_sent += 20_000;
        let t2 = t0 + Duration::from_millis(200);
        assert!(v.may_retransmit(video, 1011, 11, Some(1_200), t2));
        assert!(!v.has_due_resends());
        assert_eq!(ignored(&v), 0);
        assert_eq!(v.live().retransmitted_bytes, 2_400);
    }

    #[test]
    fn a_kept_packet_is_given_up_after_3_s_and_audio_is_never_kept() {
        let t0 = Instant::now();
        let mut v = viewer(t0);
        assert!(v.may_retransmit(MediaKind::Video, 1010, 10, Some(1_200), t0));
        assert!(!v.may_retransmit(MediaKind::Video, 1011, 11, Some(1_200), t0));
        assert!(!v.may_retransmit(MediaKind::Audio, 7, 7, Some(1_200), t0));
        assert_eq!(ignored(&v), 1);
        let late = t0 + Duration::from_millis(u64::from(PENDING_MAX_MS) + 100);
        assert_eq!(due(&mut v, late), []);
        assert!(!v.has_due_resends());
        assert_eq!(ignored(&v), 2);
    }

    #[test]
    fn a_nack_for_no_packet_sent_lately_is_counted_as_ignored() {
        let t0 = Instant::now();
        let mut v = viewer(t0);
        v.nack_unmapped(t0);
        v.nack_unmapped(t0);
        assert_eq!(ignored(&v), 2);
        assert!(!v.has_due_resends());
        // The budget it made on the way is a fresh one: a packet still goes.
        assert!(v.may_retransmit(MediaKind::Video, 1010, 10, Some(1_200), t0));
    }

    #[test]
    fn at_most_32_wait_and_gone_or_paused_packets_are_not_kept() {
        let t0 = Instant::now();
        let mut v = viewer(t0);
        assert!(v.may_retransmit(MediaKind::Video, 1000, 0, Some(1_200), t0));
        for out in 1..=40u16 {
            assert!(!v.may_retransmit(
                MediaKind::Video,
                1000 + u64::from(out),
                out,
                Some(1_200),
                t0
            ));
        }
        assert_eq!(due(&mut v, t0).len(), PENDING);
        assert_eq!(ignored(&v), (40 - PENDING) as u64);
        // One gone from the ring since: given up, no longer offered.
        assert!(!v.may_retransmit(MediaKind::Video, 1001, 1, None, t0));
        assert_eq!(due(&mut v, t0).len(), PENDING - 1);
        assert_eq!(ignored(&v), (40 - PENDING + 1) as u64);
        // Paused: nothing is resent; each offered one is given up.
        v.video.as_mut().expect("video").paused = true;
        for (_, seq, out) in due(&mut v, t0) {
            assert!(!v.may_retransmit(MediaKind::Video, seq, out, Some(1_200), t0));
        }
        assert!(!v.has_due_resends());
        assert_eq!(ignored(&v), 40);
    }
}

//! A viewer's per-track state: the mapping from the stream's numbering to the viewer's
//! (continuous across simulcast layer switches), and the VP8 ids rewritten after one.

use tern_proto::codec::{MediaKind, Vp8Ids};

use crate::stream::RingPacket;

/// Per-track parameters from the negotiation.
#[derive(Debug, Clone, Copy)]
pub struct TrackParams {
    /// Negotiated payload type.
    pub pt: u8,
    /// Our SSRC for this track.
    pub ssrc: u32,
    /// Negotiated id of the abs-capture-time header extension, if any.
    pub abs_capture_time_ext: Option<u8>,
    /// Negotiated id of the transport-wide sequence number extension (video), if any:
    /// with it the viewer can have a bandwidth estimate ([`Viewer::enable_bwe`]).
    pub transport_cc_ext: Option<u8>,
    /// Negotiated id of the abs-send-time extension (video without transport-wide
    /// feedback, when the viewer offered REMB), if any: the viewer estimates its path from
    /// it and reports REMB.
    pub abs_send_time_ext: Option<u8>,
    /// The track carries VP8: its picture IDs and TL0PICIDX are rewritten after a layer
    /// switch so that they continue (each simulcast layer numbers its own).
    pub vp8: bool,
    /// RTX payload type and SSRC, when negotiated (video with transport-wide feedback): the
    /// probe padding goes there.
    pub rtx: Option<(u8, u32)>,
    /// Whether the viewer negotiated generic NACK.
    pub nack: bool,
    /// First outgoing sequence number (random per RFC 3550 §5.1).
    pub initial_seq: u16,
    /// Offset added to the source RTP timestamp (random per RFC 3550 §5.1).
    pub ts_offset: u32,
}

/// A layer sent before a switch (video), so that its packets NACKed after the switch are
/// still resent, as mediasoup and LiveKit resend any packet they sent whatever its layer: a
/// receiver such as aiortc's never skips a missing packet, it waits for it until its jitter
/// buffer overflows (512 packets later). Its source numbers from `src_start` on went out as
/// `base .. base + len`, with these timestamp and VP8 id offsets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct PrevLayer {
    src_start: u64,
    base: u64,
    len: u32,
    pub(super) ts_offset: u32,
    pid_off: u16,
    layer: u8,
    tl0_off: u8,
}

/// The layers sent before the last two switches, newest first (a move down often comes in
/// two steps, and the packets the path lost were the first layer's). Boxed in the viewer,
/// made at its first switch: viewers that never switch pay a pointer.
pub(super) type PrevLayers = [PrevLayer; 2];

impl PrevLayer {
    /// The outgoing number `pkt` had, when it is one of this layer's packets sent before
    /// the switch.
    fn out_seq(&self, pkt: &RingPacket) -> Option<u64> {
        let off = pkt.seq.checked_sub(self.src_start)?;
        (pkt.layer == self.layer && off < u64::from(self.len)).then(|| self.base + off)
    }

    /// The layer and source number of the outgoing number `ext`, when this layer sent it.
    fn src_of(&self, ext: u64) -> Option<(u8, u64)> {
        let off = ext.checked_sub(self.base)?;
        (off < u64::from(self.len)).then(|| (self.layer, self.src_start + off))
    }

    /// VP8 ids to write for a retransmission of this layer: moved by its offsets.
    pub(super) fn vp8_ids(&self, pkt: &RingPacket) -> Option<(Vp8Ids, u16, u8)> {
        Track::moved_ids(Vp8Ids::parse(&pkt.payload)?, self.pid_off, self.tl0_off)
    }
}

/// Per-track state: a few integers.
#[derive(Debug, Clone, Copy)]
pub(super) struct Track {
    pub(super) p: TrackParams,
    /// Source sequence number mapped to `seq_base`; `None` until the first packet. A
    /// switch of simulcast layer moves both (each layer has its own numbering).
    pub(super) src_start: Option<u64>,
    /// Extended outgoing sequence number of the packet `src_start`.
    pub(super) seq_base: u64,
    /// The layer whose packets are sent (video), and the one wanted: a switch happens at
    /// the wanted layer's next keyframe.
    pub(super) layer: u8,
    pub(super) target: u8,
    /// The layer being sent is held back until the switch (a path too narrow for it:
    /// what it would send only deepens the queue the new layer's keyframe waits in).
    /// With `target == layer` it is held until that layer's next keyframe (a resume).
    pub(super) hold: bool,
    /// Video paused (a path too narrow for the stream's one layer): nothing is sent, not
    /// even a keyframe, until it resumes (see `adapt/pause.rs`).
    pub(super) paused: bool,
    /// VP8: the last picture ID and TL0PICIDX sent, and what is added to the layer's own
    /// since the last switch.
    pub(super) last_pid: u16,
    last_tl0: u8,
    pub(super) pid_off: u16,
    tl0_off: u8,
    /// Highest extended outgoing sequence number sent.
    pub(super) last_out: u64,
    /// RTP timestamp and capture NTP of the newest packet sent (for the SR).
    pub(super) last_ts: u32,
    pub(super) last_ntp: u64,
    pub(super) packets: u32,
    pub(super) octets: u32,
    /// Loss reported by the viewer's latest receiver report.
    pub(super) fraction_lost: u8,
    pub(super) cumulative_lost: i32,
    pub(super) jitter: u32,
}

impl Track {
    pub(super) fn new(p: TrackParams) -> Self {
        Track {
            p,
            src_start: None,
            seq_base: u64::from(p.initial_seq),
            layer: 0,
            target: 0,
            hold: false,
            paused: false,
            last_pid: 0,
            last_tl0: 0,
            pid_off: 0,
            tl0_off: 0,
            last_out: 0,
            last_ts: 0,
            last_ntp: 0,
            packets: 0,
            octets: 0,
            fraction_lost: 0,
            cumulative_lost: 0,
            jitter: 0,
        }
    }

    /// Extended outgoing sequence number of a source packet.
    pub(super) fn out_seq(&self, src_start: u64, src: u64) -> u64 {
        self.seq_base + (src - src_start)
    }

    /// The extended outgoing sequence number of `pkt`, with the earlier layer it is a
    /// retransmission of (one of `prev`, see [`PrevLayer`]), or `None` when the track does
    /// not take it. The track's first packet, or a keyframe of the layer it waits for,
    /// starts (or moves) the mapping: after a move the outgoing numbering continues where it
    /// was, and the layer left goes into `prev` (made here at the first move; `None`: the
    /// track keeps no history). A held layer's packets already sent are still resent;
    /// paused video takes nothing.
    pub(super) fn place(
        &mut self,
        pkt: &RingPacket,
        prev: Option<&mut Option<Box<PrevLayers>>>,
    ) -> Option<(u64, Option<PrevLayer>)> {
        if self.paused {
            return None;
        }
        if let Some(p) = prev.as_deref().and_then(|p| p.as_deref()) {
            for l in p {
                if let Some(out) = l.out_seq(pkt) {
                    return Some((out, Some(*l)));
                }
            }
        }
        let src_start = match self.src_start {
            // A retransmission (or the next packet) of the layer being sent.
            Some(s)
                if pkt.layer == self.layer
                    && pkt.seq >= s
                    && (!self.hold || self.out_seq(s, pkt.seq) <= self.last_out) =>
            {
                s
            }
            _ if !self.takes(pkt) => return None,
            start => {
                if let Some(old) = start {
                    if let Some(slot) = prev {
                        let sent = self.last_out + 1 - self.seq_base;
                        let len = sent.min(u64::from(u32::MAX));
                        let p = slot.get_or_insert_with(Box::default);
                        p[1] = p[0];
                        p[0] = PrevLayer {
                            src_start: old + (sent - len),
                            base: self.seq_base + (sent - len),
                            len: len as u32,
                            ts_offset: self.p.ts_offset,
                            pid_off: self.pid_off,
                            layer: self.layer,
                            tl0_off: self.tl0_off,
                        };
                    }
                    self.seq_base = self.last_out + 1;
                    // The new layer's keyframe is often the same picture as the old layer's
                    // frame just sent (same capture time, so the same timestamp): a receiver
                    // takes a keyframe whose timestamp is not ahead as a stale copy and drops
                    // it when its picture ID (VP8, VP9: each layer has its own) is behind,
                    // then freezes until its next keyframe request. So it is moved one tick
                    // ahead, and the rest of the layer with it.
                    let ts = pkt.rtp_ts.wrapping_add(self.p.ts_offset);
                    let ahead = i64::from(ts.wrapping_sub(self.last_ts) as i32);
                    if ahead <= 0 {
                        self.p.ts_offset = self.p.ts_offset.wrapping_add((1 - ahead) as u32);
                    }
                }
                self.layer = pkt.layer;
                self.hold = false;
                self.src_start = Some(pkt.seq);
                pkt.seq
            }
        };
        Some((self.out_seq(src_start, pkt.seq), None))
    }

    /// VP8 ids to write for `pkt` (`None`: send the payload as it is). After a layer
    /// switch (`switched`: `pkt` is the new layer's keyframe) the new layer's ids are moved
    /// to continue from the last ones sent; `fresh` packets (not retransmissions) become
    /// the last ones sent.
    pub(super) fn vp8_ids(
        &mut self,
        pkt: &RingPacket,
        switched: bool,
        fresh: bool,
    ) -> Option<(Vp8Ids, u16, u8)> {
        let ids = Vp8Ids::parse(&pkt.payload)?;
        if switched {
            let (pid, tl0) = (
                ids.picture_id.map_or(0, |p| p.0),
                ids.tl0.map_or(0, |t| t.0),
            );
            self.pid_off = self.last_pid.wrapping_add(1).wrapping_sub(pid);
            self.tl0_off = self.last_tl0.wrapping_add(1).wrapping_sub(tl0);
        }
        let (pid, tl0) = Self::moved(ids, self.pid_off, self.tl0_off);
        if fresh {
            self.last_pid = pid;
            self.last_tl0 = tl0;
        }
        Self::moved_ids(ids, self.pid_off, self.tl0_off)
    }

    /// The picture ID and TL0PICIDX of `ids` moved by the offsets.
    fn moved(ids: Vp8Ids, pid_off: u16, tl0_off: u8) -> (u16, u8) {
        let pid = ids.picture_id.map_or(0, |p| p.0).wrapping_add(pid_off);
        let tl0 = ids.tl0.map_or(0, |t| t.0).wrapping_add(tl0_off);
        (pid & ids.picture_id_mask(), tl0)
    }

    /// `ids` moved by the offsets (`None` when they move nothing).
    pub(super) fn moved_ids(ids: Vp8Ids, pid_off: u16, tl0_off: u8) -> Option<(Vp8Ids, u16, u8)> {
        let (pid, tl0) = Self::moved(ids, pid_off, tl0_off);
        (pid_off & ids.picture_id_mask() != 0 || tl0_off != 0).then_some((ids, pid, tl0))
    }

    /// Whether `pkt` is new media for this track now (see [`Viewer::wants`]); with
    /// `switch`, a keyframe of the wanted layer also counts.
    pub(super) fn takes(&self, pkt: &RingPacket) -> bool {
        match self.src_start {
            _ if self.paused => false,
            _ if pkt.kind == MediaKind::Video
                && pkt.layer == self.target
                && (pkt.layer != self.layer || self.hold)
                && pkt.keyframe =>
            {
                true
            }
            Some(start) => !self.hold && pkt.layer == self.layer && pkt.seq >= start,
            None => pkt.kind == MediaKind::Audio || (pkt.keyframe && pkt.layer == self.target),
        }
    }

    /// The layer and source sequence number of an outgoing 16-bit sequence number (for
    /// NACK), extended against the newest one sent: the layer sent now, or one of the
    /// earlier ones in `prev`.
    pub(super) fn src_of(&self, seq16: u16, prev: Option<&PrevLayers>) -> Option<(u8, u64)> {
        let src_start = self.src_start?;
        let last = self.last_out;
        let base = last & !0xffff;
        let mut ext = base | u64::from(seq16);
        if ext > last {
            ext = ext.checked_sub(1 << 16)?;
        }
        if ext < self.seq_base {
            return prev?.iter().find_map(|l| l.src_of(ext));
        }
        Some((self.layer, src_start + (ext - self.seq_base)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A track with its history, as the viewer keeps them.
    struct Tr {
        t: Track,
        prev: Option<Box<PrevLayers>>,
    }

    impl std::ops::Deref for Tr {
        type Target = Track;
        fn deref(&self) -> &Track {
            &self.t
        }
    }

    impl std::ops::DerefMut for Tr {
        fn deref_mut(&mut self) -> &mut Track {
            &mut self.t
        }
    }

    impl Tr {
        /// The outgoing number, and the earlier layer when a retransmission of one.
        fn place(&mut self, pkt: &RingPacket) -> Option<(u64, Option<u8>)> {
            let (out, prev) = self.t.place(pkt, Some(&mut self.prev))?;
            Some((out, prev.map(|p| p.layer)))
        }

        fn src_of(&self, seq16: u16) -> Option<(u8, u64)> {
            self.t.src_of(seq16, self.prev.as_deref())
        }
    }

    fn track(initial_seq: u16) -> Tr {
        let t = Track::new(TrackParams {
            pt: 96,
            ssrc: 1,
            abs_capture_time_ext: None,
            transport_cc_ext: None,
            abs_send_time_ext: None,
            rtx: None,
            vp8: false,
            nack: true,
            initial_seq,
            ts_offset: 0,
        });
        Tr { t, prev: None }
    }

    fn video(layer: u8, seq: u64, keyframe: bool) -> RingPacket {
        let pool =
            tern_pool::BufferPool::new(tern_pool::PoolConfig::packets("test")).expect("pool");
        RingPacket {
            kind: MediaKind::Video,
            layer,
            seq,
            rtp_ts: 0,
            marker: false,
            keyframe,
            capture_ntp: 0,
            payload: pool.alloc(1).freeze(),
        }
    }

    /// Sends `pkt` as write_media would: places it and records it as sent.
    fn send(t: &mut Tr, pkt: &RingPacket) -> Option<u64> {
        let (out, _) = t.place(pkt)?;
        if out > t.last_out || t.packets == 0 {
            t.last_out = out;
            t.packets += 1;
        }
        Some(out)
    }

    #[test]
    fn a_layer_switch_waits_for_a_keyframe_and_keeps_the_numbering() {
        let mut t = track(100);
        t.target = 1;
        t.layer = 1;
        // Unstarted: only a keyframe of the wanted layer starts it.
        assert_eq!(send(&mut t, &video(0, 5, true)), None);
        assert_eq!(send(&mut t, &video(1, 50, false)), None);
        assert_eq!(send(&mut t, &video(1, 51, true)), Some(100));
        assert_eq!(send(&mut t, &video(1, 52, false)), Some(101));
        // Another layer's packets are not taken, not even its keyframes.
        assert_eq!(send(&mut t, &video(0, 9, true)), None);
        // Move to layer 0: layer 1 goes on until layer 0's next keyframe.
        t.target = 0;
        assert_eq!(send(&mut t, &video(0, 10, false)), None);
        assert_eq!(send(&mut t, &video(1, 53, false)), Some(102));
        assert_eq!(send(&mut t, &video(0, 11, true)), Some(103));
        assert_eq!(t.layer, 0);
        assert_eq!(send(&mut t, &video(1, 54, true)), None);
        assert_eq!(send(&mut t, &video(0, 12, false)), Some(104));
        // NACKs map to the layer now sent, and before the move to the layer sent then.
        assert_eq!(t.src_of(104), Some((0, 12)));
        assert_eq!(t.src_of(103), Some((0, 11)));
        assert_eq!(t.src_of(102), Some((1, 53)));
        assert_eq!(t.src_of(100), Some((1, 51)));
        assert_eq!(t.src_of(99), None);
        // A retransmission of layer 0's packet 11 keeps its number, and so does one of
        // layer 1's packet 52, sent before the move (with that layer's timestamp offset);
        // layer 1's packets not sent before the move are not taken.
        assert_eq!(send(&mut t, &video(0, 11, true)), Some(103));
        assert_eq!(t.place(&video(1, 52, false)), Some((101, Some(1))));
        assert_eq!(t.place(&video(1, 54, false)), None);
        assert_eq!(t.place(&video(1, 50, false)), None);
        assert_eq!(t.last_out, 104);
    }

    #[test]
    fn a_held_layer_is_still_resent_and_the_two_layers_before_after_a_move() {
        let mut t = track(0);
        assert_eq!(send(&mut t, &video(0, 10, true)), Some(0));
        assert_eq!(send(&mut t, &video(0, 11, false)), Some(1));
        // Moving to layer 1 on a narrow path: layer 0 is held, nothing new of it goes,
        // but what was sent may be resent.
        t.target = 1;
        t.hold = true;
        assert_eq!(send(&mut t, &video(0, 12, false)), None);
        assert_eq!(t.place(&video(0, 11, false)), Some((1, None)));
        assert_eq!(send(&mut t, &video(1, 30, true)), Some(2));
        // Then back up to layer 0: both earlier runs are kept, newest first.
        t.target = 0;
        assert_eq!(send(&mut t, &video(0, 20, true)), Some(3));
        assert_eq!(t.src_of(2), Some((1, 30)));
        assert_eq!(t.src_of(1), Some((0, 11)));
        assert_eq!(t.place(&video(1, 30, true)), Some((2, Some(1))));
        assert_eq!(t.place(&video(0, 11, false)), Some((1, Some(0))));
        // A third move: the oldest run is forgotten.
        t.target = 1;
        assert_eq!(send(&mut t, &video(1, 40, true)), Some(4));
        assert_eq!(t.src_of(3), Some((0, 20)));
        assert_eq!(t.src_of(2), Some((1, 30)));
        assert_eq!(t.src_of(1), None);
        assert_eq!(t.place(&video(0, 11, false)), None);
        // Paused video takes nothing, not even a retransmission.
        t.paused = true;
        assert_eq!(t.place(&video(1, 40, true)), None);
        assert_eq!(t.place(&video(1, 30, true)), None);
    }

    #[test]
    fn the_history_is_a_small_box() {
        // Boxed in the viewer, made at its first switch.
        assert_eq!(std::mem::size_of::<PrevLayers>(), 64);
    }

    #[test]
    fn a_track_without_a_history_resends_only_the_layer_it_sends() {
        let mut t = track(0);
        assert_eq!(send(&mut t, &video(0, 10, true)), Some(0));
        t.target = 1;
        let (out, prev) = t.t.place(&video(1, 30, true), None).expect("the move");
        assert_eq!((out, prev), (1, None));
        t.last_out = 1;
        assert_eq!(t.t.place(&video(0, 10, true), None), None);
        assert_eq!(t.t.src_of(0, None), None);
        assert_eq!(t.t.src_of(1, None), Some((1, 30)));
    }

    #[test]
    fn paused_video_sends_nothing_and_resumes_at_a_keyframe_with_the_numbering_going_on() {
        let mut t = track(100);
        assert_eq!(send(&mut t, &video(0, 50, true)), Some(100));
        assert_eq!(send(&mut t, &video(0, 51, false)), Some(101));
        t.paused = true;
        t.hold = true;
        // Nothing, not a keyframe, not a retransmission.
        assert_eq!(send(&mut t, &video(0, 52, false)), None);
        assert_eq!(send(&mut t, &video(0, 60, true)), None);
        assert_eq!(send(&mut t, &video(0, 51, false)), None);
        // Resumed: held until the layer's next keyframe, then numbered on from 101.
        t.paused = false;
        assert_eq!(send(&mut t, &video(0, 61, false)), None);
        assert_eq!(send(&mut t, &video(0, 70, true)), Some(102));
        assert!(!t.hold);
        assert_eq!(send(&mut t, &video(0, 71, false)), Some(103));
        assert_eq!(t.src_of(102), Some((0, 70)));
        // What went before the pause maps to its own numbering.
        assert_eq!(t.src_of(101), Some((0, 51)));
        assert_eq!(t.src_of(99), None);
    }

    #[test]
    fn nack_maps_back_to_source_across_wrap() {
        let mut t = track(65530);
        t.src_start = Some(1000);
        // Sent source 1000..=1010 → out 65530..=65540 (wraps at 65536).
        t.last_out = t.out_seq(1000, 1010);
        assert_eq!(t.last_out, 65540);
        assert_eq!(t.src_of(65531), Some((0, 1001)));
        assert_eq!(t.src_of(2), Some((0, 1008))); // 65538 as u16
        assert_eq!(t.src_of(4), Some((0, 1010)));
        // Before the first packet sent: unknown.
        assert_eq!(t.src_of(65529), None);
    }
}

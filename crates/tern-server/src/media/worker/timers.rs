//! A worker's timers and RTCP: receiver reports, NACKs answered from the stream's ring,
//! keyframe requests; the periodic sweep of every viewer's timers (DTLS retransmission,
//! consent, sender reports); and the housekeeping that gives memory back and books it.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tern_proto::codec::MediaKind;
use tern_rtc::viewer::ViewerEvent;

use super::viewers::write_media;
use super::{VIEWER_TIMER_SWEEPS, Worker};
use crate::media::ledger::{book_set, ledger, vec_bytes};
use crate::media::link::ViewerId;
use tern_pool::shrink_vec;

/// Bytes a retransmission adds to its payload on the wire, about: the RTP header with its
/// extensions, the SRTP tag, UDP and IP.
const RTP_OVERHEAD: usize = 12 + 16 + 16 + 28;

/// A NACKed packet: kind, layer, source sequence number, and the viewer's number for it.
type Nacked = (MediaKind, u8, u64, u16);

impl Worker {
    pub(super) fn handle_rtcp(
        &mut self,
        now: Instant,
        id: ViewerId,
        buf: &mut [u8],
        from: SocketAddr,
    ) {
        let mut nacks: Vec<Nacked> = Vec::new();
        let mut keyframe = false;
        let Some(e) = self.table.confirmed(id, from) else {
            self.shared.stats.dropped_in.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let stream = e.stream;
        let res = ledger(e, |v| {
            v.handle_rtcp(now, buf, &mut |ev| match ev {
                ViewerEvent::Nack {
                    kind,
                    layer,
                    seq,
                    out,
                } => nacks.push((kind, layer, seq, out)),
                ViewerEvent::KeyframeRequest => keyframe = true,
            })
        });
        // The NACK list is the driver's, not the session's.
        e.heap = e
            .heap
            .saturating_sub(nacks.capacity() * std::mem::size_of::<Nacked>());
        let stats = &self.shared.stats;
        self.shared.pools.book(e);
        let lost: i64 = [MediaKind::Video, MediaKind::Audio]
            .into_iter()
            .filter_map(|k| e.viewer.reported_loss(k))
            .map(|(_, cumulative, _)| i64::from(cumulative))
            .sum();
        if lost > e.reported_lost {
            let grew = (lost - e.reported_lost) as u64;
            e.reported_lost = lost;
            stats.streams[stream]
                .reported_lost
                .fetch_add(grew, Ordering::Relaxed);
        }
        if !nacks.is_empty() {
            stats.streams[stream]
                .nacks
                .fetch_add(nacks.len() as u64, Ordering::Relaxed);
        }
        if res.is_err() {
            stats.dropped_in.fetch_add(1, Ordering::Relaxed);
        }
        if keyframe {
            stats.keyframe_requests.fetch_add(1, Ordering::Relaxed);
            stats.streams[stream]
                .keyframe_requests
                .fetch_add(1, Ordering::Relaxed);
            let layer = self.table.get(id).map_or(0, |e| e.viewer.target_layer());
            self.ask_keyframe(stream, layer, now);
        }
        self.retransmit(id, stream, &nacks, now);
        self.after_io(id);
    }

    /// Resends each NACKed packet (kind, layer, source sequence number, the viewer's
    /// number) still in the ring, within the viewer's retransmission budget (tern-rtc's
    /// viewer/resend.rs, which keeps what the budget cannot pay for yet); the rest are
    /// counted as ignored.
    fn retransmit(&mut self, id: ViewerId, stream: usize, nacks: &[Nacked], now: Instant) {
        let stats = &self.shared.stats;
        for &(kind, layer, seq, out) in nacks {
            // Read in the ring, sent from there: the parts are borrowed one by one.
            let ring = self.streams.slots[stream].stream.ring_of(kind, layer);
            let p = ring.and_then(|r| r.get(seq));
            let Some(e) = self.table.get(id) else { break };
            let size = p.map(|p| p.payload.len() + RTP_OVERHEAD);
            let resend = ledger(e, |v| v.may_retransmit(kind, seq, out, size, now));
            self.shared.pools.book(e);
            if let Some(p) = p.filter(|_| resend)
                && write_media(&mut self.out, &mut self.table, stats, id, p, false, 0).is_some()
            {
                stats.retransmits.fetch_add(1, Ordering::Relaxed);
                stats.streams[stream]
                    .retransmits
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub(super) fn sweep(&mut self, now: Instant) {
        for s in &mut self.streams.slots {
            s.stream.tick(now);
        }
        if self.adaptation.pass_due(now) {
            for i in 0..self.streams.slots.len() {
                if self.streams.slots[i].stream.layers() > 1 {
                    self.choose_layers(i, now);
                } else if self.adaptation.pause_video() {
                    self.gate_video(i, now);
                }
            }
        }
        self.probe(now);
        self.sweeps = self.sweeps.wrapping_add(1);
        if self.table.handshaking() == 0 && !self.sweeps.is_multiple_of(VIEWER_TIMER_SWEEPS) {
            return;
        }
        let ids: Vec<ViewerId> = self.table.ids().collect();
        let mut out = [0u8; 512];
        let mut flights: Vec<Vec<u8>> = Vec::new();
        // Kept NACKs now due, of one viewer at a time (one buffer for the sweep).
        let mut due: Vec<Nacked> = Vec::new();
        for id in ids {
            let Some(e) = self.table.get(id) else {
                continue;
            };
            if e.viewer.has_due_resends() {
                let stream = e.stream;
                due.clear();
                e.viewer.due_resends(now, &mut |kind, layer, seq, out| {
                    due.push((kind, layer, seq, out));
                });
                self.retransmit(id, stream, &due, now);
                self.after_io(id);
            }
            let Some(e) = self.table.get(id) else {
                continue;
            };
            let due = e.viewer.poll_timeout().is_some_and(|(t, _)| t <= now);
            if !due {
                continue;
            }
            flights.clear();
            let kept = vec_bytes(&flights);
            let cname = &self.shared.cname;
            let sr = ledger(e, |v| {
                v.handle_timeout(now, &mut |p| flights.push(p.to_vec()));
                v.poll_sender_report(now, cname, &mut out)
            });
            // The flights are the driver's, not the session's.
            e.heap = e.heap.saturating_sub(vec_bytes(&flights) - kept);
            self.shared.pools.book(e);
            if let Some(to) = e.viewer.remote_addr() {
                for f in &flights {
                    self.send_to(f, to);
                }
                if let Some(n) = sr {
                    self.send_to(&out[..n], to);
                }
            }
            self.after_io(id);
        }
        self.trim_and_book();
    }

    /// Books the session table's capacity in the `viewer_sessions` pool.
    pub(super) fn book_slots(&mut self) {
        let bytes = self.table.slot_bytes();
        let pools = &mut self.shared.pools;
        if bytes == pools.slots_reserved {
            return;
        }
        pools.sessions.unreserve(pools.slots_reserved);
        pools.sessions.reserve(bytes);
        pools.slots_reserved = bytes;
    }

    /// Gives back memory a wave of departed viewers left behind (trailing empty slots,
    /// mostly empty lists) and refreshes the ring and index pools. Runs in the sweep, off
    /// the per-packet path.
    pub(super) fn trim_and_book(&mut self) {
        self.table.trim();
        for s in &mut self.streams.slots {
            shrink_vec(&mut s.viewers);
        }
        self.book_slots();
        let pools = &mut self.shared.pools;
        book_set(
            &pools.rings,
            &mut pools.rings_booked,
            self.streams.ring_memory(),
        );
        // The streams' viewer lists, and the table's free list.
        let (viewers, used, allocated) = self.streams.viewer_lists_memory();
        let (free_used, free_allocated) = self.table.free_bytes();
        let now = (viewers, used + free_used, allocated + free_allocated);
        book_set(&pools.index, &mut pools.index_booked, now);
    }
}

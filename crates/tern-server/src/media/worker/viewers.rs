//! A worker's viewers: joining (a slot in the table, a route for its ICE ufrag), ICE and
//! DTLS, the keyframe cache at connect, media written into the send batch, and leaving.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tern_proto::codec::MediaKind;
use tern_proto::stun;
use tern_rtc::stream::RingPacket;
use tern_rtc::viewer::adapt::LayerChooser;
use tern_rtc::viewer::{CloseReason, PWD_LEN, UFRAG_LEN, Viewer, ViewerParams, ViewerState};
use tokio::sync::oneshot;
use tracing::{debug, warn};

use super::deadlines::Timer;
use super::outbox::Outbox;
use super::{CATCHUP_BURST, CATCHUP_TICK, Role, Worker};
use crate::limits::AddrPermit;
use crate::media::ledger::{ledger, vec_bytes};
use crate::media::link::{Ctl, Target, ViewerId};
use crate::media::socket::Route;
use crate::media::stats::EngineStats;
use crate::media::table::{Entry, SLOT_BYTES, ViewerTable};

impl Worker {
    /// Adds a viewer of `stream` (the WHEP or OME side made its parameters) and replies
    /// with its id; a dropped reply means the worker could not take it.
    pub(super) fn add_viewer(
        &mut self,
        stream: usize,
        params: ViewerParams,
        reply: oneshot::Sender<ViewerId>,
        permit: Option<AddrPermit>,
    ) {
        if stream >= self.streams.slots.len() {
            self.unplace();
            return;
        }
        if self.table.is_full() {
            // The reply is dropped, which the HTTP side reports as unavailable.
            warn!("media worker {} is full", self.seat.index);
            self.unplace();
            return;
        }
        let ufrag = params.local_ufrag;
        // The ufrag was allocated on the HTTP side; the viewer owns it from here.
        let heap = params.remote_ufrag.len();
        let entry = Entry {
            viewer: Viewer::new(params, Instant::now()),
            stream,
            pos: self.streams.slots[stream].viewers.len(),
            handshaking: true,
            heap,
            booked: (false, 0),
            reported_lost: 0,
            catchup: None,
            layers: LayerChooser::default(),
        };
        let Some(id) = self.table.insert(entry, permit) else {
            self.unplace();
            return;
        };
        self.book_slots();
        self.streams.slots[stream].viewers.push(id);
        if let Some(e) = self.table.get(id) {
            self.shared.pools.sessions.add(1, SLOT_BYTES);
            self.shared.pools.book(e);
        }
        // The route is queued before the reply, so it is in place before the
        // viewer's first check can arrive.
        self.links.route(|| Route::Ufrag {
            ufrag,
            id,
            add: true,
        });
        let stats = &self.shared.stats;
        stats
            .snapshots
            .viewer_joined(id.raw(), self.streams.key(stream));
        stats.viewers.fetch_add(1, Ordering::Relaxed);
        stats.handshakes.fetch_add(1, Ordering::Relaxed);
        let _ = reply.send(id);
    }

    pub(super) fn remove(&mut self, id: ViewerId, reason: CloseReason) {
        self.remove_as(id, reason, None);
    }

    /// [`Worker::remove`], with the reason its `viewer.left` event gives in place of
    /// `reason`'s own (a stream's removal: `app_removed`, `source_removed`).
    pub(super) fn remove_as(
        &mut self,
        id: ViewerId,
        reason: CloseReason,
        label: Option<&'static str>,
    ) {
        let Some(mut e) = self.table.remove(id) else {
            return;
        };
        // Closing from our side tells a connected viewer with DTLS close_notify.
        let mut alert = [0u8; 64];
        let mut alert_len = 0;
        ledger(&mut e, |v| {
            if reason == CloseReason::Local {
                v.close_locally(&mut |rec| {
                    if let Some(dst) = alert.get_mut(..rec.len()) {
                        dst.copy_from_slice(rec);
                        alert_len = rec.len();
                    }
                });
            } else {
                v.close(reason);
            }
        });
        if alert_len > 0
            && let Some(to) = e.viewer.remote_addr()
        {
            self.send_to(&alert[..alert_len], to);
        }
        let stats = &self.shared.stats;
        stats.snapshots.viewer_left(
            id.raw(),
            label.unwrap_or(match reason {
                CloseReason::ConnectTimeout => "connect timeout",
                CloseReason::ConsentExpired => "consent expired",
                CloseReason::DtlsFailed => "DTLS failed",
                CloseReason::PeerClosed => "closed by peer",
                CloseReason::Local => "closed by server",
            }),
        );
        self.shared.pools.unbook(&mut e);
        if e.handshaking {
            stats.handshakes.fetch_sub(1, Ordering::Relaxed);
            if reason != CloseReason::Local {
                stats.handshakes_failed.fetch_add(1, Ordering::Relaxed);
            }
        }
        stats.viewers.fetch_sub(1, Ordering::Relaxed);
        self.unplace();
        let ufrag = *e.viewer.local_ufrag();
        self.links.route(|| Route::Ufrag {
            ufrag,
            id,
            add: false,
        });
        if let Some(addr) = e.viewer.remote_addr() {
            self.links.route(|| Route::Addr {
                addr,
                to: Target::Viewer(id),
                add: false,
            });
        }
        let list = &mut self.streams.slots[e.stream].viewers;
        list.swap_remove(e.pos);
        if let Some(&moved) = list.get(e.pos)
            && let Some(m) = self.table.get(moved)
        {
            m.pos = e.pos;
        }
        debug!(?reason, "viewer removed");
    }

    /// ICE restart (WHEP PATCH): new local credentials, the viewer's new ufrag.
    pub(super) fn restart_ice(
        &mut self,
        id: ViewerId,
        ufrag: [u8; UFRAG_LEN],
        pwd: [u8; PWD_LEN],
        remote_ufrag: Box<str>,
    ) {
        let Some(e) = self.table.get(id) else {
            return;
        };
        let old = *e.viewer.local_ufrag();
        let added = remote_ufrag.len();
        ledger(e, |v| v.restart_ice(ufrag, pwd, remote_ufrag));
        e.heap += added;
        self.shared.pools.book(e);
        self.links.route(|| Route::Ufrag {
            ufrag: old,
            id,
            add: false,
        });
        self.links.route(|| Route::Ufrag {
            ufrag,
            id,
            add: true,
        });
    }

    /// Pins a viewer to a layer (the API), or unpins it; it moves at the layer's next
    /// keyframe, asked for at once.
    pub(super) fn set_layer(&mut self, id: ViewerId, pin: Option<u8>, now: Instant) {
        let Some(e) = self.table.get(id) else {
            return;
        };
        let stream = e.stream;
        let layer = pin.unwrap_or_else(|| self.streams.slots[stream].stream.pick_layer(None));
        e.viewer.set_layer(layer, pin.is_some());
        if e.viewer.video_layer().is_some_and(|l| l != layer) {
            self.ask_keyframe(stream, layer, now);
        }
    }

    /// A viewer placed here by [`EngineHandle::place`] is gone (or was never made).
    pub(super) fn unplace(&self) {
        if self.seat.role == Role::Stream {
            self.links.loads[self.seat.index].fetch_sub(1, Ordering::Relaxed);
        }
    }

    pub(super) fn handle_stun(&mut self, now: Instant, id: ViewerId, buf: &[u8], from: SocketAddr) {
        let Ok(msg) = stun::Message::parse(buf) else {
            self.shared.stats.dropped_in.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let mut out = [0u8; 256];
        let Some(e) = self.table.get(id) else {
            self.shared.stats.dropped_in.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let before = e.viewer.remote_addr();
        let res = ledger(e, |v| v.handle_stun(now, &msg, from, &mut out));
        self.shared.pools.book(e);
        match res {
            Ok(n) => {
                let after = e.viewer.remote_addr();
                if before != after {
                    let to = Target::Viewer(id);
                    if let Some(addr) = before {
                        self.links.route(|| Route::Addr {
                            addr,
                            to,
                            add: false,
                        });
                    }
                    if let Some(addr) = after {
                        self.links.route(|| Route::Addr {
                            addr,
                            to,
                            add: true,
                        });
                    }
                }
                self.send_to(&out[..n], from);
            }
            Err(err) => {
                debug!("stun from {from} dropped: {err}");
                self.shared.stats.dropped_in.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub(super) fn handle_dtls(&mut self, now: Instant, id: ViewerId, buf: &[u8], from: SocketAddr) {
        let mut flights: Vec<Vec<u8>> = Vec::new();
        let Some(e) = self.table.confirmed(id, from) else {
            self.shared.stats.dropped_in.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let dtls = &self.shared.dtls;
        let res = ledger(e, |v| {
            v.handle_dtls(now, buf, dtls, &mut |p| flights.push(p.to_vec()))
        });
        // The flights are the driver's, not the session's.
        e.heap = e.heap.saturating_sub(vec_bytes(&flights));
        self.shared.pools.book(e);
        for f in &flights {
            self.send_to(f, from);
        }
        if let Err(err) = res {
            debug!("dtls from {from}: {err}");
        }
        self.after_io(id);
    }

    /// Reacts to state changes after input: handshake completion (start media from the
    /// latest keyframe) or closure.
    pub(super) fn after_io(&mut self, id: ViewerId) {
        let Some(e) = self.table.get(id) else { return };
        match e.viewer.state() {
            ViewerState::Connected if e.handshaking => {
                let stream = e.stream;
                let remote = e.viewer.remote_addr();
                let srtp = e.viewer.srtp_profile().map(|p| p.name());
                self.table.connected(id);
                let stats = &self.shared.stats;
                stats.snapshots.viewer_connected(id.raw(), remote, srtp);
                stats.handshakes.fetch_sub(1, Ordering::Relaxed);
                stats.handshakes_done.fetch_add(1, Ordering::Relaxed);
                self.start_viewer(id, stream);
            }
            ViewerState::Closed(reason) => self.remove(id, reason),
            _ => {}
        }
    }

    /// Starts a new viewer's video at the latest keyframe held (the keyframe cache), so it
    /// shows a picture at once instead of waiting for the next GOP. The GOP so far is sent
    /// paced (see [`Worker::catch_up`]), not in one burst: a long GOP is hundreds of packets,
    /// more than a receiver's socket buffer takes at once, and the ones it dropped would be
    /// a hole in the viewer's sequence. With no keyframe held (the GOP outgrew the ring, or
    /// none came yet) the viewer starts at the next keyframe, asked for at once.
    ///
    /// A simulcast viewer starts on its pinned layer, else on the best one sending.
    pub(super) fn start_viewer(&mut self, id: ViewerId, stream: usize) {
        let s = &self.streams.slots[stream].stream;
        let Some(e) = self.table.get(id) else {
            return;
        };
        if !e.viewer.pinned() {
            let first = LayerChooser::first_layer(&s.layer_rates(), e.viewer.can_estimate());
            e.viewer.set_layer(first, false);
        }
        let layer = e.viewer.target_layer();
        let from = s
            .ring_of(MediaKind::Video, layer)
            .and_then(|r| r.last_keyframe());
        let Some(from) = from else {
            self.ask_keyframe(stream, layer, Instant::now());
            return;
        };
        if let Some(e) = self.table.get(id) {
            e.catchup = Some(from);
            self.catching.push(id);
            self.catch_up_one(id);
            if self.deadlines.get(Timer::CatchUp).is_none() {
                self.deadlines
                    .set(Timer::CatchUp, Instant::now() + CATCHUP_TICK);
            }
        }
    }

    /// Sends each catching-up viewer its next [`CATCHUP_BURST`] packets of the keyframe
    /// cache; a viewer whose cursor passed the ring's head is live from then on. Runs every
    /// [`CATCHUP_TICK`] while anyone catches up.
    pub(super) fn catch_up(&mut self, now: Instant) {
        if !self.deadlines.is_expired(Timer::CatchUp, now) {
            return;
        }
        let mut i = 0;
        while i < self.catching.len() {
            let id = self.catching[i];
            if self.catch_up_one(id) {
                i += 1;
            } else {
                self.catching.swap_remove(i);
            }
        }
        if self.catching.is_empty() {
            self.deadlines.stop(Timer::CatchUp);
            // Nothing kept sized for the last wave of joins: idle holds no list.
            self.catching = Vec::new();
        } else {
            self.deadlines.set(Timer::CatchUp, now + CATCHUP_TICK);
        }
    }

    /// One step of a viewer's catch-up; false once it is live (or gone).
    fn catch_up_one(&mut self, id: ViewerId) -> bool {
        let Some(e) = self.table.get(id) else {
            return false;
        };
        let (stream, Some(mut next)) = (e.stream, e.catchup) else {
            return false;
        };
        let layer = e.viewer.video_layer().unwrap_or(e.viewer.target_layer());
        let Some(ring) = self.streams.slots[stream]
            .stream
            .ring_of(MediaKind::Video, layer)
        else {
            e.catchup = None;
            return false;
        };
        let Some(head) = ring.head() else {
            e.catchup = None;
            return false;
        };
        let mut pkts: [Option<RingPacket>; CATCHUP_BURST] = Default::default();
        let mut n = 0;
        while next <= head && n < CATCHUP_BURST {
            if let Some(p) = ring.get(next) {
                pkts[n] = Some(p.clone());
                n += 1;
            }
            next += 1;
        }
        let done = next > head;
        e.catchup = (!done).then_some(next);
        for p in pkts.iter().flatten() {
            self.send_media(id, p, false, 0);
        }
        !done
    }

    /// Asks the publisher of `stream` for a keyframe of a video layer: here if this worker
    /// owns the stream, else through its app worker (which coalesces the requests).
    pub(super) fn ask_keyframe(&mut self, stream: usize, layer: u8, now: Instant) {
        if self.seat.owns(stream) {
            self.keyframe_request(stream, layer, now);
        } else if let Some(app) = self.links.hosts.get(self.seat.owner_of(stream)) {
            let _ = app.ctl(Ctl::Keyframe(stream, layer));
        }
    }

    /// Writes a media packet for a viewer into the send batch (see [`write_media`]).
    pub(super) fn send_media(
        &mut self,
        id: ViewerId,
        pkt: &RingPacket,
        live: bool,
        pad: u8,
    ) -> Option<usize> {
        write_media(
            &mut self.out,
            &mut self.table,
            &self.shared.stats,
            id,
            pkt,
            live,
            pad,
        )
    }

    /// Writes one probe packet for a viewer into the send batch (see `worker/layers.rs`);
    /// false when it has none to send.
    pub(super) fn send_padding(&mut self, id: ViewerId, now: Instant) -> bool {
        let stats = &self.shared.stats;
        self.out.make_room(stats);
        let Some(e) = self.table.get(id) else {
            return false;
        };
        let Some(to) = e.viewer.remote_addr() else {
            return false;
        };
        let Some(slot) = self.out.slot() else {
            return false;
        };
        match e.viewer.write_padding(slot, now) {
            Ok(Some(n)) => {
                self.out.commit(n, to);
                stats.probe_packets.fetch_add(1, Ordering::Relaxed);
                true
            }
            Ok(None) => false,
            Err(err) => {
                debug!("write_padding: {err}");
                false
            }
        }
    }

    /// Queues a live packet of `stream` for this worker's viewers; [`Worker::fan_out_queued`]
    /// sends it. The queue never outlives one pass of the worker's loop.
    pub(super) fn fan_out(&mut self, stream: usize, pkt: RingPacket) {
        if self.streams.slots[stream].viewers.is_empty() {
            return;
        }
        if self.fanout.queue(stream, pkt) {
            self.fan_out_queued();
        }
    }

    /// Sends the queued live packets viewer by viewer (see `worker/fanout.rs`): each viewer
    /// gets every queued packet of its stream in a row, its video then its audio, each in
    /// ring order.
    pub(super) fn fan_out_queued(&mut self) {
        if self.fanout.is_empty() {
            return;
        }
        let batch = self.fanout.take(self.out.gso_on());
        for (first, stream) in batch.streams() {
            let (mut packets, mut bytes) = (0u64, 0u64);
            // The parts borrowed one by one: the stream's viewer list is read while the
            // send batch and the viewers' slots are written.
            let stats = &self.shared.stats;
            for &id in &self.streams.slots[stream].viewers {
                // Video first, then audio: a viewer's video packets lie next to each other
                // in the send batch and leave as one GSO message (`media/batch.rs`); each
                // kind keeps its order, and RTP orders nothing across SSRCs.
                for video in [true, false] {
                    for (pkt, pad) in batch
                        .packets(first, stream)
                        .filter(|(p, _)| (p.kind == MediaKind::Video) == video)
                    {
                        if let Some(b) =
                            write_media(&mut self.out, &mut self.table, stats, id, pkt, true, pad)
                        {
                            packets += 1;
                            bytes += b as u64;
                        }
                    }
                }
            }
            // Per-stream counters: one update per stream and batch, not per viewer.
            let c = &stats.streams[stream];
            c.packets.fetch_add(packets, Ordering::Relaxed);
            c.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        self.fanout.give_back(batch);
    }
}

/// Writes a media packet for viewer `id` into the send batch, with `pad` bytes of RTP
/// padding (see `worker/fanout.rs`); returns its size. A `live` video packet is skipped for
/// a viewer still catching up: its cursor will reach it. It takes only the parts it writes
/// to, so the fan-out can walk a stream's viewer list meanwhile, and a retransmission
/// send a packet from the ring without a copy.
pub(super) fn write_media(
    out: &mut Outbox,
    table: &mut ViewerTable,
    stats: &EngineStats,
    id: ViewerId,
    pkt: &RingPacket,
    live: bool,
    pad: u8,
) -> Option<usize> {
    out.make_room(stats);
    let e = table.get(id)?;
    if live && e.catchup.is_some() && pkt.kind == MediaKind::Video {
        return None;
    }
    let to = e.viewer.remote_addr()?;
    // A keyframe may start the viewer on a layer or move it to another.
    let layer_was = pkt.keyframe.then(|| e.viewer.video_layer());
    let slot = out.slot()?;
    match e.viewer.write_media_padded(pkt, slot, pad) {
        Ok(Some(n)) => {
            out.commit_media(n, to);
            if let Some(was) = layer_was
                && e.viewer.video_layer() != was
            {
                let (stream, pinned) = (e.stream, e.viewer.pinned());
                layer_changed(stats, id, stream, pkt.layer, pinned);
            }
            Some(n)
        }
        Ok(None) => None,
        Err(err) => {
            debug!("write_media: {err}");
            None
        }
    }
}

/// A viewer started on a layer or moved: its snapshot says which (simulcast streams).
fn layer_changed(stats: &EngineStats, id: ViewerId, stream: usize, layer: u8, pinned: bool) {
    let rids = stats.rids(stream);
    if let Some(rid) = rids.get(usize::from(layer)) {
        stats.snapshots.viewer_layer(id.raw(), rid, pinned);
    }
}

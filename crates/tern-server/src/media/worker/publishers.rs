//! A worker's publishers and sources: WHIP and RTMP publishers through [`Ingest`], the
//! built-in clip sources, keyframe requests upstream, and each new packet into the stream's
//! ring, out to this worker's viewers and over to the stream workers.

use std::sync::atomic::Ordering;
use std::time::Instant;

use tern_proto::codec::{MediaKind, VideoCodec};
use tern_proto::h264;
use tern_rtc::publisher::Publisher;
use tern_rtc::stream::RingPacket;
use tokio::sync::oneshot;
use tracing::{info, warn};

use super::Worker;
use crate::limits::AddrPermit;
use crate::media::ingest::{AddError, FrameCommand, IngestOutput, LeftReason, PublisherId};
use crate::media::link::{TapPacket, WhipLayers};
use crate::media::socket::Route;

/// A new packet's header fields, before its payload is pooled (see `Worker::accept`).
pub(super) struct Head {
    pub(super) kind: MediaKind,
    pub(super) layer: u8,
    pub(super) seq: u64,
    pub(super) rtp_ts: u32,
    pub(super) marker: bool,
    pub(super) keyframe: bool,
    pub(super) capture_ntp: u64,
}

impl Worker {
    /// Installs a WHIP publisher on an owned stream that has none (and is no clip).
    pub(super) fn add_publisher(
        &mut self,
        stream: usize,
        publisher: Box<Publisher>,
        reply: oneshot::Sender<Result<PublisherId, AddError>>,
        permit: Option<AddrPermit>,
        renditions: Option<WhipLayers>,
    ) {
        let res = if !self.seat.owns(stream) || !self.streams.takes_publisher(stream) {
            Err(AddError::Busy)
        } else {
            let ufrag: Box<str> = publisher.local_ufrag().into();
            let codec = publisher.video_codec();
            // Its simulcast layers, or the source and its renditions.
            let (rids, keyframe) = match renditions {
                Some(r) => (r.rids, Some(r.keyframe)),
                None => (publisher.rids().to_vec(), None),
            };
            let made = keyframe.is_some();
            let r = self
                .ingest
                .add(stream, *publisher, Instant::now(), permit, keyframe);
            if r.is_ok() {
                // What viewers who join from now on are answered with.
                let stats = &self.shared.stats;
                stats.set_video_codec(stream, codec);
                stats.set_rids(stream, &rids);
                set_flag(stats.stream(stream).map(|c| &c.renditions_wanted), made);
            }
            if r.is_ok() {
                self.links.route(|| Route::Publisher {
                    ufrag: ufrag.clone(),
                    stream,
                    add: true,
                });
            }
            r
        };
        if let Ok(id) = &res {
            self.stop_slate(stream);
            let stats = &self.shared.stats;
            stats.publishers.fetch_add(1, Ordering::Relaxed);
            set_flag(stats.stream(stream).map(|c| &c.publishing), true);
            self.streams.publisher_ids[stream] = Some(id.serial);
            let key = self.streams.key(stream);
            stats.snapshots.publisher_joined(id.serial, key, "whip");
            info!("publisher on {key} connecting");
        }
        let _ = reply.send(res);
    }

    /// ICE restart of a WHIP publisher (a PATCH with the encoder's new credentials): the
    /// media port learns the new server ufrag; the addresses already learned stay, so media
    /// keeps flowing until the encoder's checks move it.
    pub(super) fn restart_publisher_ice(
        &mut self,
        id: PublisherId,
        ufrag: &str,
        pwd: &str,
        reply: oneshot::Sender<Result<(String, String), String>>,
    ) {
        let res = self.ingest.restart_ice(id, ufrag, pwd);
        if let Ok((local, _)) = &res {
            let ufrag: Box<str> = local.as_str().into();
            self.links.route(|| Route::Publisher {
                ufrag: ufrag.clone(),
                stream: id.stream,
                add: true,
            });
            info!("publisher of {}: ICE restart", self.streams.key(id.stream));
        }
        let _ = reply.send(res);
    }

    /// A frame publisher's request: take the stream's publisher slot, its codec, or media.
    pub(super) fn handle_frames(&mut self, mut cmd: FrameCommand) {
        let (now, mut out, s) = (Instant::now(), Vec::new(), cmd.stream());
        let free = self.seat.owns(s) && self.streams.takes_publisher(s);
        let (codec, rids) = match &mut cmd {
            FrameCommand::Add { codec, rids, .. } => (*codec, std::mem::take(rids)),
            FrameCommand::Codec { id, codec } => {
                // What viewers who join from now on are answered with.
                if self.ingest.publisher_of(s) == Some(*id) {
                    self.shared.stats.set_video_codec(s, *codec);
                }
                (*codec, Vec::new())
            }
            FrameCommand::Media { .. } => (VideoCodec::H264, Vec::new()),
        };
        if let Some(id) = self.ingest.frames(cmd, free, now, &mut out) {
            self.stop_slate(s);
            let stats = &self.shared.stats;
            stats.set_video_codec(s, codec);
            // Its layers (RTMP renditions), for `?layer=` and the snapshot.
            stats.set_rids(s, &rids);
            stats.publishers.fetch_add(1, Ordering::Relaxed);
            set_flag(stats.stream(s).map(|c| &c.publishing), true);
            self.streams.publisher_ids[s] = Some(id.serial);
            let key = self.streams.key(s);
            stats
                .snapshots
                .publisher_joined(id.serial, key, self.ingest.source(s).as_str());
        }
        self.apply_ingest(now, out);
    }

    /// Ends a publisher (WHIP DELETE, RTMP connection closed, kick, shutdown). A WHIP
    /// publisher gets RTCP BYE and DTLS close_notify; an RTMP one's connection closes.
    pub(super) fn remove_publisher(&mut self, id: PublisherId, reason: LeftReason) {
        let mut out = Vec::new();
        self.ingest.remove(id, reason, &mut out);
        self.apply_ingest(Instant::now(), out);
    }

    /// A viewer of an owned stream asked for a keyframe of a video layer: the clip source
    /// sends one every second; ingest coalesces these into one upstream request per layer.
    pub(super) fn keyframe_request(&mut self, stream: usize, layer: u8, now: Instant) {
        let mut out = Vec::new();
        self.ingest.request_keyframe(stream, layer, now, &mut out);
        self.apply_ingest(now, out);
    }

    /// Takes the packets now due from each clip source this worker runs.
    pub(super) fn run_sources(&mut self, now: Instant) {
        for k in 0..self.streams.sourced.len() {
            let si = self.streams.sourced[k];
            let Some(mut src) = self.streams.slots[si].source.take() else {
                continue;
            };
            src.poll(now, &mut |mp| {
                let head = Head {
                    kind: mp.kind,
                    layer: 0,
                    seq: mp.seq,
                    rtp_ts: mp.rtp_ts,
                    marker: mp.marker,
                    keyframe: mp.keyframe,
                    capture_ntp: self.shared.clock.ntp(mp.capture_time),
                };
                self.accept(si, head, mp.payload, false);
            });
            self.streams.slots[si].source = Some(src);
        }
        self.run_slates(now);
    }

    /// A new packet of an owned stream, from a source, a slate (`slate`) or a publisher: its
    /// payload is copied once into a pooled buffer, the ring packet made around it (the one
    /// place ring packets are made), then pushed into the ring and, unless the ring refused
    /// it, published and handed to the media tap.
    pub(super) fn accept(&mut self, stream: usize, head: Head, payload: &[u8], slate: bool) {
        let stats = &self.shared.stats;
        // Layer 0's SPS: lower layers (simulcast, renditions) may be another profile.
        if head.kind == MediaKind::Video
            && head.layer == 0
            && let Some(id) = h264::sps_profile_level_id(payload)
            && stats.video(stream).codec == VideoCodec::H264
        {
            // What viewers' answers state from now on (one byte test for other packets).
            stats.set_h264_profile(stream, id);
        }
        let mut b = self.shared.pool.alloc(payload.len());
        b.copy_from_slice(payload);
        let pkt = RingPacket {
            kind: head.kind,
            layer: head.layer,
            seq: head.seq,
            rtp_ts: head.rtp_ts,
            marker: head.marker,
            keyframe: head.keyframe,
            capture_ntp: head.capture_ntp,
            payload: b.freeze(),
        };
        if self.streams.slots[stream].stream.push(pkt.clone()) {
            self.tap_packet(stream, &pkt, slate);
            self.publish(stream, pkt);
        }
    }

    /// Hands a packet of a stream that is being packaged (LL-HLS, a recording, thumbnails)
    /// to the media tap's thread, unless its publisher hands packagers its frames itself
    /// ([`crate::media::ingest::Source::packages_from_frames`]). Never waits: a full queue
    /// drops the packet and counts it.
    fn tap_packet(&mut self, stream: usize, pkt: &RingPacket, slate: bool) {
        let Some(tx) = &self.streams.tap else {
            return;
        };
        let stats = &self.shared.stats;
        let Some(c) = stats.stream(stream) else {
            return;
        };
        let wanted = if pkt.layer != 0 {
            // Lower video layers (simulcast, renditions: a frame publisher's too) are
            // LL-HLS variants; the other subscribers take the top layer only.
            c.hls_wanted.load(Ordering::Relaxed)
        } else {
            // A frame publisher's top layer comes to the tap as its frames.
            !self.ingest.packages_from_frames(stream)
                && (c.hls_wanted.load(Ordering::Relaxed)
                    || c.renditions_wanted.load(Ordering::Relaxed)
                    || c.record_wanted.load(Ordering::Relaxed)
                    || c.thumb_wanted.load(Ordering::Relaxed)
                    || c.forward_wanted.load(Ordering::Relaxed))
        };
        if !wanted {
            return;
        }
        let tap = TapPacket {
            stream,
            pkt: pkt.clone(),
            slate,
        };
        if tx.try_send(tap).is_err() {
            stats.hls_tap_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A new packet of an owned stream: to this worker's viewers and to the stream workers.
    pub(super) fn publish(&mut self, stream: usize, pkt: RingPacket) {
        let full = self.fanout.hand_over(stream, &pkt);
        if full > 0 {
            let stats = &self.shared.stats;
            stats.queue_full.fetch_add(full, Ordering::Relaxed);
        }
        // Last, so the packet moves into this worker's fan-out queue without a clone.
        self.fan_out(stream, pkt);
    }

    /// Carries out what ingest asked for: datagrams to publishers, media into the rings
    /// and out to the viewers, liveness changes.
    pub(super) fn apply_ingest(&mut self, now: Instant, out: Vec<IngestOutput>) {
        for o in out {
            match o {
                IngestOutput::Transmit(to, d) => self.send_to(&d, to),
                IngestOutput::Media {
                    stream,
                    packet,
                    seq,
                    ts,
                    keyframe,
                } => {
                    self.shared
                        .stats
                        .ingest_packets
                        .fetch_add(1, Ordering::Relaxed);
                    if packet.layer == 0
                        && packet.kind == MediaKind::Video
                        && self.ingest.packages_from_frames(stream)
                        && let Some(c) = self.shared.stats.stream(stream)
                    {
                        // The frames' clock to the ring's, for LL-HLS renditions.
                        let off = ts.wrapping_sub(packet.rtp_ts as u32);
                        c.frame_ts_offset.store(off, Ordering::Relaxed);
                    }
                    let head = Head {
                        kind: packet.kind,
                        layer: packet.layer,
                        seq,
                        rtp_ts: ts,
                        marker: packet.marker,
                        keyframe,
                        capture_ntp: packet
                            .capture_ntp
                            .unwrap_or_else(|| self.shared.clock.ntp(now)),
                    };
                    self.accept(stream, head, &packet.payload, false);
                }
                IngestOutput::Live(stream) => {
                    let stats = &self.shared.stats;
                    let key = self.streams.key(stream);
                    set_flag(stats.stream(stream).map(|c| &c.live), true);
                    let kind = self.ingest.source(stream).as_str();
                    stats
                        .snapshots
                        .stream_state(key, kind, true, &stats.rids(stream));
                    if let Some(id) = self.streams.publisher_ids[stream] {
                        stats.snapshots.publisher_live(id);
                    }
                    info!("{key} is live (publisher)");
                }
                IngestOutput::Gone { stream, reason } => {
                    let stats = &self.shared.stats;
                    set_flag(stats.stream(stream).map(|c| &c.live), false);
                    set_flag(stats.stream(stream).map(|c| &c.publishing), false);
                    set_flag(stats.stream(stream).map(|c| &c.renditions_wanted), false);
                    let key = self.streams.key(stream);
                    stats.snapshots.stream_state(key, "none", false, &[]);
                    stats.set_rids(stream, &[]);
                    if let Some(id) = self.streams.publisher_ids[stream].take() {
                        stats.snapshots.publisher_left(id, reason.as_str());
                    }
                    // Viewers stay; a later publisher continues the same RTP streams.
                    self.streams.slots[stream].stream.clear();
                    self.fanout.reset(stream);
                    self.links.route(|| Route::Publisher {
                        ufrag: Box::default(),
                        stream,
                        add: false,
                    });
                    stats.publishers.fetch_sub(1, Ordering::Relaxed);
                    let key = self.streams.key(stream);
                    match reason {
                        LeftReason::Ended => info!("publisher of {key} left"),
                        LeftReason::Shutdown => info!("publisher of {key} closed: shutdown"),
                        LeftReason::ConnectTimeout => warn!(
                            "publisher of {key} ended: ICE and DTLS did not complete within {:?}",
                            self.ingest.timeouts().connect
                        ),
                        LeftReason::MediaTimeout => warn!(
                            "publisher of {key} ended: no media for {:?}",
                            self.ingest.timeouts().media
                        ),
                        LeftReason::Removed(r) => info!("publisher of {key} ended: {}", r.as_str()),
                    }
                    self.start_slate(stream, now);
                }
            }
        }
    }
}

fn set_flag(flag: Option<&std::sync::atomic::AtomicBool>, v: bool) {
    if let Some(f) = flag {
        f.store(v, Ordering::Relaxed);
    }
}

//! A worker's slates (`[[app]] fallback`): an owned stream with no publisher plays its app's
//! clip, numbered by ingest as a publisher's packets are, until a publisher takes the
//! stream again (see `media/slate.rs`).

use std::sync::atomic::Ordering;
use std::time::Instant;

use tern_proto::codec::{MediaKind, VideoCodec};
use tracing::{info, warn};

use super::Worker;
use super::publishers::Head;
use crate::media::slate::Slate;

impl Worker {
    /// At start: each owned, named stream (declared, or a camera's) without a clip of its
    /// own plays its app's slate, if it has one, until its first publisher.
    pub(super) fn start_declared_slates(&mut self, now: Instant) {
        for s in 0..self.streams.slots.len() {
            let slot = &self.streams.slots[s];
            if self.seat.owns(s) && !slot.key.is_empty() && slot.source.is_none() {
                self.start_slate(s, now);
            }
        }
    }

    /// Stream `s` has no publisher: its app's slate starts, if it has one (and none runs).
    pub(super) fn start_slate(&mut self, s: usize, now: Instant) {
        let Some(clip) = self.streams.slates.of(self.streams.key(s)) else {
            return;
        };
        if self.streams.slots[s].slate.is_some() {
            return;
        }
        // Viewers were answered with the stream's codec: the slate's H264 only fits H264.
        let codec = self.shared.stats.video(s).codec;
        let video = codec == VideoCodec::H264;
        self.ingest.new_timeline(s);
        self.streams.slots[s].slate = Some(Slate::start(&clip, now, video));
        self.streams.slated.push(s);
        let stats = &self.shared.stats;
        let key = self.streams.key(s);
        if !video {
            warn!(
                "{key}: slate without its video (the stream's viewers take {codec:?}, the slate is H264)"
            );
        }
        if let Some(c) = stats.stream(s) {
            c.live.store(true, Ordering::Relaxed);
            c.slate.store(true, Ordering::Relaxed);
        }
        stats.snapshots.stream_state(key, "slate", true, &[]);
        info!("{key} plays its slate");
    }

    /// Stream `s` has a publisher again, or is removed: its slate stops. (The publisher's
    /// first packets continue the stream's numbering: `Ingest::add` starts its timeline.)
    pub(super) fn stop_slate(&mut self, s: usize) {
        if self.streams.slots[s].slate.take().is_none() {
            return;
        }
        self.streams.slated.retain(|&x| x != s);
        if let Some(c) = self.shared.stats.stream(s) {
            c.slate.store(false, Ordering::Relaxed);
        }
        info!("{}: slate stopped", self.streams.key(s));
    }

    /// Takes the packets now due from each slate this worker runs, onto their streams.
    pub(super) fn run_slates(&mut self, now: Instant) {
        for k in 0..self.streams.slated.len() {
            let si = self.streams.slated[k];
            let Some(mut slate) = self.streams.slots[si].slate.take() else {
                continue;
            };
            slate.source.poll(now, &mut |mp| {
                if mp.kind == MediaKind::Video && !slate.video {
                    return;
                }
                let (seq, rtp_ts) = self.ingest.map_slate(si, mp.kind, mp.seq, mp.rtp_ts, now);
                let head = Head {
                    kind: mp.kind,
                    layer: 0,
                    seq,
                    rtp_ts,
                    marker: mp.marker,
                    keyframe: mp.keyframe,
                    capture_ntp: self.shared.clock.ntp(mp.capture_time),
                };
                // Marked: LL-HLS packages it, recordings leave it out.
                self.accept(si, head, mp.payload, true);
            });
            self.streams.slots[si].slate = Some(slate);
        }
    }
}

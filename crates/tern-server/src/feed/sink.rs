//! [`FrameSink`]: where a frame publisher's thread puts what its container became.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_pool::{CountingAlloc, PoolCounter};
use tern_proto::codec::VideoCodec;
use tern_rtc::av::{AvEvent, AvPipeline};
use tern_rtc::publisher::IngestPacket;

use super::ledger::{Booking, Ledger, arc_bytes};
use super::watch::VideoWatch;
use crate::config::TranscodeSetting;
use crate::media::{EngineHandle, FrameCommand, PublisherId};
use crate::tap::MediaTap;

/// How long a publisher's thread waits for room in its app worker's bounded queue before
/// it gives up on the publisher. While it waits it reads nothing, so its transport pushes
/// back on the encoder; a worker that takes nothing for this long is overloaded or stuck.
pub const MEDIA_STALL: Duration = Duration::from_secs(2);

/// One frame publisher's way into the server: [`AvEvent`]s in; packets to the engine in
/// one batch per [`FrameSink::flush`], samples to every packager that wants the stream,
/// video notices to the [`VideoWatch`]. The thread's heap, less what it hands to other
/// threads, is measured by its [`Ledger`] into its ingest pool.
pub struct FrameSink {
    engine: EngineHandle,
    /// The packagers (none for an edge's upstream, whose media is packaged from the ring).
    tap: Option<Arc<MediaTap>>,
    /// The publisher, once it has its slot.
    id: Option<PublisherId>,
    packets: Vec<IngestPacket>,
    watch: VideoWatch,
    held: Ledger,
    booking: Option<Booking>,
    /// The subscribers that wanted the stream at the last tick ([`MediaTap::wanting`]).
    wanting: u64,
    /// The packagers take this publisher's frames (its video is H264): otherwise they take
    /// the stream's ring packets, as a WHIP publisher's
    /// ([`crate::media::Source::packages_from_frames`]), and samples stay off.
    samples: bool,
}

impl FrameSink {
    /// A sink for a publisher's thread into `engine` and the packagers of `tap`, its heap
    /// booked in `pool` from now on (a connection is measured from its first byte, before
    /// it has a slot).
    pub fn new(engine: &EngineHandle, tap: &Arc<MediaTap>, pool: &PoolCounter) -> FrameSink {
        FrameSink {
            engine: engine.clone(),
            tap: Some(tap.clone()),
            id: None,
            packets: Vec::new(),
            watch: VideoWatch::default(),
            held: Ledger::start(),
            booking: Some(Booking::open(pool.clone())),
            wanting: 0,
            samples: true,
        }
    }

    /// A sink of packets alone (an edge's upstream: no packager, no pool of its own).
    pub fn packets_only(engine: &EngineHandle) -> FrameSink {
        FrameSink {
            engine: engine.clone(),
            tap: None,
            id: None,
            packets: Vec::new(),
            watch: VideoWatch::default(),
            held: Ledger::start(),
            booking: None,
            wanting: 0,
            samples: true,
        }
    }

    /// Publisher `id` (stream `key`, the app's `transcode`) took its stream
    /// ([`super::PublisherSlot::id`]).
    pub fn attach(&mut self, id: PublisherId, key: &str, mode: TranscodeSetting) {
        self.id = Some(id);
        self.watch.key = key.to_string();
        self.watch.mode = mode;
        self.watch.publisher = Some(id.serial);
    }

    /// The publisher, once attached.
    pub fn id(&self) -> Option<PublisherId> {
        self.id
    }

    /// Once per loop of the thread: samples on while a packager wants the stream (the
    /// configurations sent again when one more starts to: it missed them), and the
    /// B-frame watch.
    pub fn tick(&mut self, av: &mut AvPipeline, now: Instant) {
        let Some(id) = self.id else {
            return;
        };
        self.watch.tick(&self.engine, av, now);
        let wanting = self
            .tap
            .as_ref()
            .filter(|_| self.samples)
            .map_or(0, |t| t.wanting(id.stream));
        av.set_samples(wanting != 0);
        if self.wanting != 0 && wanting & !self.wanting != 0 {
            // The others have them already: packagers take a configuration they hold as
            // nothing new.
            av.resend_configs();
        }
        self.wanting = wanting;
    }

    /// One event of the publisher's pipeline `av`. Packets wait for [`FrameSink::flush`];
    /// samples and notices are handed on at once, their bytes outside the ledger (the
    /// packagers' and the snapshots' own).
    pub fn handle(&mut self, av: &AvPipeline, e: AvEvent) {
        match e {
            AvEvent::Packet(p) => {
                // Handed to the engine, which frees it on its own thread.
                self.held.skip(arc_bytes(p.payload.len()));
                self.packets.push(p);
            }
            AvEvent::Video(n) => {
                let outside = CountingAlloc::thread_net_bytes();
                self.watch.notice(&self.engine, av, &n);
                self.held.skip(CountingAlloc::thread_net_bytes() - outside);
            }
            AvEvent::Sample(s) => {
                let outside = CountingAlloc::thread_net_bytes();
                if let (Some(id), Some(tap)) = (self.id, &self.tap) {
                    tap.sample(id.stream, &s);
                }
                self.held.skip(CountingAlloc::thread_net_bytes() - outside);
                drop(s);
            }
        }
    }

    /// A packet made without a pipeline (an edge's upstream RTP).
    pub fn packet(&mut self, p: IngestPacket) {
        self.held.skip(arc_bytes(p.payload.len()));
        self.packets.push(p);
    }

    /// Packets waiting for [`FrameSink::flush`].
    pub fn pending(&self) -> usize {
        self.packets.len()
    }

    /// `bytes` allocated on this thread since the last flush are someone else's (the
    /// publisher table's entry, made while the thread took its slot).
    pub fn skip(&mut self, bytes: i64) {
        self.held.skip(bytes);
    }

    /// Measures from here again (what this thread received was allocated by another).
    pub fn resume(&mut self) {
        self.held.resume();
    }

    /// The publisher's video is `codec` from now on (an SRT publisher's TS said so in its
    /// first video PES): the engine answers new viewers in it. Sent ahead of its packets.
    pub fn set_codec(&mut self, codec: VideoCodec) -> Result<(), &'static str> {
        // Only H264 frames are handed to packagers; another codec is packaged from the
        // ring, audio included, so samples would give them its audio twice.
        self.samples = codec == VideoCodec::H264;
        let Some(id) = self.id else {
            return Ok(());
        };
        self.engine
            .send_frames(FrameCommand::Codec { id, codec }, MEDIA_STALL)
    }

    /// Books the thread's heap, then sends the packets to the engine in one batch, waiting
    /// up to [`MEDIA_STALL`] for room. Packets made before the publisher had a slot are
    /// dropped. Errs if the engine stopped or its queue stayed full.
    pub fn flush(&mut self) -> Result<(), &'static str> {
        let vec = self.packets.capacity() * std::mem::size_of::<IngestPacket>();
        self.held.skip(vec as i64);
        let bytes = self.held.mark();
        if let Some(b) = self.booking.as_mut() {
            b.set(bytes);
        }
        let sent = match (self.id, self.packets.is_empty()) {
            (_, true) => Ok(()),
            (Some(id), false) => {
                let packets = std::mem::take(&mut self.packets);
                self.engine
                    .send_frames(FrameCommand::Media { id, packets }, MEDIA_STALL)
            }
            (None, false) => {
                self.packets = Vec::new();
                Ok(())
            }
        };
        // The channel's blocks are the engine's (see `Ledger::mark`).
        self.held.resume();
        sent
    }
}

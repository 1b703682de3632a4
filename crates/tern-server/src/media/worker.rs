//! The app and stream workers: one thread each, the same type in two roles (see
//! [`crate::media::engine`]). This file holds the worker's loop and its state. The state is
//! in parts, each a field of `Worker` borrowed on its own, so one part can be read while
//! another is written (quinn-proto's `Connection` is made of typed parts the same way).
//!
//! Four are plain groups, defined here, whose fields the worker's files read directly:
//!
//! - `Seat`: which worker this is (index, role, the app worker count), and so which
//!   streams it owns and serves;
//! - `Links`: its queues and wake-up, the other workers' queues, the socket workers'
//!   routes, the stream workers' loads;
//! - `Shared`: what it uses in common with the rest of the engine: DTLS, packet buffers,
//!   the NTP clock, the counters, the CNAME, its bookings in the memory pools;
//! - `Streams`: every stream slot (rings, viewers here, clip source), and what an app
//!   worker keeps of the streams it owns (publishers' snapshot ids, the clip streams, the
//!   media tap).
//!
//! The others are owned parts, each a type in its own file with its own tests, that keep
//! their fields to themselves:
//!
//! - `ViewerTable` (`media/table.rs`): the viewers' slots and ids, the free list, who is
//!   still handshaking;
//! - `Ingest` (`media/ingest.rs`): the publishers of the streams an app worker owns;
//! - `FanOut` (`worker/fanout.rs`): where a new packet goes: the stream workers, and the
//!   queue for the viewers here;
//! - `Deadlines` (`worker/deadlines.rs`): what the loop wakes for next, and when;
//! - `Outbox` (`worker/outbox.rs`): the send batch on the shared port, and its counters;
//! - `Adaptation` (`worker/adaptation.rs`): what the viewers' layer choosers run with (the
//!   policy is tern-rtc's `LayerChooser`, one in each viewer's table entry).
//!
//! What the worker does with them lives beside it by concern, as `impl Worker`:
//!
//! - `worker/viewers.rs`: viewers joining, leaving, ICE and DTLS, and media out to them;
//! - `worker/publishers.rs`: publishers (WHIP and frame publishers), clip sources, the ring and fan-out to
//!   the stream workers;
//! - `worker/timers.rs`: RTCP from viewers, the timer sweep and memory housekeeping;
//! - `worker/layers.rs`: which simulcast layer each viewer of a simulcast stream reads, and
//!   its probes.
//!
//! Where a step needs only some parts, it takes just those: `write_media` (viewers.rs), the
//! packet into the send batch, takes the `Outbox`, the `ViewerTable` and the counters, so the
//! fan-out walks a stream's viewer list and a retransmission reads the ring while it writes.
//!
//! One loop turn: control messages, then up to a queue's worth of datagrams and packets,
//! then sources, ingest timers and the sweep, then one `sendmmsg` of everything queued and
//! one wake per stream worker handed packets.

mod adaptation;
mod deadlines;
mod fanout;
mod layers;
mod outbox;
mod publishers;
mod slates;
mod timers;
mod viewers;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use mio::{Events, Poll};
use tern_pool::{BufferPool, CountingAlloc};
use tern_proto::rtp;
use tern_rtc::clip::ClipSource;
use tern_rtc::stream::Stream;
use tern_rtc::viewer::{CloseReason, DtlsContext};
use tracing::{info, warn};

use crate::clock::NtpClock;
use crate::media::batch::{Gso, SendBatch};
use crate::media::ingest::{EndReason, Ingest, LeftReason, PublisherTimeouts};
use crate::media::ledger::Pools;
use crate::media::link::{Command, Ctl, Data, QUEUE, TapPacket, Target, ViewerId, WorkerLink};
use crate::media::slate::{Slate, Slates};
use crate::media::socket::{Route, SocketLink};
use crate::media::stats::EngineStats;
use crate::media::table::ViewerTable;
use adaptation::Adaptation;
use deadlines::{Deadlines, Timer};
use fanout::FanOut;
use outbox::Outbox;

/// How often the worker sweeps: streams' ticks, layer choice and probes every time, every
/// viewer's timers as [`VIEWER_TIMER_SWEEPS`] says. 20 ms keeps DTLS retransmission timing
/// accurate to well under its own granularity (1 s).
const SWEEP: Duration = Duration::from_millis(20);

/// Viewers' own timers, and the memory books after them ([`Worker::trim_and_book`]), are
/// run in every sweep while one of this worker's viewers is handshaking (DTLS
/// retransmissions, the connect timeout), else in every fifth (100 ms: sender reports each
/// second, the consent timeout). The timer check reads every viewer's slot, a cache miss
/// each at thousands of viewers, and the books visit every stream slot: together about 2 %
/// of the server's CPU in the egress profile at 1,000 viewers when they ran every 20 ms.
pub(super) const VIEWER_TIMER_SWEEPS: u32 = 5;

/// A viewer catching up from the keyframe cache gets this many packets per
/// [`CATCHUP_TICK`]: 16 every 5 ms is 3,200 packets/s (~30 Mbit/s of 1,200-byte packets),
/// a 10 s GOP of a 2 Mbit/s stream in under a second, in bursts of ~20 KB that a
/// receiver's socket buffer always takes (a whole GOP at once is megabytes: Chromium and
/// pion dropped hundreds of packets of it).
pub(super) const CATCHUP_BURST: usize = 16;
/// See [`CATCHUP_BURST`].
pub(super) const CATCHUP_TICK: Duration = Duration::from_millis(5);

/// A stream as the engine runs it.
pub struct EngineStream {
    /// `app/stream`.
    pub key: String,
    /// Ring of packets.
    pub stream: Stream,
    /// The clip source feeding it, if it is a clip stream.
    pub source: Option<ClipSource>,
    /// Its slate while it runs (owning worker; see `worker/slates.rs`).
    slate: Option<Slate>,
    viewers: Vec<ViewerId>,
}

impl EngineStream {
    /// A stream with the given rings and optional source.
    pub fn new(key: String, stream: Stream, source: Option<ClipSource>) -> Self {
        EngineStream {
            key,
            stream,
            source,
            slate: None,
            viewers: Vec::new(),
        }
    }
}

/// A worker's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// App worker `i`: owns the streams `s` with `s % apps == i`.
    App,
    /// Stream worker: hosts viewers of any stream.
    Stream,
}

/// What a worker thread is built from.
pub(super) struct WorkerInit {
    pub(super) index: usize,
    pub(super) role: Role,
    pub(super) apps: usize,
    pub(super) poll: Poll,
    pub(super) data_rx: Receiver<Data>,
    pub(super) ctl_rx: Receiver<Ctl>,
    pub(super) send: std::net::UdpSocket,
    pub(super) streams: Vec<EngineStream>,
    pub(super) dtls: Arc<DtlsContext>,
    pub(super) pool: BufferPool,
    pub(super) clock: NtpClock,
    pub(super) stats: Arc<EngineStats>,
    pub(super) cname: String,
    pub(super) hosts: Arc<[WorkerLink]>,
    pub(super) peers: Vec<WorkerLink>,
    pub(super) sockets: Arc<[SocketLink]>,
    pub(super) loads: Arc<[AtomicUsize]>,
    pub(super) timeouts: PublisherTimeouts,
    /// Video and audio ring lengths of a stream this worker serves.
    pub(super) rings: (usize, usize),
    /// Whether the send batch may use UDP GSO (shared by every worker, see `batch.rs`).
    pub(super) gso: Arc<Gso>,
    /// See [`EngineConfig::pause_video`](crate::media::EngineConfig::pause_video).
    pub(super) pause_video: bool,
    /// The media tap's queue (LL-HLS, recordings; app workers).
    pub(super) tap: Option<Sender<TapPacket>>,
    /// Each app's slate.
    pub(super) slates: Arc<Slates>,
}

/// An app or stream worker; runs on its own thread. Its state is in parts, each borrowed on
/// its own (see the module): four plain groups, then the owned parts.
pub(super) struct Worker {
    /// Which worker this is, and so which streams it owns and serves.
    seat: Seat,
    /// Its queues, and the other threads' it sends to.
    links: Links,
    /// What it uses in common with the rest of the engine: DTLS, packet buffers, the clock,
    /// counters and memory books.
    shared: Shared,
    /// Every stream slot, and what it keeps of the streams it owns.
    streams: Streams,
    /// The viewers here.
    table: ViewerTable,
    /// The send batch on the shared port.
    out: Outbox,
    /// When the loop wakes next, and for what.
    deadlines: Deadlines,
    /// The publishers of the streams it owns (app workers).
    ingest: Ingest,
    /// Where new packets go: the stream workers, and the queue for the viewers here.
    fanout: FanOut,
    /// Layer choice and probes: when and with what (see `worker/layers.rs`).
    adaptation: Adaptation,
    /// Viewers catching up from the keyframe cache (see `start_viewer`).
    catching: Vec<ViewerId>,
    /// Sweeps run, counting (wraps).
    sweeps: u32,
}

/// Which worker this is among the engine's: its index and role, and how the streams are
/// shared out among the app workers.
struct Seat {
    /// Its place among the engine's workers: app workers first (`0..apps`), then stream
    /// workers. Its viewers' ids carry it, and a stream worker's load is counted there
    /// ([`Links::loads`]).
    index: usize,
    /// App worker (owns streams) or stream worker (hosts viewers of any stream).
    role: Role,
    /// How many app workers there are: stream `s` is app worker `s % apps`'s.
    apps: usize,
}

impl Seat {
    /// Whether this worker runs stream `s`'s ingest and source.
    fn owns(&self, s: usize) -> bool {
        self.role == Role::App && s % self.apps == self.index
    }

    /// Whether this worker keeps stream `s`'s ring: its owner, and every stream worker.
    fn serves(&self, s: usize) -> bool {
        self.role == Role::Stream || self.owns(s)
    }

    /// The app worker that owns stream `s` (its index in [`Links::hosts`]).
    fn owner_of(&self, s: usize) -> usize {
        s % self.apps
    }
}

/// How the worker hears from and speaks to the engine's other threads.
struct Links {
    /// Wakes the loop: its queues' senders wake it through a registered waker.
    poll: Poll,
    /// Its data queue (bounded): datagrams from the socket workers, live packets from an
    /// app worker, frame publishers' media, ring resets.
    data_rx: Receiver<Data>,
    /// Its control queue (unbounded; rare): commands, queries, keyframe requests.
    ctl_rx: Receiver<Ctl>,
    /// Every worker's queues, app workers first: a stream's keyframe requests go to its
    /// owner.
    hosts: Arc<[WorkerLink]>,
    /// The socket workers, told of every ICE ufrag, address and publisher that comes or
    /// goes here ([`Links::route`]).
    sockets: Arc<[SocketLink]>,
    /// Viewers placed on each stream worker: counted by the HTTP side when it places one,
    /// uncounted here when it goes ([`Worker::unplace`]).
    loads: Arc<[AtomicUsize]>,
}

impl Links {
    /// Tells every socket worker about a table change.
    fn route(&self, r: impl Fn() -> Route) {
        for s in self.sockets.iter() {
            s.send(r());
        }
    }
}

/// What the worker uses in common with the rest of the engine.
struct Shared {
    /// The server's DTLS certificate and settings, for every viewer's handshake.
    dtls: Arc<DtlsContext>,
    /// The packet buffers: a new packet's payload is copied once into one (see `accept`).
    pool: BufferPool,
    /// Instants to NTP time: capture times, sender reports.
    clock: NtpClock,
    /// The engine's counters and snapshots.
    stats: Arc<EngineStats>,
    /// The CNAME of the sender reports.
    cname: String,
    /// What this worker holds, booked in the engine's named memory pools.
    pools: Pools,
}

/// The streams as this worker has them: every stream slot, and what an app worker keeps of
/// the streams it owns.
struct Streams {
    /// Every stream slot, by index: the rings of the streams this worker serves (a one-slot
    /// placeholder for the others), the viewers here, an owned clip stream's source.
    slots: Vec<EngineStream>,
    /// The snapshot id of each owned stream's publisher.
    publisher_ids: Vec<Option<u64>>,
    /// Video and audio ring lengths of a stream this worker serves (what a publisher-made
    /// stream's rings get when it binds).
    ring_sizes: (usize, usize),
    /// The streams with a clip source (set at start). Every loop pass polls the sources,
    /// and a scan of every stream slot (1,024 spare ones by default) showed in the egress
    /// profile.
    sourced: Vec<usize>,
    /// Each app's slate, and the owned streams playing theirs now.
    slates: Arc<Slates>,
    slated: Vec<usize>,
    /// The media tap's queue (LL-HLS, recordings; app workers).
    tap: Option<Sender<TapPacket>>,
}

impl Streams {
    /// Stream `s`'s name, `app/stream` (empty for a slot no publisher took yet).
    fn key(&self, s: usize) -> &str {
        &self.slots[s].key
    }

    /// Whether slot `s` may take a publisher: it exists and has no clip source.
    fn takes_publisher(&self, s: usize) -> bool {
        self.slots.get(s).is_some_and(|s| s.source.is_none())
    }

    /// The soonest time a clip source or a slate has packets due.
    fn next_source_timeout(&self) -> Option<Instant> {
        let sources = self
            .sourced
            .iter()
            .filter_map(|&s| self.slots[s].source.as_ref());
        let slates = self
            .slated
            .iter()
            .filter_map(|&s| self.slots[s].slate.as_ref())
            .map(|s| &s.source);
        sources.chain(slates).map(ClipSource::poll_timeout).min()
    }

    /// The ring slots and packet headers held, booked as `stream_rings`: (packets, used,
    /// allocated bytes).
    fn ring_memory(&self) -> (usize, usize, usize) {
        let (mut items, mut used, mut allocated) = (0, 0, 0);
        for s in &self.slots {
            for ring in s.stream.rings() {
                let (u, a) = ring.memory();
                items += ring.len();
                used += u;
                allocated += a;
            }
        }
        (items, used, allocated)
    }

    /// The per-stream viewer lists, booked in `session_index`: (viewers, used, allocated
    /// bytes).
    fn viewer_lists_memory(&self) -> (usize, usize, usize) {
        let id = std::mem::size_of::<ViewerId>();
        let viewers: usize = self.slots.iter().map(|s| s.viewers.len()).sum();
        let allocated = self
            .slots
            .iter()
            .map(|s| s.viewers.capacity() * id)
            .sum::<usize>();
        (viewers, viewers * id, allocated)
    }
}

impl Worker {
    /// Builds the worker on its own thread: the send batch holds raw `sendmmsg` headers,
    /// which may not cross threads.
    pub(super) fn new(w: WorkerInit) -> Worker {
        let pools = Pools::new();
        // Measured: the batch is allocated here on this thread, in one go.
        let before = CountingAlloc::thread_net_bytes();
        let batch = SendBatch::with_gso(w.gso);
        let bytes = usize::try_from(CountingAlloc::thread_net_bytes() - before).unwrap_or(0);
        pools.batch.add(1, bytes);
        let n_streams = w.streams.len();
        let mut deadlines = Deadlines::default();
        // The first sweep at once.
        deadlines.set(Timer::Sweep, Instant::now());
        let sourced = (0..n_streams)
            .filter(|&s| w.streams[s].source.is_some())
            .collect();
        let mut worker = Worker {
            seat: Seat {
                index: w.index,
                role: w.role,
                apps: w.apps,
            },
            links: Links {
                poll: w.poll,
                data_rx: w.data_rx,
                ctl_rx: w.ctl_rx,
                hosts: w.hosts,
                sockets: w.sockets,
                loads: w.loads,
            },
            shared: Shared {
                dtls: w.dtls,
                pool: w.pool,
                clock: w.clock,
                stats: w.stats,
                cname: w.cname,
                pools,
            },
            streams: Streams {
                slots: w.streams,
                publisher_ids: vec![None; n_streams],
                ring_sizes: w.rings,
                sourced,
                slates: w.slates,
                slated: Vec::new(),
                tap: w.tap,
            },
            table: ViewerTable::new(w.index),
            out: Outbox::new(w.send, batch),
            deadlines,
            ingest: Ingest::new(n_streams, w.timeouts),
            fanout: FanOut::new(w.peers),
            adaptation: Adaptation::new(Instant::now(), w.pause_video),
            catching: Vec::new(),
            sweeps: 0,
        };
        worker.start_declared_slates(Instant::now());
        worker
    }

    /// A publisher-made stream takes slot `index`: its name, and rings where served.
    fn bind_stream(&mut self, index: usize, key: &str, declared: bool) {
        let serves = self.seat.serves(index);
        let (v, a) = self.streams.ring_sizes;
        let Some(s) = self.streams.slots.get_mut(index) else {
            return;
        };
        s.key = key.to_string();
        if serves {
            s.stream = Stream::new(v, a);
        }
        // A stream a reload declared plays its app's slate until a publisher comes, as a
        // declared stream does from start-up.
        if declared && self.seat.owns(index) {
            self.start_slate(index, Instant::now());
        }
    }

    /// Slot `index`'s stream is removed: its viewers here end (DTLS close_notify), and its
    /// publisher if this worker holds it, with `reason`; its rings and name go.
    fn unbind_stream(&mut self, index: usize, reason: EndReason) {
        if index >= self.streams.slots.len() {
            return;
        }
        // The publisher first: its leaving would start the slate the stream then stops.
        for id in self.ingest.ids() {
            if id.stream == index {
                self.remove_publisher(id, LeftReason::Removed(reason));
            }
        }
        self.stop_slate(index);
        let s = &self.streams.slots[index];
        let viewers = s.viewers.clone();
        let label = (reason != EndReason::Idle).then(|| reason.as_str());
        for id in viewers {
            self.remove_as(id, CloseReason::Local, label);
        }
        // A reload's removal: the owner says the stream is gone once its publisher's leaving
        // (which updates the stream's snapshot) is done. (The sweep's streams had none.)
        if label.is_some() && self.seat.owns(index) {
            let key = self.streams.key(index).to_string();
            self.shared.stats.snapshots.stream_removed(&key);
        }
        if let Some(s) = self.streams.slots.get_mut(index) {
            s.key = String::new();
            s.stream = Stream::new(1, 1);
            s.viewers = Vec::new();
        }
    }

    /// Runs until [`Command::Shutdown`] or the queues close.
    pub(super) fn run(mut self) {
        let mut events = Events::with_capacity(16);
        loop {
            let now = Instant::now();
            let deadline = self.next_deadline(now);
            let timeout = deadline.saturating_duration_since(now);
            if let Err(e) = self.links.poll.poll(&mut events, Some(timeout))
                && e.kind() != io::ErrorKind::Interrupted
            {
                warn!("media worker poll failed: {e}");
                return;
            }
            loop {
                match self.links.ctl_rx.try_recv() {
                    Ok(Ctl::Cmd(Command::Shutdown)) => {
                        self.shutdown();
                        return;
                    }
                    Ok(Ctl::Cmd(cmd)) => self.handle_command(cmd),
                    Ok(Ctl::Sessions(reply)) => {
                        let _ = reply.send(self.table.sessions());
                    }
                    Ok(Ctl::Live(id, reply)) => {
                        let _ = reply.send(self.table.get(id).map(|e| e.viewer.live()));
                    }
                    Ok(Ctl::Keyframe(stream, layer)) => {
                        self.keyframe_request(stream, layer, Instant::now());
                    }
                    Err(crossbeam_channel::TryRecvError::Empty) => break,
                    Err(crossbeam_channel::TryRecvError::Disconnected) => {
                        self.shutdown();
                        return;
                    }
                }
            }
            // Bounded, so commands and timers are served between bursts. Live packets queue
            // for one viewer-by-viewer fan-out; anything else first sends what is queued, so
            // viewers joining, leaving or catching up never see the queue.
            for _ in 0..QUEUE {
                match self.links.data_rx.try_recv() {
                    Ok(Data::Media { stream, pkt }) => {
                        if self.streams.slots[stream].stream.push(pkt.clone()) {
                            self.fan_out(stream, pkt);
                        }
                    }
                    Ok(Data::Datagram { to, from, mut buf }) => {
                        self.fan_out_queued();
                        self.handle_datagram(Instant::now(), to, &mut buf, from);
                    }
                    Ok(Data::Frames(cmd)) => {
                        self.fan_out_queued();
                        self.handle_frames(cmd);
                    }
                    Ok(Data::Reset(stream)) => {
                        self.fan_out_queued();
                        self.streams.slots[stream].stream.clear();
                    }
                    Err(_) => break,
                }
            }
            let now = Instant::now();
            self.run_sources(now);
            self.fan_out_queued();
            self.catch_up(now);
            if self.ingest.next_timeout().is_some_and(|t| t <= now) {
                let mut out = Vec::new();
                self.ingest.handle_timeouts(now, &mut out);
                self.apply_ingest(now, out);
            }
            if self.deadlines.is_expired(Timer::Sweep, now) {
                self.sweep(now);
                self.deadlines.set(Timer::Sweep, now + SWEEP);
                // Low-water refill and the dry-pool warning clock, off the per-packet path.
                if self.seat.index == 0 {
                    self.shared.pool.maintain(now);
                }
            }
            // Ingest timeouts may have published packets.
            self.fan_out_queued();
            self.flush();
            self.fanout.wake();
        }
    }

    /// When the loop wakes next: the soonest of its deadlines, with ingest's and the clip
    /// sources' read in (they keep their own).
    fn next_deadline(&mut self, now: Instant) -> Instant {
        self.deadlines
            .update(Timer::Ingest, self.ingest.next_timeout());
        self.deadlines
            .update(Timer::Source, self.streams.next_source_timeout());
        // (The sweep is always set.)
        self.deadlines
            .next_timeout()
            .map_or(now + SWEEP, |(at, _)| at)
    }

    fn shutdown(&mut self) {
        let ids: Vec<ViewerId> = self.table.ids().collect();
        for id in ids {
            self.remove(id, CloseReason::Local);
        }
        for id in self.ingest.ids() {
            self.remove_publisher(id, LeftReason::Shutdown);
        }
        self.flush();
        info!("media worker {} stopped", self.seat.index);
    }

    /// Carries out a command from the HTTP side.
    fn handle_command(&mut self, cmd: Command) {
        match cmd {
            Command::AddViewer {
                stream,
                params,
                reply,
                permit,
            } => self.add_viewer(stream, *params, reply, permit),
            Command::RemoveViewer(id) => self.remove(id, CloseReason::Local),
            Command::SetLayer { id, pin } => self.set_layer(id, pin, Instant::now()),
            Command::AddPublisher {
                stream,
                publisher,
                reply,
                permit,
                renditions,
            } => self.add_publisher(stream, publisher, reply, permit, renditions),
            Command::Frames(cmd) => self.handle_frames(cmd),
            Command::RemovePublisher(id) => self.remove_publisher(id, LeftReason::Ended),
            Command::RestartIce {
                id,
                ufrag,
                pwd,
                remote_ufrag,
            } => self.restart_ice(id, ufrag, pwd, remote_ufrag),
            Command::RestartPublisherIce {
                id,
                ufrag,
                pwd,
                reply,
            } => self.restart_publisher_ice(id, &ufrag, &pwd, reply),
            Command::BindStream {
                index,
                key,
                declared,
            } => self.bind_stream(index, &key, declared),
            Command::UnbindStream { index, reason } => self.unbind_stream(index, reason),
            Command::RequestKeyframe(stream) => self.keyframe_request(stream, 0, Instant::now()),
            Command::RequestLayerKeyframes(stream) => {
                let layers = self.shared.stats.rids(stream).len().max(1);
                let now = Instant::now();
                for layer in 0..layers.min(usize::from(u8::MAX)) {
                    self.keyframe_request(stream, layer as u8, now);
                }
            }
            Command::Shutdown => {}
        }
    }

    /// Queues a control datagram (STUN, DTLS, RTCP) in the send batch.
    fn send_to(&mut self, data: &[u8], to: SocketAddr) {
        self.out.send_to(data, to, &self.shared.stats);
    }

    /// Hands the send batch to the kernel.
    fn flush(&mut self) {
        self.out.flush(&self.shared.stats);
    }

    fn handle_datagram(&mut self, now: Instant, to: Target, buf: &mut [u8], from: SocketAddr) {
        let id = match to {
            Target::Publisher(stream) => {
                let mut out = Vec::new();
                if !self.seat.owns(stream) || !self.ingest.input(stream, now, from, buf, &mut out) {
                    self.shared.stats.dropped_in.fetch_add(1, Ordering::Relaxed);
                }
                self.apply_ingest(now, out);
                return;
            }
            Target::Viewer(id) => id,
        };
        let Some(&first) = buf.first() else {
            self.shared.stats.dropped_in.fetch_add(1, Ordering::Relaxed);
            return;
        };
        match first {
            0..=3 => self.handle_stun(now, id, buf, from),
            20..=63 => self.handle_dtls(now, id, buf, from),
            128..=191 if rtp::is_rtcp(buf) => self.handle_rtcp(now, id, buf, from),
            _ => {
                self.shared.stats.dropped_in.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

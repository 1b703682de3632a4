//! The media engine: OvenMediaEngine's three kinds of worker threads around the one UDP port.
//!
//! - **socket workers** (`worker_count`, threads `SPICE-{i}`; see [`crate::media::socket`]) receive
//!   on the media port and hand each datagram to the worker that owns its session;
//! - **app workers** (`app_worker_count`, threads `AW-WebRTC{i}`) do the per-stream work: the
//!   clip sources, WHIP publisher sessions, the stream's ring and keyframe cache. Stream `s`
//!   belongs to app worker `s % app_worker_count`;
//! - **stream workers** (`stream_worker_count`, threads `StreamWorker{i}`) do the per-viewer
//!   work: DTLS, SRTP, RTCP, NACK retransmission from their own copy of the ring (the packets
//!   are shared, only the slot arrays are per worker) and batched `sendmmsg`. A new viewer goes
//!   to the stream worker holding the fewest. With `stream_worker_count = 0` the app workers
//!   host the viewers of their streams and send themselves (OvenMediaEngine's semantics).
//!
//! App and stream workers are the same [`Worker`] type in two roles. They talk through
//! crossbeam queues (bounded for packets, so a stalled worker drops and counts instead of
//! growing) and wake each other once per batch through an eventfd (mio `Waker`). No lock is
//! taken on the per-packet path; counters are relaxed atomics added once per batch. The HTTP
//! side reaches the workers through [`EngineHandle`].

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, SendTimeoutError, Sender, TrySendError};
use mio::{Events, Poll, Token, Waker};

use crate::media::batch::SendBatch;
use crate::media::ingest::{AddError, Ingest, IngestOutput, PublisherId, RtmpCommand};
use crate::media::socket::{Route, SocketLink, SocketWorker};
use tern_pool::{Buf, BufferPool, CountingAlloc, PoolCounter};
use tern_proto::rtp;
use tern_proto::stun;
use tern_rtc::clip::{ClipSource, MediaKind};
use tern_rtc::publisher::Publisher;
use tern_rtc::stream::{RingPacket, Stream};
use tern_rtc::viewer::{
    CloseReason, DtlsContext, PWD_LEN, UFRAG_LEN, Viewer, ViewerEvent, ViewerParams, ViewerState,
};
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

const WAKER: Token = Token(1);

/// How often every viewer's timers are checked. 20 ms keeps DTLS retransmission and SR
/// timing accurate to well under their own granularity (1 s) at O(viewers) cost per sweep.
const SWEEP: Duration = Duration::from_millis(20);

/// Packets and datagrams a worker's queue holds. 4096 is more than a second of a 4 Mbps
/// stream's packets, or of RTCP from thousands of viewers, while the queue's slots stay
/// small (~0.4 MiB per worker, allocated once).
const QUEUE: usize = 4096;

/// Most workers of each kind: a [`ViewerId`] carries its worker in 8 bits.
pub const MAX_WORKERS: usize = 128;

/// Worker thread counts, with OvenMediaEngine's names and semantics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerCounts {
    /// Socket workers on the media port (`<Bind>...<WorkerCount>`), at least 1.
    pub socket: usize,
    /// App workers (`AppWorkerCount`), at least 1.
    pub app: usize,
    /// Stream workers (`StreamWorkerCount`); 0 means the app workers send.
    pub stream: usize,
}

impl Default for WorkerCounts {
    fn default() -> Self {
        WorkerCounts {
            socket: 1,
            app: 1,
            stream: 1,
        }
    }
}

/// Opaque handle of a viewer inside the engine (slot index + generation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ViewerId(u64);

impl ViewerId {
    /// The id as a number (for the API).
    pub fn raw(self) -> u64 {
        self.0
    }

    /// The id of a number from [`ViewerId::raw`].
    pub fn from_raw(v: u64) -> Self {
        ViewerId(v)
    }

    /// Bits 0-23: slot index; 24-31: the worker holding it; 32-63: generation.
    fn new(worker: usize, index: u32, generation: u32) -> Self {
        ViewerId(u64::from(generation) << 32 | ((worker as u64 & 0xff) << 24) | u64::from(index))
    }
    fn index(self) -> usize {
        (self.0 & 0xff_ffff) as usize
    }
    /// The worker (host index, see [`EngineHandle`]) holding the viewer.
    pub(crate) fn worker(self) -> usize {
        ((self.0 >> 24) & 0xff) as usize
    }
    fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

/// Commands from the HTTP side.
pub enum Command {
    /// Create a viewer on stream `stream` (index into the engine's streams).
    AddViewer {
        /// Stream index.
        stream: usize,
        /// Session parameters.
        params: Box<ViewerParams>,
        /// Where the new id goes.
        reply: oneshot::Sender<ViewerId>,
    },
    /// End a viewer (WHEP DELETE).
    RemoveViewer(ViewerId),
    /// Install a WHIP publisher on stream `stream`.
    AddPublisher {
        /// Stream index.
        stream: usize,
        /// The accepted session.
        publisher: Box<Publisher>,
        /// Its id, or why not.
        reply: oneshot::Sender<Result<PublisherId, AddError>>,
    },
    /// End a publisher (WHIP DELETE, RTMP connection closed, kick).
    RemovePublisher(PublisherId),
    /// An RTMP connection's request (take a stream's publisher slot, or media).
    Rtmp(RtmpCommand),
    /// ICE restart with new credentials.
    RestartIce {
        /// The viewer.
        id: ViewerId,
        /// New local ufrag.
        ufrag: [u8; UFRAG_LEN],
        /// New local password.
        pwd: [u8; PWD_LEN],
        /// The viewer's new ufrag.
        remote_ufrag: Box<str>,
    },
    /// Stop the engine.
    Shutdown,
}

/// One viewer's memory as the engine accounts it.
#[derive(Debug, Clone)]
pub struct SessionMemory {
    /// The viewer.
    pub id: ViewerId,
    /// Its state, e.g. `Connected`.
    pub state: String,
    /// Whether it still holds DTLS handshake state.
    pub handshake: bool,
    /// Bytes of its slot in the engine's session table (the inline `Viewer`).
    pub inline_bytes: usize,
    /// Heap bytes it holds: allocated and kept by its own calls on the engine thread (DTLS
    /// state while handshaking, the SRTP context once connected) plus its ICE ufrag.
    pub heap_bytes: usize,
}

/// Counters shared with the HTTP side (metrics, API, limits).
#[derive(Debug, Default)]
pub struct EngineStats {
    /// Viewers currently held.
    pub viewers: AtomicUsize,
    /// Viewers whose DTLS handshake is not finished.
    pub handshakes: AtomicUsize,
    /// Viewers that completed the handshake, ever.
    pub handshakes_done: AtomicU64,
    /// Viewers that failed or timed out before connecting, ever.
    pub handshakes_failed: AtomicU64,
    /// SRTP packets sent.
    pub packets_out: AtomicU64,
    /// Bytes sent (SRTP/SRTCP/DTLS/STUN).
    pub bytes_out: AtomicU64,
    /// Packets retransmitted on NACK.
    pub retransmits: AtomicU64,
    /// Keyframe requests (PLI/FIR) received, before coalescing.
    pub keyframe_requests: AtomicU64,
    /// Datagrams received.
    pub packets_in: AtomicU64,
    /// Datagrams dropped: malformed, unknown sender, failed authentication.
    pub dropped_in: AtomicU64,
    /// Sends that failed (socket buffer full or error).
    pub send_errors: AtomicU64,
    /// Datagrams or packets dropped because a worker's queue was full (it fell behind), and
    /// RTMP publishers closed because their app worker's queue stayed full.
    pub queue_full: AtomicU64,
    /// Publishers (WHIP, RTMP) connected or connecting.
    pub publishers: AtomicUsize,
    /// Media packets received from publishers.
    pub ingest_packets: AtomicU64,
    /// Whether each stream is live (index as in the engine's streams).
    pub live: Vec<AtomicBool>,
    /// Media packets sent per stream (index as in the engine's streams).
    pub stream_packets: Vec<AtomicU64>,
    /// Media bytes sent per stream.
    pub stream_bytes: Vec<AtomicU64>,
    /// Sequence numbers viewers of each stream NACKed.
    pub stream_nacks: Vec<AtomicU64>,
    /// PLI/FIR requests from viewers of each stream.
    pub stream_keyframe_requests: Vec<AtomicU64>,
    /// Packets viewers of each stream reported lost in their receiver reports (the growth
    /// of each viewer's cumulative-lost fields, RFC 3550 §6.4.1, summed).
    pub stream_reported_lost: Vec<AtomicU64>,
    /// Cached snapshots of viewers and streams, and the event bus.
    pub snapshots: crate::snapshot::Snapshots,
}

/// A stream as the engine runs it.
pub struct EngineStream {
    /// `app/stream`.
    pub key: String,
    /// Ring of packets.
    pub stream: Stream,
    /// The clip source feeding it, if it is a clip stream.
    pub source: Option<ClipSource>,
    viewers: Vec<ViewerId>,
}

impl EngineStream {
    /// A stream with the given rings and optional source.
    pub fn new(key: String, stream: Stream, source: Option<ClipSource>) -> Self {
        EngineStream {
            key,
            stream,
            source,
            viewers: Vec::new(),
        }
    }
}

struct Slot {
    generation: u32,
    entry: Option<Entry>,
}

struct Entry {
    viewer: Viewer,
    stream: usize,
    /// Position in the stream's viewer list (for O(1) removal).
    pos: usize,
    handshaking: bool,
    /// Heap bytes this viewer holds (see [`SessionMemory::heap_bytes`]).
    heap: usize,
    /// What is currently added to the pools for it: (in "handshakes", heap bytes).
    booked: (bool, usize),
    /// The highest total of its receiver reports' cumulative-lost fields seen.
    reported_lost: i64,
}

/// Bytes of one slot of the session table.
const SLOT_BYTES: usize = std::mem::size_of::<Slot>();

/// The engine's named memory pools (lines of `GET /v1/memory`), besides the packet buffers.
struct Pools {
    /// `viewer_sessions`: one item per viewer; used = its slot plus the heap of viewers past
    /// the handshake; allocated adds the empty slots of the table.
    sessions: PoolCounter,
    /// `handshakes`: viewers still holding DTLS state, and the heap they hold.
    handshakes: PoolCounter,
    /// `stream_rings`: ring slot arrays and the shared-buffer header of each packet held.
    rings: PoolCounter,
    /// `send_batch`: the send batch's datagram buffers and `sendmmsg` headers, allocated once.
    batch: PoolCounter,
    /// `session_index`: the per-stream viewer lists (the socket workers add their
    /// demultiplexing maps, estimated from their capacities: hash table buckets plus one
    /// control byte each).
    index: PoolCounter,
    /// Slot table capacity currently reserved in `sessions`.
    slots_reserved: usize,
    /// Last (items, used, allocated) booked for `rings` and `index`.
    rings_booked: (usize, usize, usize),
    index_booked: (usize, usize, usize),
}

impl Pools {
    fn new() -> Self {
        Pools {
            sessions: PoolCounter::new("viewer_sessions", SLOT_BYTES),
            handshakes: PoolCounter::new("handshakes", 0),
            rings: PoolCounter::new("stream_rings", 0),
            index: PoolCounter::new("session_index", 0),
            batch: PoolCounter::new("send_batch", 0),
            slots_reserved: 0,
            rings_booked: (0, 0, 0),
            index_booked: (0, 0, 0),
        }
    }

    /// Moves a viewer's booked heap to where it belongs now.
    fn book(&self, e: &mut Entry) {
        let now = (e.viewer.has_handshake(), e.heap);
        if now == e.booked {
            return;
        }
        let (hs, bytes) = e.booked;
        if hs {
            self.handshakes.sub(1, bytes);
        } else {
            self.sessions.sub(0, bytes);
            self.sessions.unreserve(bytes);
        }
        let (hs, bytes) = now;
        if hs {
            self.handshakes.add(1, bytes);
        } else {
            self.sessions.add(0, bytes);
            self.sessions.reserve(bytes);
        }
        e.booked = now;
    }

    /// Takes a viewer's booked bytes out of the pools (it is being removed).
    fn unbook(&self, e: &mut Entry) {
        e.heap = 0;
        let (hs, bytes) = e.booked;
        if hs {
            self.handshakes.sub(1, bytes);
        } else {
            self.sessions.sub(0, bytes);
            self.sessions.unreserve(bytes);
        }
        e.booked = (false, 0);
        self.sessions.sub(1, SLOT_BYTES);
    }
}

/// Replaces what one thread booked in a shared pool counter with `now` (items, used,
/// allocated).
pub(crate) fn book_set(
    counter: &PoolCounter,
    booked: &mut (usize, usize, usize),
    now: (usize, usize, usize),
) {
    counter.sub(booked.0, booked.1);
    counter.unreserve(booked.2);
    counter.add(now.0, now.1);
    counter.reserve(now.2);
    *booked = now;
}

/// Runs `f` on a viewer and adds the heap it allocated and kept on this thread to the
/// viewer's account.
fn ledger<T>(e: &mut Entry, f: impl FnOnce(&mut Viewer) -> T) -> T {
    let before = CountingAlloc::thread_net_bytes();
    let r = f(&mut e.viewer);
    let d = CountingAlloc::thread_net_bytes() - before;
    e.heap = usize::try_from(e.heap as i64 + d).unwrap_or(0);
    r
}

/// Approximate heap of a hash map: its buckets (a power of two above capacity / 7 * 8) with
/// one control byte each.
pub(crate) fn map_bytes<K, V>(m: &HashMap<K, V>) -> usize {
    let cap = m.capacity();
    if cap == 0 {
        return 0;
    }
    let buckets = (cap * 8 / 7).next_power_of_two();
    buckets * (std::mem::size_of::<(K, V)>() + 1)
}

/// Shrinks a map that is mostly empty (after a wave of viewers leaves): to nothing when
/// empty, else to twice its length when under a quarter full.
pub(crate) fn shrink_map<K: std::hash::Hash + Eq, V>(m: &mut HashMap<K, V>) {
    if m.is_empty() {
        m.shrink_to_fit();
    } else if m.capacity() > 4 * m.len() {
        m.shrink_to(2 * m.len());
    }
}

fn shrink_vec<T>(v: &mut Vec<T>) {
    if v.is_empty() {
        v.shrink_to_fit();
    } else if v.capacity() > 4 * v.len() {
        v.shrink_to(2 * v.len());
    }
}

/// Maps instants to 64-bit NTP time (read from the wall clock once at start).
#[derive(Debug, Clone, Copy)]
pub struct NtpClock {
    base: Instant,
    base_ntp: u64,
}

impl NtpClock {
    /// Reads the clocks now.
    pub fn now() -> Self {
        let base = Instant::now();
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        NtpClock {
            base,
            base_ntp: rtp::ntp_from_unix(unix),
        }
    }

    /// NTP time of `t`.
    pub fn ntp(&self, t: Instant) -> u64 {
        let d = t.saturating_duration_since(self.base);
        let frac = (u64::from(d.subsec_nanos()) << 32) / 1_000_000_000;
        self.base_ntp
            .wrapping_add(d.as_secs() << 32)
            .wrapping_add(frac)
    }
}

/// Where a datagram goes: a viewer, or the publisher of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// A viewer session.
    Viewer(ViewerId),
    /// The WHIP publisher of a stream (index).
    Publisher(usize),
}

impl Target {
    /// The host (worker index) that owns the session.
    pub(crate) fn host(self, apps: usize) -> usize {
        match self {
            Target::Viewer(id) => id.worker(),
            Target::Publisher(stream) => stream % apps,
        }
    }
}

/// Packets between threads (bounded queue).
pub(crate) enum Data {
    /// A datagram for a session the worker owns (socket worker -> worker).
    Datagram {
        /// Its session.
        to: Target,
        /// Its source.
        from: SocketAddr,
        /// Its bytes, in a pooled buffer.
        buf: Buf,
    },
    /// A new packet of a stream (app worker -> stream workers).
    Media {
        /// Stream index.
        stream: usize,
        /// The packet; its payload is shared, not copied.
        pkt: RingPacket,
    },
    /// The stream's publisher left: clear the copies of its rings (app -> stream workers).
    Reset(usize),
    /// Media from an RTMP connection's thread (-> the stream's app worker). Bounded like
    /// the rest, so a worker that falls behind stalls the sending thread, which stops
    /// reading its TCP socket and so pushes back on the encoder.
    Rtmp(RtmpCommand),
}

/// Control messages (unbounded queue; rare).
enum Ctl {
    Cmd(Command),
    Sessions(oneshot::Sender<Vec<SessionMemory>>),
    /// A viewer asked for a keyframe (stream worker -> the stream's app worker).
    Keyframe(usize),
}

/// A worker's queues and its waker.
#[derive(Clone)]
pub(crate) struct WorkerLink {
    pub(crate) data: Sender<Data>,
    ctl: Sender<Ctl>,
    waker: Arc<Waker>,
}

impl WorkerLink {
    /// Wakes the worker.
    pub(crate) fn wake(&self) {
        let _ = self.waker.wake();
    }

    fn ctl(&self, c: Ctl) -> Result<(), &'static str> {
        self.ctl.send(c).map_err(|_| "media engine stopped")?;
        self.waker.wake().map_err(|_| "media engine stopped")
    }
}

/// Everything [`Engine::spawn`] needs.
pub struct EngineConfig {
    /// The media (UDP) address.
    pub bind: SocketAddr,
    /// The streams, in index order.
    pub streams: Vec<EngineStream>,
    /// The shared DTLS certificate.
    pub dtls: Arc<DtlsContext>,
    /// Packet buffers.
    pub pool: BufferPool,
    /// RTCP CNAME.
    pub cname: String,
    /// Thread counts.
    pub workers: WorkerCounts,
}

/// The engine's threads; [`EngineThreads::join`] waits for them after a shutdown.
#[derive(Debug)]
pub struct EngineThreads(Vec<std::thread::JoinHandle<()>>);

impl EngineThreads {
    /// Waits for every thread to end.
    pub fn join(self) {
        for t in self.0 {
            let _ = t.join();
        }
    }
}

/// The media engine: a namespace for [`Engine::spawn`].
#[derive(Debug)]
pub struct Engine;

/// The HTTP side's handle on the engine.
#[derive(Clone)]
pub struct EngineHandle {
    /// App workers first (`0..apps`), then stream workers.
    hosts: Arc<[WorkerLink]>,
    apps: usize,
    sockets: Arc<[SocketLink]>,
    /// Viewers placed on each stream worker (counted when placed, uncounted by the worker
    /// when the viewer goes; app workers' entries stay 0).
    loads: Arc<[AtomicUsize]>,
    /// Shared counters.
    pub stats: Arc<EngineStats>,
}

impl EngineHandle {
    /// Sends a command to the worker it concerns and wakes it.
    pub fn send(&self, cmd: Command) -> Result<(), &'static str> {
        let host = match &cmd {
            Command::AddViewer { stream, .. } => self.place(*stream),
            Command::RemoveViewer(id) | Command::RestartIce { id, .. } => id.worker(),
            Command::AddPublisher { stream, .. } => stream % self.apps,
            Command::RemovePublisher(id) => id.stream % self.apps,
            Command::Rtmp(c) => c.stream() % self.apps,
            Command::Shutdown => {
                for h in self.hosts.iter() {
                    let _ = h.ctl(Ctl::Cmd(Command::Shutdown));
                }
                return Ok(());
            }
        };
        let link = self.hosts.get(host).ok_or("no such media worker")?;
        link.ctl(Ctl::Cmd(cmd))
    }

    /// Sends an RTMP publisher's media to its stream's app worker over the bounded data
    /// queue, waiting up to `timeout` for room (the caller is the connection's own thread:
    /// waiting is its back-pressure on the encoder). Errs if the engine stopped or the
    /// queue stayed full for `timeout`.
    pub fn send_rtmp_media(&self, cmd: RtmpCommand, timeout: Duration) -> Result<(), &'static str> {
        let link = self
            .hosts
            .get(cmd.stream() % self.apps)
            .ok_or("no such media worker")?;
        match link.data.send_timeout(Data::Rtmp(cmd), timeout) {
            Ok(()) => link.waker.wake().map_err(|_| "media engine stopped"),
            Err(SendTimeoutError::Timeout(_)) => {
                self.stats.queue_full.fetch_add(1, Ordering::Relaxed);
                Err("media engine queue full")
            }
            Err(SendTimeoutError::Disconnected(_)) => Err("media engine stopped"),
        }
    }

    /// Every viewer's memory as its worker accounts it (for `GET /v1/memory?sessions=1`).
    pub async fn sessions(&self) -> Result<Vec<SessionMemory>, &'static str> {
        let mut rxs = Vec::with_capacity(self.hosts.len());
        for h in self.hosts.iter() {
            let (tx, rx) = oneshot::channel();
            h.ctl(Ctl::Sessions(tx))?;
            rxs.push(rx);
        }
        let mut all = Vec::new();
        for rx in rxs {
            all.extend(rx.await.map_err(|_| "media engine stopped")?);
        }
        Ok(all)
    }

    /// The host for a new viewer of `stream`: the stream's app worker when there are no
    /// stream workers, else the stream worker holding the fewest viewers.
    fn place(&self, stream: usize) -> usize {
        if self.hosts.len() == self.apps {
            return stream % self.apps;
        }
        let best = (self.apps..self.hosts.len())
            .min_by_key(|&i| self.loads[i].load(Ordering::Relaxed))
            .unwrap_or(self.apps);
        self.loads[best].fetch_add(1, Ordering::Relaxed);
        best
    }

    fn stop_sockets(&self) {
        for s in self.sockets.iter() {
            s.send(Route::Shutdown);
        }
    }
}

/// A worker's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// App worker `i`: owns the streams `s` with `s % apps == i`.
    App,
    /// Stream worker: hosts viewers of any stream.
    Stream,
}

impl Engine {
    /// Binds the media port and starts the socket, app and stream workers. Returns the
    /// handle, the bound address and the threads.
    pub fn spawn(cfg: EngineConfig) -> io::Result<(EngineHandle, SocketAddr, EngineThreads)> {
        let EngineConfig {
            bind,
            streams,
            dtls,
            pool,
            cname,
            workers,
        } = cfg;
        let sockets = bind_sockets(bind, workers.socket)?;
        let local = sockets[0].local_addr()?;
        let n_streams = streams.len();
        let stats = Arc::new(EngineStats {
            live: streams
                .iter()
                .map(|s| AtomicBool::new(s.source.is_some()))
                .collect(),
            stream_packets: streams.iter().map(|_| AtomicU64::new(0)).collect(),
            stream_bytes: streams.iter().map(|_| AtomicU64::new(0)).collect(),
            stream_nacks: streams.iter().map(|_| AtomicU64::new(0)).collect(),
            stream_keyframe_requests: streams.iter().map(|_| AtomicU64::new(0)).collect(),
            stream_reported_lost: streams.iter().map(|_| AtomicU64::new(0)).collect(),
            ..EngineStats::default()
        });
        for s in &streams {
            let source = if s.source.is_some() { "clip" } else { "none" };
            stats
                .snapshots
                .stream_state(&s.key, source, s.source.is_some());
            if let Some(src) = &s.source {
                PoolCounter::new("clip_sources", 0).add(1, src.clip().heap_bytes());
            }
        }
        let apps = workers.app;
        let n_hosts = apps + workers.stream;
        // Queues and wakers first, so every worker can be handed every link.
        let mut polls = Vec::with_capacity(n_hosts);
        let mut links = Vec::with_capacity(n_hosts);
        let mut rxs = Vec::with_capacity(n_hosts);
        for _ in 0..n_hosts {
            let poll = Poll::new()?;
            let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
            let (data, data_rx) = crossbeam_channel::bounded(QUEUE);
            let (ctl, ctl_rx) = crossbeam_channel::unbounded();
            polls.push(poll);
            links.push(WorkerLink { data, ctl, waker });
            rxs.push((data_rx, ctl_rx));
        }
        let hosts: Arc<[WorkerLink]> = links.into();
        let mut socket_workers = Vec::with_capacity(sockets.len());
        let mut socket_links = Vec::with_capacity(sockets.len());
        let mut send_sockets = Vec::with_capacity(n_hosts);
        for _ in 0..n_hosts {
            send_sockets.push(sockets[0].try_clone()?);
        }
        for s in sockets {
            let (w, l) = SocketWorker::new(s, hosts.clone(), apps, pool.clone(), stats.clone())?;
            socket_workers.push(w);
            socket_links.push(l);
        }
        let sockets: Arc<[SocketLink]> = socket_links.into();
        let loads: Arc<[AtomicUsize]> = (0..n_hosts).map(|_| AtomicUsize::new(0)).collect();
        let (vcap, acap) = streams
            .first()
            .map(|s| (s.stream.video.capacity(), s.stream.audio.capacity()))
            .unwrap_or((1, 1));
        let keys: Vec<String> = streams.iter().map(|s| s.key.clone()).collect();
        let mut owned: Vec<Option<EngineStream>> = streams.into_iter().map(Some).collect();
        let clock = NtpClock::now();
        let mut threads = Vec::new();
        let handle = EngineHandle {
            hosts: hosts.clone(),
            apps,
            sockets: sockets.clone(),
            loads: loads.clone(),
            stats: stats.clone(),
        };
        let started = (|| -> io::Result<()> {
            for (i, ((poll, (data_rx, ctl_rx)), send)) in
                polls.into_iter().zip(rxs).zip(send_sockets).enumerate()
            {
                let role = if i < apps { Role::App } else { Role::Stream };
                // Streams this worker serves get rings; the others a one-slot placeholder.
                let wstreams: Vec<EngineStream> = (0..n_streams)
                    .map(|s| {
                        let mine = role == Role::App && s % apps == i;
                        if mine && let Some(es) = owned[s].take() {
                            return es;
                        }
                        let serves = role == Role::Stream || mine;
                        let (v, a) = if serves { (vcap, acap) } else { (1, 1) };
                        EngineStream::new(keys[s].clone(), Stream::new(v, a), None)
                    })
                    .collect();
                let peers: Vec<WorkerLink> = if role == Role::App {
                    hosts[apps..].to_vec()
                } else {
                    Vec::new()
                };
                let w = WorkerInit {
                    index: i,
                    role,
                    apps,
                    poll,
                    data_rx,
                    ctl_rx,
                    send,
                    streams: wstreams,
                    dtls: dtls.clone(),
                    pool: pool.clone(),
                    clock,
                    stats: stats.clone(),
                    cname: cname.clone(),
                    hosts: hosts.clone(),
                    peers,
                    sockets: sockets.clone(),
                    loads: loads.clone(),
                };
                let name = match role {
                    Role::App => format!("AW-WebRTC{i}"),
                    Role::Stream => format!("StreamWorker{}", i - apps),
                };
                threads.push(
                    std::thread::Builder::new()
                        .name(name)
                        .spawn(move || Worker::new(w).run())?,
                );
            }
            for (i, w) in socket_workers.into_iter().enumerate() {
                threads.push(
                    std::thread::Builder::new()
                        .name(format!("SPICE-{i}"))
                        .spawn(move || w.run())?,
                );
            }
            Ok(())
        })();
        if let Err(e) = started {
            handle.stop_all();
            EngineThreads(threads).join();
            return Err(e);
        }
        info!(
            socket_workers = workers.socket,
            app_workers = workers.app,
            stream_workers = workers.stream,
            "media engine on {local}"
        );
        Ok((handle, local, EngineThreads(threads)))
    }
}

impl EngineHandle {
    /// Stops every worker (viewers are closed) and then the socket workers.
    pub fn stop_all(&self) {
        let _ = self.send(Command::Shutdown);
        self.stop_sockets();
    }
}

/// Binds `n` sockets to `bind` (sharing the port with `SO_REUSEPORT` when `n > 1`).
fn bind_sockets(bind: SocketAddr, n: usize) -> io::Result<Vec<std::net::UdpSocket>> {
    let mut out = Vec::with_capacity(n);
    let mut addr = bind;
    for _ in 0..n.max(1) {
        let sock = socket2::Socket::new(
            socket2::Domain::for_address(bind),
            socket2::Type::DGRAM,
            Some(socket2::Protocol::UDP),
        )?;
        // Large buffers: a keyframe burst to thousands of viewers must not overflow the send
        // queue, and bursts of RTCP must not overflow the receive queue. The kernel caps these
        // at net.core.{w,r}mem_max (4 MiB here).
        let _ = sock.set_send_buffer_size(4 << 20);
        let _ = sock.set_recv_buffer_size(4 << 20);
        if n > 1 {
            sock.set_reuse_port(true)?;
        }
        sock.set_nonblocking(true)?;
        sock.bind(&addr.into())?;
        // The others bind the port the first one got (bind port 0 picks one).
        if let Some(a) = sock.local_addr()?.as_socket() {
            addr = a;
        }
        out.push(sock.into());
    }
    Ok(out)
}

/// What a worker thread is built from.
struct WorkerInit {
    index: usize,
    role: Role,
    apps: usize,
    poll: Poll,
    data_rx: Receiver<Data>,
    ctl_rx: Receiver<Ctl>,
    send: std::net::UdpSocket,
    streams: Vec<EngineStream>,
    dtls: Arc<DtlsContext>,
    pool: BufferPool,
    clock: NtpClock,
    stats: Arc<EngineStats>,
    cname: String,
    hosts: Arc<[WorkerLink]>,
    peers: Vec<WorkerLink>,
    sockets: Arc<[SocketLink]>,
    loads: Arc<[AtomicUsize]>,
}

/// An app or stream worker; runs on its own thread.
struct Worker {
    index: usize,
    role: Role,
    apps: usize,
    poll: Poll,
    data_rx: Receiver<Data>,
    ctl_rx: Receiver<Ctl>,
    socket: std::net::UdpSocket,
    streams: Vec<EngineStream>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    dtls: Arc<DtlsContext>,
    pool: BufferPool,
    clock: NtpClock,
    stats: Arc<EngineStats>,
    cname: String,
    batch: SendBatch,
    next_sweep: Instant,
    ingest: Ingest,
    pools: Pools,
    /// Generation given to new slots: above every generation a removed slot had, so an old
    /// [`ViewerId`] never names a viewer in a slot that was freed and made again.
    next_generation: u32,
    hosts: Arc<[WorkerLink]>,
    /// Stream workers this app worker hands its packets to.
    peers: Vec<WorkerLink>,
    /// Peers handed packets since they were last woken.
    peers_woken: Vec<bool>,
    sockets: Arc<[SocketLink]>,
    loads: Arc<[AtomicUsize]>,
    /// Media packets sent since the last flush (added to the shared counter per batch).
    sent_packets: u64,
    /// The id of each owned stream's publisher (for its snapshot).
    publisher_ids: Vec<Option<u64>>,
}

impl Worker {
    /// Builds the worker on its own thread: the send batch holds raw `sendmmsg` headers,
    /// which may not cross threads.
    fn new(w: WorkerInit) -> Worker {
        let pools = Pools::new();
        // Measured: the batch is allocated here on this thread, in one go.
        let before = CountingAlloc::thread_net_bytes();
        let batch = SendBatch::new();
        let bytes = usize::try_from(CountingAlloc::thread_net_bytes() - before).unwrap_or(0);
        pools.batch.add(1, bytes);
        let n_streams = w.streams.len();
        let peers_woken = vec![false; w.peers.len()];
        Worker {
            index: w.index,
            role: w.role,
            apps: w.apps,
            poll: w.poll,
            data_rx: w.data_rx,
            ctl_rx: w.ctl_rx,
            socket: w.send,
            streams: w.streams,
            slots: Vec::new(),
            free: Vec::new(),
            dtls: w.dtls,
            pool: w.pool,
            clock: w.clock,
            stats: w.stats,
            cname: w.cname,
            batch,
            next_sweep: Instant::now(),
            ingest: Ingest::new(n_streams),
            pools,
            next_generation: 0,
            hosts: w.hosts,
            peers: w.peers,
            peers_woken,
            sockets: w.sockets,
            loads: w.loads,
            sent_packets: 0,
            publisher_ids: vec![None; n_streams],
        }
    }

    /// A viewer placed here by [`EngineHandle::place`] is gone (or was never made).
    fn unplace(&self) {
        if self.role == Role::Stream {
            self.loads[self.index].fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Whether this worker runs stream `s`'s ingest and source.
    fn owns(&self, s: usize) -> bool {
        self.role == Role::App && s % self.apps == self.index
    }

    /// Tells every socket worker about a table change.
    fn route(&self, r: impl Fn() -> Route) {
        for s in self.sockets.iter() {
            s.send(r());
        }
    }

    /// Runs until [`Command::Shutdown`] or the queues close.
    fn run(mut self) {
        let mut events = Events::with_capacity(16);
        loop {
            let now = Instant::now();
            let deadline = self.next_deadline();
            let timeout = deadline.saturating_duration_since(now);
            if let Err(e) = self.poll.poll(&mut events, Some(timeout))
                && e.kind() != io::ErrorKind::Interrupted
            {
                warn!("media worker poll failed: {e}");
                return;
            }
            loop {
                match self.ctl_rx.try_recv() {
                    Ok(Ctl::Cmd(Command::Shutdown)) => {
                        self.shutdown();
                        return;
                    }
                    Ok(Ctl::Cmd(cmd)) => self.handle_command(cmd),
                    Ok(Ctl::Sessions(reply)) => {
                        let _ = reply.send(self.sessions());
                    }
                    Ok(Ctl::Keyframe(stream)) => self.keyframe_request(stream, Instant::now()),
                    Err(crossbeam_channel::TryRecvError::Empty) => break,
                    Err(crossbeam_channel::TryRecvError::Disconnected) => {
                        self.shutdown();
                        return;
                    }
                }
            }
            // Bounded, so commands and timers are served between bursts.
            for _ in 0..QUEUE {
                match self.data_rx.try_recv() {
                    Ok(Data::Datagram { to, from, mut buf }) => {
                        self.handle_datagram(Instant::now(), to, &mut buf, from);
                    }
                    Ok(Data::Media { stream, pkt }) => {
                        if self.streams[stream].stream.push(pkt.clone()) {
                            self.fan_out(stream, &pkt);
                        }
                    }
                    Ok(Data::Rtmp(cmd)) => self.handle_command(Command::Rtmp(cmd)),
                    Ok(Data::Reset(stream)) => {
                        self.streams[stream].stream.video.clear();
                        self.streams[stream].stream.audio.clear();
                    }
                    Err(_) => break,
                }
            }
            let now = Instant::now();
            self.run_sources(now);
            if self.ingest.next_timeout().is_some_and(|t| t <= now) {
                let mut out = Vec::new();
                self.ingest.handle_timeouts(now, &mut out);
                self.apply_ingest(now, out);
            }
            if now >= self.next_sweep {
                self.sweep(now);
                self.next_sweep = now + SWEEP;
                // Low-water refill and the dry-pool warning clock, off the per-packet path.
                if self.index == 0 {
                    self.pool.maintain(now);
                }
            }
            self.flush();
            self.wake_peers();
        }
    }

    fn next_deadline(&self) -> Instant {
        let mut d = self.next_sweep;
        if let Some(t) = self.ingest.next_timeout() {
            d = d.min(t);
        }
        for s in &self.streams {
            if let Some(src) = &s.source {
                d = d.min(src.poll_timeout());
            }
        }
        d
    }

    fn shutdown(&mut self) {
        let ids: Vec<ViewerId> = self.ids().collect();
        for id in ids {
            self.remove(id, CloseReason::Local);
        }
        self.flush();
        info!("media worker {} stopped", self.index);
    }

    fn ids(&self) -> impl Iterator<Item = ViewerId> + '_ {
        let w = self.index;
        self.slots.iter().enumerate().filter_map(move |(i, s)| {
            s.entry
                .as_ref()
                .map(|_| ViewerId::new(w, i as u32, s.generation))
        })
    }

    fn entry(&mut self, id: ViewerId) -> Option<&mut Entry> {
        entry_in(&mut self.slots, id)
    }

    fn sessions(&self) -> Vec<SessionMemory> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let e = s.entry.as_ref()?;
                Some(SessionMemory {
                    id: ViewerId::new(self.index, i as u32, s.generation),
                    state: format!("{:?}", e.viewer.state()),
                    handshake: e.viewer.has_handshake(),
                    inline_bytes: SLOT_BYTES,
                    heap_bytes: e.heap,
                })
            })
            .collect()
    }

    fn handle_command(&mut self, cmd: Command) {
        match cmd {
            Command::AddViewer {
                stream,
                params,
                reply,
            } => {
                if stream >= self.streams.len() {
                    self.unplace();
                    return;
                }
                if self.free.is_empty() && self.slots.len() >= 1 << 24 {
                    // A ViewerId holds 24 bits of slot index; the reply is dropped, which the
                    // HTTP side reports as unavailable.
                    warn!("media worker {} is full", self.index);
                    self.unplace();
                    return;
                }
                let ufrag = params.local_ufrag;
                // The ufrag was allocated on the HTTP side; the viewer owns it from here.
                let heap = params.remote_ufrag.len();
                let viewer = Viewer::new(*params, Instant::now());
                let index = match self.free.pop() {
                    Some(i) => i,
                    None => {
                        self.slots.push(Slot {
                            generation: self.next_generation,
                            entry: None,
                        });
                        self.book_slots();
                        (self.slots.len() - 1) as u32
                    }
                };
                let slot = &mut self.slots[index as usize];
                let id = ViewerId::new(self.index, index, slot.generation);
                let pos = self.streams[stream].viewers.len();
                self.streams[stream].viewers.push(id);
                let mut entry = Entry {
                    viewer,
                    stream,
                    pos,
                    handshaking: true,
                    heap,
                    booked: (false, 0),
                    reported_lost: 0,
                };
                self.pools.sessions.add(1, SLOT_BYTES);
                self.pools.book(&mut entry);
                slot.entry = Some(entry);
                // The route is queued before the reply, so it is in place before the
                // viewer's first check can arrive.
                self.route(|| Route::Ufrag {
                    ufrag,
                    id,
                    add: true,
                });
                self.stats
                    .snapshots
                    .viewer_joined(id.raw(), &self.streams[stream].key);
                self.stats.viewers.fetch_add(1, Ordering::Relaxed);
                self.stats.handshakes.fetch_add(1, Ordering::Relaxed);
                let _ = reply.send(id);
            }
            Command::RemoveViewer(id) => self.remove(id, CloseReason::Local),
            Command::AddPublisher {
                stream,
                publisher,
                reply,
            } => {
                let res = if !self.owns(stream)
                    || self.streams.get(stream).is_none_or(|s| s.source.is_some())
                {
                    Err(AddError::Busy)
                } else {
                    let ufrag: Box<str> = publisher.local_ufrag().into();
                    let r = self.ingest.add(stream, *publisher);
                    if r.is_ok() {
                        self.route(|| Route::Publisher {
                            ufrag: ufrag.clone(),
                            stream,
                            add: true,
                        });
                    }
                    r
                };
                if let Ok(id) = &res {
                    self.stats.publishers.fetch_add(1, Ordering::Relaxed);
                    self.publisher_ids[stream] = Some(id.serial);
                    self.stats.snapshots.publisher_joined(
                        id.serial,
                        &self.streams[stream].key,
                        "whip",
                    );
                    info!("publisher on {} connecting", self.streams[stream].key);
                }
                let _ = reply.send(res);
            }
            Command::Rtmp(cmd) => {
                let (now, mut out, s) = (Instant::now(), Vec::new(), cmd.stream());
                let free = self.owns(s) && self.streams.get(s).is_some_and(|s| s.source.is_none());
                if let Some(id) = self.ingest.rtmp(cmd, free, now, &mut out) {
                    self.stats.publishers.fetch_add(1, Ordering::Relaxed);
                    self.publisher_ids[s] = Some(id.serial);
                    let key = &self.streams[s].key;
                    self.stats
                        .snapshots
                        .publisher_joined(id.serial, key, "rtmp");
                }
                self.apply_ingest(now, out);
            }
            Command::RemovePublisher(id) => {
                let mut out = Vec::new();
                self.ingest.remove(id, &mut out);
                self.apply_ingest(Instant::now(), out);
            }
            Command::RestartIce {
                id,
                ufrag,
                pwd,
                remote_ufrag,
            } => {
                let Some(e) = entry_in(&mut self.slots, id) else {
                    return;
                };
                let old = *e.viewer.local_ufrag();
                let added = remote_ufrag.len();
                ledger(e, |v| v.restart_ice(ufrag, pwd, remote_ufrag));
                e.heap += added;
                self.pools.book(e);
                self.route(|| Route::Ufrag {
                    ufrag: old,
                    id,
                    add: false,
                });
                self.route(|| Route::Ufrag {
                    ufrag,
                    id,
                    add: true,
                });
            }
            Command::Shutdown => {}
        }
    }

    fn remove(&mut self, id: ViewerId, reason: CloseReason) {
        let Some(slot) = self.slots.get_mut(id.index()) else {
            return;
        };
        if slot.generation != id.generation() {
            return;
        }
        let Some(mut e) = slot.entry.take() else {
            return;
        };
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(id.index() as u32);
        ledger(&mut e, |v| v.close(reason));
        self.stats.snapshots.viewer_left(
            id.raw(),
            match reason {
                CloseReason::ConnectTimeout => "connect timeout",
                CloseReason::ConsentExpired => "consent expired",
                CloseReason::DtlsFailed => "DTLS failed",
                CloseReason::PeerClosed => "closed by peer",
                CloseReason::Local => "closed by server",
            },
        );
        self.pools.unbook(&mut e);
        if e.handshaking {
            self.stats.handshakes.fetch_sub(1, Ordering::Relaxed);
            if reason != CloseReason::Local {
                self.stats.handshakes_failed.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.stats.viewers.fetch_sub(1, Ordering::Relaxed);
        self.unplace();
        let ufrag = *e.viewer.local_ufrag();
        self.route(|| Route::Ufrag {
            ufrag,
            id,
            add: false,
        });
        if let Some(addr) = e.viewer.remote_addr() {
            self.route(|| Route::Addr {
                addr,
                to: Target::Viewer(id),
                add: false,
            });
        }
        let list = &mut self.streams[e.stream].viewers;
        list.swap_remove(e.pos);
        if let Some(&moved) = list.get(e.pos)
            && let Some(m) = self.entry(moved)
        {
            m.pos = e.pos;
        }
        debug!(?reason, "viewer removed");
    }

    /// Books the session table's capacity in the `viewer_sessions` pool.
    fn book_slots(&mut self) {
        let bytes = self.slots.capacity() * SLOT_BYTES;
        self.pools.sessions.unreserve(self.pools.slots_reserved);
        self.pools.sessions.reserve(bytes);
        self.pools.slots_reserved = bytes;
    }

    /// Gives back memory a wave of departed viewers left behind (trailing empty slots,
    /// mostly empty lists) and refreshes the ring and index pools. Runs in the sweep, off
    /// the per-packet path.
    fn trim_and_book(&mut self) {
        while self.slots.last().is_some_and(|s| s.entry.is_none()) {
            if let Some(s) = self.slots.pop() {
                self.next_generation = self.next_generation.max(s.generation.wrapping_add(1));
            }
        }
        let len = self.slots.len();
        self.free.retain(|&i| (i as usize) < len);
        shrink_vec(&mut self.slots);
        shrink_vec(&mut self.free);
        for s in &mut self.streams {
            shrink_vec(&mut s.viewers);
        }
        self.book_slots();
        let (mut items, mut used, mut allocated) = (0, 0, 0);
        for s in &self.streams {
            for ring in [&s.stream.video, &s.stream.audio] {
                let (u, a) = ring.memory();
                items += ring.len();
                used += u;
                allocated += a;
            }
        }
        let now = (items, used, allocated);
        book_set(&self.pools.rings, &mut self.pools.rings_booked, now);
        let id = std::mem::size_of::<ViewerId>();
        let viewers: usize = self.streams.iter().map(|s| s.viewers.len()).sum();
        let used = viewers * id + self.free.len() * 4;
        let allocated = self
            .streams
            .iter()
            .map(|s| s.viewers.capacity() * id)
            .sum::<usize>()
            + self.free.capacity() * 4;
        let now = (viewers, used, allocated);
        book_set(&self.pools.index, &mut self.pools.index_booked, now);
    }

    /// Queues a control datagram (STUN, DTLS, RTCP) in the send batch.
    fn send_to(&mut self, data: &[u8], to: SocketAddr) {
        if self.batch.is_full() {
            self.flush();
        }
        if !self.batch.push(data, to) {
            self.stats.send_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Hands the send batch to the kernel.
    fn flush(&mut self) {
        if self.sent_packets > 0 {
            self.stats
                .packets_out
                .fetch_add(std::mem::take(&mut self.sent_packets), Ordering::Relaxed);
        }
        if self.batch.is_empty() {
            return;
        }
        let f = self.batch.flush(self.socket.as_raw_fd());
        self.stats
            .bytes_out
            .fetch_add(f.bytes as u64, Ordering::Relaxed);
        if f.dropped > 0 {
            self.stats
                .send_errors
                .fetch_add(f.dropped as u64, Ordering::Relaxed);
        }
    }

    fn handle_datagram(&mut self, now: Instant, to: Target, buf: &mut [u8], from: SocketAddr) {
        let id = match to {
            Target::Publisher(stream) => {
                let mut out = Vec::new();
                if !self.owns(stream) || !self.ingest.input(stream, now, from, buf, &mut out) {
                    self.stats.dropped_in.fetch_add(1, Ordering::Relaxed);
                }
                self.apply_ingest(now, out);
                return;
            }
            Target::Viewer(id) => id,
        };
        let Some(&first) = buf.first() else {
            self.stats.dropped_in.fetch_add(1, Ordering::Relaxed);
            return;
        };
        match first {
            0..=3 => self.handle_stun(now, id, buf, from),
            20..=63 => self.handle_dtls(now, id, buf, from),
            128..=191 if rtp::is_rtcp(buf) => self.handle_rtcp(now, id, buf, from),
            _ => {
                self.stats.dropped_in.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn handle_stun(&mut self, now: Instant, id: ViewerId, buf: &[u8], from: SocketAddr) {
        let Ok(msg) = stun::Message::parse(buf) else {
            self.stats.dropped_in.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let mut out = [0u8; 256];
        let Some(e) = entry_in(&mut self.slots, id) else {
            self.stats.dropped_in.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let before = e.viewer.remote_addr();
        let res = ledger(e, |v| v.handle_stun(now, &msg, from, &mut out));
        self.pools.book(e);
        match res {
            Ok(n) => {
                let after = e.viewer.remote_addr();
                if before != after {
                    let to = Target::Viewer(id);
                    if let Some(addr) = before {
                        self.route(|| Route::Addr {
                            addr,
                            to,
                            add: false,
                        });
                    }
                    if let Some(addr) = after {
                        self.route(|| Route::Addr {
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
                self.stats.dropped_in.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn handle_dtls(&mut self, now: Instant, id: ViewerId, buf: &[u8], from: SocketAddr) {
        let dtls = self.dtls.clone();
        let mut flights: Vec<Vec<u8>> = Vec::new();
        let Some(e) = confirmed(&mut self.slots, id, from) else {
            self.stats.dropped_in.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let res = ledger(e, |v| {
            v.handle_dtls(now, buf, &dtls, &mut |p| flights.push(p.to_vec()))
        });
        // The flights are the driver's, not the session's.
        e.heap = e.heap.saturating_sub(vec_bytes(&flights));
        self.pools.book(e);
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
    fn after_io(&mut self, id: ViewerId) {
        let Some(e) = self.entry(id) else { return };
        match e.viewer.state() {
            ViewerState::Connected if e.handshaking => {
                e.handshaking = false;
                let stream = e.stream;
                let remote = e.viewer.remote_addr();
                self.stats.snapshots.viewer_connected(id.raw(), remote);
                self.stats.handshakes.fetch_sub(1, Ordering::Relaxed);
                self.stats.handshakes_done.fetch_add(1, Ordering::Relaxed);
                self.start_viewer(id, stream);
            }
            ViewerState::Closed(reason) => self.remove(id, reason),
            _ => {}
        }
    }

    /// Sends a new viewer the video from the latest keyframe held (the keyframe cache), so
    /// it shows a picture at once instead of waiting for the next GOP.
    fn start_viewer(&mut self, id: ViewerId, stream: usize) {
        let Some(from) = self.streams[stream].stream.video.last_keyframe() else {
            return;
        };
        let pkts: Vec<RingPacket> = self.streams[stream]
            .stream
            .video
            .range_from(from)
            .cloned()
            .collect();
        for p in &pkts {
            self.send_media(id, p);
        }
    }

    /// Writes a media packet for a viewer into the send batch; returns its size.
    fn send_media(&mut self, id: ViewerId, pkt: &RingPacket) -> Option<usize> {
        if self.batch.is_full() {
            self.flush();
        }
        let e = entry_in(&mut self.slots, id)?;
        let to = e.viewer.remote_addr()?;
        let slot = self.batch.slot()?;
        match e.viewer.write_media(pkt, slot) {
            Ok(Some(n)) => {
                self.batch.commit(n, to);
                self.sent_packets += 1;
                Some(n)
            }
            Ok(None) => None,
            Err(err) => {
                debug!("write_media: {err}");
                None
            }
        }
    }

    fn handle_rtcp(&mut self, now: Instant, id: ViewerId, buf: &mut [u8], from: SocketAddr) {
        let mut nacks: Vec<(MediaKind, u64)> = Vec::new();
        let mut keyframe = false;
        let Some(e) = confirmed(&mut self.slots, id, from) else {
            self.stats.dropped_in.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let stream = e.stream;
        let res = ledger(e, |v| {
            v.handle_rtcp(now, buf, &mut |ev| match ev {
                ViewerEvent::Nack { kind, seq } => nacks.push((kind, seq)),
                ViewerEvent::KeyframeRequest => keyframe = true,
            })
        });
        // The NACK list is the driver's, not the session's.
        e.heap = e
            .heap
            .saturating_sub(nacks.capacity() * std::mem::size_of::<(MediaKind, u64)>());
        self.pools.book(e);
        let lost: i64 = [MediaKind::Video, MediaKind::Audio]
            .into_iter()
            .filter_map(|k| e.viewer.reported_loss(k))
            .map(|(_, cumulative, _)| i64::from(cumulative))
            .sum();
        if lost > e.reported_lost {
            let grew = (lost - e.reported_lost) as u64;
            e.reported_lost = lost;
            self.stats.stream_reported_lost[stream].fetch_add(grew, Ordering::Relaxed);
        }
        if !nacks.is_empty() {
            self.stats.stream_nacks[stream].fetch_add(nacks.len() as u64, Ordering::Relaxed);
        }
        if res.is_err() {
            self.stats.dropped_in.fetch_add(1, Ordering::Relaxed);
        }
        if keyframe {
            self.stats.keyframe_requests.fetch_add(1, Ordering::Relaxed);
            self.stats.stream_keyframe_requests[stream].fetch_add(1, Ordering::Relaxed);
            if self.owns(stream) {
                self.keyframe_request(stream, now);
            } else if let Some(app) = self.hosts.get(stream % self.apps) {
                let _ = app.ctl(Ctl::Keyframe(stream));
            }
        }
        for (kind, seq) in nacks {
            let Some(p) = self.streams[stream].stream.ring(kind).get(seq).cloned() else {
                continue;
            };
            self.send_media(id, &p);
            self.stats.retransmits.fetch_add(1, Ordering::Relaxed);
        }
        self.after_io(id);
    }

    /// A viewer of an owned stream asked for a keyframe: the clip source sends one every
    /// second; ingest coalesces these into one upstream request.
    fn keyframe_request(&mut self, stream: usize, now: Instant) {
        let mut out = Vec::new();
        self.ingest.request_keyframe(stream, now, &mut out);
        self.apply_ingest(now, out);
    }

    fn run_sources(&mut self, now: Instant) {
        for si in 0..self.streams.len() {
            let Some(mut src) = self.streams[si].source.take() else {
                continue;
            };
            let mut fresh: Vec<RingPacket> = Vec::new();
            let pool = &self.pool;
            let clock = self.clock;
            src.poll(now, &mut |mp| {
                let mut b = pool.alloc(mp.payload.len());
                b.copy_from_slice(mp.payload);
                fresh.push(RingPacket {
                    kind: mp.kind,
                    seq: mp.seq,
                    rtp_ts: mp.rtp_ts,
                    marker: mp.marker,
                    keyframe: mp.keyframe,
                    capture_ntp: clock.ntp(mp.capture_time),
                    payload: b.freeze(),
                });
            });
            self.streams[si].source = Some(src);
            for p in fresh {
                if self.streams[si].stream.push(p.clone()) {
                    self.publish(si, p);
                }
            }
        }
    }

    /// A new packet of an owned stream: to this worker's viewers and to the stream workers.
    fn publish(&mut self, stream: usize, pkt: RingPacket) {
        self.fan_out(stream, &pkt);
        for i in 0..self.peers.len() {
            match self.peers[i].data.try_send(Data::Media {
                stream,
                pkt: pkt.clone(),
            }) {
                Ok(()) => self.peers_woken[i] = true,
                Err(TrySendError::Full(_)) => {
                    self.stats.queue_full.fetch_add(1, Ordering::Relaxed);
                    self.peers_woken[i] = true;
                }
                Err(TrySendError::Disconnected(_)) => {}
            }
        }
    }

    fn wake_peers(&mut self) {
        for i in 0..self.peers.len() {
            if std::mem::take(&mut self.peers_woken[i]) {
                self.peers[i].wake();
            }
        }
    }

    /// Carries out what ingest asked for: datagrams to publishers, media into the rings
    /// and out to the viewers, liveness changes.
    fn apply_ingest(&mut self, now: Instant, out: Vec<IngestOutput>) {
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
                    self.stats.ingest_packets.fetch_add(1, Ordering::Relaxed);
                    let mut b = self.pool.alloc(packet.payload.len());
                    b.copy_from_slice(&packet.payload);
                    let pkt = RingPacket {
                        kind: packet.kind,
                        seq,
                        rtp_ts: ts,
                        marker: packet.marker,
                        keyframe,
                        capture_ntp: packet.capture_ntp.unwrap_or_else(|| self.clock.ntp(now)),
                        payload: b.freeze(),
                    };
                    if self.streams[stream].stream.push(pkt.clone()) {
                        self.publish(stream, pkt);
                    }
                }
                IngestOutput::Live(stream) => {
                    if let Some(l) = self.stats.live.get(stream) {
                        l.store(true, Ordering::Relaxed);
                    }
                    let kind = self.ingest.kind_name(stream);
                    self.stats
                        .snapshots
                        .stream_state(&self.streams[stream].key, kind, true);
                    if let Some(id) = self.publisher_ids[stream] {
                        self.stats.snapshots.publisher_live(id);
                    }
                    info!("{} is live (publisher)", self.streams[stream].key);
                }
                IngestOutput::Gone(stream) => {
                    if let Some(l) = self.stats.live.get(stream) {
                        l.store(false, Ordering::Relaxed);
                    }
                    self.stats
                        .snapshots
                        .stream_state(&self.streams[stream].key, "none", false);
                    if let Some(id) = self.publisher_ids[stream].take() {
                        self.stats.snapshots.publisher_left(id, "ended");
                    }
                    // Viewers stay; a later publisher continues the same RTP streams.
                    self.streams[stream].stream.video.clear();
                    self.streams[stream].stream.audio.clear();
                    for i in 0..self.peers.len() {
                        if self.peers[i].data.try_send(Data::Reset(stream)).is_ok() {
                            self.peers_woken[i] = true;
                        }
                    }
                    self.route(|| Route::Publisher {
                        ufrag: Box::default(),
                        stream,
                        add: false,
                    });
                    self.stats.publishers.fetch_sub(1, Ordering::Relaxed);
                    info!("publisher of {} left", self.streams[stream].key);
                }
            }
        }
    }

    fn fan_out(&mut self, stream: usize, pkt: &RingPacket) {
        let n = self.streams[stream].viewers.len();
        if n == 0 {
            return;
        }
        let (mut packets, mut bytes) = (0u64, 0u64);
        for i in 0..n {
            let id = self.streams[stream].viewers[i];
            if let Some(b) = self.send_media(id, pkt) {
                packets += 1;
                bytes += b as u64;
            }
        }
        // Per-stream counters: one update per packet fanned out, not per viewer.
        self.stats.stream_packets[stream].fetch_add(packets, Ordering::Relaxed);
        self.stats.stream_bytes[stream].fetch_add(bytes, Ordering::Relaxed);
    }

    fn sweep(&mut self, now: Instant) {
        let ids: Vec<ViewerId> = self.ids().collect();
        let mut out = [0u8; 512];
        let mut flights: Vec<Vec<u8>> = Vec::new();
        for id in ids {
            let Some(e) = entry_in(&mut self.slots, id) else {
                continue;
            };
            let due = e.viewer.poll_timeout().is_some_and(|(t, _)| t <= now);
            if !due {
                continue;
            }
            flights.clear();
            let kept = vec_bytes(&flights);
            let cname = &self.cname;
            let sr = ledger(e, |v| {
                v.handle_timeout(now, &mut |p| flights.push(p.to_vec()));
                v.poll_sender_report(now, cname, &mut out)
            });
            // The flights are the driver's, not the session's.
            e.heap = e.heap.saturating_sub(vec_bytes(&flights) - kept);
            self.pools.book(e);
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
}

/// Heap bytes of a list of datagrams (the outer vector and each one).
fn vec_bytes(v: &Vec<Vec<u8>>) -> usize {
    v.capacity() * std::mem::size_of::<Vec<u8>>() + v.iter().map(Vec::capacity).sum::<usize>()
}

/// The viewer `id` if `from` is its confirmed address (DTLS and RTCP come only from it).
fn confirmed(slots: &mut [Slot], id: ViewerId, from: SocketAddr) -> Option<&mut Entry> {
    let e = entry_in(slots, id)?;
    (e.viewer.remote_addr() == Some(from)).then_some(e)
}

fn entry_in(slots: &mut [Slot], id: ViewerId) -> Option<&mut Entry> {
    let slot = slots.get_mut(id.index())?;
    if slot.generation != id.generation() {
        return None;
    }
    slot.entry.as_mut()
}

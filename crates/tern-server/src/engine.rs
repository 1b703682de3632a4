//! The media engine: the thread that owns the shared UDP port, the streams and the viewers.
//!
//! One loop (a stream worker in OvenMediaEngine's terms) receives every datagram on the
//! media port, demultiplexes it (RFC 7983: STUN, DTLS, SRTP/SRTCP) by 5-tuple and, for the
//! first STUN request of a session, by ICE ufrag; runs the clip sources; and fans each new
//! packet out to the stream's viewers. No lock is taken on the per-packet path: the HTTP side
//! talks to the engine through a command channel and reads counters through atomics.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, Sender};
use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token, Waker};
use std::os::fd::AsRawFd;

use crate::batch::SendBatch;
use crate::ingest::{AddError, Ingest, IngestOutput, PublisherId};
use tern_pool::{BufferPool, CountingAlloc, PoolCounter};
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

const SOCKET: Token = Token(0);
const WAKER: Token = Token(1);

/// How often every viewer's timers are checked. 20 ms keeps DTLS retransmission and SR
/// timing accurate to well under their own granularity (1 s) at O(viewers) cost per sweep.
const SWEEP: Duration = Duration::from_millis(20);

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

    fn new(index: u32, generation: u32) -> Self {
        ViewerId(u64::from(generation) << 32 | u64::from(index))
    }
    fn index(self) -> usize {
        (self.0 & 0xffff_ffff) as usize
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
    /// End a publisher (WHIP DELETE).
    RemovePublisher(PublisherId),
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
    /// Report every viewer's memory (for `GET /v1/memory?sessions=1`).
    Sessions(oneshot::Sender<Vec<SessionMemory>>),
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
    /// WHIP publishers connected or connecting.
    pub publishers: AtomicUsize,
    /// Media packets received from publishers.
    pub ingest_packets: AtomicU64,
    /// Whether each stream is live (index as in the engine's streams).
    pub live: Vec<AtomicBool>,
    /// Media packets sent per stream (index as in the engine's streams).
    pub stream_packets: Vec<AtomicU64>,
    /// Media bytes sent per stream.
    pub stream_bytes: Vec<AtomicU64>,
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
    /// `clip_sources`: the clips the demo streams loop (payload bytes and indexes).
    clips: PoolCounter,
    /// `send_batch`: the send batch's datagram buffers and `sendmmsg` headers, allocated once.
    batch: PoolCounter,
    /// `session_index`: the demultiplexing maps (5-tuple, ufrag) and per-stream viewer lists,
    /// estimated from their capacities (hash table buckets plus one control byte each).
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
            clips: PoolCounter::new("clip_sources", 0),
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

    fn set(counter: &PoolCounter, booked: &mut (usize, usize, usize), now: (usize, usize, usize)) {
        counter.sub(booked.0, booked.1);
        counter.unreserve(booked.2);
        counter.add(now.0, now.1);
        counter.reserve(now.2);
        *booked = now;
    }
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
fn map_bytes<K, V>(m: &HashMap<K, V>) -> usize {
    let cap = m.capacity();
    if cap == 0 {
        return 0;
    }
    let buckets = (cap * 8 / 7).next_power_of_two();
    buckets * (std::mem::size_of::<(K, V)>() + 1)
}

/// Shrinks a map that is mostly empty (after a wave of viewers leaves): to nothing when
/// empty, else to twice its length when under a quarter full.
fn shrink_map<K: std::hash::Hash + Eq, V>(m: &mut HashMap<K, V>) {
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

/// The engine; [`Engine::run`] consumes it on its own thread.
pub struct Engine {
    socket: UdpSocket,
    poll: Poll,
    cmds: Receiver<Command>,
    streams: Vec<EngineStream>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    by_addr: HashMap<SocketAddr, ViewerId>,
    by_ufrag: HashMap<[u8; UFRAG_LEN], ViewerId>,
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
}

/// The HTTP side's handle on the engine.
#[derive(Clone)]
pub struct EngineHandle {
    tx: Sender<Command>,
    waker: Arc<Waker>,
    /// Shared counters.
    pub stats: Arc<EngineStats>,
}

impl EngineHandle {
    /// Sends a command and wakes the engine.
    pub fn send(&self, cmd: Command) -> Result<(), &'static str> {
        self.tx.send(cmd).map_err(|_| "media engine stopped")?;
        self.waker.wake().map_err(|_| "media engine stopped")
    }
}

impl Engine {
    /// Binds the media socket and runs the engine on a new thread named `StreamWorker`
    /// (OvenMediaEngine's name for per-session work). Returns the handle, the bound address
    /// and the thread.
    ///
    /// The engine is built on its own thread because its send batch holds raw `sendmmsg`
    /// headers, which may not cross threads.
    pub fn spawn(
        bind: SocketAddr,
        streams: Vec<EngineStream>,
        dtls: Arc<DtlsContext>,
        pool: BufferPool,
        cname: String,
    ) -> io::Result<(EngineHandle, SocketAddr, std::thread::JoinHandle<()>)> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("StreamWorker".into())
            .spawn(move || {
                let built = Engine::new(bind, streams, dtls, pool, cname)
                    .and_then(|(e, h)| Ok((e.local_addr()?, e, h)));
                match built {
                    Ok((addr, engine, handle)) => {
                        let _ = tx.send(Ok((handle, addr)));
                        engine.run();
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            })?;
        match rx.recv() {
            Ok(Ok((handle, addr))) => Ok((handle, addr, thread)),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => Err(io::Error::other("media engine thread died during start-up")),
        }
    }

    fn new(
        bind: SocketAddr,
        streams: Vec<EngineStream>,
        dtls: Arc<DtlsContext>,
        pool: BufferPool,
        cname: String,
    ) -> io::Result<(Engine, EngineHandle)> {
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
        sock.set_nonblocking(true)?;
        sock.bind(&bind.into())?;
        let mut socket = UdpSocket::from_std(sock.into());
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut socket, SOCKET, Interest::READABLE)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let (tx, cmds) = crossbeam_channel::unbounded();
        let n_streams = streams.len();
        let stats = Arc::new(EngineStats {
            live: streams
                .iter()
                .map(|s| AtomicBool::new(s.source.is_some()))
                .collect(),
            stream_packets: streams.iter().map(|_| AtomicU64::new(0)).collect(),
            stream_bytes: streams.iter().map(|_| AtomicU64::new(0)).collect(),
            ..EngineStats::default()
        });
        for s in &streams {
            let source = if s.source.is_some() { "clip" } else { "none" };
            stats
                .snapshots
                .stream_state(&s.key, source, s.source.is_some());
        }
        let pools = Pools::new();
        for s in &streams {
            if let Some(src) = &s.source {
                pools.clips.add(1, src.clip().heap_bytes());
            }
        }
        // Measured: the batch is allocated here on this thread, in one go.
        let before = CountingAlloc::thread_net_bytes();
        let batch = SendBatch::new();
        let bytes = usize::try_from(CountingAlloc::thread_net_bytes() - before).unwrap_or(0);
        pools.batch.add(1, bytes);
        let handle = EngineHandle {
            tx,
            waker,
            stats: stats.clone(),
        };
        Ok((
            Engine {
                socket,
                poll,
                cmds,
                streams,
                slots: Vec::new(),
                free: Vec::new(),
                by_addr: HashMap::new(),
                by_ufrag: HashMap::new(),
                dtls,
                pool,
                clock: NtpClock::now(),
                stats,
                cname,
                batch,
                next_sweep: Instant::now(),
                ingest: Ingest::new(n_streams),
                pools,
                next_generation: 0,
            },
            handle,
        ))
    }

    /// The bound media address.
    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Runs until [`Command::Shutdown`] or the command channel closes.
    pub fn run(mut self) {
        let mut events = Events::with_capacity(64);
        let mut buf = vec![0u8; 2048].into_boxed_slice();
        loop {
            let now = Instant::now();
            let deadline = self.next_deadline();
            let timeout = deadline.saturating_duration_since(now);
            if let Err(e) = self.poll.poll(&mut events, Some(timeout))
                && e.kind() != io::ErrorKind::Interrupted
            {
                warn!("media poll failed: {e}");
                return;
            }
            // Drain the socket (mio is edge-triggered).
            for _ in 0..4096 {
                match self.socket.recv_from(&mut buf) {
                    Ok((n, from)) => {
                        let now = Instant::now();
                        self.stats.packets_in.fetch_add(1, Ordering::Relaxed);
                        self.handle_datagram(now, &mut buf[..n], from);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    // ICMP errors surface as ECONNREFUSED on some sends; keep going.
                    Err(_) => continue,
                }
            }
            loop {
                match self.cmds.try_recv() {
                    Ok(Command::Shutdown) => {
                        self.shutdown();
                        return;
                    }
                    Ok(cmd) => self.handle_command(cmd),
                    Err(crossbeam_channel::TryRecvError::Empty) => break,
                    Err(crossbeam_channel::TryRecvError::Disconnected) => {
                        self.shutdown();
                        return;
                    }
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
                self.pool.maintain(now);
            }
            self.flush();
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
        info!("media engine stopped");
    }

    fn ids(&self) -> impl Iterator<Item = ViewerId> + '_ {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            s.entry
                .as_ref()
                .map(|_| ViewerId::new(i as u32, s.generation))
        })
    }

    fn entry(&mut self, id: ViewerId) -> Option<&mut Entry> {
        entry_in(&mut self.slots, id)
    }

    fn handle_command(&mut self, cmd: Command) {
        match cmd {
            Command::AddViewer {
                stream,
                params,
                reply,
            } => {
                if stream >= self.streams.len() {
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
                let id = ViewerId::new(index, slot.generation);
                let pos = self.streams[stream].viewers.len();
                self.streams[stream].viewers.push(id);
                let mut entry = Entry {
                    viewer,
                    stream,
                    pos,
                    handshaking: true,
                    heap,
                    booked: (false, 0),
                };
                self.pools.sessions.add(1, SLOT_BYTES);
                self.pools.book(&mut entry);
                slot.entry = Some(entry);
                self.by_ufrag.insert(ufrag, id);
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
                let res = if self.streams.get(stream).is_none_or(|s| s.source.is_some()) {
                    Err(AddError::Busy)
                } else {
                    self.ingest.add(stream, *publisher)
                };
                if res.is_ok() {
                    self.stats.publishers.fetch_add(1, Ordering::Relaxed);
                    info!("publisher on {} connecting", self.streams[stream].key);
                }
                let _ = reply.send(res);
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
                self.by_ufrag.remove(&old);
                self.by_ufrag.insert(ufrag, id);
            }
            Command::Sessions(reply) => {
                let list = self
                    .slots
                    .iter()
                    .enumerate()
                    .filter_map(|(i, s)| {
                        let e = s.entry.as_ref()?;
                        Some(SessionMemory {
                            id: ViewerId::new(i as u32, s.generation),
                            state: format!("{:?}", e.viewer.state()),
                            handshake: e.viewer.has_handshake(),
                            inline_bytes: SLOT_BYTES,
                            heap_bytes: e.heap,
                        })
                    })
                    .collect();
                let _ = reply.send(list);
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
        if self.by_ufrag.get(e.viewer.local_ufrag()) == Some(&id) {
            self.by_ufrag.remove(e.viewer.local_ufrag());
        }
        if let Some(addr) = e.viewer.remote_addr()
            && self.by_addr.get(&addr) == Some(&id)
        {
            self.by_addr.remove(&addr);
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
    /// mostly empty maps and lists) and refreshes the ring and index pools. Runs in the
    /// sweep, off the per-packet path.
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
        shrink_map(&mut self.by_addr);
        shrink_map(&mut self.by_ufrag);
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
        Pools::set(&self.pools.rings, &mut self.pools.rings_booked, now);
        let id = std::mem::size_of::<ViewerId>();
        let used = self.by_addr.len() * (std::mem::size_of::<(SocketAddr, ViewerId)>() + 1)
            + self.by_ufrag.len() * (std::mem::size_of::<([u8; UFRAG_LEN], ViewerId)>() + 1)
            + self
                .streams
                .iter()
                .map(|s| s.viewers.len() * id)
                .sum::<usize>()
            + self.free.len() * 4;
        let allocated = map_bytes(&self.by_addr)
            + map_bytes(&self.by_ufrag)
            + self
                .streams
                .iter()
                .map(|s| s.viewers.capacity() * id)
                .sum::<usize>()
            + self.free.capacity() * 4;
        let now = (self.by_ufrag.len(), used, allocated);
        Pools::set(&self.pools.index, &mut self.pools.index_booked, now);
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

    fn handle_datagram(&mut self, now: Instant, buf: &mut [u8], from: SocketAddr) {
        if let Some(stream) = self.ingest.owner(from, buf) {
            let mut out = Vec::new();
            if !self.ingest.input(stream, now, from, buf, &mut out) {
                self.stats.dropped_in.fetch_add(1, Ordering::Relaxed);
            }
            self.apply_ingest(now, out);
            return;
        }
        let Some(&first) = buf.first() else {
            self.stats.dropped_in.fetch_add(1, Ordering::Relaxed);
            return;
        };
        match first {
            0..=3 => self.handle_stun(now, buf, from),
            20..=63 => self.handle_dtls(now, buf, from),
            128..=191 if rtp::is_rtcp(buf) => self.handle_rtcp(now, buf, from),
            _ => {
                self.stats.dropped_in.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn handle_stun(&mut self, now: Instant, buf: &[u8], from: SocketAddr) {
        let Ok(msg) = stun::Message::parse(buf) else {
            self.stats.dropped_in.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let id = msg
            .username()
            .and_then(|u| u.get(..UFRAG_LEN))
            .and_then(|u| <[u8; UFRAG_LEN]>::try_from(u).ok())
            .and_then(|u| self.by_ufrag.get(&u).copied());
        let Some(id) = id else {
            self.stats.dropped_in.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let mut out = [0u8; 256];
        let Some(e) = entry_in(&mut self.slots, id) else {
            return;
        };
        let before = e.viewer.remote_addr();
        let res = ledger(e, |v| v.handle_stun(now, &msg, from, &mut out));
        self.pools.book(e);
        match res {
            Ok(n) => {
                let after = e.viewer.remote_addr();
                if before != after {
                    if let Some(old) = before {
                        self.by_addr.remove(&old);
                    }
                    if let Some(new) = after {
                        self.by_addr.insert(new, id);
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

    fn handle_dtls(&mut self, now: Instant, buf: &[u8], from: SocketAddr) {
        let Some(&id) = self.by_addr.get(&from) else {
            self.stats.dropped_in.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let dtls = self.dtls.clone();
        let mut flights: Vec<Vec<u8>> = Vec::new();
        let Some(e) = entry_in(&mut self.slots, id) else {
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
                self.stats.packets_out.fetch_add(1, Ordering::Relaxed);
                Some(n)
            }
            Ok(None) => None,
            Err(err) => {
                debug!("write_media: {err}");
                None
            }
        }
    }

    fn handle_rtcp(&mut self, now: Instant, buf: &mut [u8], from: SocketAddr) {
        let Some(&id) = self.by_addr.get(&from) else {
            self.stats.dropped_in.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let mut nacks: Vec<(MediaKind, u64)> = Vec::new();
        let mut keyframe = false;
        let Some(e) = entry_in(&mut self.slots, id) else {
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
        if res.is_err() {
            self.stats.dropped_in.fetch_add(1, Ordering::Relaxed);
        }
        if keyframe {
            // The clip source sends a keyframe every second; ingest sources will coalesce
            // these into one upstream request.
            self.stats.keyframe_requests.fetch_add(1, Ordering::Relaxed);
            let mut out = Vec::new();
            self.ingest.request_keyframe(stream, now, &mut out);
            self.apply_ingest(now, out);
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
                self.streams[si].stream.push(p.clone());
                self.fan_out(si, &p);
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
                        self.fan_out(stream, &pkt);
                    }
                }
                IngestOutput::Live(stream) => {
                    if let Some(l) = self.stats.live.get(stream) {
                        l.store(true, Ordering::Relaxed);
                    }
                    self.stats
                        .snapshots
                        .stream_state(&self.streams[stream].key, "whip", true);
                    info!("{} is live (publisher)", self.streams[stream].key);
                }
                IngestOutput::Gone(stream) => {
                    if let Some(l) = self.stats.live.get(stream) {
                        l.store(false, Ordering::Relaxed);
                    }
                    self.stats
                        .snapshots
                        .stream_state(&self.streams[stream].key, "none", false);
                    // Viewers stay; a later publisher continues the same RTP streams.
                    self.streams[stream].stream.video.clear();
                    self.streams[stream].stream.audio.clear();
                    self.stats.publishers.fetch_sub(1, Ordering::Relaxed);
                    info!("publisher of {} left", self.streams[stream].key);
                }
            }
        }
    }

    fn fan_out(&mut self, stream: usize, pkt: &RingPacket) {
        let n = self.streams[stream].viewers.len();
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

fn entry_in(slots: &mut [Slot], id: ViewerId) -> Option<&mut Entry> {
    let slot = slots.get_mut(id.index())?;
    if slot.generation != id.generation() {
        return None;
    }
    slot.entry.as_mut()
}

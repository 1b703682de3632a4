//! The media engine: OvenMediaEngine's three kinds of worker threads around the one UDP port.
//!
//! - **socket workers** (`worker_count`, threads `SPICE-{i}`; see `socket.rs`) receive
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
//! App and stream workers are the same worker type in two roles (see `worker.rs`). They talk through
//! crossbeam queues (bounded for packets, so a stalled worker drops and counts instead of
//! growing) and wake each other once per batch through an eventfd (mio `Waker`). No lock is
//! taken on the per-packet path; counters are relaxed atomics added once per batch. The HTTP
//! side reaches the workers through [`EngineHandle`].

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crossbeam_channel::SendTimeoutError;
use mio::{Poll, Token, Waker};
use tern_pool::{BufferPool, PoolConfig, PoolCounter, PoolError};
use tern_rtc::stream::Stream;
use tern_rtc::viewer::{DtlsContext, ViewerLive};
use tokio::sync::oneshot;
use tracing::info;

use crate::clock::NtpClock;
use crate::config::{Config, GsoMode, Tunables};
use crate::media::batch::Gso;
use crate::media::ingest::{FrameCommand, PublisherTimeouts};
use crate::media::link::{
    Command, Ctl, Data, QUEUE, SessionMemory, TapPacket, ViewerId, WorkerLink,
};
use crate::media::socket::{Route, SocketLink, SocketWorker};
use crate::media::stats::{EngineStats, StreamCounters};
use crate::media::worker::{EngineStream, Role, Worker, WorkerInit};
use crate::start::StartError;

const WAKER: Token = Token(1);

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
    /// When publishers that do not connect or stop sending are ended.
    pub publisher_timeouts: PublisherTimeouts,
    /// Video and audio ring lengths (packets) of a served stream.
    pub rings: (usize, usize),
    /// Where app workers hand ring packets of streams being packaged (LL-HLS, recordings).
    pub tap: Option<crossbeam_channel::Sender<TapPacket>>,
    /// Whether to send with UDP GSO where the kernel supports it (`tunables.gso`).
    pub gso: bool,
    /// Whether a single-layer stream's viewer on a path too narrow for it has its video
    /// paused (`tunables.pause_video_below_estimate`).
    pub pause_video: bool,
    /// Each app's slate (`[[app]] fallback`), played while a stream has no publisher.
    pub slates: Arc<super::slate::Slates>,
}

/// With this variable set to `1`, the first GSO send is made to fail (the kernel refuses it
/// with `EINVAL`, see [`Gso::fail_first_send`]): the test hook of the fallback.
pub const GSO_FAIL_FIRST_ENV: &str = "TERN_GSO_FAIL_FIRST";

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

/// The media engine: a namespace for [`Engine::start`] (with [`Engine::packet_pool`]) and
/// [`Engine::spawn`].
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
            Command::RemoveViewer(id)
            | Command::SetLayer { id, .. }
            | Command::RestartIce { id, .. } => id.worker(),
            Command::AddPublisher { stream, .. } => stream % self.apps,
            Command::RemovePublisher(id) | Command::RestartPublisherIce { id, .. } => {
                id.stream % self.apps
            }
            Command::Frames(c) => c.stream() % self.apps,
            Command::RequestKeyframe(stream) | Command::RequestLayerKeyframes(stream) => {
                stream % self.apps
            }
            Command::Shutdown => {
                for h in self.hosts.iter() {
                    let _ = h.ctl(Ctl::Cmd(Command::Shutdown));
                }
                return Ok(());
            }
            // Every worker keeps a copy of every stream slot.
            Command::BindStream {
                index,
                key,
                declared,
            } => {
                for h in self.hosts.iter() {
                    h.ctl(Ctl::Cmd(Command::BindStream {
                        index: *index,
                        key: key.clone(),
                        declared: *declared,
                    }))?;
                }
                return Ok(());
            }
            Command::UnbindStream { index, reason } => {
                for h in self.hosts.iter() {
                    h.ctl(Ctl::Cmd(Command::UnbindStream {
                        index: *index,
                        reason: *reason,
                    }))?;
                }
                return Ok(());
            }
        };
        let link = self.hosts.get(host).ok_or("no such media worker")?;
        link.ctl(Ctl::Cmd(cmd))
    }

    /// Sends a frame publisher's command (media, codec) to its stream's app worker over the
    /// bounded data queue, waiting up to `timeout` for room (the caller is the connection's own thread:
    /// waiting is its back-pressure on the encoder). Errs if the engine stopped or the
    /// queue stayed full for `timeout`.
    pub fn send_frames(&self, cmd: FrameCommand, timeout: Duration) -> Result<(), &'static str> {
        let link = self
            .hosts
            .get(cmd.stream() % self.apps)
            .ok_or("no such media worker")?;
        match link.data.send_timeout(Data::Frames(cmd), timeout) {
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

    /// A viewer's live figures (for `GET /v1/viewers/{id}`); `None` when it is gone.
    pub async fn viewer_live(&self, id: ViewerId) -> Result<Option<ViewerLive>, &'static str> {
        let host = self.hosts.get(id.worker()).ok_or("no such media worker")?;
        let (tx, rx) = oneshot::channel();
        host.ctl(Ctl::Live(id, tx))?;
        rx.await.map_err(|_| "media engine stopped")
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

impl Engine {
    /// The packet buffers every engine thread takes its packets from, as `tunables` size
    /// them (`max_payload`, `pool_initial`, `pool_max_free`), its memory reserved now.
    pub fn packet_pool(t: &Tunables) -> Result<BufferPool, PoolError> {
        BufferPool::new(PoolConfig {
            name: "packet_buffers",
            lower: 1,
            upper: t.max_payload,
            initial: t.pool_initial,
            max_free: t.pool_max_free,
            low_water: t.pool_initial / 4,
            prefault: true,
            huge_pages: false,
        })
    }

    /// [`Engine::spawn`] as `cfg` says: on `server.media`, with its worker counts, CNAME and
    /// publisher timeouts, and the tunables' rings, GSO and video pause; `streams` in index
    /// order, packets from `pool`. App workers hand `tap` the ring packets of streams being
    /// packaged or recorded.
    pub fn start(
        cfg: &Config,
        streams: Vec<EngineStream>,
        slates: Arc<super::slate::Slates>,
        dtls: Arc<DtlsContext>,
        pool: BufferPool,
        tap: crossbeam_channel::Sender<TapPacket>,
    ) -> Result<(EngineHandle, SocketAddr, EngineThreads), StartError> {
        let t = &cfg.tunables;
        Engine::spawn(EngineConfig {
            bind: cfg.server.media,
            streams,
            dtls,
            pool,
            cname: cfg.server.cname.clone(),
            publisher_timeouts: (&cfg.server).into(),
            rings: (t.video_ring, t.audio_ring),
            // Nothing is sent while no stream is packaged or recorded.
            tap: Some(tap),
            gso: t.gso == GsoMode::Auto,
            pause_video: t.pause_video_below_estimate,
            slates,
            workers: WorkerCounts {
                socket: cfg.server.worker_count,
                app: cfg.server.app_worker_count,
                stream: cfg.server.stream_worker_count,
            },
        })
        .map_err(StartError::bind("media (UDP)", cfg.server.media))
    }

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
            publisher_timeouts,
            rings,
            tap,
            gso,
            pause_video,
            slates,
        } = cfg;
        let sockets = bind_sockets(bind, workers.socket)?;
        let local = sockets[0].local_addr()?;
        let gso = Arc::new(Gso::probe(gso, local));
        if std::env::var(GSO_FAIL_FIRST_ENV).is_ok_and(|v| v == "1") {
            gso.fail_first_send();
        }
        let n_streams = streams.len();
        let stats = Arc::new(EngineStats {
            streams: streams
                .iter()
                .map(|s| StreamCounters::new(s.source.is_some()))
                .collect(),
            ..EngineStats::default()
        });
        // Spare slots (no name yet) are not streams until a publisher makes one.
        for s in streams.iter().filter(|s| !s.key.is_empty()) {
            let source = if s.source.is_some() { "clip" } else { "none" };
            stats
                .snapshots
                .stream_state(&s.key, source, s.source.is_some(), &[]);
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
        let (vcap, acap) = rings;
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
                // Streams this worker serves get rings; the others, and the slots publishers
                // may make streams in (no name yet), a one-slot placeholder.
                let wstreams: Vec<EngineStream> = (0..n_streams)
                    .map(|s| {
                        let mine = role == Role::App && s % apps == i;
                        if mine && let Some(es) = owned[s].take() {
                            return es;
                        }
                        let serves = (role == Role::Stream || mine) && !keys[s].is_empty();
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
                    timeouts: publisher_timeouts,
                    rings,
                    gso: gso.clone(),
                    pause_video,
                    tap: if role == Role::App { tap.clone() } else { None },
                    slates: slates.clone(),
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
            gso = gso.is_on(),
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
        if let Err(e) =
            super::socket::sys::set_dont_fragment(std::os::fd::AsRawFd::as_raw_fd(&sock))
        {
            tracing::debug!(error = %e, "media socket: IP_MTU_DISCOVER refused");
        }
        sock.bind(&addr.into())?;
        // The others bind the port the first one got (bind port 0 picks one).
        if let Some(a) = sock.local_addr()?.as_socket() {
            addr = a;
        }
        out.push(sock.into());
    }
    Ok(out)
}

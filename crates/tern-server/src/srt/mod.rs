//! SRT ingest (`--srt ADDR`, `[server] srt`): encoders (OBS, vMix, ffmpeg, hardware) call
//! tern in SRT caller mode and publish MPEG-TS.
//!
//! | file | what |
//! | --- | --- |
//! | `mod.rs` | the listener thread (`SrtListener`): stream IDs, the app's passphrase, one publisher thread per accepted caller, the metrics |
//! | `transport.rs` | [`transport::Transport`], the SRT endpoint behind a trait, and its implementation on `srt-protocol` |
//! | `publisher.rs` | one publisher's thread (`SrtSession`): the session layer, the engine slot, MPEG-TS to the engine |
//!
//! # The library: `srt-protocol` (pure Rust, sans-IO), driven by tern
//!
//! Chosen over Debian's libsrt behind a binding on interop evidence (commands in
//! `docs/src/protocols/srt.md`): Debian 12's ffmpeg 5.1 (libsrt 1.5.1) published to a
//! `srt-protocol` listener in the clear and with `pbkeylen` 16 and 32, every byte of the TS
//! arriving; a wrong passphrase was refused at the handshake (libsrt logs "Incorrect
//! passphrase"). libsrt would need `unsafe` FFI, which tern keeps to one syscall module,
//! and a C library's own threads and epoll beside ours. `srt-tokio`'s listener is not used:
//! its `MultiplexListener` keeps a pending session for every source address that ever sent
//! a packet, with no handshake timer (its `handle_timer` is a to-do), and stalls every
//! connection while its access-request queue is full. So this module drives the sans-IO
//! parts (`Listen`, `DuplexConnection`) itself on one thread and one UDP socket, with state
//! only for handshakes that the per-address limit admits, dropped after 5 s. Three inputs
//! that panic inside `srt-protocol` 0.4.4 (`unimplemented!` on a key length or keying
//! material it does not expect) are refused before they reach it, and every call into it
//! runs under `catch_unwind`: a panic there drops that peer and is counted.
//! [`transport::Transport`] is the seam a libsrt binding would implement instead.
//!
//! # A caller's way in
//!
//! 1. First packet from an address: it must be a handshake induction, and the address must
//!    have room under `limits.srt_connections_per_ip` (else dropped and counted).
//! 2. Conclusion: the stream ID must parse ([`tern_proto::srt_stream_id`]), in any of the
//!    three forms; `m=request` is refused (`SRT_REJX_BAD_MODE`); the app's `srt_latency_ms`
//!    is applied; the app's `srt_passphrase` must open the caller's keying material
//!    (`SRT_REJ_BADSECRET`, or `SRT_REJ_UNSECURE` when only one side encrypts).
//! 3. The publisher's thread asks the session layer ([`crate::session`]): name and dynamic
//!    streams, app token (`token=` or `s=`, MediaMTX's password as the app token), JWT, the
//!    admission webhook with `"protocol": "srt"`, the cluster claim, then the engine's slot;
//!    a [`Refusal`] becomes one SRT reject reason ([`reject_code`]) and a log line.
//! 4. Accepted: its TS goes through [`tern_rtc::ts_publisher::TsPublisher`] to the engine,
//!    as an RTMP publisher's FLV does; the engine's publisher timeout, kicks and the
//!    stream's grace apply alike.

mod publisher;
pub mod transport;

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use tern_proto::srt_stream_id::{StreamId, StreamIdError};
use tracing::{info, warn};

use crate::limits::PerAddress;
use crate::session::{Core, Refusal};
use transport::{ConnId, ProtocolTransport, RejectCode, SrtStats, Transport, TransportEvent};

/// Most publisher threads at once (each holds a TS demuxer and the AAC transcoder).
pub const MAX_PUBLISHERS: usize = 64;
/// Messages queued from the listener to one publisher's thread (~1.5 s at 8 Mbit/s); past
/// it messages are dropped and counted (the thread is stuck, SRT cannot push back).
const QUEUE: usize = 1024;
/// How often the listener thread checks for a stop and control messages.
const TICK: Duration = Duration::from_millis(10);
/// How often connection figures are refreshed for the publisher threads.
const STATS_EVERY: Duration = Duration::from_secs(1);

/// Listener to a publisher's thread.
#[derive(Debug)]
enum Inbound {
    /// The caller is connected (its handshake answered).
    Open,
    /// A message of its stream.
    Data(bytes::Bytes),
    /// It is gone.
    Closed(&'static str),
}

/// A publisher's thread to the listener.
#[derive(Debug)]
enum Control {
    /// Accept the caller with its app's passphrase.
    Accept(ConnId, Option<String>),
    /// Refuse it.
    Reject(ConnId, RejectCode),
    /// Close it (its publisher ended).
    Close(ConnId),
}

/// What the listener counts for `/metrics`.
#[derive(Debug, Default)]
pub struct SrtCounters {
    /// Callers accepted.
    pub accepted: AtomicU64,
    /// Callers refused, by reason (index: [`REASONS`]).
    pub refused: [AtomicU64; REASONS.len()],
    /// Publishers live now.
    pub publishers: AtomicUsize,
    /// Messages dropped because a publisher's queue was full.
    pub queue_drops: AtomicU64,
    /// The transport's counts, copied once a second.
    pub handshake_timeouts: AtomicU64,
    /// First packets dropped by `limits.srt_connections_per_ip` or the peer cap.
    pub limited: AtomicU64,
    /// Datagrams that did not parse or belonged to no peer.
    pub stray: AtomicU64,
    /// Inputs the SRT library panicked on (their peer was dropped).
    pub panics: AtomicU64,
    /// Sums over finished and running connections: packets lost, retransmitted, dropped.
    pub lost: AtomicU64,
    /// Retransmitted packets received.
    pub retransmitted: AtomicU64,
    /// Packets SRT gave up on.
    pub dropped: AtomicU64,
}

/// The reject reasons, in [`SrtCounters::refused`]'s order.
pub const REASONS: [RejectCode; 11] = [
    RejectCode::BadSecret,
    RejectCode::Unsecure,
    RejectCode::BadRequest,
    RejectCode::Unauthorized,
    RejectCode::Overload,
    RejectCode::Forbidden,
    RejectCode::NotFound,
    RejectCode::BadMode,
    RejectCode::Conflict,
    RejectCode::Internal,
    RejectCode::Unavailable,
];

/// The process's SRT counters.
pub fn counters() -> &'static SrtCounters {
    static C: OnceLock<SrtCounters> = OnceLock::new();
    C.get_or_init(SrtCounters::default)
}

impl SrtCounters {
    fn refused(&self, code: RejectCode) {
        if let Some(i) = REASONS.iter().position(|r| *r == code) {
            self.refused[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The `/metrics` lines.
    pub fn write_metrics(&self, o: &mut String) {
        use std::fmt::Write as _;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut line = |name: &str, help: &str, kind: &str, v: u64| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
        };
        line(
            "tern_srt_publishers",
            "SRT publishers connected.",
            "gauge",
            self.publishers.load(Ordering::Relaxed) as u64,
        );
        line(
            "tern_srt_accepted_total",
            "SRT callers accepted.",
            "counter",
            l(&self.accepted),
        );
        line(
            "tern_srt_handshake_timeouts_total",
            "SRT handshakes dropped unfinished after 5 s.",
            "counter",
            l(&self.handshake_timeouts),
        );
        line(
            "tern_srt_limited_total",
            "SRT handshakes dropped by limits.srt_connections_per_ip.",
            "counter",
            l(&self.limited),
        );
        line(
            "tern_srt_stray_total",
            "SRT datagrams that did not parse or belonged to no caller.",
            "counter",
            l(&self.stray),
        );
        line(
            "tern_srt_queue_drops_total",
            "SRT messages dropped: a publisher's queue was full.",
            "counter",
            l(&self.queue_drops),
        );
        line(
            "tern_srt_library_panics_total",
            "SRT inputs the SRT library panicked on (peer dropped).",
            "counter",
            l(&self.panics),
        );
        line(
            "tern_srt_packets_lost_total",
            "SRT data packets found missing (sum over publishers).",
            "counter",
            l(&self.lost),
        );
        line(
            "tern_srt_packets_retransmitted_total",
            "SRT retransmitted data packets received.",
            "counter",
            l(&self.retransmitted),
        );
        line(
            "tern_srt_packets_dropped_total",
            "SRT data packets given up as too late.",
            "counter",
            l(&self.dropped),
        );
        let _ = writeln!(
            o,
            "# HELP tern_srt_refused_total SRT callers refused at the handshake, by reject reason.\n# TYPE tern_srt_refused_total counter"
        );
        for (i, r) in REASONS.iter().enumerate() {
            let _ = writeln!(
                o,
                "tern_srt_refused_total{{reason=\"{}\"}} {}",
                r.name(),
                self.refused[i].load(Ordering::Relaxed)
            );
        }
    }
}

/// A session layer refusal as SRT tells it: the reject reason the caller gets.
pub fn reject_code(r: &Refusal) -> RejectCode {
    match r {
        Refusal::BadName(_) | Refusal::NotFound(_) => RejectCode::NotFound,
        Refusal::Unauthorized { .. } => RejectCode::Unauthorized,
        Refusal::Denied { status: 401, .. } => RejectCode::Unauthorized,
        Refusal::Denied { status: 503, .. } => RejectCode::Unavailable,
        Refusal::Denied { .. } => RejectCode::Forbidden,
        Refusal::TooMany(_) | Refusal::Full(_) | Refusal::Capacity => RejectCode::Overload,
        Refusal::PublishedElsewhere { .. } | Refusal::Busy(_) => RejectCode::Conflict,
        Refusal::Unavailable(_) => RejectCode::Unavailable,
        _ => RejectCode::BadRequest,
    }
}

/// The reject reason of a stream ID that does not parse.
fn stream_id_code(e: &StreamIdError) -> RejectCode {
    match e {
        StreamIdError::Mode(_) => RejectCode::BadMode,
        _ => RejectCode::BadRequest,
    }
}

/// One caller the listener knows, from its request to its close.
struct Conn {
    peer: SocketAddr,
    tx: Sender<Inbound>,
    stats: Arc<Mutex<SrtStats>>,
    open: bool,
}

/// The running listener; [`SrtServer::stop`] ends it and its publishers.
pub struct SrtServer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// The bound UDP address.
    pub addr: SocketAddr,
}

impl SrtServer {
    /// Binds `bind` (UDP) and starts the listener thread; `per_ip` counts callers per
    /// address (`limits.srt_connections_per_ip`).
    pub fn spawn(
        bind: SocketAddr,
        core: Arc<Core>,
        max_payload: usize,
        per_ip: Arc<PerAddress>,
    ) -> io::Result<SrtServer> {
        let cfg = core.config.clone();
        let latency_for = Box::new(move |sid: &str| {
            let ms = StreamId::parse(sid)
                .ok()
                .and_then(|id| cfg.app(&id.app).map(|a| a.srt_latency_ms))
                .unwrap_or(crate::config::DEFAULT_SRT_LATENCY_MS);
            Duration::from_millis(ms)
        });
        let default = Duration::from_millis(crate::config::DEFAULT_SRT_LATENCY_MS);
        let transport = ProtocolTransport::bind(bind, per_ip, default, latency_for)?;
        let addr = transport.local_addr();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("SrtListener".into())
            .spawn(move || Listener::new(Box::new(transport), core, max_payload).run(&flag))?;
        Ok(SrtServer {
            stop,
            thread: Some(thread),
            addr,
        })
    }

    /// Stops the listener: every connection is closed and its publisher ended.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for SrtServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

struct Listener {
    transport: Box<dyn Transport>,
    core: Arc<Core>,
    max_payload: usize,
    conns: HashMap<ConnId, Conn>,
    control_tx: Sender<Control>,
    control_rx: Receiver<Control>,
    threads: Vec<JoinHandle<()>>,
}

impl Listener {
    fn new(transport: Box<dyn Transport>, core: Arc<Core>, max_payload: usize) -> Self {
        let (control_tx, control_rx) = crossbeam_channel::unbounded();
        Listener {
            transport,
            core,
            max_payload,
            conns: HashMap::new(),
            control_tx,
            control_rx,
            threads: Vec::new(),
        }
    }

    fn run(mut self, stop: &AtomicBool) {
        let mut events = Vec::new();
        let mut last_stats = Instant::now();
        let c = counters();
        while !stop.load(Ordering::Relaxed) {
            if let Err(e) = self.transport.poll(TICK, &mut events) {
                warn!("srt: socket error: {e}");
                std::thread::sleep(TICK);
            }
            for e in events.drain(..) {
                match e {
                    TransportEvent::Request(r) => self.request(r),
                    TransportEvent::Data { conn, data } => {
                        if let Some(x) = self.conns.get(&conn)
                            && let Err(TrySendError::Full(_)) = x.tx.try_send(Inbound::Data(data))
                        {
                            c.queue_drops.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    TransportEvent::Closed { conn, why } => {
                        if let Some(x) = self.conns.remove(&conn) {
                            let _ = x.tx.send(Inbound::Closed(why));
                            if !x.open {
                                info!("srt {}: handshake ended: {why}", x.peer);
                            }
                        }
                    }
                }
            }
            while let Ok(m) = self.control_rx.try_recv() {
                self.control(m);
            }
            if last_stats.elapsed() >= STATS_EVERY {
                last_stats = Instant::now();
                self.refresh_stats();
            }
        }
        // Shutdown: every caller closed, every publisher thread told and joined.
        let conns: Vec<ConnId> = self.conns.keys().copied().collect();
        for id in conns {
            self.transport.close(id);
            if let Some(x) = self.conns.remove(&id) {
                let _ = x.tx.send(Inbound::Closed("server shutting down"));
            }
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }

    fn refresh_stats(&mut self) {
        let c = counters();
        let t = self.transport.counts();
        c.handshake_timeouts
            .store(t.handshake_timeouts, Ordering::Relaxed);
        c.limited.store(t.limited, Ordering::Relaxed);
        c.stray.store(t.stray, Ordering::Relaxed);
        c.panics.store(t.panics, Ordering::Relaxed);
        for (id, x) in &self.conns {
            if let (true, Some(s)) = (x.open, self.transport.stats(*id))
                && let Ok(mut m) = x.stats.lock()
            {
                *m = s;
            }
        }
        self.threads.retain(|t| !t.is_finished());
    }

    fn refuse(&mut self, conn: ConnId, peer: SocketAddr, code: RejectCode, why: &str) {
        warn!(
            "srt {peer}: refused ({} {}): {why}",
            code.libsrt(),
            code.name()
        );
        counters().refused(code);
        self.transport.reject(conn, code);
    }

    /// A caller at the access decision: its stream ID and passphrase here, the rest on
    /// its own thread.
    fn request(&mut self, r: transport::Request) {
        let id = match StreamId::parse(&r.stream_id) {
            Ok(id) => id,
            Err(e) => {
                let why = format!("stream ID {:?}: {e}", r.stream_id);
                return self.refuse(r.conn, r.peer, stream_id_code(&e), &why);
            }
        };
        if let Some(app) = self.core.config.app(&id.app) {
            let pass = app.srt_passphrase.as_deref();
            if let Err(code) = self.transport.check_key(r.conn, pass) {
                let why = match (code, pass, r.key_len) {
                    (RejectCode::Unsecure, Some(_), None) => format!(
                        "app {} needs its srt_passphrase and the caller sent none",
                        id.app
                    ),
                    (RejectCode::Unsecure, None, Some(_)) => format!(
                        "the caller encrypts and app {} has no srt_passphrase",
                        id.app
                    ),
                    _ => format!("wrong passphrase for app {}", id.app),
                };
                return self.refuse(r.conn, r.peer, code, &why);
            }
        }
        if self.threads.len() >= MAX_PUBLISHERS {
            return self.refuse(
                r.conn,
                r.peer,
                RejectCode::Overload,
                "too many SRT publishers",
            );
        }
        let (tx, rx) = crossbeam_channel::bounded(QUEUE);
        let stats = Arc::new(Mutex::new(SrtStats::default()));
        let job = publisher::Job {
            conn: r.conn,
            peer: r.peer,
            id,
            key_len: r.key_len,
            core: self.core.clone(),
            max_payload: self.max_payload,
            inbound: rx,
            control: self.control_tx.clone(),
            stats: stats.clone(),
        };
        match std::thread::Builder::new()
            .name("SrtSession".into())
            .spawn(move || publisher::run(job))
        {
            Ok(t) => {
                self.threads.push(t);
                self.conns.insert(
                    r.conn,
                    Conn {
                        peer: r.peer,
                        tx,
                        stats,
                        open: false,
                    },
                );
            }
            Err(e) => {
                let why = format!("cannot start a thread: {e}");
                self.refuse(r.conn, r.peer, RejectCode::Internal, &why);
            }
        }
    }

    fn control(&mut self, m: Control) {
        match m {
            Control::Accept(conn, pass) => {
                let Some(x) = self.conns.get_mut(&conn) else {
                    return;
                };
                match self.transport.accept(conn, pass.as_deref()) {
                    Ok(()) => {
                        x.open = true;
                        counters().accepted.fetch_add(1, Ordering::Relaxed);
                        let _ = x.tx.send(Inbound::Open);
                    }
                    Err(code) => {
                        counters().refused(code);
                        let peer = x.peer;
                        if let Some(x) = self.conns.remove(&conn) {
                            let _ =
                                x.tx.send(Inbound::Closed("its keying material was refused"));
                        }
                        warn!(
                            "srt {peer}: refused ({} {}) at accept",
                            code.libsrt(),
                            code.name()
                        );
                    }
                }
            }
            Control::Reject(conn, code) => {
                counters().refused(code);
                self.transport.reject(conn, code);
                self.conns.remove(&conn);
            }
            Control::Close(conn) => {
                self.transport.close(conn);
                self.conns.remove(&conn);
            }
        }
    }
}

//! SRT (`--srt ADDR`, `[server] srt`): encoders (OBS, vMix, ffmpeg, hardware) call tern in
//! SRT caller mode and publish MPEG-TS; readers (vMix, OBS media sources, decoders) call it
//! with `m=request` and get a stream as MPEG-TS.
//!
//! | file | what |
//! | --- | --- |
//! | `mod.rs` | the listener thread (`SrtListener`): stream IDs, the app's passphrase, one publisher thread per accepted caller, the metrics |
//! | `transport.rs` | [`transport::Transport`], the SRT endpoint behind a trait, and its implementation on `srt-protocol` |
//! | `caller.rs` | [`caller::SrtCaller`], a blocking SRT caller sending a live MPEG-TS stream to a listener (restreaming), on `srt-protocol`'s `Connect` and `DuplexConnection` |
//! | `link.rs` | the messages between the listener and the publisher threads, the counters, [`reject_code`] |
//! | `publisher.rs` | one publisher's thread (`SrtSession`): the session layer, the engine slot, MPEG-TS to the engine |
//! | `reader.rs` | one reader's thread (`SrtReader`): the session layer as for a viewer, the stream's outlet (shared with forwards) as MPEG-TS, sent by the listener |
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
//! [`transport::Transport`] is the seam a libsrt binding would implement instead. The crate
//! comes from `vendor/srt-protocol`, without two of its dependencies (regex, derive_more
//! 0.99) that only cost build time; its `PATCHES.md` lists the changes, none in the protocol.
//!
//! # A caller's way in
//!
//! 1. First packet from an address: it must be a handshake induction, and the address must
//!    have room under `limits.srt_connections_per_ip` (else dropped and counted).
//! 2. Conclusion: the stream ID must parse ([`tern_proto::srt_stream_id`]), in any of the
//!    forms; `m=request` and `read:` make a reader (`reader.rs`), any other mode is refused
//!    (`SRT_REJX_BAD_MODE`); the app's `srt_latency_ms`
//!    is applied; the app's `srt_passphrase` must open the caller's keying material
//!    (`SRT_REJ_BADSECRET`, or `SRT_REJ_UNSECURE` when only one side encrypts).
//! 3. The publisher's thread asks the session layer ([`crate::session`]): name and dynamic
//!    streams, app token (`token=` or `s=`, MediaMTX's password as the app token), JWT, the
//!    admission webhook with `"protocol": "srt"`, the cluster claim, then the engine's slot;
//!    a [`Refusal`] becomes one SRT reject reason ([`reject_code`]) and a log line.
//! 4. Accepted: its TS goes through [`tern_rtc::ts_publisher::TsPublisher`] to the engine,
//!    as an RTMP publisher's FLV does; the engine's publisher timeout, kicks and the
//!    stream's grace apply alike.

pub mod caller;
mod link;
mod publisher;
mod reader;
pub mod transport;

use link::{Control, Inbound};
pub use link::{REASONS, SrtCounters, reject_code};

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use tern_proto::srt_stream_id::{Mode, StreamId, StreamIdError};
use tracing::{info, warn};

use crate::limits::PerAddress;
use crate::session::Core;
use crate::start::StartError;
use transport::{ConnId, ProtocolTransport, RejectCode, SrtStats, Transport, TransportEvent};

/// Most publisher threads at once (each holds a TS demuxer and the AAC transcoder).
pub const MAX_PUBLISHERS: usize = 64;
/// Most reader threads at once (each holds a queue of the stream's frames and a TS writer).
pub const MAX_READERS: usize = 256;
/// Messages queued from the listener to one publisher's thread (~1.5 s at 8 Mbit/s); past
/// it messages are dropped and counted (the thread is stuck, SRT cannot push back).
const QUEUE: usize = 1024;
/// How often the listener thread checks for a stop and control messages.
const TICK: Duration = Duration::from_millis(10);
/// How often connection figures are refreshed for the publisher threads.
const STATS_EVERY: Duration = Duration::from_secs(1);

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
        let cfg = core.config().clone();
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

/// Starts SRT ingest on `server.srt` (`--srt`), if set; callers per client address are
/// capped by `limits.srt_connections_per_ip`.
pub fn start(core: &Arc<Core>) -> Result<Option<SrtServer>, StartError> {
    let cfg = core.config();
    let Some(addr) = cfg.server.srt else {
        return Ok(None);
    };
    let per_ip = PerAddress::new(
        "SRT connections",
        cfg.limits.srt_connections_per_ip,
        &cfg.limits.exempt_ranges(),
    );
    core.limiters
        .register(crate::limits::LimitKey::SrtConnections, &per_ip);
    SrtServer::spawn(addr, core.clone(), cfg.tunables.max_payload, per_ip)
        .map(Some)
        .map_err(StartError::bind("SRT", addr))
}

impl Drop for SrtServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

struct Listener {
    transport: Box<dyn Transport>,
    core: Arc<Core>,
    /// This server's SRT counters (registered with its `/metrics`).
    counters: Arc<SrtCounters>,
    max_payload: usize,
    conns: HashMap<ConnId, Conn>,
    control_tx: Sender<Control>,
    control_rx: Receiver<Control>,
    threads: Vec<JoinHandle<()>>,
    /// Readers started, ever (their ids in the viewer snapshots).
    serial: u64,
}

impl Listener {
    fn new(transport: Box<dyn Transport>, core: Arc<Core>, max_payload: usize) -> Self {
        let (control_tx, control_rx) = crossbeam_channel::unbounded();
        let counters = Arc::new(SrtCounters::default());
        core.exposed.add(counters.clone());
        Listener {
            transport,
            counters,
            core,
            max_payload,
            conns: HashMap::new(),
            control_tx,
            control_rx,
            threads: Vec::new(),
            serial: 0,
        }
    }

    fn run(mut self, stop: &AtomicBool) {
        let mut events = Vec::new();
        let mut last_stats = Instant::now();
        let c = self.counters.clone();
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
        let c = self.counters.clone();
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
        self.counters.refused(code);
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
        if let Some(app) = self.core.config().app(&id.app) {
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
        let reading = id.mode == Mode::Request;
        if !reading && self.counters.publishers.load(Ordering::Relaxed) >= MAX_PUBLISHERS {
            return self.refuse(
                r.conn,
                r.peer,
                RejectCode::Overload,
                "too many SRT publishers",
            );
        }
        if self.threads.len() >= MAX_PUBLISHERS + MAX_READERS {
            return self.refuse(r.conn, r.peer, RejectCode::Overload, "too many SRT callers");
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
            counters: self.counters.clone(),
        };
        self.serial += 1;
        let serial = self.serial;
        let spawned = if reading {
            std::thread::Builder::new()
                .name("SrtReader".into())
                .spawn(move || reader::run(job, serial))
        } else {
            std::thread::Builder::new()
                .name("SrtSession".into())
                .spawn(move || publisher::run(job))
        };
        match spawned {
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
                        self.counters.accepted.fetch_add(1, Ordering::Relaxed);
                        let _ = x.tx.send(Inbound::Open);
                    }
                    Err(code) => {
                        self.counters.refused(code);
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
                self.counters.refused(code);
                self.transport.reject(conn, code);
                self.conns.remove(&conn);
            }
            Control::Close(conn) => {
                self.transport.close(conn);
                self.conns.remove(&conn);
            }
            Control::Send(conn, data) => {
                self.counters.pending.fetch_sub(1, Ordering::Relaxed);
                if self.transport.send_data(conn, data) {
                    self.counters
                        .reader_messages
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::LimitReached;
    use crate::session::Refusal;

    /// Each refusal maps once to the reject reason an encoder's log shows (libsrt's
    /// numbers), and each stream ID rule to its own.
    #[test]
    fn refusals_map_to_srt_reject_reasons() {
        let denied = |status: u16| Refusal::Denied {
            status,
            reason: "no".into(),
        };
        let cases = [
            (Refusal::BadName("a b".into()), 1400),
            (Refusal::NotFound("x/y".into()), 1404),
            (Refusal::Unauthorized { app: "a".into() }, 1401),
            (denied(401), 1401),
            (denied(403), 1403),
            (denied(503), 1503),
            (Refusal::Busy("x/y".into()), 1409),
            (
                Refusal::PublishedElsewhere {
                    key: "x/y".into(),
                    node: "n2".into(),
                },
                1409,
            ),
            (
                Refusal::TooMany(LimitReached {
                    what: "SRT connections",
                    max: 8,
                }),
                1402,
            ),
            (Refusal::Capacity, 1402),
            (Refusal::Unavailable("stopping"), 1503),
        ];
        for (r, code) in cases {
            assert_eq!(reject_code(&r).libsrt(), code, "{r:?}");
        }
        assert_eq!(
            stream_id_code(&StreamId::parse("#!::r=a/b,m=bidirectional").expect_err("mode")),
            RejectCode::BadMode
        );
        assert_eq!(
            stream_id_code(&StreamId::parse("nope").expect_err("resource")),
            RejectCode::BadRequest
        );
        // Every reason has its own metric label.
        let names: std::collections::BTreeSet<&str> = REASONS.iter().map(|r| r.name()).collect();
        assert_eq!(names.len(), REASONS.len());
    }
}

//! RTMP ingest over TCP: the listener (`--rtmp ADDR`, thread `RtmpListener`) and one thread
//! per connection (`RtmpSession`); and RTMPS, the same over TLS (`--rtmps ADDR`, thread
//! `RtmpsListener`), with the HTTPS certificate (`server.tls_cert`, reloaded as HTTPS's is).
//! A TLS connection runs rustls's blocking stream over the same socket, on the same thread:
//! its handshake counts against the time allowed to publish.
//!
//! A connection runs [`tern_rtc::rtmp::RtmpPublisher`] (handshake, chunks, commands, H264
//! packetization, AAC → Opus) on its own thread, so transcoding never stalls the media
//! engine. It takes its stream with `Publish::attach` ([`crate::feed`]) and its events go
//! through a [`FrameSink`]: packets to the engine in one batch per socket read, through the
//! same [`crate::media::ingest::Ingest`] slot as a WHIP publisher's (one publisher per
//! stream, keyframe wait, sequence/timestamp rewriting, live and gone), samples to LL-HLS
//! and recordings while they want the stream.
//!
//! Mapping: the RTMP application (`connect`'s `app`, query stripped) and the publishing
//! name (the stream key, query stripped) name the stream `{app}/{stream}`, which must be
//! declared in the config. If the app has a `token`, it must come as a `?token=` query on
//! the stream key (`cam?token=T`), on the application (`rtmp://host/live?token=T/cam`), or
//! on the tcUrl. A refused publish gets an `onStatus` error (`NetStream.Publish.BadName`
//! for an unknown stream or one that already has a publisher,
//! `NetStream.Publish.Unauthorized` for a missing or wrong token) and the connection is
//! closed; every close is logged with its reason. A malformed stream closes only its own
//! connection.
//!
//! Renditions (`[app] renditions`): the publisher makes lower video layers on threads of
//! its own (`RtmpRendition`, see [`tern_rtc::renditions`]), whose packets come to the engine
//! in [`FrameCommand::Media`] like the connection's; the stream's RIDs go with
//! its feed. A viewer's keyframe request for a layer reaches the connection as a
//! bit of its keyframe flags.
//!
//! Memory: each connection's heap is booked in the `rtmp_ingest` pool (`GET /v1/memory`),
//! measured on its own thread with the counting allocator (the sink's `Ledger`).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tern_pool::CountingAlloc;
use tern_proto::codec::VideoCodec;
use tern_rtc::av::AvEvent;
use tern_rtc::rtmp::{RtmpEvent, RtmpPublisher, TranscodeMode};
use tracing::{info, warn};

use crate::config::{AppConfig, TranscodeSetting};
use crate::feed::{Feed, FrameSink, MEDIA_STALL, PublisherSlot};
use crate::limits::PerAddress;
use crate::media::{NtpClock, Source};
use crate::session::{Core, Credentials, Protocol, PublishAsk, Refusal};
use crate::start::StartError;

/// Most RTMP connections at once (each is a thread and up to a few MiB of buffers).
/// Publishers are one per stream; the rest of the room is for refusals in flight.
pub const MAX_CONNECTIONS: usize = 64;
/// Time allowed from accept to an accepted `publish`.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(15);
/// A publisher that sends nothing for this long is dropped (encoders send ~50 messages/s).
const IDLE_TIMEOUT: Duration = Duration::from_secs(20);
/// Socket read timeout: how often a connection checks for shutdown, kicks and timeouts.
const TICK: Duration = Duration::from_millis(200);
/// How long a closing connection reads (and discards) what the encoder still sends after
/// our FIN, so that the close is an orderly one (closing with unread data sends a reset).
const CLOSE_DRAIN: Duration = Duration::from_millis(500);
/// How long [`RtmpServer::stop`] waits for connections to close.
const CLOSE_WAIT: Duration = Duration::from_secs(1);
/// How often the listener checks for shutdown while no connection arrives.
const ACCEPT_TICK: Duration = Duration::from_millis(50);

/// The running listener; [`RtmpServer::stop`] ends it and its connections.
pub struct RtmpServer {
    stop: Arc<AtomicBool>,
    /// Connections open (each on its own thread).
    active: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
    /// The bound address.
    pub addr: SocketAddr,
}

impl RtmpServer {
    /// Binds `bind` and starts the listener thread; `per_ip` caps the connections of each
    /// client address.
    pub fn spawn(
        bind: SocketAddr,
        state: Arc<Core>,
        max_payload: usize,
        per_ip: Arc<PerAddress>,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> io::Result<RtmpServer> {
        let listener = TcpListener::bind(bind)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let active = Arc::new(AtomicUsize::new(0));
        let (flag, count) = (stop.clone(), active.clone());
        let name = if tls.is_some() {
            "RtmpsListener"
        } else {
            "RtmpListener"
        };
        let lx = Listening {
            listener,
            state,
            max_payload,
            per_ip,
            stop: flag,
            active: count,
            tls,
        };
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || listen(lx))?;
        Ok(RtmpServer {
            stop,
            active,
            thread: Some(thread),
            addr,
        })
    }

    /// Stops accepting, tells every connection to close (within one [`TICK`]) and waits up
    /// to [`CLOSE_WAIT`] for them to finish their clean close.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let deadline = Instant::now() + CLOSE_WAIT;
        while self.active.load(Ordering::Relaxed) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Starts RTMP ingest as the configuration says (`server.rtmp`, `--rtmp`): on its address,
/// off (`none`), or, when not configured, on [`crate::config::DEFAULT_RTMP`] if that port is
/// free (else off, with a warning). Connections per client address are capped by
/// `limits.rtmp_connections_per_ip`.
pub fn start(
    core: &Arc<Core>,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> Result<RtmpServers, StartError> {
    let cfg = core.config();
    let per_ip = PerAddress::new(
        "RTMP connections",
        cfg.limits.rtmp_connections_per_ip,
        &cfg.limits.exempt_ranges(),
    );
    core.limiters
        .register(crate::limits::LimitKey::RtmpConnections, &per_ip);
    let spawn = |addr, tls| {
        RtmpServer::spawn(
            addr,
            core.clone(),
            cfg.tunables.max_payload,
            per_ip.clone(),
            tls,
        )
    };
    let tls = match (cfg.server.rtmps, tls) {
        (Some(addr), Some(tls)) => {
            Some(spawn(addr, Some(tls)).map_err(StartError::bind("RTMPS", addr))?)
        }
        _ => None,
    };
    let plain = match cfg.server.rtmp {
        Some(Some(addr)) => spawn(addr, None)
            .map(Some)
            .map_err(StartError::bind("RTMP", addr)),
        Some(None) => Ok(None),
        // Not configured: the default port if it is free.
        None => {
            let addr: SocketAddr = crate::config::DEFAULT_RTMP
                .parse()
                .expect("a valid address");
            match spawn(addr, None) {
                Ok(r) => Ok(Some(r)),
                Err(e) => {
                    warn!(
                        "RTMP ingest is off: cannot bind the default {addr} ({e}); set server.rtmp or --rtmp"
                    );
                    Ok(None)
                }
            }
        }
    }?;
    Ok(RtmpServers { plain, tls })
}

/// RTMP's listeners: plain (`server.rtmp`) and over TLS (`server.rtmps`), either off.
pub struct RtmpServers {
    plain: Option<RtmpServer>,
    tls: Option<RtmpServer>,
}

impl RtmpServers {
    /// The plain listener's address, if it is on.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.plain.as_ref().map(|r| r.addr)
    }

    /// The RTMPS listener's address, if it is on.
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls.as_ref().map(|r| r.addr)
    }

    /// Stops both (see [`RtmpServer::stop`]).
    pub fn stop(self) {
        for r in [self.tls, self.plain].into_iter().flatten() {
            r.stop();
        }
    }
}

/// What a listener thread runs with.
struct Listening {
    listener: TcpListener,
    state: Arc<Core>,
    max_payload: usize,
    per_ip: Arc<PerAddress>,
    stop: Arc<AtomicBool>,
    active: Arc<AtomicUsize>,
    /// RTMPS: each connection is TLS with this configuration.
    tls: Option<Arc<rustls::ServerConfig>>,
}

/// A connection's socket: plain, or TLS over it (rustls's blocking stream; the socket's
/// timeouts apply to both).
enum Sock {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ServerConnection, TcpStream>>),
}

impl Sock {
    /// The TCP socket under it.
    fn tcp(&self) -> &TcpStream {
        match self {
            Sock::Plain(s) => s,
            Sock::Tls(t) => &t.sock,
        }
    }

    /// Ends TLS with close_notify (plain: nothing).
    fn close_notify(&mut self) {
        if let Sock::Tls(t) = self {
            t.conn.send_close_notify();
            let _ = t.flush();
        }
    }
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Plain(s) => s.read(buf),
            Sock::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Plain(s) => s.write(buf),
            Sock::Tls(t) => t.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sock::Plain(s) => s.flush(),
            Sock::Tls(t) => t.flush(),
        }
    }
}

fn listen(lx: Listening) {
    let Listening {
        listener,
        state,
        max_payload,
        per_ip,
        stop,
        active,
        tls,
    } = lx;
    let what = if tls.is_some() { "rtmps" } else { "rtmp" };
    let clock = NtpClock::now();
    while !stop.load(Ordering::Relaxed) {
        let (sock, peer) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(ACCEPT_TICK);
                continue;
            }
            Err(e) => {
                warn!("{what} accept: {e}");
                std::thread::sleep(ACCEPT_TICK);
                continue;
            }
        };
        if active.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
            warn!("{what} {peer}: refused, {MAX_CONNECTIONS} connections already open");
            continue;
        }
        let permit = match per_ip.acquire(peer.ip()) {
            Ok(p) => p,
            Err(e) => {
                warn!("{what} {peer}: refused: {e}");
                continue;
            }
        };
        let sock = match &tls {
            None => Sock::Plain(sock),
            Some(cfg) => match rustls::ServerConnection::new(cfg.clone()) {
                Ok(c) => Sock::Tls(Box::new(rustls::StreamOwned::new(c, sock))),
                Err(e) => {
                    warn!("{what} {peer}: refused: TLS: {e}");
                    continue;
                }
            },
        };
        active.fetch_add(1, Ordering::Relaxed);
        let (st, stop, active2) = (state.clone(), stop.clone(), active.clone());
        let spawned = std::thread::Builder::new()
            .name("RtmpSession".into())
            .spawn(move || {
                let mut c = Connection {
                    sock,
                    peer,
                    st,
                    clock,
                    stop,
                    slot: None,
                    keyframe: Arc::new(AtomicU8::new(0)),
                };
                match c.run(max_payload) {
                    Ok(why) => info!("{what} {peer}: connection closed: {why}"),
                    Err(why) => warn!("{what} {peer}: connection closed: {why}"),
                }
                // The publisher slot goes first (dropping the connection), the socket
                // (a second handle to it) after its clean close.
                c.sock.close_notify();
                let sock = c.sock.tcp().try_clone();
                drop(c);
                if let Ok(sock) = sock {
                    close_cleanly(&sock);
                }
                drop(permit);
                active2.fetch_sub(1, Ordering::Relaxed);
            });
        if let Err(e) = spawned {
            active.fetch_sub(1, Ordering::Relaxed);
            warn!("{what} {peer}: cannot start a thread: {e}");
        }
    }
}

/// Ends a connection with a FIN rather than a reset: shut our side, then read and discard
/// until the encoder closes its side or [`CLOSE_DRAIN`] passes.
fn close_cleanly(sock: &TcpStream) {
    if sock.shutdown(std::net::Shutdown::Write).is_err() {
        return;
    }
    let deadline = Instant::now() + CLOSE_DRAIN;
    let _ = sock.set_read_timeout(Some(Duration::from_millis(50)));
    let mut buf = [0u8; 4096];
    let mut r = sock;
    while Instant::now() < deadline {
        match r.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return,
        }
    }
}

/// One RTMP connection. Dropping it ends its publisher in the engine (its slot's `Drop`),
/// whatever the path out (error, close, kick, even a panic).
struct Connection {
    sock: Sock,
    peer: SocketAddr,
    st: Arc<Core>,
    clock: NtpClock,
    stop: Arc<AtomicBool>,
    /// Our publisher's slot, once `publish` was granted.
    slot: Option<PublisherSlot>,
    /// Bit `l` set by the engine when a viewer asks for a keyframe of video layer `l`.
    keyframe: Arc<AtomicU8>,
}

/// The `?token=` value of a URL or name, if any.
fn query_token(s: &str) -> Option<&str> {
    let (_, q) = s.split_once('?')?;
    q.split('&').find_map(|kv| kv.strip_prefix("token="))
}

/// The part before any `?query`, without slashes around it.
fn strip_query(s: &str) -> &str {
    s.split('?').next().unwrap_or_default().trim_matches('/')
}

impl Connection {
    /// Runs until the connection ends: `Ok` for an orderly end, `Err` for a refusal, a
    /// protocol error, a timeout or a socket error; the text is the reason.
    fn run(&mut self, max_payload: usize) -> Result<String, String> {
        let tcp = self.sock.tcp();
        tcp.set_nodelay(true).map_err(|e| e.to_string())?;
        tcp.set_read_timeout(Some(TICK))
            .map_err(|e| e.to_string())?;
        tcp.set_write_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        let mut sink = FrameSink::new(&self.st.engine, &self.st.tap, &self.st.pools.rtmp);
        let mut p = RtmpPublisher::new(rand::random(), max_payload);
        let mut buf = vec![0u8; 64 * 1024];
        let start = Instant::now();
        let mut last_data = start;
        let mut app = String::new();
        let mut tc_url = None;
        let mut events = Vec::new();
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return Ok("server shutting down".into());
            }
            if self.slot.as_ref().is_some_and(PublisherSlot::closed) {
                return Ok("publisher removed by the server".into());
            }
            let now = Instant::now();
            if self.slot.is_none() && now - start > PUBLISH_TIMEOUT {
                return Err(format!("no publish within {PUBLISH_TIMEOUT:?}"));
            }
            if now - last_data > IDLE_TIMEOUT {
                return Err(format!("nothing received for {IDLE_TIMEOUT:?}"));
            }
            sink.tick(p.media(), now);
            let wanted = self.keyframe.swap(0, Ordering::Relaxed);
            for layer in (0..8u8).filter(|l| wanted & 1 << l != 0) {
                p.request_layer_keyframe(layer);
            }
            let n = match self.sock.read(&mut buf) {
                Ok(0) => return Ok("closed by the client".into()),
                Ok(n) => n,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) =>
                {
                    continue;
                }
                Err(e) => return Err(format!("read: {e}")),
            };
            last_data = Instant::now();
            let ntp = self.clock.ntp(last_data);
            let res = p.receive(ntp, &buf[..n], &mut |e| events.push(e));
            let mut end = None;
            for e in events.drain(..) {
                match e {
                    RtmpEvent::Connect { app: a, tc_url: t } => {
                        app = a;
                        tc_url = t;
                    }
                    RtmpEvent::Publish { name } => {
                        // Excluded from the ledger: the slot and the HTTP side's map entry
                        // it allocates belong to the engine and the API.
                        let outside = CountingAlloc::thread_net_bytes();
                        let publish = self.publish(&app, tc_url.as_deref(), &name);
                        sink.skip(CountingAlloc::thread_net_bytes() - outside);
                        match publish {
                            Ok(key) => {
                                p.accept_publish().map_err(|e| e.to_string())?;
                                info!("rtmp {}: publishing {key}", self.peer);
                                let cfg = self.st.config();
                                let app_config = cfg.app(strip_query(&app));
                                let mode =
                                    app_config.map_or(TranscodeSetting::Auto, |a| a.transcode);
                                if let Some(a) = app_config {
                                    self.start_renditions(&mut p, a, &key);
                                }
                                p.set_transcode(match mode {
                                    TranscodeSetting::Auto => TranscodeMode::Auto,
                                    TranscodeSetting::Never => TranscodeMode::Never,
                                });
                                if let Some(slot) = &self.slot {
                                    sink.attach(slot.id(), &key, mode);
                                }
                            }
                            Err(refusal) => {
                                let (code, why) = netstream(&refusal);
                                p.reject_publish(code, &why).map_err(|e| e.to_string())?;
                                end = Some(Err(format!("publish refused ({code}): {why}")));
                            }
                        }
                    }
                    RtmpEvent::Unpublish => end = Some(Ok("the client unpublished".into())),
                    RtmpEvent::Packet(pk) => sink.handle(p.media(), AvEvent::Packet(pk)),
                    RtmpEvent::Video(n) => sink.handle(p.media(), AvEvent::Video(n)),
                    RtmpEvent::Sample(s) => sink.handle(p.media(), AvEvent::Sample(s)),
                }
            }
            let out = p.take_output();
            if !out.is_empty() {
                self.sock
                    .write_all(&out)
                    .map_err(|e| format!("write: {e}"))?;
            }
            sink.flush()
                .map_err(|e| format!("{e} for {MEDIA_STALL:?}: closing the publisher"))?;
            if let Err(e) = res {
                return Err(format!("malformed RTMP stream: {e}"));
            }
            if let Some(end) = end {
                return end;
            }
        }
    }

    /// Starts the app's renditions (if it has any) on the publisher that just took its slot.
    fn start_renditions(&self, p: &mut RtmpPublisher, app: &AppConfig, key: &str) {
        if let Some(slot) = &self.slot {
            crate::feed::start_renditions(&self.st.engine, p.media(), slot.id(), app, key);
        }
    }

    /// Asks the session layer for the stream (name, token, admission) and attaches the
    /// publisher (cluster claim, the stream's slot).
    fn publish(&mut self, app: &str, tc_url: Option<&str>, name: &str) -> Result<String, Refusal> {
        let app_name = strip_query(app);
        let stream = strip_query(name);
        // The token comes as `?token=` on the stream key, the application or the tcUrl.
        let token = [Some(name), Some(app), tc_url]
            .into_iter()
            .flatten()
            .find_map(query_token)
            .map(str::to_string);
        let ask = PublishAsk {
            app: app_name.to_string(),
            stream: stream.to_string(),
            protocol: Protocol::Rtmp,
            client: self.peer,
            credentials: Credentials {
                app_token: token.clone(),
                token,
                query: name.split_once('?').map_or("", |(_, q)| q).to_string(),
            },
        };
        // This connection's own thread waits; the media threads never do.
        let rt = self
            .st
            .runtime()
            .ok_or(Refusal::Unavailable("admission is not running"))?;
        let publish = rt.block_on(self.st.begin_publish(ask))?;
        let key = publish.key().to_string();
        let rids = self
            .st
            .config()
            .app(app_name)
            .map_or_else(Vec::new, |a| a.layer_rids());
        let feed = Feed::Frames {
            source: Source::Rtmp,
            codec: VideoCodec::H264,
            rids,
            keyframe: self.keyframe.clone(),
        };
        self.slot = Some(publish.attach_blocking(&self.st, feed)?);
        Ok(key)
    }
}

/// A session layer refusal as RTMP tells it: the `onStatus` code and description.
fn netstream(r: &Refusal) -> (&'static str, String) {
    let code = match r {
        Refusal::BadName(_)
        | Refusal::NotFound(_)
        | Refusal::PublishedElsewhere { .. }
        | Refusal::Busy(_)
        | Refusal::Source(_) => "NetStream.Publish.BadName",
        Refusal::Unauthorized { .. } | Refusal::Denied { .. } => "NetStream.Publish.Unauthorized",
        _ => "NetStream.Publish.Failed",
    };
    (code, r.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_tokens() {
        assert_eq!(strip_query("cam?token=x"), "cam");
        assert_eq!(strip_query("live/"), "live");
        assert_eq!(query_token("cam?token=x"), Some("x"));
        assert_eq!(query_token("cam?a=1&token=y"), Some("y"));
        assert_eq!(query_token("rtmp://h/live?token=z"), Some("z"));
        assert_eq!(query_token("cam"), None);
    }
}

//! The TURN/STUN server's IO: one thread (`TurnWorker`) over mio with the UDP listener, the
//! TCP listener and its connections, and one UDP relay socket per allocation, bound in the
//! configured port range. All protocol decisions are made by the sans-IO
//! [`tern_rtc::turn::TurnServer`]; this module moves bytes and binds sockets. `setup.rs`
//! ([`setup::start`]) makes the server's configuration from `[turn]` and what WHEP answers
//! announce, and puts a reload's users, secret and peer lists in force.
//!
//! TCP framing (RFC 8656 §12.5): each connection keeps a read buffer that holds at most one
//! partial frame, and a write buffer only while the kernel's send queue is full (bounded:
//! frames past [`TCP_WRITE_LIMIT`] are dropped, as a congested UDP path would drop them).
//!
//! TURN over TLS (`turn.tls_listen`, RFC 8656 §3.1): a third listener whose connections run
//! rustls's sans-IO `ServerConnection` in this same loop (no thread or task per client),
//! with the HTTPS certificate store (so a renewed certificate serves new connections) and
//! the same framing, allocations, quotas and peer rules as TCP. A handshake unfinished after
//! [`HANDSHAKE_TIMEOUT`] is dropped. TCP and TLS connections from one address are capped at
//! `limits.turn_allocations_per_ip` (one connection carries one allocation).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use std::os::fd::AsRawFd;

use mio::net::{TcpListener, TcpStream, UdpSocket};
use mio::{Events, Interest, Poll, Token, Waker};
use tern_proto::turn::{self as frame, PEER_HEADROOM, PEER_TAILROOM};
use tern_rtc::peer_policy::PeerPolicy;
use tern_rtc::turn::{
    AllocId, ClientAddr, ClientOutput, MAX_REPLY, Transport, TurnConfig, TurnEvent, TurnServer,
};
use tracing::{debug, info, warn};

use crate::media::EngineStats;
use crate::media::batch::SendBatch;

pub mod setup;

const UDP: Token = Token(0);
const TCP: Token = Token(1);
const WAKER: Token = Token(2);
const TLS: Token = Token(3);
/// Tokens from here up are relay sockets (allocation slab index + RELAY_BASE).
const RELAY_BASE: usize = 1 << 32;
/// Tokens from here up are TCP connections.
const CONN_BASE: usize = 16;

/// Bytes a TCP connection may queue for a slow client before frames are dropped.
pub const TCP_WRITE_LIMIT: usize = 256 * 1024;
/// Largest TCP frame: a STUN message or ChannelData of 65535 bytes plus header and padding.
const MAX_FRAME: usize = 65535 + 24;
/// Datagrams read per readiness event before other sockets get a turn.
const READ_BUDGET: usize = 256;
/// A TLS connection whose handshake has not finished after this is closed.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the TURN server needs from the configuration.
#[derive(Debug, Clone)]
pub struct TurnOptions {
    /// UDP and TCP listen address.
    pub listen: SocketAddr,
    /// Address relay sockets bind to and announce in XOR-RELAYED-ADDRESS.
    pub relay_ip: IpAddr,
    /// Relay port range, inclusive.
    pub relay_ports: (u16, u16),
    /// Protocol settings.
    pub config: TurnConfig,
    /// Where allocation snapshots and events go (the media engine's counters and cache).
    pub stats: Option<Arc<EngineStats>>,
    /// TURN over TLS: its listen address and rustls configuration.
    pub tls: Option<(SocketAddr, Arc<rustls::ServerConfig>)>,
}

/// Counters shared with the HTTP side, refreshed by the worker once a second.
#[derive(Debug, Default)]
pub struct TurnShared {
    /// Allocations alive.
    pub allocations: AtomicU64,
    /// Allocations created, ever.
    pub allocations_total: AtomicU64,
    /// Datagrams relayed client → peer.
    pub to_peer: AtomicU64,
    /// Datagrams relayed peer → client.
    pub to_client: AtomicU64,
    /// 401 answers.
    pub unauthorized: AtomicU64,
    /// Allocations refused by quota.
    pub quota_refusals: AtomicU64,
    /// Inputs dropped.
    pub dropped: AtomicU64,
}

/// Users, REST secret and peer policy a reload hands the worker (`setup.rs`).
pub struct Credentials {
    /// Long-term users as `(name, password)`.
    pub users: Vec<(String, String)>,
    /// The REST secret.
    pub secret: String,
    /// Which peers relays may reach.
    pub peers: PeerPolicy,
    /// Allocations (and TCP connections) one client address may hold
    /// (`limits.turn_allocations_per_ip`).
    pub per_ip: usize,
}

/// A running TURN worker.
pub struct TurnHandle {
    waker: Arc<Waker>,
    /// What a reload calls to put `[turn]`'s users, secret and peer lists in force (set by
    /// `setup::start`).
    pub reload: Option<crate::reload::TurnReload>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The bound UDP listener address (the TCP listener has the same).
    pub addr: SocketAddr,
    /// The bound TURN-over-TLS listener address, when on.
    pub tls_addr: Option<SocketAddr>,
    /// Counters.
    pub shared: Arc<TurnShared>,
    /// What the worker takes when woken: a reload's credentials.
    pending: Arc<Mutex<Option<Credentials>>>,
}

impl TurnHandle {
    /// The worker's waker and its credentials slot, for `setup.rs`'s reload.
    fn control_parts(&self) -> (Arc<Waker>, Arc<Mutex<Option<Credentials>>>) {
        (self.waker.clone(), self.pending.clone())
    }

    /// Stops the worker and waits for it.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    rbuf: Vec<u8>,
    /// Frames the socket (TCP) or rustls (TLS) has not taken yet, up to [`TCP_WRITE_LIMIT`].
    wbuf: Vec<u8>,
    /// The TLS session of a connection on the TLS listener (boxed: ~1 KiB that plain TCP
    /// connections do without).
    tls: Option<Box<rustls::ServerConnection>>,
    /// When it was accepted, for [`HANDSHAKE_TIMEOUT`].
    opened: Instant,
}

/// What one read from a connection gave.
enum Got {
    /// Bytes of the TURN stream (decrypted, for TLS).
    Data(usize),
    /// Nothing more until the socket is readable again.
    Again,
    /// The connection ended or failed.
    Closed,
}

impl Conn {
    /// Reads stream bytes into `chunk`: from the socket, or through TLS (which may first
    /// need records from the socket, and answer the handshake).
    fn read(&mut self, chunk: &mut [u8]) -> Got {
        let Some(tls) = self.tls.as_mut() else {
            return match self.stream.read(chunk) {
                Ok(0) => Got::Closed,
                Ok(n) => Got::Data(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Got::Again,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => Got::Data(0),
                Err(_) => Got::Closed,
            };
        };
        loop {
            match tls.reader().read(chunk) {
                Ok(0) => return Got::Closed, // close_notify
                Ok(n) => return Got::Data(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return Got::Closed, // closed without close_notify
            }
            match tls.read_tls(&mut self.stream) {
                Ok(0) => return Got::Closed,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Got::Again,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Got::Closed,
            }
            let processed = tls.process_new_packets();
            // Handshake messages, or the alert that explains a failure.
            if !Self::push_tls(tls, &mut self.stream) || processed.is_err() {
                if let Err(e) = processed {
                    debug!(peer = %self.peer, "TURN over TLS: {e}");
                }
                return Got::Closed;
            }
        }
    }

    /// Writes what rustls has to send until the socket is full; `false` if it failed.
    fn push_tls(tls: &mut rustls::ServerConnection, stream: &mut TcpStream) -> bool {
        while tls.wants_write() {
            match tls.write_tls(stream) {
                Ok(0) => return false,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        true
    }

    /// Sends `data` (whole frames) or queues it; frames past [`TCP_WRITE_LIMIT`] queued are
    /// dropped. `false` if the connection failed.
    fn write(&mut self, data: &[u8]) -> bool {
        if let Some(tls) = self.tls.as_mut() {
            // rustls takes plaintext only when it has nothing left to send, so what it holds
            // stays one batch of frames and the queue (whole frames) is ours to bound.
            if !self.wbuf.is_empty() || tls.wants_write() {
                if self.wbuf.len() + data.len() <= TCP_WRITE_LIMIT {
                    self.wbuf.extend_from_slice(data);
                }
                return true;
            }
            return tls.writer().write_all(data).is_ok() && Self::push_tls(tls, &mut self.stream);
        }
        if !self.wbuf.is_empty() {
            if self.wbuf.len() + data.len() <= TCP_WRITE_LIMIT {
                self.wbuf.extend_from_slice(data);
            }
            return true;
        }
        match self.stream.write(data) {
            Ok(n) if n == data.len() => {}
            Ok(n) => self.wbuf.extend_from_slice(&data[n..]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.wbuf.extend_from_slice(data),
            Err(_) => return false,
        }
        true
    }

    /// The socket is writable: sends what is queued. `false` if the connection failed.
    fn flush(&mut self) -> bool {
        if let Some(tls) = self.tls.as_mut() {
            if !Self::push_tls(tls, &mut self.stream) {
                return false;
            }
            if tls.wants_write() || self.wbuf.is_empty() {
                return true;
            }
            let queued = std::mem::take(&mut self.wbuf);
            return tls.writer().write_all(&queued).is_ok()
                && Self::push_tls(tls, &mut self.stream);
        }
        while !self.wbuf.is_empty() {
            match self.stream.write(&self.wbuf) {
                Ok(0) => return false,
                Ok(n) => {
                    self.wbuf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        self.wbuf = Vec::new();
        true
    }

    /// A TLS connection still shaking hands after [`HANDSHAKE_TIMEOUT`].
    fn handshake_late(&self, now: Instant) -> bool {
        self.tls.as_ref().is_some_and(|t| t.is_handshaking())
            && now.saturating_duration_since(self.opened) >= HANDSHAKE_TIMEOUT
    }
}

struct Relay {
    sock: UdpSocket,
    alloc: AllocId,
    /// The allocation's id in the API and events.
    serial: u64,
}

struct Worker {
    /// A reload's credentials, taken when woken.
    pending: Arc<Mutex<Option<Credentials>>>,
    poll: Poll,
    udp: UdpSocket,
    tcp: TcpListener,
    /// The TURN-over-TLS listener and its configuration, when on.
    tls: Option<(TcpListener, Arc<rustls::ServerConfig>)>,
    server: TurnServer,
    relays: Vec<Option<Relay>>,
    conns: Vec<Option<Conn>>,
    free_conns: Vec<usize>,
    conn_by_addr: HashMap<SocketAddr, usize>,
    /// Open TCP and TLS connections per client address.
    conns_per_ip: HashMap<IpAddr, usize>,
    /// Most connections one address may hold (`limits.turn_allocations_per_ip`).
    max_conns_per_ip: usize,
    /// TLS connections still shaking hands (the loop then wakes each second to time them).
    handshaking: usize,
    relay_ip: IpAddr,
    ports: (u16, u16),
    next_port: u16,
    max_conns: usize,
    shared: Arc<TurnShared>,
    stop: Arc<AtomicBool>,
    stats: Option<Arc<EngineStats>>,
    /// Last allocation id given.
    serial: u64,
    /// Payload bytes relayed client → peer and peer → client.
    bytes_to_peer: u64,
    bytes_to_client: u64,
}

/// Tries at a TURN listen address with port 0: the kernel's UDP port may already be taken
/// for TCP by another socket, so a few fresh pairs are tried.
const PAIR_TRIES: usize = 8;

/// The UDP socket and TCP listener of one TURN address: the same port for both. With port 0
/// the kernel picks the UDP port; another socket may already hold it for TCP, so a new port
/// is tried (up to [`PAIR_TRIES`]) rather than failing the start.
fn bind_pair(listen: SocketAddr) -> io::Result<(std::net::UdpSocket, std::net::TcpListener)> {
    let mut tries = 0;
    loop {
        let udp = bind_udp(listen, 4 << 20)?;
        let addr = udp.local_addr()?;
        match std::net::TcpListener::bind(addr) {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) if listen.port() == 0 && e.kind() == io::ErrorKind::AddrInUse => {
                tries += 1;
                if tries >= PAIR_TRIES {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// Binds the listeners and starts the `TurnWorker` thread.
pub fn spawn(opts: TurnOptions) -> io::Result<TurnHandle> {
    let (udp_std, tcp_std) = bind_pair(opts.listen)?;
    let addr = udp_std.local_addr()?;
    tcp_std.set_nonblocking(true)?;
    let poll = Poll::new()?;
    let mut udp = UdpSocket::from_std(udp_std);
    let mut tcp = TcpListener::from_std(tcp_std);
    poll.registry()
        .register(&mut udp, UDP, Interest::READABLE)?;
    poll.registry()
        .register(&mut tcp, TCP, Interest::READABLE)?;
    let tls = match opts.tls {
        Some((listen, config)) => {
            let l = std::net::TcpListener::bind(listen)?;
            l.set_nonblocking(true)?;
            let mut l = TcpListener::from_std(l);
            poll.registry().register(&mut l, TLS, Interest::READABLE)?;
            Some((l, config))
        }
        None => None,
    };
    let tls_addr = match &tls {
        Some((l, _)) => Some(l.local_addr()?),
        None => None,
    };
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    let stop = Arc::new(AtomicBool::new(false));
    let shared = Arc::new(TurnShared::default());
    let now = Instant::now();
    let unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let max_conns = opts.config.max_allocations + 64;
    let max_conns_per_ip = opts.config.max_allocations_per_ip;
    let server = TurnServer::new(opts.config, now, unix, opts.relay_ip.is_ipv4());
    let (lo, hi) = opts.relay_ports;
    // Start at a random place in the range so that restarts and neighbours spread out.
    let span = u32::from(hi - lo) + 1;
    let next_port = lo + (rand::random::<u32>() % span) as u16;
    let pending = Arc::new(Mutex::new(None));
    let mut worker = Worker {
        pending: pending.clone(),
        poll,
        udp,
        tcp,
        tls,
        server,
        relays: Vec::new(),
        conns: Vec::new(),
        free_conns: Vec::new(),
        conn_by_addr: HashMap::new(),
        conns_per_ip: HashMap::new(),
        max_conns_per_ip,
        handshaking: 0,
        relay_ip: opts.relay_ip,
        ports: (lo, hi),
        next_port,
        max_conns,
        shared: shared.clone(),
        stop: stop.clone(),
        stats: opts.stats,
        serial: 0,
        bytes_to_peer: 0,
        bytes_to_client: 0,
    };
    let thread = std::thread::Builder::new()
        .name("TurnWorker".into())
        .spawn(move || worker.run())?;
    info!(%addr, tls = ?tls_addr, relay_ip = %opts.relay_ip, ports = ?opts.relay_ports, "TURN listening (UDP and TCP)");
    Ok(TurnHandle {
        reload: None,
        pending,
        waker,
        stop,
        thread: Some(thread),
        addr,
        tls_addr,
        shared,
    })
}

/// Receive and send buffer asked for each relay socket (the kernel caps it at rmem_max).
const RELAY_BUFFER: usize = 1 << 20;

fn bind_udp(addr: SocketAddr, buffers: usize) -> io::Result<std::net::UdpSocket> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    if buffers > 0 {
        let _ = s.set_recv_buffer_size(buffers);
        let _ = s.set_send_buffer_size(buffers);
    }
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    Ok(s.into())
}

impl Worker {
    /// A reload's users, secret and peer policy, if one came.
    fn take_credentials(&mut self) {
        let Some(c) = self.pending.lock().ok().and_then(|mut p| p.take()) else {
            return;
        };
        info!(
            "TURN: users, secret and peer lists reloaded ({} users)",
            c.users.len()
        );
        self.server
            .set_credentials(c.users, Some(c.secret), c.peers);
        self.server.set_max_allocations_per_ip(c.per_ip);
        self.max_conns_per_ip = c.per_ip;
    }

    fn run(&mut self) {
        let mut events = Events::with_capacity(256);
        // One buffer for every read: headroom for framing a peer's datagram in place.
        let mut buf = vec![0u8; PEER_HEADROOM + 65536 + PEER_TAILROOM].into_boxed_slice();
        let mut out = [0u8; MAX_REPLY];
        // Datagrams to UDP clients (replies, and peer data framed as ChannelData or Data
        // indications) go out in one `sendmmsg` per turn of the loop instead of one `sendto`
        // each. Made here: its headers may not cross threads.
        let mut batch = SendBatch::new();
        while !self.stop.load(Ordering::Relaxed) {
            let mut timeout = self
                .server
                .poll_timeout()
                .saturating_duration_since(Instant::now());
            if self.handshaking > 0 {
                timeout = timeout.min(Duration::from_secs(1));
            }
            if let Err(e) = self.poll.poll(&mut events, Some(timeout))
                && e.kind() != io::ErrorKind::Interrupted
            {
                warn!("TURN poll failed: {e}");
                return;
            }
            for ev in events.iter() {
                match ev.token() {
                    UDP => self.read_udp(&mut buf, &mut out, &mut batch),
                    TCP => self.accept(false),
                    TLS => self.accept(true),
                    WAKER => self.take_credentials(),
                    Token(t) if t >= RELAY_BASE => {
                        self.read_relay(t - RELAY_BASE, &mut buf, &mut batch)
                    }
                    Token(t) => {
                        let i = t - CONN_BASE;
                        if ev.is_writable() {
                            self.flush_conn(i);
                        }
                        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                            self.read_conn(i, &mut out, &mut batch);
                        }
                    }
                }
            }
            self.flush(&mut batch);
            let now = Instant::now();
            if self.handshaking > 0 {
                self.drop_late_handshakes(now);
            }
            self.server.handle_timeout(now);
            self.events();
            self.publish();
        }
        info!("TURN worker stopped");
    }

    fn publish(&self) {
        let s = self.server.stats();
        let sh = &self.shared;
        sh.allocations
            .store(self.server.allocations() as u64, Ordering::Relaxed);
        sh.allocations_total
            .store(s.allocations_total, Ordering::Relaxed);
        sh.to_peer.store(s.to_peer, Ordering::Relaxed);
        sh.to_client.store(s.to_client, Ordering::Relaxed);
        sh.unauthorized.store(s.unauthorized, Ordering::Relaxed);
        sh.quota_refusals.store(s.quota_refusals, Ordering::Relaxed);
        sh.dropped.store(s.dropped, Ordering::Relaxed);
        if let Some(st) = &self.stats {
            st.turn_peer_refused
                .store(s.peer_refused, Ordering::Relaxed);
            st.turn_rate_limited
                .store(s.rate_limited, Ordering::Relaxed);
            st.turn_quota_refusals
                .store(s.quota_refusals, Ordering::Relaxed);
            st.turn_to_peer.store(s.to_peer, Ordering::Relaxed);
            st.turn_to_client.store(s.to_client, Ordering::Relaxed);
            st.turn_to_peer_bytes
                .store(self.bytes_to_peer, Ordering::Relaxed);
            st.turn_to_client_bytes
                .store(self.bytes_to_client, Ordering::Relaxed);
        }
    }

    fn events(&mut self) {
        while let Some(TurnEvent::Closed { alloc, client }) = self.server.poll_event() {
            // The slot may already hold a newer allocation that reused the index (the old
            // one was replaced in `client_input`): only its own relay closes.
            if let Some(slot) = self.relays.get_mut(alloc.index())
                && slot.as_ref().is_some_and(|r| r.alloc == alloc)
                && let Some(mut r) = slot.take()
            {
                let _ = self.poll.registry().deregister(&mut r.sock);
                if let Some(st) = &self.stats {
                    st.snapshots.allocation_closed(r.serial, "closed");
                }
                debug!(client = %client.addr, "TURN allocation closed");
            }
        }
        // A wave of allocations leaves no slot table sized for it behind.
        while self.relays.last().is_some_and(Option::is_none) {
            self.relays.pop();
        }
        tern_pool::shrink_vec(&mut self.relays);
    }

    fn read_udp(&mut self, buf: &mut [u8], out: &mut [u8; MAX_REPLY], batch: &mut SendBatch) {
        for _ in 0..READ_BUDGET {
            let (n, from) = match self.udp.recv_from(buf) {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => continue,
            };
            let client = ClientAddr {
                transport: Transport::Udp,
                addr: from,
            };
            self.client_input(client, &buf[..n], out, batch);
        }
        // Budget spent: more may be queued, and mio is edge-triggered. Come back at once.
        let _ = self
            .poll
            .registry()
            .reregister(&mut self.udp, UDP, Interest::READABLE);
    }

    fn client_input(
        &mut self,
        client: ClientAddr,
        input: &[u8],
        out: &mut [u8; MAX_REPLY],
        batch: &mut SendBatch,
    ) {
        let now = Instant::now();
        match self.server.handle_client(now, client, input, out) {
            ClientOutput::Reply(n) => self.send_client(client, &out[..n], batch),
            ClientOutput::Relay { alloc, peer, data } => {
                let sent = self
                    .relays
                    .get(alloc.index())
                    .and_then(Option::as_ref)
                    .filter(|r| r.alloc == alloc)
                    .map(|r| r.sock.send_to(&input[data], peer));
                match sent {
                    Some(Ok(n)) => self.bytes_to_peer += n as u64,
                    Some(Err(e)) => debug!(%peer, "TURN relay send failed: {e}"),
                    None => {}
                }
            }
            ClientOutput::Allocate(p) => {
                let user: Box<str> = p.user().into();
                let relay = self.bind_relay(p.even_port());
                let bound = relay.as_ref().and_then(|s| s.local_addr().ok());
                let (id, n) = self.server.finish_allocate(now, p, bound, out);
                if let (Some(id), Some(mut sock)) = (id, relay) {
                    let token = Token(RELAY_BASE + id.index());
                    if self
                        .poll
                        .registry()
                        .register(&mut sock, token, Interest::READABLE)
                        .is_ok()
                    {
                        if self.relays.len() <= id.index() {
                            self.relays.resize_with(id.index() + 1, || None);
                        }
                        // An allocation that ended in this same turn of the loop may still
                        // hold the slot (its Closed event comes later): it is gone now.
                        if let Some(mut old) = self.relays[id.index()].take() {
                            let _ = self.poll.registry().deregister(&mut old.sock);
                            if let Some(st) = &self.stats {
                                st.snapshots.allocation_closed(old.serial, "closed");
                            }
                        }
                        self.serial += 1;
                        if let (Some(st), Some(relayed)) = (&self.stats, self.server.relay_addr(id))
                        {
                            let tls = self
                                .conn_by_addr
                                .get(&client.addr)
                                .and_then(|&i| self.conns.get(i)?.as_ref())
                                .is_some_and(|c| c.tls.is_some());
                            let transport = match client.transport {
                                Transport::Udp => "udp",
                                Transport::Tcp if tls => "tls",
                                Transport::Tcp => "tcp",
                            };
                            st.snapshots.allocation_created(
                                self.serial,
                                &user,
                                transport,
                                client.addr,
                                relayed,
                            );
                        }
                        self.relays[id.index()] = Some(Relay {
                            sock,
                            alloc: id,
                            serial: self.serial,
                        });
                    } else {
                        // Cannot watch the socket: undo the allocation at once.
                        self.server.client_closed(client);
                    }
                }
                self.send_client(client, &out[..n], batch);
            }
            ClientOutput::Drop(_) => {}
        }
    }

    /// Binds a relay socket on the next free port of the range (bounded tries).
    fn bind_relay(&mut self, even: bool) -> Option<UdpSocket> {
        let (lo, hi) = self.ports;
        let span = u32::from(hi - lo) + 1;
        for _ in 0..span.min(256) {
            let port = self.next_port;
            self.next_port = if port >= hi { lo } else { port + 1 };
            if even && port % 2 == 1 {
                continue;
            }
            // A relay carries one client's traffic, but a WebRTC server sends a new viewer
            // its keyframe cache (up to a GOP) in one burst, which overflows the default
            // ~208 KiB receive buffer before this thread drains it (found by
            // tests/e2e/bench.rs: a lost first packet that no receiver can notice). Socket
            // memory is charged only while datagrams wait, so 1 MiB costs nothing idle.
            if let Ok(s) = bind_udp(SocketAddr::new(self.relay_ip, port), RELAY_BUFFER) {
                return Some(UdpSocket::from_std(s));
            }
        }
        warn!("TURN: no free relay port in {lo}-{hi}");
        None
    }

    fn read_relay(&mut self, index: usize, buf: &mut [u8], batch: &mut SendBatch) {
        for _ in 0..READ_BUDGET {
            let Some(r) = self.relays.get(index).and_then(Option::as_ref) else {
                return;
            };
            let alloc = r.alloc;
            let room = buf.len() - PEER_TAILROOM;
            let (n, peer) = match r.sock.recv_from(&mut buf[PEER_HEADROOM..room]) {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => continue,
            };
            if let Some((client, range)) =
                self.server
                    .handle_peer(Instant::now(), alloc, peer, buf, PEER_HEADROOM, n)
            {
                self.bytes_to_client += n as u64;
                self.send_client(client, &buf[range], batch);
            }
        }
        if let Some(r) = self.relays.get_mut(index).and_then(Option::as_mut) {
            let _ = self.poll.registry().reregister(
                &mut r.sock,
                Token(RELAY_BASE + index),
                Interest::READABLE,
            );
        }
    }

    fn send_client(&mut self, client: ClientAddr, data: &[u8], batch: &mut SendBatch) {
        match client.transport {
            Transport::Udp => {
                if batch.is_full() {
                    self.flush(batch);
                }
                // A datagram larger than a batch slot goes out on its own.
                if !batch.push(data, client.addr)
                    && let Err(e) = self.udp.send_to(data, client.addr)
                {
                    debug!(to = %client.addr, "TURN send failed: {e}");
                }
            }
            Transport::Tcp => {
                if let Some(&i) = self.conn_by_addr.get(&client.addr) {
                    self.write_conn(i, data);
                }
            }
        }
    }

    /// Accepts on the TCP listener, or the TLS one (`tls`).
    fn accept(&mut self, tls: bool) {
        loop {
            let accepted = match (&self.tls, tls) {
                (Some((l, _)), true) => l.accept(),
                _ => self.tcp.accept(),
            };
            let (mut stream, peer) = match accepted {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    debug!("TURN accept failed: {e}");
                    return;
                }
            };
            let from_ip = self.conns_per_ip.get(&peer.ip()).copied().unwrap_or(0);
            if self.conn_by_addr.len() >= self.max_conns || from_ip >= self.max_conns_per_ip {
                debug!(%peer, from_ip, "TURN: connection refused (limit reached)");
                continue; // dropped: closes the connection
            }
            let session = match (&self.tls, tls) {
                (Some((_, cfg)), true) => match rustls::ServerConnection::new(cfg.clone()) {
                    Ok(c) => Some(Box::new(c)),
                    Err(e) => {
                        warn!("TURN over TLS: cannot start a session: {e}");
                        continue;
                    }
                },
                _ => None,
            };
            let _ = stream.set_nodelay(true);
            let i = self.free_conns.pop().unwrap_or_else(|| {
                self.conns.push(None);
                self.conns.len() - 1
            });
            let token = Token(CONN_BASE + i);
            if self
                .poll
                .registry()
                .register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)
                .is_err()
            {
                self.free_conns.push(i);
                continue;
            }
            self.conn_by_addr.insert(peer, i);
            *self.conns_per_ip.entry(peer.ip()).or_default() += 1;
            self.handshaking += usize::from(session.is_some());
            self.conns[i] = Some(Conn {
                stream,
                peer,
                rbuf: Vec::new(),
                wbuf: Vec::new(),
                tls: session,
                opened: Instant::now(),
            });
        }
    }

    /// Hands the queued client datagrams to the kernel.
    fn flush(&mut self, batch: &mut SendBatch) {
        if batch.is_empty() {
            return;
        }
        let f = batch.flush(self.udp.as_raw_fd());
        if f.dropped > 0 {
            debug!(dropped = f.dropped, "TURN sends refused by the kernel");
        }
    }

    fn read_conn(&mut self, i: usize, out: &mut [u8; MAX_REPLY], batch: &mut SendBatch) {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
                return;
            };
            let was_handshaking = c.tls.as_ref().is_some_and(|t| t.is_handshaking());
            let got = c.read(&mut chunk);
            if was_handshaking && !c.tls.as_ref().is_some_and(|t| t.is_handshaking()) {
                self.handshaking -= 1;
            }
            let n = match got {
                Got::Data(n) => n,
                Got::Again => return,
                Got::Closed => return self.close_conn(i),
            };
            c.rbuf.extend_from_slice(&chunk[..n]);
            let peer = c.peer;
            // Take the buffer out so frames can be handed to the server while the worker is
            // borrowed mutably; put the unparsed tail back.
            let mut rbuf = std::mem::take(&mut c.rbuf);
            let mut at = 0;
            let client = ClientAddr {
                transport: Transport::Tcp,
                addr: peer,
            };
            let mut broken = false;
            loop {
                match frame::tcp_frame_len(&rbuf[at..]) {
                    Ok(Some(len)) if len <= MAX_FRAME => {
                        if rbuf.len() - at < len {
                            break;
                        }
                        // ChannelData's padding is accepted by its parser, so whole frames go in.
                        let end = at + len;
                        let input = &rbuf[at..end];
                        self.client_input(client, input, out, batch);
                        at = end;
                    }
                    Ok(None) => break,
                    Ok(Some(_)) | Err(_) => {
                        broken = true;
                        break;
                    }
                }
            }
            if broken {
                return self.close_conn(i);
            }
            rbuf.drain(..at);
            if rbuf.capacity() > 4 * MAX_FRAME.max(rbuf.len()) {
                rbuf.shrink_to(MAX_FRAME);
            }
            if let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) {
                c.rbuf = rbuf;
            }
        }
    }

    fn write_conn(&mut self, i: usize, data: &[u8]) {
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        if !c.write(data) {
            self.close_conn(i);
        }
    }

    fn flush_conn(&mut self, i: usize) {
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        if !c.flush() {
            self.close_conn(i);
        }
    }

    /// Closes TLS connections whose handshake did not finish in [`HANDSHAKE_TIMEOUT`].
    fn drop_late_handshakes(&mut self, now: Instant) {
        let late: Vec<usize> = (0..self.conns.len())
            .filter(|&i| {
                self.conns[i]
                    .as_ref()
                    .is_some_and(|c| c.handshake_late(now))
            })
            .collect();
        for i in late {
            debug!("TURN over TLS: no handshake in {HANDSHAKE_TIMEOUT:?}, closed");
            self.close_conn(i);
        }
    }

    fn close_conn(&mut self, i: usize) {
        let Some(mut c) = self.conns.get_mut(i).and_then(Option::take) else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut c.stream);
        self.conn_by_addr.remove(&c.peer);
        if let Some(n) = self.conns_per_ip.get_mut(&c.peer.ip()) {
            *n -= 1;
            if *n == 0 {
                self.conns_per_ip.remove(&c.peer.ip());
            }
        }
        if c.tls.as_ref().is_some_and(|t| t.is_handshaking()) {
            self.handshaking -= 1;
        }
        self.free_conns.push(i);
        self.server.client_closed(ClientAddr {
            transport: Transport::Tcp,
            addr: c.peer,
        });
        self.events();
    }
}

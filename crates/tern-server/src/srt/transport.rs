//! The SRT transport: a UDP socket and every SRT connection on it, behind [`Transport`].
//!
//! [`ProtocolTransport`] drives `srt-protocol`'s sans-IO state machines (the listener
//! handshake `Listen`, the connection `DuplexConnection`) from one thread, with tern's
//! own table of peers instead of `srt-tokio`'s `MultiplexListener` (see the module doc of
//! [`crate::srt`] for why): every peer address gets state only once its first packet is a
//! handshake induction and its address has room under `limits.srt_connections_per_ip`; a
//! handshake not finished within [`HANDSHAKE_TIMEOUT`] is dropped with its permit.
//!
//! What the caller decides goes in through [`Transport::accept`] / [`Transport::reject`];
//! what happens comes out of [`Transport::poll`] as [`TransportEvent`]s.

use std::collections::HashMap;
use std::io::{self, Cursor};
use std::net::{SocketAddr, UdpSocket};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use srt_protocol::connection::DuplexConnection;
use srt_protocol::options::{KeySize, Passphrase};
use srt_protocol::packet::{
    Acknowledgement, ControlTypes, CoreRejectReason, FullAckSeqNumber, HandshakeVsInfo,
    KeyingMaterialMessage, Packet, RejectReason, ServerRejectReason, ShakeType, SocketId,
    SrtControlPacket,
};
use srt_protocol::protocol::pending_connection::listen::Listen;
use srt_protocol::protocol::pending_connection::{
    AccessControlResponse, ConnectionReject, ConnectionResult,
};
use srt_protocol::settings::{
    CipherSettings, ConnInitSettings, KeyMaterialRefreshSettings, KeySettings,
};

use crate::limits::{AddrPermit, PerAddress};

/// Time from a caller's first handshake packet to its first data: past it the handshake is
/// dropped and its address's permit freed (libsrt's default connect timeout is 3 s).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Most SRT peers (pending or connected) at once, whatever their addresses.
pub const MAX_PEERS: usize = 256;

/// A connection's handle.
pub type ConnId = u64;

/// Why a caller is refused, as libsrt numbers it (`SRT_REJ_*` below 1000, `SRT_REJX_*`
/// from 1000: 1000 + an HTTP status), so the encoder's log names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectCode {
    /// `SRT_REJ_BADSECRET` (10): wrong passphrase.
    BadSecret,
    /// `SRT_REJ_UNSECURE` (11): one side encrypts, the other does not.
    Unsecure,
    /// `SRT_REJX_BAD_REQUEST` (1400): a malformed stream ID.
    BadRequest,
    /// `SRT_REJX_UNAUTHORIZED` (1401): missing or wrong token.
    Unauthorized,
    /// `SRT_REJX_OVERLOAD` (1402): a limit is reached.
    Overload,
    /// `SRT_REJX_FORBIDDEN` (1403): admission said no.
    Forbidden,
    /// `SRT_REJX_NOTFOUND` (1404): no such app or stream.
    NotFound,
    /// `SRT_REJX_BAD_MODE` (1405): a mode other than `publish` and `request`.
    BadMode,
    /// `SRT_REJX_CONFLICT` (1409): the stream already has a publisher.
    Conflict,
    /// `SRT_REJX_ISE` (1500): something failed inside tern.
    Internal,
    /// `SRT_REJX_UNAVAILABLE` (1503): tern cannot take it now.
    Unavailable,
}

impl RejectCode {
    /// libsrt's number (what `srt_getrejectreason` returns to the caller).
    pub fn libsrt(self) -> i32 {
        match self {
            RejectCode::BadSecret => 10,
            RejectCode::Unsecure => 11,
            RejectCode::BadRequest => 1400,
            RejectCode::Unauthorized => 1401,
            RejectCode::Overload => 1402,
            RejectCode::Forbidden => 1403,
            RejectCode::NotFound => 1404,
            RejectCode::BadMode => 1405,
            RejectCode::Conflict => 1409,
            RejectCode::Internal => 1500,
            RejectCode::Unavailable => 1503,
        }
    }

    /// The reason's name, for logs and metrics labels.
    pub fn name(self) -> &'static str {
        match self {
            RejectCode::BadSecret => "bad_secret",
            RejectCode::Unsecure => "unsecure",
            RejectCode::BadRequest => "bad_request",
            RejectCode::Unauthorized => "unauthorized",
            RejectCode::Overload => "overload",
            RejectCode::Forbidden => "forbidden",
            RejectCode::NotFound => "not_found",
            RejectCode::BadMode => "bad_mode",
            RejectCode::Conflict => "conflict",
            RejectCode::Internal => "internal",
            RejectCode::Unavailable => "unavailable",
        }
    }

    /// `srt-protocol`'s value (it numbers the server range from 2000: 1000 + libsrt's).
    fn wire(self) -> RejectReason {
        use ServerRejectReason as S;
        match self {
            RejectCode::BadSecret => RejectReason::Core(CoreRejectReason::BadSecret),
            RejectCode::Unsecure => RejectReason::Core(CoreRejectReason::Unsecure),
            RejectCode::BadRequest => RejectReason::Server(S::BadRequest),
            RejectCode::Unauthorized => RejectReason::Server(S::Unauthorized),
            RejectCode::Overload => RejectReason::Server(S::Overload),
            RejectCode::Forbidden => RejectReason::Server(S::Forbidden),
            RejectCode::NotFound => RejectReason::Server(S::Notfound),
            RejectCode::BadMode => RejectReason::Server(S::BadMode),
            RejectCode::Conflict => RejectReason::Server(S::Conflict),
            RejectCode::Internal => RejectReason::Server(S::InternalServerError),
            RejectCode::Unavailable => RejectReason::Server(S::Down),
        }
    }
}

/// A caller at the access decision: its handshake is complete but for our answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Its handle.
    pub conn: ConnId,
    /// Its address.
    pub peer: SocketAddr,
    /// Its stream ID (empty if none).
    pub stream_id: String,
    /// Whether it encrypts (sent keying material), and its key length in bytes.
    pub key_len: Option<u16>,
}

/// What an SRT connection's figures are (the publisher snapshot and the log show them).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SrtStats {
    /// Smoothed round-trip time (ms).
    pub rtt_ms: f64,
    /// The negotiated receive latency (ms).
    pub latency_ms: u64,
    /// Data packets received (including retransmissions).
    pub packets: u64,
    /// Payload bytes received.
    pub bytes: u64,
    /// Packets found missing: retransmitted or dropped (srt-protocol 0.4.4 does not count
    /// its losses itself).
    pub lost: u64,
    /// Retransmitted packets received.
    pub retransmitted: u64,
    /// Lost packets that came again, by retransmission (spurious retransmissions of packets
    /// that were not lost count too).
    pub recovered: u64,
    /// Packets given up (too late for the latency), never delivered.
    pub dropped: u64,
    /// Packets that did not decrypt.
    pub undecrypted: u64,
}

/// What a [`Transport`] reports.
#[derive(Debug)]
pub enum TransportEvent {
    /// A caller waits for [`Transport::accept`] or [`Transport::reject`].
    Request(Request),
    /// A message of a connection's stream (in order; SRT dropped what came too late).
    Data {
        /// The connection.
        conn: ConnId,
        /// The payload (for MPEG-TS, up to 7 TS packets).
        data: Bytes,
    },
    /// A connection or handshake ended; its handle is gone.
    Closed {
        /// The connection.
        conn: ConnId,
        /// Why.
        why: &'static str,
    },
}

/// What [`Transport`] counts (the listener's metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransportCounts {
    /// Handshakes dropped unfinished after [`HANDSHAKE_TIMEOUT`].
    pub handshake_timeouts: u64,
    /// Inductions refused by the per-address limit or [`MAX_PEERS`].
    pub limited: u64,
    /// Datagrams that did not parse, or belonged to no peer.
    pub stray: u64,
    /// Handshakes refused by the SRT layer itself (wrong passphrase, encryption mismatch).
    pub bad_secret: u64,
    /// Inputs that made the SRT library panic (the peer was dropped).
    pub panics: u64,
}

/// An SRT endpoint that takes callers, whatever the library under it. A libsrt binding
/// (`srt_epoll_*` with a listen callback) would implement the same.
pub trait Transport: Send {
    /// The bound address.
    fn local_addr(&self) -> SocketAddr;
    /// Waits at most `max_wait` for datagrams, runs the timers, and reports.
    fn poll(&mut self, max_wait: Duration, out: &mut Vec<TransportEvent>) -> io::Result<()>;
    /// Accepts a [`Request`] with the passphrase its app requires; `Err` if the caller's
    /// keying material does not match (the caller was refused with that code, and its
    /// handle is gone).
    fn accept(&mut self, conn: ConnId, passphrase: Option<&str>) -> Result<(), RejectCode>;
    /// Whether a [`Request`]'s encryption matches `passphrase` (the app's): both clear, or
    /// the caller's keying material opens with it. Nothing is sent.
    fn check_key(&self, conn: ConnId, passphrase: Option<&str>) -> Result<(), RejectCode>;
    /// Refuses a [`Request`] with `code` (sent to the caller); its handle is gone.
    fn reject(&mut self, conn: ConnId, code: RejectCode);
    /// Closes a connection (sends SRT's shutdown); its handle is gone.
    fn close(&mut self, conn: ConnId);
    /// Sends one message (up to 1316 bytes) on an open connection (a reader's stream);
    /// false when the connection is not open.
    fn send_data(&mut self, conn: ConnId, data: bytes::Bytes) -> bool;
    /// A connection's figures.
    fn stats(&self, conn: ConnId) -> Option<SrtStats>;
    /// What it counted.
    fn counts(&self) -> TransportCounts;
}

/// Where a peer is.
enum State {
    /// Handshaking; `request` once it asked for access.
    Pending {
        listen: Box<Listen>,
        induction: Option<Box<Packet>>,
        cookie: Option<i32>,
        asked: bool,
        latency: Duration,
        /// The caller's key size, from its conclusion.
        key_size: KeySize,
        /// The caller's keying material (its stream key wrapped with its passphrase).
        km: Option<Box<KeyingMaterialMessage>>,
    },
    Open(Box<DuplexConnection>, Rtt),
}

/// Round-trip time from our full ACKs and the caller's ACK2s (`srt-protocol` 0.4.4 keeps
/// its estimate private and leaves the statistics' RTT fields at zero).
#[derive(Default)]
struct Rtt {
    /// Full ACKs sent and not yet answered, newest last (at most 8).
    sent: std::collections::VecDeque<(FullAckSeqNumber, Instant)>,
    /// Smoothed RTT (ms), as RFC 6298 smooths it (1/8).
    srtt: Option<f64>,
}

impl Rtt {
    fn sent(&mut self, p: &Packet, now: Instant) {
        if let Packet::Control(c) = p
            && let ControlTypes::Ack(Acknowledgement::Full(_, _, n)) = &c.control_type
        {
            if self.sent.len() == 8 {
                self.sent.pop_front();
            }
            self.sent.push_back((*n, now));
        }
    }

    fn received(&mut self, p: &Packet, now: Instant) {
        if let Packet::Control(c) = p
            && let ControlTypes::Ack2(n) = &c.control_type
            && let Some(i) = self.sent.iter().position(|(s, _)| s == n)
        {
            let ms = now.duration_since(self.sent[i].1).as_secs_f64() * 1e3;
            self.sent.drain(..=i);
            self.srtt = Some(self.srtt.map_or(ms, |r| r + (ms - r) / 8.0));
        }
    }
}

struct Peer {
    conn: ConnId,
    state: State,
    since: Instant,
    /// First data seen (the handshake is over).
    flowing: bool,
    _permit: AddrPermit,
}

/// `srt-protocol` driven over a std UDP socket (see the module doc).
pub struct ProtocolTransport {
    socket: UdpSocket,
    local: SocketAddr,
    per_ip: Arc<PerAddress>,
    /// The latency a stream ID gets (its app's `srt_latency_ms`).
    latency_for: Box<dyn Fn(&str) -> Duration + Send>,
    default_latency: Duration,
    peers: HashMap<SocketAddr, Peer>,
    by_conn: HashMap<ConnId, SocketAddr>,
    next_conn: ConnId,
    counts: TransportCounts,
    buf: Vec<u8>,
    out: Vec<u8>,
}

impl ProtocolTransport {
    /// Binds `addr`; `per_ip` counts peers per address; `latency_for` names the latency of a
    /// stream ID (checked when its conclusion arrives), `default_latency` the one before.
    pub fn bind(
        addr: SocketAddr,
        per_ip: Arc<PerAddress>,
        default_latency: Duration,
        latency_for: Box<dyn Fn(&str) -> Duration + Send>,
    ) -> io::Result<Self> {
        let socket = UdpSocket::bind(addr)?;
        let local = socket.local_addr()?;
        Ok(ProtocolTransport {
            socket,
            local,
            per_ip,
            latency_for,
            default_latency,
            peers: HashMap::new(),
            by_conn: HashMap::new(),
            next_conn: 1,
            counts: TransportCounts::default(),
            buf: vec![0; 65536],
            out: Vec::with_capacity(1500),
        })
    }

    fn settings(latency: Duration) -> ConnInitSettings {
        ConnInitSettings {
            local_sockid: SocketId(rand::random::<u32>() & 0x3fff_ffff),
            send_latency: latency,
            recv_latency: latency,
            ..ConnInitSettings::default()
        }
    }

    fn send(&mut self, packet: &Packet, to: SocketAddr) {
        send(&self.socket, &mut self.out, packet, to);
    }

    fn remove(&mut self, addr: SocketAddr, why: &'static str, out: &mut Vec<TransportEvent>) {
        if let Some(p) = self.peers.remove(&addr) {
            self.by_conn.remove(&p.conn);
            out.push(TransportEvent::Closed { conn: p.conn, why });
        }
        if self.peers.capacity() > 64 && self.peers.len() < self.peers.capacity() / 4 {
            self.peers.shrink_to_fit();
            self.by_conn.shrink_to_fit();
        }
    }

    /// One datagram from `from`.
    fn datagram(
        &mut self,
        n: usize,
        from: SocketAddr,
        now: Instant,
        out: &mut Vec<TransportEvent>,
    ) {
        let packet = match Packet::parse(&mut Cursor::new(&self.buf[..n]), self.local.is_ipv6()) {
            Ok(p) => p,
            Err(_) => {
                self.counts.stray += 1;
                return;
            }
        };
        if !self.peers.contains_key(&from) {
            let induction = matches!(&packet, Packet::Control(c)
                if matches!(&c.control_type, ControlTypes::Handshake(h) if h.shake_type == ShakeType::Induction));
            if !induction {
                self.counts.stray += 1;
                return;
            }
            if self.peers.len() >= MAX_PEERS {
                self.counts.limited += 1;
                return;
            }
            let Ok(permit) = self.per_ip.acquire(from.ip()) else {
                self.counts.limited += 1;
                return;
            };
            let conn = self.next_conn;
            self.next_conn += 1;
            self.by_conn.insert(conn, from);
            let latency = self.default_latency;
            self.peers.insert(
                from,
                Peer {
                    conn,
                    state: State::Pending {
                        listen: Box::new(Listen::new(Self::settings(latency), true)),
                        induction: None,
                        cookie: None,
                        asked: false,
                        latency,
                        key_size: KeySize::Unspecified,
                        km: None,
                    },
                    since: now,
                    flowing: false,
                    _permit: permit,
                },
            );
        }
        let handled = std::panic::catch_unwind(AssertUnwindSafe(|| {
            self.handle(packet, from, now, out);
        }));
        if handled.is_err() {
            self.counts.panics += 1;
            self.remove(from, "the SRT library failed on its input", out);
        }
    }

    fn handle(
        &mut self,
        mut packet: Packet,
        from: SocketAddr,
        now: Instant,
        out: &mut Vec<TransportEvent>,
    ) {
        let Self {
            peers,
            latency_for,
            counts,
            socket,
            out: obuf,
            ..
        } = self;
        let Some(peer) = peers.get_mut(&from) else {
            return;
        };
        let mut end = None;
        let conn = peer.conn;
        match &mut peer.state {
            State::Open(c, rtt) => {
                if matches!(packet, Packet::Data(_)) {
                    peer.flowing = true;
                }
                rtt.received(&packet, now);
                c.handle_packet_input(now, Ok((packet, from)));
            }
            State::Pending {
                listen,
                induction,
                cookie,
                asked,
                latency,
                key_size,
                km,
            } => {
                if let Packet::Control(c) = &mut packet
                    && let ControlTypes::Handshake(hs) = &mut c.control_type
                {
                    match hs.shake_type {
                        ShakeType::Induction if induction.is_none() => {
                            *induction = Some(Box::new(Packet::Control(c.clone())));
                        }
                        ShakeType::Conclusion if !*asked => {
                            let HandshakeVsInfo::V5(info) = &hs.info else {
                                counts.stray += 1;
                                return;
                            };
                            // srt-protocol panics on keying material that is not a KM
                            // request: refuse it here.
                            if info.ext_km.as_ref().is_some_and(|k| {
                                !matches!(k, SrtControlPacket::KeyRefreshRequest(_))
                            }) {
                                counts.stray += 1;
                                return;
                            }
                            if Some(hs.syn_cookie) != *cookie {
                                return;
                            }
                            *key_size = info.key_size;
                            if let Some(SrtControlPacket::KeyRefreshRequest(k)) = &info.ext_km {
                                *km = Some(Box::new(k.clone()));
                            }
                            // The app's latency: a fresh listener with it, walked through
                            // the same induction, and the conclusion given its cookie.
                            let want = info.sid.as_deref().map_or(*latency, latency_for);
                            if want != *latency
                                && let Some(ind) = induction.clone()
                            {
                                let mut fresh = Box::new(Listen::new(
                                    ConnInitSettings {
                                        send_latency: want,
                                        recv_latency: want,
                                        ..listen.settings().clone()
                                    },
                                    true,
                                ));
                                if let ConnectionResult::SendPacket((Packet::Control(r), _)) =
                                    fresh.handle_packet(now, Ok((*ind, from)))
                                    && let ControlTypes::Handshake(rh) = &r.control_type
                                {
                                    hs.syn_cookie = rh.syn_cookie;
                                    *listen = fresh;
                                    *latency = want;
                                }
                            }
                        }
                        _ => {}
                    }
                }
                let result = listen.handle_packet(now, Ok((packet, from)));
                match result {
                    ConnectionResult::SendPacket((p, to)) => {
                        if let Packet::Control(c) = &p
                            && let ControlTypes::Handshake(h) = &c.control_type
                            && h.shake_type == ShakeType::Induction
                        {
                            *cookie = Some(h.syn_cookie);
                        }
                        send(socket, obuf, &p, to);
                    }
                    ConnectionResult::RequestAccess(r) => {
                        *asked = true;
                        let key_len = match r.key_size {
                            KeySize::AES128 => Some(16),
                            KeySize::AES192 => Some(24),
                            KeySize::AES256 => Some(32),
                            KeySize::Unspecified => None,
                        };
                        out.push(TransportEvent::Request(Request {
                            conn,
                            peer: from,
                            stream_id: r.stream_id.map(|s| s.to_string()).unwrap_or_default(),
                            key_len,
                        }));
                    }
                    ConnectionResult::Reject(p, _) => {
                        if let Some((p, to)) = p {
                            send(socket, obuf, &p, to);
                        }
                        end = Some("handshake refused");
                    }
                    ConnectionResult::Failure(_) => end = Some("handshake failed"),
                    ConnectionResult::Connected(..)
                    | ConnectionResult::NotHandled(_)
                    | ConnectionResult::NoAction => {}
                }
            }
        }
        if let Some(why) = end {
            self.remove(from, why, out);
        }
    }

    /// Sends what open connections have to send, hands out their data, runs their timers,
    /// drops finished ones and expired handshakes; returns the next deadline.
    fn service(&mut self, now: Instant, out: &mut Vec<TransportEvent>) -> Instant {
        let mut next = now + Duration::from_millis(50);
        let mut gone: Vec<(SocketAddr, &'static str)> = Vec::new();
        let mut sends: Vec<(Packet, SocketAddr)> = Vec::new();
        for (addr, p) in self.peers.iter_mut() {
            match &mut p.state {
                State::Pending { .. } => {
                    if now.duration_since(p.since) > HANDSHAKE_TIMEOUT {
                        gone.push((*addr, "handshake not finished in time"));
                    }
                }
                State::Open(c, rtt) => {
                    let served = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        let t = c.check_timers(now);
                        while let Some(s) = c.next_packet(now) {
                            rtt.sent(&s.0, now);
                            sends.push(s);
                        }
                        while let Some((_, data)) = c.next_data(now) {
                            out.push(TransportEvent::Data { conn: p.conn, data });
                        }
                        t
                    }));
                    match served {
                        Ok(t) => next = next.min(t),
                        Err(_) => {
                            self.counts.panics += 1;
                            gone.push((*addr, "the SRT library failed"));
                            continue;
                        }
                    }
                    if !c.is_open() {
                        gone.push((*addr, "closed by the peer or timed out"));
                    } else if !p.flowing && now.duration_since(p.since) > HANDSHAKE_TIMEOUT {
                        gone.push((*addr, "no data after the handshake"));
                    }
                }
            }
        }
        for (p, to) in sends {
            self.send(&p, to);
        }
        for (addr, why) in gone {
            if why == "handshake not finished in time" {
                self.counts.handshake_timeouts += 1;
            }
            self.remove(addr, why, out);
        }
        next
    }
}

impl Transport for ProtocolTransport {
    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn poll(&mut self, max_wait: Duration, out: &mut Vec<TransportEvent>) -> io::Result<()> {
        let now = Instant::now();
        let next = self.service(now, out);
        let wait = next.saturating_duration_since(now).clamp(
            Duration::from_millis(1),
            max_wait.max(Duration::from_millis(1)),
        );
        self.socket.set_read_timeout(Some(wait))?;
        // Up to 64 datagrams per poll: the first waits, the rest are what is queued.
        for i in 0..64 {
            if i == 1 {
                self.socket.set_nonblocking(true)?;
            }
            match self.socket.recv_from(&mut self.buf) {
                Ok((n, from)) => self.datagram(n, from, Instant::now(), out),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) =>
                {
                    break;
                }
                // ICMP errors from a peer that went away: not the listener's failure.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => break,
                Err(e) => {
                    self.socket.set_nonblocking(false)?;
                    return Err(e);
                }
            }
        }
        self.socket.set_nonblocking(false)?;
        self.service(Instant::now(), out);
        Ok(())
    }

    fn accept(&mut self, conn: ConnId, passphrase: Option<&str>) -> Result<(), RejectCode> {
        let addr = *self.by_conn.get(&conn).ok_or(RejectCode::Unavailable)?;
        let Some(Peer {
            state: State::Pending {
                listen, key_size, ..
            },
            ..
        }) = self.peers.get_mut(&addr)
        else {
            return Err(RejectCode::Unavailable);
        };
        let now = Instant::now();
        let key = match (passphrase, *key_size) {
            (None, KeySize::Unspecified) => None,
            // srt-protocol cannot take a caller that encrypts when we do not: refused here.
            (None, _) => {
                self.reject(conn, RejectCode::Unsecure);
                return Err(RejectCode::Unsecure);
            }
            (Some(p), size) => Some(KeySettings {
                key_size: size,
                passphrase: Passphrase::try_from(p.to_string())
                    .map_err(|_| RejectCode::Internal)?,
            }),
        };
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
            listen.handle_access_control_response(now, AccessControlResponse::Accepted(key))
        }));
        let mut events = Vec::new();
        let outcome = match result {
            Ok(ConnectionResult::Connected(p, c)) => {
                if let Some((p, to)) = p {
                    self.send(&p, to);
                }
                if let Some(peer) = self.peers.get_mut(&addr) {
                    peer.since = now;
                    peer.state = State::Open(Box::new(DuplexConnection::new(c)), Rtt::default());
                }
                return Ok(());
            }
            Ok(ConnectionResult::Reject(p, r)) => {
                if let Some((p, to)) = p {
                    self.send(&p, to);
                }
                self.counts.bad_secret += 1;
                match r {
                    ConnectionReject::Rejecting(RejectReason::Core(CoreRejectReason::Unsecure)) => {
                        RejectCode::Unsecure
                    }
                    _ => RejectCode::BadSecret,
                }
            }
            Ok(_) => RejectCode::Internal,
            Err(_) => {
                self.counts.panics += 1;
                RejectCode::Internal
            }
        };
        self.remove(addr, "handshake refused", &mut events);
        Err(outcome)
    }

    fn check_key(&self, conn: ConnId, passphrase: Option<&str>) -> Result<(), RejectCode> {
        let addr = self.by_conn.get(&conn).ok_or(RejectCode::Unavailable)?;
        let Some(Peer {
            state: State::Pending { key_size, km, .. },
            ..
        }) = self.peers.get(addr)
        else {
            return Err(RejectCode::Unavailable);
        };
        match (passphrase, km) {
            (None, None) => Ok(()),
            (None, Some(_)) | (Some(_), None) => Err(RejectCode::Unsecure),
            (Some(p), Some(km)) => {
                let key = KeySettings {
                    key_size: *key_size,
                    passphrase: Passphrase::try_from(p.to_string())
                        .map_err(|_| RejectCode::Internal)?,
                };
                let refresh = KeyMaterialRefreshSettings::default();
                let opened =
                    std::panic::catch_unwind(|| CipherSettings::new(&key, &refresh, km).is_ok());
                match opened {
                    Ok(true) => Ok(()),
                    _ => Err(RejectCode::BadSecret),
                }
            }
        }
    }

    fn reject(&mut self, conn: ConnId, code: RejectCode) {
        let Some(&addr) = self.by_conn.get(&conn) else {
            return;
        };
        let mut reply = None;
        if let Some(Peer {
            state: State::Pending { listen, .. },
            ..
        }) = self.peers.get_mut(&addr)
        {
            let r = listen.handle_access_control_response(
                Instant::now(),
                AccessControlResponse::Rejected(code.wire()),
            );
            if let ConnectionResult::Reject(Some(p), _) = r {
                reply = Some(p);
            }
        }
        if let Some((p, to)) = reply {
            self.send(&p, to);
        }
        self.remove(addr, "refused", &mut Vec::new());
    }

    fn close(&mut self, conn: ConnId) {
        let Some(&addr) = self.by_conn.get(&conn) else {
            return;
        };
        let mut sends = Vec::new();
        if let Some(Peer {
            state: State::Open(c, _),
            ..
        }) = self.peers.get_mut(&addr)
        {
            let now = Instant::now();
            c.on_peer_idle_timeout(now);
            while let Some(s) = c.next_packet(now) {
                sends.push(s);
            }
        }
        for (p, to) in sends {
            self.send(&p, to);
        }
        self.remove(addr, "closed by tern", &mut Vec::new());
    }

    fn send_data(&mut self, conn: ConnId, data: bytes::Bytes) -> bool {
        let Some(&addr) = self.by_conn.get(&conn) else {
            return false;
        };
        let Some(peer) = self.peers.get_mut(&addr) else {
            return false;
        };
        let State::Open(c, rtt) = &mut peer.state else {
            return false;
        };
        // A reader sends nothing: what it is sent keeps it from the no-data timeout.
        peer.flowing = true;
        let now = Instant::now();
        let mut sends = Vec::new();
        let done = std::panic::catch_unwind(AssertUnwindSafe(|| {
            c.handle_data_input(now, Some((now, data)));
            while let Some(s) = c.next_packet(now) {
                rtt.sent(&s.0, now);
                sends.push(s);
            }
        }));
        for (p, to) in sends {
            self.send(&p, to);
        }
        if done.is_err() {
            self.counts.panics += 1;
            self.remove(addr, "the SRT library failed", &mut Vec::new());
            return false;
        }
        true
    }

    fn stats(&self, conn: ConnId) -> Option<SrtStats> {
        let addr = self.by_conn.get(&conn)?;
        let Some(Peer {
            state: State::Open(c, rtt),
            ..
        }) = self.peers.get(addr)
        else {
            return None;
        };
        let s = c.statistics();
        Some(SrtStats {
            rtt_ms: rtt.srtt.unwrap_or(0.0),
            latency_ms: c.settings().recv_tsbpd_latency.as_millis() as u64,
            packets: s.rx_data,
            bytes: s.rx_bytes,
            // srt-protocol 0.4.4 leaves its loss counter at zero: a packet was lost if it
            // came again (retransmitted) or never (dropped); it was recovered if it came again.
            lost: s.rx_loss_data.max(s.rx_retransmit_data + s.rx_dropped_data),
            retransmitted: s.rx_retransmit_data,
            recovered: s.rx_retransmit_data,
            dropped: s.rx_dropped_data,
            undecrypted: s.rx_decrypt_errors,
        })
    }

    fn counts(&self) -> TransportCounts {
        self.counts
    }
}

/// Serializes `packet` into `buf` and sends it (a lost datagram is SRT's to repair).
fn send(socket: &UdpSocket, buf: &mut Vec<u8>, packet: &Packet, to: SocketAddr) {
    buf.clear();
    packet.serialize(buf);
    let _ = socket.send_to(buf, to);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transport(per_ip: usize) -> ProtocolTransport {
        let latency = Duration::from_millis(120);
        ProtocolTransport::bind(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            PerAddress::new("SRT connections", per_ip, &[]),
            latency,
            Box::new(move |_| latency),
        )
        .expect("bind")
    }

    /// Datagrams that are not SRT, SRT from no caller, and random bytes shaped like control
    /// packets (handshakes of every kind among them) are counted or answered, never a
    /// panic, and state stays within the per-address limit.
    #[test]
    fn junk_is_counted_and_bounded_never_a_panic() {
        let mut t = transport(4);
        let to = t.local_addr();
        let s = UdpSocket::bind("127.0.0.1:0").expect("bind");
        for n in [0usize, 1, 3, 15, 16, 17, 63, 64, 1500] {
            s.send_to(&vec![0xab; n], to).expect("send");
        }
        // A data packet for a connection nobody opened.
        s.send_to(
            &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 1, 2, 3],
            to,
        )
        .expect("send");
        let mut events = Vec::new();
        for _ in 0..20 {
            t.poll(Duration::from_millis(5), &mut events).expect("poll");
        }
        assert!(events.is_empty(), "{events:?}");
        assert!(t.counts().stray >= 2, "{:?}", t.counts());
        // 3,000 random control-shaped datagrams from 8 addresses (ports).
        let senders: Vec<UdpSocket> = (0..8)
            .map(|_| UdpSocket::bind("127.0.0.1:0").expect("bind"))
            .collect();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..3000usize {
            let mut d = vec![0u8; 16 + 48 + (i % 80)];
            for b in &mut d {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                *b = (seed >> 56) as u8;
            }
            d[0] = 0x80;
            d[1] = 0;
            d[2] = 0;
            d[3] = 0;
            // Handshake type: induction, conclusion, or anything.
            if i % 3 < 2 {
                d[36..40].copy_from_slice(&[1u32, 0xffff_ffff][i % 3].to_be_bytes());
                d[16..20].copy_from_slice(&[4u32, 5][i % 2].to_be_bytes());
            }
            senders[i % 8].send_to(&d, to).expect("send");
            if i % 100 == 0 {
                t.poll(Duration::from_millis(1), &mut events).expect("poll");
            }
        }
        for _ in 0..50 {
            t.poll(Duration::from_millis(2), &mut events).expect("poll");
        }
        assert_eq!(t.counts().panics, 0, "{:?}", t.counts());
        let before = t.peers.len();
        assert!(before <= 4, "{before} peers");
        // Then 10 real inductions from 10 more ports of the same address: the limit holds.
        let induction = |id: u32| {
            let mut p = vec![0x80, 0, 0, 0];
            p.extend([0u8; 12]);
            p.extend(4u32.to_be_bytes());
            p.extend(0u16.to_be_bytes());
            p.extend(2u16.to_be_bytes());
            p.extend(7u32.to_be_bytes());
            p.extend(1500u32.to_be_bytes());
            p.extend(8192u32.to_be_bytes());
            p.extend(1u32.to_be_bytes());
            p.extend(id.to_be_bytes());
            p.extend(0u32.to_be_bytes());
            p.extend([127, 0, 0, 1]);
            p.extend([0u8; 12]);
            p
        };
        let limited = t.counts().limited;
        let callers: Vec<UdpSocket> = (0..10u32)
            .map(|i| {
                let c = UdpSocket::bind("127.0.0.1:0").expect("bind");
                c.send_to(&induction(100 + i), to).expect("send");
                c
            })
            .collect();
        for _ in 0..20 {
            t.poll(Duration::from_millis(2), &mut events).expect("poll");
        }
        assert_eq!(t.peers.len(), 4, "{:?}", t.counts());
        assert_eq!(
            t.counts().limited - limited,
            10 - (4 - before) as u64,
            "{:?}",
            t.counts()
        );
        drop(callers);
    }
}

//! An SRT caller that sends a live MPEG-TS stream: restreaming a tern stream to an SRT
//! listener (`srt-live-transmit`, vMix, OBS's SRT input, another tern).
//!
//! [`SrtCaller`] is blocking and single-threaded, like the listener in [`super::transport`]:
//! it drives `srt-protocol`'s sans-IO state machines itself on one UDP socket (connected to
//! the listener), first the caller handshake `Connect`, then `DuplexConnection`. The owner
//! calls [`SrtCaller::send`] with each message (up to seven TS packets; its source time is
//! the send time) and [`SrtCaller::poll`] every 10-20 ms, which reads what the listener
//! sent (ACKs, NAKs and the retransmissions they ask for, keepalives, shutdown) and runs
//! the timers.
//!
//! What tern does around `srt-protocol` 0.4.4 here:
//!
//! - Every call into it runs under `catch_unwind`, and the control packets it answers with
//!   `todo!`/`unimplemented!` (congestion warning, peer error, SRT extensions other than
//!   handshake and keying material) are dropped before they reach it: a datagram can end
//!   the connection, never the thread.
//! - Its handshake packets get the caller's own timestamps (`stamp`): `Connect` echoes the
//!   listener's, from which libsrt would place every packet in the past and drop a lost one
//!   at once instead of waiting the latency for its retransmission (measured: with the
//!   echo, no loss was repaired by `srt-live-transmit`; with the fix, all).
//! - [`SrtCaller::close`] waits for the stream's tail to be due at the listener before the
//!   shutdown, which makes libsrt drop what it still holds.
//! - The wait is an `epoll` (mio), precise to the millisecond, not a socket read timeout,
//!   which Linux counts in scheduler ticks.

use std::io::{self, Cursor};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mio::{Events, Interest, Poll, Token};
use srt_protocol::connection::DuplexConnection;
use srt_protocol::options::{KeySize, Passphrase};
use srt_protocol::packet::{
    ControlTypes, Packet, RejectReason, SeqNumber, ShakeType, SocketId, SrtControlPacket, TimeStamp,
};
use srt_protocol::protocol::pending_connection::connect::Connect;
use srt_protocol::protocol::pending_connection::{ConnectionReject, ConnectionResult};
use srt_protocol::settings::{ConnInitSettings, KeySettings};

/// The largest message [`SrtCaller::send`] takes: seven 188-byte TS packets, SRT's live-mode
/// payload (`SRTO_PAYLOADSIZE`'s default).
pub const MAX_MESSAGE: usize = 1316;
/// The longest stream ID SRT carries (`SRTO_STREAMID`), in bytes.
pub const MAX_STREAM_ID: usize = 512;
/// How often an unanswered handshake packet is sent again (libsrt's interval).
const HANDSHAKE_RESEND: Duration = Duration::from_millis(250);
/// Most datagrams read per call (the rest wait for the next).
const MAX_DATAGRAMS: usize = 64;
/// How long [`SrtCaller::close`] waits, beyond twice the latency, for what is queued to be
/// acknowledged before it sends the shutdown anyway.
const CLOSE_GRACE: Duration = Duration::from_millis(250);
/// What [`SrtCaller::close`] adds to the last message's due time (the one-way delay, the
/// listener's delivery).
const CLOSE_MARGIN: Duration = Duration::from_millis(30);

/// A connected SRT caller sending one live stream (see the module doc).
pub struct SrtCaller {
    wire: Wire,
    peer: SocketAddr,
    conn: Box<DuplexConnection>,
    /// Why the connection is over, once it is (the listener's shutdown, its silence, a
    /// library failure, a socket error).
    broken: Option<String>,
    /// [`SrtCaller::close`] was called.
    closed: bool,
    /// The listener sent SRT's shutdown.
    peer_shutdown: bool,
    /// The last packet addressed to this connection.
    last_heard: Instant,
    /// The source time of the last message sent.
    last_message: Option<Instant>,
    sent_bytes: u64,
    retransmitted: u64,
}

impl SrtCaller {
    /// Connects (UDP socket bound to `0.0.0.0:0` or `[::]:0` matching `to`), handshakes in
    /// caller mode with `stream_id` (SRT's `streamid`, may be `None`; at most
    /// [`MAX_STREAM_ID`] bytes), `passphrase` (`None` = clear; 10-79 bytes; key length 16,
    /// AES-128), `latency` (the TSBPD latency asked, e.g. 120 ms; the connection uses the
    /// larger of it and the listener's), giving up after `timeout`. The error string says
    /// why: a timeout (and whether the port was unreachable or the listener answered only
    /// the first step), a rejection with the listener's reject reason and libsrt code, a
    /// socket error.
    pub fn connect(
        to: SocketAddr,
        stream_id: Option<&str>,
        passphrase: Option<&str>,
        latency: Duration,
        timeout: Duration,
    ) -> Result<SrtCaller, String> {
        let fail = |why: String| format!("SRT connect to {to}: {why}");
        let key_settings = match passphrase {
            None => None,
            Some(p) => {
                if !(10..=79).contains(&p.len()) {
                    return Err(fail(format!(
                        "the passphrase must be 10 to 79 bytes long, not {}",
                        p.len()
                    )));
                }
                let passphrase = Passphrase::try_from(p.to_string())
                    .map_err(|e| fail(format!("bad passphrase: {e}")))?;
                Some(KeySettings {
                    key_size: KeySize::AES128,
                    passphrase,
                })
            }
        };
        let stream_id = stream_id.filter(|s| !s.is_empty());
        if let Some(s) = stream_id
            && s.len() > MAX_STREAM_ID
        {
            return Err(fail(format!(
                "the stream ID is {} bytes, more than SRT's {MAX_STREAM_ID}",
                s.len()
            )));
        }
        let mut wire = Wire::open(to).map_err(|e| fail(format!("socket error: {e}")))?;
        let settings = ConnInitSettings {
            local_sockid: SocketId(rand::random::<u32>() & 0x3fff_ffff),
            key_settings,
            send_latency: latency,
            recv_latency: latency,
            ..ConnInitSettings::default()
        };
        let mut connect = Connect::new(
            to,
            wire.local_ip,
            settings,
            stream_id.map(str::to_string),
            SeqNumber::new_truncate(rand::random::<u32>()),
        );

        let start = Instant::now();
        let deadline = start.checked_add(timeout).unwrap_or(start);
        let mut next_tick = start;
        // When the conclusion was made: the connection's time base (see `stamp`).
        let mut concluded: Option<Instant> = None;
        // What the listener did so far, for the timeout's message.
        let mut unreachable = false;
        let mut unhandled: Option<String> = None;
        loop {
            let now = Instant::now();
            if now >= next_tick {
                match guarded(|| connect.handle_tick(now)) {
                    Some(ConnectionResult::SendPacket((mut p, _))) => {
                        stamp(&mut p, concluded, now);
                        wire.send(&p);
                    }
                    Some(_) => {}
                    None => return Err(fail("the SRT library failed".into())),
                }
                next_tick = now + HANDSHAKE_RESEND;
            }
            if now >= deadline {
                let mut why = format!("timed out after {timeout:?}: ");
                if concluded.is_some() {
                    why.push_str(
                        "the listener answered the induction but not the conclusion \
                         (a listener that drops the callers it refuses?)",
                    );
                } else if unreachable {
                    why.push_str("the port is unreachable (nothing listens there)");
                } else {
                    why.push_str("no answer from the listener");
                }
                if let Some(u) = unhandled {
                    why.push_str("; its last unexpected answer: ");
                    why.push_str(&u);
                }
                return Err(fail(why));
            }
            let wait = next_tick.min(deadline).saturating_duration_since(now);
            let n = match wire.recv(wait) {
                Ok(Some(n)) => n,
                Ok(None) => continue,
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    unreachable = true;
                    continue;
                }
                Err(e) => return Err(fail(format!("socket error: {e}"))),
            };
            let Some(packet) = parse(&wire.buf[..n], to.is_ipv6()) else {
                continue;
            };
            let now = Instant::now();
            let result = guarded(|| connect.handle_packet(Ok((packet, to)), now))
                .ok_or_else(|| fail("the SRT library failed on the listener's answer".into()))?;
            match result {
                ConnectionResult::SendPacket((mut p, _)) => {
                    if concluded.is_none() && is_conclusion(&p) {
                        // `Connect` took `now` as the connection's start.
                        concluded = Some(now);
                    }
                    stamp(&mut p, concluded, Instant::now());
                    wire.send(&p);
                }
                ConnectionResult::Connected(p, connection) => {
                    if let Some((mut p, _)) = p {
                        stamp(&mut p, concluded, Instant::now());
                        wire.send(&p);
                    }
                    let conn = guarded(|| Box::new(DuplexConnection::new(connection)))
                        .ok_or_else(|| fail("the SRT library failed".into()))?;
                    return Ok(SrtCaller {
                        wire,
                        peer: to,
                        conn,
                        broken: None,
                        closed: false,
                        peer_shutdown: false,
                        last_heard: now,
                        last_message: None,
                        sent_bytes: 0,
                        retransmitted: 0,
                    });
                }
                ConnectionResult::Reject(p, reject) => {
                    if let Some((p, _)) = p {
                        wire.send(&p);
                    }
                    let reason = match reject {
                        ConnectionReject::Rejected(r) | ConnectionReject::Rejecting(r) => r,
                    };
                    return Err(fail(rejected(reason)));
                }
                ConnectionResult::Failure(e) => return Err(fail(format!("socket error: {e}"))),
                ConnectionResult::NotHandled(e) => {
                    let mut e = e.to_string();
                    if e.len() > 160 {
                        let mut cut = 160;
                        while !e.is_char_boundary(cut) {
                            cut -= 1;
                        }
                        e.truncate(cut);
                        e.push('…');
                    }
                    unhandled = Some(e);
                }
                ConnectionResult::NoAction | ConnectionResult::RequestAccess(_) => {}
            }
        }
    }

    /// Queues one message (a live-mode SRT message, up to [`MAX_MESSAGE`] bytes: 7 TS
    /// packets; its source time is now) and sends what is due; also takes what the listener
    /// sent meanwhile, without waiting. `Err` when the connection is closed or broken (the
    /// listener's shutdown, no response for the peer-idle timeout, ~5 s), or, leaving the
    /// connection open, when the message is too long. An empty message is ignored.
    pub fn send(&mut self, message: &[u8]) -> Result<(), String> {
        self.check()?;
        if message.len() > MAX_MESSAGE {
            return Err(format!(
                "SRT to {}: a message of {} bytes, more than {MAX_MESSAGE}",
                self.peer,
                message.len()
            ));
        }
        if message.is_empty() {
            return Ok(());
        }
        let now = Instant::now();
        self.last_message = Some(now);
        let data = Bytes::copy_from_slice(message);
        let conn = &mut self.conn;
        if guarded(|| conn.handle_data_input(now, Some((now, data)))).is_none() {
            self.broken = Some("the SRT library failed".into());
        }
        self.service(now);
        self.receive(Duration::ZERO);
        self.check()
    }

    /// Receives and handles what the listener sent (ACKs, NAKs → retransmissions,
    /// keepalives, shutdown) and runs the timers, waiting at most `max_wait` (less when a
    /// timer is due sooner or a datagram comes; a millisecond's precision); call it
    /// regularly (e.g. every 10-20 ms) even when there is nothing to send. `Err` as
    /// [`SrtCaller::send`] says.
    pub fn poll(&mut self, max_wait: Duration) -> Result<(), String> {
        self.check()?;
        let now = Instant::now();
        let next = self.service(now);
        self.check()?;
        self.receive(next.saturating_duration_since(now).min(max_wait));
        self.service(Instant::now());
        self.check()
    }

    /// Sends SRT's shutdown, after the stream's tail: it keeps serving the connection
    /// (ACKs, retransmissions) until the last message is due at the listener (its source
    /// time plus the latency; the listener drops what it still holds when the shutdown
    /// comes) and what is queued is acknowledged, waiting at most three times the latency
    /// and a quarter second. Later calls to [`SrtCaller::send`] and [`SrtCaller::poll`]
    /// fail. Dropping an open caller sends the shutdown at once, without that wait.
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        if self.broken.is_some() {
            return;
        }
        let latency = self.conn.settings().send_tsbpd_latency;
        if let Some(last) = self.last_message {
            let due = last + latency + CLOSE_MARGIN;
            while self.broken.is_none() {
                let now = Instant::now();
                let next = self.service(now);
                if now >= due {
                    break;
                }
                let wait = next
                    .min(due)
                    .saturating_duration_since(now)
                    .min(Duration::from_millis(10));
                self.receive(wait);
            }
            if self.broken.is_some() {
                return;
            }
        }
        let now = Instant::now();
        let conn = &mut self.conn;
        if guarded(|| conn.handle_data_input(now, None)).is_none() {
            self.broken = Some("the SRT library failed".into());
            return;
        }
        let limit = now + latency * 2 + CLOSE_GRACE;
        loop {
            let now = Instant::now();
            let next = self.service(now);
            if self.broken.is_some() || now >= limit {
                break;
            }
            let wait = next
                .min(limit)
                .saturating_duration_since(now)
                .min(Duration::from_millis(10));
            self.receive(wait);
        }
        if self.broken.is_none() {
            self.shutdown_now();
        }
    }

    /// Bytes of payload sent (first transmissions; retransmissions not counted again).
    pub fn sent_bytes(&self) -> u64 {
        self.sent_bytes
    }

    /// Packets retransmitted (on the listener's NAKs or for want of its ACKs).
    pub fn retransmitted(&self) -> u64 {
        self.retransmitted
    }

    /// `Err` once the connection is over or closed.
    fn check(&self) -> Result<(), String> {
        if let Some(why) = &self.broken {
            return Err(format!("SRT to {}: {why}", self.peer));
        }
        if self.closed {
            return Err(format!("SRT to {}: closed", self.peer));
        }
        Ok(())
    }

    /// Runs the timers, sends what the connection has to send, drops what the listener
    /// might have sent as data (a caller that only sends has no use for it), and notes the
    /// end of the connection; returns the next deadline.
    fn service(&mut self, now: Instant) -> Instant {
        let idle = now + Duration::from_millis(10);
        if self.broken.is_some() {
            return idle;
        }
        let Self {
            wire,
            conn,
            sent_bytes,
            retransmitted,
            ..
        } = self;
        let served = guarded(|| {
            let next = conn.check_timers(now);
            while let Some((p, _)) = conn.next_packet(now) {
                if let Packet::Data(d) = &p {
                    if d.retransmitted {
                        *retransmitted += 1;
                    } else {
                        *sent_bytes += d.payload.len() as u64;
                    }
                }
                wire.send(&p);
            }
            while conn.next_data(now).is_some() {}
            next
        });
        match served {
            None => {
                self.broken = Some("the SRT library failed".into());
                idle
            }
            Some(next) => {
                if !self.conn.is_open() {
                    self.broken = Some(self.why_closed(now));
                }
                next
            }
        }
    }

    fn why_closed(&self, now: Instant) -> String {
        let idle = self.conn.settings().peer_idle_timeout;
        let silent = now.saturating_duration_since(self.last_heard);
        if self.peer_shutdown {
            "the listener closed the connection (SRT shutdown)".into()
        } else if silent >= idle {
            format!("no response from the listener for {silent:.1?} (peer idle timeout {idle:?})")
        } else if self.closed {
            "closed".into()
        } else {
            "the connection ended".into()
        }
    }

    /// Reads datagrams, waiting at most `wait` for the first, and hands them to the
    /// connection.
    fn receive(&mut self, wait: Duration) {
        if self.broken.is_some() {
            return;
        }
        for i in 0..MAX_DATAGRAMS {
            let wait = if i == 0 { wait } else { Duration::ZERO };
            match self.wire.recv(wait) {
                Ok(Some(n)) => self.datagram(n, Instant::now()),
                Ok(None) => break,
                // ICMP port unreachable: the listener may be gone, or a packet was lost on
                // the way; its silence is what ends the connection (peer idle timeout).
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(e) => {
                    self.broken = Some(format!("socket error: {e}"));
                    return;
                }
            }
            if self.broken.is_some() {
                return;
            }
        }
    }

    /// One datagram from the listener, its `n` bytes in the wire's buffer.
    fn datagram(&mut self, n: usize, now: Instant) {
        let Some(packet) = parse(&self.wire.buf[..n], self.peer.is_ipv6()) else {
            return;
        };
        if !admissible(&packet) {
            return;
        }
        if packet.dest_sockid() == self.conn.settings().local_sockid {
            self.last_heard = now;
            if let Packet::Control(c) = &packet
                && matches!(c.control_type, ControlTypes::Shutdown)
            {
                self.peer_shutdown = true;
            }
        }
        let peer = self.peer;
        let conn = &mut self.conn;
        if guarded(|| conn.handle_packet_input(now, Ok((packet, peer)))).is_none() {
            self.broken = Some("the SRT library failed on the listener's input".into());
        }
    }

    /// Queues SRT's shutdown and sends it, without waiting for anything.
    fn shutdown_now(&mut self) {
        let now = Instant::now();
        let Self { wire, conn, .. } = self;
        let sent = guarded(|| {
            conn.on_peer_idle_timeout(now);
            while let Some((p, _)) = conn.next_packet(now) {
                wire.send(&p);
            }
        });
        if sent.is_none() {
            self.broken = Some("the SRT library failed".into());
        }
    }
}

impl std::fmt::Debug for SrtCaller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SrtCaller")
            .field("peer", &self.peer)
            .field("broken", &self.broken)
            .field("closed", &self.closed)
            .field("sent_bytes", &self.sent_bytes)
            .field("retransmitted", &self.retransmitted)
            .finish_non_exhaustive()
    }
}

impl Drop for SrtCaller {
    fn drop(&mut self) {
        if !self.closed && self.broken.is_none() {
            self.closed = true;
            self.shutdown_now();
        }
    }
}

/// The UDP socket, connected to the listener, and the wait on it. An `epoll` wait (mio)
/// rather than a socket read timeout, which Linux counts in scheduler ticks (measured: a
/// 1 ms read timeout waited about 8 ms): a `poll(1 ms)` between messages must not hold the
/// stream for a tick.
struct Wire {
    socket: mio::net::UdpSocket,
    poll: Poll,
    events: Events,
    local_ip: std::net::IpAddr,
    buf: Vec<u8>,
    out: Vec<u8>,
}

impl Wire {
    fn open(to: SocketAddr) -> io::Result<Wire> {
        let bind: SocketAddr = if to.is_ipv4() {
            (Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let socket = std::net::UdpSocket::bind(bind)?;
        socket.connect(to)?;
        socket.set_nonblocking(true)?;
        let local_ip = socket.local_addr().map_or(bind.ip(), |a| a.ip());
        let mut socket = mio::net::UdpSocket::from_std(socket);
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut socket, Token(0), Interest::READABLE)?;
        Ok(Wire {
            socket,
            poll,
            events: Events::with_capacity(4),
            local_ip,
            buf: vec![0; 65536],
            out: Vec::with_capacity(1500),
        })
    }

    /// One datagram into `buf`, its length; waits at most `wait` for it (`None`: none
    /// came). It reads before it waits, so the edge-triggered wait misses nothing.
    fn recv(&mut self, wait: Duration) -> io::Result<Option<usize>> {
        let mut waited = wait.is_zero();
        loop {
            match self.socket.recv(&mut self.buf) {
                Ok(n) => return Ok(Some(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && !waited => {
                    waited = true;
                    match self.poll.poll(&mut self.events, Some(wait)) {
                        Ok(()) => {}
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                Err(e) if is_wait(&e) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    }

    /// Serializes `packet` and sends it (a lost datagram is SRT's to repair; an unreachable
    /// port shows as the listener's silence).
    fn send(&mut self, packet: &Packet) {
        self.out.clear();
        packet.serialize(&mut self.out);
        let _ = self.socket.send(&self.out);
    }
}

/// Runs a call into `srt-protocol`; `None` if it panicked.
fn guarded<T>(f: impl FnOnce() -> T) -> Option<T> {
    std::panic::catch_unwind(AssertUnwindSafe(f)).ok()
}

/// Whether a receive error only means that nothing came in time.
fn is_wait(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// A datagram as an SRT packet, `None` if it is not one.
fn parse(datagram: &[u8], ipv6: bool) -> Option<Packet> {
    guarded(|| Packet::parse(&mut Cursor::new(datagram), ipv6).ok()).flatten()
}

fn is_conclusion(p: &Packet) -> bool {
    matches!(p, Packet::Control(c)
        if matches!(&c.control_type, ControlTypes::Handshake(h) if h.shake_type == ShakeType::Conclusion))
}

/// Gives a handshake packet the caller's own timestamp: microseconds since `concluded`
/// (the connection's time base, from which its data packets are stamped), or 0 before.
/// `Connect` (0.4.4) copies the listener's timestamp from the induction answer into its
/// conclusion, and libsrt takes the caller's time base from that timestamp (the peer
/// started `ts` before the conclusion arrived): with a listener up for a while, every
/// packet then looks due at once, and the receiver drops a lost packet instead of waiting
/// the latency for its retransmission.
fn stamp(p: &mut Packet, concluded: Option<Instant>, now: Instant) {
    if let Packet::Control(c) = p {
        let us = concluded.map_or(0, |t| now.saturating_duration_since(t).as_micros());
        c.timestamp = TimeStamp::from_micros(u32::try_from(us).unwrap_or(u32::MAX));
    }
}

/// Whether `DuplexConnection` can take `packet`: `srt-protocol` 0.4.4 reaches `todo!()` on
/// a congestion warning or a peer error and `unimplemented!()` on SRT extension packets other
/// than handshake and keying material, so those are dropped here (libsrt ignores them too).
fn admissible(packet: &Packet) -> bool {
    match packet {
        Packet::Data(_) => true,
        Packet::Control(c) => match &c.control_type {
            ControlTypes::CongestionWarning | ControlTypes::PeerError(_) => false,
            ControlTypes::Srt(s) => matches!(
                s,
                SrtControlPacket::HandshakeRequest(_)
                    | SrtControlPacket::HandshakeResponse(_)
                    | SrtControlPacket::KeyRefreshRequest(_)
                    | SrtControlPacket::KeyRefreshResponse(_)
            ),
            _ => true,
        },
    }
}

/// The rejection's words: `srt-protocol`'s reason and libsrt's code (`srt_getrejectreason`:
/// the wire value less 1000, `SRT_REJ_*` below 1000, `SRT_REJX_*` from 1000).
fn rejected(reason: RejectReason) -> String {
    let code = i32::from(reason) - 1000;
    let kind = if code < 1000 { "SRT_REJ" } else { "SRT_REJX" };
    format!("rejected by the listener: {reason} ({kind} code {code})")
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::fs::File;
    use std::net::UdpSocket;
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, Stdio};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::thread::sleep;

    const SAMPLE: &[u8] = include_bytes!("../../../../assets/srt/sample.ts");
    const SLT: &str = "/usr/bin/srt-live-transmit";
    const PASSPHRASE: &str = "0123456789abc";
    const LATENCY: Duration = Duration::from_millis(120);

    /// `srt-live-transmit` listening on a free loopback port, its stdout in a file.
    struct Listener {
        child: Child,
        addr: SocketAddr,
        out: PathBuf,
    }

    impl Listener {
        /// `None` (with a note) when `srt-live-transmit` is not installed.
        fn start(passphrase: Option<&str>) -> Option<Listener> {
            if !Path::new(SLT).exists() {
                eprintln!("note: {SLT} is missing (Debian's srt-tools): test skipped");
                return None;
            }
            let port = UdpSocket::bind("127.0.0.1:0")
                .and_then(|s| s.local_addr())
                .expect("a free port")
                .port();
            let out = std::env::temp_dir()
                .join(format!("tern-srt-caller-{}-{port}.ts", std::process::id()));
            let child = Command::new(SLT)
                .arg("-q")
                .arg(format!(
                    "srt://127.0.0.1:{port}?mode=listener&latency=120{}",
                    passphrase.map_or(String::new(), |p| format!("&passphrase={p}"))
                ))
                .arg("file://con")
                .stdin(Stdio::null())
                .stdout(File::create(&out).expect("output file"))
                .stderr(Stdio::null())
                .spawn()
                .expect("srt-live-transmit starts");
            sleep(Duration::from_millis(300));
            Some(Listener {
                child,
                addr: SocketAddr::from(([127, 0, 0, 1], port)),
                out,
            })
        }

        /// Whether it exits within `within`.
        fn exits(&mut self, within: Duration) -> bool {
            let until = Instant::now() + within;
            while Instant::now() < until {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return true;
                }
                sleep(Duration::from_millis(20));
            }
            false
        }

        /// Interrupts it as Ctrl-C would (it closes its SRT socket and flushes its output).
        fn interrupt(&mut self) {
            let _ = Command::new("kill")
                .args(["-INT", &self.child.id().to_string()])
                .status();
            self.exits(Duration::from_secs(3));
        }

        /// Interrupts it, then reads what it wrote.
        fn stop(mut self) -> Vec<u8> {
            self.interrupt();
            std::fs::read(&self.out).expect("output")
        }
    }

    impl Drop for Listener {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
            let _ = std::fs::remove_file(&self.out);
        }
    }

    /// Sends `data` in messages of up to 1316 bytes, one every millisecond, polling between.
    /// Returns the longest time between two sends.
    fn stream(caller: &mut SrtCaller, data: &[u8]) -> Result<Duration, String> {
        let start = Instant::now();
        let mut last = start;
        let mut gap = Duration::ZERO;
        for (i, message) in data.chunks(MAX_MESSAGE).enumerate() {
            let due = start + Duration::from_millis(i as u64);
            loop {
                let now = Instant::now();
                if now >= due {
                    break;
                }
                caller.poll(due - now)?;
            }
            let now = Instant::now();
            gap = gap.max(now - last);
            last = now;
            caller.send(message)?;
        }
        Ok(gap)
    }

    /// Five passes of the sample TS (about 290 KB, 225 messages) to `srt-live-transmit`
    /// with AES-128: every byte arrives, in order.
    #[test]
    fn sends_a_ts_stream_to_srt_live_transmit() {
        let Some(listener) = Listener::start(Some(PASSPHRASE)) else {
            return;
        };
        let t = Instant::now();
        let mut caller = SrtCaller::connect(
            listener.addr,
            Some("live/restream"),
            Some(PASSPHRASE),
            LATENCY,
            Duration::from_secs(3),
        )
        .expect("connects");
        let handshake = t.elapsed();
        let sent: Vec<u8> = SAMPLE.repeat(5);
        let t = Instant::now();
        let gap = stream(&mut caller, &sent).expect("streams");
        let streaming = t.elapsed();
        // Let the last ACKs come in, then close.
        let until = Instant::now() + Duration::from_millis(100);
        while Instant::now() < until {
            caller.poll(Duration::from_millis(10)).expect("polls");
        }
        assert_eq!(caller.sent_bytes(), sent.len() as u64);
        let retransmitted = caller.retransmitted();
        let t = Instant::now();
        caller.close();
        let closing = t.elapsed();
        assert!(caller.send(&[0x47; 188]).is_err());
        assert!(caller.poll(Duration::ZERO).is_err());
        let mut listener = listener;
        eprintln!(
            "srt-live-transmit exits by itself after the close: {}",
            listener.exits(Duration::from_millis(500))
        );
        let received = listener.stop();
        let prefix = received
            .iter()
            .zip(&sent)
            .take_while(|(a, b)| a == b)
            .count();
        eprintln!(
            "handshake {handshake:?}, {} bytes in {} messages streamed in {streaming:?} (longest gap {gap:?}), \
             {retransmitted} retransmitted, close {closing:?}; received {} bytes, \
             {prefix} in order from the start, exact: {}",
            sent.len(),
            sent.len().div_ceil(MAX_MESSAGE),
            received.len(),
            received == sent
        );
        assert!(received.len() <= sent.len());
        assert!(
            prefix * 100 >= sent.len() * 95,
            "{prefix} of {} bytes",
            sent.len()
        );
    }

    /// A passphrase the listener does not have: refused at the handshake, in time.
    #[test]
    fn a_wrong_passphrase_is_refused() {
        let Some(listener) = Listener::start(Some(PASSPHRASE)) else {
            return;
        };
        let timeout = Duration::from_secs(3);
        let t = Instant::now();
        let e = SrtCaller::connect(
            listener.addr,
            None,
            Some("not-the-passphrase"),
            LATENCY,
            timeout,
        )
        .expect_err("refused");
        let took = t.elapsed();
        eprintln!("wrong passphrase: {e} (after {took:?})");
        assert!(took < timeout + Duration::from_millis(500), "{took:?}");
        assert!(e.contains("rejected") || e.contains("timed out"), "{e}");
        // Clear against an encrypting listener: refused too.
        let e =
            SrtCaller::connect(listener.addr, None, None, LATENCY, timeout).expect_err("refused");
        eprintln!("no passphrase: {e}");
        assert!(e.contains("rejected") || e.contains("timed out"), "{e}");
    }

    /// Nobody listens: the error comes after the timeout and says so.
    #[test]
    fn nobody_listening_times_out() {
        let addr = UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .expect("a free port");
        let timeout = Duration::from_secs(1);
        let t = Instant::now();
        let e =
            SrtCaller::connect(addr, Some("x"), None, LATENCY, timeout).expect_err("no connection");
        let took = t.elapsed();
        eprintln!("nobody listening: {e} (after {took:?})");
        assert!(took >= timeout, "{took:?}");
        assert!(took < timeout + Duration::from_millis(500), "{took:?}");
        assert!(e.contains("timed out after 1s"), "{e}");
        assert!(e.contains("unreachable"), "{e}");
    }

    /// A UDP relay between the caller and `to` that drops every `nth` data packet going to
    /// `to` (retransmissions included); stops when `stop` is set. Returns its address and
    /// the count of packets dropped.
    fn lossy_relay(
        to: SocketAddr,
        nth: u64,
        stop: Arc<AtomicBool>,
    ) -> (SocketAddr, Arc<AtomicU64>) {
        let front = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let back = UdpSocket::bind("127.0.0.1:0").expect("bind");
        back.connect(to).expect("connect");
        let addr = front.local_addr().expect("addr");
        let dropped = Arc::new(AtomicU64::new(0));
        let caller: Arc<Mutex<Option<SocketAddr>>> = Arc::new(Mutex::new(None));
        for s in [&front, &back] {
            s.set_read_timeout(Some(Duration::from_millis(20)))
                .expect("timeout");
        }
        let (f2, b2) = (
            front.try_clone().expect("clone"),
            back.try_clone().expect("clone"),
        );
        let (stop2, caller2, dropped2) = (stop.clone(), caller.clone(), dropped.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            let mut data = 0u64;
            while !stop2.load(Ordering::Relaxed) {
                if let Ok((n, from)) = front.recv_from(&mut buf) {
                    *caller2.lock().expect("lock") = Some(from);
                    if buf[0] & 0x80 == 0 {
                        data += 1;
                        if data.is_multiple_of(nth) {
                            dropped2.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                    }
                    let _ = back.send(&buf[..n]);
                }
            }
        });
        std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while !stop.load(Ordering::Relaxed) {
                if let Ok(n) = b2.recv(&mut buf)
                    && let Some(c) = *caller.lock().expect("lock")
                {
                    let _ = f2.send_to(&buf[..n], c);
                }
            }
        });
        (addr, dropped)
    }

    /// One data packet in 25 lost on the way: the listener's NAKs bring retransmissions
    /// and every byte still arrives, in order.
    #[test]
    fn losses_are_repaired() {
        let Some(listener) = Listener::start(Some(PASSPHRASE)) else {
            return;
        };
        let stop = Arc::new(AtomicBool::new(false));
        let (relay, dropped) = lossy_relay(listener.addr, 25, stop.clone());
        let mut caller = SrtCaller::connect(
            relay,
            None,
            Some(PASSPHRASE),
            LATENCY,
            Duration::from_secs(3),
        )
        .expect("connects");
        let sent: Vec<u8> = SAMPLE.repeat(3);
        stream(&mut caller, &sent).expect("streams");
        let until = Instant::now() + Duration::from_millis(300);
        while Instant::now() < until {
            caller.poll(Duration::from_millis(10)).expect("polls");
        }
        let retransmitted = caller.retransmitted();
        caller.close();
        let received = listener.stop();
        stop.store(true, Ordering::Relaxed);
        let dropped = dropped.load(Ordering::Relaxed);
        eprintln!(
            "lossy relay: {dropped} data packets dropped, {retransmitted} retransmitted, \
             {} of {} bytes received, exact: {}",
            received.len(),
            sent.len(),
            received == sent
        );
        assert!(dropped >= 5, "{dropped}");
        assert!(retransmitted >= dropped, "{retransmitted} < {dropped}");
        assert_eq!(received.len(), sent.len());
        assert!(received == sent, "the bytes differ");
    }

    /// The listener closes (Ctrl-C): its SRT shutdown ends the connection at once.
    #[test]
    fn a_listener_shutdown_ends_the_connection() {
        let Some(mut listener) = Listener::start(None) else {
            return;
        };
        let mut caller =
            SrtCaller::connect(listener.addr, None, None, LATENCY, Duration::from_secs(3))
                .expect("connects");
        stream(&mut caller, &SAMPLE[..MAX_MESSAGE * 10]).expect("streams");
        listener.interrupt();
        let t = Instant::now();
        let e = loop {
            if let Err(e) = caller.poll(Duration::from_millis(20)) {
                break e;
            }
            assert!(t.elapsed() < Duration::from_secs(10), "still open");
        };
        let took = t.elapsed();
        eprintln!("listener shutdown: {e} (after {took:?})");
        assert!(took < Duration::from_secs(2), "{took:?}");
        assert!(e.contains("SRT shutdown"), "{e}");
    }

    /// The listener goes away: without its shutdown the connection ends on its silence
    /// (the peer-idle timeout, ~5 s); `send` and `poll` then fail and say why.
    #[test]
    fn a_vanished_listener_ends_the_connection() {
        let Some(mut listener) = Listener::start(None) else {
            return;
        };
        let mut caller =
            SrtCaller::connect(listener.addr, None, None, LATENCY, Duration::from_secs(3))
                .expect("connects");
        stream(&mut caller, &SAMPLE[..MAX_MESSAGE * 10]).expect("streams");
        let _ = listener.child.kill();
        let _ = listener.child.wait();
        let t = Instant::now();
        let e = loop {
            if let Err(e) = caller
                .send(&[0x47; 188])
                .and_then(|()| caller.poll(Duration::from_millis(20)))
            {
                break e;
            }
            assert!(t.elapsed() < Duration::from_secs(15), "still open");
        };
        let took = t.elapsed();
        eprintln!("vanished listener: {e} (after {took:?})");
        assert!(took >= Duration::from_secs(4), "{took:?}");
        assert!(e.contains("no response"), "{e}");
        assert!(caller.send(&[0x47; 188]).is_err());
    }

    /// Bad arguments are refused before anything is sent; a message too long leaves the
    /// connection alone.
    #[test]
    fn bad_arguments_are_refused() {
        let addr = SocketAddr::from(([127, 0, 0, 1], 9));
        let t = Duration::from_secs(1);
        let e = SrtCaller::connect(addr, None, Some("short"), LATENCY, t).expect_err("refused");
        assert!(e.contains("10 to 79"), "{e}");
        let long = "x".repeat(MAX_STREAM_ID + 1);
        let e = SrtCaller::connect(addr, Some(&long), None, LATENCY, t).expect_err("refused");
        assert!(e.contains("stream ID"), "{e}");
    }

    #[test]
    fn a_message_too_long_is_refused_alone() {
        let Some(listener) = Listener::start(Some(PASSPHRASE)) else {
            return;
        };
        let mut caller = SrtCaller::connect(
            listener.addr,
            None,
            Some(PASSPHRASE),
            LATENCY,
            Duration::from_secs(3),
        )
        .expect("connects");
        let e = caller.send(&[0x47; MAX_MESSAGE + 1]).expect_err("refused");
        assert!(e.contains("1317 bytes"), "{e}");
        caller.send(&SAMPLE[..MAX_MESSAGE]).expect("still open");
        caller.poll(Duration::from_millis(20)).expect("still open");
        caller.close();
    }
}

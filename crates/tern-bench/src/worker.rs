//! Media threads: each owns a share of the clients and their UDP sockets, drives their
//! timers, and answers sample requests from the main thread.
//!
//! One connected UDP socket per client: the server tells viewers apart by their address, as
//! it would tell browsers apart, so clients cannot share a socket. mio's epoll is
//! edge-triggered: a readable socket is read with `recvmmsg` until a call returns fewer
//! datagrams than it asked for (the queue was empty then; a later arrival raises a new
//! edge), so the common case is one system call per wake-up, not one per datagram plus a
//! final `EAGAIN`. Arrival times come from the kernel (`SO_TIMESTAMPNS`), so latency and
//! jitter do not include the time a datagram waited for this thread. How a thread reads
//! (`UDP_GRO`) and how its viewers share one socket (`--sockets thread`): `socket.rs`.

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket as StdUdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, Sender, unbounded};
use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token, Waker};
use tern_proto::codec::MediaKind;
use tern_rtc::client::{Client, ClientState, ConnectTimes, TrackStats};
use tern_rtc::turn::Transport;
use tern_rtc::turn_client::{Received, TurnClient, TurnClientEvent};

use crate::socket::{
    BATCH, Got, RecvBatch, SHARED_BATCH, SHARED_MAX_THREADS, SHARED_MAX_VIEWERS, arrival,
    open_shared, segments, send_shared, shared_addr, shared_slot,
};

/// How often client timers are checked (NACK delays are tens of ms, reports 1 s).
const TICK: Duration = Duration::from_millis(10);
/// Once no client of the thread is connecting, the thread sleeps this long between
/// polls instead of blocking in `epoll_wait`. Datagrams queue meanwhile and are read
/// several per `recvmmsg`, and the server's sends do not have to wake this thread: both
/// sides spend less CPU per packet. Arrival times are the kernel's, so latency and jitter
/// are not affected; connecting clients turn pacing off so handshakes are not slowed.
const PACE: Duration = Duration::from_millis(4);
/// Window of the per-client bitrate and frame-rate minimum and maximum.
const RATE_WINDOW: Duration = Duration::from_secs(1);
/// A connected client that received nothing for this long counts as disconnected.
const SILENCE: Duration = Duration::from_secs(5);
const WAKER: Token = Token(usize::MAX);
/// The thread's shared socket (`--sockets thread`).
const SHARED: Token = Token(usize::MAX - 1);

/// A client whose signalling is done, handed to a media thread.
pub struct Joined {
    /// Client number (0-based, in connection order).
    pub id: usize,
    /// The sans-IO client.
    pub client: Client,
    /// Its socket, connected to the server's media address; none with `--sockets thread`
    /// (the thread's shared socket serves it).
    pub socket: Option<StdUdpSocket>,
    /// Time the signalling took.
    pub signalling: Duration,
    /// When the client was created (after signalling).
    pub started: Instant,
    /// Go through this TURN server (`--relay`); the socket is connected to it.
    pub relay: Option<RelayInfo>,
}

/// Where and how a relayed client reaches the server.
#[derive(Debug, Clone)]
pub struct RelayInfo {
    /// The TURN server (UDP).
    pub turn: std::net::SocketAddr,
    /// TURN username.
    pub user: String,
    /// TURN password.
    pub pass: String,
    /// The server's media address: the TURN peer.
    pub peer: std::net::SocketAddr,
}

/// Channel number every relayed client binds to the server's media address.
const CHANNEL: u16 = 0x4000;
/// Permissions last 300 s and channels 600 s (RFC 8656): re-bind (which refreshes both)
/// every 240 s, and refresh the allocation (600 s) every 480 s.
const REBIND: Duration = Duration::from_secs(240);

/// A client's TURN state: allocate → permission → channel, then ChannelData both ways.
struct Relay {
    turn: TurnClient,
    peer: std::net::SocketAddr,
    ready: bool,
    out: Vec<u8>,
    next_refresh: Option<Instant>,
    refreshes: u32,
}

impl Relay {
    /// Acts on the outcome of a TURN input or timer; returns a failure reason.
    fn on(&mut self, now: Instant, r: Received, sock: &UdpSocket) -> Option<&'static str> {
        let next = match r {
            Received::Transmit(n) => {
                let _ = sock.send(&self.out[..n]);
                return None;
            }
            Received::Event(TurnClientEvent::Allocated { .. }) => {
                self.turn.create_permission(now, self.peer, &mut self.out)
            }
            Received::Event(TurnClientEvent::PermissionCreated { .. }) => {
                self.turn
                    .channel_bind(now, CHANNEL, self.peer, &mut self.out)
            }
            Received::Event(TurnClientEvent::ChannelBound { .. }) => {
                self.ready = true;
                self.next_refresh = Some(now + REBIND);
                return None;
            }
            Received::Event(TurnClientEvent::Failed { code, .. }) => {
                return Some(if code == 0 {
                    "TURN timed out"
                } else {
                    "TURN refused"
                });
            }
            _ => return None,
        };
        match next {
            Ok(n) => {
                let _ = sock.send(&self.out[..n]);
                None
            }
            Err(_) => Some("TURN client error"),
        }
    }
}

/// How the media threads receive.
#[derive(Debug, Clone, Copy)]
pub struct Receive {
    /// With `UDP_GRO` (see the module).
    pub gro: bool,
    /// Authenticate and decrypt 1 RTP packet in this many (1: all).
    pub verify_every: u32,
    /// One socket per thread, not per viewer (`--sockets thread`; see the module).
    pub shared: bool,
}

/// A viewer's socket: its own, or its address on its thread's shared socket.
enum Sock {
    Own(UdpSocket),
    Shared(Ipv4Addr),
}

/// What the main thread asks of a media thread.
pub enum Cmd {
    /// Take a new client.
    Add(Box<Joined>),
    /// Send current samples of every client.
    Sample(Sender<Vec<Sample>>),
    /// Stop sending (checks, reports, NACKs) but keep counting what arrives.
    Quiesce,
    /// Give TURN allocations back (after the server ended the sessions).
    Release,
    /// Exit.
    Stop,
}

/// Coarse state for the summary's "ICE Connection State" line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Sending connectivity checks.
    Checking,
    /// ICE done, DTLS in progress (OvenRtcTester shows these as connected).
    Handshaking,
    /// Receiving.
    Connected,
    /// Connected, but nothing received for [`SILENCE`].
    Disconnected,
    /// Failed: refused, timed out, bad answer.
    Failed,
}

/// The highest and lowest rate over [`RATE_WINDOW`] windows.
#[derive(Debug, Clone, Copy, Default)]
pub struct Range {
    /// Smallest value seen.
    pub min: f64,
    /// Largest value seen.
    pub max: f64,
    /// Windows counted.
    pub n: u32,
}

impl Range {
    fn add(&mut self, v: f64) {
        if self.n == 0 {
            self.min = v;
            self.max = v;
        } else {
            self.min = self.min.min(v);
            self.max = self.max.max(v);
        }
        self.n += 1;
    }
}

/// A client's figures at one moment.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Client number.
    pub id: usize,
    /// Its state.
    pub state: State,
    /// Why it failed.
    pub failure: Option<&'static str>,
    /// Signalling time.
    pub signalling: Duration,
    /// ICE, DTLS, first packet and first frame times, from client creation.
    pub times: ConnectTimes,
    /// When the client was created.
    pub started: Instant,
    /// The video codec the server answered.
    pub video_codec: tern_proto::codec::VideoCodec,
    /// Video track statistics.
    pub video: Option<TrackStats>,
    /// Audio track statistics.
    pub audio: Option<TrackStats>,
    /// Bits per second over 1 s windows.
    pub bps: Range,
    /// Video frames per second over 1 s windows.
    pub fps: Range,
    /// Datagrams the client could not use.
    pub dropped: u64,
    /// Whether the server ended the session with a DTLS close_notify.
    pub closed_by_server: bool,
    /// Datagrams received (everything, before any check).
    pub datagrams: u64,
    /// Bytes of those datagrams.
    pub datagram_bytes: u64,
    /// Datagrams that came inside `UDP_GRO` messages of several.
    pub coalesced: u64,
}

struct Slot {
    id: usize,
    client: Client,
    sock: Sock,
    /// Read from since its last flush (shared socket).
    dirty: bool,
    signalling: Duration,
    started: Instant,
    failure: Option<&'static str>,
    /// The client's next timer, as of its last input or timeout.
    next_timer: Option<Instant>,
    relay: Option<Relay>,
    datagrams: u64,
    datagram_bytes: u64,
    /// Datagrams that came inside `UDP_GRO` messages of several.
    coalesced: u64,
    last_rx: Option<Instant>,
    /// Bytes and video frames at the start of the current rate window.
    window: Option<(Instant, u64, u64)>,
    bps: Range,
    fps: Range,
}

impl Slot {
    /// Sends the client's queued datagrams: straight to the server, or as ChannelData
    /// through TURN once the channel is bound (before that the client's checks are
    /// dropped; it repeats them).
    fn flush(&mut self, shared: std::os::fd::RawFd) {
        let sock = match &self.sock {
            Sock::Own(s) => s,
            Sock::Shared(from) => {
                let (from, to) = (*from, self.client.server());
                self.client.drain(&mut |d| send_shared(shared, from, to, d));
                return;
            }
        };
        match self.relay.as_mut() {
            None => self.client.drain(&mut |d| {
                let _ = sock.send(d);
            }),
            Some(r) => {
                let (ready, peer) = (r.ready, r.peer);
                let turn = &mut r.turn;
                let out = &mut r.out;
                self.client.drain(&mut |d| {
                    if ready && let Ok(n) = turn.send(peer, d, out) {
                        let _ = sock.send(&out[..n]);
                    }
                });
            }
        }
    }

    /// A message read for this viewer: counted, cut into its datagrams (`UDP_GRO`), each
    /// fed to the client.
    fn take(&mut self, now: Instant, wall_now: Duration, g: &Got, buf: &mut [u8]) {
        let at = arrival(now, wall_now, g.ts);
        self.last_rx = Some(at);
        let mut count = 0;
        for r in segments(g.len, g.seg) {
            count += 1;
            self.datagram_bytes += r.len() as u64;
            self.input(at, &mut buf[r]);
        }
        self.datagrams += count;
        if count > 1 {
            self.coalesced += count;
        }
    }

    /// A datagram from the socket: media for the client, or TURN's.
    fn input(&mut self, at: Instant, buf: &mut [u8]) {
        // A relayed viewer has its own socket (`--relay` and `--sockets thread` exclude
        // each other).
        let (Some(r), Sock::Own(sock)) = (self.relay.as_mut(), &self.sock) else {
            self.client.handle_input(at, buf);
            return;
        };
        match r.turn.handle_input(at, buf, &mut r.out) {
            Received::Data { data, .. } => {
                let _ = self.client.handle_input(at, &mut buf[data]);
            }
            other => {
                if let Some(f) = r.on(at, other, sock) {
                    self.failure = Some(f);
                }
            }
        }
    }

    /// Runs due timers of the client and of its TURN client.
    fn timers(&mut self, now: Instant, shared: std::os::fd::RawFd) {
        if self.client.poll_timeout().is_some_and(|t| t <= now) {
            self.client.handle_timeout(now);
        }
        if let (Some(r), Sock::Own(sock)) = (self.relay.as_mut(), &self.sock) {
            if r.turn.poll_timeout().is_some_and(|t| t <= now) {
                let res = r.turn.handle_timeout(now, &mut r.out);
                if let Some(f) = r.on(now, res, sock) {
                    self.failure = Some(f);
                }
            }
            if r.next_refresh.is_some_and(|t| t <= now) && !r.turn.busy() {
                r.refreshes += 1;
                let sent = if r.refreshes % 2 == 0 {
                    r.turn.refresh(now, 600, &mut r.out)
                } else {
                    r.turn.channel_bind(now, CHANNEL, r.peer, &mut r.out)
                };
                if let Ok(n) = sent {
                    let _ = sock.send(&r.out[..n]);
                }
                r.next_refresh = Some(now + REBIND);
            }
        }
        self.flush(shared);
    }

    /// When the next timer of the client or its TURN client is due.
    fn next_due(&self) -> Option<Instant> {
        let mut t = self.client.poll_timeout();
        if let Some(r) = &self.relay {
            for c in [r.turn.poll_timeout(), r.next_refresh] {
                t = match (t, c) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
        }
        t
    }

    fn totals(&self) -> (u64, u64) {
        let v = self.client.track(MediaKind::Video);
        let a = self.client.track(MediaKind::Audio);
        let bytes = v.map_or(0, |t| t.bytes) + a.map_or(0, |t| t.bytes);
        (bytes, v.map_or(0, |t| t.frames))
    }

    fn state(&self, now: Instant) -> State {
        if self.failure.is_some() {
            return State::Failed;
        }
        match self.client.state() {
            ClientState::Checking => State::Checking,
            ClientState::Handshaking => State::Handshaking,
            ClientState::Failed(_) => State::Failed,
            ClientState::Connected => {
                let since = self.last_rx.map_or(Duration::ZERO, |t| now - t);
                if since > SILENCE {
                    State::Disconnected
                } else {
                    State::Connected
                }
            }
        }
    }

    fn sample(&self, now: Instant) -> Sample {
        let failure = self.failure.or(match self.client.state() {
            ClientState::Failed(r) => Some(r),
            _ => None,
        });
        Sample {
            id: self.id,
            state: self.state(now),
            failure,
            signalling: self.signalling,
            times: self.client.times(),
            started: self.started,
            video_codec: self.client.video_codec(),
            video: self.client.track(MediaKind::Video).cloned(),
            audio: self.client.track(MediaKind::Audio).cloned(),
            bps: self.bps,
            fps: self.fps,
            dropped: self.client.dropped,
            closed_by_server: self.client.close_notify,
            datagrams: self.datagrams,
            datagram_bytes: self.datagram_bytes,
            coalesced: self.coalesced,
        }
    }
}

/// A running media thread.
pub struct Worker {
    tx: Sender<Cmd>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    /// Starts media thread number `index`. `connect_timeout` fails clients that have no SRTP
    /// keys that long after creation.
    pub fn spawn(
        index: usize,
        connect_timeout: Duration,
        recv: Receive,
    ) -> std::io::Result<Worker> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let shared = if recv.shared {
            if index >= SHARED_MAX_THREADS {
                return Err(std::io::Error::other(format!(
                    "--sockets thread addresses at most {SHARED_MAX_THREADS} threads"
                )));
            }
            let mut s = open_shared(recv.gro)?;
            poll.registry()
                .register(&mut s, SHARED, Interest::READABLE)?;
            Some(s)
        } else {
            None
        };
        let (tx, rx) = unbounded();
        let thread = std::thread::Builder::new()
            .name(format!("bench-media-{index}"))
            .spawn(move || {
                Thread {
                    index,
                    slots: Vec::new(),
                    shared,
                    connect_timeout,
                    recv,
                    gro_refused: false,
                    quiet: false,
                    connecting: 0,
                }
                .run(poll, rx)
            })?;
        Ok(Worker {
            tx,
            waker,
            thread: Some(thread),
        })
    }

    /// Sends a command and wakes the thread.
    pub fn send(&self, cmd: Cmd) {
        if self.tx.send(cmd).is_ok() {
            let _ = self.waker.wake();
        }
    }

    /// Stops the thread and waits for it.
    pub fn stop(&mut self) {
        self.send(Cmd::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A media thread's state.
struct Thread {
    index: usize,
    slots: Vec<Slot>,
    /// The shared socket (`--sockets thread`).
    shared: Option<UdpSocket>,
    connect_timeout: Duration,
    recv: Receive,
    gro_refused: bool,
    quiet: bool,
    /// Clients still checking or handshaking, as of the last tick.
    connecting: usize,
}

/// A shared socket's descriptor, or -1 (viewers with their own sockets never use it).
fn shared_fd(s: &Option<UdpSocket>) -> std::os::fd::RawFd {
    s.as_ref().map_or(-1, |s| s.as_raw_fd())
}

impl Thread {
    fn run(mut self, mut poll: Poll, rx: Receiver<Cmd>) {
        let mut events = Events::with_capacity(1024);
        let mut rb = RecvBatch::new(self.recv.gro, BATCH);
        let mut shared_rb = self
            .shared
            .is_some()
            .then(|| RecvBatch::new(self.recv.gro, SHARED_BATCH));
        let mut next_tick = Instant::now() + TICK;
        loop {
            let mut wait = next_tick.saturating_duration_since(Instant::now());
            if self.connecting == 0
                && events.iter().count() < events.capacity()
                && !self.slots.is_empty()
            {
                std::thread::sleep(PACE.min(wait));
                wait = Duration::ZERO;
            }
            if let Err(e) = poll.poll(&mut events, Some(wait))
                && e.kind() != ErrorKind::Interrupted
            {
                eprintln!("bench: poll failed: {e}");
                return;
            }
            let now = Instant::now();
            let wall_now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            for ev in events.iter() {
                match ev.token() {
                    WAKER => {}
                    SHARED => {
                        if let Some(b) = shared_rb.as_mut() {
                            self.read_shared(b, now, wall_now);
                        }
                    }
                    Token(i) => self.read_own(i, &mut rb, now, wall_now),
                }
            }
            while let Ok(cmd) = rx.try_recv() {
                match cmd {
                    Cmd::Add(j) => self.add(*j, &poll),
                    Cmd::Sample(reply) => {
                        let now = Instant::now();
                        let _ = reply.send(self.slots.iter().map(|s| s.sample(now)).collect());
                    }
                    Cmd::Quiesce => self.quiet = true,
                    Cmd::Release => self.release(),
                    Cmd::Stop => return,
                }
            }
            if now >= next_tick {
                next_tick = now + TICK;
                self.connecting = 0;
                let fd = shared_fd(&self.shared);
                for s in &mut self.slots {
                    tick(s, now, self.connect_timeout, self.quiet, fd);
                    if s.failure.is_none()
                        && matches!(
                            s.client.state(),
                            ClientState::Checking | ClientState::Handshaking
                        )
                    {
                        self.connecting += 1;
                    }
                }
            }
        }
    }

    /// Reads viewer `i`'s own socket until it is empty (edge-triggered).
    fn read_own(&mut self, i: usize, rb: &mut RecvBatch, now: Instant, wall_now: Duration) {
        let Some(s) = self.slots.get_mut(i) else {
            return;
        };
        let Sock::Own(sock) = &s.sock else { return };
        let fd = sock.as_raw_fd();
        rb.drain(fd, &mut |g, buf| s.take(now, wall_now, g, buf));
        if !self.quiet {
            s.flush(-1);
        }
        s.next_timer = s.next_due();
    }

    /// Reads the shared socket until it is empty: each datagram goes to the viewer whose
    /// address it was sent to, if it came from that viewer's server.
    fn read_shared(&mut self, rb: &mut RecvBatch, now: Instant, wall_now: Duration) {
        let fd = shared_fd(&self.shared);
        let mut touched = Vec::new();
        let (index, slots) = (self.index, &mut self.slots);
        rb.drain(fd, &mut |g, buf| {
            let Some(i) = g.to.and_then(|to| shared_slot(index, to)) else {
                return;
            };
            let Some(s) = slots.get_mut(i) else {
                return;
            };
            if g.from.map(SocketAddr::V4) != Some(s.client.server()) {
                return;
            }
            s.take(now, wall_now, g, buf);
            if !s.dirty {
                s.dirty = true;
                touched.push(i);
            }
        });
        for i in touched {
            let s = &mut self.slots[i];
            s.dirty = false;
            if !self.quiet {
                s.flush(fd);
            }
            s.next_timer = s.next_due();
        }
    }

    /// Takes a client from the main thread.
    fn add(&mut self, mut j: Joined, poll: &Poll) {
        j.client.set_verify_every(self.recv.verify_every);
        let idx = self.slots.len();
        let sock = match (j.socket.take(), &self.shared) {
            (None, Some(_)) => {
                if idx >= SHARED_MAX_VIEWERS {
                    eprintln!(
                        "bench: client_{}: a thread addresses at most {SHARED_MAX_VIEWERS} \
                         viewers with --sockets thread (add --threads)",
                        j.id
                    );
                    return;
                }
                Sock::Shared(shared_addr(self.index, idx))
            }
            // A thread with a shared socket also serves viewers with their own (`--sockets
            // auto`, a server off loopback).
            (Some(socket), _) => match self.own_socket(socket, idx, poll) {
                Ok(s) => Sock::Own(s),
                Err(e) => {
                    eprintln!("bench: client_{}: socket: {e}", j.id);
                    return;
                }
            },
            (None, None) => {
                eprintln!("bench: client_{}: socket does not match --sockets", j.id);
                return;
            }
        };
        let mut slot = Slot {
            id: j.id,
            client: j.client,
            sock,
            dirty: false,
            signalling: j.signalling,
            started: j.started,
            failure: None,
            next_timer: None,
            relay: j.relay.map(|ri| Relay {
                turn: TurnClient::new(&ri.user, &ri.pass, Transport::Udp, j.id as u64),
                peer: ri.peer,
                ready: false,
                out: vec![0u8; 2048],
                next_refresh: None,
                refreshes: 0,
            }),
            datagrams: 0,
            datagram_bytes: 0,
            coalesced: 0,
            last_rx: None,
            window: None,
            bps: Range::default(),
            fps: Range::default(),
        };
        if let (Some(r), Sock::Own(sock)) = (slot.relay.as_mut(), &slot.sock)
            && let Ok(n) = r.turn.allocate(Instant::now(), &mut r.out)
        {
            let _ = sock.send(&r.out[..n]);
        }
        slot.flush(shared_fd(&self.shared));
        slot.next_timer = slot.next_due();
        self.slots.push(slot);
        self.connecting += 1;
    }

    /// Readies a viewer's own socket and registers it as `Token(idx)`.
    fn own_socket(
        &mut self,
        socket: StdUdpSocket,
        idx: usize,
        poll: &Poll,
    ) -> std::io::Result<UdpSocket> {
        use nix::sys::socket::{setsockopt, sockopt};
        socket.set_nonblocking(true)?;
        if let Err(e) = setsockopt(&socket, sockopt::ReceiveTimestampns, &true) {
            eprintln!("bench: SO_TIMESTAMPNS: {e}");
        }
        // A kernel without UDP_GRO (before 5.0) refuses it: the datagrams then come one by
        // one, as with --gro false; said once per thread.
        if self.recv.gro
            && let Err(e) = setsockopt(&socket, sockopt::UdpGroSegment, &true)
            && !self.gro_refused
        {
            self.gro_refused = true;
            eprintln!("bench: UDP_GRO refused ({e}): receiving datagram by datagram");
        }
        let mut sock = UdpSocket::from_std(socket);
        poll.registry()
            .register(&mut sock, Token(idx), Interest::READABLE)?;
        Ok(sock)
    }

    /// Deletes the relayed viewers' TURN allocations (refresh with lifetime 0).
    fn release(&mut self) {
        let now = Instant::now();
        for s in &mut self.slots {
            if let (Some(r), Sock::Own(sock)) = (s.relay.as_mut(), &s.sock)
                && !r.turn.busy()
                && let Ok(n) = r.turn.refresh(now, 0, &mut r.out)
            {
                let _ = sock.send(&r.out[..n]);
            }
        }
    }
}

fn tick(
    s: &mut Slot,
    now: Instant,
    connect_timeout: Duration,
    quiet: bool,
    shared: std::os::fd::RawFd,
) {
    if s.failure.is_some() || quiet {
        return;
    }
    let state = s.client.state();
    if matches!(state, ClientState::Checking | ClientState::Handshaking)
        && now.duration_since(s.started) > connect_timeout
    {
        s.failure = Some(if state == ClientState::Checking {
            "ICE timed out"
        } else {
            "DTLS timed out"
        });
        return;
    }
    // The client's next timer is cached: asked again only after input or a timeout ran.
    if s.next_timer.is_some_and(|t| t <= now) {
        s.timers(now, shared);
        s.next_timer = s.next_due();
    }
    if state == ClientState::Connected {
        match s.window {
            // The first window starts at the first packet, so it is a whole one.
            None => {
                let (bytes, frames) = s.totals();
                if bytes > 0 {
                    s.window = Some((now, bytes, frames));
                }
            }
            Some((at, b0, f0)) if now.duration_since(at) >= RATE_WINDOW => {
                let (bytes, frames) = s.totals();
                let secs = now.duration_since(at).as_secs_f64();
                s.bps.add((bytes - b0) as f64 * 8.0 / secs);
                s.fps.add((frames - f0) as f64 / secs);
                s.window = Some((now, bytes, frames));
            }
            _ => {}
        }
    }
}

/// The media threads, and which one takes the next client.
pub struct Workers {
    workers: Vec<Worker>,
}

impl Workers {
    /// Starts `n` media threads (see [`Receive`]).
    pub fn spawn(n: usize, connect_timeout: Duration, recv: Receive) -> std::io::Result<Workers> {
        let workers = (0..n)
            .map(|i| Worker::spawn(i, connect_timeout, recv))
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Workers { workers })
    }

    /// Hands a client to its thread (by client number).
    pub fn add(&self, j: Joined) {
        let w = &self.workers[j.id % self.workers.len()];
        w.send(Cmd::Add(Box::new(j)));
    }

    /// Current samples of every client, in client order.
    pub fn sample(&self) -> Vec<Sample> {
        let (tx, rx) = unbounded();
        for w in &self.workers {
            w.send(Cmd::Sample(tx.clone()));
        }
        drop(tx);
        let mut all: Vec<Sample> = rx.iter().flatten().collect();
        all.sort_by_key(|s| s.id);
        all
    }

    /// Stops all sending; arrivals are still counted.
    pub fn quiesce(&self) {
        for w in &self.workers {
            w.send(Cmd::Quiesce);
        }
    }

    /// Deletes relayed clients' TURN allocations.
    pub fn release(&self) {
        for w in &self.workers {
            w.send(Cmd::Release);
        }
    }

    /// Stops every thread.
    pub fn stop(&mut self) {
        for w in &mut self.workers {
            w.stop();
        }
    }
}

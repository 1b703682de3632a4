//! Media threads: each owns a share of the clients and their UDP sockets, drives their
//! timers, and answers sample requests from the main thread.
//!
//! One connected UDP socket per client: the server tells viewers apart by their address, as
//! it would tell browsers apart, so clients cannot share a socket. mio's epoll is
//! edge-triggered: a readable socket is read with `recvmmsg` until a call returns fewer
//! datagrams than it asked for (the queue was empty then; a later arrival raises a new
//! edge), so the common case is one system call per wake-up, not one per datagram plus a
//! final `EAGAIN`. Arrival times come from the kernel (`SO_TIMESTAMPNS`), so latency and
//! jitter do not include the time a datagram waited for this thread.
//!
//! `UDP_GRO` (on unless `--gro false`): a server that sends each viewer's run of equal-size
//! packets as one `UDP_SEGMENT` message (tern's GSO) reaches a socket with `UDP_GRO` set
//! as that one message, with its segment size in a control message, instead of being cut
//! into datagrams by the kernel and queued one by one. The message is split here at the
//! segment size; every segment is counted as a datagram and goes to the client (SRTP
//! checked) on its own, exactly as if it had come alone.

use std::io::{ErrorKind, IoSliceMut};
use std::net::UdpSocket as StdUdpSocket;
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
/// Datagrams read per `recvmmsg` call.
const BATCH: usize = 16;
/// Largest datagram read whole.
const MAX_DATAGRAM: usize = 2048;
/// Largest `UDP_GRO` message: a UDP payload's limit.
const MAX_GRO: usize = 65_536;

/// Buffers and headers for `recvmmsg`, reused across calls.
struct RecvBatch {
    bufs: Vec<Vec<u8>>,
    hdrs: nix::sys::socket::MultiHeaders<()>,
    /// The control buffer each header gets.
    cmsg: Vec<u8>,
    /// Length, kernel arrival time (since the Unix epoch) and, for a `UDP_GRO` message of
    /// several datagrams, their segment size, of each message read.
    got: Vec<(usize, Option<Duration>, Option<usize>)>,
}

impl RecvBatch {
    /// Buffers for single datagrams, or for `UDP_GRO` messages if `gro`.
    fn new(gro: bool) -> Self {
        let cmsg = nix::cmsg_space!(nix::sys::time::TimeSpec, i32);
        let size = if gro { MAX_GRO } else { MAX_DATAGRAM };
        RecvBatch {
            bufs: (0..BATCH).map(|_| vec![0u8; size]).collect(),
            hdrs: nix::sys::socket::MultiHeaders::preallocate(BATCH, Some(cmsg.clone())),
            cmsg,
            got: Vec::with_capacity(BATCH),
        }
    }

    /// Reads up to [`BATCH`] datagrams from `fd` without blocking into `self.got`.
    fn recv(&mut self, fd: std::os::fd::RawFd) -> nix::Result<()> {
        use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmmsg};
        self.got.clear();
        let mut iovs: Vec<[IoSliceMut<'_>; 1]> = self
            .bufs
            .iter_mut()
            .map(|b| [IoSliceMut::new(&mut b[..])])
            .collect();
        // nix leaves each header's control length at what the kernel wrote into it on the
        // previous call: after a datagram with only its timestamp, a `UDP_GRO` message's
        // segment size would not fit (MSG_CTRUNC) and its segments would be read as one
        // datagram. Fresh headers every call (three small allocations).
        self.hdrs = nix::sys::socket::MultiHeaders::preallocate(BATCH, Some(self.cmsg.clone()));
        let res = recvmmsg(
            fd,
            &mut self.hdrs,
            iovs.iter_mut(),
            MsgFlags::MSG_DONTWAIT,
            None,
        )?;
        for m in res {
            let (mut ts, mut seg) = (None, None);
            if let Ok(cmsgs) = m.cmsgs() {
                for c in cmsgs {
                    match c {
                        ControlMessageOwned::ScmTimestampns(t) => ts = Some(Duration::from(t)),
                        ControlMessageOwned::UdpGroSegments(n) if n > 0 => {
                            seg = Some(n as usize);
                        }
                        _ => {}
                    }
                }
            }
            self.got.push((m.bytes, ts, seg));
        }
        Ok(())
    }
}

/// The datagrams of one message read: `len` bytes, cut every `seg` bytes if the kernel
/// coalesced several (`UDP_GRO`; the last may be shorter), else whole.
fn segments(len: usize, seg: Option<usize>) -> impl Iterator<Item = std::ops::Range<usize>> {
    let step = seg.filter(|&s| s < len).unwrap_or(len).max(1);
    // An empty datagram is still one (the client counts it as dropped).
    (0..len.div_ceil(step).max(1)).map(move |i| i * step..((i + 1) * step).min(len))
}

/// Maps kernel arrival times (wall clock) to [`Instant`]s.
fn arrival(now: Instant, wall_now: Duration, ts: Option<Duration>) -> Instant {
    match ts {
        Some(t) if t <= wall_now => now.checked_sub(wall_now - t).unwrap_or(now),
        _ => now,
    }
}

/// A client whose signalling is done, handed to a media thread.
pub struct Joined {
    /// Client number (0-based, in connection order).
    pub id: usize,
    /// The sans-IO client.
    pub client: Client,
    /// Its socket, connected to the server's media address.
    pub socket: StdUdpSocket,
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
    sock: UdpSocket,
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
    fn flush(&mut self) {
        let sock = &self.sock;
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

    /// A datagram from the socket: media for the client, or TURN's.
    fn input(&mut self, at: Instant, buf: &mut [u8]) {
        let Some(r) = self.relay.as_mut() else {
            self.client.handle_input(at, buf);
            return;
        };
        match r.turn.handle_input(at, buf, &mut r.out) {
            Received::Data { data, .. } => {
                let _ = self.client.handle_input(at, &mut buf[data]);
            }
            other => {
                if let Some(f) = r.on(at, other, &self.sock) {
                    self.failure = Some(f);
                }
            }
        }
    }

    /// Runs due timers of the client and of its TURN client.
    fn timers(&mut self, now: Instant) {
        if self.client.poll_timeout().is_some_and(|t| t <= now) {
            self.client.handle_timeout(now);
        }
        if let Some(r) = self.relay.as_mut() {
            if r.turn.poll_timeout().is_some_and(|t| t <= now) {
                let res = r.turn.handle_timeout(now, &mut r.out);
                if let Some(f) = r.on(now, res, &self.sock) {
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
                    let _ = self.sock.send(&r.out[..n]);
                }
                r.next_refresh = Some(now + REBIND);
            }
        }
        self.flush();
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
        let (tx, rx) = unbounded();
        let thread = std::thread::Builder::new()
            .name(format!("bench-media-{index}"))
            .spawn(move || run(poll, rx, connect_timeout, recv))?;
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

fn run(mut poll: Poll, rx: Receiver<Cmd>, connect_timeout: Duration, recv: Receive) {
    let Receive { gro, verify_every } = recv;
    let mut events = Events::with_capacity(1024);
    let mut slots: Vec<Slot> = Vec::new();
    let mut rb = RecvBatch::new(gro);
    let mut gro_refused = false;
    let mut quiet = false;
    let mut next_tick = Instant::now() + TICK;
    let mut connecting = 0usize;
    loop {
        let mut wait = next_tick.saturating_duration_since(Instant::now());
        if connecting == 0 && events.iter().count() < events.capacity() && !slots.is_empty() {
            std::thread::sleep(PACE.min(wait));
            wait = Duration::ZERO;
        }
        if let Err(e) = poll.poll(&mut events, Some(wait))
            && e.kind() != ErrorKind::Interrupted
        {
            eprintln!("bench: poll failed: {e}");
            return;
        }
        let mut now = Instant::now();
        let wall_now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        for ev in events.iter() {
            if ev.token() == WAKER {
                continue;
            }
            let Some(s) = slots.get_mut(ev.token().0) else {
                continue;
            };
            let fd = s.sock.as_raw_fd();
            loop {
                match rb.recv(fd) {
                    Ok(()) => {}
                    Err(nix::errno::Errno::EINTR) => continue,
                    // EAGAIN: nothing queued. Anything else (ICMP port unreachable and the
                    // like): the server is gone or refused us; timers decide.
                    Err(_) => break,
                }
                for (i, &(n, ts, seg)) in rb.got.iter().enumerate() {
                    let at = arrival(now, wall_now, ts);
                    s.last_rx = Some(at);
                    let mut count = 0;
                    for r in segments(n, seg) {
                        count += 1;
                        s.datagram_bytes += r.len() as u64;
                        s.input(at, &mut rb.bufs[i][r]);
                    }
                    s.datagrams += count;
                    if count > 1 {
                        s.coalesced += count;
                    }
                }
                if rb.got.len() < BATCH {
                    break;
                }
            }
            if !quiet {
                s.flush();
            }
            s.next_timer = s.next_due();
        }
        while let Ok(cmd) = rx.try_recv() {
            match cmd {
                Cmd::Add(j) => {
                    let mut j = *j;
                    j.client.set_verify_every(verify_every);
                    let idx = slots.len();
                    if let Err(e) = j.socket.set_nonblocking(true) {
                        eprintln!("bench: client_{}: socket: {e}", j.id);
                        continue;
                    }
                    if let Err(e) = nix::sys::socket::setsockopt(
                        &j.socket,
                        nix::sys::socket::sockopt::ReceiveTimestampns,
                        &true,
                    ) {
                        eprintln!("bench: client_{}: SO_TIMESTAMPNS: {e}", j.id);
                    }
                    // A kernel without UDP_GRO (before 5.0) refuses it: the datagrams then
                    // come one by one, as with --gro false; said once per thread.
                    if gro
                        && let Err(e) = nix::sys::socket::setsockopt(
                            &j.socket,
                            nix::sys::socket::sockopt::UdpGroSegment,
                            &true,
                        )
                        && !gro_refused
                    {
                        gro_refused = true;
                        eprintln!("bench: UDP_GRO refused ({e}): receiving datagram by datagram");
                    }
                    let mut sock = UdpSocket::from_std(j.socket);
                    if let Err(e) =
                        poll.registry()
                            .register(&mut sock, Token(idx), Interest::READABLE)
                    {
                        eprintln!("bench: client_{}: register: {e}", j.id);
                        continue;
                    }
                    let mut slot = Slot {
                        id: j.id,
                        client: j.client,
                        sock,
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
                    if let Some(r) = slot.relay.as_mut()
                        && let Ok(n) = r.turn.allocate(Instant::now(), &mut r.out)
                    {
                        let _ = slot.sock.send(&r.out[..n]);
                    }
                    slot.flush();
                    slot.next_timer = slot.next_due();
                    slots.push(slot);
                    connecting += 1;
                }
                Cmd::Sample(reply) => {
                    now = Instant::now();
                    let _ = reply.send(slots.iter().map(|s| s.sample(now)).collect());
                }
                Cmd::Quiesce => quiet = true,
                Cmd::Release => {
                    // Refresh with lifetime 0 deletes the allocation.
                    let now = Instant::now();
                    for s in &mut slots {
                        if let Some(r) = s.relay.as_mut()
                            && !r.turn.busy()
                            && let Ok(n) = r.turn.refresh(now, 0, &mut r.out)
                        {
                            let _ = s.sock.send(&r.out[..n]);
                        }
                    }
                }
                Cmd::Stop => return,
            }
        }
        if now >= next_tick {
            next_tick = now + TICK;
            connecting = 0;
            for s in &mut slots {
                tick(s, now, connect_timeout, quiet);
                if s.failure.is_none()
                    && matches!(
                        s.client.state(),
                        ClientState::Checking | ClientState::Handshaking
                    )
                {
                    connecting += 1;
                }
            }
        }
    }
}

fn tick(s: &mut Slot, now: Instant, connect_timeout: Duration, quiet: bool) {
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
        s.timers(now);
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

#[cfg(test)]
mod tests {
    use super::segments;

    #[test]
    fn a_gro_message_is_cut_at_its_segment_size() {
        let cut = |len, seg| -> Vec<(usize, usize)> {
            segments(len, seg).map(|r| (r.start, r.end)).collect()
        };
        assert_eq!(
            cut(2_500, Some(1_000)),
            [(0, 1_000), (1_000, 2_000), (2_000, 2_500)]
        );
        assert_eq!(cut(3_000, Some(1_000)).len(), 3);
        // One datagram: whole, with or without a segment size.
        assert_eq!(cut(700, None), [(0, 700)]);
        assert_eq!(cut(700, Some(1_000)), [(0, 700)]);
        assert_eq!(cut(700, Some(700)), [(0, 700)]);
        // An empty datagram is still one.
        assert_eq!(cut(0, None), [(0, 0)]);
    }
}

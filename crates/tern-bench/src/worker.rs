//! Media threads: each owns a share of the clients and their UDP sockets, drives their
//! timers, and answers sample requests from the main thread.
//!
//! One connected UDP socket per client: the server tells viewers apart by their address, as
//! it would tell browsers apart, so clients cannot share a socket. mio's epoll is
//! edge-triggered, so every readable socket is read until it would block.

use std::io::ErrorKind;
use std::net::UdpSocket as StdUdpSocket;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, unbounded};
use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token, Waker};
use tern_rtc::client::{Client, ClientState, ConnectTimes, TrackStats};
use tern_rtc::clip::MediaKind;

/// How often client timers are checked.
const TICK: Duration = Duration::from_millis(5);
/// Window of the per-client bitrate and frame-rate minimum and maximum.
const RATE_WINDOW: Duration = Duration::from_secs(1);
/// A connected client that received nothing for this long counts as disconnected.
const SILENCE: Duration = Duration::from_secs(5);
const WAKER: Token = Token(usize::MAX);

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
}

/// What the main thread asks of a media thread.
pub enum Cmd {
    /// Take a new client.
    Add(Box<Joined>),
    /// Send current samples of every client.
    Sample(Sender<Vec<Sample>>),
    /// Stop sending (checks, reports, NACKs) but keep counting what arrives.
    Quiesce,
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
    /// Datagrams received (everything, before any check).
    pub datagrams: u64,
    /// Bytes of those datagrams.
    pub datagram_bytes: u64,
}

struct Slot {
    id: usize,
    client: Client,
    sock: UdpSocket,
    signalling: Duration,
    started: Instant,
    failure: Option<&'static str>,
    datagrams: u64,
    datagram_bytes: u64,
    last_rx: Option<Instant>,
    /// Bytes and video frames at the start of the current rate window.
    window: Option<(Instant, u64, u64)>,
    bps: Range,
    fps: Range,
}

impl Slot {
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
            video: self.client.track(MediaKind::Video).cloned(),
            audio: self.client.track(MediaKind::Audio).cloned(),
            bps: self.bps,
            fps: self.fps,
            dropped: self.client.dropped,
            datagrams: self.datagrams,
            datagram_bytes: self.datagram_bytes,
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
    pub fn spawn(index: usize, connect_timeout: Duration) -> std::io::Result<Worker> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let (tx, rx) = unbounded();
        let thread = std::thread::Builder::new()
            .name(format!("bench-media-{index}"))
            .spawn(move || run(poll, rx, connect_timeout))?;
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

fn run(mut poll: Poll, rx: Receiver<Cmd>, connect_timeout: Duration) {
    let mut events = Events::with_capacity(1024);
    let mut slots: Vec<Slot> = Vec::new();
    let mut buf = vec![0u8; 2048];
    let mut quiet = false;
    let mut next_tick = Instant::now() + TICK;
    loop {
        let wait = next_tick.saturating_duration_since(Instant::now());
        if let Err(e) = poll.poll(&mut events, Some(wait))
            && e.kind() != ErrorKind::Interrupted
        {
            eprintln!("bench: poll failed: {e}");
            return;
        }
        let mut now = Instant::now();
        for ev in events.iter() {
            if ev.token() == WAKER {
                continue;
            }
            let Some(s) = slots.get_mut(ev.token().0) else {
                continue;
            };
            loop {
                match s.sock.recv(&mut buf) {
                    Ok(n) => {
                        s.datagrams += 1;
                        s.datagram_bytes += n as u64;
                        s.last_rx = Some(now);
                        s.client.handle_input(now, &mut buf[..n]);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    // ICMP port unreachable and the like: the server is gone or refused us;
                    // timers decide the client's fate.
                    Err(_) => break,
                }
            }
            if !quiet {
                let sock = &s.sock;
                s.client.drain(&mut |d| {
                    let _ = sock.send(d);
                });
            }
        }
        while let Ok(cmd) = rx.try_recv() {
            match cmd {
                Cmd::Add(j) => {
                    let j = *j;
                    let idx = slots.len();
                    if let Err(e) = j.socket.set_nonblocking(true) {
                        eprintln!("bench: client_{}: socket: {e}", j.id);
                        continue;
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
                        datagrams: 0,
                        datagram_bytes: 0,
                        last_rx: None,
                        window: None,
                        bps: Range::default(),
                        fps: Range::default(),
                    };
                    let sock = &slot.sock;
                    slot.client.drain(&mut |d| {
                        let _ = sock.send(d);
                    });
                    slots.push(slot);
                }
                Cmd::Sample(reply) => {
                    now = Instant::now();
                    let _ = reply.send(slots.iter().map(|s| s.sample(now)).collect());
                }
                Cmd::Quiesce => quiet = true,
                Cmd::Stop => return,
            }
        }
        if now >= next_tick {
            next_tick = now + TICK;
            for s in &mut slots {
                tick(s, now, connect_timeout, quiet);
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
    if s.client.poll_timeout().is_some_and(|t| t <= now) {
        s.client.handle_timeout(now);
        let sock = &s.sock;
        s.client.drain(&mut |d| {
            let _ = sock.send(d);
        });
    }
    if state == ClientState::Connected {
        let (bytes, frames) = s.totals();
        match s.window {
            // The first window starts at the first packet, so it is a whole one.
            None if bytes > 0 => s.window = Some((now, bytes, frames)),
            Some((at, b0, f0)) if now.duration_since(at) >= RATE_WINDOW => {
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
    /// Starts `n` media threads.
    pub fn spawn(n: usize, connect_timeout: Duration) -> std::io::Result<Workers> {
        let workers = (0..n)
            .map(|i| Worker::spawn(i, connect_timeout))
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

    /// Stops every thread.
    pub fn stop(&mut self) {
        for w in &mut self.workers {
            w.stop();
        }
    }
}

//! `str0m-fanout`: the str0m baseline of tern's benchmark suite (issue 8).
//!
//! A WHEP server that does what tern does, the way a str0m application would: one
//! [`str0m::Rtc`] per viewer in RTP mode (ICE lite, as tern), one shared UDP port, and each
//! packet of the source written to every connected viewer with `StreamTx::write_rtp` (the
//! payload is one `Arc<[u8]>` shared by all viewers, as str0m allows). Everything str0m
//! then sends goes out through the same `sendmmsg` batch tern's engine uses
//! ([`tern_server::media::batch::SendBatch`]), so the two differ only in the per-viewer session.
//!
//! What it reports, for `bench/run.sh`:
//! - `GET /stats`: the counting allocator's live bytes (tern's `CountingAlloc`, with aws-lc's
//!   heap counted as in tern) and the session, packet and fan-out counters, as JSON;
//! - on exit (after `--seconds`, or SIGINT/SIGTERM) the same JSON on stdout.
//!
//! The per-packet work is the function [`fan_out`], kept out of line so that
//! `valgrind --tool=callgrind --toggle-collect=*fan_out*` counts exactly it; `/stats`
//! counts the packets it wrote (`fanout_writes`), so instructions per forwarded packet per
//! viewer = collected instructions / `fanout_writes`.
//!
//! Sources: `lite` is tern's `--clip lite` (the same clip `tern demo --clip lite` and
//! `bench/pion-whep` send), paced in real time; `synthetic` is `tern lab`'s stream (14 x
//! 1188-byte video payloads per frame at 30 fps plus 50 x 120-byte audio packets a second),
//! for instruction counts comparable with `bench/core.sh`.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, post};
use clap::{Parser, ValueEnum};
use crossbeam_channel::{Receiver, Sender, bounded};
use mio::{Events, Interest, Poll, Token};
use str0m::change::SdpOffer;
use str0m::format::PayloadParams;
use str0m::media::{MediaKind as StrKind, Mid, Pt};
use str0m::net::{Protocol, Receive};
use str0m::rtp::{AbsCaptureTime, Extension, ExtensionValues, RtpWrite, SeqNo};
use str0m::{Candidate, Event, IceConnectionState, Input, Output, Rtc, RtcConfig};
use tern_proto::codec::MediaKind;
use tern_rtc::clip::{Clip, ClipSource};
use tern_server::media::batch::SendBatch;

/// Counting allocator: live heap bytes for `/stats`, aws-lc's included.
#[global_allocator]
static ALLOC: tern_pool::CountingAlloc = tern_pool::CountingAlloc::new();

/// `abs-capture-time` extension id: the one tern bench's offer uses.
const ABS_CAPTURE_TIME_ID: u8 = 4;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum SourceKind {
    /// tern's lite clip in real time (~300 kbit/s, ~94 packets/s).
    Lite,
    /// `tern lab`'s synthetic stream (~4 Mbit/s of 1188-byte payloads + audio).
    Synthetic,
}

#[derive(Debug, Parser)]
#[command(about = "str0m fan-out WHEP server: the str0m baseline of bench/run.sh")]
struct Args {
    /// HTTP listener (WHEP at /live/demo/whep, counters at /stats). Port 0 takes a free one;
    /// the bound addresses are printed on stderr (`str0m-fanout: listening http=.. udp=..`).
    #[arg(long, default_value = "127.0.0.1:18570")]
    http: SocketAddr,
    /// The one UDP port for all media (also the announced host candidate).
    #[arg(long, default_value = "127.0.0.1:18571")]
    udp: SocketAddr,
    /// What to send.
    #[arg(long, value_enum, default_value_t = SourceKind::Lite)]
    source: SourceKind,
    /// Frames per second of the synthetic source (30 as `tern lab`; lower keeps up under
    /// callgrind, and the cost per packet does not depend on it).
    #[arg(long, default_value_t = 30)]
    synthetic_fps: u32,
    /// Exit after this many seconds (0: run until SIGINT/SIGTERM).
    #[arg(long, default_value_t = 0)]
    seconds: u64,
}

/// Counters shared between the media thread and the HTTP side.
#[derive(Debug, Default)]
struct Stats {
    sessions: AtomicU64,
    connected: AtomicU64,
    created: AtomicU64,
    failed: AtomicU64,
    source_packets: AtomicU64,
    /// `write_rtp` calls made by [`fan_out`] (packets x connected viewers).
    fanout_writes: AtomicU64,
    /// Datagrams str0m handed out inside [`fan_out`] (should equal `fanout_writes`).
    fanout_transmits: AtomicU64,
    /// Datagrams str0m handed out elsewhere (ICE, DTLS, RTCP).
    other_transmits: AtomicU64,
    datagrams_sent: AtomicU64,
    datagrams_dropped: AtomicU64,
}

impl Stats {
    fn json(&self) -> serde_json::Value {
        let a = tern_pool::CountingAlloc::stats();
        serde_json::json!({
            "server": "str0m",
            "live_bytes": a.live_bytes,
            "peak_bytes": a.peak_bytes,
            "sessions": self.sessions.load(Relaxed),
            "connected": self.connected.load(Relaxed),
            "created": self.created.load(Relaxed),
            "failed": self.failed.load(Relaxed),
            "source_packets": self.source_packets.load(Relaxed),
            "fanout_writes": self.fanout_writes.load(Relaxed),
            "fanout_transmits": self.fanout_transmits.load(Relaxed),
            "other_transmits": self.other_transmits.load(Relaxed),
            "datagrams_sent": self.datagrams_sent.load(Relaxed),
            "datagrams_dropped": self.datagrams_dropped.load(Relaxed),
        })
    }
}

/// Requests from the HTTP side to the media thread.
enum Command {
    Offer(String, Sender<Result<(u64, String), String>>),
    Delete(u64, Sender<bool>),
}

/// One packet of the source, its payload shared by every viewer.
struct Packet {
    kind: MediaKind,
    seq: u64,
    rtp_ts: u32,
    marker: bool,
    capture: Instant,
    payload: Arc<[u8]>,
}

/// One viewer: a str0m `Rtc` and what is needed to write to it.
struct Session {
    id: u64,
    rtc: Rtc,
    connected: bool,
    next: Instant,
    video: Option<(Mid, Pt)>,
    audio: Option<(Mid, Pt)>,
}

fn main() -> std::process::ExitCode {
    tern_pool::count_crypto_allocations();
    let args = Args::parse();
    match run(&args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("str0m-fanout: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let socket = UdpSocket::bind(args.udp).map_err(|e| format!("bind {}: {e}", args.udp))?;
    let local = socket.local_addr().map_err(|e| e.to_string())?;
    socket.set_nonblocking(true).map_err(|e| e.to_string())?;
    let sock2 = socket2::SockRef::from(&socket);
    // As tern's engine: large buffers, so a keyframe burst to many viewers is not dropped.
    let _ = sock2.set_send_buffer_size(4 << 20);
    let _ = sock2.set_recv_buffer_size(4 << 20);
    let stats = Arc::new(Stats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = bounded::<Command>(1024);
    let source = args.source;
    let fps = u64::from(args.synthetic_fps.clamp(1, 240));
    let media = {
        let (stats, stop) = (stats.clone(), stop.clone());
        std::thread::Builder::new()
            .name("str0m-media".into())
            .spawn(move || media_loop(socket, local, (source, fps), &rx, &stats, &stop))
            .map_err(|e| e.to_string())?
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("str0m-http")
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let http = args.http;
    let seconds = args.seconds;
    let st = stats.clone();
    let served = rt.block_on(async move {
        let app = Router::new()
            .route(
                "/live/demo/whep",
                post(offer).head(|| async { StatusCode::OK }),
            )
            .route("/live/demo/whep/{id}", delete(remove))
            .route(
                "/stats",
                axum::routing::get(|State(s): State<AppState>| async move {
                    axum::Json(s.stats.json())
                }),
            )
            .with_state(AppState { tx, stats: st });
        let listener = tokio::net::TcpListener::bind(http)
            .await
            .map_err(|e| format!("bind {http}: {e}"))?;
        // The bound addresses, so a caller can ask for port 0 and read them (stderr: stdout
        // carries the final counters).
        let bound = listener.local_addr().map_err(|e| e.to_string())?;
        eprintln!("str0m-fanout: listening http={bound} udp={local}");
        let shutdown = async move {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(s) => s,
                    Err(_) => return,
                };
            let limit = async {
                if seconds > 0 {
                    tokio::time::sleep(Duration::from_secs(seconds)).await;
                } else {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
                _ = limit => {}
            }
        };
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(|e| e.to_string())
    });
    stop.store(true, Relaxed);
    let _ = media.join();
    println!("{}", stats.json());
    served
}

#[derive(Clone)]
struct AppState {
    tx: Sender<Command>,
    stats: Arc<Stats>,
}

async fn offer(State(s): State<AppState>, body: String) -> Response {
    let (rtx, rrx) = bounded(1);
    if s.tx.send(Command::Offer(body, rtx)).is_err() {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let reply = tokio::task::spawn_blocking(move || rrx.recv_timeout(Duration::from_secs(10)))
        .await
        .ok()
        .and_then(|r| r.ok());
    match reply {
        Some(Ok((id, answer))) => (
            StatusCode::CREATED,
            [
                (header::CONTENT_TYPE, "application/sdp".to_string()),
                (header::LOCATION, format!("/live/demo/whep/{id}")),
            ],
            answer,
        )
            .into_response(),
        Some(Err(e)) => (StatusCode::BAD_REQUEST, e).into_response(),
        None => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

async fn remove(State(s): State<AppState>, Path(id): Path<u64>) -> StatusCode {
    let (rtx, rrx) = bounded(1);
    if s.tx.send(Command::Delete(id, rtx)).is_err() {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let found = tokio::task::spawn_blocking(move || rrx.recv_timeout(Duration::from_secs(10)))
        .await
        .ok()
        .and_then(|r| r.ok());
    match found {
        Some(true) => StatusCode::OK,
        Some(false) => StatusCode::NOT_FOUND,
        None => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// The media source: the lite clip or `tern lab`'s synthetic stream, both paced in real time.
enum Source {
    Clip(ClipSource),
    Synthetic(Synthetic),
}

impl Source {
    fn poll_timeout(&self) -> Instant {
        match self {
            Source::Clip(c) => c.poll_timeout(),
            Source::Synthetic(s) => s.next_at,
        }
    }

    fn poll(&mut self, now: Instant, out: &mut Vec<Packet>) {
        match self {
            Source::Clip(c) => c.poll(now, &mut |mp| {
                out.push(Packet {
                    kind: mp.kind,
                    seq: mp.seq,
                    rtp_ts: mp.rtp_ts,
                    marker: mp.marker,
                    capture: mp.capture_time,
                    payload: Arc::from(mp.payload),
                })
            }),
            Source::Synthetic(s) => s.poll(now, out),
        }
    }
}

/// `tern lab`'s synthetic stream: per frame (1/30 s by default) of 14 x 1188-byte FU-A payloads
/// (4 Mbit/s), and 50 x 120-byte audio packets a second (2, 2, 1 per frame).
struct Synthetic {
    fps: u64,
    frame: u64,
    video_seq: u64,
    audio_seq: u64,
    start: Instant,
    next_at: Instant,
}

impl Synthetic {
    const PER_FRAME: usize = 14;
    const PAYLOAD: usize = 1188;

    fn poll(&mut self, now: Instant, out: &mut Vec<Packet>) {
        while self.next_at <= now {
            let key = self.frame.is_multiple_of(30);
            let nal = if key { 5 } else { 1 };
            for i in 0..Self::PER_FRAME {
                let mut b = vec![0x55u8; Self::PAYLOAD];
                b[0] = 0x7c;
                b[1] = match (i == 0, i + 1 == Self::PER_FRAME) {
                    (true, _) => 0x80 | nal,
                    (false, true) => 0x40 | nal,
                    _ => nal,
                };
                out.push(Packet {
                    kind: MediaKind::Video,
                    seq: self.video_seq,
                    rtp_ts: (self.frame * 3000) as u32,
                    marker: i + 1 == Self::PER_FRAME,
                    capture: self.next_at,
                    payload: b.into(),
                });
                self.video_seq += 1;
            }
            for _ in 0..[2usize, 2, 1][(self.frame % 3) as usize] {
                out.push(Packet {
                    kind: MediaKind::Audio,
                    seq: self.audio_seq,
                    rtp_ts: (self.audio_seq * 960) as u32,
                    marker: false,
                    capture: self.next_at,
                    payload: vec![0x11u8; 120].into(),
                });
                self.audio_seq += 1;
            }
            self.frame += 1;
            self.next_at = self.start + Duration::from_micros(self.frame * 1_000_000 / self.fps);
        }
    }
}

const UDP: Token = Token(0);

fn media_loop(
    socket: UdpSocket,
    local: SocketAddr,
    (source, fps): (SourceKind, u64),
    rx: &Receiver<Command>,
    stats: &Stats,
    stop: &AtomicBool,
) {
    let Ok(mut poll) = Poll::new() else {
        eprintln!("str0m-fanout: no poll");
        return;
    };
    let fd = socket.as_raw_fd();
    if poll
        .registry()
        .register(&mut mio::unix::SourceFd(&fd), UDP, Interest::READABLE)
        .is_err()
    {
        eprintln!("str0m-fanout: cannot register the socket");
        return;
    }
    let mut events = Events::with_capacity(16);
    let start = Instant::now();
    // Wall clock of `start`, to stamp abs-capture-time from the source's Instants.
    let wall0 = SystemTime::now();
    let mut src = match source {
        SourceKind::Lite => match Clip::builtin_lite() {
            Ok(c) => Source::Clip(ClipSource::new(Arc::new(c), start)),
            Err(e) => {
                eprintln!("str0m-fanout: clip: {e}");
                return;
            }
        },
        SourceKind::Synthetic => Source::Synthetic(Synthetic {
            frame: 0,
            video_seq: 0,
            audio_seq: 0,
            fps,
            start,
            next_at: start,
        }),
    };
    let mut sessions: Vec<Session> = Vec::new();
    let mut by_addr: HashMap<SocketAddr, u64> = HashMap::new();
    let mut next_id = 1u64;
    let mut batch = SendBatch::new();
    let mut buf = vec![0u8; 2048];
    let mut fresh = Vec::new();
    while !stop.load(Relaxed) {
        let now = Instant::now();
        while let Ok(cmd) = rx.try_recv() {
            match cmd {
                Command::Offer(sdp, reply) => {
                    let r = accept(&sdp, local, now, next_id);
                    let r = match r {
                        Ok((s, answer)) => {
                            next_id += 1;
                            let id = s.id;
                            sessions.push(s);
                            stats.created.fetch_add(1, Relaxed);
                            Ok((id, answer))
                        }
                        Err(e) => {
                            stats.failed.fetch_add(1, Relaxed);
                            Err(e)
                        }
                    };
                    let _ = reply.send(r);
                }
                Command::Delete(id, reply) => {
                    let found = sessions.iter().position(|s| s.id == id);
                    if let Some(i) = found {
                        let mut s = sessions.swap_remove(i);
                        s.rtc.disconnect();
                        by_addr.retain(|_, v| *v != id);
                    }
                    let _ = reply.send(found.is_some());
                }
            }
        }
        // Datagrams in: demultiplex by source address once known, else ask each session.
        while let Ok((n, from)) = socket.recv_from(&mut buf) {
            let Ok(r) = Receive::new(Protocol::Udp, from, local, &buf[..n]) else {
                continue;
            };
            let input = Input::Receive(now, r);
            let idx = match by_addr.get(&from) {
                Some(id) => sessions.iter().position(|s| s.id == *id),
                None => {
                    let i = sessions.iter().position(|s| s.rtc.accepts(&input));
                    if let Some(i) = i {
                        by_addr.insert(from, sessions[i].id);
                    }
                    i
                }
            };
            if let Some(i) = idx {
                let s = &mut sessions[i];
                if s.rtc.handle_input(input).is_ok() {
                    drain(s, &mut batch, fd, stats, false);
                }
            }
        }
        // Source packets out to every connected viewer.
        if src.poll_timeout() <= now {
            fresh.clear();
            src.poll(now, &mut fresh);
            stats.source_packets.fetch_add(fresh.len() as u64, Relaxed);
            fan_out(
                &fresh,
                &mut sessions,
                &mut batch,
                fd,
                now,
                (start, wall0),
                stats,
            );
        }
        // Timers.
        for s in sessions.iter_mut() {
            if s.next <= now && s.rtc.handle_input(Input::Timeout(now)).is_ok() {
                drain(s, &mut batch, fd, stats, false);
            }
        }
        flush(&mut batch, fd, stats);
        let before = sessions.len();
        sessions.retain(|s| s.rtc.is_alive());
        if sessions.len() != before {
            by_addr.retain(|_, id| sessions.iter().any(|s| s.id == *id));
        }
        stats.sessions.store(sessions.len() as u64, Relaxed);
        stats.connected.store(
            sessions.iter().filter(|s| s.connected).count() as u64,
            Relaxed,
        );
        let mut next = src.poll_timeout().min(now + Duration::from_millis(5));
        for s in &sessions {
            next = next.min(s.next);
        }
        let wait = next.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            let _ = poll.poll(&mut events, Some(wait));
        }
    }
}

/// Answers a WHEP offer with a new ICE-lite, RTP-mode str0m session.
fn accept(
    sdp: &str,
    local: SocketAddr,
    now: Instant,
    id: u64,
) -> Result<(Session, String), String> {
    let offer = SdpOffer::from_sdp_string(sdp).map_err(|e| format!("offer: {e}"))?;
    let mut rtc = RtcConfig::new()
        .set_ice_lite(true)
        .set_rtp_mode(true)
        .clear_codecs()
        .enable_h264(true)
        .enable_opus(true, false)
        .clear_extension_map()
        .set_extension(ABS_CAPTURE_TIME_ID, Extension::AbsoluteCaptureTime)
        .set_stats_interval(None)
        .build(now);
    let cand = Candidate::host(local, "udp").map_err(|e| format!("candidate: {e}"))?;
    rtc.add_local_candidate(cand);
    let answer = rtc
        .sdp_api()
        .accept_offer(offer)
        .map_err(|e| format!("accept_offer: {e}"))?;
    let mut s = Session {
        id,
        rtc,
        connected: false,
        next: now,
        video: None,
        audio: None,
    };
    while let Ok(out) = s.rtc.poll_output() {
        if let Output::Timeout(t) = out {
            s.next = t;
            break;
        }
    }
    // The offer names the mids; the payload type is the first offered one str0m kept.
    let parsed =
        tern_proto::sdp::SessionDescription::parse(sdp).map_err(|e| format!("offer: {e}"))?;
    let codecs: Vec<PayloadParams> = s.rtc.codec_config().params().to_vec();
    for m in parsed.media() {
        let Some(mid) = m.mid() else { continue };
        let mid = Mid::from(mid);
        let pt = s.rtc.media(mid).and_then(|md| {
            md.remote_pts()
                .iter()
                .copied()
                .find(|pt| codecs.iter().any(|c| c.pt() == *pt))
        });
        let Some(pt) = pt else { continue };
        match s.rtc.media(mid).map(|md| md.kind()) {
            Some(StrKind::Video) => s.video = Some((mid, pt)),
            Some(StrKind::Audio) => s.audio = Some((mid, pt)),
            None => {}
        }
    }
    if s.video.is_none() && s.audio.is_none() {
        return Err("offer has no H264 video or Opus audio str0m accepts".into());
    }
    Ok((s, answer.to_sdp_string()))
}

/// Writes every packet to every connected viewer and sends what str0m makes of it: the
/// per-packet work the callgrind figure counts (str0m's `write_rtp`, the timeout that
/// releases the packets, its RTP/SRTP output in `poll_output`, the copy into the send
/// batch and the `sendmmsg` bookkeeping). Viewer by viewer, each getting all the packets
/// that are due (a frame's worth): str0m's most favourable order.
#[inline(never)]
fn fan_out(
    packets: &[Packet],
    sessions: &mut [Session],
    batch: &mut SendBatch,
    fd: i32,
    now: Instant,
    (start, wall0): (Instant, SystemTime),
    stats: &Stats,
) {
    let mut writes = 0u64;
    for s in sessions.iter_mut() {
        if !s.connected {
            continue;
        }
        let mut wrote = false;
        for p in packets {
            let target = match p.kind {
                MediaKind::Video => s.video,
                MediaKind::Audio => s.audio,
            };
            let Some((mid, pt)) = target else { continue };
            let ext = ExtensionValues {
                abs_capture_time: Some(AbsCaptureTime {
                    capture_time: wall0 + p.capture.saturating_duration_since(start),
                    clock_offset: None,
                }),
                ..Default::default()
            };
            let mut api = s.rtc.direct_api();
            let Some(tx) = api.stream_tx_by_mid(mid, None) else {
                continue;
            };
            tx.write_rtp(
                RtpWrite::new(
                    pt,
                    SeqNo::from(p.seq),
                    p.rtp_ts,
                    p.capture,
                    p.payload.clone(),
                )
                .marker(p.marker)
                .ext_vals(ext)
                .nackable(p.kind == MediaKind::Video),
            );
            writes += 1;
            wrote = true;
        }
        // str0m releases written packets when it is driven: one timeout per viewer and
        // burst (not per packet), then everything it has goes into the batch.
        if wrote && s.rtc.handle_input(Input::Timeout(now)).is_ok() {
            drain(s, batch, fd, stats, true);
        }
    }
    stats.fanout_writes.fetch_add(writes, Relaxed);
}

/// Takes everything str0m has to send into the batch and records its next timeout.
fn drain(s: &mut Session, batch: &mut SendBatch, fd: i32, stats: &Stats, fanout: bool) {
    loop {
        match s.rtc.poll_output() {
            Ok(Output::Transmit(t)) => {
                if batch.is_full() {
                    flush(batch, fd, stats);
                }
                if batch.push(&t.contents, t.destination) {
                    let c = if fanout {
                        &stats.fanout_transmits
                    } else {
                        &stats.other_transmits
                    };
                    c.fetch_add(1, Relaxed);
                } else {
                    stats.datagrams_dropped.fetch_add(1, Relaxed);
                }
            }
            Ok(Output::Timeout(t)) => {
                s.next = t;
                return;
            }
            Ok(Output::Event(Event::Connected)) => s.connected = true,
            Ok(Output::Event(Event::IceConnectionStateChange(
                IceConnectionState::Disconnected,
            ))) => {
                s.rtc.disconnect();
                return;
            }
            Ok(Output::Event(_)) => {}
            Err(_) => {
                s.rtc.disconnect();
                return;
            }
        }
    }
}

fn flush(batch: &mut SendBatch, fd: i32, stats: &Stats) {
    if batch.is_empty() {
        return;
    }
    let f = batch.flush(fd);
    stats.datagrams_sent.fetch_add(f.sent as u64, Relaxed);
    stats.datagrams_dropped.fetch_add(f.dropped as u64, Relaxed);
}

//! `udp-blaster`: the physical limit of tern's benchmark suite (issue 8).
//!
//! Sends what tern's egress sends, with no crypto and no sessions, over loopback to N
//! receiver sockets, and reports packets per CPU-second of the sending thread (its
//! `/proc/thread-self/schedstat` run time, ns resolution; on loopback the kernel delivers a
//! datagram to the receiving socket on the sender's CPU, so that time includes delivery).
//! One receiver thread drains every receiver socket with `recvmmsg` (mio edge-triggered
//! epoll), so nothing is dropped early at a full socket, which would flatter the sender.
//!
//! Modes:
//! - `clip`: tern's lite clip (or `--h264`/`--opus` files) in real time, each packet
//!   (payload + `--overhead` bytes for the RTP header, the abs-capture-time extension and
//!   the SRTP tag) written through tern's own `sendmmsg` batch
//!   ([`tern_server::media::batch::SendBatch`], 64 messages a call) to each receiver in
//!   turn, a receiver's due packets in a row (video, then audio), as tern's fan-out does:
//!   tern's egress pattern and rate at N viewers, minus SRTP and sessions. With `--gso` the
//!   batch sends each receiver's run of equal-size packets as one UDP GSO message, as tern
//!   does with `gso = "auto"`. The ratio of tern's packets per server CPU-second to this one
//!   is how close tern is to the kernel.
//! - `max`: the same datagrams and batches back to back for `--seconds`: the most one core
//!   can send this way.
//! - `gso`: UDP GSO (`UDP_SEGMENT`), `--segments` datagrams of `--size` bytes per message,
//!   each message to the next receiver, 64 messages per `sendmmsg`: the most one core can
//!   send at all, with every message full. `clip --gso` is the like-for-like figure: a
//!   stream's real frames, one message per receiver and frame, as tern sends them.
//!
//! `--into-bench` (with `clip`): the load tester's own ceiling. The receivers are
//! `tern bench`'s viewers themselves ([`tern_bench::worker`]: its media threads, sockets,
//! `UDP_GRO` and SRTP checks), each keyed from the start ([`Client::keyed`]) with the keys
//! the blaster seals every packet with (real RTP headers with abs-capture-time, AES-128-GCM,
//! one seal per packet sent to every viewer alike). No server, no signalling, no handshake:
//! what the tester's media threads spend per packet they receive, and how many packets per
//! CPU-second they can take, with the server's share of a real run gone.
//!
//! Output: one JSON object on stdout.

#![forbid(unsafe_code)]

use std::io::{IoSlice, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use mio::{Events, Interest, Poll, Token};
use nix::sys::socket::{
    ControlMessage, MsgFlags, MultiHeaders, SockaddrStorage, recvmmsg, sendmmsg,
};
use tern_bench::args::Verify;
use tern_bench::worker::{Joined, Receive, Workers};
use tern_proto::codec::MediaKind;
use tern_proto::rtp;
use tern_proto::srtp::{RtpSender, SrtpProfile, split_keying_material};
use tern_rtc::client::{Client, ClientParams};
use tern_rtc::clip::{Clip, ClipSource};
use tern_server::media::batch::{Gso, SendBatch};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// tern's egress: the lite clip in real time to every receiver, sendmmsg batches.
    Clip,
    /// The same datagrams back to back, as fast as one core sends them.
    Max,
    /// UDP GSO: several equal segments per message, as fast as one core sends them.
    Gso,
}

#[derive(Debug, Parser)]
#[command(about = "Raw UDP sender over loopback: the physical limit of bench/run.sh")]
struct Args {
    /// What to send.
    #[arg(long, value_enum, default_value_t = Mode::Clip)]
    mode: Mode,
    /// Receiver sockets (viewers).
    #[arg(long, default_value_t = 1000)]
    receivers: usize,
    /// Seconds to send (bounded: at most 600).
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Bytes tern adds to each clip payload: RTP header 12, one-byte-header extension
    /// block with abs-capture-time 16, SRTP AES-GCM tag 16.
    #[arg(long, default_value_t = 44)]
    overhead: usize,
    /// `gso`: segments per message.
    #[arg(long, default_value_t = 14)]
    segments: usize,
    /// `gso`: bytes per segment.
    #[arg(long, default_value_t = 1200)]
    size: usize,
    /// `clip`, `max`: send through a batch that uses UDP GSO (tern's `gso = "auto"`).
    #[arg(long)]
    gso: bool,
    /// `clip`, `max`: an H264 Annex-B file to packetize instead of the lite clip (with
    /// `--opus`).
    #[arg(long)]
    h264: Option<std::path::PathBuf>,
    /// The Ogg Opus file that goes with `--h264`.
    #[arg(long)]
    opus: Option<std::path::PathBuf>,
    /// Frame rate of `--h264`.
    #[arg(long, default_value_t = 30)]
    fps: u32,
    /// `clip`, `max`: send the video only.
    #[arg(long)]
    video_only: bool,
    /// `clip`: the receivers are `tern bench`'s viewers, and every packet is real SRTP (see
    /// the module docs).
    #[arg(long)]
    into_bench: bool,
    /// `--into-bench`: `tern bench --threads`.
    #[arg(long, default_value_t = 1)]
    bench_threads: usize,
    /// `--into-bench`: `tern bench --gro`.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    bench_gro: bool,
    /// `--into-bench`: `tern bench --verify` (`all` or `sample:N`).
    #[arg(long, default_value_t = Verify::All)]
    bench_verify: Verify,
}

/// Run time of the calling thread so far (`/proc/thread-self/schedstat`, first field, ns).
fn thread_cpu() -> Duration {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map(Duration::from_nanos)
        .unwrap_or_default()
}

/// `Udp: RcvbufErrors` from /proc/net/snmp (the whole network namespace).
fn rcvbuf_errors() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/net/snmp").ok()?;
    let mut lines = s.lines().filter(|l| l.starts_with("Udp:"));
    let names = lines.next()?;
    let values = lines.next()?;
    let i = names.split_whitespace().position(|n| n == "RcvbufErrors")?;
    values.split_whitespace().nth(i)?.parse().ok()
}

/// What the receiver thread counted.
#[derive(Default)]
struct Received {
    packets: AtomicU64,
    bytes: AtomicU64,
    cpu_ns: AtomicU64,
}

const RECV_BATCH: usize = 32;

fn receive(sockets: Vec<UdpSocket>, got: &Received, stop: &AtomicBool) -> Result<(), String> {
    let mut poll = Poll::new().map_err(|e| e.to_string())?;
    let fds: Vec<i32> = sockets.iter().map(|s| s.as_raw_fd()).collect();
    for (i, fd) in fds.iter().enumerate() {
        poll.registry()
            .register(&mut mio::unix::SourceFd(fd), Token(i), Interest::READABLE)
            .map_err(|e| e.to_string())?;
    }
    let mut events = Events::with_capacity(1024);
    let mut bufs: Vec<Vec<u8>> = (0..RECV_BATCH).map(|_| vec![0u8; 2048]).collect();
    let mut hdrs = MultiHeaders::<()>::preallocate(RECV_BATCH, None);
    let cpu0 = thread_cpu();
    while !stop.load(Relaxed) {
        if poll
            .poll(&mut events, Some(Duration::from_millis(20)))
            .is_err()
        {
            continue;
        }
        for ev in events.iter() {
            let Some(&fd) = fds.get(ev.token().0) else {
                continue;
            };
            // Edge-triggered: read until a call returns fewer than asked (queue empty).
            loop {
                let mut iovs: Vec<[IoSliceMut<'_>; 1]> = bufs
                    .iter_mut()
                    .map(|b| [IoSliceMut::new(&mut b[..])])
                    .collect();
                let Ok(res) =
                    recvmmsg(fd, &mut hdrs, iovs.iter_mut(), MsgFlags::MSG_DONTWAIT, None)
                else {
                    break;
                };
                let mut n = 0u64;
                let mut b = 0u64;
                for m in res {
                    n += 1;
                    b += m.bytes as u64;
                }
                got.packets.fetch_add(n, Relaxed);
                got.bytes.fetch_add(b, Relaxed);
                if (n as usize) < RECV_BATCH {
                    break;
                }
            }
        }
    }
    got.cpu_ns
        .store((thread_cpu() - cpu0).as_nanos() as u64, Relaxed);
    Ok(())
}

/// `--into-bench`: `tern bench`'s media threads, each viewer keyed and given its socket.
fn into_bench(a: &Args, sockets: Vec<UdpSocket>, from: SocketAddr) -> Result<Workers, String> {
    let workers = Workers::spawn(
        a.bench_threads.max(1),
        Duration::from_secs(10),
        Receive {
            gro: a.bench_gro,
            verify_every: a.bench_verify.every(),
            shared: false,
        },
    )
    .map_err(|e| format!("bench threads: {e}"))?;
    let ctx = Arc::new(
        tern_rtc::viewer::DtlsContext::generate().map_err(|e| format!("certificate: {e}"))?,
    );
    let km = keying_material();
    let now = Instant::now();
    let ntp_base = (now, rtp::ntp_from_unix(unix_now()));
    for (id, socket) in sockets.into_iter().enumerate() {
        let p = ClientParams {
            local_ufrag: format!("v{id}"),
            local_pwd: "blaster-viewer-password".into(),
            remote_ufrag: "blaster".into(),
            remote_pwd: "blaster-server-password".into(),
            remote_fingerprint: [0; 32],
            server: from,
            video_pt: Some(VIDEO_PT),
            video_codec: tern_proto::codec::VideoCodec::H264,
            audio_pt: Some(AUDIO_PT),
            abs_capture_time_ext: Some(ABS_CAPTURE_ID),
            rtcp: true,
            ntp_base,
            dtls_active: true,
        };
        let client = Client::keyed(p, ctx.clone(), now, id as u64 + 1, PROFILE, &km)
            .map_err(|e| format!("viewer keys: {e}"))?;
        workers.add(Joined {
            id,
            client,
            socket: Some(socket),
            signalling: Duration::ZERO,
            started: now,
            relay: None,
        });
    }
    Ok(workers)
}

/// What `tern bench`'s viewers counted (`--into-bench`).
struct BenchTotals {
    receiving: usize,
    received: u64,
    lost: u64,
    bad: u64,
    verified: u64,
    dropped: u64,
}

fn bench_totals(w: &Workers) -> BenchTotals {
    let mut t = BenchTotals {
        receiving: 0,
        received: 0,
        lost: 0,
        bad: 0,
        verified: 0,
        dropped: 0,
    };
    for s in w.sample() {
        let tracks = [s.video.as_ref(), s.audio.as_ref()];
        if tracks.iter().any(|x| x.is_some_and(|x| x.packets > 0)) {
            t.receiving += 1;
        }
        for x in tracks.into_iter().flatten() {
            t.received += x.packets;
            t.lost += x.lost();
            t.bad += x.bad;
            t.verified += x.verified;
        }
        t.dropped += s.dropped;
    }
    t
}

/// Run time of this process's `tern bench` media threads (`bench-media-*`), from each
/// thread's `/proc/self/task/<tid>/schedstat`.
fn bench_threads_cpu() -> Duration {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    let mut ns = 0u64;
    for t in dir.flatten() {
        let p = t.path();
        let named =
            std::fs::read_to_string(p.join("comm")).is_ok_and(|c| c.starts_with("bench-media"));
        if named
            && let Some(v) = std::fs::read_to_string(p.join("schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        {
            ns += v;
        }
    }
    Duration::from_nanos(ns)
}

/// Counts of the sending side.
#[derive(Default)]
struct Sent {
    packets: u64,
    bytes: u64,
    dropped: u64,
    calls: u64,
    gso_messages: u64,
    gso_packets: u64,
}

impl Sent {
    fn add(&mut self, f: tern_server::media::batch::Flushed) {
        self.calls += 1;
        self.packets += f.sent as u64;
        self.bytes += f.bytes as u64;
        self.dropped += f.dropped as u64;
        self.gso_messages += f.gso_messages as u64;
        self.gso_packets += f.gso_packets as u64;
    }
}

/// The clip to send: `--h264` and `--opus`, or the lite built-in one.
fn load_clip(a: &Args) -> Result<Clip, String> {
    match (&a.h264, &a.opus) {
        (Some(v), Some(o)) => {
            let v = std::fs::read(v).map_err(|e| format!("--h264: {e}"))?;
            let o = std::fs::read(o).map_err(|e| format!("--opus: {e}"))?;
            Clip::parse(&v, &o, a.fps).map_err(|e| e.to_string())
        }
        (None, None) => Clip::builtin_lite().map_err(|e| e.to_string()),
        _ => Err("--h264 and --opus go together".into()),
    }
}

/// One clip packet's datagram: its payload plus `overhead` bytes (a fixed header stand-in).
fn datagram(payload: &[u8], overhead: usize, out: &mut Vec<u8>) {
    out.clear();
    out.resize(overhead.min(64), 0x80);
    out.extend_from_slice(payload);
    out.resize(payload.len() + overhead, 0);
}

/// `--into-bench`: the SRTP profile and keying material every viewer and the blaster share.
const PROFILE: SrtpProfile = SrtpProfile::AeadAes128Gcm;
/// Payload types and the abs-capture-time extmap id of the sealed packets.
const VIDEO_PT: u8 = 96;
const AUDIO_PT: u8 = 111;
const ABS_CAPTURE_ID: u8 = 1;

fn keying_material() -> Vec<u8> {
    (0..PROFILE.keying_material_len())
        .map(|i| (i as u8).wrapping_mul(37).wrapping_add(11))
        .collect()
}

/// Seals clip packets as a server would send them to a viewer (`--into-bench`).
struct Sealer {
    tx: RtpSender,
    /// Wall-clock time (since the Unix epoch) of `base.0`, for abs-capture-time.
    base: (Instant, Duration),
}

impl Sealer {
    fn new() -> Result<Self, String> {
        // The viewers are DTLS clients (`dtls_active`): they open with the second half.
        let (_, server) =
            split_keying_material(PROFILE, &keying_material()).map_err(|e| e.to_string())?;
        Ok(Sealer {
            tx: RtpSender::new(PROFILE, &server).map_err(|e| e.to_string())?,
            base: (Instant::now(), unix_now()),
        })
    }

    fn seal(&self, mp: &tern_rtc::clip::MediaPacket<'_>, out: &mut Vec<u8>) -> Result<(), String> {
        let video = mp.kind == MediaKind::Video;
        let since = mp.capture_time.saturating_duration_since(self.base.0);
        let ntp = rtp::ntp_from_unix(self.base.1 + since);
        let h = rtp::HeaderOut {
            marker: mp.marker,
            payload_type: if video { VIDEO_PT } else { AUDIO_PT },
            sequence: mp.seq as u16,
            timestamp: mp.rtp_ts,
            ssrc: if video { 0x1111 } else { 0x2222 },
            abs_capture_time: Some((ABS_CAPTURE_ID, ntp)),
            transport_cc: None,
            abs_send_time: None,
        };
        out.clear();
        out.resize(64 + mp.payload.len() + self.tx.overhead(), 0);
        let hl = rtp::write_header(out, &h).map_err(|e| e.to_string())?;
        out[hl..hl + mp.payload.len()].copy_from_slice(mp.payload);
        let n = self
            .tx
            .protect(out, hl + mp.payload.len(), hl, (mp.seq >> 16) as u32)
            .map_err(|e| e.to_string())?;
        out.truncate(n);
        Ok(())
    }
}

/// The wall clock, since the Unix epoch.
fn unix_now() -> Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

fn send_clip(
    sock: &UdpSocket,
    dests: &[SocketAddr],
    a: &Args,
    paced: bool,
    deadline: Instant,
) -> Result<Sent, String> {
    let sealer = if a.into_bench {
        Some(Sealer::new()?)
    } else {
        None
    };
    let clip = Arc::new(load_clip(a)?);
    let fd = sock.as_raw_fd();
    let gso = Arc::new(Gso::probe(
        a.gso,
        "127.0.0.1:0".parse().map_err(|_| "addr")?,
    ));
    if a.gso && !gso.is_on() {
        return Err("--gso: this kernel has no UDP GSO".into());
    }
    let mut batch = SendBatch::with_gso(gso);
    let mut sent = Sent::default();
    let mut dgram = Vec::with_capacity(2048);
    let mut due: Vec<Vec<u8>> = Vec::new();
    let video_only = a.video_only;
    let start = Instant::now();
    let mut src = ClipSource::new(clip.clone(), start);
    // Unpaced: replay the clip's packets in order, as fast as they go out.
    let mut all: Vec<Vec<u8>> = Vec::new();
    if !paced {
        // Polled in 10 ms steps: one late poll would make the source skip ahead.
        let mut s = ClipSource::new(clip.clone(), start);
        let mut t = start;
        while t < start + clip.duration() {
            t += Duration::from_millis(10);
            s.poll(t, &mut |mp| {
                if video_only && mp.kind != MediaKind::Video {
                    return;
                }
                datagram(mp.payload, a.overhead, &mut dgram);
                all.push(dgram.clone());
            });
        }
    }
    let mut next = 0usize;
    loop {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        due.clear();
        if paced {
            // Video first, then audio, each in order (tern's fan-out order).
            let mut audio = Vec::new();
            let mut sealed = Ok(());
            src.poll(now, &mut |mp| {
                let mut d = Vec::with_capacity(mp.payload.len() + 64 + a.overhead);
                match &sealer {
                    Some(s) => {
                        if let Err(e) = s.seal(&mp, &mut d) {
                            sealed = Err(e);
                        }
                    }
                    None => datagram(mp.payload, a.overhead, &mut d),
                }
                if mp.kind == MediaKind::Video {
                    due.push(d);
                } else if !video_only {
                    audio.push(d);
                }
            });
            sealed?;
            due.extend(audio);
        } else {
            // One "frame" of 16 packets at a time, so the deadline is checked often.
            for _ in 0..16 {
                if let Some(d) = all.get(next % all.len().max(1)) {
                    due.push(d.clone());
                }
                next += 1;
            }
        }
        // Receiver by receiver, each its due packets in a row (tern's fan-out order).
        for to in dests {
            for d in &due {
                if batch.is_full() {
                    sent.add(batch.flush(fd));
                }
                batch.push(d, *to);
            }
        }
        if !batch.is_empty() {
            sent.add(batch.flush(fd));
        }
        if paced {
            let wait = src
                .poll_timeout()
                .min(deadline)
                .saturating_duration_since(Instant::now());
            std::thread::sleep(wait);
        }
    }
    Ok(sent)
}

/// Messages per GSO `sendmmsg` call.
const GSO_BATCH: usize = 64;

fn send_gso(
    sock: &UdpSocket,
    dests: &[SocketAddr],
    a: &Args,
    deadline: Instant,
) -> Result<Sent, String> {
    let fd = sock.as_raw_fd();
    let seg = u16::try_from(a.size).map_err(|_| "--size too large")?;
    let msg = vec![0x42u8; a.size * a.segments.max(1)];
    let addrs: Vec<Option<SockaddrStorage>> = dests
        .iter()
        .map(|d| Some(SockaddrStorage::from(*d)))
        .collect();
    let mut hdrs =
        MultiHeaders::<SockaddrStorage>::preallocate(GSO_BATCH, Some(nix::cmsg_space!(u16)));
    let mut sent = Sent::default();
    let mut at = 0usize;
    let cmsgs = [ControlMessage::UdpGsoSegments(&seg)];
    while Instant::now() < deadline {
        let iovs: Vec<[IoSlice<'_>; 1]> = (0..GSO_BATCH).map(|_| [IoSlice::new(&msg)]).collect();
        let to: Vec<Option<SockaddrStorage>> = (0..GSO_BATCH)
            .map(|i| addrs[(at + i) % addrs.len()])
            .collect();
        at = (at + GSO_BATCH) % addrs.len();
        sent.calls += 1;
        match sendmmsg(fd, &mut hdrs, &iovs, &to, cmsgs, MsgFlags::empty()) {
            Ok(res) => {
                for r in res {
                    sent.packets += (r.bytes / a.size) as u64;
                    sent.bytes += r.bytes as u64;
                }
            }
            Err(nix::errno::Errno::EAGAIN) => {
                sent.dropped += (GSO_BATCH * a.segments) as u64;
            }
            Err(e) => return Err(format!("sendmmsg with UDP_SEGMENT: {e} (no GSO here?)")),
        }
    }
    Ok(sent)
}

fn main() -> std::process::ExitCode {
    let a = Args::parse();
    match run(&a) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("udp-blaster: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(a: &Args) -> Result<(), String> {
    if !(a.seconds > 0.0 && a.seconds <= 600.0) || a.receivers == 0 {
        return Err("--seconds must be in (0, 600] and --receivers at least 1".into());
    }
    if a.into_bench && a.mode != Mode::Clip {
        return Err("--into-bench goes with --mode clip".into());
    }
    // Blocking: when the send buffer is full the sender waits (off CPU) instead of
    // dropping, so every packet counted was delivered to a receiver socket.
    let sender = UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let _ = socket2::SockRef::from(&sender).set_send_buffer_size(4 << 20);
    let from = sender.local_addr().map_err(|e| e.to_string())?;
    let mut receivers = Vec::with_capacity(a.receivers);
    let mut dests = Vec::with_capacity(a.receivers);
    for _ in 0..a.receivers {
        let s = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("receiver socket: {e}"))?;
        s.set_nonblocking(true).map_err(|e| e.to_string())?;
        // Room for a GSO burst or a frame's packets while the receiver thread is away.
        let _ = socket2::SockRef::from(&s).set_recv_buffer_size(1 << 20);
        if a.into_bench {
            // A viewer's socket is connected to its server, as `tern bench`'s are.
            s.connect(from).map_err(|e| e.to_string())?;
        }
        dests.push(s.local_addr().map_err(|e| e.to_string())?);
        receivers.push(s);
    }
    let got = Arc::new(Received::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut bench = None;
    let mut rx = None;
    if a.into_bench {
        bench = Some(into_bench(a, receivers, from)?);
    } else {
        let (got, stop) = (got.clone(), stop.clone());
        rx = Some(
            std::thread::Builder::new()
                .name("blaster-recv".into())
                .spawn(move || receive(receivers, &got, &stop))
                .map_err(|e| e.to_string())?,
        );
    }
    let drops0 = rcvbuf_errors();
    let t0 = Instant::now();
    let cpu0 = thread_cpu();
    let bench_cpu0 = bench_threads_cpu();
    let deadline = t0 + Duration::from_secs_f64(a.seconds);
    let sent = match a.mode {
        Mode::Clip => send_clip(&sender, &dests, a, true, deadline),
        Mode::Max => send_clip(&sender, &dests, a, false, deadline),
        Mode::Gso => send_gso(&sender, &dests, a, deadline),
    };
    let cpu = thread_cpu() - cpu0;
    let wall = t0.elapsed();
    // Let the receivers drain what is in flight, then stop them.
    let mut last = u64::MAX;
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(20));
        let now = match &bench {
            Some(w) => bench_totals(w).received,
            None => got.packets.load(Relaxed),
        };
        if now == last {
            break;
        }
        last = now;
    }
    let bench_cpu = bench_threads_cpu().saturating_sub(bench_cpu0);
    stop.store(true, Relaxed);
    if let Some(rx) = rx {
        let _ = rx.join();
    }
    let bench = bench.map(|mut w| {
        let t = bench_totals(&w);
        w.stop();
        let cpu_s = bench_cpu.as_secs_f64();
        serde_json::json!({
            "threads": a.bench_threads,
            "gro": a.bench_gro,
            "verify": a.bench_verify.to_string(),
            "viewers_receiving": t.receiving,
            "received_packets": t.received,
            "lost": t.lost,
            "srtp_failures": t.bad,
            "verified": t.verified,
            "dropped": t.dropped,
            "cpu_s": cpu_s,
            "packets_per_cpu_s": if cpu_s > 0.0 { t.received as f64 / cpu_s } else { 0.0 },
            "us_per_packet": if t.received > 0 { cpu_s * 1e6 / t.received as f64 } else { 0.0 },
        })
    });
    let sent = sent?;
    let drops = match (drops0, rcvbuf_errors()) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    let cpu_s = cpu.as_secs_f64();
    let out = serde_json::json!({
        "mode": format!("{:?}", a.mode).to_lowercase(),
        "receivers": a.receivers,
        "seconds": wall.as_secs_f64(),
        "sent_packets": sent.packets,
        "sent_bytes": sent.bytes,
        "mean_datagram_bytes": if sent.packets > 0 { sent.bytes as f64 / sent.packets as f64 } else { 0.0 },
        "send_refused": sent.dropped,
        "sendmmsg_calls": sent.calls,
        "received_packets": got.packets.load(Relaxed),
        "received_bytes": got.bytes.load(Relaxed),
        "udp_rcvbuf_errors": drops,
        "sender_cpu_s": cpu_s,
        "sender_cpu_share": cpu_s / wall.as_secs_f64(),
        "packets_per_cpu_s": if cpu_s > 0.0 { sent.packets as f64 / cpu_s } else { 0.0 },
        "packets_per_s": sent.packets as f64 / wall.as_secs_f64(),
        "receiver_cpu_s": got.cpu_ns.load(Relaxed) as f64 / 1e9,
        "overhead_bytes": a.overhead,
        "gso_segments": if a.mode == Mode::Gso { Some(a.segments) } else { None },
        "gso_batch": a.gso,
        "gso_messages": sent.gso_messages,
        "gso_packets": sent.gso_packets,
        "gso_size": if a.mode == Mode::Gso { Some(a.size) } else { None },
        "bench": bench,
    });
    println!("{out}");
    Ok(())
}

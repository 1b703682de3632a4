//! `tern bench`: a WebRTC load tester with OvenRtcTester's interface and output, and
//! metrics that tell the truth.
//!
//! Each viewer is a [`tern_rtc::client::Client`] (sans-IO: ICE controlling, DTLS client,
//! SRTP, RTCP receiver reports and NACKs like a browser) on its own UDP socket. Signalling
//! threads do the WHEP exchanges at the `-cint` pace; media threads ([`worker`]) own the
//! sockets; the main thread prints a summary every `-sint` and the details at the end.
//!
//! Loss is counted as packets never received (a late packet fills its gap and counts as
//! reordering), duplicates apart; OvenRtcTester's "delay" (RTP drift) is kept beside the true
//! latency from the sender's capture time (abs-capture-time, or the RTCP SR mapping).

#![forbid(unsafe_code)]

pub mod args;
pub mod publish;
pub mod report;
pub mod signal;
mod socket;
pub mod worker;

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, unbounded};
use rand::Rng;
use serde_json::Value;
use tern_proto::sdp;
use tern_rtc::client::{Client, ClientOffer, answer_offer, client_params};
use tern_rtc::session;
use tern_rtc::viewer::DtlsContext;

pub use args::{BenchArgs, normalize_args};
use report::{Point, Summary};
use signal::{SignalError, Whep};
use worker::{Joined, Sample, State, Workers};

/// Signalling threads: enough to keep the `-cint` pace when the server answers slowly.
const SIGNAL_THREADS: usize = 4;
/// How long in-flight packets get to arrive after the sessions are deleted.
const DRAIN: Duration = Duration::from_millis(500);

/// What a finished run measured (for callers such as tests).
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The final summary.
    pub summary: Summary,
    /// Every client's final figures.
    pub clients: Vec<Sample>,
    /// The server's counters moved by this run, when it exposes `/v1/stats/current`.
    pub server: Option<ServerDelta>,
    /// Whether the run was stopped by a signal.
    pub interrupted: bool,
}

impl Outcome {
    /// True when every client connected and nothing was lost.
    pub fn clean(&self) -> bool {
        self.summary.failed == 0 && self.summary.total_losses == 0 && self.summary.new == 0
    }
}

/// How far the server's counters moved during the run.
#[derive(Debug, Clone, Copy)]
pub struct ServerDelta {
    /// SRTP media packets the server sent.
    pub packets_out: u64,
    /// Bytes the server sent (all datagrams).
    pub bytes_out: u64,
    /// Retransmissions the server sent on NACK.
    pub retransmits: u64,
}

/// What keeps a client's server session alive, to end it at the end of the run.
enum Hold {
    /// A WHEP session URL (DELETE ends it).
    Whep(String),
    /// An OvenMediaEngine signalling socket (closing it ends the session).
    Ome(Box<signal::OmeSession>),
}

enum Event {
    Joined(Box<Joined>, Option<Hold>),
    Failed(usize, SignalError),
}

/// Raises the open-file limit to its hard maximum: each client holds a socket.
fn raise_nofile(need: u64) -> Result<(), String> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(|e| e.to_string())?;
    if soft >= need {
        return Ok(());
    }
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(|e| e.to_string())?;
    if hard < need {
        return Err(format!(
            "{need} clients need {need} open files but the hard limit is {hard} (ulimit -n)"
        ));
    }
    Ok(())
}

fn cpu_secs() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_SELF).map_or(0.0, |u| {
        let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
        t(u.user_time()) + t(u.system_time())
    })
}

/// What one signalling thread needs.
struct Signaller {
    whep: Whep,
    ctx: Arc<DtlsContext>,
    bind: std::net::IpAddr,
    rtcp: bool,
    ntp_base: (Instant, u64),
    /// OvenMediaEngine signalling at `url` instead of WHEP.
    ome: bool,
    /// Go through the server's TURN.
    relay: bool,
    /// The media threads have a shared socket (`--sockets thread`, or `auto` without
    /// `--relay` and `--bind`).
    shared: bool,
    /// `--sockets`: with `auto` a viewer whose server is not on IPv4 loopback gets a socket
    /// of its own; with `thread` it fails.
    sockets: args::Sockets,
    /// Offer every video codec, not H264 alone.
    all_video: bool,
    url: String,
    /// Take the server's IPv6 candidate when it offers both families: `--bind` is an IPv6
    /// address, or (unbound) the signalling URL's host is an IPv6 literal.
    prefer_v6: bool,
}

/// The server's UDP candidate to use: `first` (the one the answer prefers) unless it is not
/// of the wanted family and `others` (every UDP candidate, in order) has one that is.
pub fn pick_candidate(
    first: SocketAddr,
    others: impl IntoIterator<Item = SocketAddr>,
    prefer_v6: bool,
) -> SocketAddr {
    let v6 = |a: &SocketAddr| !a.ip().to_canonical().is_ipv4();
    if v6(&first) == prefer_v6 {
        return first;
    }
    others
        .into_iter()
        .find(|a| v6(a) == prefer_v6)
        .unwrap_or(first)
}

/// The UDP candidates of an SDP body or of `candidate:` lines.
fn udp_candidates<'a>(lines: impl IntoIterator<Item = &'a str>) -> Vec<SocketAddr> {
    lines
        .into_iter()
        .flat_map(|l| l.lines())
        .filter_map(|l| sdp::parse_candidate_line(l.trim()).ok().flatten())
        .filter(|c| c.transport.eq_ignore_ascii_case("udp") && c.component == 1)
        .map(|c| SocketAddr::new(c.ip, c.port))
        .collect()
}

impl Signaller {
    fn join(&self, id: usize) -> Result<(Box<Joined>, Option<Hold>), SignalError> {
        let mut rng = rand::rng();
        let mut uf = [0u8; 8];
        let mut pw = [0u8; 24];
        session::random_chars(&mut uf, &mut || rng.random());
        session::random_chars(&mut pw, &mut || rng.random());
        let ufrag = String::from_utf8_lossy(&uf).into_owned();
        let pwd = String::from_utf8_lossy(&pw).into_owned();
        let client_offer = ClientOffer {
            ufrag: ufrag.clone(),
            pwd: pwd.clone(),
            rtcp: self.rtcp,
            ntp_base: self.ntp_base,
        };
        if self.ome {
            return self.join_ome(id, &client_offer);
        }
        let offer = sdp::write_offer(&sdp::OfferParams {
            ice_ufrag: &ufrag,
            ice_pwd: &pwd,
            fingerprint_sha256: self.ctx.fingerprint(),
            video: true,
            audio: true,
            abs_capture_time: true,
            all_video: self.all_video,
        });
        let t0 = Instant::now();
        let (answer, location, links) = self.whep.offer(&offer)?;
        let signalling = t0.elapsed();
        let mut params = client_params(&answer, &client_offer)
            .map_err(|e| SignalError::BadAnswer(e.to_string()))?;
        params.server = pick_candidate(
            params.server,
            udp_candidates([answer.as_str()]),
            self.prefer_v6,
        );
        let relay = if self.relay {
            let (turn, user, pass) = signal::turn_from_links(&links).ok_or_else(|| {
                SignalError::BadAnswer("--relay: no TURN-over-UDP Link header in the answer".into())
            })?;
            Some(worker::RelayInfo {
                turn,
                user,
                pass,
                peer: params.server,
            })
        } else {
            None
        };
        let to = relay.as_ref().map_or(params.server, |r| r.turn);
        let socket = self.socket(to)?;
        let now = Instant::now();
        let client = Client::new(params, self.ctx.clone(), now, id as u64 + 1);
        Ok((
            Box::new(Joined {
                id,
                client,
                socket,
                signalling,
                started: now,
                relay,
            }),
            location.map(Hold::Whep),
        ))
    }

    /// A viewer's own socket connected to `server`, or none when its media thread's shared
    /// socket serves it: the server is on IPv4 loopback, where the viewers' own addresses
    /// are (`--sockets thread` fails elsewhere; `auto` gives the viewer its own socket).
    fn socket(&self, server: SocketAddr) -> Result<Option<UdpSocket>, SignalError> {
        if self.shared {
            match server {
                SocketAddr::V4(a) if a.ip().is_loopback() => return Ok(None),
                _ if self.sockets == args::Sockets::Thread => {
                    return Err(SignalError::Transport(format!(
                        "--sockets thread needs the server's media address on 127.0.0.0/8, \
                         got {server}"
                    )));
                }
                _ => {}
            }
        }
        bind_to(self.bind, server)
            .map(Some)
            .map_err(|e| SignalError::Transport(format!("UDP socket: {e}")))
    }

    /// OvenMediaEngine signalling: the server offers, the client answers.
    fn join_ome(
        &self,
        id: usize,
        client_offer: &ClientOffer,
    ) -> Result<(Box<Joined>, Option<Hold>), SignalError> {
        let t0 = Instant::now();
        let mut params = None;
        let fp = *self.ctx.fingerprint();
        let sess = signal::ome_exchange(&self.url, Duration::from_secs(10), &mut |sdp, cands| {
            let mut a = answer_offer(sdp, cands, client_offer, &fp)
                .map_err(|e| SignalError::BadAnswer(e.to_string()))?;
            a.params.server = pick_candidate(
                a.params.server,
                udp_candidates(std::iter::once(sdp).chain(cands.iter().copied())),
                self.prefer_v6,
            );
            params = Some(a.params);
            Ok(a.answer)
        })?;
        let signalling = t0.elapsed();
        let params = params.ok_or_else(|| SignalError::BadAnswer("no offer".into()))?;
        let socket = self.socket(params.server)?;
        let now = Instant::now();
        let client = Client::new(params, self.ctx.clone(), now, id as u64 + 1);
        Ok((
            Box::new(Joined {
                id,
                client,
                socket,
                signalling,
                started: now,
                relay: None,
            }),
            Some(Hold::Ome(Box::new(sess))),
        ))
    }
}

/// Receive buffer asked for each client socket. A new viewer gets the server's keyframe
/// cache (up to a GOP) in one burst; with the default ~208 KiB buffer the tail of that burst
/// can overflow before the thread reads it, and an overflowed *first* packet of a track is a
/// loss no receiver can see. 1 MiB holds the burst; the kernel caps it at `rmem_max`.
const RCVBUF: usize = 1 << 20;

fn bind_to(ip: std::net::IpAddr, server: SocketAddr) -> std::io::Result<UdpSocket> {
    let s = UdpSocket::bind(SocketAddr::new(local_for(ip, server), 0))?;
    let _ = nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::RcvBuf, &RCVBUF);
    s.connect(server)?;
    Ok(s)
}

/// The local address to bind for `server`: `bind` itself, except that the default
/// unspecified address follows the server's family (`--bind` is `0.0.0.0` unless given, and
/// an IPv6 server needs `::`).
pub fn local_for(bind: std::net::IpAddr, server: SocketAddr) -> std::net::IpAddr {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    match (bind, server) {
        (b, SocketAddr::V6(_)) if b.is_unspecified() => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        (b, SocketAddr::V4(_)) if b.is_unspecified() => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        (b, _) => b,
    }
}

/// A `/v1/memory` reading: allocator live bytes and the pools' used and allocated sums.
#[derive(Debug, Clone, Copy)]
struct Heap {
    live: i64,
    used: i64,
    allocated: i64,
}

fn read_heap(origin: &str) -> Result<Heap, String> {
    let body = signal::get_text(&format!("{origin}/v1/memory"), Duration::from_secs(10))?;
    let v: Value = serde_json::from_str(&body).map_err(|e| format!("/v1/memory: {e}"))?;
    let n = |v: &Value| v.as_i64().unwrap_or(0);
    let pools = v["pools"].as_array().cloned().unwrap_or_default();
    Ok(Heap {
        live: n(&v["allocator"]["live_bytes"]),
        used: pools.iter().map(|p| n(&p["used_bytes"])).sum(),
        allocated: pools.iter().map(|p| n(&p["allocated_bytes"])).sum(),
    })
}

/// The server's `/v1/stats/current`: packets out, bytes out, retransmissions, viewers.
fn read_server(origin: &str) -> Option<(u64, u64, u64, u64)> {
    let body = signal::get_text(
        &format!("{origin}/v1/stats/current"),
        Duration::from_secs(5),
    )
    .ok()?;
    let v: Value = serde_json::from_str(&body).ok()?;
    let r = &v["response"];
    Some((
        r["packetsOut"].as_u64()?,
        r["totalBytesOut"].as_u64()?,
        r["retransmits"].as_u64()?,
        r["totalConnections"].as_u64()?,
    ))
}

/// The heap table at checkpoints (pjnath's ICE heap study, read from the server).
struct HeapTable {
    origin: String,
    rows: Vec<(String, usize, Heap)>,
}

impl HeapTable {
    fn mark(&mut self, name: &str, viewers: usize) {
        match read_heap(&self.origin) {
            Ok(h) => self.rows.push((name.to_string(), viewers, h)),
            Err(e) => eprintln!("bench: heap checkpoint {name:?}: {e}"),
        }
    }

    fn text(&self) -> String {
        use std::fmt::Write as _;
        let mut o = String::new();
        let _ = writeln!(o, "<Heap> (server GET /v1/memory at each checkpoint)");
        let _ = writeln!(
            o,
            "{:<34} {:>7} {:>13} {:>13} {:>13} {:>6} {:>11}",
            "checkpoint",
            "viewers",
            "heap live",
            "pools used",
            "pools alloc",
            "util%",
            "heap/viewer"
        );
        let base = self.rows.first().map(|r| r.2);
        for (name, viewers, h) in &self.rows {
            let util = if h.allocated > 0 {
                h.used as f64 * 100.0 / h.allocated as f64
            } else {
                0.0
            };
            let per = match (base, *viewers) {
                (Some(b), v) if v > 0 => format!("{}", (h.live - b.live) / v as i64),
                _ => "-".into(),
            };
            let _ = writeln!(
                o,
                "{name:<34} {viewers:>7} {:>13} {:>13} {:>13} {util:>6.1} {per:>11}",
                h.live, h.used, h.allocated
            );
        }
        o
    }
}

/// Runs a bench to the end (life elapsed, or `stop` set) and prints as it goes to `out`.
pub fn run(a: &BenchArgs, stop: Arc<AtomicBool>, out: &mut dyn Write) -> Result<Outcome, String> {
    a.validate()?;
    if a.url.starts_with("wss://") {
        return Err("wss:// is not supported yet; use ws:// or the WHEP URL".into());
    }
    raise_nofile(a.clients as u64 + 256)?;
    let ctx = Arc::new(DtlsContext::generate().map_err(|e| e.to_string())?);
    // The server's HTTP origin (for /v1/memory and /v1/stats/current), also for ws:// URLs.
    let origin = signal::origin(&a.url).replacen("ws://", "http://", 1);
    // Threads share a socket with `--sockets thread`, and with `auto` when they can: no
    // TURN, no --bind, and few enough threads for the loopback addresses.
    let shared = a.sockets.threads_share(a.relay, a.bind)
        && (a.sockets == args::Sockets::Thread || a.threads <= socket::SHARED_MAX_THREADS);
    let mut workers = Workers::spawn(
        a.threads,
        Duration::from_secs(a.connect_timeout),
        worker::Receive {
            gro: a.gro,
            verify_every: a.verify.every(),
            shared,
        },
    )
    .map_err(|e| format!("media threads: {e}"))?;
    let t0 = Instant::now();
    let ntp0 = tern_proto::rtp::ntp_from_unix(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default(),
    );
    let signaller = Arc::new(Signaller {
        whep: Whep::new(&a.url, Duration::from_secs(10)),
        ctx,
        bind: a.bind,
        rtcp: !a.no_rtcp,
        ntp_base: (t0, ntp0),
        ome: a.url.starts_with("ws://"),
        relay: a.relay,
        shared,
        sockets: a.sockets,
        all_video: a.all_video,
        url: a.url.clone(),
        prefer_v6: if a.bind.is_unspecified() {
            a.url.contains("://[")
        } else {
            a.bind.is_ipv6()
        },
    });
    let mut heap = a.heap_report.then(|| HeapTable {
        origin: origin.clone(),
        rows: Vec::new(),
    });
    if let Some(h) = heap.as_mut() {
        h.mark("idle (no viewer)", 0);
    }
    let mut publishers = start_publishers(a)?;
    let server0 = read_server(&origin);

    let (job_tx, job_rx) = unbounded::<usize>();
    let (ev_tx, ev_rx) = unbounded::<Event>();
    let mut threads = Vec::new();
    for i in 0..SIGNAL_THREADS.min(a.clients) {
        let rx: Receiver<usize> = job_rx.clone();
        let tx: Sender<Event> = ev_tx.clone();
        let s = signaller.clone();
        threads.push(
            std::thread::Builder::new()
                .name(format!("bench-signal-{i}"))
                .spawn(move || {
                    for id in rx.iter() {
                        let ev = match s.join(id) {
                            Ok((j, loc)) => Event::Joined(j, loc),
                            Err(e) => Event::Failed(id, e),
                        };
                        if tx.send(ev).is_err() {
                            break;
                        }
                    }
                })
                .map_err(|e| format!("signalling thread: {e}"))?,
        );
    }
    drop(ev_tx);

    let start = Instant::now();
    let end = a.life().map(|l| start + l);
    let mut next_connect = start;
    let mut next_summary = start + a.sint();
    let mut next_check = start;
    let mut scheduled = 0usize;
    let mut joined = 0usize;
    let mut holds: Vec<Hold> = Vec::new();
    let mut signal_failures: BTreeMap<String, usize> = BTreeMap::new();
    let mut signal_failed = 0usize;
    let mut prev = Vec::new();
    let mut points = Vec::new();
    let cpu0 = cpu_secs();
    let mut cpu_prev = (cpu0, 0u64);
    let mut created_marked = false;
    let mut handshakes_marked = false;
    // The progress bar redraws one line: only on a terminal.
    let progress = !a.json && a.clients > 1 && std::io::IsTerminal::is_terminal(&std::io::stderr());

    let summary_now = |workers: &Workers,
                       prev: &mut Vec<report::Prev>,
                       scheduled: usize,
                       signal_failures: &BTreeMap<String, usize>,
                       signal_failed: usize,
                       cpu_prev: &mut (f64, u64),
                       whole_run: bool| {
        let samples = workers.sample();
        let now = Instant::now();
        let datagrams: u64 = samples.iter().map(|s| s.datagrams).sum();
        let cpu = cpu_secs();
        // Interval figures, or the whole run's for the final report.
        let d = if whole_run {
            (cpu - cpu0, datagrams)
        } else {
            (cpu - cpu_prev.0, datagrams.saturating_sub(cpu_prev.1))
        };
        *cpu_prev = (cpu, datagrams);
        let mut s = report::summarize(
            &samples,
            whole_run,
            prev,
            now,
            start,
            scheduled,
            signal_failures,
            signal_failed,
            Some(d),
        );
        s.verify = a.verify;
        (s, samples, now)
    };

    let interrupted = loop {
        let now = Instant::now();
        if stop.load(Ordering::Relaxed) {
            break true;
        }
        if end.is_some_and(|e| now >= e) {
            break false;
        }
        while scheduled < a.clients && now >= next_connect {
            let _ = job_tx.send(scheduled);
            scheduled += 1;
            next_connect += a.cint();
        }
        if now >= next_summary {
            let (s, _, _) = summary_now(
                &workers,
                &mut prev,
                scheduled,
                &signal_failures,
                signal_failed,
                &mut cpu_prev,
                false,
            );
            emit_summary(out, &s, a.json);
            points.push(Point::of(&s));
            next_summary += a.sint();
        }
        if (progress || heap.is_some()) && now >= next_check && !handshakes_marked {
            next_check = now + Duration::from_millis(250);
            let settled = joined + signal_failed;
            if settled == a.clients && !created_marked {
                created_marked = true;
                if let Some(h) = heap.as_mut() {
                    h.mark("viewers created (offer/answer)", joined);
                }
            }
            let samples = workers.sample();
            let connected = samples
                .iter()
                .filter(|s| s.state == State::Connected)
                .count();
            let failed = samples.iter().filter(|s| s.state == State::Failed).count();
            if progress {
                progress_bar(scheduled, connected, failed + signal_failed, a.clients);
            }
            if created_marked && connected + failed == joined {
                handshakes_marked = true;
                if progress {
                    eprintln!();
                }
                if let Some(h) = heap.as_mut() {
                    h.mark("all handshakes complete", connected);
                }
            }
        }
        let mut deadline = next_summary;
        if scheduled < a.clients {
            deadline = deadline.min(next_connect);
        }
        if let Some(e) = end {
            deadline = deadline.min(e);
        }
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(50));
        match ev_rx.recv_timeout(wait) {
            Ok(Event::Joined(j, loc)) => {
                joined += 1;
                if let Some(h) = loc {
                    holds.push(h);
                }
                workers.add(*j);
            }
            Ok(Event::Failed(id, e)) => {
                signal_failed += 1;
                *signal_failures.entry(e.reason()).or_default() += 1;
                if !a.json {
                    let _ = writeln!(out, "client_{id} failed: {e}");
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(wait),
        }
    };
    if interrupted && !a.json {
        let _ = writeln!(out, "Test stopped by user");
    }
    drop(job_tx);
    // Steady-state checkpoint before anyone leaves.
    if let Some(h) = heap.as_mut() {
        h.mark("steady state (end of run)", joined);
    }
    // End: stop sending, delete every session, let in-flight packets land, then count.
    let ended = Instant::now();
    workers.quiesce();
    end_all(&signaller.whep, holds);
    for t in threads {
        let _ = t.join();
    }
    for ev in ev_rx.try_iter() {
        if let Event::Joined(j, loc) = ev {
            // Joined after the end: count it as started, delete its session.
            end_all(&signaller.whep, loc.into_iter().collect());
            drop(j);
        }
    }
    // The server ends sessions asynchronously: wait (≤ 5 s) until it holds no more viewers
    // than before the run, so that nothing it sends after the final count is missed.
    if let Some(s0) = server0 {
        let deadline = Instant::now() + Duration::from_secs(5);
        while read_server(&origin).is_some_and(|s| s.3 > s0.3) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    std::thread::sleep(DRAIN);
    let (summary, samples, now) = summary_now(
        &workers,
        &mut prev,
        scheduled,
        &signal_failures,
        signal_failed,
        &mut cpu_prev,
        true,
    );
    workers.release();
    workers.stop();
    let published: u64 = publishers
        .iter()
        .map(|p| p.stats.packets.load(Ordering::Relaxed))
        .sum();
    for p in &mut publishers {
        p.stop();
    }
    points.push(Point::of(&summary));
    let server = match (server0, read_server(&origin)) {
        (Some(a0), Some(a1)) => Some(ServerDelta {
            packets_out: a1.0 - a0.0,
            bytes_out: a1.1 - a0.1,
            retransmits: a1.2 - a0.2,
        }),
        _ => None,
    };
    if let Some(h) = heap.as_mut() {
        std::thread::sleep(Duration::from_secs(1));
        h.mark("all viewers gone", 0);
    }

    // Final report.
    if a.json {
        emit_summary(out, &summary, true);
        for c in &samples {
            let _ = writeln!(out, "{}", report::detail_json(c, now, ended));
        }
        if let Some(d) = server {
            let _ = writeln!(
                out,
                "{}",
                serde_json::json!({
                    "type": "server",
                    "packets_out": d.packets_out,
                    "bytes_out": d.bytes_out,
                    "retransmits": d.retransmits,
                    "tester_datagram_bytes": samples.iter().map(|s| s.datagram_bytes).sum::<u64>(),
                })
            );
        }
    } else {
        let _ = writeln!(out, "***************************");
        let _ = writeln!(out, "Reports");
        let _ = writeln!(out, "***************************");
        let _ = write!(out, "{}", summary.text());
        let _ = writeln!(out);
        if a.details.unwrap_or(a.clients <= 100) {
            let _ = writeln!(out, "<Details>");
            for c in &samples {
                let _ = write!(out, "{}", report::detail_text(c, now));
            }
            let _ = writeln!(out);
        }
        let _ = write!(out, "{}", report::connect_text(&samples));
        if !publishers.is_empty() {
            let _ = writeln!(
                out,
                "<Publishers> {} WHIP publishers sent {published} RTP packets",
                publishers.len()
            );
        }
        if let Some(d) = server {
            let rx: u64 = samples
                .iter()
                .map(|s| {
                    s.video
                        .as_ref()
                        .map_or(0, |t| t.packets + t.duplicates + t.bad)
                        + s.audio
                            .as_ref()
                            .map_or(0, |t| t.packets + t.duplicates + t.bad)
                })
                .sum();
            let bytes: u64 = samples.iter().map(|s| s.datagram_bytes).sum();
            let _ = writeln!(
                out,
                "<Server check> server sent {} media packets ({} retransmitted), bench received {rx}; server sent {} bytes, bench received {bytes}",
                d.packets_out, d.retransmits, d.bytes_out
            );
        }
    }
    if let Some(h) = &heap {
        let _ = write!(out, "{}", h.text());
    }
    if let Some(path) = &a.report {
        let html = report::html(&points, &samples, &a.url);
        std::fs::write(path, html).map_err(|e| format!("{}: {e}", path.display()))?;
        if !a.json {
            let _ = writeln!(out, "report written to {}", path.display());
        }
    }
    Ok(Outcome {
        summary,
        clients: samples,
        server,
        interrupted,
    })
}

/// Starts the `--publish` publishers and waits (≤ 10 s) until the first stream is live.
fn start_publishers(a: &BenchArgs) -> Result<Vec<publish::PublisherHandle>, String> {
    if a.publish == 0 {
        return Ok(Vec::new());
    }
    let clip = Arc::new(
        match a.publish_clip.as_str() {
            "lite" => tern_rtc::clip::Clip::builtin_lite(),
            "standard" => tern_rtc::clip::Clip::builtin(),
            path => tern_rtc::clip::Clip::from_mp4(std::path::Path::new(path)),
        }
        .map_err(|e| format!("clip: {e}"))?,
    );
    let base = a.url.trim_end_matches("/whep");
    let mut v = Vec::with_capacity(a.publish);
    for i in 0..a.publish {
        let url = if i == 0 {
            format!("{base}/whip")
        } else {
            format!("{base}{i}/whip")
        };
        v.push(
            publish::start(&url, a.bind, clip.clone())
                .map_err(|e| format!("publisher {i}: {e}"))?,
        );
    }
    // The first viewers need the stream live: wait for the publisher's media.
    let whep = Whep::new(&a.url, Duration::from_secs(2));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !whep.live() {
        if Instant::now() > deadline {
            return Err(format!(
                "{} did not go live within 10 s of publishing",
                a.url
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(v)
}

fn emit_summary(out: &mut dyn Write, s: &Summary, json: bool) {
    if json {
        let _ = writeln!(out, "{}", s.json());
    } else {
        let _ = writeln!(out, "{}", s.text());
    }
    let _ = out.flush();
}

fn progress_bar(started: usize, connected: usize, failed: usize, total: usize) {
    const W: usize = 40;
    let filled = (connected + failed) * W / total.max(1);
    eprint!(
        "\r[{}{}] {connected}/{total} connected, {failed} failed, {started} started ",
        "#".repeat(filled),
        " ".repeat(W - filled)
    );
}

/// Ends every session (WHEP DELETE, or `stop` and close on the signalling socket), a few
/// at a time.
fn end_all(whep: &Whep, holds: Vec<Hold>) {
    if holds.is_empty() {
        return;
    }
    let per = holds.len().div_ceil(SIGNAL_THREADS);
    let mut chunks: Vec<Vec<Hold>> = Vec::new();
    let mut it = holds.into_iter().peekable();
    while it.peek().is_some() {
        chunks.push(it.by_ref().take(per).collect());
    }
    std::thread::scope(|s| {
        for chunk in chunks {
            s.spawn(move || {
                for h in chunk {
                    match h {
                        Hold::Whep(l) => {
                            whep.delete(&l);
                        }
                        Hold::Ome(o) => o.stop(),
                    }
                }
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_candidate_of_the_wanted_family_is_taken() {
        let v4: SocketAddr = "127.0.0.1:9".parse().expect("addr");
        let v6: SocketAddr = "[::1]:9".parse().expect("addr");
        assert_eq!(pick_candidate(v4, [v4, v6], true), v6);
        assert_eq!(pick_candidate(v4, [v4, v6], false), v4);
        assert_eq!(pick_candidate(v6, [v6, v4], false), v4);
        // Only one family offered: the answer's first.
        assert_eq!(pick_candidate(v4, [v4], true), v4);
        let sdp = "a=candidate:1 1 udp 2130706431 127.0.0.1 9 typ host\r\n\
                   a=candidate:2 1 udp 2130706175 ::1 9 typ host\r\n\
                   a=candidate:3 1 tcp 1 ::2 9 typ host\r\na=end-of-candidates\r\n";
        assert_eq!(udp_candidates([sdp]), [v4, v6]);
    }
}

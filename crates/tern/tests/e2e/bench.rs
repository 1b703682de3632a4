//! `tern bench` against a real `tern demo`: a 500-viewer run checked against the server's
//! own counters, and the loss/reordering/duplicate counting checked against a relay that
//! impairs known packets.

use crate::common;

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use common::{Child, Server};
use tern_bench::BenchArgs;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

fn args(line: &str) -> BenchArgs {
    let argv =
        std::iter::once("bench".to_string()).chain(line.split_whitespace().map(String::from));
    Cli::parse_from(tern_bench::normalize_args(argv)).bench
}

fn run(a: &BenchArgs) -> (tern_bench::Outcome, String) {
    let mut out = Vec::new();
    let o = tern_bench::run(a, Arc::new(AtomicBool::new(false)), &mut out).expect("bench runs");
    (o, String::from_utf8_lossy(&out).into_owned())
}

/// Packets the bench counted as received: distinct, duplicates and failed SRTP checks.
fn received(o: &tern_bench::Outcome) -> u64 {
    o.clients
        .iter()
        .flat_map(|c| [&c.video, &c.audio])
        .flatten()
        .map(|t| t.packets + t.duplicates + t.bad)
        .sum()
}

/// The bench's distinct packets against what the server sent once (`packets_out −
/// retransmits`). They must agree exactly but for one effect no receiver can see: a
/// datagram the kernel drops because a socket buffer overflowed, when it is the *first*
/// packet of a track (a later gap would be NACKed or counted as loss). Client and relay
/// sockets ask for 1 MiB to make that rare; the tolerance is 1 in 100,000.
fn assert_consistent(unique: u64, sent_once: u64) {
    assert!(
        unique <= sent_once,
        "bench counted {unique} > server sent {sent_once}"
    );
    let missing = sent_once - unique;
    assert!(
        missing <= (sent_once / 100_000).max(2),
        "bench counted {unique}, server sent {sent_once} once: {missing} missing"
    );
}

#[test]
fn five_hundred_viewers_for_twenty_seconds() {
    let _slot = crate::common::slot();
    let server = Server::demo();
    let url = format!("http://{}/live/demo/whep", server.http);
    let a = args(&format!(
        "-url {url} -n 500 -cint 10 -life 20 -sint 5000 --threads 2 --json"
    ));
    let (o, text) = run(&a);
    let s = &o.summary;
    assert_eq!(s.clients, 500, "{text}");
    assert_eq!(s.failed, 0, "failures: {:?}\n{text}", s.failures);
    assert_eq!(s.new + s.checking, 0, "clients never connected:\n{text}");
    assert_eq!(s.connected, 500, "{text}");
    assert_eq!(s.total_losses, 0, "{text}");
    assert_eq!(s.srtp_failures, 0, "{text}");
    assert!(
        s.fps.min > 10.0,
        "slowest client {:.1} fps\n{text}",
        s.fps.min
    );
    // Every client saw frames and keyframes, and has latency samples.
    for c in &o.clients {
        let v = c.video.as_ref().expect("video track");
        assert!(
            v.keyframes >= 10,
            "client_{}: {} keyframes",
            c.id,
            v.keyframes
        );
        assert!(v.latency_n > 0, "client_{}: no latency samples", c.id);
        // The server replays the cached keyframe at join: those packets were captured
        // before the client connected and are counted apart from the latency.
        assert!(
            v.catchup_packets > 0,
            "client_{}: no join catch-up packets seen",
            c.id
        );
    }
    // The bench's totals agree with the server's counters: each packet the server sent
    // once (all it sent minus its retransmissions) arrived exactly once. Retransmissions
    // answer packets a client socket dropped when a burst overflowed it (the kernel's
    // RcvbufErrors), which the client NACKed and got back.
    let d = o.server.expect("server exposes /v1/stats/current");
    let unique: u64 = o
        .clients
        .iter()
        .flat_map(|c| [&c.video, &c.audio])
        .flatten()
        .map(|t| t.packets)
        .sum();
    assert_consistent(unique, d.packets_out - d.retransmits);
    assert!(s.recovered <= d.retransmits);
    assert!(received(&o) <= d.packets_out);
    let bytes: u64 = o.clients.iter().map(|c| c.datagram_bytes).sum();
    assert!(
        bytes <= d.bytes_out,
        "bench got more bytes than the server sent"
    );
    // The text ends with one JSON object per client.
    let clients = text
        .lines()
        .filter(|l| l.starts_with("{\"") && l.contains("\"type\":\"client\""))
        .count();
    assert_eq!(clients, 500);
    server.stop();
}

/// What the relay did to server→client RTP.
#[derive(Default)]
struct Truth {
    dropped: AtomicU64,
    /// Dropped packets by SSRC.
    dropped_by_ssrc: Mutex<HashMap<u32, u64>>,
    duplicated: AtomicU64,
    /// Duplicated packets by SSRC, and their sequence numbers (for a failure's message).
    duplicated_by_ssrc: Mutex<HashMap<u32, Vec<u16>>>,
    delayed: AtomicU64,
    forwarded: AtomicU64,
    /// The clients' addresses, as the relay saw them.
    clients: Mutex<Vec<SocketAddr>>,
}

/// A NAT-like UDP relay between bench clients and the server: each client gets its own
/// upstream socket (so the server tells them apart), and server→client RTP is impaired
/// while `impair` is set: 1% dropped, 1% duplicated, 1% held back behind the next packet
/// of its stream. STUN, DTLS and RTCP pass untouched.
struct Relay {
    stop: Arc<AtomicBool>,
    impair: Arc<AtomicBool>,
    truth: Arc<Truth>,
    front: std::thread::JoinHandle<()>,
    backs: Arc<Mutex<Vec<std::thread::JoinHandle<()>>>>,
}

fn is_rtp(d: &[u8]) -> bool {
    d.len() >= 12 && (128..192).contains(&d[0]) && !(192..224).contains(&d[1])
}

impl Relay {
    fn start(front: SocketAddr, server: SocketAddr) -> Relay {
        let stop = Arc::new(AtomicBool::new(false));
        let impair = Arc::new(AtomicBool::new(true));
        let truth = Arc::new(Truth::default());
        let backs: Arc<Mutex<Vec<std::thread::JoinHandle<()>>>> = Arc::default();
        let sock = Arc::new(UdpSocket::bind(front).expect("bind the relay"));
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .expect("timeout");
        let (st, im, tr, bk) = (stop.clone(), impair.clone(), truth.clone(), backs.clone());
        let front = std::thread::spawn(move || {
            let mut ups: HashMap<SocketAddr, Arc<UdpSocket>> = HashMap::new();
            let mut buf = [0u8; 2048];
            while !st.load(Ordering::Relaxed) {
                let Ok((n, client)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                let up = ups.entry(client).or_insert_with(|| {
                    tr.clients.lock().expect("lock").push(client);
                    let u = Arc::new(UdpSocket::bind("127.0.0.1:0").expect("upstream"));
                    u.connect(server).expect("connect upstream");
                    u.set_read_timeout(Some(Duration::from_millis(50)))
                        .expect("timeout");
                    let (u2, f2, st2, im2, tr2) =
                        (u.clone(), sock.clone(), st.clone(), im.clone(), tr.clone());
                    let h = std::thread::spawn(move || {
                        back(&u2, &f2, client, &st2, &im2, &tr2);
                    });
                    bk.lock().expect("lock").push(h);
                    u
                });
                let _ = up.send(&buf[..n]);
            }
        });
        Relay {
            stop,
            impair,
            truth,
            front,
            backs,
        }
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.front.join().expect("relay front thread");
        for h in self.backs.lock().expect("lock").drain(..) {
            h.join().expect("relay back thread");
        }
    }
}

/// Server → client: forwards, impairing RTP by a fixed-seed generator.
fn back(
    up: &UdpSocket,
    front: &UdpSocket,
    client: SocketAddr,
    stop: &AtomicBool,
    impair: &AtomicBool,
    truth: &Truth,
) {
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64 ^ u64::from(client.port());
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % 1000
    };
    // Per SSRC: packets seen, and a packet held back.
    let mut streams: HashMap<u32, (u64, Option<Vec<u8>>)> = HashMap::new();
    let mut buf = [0u8; 2048];
    while !stop.load(Ordering::Relaxed) {
        let Ok(n) = up.recv(&mut buf) else { continue };
        let d = &buf[..n];
        if !is_rtp(d) {
            let _ = front.send_to(d, client);
            continue;
        }
        let ssrc = u32::from_be_bytes([d[8], d[9], d[10], d[11]]);
        let (seen, held) = streams.entry(ssrc).or_default();
        *seen += 1;
        // The first packets pass untouched: a stream's first packet must arrive for the
        // receiver to know where it starts.
        let r = if *seen > 10 && impair.load(Ordering::Relaxed) {
            next()
        } else {
            999
        };
        truth.forwarded.fetch_add(1, Ordering::Relaxed);
        match r {
            0..10 => {
                truth.dropped.fetch_add(1, Ordering::Relaxed);
                *truth
                    .dropped_by_ssrc
                    .lock()
                    .expect("lock")
                    .entry(ssrc)
                    .or_default() += 1;
                continue;
            }
            10..20 if held.is_none() => {
                truth.delayed.fetch_add(1, Ordering::Relaxed);
                *held = Some(d.to_vec());
                continue;
            }
            20..30 => {
                truth.duplicated.fetch_add(1, Ordering::Relaxed);
                truth
                    .duplicated_by_ssrc
                    .lock()
                    .expect("lock")
                    .entry(ssrc)
                    .or_default()
                    .push(u16::from_be_bytes([d[2], d[3]]));
                let _ = front.send_to(d, client);
            }
            _ => {}
        }
        let _ = front.send_to(d, client);
        if let Some(h) = held.take() {
            let _ = front.send_to(&h, client);
        }
    }
}

#[test]
fn loss_reordering_and_duplicates_counted_exactly() {
    let _slot = crate::common::slot();
    let (s, truth) = impaired_run("--sockets viewer");
    assert_eq!(s.verified, s.total_packets, "every packet checked");
    // One socket per viewer: one address, a port each.
    let clients = truth.clients.lock().expect("lock").clone();
    assert_eq!(clients.len(), 20);
    assert!(
        clients.iter().all(|c| c.ip() == clients[0].ip()),
        "{clients:?}"
    );
}

/// `--sockets thread` (issue 59): each media thread has one socket, each viewer its own
/// loopback address on it; the server (here the relay) still sees one address per viewer,
/// and every loss, reordering and duplicate is counted as exactly as with a socket each.
#[test]
fn loss_reordering_and_duplicates_counted_exactly_with_a_socket_per_thread() {
    let _slot = crate::common::slot();
    let (s, truth) = impaired_run("--sockets thread --threads 2");
    assert_eq!(s.verified, s.total_packets, "every packet checked");
    let clients = truth.clients.lock().expect("lock").clone();
    assert_eq!(clients.len(), 20, "{clients:?}");
    let (ips, ports) = spread(&clients);
    assert_eq!(ips, 20, "an address per viewer: {clients:?}");
    assert_eq!(ports, 2, "a port per thread: {clients:?}");
}

/// `--verify sample:16`: 1 packet in 16 is authenticated and decrypted, and loss, reordering
/// and duplicates are still counted exactly from every packet's header (issue 59). With
/// `--sockets` left at `auto` and the relay on loopback, the one media thread's socket
/// serves every viewer.
#[test]
fn loss_reordering_and_duplicates_counted_exactly_when_sampling() {
    let _slot = crate::common::slot();
    let (s, truth) = impaired_run("--verify sample:16");
    let clients = truth.clients.lock().expect("lock").clone();
    assert_eq!(
        spread(&clients),
        (20, 1),
        "auto on loopback: an address per viewer on one socket: {clients:?}"
    );
    // Every packet until a client's first frame, then 1 in 16.
    assert!(
        s.verified * 20 > s.total_packets && s.verified * 8 < s.total_packets,
        "verified {} of {}",
        s.verified,
        s.total_packets
    );
}

/// 20 viewers through a relay that drops, delays and duplicates about 1 % of the RTP
/// packets each: the bench's counts must equal the relay's. `extra`: more bench flags.
/// How many distinct addresses and ports the relay saw the viewers send from.
fn spread(clients: &[SocketAddr]) -> (usize, usize) {
    let ips: std::collections::HashSet<_> = clients.iter().map(|c| c.ip()).collect();
    let ports: std::collections::HashSet<_> = clients.iter().map(|c| c.port()).collect();
    (ips.len(), ports.len())
}

fn impaired_run(extra: &str) -> (tern_bench::report::Summary, Arc<Truth>) {
    // The server listens on 127.0.0.1 and announces 127.0.0.2, where the relay listens.
    let server = Server::demo_announcing("127.0.0.2");
    let front: SocketAddr = ([127, 0, 0, 2], server.media.port()).into();
    let relay = Relay::start(front, server.media);
    let url = format!("http://{}/live/demo/whep", server.http);
    // No RTCP: nothing is recovered by NACK, so every dropped packet stays lost.
    let a = args(&format!(
        "-url {url} -n 20 -cint 20 -life 12 -sint 4000 --no-rtcp --json {extra}"
    ));
    let impair = relay.impair.clone();
    let t0 = Instant::now();
    let flip = std::thread::spawn(move || {
        // Stop impairing 3 s before the end so every gap is followed by later packets.
        std::thread::sleep(Duration::from_secs(9).saturating_sub(t0.elapsed()));
        impair.store(false, Ordering::Relaxed);
    });
    let (o, text) = run(&a);
    flip.join().expect("flip");
    let truth = relay.truth.clone();
    relay.stop();
    let s = &o.summary;
    assert_eq!(s.connected, 20, "{text}");
    let dropped = truth.dropped.load(Ordering::Relaxed);
    let duplicated = truth.duplicated.load(Ordering::Relaxed);
    let delayed = truth.delayed.load(Ordering::Relaxed);
    let forwarded = truth.forwarded.load(Ordering::Relaxed);
    // About 1% of each while impairing (9 s of the 12), so the test means something: at
    // least 0.25 % of all (a loaded CI machine once gave 0.47 % duplicates, under the
    // 0.5 % this asked before), at most 2 %.
    assert!(forwarded > 10_000, "only {forwarded} RTP packets");
    for (what, n) in [
        ("dropped", dropped),
        ("duplicated", duplicated),
        ("delayed", delayed),
    ] {
        assert!(
            n * 400 > forwarded && n * 50 < forwarded,
            "{what} {n} of {forwarded} is not about 1%"
        );
    }
    assert_eq!(s.total_losses, dropped, "losses\n{text}");
    let dups = truth.duplicated_by_ssrc.lock().expect("lock").clone();
    let mut wrong = Vec::new();
    for c in &o.clients {
        for t in [c.video.as_ref(), c.audio.as_ref()].into_iter().flatten() {
            let sent = dups.get(&t.ssrc).map_or(&[][..], |v| &v[..]);
            if t.duplicates != sent.len() as u64 {
                wrong.push(format!(
                    "client_{} ssrc {}: counted {} of {} {:?}",
                    c.id,
                    t.ssrc,
                    t.duplicates,
                    sent.len(),
                    sent
                ));
            }
        }
    }
    assert_eq!(s.duplicates, duplicated, "duplicates {wrong:?}\n{text}");
    assert_eq!(s.reordered, delayed, "reordered\n{text}");
    assert_eq!(s.recovered, 0);
    assert_eq!(s.nacks, 0, "--no-rtcp sends no NACK");
    assert_eq!(s.srtp_failures, 0, "{text}");
    server.stop();
    (o.summary, truth)
}

#[test]
fn nacks_recover_what_the_relay_drops() {
    let _slot = crate::common::slot();
    let server = Server::demo_announcing("127.0.0.2");
    let front: SocketAddr = ([127, 0, 0, 2], server.media.port()).into();
    let relay = Relay::start(front, server.media);
    let url = format!("http://{}/live/demo/whep", server.http);
    // Impaired for 9 s of the 12, so that 1 % comes to enough drops to mean something (7 s
    // of 10 gave 48 video drops once in CI, with connections slowed by other tests).
    let a = args(&format!(
        "-url {url} -n 10 -cint 20 -life 12 -sint 5000 --json"
    ));
    let impair = relay.impair.clone();
    let flip = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(9));
        impair.store(false, Ordering::Relaxed);
    });
    let (o, text) = run(&a);
    flip.join().expect("flip");
    let truth = relay.truth.clone();
    relay.stop();
    let by_ssrc = truth.dropped_by_ssrc.lock().expect("lock").clone();
    let s = &o.summary;
    assert_eq!(s.connected, 10, "{text}");
    let (mut video_drops, mut audio_drops) = (0, 0);
    for c in &o.clients {
        let v = c.video.as_ref().expect("video");
        let a = c.audio.as_ref().expect("audio");
        let vd = by_ssrc.get(&v.ssrc).copied().unwrap_or(0);
        let ad = by_ssrc.get(&a.ssrc).copied().unwrap_or(0);
        // Video drops are NACKed and retransmitted (a retransmission may itself be
        // dropped and NACKed again): nothing stays lost. Audio is not NACKed (as in
        // Chrome), so each audio drop stays lost.
        assert_eq!(v.lost(), 0, "client_{} video: {vd} dropped\n{text}", c.id);
        assert!(
            v.nacks_sent >= vd,
            "client_{}: {} NACKs for {vd} drops",
            c.id,
            v.nacks_sent
        );
        assert_eq!(a.lost(), ad, "client_{} audio", c.id);
        assert_eq!(a.nacks_sent, 0);
        video_drops += vd;
        audio_drops += ad;
    }
    assert!(
        video_drops > 50,
        "relay dropped only {video_drops} video packets"
    );
    assert!(
        audio_drops > 5,
        "relay dropped only {audio_drops} audio packets"
    );
    assert!(s.recovered > 0, "{text}");
    let d = o.server.expect("server counters");
    assert!(
        d.retransmits >= video_drops,
        "{} retransmits",
        d.retransmits
    );
    // The per-stream metrics saw the same: every NACKed sequence number the clients sent
    // (each dropped video packet at least once), and the audio drops in their RRs.
    let nacks_sent: u64 = o
        .clients
        .iter()
        .filter_map(|c| c.video.as_ref())
        .map(|v| v.nacks_sent)
        .sum();
    let nacked = metric(&server, "tern_stream_nacks_total{stream=\"live/demo\"}");
    assert!(
        nacked >= video_drops && nacked <= nacks_sent,
        "server counted {nacked} NACKed packets; relay dropped {video_drops}, clients NACKed {nacks_sent}"
    );
    let lost = metric(
        &server,
        "tern_stream_reported_lost_total{stream=\"live/demo\"}",
    );
    assert!(
        lost >= audio_drops,
        "RRs reported {lost} lost; {audio_drops} audio packets stayed lost"
    );
    server.stop();
}

/// A sample's value from the server's `/metrics`.
fn metric(server: &Server, sample: &str) -> u64 {
    let text = common::http_get(server.http, "/metrics")
        .expect("GET /metrics")
        .text();
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{sample} missing from /metrics:\n{text}"))
}

#[test]
fn two_hundred_viewers_over_ome_websocket_signalling() {
    let _slot = crate::common::slot();
    let server = Server::demo();
    let a = args(&format!(
        "-url ws://{}/live/demo -n 200 -cint 10 -life 10 -sint 5000 --json",
        server.http
    ));
    let (o, text) = run(&a);
    let s = &o.summary;
    assert_eq!(s.connected, 200, "{text}");
    assert_eq!(s.failed, 0, "{:?}", s.failures);
    assert_eq!(s.total_losses, 0, "{text}");
    for c in &o.clients {
        assert!(
            c.video.as_ref().is_some_and(|v| v.keyframes >= 5),
            "client_{}",
            c.id
        );
        assert!(
            c.audio.as_ref().is_some_and(|a| a.packets > 100),
            "client_{}",
            c.id
        );
    }
    let d = o.server.expect("server counters");
    let unique: u64 = o
        .clients
        .iter()
        .flat_map(|c| [&c.video, &c.audio])
        .flatten()
        .map(|t| t.packets)
        .sum();
    let dropped: u64 = o.clients.iter().map(|c| c.dropped).sum();
    let dups = s.duplicates;
    assert_consistent(unique, d.packets_out - d.retransmits);
    assert_eq!((dropped, dups, s.srtp_failures), (0, 0, 0));
    // Closing the sockets ended every session.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let r = common::http_get(server.http, "/v1/stats/current").expect("stats");
        let v: serde_json::Value = serde_json::from_str(&r.text()).expect("json");
        if v["response"]["totalConnections"] == 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "sessions left: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
    server.stop();
}

#[test]
fn fifty_viewers_through_turn_with_relay() {
    let _slot = crate::common::slot();
    // A process: `turn_allocations` in /v1/memory is one line per TURN server in the
    // process, so only a process of its own shows this server's count.
    let server = Child::start(&[
        "demo",
        "--candidate",
        "127.0.0.1",
        "--turn",
        "127.0.0.1:0",
        "--turn-relay-ip",
        "127.0.0.1",
    ]);
    let http = server.http;
    let a = args(&format!(
        "-url http://{http}/live/demo/whep --relay -n 50 -cint 20 -life 8 -sint 60000 --json"
    ));
    let run = std::thread::spawn(move || run(&a));
    // Mid-run, the server holds one TURN allocation per viewer.
    std::thread::sleep(Duration::from_secs(5));
    let mem = common::http_get(http, "/v1/memory").expect("memory");
    let v: serde_json::Value = serde_json::from_str(&mem.text()).expect("json");
    let allocs = v["pools"]
        .as_array()
        .expect("pools")
        .iter()
        .find(|p| p["name"] == "turn_allocations")
        .map(|p| p["items_in_use"].as_u64().unwrap_or(0));
    let (o, text) = run.join().expect("bench");
    assert_eq!(allocs, Some(50), "TURN allocations mid-run");
    let s = &o.summary;
    assert_eq!(s.connected, 50, "{text}");
    assert_eq!(s.total_losses, 0, "{text}");
    // The viewers' selected addresses were relay addresses, not their own sockets: the
    // server saw TURN relayed traffic only (checked through the allocation count above),
    // and every media packet it sent went through the relay to the bench.
    let d = o.server.expect("server counters");
    let unique: u64 = o
        .clients
        .iter()
        .flat_map(|c| [&c.video, &c.audio])
        .flatten()
        .map(|t| t.packets)
        .sum();
    assert_consistent(unique, d.packets_out - d.retransmits);
    server.stop();
}

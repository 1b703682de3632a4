//! UDP GSO on the viewer fan-out (issue 35), end to end: `tern demo` sends each viewer's
//! run of equal-size packets as one `UDP_SEGMENT` message, and `tern bench` must get every
//! datagram whole: each passes SRTP authentication, none is missing, and the bench's count
//! agrees with the server's. Over IPv4 with `UDP_GRO` (the bench's default: the message
//! arrives whole and the bench cuts it; issue 59), over IPv6 without it (`--gro false`: the
//! kernel cuts it and queues the datagrams one by one), with `gso = "off"`, and with the first GSO
//! send made to fail (`TERN_GSO_FAIL_FIRST=1`: the kernel refuses it with `EINVAL`), which
//! must turn GSO off and lose no packet.

use crate::common;

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use clap::Parser;
use common::{Child, Running, Server, config_file, http_get};
use tern_bench::BenchArgs;

/// The tests load the machine; one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Viewers and seconds per run: enough for every viewer to see several keyframes.
const VIEWERS: usize = 40;
const LIFE_S: u32 = 8;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

fn bench(server: &impl Running, extra: &str) -> (tern_bench::Outcome, String) {
    let line = format!(
        "bench -url http://{}/live/demo/whep -n {VIEWERS} -cint 10 -life {LIFE_S} -sint 60000 --threads 2 {extra}",
        server.http()
    );
    let a = Cli::parse_from(tern_bench::normalize_args(
        line.split_whitespace().map(String::from),
    ))
    .bench;
    let mut out = Vec::new();
    let o = tern_bench::run(&a, Arc::new(AtomicBool::new(false)), &mut out).expect("bench runs");
    (o, String::from_utf8_lossy(&out).into_owned())
}

fn metric(addr: SocketAddr, name: &str) -> u64 {
    let r = http_get(addr, "/metrics").expect("GET /metrics");
    assert_eq!(r.status, 200);
    r.text()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("metric {name} missing"))
}

/// A log without its colour escapes (`ESC [ ... m`).
fn plain(log: &str) -> String {
    let mut out = String::with_capacity(log.len());
    let mut escape = false;
    for c in log.chars() {
        match (escape, c) {
            (false, '\u{1b}') => escape = true,
            (true, 'm') => escape = false,
            (true, _) => {}
            (false, c) => out.push(c),
        }
    }
    out
}

/// What the GSO counters said after a run.
#[derive(Debug)]
struct Gso {
    messages: u64,
    packets: u64,
    fallbacks: u64,
    /// Video packets the viewers received.
    video: u64,
}

/// Every viewer connected, got every packet the server sent it once, and every one passed
/// SRTP authentication; returns the GSO counters.
fn assert_whole(server: &impl Running, o: &tern_bench::Outcome, text: &str) -> Gso {
    let s = &o.summary;
    assert_eq!(s.connected, VIEWERS, "{text}");
    assert_eq!(s.failed, 0, "failures: {:?}\n{text}", s.failures);
    assert_eq!(s.total_losses, 0, "{text}");
    assert_eq!(s.srtp_failures, 0, "{text}");
    let d = o.server.expect("server exposes /v1/stats/current");
    let unique: u64 = o
        .clients
        .iter()
        .flat_map(|c| [&c.video, &c.audio])
        .flatten()
        .map(|t| t.packets)
        .sum();
    let sent_once = d.packets_out - d.retransmits;
    assert!(unique > 0, "{text}");
    // As in tests/bench.rs: only a track's first packet, dropped by a full client socket,
    // can go missing unseen; 1 in 100,000 at most.
    assert!(
        unique <= sent_once && sent_once - unique <= (sent_once / 100_000).max(2),
        "bench counted {unique}, server sent {sent_once} once\n{text}"
    );
    let video = o
        .clients
        .iter()
        .filter_map(|c| c.video.as_ref())
        .map(|t| t.packets)
        .sum();
    Gso {
        messages: metric(server.http(), "tern_gso_messages_total"),
        packets: metric(server.http(), "tern_gso_packets_total"),
        fallbacks: metric(server.http(), "tern_gso_fallbacks_total"),
        video,
    }
}

/// GSO carried most of the video: a message holds two packets or more, and at least half
/// of the video packets left inside one (the demo clip's frames are several packets each;
/// a frame's last, shorter packet joins its run).
fn assert_gso_carried(g: &Gso) {
    assert_eq!(g.fallbacks, 0, "{g:?}");
    assert!(g.messages > 0, "{g:?}");
    assert!(g.packets >= 2 * g.messages, "{g:?}");
    assert!(2 * g.packets >= g.video, "{g:?}");
}

#[test]
fn every_viewer_gets_every_segment_of_gso_messages_over_ipv4() {
    let _one = crate::common::serial(&SERIAL);
    // A process: the test reads its log.
    let server = Child::demo();
    let (o, text) = bench(&server, "");
    let g = assert_whole(&server, &o, &text);
    assert_gso_carried(&g);
    // The GSO messages reached the bench whole (UDP_GRO) and were cut there: most video
    // packets came inside one.
    let s = &o.summary;
    assert!(
        2 * s.coalesced >= g.video && s.coalesced <= s.datagrams,
        "coalesced {} of {} datagrams, {g:?}\n{text}",
        s.coalesced,
        s.datagrams
    );
    assert!(
        plain(&server.log_tail(400)).contains("gso=true"),
        "the engine reports GSO on"
    );
    server.stop();
}

#[test]
fn every_viewer_gets_every_segment_of_gso_messages_over_ipv6() {
    let _one = crate::common::serial(&SERIAL);
    let server = Server::start_on(&["demo", "--candidate", "::1"], "127.0.0.1:0", "[::1]:0");
    assert!(server.media.is_ipv6());
    let (o, text) = bench(&server, "--bind ::1 --gro false");
    let g = assert_whole(&server, &o, &text);
    assert_gso_carried(&g);
    assert_eq!(
        o.summary.coalesced, 0,
        "no UDP_GRO, nothing coalesced\n{text}"
    );
    server.stop();
}

#[test]
fn gso_off_sends_plain_datagrams() {
    let _one = crate::common::serial(&SERIAL);
    let cfg = config_file("gso-off", "[tunables]\ngso = \"off\"\n");
    // A process: the test reads its log.
    let server = Child::start(&[
        "demo",
        "--candidate",
        "127.0.0.1",
        "--config",
        cfg.to_str().expect("utf-8 path"),
    ]);
    let (o, text) = bench(&server, "");
    let g = assert_whole(&server, &o, &text);
    assert_eq!((g.messages, g.packets, g.fallbacks), (0, 0, 0), "{g:?}");
    assert_eq!(
        o.summary.coalesced, 0,
        "plain datagrams are never coalesced\n{text}"
    );
    assert!(plain(&server.log_tail(400)).contains("gso=false"));
    server.stop();
}

#[test]
fn a_failed_gso_send_turns_gso_off_and_loses_no_packet() {
    let _one = crate::common::serial(&SERIAL);
    // A process: the failure is asked for by an environment variable, and the test reads
    // its log.
    let server = Child::start_env(
        &["demo", "--candidate", "127.0.0.1"],
        "127.0.0.1:0",
        "127.0.0.1:0",
        &[("TERN_GSO_FAIL_FIRST", "1")],
    );
    let (o, text) = bench(&server, "");
    let g = assert_whole(&server, &o, &text);
    // The forced failure happened and was answered by a resend without GSO; another
    // worker may have had a GSO batch in flight when GSO went off, and resent it too.
    assert!(g.fallbacks >= 1, "{g:?}");
    assert!(g.fallbacks <= 2, "{g:?}");
    // GSO stayed off: at most what the other worker sent before the switch.
    assert!(g.packets * 100 < g.video, "{g:?}");
    let log = plain(&server.log_tail(400));
    let warnings = log.matches("UDP GSO send failed").count();
    assert_eq!(warnings, 1, "one warning:\n{log}");
    assert!(log.contains("os error 22"), "the kernel's EINVAL:\n{log}");
    server.stop();
}

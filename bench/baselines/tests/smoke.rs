//! Quick checks (a few seconds each) that the suite's baselines measure what they claim:
//! the UDP blaster delivers every datagram it counts, one copy per receiver, and the str0m
//! fan-out server streams the clip to tern bench's viewers without loss, with every
//! `write_rtp` leaving as a datagram inside the function callgrind counts.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use clap::Parser;
use serde_json::Value;
use tern_bench::BenchArgs;

fn blaster(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_udp-blaster"))
        .args(args)
        .output()
        .expect("udp-blaster runs");
    assert!(
        out.status.success(),
        "udp-blaster failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

#[test]
fn blaster_clip_mode_delivers_each_packet_to_every_receiver() {
    let v = blaster(&["--mode", "clip", "--receivers", "20", "--seconds", "2"]);
    let sent = n(&v, "sent_packets");
    // The lite clip sends ~86 packets/s (30 video frames + 50 audio packets and the
    // fragments of larger frames): 2 s to 20 receivers is a few thousand datagrams.
    assert_eq!(
        sent % 20,
        0,
        "each clip packet goes to all 20 receivers: {v}"
    );
    let per_receiver = sent / 20;
    assert!(
        (100..=400).contains(&per_receiver),
        "{per_receiver} packets per receiver in 2 s: {v}"
    );
    assert_eq!(n(&v, "received_packets"), sent, "all delivered: {v}");
    assert_eq!(n(&v, "received_bytes"), n(&v, "sent_bytes"), "{v}");
    assert!(
        v["packets_per_cpu_s"].as_f64().unwrap_or(0.0) > 1000.0,
        "{v}"
    );
}

#[test]
fn blaster_gso_mode_sends_whole_segments() {
    let v = blaster(&["--mode", "gso", "--receivers", "4", "--seconds", "0.5"]);
    let sent = n(&v, "sent_packets");
    assert!(
        sent > 0 && sent.is_multiple_of(14),
        "14 segments per message: {v}"
    );
    assert_eq!(n(&v, "sent_bytes"), sent * 1200, "{v}");
    assert!(n(&v, "received_packets") > 0, "{v}");
}

fn get_stats(http: SocketAddr) -> Value {
    let mut s = TcpStream::connect(http).expect("connect");
    s.write_all(b"GET /stats HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .expect("request");
    let mut r = String::new();
    s.read_to_string(&mut r).expect("response");
    let body = r.split("\r\n\r\n").nth(1).expect("body");
    serde_json::from_str(body.trim()).expect("JSON stats")
}

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

#[test]
fn str0m_fanout_streams_the_clip_to_tern_bench_without_loss() {
    // Port 0 for both listeners, read back from the server's report: a port probed free a
    // moment before can be taken by the blaster test running beside this one.
    let mut child = Command::new(env!("CARGO_BIN_EXE_str0m-fanout"))
        .args([
            "--http",
            "127.0.0.1:0",
            "--udp",
            "127.0.0.1:0",
            "--seconds",
            "60",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("str0m-fanout starts");
    let stderr = child.stderr.take().expect("stderr piped");
    let _guard = Kill(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("{line}");
            if let Some(addrs) = line.strip_prefix("str0m-fanout: listening http=") {
                let http = addrs.split_whitespace().next().unwrap_or_default();
                let _ = tx.send(http.parse::<SocketAddr>().expect("http address"));
            }
        }
    });
    let http = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("server did not report its addresses within 10 s");
    let idle = get_stats(http);
    let line = format!("-url http://{http}/live/demo/whep -n 5 -cint 20 -life 4");
    let argv =
        std::iter::once("bench".to_string()).chain(line.split_whitespace().map(String::from));
    let args = Cli::parse_from(tern_bench::normalize_args(argv)).bench;
    let mut out = Vec::new();
    let o = tern_bench::run(&args, Arc::new(AtomicBool::new(false)), &mut out).expect("bench");
    let s = &o.summary;
    assert_eq!(s.failed, 0, "{}", String::from_utf8_lossy(&out));
    assert_eq!(s.total_losses, 0);
    assert!(s.total_packets > 5 * 200, "{} packets", s.total_packets);
    assert!(s.fps.min >= 25.0, "fps {:?}", s.fps);
    let st = get_stats(http);
    let writes = n(&st, "fanout_writes");
    assert!(writes >= s.total_packets, "{st}");
    // Every packet written inside fan_out left inside it (what callgrind counts is the
    // whole per-packet path), plus at most a few RTCP reports.
    let tx = n(&st, "fanout_transmits");
    assert!(tx >= writes && tx <= writes + writes / 20, "{st}");
    assert_eq!(n(&st, "created"), 5);
    assert!(n(&st, "peak_bytes") > n(&idle, "live_bytes"), "{idle} {st}");
}

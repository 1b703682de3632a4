//! The worker-thread knobs (OvenMediaEngine's `WorkerCount`, `AppWorkerCount`,
//! `StreamWorkerCount`) against a real `tern`: every combination still delivers every packet,
//! the threads carry OME's names, the per-viewer work spreads over the stream workers, and a
//! bad count stops start-up naming its key.

use crate::common;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use clap::Parser;
use common::Child;
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

/// CPU time (ns) of each of the server's threads, by thread name.
fn thread_cpu(server: &Child) -> BTreeMap<String, u64> {
    let pid = server.pid().expect("running");
    let mut out = BTreeMap::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).expect("/proc task dir") {
        let dir = t.expect("task entry").path();
        let name = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let cpu: u64 = std::fs::read_to_string(dir.join("schedstat"))
            .unwrap_or_default()
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        *out.entry(name.trim().to_string()).or_insert(0) += cpu;
    }
    out
}

/// Runs `n` bench viewers for `life` seconds and checks zero loss and that the bench's
/// packets equal what the server sent once (see tests/bench.rs for the 1e-5 tolerance).
fn viewers_get_every_packet(server: &Child, stream: &str, n: usize, life: u64, publish: bool) {
    let url = format!("http://{}/{stream}/whep", server.http);
    let publish = if publish { "--publish 1 " } else { "" };
    let a = args(&format!(
        "-url {url} {publish}-n {n} -cint 10 -life {life} -sint 60000 --threads 2 --json"
    ));
    let mut out = Vec::new();
    let o = tern_bench::run(&a, Arc::new(AtomicBool::new(false)), &mut out).expect("bench runs");
    let text = String::from_utf8_lossy(&out);
    let s = &o.summary;
    assert_eq!(s.connected, n, "{text}\n{}", server.log_tail(30));
    assert_eq!(s.failed, 0, "{text}");
    assert_eq!(s.total_losses, 0, "{text}");
    assert_eq!(s.srtp_failures, 0, "{text}");
    for c in &o.clients {
        let v = c.video.as_ref().expect("video track");
        assert!(
            v.keyframes >= 2,
            "client_{}: {} keyframes",
            c.id,
            v.keyframes
        );
        assert!(c.audio.as_ref().is_some_and(|a| a.packets > 0));
    }
    let d = o.server.expect("server counters");
    let unique: u64 = o
        .clients
        .iter()
        .flat_map(|c| [&c.video, &c.audio])
        .flatten()
        .map(|t| t.packets)
        .sum();
    let sent_once = d.packets_out - d.retransmits;
    assert!(
        unique <= sent_once && sent_once - unique <= (sent_once / 100_000).max(2),
        "bench counted {unique}, server sent {sent_once} once"
    );
}

#[test]
fn two_of_each_worker_deliver_every_packet_and_share_the_viewers() {
    let _slot = crate::common::slot();
    // A process: the test reads its threads' CPU time in /proc.
    let server = Child::start(&[
        "demo",
        "--candidate",
        "127.0.0.1",
        "--worker-count",
        "2",
        "--app-worker-count",
        "2",
        "--stream-worker-count",
        "2",
    ]);
    let before = thread_cpu(&server);
    for name in [
        "SPICE-0",
        "SPICE-1",
        "AW-WebRTC0",
        "AW-WebRTC1",
        "StreamWorker0",
        "StreamWorker1",
    ] {
        assert!(before.contains_key(name), "no thread {name}: {before:?}");
    }
    viewers_get_every_packet(&server, "live/demo", 200, 10, false);
    let after = thread_cpu(&server);
    let used = |n: &str| after[n] - before.get(n).copied().unwrap_or(0);
    // Viewers are placed on the least-loaded stream worker: both encrypt and send, within
    // a factor of three of each other (they hold 100 viewers each).
    let (a, b) = (used("StreamWorker0"), used("StreamWorker1"));
    assert!(a > 0 && b > 0, "stream worker CPU {a} / {b} ns");
    assert!(a.max(b) < 3 * a.min(b), "unbalanced: {a} / {b} ns");
    // Each bench client has its own port: the kernel spreads them over both sockets.
    assert!(used("SPICE-0") > 0 && used("SPICE-1") > 0, "{after:?}");
    // The demo stream (index 0) belongs to app worker 0; app worker 1 has none.
    assert!(used("AW-WebRTC0") > used("AW-WebRTC1"));
    server.stop();
}

#[test]
fn zero_stream_workers_means_app_workers_send() {
    let _slot = crate::common::slot();
    // A process: the test lists its threads in /proc.
    let server = Child::start(&[
        "demo",
        "--candidate",
        "127.0.0.1",
        "--stream-worker-count",
        "0",
    ]);
    let threads = thread_cpu(&server);
    assert!(threads.contains_key("AW-WebRTC0"), "{threads:?}");
    assert!(
        !threads.keys().any(|k| k.starts_with("StreamWorker")),
        "{threads:?}"
    );
    viewers_get_every_packet(&server, "live/demo", 100, 8, false);
    server.stop();
}

#[test]
fn a_whip_publisher_on_the_second_app_worker_feeds_viewers_on_stream_workers() {
    let _slot = crate::common::slot();
    let cfg = std::env::temp_dir().join(format!("tern-workers-{}.toml", std::process::id()));
    std::fs::write(
        &cfg,
        "[server]\napp_worker_count = 2\nstream_worker_count = 2\n\n\
         [[app]]\nname = \"live\"\nstreams = [\"zero\", \"cam\"]\n",
    )
    .expect("write config");
    // A process: the test reads its threads' CPU time in /proc.
    let server = Child::serve(&cfg);
    let before = thread_cpu(&server);
    // `live/cam` is stream 1: app worker 1 runs its publisher session.
    viewers_get_every_packet(&server, "live/cam", 40, 8, true);
    let after = thread_cpu(&server);
    let used = |n: &str| after[n] - before.get(n).copied().unwrap_or(0);
    assert!(
        used("AW-WebRTC1") > used("AW-WebRTC0"),
        "{before:?} -> {after:?}"
    );
    server.stop();
    let _ = std::fs::remove_file(cfg);
}

#[test]
fn a_bad_worker_count_stops_start_up_naming_the_key() {
    let _slot = crate::common::slot();
    let bin = env!("CARGO_BIN_EXE_tern");
    let cfg = std::env::temp_dir().join(format!("tern-workers-bad-{}.toml", std::process::id()));
    for (body, key) in [
        ("[server]\nworker_count = 0\n", "server.worker_count"),
        (
            "[server]\napp_worker_count = 0\n",
            "server.app_worker_count",
        ),
        (
            "[server]\nstream_worker_count = 1000\n",
            "server.stream_worker_count",
        ),
    ] {
        std::fs::write(&cfg, body).expect("write config");
        let out = Command::new(bin)
            .args(["config", "check"])
            .arg(&cfg)
            .output()
            .expect("run tern config check");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{body} accepted");
        assert!(err.contains(key), "{body}: {err}");
    }
    // The command-line flag passes the same check, named by its config key.
    let out = Command::new(bin)
        .args(["serve", "--http", "127.0.0.1:0", "--media", "127.0.0.1:0"])
        .args(["--stream-worker-count", "999"])
        .output()
        .expect("run tern serve");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("server.stream_worker_count"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_file(cfg);
}

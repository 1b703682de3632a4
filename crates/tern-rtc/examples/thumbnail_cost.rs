//! CPU of one thumbnail (bench/thumbnail.sh): decodes the keyframe in FILE (H264 Annex B,
//! parameter sets in band) N times, then makes a JPEG of its own size and one 320 wide N
//! times each, and prints the CPU this thread spent per call (from
//! /proc/thread-self/schedstat, nanoseconds: exact where wall time on a shared machine is
//! not).
//!
//!   cargo run --release -p tern-rtc --example thumbnail_cost -- FILE [N]

use std::time::Duration;

use tern_proto::codec::VideoCodec;
use tern_rtc::thumbnail;

/// CPU time this thread has run.
fn cpu() -> Duration {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").expect("read schedstat");
    let ns: u64 = s
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .expect("schedstat's first field");
    Duration::from_nanos(ns)
}

fn per_call(n: u32, mut f: impl FnMut()) -> Duration {
    let t0 = cpu();
    for _ in 0..n {
        f();
    }
    (cpu() - t0) / n
}

fn main() {
    let mut args = std::env::args().skip(1);
    let file = args.next().expect("usage: thumbnail_cost FILE [N]");
    let n: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(50);
    let key = std::fs::read(&file).expect("read the keyframe");
    let still = thumbnail::decode(VideoCodec::H264, &key).expect("decode");
    let decode = per_call(n, || {
        thumbnail::decode(VideoCodec::H264, &key).expect("decode");
    });
    let full = per_call(n, || {
        still.jpeg(None).expect("jpeg");
    });
    let small = per_call(n, || {
        still.jpeg(Some(320)).expect("jpeg 320");
    });
    let bytes = still.jpeg(None).expect("jpeg").len();
    println!(
        "{}x{} keyframe {} B: decode {:.2} ms, JPEG at its size {:.2} ms ({} B), JPEG 320 wide {:.2} ms (CPU per call, {n} calls)",
        still.width(),
        still.height(),
        key.len(),
        decode.as_secs_f64() * 1e3,
        full.as_secs_f64() * 1e3,
        bytes,
        small.as_secs_f64() * 1e3,
    );
}

//! tern bench's WebRTC viewers from a test: its command line parsed as `tern bench` parses it,
//! and a run on a thread of its own.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use clap::Parser;
use tern_bench::{BenchArgs, Outcome};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

/// `line` (OvenRtcTester's single-dash spellings too) as `tern bench` reads it.
pub fn args(line: &str) -> BenchArgs {
    let argv =
        std::iter::once("bench".to_string()).chain(line.split_whitespace().map(String::from));
    Cli::parse_from(tern_bench::normalize_args(argv)).bench
}

/// Runs `tern bench LINE` on a thread; joins to its outcome and what it printed.
pub fn viewers(line: String) -> std::thread::JoinHandle<(Outcome, String)> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let a = args(&line);
        let o = tern_bench::run(&a, Arc::new(AtomicBool::new(false)), &mut out).expect("bench");
        (o, String::from_utf8_lossy(&out).into_owned())
    })
}

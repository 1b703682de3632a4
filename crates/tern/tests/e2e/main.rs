//! tern's end-to-end tests: one test binary, one module per surface or concern.
//!
//! Each module was its own integration test binary until issue 34's third pass. Every one of
//! them linked the whole server, and `cargo test` ran them one after another, so a binary whose
//! last test was long left the second core idle. As modules of one binary the harness keeps
//! both cores busy across files. On this 2-core machine, in release with the dependencies
//! already built: 26 test crates compiled in 60 s against 24 s for this one, and ran in 719 s
//! against 549 s (BENCHMARKS.md, issue 34).
//!
//! Run one module with a filter: `cargo test --release -p tern --test e2e srt::`.
//! Every test first takes one of `E2E_THREADS` slots (default 3) with `common::slot()`;
//! tests in a module that must not overlap each other take that module's own lock
//! (`ONE_AT_A_TIME` or `SERIAL`) and then a slot, with `common::serial(&LOCK)`, so that a
//! test waiting on a lock holds no slot (`common/slot.rs`; `house` checks that every test
//! does one or the other). `scripts/test.sh` lets libtest start every test at once
//! (`--test-threads=256`): the slots decide how many work.
//!
//! Most tests run their server in this process (`common::Server`); those that need a process
//! of their own (signals, pid, `/proc`, environment, log lines, process-wide memory figures)
//! run the `tern` binary (`common::Child`), each saying why at its call site.

mod common;

/// The `tern` binary's counting allocator, so that an in-process server measures what it
/// measures there: the heap an ingest thread holds (`rtmp_ingest`, `srt_ingest`,
/// `rtsp_ingest` in `/v1/memory`) is that thread's count. The process-wide totals are this
/// test process's and mean nothing to a test.
#[global_allocator]
static ALLOC: tern_pool::CountingAlloc = tern_pool::CountingAlloc::new();

mod admission;
mod api;
mod bench;
mod cluster;
mod drain;
mod forward;
mod gso;
mod health;
mod hls;
mod house;
mod https;
mod https_callouts;
mod ingest;
mod limits;
mod memory;
mod ome;
mod openssl_rsa;
mod packaging;
mod publisher_timeouts;
mod recording;
mod reload;
mod renditions;
mod rsa_client;
mod rtmp;
mod rtsp;
mod shutdown;
mod srt;
mod srt_play;
mod thumbs;
mod tokens;
mod turn;
mod viewers;
mod whep;
mod workers;

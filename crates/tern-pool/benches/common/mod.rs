//! Allocate+free pairs of one packet buffer: the pool against the global allocator, on one
//! thread and across threads. Shared by the `pair` (glibc) and `pair_mimalloc` benches,
//! which differ only in the global allocator.

use std::hint::black_box;
use std::thread;
use std::time::Instant;

use tern_pool::{Buf, BufferPool, MemoryRegistry, PoolConfig};

const PACKET: usize = 1500;
const OPS: u64 = 4_000_000;
const RUNS: usize = 7;
/// Buffers handed from the allocating to the freeing thread per channel message.
const BATCH: usize = 64;

fn best_median(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[0], v[v.len() / 2])
}

fn runs(mut f: impl FnMut() -> f64) -> (f64, f64) {
    f();
    best_median((0..RUNS).map(|_| f()).collect())
}

fn same_thread<T>(alloc: impl Fn(u8) -> T) -> f64 {
    let t = Instant::now();
    for i in 0..OPS {
        black_box(alloc(i as u8));
    }
    t.elapsed().as_nanos() as f64 / OPS as f64
}

/// One thread allocates and sends batches of `BATCH` buffers over a channel; another frees
/// them. Wall time per pair (the channel costs one send per `BATCH` buffers).
fn cross_thread<T: Send + 'static>(alloc: impl Fn(u8) -> T + Send + Sync) -> f64 {
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<T>>(16);
    let (back_tx, back_rx) = std::sync::mpsc::sync_channel::<Vec<T>>(16);
    for _ in 0..8 {
        let _ = back_tx.send(Vec::with_capacity(BATCH));
    }
    let t = Instant::now();
    thread::scope(|s| {
        s.spawn(move || {
            for mut batch in rx {
                batch.clear();
                let _ = back_tx.send(batch);
            }
        });
        for _ in 0..OPS / BATCH as u64 {
            let mut batch = back_rx.recv().expect("batch");
            for i in 0..BATCH {
                batch.push(alloc(i as u8));
            }
            tx.send(batch).expect("send");
        }
        drop(tx);
    });
    t.elapsed().as_nanos() as f64 / OPS as f64
}

fn pool_buf(pool: &BufferPool, i: u8) -> Buf {
    let mut b = pool.alloc(PACKET);
    b[0] = i;
    b
}

fn vec_buf(i: u8) -> Vec<u8> {
    let mut v = Vec::with_capacity(PACKET);
    v.push(i);
    v
}

/// Prints the table for the global allocator named `allocator`.
pub fn run(allocator: &str) {
    let reg = MemoryRegistry::new();
    let pool = BufferPool::new_in(&reg, PoolConfig::packets("bench")).expect("config");
    pool.set_warn_hook(Box::new(|_, _| {}));
    println!("allocate+free of one {PACKET}-byte buffer, global allocator: {allocator}");
    println!("ns per pair, best and median of {RUNS} runs of {OPS}");
    println!("{:<46} {:>8} {:>8}", "case", "best", "median");
    let row = |name: &str, (b, m): (f64, f64)| println!("{name:<46} {b:>8.1} {m:>8.1}");
    row(
        "pool, same thread",
        runs(|| same_thread(|i| pool_buf(&pool, i))),
    );
    row(
        &format!("{allocator} Vec, same thread"),
        runs(|| same_thread(vec_buf)),
    );
    row(
        "pool, alloc on one thread, free on another",
        runs(|| cross_thread(|i| pool_buf(&pool, i))),
    );
    row(
        &format!("{allocator} Vec, alloc on one thread, free on another"),
        runs(|| cross_thread(vec_buf)),
    );
    let s = pool.stats();
    println!("(pool: {} hits, {} misses)", s.hits, s.misses);
}

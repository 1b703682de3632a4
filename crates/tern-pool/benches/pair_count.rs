//! A fixed number of same-thread allocate+free pairs, for instruction counts under
//! callgrind (timings on a shared machine are noisy; instruction counts repeat):
//!
//! ```text
//! cargo bench -p tern-pool --bench pair_count --no-run   # prints the binary's path
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null BIN pool 1000000
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null BIN pool 2000000
//! ```
//!
//! Instructions per pair = (Ir at 2N - Ir at N) / N. The first argument is `pool`, `vec`
//! (glibc's malloc, for scale) or `fanout` (a packet's life on the server: allocated,
//! written, frozen, cloned into two more rings, every clone dropped). Without arguments (as `cargo bench` runs it) it does a
//! short run and prints nothing of interest.

use std::hint::black_box;

use tern_pool::{BufferPool, MemoryRegistry, PoolConfig};

const PACKET: usize = 1500;

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let what = args.next().unwrap_or_else(|| "pool".to_owned());
    let n: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1000);
    let reg = MemoryRegistry::new();
    let pool = BufferPool::new_in(&reg, PoolConfig::packets("count")).expect("config");
    pool.set_warn_hook(Box::new(|_, _| {}));
    // Warm up: the thread cache exists and holds buffers.
    drop(pool.alloc(PACKET));
    match what.as_str() {
        "vec" => {
            for i in 0..n {
                let mut v = Vec::<u8>::with_capacity(PACKET);
                v.push(i as u8);
                black_box(v);
            }
        }
        "fanout" => {
            for i in 0..n {
                let mut b = pool.alloc(PACKET);
                b[0] = i as u8;
                let shared = b.freeze();
                let rings = [shared.clone(), shared.clone()];
                black_box(&rings);
                drop(shared);
                drop(rings);
            }
        }
        _ => {
            for i in 0..n {
                let mut b = pool.alloc(PACKET);
                b[0] = i as u8;
                black_box(b);
            }
        }
    }
    println!("{what}: {n} pairs");
}

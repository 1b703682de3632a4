//! Packet buffer allocation: the pool against `Vec` and `Box<[u8]>`, and spead2's
//! first-touch experiment (a prefaulted pool against one faulted in by the first packets).
//!
//! Run with `cargo bench -p tern-pool --bench alloc`. Plain `std::time`, no harness: every
//! figure is the median of several runs; the table is printed to stdout.

use std::hint::black_box;
use std::thread;
use std::time::{Duration, Instant};

use tern_pool::{BufferPool, CountingAlloc, MemoryRegistry, PoolConfig, Slab, format_dd};

const PACKET: usize = 1500;
const OPS: u64 = 2_000_000;
const RUNS: usize = 7;
const BIG: usize = 64 * 1024;
const BIG_N: usize = 1024;

/// Best and median of a set of timings. The best is the figure to compare across changes on
/// a shared machine (interference only ever adds time); the median shows the spread.
#[derive(Clone, Copy)]
struct Timing {
    best: f64,
    median: f64,
}

fn timing(mut v: Vec<f64>) -> Timing {
    v.sort_by(f64::total_cmp);
    Timing {
        best: v[0],
        median: v[v.len() / 2],
    }
}

/// ns per operation of `f(ops)` (which performs `ops` operations) over `RUNS` runs, after one
/// warm-up run.
fn ns_per_op(ops: u64, mut f: impl FnMut(u64)) -> Timing {
    f(ops / 10);
    timing(
        (0..RUNS)
            .map(|_| {
                let t = Instant::now();
                f(ops);
                t.elapsed().as_nanos() as f64 / ops as f64
            })
            .collect(),
    )
}

fn packet_pool(reg: &MemoryRegistry, name: &'static str) -> BufferPool {
    let pool = BufferPool::new_in(reg, PoolConfig::packets(name)).expect("valid config");
    pool.set_warn_hook(Box::new(|_, _| {}));
    pool
}

fn pool_alloc_free(pool: &BufferPool, ops: u64) {
    for i in 0..ops {
        let mut b = pool.alloc(PACKET);
        b[0] = i as u8;
        black_box(&b);
    }
}

fn vec_alloc_free(ops: u64) {
    for i in 0..ops {
        let mut v = Vec::<u8>::with_capacity(PACKET);
        v.push(i as u8);
        black_box(&v);
    }
}

fn box_alloc_free(ops: u64) {
    for i in 0..ops {
        let mut b = vec![0u8; PACKET].into_boxed_slice();
        b[0] = i as u8;
        black_box(&b);
    }
}

fn pool_burst(pool: &BufferPool, ops: u64) {
    let mut held = Vec::with_capacity(64);
    for _ in 0..ops / 64 {
        for i in 0..64u8 {
            let mut b = pool.alloc(PACKET);
            b[0] = i;
            held.push(b);
        }
        black_box(&held);
        held.clear();
    }
}

fn vec_burst(ops: u64) {
    let mut held = Vec::with_capacity(64);
    for _ in 0..ops / 64 {
        for i in 0..64u8 {
            let mut v = Vec::<u8>::with_capacity(PACKET);
            v.push(i);
            held.push(v);
        }
        black_box(&held);
        held.clear();
    }
}

/// ns per operation with `threads` threads each running `f(ops / threads)`, measured as wall
/// time / total operations.
fn parallel(threads: usize, ops: u64, f: impl Fn(u64) + Sync) -> Timing {
    let per = ops / threads as u64;
    timing(
        (0..RUNS)
            .map(|_| {
                let t = Instant::now();
                thread::scope(|s| {
                    for _ in 0..threads {
                        s.spawn(|| f(per));
                    }
                });
                t.elapsed().as_nanos() as f64 / (per * threads as u64) as f64
            })
            .collect(),
    )
}

/// Minor page faults of this process so far (Linux; 0 elsewhere).
fn minor_faults() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0;
    };
    // Fields after the parenthesised command name: state is the first, minflt the eighth.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(7))
        .and_then(|f| f.parse().ok())
        .unwrap_or(0)
}

/// A first-touch case: its name and how to run it once.
type Case = (&'static str, fn() -> Touch);

struct Touch {
    create: Duration,
    first: Duration,
    first_faults: u64,
    second: Duration,
    backing: String,
}

/// spead2's experiment: make a pool of `BIG_N` x 64 KiB buffers, then fill every buffer as a
/// burst of large payloads would (first touch), then again (warm).
fn first_touch(prefault: bool, huge_pages: bool) -> Touch {
    let reg = MemoryRegistry::new();
    let t = Instant::now();
    let pool = BufferPool::new_in(
        &reg,
        PoolConfig {
            name: "first_touch",
            lower: 1,
            upper: BIG,
            initial: BIG_N,
            max_free: BIG_N,
            low_water: 0,
            prefault,
            huge_pages,
        },
    )
    .expect("valid config");
    let create = t.elapsed();
    let fill = |round: u8| {
        let faults = minor_faults();
        let t = Instant::now();
        let mut held = Vec::with_capacity(BIG_N);
        for _ in 0..BIG_N {
            let mut b = pool.alloc(BIG);
            b.fill(round);
            held.push(b);
        }
        black_box(&held);
        (t.elapsed(), minor_faults() - faults)
    };
    let (first, first_faults) = fill(1);
    let (second, _) = fill(2);
    assert_eq!(pool.stats().misses, 0);
    Touch {
        create,
        first,
        first_faults,
        second,
        backing: format!("{:?}", pool.backing()),
    }
}

/// The same fill with a fresh `vec![0; 64 KiB]` per buffer and no pool.
fn first_touch_vec() -> Touch {
    let fill = |round: u8| {
        let faults = minor_faults();
        let t = Instant::now();
        let mut held = Vec::with_capacity(BIG_N);
        for _ in 0..BIG_N {
            let mut b = vec![0u8; BIG];
            b.fill(round);
            held.push(b);
        }
        black_box(&held);
        (t.elapsed(), minor_faults() - faults)
    };
    let (first, first_faults) = fill(1);
    let (second, _) = fill(2);
    Touch {
        create: Duration::ZERO,
        first,
        first_faults,
        second,
        backing: "malloc".to_owned(),
    }
}

fn median_touch(mut f: impl FnMut() -> Touch) -> Touch {
    let mut runs: Vec<Touch> = (0..5).map(|_| f()).collect();
    runs.sort_by_key(|r| r.first);
    runs.swap_remove(runs.len() / 2)
}

fn main() {
    let reg = MemoryRegistry::new();
    let pool = packet_pool(&reg, "bench");
    let cpus = thread::available_parallelism().map_or(1, |n| n.get());

    println!("alloc + free of one {PACKET}-byte buffer ({RUNS} runs, ns/op)");
    println!("{:<52} {:>8} {:>8}", "case", "best", "median");
    let row = |name: &str, t: Timing| println!("{name:<52} {:>8.1} {:>8.1}", t.best, t.median);
    row(
        "pool.alloc(1500), 1 thread",
        ns_per_op(OPS, |n| pool_alloc_free(&pool, n)),
    );
    row(
        "Vec::with_capacity(1500), 1 thread",
        ns_per_op(OPS, vec_alloc_free),
    );
    row(
        "Box<[u8]> (vec![0; 1500], zeroed), 1 thread",
        ns_per_op(OPS, box_alloc_free),
    );
    row(
        "pool, bursts of 64 (alloc 64, free 64)",
        ns_per_op(OPS, |n| pool_burst(&pool, n)),
    );
    row("Vec, bursts of 64", ns_per_op(OPS, vec_burst));
    row(
        "pool alloc + freeze + 2 clones + drops (fan-out 3)",
        ns_per_op(OPS, |n| {
            for i in 0..n {
                let mut b = pool.alloc(PACKET);
                b[0] = i as u8;
                let s = b.freeze();
                let (c1, c2) = (s.clone(), s.clone());
                black_box((&s, &c1, &c2));
            }
        }),
    );
    for threads in [cpus, 8] {
        row(
            &format!("pool, {threads} threads (wall ns / total ops)"),
            parallel(threads, OPS * 2, |n| pool_alloc_free(&pool, n)),
        );
        row(
            &format!("Vec, {threads} threads (wall ns / total ops)"),
            parallel(threads, OPS * 2, vec_alloc_free),
        );
        row(
            &format!("pool bursts of 64, {threads} threads"),
            parallel(threads, OPS * 2, |n| pool_burst(&pool, n)),
        );
        row(
            &format!("Vec bursts of 64, {threads} threads"),
            parallel(threads, OPS * 2, vec_burst),
        );
    }
    let s = pool.stats();
    println!(
        "(pool stats: {} hits, {} misses, {} free, high water {})",
        s.hits, s.misses, s.free, s.high_water
    );

    println!();
    println!(
        "first touch: {BIG_N} x {} KiB buffers filled once (cold) and again (warm); median of 5",
        BIG / 1024
    );
    println!(
        "{:<34} {:>22} {:>10} {:>12} {:>10} {:>12} {:>10}",
        "case", "backing", "create ms", "1st fill ms", "faults", "2nd fill ms", "1st ns/KiB"
    );
    let cases: [Case; 4] = [
        ("pool, prefault off", || first_touch(false, false)),
        ("pool, prefault on", || first_touch(true, false)),
        ("pool, prefault + huge_pages", || first_touch(true, true)),
        ("vec![0; 64 KiB] each, no pool", first_touch_vec),
    ];
    for (name, f) in cases {
        let r = median_touch(f);
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "{:<34} {:>22} {:>10.2} {:>12.2} {:>10} {:>12.2} {:>10.1}",
            name,
            r.backing,
            ms(r.create),
            ms(r.first),
            r.first_faults,
            ms(r.second),
            r.first.as_nanos() as f64 / (BIG_N * BIG / 1024) as f64,
        );
    }

    // The memory report of this bench's registry, as `tern mem` prints it (no counting
    // allocator is installed here, so the allocator's heap figures read 0).
    let mut sessions: Slab<[u8; 512]> = Slab::new_in(&reg, "viewer_sessions", 256);
    for _ in 0..100 {
        sessions.insert([0; 512]);
    }
    let held: Vec<_> = (0..300).map(|_| pool.alloc(1200)).collect();
    println!();
    print!("{}", format_dd(&reg.reports(), &CountingAlloc::stats()));
    drop(held);
}

//! The counting allocator installed as the global allocator of this test binary.

use std::hint::black_box;
use std::sync::{Mutex, MutexGuard};
use std::thread;

use tern_pool::{BufferPool, CountingAlloc, MemoryRegistry, PoolConfig};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

/// The counters are process-wide: run these tests one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Slack for allocations made concurrently by the test harness itself.
const SLACK: usize = 64 * 1024;

#[test]
fn live_bytes_grow_by_a_vec_and_shrink_when_it_drops() {
    let _g = serial();
    const N: usize = 1 << 20;
    let before = CountingAlloc::stats();
    let v = black_box(vec![1u8; N]);
    let during = CountingAlloc::stats();
    // Other threads of the harness may free a little meanwhile.
    assert!(
        during.live_bytes + SLACK >= before.live_bytes + N,
        "{before:?} -> {during:?}"
    );
    assert!(during.allocations > before.allocations);
    assert!(during.peak_bytes >= during.live_bytes);
    drop(v);
    let after = CountingAlloc::stats();
    assert!(
        after.live_bytes + N <= during.live_bytes + SLACK,
        "{during:?} -> {after:?}"
    );
    assert!(after.frees > during.frees);
    assert!(
        after.peak_bytes >= during.live_bytes,
        "peak remembers the Vec"
    );
    CountingAlloc::reset_peak();
    let reset = CountingAlloc::stats();
    assert!(reset.peak_bytes < during.live_bytes, "{reset:?}");
    assert!(reset.peak_bytes >= reset.live_bytes);
}

#[test]
fn counts_from_many_threads_add_up() {
    let _g = serial();
    let before = CountingAlloc::stats();
    let workers: Vec<_> = (0..8)
        .map(|_| {
            thread::spawn(|| {
                for i in 0..1000usize {
                    black_box(Box::new([i; 16]));
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("join");
    }
    let after = CountingAlloc::stats();
    assert!(after.allocations - before.allocations >= 8000);
    assert!(after.frees - before.frees >= 8000);
    // Every box was freed: no drift beyond what the harness and thread stacks account for.
    assert!(
        after.live_bytes <= before.live_bytes + SLACK,
        "{before:?} -> {after:?}"
    );
}

#[test]
fn released_pool_buffers_go_back_to_the_system() {
    let _g = serial();
    const UPPER: usize = 64 * 1024;
    let reg = MemoryRegistry::new();
    let pool = BufferPool::new_in(
        &reg,
        PoolConfig {
            name: "release",
            lower: 1,
            upper: UPPER,
            initial: 4,
            max_free: 4,
            low_water: 0,
            prefault: false,
            huge_pages: false,
        },
    )
    .expect("pool");
    pool.set_warn_hook(Box::new(|_, _| {}));
    let bufs: Vec<_> = (0..36).map(|_| pool.alloc(UPPER)).collect();
    let full = CountingAlloc::stats();
    drop(bufs);
    let after = CountingAlloc::stats();
    assert_eq!(pool.stats().released, 32);
    assert!(
        after.live_bytes + 32 * UPPER <= full.live_bytes + SLACK,
        "{full:?} -> {after:?}"
    );
}

#[test]
fn prefaulted_pools_are_mapped_outside_the_heap_and_unmapped_when_gone() {
    let _g = serial();
    const UPPER: usize = 2048;
    const INITIAL: usize = 256;
    let before = CountingAlloc::stats();
    let reg = MemoryRegistry::new();
    let pool = BufferPool::new_in(
        &reg,
        PoolConfig {
            name: "mapped",
            lower: 1,
            upper: UPPER,
            initial: INITIAL,
            max_free: INITIAL,
            low_water: 0,
            prefault: true,
            huge_pages: false,
        },
    )
    .expect("pool");
    let during = CountingAlloc::stats();
    if cfg!(target_os = "linux") {
        assert!(during.mapped_bytes >= before.mapped_bytes + INITIAL * UPPER);
        // The buffers themselves are not heap allocations.
        assert!(during.live_bytes < before.live_bytes + INITIAL * UPPER / 2);
    }
    let b = pool.alloc(100);
    drop(pool);
    assert!(
        CountingAlloc::stats().mapped_bytes >= during.mapped_bytes,
        "a buffer keeps it"
    );
    drop(b);
    assert_eq!(CountingAlloc::stats().mapped_bytes, before.mapped_bytes);
}

#[test]
fn a_closed_pool_frees_what_other_threads_cached() {
    let _g = serial();
    let before = CountingAlloc::stats().mapped_bytes;
    let reg = MemoryRegistry::new();
    let pool = BufferPool::new_in(
        &reg,
        PoolConfig {
            name: "cached_elsewhere",
            lower: 1,
            upper: 4096,
            initial: 64,
            max_free: 64,
            low_water: 0,
            prefault: true,
            huge_pages: false,
        },
    )
    .expect("pool");
    let mapped = || CountingAlloc::stats().mapped_bytes;
    let (to_worker, worker_rx) = std::sync::mpsc::channel::<()>();
    let (to_main, main_rx) = std::sync::mpsc::channel::<()>();
    let worker = {
        let pool = pool.clone();
        thread::spawn(move || {
            // Take a batch into this thread's cache, give most of it back there, keep one.
            let mut bufs: Vec<_> = (0..8).map(|_| pool.alloc(4096)).collect();
            let kept = bufs.pop();
            drop(bufs);
            drop(pool);
            to_main.send(()).expect("main alive");
            worker_rx.recv().expect("main alive");
            // Returning a buffer of the closed pool frees it and this thread's cache.
            drop(kept);
            to_main.send(()).expect("main alive");
            worker_rx.recv().expect("main alive");
        })
    };
    main_rx.recv().expect("worker alive");
    drop(pool);
    assert!(reg.reports().is_empty(), "closed pools leave the report");
    if cfg!(target_os = "linux") {
        assert!(mapped() > before, "the worker still holds region buffers");
    }
    to_worker.send(()).expect("worker alive");
    main_rx.recv().expect("worker alive");
    assert_eq!(mapped(), before, "freed while the worker still runs");
    to_worker.send(()).expect("worker alive");
    worker.join().expect("join");
}

#[test]
fn a_closed_pool_frees_thread_caches_at_thread_exit() {
    let _g = serial();
    let before = CountingAlloc::stats().mapped_bytes;
    let reg = MemoryRegistry::new();
    let pool = BufferPool::new_in(
        &reg,
        PoolConfig {
            name: "cached_at_exit",
            lower: 1,
            upper: 4096,
            initial: 64,
            max_free: 64,
            low_water: 0,
            prefault: true,
            huge_pages: false,
        },
    )
    .expect("pool");
    let (to_worker, worker_rx) = std::sync::mpsc::channel::<()>();
    let (to_main, main_rx) = std::sync::mpsc::channel::<()>();
    let worker = {
        let pool = pool.clone();
        thread::spawn(move || {
            drop((0..8).map(|_| pool.alloc(4096)).collect::<Vec<_>>());
            drop(pool);
            to_main.send(()).expect("main alive");
            worker_rx.recv().expect("main alive");
        })
    };
    main_rx.recv().expect("worker alive");
    drop(pool);
    to_worker.send(()).expect("worker alive");
    worker.join().expect("join");
    assert_eq!(
        CountingAlloc::stats().mapped_bytes,
        before,
        "nothing leaked"
    );
}

/// With the `aws-lc` feature the crypto library's heap goes through the counting allocator:
/// an AES-256-GCM key (an aws-lc `EVP_AEAD_CTX` of 500+ bytes) shows up in the live bytes,
/// and leaves them exactly when it drops.
#[cfg(feature = "aws-lc")]
#[test]
fn aws_lc_allocations_are_counted() {
    use aws_lc_rs::aead::{AES_256_GCM, LessSafeKey, UnboundKey};
    let _g = serial();
    // No other test of this binary uses aws-lc, so nothing has allocated through it yet.
    assert!(tern_pool::count_crypto_allocations());
    // Memory functions can be set once only.
    assert!(!tern_pool::count_crypto_allocations());
    // Warm up aws-lc's one-time initialisation (CPU capabilities, self-tests).
    drop(black_box(LessSafeKey::new(
        UnboundKey::new(&AES_256_GCM, &[7; 32]).expect("key"),
    )));
    // This thread's net count: other threads of the test binary may allocate meanwhile.
    let before = CountingAlloc::thread_net_bytes();
    let key = black_box(LessSafeKey::new(
        UnboundKey::new(&AES_256_GCM, &[9; 32]).expect("key"),
    ));
    let during = CountingAlloc::thread_net_bytes();
    assert!(
        during >= before + 500,
        "aws-lc key not counted: {before} -> {during} net bytes"
    );
    drop(key);
    assert_eq!(
        CountingAlloc::thread_net_bytes(),
        before,
        "the key's memory went back exactly"
    );
}

/// The per-thread net count sees this thread's allocations exactly, and not another
/// thread's.
#[test]
fn thread_net_bytes_is_per_thread_and_exact() {
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::sync::{Arc, Barrier};
    let _g = serial();
    // Barriers and an atomic: nothing in the hand-over allocates.
    let sync = Arc::new((Barrier::new(2), Barrier::new(2), AtomicI64::new(0)));
    let theirs = sync.clone();
    let other = thread::spawn(move || {
        theirs.0.wait();
        // Measured from here: the thread's start freed memory its parent allocated.
        let base = CountingAlloc::thread_net_bytes();
        let w = black_box(vec![0u8; 5000]);
        let mine = CountingAlloc::thread_net_bytes() - base;
        theirs.2.store(mine, Ordering::SeqCst);
        theirs.1.wait();
        drop(w);
    });
    let before = CountingAlloc::thread_net_bytes();
    let v = black_box(vec![0u8; 1000]);
    assert_eq!(CountingAlloc::thread_net_bytes() - before, 1000);
    sync.0.wait();
    sync.1.wait();
    let seen = sync.2.load(Ordering::SeqCst);
    assert_eq!(seen, 5000);
    // The other thread's 5000 bytes are not on this thread's count.
    assert_eq!(CountingAlloc::thread_net_bytes() - before, 1000);
    drop(v);
    assert_eq!(CountingAlloc::thread_net_bytes(), before);
    other.join().expect("join");
}

/// A packet's life on the server: allocated from the pool, frozen, cloned into rings, the
/// clones dropped. None of it may touch the allocator (the ring's packets would otherwise
/// pin the C allocator's pages; see `bench/soak.sh`).
#[test]
fn freezing_cloning_and_dropping_a_pooled_buffer_allocates_nothing() {
    let _g = serial();
    let reg = MemoryRegistry::new();
    let pool = BufferPool::new_in(&reg, PoolConfig::packets("freeze")).expect("pool");
    // Warm this thread's cache.
    drop(pool.alloc(1200));
    // The count is the process's: the test harness's thread may allocate meanwhile (it
    // prints the result of the test before this one). A path that allocated would do so in
    // every pass, 1,000 times or more, so one pass of three without a single allocation is
    // the proof.
    let mut passes = Vec::new();
    for _ in 0..3 {
        let before = CountingAlloc::stats();
        for i in 0..1000u32 {
            let mut b = pool.alloc(1200);
            b[..4].copy_from_slice(&i.to_be_bytes());
            let shared = b.freeze();
            let ring = [shared.clone(), shared.clone()];
            drop(shared);
            black_box(&ring);
            drop(ring);
        }
        let after = CountingAlloc::stats();
        passes.push(after.allocations.wrapping_sub(before.allocations));
        if passes.last() == Some(&0) {
            break;
        }
    }
    assert!(
        passes.contains(&0),
        "allocations in each pass of 1,000: {passes:?}"
    );
    assert_eq!(pool.stats().in_use, 0);
}

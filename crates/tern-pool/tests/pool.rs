//! Buffer pool behaviour: concurrency, LIFO reuse, `max_free`, dry pools, refill, statistics,
//! shared buffers, and the memory report.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::Instant;

use tern_pool::{
    AllocStats, Buf, BufferPool, MemoryRegistry, PoolBacking, PoolConfig, SharedBuf, Slab,
    WARN_INTERVAL, format_dd,
};

fn cfg(name: &'static str, upper: usize, initial: usize, max_free: usize) -> PoolConfig {
    PoolConfig {
        name,
        lower: 1,
        upper,
        initial,
        max_free,
        low_water: 0,
        prefault: false,
        huge_pages: false,
    }
}

fn pool(c: PoolConfig) -> BufferPool {
    // Private registries keep the tests independent of each other.
    let reg = Box::leak(Box::new(MemoryRegistry::new()));
    BufferPool::new_in(reg, c).expect("valid config")
}

fn quiet(p: &BufferPool) -> Arc<AtomicUsize> {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&calls);
    p.set_warn_hook(Box::new(move |_, _| {
        c.fetch_add(1, Ordering::Relaxed);
    }));
    calls
}

/// A tiny deterministic generator (no dependencies, same run every time).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

fn tag(buf: &mut [u8], t: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (t as u8) ^ (i as u8).wrapping_mul(31) ^ ((t >> 8) as u8);
    }
}

fn check(buf: &[u8], t: u64) {
    for (i, b) in buf.iter().enumerate() {
        let want = (t as u8) ^ (i as u8).wrapping_mul(31) ^ ((t >> 8) as u8);
        assert_eq!(*b, want, "buffer tagged {t:#x} was overwritten at byte {i}");
    }
}

#[test]
fn send_and_sync() {
    fn both<T: Send + Sync>() {}
    both::<BufferPool>();
    both::<Buf>();
    both::<SharedBuf>();
    both::<tern_pool::PoolCounter>();
    both::<Slab<u64>>();
}

#[test]
fn eight_threads_never_share_a_buffer_and_counts_add_up() {
    const THREADS: u64 = 8;
    const ITERS: u64 = 20_000;
    const UPPER: usize = 256;
    let p = pool(cfg("concurrent", UPPER, 64, 512));
    quiet(&p);
    let live: Arc<Mutex<HashSet<usize>>> = Arc::default();
    let (sink_tx, sink_rx) = mpsc::channel::<(Buf, u64)>();
    // Buffers freed on a thread other than the one that allocated them.
    let sink = {
        let live = Arc::clone(&live);
        thread::spawn(move || {
            for (buf, t) in sink_rx {
                check(&buf, t);
                assert!(live.lock().expect("lock").remove(&(buf.as_ptr() as usize)));
                drop(buf);
            }
        })
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|tid| {
            let p = p.clone();
            let live = Arc::clone(&live);
            let sink_tx = sink_tx.clone();
            thread::spawn(move || {
                let mut rng = Lcg(tid + 1);
                let mut held: VecDeque<(Buf, u64)> = VecDeque::new();
                let mut fallbacks = 0u64;
                for i in 0..ITERS {
                    let t = (tid << 32) | i;
                    let len = if rng.next().is_multiple_of(50) {
                        fallbacks += 1;
                        UPPER + 1 + (rng.next() % 100) as usize
                    } else {
                        1 + (rng.next() % UPPER as u64) as usize
                    };
                    let mut b = p.alloc(len);
                    assert_eq!(b.len(), len);
                    assert!(
                        live.lock().expect("lock").insert(b.as_ptr() as usize),
                        "buffer handed out twice"
                    );
                    tag(&mut b, t);
                    held.push_back((b, t));
                    if held.len() > 16 || rng.next().is_multiple_of(3) {
                        let (b, t) = held.pop_front().expect("non-empty");
                        if rng.next().is_multiple_of(4) {
                            sink_tx.send((b, t)).expect("sink alive");
                        } else {
                            check(&b, t);
                            assert!(live.lock().expect("lock").remove(&(b.as_ptr() as usize)));
                        }
                    }
                }
                for (b, t) in held {
                    check(&b, t);
                    assert!(live.lock().expect("lock").remove(&(b.as_ptr() as usize)));
                }
                fallbacks
            })
        })
        .collect();
    let fallbacks: u64 = workers.into_iter().map(|w| w.join().expect("worker")).sum();
    drop(sink_tx);
    sink.join().expect("sink");
    assert!(live.lock().expect("lock").is_empty());

    let s = p.stats();
    assert_eq!(s.hits + s.misses, THREADS * ITERS, "{s:?}");
    assert_eq!(s.bypasses, fallbacks);
    assert_eq!(s.in_use, 0);
    assert_eq!(s.fallback_in_use, 0);
    assert_eq!(s.used_bytes, 0);
    assert!(s.free <= 512);
    assert_eq!(s.allocated_bytes, s.free * UPPER);
    assert!(s.high_water >= 17, "{s:?}");
    // Thread caches went back to the shared list when the workers exited: all reusable.
    let again: Vec<Buf> = (0..s.free).map(|_| p.alloc(UPPER)).collect();
    assert_eq!(
        p.stats().misses,
        s.misses,
        "every free buffer was reachable"
    );
    drop(again);
}

#[test]
fn lifo_reuse_returns_the_last_freed_buffer() {
    let p = pool(cfg("lifo", 1500, 8, 8));
    let a = p.alloc(1500);
    let pa = a.as_ptr();
    drop(a);
    let b = p.alloc(100);
    assert_eq!(b.as_ptr(), pa, "the buffer just freed comes back first");
    drop(b);

    let bufs: Vec<Buf> = (0..3).map(|_| p.alloc(1200)).collect();
    let ptrs: Vec<*const u8> = bufs.iter().map(|b| b.as_ptr()).collect();
    drop(bufs); // frees in order 0, 1, 2
    let mut kept = Vec::new();
    for want in ptrs.iter().rev() {
        let b = p.alloc(10);
        assert_eq!(b.as_ptr(), *want);
        kept.push(b); // keep it out so the next alloc takes the next one
    }
}

#[test]
fn free_list_never_exceeds_max_free() {
    let p = pool(cfg("max_free", 4096, 4, 8));
    quiet(&p);
    let bufs: Vec<Buf> = (0..20).map(|_| p.alloc(4096)).collect();
    let s = p.stats();
    assert_eq!((s.hits, s.misses, s.free, s.in_use), (4, 16, 0, 20));
    assert_eq!(s.allocated_bytes, 20 * 4096);
    for b in bufs {
        drop(b);
        assert!(p.stats().free <= 8, "{:?}", p.stats());
    }
    let s = p.stats();
    assert_eq!(s.free, 8);
    assert_eq!(s.released, 12);
    assert_eq!(
        s.allocated_bytes,
        8 * 4096,
        "released buffers left the pool"
    );
    // Excess returned from another thread too. (This thread keeps a little of the `max_free`
    // budget in reserve, so the other thread may free a buffer or two early.)
    let bufs: Vec<Buf> = (0..20).map(|_| p.alloc(4096)).collect();
    thread::spawn(move || drop(bufs)).join().expect("join");
    let s = p.stats();
    assert!((6..=8).contains(&s.free), "{s:?}");
    assert_eq!(s.allocated_bytes, s.free * 4096);
    let again: Vec<Buf> = (0..20).map(|_| p.alloc(4096)).collect();
    p.flush_thread_cache();
    thread::spawn(move || drop(again)).join().expect("join");
    assert_eq!(p.stats().free, 8, "with this thread's reserve handed back");
}

#[test]
fn region_chunks_survive_max_free_in_favour_of_heap_buffers() {
    const UPPER: usize = 64 * 1024;
    let p = pool(PoolConfig {
        prefault: true,
        ..cfg("region", UPPER, 4, 4)
    });
    quiet(&p);
    if cfg!(target_os = "linux") {
        assert_eq!(p.backing(), PoolBacking::Pages);
    }
    let bufs: Vec<Buf> = (0..8).map(|_| p.alloc(UPPER)).collect();
    let region: HashSet<usize> = bufs[..4].iter().map(|b| b.as_ptr() as usize).collect();
    // Free the heap fallbacks first, then the region chunks: each chunk returned beyond
    // `max_free` evicts a heap buffer instead.
    for b in bufs.into_iter().rev() {
        drop(b);
    }
    let s = p.stats();
    assert_eq!((s.free, s.released), (4, 4));
    let again: Vec<Buf> = (0..4).map(|_| p.alloc(UPPER)).collect();
    let got: HashSet<usize> = again.iter().map(|b| b.as_ptr() as usize).collect();
    assert_eq!(got, region, "the prefaulted region buffers were kept");
    for b in &again {
        assert_eq!(b.as_ptr() as usize % 64, 0, "chunks are cache-line aligned");
    }
}

#[test]
fn huge_page_pool_falls_back_cleanly() {
    let p = pool(PoolConfig {
        huge_pages: true,
        prefault: true,
        ..cfg("huge", 1500, 64, 64)
    });
    if cfg!(target_os = "linux") {
        assert_ne!(p.backing(), PoolBacking::Heap, "some mapping always works");
    }
    let mut bufs: Vec<Buf> = (0..64).map(|_| p.alloc(1500)).collect();
    for (i, b) in bufs.iter_mut().enumerate() {
        tag(b, i as u64);
    }
    for (i, b) in bufs.iter().enumerate() {
        check(b, i as u64);
    }
    assert_eq!(p.stats().misses, 0);
}

#[test]
fn dry_pool_still_serves_counts_and_warns_once_per_interval() {
    let p = pool(cfg("dry", 1500, 2, 16));
    let calls = Arc::new(Mutex::new(Vec::new()));
    let c = Arc::clone(&calls);
    p.set_warn_hook(Box::new(move |name, stats| {
        c.lock()
            .expect("lock")
            .push((name.to_owned(), stats.misses));
    }));
    let t0 = Instant::now();
    p.set_clock(t0);
    let mut held: Vec<Buf> = (0..5).map(|_| p.alloc(1000)).collect();
    assert!(held.iter().all(|b| b.len() == 1000 && b.is_pooled()));
    let s = p.stats();
    assert_eq!((s.hits, s.misses, s.empty_events), (2, 3, 1));
    assert_eq!((s.warnings, s.warnings_suppressed), (1, 2));
    assert_eq!(*calls.lock().expect("lock"), [("dry".to_owned(), 1)]);

    // Available again (a hit), then dry again: a second empty event, but the warning is
    // still within the interval.
    held.pop();
    held.push(p.alloc(1000));
    held.push(p.alloc(1000));
    let s = p.stats();
    assert_eq!((s.misses, s.empty_events), (4, 2));
    assert_eq!(calls.lock().expect("lock").len(), 1);

    // Half an interval later: still quiet. A full interval: warns again.
    p.maintain(t0 + WARN_INTERVAL / 2);
    held.push(p.alloc(1000));
    assert_eq!(calls.lock().expect("lock").len(), 1);
    p.set_clock(t0 + WARN_INTERVAL);
    held.push(p.alloc(1000));
    assert_eq!(calls.lock().expect("lock").len(), 2);
    assert_eq!(p.stats().warnings, 2);

    // The dry-miss buffers join the pool when freed.
    let out = held.len();
    drop(held);
    assert_eq!(p.stats().free, out);
}

#[test]
fn default_warn_hook_does_not_panic() {
    let p = pool(cfg("dry_default_hook", 64, 0, 4));
    let b = p.alloc(64);
    assert_eq!(p.stats().warnings, 1);
    drop(b);
}

#[test]
fn refill_tops_free_up_to_low_water() {
    let p = pool(PoolConfig {
        low_water: 6,
        ..cfg("refill", 1500, 8, 16)
    });
    assert!(!p.needs_refill());
    let held: Vec<Buf> = (0..5).map(|_| p.alloc(1500)).collect();
    assert_eq!(p.stats().free, 3);
    assert!(p.needs_refill(), "3 free < low_water 6");
    let now = Instant::now();
    assert_eq!(p.maintain(now), 3);
    let s = p.stats();
    assert_eq!((s.free, s.refills, s.refilled_buffers), (6, 1, 3));
    assert!(!p.needs_refill());
    assert_eq!(p.maintain(now), 0, "nothing to do");
    // The refilled buffers are served without misses.
    let more: Vec<Buf> = (0..6).map(|_| p.alloc(1500)).collect();
    assert_eq!(p.stats().misses, 0);
    drop((held, more));
    assert_eq!(p.stats().free, 11);
}

#[test]
fn refill_never_passes_max_free() {
    let p = pool(PoolConfig {
        low_water: 4,
        ..cfg("refill_cap", 100, 0, 4)
    });
    assert!(p.needs_refill(), "initial below low_water");
    assert_eq!(p.refill(), 4);
    assert_eq!(p.refill(), 0);
    assert_eq!(p.stats().free, 4);
}

#[test]
fn trim_gives_a_burst_back_once_it_has_passed() {
    const UPPER: usize = 16 * 1024;
    let p = pool(PoolConfig {
        prefault: true,
        low_water: 2,
        ..cfg("trim", UPPER, 8, 64)
    });
    quiet(&p);
    let region: HashSet<usize> = {
        let first: Vec<Buf> = (0..8).map(|_| p.alloc(UPPER)).collect();
        first.iter().map(|b| b.as_ptr() as usize).collect()
    };
    // A burst of 40: 8 from the initial mapping, 32 missed onto the heap.
    let burst: Vec<Buf> = (0..40).map(|_| p.alloc(UPPER)).collect();
    drop(burst);
    p.flush_thread_cache();
    let s = p.stats();
    assert_eq!((s.free, s.in_use), (40, 0), "{s:?}");
    // The first trim keeps room for the burst it has seen since the last one.
    assert_eq!(p.trim(), 0);
    assert_eq!(p.stats().free, 40);
    // With no new peak, the heap buffers go: the pool is back to `initial`.
    assert_eq!(p.trim(), 32);
    let s = p.stats();
    assert_eq!((s.free, s.released), (8, 32), "{s:?}");
    assert_eq!(s.allocated_bytes, 8 * UPPER);
    assert_eq!(p.trim(), 0, "nothing left above initial");
    // What stayed is the prefaulted mapping, served without a miss.
    let misses = p.stats().misses;
    let again: Vec<Buf> = (0..8).map(|_| p.alloc(UPPER)).collect();
    assert_eq!(p.stats().misses, misses);
    let got: HashSet<usize> = again.iter().map(|b| b.as_ptr() as usize).collect();
    assert_eq!(got, region);
    // The `max_free` budget came back with the trimmed buffers: a new burst of 64 is kept
    // whole when it returns (only this thread's small reserve can free one or two early).
    let more: Vec<Buf> = (0..56).map(|_| p.alloc(UPPER)).collect();
    drop((again, more));
    p.flush_thread_cache();
    let s = p.stats();
    assert_eq!((s.free, s.released), (64, 32), "{s:?}");
}

#[test]
fn trim_frees_heap_buffers_cycling_through_a_ring_as_they_come_back() {
    const UPPER: usize = 16 * 1024;
    let p = pool(PoolConfig {
        prefault: true,
        low_water: 2,
        ..cfg("trim_ring", UPPER, 16, 64)
    });
    quiet(&p);
    // A burst of 24: 16 from the mapping, 8 from the heap. The mapping's buffers come back;
    // the heap ones stay in a ring that keeps cycling (freed at one end, refilled at the
    // other), so they never rest on the free list.
    let mut all: VecDeque<Buf> = (0..24).map(|_| p.alloc(UPPER)).collect();
    let region: HashSet<usize> = all.iter().take(16).map(|b| b.as_ptr() as usize).collect();
    let mut ring: VecDeque<Buf> = all.split_off(16);
    drop(all);
    p.flush_thread_cache();
    assert_eq!(p.trim(), 0, "the burst is recent");
    assert_eq!(
        p.trim(),
        0,
        "no heap buffer is free: the excess is freed as it comes back"
    );
    assert_eq!(p.stats().allocated_bytes, 24 * UPPER);
    let misses = p.stats().misses;
    for _ in 0..8 {
        ring.pop_front();
        ring.push_back(p.alloc(UPPER));
    }
    let s = p.stats();
    assert_eq!((s.released, s.misses, s.in_use), (8, misses, 8), "{s:?}");
    assert_eq!(s.allocated_bytes, 16 * UPPER, "back to the mapping alone");
    assert!(ring.iter().all(|b| region.contains(&(b.as_ptr() as usize))));
    // The count is spent: later heap buffers rejoin the pool as usual.
    let burst: Vec<Buf> = (0..10).map(|_| p.alloc(UPPER)).collect();
    drop(burst);
    p.flush_thread_cache();
    assert_eq!(p.stats().released, 8);
}

#[test]
fn trim_keeps_what_is_in_use_plus_low_water() {
    let p = pool(PoolConfig {
        low_water: 4,
        ..cfg("trim_busy", 1024, 4, 64)
    });
    quiet(&p);
    let held: Vec<Buf> = (0..20).map(|_| p.alloc(1024)).collect();
    let extra: Vec<Buf> = (0..20).map(|_| p.alloc(1024)).collect();
    drop(extra);
    p.flush_thread_cache();
    assert_eq!(p.trim(), 0, "the peak of 40 is still recent");
    // 20 stay in use: the pool keeps them and `low_water` free ones, 24 in all.
    assert_eq!(p.trim(), 16);
    let s = p.stats();
    assert_eq!((s.in_use, s.free), (20, 4), "{s:?}");
    drop(held);
}

#[test]
fn trim_races_with_allocating_threads_and_counts_stay_exact() {
    let p = pool(PoolConfig {
        low_water: 8,
        ..cfg("trim_race", 256, 16, 128)
    });
    quiet(&p);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..4u64)
        .map(|t| {
            let p = p.clone();
            thread::spawn(move || {
                let mut rng = Lcg(t + 1);
                let mut held: VecDeque<Buf> = VecDeque::new();
                let mut allocs = 0u64;
                for i in 0..20_000u64 {
                    let want = (rng.next() % 64) as usize;
                    while held.len() < want {
                        let mut b = p.alloc(256);
                        tag(&mut b, i);
                        held.push_back(b);
                        allocs += 1;
                    }
                    while held.len() > want / 2 {
                        held.pop_front();
                    }
                }
                drop(held);
                p.flush_thread_cache();
                allocs
            })
        })
        .collect();
    let trimmer = {
        let (p, stop) = (p.clone(), Arc::clone(&stop));
        thread::spawn(move || {
            let mut freed = 0;
            while !stop.load(Ordering::Relaxed) {
                // No `free <= max_free` check here: stats are exact only once quiescent
                // (lib.rs), and a read racing a miss can see the new total before its use.
                // It is checked below, after the workers stop.
                freed += p.trim();
                thread::yield_now();
            }
            freed
        })
    };
    let allocs: u64 = workers.into_iter().map(|w| w.join().expect("join")).sum();
    stop.store(true, Ordering::Relaxed);
    let trimmed = trimmer.join().expect("join");
    let s = p.stats();
    assert_eq!(s.in_use, 0, "{s:?}");
    assert_eq!(s.hits + s.misses, allocs, "{s:?}");
    assert!(s.free <= 128, "{s:?}");
    assert_eq!(s.allocated_bytes, s.free * 256, "{s:?}");
    assert!(s.released >= trimmed as u64);
    // Quiet now: two trims bring the pool back to `initial`.
    p.trim();
    p.trim();
    assert_eq!(p.stats().free, 16, "{:?}", p.stats());
}

#[test]
fn stats_match_outstanding_buffers() {
    const UPPER: usize = 512;
    let p = pool(PoolConfig {
        lower: 16,
        ..cfg("stats", UPPER, 16, 24)
    });
    quiet(&p);
    let mut rng = Lcg(7);
    let mut out: Vec<Buf> = Vec::new();
    let mut allocs = 0u64;
    for _ in 0..5000 {
        if out.is_empty() || rng.next().is_multiple_of(2) {
            let len = (rng.next() % 700) as usize; // some below `lower`, some above `upper`
            let b = p.alloc(len);
            assert_eq!(b.len(), len);
            assert_eq!(b.is_pooled(), (16..=UPPER).contains(&len));
            out.push(b);
            allocs += 1;
        } else {
            let i = (rng.next() as usize) % out.len();
            out.swap_remove(i);
        }
        let s = p.stats();
        let pooled = out.iter().filter(|b| b.is_pooled()).count();
        let fallback_bytes: usize = out.iter().filter(|b| !b.is_pooled()).map(|b| b.len()).sum();
        assert_eq!(s.in_use, out.len());
        assert_eq!(s.fallback_in_use, out.len() - pooled);
        assert_eq!(s.hits + s.misses, allocs);
        assert_eq!(s.used_bytes, pooled * UPPER + fallback_bytes);
        assert_eq!(
            s.allocated_bytes,
            (pooled + s.free) * UPPER + fallback_bytes
        );
        assert!(s.free <= 24);
        assert!(s.high_water >= s.in_use);
        assert!(s.peak_used_bytes >= s.used_bytes);
    }
}

#[test]
fn buffers_deref_to_exactly_their_length() {
    let p = pool(cfg("len", 1500, 1, 4));
    let mut b = p.alloc(100);
    assert_eq!((b.len(), b.capacity()), (100, 1500));
    b.fill(7);
    b.set_len(1500);
    assert_eq!(b.as_mut_full().len(), 1500);
    let big = p.alloc(9000);
    assert_eq!(
        (big.len(), big.capacity(), big.is_pooled()),
        (9000, 9000, false)
    );
    let empty = p.alloc(0);
    assert!(empty.is_empty() && !empty.is_pooled());
}

#[test]
fn shared_buf_returns_to_pool_only_when_the_last_clone_drops() {
    let p = pool(cfg("shared", 1500, 2, 4));
    let mut b = p.alloc(5);
    b.copy_from_slice(b"hello");
    let ptr = b.as_ptr();
    let s = b.freeze();
    let clones: Vec<SharedBuf> = (0..3).map(|_| s.clone()).collect();
    assert_eq!(SharedBuf::ref_count(&s), 4);
    let remote = s.clone();
    thread::spawn(move || assert_eq!(&*remote, b"hello"))
        .join()
        .expect("join");
    drop(s);
    for c in &clones {
        assert_eq!(&**c, b"hello");
    }
    let mut clones = clones;
    while clones.len() > 1 {
        clones.pop();
        assert_eq!(p.stats().in_use, 1, "still shared");
    }
    let free_before = p.stats().free;
    clones.pop();
    let st = p.stats();
    assert_eq!((st.in_use, st.free), (0, free_before + 1));
    assert_eq!(p.alloc(1).as_ptr(), ptr, "back on top of the free list");
}

#[test]
fn registry_reports_every_pool_and_format_dd_lists_them() {
    let reg = MemoryRegistry::new();
    let packets = BufferPool::new_in(&reg, cfg("packet_buffers", 1000, 10, 10)).expect("pool");
    let mut viewers: Slab<[u8; 64]> = Slab::new_in(&reg, "viewer_sessions", 8);
    let rings = reg.counter("stream_rings", 4096);
    let held: Vec<Buf> = (0..4).map(|_| packets.alloc(1000)).collect();
    viewers.insert([0; 64]);
    rings.add_items(2);

    let reports = reg.reports();
    let names: Vec<&str> = reports.iter().map(|r| r.name).collect();
    assert_eq!(names, ["packet_buffers", "viewer_sessions", "stream_rings"]);
    let pk = &reports[0];
    assert_eq!((pk.used_bytes, pk.allocated_bytes), (4000, 10_000));
    assert!((pk.utilization_pct - 40.0).abs() < 1e-9);
    assert_eq!(
        (pk.items_in_use, pk.items_peak, pk.peak_bytes),
        (4, 4, 4000)
    );

    let out = format_dd(&reports, &AllocStats::default());
    for name in names {
        assert!(out.contains(name), "{out}");
    }
    assert!(out.lines().any(|l| l.starts_with("total")), "{out}");
    assert!(out.contains("allocator: live"), "{out}");

    drop(held);
    drop(packets);
    assert_eq!(reg.reports().len(), 2, "a dropped pool leaves the report");
}

#[test]
fn bad_config_is_rejected_with_the_field_name() {
    let err = BufferPool::new(PoolConfig {
        lower: 10,
        ..cfg("bad", 5, 0, 0)
    })
    .expect_err("lower > upper");
    assert!(err.to_string().contains("`lower`"), "{err}");
}

#[test]
fn two_pools_alternating_on_one_thread_keep_exact_counts() {
    let a = pool(cfg("alt_a", 256, 8, 64));
    let b = pool(cfg("alt_b", 512, 8, 64));
    quiet(&a);
    quiet(&b);
    let mut held = Vec::new();
    for i in 0..1000 {
        let x = a.alloc(100);
        let y = b.alloc(200);
        assert_eq!((x.capacity(), y.capacity()), (256, 512));
        if i % 3 == 0 {
            held.push((x, y));
        }
        if held.len() > 20 {
            held.clear();
        }
    }
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!((sa.in_use, sb.in_use), (held.len(), held.len()));
    assert_eq!(sa.hits + sa.misses, 1000);
    assert_eq!(sb.hits + sb.misses, 1000);
    assert!(sa.high_water >= 21 && sb.high_water >= 21, "{sa:?} {sb:?}");
    drop(held);
    assert_eq!((a.stats().in_use, b.stats().in_use), (0, 0));
}

#[test]
fn a_buffer_dropped_by_a_thread_local_destructor_still_returns() {
    thread_local! {
        static KEEP: std::cell::RefCell<Vec<Buf>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let p = pool(cfg("tls_exit", 256, 4, 16));
    quiet(&p);
    let p2 = p.clone();
    thread::spawn(move || {
        // Registered before the pool's own thread-local state: dropped after it at exit.
        KEEP.with(|k| k.borrow_mut().clear());
        let b = p2.alloc(10);
        let c = p2.alloc(10);
        drop(c);
        KEEP.with(|k| k.borrow_mut().push(b));
    })
    .join()
    .expect("thread");
    let s = p.stats();
    assert_eq!((s.in_use, s.free), (0, 4), "{s:?}");
    assert_eq!(s.hits + s.misses, 2);
}

/// Two threads dropping the last two clones of many shared buffers at the same moment: each
/// buffer still goes back to the pool exactly once (whichever side sees itself alone, or,
/// when neither does, the descriptor's own drop), so nothing is lost or counted twice.
#[test]
fn last_clones_dropped_at_once_on_two_threads_return_every_buffer() {
    use std::sync::atomic::AtomicBool;
    const ROUNDS: usize = 200_000;
    let p = pool(cfg("race", 1500, 64, 1024));
    // One slot per round: the main thread puts a clone in, both threads spin until the
    // round's start flag, then drop their clones together.
    let slot: Arc<Mutex<Option<SharedBuf>>> = Arc::new(Mutex::new(None));
    let round = Arc::new(AtomicUsize::new(0));
    let ready = Arc::new(AtomicBool::new(false));
    let other = {
        let (slot, round, ready) = (Arc::clone(&slot), Arc::clone(&round), Arc::clone(&ready));
        thread::spawn(move || {
            for r in 1..=ROUNDS {
                while round.load(Ordering::Acquire) != r {
                    std::hint::spin_loop();
                }
                let mine = slot.lock().expect("slot").take();
                ready.store(true, Ordering::Release);
                while round.load(Ordering::Acquire) == r {
                    std::hint::spin_loop();
                }
                drop(mine);
            }
        })
    };
    for r in 1..=ROUNDS {
        let mine = p.alloc(100).freeze();
        *slot.lock().expect("slot") = Some(mine.clone());
        round.store(r, Ordering::Release);
        while !ready.swap(false, Ordering::AcqRel) {
            std::hint::spin_loop();
        }
        // Release the other thread (any value but `r` does) and drop at the same moment.
        round.store(usize::MAX, Ordering::Release);
        drop(mine);
    }
    other.join().expect("join");
    p.flush_thread_cache();
    let st = p.stats();
    assert_eq!(st.in_use, 0, "{st:?}");
    assert_eq!(st.fallback_in_use, 0, "{st:?}");
    // Every buffer is back: the pool can hand out as many as it holds, all pooled.
    let all: Vec<Buf> = (0..st.free).map(|_| p.alloc(100)).collect();
    assert!(all.iter().all(Buf::is_pooled));
    assert_eq!(p.stats().misses, 0, "{:?}", p.stats());
}

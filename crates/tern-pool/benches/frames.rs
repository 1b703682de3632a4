//! spead2's experiment (issue 3): assemble 64 MiB frames from UDP datagrams received over
//! loopback, with frame buffers from a prefaulted [`BufferPool`] and with a fresh heap
//! allocation per frame, and report MB/s of completed frames both ways.
//!
//! `cargo bench -p tern-pool --bench frames [-- FRAMES [PAYLOAD]]` (default 24 frames per
//! case, each case bounded to 60 s; payload 8192 bytes). A sender thread cuts frames into
//! payloads with a 16-byte header (frame id, offset); the receiver copies each payload to its offset in the frame
//! buffer and, when a frame is complete, touches one byte per page of it (the consumer) and
//! frees it. The sender keeps at most 2 MiB ahead of the receiver (credit through a shared
//! counter, below the 4 MiB socket buffer), so the figure is the receive-and-assemble rate
//! and packets are not lost to buffer overruns; any that are lost are reported.

use std::hint::black_box;
use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use tern_pool::{BufferPool, MemoryRegistry, PoolConfig};

const FRAME: usize = 64 << 20;
const HEADER: usize = 16;
const WINDOW: u64 = 2 << 20;
const PAGE: usize = 4096;
const LIMIT: Duration = Duration::from_secs(60);

/// Where frame buffers come from.
enum Source {
    /// `vec![0; 64 MiB]` per frame (calloc: fresh pages, faulted in by the first write).
    Heap,
    /// A pool of prefaulted 64 MiB buffers (optionally on huge pages), reused LIFO.
    Pool(BufferPool),
}

struct Outcome {
    frames: u64,
    incomplete: u64,
    secs: f64,
    faults: u64,
}

fn minor_faults() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().nth(7).and_then(|f| f.parse().ok()))
        })
        .unwrap_or(0)
}

fn run(source: &Source, frames: u64, payload: usize) -> Outcome {
    let rx = UdpSocket::bind("127.0.0.1:0").expect("bind receiver");
    let tx = UdpSocket::bind("127.0.0.1:0").expect("bind sender");
    tx.connect(rx.local_addr().expect("addr")).expect("connect");
    rx.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    // Ask for 4 MiB; the kernel caps it at net.core.rmem_max.
    let sock = socket2::SockRef::from(&rx);
    let _ = sock.set_recv_buffer_size(4 << 20);
    let consumed = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let faults0 = minor_faults();
    let start = Instant::now();
    let sender = {
        let consumed = consumed.clone();
        let done = done.clone();
        thread::spawn(move || {
            let mut pkt = vec![0x5au8; HEADER + payload];
            let mut sent = 0u64;
            for f in 0..frames {
                for off in (0..FRAME).step_by(payload) {
                    let chunk = payload.min(FRAME - off);
                    let wait = Instant::now();
                    while sent.saturating_sub(consumed.load(Ordering::Acquire)) > WINDOW
                        && wait.elapsed() < Duration::from_millis(50)
                        && done.load(Ordering::Relaxed) == 0
                    {
                        // Two cores: let the receiver run.
                        thread::yield_now();
                    }
                    pkt[..8].copy_from_slice(&f.to_le_bytes());
                    pkt[8..16].copy_from_slice(&(off as u64).to_le_bytes());
                    let _ = tx.send(&pkt[..HEADER + chunk]);
                    sent += chunk as u64;
                }
                if start.elapsed() > LIMIT {
                    break;
                }
            }
        })
    };
    let mut pkt = vec![0u8; HEADER + payload];
    let mut current: Option<(u64, Vec<u8>, usize)> = None;
    let mut pooled: Option<(u64, tern_pool::Buf, usize)> = None;
    let (mut complete, mut incomplete) = (0u64, 0u64);
    let mut total = 0u64;
    let consume = |frame: &[u8]| {
        let mut sum = 0u8;
        for i in (0..frame.len()).step_by(PAGE) {
            sum = sum.wrapping_add(frame[i]);
        }
        black_box(sum);
    };
    while complete + incomplete < frames && start.elapsed() < LIMIT {
        let Ok(n) = rx.recv(&mut pkt) else {
            break; // the sender stopped
        };
        let f = u64::from_le_bytes(pkt[..8].try_into().unwrap_or_default());
        let off = u64::from_le_bytes(pkt[8..16].try_into().unwrap_or_default()) as usize;
        let len = n.saturating_sub(HEADER);
        if n < HEADER || off + len > FRAME {
            continue;
        }
        let data = &pkt[HEADER..n];
        total += len as u64;
        consumed.store(total, Ordering::Release);
        match source {
            Source::Heap => {
                if current.as_ref().is_some_and(|c| c.0 != f) {
                    incomplete += 1;
                    current = None;
                }
                let c = current.get_or_insert_with(|| (f, vec![0u8; FRAME], 0));
                c.1[off..off + len].copy_from_slice(data);
                c.2 += len;
                if c.2 == FRAME {
                    consume(&c.1);
                    complete += 1;
                    current = None;
                }
            }
            Source::Pool(pool) => {
                if pooled.as_ref().is_some_and(|c| c.0 != f) {
                    incomplete += 1;
                    pooled = None;
                }
                let c = pooled.get_or_insert_with(|| (f, pool.alloc(FRAME), 0));
                c.1[off..off + len].copy_from_slice(data);
                c.2 += len;
                if c.2 == FRAME {
                    consume(&c.1);
                    complete += 1;
                    pooled = None;
                }
            }
        }
    }
    done.store(1, Ordering::Relaxed);
    let secs = start.elapsed().as_secs_f64();
    let _ = sender.join();
    Outcome {
        frames: complete,
        incomplete,
        secs,
        faults: minor_faults() - faults0,
    }
}

fn pool(huge_pages: bool) -> BufferPool {
    BufferPool::new_in(
        &MemoryRegistry::new(),
        PoolConfig {
            name: "frames",
            lower: FRAME,
            upper: FRAME,
            initial: 4,
            max_free: 4,
            low_water: 0,
            prefault: true,
            huge_pages,
        },
    )
    .expect("frame pool")
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let frames = args.first().copied().unwrap_or(24).clamp(2, 1000);
    let payload = args.get(1).copied().unwrap_or(8192).clamp(1024, 65_000) as usize;
    println!(
        "64 MiB frames from {payload}-byte UDP payloads over loopback, {frames} frames per case"
    );
    println!(
        "{:<40} {:>8} {:>8} {:>10} {:>12} {:>10}",
        "case", "frames", "lost", "MB/s", "faults/frame", "s"
    );
    let cases: [(&str, Source); 3] = [
        ("no pool: vec![0; 64 MiB] per frame", Source::Heap),
        ("pool: prefaulted (MAP_POPULATE)", Source::Pool(pool(false))),
        ("pool: prefaulted + huge pages", Source::Pool(pool(true))),
    ];
    for (name, source) in &cases {
        // One untimed frame pair first, so the pool's per-thread cache and the sockets are warm.
        let _ = run(source, 2, payload);
        let o = run(source, frames, payload);
        let mb = (o.frames * FRAME as u64) as f64 / 1e6;
        println!(
            "{:<40} {:>8} {:>8} {:>10.0} {:>12.0} {:>10.2}",
            name,
            o.frames,
            o.incomplete,
            mb / o.secs,
            o.faults as f64 / (o.frames + o.incomplete).max(1) as f64,
            o.secs
        );
    }
}

//! Memory accounting against a real server (issue 3): viewers join and leave `tern demo` in
//! waves over loopback, and afterwards the counting allocator's live bytes and every named
//! pool of `GET /v1/memory` are back at their idle figures, exactly.
//!
//! Viewers are tern's lean receiving clients (`tern_rtc::client::Client`, sans-IO) driven by
//! one thread, each on its own UDP socket: ICE, DTLS and SRTCP are real; received media is
//! read and discarded (its decryption is what `tests/viewers.rs` checks).
//!
//! "Idle" is measured after a warm-up wave of a few viewers, so one-time initialisation (the
//! crypto library's per-thread random state, the HTTP runtime's worker state) belongs to
//! idle; what is checked is that no viewer leaves anything behind. Figures are read as the
//! minimum of several samples: the media thread allocates and frees a few short-lived
//! buffers every frame, which a sample may catch in flight, but never less than its resting
//! figure.
//!
//! `checkpoint_table_1000` (ignored; `bench/heap-report.sh` runs it) prints the issue's
//! lifecycle checkpoint table for `TERN_VIEWERS` (default 1000) viewers.

use crate::common;

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Child, http_delete, http_get, http_post};
use tern_proto::sdp;
use tern_rtc::client::{Client, ClientOffer, ClientState, client_params};
use tern_rtc::viewer::DtlsContext;

/// One line of the memory report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Pool {
    used: u64,
    allocated: u64,
    items: u64,
}

/// The memory report: allocator live and mapped bytes, and every pool.
#[derive(Debug, Clone, Default)]
struct Memory {
    live: u64,
    mapped: u64,
    pools: BTreeMap<String, Pool>,
    /// Peak used bytes and peak items per pool (not compared: peaks stay).
    peaks: BTreeMap<String, (u64, u64)>,
}

impl PartialEq for Memory {
    fn eq(&self, o: &Memory) -> bool {
        (self.live, self.mapped, &self.pools) == (o.live, o.mapped, &o.pools)
    }
}

impl Memory {
    fn pool(&self, name: &str) -> Pool {
        self.pools.get(name).copied().unwrap_or_default()
    }

    /// Sum of the pools' allocated bytes.
    fn pool_sum(&self) -> u64 {
        self.pools.values().map(|p| p.allocated).sum()
    }

    /// Field-wise minimum of two reports.
    fn min(&self, o: &Memory) -> Memory {
        let mut pools = self.pools.clone();
        for (k, p) in &o.pools {
            let e = pools.entry(k.clone()).or_insert(*p);
            e.used = e.used.min(p.used);
            e.allocated = e.allocated.min(p.allocated);
            e.items = e.items.min(p.items);
        }
        Memory {
            live: self.live.min(o.live),
            mapped: self.mapped.min(o.mapped),
            pools,
            peaks: o.peaks.clone(),
        }
    }
}

fn num(s: &str) -> u64 {
    s.replace(',', "").parse().unwrap_or(0)
}

/// Reads `GET /v1/memory?format=dd` (what `tern mem` prints).
fn read_memory(http: SocketAddr) -> Memory {
    let r = http_get(http, "/v1/memory?format=dd").expect("GET /v1/memory");
    assert_eq!(r.status, 200, "{}", r.text());
    let text = r.text();
    let mut m = Memory::default();
    let mut in_table = false;
    for line in text.lines() {
        if line.starts_with("----") {
            in_table = !in_table;
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if in_table && f.len() == 7 {
            let fresh = m
                .pools
                .insert(
                    f[0].to_string(),
                    Pool {
                        used: num(f[1]),
                        allocated: num(f[2]),
                        items: num(f[5]),
                    },
                )
                .is_none();
            // One line per class, however many workers own a share of it.
            assert!(fresh, "pool {} listed twice:\n{text}", f[0]);
            m.peaks.insert(f[0].to_string(), (num(f[4]), num(f[6])));
        }
        if let Some(rest) = line.strip_prefix("allocator: live ") {
            m.live = num(rest.split(' ').next().unwrap_or("0"));
            if let Some(i) = rest.find("mapped ") {
                m.mapped = num(rest[i + 7..].split(' ').next().unwrap_or("0"));
            }
        }
    }
    assert!(m.live > 0, "no allocator line in:\n{text}");
    m
}

/// The resting figures: the minimum of `n` samples 50 ms apart.
fn resting_memory(http: SocketAddr, n: usize) -> Memory {
    // Pools the engine books in its 20 ms sweep (rings, index) are current after one.
    std::thread::sleep(Duration::from_millis(50));
    let mut m = read_memory(http);
    for _ in 1..n {
        std::thread::sleep(Duration::from_millis(50));
        m = m.min(&read_memory(http));
    }
    m
}

/// A viewer: its WHEP session URL, UDP socket and lean client.
struct Viewer {
    location: String,
    sock: UdpSocket,
    client: Client,
}

/// Creates `n` viewers (WHEP POST each) with clients that offer video and audio.
fn join(http: SocketAddr, ctx: &Arc<DtlsContext>, n: usize, seed: &mut u64) -> Vec<Viewer> {
    let now = Instant::now();
    (0..n)
        .map(|_| {
            *seed += 1;
            let ufrag = format!("u{:07}", *seed % 10_000_000);
            let pwd = format!("p{:023}", *seed);
            let offer = sdp::write_offer(&sdp::OfferParams {
                ice_ufrag: &ufrag,
                ice_pwd: &pwd,
                fingerprint_sha256: ctx.fingerprint(),
                video: true,
                audio: true,
                abs_capture_time: true,
                all_video: false,
            });
            let r = http_post(http, "/live/demo/whep", "application/sdp", offer.as_bytes())
                .expect("WHEP POST");
            assert_eq!(r.status, 201, "{}", r.text());
            let location = r.header("location").expect("Location").to_string();
            let cp = client_params(
                &r.text(),
                &ClientOffer {
                    ufrag,
                    pwd,
                    rtcp: true,
                    ntp_base: (now, 0),
                },
            )
            .expect("answer");
            let sock = UdpSocket::bind("127.0.0.1:0").expect("bind client socket");
            sock.set_nonblocking(true).expect("nonblocking");
            Viewer {
                location,
                sock,
                client: Client::new(cp, ctx.clone(), now, *seed),
            }
        })
        .collect()
}

/// Drives every client for `d`: timers, datagrams out, datagrams in (media is read and
/// dropped; STUN, DTLS and RTCP go to the client).
fn drive(viewers: &mut [Viewer], d: Duration) {
    let end = Instant::now() + d;
    let mut buf = vec![0u8; 2048];
    while Instant::now() < end {
        let now = Instant::now();
        for v in viewers.iter_mut() {
            v.client.handle_timeout(now);
            let server = v.client.server();
            let sock = &v.sock;
            v.client.drain(&mut |d| {
                let _ = sock.send_to(d, server);
            });
            loop {
                match v.sock.recv_from(&mut buf) {
                    Ok((n, _)) => {
                        let media = n > 1
                            && (128..=191).contains(&buf[0])
                            && !(192..=223).contains(&buf[1]);
                        if !media {
                            v.client.handle_input(now, &mut buf[..n]);
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(_) => break,
                }
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Drives the clients until every one is connected and the server holds no handshake state
/// (their first SRTCP proves they have the keys), within `limit`.
fn connect(http: SocketAddr, viewers: &mut [Viewer], limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        drive(viewers, Duration::from_millis(100));
        let connected = viewers
            .iter()
            .filter(|v| v.client.state() == ClientState::Connected)
            .count();
        if connected == viewers.len() && read_memory(http).pool("handshakes").items == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{connected} of {} viewers connected; states: {:?}",
            viewers.len(),
            viewers
                .iter()
                .map(|v| v.client.state())
                .filter(|s| *s != ClientState::Connected)
                .take(5)
                .collect::<Vec<_>>()
        );
    }
}

fn leave(http: SocketAddr, viewers: Vec<Viewer>) {
    for v in viewers {
        let r = http_delete(http, &v.location).expect("WHEP DELETE");
        assert_eq!(r.status, 200, "{}", r.text());
    }
}

/// Waits until the streaming ring is full (its pool line stops changing), so the idle
/// figures are the steady ones.
fn wait_ring_full(http: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut last = read_memory(http).pool("stream_rings");
    let mut stable = 0;
    while stable < 6 {
        std::thread::sleep(Duration::from_millis(500));
        let now = read_memory(http).pool("stream_rings");
        stable = if now == last { stable + 1 } else { 0 };
        last = now;
        assert!(Instant::now() < deadline, "stream ring never filled");
    }
}

/// Waits until the memory report equals `idle` (the server trims in its 20 ms sweep), or
/// returns the last resting figures after `limit`.
fn wait_idle(http: SocketAddr, idle: &Memory, limit: Duration) -> Memory {
    let deadline = Instant::now() + limit;
    loop {
        let m = resting_memory(http, 10);
        if &m == idle || Instant::now() > deadline {
            return m;
        }
    }
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "500 clients need an optimized build: cargo test --release"
)]
fn viewers_500_in_waves_leave_heap_and_pools_at_idle() {
    let _slot = crate::common::slot();
    // A process: the test measures its heap and its process-wide memory lines.
    let server = Child::demo();
    let http = server.http;
    let ctx = Arc::new(DtlsContext::generate().expect("client certificate"));
    let mut seed = 0;

    wait_ring_full(http);
    // Warm-up wave: one-time initialisation belongs to idle.
    let mut warm = join(http, &ctx, 10, &mut seed);
    connect(http, &mut warm, Duration::from_secs(30));
    leave(http, warm);
    std::thread::sleep(Duration::from_millis(300));
    let idle = resting_memory(http, 20);
    for name in [
        "viewer_sessions",
        "handshakes",
        "whep_sessions",
        "session_index",
    ] {
        assert_eq!(idle.pool(name), Pool::default(), "{name} not empty at idle");
    }

    // Five waves of 100: each wave joins while the previous one is still connected, then
    // the previous one leaves.
    let mut previous: Vec<Viewer> = Vec::new();
    let mut joined = 0;
    for wave in 0..5 {
        let mut now = join(http, &ctx, 100, &mut seed);
        joined += now.len();
        connect(http, &mut now, Duration::from_secs(60));
        // Keep the older wave's consent alive while this one connected.
        drive(&mut previous, Duration::from_millis(50));
        let m = read_memory(http);
        let present = (now.len() + previous.len()) as u64;
        assert_eq!(m.pool("viewer_sessions").items, present, "wave {wave}");
        assert_eq!(m.pool("whep_sessions").items, present, "wave {wave}");
        assert!(
            m.pool("viewer_sessions").used > present * 600,
            "wave {wave}: {m:?}"
        );
        eprintln!(
            "wave {wave}: {present} viewers, live {} B ({:+} over idle), viewer_sessions {:?}, whep_sessions {:?}",
            m.live,
            m.live as i64 - idle.live as i64,
            m.pool("viewer_sessions"),
            m.pool("whep_sessions")
        );
        leave(http, std::mem::replace(&mut previous, now));
    }
    leave(http, previous);
    assert_eq!(joined, 500);

    let after = wait_idle(http, &idle, Duration::from_secs(10));
    for (name, p) in &idle.pools {
        assert_eq!(
            after.pool(name),
            *p,
            "pool {name}: idle {p:?}, after {:?}",
            after.pool(name)
        );
    }
    eprintln!(
        "idle: live {} B, mapped {} B; after 500 viewers: live {} B, mapped {} B",
        idle.live, idle.mapped, after.live, after.mapped
    );
    assert_eq!(
        after.live, idle.live,
        "allocator live bytes: idle {}, after the waves {}",
        idle.live, after.live
    );
    assert_eq!(after.mapped, idle.mapped);
    server.stop();
}

/// The checkpoint table for `TERN_VIEWERS` viewers (default 1000): startup, idle,
/// viewers created (offer/answer done), all handshakes complete, steady state after
/// `TERN_SECONDS` (default 60) of streaming, all viewers gone; allocator total beside the
/// pool sum at each.
#[test]
#[ignore = "benchmark: bench/heap-report.sh"]
fn checkpoint_table_1000() {
    let _slot = crate::common::slot();
    let n: usize = std::env::var("TERN_VIEWERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
        .clamp(1, 2000);
    let secs: u64 = std::env::var("TERN_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60)
        .clamp(1, 600);
    // A process: the table is of its heap and its process-wide memory lines.
    let server = Child::demo();
    let http = server.http;
    let ctx = Arc::new(DtlsContext::generate().expect("client certificate"));
    let mut seed = 0;
    let mut rows: Vec<(&str, Memory, usize)> = Vec::new();
    rows.push(("startup", resting_memory(http, 5), 0));
    wait_ring_full(http);
    let mut warm = join(http, &ctx, 10, &mut seed);
    connect(http, &mut warm, Duration::from_secs(30));
    leave(http, warm);
    std::thread::sleep(Duration::from_millis(300));
    let idle = resting_memory(http, 20);
    rows.push((
        "idle (ring full, after a 10-viewer warm-up)",
        idle.clone(),
        0,
    ));
    let mut viewers = join(http, &ctx, n, &mut seed);
    rows.push((
        "viewers created (offer/answer done)",
        resting_memory(http, 5),
        n,
    ));
    connect(http, &mut viewers, Duration::from_secs(120));
    rows.push(("all handshakes complete", resting_memory(http, 5), n));
    drive(&mut viewers, Duration::from_secs(secs));
    rows.push(("steady state after streaming", resting_memory(http, 5), n));
    leave(http, viewers);
    let gone = wait_idle(http, &idle, Duration::from_secs(10));
    rows.push(("all viewers gone", gone, 0));

    println!("checkpoint table: {n} viewers of tern demo over loopback, {secs} s of streaming");
    println!(
        "| checkpoint | allocator live | + mapped = total | pool sum (allocated) | total − pools | above idle | per viewer |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (name, m, viewers) in &rows {
        let total = m.live + m.mapped;
        let above = total as i64 - (idle.live + idle.mapped) as i64;
        let per = if *viewers > 0 {
            format!("{:.0}", above as f64 / *viewers as f64)
        } else {
            "".into()
        };
        println!(
            "| {name} | {} | {total} | {} | {} | {above} | {per} |",
            m.live,
            m.pool_sum(),
            total as i64 - m.pool_sum() as i64
        );
    }
    let last = &rows[rows.len() - 1].1;
    let (hs_peak, hs_items) = last.peaks.get("handshakes").copied().unwrap_or_default();
    let (vs_peak, _) = last
        .peaks
        .get("viewer_sessions")
        .copied()
        .unwrap_or_default();
    println!();
    println!(
        "handshakes pool peak: {hs_peak} B with {hs_items} handshakes at once ({:.0} B each); viewer_sessions peak {vs_peak} B ({:.0} B per viewer)",
        hs_peak as f64 / hs_items.max(1) as f64,
        vs_peak as f64 / n as f64
    );
    println!();
    println!("pools at each checkpoint (used / allocated bytes, items):");
    for (name, m, _) in &rows {
        let line: Vec<String> = m
            .pools
            .iter()
            .map(|(k, p)| format!("{k} {}/{} ({})", p.used, p.allocated, p.items))
            .collect();
        println!("- {name}: {}", line.join(", "));
    }
    server.stop();
}

//! TURN allocation rate: `C` concurrent clients (one thread each) loop, each time from a new
//! UDP socket: Allocate (the 401 challenge, then the signed request) and Refresh with lifetime
//! 0 (which deletes the allocation, RFC 8656 §7.3) against one server, for `S` seconds. Prints one JSON
//! line: allocations made and deleted, per second, and failures. Used by `bench/turn.sh` for
//! tern and coturn alike. Bounded: every wait has a timeout and the run has a deadline.
//!
//!   cargo run --release -p tern-rtc --example turn_alloc_rate -- SERVER USER PASS [C] [S]

use std::net::{SocketAddr, UdpSocket};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tern_rtc::turn::Transport;
use tern_rtc::turn_client::{Received, TurnClient, TurnClientEvent};

/// Sends `out[..n]` and feeds answers to the client until it reports an event (None on
/// timeout).
fn transact(
    sock: &UdpSocket,
    server: SocketAddr,
    client: &mut TurnClient,
    out: &mut [u8],
    n: usize,
) -> Option<TurnClientEvent> {
    sock.send_to(&out[..n], server).ok()?;
    let mut input = [0u8; 1500];
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        let Ok((len, _)) = sock.recv_from(&mut input) else {
            // Read timeout: let the client retransmit if due.
            if let Received::Transmit(m) = client.handle_timeout(Instant::now(), out) {
                sock.send_to(&out[..m], server).ok()?;
            }
            continue;
        };
        match client.handle_input(Instant::now(), &input[..len], out) {
            Received::Event(e) => return Some(e),
            Received::Transmit(m) => {
                sock.send_to(&out[..m], server).ok()?;
            }
            _ => {}
        }
    }
    None
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        eprintln!("usage: turn_alloc_rate SERVER USER PASS [CLIENTS] [SECONDS]");
        std::process::exit(2);
    }
    let server: SocketAddr = args[0].parse().expect("SERVER is HOST:PORT");
    let (user, pass) = (args[1].clone(), args[2].clone());
    let clients: usize = args.get(3).map_or(8, |v| v.parse().expect("CLIENTS"));
    let seconds: u64 = args.get(4).map_or(10, |v| v.parse().expect("SECONDS"));
    let made = AtomicU64::new(0);
    let deleted = AtomicU64::new(0);
    let failed = AtomicU64::new(0);
    let first_failure: Mutex<Option<String>> = Mutex::new(None);
    let start = Instant::now();
    let end = start + Duration::from_secs(seconds);
    std::thread::scope(|s| {
        for c in 0..clients {
            let (user, pass) = (&user, &pass);
            let (made, deleted, failed) = (&made, &deleted, &failed);
            let first_failure = &first_failure;
            let fail = move |what: String| {
                failed.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut f) = first_failure.lock() {
                    f.get_or_insert(what);
                }
            };
            s.spawn(move || {
                let mut out = [0u8; 1500];
                let mut seed = c as u64 * 1_000_003;
                while Instant::now() < end {
                    seed += 1;
                    // A fresh 5-tuple per allocation, as a real client's next session has:
                    // coturn keeps a deleted allocation's 5-tuple busy for a while (437), and
                    // ephemeral ports recur within seconds at these rates, so each client
                    // also walks its own range of loopback addresses (127.C.x.y).
                    let host = [127, 1 + c as u8, (seed >> 8) as u8, (seed as u8).max(1)];
                    let sock = UdpSocket::bind((std::net::Ipv4Addr::from(host), 0)).expect("bind");
                    sock.set_read_timeout(Some(Duration::from_millis(100)))
                        .expect("timeout");
                    let mut client = TurnClient::new(user, pass, Transport::Udp, seed);
                    let Ok(n) = client.allocate(Instant::now(), &mut out) else {
                        fail("allocate: not started".into());
                        continue;
                    };
                    match transact(&sock, server, &mut client, &mut out, n) {
                        Some(TurnClientEvent::Allocated { .. }) => {
                            made.fetch_add(1, Ordering::Relaxed);
                        }
                        other => {
                            fail(format!("allocate: {other:?}"));
                            continue;
                        }
                    }
                    let Ok(n) = client.refresh(Instant::now(), 0, &mut out) else {
                        fail("refresh: not started".into());
                        continue;
                    };
                    match transact(&sock, server, &mut client, &mut out, n) {
                        Some(TurnClientEvent::Refreshed { lifetime: 0 }) => {
                            deleted.fetch_add(1, Ordering::Relaxed);
                        }
                        other => fail(format!("refresh: {other:?}")),
                    }
                }
            });
        }
    });
    let secs = start.elapsed().as_secs_f64();
    let made = made.load(Ordering::Relaxed);
    let first = first_failure
        .lock()
        .ok()
        .and_then(|f| f.clone())
        .unwrap_or_default();
    println!(
        "{{\"clients\":{clients},\"seconds\":{secs:.2},\"allocations\":{made},\"deleted\":{},\"failed\":{},\"allocations_per_s\":{:.1},\"first_failure\":{:?}}}",
        deleted.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
        made as f64 / secs,
        first
    );
}

//! TURN allocation rate: `C` concurrent clients (one thread and one UDP socket each) loop
//! Allocate (the 401 challenge, then the signed request) and Refresh with lifetime 0 (which
//! deletes the allocation, RFC 8656 §7.3) against one server, for `S` seconds. Prints one JSON
//! line: allocations made and deleted, per second, and failures. Used by `bench/turn.sh` for
//! tern and coturn alike. Bounded: every wait has a timeout and the run has a deadline.
//!
//!   cargo run --release -p tern-rtc --example turn_alloc_rate -- SERVER USER PASS [C] [S]

use std::net::{SocketAddr, UdpSocket};
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
    let start = Instant::now();
    let end = start + Duration::from_secs(seconds);
    std::thread::scope(|s| {
        for c in 0..clients {
            let (user, pass) = (&user, &pass);
            let (made, deleted, failed) = (&made, &deleted, &failed);
            s.spawn(move || {
                let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
                sock.set_read_timeout(Some(Duration::from_millis(100)))
                    .expect("timeout");
                let mut out = [0u8; 1500];
                let mut seed = c as u64 * 1_000_003;
                while Instant::now() < end {
                    seed += 1;
                    let mut client = TurnClient::new(user, pass, Transport::Udp, seed);
                    let Ok(n) = client.allocate(Instant::now(), &mut out) else {
                        failed.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    match transact(&sock, server, &mut client, &mut out, n) {
                        Some(TurnClientEvent::Allocated { .. }) => {
                            made.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                    }
                    let Ok(n) = client.refresh(Instant::now(), 0, &mut out) else {
                        failed.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    match transact(&sock, server, &mut client, &mut out, n) {
                        Some(TurnClientEvent::Refreshed { lifetime: 0 }) => {
                            deleted.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    let secs = start.elapsed().as_secs_f64();
    let made = made.load(Ordering::Relaxed);
    println!(
        "{{\"clients\":{clients},\"seconds\":{secs:.2},\"allocations\":{made},\"deleted\":{},\"failed\":{},\"allocations_per_s\":{:.1}}}",
        deleted.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
        made as f64 / secs
    );
}

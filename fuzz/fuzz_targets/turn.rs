//! TURN: ChannelData and TCP framing on arbitrary bytes, and the sans-IO TURN server driven
//! by a sequence of operations (client frames, peer datagrams, time steps, closes) decoded
//! from the input. Nothing may panic, and the server's books must balance.
#![no_main]
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use tern_pool::MemoryRegistry;
use tern_proto::turn::{self, ChannelData, PEER_HEADROOM};
use tern_rtc::turn::{ClientAddr, ClientOutput, Transport, TurnConfig, TurnServer};

fuzz_target!(|data: &[u8]| {
    let _ = ChannelData::parse(data);
    let _ = turn::tcp_frame_len(data);

    let registry: &'static MemoryRegistry = Box::leak(Box::new(MemoryRegistry::new()));
    let mut now = Instant::now();
    let cfg = TurnConfig {
        users: vec![("u".into(), "p".into())],
        secret: Some("s".into()),
        max_allocations: 4,
        max_allocations_per_user: 2,
        ..TurnConfig::default()
    };
    let mut server = TurnServer::new_in(registry, cfg, now, 1_700_000_000, true);
    let mut out = [0u8; 512];
    let mut buf = [0u8; 1600];
    let mut port = 50000u16;
    // Each operation: [op, a, len_hi, len_lo] then `len` bytes of payload.
    let mut rest = data;
    while rest.len() >= 4 {
        let (op, a, len) = (rest[0], rest[1], usize::from(u16::from_be_bytes([rest[2], rest[3]])));
        let len = len.min(rest.len() - 4).min(1200);
        let payload = &rest[4..4 + len];
        rest = &rest[4 + len..];
        let client = ClientAddr {
            transport: if a & 1 == 0 { Transport::Udp } else { Transport::Tcp },
            addr: SocketAddr::from(([10, 0, 0, a >> 4], 1000 + u16::from(a & 0x0e))),
        };
        match op % 4 {
            0 => match server.handle_client(now, client, payload, &mut out) {
                ClientOutput::Allocate(p) => {
                    port = port.wrapping_add(1);
                    let relay = (op & 0x80 == 0).then(|| SocketAddr::from(([127, 0, 0, 1], port)));
                    let _ = server.finish_allocate(now, p, relay, &mut out);
                }
                ClientOutput::Relay { data, .. } => assert!(data.end <= payload.len()),
                _ => {}
            },
            1 => {
                if let Some(alloc) = server.allocation_of(client) {
                    let peer = SocketAddr::from(([192, 0, 2, a], 7000));
                    buf[PEER_HEADROOM..PEER_HEADROOM + len].copy_from_slice(payload);
                    if let Some((_, r)) = server.handle_peer(now, alloc, peer, &mut buf, PEER_HEADROOM, len) {
                        assert!(r.end <= buf.len());
                    }
                }
            }
            2 => {
                now += Duration::from_secs(u64::from(a) * 8);
                server.handle_timeout(now);
            }
            _ => server.client_closed(client),
        }
        while server.poll_event().is_some() {}
    }
    assert!(server.allocations() <= 4);
    let _ = (server.stats(), rest);
});

//! TURN: ChannelData and TCP framing on arbitrary bytes, and the sans-IO TURN server driven
//! by a sequence of operations (client frames, peer datagrams, time steps, closes) decoded
//! from the input. Nothing may panic, and the server's books must balance.
#![no_main]
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use tern_proto::turn::{self, ChannelData, PEER_HEADROOM};
use tern_rtc::turn::{ClientAddr, ClientOutput, Transport, TurnConfig, TurnServer};
use tern_rtc::turn_client::{Received, TurnClient};

fuzz_target!(|data: &[u8]| {
    let _ = ChannelData::parse(data);
    let _ = turn::tcp_frame_len(data);

    let mut now = Instant::now();
    let cfg = TurnConfig {
        users: vec![("u".into(), "p".into())],
        secret: Some("s".into()),
        max_allocations: 4,
        max_allocations_per_user: 2,
        ..TurnConfig::default()
    };
    let mut server = TurnServer::new(cfg, now, 1_700_000_000, true);
    let mut out = [0u8; 512];
    let mut buf = [0u8; 1600];
    let mut port = 50000u16;
    // Each operation: [op, a, len_hi, len_lo] then `len` bytes of payload.
    let mut rest = data;
    while rest.len() >= 4 {
        let (op, a, len) = (
            rest[0],
            rest[1],
            usize::from(u16::from_be_bytes([rest[2], rest[3]])),
        );
        let len = len.min(rest.len() - 4).min(1200);
        let payload = &rest[4..4 + len];
        rest = &rest[4 + len..];
        let client = ClientAddr {
            transport: if a & 1 == 0 {
                Transport::Udp
            } else {
                Transport::Tcp
            },
            addr: SocketAddr::from(([10, 0, 0, a >> 4], 1000 + u16::from(a & 0x0e))),
        };
        match op % 5 {
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
                    if let Some((_, r)) =
                        server.handle_peer(now, alloc, peer, &mut buf, PEER_HEADROOM, len)
                    {
                        assert!(r.end <= buf.len());
                    }
                }
            }
            2 => {
                now += Duration::from_secs(u64::from(a) * 8);
                server.handle_timeout(now);
            }
            3 => server.client_closed(client),
            _ => {
                // A well-behaved client: allocate, permit and bind a channel for peer
                // 192.0.2.a, so the unauthenticated paths (ChannelData, Send, peer data)
                // meet live allocations.
                let mut c = TurnClient::new("u", "p", client.transport, u64::from(a));
                let peer = SocketAddr::from(([192, 0, 2, a], 7000));
                let mut req = [0u8; 512];
                let mut steps = 0;
                let mut n = c.allocate(now, &mut req).unwrap_or(0);
                while n > 0 && steps < 8 {
                    steps += 1;
                    let reply = match server.handle_client(now, client, &req[..n], &mut out) {
                        ClientOutput::Reply(r) => out[..r].to_vec(),
                        ClientOutput::Allocate(p) => {
                            port = port.wrapping_add(1);
                            let relay = SocketAddr::from(([127, 0, 0, 1], port));
                            let (_, r) = server.finish_allocate(now, p, Some(relay), &mut out);
                            out[..r].to_vec()
                        }
                        _ => break,
                    };
                    n = match c.handle_input(now, &reply, &mut req) {
                        Received::Transmit(m) => m,
                        Received::Event(_) if c.relayed().is_some() && steps < 4 => {
                            c.create_permission(now, peer, &mut req).unwrap_or(0)
                        }
                        Received::Event(_) if c.relayed().is_some() && steps < 6 => c
                            .channel_bind(now, 0x4000 | u16::from(a), peer, &mut req)
                            .unwrap_or(0),
                        _ => 0,
                    };
                }
            }
        }
        while server.poll_event().is_some() {}
    }
    assert!(server.allocations() <= 4);
    let _ = (server.stats(), rest);
});

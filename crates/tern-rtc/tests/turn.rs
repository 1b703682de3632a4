//! The sans-IO TURN server against the sans-IO TURN client, in one process with simulated
//! time: allocation, permissions, channels, both relay directions over UDP and TCP framing,
//! 401 and 438 handling, quotas, lifetimes, REST credentials and malformed input.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tern_pool::MemoryRegistry;
use tern_proto::stun::{self, Class, Message, MessageWriter};
use tern_proto::turn::{self, PEER_HEADROOM};
use tern_rtc::turn::{
    ClientAddr, ClientOutput, DropReason, Transport, TurnConfig, TurnEvent, TurnServer,
    rest_credentials,
};
use tern_rtc::turn_client::{Received, TurnClient, TurnClientEvent, TurnRequest};

const UNIX_NOW: u64 = 1_700_000_000;

fn config() -> TurnConfig {
    TurnConfig {
        users: vec![("alice".into(), "wonderland".into())],
        secret: Some("s3cret".into()),
        nonce_seed: [7; 32],
        ..TurnConfig::default()
    }
}

/// A server, with a fake driver: relay addresses are handed out from 127.0.0.1:50000 up.
struct Harness {
    server: TurnServer,
    now: Instant,
    next_port: u16,
    registry: &'static MemoryRegistry,
}

impl Harness {
    fn new(cfg: TurnConfig) -> Self {
        let registry: &'static MemoryRegistry = Box::leak(Box::new(MemoryRegistry::new()));
        let now = Instant::now();
        Harness {
            server: TurnServer::new_in(registry, cfg, now, UNIX_NOW, true),
            now,
            next_port: 50000,
            registry,
        }
    }

    fn used(&self, name: &str) -> usize {
        self.registry
            .reports()
            .iter()
            .find(|r| r.name == name)
            .map_or(0, |r| r.used_bytes)
    }

    /// Client → server; returns what the client must see (replies), or the relay action.
    fn client_sends(&mut self, from: ClientAddr, input: &[u8]) -> ServerSaid {
        let mut out = [0u8; 512];
        match self.server.handle_client(self.now, from, input, &mut out) {
            ClientOutput::Reply(n) => ServerSaid::Reply(out[..n].to_vec()),
            ClientOutput::Allocate(p) => {
                let relay: SocketAddr = ([127, 0, 0, 1], self.next_port).into();
                self.next_port += 1;
                let (id, n) = self
                    .server
                    .finish_allocate(self.now, p, Some(relay), &mut out);
                assert!(id.is_some());
                ServerSaid::Reply(out[..n].to_vec())
            }
            ClientOutput::Relay { alloc, peer, data } => ServerSaid::Relay(
                self.server.relay_addr(alloc).unwrap(),
                peer,
                input[data].to_vec(),
            ),
            ClientOutput::Drop(why) => ServerSaid::Dropped(why),
        }
    }

    /// Runs a client request to completion (answering challenges); returns the event.
    fn transact(
        &mut self,
        c: &mut TurnClient,
        from: ClientAddr,
        first: usize,
        buf: &mut [u8],
    ) -> TurnClientEvent {
        let mut req = buf[..first].to_vec();
        for _ in 0..4 {
            let ServerSaid::Reply(resp) = self.client_sends(from, &req) else {
                panic!("no reply to a request");
            };
            let mut out = [0u8; 512];
            match c.handle_input(self.now, &resp, &mut out) {
                Received::Event(e) => return e,
                Received::Transmit(n) => req = out[..n].to_vec(),
                other => panic!("unexpected {other:?}"),
            }
        }
        panic!("transaction did not finish");
    }

    /// A peer datagram arriving on the relay of `client`'s allocation, as the client sees it.
    fn peer_sends(
        &mut self,
        client: ClientAddr,
        peer: SocketAddr,
        payload: &[u8],
    ) -> Option<(ClientAddr, Vec<u8>)> {
        let alloc = self.server.allocation_of(client)?;
        let mut buf = vec![0u8; PEER_HEADROOM + payload.len() + 3];
        buf[PEER_HEADROOM..PEER_HEADROOM + payload.len()].copy_from_slice(payload);
        let (to, r) = self.server.handle_peer(
            self.now,
            alloc,
            peer,
            &mut buf,
            PEER_HEADROOM,
            payload.len(),
        )?;
        Some((to, buf[r].to_vec()))
    }
}

#[derive(Debug)]
enum ServerSaid {
    Reply(Vec<u8>),
    Relay(SocketAddr, SocketAddr, Vec<u8>),
    Dropped(DropReason),
}

fn udp(port: u16) -> ClientAddr {
    ClientAddr {
        transport: Transport::Udp,
        addr: ([10, 0, 0, 1], port).into(),
    }
}

fn allocate(h: &mut Harness, c: &mut TurnClient, from: ClientAddr) -> SocketAddr {
    let mut buf = [0u8; 512];
    let n = c.allocate(h.now, &mut buf).unwrap();
    match h.transact(c, from, n, &mut buf) {
        TurnClientEvent::Allocated {
            relayed,
            mapped,
            lifetime,
        } => {
            assert_eq!(mapped, Some(from.addr));
            assert_eq!(lifetime, 600);
            relayed
        }
        e => panic!("allocate failed: {e:?}"),
    }
}

#[test]
fn relay_both_ways_with_send_data_and_channels() {
    for transport in [Transport::Udp, Transport::Tcp] {
        let mut h = Harness::new(config());
        let from = ClientAddr {
            transport,
            addr: "10.0.0.1:40000".parse().unwrap(),
        };
        let mut c = TurnClient::new("alice", "wonderland", transport, 1);
        let relayed = allocate(&mut h, &mut c, from);
        assert_eq!(c.relayed(), Some(relayed));
        assert_eq!(h.server.allocations(), 1);
        let peer: SocketAddr = "192.0.2.9:7000".parse().unwrap();
        let mut buf = [0u8; 512];

        // Without a permission nothing passes, either way.
        let n = c.send(peer, b"early", &mut buf).unwrap();
        assert!(matches!(
            h.client_sends(from, &buf[..n]),
            ServerSaid::Dropped(DropReason::NoPermission)
        ));
        assert!(h.peer_sends(from, peer, b"knock").is_none());

        let n = c.create_permission(h.now, peer, &mut buf).unwrap();
        assert_eq!(
            h.transact(&mut c, from, n, &mut buf),
            TurnClientEvent::PermissionCreated { peer }
        );

        // Send indication out, Data indication back.
        let n = c.send(peer, b"hello peer", &mut buf).unwrap();
        match h.client_sends(from, &buf[..n]) {
            ServerSaid::Relay(r, p, d) => {
                assert_eq!((r, p, d.as_slice()), (relayed, peer, &b"hello peer"[..]))
            }
            o => panic!("{o:?}"),
        }
        let (to, frame) = h.peer_sends(from, peer, b"hello client").unwrap();
        assert_eq!(to, from);
        let m = Message::parse(&frame).unwrap();
        assert_eq!((m.class(), m.method()), (Class::Indication, stun::DATA));
        let mut out = [0u8; 64];
        match c.handle_input(h.now, &frame, &mut out) {
            Received::Data { peer: p, data } => {
                assert_eq!((p, &frame[data]), (peer, &b"hello client"[..]))
            }
            o => panic!("{o:?}"),
        }
        // A peer on the same IP but another port is covered by the IP permission.
        let other_port: SocketAddr = "192.0.2.9:7001".parse().unwrap();
        assert!(h.peer_sends(from, other_port, b"x").is_some());

        // Channel: ChannelData both ways, padded over TCP only.
        let n = c.channel_bind(h.now, 0x4001, peer, &mut buf).unwrap();
        assert_eq!(
            h.transact(&mut c, from, n, &mut buf),
            TurnClientEvent::ChannelBound {
                number: 0x4001,
                peer
            }
        );
        let n = c.send(peer, b"chan", &mut buf).unwrap();
        assert_eq!(buf[0], 0x40);
        match h.client_sends(from, &buf[..n]) {
            ServerSaid::Relay(_, p, d) => assert_eq!((p, d.as_slice()), (peer, &b"chan"[..])),
            o => panic!("{o:?}"),
        }
        let (_, frame) = h.peer_sends(from, peer, b"odd").unwrap();
        assert_eq!(&frame[..4], &[0x40, 0x01, 0, 3]);
        assert_eq!(frame.len(), if transport == Transport::Tcp { 8 } else { 7 });
        assert_eq!(turn::tcp_frame_len(&frame).unwrap(), Some(8));
        match c.handle_input(h.now, &frame, &mut out) {
            Received::Data { peer: p, data } => assert_eq!((p, &frame[data]), (peer, &b"odd"[..])),
            o => panic!("{o:?}"),
        }
        // Binding the same number to another peer is refused.
        let n = c.channel_bind(h.now, 0x4001, other_port, &mut buf).unwrap();
        assert!(matches!(
            h.transact(&mut c, from, n, &mut buf),
            TurnClientEvent::Failed { code: 400, .. }
        ));

        // Refresh to 0 ends it, with an event for the driver.
        let n = c.refresh(h.now, 0, &mut buf).unwrap();
        assert_eq!(
            h.transact(&mut c, from, n, &mut buf),
            TurnClientEvent::Refreshed { lifetime: 0 }
        );
        assert_eq!(h.server.allocations(), 0);
        assert!(
            matches!(h.server.poll_event(), Some(TurnEvent::Closed { client, .. }) if client == from)
        );
        assert_eq!(h.used("turn_allocations"), 0);
        assert_eq!(h.used("turn_allocation_heap"), 0);
        let s = h.server.stats();
        assert_eq!((s.allocations_total, s.to_peer, s.to_client), (1, 2, 3));
    }
}

#[test]
fn bad_credentials_get_401_and_allocate_nothing() {
    let mut h = Harness::new(config());
    let before = (h.used("turn_allocations"), h.used("turn_allocation_heap"));
    for (i, (user, pass)) in [("alice", "wrong"), ("mallory", "wonderland"), ("", "")]
        .iter()
        .enumerate()
    {
        let from = udp(41000 + i as u16);
        let mut c = TurnClient::new(user, pass, Transport::Udp, 9);
        let mut buf = [0u8; 512];
        let n = c.allocate(h.now, &mut buf).unwrap();
        assert_eq!(
            h.transact(&mut c, from, n, &mut buf),
            TurnClientEvent::Failed {
                request: TurnRequest::Allocate,
                code: 401
            }
        );
    }
    // A signed request with a forged nonce: 438, nothing allocated.
    let mut buf = [0u8; 256];
    let mut w = MessageWriter::new(&mut buf, Class::Request, stun::ALLOCATE, &[3; 12]).unwrap();
    turn::write_requested_transport(&mut w, 17).unwrap();
    w.attr(stun::USERNAME, b"alice").unwrap();
    w.attr(stun::REALM, b"tern").unwrap();
    w.attr(stun::NONCE, b"00000fff0123456789abcdef").unwrap();
    w.integrity(&stun::long_term_key(b"alice", b"tern", b"wonderland"))
        .unwrap();
    let n = w.finish();
    let ServerSaid::Reply(r) = h.client_sends(udp(42000), &buf[..n]) else {
        panic!()
    };
    assert_eq!(
        Message::parse(&r).unwrap().error_code().map(|c| c.0),
        Some(438)
    );
    assert_eq!(h.server.allocations(), 0);
    assert_eq!(
        (h.used("turn_allocations"), h.used("turn_allocation_heap")),
        before
    );
    assert_eq!(h.server.stats().unauthorized, 6);
}

#[test]
fn stale_nonce_gets_438_and_the_client_recovers() {
    let mut h = Harness::new(TurnConfig {
        nonce_lifetime: 30,
        ..config()
    });
    let from = udp(40001);
    let mut c = TurnClient::new("alice", "wonderland", Transport::Udp, 2);
    allocate(&mut h, &mut c, from);
    h.now += Duration::from_secs(31);
    let peer: SocketAddr = "192.0.2.1:9".parse().unwrap();
    let mut buf = [0u8; 512];
    let n = c.create_permission(h.now, peer, &mut buf).unwrap();
    // The server's first answer is 438 with a fresh nonce; the client retries by itself.
    let ServerSaid::Reply(r) = h.client_sends(from, &buf[..n]) else {
        panic!()
    };
    let m = Message::parse(&r).unwrap();
    assert_eq!(m.error_code(), Some((438, "Stale Nonce")));
    assert!(m.attr(stun::NONCE).is_some() && m.attr(stun::REALM).is_some());
    let mut out = [0u8; 512];
    let Received::Transmit(n) = c.handle_input(h.now, &r, &mut out) else {
        panic!()
    };
    let ServerSaid::Reply(r) = h.client_sends(from, &out[..n]) else {
        panic!()
    };
    assert_eq!(
        c.handle_input(h.now, &r, &mut out),
        Received::Event(TurnClientEvent::PermissionCreated { peer })
    );
    assert_eq!(h.server.stats().stale_nonces, 1);
}

#[test]
fn quotas_refuse_without_growing() {
    let mut h = Harness::new(TurnConfig {
        max_allocations: 5,
        max_allocations_per_user: 3,
        ..config()
    });
    let mut clients = Vec::new();
    for i in 0..3 {
        let mut c = TurnClient::new("alice", "wonderland", Transport::Udp, i);
        allocate(&mut h, &mut c, udp(43000 + i as u16));
        clients.push(c);
    }
    // The fourth for alice: 486.
    let mut c = TurnClient::new("alice", "wonderland", Transport::Udp, 99);
    let mut buf = [0u8; 512];
    let n = c.allocate(h.now, &mut buf).unwrap();
    assert!(matches!(
        h.transact(&mut c, udp(43100), n, &mut buf),
        TurnClientEvent::Failed { code: 486, .. }
    ));
    // REST users fill the server to 5; then 508 for everyone.
    let (ru, rp) = rest_credentials("s3cret", "bob", UNIX_NOW + 3600);
    for i in 0..2 {
        let mut c = TurnClient::new(&ru, &rp, Transport::Udp, 200 + i);
        allocate(&mut h, &mut c, udp(44000 + i as u16));
    }
    let used = (h.used("turn_allocations"), h.used("turn_allocation_heap"));
    for i in 0..1000u16 {
        let mut c = TurnClient::new(&ru, &rp, Transport::Udp, u64::from(i) + 1000);
        let n = c.allocate(h.now, &mut buf).unwrap();
        assert!(matches!(
            h.transact(&mut c, udp(45000 + i), n, &mut buf),
            TurnClientEvent::Failed { code: 508, .. }
        ));
    }
    assert_eq!(h.server.allocations(), 5);
    assert_eq!(
        (h.used("turn_allocations"), h.used("turn_allocation_heap")),
        used
    );
    assert_eq!(h.server.stats().quota_refusals, 1001);
}

#[test]
fn lifetimes_expire_allocations_and_permissions() {
    let mut h = Harness::new(config());
    let from = udp(40002);
    let mut c = TurnClient::new("alice", "wonderland", Transport::Udp, 3);
    allocate(&mut h, &mut c, from);
    let peer: SocketAddr = "192.0.2.1:9".parse().unwrap();
    let mut buf = [0u8; 512];
    let n = c.create_permission(h.now, peer, &mut buf).unwrap();
    h.transact(&mut c, from, n, &mut buf);
    assert!(h.peer_sends(from, peer, b"x").is_some());
    // Permissions last 300 s.
    h.now += Duration::from_secs(301);
    h.server.handle_timeout(h.now);
    assert!(h.peer_sends(from, peer, b"x").is_none());
    assert_eq!(h.server.allocations(), 1);
    assert!(h.server.poll_event().is_none());
    // The allocation (600 s) expires unless refreshed.
    h.now += Duration::from_secs(300);
    h.server.handle_timeout(h.now);
    assert_eq!(h.server.allocations(), 0);
    assert!(matches!(
        h.server.poll_event(),
        Some(TurnEvent::Closed { .. })
    ));
    assert_eq!(h.used("turn_allocation_heap"), 0);
}

#[test]
fn rest_credentials_expire() {
    let mut h = Harness::new(config());
    let (u, p) = rest_credentials("s3cret", "", UNIX_NOW + 10);
    assert_eq!(u, (UNIX_NOW + 10).to_string());
    let mut c = TurnClient::new(&u, &p, Transport::Udp, 4);
    allocate(&mut h, &mut c, udp(40003));
    // Wrong secret, and expired: 401.
    for (u, p) in [
        rest_credentials("other", "x", UNIX_NOW + 100),
        rest_credentials("s3cret", "x", UNIX_NOW - 1),
    ] {
        let mut c = TurnClient::new(&u, &p, Transport::Udp, 5);
        let mut buf = [0u8; 512];
        let n = c.allocate(h.now, &mut buf).unwrap();
        assert!(matches!(
            h.transact(&mut c, udp(40004), n, &mut buf),
            TurnClientEvent::Failed { code: 401, .. }
        ));
    }
    // Independent reference: `echo -n 1433895918506:bob | openssl dgst -sha1 -hmac north
    // -binary | base64`.
    assert_eq!(
        rest_credentials("north", "bob", 1_433_895_918_506),
        (
            "1433895918506:bob".into(),
            "VgBblltOqfTD26WqpgXb/Evs03U=".into()
        )
    );
}

#[test]
fn allocate_retransmission_and_mismatch() {
    let mut h = Harness::new(config());
    let from = udp(40005);
    let mut c = TurnClient::new("alice", "wonderland", Transport::Udp, 6);
    let mut buf = [0u8; 512];
    let n = c.allocate(h.now, &mut buf).unwrap();
    let ServerSaid::Reply(r) = h.client_sends(from, &buf[..n]) else {
        panic!()
    };
    let mut signed = [0u8; 512];
    let Received::Transmit(n) = c.handle_input(h.now, &r, &mut signed) else {
        panic!()
    };
    let ServerSaid::Reply(first) = h.client_sends(from, &signed[..n]) else {
        panic!()
    };
    // The same request again (a retransmission) gets the same success.
    let ServerSaid::Reply(again) = h.client_sends(from, &signed[..n]) else {
        panic!()
    };
    assert_eq!(Message::parse(&again).unwrap().class(), Class::Success);
    assert_eq!(first, again);
    assert_eq!(h.server.allocations(), 1);
    // A new Allocate from the same 5-tuple: 437.
    let mut c2 = TurnClient::new("alice", "wonderland", Transport::Udp, 7);
    let n = c2.allocate(h.now, &mut buf).unwrap();
    assert!(matches!(
        h.transact(&mut c2, from, n, &mut buf),
        TurnClientEvent::Failed { code: 437, .. }
    ));
}

#[test]
fn binding_unknown_attributes_and_transport() {
    let mut h = Harness::new(config());
    let from = udp(40006);
    let mut buf = [0u8; 128];
    let mut w = MessageWriter::new(&mut buf, Class::Request, stun::BINDING, &[1; 12]).unwrap();
    w.fingerprint().unwrap();
    let n = w.finish();
    let ServerSaid::Reply(r) = h.client_sends(from, &buf[..n]) else {
        panic!()
    };
    let m = Message::parse(&r).unwrap();
    assert_eq!(m.class(), Class::Success);
    assert_eq!(m.xor_address(stun::XOR_MAPPED_ADDRESS), Some(from.addr));
    assert!(m.check_fingerprint());
    // RESERVATION-TOKEN is not supported: 420 listing it.
    let mut w = MessageWriter::new(&mut buf, Class::Request, stun::ALLOCATE, &[2; 12]).unwrap();
    turn::write_requested_transport(&mut w, 17).unwrap();
    w.attr(turn::RESERVATION_TOKEN, &[1; 8]).unwrap();
    let n = w.finish();
    let ServerSaid::Reply(r) = h.client_sends(from, &buf[..n]) else {
        panic!()
    };
    let m = Message::parse(&r).unwrap();
    assert_eq!(m.error_code().map(|c| c.0), Some(420));
    assert_eq!(m.attr(stun::UNKNOWN_ATTRIBUTES), Some(&[0x00, 0x22][..]));
    // TCP relays (REQUESTED-TRANSPORT 6) are not offered: 442, after authentication.
    let key = stun::long_term_key(b"alice", b"tern", b"wonderland");
    let mut w = MessageWriter::new(&mut buf, Class::Request, stun::ALLOCATE, &[3; 12]).unwrap();
    turn::write_requested_transport(&mut w, 6).unwrap();
    let n = w.finish();
    let ServerSaid::Reply(r) = h.client_sends(from, &buf[..n]) else {
        panic!()
    };
    let nonce = Message::parse(&r)
        .unwrap()
        .attr(stun::NONCE)
        .unwrap()
        .to_vec();
    let mut w = MessageWriter::new(&mut buf, Class::Request, stun::ALLOCATE, &[4; 12]).unwrap();
    turn::write_requested_transport(&mut w, 6).unwrap();
    w.attr(stun::USERNAME, b"alice").unwrap();
    w.attr(stun::REALM, b"tern").unwrap();
    w.attr(stun::NONCE, &nonce).unwrap();
    w.integrity(&key).unwrap();
    let n = w.finish();
    let ServerSaid::Reply(r) = h.client_sends(from, &buf[..n]) else {
        panic!()
    };
    let m = Message::parse(&r).unwrap();
    assert_eq!(m.error_code().map(|c| c.0), Some(442));
    assert!(m.check_integrity(&key));
}

#[test]
fn client_retransmits_then_gives_up() {
    let now = Instant::now();
    let mut c = TurnClient::new("a", "b", Transport::Udp, 8);
    let mut buf = [0u8; 256];
    let n = c.allocate(now, &mut buf).unwrap();
    let first = buf[..n].to_vec();
    let mut t;
    let mut sends = 1;
    loop {
        t = c.poll_timeout().unwrap();
        match c.handle_timeout(t, &mut buf) {
            Received::Transmit(n) => {
                assert_eq!(&buf[..n], &first[..]);
                sends += 1;
            }
            Received::Event(TurnClientEvent::Failed { code: 0, .. }) => break,
            o => panic!("{o:?}"),
        }
    }
    assert_eq!(sends, 7);
    assert_eq!(
        t - now,
        Duration::from_millis(500 * (1 + 2 + 4 + 8 + 16 + 32 + 64))
    );
    assert!(!c.busy());
}

/// xorshift64*, so the test replays from its seed.
fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    s.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

#[test]
fn mutated_input_never_panics() {
    let mut h = Harness::new(config());
    let from = udp(40007);
    let mut c = TurnClient::new("alice", "wonderland", Transport::Udp, 10);
    allocate(&mut h, &mut c, from);
    let peer: SocketAddr = "192.0.2.1:9".parse().unwrap();
    let mut buf = [0u8; 512];
    let mut seeds = Vec::new();
    let n = c.create_permission(h.now, peer, &mut buf).unwrap();
    seeds.push(buf[..n].to_vec());
    h.transact(&mut c, from, n, &mut buf);
    let n = c.channel_bind(h.now, 0x4002, peer, &mut buf).unwrap();
    seeds.push(buf[..n].to_vec());
    h.transact(&mut c, from, n, &mut buf);
    let n = c.send(peer, b"abcdefgh", &mut buf).unwrap();
    seeds.push(buf[..n].to_vec());
    let n = c.refresh(h.now, 600, &mut buf).unwrap();
    seeds.push(buf[..n].to_vec());
    let mut s = 0x1234_5678_9abc_def0u64;
    let mut out = [0u8; 512];
    for round in 0..20_000 {
        let mut b = seeds[round % seeds.len()].clone();
        for _ in 0..=(xorshift(&mut s) % 4) {
            let i = (xorshift(&mut s) % b.len() as u64) as usize;
            b[i] = xorshift(&mut s) as u8;
        }
        if xorshift(&mut s).is_multiple_of(8) {
            b.truncate((xorshift(&mut s) % (b.len() as u64 + 1)) as usize);
        }
        let _ = h.server.handle_client(h.now, from, &b, &mut out);
        let _ = c.handle_input(h.now, &b, &mut out);
    }
}

/// Acceptance (hardening): the default policy refuses internal peers on UDP and TCP
/// allocations alike: 403 on CreatePermission and ChannelBind, Send indications dropped,
/// each counted.
#[test]
fn internal_peers_are_refused_over_udp_and_tcp() {
    for transport in [Transport::Udp, Transport::Tcp] {
        let mut h = Harness::new(config());
        let from = ClientAddr {
            transport,
            addr: "198.51.100.1:40000".parse().unwrap(),
        };
        let mut c = TurnClient::new("alice", "wonderland", transport, 1);
        allocate(&mut h, &mut c, from);
        let mut buf = [0u8; 512];
        for peer in ["127.0.0.1:22", "10.1.2.3:80", "[::ffff:169.254.169.254]:80"] {
            let peer: SocketAddr = peer.parse().unwrap();
            let n = c.create_permission(h.now, peer, &mut buf).unwrap();
            match h.transact(&mut c, from, n, &mut buf) {
                TurnClientEvent::Failed { code: 403, .. } => {}
                e => panic!("{transport:?} CreatePermission {peer}: {e:?}"),
            }
        }
        let peer: SocketAddr = "192.168.0.10:5000".parse().unwrap();
        let n = c.channel_bind(h.now, 0x4000, peer, &mut buf).unwrap();
        assert!(matches!(
            h.transact(&mut c, from, n, &mut buf),
            TurnClientEvent::Failed { code: 403, .. }
        ));
        let n = c
            .send("169.254.169.254:80".parse().unwrap(), b"GET /", &mut buf)
            .unwrap();
        assert!(matches!(
            h.client_sends(from, &buf[..n]),
            ServerSaid::Dropped(DropReason::PeerRefused)
        ));
        assert_eq!(h.server.stats().peer_refused, 5, "{transport:?}");
    }
}

/// Acceptance (hardening): `max_bytes_per_sec` caps what one allocation relays in a second,
/// both directions together; the next second starts afresh.
#[test]
fn the_bandwidth_cap_drops_what_passes_it_within_a_second() {
    let mut h = Harness::new(TurnConfig {
        max_bytes_per_sec: 1000,
        ..config()
    });
    let from = udp(40000);
    let mut c = TurnClient::new("alice", "wonderland", Transport::Udp, 1);
    allocate(&mut h, &mut c, from);
    let peer: SocketAddr = "192.0.2.9:7000".parse().unwrap();
    let mut buf = [0u8; 512];
    let n = c.create_permission(h.now, peer, &mut buf).unwrap();
    h.transact(&mut c, from, n, &mut buf);
    let payload = [0x55u8; 300];
    for i in 0..3 {
        let n = c.send(peer, &payload, &mut buf).unwrap();
        assert!(
            matches!(h.client_sends(from, &buf[..n]), ServerSaid::Relay(..)),
            "datagram {i}"
        );
    }
    let n = c.send(peer, &payload, &mut buf).unwrap();
    assert!(matches!(
        h.client_sends(from, &buf[..n]),
        ServerSaid::Dropped(DropReason::RateLimited)
    ));
    assert!(
        h.peer_sends(from, peer, &payload).is_none(),
        "the cap counts both ways"
    );
    h.now += Duration::from_secs(1);
    assert!(h.peer_sends(from, peer, &payload).is_some(), "a new second");
    assert_eq!(h.server.stats().rate_limited, 2);
}

/// Acceptance (hardening): one client address (an IPv6 client: its /64) holds at most
/// `max_allocations_per_ip` allocations; more get 486.
#[test]
fn allocations_per_client_address_are_capped() {
    let mut h = Harness::new(TurnConfig {
        max_allocations_per_ip: 2,
        ..config()
    });
    let alloc = |h: &mut Harness, addr: &str, seed: u64| {
        let from = ClientAddr {
            transport: Transport::Udp,
            addr: addr.parse().unwrap(),
        };
        let mut c = TurnClient::new("alice", "wonderland", Transport::Udp, seed);
        let mut buf = [0u8; 512];
        let n = c.allocate(h.now, &mut buf).unwrap();
        h.transact(&mut c, from, n, &mut buf)
    };
    for (i, addr) in ["203.0.113.1:1000", "203.0.113.1:1001"].iter().enumerate() {
        assert!(matches!(
            alloc(&mut h, addr, i as u64),
            TurnClientEvent::Allocated { .. }
        ));
    }
    assert!(matches!(
        alloc(&mut h, "203.0.113.1:1002", 9),
        TurnClientEvent::Failed { code: 486, .. }
    ));
    assert!(matches!(
        alloc(&mut h, "203.0.113.2:1000", 10),
        TurnClientEvent::Allocated { .. }
    ));
    for (i, addr) in ["[2001:db8:1:2::1]:1000", "[2001:db8:1:2::99]:1000"]
        .iter()
        .enumerate()
    {
        assert!(matches!(
            alloc(&mut h, addr, 20 + i as u64),
            TurnClientEvent::Allocated { .. }
        ));
    }
    assert!(matches!(
        alloc(&mut h, "[2001:db8:1:2:ffff::1]:1000", 30),
        TurnClientEvent::Failed { code: 486, .. }
    ));
}

/// A reload's credentials (`set_credentials`): the old password and secret are refused from
/// then on, the new ones allocate; the allocation made before stays.
#[test]
fn new_credentials_apply_to_the_next_request() {
    let mut h = Harness::new(config());
    let mut before = TurnClient::new("alice", "wonderland", Transport::Udp, 9);
    allocate(&mut h, &mut before, udp(43000));
    h.server.set_credentials(
        vec![("alice".into(), "looking-glass".into())],
        Some("n3w".into()),
        TurnConfig::default().peers,
    );
    let expect_401 = |h: &mut Harness, user: &str, pass: &str, port: u16| {
        let mut c = TurnClient::new(user, pass, Transport::Udp, 9);
        let mut buf = [0u8; 512];
        let n = c.allocate(h.now, &mut buf).unwrap();
        assert_eq!(
            h.transact(&mut c, udp(port), n, &mut buf),
            TurnClientEvent::Failed {
                request: TurnRequest::Allocate,
                code: 401
            },
            "{user}:{pass}"
        );
    };
    expect_401(&mut h, "alice", "wonderland", 43001);
    let (old_user, old_pass) = rest_credentials("s3cret", "whep", UNIX_NOW + 600);
    expect_401(&mut h, &old_user, &old_pass, 43002);
    let mut c = TurnClient::new("alice", "looking-glass", Transport::Udp, 9);
    allocate(&mut h, &mut c, udp(43003));
    let (user, pass) = rest_credentials("n3w", "whep", UNIX_NOW + 600);
    let mut c = TurnClient::new(&user, &pass, Transport::Udp, 9);
    allocate(&mut h, &mut c, udp(43004));
    assert_eq!(h.server.allocations(), 3);
}

//! The built-in TURN server in a real `tern demo` process: interop with coturn's
//! `turnutils_uclient` (UDP and TCP to the server, long-term and REST credentials, zero loss),
//! 401 for bad credentials with nothing allocated, an allocation flood beyond the quota
//! refused without memory growth, the WHEP `Link` headers whose credentials work, and TURN
//! over TLS (`uclient -S`).

use std::net::{SocketAddr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use tern_rtc::turn::Transport;
use tern_rtc::turn_client::{Received, TurnClient, TurnClientEvent};

use crate::common;
use common::Child;

const USER: &str = "alice";
const PASS: &str = "wonderland";
const SECRET: &str = "north";

/// Most tests relay between clients and peers on loopback, which the relay refuses by
/// default: they allow 127.0.0.0/8 and lift the per-address allocation quota (every client
/// here is 127.0.0.1). `toml` adds keys (and may override these).
const LOOPBACK_PEERS: &str =
    "[turn]\nallowed_peers = [\"127.0.0.0/8\"]\n\n[limits]\nturn_allocations_per_ip = 100000\n";

/// `tern demo` with TURN on, configured by `toml` (a whole config file).
fn turn_server(toml: &str) -> (Child, SocketAddr) {
    turn_server_with(toml, &[])
}

/// [`turn_server`] with more arguments on the command line.
fn turn_server_with(toml: &str, more: &[&str]) -> (Child, SocketAddr) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let cfg = std::env::temp_dir().join(format!(
        "tern-turn-test-{}-{}.toml",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&cfg, toml).expect("write config");
    let args = [
        "demo",
        "--config",
        cfg.to_str().expect("utf-8 path"),
        "--candidate",
        "127.0.0.1",
        "--turn",
        "127.0.0.1:0",
        "--turn-user",
        &format!("{USER}:{PASS}"),
        "--turn-secret",
        SECRET,
        "--turn-relay-ip",
        "127.0.0.1",
    ];
    let args: Vec<&str> = args.iter().chain(more).copied().collect();
    // A process: the tests read `turn_allocations` in /v1/memory (one line per TURN server
    // in a process) and the allocator's live bytes.
    let server = Child::start(&args);
    let turn = server.turn.expect("the server reports its TURN address");
    (server, turn)
}

/// Runs `turnutils_uclient` and returns (sent, received, lost) from its summary.
fn uclient(
    turn: SocketAddr,
    tcp: bool,
    rest: bool,
    clients: u32,
    messages: u32,
) -> (u64, u64, u64) {
    uclient_with(turn, tcp, rest, clients, messages, &[])
}

/// [`uclient`] with more arguments (`-S`: TLS over the TCP connection).
fn uclient_with(
    turn: SocketAddr,
    tcp: bool,
    rest: bool,
    clients: u32,
    messages: u32,
    more: &[&str],
) -> (u64, u64, u64) {
    let mut cmd = Command::new("turnutils_uclient");
    cmd.args(more);
    if tcp {
        cmd.arg("-t");
    }
    // -y: clients relay to each other; -c: no RTCP allocation; 172-byte messages every 5 ms.
    cmd.args(["-y", "-c", "-l", "172", "-z", "5"])
        .args(["-m", &clients.to_string(), "-n", &messages.to_string()])
        .args(["-p", &turn.port().to_string()]);
    if rest {
        cmd.args(["-W", SECRET, "-u", "bob"]);
    } else {
        cmd.args(["-u", USER, "-w", PASS]);
    }
    cmd.arg("127.0.0.1");
    let out = cmd.output().expect(
        "run turnutils_uclient (Debian package coturn; scripts/install-deps.sh installs it)",
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let num_after = |key: &str| -> Option<u64> {
        let line = text.lines().rev().find(|l| l.contains(key))?;
        let rest = &line[line.find(key)? + key.len()..];
        rest.trim_start()
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    let sent = num_after("tot_send_msgs=");
    let recv = num_after("tot_recv_msgs=");
    let lost = num_after("Total lost packets");
    match (sent, recv, lost) {
        (Some(s), Some(r), Some(l)) => (s, r, l),
        _ => panic!("cannot read the uclient summary (tcp={tcp}, rest={rest}):\n{text}"),
    }
}

#[test]
fn uclient_relays_through_tern_with_zero_loss() {
    let _slot = crate::common::slot();
    let (server, turn) = turn_server(LOOPBACK_PEERS);
    let (clients, messages) = (20, 100);
    for (tcp, rest) in [(false, false), (true, false), (false, true), (true, true)] {
        let (sent, recv, lost) = uclient(turn, tcp, rest, clients, messages);
        let want = u64::from(clients * messages);
        eprintln!("uclient tcp={tcp} rest={rest}: sent {sent}, received {recv}, lost {lost}");
        assert_eq!(
            (sent, recv, lost),
            (want, want, 0),
            "tcp={tcp} rest={rest}; server log:\n{}",
            server.log_tail(20)
        );
    }
    // /metrics counts what the relays carried (172-byte messages, one way to a peer and
    // back out to a client each), published by the worker once a second.
    let want = u64::from(4 * clients * messages);
    let relayed = |what: &str, direction: &str| -> u64 {
        let text = common::http_get(server.http, "/metrics")
            .expect("GET /metrics")
            .text();
        let prefix = format!("tern_turn_relayed_{what}_total{{direction=\"{direction}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {prefix} in /metrics"))
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while relayed("datagrams", "to_client") < want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    for direction in ["to_peer", "to_client"] {
        let (datagrams, bytes) = (relayed("datagrams", direction), relayed("bytes", direction));
        assert!(
            datagrams >= want,
            "{direction}: {datagrams} datagrams of {want}"
        );
        assert!(
            bytes >= want * 172,
            "{direction}: {bytes} bytes for {want} messages of 172"
        );
    }
    server.stop();
}

/// A TURN client on its own UDP socket, driven to completion of one request.
struct Udp {
    sock: UdpSocket,
    server: SocketAddr,
    client: TurnClient,
}

impl Udp {
    fn new(server: SocketAddr, user: &str, pass: &str, seed: u64) -> Udp {
        let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
        sock.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        Udp {
            sock,
            server,
            client: TurnClient::new(user, pass, Transport::Udp, seed),
        }
    }

    fn run(&mut self, first: usize, buf: &mut [u8]) -> TurnClientEvent {
        self.sock.send_to(&buf[..first], self.server).expect("send");
        let mut input = [0u8; 1500];
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let Ok((n, _)) = self.sock.recv_from(&mut input) else {
                continue;
            };
            match self.client.handle_input(Instant::now(), &input[..n], buf) {
                Received::Event(e) => return e,
                Received::Transmit(n) => {
                    self.sock.send_to(&buf[..n], self.server).expect("send");
                }
                _ => {}
            }
        }
        panic!("no TURN answer within 5 s");
    }

    fn allocate(&mut self) -> TurnClientEvent {
        let mut buf = [0u8; 1500];
        let n = self
            .client
            .allocate(Instant::now(), &mut buf)
            .expect("allocate");
        self.run(n, &mut buf)
    }
}

/// Minimal reads of the `/v1/memory` JSON: the allocator's live bytes and a pool's items.
fn memory(server: &Child) -> String {
    let r = common::http_get(server.http, "/v1/memory").expect("GET /v1/memory");
    assert_eq!(r.status, 200);
    r.text()
}

fn json_number(text: &str, key: &str) -> u64 {
    let at = text
        .find(&format!("\"{key}\":"))
        .unwrap_or_else(|| panic!("{key} in {text}"));
    text[at + key.len() + 3..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("number for {key}"))
}

fn pool_items(text: &str, pool: &str) -> u64 {
    let at = text
        .find(&format!("\"name\":\"{pool}\""))
        .unwrap_or_else(|| panic!("pool {pool} in {text}"));
    // The pool's object: from the `{` before its name to the `}` after it.
    let start = text[..at].rfind('{').unwrap_or(0);
    let end = text[at..].find('}').map_or(text.len(), |e| at + e);
    json_number(&text[start..end], "items_in_use")
}

#[test]
fn bad_credentials_get_401_and_nothing_is_allocated() {
    let _slot = crate::common::slot();
    let (server, turn) = turn_server(LOOPBACK_PEERS);
    for (i, (u, p)) in [(USER, "wrong"), ("nobody", PASS), ("1:bob", "x")]
        .into_iter()
        .enumerate()
    {
        let mut c = Udp::new(turn, u, p, i as u64);
        match c.allocate() {
            TurnClientEvent::Failed { code: 401, .. } => {}
            e => panic!("{u}:{p}: {e:?}"),
        }
    }
    assert_eq!(pool_items(&memory(&server), "turn_allocations"), 0);
    // The right password works on the same server.
    let mut c = Udp::new(turn, USER, PASS, 9);
    assert!(matches!(c.allocate(), TurnClientEvent::Allocated { .. }));
    assert_eq!(pool_items(&memory(&server), "turn_allocations"), 1);
    server.stop();
}

#[test]
fn allocation_flood_beyond_quota_is_refused_without_growing_memory() {
    let _slot = crate::common::slot();
    const QUOTA: usize = 200;
    let (server, turn) = turn_server(&format!(
        "[turn]\nmax_allocations = {QUOTA}\nmax_allocations_per_user = 1000\n\n[limits]\nturn_allocations_per_ip = 100000\n"
    ));

    let mut held = Vec::new();
    for i in 0..QUOTA {
        let mut c = Udp::new(turn, USER, PASS, i as u64);
        match c.allocate() {
            TurnClientEvent::Allocated { .. } => held.push(c),
            e => panic!("allocation {i}: {e:?}"),
        }
    }
    let full = memory(&server);
    assert_eq!(pool_items(&full, "turn_allocations"), QUOTA as u64);
    let at_quota = json_number(&full, "live_bytes");

    // 2000 more Allocate attempts from 20 sockets: every one refused with 508.
    let mut refused = 0;
    let mut flooders: Vec<Udp> = (0..20)
        .map(|i| Udp::new(turn, USER, PASS, 10_000 + i))
        .collect();
    for round in 0..100 {
        for c in &mut flooders {
            match c.allocate() {
                TurnClientEvent::Failed { code: 508, .. } => refused += 1,
                e => panic!("flood round {round}: {e:?}"),
            }
        }
    }
    assert_eq!(refused, 2000);
    let after_text = memory(&server);
    let after = json_number(&after_text, "live_bytes");
    assert_eq!(pool_items(&after_text, "turn_allocations"), QUOTA as u64);
    eprintln!("allocator live bytes at quota {at_quota}, after 2000 refused: {after}");
    // Refusals keep no state: allow 16 KiB of noise (HTTP requests, the demo stream), far
    // below what 2000 allocations would take.
    assert!(
        after <= at_quota + 16 * 1024,
        "memory grew by {} bytes during the refused flood",
        after.saturating_sub(at_quota)
    );
    drop(held);
    server.stop();
}

#[test]
fn whep_answer_links_carry_working_turn_credentials() {
    let _slot = crate::common::slot();
    // The default policy: the relay reaches tern's media port, its one exception.
    let (server, turn) = turn_server("");
    let links = whep_links(&server);
    let links: Vec<&str> = links.iter().map(String::as_str).collect();
    let port = turn.port();
    assert_eq!(links.len(), 3, "{links:?}");
    assert!(links[0].starts_with(&format!("<stun:127.0.0.1:{port}>; rel=\"ice-server\"")));
    assert!(links[1].starts_with(&format!(
        "<turn:127.0.0.1:{port}?transport=udp>; rel=\"ice-server\""
    )));
    assert!(links[2].starts_with(&format!(
        "<turn:127.0.0.1:{port}?transport=tcp>; rel=\"ice-server\""
    )));
    let param = |v: &str, key: &str| -> String {
        let at = v
            .find(&format!("{key}=\""))
            .unwrap_or_else(|| panic!("{key} in {v}"));
        let rest = &v[at + key.len() + 2..];
        rest[..rest.find('"').expect("closing quote")].to_string()
    };
    let (user, pass) = (param(links[1], "username"), param(links[1], "credential"));
    assert!(links[1].contains("credential-type=\"password\""));
    // REST format: `expiry:whep`, expiring about a day from now.
    let expiry: u64 = user
        .split(':')
        .next()
        .and_then(|e| e.parse().ok())
        .expect("expiry");
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    assert!((unix + 86_000..=unix + 86_500).contains(&expiry), "{user}");
    let mut c = Udp::new(turn, &user, &pass, 1);
    assert!(matches!(c.allocate(), TurnClientEvent::Allocated { .. }));
    // OPTIONS carries them too, for players that configure ICE servers before the offer.
    let r = common::http_request(server.http, "OPTIONS", "/live/demo/whep", None, &[])
        .expect("OPTIONS");
    assert_eq!(
        r.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("link"))
            .count(),
        3
    );
    server.stop();
}

#[test]
fn allocations_are_snapshots_in_the_api_and_events() {
    let _slot = crate::common::slot();
    let (server, turn) = turn_server(LOOPBACK_PEERS);
    let a = server.http;
    let get = |path: &str| -> (u16, serde_json::Value) {
        let r = common::http_get(a, path).expect("GET");
        (
            r.status,
            serde_json::from_str(&r.text()).unwrap_or_default(),
        )
    };
    assert_eq!(get("/v1/turn/allocations").1, serde_json::json!([]));
    let (mut ws, _) = tungstenite::connect(format!(
        "ws://{a}/v1/events?type=allocation.created,allocation.closed"
    ))
    .expect("event stream");
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_ref() {
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
    }
    let mut c = Udp::new(turn, USER, PASS, 42);
    let TurnClientEvent::Allocated { .. } = c.allocate() else {
        panic!("allocation failed");
    };
    let relayed = c.client.relayed().expect("relayed address");
    let builds = |_: ()| -> u64 {
        let r = common::http_get(a, "/metrics").expect("metrics").text();
        r.lines()
            .find_map(|l| l.strip_prefix("tern_snapshot_builds_total ")?.parse().ok())
            .expect("tern_snapshot_builds_total")
    };
    let before = builds(());
    let (st, list) = get("/v1/turn/allocations");
    assert_eq!(st, 200);
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
    let snap = &list[0];
    assert_eq!(snap["user"], USER);
    assert_eq!(snap["transport"], "udp");
    assert_eq!(snap["relayed"], relayed.to_string());
    assert_eq!(
        snap["client"],
        c.sock.local_addr().expect("addr").to_string()
    );
    let id = snap["id"].as_u64().expect("id");
    assert_eq!(get(&format!("/v1/turn/allocations/{id}")).1, *snap);
    assert_eq!(get("/v1/turn/allocations/999999").0, 404);
    // Reads build nothing.
    assert_eq!(builds(()), before);
    // Refresh with lifetime 0 ends it (RFC 8656 §7.3).
    let mut buf = [0u8; 1500];
    let n = c
        .client
        .refresh(Instant::now(), 0, &mut buf)
        .expect("refresh");
    c.run(n, &mut buf);
    let mut got = Vec::new();
    while got.len() < 2 {
        if let tungstenite::Message::Text(t) = ws.read().expect("event") {
            got.push(serde_json::from_str::<serde_json::Value>(t.as_str()).expect("json"));
        }
    }
    assert_eq!(got[0]["type"], "allocation.created");
    assert_eq!(got[1]["type"], "allocation.closed");
    // Both carry the one cached snapshot; an allocation belongs to no stream.
    assert_eq!(got[0]["snapshot"], *snap);
    assert_eq!(got[1]["snapshot"], *snap);
    assert!(got[0]["stream"].is_null());
    assert_eq!(get("/v1/turn/allocations").1, serde_json::json!([]));
    server.stop();
}

/// Allocations made and deleted as fast as possible while others are held: no snapshot or
/// relay socket is left behind, and every held allocation still relays. (A slot reused in the
/// same turn of the worker's loop once let the old allocation's late Closed event close the
/// new allocation's relay socket.)
#[test]
fn allocation_churn_leaves_nothing_and_held_relays_keep_working() {
    let _slot = crate::common::slot();
    let (server, turn) = turn_server(LOOPBACK_PEERS);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut held: Vec<Udp> = Vec::new();
    std::thread::scope(|s| {
        for c in 0..4u64 {
            let stop = &stop;
            s.spawn(move || {
                let mut buf = [0u8; 1500];
                let mut seed = 1000 + c * 100_000;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    seed += 1;
                    let mut u = Udp::new(turn, USER, PASS, seed);
                    assert!(matches!(u.allocate(), TurnClientEvent::Allocated { .. }));
                    let n = u
                        .client
                        .refresh(Instant::now(), 0, &mut buf)
                        .expect("refresh");
                    assert!(matches!(
                        u.run(n, &mut buf),
                        TurnClientEvent::Refreshed { lifetime: 0 }
                    ));
                }
            });
        }
        for i in 0..20 {
            let mut u = Udp::new(turn, USER, PASS, 77 + i);
            assert!(matches!(u.allocate(), TurnClientEvent::Allocated { .. }));
            held.push(u);
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    // Every held allocation relays a datagram to a peer.
    let peer = UdpSocket::bind("127.0.0.1:0").expect("peer");
    peer.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let to = peer.local_addr().expect("addr");
    let mut buf = [0u8; 1500];
    for (i, u) in held.iter_mut().enumerate() {
        let n = u
            .client
            .create_permission(Instant::now(), to, &mut buf)
            .expect("permission");
        assert!(matches!(
            u.run(n, &mut buf),
            TurnClientEvent::PermissionCreated { .. }
        ));
        let msg = format!("held {i}");
        let n = u.client.send(to, msg.as_bytes(), &mut buf).expect("send");
        u.sock.send_to(&buf[..n], turn).expect("send");
        let mut got = [0u8; 64];
        let (len, from) = peer
            .recv_from(&mut got)
            .unwrap_or_else(|e| panic!("held allocation {i} relayed nothing: {e}"));
        assert_eq!(&got[..len], msg.as_bytes());
        assert_eq!(Some(from), u.client.relayed());
    }
    let list = common::http_get(server.http, "/v1/turn/allocations")
        .expect("GET")
        .text();
    let listed: serde_json::Value = serde_json::from_str(&list).expect("json");
    assert_eq!(listed.as_array().map(Vec::len), Some(held.len()), "{list}");
    drop(held);
    server.stop();
}

impl Udp {
    fn create_permission(&mut self, peer: SocketAddr) -> TurnClientEvent {
        let mut buf = [0u8; 1500];
        let n = self
            .client
            .create_permission(Instant::now(), peer, &mut buf)
            .expect("create_permission");
        self.run(n, &mut buf)
    }

    fn channel_bind(&mut self, number: u16, peer: SocketAddr) -> TurnClientEvent {
        let mut buf = [0u8; 1500];
        let n = self
            .client
            .channel_bind(Instant::now(), number, peer, &mut buf)
            .expect("channel_bind");
        self.run(n, &mut buf)
    }
}

/// A counter from `/metrics`.
fn metric(server: &Child, name: &str) -> u64 {
    let r = common::http_get(server.http, "/metrics").expect("GET /metrics");
    r.text()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

/// Acceptance (hardening): with the default policy the relay cannot reach inside. Loopback,
/// unspecified, private, CGNAT, link-local (the metadata service) and multicast peers get
/// 403 on CreatePermission and ChannelBind, a Send indication to them is dropped, and each
/// refusal is counted; tern's own media port (every relayed viewer's peer) stays reachable,
/// but no other port of its address.
#[test]
fn the_relay_refuses_internal_peers_and_reaches_only_the_media_port() {
    let _slot = crate::common::slot();
    let (server, turn) = turn_server("");
    let mut c = Udp::new(turn, USER, PASS, 1);
    assert!(matches!(c.allocate(), TurnClientEvent::Allocated { .. }));
    let mut refused = 0;
    for peer in [
        "127.0.0.2:22",
        "127.8.0.1:9",
        "0.0.0.0:9",
        "10.1.2.3:9",
        "172.16.0.1:9",
        "192.168.1.1:53",
        "100.64.0.1:9",
        "169.254.169.254:80",
        "224.0.0.251:5353",
        "255.255.255.255:9",
    ] {
        let peer: SocketAddr = peer.parse().expect("peer");
        match c.create_permission(peer) {
            TurnClientEvent::Failed { code: 403, .. } => refused += 1,
            e => panic!("CreatePermission {peer}: {e:?}"),
        }
    }
    let internal: SocketAddr = "10.0.0.1:5000".parse().expect("peer");
    match c.channel_bind(0x4000, internal) {
        TurnClientEvent::Failed { code: 403, .. } => refused += 1,
        e => panic!("ChannelBind {internal}: {e:?}"),
    }
    // A public peer is fine (nothing is sent to it).
    let public: SocketAddr = "198.51.100.7:5000".parse().expect("peer");
    assert!(matches!(
        c.create_permission(public),
        TurnClientEvent::PermissionCreated { .. }
    ));
    // tern's own media port: the permission (by IP) is granted and data flows; a Send to
    // another port of the same address is dropped and counted.
    let media = server.media;
    assert!(matches!(
        c.create_permission(media),
        TurnClientEvent::PermissionCreated { .. }
    ));
    let mut buf = [0u8; 1500];
    let n = c
        .client
        .send(
            "127.0.0.1:22".parse().expect("peer"),
            b"SSH-2.0-probe\r\n",
            &mut buf,
        )
        .expect("send");
    c.sock.send_to(&buf[..n], turn).expect("send");
    refused += 1;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let counted = metric(&server, "tern_turn_peer_refused_total");
        if counted == refused {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "tern_turn_peer_refused_total is {counted}, want {refused}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    server.stop();
}

/// Acceptance (hardening): one client address holds at most `limits.turn_allocations_per_ip`
/// allocations; the next gets 486, and ending one makes room.
#[test]
fn allocations_are_limited_per_client_address() {
    let _slot = crate::common::slot();
    let (server, turn) = turn_server("[limits]\nturn_allocations_per_ip = 3\n");
    let mut held: Vec<Udp> = (0..3)
        .map(|i| {
            let mut c = Udp::new(turn, USER, PASS, 100 + i);
            assert!(matches!(c.allocate(), TurnClientEvent::Allocated { .. }));
            c
        })
        .collect();
    let mut fourth = Udp::new(turn, USER, PASS, 200);
    assert!(matches!(
        fourth.allocate(),
        TurnClientEvent::Failed { code: 486, .. }
    ));
    // Refresh with lifetime 0 ends one allocation; the fourth client now gets its own.
    let mut buf = [0u8; 1500];
    let n = held[0]
        .client
        .refresh(Instant::now(), 0, &mut buf)
        .expect("refresh");
    assert!(matches!(
        held[0].run(n, &mut buf),
        TurnClientEvent::Refreshed { lifetime: 0 }
    ));
    let mut fifth = Udp::new(turn, USER, PASS, 300);
    assert!(matches!(
        fifth.allocate(),
        TurnClientEvent::Allocated { .. }
    ));
    assert!(metric(&server, "tern_turn_quota_refusals_total") >= 1);
    drop(held);
    server.stop();
}

/// Link header values of a WHEP answer for `live/demo`.
fn whep_links(server: &Child) -> Vec<String> {
    let r = common::post_whep(server.http, "/live/demo/whep");
    assert_eq!(r.status, 201, "{}", r.text());
    r.headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("link"))
        .map(|(_, v)| v.clone())
        .collect()
}

/// TURN over TLS (issue 56): coturn's client allocates and relays through the TLS listener
/// with long-term and REST credentials and loses nothing; WHEP answers announce `turns:`;
/// a connection that never shakes hands is closed after the handshake timeout.
#[test]
fn turn_over_tls_relays_uclient_and_is_announced() {
    let _slot = crate::common::slot();
    let dir = crate::https::temp_dir("turns");
    let (cert, key) = crate::https::write_pair(&dir, "turns");
    let toml = format!(
        "{LOOPBACK_PEERS}\n[server]\ntls_cert = \"{}\"\ntls_key = \"{}\"\n",
        cert.display(),
        key.display()
    );
    let (server, turn) = turn_server_with(&toml, &["--turn-tls", "127.0.0.1:0"]);
    let turns = server
        .turns
        .expect("the server reports its TURN-over-TLS address");
    assert_ne!(turns.port(), turn.port());
    let (clients, messages) = (10, 100);
    for rest in [false, true] {
        let (sent, recv, lost) = uclient_with(turns, true, rest, clients, messages, &["-S"]);
        let want = u64::from(clients * messages);
        eprintln!("uclient over TLS rest={rest}: sent {sent}, received {recv}, lost {lost}");
        assert_eq!(
            (sent, recv, lost),
            (want, want, 0),
            "rest={rest}; server log:\n{}",
            server.log_tail(20)
        );
    }
    // Plain TURN over TCP on the TLS port is not TLS: the connection is closed.
    let mut plain = std::net::TcpStream::connect(turns).expect("connect");
    plain
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut buf = [0u8; 1500];
    let mut c = TurnClient::new(USER, PASS, Transport::Tcp, 9);
    let n = c.allocate(Instant::now(), &mut buf).expect("allocate");
    std::io::Write::write_all(&mut plain, &buf[..n]).expect("send");
    let mut got = Vec::new();
    let _ = std::io::Read::read_to_end(&mut plain, &mut got);
    assert!(
        got.first().is_none_or(|b| *b == 0x15),
        "not a TLS alert or a close: {got:02x?}"
    );

    let links = whep_links(&server);
    assert_eq!(links.len(), 4, "{links:?}");
    assert!(
        links[3].starts_with(&format!(
            "<turns:127.0.0.1:{}?transport=tcp>; rel=\"ice-server\"; username=\"",
            turns.port()
        )),
        "{links:?}"
    );

    // A client that connects and never speaks TLS is closed after the handshake timeout
    // (10 s), not held.
    let mut idle = std::net::TcpStream::connect(turns).expect("connect");
    idle.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let t0 = Instant::now();
    let mut b = [0u8; 16];
    let n = std::io::Read::read(&mut idle, &mut b).unwrap_or(0);
    let waited = t0.elapsed();
    assert_eq!(n, 0, "the server sent bytes to a client that said nothing");
    assert!(
        (Duration::from_secs(9)..Duration::from_secs(15)).contains(&waited),
        "closed after {waited:?}"
    );
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A reload (issue 53) puts `[turn]`'s users in force in the running TURN server: the old
/// password gets `401` from then on, the new one allocates, and the relay made before stays.
#[test]
fn a_reload_changes_the_turn_users_of_the_running_server() {
    let _slot = crate::common::slot();
    let toml = |pass: &str| {
        format!(
            "[server]\nwatch_config = false\n\n[turn]\nlisten = \"127.0.0.1:0\"\nrelay_ip = \"127.0.0.1\"\nusers = [\"carol:{pass}\"]\n"
        )
    };
    let cfg = common::config_file("turn-reload", &toml("first-pass"));
    let server = Child::demo_config(&cfg);
    let turn = server.turn.expect("TURN on");
    let mut before = Udp::new(turn, "carol", "first-pass", 1);
    assert!(matches!(
        before.allocate(),
        TurnClientEvent::Allocated { .. }
    ));
    std::fs::write(&cfg, toml("second-pass")).expect("rewrite the config");
    let r = common::http_post(server.http, "/v1/config/reload", "application/json", b"")
        .expect("POST /v1/config/reload");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("\"restart_required\":[]"), "{}", r.text());
    let mut old = Udp::new(turn, "carol", "first-pass", 2);
    match old.allocate() {
        TurnClientEvent::Failed { code: 401, .. } => {}
        e => panic!("the old password: {e:?}"),
    }
    let mut new = Udp::new(turn, "carol", "second-pass", 3);
    assert!(matches!(new.allocate(), TurnClientEvent::Allocated { .. }));
    assert_eq!(pool_items(&memory(&server), "turn_allocations"), 2);
    assert!(
        server
            .log_tail(100)
            .contains("TURN: users, secret and peer lists reloaded")
    );
    server.stop();
}

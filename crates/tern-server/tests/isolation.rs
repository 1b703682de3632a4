//! Two servers in one process keep their own counts: what a surface counts (`/metrics`) and
//! the ingest surfaces' memory lines (`/v1/memory`) belong to the server, not the process,
//! so in-process servers in one test (or an embedder's several) are isolated.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use tern_server::{ListenArg, ServeOptions, Server, load_config};

/// A server on loopback ports the kernel chooses, with RTMP and SRT on.
fn server() -> Server {
    let any: SocketAddr = ([127, 0, 0, 1], 0).into();
    let opts = ServeOptions {
        http: Some(any),
        media: Some(any),
        candidate: vec![[127, 0, 0, 1].into()],
        rtmp: Some(ListenArg(Some(any))),
        srt: Some(ListenArg(Some(any))),
        ..Default::default()
    };
    Server::start(load_config(&opts).expect("config"), &opts).expect("start")
}

/// `GET path` over HTTP/1.1; the body.
fn get(http: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(http).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("response");
    let (head, body) = out.split_once("\r\n\r\n").expect("a response");
    assert!(head.starts_with("HTTP/1.1 200"), "GET {path}: {head}");
    body.to_string()
}

/// The value of an unlabelled metric in `/metrics` (absent: `None`).
fn metric(http: SocketAddr, name: &str) -> Option<u64> {
    get(http, "/metrics").lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|v| v.parse().ok())
    })
}

/// Items in use of memory pool `name` in `/v1/memory`.
fn pool_items(http: SocketAddr, name: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(&get(http, "/v1/memory")).expect("JSON");
    v["pools"]
        .as_array()
        .expect("pools")
        .iter()
        .find(|p| p["name"] == name)
        .and_then(|p| p["items_in_use"].as_u64())
        .unwrap_or_else(|| panic!("no {name} line in {v}"))
}

/// Waits (at most 5 s) until `f` holds.
fn wait_for(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn two_servers_in_one_process_report_their_own_counters() {
    let a = server();
    let b = server();
    let (aa, ba) = (a.addrs(), b.addrs());
    assert_ne!(aa.http, ba.http);
    for s in [aa, ba] {
        assert_eq!(metric(s.http, "tern_srt_stray_total"), Some(0));
        assert_eq!(pool_items(s.http, "rtmp_ingest"), 0);
    }

    // An RTMP connection to A: its thread is booked in A's `rtmp_ingest` line only.
    let conn = TcpStream::connect(aa.rtmp.expect("A's RTMP")).expect("connect to A's RTMP");
    wait_for("A books the RTMP connection", || {
        pool_items(aa.http, "rtmp_ingest") == 1
    });
    assert_eq!(pool_items(ba.http, "rtmp_ingest"), 0);

    // A datagram that is not SRT to A's SRT port: counted by A's listener only (its
    // transport's counts are copied once a second).
    let udp = UdpSocket::bind("127.0.0.1:0").expect("bind");
    udp.send_to(b"not an SRT packet", aa.srt.expect("A's SRT"))
        .expect("send");
    wait_for("A counts the stray datagram", || {
        metric(aa.http, "tern_srt_stray_total") == Some(1)
    });
    assert_eq!(metric(ba.http, "tern_srt_stray_total"), Some(0));

    // The connection closed: A's line is back to nothing.
    drop(conn);
    wait_for("A's RTMP connection is gone", || {
        pool_items(aa.http, "rtmp_ingest") == 0
    });
    a.shutdown();
    b.shutdown();
}

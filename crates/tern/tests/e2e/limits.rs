//! Limits per client address against a real `tern demo`: pending sessions (WHEP and WHIP
//! offers whose ICE never completes), open HTTP connections and OME signalling sockets.
//! Past a limit the client gets `429 Too Many Requests` with `Retry-After`, and a place
//! comes back when a session or connection ends. Every client here is 127.0.0.1, which is
//! exempt by default (`limits.exempt`): each test counts everyone (`exempt = []`).

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

use common::{Server, http_delete, http_get, http_post};

fn demo_with(name: &str, toml: &str) -> Server {
    let p: PathBuf =
        std::env::temp_dir().join(format!("tern-limits-{}-{name}.toml", std::process::id()));
    std::fs::write(&p, toml).expect("write config");
    Server::start(&[
        "demo",
        "--config",
        p.to_str().expect("utf-8 path"),
        "--candidate",
        "127.0.0.1",
    ])
}

/// A WHEP offer with its own ICE credentials (seed `i`), from a client that never does ICE.
fn offer(i: u32) -> String {
    tern_proto::sdp::write_offer(&tern_proto::sdp::OfferParams {
        ice_ufrag: &format!("u{i:05}"),
        ice_pwd: "0123456789abcdefghijklmn",
        fingerprint_sha256: &[7u8; 32],
        video: true,
        audio: true,
        abs_capture_time: true,
        all_video: false,
    })
}

#[test]
fn pending_sessions_are_limited_per_address() {
    let _slot = crate::common::slot();
    let server = demo_with(
        "pending",
        "[limits]\nexempt = []\npending_sessions_per_ip = 3\n\n[[app]]\nname = \"live\"\nstreams = [\"cam\"]\n",
    );
    let post = |i: u32| {
        http_post(
            server.http,
            "/live/demo/whep",
            "application/sdp",
            offer(i).as_bytes(),
        )
        .expect("POST")
    };
    let mut sessions = Vec::new();
    for i in 0..3 {
        let r = post(i);
        assert_eq!(r.status, 201, "{}", r.text());
        sessions.push(r.header("location").expect("Location").to_string());
    }
    let r = post(3);
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("5"));
    assert_eq!(
        r.text().trim(),
        "too many pending sessions from this address (at most 3); retry"
    );
    // WHIP offers count against the same allowance.
    let r =
        http_post(server.http, "/live/cam/whip", "application/sdp", b"v=0\r\n").expect("POST whip");
    assert_eq!(r.status, 429, "{}", r.text());

    // One session ends: its place comes back (the engine gives it up with the viewer).
    assert_eq!(
        http_delete(server.http, &sessions[0])
            .expect("DELETE")
            .status,
        200
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let r = post(4);
        if r.status == 201 {
            break;
        }
        assert_eq!(r.status, 429, "{}", r.text());
        assert!(
            std::time::Instant::now() < deadline,
            "the place did not come back"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    server.stop();
}

#[test]
fn http_connections_are_limited_per_address() {
    let _slot = crate::common::slot();
    let server = demo_with(
        "http",
        "[limits]\nexempt = []\nhttp_connections_per_ip = 4\n",
    );
    // Four idle connections hold the allowance. The harness's own readiness requests may
    // still hold a place for a moment on a loaded machine, in which case one of the four is
    // refused (it reads a 429 or EOF): that one is replaced until all four are held.
    let mut held: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(server.http).expect("connect"))
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        // Time for the server to accept them (a loaded machine accepts late).
        std::thread::sleep(Duration::from_secs(1));
        let mut refused = 0;
        for c in &mut held {
            c.set_read_timeout(Some(Duration::from_millis(20)))
                .expect("timeout");
            let mut b = [0u8; 64];
            // Data or EOF: refused. A timeout: held open by the server.
            if !matches!(c.read(&mut b), Err(ref e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut))
            {
                *c = TcpStream::connect(server.http).expect("connect");
                refused += 1;
            }
        }
        if refused == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "four connections could not be held"
        );
    }
    let mut fifth = TcpStream::connect(server.http).expect("connect");
    fifth
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let _ = fifth.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut answer = String::new();
    let _ = fifth.read_to_string(&mut answer);
    assert!(
        answer.starts_with("HTTP/1.1 429 Too Many Requests\r\nRetry-After: 5\r\n"),
        "{answer:?}"
    );
    assert!(answer.ends_with("too many connections from this address; retry"));

    drop(held);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while http_get(server.http, "/").map(|r| r.status).unwrap_or(0) != 200 {
        assert!(std::time::Instant::now() < deadline, "no place came back");
        std::thread::sleep(Duration::from_millis(50));
    }
    server.stop();
}

#[test]
fn ome_signalling_sockets_are_limited_per_address() {
    let _slot = crate::common::slot();
    let server = demo_with("ome", "[limits]\nexempt = []\nome_connections_per_ip = 2\n");
    let url = format!("ws://{}/live/demo", server.http);
    let a = tungstenite::connect(&url).expect("first socket");
    let _b = tungstenite::connect(&url).expect("second socket");
    match tungstenite::connect(&url) {
        Err(tungstenite::Error::Http(r)) => {
            assert_eq!(r.status().as_u16(), 429);
            assert_eq!(
                r.headers().get("retry-after").and_then(|v| v.to_str().ok()),
                Some("5")
            );
        }
        other => panic!("a third socket: {:?}", other.map(|_| ())),
    }
    drop(a);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while tungstenite::connect(&url).is_err() {
        assert!(std::time::Instant::now() < deadline, "no place came back");
        std::thread::sleep(Duration::from_millis(50));
    }
    server.stop();
}

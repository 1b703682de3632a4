//! `GET /v1/health` and `tern health`, its client (issue 57: the container image's
//! `HEALTHCHECK` runs it, as there is no shell or curl in the image).

use crate::common;

use std::net::SocketAddr;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{ClosedPort, Server, http_delete, http_get, http_post};
use serde_json::Value;

/// `GET /v1/health`: the status and the body, parsed.
fn health(http: SocketAddr) -> (u16, Value) {
    let r = http_get(http, "/v1/health").expect("GET /v1/health");
    assert_eq!(
        r.header("content-type"),
        Some("application/json"),
        "{}",
        r.text()
    );
    let v = serde_json::from_str(&r.text())
        .unwrap_or_else(|e| panic!("GET /v1/health: {e}: {}", r.text()));
    (r.status, v)
}

/// Waits up to 5 s for `/v1/health` to count `n` sessions; returns the last body.
fn wait_sessions(http: SocketAddr, n: u64) -> Value {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let (status, v) = health(http);
        assert_eq!(status, 200, "{v}");
        if v["sessions"] == n || Instant::now() > end {
            return v;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `tern health ARGS` (the binary cargo built).
fn tern_health(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tern"))
        .arg("health")
        .args(args)
        .output()
        .expect("run tern health")
}

#[test]
fn health_is_ok_and_counts_sessions_without_the_api_token() {
    let _slot = crate::common::slot();
    // An API token guards the API; a probe holds none, and needs none.
    let cfg = common::config_file("health-token", "[server]\napi_token = \"t0k\"\n");
    let server = Server::start(&[
        "demo",
        "--config",
        cfg.to_str().expect("utf-8 path"),
        "--candidate",
        "127.0.0.1",
    ]);
    let (status, v) = health(server.http);
    assert_eq!(status, 200);
    assert_eq!(v, serde_json::json!({"status": "ok", "sessions": 0}));
    // A viewer (an offer whose peer never answers a check) is a session while it is held.
    let r = http_post(
        server.http,
        "/live/demo/whep",
        "application/sdp",
        common::whep_offer().as_bytes(),
    )
    .expect("POST whep");
    assert_eq!(r.status, 201, "{}", r.text());
    let location = r.header("location").expect("Location").to_string();
    let v = wait_sessions(server.http, 1);
    assert_eq!(v["sessions"], 1, "{v}");
    assert_eq!(v["status"], "ok");
    let d = http_delete(server.http, &location).expect("DELETE");
    assert_eq!(d.status, 200, "{}", d.text());
    let v = wait_sessions(server.http, 0);
    assert_eq!(v["sessions"], 0, "{v}");
    server.stop();
}

#[test]
fn tern_health_exits_zero_on_a_healthy_server_and_one_on_none() {
    let _slot = crate::common::slot();
    let server = Server::demo();
    let url = format!("http://{}", server.http);
    let out = tern_health(&["--url", &url]);
    assert!(
        out.status.success(),
        "tern health --url {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let body: Value = serde_json::from_slice(&out.stdout).expect("tern health prints the body");
    assert_eq!(body["status"], "ok");

    // With --config it probes the file's `server.http`; an unspecified address on loopback.
    let port = server.http.port();
    for host in ["127.0.0.1", "0.0.0.0"] {
        let cfg = common::config_file(
            &format!("health-{host}"),
            &format!("[server]\nhttp = \"{host}:{port}\"\n"),
        );
        let out = tern_health(&["--config", cfg.to_str().expect("utf-8 path")]);
        assert!(
            out.status.success(),
            "tern health --config ({host}:{port}): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    server.stop();

    // Nobody listening: exit 1 within the timeout, saying why.
    let closed = ClosedPort::new();
    let started = Instant::now();
    let out = tern_health(&[
        "--url",
        &format!("http://{}", closed.addr()),
        "--timeout",
        "2",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(started.elapsed() < Duration::from_secs(10));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unhealthy"), "{err}");

    // A config that does not load: exit 2, naming the key.
    let bad = common::config_file("health-bad", "[server]\nhttp = \"nowhere\"\n");
    let out = tern_health(&["--config", bad.to_str().expect("utf-8 path")]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("http"), "{err}");
}

//! Draining a node for an upgrade (issue 53): `POST /v1/drain` refuses new viewers and
//! publishers (WHEP and WHIP `503` with `Retry-After`), `/v1/health` says `draining` with
//! `503`, open viewers play on, `{"cancel": true}` takes the node back, and the process exits 0
//! once its last session ends; with `server.shutdown_drain_s`, SIGTERM drains until the
//! deadline. Processes: the tests wait for the server to exit by itself.

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

use crate::common;
use common::bench::viewers;
use common::{Child, config_file, http_get, http_post, post_whep};

/// `tern demo` with the config file `toml` (named `name`), a process of its own.
fn demo(name: &str, toml: &str) -> Child {
    let cfg = config_file(name, toml);
    Child::start(&[
        "demo",
        "--config",
        cfg.to_str().expect("utf-8"),
        "--candidate",
        "127.0.0.1",
    ])
}

fn health(server: &Child) -> (u16, Value) {
    let r = http_get(server.http, "/v1/health").expect("GET /v1/health");
    (
        r.status,
        serde_json::from_slice(&r.body).expect("health JSON"),
    )
}

fn drain(server: &Child, body: &str) -> (u16, Value) {
    let r = http_post(
        server.http,
        "/v1/drain",
        "application/json",
        body.as_bytes(),
    )
    .expect("POST /v1/drain");
    let v = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    (r.status, v)
}

/// Waits (≤ 10 s) until the server holds `n` sessions.
fn wait_sessions(server: &Child, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, h) = health(server);
        if h["sessions"] == n {
            return;
        }
        assert!(Instant::now() < deadline, "sessions never {n}: {h}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One viewer of live/demo for `seconds`, connected when this returns.
fn one_viewer(
    server: &Child,
    seconds: u32,
) -> std::thread::JoinHandle<(tern_bench::Outcome, String)> {
    let run = viewers(format!(
        "-url http://{}/live/demo/whep -n 1 -life {seconds} -sint 60000",
        server.http
    ));
    wait_sessions(server, 1);
    run
}

#[test]
fn a_drain_refuses_new_sessions_keeps_open_ones_and_exits_when_they_end() {
    let _slot = crate::common::slot();
    let mut server = demo("drain", "[[app]]\nname = \"live\"\nstreams = [\"cam\"]\n");
    let (status, h) = health(&server);
    assert_eq!((status, h["status"].as_str()), (200, Some("ok")));
    let run = one_viewer(&server, 8);

    for bad in [
        "{}",
        "{\"deadline_s\": -1}",
        "{\"deadline_s\": 90000}",
        "nope",
    ] {
        assert_eq!(drain(&server, bad).0, 400, "{bad}");
    }
    let (status, d) = drain(&server, "{\"deadline_s\": 60}");
    assert_eq!(status, 202, "{d}");
    assert_eq!(d["status"], "draining");
    assert_eq!(d["sessions"], 1);
    let (status, h) = health(&server);
    assert_eq!(
        (status, h["status"].as_str()),
        (503, Some("draining")),
        "{h}"
    );

    // New viewers and publishers are refused while it drains.
    let r = post_whep(server.http, "/live/demo/whep");
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.header("retry-after").is_some());
    assert!(r.text().contains("draining"), "{}", r.text());
    let publish = common::silent_offer();
    let r = http_post(
        server.http,
        "/live/cam/whip",
        "application/sdp",
        publish.as_bytes(),
    )
    .expect("POST whip");
    assert_eq!(r.status, 503, "{}", r.text());

    // Cancelled: it serves again (a viewer is answered, then leaves).
    let (status, d) = drain(&server, "{\"cancel\": true}");
    assert_eq!((status, d["status"].as_str()), (200, Some("ok")), "{d}");
    assert_eq!(health(&server).0, 200);
    let r = post_whep(server.http, "/live/demo/whep");
    assert_eq!(r.status, 201, "{}", r.text());
    let location = r.header("location").expect("Location").to_string();
    let r = common::http_request(server.http, "DELETE", &location, None, &[]).expect("DELETE");
    assert!(r.status < 300, "{}", r.status);
    wait_sessions(&server, 1);

    // Drained again: the open viewer plays to its end, then the process exits 0 at once.
    assert_eq!(drain(&server, "{\"deadline_s\": 60}").0, 202);
    let (outcome, text) = run.join().expect("viewer thread");
    let played = outcome.clients.first().and_then(|c| c.video.as_ref());
    assert!(
        played.is_some_and(|v| v.frames > 150 && v.lost() == 0),
        "the open viewer played on through the drain: {text}"
    );
    let ended = Instant::now();
    let st = server.wait_exit(Duration::from_secs(5)).unwrap_or_else(|| {
        panic!(
            "still running 5 s after its last session; log:\n{}",
            server.log_tail(30)
        )
    });
    assert!(st.success(), "exit {st}; log:\n{}", server.log_tail(30));
    eprintln!("exited {:?} after the last session ended", ended.elapsed());
}

#[test]
fn sigterm_with_shutdown_drain_s_drains_until_the_deadline() {
    let _slot = crate::common::slot();
    let mut server = demo("drain-sigterm", "[server]\nshutdown_drain_s = 3\n");
    let run = one_viewer(&server, 20);
    let pid = Pid::from_raw(i32::try_from(server.pid().expect("running")).expect("pid"));
    let t0 = Instant::now();
    kill(pid, Signal::SIGTERM).expect("SIGTERM");
    std::thread::sleep(Duration::from_millis(500));
    let (status, h) = health(&server);
    assert_eq!(
        (status, h["status"].as_str()),
        (503, Some("draining")),
        "{h}"
    );
    assert_eq!(h["sessions"], 1, "the viewer stays while the node drains");
    let st = server
        .wait_exit(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("no exit 10 s after SIGTERM; log:\n{}", server.log_tail(30)));
    let took = t0.elapsed();
    assert!(st.success(), "exit {st}");
    assert!(
        (Duration::from_millis(2500)..Duration::from_secs(8)).contains(&took),
        "exited {took:?} after SIGTERM with a 3 s drain"
    );
    let _ = run.join();
}

//! Changing a running server (issue 53): reloads by the API, SIGHUP and the file watcher; a
//! broken file refused with every problem and nothing changed; an app removed ends its
//! viewers with `app_removed`; a camera added through the API plays at once, is written
//! into the file with its comments kept, and is there after a restart. Processes of their
//! own (signals, restarts).

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

use crate::common;
use crate::rtsp::Camera;
use common::bench::viewers;
use common::{Child, config_file, free_tcp_port, http_get, http_request};

/// A request with a JSON body (or none): status and the JSON answer (`Null` if none).
fn call(http: SocketAddr, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let r = http_request(
        http,
        method,
        path,
        (!body.is_empty()).then_some("application/json"),
        body.as_bytes(),
    )
    .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    (
        r.status,
        serde_json::from_slice(&r.body).unwrap_or(Value::Null),
    )
}

/// The app names of the configuration in force.
fn apps(http: SocketAddr) -> Vec<String> {
    let (s, v) = call(http, "GET", "/v1/config", None);
    assert_eq!(s, 200, "{v}");
    v["app"]
        .as_array()
        .expect("app list")
        .iter()
        .map(|a| a["name"].as_str().expect("name").to_string())
        .collect()
}

/// `tern_config_reloads_total{result="RESULT"}`.
fn reloads(http: SocketAddr, result: &str) -> u64 {
    let text = http_get(http, "/metrics").expect("metrics").text();
    let line = format!("tern_config_reloads_total{{result=\"{result}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&line))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {line} in /metrics"))
}

/// Waits (≤ `limit`) until app `name` is (`present`) or is not in force: the time it took.
fn wait_app(http: SocketAddr, name: &str, present: bool, limit: Duration) -> Duration {
    let t0 = Instant::now();
    while apps(http).iter().any(|a| a == name) != present {
        assert!(
            t0.elapsed() < limit,
            "app {name} present={present}: not within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    t0.elapsed()
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write the config file");
}

const BASE: &str = "# tern for the reload tests\n[server]\nwatch_config = WATCH\n\n\
# the app the viewers watch\n[[app]]\nname = \"live\"\n\n[[app]]\nname = \"priv\"\ntoken = \"t0p-s3cret\"\n";

fn base(watch: bool) -> String {
    BASE.replace("WATCH", if watch { "true" } else { "false" })
}

/// The file watcher applies an edit within 2 s, SIGHUP and `POST /v1/config/reload` re-read
/// it; a changed listener is named as needing a restart and keeps running; secrets are
/// redacted in `GET /v1/config`; the demo's viewers lose nothing across it all.
#[test]
fn the_watcher_sighup_and_the_api_reload_the_file_and_viewers_lose_nothing() {
    let _slot = crate::common::slot();
    let cfg = config_file("reload-watch", &base(true));
    let server = Child::demo_config(&cfg);
    let http = server.http;
    let bench = viewers(format!(
        "-url http://{http}/live/demo/whep -n 3 -cint 50 -life 9 -sint 60000 --json"
    ));
    std::thread::sleep(Duration::from_secs(1));
    // Redacted.
    let (_, c) = call(http, "GET", "/v1/config", None);
    assert!(!c.to_string().contains("t0p-s3cret"), "{c}");
    assert_eq!(c["app"][1]["token"], "***", "{c}");
    assert_eq!(c["file"], cfg.display().to_string());
    // The watcher.
    write(&cfg, &format!("{}\n[[app]]\nname = \"w1\"\n", base(true)));
    let took = wait_app(http, "w1", true, Duration::from_secs(2));
    eprintln!("the watcher applied an edit in {took:?}");
    // SIGHUP (the watcher may see the same edit: either way it is in force once).
    write(&cfg, &format!("{}\n[[app]]\nname = \"w2\"\n", base(true)));
    let pid = Pid::from_raw(server.pid().expect("pid") as i32);
    kill(pid, Signal::SIGHUP).expect("SIGHUP");
    wait_app(http, "w2", true, Duration::from_secs(2));
    assert!(!apps(http).contains(&"w1".to_string()));
    // The API, with a change that needs a restart (the listeners are on the command line,
    // which a reload lays over the file again: the reclaim pass's period, then).
    let (_, c) = call(http, "GET", "/v1/config", None);
    let trim = c["tunables"]["pool_trim_s"].clone();
    assert_ne!(trim, 7, "{c}");
    write(
        &cfg,
        &format!(
            "{}\n[[app]]\nname = \"w3\"\n[tunables]\npool_trim_s = 7\n",
            base(true)
        ),
    );
    let (s, v) = call(http, "POST", "/v1/config/reload", None);
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["restart_required"],
        serde_json::json!(["tunables.pool_trim_s"]),
        "{v}"
    );
    assert!(apps(http).contains(&"w3".to_string()));
    let (_, c) = call(http, "GET", "/v1/config", None);
    assert_eq!(
        c["tunables"]["pool_trim_s"], trim,
        "the running value is kept"
    );
    assert!(reloads(http, "applied") >= 3);
    assert_eq!(reloads(http, "rejected"), 0);
    let (o, text) = bench.join().expect("bench");
    assert_eq!(o.summary.connected, 3, "{text}");
    assert_eq!(o.summary.total_losses, 0, "{text}");
    assert_eq!(o.summary.failed, 0, "{text}");
    assert!(server.log_tail(400).contains("needs a restart"));
}

/// A file with an unknown key, a bad value and a duplicate app: `422` listing each,
/// nothing changes (apps, the running viewers), SIGHUP logs and counts it too.
#[test]
fn a_broken_file_is_refused_with_every_problem_and_changes_nothing() {
    let _slot = crate::common::slot();
    let good = format!("{}\n[[app]]\nname = \"other\"\n", base(false));
    let cfg = config_file("reload-broken", &good);
    let server = Child::demo_config(&cfg);
    let http = server.http;
    let bench = viewers(format!(
        "-url http://{http}/live/demo/whep -n 2 -cint 50 -life 6 -sint 60000 --json"
    ));
    std::thread::sleep(Duration::from_secs(1));
    let broken = format!(
        "{}\nbogus_key = 1\n[hls]\nwindow = 0\n\n[[app]]\nname = \"other\"\n\n[[app]]\nname = \"other\"\n",
        base(false)
    );
    write(&cfg, &broken);
    let (s, v) = call(http, "POST", "/v1/config/reload", None);
    assert_eq!(s, 422, "{v}");
    let problems = v["problems"].as_array().expect("problems").clone();
    let all = serde_json::to_string(&problems).expect("json");
    assert!(problems.len() >= 3, "{v}");
    assert!(all.contains("bogus_key"), "{all}");
    assert!(all.contains("hls.window"), "{all}");
    assert!(
        all.contains("app[3].name") && all.contains("duplicate"),
        "{all}"
    );
    assert_eq!(apps(http), ["live", "priv", "other"]);
    let pid = Pid::from_raw(server.pid().expect("pid") as i32);
    kill(pid, Signal::SIGHUP).expect("SIGHUP");
    let t0 = Instant::now();
    while reloads(http, "rejected") < 2 {
        assert!(t0.elapsed() < Duration::from_secs(5), "SIGHUP not counted");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(reloads(http, "applied"), 0);
    assert!(server.log_tail(200).contains("hls.window"));
    let (o, text) = bench.join().expect("bench");
    assert_eq!(o.summary.connected, 2, "{text}");
    assert_eq!(o.summary.total_losses, 0, "{text}");
    // An edit through the API that breaks the check is refused the same way, and the file
    // keeps what it had.
    write(&cfg, &good);
    let (s, v) = call(
        http,
        "PUT",
        "/v1/config/apps/x",
        Some(serde_json::json!({"idle_grace_s": "soon"})),
    );
    assert_eq!(s, 422, "{v}");
    assert_eq!(std::fs::read_to_string(&cfg).expect("file"), good);
}

/// `DELETE /v1/config/apps/gone` ends the app's viewers with `app_removed` in their
/// `viewer.left` events within 1 s; its stream is gone; the file keeps its comments.
#[test]
fn removing_an_app_ends_its_viewers_with_app_removed_within_a_second() {
    let _slot = crate::common::slot();
    let text = format!(
        "{}\n# the app to remove\n[[app]]\nname = \"gone\"\nstreams = [\"s\"]\nfallback = \"clip\"\n",
        base(false)
    );
    let cfg = config_file("reload-remove", &text);
    let server = Child::serve(&cfg);
    let http = server.http;
    let (mut ws, _) = tungstenite::connect(format!(
        "ws://{http}/v1/events?type=viewer.left,viewer.connected&stream=gone/s"
    ))
    .expect("event stream");
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_ref() {
        s.set_read_timeout(Some(Duration::from_secs(15)))
            .expect("timeout");
    }
    let bench = viewers(format!(
        "-url http://{http}/gone/s/whep -n 2 -cint 50 -life 8 -sint 60000 --json"
    ));
    let mut connected = 0;
    while connected < 2 {
        let m = ws.read().expect("an event");
        if let tungstenite::Message::Text(t) = m {
            connected += usize::from(t.contains("viewer.connected"));
        }
    }
    std::thread::sleep(Duration::from_secs(1));
    let t0 = Instant::now();
    let (s, v) = call(http, "DELETE", "/v1/config/apps/gone", None);
    assert_eq!(s, 204, "{v}");
    let mut left = Vec::new();
    while left.len() < 2 {
        let m = ws.read().expect("viewer.left events");
        if let tungstenite::Message::Text(t) = m {
            let e: Value = serde_json::from_str(&t).expect("event JSON");
            if e["type"] == "viewer.left" {
                left.push((t0.elapsed(), e["reason"].clone()));
            }
        }
    }
    eprintln!("viewer.left after the DELETE: {left:?}");
    for (after, reason) in &left {
        assert_eq!(reason, "app_removed");
        assert!(*after <= Duration::from_secs(1), "{after:?}");
    }
    assert_eq!(call(http, "GET", "/v1/streams/gone/s", None).0, 404);
    assert_eq!(call(http, "DELETE", "/v1/config/apps/gone", None).0, 404);
    let file = std::fs::read_to_string(&cfg).expect("file");
    assert!(!file.contains("\"gone\""), "{file}");
    assert!(
        file.contains("# tern for the reload tests")
            && file.contains("# the app the viewers watch"),
        "{file}"
    );
    let _ = bench.join();
}

/// A camera added with `PUT /v1/config/apps/cams/sources/door` is watchable at once over
/// WHEP; after a restart it is still there and the file still has its comments.
#[test]
fn a_camera_added_through_the_api_plays_at_once_and_after_a_restart() {
    let _one = crate::rtsp::one_at_a_time();
    let port = free_tcp_port();
    let _camera = Camera::start(port, &[]);
    let text = format!(
        "{}\n# cameras\n[[app]]\nname = \"cams\" # the door and more\nidle_grace_s = 2\n",
        base(false)
    );
    let cfg = config_file("reload-camera", &text);
    let server = Child::serve(&cfg);
    let (s, v) = call(
        server.http,
        "PUT",
        "/v1/config/apps/cams/sources/door",
        Some(serde_json::json!({"url": format!("rtsp://127.0.0.1:{port}/cam")})),
    );
    assert_eq!(s, 201, "{v}");
    assert_eq!(
        v["sources"]["added"],
        serde_json::json!(["cams/door"]),
        "{v}"
    );
    // A camera for an app the file does not have: 404, the file untouched.
    let before = std::fs::read_to_string(&cfg).expect("file");
    let (s, v) = call(
        server.http,
        "PUT",
        "/v1/config/apps/nope/sources/door",
        Some(serde_json::json!({"url": format!("rtsp://127.0.0.1:{port}/cam")})),
    );
    assert_eq!(s, 404, "{v}");
    assert_eq!(std::fs::read_to_string(&cfg).expect("file"), before);
    let watch = |http: SocketAddr| {
        let (o, text) = viewers(format!(
            "-url http://{http}/cams/door/whep -n 1 -cint 50 -life 6 -sint 60000 --json"
        ))
        .join()
        .expect("bench");
        assert_eq!(o.summary.connected, 1, "{text}");
        let frames = o.clients[0].video.as_ref().map_or(0, |v| v.frames);
        assert!(frames > 60, "{frames} frames\n{text}");
    };
    watch(server.http);
    // The same PUT again replaces it: 200.
    let (s, _) = call(
        server.http,
        "PUT",
        "/v1/config/apps/cams/sources/door",
        Some(serde_json::json!({"url": format!("rtsp://127.0.0.1:{port}/cam")})),
    );
    assert_eq!(s, 200);
    // A changed camera (always on now) is pulled again while its viewer stays.
    let viewer = viewers(format!(
        "-url http://{}/cams/door/whep -n 1 -cint 50 -life 9 -sint 60000 --json",
        server.http
    ));
    std::thread::sleep(Duration::from_secs(3));
    let (s, v) = call(
        server.http,
        "PUT",
        "/v1/config/apps/cams/sources/door",
        Some(
            serde_json::json!({"url": format!("rtsp://127.0.0.1:{port}/cam"), "on_demand": false}),
        ),
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["sources"]["changed"],
        serde_json::json!(["cams/door"]),
        "{v}"
    );
    let (o, text) = viewer.join().expect("bench");
    assert_eq!(o.summary.connected, 1, "{text}");
    let frames = o.clients[0].video.as_ref().map_or(0, |v| v.frames);
    let gaps = common::video_gaps_ms(&o);
    eprintln!("across the camera's re-pull: {frames} frames, longest video gap {gaps:?} ms");
    assert!(frames > 150, "{frames} frames\n{text}");
    // The same session throughout: frames on both sides of the re-pull, no long hole.
    assert!(gaps.iter().all(|&g| g < 2_000), "{gaps:?}\n{text}");
    server.stop();
    let file = std::fs::read_to_string(&cfg).expect("file");
    for comment in [
        "# tern for the reload tests",
        "# cameras",
        "# the door and more",
    ] {
        assert!(file.contains(comment), "{comment} lost:\n{file}");
    }
    let again = Child::serve(&cfg);
    let (_, c) = call(again.http, "GET", "/v1/config", None);
    assert_eq!(c["app"][2]["source"][0]["stream"], "door", "{c}");
    watch(again.http);
    // Removed: its stream goes.
    let (s, _) = call(
        again.http,
        "DELETE",
        "/v1/config/apps/cams/sources/door",
        None,
    );
    assert_eq!(s, 204);
    // The directory drops it at once; the stream's snapshot goes when the engine has
    // unbound it, a moment later on a loaded machine.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while call(again.http, "GET", "/v1/streams/cams/door", None).0 != 404 {
        assert!(
            std::time::Instant::now() < deadline,
            "cams/door still there 2 s after its camera was removed"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// `[limits]` and `[hls]` apply at once: a per-address limit raised by a reload lets the
/// next session in (no restart named), and `GET /v1/config` shows the new LL-HLS window.
#[test]
fn limits_and_hls_settings_apply_at_once() {
    let _slot = crate::common::slot();
    let text = |pending: u32, window: u32| {
        format!(
            "{}\n[limits]\nexempt = []\npending_sessions_per_ip = {pending}\n\n[hls]\nwindow = {window}\n",
            base(false)
        )
    };
    let cfg = config_file("reload-limits", &text(1, 6));
    let server = Child::demo_config(&cfg);
    let http = server.http;
    // Offers that never finish ICE hold their pending places.
    assert_eq!(common::post_whep(http, "/live/demo/whep").status, 201);
    assert_eq!(common::post_whep(http, "/live/demo/whep").status, 429);
    write(&cfg, &text(3, 9));
    let (s, v) = call(http, "POST", "/v1/config/reload", None);
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["restart_required"], serde_json::json!([]), "{v}");
    assert_eq!(common::post_whep(http, "/live/demo/whep").status, 201);
    assert_eq!(common::post_whep(http, "/live/demo/whep").status, 201);
    assert_eq!(common::post_whep(http, "/live/demo/whep").status, 429);
    let (_, c) = call(http, "GET", "/v1/config", None);
    assert_eq!(c["hls"]["window"], 9, "{c}");
    assert_eq!(c["limits"]["pending_sessions_per_ip"], 3, "{c}");
}

/// A changed app token applies to new sessions only: after the reload the old token gets
/// `401` and the new one `201`, and the session the old token opened is still there.
#[test]
fn a_changed_token_applies_to_new_sessions_only() {
    let _slot = crate::common::slot();
    let text = |token: &str| {
        format!("[server]\nwatch_config = false\n\n[[app]]\nname = \"live\"\ntoken = \"{token}\"\n")
    };
    let cfg = config_file("reload-token", &text("first-token"));
    let server = Child::demo_config(&cfg);
    let http = server.http;
    let whep = |token: &str| {
        let auth = format!("Bearer {token}");
        common::http_request_with(
            http,
            "POST",
            "/live/demo/whep",
            &[("Authorization", auth.as_str())],
            Some("application/sdp"),
            common::whep_offer().as_bytes(),
        )
        .expect("POST whep")
        .status
    };
    assert_eq!(whep("first-token"), 201);
    let (_, list) = call(http, "GET", "/v1/streams/live/demo/viewers", None);
    let before = list.as_array().map_or(0, Vec::len);
    assert_eq!(before, 1, "{list}");
    write(&cfg, &text("second-token"));
    let (s, v) = call(http, "POST", "/v1/config/reload", None);
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["apps"]["changed"], serde_json::json!(["live"]), "{v}");
    assert_eq!(whep("first-token"), 401);
    assert_eq!(whep("second-token"), 201);
    let (_, list) = call(http, "GET", "/v1/streams/live/demo/viewers", None);
    assert_eq!(
        list.as_array().map_or(0, Vec::len),
        2,
        "the first session stays: {list}"
    );
}

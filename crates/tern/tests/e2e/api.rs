//! The management API, events, metrics and the OpenAPI document, against a real server.

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use clap::Parser;
use common::{Server, http_get};
use serde_json::Value;
use tern_bench::BenchArgs;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

fn bench(line: &str) -> tern_bench::Outcome {
    let argv =
        std::iter::once("bench".to_string()).chain(line.split_whitespace().map(String::from));
    let a = Cli::parse_from(tern_bench::normalize_args(argv)).bench;
    let mut out = Vec::new();
    tern_bench::run(&a, Arc::new(AtomicBool::new(false)), &mut out).expect("bench runs")
}

fn get_json(addr: SocketAddr, path: &str) -> Value {
    let r = http_get(addr, path).expect("GET");
    assert_eq!(r.status, 200, "GET {path}: {}", r.text());
    serde_json::from_str(&r.text()).unwrap_or_else(|e| panic!("GET {path}: {e}: {}", r.text()))
}

fn metric(addr: SocketAddr, name: &str) -> u64 {
    let r = http_get(addr, "/metrics").expect("GET /metrics");
    assert_eq!(r.status, 200);
    r.text()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("metric {name} missing"))
}

/// One request with a method and headers; returns the status.
fn status(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> u16 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n"
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).expect("write");
    // Bytes: a body need not be text (thumb.jpg).
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out)
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_thousand_viewers_cost_exactly_three_segment_builds_each_and_reads_none() {
    let _slot = crate::common::slot();
    let server = Server::demo();
    let before = metric(server.http, "tern_snapshot_builds_total");
    let url = format!("http://{}/live/demo/whep", server.http);
    let o = bench(&format!(
        "-url {url} -n 1000 -cint 2 -life 6 -sint 60000 --json"
    ));
    assert_eq!(o.summary.connected, 1000, "all connected");
    let after = metric(server.http, "tern_snapshot_builds_total");
    // Per viewer: the identity and "connecting" segments at join, the connection segment
    // again at connect. Leaving builds nothing; no stream changed.
    assert_eq!(after - before, 3 * 1000);
    for _ in 0..50 {
        get_json(server.http, "/v1/streams");
        get_json(server.http, "/v1/streams/live/demo/viewers");
        get_json(server.http, "/v1/apps");
    }
    assert_eq!(
        metric(server.http, "tern_snapshot_builds_total"),
        after,
        "reads build nothing"
    );
    server.stop();
}

#[test]
fn endpoints_events_and_kick() {
    let _slot = crate::common::slot();
    let server = Server::demo();
    let a = server.http;
    let apps = get_json(a, "/v1/apps");
    assert_eq!(apps[0]["name"], "live");
    assert_eq!(apps[0]["streams"][0], "demo");
    let streams = get_json(a, "/v1/streams");
    assert_eq!(streams[0]["snapshot"]["key"], "live/demo");
    assert_eq!(streams[0]["snapshot"]["source"], "clip");
    assert_eq!(streams[0]["snapshot"]["live"], true);
    assert_eq!(status(a, "GET", "/v1/streams/live/nope", &[]), 404);
    assert_eq!(status(a, "GET", "/v1/viewers/12345", &[]), 404);
    assert_eq!(status(a, "DELETE", "/v1/viewers/12345", &[]), 404);
    assert_eq!(
        status(a, "DELETE", "/v1/streams/live/demo/publisher", &[]),
        404
    );

    // Subscribe to viewer.left on live/demo only.
    let (mut ws, _) = tungstenite::connect(format!(
        "ws://{a}/v1/events?type=viewer.joined,viewer.left&stream=live/demo"
    ))
    .expect("event stream");
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_ref() {
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
    }
    // Two viewers for 8 s in the background; kick the first as soon as it is listed.
    let url = format!("http://{a}/live/demo/whep");
    let run = std::thread::spawn(move || {
        bench(&format!(
            "-url {url} -n 2 -cint 100 -life 8 -sint 60000 --json"
        ))
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let viewers = loop {
        let v = get_json(a, "/v1/streams/live/demo/viewers");
        let n = v.as_array().map_or(0, Vec::len);
        if n == 2
            && v.as_array()
                .expect("array")
                .iter()
                .all(|x| x["connection"]["state"] == "connected")
        {
            break v;
        }
        assert!(Instant::now() < deadline, "viewers never listed: {v}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let id = viewers[0]["identity"]["id"].as_u64().expect("id");
    let one = get_json(a, &format!("/v1/viewers/{id}"));
    assert_eq!(one["identity"]["stream"], "live/demo");
    assert!(one["connection"]["remote"].as_str().is_some());
    // Live figures, read from the viewer's worker on each request (issue 41).
    let live = &one["live"];
    assert!(
        live["bytes_sent"].as_u64().expect("bytes_sent") > 0,
        "{one}"
    );
    for k in [
        "nacks",
        "retransmits",
        "nacks_ignored",
        "twcc_parsed",
        "twcc_dropped",
    ] {
        assert!(live[k].as_u64().is_some(), "{k} in {one}");
    }
    assert!(
        live.get("estimate_bps").is_some() && live.get("rtt_ms").is_some(),
        "{one}"
    );
    let s = get_json(a, "/v1/streams/live/demo");
    assert_eq!(s["viewers"], 2);
    assert!(s["packets_out"].as_u64().expect("counter") > 0);
    // The clip's video as viewers are answered: H264 with its SPS's profile-level-id.
    assert_eq!(s["video"]["codec"], "H264");
    let plid = s["video"]["profile_level_id"].as_str().expect("SPS seen");
    assert!(
        plid.len() == 6 && u32::from_str_radix(plid, 16).is_ok(),
        "{plid}"
    );
    assert_eq!(status(a, "DELETE", &format!("/v1/viewers/{id}"), &[]), 204);
    let o = run.join().expect("bench");
    // The kicked client stopped receiving; the other did not.
    assert_eq!(o.summary.clients, 2);

    // Events: joined ×2, then left for the kicked one ("closed by server"), then the
    // other's left at the end; never viewer.connected (filtered out).
    let mut got: Vec<Value> = Vec::new();
    while got.len() < 4 {
        let msg = ws.read().expect("event");
        if let tungstenite::Message::Text(t) = msg {
            got.push(serde_json::from_str(&t).expect("event json"));
        }
    }
    let types: Vec<&str> = got
        .iter()
        .map(|e| e["type"].as_str().expect("type"))
        .collect();
    assert_eq!(
        types,
        [
            "viewer.joined",
            "viewer.joined",
            "viewer.left",
            "viewer.left"
        ]
    );
    assert_eq!(got[2]["snapshot"]["identity"]["id"], id);
    assert_eq!(got[2]["reason"], "closed by server");
    assert!(got.iter().all(|e| e["stream"] == "live/demo"));

    // Metrics.
    let m = http_get(a, "/metrics").expect("metrics").text();
    for name in [
        "tern_viewers ",
        "tern_packets_out_total ",
        "tern_stream_live{stream=\"live/demo\"} 1",
        "tern_pool_used_bytes{pool=\"packet_buffers\"}",
        "tern_heap_live_bytes ",
        "tern_event_subscribers 1",
    ] {
        assert!(m.contains(name), "{name} missing from /metrics:\n{m}");
    }
    server.stop();
}

#[test]
fn openapi_document_matches_the_routes() {
    let _slot = crate::common::slot();
    let server = Server::demo();
    let a = server.http;
    let doc = get_json(a, "/v1/openapi.json");
    assert_eq!(doc["openapi"], "3.0.3");
    let paths = doc["paths"].as_object().expect("paths");
    // Every documented operation exists and answers one of its documented statuses.
    let mut ops = 0;
    for (path, item) in paths {
        let concrete = path
            .replace("{app}", "live")
            .replace("{stream}", "demo")
            .replace("{id}", "1")
            .replace("{session}", "nosuch");
        for (method, op) in item.as_object().expect("path item") {
            let st = status(a, &method.to_uppercase(), &concrete, &[]);
            let documented: Vec<&String> = op["responses"]
                .as_object()
                .expect("responses")
                .keys()
                .collect();
            assert!(
                documented.iter().any(|c| c.as_str() == st.to_string()),
                "{} {concrete} answered {st}, documented {documented:?}",
                method.to_uppercase()
            );
            ops += 1;
        }
    }
    assert!(ops >= 20, "{ops} operations");
    // Every route the server's router declares is documented: the paths are read from the
    // `.route("...")` calls in its source, so a new route without documentation fails here.
    let mut routes = 0;
    {
        let src = include_str!("../../../tern-server/src/http/router.rs");
        for tail in src.split(".route(").skip(1) {
            let Some(path) = tail
                .trim_start()
                .strip_prefix('"')
                .and_then(|t| t.split('"').next())
            else {
                continue;
            };
            // A catch-all (`/v1/{*rest}`: the JSON 404 of an unknown API path) is no route
            // to document; its test is `an_unknown_api_path_is_a_json_404_not_the_player`.
            if path.contains("{*") {
                continue;
            }
            assert!(paths.contains_key(path), "route {path} is not documented");
            routes += 1;
        }
    }
    assert!(
        routes >= 15,
        "found only {routes} routes in the router source"
    );
    server.stop();
}

#[test]
fn the_api_token_guards_the_api() {
    let _slot = crate::common::slot();
    let cfg = common::config_file("api-token", "[server]\napi_token = \"t0k\"\n");
    let server = Server::start(&[
        "demo",
        "--config",
        cfg.to_str().expect("utf-8 path"),
        "--candidate",
        "127.0.0.1",
    ]);
    let a = server.http;
    assert_eq!(status(a, "GET", "/v1/streams", &[]), 401);
    assert_eq!(
        status(a, "GET", "/metrics", &[("Authorization", "Bearer nope")]),
        401
    );
    assert_eq!(
        status(a, "GET", "/v1/streams", &[("Authorization", "Bearer t0k")]),
        200
    );
    assert_eq!(
        status(a, "GET", "/metrics", &[("Authorization", "Bearer t0k")]),
        200
    );
    server.stop();
}

#[test]
fn an_unknown_api_path_is_a_json_404_not_the_player() {
    let _slot = crate::common::slot();
    let server = Server::demo();
    for path in ["/v1/nope", "/v1/streams/live/demo/nope/more", "/v1/x"] {
        let r = http_get(server.http, path).expect("GET");
        assert_eq!(r.status, 404, "{path}: {}", r.text());
        let v: serde_json::Value = serde_json::from_slice(&r.body).expect("a JSON error");
        assert!(v["error"].as_str().is_some_and(|e| e.contains(path)), "{v}");
    }
    // The routes beside it still answer.
    assert_eq!(
        http_get(server.http, "/v1/health").expect("GET").status,
        200
    );
    assert_eq!(
        http_get(server.http, "/live/demo").expect("GET").status,
        200
    );
    server.stop();
}

//! The management API under `/v1`, the event stream, Prometheus `/metrics` and the OpenAPI
//! document.
//!
//! Reads return cached snapshots ([`crate::snapshot`]) and live counters; nothing is built
//! on a read. When `server.api_token` is configured, these routes require it as a Bearer
//! token (the WHEP/WHIP routes use the apps' own tokens).

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;

use crate::http::reply::text;
use crate::http::state::AppState;
use crate::media::{Command, ViewerId};

fn json(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// `None` when the request may go on, else the 401 to send.
fn refused(st: &AppState, headers: &HeaderMap) -> Option<Response> {
    let token = st.config.server.api_token.as_deref()?;
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if given == Some(token) {
        return None;
    }
    let mut r = text(
        StatusCode::UNAUTHORIZED,
        "missing or wrong API Bearer token",
    );
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    Some(r)
}

macro_rules! auth {
    ($st:expr, $h:expr) => {
        if let Some(r) = refused(&$st, &$h) {
            return r;
        }
    };
}

/// A stream's snapshot with its live counters.
fn stream_json(st: &AppState, key: &str, snapshot: &str) -> String {
    let s = &st.engine.stats;
    let idx = st.streams.get(key).map(|i| i.index);
    let read = |v: &Vec<std::sync::atomic::AtomicU64>| {
        idx.and_then(|i| v.get(i))
            .map_or(0, |a| a.load(Ordering::Relaxed))
    };
    let viewers = s.snapshots.viewers(Some(key)).len();
    // The video as viewers are answered: its codec and (H264) the SPS's profile-level-id.
    let video = idx.map_or(Default::default(), |i| s.video(i));
    let profile = video.h264_profile.map_or("null".to_string(), |[a, b, c]| {
        format!("\"{a:02x}{b:02x}{c:02x}\"")
    });
    format!(
        "{{\"snapshot\":{snapshot},\"viewers\":{viewers},\"packets_out\":{},\"bytes_out\":{},\"video\":{{\"codec\":\"{}\",\"profile_level_id\":{profile}}}}}",
        read(&s.stream_packets),
        read(&s.stream_bytes),
        video.codec.sdp_name(),
    )
}

pub(super) async fn apps(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    auth!(st, headers);
    let mut apps: Vec<(&str, Vec<&str>)> = Vec::new();
    let keys = st.streams.list();
    for (k, _) in &keys {
        let (app, stream) = k.split_once('/').unwrap_or((k, ""));
        match apps.iter_mut().find(|(a, _)| *a == app) {
            Some((_, v)) => v.push(stream),
            None => apps.push((app, vec![stream])),
        }
    }
    let body: Vec<serde_json::Value> = apps
        .iter()
        .map(|(a, s)| serde_json::json!({"name": a, "streams": s}))
        .collect();
    json(StatusCode::OK, serde_json::Value::from(body).to_string())
}

pub(super) async fn streams(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    auth!(st, headers);
    let list: Vec<String> = st
        .engine
        .stats
        .snapshots
        .streams()
        .iter()
        .map(|s| stream_json(&st, &s.key, &s.state.json))
        .collect();
    json(StatusCode::OK, format!("[{}]", list.join(",")))
}

pub(super) async fn stream(
    State(st): State<Arc<AppState>>,
    Path((app, stream)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    auth!(st, headers);
    let key = format!("{app}/{stream}");
    match st
        .engine
        .stats
        .snapshots
        .streams()
        .into_iter()
        .find(|s| *s.key == *key)
    {
        Some(s) => json(StatusCode::OK, stream_json(&st, &key, &s.state.json)),
        None => text(StatusCode::NOT_FOUND, format!("stream {key} not found")),
    }
}

pub(super) async fn stream_viewers(
    State(st): State<Arc<AppState>>,
    Path((app, stream)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    auth!(st, headers);
    let key = format!("{app}/{stream}");
    if !st.streams.contains(&key) {
        return text(StatusCode::NOT_FOUND, format!("stream {key} not found"));
    }
    let list: Vec<String> = st
        .engine
        .stats
        .snapshots
        .viewers(Some(&key))
        .iter()
        .map(|v| v.json())
        .collect();
    json(StatusCode::OK, format!("[{}]", list.join(",")))
}

pub(super) async fn viewer(
    State(st): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    auth!(st, headers);
    let snap = id
        .parse::<u64>()
        .ok()
        .and_then(|id| st.engine.stats.snapshots.viewer(id));
    match snap {
        Some(v) => json(StatusCode::OK, v.json()),
        None => text(StatusCode::NOT_FOUND, format!("viewer {id} not found")),
    }
}

pub(super) async fn kick_viewer(
    State(st): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    auth!(st, headers);
    let Some(id) = id
        .parse::<u64>()
        .ok()
        .filter(|&id| st.engine.stats.snapshots.viewer(id).is_some())
    else {
        return text(StatusCode::NOT_FOUND, format!("viewer {id} not found"));
    };
    if st
        .engine
        .send(Command::RemoveViewer(ViewerId::from_raw(id)))
        .is_err()
    {
        return text(StatusCode::SERVICE_UNAVAILABLE, "media engine stopped");
    }
    StatusCode::NO_CONTENT.into_response()
}

/// The body of `PUT /v1/viewers/{id}/layer`.
#[derive(Deserialize)]
pub(super) struct PinBody {
    rid: String,
}

/// `PUT /v1/viewers/{id}/layer` (`{"rid": "l"}`) pins a viewer to a simulcast layer;
/// `DELETE` unpins it (the bandwidth estimate chooses again). The viewer moves at the
/// layer's next keyframe. 204, 404 for an unknown viewer, 400 for a layer the stream does
/// not have.
pub(super) async fn pin_layer(
    State(st): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    auth!(st, headers);
    let Ok(PinBody { rid }) = serde_json::from_slice::<PinBody>(&body) else {
        return text(
            StatusCode::BAD_REQUEST,
            "body must be JSON {\"rid\": \"<layer RID>\"}",
        );
    };
    set_layer(&st, &id, Some(&rid))
}

/// `DELETE /v1/viewers/{id}/layer`: see [`pin_layer`].
pub(super) async fn unpin_layer(
    State(st): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    auth!(st, headers);
    set_layer(&st, &id, None)
}

fn set_layer(st: &AppState, id: &str, rid: Option<&str>) -> Response {
    let snaps = &st.engine.stats.snapshots;
    let Some((id, snap)) = id
        .parse::<u64>()
        .ok()
        .and_then(|id| snaps.viewer(id).map(|s| (id, s)))
    else {
        return text(StatusCode::NOT_FOUND, format!("viewer {id} not found"));
    };
    let pin = match rid {
        None => None,
        Some(rid) => {
            let rids = st
                .streams
                .get(&snap.stream)
                .map(|info| st.engine.stats.rids(info.index))
                .unwrap_or_else(|| Arc::new([]));
            match crate::http::reply::layer_of(&snap.stream, &rids, rid) {
                Ok(l) => Some(l),
                Err(r) => return *r,
            }
        }
    };
    let cmd = Command::SetLayer {
        id: ViewerId::from_raw(id),
        pin,
    };
    if st.engine.send(cmd).is_err() {
        return text(StatusCode::SERVICE_UNAVAILABLE, "media engine stopped");
    }
    StatusCode::NO_CONTENT.into_response()
}

/// `GET /v1/cluster`: this node, Redis' state, the registry and the origin map.
pub(super) async fn cluster(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    auth!(st, headers);
    json(StatusCode::OK, crate::http::cluster::json(&st).to_string())
}

pub(super) async fn publishers(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    auth!(st, headers);
    let list: Vec<String> = st
        .engine
        .stats
        .snapshots
        .publishers()
        .iter()
        .map(|p| p.json())
        .collect();
    json(StatusCode::OK, format!("[{}]", list.join(",")))
}

pub(super) async fn allocations(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    auth!(st, headers);
    let list: Vec<String> = st
        .engine
        .stats
        .snapshots
        .allocations()
        .iter()
        .map(|a| a.identity.json.clone())
        .collect();
    json(StatusCode::OK, format!("[{}]", list.join(",")))
}

pub(super) async fn allocation(
    State(st): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    auth!(st, headers);
    match id
        .parse::<u64>()
        .ok()
        .and_then(|id| st.engine.stats.snapshots.allocation(id))
    {
        Some(a) => json(StatusCode::OK, a.identity.json.clone()),
        None => text(StatusCode::NOT_FOUND, format!("no TURN allocation {id}")),
    }
}

pub(super) async fn stream_publisher(
    State(st): State<Arc<AppState>>,
    Path((app, stream)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    auth!(st, headers);
    let key = format!("{app}/{stream}");
    if !st.streams.contains(&key) {
        return text(StatusCode::NOT_FOUND, format!("stream {key} not found"));
    }
    match st
        .engine
        .stats
        .snapshots
        .publishers()
        .into_iter()
        .find(|p| *p.stream == *key)
    {
        Some(p) => json(StatusCode::OK, p.json()),
        None => text(
            StatusCode::NOT_FOUND,
            format!("stream {key} has no publisher"),
        ),
    }
}

pub(super) async fn kick_publisher(
    State(st): State<Arc<AppState>>,
    Path((app, stream)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    auth!(st, headers);
    let key = format!("{app}/{stream}");
    let Some(index) = st.streams.get(&key).map(|i| i.index) else {
        return text(StatusCode::NOT_FOUND, format!("stream {key} not found"));
    };
    let sid = st.publishers.lock().ok().and_then(|m| {
        m.iter()
            .find(|(_, p)| p.id.stream == index)
            .map(|(s, _)| s.clone())
    });
    let found = sid.and_then(|sid| crate::http::state::forget_publisher(&st, &sid));
    let Some(id) = found else {
        return text(
            StatusCode::NOT_FOUND,
            format!("stream {key} has no publisher"),
        );
    };
    if st.engine.send(Command::RemovePublisher(id)).is_err() {
        return text(StatusCode::SERVICE_UNAVAILABLE, "media engine stopped");
    }
    StatusCode::NO_CONTENT.into_response()
}

/// `?type=viewer.joined,viewer.left&stream=live/demo`
#[derive(Debug, Deserialize)]
pub(super) struct EventFilter {
    #[serde(rename = "type")]
    types: Option<String>,
    stream: Option<String>,
}

pub(super) async fn events(
    State(st): State<Arc<AppState>>,
    Query(f): Query<EventFilter>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    auth!(st, headers);
    let rx = st.engine.stats.snapshots.subscribe();
    ws.on_upgrade(move |sock| forward_events(sock, rx, f))
}

async fn forward_events(
    mut sock: WebSocket,
    mut rx: tokio::sync::broadcast::Receiver<crate::snapshot::Event>,
    f: EventFilter,
) {
    let types: Option<Vec<String>> = f
        .types
        .map(|t| t.split(',').map(|s| s.trim().to_string()).collect());
    loop {
        tokio::select! {
            ev = rx.recv() => {
                let line = match ev {
                    Ok(e) => {
                        if types.as_ref().is_some_and(|t| !t.iter().any(|t| t == e.kind.name())) {
                            continue;
                        }
                        if f.stream.as_deref().is_some_and(|s| s != &*e.stream) {
                            continue;
                        }
                        e.json()
                    }
                    Err(RecvError::Lagged(n)) => format!("{{\"type\":\"lagged\",\"missed\":{n}}}"),
                    Err(RecvError::Closed) => return,
                };
                if sock.send(Message::Text(line.into())).await.is_err() {
                    return;
                }
            }
            msg = sock.recv() => match msg {
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            },
        }
    }
}

pub(super) async fn metrics(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    auth!(st, headers);
    let s = &st.engine.stats;
    let mut o = String::with_capacity(4096);
    let mut gauge = |name: &str, help: &str, kind: &str, v: u64| {
        crate::http::reply::metric_line(&mut o, name, help, kind, v);
    };
    let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    gauge(
        "tern_viewers",
        "Viewer sessions held.",
        "gauge",
        s.viewers.load(Ordering::Relaxed) as u64,
    );
    gauge(
        "tern_turn_peer_refused_total",
        "TURN permissions, channels and Send indications refused by the peer policy.",
        "counter",
        l(&s.turn_peer_refused),
    );
    gauge(
        "tern_turn_rate_limited_total",
        "TURN datagrams dropped by an allocation's bandwidth cap (turn.max_bps).",
        "counter",
        l(&s.turn_rate_limited),
    );
    gauge(
        "tern_turn_quota_refusals_total",
        "TURN allocations refused by a quota (total, per user, per address).",
        "counter",
        l(&s.turn_quota_refusals),
    );
    let h = &st.hls;
    gauge(
        "tern_hls_sessions",
        "LL-HLS sessions open.",
        "gauge",
        h.session_count() as u64,
    );
    gauge(
        "tern_hls_streams_packaged",
        "Streams being packaged for LL-HLS (someone reads them).",
        "gauge",
        h.packaging_count() as u64,
    );
    for (name, help, v) in [
        (
            "tern_hls_sessions_opened_total",
            "LL-HLS sessions opened (admitted index.m3u8 requests).",
            &h.counters.sessions_opened,
        ),
        (
            "tern_hls_playlists_total",
            "LL-HLS playlists answered.",
            &h.counters.playlists,
        ),
        (
            "tern_hls_media_total",
            "LL-HLS parts, segments and init segments answered.",
            &h.counters.media,
        ),
        (
            "tern_hls_media_bytes_total",
            "Bytes of LL-HLS parts, segments and init segments answered.",
            &h.counters.media_bytes,
        ),
        (
            "tern_hls_damaged_frames_total",
            "Access units the LL-HLS packager could not rebuild from a stream's RTP (loss, a full tap queue).",
            &h.counters.damaged_frames,
        ),
        (
            "tern_hls_tap_dropped_total",
            "Ring packets not handed to the LL-HLS packager because its queue was full.",
            &s.hls_tap_dropped,
        ),
    ] {
        gauge(name, help, "counter", l(v));
    }
    gauge(
        "tern_hls_sessions_refused_total",
        "LL-HLS sessions refused by the per-address limit (hls.sessions_per_ip).",
        "counter",
        h.refused_per_ip(),
    );
    gauge(
        "tern_handshakes_in_progress",
        "DTLS handshakes in progress.",
        "gauge",
        s.handshakes.load(Ordering::Relaxed) as u64,
    );
    gauge(
        "tern_handshakes_completed_total",
        "Handshakes completed.",
        "counter",
        l(&s.handshakes_done),
    );
    gauge(
        "tern_handshakes_failed_total",
        "Handshakes failed or timed out.",
        "counter",
        l(&s.handshakes_failed),
    );
    gauge(
        "tern_packets_out_total",
        "SRTP media packets sent.",
        "counter",
        l(&s.packets_out),
    );
    gauge(
        "tern_bytes_out_total",
        "Bytes sent on the media port.",
        "counter",
        l(&s.bytes_out),
    );
    gauge(
        "tern_retransmits_total",
        "Packets retransmitted on NACK.",
        "counter",
        l(&s.retransmits),
    );
    gauge(
        "tern_keyframe_requests_total",
        "PLI/FIR received from viewers.",
        "counter",
        l(&s.keyframe_requests),
    );
    gauge(
        "tern_packets_in_total",
        "Datagrams received on the media port.",
        "counter",
        l(&s.packets_in),
    );
    gauge(
        "tern_dropped_in_total",
        "Datagrams dropped (malformed, unknown, unauthenticated).",
        "counter",
        l(&s.dropped_in),
    );
    gauge(
        "tern_send_errors_total",
        "Failed sends.",
        "counter",
        l(&s.send_errors),
    );
    gauge(
        "tern_queue_full_total",
        "Datagrams or packets dropped because a media worker's queue was full, and RTMP publishers closed because it stayed full.",
        "counter",
        l(&s.queue_full),
    );
    gauge(
        "tern_publishers",
        "Publishers (WHIP, RTMP) connected or connecting.",
        "gauge",
        s.publishers.load(Ordering::Relaxed) as u64,
    );
    gauge(
        "tern_ingest_packets_total",
        "Media packets received from publishers.",
        "counter",
        l(&s.ingest_packets),
    );
    gauge(
        "tern_probe_packets_total",
        "Padding packets sent to probe the path of viewers of simulcast streams.",
        "counter",
        l(&s.probe_packets),
    );
    gauge(
        "tern_snapshot_builds_total",
        "Snapshot segments built.",
        "counter",
        s.snapshots.builds(),
    );
    gauge(
        "tern_event_subscribers",
        "Event stream subscribers.",
        "gauge",
        s.snapshots.subscribers() as u64,
    );
    let keys = st.streams.list();
    let per_stream: [(&str, &str, &str); 7] = [
        ("tern_stream_live", "Whether the stream is live.", "gauge"),
        ("tern_stream_viewers", "Viewers of the stream.", "gauge"),
        (
            "tern_stream_packets_out_total",
            "Media packets sent to the stream's viewers.",
            "counter",
        ),
        (
            "tern_stream_bytes_out_total",
            "Media bytes sent to the stream's viewers.",
            "counter",
        ),
        (
            "tern_stream_nacks_total",
            "Sequence numbers the stream's viewers NACKed.",
            "counter",
        ),
        (
            "tern_stream_keyframe_requests_total",
            "PLI/FIR requests from the stream's viewers.",
            "counter",
        ),
        (
            "tern_stream_reported_lost_total",
            "Packets the stream's viewers reported lost in RTCP receiver reports.",
            "counter",
        ),
    ];
    let viewers = s.snapshots.viewers(None);
    for (m, (name, help, kind)) in per_stream.iter().enumerate() {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (key, i) in &keys {
            let v = match m {
                0 => u64::from(s.live.get(*i).is_some_and(|a| a.load(Ordering::Relaxed))),
                1 => viewers
                    .iter()
                    .filter(|v| &*v.stream == key.as_str())
                    .count() as u64,
                2 => s.stream_packets.get(*i).map_or(0, l),
                3 => s.stream_bytes.get(*i).map_or(0, l),
                4 => s.stream_nacks.get(*i).map_or(0, l),
                5 => s.stream_keyframe_requests.get(*i).map_or(0, l),
                _ => s.stream_reported_lost.get(*i).map_or(0, l),
            };
            let _ = writeln!(o, "{name}{{stream=\"{key}\"}} {v}");
        }
    }
    st.admission.stats.render(&mut o);
    let reports = tern_pool::MemoryRegistry::global().reports();
    for (name, help, f) in [
        (
            "tern_pool_used_bytes",
            "Bytes in use per memory pool.",
            (|r: &tern_pool::PoolReport| r.used_bytes as u64) as fn(&tern_pool::PoolReport) -> u64,
        ),
        (
            "tern_pool_allocated_bytes",
            "Bytes allocated per memory pool.",
            |r| r.allocated_bytes as u64,
        ),
        (
            "tern_pool_peak_bytes",
            "Peak bytes in use per memory pool.",
            |r| r.peak_bytes as u64,
        ),
    ] {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge");
        for r in &reports {
            let _ = writeln!(o, "{name}{{pool=\"{}\"}} {}", r.name, f(r));
        }
    }
    crate::http::cluster::metrics(&st, &mut o);
    let a = tern_pool::CountingAlloc::stats();
    let _ = writeln!(
        o,
        "# HELP tern_heap_live_bytes Heap bytes live (counting allocator).\n# TYPE tern_heap_live_bytes gauge\ntern_heap_live_bytes {}",
        a.live_bytes
    );
    let mut r = (StatusCode::OK, o).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    r
}

pub(super) async fn openapi() -> Response {
    json(StatusCode::OK, openapi_doc().to_string())
}

/// The OpenAPI 3.0 document of every route the server has.
pub fn openapi_doc() -> serde_json::Value {
    use serde_json::json;
    let p = |name: &str, what: &str| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}, "description": what});
    let ok_json = |what: &str| json!({"description": what, "content": {"application/json": {}}});
    let status = |what: &str| json!({"description": what});
    let app = p("app", "application name");
    let stream = p("stream", "stream name");
    let id = p("id", "viewer id (from the viewer snapshots)");
    // Added apart: one more path in the document's json! passes the macro's recursion limit.
    let layer_ops = json!({
                "put": {"summary": "Pin a viewer of a simulcast stream to a layer (it moves at the layer's next keyframe)", "parameters": [id], "security": [{"bearer": []}],
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "required": ["rid"], "properties": {"rid": {"type": "string", "description": "the layer's RID, as the stream snapshot's layers give it"}}}}}},
                    "responses": {"204": status("pinned"), "400": status("not {\"rid\": …}, or a layer the stream does not have (the message names its layers)"), "404": status("no such viewer"), "401": status("API token required")}},
                "delete": {"summary": "Unpin a viewer: its bandwidth estimate chooses its layer again", "parameters": [id], "security": [{"bearer": []}],
                    "responses": {"204": status("unpinned"), "404": status("no such viewer"), "401": status("API token required")}}});
    let mut doc = json!({
        "openapi": "3.0.3",
        "info": {"title": "tern", "version": env!("CARGO_PKG_VERSION"),
                 "description": "tern's management API, WHEP/WHIP endpoints, metrics and pages."},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "paths": {
            "/v1/openapi.json": {"get": {"summary": "This document", "responses": {"200": ok_json("OpenAPI document")}}},
            "/v1/apps": {"get": {"summary": "Applications and their streams", "security": [{"bearer": []}],
                "responses": {"200": ok_json("list of {name, streams}"), "401": status("API token required")}}},
            "/v1/streams": {"get": {"summary": "Every stream: cached snapshot and live counters", "security": [{"bearer": []}],
                "responses": {"200": ok_json("list of streams"), "401": status("API token required")}}},
            "/v1/streams/{app}/{stream}": {"get": {"summary": "One stream", "parameters": [app, stream], "security": [{"bearer": []}],
                "responses": {"200": ok_json("the stream"), "404": status("no such stream"), "401": status("API token required")}}},
            "/v1/streams/{app}/{stream}/viewers": {"get": {"summary": "Cached snapshots of a stream's viewers", "parameters": [app, stream], "security": [{"bearer": []}],
                "responses": {"200": ok_json("list of viewer snapshots"), "404": status("no such stream"), "401": status("API token required")}}},
            "/v1/streams/{app}/{stream}/publisher": {
                "get": {"summary": "The stream's publisher: cached snapshot", "parameters": [app, stream], "security": [{"bearer": []}],
                    "responses": {"200": ok_json("publisher snapshot"), "404": status("no such stream or no publisher"), "401": status("API token required")}},
                "delete": {"summary": "Kick the stream's publisher", "parameters": [app, stream], "security": [{"bearer": []}],
                    "responses": {"204": status("kicked"), "404": status("no such stream or no publisher"), "401": status("API token required")}}},
            "/v1/cluster": {"get": {"summary": "This cluster node, Redis' state, the node registry and the origin map", "security": [{"bearer": []}],
                "responses": {"200": ok_json("{enabled, node, redis, redirect, nodes, origins, pulling, redis_commands, view_builds}"), "401": status("API token required")}}},
            "/v1/publishers": {"get": {"summary": "Cached snapshots of every publisher (WHIP, RTMP)", "security": [{"bearer": []}],
                "responses": {"200": ok_json("list of publisher snapshots"), "401": status("API token required")}}},
            "/v1/turn/allocations": {"get": {"summary": "Cached snapshots of the built-in TURN server's allocations", "security": [{"bearer": []}],
                "responses": {"200": ok_json("list of allocation snapshots"), "401": status("API token required")}}},
            "/v1/turn/allocations/{id}": {"get": {"summary": "A TURN allocation's cached snapshot", "parameters": [p("id", "allocation id")], "security": [{"bearer": []}],
                "responses": {"200": ok_json("allocation snapshot"), "404": status("no such allocation"), "401": status("API token required")}}},
            "/v1/viewers/{id}": {
                "get": {"summary": "A viewer's cached snapshot", "parameters": [id], "security": [{"bearer": []}],
                    "responses": {"200": ok_json("viewer snapshot"), "404": status("no such viewer"), "401": status("API token required")}},
                "delete": {"summary": "Kick a viewer", "parameters": [id], "security": [{"bearer": []}],
                    "responses": {"204": status("kicked"), "404": status("no such viewer"), "401": status("API token required")}}},
            "/v1/events": {"get": {"summary": "Event stream (WebSocket): one JSON object per event, a cached snapshot plus type, stream, time",
                "parameters": [
                    {"name": "type", "in": "query", "required": false, "schema": {"type": "string"},
                     "description": "comma-separated: viewer.joined, viewer.connected, viewer.left, viewer.layer, stream.changed, publisher.joined, publisher.live, publisher.left, publisher.warning, allocation.created, allocation.closed"},
                    {"name": "stream", "in": "query", "required": false, "schema": {"type": "string"}, "description": "app/stream"}],
                "security": [{"bearer": []}],
                "responses": {"101": status("switching to WebSocket"), "400": status("not a WebSocket request"), "401": status("API token required")}}},
            "/v1/stats/current": {"get": {"summary": "Engine counters (OvenMediaEngine's envelope)", "responses": {"200": ok_json("counters")}}},
            "/v1/memory": {"get": {"summary": "Memory pools and allocator totals; ?format=dd for text",
                "responses": {"200": ok_json("pools")}}},
            "/metrics": {"get": {"summary": "Prometheus metrics", "security": [{"bearer": []}],
                "responses": {"200": {"description": "text exposition format", "content": {"text/plain": {}}}, "401": status("API token required")}}},
            "/dashboard": {"get": {"summary": "Dashboard page", "responses": {"200": {"description": "HTML", "content": {"text/html": {}}}}}},
            "/": {"get": {"summary": "Index page: the streams and their players", "responses": {"200": {"description": "HTML", "content": {"text/html": {}}}}}},
            "/{app}/{stream}": {"get": {"summary": "Player page", "parameters": [app, stream],
                "responses": {"200": {"description": "HTML", "content": {"text/html": {}}}}}},
            "/{app}/{stream}/whep": {
                "post": {"summary": "WHEP: SDP offer in, answer out", "parameters": [app, stream],
                    "requestBody": {"content": {"application/sdp": {}}},
                    "responses": {"201": {"description": "answer", "content": {"application/sdp": {}}},
                        "400": status("malformed offer"), "401": status("token"), "404": status("no such stream"),
                        "409": status("not live"), "415": status("not application/sdp"),
                        "307": status("cluster.redirect: served by the least-loaded node (Location)"),
                        "422": status("offer cannot be served"), "503": status("too many viewers, or a cluster pull failed")}},
                "head": {"summary": "Liveness probe", "parameters": [app, stream],
                    "responses": {"200": status("live"), "404": status("no such stream"), "409": status("not live")}},
                "options": {"summary": "CORS preflight", "parameters": [app, stream], "responses": {"204": status("allowed")}}},
            "/{app}/{stream}/whep/{session}": {
                "patch": {"summary": "Trickle ICE or ICE restart", "parameters": [app, stream, p("session", "session id")],
                    "responses": {"204": status("trickled"), "200": status("ICE restarted"), "404": status("no such session"),
                        "400": status("malformed sdpfrag"), "415": status("not application/trickle-ice-sdpfrag"),
                        "412": status("ETag mismatch"), "428": status("If-Match required")}},
                "delete": {"summary": "End a viewer", "parameters": [app, stream, p("session", "session id")],
                    "responses": {"200": status("ended"), "404": status("no such session")}},
                "options": {"summary": "CORS preflight", "parameters": [app, stream, p("session", "session id")], "responses": {"204": status("allowed")}}},
            "/{app}/{stream}/{file}": {"get": {"summary": "LL-HLS: index.m3u8 (admission, then the multivariant playlist naming the session's media playlist), media.m3u8 (blocking reload with _HLS_msn/_HLS_part), init{v}.mp4, {msn}.m4s (segment), {msn}.{part}.m4s (part); every URI after index.m3u8 carries ?session=",
                "parameters": [app, stream, p("file", "index.m3u8, media.m3u8, init{v}.mp4, {msn}.m4s or {msn}.{part}.m4s"),
                    {"name": "session", "in": "query", "required": false, "schema": {"type": "string"}, "description": "the session token (all but index.m3u8)"},
                    {"name": "_HLS_msn", "in": "query", "required": false, "schema": {"type": "integer"}, "description": "media.m3u8: block until this segment (or its part) exists"},
                    {"name": "_HLS_part", "in": "query", "required": false, "schema": {"type": "integer"}, "description": "media.m3u8: the part of _HLS_msn to wait for"}],
                "responses": {"200": {"description": "playlist or fMP4", "content": {"application/vnd.apple.mpegurl": {}, "video/mp4": {}}},
                    "400": status("_HLS_msn too far ahead or malformed"), "401": status("token"), "403": status("no, unknown or expired session"),
                    "404": status("no such stream or resource"), "409": status("not live, or not H264"), "429": status("too many sessions from this address"),
                    "503": status("not ready yet, or too many sessions")}}},
            "/{app}/{stream}/whip": {
                "post": {"summary": "WHIP: publish", "parameters": [app, stream],
                    "requestBody": {"content": {"application/sdp": {}}},
                    "responses": {"201": {"description": "answer", "content": {"application/sdp": {}}},
                        "400": status("malformed offer"), "401": status("token"), "404": status("no such stream"),
                        "409": status("already published"), "415": status("not application/sdp"), "422": status("no H264/Opus")}},
                "options": {"summary": "CORS preflight", "parameters": [app, stream], "responses": {"204": status("allowed")}}},
            "/{app}/{stream}/whip/{session}": {
                "delete": {"summary": "Stop publishing", "parameters": [app, stream, p("session", "session id")],
                    "responses": {"200": status("ended"), "404": status("no such session")}},
                "patch": {"summary": "Trickle ICE or ICE restart", "parameters": [app, stream, p("session", "session id")],
                    "responses": {"204": status("trickled"), "200": status("ICE restarted"), "404": status("no such session"),
                        "400": status("malformed sdpfrag"), "415": status("not application/trickle-ice-sdpfrag"),
                        "412": status("ETag mismatch"), "428": status("If-Match required"), "422": status("restart refused")}},
                "options": {"summary": "CORS preflight", "parameters": [app, stream, p("session", "session id")], "responses": {"204": status("allowed")}}}
        }
    });
    doc["paths"]["/v1/viewers/{id}/layer"] = layer_ops;
    doc
}

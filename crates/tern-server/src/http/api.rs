//! The management API under `/v1` (REST and the event stream). Prometheus `/metrics` is
//! `metrics.rs`, the OpenAPI document `openapi.rs`.
//!
//! Reads return cached snapshots ([`crate::snapshot`]) and live counters; nothing is built
//! on a read. When `server.api_token` is configured, these routes require it as a Bearer
//! token: one layer checks it for all of them (`router.rs`, [`super::extract`]); the
//! WHEP/WHIP routes use the apps' own tokens.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;

use crate::http::error::HttpError;
use crate::http::extract::{StreamPath, layer_of};
use crate::http::reply::json;
use crate::http::state::AppState;
use crate::media::{Command, ViewerId};

/// The engine is gone (shutting down).
/// A stream's snapshot with its live counters.
fn stream_json(st: &AppState, key: &str, snapshot: &str) -> String {
    let s = &st.engine.stats;
    let idx = st.streams.get(key).map(|i| i.index);
    let read = |f: fn(&crate::media::StreamCounters) -> &std::sync::atomic::AtomicU64| {
        idx.and_then(|i| s.stream(i))
            .map_or(0, |c| f(c).load(Ordering::Relaxed))
    };
    let viewers = s.snapshots.viewers(Some(key)).len();
    // The video as viewers are answered: its codec and (H264) the SPS's profile-level-id.
    let video = idx.map_or(Default::default(), |i| s.video(i));
    let profile = video.h264_profile.map_or("null".to_string(), |[a, b, c]| {
        format!("\"{a:02x}{b:02x}{c:02x}\"")
    });
    // A camera source's state and last error (never its credentials).
    let source = s
        .snapshots
        .source(key)
        .map_or_else(|| "null".to_string(), |x| x.json.clone());
    format!(
        "{{\"snapshot\":{snapshot},\"source\":{source},\"viewers\":{viewers},\"packets_out\":{},\"bytes_out\":{},\"video\":{{\"codec\":\"{}\",\"profile_level_id\":{profile}}}}}",
        read(|c| &c.packets),
        read(|c| &c.bytes),
        video.codec.sdp_name(),
    )
}

pub(super) async fn apps(State(st): State<Arc<AppState>>) -> Result<Response, HttpError> {
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
    Ok(json(
        StatusCode::OK,
        serde_json::Value::from(body).to_string(),
    ))
}

pub(super) async fn streams(State(st): State<Arc<AppState>>) -> Result<Response, HttpError> {
    let list: Vec<String> = st
        .engine
        .stats
        .snapshots
        .streams()
        .iter()
        .map(|s| stream_json(&st, &s.key, &s.state.json))
        .collect();
    Ok(json(StatusCode::OK, format!("[{}]", list.join(","))))
}

pub(super) async fn stream(
    State(st): State<Arc<AppState>>,
    path: StreamPath,
) -> Result<Response, HttpError> {
    let key = path.key();
    // The directory first: a removal (`DELETE /v1/config/apps/…`) takes the stream out of it
    // before it answers, while the engine drops the cached snapshot a moment later.
    if !st.streams.contains(&key) {
        return Err(HttpError::NotFound(format!("stream {key} not found")));
    }
    match st
        .engine
        .stats
        .snapshots
        .streams()
        .into_iter()
        .find(|s| *s.key == *key)
    {
        Some(s) => Ok(json(StatusCode::OK, stream_json(&st, &key, &s.state.json))),
        None => Err(HttpError::NotFound(format!("stream {key} not found"))),
    }
}

pub(super) async fn stream_viewers(
    State(st): State<Arc<AppState>>,
    path: StreamPath,
) -> Result<Response, HttpError> {
    let key = path.key();
    if !st.streams.contains(&key) {
        return Err(HttpError::NotFound(format!("stream {key} not found")));
    }
    let list: Vec<String> = st
        .engine
        .stats
        .snapshots
        .viewers(Some(&key))
        .iter()
        .map(|v| v.json())
        .collect();
    Ok(json(StatusCode::OK, format!("[{}]", list.join(","))))
}

pub(super) async fn viewer(
    State(st): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Response, HttpError> {
    let snap = id
        .parse::<u64>()
        .ok()
        .and_then(|id| st.engine.stats.snapshots.viewer(id));
    let Some(v) = snap else {
        return Err(HttpError::NotFound(format!("viewer {id} not found")));
    };
    // The snapshot, and the figures that change with every packet, read live from the
    // viewer's worker (never copied into the snapshot).
    // What its stream plays now: a publisher's media (or a clip's), or its slate.
    let slate = st
        .streams
        .get(&v.stream)
        .and_then(|i| st.engine.stats.stream(i.index))
        .is_some_and(|c| c.slate.load(std::sync::atomic::Ordering::Relaxed));
    let feed = if slate { "slate" } else { "live" };
    let live = match st.engine.viewer_live(ViewerId::from_raw(v.id)).await {
        Ok(Some(l)) => live_json(&l, feed),
        Ok(None) => "null".to_owned(),
        Err(_) => return Err(HttpError::engine_stopped()),
    };
    let mut body = v.json();
    body.pop();
    body.push_str(&format!(",\"live\":{live}}}"));
    Ok(json(StatusCode::OK, body))
}

/// A viewer's live figures as the API shows them (see docs/src/http-api.md), with what
/// its stream plays (`feed`: `live` or `slate`).
fn live_json(l: &tern_rtc::viewer::ViewerLive, feed: &str) -> String {
    serde_json::json!({
        "feed": feed,
        "estimate_bps": l.estimate_bps,
        "rtt_ms": l.rtt_ms,
        "loss": l.loss,
        "nacks": l.nacks,
        "retransmits": l.retransmits,
        "bytes_sent": l.bytes_sent,
        "retransmitted_bytes": l.retransmitted_bytes,
        "nacks_ignored": l.nacks_ignored,
        "twcc_parsed": l.twcc_parsed,
        "twcc_dropped": l.twcc_dropped,
        "layer": l.layer,
        "video_paused": l.video_paused,
    })
    .to_string()
}

pub(super) async fn kick_viewer(
    State(st): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Response, HttpError> {
    let Some(id) = id
        .parse::<u64>()
        .ok()
        .filter(|&id| st.engine.stats.snapshots.viewer(id).is_some())
    else {
        return Err(HttpError::NotFound(format!("viewer {id} not found")));
    };
    if st
        .engine
        .send(Command::RemoveViewer(ViewerId::from_raw(id)))
        .is_err()
    {
        return Err(HttpError::engine_stopped());
    }
    Ok(StatusCode::NO_CONTENT.into_response())
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
    body: axum::body::Bytes,
) -> Result<Response, HttpError> {
    let Ok(PinBody { rid }) = serde_json::from_slice::<PinBody>(&body) else {
        return Err(HttpError::BadRequest(
            "body must be JSON {\"rid\": \"<layer RID>\"}".into(),
        ));
    };
    set_layer(&st, &id, Some(&rid))
}

/// `DELETE /v1/viewers/{id}/layer`: see [`pin_layer`].
pub(super) async fn unpin_layer(
    State(st): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Response, HttpError> {
    set_layer(&st, &id, None)
}

fn set_layer(st: &AppState, id: &str, rid: Option<&str>) -> Result<Response, HttpError> {
    let snaps = &st.engine.stats.snapshots;
    let Some((id, snap)) = id
        .parse::<u64>()
        .ok()
        .and_then(|id| snaps.viewer(id).map(|s| (id, s)))
    else {
        return Err(HttpError::NotFound(format!("viewer {id} not found")));
    };
    let pin = match rid {
        None => None,
        Some(rid) => {
            let rids = st
                .streams
                .get(&snap.stream)
                .map(|info| st.engine.stats.rids(info.index))
                .unwrap_or_else(|| Arc::new([]));
            Some(layer_of(&snap.stream, &rids, rid)?)
        }
    };
    let cmd = Command::SetLayer {
        id: ViewerId::from_raw(id),
        pin,
    };
    if st.engine.send(cmd).is_err() {
        return Err(HttpError::engine_stopped());
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Any other path under `/v1/`: `404` with a JSON error (not the player page that
/// `/{app}/{stream}` would serve).
pub(super) async fn unknown(uri: axum::http::Uri) -> Response {
    json(
        StatusCode::NOT_FOUND,
        serde_json::json!({"error": format!("no API route {}", uri.path())}).to_string(),
    )
}

/// The body of `POST /v1/drain`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DrainBody {
    /// Seconds open sessions get before the process exits.
    deadline_s: Option<u64>,
    /// `true`: stop draining.
    #[serde(default)]
    cancel: bool,
}

/// The node's state as `/v1/drain` and `/v1/health` say it: whether it drains, and
/// `{"status": "ok"|"draining", "sessions": N}` with `"deadline_s"` (the time left) while it
/// drains.
pub(super) fn drain_state(st: &AppState) -> (bool, String) {
    let sessions = st.sessions();
    let v = match st.drain.left() {
        Some(left) => serde_json::json!({
            "status": "draining",
            "deadline_s": left.as_secs(),
            "sessions": sessions,
        }),
        None => serde_json::json!({"status": "ok", "sessions": sessions}),
    };
    (v["status"] == "draining", v.to_string())
}

/// `POST /v1/drain` `{"deadline_s": N}`: drain the node for an upgrade ([`crate::drain`]):
/// `202` with the state; a second call moves the deadline. `{"cancel": true}` takes the node
/// back: `200`. `400` for any other body.
pub(super) async fn drain(
    State(st): State<Arc<AppState>>,
    body: axum::body::Bytes,
) -> Result<Response, HttpError> {
    let max = crate::config::MAX_DRAIN_S;
    let rule = format!(
        "body must be JSON {{\"deadline_s\": N}} (0 to {max} seconds) or {{\"cancel\": true}}"
    );
    let b = serde_json::from_slice::<DrainBody>(&body)
        .map_err(|e| HttpError::BadRequest(format!("{rule}: {e}")))?;
    match (b.cancel, b.deadline_s) {
        (true, None) => {
            st.drain.cancel();
            Ok(json(StatusCode::OK, drain_state(&st).1))
        }
        (false, Some(n)) if n <= max => {
            st.drain
                .start(std::time::Duration::from_secs(n), st.sessions());
            Ok(json(StatusCode::ACCEPTED, drain_state(&st).1))
        }
        _ => Err(HttpError::BadRequest(rule)),
    }
}

/// `GET /v1/cluster`: this node, Redis' state, the registry and the origin map.
pub(super) async fn cluster(State(st): State<Arc<AppState>>) -> Result<Response, HttpError> {
    Ok(json(
        StatusCode::OK,
        crate::http::cluster::json(&st).to_string(),
    ))
}

pub(super) async fn publishers(State(st): State<Arc<AppState>>) -> Result<Response, HttpError> {
    let list: Vec<String> = st
        .engine
        .stats
        .snapshots
        .publishers()
        .iter()
        .map(|p| p.json())
        .collect();
    Ok(json(StatusCode::OK, format!("[{}]", list.join(","))))
}

pub(super) async fn allocations(State(st): State<Arc<AppState>>) -> Result<Response, HttpError> {
    let list: Vec<String> = st
        .engine
        .stats
        .snapshots
        .allocations()
        .iter()
        .map(|a| a.identity.json.clone())
        .collect();
    Ok(json(StatusCode::OK, format!("[{}]", list.join(","))))
}

pub(super) async fn allocation(
    State(st): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Response, HttpError> {
    match id
        .parse::<u64>()
        .ok()
        .and_then(|id| st.engine.stats.snapshots.allocation(id))
    {
        Some(a) => Ok(json(StatusCode::OK, a.identity.json.clone())),
        None => Err(HttpError::NotFound(format!("no TURN allocation {id}"))),
    }
}

pub(super) async fn stream_publisher(
    State(st): State<Arc<AppState>>,
    path: StreamPath,
) -> Result<Response, HttpError> {
    let key = path.key();
    if !st.streams.contains(&key) {
        return Err(HttpError::NotFound(format!("stream {key} not found")));
    }
    match st
        .engine
        .stats
        .snapshots
        .publishers()
        .into_iter()
        .find(|p| *p.stream == *key)
    {
        Some(p) => Ok(json(StatusCode::OK, p.json())),
        None => Err(HttpError::NotFound(format!(
            "stream {key} has no publisher"
        ))),
    }
}

pub(super) async fn kick_publisher(
    State(st): State<Arc<AppState>>,
    path: StreamPath,
) -> Result<Response, HttpError> {
    let key = path.key();
    let Some(index) = st.streams.get(&key).map(|i| i.index) else {
        return Err(HttpError::NotFound(format!("stream {key} not found")));
    };
    let Some(id) = st.forget_publisher_of(index) else {
        return Err(HttpError::NotFound(format!(
            "stream {key} has no publisher"
        )));
    };
    if st.engine.send(Command::RemovePublisher(id)).is_err() {
        return Err(HttpError::engine_stopped());
    }
    Ok(StatusCode::NO_CONTENT.into_response())
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
    ws: WebSocketUpgrade,
) -> Result<Response, HttpError> {
    let rx = st.engine.stats.snapshots.subscribe();
    Ok(ws.on_upgrade(move |sock| forward_events(sock, rx, f)))
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

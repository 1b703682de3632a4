//! The pages: the stream directory (`GET /`, and `GET /?format=json`, the figures it reads),
//! the player (`GET /{app}/{stream}`, which also takes the OvenMediaEngine signalling
//! upgrade), the dashboard, and the hls.js the player falls back on (`GET
//! /assets/hls.min.js`, built in).
//!
//! The pages are static HTML with their script inline (no other host, no build step); what
//! the server puts into them goes through [`html_escape`], and their scripts write names
//! (publishers choose them) with `textContent` only.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

use crate::clock::unix_ms;
use crate::http::listener::Peer;
use crate::http::ome;
use crate::http::reply::{json, query_param};
use crate::http::state::AppState;

const INDEX_HTML: &str = include_str!("index.html");

/// `GET /`: the stream directory, a card per live stream (its thumbnail, viewers, codec,
/// resolution, bitrate), which the page refreshes every 5 s from `GET /?format=json`
/// ([`directory`]). Without JavaScript, a list of links.
pub(super) async fn index(State(st): State<Arc<AppState>>, RawQuery(query): RawQuery) -> Response {
    if query
        .as_deref()
        .and_then(|q| query_param(q, "format"))
        .is_some_and(|f| f == "json")
    {
        return directory(&st);
    }
    let items: String = live_streams(&st)
        .iter()
        .map(|(k, _)| {
            let k = html_escape(k);
            format!("<li><a href=\"/{k}\">{k}</a></li>")
        })
        .collect();
    let list = if items.is_empty() {
        "<p>No live streams.</p>".to_string()
    } else {
        format!("<ul>{items}</ul>")
    };
    Html(INDEX_HTML.replace("{{NOSCRIPT}}", &list)).into_response()
}

/// The live streams, (key, engine index), sorted by key.
fn live_streams(st: &AppState) -> Vec<(String, usize)> {
    st.streams
        .list()
        .into_iter()
        .filter(|(_, i)| {
            st.engine
                .stats
                .stream(*i)
                .is_some_and(|c| c.live.load(Ordering::Relaxed))
        })
        .collect()
}

/// `GET /?format=json`: what the directory shows, outside the API token (as the names on
/// the front page always were): `now_ms` (the server's clock, for rates between two reads)
/// and, per live stream, its name, source, simulcast layers, when it went live, its WebRTC
/// viewers, the bytes and packets sent to them, and its video codec (with the H264
/// profile-level-id). Nothing about viewers beyond their count. Read from the engine's
/// counters and the cached snapshots; no snapshot is built.
fn directory(st: &AppState) -> Response {
    let s = &st.engine.stats;
    let mut viewers: HashMap<Arc<str>, u64> = HashMap::new();
    for v in s.snapshots.viewers(None) {
        *viewers.entry(v.stream).or_default() += 1;
    }
    // From each live stream's snapshot: its source and when it went live (its last change).
    let mut state: HashMap<Arc<str>, serde_json::Value> = HashMap::new();
    for snap in s.snapshots.streams() {
        let v: serde_json::Value = serde_json::from_str(&snap.state.json).unwrap_or_default();
        if v["live"] == true {
            state.insert(snap.key, v);
        }
    }
    let streams: Vec<serde_json::Value> = live_streams(st)
        .into_iter()
        .filter_map(|(key, i)| {
            let c = s.stream(i)?;
            let video = s.video(i);
            let (app, name) = key.split_once('/').unwrap_or((&key, ""));
            let rids: Vec<String> = s.rids(i).iter().map(|r| r.to_string()).collect();
            let snap = state.get(key.as_str());
            Some(serde_json::json!({
                "key": key,
                "app": app,
                "stream": name,
                "source": snap.map(|v| v["source"].clone()),
                "layers": rids,
                "live_since_ms": snap.map(|v| v["changed_ms"].clone()),
                "viewers": viewers.get(key.as_str()).copied().unwrap_or(0),
                "bytes_out": c.bytes.load(Ordering::Relaxed),
                "packets_out": c.packets.load(Ordering::Relaxed),
                "codec": video.codec.sdp_name(),
                "profile_level_id": video
                    .h264_profile
                    .map(|[a, b, c]| format!("{a:02x}{b:02x}{c:02x}")),
            }))
        })
        .collect();
    let mut r = json(
        StatusCode::OK,
        serde_json::json!({"now_ms": unix_ms(), "streams": streams}).to_string(),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// `GET /{app}/{stream}`: the player page, or, with `Upgrade: websocket`, the
/// OvenMediaEngine-compatible signalling socket (see [`crate::http::ome`]).
pub(super) async fn player(
    State(st): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path((app, stream)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    ws: Result<
        axum::extract::ws::WebSocketUpgrade,
        axum::extract::ws::rejection::WebSocketUpgradeRejection,
    >,
) -> Response {
    if let Ok(ws) = ws {
        return ome::upgrade(st, ws, peer, app, stream, query, &headers);
    }
    let hls = &st.config().hls;
    let script = if hls.enabled {
        html_escape(&hls.player_script)
    } else {
        String::new()
    };
    // The stream's simulcast layers, for the page's layer choice (none before it is live).
    let layers: Vec<String> = st
        .streams
        .get(&format!("{app}/{stream}"))
        .map(|i| {
            st.engine
                .stats
                .rids(i.index)
                .iter()
                .map(|r| r.to_string())
                .collect()
        })
        .unwrap_or_default();
    let layers = serde_json::to_string(&layers).unwrap_or_else(|_| "[]".into());
    let page = PLAYER_HTML
        .replace("{{APP}}", &html_escape(&app))
        .replace("{{STREAM}}", &html_escape(&stream))
        .replace("{{HLS_JS}}", &script)
        .replace("{{LAYERS}}", &html_escape(&layers));
    Html(page).into_response()
}

/// `s` safe in HTML text and in a quoted attribute value.
fn html_escape(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '<' => "&lt;".into(),
            '>' => "&gt;".into(),
            '&' => "&amp;".into(),
            '"' => "&quot;".into(),
            '\'' => "&#39;".into(),
            c => c.to_string(),
        })
        .collect()
}

const PLAYER_HTML: &str = include_str!("player.html");

const DASHBOARD_HTML: &str = include_str!("dashboard.html");

/// `GET /dashboard`: viewers, egress, streams, memory pools and a live chart, read from
/// the API by the page itself.
pub(super) async fn dashboard() -> Html<&'static str> {
    Html(DASHBOARD_HTML)
}

/// The hls.js built into the binary (`assets/hls.js/`, as published on npm; see its
/// README for the version pin and `scripts/update-hls-js.sh`). Built in so that the player's
/// LL-HLS fallback needs nothing beyond tern: no CDN, no other host.
const HLS_JS: &[u8] = include_bytes!("../../assets/hls.js/hls.min.js");

/// The built-in hls.js's version, which is also its entity tag.
const HLS_JS_VERSION: &str = "1.7.4";

/// `GET /assets/hls.min.js`: the built-in hls.js, cached by browsers for a week and
/// revalidated by its version (`ETag`), so an upgraded tern's copy is picked up.
pub(super) async fn hls_js(headers: HeaderMap) -> Response {
    let etag = format!("\"hls.js-{HLS_JS_VERSION}\"");
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut reply = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
            HLS_JS,
        )
            .into_response()
    };
    let h = reply.headers_mut();
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=604800"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    reply
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_escaped_as_html_text_and_attributes() {
        assert_eq!(
            html_escape(r#"<img src=x onerror="a('b')">&"#),
            "&lt;img src=x onerror=&quot;a(&#39;b&#39;)&quot;&gt;&amp;"
        );
        assert_eq!(html_escape("live/cam-1"), "live/cam-1");
    }

    #[test]
    fn pages_have_their_placeholders() {
        assert!(INDEX_HTML.contains("<noscript>{{NOSCRIPT}}</noscript>"));
        for p in ["{{APP}}", "{{STREAM}}", "{{HLS_JS}}", "{{LAYERS}}"] {
            assert!(PLAYER_HTML.contains(p), "{p}");
        }
        // What the server fills in goes into text or quoted attributes, never into script.
        let script = &PLAYER_HTML[PLAYER_HTML.find("<script>").unwrap_or(0)..];
        assert!(
            !script.contains("{{"),
            "a placeholder inside the player's script"
        );
        let script = &INDEX_HTML[INDEX_HTML.find("<script>").unwrap_or(0)..];
        assert!(
            !script.contains("{{"),
            "a placeholder inside the index's script"
        );
        assert!(!script.contains("innerHTML"));
    }
}

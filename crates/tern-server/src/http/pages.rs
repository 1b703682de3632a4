//! The pages: the index of live streams, the player (`GET /{app}/{stream}`, which also
//! takes the OvenMediaEngine signalling upgrade), the dashboard, and the hls.js the player
//! falls back on (`GET /assets/hls.min.js`, built in).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

use crate::http::listener::Peer;
use crate::http::ome;
use crate::http::state::AppState;

/// `GET /`: the live streams, each a link to its player.
pub(super) async fn index(State(st): State<Arc<AppState>>) -> Html<String> {
    let live: Vec<String> = st
        .streams
        .list()
        .into_iter()
        .filter(|(_, i)| {
            st.engine
                .stats
                .stream(*i)
                .is_some_and(|c| c.live.load(Ordering::Relaxed))
        })
        .map(|(k, _)| k)
        .collect();
    let items: String = live
        .iter()
        .map(|k| format!("<li><a href=\"/{k}\">{k}</a></li>"))
        .collect();
    let list = if items.is_empty() {
        "<p>No live streams.</p>".to_string()
    } else {
        format!("<ul>{items}</ul>")
    };
    Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>tern</title></head>\
         <body><h1>tern: live streams</h1>{list}</body></html>"
    ))
}

/// `GET /{app}/{stream}`: the player page, or, with `Upgrade: websocket`, the
/// OvenMediaEngine-compatible signalling socket (see [`crate::http::ome`]).
pub(super) async fn player(
    State(st): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path((app, stream)): Path<(String, String)>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    headers: HeaderMap,
    ws: Result<
        axum::extract::ws::WebSocketUpgrade,
        axum::extract::ws::rejection::WebSocketUpgradeRejection,
    >,
) -> Response {
    if let Ok(ws) = ws {
        return ome::upgrade(st, ws, peer, app, stream, query, &headers);
    }
    let hls = &st.config.hls;
    let script = if hls.enabled {
        html_escape(&hls.player_script)
    } else {
        String::new()
    };
    let page = PLAYER_HTML
        .replace("{{APP}}", &html_escape(&app))
        .replace("{{STREAM}}", &html_escape(&stream))
        .replace("{{HLS_JS}}", &script);
    Html(page).into_response()
}

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

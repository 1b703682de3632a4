//! `GET /{app}/{stream}/thumb.jpg[?width=W]`: the stream's latest keyframe as a JPEG
//! ([`crate::thumbs`]). The play admission applies (the app's token, JWT, and the webhook
//! with action `thumbnail`); `404` when the stream is not live, `304` for an `If-None-Match`
//! naming the current picture, `503` with `Retry-After` when no keyframe came in time.

use std::sync::Arc;

use axum::extract::{ConnectInfo, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::http::error::HttpError;
use crate::http::extract::{StreamPath, credentials};
use crate::http::listener::Peer;
use crate::http::reply::{cors, query_param};
use crate::http::state::AppState;
use crate::session::{PlayAsk, Protocol, Refusal};
use crate::thumbs::ThumbError;

/// The handler.
pub(super) async fn get(
    State(st): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    path: StreamPath,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    let q = query.clone().unwrap_or_default();
    let width = match query_param(&q, "width") {
        None => None,
        Some(w) => Some(w.parse::<u32>().ok().filter(|w| *w > 0).ok_or_else(|| {
            HttpError::BadRequest(format!("width={w:?}: a positive whole number of pixels"))
        })?),
    };
    let play = st
        .begin_play(PlayAsk {
            app: path.app.clone(),
            stream: path.stream.clone(),
            protocol: Protocol::Http,
            client: peer.0,
            credentials: credentials(&headers, query),
            session: None,
            from_node: false,
        })
        .await?;
    let index = play.info().index;
    play.admit_thumbnail(&st).await.map_err(|r| match r {
        // Not live: there is no picture (404, not LL-HLS's "retry" 409).
        Refusal::NotLive(key) => HttpError::NotFound(format!("stream {key} is not live")),
        r => r.into(),
    })?;
    let t = st.thumbs.get(index, width).await.map_err(|e| match e {
        ThumbError::NoKeyframe(_) => HttpError::Unavailable(e.to_string(), Some("1")),
        ThumbError::Codec(why) => HttpError::Unprocessable(format!("stream {}: {why}", path.key())),
    })?;
    let etag = format!("\"{}-{}\"", t.serial, t.width);
    let cache = format!("max-age={}", t.gop_s.unwrap_or(1));
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|e| e.trim() == etag));
    let mut r = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (StatusCode::OK, t.jpeg).into_response()
    };
    let h = r.headers_mut();
    if !fresh {
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("image/jpeg"));
    }
    for (k, v) in [(header::ETAG, etag), (header::CACHE_CONTROL, cache)] {
        if let Ok(v) = HeaderValue::from_str(&v) {
            h.insert(k, v);
        }
    }
    cors(h);
    Ok(r)
}

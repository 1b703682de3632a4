//! The forwards API (`crate::forward`), behind the API's token like the rest of `/v1`:
//!
//! - `POST /v1/streams/{app}/{stream}/forwards` `{"url": "...", "tls_verify": true}`: sends
//!   the stream on (201 `{"id", "url", "state"}`, `Location`); 404 no such stream, 409 not
//!   live, 422 a URL no forward takes (the message says why), 503 at the server's limit.
//! - `GET /v1/forwards?app=&stream=`: every forward with `state` (`connecting`, `live`,
//!   `retrying`, `failed`), `since` (Unix ms), `bytes`, `reconnects`, `last_error`.
//! - `DELETE /v1/streams/{app}/{stream}/forwards/{id}`: stops it (204), 404 when none.
//!
//! URLs are shown with their stream keys and passphrases as `***`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::forward::AddError;
use crate::http::error::HttpError;
use crate::http::extract::StreamPath;
use crate::http::recordings::ListFilter;
use crate::http::reply::json;
use crate::http::state::AppState;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AddBody {
    url: String,
    #[serde(default = "yes")]
    tls_verify: bool,
}

const fn yes() -> bool {
    true
}

pub(super) async fn add(
    State(st): State<Arc<AppState>>,
    path: StreamPath,
    body: Bytes,
) -> Result<Response, HttpError> {
    let key = path.key();
    let Some(info) = st.streams.get(&key) else {
        return Err(HttpError::NotFound(format!("stream {key} not found")));
    };
    let req: AddBody = serde_json::from_slice(&body).map_err(|e| {
        HttpError::BadRequest(format!(
            "expected {{\"url\": \"rtmp://...\", \"tls_verify\": true}}: {e}"
        ))
    })?;
    if !st.is_live(info) {
        return Err(HttpError::Conflict(
            AddError::NotLive(key.clone()).to_string(),
        ));
    }
    let entry = match st.forwards.add(&key, info.index, &req.url, req.tls_verify) {
        Ok(e) => e,
        Err(e @ AddError::Url(_)) => return Err(HttpError::Unprocessable(e.to_string())),
        Err(e @ AddError::NotLive(_)) => return Err(HttpError::Conflict(e.to_string())),
        Err(e @ (AddError::Full | AddError::Thread(_))) => {
            return Err(HttpError::Unavailable(e.to_string(), None));
        }
    };
    let body = entry.json();
    let location = format!("/v1/streams/{key}/forwards/{}", entry.id);
    let mut r = json(
        StatusCode::CREATED,
        serde_json::json!({"id": body["id"], "url": body["url"], "state": body["state"]})
            .to_string(),
    );
    if let Ok(v) = HeaderValue::from_str(&location) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    Ok(r)
}

pub(super) async fn remove(
    State(st): State<Arc<AppState>>,
    Path((app, stream, id)): Path<(String, String, String)>,
) -> Result<Response, HttpError> {
    let key = format!("{app}/{stream}");
    let fw = st.forwards.clone();
    let k = key.clone();
    // Stopping joins the forward's thread.
    let removed = tokio::task::spawn_blocking(move || fw.remove(&k, &id, "deleted by the API"))
        .await
        .unwrap_or(false);
    if !removed {
        return Err(HttpError::NotFound(format!(
            "no such forward of stream {key}"
        )));
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub(super) async fn list(
    State(st): State<Arc<AppState>>,
    Query(f): Query<ListFilter>,
) -> Result<Response, HttpError> {
    let list = st.forwards.list(f.app.as_deref(), f.stream.as_deref());
    Ok(json(
        StatusCode::OK,
        serde_json::Value::Array(list).to_string(),
    ))
}

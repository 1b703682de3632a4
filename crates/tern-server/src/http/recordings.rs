//! The recordings API (`crate::record`), behind the API's token like the rest of `/v1`:
//!
//! - `POST /v1/streams/{app}/{stream}/recordings` `{"id": "..."}`: starts one (201,
//!   `Location`); 404 no such stream, 409 not live or the id runs already, 400 a bad id.
//! - `DELETE /v1/streams/{app}/{stream}/recordings/{id}`: stops it (204; its file is
//!   finished), 404 when it does not run.
//! - `GET /v1/recordings?app=&stream=`: the files on disk (path, app, stream, start,
//!   duration_s, bytes, codecs, and the URL below).
//! - `GET /v1/recordings/{app}/{stream}/{file}`: one file, with single-range `Range`
//!   support (206, 416), so that `<video>` and VLC seek in it.

use std::io::{Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::config::valid_name;
use crate::http::error::HttpError;
use crate::http::extract::StreamPath;
use crate::http::reply::json;
use crate::http::state::AppState;
use crate::record::StartError;
use crate::record::files::{FileEntry, app_files, find};

/// Bytes read from a file per chunk of a response body.
const CHUNK: usize = 256 << 10;

#[derive(Debug, Deserialize)]
pub(super) struct StartBody {
    id: String,
}

pub(super) async fn start(
    State(st): State<Arc<AppState>>,
    path: StreamPath,
    body: Bytes,
) -> Result<Response, HttpError> {
    let key = path.key();
    let Some(info) = st.streams.get(&key) else {
        return Err(HttpError::NotFound(format!("stream {key} not found")));
    };
    let req: StartBody = serde_json::from_slice(&body)
        .map_err(|e| HttpError::BadRequest(format!("expected {{\"id\": \"...\"}}: {e}")))?;
    if !valid_name(&req.id) {
        return Err(HttpError::BadRequest(format!(
            "recording id {}",
            crate::config::NAME_RULE
        )));
    }
    if !st.is_live(info) {
        return Err(HttpError::Conflict(format!("stream {key} is not live")));
    }
    match st.record.start(info.index, &key, &req.id, false) {
        Ok(()) => {}
        Err(e @ (StartError::Exists(_) | StartError::Codec(_))) => {
            return Err(HttpError::Conflict(e.to_string()));
        }
        Err(StartError::Stopped) => return Err(HttpError::engine_stopped()),
    }
    let location = format!("/v1/streams/{key}/recordings/{}", req.id);
    let mut r = json(
        StatusCode::CREATED,
        serde_json::json!({"id": req.id, "app": path.app, "stream": path.stream}).to_string(),
    );
    if let Ok(v) = HeaderValue::from_str(&location) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    Ok(r)
}

pub(super) async fn stop(
    State(st): State<Arc<AppState>>,
    Path((app, stream, id)): Path<(String, String, String)>,
) -> Result<Response, HttpError> {
    let key = format!("{app}/{stream}");
    let Some(info) = st.streams.get(&key) else {
        return Err(HttpError::NotFound(format!("stream {key} not found")));
    };
    let rec = st.record.clone();
    let stopped =
        tokio::task::spawn_blocking(move || rec.stop(info.index, &id, "stopped by the API"))
            .await
            .unwrap_or(false);
    if !stopped {
        return Err(HttpError::NotFound(format!(
            "no such recording of stream {key}"
        )));
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `?app=&stream=` (the recordings' and the forwards' listings).
#[derive(Debug, Deserialize)]
pub(super) struct ListFilter {
    pub(super) app: Option<String>,
    pub(super) stream: Option<String>,
}

async fn files(st: &AppState, app: Option<String>, stream: Option<String>) -> Vec<FileEntry> {
    let apps: Vec<_> = st
        .record
        .apps()
        .iter()
        .filter(|a| app.as_deref().is_none_or(|want| want == a.name))
        .cloned()
        .collect();
    tokio::task::spawn_blocking(move || {
        apps.iter()
            .flat_map(|a| app_files(a, stream.as_deref()))
            .collect()
    })
    .await
    .unwrap_or_default()
}

pub(super) async fn list(
    State(st): State<Arc<AppState>>,
    Query(f): Query<ListFilter>,
) -> Result<Response, HttpError> {
    let list: Vec<serde_json::Value> = files(&st, f.app, f.stream)
        .await
        .iter()
        .map(FileEntry::json)
        .collect();
    Ok(json(
        StatusCode::OK,
        serde_json::Value::from(list).to_string(),
    ))
}

/// A single byte range of a `len`-byte file: `Ok(None)` without a `Range` header (or one
/// that is not `bytes=`, which RFC 9110 §14.2 lets a server ignore), `Err` when it cannot
/// be satisfied.
fn range(headers: &HeaderMap, len: u64) -> Result<Option<(u64, u64)>, ()> {
    let Some(spec) = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().strip_prefix("bytes="))
    else {
        return Ok(None);
    };
    // Several ranges: served as the whole file (allowed; no multipart).
    if spec.contains(',') {
        return Ok(None);
    }
    let (a, b) = spec.split_once('-').ok_or(())?;
    let (a, b) = (a.trim(), b.trim());
    let (start, end) = if a.is_empty() {
        let n: u64 = b.parse().map_err(|_| ())?;
        if n == 0 {
            return Err(());
        }
        (len.saturating_sub(n), len.checked_sub(1).ok_or(())?)
    } else {
        let start: u64 = a.parse().map_err(|_| ())?;
        let end = if b.is_empty() {
            len.saturating_sub(1)
        } else {
            b.parse::<u64>().map_err(|_| ())?.min(len.saturating_sub(1))
        };
        (start, end)
    };
    if start >= len || end < start {
        return Err(());
    }
    Ok(Some((start, end)))
}

pub(super) async fn serve(
    State(st): State<Arc<AppState>>,
    Path((app, stream, file)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    let not_found = || HttpError::NotFound(format!("no recording {app}/{stream}/{file}"));
    if !file.ends_with(".mp4") || file.contains('/') || file.starts_with('.') {
        return Err(not_found());
    }
    let cfg = st.record.apps().iter().find(|a| a.name == app).cloned();
    let (s, f) = (stream.clone(), file.clone());
    let found: Option<PathBuf> = match cfg {
        Some(cfg) => tokio::task::spawn_blocking(move || find(&cfg, &s, &f))
            .await
            .ok()
            .flatten(),
        None => None,
    };
    let Some(path) = found else {
        return Err(not_found());
    };
    let mut f = std::fs::File::open(&path).map_err(|_| not_found())?;
    let len = f.metadata().map_err(|_| not_found())?.len();
    let (status, start, end) = match range(&headers, len) {
        Ok(None) => (StatusCode::OK, 0, len.saturating_sub(1)),
        Ok(Some((a, b))) => (StatusCode::PARTIAL_CONTENT, a, b),
        Err(()) => {
            let mut r = StatusCode::RANGE_NOT_SATISFIABLE.into_response();
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{len}")) {
                r.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            return Ok(r);
        }
    };
    let count = if len == 0 { 0 } else { end - start + 1 };
    f.seek(SeekFrom::Start(start))
        .map_err(|_| HttpError::Internal("cannot seek in the recording"))?;
    let body = Body::from_stream(futures_util::stream::unfold(
        (f, count),
        |(mut f, left)| async move {
            if left == 0 {
                return None;
            }
            let want = (left as usize).min(CHUNK);
            let read = tokio::task::spawn_blocking(move || {
                use std::io::Read;
                let mut buf = vec![0u8; want];
                let r = f.read_exact(&mut buf).map(|()| buf);
                (f, r)
            })
            .await;
            match read {
                Ok((f, Ok(buf))) => {
                    let n = buf.len() as u64;
                    Some((Ok::<_, std::io::Error>(Bytes::from(buf)), (f, left - n)))
                }
                Ok((f, Err(e))) => Some((Err(e), (f, 0))),
                Err(_) => None,
            }
        },
    ));
    let mut r = Response::new(body);
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("video/mp4"));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(count));
    if status == StatusCode::PARTIAL_CONTENT
        && let Ok(v) = HeaderValue::from_str(&format!("bytes {start}-{end}/{len}"))
    {
        h.insert(header::CONTENT_RANGE, v);
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        let h = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::RANGE, HeaderValue::from_str(v).expect("value"));
            h
        };
        assert_eq!(range(&HeaderMap::new(), 100), Ok(None));
        assert_eq!(range(&h("bytes=0-"), 100), Ok(Some((0, 99))));
        assert_eq!(range(&h("bytes=10-19"), 100), Ok(Some((10, 19))));
        assert_eq!(range(&h("bytes=90-200"), 100), Ok(Some((90, 99))));
        assert_eq!(range(&h("bytes=-10"), 100), Ok(Some((90, 99))));
        assert_eq!(range(&h("bytes=100-"), 100), Err(()));
        assert_eq!(range(&h("bytes=5-4"), 100), Err(()));
        assert_eq!(range(&h("bytes=x-"), 100), Err(()));
        assert_eq!(range(&h("bytes=0-1,5-6"), 100), Ok(None));
        assert_eq!(range(&h("items=0-1"), 100), Ok(None));
    }
}

//! What WHEP and WHIP sessions share on `PATCH <Location>` (RFC 9725 §4.3, RFC 8840): reading
//! the `application/trickle-ice-sdpfrag` body, the `If-Match` rules of an ICE restart, and the
//! answers (204 for trickled candidates, 200 with the server's new credentials and candidate
//! for a restart). Each handler keeps what is its own: its session table and how it restarts.

use std::fmt::Write as _;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tern_proto::sdp::{self, SdpFrag};

use crate::http::error::HttpError;
use crate::http::extract::{StreamPath, content_type_is};
use crate::http::reply::cors;
use crate::http::state::AppState;

/// The app/stream check (token), the content type and the body of a PATCH: the fragment and
/// the `If-Match` value, or the response to give.
pub(super) fn read_patch(
    st: &AppState,
    headers: &HeaderMap,
    path: &StreamPath,
    body: &Bytes,
) -> Result<(SdpFrag, Option<String>), HttpError> {
    st.lookup(headers, path)?;
    if !content_type_is(headers, "application/trickle-ice-sdpfrag") {
        return Err(HttpError::UnsupportedMediaType(
            "Content-Type must be application/trickle-ice-sdpfrag",
        ));
    }
    let Ok(body) = std::str::from_utf8(body) else {
        return Err(HttpError::BadRequest("body is not valid UTF-8".into()));
    };
    let frag = sdp::parse_sdpfrag(body)
        .map_err(|e| HttpError::BadRequest(format!("malformed sdpfrag: {e}")))?;
    let if_match = headers
        .get(header::IF_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    Ok((frag, if_match))
}

/// Whether `frag` restarts ICE (a ufrag other than the session's `remote_ufrag`), after the
/// preconditions: a restart needs `If-Match` (428), and an `If-Match` other than `*` must be
/// the session's `etag` (412).
pub(super) fn is_restart(
    frag: &SdpFrag,
    if_match: Option<&str>,
    remote_ufrag: &str,
    etag: &str,
) -> Result<bool, HttpError> {
    let restart = frag.ice_ufrag.as_deref().is_some_and(|u| u != remote_ufrag);
    match (if_match, restart) {
        (None, true) => Err(HttpError::PreconditionRequired(
            "If-Match is required for an ICE restart",
        )),
        (Some(m), _) if m != "*" && m != etag => Err(HttpError::PreconditionFailed(
            "ETag does not match the session",
        )),
        _ => Ok(restart),
    }
}

/// The answer to trickled candidates: the server is ICE-lite and learns the client's address
/// from its binding requests, so they need no action.
pub(super) fn trickled() -> Response {
    let mut r = StatusCode::NO_CONTENT.into_response();
    cors(r.headers_mut());
    r
}

/// The answer to an ICE restart: the server's new credentials and its candidate, in the
/// fragment's (first) mid, with the session's new ETag.
pub(super) fn restarted(
    st: &AppState,
    frag: &SdpFrag,
    ufrag: &str,
    pwd: &str,
    etag: &str,
) -> Response {
    let mid = frag.mids.first().map_or("0", String::as_str);
    let mut body = format!(
        "a=ice-lite\r\na=ice-ufrag:{ufrag}\r\na=ice-pwd:{pwd}\r\nm=audio 9 UDP/TLS/RTP/SAVPF 0\r\na=mid:{mid}\r\n"
    );
    for (i, ip) in st.candidate_ips.iter().enumerate() {
        let c = sdp::HostCandidate::new(i, *ip, st.candidate_port);
        let _ = write!(body, "a={c}\r\n");
    }
    body.push_str("a=end-of-candidates\r\n");
    let mut r = (StatusCode::OK, body).into_response();
    let h = r.headers_mut();
    cors(h);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/trickle-ice-sdpfrag"),
    );
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    r
}

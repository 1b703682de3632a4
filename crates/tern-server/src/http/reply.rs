//! The successful responses every surface shares: plain text with CORS headers, the CORS
//! preflight, and small request helpers. Errors are [`crate::http::error::HttpError`].

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// A plain-text response (the message and a newline) with the CORS headers.
pub(crate) fn text(status: StatusCode, msg: impl Into<String>) -> Response {
    let mut r = (status, format!("{}\n", msg.into())).into_response();
    cors(r.headers_mut());
    r
}

/// The CORS headers every WHEP/WHIP response carries (players run on other origins).
pub(crate) fn cors(h: &mut HeaderMap) {
    h.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    h.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("Location, ETag, Link, Accept-Patch, Retry-After"),
    );
}

/// A JSON body with its content type.
pub(crate) fn json(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// `OPTIONS` (CORS preflight) on a WHIP or WHEP resource that takes `methods`: 204 with
/// what it accepts.
pub(super) fn preflight(methods: &'static str) -> Response {
    let mut r = StatusCode::NO_CONTENT.into_response();
    let h = r.headers_mut();
    cors(h);
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(methods),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("Authorization, Content-Type, If-Match"),
    );
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("86400"),
    );
    h.insert("Accept-Post", HeaderValue::from_static("application/sdp"));
    h.insert(
        "Accept-Patch",
        HeaderValue::from_static("application/trickle-ice-sdpfrag"),
    );
    h.insert(header::ALLOW, HeaderValue::from_static(methods));
    r
}

/// `201 Created` with an SDP answer, its `Location` and `ETag`, as WHIP and WHEP answer a
/// POST.
pub(super) fn created(answer: String, location: &str, etag: &str) -> Response {
    let mut r = (StatusCode::CREATED, answer).into_response();
    let h = r.headers_mut();
    cors(h);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/sdp"),
    );
    if let Ok(v) = HeaderValue::from_str(location) {
        h.insert(header::LOCATION, v);
    }
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(
        "Accept-Patch",
        HeaderValue::from_static("application/trickle-ice-sdpfrag"),
    );
    r
}

/// `200 OK` with no body and the CORS headers (a DELETE done).
pub(super) fn ok() -> Response {
    let mut r = StatusCode::OK.into_response();
    cors(r.headers_mut());
    r
}

/// A fresh entity tag (quoted).
pub(super) fn new_etag() -> String {
    format!("\"{}\"", crate::session::random_token(12))
}

/// The first `N` bytes of `s` (which has at least `N`).
pub(super) fn to_array<const N: usize>(s: &str) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&s.as_bytes()[..N]);
    a
}

/// The value of `key` in a query string (as sent: no percent-decoding).
pub(crate) fn query_param<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

//! The responses every surface shares: plain-text errors with CORS headers, the 409 of a
//! stream that is not live, content-type checks and random tokens.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rand::Rng;

use crate::limits::LimitReached;

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

/// Appends one Prometheus sample with its `# HELP` and `# TYPE` lines (`kind`: `gauge`
/// or `counter`).
pub(super) fn metric_line(o: &mut String, name: &str, help: &str, kind: &str, v: u64) {
    use std::fmt::Write as _;
    let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
}

/// `n` random characters of `[A-Za-z0-9]` (session ids, ETags, ICE credentials).
pub(crate) fn random_token(n: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..n)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// The first `N` bytes of `s` (which has at least `N`).
pub(super) fn to_array<const N: usize>(s: &str) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&s.as_bytes()[..N]);
    a
}

/// Whether the request's `Content-Type` (without parameters) is `want`.
pub(super) fn content_type_is(headers: &HeaderMap, want: &str) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(want))
}

/// 429 with `Retry-After` for a client address over one of its limits.
pub(super) fn too_many(e: LimitReached) -> Response {
    let mut r = text(StatusCode::TOO_MANY_REQUESTS, format!("{e}; retry"));
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    r
}

/// An admission refusal: 401 (with `WWW-Authenticate: Bearer`), 403 or 503 (with
/// `Retry-After`), the reason as the body.
pub(super) fn denied(status: u16, reason: String) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN);
    let mut r = text(code, reason);
    match status {
        401 => {
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        503 => {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        _ => {}
    }
    r
}

/// 409 for a stream that exists but has no media yet, with `Retry-After`.
pub(super) fn not_live(key: &str) -> Response {
    let mut r = text(StatusCode::CONFLICT, format!("stream {key} is not live"));
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    r
}

/// The value of `key` in a query string (as sent: no percent-decoding).
pub(crate) fn query_param<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

/// The index of simulcast layer `rid` among a stream's RIDs, or a 400 naming the layers
/// there are.
pub(crate) fn layer_of(key: &str, rids: &[Box<str>], rid: &str) -> Result<u8, Box<Response>> {
    if let Some(i) = rids.iter().position(|r| &**r == rid) {
        return Ok(i as u8);
    }
    let msg = if rids.is_empty() {
        format!("stream {key} has no simulcast layers; no layer '{rid}' to pin")
    } else {
        format!(
            "stream {key} has no layer '{rid}'; its layers are {}",
            rids.join(", ")
        )
    };
    Err(Box::new(text(StatusCode::BAD_REQUEST, msg)))
}

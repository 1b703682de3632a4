//! What handlers take from a request, checked once: the `app/stream` path
//! ([`StreamPath`]), an SDP offer body ([`SdpOffer`]), the Bearer token and the
//! credentials the session layer reads ([`credentials`]), and a `?layer=` RID
//! ([`layer_of`]).

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};

use crate::http::error::HttpError;
use crate::session::Credentials;

/// The `{app}/{stream}` of a route (`/{app}/{stream}/whep`, `/v1/streams/{app}/{stream}`).
#[derive(Debug, Clone)]
pub struct StreamPath {
    /// App name.
    pub app: String,
    /// Stream name.
    pub stream: String,
}

impl StreamPath {
    /// `app/stream`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.app, self.stream)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for StreamPath {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(params) =
            Path::<std::collections::HashMap<String, String>>::from_request_parts(parts, state)
                .await
                .map_err(IntoResponse::into_response)?;
        match (params.get("app"), params.get("stream")) {
            (Some(app), Some(stream)) => Ok(StreamPath {
                app: app.clone(),
                stream: stream.clone(),
            }),
            _ => Err(HttpError::NotFound("no app/stream in the path".into()).into_response()),
        }
    }
}

/// An SDP offer body: `Content-Type: application/sdp` (415 otherwise) and UTF-8 (400
/// otherwise). Handlers that must answer other checks first (404, 401) take it as
/// `Result<SdpOffer, HttpError>` and apply `?` where the offer is first needed.
#[derive(Debug)]
pub struct SdpOffer(pub String);

impl<S: Send + Sync> FromRequest<S> for SdpOffer {
    type Rejection = HttpError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !content_type_is(req.headers(), "application/sdp") {
            return Err(HttpError::UnsupportedMediaType(
                "Content-Type must be application/sdp",
            ));
        }
        let body = Bytes::from_request(req, state)
            .await
            .map_err(|e| HttpError::BadRequest(format!("cannot read the body: {e}")))?;
        String::from_utf8(body.to_vec())
            .map(SdpOffer)
            .map_err(|_| HttpError::BadRequest("SDP offer is not valid UTF-8".into()))
    }
}

/// Whether the request's `Content-Type` (without parameters) is `want`.
pub(crate) fn content_type_is(headers: &HeaderMap, want: &str) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(want))
}

/// The request's `Authorization: Bearer` token.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

/// What an HTTP request offers the session layer: the Bearer token for the app's token;
/// for admission, the Bearer token, else the `?token=` value.
pub(crate) fn credentials(headers: &HeaderMap, query: Option<String>) -> Credentials {
    let bearer = bearer(headers).map(str::to_string);
    let token = bearer
        .clone()
        .or_else(|| query.as_deref().and_then(crate::admission::query_token));
    Credentials {
        app_token: bearer,
        token,
        query: query.unwrap_or_default(),
    }
}

/// The index of simulcast layer `rid` among a stream's RIDs, or a 400 naming the layers
/// there are.
pub(crate) fn layer_of(key: &str, rids: &[Box<str>], rid: &str) -> Result<u8, HttpError> {
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
    Err(HttpError::BadRequest(msg))
}

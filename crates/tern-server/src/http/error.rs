//! [`HttpError`]: every error an HTTP surface answers with, and the one table that gives
//! each its status, `Retry-After` and `WWW-Authenticate` (as rustls maps its errors to wire
//! alerts in one place). A session layer [`Refusal`] becomes one here, once.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::http::reply::text;
use crate::session::Refusal;

/// An error answer: a plain-text body (the message and a newline) with the CORS headers.
#[non_exhaustive]
#[derive(Debug)]
pub enum HttpError {
    /// The session layer refused the session.
    Refused(Refusal),
    /// 400: the request is malformed.
    BadRequest(String),
    /// 401: the API's Bearer token is missing or wrong.
    ApiToken,
    /// 403: the request may not have this resource.
    Forbidden(&'static str),
    /// 404: no such resource.
    NotFound(String),
    /// 409: the request conflicts with the resource's state.
    Conflict(String),
    /// 412: `If-Match` names another ETag.
    PreconditionFailed(&'static str),
    /// 415: the wrong `Content-Type`.
    UnsupportedMediaType(&'static str),
    /// 422: well-formed, but cannot be served.
    Unprocessable(String),
    /// 428: a precondition header is required.
    PreconditionRequired(&'static str),
    /// 500: an internal state is broken (a poisoned lock).
    Internal(&'static str),
    /// 503: the engine is not running, or a table is full (`Retry-After` seconds).
    Unavailable(String, Option<&'static str>),
}

impl From<Refusal> for HttpError {
    fn from(r: Refusal) -> Self {
        HttpError::Refused(r)
    }
}

/// How an error goes on the wire: status, `Retry-After`, and whether it challenges for a
/// Bearer token.
struct Wire {
    status: StatusCode,
    retry_after: Option<&'static str>,
    bearer: bool,
}

impl Wire {
    fn plain(status: StatusCode) -> Self {
        Wire {
            status,
            retry_after: None,
            bearer: false,
        }
    }

    fn retry(status: StatusCode, after: &'static str) -> Self {
        Wire {
            retry_after: Some(after),
            ..Wire::plain(status)
        }
    }

    fn challenge(status: StatusCode) -> Self {
        Wire {
            bearer: true,
            ..Wire::plain(status)
        }
    }
}

/// How a refusal goes on the wire over HTTP.
fn refusal_wire(r: &Refusal) -> Wire {
    use StatusCode as S;
    match r {
        Refusal::BadName(_) => Wire::plain(S::BAD_REQUEST),
        Refusal::NotFound(_) => Wire::plain(S::NOT_FOUND),
        Refusal::Unauthorized { .. } => Wire::challenge(S::UNAUTHORIZED),
        Refusal::Denied { status: 401, .. } => Wire::challenge(S::UNAUTHORIZED),
        Refusal::Denied { status: 503, .. } => Wire::retry(S::SERVICE_UNAVAILABLE, "1"),
        Refusal::Denied { status, .. } => Wire::plain(S::from_u16(*status).unwrap_or(S::FORBIDDEN)),
        Refusal::TooMany(_) => Wire::retry(S::TOO_MANY_REQUESTS, "5"),
        Refusal::Full(_) | Refusal::Unavailable(_) => Wire::plain(S::SERVICE_UNAVAILABLE),
        Refusal::PublishedElsewhere { .. } | Refusal::Busy(_) | Refusal::Source(_) => {
            Wire::plain(S::CONFLICT)
        }
        Refusal::NotLive(_) => Wire::retry(S::CONFLICT, "5"),
        Refusal::Capacity => Wire::retry(S::SERVICE_UNAVAILABLE, "1"),
        Refusal::PullFailed(_) => Wire::retry(S::SERVICE_UNAVAILABLE, "2"),
        Refusal::Draining => Wire::retry(S::SERVICE_UNAVAILABLE, "5"),
    }
}

impl HttpError {
    /// 503 for a request that needs the media engine after it stopped (shutting down).
    pub(crate) fn engine_stopped() -> HttpError {
        HttpError::Unavailable("media engine stopped".into(), None)
    }

    /// The table: each error's status and headers.
    fn wire(&self) -> Wire {
        use StatusCode as S;
        match self {
            HttpError::Refused(r) => refusal_wire(r),
            HttpError::BadRequest(_) => Wire::plain(S::BAD_REQUEST),
            HttpError::ApiToken => Wire::challenge(S::UNAUTHORIZED),
            HttpError::Forbidden(_) => Wire::plain(S::FORBIDDEN),
            HttpError::NotFound(_) => Wire::plain(S::NOT_FOUND),
            HttpError::Conflict(_) => Wire::plain(S::CONFLICT),
            HttpError::PreconditionFailed(_) => Wire::plain(S::PRECONDITION_FAILED),
            HttpError::UnsupportedMediaType(_) => Wire::plain(S::UNSUPPORTED_MEDIA_TYPE),
            HttpError::Unprocessable(_) => Wire::plain(S::UNPROCESSABLE_ENTITY),
            HttpError::PreconditionRequired(_) => Wire::plain(S::PRECONDITION_REQUIRED),
            HttpError::Internal(_) => Wire::plain(S::INTERNAL_SERVER_ERROR),
            HttpError::Unavailable(_, after) => Wire {
                retry_after: *after,
                ..Wire::plain(S::SERVICE_UNAVAILABLE)
            },
        }
    }

    /// The body's message.
    fn message(&self) -> String {
        match self {
            // HTTP clients send the app's token as a Bearer token.
            HttpError::Refused(Refusal::Unauthorized { .. }) => {
                "missing or wrong Bearer token".into()
            }
            HttpError::Refused(r @ Refusal::TooMany(_)) => format!("{r}; retry"),
            HttpError::Refused(r) => r.to_string(),
            HttpError::ApiToken => "missing or wrong API Bearer token".into(),
            HttpError::BadRequest(m)
            | HttpError::NotFound(m)
            | HttpError::Conflict(m)
            | HttpError::Unprocessable(m)
            | HttpError::Unavailable(m, _) => m.clone(),
            HttpError::PreconditionFailed(m)
            | HttpError::Forbidden(m)
            | HttpError::UnsupportedMediaType(m)
            | HttpError::PreconditionRequired(m)
            | HttpError::Internal(m) => (*m).to_string(),
        }
    }

    /// The status a refusal answers with over HTTP (OME signalling reports the same code).
    pub fn status_of(r: &Refusal) -> StatusCode {
        refusal_wire(r).status
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let w = self.wire();
        let mut r = text(w.status, self.message());
        let h = r.headers_mut();
        if let Some(after) = w.retry_after {
            h.insert(header::RETRY_AFTER, HeaderValue::from_static(after));
        }
        if w.bearer {
            h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::LimitReached;

    fn parts(e: HttpError) -> (u16, Option<String>, bool, String) {
        let r = e.into_response();
        let h = r.headers();
        (
            r.status().as_u16(),
            h.get(header::RETRY_AFTER)
                .map(|v| v.to_str().unwrap_or_default().to_string()),
            h.contains_key(header::WWW_AUTHENTICATE),
            h.get(header::ACCESS_CONTROL_ALLOW_ORIGIN)
                .map_or(String::new(), |v| v.to_str().unwrap_or_default().into()),
        )
    }

    #[test]
    fn refusals_map_to_their_status_and_headers() {
        let e = |r: Refusal| parts(HttpError::from(r));
        assert_eq!(e(Refusal::BadName("a b".into())).0, 400);
        assert_eq!(e(Refusal::NotFound("live/x".into())).0, 404);
        let (s, _, bearer, cors) = e(Refusal::Unauthorized { app: "live".into() });
        assert_eq!((s, bearer, cors.as_str()), (401, true, "*"));
        let denied = |status| Refusal::Denied {
            status,
            reason: "no".into(),
        };
        assert_eq!(e(denied(401)), (401, None, true, "*".into()));
        assert_eq!(e(denied(403)), (403, None, false, "*".into()));
        assert_eq!(e(denied(503)), (503, Some("1".into()), false, "*".into()));
        let limit = LimitReached {
            what: "pending sessions",
            max: 1,
        };
        assert_eq!(e(Refusal::TooMany(limit)).1.as_deref(), Some("5"));
        assert_eq!(
            e(Refusal::NotLive("live/x".into())),
            (409, Some("5".into()), false, "*".into())
        );
        assert_eq!(
            e(Refusal::Capacity),
            (503, Some("1".into()), false, "*".into())
        );
        assert_eq!(e(Refusal::Busy("live/x".into())).0, 409);
        assert_eq!(e(Refusal::PullFailed("x".into())).1.as_deref(), Some("2"));
    }

    #[test]
    fn bodies_keep_the_messages_clients_read() {
        let body = |e: HttpError| e.message();
        assert_eq!(
            body(Refusal::Unauthorized { app: "live".into() }.into()),
            "missing or wrong Bearer token"
        );
        assert_eq!(
            body(Refusal::NotLive("live/x".into()).into()),
            "stream live/x is not live"
        );
        assert_eq!(
            body(HttpError::ApiToken),
            "missing or wrong API Bearer token"
        );
    }
}

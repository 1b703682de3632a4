//! WHIP (RFC 9725) over HTTP: POST an offer to publish a stream, PATCH to trickle
//! candidates or restart ICE, DELETE to stop.
//!
//! The session itself is a str0m peer ([`tern_rtc::publisher::Publisher`]) driven by the
//! media engine on the shared UDP port; this module only does the HTTP exchange.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tern_proto::codec::VideoCodec;
use tern_rtc::publisher::{PublishError, Publisher};
use tokio::sync::oneshot;
use tracing::info;

use crate::admission::Action;
use crate::http::listener::Peer;
use crate::http::reply::{content_type_is, cors, random_token, text, too_many};
use crate::http::state::{
    AppState, PublisherSession, admit_request, admitted_publisher, check_token, claim_stream,
    forget_publisher, lookup, may_publish,
};
use crate::http::trickle::{is_restart, read_patch, restarted, trickled};
use crate::media::AddError;
use crate::media::{Command, ViewerId};

/// `POST /{app}/{stream}/whip`: SDP offer in, `201 Created` with the answer and the
/// session's `Location`.
pub async fn post(
    State(st): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path((app, stream)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(e) = may_publish(&st, &app, &stream) {
        return text(e.status(), e.to_string());
    }
    if let Err(r) = check_token(&st, &headers, &app) {
        return r;
    }
    if !content_type_is(&headers, "application/sdp") {
        return text(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/sdp",
        );
    }
    let Ok(offer) = std::str::from_utf8(&body) else {
        return text(StatusCode::BAD_REQUEST, "SDP offer is not valid UTF-8");
    };
    let permit = match st.pending.acquire(peer.0.ip()) {
        Ok(p) => p,
        Err(e) => return too_many(e),
    };
    let sid = random_token(22);
    let admission = admit_request(
        &st,
        Action::Publish,
        "whip",
        (&app, &stream),
        peer.0,
        &headers,
        query,
        &sid,
    );
    let (ask, lifetime) = match admission.await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let local = SocketAddr::new(st.candidate_ip, st.candidate_port);
    let (publisher, answer) = match Publisher::accept(offer, local, Instant::now()) {
        Ok(x) => x,
        Err(e @ PublishError::BadOffer(_)) => return text(StatusCode::BAD_REQUEST, e.to_string()),
        Err(e) => return text(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
    };
    let remote_ufrag = publisher.remote_ufrag().to_string();
    let codec = publisher.video_codec();
    // In a cluster the stream must not have a publisher on another node.
    if let Err(r) = crate::http::cluster::claim(&st, &app, &stream).await {
        return r;
    }
    // The stream is made (if new) only for an offer that can publish.
    let info = match claim_stream(&st, &app, &stream) {
        Ok(i) => i,
        Err(e) => return text(e.status(), e.to_string()),
    };
    let was = st.engine.stats.video(info.index).codec;
    let (tx, rx) = oneshot::channel();
    let cmd = Command::AddPublisher {
        stream: info.index,
        publisher: Box::new(publisher),
        reply: tx,
        permit: Some(permit),
    };
    if st.engine.send(cmd).is_err() {
        return text(StatusCode::SERVICE_UNAVAILABLE, "media engine stopped");
    }
    let id = match rx.await {
        Ok(Ok(id)) => id,
        Ok(Err(AddError::Busy)) => {
            return text(
                StatusCode::CONFLICT,
                format!("stream {app}/{stream} already has a publisher (or is a built-in clip)"),
            );
        }
        Err(_) => return text(StatusCode::SERVICE_UNAVAILABLE, "media engine stopped"),
    };
    admitted_publisher(&st, id, ask, lifetime);
    if was != codec {
        end_viewers_of_other_codec(&st, &format!("{app}/{stream}"), was, codec);
    }
    let etag = format!("\"{}\"", random_token(12));
    if let Ok(mut m) = st.publishers.lock() {
        m.insert(
            sid.clone(),
            PublisherSession {
                id,
                etag: etag.clone(),
                remote_ufrag,
            },
        );
    }
    let mut r = (StatusCode::CREATED, answer).into_response();
    let h = r.headers_mut();
    cors(h);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/sdp"),
    );
    if let Ok(v) = HeaderValue::from_str(&format!("/{app}/{stream}/whip/{sid}")) {
        h.insert(header::LOCATION, v);
    }
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(
        "Accept-Patch",
        HeaderValue::from_static("application/trickle-ice-sdpfrag"),
    );
    st.add_links(h);
    r
}

/// `DELETE <Location>`: ends the publisher; viewers stay connected.
pub async fn delete(
    State(st): State<Arc<AppState>>,
    Path((app, stream, sid)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = lookup(&st, &headers, &app, &stream) {
        return r;
    }
    let id = forget_publisher(&st, &sid);
    let Some(id) = id else {
        return text(StatusCode::NOT_FOUND, "no such WHIP session");
    };
    let _ = st.engine.send(Command::RemovePublisher(id));
    let mut r = StatusCode::OK.into_response();
    cors(r.headers_mut());
    r
}

/// `PATCH <Location>` (RFC 9725 §4.3): trickled candidates are taken and need no action
/// (the server is ICE-lite and learns the encoder's address from its checks); new ICE
/// credentials are an ICE restart, which needs `If-Match` with the resource's ETag and is
/// answered with the server's new credentials and candidate.
pub async fn patch(
    State(st): State<Arc<AppState>>,
    Path((app, stream, sid)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (frag, if_match) = match read_patch(&st, &headers, &app, &stream, &body) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let Some(sess) = st.publishers.lock().ok().and_then(|m| m.get(&sid).cloned()) else {
        return text(StatusCode::NOT_FOUND, "no such WHIP session");
    };
    match is_restart(&frag, if_match.as_deref(), &sess.remote_ufrag, &sess.etag) {
        Ok(true) => {}
        Ok(false) => return trickled(),
        Err(r) => return r,
    }
    let (Some(ufrag), Some(pwd)) = (frag.ice_ufrag.clone(), frag.ice_pwd.clone()) else {
        return text(
            StatusCode::BAD_REQUEST,
            "ICE restart needs both a=ice-ufrag and a=ice-pwd",
        );
    };
    let (tx, rx) = oneshot::channel();
    let cmd = Command::RestartPublisherIce {
        id: sess.id,
        ufrag: ufrag.clone(),
        pwd,
        reply: tx,
    };
    if st.engine.send(cmd).is_err() {
        return text(StatusCode::SERVICE_UNAVAILABLE, "media engine stopped");
    }
    let (local_ufrag, local_pwd) = match rx.await {
        Ok(Ok(creds)) => creds,
        Ok(Err(e)) => return text(StatusCode::UNPROCESSABLE_ENTITY, e),
        Err(_) => return text(StatusCode::SERVICE_UNAVAILABLE, "media engine stopped"),
    };
    let etag = format!("\"{}\"", random_token(12));
    if let Ok(mut m) = st.publishers.lock()
        && let Some(s) = m.get_mut(&sid)
    {
        s.remote_ufrag = ufrag;
        s.etag = etag.clone();
    }
    restarted(&st, &frag, &local_ufrag, &local_pwd, &etag)
}

/// `OPTIONS`: CORS preflight.
pub async fn options() -> Response {
    let mut r = StatusCode::NO_CONTENT.into_response();
    let h = r.headers_mut();
    cors(h);
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("OPTIONS, POST, PATCH, DELETE"),
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
    h.insert(
        header::ALLOW,
        HeaderValue::from_static("OPTIONS, POST, PATCH, DELETE"),
    );
    r
}

/// A publisher in another video codec took the stream: the viewers answered for the old
/// codec could not decode the new one (their payload type says the old codec), so they are
/// ended (DTLS close_notify), and their players' next POST is answered with the new codec.
fn end_viewers_of_other_codec(st: &AppState, key: &str, was: VideoCodec, now: VideoCodec) {
    let viewers = st.engine.stats.snapshots.viewers(Some(key));
    if viewers.is_empty() {
        return;
    }
    info!(
        "stream {key}: the publisher sends {now}, its viewers were answered {was}: ending {} viewers so they rejoin",
        viewers.len()
    );
    for v in viewers {
        let _ = st
            .engine
            .send(Command::RemoveViewer(ViewerId::from_raw(v.id)));
    }
}

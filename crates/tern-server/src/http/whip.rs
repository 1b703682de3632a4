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
use axum::http::HeaderMap;
use axum::response::Response;
use tern_rtc::publisher::{PublishError, Publisher};
use tokio::sync::oneshot;

use crate::feed::{Feed, WhipRenditions};
use crate::http::error::HttpError;
use crate::http::extract::{SdpOffer, StreamPath, credentials};
use crate::http::listener::Peer;
use crate::http::reply::{created, new_etag, ok, preflight};
use crate::http::state::AppState;
use crate::http::trickle::{is_restart, read_patch, restarted, trickled};
use crate::media::Command;
use crate::session::{Protocol, PublishAsk};

/// What a WHIP resource accepts.
const METHODS: &str = "OPTIONS, POST, PATCH, DELETE";

/// `POST /{app}/{stream}/whip`: SDP offer in, `201 Created` with the answer and the
/// session's `Location`.
pub(super) async fn post(
    State(st): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    path: StreamPath,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    offer: Result<SdpOffer, HttpError>,
) -> Result<Response, HttpError> {
    let ask = PublishAsk {
        app: path.app.clone(),
        stream: path.stream.clone(),
        protocol: Protocol::Whip,
        client: peer.0,
        credentials: credentials(&headers, query),
    };
    // The name and the app's token are answered before the body's format.
    st.check_publish(&ask)?;
    let SdpOffer(offer) = offer?;
    let mut publish = st.admit_publish(ask).await?;
    let locals: Vec<SocketAddr> = st
        .candidate_ips
        .iter()
        .map(|ip| SocketAddr::new(*ip, st.candidate_port))
        .collect();
    let (publisher, answer) =
        match Publisher::accept(&offer, &locals, Instant::now(), &st.publisher_dtls) {
            Ok(x) => x,
            Err(e @ PublishError::BadOffer(_)) => return Err(HttpError::BadRequest(e.to_string())),
            Err(e) => return Err(HttpError::Unprocessable(e.to_string())),
        };
    let remote_ufrag = publisher.remote_ufrag().to_string();
    // One video layer in an app that makes renditions: they are made from it.
    let key = publish.key().to_string();
    let (specs, layers) = match st.config().app(&path.app) {
        Some(app) => (
            app.rendition_specs(),
            WhipRenditions::layers(app, &publisher, &key),
        ),
        None => (Vec::new(), None),
    };
    // The stream is claimed (in a cluster) and made (if new) only for an offer that can
    // publish.
    let feed = Feed::Whip {
        publisher: Box::new(publisher),
        permit: publish.take_permit(),
        renditions: layers.clone(),
    };
    let slot = publish.attach(&st.core, feed).await?;
    if let Some(layers) = &layers {
        st.whip_renditions.start(slot.id(), &key, &specs, layers);
    }
    // The resource outlives this request: its DELETE (or the engine) ends it.
    let sid = slot.keep();
    let etag = new_etag();
    st.update_publisher(&sid, |s| {
        s.etag = etag.clone();
        s.remote_ufrag = remote_ufrag;
    });
    let location = format!("/{}/{}/whip/{sid}", path.app, path.stream);
    let mut r = created(answer, &location, &etag);
    st.add_links(r.headers_mut());
    Ok(r)
}

/// `DELETE <Location>`: ends the publisher; viewers stay connected.
pub(super) async fn delete(
    State(st): State<Arc<AppState>>,
    path: StreamPath,
    Path((_, _, sid)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    st.lookup(&headers, &path)?;
    let id = st
        .forget_publisher(&sid)
        .ok_or_else(|| HttpError::NotFound("no such WHIP session".into()))?;
    let _ = st.engine.send(Command::RemovePublisher(id));
    Ok(ok())
}

/// `PATCH <Location>` (RFC 9725 §4.3): trickled candidates are taken and need no action
/// (the server is ICE-lite and learns the encoder's address from its checks); new ICE
/// credentials are an ICE restart, which needs `If-Match` with the resource's ETag and is
/// answered with the server's new credentials and candidate.
pub(super) async fn patch(
    State(st): State<Arc<AppState>>,
    path: StreamPath,
    Path((_, _, sid)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, HttpError> {
    let (frag, if_match) = read_patch(&st, &headers, &path, &body)?;
    let sess = st
        .publisher(&sid)
        .ok_or_else(|| HttpError::NotFound("no such WHIP session".into()))?;
    if !is_restart(&frag, if_match.as_deref(), &sess.remote_ufrag, &sess.etag)? {
        return Ok(trickled());
    }
    let (Some(ufrag), Some(pwd)) = (frag.ice_ufrag.clone(), frag.ice_pwd.clone()) else {
        return Err(HttpError::BadRequest(
            "ICE restart needs both a=ice-ufrag and a=ice-pwd".into(),
        ));
    };
    let (tx, rx) = oneshot::channel();
    let cmd = Command::RestartPublisherIce {
        id: sess.id,
        ufrag: ufrag.clone(),
        pwd,
        reply: tx,
    };
    st.engine
        .send(cmd)
        .map_err(|_| HttpError::engine_stopped())?;
    let (local_ufrag, local_pwd) = match rx.await {
        Ok(Ok(creds)) => creds,
        Ok(Err(e)) => return Err(HttpError::Unprocessable(e.to_string())),
        Err(_) => return Err(HttpError::engine_stopped()),
    };
    let etag = new_etag();
    st.update_publisher(&sid, |s| {
        s.remote_ufrag = ufrag;
        s.etag = etag.clone();
    });
    Ok(restarted(&st, &frag, &local_ufrag, &local_pwd, &etag))
}

/// `OPTIONS`: CORS preflight.
pub(super) async fn options() -> Response {
    preflight(METHODS)
}

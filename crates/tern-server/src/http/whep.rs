//! WHEP (draft-ietf-wish-whep) over HTTP: POST offer → 201 answer, PATCH trickle / ICE
//! restart, DELETE, OPTIONS, HEAD.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use rand::Rng;
use tern_proto::sdp::{self, SessionDescription};
use tern_rtc::session::{self, LocalInfo};
use tern_rtc::viewer::{PWD_LEN, UFRAG_LEN};

use crate::admission::SessionKey;
use crate::http::cluster;
use crate::http::error::HttpError;
use crate::http::extract::{SdpOffer, StreamPath, credentials, layer_of};
use crate::http::listener::Peer;
use crate::http::reply::{created, new_etag, ok, preflight, query_param, to_array};
use crate::http::state::{AppState, Session};
use crate::http::trickle::{is_restart, read_patch, restarted, trickled};
use crate::media::Command;
use crate::session::{PlayAsk, Protocol, random_token};

/// What a WHEP endpoint and session accept.
const METHODS: &str = "OPTIONS, POST, PATCH, DELETE, HEAD";

/// `POST /{app}/{stream}/whep`: the offer in, the answer and the session's `Location` out.
pub(super) async fn post(
    State(st): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    path: StreamPath,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    offer: Result<SdpOffer, HttpError>,
) -> Result<Response, HttpError> {
    // In a cluster: another node may be the one to serve this viewer, or may have the
    // stream's publisher (then it is pulled here first). A node's own request is served.
    let node = st.is_node_request(&headers);
    if let Some(r) = cluster::redirect(&st, (&path.app, &path.stream), query.as_deref(), node) {
        return Ok(r);
    }
    if node && headers.contains_key(crate::cluster::RELAY_HEADER) {
        cluster::may_relay(&st, &path.key()).await?;
    }
    let pin_rid = query
        .as_deref()
        .and_then(|q| query_param(q, "layer"))
        .map(str::to_string);
    let play = st
        .begin_play(PlayAsk {
            app: path.app.clone(),
            stream: path.stream.clone(),
            protocol: Protocol::Whep,
            client: peer.0,
            credentials: credentials(&headers, query),
            session: None,
            from_node: node,
        })
        .await?;
    let info = play.info();
    // `?layer=RID` pins a simulcast layer.
    let pin = match pin_rid {
        None => None,
        Some(rid) => Some(layer_of(
            &path.key(),
            &st.engine.stats.rids(info.index),
            &rid,
        )?),
    };
    let SdpOffer(body) = offer?;
    let offer = SessionDescription::parse(&body)
        .map_err(|e| HttpError::BadRequest(format!("malformed SDP offer: {e}")))?;
    let neg = sdp::negotiate_for(&offer, st.engine.stats.video(info.index))
        .map_err(|e| HttpError::Unprocessable(format!("cannot serve this offer: {e}")))?;
    let mut grant = play.admit(&st).await?;
    let acc = session::accept(
        &offer,
        &neg,
        &LocalInfo {
            fingerprint: &st.fingerprint,
            candidate_ips: &st.candidate_ips,
            candidate_port: st.candidate_port,
            cname: &st.config().server.cname,
        },
        &mut || rand::rng().random(),
    );
    let answer = acc.answer;
    let mut vp = acc.params;
    vp.pin = pin;
    let ufrag = String::from_utf8_lossy(&vp.local_ufrag).into_owned();
    let pwd = String::from_utf8_lossy(&vp.local_pwd).into_owned();
    let (tx, rx) = tokio::sync::oneshot::channel();
    st.engine
        .send(Command::AddViewer {
            stream: info.index,
            params: Box::new(vp),
            reply: tx,
            permit: grant.take_permit(),
        })
        .map_err(|_| HttpError::engine_stopped())?;
    let viewer = rx.await.map_err(|_| HttpError::engine_stopped())?;
    if node && let Some(c) = &st.cluster {
        // An edge's upstream: closed if this node loses the stream to another origin.
        c.serving(&path.key(), viewer.raw());
    }
    let sid = grant.session().to_string();
    grant.started(&st, SessionKey::Viewer(viewer.raw()));
    let etag = new_etag();
    let location = format!("/{}/{}/whep/{sid}", path.app, path.stream);
    if let Ok(mut s) = st.sessions.lock() {
        s.map.insert(
            sid,
            Session {
                viewer,
                etag: etag.clone(),
                remote_ufrag: neg.remote_ufrag.clone(),
                local_ufrag: ufrag,
                local_pwd: pwd,
            },
        );
        s.rebook();
    }
    let mut r = created(answer, &location, &etag);
    st.add_links(r.headers_mut());
    Ok(r)
}

/// OPTIONS on the endpoint also carries the TURN `Link` headers, so a player can configure
/// its ICE servers before it creates the offer (as early WHIP drafts specified).
pub(super) async fn options_links(State(st): State<Arc<AppState>>) -> Response {
    let mut r = preflight(METHODS);
    st.add_links(r.headers_mut());
    r
}

/// OPTIONS on a WHEP session: what it accepts (CORS preflight).
pub(super) async fn options() -> Response {
    preflight(METHODS)
}

/// HEAD on the WHEP endpoint: a cheap liveness probe (200 live, 409 not live, 404 unknown).
pub(super) async fn head(
    State(st): State<Arc<AppState>>,
    path: StreamPath,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    let (_, live) = st.lookup(&headers, &path)?;
    if !live {
        return Err(crate::session::Refusal::NotLive(path.key()).into());
    }
    let mut r = ok();
    r.headers_mut()
        .insert("Accept-Post", HeaderValue::from_static("application/sdp"));
    Ok(r)
}

/// PATCH on a session: trickled candidates (no action: ICE-lite) or an ICE restart.
pub(super) async fn patch(
    State(st): State<Arc<AppState>>,
    path: StreamPath,
    Path((_, _, sid)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, HttpError> {
    let (frag, if_match) = read_patch(&st, &headers, &path, &body)?;
    let mut sessions = st
        .sessions
        .lock()
        .map_err(|_| HttpError::Internal("session table poisoned"))?;
    let sess = sessions
        .map
        .get_mut(&sid)
        .ok_or_else(|| HttpError::NotFound("no such WHEP session".into()))?;
    if !is_restart(&frag, if_match.as_deref(), &sess.remote_ufrag, &sess.etag)? {
        return Ok(trickled());
    }
    let remote_ufrag = frag
        .ice_ufrag
        .clone()
        .ok_or_else(|| HttpError::BadRequest("ICE restart without a=ice-ufrag".into()))?;
    let ufrag = random_token(UFRAG_LEN);
    let pwd = random_token(PWD_LEN);
    st.engine
        .send(Command::RestartIce {
            id: sess.viewer,
            ufrag: to_array(&ufrag),
            pwd: to_array(&pwd),
            remote_ufrag: remote_ufrag.clone().into_boxed_str(),
        })
        .map_err(|_| HttpError::engine_stopped())?;
    sess.remote_ufrag = remote_ufrag;
    sess.local_ufrag = ufrag;
    sess.local_pwd = pwd;
    sess.etag = new_etag();
    let r = restarted(&st, &frag, &sess.local_ufrag, &sess.local_pwd, &sess.etag);
    sessions.rebook();
    Ok(r)
}

/// DELETE on a session: the viewer ends.
pub(super) async fn delete(
    State(st): State<Arc<AppState>>,
    path: StreamPath,
    Path((_, _, sid)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    st.lookup(&headers, &path)?;
    let sess = st.sessions.lock().ok().and_then(|mut s| {
        let sess = s.map.remove(&sid);
        s.rebook();
        sess
    });
    let sess = sess.ok_or_else(|| HttpError::NotFound("no such WHEP session".into()))?;
    let _ = st.engine.send(Command::RemoveViewer(sess.viewer));
    Ok(ok())
}

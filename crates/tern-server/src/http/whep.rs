//! WHEP (draft-ietf-wish-whep) over HTTP: POST offer → 201 answer, PATCH trickle / ICE
//! restart, DELETE, OPTIONS, HEAD.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rand::Rng;
use tern_proto::sdp::{self, SessionDescription};
use tern_rtc::session::{self, LocalInfo};
use tern_rtc::viewer::{PWD_LEN, UFRAG_LEN};

use crate::admission::{Action, SessionKey};
use crate::http::cluster;
use crate::http::listener::Peer;
use crate::http::reply::{
    content_type_is, cors, layer_of, not_live, query_param, random_token, text, to_array, too_many,
};
use crate::http::state::{AppState, Session, admit_request, admitted, lookup};
use crate::http::trickle::{is_restart, read_patch, restarted, trickled};
use crate::media::Command;

/// `POST /{app}/{stream}/whep`: the offer in, the answer and the session's `Location` out.
pub(super) async fn whep_post(
    State(st): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path((app, stream)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // In a cluster: another node may be the one to serve this viewer, or may have the
    // stream's publisher (then it is pulled here first). A node's own request is served.
    let node = st.is_node_request(&headers);
    if let Some(r) = cluster::redirect(&st, (&app, &stream), query.as_deref(), node) {
        return r;
    }
    if !node && let Err(e) = cluster::pull(&st, &app, &stream).await {
        return e.response();
    }
    let (info, live) = match lookup(&st, &headers, &app, &stream) {
        Ok(x) => x,
        Err(r) => return r,
    };
    // `?layer=RID` pins a simulcast layer.
    let pin = match query.as_deref().and_then(|q| query_param(q, "layer")) {
        None => None,
        Some(rid) => match layer_of(
            &format!("{app}/{stream}"),
            &st.engine.stats.rids(info.index),
            rid,
        ) {
            Ok(l) => Some(l),
            Err(r) => return *r,
        },
    };
    if !content_type_is(&headers, "application/sdp") {
        return text(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/sdp",
        );
    }
    let Ok(body) = std::str::from_utf8(&body) else {
        return text(StatusCode::BAD_REQUEST, "SDP offer is not valid UTF-8");
    };
    let offer = match SessionDescription::parse(body) {
        Ok(o) => o,
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("malformed SDP offer: {e}")),
    };
    let neg = match sdp::negotiate_for(&offer, st.engine.stats.video(info.index)) {
        Ok(n) => n,
        Err(e) => {
            return text(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("cannot serve this offer: {e}"),
            );
        }
    };
    if !live {
        return not_live(&format!("{app}/{stream}"));
    }
    let stats = &st.engine.stats;
    let t = &st.config.tunables;
    if stats.handshakes.load(Ordering::Relaxed) >= t.max_handshakes
        || stats.viewers.load(Ordering::Relaxed) >= t.max_viewers
    {
        let mut r = text(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many viewers or handshakes in progress; retry",
        );
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return r;
    }
    // A node's upstream session skips the per-address limit and admission (the viewers it
    // serves were admitted where they joined).
    let permit = match node {
        true => None,
        false => match st.pending.acquire(peer.0.ip()) {
            Ok(p) => Some(p),
            Err(e) => return too_many(e),
        },
    };
    let sid = random_token(22);
    let admission = match node {
        true => None,
        false => {
            let asked = admit_request(
                &st,
                Action::Play,
                "whep",
                (&app, &stream),
                peer.0,
                &headers,
                query,
                &sid,
            );
            match asked.await {
                Ok(x) => Some(x),
                Err(r) => return r,
            }
        }
    };

    let acc = session::accept(
        &offer,
        &neg,
        &LocalInfo {
            fingerprint: &st.fingerprint,
            candidate_ip: st.candidate_ip,
            candidate_port: st.candidate_port,
            cname: &st.config.server.cname,
        },
        &mut || rand::rng().random(),
    );
    let answer = acc.answer;
    let mut vp = acc.params;
    vp.pin = pin;
    let ufrag = String::from_utf8_lossy(&vp.local_ufrag).into_owned();
    let pwd = String::from_utf8_lossy(&vp.local_pwd).into_owned();
    let (tx, rx) = tokio::sync::oneshot::channel();
    if st
        .engine
        .send(Command::AddViewer {
            stream: info.index,
            params: Box::new(vp),
            reply: tx,
            permit,
        })
        .is_err()
    {
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            "media engine is not running",
        );
    }
    let Ok(viewer) = rx.await else {
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            "media engine is not running",
        );
    };
    if let Some((ask, lifetime)) = admission {
        admitted(&st, SessionKey::Viewer(viewer.raw()), ask, lifetime);
    }
    let etag = format!("\"{}\"", random_token(12));
    let location = format!("/{app}/{stream}/whep/{sid}");
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
    let mut r = (StatusCode::CREATED, answer).into_response();
    let h = r.headers_mut();
    cors(h);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/sdp"),
    );
    if let Ok(v) = HeaderValue::from_str(&location) {
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

/// OPTIONS on the endpoint also carries the TURN `Link` headers, so a player can configure
/// its ICE servers before it creates the offer (as early WHIP drafts specified).
pub(super) async fn whep_options_links(State(st): State<Arc<AppState>>) -> Response {
    let mut r = whep_options().await;
    st.add_links(r.headers_mut());
    r
}

/// OPTIONS on a WHEP session: what it accepts (CORS preflight).
pub(super) async fn whep_options() -> Response {
    let mut r = StatusCode::NO_CONTENT.into_response();
    let h = r.headers_mut();
    cors(h);
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("OPTIONS, POST, PATCH, DELETE, HEAD"),
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
        HeaderValue::from_static("OPTIONS, POST, PATCH, DELETE, HEAD"),
    );
    r
}

/// HEAD on the WHEP endpoint: a cheap liveness probe (200 live, 409 not live, 404 unknown).
pub(super) async fn whep_head(
    State(st): State<Arc<AppState>>,
    Path((app, stream)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    match lookup(&st, &headers, &app, &stream) {
        Err(r) => r,
        Ok((_, true)) => {
            let mut r = StatusCode::OK.into_response();
            cors(r.headers_mut());
            r.headers_mut()
                .insert("Accept-Post", HeaderValue::from_static("application/sdp"));
            r
        }
        Ok((_, false)) => not_live(&format!("{app}/{stream}")),
    }
}

/// PATCH on a session: trickled candidates (no action: ICE-lite) or an ICE restart.
pub(super) async fn whep_patch(
    State(st): State<Arc<AppState>>,
    Path((app, stream, sid)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (frag, if_match) = match read_patch(&st, &headers, &app, &stream, &body) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let Ok(mut sessions) = st.sessions.lock() else {
        return text(StatusCode::INTERNAL_SERVER_ERROR, "session table poisoned");
    };
    let Some(sess) = sessions.map.get_mut(&sid) else {
        return text(StatusCode::NOT_FOUND, "no such WHEP session");
    };
    match is_restart(&frag, if_match.as_deref(), &sess.remote_ufrag, &sess.etag) {
        Ok(true) => {}
        Ok(false) => return trickled(),
        Err(r) => return r,
    }
    let Some(remote_ufrag) = frag.ice_ufrag.clone() else {
        return text(StatusCode::BAD_REQUEST, "ICE restart without a=ice-ufrag");
    };
    let ufrag = random_token(UFRAG_LEN);
    let pwd = random_token(PWD_LEN);
    if st
        .engine
        .send(Command::RestartIce {
            id: sess.viewer,
            ufrag: to_array(&ufrag),
            pwd: to_array(&pwd),
            remote_ufrag: remote_ufrag.clone().into_boxed_str(),
        })
        .is_err()
    {
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            "media engine is not running",
        );
    }
    sess.remote_ufrag = remote_ufrag;
    sess.local_ufrag = ufrag;
    sess.local_pwd = pwd;
    sess.etag = format!("\"{}\"", random_token(12));
    let r = restarted(&st, &frag, &sess.local_ufrag, &sess.local_pwd, &sess.etag);
    sessions.rebook();
    r
}

/// DELETE on a session: the viewer ends.
pub(super) async fn whep_delete(
    State(st): State<Arc<AppState>>,
    Path((app, stream, sid)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = lookup(&st, &headers, &app, &stream) {
        return r;
    }
    let sess = st.sessions.lock().ok().and_then(|mut s| {
        let sess = s.map.remove(&sid);
        s.rebook();
        sess
    });
    let Some(sess) = sess else {
        return text(StatusCode::NOT_FOUND, "no such WHEP session");
    };
    let _ = st.engine.send(Command::RemoveViewer(sess.viewer));
    let mut r = StatusCode::OK.into_response();
    cors(r.headers_mut());
    r
}

//! OvenMediaEngine-compatible WebSocket signalling on `ws://HOST:PORT/{app}/{stream}`, the
//! same HTTP listener and path as the player page (a GET with `Upgrade: websocket` is the
//! signalling, a plain GET the page).
//!
//! The server offers and the player answers (see [`tern_proto::ome`] for the messages):
//!
//! ```text
//! player                                      tern
//!   | {"command":"request_offer"}              |  checks the stream, mints credentials
//!   |<---------- {"command":"offer","id",...}  |  (no engine state yet)
//!   | {"command":"answer","id",sdp} ---------->|  answer -> ViewerParams -> AddViewer
//!   | {"command":"candidate","id",...} ------->|  validated; ICE-lite learns the address
//!   |               ICE / DTLS / SRTP on the media port, as a WHEP viewer              |
//!   | {"command":"stop","id"} or close ------->|  RemoveViewer
//! ```
//!
//! The viewer behind the socket is the same lean [`tern_rtc::viewer::Viewer`] a WHEP POST
//! creates, added through the same engine command: only the offer/answer direction differs.
//! The socket owns the session: closing it (or `stop`) removes the viewer, and a socket closed
//! before its answer leaves nothing in the engine, since the viewer is only added on the answer.
//! An error is sent as OME sends it, `{"code":N,"error":"..."}`, and the socket is then closed
//! (OME closes after every error too; unlike OME, a frame that is not JSON also gets an error
//! message before the close rather than a bare close).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use rand::Rng;
use tern_pool::PoolCounter;
use tern_proto::ome::{self, Command, IceServer, OfferCandidate, SignalError};
use tern_rtc::session::{self, LocalInfo, ServerAnswerError, ServerOffer};
use tracing::{debug, info};

use crate::admission::SessionKey;
use crate::http::error::HttpError;
use crate::http::extract::bearer;
use crate::http::listener::Peer;
use crate::http::state::AppState;
use crate::media::{Command as EngineCommand, ViewerId};
use crate::session::{Credentials, PlayAsk, PlayGrant, Protocol, Refusal};

/// The memory line of open signalling sockets (`ome_signalling` in `GET /v1/memory`), in
/// the server's own registry: one item per socket, its bytes the socket's state and pending
/// offer.
fn pool(st: &AppState) -> PoolCounter {
    st.ome_pool
        .get_or_init(|| {
            st.memory
                .counter("ome_signalling", std::mem::size_of::<Signalling>())
        })
        .clone()
}

/// Upgrades a GET on `/{app}/{stream}` to the signalling socket.
pub fn upgrade(
    st: Arc<AppState>,
    ws: WebSocketUpgrade,
    peer: Peer,
    app: String,
    stream: String,
    query: Option<String>,
    headers: &HeaderMap,
) -> Response {
    let params = Params::from_query(query.as_deref());
    let bearer = bearer(headers).map(str::to_string);
    let socket_permit = match st.ome_sockets.acquire(peer.0.ip()) {
        Ok(p) => p,
        Err(e) => return HttpError::from(Refusal::TooMany(e)).into_response(),
    };
    ws.max_message_size(ome::MAX_MESSAGE_LEN)
        .max_frame_size(ome::MAX_MESSAGE_LEN)
        .on_upgrade(move |socket| async move {
            let mut sig = Signalling::new(pool(&st), (app, stream), params, bearer, peer.0);
            sig.query = query.unwrap_or_default();
            sig.run(&st, socket).await;
            sig.end(&st);
            drop(socket_permit);
        })
}

/// What the URL's query asks for.
#[derive(Debug, Default, Clone)]
struct Params {
    /// `?transport=tcp`: relay the viewer over TURN-over-TCP (OME's TcpRelay).
    tcp: bool,
    /// `?token=...`: the app's token, for players that cannot set an Authorization header
    /// on a WebSocket (browsers).
    token: Option<String>,
}

impl Params {
    fn from_query(q: Option<&str>) -> Self {
        let mut p = Params::default();
        for kv in q.unwrap_or("").split('&') {
            match kv.split_once('=') {
                Some(("transport", v)) => p.tcp = v.eq_ignore_ascii_case("tcp"),
                Some(("token", v)) => p.token = Some(v.to_string()),
                _ => {}
            }
        }
        p
    }
}

/// ICE servers handed to the player with its offer, as OME hands out its TcpRelay: only for
/// `?transport=tcp`, and then the TURN-over-TCP URL of tern's own TURN server (and its
/// TURN-over-TLS URL when `turn.tls_listen` is on) with fresh REST credentials (valid for
/// `turn.credential_lifetime`). A player given `iceServers` relays only
/// (OvenPlayer and OvenRtcTester set `iceTransportPolicy: relay`), so the viewer's media goes
/// over TCP to the TURN server and from there over UDP to the media port. Without TURN (no
/// `turn.listen`) or without `?transport=tcp` the list is empty and the offer has no
/// `iceServers`, as OME's has none without a TcpRelay.
fn ice_servers(st: &AppState, tcp: bool) -> Vec<IceServer> {
    let Some(t) = st.turn.as_ref().filter(|_| tcp) else {
        if tcp {
            debug!("?transport=tcp asked, but TURN is off");
        }
        return Vec::new();
    };
    let c = t.credentials("ome");
    // With TURN over TLS on, its `turns:` URL too: for players whose network passes only TLS.
    let urls = std::iter::once(format!("turn:{}:{}?transport=tcp", c.host, c.port))
        .chain(c.turns_url())
        .collect();
    vec![IceServer {
        urls,
        username: Some(c.username),
        credential: Some(c.credential),
    }]
}

/// Where a signalling socket is.
#[derive(Debug)]
enum Phase {
    /// No offer made (new, or after `stop`).
    Idle,
    /// An offer is out; waiting for the answer.
    Offered(ServerOffer),
    /// The viewer exists in the engine.
    Playing(ViewerId),
}

/// One signalling socket's state.
struct Signalling {
    /// The client's address (its pending sessions are limited).
    client: IpAddr,
    /// The client's address and port (for the admission webhook).
    peer: SocketAddr,
    /// The URL's query string.
    query: String,
    /// The admission of the current offer, until its answer makes the viewer.
    admitted: Option<PlayGrant>,
    app: String,
    stream: String,
    params: Params,
    bearer: Option<String>,
    /// The id the player must echo; `None` after `stop` until the next offer.
    id: Option<i64>,
    phase: Phase,
    /// Bytes this socket has counted in `pool`.
    counted: usize,
    /// The `ome_signalling` line ([`pool`]).
    pool: PoolCounter,
}

/// How long a socket may stay silent before it plays (no `request_offer`, or no `answer`
/// to an offer): OME players ask at once, so 10 s is generous.
const IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// A fresh offer id: 1..=i32::MAX, as OME mints them (players keep it as a JS number).
fn new_id() -> i64 {
    rand::rng().random_range(1..=i64::from(i32::MAX))
}

impl Signalling {
    fn new(
        pool: PoolCounter,
        (app, stream): (String, String),
        params: Params,
        bearer: Option<String>,
        peer: SocketAddr,
    ) -> Self {
        let mut s = Signalling {
            client: peer.ip(),
            peer,
            query: String::new(),
            admitted: None,
            app,
            stream,
            params,
            bearer,
            id: Some(new_id()),
            phase: Phase::Idle,
            counted: 0,
            pool,
        };
        s.pool.add(1, 0);
        s.recount();
        s
    }

    /// Brings this socket's bytes in its pool up to date.
    fn recount(&mut self) {
        let pending = match &self.phase {
            Phase::Offered(o) => {
                o.sdp.capacity() + o.candidates.iter().map(String::capacity).sum::<usize>()
            }
            _ => 0,
        };
        let now =
            std::mem::size_of::<Self>() + self.app.capacity() + self.stream.capacity() + pending;
        self.pool.add(0, now);
        self.pool.sub(0, self.counted);
        self.counted = now;
    }

    async fn run(&mut self, st: &AppState, mut socket: WebSocket) {
        loop {
            // Until a viewer plays, the player must keep asking: a socket that goes silent
            // before then is closed, so silent sockets cannot pile up.
            let next = if matches!(self.phase, Phase::Playing(_)) {
                socket.recv().await
            } else {
                match tokio::time::timeout(IDLE_TIMEOUT, socket.recv()).await {
                    Ok(next) => next,
                    Err(_) => {
                        info!(client = %self.client, "OME signalling closed: nothing asked for {IDLE_TIMEOUT:?}");
                        close_with(&mut socket, &SignalError::new(408, "Request timeout")).await;
                        return;
                    }
                }
            };
            let Some(frame) = next else {
                return;
            };
            let text = match frame {
                Ok(Message::Text(t)) => t.as_str().to_owned(),
                Ok(Message::Binary(b)) => match String::from_utf8(b.to_vec()) {
                    Ok(t) => t,
                    Err(_) => {
                        let e = SignalError::bad_request("Invalid request message");
                        info!(client = %self.client, "OME signalling closed: {e}");
                        close_with(&mut socket, &e).await;
                        return;
                    }
                },
                // After a Close, reading on lets the WebSocket send its closing reply; the
                // stream then ends.
                Ok(Message::Ping(_) | Message::Pong(_) | Message::Close(_)) => continue,
                Err(e) => {
                    // Oversized frames and protocol violations end here.
                    info!(client = %self.client, "OME signalling closed: {e}");
                    return;
                }
            };
            match self.handle(st, &text).await {
                Ok(Some(reply)) => {
                    if socket.send(Message::Text(reply.into())).await.is_err() {
                        return;
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    info!(client = %self.client, app = %self.app, stream = %self.stream, "OME signalling closed: {e}");
                    close_with(&mut socket, &e).await;
                    return;
                }
            }
        }
    }

    /// Handles one text frame: `Ok(Some(text))` to send, `Ok(None)` for nothing, `Err` to
    /// send as an error and close.
    async fn handle(&mut self, st: &AppState, text: &str) -> Result<Option<String>, SignalError> {
        let msg = ome::parse_message(text)?;
        if *msg.command() == Command::RequestOffer {
            return self.request_offer(st).await.map(Some);
        }
        // Every other command names the offer it belongs to (OME checks this first).
        if self.id.is_none() || msg.id() != self.id {
            return Err(SignalError::bad_request("Invalid ID"));
        }
        match msg.command() {
            Command::RequestOffer => Ok(None), // handled above
            Command::Answer => {
                let sdp = msg.answer_sdp()?;
                self.answer(st, sdp).await.map(|()| None)
            }
            Command::Candidate => {
                // ICE-lite: the viewer learns the player's address from its binding
                // requests, so trickled candidates are validated and need no action.
                let n = msg.candidates()?.len();
                debug!(candidates = n, "trickled candidates");
                Ok(None)
            }
            Command::Stop => {
                self.stop(st);
                self.id = None;
                Ok(None)
            }
            // One rendition: nothing to switch.
            Command::ChangeRendition => Ok(None),
            Command::P2p(c) => Err(SignalError::bad_request(format!(
                "P2P is not supported: {c}"
            ))),
            Command::Other(c) => Err(SignalError::bad_request(format!("Unknown command: {c}"))),
        }
    }

    async fn request_offer(&mut self, st: &AppState) -> Result<String, SignalError> {
        // A new offer replaces whatever the socket had (OvenPlayer asks again after a stop).
        self.stop(st);
        let id = new_id();
        let play = st
            .begin_play(PlayAsk {
                app: self.app.clone(),
                stream: self.stream.clone(),
                protocol: Protocol::Ome,
                client: self.peer,
                credentials: Credentials {
                    app_token: self.bearer.clone().or_else(|| self.params.token.clone()),
                    token: self.params.token.clone().or_else(|| self.bearer.clone()),
                    query: self.query.clone(),
                },
                session: Some(id.to_string()),
                from_node: false,
            })
            .await
            .map_err(signal_error)?;
        let key = play.key();
        let info = play.info();
        self.admitted = Some(play.admit(st).await.map_err(signal_error)?);
        let offer = session::offer(
            &LocalInfo {
                fingerprint: &st.fingerprint,
                candidate_ips: &st.candidate_ips,
                candidate_port: st.candidate_port,
                cname: &st.config().server.cname,
            },
            true,
            true,
            st.engine.stats.video(info.index),
            &mut || rand::rng().random(),
        );
        let text = ome::write_offer(
            id,
            &offer.sdp,
            &offer
                .candidates
                .iter()
                .map(|c| OfferCandidate {
                    candidate: c,
                    sdp_mline_index: 0,
                    sdp_mid: Some("0"),
                })
                .collect::<Vec<_>>(),
            &ice_servers(st, self.params.tcp),
        );
        debug!(%key, id, ufrag = offer.local_ufrag(), "offer");
        self.id = Some(id);
        self.phase = Phase::Offered(offer);
        self.recount();
        Ok(text)
    }

    async fn answer(&mut self, st: &AppState, sdp: &str) -> Result<(), SignalError> {
        let offer = match &self.phase {
            Phase::Offered(o) => o,
            Phase::Playing(_) => {
                return Err(SignalError::bad_request("The answer was already applied"));
            }
            Phase::Idle => return Err(SignalError::bad_request("There is no offer to answer")),
        };
        let params = offer.accept_answer(sdp).map_err(|e| match e {
            ServerAnswerError::Sdp(e) => {
                SignalError::bad_request(format!("Could not parse SDP: {e}"))
            }
            other => SignalError::new(403, format!("Forbidden: {other}")),
        })?;
        let key = format!("{}/{}", self.app, self.stream);
        let Some(info) = st.streams.get(&key) else {
            return Err(SignalError::new(404, "Cannot create offer"));
        };
        st.check_capacity().map_err(signal_error)?;
        let permit = st.pending_permit(self.client).map_err(signal_error)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let unavailable = || SignalError::new(503, "media engine stopped");
        st.engine
            .send(EngineCommand::AddViewer {
                stream: info.index,
                params: Box::new(params),
                reply: tx,
                permit: Some(permit),
            })
            .map_err(|_| unavailable())?;
        let viewer = rx.await.map_err(|_| unavailable())?;
        info!(%key, ?viewer, "OME-signalled viewer added");
        if let Some(grant) = self.admitted.take() {
            grant.started(st, SessionKey::Viewer(viewer.raw()));
        }
        self.phase = Phase::Playing(viewer);
        self.recount();
        Ok(())
    }

    /// Ends the viewer (if any) and drops the pending offer.
    fn stop(&mut self, st: &AppState) {
        if let Phase::Playing(id) = std::mem::replace(&mut self.phase, Phase::Idle) {
            let _ = st.engine.send(EngineCommand::RemoveViewer(id));
            info!(viewer = ?id, "OME-signalled viewer removed");
        }
        self.recount();
    }

    /// The socket is gone: free everything it held.
    fn end(&mut self, st: &AppState) {
        self.stop(st);
        self.pool.sub(1, self.counted);
        self.counted = 0;
    }
}

/// A session layer refusal as OME reports it: OME's own words where its players know them,
/// else the HTTP status of the same refusal and "Cannot create offer: why".
fn signal_error(r: Refusal) -> SignalError {
    match r {
        Refusal::Unauthorized { .. } => {
            SignalError::new(401, "Unauthorized: missing or wrong token")
        }
        // OME answers 404 for a stream with no media yet.
        Refusal::NotLive(_) | Refusal::NotFound(_) => {
            SignalError::new(404, format!("Cannot create offer: {r}"))
        }
        Refusal::Denied { status, reason } => SignalError::new(status, reason),
        Refusal::Capacity | Refusal::TooMany(_) => {
            SignalError::new(HttpError::status_of(&r).as_u16(), r.to_string())
        }
        other => SignalError::new(
            HttpError::status_of(&other).as_u16(),
            format!("Cannot create offer: {other}"),
        ),
    }
}

/// Sends the error as OME does, then closes the socket.
async fn close_with(socket: &mut WebSocket, e: &SignalError) {
    let _ = socket.send(Message::Text(e.to_json().into())).await;
    // 1008 policy violation for a client's mistake, 1011 for a server-side condition.
    let code = if e.code < 500 { 1008 } else { 1011 };
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            code,
            reason: "".into(),
        })))
        .await;
}

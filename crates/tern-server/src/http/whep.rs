//! WHEP (draft-ietf-wish-whep) over HTTP: POST offer → 201 answer, PATCH trickle / ICE
//! restart, DELETE, OPTIONS, HEAD; plus the player pages.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use rand::Rng;
use tern_pool::PoolCounter;
use tern_proto::sdp::{self, SessionDescription};
use tern_rtc::session::{self, LocalInfo};
use tern_rtc::viewer::{PWD_LEN, UFRAG_LEN};

use crate::config::Config;
use crate::media::{Command, EngineHandle, SessionMemory, ViewerId};

/// A stream known to the HTTP side.
#[derive(Debug, Clone)]
pub struct StreamInfo {
    /// Index in the engine's streams.
    pub index: usize,
}

/// What WHEP answers announce in `Link: rel="ice-server"` headers when TURN is on.
#[derive(Debug, Clone)]
pub struct TurnLinks {
    /// Host clients reach the TURN server at.
    pub host: IpAddr,
    /// Its port (UDP and TCP).
    pub port: u16,
    /// The REST secret credentials are minted with.
    pub secret: String,
    /// Credential lifetime, seconds.
    pub lifetime: u64,
}

impl TurnLinks {
    /// `Link` header values (RFC 9725 §4.6): the STUN URL, and TURN over UDP and over TCP with
    /// fresh REST credentials valid for [`TurnLinks::lifetime`].
    pub fn headers(&self) -> Vec<HeaderValue> {
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let (user, pass) =
            tern_rtc::turn::rest_credentials(&self.secret, "whep", unix + self.lifetime);
        let host = match self.host {
            IpAddr::V4(ip) => ip.to_string(),
            IpAddr::V6(ip) => format!("[{ip}]"),
        };
        let port = self.port;
        let cred = format!(
            "; rel=\"ice-server\"; username=\"{user}\"; credential=\"{pass}\"; credential-type=\"password\""
        );
        [
            format!("<stun:{host}:{port}>; rel=\"ice-server\""),
            format!("<turn:{host}:{port}?transport=udp>{cred}"),
            format!("<turn:{host}:{port}?transport=tcp>{cred}"),
        ]
        .iter()
        .filter_map(|v| HeaderValue::from_str(v).ok())
        .collect()
    }
}

/// One WHEP session as the HTTP side tracks it.
struct Session {
    viewer: ViewerId,
    etag: String,
    remote_ufrag: String,
    local_ufrag: String,
    local_pwd: String,
}

impl Session {
    /// Heap bytes of its strings.
    fn heap_bytes(&self) -> usize {
        self.etag.capacity()
            + self.remote_ufrag.capacity()
            + self.local_ufrag.capacity()
            + self.local_pwd.capacity()
    }
}

/// The WHEP sessions the HTTP side holds, booked in the `whep_sessions` memory pool.
struct SessionTable {
    map: HashMap<String, Session>,
    pool: PoolCounter,
    /// What is booked in `pool`: (items, used bytes, reserved bytes).
    booked: (usize, usize, usize),
}

impl SessionTable {
    fn new() -> Self {
        SessionTable {
            map: HashMap::new(),
            pool: PoolCounter::new("whep_sessions", std::mem::size_of::<(String, Session)>()),
            booked: (0, 0, 0),
        }
    }

    /// After a change: gives back the capacity a wave of departed sessions left (to nothing
    /// when empty, to twice the length when under a quarter full) and re-books the pool.
    /// O(sessions), on the HTTP side only.
    fn rebook(&mut self) {
        if self.map.is_empty() {
            self.map.shrink_to_fit();
        } else if self.map.capacity() > 4 * self.map.len() {
            self.map.shrink_to(2 * self.map.len());
        }
        let entry = std::mem::size_of::<(String, Session)>();
        let strings: usize = self
            .map
            .iter()
            .map(|(k, v)| k.capacity() + v.heap_bytes())
            .sum();
        let items = self.map.len();
        let used = items * entry + strings;
        let cap = self.map.capacity();
        // Hash table buckets (a power of two above capacity / 7 * 8), one control byte each.
        let buckets = if cap == 0 {
            0
        } else {
            (cap * 8 / 7).next_power_of_two()
        };
        let allocated = buckets * (entry + 1) + strings;
        let (i, u, a) = self.booked;
        self.pool.sub(i, u);
        self.pool.unreserve(a);
        self.pool.add(items, used);
        self.pool.reserve(allocated);
        self.booked = (items, used, allocated);
    }

    /// Heap bytes the HTTP side holds for one viewer's session.
    fn bytes_of(&self, viewer: ViewerId) -> Option<(&str, usize)> {
        self.map
            .iter()
            .find(|(_, s)| s.viewer == viewer)
            .map(|(k, s)| {
                (
                    k.as_str(),
                    std::mem::size_of::<(String, Session)>() + k.capacity() + s.heap_bytes(),
                )
            })
    }
}

/// State shared by the HTTP handlers.
pub struct AppState {
    /// Configuration.
    pub config: Config,
    /// `app/stream` → stream.
    pub streams: HashMap<String, StreamInfo>,
    /// The media engine.
    pub engine: EngineHandle,
    /// Our DTLS certificate fingerprint.
    pub fingerprint: [u8; 32],
    /// Address announced in the ICE candidate.
    pub candidate_ip: IpAddr,
    /// Media port announced in the ICE candidate.
    pub candidate_port: u16,
    /// TURN `Link` headers, when TURN is on.
    pub turn: Option<TurnLinks>,
    sessions: Mutex<SessionTable>,
    /// WHIP sessions: resource id → publisher.
    pub(crate) publishers: Mutex<HashMap<String, crate::media::PublisherId>>,
}

impl AppState {
    /// New state.
    pub fn new(
        config: Config,
        streams: HashMap<String, StreamInfo>,
        engine: EngineHandle,
        fingerprint: [u8; 32],
        candidate_ip: IpAddr,
        candidate_port: u16,
    ) -> Self {
        AppState {
            config,
            streams,
            engine,
            fingerprint,
            candidate_ip,
            candidate_port,
            turn: None,
            sessions: Mutex::new(SessionTable::new()),
            publishers: Mutex::new(HashMap::new()),
        }
    }

    /// Announces the TURN server in WHEP answers.
    pub fn with_turn(mut self, turn: Option<TurnLinks>) -> Self {
        self.turn = turn;
        self
    }

    /// Appends the TURN `Link` headers (when TURN is on) to a WHEP or WHIP answer.
    pub(crate) fn add_links(&self, h: &mut HeaderMap) {
        if let Some(t) = &self.turn {
            for v in t.headers() {
                h.append(header::LINK, v);
            }
        }
    }

    /// Number of WHEP sessions the HTTP side holds.
    pub fn session_count(&self) -> usize {
        self.sessions.lock().map(|s| s.map.len()).unwrap_or(0)
    }
}

/// `GET /v1/memory`: every named pool's used/allocated/utilization/peak and the counting
/// allocator's totals, as JSON; `?format=dd` gives the pjsua-`dd`-style text table, and
/// `sessions=1` adds one entry per viewer session (engine slot, engine heap, HTTP-side heap).
async fn memory(
    State(st): State<Arc<AppState>>,
    axum::extract::RawQuery(q): axum::extract::RawQuery,
) -> Response {
    let has = |want: &str| {
        q.as_deref()
            .is_some_and(|q| q.split('&').any(|kv| kv == want))
    };
    let sessions = if has("sessions=1") {
        let Ok(list) = st.engine.sessions().await else {
            return text(
                StatusCode::SERVICE_UNAVAILABLE,
                "media engine is not running",
            );
        };
        let table = st.sessions.lock().ok();
        let rows: Vec<SessionRow> = list
            .into_iter()
            .map(|m| {
                let (sid, http) = table
                    .as_ref()
                    .and_then(|t| t.bytes_of(m.id))
                    .map_or((String::new(), 0), |(k, b)| (k.to_string(), b));
                SessionRow { sid, http, m }
            })
            .collect();
        Some(rows)
    } else {
        None
    };
    let reports = tern_pool::MemoryRegistry::global().reports();
    let alloc = tern_pool::CountingAlloc::stats();
    if has("format=dd") {
        let mut out = tern_pool::format_dd(&reports, &alloc);
        if let Some(rows) = &sessions {
            out.push_str(&format_sessions(rows));
        }
        return text(StatusCode::OK, out);
    }
    let pools: Vec<serde_json::Value> = reports
        .iter()
        .map(|r| {
            serde_json::json!({
                "name": r.name,
                "used_bytes": r.used_bytes,
                "allocated_bytes": r.allocated_bytes,
                "utilization_pct": r.utilization_pct,
                "peak_bytes": r.peak_bytes,
                "items_in_use": r.items_in_use,
                "items_peak": r.items_peak,
            })
        })
        .collect();
    let mut body = serde_json::json!({
        "allocator": {
            "live_bytes": alloc.live_bytes,
            "peak_bytes": alloc.peak_bytes,
            "allocations": alloc.allocations,
            "frees": alloc.frees,
            "mapped_bytes": alloc.mapped_bytes,
        },
        "pools": pools,
    });
    if let Some(rows) = sessions {
        body["sessions"] = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "session": r.sid,
                    "viewer": format!("{:?}", r.m.id),
                    "state": r.m.state,
                    "handshake": r.m.handshake,
                    "engine_inline_bytes": r.m.inline_bytes,
                    "engine_heap_bytes": r.m.heap_bytes,
                    "http_bytes": r.http,
                    "total_bytes": r.m.inline_bytes + r.m.heap_bytes + r.http,
                })
            })
            .collect();
    }
    let mut r = (StatusCode::OK, body.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// `GET /v1/stats/current`: the engine's counters, in the envelope and field names of
/// OvenMediaEngine's `/v1/stats/current` where they exist (`totalConnections`,
/// `totalBytesOut`), plus tern's own (`packetsOut`, `retransmits`, ...). Counters are read
/// live; nothing is built or cached.
async fn stats_current(State(st): State<Arc<AppState>>) -> Response {
    let s = &st.engine.stats;
    let n = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let body = serde_json::json!({
        "statusCode": 200,
        "message": "OK",
        "response": {
            "totalConnections": s.viewers.load(Ordering::Relaxed),
            "handshakesInProgress": s.handshakes.load(Ordering::Relaxed),
            "handshakesDone": n(&s.handshakes_done),
            "handshakesFailed": n(&s.handshakes_failed),
            "totalBytesOut": n(&s.bytes_out),
            "packetsOut": n(&s.packets_out),
            "retransmits": n(&s.retransmits),
            "keyframeRequests": n(&s.keyframe_requests),
            "packetsIn": n(&s.packets_in),
            "droppedIn": n(&s.dropped_in),
            "sendErrors": n(&s.send_errors),
            "publishers": s.publishers.load(Ordering::Relaxed),
            "ingestPackets": n(&s.ingest_packets),
            "snapshotBuilds": s.snapshots.builds(),
        }
    });
    let mut r = (StatusCode::OK, body.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// One session's line of the per-session memory report.
struct SessionRow {
    sid: String,
    http: usize,
    m: SessionMemory,
}

/// The per-session table under the `dd` report: one line per viewer session.
fn format_sessions(rows: &[SessionRow]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<24} {:<12} {:>4} {:>8} {:>8} {:>8} {:>8}",
        "session", "state", "dtls", "slot", "heap", "http", "total"
    );
    let (mut slot, mut heap, mut http) = (0, 0, 0);
    for r in rows {
        let _ = writeln!(
            out,
            "{:<24} {:<12} {:>4} {:>8} {:>8} {:>8} {:>8}",
            if r.sid.is_empty() { "-" } else { &r.sid },
            r.m.state,
            if r.m.handshake { "yes" } else { "no" },
            r.m.inline_bytes,
            r.m.heap_bytes,
            r.http,
            r.m.inline_bytes + r.m.heap_bytes + r.http
        );
        slot += r.m.inline_bytes;
        heap += r.m.heap_bytes;
        http += r.http;
    }
    let _ = writeln!(
        out,
        "{:<24} {:<12} {:>4} {:>8} {:>8} {:>8} {:>8}",
        format!("{} sessions", rows.len()),
        "",
        "",
        slot,
        heap,
        http,
        slot + heap + http
    );
    out
}

/// The WHEP and page routes.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/v1/memory", get(memory))
        .route("/v1/stats/current", get(stats_current))
        .route("/{app}/{stream}", get(player))
        .route(
            "/{app}/{stream}/whep",
            axum::routing::post(whep_post)
                .options(whep_options_links)
                .head(whep_head),
        )
        .route(
            "/{app}/{stream}/whip",
            axum::routing::post(crate::http::whip::post).options(crate::http::whip::options),
        )
        .route(
            "/{app}/{stream}/whip/{session}",
            axum::routing::delete(crate::http::whip::delete)
                .patch(crate::http::whip::patch)
                .options(crate::http::whip::options),
        )
        .route(
            "/{app}/{stream}/whep/{session}",
            axum::routing::patch(whep_patch)
                .delete(whep_delete)
                .options(whep_options),
        )
        .merge(crate::http::api::routes())
        .with_state(state)
}

pub(crate) fn text(status: StatusCode, msg: impl Into<String>) -> Response {
    let mut r = (status, format!("{}\n", msg.into())).into_response();
    cors(r.headers_mut());
    r
}

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

fn random_token(n: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..n)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

fn to_array<const N: usize>(s: &str) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&s.as_bytes()[..N]);
    a
}

/// Checks app existence, stream existence and the Bearer token; returns the stream.
#[allow(clippy::result_large_err)] // the error is the HTTP response itself, built once
pub(crate) fn lookup(
    st: &AppState,
    headers: &HeaderMap,
    app: &str,
    stream: &str,
) -> Result<(StreamInfo, bool), Response> {
    let key = format!("{app}/{stream}");
    let Some(info) = st.streams.get(&key).cloned() else {
        return Err(text(
            StatusCode::NOT_FOUND,
            format!("stream {key} not found"),
        ));
    };
    if let Some(token) = st.config.app(app).and_then(|a| a.token.as_deref()) {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if given != Some(token) {
            let mut r = text(StatusCode::UNAUTHORIZED, "missing or wrong Bearer token");
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return Err(r);
        }
    }
    let live = st
        .engine
        .stats
        .live
        .get(info.index)
        .is_some_and(|l| l.load(Ordering::Relaxed));
    Ok((info, live))
}

pub(crate) fn content_type_is(headers: &HeaderMap, want: &str) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(want))
}

fn not_live(key: &str) -> Response {
    let mut r = text(StatusCode::CONFLICT, format!("stream {key} is not live"));
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    r
}

async fn whep_post(
    State(st): State<Arc<AppState>>,
    Path((app, stream)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (info, live) = match lookup(&st, &headers, &app, &stream) {
        Ok(x) => x,
        Err(r) => return r,
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
    let neg = match sdp::negotiate(&offer) {
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
    let vp = acc.params;
    let ufrag = String::from_utf8_lossy(&vp.local_ufrag).into_owned();
    let pwd = String::from_utf8_lossy(&vp.local_pwd).into_owned();
    let (tx, rx) = tokio::sync::oneshot::channel();
    if st
        .engine
        .send(Command::AddViewer {
            stream: info.index,
            params: Box::new(vp),
            reply: tx,
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
    let sid = random_token(22);
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
async fn whep_options_links(State(st): State<Arc<AppState>>) -> Response {
    let mut r = whep_options().await;
    st.add_links(r.headers_mut());
    r
}

async fn whep_options() -> Response {
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
async fn whep_head(
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

async fn whep_patch(
    State(st): State<Arc<AppState>>,
    Path((app, stream, sid)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = lookup(&st, &headers, &app, &stream) {
        return r;
    }
    if !content_type_is(&headers, "application/trickle-ice-sdpfrag") {
        return text(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/trickle-ice-sdpfrag",
        );
    }
    let Ok(body) = std::str::from_utf8(&body) else {
        return text(StatusCode::BAD_REQUEST, "body is not valid UTF-8");
    };
    let frag = match sdp::parse_sdpfrag(body) {
        Ok(f) => f,
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("malformed sdpfrag: {e}")),
    };
    let if_match = headers
        .get(header::IF_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let Ok(mut sessions) = st.sessions.lock() else {
        return text(StatusCode::INTERNAL_SERVER_ERROR, "session table poisoned");
    };
    let Some(sess) = sessions.map.get_mut(&sid) else {
        return text(StatusCode::NOT_FOUND, "no such WHEP session");
    };
    let restart = frag
        .ice_ufrag
        .as_deref()
        .is_some_and(|u| u != sess.remote_ufrag);
    match (&if_match, restart) {
        (None, true) => {
            return text(
                StatusCode::PRECONDITION_REQUIRED,
                "If-Match is required for an ICE restart",
            );
        }
        (Some(m), _) if m != "*" && *m != sess.etag => {
            return text(
                StatusCode::PRECONDITION_FAILED,
                "ETag does not match the session",
            );
        }
        _ => {}
    }
    if !restart {
        // ICE-lite: the server learns the viewer's address from its binding requests, so
        // trickled candidates need no action.
        let mut r = StatusCode::NO_CONTENT.into_response();
        cors(r.headers_mut());
        return r;
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
    let mid = frag.mids.first().cloned().unwrap_or_else(|| "0".into());
    let body = format!(
        "a=ice-lite\r\na=ice-ufrag:{}\r\na=ice-pwd:{}\r\nm=audio 9 UDP/TLS/RTP/SAVPF 0\r\na=mid:{}\r\na=candidate:1 1 udp 2130706431 {} {} typ host\r\na=end-of-candidates\r\n",
        sess.local_ufrag, sess.local_pwd, mid, st.candidate_ip, st.candidate_port
    );
    let mut r = (StatusCode::OK, body).into_response();
    let h = r.headers_mut();
    cors(h);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/trickle-ice-sdpfrag"),
    );
    if let Ok(v) = HeaderValue::from_str(&sess.etag) {
        h.insert(header::ETAG, v);
    }
    sessions.rebook();
    r
}

async fn whep_delete(
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

async fn index(State(st): State<Arc<AppState>>) -> Html<String> {
    let mut live: Vec<&String> = st
        .streams
        .iter()
        .filter(|(_, i)| {
            st.engine
                .stats
                .live
                .get(i.index)
                .is_some_and(|l| l.load(Ordering::Relaxed))
        })
        .map(|(k, _)| k)
        .collect();
    live.sort();
    let items: String = live
        .iter()
        .map(|k| format!("<li><a href=\"/{k}\">{k}</a></li>"))
        .collect();
    let list = if items.is_empty() {
        "<p>No live streams.</p>".to_string()
    } else {
        format!("<ul>{items}</ul>")
    };
    Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>tern</title></head>\
         <body><h1>tern: live streams</h1>{list}</body></html>"
    ))
}

/// `GET /{app}/{stream}`: the player page, or, with `Upgrade: websocket`, the
/// OvenMediaEngine-compatible signalling socket (see [`crate::http::ome`]).
async fn player(
    State(st): State<Arc<AppState>>,
    Path((app, stream)): Path<(String, String)>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    headers: HeaderMap,
    ws: Result<
        axum::extract::ws::WebSocketUpgrade,
        axum::extract::ws::rejection::WebSocketUpgradeRejection,
    >,
) -> Response {
    if let Ok(ws) = ws {
        return crate::http::ome::upgrade(st, ws, app, stream, query, &headers);
    }
    let page = PLAYER_HTML
        .replace("{{APP}}", &html_escape(&app))
        .replace("{{STREAM}}", &html_escape(&stream));
    Html(page).into_response()
}

fn html_escape(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '<' => "&lt;".into(),
            '>' => "&gt;".into(),
            '&' => "&amp;".into(),
            '"' => "&quot;".into(),
            '\'' => "&#39;".into(),
            c => c.to_string(),
        })
        .collect()
}

const PLAYER_HTML: &str = include_str!("player.html");

//! The state every HTTP handler shares: the configuration, the streams, the engine's handle,
//! what ICE candidates and TURN `Link` headers announce, and the WHEP session table (booked
//! in the `whep_sessions` memory pool). Surfaces (`whep.rs`, `whip.rs`, `ome.rs`, `api.rs`,
//! `pages.rs`, `memory.rs`) depend on this file; it depends on none of them.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use tern_pool::PoolCounter;

use crate::admission::Admission;
use crate::admission::{Action, Ask, SessionKey, Verdict};
use crate::config::Config;
use crate::directory::Directory;
use crate::http::reply::text;
use crate::limits::PerAddress;
use crate::media::{Command, EngineHandle, PublisherId, ViewerId};

pub use crate::directory::StreamInfo;

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
pub(super) struct Session {
    pub(super) viewer: ViewerId,
    pub(super) etag: String,
    pub(super) remote_ufrag: String,
    pub(super) local_ufrag: String,
    pub(super) local_pwd: String,
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
pub(super) struct SessionTable {
    pub(super) map: HashMap<String, Session>,
    pool: PoolCounter,
    /// What is booked in `pool`: (items, used bytes, reserved bytes).
    booked: (usize, usize, usize),
}

impl SessionTable {
    pub(super) fn new() -> Self {
        SessionTable {
            map: HashMap::new(),
            pool: PoolCounter::new("whep_sessions", std::mem::size_of::<(String, Session)>()),
            booked: (0, 0, 0),
        }
    }

    /// After a change: gives back the capacity a wave of departed sessions left (to nothing
    /// when empty, to twice the length when under a quarter full) and re-books the pool.
    /// O(sessions), on the HTTP side only.
    pub(super) fn rebook(&mut self) {
        tern_pool::shrink_map(&mut self.map);
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
    pub(super) fn bytes_of(&self, viewer: ViewerId) -> Option<(&str, usize)> {
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
    /// `app/stream` → stream: declared ones and those publishers made.
    pub streams: Directory,
    /// Who may publish and play (JWT, admission webhook), per app.
    pub admission: Admission,
    /// The HTTP runtime (RTMP connection threads block on it for admission; lifetimes are
    /// timed on it).
    pub runtime: std::sync::OnceLock<tokio::runtime::Handle>,
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
    pub(super) sessions: Mutex<SessionTable>,
    /// WHIP sessions: resource id → publisher.
    pub(crate) publishers: Mutex<HashMap<String, PublisherSession>>,
    /// Sessions (WHEP, WHIP, OME) each client address has that have not finished ICE and
    /// DTLS (`limits.pending_sessions_per_ip`); the engine drops a session's permit when it
    /// connects or ends.
    pub pending: Arc<PerAddress>,
    /// Open OME signalling sockets per client address (`limits.ome_connections_per_ip`).
    pub ome_sockets: Arc<PerAddress>,
    /// LL-HLS sessions and packagers.
    pub hls: Arc<crate::hls::Hls>,
    /// This node's part in a cluster (`[cluster]`), if any.
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
}

impl AppState {
    /// New state.
    pub fn new(
        config: Config,
        streams: Directory,
        engine: EngineHandle,
        fingerprint: [u8; 32],
        candidate_ip: IpAddr,
        candidate_port: u16,
    ) -> Self {
        let exempt = config.limits.exempt_ranges();
        let pending = PerAddress::new(
            "pending sessions",
            config.limits.pending_sessions_per_ip,
            &exempt,
        );
        let ome_sockets = PerAddress::new(
            "signalling connections",
            config.limits.ome_connections_per_ip,
            &exempt,
        );
        let hls = Arc::new(crate::hls::Hls::new(
            &config.hls,
            engine.stats.live.len(),
            engine.stats.clone(),
            &exempt,
        ));
        AppState {
            pending,
            ome_sockets,
            hls,
            admission: Admission::new(&config.apps),
            runtime: std::sync::OnceLock::new(),
            config,
            streams,
            engine,
            fingerprint,
            candidate_ip,
            candidate_port,
            turn: None,
            cluster: None,
            sessions: Mutex::new(SessionTable::new()),
            publishers: Mutex::new(HashMap::new()),
        }
    }

    /// Announces the TURN server in WHEP answers.
    pub fn with_turn(mut self, turn: Option<TurnLinks>) -> Self {
        self.turn = turn;
        self
    }

    /// Whether a request comes from another node of the cluster (it carries the cluster
    /// secret in [`crate::cluster::SECRET_HEADER`]).
    pub fn is_node_request(&self, headers: &HeaderMap) -> bool {
        self.cluster.as_ref().is_some_and(|c| {
            c.authenticates(
                headers
                    .get(crate::cluster::SECRET_HEADER)
                    .map(|v| v.as_bytes()),
            )
        })
    }

    /// Joins a cluster.
    pub fn with_cluster(mut self, cluster: Option<Arc<crate::cluster::Cluster>>) -> Self {
        self.cluster = cluster;
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

/// A publisher session as the HTTP side knows it (WHIP's resource, or an RTMP connection,
/// whose ETag and ufrag stay empty).
#[derive(Debug, Clone)]
pub(crate) struct PublisherSession {
    /// The publisher in the engine.
    pub(crate) id: PublisherId,
    /// The resource's entity tag (`If-Match` of an ICE restart).
    pub(crate) etag: String,
    /// The encoder's ICE ufrag: a PATCH with another one is an ICE restart.
    pub(crate) remote_ufrag: String,
}

/// Removes a WHIP/RTMP session from [`AppState::publishers`]; a wave of departed
/// publishers leaves no table sized for it behind.
pub fn forget_publisher(st: &AppState, sid: &str) -> Option<PublisherId> {
    let mut m = st.publishers.lock().ok()?;
    let id = m.remove(sid).map(|s| s.id);
    tern_pool::shrink_map(&mut m);
    id
}

/// The runtime to spawn on: the one set at start, or the caller's.
fn runtime(st: &AppState) -> Option<tokio::runtime::Handle> {
    st.runtime
        .get()
        .cloned()
        .or_else(|| tokio::runtime::Handle::try_current().ok())
}

/// An admitted session now exists as `key`: its end will be told to the webhook, and with a
/// `lifetime` the engine ends it then (a viewer with DTLS close_notify, a publisher's
/// session or connection closed).
pub(crate) fn admitted(st: &AppState, key: SessionKey, ask: Ask, lifetime: Option<Duration>) {
    st.admission.admitted(key, ask);
    let Some(after) = lifetime else {
        return;
    };
    let Some(rt) = runtime(st) else {
        return;
    };
    let engine = st.engine.clone();
    rt.spawn(async move {
        tokio::time::sleep(after).await;
        let cmd = match key {
            SessionKey::Viewer(raw) => Command::RemoveViewer(ViewerId::from_raw(raw)),
            SessionKey::Publisher(_) | SessionKey::Hls(_) => return,
        };
        let _ = engine.send(cmd);
    });
}

/// As [`admitted`], for a publisher (its id is needed to end it).
pub(crate) fn admitted_publisher(
    st: &AppState,
    id: PublisherId,
    ask: Ask,
    lifetime: Option<Duration>,
) {
    st.admission.admitted(SessionKey::Publisher(id.serial), ask);
    let (Some(after), Some(rt)) = (lifetime, runtime(st)) else {
        return;
    };
    let engine = st.engine.clone();
    rt.spawn(async move {
        tokio::time::sleep(after).await;
        let _ = engine.send(Command::RemovePublisher(id));
    });
}

/// Why a publisher cannot have a stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PublishRefusal {
    /// The name breaks the naming rule.
    #[error("stream name {0:?} {rule}", rule = crate::config::NAME_RULE)]
    BadName(String),
    /// No such app, or the app takes only its declared streams.
    #[error("stream {0} not found")]
    NotFound(String),
    /// Every dynamic stream slot is taken.
    #[error("{0}")]
    Full(crate::directory::ClaimError),
}

impl PublishRefusal {
    /// The HTTP status for it.
    pub fn status(&self) -> StatusCode {
        match self {
            PublishRefusal::BadName(_) => StatusCode::BAD_REQUEST,
            PublishRefusal::NotFound(_) => StatusCode::NOT_FOUND,
            PublishRefusal::Full(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// Whether a publisher may have stream `app/stream` (before admission): it exists, or its
/// app makes streams on any valid name.
pub fn may_publish(st: &AppState, app: &str, stream: &str) -> Result<(), PublishRefusal> {
    let key = format!("{app}/{stream}");
    if st.streams.contains(&key) {
        return Ok(());
    }
    if !crate::config::valid_name(stream) {
        return Err(PublishRefusal::BadName(stream.to_string()));
    }
    match st.config.app(app) {
        Some(a) if a.dynamic => Ok(()),
        _ => Err(PublishRefusal::NotFound(key)),
    }
}

/// The stream `app/stream` for an admitted publisher, made (and announced to the engine
/// and the event stream) if it does not exist yet.
pub fn claim_stream(st: &AppState, app: &str, stream: &str) -> Result<StreamInfo, PublishRefusal> {
    may_publish(st, app, stream)?;
    let key = format!("{app}/{stream}");
    let (info, made) = st
        .streams
        .claim(&key, std::time::Instant::now())
        .map_err(PublishRefusal::Full)?;
    if made {
        let _ = st.engine.send(Command::BindStream {
            index: info.index,
            key: key.as_str().into(),
        });
        st.engine.stats.snapshots.stream_created(&key);
        tracing::info!("stream {key} created by a publisher");
    }
    Ok(info)
}

/// Removes publisher-made streams past their app's grace with no publisher: their viewers
/// end, their rings and counters are freed, `stream.removed` goes out. Run once a second.
pub fn sweep_streams(st: &AppState) {
    let stats = &st.engine.stats;
    let gone = st.streams.expired(
        std::time::Instant::now(),
        |app| {
            Duration::from_secs(
                st.config
                    .app(app)
                    .map_or(crate::config::DEFAULT_IDLE_GRACE_S, |a| a.idle_grace_s),
            )
        },
        |i| {
            stats
                .publishing
                .get(i)
                .is_some_and(|f| f.load(Ordering::Relaxed))
        },
    );
    for (key, index) in gone {
        let _ = st.engine.send(Command::UnbindStream { index });
        for v in [
            &stats.stream_packets,
            &stats.stream_video,
            &stats.stream_bytes,
            &stats.stream_nacks,
            &stats.stream_keyframe_requests,
            &stats.stream_reported_lost,
        ] {
            if let Some(c) = v.get(index) {
                c.store(0, Ordering::Relaxed);
            }
        }
        stats.snapshots.stream_removed(&key);
        st.streams.release(index);
        tracing::info!("stream {key} removed: no publisher for its grace");
    }
}

/// The token a request carries for admission: its Bearer token, else its `?token=` value.
pub(crate) fn request_token(headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string)
        .or_else(|| query.and_then(crate::admission::query_token))
}

/// The admission step of a WHEP or WHIP POST: asks the app's gate (JWT, webhook) about
/// `action` by `client`, with the request's token and query, for a session that will be
/// called `session`. The ask (kept for the close notification) and the session's lifetime,
/// or the refusal as the response.
#[allow(clippy::too_many_arguments, clippy::result_large_err)] // the request's parts; the error is the response
pub(super) async fn admit_request(
    st: &AppState,
    action: Action,
    protocol: &'static str,
    (app, stream): (&str, &str),
    client: std::net::SocketAddr,
    headers: &HeaderMap,
    query: Option<String>,
    session: &str,
) -> Result<(Ask, Option<Duration>), Response> {
    let ask = Ask {
        action,
        protocol,
        app: app.to_string(),
        stream: stream.to_string(),
        client,
        token: request_token(headers, query.as_deref()),
        query: query.unwrap_or_default(),
        session: session.to_string(),
    };
    match st.admission.admit(&ask).await {
        Verdict::Allow { lifetime } => Ok((ask, lifetime)),
        Verdict::Deny { status, reason } => Err(crate::http::reply::denied(status, reason)),
    }
}

/// Checks the app's static Bearer token (`app.token`), if it has one.
#[allow(clippy::result_large_err)] // the error is the HTTP response itself, built once
pub(super) fn check_token(st: &AppState, headers: &HeaderMap, app: &str) -> Result<(), Response> {
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
    Ok(())
}

/// Checks app existence, stream existence and the Bearer token; returns the stream.
#[allow(clippy::result_large_err)] // the error is the HTTP response itself, built once
pub(super) fn lookup(
    st: &AppState,
    headers: &HeaderMap,
    app: &str,
    stream: &str,
) -> Result<(StreamInfo, bool), Response> {
    let key = format!("{app}/{stream}");
    let Some(info) = st.streams.get(&key) else {
        return Err(text(
            StatusCode::NOT_FOUND,
            format!("stream {key} not found"),
        ));
    };
    // Another node (an edge pulling the stream) skips the app's token, as it skips
    // admission: it proved itself with the cluster secret.
    if !st.is_node_request(headers) {
        check_token(st, headers, app)?;
    }
    let live = st
        .engine
        .stats
        .live
        .get(info.index)
        .is_some_and(|l| l.load(Ordering::Relaxed));
    Ok((info, live))
}

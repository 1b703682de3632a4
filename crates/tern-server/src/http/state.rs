//! The state every HTTP handler shares: the configuration, the streams, the engine's handle,
//! what ICE candidates and TURN `Link` headers announce, and the WHEP session table (booked
//! in the `whep_sessions` memory pool). Surfaces (`whep.rs`, `whip.rs`, `ome.rs`, `api.rs`,
//! `pages.rs`, `memory.rs`) depend on this file; it depends on none of them.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use tern_pool::PoolCounter;

use crate::config::Config;
use crate::http::reply::text;
use crate::limits::PerAddress;
use crate::media::{EngineHandle, PublisherId, ViewerId};

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
    pub(super) sessions: Mutex<SessionTable>,
    /// WHIP sessions: resource id → publisher.
    pub(crate) publishers: Mutex<HashMap<String, PublisherId>>,
    /// Sessions (WHEP, WHIP, OME) each client address has that have not finished ICE and
    /// DTLS (`limits.pending_sessions_per_ip`); the engine drops a session's permit when it
    /// connects or ends.
    pub pending: Arc<PerAddress>,
    /// Open OME signalling sockets per client address (`limits.ome_connections_per_ip`).
    pub ome_sockets: Arc<PerAddress>,
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
        AppState {
            pending,
            ome_sockets,
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

/// Checks app existence, stream existence and the Bearer token; returns the stream.
#[allow(clippy::result_large_err)] // the error is the HTTP response itself, built once
pub(super) fn lookup(
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

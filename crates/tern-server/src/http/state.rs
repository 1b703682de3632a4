//! The HTTP side's state: the session layer's [`Core`] every surface shares, and what is
//! HTTP's own: the WHEP session table (booked in the `whep_sessions` memory pool). Surfaces
//! (`whep.rs`, `whip.rs`, `ome.rs`, `api.rs`, `pages.rs`, `memory.rs`) depend on this
//! file; it depends on none of them.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, HeaderValue, header};
use tern_pool::PoolCounter;

use crate::http::error::HttpError;
use crate::http::extract::{StreamPath, bearer};
use crate::http::tls::CertStore;
use crate::media::ViewerId;
use crate::session::{Core, Refusal, StreamInfo, TurnLinks};

/// `Link` header values (RFC 9725 §4.6) for the TURN server: the STUN URL, and TURN over
/// UDP, over TCP and (when `turn.tls_listen` is on) over TLS with fresh REST credentials.
fn link_headers(t: &TurnLinks) -> Vec<HeaderValue> {
    let c = t.credentials("whep");
    let (host, port) = (&c.host, c.port);
    let cred = format!(
        "; rel=\"ice-server\"; username=\"{}\"; credential=\"{}\"; credential-type=\"password\"",
        c.username, c.credential
    );
    [
        format!("<stun:{host}:{port}>; rel=\"ice-server\""),
        format!("<turn:{host}:{port}?transport=udp>{cred}"),
        format!("<turn:{host}:{port}?transport=tcp>{cred}"),
    ]
    .into_iter()
    .chain(c.turns_url().map(|u| format!("<{u}>{cred}")))
    .collect::<Vec<_>>()
    .iter()
    .filter_map(|v| HeaderValue::from_str(v).ok())
    .collect()
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

/// State shared by the HTTP handlers: the session layer's [`Core`] (reached through
/// `Deref`, so handlers read `st.engine`, `st.config`, ...) and the WHEP session table.
pub struct AppState {
    /// What every surface shares.
    pub core: Arc<Core>,
    pub(super) sessions: Mutex<SessionTable>,
    /// The HTTPS certificate, when `server.https` is on (for `/metrics`).
    pub tls: Option<Arc<CertStore>>,
    /// The `ome_signalling` memory line, in the server's registry (made by the first
    /// signalling socket, `http/ome.rs`, which knows its item size).
    pub(super) ome_pool: std::sync::OnceLock<tern_pool::PoolCounter>,
    /// Reloads and edits of the configuration (`POST /v1/config/reload`, the config API,
    /// SIGHUP).
    pub reload: Option<Arc<crate::reload::Reload>>,
}

impl Deref for AppState {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl AppState {
    /// The HTTP side over `core`.
    pub fn new(core: Arc<Core>) -> Self {
        AppState {
            ome_pool: std::sync::OnceLock::new(),
            reload: None,
            core,
            sessions: Mutex::new(SessionTable::new()),
            tls: None,
        }
    }

    /// With the configuration's reloader.
    pub fn with_reload(mut self, reload: Option<Arc<crate::reload::Reload>>) -> Self {
        self.reload = reload;
        self
    }

    /// With the HTTPS certificate store.
    pub fn with_tls(mut self, tls: Option<Arc<CertStore>>) -> Self {
        self.tls = tls;
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

    /// Appends the TURN `Link` headers (when TURN is on) to a WHEP or WHIP answer.
    pub(crate) fn add_links(&self, h: &mut HeaderMap) {
        if let Some(t) = &self.turn {
            for v in link_headers(t) {
                h.append(header::LINK, v);
            }
        }
    }

    /// The stream of a request on an existing resource (WHEP HEAD, PATCH, DELETE; WHIP
    /// PATCH, DELETE): it must exist and the app's token match (another node's request
    /// skips the token: it proved itself with the cluster secret). The stream, and whether
    /// it is live.
    pub(super) fn lookup(
        &self,
        headers: &HeaderMap,
        path: &StreamPath,
    ) -> Result<(StreamInfo, bool), HttpError> {
        let info = self
            .streams
            .get(&path.key())
            .ok_or_else(|| Refusal::NotFound(path.key()))?;
        if !self.is_node_request(headers) {
            self.check_app_token(&path.app, bearer(headers))?;
        }
        Ok((info, self.is_live(info)))
    }
}

//! Admission: who may publish and play, decided per app by a signed token (JWT: an HS256
//! secret, a public key or an identity provider's JWKS, `crate::jwt`) and by the operator's
//! own HTTP service (the admission webhook), before any session is made.
//!
//! The contract (`docs/src/security.md`, "Admission"): before every publish (RTMP, WHIP) and play (WHEP, OME
//! signalling) tern POSTs `{"action", "protocol", "app", "stream", "client": {"address"},
//! "token", "query", "session"}` and the webhook answers 200 with `{"allow", "reason"?,
//! "lifetime_s"?}`. A timeout, an error or another status means `on_error`. Requests in
//! flight are capped per app (`max_in_flight`, past it 503). When an admitted session ends,
//! the same fields go out again with `"action": "close"` and a `"reason"`, fire and forget
//! through a bounded queue (a full queue drops and counts).
//!
//! The webhook client is hyper's (pooled connections; `http://`, or `https://` with HTTP/1.1
//! or h2 as ALPN picks, trusting the system's roots and `server.ca_file`: `crate::outbound`);
//! the JWKS are fetched with the same client. Everything here runs on the HTTP runtime (RTMP
//! connection threads block on it); the media threads never wait for it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Limited};
use serde::Deserialize;
use tokio::sync::{Semaphore, broadcast, mpsc};
use tracing::{debug, warn};

use crate::config::{AdmissionConfig, AppConfig, ConfigError};
pub use crate::jwt::Claims;
use crate::jwt::{Jwks, JwksMetrics, Jwt, Keys, PublicKey, Wanted};
use crate::metrics::{Expose, Exposed, Exposition, Kind};
use crate::outbound::{HttpsClient, Outbound, error_chain, post_json};
use crate::snapshot::{Event, EventKind, SnapshotRef};

/// What a session wants to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Publish a stream (RTMP, WHIP).
    Publish,
    /// Play a stream (WHEP, OME signalling).
    Play,
    /// Fetch a stream's thumbnail (`thumb.jpg`): a play, as a token sees it.
    Thumbnail,
}

impl Action {
    /// The action as the webhook spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Publish => "publish",
            Action::Play => "play",
            Action::Thumbnail => "thumbnail",
        }
    }

    /// The JWT `act` claim that allows it: a viewer's `play` token also fetches the
    /// stream's thumbnail.
    pub fn token_act(self) -> &'static str {
        match self {
            Action::Publish => "publish",
            Action::Play | Action::Thumbnail => "play",
        }
    }
}

/// The surface a session comes through, as the webhook's `protocol` field spells it.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// WHIP ingest.
    Whip,
    /// RTMP ingest.
    Rtmp,
    /// SRT ingest.
    Srt,
    /// WHEP playback.
    Whep,
    /// OvenMediaEngine-style WebSocket signalling.
    Ome,
    /// LL-HLS playback.
    Hls,
    /// A plain HTTP fetch of a stream's resource (its thumbnail).
    Http,
    /// An RTSP camera the server pulls (configured, so never asked about: named for
    /// completeness of the kinds a publisher can be).
    Rtsp,
    /// An edge's upstream session from the stream's origin node (it carries the cluster
    /// secret, so it is never asked about either).
    Edge,
}

impl From<crate::media::Source> for Protocol {
    /// The surface a publisher of that kind comes through.
    fn from(s: crate::media::Source) -> Self {
        use crate::media::Source;
        match s {
            Source::Whip => Protocol::Whip,
            Source::Rtmp => Protocol::Rtmp,
            Source::Srt => Protocol::Srt,
            Source::Rtsp => Protocol::Rtsp,
            Source::Edge => Protocol::Edge,
        }
    }
}

impl Protocol {
    /// The name the webhook and logs use.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Whip => "whip",
            Protocol::Rtmp => "rtmp",
            Protocol::Srt => "srt",
            Protocol::Whep => "whep",
            Protocol::Ome => "ome",
            Protocol::Hls => "hls",
            Protocol::Http => "http",
            Protocol::Rtsp => "rtsp",
            Protocol::Edge => "edge",
        }
    }

    /// Whether its sessions handshake (ICE, DTLS) on the media port, so that a publisher's
    /// pending session counts against `limits.pending_sessions_per_ip`.
    pub fn handshakes_on_media_port(self) -> bool {
        matches!(self, Protocol::Whip | Protocol::Whep | Protocol::Ome)
    }
}

/// One admission question.
#[derive(Debug, Clone)]
pub struct Ask {
    /// Publish or play.
    pub action: Action,
    /// The surface asking.
    pub protocol: Protocol,
    /// App name.
    pub app: String,
    /// Stream name.
    pub stream: String,
    /// The client's address.
    pub client: SocketAddr,
    /// The Bearer token, or the `?token=` value.
    pub token: Option<String>,
    /// The request's query string, "" if none.
    pub query: String,
    /// The id the session gets (WHEP/WHIP resource id, OME offer id, RTMP connection id).
    pub session: String,
}

/// The answer to an [`Ask`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Go ahead; end the session after `lifetime` if set.
    Allow {
        /// When the session must end (webhook `lifetime_s`, or the JWT's `exp` with
        /// `end_at_exp`).
        lifetime: Option<Duration>,
    },
    /// Refused: `status` is 401 (no or bad token), 403 (refused) or 503 (webhook busy).
    Deny {
        /// HTTP status to answer with.
        status: u16,
        /// Why, for the client.
        reason: String,
    },
}

/// Which session a close notification is for: the engine's ids, as its events carry them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionKey {
    /// A viewer (`ViewerId::raw`).
    Viewer(u64),
    /// A publisher (`PublisherId::serial`).
    Publisher(u64),
    /// An HLS session (its serial in [`crate::hls::Hls`]).
    Hls(u64),
}

/// Results counted in `tern_admission_total{action,result}`.
const RESULTS: [&str; 4] = ["allow", "deny", "error", "busy"];
/// Upper bounds (seconds) of the webhook latency histogram's buckets.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];
/// Close notifications waiting to be sent; past it they are dropped and counted.
const CLOSE_QUEUE: usize = 4096;
/// Largest webhook answer read.
const MAX_ANSWER: usize = 16 * 1024;

/// Counters for the metrics endpoint.
#[derive(Debug, Default)]
pub struct AdmissionStats {
    /// `[action][result]`: publish/play × allow/deny/error/busy.
    totals: [[AtomicU64; 4]; 3],
    /// Webhook latency: count per bucket (made cumulative when written), sum in microseconds.
    buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    latency_count: AtomicU64,
    latency_sum_us: AtomicU64,
    /// Close notifications sent, failed, and dropped because the queue was full.
    pub closes_sent: AtomicU64,
    /// Close notifications the webhook did not take (error or timeout).
    pub closes_failed: AtomicU64,
    /// Close notifications dropped (queue full).
    pub closes_dropped: AtomicU64,
}

impl AdmissionStats {
    fn count(&self, action: Action, result: &str) {
        let a = match action {
            Action::Publish => 0,
            Action::Play => 1,
            Action::Thumbnail => 2,
        };
        if let Some(r) = RESULTS.iter().position(|x| *x == result) {
            self.totals[a][r].fetch_add(1, Ordering::Relaxed);
        }
    }

    fn latency(&self, d: Duration) {
        let s = d.as_secs_f64();
        if let Some(i) = LATENCY_BUCKETS.iter().position(|b| s <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.latency_count.fetch_add(1, Ordering::Relaxed);
        self.latency_sum_us
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }
}

impl Expose for AdmissionStats {
    /// The `tern_admission_*` families.
    fn write_metrics(&self, o: &mut Exposition) {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut f = o.family(
            "tern_admission_total",
            "Admission decisions (JWT and webhook) by action and result.",
            Kind::Counter,
        );
        for (action, totals) in ["publish", "play", "thumbnail"].iter().zip(&self.totals) {
            for (result, n) in RESULTS.iter().zip(totals) {
                f.sample(&[("action", action), ("result", result)], l(n));
            }
        }
        let mut f = o.family(
            "tern_admission_webhook_seconds",
            "Time the admission webhook took to answer.",
            Kind::Histogram,
        );
        let mut cum = 0;
        for (b, n) in LATENCY_BUCKETS.iter().zip(&self.buckets) {
            cum += l(n);
            f.series("_bucket", &[("le", b)], cum);
        }
        let count = l(&self.latency_count);
        f.series("_bucket", &[("le", &"+Inf")], count);
        f.series("_sum", &[], l(&self.latency_sum_us) as f64 / 1e6);
        f.series("_count", &[], count);
        let mut f = o.family(
            "tern_admission_close_notifications_total",
            "Close notifications to the webhook by outcome.",
            Kind::Counter,
        );
        for (outcome, n) in [
            ("sent", &self.closes_sent),
            ("failed", &self.closes_failed),
            ("dropped", &self.closes_dropped),
        ] {
            f.sample(&[("outcome", &outcome)], l(n));
        }
    }
}

/// One app's webhook.
struct Webhook {
    uri: hyper::Uri,
    timeout: Duration,
    allow_on_error: bool,
    slots: Arc<Semaphore>,
}

#[derive(Default)]
struct Gate {
    webhook: Option<Webhook>,
    jwt: Option<Jwt>,
}

/// A close notification: the ask that was admitted, and why the session ended.
struct CloseNote {
    uri: hyper::Uri,
    timeout: Duration,
    body: Vec<u8>,
}

/// The gate of each app of `apps` that checks anything; a JWKS of `old`'s with the same app,
/// URL and refresh is kept (its fetched set with it).
fn gates_of(
    apps: &[AppConfig],
    old: &HashMap<String, Gate>,
) -> Result<HashMap<String, Gate>, ConfigError> {
    let mut gates = HashMap::new();
    for (i, a) in apps.iter().enumerate() {
        let mut g = Gate::default();
        if let Some(AdmissionConfig {
            url,
            timeout_ms,
            on_error,
            max_in_flight,
        }) = &a.admission
            && let Ok(uri) = url.parse::<hyper::Uri>()
        {
            g.webhook = Some(Webhook {
                uri,
                timeout: Duration::from_millis(*timeout_ms),
                allow_on_error: *on_error == crate::config::OnError::Allow,
                slots: Arc::new(Semaphore::new(*max_in_flight)),
            });
        }
        let keys = if let Some(secret) = &a.jwt_secret {
            Some(Keys::Secret(jsonwebtoken::DecodingKey::from_secret(
                secret.as_bytes(),
            )))
        } else if let Some(path) = &a.jwt_public_key {
            let bad = |m: String| {
                ConfigError::invalid(
                    format!("app[{i}].jwt_public_key"),
                    format!("{}: {m}", path.display()),
                )
            };
            let pem = std::fs::read(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
            Some(Keys::Public(PublicKey::from_pem(&pem).map_err(bad)?))
        } else {
            let refresh = Duration::from_secs(a.jwt_jwks_refresh_s);
            a.jwt_jwks_url.as_deref().and_then(|u| {
                let kept = old
                    .get(&a.name)
                    .and_then(|g| match g.jwt.as_ref().map(|j| &j.keys) {
                        Some(Keys::Jwks(j)) if j.is(&a.name, u, refresh) => Some(j.clone()),
                        _ => None,
                    });
                kept.or_else(|| Jwks::new(&a.name, u, refresh).map(Arc::new))
                    .map(Keys::Jwks)
            })
        };
        g.jwt = keys.map(|keys| Jwt {
            keys,
            end_at_exp: a.end_at_exp,
            issuer: a.jwt_issuer.clone(),
            audience: a.jwt_audience.clone(),
        });
        if g.webhook.is_some() || g.jwt.is_some() {
            gates.insert(a.name.clone(), g);
        }
    }
    Ok(gates)
}

/// The JWKS of `gates`.
fn jwks_of(gates: &HashMap<String, Gate>) -> Vec<Arc<Jwks>> {
    gates
        .values()
        .filter_map(|g| match g.jwt.as_ref().map(|j| &j.keys) {
            Some(Keys::Jwks(j)) => Some(j.clone()),
            _ => None,
        })
        .collect()
}

/// Gates made for a reload ([`Admission::prepare`]), not yet in force.
pub struct Gates(HashMap<String, Gate>);

/// Every app's gate, the webhook client, the close queue and the counters.
pub struct Admission {
    /// By app: replaced whole by a reload.
    gates: Arc<RwLock<Arc<HashMap<String, Gate>>>>,
    client: HttpsClient,
    /// Counters for `/metrics`.
    pub stats: Arc<AdmissionStats>,
    /// Admitted sessions of apps with a webhook, waiting for their end.
    admitted: Mutex<HashMap<SessionKey, (String, Ask)>>,
    closes: Mutex<Option<mpsc::Sender<CloseNote>>>,
    /// Whether the event stream is read for session ends (once an app asks a webhook:
    /// [`Admission::watch_closes`]).
    closes_watched: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("apps", &self.current().keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Admission {
    /// The gates of `apps` (validated config), calling out through `outbound`. Reads each
    /// `jwt_public_key` file: one that does not load is the error, naming the key. The close
    /// queue and the JWKS fetches start with [`Admission::start`].
    pub fn new(apps: &[AppConfig], outbound: &Outbound) -> Result<Self, ConfigError> {
        Ok(Admission {
            gates: Arc::new(RwLock::new(Arc::new(gates_of(apps, &HashMap::new())?))),
            client: outbound.client(),
            stats: Arc::new(AdmissionStats::default()),
            admitted: Mutex::new(HashMap::new()),
            closes: Mutex::new(None),
            closes_watched: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The gates of `apps` (a reload's configuration, checked), to put in force with
    /// [`Admission::replace`]: an app whose JWKS (URL and refresh) is unchanged keeps the
    /// set it fetched. Reads each `jwt_public_key` file: one that does not load is the
    /// error, and nothing changes.
    pub fn prepare(&self, apps: &[AppConfig]) -> Result<Gates, ConfigError> {
        Ok(Gates(gates_of(apps, &self.current())?))
    }

    /// Puts `gates` in force: sessions admitted from now on pass them (open sessions keep
    /// what admitted them); a new JWKS starts its fetches, a dropped one's end.
    pub fn replace(&self, gates: Gates, rt: Option<&tokio::runtime::Handle>) {
        let old = self.current();
        for g in gates.0.values() {
            if let Some(Keys::Jwks(j)) = g.jwt.as_ref().map(|j| &j.keys)
                && !old.values().any(|o| matches!(o.jwt.as_ref().map(|j| &j.keys), Some(Keys::Jwks(k)) if Arc::ptr_eq(k, j)))
                && let Some(rt) = rt
            {
                rt.spawn(Jwks::refresh_forever(Arc::downgrade(j), self.client.clone()));
            }
        }
        *self.gates.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(gates.0);
    }

    /// The gates in force.
    fn current(&self) -> Arc<HashMap<String, Gate>> {
        self.gates.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The apps' JWKS.
    fn jwks(&self) -> Vec<Arc<Jwks>> {
        jwks_of(&self.current())
    }

    /// Whether session ends are to be watched now for close notifications: an app asks a
    /// webhook and nobody watches yet (true once: the caller starts
    /// [`Admission::close_notifications`]). Without webhooks the event stream has no reader
    /// for this.
    pub fn watch_closes(&self) -> bool {
        self.has_webhooks() && !self.closes_watched.swap(true, Ordering::Relaxed)
    }

    /// Whether any app asks a webhook (then session ends are watched for close
    /// notifications).
    pub fn has_webhooks(&self) -> bool {
        self.current().values().any(|g| g.webhook.is_some())
    }

    /// Whether `app` checks anything (token or webhook) at all.
    pub fn guards(&self, app: &str) -> bool {
        self.current().contains_key(app)
    }

    /// Registers the counters with the server's `/metrics` (`exposed`), starts each JWKS's
    /// fetches (now, then every `jwt_jwks_refresh_s`) and, when an app asks a webhook, the
    /// close-notification sender, all on the current runtime.
    pub fn start(&self, exposed: &Exposed) {
        exposed.add(self.stats.clone());
        for j in &self.jwks() {
            tokio::spawn(Jwks::refresh_forever(
                Arc::downgrade(j),
                self.client.clone(),
            ));
        }
        // The sets in force at each scrape (a reload may add or drop some).
        let gates = self.gates.clone();
        exposed.add(Arc::new(JwksMetrics(Box::new(move || {
            jwks_of(&gates.read().unwrap_or_else(|e| e.into_inner()))
        }))));
        // The close queue runs whether or not an app asks a webhook now: a reload may add
        // one.
        let (tx, mut rx) = mpsc::channel::<CloseNote>(CLOSE_QUEUE);
        if let Ok(mut c) = self.closes.lock() {
            *c = Some(tx);
        }
        let client = self.client.clone();
        let stats = self.stats.clone();
        tokio::spawn(async move {
            while let Some(n) = rx.recv().await {
                let req = post_json(&n.uri, n.body);
                let ok = matches!(
                    tokio::time::timeout(n.timeout, client.request(req)).await,
                    Ok(Ok(r)) if r.status().is_success()
                );
                let c = if ok {
                    &stats.closes_sent
                } else {
                    &stats.closes_failed
                };
                c.fetch_add(1, Ordering::Relaxed);
            }
        });
    }

    /// The close notifications: each admitted session's end (a viewer or a publisher
    /// leaving, read off the event stream `events`) is told to its webhook, until the stream
    /// closes. Runs on the runtime that [`Admission::start`] started the sender on.
    pub async fn close_notifications(&self, mut events: broadcast::Receiver<Event>) {
        loop {
            match events.recv().await {
                Ok(e) => {
                    let key = match (&e.kind, &e.snapshot) {
                        (EventKind::ViewerLeft, SnapshotRef::Viewer(v)) => SessionKey::Viewer(v.id),
                        (EventKind::PublisherLeft, SnapshotRef::Publisher(p)) => {
                            SessionKey::Publisher(p.id)
                        }
                        _ => continue,
                    };
                    self.ended(key, e.reason.unwrap_or("ended"));
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    warn!(
                        "admission: {n} session events missed; their close notifications are lost"
                    );
                    self.stats.closes_dropped.fetch_add(n, Ordering::Relaxed);
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    /// Decides `ask`: the app's JWT first (if set), then its webhook (if set).
    pub async fn admit(&self, ask: &Ask) -> Verdict {
        let gates = self.current();
        let Some(gate) = gates.get(&ask.app) else {
            return Verdict::Allow { lifetime: None };
        };
        let mut lifetime = None;
        if let Some(jwt) = &gate.jwt {
            let want = Wanted {
                app: &ask.app,
                stream: &ask.stream,
                act: ask.action.token_act(),
            };
            match jwt.check(ask.token.as_deref(), want, &self.client).await {
                Ok(exp_in) => {
                    if jwt.end_at_exp {
                        lifetime = Some(exp_in);
                    }
                }
                Err(r) => {
                    self.stats.count(ask.action, "deny");
                    return Verdict::Deny {
                        status: r.status,
                        reason: r.reason,
                    };
                }
            }
        }
        if let Some(w) = &gate.webhook {
            match self.ask_webhook(w, ask).await {
                Verdict::Allow { lifetime: l } => {
                    lifetime = match (lifetime, l) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
                deny => return deny,
            }
        } else {
            self.stats.count(ask.action, "allow");
        }
        Verdict::Allow { lifetime }
    }

    async fn ask_webhook(&self, w: &Webhook, ask: &Ask) -> Verdict {
        let Ok(_slot) = w.slots.clone().try_acquire_owned() else {
            self.stats.count(ask.action, "busy");
            return Verdict::Deny {
                status: 503,
                reason: "admission webhook busy; retry".into(),
            };
        };
        let body = body_of(ask, ask.action.as_str(), None);
        let t0 = Instant::now();
        let answer = tokio::time::timeout(w.timeout, async {
            let r = self
                .client
                .request(post_json(&w.uri, body))
                .await
                .map_err(|e| format!("webhook unreachable: {}", error_chain(&e)))?;
            if r.status() != hyper::StatusCode::OK {
                return Err(format!("webhook answered {}", r.status()));
            }
            let bytes = Limited::new(r.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| format!("webhook answer: {e}"))?
                .to_bytes();
            serde_json::from_slice::<WebhookAnswer>(&bytes)
                .map_err(|e| format!("webhook answer is not the expected JSON: {e}"))
        })
        .await
        .unwrap_or_else(|_| Err(format!("webhook timed out after {:?}", w.timeout)));
        self.stats.latency(t0.elapsed());
        match answer {
            Ok(a) if a.allow => {
                self.stats.count(ask.action, "allow");
                Verdict::Allow {
                    lifetime: a.lifetime_s.map(Duration::from_secs),
                }
            }
            Ok(a) => {
                self.stats.count(ask.action, "deny");
                Verdict::Deny {
                    status: 403,
                    reason: a
                        .reason
                        .unwrap_or_else(|| "refused by the admission webhook".into()),
                }
            }
            Err(e) => {
                self.stats.count(ask.action, "error");
                warn!(
                    "admission {} {}/{} from {}: {e}; on_error = {}",
                    ask.action.as_str(),
                    ask.app,
                    ask.stream,
                    ask.client,
                    if w.allow_on_error { "allow" } else { "deny" }
                );
                if w.allow_on_error {
                    Verdict::Allow { lifetime: None }
                } else {
                    Verdict::Deny {
                        status: 403,
                        reason: format!("admission check failed: {e}"),
                    }
                }
            }
        }
    }

    /// An admitted session now exists as `key`: its end will be notified to the webhook.
    pub fn admitted(&self, key: SessionKey, ask: Ask) {
        if self
            .current()
            .get(&ask.app)
            .is_some_and(|g| g.webhook.is_some())
            && let Ok(mut m) = self.admitted.lock()
        {
            m.insert(key, (ask.app.clone(), ask));
        }
    }

    /// Session `key` ended for `reason`: tells the webhook if it was admitted by one.
    pub fn ended(&self, key: SessionKey, reason: &str) {
        let Some((app, ask)) = self.admitted.lock().ok().and_then(|mut m| {
            let e = m.remove(&key);
            tern_pool::shrink_map(&mut m);
            e
        }) else {
            return;
        };
        let gates = self.current();
        let Some(w) = gates.get(&app).and_then(|g| g.webhook.as_ref()) else {
            return;
        };
        let note = CloseNote {
            uri: w.uri.clone(),
            timeout: w.timeout,
            body: body_of(&ask, "close", Some(reason)),
        };
        let sent = self
            .closes
            .lock()
            .ok()
            .and_then(|c| c.as_ref().map(|tx| tx.try_send(note).is_ok()));
        if sent != Some(true) {
            self.stats.closes_dropped.fetch_add(1, Ordering::Relaxed);
            debug!("admission close notification dropped (queue full)");
        }
    }

    /// Admitted sessions waiting for their end (for tests and the memory report).
    pub fn watched(&self) -> usize {
        self.admitted.lock().map_or(0, |m| m.len())
    }
}

#[derive(Deserialize)]
struct WebhookAnswer {
    allow: bool,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    lifetime_s: Option<u64>,
}

fn body_of(ask: &Ask, action: &str, reason: Option<&str>) -> Vec<u8> {
    let mut v = serde_json::json!({
        "action": action,
        "protocol": ask.protocol.as_str(),
        "app": ask.app,
        "stream": ask.stream,
        "client": {"address": ask.client.to_string()},
        "token": ask.token,
        "query": ask.query,
        "session": ask.session,
    });
    if let Some(r) = reason {
        v["reason"] = serde_json::Value::from(r);
    }
    serde_json::to_vec(&v).unwrap_or_default()
}

/// The `token` query parameter of `query` (RTMP, OME), percent-decoding not needed for JWTs
/// (base64url and dots).
pub fn query_token(query: &str) -> Option<String> {
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix("token="))
        .filter(|t| !t.is_empty())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_tokens() {
        assert_eq!(
            query_token("a=1&token=abc.def&b=2").as_deref(),
            Some("abc.def")
        );
        assert_eq!(query_token("token="), None);
        assert_eq!(query_token(""), None);
    }

    #[test]
    fn metrics_text_has_every_series() {
        let s = AdmissionStats::default();
        s.count(Action::Play, "deny");
        s.latency(Duration::from_millis(3));
        let mut out = Exposition::default();
        s.write_metrics(&mut out);
        let out = out.into_string();
        assert!(out.contains("tern_admission_total{action=\"play\",result=\"deny\"} 1"));
        assert!(out.contains("tern_admission_total{action=\"publish\",result=\"allow\"} 0"));
        assert!(out.contains("tern_admission_webhook_seconds_bucket{le=\"0.005\"} 1"));
        assert!(out.contains("tern_admission_webhook_seconds_count 1"));
    }
}

//! Origin and edge nodes over Redis: the node registry, the origin map, routing and edge
//! pull. Without `[cluster]` none of this runs and tern works alone.
//!
//! Every node writes its record (url, media address, viewers, publishers, egress, CPU,
//! version) to Redis each second under a key with a TTL of `cluster.ttl_s`, and claims each
//! stream whose publisher is here (refreshed while live and for its app's grace after, as
//! the stream itself is kept). The same refresh reads every record and claim into a
//! [`View`], cached and replaced only when something changed; HTTP handlers route and look
//! up origins from it without a Redis round trip. A WHEP request for a stream claimed by
//! another node starts one upstream pull ([`upstream`]) for every local viewer of it.
//!
//! When Redis cannot be reached the node keeps serving what it has (its publishers, its
//! viewers, its running pulls), logs the change once, retries with backoff (1 s doubling to
//! 8 s) and refuses what needs the map (new pulls: 503; no redirects).
//!
//! Files: `store.rs` (keys and commands), `view.rs` (the cached view, routing),
//! `upstream.rs` (edge pull); the `[cluster]` section is the configuration's
//! (`crate::config::ClusterSection`).

mod store;
mod upstream;
mod view;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tern_rtc::viewer::DtlsContext;
use tracing::{info, warn};

pub use crate::config::{ClusterSection, ROUTED_PARAM, SECRET_HEADER};
pub use store::{NODE_PREFIX, ORIGIN_PREFIX};
pub use view::{NodeRecord, View};

use crate::media::EngineHandle;
use crate::outbound::Outbound;
use store::Store;

/// How long an ended pull's stream is still treated as pulled.
const PULL_MEMORY: Duration = Duration::from_secs(3);
/// Longest wait between refreshes while Redis is unreachable.
const MAX_BACKOFF: Duration = Duration::from_secs(8);

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct ClusterCounters {
    /// WHEP requests answered with a redirect to another node.
    pub redirects: AtomicU64,
    /// Edge pulls started.
    pub pulls: AtomicU64,
    /// Upstream sessions that ended for the origin's sake and were looked up again.
    pub upstream_retries: AtomicU64,
    /// Refreshes that failed (Redis unreachable or erroring).
    pub refresh_errors: AtomicU64,
    /// Publishers refused because another node holds the stream.
    pub claims_refused: AtomicU64,
    /// Publishers that waited for a dead node's claim to lapse and took the stream.
    pub handovers: AtomicU64,
}

/// A claim not refreshed for this long belongs to a node that stopped (live nodes refresh
/// every second).
const ABANDONED_AFTER: Duration = Duration::from_millis(1500);

/// A stream of this node, as the refresh sees it.
#[derive(Debug, Clone)]
pub struct LocalStream {
    /// `app/stream`.
    pub key: String,
    /// It has a publisher here (WHIP, RTMP) or is a live clip; an edge pull is excluded
    /// by the refresh.
    pub publishing: bool,
    /// How long its claim outlives its publisher (the app's `idle_grace_s`).
    pub grace: Duration,
}

/// What the node reports each second.
#[derive(Debug, Clone)]
pub struct Local {
    /// Its record.
    pub record: NodeRecord,
    /// Its streams.
    pub streams: Vec<LocalStream>,
}

impl upstream::Origins for Cluster {
    fn origin(&self, key: &str, rt: &tokio::runtime::Handle) -> Option<(String, String)> {
        match rt.block_on(self.origin_of(key)) {
            Ok(Some(node)) if node != self.cfg.node => self
                .view()
                .node(&node)
                .map(|n| (n.name.clone(), n.url.clone())),
            _ => None,
        }
    }

    fn retried(&self) {
        self.counters
            .upstream_retries
            .fetch_add(1, Ordering::Relaxed);
    }

    fn ended(&self, key: &str) {
        if let Ok(mut p) = self.pulls.lock()
            && let Some(e) = p.get_mut(key)
        {
            e.ended = Some(Instant::now());
        }
    }
}

/// Which streams to claim (or keep claiming) and which to release this refresh.
/// `claims` holds each claimed stream's last moment with a local publisher: a stream
/// publishing here (not pulled) is claimed; a claim is kept for its stream's grace after its
/// publisher left, and released past it, when its stream is gone, or when it is now pulled.
fn plan_claims(
    claims: &mut HashMap<String, Instant>,
    streams: &[LocalStream],
    pulled: &[String],
    now: Instant,
) -> (Vec<String>, Vec<String>) {
    for s in streams {
        if s.publishing && !pulled.contains(&s.key) {
            claims.insert(s.key.clone(), now);
        }
    }
    // Graces by stream, so that each claim is looked up once, not searched for.
    let graces: HashMap<&str, Duration> =
        streams.iter().map(|s| (s.key.as_str(), s.grace)).collect();
    let mut claim = Vec::new();
    let mut release = Vec::new();
    for (k, last) in claims.iter() {
        let grace = graces.get(k.as_str()).copied();
        match grace {
            Some(g) if now.duration_since(*last) <= g && !pulled.contains(k) => {
                claim.push(k.clone());
            }
            _ => release.push(k.clone()),
        }
    }
    for k in &release {
        claims.remove(k);
    }
    tern_pool::shrink_map(claims);
    claim.sort();
    release.sort();
    (claim, release)
}

/// A pull's stop flag, and when it ended.
struct PullEntry {
    stop: Arc<AtomicBool>,
    ended: Option<Instant>,
}

/// This node's part in the cluster.
pub struct Cluster {
    cfg: ClusterSection,
    store: Store,
    view: RwLock<Arc<View>>,
    /// Times the cached view was replaced.
    view_builds: AtomicU64,
    redis_up: AtomicBool,
    /// Viewers redirected to each node since the view was read (a burst of requests
    /// would otherwise all go to the node that was least loaded a second ago).
    sent: Mutex<HashMap<String, u64>>,
    /// Streams this node claims, with when they last had a publisher here.
    claims: Mutex<HashMap<String, Instant>>,
    /// Claims another node holds while the stream is live here too (warned once).
    conflicts: Mutex<std::collections::HashSet<String>>,
    /// Streams pulled from another node: their stop flags, and when the pull ended (kept
    /// for [`PULL_MEMORY`] so the pull's last moments, live without a pull, never read as
    /// a local publisher to claim).
    pulls: Mutex<HashMap<String, PullEntry>>,
    /// The upstream sessions' DTLS certificate.
    dtls: Arc<DtlsContext>,
    /// The TLS roots of the upstream sessions' WHEP requests to an `https://` origin.
    outbound: Outbound,
    /// Counters for `/metrics`.
    pub counters: ClusterCounters,
}

impl Cluster {
    /// This node's cluster part when `[cluster]` is set (`section`), with `url` defaulting to
    /// the HTTP listener `http` on `host` (the node's first ICE candidate); `None` without.
    /// Not connected until it runs.
    pub fn for_node(
        section: Option<&ClusterSection>,
        host: std::net::IpAddr,
        http: std::net::SocketAddr,
        dtls: &Arc<DtlsContext>,
        outbound: &Outbound,
    ) -> Result<Option<Arc<Cluster>>, String> {
        section
            .map(|c| {
                Cluster::new(
                    c.clone().with_default_url(host, http),
                    dtls.clone(),
                    outbound.clone(),
                )
                .map(Arc::new)
            })
            .transpose()
    }

    /// The cluster part of a node configured with `cfg` (not connected until it runs);
    /// its upstream sessions use the node's own DTLS certificate `dtls`, and sign in at
    /// their origin over HTTP or HTTPS through `outbound`.
    pub fn new(
        cfg: ClusterSection,
        dtls: Arc<DtlsContext>,
        outbound: Outbound,
    ) -> Result<Self, String> {
        let store = Store::new(&cfg.redis, cfg.sentinel_password.as_deref())?;
        Ok(Cluster {
            cfg,
            store,
            view: RwLock::new(Arc::new(View::default())),
            view_builds: AtomicU64::new(0),
            redis_up: AtomicBool::new(false),
            sent: Mutex::new(HashMap::new()),
            claims: Mutex::new(HashMap::new()),
            conflicts: Mutex::new(std::collections::HashSet::new()),
            pulls: Mutex::new(HashMap::new()),
            dtls,
            outbound,
            counters: ClusterCounters::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ClusterSection {
        &self.cfg
    }

    /// The cluster as last read.
    pub fn view(&self) -> Arc<View> {
        self.view
            .read()
            .map(|v| v.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    /// Times the cached view was rebuilt (it is only when something changed).
    pub fn view_builds(&self) -> u64 {
        self.view_builds.load(Ordering::Relaxed)
    }

    /// Whether the last exchange with Redis worked.
    pub fn redis_up(&self) -> bool {
        self.redis_up.load(Ordering::Relaxed)
    }

    /// Redis commands sent since start.
    pub fn redis_commands(&self) -> u64 {
        self.store.commands.load(Ordering::Relaxed)
    }

    /// Streams this node pulls from others (with `ended`, also those whose pull ended
    /// within [`PULL_MEMORY`]).
    pub fn pulled(&self, ended: bool) -> Vec<String> {
        let mut v: Vec<String> = self
            .pulls
            .lock()
            .map(|m| {
                m.iter()
                    .filter(|(_, p)| ended || p.ended.is_none())
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Whether `value` (the request's [`SECRET_HEADER`]) is the cluster secret. Compared
    /// in time independent of where they differ.
    pub fn authenticates(&self, value: Option<&[u8]>) -> bool {
        let Some(v) = value else {
            return false;
        };
        let s = self.cfg.secret.as_bytes();
        if v.len() != s.len() {
            return false;
        }
        v.iter().zip(s).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }

    /// Runs the refresh every second until the process ends; `local` reports this node.
    pub async fn run(self: Arc<Self>, mut local: impl FnMut() -> Local + Send + 'static) {
        let mut backoff = Duration::from_secs(1);
        loop {
            let ok = self.refresh(local()).await;
            let wait = if ok {
                backoff = Duration::from_secs(1);
                Duration::from_secs(1)
            } else {
                let w = backoff;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                w
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// One refresh: record, claims, view. Returns whether Redis answered.
    async fn refresh(&self, local: Local) -> bool {
        let now = Instant::now();
        if let Ok(mut p) = self.pulls.lock() {
            p.retain(|_, p| {
                p.ended
                    .is_none_or(|at| now.duration_since(at) < PULL_MEMORY)
            });
            tern_pool::shrink_map(&mut p);
        }
        let pulled: Vec<String> = self.pulled(true);
        let (claim, release) = match self.claims.lock() {
            Ok(mut claims) => plan_claims(&mut claims, &local.streams, &pulled, now),
            Err(_) => return false,
        };
        let record = match serde_json::to_string(&local.record) {
            Ok(r) => r,
            Err(_) => return false,
        };
        let ttl_ms = self.cfg.ttl_s * 1000;
        match self
            .store
            .refresh(&self.cfg.node, &record, ttl_ms, &claim, &release)
            .await
        {
            Ok(r) => {
                if let Ok(mut c) = self.conflicts.lock() {
                    for (k, held) in claim.iter().zip(&r.held) {
                        if *held {
                            c.remove(k);
                        } else if c.insert(k.clone()) {
                            let owner = r.view.origins.get(k).map_or("another node", |s| s);
                            warn!(
                                "cluster: {k} is live here but claimed by {owner}; edges pull it from {owner}"
                            );
                        }
                    }
                    c.retain(|k| claim.contains(k));
                }
                self.set_up(true, None);
                let changed = self.view.read().map(|v| **v != r.view).unwrap_or(true);
                if changed {
                    if let Ok(mut v) = self.view.write() {
                        *v = Arc::new(r.view);
                    }
                    self.view_builds.fetch_add(1, Ordering::Relaxed);
                }
                if let Ok(mut s) = self.sent.lock() {
                    s.clear();
                }
                true
            }
            Err(e) => {
                self.counters.refresh_errors.fetch_add(1, Ordering::Relaxed);
                self.set_up(false, Some(&e.to_string()));
                false
            }
        }
    }

    /// Records Redis' state, logging a change once.
    fn set_up(&self, up: bool, err: Option<&str>) {
        if self.redis_up.swap(up, Ordering::Relaxed) != up {
            if up {
                info!(
                    "cluster: Redis at {} reachable: node {} registered",
                    self.cfg.redis, self.cfg.node
                );
            } else {
                warn!(
                    "cluster: Redis at {} unreachable ({}): serving what this node has, new pulls refused, retrying",
                    self.cfg.redis,
                    err.unwrap_or("error")
                );
            }
        }
    }

    /// Takes stream `key` for a publisher arriving here. `Err(owner)` when another node
    /// has it. With Redis unreachable the publisher is let in (the node serves alone) and
    /// the claim is made at the next refresh.
    ///
    /// Hand-over: when the owner has stopped refreshing its claim (its node died: an
    /// encoder moves here the moment its origin goes), the publish is held until the claim
    /// lapses, at most `ttl_s` + 1 s, and then takes it; encoders without retries (ffmpeg,
    /// hardware) would give up on a refusal. A live node refreshes its claims to the full
    /// TTL every second, so a claim is the live node's once it is seen refreshed, and
    /// abandoned once its node record is gone or no refresh came for [`ABANDONED_AFTER`]; a
    /// publish for a live node's stream is refused within about a second.
    pub async fn claim(&self, key: &str) -> Result<(), String> {
        let ttl_ms = self.cfg.ttl_s * 1000;
        let started = tokio::time::Instant::now();
        let held_until = started + Duration::from_millis(ttl_ms + 1000);
        let mut last_left: Option<i64> = None;
        let mut abandoned = false;
        let answer = loop {
            let r = self.store.claim(&self.cfg.node, key, ttl_ms).await;
            let Ok(Err(owner)) = &r else {
                break r;
            };
            let Ok((left, node_alive)) = self.store.claim_standing(key, owner).await else {
                break r;
            };
            let silent_ms = ttl_ms as i64 - left;
            if !node_alive || left < 0 || silent_ms > ABANDONED_AFTER.as_millis() as i64 {
                if !abandoned {
                    info!(
                        "cluster: {key} is claimed by {owner}, which stopped refreshing it; holding the publish until the claim lapses"
                    );
                    abandoned = true;
                }
            } else if last_left.is_some_and(|l| left > l) {
                // Refreshed since the last look: the owner is alive.
                break r;
            }
            let now = tokio::time::Instant::now();
            // Not seen refreshed nor silent long enough yet: look again, for at most a
            // refresh interval and a half unless it is known to be abandoned.
            let undecided_too_long = !abandoned && now >= started + ABANDONED_AFTER;
            if now >= held_until || undecided_too_long {
                break r;
            }
            last_left = Some(left);
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let waited = abandoned;
        match answer {
            Ok(Ok(())) => {
                if waited {
                    self.counters.handovers.fetch_add(1, Ordering::Relaxed);
                }
                if let Ok(mut c) = self.claims.lock() {
                    c.insert(key.to_string(), Instant::now());
                }
                Ok(())
            }
            Ok(Err(owner)) => {
                self.counters.claims_refused.fetch_add(1, Ordering::Relaxed);
                Err(owner)
            }
            Err(e) => {
                self.set_up(false, Some(&e.to_string()));
                if let Ok(mut c) = self.claims.lock() {
                    c.insert(key.to_string(), Instant::now());
                }
                Ok(())
            }
        }
    }

    /// The node that has `key`'s publisher, read from Redis now (a fresh claim may not be
    /// in the view yet). `Err` when Redis cannot be reached.
    pub async fn origin_of(&self, key: &str) -> Result<Option<String>, String> {
        match self.store.origin(key).await {
            Ok(o) => Ok(o),
            Err(e) => {
                self.set_up(false, Some(&e.to_string()));
                Err(e.to_string())
            }
        }
    }

    /// The node a viewer's request should go to (least loaded; counted as sent there), or
    /// `None` when routing is off or the registry is not known.
    pub fn route(&self) -> Option<NodeRecord> {
        if !self.cfg.redirect {
            return None;
        }
        self.pick(None)
    }

    /// For a draining node: the least-loaded other node that is not draining (counted as
    /// sent there), whether or not routing is on; `None` when there is none or the
    /// registry is not known.
    pub fn route_away(&self) -> Option<NodeRecord> {
        // This node may still read as not draining until its next refresh.
        self.pick(Some(&self.cfg.node))
    }

    /// The least-loaded node that is not draining nor `except`, counted as sent there;
    /// `None` when Redis is down or there is none.
    fn pick(&self, except: Option<&str>) -> Option<NodeRecord> {
        if !self.redis_up() {
            return None;
        }
        let view = self.view();
        let mut sent = self.sent.lock().ok()?;
        let n = view.least_loaded_except(&sent, except)?.clone();
        *sent.entry(n.name.clone()).or_default() += 1;
        Some(n)
    }

    /// Starts pulling `key` (engine stream `index`) from its origin unless a pull runs.
    pub fn start_pull(
        self: &Arc<Self>,
        key: &str,
        index: usize,
        engine: EngineHandle,
        runtime: tokio::runtime::Handle,
    ) -> std::io::Result<()> {
        let Ok(mut pulls) = self.pulls.lock() else {
            return Ok(());
        };
        if pulls.get(key).is_some_and(|p| p.ended.is_none()) {
            return Ok(());
        }
        let stop = Arc::new(AtomicBool::new(false));
        let pull = upstream::Pull {
            secret: self.cfg.secret.clone(),
            grace: Duration::from_secs(self.cfg.edge_grace_s),
            dtls: self.dtls.clone(),
            agent: self.outbound.agent(upstream::SIGNAL_TIMEOUT, false),
            key: key.to_string(),
            index,
            engine,
            runtime,
            stop: stop.clone(),
        };
        let me: Arc<dyn upstream::Origins> = self.clone();
        std::thread::Builder::new()
            .name("EdgePull".into())
            .spawn(move || upstream::run(me, pull))?;
        pulls.insert(key.to_string(), PullEntry { stop, ended: None });
        self.counters.pulls.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// A clean leave: pulls stop, the record and claims go from Redis at once.
    pub async fn leave(&self) {
        if let Ok(p) = self.pulls.lock() {
            for e in p.values() {
                e.stop.store(true, Ordering::Relaxed);
            }
        }
        let claims: Vec<String> = self
            .claims
            .lock()
            .map(|c| c.keys().cloned().collect())
            .unwrap_or_default();
        match self.store.leave(&self.cfg.node, &claims).await {
            Ok(()) => info!("cluster: node {} left the registry", self.cfg.node),
            Err(e) => warn!("cluster: could not leave the registry: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(key: &str, publishing: bool) -> LocalStream {
        LocalStream {
            key: key.into(),
            publishing,
            grace: Duration::from_secs(10),
        }
    }

    #[test]
    fn claims_follow_local_publishers_and_their_grace() {
        let t0 = Instant::now();
        let mut claims = HashMap::new();
        let streams = [
            stream("live/a", true),
            stream("live/b", false),
            stream("live/c", true),
        ];
        // live/c is pulled from elsewhere: never ours.
        let pulled = ["live/c".to_string()];
        let (claim, release) = plan_claims(&mut claims, &streams, &pulled, t0);
        assert_eq!((claim, release), (vec!["live/a".to_string()], vec![]));
        // The publisher of live/a leaves: kept for the grace, then released.
        let streams = [stream("live/a", false)];
        let t = t0 + Duration::from_secs(9);
        let (claim, _) = plan_claims(&mut claims, &streams, &[], t);
        assert_eq!(claim, ["live/a"]);
        let t = t0 + Duration::from_secs(11);
        let (claim, release) = plan_claims(&mut claims, &streams, &[], t);
        assert!(claim.is_empty());
        assert_eq!(release, ["live/a"]);
        assert!(claims.is_empty());
        // A claimed stream that is gone from the directory is released at once.
        plan_claims(&mut claims, &[stream("live/x", true)], &[], t);
        let (claim, release) = plan_claims(&mut claims, &[], &[], t);
        assert_eq!((claim.len(), release), (0, vec!["live/x".to_string()]));
    }
}

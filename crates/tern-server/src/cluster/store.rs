//! The cluster's Redis keys and the commands on them. Nothing else in tern talks to Redis.
//!
//! Keys (all with a TTL, so a node that dies leaves nothing behind for long):
//! - `tern:node:{name}`: the node's [`NodeRecord`] as JSON, `PX` = `cluster.ttl_s`,
//!   rewritten every second.
//! - `tern:origin:{app}/{stream}`: the name of the node that has the stream's publisher,
//!   taken with `SET NX`-like semantics (a Lua script: take it if free, refresh it if
//!   ours, else leave it, unless ours is the older claim: see [`Claimed`]) and refreshed
//!   every second while the stream is live there or within its app's grace.
//! - `tern:born:{app}/{stream}`: when the claim's holder began holding it, in Redis' clock
//!   (ms), written with the claim: the age that settles a split brain.
//!
//! One connection (redis-rs' multiplexed connection: requests from the refresh task and
//! from HTTP handlers share it). Each refresh is two round trips: one pipeline that writes
//! the record, claims, refreshes and releases origins and starts both key scans, one that
//! reads the records and owners found.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisResult};

use super::view::{NodeRecord, View};

/// Prefix of node records.
pub const NODE_PREFIX: &str = "tern:node:";
/// Prefix of origin claims.
pub const ORIGIN_PREFIX: &str = "tern:origin:";

/// Prefix of the claims' birth times.
pub const BORN_PREFIX: &str = "tern:born:";

/// A claim older than the holder's by more than this takes the stream (a split brain
/// settled by age); closer than this, the holder keeps it, so two claims of about the same
/// age cannot take it from each other in turn.
pub const SENIORITY_MARGIN_MS: u64 = 1000;

/// Takes the claim `KEYS[1]` (birth time `KEYS[2]`) for node `ARGV[1]` for `ARGV[2]` ms,
/// the claim being `ARGV[3]` ms old: free, it is taken (1); ours, refreshed (1); another
/// node's, taken over if ours was born more than `ARGV[4]` ms before the holder's (2),
/// else left (0). Birth times are in Redis' own clock (`TIME`), so the nodes' clocks never
/// meet: each node says only how long it has held the claim.
const CLAIM: &str = "local t = redis.call('TIME') \
local born = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(ARGV[3]) \
local v = redis.call('GET', KEYS[1]) \
local function take() \
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) \
redis.call('SET', KEYS[2], born, 'PX', ARGV[2]) end \
if v == false or v == ARGV[1] then take() return 1 end \
local theirs = tonumber(redis.call('GET', KEYS[2]) or '') \
if theirs ~= nil and born + tonumber(ARGV[4]) < theirs then take() return 2 end \
return 0";
/// Deletes the claim `KEYS[1]` and its birth time `KEYS[2]` if node `ARGV[1]` holds it.
const RELEASE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
redis.call('DEL', KEYS[2]) return redis.call('DEL', KEYS[1]) else return 0 end";

/// What a node's claim came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claimed {
    /// It holds the stream (taken free, or refreshed).
    Held,
    /// It held an older claim than the node that had the stream, and took it: a split
    /// brain (two publishers let in while Redis was away) settled for the older one.
    TookOver,
    /// Another node holds the stream.
    Lost,
}

impl Claimed {
    /// Whether the node holds the stream after it.
    pub fn held(self) -> bool {
        self != Claimed::Lost
    }

    fn from_answer(v: &redis::Value) -> Claimed {
        match redis::from_redis_value_ref::<i64>(v) {
            Ok(1) => Claimed::Held,
            Ok(2) => Claimed::TookOver,
            _ => Claimed::Lost,
        }
    }
}

/// How long one request may take before Redis counts as unreachable.
const TIMEOUT: Duration = Duration::from_millis(800);

/// Where the store's Redis is: one server, or the master Redis Sentinel names.
enum Target {
    /// `redis://` or `rediss://`.
    Server(redis::Client),
    /// `redis+sentinel://`: asked for the master at each (re)connection, so a failover is
    /// followed at the next one (a failed command drops the connection).
    Sentinel(tokio::sync::Mutex<redis::sentinel::SentinelClient>),
}

/// The connection and a count of the commands sent.
pub struct Store {
    target: Target,
    conn: tokio::sync::Mutex<Option<MultiplexedConnection>>,
    /// Commands sent (each in a pipeline counts).
    pub commands: Arc<AtomicU64>,
}

/// What one refresh found: for each claim asked for, what it came to; and the registry and
/// origin map.
pub struct Refresh {
    /// Per claim, in order.
    pub held: Vec<Claimed>,
    /// The cluster as read.
    pub view: View,
}

impl Store {
    /// A store on `url` (not connected yet); `sentinel_password` is what the sentinels of a
    /// `redis+sentinel://` URL ask for.
    pub fn new(url: &str, sentinel_password: Option<&str>) -> Result<Self, String> {
        let target = match crate::config::SentinelUrl::parse(url) {
            Some(s) => Target::Sentinel(tokio::sync::Mutex::new(sentinel_client(
                &s,
                sentinel_password,
            )?)),
            None if url.starts_with("redis+sentinel://") => {
                return Err(crate::config::SentinelUrl::RULE.to_string());
            }
            None => Target::Server(redis::Client::open(url).map_err(|e| e.to_string())?),
        };
        Ok(Store {
            target,
            conn: tokio::sync::Mutex::new(None),
            commands: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The connection, made if there is none.
    async fn conn(&self) -> RedisResult<MultiplexedConnection> {
        let mut g = self.conn.lock().await;
        if let Some(c) = g.as_ref() {
            return Ok(c.clone());
        }
        let cfg = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(TIMEOUT))
            .set_response_timeout(Some(TIMEOUT));
        let client = match &self.target {
            Target::Server(c) => c.clone(),
            Target::Sentinel(s) => {
                let mut s = s.lock().await;
                tokio::time::timeout(TIMEOUT * 2, s.async_get_client())
                    .await
                    .map_err(|_| {
                        redis::RedisError::from((
                            redis::ErrorKind::Io,
                            "no sentinel named the master in time",
                        ))
                    })??
            }
        };
        let c = client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await?;
        *g = Some(c.clone());
        Ok(c)
    }

    /// Forgets the connection after an error, so the next call reconnects.
    async fn drop_conn(&self) {
        *self.conn.lock().await = None;
    }

    fn count(&self, n: usize) {
        self.commands.fetch_add(n as u64, Ordering::Relaxed);
    }

    async fn run<T: redis::FromRedisValue>(
        &self,
        p: &redis::Pipeline,
        commands: usize,
    ) -> RedisResult<T> {
        let mut c = self.conn().await?;
        self.count(commands);
        let r = p.query_async(&mut c).await;
        if r.is_err() {
            self.drop_conn().await;
        }
        r
    }

    /// One refresh: writes `record` for `me` (`ttl_ms`), takes or refreshes each of
    /// `claims` (stream, age in ms), releases each of `releases`, and reads the registry and
    /// origin map.
    pub async fn refresh(
        &self,
        me: &str,
        record: &str,
        ttl_ms: u64,
        claims: &[(String, u64)],
        releases: &[String],
    ) -> RedisResult<Refresh> {
        let mut p = redis::pipe();
        p.cmd("SET")
            .arg(format!("{NODE_PREFIX}{me}"))
            .arg(record)
            .arg("PX")
            .arg(ttl_ms)
            .ignore();
        for (k, age) in claims {
            claim_cmd(&mut p, k, me, ttl_ms, *age);
        }
        for k in releases {
            release_cmd(&mut p, k, me);
        }
        for prefix in [NODE_PREFIX, ORIGIN_PREFIX] {
            scan_cmd(&mut p, 0, prefix);
        }
        let n = 1 + claims.len() + releases.len() + 2;
        let mut out: Vec<redis::Value> = self.run(&p, n).await?;
        let origin_scan = out.pop();
        let node_scan = out.pop();
        let held = out.iter().map(Claimed::from_answer).collect();
        let node_keys = self.finish_scan(node_scan, NODE_PREFIX).await?;
        let origin_keys = self.finish_scan(origin_scan, ORIGIN_PREFIX).await?;
        let mut p = redis::pipe();
        // MGET with no key is an error; an empty list reads as nothing.
        let mut commands = 0;
        for keys in [&node_keys, &origin_keys] {
            if !keys.is_empty() {
                p.cmd("MGET").arg(keys);
                commands += 1;
            }
        }
        let mut values: Vec<Vec<Option<String>>> = if commands == 0 {
            Vec::new()
        } else {
            self.run(&p, commands).await?
        };
        let origin_values = if origin_keys.is_empty() {
            Vec::new()
        } else {
            values.pop().unwrap_or_default()
        };
        let node_values = if node_keys.is_empty() {
            Vec::new()
        } else {
            values.pop().unwrap_or_default()
        };
        let mut nodes: Vec<NodeRecord> = node_values
            .into_iter()
            .flatten()
            .filter_map(|j| serde_json::from_str(&j).ok())
            .collect();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let origins: BTreeMap<String, String> = origin_keys
            .iter()
            .zip(origin_values)
            .filter_map(|(k, v)| Some((k.strip_prefix(ORIGIN_PREFIX)?.to_string(), v?)))
            .collect();
        Ok(Refresh {
            held,
            view: View { nodes, origins },
        })
    }

    /// The keys of a scan that began in the refresh pipeline, continued to its end.
    async fn finish_scan(
        &self,
        first: Option<redis::Value>,
        prefix: &str,
    ) -> RedisResult<Vec<String>> {
        let (mut cursor, mut keys): (u64, Vec<String>) = match first {
            Some(v) => redis::from_redis_value(v)?,
            None => return Ok(Vec::new()),
        };
        // Bounded: a keyspace of a million matching keys is 1,000 rounds; past that the
        // view is partial for this second rather than late.
        for _ in 0..1000 {
            if cursor == 0 {
                break;
            }
            let mut p = redis::pipe();
            scan_cmd(&mut p, cursor, prefix);
            let ((c, more),): ((u64, Vec<String>),) = self.run(&p, 1).await?;
            cursor = c;
            keys.extend(more);
        }
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    /// Takes stream `key` for `me` now, for a claim `age_ms` old (0 for a publisher
    /// arriving): `Ok(Ok(()))` when held, `Ok(Err(owner))` when another node has it.
    pub async fn claim(
        &self,
        me: &str,
        key: &str,
        ttl_ms: u64,
        age_ms: u64,
    ) -> RedisResult<Result<(), String>> {
        let k = format!("{ORIGIN_PREFIX}{key}");
        let mut p = redis::pipe();
        claim_cmd(&mut p, key, me, ttl_ms, age_ms);
        p.cmd("GET").arg(&k);
        let (held, owner): (redis::Value, Option<String>) = self.run(&p, 2).await?;
        Ok(if Claimed::from_answer(&held).held() {
            Ok(())
        } else {
            Err(owner.unwrap_or_default())
        })
    }

    /// How `owner`'s claim on stream `key` stands: its time left in ms (negative: gone) and
    /// whether `owner`'s node record is still there.
    pub async fn claim_standing(&self, key: &str, owner: &str) -> RedisResult<(i64, bool)> {
        let mut p = redis::pipe();
        p.cmd("PTTL").arg(format!("{ORIGIN_PREFIX}{key}"));
        p.cmd("EXISTS").arg(format!("{NODE_PREFIX}{owner}"));
        let (left, alive): (i64, i64) = self.run(&p, 2).await?;
        Ok((left, alive == 1))
    }

    /// The node that has stream `key`'s publisher, read now.
    pub async fn origin(&self, key: &str) -> RedisResult<Option<String>> {
        let mut p = redis::pipe();
        p.cmd("GET").arg(format!("{ORIGIN_PREFIX}{key}"));
        let (owner,): (Option<String>,) = self.run(&p, 1).await?;
        Ok(owner)
    }

    /// A clean leave: the record and `claims` go at once.
    pub async fn leave(&self, me: &str, claims: &[String]) -> RedisResult<()> {
        let mut p = redis::pipe();
        p.cmd("DEL").arg(format!("{NODE_PREFIX}{me}")).ignore();
        for k in claims {
            release_cmd(&mut p, k, me);
        }
        self.run::<()>(&p, 1 + claims.len()).await
    }
}

/// The sentinel client of `s`: its sentinels (with `password`, if they ask for one), its
/// master's name, database and password.
fn sentinel_client(
    s: &crate::config::SentinelUrl,
    password: Option<&str>,
) -> Result<redis::sentinel::SentinelClient, String> {
    use redis::sentinel::{SentinelClientBuilder, SentinelServerType};
    let addrs = s
        .sentinels
        .iter()
        .map(|(host, port)| redis::ConnectionAddr::Tcp(host.clone(), *port));
    let mut b = SentinelClientBuilder::new(addrs, s.master.clone(), SentinelServerType::Master)
        .map_err(|e| e.to_string())?
        .set_client_to_redis_db(s.db);
    if let Some(p) = &s.password {
        b = b.set_client_to_redis_password(p);
    }
    if let Some(p) = password {
        b = b.set_client_to_sentinel_password(p);
    }
    b.build().map_err(|e| e.to_string())
}

/// Appends the claim of stream `key` for `me`, `age_ms` old (its answer: [`Claimed`]).
fn claim_cmd(p: &mut redis::Pipeline, key: &str, me: &str, ttl_ms: u64, age_ms: u64) {
    p.cmd("EVAL")
        .arg(CLAIM)
        .arg(2)
        .arg(format!("{ORIGIN_PREFIX}{key}"))
        .arg(format!("{BORN_PREFIX}{key}"))
        .arg(me)
        .arg(ttl_ms)
        .arg(age_ms)
        .arg(SENIORITY_MARGIN_MS);
}

/// Appends the release of stream `key` if `me` holds it (its answer ignored).
fn release_cmd(p: &mut redis::Pipeline, key: &str, me: &str) {
    p.cmd("EVAL")
        .arg(RELEASE)
        .arg(2)
        .arg(format!("{ORIGIN_PREFIX}{key}"))
        .arg(format!("{BORN_PREFIX}{key}"))
        .arg(me)
        .ignore();
}

/// Appends one step of a scan of the keys under `prefix` from `cursor`.
fn scan_cmd(p: &mut redis::Pipeline, cursor: u64, prefix: &str) {
    p.cmd("SCAN")
        .arg(cursor)
        .arg("MATCH")
        .arg(format!("{prefix}*"))
        .arg("COUNT")
        .arg(1000);
}

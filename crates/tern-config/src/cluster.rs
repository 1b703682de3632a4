//! The `[cluster]` configuration section and its checks: the configuration file reads it,
//! the cluster (`tern_server::cluster`) runs on it.

use serde::{Deserialize, Serialize};

use super::error::ConfigError;

/// The header node-to-node requests carry `cluster.secret` in.
pub const SECRET_HEADER: &str = "tern-cluster-secret";
/// The query parameter a redirect adds: the node it chose, which then serves the request
/// rather than routing it again.
pub const ROUTED_PARAM: &str = "tern_node";
/// Header of an edge's upstream request to another edge (not the origin), with the cluster
/// secret: a *relay*, tried when the origin went silent (cut off from this edge). The node
/// asked serves it only from a stream live there from its publisher or its own pull from
/// the origin, and never pulls for it, so relays do not chain.
pub const RELAY_HEADER: &str = "tern-cluster-relay";

/// The `[cluster]` section. Without it tern runs alone.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSection {
    /// Where the node registry and origin map live: `redis://HOST:PORT/DB` (`rediss://` for
    /// TLS), or a master found through Redis Sentinel:
    /// `redis+sentinel://[:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER[/DB]` (the password is
    /// the master's; the sentinels' own is `sentinel_password`).
    pub redis: String,
    /// The password the sentinels ask for (`requirepass` in their configuration), if any.
    #[serde(default)]
    pub sentinel_password: Option<String>,
    /// This node's name, unique in the cluster (letters, digits, `-`, `_`, `.`).
    pub node: String,
    /// How viewers and other nodes reach this node's HTTP: `http://HOST:PORT`, or
    /// `https://HOST:PORT` (its HTTPS listener; edges verify its certificate against the
    /// system's roots and `server.ca_file`). Empty (the
    /// default): `http://` the announced candidate address and the HTTP listener's bound
    /// port, filled in at start ([`ClusterSection::with_default_url`]).
    #[serde(default)]
    pub url: String,
    /// Shared by all nodes: node-to-node requests carry it (and skip admission).
    pub secret: String,
    /// Answer a viewer's WHEP POST with `307` to the least-loaded node. Default false.
    #[serde(default)]
    pub redirect: bool,
    /// Seconds a node record and an origin claim live without a refresh (they are refreshed
    /// every second). Default 3: a dead node leaves the registry, and its streams the origin
    /// map, within 3 s.
    #[serde(default = "d_ttl_s")]
    pub ttl_s: u64,
    /// Seconds an edge keeps its upstream session after its last local viewer left.
    /// Default 5: a viewer who reloads the page finds the stream still pulled.
    #[serde(default = "d_edge_grace_s")]
    pub edge_grace_s: u64,
}

/// `cluster.redis` as `redis+sentinel://[:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER[/DB]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelUrl {
    /// The sentinels, as `(host, port)`.
    pub sentinels: Vec<(String, u16)>,
    /// The name the sentinels monitor the master under.
    pub master: String,
    /// The database on the master.
    pub db: i64,
    /// The master's password.
    pub password: Option<String>,
}

impl SentinelUrl {
    /// The form, as errors state it.
    pub const RULE: &str =
        "must be redis+sentinel://[:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER[/DB]";

    /// The parts of `url`, or `None` if it is not of that form.
    pub fn parse(url: &str) -> Option<SentinelUrl> {
        let rest = url.strip_prefix("redis+sentinel://")?;
        let (auth, rest) = match rest.rsplit_once('@') {
            Some((a, r)) => (Some(a), r),
            None => (None, rest),
        };
        let password = match auth {
            Some(a) => Some(a.split_once(':')?.1.to_string()).filter(|p| !p.is_empty()),
            None => None,
        };
        let (hosts, path) = rest.split_once('/')?;
        let sentinels = hosts
            .split(',')
            .map(|hp| {
                let (h, p) = hp.rsplit_once(':')?;
                let h = h.trim_start_matches('[').trim_end_matches(']');
                (!h.is_empty()).then_some(())?;
                Some((h.to_string(), p.parse().ok()?))
            })
            .collect::<Option<Vec<_>>>()?;
        let mut parts = path.split('/');
        let master = parts.next().filter(|m| !m.is_empty())?.to_string();
        let db = match parts.next() {
            Some(d) => d.parse().ok()?,
            None => 0,
        };
        if parts.next().is_some() || sentinels.is_empty() {
            return None;
        }
        Some(SentinelUrl {
            sentinels,
            master,
            db,
            password,
        })
    }
}

fn d_ttl_s() -> u64 {
    3
}
fn d_edge_grace_s() -> u64 {
    5
}

impl ClusterSection {
    /// The first bad key and what is wrong with it.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.redis.starts_with("redis+sentinel://") {
            if SentinelUrl::parse(&self.redis).is_none() {
                return Err(ConfigError::invalid("cluster.redis", SentinelUrl::RULE));
            }
        } else if !(self.redis.starts_with("redis://") || self.redis.starts_with("rediss://")) {
            return Err(ConfigError::invalid(
                "cluster.redis",
                "must be a redis://HOST:PORT/DB URL or a redis+sentinel:// URL",
            ));
        }
        if self.node.is_empty()
            || self.node.len() > 64
            || !self
                .node
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            return Err(ConfigError::invalid(
                "cluster.node",
                "must be 1-64 letters, digits, '-', '_' or '.'",
            ));
        }
        let rest = self
            .url
            .strip_prefix("http://")
            .or_else(|| self.url.strip_prefix("https://"))
            .unwrap_or("");
        if !self.url.is_empty() && (rest.is_empty() || rest.contains('/') && !rest.ends_with('/')) {
            return Err(ConfigError::invalid(
                "cluster.url",
                "must be http[s]://HOST:PORT (how viewers and nodes reach this node)",
            ));
        }
        if self.secret.len() < 16 {
            return Err(ConfigError::invalid(
                "cluster.secret",
                "must be at least 16 characters",
            ));
        }
        if !(2..=60).contains(&self.ttl_s) {
            return Err(ConfigError::invalid(
                "cluster.ttl_s",
                "must be between 2 and 60 (seconds)",
            ));
        }
        if self.edge_grace_s > 3600 {
            return Err(ConfigError::invalid(
                "cluster.edge_grace_s",
                "must be at most 3600 (seconds)",
            ));
        }
        Ok(())
    }

    /// The section with `url` set to `http://HOST:PORT` of this node's HTTP listener
    /// (`host`: the address announced to clients) when the config left it empty.
    pub fn with_default_url(mut self, host: std::net::IpAddr, http: std::net::SocketAddr) -> Self {
        if self.url.is_empty() {
            self.url = format!("http://{}", std::net::SocketAddr::new(host, http.port()));
        }
        self
    }

    /// [`ClusterSection::url`] without a trailing `/`.
    pub fn base_url(&self) -> &str {
        self.url.trim_end_matches('/')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok() -> ClusterSection {
        ClusterSection {
            redis: "redis://127.0.0.1:6379/0".into(),
            sentinel_password: None,
            node: "a".into(),
            url: "http://127.0.0.1:8080".into(),
            secret: "0123456789abcdef".into(),
            redirect: false,
            ttl_s: 3,
            edge_grace_s: 5,
        }
    }

    #[test]
    fn an_empty_url_is_the_listeners_address() {
        let mut c = ok();
        c.url.clear();
        assert!(c.check().is_ok());
        let ip = std::net::IpAddr::from([192, 0, 2, 7]);
        let filled = c.with_default_url(ip, ([0, 0, 0, 0], 8123).into());
        assert_eq!(filled.url, "http://192.0.2.7:8123");
        let kept = ok().with_default_url(ip, ([0, 0, 0, 0], 8123).into());
        assert_eq!(kept.url, "http://127.0.0.1:8080");
        let mut tls = ok();
        tls.url = "https://node-a.example:8443".into();
        assert!(tls.check().is_ok());
    }

    #[test]
    fn names_the_bad_key() {
        assert!(ok().check().is_ok());
        type Breaker = fn(&mut ClusterSection);
        let cases: [(Breaker, &str); 9] = [
            (|c| c.redis = "http://x".into(), "cluster.redis"),
            (|c| c.node = "a b".into(), "cluster.node"),
            (|c| c.url = "127.0.0.1:8080".into(), "cluster.url"),
            (|c| c.url = "http://".into(), "cluster.url"),
            (|c| c.url = "https://".into(), "cluster.url"),
            (|c| c.url = "ftp://h:1".into(), "cluster.url"),
            (|c| c.secret = "short".into(), "cluster.secret"),
            (|c| c.ttl_s = 1, "cluster.ttl_s"),
            (|c| c.edge_grace_s = 7200, "cluster.edge_grace_s"),
        ];
        for (break_it, key) in cases {
            let mut c = ok();
            break_it(&mut c);
            let e = c.check().expect_err(key);
            assert!(
                matches!(&e, ConfigError::Invalid { key: k, .. } if k == key),
                "{e}"
            );
        }
    }

    #[test]
    fn sentinel_urls_parse_and_bad_ones_are_named() {
        let u = SentinelUrl::parse("redis+sentinel://:pw@10.0.0.1:26379,[::1]:26380/mymaster/2")
            .expect("valid");
        assert_eq!(
            u.sentinels,
            vec![("10.0.0.1".to_string(), 26379), ("::1".to_string(), 26380)]
        );
        assert_eq!((u.master.as_str(), u.db), ("mymaster", 2));
        assert_eq!(u.password.as_deref(), Some("pw"));
        let u = SentinelUrl::parse("redis+sentinel://h:1/m").expect("valid");
        assert_eq!((u.db, u.password), (0, None));
        for bad in [
            "redis+sentinel://h:1",
            "redis+sentinel://h:1/",
            "redis+sentinel://h/m",
            "redis+sentinel://h:x/m",
            "redis+sentinel://:1/m",
            "redis+sentinel://h:1/m/x",
            "redis+sentinel://h:1/m/1/2",
        ] {
            assert!(SentinelUrl::parse(bad).is_none(), "{bad}");
        }
        let mut c = ClusterSection {
            redis: "redis+sentinel://h:1/m".into(),
            sentinel_password: None,
            node: "a".into(),
            url: String::new(),
            secret: "0123456789abcdef".into(),
            redirect: false,
            ttl_s: 3,
            edge_grace_s: 5,
        };
        c.check().expect("a sentinel URL passes");
        c.redis = "redis+sentinel://h/m".into();
        let e = c.check().expect_err("bad");
        assert!(e.to_string().contains("cluster.redis"), "{e}");
    }
}

//! [`reconcile`]: what of a new configuration (a reload, the config API) a running server
//! takes, and the keys that only a restart applies.
//!
//! [`reconcile`] is the one table of which key is which: a key the server reads once at start
//! (a listener, a worker count, a ring size, a per-address limit sized at start, the cluster's
//! registration) keeps its running value and is named; the others (every app, the API token,
//! the trusted proxies, TURN's credentials and peer ranges, the global session caps) take the
//! new value. Every field of every section is listed, as one or the other: a field added to a
//! section and not to the table does not compile.

use super::{
    ClusterSection, Config, HlsSection, LimitsSection, ServerConfig, Tunables, TurnSection,
};

/// What of a new configuration a running server can take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconciled {
    /// The new configuration, with every key that needs a restart at its running value.
    pub config: Config,
    /// The keys (dotted, `server.http`) whose new value needs a restart: they differ between
    /// the two configurations and kept the running one. `"cluster"` when the section was
    /// added or removed. In the table's order; empty when nothing waits for a restart.
    pub restart: Vec<&'static str>,
}

/// One section's row of the table: `old` and `new` are the section in the running and the
/// new configuration; each `restart` field that differs takes `old`'s value and is named
/// (`prefix.field`) in `names`; the `live` fields keep `new`'s. The pattern lists every field,
/// so that a new one must be put in a column.
macro_rules! section {
    ($old:ident, $new:ident, $names:ident, $prefix:literal, $ty:ident {
        restart: [$($r:ident),* $(,)?],
        live: [$($l:ident),* $(,)?] $(,)?
    }) => {{
        let $ty { $($r: _,)* $($l: _,)* } = $old;
        $(
            if $old.$r != $new.$r {
                $new.$r = $old.$r.clone();
                $names.push(concat!($prefix, ".", stringify!($r)));
            }
        )*
    }};
}

/// `new` as it applies to a server running `old`: every key that needs a restart keeps old's
/// value and is named (dotted) in `restart`; the rest is new's.
pub fn reconcile(old: &Config, mut new: Config) -> Reconciled {
    // Every section, so that a new one must be put in the table too.
    let Config {
        server: _,
        tunables: _,
        apps: _,
        turn: _,
        limits: _,
        hls: _,
        cluster: _,
    } = old;
    let mut restart = Vec::new();
    let (o, n) = (&old.server, &mut new.server);
    section! { o, n, restart, "server", ServerConfig {
        // Sockets bound, threads and per-worker state made, TLS files read at start (the
        // certificate pair is reloaded from the same paths on its own); the file's watcher
        // starts with the server.
        restart: [
            http, media, candidate, worker_count, app_worker_count, stream_worker_count,
            rtmp, rtmps, srt, https, tls_cert, tls_key, redirect_http, ca_file,
            publisher_connect_timeout, publisher_timeout, watch_config,
        ],
        live: [cname, api_token, trusted_proxies, shutdown_drain_s],
    } }
    let (o, n) = (&old.tunables, &mut new.tunables);
    section! { o, n, restart, "tunables", Tunables {
        // Sizes of what is allocated at start, and the media path's settings.
        restart: [
            max_payload, video_ring, audio_ring, pool_initial, pool_max_free, pool_trim_s,
            srtp_profiles, gso, pause_video_below_estimate,
        ],
        live: [max_handshakes, max_viewers],
    } }
    let (o, n) = (&old.limits, &mut new.limits);
    section! { o, n, restart, "limits", LimitsSection {
        // The engine's spare stream slots are made at start; every per-address limiter (and
        // the TURN server's quota) takes a reload's value for what comes next.
        restart: [dynamic_streams],
        live: [
            pending_sessions_per_ip, ome_connections_per_ip, http_connections_per_ip,
            rtmp_connections_per_ip, srt_connections_per_ip, turn_allocations_per_ip, exempt,
        ],
    } }
    // Every key of `[hls]` is live: the table still lists them all.
    let (o, _n) = (&old.hls, &mut new.hls);
    section! { o, _n, restart, "hls", HlsSection {
        // Packaging started after a reload takes its timing; sessions its limits.
        restart: [],
        live: [
            enabled, part_target_ms, segment_target_ms, ladder_segment_target_ms, window,
            max_sessions, sessions_per_ip, session_timeout_s, player_script,
        ],
    } }
    let (o, n) = (&old.turn, &mut new.turn);
    section! { o, n, restart, "turn", TurnSection {
        // The TURN server's sockets, relay range and quotas.
        restart: [
            listen, tls_listen, tls_host, relay_ip, relay_port_min, relay_port_max, realm,
            max_allocations, max_allocations_per_user, credential_lifetime, max_bps,
        ],
        live: [users, secret, allowed_peers, denied_peers],
    } }
    // The cluster registers this node and connects to Redis at start: all of it restarts.
    match (&old.cluster, &mut new.cluster) {
        (Some(o), Some(n)) => section! { o, n, restart, "cluster", ClusterSection {
            restart: [redis, sentinel_password, node, url, secret, redirect, ttl_s, edge_grace_s],
            live: [],
        } },
        (None, None) => {}
        (_, n) => {
            n.clone_from(&old.cluster);
            restart.push("cluster");
        }
    }
    // `apps`: live, every key of every app (added, changed and removed apps apply).
    Reconciled {
        config: new,
        restart,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Config {
        Config::parse(text, "x.toml").expect("valid")
    }

    #[test]
    fn a_changed_listener_is_named_and_kept() {
        let old = parse("[server]\nhttp = \"0.0.0.0:8080\"\napi_token = \"a\"\n");
        let new = parse(
            "[server]\nhttp = \"0.0.0.0:9090\"\napi_token = \"b\"\n[tunables]\nvideo_ring = 4096\nmax_viewers = 7\n[turn]\nlisten = \"127.0.0.1:3478\"\nusers = [\"u:p\"]\n",
        );
        let r = reconcile(&old, new);
        assert_eq!(
            r.restart,
            ["server.http", "tunables.video_ring", "turn.listen"]
        );
        assert_eq!(r.config.server.http, old.server.http);
        assert_eq!(r.config.tunables.video_ring, old.tunables.video_ring);
        assert_eq!(r.config.turn.listen, None);
        // The live keys beside them apply.
        assert_eq!(r.config.server.api_token.as_deref(), Some("b"));
        assert_eq!(r.config.tunables.max_viewers, 7);
        assert_eq!(r.config.turn.users, ["u:p"]);
        r.config.validate().expect("still valid");
    }

    #[test]
    fn a_changed_app_applies() {
        let old = parse("[[app]]\nname = \"a\"\n[[app]]\nname = \"gone\"\n");
        let new = parse(
            "[[app]]\nname = \"a\"\ntoken = \"t\"\nstreams = [\"s\"]\n[[app]]\nname = \"new\"\n[limits]\npending_sessions_per_ip = 3\n[hls]\nenabled = false\n",
        );
        let r = reconcile(&old, new.clone());
        assert!(r.restart.is_empty(), "{:?}", r.restart);
        assert_eq!(r.config, new);
    }

    #[test]
    fn unchanged_configs_give_an_empty_list() {
        let text = "[server]\nhttp = \"127.0.0.1:1\"\n[[app]]\nname = \"a\"\n[cluster]\nredis = \"redis://h:6379/0\"\nnode = \"n\"\nsecret = \"0123456789abcdef\"\n";
        let r = reconcile(&parse(text), parse(text));
        assert!(r.restart.is_empty());
        assert_eq!(r.config, parse(text));
        let d = reconcile(&Config::default(), Config::default());
        assert!(d.restart.is_empty());
    }

    #[test]
    fn the_cluster_restarts_whole() {
        let with = parse(
            "[cluster]\nredis = \"redis://h:6379/0\"\nnode = \"n\"\nsecret = \"0123456789abcdef\"\n",
        );
        let r = reconcile(&Config::default(), with.clone());
        assert_eq!((r.restart, r.config.cluster), (vec!["cluster"], None));
        let r = reconcile(&with, Config::default());
        assert_eq!(r.restart, ["cluster"]);
        assert_eq!(r.config.cluster, with.cluster);
        let mut renamed = with.clone();
        if let Some(c) = &mut renamed.cluster {
            c.node = "m".into();
        }
        let r = reconcile(&with, renamed);
        assert_eq!(r.restart, ["cluster.node"]);
        assert_eq!(r.config, with);
    }
}

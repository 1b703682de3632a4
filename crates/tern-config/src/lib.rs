//! The configuration file (TOML) and its validation.
//!
//! Every key is optional; command-line flags override the file. An unknown key or a bad value
//! stops start-up with an error that names the key (serde's `deny_unknown_fields` plus
//! [`Config::validate`]); [`Config::parse_all`] and [`Config::validate_all`] give every such
//! error at once, for a reload or the config API. The effective configuration is shown as JSON
//! by [`Config::redacted_json`], without its secrets.
//!
//! One file per section, each with its type, the one `impl Default` that holds its defaults
//! (a key missing from the file takes the section's default) and its own `check`:
//!
//! | file | what |
//! | --- | --- |
//! | `server.rs` | `[server]` ([`ServerConfig`]): addresses, worker counts ([`MAX_WORKERS`]), RTMP, SRT, HTTPS, trusted proxies, publisher timeouts |
//! | `tunables.rs` | `[tunables]` ([`Tunables`]): payload size, rings, the buffer pool, global caps, UDP GSO, SRTP profiles |
//! | `limits.rs` | `[limits]` ([`LimitsSection`]): what one client address may hold |
//! | `turn.rs` | `[turn]` ([`TurnSection`]): the STUN/TURN server |
//! | `hls.rs` | `[hls]` ([`HlsSection`]): Low-Latency HLS |
//! | `app.rs` | `[[app]]` ([`AppConfig`], [`RenditionConfig`], [`TranscodeSetting`]) and the name rule |
//! | `admission.rs` | `[app.admission]` ([`AdmissionConfig`], [`OnError`]) |
//! | `forward.rs` | `[[app.forward]]` ([`ForwardConfig`], [`ForwardUrl`]): restreaming, [`redact_forward_url`] |
//! | `source.rs` | `[[app.source]]` ([`SourceConfig`], [`SourceTransport`]): RTSP cameras, [`redact_url`] |
//! | `record.rs` | `[app.record]` ([`RecordConfig`]): recording to fMP4 files |
//! | `cluster.rs` | `[cluster]` ([`ClusterSection`]): the Redis registry, this node, its secret |
//! | `error.rs` | [`ConfigError`], which every section's check returns |
//! | `parse.rs` | [`Config::parse_all`], [`Config::validate_all`]: every problem of a file, each under its key |
//! | `reload.rs` | [`reload::reconcile`] ([`reload::Reconciled`]): what of a new configuration a running server takes, and the keys that need a restart |
//! | `edit.rs` | [`ConfigFile`]: the file's text edited (apps and their sources) with its comments kept; [`write_atomically`] |
//!
//! This crate is a leaf: it imports nothing of the server (`tern-server`: the engine, the HTTP
//! side, the cluster's running parts), only a few types of `tern-rtc` and `tern-proto`, and
//! the server reads its settings from it (as `tern_server::config`, which re-exports it). The
//! fuzz target `config_app` builds it without the server.

#![forbid(unsafe_code)]

mod admission;
mod app;
mod cluster;
mod edit;
mod error;
mod forward;
mod hls;
mod limits;
mod parse;
mod record;
pub mod reload;
mod server;
mod source;
mod tunables;
mod turn;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use admission::{
    AdmissionConfig, JWKS_URL_RULE, OnError, WEBHOOK_URL_RULE, jwks_url_ok, webhook_url_ok,
};
pub use app::{
    AppConfig, DEFAULT_IDLE_GRACE_S, DEFAULT_JWKS_REFRESH_S, DEFAULT_SRT_LATENCY_MS, FALLBACK_RULE,
    Fallback, NAME_RULE, RenditionConfig, TranscodeSetting, valid_name,
};
pub use cluster::{ClusterSection, RELAY_HEADER, ROUTED_PARAM, SECRET_HEADER, SentinelUrl};
pub use edit::{ConfigFile, write_atomically};
pub use error::ConfigError;
pub use forward::{
    FORWARD_URL_RULE, ForwardConfig, ForwardProtocol, ForwardUrl, expand as expand_forward_url,
    redact_forward_url,
};
pub use hls::HlsSection;
pub use limits::LimitsSection;
pub use record::RecordConfig;
pub use server::{
    DEFAULT_PUBLISHER_TIMEOUT_S, DEFAULT_RTMP, DEFAULT_SRT, MAX_DRAIN_S, MAX_WORKERS, ServerConfig,
    parse_rtmp, parse_srt,
};
pub use source::{SourceConfig, SourceTransport, redact_url};
pub use tunables::{GsoMode, Tunables};
pub use turn::TurnSection;

/// The rules of the closed sets (enums) whose bad values [`Config::parse`] reports like
/// out-of-range numbers: [`ConfigError::Invalid`] under the value's dotted key.
const CLOSED_SET_RULES: [&str; 2] = [OnError::RULE, SourceTransport::RULE];

/// What [`Config::redacted_json`] shows instead of a secret.
const HIDDEN: &str = "***";

/// The whole configuration. Serialized (JSON), its keys are the file's: `app` for
/// [`Config::apps`], `source` for [`AppConfig::sources`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Listening addresses.
    pub server: ServerConfig,
    /// Memory and session tunables (pjnath `config_site.h` in spirit).
    pub tunables: Tunables,
    /// Applications and their declared streams.
    #[serde(rename = "app")]
    pub apps: Vec<AppConfig>,
    /// The built-in STUN/TURN server (off unless `turn.listen` is set).
    pub turn: TurnSection,
    /// Limits per client address (IPv4 address or IPv6 /64).
    pub limits: LimitsSection,
    /// Low-Latency HLS egress.
    pub hls: HlsSection,
    /// Origin/edge clustering over Redis (absent: this node runs alone).
    pub cluster: Option<ClusterSection>,
}

impl Config {
    /// Reads and validates a TOML file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses and validates TOML text (`origin` names it in errors): the first of
    /// [`Config::parse_all`]'s errors.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let (cfg, problems) = Self::read(text, origin);
        match problems.into_iter().next() {
            Some(e) => Err(e),
            None => Ok(cfg),
        }
    }

    /// Checks ranges and names: the first of [`Config::validate_all`]'s errors (the order of
    /// its checks: `[server]`, `[hls]`, `[cluster]`, `[tunables]`, `[limits]`, `[turn]`, then
    /// each app).
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self.problems().into_iter().next() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The configuration as JSON (the file's keys, every default filled in) with its secrets
    /// replaced by `"***"`: `server.api_token`, each app's `token`, `jwt_secret` and
    /// `srt_passphrase`, `turn.secret`, the password of each `turn.users` entry
    /// (`"name:***"`), `cluster.secret`; and the URLs that may carry credentials through
    /// [`redact_url`] (each `[[app.source]]`'s `url`, `cluster.redis`, and the admission,
    /// JWKS and `on_segment_url` URLs, which the checks keep free of them). A secret that is
    /// not set stays `null`.
    pub fn redacted_json(&self) -> serde_json::Value {
        let hide = |s: &mut Option<String>| {
            if s.is_some() {
                *s = Some(HIDDEN.into());
            }
        };
        let mut c = self.clone();
        hide(&mut c.server.api_token);
        hide(&mut c.turn.secret);
        for u in &mut c.turn.users {
            *u = match u.split_once(':') {
                Some((name, _)) => format!("{name}:{HIDDEN}"),
                None => HIDDEN.into(),
            };
        }
        if let Some(cluster) = &mut c.cluster {
            cluster.secret = HIDDEN.into();
            if cluster.sentinel_password.is_some() {
                cluster.sentinel_password = Some(HIDDEN.into());
            }
            cluster.redis = redact_url(&cluster.redis);
        }
        for app in &mut c.apps {
            hide(&mut app.token);
            hide(&mut app.jwt_secret);
            hide(&mut app.srt_passphrase);
            if let Some(u) = &mut app.jwt_jwks_url {
                *u = redact_url(u);
            }
            if let Some(a) = &mut app.admission {
                a.url = redact_url(&a.url);
            }
            app.record.on_segment_url = redact_url(&app.record.on_segment_url);
            for s in &mut app.sources {
                s.url = redact_url(&s.url);
            }
            for f in &mut app.forwards {
                f.url = redact_forward_url(&f.url);
            }
        }
        // Every map key is a string and paths are written lossily ([`ser_path`]), so this
        // cannot fail; if it ever did, the error is shown rather than a secret.
        serde_json::to_value(&c).unwrap_or_else(|e| serde_json::Value::String(e.to_string()))
    }

    /// The app named `name`, if configured.
    pub fn app(&self, name: &str) -> Option<&AppConfig> {
        self.apps.iter().find(|a| a.name == name)
    }
}

/// A path as text (JSON has no other form for it), a non-UTF-8 one lossily: the configuration
/// shown must not fail on a path given on the command line.
fn ser_path<S: serde::Serializer>(p: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
    match p {
        Some(p) => s.serialize_some(&p.to_string_lossy()),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_key_is_named() {
        let e = Config::parse("[server]\nhtp = \"1.2.3.4:1\"\n", "x.toml").expect_err("must fail");
        assert!(e.to_string().contains("htp"), "{e}");
    }

    #[test]
    fn bad_value_is_named() {
        let e = Config::parse("[tunables]\nmax_payload = 5\n", "x.toml").expect_err("must fail");
        assert!(e.to_string().contains("tunables.max_payload"), "{e}");
        let e = Config::parse("[[app]]\nname = \"a/b\"\n", "x.toml").expect_err("must fail");
        assert!(e.to_string().contains("app[0].name"), "{e}");
    }

    #[test]
    fn an_empty_file_is_every_default_and_passes() {
        let c = Config::parse("", "x.toml").expect("valid");
        let d = Config::default();
        assert_eq!(format!("{c:?}"), format!("{d:?}"));
        d.validate().expect("the defaults pass their checks");
        // An empty section is its defaults too.
        let c = Config::parse("[server]\n[tunables]\n[turn]\n[limits]\n[hls]\n", "x.toml")
            .expect("valid");
        assert_eq!(format!("{c:?}"), format!("{d:?}"));
        // A key given keeps the rest of its section at their defaults.
        let c = Config::parse("[hls]\nwindow = 9\n", "x.toml").expect("valid");
        assert_eq!(c.hls.window, 9);
        assert_eq!(c.hls.part_target_ms, HlsSection::default().part_target_ms);
    }

    #[test]
    fn unknown_keys_are_refused_in_every_section() {
        for section in [
            "server",
            "tunables",
            "turn",
            "limits",
            "hls",
            "app.admission",
        ] {
            let text = if section == "app.admission" {
                "[[app]]\nname = \"a\"\n[app.admission]\nurl = \"http://h/\"\nbogus = 1\n".into()
            } else {
                format!("[{section}]\nbogus = 1\n")
            };
            let e = Config::parse(&text, "x.toml").expect_err(section);
            assert!(matches!(e, ConfigError::Parse { .. }), "{section}: {e}");
            assert!(e.to_string().contains("unknown field `bogus`"), "{e}");
        }
        let e = Config::parse("[[app]]\nname = \"a\"\nbogus = 1\n", "x.toml").expect_err("app");
        assert!(e.to_string().contains("unknown field `bogus`"), "{e}");
        let e = Config::parse("bogus = 1\n", "x.toml").expect_err("top level");
        assert!(e.to_string().contains("unknown field `bogus`"), "{e}");
    }

    #[test]
    fn the_json_shows_no_secret() {
        let secrets = [
            "api-token-secret",
            "app-token-secret",
            "jwt-hmac-secret",
            "srt-passphrase-secret",
            "turn-rest-secret",
            "turn-user-password",
            "cluster-secret-0123456789",
            "redis-password",
            "camera-password",
        ];
        let text = format!(
            "[server]\napi_token = \"{}\"\nrtmp = \"none\"\n\
             [[app]]\nname = \"live\"\ntoken = \"{}\"\njwt_secret = \"{}\"\n\
             srt_passphrase = \"{}\"\n\
             [[app.source]]\nstream = \"cam\"\nurl = \"rtsp://admin:{}@192.0.2.1/1\"\n\
             [[app]]\nname = \"open\"\n\
             [turn]\nsecret = \"{}\"\nusers = [\"alice:{}\"]\n\
             [cluster]\nredis = \"redis://:{}@h:6379/0\"\nnode = \"a\"\nsecret = \"{}\"\n",
            secrets[0],
            secrets[1],
            secrets[2],
            secrets[3],
            secrets[8],
            secrets[4],
            secrets[5],
            secrets[7],
            secrets[6],
        );
        let c = Config::parse(&text, "x.toml").expect("valid");
        let json = c.redacted_json();
        let shown = json.to_string();
        for s in secrets {
            assert!(!shown.contains(s), "{s} in {shown}");
        }
        assert_eq!(json["server"]["api_token"], "***");
        assert_eq!(json["server"]["rtmp"], "none");
        assert_eq!(json["server"]["srt"], serde_json::Value::Null);
        assert_eq!(json["app"][0]["token"], "***");
        assert_eq!(json["app"][0]["jwt_secret"], "***");
        assert_eq!(json["app"][0]["srt_passphrase"], "***");
        assert_eq!(json["app"][0]["source"][0]["url"], "rtsp://***@192.0.2.1/1");
        assert_eq!(json["app"][0]["source"][0]["transport"], "tcp");
        // A secret that is not set is shown as not set.
        assert_eq!(json["app"][1]["token"], serde_json::Value::Null);
        assert_eq!(json["turn"]["users"][0], "alice:***");
        assert_eq!(json["turn"]["secret"], "***");
        assert_eq!(json["cluster"]["secret"], "***");
        assert_eq!(json["cluster"]["redis"], "redis://***@h:6379/0");
        // Everything else is the configuration in force, defaults filled in.
        assert_eq!(json["hls"]["window"], 6);
        assert_eq!(json["tunables"]["srtp_profiles"][0], "aes128gcm");
        assert_eq!(json["app"][1]["record"]["part_s"], 1);
        // The configuration itself is unchanged.
        assert_eq!(c.server.api_token.as_deref(), Some(secrets[0]));
    }

    #[test]
    fn paths_are_shown_even_when_not_utf8() {
        use std::os::unix::ffi::OsStrExt;
        let mut c = Config::default();
        c.server.tls_cert = Some(std::ffi::OsStr::from_bytes(b"/etc/\xffcert.pem").into());
        let json = c.redacted_json();
        assert_eq!(json["server"]["tls_cert"], "/etc/\u{fffd}cert.pem");
        assert_eq!(json["server"]["tls_key"], serde_json::Value::Null);
    }

    #[test]
    fn sections_are_checked_in_a_fixed_order() {
        // Two bad keys: the one of the section checked first is reported (server, hls,
        // cluster, tunables, limits, turn, apps), whatever their order in the file.
        let e = Config::parse("[server]\nworker_count = 0\n[hls]\nwindow = 0\n", "x.toml")
            .expect_err("bad");
        assert!(e.to_string().contains("server.worker_count"), "{e}");
        let e = Config::parse(
            "[turn]\nrealm = \"\"\n[limits]\nexempt = [\"x\"]\n",
            "x.toml",
        )
        .expect_err("bad");
        assert!(e.to_string().contains("limits.exempt[0]"), "{e}");
    }
}

//! The configuration file (TOML) and its validation.
//!
//! Every key is optional; command-line flags override the file. An unknown key or a bad value
//! stops start-up with an error that names the key (serde's `deny_unknown_fields` plus
//! [`Config::validate`]).
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
//! | `source.rs` | `[[app.source]]` ([`SourceConfig`], [`SourceTransport`]): RTSP cameras, [`redact_url`] |
//! | `record.rs` | `[app.record]` ([`RecordConfig`]): recording to fMP4 files |
//! | `error.rs` | [`ConfigError`], which every section's check returns |
//!
//! | `cluster.rs` | `[cluster]` ([`ClusterSection`]): the Redis registry, this node, its secret |
//!
//! This folder is a leaf: it imports nothing of the engine, the HTTP side or the cluster's
//! running parts, and they read their settings from it.

mod admission;
mod app;
mod cluster;
mod error;
mod hls;
mod limits;
mod record;
mod server;
mod source;
mod tunables;
mod turn;

use std::path::Path;

use serde::Deserialize;

pub use admission::{
    AdmissionConfig, JWKS_URL_RULE, OnError, WEBHOOK_URL_RULE, jwks_url_ok, webhook_url_ok,
};
pub use app::{
    AppConfig, DEFAULT_IDLE_GRACE_S, DEFAULT_JWKS_REFRESH_S, DEFAULT_SRT_LATENCY_MS, FALLBACK_RULE,
    Fallback, NAME_RULE, RenditionConfig, TranscodeSetting, valid_name,
};
pub use cluster::{ClusterSection, ROUTED_PARAM, SECRET_HEADER};
pub use error::ConfigError;
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

/// The whole configuration.
#[derive(Debug, Clone, Default, Deserialize)]
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

    /// Parses and validates TOML text (`origin` names it in errors).
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let parse_error = |e: toml::de::Error| ConfigError::Parse {
            path: origin.to_string(),
            message: e.to_string().trim().replace('\n', " "),
        };
        let document = toml::Deserializer::parse(text).map_err(parse_error)?;
        // The path to the value that failed, for the closed sets' errors.
        let cfg: Config = serde_path_to_error::deserialize(document).map_err(|e| {
            let key = e.path().to_string();
            let e = e.into_inner();
            if CLOSED_SET_RULES.contains(&e.message()) {
                ConfigError::invalid(key, e.message())
            } else {
                parse_error(e)
            }
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks ranges and names: each section's own check (`[server]`, `[hls]`, `[cluster]`,
    /// `[tunables]`, `[limits]`, `[turn]`, then each app, whose name must not repeat an
    /// earlier app's). The first bad key is the error.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.server.check()?;
        self.hls.check()?;
        if let Some(c) = &self.cluster {
            c.check()?;
        }
        self.tunables.check()?;
        self.limits.check()?;
        self.turn.check()?;
        self.turn
            .check_tls(self.server.tls_cert.is_some() && self.server.tls_key.is_some())?;
        for (i, app) in self.apps.iter().enumerate() {
            let place = format!("app[{i}]");
            // A name taken by an earlier app was checked there.
            if self.apps[..i].iter().any(|a| a.name == app.name) {
                return Err(ConfigError::invalid(
                    format!("{place}.name"),
                    "duplicate app name",
                ));
            }
            app.check().map_err(|e| e.under(&place))?;
        }
        Ok(())
    }

    /// The app named `name`, if configured.
    pub fn app(&self, name: &str) -> Option<&AppConfig> {
        self.apps.iter().find(|a| a.name == name)
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

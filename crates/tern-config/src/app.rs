//! `[[app]]`: one application, its streams, tokens and renditions; and the rule for app and
//! stream names.

use serde::{Deserialize, Serialize};
use tern_rtc::renditions::{MAX_RENDITIONS, RenditionSpec, SOURCE_RID};

use super::admission::AdmissionConfig;
use super::error::ConfigError;

/// Default `idle_grace_s`.
pub const DEFAULT_IDLE_GRACE_S: u64 = 10;

/// Default `srt_latency_ms`: libsrt's default latency (`SRTO_LATENCY`).
pub const DEFAULT_SRT_LATENCY_MS: u64 = 120;

/// Default `jwt_jwks_refresh_s`: 5 minutes, so a key an identity provider adds is known
/// within that without waiting for a token to name it (an unknown `kid` refetches at once
/// anyway); Auth0 and Keycloak rotate over days.
pub const DEFAULT_JWKS_REFRESH_S: u64 = 300;

/// The rule [`valid_name`] checks, as errors state it.
pub const NAME_RULE: &str = "must be 1-64 characters of [A-Za-z0-9._-]";

/// Whether `s` is a valid app or stream name: 1-64 characters of `A-Z a-z 0-9 . _ -`.
pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// One application (the `{app}` in URLs).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AppConfig {
    /// Application name.
    pub name: String,
    /// Bearer token required for WHEP/WHIP on this app, if any.
    #[serde(default)]
    pub token: Option<String>,
    /// Declared streams: they exist (WHEP answers 409 while not live) without a publisher.
    #[serde(default)]
    pub streams: Vec<String>,
    /// Whether publishers (RTMP, WHIP) may publish to names not in `streams`, making the
    /// stream while they are live. Default true; false keeps the closed list.
    #[serde(default = "AppConfig::default_dynamic")]
    pub dynamic: bool,
    /// Seconds a publisher-made stream outlives its publisher (a reconnecting encoder keeps
    /// its viewers); then it is removed and its viewers ended. Default 10.
    #[serde(default = "AppConfig::default_idle_grace_s")]
    pub idle_grace_s: u64,
    /// HS256 secret: when set, every publish and play needs a JWT (Bearer for WHEP/WHIP,
    /// `?token=` for RTMP and OME signalling) with `sub` = `app/stream`, `act` = `publish`
    /// or `play`, and `exp`. One key source per app: not with `jwt_public_key` or
    /// `jwt_jwks_url`.
    #[serde(default)]
    pub jwt_secret: Option<String>,
    /// A PEM file with the public key tokens are signed with (SPKI `PUBLIC KEY`, PKCS#1
    /// `RSA PUBLIC KEY`, or a `CERTIFICATE`): RSA (RS256/384/512, PS256/384/512), EC P-256 or
    /// P-384 (ES256, ES384) or Ed25519 (EdDSA). Read at start; one that does not parse
    /// stops it. The same claims as with `jwt_secret`.
    #[serde(default, serialize_with = "super::ser_path")]
    pub jwt_public_key: Option<std::path::PathBuf>,
    /// The identity provider's JWKS (`https://.../jwks.json`): the token's `kid` picks the
    /// key. Fetched at start, every `jwt_jwks_refresh_s`, and at once (at most every 10 s)
    /// for a `kid` not in the set, so a rotation needs no restart. `http://` only to
    /// 127.0.0.1, ::1 or localhost.
    #[serde(default)]
    pub jwt_jwks_url: Option<String>,
    /// Seconds between two fetches of `jwt_jwks_url`. Default 300; 1 to 86400.
    #[serde(default = "AppConfig::default_jwks_refresh_s")]
    pub jwt_jwks_refresh_s: u64,
    /// When set, a token's `iss` must be this.
    #[serde(default)]
    pub jwt_issuer: Option<String>,
    /// When set, a token's `aud` must be (or contain) this.
    #[serde(default)]
    pub jwt_audience: Option<String>,
    /// End a session admitted by JWT when its token expires. Default false.
    #[serde(default)]
    pub end_at_exp: bool,
    /// Admission webhook, asked before every publish and play.
    #[serde(default)]
    pub admission: Option<AdmissionConfig>,
    /// What to do with an RTMP publisher whose H264 has B-frames, which WebRTC players
    /// cannot play smoothly: `"auto"` (default) transcodes it to Constrained Baseline while
    /// the stream has viewers, `"never"` passes it through (with a warning).
    #[serde(default)]
    pub transcode: TranscodeSetting,
    /// Lower video layers made from an RTMP, SRT or RTSP (camera) publisher's H264 video
    /// (decoded, scaled, encoded again), so that its viewers can move between layers as with a simulcast WHIP
    /// publisher, and its LL-HLS is a ladder: at most 2, each `{ rid, height, bitrate_kbps }`.
    /// The source is layer `h`; rendition `i` is layer `i + 1`. Default none: such a stream
    /// has one layer.
    #[serde(default)]
    pub renditions: Vec<RenditionConfig>,
    /// `[app.record]`: recording the app's streams to files.
    #[serde(default)]
    pub record: super::record::RecordConfig,
    /// SRT encryption: callers must use this passphrase (10-79 characters, as libsrt);
    /// any key length (`pbkeylen` 16, 24 or 32). A caller with no or another passphrase is
    /// refused at the handshake. Default none: SRT publishers send in the clear (a caller
    /// that encrypts is refused, since its stream could not be read).
    #[serde(default)]
    pub srt_passphrase: Option<String>,
    /// SRT latency (ms) this app's publishers get at least: the receive buffer in which SRT
    /// retransmits what was lost, so about 4 round trips of the path. Default 120 (libsrt's).
    /// 20 to 8000.
    #[serde(default = "AppConfig::default_srt_latency_ms")]
    pub srt_latency_ms: u64,
    /// `[[app.source]]`: RTSP cameras pulled into this app's streams (`tern_server::rtsp`).
    /// Each declares its stream; a publisher on it is refused.
    #[serde(default, rename = "source")]
    pub sources: Vec<super::source::SourceConfig>,
    /// `[[app.forward]]`: where the app's streams are sent on while they are live
    /// (restreaming over RTMP, RTMPS or SRT).
    #[serde(default, rename = "forward")]
    pub forwards: Vec<super::forward::ForwardConfig>,
    /// What a stream of the app plays while it has no publisher: `"none"` (default: its
    /// viewers wait), `"clip"` (the built-in clip) or `"file:PATH"` (an MP4 with H264 and
    /// AAC or Opus, looped). A declared stream plays it from the start; a publisher-made
    /// one for its `idle_grace_s` after its publisher leaves. See [`Fallback`].
    #[serde(default = "AppConfig::default_fallback")]
    pub fallback: String,
}

/// `[app] fallback`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fallback {
    /// No slate.
    None,
    /// The built-in clip.
    Clip,
    /// An MP4 file.
    File(std::path::PathBuf),
}

/// What `fallback` may be, as errors state it.
pub const FALLBACK_RULE: &str = "must be \"none\", \"clip\" or \"file:PATH\" (an MP4 file)";

impl Fallback {
    /// `"none"`, `"clip"` or `"file:PATH"` (a non-empty path); `None` for anything else.
    pub fn parse(s: &str) -> Option<Fallback> {
        match s {
            "none" => Some(Fallback::None),
            "clip" => Some(Fallback::Clip),
            _ => s
                .strip_prefix("file:")
                .filter(|p| !p.is_empty())
                .map(|p| Fallback::File(p.into())),
        }
    }
}

/// One entry of `[app] renditions`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RenditionConfig {
    /// The layer's RID, what `?layer=` names: 1-8 characters of `[A-Za-z0-9_-]`, unique in
    /// the app, not `"h"` (the source's).
    pub rid: String,
    /// Picture height in pixels, even, 2-2160 (capped at the source's); the width keeps
    /// the source's aspect ratio.
    pub height: u32,
    /// Average bitrate in kbit/s, 50-50000, held by a one-second VBV.
    pub bitrate_kbps: u32,
}

/// `[app] transcode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TranscodeSetting {
    /// Transcode B-frame video while it has viewers.
    #[default]
    Auto,
    /// Never transcode.
    Never,
}

// `name` has no default, so the entry cannot take its other keys from an `impl Default`
// (serde's container `default` would make `name` optional too, and a missing `name` would
// no longer be reported as a missing field): the defaults that are not the types' own are
// here.
impl AppConfig {
    /// Default `dynamic`: publishers may make streams.
    const fn default_dynamic() -> bool {
        true
    }

    /// Default `srt_latency_ms`: [`DEFAULT_SRT_LATENCY_MS`].
    const fn default_srt_latency_ms() -> u64 {
        DEFAULT_SRT_LATENCY_MS
    }

    /// Default `jwt_jwks_refresh_s`: [`DEFAULT_JWKS_REFRESH_S`].
    const fn default_jwks_refresh_s() -> u64 {
        DEFAULT_JWKS_REFRESH_S
    }

    /// Whether the app checks signed tokens (any of `jwt_secret`, `jwt_public_key`,
    /// `jwt_jwks_url`).
    pub fn uses_jwt(&self) -> bool {
        self.jwt_secret.is_some() || self.jwt_public_key.is_some() || self.jwt_jwks_url.is_some()
    }

    /// Default `idle_grace_s`: [`DEFAULT_IDLE_GRACE_S`].
    const fn default_idle_grace_s() -> u64 {
        DEFAULT_IDLE_GRACE_S
    }

    /// Default `fallback`: none.
    fn default_fallback() -> String {
        "none".into()
    }

    /// `fallback`, parsed (`none` if it does not parse: [`AppConfig::check`] refuses that).
    pub fn fallback(&self) -> Fallback {
        Fallback::parse(&self.fallback).unwrap_or(Fallback::None)
    }

    /// The RIDs of a frame publisher's layers (RTMP, SRT, RTSP): the source's (`"h"`) and
    /// the renditions', in layer order; empty without renditions (one layer, no simulcast).
    pub fn layer_rids(&self) -> Vec<Box<str>> {
        if self.renditions.is_empty() {
            return Vec::new();
        }
        std::iter::once(SOURCE_RID.into())
            .chain(self.renditions.iter().map(|r| r.rid.as_str().into()))
            .collect()
    }

    /// The source that feeds stream `stream`, if one does.
    pub fn source(&self, stream: &str) -> Option<&super::source::SourceConfig> {
        self.sources.iter().find(|s| s.stream == stream)
    }

    /// The renditions as the RTMP publisher takes them.
    pub fn rendition_specs(&self) -> Vec<RenditionSpec> {
        self.renditions
            .iter()
            .map(|r| RenditionSpec {
                rid: r.rid.as_str().into(),
                height: r.height,
                bitrate_kbps: r.bitrate_kbps,
            })
            .collect()
    }

    /// The first bad key of the app, named inside it (`token`, `streams[1]`): the caller
    /// puts it under the app's place in the list. Whether another app has the same name is
    /// the caller's to check.
    pub fn check(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, message: &str| Err(ConfigError::invalid(key, message));
        if !valid_name(&self.name) {
            return bad("name", NAME_RULE);
        }
        if self.name == "v1" {
            return bad("name", "\"v1\" is reserved: /v1/... is the management API");
        }
        if self.jwt_secret.as_deref().is_some_and(str::is_empty) {
            return bad("jwt_secret", "must not be empty");
        }
        self.check_jwt()?;
        if let Some(a) = &self.admission {
            a.check()?;
        }
        self.record.check()?;
        if self.token.as_deref().is_some_and(str::is_empty) {
            return bad("token", "must not be empty");
        }
        if Fallback::parse(&self.fallback).is_none() {
            return bad("fallback", FALLBACK_RULE);
        }
        if let Some(p) = &self.srt_passphrase
            && !(10..=79).contains(&p.len())
        {
            return bad("srt_passphrase", "must be 10 to 79 characters (as libsrt)");
        }
        if !(20..=8000).contains(&self.srt_latency_ms) {
            return bad("srt_latency_ms", "must be between 20 and 8000 (ms)");
        }
        for (j, s) in self.streams.iter().enumerate() {
            if !valid_name(s) {
                return bad(&format!("streams[{j}]"), NAME_RULE);
            }
        }
        for (j, src) in self.sources.iter().enumerate() {
            let place = format!("source[{j}]");
            if !valid_name(&src.stream) {
                return bad(&format!("{place}.stream"), NAME_RULE);
            }
            src.check().map_err(|e| e.under(&place))?;
            if self.sources[..j].iter().any(|o| o.stream == src.stream) {
                return bad(
                    &format!("{place}.stream"),
                    "another source feeds this stream",
                );
            }
        }
        for (j, f) in self.forwards.iter().enumerate() {
            let place = format!("forward[{j}]");
            f.check().map_err(|e| e.under(&place))?;
            if let Some(k) = f.streams.iter().position(|s| !valid_name(s)) {
                return bad(&format!("{place}.streams[{k}]"), NAME_RULE);
            }
        }
        self.check_renditions()
    }

    /// What is wrong with the `jwt_*` keys and `end_at_exp`, named inside the app.
    fn check_jwt(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, message: &str| Err(ConfigError::invalid(key, message));
        if self.jwt_secret.is_some()
            && (self.jwt_public_key.is_some() || self.jwt_jwks_url.is_some())
        {
            return bad(
                "jwt_secret",
                "not with jwt_public_key or jwt_jwks_url: one key source per app (an HMAC secret beside public keys would let a token signed with the public key pass)",
            );
        }
        if self.jwt_public_key.is_some() && self.jwt_jwks_url.is_some() {
            return bad(
                "jwt_public_key",
                "not with jwt_jwks_url: one key source per app",
            );
        }
        if self
            .jwt_public_key
            .as_ref()
            .is_some_and(|p| p.as_os_str().is_empty())
        {
            return bad("jwt_public_key", "must name a PEM file");
        }
        if let Some(u) = &self.jwt_jwks_url
            && !super::admission::jwks_url_ok(u)
        {
            return bad("jwt_jwks_url", super::admission::JWKS_URL_RULE);
        }
        if !(1..=86_400).contains(&self.jwt_jwks_refresh_s) {
            return bad(
                "jwt_jwks_refresh_s",
                "must be between 1 and 86400 (seconds)",
            );
        }
        for (key, v) in [
            ("jwt_issuer", &self.jwt_issuer),
            ("jwt_audience", &self.jwt_audience),
        ] {
            match v {
                Some(v) if v.is_empty() => return bad(key, "must not be empty"),
                Some(_) if !self.uses_jwt() => {
                    return bad(key, "needs jwt_secret, jwt_public_key or jwt_jwks_url");
                }
                _ => {}
            }
        }
        if self.end_at_exp && !self.uses_jwt() {
            return bad(
                "end_at_exp",
                "needs jwt_secret, jwt_public_key or jwt_jwks_url",
            );
        }
        Ok(())
    }

    /// What is wrong with `renditions`, named inside the app.
    fn check_renditions(&self) -> Result<(), ConfigError> {
        let r = &self.renditions;
        if r.len() > MAX_RENDITIONS {
            return Err(ConfigError::invalid(
                "renditions",
                format!("at most {MAX_RENDITIONS} (with the source, 3 layers)"),
            ));
        }
        for (j, x) in r.iter().enumerate() {
            let bad = |k: &str, message: String| {
                Err(ConfigError::invalid(
                    format!("renditions[{j}].{k}"),
                    message,
                ))
            };
            let rid_ok = (1..=8).contains(&x.rid.len())
                && x.rid
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !rid_ok {
                return bad("rid", "must be 1-8 characters of [A-Za-z0-9_-]".into());
            }
            if x.rid == SOURCE_RID {
                return bad("rid", format!("\"{SOURCE_RID}\" is the source's layer"));
            }
            if r[..j].iter().any(|y| y.rid == x.rid) {
                return bad("rid", "duplicate rid".into());
            }
            if !(2..=2160).contains(&x.height) || x.height % 2 != 0 {
                return bad("height", "must be even and between 2 and 2160".into());
            }
            if !(50..=50_000).contains(&x.bitrate_kbps) {
                return bad("bitrate_kbps", "must be between 50 and 50000".into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, OnError, SourceTransport};

    #[test]
    fn apps_parse() {
        let c = Config::parse(
            "[[app]]\nname = \"live\"\ntoken = \"s3cret\"\nstreams = [\"idle\"]\n",
            "x.toml",
        )
        .expect("valid");
        let app = c.app("live").expect("valid");
        assert_eq!(app.token.as_deref(), Some("s3cret"));
        assert_eq!(app.streams, vec!["idle".to_string()]);
    }

    #[test]
    fn defaults_of_the_optional_keys() {
        let c = Config::parse("[[app]]\nname = \"live\"\n", "x.toml").expect("valid");
        let a = &c.apps[0];
        assert!(a.dynamic && !a.end_at_exp);
        assert_eq!(a.idle_grace_s, DEFAULT_IDLE_GRACE_S);
        assert_eq!(a.transcode, TranscodeSetting::Auto);
        assert!(a.token.is_none() && a.jwt_secret.is_none() && a.admission.is_none());
        assert!(a.jwt_public_key.is_none() && a.jwt_jwks_url.is_none() && !a.uses_jwt());
        assert_eq!(a.jwt_jwks_refresh_s, DEFAULT_JWKS_REFRESH_S);
        assert!(a.jwt_issuer.is_none() && a.jwt_audience.is_none());
        assert!(a.streams.is_empty() && a.renditions.is_empty());
        // `name` is required, and named by the parser when missing.
        let e = Config::parse("[[app]]\nstreams = [\"a\"]\n", "x.toml").expect_err("no name");
        assert!(e.to_string().contains("missing field `name`"), "{e}");
    }

    #[test]
    fn names_the_bad_key_inside_the_app() {
        let ok = || AppConfig {
            name: "live".into(),
            token: None,
            streams: vec!["cam".into()],
            dynamic: true,
            idle_grace_s: DEFAULT_IDLE_GRACE_S,
            jwt_secret: None,
            jwt_public_key: None,
            jwt_jwks_url: None,
            jwt_jwks_refresh_s: DEFAULT_JWKS_REFRESH_S,
            jwt_issuer: None,
            jwt_audience: None,
            end_at_exp: false,
            admission: None,
            transcode: TranscodeSetting::Auto,
            renditions: Vec::new(),
            record: Default::default(),
            srt_passphrase: Some("0123456789".into()),
            srt_latency_ms: DEFAULT_SRT_LATENCY_MS,
            sources: Vec::new(),
            forwards: Vec::new(),
            fallback: "none".into(),
        };
        assert!(ok().check().is_ok());
        type Breaker = fn(&mut AppConfig);
        let cases: [(Breaker, &str); 24] = [
            (|a| a.fallback = "black".into(), "fallback"),
            (|a| a.fallback = "file:".into(), "fallback"),
            (|a| a.fallback = "Clip".into(), "fallback"),
            (
                |a| {
                    a.jwt_secret = Some("s".into());
                    a.jwt_jwks_url = Some("https://idp/jwks".into());
                },
                "jwt_secret",
            ),
            (
                |a| {
                    a.jwt_secret = Some("s".into());
                    a.jwt_public_key = Some("k.pem".into());
                },
                "jwt_secret",
            ),
            (
                |a| {
                    a.jwt_public_key = Some("k.pem".into());
                    a.jwt_jwks_url = Some("https://idp/jwks".into());
                },
                "jwt_public_key",
            ),
            (|a| a.jwt_public_key = Some("".into()), "jwt_public_key"),
            (
                |a| a.jwt_jwks_url = Some("http://idp.example/jwks".into()),
                "jwt_jwks_url",
            ),
            (|a| a.jwt_jwks_url = Some("idp/jwks".into()), "jwt_jwks_url"),
            (|a| a.jwt_jwks_refresh_s = 0, "jwt_jwks_refresh_s"),
            (|a| a.jwt_issuer = Some("https://idp/".into()), "jwt_issuer"),
            (
                |a| {
                    a.jwt_jwks_url = Some("https://idp/jwks".into());
                    a.jwt_audience = Some(String::new());
                },
                "jwt_audience",
            ),
            (
                |a| {
                    a.jwt_public_key = Some("k.pem".into());
                    a.jwt_issuer = Some(String::new());
                },
                "jwt_issuer",
            ),
            (
                |a| a.srt_passphrase = Some("short".into()),
                "srt_passphrase",
            ),
            (
                |a| a.srt_passphrase = Some("x".repeat(80)),
                "srt_passphrase",
            ),
            (|a| a.srt_latency_ms = 10, "srt_latency_ms"),
            (|a| a.name = String::new(), "name"),
            (|a| a.name = "x".repeat(65), "name"),
            (|a| a.jwt_secret = Some(String::new()), "jwt_secret"),
            (|a| a.end_at_exp = true, "end_at_exp"),
            (|a| a.token = Some(String::new()), "token"),
            (|a| a.streams.push("a b".into()), "streams[1]"),
            (
                |a| {
                    a.admission = Some(AdmissionConfig {
                        url: "ftp://x".into(),
                        timeout_ms: 1,
                        on_error: OnError::Allow,
                        max_in_flight: 1,
                    });
                },
                "admission.url",
            ),
            (
                |a| {
                    a.renditions = vec![RenditionConfig {
                        rid: "m".into(),
                        height: 360,
                        bitrate_kbps: 1,
                    }];
                },
                "renditions[0].bitrate_kbps",
            ),
        ];
        for (break_it, key) in cases {
            let mut a = ok();
            break_it(&mut a);
            let e = a.check().expect_err(key);
            assert!(
                e.to_string().starts_with(&format!("config key `{key}`: ")),
                "{e}"
            );
        }
        let named = AppConfig {
            jwt_secret: Some("s".into()),
            end_at_exp: true,
            name: "a-Z_0.9".into(),
            ..ok()
        };
        assert!(named.check().is_ok());
        for fine in [
            AppConfig {
                jwt_jwks_url: Some("https://idp.example/.well-known/jwks.json".into()),
                jwt_jwks_refresh_s: 1,
                jwt_issuer: Some("https://idp.example/".into()),
                jwt_audience: Some("tern".into()),
                end_at_exp: true,
                ..ok()
            },
            AppConfig {
                jwt_jwks_url: Some("http://127.0.0.1:9/jwks".into()),
                jwt_jwks_refresh_s: 86_400,
                ..ok()
            },
            AppConfig {
                jwt_public_key: Some("/etc/tern/jwt.pem".into()),
                end_at_exp: true,
                ..ok()
            },
            AppConfig {
                jwt_secret: Some("s".into()),
                jwt_audience: Some("tern".into()),
                ..ok()
            },
            AppConfig {
                fallback: "clip".into(),
                ..ok()
            },
            AppConfig {
                fallback: "file:/srv/slate.mp4".into(),
                ..ok()
            },
        ] {
            assert!(fine.check().is_ok(), "{fine:?}");
        }
        assert_eq!(
            AppConfig {
                fallback: "file:slate.mp4".into(),
                ..ok()
            }
            .fallback(),
            Fallback::File("slate.mp4".into())
        );
        assert_eq!(ok().fallback(), Fallback::None);
    }

    #[test]
    fn app_keys_are_named_with_the_apps_place() {
        for (text, key, message) in [
            (
                "[[app]]\nname = \"a\"\n[[app]]\nname = \"a\"\n",
                "app[1].name",
                "duplicate app name",
            ),
            (
                "[[app]]\nname = \"v1\"\n",
                "app[0].name",
                "\"v1\" is reserved: /v1/... is the management API",
            ),
            (
                "[[app]]\nname = \"c\"\n[[app.source]]\nstream = \"d\"\nurl = \"rtsp://h/x\"\n[[app.source]]\nstream = \"d\"\nurl = \"rtsp://h/y\"\n",
                "app[0].source[1].stream",
                "another source feeds this stream",
            ),
            (
                "[[app]]\nname = \"c\"\n[[app.source]]\nstream = \"d\"\nurl = \"rtsp://u:p@h/x\"\ntransport = \"sctp\"\n",
                "app[0].source[0].transport",
                SourceTransport::RULE,
            ),
            (
                "[[app]]\nname = \"c\"\n[[app.source]]\nstream = \"d\"\nurl = \"http://h/x\"\n",
                "app[0].source[0].url",
                "must start with rtsp:// or rtsps://",
            ),
            (
                "[[app]]\nname = \"a\"\n[[app]]\nname = \"b\"\nstreams = [\"ok\", \"no/slash\"]\n",
                "app[1].streams[1]",
                NAME_RULE,
            ),
            (
                "[[app]]\nname = \"a\"\nend_at_exp = true\n",
                "app[0].end_at_exp",
                "needs jwt_secret, jwt_public_key or jwt_jwks_url",
            ),
            (
                "[[app]]\nname = \"a\"\n[app.admission]\nurl = \"http://h/\"\ntimeout_ms = 0\n",
                "app[0].admission.timeout_ms",
                "must be 1-60000",
            ),
        ] {
            let e = Config::parse(text, "x.toml").expect_err(text);
            assert_eq!(e.to_string(), format!("config key `{key}`: {message}"));
        }
    }

    #[test]
    fn renditions_parse_and_bad_ones_are_named() {
        let c = Config::parse(
            "[[app]]\nname = \"live\"\nrenditions = [{ rid = \"m\", height = 360, bitrate_kbps = 800 }, { rid = \"l\", height = 180, bitrate_kbps = 250 }]\n",
            "x.toml",
        )
        .expect("valid");
        let app = c.app("live").expect("app");
        assert_eq!(
            app.renditions,
            [
                RenditionConfig {
                    rid: "m".into(),
                    height: 360,
                    bitrate_kbps: 800
                },
                RenditionConfig {
                    rid: "l".into(),
                    height: 180,
                    bitrate_kbps: 250
                }
            ]
        );
        assert_eq!(
            app.layer_rids(),
            ["h", "m", "l"].map(Box::<str>::from).to_vec()
        );
        assert_eq!(app.rendition_specs()[1].height, 180);
        // None by default: one layer, no RIDs.
        let c = Config::parse("[[app]]\nname = \"live\"\n", "x.toml").expect("valid");
        assert!(c.apps[0].renditions.is_empty() && c.apps[0].layer_rids().is_empty());
        let r = |list: &str| {
            format!("[[app]]\nname = \"a\"\n[[app]]\nname = \"b\"\nrenditions = [{list}]\n")
        };
        let ok = "{ rid = \"m\", height = 360, bitrate_kbps = 800 }";
        for (list, key) in [
            (format!("{ok}, {ok}"), "app[1].renditions[1].rid"),
            (format!("{ok}, {ok}, {ok}"), "app[1].renditions"),
            (
                "{ rid = \"h\", height = 360, bitrate_kbps = 800 }".into(),
                "app[1].renditions[0].rid",
            ),
            (
                "{ rid = \"\", height = 360, bitrate_kbps = 800 }".into(),
                "app[1].renditions[0].rid",
            ),
            (
                "{ rid = \"toolong12\", height = 360, bitrate_kbps = 800 }".into(),
                "app[1].renditions[0].rid",
            ),
            (
                "{ rid = \"a.b\", height = 360, bitrate_kbps = 800 }".into(),
                "app[1].renditions[0].rid",
            ),
            (
                format!("{ok}, {{ rid = \"l\", height = 181, bitrate_kbps = 250 }}"),
                "app[1].renditions[1].height",
            ),
            (
                "{ rid = \"l\", height = 0, bitrate_kbps = 250 }".into(),
                "app[1].renditions[0].height",
            ),
            (
                "{ rid = \"l\", height = 2162, bitrate_kbps = 250 }".into(),
                "app[1].renditions[0].height",
            ),
            (
                "{ rid = \"l\", height = 180, bitrate_kbps = 49 }".into(),
                "app[1].renditions[0].bitrate_kbps",
            ),
            (
                "{ rid = \"l\", height = 180, bitrate_kbps = 50001 }".into(),
                "app[1].renditions[0].bitrate_kbps",
            ),
            // Unknown and missing fields: the parser names them.
            (
                "{ rid = \"l\", height = 180, bitrate_kbps = 250, fps = 30 }".into(),
                "fps",
            ),
            ("{ rid = \"l\", height = 180 }".into(), "bitrate_kbps"),
        ] {
            let text = r(&list);
            let e = Config::parse(&text, "x.toml").expect_err(&text);
            assert!(e.to_string().contains(key), "{list}: {e}");
        }
        // The limits themselves are fine; the two renditions may be in any order.
        for list in [
            "{ rid = \"a-Z_9\", height = 2, bitrate_kbps = 50 }, { rid = \"abcdefgh\", height = 2160, bitrate_kbps = 50000 }",
            "{ rid = \"l\", height = 180, bitrate_kbps = 250 }, { rid = \"m\", height = 360, bitrate_kbps = 800 }",
        ] {
            Config::parse(&r(list), "x.toml").expect(list);
        }
    }
}

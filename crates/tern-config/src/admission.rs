//! `[app.admission]`: an app's admission webhook.

use serde::{Deserialize, Serialize};

use super::error::ConfigError;

/// `[app.admission]`: the operator's HTTP service that decides who may publish and play.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AdmissionConfig {
    /// `http[s]://host[:port][/path]` the request is POSTed to (`https://`: verified against
    /// the system's roots and `server.ca_file`).
    pub url: String,
    /// Time allowed for the answer. Default 2000 ms.
    #[serde(default = "AdmissionConfig::default_timeout_ms")]
    pub timeout_ms: u64,
    /// What a timeout, a connection error or a non-200 answer means: `deny` (default) or
    /// `allow`.
    #[serde(default)]
    pub on_error: OnError,
    /// Requests to the webhook at once; past it new sessions get 503. Default 256.
    #[serde(default = "AdmissionConfig::default_max_in_flight")]
    pub max_in_flight: usize,
}

// `url` has no default, so the section cannot take its other keys from an `impl Default`
// (serde's container `default` would make `url` optional too, and a missing `url` would no
// longer be reported as a missing field): the defaults of the optional keys are here.
impl AdmissionConfig {
    /// Default `timeout_ms`: 2000 ms.
    const fn default_timeout_ms() -> u64 {
        2000
    }

    /// Default `max_in_flight`: 256 requests at once.
    const fn default_max_in_flight() -> usize {
        256
    }

    /// The first bad key of the section, named under `admission`.
    pub fn check(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, message: &str| Err(ConfigError::invalid(key, message));
        if !webhook_url_ok(&self.url) {
            return bad("admission.url", WEBHOOK_URL_RULE);
        }
        if !(1..=60_000).contains(&self.timeout_ms) {
            return bad("admission.timeout_ms", "must be 1-60000");
        }
        if self.max_in_flight == 0 {
            return bad("admission.max_in_flight", "must be at least 1");
        }
        Ok(())
    }
}

/// `[app.admission] on_error`: what a failed webhook call means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnError {
    /// Refuse the session (`deny`).
    #[default]
    Deny,
    /// Let the session in (`allow`).
    Allow,
}

impl OnError {
    /// What a bad value is told; [`crate::Config::parse`] reports it under the
    /// value's key, like an out-of-range number.
    pub const RULE: &str = "must be \"deny\" or \"allow\"";

    /// The value as the TOML spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            OnError::Deny => "deny",
            OnError::Allow => "allow",
        }
    }
}

impl<'de> Deserialize<'de> for OnError {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match String::deserialize(d)?.as_str() {
            "deny" => Ok(OnError::Deny),
            "allow" => Ok(OnError::Allow),
            _ => Err(serde::de::Error::custom(OnError::RULE)),
        }
    }
}

impl Serialize for OnError {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// What [`webhook_url_ok`] checks, as errors state it.
pub const WEBHOOK_URL_RULE: &str = "must be http[s]://host[:port][/path]";

/// Whether `url` is a URL tern can call: `http[s]://host[:port][/path]`, no user info.
pub fn webhook_url_ok(url: &str) -> bool {
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return false;
    };
    let auth = rest.split('/').next().unwrap_or("");
    !auth.is_empty()
        && !auth.contains('@')
        && url.parse::<http::Uri>().is_ok_and(|u| u.host().is_some())
}

/// What [`jwks_url_ok`] checks, as errors state it.
pub const JWKS_URL_RULE: &str =
    "must be https://host[:port][/path] (http:// only to 127.0.0.1, ::1 or localhost)";

/// Whether `url` is a JWKS tern may fetch keys from: `https://` (the keys that admit every
/// session must come over an authenticated channel), or `http://` to this machine alone
/// (a local key service, tests).
pub fn jwks_url_ok(url: &str) -> bool {
    if !webhook_url_ok(url) {
        return false;
    }
    if url.starts_with("https://") {
        return true;
    }
    url.parse::<http::Uri>().is_ok_and(|u| {
        matches!(
            u.host()
                .map(|h| h.trim_start_matches('[').trim_end_matches(']')),
            Some("127.0.0.1" | "::1" | "localhost")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    fn ok() -> AdmissionConfig {
        AdmissionConfig {
            url: "http://127.0.0.1:9000/admit".into(),
            timeout_ms: AdmissionConfig::default_timeout_ms(),
            on_error: OnError::Deny,
            max_in_flight: AdmissionConfig::default_max_in_flight(),
        }
    }

    #[test]
    fn names_the_bad_key() {
        assert!(ok().check().is_ok());
        type Breaker = fn(&mut AdmissionConfig);
        let cases: [(Breaker, &str); 6] = [
            (|a| a.url = "ftp://x/admit".into(), "admission.url"),
            (|a| a.url = "http://user@x/admit".into(), "admission.url"),
            (|a| a.timeout_ms = 0, "admission.timeout_ms"),
            (|a| a.timeout_ms = 60_001, "admission.timeout_ms"),
            (|a| a.max_in_flight = 0, "admission.max_in_flight"),
            (|a| a.url = String::new(), "admission.url"),
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
    }

    #[test]
    fn webhook_and_jwks_urls() {
        for ok in [
            "http://127.0.0.1:9000/admit",
            "http://hooks.local",
            "https://hooks.example/admit",
            "https://[2001:db8::1]:8443/x",
        ] {
            assert!(webhook_url_ok(ok), "{ok}");
        }
        for bad in [
            "ftp://x/admit",
            "http:///admit",
            "https://",
            "http://user@x/admit",
            "https://u:p@x/admit",
            "HTTPS://x",
            "",
        ] {
            assert!(!webhook_url_ok(bad), "{bad}");
        }
        for ok in [
            "https://idp.example/.well-known/jwks.json",
            "http://127.0.0.1:8000/jwks",
            "http://[::1]:8000/jwks",
            "http://localhost/jwks",
        ] {
            assert!(jwks_url_ok(ok), "{ok}");
        }
        for bad in [
            "http://idp.example/jwks",
            "http://10.0.0.1/jwks",
            "http://127.0.0.2/jwks",
            "http://localhost.example/jwks",
            "ftp://127.0.0.1/jwks",
        ] {
            assert!(!jwks_url_ok(bad), "{bad}");
        }
    }

    #[test]
    fn parses_with_defaults_and_names_a_bad_on_error() {
        let app = |admission: &str| {
            format!("[[app]]\nname = \"a\"\n[[app]]\nname = \"b\"\n[app.admission]\n{admission}")
        };
        let c = Config::parse(&app("url = \"http://127.0.0.1:9000/admit\"\n"), "x.toml")
            .expect("valid");
        let a = c.apps[1].admission.as_ref().expect("admission");
        assert_eq!(
            (a.timeout_ms, a.on_error, a.max_in_flight),
            (2000, OnError::Deny, 256)
        );
        let text = app("url = \"http://h/\"\non_error = \"allow\"\n");
        let c = Config::parse(&text, "x.toml").expect("valid");
        let on_error = c.apps[1].admission.as_ref().map(|a| a.on_error);
        assert_eq!(on_error, Some(OnError::Allow));
        assert_eq!(OnError::Allow.as_str(), "allow");
        // Named by its dotted key, as when the value was a string checked after parsing.
        for bad in ["\"Allow\"", "\"maybe\"", "\"\""] {
            let text = app(&format!("url = \"http://h/\"\non_error = {bad}\n"));
            let e = Config::parse(&text, "x.toml").expect_err(bad);
            assert_eq!(
                e.to_string(),
                "config key `app[1].admission.on_error`: must be \"deny\" or \"allow\""
            );
        }
        // A value of the wrong type is a parse error, as for any key.
        let e = Config::parse(&app("url = \"http://h/\"\non_error = 1\n"), "x.toml")
            .expect_err("a number");
        assert!(matches!(e, ConfigError::Parse { .. }), "{e}");
        // A missing url is a missing field.
        let e = Config::parse(&app("timeout_ms = 5\n"), "x.toml").expect_err("no url");
        assert!(e.to_string().contains("missing field `url`"), "{e}");
    }
}

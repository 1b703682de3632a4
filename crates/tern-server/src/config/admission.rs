//! `[app.admission]`: an app's admission webhook.

use serde::Deserialize;

use super::error::ConfigError;

/// `[app.admission]`: the operator's HTTP service that decides who may publish and play.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdmissionConfig {
    /// `http://host:port/path` the request is POSTed to.
    pub url: String,
    /// Time allowed for the answer. Default 2000 ms.
    #[serde(default = "AdmissionConfig::default_timeout_ms")]
    pub timeout_ms: u64,
    /// What a timeout, a connection error or a non-200 answer means: `deny` (default) or
    /// `allow`.
    #[serde(default = "AdmissionConfig::default_on_error")]
    pub on_error: String,
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

    /// Default `on_error`: `deny`.
    fn default_on_error() -> String {
        "deny".into()
    }

    /// Default `max_in_flight`: 256 requests at once.
    const fn default_max_in_flight() -> usize {
        256
    }

    /// The first bad key of the section, named under `admission`.
    pub fn check(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, message: &str| Err(ConfigError::invalid(key, message));
        if !webhook_url_ok(&self.url) {
            return bad("admission.url", "must be http://host[:port][/path]");
        }
        if !(1..=60_000).contains(&self.timeout_ms) {
            return bad("admission.timeout_ms", "must be 1-60000");
        }
        if self.on_error != "deny" && self.on_error != "allow" {
            return bad("admission.on_error", "must be \"deny\" or \"allow\"");
        }
        if self.max_in_flight == 0 {
            return bad("admission.max_in_flight", "must be at least 1");
        }
        Ok(())
    }
}

/// Whether `url` is a webhook tern can call: `http://host[:port][/path]` (plain HTTP; put
/// a local proxy in front for TLS), no user info.
pub fn webhook_url_ok(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let auth = rest.split('/').next().unwrap_or("");
    !auth.is_empty()
        && !auth.contains('@')
        && url.parse::<hyper::Uri>().is_ok_and(|u| u.host().is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok() -> AdmissionConfig {
        AdmissionConfig {
            url: "http://127.0.0.1:9000/admit".into(),
            timeout_ms: AdmissionConfig::default_timeout_ms(),
            on_error: AdmissionConfig::default_on_error(),
            max_in_flight: AdmissionConfig::default_max_in_flight(),
        }
    }

    #[test]
    fn names_the_bad_key() {
        assert!(ok().check().is_ok());
        type Breaker = fn(&mut AdmissionConfig);
        let cases: [(Breaker, &str); 7] = [
            (|a| a.url = "https://x/admit".into(), "admission.url"),
            (|a| a.url = "http://user@x/admit".into(), "admission.url"),
            (|a| a.timeout_ms = 0, "admission.timeout_ms"),
            (|a| a.timeout_ms = 60_001, "admission.timeout_ms"),
            (|a| a.on_error = "Allow".into(), "admission.on_error"),
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
}

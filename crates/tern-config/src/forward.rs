//! `[[app.forward]]`: sending an app's streams on to other servers (YouTube, Twitch, another
//! tern, nginx-rtmp, an SRT listener), and the forward URL every forward is made from, the
//! configured ones and those added through the API.

use serde::{Deserialize, Serialize};

use super::error::ConfigError;

/// One `[[app.forward]]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ForwardConfig {
    /// Where to: `rtmp://HOST[:PORT]/APP/KEY`, `rtmps://...` or
    /// `srt://HOST:PORT?streamid=...&passphrase=...&latency=...` (caller mode). `%app` and
    /// `%stream` are replaced by the stream's app and name.
    pub url: String,
    /// The streams of the app it sends on (names); default every stream of the app.
    #[serde(default)]
    pub streams: Vec<String>,
    /// Default true; false keeps it in the file without sending.
    #[serde(default = "ForwardConfig::yes")]
    pub enabled: bool,
    /// Whether an `rtmps://` receiver's certificate is checked (against the system's roots
    /// and `[server] ca_file`). Default true.
    #[serde(default = "ForwardConfig::yes")]
    pub tls_verify: bool,
}

impl ForwardConfig {
    const fn yes() -> bool {
        true
    }

    /// Whether it sends stream `stream` of its app.
    pub fn covers(&self, stream: &str) -> bool {
        self.enabled && (self.streams.is_empty() || self.streams.iter().any(|s| s == stream))
    }

    /// Whether its `url` is one a forward takes, named inside the forward (`url`); its
    /// `streams` follow the name rule, which the app checks with its own.
    pub fn check(&self) -> Result<(), ConfigError> {
        ForwardUrl::parse(&self.url).map_err(|m| ConfigError::invalid("url", &m))?;
        Ok(())
    }
}

/// The protocol a forward speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ForwardProtocol {
    /// RTMP over TCP (FLV tags).
    Rtmp,
    /// RTMP over TLS.
    Rtmps,
    /// SRT in caller mode (MPEG-TS).
    Srt,
}

/// A forward URL taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardUrl {
    /// Its protocol.
    pub protocol: ForwardProtocol,
    /// The receiver's host name or address (brackets taken off an IPv6 address).
    pub host: String,
    /// Its port (1935 for RTMP, 443 for RTMPS when the URL has none; SRT needs one).
    pub port: u16,
    /// RTMP: the application (the path but its last segment), SRT: empty.
    pub app: String,
    /// RTMP: the stream key (the last path segment with its query); SRT: empty.
    pub key: String,
    /// SRT: `streamid`.
    pub stream_id: Option<String>,
    /// SRT: `passphrase` (10-79 characters).
    pub passphrase: Option<String>,
    /// SRT: `latency` (ms).
    pub latency_ms: Option<u64>,
}

/// What a forward URL must look like, as errors state it.
pub const FORWARD_URL_RULE: &str = "must be rtmp://HOST[:PORT]/APP/KEY, rtmps://HOST[:PORT]/APP/KEY or srt://HOST:PORT[?streamid=...&passphrase=...&latency=MS]";

impl ForwardUrl {
    /// Takes `url` apart (after `%app`/`%stream` were replaced, or before: they are plain
    /// characters here); the message says what is wrong.
    pub fn parse(url: &str) -> Result<ForwardUrl, String> {
        let bad = |why: &str| Err(format!("{why}: {FORWARD_URL_RULE}"));
        let Some((scheme, rest)) = url.split_once("://") else {
            return bad("no scheme");
        };
        let protocol = match scheme.to_ascii_lowercase().as_str() {
            "rtmp" => ForwardProtocol::Rtmp,
            "rtmps" => ForwardProtocol::Rtmps,
            "srt" => ForwardProtocol::Srt,
            other => return bad(&format!("scheme {other:?} is not forwarded")),
        };
        if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return bad("spaces or control characters");
        }
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        if authority.contains('@') {
            return bad("credentials go in the stream key, not before the host");
        }
        let (host, port) = match authority.strip_prefix('[') {
            Some(v6) => {
                let Some((h, after)) = v6.split_once(']') else {
                    return bad("an unclosed [");
                };
                (h, after.strip_prefix(':'))
            }
            None => match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            },
        };
        if host.is_empty() {
            return bad("no host");
        }
        let port = match port {
            Some(p) => match p.parse::<u16>() {
                Ok(p) if p > 0 => p,
                _ => return bad(&format!("port {p:?}")),
            },
            None => match protocol {
                ForwardProtocol::Rtmp => 1935,
                ForwardProtocol::Rtmps => 443,
                ForwardProtocol::Srt => return bad("SRT needs a port"),
            },
        };
        let mut u = ForwardUrl {
            protocol,
            host: host.to_string(),
            port,
            app: String::new(),
            key: String::new(),
            stream_id: None,
            passphrase: None,
            latency_ms: None,
        };
        if protocol == ForwardProtocol::Srt {
            let query = tail.trim_start_matches('/');
            let query = query.strip_prefix('?').unwrap_or(query);
            for pair in query.split('&').filter(|p| !p.is_empty()) {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                let v = percent_decode(v);
                match k {
                    "streamid" => u.stream_id = Some(v),
                    "passphrase" => {
                        if !(10..=79).contains(&v.len()) {
                            return bad("an SRT passphrase has 10 to 79 characters");
                        }
                        u.passphrase = Some(v);
                    }
                    "latency" => match v.parse::<u64>() {
                        Ok(ms) if (20..=8000).contains(&ms) => u.latency_ms = Some(ms),
                        _ => return bad("latency is 20 to 8000 (ms)"),
                    },
                    "mode" if v == "caller" => {}
                    other => return bad(&format!("SRT parameter {other:?}")),
                }
            }
            return Ok(u);
        }
        let path = tail.strip_prefix('/').unwrap_or(tail);
        let (path, query) = match path.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path, None),
        };
        let Some((app, key)) = path.rsplit_once('/') else {
            return bad("no application and stream key");
        };
        if app.is_empty() || key.is_empty() {
            return bad("no application and stream key");
        }
        u.app = app.to_string();
        u.key = match query {
            Some(q) => format!("{key}?{q}"),
            None => key.to_string(),
        };
        Ok(u)
    }

    /// The RTMP `tcUrl`: the URL without its stream key.
    pub fn tc_url(&self) -> String {
        let scheme = match self.protocol {
            ForwardProtocol::Rtmps => "rtmps",
            _ => "rtmp",
        };
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!("{scheme}://{host}:{}/{}", self.port, self.app)
    }
}

/// `url` with `%app` and `%stream` replaced.
pub fn expand(url: &str, app: &str, stream: &str) -> String {
    url.replace("%app", app).replace("%stream", stream)
}

/// `url` as logs, the API and events show it: an RTMP stream key is `***`, as are SRT's
/// `streamid` and `passphrase` and anything before an `@`.
pub fn redact_forward_url(url: &str) -> String {
    let url = super::source::redact_url(url);
    let Some((scheme, rest)) = url.split_once("://") else {
        return "***".into();
    };
    if scheme.eq_ignore_ascii_case("srt") {
        let Some((base, query)) = rest.split_once('?') else {
            return url.clone();
        };
        let q: Vec<String> = query
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((k, _)) if k == "streamid" || k == "passphrase" => format!("{k}=***"),
                _ => p.to_string(),
            })
            .collect();
        return format!("{scheme}://{base}?{}", q.join("&"));
    }
    let end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    match path.rsplit_once('/') {
        Some((app, _)) if !app.is_empty() => format!("{scheme}://{authority}{app}/***"),
        _ => format!("{scheme}://{authority}/***"),
    }
}

/// `%XX` escapes decoded (a malformed escape stays as it is).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(v) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rtmp_urls_split_into_app_and_key() {
        let u = ForwardUrl::parse("rtmp://a.rtmp.youtube.com/live2/abcd-efgh").expect("ok");
        assert_eq!(u.protocol, ForwardProtocol::Rtmp);
        assert_eq!((u.host.as_str(), u.port), ("a.rtmp.youtube.com", 1935));
        assert_eq!((u.app.as_str(), u.key.as_str()), ("live2", "abcd-efgh"));
        assert_eq!(u.tc_url(), "rtmp://a.rtmp.youtube.com:1935/live2");
        let u = ForwardUrl::parse("rtmps://[::1]:4443/app/sub/key?x=1").expect("ok");
        assert_eq!((u.host.as_str(), u.port), ("::1", 4443));
        assert_eq!((u.app.as_str(), u.key.as_str()), ("app/sub", "key?x=1"));
        assert_eq!(u.tc_url(), "rtmps://[::1]:4443/app/sub");
        assert_eq!(ForwardUrl::parse("rtmps://h/a/k").expect("ok").port, 443);
    }

    #[test]
    fn srt_urls_take_their_parameters() {
        let u = ForwardUrl::parse(
            "srt://127.0.0.1:9000?streamid=%23!%3A%3Ar%3Dlive%2Fx&passphrase=0123456789ab&latency=200",
        )
        .expect("ok");
        assert_eq!(u.protocol, ForwardProtocol::Srt);
        assert_eq!(u.stream_id.as_deref(), Some("#!::r=live/x"));
        assert_eq!(u.passphrase.as_deref(), Some("0123456789ab"));
        assert_eq!(u.latency_ms, Some(200));
    }

    #[test]
    fn bad_urls_say_why() {
        for (url, why) in [
            ("http://h/a/k", "not forwarded"),
            ("rtmp://h/onlyapp", "stream key"),
            ("rtmp://:1935/a/k", "no host"),
            ("rtmp://h:99999/a/k", "port"),
            ("srt://h", "needs a port"),
            ("srt://h:1?passphrase=short", "10 to 79"),
            ("srt://h:1?latency=5", "latency"),
            ("srt://h:1?bogus=1", "bogus"),
            ("rtmp://user:pw@h/a/k", "credentials"),
            ("rtmp://h/a/k ey", "spaces"),
        ] {
            let e = ForwardUrl::parse(url).expect_err(url);
            assert!(e.contains(why), "{url}: {e}");
        }
    }

    #[test]
    fn keys_and_passphrases_are_hidden() {
        assert_eq!(
            redact_forward_url("rtmp://a.rtmp.youtube.com/live2/abcd-efgh"),
            "rtmp://a.rtmp.youtube.com/live2/***"
        );
        assert_eq!(
            redact_forward_url("srt://h:9000?streamid=secret&latency=200&passphrase=0123456789"),
            "srt://h:9000?streamid=***&latency=200&passphrase=***"
        );
        assert_eq!(redact_forward_url("rtmp://h"), "rtmp://h/***");
        assert_eq!(
            expand("rtmp://h/%app/%stream", "live", "cam"),
            "rtmp://h/live/cam"
        );
    }

    #[test]
    fn a_forward_covers_its_streams() {
        let mut f = ForwardConfig {
            url: "rtmp://h/a/k".into(),
            streams: vec![],
            enabled: true,
            tls_verify: true,
        };
        assert!(f.covers("x"));
        f.streams = vec!["y".into()];
        assert!(!f.covers("x") && f.covers("y"));
        f.enabled = false;
        assert!(!f.covers("y"));
        assert!(f.check().is_ok());
        f.url = "http://h/a/k".into();
        assert!(f.check().is_err());
    }
}

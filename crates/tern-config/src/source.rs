//! `[[app.source]]`: an RTSP camera tern pulls into one of the app's streams
//! (`tern_server::rtsp`), over RTSP or RTSPS, and how its URL is shown without its
//! credentials.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::error::ConfigError;

/// One `[[app.source]]`: stream `stream` of the app is pulled from `url`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// The stream the camera feeds (declared by the source: no publisher may take it).
    pub stream: String,
    /// `rtsp://[user:password@]host[:port]/path` (port 554 by default), or `rtsps://` for
    /// RTSP over TLS (port 322 by default, RFC 7826 §4.2; the camera's certificate must be
    /// valid for `host`, a DNS name or an IP address in its IP SANs). The credentials are
    /// used for basic or digest authentication, whichever the camera asks for, and never
    /// shown: logs, the API and events show [`SourceConfig::shown_url`].
    pub url: String,
    /// Pull only while someone watches (a WHEP, OME-signalling or LL-HLS request starts the
    /// pull, which stops the app's `idle_grace_s` after the last viewer). Default true:
    /// cameras often take few sessions, and an unwatched one costs nothing. False: pulled
    /// from start-up, always.
    #[serde(default = "SourceConfig::default_on_demand")]
    pub on_demand: bool,
    /// How RTP comes: `"tcp"` (interleaved in the RTSP connection, the default: it passes
    /// NAT and firewalls and loses nothing) or `"udp"`. An `rtsps://` source takes only
    /// `"tcp"`: RTSPS protects the media by carrying it in its TLS connection, and media on
    /// UDP beside it would travel in the clear (SRTP key exchange over RTSP is not spoken).
    #[serde(default)]
    pub transport: SourceTransport,
    /// `rtsps://` only: whether the camera's certificate is verified (chain to the system's
    /// roots or `server.ca_file`, and name). Default true. False accepts any certificate
    /// (still checking that the camera holds its key): for cameras with a self-signed
    /// certificate, which the connection then does not authenticate; the server warns of
    /// it at start. Better: trust that certificate in `server.ca_file`.
    #[serde(default = "SourceConfig::default_tls_verify")]
    pub tls_verify: bool,
}

/// `[[app.source]] transport`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SourceTransport {
    /// RTP interleaved in the RTSP TCP connection (RFC 2326 §10.12).
    #[default]
    Tcp,
    /// RTP and RTCP on UDP ports of their own.
    Udp,
}

impl SourceTransport {
    /// What a bad value is told; [`crate::Config::parse`] reports it under the
    /// value's key, like an out-of-range number.
    pub const RULE: &str = "must be \"tcp\" or \"udp\"";

    /// The value as the TOML spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceTransport::Tcp => "tcp",
            SourceTransport::Udp => "udp",
        }
    }
}

impl<'de> Deserialize<'de> for SourceTransport {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match String::deserialize(d)?.as_str() {
            "tcp" => Ok(SourceTransport::Tcp),
            "udp" => Ok(SourceTransport::Udp),
            _ => Err(serde::de::Error::custom(SourceTransport::RULE)),
        }
    }
}

impl Serialize for SourceTransport {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// `url` with its user and password replaced by `***` (`rtsp://***@host/path`); a URL
/// without credentials is unchanged.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..end].rfind('@') {
        Some(at) => format!("{scheme}://***{}", &rest[at..]),
        None => url.to_string(),
    }
}

impl SourceConfig {
    const fn default_on_demand() -> bool {
        true
    }

    const fn default_tls_verify() -> bool {
        true
    }

    /// Whether the camera is reached over TLS (`rtsps://`).
    pub fn is_tls(&self) -> bool {
        self.url.starts_with("rtsps://")
    }

    /// The URL as logs, the API and events show it: [`redact_url`].
    pub fn shown_url(&self) -> String {
        redact_url(&self.url)
    }

    /// The first bad key of the source's `url`, `transport` and `tls_verify` (the app
    /// checks `stream`, a name).
    pub fn check(&self) -> Result<(), ConfigError> {
        let bad_url = |m: &str| Err(ConfigError::invalid("url", m));
        let Some(rest) = self
            .url
            .strip_prefix("rtsp://")
            .or_else(|| self.url.strip_prefix("rtsps://"))
        else {
            return bad_url("must start with rtsp:// or rtsps://");
        };
        let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        if host.is_empty() || host.starts_with(':') {
            return bad_url("has no host");
        }
        if let Some((_, port)) = host.rsplit_once(':')
            && !host.ends_with(']')
            && port.parse::<u16>().is_err()
        {
            return bad_url("has a bad port");
        }
        if !host.is_ascii() {
            // rtsp:// is not a special scheme in the URL standard: the url crate keeps such a
            // host as opaque, percent-encoded bytes, which no camera's DNS name would match.
            return bad_url("has a non-ASCII host; write it in its punycode (xn--) form");
        }
        if self.url.chars().any(char::is_whitespace) {
            return bad_url("must not contain spaces");
        }
        if self.is_tls() && self.transport == SourceTransport::Udp {
            return Err(ConfigError::invalid(
                "transport",
                "must be \"tcp\" for an rtsps:// camera: RTSPS carries the media in its TLS connection",
            ));
        }
        if !self.is_tls() && !self.tls_verify {
            return Err(ConfigError::invalid(
                "tls_verify",
                "applies to rtsps:// URLs only (this one is rtsp://, without TLS)",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_hidden() {
        assert_eq!(
            redact_url("rtsp://admin:s3cret@192.0.2.10:554/stream1"),
            "rtsp://***@192.0.2.10:554/stream1"
        );
        assert_eq!(
            redact_url("rtsp://us@er:p@ss@cam/x?a=b@c"),
            "rtsp://***@cam/x?a=b@c"
        );
        assert_eq!(redact_url("rtsp://cam/a@b"), "rtsp://cam/a@b");
        assert_eq!(redact_url("nonsense"), "nonsense");
    }

    #[test]
    fn bad_sources_are_named() {
        let s = |stream: &str, url: &str| SourceConfig {
            stream: stream.into(),
            url: url.into(),
            on_demand: true,
            transport: SourceTransport::Tcp,
            tls_verify: true,
        };
        assert!(s("door", "rtsp://u:p@cam:554/x").check().is_ok());
        assert!(s("door", "rtsps://u:p@cam/x").check().is_ok());
        assert!(s("door", "rtsp://[::1]:8554/x").check().is_ok());
        let key = |src: SourceConfig| match src.check() {
            Err(ConfigError::Invalid { key, .. }) => key,
            other => panic!("{other:?}"),
        };
        assert_eq!(key(s("door", "http://cam/x")), "url");
        assert_eq!(key(s("door", "rtsp:///x")), "url");
        assert_eq!(key(s("door", "rtsp://cam:99999/x")), "url");
        assert_eq!(key(s("door", "rtsp://kamera.bücher.example/x")), "url");
        assert!(
            s("door", "rtsp://kamera.xn--bcher-kva.example/x")
                .check()
                .is_ok()
        );
        assert_eq!(key(s("door", "rtspss://cam/x")), "url");
        assert_eq!(key(s("door", "rtsps:///x")), "url");
        // RTSPS: media in the TLS connection only; tls_verify means nothing without TLS.
        let udp = |url: &str| SourceConfig {
            transport: SourceTransport::Udp,
            ..s("door", url)
        };
        assert!(udp("rtsp://cam/x").check().is_ok());
        assert_eq!(key(udp("rtsps://cam/x")), "transport");
        let unverified = |url: &str| SourceConfig {
            tls_verify: false,
            ..s("door", url)
        };
        assert!(unverified("rtsps://cam/x").check().is_ok());
        assert_eq!(key(unverified("rtsp://cam/x")), "tls_verify");
    }
}

//! SRT stream IDs: which stream a caller wants, and in which role.
//!
//! An SRT caller names what it wants in the handshake's stream ID (`SRTO_STREAMID`, at most
//! 512 bytes). Encoders' presets follow the peers' conventions, so three forms are taken:
//!
//! | form | example | from |
//! | --- | --- | --- |
//! | access control | `#!::r=live/cam,m=publish,u=alice,s=TOKEN` | SRT's access-control syntax (libsrt `docs/features/access-control.md`), OvenMediaEngine, SRS |
//! | MediaMTX | `publish:live/cam:alice:secret?token=T` | MediaMTX |
//! | bare | `live/cam?token=T` | many encoder presets |
//! | OvenMediaEngine | `srt%3A%2F%2Fhost%3A9999%2Flive%2Fcam` (a whole URL, percent-encoded) | OME, and encoders set up for it (Haivision Makito) |
//!
//! Each form names a [`Mode`]: a publisher (`m=publish`, `publish:`, the bare and OME forms)
//! or a reader that plays the stream (`m=request`, MediaMTX's `read:`).
//!
//! The resource is `APP/STREAM` (exactly one `/`). In the access-control form the keys are
//! `r` (resource), `m` (mode: `publish` or `request`), `u` (user),
//! `s` (session token, which goes to admission as a token), `t` (type: only `stream`);
//! unknown keys are ignored as the SRT document asks. A `?query` after the resource (MediaMTX
//! and bare forms) may carry `token=`. Anything else is refused with the [`StreamIdError`]
//! naming the broken rule, which the listener logs and maps to an SRT reject reason.

use thiserror::Error;

/// Longest stream ID (libsrt's `MAX_SID_LENGTH`).
pub const MAX_LEN: usize = 512;

/// What a caller does with the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// It sends the stream (publishes).
    Publish,
    /// It receives the stream (plays).
    Request,
}

/// A parsed stream ID: a publisher or a reader of `app/stream`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamId {
    /// Publish or play.
    pub mode: Mode,
    /// App name.
    pub app: String,
    /// Stream name.
    pub stream: String,
    /// The user (`u=`, or MediaMTX's `:USER`).
    pub user: Option<String>,
    /// MediaMTX's `:PASS` (given to admission as the app token when there is no `token=`).
    pub pass: Option<String>,
    /// `s=` or the query's `token=`.
    pub token: Option<String>,
    /// The query after the resource (without `?`), empty if none.
    pub query: String,
}

/// Why a stream ID is refused; the message names the rule.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum StreamIdError {
    /// No stream ID at all.
    #[error("no stream ID: give one as APP/STREAM (e.g. streamid=live/cam)")]
    Missing,
    /// Longer than [`MAX_LEN`].
    #[error("stream ID longer than {MAX_LEN} bytes")]
    TooLong,
    /// A character outside printable ASCII.
    #[error("stream ID holds a control or non-ASCII character")]
    BadChar,
    /// A mode other than publishing and requesting (`m=bidirectional`, `playback:`).
    #[error("mode {0:?} is not supported: SRT callers publish (m=publish) or play (m=request)")]
    Mode(String),
    /// An access-control key without `=`, or a `t=` other than `stream`.
    #[error("access-control stream ID: {0}")]
    AccessControl(&'static str),
    /// The resource is not `APP/STREAM`.
    #[error("resource {0:?} is not APP/STREAM")]
    Resource(String),
}

impl StreamId {
    /// Parses a stream ID in any of the three forms.
    pub fn parse(s: &str) -> Result<StreamId, StreamIdError> {
        if s.is_empty() {
            return Err(StreamIdError::Missing);
        }
        if s.len() > MAX_LEN {
            return Err(StreamIdError::TooLong);
        }
        if !s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return Err(StreamIdError::BadChar);
        }
        if let Some(body) = s.strip_prefix("#!::") {
            return access_control(body);
        }
        if let Some(rest) = s.strip_prefix("publish:") {
            return mediamtx(rest, Mode::Publish);
        }
        if let Some(rest) = s.strip_prefix("read:") {
            return mediamtx(rest, Mode::Request);
        }
        for mode in ["playback:", "request:"] {
            if s.starts_with(mode) {
                return Err(StreamIdError::Mode(mode.trim_end_matches(':').into()));
            }
        }
        if s.len() > 6 && s[..6].eq_ignore_ascii_case("srt%3A") {
            return ome(s);
        }
        resource(s, None, None, None, Mode::Publish)
    }

    /// `app/stream`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.app, self.stream)
    }
}

/// `#!::k=v,k=v,...`
fn access_control(body: &str) -> Result<StreamId, StreamIdError> {
    let (mut r, mut m, mut u, mut token) = (None, None, None, None);
    for kv in body.split(',') {
        let (k, v) = kv
            .split_once('=')
            .ok_or(StreamIdError::AccessControl("each item must be key=value"))?;
        match k {
            "r" => r = Some(v),
            "m" => m = Some(v),
            "u" => u = Some(v),
            "s" => token = Some(v),
            "t" if v != "stream" => {
                return Err(StreamIdError::AccessControl("only t=stream is supported"));
            }
            _ => {}
        }
    }
    let mode = match m {
        None | Some("publish") => Mode::Publish,
        Some("request") => Mode::Request,
        Some(other) => return Err(StreamIdError::Mode(other.into())),
    };
    let r = r.ok_or(StreamIdError::AccessControl(
        "r=APP/STREAM (the resource) is missing",
    ))?;
    resource(r, u, None, token, mode)
}

/// OvenMediaEngine's form: `srt://HOST:PORT/APP/STREAM[?QUERY]`, percent-encoded whole.
fn ome(s: &str) -> Result<StreamId, StreamIdError> {
    let url = percent_decode(s).ok_or(StreamIdError::BadChar)?;
    let rest = url
        .get(6..)
        .filter(|_| url[..6].eq_ignore_ascii_case("srt://"))
        .ok_or_else(|| StreamIdError::Resource(url.clone()))?;
    // The path after the host.
    let path = rest
        .split_once('/')
        .map(|(_, p)| p)
        .ok_or_else(|| StreamIdError::Resource(url.clone()))?;
    resource(path, None, None, None, Mode::Publish)
}

/// `%XX` escapes decoded; `None` if the result is not printable ASCII.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let v = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())?;
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out.iter()
        .all(|b| (0x20..0x7f).contains(b))
        .then(|| String::from_utf8_lossy(&out).into_owned())
}

/// `APP/STREAM[:USER:PASS][?QUERY]` (after `publish:` or `read:`).
fn mediamtx(rest: &str, mode: Mode) -> Result<StreamId, StreamIdError> {
    let (path, query) = match rest.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (rest, None),
    };
    let mut parts = path.split(':');
    let name = parts.next().unwrap_or_default();
    let (user, pass) = match (parts.next(), parts.next(), parts.next()) {
        (None, _, _) => (None, None),
        (Some(u), Some(p), None) => (Some(u), Some(p)),
        _ => return Err(StreamIdError::Resource(rest.into())),
    };
    let full = match query {
        Some(q) => format!("{name}?{q}"),
        None => name.to_string(),
    };
    resource(&full, user, pass, None, mode)
}

/// `APP/STREAM[?QUERY]` with what the form around it gave.
fn resource(
    r: &str,
    user: Option<&str>,
    pass: Option<&str>,
    token: Option<&str>,
    mode: Mode,
) -> Result<StreamId, StreamIdError> {
    let (path, query) = r.split_once('?').unwrap_or((r, ""));
    let (app, stream) = path
        .split_once('/')
        .filter(|(a, s)| !a.is_empty() && !s.is_empty() && !s.contains('/'))
        .ok_or_else(|| StreamIdError::Resource(path.into()))?;
    let token = token.or_else(|| query.split('&').find_map(|kv| kv.strip_prefix("token=")));
    let some = |s: Option<&str>| s.filter(|s| !s.is_empty()).map(str::to_string);
    Ok(StreamId {
        mode,
        app: app.into(),
        stream: stream.into(),
        user: some(user),
        pass: some(pass),
        token: some(token),
        query: query.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> StreamId {
        StreamId::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn access_control_form() {
        let id = ok("#!::r=live/cam,m=publish,u=alice,s=T0K");
        assert_eq!((id.app.as_str(), id.stream.as_str()), ("live", "cam"));
        assert_eq!(id.user.as_deref(), Some("alice"));
        assert_eq!(id.token.as_deref(), Some("T0K"));
        // Order free, m defaults to publish, unknown keys ignored, t=stream taken.
        let id = ok("#!::h=example.com,t=stream,r=live/cam");
        assert_eq!(id.key(), "live/cam");
        assert_eq!(id.token, None);
    }

    #[test]
    fn mediamtx_form() {
        let id = ok("publish:live/cam");
        assert_eq!(id.key(), "live/cam");
        let id = ok("publish:live/cam:bob:pw?token=abc&x=1");
        assert_eq!(id.user.as_deref(), Some("bob"));
        assert_eq!(id.pass.as_deref(), Some("pw"));
        assert_eq!(id.token.as_deref(), Some("abc"));
        assert_eq!(id.query, "token=abc&x=1");
    }

    #[test]
    fn readers_request_the_stream() {
        let id = ok("#!::r=live/cam,m=request,s=T");
        assert_eq!((id.mode, id.key().as_str()), (Mode::Request, "live/cam"));
        assert_eq!(id.token.as_deref(), Some("T"));
        let id = ok("read:live/cam:bob:pw");
        assert_eq!((id.mode, id.key().as_str()), (Mode::Request, "live/cam"));
        assert_eq!(id.pass.as_deref(), Some("pw"));
        assert_eq!(ok("#!::r=live/cam,m=publish").mode, Mode::Publish);
        assert_eq!(ok("live/cam").mode, Mode::Publish);
    }

    /// OvenMediaEngine's stream ID: the whole URL, percent-encoded (what Makito users type).
    #[test]
    fn ome_form() {
        let id = ok("srt%3A%2F%2F192.0.2.1%3A9999%2Fapp%2Fstream");
        assert_eq!((id.mode, id.key().as_str()), (Mode::Publish, "app/stream"));
        let id = ok("SRT%3a%2f%2fhost%2flive%2fcam%3Ftoken%3Dabc");
        assert_eq!(id.key(), "live/cam");
        assert_eq!(id.token.as_deref(), Some("abc"));
    }

    #[test]
    fn bare_form() {
        let id = ok("live/cam?token=xyz");
        assert_eq!(id.key(), "live/cam");
        assert_eq!(id.token.as_deref(), Some("xyz"));
        assert_eq!(ok("live/cam").query, "");
    }

    #[test]
    fn refusals_name_the_rule() {
        use StreamIdError::*;
        let err = |s: &str| StreamId::parse(s).expect_err(s);
        assert_eq!(err(""), Missing);
        assert_eq!(err(&"a/".repeat(300)), TooLong);
        assert_eq!(err("live/c\u{e9}"), BadChar);
        assert_eq!(err("live/\ncam"), BadChar);
        assert_eq!(
            err("#!::r=live/cam,m=bidirectional"),
            Mode("bidirectional".into())
        );
        assert_eq!(err("playback:live/cam"), Mode("playback".into()));
        assert_eq!(err("srt%3A%2F%2Fh%3A1%2Flive"), Resource("live".into()));
        assert_eq!(err("srt%3A%2F%2Fh%2Flive%2F%0A"), BadChar);
        assert!(matches!(err("#!::r=live/cam,junk"), AccessControl(_)));
        assert!(matches!(err("#!::m=publish"), AccessControl(_)));
        assert!(matches!(err("#!::r=live/cam,t=file"), AccessControl(_)));
        for bad in [
            "cam",
            "live/",
            "/cam",
            "a/b/c",
            "publish:live/cam:onlyuser",
            "?token=x",
        ] {
            assert!(matches!(err(bad), Resource(_)), "{bad}");
        }
        assert!(err("#!::r=live").to_string().contains("APP/STREAM"));
    }
}

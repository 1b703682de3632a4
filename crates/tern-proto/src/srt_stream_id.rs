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
//!
//! The resource is `APP/STREAM` (exactly one `/`). In the access-control form the keys are
//! `r` (resource), `m` (mode: `publish`; `request` is playback, not taken), `u` (user),
//! `s` (session token, which goes to admission as a token), `t` (type: only `stream`);
//! unknown keys are ignored as the SRT document asks. A `?query` after the resource (MediaMTX
//! and bare forms) may carry `token=`. Anything else is refused with the [`StreamIdError`]
//! naming the broken rule, which the listener logs and maps to an SRT reject reason.

use thiserror::Error;

/// Longest stream ID (libsrt's `MAX_SID_LENGTH`).
pub const MAX_LEN: usize = 512;

/// A parsed stream ID: a publisher of `app/stream`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamId {
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
    /// `m=request` or MediaMTX's `read:`: playback over SRT is not offered.
    #[error("mode {0:?} is not supported: tern takes SRT publishers only (m=publish)")]
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
            return mediamtx(rest);
        }
        for mode in ["read:", "playback:", "request:"] {
            if s.starts_with(mode) {
                return Err(StreamIdError::Mode(mode.trim_end_matches(':').into()));
            }
        }
        resource(s, None, None, None)
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
    match m {
        None | Some("publish") => {}
        Some(other) => return Err(StreamIdError::Mode(other.into())),
    }
    let r = r.ok_or(StreamIdError::AccessControl(
        "r=APP/STREAM (the resource) is missing",
    ))?;
    resource(r, u, None, token)
}

/// `APP/STREAM[:USER:PASS][?QUERY]` (after `publish:`).
fn mediamtx(rest: &str) -> Result<StreamId, StreamIdError> {
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
    resource(&full, user, pass, None)
}

/// `APP/STREAM[?QUERY]` with what the form around it gave.
fn resource(
    r: &str,
    user: Option<&str>,
    pass: Option<&str>,
    token: Option<&str>,
) -> Result<StreamId, StreamIdError> {
    let (path, query) = r.split_once('?').unwrap_or((r, ""));
    let (app, stream) = path
        .split_once('/')
        .filter(|(a, s)| !a.is_empty() && !s.is_empty() && !s.contains('/'))
        .ok_or_else(|| StreamIdError::Resource(path.into()))?;
    let token = token.or_else(|| query.split('&').find_map(|kv| kv.strip_prefix("token=")));
    let some = |s: Option<&str>| s.filter(|s| !s.is_empty()).map(str::to_string);
    Ok(StreamId {
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
        assert_eq!(err("#!::r=live/cam,m=request"), Mode("request".into()));
        assert_eq!(err("read:live/cam"), Mode("read".into()));
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

//! Parsing SDP bodies (RFC 8866) into the model: line by line, every error naming its line
//! and the problem, input and media sections capped.

use std::net::IpAddr;

use super::model::{
    Candidate, Direction, Extmap, MAX_ICE_LEN, MAX_MEDIA, MAX_MID_LEN, MAX_SDP_LEN,
    MediaDescription, PayloadType, SdpError, SessionDescription, Setup, Shared, err,
};

/// Parses an SDP body; the same as [`SessionDescription::parse`].
pub fn parse(s: &str) -> Result<SessionDescription, SdpError> {
    SessionDescription::parse(s)
}

impl SessionDescription {
    /// Parses an SDP body (`\r\n` or `\n` line ends).
    ///
    /// The first line must be `v=0`. Lines the server has no use for are skipped; the
    /// attributes it reads are validated, and a malformed one is an error naming its line.
    /// Candidates whose address is not an IP (mDNS names) are skipped.
    pub fn parse(s: &str) -> Result<SessionDescription, SdpError> {
        if s.len() > MAX_SDP_LEN {
            return Err(SdpError::TooLong(s.len()));
        }
        let mut sd = SessionDescription {
            media: Vec::new(),
            bundle: Vec::new(),
            ice_lite: false,
            shared: Shared::default(),
        };
        let mut builders: Vec<MediaBuilder> = Vec::new();
        let mut seen_version = false;
        for item in lines(s) {
            let (n, ty, value) = item?;
            if !seen_version {
                if ty != b'v' || value != "0" {
                    return err(n, "first line must be v=0");
                }
                seen_version = true;
                continue;
            }
            match ty {
                b'v' => return err(n, "second v= line"),
                b'm' => {
                    if builders.len() == MAX_MEDIA {
                        return err(n, "more than 16 m= sections");
                    }
                    builders.push(MediaBuilder::new(n, value, &sd.shared)?);
                }
                b'a' => {
                    let (name, val) = split_attr(value);
                    if let Some(b) = builders.last_mut() {
                        b.attr(n, name, val)?;
                    } else {
                        match name {
                            "group" => {
                                let mut it = val.unwrap_or("").split_ascii_whitespace();
                                if it.next() == Some("BUNDLE") && sd.bundle.is_empty() {
                                    for mid in it {
                                        check_mid(n, mid)?;
                                        sd.bundle.push(mid.to_string());
                                    }
                                }
                            }
                            "ice-lite" => sd.ice_lite = true,
                            _ => {
                                sd.shared.attr(n, name, val)?;
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        if !seen_version {
            return Err(SdpError::Empty);
        }
        sd.media = builders.into_iter().map(MediaBuilder::finish).collect();
        Ok(sd)
    }
}

/// Splits the body into `(line number, type letter, value)`, skipping blank lines.
pub(super) fn lines(s: &str) -> impl Iterator<Item = Result<(usize, u8, &str), SdpError>> {
    let s = s.strip_prefix('\u{feff}').unwrap_or(s);
    s.split('\n').enumerate().filter_map(|(i, raw)| {
        let n = i + 1;
        let line = raw
            .strip_suffix('\r')
            .unwrap_or(raw)
            .trim_end_matches([' ', '\t']);
        if line.is_empty() {
            return None;
        }
        if line.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7F) {
            return Some(err(n, "line contains a control character"));
        }
        let b = line.as_bytes();
        match (b.first(), b.get(1)) {
            // Both bytes are ASCII, so index 2 is a char boundary.
            (Some(&t), Some(b'=')) if t.is_ascii_lowercase() => Some(Ok((n, t, &line[2..]))),
            _ => Some(err(n, "not a <letter>=<value> line")),
        }
    })
}

/// `name:value` or a bare `name`.
pub(super) fn split_attr(v: &str) -> (&str, Option<&str>) {
    match v.split_once(':') {
        Some((name, val)) => (name, Some(val)),
        None => (v, None),
    }
}

pub(super) fn is_visible(s: &str) -> bool {
    s.bytes().all(|b| (0x21..=0x7E).contains(&b))
}

pub(super) fn check_mid(n: usize, mid: &str) -> Result<(), SdpError> {
    if mid.is_empty() || mid.len() > MAX_MID_LEN || !is_visible(mid) {
        return err(n, "a=mid must be 1-64 visible ASCII characters");
    }
    Ok(())
}

pub(super) fn ice_value(n: usize, v: Option<&str>, colon_ok: bool) -> Result<String, SdpError> {
    let v = v.unwrap_or("").trim();
    if v.is_empty() || v.len() > MAX_ICE_LEN || !is_visible(v) || (!colon_ok && v.contains(':')) {
        return err(
            n,
            "a=ice-ufrag/a=ice-pwd must be 1-256 visible ASCII characters (no ':' in a ufrag)",
        );
    }
    Ok(v.to_string())
}

pub(super) fn parse_fingerprint(n: usize, v: Option<&str>) -> Result<(String, Vec<u8>), SdpError> {
    const BAD: &str = "a=fingerprint is not '<hash> <hex>:<hex>:...'";
    let mut it = v.unwrap_or("").split_ascii_whitespace();
    let (Some(algo), Some(hex), None) = (it.next(), it.next(), it.next()) else {
        return err(n, BAD);
    };
    let mut bytes = Vec::with_capacity(64);
    for part in hex.split(':') {
        if part.len() != 2 || bytes.len() == 64 {
            return err(n, BAD);
        }
        let Ok(b) = u8::from_str_radix(part, 16) else {
            return err(n, BAD);
        };
        bytes.push(b);
    }
    if algo.len() > 16 || !is_visible(algo) {
        return err(n, BAD);
    }
    Ok((algo.to_ascii_lowercase(), bytes))
}

pub(super) fn parse_extmap(n: usize, v: Option<&str>) -> Result<Option<Extmap>, SdpError> {
    let mut it = v.unwrap_or("").split_ascii_whitespace();
    let (Some(id), Some(uri)) = (it.next(), it.next()) else {
        return err(n, "a=extmap is not '<id> <uri>'");
    };
    let id = id.split_once('/').map_or(id, |(id, _dir)| id);
    let Ok(id) = id.parse::<u16>() else {
        return err(n, "a=extmap id is not a number");
    };
    // 4096-4351 were "offer any id" values in RFC 5285; they cannot be used, so skip them.
    Ok(u8::try_from(id)
        .ok()
        .filter(|&id| id != 0)
        .map(|id| Extmap {
            id,
            uri: uri.to_string(),
        }))
}

/// Parses the value of `a=candidate:`. `Ok(None)` for a well-formed candidate whose
/// address is not an IP (an mDNS name).
pub(super) fn parse_candidate(n: usize, v: Option<&str>) -> Result<Option<Candidate>, SdpError> {
    const BAD: &str = "a=candidate is not '<foundation> <component> <transport> <priority> <address> <port> typ <type>'";
    let mut it = v.unwrap_or("").split_ascii_whitespace();
    let (Some(f), Some(c), Some(t), Some(p), Some(a), Some(port), Some("typ"), Some(typ)) = (
        it.next(),
        it.next(),
        it.next(),
        it.next(),
        it.next(),
        it.next(),
        it.next(),
        it.next(),
    ) else {
        return err(n, BAD);
    };
    let (Ok(component), Ok(priority), Ok(port)) =
        (c.parse::<u16>(), p.parse::<u32>(), port.parse::<u16>())
    else {
        return err(n, BAD);
    };
    let Ok(ip) = a.parse::<IpAddr>() else {
        return Ok(None);
    };
    Ok(Some(Candidate {
        foundation: f.to_string(),
        component,
        transport: t.to_string(),
        priority,
        ip,
        port,
        typ: typ.to_string(),
    }))
}

impl Shared {
    /// Handles an attribute that may be session- or media-level. Returns whether it was one.
    pub(super) fn attr(
        &mut self,
        n: usize,
        name: &str,
        val: Option<&str>,
    ) -> Result<bool, SdpError> {
        match name {
            "ice-ufrag" => self.ice_ufrag = Some(ice_value(n, val, false)?),
            "ice-pwd" => self.ice_pwd = Some(ice_value(n, val, true)?),
            "fingerprint" => {
                // Several fingerprints may be given; keep a sha-256 one if there is one.
                let fp = parse_fingerprint(n, val)?;
                let have_sha256 = self.fingerprint.as_ref().is_some_and(|f| f.0 == "sha-256");
                if !have_sha256 {
                    self.fingerprint = Some(fp);
                }
            }
            "setup" => {
                self.setup = Some(match val.map(str::trim) {
                    Some("actpass") => Setup::ActPass,
                    Some("active") => Setup::Active,
                    Some("passive") => Setup::Passive,
                    Some("holdconn") => Setup::HoldConn,
                    _ => return err(n, "a=setup is not actpass, active, passive or holdconn"),
                })
            }
            "extmap" => {
                if let Some(e) = parse_extmap(n, val)? {
                    self.extmaps.retain(|x| x.id != e.id);
                    self.extmaps.push(e);
                }
            }
            _ => match Direction::from_attr(name) {
                Some(d) => self.direction = Some(d),
                None => return Ok(false),
            },
        }
        Ok(true)
    }
}

/// A media section while its lines are read.
pub(super) struct MediaBuilder {
    m: MediaDescription,
    /// rtpmap (codec, clock, channels) by payload type.
    rtpmap: Vec<Option<(String, u32, Option<u16>)>>,
    fmtp: Vec<Option<String>>,
    /// rtcp-fb lines: payload type (None for `*`) and value.
    fb: Vec<(Option<u8>, String)>,
    /// Whether the media-level extmaps replaced the inherited ones yet.
    own_extmaps: bool,
    /// Whether a media-level fingerprint replaced the inherited one yet.
    own_fingerprint: bool,
}

pub(super) fn pt_of(s: &str) -> Option<u8> {
    s.parse::<u8>().ok().filter(|&pt| pt <= 127)
}

impl MediaBuilder {
    pub(super) fn new(n: usize, value: &str, session: &Shared) -> Result<Self, SdpError> {
        let mut it = value.split_ascii_whitespace();
        let Some(kind) = it.next() else {
            return err(n, "m= line has no media type");
        };
        let Some(port) = it.next() else {
            return err(n, "m= line has no port");
        };
        let port = port.split_once('/').map_or(port, |(p, _count)| p);
        let Ok(port) = port.parse::<u16>() else {
            return err(n, "m= line port is not a number from 0 to 65535");
        };
        let Some(proto) = it.next() else {
            return err(n, "m= line has no transport protocol");
        };
        let fmt: Vec<String> = it.map(str::to_string).collect();
        if fmt.is_empty() {
            return err(n, "m= line has no formats");
        }
        let mut formats = Vec::new();
        if proto.contains("RTP/") {
            let mut seen = [false; 128];
            for f in &fmt {
                let Some(pt) = pt_of(f) else {
                    return err(n, "m= line payload type is not a number from 0 to 127");
                };
                if !std::mem::replace(&mut seen[pt as usize], true) {
                    formats.push(pt);
                }
            }
        }
        Ok(MediaBuilder {
            m: MediaDescription {
                kind: kind.to_string(),
                port,
                proto: proto.to_string(),
                fmt,
                formats,
                mid: None,
                payloads: Vec::new(),
                shared: session.clone(),
                rtcp_mux: false,
                bundle_only: false,
                rtcp_rsize: false,
                candidates: Vec::new(),
                end_of_candidates: false,
                ssrcs: Vec::new(),
                cnames: Vec::new(),
                simulcast_send: Vec::new(),
            },
            rtpmap: vec![None; 128],
            fmtp: vec![None; 128],
            fb: Vec::new(),
            own_extmaps: false,
            own_fingerprint: false,
        })
    }

    pub(super) fn attr(&mut self, n: usize, name: &str, val: Option<&str>) -> Result<(), SdpError> {
        let m = &mut self.m;
        match name {
            "mid" => {
                let mid = val.unwrap_or("").trim();
                check_mid(n, mid)?;
                m.mid = Some(mid.to_string());
            }
            "rtcp-mux" => m.rtcp_mux = true,
            "bundle-only" => m.bundle_only = true,
            "rtcp-rsize" => m.rtcp_rsize = true,
            "end-of-candidates" => m.end_of_candidates = true,
            "candidate" => {
                if let Some(c) = parse_candidate(n, val)? {
                    m.candidates.push(c);
                }
            }
            "rtpmap" => {
                const BAD: &str = "a=rtpmap is not '<pt> <codec>/<clock>[/<channels>]'";
                let (pt, enc) = val
                    .and_then(|v| v.trim().split_once(' '))
                    .unwrap_or(("", ""));
                let mut parts = enc.trim().split('/');
                let (Some(pt), Some(codec), Some(clock)) = (
                    pt_of(pt),
                    parts.next(),
                    parts.next().and_then(|c| c.parse().ok()),
                ) else {
                    return err(n, BAD);
                };
                let channels = match parts.next() {
                    None => None,
                    Some(c) => match c.parse::<u16>() {
                        Ok(c) => Some(c),
                        Err(_) => return err(n, BAD),
                    },
                };
                if codec.is_empty() || !is_visible(codec) || parts.next().is_some() {
                    return err(n, BAD);
                }
                self.rtpmap[pt as usize] = Some((codec.to_string(), clock, channels));
            }
            "fmtp" => {
                let v = val.unwrap_or("").trim();
                let (pt, params) = v.split_once(' ').unwrap_or((v, ""));
                let Some(pt) = pt_of(pt) else {
                    return err(n, "a=fmtp is not '<pt> <parameters>'");
                };
                self.fmtp[pt as usize] = Some(params.trim().to_string());
            }
            "rtcp-fb" => {
                let v = val.unwrap_or("").trim();
                let (pt, fb) = v.split_once(' ').unwrap_or((v, ""));
                let pt = match pt {
                    "*" => None,
                    _ => match pt_of(pt) {
                        Some(pt) => Some(pt),
                        None => return err(n, "a=rtcp-fb is not '<pt|*> <type> [<param>]'"),
                    },
                };
                let fb: Vec<&str> = fb.split_ascii_whitespace().collect();
                if fb.is_empty() {
                    return err(n, "a=rtcp-fb is not '<pt|*> <type> [<param>]'");
                }
                self.fb.push((pt, fb.join(" ")));
            }
            "simulcast" => m.simulcast_send = parse_simulcast_send(n, val)?,
            "ssrc" => {
                let v = val.unwrap_or("").trim();
                let (ssrc, rest) = v.split_once(' ').unwrap_or((v, ""));
                let Ok(ssrc) = ssrc.parse::<u32>() else {
                    return err(n, "a=ssrc is not '<ssrc> <attribute>[:<value>]'");
                };
                if !m.ssrcs.contains(&ssrc) {
                    m.ssrcs.push(ssrc);
                }
                if let Some(("cname", cname)) = rest.trim().split_once(':')
                    && !m.cnames.iter().any(|(s, _)| *s == ssrc)
                {
                    m.cnames.push((ssrc, cname.to_string()));
                }
            }
            "extmap" => {
                // Media-level extmaps replace the inherited session-level list.
                if !self.own_extmaps {
                    m.shared.extmaps.clear();
                    self.own_extmaps = true;
                }
                m.shared.attr(n, name, val)?;
            }
            "fingerprint" => {
                // Likewise a media-level fingerprint replaces the session-level one.
                if !self.own_fingerprint {
                    m.shared.fingerprint = None;
                    self.own_fingerprint = true;
                }
                m.shared.attr(n, name, val)?;
            }
            _ => {
                m.shared.attr(n, name, val)?;
            }
        }
        Ok(())
    }

    pub(super) fn finish(self) -> MediaDescription {
        let MediaBuilder {
            mut m,
            mut rtpmap,
            mut fmtp,
            fb,
            ..
        } = self;
        for &pt in &m.formats {
            let i = pt as usize;
            let Some((codec, clock_rate, channels)) = rtpmap.get_mut(i).and_then(Option::take)
            else {
                continue;
            };
            let rtcp_fb = fb
                .iter()
                .filter(|(p, _)| p.is_none_or(|p| p == pt))
                .map(|(_, v)| v.clone())
                .collect();
            m.payloads.push(PayloadType {
                pt,
                codec,
                clock_rate,
                channels,
                fmtp: fmtp.get_mut(i).and_then(Option::take),
                rtcp_fb,
            });
        }
        m
    }
}

/// Longest RID tern takes (RFC 8851 §10 allows any token; encoders use one to three
/// characters, and the RID travels in every RTP header extension of its stream).
pub(super) const MAX_RID: usize = 16;

/// The send direction of `a=simulcast` (RFC 8853 §5.1): `send <list> [recv <list>]` or the
/// other way round; each `;`-separated stream's first `,`-alternative, without a `~`
/// (paused) mark. A recv-only attribute gives an empty list.
fn parse_simulcast_send(n: usize, val: Option<&str>) -> Result<Vec<String>, SdpError> {
    const BAD: &str = "a=simulcast is not 'send|recv <rid>[;<rid>...] [send|recv <rid>...]'";
    let mut words = val.unwrap_or("").split_ascii_whitespace();
    let mut out = Vec::new();
    while let Some(dir) = words.next() {
        let Some(list) = words.next() else {
            return err(n, BAD);
        };
        if !matches!(dir, "send" | "recv") {
            return err(n, BAD);
        }
        for stream in list.split(';') {
            let first = stream.split(',').next().unwrap_or("");
            let rid = first.strip_prefix('~').unwrap_or(first);
            let ok = !rid.is_empty()
                && rid.len() <= MAX_RID
                && rid
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !ok {
                return err(
                    n,
                    "a=simulcast names a RID that is not 1-16 letters, digits, '-' or '_'",
                );
            }
            if dir == "send" && !out.iter().any(|r: &String| r == rid) {
                out.push(rid.to_string());
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crate::sdp::SessionDescription;
    #[test]
    fn simulcast_send_lists_each_streams_first_rid() {
        let base = "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n\
            m=video 9 UDP/TLS/RTP/SAVPF 96\r\nc=IN IP4 0.0.0.0\r\na=rtpmap:96 VP8/90000\r\n";
        let parse = |attr: &str| SessionDescription::parse(&format!("{base}{attr}\r\n"));
        let sd = parse("a=simulcast:send h;m;~l").unwrap();
        assert_eq!(sd.media()[0].simulcast_send(), ["h", "m", "l"]);
        let sd = parse("a=simulcast:recv x send q,f;h").unwrap();
        assert_eq!(sd.media()[0].simulcast_send(), ["q", "h"]);
        let sd = parse("a=simulcast:recv a;b").unwrap();
        assert!(sd.media()[0].simulcast_send().is_empty());
        let sd = SessionDescription::parse(base).unwrap();
        assert!(sd.media()[0].simulcast_send().is_empty());
        for bad in [
            "a=simulcast:send",
            "a=simulcast:sideways h;m",
            "a=simulcast:send h;;m",
            "a=simulcast:send h;m\u{e9}",
            "a=simulcast:send abcdefghijklmnopq",
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains("a=simulcast"), "{bad}: {e}");
        }
    }
}

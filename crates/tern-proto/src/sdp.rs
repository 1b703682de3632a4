//! The subset of SDP (RFC 8866, JSEP RFC 8829) a WHEP server needs.
//!
//! - [`SessionDescription::parse`] reads an offer (or, in a test client, an answer) into
//!   owned media sections. Errors name the line and the problem ("line 7: m= line has no
//!   port"). Input is capped at [`MAX_SDP_LEN`] bytes and [`MAX_MEDIA`] media sections.
//! - [`negotiate`] decides what the server can send: H264 video and Opus audio, sendonly.
//! - [`write_answer`] writes the ICE-lite, DTLS-passive answer for a negotiated offer.
//! - [`parse_sdpfrag`] reads trickle-ICE PATCH bodies (RFC 8840).
//! - [`write_offer`] writes the recvonly offer of a lean test client.
//! - [`write_server_offer`], [`negotiate_answer`] and [`write_client_answer`] are the
//!   server-offer direction of OvenMediaEngine-style signalling (the server offers).
//!
//! Session-level `a=ice-ufrag`, `a=ice-pwd`, `a=fingerprint`, `a=setup`, direction and
//! `a=extmap` lines are inherited by every media section that does not override them, so
//! the per-media accessors already give the effective value.

use std::fmt::{self, Write as _};
use std::net::IpAddr;

/// URI of the absolute capture time RTP header extension.
pub const ABS_CAPTURE_TIME_URI: &str =
    "http://www.webrtc.org/experiments/rtp-hdrext/abs-capture-time";
/// Largest SDP body accepted (64 KiB); a browser offer is 4–8 KiB.
pub const MAX_SDP_LEN: usize = 64 * 1024;
/// Most media sections accepted; a WHEP offer has two or three.
pub const MAX_MEDIA: usize = 16;
/// Longest `a=mid` value accepted (RFC 8843 leaves it open; browsers use 1–3 characters).
const MAX_MID_LEN: usize = 64;
/// Longest ICE ufrag or password (RFC 8839 §5.4).
const MAX_ICE_LEN: usize = 256;

/// Why an SDP body could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SdpError {
    /// The body is larger than [`MAX_SDP_LEN`].
    #[error("SDP is {0} bytes; the limit is {MAX_SDP_LEN}")]
    TooLong(usize),
    /// The body has no lines.
    #[error("SDP is empty")]
    Empty,
    /// A line is malformed; `line` counts from 1.
    #[error("line {line}: {problem}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        problem: &'static str,
    },
}

fn err<T>(line: usize, problem: &'static str) -> Result<T, SdpError> {
    Err(SdpError::Line { line, problem })
}

/// Media direction (RFC 8866 §6.7), from the offerer's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Direction {
    /// `a=sendrecv`, also the default when no direction is given.
    #[default]
    SendRecv,
    /// `a=sendonly`.
    SendOnly,
    /// `a=recvonly`.
    RecvOnly,
    /// `a=inactive`.
    Inactive,
}

impl Direction {
    fn from_attr(name: &str) -> Option<Self> {
        Some(match name {
            "sendrecv" => Direction::SendRecv,
            "sendonly" => Direction::SendOnly,
            "recvonly" => Direction::RecvOnly,
            "inactive" => Direction::Inactive,
            _ => return None,
        })
    }
}

/// DTLS role negotiation (`a=setup`, RFC 8842).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setup {
    /// `actpass`: the offerer takes either role.
    ActPass,
    /// `active`: DTLS client.
    Active,
    /// `passive`: DTLS server.
    Passive,
    /// `holdconn`: no connection yet.
    HoldConn,
}

/// One ICE candidate (`a=candidate`, RFC 8839 §5.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Foundation.
    pub foundation: String,
    /// Component id (1 = RTP; with rtcp-mux the only one).
    pub component: u16,
    /// Transport, e.g. `udp` (case as given).
    pub transport: String,
    /// Priority.
    pub priority: u32,
    /// Address.
    pub ip: IpAddr,
    /// Port.
    pub port: u16,
    /// Type: `host`, `srflx`, `prflx` or `relay`.
    pub typ: String,
}

/// One RTP payload type of a media section, assembled from `a=rtpmap`, `a=fmtp` and
/// `a=rtcp-fb` lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadType {
    /// Payload type number.
    pub pt: u8,
    /// Encoding name as given, e.g. `H264`, `opus`.
    pub codec: String,
    /// Clock rate in Hz.
    pub clock_rate: u32,
    /// Channel count, when the rtpmap gives one (audio).
    pub channels: Option<u16>,
    /// The `a=fmtp` parameters, as given.
    pub fmtp: Option<String>,
    /// `a=rtcp-fb` values for this payload type (including `*` ones), whitespace-normalized:
    /// `nack`, `nack pli`, `ccm fir`, `transport-cc`, ...
    pub rtcp_fb: Vec<String>,
}

impl PayloadType {
    /// Whether `a=rtcp-fb` offers `value` (e.g. `"nack pli"`) for this payload type.
    pub fn has_fb(&self, value: &str) -> bool {
        self.rtcp_fb.iter().any(|f| f.eq_ignore_ascii_case(value))
    }

    /// Value of the fmtp parameter `key` (case-insensitive key), e.g. `packetization-mode`.
    pub fn fmtp_param(&self, key: &str) -> Option<&str> {
        self.fmtp.as_deref()?.split(';').find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            k.trim().eq_ignore_ascii_case(key).then(|| v.trim())
        })
    }
}

/// One `a=extmap` (RFC 8285): header extension id and URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extmap {
    /// Extension id, 1–255 (1–14 fit the one-byte header form).
    pub id: u8,
    /// Extension URI.
    pub uri: String,
}

/// Attributes that may appear at session level and are inherited by media sections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Shared {
    ice_ufrag: Option<String>,
    ice_pwd: Option<String>,
    fingerprint: Option<(String, Vec<u8>)>,
    setup: Option<Setup>,
    direction: Option<Direction>,
    extmaps: Vec<Extmap>,
}

/// One media section (`m=` line and its attributes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaDescription {
    kind: String,
    port: u16,
    proto: String,
    fmt: Vec<String>,
    formats: Vec<u8>,
    mid: Option<String>,
    payloads: Vec<PayloadType>,
    shared: Shared,
    rtcp_mux: bool,
    rtcp_rsize: bool,
    candidates: Vec<Candidate>,
    end_of_candidates: bool,
    ssrcs: Vec<u32>,
    cnames: Vec<(u32, String)>,
}

impl MediaDescription {
    /// The media type: `video`, `audio`, `application`, ...
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The port; 0 marks a rejected or disabled section.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The transport protocol, e.g. `UDP/TLS/RTP/SAVPF`.
    pub fn proto(&self) -> &str {
        &self.proto
    }

    /// The payload types of an RTP section in m-line order (duplicates removed); empty for
    /// non-RTP sections.
    pub fn formats(&self) -> &[u8] {
        &self.formats
    }

    /// The m-line format tokens as given (e.g. `webrtc-datachannel`).
    pub fn fmt_tokens(&self) -> &[String] {
        &self.fmt
    }

    /// `a=mid`.
    pub fn mid(&self) -> Option<&str> {
        self.mid.as_deref()
    }

    /// Payload types that have an `a=rtpmap`, in m-line order.
    pub fn payloads(&self) -> &[PayloadType] {
        &self.payloads
    }

    /// The payload type `pt`, if it has an `a=rtpmap`.
    pub fn payload(&self, pt: u8) -> Option<&PayloadType> {
        self.payloads.iter().find(|p| p.pt == pt)
    }

    /// Header extensions (media-level, then inherited session-level ones).
    pub fn extmaps(&self) -> &[Extmap] {
        &self.shared.extmaps
    }

    /// The id of the header extension with `uri`.
    pub fn extmap_id(&self, uri: &str) -> Option<u8> {
        self.shared
            .extmaps
            .iter()
            .find(|e| e.uri == uri)
            .map(|e| e.id)
    }

    /// Effective direction (media-level, else session-level, else sendrecv).
    pub fn direction(&self) -> Direction {
        self.shared.direction.unwrap_or_default()
    }

    /// Effective `a=ice-ufrag`.
    pub fn ice_ufrag(&self) -> Option<&str> {
        self.shared.ice_ufrag.as_deref()
    }

    /// Effective `a=ice-pwd`.
    pub fn ice_pwd(&self) -> Option<&str> {
        self.shared.ice_pwd.as_deref()
    }

    /// Effective `a=fingerprint` as (hash algorithm, lowercased; digest bytes).
    pub fn fingerprint(&self) -> Option<(&str, &Vec<u8>)> {
        self.shared
            .fingerprint
            .as_ref()
            .map(|(a, b)| (a.as_str(), b))
    }

    /// Effective `a=setup`.
    pub fn setup(&self) -> Option<Setup> {
        self.shared.setup
    }

    /// Whether `a=rtcp-mux` is present.
    pub fn rtcp_mux(&self) -> bool {
        self.rtcp_mux
    }

    /// Whether `a=rtcp-rsize` is present.
    pub fn rtcp_rsize(&self) -> bool {
        self.rtcp_rsize
    }

    /// Candidates with an IP address (mDNS `.local` names are skipped).
    pub fn candidates(&self) -> &[Candidate] {
        &self.candidates
    }

    /// Whether `a=end-of-candidates` is present.
    pub fn end_of_candidates(&self) -> bool {
        self.end_of_candidates
    }

    /// SSRCs named by `a=ssrc` lines, in order of first appearance.
    pub fn ssrcs(&self) -> &[u32] {
        &self.ssrcs
    }

    /// The `cname` of `ssrc`, from `a=ssrc:<ssrc> cname:<cname>`.
    pub fn ssrc_cname(&self, ssrc: u32) -> Option<&str> {
        self.cnames
            .iter()
            .find(|(s, _)| *s == ssrc)
            .map(|(_, c)| c.as_str())
    }
}

/// A parsed SDP offer or answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionDescription {
    media: Vec<MediaDescription>,
    bundle: Vec<String>,
    ice_lite: bool,
    shared: Shared,
}

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

    /// The media sections in m-line order.
    pub fn media(&self) -> &[MediaDescription] {
        &self.media
    }

    /// The mids of the first `a=group:BUNDLE`, empty when there is none.
    pub fn bundle(&self) -> &[String] {
        &self.bundle
    }

    /// Whether `a=ice-lite` is present at session level.
    pub fn ice_lite(&self) -> bool {
        self.ice_lite
    }

    /// Session-level `a=ice-ufrag`.
    pub fn ice_ufrag(&self) -> Option<&str> {
        self.shared.ice_ufrag.as_deref()
    }

    /// Session-level `a=ice-pwd`.
    pub fn ice_pwd(&self) -> Option<&str> {
        self.shared.ice_pwd.as_deref()
    }

    /// Session-level `a=fingerprint` as (hash algorithm, digest bytes).
    pub fn fingerprint(&self) -> Option<(&str, &Vec<u8>)> {
        self.shared
            .fingerprint
            .as_ref()
            .map(|(a, b)| (a.as_str(), b))
    }
}

/// Splits the body into `(line number, type letter, value)`, skipping blank lines.
fn lines(s: &str) -> impl Iterator<Item = Result<(usize, u8, &str), SdpError>> {
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
fn split_attr(v: &str) -> (&str, Option<&str>) {
    match v.split_once(':') {
        Some((name, val)) => (name, Some(val)),
        None => (v, None),
    }
}

fn is_visible(s: &str) -> bool {
    s.bytes().all(|b| (0x21..=0x7E).contains(&b))
}

fn check_mid(n: usize, mid: &str) -> Result<(), SdpError> {
    if mid.is_empty() || mid.len() > MAX_MID_LEN || !is_visible(mid) {
        return err(n, "a=mid must be 1-64 visible ASCII characters");
    }
    Ok(())
}

fn ice_value(n: usize, v: Option<&str>, colon_ok: bool) -> Result<String, SdpError> {
    let v = v.unwrap_or("").trim();
    if v.is_empty() || v.len() > MAX_ICE_LEN || !is_visible(v) || (!colon_ok && v.contains(':')) {
        return err(
            n,
            "a=ice-ufrag/a=ice-pwd must be 1-256 visible ASCII characters (no ':' in a ufrag)",
        );
    }
    Ok(v.to_string())
}

fn parse_fingerprint(n: usize, v: Option<&str>) -> Result<(String, Vec<u8>), SdpError> {
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

fn parse_extmap(n: usize, v: Option<&str>) -> Result<Option<Extmap>, SdpError> {
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
fn parse_candidate(n: usize, v: Option<&str>) -> Result<Option<Candidate>, SdpError> {
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
    fn attr(&mut self, n: usize, name: &str, val: Option<&str>) -> Result<bool, SdpError> {
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
struct MediaBuilder {
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

fn pt_of(s: &str) -> Option<u8> {
    s.parse::<u8>().ok().filter(|&pt| pt <= 127)
}

impl MediaBuilder {
    fn new(n: usize, value: &str, session: &Shared) -> Result<Self, SdpError> {
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
                rtcp_rsize: false,
                candidates: Vec::new(),
                end_of_candidates: false,
                ssrcs: Vec::new(),
                cnames: Vec::new(),
            },
            rtpmap: vec![None; 128],
            fmtp: vec![None; 128],
            fb: Vec::new(),
            own_extmaps: false,
            own_fingerprint: false,
        })
    }

    fn attr(&mut self, n: usize, name: &str, val: Option<&str>) -> Result<(), SdpError> {
        let m = &mut self.m;
        match name {
            "mid" => {
                let mid = val.unwrap_or("").trim();
                check_mid(n, mid)?;
                m.mid = Some(mid.to_string());
            }
            "rtcp-mux" => m.rtcp_mux = true,
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

    fn finish(self) -> MediaDescription {
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

// ---------------------------------------------------------------------------------------
// Negotiation

/// Why the server cannot serve an offer. Display is a sentence for the HTTP error body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NegotiateError {
    /// No usable section has an ICE username fragment.
    #[error("offer has no a=ice-ufrag")]
    NoIceUfrag,
    /// No usable section has an ICE password.
    #[error("offer has no a=ice-pwd")]
    NoIcePwd,
    /// No SHA-256 DTLS fingerprint.
    #[error("offer has no sha-256 a=fingerprint")]
    NoFingerprint,
    /// A usable section lacks `a=rtcp-mux`.
    #[error("offer's media has no a=rtcp-mux")]
    NoRtcpMux,
    /// `a=setup:passive` (or holdconn) leaves the server, which is DTLS-passive, no role.
    #[error("offer's a=setup must be actpass or active")]
    Setup,
    /// Audio/video sections with a usable codec exist, but none wants to receive.
    #[error("offer's media must be recvonly or sendrecv")]
    Direction,
    /// No video section with H264 packetization-mode=1 and no audio section with Opus.
    #[error("offer has no H264 packetization-mode=1 or Opus payload")]
    NoCodec,
}

/// What was agreed for one media section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NegotiatedMedia {
    /// The section's mid ("" when the offer gave none).
    pub mid: String,
    /// Index of the section among the offer's m-lines.
    pub index: usize,
    /// The chosen payload type.
    pub pt: u8,
    /// `a=rtcp-fb:<pt> nack` was offered.
    pub nack: bool,
    /// `a=rtcp-fb:<pt> nack pli` was offered.
    pub pli: bool,
    /// `a=rtcp-fb:<pt> ccm fir` was offered.
    pub fir: bool,
    /// Extension id of abs-capture-time, when offered with an id of 1–14.
    pub abs_capture_time_ext: Option<u8>,
    /// The fmtp the answer carries: the offer's for H264, ours for Opus.
    pub fmtp: String,
}

/// The result of [`negotiate`]: the peer's transport parameters and the accepted sections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// The offerer's ICE username fragment.
    pub remote_ufrag: String,
    /// The offerer's ICE password.
    pub remote_pwd: String,
    /// SHA-256 of the offerer's DTLS certificate.
    pub remote_fingerprint: [u8; 32],
    video: Option<NegotiatedMedia>,
    audio: Option<NegotiatedMedia>,
    /// Whether the answer carries a BUNDLE group.
    bundle: bool,
}

impl Negotiated {
    /// The accepted video section.
    pub fn video(&self) -> Option<&NegotiatedMedia> {
        self.video.as_ref()
    }

    /// The accepted audio section.
    pub fn audio(&self) -> Option<&NegotiatedMedia> {
        self.audio.as_ref()
    }

    fn accepted(&self) -> impl Iterator<Item = &NegotiatedMedia> {
        let mut v: Vec<&NegotiatedMedia> = self.video.iter().chain(self.audio.iter()).collect();
        v.sort_by_key(|m| m.index);
        v.into_iter()
    }
}

/// Our Opus parameters (RFC 7587): 10 ms minimum packets, in-band FEC.
const OPUS_FMTP: &str = "minptime=10;useinbandfec=1";

/// Whether an H264 payload type carries what the server sends.
///
/// The rule: H264/90000, `packetization-mode=1`, and a `profile-level-id` whose
/// profile_idc is 0x42 (Baseline; any constraint flags, since a Baseline decoder decodes
/// the Constrained Baseline stream we send) and whose level_idc is at least 31 (level 3.1).
/// A missing `profile-level-id` is accepted: browsers that omit it decode far more than
/// the RFC 6184 default of Baseline level 1.0.
fn h264_ok(p: &PayloadType) -> bool {
    if !p.codec.eq_ignore_ascii_case("H264") || p.clock_rate != 90_000 {
        return false;
    }
    if p.fmtp_param("packetization-mode") != Some("1") {
        return false;
    }
    match p.fmtp_param("profile-level-id") {
        None => true,
        Some(id) => {
            let Ok(v) = u32::from_str_radix(id, 16) else {
                return false;
            };
            id.len() == 6 && (v >> 16) == 0x42 && (v & 0xFF) >= 31
        }
    }
}

fn opus_ok(p: &PayloadType) -> bool {
    p.codec.eq_ignore_ascii_case("opus") && p.clock_rate == 48_000 && p.channels == Some(2)
}

fn is_srtp(proto: &str) -> bool {
    proto.ends_with("RTP/SAVPF") || proto.ends_with("RTP/SAVP")
}

/// Decides what the server sends for `offer`: H264 video and Opus audio, sendonly.
///
/// The first video section with an acceptable H264 payload type (see the rule on
/// `h264_ok` in the source: Baseline profile_idc 0x42, level ≥ 3.1, packetization-mode=1;
/// the first such payload type in the offer's order wins) and the first audio section with
/// opus/48000/2 are accepted when they are recvonly or sendrecv, have a non-zero port and
/// an SRTP profile. Every other section is rejected in the answer (port 0). When more than
/// one section is accepted they must all be in the offer's BUNDLE group; otherwise only the
/// first is kept, since the server has one ICE/DTLS transport per viewer.
///
/// Errors when nothing is usable, or when the accepted sections lack `a=ice-ufrag`,
/// `a=ice-pwd`, a sha-256 `a=fingerprint` or `a=rtcp-mux`, or offer `a=setup:passive`.
pub fn negotiate(offer: &SessionDescription) -> Result<Negotiated, NegotiateError> {
    let mut video: Option<NegotiatedMedia> = None;
    let mut audio: Option<NegotiatedMedia> = None;
    let mut wrong_direction = false;
    for (index, m) in offer.media.iter().enumerate() {
        if m.port == 0 || !is_srtp(&m.proto) {
            continue;
        }
        let (slot, pick): (&mut Option<NegotiatedMedia>, fn(&PayloadType) -> bool) =
            match m.kind.as_str() {
                "video" => (&mut video, h264_ok),
                "audio" => (&mut audio, opus_ok),
                _ => continue,
            };
        if slot.is_some() {
            continue;
        }
        let Some(p) = m.payloads.iter().find(|p| pick(p)) else {
            continue;
        };
        if !matches!(m.direction(), Direction::RecvOnly | Direction::SendRecv) {
            wrong_direction = true;
            continue;
        }
        let is_video = m.kind == "video";
        *slot = Some(NegotiatedMedia {
            mid: m.mid.clone().unwrap_or_default(),
            index,
            pt: p.pt,
            nack: p.has_fb("nack"),
            pli: is_video && p.has_fb("nack pli"),
            fir: is_video && p.has_fb("ccm fir"),
            abs_capture_time_ext: m.extmap_id(ABS_CAPTURE_TIME_URI).filter(|&id| id <= 14),
            fmtp: if is_video {
                p.fmtp.clone().unwrap_or_default()
            } else {
                OPUS_FMTP.to_string()
            },
        });
    }
    let in_bundle = |m: &Option<NegotiatedMedia>| {
        m.as_ref()
            .is_none_or(|m| !m.mid.is_empty() && offer.bundle.contains(&m.mid))
    };
    let bundle = in_bundle(&video) && in_bundle(&audio) && !offer.bundle.is_empty();
    if !bundle && let (Some(v), Some(a)) = (&video, &audio) {
        // One transport only: keep the earlier section.
        if v.index < a.index {
            audio = None;
        } else {
            video = None;
        }
    }
    let first = match (&video, &audio) {
        (None, None) if wrong_direction => return Err(NegotiateError::Direction),
        (None, None) => return Err(NegotiateError::NoCodec),
        (Some(v), Some(a)) => v.index.min(a.index),
        (Some(m), None) | (None, Some(m)) => m.index,
    };
    let Some(t) = offer.media.get(first) else {
        return Err(NegotiateError::NoCodec);
    };
    let remote_ufrag = t.ice_ufrag().ok_or(NegotiateError::NoIceUfrag)?.to_string();
    let remote_pwd = t.ice_pwd().ok_or(NegotiateError::NoIcePwd)?.to_string();
    let remote_fingerprint = t
        .fingerprint()
        .filter(|(algo, _)| *algo == "sha-256")
        .and_then(|(_, b)| <[u8; 32]>::try_from(b.as_slice()).ok())
        .ok_or(NegotiateError::NoFingerprint)?;
    if matches!(t.setup(), Some(Setup::Passive | Setup::HoldConn)) {
        return Err(NegotiateError::Setup);
    }
    for m in video.iter().chain(audio.iter()) {
        if !offer.media.get(m.index).is_some_and(|s| s.rtcp_mux) {
            return Err(NegotiateError::NoRtcpMux);
        }
    }
    Ok(Negotiated {
        remote_ufrag,
        remote_pwd,
        remote_fingerprint,
        video,
        audio,
        bundle,
    })
}

// ---------------------------------------------------------------------------------------
// Writing

/// Our side of the answer.
#[derive(Debug, Clone)]
pub struct AnswerParams<'a> {
    /// Our ICE username fragment.
    pub ice_ufrag: &'a str,
    /// Our ICE password.
    pub ice_pwd: &'a str,
    /// SHA-256 of our DTLS certificate.
    pub fingerprint_sha256: &'a [u8; 32],
    /// Address of our single host candidate.
    pub candidate_ip: IpAddr,
    /// Port of our single host candidate.
    pub candidate_port: u16,
    /// SSRC of the video we send.
    pub video_ssrc: u32,
    /// SSRC of the audio we send.
    pub audio_ssrc: u32,
    /// RTCP CNAME.
    pub cname: &'a str,
    /// The o= line session id.
    pub session_id: u64,
}

/// An SDP body being written, CRLF line ends.
struct Out(String);

impl Out {
    fn line(&mut self, args: fmt::Arguments<'_>) {
        // Writing into a String cannot fail.
        let _ = self.0.write_fmt(args);
        self.0.push_str("\r\n");
    }
}

macro_rules! line {
    ($o:expr, $($t:tt)*) => { $o.line(format_args!($($t)*)) };
}

/// `AA:BB:...` uppercase hex.
fn fingerprint_hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 3);
    for (i, x) in b.iter().enumerate() {
        if i > 0 {
            s.push(':');
        }
        let _ = write!(s, "{x:02X}");
    }
    s
}

fn transport_lines(o: &mut Out, ufrag: &str, pwd: &str, fp: &[u8], setup: &str) {
    line!(o, "a=ice-ufrag:{ufrag}");
    line!(o, "a=ice-pwd:{pwd}");
    line!(o, "a=fingerprint:sha-256 {}", fingerprint_hex(fp));
    line!(o, "a=setup:{setup}");
}

/// Writes the answer to `offer` for what [`negotiate`] agreed.
///
/// The server is ICE-lite with one host candidate, DTLS passive, and sends only. Accepted
/// sections echo the offer's mid, proto, chosen payload type (H264 with the offer's fmtp,
/// Opus with `minptime=10;useinbandfec=1`), the nack / nack pli / ccm fir feedback and the
/// abs-capture-time extension when offered, and `a=rtcp-rsize` when offered. Every other
/// section is rejected: port 0, its first format, `a=inactive`.
pub fn write_answer(offer: &SessionDescription, neg: &Negotiated, p: &AnswerParams<'_>) -> String {
    let mut o = Out(String::with_capacity(2048));
    line!(o, "v=0");
    line!(o, "o=- {} 2 IN IP4 127.0.0.1", p.session_id);
    line!(o, "s=-");
    line!(o, "t=0 0");
    if neg.bundle {
        let mids: Vec<&str> = neg.accepted().map(|m| m.mid.as_str()).collect();
        line!(o, "a=group:BUNDLE {}", mids.join(" "));
    }
    line!(o, "a=ice-lite");
    line!(o, "a=msid-semantic: WMS tern");
    for (i, m) in offer.media.iter().enumerate() {
        let accepted = [(neg.video(), p.video_ssrc), (neg.audio(), p.audio_ssrc)]
            .into_iter()
            .find_map(|(n, ssrc)| n.filter(|n| n.index == i).map(|n| (n, ssrc)));
        match accepted {
            Some((n, ssrc)) => write_accepted(&mut o, m, n, ssrc, p),
            None => write_rejected(&mut o, m, p),
        }
    }
    o.0
}

fn write_accepted(
    o: &mut Out,
    m: &MediaDescription,
    n: &NegotiatedMedia,
    ssrc: u32,
    p: &AnswerParams<'_>,
) {
    let pt = n.pt;
    line!(o, "m={} 9 {} {pt}", m.kind, m.proto);
    line!(o, "c=IN IP4 0.0.0.0");
    if let Some(mid) = &m.mid {
        line!(o, "a=mid:{mid}");
    }
    transport_lines(o, p.ice_ufrag, p.ice_pwd, p.fingerprint_sha256, "passive");
    line!(o, "a=sendonly");
    line!(o, "a=rtcp-mux");
    if m.rtcp_rsize {
        line!(o, "a=rtcp-rsize");
    }
    if let Some(pl) = m.payload(pt) {
        match pl.channels {
            Some(c) => line!(o, "a=rtpmap:{pt} {}/{}/{c}", pl.codec, pl.clock_rate),
            None => line!(o, "a=rtpmap:{pt} {}/{}", pl.codec, pl.clock_rate),
        }
    }
    if !n.fmtp.is_empty() {
        line!(o, "a=fmtp:{pt} {}", n.fmtp);
    }
    if n.nack {
        line!(o, "a=rtcp-fb:{pt} nack");
    }
    if n.pli {
        line!(o, "a=rtcp-fb:{pt} nack pli");
    }
    if n.fir {
        line!(o, "a=rtcp-fb:{pt} ccm fir");
    }
    if let Some(id) = n.abs_capture_time_ext {
        line!(o, "a=extmap:{id} {ABS_CAPTURE_TIME_URI}");
    }
    line!(o, "a=msid:tern {}", m.kind);
    line!(o, "a=ssrc:{ssrc} cname:{}", p.cname);
    line!(
        o,
        "a=candidate:1 1 udp 2130706431 {} {} typ host",
        p.candidate_ip,
        p.candidate_port
    );
    line!(o, "a=end-of-candidates");
}

fn write_rejected(o: &mut Out, m: &MediaDescription, p: &AnswerParams<'_>) {
    let fmt = m.fmt.first().map_or("0", String::as_str);
    line!(o, "m={} 0 {} {fmt}", m.kind, m.proto);
    line!(o, "c=IN IP4 0.0.0.0");
    if let Some(mid) = &m.mid {
        line!(o, "a=mid:{mid}");
    }
    transport_lines(o, p.ice_ufrag, p.ice_pwd, p.fingerprint_sha256, "passive");
    line!(o, "a=inactive");
    if let Some(pl) = pt_of(fmt).and_then(|pt| m.payload(pt)) {
        match pl.channels {
            Some(c) => line!(o, "a=rtpmap:{} {}/{}/{c}", pl.pt, pl.codec, pl.clock_rate),
            None => line!(o, "a=rtpmap:{} {}/{}", pl.pt, pl.codec, pl.clock_rate),
        }
    }
}

/// What a lean test client puts in its offer.
#[derive(Debug, Clone)]
pub struct OfferParams<'a> {
    /// Our ICE username fragment.
    pub ice_ufrag: &'a str,
    /// Our ICE password.
    pub ice_pwd: &'a str,
    /// SHA-256 of our DTLS certificate.
    pub fingerprint_sha256: &'a [u8; 32],
    /// Offer a video section.
    pub video: bool,
    /// Offer an audio section.
    pub audio: bool,
    /// Offer the abs-capture-time extension (id 4).
    pub abs_capture_time: bool,
}

/// Writes a recvonly offer: H264 pt 96 (packetization-mode=1, profile-level-id=42e01f,
/// nack / nack pli / ccm fir) and Opus pt 111, BUNDLE, rtcp-mux, `a=setup:actpass`, mids
/// "0" and "1" in order. [`negotiate`] accepts it.
pub fn write_offer(p: &OfferParams<'_>) -> String {
    let mut o = Out(String::with_capacity(1536));
    let mut mids = Vec::new();
    if p.video {
        mids.push(("video", mids.len()));
    }
    if p.audio {
        mids.push(("audio", mids.len()));
    }
    line!(o, "v=0");
    line!(o, "o=- 1 2 IN IP4 127.0.0.1");
    line!(o, "s=-");
    line!(o, "t=0 0");
    if !mids.is_empty() {
        let list: Vec<String> = mids.iter().map(|(_, i)| i.to_string()).collect();
        line!(o, "a=group:BUNDLE {}", list.join(" "));
    }
    line!(o, "a=msid-semantic: WMS");
    for (kind, mid) in mids {
        let pt = if kind == "video" { 96 } else { 111 };
        line!(o, "m={kind} 9 UDP/TLS/RTP/SAVPF {pt}");
        line!(o, "c=IN IP4 0.0.0.0");
        line!(o, "a=mid:{mid}");
        transport_lines(
            &mut o,
            p.ice_ufrag,
            p.ice_pwd,
            p.fingerprint_sha256,
            "actpass",
        );
        line!(o, "a=recvonly");
        line!(o, "a=rtcp-mux");
        line!(o, "a=rtcp-rsize");
        if p.abs_capture_time {
            line!(o, "a=extmap:4 {ABS_CAPTURE_TIME_URI}");
        }
        if kind == "video" {
            line!(o, "a=rtpmap:96 H264/90000");
            line!(o, "a=rtcp-fb:96 nack");
            line!(o, "a=rtcp-fb:96 nack pli");
            line!(o, "a=rtcp-fb:96 ccm fir");
            line!(
                o,
                "a=fmtp:96 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f"
            );
        } else {
            line!(o, "a=rtpmap:111 opus/48000/2");
            line!(o, "a=fmtp:111 {OPUS_FMTP}");
        }
    }
    o.0
}

// ---------------------------------------------------------------------------------------
// Trickle ICE fragments

/// A trickle-ICE `application/trickle-ice-sdpfrag` body (RFC 8840).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SdpFrag {
    /// `a=ice-ufrag` (session or media level; the first one wins).
    pub ice_ufrag: Option<String>,
    /// `a=ice-pwd` (session or media level; the first one wins).
    pub ice_pwd: Option<String>,
    /// `a=mid` of each media section, in order.
    pub mids: Vec<String>,
    /// Candidates with an IP address (mDNS names are skipped).
    pub candidates: Vec<Candidate>,
    /// Whether `a=end-of-candidates` is present.
    pub end_of_candidates: bool,
}

/// Parses a trickle-ICE sdpfrag body: `a=` and `m=` lines, same limits as
/// [`SessionDescription::parse`]. Other line types are ignored.
pub fn parse_sdpfrag(s: &str) -> Result<SdpFrag, SdpError> {
    if s.len() > MAX_SDP_LEN {
        return Err(SdpError::TooLong(s.len()));
    }
    let mut f = SdpFrag::default();
    let mut sections = 0usize;
    for item in lines(s) {
        let (n, ty, value) = item?;
        match ty {
            b'm' => {
                if sections == MAX_MEDIA {
                    return err(n, "more than 16 m= sections");
                }
                MediaBuilder::new(n, value, &Shared::default())?;
                sections += 1;
            }
            b'a' => {
                let (name, val) = split_attr(value);
                match name {
                    "ice-ufrag" => {
                        let v = ice_value(n, val, false)?;
                        f.ice_ufrag.get_or_insert(v);
                    }
                    "ice-pwd" => {
                        let v = ice_value(n, val, true)?;
                        f.ice_pwd.get_or_insert(v);
                    }
                    "mid" => {
                        let mid = val.unwrap_or("").trim();
                        check_mid(n, mid)?;
                        f.mids.push(mid.to_string());
                    }
                    "candidate" => {
                        if let Some(c) = parse_candidate(n, val)? {
                            f.candidates.push(c);
                        }
                    }
                    "end-of-candidates" => f.end_of_candidates = true,
                    _ => {}
                }
            }
            _ => {}
        }
    }
    Ok(f)
}

// ---------------------------------------------------------------------------------------
// The server-offer direction (OvenMediaEngine-style signalling)

mod server_offer;
pub use server_offer::{
    AnswerMismatch, ClientAnswerParams, ClientChoice, SERVER_ABS_CAPTURE_TIME_ID, SERVER_AUDIO_PT,
    SERVER_VIDEO_PT, ServerOfferParams, negotiate_answer, parse_candidate_line,
    write_client_answer, write_server_offer,
};

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const FP: &str = "A1:B2:C3:D4:E5:F6:07:18:29:3A:4B:5C:6D:7E:8F:90:01:12:23:34:45:56:67:78:89:9A:AB:BC:CD:DE:EF:F0";

    /// A Chrome recvonly WHEP offer (two transceivers plus a data channel), as Chrome 12x
    /// writes it, with the abs-capture-time extension enabled and two candidates (one mDNS).
    fn chrome_offer() -> String {
        format!(
            "v=0\r
o=- 4215775240449105457 2 IN IP4 127.0.0.1\r
s=-\r
t=0 0\r
a=group:BUNDLE 0 1 2\r
a=extmap-allow-mixed\r
a=msid-semantic: WMS\r
m=video 9 UDP/TLS/RTP/SAVPF 96 97 98 99 100 101 102 103 104 105 106 107 108 109 127 125 39 40 45 46 112 113 114\r
c=IN IP4 0.0.0.0\r
a=rtcp:9 IN IP4 0.0.0.0\r
a=candidate:1467250027 1 udp 2122260223 192.168.1.10 56143 typ host generation 0 network-id 1\r
a=candidate:3598475 1 udp 2122194687 4b2a6e35-8c4f-4d6a-9f3e-2a1b3c4d5e6f.local 55000 typ host generation 0 network-id 2\r
a=ice-ufrag:Kq2u\r
a=ice-pwd:ZUxUn1kGyk5ZRTQ9ZB0f4SDt\r
a=ice-options:trickle\r
a=fingerprint:sha-256 {FP}\r
a=setup:actpass\r
a=mid:0\r
a=extmap:1 urn:ietf:params:rtp-hdrext:toffset\r
a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time\r
a=extmap:3 urn:3gpp:video-orientation\r
a=extmap:4 http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01\r
a=extmap:5 http://www.webrtc.org/experiments/rtp-hdrext/playout-delay\r
a=extmap:6 http://www.webrtc.org/experiments/rtp-hdrext/video-content-type\r
a=extmap:7 http://www.webrtc.org/experiments/rtp-hdrext/video-timing\r
a=extmap:8 http://www.webrtc.org/experiments/rtp-hdrext/color-space\r
a=extmap:9 urn:ietf:params:rtp-hdrext:sdes:mid\r
a=extmap:10 urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id\r
a=extmap:11 urn:ietf:params:rtp-hdrext:sdes:repaired-rtp-stream-id\r
a=extmap:13 http://www.webrtc.org/experiments/rtp-hdrext/abs-capture-time\r
a=recvonly\r
a=rtcp-mux\r
a=rtcp-rsize\r
a=rtpmap:96 VP8/90000\r
a=rtcp-fb:96 goog-remb\r
a=rtcp-fb:96 transport-cc\r
a=rtcp-fb:96 ccm fir\r
a=rtcp-fb:96 nack\r
a=rtcp-fb:96 nack pli\r
a=rtpmap:97 rtx/90000\r
a=fmtp:97 apt=96\r
a=rtpmap:98 VP9/90000\r
a=rtcp-fb:98 goog-remb\r
a=rtcp-fb:98 transport-cc\r
a=rtcp-fb:98 ccm fir\r
a=rtcp-fb:98 nack\r
a=rtcp-fb:98 nack pli\r
a=fmtp:98 profile-id=0\r
a=rtpmap:99 rtx/90000\r
a=fmtp:99 apt=98\r
a=rtpmap:100 VP9/90000\r
a=rtcp-fb:100 goog-remb\r
a=rtcp-fb:100 transport-cc\r
a=rtcp-fb:100 ccm fir\r
a=rtcp-fb:100 nack\r
a=rtcp-fb:100 nack pli\r
a=fmtp:100 profile-id=2\r
a=rtpmap:101 rtx/90000\r
a=fmtp:101 apt=100\r
a=rtpmap:102 H264/90000\r
a=rtcp-fb:102 goog-remb\r
a=rtcp-fb:102 transport-cc\r
a=rtcp-fb:102 ccm fir\r
a=rtcp-fb:102 nack\r
a=rtcp-fb:102 nack pli\r
a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42001f\r
a=rtpmap:103 rtx/90000\r
a=fmtp:103 apt=102\r
a=rtpmap:104 H264/90000\r
a=rtcp-fb:104 goog-remb\r
a=rtcp-fb:104 transport-cc\r
a=rtcp-fb:104 ccm fir\r
a=rtcp-fb:104 nack\r
a=rtcp-fb:104 nack pli\r
a=fmtp:104 level-asymmetry-allowed=1;packetization-mode=0;profile-level-id=42001f\r
a=rtpmap:105 rtx/90000\r
a=fmtp:105 apt=104\r
a=rtpmap:106 H264/90000\r
a=rtcp-fb:106 goog-remb\r
a=rtcp-fb:106 transport-cc\r
a=rtcp-fb:106 ccm fir\r
a=rtcp-fb:106 nack\r
a=rtcp-fb:106 nack pli\r
a=fmtp:106 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f\r
a=rtpmap:107 rtx/90000\r
a=fmtp:107 apt=106\r
a=rtpmap:108 H264/90000\r
a=rtcp-fb:108 goog-remb\r
a=rtcp-fb:108 transport-cc\r
a=rtcp-fb:108 ccm fir\r
a=rtcp-fb:108 nack\r
a=rtcp-fb:108 nack pli\r
a=fmtp:108 level-asymmetry-allowed=1;packetization-mode=0;profile-level-id=42e01f\r
a=rtpmap:109 rtx/90000\r
a=fmtp:109 apt=108\r
a=rtpmap:127 H264/90000\r
a=rtcp-fb:127 goog-remb\r
a=rtcp-fb:127 transport-cc\r
a=rtcp-fb:127 ccm fir\r
a=rtcp-fb:127 nack\r
a=rtcp-fb:127 nack pli\r
a=fmtp:127 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=4d001f\r
a=rtpmap:125 rtx/90000\r
a=fmtp:125 apt=127\r
a=rtpmap:39 H264/90000\r
a=rtcp-fb:39 goog-remb\r
a=rtcp-fb:39 transport-cc\r
a=rtcp-fb:39 ccm fir\r
a=rtcp-fb:39 nack\r
a=rtcp-fb:39 nack pli\r
a=fmtp:39 level-asymmetry-allowed=1;packetization-mode=0;profile-level-id=4d001f\r
a=rtpmap:40 rtx/90000\r
a=fmtp:40 apt=39\r
a=rtpmap:45 AV1/90000\r
a=rtcp-fb:45 goog-remb\r
a=rtcp-fb:45 transport-cc\r
a=rtcp-fb:45 ccm fir\r
a=rtcp-fb:45 nack\r
a=rtcp-fb:45 nack pli\r
a=fmtp:45 level-idx=5;profile=0;tier=0\r
a=rtpmap:46 rtx/90000\r
a=fmtp:46 apt=45\r
a=rtpmap:112 H264/90000\r
a=rtcp-fb:112 goog-remb\r
a=rtcp-fb:112 transport-cc\r
a=rtcp-fb:112 ccm fir\r
a=rtcp-fb:112 nack\r
a=rtcp-fb:112 nack pli\r
a=fmtp:112 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=640c1f\r
a=rtpmap:113 rtx/90000\r
a=fmtp:113 apt=112\r
a=rtpmap:114 red/90000\r
a=rtpmap:115 rtx/90000\r
a=fmtp:115 apt=114\r
m=audio 9 UDP/TLS/RTP/SAVPF 111 63 9 0 8 13 110 126\r
c=IN IP4 0.0.0.0\r
a=rtcp:9 IN IP4 0.0.0.0\r
a=ice-ufrag:Kq2u\r
a=ice-pwd:ZUxUn1kGyk5ZRTQ9ZB0f4SDt\r
a=ice-options:trickle\r
a=fingerprint:sha-256 {FP}\r
a=setup:actpass\r
a=mid:1\r
a=extmap:14 urn:ietf:params:rtp-hdrext:ssrc-audio-level\r
a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time\r
a=extmap:4 http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01\r
a=extmap:9 urn:ietf:params:rtp-hdrext:sdes:mid\r
a=recvonly\r
a=rtcp-mux\r
a=rtcp-rsize\r
a=rtpmap:111 opus/48000/2\r
a=rtcp-fb:111 transport-cc\r
a=fmtp:111 minptime=10;useinbandfec=1\r
a=rtpmap:63 red/48000/2\r
a=fmtp:63 111/111\r
a=rtpmap:9 G722/8000\r
a=rtpmap:0 PCMU/8000\r
a=rtpmap:8 PCMA/8000\r
a=rtpmap:13 CN/8000\r
a=rtpmap:110 telephone-event/48000\r
a=rtpmap:126 telephone-event/8000\r
m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r
c=IN IP4 0.0.0.0\r
a=ice-ufrag:Kq2u\r
a=ice-pwd:ZUxUn1kGyk5ZRTQ9ZB0f4SDt\r
a=ice-options:trickle\r
a=fingerprint:sha-256 {FP}\r
a=setup:actpass\r
a=mid:2\r
a=sctp-port:5000\r
a=max-message-size:262144\r
"
        )
    }

    fn fp_bytes() -> [u8; 32] {
        let v: Vec<u8> = FP
            .split(':')
            .map(|h| u8::from_str_radix(h, 16).unwrap())
            .collect();
        v.try_into().unwrap()
    }

    const OUR_FP: [u8; 32] = [0xAB; 32];

    fn answer_params() -> AnswerParams<'static> {
        AnswerParams {
            ice_ufrag: "srvufrag",
            ice_pwd: "srvpasswordsrvpassword12",
            fingerprint_sha256: &OUR_FP,
            candidate_ip: IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7)),
            candidate_port: 10000,
            video_ssrc: 0x1234_5678,
            audio_ssrc: 0x9abc_def0,
            cname: "tern",
            session_id: 42,
        }
    }

    fn line_err(s: &str) -> (usize, &'static str) {
        match SessionDescription::parse(s) {
            Err(SdpError::Line { line, problem }) => (line, problem),
            other => panic!("expected a line error, got {other:?}"),
        }
    }

    #[test]
    fn parses_chrome_offer() {
        let sd = SessionDescription::parse(&chrome_offer()).unwrap();
        assert_eq!(sd.bundle(), ["0", "1", "2"]);
        assert!(!sd.ice_lite());
        let [v, a, d] = sd.media() else {
            panic!("three sections")
        };
        assert_eq!((v.kind(), v.mid(), v.port()), ("video", Some("0"), 9));
        assert_eq!(v.proto(), "UDP/TLS/RTP/SAVPF");
        assert_eq!(v.formats().len(), 23);
        assert_eq!(v.formats()[..3], [96, 97, 98]);
        assert_eq!(v.direction(), Direction::RecvOnly);
        assert_eq!(v.ice_ufrag(), Some("Kq2u"));
        assert_eq!(v.ice_pwd(), Some("ZUxUn1kGyk5ZRTQ9ZB0f4SDt"));
        let (algo, bytes) = v.fingerprint().unwrap();
        assert_eq!((algo, bytes.as_slice()), ("sha-256", &fp_bytes()[..]));
        assert_eq!(v.setup(), Some(Setup::ActPass));
        assert!(v.rtcp_mux() && v.rtcp_rsize());
        assert_eq!(v.extmap_id(ABS_CAPTURE_TIME_URI), Some(13));
        assert_eq!(v.extmaps().len(), 12);
        // The mDNS candidate is skipped.
        assert_eq!(
            v.candidates(),
            [Candidate {
                foundation: "1467250027".into(),
                component: 1,
                transport: "udp".into(),
                priority: 2_122_260_223,
                ip: "192.168.1.10".parse().unwrap(),
                port: 56143,
                typ: "host".into(),
            }]
        );
        // 115 has an rtpmap but is not on the m-line.
        assert!(v.payload(115).is_none());
        let h = v.payload(102).unwrap();
        assert_eq!(
            (h.codec.as_str(), h.clock_rate, h.channels),
            ("H264", 90000, None)
        );
        assert_eq!(h.fmtp_param("profile-level-id"), Some("42001f"));
        assert_eq!(h.fmtp_param("PACKETIZATION-MODE"), Some("1"));
        assert!(h.has_fb("nack") && h.has_fb("nack pli") && h.has_fb("ccm fir"));
        assert_eq!(h.rtcp_fb.len(), 5);
        let rtx = v.payload(97).unwrap();
        assert_eq!(rtx.fmtp.as_deref(), Some("apt=96"));

        assert_eq!((a.kind(), a.mid()), ("audio", Some("1")));
        let o = a.payload(111).unwrap();
        assert_eq!(
            (o.codec.as_str(), o.clock_rate, o.channels),
            ("opus", 48000, Some(2))
        );
        assert_eq!(a.payload(0).unwrap().codec, "PCMU");
        assert_eq!(a.extmap_id(ABS_CAPTURE_TIME_URI), None);

        assert_eq!((d.kind(), d.mid()), ("application", Some("2")));
        assert!(d.formats().is_empty());
        assert_eq!(d.fmt_tokens(), ["webrtc-datachannel"]);
    }

    #[test]
    fn negotiates_chrome_offer() {
        let sd = SessionDescription::parse(&chrome_offer()).unwrap();
        let n = negotiate(&sd).unwrap();
        assert_eq!(n.remote_ufrag, "Kq2u");
        assert_eq!(n.remote_pwd, "ZUxUn1kGyk5ZRTQ9ZB0f4SDt");
        assert_eq!(n.remote_fingerprint, fp_bytes());
        let v = n.video().unwrap();
        assert_eq!(
            v,
            &NegotiatedMedia {
                mid: "0".into(),
                index: 0,
                pt: 102,
                nack: true,
                pli: true,
                fir: true,
                abs_capture_time_ext: Some(13),
                fmtp: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42001f"
                    .into(),
            }
        );
        let a = n.audio().unwrap();
        assert_eq!((a.mid.as_str(), a.index, a.pt), ("1", 1, 111));
        assert!(!a.nack && !a.pli && !a.fir);
        assert_eq!(a.abs_capture_time_ext, None);
        assert_eq!(a.fmtp, "minptime=10;useinbandfec=1");
    }

    #[test]
    fn answer_to_chrome_offer() {
        let sd = SessionDescription::parse(&chrome_offer()).unwrap();
        let n = negotiate(&sd).unwrap();
        let p = answer_params();
        let text = write_answer(&sd, &n, &p);
        assert!(text.ends_with("\r\n"));
        assert!(text.contains("a=group:BUNDLE 0 1\r\n"));
        assert!(text.contains("a=ice-lite\r\n"));
        assert!(text.contains("m=video 9 UDP/TLS/RTP/SAVPF 102\r\n"));
        assert!(text.contains(
            "a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42001f\r\n"
        ));
        assert!(text.contains(
            "a=extmap:13 http://www.webrtc.org/experiments/rtp-hdrext/abs-capture-time\r\n"
        ));
        assert!(text.contains("m=application 0 UDP/DTLS/SCTP webrtc-datachannel\r\n"));
        assert!(text.contains("a=ssrc:305419896 cname:tern\r\n"));
        assert!(!text.contains("transport-cc"));
        let ans = SessionDescription::parse(&text).unwrap();
        assert!(ans.ice_lite());
        assert_eq!(ans.bundle(), ["0", "1"]);
        let [v, a, d] = ans.media() else {
            panic!("three sections")
        };
        assert_eq!((v.port(), v.formats(), v.mid()), (9, &[102][..], Some("0")));
        assert_eq!(v.direction(), Direction::SendOnly);
        assert_eq!(v.setup(), Some(Setup::Passive));
        assert_eq!(v.ice_ufrag(), Some("srvufrag"));
        assert_eq!(v.ice_pwd(), Some("srvpasswordsrvpassword12"));
        assert_eq!(v.fingerprint().unwrap().1.as_slice(), &OUR_FP[..]);
        assert_eq!(v.ssrcs(), [0x1234_5678]);
        assert_eq!(v.ssrc_cname(0x1234_5678), Some("tern"));
        assert_eq!(v.candidates()[0].ip, p.candidate_ip);
        assert_eq!(v.candidates()[0].port, 10000);
        assert!(v.end_of_candidates() && v.rtcp_mux());
        let vp = v.payload(102).unwrap();
        assert!(vp.has_fb("nack") && vp.has_fb("nack pli") && vp.has_fb("ccm fir"));
        assert_eq!((a.port(), a.formats()), (9, &[111][..]));
        assert_eq!(a.payload(111).unwrap().fmtp.as_deref(), Some(OPUS_FMTP));
        assert_eq!(a.ssrcs(), [0x9abc_def0]);
        assert_eq!(
            (d.port(), d.mid(), d.direction()),
            (0, Some("2"), Direction::Inactive)
        );
    }

    #[test]
    fn h264_choice_follows_the_rule() {
        let base = chrome_offer();
        // Without the 42001f mode-1 entry the constrained-baseline 42e01f one wins; Main and
        // High are skipped even when listed first.
        let sd = base
            .replace("96 97 98 99 100 101 102", "127 112 96 97 98 99 100 101")
            .replace(
                "packetization-mode=1;profile-level-id=42001f",
                "packetization-mode=0;profile-level-id=42001f",
            );
        let n = negotiate(&SessionDescription::parse(&sd).unwrap()).unwrap();
        assert_eq!(n.video().unwrap().pt, 106);
        // Level below 3.1 is refused; level 4.0 is fine.
        let low = base.replace("profile-level-id=42001f", "profile-level-id=42001e");
        let low = low.replace("profile-level-id=42e01f", "profile-level-id=42e028");
        let n = negotiate(&SessionDescription::parse(&low).unwrap()).unwrap();
        assert_eq!(n.video().unwrap().pt, 106);
        // Only High profile: video is rejected, audio still served.
        let high = base
            .replace("profile-level-id=42001f", "profile-level-id=640c1f")
            .replace("profile-level-id=42e01f", "profile-level-id=640c1f");
        let sd = SessionDescription::parse(&high).unwrap();
        let n = negotiate(&sd).unwrap();
        assert!(n.video().is_none());
        assert_eq!(n.audio().unwrap().pt, 111);
        let text = write_answer(&sd, &n, &answer_params());
        assert!(text.contains("m=video 0 UDP/TLS/RTP/SAVPF 96\r\n"));
        assert!(text.contains("a=group:BUNDLE 1\r\n"));
        let ans = SessionDescription::parse(&text).unwrap();
        assert_eq!(ans.media()[0].port(), 0);
        assert_eq!(ans.media()[0].payload(96).unwrap().codec, "VP8");
        // Missing profile-level-id is accepted.
        let p = PayloadType {
            pt: 100,
            codec: "h264".into(),
            clock_rate: 90000,
            channels: None,
            fmtp: Some("packetization-mode=1".into()),
            rtcp_fb: vec![],
        };
        assert!(h264_ok(&p));
        assert!(!h264_ok(&PayloadType {
            fmtp: Some("packetization-mode=1;profile-level-id=42zz1f".into()),
            ..p.clone()
        }));
        assert!(!h264_ok(&PayloadType { fmtp: None, ..p }));
    }

    #[test]
    fn negotiate_errors_name_the_problem() {
        let base = chrome_offer();
        let e = |s: String| negotiate(&SessionDescription::parse(&s).unwrap()).unwrap_err();
        let no_ufrag = base.replace("a=ice-ufrag:Kq2u\r\n", "");
        assert_eq!(e(no_ufrag).to_string(), "offer has no a=ice-ufrag");
        let no_pwd = base.replace("a=ice-pwd:ZUxUn1kGyk5ZRTQ9ZB0f4SDt\r\n", "");
        assert_eq!(e(no_pwd), NegotiateError::NoIcePwd);
        let no_fp = base.replace(&format!("a=fingerprint:sha-256 {FP}\r\n"), "");
        assert_eq!(e(no_fp).to_string(), "offer has no sha-256 a=fingerprint");
        let sha1 = base.replace("sha-256 A1:B2:C3:D4", "sha-1 A1:B2:C3:D4");
        assert_eq!(e(sha1), NegotiateError::NoFingerprint);
        let no_mux = base.replace("a=rtcp-mux\r\n", "");
        assert_eq!(e(no_mux), NegotiateError::NoRtcpMux);
        let passive = base.replace("a=setup:actpass", "a=setup:passive");
        assert_eq!(e(passive), NegotiateError::Setup);
        let sendonly = base.replace("a=recvonly", "a=sendonly");
        assert_eq!(
            e(sendonly).to_string(),
            "offer's media must be recvonly or sendrecv"
        );
        let no_codec = base
            .replace("H264/90000", "H265/90000")
            .replace("opus/48000/2", "opus/48000/1");
        assert_eq!(
            e(no_codec).to_string(),
            "offer has no H264 packetization-mode=1 or Opus payload"
        );
        let data_only = "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\na=mid:0\r\n";
        assert_eq!(e(data_only.into()), NegotiateError::NoCodec);
    }

    #[test]
    fn session_level_attributes_are_inherited() {
        let s = format!(
            "v=0\no=- 1 1 IN IP4 0.0.0.0\ns=-\nt=0 0\na=ice-ufrag:sess\na=ice-pwd:sesspasswordsesspassword\n\
             a=fingerprint:sha-256 {FP}\na=setup:active\na=recvonly\n\
             a=extmap:5 {ABS_CAPTURE_TIME_URI}\n\
             m=video 9 UDP/TLS/RTP/SAVPF 100\na=rtcp-mux\na=rtpmap:100 H264/90000\n\
             a=fmtp:100 packetization-mode=1;profile-level-id=42e01f\na=rtcp-fb:* nack\n\
             m=audio 9 UDP/TLS/RTP/SAVPF 111\na=ice-ufrag:override\na=rtcp-mux\na=sendrecv\n\
             a=fingerprint:sha-1 00:11\na=fingerprint:sha-256 AA:BB\n\
             a=extmap:1 urn:ietf:params:rtp-hdrext:ssrc-audio-level\n\
             a=rtpmap:111 OPUS/48000/2\n"
        );
        let sd = SessionDescription::parse(&s).unwrap();
        assert_eq!(sd.ice_ufrag(), Some("sess"));
        let [v, a] = sd.media() else { panic!() };
        assert_eq!(v.ice_ufrag(), Some("sess"));
        assert_eq!(a.ice_ufrag(), Some("override"));
        assert_eq!(a.ice_pwd(), Some("sesspasswordsesspassword"));
        assert_eq!(v.direction(), Direction::RecvOnly);
        assert_eq!(a.direction(), Direction::SendRecv);
        assert_eq!(v.setup(), Some(Setup::Active));
        assert_eq!(v.fingerprint().unwrap().1.as_slice(), &fp_bytes()[..]);
        assert_eq!(a.fingerprint().unwrap().1.as_slice(), &[0xAA, 0xBB][..]);
        assert_eq!(sd.fingerprint().unwrap().1.as_slice(), &fp_bytes()[..]);
        assert_eq!(v.extmap_id(ABS_CAPTURE_TIME_URI), Some(5));
        assert_eq!(a.extmap_id(ABS_CAPTURE_TIME_URI), None);
        assert!(v.payload(100).unwrap().has_fb("nack"));
        // No mids, no BUNDLE: only the first usable section is accepted.
        let n = negotiate(&sd).unwrap();
        assert_eq!(n.video().unwrap().pt, 100);
        assert!(n.video().unwrap().nack && !n.video().unwrap().pli);
        assert_eq!(n.video().unwrap().abs_capture_time_ext, Some(5));
        assert!(n.audio().is_none());
        let text = write_answer(&sd, &n, &answer_params());
        assert!(!text.contains("a=group:BUNDLE"));
        assert!(!text.contains("a=mid:"));
        let ans = SessionDescription::parse(&text).unwrap();
        assert_eq!(ans.media()[0].port(), 9);
        assert_eq!(ans.media()[1].port(), 0);
    }

    #[test]
    fn parse_errors_name_the_line() {
        assert_eq!(line_err("v=1\r\n"), (1, "first line must be v=0"));
        assert_eq!(
            line_err("\n\no=- 1 1 IN IP4 0.0.0.0\n"),
            (3, "first line must be v=0")
        );
        assert_eq!(SessionDescription::parse(""), Err(SdpError::Empty));
        assert_eq!(SessionDescription::parse("\r\n\r\n"), Err(SdpError::Empty));
        let head = "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n";
        let cases: &[(&str, &str)] = &[
            ("m=video", "m= line has no port"),
            (
                "m=video x UDP/TLS/RTP/SAVPF 96",
                "m= line port is not a number from 0 to 65535",
            ),
            ("m=video 9", "m= line has no transport protocol"),
            ("m=video 9 UDP/TLS/RTP/SAVPF", "m= line has no formats"),
            (
                "m=video 9 UDP/TLS/RTP/SAVPF 96 200",
                "m= line payload type is not a number from 0 to 127",
            ),
            ("this is not sdp", "not a <letter>=<value> line"),
            ("A=b", "not a <letter>=<value> line"),
            (
                "a=fingerprint:sha-256 zz:11",
                "a=fingerprint is not '<hash> <hex>:<hex>:...'",
            ),
            (
                "a=setup:sideways",
                "a=setup is not actpass, active, passive or holdconn",
            ),
            (
                "a=ice-ufrag:has:colon",
                "a=ice-ufrag/a=ice-pwd must be 1-256 visible ASCII characters (no ':' in a ufrag)",
            ),
            (
                "a=ice-pwd:",
                "a=ice-ufrag/a=ice-pwd must be 1-256 visible ASCII characters (no ':' in a ufrag)",
            ),
            ("a=extmap:x urn:foo", "a=extmap id is not a number"),
            ("v=0", "second v= line"),
            ("a=mid:bad\u{7}", "line contains a control character"),
        ];
        for (line, problem) in cases {
            assert_eq!(
                line_err(&format!("{head}{line}\r\n")),
                (5, *problem),
                "{line}"
            );
        }
        let media = "m=video 9 UDP/TLS/RTP/SAVPF 96\r\n";
        let cases: &[(&str, &str)] = &[
            (
                "a=rtpmap:96",
                "a=rtpmap is not '<pt> <codec>/<clock>[/<channels>]'",
            ),
            (
                "a=rtpmap:96 H264",
                "a=rtpmap is not '<pt> <codec>/<clock>[/<channels>]'",
            ),
            (
                "a=rtpmap:96 H264/x",
                "a=rtpmap is not '<pt> <codec>/<clock>[/<channels>]'",
            ),
            (
                "a=rtpmap:300 H264/90000",
                "a=rtpmap is not '<pt> <codec>/<clock>[/<channels>]'",
            ),
            (
                "a=rtpmap:96 opus/48000/2/1",
                "a=rtpmap is not '<pt> <codec>/<clock>[/<channels>]'",
            ),
            ("a=fmtp:abc x=1", "a=fmtp is not '<pt> <parameters>'"),
            ("a=rtcp-fb:96", "a=rtcp-fb is not '<pt|*> <type> [<param>]'"),
            (
                "a=ssrc:-1 cname:x",
                "a=ssrc is not '<ssrc> <attribute>[:<value>]'",
            ),
            ("a=mid:", "a=mid must be 1-64 visible ASCII characters"),
            (
                "a=candidate:1 1 udp 5 1.2.3.4 99999 typ host",
                "a=candidate is not '<foundation> <component> <transport> <priority> <address> <port> typ <type>'",
            ),
            (
                "a=candidate:1 1 udp 5 1.2.3.4 9 host",
                "a=candidate is not '<foundation> <component> <transport> <priority> <address> <port> typ <type>'",
            ),
        ];
        for (line, problem) in cases {
            assert_eq!(
                line_err(&format!("{head}{media}{line}\n")),
                (6, *problem),
                "{line}"
            );
        }
        let many = format!("{head}{}", media.repeat(17));
        assert_eq!(line_err(&many), (21, "more than 16 m= sections"));
        assert!(SessionDescription::parse(&format!("{head}{}", media.repeat(16))).is_ok());
        let big = format!(
            "{head}{}",
            "a=x:yyyyyyyyyyyyyyyyyyyyyyyyyyy\r\n".repeat(3000)
        );
        assert_eq!(
            SessionDescription::parse(&big),
            Err(SdpError::TooLong(big.len()))
        );
        assert_eq!(
            SdpError::Line {
                line: 7,
                problem: "m= line has no port"
            }
            .to_string(),
            "line 7: m= line has no port"
        );
    }

    #[test]
    fn lenient_where_it_costs_nothing() {
        // LF line ends, trailing spaces, a BOM, unknown lines and attributes, blank lines.
        let s = "\u{feff}v=0\no=- 1 1 IN IP4 0.0.0.0 \ns=-\n\nt=0 0\nz=whatever\n\
                 a=unknown-thing:1 2 3\nm=audio 9 UDP/TLS/RTP/SAVPF 111 \na=weird\n";
        let sd = SessionDescription::parse(s).unwrap();
        assert_eq!(sd.media()[0].formats(), [111]);
        // Duplicate payload types on the m-line are listed once.
        let s = "v=0\nm=video 9 RTP/SAVPF 96 96 97\n";
        assert_eq!(
            SessionDescription::parse(s).unwrap().media()[0].formats(),
            [96, 97]
        );
    }

    #[test]
    fn offer_answer_round_trip() {
        let client_fp = [7u8; 32];
        for (video, audio, abs) in [
            (true, true, true),
            (true, false, false),
            (false, true, true),
        ] {
            let offer = write_offer(&OfferParams {
                ice_ufrag: "cliu",
                ice_pwd: "clientpasswordclientpwd1",
                fingerprint_sha256: &client_fp,
                video,
                audio,
                abs_capture_time: abs,
            });
            let sd = SessionDescription::parse(&offer).unwrap();
            assert_eq!(sd.media().len(), usize::from(video) + usize::from(audio));
            let n = negotiate(&sd).unwrap();
            assert_eq!(n.remote_ufrag, "cliu");
            assert_eq!(n.remote_pwd, "clientpasswordclientpwd1");
            assert_eq!(n.remote_fingerprint, client_fp);
            assert_eq!(n.video().is_some(), video);
            assert_eq!(n.audio().is_some(), audio);
            if let Some(v) = n.video() {
                assert_eq!((v.pt, v.nack, v.pli, v.fir), (96, true, true, true));
                assert_eq!(v.abs_capture_time_ext, abs.then_some(4));
                assert_eq!(v.mid, "0");
            }
            if let Some(a) = n.audio() {
                assert_eq!(a.pt, 111);
                assert_eq!(a.mid, if video { "1" } else { "0" });
            }
            let p = answer_params();
            let text = write_answer(&sd, &n, &p);
            let ans = SessionDescription::parse(&text).unwrap();
            assert_eq!(ans.media().len(), sd.media().len());
            for (m, o) in ans.media().iter().zip(sd.media()) {
                assert_eq!(m.port(), 9);
                assert_eq!(m.kind(), o.kind());
                assert_eq!(m.mid(), o.mid());
                assert_eq!(m.ice_ufrag(), Some(p.ice_ufrag));
                assert_eq!(m.ice_pwd(), Some(p.ice_pwd));
                assert_eq!(m.fingerprint().unwrap().1.as_slice(), &OUR_FP[..]);
                assert_eq!(m.setup(), Some(Setup::Passive));
                assert_eq!(m.direction(), Direction::SendOnly);
                assert_eq!(m.formats(), o.formats());
                assert_eq!(m.extmap_id(ABS_CAPTURE_TIME_URI), abs.then_some(4));
                assert_eq!(
                    m.candidates()[0],
                    Candidate {
                        foundation: "1".into(),
                        component: 1,
                        transport: "udp".into(),
                        priority: 2_130_706_431,
                        ip: p.candidate_ip,
                        port: 10000,
                        typ: "host".into(),
                    }
                );
                let ssrc = if m.kind() == "video" {
                    p.video_ssrc
                } else {
                    p.audio_ssrc
                };
                assert_eq!(m.ssrcs(), [ssrc]);
            }
            assert_eq!(ans.bundle(), sd.bundle());
        }
        // No media at all.
        let offer = write_offer(&OfferParams {
            ice_ufrag: "cliu",
            ice_pwd: "clientpasswordclientpwd1",
            fingerprint_sha256: &client_fp,
            video: false,
            audio: false,
            abs_capture_time: false,
        });
        let sd = SessionDescription::parse(&offer).unwrap();
        assert_eq!(negotiate(&sd), Err(NegotiateError::NoCodec));
    }

    #[test]
    fn ipv6_candidates() {
        let s = "v=0\nm=audio 9 UDP/TLS/RTP/SAVPF 111\n\
                 a=candidate:2 1 UDP 1686052607 2001:db8::5 40000 typ srflx raddr :: rport 0\n";
        let sd = SessionDescription::parse(s).unwrap();
        let c = &sd.media()[0].candidates()[0];
        assert_eq!(c.ip, "2001:db8::5".parse::<IpAddr>().unwrap());
        assert_eq!((c.transport.as_str(), c.typ.as_str()), ("UDP", "srflx"));
        let mut p = answer_params();
        p.candidate_ip = "2001:db8::1".parse().unwrap();
        let offer = write_offer(&OfferParams {
            ice_ufrag: "cliu",
            ice_pwd: "clientpasswordclientpwd1",
            fingerprint_sha256: &[1; 32],
            video: true,
            audio: false,
            abs_capture_time: false,
        });
        let sd = SessionDescription::parse(&offer).unwrap();
        let text = write_answer(&sd, &negotiate(&sd).unwrap(), &p);
        let ans = SessionDescription::parse(&text).unwrap();
        assert_eq!(ans.media()[0].candidates()[0].ip, p.candidate_ip);
    }

    #[test]
    fn sdpfrag_parse() {
        // The RFC 9725 (WHIP/WHEP) style PATCH body.
        let body = "a=ice-options:trickle ice2\r\n\
                    m=audio 9 RTP/AVP 0\r\n\
                    a=mid:0\r\n\
                    a=ice-ufrag:EsAw\r\n\
                    a=ice-pwd:P2uYro0UCOQ4zxjKXaWCBui1\r\n\
                    a=candidate:1387637174 1 udp 2122260223 192.0.2.1 61764 typ host generation 0 ufrag EsAw network-id 1\r\n\
                    a=candidate:3471623853 1 udp 2122194687 198.51.100.2 61765 typ host generation 0 ufrag EsAw network-id 2\r\n\
                    a=candidate:473322822 1 tcp 1518280447 192.0.2.1 9 typ host tcptype active generation 0 ufrag EsAw network-id 1\r\n\
                    a=candidate:9 1 udp 1 abcdef.local 5 typ host\r\n\
                    a=end-of-candidates\r\n";
        let f = parse_sdpfrag(body).unwrap();
        assert_eq!(f.ice_ufrag.as_deref(), Some("EsAw"));
        assert_eq!(f.ice_pwd.as_deref(), Some("P2uYro0UCOQ4zxjKXaWCBui1"));
        assert_eq!(f.mids, ["0"]);
        assert_eq!(f.candidates.len(), 3);
        assert_eq!(f.candidates[2].transport, "tcp");
        assert_eq!(f.candidates[1].port, 61765);
        assert!(f.end_of_candidates);
        // Session-level credentials (an ICE restart) and LF line ends.
        let f = parse_sdpfrag("a=ice-ufrag:new1\na=ice-pwd:newpasswordnewpassword1\nm=video 9 UDP/TLS/RTP/SAVPF 0\na=mid:v\n").unwrap();
        assert_eq!(f.ice_ufrag.as_deref(), Some("new1"));
        assert_eq!(f.mids, ["v"]);
        assert!(f.candidates.is_empty() && !f.end_of_candidates);
        assert_eq!(parse_sdpfrag(""), Ok(SdpFrag::default()));
        // Errors carry line numbers too.
        assert_eq!(
            parse_sdpfrag("a=mid:0\na=candidate:1 1 udp\n"),
            Err(SdpError::Line {
                line: 2,
                problem: "a=candidate is not '<foundation> <component> <transport> <priority> <address> <port> typ <type>'"
            })
        );
        assert!(matches!(
            parse_sdpfrag("garbage"),
            Err(SdpError::Line { line: 1, .. })
        ));
        let many = "m=audio 9 RTP/AVP 0\n".repeat(17);
        assert!(matches!(
            parse_sdpfrag(&many),
            Err(SdpError::Line { line: 17, .. })
        ));
        let big = "a=x\n".repeat(20_000);
        assert!(matches!(parse_sdpfrag(&big), Err(SdpError::TooLong(_))));
    }

    /// xorshift64*, so the test needs no rand crate and replays from its seed.
    fn xorshift(s: &mut u64) -> u64 {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        s.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn exercise(s: &str) {
        if let Ok(sd) = SessionDescription::parse(s) {
            for m in sd.media() {
                let _ = (
                    m.kind(),
                    m.port(),
                    m.proto(),
                    m.formats(),
                    m.mid(),
                    m.payloads(),
                );
                let _ = (
                    m.ice_ufrag(),
                    m.ice_pwd(),
                    m.fingerprint(),
                    m.setup(),
                    m.direction(),
                );
                let _ = (m.candidates(), m.ssrcs(), m.extmaps(), m.rtcp_mux());
                let _ = m.extmap_id(ABS_CAPTURE_TIME_URI);
            }
            if let Ok(n) = negotiate(&sd) {
                let text = write_answer(&sd, &n, &answer_params());
                // Whatever we write, we can read back.
                let ans = SessionDescription::parse(&text).unwrap();
                assert_eq!(ans.media().len(), sd.media().len());
            }
        }
        let _ = parse_sdpfrag(s);
    }

    #[test]
    fn random_input_never_panics() {
        let mut seed = 0x0123_4567_89AB_CDEFu64;
        let offer = chrome_offer();
        let lines: Vec<&str> = offer.lines().collect();
        let alphabet = b"v=0amoc:/ \r\n9612RTP/SAVPFH264opus-.;=*\xff";
        let mut negotiated = 0;
        for round in 0..3000 {
            let s = match round % 3 {
                // Line-level mutations of the Chrome offer: drop, duplicate, swap.
                0 => {
                    let mut ls = lines.clone();
                    for _ in 0..1 + xorshift(&mut seed) % 4 {
                        let i = (xorshift(&mut seed) % ls.len() as u64) as usize;
                        let j = (xorshift(&mut seed) % ls.len() as u64) as usize;
                        match xorshift(&mut seed) % 3 {
                            0 if ls.len() > 1 => {
                                ls.remove(i);
                            }
                            1 => ls.insert(i, ls[j]),
                            _ => ls.swap(i, j),
                        }
                    }
                    ls.join("\r\n")
                }
                // Byte-level mutations.
                1 => {
                    let mut b = offer.clone().into_bytes();
                    for _ in 0..1 + xorshift(&mut seed) % 8 {
                        let i = (xorshift(&mut seed) % b.len() as u64) as usize;
                        b[i] = alphabet[(xorshift(&mut seed) % alphabet.len() as u64) as usize];
                    }
                    String::from_utf8_lossy(&b).into_owned()
                }
                // Random text from a small alphabet.
                _ => {
                    let len = (xorshift(&mut seed) % 400) as usize;
                    let b: Vec<u8> = (0..len)
                        .map(|_| alphabet[(xorshift(&mut seed) % alphabet.len() as u64) as usize])
                        .collect();
                    format!("v=0\n{}", String::from_utf8_lossy(&b))
                }
            };
            if SessionDescription::parse(&s).is_ok_and(|sd| negotiate(&sd).is_ok()) {
                negotiated += 1;
            }
            exercise(&s);
        }
        assert!(
            negotiated > 200,
            "only {negotiated} mutated offers negotiated"
        );
    }
}

//! The SDP data model: sessions, media sections and their attributes, with the accessors
//! that give each media section its effective values (session-level attributes inherited),
//! and the errors of parsing.

use std::net::IpAddr;

/// URI of the absolute capture time RTP header extension.
pub const ABS_CAPTURE_TIME_URI: &str =
    "http://www.webrtc.org/experiments/rtp-hdrext/abs-capture-time";
/// URI of the transport-wide sequence number RTP header extension
/// (draft-holmer-rmcat-transport-wide-cc-extensions-01).
pub const TRANSPORT_CC_URI: &str =
    "http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01";
/// URI of the absolute send time RTP header extension, which a receiver that estimates
/// its path itself reads to send REMB.
pub const ABS_SEND_TIME_URI: &str = "http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time";
/// Largest SDP body accepted (64 KiB); a browser offer is 4–8 KiB.
pub const MAX_SDP_LEN: usize = 64 * 1024;
/// Most media sections accepted; a WHEP offer has two or three.
pub const MAX_MEDIA: usize = 16;
/// Longest `a=mid` value accepted (RFC 8843 leaves it open; browsers use 1–3 characters).
pub(super) const MAX_MID_LEN: usize = 64;
/// Longest ICE ufrag or password (RFC 8839 §5.4).
pub(super) const MAX_ICE_LEN: usize = 256;

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

pub(super) fn err<T>(line: usize, problem: &'static str) -> Result<T, SdpError> {
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
    pub(super) fn from_attr(name: &str) -> Option<Self> {
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
pub(super) struct Shared {
    pub(super) ice_ufrag: Option<String>,
    pub(super) ice_pwd: Option<String>,
    pub(super) fingerprint: Option<(String, Vec<u8>)>,
    pub(super) setup: Option<Setup>,
    pub(super) direction: Option<Direction>,
    pub(super) extmaps: Vec<Extmap>,
}

/// One media section (`m=` line and its attributes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaDescription {
    pub(super) kind: String,
    pub(super) port: u16,
    pub(super) proto: String,
    pub(super) fmt: Vec<String>,
    pub(super) formats: Vec<u8>,
    pub(super) mid: Option<String>,
    pub(super) payloads: Vec<PayloadType>,
    pub(super) shared: Shared,
    pub(super) rtcp_mux: bool,
    /// `a=bundle-only` (RFC 8843 §6): port 0 in an offer, yet to be accepted into the
    /// BUNDLE group it names.
    pub(super) bundle_only: bool,
    pub(super) rtcp_rsize: bool,
    pub(super) candidates: Vec<Candidate>,
    pub(super) end_of_candidates: bool,
    pub(super) ssrcs: Vec<u32>,
    pub(super) cnames: Vec<(u32, String)>,
    /// RIDs of `a=simulcast:send` (RFC 8853), first alternative of each stream, in order.
    pub(super) simulcast_send: Vec<String>,
}

impl MediaDescription {
    /// The RIDs an offerer will send as simulcast (`a=simulcast:send`, RFC 8853 §5.1): one
    /// per simulcast stream, its first alternative, paused ones (`~`) included, in the
    /// order given. Empty without the attribute.
    pub fn simulcast_send(&self) -> &[String] {
        &self.simulcast_send
    }

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

    /// Whether `a=bundle-only` is present (RFC 8843 §6).
    pub fn bundle_only(&self) -> bool {
        self.bundle_only
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
    pub(super) media: Vec<MediaDescription>,
    pub(super) bundle: Vec<String>,
    pub(super) ice_lite: bool,
    pub(super) shared: Shared,
}
impl SessionDescription {
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

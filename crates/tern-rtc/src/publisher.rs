//! The WHIP publisher session: a full WebRTC peer (str0m) on the server side.
//!
//! Viewers are many and get the lean hand-written session of [`crate::viewer`]; publishers
//! are few (one per stream) and need the whole of WebRTC: jitter and reordering on the
//! receive side, NACKs to the publisher, RTCP reports, keyframe requests, whatever encoder
//! quirks browsers and OBS have. str0m does all of that well, so it is used here as is, in
//! RTP mode (packets come out as they arrive, already reassembled from RTX).
//!
//! Sans-IO like the rest of this crate: every call takes `now`; datagrams go in through
//! [`Publisher::handle_input`] and come out of [`Publisher::poll`].

use crate::publisher_dtls::PublisherDtls;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use str0m::change::SdpOffer;
use str0m::media::KeyframeRequestKind;
use str0m::net::{Protocol, Receive};
use str0m::rtp::{Extension, Ssrc};
use str0m::{Candidate, Event, IceConnectionState, Input, Output, Rtc, RtcConfig};
use tern_proto::codec::{MediaKind, VideoCodec};
use tern_proto::rtp::ntp_from_unix;
use tern_proto::sdp;

use crate::stream::MAX_LAYERS;

/// Why an offer was refused.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The offer is not SDP str0m can read.
    #[error("malformed SDP offer: {0}")]
    BadOffer(String),
    /// The offer has nothing we can forward.
    #[error("offer has no video and no audio to receive")]
    NoMedia,
    /// A media section offers only codecs tern does not take.
    #[error("offer's {kind} section has {offered}; tern takes {takes}")]
    Unsupported {
        /// `video` or `audio`.
        kind: String,
        /// The codecs offered there, e.g. `VP8, VP9`.
        offered: String,
        /// What tern takes for that kind.
        takes: &'static str,
    },
    /// The offer's simulcast is more than tern forwards.
    #[error("offer's a=simulcast has {0}; tern takes 2 or 3 layers with RIDs of 1-8 characters")]
    Simulcast(String),
    /// str0m refused the offer.
    #[error("cannot accept the offer: {0}")]
    Rejected(String),
}

/// A media packet from the publisher.
#[derive(Debug, Clone)]
pub struct IngestPacket {
    /// Video or audio.
    pub kind: MediaKind,
    /// Simulcast layer of a video packet: its RID's index in the offer's `a=simulcast`
    /// (0 without simulcast, and for audio).
    pub layer: u8,
    /// Extended sequence number (publisher's numbering, per layer).
    pub seq: u64,
    /// Extended RTP timestamp (publisher's clock base).
    pub rtp_ts: u64,
    /// RTP marker bit.
    pub marker: bool,
    /// RTP payload.
    pub payload: Arc<[u8]>,
    /// Capture time as NTP, when the publisher told us (abs-capture-time or its SR).
    pub capture_ntp: Option<u64>,
}

/// What a publisher session produces.
#[derive(Debug)]
pub enum PublisherEvent {
    /// A datagram to send.
    Transmit(SocketAddr, Vec<u8>),
    /// A media packet.
    Packet(IngestPacket),
    /// ICE and DTLS are up.
    Connected,
    /// The session ended (ICE disconnected for good, DTLS closed, or an error).
    Closed,
}

/// One WHIP publisher.
pub struct Publisher {
    rtc: Rtc,
    /// The encoder's offer, kept to restart ICE: a restart is this offer again with the
    /// encoder's new credentials (what a full re-offer would say; WHIP sends only those).
    offer: String,
    /// The encoder's ICE ufrag (a PATCH with another one is an ICE restart).
    remote_ufrag: String,
    ufrag: String,
    /// Our host candidates (one per configured address, one port); a datagram is handed to
    /// str0m as arriving on the one of its sender's family.
    locals: Vec<SocketAddr>,
    video_pts: Vec<u8>,
    audio_pts: Vec<u8>,
    /// The codec of the video it sends (H264 when it sends none).
    video_codec: VideoCodec,
    /// The RIDs of the video's simulcast layers, in the offer's order (empty without).
    rids: Vec<Box<str>>,
    /// The SSRC each video layer was last seen on (index: layer).
    video_ssrcs: [Option<Ssrc>; MAX_LAYERS],
    closed: bool,
}

/// What tern takes in a publisher's video section, for the refusal's message.
const VIDEO_TAKES: &str =
    "H264 (packetization-mode=1), VP8, VP9 (profile 0), AV1 (profile 0), H265";

/// Picks the video codec of a WHIP offer (the first of [`VideoCodec::ALL`] its video
/// section carries; `None` without a video section) and refuses an offer whose video or
/// audio section offers nothing tern takes (see [`sdp::carries`]; Opus), naming what it
/// offers: accepting the rest would leave a stream without its video (or audio), and
/// str0m's answer to such a section is one browsers reject.
fn check_codecs(offer: &sdp::SessionDescription) -> Result<Option<VideoCodec>, PublishError> {
    let mut video = None;
    for m in offer.media() {
        if m.port() == 0 {
            continue;
        }
        let (takes, ok) = match m.kind() {
            "video" => {
                let codec = VideoCodec::ALL
                    .into_iter()
                    .find(|&c| m.payloads().iter().any(|p| sdp::carries(c, p)));
                video = video.or(codec);
                (VIDEO_TAKES, codec.is_some())
            }
            "audio" => (
                "Opus",
                m.payloads()
                    .iter()
                    .any(|p| p.codec.eq_ignore_ascii_case("opus")),
            ),
            _ => continue,
        };
        if ok {
            continue;
        }
        let mut offered: Vec<String> = Vec::new();
        for p in m.payloads() {
            let name = if p.codec.eq_ignore_ascii_case("H264") {
                format!(
                    "H264 (packetization-mode={})",
                    p.fmtp_param("packetization-mode").unwrap_or("0")
                )
            } else {
                p.codec.clone()
            };
            let repair = ["rtx", "red", "ulpfec", "flexfec-03"];
            if !repair.iter().any(|r| name.eq_ignore_ascii_case(r)) && !offered.contains(&name) {
                offered.push(name);
            }
        }
        let offered = if offered.is_empty() {
            "no codec".to_string()
        } else {
            offered.join(", ")
        };
        return Err(PublishError::Unsupported {
            kind: m.kind().to_string(),
            offered,
            takes,
        });
    }
    Ok(video)
}

/// The RIDs of the offer's video simulcast (`a=simulcast:send`), in layer order: none, or
/// 2 to [`MAX_LAYERS`] of at most 8 characters (str0m's RID).
fn simulcast_rids(offer: &sdp::SessionDescription) -> Result<Vec<Box<str>>, PublishError> {
    let Some(m) = offer
        .media()
        .iter()
        .find(|m| m.port() != 0 && m.kind() == "video")
    else {
        return Ok(Vec::new());
    };
    let rids = m.simulcast_send();
    if rids.len() > MAX_LAYERS || rids.iter().any(|r| r.len() > 8) {
        return Err(PublishError::Simulcast(format!(
            "{} layers ({})",
            rids.len(),
            rids.join(";")
        )));
    }
    Ok(rids.iter().map(|r| r.as_str().into()).collect())
}

/// `offer` with every `a=ice-ufrag` and `a=ice-pwd` value replaced.
fn replace_ice_credentials(offer: &str, ufrag: &str, pwd: &str) -> String {
    let mut out = String::with_capacity(offer.len() + 64);
    for line in offer.split_inclusive('\n') {
        let body = line.trim_end_matches(['\r', '\n']);
        if body.starts_with("a=ice-ufrag:") {
            out.push_str("a=ice-ufrag:");
            out.push_str(ufrag);
            out.push_str("\r\n");
        } else if body.starts_with("a=ice-pwd:") {
            out.push_str("a=ice-pwd:");
            out.push_str(pwd);
            out.push_str("\r\n");
        } else {
            out.push_str(line);
        }
    }
    out
}

fn ntp_of(t: SystemTime) -> u64 {
    ntp_from_unix(t.duration_since(UNIX_EPOCH).unwrap_or_default())
}

impl Publisher {
    /// Accepts a WHIP offer; returns the session and the SDP answer. `locals` are the media
    /// addresses announced as host candidates, most preferred first (the datagrams arrive on
    /// them); at least one.
    ///
    /// `dtls` carries the SRTP profile preference ([`PublisherDtls`]).
    pub fn accept(
        offer: &str,
        locals: &[SocketAddr],
        now: Instant,
        dtls: &PublisherDtls,
    ) -> Result<(Publisher, String), PublishError> {
        // Check what is offered with our own parser first: a clear error beats str0m's.
        let parsed = sdp::SessionDescription::parse(offer)
            .map_err(|e| PublishError::BadOffer(e.to_string()))?;
        let has_media = parsed
            .media()
            .iter()
            .any(|m| m.port() != 0 && matches!(m.kind(), "video" | "audio"));
        if !has_media {
            return Err(PublishError::NoMedia);
        }
        let video_codec = check_codecs(&parsed)?;
        let rids = simulcast_rids(&parsed)?;
        let remote_ufrag = parsed
            .media()
            .iter()
            .find_map(|m| m.ice_ufrag())
            .unwrap_or_default()
            .to_string();
        let remote_offer = offer.to_string();
        let offer =
            SdpOffer::from_sdp_string(offer).map_err(|e| PublishError::BadOffer(e.to_string()))?;
        // Only the chosen video codec: the answer then has no other, so the encoder sends
        // that one (it sends with the first payload type the answer lists).
        let is = |c| video_codec == Some(c);
        let mut rtc = RtcConfig::new()
            .set_crypto_provider(dtls.provider())
            .set_ice_lite(true)
            .set_rtp_mode(true)
            .clear_codecs()
            .enable_h264(is(VideoCodec::H264))
            .enable_vp8(is(VideoCodec::Vp8))
            .enable_vp9(is(VideoCodec::Vp9))
            .enable_av1(is(VideoCodec::Av1))
            .enable_h265(is(VideoCodec::H265))
            .enable_opus(true, false)
            .set_extension(15, Extension::AbsoluteCaptureTime)
            .set_stats_interval(None)
            .build(now);
        if locals.is_empty() {
            return Err(PublishError::Rejected("no local candidate address".into()));
        }
        for &local in locals {
            let cand =
                Candidate::host(local, "udp").map_err(|e| PublishError::Rejected(e.to_string()))?;
            rtc.add_local_candidate(cand);
        }
        let answer = rtc
            .sdp_api()
            .accept_offer(offer)
            .map_err(|e| PublishError::Rejected(e.to_string()))?;
        let answer = answer.to_sdp_string();
        // Payload types and our ufrag, read back from the answer.
        let parsed = sdp::SessionDescription::parse(&answer)
            .map_err(|e| PublishError::Rejected(format!("own answer: {e}")))?;
        let mut video_pts = Vec::new();
        let mut audio_pts = Vec::new();
        let mut ufrag = None;
        for m in parsed.media() {
            if m.port() == 0 {
                continue;
            }
            ufrag = ufrag.or_else(|| m.ice_ufrag().map(str::to_string));
            match m.kind() {
                "video" => video_pts.extend(m.formats()),
                "audio" => audio_pts.extend(m.formats()),
                _ => {}
            }
        }
        if video_pts.is_empty() && audio_pts.is_empty() {
            return Err(PublishError::NoMedia);
        }
        let ufrag = ufrag.ok_or_else(|| PublishError::Rejected("answer without ufrag".into()))?;
        Ok((
            Publisher {
                rtc,
                offer: remote_offer,
                remote_ufrag,
                ufrag,
                locals: locals.to_vec(),
                video_pts,
                audio_pts,
                video_codec: video_codec.unwrap_or_default(),
                rids,
                video_ssrcs: [None; MAX_LAYERS],
                closed: false,
            },
            answer,
        ))
    }

    /// The codec of the video the encoder sends (H264 when it sends no video).
    pub fn video_codec(&self) -> VideoCodec {
        self.video_codec
    }

    /// Whether the encoder sends video (its offer has a video section we answered).
    pub fn has_video(&self) -> bool {
        !self.video_pts.is_empty()
    }

    /// The RIDs of the video's simulcast layers in layer order (empty without simulcast).
    pub fn rids(&self) -> &[Box<str>] {
        &self.rids
    }

    /// Our ICE ufrag (STUN `USERNAME` starts with it).
    pub fn local_ufrag(&self) -> &str {
        &self.ufrag
    }

    /// ICE restart (RFC 9725 §4.3.2): the encoder's new `ufrag` and `pwd` are put in its
    /// offer in place of the old ones and the offer is accepted again, which restarts ICE in
    /// str0m with new local credentials; DTLS and the media streams stay as they are.
    /// Returns the new local ufrag and password.
    pub fn restart_ice(
        &mut self,
        ufrag: &str,
        pwd: &str,
    ) -> Result<(String, String), PublishError> {
        let valid = |s: &str, min: usize| {
            (min..=256).contains(&s.len())
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
        };
        if !valid(ufrag, 4) || !valid(pwd, 22) {
            return Err(PublishError::BadOffer(
                "ICE restart needs an ice-ufrag of 4-256 and an ice-pwd of 22-256 ice-chars".into(),
            ));
        }
        let offer = replace_ice_credentials(&self.offer, ufrag, pwd);
        let sdp =
            SdpOffer::from_sdp_string(&offer).map_err(|e| PublishError::BadOffer(e.to_string()))?;
        let answer = self
            .rtc
            .sdp_api()
            .accept_offer(sdp)
            .map_err(|e| PublishError::Rejected(e.to_string()))?
            .to_sdp_string();
        let parsed = sdp::SessionDescription::parse(&answer)
            .map_err(|e| PublishError::Rejected(format!("own answer: {e}")))?;
        let m = parsed
            .media()
            .iter()
            .find(|m| m.port() != 0)
            .ok_or_else(|| PublishError::Rejected("answer without media".into()))?;
        let (Some(new_ufrag), Some(new_pwd)) = (m.ice_ufrag(), m.ice_pwd()) else {
            return Err(PublishError::Rejected(
                "answer without ICE credentials".into(),
            ));
        };
        let creds = (new_ufrag.to_string(), new_pwd.to_string());
        self.ufrag = creds.0.clone();
        self.remote_ufrag = ufrag.to_string();
        self.offer = offer;
        Ok(creds)
    }

    /// The encoder's ICE ufrag, as of its offer or its last ICE restart.
    pub fn remote_ufrag(&self) -> &str {
        &self.remote_ufrag
    }

    /// Whether the session has ended.
    pub fn is_closed(&self) -> bool {
        self.closed || !self.rtc.is_alive()
    }

    /// Feeds a datagram from `from`. Returns false when str0m did not accept it.
    pub fn handle_input(&mut self, now: Instant, from: SocketAddr, data: &[u8]) -> bool {
        let v4 = from.ip().to_canonical().is_ipv4();
        let Some(&local) = self
            .locals
            .iter()
            .find(|l| l.ip().to_canonical().is_ipv4() == v4)
            .or(self.locals.first())
        else {
            return false;
        };
        let Ok(r) = Receive::new(Protocol::Udp, from, local, data) else {
            return false;
        };
        self.rtc.handle_input(Input::Receive(now, r)).is_ok()
    }

    /// Runs timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.rtc.handle_input(Input::Timeout(now)).is_err() {
            self.closed = true;
        }
    }

    /// Asks the publisher for a keyframe of a video layer (PLI on that layer's SSRC).
    pub fn request_keyframe(&mut self, layer: u8) {
        if let Some(Some(ssrc)) = self.video_ssrcs.get(usize::from(layer))
            && let Some(rx) = self.rtc.direct_api().stream_rx(ssrc)
        {
            rx.request_keyframe(KeyframeRequestKind::Pli);
        }
    }

    /// The simulcast layer of a video packet: from its RID header extension (Chromium
    /// stops sending it once the SSRC is acknowledged), else from the SSRC it was seen on,
    /// else from str0m's RID for the SSRC. `None`: a layer the offer did not announce.
    fn layer_of(&mut self, ssrc: Ssrc, rid: Option<&str>) -> Option<u8> {
        if self.rids.is_empty() {
            // One layer: its SSRC is where keyframe requests go (without it, none went to
            // a publisher without simulcast).
            self.video_ssrcs[0] = Some(ssrc);
            return Some(0);
        }
        let by_rid = |rids: &[Box<str>], rid: &str| rids.iter().position(|r| &**r == rid);
        let layer = match rid.and_then(|r| by_rid(&self.rids, r)) {
            Some(l) => l,
            None => match self.video_ssrcs.iter().position(|s| *s == Some(ssrc)) {
                Some(l) => return Some(l as u8),
                None => {
                    let mut api = self.rtc.direct_api();
                    let rid = api.stream_rx(&ssrc)?.rid()?;
                    by_rid(&self.rids, &rid)?
                }
            },
        };
        self.video_ssrcs[layer] = Some(ssrc);
        Some(layer as u8)
    }

    /// Ends the session cleanly: str0m queues RTCP BYE and a DTLS close_notify, which the
    /// next [`Publisher::poll`] hands out as transmits, so the encoder learns at once.
    pub fn close(&mut self) {
        if self.rtc.close().is_err() {
            self.rtc.disconnect();
        }
        self.closed = true;
    }

    /// Drains str0m's output into `ev`; returns when the next timeout is due.
    pub fn poll(&mut self, ev: &mut dyn FnMut(PublisherEvent)) -> Option<Instant> {
        loop {
            match self.rtc.poll_output() {
                Ok(Output::Timeout(t)) => return Some(t),
                Ok(Output::Transmit(t)) => {
                    ev(PublisherEvent::Transmit(t.destination, t.contents.to_vec()));
                }
                Ok(Output::Event(e)) => match e {
                    Event::Connected => ev(PublisherEvent::Connected),
                    // The encoder closed DTLS (close_notify), or ICE gave up.
                    Event::Closed
                    | Event::IceConnectionStateChange(IceConnectionState::Disconnected) => {
                        self.closed = true;
                        ev(PublisherEvent::Closed);
                        return None;
                    }
                    Event::RtpPacket(p) => {
                        let pt = *p.header.payload_type;
                        let kind = if self.video_pts.contains(&pt) {
                            MediaKind::Video
                        } else if self.audio_pts.contains(&pt) {
                            MediaKind::Audio
                        } else {
                            continue;
                        };
                        let layer = match kind {
                            MediaKind::Video => {
                                let rid = p.header.ext_vals.rid;
                                let Some(l) = self.layer_of(p.header.ssrc, rid.as_deref()) else {
                                    continue;
                                };
                                l
                            }
                            MediaKind::Audio => 0,
                        };
                        let clock = p.time.denom().max(1);
                        let capture_ntp = p
                            .header
                            .ext_vals
                            .abs_capture_time
                            .as_ref()
                            .map(|a| ntp_of(a.capture_time))
                            .or_else(|| {
                                // The SR maps RTP time to NTP time.
                                let sr = p.last_sender_info?;
                                let d = p.time.numer() as i64
                                    - sr.rtp_time.rebase(p.time.frequency()).numer() as i64;
                                let secs = d as f64 / f64::from(clock);
                                Some(
                                    ntp_of(sr.ntp_time)
                                        .wrapping_add((secs * 4_294_967_296.0) as i64 as u64),
                                )
                            });
                        ev(PublisherEvent::Packet(IngestPacket {
                            kind,
                            layer,
                            seq: *p.seq_no,
                            rtp_ts: p.time.numer(),
                            marker: p.header.marker,
                            payload: p.payload.clone(),
                            capture_ntp,
                        }));
                    }
                    _ => {}
                },
                Err(_) => {
                    self.closed = true;
                    ev(PublisherEvent::Closed);
                    return None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(simulcast: &str) -> sdp::SessionDescription {
        let sdp = format!(
            "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n\
             m=video 9 UDP/TLS/RTP/SAVPF 96\r\nc=IN IP4 0.0.0.0\r\na=rtpmap:96 VP8/90000\r\n\
             {simulcast}"
        );
        sdp::SessionDescription::parse(&sdp).expect("valid SDP")
    }

    #[test]
    fn simulcast_takes_up_to_three_layers_of_short_rids() {
        let rids = simulcast_rids(&offer("a=simulcast:send h;m;l\r\n")).expect("three");
        assert_eq!(rids, ["h".into(), "m".into(), "l".into()] as [Box<str>; 3]);
        assert!(simulcast_rids(&offer("")).expect("none").is_empty());
        let e = simulcast_rids(&offer("a=simulcast:send a;b;c;d\r\n")).expect_err("refused");
        assert!(e.to_string().contains("4 layers (a;b;c;d)"), "{e}");
        let e = simulcast_rids(&offer("a=simulcast:send high123456;m\r\n")).expect_err("refused");
        assert!(e.to_string().contains("1-8 characters"), "{e}");
    }
}

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

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use str0m::change::SdpOffer;
use str0m::media::KeyframeRequestKind;
use str0m::net::{Protocol, Receive};
use str0m::rtp::{Extension, Ssrc};
use str0m::{Candidate, Event, IceConnectionState, Input, Output, Rtc, RtcConfig};
use tern_proto::rtp::ntp_from_unix;
use tern_proto::sdp;

use crate::clip::MediaKind;

/// Why an offer was refused.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The offer is not SDP str0m can read.
    #[error("malformed SDP offer: {0}")]
    BadOffer(String),
    /// The offer has nothing we can forward.
    #[error("offer has no H264 video and no Opus audio to receive")]
    NoMedia,
    /// str0m refused the offer.
    #[error("cannot accept the offer: {0}")]
    Rejected(String),
}

/// A media packet from the publisher.
#[derive(Debug, Clone)]
pub struct IngestPacket {
    /// Video or audio.
    pub kind: MediaKind,
    /// Extended sequence number (publisher's numbering).
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
    ufrag: String,
    local: SocketAddr,
    video_pts: Vec<u8>,
    audio_pts: Vec<u8>,
    video_ssrc: Option<Ssrc>,
    closed: bool,
}

fn ntp_of(t: SystemTime) -> u64 {
    ntp_from_unix(t.duration_since(UNIX_EPOCH).unwrap_or_default())
}

impl Publisher {
    /// Accepts a WHIP offer; returns the session and the SDP answer. `local` is the media
    /// address announced as the host candidate (and the one the datagrams arrive on).
    pub fn accept(
        offer: &str,
        local: SocketAddr,
        now: Instant,
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
        let offer =
            SdpOffer::from_sdp_string(offer).map_err(|e| PublishError::BadOffer(e.to_string()))?;
        let mut rtc = RtcConfig::new()
            .set_ice_lite(true)
            .set_rtp_mode(true)
            .clear_codecs()
            .enable_h264(true)
            .enable_opus(true, false)
            .set_extension(15, Extension::AbsoluteCaptureTime)
            .set_stats_interval(None)
            .build(now);
        let cand =
            Candidate::host(local, "udp").map_err(|e| PublishError::Rejected(e.to_string()))?;
        rtc.add_local_candidate(cand);
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
                ufrag,
                local,
                video_pts,
                audio_pts,
                video_ssrc: None,
                closed: false,
            },
            answer,
        ))
    }

    /// Our ICE ufrag (STUN `USERNAME` starts with it).
    pub fn local_ufrag(&self) -> &str {
        &self.ufrag
    }

    /// Whether the session has ended.
    pub fn is_closed(&self) -> bool {
        self.closed || !self.rtc.is_alive()
    }

    /// Feeds a datagram from `from`. Returns false when str0m did not accept it.
    pub fn handle_input(&mut self, now: Instant, from: SocketAddr, data: &[u8]) -> bool {
        let Ok(r) = Receive::new(Protocol::Udp, from, self.local, data) else {
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

    /// Asks the publisher for a keyframe (PLI).
    pub fn request_keyframe(&mut self) {
        if let Some(ssrc) = self.video_ssrc
            && let Some(rx) = self.rtc.direct_api().stream_rx(&ssrc)
        {
            rx.request_keyframe(KeyframeRequestKind::Pli);
        }
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
                        if kind == MediaKind::Video {
                            self.video_ssrc = Some(p.header.ssrc);
                        }
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

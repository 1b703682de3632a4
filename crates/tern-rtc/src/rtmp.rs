//! The RTMP publisher session: an RTMP connection in, RTP-ready media packets out.
//!
//! [`RtmpPublisher`] wraps [`tern_proto::rtmp::ServerSession`] (handshake, chunks, the
//! `connect`/`publish` flow) and turns the media it reports into [`IngestPacket`]s, the
//! same packets a WHIP publisher produces, so the server's ingest path treats both alike:
//!
//! * video: AVC sequence headers give the SPS/PPS; each AVC frame becomes RTP payloads
//!   (RFC 6184 mode 1, SPS/PPS in a STAP-A in front of keyframes) with the RTP timestamp
//!   PTS × 90 (PTS = RTMP timestamp + composition time, in ms);
//! * renditions (when [`RtmpPublisher::set_renditions`] asks for them): lower video layers
//!   made from the source, which is decoded once for them and for the B-frame transcoder
//!   ([`crate::renditions`]); their packets go to the caller's sink from their own threads;
//! * audio: AAC frames are transcoded to 20 ms Opus frames ([`crate::transcode`]) with the
//!   RTP timestamp RTMP ms × 48 at the start of the audio, advancing by samples; an AAC
//!   frame that does not decode is dropped and counted ([`RtmpPublisher::audio_dropped`]).
//!
//! Both timestamps count from the same RTMP epoch, and every packet carries a capture time
//! on one NTP timeline (`now` at the first media message + media time), so the sender
//! reports of the two tracks agree and the viewer's player keeps lip sync.
//!
//! Sans-IO: bytes in with [`RtmpPublisher::receive`], bytes out with
//! [`RtmpPublisher::take_output`]; the caller passes the time.

use std::sync::Arc;

use tern_proto::h264;
use tern_proto::rtmp::flv::{
    AudioSpecificConfig, AudioTag, AvcConfig, AvcPacketType, AvcRtp, FlvError, VideoTag,
    avcc_nal_units,
};
use tern_proto::rtmp::{Event, RtmpError, ServerSession};
use tern_proto::rtp::Unwrap32;
use thiserror::Error;
use tracing::debug;

use crate::clip::MediaKind;
use crate::publisher::IngestPacket;
use crate::renditions::{RenditionSink, RenditionSpec, RenditionStats, Renditions, SourceFrame};
use crate::transcode::{AacToOpus, TranscodeError};
use crate::video_transcode::{EncodedFrame, H264Transcoder, TranscodeStats, VideoTranscodeError};

/// Why an RTMP publisher must be disconnected.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RtmpIngestError {
    /// The RTMP connection itself is malformed.
    #[error(transparent)]
    Rtmp(#[from] RtmpError),
    /// A malformed or unsupported audio/video tag.
    #[error(transparent)]
    Flv(#[from] FlvError),
    /// The audio could not be transcoded.
    #[error(transparent)]
    Transcode(#[from] TranscodeError),
}

/// What the caller must act on.
#[derive(Debug)]
pub enum RtmpEvent {
    /// `connect` with the application (may carry `?query`) and tcUrl.
    Connect {
        /// The `app` property.
        app: String,
        /// The `tcUrl` property.
        tc_url: Option<String>,
    },
    /// `publish`: answer with [`RtmpPublisher::accept_publish`] or
    /// [`RtmpPublisher::reject_publish`].
    Publish {
        /// The publishing name (stream key, may carry `?query`).
        name: String,
    },
    /// A media packet, numbered in this publisher's own sequence and timestamp space.
    Packet(IngestPacket),
    /// The client stopped publishing.
    Unpublish,
    /// Something about the video the caller reports (log, API, event).
    Video(VideoNotice),
    /// The publisher's media as it came, for a packager (LL-HLS), while
    /// [`RtmpPublisher::set_samples`] is on.
    Sample(Sample),
}

/// A demuxed frame of the publisher, as the encoder sent it (H264 with its B-frames and
/// composition offsets, AAC untouched): what a packager needs, and what WebRTC viewers
/// cannot take as is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sample {
    /// The H264 parameter sets: before the first video sample after samples are turned
    /// on, and again when the encoder sends a new sequence header.
    VideoConfig {
        /// The first sequence parameter set (NAL unit, no start code).
        sps: Vec<u8>,
        /// The first picture parameter set.
        pps: Vec<u8>,
    },
    /// The AAC AudioSpecificConfig, before the first audio sample and on each change.
    AudioConfig {
        /// The AudioSpecificConfig bytes.
        asc: Vec<u8>,
        /// Sampling rate (Hz).
        sample_rate: u32,
        /// Channel configuration.
        channels: u8,
    },
    /// One access unit.
    Video {
        /// Decode time (ms, the RTMP clock extended past its 32-bit wrap).
        dts_ms: i64,
        /// Presentation time (ms).
        pts_ms: i64,
        /// FLV frame type 1 (a keyframe).
        keyframe: bool,
        /// NAL units, each after a 4-byte big-endian length.
        avcc: Vec<u8>,
    },
    /// One raw AAC frame.
    Audio {
        /// Presentation time in samples at the AAC sampling rate: the first frame's RTMP
        /// time converted, then 1024 per frame (RTMP's millisecond timestamps would make
        /// the durations jitter), re-anchored when the two drift apart by more than
        /// [`crate::transcode::MAX_DRIFT_MS`].
        pts: i64,
        /// The frame.
        data: Vec<u8>,
    },
}

/// What the sample tap of a publisher holds.
#[derive(Debug, Default)]
struct SampleTap {
    on: bool,
    /// The video parameter sets were sent since samples were turned on.
    video_config_sent: bool,
    /// The AAC sequence header as received and parsed, and whether it was sent.
    asc: Option<(Vec<u8>, AudioSpecificConfig)>,
    audio_config_sent: bool,
    /// Next AAC frame's pts (samples), when the timeline is anchored.
    next_audio_pts: Option<i64>,
}

/// What to do with a publisher whose H264 has B-frames (`[app] transcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TranscodeMode {
    /// Transcode to Constrained Baseline while the stream has a WebRTC viewer.
    #[default]
    Auto,
    /// Pass the video through as it is (viewers' players will stutter).
    Never,
}

/// News about the publisher's video.
#[derive(Debug, Clone, PartialEq)]
pub enum VideoNotice {
    /// The video has B-frames (display order differs from decode order); reported once.
    BFrames,
    /// Transcoding started (a viewer is there).
    TranscodeStarted,
    /// Transcoding stopped (no viewer any more), with what it did.
    TranscodeStopped(TranscodeStats),
    /// The transcoder failed; the video passes through from the next keyframe.
    TranscodeFailed(String),
}

/// The current GOP's frames, kept while a B-frame stream is passed through so that a
/// transcoder started mid-GOP can decode what follows (not with renditions, whose decoder
/// has decoded it already): at most this many bytes...
const GOP_MAX_BYTES: usize = 16 << 20;
/// ... and this many frames (20 s at 30 fps); past either the GOP is dropped and the
/// transcoder waits for the next keyframe.
const GOP_MAX_FRAMES: usize = 600;

/// One frame of the kept GOP: pts and dts in ms, Annex B bytes.
#[derive(Debug)]
struct GopFrame {
    pts: i64,
    dts: i64,
    data: Vec<u8>,
}

/// The B-frame handling of one publisher.
#[derive(Debug, Default)]
struct Reorder {
    mode: TranscodeMode,
    /// The stream has viewers who need the transcoded video.
    wanted: bool,
    /// Highest pts seen; a frame below it means B-frames.
    max_pts: Option<i64>,
    b_frames: bool,
    /// The last sequence header (parameter sets and NAL length size).
    config: Option<AvcConfig>,
    gop: Vec<GopFrame>,
    gop_bytes: usize,
    /// Frames since the GOP's IDR (kept or not).
    gop_frames: usize,
    /// The GOP outgrew its bounds: nothing kept until the next keyframe.
    gop_broken: bool,
    /// The kept GOP starts with its IDR (false until the first keyframe).
    gop_key: bool,
    transcoder: Option<Box<H264Transcoder>>,
    /// The transcoder failed once: no second try on this connection.
    failed: bool,
    /// A whole GOP went by without B-frames: no more GOP keeping until some show.
    settled: bool,
    /// After transcoding stopped, passthrough resumes at the next source keyframe.
    wait_key: bool,
    /// Highest pts passed through untranscoded: the transcoder starts after it.
    passed_pts: Option<i64>,
    packetizer: h264::Packetizer,
}

/// One RTMP publisher.
#[derive(Debug)]
pub struct RtmpPublisher {
    session: ServerSession,
    avc: AvcRtp,
    audio: Option<AacToOpus>,
    video_seq: u64,
    audio_seq: u64,
    /// One unwrapper for both tracks: they share the RTMP clock.
    clock: Unwrap32,
    /// NTP time of media time 0 (set at the first media message).
    ntp_base: Option<u64>,
    video_frames: u64,
    /// AAC frames that failed to decode and were dropped.
    audio_dropped: u64,
    max_payload: usize,
    reorder: Reorder,
    tap: SampleTap,
    /// Lower layers made from the video, with the decoder they share with the transcoder.
    renditions: Option<Box<Renditions>>,
}

/// `units` of a `rate` Hz clock as 64-bit NTP duration.
fn ntp_of(units: i64, rate: u32) -> i64 {
    ((i128::from(units) << 32) / i128::from(rate)) as i64
}

/// An AVC frame as Annex B for a decoder (the configuration's SPS/PPS in front of an IDR
/// that lacks them, access unit delimiters left out), and whether it holds an IDR.
fn annex_b(cfg: &AvcConfig, body: &[u8]) -> Result<(Vec<u8>, bool), FlvError> {
    let nals = avcc_nal_units(body, cfg.length_size)?;
    let idr = nals.iter().any(|n| h264::nal_type(n) == h264::NAL_IDR);
    let in_band = nals.iter().any(|n| h264::nal_type(n) == h264::NAL_SPS);
    let mut out = Vec::with_capacity(body.len() + 64);
    let mut put = |n: &[u8]| {
        out.extend_from_slice(&[0, 0, 0, 1]);
        out.extend_from_slice(n);
    };
    if idr && !in_band {
        cfg.sps.iter().chain(cfg.pps.iter()).for_each(|n| put(n));
    }
    nals.iter()
        .filter(|n| h264::nal_type(n) != h264::NAL_AUD)
        .for_each(|n| put(n));
    Ok((out, idr))
}

impl RtmpPublisher {
    /// A new connection; `seed` fills the handshake's random bytes, `max_payload` caps RTP
    /// payloads.
    pub fn new(seed: u64, max_payload: usize) -> Self {
        RtmpPublisher {
            session: ServerSession::new(seed),
            avc: AvcRtp::new(max_payload),
            audio: None,
            video_seq: 0,
            audio_seq: 0,
            clock: Unwrap32::default(),
            ntp_base: None,
            video_frames: 0,
            audio_dropped: 0,
            max_payload,
            reorder: Reorder::default(),
            tap: SampleTap::default(),
            renditions: None,
        }
    }

    /// Whether to emit [`RtmpEvent::Sample`]s (a packager reads the stream). Turning it on
    /// sends the current configurations before the next samples.
    pub fn set_samples(&mut self, on: bool) {
        if on && !self.tap.on {
            self.tap.video_config_sent = false;
            self.tap.audio_config_sent = false;
            self.tap.next_audio_pts = None;
        }
        self.tap.on = on;
    }

    /// What to do if the video has B-frames (default [`TranscodeMode::Auto`]).
    pub fn set_transcode(&mut self, mode: TranscodeMode) {
        self.reorder.mode = mode;
    }

    /// Whether the stream has viewers the transcoded video is for. Transcoding (when the
    /// video has B-frames and the mode is auto) starts at the next frame after this turns
    /// true and stops at the next frame after it turns false; the caller applies any grace.
    pub fn set_viewers(&mut self, wanted: bool) {
        self.reorder.wanted = wanted;
    }

    /// Whether the video has B-frames (seen so far).
    pub fn has_b_frames(&self) -> bool {
        self.reorder.b_frames
    }

    /// A viewer asked for a keyframe: the transcoder, if one runs, makes its next picture
    /// an IDR. (An RTMP encoder cannot be asked; without a transcoder nothing happens.)
    pub fn request_keyframe(&mut self) {
        if let Some(t) = self.reorder.transcoder.as_mut() {
            t.request_idr();
        }
    }

    /// Makes lower video layers from the video: rendition `i` of `specs` (at most
    /// [`crate::renditions::MAX_RENDITIONS`]) becomes layer `i + 1`, the source staying
    /// layer 0. Their packets and news go to `sink`, from the renditions' own threads (not
    /// through [`RtmpPublisher::receive`]'s events). Call it once the publish is accepted,
    /// before media flows. An error (libavcodec without an H264 decoder or libx264, no
    /// thread) leaves the publisher without renditions; empty `specs` turns them off.
    pub fn set_renditions(
        &mut self,
        specs: &[RenditionSpec],
        sink: RenditionSink,
    ) -> Result<(), VideoTranscodeError> {
        self.renditions = None;
        if !specs.is_empty() {
            self.renditions = Some(Box::new(Renditions::new(specs, self.max_payload, sink)?));
        }
        Ok(())
    }

    /// What each rendition did so far (empty without renditions).
    pub fn rendition_stats(&self) -> Vec<RenditionStats> {
        self.renditions
            .as_ref()
            .map_or_else(Vec::new, |r| r.stats())
    }

    /// A viewer asked for a keyframe of video layer `layer`: layer 0 as
    /// [`RtmpPublisher::request_keyframe`], a rendition's layer from its encoder.
    pub fn request_layer_keyframe(&mut self, layer: u8) {
        match (layer, self.renditions.as_mut()) {
            (0, _) => self.request_keyframe(),
            (l, Some(r)) => r.request_idr(l),
            (_, None) => {}
        }
    }

    /// The running transcoder's figures, while it runs.
    pub fn transcode_stats(&self) -> Option<TranscodeStats> {
        self.reorder.transcoder.as_ref().map(|t| t.stats())
    }

    /// Bytes to send to the client; empties the buffer.
    pub fn take_output(&mut self) -> Vec<u8> {
        self.session.take_output()
    }

    /// Whether a publish was accepted and is going on.
    pub fn is_publishing(&self) -> bool {
        self.session.is_publishing()
    }

    /// AAC frames dropped because they did not decode (the stream goes on without them).
    pub fn audio_dropped(&self) -> u64 {
        self.audio_dropped
    }

    /// Video frames and (AAC in, Opus out) audio frames handled so far.
    pub fn counts(&self) -> (u64, u64, u64) {
        let (a, o) = self.audio.as_ref().map_or((0, 0), AacToOpus::counts);
        (self.video_frames, a, o)
    }

    /// Accepts the pending publish (`NetStream.Publish.Start`).
    pub fn accept_publish(&mut self) -> Result<(), RtmpError> {
        self.session.accept_publish()
    }

    /// Refuses the pending publish with an error status; close after sending the output.
    pub fn reject_publish(&mut self, code: &str, description: &str) -> Result<(), RtmpError> {
        self.session.reject_publish(code, description)
    }

    /// Feeds bytes from the socket at `now_ntp` (64-bit NTP time). After an error, close
    /// the connection.
    pub fn receive(
        &mut self,
        now_ntp: u64,
        data: &[u8],
        ev: &mut dyn FnMut(RtmpEvent),
    ) -> Result<(), RtmpIngestError> {
        let mut events = Vec::new();
        let res = self.session.receive(data, &mut |e| events.push(e));
        for e in events {
            match e {
                Event::Connect { app, tc_url } => ev(RtmpEvent::Connect { app, tc_url }),
                Event::Publish { name } => ev(RtmpEvent::Publish { name }),
                Event::Unpublish => ev(RtmpEvent::Unpublish),
                Event::Video { timestamp, data } => self.video(now_ntp, timestamp, &data, ev)?,
                Event::Audio { timestamp, data } => self.audio(now_ntp, timestamp, &data, ev)?,
            }
        }
        Ok(res?)
    }

    /// Capture time of media time `units` at `rate` Hz.
    fn capture(&mut self, now_ntp: u64, ms: i64, units: i64, rate: u32) -> u64 {
        let base = *self
            .ntp_base
            .get_or_insert_with(|| (now_ntp as i64).wrapping_sub(ntp_of(ms, 1000)) as u64);
        (base as i64).wrapping_add(ntp_of(units, rate)) as u64
    }

    fn video(
        &mut self,
        now_ntp: u64,
        timestamp: u32,
        data: &[u8],
        ev: &mut dyn FnMut(RtmpEvent),
    ) -> Result<(), RtmpIngestError> {
        let tag = VideoTag::parse(data)?;
        match tag.packet_type {
            AvcPacketType::SequenceHeader => {
                self.avc.set_config(tag.body)?;
                self.reorder.config = Some(AvcConfig::parse(tag.body)?);
                self.tap.video_config_sent = false;
            }
            AvcPacketType::EndOfSequence => {}
            AvcPacketType::Nalu => {
                let dts = self.clock.extend(timestamp);
                let pts = (dts + i64::from(tag.composition_time)).max(0);
                if self.tap.on {
                    self.video_sample(dts, pts, tag.keyframe, tag.body, ev)?;
                }
                let r = &mut self.reorder;
                if !r.b_frames && r.max_pts.is_some_and(|m| pts < m) {
                    r.b_frames = true;
                    ev(RtmpEvent::Video(VideoNotice::BFrames));
                }
                r.max_pts = Some(r.max_pts.map_or(pts, |m| m.max(pts)));
                // Frames are kept from the first GOP on, before B-frames show (the first is
                // usually the third frame): a transcoder needs the GOP's IDR.
                let probing = !r.b_frames && !r.settled;
                let transcode =
                    (r.b_frames || probing) && r.mode == TranscodeMode::Auto && !r.failed;
                // Annex B for the decoders, when one will read the frame.
                let annex_b = match &r.config {
                    Some(cfg) if transcode || self.renditions.is_some() => {
                        Some(annex_b(cfg, tag.body)?)
                    }
                    _ => None,
                };
                let mut transcoded = false;
                if let (true, Some((au, idr))) = (transcode, &annex_b) {
                    transcoded = self.transcode(now_ntp, pts, dts, au, *idr, ev)?;
                }
                if let Some((au, idr)) = &annex_b
                    && self.renditions.is_some()
                {
                    self.decode_shared(now_ntp, pts, dts, au, *idr, ev)?;
                }
                if transcoded {
                    return Ok(());
                }
                if self.reorder.wait_key {
                    if !tag.keyframe {
                        return Ok(());
                    }
                    self.reorder.wait_key = false;
                }
                let passed = &mut self.reorder.passed_pts;
                *passed = Some(passed.map_or(pts, |m| m.max(pts)));
                let rtp_ts = pts * 90;
                let capture_ntp = Some(self.capture(now_ntp, dts, rtp_ts, 90_000));
                let mut packets = Vec::new();
                self.avc.frame(tag.body, &mut |payload, last| {
                    packets.push((Arc::<[u8]>::from(payload), last));
                })?;
                if !packets.is_empty() {
                    self.video_frames += 1;
                }
                self.emit_video(packets, rtp_ts, capture_ntp, ev);
            }
        }
        Ok(())
    }

    /// The access unit as a [`Sample::Video`] (preceded by the parameter sets when due).
    fn video_sample(
        &mut self,
        dts: i64,
        pts: i64,
        keyframe: bool,
        body: &[u8],
        ev: &mut dyn FnMut(RtmpEvent),
    ) -> Result<(), RtmpIngestError> {
        let Some(cfg) = &self.reorder.config else {
            // Frames before their sequence header cannot be decoded by anyone.
            return Ok(());
        };
        if !self.tap.video_config_sent {
            let (Some(sps), Some(pps)) = (cfg.sps.first(), cfg.pps.first()) else {
                return Ok(());
            };
            // The audio configuration too, when its sequence header came already: a
            // packager then starts with both tracks rather than restart when the first
            // audio frame follows the first keyframe.
            if let (false, Some((asc, a))) = (self.tap.audio_config_sent, &self.tap.asc) {
                ev(RtmpEvent::Sample(Sample::AudioConfig {
                    asc: asc.clone(),
                    sample_rate: a.sample_rate,
                    channels: a.channels,
                }));
                self.tap.audio_config_sent = true;
            }
            ev(RtmpEvent::Sample(Sample::VideoConfig {
                sps: sps.clone(),
                pps: pps.clone(),
            }));
            self.tap.video_config_sent = true;
        }
        let avcc = if cfg.length_size == 4 {
            body.to_vec()
        } else {
            let mut out = Vec::with_capacity(body.len() + 16);
            for n in avcc_nal_units(body, cfg.length_size)? {
                out.extend_from_slice(&(n.len() as u32).to_be_bytes());
                out.extend_from_slice(n);
            }
            out
        };
        ev(RtmpEvent::Sample(Sample::Video {
            dts_ms: dts,
            pts_ms: pts,
            keyframe,
            avcc,
        }));
        Ok(())
    }

    /// A raw AAC frame at `ms` as a [`Sample::Audio`] (preceded by its configuration).
    fn audio_sample(&mut self, ms: i64, frame: &[u8], ev: &mut dyn FnMut(RtmpEvent)) {
        let Some((asc, cfg)) = &self.tap.asc else {
            return;
        };
        if !self.tap.audio_config_sent {
            ev(RtmpEvent::Sample(Sample::AudioConfig {
                asc: asc.clone(),
                sample_rate: cfg.sample_rate,
                channels: cfg.channels,
            }));
            self.tap.audio_config_sent = true;
        }
        let rate = i64::from(cfg.sample_rate);
        let at = ms * rate / 1000;
        let pts = match self.tap.next_audio_pts {
            Some(p) if (p - at).abs() * 1000 <= crate::transcode::MAX_DRIFT_MS * rate => p,
            _ => at,
        };
        self.tap.next_audio_pts = Some(pts + 1024);
        ev(RtmpEvent::Sample(Sample::Audio {
            pts,
            data: frame.to_vec(),
        }));
    }

    fn emit_video(
        &mut self,
        packets: Vec<(Arc<[u8]>, bool)>,
        rtp_ts: i64,
        capture_ntp: Option<u64>,
        ev: &mut dyn FnMut(RtmpEvent),
    ) {
        for (payload, marker) in packets {
            let seq = self.video_seq;
            self.video_seq += 1;
            ev(RtmpEvent::Packet(IngestPacket {
                layer: 0,
                kind: MediaKind::Video,
                seq,
                rtp_ts: rtp_ts as u64,
                marker,
                payload,
                capture_ntp,
            }));
        }
    }

    /// A frame of a B-frame stream in auto mode: kept in the GOP, and transcoded while
    /// viewers want it. Returns whether the frame was consumed (the transcoder emits in its
    /// place); false means pass it through.
    ///
    /// With renditions the source is decoded all along by their decoder, which then feeds
    /// the transcoder ([`RtmpPublisher::decode_shared`]): no GOP is kept, and a transcoder
    /// starts at any frame.
    fn transcode(
        &mut self,
        now_ntp: u64,
        pts: i64,
        dts: i64,
        annex_b: &[u8],
        idr: bool,
        ev: &mut dyn FnMut(RtmpEvent),
    ) -> Result<bool, RtmpIngestError> {
        let shared = self.renditions.is_some();
        let r = &mut self.reorder;
        if idr {
            if !r.b_frames && r.gop_frames > 0 {
                // A whole GOP without B-frames: this publisher does not send them.
                r.settled = true;
                r.gop = Vec::new();
                r.gop_bytes = 0;
                return Ok(false);
            }
            r.gop.clear();
            r.gop_bytes = 0;
            r.gop_frames = 0;
            r.gop_broken = false;
            r.gop_key = true;
        }
        r.gop_frames += 1;
        if !r.wanted || !r.b_frames {
            if let Some(t) = r.transcoder.take() {
                // Passthrough resumes cleanly at the next source keyframe.
                r.wait_key = !idr;
                ev(RtmpEvent::Video(VideoNotice::TranscodeStopped(t.stats())));
            }
        } else if r.transcoder.is_none() && shared && r.gop_key {
            // Past what was passed through: the shared decoder's next pictures.
            match H264Transcoder::fed() {
                Ok(mut t) => {
                    if let Some(p) = r.passed_pts {
                        t.skip_through(p);
                    }
                    r.transcoder = Some(Box::new(t));
                    ev(RtmpEvent::Video(VideoNotice::TranscodeStarted));
                }
                Err(e) => {
                    r.failed = true;
                    ev(RtmpEvent::Video(VideoNotice::TranscodeFailed(
                        e.to_string(),
                    )));
                    return Ok(false);
                }
            }
        } else if !shared
            && r.transcoder.is_none()
            && !r.gop_broken
            && (idr || (r.gop_key && !r.gop.is_empty()))
        {
            let passed = r.passed_pts;
            let started = H264Transcoder::new().and_then(|mut t| {
                if let Some(p) = passed {
                    t.skip_through(p);
                }
                for f in r.gop.drain(..) {
                    t.prime(f.pts, f.dts, &f.data)?;
                }
                Ok(t)
            });
            r.gop_bytes = 0;
            match started {
                Ok(t) => {
                    r.transcoder = Some(Box::new(t));
                    ev(RtmpEvent::Video(VideoNotice::TranscodeStarted));
                }
                Err(e) => {
                    r.failed = true;
                    ev(RtmpEvent::Video(VideoNotice::TranscodeFailed(
                        e.to_string(),
                    )));
                    return Ok(false);
                }
            }
        }
        let Some(t) = r.transcoder.as_mut() else {
            if !r.gop_broken && !shared {
                if r.gop.len() < GOP_MAX_FRAMES && r.gop_bytes + annex_b.len() <= GOP_MAX_BYTES {
                    r.gop_bytes += annex_b.len();
                    r.gop.push(GopFrame {
                        pts,
                        dts,
                        data: annex_b.to_vec(),
                    });
                } else {
                    r.gop_broken = true;
                    r.gop = Vec::new();
                    r.gop_bytes = 0;
                }
            }
            return Ok(false);
        };
        if t.is_fed() {
            // decode_shared gives it this frame's pictures.
            return Ok(true);
        }
        let mut frames = Vec::new();
        if let Err(e) = t.push(
            pts,
            dts,
            idr,
            annex_b,
            std::time::Instant::now(),
            &mut |f| frames.push(f),
        ) {
            r.transcoder = None;
            r.failed = true;
            r.wait_key = true;
            ev(RtmpEvent::Video(VideoNotice::TranscodeFailed(
                e.to_string(),
            )));
            return Ok(true);
        }
        self.emit_transcoded(now_ntp, frames, ev)?;
        Ok(true)
    }

    /// Decodes a frame once for the renditions and, when one runs on their decoder, the
    /// B-frame transcoder, whose frames are sent as layer 0.
    fn decode_shared(
        &mut self,
        now_ntp: u64,
        pts: i64,
        dts: i64,
        annex_b: &[u8],
        idr: bool,
        ev: &mut dyn FnMut(RtmpEvent),
    ) -> Result<(), RtmpIngestError> {
        // The NTP time of media time 0: a picture's capture time is that plus its pts.
        let base = self.capture(now_ntp, dts, 0, 90_000) as i64;
        let Some(renditions) = self.renditions.as_mut() else {
            return Ok(());
        };
        let now = std::time::Instant::now();
        let mut transcoder = self.reorder.transcoder.as_mut().filter(|t| t.is_fed());
        let (mut frames, mut failure) = (Vec::new(), None);
        let ntp = |pts: i64| base.wrapping_add(ntp_of(pts, 1000)) as u64;
        let frame = SourceFrame {
            pts_ms: pts,
            dts_ms: dts,
            keyframe: idr,
            annex_b,
        };
        renditions.push(frame, now, &ntp, &mut |pic| {
            if let (Some(t), None) = (transcoder.as_mut(), &failure)
                && let Err(e) = t.picture(pic, now, &mut |f| frames.push(f))
            {
                failure = Some(e);
            }
        });
        if let Some(e) = failure {
            let r = &mut self.reorder;
            r.transcoder = None;
            r.failed = true;
            r.wait_key = true;
            ev(RtmpEvent::Video(VideoNotice::TranscodeFailed(
                e.to_string(),
            )));
        }
        self.emit_transcoded(now_ntp, frames, ev)
    }

    /// The transcoder's frames as layer-0 RTP.
    fn emit_transcoded(
        &mut self,
        now_ntp: u64,
        frames: Vec<EncodedFrame>,
        ev: &mut dyn FnMut(RtmpEvent),
    ) -> Result<(), RtmpIngestError> {
        let max_payload = self.max_payload;
        for f in frames {
            let nals: Vec<&[u8]> = h264::nal_units(&f.data).collect();
            let mut packets = Vec::new();
            self.reorder
                .packetizer
                .packetize(&nals, max_payload, &mut |payload, last| {
                    packets.push((Arc::<[u8]>::from(payload), last));
                })
                .map_err(FlvError::from)?;
            if packets.is_empty() {
                continue;
            }
            self.video_frames += 1;
            let rtp_ts = f.pts_ms * 90;
            let capture_ntp = Some(self.capture(now_ntp, f.pts_ms, rtp_ts, 90_000));
            self.emit_video(packets, rtp_ts, capture_ntp, ev);
        }
        Ok(())
    }

    fn audio(
        &mut self,
        now_ntp: u64,
        timestamp: u32,
        data: &[u8],
        ev: &mut dyn FnMut(RtmpEvent),
    ) -> Result<(), RtmpIngestError> {
        let tag = AudioTag::parse(data)?;
        if tag.sequence_header {
            self.audio = Some(AacToOpus::new(tag.body)?);
            // AacToOpus::new parsed it already; a config it takes parses here too.
            self.tap.asc = AudioSpecificConfig::parse(tag.body)
                .ok()
                .map(|c| (tag.body.to_vec(), c));
            self.tap.audio_config_sent = false;
            return Ok(());
        }
        let ms = self.clock.extend(timestamp);
        if self.tap.on {
            self.audio_sample(ms, tag.body, ev);
        }
        let Some(t) = self.audio.as_mut() else {
            // Raw AAC before its sequence header cannot be decoded.
            return Ok(());
        };
        let mut frames = Vec::new();
        let res = t.push(tag.body, ms.max(0) as u64, &mut |p, ts| {
            frames.push((Arc::<[u8]>::from(p), ts));
        });
        match res {
            // A corrupt AAC frame is dropped and counted; the transcoder recovers.
            Err(TranscodeError::Decode(e)) => {
                self.audio_dropped += 1;
                debug!("AAC frame at {ms} ms dropped: {e}");
            }
            res => res?,
        }
        for (payload, ts) in frames {
            let capture_ntp = Some(self.capture(now_ntp, ms, ts as i64, 48_000));
            let seq = self.audio_seq;
            self.audio_seq += 1;
            ev(RtmpEvent::Packet(IngestPacket {
                layer: 0,
                kind: MediaKind::Audio,
                seq,
                rtp_ts: ts,
                marker: false,
                payload,
                capture_ntp,
            }));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_proto::h264;
    use tern_proto::rtmp::amf0::{self, Value, object};
    use tern_proto::rtmp::chunk::ChunkWriter;
    use tern_proto::rtmp::{HANDSHAKE_SIZE, MSG_AUDIO, MSG_COMMAND_AMF0, MSG_VIDEO, VERSION};

    const SAMPLE: &[u8] = include_bytes!("../../../assets/rtmp/sample.flv");

    /// The tags of an FLV file: (type, timestamp ms, body).
    fn flv_tags(mut f: &[u8]) -> Vec<(u8, u32, &[u8])> {
        assert_eq!(&f[..3], b"FLV");
        let header = u32::from_be_bytes([f[5], f[6], f[7], f[8]]) as usize;
        f = &f[header + 4..];
        let mut tags = Vec::new();
        while f.len() >= 11 {
            let size = (usize::from(f[1]) << 16) | (usize::from(f[2]) << 8) | usize::from(f[3]);
            let ts = u32::from_be_bytes([f[7], f[4], f[5], f[6]]);
            tags.push((f[0], ts, &f[11..11 + size]));
            f = &f[11 + size + 4..];
        }
        tags
    }

    fn command(w: &mut ChunkWriter, stream: u32, vals: &[Value], out: &mut Vec<u8>) {
        let mut body = Vec::new();
        for v in vals {
            amf0::encode(v, &mut body).expect("encode");
        }
        w.write(3, 0, MSG_COMMAND_AMF0, stream, &body, out)
            .expect("write");
    }

    /// Goertzel power of `freq` in `x` relative to the signal's total power.
    fn tone_share(x: &[f32], freq: f32, rate: f32) -> f32 {
        let k = 2.0 * (2.0 * std::f32::consts::PI * freq / rate).cos();
        let (mut s1, mut s2) = (0.0f32, 0.0f32);
        for &v in x {
            let s = v + k * s1 - s2;
            s2 = s1;
            s1 = s;
        }
        let p = s1 * s1 + s2 * s2 - k * s1 * s2;
        let total: f32 = x.iter().map(|v| v * v).sum::<f32>() * x.len() as f32 / 2.0;
        p / total.max(1e-9)
    }

    /// The sample FLV pushed over a scripted RTMP connection: H264 comes out as RTP with
    /// keyframes led by SPS/PPS, AAC comes out as Opus that decodes back to the 440 Hz
    /// sine, and the two tracks' timestamps and capture times agree.
    /// Handshake, `connect` and `publish` of `cam` on `p`, accepted; returns the chunk
    /// writer to send media with.
    fn start_publishing(p: &mut RtmpPublisher) -> ChunkWriter {
        let mut input = vec![VERSION];
        input.extend([0u8; 2 * HANDSHAKE_SIZE]);
        let mut w = ChunkWriter::new();
        command(
            &mut w,
            0,
            &[
                Value::String("connect".into()),
                Value::Number(1.0),
                object([("app", Value::String("live".into()))]),
            ],
            &mut input,
        );
        command(
            &mut w,
            1,
            &[
                Value::String("publish".into()),
                Value::Number(0.0),
                Value::Null,
                Value::String("cam".into()),
            ],
            &mut input,
        );
        let mut events = Vec::new();
        p.receive(1 << 40, &input, &mut |e| events.push(e))
            .expect("connect + publish");
        assert!(matches!(events.last(), Some(RtmpEvent::Publish { name }) if name == "cam"));
        p.accept_publish().expect("accept");
        assert!(p.is_publishing());
        w
    }

    #[test]
    fn sample_flv_becomes_rtp() {
        let mut p = RtmpPublisher::new(3, 1200);
        let mut w = start_publishing(&mut p);
        let mut packets = Vec::new();
        let mut bytes = Vec::new();
        let mut audio_tags = 0;
        for (ty, ts, mut body) in flv_tags(SAMPLE) {
            let (csid, mt) = match ty {
                8 => (4, MSG_AUDIO),
                9 => (6, MSG_VIDEO),
                _ => continue,
            };
            if ty == 8 {
                audio_tags += 1;
                // One AAC frame cut short, as a corrupt encoder might send it.
                if audio_tags == 10 {
                    body = &body[..4];
                }
            }
            w.write(csid, ts, mt, 1, body, &mut bytes).expect("write");
        }
        // Fed in uneven pieces, as a socket would.
        for piece in bytes.chunks(1000) {
            p.receive(1 << 40, piece, &mut |e| {
                if let RtmpEvent::Packet(pk) = e {
                    packets.push(pk);
                }
            })
            .expect("media");
        }
        let video: Vec<&IngestPacket> = packets
            .iter()
            .filter(|p| p.kind == MediaKind::Video)
            .collect();
        let audio: Vec<&IngestPacket> = packets
            .iter()
            .filter(|p| p.kind == MediaKind::Audio)
            .collect();
        let (frames, aac, opus) = p.counts();
        // The cut frame was dropped and counted, and the audio went on.
        assert_eq!(p.audio_dropped(), 1);
        assert_eq!(frames, 30, "2 s at 15 fps");
        assert_eq!(video.iter().filter(|p| p.marker).count(), 30);
        // Every keyframe starts with a STAP-A holding the SPS and PPS.
        let mut au_start = true;
        let mut keyframes = 0;
        for v in &video {
            if au_start && h264::is_keyframe(&v.payload) {
                keyframes += 1;
                assert_eq!(h264::nal_type(&v.payload), h264::NAL_STAP_A);
            }
            au_start = v.marker;
            assert!(v.payload.len() <= 1200);
        }
        assert_eq!(keyframes, 2);
        // No B-frames: after one whole GOP the publisher is no longer probed and no GOP is
        // kept for a transcoder.
        assert!(!p.has_b_frames());
        assert!(p.reorder.settled && p.reorder.gop.is_empty() && p.reorder.gop_bytes == 0);
        assert!(p.transcode_stats().is_none());
        // Sequence numbers are dense, video timestamps step by 90 kHz / 15 fps.
        assert!(video.windows(2).all(|w| w[1].seq == w[0].seq + 1));
        // (FLV timestamps are whole ms: 1/15 s steps are 66 or 67 ms, ±90 around 6000.)
        let ts: Vec<u64> = video
            .iter()
            .filter(|p| p.marker)
            .map(|p| p.rtp_ts)
            .collect();
        assert!(
            ts.windows(2).all(|w| w[1].abs_diff(w[0] + 6000) <= 90),
            "{ts:?}"
        );
        assert!(ts[29].abs_diff(ts[0] + 29 * 6000) <= 90, "{ts:?}");

        // Audio: ~2 s of 20 ms frames.
        assert!(aac >= 85, "{aac} AAC frames");
        assert_eq!(opus as usize, audio.len());
        // Every AAC sample comes out, but for the resampler's start-up delay and the last
        // unfinished 20 ms frame.
        let want = aac as usize * 1024 * 48_000 / 44_100 / 960;
        assert!(
            (want - 2..=want).contains(&audio.len()),
            "{} Opus frames from {aac} AAC frames",
            audio.len()
        );
        assert!(audio.windows(2).all(|w| w[1].rtp_ts - w[0].rtp_ts == 960));
        // Both tracks on the RTMP epoch: the first video packet at its tag's PTS
        // (timestamp + composition time) × 90, the first Opus frame at the first raw AAC
        // tag's timestamp × 48.
        let tags = flv_tags(SAMPLE);
        let (vt, vb) = tags
            .iter()
            .find(|(ty, _, b)| *ty == 9 && b[1] == 1)
            .map(|(_, t, b)| (*t, *b))
            .expect("a video frame");
        let cts = i64::from(i32::from_be_bytes([vb[2], vb[3], vb[4], 0]) >> 8);
        assert_eq!(video[0].rtp_ts as i64, (i64::from(vt) + cts) * 90);
        let at = tags
            .iter()
            .find(|(ty, _, b)| *ty == 8 && b[1] == 1)
            .map(|(_, t, _)| *t)
            .expect("an AAC frame");
        assert_eq!(audio[0].rtp_ts, u64::from(at) * 48);
        // One NTP timeline: capture times differ exactly as media times do (to 1 ms).
        let ms = (1i64 << 32) / 1000;
        for (v, a) in [
            (video[0], audio[0]),
            (video[video.len() / 2], audio[audio.len() / 2]),
        ] {
            let (vn, an) = (v.capture_ntp.expect("ntp"), a.capture_ntp.expect("ntp"));
            let media = ntp_of(v.rtp_ts as i64, 90_000) - ntp_of(a.rtp_ts as i64, 48_000);
            let capture = vn.wrapping_sub(an) as i64;
            assert!((capture - media).abs() < ms, "{capture} vs {media}");
        }

        // The Opus decodes back to the 440 Hz sine.
        let mut dec = opus::Decoder::new(48_000, opus::Channels::Stereo).expect("decoder");
        let mut pcm = Vec::new();
        let mut frame = vec![0f32; 960 * 2];
        for a in &audio {
            let n = dec
                .decode_float(&a.payload, &mut frame, false)
                .expect("decode");
            assert_eq!(n, 960);
            pcm.extend(frame.chunks(2).map(|s| s[0]));
        }
        let tail = &pcm[pcm.len() / 2..];
        let rms = (tail.iter().map(|v| v * v).sum::<f32>() / tail.len() as f32).sqrt();
        assert!(rms > 0.05, "audible: rms {rms}");
        let share = tone_share(tail, 440.0, 48_000.0);
        assert!(share > 0.9, "440 Hz holds {share:.3} of the power");
        assert!(tone_share(tail, 1000.0, 48_000.0) < 0.01);
    }

    #[test]
    fn unsupported_codecs_are_errors() {
        let mut p = RtmpPublisher::new(3, 1200);
        let mut input = vec![VERSION];
        input.extend([0u8; 2 * HANDSHAKE_SIZE]);
        let mut w = ChunkWriter::new();
        command(
            &mut w,
            0,
            &[
                Value::String("connect".into()),
                Value::Number(1.0),
                object([("app", Value::String("live".into()))]),
            ],
            &mut input,
        );
        command(
            &mut w,
            1,
            &[
                Value::String("publish".into()),
                Value::Number(0.0),
                Value::Null,
                Value::String("cam".into()),
            ],
            &mut input,
        );
        p.receive(0, &input, &mut |_| {}).expect("ok");
        p.accept_publish().expect("accept");
        // MP3 audio (sound format 2).
        let mut b = Vec::new();
        w.write(4, 0, MSG_AUDIO, 1, &[0x2f, 0xff, 0xfb], &mut b)
            .expect("w");
        let err = p.receive(0, &b, &mut |_| {}).expect_err("mp3 refused");
        assert!(err.to_string().contains("sound format 2"), "{err}");
    }

    /// With renditions a B-frame stream is decoded once, for the renditions and the
    /// transcoder: layers 1 and 2 come out of the sink at their sizes (decoded back),
    /// Baseline, with IDRs where the source has them and where a viewer asked, on the
    /// source's timeline; layer 0 passes through without a viewer and is transcoded (by the
    /// shared decoder's pictures, no GOP kept) with one.
    #[test]
    fn renditions_and_the_transcoder_share_one_decoder() {
        use crate::renditions::RenditionEvent;
        use crate::renditions::tests::{decoded, keeping_sink, layer_frames, spec};
        let Some(flv) = crate::video_transcode::tests::b_frame_sample(3, "flv") else {
            eprintln!("ffmpeg not installed: skipped");
            return;
        };
        let mut p = RtmpPublisher::new(5, 1200);
        let mut w = start_publishing(&mut p);
        let (sink, kept) = keeping_sink(std::time::Duration::ZERO);
        p.set_renditions(&[spec("m", 64, 300), spec("l", 32, 100)], sink)
            .expect("renditions");
        let tags = flv_tags(&flv);
        // One tag at a time, each rendition done before the next (no drops in a test).
        let mut phase = |p: &mut RtmpPublisher, from: u32, to: u32| {
            let (mut packets, mut notices) = (Vec::new(), Vec::new());
            for (ty, ts, body) in &tags {
                if *ty != 9 || !(from..to).contains(ts) {
                    continue;
                }
                let mut bytes = Vec::new();
                w.write(6, *ts, MSG_VIDEO, 1, body, &mut bytes)
                    .expect("write");
                p.receive(1 << 40, &bytes, &mut |e| match e {
                    RtmpEvent::Packet(pk) => packets.push(pk),
                    RtmpEvent::Video(n) => notices.push(n),
                    _ => {}
                })
                .expect("media");
                p.renditions.as_ref().expect("renditions").drain();
            }
            (packets, notices)
        };
        let (pass, notices) = phase(&mut p, 0, 1000);
        assert_eq!(notices, [VideoNotice::BFrames]);
        assert!(pass.iter().all(|k| k.layer == 0));
        p.set_viewers(true);
        let (coded, notices) = phase(&mut p, 1000, 1500);
        assert_eq!(notices, [VideoNotice::TranscodeStarted]);
        let t = p.reorder.transcoder.as_ref().expect("transcoding");
        assert!(t.is_fed(), "on the renditions' decoder");
        assert!(p.reorder.gop.is_empty(), "no GOP kept");
        p.request_layer_keyframe(2);
        let (coded2, _) = phase(&mut p, 1500, 2000);
        p.set_viewers(false);
        let (back, notices) = phase(&mut p, 2000, 3000);
        assert!(
            matches!(&notices[..], [VideoNotice::TranscodeStopped(s)] if s.frames_out >= 25),
            "{notices:?}"
        );
        // Layer 0: transcoded from the first frame after what was passed through, Baseline,
        // in display order, numbering dense across the three phases.
        let coded: Vec<&IngestPacket> = coded.iter().chain(&coded2).collect();
        assert!(h264::is_keyframe(&coded[0].payload));
        assert_eq!(
            h264::sps_profile_level_id(&coded[0].payload).map(|s| s[0]),
            Some(66)
        );
        let ts: Vec<u64> = coded
            .iter()
            .filter(|k| k.marker)
            .map(|k| k.rtp_ts)
            .collect();
        assert!(
            ts.len() >= 25 && ts.windows(2).all(|w| w[1] > w[0]),
            "{ts:?}"
        );
        let max_pass = pass.iter().map(|k| k.rtp_ts).max().expect("passed");
        assert!(ts[0] > max_pass, "never back in time");
        let all: Vec<&IngestPacket> = pass.iter().chain(coded).chain(&back).collect();
        assert!(all.windows(2).all(|w| w[1].seq == w[0].seq + 1));
        let stats = p.rendition_stats();
        drop(p);
        let events = std::mem::take(&mut *kept.lock().expect("events"));
        let RenditionEvent::Started { source, sizes } = &events[0] else {
            panic!("first the sizes: {:?}", events.first());
        };
        assert_eq!(*source, (160, 96));
        let sizes: Vec<(u8, &str, u32, u32)> = sizes
            .iter()
            .map(|s| (s.layer, &*s.rid, s.width, s.height))
            .collect();
        assert_eq!(sizes, [(1, "m", 106, 64), (2, "l", 54, 32)]);
        assert!(matches!(events.last(), Some(RenditionEvent::Stopped(s)) if s.len() == 2));
        // The source's keyframes: FLV frame type 1, pts = timestamp + composition time.
        let source_keys: Vec<u64> = tags
            .iter()
            .filter(|(ty, _, b)| *ty == 9 && b[0] >> 4 == 1 && b[1] == 1)
            .map(|(_, t, b)| {
                u64::from(*t) + (i32::from_be_bytes([b[2], b[3], b[4], 0]) >> 8) as u64
            })
            .collect();
        assert_eq!(source_keys.len(), 3, "{source_keys:?}");
        let mut keys = Vec::new();
        for (layer, size) in [(1u8, (106, 64)), (2, (54, 32))] {
            let s = &stats[usize::from(layer) - 1];
            // libx264 holds the newest picture until the next one's timestamp gives its
            // duration (variable frame rate: see open_x264).
            assert_eq!((s.dropped, s.frames_in), (0, s.frames_out + 1), "{s:?}");
            let frames = layer_frames(&events, layer);
            // 90 source frames, less the decoder's reordering delay at the end.
            assert!(frames.len() >= 85, "layer {layer}: {} frames", frames.len());
            assert!(frames.windows(2).all(|w| w[1].0 > w[0].0), "display order");
            // On the source's timeline: every frame at a source frame's pts x 90.
            assert!(frames.iter().all(|f| f.0 % 90 == 0 && f.0 / 90 < 3000));
            let key_ts: Vec<u64> = frames.iter().filter(|f| f.1).map(|f| f.0 / 90).collect();
            for k in &source_keys {
                assert!(
                    key_ts.contains(k),
                    "layer {layer}: an IDR at the source's {k} ms: {key_ts:?}"
                );
            }
            keys.push(key_ts);
            let (pictures, profiles) = decoded(&events, layer);
            assert_eq!(pictures.len(), frames.len(), "every frame decodes");
            assert!(
                pictures.iter().all(|&p| p == size),
                "layer {layer}: {pictures:?}"
            );
            assert!(
                !profiles.is_empty() && profiles.iter().all(|&p| p == 66),
                "Baseline"
            );
        }
        assert_eq!(keys[0], source_keys, "layer 1: the source's IDRs");
        // Layer 2: also one where it was asked for (between 1500 and 2000 ms).
        let asked: Vec<&u64> = keys[1]
            .iter()
            .filter(|k| !source_keys.contains(k))
            .collect();
        assert!(
            keys[1].len() == 4 && asked.len() == 1 && (1400..2000).contains(asked[0]),
            "layer 2: {:?}",
            keys[1]
        );
    }

    /// B-frames are reported; with viewers the video is transcoded (Baseline, no
    /// reordering, starting on a keyframe), without them it passes through again from the
    /// next source keyframe; sequence numbers stay dense throughout.
    #[test]
    fn b_frames_are_transcoded_while_wanted() {
        let Some(flv) = crate::video_transcode::tests::b_frame_sample(3, "flv") else {
            eprintln!("ffmpeg not installed: skipped");
            return;
        };
        let mut p = RtmpPublisher::new(5, 1200);
        let mut w = start_publishing(&mut p);
        let tags = flv_tags(&flv);
        let mut phase = |p: &mut RtmpPublisher, from: u32, to: u32| {
            let mut bytes = Vec::new();
            for (ty, ts, body) in &tags {
                if *ty == 9 && (from..to).contains(ts) {
                    w.write(6, *ts, MSG_VIDEO, 1, body, &mut bytes)
                        .expect("write");
                }
            }
            let (mut packets, mut notices) = (Vec::new(), Vec::new());
            p.receive(1 << 40, &bytes, &mut |e| match e {
                RtmpEvent::Packet(pk) => packets.push(pk),
                RtmpEvent::Video(n) => notices.push(n),
                _ => {}
            })
            .expect("media");
            (packets, notices)
        };
        // The first second, nobody watching: reported, passed through (display order
        // differs from decode order in the RTP timestamps).
        let (pass, notices) = phase(&mut p, 0, 1000);
        assert_eq!(notices, [VideoNotice::BFrames]);
        assert!(p.has_b_frames());
        let ts: Vec<u64> = pass.iter().filter(|k| k.marker).map(|k| k.rtp_ts).collect();
        assert!(
            ts.windows(2).any(|w| w[1] < w[0]),
            "passthrough keeps the reordering"
        );
        // A viewer: transcoded from the next frame on.
        p.set_viewers(true);
        let (coded, notices) = phase(&mut p, 1000, 2000);
        assert_eq!(notices, [VideoNotice::TranscodeStarted]);
        assert!(p.transcode_stats().is_some());
        assert!(h264::is_keyframe(&coded[0].payload), "starts on a keyframe");
        let sps = h264::sps_profile_level_id(&coded[0].payload).expect("SPS in front");
        assert_eq!(sps[0], 66, "Baseline");
        let ts: Vec<u64> = coded
            .iter()
            .filter(|k| k.marker)
            .map(|k| k.rtp_ts)
            .collect();
        assert!(ts.len() >= 25, "{} frames out of 30", ts.len());
        assert!(
            ts.windows(2).all(|w| w[1] > w[0]),
            "no reordering left: {ts:?}"
        );
        // The viewer left: back to passthrough, from the source keyframe at 2 s.
        p.set_viewers(false);
        let (back, notices) = phase(&mut p, 2000, 3000);
        assert!(
            matches!(&notices[..], [VideoNotice::TranscodeStopped(s)] if s.frames_out >= 25),
            "{notices:?}"
        );
        assert!(p.transcode_stats().is_none());
        assert!(h264::is_keyframe(&back[0].payload));
        let all: Vec<&IngestPacket> = pass.iter().chain(&coded).chain(&back).collect();
        assert!(
            all.windows(2).all(|w| w[1].seq == w[0].seq + 1),
            "dense numbering"
        );
    }
}

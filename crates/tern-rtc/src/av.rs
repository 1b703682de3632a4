//! The encoded-media half of an ingest session, shared by RTMP and SRT: access units and
//! audio frames in (with their timestamps, as the encoder sent them), RTP-ready
//! [`IngestPacket`]s out, so both surfaces feed the engine through one path:
//!
//! * H264: each access unit becomes RTP payloads (RFC 6184 mode 1, SPS/PPS in a STAP-A in
//!   front of keyframes) with the RTP timestamp PTS × 90 (ms); B-frame video goes through
//!   the transcoder while the stream has viewers ([`crate::video_transcode`]); renditions
//!   are made from it ([`crate::renditions`]);
//! * H265 passes through ([`AvPipeline::h265_frame`]): RFC 7798 payloads
//!   ([`tern_proto::h265::packetize`]) at PTS × 90, no transcoder, no samples;
//! * Opus packets pass through ([`AvPipeline::opus_frame`]);
//! * AAC frames are transcoded to 20 ms Opus frames ([`crate::transcode`]) with the RTP
//!   timestamp ms × 48 at the start of the audio, advancing by samples; an AAC frame that
//!   does not decode is dropped and counted ([`AvPipeline::audio_dropped`]);
//! * every packet carries a capture time on one NTP timeline (`now` at the first media
//!   frame + media time), so the sender reports of the two tracks agree (lip sync);
//! * for a packager (LL-HLS), the frames as they came ([`Sample`]) while
//!   [`AvPipeline::set_samples`] is on.
//!
//! The container is the surface's: [`crate::rtmp::RtmpPublisher`] reads FLV tags off RTMP,
//! [`crate::ts_publisher::TsPublisher`] reads MPEG-TS off SRT. Timestamps here are
//! milliseconds on the publisher's own clock (RTMP's unit; TS's 90 kHz is divided down).
//! Sans-IO: the caller passes the time.

use std::sync::Arc;

use tern_proto::codec::MediaKind;
use tern_proto::h264;
use tern_proto::rtmp::flv::{AudioSpecificConfig, AvcConfig, AvcRtp, FlvError, avcc_nal_units};
use thiserror::Error;
use tracing::debug;

use crate::publisher::IngestPacket;
use crate::renditions::{RenditionSink, RenditionSpec, RenditionStats, Renditions, SourceFrame};
use crate::transcode::{AacToOpus, TranscodeError};
use crate::video_transcode::{EncodedFrame, H264Transcoder, TranscodeStats, VideoTranscodeError};

/// Why a publisher's media cannot go on.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum MediaError {
    /// A malformed or unsupported video configuration or frame.
    #[error(transparent)]
    Flv(#[from] FlvError),
    /// The audio could not be transcoded.
    #[error(transparent)]
    Transcode(#[from] TranscodeError),
    /// A malformed H265 access unit.
    #[error(transparent)]
    H265(#[from] tern_proto::h265::H265Error),
}

/// What the pipeline produces.
#[derive(Debug)]
pub enum AvEvent {
    /// A media packet, numbered in this publisher's own sequence and timestamp space.
    Packet(IngestPacket),
    /// Something about the video the caller reports (log, API, event).
    Video(VideoNotice),
    /// The publisher's media as it came, for a packager, while samples are on.
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
pub(crate) struct GopFrame {
    pts: i64,
    dts: i64,
    data: Vec<u8>,
}

/// The B-frame handling of one publisher.
#[derive(Debug, Default)]
pub(crate) struct Reorder {
    pub(crate) mode: TranscodeMode,
    /// The stream has viewers who need the transcoded video.
    pub(crate) wanted: bool,
    /// Highest pts seen; a frame below it means B-frames.
    pub(crate) max_pts: Option<i64>,
    pub(crate) b_frames: bool,
    /// The last sequence header (parameter sets and NAL length size).
    pub(crate) config: Option<AvcConfig>,
    pub(crate) gop: Vec<GopFrame>,
    pub(crate) gop_bytes: usize,
    /// Frames since the GOP's IDR (kept or not).
    pub(crate) gop_frames: usize,
    /// The GOP outgrew its bounds: nothing kept until the next keyframe.
    pub(crate) gop_broken: bool,
    /// The kept GOP starts with its IDR (false until the first keyframe).
    pub(crate) gop_key: bool,
    pub(crate) transcoder: Option<Box<H264Transcoder>>,
    /// The transcoder failed once: no second try on this connection.
    pub(crate) failed: bool,
    /// A whole GOP went by without B-frames: no more GOP keeping until some show.
    pub(crate) settled: bool,
    /// After transcoding stopped, passthrough resumes at the next source keyframe.
    pub(crate) wait_key: bool,
    /// Highest pts passed through untranscoded: the transcoder starts after it.
    pub(crate) passed_pts: Option<i64>,
    pub(crate) packetizer: h264::Packetizer,
}

/// The encoded-media state of one publisher.
#[derive(Debug)]
pub struct AvPipeline {
    avc: AvcRtp,
    audio: Option<AacToOpus>,
    video_seq: u64,
    audio_seq: u64,
    /// NTP time of media time 0 (set at the first media frame).
    ntp_base: Option<u64>,
    video_frames: u64,
    /// AAC frames that failed to decode and were dropped.
    audio_dropped: u64,
    /// The RTP timestamp the next passed-through Opus packet continues at.
    next_opus_ts: Option<u64>,
    max_payload: usize,
    pub(crate) reorder: Reorder,
    tap: SampleTap,
    /// Lower layers made from the video, with the decoder they share with the transcoder.
    pub(crate) renditions: Option<Box<Renditions>>,
}

/// `units` of a `rate` Hz clock as 64-bit NTP duration.
pub fn ntp_of(units: i64, rate: u32) -> i64 {
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

impl AvPipeline {
    /// A pipeline whose RTP payloads are at most `max_payload` bytes.
    pub fn new(max_payload: usize) -> Self {
        AvPipeline {
            avc: AvcRtp::new(max_payload),
            audio: None,
            video_seq: 0,
            audio_seq: 0,
            ntp_base: None,
            video_frames: 0,
            audio_dropped: 0,
            next_opus_ts: None,
            max_payload,
            reorder: Reorder::default(),
            tap: SampleTap::default(),
            renditions: None,
        }
    }

    /// Whether to emit [`AvEvent::Sample`]s (a packager reads the stream). Turning it on
    /// sends the current configurations before the next samples.
    pub fn set_samples(&mut self, on: bool) {
        if on && !self.tap.on {
            self.tap.video_config_sent = false;
            self.tap.audio_config_sent = false;
            self.tap.next_audio_pts = None;
        }
        self.tap.on = on;
    }

    /// Sends the current configurations again before the next samples (a packager that
    /// started reading while samples were on missed them).
    pub fn resend_configs(&mut self) {
        self.tap.video_config_sent = false;
        self.tap.audio_config_sent = false;
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
    /// through [`AvPipeline::video_frame`]'s events). Call it once the publish is accepted,
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
    /// [`AvPipeline::request_keyframe`], a rendition's layer from its encoder.
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

    /// AAC frames dropped because they did not decode (the stream goes on without them).
    pub fn audio_dropped(&self) -> u64 {
        self.audio_dropped
    }

    /// Video frames and (AAC in, Opus out) audio frames handled so far.
    pub fn counts(&self) -> (u64, u64, u64) {
        let (a, o) = self.audio.as_ref().map_or((0, 0), AacToOpus::counts);
        (self.video_frames, a, o)
    }

    /// Takes an AVCDecoderConfigurationRecord (the parameter sets and NAL length size).
    pub fn video_config(&mut self, record: &[u8]) -> Result<(), MediaError> {
        self.avc.set_config(record)?;
        self.reorder.config = Some(AvcConfig::parse(record)?);
        self.tap.video_config_sent = false;
        Ok(())
    }

    /// Whether a video configuration was taken.
    pub fn has_video_config(&self) -> bool {
        self.avc.has_config()
    }

    /// One H264 access unit: `body` is its NAL units each after a length of the
    /// configuration's size; `dts` and `pts` in ms on the publisher's clock.
    pub fn video_frame(
        &mut self,
        now_ntp: u64,
        dts: i64,
        pts: i64,
        keyframe: bool,
        body: &[u8],
        ev: &mut dyn FnMut(AvEvent),
    ) -> Result<(), MediaError> {
        if self.tap.on {
            self.video_sample(dts, pts, keyframe, body, ev)?;
        }
        let r = &mut self.reorder;
        if !r.b_frames && r.max_pts.is_some_and(|m| pts < m) {
            r.b_frames = true;
            ev(AvEvent::Video(VideoNotice::BFrames));
        }
        r.max_pts = Some(r.max_pts.map_or(pts, |m| m.max(pts)));
        // Frames are kept from the first GOP on, before B-frames show (the first is
        // usually the third frame): a transcoder needs the GOP's IDR.
        let probing = !r.b_frames && !r.settled;
        let transcode = (r.b_frames || probing) && r.mode == TranscodeMode::Auto && !r.failed;
        // Annex B for the decoders, when one will read the frame.
        let annex_b = match &r.config {
            Some(cfg) if transcode || self.renditions.is_some() => Some(annex_b(cfg, body)?),
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
            if !keyframe {
                return Ok(());
            }
            self.reorder.wait_key = false;
        }
        let passed = &mut self.reorder.passed_pts;
        *passed = Some(passed.map_or(pts, |m| m.max(pts)));
        let rtp_ts = pts * 90;
        let capture_ntp = Some(self.capture(now_ntp, dts, rtp_ts, 90_000));
        let mut packets = Vec::new();
        self.avc.frame(body, &mut |payload, last| {
            packets.push((Arc::<[u8]>::from(payload), last));
        })?;
        if !packets.is_empty() {
            self.video_frames += 1;
        }
        self.emit_video(packets, rtp_ts, capture_ntp, ev);
        Ok(())
    }

    /// One H265 access unit, passed through: `au` is its NAL units each after a 4-byte
    /// length (the caller puts the parameter sets in front of IRAP pictures); `dts` and
    /// `pts` in ms on the publisher's clock. The RTP timestamp is PTS × 90, as H264's; the
    /// frame goes out in the order given (no transcoder: B-frames reach viewers as sent).
    pub fn h265_frame(
        &mut self,
        now_ntp: u64,
        dts: i64,
        pts: i64,
        au: &[u8],
        ev: &mut dyn FnMut(AvEvent),
    ) -> Result<(), MediaError> {
        let rtp_ts = pts.max(0) * 90;
        let mut packets = Vec::new();
        tern_proto::h265::packetize(au, self.max_payload, &mut |payload, last| {
            packets.push((Arc::<[u8]>::from(payload), last));
        })?;
        if packets.is_empty() {
            return Ok(());
        }
        let capture_ntp = Some(self.capture(now_ntp, dts, rtp_ts, 90_000));
        self.video_frames += 1;
        self.emit_video(packets, rtp_ts, capture_ntp, ev);
        Ok(())
    }

    /// Takes an AAC AudioSpecificConfig: the transcoder to Opus starts over with it.
    pub fn audio_config(&mut self, asc: &[u8]) -> Result<(), MediaError> {
        self.audio = Some(AacToOpus::new(asc)?);
        // AacToOpus::new parsed it already; a config it takes parses here too.
        self.tap.asc = AudioSpecificConfig::parse(asc)
            .ok()
            .map(|c| (asc.to_vec(), c));
        self.tap.audio_config_sent = false;
        Ok(())
    }

    /// One Opus packet of `samples` (48 kHz) at `ms` on the publisher's clock, passed
    /// through: RTP timestamps go on by samples from the first packet, re-anchored at `ms`
    /// × 48 when the two drift apart by more than [`crate::transcode::MAX_DRIFT_MS`].
    pub fn opus_frame(
        &mut self,
        now_ntp: u64,
        ms: i64,
        samples: u32,
        packet: &[u8],
        ev: &mut dyn FnMut(AvEvent),
    ) {
        let at = (ms.max(0) as u64) * 48;
        let ts = match self.next_opus_ts {
            Some(n) if n.abs_diff(at) <= crate::transcode::MAX_DRIFT_MS as u64 * 48 => n,
            _ => at,
        };
        self.next_opus_ts = Some(ts + u64::from(samples));
        self.audio_packet(now_ntp, ms, ts, Arc::from(packet), ev);
    }

    /// Hands on one Opus packet at 48 kHz time `ts` (media time `ms`), numbered next.
    fn audio_packet(
        &mut self,
        now_ntp: u64,
        ms: i64,
        ts: u64,
        payload: Arc<[u8]>,
        ev: &mut dyn FnMut(AvEvent),
    ) {
        let capture_ntp = Some(self.capture(now_ntp, ms, ts as i64, 48_000));
        let seq = self.audio_seq;
        self.audio_seq += 1;
        ev(AvEvent::Packet(IngestPacket {
            layer: 0,
            kind: MediaKind::Audio,
            seq,
            rtp_ts: ts,
            marker: false,
            payload,
            capture_ntp,
        }));
    }

    /// One raw AAC frame at `ms` on the publisher's clock.
    pub fn audio_frame(
        &mut self,
        now_ntp: u64,
        ms: i64,
        raw: &[u8],
        ev: &mut dyn FnMut(AvEvent),
    ) -> Result<(), MediaError> {
        if self.tap.on {
            self.audio_sample(ms, raw, ev);
        }
        let Some(t) = self.audio.as_mut() else {
            // Raw AAC before its sequence header cannot be decoded.
            return Ok(());
        };
        let mut frames = Vec::new();
        let res = t.push(raw, ms.max(0) as u64, &mut |p, ts| {
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
            self.audio_packet(now_ntp, ms, ts, payload, ev);
        }
        Ok(())
    }

    /// Capture time of media time `units` at `rate` Hz.
    fn capture(&mut self, now_ntp: u64, ms: i64, units: i64, rate: u32) -> u64 {
        let base = *self
            .ntp_base
            .get_or_insert_with(|| (now_ntp as i64).wrapping_sub(ntp_of(ms, 1000)) as u64);
        (base as i64).wrapping_add(ntp_of(units, rate)) as u64
    }

    /// The access unit as a [`Sample::Video`] (preceded by the parameter sets when due).
    fn video_sample(
        &mut self,
        dts: i64,
        pts: i64,
        keyframe: bool,
        body: &[u8],
        ev: &mut dyn FnMut(AvEvent),
    ) -> Result<(), MediaError> {
        let Some(cfg) = &self.reorder.config else {
            // Frames before their sequence header cannot be decoded by anyone.
            return Ok(());
        };
        if !self.tap.video_config_sent {
            let (Some(sps), Some(pps)) = (cfg.sps.first(), cfg.pps.first()) else {
                return Ok(());
            };
            // The audio configuration too, when its sequence header came already: a
            // packager (LL-HLS, a recording) then starts with both tracks rather than
            // restart when the first audio frame follows the first keyframe.
            if let (false, Some((asc, a))) = (self.tap.audio_config_sent, &self.tap.asc) {
                ev(AvEvent::Sample(Sample::AudioConfig {
                    asc: asc.clone(),
                    sample_rate: a.sample_rate,
                    channels: a.channels,
                }));
                self.tap.audio_config_sent = true;
            }
            ev(AvEvent::Sample(Sample::VideoConfig {
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
        ev(AvEvent::Sample(Sample::Video {
            dts_ms: dts,
            pts_ms: pts,
            keyframe,
            avcc,
        }));
        Ok(())
    }

    /// A raw AAC frame at `ms` as a [`Sample::Audio`] (preceded by its configuration).
    fn audio_sample(&mut self, ms: i64, frame: &[u8], ev: &mut dyn FnMut(AvEvent)) {
        let Some((asc, cfg)) = &self.tap.asc else {
            return;
        };
        if !self.tap.audio_config_sent {
            ev(AvEvent::Sample(Sample::AudioConfig {
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
        ev(AvEvent::Sample(Sample::Audio {
            pts,
            data: frame.to_vec(),
        }));
    }

    fn emit_video(
        &mut self,
        packets: Vec<(Arc<[u8]>, bool)>,
        rtp_ts: i64,
        capture_ntp: Option<u64>,
        ev: &mut dyn FnMut(AvEvent),
    ) {
        for (payload, marker) in packets {
            let seq = self.video_seq;
            self.video_seq += 1;
            ev(AvEvent::Packet(IngestPacket {
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
    /// the transcoder ([`AvPipeline::decode_shared`]): no GOP is kept, and a transcoder
    /// starts at any frame.
    fn transcode(
        &mut self,
        now_ntp: u64,
        pts: i64,
        dts: i64,
        annex_b: &[u8],
        idr: bool,
        ev: &mut dyn FnMut(AvEvent),
    ) -> Result<bool, MediaError> {
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
                ev(AvEvent::Video(VideoNotice::TranscodeStopped(t.stats())));
            }
        } else if r.transcoder.is_none() && shared && r.gop_key {
            // Past what was passed through: the shared decoder's next pictures.
            match H264Transcoder::fed() {
                Ok(mut t) => {
                    if let Some(p) = r.passed_pts {
                        t.skip_through(p);
                    }
                    r.transcoder = Some(Box::new(t));
                    ev(AvEvent::Video(VideoNotice::TranscodeStarted));
                }
                Err(e) => {
                    r.failed = true;
                    ev(AvEvent::Video(VideoNotice::TranscodeFailed(e.to_string())));
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
                    ev(AvEvent::Video(VideoNotice::TranscodeStarted));
                }
                Err(e) => {
                    r.failed = true;
                    ev(AvEvent::Video(VideoNotice::TranscodeFailed(e.to_string())));
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
            ev(AvEvent::Video(VideoNotice::TranscodeFailed(e.to_string())));
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
        ev: &mut dyn FnMut(AvEvent),
    ) -> Result<(), MediaError> {
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
            ev(AvEvent::Video(VideoNotice::TranscodeFailed(e.to_string())));
        }
        self.emit_transcoded(now_ntp, frames, ev)
    }

    /// The transcoder's frames as layer-0 RTP.
    fn emit_transcoded(
        &mut self,
        now_ntp: u64,
        frames: Vec<EncodedFrame>,
        ev: &mut dyn FnMut(AvEvent),
    ) -> Result<(), MediaError> {
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
}

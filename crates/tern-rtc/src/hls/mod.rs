//! LL-HLS packaging (RFC 8216bis with Apple's low-latency extensions): one [`Packager`] per
//! stream turns already-demuxed H264 access units and AAC or Opus frames into CMAF fMP4 parts
//! and segments, keeps a bounded window of them in memory and renders the media playlist.
//!
//! Sans-IO like the rest of the crate: no clock, socket or thread. The HTTP side calls it
//! under a mutex: it pushes samples with the wall-clock time they arrived (`wall_ms`, used
//! only for `EXT-X-PROGRAM-DATE-TIME` and to line the audio track up with the video track),
//! then serves [`Packager::media_playlist`], [`Packager::init`], [`Packager::part`] and
//! [`Packager::segment`], waking blocked playlist requests when [`Packager::version`] moves.
//!
//! # Timeline
//! - A segment starts at a video keyframe (audio-only streams: at any frame), the first one
//!   at or after `segment_target` of media time since the segment start. Everything before
//!   the first keyframe is dropped and counted.
//! - A part closes when the next video sample arrives and would make it longer than
//!   `part_target` (its duration is estimated from the last sample's), or at a segment
//!   boundary, so that parts are at most the part target (a single sample longer than the
//!   target, after a gap, is the exception). A sample's duration is known when the next one
//!   arrives, so a part is published as soon as the first sample of the next one arrives.
//! - Audio frames are queued and go into the next part that closes: audio lags video by up
//!   to a part, which players accept.
//! - Output decode times start at 0 and never go backwards. A track's first sample is placed
//!   on the output timeline by its arrival time relative to the first video keyframe, so the
//!   input tracks need no common clock (RTP timestamps have random offsets); for exact lip
//!   sync pass capture times as `wall_ms`.
//! - A video dts going backwards or jumping forward by more than 5 s (a new publisher), a
//!   codec configuration change, or a segment growing past ten segment targets without a
//!   keyframe closes the segment in progress; the next one starts at the next keyframe with
//!   `EXT-X-DISCONTINUITY` (and a new `EXT-X-MAP` when the configuration changed).
//!
//! # Why `mp4-atom`
//! Boxes are encoded with the `mp4-atom` crate (kixelated): it is maintained, encodes and
//! decodes every box CMAF needs (ftyp, moov down to avcC/esds/dOps, mvex/trex,
//! moof/traf/tfhd/tfdt/trun, mdat) from plain structs, and is what moq uses for the same job.
//! The tests parse our output back with it. Only the mdat is written by hand (its header
//! through `mp4_atom::Header`), so that sample bytes are copied once, from the staging
//! buffers into the part buffer, rather than through an intermediate `Mdat` vector.

mod av1c;
pub mod file;
mod first_audio;
mod fmp4;
mod ladder;
pub(crate) mod nal;
mod playlist;
pub(crate) mod sps;
mod timeline;

#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tern_pool::PoolCounter;

use fmp4::{SampleInfo, VIDEO_TIMESCALE};

/// How long a stream's first segment waits for its audio ([`Packager::await_audio`]): a
/// WebRTC publisher's audio comes within a few frames of its video, an MPEG-TS muxer's
/// within its interleaving delay (ffmpeg's: 0.7 s at most).
pub const AWAIT_AUDIO: Duration = Duration::from_secs(1);

/// Packager settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HlsConfig {
    /// The part target duration (`EXT-X-PART-INF:PART-TARGET`). Default 500 ms: Apple's
    /// LL-HLS guidance suggests about 1 s or less; a third of the 2 s segment gives four parts
    /// per segment and a `PART-HOLD-BACK` of 1.5 s.
    pub part_target: Duration,
    /// The segment target duration: a segment ends at the first keyframe at or after this
    /// much media time. Default 2 s (Apple recommends 1-4 s segments for LL-HLS).
    pub segment_target: Duration,
    /// Complete segments listed in the playlist and held in memory. Default 6: RFC 8216bis
    /// 6.2.2 wants a live playlist to span at least three target durations; six segments of
    /// 2 s give players 12 s to start from.
    pub window: usize,
    /// Part buffers kept for reuse after their segment leaves the window. Default 16: a
    /// segment's worth (4 parts) several times over, so steady state allocates nothing.
    pub max_free_buffers: usize,
}

impl Default for HlsConfig {
    fn default() -> Self {
        HlsConfig {
            part_target: Duration::from_millis(500),
            segment_target: Duration::from_secs(2),
            window: 6,
            max_free_buffers: 16,
        }
    }
}

/// The video codec configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VideoConfig {
    /// H264: the sequence and picture parameter sets as raw NAL units (header byte included,
    /// no start code, no length prefix).
    H264 {
        /// The SPS NAL unit.
        sps: Vec<u8>,
        /// The PPS NAL unit.
        pps: Vec<u8>,
    },
    /// H265: the video, sequence and picture parameter sets as raw NAL units (2-byte header
    /// included, no start code), stored in the `hvcC` (`hvc1` samples carry none).
    H265 {
        /// The VPS NAL unit.
        vps: Vec<u8>,
        /// The SPS NAL unit.
        sps: Vec<u8>,
        /// The PPS NAL unit.
        pps: Vec<u8>,
    },
    /// VP8 (RFC 6386): frames are stored as they are coded; the picture size comes from
    /// the last keyframe's header.
    Vp8 {
        /// Picture width in pixels.
        width: u16,
        /// Picture height in pixels.
        height: u16,
    },
    /// VP9 (the frames, superframes included, as coded); size and profile from the last
    /// key frame's header. Recordings only.
    Vp9 {
        /// Picture width in pixels.
        width: u16,
        /// Picture height in pixels.
        height: u16,
        /// Profile 0-3.
        profile: u8,
    },
    /// AV1: the sequence header OBU (its header, size field and payload), which goes into
    /// the `av1C` as its configOBUs and gives the `av1C` fields, the size and `CODECS`
    /// (`av01` samples are temporal units of sized OBUs without temporal delimiters).
    Av1 {
        /// The sequence header OBU.
        sequence_header: Vec<u8>,
    },
}

/// One part moved out of a packager by [`Packager::take_parts`] (recordings).
#[derive(Debug, Clone)]
pub struct TakenPart {
    /// The segment it belongs to: a new value starts a new segment (a new file).
    pub msn: u64,
    /// The init segment its samples need (ftyp + moov).
    pub init: Arc<Vec<u8>>,
    /// The moof + mdat bytes.
    pub data: Vec<u8>,
    /// Output decode time of its first driver sample, in `timescale` units.
    pub start: u64,
    /// Its duration, in `timescale` units.
    pub duration: u64,
    /// The timescale of the track that cuts parts (90 kHz, or the audio rate).
    pub timescale: u32,
    /// It starts with a keyframe.
    pub independent: bool,
    /// Unix ms of its segment's start (`EXT-X-PROGRAM-DATE-TIME`).
    pub segment_pdt_ms: u64,
    /// The RFC 6381 codecs of the init segment (`avc1.64001f,mp4a.40.2`).
    pub codecs: String,
}

/// The audio codec configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AudioConfig {
    /// AAC: frames are raw (no ADTS header), 1024 samples each.
    Aac {
        /// The AudioSpecificConfig (ISO/IEC 14496-3 1.6.2.1), as carried in the FLV/RTMP AAC
        /// sequence header.
        asc: Vec<u8>,
        /// Sample rate in Hz; also the track timescale.
        sample_rate: u32,
        /// Channel count.
        channels: u8,
    },
    /// Opus (48 kHz timescale; mono or stereo, channel mapping family 0).
    Opus {
        /// Channel count.
        channels: u8,
    },
}

/// Counters of one packager.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HlsStats {
    /// Parts held (those of complete segments in the window and of the segment in progress).
    pub parts: usize,
    /// Complete segments held.
    pub segments: usize,
    /// Bytes of the parts held.
    pub bytes: usize,
    /// Samples pushed (video access units and audio frames).
    pub samples_in: u64,
    /// Samples dropped: before the first keyframe, while waiting for a keyframe after a
    /// discontinuity, without a codec configuration, malformed, duplicate timestamps.
    pub dropped_samples: u64,
    /// Segments that started with `EXT-X-DISCONTINUITY`.
    pub discontinuities: u64,
    /// Highest bit rate (bit/s) of a complete segment held: a variant's `BANDWIDTH`.
    /// Before the first segment completes, the rate of its parts so far; 0 before any.
    pub peak_bitrate: u64,
    /// Bit rate (bit/s) over the complete segments held: a variant's `AVERAGE-BANDWIDTH`;
    /// 0 before the first segment completes.
    pub average_bitrate: u64,
    /// Video frames per 1000 s (a variant's `FRAME-RATE` times 1000, which RFC 8216bis
    /// 4.4.6.2 makes the variant's maximum): the highest rate of a complete segment held
    /// that lasts a second (or the segment target, when shorter) or more; before there is
    /// one, the rate over the parts held. 0
    /// before the first part or without video.
    pub frame_rate_milli: u64,
}

/// How far from a cut a lower variant's first keyframe may be and still be taken as the
/// top's keyframe's picture: 150 ms. Ingest lines a simulcast layer's clock up with the
/// others' by arrival when its timestamps have a base of their own (Chromium's do), which
/// leaves it off by up to tens of milliseconds; keyframes come only where asked for, on
/// every layer at once, so the nearest one is the same picture. The difference is then
/// taken out of the layer's clock (`Packager::follow_shift`). The ladder's owner holds a
/// lower layer's frames this long behind the top's, so that the cut is known first.
pub const START_TOLERANCE: i64 = 13_500;

/// Where a ladder's top variant started a segment (see [`Packager::follow`]): the other
/// variants of the ladder cut theirs at the same presentation time, under the same number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    /// The segment's media sequence number.
    pub msn: u64,
    /// Input decode time of its first video sample (90 kHz, the ladder's common clock).
    pub dts: i64,
    /// Input presentation time of that sample.
    pub pts: i64,
    /// Output decode time of that sample (90 kHz).
    pub out: u64,
    /// The segment starts with `EXT-X-DISCONTINUITY`.
    pub discontinuity: bool,
    /// Discontinuity tags from the stream's start through this segment's: every variant's
    /// segment `msn` has the same discontinuity sequence number (RFC 8216bis 6.2.4).
    pub discontinuity_sequence: u64,
    /// The segment's `EXT-X-PROGRAM-DATE-TIME`, unix ms.
    pub pdt_ms: u64,
}

/// One part as held: its moof+mdat bytes and what the playlist says about it.
pub(crate) struct PartEntry {
    pub data: Arc<Vec<u8>>,
    /// Output decode time of its first driver sample, in the segment's timescale.
    pub start: u64,
    /// In the segment's timescale.
    pub duration: u64,
    pub independent: bool,
}

/// One segment: its parts, complete or in progress.
pub(crate) struct Segment {
    pub msn: u64,
    pub parts: Vec<PartEntry>,
    /// Sum of the parts' durations, in `timescale` units.
    pub duration: u64,
    /// The timescale of the track that cuts parts (90 kHz, or the audio rate).
    pub timescale: u32,
    /// Output decode time of its first sample, in `timescale` units.
    pub start: u64,
    pub discontinuity: bool,
    pub init_version: u32,
    /// `EXT-X-PROGRAM-DATE-TIME`, unix ms.
    pub pdt_ms: u64,
    pub complete: bool,
    /// Video samples in its parts.
    pub video_samples: u64,
}

/// The track whose samples cut parts and segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Driver {
    Video,
    Audio,
}

/// Where media time and wall time were tied together: the start of the stream or of the
/// last discontinuity.
#[derive(Debug, Clone, Copy)]
struct Epoch {
    wall_ms: u64,
    /// Output decode time, in `timescale` units.
    out: u64,
    timescale: u32,
}

/// One track's samples not yet in a part, and its input to output time mapping.
struct Track {
    timescale: u32,
    samples: Vec<SampleInfo>,
    /// The bytes of `samples`, in order.
    data: Vec<u8>,
    /// The last sample's duration is not known yet (it is set when the next one arrives).
    held: bool,
    /// The fallback duration of the held sample (audio: its nominal duration; video: the
    /// previous sample's).
    held_nominal: u32,
    /// `(input base, output base)`: output = output base + (input - input base).
    map: Option<(i64, u64)>,
    /// Input timestamp of the last sample.
    last_in: i64,
    /// Output decode time and arrival (unix ms) of the last sample.
    last_out: u64,
    last_wall: u64,
    /// Output decode time where the next sample would start if contiguous.
    end: u64,
}

/// The LL-HLS packager of one stream. See the [module docs](self).
pub struct Packager {
    config: HlsConfig,
    counter: PoolCounter,
    video_cfg: Option<VideoConfig>,
    audio_cfg: Option<AudioConfig>,
    /// Video was configured or pushed: the stream is video-driven (no audio-only start).
    video_seen: bool,
    /// Arrival of the first audio frame, for the audio-only grace period.
    first_audio_wall: Option<u64>,
    video: Track,
    audio: Track,
    /// The track cutting parts, once the stream started. Between a discontinuity and the
    /// next segment start no segment is in progress and samples are dropped.
    driver: Option<Driver>,
    /// The next segment starts with `EXT-X-DISCONTINUITY`.
    pending_discontinuity: bool,
    /// The configuration changed since the current init segment was built.
    init_dirty: bool,
    epoch: Option<Epoch>,
    /// The init segments still referenced (and the current one, last).
    inits: Vec<(u32, Arc<Vec<u8>>)>,
    codecs: String,
    segments: VecDeque<Segment>,
    next_msn: u64,
    /// `mfhd` sequence number of the last part.
    sequence: u32,
    version: u64,
    /// Discontinuity tags among the evicted segments.
    evicted_discontinuities: u64,
    /// The largest complete segment duration seen, in whole seconds rounded up.
    max_segment_secs: u64,
    /// Where the last complete segment ended, in unix ms (PDT never goes backwards).
    last_pdt_end: u64,
    free: Vec<Vec<u8>>,
    /// Scratch buffer for converting an access unit.
    scratch: Vec<u8>,
    stats: HlsStats,
    /// The last segment a video sample started (what a ladder's other variants follow).
    last_cut: Option<Cut>,
    /// A ladder's lower variant: the top variant's latest cuts (at most `ladder::MAX_CUTS`),
    /// oldest first (`None` for a packager that cuts at its own keyframes).
    follow: Option<VecDeque<Cut>>,
    /// A lower variant waiting to start: the cut it began waiting at.
    follow_waiting: Option<u64>,
    /// A lower variant: what its clock is behind the top's (measured at its start).
    follow_shift: i64,
    /// A lower variant: the top's last audio frame's input and output times
    /// ([`Packager::follow_audio`]).
    follow_audio: Option<(i64, u64)>,
    /// A ladder's video variant: its audio is in the ladder's audio rendition, so it maps
    /// audio frames (for their anchor) but stores none ([`Packager::audio_apart`]).
    audio_apart: bool,
    /// A ladder's audio rendition: audio only, placed and cut as the top variant
    /// ([`Packager::audio_rendition`]).
    rendition: bool,
    /// Video held before the first segment for the audio ([`Packager::await_audio`]).
    audio_wait: Option<first_audio::AudioWait>,
}

impl std::fmt::Debug for Packager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packager")
            .field("config", &self.config)
            .field("next_part", &self.next_part())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Packager {
    /// A packager with nothing configured. `counter` accounts the part bytes held (`add` /
    /// `sub`, one item per part) and the capacity of the part buffers held or kept free for
    /// reuse (`reserve` / `unreserve`).
    pub fn new(config: HlsConfig, counter: PoolCounter) -> Packager {
        Packager {
            config,
            counter,
            video_cfg: None,
            audio_cfg: None,
            video_seen: false,
            first_audio_wall: None,
            video: Track::new(VIDEO_TIMESCALE),
            audio: Track::new(fmp4::OPUS_TIMESCALE),
            driver: None,
            pending_discontinuity: false,
            init_dirty: true,
            epoch: None,
            inits: Vec::new(),
            codecs: String::new(),
            segments: VecDeque::new(),
            next_msn: 0,
            sequence: 0,
            version: 0,
            evicted_discontinuities: 0,
            max_segment_secs: 0,
            last_pdt_end: 0,
            free: Vec::new(),
            scratch: Vec::new(),
            stats: HlsStats::default(),
            last_cut: None,
            follow: None,
            follow_waiting: None,
            follow_shift: 0,
            follow_audio: None,
            audio_apart: false,
            rendition: false,
            audio_wait: None,
        }
    }

    /// Sets the video configuration. The same one again is a no-op; a different one closes
    /// the segment in progress, and the next segment (at the next keyframe) starts with
    /// `EXT-X-DISCONTINUITY` and a new init segment version. An SPS shorter than 4 bytes, or a
    /// parameter set over 64 KiB, is ignored.
    pub fn set_video(&mut self, cfg: VideoConfig) {
        self.video_seen = true;
        let fits = match &cfg {
            // avcC stores each parameter set's length in 16 bits.
            VideoConfig::H264 { sps, pps } => {
                sps.len() >= 4 && sps.len() <= 0xffff && pps.len() <= 0xffff
            }
            // hvcC stores each NAL unit's length in 16 bits too.
            VideoConfig::H265 { vps, sps, pps } => {
                sps.len() >= 4 && [vps, sps, pps].iter().all(|n| n.len() <= 0xffff)
            }
            VideoConfig::Vp8 { width, height } | VideoConfig::Vp9 { width, height, .. } => {
                *width > 0 && *height > 0
            }
            // The size must fit the sample entry's 16 bits.
            VideoConfig::Av1 { sequence_header } => {
                av1_info(sequence_header).is_some_and(|i| i.width <= 0xffff && i.height <= 0xffff)
            }
        };
        if !fits || self.video_cfg.as_ref() == Some(&cfg) {
            return;
        }
        // What was held belongs to the configuration it came with (a first configuration,
        // in band with the first keyframe, finds nothing held and keeps the wait).
        self.drop_held();
        self.video_cfg = Some(cfg);
        self.config_changed();
    }

    /// Sets the audio configuration, with the same rules as [`set_video`](Self::set_video).
    /// Audio frames are dropped while there is none; one set after the stream started
    /// restarts it (new init version with an audio track) at the next keyframe.
    pub fn set_audio(&mut self, cfg: AudioConfig) {
        if self.audio_cfg.as_ref() == Some(&cfg) {
            return;
        }
        let timescale = fmp4::audio_timescale(&cfg);
        self.audio.end = timeline::rescale(self.audio.end, self.audio.timescale, timescale);
        self.audio.timescale = timescale;
        self.audio_cfg = Some(cfg);
        self.config_changed();
        // The first init can have the audio track now.
        self.release_video();
    }

    /// One H264 access unit: `dts`/`pts` in 90 kHz ticks (any origin; `pts >= dts` with
    /// B-frames), `avcc` its NAL units each with a 4-byte big-endian length, `wall_ms` the unix
    /// time it arrived. SPS, PPS and AUD units are left out of the sample; an SPS+PPS pair
    /// in it sets the video configuration if there is none yet. A malformed AU is dropped.
    pub fn push_video(&mut self, dts: i64, pts: i64, keyframe: bool, avcc: &[u8], wall_ms: u64) {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let params = nal::avcc_to_sample(avcc, &mut scratch);
        if let Some(nal::ParamSets {
            sps: Some(sps),
            pps: Some(pps),
        }) = params
            && self.video_cfg.is_none()
        {
            self.set_video(VideoConfig::H264 {
                sps: sps.to_vec(),
                pps: pps.to_vec(),
            });
        }
        self.video_sample(dts, pts, keyframe, params.is_some(), &scratch, wall_ms);
        self.scratch = scratch;
    }

    /// The same for an Annex B access unit (start codes), converted to AVCC. An SPS+PPS
    /// pair in it sets the video configuration as [`set_video`](Self::set_video) does: a new
    /// init version and a discontinuity when it differs from the current one (a new
    /// publisher), nothing when it is the same.
    pub fn push_video_annexb(
        &mut self,
        dts: i64,
        pts: i64,
        keyframe: bool,
        annexb: &[u8],
        wall_ms: u64,
    ) {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let params = nal::annexb_to_sample(annexb, &mut scratch);
        if let (Some(sps), Some(pps)) = (params.sps, params.pps) {
            self.set_video(VideoConfig::H264 {
                sps: sps.to_vec(),
                pps: pps.to_vec(),
            });
        }
        self.video_sample(dts, pts, keyframe, true, &scratch, wall_ms);
        self.scratch = scratch;
    }

    /// One H265 access unit in Annex B (as the RTP payloads rebuild it, RFC 7798), `dts`
    /// and `pts` in 90 kHz ticks. Its VPS, SPS and PPS, when it carries all three, set the
    /// video configuration as [`set_video`](Self::set_video) does; they and access unit
    /// delimiters are left out of the sample. Samples wait for an H265 configuration.
    pub fn push_h265(&mut self, dts: i64, pts: i64, keyframe: bool, annexb: &[u8], wall_ms: u64) {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let params = nal::annexb_h265_to_sample(annexb, &mut scratch);
        if let (Some(vps), Some(sps), Some(pps)) = (params.vps, params.sps, params.pps) {
            self.set_video(VideoConfig::H265 {
                vps: vps.to_vec(),
                sps: sps.to_vec(),
                pps: pps.to_vec(),
            });
        }
        let h265 = matches!(self.video_cfg, Some(VideoConfig::H265 { .. }));
        self.video_sample(dts, pts, keyframe, h265, &scratch, wall_ms);
        self.scratch = scratch;
    }

    /// One VP8 frame (RFC 6386, as the RTP payloads rebuild it), `dts` in 90 kHz ticks. A
    /// keyframe's header gives the picture size, which sets the video configuration (a new
    /// size is a new init segment, as a new SPS is). A truncated keyframe is dropped.
    pub fn push_vp8(&mut self, dts: i64, frame: &[u8], wall_ms: u64) {
        let keyframe = frame.first().is_some_and(|b| b & 1 == 0);
        if keyframe {
            // RFC 6386 9.1: 3-byte frame tag, start code 9d 01 2a, then 14-bit width and
            // height (2 bits of scaling each).
            match frame.get(3..10) {
                Some([0x9d, 0x01, 0x2a, w0, w1, h0, h1]) => {
                    let width = u16::from_le_bytes([*w0, *w1]) & 0x3fff;
                    let height = u16::from_le_bytes([*h0, *h1]) & 0x3fff;
                    self.set_video(VideoConfig::Vp8 { width, height });
                }
                _ => {
                    self.stats.samples_in += 1;
                    self.stats.dropped_samples += 1;
                    return;
                }
            }
        }
        let vp8 = matches!(self.video_cfg, Some(VideoConfig::Vp8 { .. }));
        self.video_sample(dts, dts, keyframe, vp8, frame, wall_ms);
    }

    /// One VP9 frame or superframe (RFC 9628 payloads rebuilt), `dts` in 90 kHz ticks. A key
    /// frame's header sets the video configuration (size, profile). A frame whose header
    /// does not parse is dropped.
    pub fn push_vp9(&mut self, dts: i64, frame: &[u8], wall_ms: u64) {
        let Some(info) = tern_proto::vp9::frame_info(frame) else {
            self.stats.samples_in += 1;
            self.stats.dropped_samples += 1;
            return;
        };
        if info.keyframe {
            self.set_video(VideoConfig::Vp9 {
                width: info.width,
                height: info.height,
                profile: info.profile,
            });
        }
        let vp9 = matches!(self.video_cfg, Some(VideoConfig::Vp9 { .. }));
        self.video_sample(dts, dts, info.keyframe, vp9, frame, wall_ms);
    }

    /// One AV1 temporal unit in the low-overhead format (every OBU with its size field, as
    /// [`tern_proto::av1::Depacketizer`] rebuilds them), `dts` in 90 kHz ticks. A key
    /// frame's sequence header sets the video configuration; the sample is the unit without
    /// its temporal delimiter and padding OBUs (AV1-ISOBMFF §2.4). A unit with a malformed
    /// OBU is dropped.
    pub fn push_av1(&mut self, dts: i64, tu: &[u8], wall_ms: u64) {
        use tern_proto::av1::{OBU_PADDING, OBU_SEQUENCE_HEADER, OBU_TEMPORAL_DELIMITER};
        let keyframe = tern_proto::av1::is_keyframe_tu(tu);
        let mut sample = std::mem::take(&mut self.scratch);
        sample.clear();
        let mut sequence_header = None;
        let mut obus = tern_proto::av1::obus(tu);
        for obu in obus.by_ref() {
            if matches!(obu.obu_type, OBU_TEMPORAL_DELIMITER | OBU_PADDING) {
                continue;
            }
            let start = sample.len();
            // obu_type, obu_extension_flag, obu_has_size_field = 1.
            let ext = u8::from(obu.extension.is_some()) << 2;
            sample.push(obu.obu_type << 3 | ext | 0x02);
            sample.extend(obu.extension);
            tern_proto::av1::write_leb128(obu.payload.len(), &mut sample);
            sample.extend_from_slice(obu.payload);
            if obu.obu_type == OBU_SEQUENCE_HEADER {
                sequence_header = Some(start..sample.len());
            }
        }
        let malformed = obus.malformed();
        if let Some(range) = sequence_header.filter(|_| keyframe && !malformed) {
            self.set_video(VideoConfig::Av1 {
                sequence_header: sample[range].to_vec(),
            });
        }
        let av1 = !malformed && matches!(self.video_cfg, Some(VideoConfig::Av1 { .. }));
        self.video_sample(dts, dts, keyframe, av1, &sample, wall_ms);
        self.scratch = sample;
    }

    /// Whether a segment is in progress: `false` before the first keyframe and from a
    /// discontinuity to the next keyframe (samples are dropped meanwhile).
    pub fn in_progress(&self) -> bool {
        self.segments.back().is_some_and(|s| !s.complete)
    }

    /// Closes the part and the segment in progress, the held samples getting their
    /// nominal durations (a recording's clean stop, before its last
    /// [`take_parts`](Self::take_parts)).
    pub fn finish(&mut self) {
        self.release_video();
        self.close_segment(None);
    }

    /// Moves every part completed since the last call out of the packager, in order, into
    /// `out`: a recording writes them to a file instead of serving them. A packager used
    /// this way holds only the samples of the part in progress; [`part`](Self::part) and
    /// [`segment`](Self::segment) no longer find the parts taken.
    pub fn take_parts(&mut self, out: &mut Vec<TakenPart>) {
        for seg in &mut self.segments {
            if seg.parts.is_empty() {
                continue;
            }
            let Some(init) = self
                .inits
                .iter()
                .find(|(v, _)| *v == seg.init_version)
                .map(|(_, d)| d.clone())
            else {
                continue;
            };
            for part in seg.parts.drain(..) {
                self.counter.sub(1, part.data.len());
                self.counter.unreserve(part.data.capacity());
                let data = Arc::try_unwrap(part.data).unwrap_or_else(|shared| (*shared).clone());
                out.push(TakenPart {
                    msn: seg.msn,
                    init: init.clone(),
                    data,
                    start: part.start,
                    duration: part.duration,
                    timescale: seg.timescale,
                    independent: part.independent,
                    segment_pdt_ms: seg.pdt_ms,
                    codecs: self.codecs.clone(),
                });
            }
        }
    }

    /// One audio frame: a raw AAC frame (no ADTS) or one Opus packet, `pts` in the track's
    /// timescale (the AAC sample rate, or 48 kHz for Opus). Its duration is 1024 samples for
    /// AAC and read from the TOC byte for Opus, and stretched to the next frame's pts when
    /// frames are missing. Without a video configuration the stream is audio-only and starts
    /// once audio has flowed for a second with no video pushed.
    pub fn push_audio(&mut self, pts: i64, data: &[u8], wall_ms: u64) {
        self.audio_frame(pts, data, wall_ms);
    }

    /// Increases each time a part (and so possibly a segment) completes.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The init segment of that version (`init{version}.mp4`), while a held segment uses it
    /// or it is the current one.
    pub fn init(&self, version: u32) -> Option<Arc<Vec<u8>>> {
        self.inits
            .iter()
            .find(|(v, _)| *v == version)
            .map(|(_, data)| data.clone())
    }

    /// One completed part (moof + mdat) of segment `msn` (`{msn}.{part}.m4s`).
    pub fn part(&self, msn: u64, part: u32) -> Option<Arc<Vec<u8>>> {
        let seg = self.segment_ref(msn)?;
        seg.parts.get(part as usize).map(|p| p.data.clone())
    }

    /// A complete segment (`{msn}.m4s`): its parts in order, to be sent back to back.
    pub fn segment(&self, msn: u64) -> Option<Vec<Arc<Vec<u8>>>> {
        let seg = self.segment_ref(msn).filter(|s| s.complete)?;
        Some(seg.parts.iter().map(|p| p.data.clone()).collect())
    }

    /// Whether that part has completed and is held.
    pub fn has_part(&self, msn: u64, part: u32) -> bool {
        self.segment_ref(msn)
            .is_some_and(|s| (part as usize) < s.parts.len())
    }

    /// The part that will complete next (the `EXT-X-PRELOAD-HINT` target): the next part of
    /// the segment in progress, or part 0 of the next segment.
    pub fn next_part(&self) -> (u64, u32) {
        match self.segments.back() {
            Some(seg) if !seg.complete => (seg.msn, seg.parts.len() as u32),
            _ => (self.next_msn, 0),
        }
    }

    /// Whether a complete segment is held (what players without LL-HLS read).
    pub fn has_complete_segment(&self) -> bool {
        self.segments.iter().any(|s| s.complete)
    }

    /// The first segment still held, if any.
    pub fn oldest_msn(&self) -> Option<u64> {
        self.segments.front().map(|s| s.msn)
    }

    /// The media playlist, `None` until a part exists. `query` (without `?`, may be empty)
    /// is appended as `?query` to every URI.
    pub fn media_playlist(&self, query: &str) -> Option<String> {
        if self.segments.iter().all(|s| s.parts.is_empty()) {
            return None;
        }
        // RFC 8216bis 4.4.3.1 wants a constant target duration; ours grows when a segment
        // (a long GOP) runs past it, which players follow on reload.
        let target = timeline::ceil_secs(self.config.segment_target).max(self.max_segment_secs);
        let head = playlist::PlaylistHead {
            target_duration: target.max(1),
            part_target_secs: self.config.part_target.as_secs_f64(),
            discontinuity_sequence: self.evicted_discontinuities,
            next_part: self.next_part(),
        };
        Some(playlist::render(&head, self.segments.iter(), query))
    }

    /// The RFC 6381 codecs of the current init segment (`avc1.64001f,mp4a.40.2`), for a
    /// multivariant playlist; `None` before the first init segment.
    pub fn codecs(&self) -> Option<String> {
        (!self.inits.is_empty()).then(|| self.codecs.clone())
    }

    /// The audio's channel count (an audio rendition's `CHANNELS`); `None` before an
    /// audio configuration.
    pub fn audio_channels(&self) -> Option<u8> {
        match self.audio_cfg.as_ref()? {
            AudioConfig::Aac { channels, .. } | AudioConfig::Opus { channels } => Some(*channels),
        }
    }

    /// The video's picture size from its SPS (a multivariant playlist's `RESOLUTION`);
    /// `None` before a video configuration or when the SPS does not parse.
    pub fn resolution(&self) -> Option<(u32, u32)> {
        match self.video_cfg.as_ref()? {
            VideoConfig::H264 { sps, .. } => sps::parse_sps(sps).map(|i| (i.width, i.height)),
            VideoConfig::H265 { sps, .. } => sps::parse_h265_sps(sps).map(|i| (i.width, i.height)),
            VideoConfig::Vp8 { width, height } | VideoConfig::Vp9 { width, height, .. } => {
                Some((u32::from(*width), u32::from(*height)))
            }
            VideoConfig::Av1 { sequence_header } => {
                av1_info(sequence_header).map(|i| (i.width, i.height))
            }
        }
    }

    /// Counters.
    pub fn stats(&self) -> HlsStats {
        let mut stats = self.stats.clone();
        stats.parts = self.segments.iter().map(|s| s.parts.len()).sum();
        stats.segments = self.segments.iter().filter(|s| s.complete).count();
        stats.bytes = self
            .segments
            .iter()
            .flat_map(|s| &s.parts)
            .map(|p| p.data.len())
            .sum();
        // Over the complete segments held; the frame rate over the parts of the one in
        // progress too while no segment is long enough (a playlist served at the first
        // part gives it). An encoder's start, slow while its bandwidth estimate ramps up,
        // does not lower a peak.
        let rate = u64::from(VIDEO_TIMESCALE);
        let (mut bytes, mut ticks, mut frames, mut all_ticks) = (0u64, 0u64, 0u64, 0u64);
        let mut peak_fps = 0u64;
        // Segments long enough to give a rate (a second, or the target when shorter).
        let long = rate.min(timeline::ticks(self.config.segment_target, VIDEO_TIMESCALE));
        for s in self.segments.iter().filter(|s| s.duration > 0) {
            let t = s.duration * rate / u64::from(s.timescale.max(1));
            frames += s.video_samples;
            all_ticks += t;
            if s.complete {
                bytes += s.parts.iter().map(|p| p.data.len() as u64).sum::<u64>();
                ticks += t;
                if t >= long.max(1) {
                    peak_fps = peak_fps.max(s.video_samples * 1000 * rate / t);
                }
            }
        }
        stats.average_bitrate = (bytes * 8 * rate).checked_div(ticks).unwrap_or(0);
        stats.frame_rate_milli = match peak_fps {
            0 => (frames * 1000 * rate).checked_div(all_ticks).unwrap_or(0),
            peak => peak,
        };
        stats.peak_bitrate = self
            .segments
            .iter()
            .filter(|s| s.complete && s.duration > 0)
            .map(|s| {
                let bytes: u64 = s.parts.iter().map(|p| p.data.len() as u64).sum();
                bytes * 8 * u64::from(s.timescale) / s.duration
            })
            .max()
            .unwrap_or_else(|| {
                // Before the first segment completes: the rate of the parts made so far.
                let s = self.segments.back();
                s.filter(|s| s.duration > 0).map_or(0, |s| {
                    let bytes: u64 = s.parts.iter().map(|p| p.data.len() as u64).sum();
                    bytes * 8 * u64::from(s.timescale) / s.duration
                })
            });
        stats
    }

    fn segment_ref(&self, msn: u64) -> Option<&Segment> {
        let first = self.segments.front()?.msn;
        let index = usize::try_from(msn.checked_sub(first)?).ok()?;
        self.segments.get(index)
    }
}

/// The sequence header OBU's fields (`None` when it does not parse).
fn av1_info(obu: &[u8]) -> Option<av1c::Av1Info> {
    let payload = tern_proto::av1::obus(obu).next()?.payload;
    av1c::parse_sequence_header(payload)
}

impl Drop for Packager {
    fn drop(&mut self) {
        for part in self.segments.iter().flat_map(|s| &s.parts) {
            self.counter.sub(1, part.data.len());
            self.counter.unreserve(part.data.capacity());
        }
        for buf in &self.free {
            self.counter.unreserve(buf.capacity());
        }
    }
}

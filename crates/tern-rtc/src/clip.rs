//! The demo clip: a parsed H264 (or H265) + Opus clip and a sans-IO pacer that loops it
//! forever.
//!
//! * [`Clip::parse`] reads an Annex B H264 elementary stream and an Ogg Opus file once,
//!   splits the video into access units, packetizes each into RTP payloads of at most
//!   [`MAX_PAYLOAD`] bytes (RFC 6184 packetization mode 1), and extracts the Opus packets
//!   (RFC 7845) with their durations. Every payload byte lives in one contiguous buffer,
//!   addressed by `(offset, len)` ranges.
//! * [`Clip::from_mp4`] reads the same from an MP4 file (H264 or H265, with AAC or Opus)
//!   through libavformat, for an operator's slate or a file `tern bench` publishes.
//! * [`ClipSource`] is the real-time pacer. It never reads the clock: the caller asks
//!   [`ClipSource::poll_timeout`] when the next packet is due and calls
//!   [`ClipSource::poll`] with `now`, which emits every packet due by then as a
//!   [`MediaPacket`] borrowing the clip. Nothing is allocated per poll.
//!
//! # Timeline
//!
//! Video frame `i` of loop `k` is due at `start + k * period + i / fps`; an audio packet
//! at `start + k * period + s / 48000` where `s` is the number of samples in the packets
//! before it. The loop period is the longer of the two tracks' durations (`frames / fps`
//! and the total Opus samples), so audio and video stay aligned on every loop; the
//! shorter track pauses until the next loop starts. RTP timestamps are derived from the
//! same schedule (90 kHz video, 48 kHz audio, both starting at 0 and wrapping), so they
//! are continuous across loop boundaries. All arithmetic is exact integer arithmetic in
//! units of `1 / (fps * 48000)` s, so no rounding drift builds up over long runs.
//!
//! Audio that runs past the end of the video is trimmed when the clip is parsed: the Opus
//! encoder pads the end of the stream (the built-in clip holds 303 packets for 6 s of
//! video), and packets that start at or after the end of the video are dropped.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_proto::codec::{MediaKind, VideoCodec};
use tern_proto::h264::{self, NAL_AUD, NAL_IDR, NAL_PPS, NAL_SEI, NAL_SPS, PacketizeError};
use thiserror::Error;

mod mp4;

/// Largest RTP payload the clip's video is packetized into, in bytes.
///
/// 1200 bytes of payload plus the RTP header, SRTP tag and header extensions stay well
/// below a 1280-byte IPv6 minimum MTU path.
pub const MAX_PAYLOAD: usize = 1200;

/// Frame rate of the built-in clip (see `assets/clip/README.md`).
pub const BUILTIN_FPS: u32 = 30;

/// Opus RTP clock rate and the rate Opus packet durations are counted in (RFC 7587 §4.1).
const OPUS_RATE: u64 = 48_000;

/// H264 RTP clock rate (RFC 6184 §5.1).
const VIDEO_RATE: u64 = 90_000;

/// Longest duration of one Opus packet: 120 ms at 48 kHz (RFC 6716 §3.2.5).
const OPUS_MAX_PACKET_SAMPLES: u32 = 5760;

/// Why a clip could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ClipError {
    /// The frame rate is zero.
    #[error("frame rate must be at least 1 fps")]
    ZeroFps,
    /// The video holds no access unit with a coded picture.
    #[error("no access units: the video holds no coded picture (an H264 stream: is it Annex B?)")]
    NoAccessUnits,
    /// The video holds no keyframe (an H264 IDR or H265 IRAP picture), so a receiver could
    /// never start decoding.
    #[error("no keyframe (H264 IDR or H265 IRAP picture) in the video")]
    NoKeyframe,
    /// The packetizer rejected its configuration (a bug: [`MAX_PAYLOAD`] is valid).
    #[error("packetizer: {0}")]
    Packetize(#[from] PacketizeError),
    /// The H265 packetizer refused an access unit (a NAL unit length past its end).
    #[error("H265 packetizer: {0}")]
    H265(#[from] tern_proto::h265::H265Error),
    /// The payload bytes do not fit in 32-bit offsets (4 GiB).
    #[error("clip too large: more than 4 GiB of payload")]
    TooLarge,
    /// No Ogg capture pattern (`OggS`) where a page should start.
    #[error("not an Ogg page at byte {offset}")]
    NotOgg {
        /// Byte offset of the expected page in the Ogg file.
        offset: usize,
    },
    /// An Ogg page whose header or body runs past the end of the file.
    #[error("truncated Ogg page at byte {offset}")]
    TruncatedPage {
        /// Byte offset of the page in the Ogg file.
        offset: usize,
    },
    /// An Ogg page with a stream structure version other than 0.
    #[error("unsupported Ogg version {version} in the page at byte {offset}")]
    OggVersion {
        /// Byte offset of the page in the Ogg file.
        offset: usize,
        /// The version byte found.
        version: u8,
    },
    /// An Ogg page whose CRC does not match its contents.
    #[error("bad CRC in the Ogg page at byte {offset}")]
    OggCrc {
        /// Byte offset of the page in the Ogg file.
        offset: usize,
    },
    /// A page's continuation flag does not match whether the previous packet was complete.
    #[error("Ogg packet continuation mismatch in the page at byte {offset}")]
    OggContinuation {
        /// Byte offset of the page in the Ogg file.
        offset: usize,
    },
    /// The Ogg file ends in the middle of a packet.
    #[error("Ogg stream ends in the middle of a packet")]
    TruncatedStream,
    /// No logical stream in the Ogg file starts with an `OpusHead` packet.
    #[error("not Ogg Opus: no stream starts with an OpusHead header")]
    NotOpusHead,
    /// The `OpusHead` header is too short or has zero channels.
    #[error("malformed OpusHead header")]
    BadOpusHead,
    /// The `OpusHead` header's major version is not 0 (RFC 7845 §5.1).
    #[error("unsupported Ogg Opus version {0}")]
    OpusVersion(u8),
    /// The second packet of the Opus stream is not an `OpusTags` header.
    #[error("second Opus packet is not an OpusTags header")]
    NoOpusTags,
    /// An Opus packet whose TOC byte does not give a valid duration (RFC 6716 §3.1).
    #[error("malformed Opus packet {index} (counting from the first audio packet)")]
    BadOpusPacket {
        /// Index of the audio packet, 0 being the first after the headers.
        index: usize,
    },
    /// The Opus stream (or the MP4 file's audio track) holds no audio packet.
    #[error("no audio packets in the audio stream")]
    NoAudioPackets,
    /// An MP4 file that cannot be opened or read, or whose contents are malformed.
    #[error("MP4 file {}: {message}", path.display())]
    Mp4 {
        /// The file.
        path: std::path::PathBuf,
        /// What went wrong (libavformat's error text where it said).
        message: String,
    },
    /// An MP4 file without a stream of a kind the clip needs.
    #[error("no {what} stream in the MP4 file")]
    Mp4NoStream {
        /// `"video"` or `"audio"`.
        what: &'static str,
    },
    /// An MP4 file whose video or audio is in a codec the clip cannot play.
    #[error("the file's {what} codec is {codec}; {needed} is needed")]
    Mp4Codec {
        /// `"video"` or `"audio"`.
        what: &'static str,
        /// The codec found (libavcodec's name for it).
        codec: String,
        /// The codecs accepted: `"H264 or H265"`, `"AAC or Opus"`.
        needed: &'static str,
    },
    /// An MP4 video frame rate that does not round to 1-120 frames per second.
    #[error("video frame rate {numerator}/{denominator} is not between 1 and 120 fps")]
    Mp4FrameRate {
        /// The rate's numerator (frames).
        numerator: i32,
        /// The rate's denominator (seconds).
        denominator: i32,
    },
}

/// A byte range in [`Clip::data`].
#[derive(Debug, Clone, Copy)]
struct Span {
    offset: u32,
    len: u32,
}

impl Span {
    fn new(range: Range<usize>) -> Result<Span, ClipError> {
        let offset = u32::try_from(range.start).map_err(|_| ClipError::TooLarge)?;
        let end = u32::try_from(range.end).map_err(|_| ClipError::TooLarge)?;
        Ok(Span {
            offset,
            len: end.saturating_sub(offset),
        })
    }

    fn range(self) -> Range<usize> {
        let start = self.offset as usize;
        start..start + self.len as usize
    }
}

/// One access unit: `count` payloads from `first` in [`Clip::video_packets`].
#[derive(Debug, Clone, Copy)]
struct FrameEntry {
    first: u32,
    count: u32,
    keyframe: bool,
}

/// One Opus packet: payload, first sample (48 kHz, from the clip start) and duration.
#[derive(Debug, Clone, Copy)]
struct AudioEntry {
    span: Span,
    start: u64,
    samples: u32,
}

/// A parsed clip: packetized H264 (or, from an MP4 file, H265) access units and Opus
/// packets, ready to be paced.
pub struct Clip {
    /// The video's codec: H264, or H265 from [`Clip::from_mp4`].
    video_codec: VideoCodec,
    /// Every payload byte, video then audio.
    data: Vec<u8>,
    /// RTP payloads of the video, in sending order.
    video_packets: Vec<Span>,
    frames: Vec<FrameEntry>,
    audio: Vec<AudioEntry>,
    fps: u32,
    /// Loop period in units of `1 / (fps * 48000)` s (never 0).
    period: u64,
}

impl fmt::Debug for Clip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Clip")
            .field("video_codec", &self.video_codec)
            .field("frames", &self.frames.len())
            .field("video_packets", &self.video_packets.len())
            .field("audio_packets", &self.audio.len())
            .field("fps", &self.fps)
            .field("duration", &self.duration())
            .field("payload_bytes", &self.data.len())
            .finish()
    }
}

/// One video access unit of a [`Clip`].
#[derive(Debug, Clone, Copy)]
pub struct VideoFrame<'a> {
    clip: &'a Clip,
    entry: FrameEntry,
}

impl<'a> VideoFrame<'a> {
    /// Whether the access unit holds a keyframe: an IDR picture (H264) or an IRAP one
    /// (H265).
    pub fn keyframe(&self) -> bool {
        self.entry.keyframe
    }

    /// The RTP payloads of the access unit in sending order (the last one carries the
    /// marker bit).
    pub fn packets(&self) -> impl ExactSizeIterator<Item = &'a [u8]> + 'a {
        let clip = self.clip;
        let first = self.entry.first as usize;
        let end = first + self.entry.count as usize;
        clip.video_packets
            .get(first..end)
            .unwrap_or(&[])
            .iter()
            .map(move |s| clip.bytes(*s))
    }
}

/// One Opus packet of a [`Clip`].
#[derive(Debug, Clone, Copy)]
pub struct AudioPacket<'a> {
    /// The Opus packet (the RTP payload, RFC 7587).
    pub payload: &'a [u8],
    /// Its first sample, at 48 kHz, counted from the start of the clip.
    pub start: u64,
    /// Its duration in 48 kHz samples, from its TOC byte.
    pub samples: u32,
}

impl Clip {
    /// Parses a clip from an Annex B H264 stream at `fps` frames per second and an Ogg
    /// Opus file.
    ///
    /// Access units are found from access unit delimiters when present and otherwise from
    /// the NAL unit order (H.264 §7.4.1.2.3: parameter sets, SEI or a slice with
    /// `first_mb_in_slice == 0` after a picture start a new one); access units without a
    /// coded picture are dropped. Only the first Ogg logical stream that starts with
    /// `OpusHead` is read; page CRCs are checked. Opus packets that start at or after the
    /// end of the video are dropped (encoder padding).
    pub fn parse(h264: &[u8], ogg_opus: &[u8], fps: u32) -> Result<Clip, ClipError> {
        if fps == 0 {
            return Err(ClipError::ZeroFps);
        }
        let mut clip = Clip {
            video_codec: VideoCodec::H264,
            data: Vec::with_capacity(h264.len() + ogg_opus.len()),
            video_packets: Vec::new(),
            frames: Vec::new(),
            audio: Vec::new(),
            fps,
            period: 1,
        };
        clip.parse_video(h264)?;
        clip.parse_audio(ogg_opus)?;
        clip.finish()
    }

    /// The common tail of the readers, once the video and audio are in: drops the audio
    /// past the end of the video, sets the loop period and shrinks the buffers.
    fn finish(mut self) -> Result<Clip, ClipError> {
        self.trim_audio();
        if self.audio.is_empty() {
            return Err(ClipError::NoAudioPackets);
        }
        let video_units = self.frames.len() as u64 * OPUS_RATE;
        let audio_units = self.audio_samples() * u64::from(self.fps);
        self.period = video_units.max(audio_units).max(1);
        Span::new(0..self.data.len())?;
        self.data.shrink_to_fit();
        self.video_packets.shrink_to_fit();
        self.frames.shrink_to_fit();
        self.audio.shrink_to_fit();
        Ok(self)
    }

    /// The built-in demo clip (`assets/clip/`, 6 s at [`BUILTIN_FPS`]), embedded in the
    /// binary.
    pub fn builtin() -> Result<Clip, ClipError> {
        Clip::parse(
            include_bytes!("../../../assets/clip/demo.h264"),
            include_bytes!("../../../assets/clip/demo.opus"),
            BUILTIN_FPS,
        )
    }

    /// The lite built-in clip (`assets/clip/lite.h264`: the same pattern at 320x180 and
    /// ~240 kbit/s, with the same audio; ~300 kbit/s in all), for load tests with many
    /// viewers.
    pub fn builtin_lite() -> Result<Clip, ClipError> {
        Clip::parse(
            include_bytes!("../../../assets/clip/lite.h264"),
            include_bytes!("../../../assets/clip/demo.opus"),
            BUILTIN_FPS,
        )
    }

    /// The video access units in decoding order.
    pub fn video_frames(&self) -> impl ExactSizeIterator<Item = VideoFrame<'_>> {
        self.frames
            .iter()
            .map(move |&entry| VideoFrame { clip: self, entry })
    }

    /// The Opus packets in order.
    pub fn audio_packets(&self) -> impl ExactSizeIterator<Item = AudioPacket<'_>> {
        self.audio.iter().map(move |a| AudioPacket {
            payload: self.bytes(a.span),
            start: a.start,
            samples: a.samples,
        })
    }

    /// The loop period: the longer of the video (`frames / fps`) and audio durations.
    pub fn duration(&self) -> Duration {
        self.units_to_duration(u128::from(self.period))
    }

    /// The video frame rate the clip was parsed with.
    pub fn fps(&self) -> u32 {
        self.fps
    }

    /// The video's codec (its RTP payloads are RFC 6184's for H264, RFC 7798's for H265).
    pub fn video_codec(&self) -> VideoCodec {
        self.video_codec
    }

    /// Heap bytes the clip holds: its payload bytes and packet, frame and audio indexes.
    pub fn heap_bytes(&self) -> usize {
        self.data.capacity()
            + self.video_packets.capacity() * std::mem::size_of::<Span>()
            + self.frames.capacity() * std::mem::size_of::<FrameEntry>()
            + self.audio.capacity() * std::mem::size_of::<AudioEntry>()
    }

    /// Total payload bytes held (video and audio).
    pub fn payload_bytes(&self) -> usize {
        self.data.len()
    }

    fn bytes(&self, span: Span) -> &[u8] {
        self.data.get(span.range()).unwrap_or(&[])
    }

    fn audio_samples(&self) -> u64 {
        self.audio
            .last()
            .map_or(0, |a| a.start + u64::from(a.samples))
    }

    /// Timeline units (`1 / (fps * 48000)` s) per second.
    fn units_per_second(&self) -> u128 {
        u128::from(self.fps) * u128::from(OPUS_RATE)
    }

    fn units_to_nanos(&self, units: u128) -> u128 {
        units * 1_000_000_000 / self.units_per_second()
    }

    fn units_to_duration(&self, units: u128) -> Duration {
        let nanos = self.units_to_nanos(units);
        let secs = u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX);
        // The remainder is below 10^9 and fits.
        Duration::new(secs, (nanos % 1_000_000_000) as u32)
    }

    /// Schedule of video frame `n`, counted over all loops.
    fn video_units(&self, n: u64) -> u128 {
        let frames = (self.frames.len() as u64).max(1);
        u128::from(n / frames) * u128::from(self.period)
            + u128::from(n % frames) * u128::from(OPUS_RATE)
    }

    /// Schedule of audio packet `n`, counted over all loops.
    fn audio_units(&self, n: u64) -> u128 {
        let packets = (self.audio.len() as u64).max(1);
        let start = self
            .audio
            .get((n % packets) as usize)
            .map_or(0, |a| a.start);
        u128::from(n / packets) * u128::from(self.period) + u128::from(start) * u128::from(self.fps)
    }

    fn parse_video(&mut self, h264: &[u8]) -> Result<(), ClipError> {
        let mut packetizer = h264::Packetizer::new();
        let mut nals: Vec<&[u8]> = Vec::new();
        let mut has_picture = false;
        for nal in h264::nal_units(h264) {
            let t = h264::nal_type(nal);
            let starts_au = match t {
                NAL_AUD => !nals.is_empty(),
                NAL_SEI | NAL_SPS | NAL_PPS | 14..=18 => has_picture,
                // Slices with a slice header: `first_mb_in_slice` is ue(v), a leading 1 bit
                // means 0, i.e. the first slice of a new picture.
                1 | 2 | NAL_IDR => has_picture && nal.get(1).is_none_or(|b| b & 0x80 != 0),
                _ => false,
            };
            if starts_au {
                self.push_access_unit(&mut packetizer, &nals, has_picture)?;
                nals.clear();
                has_picture = false;
            }
            nals.push(nal);
            has_picture |= (1..=NAL_IDR).contains(&t);
        }
        self.push_access_unit(&mut packetizer, &nals, has_picture)?;
        self.check_video()
    }

    /// Whether the video has a picture and a keyframe to start from.
    fn check_video(&self) -> Result<(), ClipError> {
        if self.frames.is_empty() {
            return Err(ClipError::NoAccessUnits);
        }
        if !self.frames.iter().any(|f| f.keyframe) {
            return Err(ClipError::NoKeyframe);
        }
        Ok(())
    }

    fn push_access_unit(
        &mut self,
        packetizer: &mut h264::Packetizer,
        nals: &[&[u8]],
        has_picture: bool,
    ) -> Result<(), ClipError> {
        if !has_picture {
            return Ok(());
        }
        let keyframe = nals.iter().any(|n| h264::nal_type(n) == NAL_IDR);
        self.push_frame(keyframe, |emit| {
            packetizer.packetize(nals, MAX_PAYLOAD, &mut |p, last| emit(p, last))?;
            Ok(())
        })
    }

    /// Appends one access unit whose RTP payloads `packetize` gives to its `emit`
    /// (`emit(payload, last)`, in sending order); an access unit without a payload is left
    /// out.
    fn push_frame(
        &mut self,
        keyframe: bool,
        packetize: impl FnOnce(&mut dyn FnMut(&[u8], bool)) -> Result<(), ClipError>,
    ) -> Result<(), ClipError> {
        let first = u32::try_from(self.video_packets.len()).map_err(|_| ClipError::TooLarge)?;
        let mut too_large = false;
        let data = &mut self.data;
        let packets = &mut self.video_packets;
        packetize(&mut |payload, _last| {
            let start = data.len();
            data.extend_from_slice(payload);
            match Span::new(start..data.len()) {
                Ok(span) => packets.push(span),
                Err(_) => too_large = true,
            }
        })?;
        if too_large {
            return Err(ClipError::TooLarge);
        }
        let count = u32::try_from(self.video_packets.len())
            .map_err(|_| ClipError::TooLarge)?
            .saturating_sub(first);
        if count > 0 {
            self.frames.push(FrameEntry {
                first,
                count,
                keyframe,
            });
        }
        Ok(())
    }

    fn parse_audio(&mut self, ogg: &[u8]) -> Result<(), ClipError> {
        let mut serial: Option<u32> = None;
        // Packets of the chosen stream completed so far (0: OpusHead, 1: OpusTags).
        let mut packet_index = 0usize;
        // Start in `data` of the packet being assembled, if one is open.
        let mut open: Option<usize> = None;
        let mut pos = 0;
        while pos < ogg.len() {
            let page = OggPage::parse(ogg, pos)?;
            pos += page.len;
            match serial {
                Some(s) if s == page.serial => {}
                None if page.bos() && page.body.starts_with(b"OpusHead") => {
                    serial = Some(page.serial);
                }
                // Another logical stream (or one before the Opus stream starts).
                _ => continue,
            }
            if page.continued() != open.is_some() {
                return Err(ClipError::OggContinuation {
                    offset: page.offset,
                });
            }
            let mut body = page.body;
            for &lacing in page.lacing {
                let (segment, rest) = body.split_at(usize::from(lacing).min(body.len()));
                body = rest;
                let start = *open.get_or_insert(self.data.len());
                self.data.extend_from_slice(segment);
                if lacing < 255 {
                    open = None;
                    self.finish_packet(start, packet_index)?;
                    packet_index += 1;
                }
            }
        }
        if serial.is_none() {
            return Err(ClipError::NotOpusHead);
        }
        if open.is_some() {
            return Err(ClipError::TruncatedStream);
        }
        if packet_index < 2 {
            return Err(ClipError::NoOpusTags);
        }
        Ok(())
    }

    /// Handles the Opus packet `data[start..]`, the `index`th of the stream.
    fn finish_packet(&mut self, start: usize, index: usize) -> Result<(), ClipError> {
        let packet = self.data.get(start..).unwrap_or(&[]);
        match index {
            0 => {
                // RFC 7845 §5.1: magic, version, channel count, pre-skip, rate, gain, mapping.
                if !packet.starts_with(b"OpusHead") {
                    return Err(ClipError::NotOpusHead);
                }
                let (Some(&version), Some(&channels)) = (packet.get(8), packet.get(9)) else {
                    return Err(ClipError::BadOpusHead);
                };
                if version >> 4 != 0 {
                    return Err(ClipError::OpusVersion(version));
                }
                if packet.len() < 19 || channels == 0 {
                    return Err(ClipError::BadOpusHead);
                }
                self.data.truncate(start);
            }
            1 => {
                if !packet.starts_with(b"OpusTags") {
                    return Err(ClipError::NoOpusTags);
                }
                self.data.truncate(start);
            }
            _ => {
                let audio_index = index - 2;
                let samples = opus_packet_samples(packet)
                    .ok_or(ClipError::BadOpusPacket { index: audio_index })?;
                let span = Span::new(start..self.data.len())?;
                let first = self.audio_samples();
                self.audio.push(AudioEntry {
                    span,
                    start: first,
                    samples,
                });
            }
        }
        Ok(())
    }

    /// Drops the audio packets that start at or after the end of the video.
    fn trim_audio(&mut self) {
        let video_units = self.frames.len() as u64 * OPUS_RATE;
        let fps = u64::from(self.fps);
        let keep = self
            .audio
            .partition_point(|a| a.start.saturating_mul(fps) < video_units);
        if let Some(end) = keep.checked_sub(1).and_then(|i| self.audio.get(i)) {
            let end = end.span.range().end;
            self.data.truncate(end);
        }
        self.audio.truncate(keep);
    }
}

/// Duration of an Opus packet in 48 kHz samples, from its TOC byte (RFC 6716 §3.1), or
/// `None` if the packet is malformed (empty, code 3 without a frame count, zero frames,
/// or longer than 120 ms). The clip's Ogg reader and the LL-HLS packager use it.
pub(crate) fn opus_packet_samples(packet: &[u8]) -> Option<u32> {
    let &toc = packet.first()?;
    let config = toc >> 3;
    // Frame sizes at 48 kHz: SILK-only 10/20/40/60 ms, Hybrid 10/20 ms, CELT-only
    // 2.5/5/10/20 ms.
    let frame = match config {
        0..=11 => [480, 960, 1920, 2880][usize::from(config & 3)],
        12..=15 => [480, 960][usize::from(config & 1)],
        _ => [120, 240, 480, 960][usize::from(config & 3)],
    };
    let frames = match toc & 3 {
        0 => 1,
        1 | 2 => 2,
        _ => u32::from(*packet.get(1)? & 0x3f),
    };
    let total = frame * frames;
    (1..=OPUS_MAX_PACKET_SAMPLES)
        .contains(&total)
        .then_some(total)
}

/// One Ogg page (RFC 3533 §6), borrowed from the file.
struct OggPage<'a> {
    offset: usize,
    /// Length of the whole page.
    len: usize,
    header_type: u8,
    serial: u32,
    lacing: &'a [u8],
    body: &'a [u8],
}

impl<'a> OggPage<'a> {
    const HEADER: usize = 27;

    fn parse(file: &'a [u8], offset: usize) -> Result<OggPage<'a>, ClipError> {
        let rest = file.get(offset..).unwrap_or(&[]);
        let truncated = ClipError::TruncatedPage { offset };
        if !rest.starts_with(b"OggS") {
            return Err(if rest.len() < 4 && b"OggS".starts_with(rest) {
                truncated
            } else {
                ClipError::NotOgg { offset }
            });
        }
        let header = rest.get(..Self::HEADER).ok_or(truncated.clone())?;
        let version = header[4];
        if version != 0 {
            return Err(ClipError::OggVersion { offset, version });
        }
        let header_type = header[5];
        let serial = u32::from_le_bytes([header[14], header[15], header[16], header[17]]);
        let stored_crc = u32::from_le_bytes([header[22], header[23], header[24], header[25]]);
        let segments = usize::from(header[26]);
        let lacing = rest
            .get(Self::HEADER..Self::HEADER + segments)
            .ok_or(truncated.clone())?;
        let body_len: usize = lacing.iter().map(|&l| usize::from(l)).sum();
        let len = Self::HEADER + segments + body_len;
        let page = rest.get(..len).ok_or(truncated)?;
        if ogg_crc(page) != stored_crc {
            return Err(ClipError::OggCrc { offset });
        }
        Ok(OggPage {
            offset,
            len,
            header_type,
            serial,
            lacing,
            body: &page[Self::HEADER + segments..],
        })
    }

    /// First page of a logical stream.
    fn bos(&self) -> bool {
        self.header_type & 0x02 != 0
    }

    /// The page starts with the continuation of a packet from the previous page.
    fn continued(&self) -> bool {
        self.header_type & 0x01 != 0
    }
}

/// CRC-32 lookup table for Ogg: polynomial 0x04c11db7, MSB first.
const OGG_CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut r = (i as u32) << 24;
        let mut bit = 0;
        while bit < 8 {
            r = if r & 0x8000_0000 != 0 {
                (r << 1) ^ 0x04c1_1db7
            } else {
                r << 1
            };
            bit += 1;
        }
        table[i] = r;
        i += 1;
    }
    table
};

/// The Ogg page checksum (RFC 3533 §6): CRC-32 over the page with its CRC field as zeros,
/// initial value 0, no final XOR.
fn ogg_crc(page: &[u8]) -> u32 {
    page.iter().enumerate().fold(0u32, |crc, (i, &b)| {
        let b = if (22..26).contains(&i) { 0 } else { b };
        (crc << 8) ^ OGG_CRC_TABLE[usize::from((crc >> 24) as u8 ^ b)]
    })
}

/// One packet emitted by a [`ClipSource`], borrowing its payload from the [`Clip`].
#[derive(Debug, Clone, Copy)]
pub struct MediaPacket<'a> {
    /// Audio or video.
    pub kind: MediaKind,
    /// Sequence number per kind, starting at 0 and continuous across loops and skips
    /// (it counts emitted packets, so a gap always means loss downstream).
    pub seq: u64,
    /// RTP timestamp at the kind's clock rate, starting at 0, continuous across loops,
    /// wrapping at 2^32. After a skip it jumps with the skipped time.
    pub rtp_ts: u32,
    /// RTP marker bit: the last packet of a video frame; always false for audio.
    pub marker: bool,
    /// The first packet of a keyframe's access unit (H264 IDR, H265 IRAP): a receiver can
    /// start decoding here (the clip puts the parameter sets in front of every keyframe).
    /// False for the other packets of that access unit, so a keyframe cache keyed on this
    /// flag starts at the right packet.
    pub keyframe: bool,
    /// The scheduled time of the packet's frame (shared by all packets of a video frame).
    pub capture_time: Instant,
    /// The RTP payload.
    pub payload: &'a [u8],
}

/// How late a packet may be before [`ClipSource::poll`] skips ahead instead of sending
/// the backlog: 2 s, so a scheduling hiccup is caught up in a burst (keeping the H264
/// reference chain intact), while a process stopped for seconds does not flood viewers.
pub const DEFAULT_MAX_LATENESS: Duration = Duration::from_secs(2);

/// Sans-IO real-time pacer that loops a [`Clip`] forever.
///
/// It never reads the clock: call [`ClipSource::poll`] at or after
/// [`ClipSource::poll_timeout`]. See the [module docs](self) for the timeline.
#[derive(Debug, Clone)]
pub struct ClipSource {
    clip: Arc<Clip>,
    start: Instant,
    /// Next video frame to emit, counted over all loops.
    video_next: u64,
    /// Next audio packet to emit, counted over all loops.
    audio_next: u64,
    video_seq: u64,
    audio_seq: u64,
    skipped: u64,
    max_lateness: Duration,
}

impl ClipSource {
    /// A source playing `clip` from `start`: the first video frame and audio packet are
    /// due at `start`.
    pub fn new(clip: Arc<Clip>, start: Instant) -> Self {
        ClipSource {
            clip,
            start,
            video_next: 0,
            audio_next: 0,
            video_seq: 0,
            audio_seq: 0,
            skipped: 0,
            max_lateness: DEFAULT_MAX_LATENESS,
        }
    }

    /// Sets how late the next packet of a kind may be before `poll` skips that kind ahead
    /// to the current frame instead of emitting the backlog (default
    /// [`DEFAULT_MAX_LATENESS`]).
    pub fn set_max_lateness(&mut self, max_lateness: Duration) {
        self.max_lateness = max_lateness;
    }

    /// The clip being played.
    pub fn clip(&self) -> &Arc<Clip> {
        &self.clip
    }

    /// When the next packet is due.
    pub fn poll_timeout(&self) -> Instant {
        let clip = &*self.clip;
        let next = clip
            .video_units(self.video_next)
            .min(clip.audio_units(self.audio_next));
        self.at(clip.units_to_duration(next))
    }

    /// Video frames and audio packets skipped so far because `poll` was called more than
    /// the maximum lateness after they were due.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Emits every packet due at or before `now`, in time order across both kinds (video
    /// first on a tie). A kind whose next packet is more than the maximum lateness
    /// overdue first skips ahead to its latest frame due, counting what it passes over
    /// in [`ClipSource::skipped`].
    pub fn poll(&mut self, now: Instant, emit: &mut dyn FnMut(MediaPacket<'_>)) {
        let Some(elapsed) = now.checked_duration_since(self.start) else {
            return;
        };
        let elapsed = elapsed.as_nanos();
        self.skip_if_late(elapsed);
        let clip = &*self.clip;
        loop {
            let tv = clip.video_units(self.video_next);
            let ta = clip.audio_units(self.audio_next);
            let t = tv.min(ta);
            if clip.units_to_nanos(t) > elapsed {
                return;
            }
            let capture_time = self.at(clip.units_to_duration(t));
            if tv <= ta {
                let frames = clip.frames.len() as u64;
                let idx = (self.video_next % frames.max(1)) as usize;
                self.video_next += 1;
                let Some(frame) = clip.frames.get(idx) else {
                    continue;
                };
                let rtp_ts = (t * u128::from(VIDEO_RATE) / clip.units_per_second()) as u32;
                let first = frame.first as usize;
                let spans = clip
                    .video_packets
                    .get(first..first + frame.count as usize)
                    .unwrap_or(&[]);
                for (i, &span) in spans.iter().enumerate() {
                    emit(MediaPacket {
                        kind: MediaKind::Video,
                        seq: self.video_seq,
                        rtp_ts,
                        marker: i + 1 == spans.len(),
                        keyframe: frame.keyframe && i == 0,
                        capture_time,
                        payload: clip.bytes(span),
                    });
                    self.video_seq += 1;
                }
            } else {
                let packets = clip.audio.len() as u64;
                let idx = (self.audio_next % packets.max(1)) as usize;
                self.audio_next += 1;
                let Some(packet) = clip.audio.get(idx) else {
                    continue;
                };
                emit(MediaPacket {
                    kind: MediaKind::Audio,
                    seq: self.audio_seq,
                    rtp_ts: (t / u128::from(clip.fps)) as u32,
                    marker: false,
                    keyframe: false,
                    capture_time,
                    payload: clip.bytes(packet.span),
                });
                self.audio_seq += 1;
            }
        }
    }

    /// Moves each kind whose next packet is overdue by more than the maximum lateness to
    /// its latest frame due at `elapsed` nanoseconds after the start.
    fn skip_if_late(&mut self, elapsed: u128) {
        let clip = &*self.clip;
        let late =
            |units: u128| clip.units_to_nanos(units) + self.max_lateness.as_nanos() < elapsed;
        let video_late = late(clip.video_units(self.video_next));
        let audio_late = late(clip.audio_units(self.audio_next));
        if !video_late && !audio_late {
            return;
        }
        let now_units = elapsed * clip.units_per_second() / 1_000_000_000;
        let period = u128::from(clip.period);
        let loops = now_units / period;
        let into_loop = now_units % period;
        let to_u64 = |n: u128| u64::try_from(n).unwrap_or(u64::MAX);
        if video_late {
            let frames = clip.frames.len() as u128;
            let i = (into_loop / u128::from(OPUS_RATE)).min(frames.saturating_sub(1));
            let target = to_u64(loops * frames + i);
            if target > self.video_next {
                self.skipped += target - self.video_next;
                self.video_next = target;
            }
        }
        if audio_late {
            let packets = clip.audio.len() as u128;
            let fps = u128::from(clip.fps);
            let due = clip
                .audio
                .partition_point(|a| u128::from(a.start) * fps <= into_loop);
            let j = (due as u128).saturating_sub(1);
            let target = to_u64(loops * packets + j);
            if target > self.audio_next {
                self.skipped += target - self.audio_next;
                self.audio_next = target;
            }
        }
    }

    /// `start + offset`; saturates at `start` in the (centuries away) case the platform's
    /// `Instant` cannot represent the sum.
    fn at(&self, offset: Duration) -> Instant {
        self.start.checked_add(offset).unwrap_or(self.start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_proto::h264::{Depacketizer, NAL_STAP_A, is_keyframe};

    const H264: &[u8] = include_bytes!("../../../assets/clip/demo.h264");
    const OPUS: &[u8] = include_bytes!("../../../assets/clip/demo.opus");

    /// Small deterministic PRNG (xorshift64*).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    fn builtin() -> Arc<Clip> {
        Arc::new(Clip::builtin().expect("built-in clip parses"))
    }

    /// Polls `src` at `now` and returns owned copies of what it emitted.
    fn poll(src: &mut ClipSource, now: Instant) -> Vec<Owned> {
        let mut out = Vec::new();
        src.poll(now, &mut |p| out.push(Owned::from(p)));
        out
    }

    #[derive(Debug, Clone, PartialEq)]
    struct Owned {
        kind: MediaKind,
        seq: u64,
        rtp_ts: u32,
        marker: bool,
        keyframe: bool,
        capture_time: Instant,
        payload: Vec<u8>,
    }

    impl From<MediaPacket<'_>> for Owned {
        fn from(p: MediaPacket<'_>) -> Owned {
            Owned {
                kind: p.kind,
                seq: p.seq,
                rtp_ts: p.rtp_ts,
                marker: p.marker,
                keyframe: p.keyframe,
                capture_time: p.capture_time,
                payload: p.payload.to_vec(),
            }
        }
    }

    /// Polls `src` at each deadline (plus a little jitter, as a real driver would) up to
    /// and including `until`.
    fn run(src: &mut ClipSource, until: Instant) -> Vec<Owned> {
        let mut out = Vec::new();
        loop {
            let now = (src.poll_timeout() + Duration::from_micros(300)).min(until);
            out.extend(poll(src, now));
            if now == until {
                return out;
            }
        }
    }

    fn count(pkts: &[Owned], kind: MediaKind) -> usize {
        pkts.iter().filter(|p| p.kind == kind).count()
    }

    fn video_frames_in(pkts: &[Owned]) -> usize {
        pkts.iter()
            .filter(|p| p.kind == MediaKind::Video && p.marker)
            .count()
    }

    /// Builds one Ogg page with a correct CRC.
    fn ogg_page(serial: u32, seq: u32, flags: u8, lacing: &[u8], body: &[u8]) -> Vec<u8> {
        let mut page = b"OggS".to_vec();
        page.push(0);
        page.push(flags);
        page.extend_from_slice(&0u64.to_le_bytes());
        page.extend_from_slice(&serial.to_le_bytes());
        page.extend_from_slice(&seq.to_le_bytes());
        page.extend_from_slice(&[0; 4]);
        page.push(lacing.len() as u8);
        page.extend_from_slice(lacing);
        page.extend_from_slice(body);
        let crc = ogg_crc(&page);
        page[22..26].copy_from_slice(&crc.to_le_bytes());
        page
    }

    /// Lacing values for one packet of `len` bytes.
    fn lacing_for(len: usize) -> Vec<u8> {
        let mut l = vec![255; len / 255];
        l.push((len % 255) as u8);
        l
    }

    fn opus_head() -> Vec<u8> {
        let mut h = b"OpusHead".to_vec();
        h.extend_from_slice(&[1, 2, 0x38, 1, 0x80, 0xbb, 0, 0, 0, 0, 0]);
        h
    }

    /// An Ogg Opus file: each header on its own page, then the audio packets laced
    /// together and cut into pages of `max_segments` lacing values (so packets may
    /// continue across pages).
    fn ogg_opus(packets: &[Vec<u8>], max_segments: usize) -> Vec<u8> {
        let mut out = ogg_page(7, 0, 0x02, &lacing_for(19), &opus_head());
        let tags = b"OpusTags\x04\0\0\0tern\0\0\0\0".to_vec();
        out.extend(ogg_page(7, 1, 0, &lacing_for(tags.len()), &tags));
        // Lay all audio packets out as one lacing sequence, then cut it into pages.
        let mut lacing = Vec::new();
        let mut body = Vec::new();
        for p in packets {
            lacing.extend(lacing_for(p.len()));
            body.extend_from_slice(p);
        }
        let mut continued = false;
        let mut off = 0;
        for (seq, chunk) in (2..).zip(lacing.chunks(max_segments)) {
            let len: usize = chunk.iter().map(|&l| usize::from(l)).sum();
            let flags = if continued { 1 } else { 0 };
            out.extend(ogg_page(7, seq, flags, chunk, &body[off..off + len]));
            off += len;
            continued = chunk.last() == Some(&255);
        }
        out
    }

    #[test]
    fn lite_clip_parses_at_about_300_kbps() {
        let clip = Clip::builtin_lite().expect("lite clip");
        assert_eq!(clip.video_frames().len(), 180);
        for (i, f) in clip.video_frames().enumerate() {
            assert_eq!(f.keyframe(), i % 30 == 0, "frame {i}");
        }
        assert_eq!(clip.duration(), Duration::from_secs(6));
        let kbps = clip.payload_bytes() as f64 * 8.0 / 6.0 / 1000.0;
        assert!((200.0..400.0).contains(&kbps), "{kbps:.0} kbit/s");
    }

    #[test]
    fn builtin_clip_parses() {
        let clip = builtin();
        assert_eq!(clip.fps(), 30);
        assert_eq!(clip.video_frames().len(), 180);
        for (i, f) in clip.video_frames().enumerate() {
            assert_eq!(f.keyframe(), i % 30 == 0, "frame {i}");
            assert!(f.packets().len() > 0);
            assert!(f.packets().all(|p| !p.is_empty() && p.len() <= MAX_PAYLOAD));
            let first = f.packets().next().expect("a packet");
            assert_eq!(is_keyframe(first), f.keyframe(), "frame {i}");
            if f.keyframe() {
                // SPS and PPS go first, aggregated.
                assert_eq!(h264::nal_type(first), NAL_STAP_A);
            }
        }
        // 303 packets in the file, the last 3 past the end of the video.
        assert_eq!(clip.audio_packets().len(), 300);
        let mut expect_start = 0;
        for a in clip.audio_packets() {
            assert_eq!(a.samples, 960);
            assert_eq!(a.start, expect_start);
            assert!(!a.payload.is_empty() && a.payload.len() <= MAX_PAYLOAD);
            expect_start += 960;
        }
        assert_eq!(clip.duration(), Duration::from_secs(6));
        let video: usize = clip
            .video_frames()
            .map(|f| f.packets().map(<[u8]>::len).sum::<usize>())
            .sum();
        let audio: usize = clip.audio_packets().map(|a| a.payload.len()).sum();
        assert_eq!(clip.payload_bytes(), video + audio);
        assert!(format!("{clip:?}").contains("frames: 180"));
    }

    #[test]
    fn poll_at_start_emits_first_frame_and_first_audio_packet() {
        let clip = builtin();
        let t0 = Instant::now();
        let mut src = ClipSource::new(clip.clone(), t0);
        assert_eq!(src.poll_timeout(), t0);
        // Before the start nothing is due.
        assert!(poll(&mut src, t0 - Duration::from_millis(1)).is_empty());
        let pkts = poll(&mut src, t0);
        let first = clip.video_frames().next().expect("frame 0");
        let n = first.packets().len();
        assert_eq!(pkts.len(), n + 1);
        for (i, (p, payload)) in pkts.iter().zip(first.packets()).enumerate() {
            assert_eq!(p.kind, MediaKind::Video);
            assert_eq!(p.seq, i as u64);
            assert_eq!(p.rtp_ts, 0);
            assert_eq!(p.marker, i + 1 == n);
            assert_eq!(p.keyframe, i == 0);
            assert_eq!(p.capture_time, t0);
            assert_eq!(p.payload, payload);
        }
        let a = &pkts[n];
        assert_eq!(
            (a.kind, a.seq, a.rtp_ts, a.marker, a.keyframe),
            (MediaKind::Audio, 0, 0, false, false)
        );
        assert_eq!(
            a.payload,
            clip.audio_packets().next().expect("audio").payload
        );
        // Next due: the second audio packet at 20 ms (video is at 33.3 ms).
        assert_eq!(src.poll_timeout(), t0 + Duration::from_millis(20));
        assert!(poll(&mut src, t0 + Duration::from_millis(19)).is_empty());
        let pkts = poll(&mut src, t0 + Duration::from_millis(20));
        assert_eq!(pkts.len(), 1);
        assert_eq!(
            (pkts[0].kind, pkts[0].seq, pkts[0].rtp_ts),
            (MediaKind::Audio, 1, 960)
        );
        assert_eq!(src.poll_timeout(), t0 + Duration::from_nanos(33_333_333));
    }

    #[test]
    fn one_second_of_packets() {
        let clip = builtin();
        let t0 = Instant::now();
        let mut src = ClipSource::new(clip.clone(), t0);
        // Everything due strictly before 1 s: frames 0..30 and audio packets 0..50.
        let pkts = poll(
            &mut src,
            t0 + Duration::from_secs(1) - Duration::from_nanos(1),
        );
        assert_eq!(video_frames_in(&pkts), 30);
        let video_packets: usize = clip
            .video_frames()
            .take(30)
            .map(|f| f.packets().len())
            .sum();
        assert_eq!(count(&pkts, MediaKind::Video), video_packets);
        assert_eq!(count(&pkts, MediaKind::Audio), 50);
        assert_eq!(src.skipped(), 0);
        // In time order across kinds.
        assert!(
            pkts.windows(2)
                .all(|w| w[0].capture_time <= w[1].capture_time)
        );
        // At exactly 1 s, frame 30 (a keyframe) and audio packet 50 are due too.
        let more = poll(&mut src, t0 + Duration::from_secs(1));
        assert_eq!(video_frames_in(&more), 1);
        assert_eq!(count(&more, MediaKind::Audio), 1);
        assert!(more[0].keyframe && more[0].kind == MediaKind::Video);
        assert_eq!(more[0].rtp_ts, 90_000);
        assert_eq!(more[0].capture_time, t0 + Duration::from_secs(1));
        assert_eq!(more.last().map(|p| p.rtp_ts), Some(48_000));
    }

    #[test]
    fn timestamps_and_sequence_numbers_continue_across_loops() {
        let clip = builtin();
        let t0 = Instant::now();
        let mut src = ClipSource::new(clip.clone(), t0);
        let end = t0 + clip.duration() * 2 + Duration::from_millis(500);
        let all = run(&mut src, end);
        assert_eq!(src.skipped(), 0);
        assert!(
            all.windows(2)
                .all(|w| w[0].capture_time <= w[1].capture_time)
        );
        for kind in [MediaKind::Video, MediaKind::Audio] {
            let pkts: Vec<&Owned> = all.iter().filter(|p| p.kind == kind).collect();
            for (i, p) in pkts.iter().enumerate() {
                assert_eq!(p.seq, i as u64, "{kind:?}");
            }
            let step = if kind == MediaKind::Video { 3000 } else { 960 };
            for w in pkts.windows(2) {
                let d = w[1].rtp_ts.wrapping_sub(w[0].rtp_ts);
                if kind == MediaKind::Video && !w[0].marker {
                    assert_eq!(d, 0);
                } else {
                    assert_eq!(d, step, "{kind:?} seq {}", w[1].seq);
                }
                let gap = w[1].capture_time - w[0].capture_time;
                assert!(gap <= Duration::from_millis(34));
            }
        }
        // Two loops plus 0.5 s: frames 0..=375, audio packets 0..=625.
        assert_eq!(video_frames_in(&all), 2 * 180 + 16);
        assert_eq!(count(&all, MediaKind::Audio), 2 * 300 + 26);
        let last_video = all
            .iter()
            .rfind(|p| p.kind == MediaKind::Video)
            .expect("video");
        assert_eq!(last_video.rtp_ts, 375 * 3000);
        // Loop 2 replays loop 0's payloads.
        let loop0: Vec<&Owned> = all.iter().filter(|p| p.kind == MediaKind::Video).collect();
        let per_loop: usize = clip.video_frames().map(|f| f.packets().len()).sum();
        assert_eq!(loop0[0].payload, loop0[2 * per_loop].payload);
        assert!(loop0[2 * per_loop].keyframe);
    }

    #[test]
    fn one_loop_depacketizes_into_180_intact_frames() {
        let clip = builtin();
        let t0 = Instant::now();
        let mut src = ClipSource::new(clip.clone(), t0);
        let mut de = Depacketizer::new();
        let pkts = run(&mut src, t0 + clip.duration() - Duration::from_nanos(1));
        for p in pkts.iter().filter(|p| p.kind == MediaKind::Video) {
            de.push(p.seq as u16, p.rtp_ts, p.marker, &p.payload)
                .expect("well-formed payload");
        }
        assert_eq!(de.frames(), 180);
        assert_eq!(de.keyframes(), 6);
        assert_eq!(de.damaged_frames(), 0);
        assert_eq!(de.lost_packets(), 0);
    }

    #[test]
    fn far_behind_skips_to_the_current_frame() {
        let clip = builtin();
        let t0 = Instant::now();
        let mut src = ClipSource::new(clip.clone(), t0);
        let first = poll(&mut src, t0);
        let last_seq = first.iter().filter(|p| p.kind == MediaKind::Video).count() as u64;
        // Stopped for 10 s: only the current frame (absolute 300, frame 120 of loop 1, a
        // keyframe) and the current audio packet (absolute 500) are sent.
        let pkts = poll(&mut src, t0 + Duration::from_millis(10_005));
        assert_eq!(video_frames_in(&pkts), 1);
        assert_eq!(count(&pkts, MediaKind::Audio), 1);
        assert_eq!(src.skipped(), 299 + 499);
        assert_eq!(pkts[0].seq, last_seq);
        assert_eq!(pkts[0].rtp_ts, 300 * 3000);
        assert!(pkts[0].keyframe);
        assert_eq!(pkts[0].capture_time, t0 + Duration::from_secs(10));
        let audio = pkts
            .iter()
            .find(|p| p.kind == MediaKind::Audio)
            .expect("audio");
        assert_eq!((audio.seq, audio.rtp_ts), (1, 500 * 960));
        // Then it carries on normally.
        assert_eq!(
            src.poll_timeout(),
            t0 + Duration::from_secs(10) + Duration::from_millis(20)
        );
        // A 1 s stall is within the default lateness: caught up in one burst.
        let pkts = poll(&mut src, t0 + Duration::from_secs(11));
        assert_eq!(video_frames_in(&pkts), 30);
        assert_eq!(src.skipped(), 299 + 499);
        // A smaller limit skips that too.
        src.set_max_lateness(Duration::from_millis(100));
        let pkts = poll(&mut src, t0 + Duration::from_millis(11_500));
        assert_eq!(video_frames_in(&pkts), 1);
        assert_eq!(src.skipped(), 299 + 499 + 14 + 24);
    }

    #[test]
    fn cloned_sources_advance_independently() {
        // Two sources on the same clip share it and advance independently.
        let clip = builtin();
        let t0 = Instant::now();
        let mut a = ClipSource::new(clip.clone(), t0);
        let mut b = a.clone();
        assert_eq!(
            poll(&mut a, t0 + Duration::from_millis(100)),
            poll(&mut b, t0 + Duration::from_millis(100))
        );
        assert!(Arc::ptr_eq(a.clip(), &clip));
        assert!(!poll(&mut a, t0 + Duration::from_millis(200)).is_empty());
        assert!(a.poll_timeout() > b.poll_timeout());
    }

    #[test]
    fn access_units_without_delimiters() {
        // Strip the AUDs: access units are then found from the NAL unit order.
        let mut stripped = Vec::new();
        for nal in h264::nal_units(H264) {
            if h264::nal_type(nal) != NAL_AUD {
                stripped.extend_from_slice(&[0, 0, 1]);
                stripped.extend_from_slice(nal);
            }
        }
        let a = Clip::parse(&stripped, OPUS, 30).expect("parses");
        let b = builtin();
        assert_eq!(a.video_frames().len(), 180);
        for (fa, fb) in a.video_frames().zip(b.video_frames()) {
            assert_eq!(fa.keyframe(), fb.keyframe());
            assert!(fa.packets().eq(fb.packets()));
        }
    }

    #[test]
    fn opus_durations_from_the_toc_byte() {
        let cases: [(&[u8], Option<u32>); 12] = [
            (&[0x00], Some(480)),        // SILK NB 10 ms
            (&[0x18], Some(2880)),       // SILK 60 ms
            (&[0x19, 0], Some(5760)),    // SILK 60 ms, two frames
            (&[0x60], Some(480)),        // Hybrid 10 ms
            (&[0x68], Some(960)),        // Hybrid 20 ms
            (&[0x80], Some(120)),        // CELT 2.5 ms
            (&[0xf8], Some(960)),        // CELT 20 ms
            (&[0xfb, 0x03], Some(2880)), // CELT 20 ms, code 3, 3 frames
            (&[0xfb, 0x07], None),       // 7 x 20 ms > 120 ms
            (&[0xfb, 0x00], None),       // code 3, zero frames
            (&[0xfb], None),             // code 3 without a count byte
            (&[], None),
        ];
        for (p, want) in cases {
            assert_eq!(opus_packet_samples(p), want, "{p:02x?}");
        }
        // The cases the LL-HLS packager's tests had when it carried its own copy.
        let more: [(&[u8], Option<u32>); 11] = [
            (&[1 << 3, 0xaa], Some(960)),              // SILK NB 20 ms
            (&[31 << 3], Some(960)),                   // CELT FB 20 ms: WebRTC's usual
            (&[(28 << 3) | 1], Some(240)),             // CELT 2.5 ms, code 1: two frames
            (&[(13 << 3) | 2], Some(1920)),            // Hybrid 20 ms, code 2: two frames
            (&[(3 << 3) | 3, 2], Some(5760)),          // SILK 60 ms x 2: the maximum
            (&[(3 << 3) | 3, 3], None),                // 3 x 60 ms: over 120 ms
            (&[(16 << 3) | 3, 0x80 | 48], Some(5760)), // CELT 2.5 ms x 48 (VBR flag)
            (&[(16 << 3) | 3, 0], None),
            (&[(16 << 3) | 3], None),
            (&[], None),
            (&[10 << 3], Some(1920)), // SILK WB 40 ms
        ];
        for (p, want) in more {
            assert_eq!(opus_packet_samples(p), want, "{p:02x?}");
        }
    }

    #[test]
    fn ogg_packets_spanning_pages_and_other_frame_sizes() {
        // Packets of 10, 20 and 40 ms (SILK), some longer than 255 bytes, laid out so
        // that packets continue across pages (3 lacing values per page).
        let mut packets = Vec::new();
        for i in 0..60usize {
            let toc = [0x08u8, 0x10, 0x08][i % 3]; // SILK 20 ms, 40 ms, 20 ms
            let mut p = vec![toc];
            p.extend((0..(i * 37) % 700).map(|b| b as u8));
            packets.push(p);
        }
        let ogg = ogg_opus(&packets, 3);
        // 1 s of video at 10 fps; audio: 20 * (20 + 40 + 20) ms = 1.6 s, trimmed to the
        // packets starting before 1 s.
        let h = {
            let mut v = Vec::new();
            for i in 0..10 {
                v.extend_from_slice(&[0, 0, 0, 1, if i == 0 { 0x65 } else { 0x41 }, 0x88, i]);
            }
            v
        };
        let clip = Clip::parse(&h, &ogg, 10).expect("parses");
        assert_eq!(clip.video_frames().len(), 10);
        let audio: Vec<AudioPacket<'_>> = clip.audio_packets().collect();
        // Starts: 0, 960, 2880, 3840, ... (80 ms per 3 packets); packet 37 (40 ms) starts
        // at 47040, packet 38 at 48960 is dropped.
        assert_eq!(audio.len(), 38);
        assert!(audio.iter().zip(&packets).all(|(a, p)| a.payload == &p[..]));
        assert_eq!(audio[1].samples, 1920);
        assert_eq!(audio[2].start, 2880);
        assert_eq!(audio[3].start, 3840);
        // The audio (ending at 48960) outlasts the video: that is the loop period.
        let last = audio.last().expect("audio");
        assert_eq!(last.start + u64::from(last.samples), 48_000 + 960);
        assert_eq!(clip.duration(), Duration::from_millis(1020));

        // Video frames pause during the extra 20 ms; timestamps stay continuous.
        let t0 = Instant::now();
        let mut src = ClipSource::new(Arc::new(clip), t0);
        let pkts = poll(&mut src, t0 + Duration::from_millis(1020));
        let v: Vec<&Owned> = pkts.iter().filter(|p| p.kind == MediaKind::Video).collect();
        assert_eq!(v.len(), 11);
        assert_eq!(v[9].rtp_ts, 81_000);
        assert_eq!(v[10].rtp_ts, 91_800);
        assert_eq!(v[10].capture_time, t0 + Duration::from_millis(1020));
        assert_eq!(v[10].payload, v[0].payload);
        let a: Vec<&Owned> = pkts.iter().filter(|p| p.kind == MediaKind::Audio).collect();
        assert_eq!(a.len(), 39);
        assert_eq!(a[38].rtp_ts, 48_960);
    }

    #[test]
    fn shorter_audio_waits_for_the_video() {
        let packets: Vec<Vec<u8>> = (0..10).map(|_| vec![0xf8, 1, 2, 3]).collect();
        let ogg = ogg_opus(&packets, 255);
        let clip = Clip::parse(H264, &ogg, 30).expect("parses");
        assert_eq!(clip.audio_packets().len(), 10);
        assert_eq!(clip.duration(), Duration::from_secs(6));
        let t0 = Instant::now();
        let mut src = ClipSource::new(Arc::new(clip), t0);
        let pkts = run(&mut src, t0 + Duration::from_secs(6));
        let a: Vec<&Owned> = pkts.iter().filter(|p| p.kind == MediaKind::Audio).collect();
        assert_eq!(a.len(), 11);
        assert_eq!(a[10].rtp_ts, 6 * 48_000);
        assert_eq!(a[10].capture_time, t0 + Duration::from_secs(6));
    }

    #[test]
    fn malformed_inputs_are_errors() {
        assert_eq!(Clip::parse(H264, OPUS, 0).err(), Some(ClipError::ZeroFps));
        assert_eq!(
            Clip::parse(&[], OPUS, 30).err(),
            Some(ClipError::NoAccessUnits)
        );
        assert_eq!(
            Clip::parse(&[0, 0, 1, 0x67, 1, 2], OPUS, 30).err(),
            Some(ClipError::NoAccessUnits)
        );
        assert_eq!(
            Clip::parse(&[0, 0, 1, 0x41, 0x80], OPUS, 30).err(),
            Some(ClipError::NoKeyframe)
        );
        assert_eq!(
            Clip::parse(H264, &[], 30).err(),
            Some(ClipError::NotOpusHead)
        );
        assert_eq!(
            Clip::parse(H264, b"RIFF....", 30).err(),
            Some(ClipError::NotOgg { offset: 0 })
        );
        // A flipped bit breaks the CRC of the third page.
        let mut bad = OPUS.to_vec();
        let third = 19 + 28 + 46 + 28;
        assert!(bad[third..].starts_with(b"OggS"));
        bad[third + 200] ^= 1;
        assert_eq!(
            Clip::parse(H264, &bad, 30).err(),
            Some(ClipError::OggCrc { offset: third })
        );
        // Truncated anywhere: an error, never a panic (a cut at a page boundary keeps
        // fewer packets but still parses).
        for cut in (0..OPUS.len())
            .step_by(97)
            .chain([1, 4, 26, 27, 28, OPUS.len() - 1])
        {
            match Clip::parse(H264, &OPUS[..cut], 30) {
                Ok(clip) => assert!(clip.audio_packets().len() < 300, "cut {cut}"),
                Err(e) => assert!(!e.to_string().is_empty()),
            }
        }
        // Headers only.
        let head_only = ogg_opus(&[], 255);
        assert_eq!(
            Clip::parse(H264, &head_only, 30).err(),
            Some(ClipError::NoAudioPackets)
        );
        let head_page = &head_only[..27 + 1 + 19];
        assert_eq!(
            Clip::parse(H264, head_page, 30).err(),
            Some(ClipError::NoOpusTags)
        );
        // A bad TOC.
        let ogg = ogg_opus(&[vec![0xf8], vec![0xfb]], 255);
        assert_eq!(
            Clip::parse(H264, &ogg, 30).err(),
            Some(ClipError::BadOpusPacket { index: 1 })
        );
        // A continuation page without a packet to continue.
        let mut ogg = ogg_opus(&[], 255);
        ogg.extend(ogg_page(7, 2, 1, &[1], &[0xf8]));
        assert_eq!(
            Clip::parse(H264, &ogg, 30).err(),
            Some(ClipError::OggContinuation {
                offset: ogg.len() - 29
            })
        );
        // A packet left open at the end of the file.
        let mut ogg = ogg_opus(&[], 255);
        ogg.extend(ogg_page(7, 2, 0, &[255], &[0xf8; 255]));
        assert_eq!(
            Clip::parse(H264, &ogg, 30).err(),
            Some(ClipError::TruncatedStream)
        );
        // Not Opus.
        let mut vorbis = ogg_page(3, 0, 2, &[7], b"\x01vorbis");
        assert_eq!(
            Clip::parse(H264, &vorbis, 30).err(),
            Some(ClipError::NotOpusHead)
        );
        // ...but another stream before the Opus one is skipped.
        vorbis.extend(ogg_opus(&[vec![0xf8, 0]], 255));
        let clip = Clip::parse(H264, &vorbis, 30).expect("parses");
        assert_eq!(clip.audio_packets().len(), 1);
        // Wrong version and a short OpusHead.
        let mut v1 = opus_head();
        v1[8] = 0x10;
        let ogg = ogg_page(7, 0, 2, &[19], &v1);
        assert_eq!(
            Clip::parse(H264, &ogg, 30).err(),
            Some(ClipError::OpusVersion(0x10))
        );
        let ogg = ogg_page(7, 0, 2, &[9], &v1[..9]);
        assert_eq!(
            Clip::parse(H264, &ogg, 30).err(),
            Some(ClipError::BadOpusHead)
        );
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = Rng(0x5eed);
        for _ in 0..300 {
            let len = rng.below(3000);
            let junk: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let _ = Clip::parse(&junk, OPUS, 30);
            assert!(Clip::parse(H264, &junk, 30).is_err());
            // Junk with a valid page header in front, and a valid file with bytes mutated.
            let mut ogg = OPUS[..4000].to_vec();
            for _ in 0..1 + rng.below(8) {
                let i = rng.below(ogg.len());
                ogg[i] = rng.next() as u8;
            }
            let _ = Clip::parse(H264, &ogg, 30);
            // H264 with start codes sprinkled into junk.
            let mut h = junk.clone();
            for _ in 0..rng.below(20) {
                if h.len() > 4 {
                    let i = rng.below(h.len() - 3);
                    h[i..i + 3].copy_from_slice(&[0, 0, 1]);
                }
            }
            if let Ok(clip) = Clip::parse(&h, OPUS, 1 + rng.below(60) as u32) {
                // Whatever parsed can be paced.
                let t0 = Instant::now();
                let mut src = ClipSource::new(Arc::new(clip), t0);
                let mut n = 0;
                src.poll(t0 + Duration::from_millis(500), &mut |p| {
                    assert!(p.payload.len() <= MAX_PAYLOAD);
                    n += 1;
                });
                assert!(n > 0);
            }
        }
    }
}

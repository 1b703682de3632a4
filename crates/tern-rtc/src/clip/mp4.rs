//! [`Clip::from_mp4`]: a slate read from an MP4 file with libavformat (`ffmpeg-next`).
//!
//! libavformat opens the file (always through its `file` protocol, so a path never names a
//! network URL or a pipe), picks the best video and audio streams and reads their samples
//! in file order. Its safe binding does not expose a stream's codec configuration
//! (`extradata`), so the boxes that hold it are read here from the file's `moov`: `avcC` or
//! `hvcC` (the parameter sets and the NAL length size of the H264 or H265 samples; `hvcC`
//! through `mp4-atom`, which tern's CMAF writer uses too), `esds` (AAC's
//! AudioSpecificConfig) and `dOps` (Opus's channel count). A stream is matched to its
//! `trak` by ID: libavformat's stream id is the MP4 track ID.
//!
//! * Video: each sample (NAL units behind big-endian lengths) is one access unit. H264's
//!   NAL units go through the packetizer of [`Clip::parse`], H265's through
//!   [`tern_proto::h265::packetize_nals`] (RFC 7798), the configuration box's parameter sets in
//!   front of every keyframe (unless the sample carries its own), so that a receiver can
//!   start at any keyframe; access unit delimiters are dropped. Samples go out in decoding
//!   order at a constant rate.
//! * Audio: Opus packets as they are; AAC decoded and encoded as Opus by
//!   [`AacToOpus`]. The two tracks' samples interleave in the file, so the Opus packets are
//!   gathered apart and appended after the video, as the clip's layout wants.
//!
//! Nothing in the file can make this panic: a box, a sample or a descriptor that does not
//! parse, a read error or a truncated sample is an error.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::Path;

use ffmpeg_next as ff;
use mp4_atom::Atom;
use tern_proto::codec::VideoCodec;
use tern_proto::h264::{self, NAL_AUD, NAL_IDR, NAL_SPS};
use tern_proto::h265;
use tern_proto::rtmp::flv::{AvcConfig, avcc_nal_units};

use super::{AudioEntry, Clip, ClipError, MAX_PAYLOAD, Span, opus_packet_samples};
use crate::transcode::AacToOpus;
use crate::video_transcode::init;

/// Highest frame rate a clip is paced at.
const MAX_FPS: i64 = 120;

/// Largest `moov` box read: its sample tables grow with the file (a few MB for an hour).
const MAX_MOOV: u64 = 64 << 20;

/// Samples per channel in one AAC-LC frame (what [`AacToOpus`] decodes).
const AAC_FRAME: u64 = 1024;

/// Bytes of a VisualSampleEntry (`avc1`) before its child boxes (ISO/IEC 14496-12 §12.1.3).
const VISUAL_ENTRY: usize = 78;

/// Bytes of an AudioSampleEntry (`mp4a`, `Opus`) version 0 before its child boxes
/// (ISO/IEC 14496-12 §12.2.3); QuickTime's versions 1 and 2 add 16 and 36.
const AUDIO_ENTRY: usize = 28;

/// What is kept of a stream once the packets are read.
struct Track {
    index: usize,
    id: i32,
}

// The entry point lives here, not in clip.rs, so that clip.rs only declares this module
// and imports are one way (this file takes the clip's parts from its parent).
impl Clip {
    /// Reads a clip from an MP4 file: its best H264 or H265 video stream and its best AAC or
    /// Opus audio stream, through libavformat (a slate an operator names, a file
    /// `tern bench` publishes). [`Clip::video_codec`] says which video it holds.
    ///
    /// Each video sample becomes one access unit, the parameter sets (from the `avcC` or
    /// `hvcC` box) put in front of every keyframe so that a receiver can start at any of
    /// them. The clip is paced in decoding order at the stream's average frame rate rounded
    /// to an integer (1-120 fps): a file with B-frames or a variable frame rate plays, but
    /// its frames are sent in decoding order at a constant rate. Opus packets pass through;
    /// AAC-LC is decoded and encoded as 20 ms Opus frames at 48 kHz
    /// ([`crate::transcode::AacToOpus`]; its 1024 priming samples are kept, ~21 ms). Audio is
    /// then trimmed and the loop period set as in [`Clip::parse`]. Blocking: it reads the
    /// whole file.
    pub fn from_mp4(path: &std::path::Path) -> Result<Clip, ClipError> {
        read(path)
    }
}

/// Reads `path`: see [`Clip::from_mp4`].
fn read(path: &Path) -> Result<Clip, ClipError> {
    let fail = |message: String| ClipError::Mp4 {
        path: path.to_path_buf(),
        message,
    };
    // The binding turns the path into a C string with `unwrap`s: refuse what it cannot.
    let url = match path.to_str() {
        Some(p) if !p.contains('\0') => format!("file:{p}"),
        _ => return Err(fail("the path is not UTF-8 or holds a NUL byte".into())),
    };
    init().map_err(|e| fail(e.to_string()))?;
    let mut input = ff::format::input(Path::new(&url)).map_err(|e| fail(e.to_string()))?;
    let demuxer = input.format().name().to_owned();
    if !demuxer.split(',').any(|n| n == "mp4" || n == "mov") {
        return Err(fail(format!(
            "not an MP4 file (libavformat reads it as {demuxer})"
        )));
    }
    let (video, codec, fps) = {
        let s = input
            .streams()
            .best(ff::media::Type::Video)
            .ok_or(ClipError::Mp4NoStream { what: "video" })?;
        let codec = match s.parameters().id() {
            ff::codec::Id::H264 => VideoCodec::H264,
            ff::codec::Id::HEVC => VideoCodec::H265,
            codec => {
                return Err(ClipError::Mp4Codec {
                    what: "video",
                    codec: codec.name().to_owned(),
                    needed: "H264 or H265",
                });
            }
        };
        let track = Track {
            index: s.index(),
            id: s.id(),
        };
        (track, codec, frame_rate(s.avg_frame_rate(), s.rate())?)
    };
    let (audio, opus) = {
        let s = input
            .streams()
            .best(ff::media::Type::Audio)
            .ok_or(ClipError::Mp4NoStream { what: "audio" })?;
        let opus = match s.parameters().id() {
            ff::codec::Id::OPUS => true,
            ff::codec::Id::AAC => false,
            codec => {
                return Err(ClipError::Mp4Codec {
                    what: "audio",
                    codec: codec.name().to_owned(),
                    needed: "AAC or Opus",
                });
            }
        };
        let track = Track {
            index: s.index(),
            id: s.id(),
        };
        (track, opus)
    };

    let moov = read_moov(path).map_err(fail)?;
    let config = VideoConfig::read(&moov, video.id, codec).map_err(fail)?;
    let audio_boxes = sample_entry(&moov, audio.id)
        .and_then(|(_, entry)| audio_entry_children(entry))
        .ok_or_else(|| fail("the audio track has no sample description".into()))?;
    let mut aac = if opus {
        // Opus in MP4 (Opus's mapping for ISOBMFF §4.3.2): the channel count is the second
        // byte of dOps. More than two channels would be multistream packets.
        if let Some(&channels) = child(audio_boxes, b"dOps").and_then(|d| d.get(1))
            && !(1..=2).contains(&channels)
        {
            return Err(fail(format!(
                "Opus with {channels} channels: only mono and stereo are played"
            )));
        }
        None
    } else {
        let asc = child(audio_boxes, b"esds")
            .and_then(audio_specific_config)
            .ok_or_else(|| fail("the AAC track has no AudioSpecificConfig in esds".into()))?;
        Some(AacToOpus::new(asc).map_err(|e| fail(format!("AAC: {e}")))?)
    };
    drop(moov);

    let mut clip = Clip {
        video_codec: codec,
        data: Vec::new(),
        video_packets: Vec::new(),
        frames: Vec::new(),
        audio: Vec::new(),
        fps,
        period: 1,
    };
    let mut packetizer = h264::Packetizer::new();
    let mut opus_data: Vec<u8> = Vec::new();
    let mut opus_packets: Vec<Range<usize>> = Vec::new();
    let (mut video_samples, mut audio_samples) = (0u64, 0u64);
    loop {
        let mut packet = ff::Packet::empty();
        match packet.read(&mut input) {
            Ok(()) => {}
            Err(ff::Error::Eof) => break,
            Err(e) => return Err(fail(format!("reading the samples: {e}"))),
        }
        let stream = packet.stream();
        if stream != video.index && stream != audio.index {
            continue;
        }
        if packet.is_corrupt() {
            return Err(fail(format!(
                "a truncated or corrupt sample in stream {stream}"
            )));
        }
        let data = packet.data().unwrap_or(&[]);
        if stream == video.index {
            let units = avcc_nal_units(data, config.length_size())
                .map_err(|e| fail(format!("video sample {video_samples}: {e}")))?;
            video_samples += 1;
            match &config {
                VideoConfig::H264(avc) => {
                    push_sample(&mut clip, &mut packetizer, avc, units, packet.is_key())?;
                }
                VideoConfig::H265 { parameter_sets, .. } => {
                    push_h265_sample(&mut clip, parameter_sets, &units)?;
                }
            }
            continue;
        }
        let mut push = |p: &[u8]| {
            let start = opus_data.len();
            opus_data.extend_from_slice(p);
            opus_packets.push(start..opus_data.len());
        };
        match &mut aac {
            None => push(data),
            Some(transcoder) => {
                // The frames' own timestamps are not needed: counted, they are continuous.
                let ts_ms =
                    audio_samples * AAC_FRAME * 1000 / u64::from(transcoder.sample_rate().max(1));
                transcoder
                    .push(data, ts_ms, &mut |p, _| push(p))
                    .map_err(|e| fail(format!("AAC frame {audio_samples}: {e}")))?;
            }
        }
        audio_samples += 1;
    }
    drop(input);
    clip.check_video()?;

    let base = clip.data.len();
    clip.data.extend_from_slice(&opus_data);
    for (index, range) in opus_packets.into_iter().enumerate() {
        let samples = opus_data
            .get(range.clone())
            .and_then(opus_packet_samples)
            .ok_or(ClipError::BadOpusPacket { index })?;
        let span = Span::new(base + range.start..base + range.end)?;
        let start = clip.audio_samples();
        clip.audio.push(AudioEntry {
            span,
            start,
            samples,
        });
    }
    clip.finish()
}

/// The clip's frame rate: the stream's average rate (or else its base rate) rounded to
/// the nearest integer, which must be 1 to [`MAX_FPS`].
fn frame_rate(avg: ff::Rational, base: ff::Rational) -> Result<u32, ClipError> {
    let valid = |q: &ff::Rational| q.numerator() > 0 && q.denominator() > 0;
    let q = [avg, base].into_iter().find(valid).unwrap_or(avg);
    let (n, d) = (i64::from(q.numerator()), i64::from(q.denominator()));
    let fps = if d > 0 { (2 * n + d) / (2 * d) } else { 0 };
    u32::try_from(fps)
        .ok()
        .filter(|&f| (1..=MAX_FPS).contains(&i64::from(f)))
        .ok_or(ClipError::Mp4FrameRate {
            numerator: q.numerator(),
            denominator: q.denominator(),
        })
}

/// A video track's configuration box: what its samples need to be cut and led.
enum VideoConfig {
    /// `avcC`.
    H264(AvcConfig),
    /// `hvcC`: its NAL units' length size and its parameter sets (VPS, SPS, PPS, in the
    /// box's order).
    H265 {
        length_size: usize,
        parameter_sets: Vec<Vec<u8>>,
    },
}

impl VideoConfig {
    /// Reads track `id`'s configuration box from `moov`.
    fn read(moov: &[u8], id: i32, codec: VideoCodec) -> Result<VideoConfig, String> {
        let entry = sample_entry(moov, id);
        let child_of = |types: &[&[u8; 4]], name: &[u8; 4]| {
            entry
                .filter(|(ty, _)| types.iter().any(|t| **t == *ty))
                .and_then(|(_, entry)| child(entry.get(VISUAL_ENTRY..)?, name))
        };
        if codec == VideoCodec::H264 {
            let avc =
                child_of(&[b"avc1", b"avc3"], b"avcC").ok_or("the H264 track has no avcC box")?;
            return AvcConfig::parse(avc)
                .map(VideoConfig::H264)
                .map_err(|e| format!("avcC: {e}"));
        }
        let mut hvc =
            child_of(&[b"hvc1", b"hev1"], b"hvcC").ok_or("the H265 track has no hvcC box")?;
        let hvcc = mp4_atom::Hvcc::decode_body(&mut hvc).map_err(|e| format!("hvcC: {e}"))?;
        let length_size = usize::from(hvcc.length_size_minus_one) + 1;
        if !matches!(length_size, 1 | 2 | 4) {
            return Err(format!(
                "hvcC: a NAL unit length size of {length_size} bytes (1, 2 or 4 are valid)"
            ));
        }
        // Each NAL unit's own header says what it is, whatever array holds it; VPS, then
        // SPS, then PPS, as a decoder takes them.
        let mut parameter_sets: Vec<Vec<u8>> = hvcc
            .arrays
            .into_iter()
            .flat_map(|a| a.nalus)
            .filter(|n| n.len() > 2 && h265::is_parameter_set(n))
            .collect();
        parameter_sets.sort_by_key(|n| h265::nal_type(n));
        Ok(VideoConfig::H265 {
            length_size,
            parameter_sets,
        })
    }

    /// Bytes of the length in front of each NAL unit of a sample.
    fn length_size(&self) -> usize {
        match self {
            VideoConfig::H264(avc) => avc.length_size,
            VideoConfig::H265 { length_size, .. } => *length_size,
        }
    }
}

/// Packetizes one H265 sample's NAL units as one access unit (RFC 7798), the `hvcC`
/// parameter sets in front of a keyframe (an IRAP picture, whatever the file's sync-sample
/// table says: a file without one marks every sample) that does not carry its own SPS;
/// access unit delimiters are dropped by the packetizer.
fn push_h265_sample(
    clip: &mut Clip,
    parameter_sets: &[Vec<u8>],
    units: &[&[u8]],
) -> Result<(), ClipError> {
    let keyframe = units.iter().any(|n| h265::is_irap(n));
    if !units.iter().any(|n| h265::nal_type(n) < 32) {
        return Ok(()); // no coded picture
    }
    let lead = keyframe && !units.iter().any(|n| h265::nal_type(n) == h265::SPS);
    let lead: &[Vec<u8>] = if lead { parameter_sets } else { &[] };
    let nals: Vec<&[u8]> = lead
        .iter()
        .map(Vec::as_slice)
        .chain(units.iter().copied())
        .collect();
    clip.push_frame(keyframe, |emit| {
        h265::packetize_nals(&nals, MAX_PAYLOAD, emit)?;
        Ok(())
    })
}

/// Packetizes one video sample's NAL units as one access unit, the `avcC` parameter sets
/// in front of a keyframe that does not carry its own.
fn push_sample(
    clip: &mut Clip,
    packetizer: &mut h264::Packetizer,
    avc: &AvcConfig,
    units: Vec<&[u8]>,
    sync_sample: bool,
) -> Result<(), ClipError> {
    let has = |t: u8| units.iter().any(|n| h264::nal_type(n) == t);
    let keyframe = sync_sample || has(NAL_IDR);
    let mut nals: Vec<&[u8]> = Vec::with_capacity(units.len() + avc.sps.len() + avc.pps.len());
    if keyframe && !has(NAL_SPS) {
        nals.extend(avc.sps.iter().chain(&avc.pps).map(Vec::as_slice));
    }
    nals.extend(
        units
            .iter()
            .copied()
            .filter(|n| h264::nal_type(n) != NAL_AUD),
    );
    let has_picture = nals
        .iter()
        .any(|n| (1..=NAL_IDR).contains(&h264::nal_type(n)));
    clip.push_access_unit(packetizer, &nals, has_picture)
}

/// The body of the file's top-level `moov` box.
fn read_moov(path: &Path) -> Result<Vec<u8>, String> {
    let io = |e: std::io::Error| format!("reading its boxes: {e}");
    let mut file = File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let mut pos = 0u64;
    while len.saturating_sub(pos) >= 8 {
        file.seek(SeekFrom::Start(pos)).map_err(io)?;
        let mut head = [0u8; 8];
        file.read_exact(&mut head).map_err(io)?;
        let (size, header) = match u32::from_be_bytes([head[0], head[1], head[2], head[3]]) {
            0 => (len - pos, 8),
            1 => {
                let mut large = [0u8; 8];
                file.read_exact(&mut large).map_err(io)?;
                (u64::from_be_bytes(large), 16)
            }
            n => (u64::from(n), 8),
        };
        if size < header || size > len - pos {
            break;
        }
        if &head[4..] == b"moov" {
            let body = size - header;
            if body > MAX_MOOV {
                return Err(format!("a moov box of {body} bytes"));
            }
            let mut moov = vec![0; usize::try_from(body).map_err(|e| e.to_string())?];
            file.read_exact(&mut moov).map_err(io)?;
            return Ok(moov);
        }
        pos += size;
    }
    Err("no moov box".into())
}

/// The boxes laid end to end in `data`, as (type, body), up to the first one whose header
/// does not parse or whose size runs past the end.
fn boxes(mut data: &[u8]) -> impl Iterator<Item = ([u8; 4], &[u8])> {
    std::iter::from_fn(move || {
        let (size, rest) = data.split_first_chunk::<4>()?;
        let (&ty, rest) = rest.split_first_chunk::<4>()?;
        let (len, header) = match u32::from_be_bytes(*size) {
            0 => (data.len(), 8),
            1 => (
                usize::try_from(u64::from_be_bytes(*rest.first_chunk::<8>()?)).ok()?,
                16,
            ),
            n => (usize::try_from(n).ok()?, 8),
        };
        let (whole, next) = data.split_at_checked(len)?;
        let body = whole.get(header..)?;
        data = next;
        Some((ty, body))
    })
}

/// The body of the first box of type `ty` in `data`.
fn child<'a>(data: &'a [u8], ty: &[u8; 4]) -> Option<&'a [u8]> {
    boxes(data).find(|(t, _)| t == ty).map(|(_, body)| body)
}

/// The first sample entry (`stsd`) of the track whose ID is `track_id`: its type and body.
fn sample_entry(moov: &[u8], track_id: i32) -> Option<([u8; 4], &[u8])> {
    let trak = boxes(moov)
        .filter(|(t, _)| t == b"trak")
        .map(|(_, body)| body)
        .find(|trak| {
            child(trak, b"tkhd").and_then(|tkhd| {
                // Version 1 has 64-bit creation and modification times before the ID.
                let at = if *tkhd.first()? == 1 { 20 } else { 12 };
                let id = u32::from_be_bytes(*tkhd.get(at..)?.first_chunk::<4>()?);
                Some(i64::from(id) == i64::from(track_id))
            }) == Some(true)
        })?;
    let stsd = [b"mdia", b"minf", b"stbl", b"stsd"]
        .into_iter()
        .try_fold(trak, |parent, ty| child(parent, ty))?;
    // A full box: version and flags, then the entry count.
    boxes(stsd.get(8..)?).next()
}

/// The child boxes of an AudioSampleEntry's body.
fn audio_entry_children(entry: &[u8]) -> Option<&[u8]> {
    let version = u16::from_be_bytes(*entry.get(8..)?.first_chunk::<2>()?);
    let extra = match version {
        0 => 0,
        1 => 16,
        2 => 36,
        _ => return None,
    };
    entry.get(AUDIO_ENTRY + extra..)
}

/// One MPEG-4 descriptor (ISO/IEC 14496-1 §8.3.3): its tag, its body and what follows it.
fn descriptor(data: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, mut rest) = data.split_first()?;
    let mut len = 0usize;
    // The size: up to four bytes of 7 bits, the top bit saying another follows.
    for _ in 0..4 {
        let (&b, r) = rest.split_first()?;
        rest = r;
        len = len << 7 | usize::from(b & 0x7f);
        if b & 0x80 == 0 {
            let (body, after) = rest.split_at_checked(len)?;
            return Some((tag, body, after));
        }
    }
    None
}

/// The first descriptor of tag `tag` among those laid end to end in `data`.
fn find_descriptor(mut data: &[u8], tag: u8) -> Option<&[u8]> {
    loop {
        let (t, body, rest) = descriptor(data)?;
        if t == tag {
            return Some(body);
        }
        data = rest;
    }
}

/// The AudioSpecificConfig in an `esds` box's body: ES_Descriptor (tag 3) >
/// DecoderConfigDescriptor (tag 4) > DecoderSpecificInfo (tag 5), ISO/IEC 14496-1 §7.2.6.
fn audio_specific_config(esds: &[u8]) -> Option<&[u8]> {
    // A full box: version and flags first.
    let es = find_descriptor(esds.get(4..)?, 3)?;
    // ES_ID (2 bytes), then flags: stream dependence (an ES_ID follows), URL (a length
    // and the URL), OCR stream (an ES_ID).
    let flags = *es.get(2)?;
    let mut at = 3;
    if flags & 0x80 != 0 {
        at += 2;
    }
    if flags & 0x40 != 0 {
        at += 1 + usize::from(*es.get(at)?);
    }
    if flags & 0x20 != 0 {
        at += 2;
    }
    let config = find_descriptor(es.get(at..)?, 4)?;
    // Object type, stream type, buffer size, maximum and average bit rates: 13 bytes.
    find_descriptor(config.get(13..)?, 5).filter(|asc| !asc.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clip::{ClipSource, MAX_PAYLOAD, MediaPacket};
    use std::path::PathBuf;
    use std::process::Command;
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    use tern_proto::codec::{MediaKind, VideoCodec};
    use tern_proto::h264::{Depacketizer, NAL_STAP_A, is_keyframe};

    /// A directory of its own under the system's temporary one, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let dir =
                std::env::temp_dir().join(format!("tern-clip-mp4-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("create a temporary directory");
            TempDir(dir)
        }

        /// Runs the ffmpeg CLI with a 320x180 test pattern at `rate` fps (input 0) and a
        /// 440 Hz tone (input 1), then `args`, writing `name` in the directory. A machine
        /// without ffmpeg fails the test: these tests are not skipped.
        fn ffmpeg(&self, name: &str, rate: u32, args: &[&str]) -> PathBuf {
            let out = self.0.join(name);
            let pattern = format!("testsrc=size=320x180:rate={rate}");
            let status = Command::new("ffmpeg")
                .args([
                    "-v", "error", "-nostdin", "-y", "-f", "lavfi", "-i", &pattern,
                ])
                .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"])
                .args(args)
                .arg(&out)
                .status()
                .expect("the ffmpeg CLI runs (these tests need it)");
            assert!(status.success(), "ffmpeg {args:?}: {status}");
            out
        }

        /// A 3 s slate, H264 at 25 fps with a keyframe every second, and audio in `codec`.
        fn slate(&self, name: &str, codec: &str, extra: &[&str]) -> PathBuf {
            let mut args = vec![
                "-t",
                "3",
                "-c:v",
                "libx264",
                "-pix_fmt",
                "yuv420p",
                "-g",
                "25",
                "-sc_threshold",
                "0",
                "-bf",
                "0",
                "-c:a",
                codec,
            ];
            args.extend_from_slice(extra);
            self.ffmpeg(name, 25, &args)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// The type of the first NAL unit in an RTP payload (inside a STAP-A if it is one).
    fn first_nal_type(payload: &[u8]) -> u8 {
        match h264::nal_type(payload) {
            NAL_STAP_A => payload.get(3).map_or(0, |b| b & 0x1f),
            t => t,
        }
    }

    /// Checks a 3 s, 25 fps slate with keyframes at 0, 1 and 2 s, and paces one loop.
    fn check_slate(clip: Clip) {
        assert_eq!(clip.fps(), 25);
        let d = clip.duration().as_secs_f64();
        assert!((d - 3.0).abs() <= 0.1, "duration {d}");
        assert_eq!(clip.video_frames().len(), 75);
        for (i, f) in clip.video_frames().enumerate() {
            assert_eq!(f.keyframe(), i % 25 == 0, "frame {i}");
            let first = f.packets().next().expect("a packet");
            assert!(f.packets().all(|p| !p.is_empty() && p.len() <= MAX_PAYLOAD));
            assert_eq!(is_keyframe(first), f.keyframe(), "frame {i}");
            if f.keyframe() {
                assert_eq!(first_nal_type(first), NAL_SPS, "frame {i}: {first:02x?}");
            }
        }
        let mut start = 0;
        for a in clip.audio_packets() {
            assert_eq!(a.start, start);
            assert_eq!(opus_packet_samples(a.payload), Some(a.samples));
            start += u64::from(a.samples);
        }
        let want = 3 * 48_000;
        assert!(start.abs_diff(want) <= 60 * 48, "{start} samples of audio");

        // One loop, paced: every frame arrives whole, then the next loop starts over.
        let clip = Arc::new(clip);
        let t0 = Instant::now();
        let mut src = ClipSource::new(clip.clone(), t0);
        let mut de = Depacketizer::new();
        let mut audio = 0;
        let mut frames_at = Vec::new();
        let mut keyframes = Vec::new();
        let end = t0 + clip.duration() - Duration::from_nanos(1);
        loop {
            let now = src.poll_timeout().min(end);
            src.poll(now, &mut |p: MediaPacket<'_>| match p.kind {
                MediaKind::Video => {
                    let au = de
                        .push(p.seq as u16, p.rtp_ts, p.marker, p.payload)
                        .expect("well-formed payload");
                    if let Some(au) = au.filter(|_| p.rtp_ts.is_multiple_of(25 * 3600)) {
                        keyframes.push(au.to_vec());
                    }
                    if p.marker {
                        frames_at.push((p.rtp_ts, p.capture_time));
                    }
                }
                MediaKind::Audio => audio += 1,
            });
            if now == end {
                break;
            }
        }
        assert_eq!(src.skipped(), 0);
        assert_eq!(
            (de.frames(), de.keyframes(), de.damaged_frames()),
            (75, 3, 0)
        );
        assert_eq!(audio, clip.audio_packets().len());
        // Each keyframe decodes on its own: a receiver may start at any of them.
        assert_eq!(keyframes.len(), 3);
        for au in &keyframes {
            let still = crate::thumbnail::decode(VideoCodec::H264, au).expect("decodes");
            assert_eq!((still.width(), still.height()), (320, 180));
        }
        for (i, &(ts, at)) in frames_at.iter().enumerate() {
            assert_eq!(ts, i as u32 * 3600);
            assert_eq!(at, t0 + Duration::from_millis(40) * i as u32);
        }
        let mut next = Vec::new();
        src.poll(t0 + clip.duration(), &mut |p| {
            next.push((p.kind, p.keyframe, p.rtp_ts))
        });
        // Loop 1 starts with the first keyframe, at the loop period.
        let period_ts = (clip.duration().as_nanos() * 90_000 / 1_000_000_000) as u32;
        assert_eq!(next.first(), Some(&(MediaKind::Video, true, period_ts)));
    }

    #[test]
    fn an_aac_slate_is_transcoded_to_opus() {
        let dir = TempDir::new("aac");
        let path = dir.slate("aac.mp4", "aac", &[]);
        let clip = Clip::from_mp4(&path).expect("the slate reads");
        // AacToOpus makes 20 ms packets.
        assert!(clip.audio_packets().all(|a| a.samples == 960));
        check_slate(clip);
    }

    #[test]
    fn an_opus_slate_passes_its_packets_through() {
        let dir = TempDir::new("opus");
        let path = dir.slate("opus.mp4", "libopus", &["-frame_duration", "10"]);
        let clip = Clip::from_mp4(&path).expect("the slate reads");
        // libopus's 10 ms packets, unchanged.
        assert!(clip.audio_packets().all(|a| a.samples == 480));
        check_slate(clip);
    }

    #[test]
    fn a_faststart_slate_at_44100_hz_reads_too() {
        let dir = TempDir::new("faststart");
        let path = dir.slate(
            "fast.mp4",
            "aac",
            &["-ar", "44100", "-movflags", "+faststart"],
        );
        check_slate(Clip::from_mp4(&path).expect("the slate reads"));
    }

    /// An H265 file (`hvc1`, the parameter sets in `hvcC` only, as x265 writes them by
    /// default) is read as H265: each keyframe led by the VPS, SPS and PPS, every access unit
    /// rebuilt whole from its RFC 7798 payloads, and each keyframe decodes on its own.
    #[test]
    fn an_h265_file_is_read_as_h265_with_its_parameter_sets_at_each_keyframe() {
        let dir = TempDir::new("hevc");
        let path = dir.ffmpeg(
            "hevc.mp4",
            25,
            &[
                "-t",
                "3",
                "-c:v",
                "libx265",
                "-pix_fmt",
                "yuv420p",
                "-preset",
                "ultrafast",
                "-x265-params",
                "bframes=0:keyint=25:min-keyint=25:scenecut=0:log-level=error",
                "-tag:v",
                "hvc1",
                "-c:a",
                "libopus",
            ],
        );
        let clip = Clip::from_mp4(&path).expect("the file reads");
        assert_eq!(clip.video_codec(), VideoCodec::H265);
        assert_eq!((clip.fps(), clip.video_frames().len()), (25, 75));
        let mut de = h265::Depacketizer::new();
        let mut keyframes = Vec::new();
        let mut seq = 0u16;
        for (i, f) in clip.video_frames().enumerate() {
            assert_eq!(f.keyframe(), i % 25 == 0, "frame {i}");
            assert!(f.packets().all(|p| p.len() > 2 && p.len() <= MAX_PAYLOAD));
            // A keyframe is led by its parameter sets, in a decoder's order.
            if f.keyframe() {
                let lead: Vec<u8> = f.packets().take(3).map(h265::nal_type).collect();
                assert_eq!(lead, [h265::VPS, h265::SPS, h265::PPS], "frame {i}");
            }
            let n = f.packets().len();
            for (j, p) in f.packets().enumerate() {
                seq = seq.wrapping_add(1);
                let au = de
                    .push(seq, i as u32 * 3600, j + 1 == n, p)
                    .expect("well-formed payload");
                if let Some(au) = au.filter(|_| f.keyframe()) {
                    keyframes.push(au.to_vec());
                }
            }
        }
        assert_eq!((de.frames(), de.keyframes()), (75, 3));
        assert_eq!(keyframes.len(), 3);
        for au in &keyframes {
            let still = crate::thumbnail::decode(VideoCodec::H265, au).expect("decodes");
            assert_eq!((still.width(), still.height()), (320, 180));
        }
        assert!(clip.audio_packets().len() > 100);
    }

    #[test]
    fn files_it_cannot_play_are_errors() {
        let dir = TempDir::new("errors");
        let text = dir.0.join("notes.mp4");
        std::fs::write(&text, "not a video\n").expect("write");
        assert!(
            matches!(Clip::from_mp4(&text), Err(ClipError::Mp4 { ref path, .. }) if *path == text)
        );
        let missing = dir.0.join("missing.mp4");
        let err = Clip::from_mp4(&missing).expect_err("no file");
        assert!(matches!(err, ClipError::Mp4 { .. }), "{err}");
        assert!(err.to_string().contains("missing.mp4"), "{err}");

        let vp9 = dir.ffmpeg(
            "vp9.mp4",
            25,
            &[
                "-t",
                "0.5",
                "-c:v",
                "libvpx-vp9",
                "-deadline",
                "realtime",
                "-c:a",
                "libopus",
            ],
        );
        let err = Clip::from_mp4(&vp9).expect_err("VP9");
        assert!(
            matches!(err, ClipError::Mp4Codec { what: "video", .. }),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(msg.contains("vp9") && msg.contains("H264 or H265"), "{msg}");

        let silent = dir.ffmpeg("silent.mp4", 25, &["-t", "0.5", "-c:v", "libx264", "-an"]);
        let err = Clip::from_mp4(&silent).expect_err("no audio");
        assert_eq!(err, ClipError::Mp4NoStream { what: "audio" });
        assert!(err.to_string().contains("no audio stream"), "{err}");

        let ac3 = dir.ffmpeg(
            "ac3.mp4",
            25,
            &["-t", "0.5", "-c:v", "libx264", "-c:a", "ac3"],
        );
        let err = Clip::from_mp4(&ac3).expect_err("AC-3");
        assert!(
            matches!(
                err,
                ClipError::Mp4Codec {
                    what: "audio",
                    needed: "AAC or Opus",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("ac3"), "{err}");

        let fast = dir.ffmpeg(
            "240fps.mp4",
            240,
            &["-t", "0.2", "-c:v", "libx264", "-c:a", "aac"],
        );
        assert_eq!(
            Clip::from_mp4(&fast).err(),
            Some(ClipError::Mp4FrameRate {
                numerator: 240,
                denominator: 1
            })
        );

        let mkv = dir.ffmpeg(
            "slate.mkv",
            25,
            &["-t", "0.5", "-c:v", "libx264", "-c:a", "aac"],
        );
        let err = Clip::from_mp4(&mkv).expect_err("Matroska");
        assert!(err.to_string().contains("not an MP4 file"), "{err}");
    }

    /// A small deterministic PRNG (xorshift64*).
    fn next(state: &mut u64) -> u64 {
        *state ^= *state >> 12;
        *state ^= *state << 25;
        *state ^= *state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    #[test]
    fn truncated_and_damaged_files_are_errors_not_panics() {
        let dir = TempDir::new("damaged");
        let short = ["-t", "1", "-c:v", "libx264", "-g", "10", "-c:a", "aac"];
        let mut fast = short.to_vec();
        fast.extend(["-movflags", "+faststart"]);
        let files = [
            dir.ffmpeg("end.mp4", 25, &short),
            dir.ffmpeg("fast.mp4", 25, &fast),
        ];
        let cut = dir.0.join("cut.mp4");
        for file in &files {
            let bytes = std::fs::read(file).expect("read");
            assert!(Clip::from_mp4(file).is_ok());
            // Cut anywhere: a file with its moov at the end loses it, a faststart one
            // loses samples. Either way an error.
            for n in [
                0,
                8,
                100,
                1000,
                bytes.len() / 3,
                bytes.len() / 2,
                bytes.len() - 10,
            ] {
                std::fs::write(&cut, &bytes[..n]).expect("write");
                let res = Clip::from_mp4(&cut);
                assert!(res.is_err(), "{} cut at {n}: {res:?}", file.display());
            }
            // Bytes changed anywhere: whatever comes of it, no panic.
            let mut rng = 0x5eed_u64 + bytes.len() as u64;
            for _ in 0..40 {
                let mut damaged = bytes.clone();
                for _ in 0..1 + next(&mut rng) % 8 {
                    let i = (next(&mut rng) % damaged.len() as u64) as usize;
                    damaged[i] = next(&mut rng) as u8;
                }
                std::fs::write(&cut, &damaged).expect("write");
                if let Ok(clip) = Clip::from_mp4(&cut) {
                    assert!(clip.video_frames().len() > 0);
                }
            }
        }
    }

    #[test]
    fn boxes_and_descriptors_that_do_not_parse_stop_the_walk() {
        // A box whose size runs past the end, one smaller than its header, a zero size
        // (to the end) and a 64-bit size.
        assert_eq!(boxes(&[0, 0, 0, 9, b'f', b'r', b'e', b'e']).count(), 0);
        assert_eq!(boxes(&[0, 0, 0, 4, b'f', b'r', b'e', b'e']).count(), 0);
        let to_end: Vec<_> = boxes(&[0, 0, 0, 0, b'm', b'd', b'a', b't', 7]).collect();
        assert_eq!(to_end, [(*b"mdat", &[7u8][..])]);
        let large = [
            0, 0, 0, 1, b'f', b'r', b'e', b'e', 0, 0, 0, 0, 0, 0, 0, 17, 9,
        ];
        assert_eq!(boxes(&large).collect::<Vec<_>>(), [(*b"free", &[9u8][..])]);
        assert_eq!(boxes(&large[..16]).count(), 0);
        // A descriptor size of five bytes, and one past the end.
        assert_eq!(descriptor(&[3, 0x80, 0x80, 0x80, 0x80, 1]), None);
        assert_eq!(descriptor(&[3, 2, 1]), None);
        assert_eq!(
            descriptor(&[5, 0x80, 2, 1, 2, 9]),
            Some((5, &[1, 2][..], &[9][..]))
        );
        // An esds with a URL flag whose URL runs past the end.
        assert_eq!(
            audio_specific_config(&[0, 0, 0, 0, 3, 4, 0, 1, 0x40, 9]),
            None
        );
        // A full one: ES_Descriptor > DecoderConfigDescriptor > DecoderSpecificInfo.
        let mut esds = vec![0, 0, 0, 0, 3, 22, 0, 1, 0, 4, 17, 0x40, 0x15];
        esds.extend([0; 11]);
        esds.extend([5, 2, 0x11, 0x90]);
        assert_eq!(audio_specific_config(&esds), Some(&[0x11, 0x90][..]));
        assert_eq!(audio_specific_config(&esds[..esds.len() - 1]), None);
    }

    #[test]
    fn frame_rates_round_to_an_integer() {
        let q = ff::Rational::new;
        assert_eq!(frame_rate(q(30_000, 1001), q(0, 0)), Ok(30));
        assert_eq!(frame_rate(q(0, 0), q(25, 1)), Ok(25));
        assert_eq!(frame_rate(q(239, 2), q(0, 1)), Ok(120));
        assert!(frame_rate(q(241, 2), q(0, 1)).is_err());
        assert!(frame_rate(q(1, 3), q(0, 1)).is_err());
        assert!(frame_rate(q(0, 0), q(0, 0)).is_err());
        assert!(frame_rate(q(-25, 1), q(-1, 0)).is_err());
    }
}

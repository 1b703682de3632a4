//! FLV audio and video tag bodies as RTMP carries them (message types 8 and 9), and the
//! step from H264 in AVCC form to RTP payloads.
//!
//! * [`VideoTag::parse`] reads the FLV video tag header (frame type, codec, AVC packet type,
//!   composition time). [`AvcConfig::parse`] reads the AVCDecoderConfigurationRecord of an
//!   AVC sequence header (ISO/IEC 14496-15 §5.2.4.1) for its SPS, PPS and NAL length size;
//!   [`avcc_nal_units`] splits a length-prefixed AVC frame into NAL units.
//! * [`AvcRtp`] turns AVC frames into RTP payloads (RFC 6184 packetization mode 1, through
//!   [`crate::h264::Packetizer`]): single NAL unit packets, FU-A fragments, and the SPS and
//!   PPS of the last sequence header in a STAP-A in front of every keyframe that does not
//!   carry them in band, so a viewer can start decoding at any keyframe.
//! * [`AudioTag::parse`] reads the FLV audio tag header; [`AudioSpecificConfig::parse`]
//!   reads the AAC AudioSpecificConfig (ISO/IEC 14496-3 §1.6.2.1) of an AAC sequence header.

use thiserror::Error;

use crate::h264::{self, NAL_AUD, NAL_IDR, NAL_PPS, NAL_SPS, PacketizeError};

/// FLV codec id of AVC (H264).
pub const CODEC_AVC: u8 = 7;
/// FLV sound format of AAC.
pub const SOUND_AAC: u8 = 10;

/// Most SPS or PPS units kept from a sequence header (encoders send one each).
const MAX_PARAM_SETS: usize = 4;

/// A malformed or unsupported FLV tag body.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FlvError {
    /// The body ends inside a header or a length-prefixed unit.
    #[error("FLV tag truncated")]
    Truncated,
    /// A codec tern does not ingest (only H264 video and AAC audio).
    #[error("unsupported {0}")]
    Unsupported(String),
    /// An AVCDecoderConfigurationRecord or AudioSpecificConfig that makes no sense.
    #[error("bad decoder configuration: {0}")]
    BadConfig(&'static str),
    /// Misuse of the packetizer.
    #[error(transparent)]
    Packetize(#[from] PacketizeError),
}

/// The kind of an AVC video tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AvcPacketType {
    /// AVCDecoderConfigurationRecord.
    SequenceHeader,
    /// One frame of length-prefixed NAL units.
    Nalu,
    /// End of sequence.
    EndOfSequence,
}

/// The header of an FLV video tag carrying AVC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VideoTag<'a> {
    /// FLV frame type 1 (keyframe).
    pub keyframe: bool,
    /// What the body holds.
    pub packet_type: AvcPacketType,
    /// Composition time offset in ms (PTS - DTS).
    pub composition_time: i32,
    /// The body after the 5-byte header.
    pub body: &'a [u8],
}

impl<'a> VideoTag<'a> {
    /// Parses a video message body. Codecs other than AVC, and the enhanced-RTMP extended
    /// header, are [`FlvError::Unsupported`].
    pub fn parse(data: &'a [u8]) -> Result<VideoTag<'a>, FlvError> {
        let [b0, ty, c0, c1, c2, body @ ..] = data else {
            return Err(FlvError::Truncated);
        };
        if b0 & 0x80 != 0 {
            return Err(FlvError::Unsupported(
                "enhanced RTMP video (HEVC/AV1/VP9)".into(),
            ));
        }
        let codec = b0 & 0x0f;
        if codec != CODEC_AVC {
            return Err(FlvError::Unsupported(format!("FLV video codec {codec}")));
        }
        let packet_type = match ty {
            0 => AvcPacketType::SequenceHeader,
            1 => AvcPacketType::Nalu,
            2 => AvcPacketType::EndOfSequence,
            t => return Err(FlvError::Unsupported(format!("AVC packet type {t}"))),
        };
        // Signed 24-bit composition time.
        let ct = (i32::from(*c0) << 24 | i32::from(*c1) << 16 | i32::from(*c2) << 8) >> 8;
        Ok(VideoTag {
            keyframe: b0 >> 4 == 1,
            packet_type,
            composition_time: ct,
            body,
        })
    }
}

/// What an AVC sequence header tells: the parameter sets and the NAL length size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AvcConfig {
    /// Bytes in each NAL unit length prefix (1, 2 or 4).
    pub length_size: usize,
    /// Sequence parameter sets.
    pub sps: Vec<Vec<u8>>,
    /// Picture parameter sets.
    pub pps: Vec<Vec<u8>>,
}

fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], FlvError> {
    if b.len() < n {
        return Err(FlvError::Truncated);
    }
    let (h, r) = b.split_at(n);
    *b = r;
    Ok(h)
}

fn param_sets(b: &mut &[u8], count: usize, want: u8) -> Result<Vec<Vec<u8>>, FlvError> {
    let mut out = Vec::new();
    for _ in 0..count {
        let l = take(b, 2)?;
        let n = usize::from(u16::from_be_bytes([l[0], l[1]]));
        let unit = take(b, n)?;
        if unit.is_empty() || h264::nal_type(unit) != want {
            return Err(FlvError::BadConfig(
                "parameter set of the wrong NAL unit type",
            ));
        }
        if out.len() < MAX_PARAM_SETS {
            out.push(unit.to_vec());
        }
    }
    Ok(out)
}

impl AvcConfig {
    /// Parses an AVCDecoderConfigurationRecord.
    pub fn parse(mut b: &[u8]) -> Result<AvcConfig, FlvError> {
        let h = take(&mut b, 6)?;
        if h[0] != 1 {
            return Err(FlvError::BadConfig("configurationVersion is not 1"));
        }
        let length_size = usize::from(h[4] & 0x03) + 1;
        if length_size == 3 {
            return Err(FlvError::BadConfig("NAL length size 3"));
        }
        let sps = param_sets(&mut b, usize::from(h[5] & 0x1f), NAL_SPS)?;
        let n_pps = take(&mut b, 1)?[0];
        let pps = param_sets(&mut b, usize::from(n_pps), NAL_PPS)?;
        // High-profile extensions (chroma format, bit depths, SPS ext) may follow: unused.
        if sps.is_empty() || pps.is_empty() {
            return Err(FlvError::BadConfig("no SPS or no PPS"));
        }
        Ok(AvcConfig {
            length_size,
            sps,
            pps,
        })
    }
}

/// Splits an AVCC frame (NAL units each preceded by a `length_size`-byte big-endian
/// length) into NAL units. Empty units are skipped.
pub fn avcc_nal_units(mut data: &[u8], length_size: usize) -> Result<Vec<&[u8]>, FlvError> {
    if !matches!(length_size, 1 | 2 | 4) {
        return Err(FlvError::BadConfig("NAL length size"));
    }
    let mut out = Vec::new();
    while !data.is_empty() {
        let l = take(&mut data, length_size)?;
        let n = l.iter().fold(0usize, |a, &b| a << 8 | usize::from(b));
        let nal = take(&mut data, n)?;
        if !nal.is_empty() {
            out.push(nal);
        }
    }
    Ok(out)
}

/// AVC frames in, RTP payloads out.
#[derive(Debug)]
pub struct AvcRtp {
    config: Option<AvcConfig>,
    packetizer: h264::Packetizer,
    max_payload: usize,
}

impl AvcRtp {
    /// A packetizer producing payloads of at most `max_payload` bytes.
    pub fn new(max_payload: usize) -> Self {
        AvcRtp {
            config: None,
            packetizer: h264::Packetizer::new(),
            max_payload,
        }
    }

    /// Whether a sequence header has been seen.
    pub fn has_config(&self) -> bool {
        self.config.is_some()
    }

    /// Takes an AVC sequence header.
    pub fn set_config(&mut self, record: &[u8]) -> Result<(), FlvError> {
        self.config = Some(AvcConfig::parse(record)?);
        Ok(())
    }

    /// Packetizes one AVC frame (the body of an AVC NALU video tag). `emit(payload, last)`
    /// gets each RTP payload; `last` marks the end of the frame (RTP marker bit). Returns
    /// whether the frame is a keyframe (holds an IDR slice). Frames before the first
    /// sequence header, and frames with no NAL unit to send, emit nothing.
    pub fn frame(
        &mut self,
        body: &[u8],
        emit: &mut impl FnMut(&[u8], bool),
    ) -> Result<bool, FlvError> {
        let Some(cfg) = &self.config else {
            return Ok(false);
        };
        let nals = avcc_nal_units(body, cfg.length_size)?;
        let idr = nals.iter().any(|n| h264::nal_type(n) == NAL_IDR);
        let in_band = nals.iter().any(|n| h264::nal_type(n) == NAL_SPS);
        let mut au: Vec<&[u8]> = Vec::with_capacity(nals.len() + 2);
        if idr && !in_band {
            au.extend(cfg.sps.iter().map(Vec::as_slice));
            au.extend(cfg.pps.iter().map(Vec::as_slice));
        }
        au.extend(nals.iter().filter(|n| h264::nal_type(n) != NAL_AUD));
        self.packetizer.packetize(&au, self.max_payload, emit)?;
        Ok(idr)
    }
}

/// The header of an FLV audio tag carrying AAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AudioTag<'a> {
    /// AAC packet type 0: the body is an AudioSpecificConfig.
    pub sequence_header: bool,
    /// The body after the 2-byte header.
    pub body: &'a [u8],
}

impl<'a> AudioTag<'a> {
    /// Parses an audio message body; sound formats other than AAC are
    /// [`FlvError::Unsupported`].
    pub fn parse(data: &'a [u8]) -> Result<AudioTag<'a>, FlvError> {
        let [b0, rest @ ..] = data else {
            return Err(FlvError::Truncated);
        };
        let format = b0 >> 4;
        if format != SOUND_AAC {
            return Err(FlvError::Unsupported(format!("FLV sound format {format}")));
        }
        let [ty, body @ ..] = rest else {
            return Err(FlvError::Truncated);
        };
        match ty {
            0 | 1 => Ok(AudioTag {
                sequence_header: *ty == 0,
                body,
            }),
            t => Err(FlvError::Unsupported(format!("AAC packet type {t}"))),
        }
    }
}

/// Sampling frequencies by index (ISO/IEC 14496-3 Table 1.18).
const AAC_RATES: [u32; 13] = [
    96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350,
];

/// The fields of an AudioSpecificConfig tern needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AudioSpecificConfig {
    /// Audio object type (2 is AAC-LC).
    pub object_type: u8,
    /// Sampling rate in Hz.
    pub sample_rate: u32,
    /// Channel configuration (1 mono, 2 stereo, 0 in a program config element).
    pub channels: u8,
}

impl AudioSpecificConfig {
    /// Parses the start of an AudioSpecificConfig.
    pub fn parse(b: &[u8]) -> Result<AudioSpecificConfig, FlvError> {
        let mut bits = 0u64;
        let mut nbits = 0u32;
        for &x in b.iter().take(7) {
            bits = bits << 8 | u64::from(x);
            nbits += 8;
        }
        let mut pos = 0u32;
        let mut read = |n: u32| -> Result<u32, FlvError> {
            if pos + n > nbits {
                return Err(FlvError::Truncated);
            }
            let v = (bits >> (nbits - pos - n)) & ((1 << n) - 1);
            pos += n;
            Ok(v as u32)
        };
        let mut object_type = read(5)?;
        if object_type == 31 {
            object_type = 32 + read(6)?;
        }
        let idx = read(4)?;
        let sample_rate = match idx {
            15 => read(24)?,
            i => *AAC_RATES
                .get(i as usize)
                .ok_or(FlvError::BadConfig("reserved sampling frequency index"))?,
        };
        if sample_rate == 0 {
            return Err(FlvError::BadConfig("sampling rate 0"));
        }
        let channels = read(4)? as u8;
        Ok(AudioSpecificConfig {
            object_type: object_type as u8,
            sample_rate,
            channels,
        })
    }
}

/// Longest parameter set an AVCDecoderConfigurationRecord can hold (16-bit length).
const MAX_PARAM_SET_LEN: usize = 0xffff;

/// Builds an AVCDecoderConfigurationRecord (ISO/IEC 14496-15 §5.2.4.1) with one SPS and
/// one PPS and 4-byte NAL unit lengths; profile, compatibility flags and level are copied
/// from bytes 1 to 3 of `sps` (0 where it is shorter). Parameter sets longer than 65535
/// bytes, which no encoder produces, are cut to fit the 16-bit length field. The
/// high-profile extension fields are not written (decoders take them from the SPS).
pub fn avc_decoder_record(sps: &[u8], pps: &[u8]) -> Vec<u8> {
    let sps = &sps[..sps.len().min(MAX_PARAM_SET_LEN)];
    let pps = &pps[..pps.len().min(MAX_PARAM_SET_LEN)];
    let at = |i: usize| sps.get(i).copied().unwrap_or(0);
    let mut r = Vec::with_capacity(11 + sps.len() + pps.len());
    // Version 1; profile, compat, level; 6 reserved bits + length size - 1 = 3;
    // 3 reserved bits + one SPS.
    r.extend_from_slice(&[1, at(1), at(2), at(3), 0xff, 0xe1]);
    r.extend_from_slice(&(sps.len() as u16).to_be_bytes());
    r.extend_from_slice(sps);
    r.push(1);
    r.extend_from_slice(&(pps.len() as u16).to_be_bytes());
    r.extend_from_slice(pps);
    r
}

/// The 5-byte header of an AVC video tag.
fn avc_header(keyframe: bool, packet_type: u8, cts_ms: i32, len: usize) -> Vec<u8> {
    let cts = cts_ms.clamp(-0x0080_0000, 0x007f_ffff).to_be_bytes();
    let mut b = Vec::with_capacity(5 + len);
    b.push(if keyframe { 0x10 } else { 0x20 } | CODEC_AVC);
    b.push(packet_type);
    b.extend_from_slice(&cts[1..]);
    b
}

/// A video tag body carrying an AVC sequence header: `0x17`, AVC packet type 0,
/// composition time 0, then `record` (see [`avc_decoder_record`]).
pub fn avc_sequence_header(record: &[u8]) -> Vec<u8> {
    let mut b = avc_header(true, 0, 0, record.len());
    b.extend_from_slice(record);
    b
}

/// A video tag body carrying one AVC frame: `0x17` (keyframe) or `0x27`, AVC packet
/// type 1, the composition time offset (PTS - DTS) in ms as a signed 24-bit value
/// (clamped to its range), then `avcc`, the frame's NAL units each preceded by a 4-byte
/// length (see [`avcc_frame`]).
pub fn avc_nalu(keyframe: bool, cts_ms: i32, avcc: &[u8]) -> Vec<u8> {
    let mut b = avc_header(keyframe, 1, cts_ms, avcc.len());
    b.extend_from_slice(avcc);
    b
}

/// A video tag body announcing the end of an AVC sequence (AVC packet type 2).
pub fn avc_end_of_sequence() -> Vec<u8> {
    avc_header(true, 2, 0, 0)
}

/// Joins NAL units (without start codes) into an AVCC frame, each preceded by its
/// 4-byte big-endian length, as [`avc_nalu`] carries them.
pub fn avcc_frame(nal_units: &[&[u8]]) -> Vec<u8> {
    let len = nal_units.iter().map(|n| 4 + n.len()).sum();
    let mut b = Vec::with_capacity(len);
    for n in nal_units {
        // A NAL unit cannot exceed 4 GiB in any stream RTMP can carry.
        b.extend_from_slice(&(n.len() as u32).to_be_bytes());
        b.extend_from_slice(n);
    }
    b
}

/// The first byte of an AAC audio tag: sound format 10, and the rate, size and channel
/// bits the FLV specification fixes for AAC (44 kHz, 16 bits, stereo).
const AAC_TAG_BYTE: u8 = SOUND_AAC << 4 | 0x0f;

/// An audio tag body carrying an AAC sequence header: `0xAF 0x00`, then the
/// AudioSpecificConfig `asc`.
pub fn aac_sequence_header(asc: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(2 + asc.len());
    b.extend_from_slice(&[AAC_TAG_BYTE, 0]);
    b.extend_from_slice(asc);
    b
}

/// An audio tag body carrying one raw AAC frame (no ADTS header): `0xAF 0x01`, then
/// `frame`.
pub fn aac_raw(frame: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(2 + frame.len());
    b.extend_from_slice(&[AAC_TAG_BYTE, 1]);
    b.extend_from_slice(frame);
    b
}

/// The body of the AMF0 data message (type 18) a publisher sends before its media:
/// `"@setDataFrame"`, `"onMetaData"`, then an ECMA array of `props`, e.g.
/// `[("width", 1280.0), ("height", 720.0), ("framerate", 30.0), ("videocodecid", 7.0),
/// ("audiocodecid", 10.0)]`. Properties whose name is longer than 65535 bytes are left
/// out.
pub fn metadata(props: &[(&str, f64)]) -> Vec<u8> {
    use super::amf0::{self, Value};
    let array = Value::EcmaArray(
        props
            .iter()
            .filter(|(k, _)| k.len() <= 0xffff)
            .map(|(k, v)| ((*k).to_string(), Value::Number(*v)))
            .collect(),
    );
    let mut b = Vec::new();
    for v in [
        Value::String("@setDataFrame".into()),
        Value::String("onMetaData".into()),
        array,
    ] {
        // Short strings and short keys: encoding cannot fail.
        let _ = amf0::encode(&v, &mut b);
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPS: &[u8] = &[0x67, 0x42, 0xc0, 0x1e, 0xd9, 0x01];
    const PPS: &[u8] = &[0x68, 0xcb, 0x83, 0xcb];

    fn record() -> Vec<u8> {
        let mut r = vec![1, 0x42, 0xc0, 0x1e, 0xff, 0xe1];
        r.extend_from_slice(&(SPS.len() as u16).to_be_bytes());
        r.extend_from_slice(SPS);
        r.push(1);
        r.extend_from_slice(&(PPS.len() as u16).to_be_bytes());
        r.extend_from_slice(PPS);
        r
    }

    fn avcc(nals: &[&[u8]]) -> Vec<u8> {
        let mut b = Vec::new();
        for n in nals {
            b.extend_from_slice(&(n.len() as u32).to_be_bytes());
            b.extend_from_slice(n);
        }
        b
    }

    #[test]
    fn video_tag_header() {
        let t = VideoTag::parse(&[0x17, 0, 0, 0, 0, 1, 2]).expect("tag");
        assert!(t.keyframe);
        assert_eq!(t.packet_type, AvcPacketType::SequenceHeader);
        assert_eq!(t.body, &[1, 2]);
        let t = VideoTag::parse(&[0x27, 1, 0xff, 0xff, 0xdf]).expect("tag");
        assert!(!t.keyframe);
        assert_eq!(t.composition_time, -33);
        assert!(matches!(
            VideoTag::parse(&[0x12, 0, 0, 0, 0]),
            Err(FlvError::Unsupported(_))
        ));
        assert_eq!(VideoTag::parse(&[0x17, 1]), Err(FlvError::Truncated));
    }

    #[test]
    fn sequence_header() {
        let c = AvcConfig::parse(&record()).expect("record");
        assert_eq!(c.length_size, 4);
        assert_eq!(c.sps, vec![SPS.to_vec()]);
        assert_eq!(c.pps, vec![PPS.to_vec()]);
        let r = record();
        for n in 0..r.len() {
            assert!(AvcConfig::parse(&r[..n]).is_err(), "truncated at {n}");
        }
    }

    #[test]
    fn keyframes_carry_sps_and_pps_in_a_stap_a() {
        let mut p = AvcRtp::new(1200);
        let mut out: Vec<(Vec<u8>, bool)> = Vec::new();
        // Frames before the sequence header are dropped.
        let idr: Vec<u8> = std::iter::once(0x65)
            .chain((0..3000).map(|i| i as u8))
            .collect();
        let key = avcc(&[&[0x09, 0xf0], &idr]);
        assert!(
            !p.frame(&key, &mut |d, l| out.push((d.to_vec(), l)))
                .expect("frame")
        );
        assert!(out.is_empty());
        p.set_config(&record()).expect("config");
        assert!(
            p.frame(&key, &mut |d, l| out.push((d.to_vec(), l)))
                .expect("frame")
        );
        // STAP-A(SPS, PPS), then the IDR in three equal FU-A fragments.
        assert_eq!(h264::nal_type(&out[0].0), h264::NAL_STAP_A);
        assert!(h264::is_keyframe(&out[0].0));
        assert_eq!(out.len(), 4);
        assert!(
            out[1..]
                .iter()
                .all(|(d, _)| d.len() <= 1200 && d[0] & 0x1f == 28)
        );
        assert_eq!(out.iter().filter(|(_, l)| *l).count(), 1);
        assert!(out[3].1);
        let mut d = h264::Depacketizer::new();
        let mut frames = Vec::new();
        for (i, (payload, last)) in out.iter().enumerate() {
            if let Ok(Some(f)) = d.push(i as u16, 0, *last, payload) {
                frames.push(f.to_vec());
            }
        }
        assert_eq!(frames.len(), 1);
        let nals: Vec<&[u8]> = h264::nal_units(&frames[0]).collect();
        assert_eq!(nals, vec![SPS, PPS, &idr[..]]);
        // A small delta frame: one single NAL unit packet with the marker.
        out.clear();
        let delta = avcc(&[&[0x41, 1, 2, 3]]);
        assert!(
            !p.frame(&delta, &mut |d, l| out.push((d.to_vec(), l)))
                .expect("frame")
        );
        assert_eq!(out, vec![(vec![0x41, 1, 2, 3], true)]);
    }

    #[test]
    fn truncated_frames_are_errors() {
        let mut p = AvcRtp::new(1200);
        p.set_config(&record()).expect("config");
        let mut n = 0;
        assert_eq!(
            p.frame(&[0, 0, 0, 9, 0x41], &mut |_, _| n += 1),
            Err(FlvError::Truncated)
        );
        assert_eq!(n, 0);
    }

    #[test]
    fn audio() {
        let t = AudioTag::parse(&[0xaf, 0, 0x12, 0x10]).expect("tag");
        assert!(t.sequence_header);
        let c = AudioSpecificConfig::parse(t.body).expect("asc");
        assert_eq!((c.object_type, c.sample_rate, c.channels), (2, 44100, 2));
        let c = AudioSpecificConfig::parse(&[0x11, 0x88]).expect("asc");
        assert_eq!((c.object_type, c.sample_rate, c.channels), (2, 48000, 1));
        assert!(matches!(
            AudioTag::parse(&[0x2f, 1]),
            Err(FlvError::Unsupported(_))
        ));
        assert!(AudioSpecificConfig::parse(&[0x12]).is_err());
        assert!(AudioSpecificConfig::parse(&[0x16, 0x90]).is_err());
    }

    #[test]
    fn avc_writers_roundtrip() {
        let r = avc_decoder_record(SPS, PPS);
        assert_eq!(r, record());
        let c = AvcConfig::parse(&r).expect("record");
        assert_eq!(c.length_size, 4);
        assert_eq!((c.sps, c.pps), (vec![SPS.to_vec()], vec![PPS.to_vec()]));
        // A short SPS gives zero profile bytes instead of a panic.
        assert_eq!(&avc_decoder_record(&[0x67], PPS)[..4], &[1, 0, 0, 0]);

        let sh = avc_sequence_header(&r);
        assert_eq!(&sh[..5], &[0x17, 0, 0, 0, 0]);
        let t = VideoTag::parse(&sh).expect("tag");
        assert!(t.keyframe);
        assert_eq!(t.packet_type, AvcPacketType::SequenceHeader);
        assert_eq!(t.composition_time, 0);
        assert_eq!(t.body, &r[..]);

        let frame = avcc_frame(&[&[0x09, 0xf0], &[0x65, 1, 2, 3]]);
        assert_eq!(frame, avcc(&[&[0x09, 0xf0], &[0x65, 1, 2, 3]]));
        for (key, cts) in [(true, 0), (false, 66), (false, -33), (true, 0x7f_ffff)] {
            let b = avc_nalu(key, cts, &frame);
            assert_eq!(b[0], if key { 0x17 } else { 0x27 });
            let t = VideoTag::parse(&b).expect("tag");
            assert_eq!(t.keyframe, key);
            assert_eq!(t.packet_type, AvcPacketType::Nalu);
            assert_eq!(t.composition_time, cts);
            let nals = avcc_nal_units(t.body, 4).expect("nals");
            assert_eq!(nals, vec![&[0x09, 0xf0][..], &[0x65, 1, 2, 3][..]]);
        }
        // Out of the 24-bit range: clamped.
        let cts = |ms| VideoTag::parse(&avc_nalu(false, ms, &frame)).map(|t| t.composition_time);
        assert_eq!(cts(i32::MIN), Ok(-0x80_0000));
        assert_eq!(cts(i32::MAX), Ok(0x7f_ffff));
        let eos = avc_end_of_sequence();
        let t = VideoTag::parse(&eos).expect("tag");
        assert_eq!(t.packet_type, AvcPacketType::EndOfSequence);
        assert!(t.body.is_empty());
    }

    #[test]
    fn aac_writers_roundtrip() {
        let b = aac_sequence_header(&[0x12, 0x10]);
        assert_eq!(b, [0xaf, 0, 0x12, 0x10]);
        let t = AudioTag::parse(&b).expect("tag");
        assert!(t.sequence_header);
        let c = AudioSpecificConfig::parse(t.body).expect("asc");
        assert_eq!((c.object_type, c.sample_rate, c.channels), (2, 44100, 2));
        let b = aac_raw(&[0x21, 0x00, 0x49]);
        assert_eq!(&b[..2], &[0xaf, 1]);
        let t = AudioTag::parse(&b).expect("tag");
        assert!(!t.sequence_header);
        assert_eq!(t.body, &[0x21, 0x00, 0x49]);
    }

    #[test]
    fn metadata_body() {
        use crate::rtmp::amf0::{self, Value};
        let b = metadata(&[("width", 1280.0), ("height", 720.0), ("videocodecid", 7.0)]);
        let v = amf0::decode_all(&b).expect("amf0");
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].as_str(), Some("@setDataFrame"));
        assert_eq!(v[1].as_str(), Some("onMetaData"));
        assert!(matches!(v[2], Value::EcmaArray(_)));
        assert_eq!(v[2].get("width").and_then(Value::as_f64), Some(1280.0));
        assert_eq!(v[2].get("height").and_then(Value::as_f64), Some(720.0));
        assert_eq!(v[2].get("videocodecid").and_then(Value::as_f64), Some(7.0));
        let long = "k".repeat(70_000);
        let v = amf0::decode_all(&metadata(&[(&long, 1.0), ("a", 2.0)])).expect("amf0");
        assert_eq!(
            v[2],
            Value::EcmaArray(vec![("a".into(), Value::Number(2.0))])
        );
    }
}

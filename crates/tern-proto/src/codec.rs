//! Video codecs tern passes through, and where each one's keyframes start; and
//! [`MediaKind`], whether a track or packet is audio or video.
//!
//! tern forwards a WHIP publisher's RTP payloads untouched; what it must know per codec is
//! only whether a packet begins a keyframe (for the keyframe cache, PLI coalescing and the
//! switch to a returning publisher) and how the codec is named and parameterised in SDP.
//! The payload formats:
//!
//! * H264: RFC 6184 (see [`crate::h264::is_keyframe`]).
//! * VP8: RFC 7741 §4.2-4.3: payload descriptor, then on the first packet of a frame
//!   (S=1, PID=0) the VP8 payload header, whose P bit is 0 on a key frame.
//! * VP9: RFC 9628 §4.2: the descriptor's B bit marks the start of a frame and its P bit an
//!   inter-predicted one; a keyframe starts with B=1, P=0 (at spatial layer 0 when layer
//!   indices are present).
//! * AV1: the AOM RTP payload format §4.4: the aggregation header's N bit marks the first
//!   packet of a coded video sequence, which starts with a keyframe.
//! * H265: RFC 7798 §4.4: a single NAL unit, an aggregation packet (48) or a fragmentation
//!   unit (49); IRAP pictures (types 16-21) and parameter sets (VPS/SPS/PPS, 32-34) begin
//!   a keyframe.

use std::fmt;

/// Audio or video.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MediaKind {
    /// Video, in any [`VideoCodec`].
    Video,
    /// Opus audio.
    Audio,
}

impl MediaKind {
    /// The RTP clock rate: 90000 Hz for video (RFC 6184, and the same for every other
    /// [`VideoCodec`]), 48000 Hz for Opus (RFC 7587).
    pub const fn clock_rate(self) -> u32 {
        match self {
            MediaKind::Video => 90_000,
            MediaKind::Audio => 48_000,
        }
    }
}

/// A video codec tern forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum VideoCodec {
    /// H.264/AVC, packetization-mode 1.
    #[default]
    H264,
    /// VP8.
    Vp8,
    /// VP9 (profile 0).
    Vp9,
    /// AV1 (main profile).
    Av1,
    /// H.265/HEVC.
    H265,
}

impl VideoCodec {
    /// Every codec, in tern's order of preference when a publisher offers several: H264
    /// first (every viewer decodes it, RTMP and HLS carry it), then by how widely browsers
    /// decode the rest.
    pub const ALL: [VideoCodec; 5] = [
        VideoCodec::H264,
        VideoCodec::Vp8,
        VideoCodec::Vp9,
        VideoCodec::Av1,
        VideoCodec::H265,
    ];

    /// The encoding name in `a=rtpmap`.
    pub fn sdp_name(self) -> &'static str {
        match self {
            VideoCodec::H264 => "H264",
            VideoCodec::Vp8 => "VP8",
            VideoCodec::Vp9 => "VP9",
            VideoCodec::Av1 => "AV1",
            VideoCodec::H265 => "H265",
        }
    }

    /// The codec with this `a=rtpmap` encoding name (any case).
    pub fn from_sdp_name(name: &str) -> Option<VideoCodec> {
        VideoCodec::ALL
            .into_iter()
            .find(|c| c.sdp_name().eq_ignore_ascii_case(name))
    }

    /// A small number for packing into an atomic (see [`VideoCodec::from_index`]).
    pub fn index(self) -> u8 {
        match self {
            VideoCodec::H264 => 0,
            VideoCodec::Vp8 => 1,
            VideoCodec::Vp9 => 2,
            VideoCodec::Av1 => 3,
            VideoCodec::H265 => 4,
        }
    }

    /// The codec of [`VideoCodec::index`]; H264 for anything else.
    pub fn from_index(i: u8) -> VideoCodec {
        VideoCodec::ALL
            .into_iter()
            .find(|c| c.index() == i)
            .unwrap_or_default()
    }

    /// Whether `payload`, the first packet of a frame, begins a keyframe. For H264 and H265
    /// a packet carrying a parameter set counts (it precedes the IDR/IRAP picture).
    pub fn is_keyframe(self, payload: &[u8]) -> bool {
        match self {
            VideoCodec::H264 => crate::h264::is_keyframe(payload),
            VideoCodec::Vp8 => vp8_is_keyframe(payload),
            VideoCodec::Vp9 => vp9_is_keyframe(payload),
            VideoCodec::Av1 => av1_is_keyframe(payload),
            VideoCodec::H265 => h265_is_keyframe(payload),
        }
    }
}

impl fmt::Display for VideoCodec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.sdp_name())
    }
}

/// VP8 (RFC 7741): the payload descriptor's S bit and partition index 0 mark the start of
/// a frame; the VP8 payload header's P bit (bit 0 of its first byte) is 0 on a key frame.
fn vp8_is_keyframe(p: &[u8]) -> bool {
    let Some(&b0) = p.first() else {
        return false;
    };
    let (x, s, pid) = (b0 & 0x80 != 0, b0 & 0x10 != 0, b0 & 0x07);
    if !s || pid != 0 {
        return false;
    }
    let mut i = 1;
    if x {
        let Some(&b1) = p.get(i) else {
            return false;
        };
        i += 1;
        if b1 & 0x80 != 0 {
            // PictureID: 7 bits, or 15 when its M bit is set.
            let Some(&pic) = p.get(i) else {
                return false;
            };
            i += if pic & 0x80 != 0 { 2 } else { 1 };
        }
        if b1 & 0x40 != 0 {
            i += 1; // TL0PICIDX
        }
        if b1 & 0x30 != 0 {
            i += 1; // TID/Y/KEYIDX
        }
    }
    p.get(i).is_some_and(|h| h & 0x01 == 0)
}

/// Where a VP8 payload descriptor (RFC 7741 §4.2) keeps its picture ID and TL0PICIDX.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vp8Ids {
    /// PictureID: (value, 15 bits rather than 7, byte offset of its first byte).
    pub picture_id: Option<(u16, bool, usize)>,
    /// TL0PICIDX: (value, byte offset).
    pub tl0: Option<(u8, usize)>,
}

impl Vp8Ids {
    /// Reads a VP8 payload descriptor; `None` when it is truncated or has neither field.
    pub fn parse(p: &[u8]) -> Option<Vp8Ids> {
        let b0 = *p.first()?;
        if b0 & 0x80 == 0 {
            return None;
        }
        let b1 = *p.get(1)?;
        let mut i = 2;
        let mut ids = Vp8Ids {
            picture_id: None,
            tl0: None,
        };
        if b1 & 0x80 != 0 {
            let m = *p.get(i)?;
            if m & 0x80 != 0 {
                let lo = *p.get(i + 1)?;
                ids.picture_id = Some((u16::from(m & 0x7f) << 8 | u16::from(lo), true, i));
                i += 2;
            } else {
                ids.picture_id = Some((u16::from(m), false, i));
                i += 1;
            }
        }
        if b1 & 0x40 != 0 {
            ids.tl0 = Some((*p.get(i)?, i));
        }
        (ids.picture_id.is_some() || ids.tl0.is_some()).then_some(ids)
    }

    /// Writes `picture_id` (masked to the field's width) and `tl0` into the descriptor of
    /// `p`, which these ids were read from.
    pub fn rewrite(&self, p: &mut [u8], picture_id: u16, tl0: u8) {
        if let Some((_, long, at)) = self.picture_id {
            if long {
                if let Some(b) = p.get_mut(at..at + 2) {
                    b[0] = 0x80 | ((picture_id >> 8) as u8 & 0x7f);
                    b[1] = picture_id as u8;
                }
            } else if let Some(b) = p.get_mut(at) {
                *b = picture_id as u8 & 0x7f;
            }
        }
        if let Some((_, at)) = self.tl0
            && let Some(b) = p.get_mut(at)
        {
            *b = tl0;
        }
    }

    /// The mask of the picture ID's width.
    pub fn picture_id_mask(&self) -> u16 {
        match self.picture_id {
            Some((_, false, _)) => 0x7f,
            _ => 0x7fff,
        }
    }
}

/// VP9 (RFC 9628): B=1 (start of a frame) and P=0 (not inter-picture predicted), at spatial
/// layer 0 when the layer indices are present.
fn vp9_is_keyframe(p: &[u8]) -> bool {
    let Some(&b0) = p.first() else {
        return false;
    };
    let (i_bit, p_bit, l_bit, b_bit) = (
        b0 & 0x80 != 0,
        b0 & 0x40 != 0,
        b0 & 0x20 != 0,
        b0 & 0x08 != 0,
    );
    if !b_bit || p_bit {
        return false;
    }
    if !l_bit {
        return true;
    }
    let mut i = 1;
    if i_bit {
        let Some(&pic) = p.get(i) else {
            return false;
        };
        i += if pic & 0x80 != 0 { 2 } else { 1 };
    }
    // Layer indices: TID(3) U(1) SID(3) D(1).
    p.get(i).is_some_and(|l| (l >> 1) & 0x07 == 0)
}

/// AV1 (AOM RTP payload format): the aggregation header's N bit, "first packet of a coded
/// video sequence", which begins with a sequence header and a keyframe; Z=1 (continuing an
/// OBU from the previous packet) cannot start one.
fn av1_is_keyframe(p: &[u8]) -> bool {
    p.first().is_some_and(|&h| h & 0x08 != 0 && h & 0x80 == 0)
}

/// H265 NAL unit types that begin a keyframe: IRAP pictures (BLA, IDR, CRA: 16-21) and the
/// parameter sets sent before them (VPS, SPS, PPS: 32-34).
fn h265_starts_keyframe(nal_type: u8) -> bool {
    matches!(nal_type, 16..=21 | 32..=34)
}

/// H265 (RFC 7798): the first NAL unit of a single-NAL packet or an aggregation packet, or
/// the first fragment of a fragmentation unit.
fn h265_is_keyframe(p: &[u8]) -> bool {
    let Some(&b0) = p.first() else {
        return false;
    };
    if p.len() < 3 {
        return false;
    }
    match (b0 >> 1) & 0x3f {
        // Aggregation packet: 2-byte header, then (16-bit size, NAL unit) pairs; DONL
        // fields (sprop-max-don-diff > 0) are not offered by tern, so never present.
        48 => {
            let mut i = 2;
            while let (Some(&hi), Some(&lo)) = (p.get(i), p.get(i + 1)) {
                let size = usize::from(u16::from_be_bytes([hi, lo]));
                let Some(&nal) = p.get(i + 2) else {
                    return false;
                };
                if size > 0 && h265_starts_keyframe((nal >> 1) & 0x3f) {
                    return true;
                }
                i += 2 + size;
            }
            false
        }
        // Fragmentation unit: the FU header's S bit and the fragmented NAL unit's type.
        49 => p[2] & 0x80 != 0 && h265_starts_keyframe(p[2] & 0x3f),
        t => h265_starts_keyframe(t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_rates() {
        assert_eq!(MediaKind::Video.clock_rate(), 90_000);
        assert_eq!(MediaKind::Audio.clock_rate(), 48_000);
    }

    #[test]
    fn names_round_trip_and_index_packs() {
        for c in VideoCodec::ALL {
            assert_eq!(VideoCodec::from_sdp_name(c.sdp_name()), Some(c));
            assert_eq!(
                VideoCodec::from_sdp_name(&c.sdp_name().to_lowercase()),
                Some(c)
            );
            assert_eq!(VideoCodec::from_index(c.index()), c);
        }
        assert_eq!(VideoCodec::from_sdp_name("opus"), None);
        assert_eq!(VideoCodec::from_index(200), VideoCodec::H264);
    }

    #[test]
    fn vp8_ids_read_and_rewrite() {
        // X, then I and L: 15-bit picture ID 0x1234, TL0PICIDX 7, then the VP8 header.
        let mut p = [0x90, 0xc0, 0x92, 0x34, 0x07, 0x50];
        let ids = Vp8Ids::parse(&p).expect("ids");
        assert_eq!(ids.picture_id, Some((0x1234, true, 2)));
        assert_eq!(ids.tl0, Some((7, 4)));
        ids.rewrite(&mut p, 0x7ffe, 200);
        assert_eq!(p, [0x90, 0xc0, 0xff, 0xfe, 200, 0x50]);
        // 7-bit picture ID, no TL0PICIDX.
        let mut p = [0x80, 0x80, 0x05, 0x50];
        let ids = Vp8Ids::parse(&p).expect("ids");
        assert_eq!(
            (ids.picture_id, ids.picture_id_mask()),
            (Some((5, false, 2)), 0x7f)
        );
        ids.rewrite(&mut p, 0x81, 0);
        assert_eq!(p, [0x80, 0x80, 0x01, 0x50]);
        // No extension, or truncated: nothing.
        assert_eq!(Vp8Ids::parse(&[0x10, 0x50]), None);
        assert_eq!(Vp8Ids::parse(&[0x90, 0x80, 0x92]), None);
    }

    #[test]
    fn vp8_key_and_delta_frames() {
        // S=1, PID=0, no extension; VP8 header byte with P=0 (key) / P=1 (delta).
        assert!(VideoCodec::Vp8.is_keyframe(&[0x10, 0x50, 0x2a, 0x01]));
        assert!(!VideoCodec::Vp8.is_keyframe(&[0x10, 0x51, 0x2a, 0x01]));
        // Not the start of a frame, or another partition.
        assert!(!VideoCodec::Vp8.is_keyframe(&[0x00, 0x50]));
        assert!(!VideoCodec::Vp8.is_keyframe(&[0x11, 0x50]));
        // X=1 with a 15-bit PictureID (what Chromium sends), TL0PICIDX and TID/KEYIDX.
        assert!(VideoCodec::Vp8.is_keyframe(&[0x90, 0xf0, 0x81, 0x23, 0x07, 0x40, 0x50]));
        assert!(!VideoCodec::Vp8.is_keyframe(&[0x90, 0xf0, 0x81, 0x23, 0x07, 0x40, 0x51]));
        // 7-bit PictureID only.
        assert!(VideoCodec::Vp8.is_keyframe(&[0x90, 0x80, 0x05, 0x50]));
        // Truncated.
        assert!(!VideoCodec::Vp8.is_keyframe(&[0x90, 0x80, 0x85]));
        assert!(!VideoCodec::Vp8.is_keyframe(&[]));
    }

    #[test]
    fn vp9_start_of_unpredicted_frame() {
        // I=1 (15-bit picture id), B=1, P=0.
        assert!(VideoCodec::Vp9.is_keyframe(&[0x88, 0x80, 0x01, 0x00]));
        // P=1: predicted.
        assert!(!VideoCodec::Vp9.is_keyframe(&[0xc8, 0x80, 0x01]));
        // B=0: not the start of a frame.
        assert!(!VideoCodec::Vp9.is_keyframe(&[0x80, 0x80, 0x01]));
        // With layer indices: SID 0 is the keyframe's start, SID 1 is not.
        assert!(VideoCodec::Vp9.is_keyframe(&[0xa8, 0x05, 0x00, 0x00]));
        assert!(!VideoCodec::Vp9.is_keyframe(&[0xa8, 0x05, 0x02, 0x00]));
        assert!(!VideoCodec::Vp9.is_keyframe(&[0xa8, 0x85]));
    }

    #[test]
    fn av1_new_coded_video_sequence() {
        assert!(VideoCodec::Av1.is_keyframe(&[0x18, 0x0a, 0x0b]));
        assert!(!VideoCodec::Av1.is_keyframe(&[0x10, 0x32]));
        assert!(!VideoCodec::Av1.is_keyframe(&[0x88]));
        assert!(!VideoCodec::Av1.is_keyframe(&[]));
    }

    #[test]
    fn h265_irap_parameter_sets_aggregates_and_fragments() {
        // IDR_W_RADL (19), VPS (32), TRAIL_R (1).
        assert!(VideoCodec::H265.is_keyframe(&[19 << 1, 0x01, 0xaf]));
        assert!(VideoCodec::H265.is_keyframe(&[32 << 1, 0x01, 0x0c]));
        assert!(!VideoCodec::H265.is_keyframe(&[1 << 1, 0x01, 0xaf]));
        // AP holding VPS then SPS.
        let ap = [
            48 << 1,
            0x01,
            0x00,
            0x02,
            32 << 1,
            0x01,
            0x00,
            0x02,
            33 << 1,
            0x01,
        ];
        assert!(VideoCodec::H265.is_keyframe(&ap));
        // AP holding two trailing pictures' NALs; and a size running past the end.
        assert!(!VideoCodec::H265.is_keyframe(&[
            48 << 1,
            0x01,
            0x00,
            0x02,
            2,
            0x01,
            0x00,
            0x02,
            2,
            0x01
        ]));
        assert!(!VideoCodec::H265.is_keyframe(&[48 << 1, 0x01, 0xff, 0xff]));
        // FU: start of a CRA (21), a middle fragment of it, start of a TRAIL_N (0).
        assert!(VideoCodec::H265.is_keyframe(&[49 << 1, 0x01, 0x80 | 21, 0xaa]));
        assert!(!VideoCodec::H265.is_keyframe(&[49 << 1, 0x01, 21, 0xaa]));
        assert!(!VideoCodec::H265.is_keyframe(&[49 << 1, 0x01, 0x80, 0xaa]));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut x: u32 = 0x1234_5678;
        for len in 0..64 {
            for _ in 0..200 {
                let buf: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 17;
                        x ^= x << 5;
                        x as u8
                    })
                    .collect();
                for c in VideoCodec::ALL {
                    let _ = c.is_keyframe(&buf);
                }
            }
        }
    }
}

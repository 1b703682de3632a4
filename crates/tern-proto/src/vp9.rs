//! VP9 over RTP (RFC 9628): the payload descriptor, frames rebuilt from payloads, and what
//! a recording needs from a frame's uncompressed header (keyframe, profile, picture size).

use crate::reassembly::Reassembly;

/// Length of the payload descriptor at the start of `p` (RFC 9628 §4.2), with its B (start
/// of a frame) and E (end of a frame) bits; `None` when it is truncated.
pub fn descriptor(p: &[u8]) -> Option<(usize, bool, bool)> {
    let b0 = *p.first()?;
    let (i_, p_, l, f, b, e, v) = (
        b0 & 0x80 != 0,
        b0 & 0x40 != 0,
        b0 & 0x20 != 0,
        b0 & 0x10 != 0,
        b0 & 0x08 != 0,
        b0 & 0x04 != 0,
        b0 & 0x02 != 0,
    );
    let mut i = 1;
    if i_ {
        let pic = *p.get(i)?;
        i += if pic & 0x80 != 0 { 2 } else { 1 };
    }
    if l {
        i += if f { 1 } else { 2 };
    }
    if f && p_ {
        // Up to three P_DIFF bytes, each with an N bit saying another follows.
        for _ in 0..3 {
            let d = *p.get(i)?;
            i += 1;
            if d & 0x01 == 0 {
                break;
            }
        }
    }
    if v {
        let ss = *p.get(i)?;
        i += 1;
        let n_s = usize::from(ss >> 5) + 1;
        if ss & 0x10 != 0 {
            i += 4 * n_s;
        }
        if ss & 0x08 != 0 {
            let n_g = *p.get(i)?;
            i += 1;
            for _ in 0..n_g {
                let g = *p.get(i)?;
                i += 1 + usize::from((g >> 2) & 0x03);
            }
        }
    }
    (i < p.len()).then_some((i, b, e))
}

/// What a VP9 frame's uncompressed header says (VP9 bitstream spec §6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameInfo {
    /// A key frame.
    pub keyframe: bool,
    /// Profile 0-3.
    pub profile: u8,
    /// Picture size (key frames only; 0 otherwise).
    pub width: u16,
    /// Picture height.
    pub height: u16,
}

struct Bits<'a> {
    d: &'a [u8],
    at: usize,
}

impl Bits<'_> {
    fn bit(&mut self) -> Option<u32> {
        let b = *self.d.get(self.at / 8)?;
        let v = (b >> (7 - self.at % 8)) & 1;
        self.at += 1;
        Some(u32::from(v))
    }

    fn bits(&mut self, n: u32) -> Option<u32> {
        (0..n).try_fold(0, |acc, _| Some(acc << 1 | self.bit()?))
    }
}

/// Reads the first frame's uncompressed header of `frame` (a frame or a superframe).
pub fn frame_info(frame: &[u8]) -> Option<FrameInfo> {
    let mut r = Bits { d: frame, at: 0 };
    if r.bits(2)? != 2 {
        return None;
    }
    let low = r.bit()?;
    let high = r.bit()?;
    let profile = (high << 1 | low) as u8;
    if profile == 3 {
        r.bit()?;
    }
    if r.bit()? == 1 {
        // show_existing_frame
        return Some(FrameInfo {
            keyframe: false,
            profile,
            width: 0,
            height: 0,
        });
    }
    let keyframe = r.bit()? == 0;
    let _show_frame = r.bit()?;
    let _error_resilient = r.bit()?;
    if !keyframe {
        return Some(FrameInfo {
            keyframe,
            profile,
            width: 0,
            height: 0,
        });
    }
    if r.bits(24)? != 0x49_83_42 {
        return None;
    }
    if profile >= 2 {
        r.bit()?;
    }
    let color_space = r.bits(3)?;
    if color_space != 7 {
        r.bit()?;
        if profile == 1 || profile == 3 {
            r.bits(3)?;
        }
    } else if profile == 1 || profile == 3 {
        r.bit()?;
    }
    let w = r.bits(16)? + 1;
    let h = r.bits(16)? + 1;
    Some(FrameInfo {
        keyframe,
        profile,
        width: u16::try_from(w).ok()?,
        height: u16::try_from(h).ok()?,
    })
}

/// Rebuilds VP9 frames from RTP payloads of one SSRC, as [`crate::vp8::Depacketizer`] does
/// for VP8: a frame starts at B=1 and ends at the marker bit; a gap damages it.
#[derive(Debug, Default)]
pub struct Depacketizer {
    frame: Reassembly,
}

impl Depacketizer {
    /// An empty depacketizer.
    pub fn new() -> Depacketizer {
        Depacketizer::default()
    }

    /// Feeds one payload; returns the frame it completes, if intact. Duplicate and late
    /// packets are ignored.
    pub fn push(&mut self, seq: u16, rtp_ts: u32, marker: bool, payload: &[u8]) -> Option<&[u8]> {
        let descriptor = descriptor(payload).map(|(n, start, _end)| (n, start));
        self.frame
            .push(seq, rtp_ts, marker, payload, descriptor, false)
    }

    /// Frames returned.
    pub fn frames(&self) -> u64 {
        self.frame.frames()
    }

    /// Frames dropped as damaged.
    pub fn damaged_frames(&self) -> u64 {
        self.frame.damaged_frames()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile 0 key frame header of 640x360 (color space BT.601, studio range).
    const KEY_640X360: [u8; 10] = [0x82, 0x49, 0x83, 0x42, 0x00, 0x27, 0xf0, 0x16, 0x70, 0x00];

    #[test]
    fn key_frame_header_and_frames() {
        let k = frame_info(&KEY_640X360).expect("parses");
        assert_eq!(
            k,
            FrameInfo {
                keyframe: true,
                profile: 0,
                width: 640,
                height: 360
            }
        );
        // An inter frame: frame_type 1.
        assert!(!frame_info(&[0x86, 0x00]).expect("parses").keyframe);
        assert_eq!(frame_info(&[0x00]), None);
        assert_eq!(frame_info(&[]), None);

        let mut d = Depacketizer::new();
        // I=1 (15-bit picture id), B=1; then E=1.
        let mut first = vec![0x88, 0x80, 0x01];
        first.extend_from_slice(&KEY_640X360[..5]);
        let mut last = vec![0x84, 0x80, 0x01];
        last.extend_from_slice(&KEY_640X360[5..]);
        assert_eq!(d.push(1, 10, false, &first), None);
        assert_eq!(d.push(2, 10, true, &last), Some(&KEY_640X360[..]));
        // A gap drops the frame; garbage does not panic.
        assert_eq!(d.push(3, 20, false, &first), None);
        assert_eq!(d.push(5, 20, true, &last), None);
        assert_eq!(d.damaged_frames(), 1);
        assert_eq!(d.push(6, 30, true, &[0xff]), None);
        assert_eq!(d.push(7, 30, true, &[]), None);
        // Scalability structure with sizes and a group (V=1, Y=1, G=1).
        let ss = [
            0x0a, 0x18, 0x02, 0x80, 0x01, 0x68, 0x01, 0x04, 0x00, 0x00, 0x99,
        ];
        assert_eq!(descriptor(&ss), Some((9, true, false)));
    }
}

//! The few fields of an H264 sequence parameter set (ITU-T H.264 7.3.2.1.1) the init segment
//! needs: profile, chroma format, bit depths and the cropped picture size.
//!
//! The SPS comes from the publisher: every read is bounds-checked and a malformed SPS gives
//! `None`, never a panic.

/// What the packager takes from an SPS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SpsInfo {
    pub profile_idc: u8,
    pub chroma_format_idc: u8,
    pub bit_depth_luma: u8,
    pub bit_depth_chroma: u8,
    /// Display width in pixels, after cropping.
    pub width: u32,
    /// Display height in pixels, after cropping.
    pub height: u32,
}

/// Bits of an RBSP (emulation prevention bytes already removed), MSB first.
struct BitReader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> BitReader<'a> {
    fn new(data: &'a [u8]) -> Self {
        BitReader { data, pos: 0 }
    }

    fn bit(&mut self) -> Option<u32> {
        let byte = *self.data.get(self.pos / 8)?;
        let bit = (byte >> (7 - (self.pos % 8))) & 1;
        self.pos += 1;
        Some(u32::from(bit))
    }

    fn bits(&mut self, n: u32) -> Option<u32> {
        let mut v = 0u32;
        for _ in 0..n {
            v = (v << 1) | self.bit()?;
        }
        Some(v)
    }

    /// ue(v): exp-Golomb, at most 31 leading zeros (32-bit values).
    fn ue(&mut self) -> Option<u32> {
        let mut zeros = 0u32;
        while self.bit()? == 0 {
            zeros += 1;
            if zeros > 31 {
                return None;
            }
        }
        let rest = u64::from(self.bits(zeros)?);
        u32::try_from((1u64 << zeros) - 1 + rest).ok()
    }

    /// se(v): signed exp-Golomb.
    fn se(&mut self) -> Option<i64> {
        let k = i64::from(self.ue()?);
        Some(if k % 2 == 1 { (k + 1) / 2 } else { -(k / 2) })
    }
}

/// The RBSP of a NAL unit: emulation prevention bytes (`00 00 03`) removed.
fn unescape(nal: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(nal.len());
    let mut zeros = 0;
    for &b in nal {
        if zeros >= 2 && b == 3 {
            zeros = 0;
            continue;
        }
        zeros = if b == 0 { zeros + 1 } else { 0 };
        out.push(b);
    }
    out
}

fn skip_scaling_list(r: &mut BitReader<'_>, size: usize) -> Option<()> {
    let (mut last, mut next) = (8i64, 8i64);
    for _ in 0..size {
        if next != 0 {
            next = (last + r.se()? + 256).rem_euclid(256);
        }
        if next != 0 {
            last = next;
        }
    }
    Some(())
}

/// Parses an SPS NAL unit (with its one-byte NAL header, without start code).
pub(crate) fn parse_sps(nal: &[u8]) -> Option<SpsInfo> {
    if nal.first()? & 0x1f != 7 {
        return None;
    }
    let rbsp = unescape(nal.get(1..)?);
    let mut r = BitReader::new(&rbsp);
    let profile_idc = r.bits(8)? as u8;
    r.bits(16)?; // constraint flags, reserved bits, level_idc
    r.ue()?; // seq_parameter_set_id
    let (mut chroma_format_idc, mut separate_planes) = (1u32, false);
    let (mut depth_luma, mut depth_chroma) = (8u32, 8u32);
    if matches!(
        profile_idc,
        100 | 110 | 122 | 244 | 44 | 83 | 86 | 118 | 128 | 138 | 139 | 134 | 135
    ) {
        chroma_format_idc = r.ue()?;
        if chroma_format_idc > 3 {
            return None;
        }
        if chroma_format_idc == 3 {
            separate_planes = r.bit()? == 1;
        }
        depth_luma = r.ue()?.checked_add(8)?;
        depth_chroma = r.ue()?.checked_add(8)?;
        if depth_luma > 14 || depth_chroma > 14 {
            return None;
        }
        r.bit()?; // qpprime_y_zero_transform_bypass_flag
        if r.bit()? == 1 {
            let lists = if chroma_format_idc == 3 { 12 } else { 8 };
            for i in 0..lists {
                if r.bit()? == 1 {
                    skip_scaling_list(&mut r, if i < 6 { 16 } else { 64 })?;
                }
            }
        }
    }
    r.ue()?; // log2_max_frame_num_minus4
    match r.ue()? {
        0 => {
            r.ue()?; // log2_max_pic_order_cnt_lsb_minus4
        }
        1 => {
            r.bit()?; // delta_pic_order_always_zero_flag
            r.se()?; // offset_for_non_ref_pic
            r.se()?; // offset_for_top_to_bottom_field
            let cycle = r.ue()?;
            if cycle > 255 {
                return None;
            }
            for _ in 0..cycle {
                r.se()?;
            }
        }
        2 => {}
        _ => return None,
    }
    r.ue()?; // max_num_ref_frames
    r.bit()?; // gaps_in_frame_num_value_allowed_flag
    let width_mbs = u64::from(r.ue()?) + 1;
    let height_units = u64::from(r.ue()?) + 1;
    let frame_mbs_only = u64::from(r.bit()?);
    if frame_mbs_only == 0 {
        r.bit()?; // mb_adaptive_frame_field_flag
    }
    r.bit()?; // direct_8x8_inference_flag
    let (mut left, mut right, mut top, mut bottom) = (0u64, 0u64, 0u64, 0u64);
    if r.bit()? == 1 {
        left = r.ue()?.into();
        right = r.ue()?.into();
        top = r.ue()?.into();
        bottom = r.ue()?.into();
    }
    // Crop units (H.264 7.4.2.1.1): in luma samples, per chroma subsampling.
    let chroma_array_type = if separate_planes {
        0
    } else {
        chroma_format_idc
    };
    let (crop_x, crop_y) = match chroma_array_type {
        0 => (1, 2 - frame_mbs_only),
        1 => (2, 2 * (2 - frame_mbs_only)),
        2 => (2, 2 - frame_mbs_only),
        _ => (1, 2 - frame_mbs_only),
    };
    let width = (width_mbs * 16).checked_sub(crop_x * (left + right))?;
    let height = ((2 - frame_mbs_only) * height_units * 16).checked_sub(crop_y * (top + bottom))?;
    if width == 0 || height == 0 || width > 16384 || height > 16384 {
        return None;
    }
    Some(SpsInfo {
        profile_idc,
        chroma_format_idc: chroma_format_idc as u8,
        bit_depth_luma: depth_luma as u8,
        bit_depth_chroma: depth_chroma as u8,
        width: width as u32,
        height: height as u32,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// libx264 High profile, 1280x720 yuv420p (`ffmpeg -f lavfi -i testsrc=size=1280x720`).
    pub(crate) const SPS_720P_HIGH: &[u8] = &[
        0x67, 0x64, 0x00, 0x1f, 0xac, 0xd9, 0x40, 0x50, 0x05, 0xbb, 0x01, 0x10, 0x00, 0x00, 0x03,
        0x00, 0x10, 0x00, 0x00, 0x03, 0x03, 0xc0, 0xf1, 0x83, 0x19, 0x60,
    ];
    /// Its PPS.
    pub(crate) const PPS_720P_HIGH: &[u8] = &[0x68, 0xeb, 0xe3, 0xcb, 0x22, 0xc0];
    /// libx264 Constrained Baseline, 640x360 (360 = 23 macroblocks cropped by 8 lines).
    pub(crate) const SPS_360P_BASELINE: &[u8] = &[
        0x67, 0x42, 0xc0, 0x1e, 0xd9, 0x00, 0xa0, 0x2f, 0xf9, 0x70, 0x11, 0x00, 0x00, 0x03, 0x00,
        0x01, 0x00, 0x00, 0x03, 0x00, 0x3c, 0x0f, 0x16, 0x2e, 0x48,
    ];
    /// libx264 High 4:4:4 Predictive, 640x360 (testsrc's rgb input kept as yuv444p).
    const SPS_360P_444: &[u8] = &[
        0x67, 0xf4, 0x00, 0x1e, 0x91, 0x9b, 0x28, 0x14, 0x05, 0xff, 0x13, 0x80, 0x88, 0x00, 0x00,
        0x03, 0x00, 0x08, 0x00, 0x00, 0x03, 0x01, 0xe0, 0x78, 0xb1, 0x6c, 0xb0,
    ];
    /// libx264 Main, 1920x1080 (1088 cropped to 1080).
    const SPS_1080P_MAIN: &[u8] = &[
        0x67, 0x4d, 0x40, 0x28, 0xec, 0xa0, 0x3c, 0x01, 0x13, 0xf2, 0xe0, 0x22, 0x00, 0x00, 0x03,
        0x00, 0x02, 0x00, 0x00, 0x03, 0x00, 0x78, 0x1e, 0x30, 0x63, 0x2c,
    ];

    #[test]
    fn sps_sizes_of_real_encoder_output() {
        let hd = parse_sps(SPS_720P_HIGH).expect("720p");
        assert_eq!((hd.width, hd.height, hd.profile_idc), (1280, 720, 100));
        assert_eq!(
            (hd.chroma_format_idc, hd.bit_depth_luma, hd.bit_depth_chroma),
            (1, 8, 8)
        );
        let sd = parse_sps(SPS_360P_BASELINE).expect("360p");
        assert_eq!((sd.width, sd.height, sd.profile_idc), (640, 360, 66));
        let s444 = parse_sps(SPS_360P_444).expect("360p 4:4:4");
        assert_eq!(
            (s444.width, s444.height, s444.chroma_format_idc),
            (640, 360, 3)
        );
        let fhd = parse_sps(SPS_1080P_MAIN).expect("1080p");
        assert_eq!((fhd.width, fhd.height, fhd.profile_idc), (1920, 1080, 77));
    }

    #[test]
    fn sps_junk_gives_none_without_panicking() {
        assert_eq!(parse_sps(&[]), None);
        assert_eq!(parse_sps(&[0x68, 1, 2, 3]), None, "a PPS is not an SPS");
        for len in 0..SPS_720P_HIGH.len() - 4 {
            // Truncated SPSs: either None or some size, never a panic.
            let _ = parse_sps(&SPS_720P_HIGH[..len]);
        }
        assert_eq!(
            parse_sps(&[0x67, 0x64, 0, 0x1f, 0, 0, 0, 0, 0, 0, 0, 0]),
            None
        );
        let mut x = 0x1234_5678u32;
        for _ in 0..2000 {
            let mut buf = vec![0x67];
            for _ in 0..(x % 40) {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                buf.push(x as u8);
            }
            let _ = parse_sps(&buf);
        }
    }

    #[test]
    fn exp_golomb_values() {
        // 1 -> 0, 010 -> 1, 011 -> 2, 00100 -> 3; se: 010 -> +1, 011 -> -1.
        let data = [0b1010_0110, 0b0100_0100, 0b1100_0000];
        let mut r = BitReader::new(&data);
        assert_eq!(r.ue(), Some(0));
        assert_eq!(r.ue(), Some(1));
        assert_eq!(r.ue(), Some(2));
        assert_eq!(r.ue(), Some(3));
        assert_eq!(r.se(), Some(1));
        assert_eq!(r.se(), Some(-1));
        assert_eq!(BitReader::new(&[0, 0, 0, 0, 0]).ue(), None);
        assert_eq!(unescape(&[0, 0, 3, 1, 0, 0, 3]), vec![0, 0, 1, 0, 0]);
    }
}

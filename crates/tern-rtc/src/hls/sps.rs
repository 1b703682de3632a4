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

/// What the packager takes from an H265 SPS (ITU-T H.265 7.3.2.2.1): the general
/// profile, tier and level (the `hvcC` record and the `CODECS` string repeat them), the
/// chroma format and bit depths, and the cropped picture size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct H265SpsInfo {
    pub profile_space: u8,
    pub tier: bool,
    pub profile_idc: u8,
    /// `general_profile_compatibility_flag[0..32]`, as coded (flag 0 is the top bit).
    pub compatibility: [u8; 4],
    /// The 48 bits from `general_progressive_source_flag` on, as coded.
    pub constraints: [u8; 6],
    pub level_idc: u8,
    /// `sps_max_sub_layers_minus1 + 1`.
    pub sub_layers: u8,
    pub temporal_id_nesting: bool,
    pub chroma_format_idc: u8,
    pub bit_depth_luma: u8,
    pub bit_depth_chroma: u8,
    /// Display width in pixels, after the conformance window.
    pub width: u32,
    /// Display height in pixels, after the conformance window.
    pub height: u32,
}

/// Parses an H265 SPS NAL unit (2-byte header included); `None` if it is not one or is
/// malformed.
pub(crate) fn parse_h265_sps(nal: &[u8]) -> Option<H265SpsInfo> {
    if (nal.first()? >> 1) & 0x3f != 33 {
        return None;
    }
    let rbsp = unescape(nal.get(2..)?);
    let mut r = BitReader::new(&rbsp);
    r.bits(4)?; // sps_video_parameter_set_id
    let max_sub_layers_minus1 = r.bits(3)? as u8;
    let temporal_id_nesting = r.bit()? == 1;
    // profile_tier_level(1, sps_max_sub_layers_minus1), 7.3.3.
    let profile_space = r.bits(2)? as u8;
    let tier = r.bit()? == 1;
    let profile_idc = r.bits(5)? as u8;
    let mut compatibility = [0u8; 4];
    for b in &mut compatibility {
        *b = r.bits(8)? as u8;
    }
    let mut constraints = [0u8; 6];
    for b in &mut constraints {
        *b = r.bits(8)? as u8;
    }
    let level_idc = r.bits(8)? as u8;
    let mut present = [(false, false); 8];
    for p in present.iter_mut().take(usize::from(max_sub_layers_minus1)) {
        *p = (r.bit()? == 1, r.bit()? == 1);
    }
    if max_sub_layers_minus1 > 0 {
        for _ in max_sub_layers_minus1..8 {
            r.bits(2)?; // reserved_zero_2bits
        }
    }
    for &(profile, level) in present.iter().take(usize::from(max_sub_layers_minus1)) {
        if profile {
            // Sub-layer profile space, tier, idc, compatibility flags, constraint flags.
            for _ in 0..11 {
                r.bits(8)?;
            }
        }
        if level {
            r.bits(8)?;
        }
    }
    r.ue()?; // sps_seq_parameter_set_id
    let chroma_format_idc = r.ue()?;
    if chroma_format_idc > 3 {
        return None;
    }
    if chroma_format_idc == 3 {
        r.bit()?; // separate_colour_plane_flag
    }
    let width = r.ue()?;
    let height = r.ue()?;
    let (mut crop_x, mut crop_y) = (0u64, 0u64);
    if r.bit()? == 1 {
        // Offsets in chroma samples (Table 6-1: SubWidthC, SubHeightC).
        let (sub_w, sub_h) = match chroma_format_idc {
            1 => (2, 2),
            2 => (2, 1),
            _ => (1, 1),
        };
        let (l, rt, t, b) = (r.ue()?, r.ue()?, r.ue()?, r.ue()?);
        crop_x = sub_w * (u64::from(l) + u64::from(rt));
        crop_y = sub_h * (u64::from(t) + u64::from(b));
    }
    let depth_luma = r.ue()? + 8;
    let depth_chroma = r.ue()? + 8;
    if depth_luma > 16 || depth_chroma > 16 {
        return None;
    }
    Some(H265SpsInfo {
        profile_space,
        tier,
        profile_idc,
        compatibility,
        constraints,
        level_idc,
        sub_layers: max_sub_layers_minus1 + 1,
        temporal_id_nesting,
        chroma_format_idc: chroma_format_idc as u8,
        bit_depth_luma: depth_luma as u8,
        bit_depth_chroma: depth_chroma as u8,
        width: u32::try_from(u64::from(width).checked_sub(crop_x)?).ok()?,
        height: u32::try_from(u64::from(height).checked_sub(crop_y)?).ok()?,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// libx265's SPS for 320x180 (coded 320x192, a conformance window of 12 rows), Main
    /// profile, level 2.0: `ffmpeg -f lavfi -i testsrc2=size=320x180 -c:v libx265`.
    const X265_SPS: &str =
        "42010101600000030090000003000003003ca00a080c1f3e595952930bc05a020000030002000003003c10";
    /// Its VPS.
    const X265_VPS: &str = "40010c01ffff01600000030090000003000003003c959409";

    #[test]
    fn h265_sps_gives_profile_level_and_cropped_size() {
        let sps = hex(X265_SPS);
        let i = parse_h265_sps(&sps).expect("parses");
        assert_eq!((i.profile_space, i.tier, i.profile_idc), (0, false, 1));
        assert_eq!(
            i.compatibility,
            [0x60, 0, 0, 0],
            "Main and Main 10 compatible"
        );
        assert_eq!(
            i.constraints,
            [0x90, 0, 0, 0, 0, 0],
            "progressive, frame only"
        );
        assert_eq!(i.level_idc, 60);
        assert_eq!((i.sub_layers, i.temporal_id_nesting), (1, true));
        assert_eq!(
            (i.chroma_format_idc, i.bit_depth_luma, i.bit_depth_chroma),
            (1, 8, 8)
        );
        assert_eq!((i.width, i.height), (320, 180));
        // Not an SPS, or cut short: None, never a panic.
        assert_eq!(parse_h265_sps(&hex(X265_VPS)), None);
        for n in 0..sps.len() {
            let _ = parse_h265_sps(&sps[..n]);
        }
        assert_eq!(parse_h265_sps(&sps[..12]), None);
    }

    /// Bytes from hex.
    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

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

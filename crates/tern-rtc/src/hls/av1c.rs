//! AV1's sequence header (AV1 spec §5.5), read for what CMAF needs: the `av1C` fields
//! (profile, level and tier of operating point 0, bit depth, chroma format), the picture
//! size (`RESOLUTION`) and the codecs string `av01.P.LLT.DD` (AV1-ISOBMFF, "Codecs
//! Parameter String"). Written here because no crate on hand parses it without a decoder;
//! nothing here panics on junk (every read is checked).

use mp4_atom::Av1c;

/// What the packager takes from a sequence header OBU's payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Av1Info {
    pub seq_profile: u8,
    pub seq_level_idx_0: u8,
    pub seq_tier_0: bool,
    pub high_bitdepth: bool,
    pub twelve_bit: bool,
    pub monochrome: bool,
    pub chroma_subsampling_x: bool,
    pub chroma_subsampling_y: bool,
    pub chroma_sample_position: u8,
    /// `max_frame_width_minus_1 + 1`.
    pub width: u32,
    /// `max_frame_height_minus_1 + 1`.
    pub height: u32,
}

impl Av1Info {
    /// `av01.P.LLT.DD`: profile, level index, tier (`M` or `H`), bit depth.
    pub(crate) fn codec(&self) -> String {
        codec(&Av1c {
            seq_profile: self.seq_profile,
            seq_level_idx_0: self.seq_level_idx_0,
            seq_tier_0: self.seq_tier_0,
            high_bitdepth: self.high_bitdepth,
            twelve_bit: self.twelve_bit,
            ..Av1c::default()
        })
    }
}

/// The codecs string of an `av1C` record: `av01.P.LLT.DD` (profile, level index, tier `M`
/// or `H`, bit depth).
pub(crate) fn codec(c: &Av1c) -> String {
    let depth = match (c.high_bitdepth, c.twelve_bit) {
        (false, _) => 8,
        (true, false) => 10,
        (true, true) => 12,
    };
    let tier = if c.seq_tier_0 { 'H' } else { 'M' };
    format!(
        "av01.{}.{:02}{tier}.{depth:02}",
        c.seq_profile, c.seq_level_idx_0
    )
}

/// Big-endian bits, as the AV1 spec's `f(n)`.
struct Bits<'a> {
    data: &'a [u8],
    at: usize,
}

impl Bits<'_> {
    fn f(&mut self, n: u32) -> Option<u32> {
        let mut v = 0u32;
        for _ in 0..n {
            let byte = *self.data.get(self.at / 8)?;
            let bit = (byte >> (7 - self.at % 8)) & 1;
            v = (v << 1) | u32::from(bit);
            self.at += 1;
        }
        Some(v)
    }

    fn flag(&mut self) -> Option<bool> {
        self.f(1).map(|b| b == 1)
    }

    /// `uvlc()` (§4.10.3).
    fn uvlc(&mut self) -> Option<u32> {
        let mut zeros = 0;
        while !self.flag()? {
            zeros += 1;
            if zeros >= 32 {
                return Some(u32::MAX);
            }
        }
        let v = self.f(zeros)?;
        Some(v.saturating_add((1u32 << zeros) - 1))
    }
}

/// Reads a sequence header OBU's payload (after its header and size). `None` when it is
/// cut short or says a profile above 2.
pub(crate) fn parse_sequence_header(payload: &[u8]) -> Option<Av1Info> {
    let mut r = Bits {
        data: payload,
        at: 0,
    };
    let seq_profile = r.f(3)? as u8;
    if seq_profile > 2 {
        return None;
    }
    let _still_picture = r.f(1)?;
    let reduced = r.flag()?;
    let (level, tier);
    if reduced {
        level = r.f(5)? as u8;
        tier = false;
    } else {
        let timing_info_present = r.flag()?;
        let mut decoder_model_info_present = false;
        let mut buffer_delay_length = 0;
        if timing_info_present {
            r.f(32)?; // num_units_in_display_tick
            r.f(32)?; // time_scale
            if r.flag()? {
                r.uvlc()?; // num_ticks_per_picture_minus_1
            }
            decoder_model_info_present = r.flag()?;
            if decoder_model_info_present {
                buffer_delay_length = r.f(5)? + 1;
                r.f(32)?; // num_units_in_decoding_tick
                r.f(5)?; // buffer_removal_time_length_minus_1
                r.f(5)?; // frame_presentation_time_length_minus_1
            }
        }
        let initial_display_delay_present = r.flag()?;
        let operating_points = r.f(5)? + 1;
        let mut first = None;
        for _ in 0..operating_points {
            r.f(12)?; // operating_point_idc
            let idx = r.f(5)? as u8;
            let t = if idx > 7 { r.flag()? } else { false };
            if decoder_model_info_present && r.flag()? {
                r.f(buffer_delay_length)?; // decoder_buffer_delay
                r.f(buffer_delay_length)?; // encoder_buffer_delay
                r.f(1)?; // low_delay_mode_flag
            }
            if initial_display_delay_present && r.flag()? {
                r.f(4)?; // initial_display_delay_minus_1
            }
            first.get_or_insert((idx, t));
        }
        (level, tier) = first?;
    }
    let width_bits = r.f(4)? + 1;
    let height_bits = r.f(4)? + 1;
    let width = r.f(width_bits)?.checked_add(1)?;
    let height = r.f(height_bits)?.checked_add(1)?;
    let frame_ids = if reduced { false } else { r.flag()? };
    if frame_ids {
        r.f(4)?; // delta_frame_id_length_minus_2
        r.f(3)?; // additional_frame_id_length_minus_1
    }
    r.f(3)?; // use_128x128_superblock, enable_filter_intra, enable_intra_edge_filter
    if !reduced {
        r.f(4)?; // interintra, masked compound, warped motion, dual filter
        let order_hint = r.flag()?;
        if order_hint {
            r.f(2)?; // enable_jnt_comp, enable_ref_frame_mvs
        }
        let force_screen_content_tools = if r.flag()? { 2 } else { r.f(1)? };
        if force_screen_content_tools > 0 && !r.flag()? {
            r.f(1)?; // seq_force_integer_mv
        }
        if order_hint {
            r.f(3)?; // order_hint_bits_minus_1
        }
    }
    r.f(3)?; // enable_superres, enable_cdef, enable_restoration
    // color_config() (§5.5.2).
    let high_bitdepth = r.flag()?;
    let twelve_bit = seq_profile == 2 && high_bitdepth && r.flag()?;
    let monochrome = seq_profile != 1 && r.flag()?;
    let (mut cp, mut tc, mut mc) = (2, 2, 2);
    if r.flag()? {
        cp = r.f(8)?;
        tc = r.f(8)?;
        mc = r.f(8)?;
    }
    let (ssx, ssy, csp);
    if monochrome {
        (ssx, ssy, csp) = (true, true, 0);
    } else if cp == 1 && tc == 13 && mc == 0 {
        // sRGB: 4:4:4.
        (ssx, ssy, csp) = (false, false, 0);
    } else {
        r.f(1)?; // color_range
        (ssx, ssy) = match seq_profile {
            0 => (true, true),
            1 => (false, false),
            _ if twelve_bit => {
                let x = r.flag()?;
                (x, x && r.flag()?)
            }
            _ => (true, false),
        };
        csp = if ssx && ssy { r.f(2)? as u8 } else { 0 };
    }
    Some(Av1Info {
        seq_profile,
        seq_level_idx_0: level,
        seq_tier_0: tier,
        high_bitdepth,
        twelve_bit,
        monochrome,
        chroma_subsampling_x: ssx,
        chroma_subsampling_y: ssy,
        chroma_sample_position: csp,
        width,
        height,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    /// libaom (`ffmpeg -c:v libaom-av1` of `testsrc`, 640x360 RGB: profile 1, 4:4:4) and
    /// SVT-AV1 (1280x720 yuv420p10le) sequence header payloads, as ffmpeg 5.1 wrote them;
    /// ffprobe reads the same profiles, levels (1 and 5) and sizes.
    #[test]
    fn real_encoders_sequence_headers() {
        let aom = parse_sequence_header(&hex("2000000cc4ff6736be48086801")).expect("libaom");
        assert_eq!((aom.width, aom.height), (640, 360));
        assert_eq!((aom.seq_profile, aom.seq_level_idx_0), (1, 1));
        assert!(!aom.high_bitdepth && !aom.monochrome);
        assert!(!aom.chroma_subsampling_x && !aom.chroma_subsampling_y);
        assert_eq!(aom.codec(), "av01.1.01M.08");
        let svt = parse_sequence_header(&hex("0000002d4cffb3cfbf9404")).expect("SVT-AV1");
        assert_eq!((svt.width, svt.height), (1280, 720));
        assert!(svt.high_bitdepth && !svt.twelve_bit);
        assert!(svt.chroma_subsampling_x && svt.chroma_subsampling_y);
        assert_eq!(svt.codec(), "av01.0.05M.10");
    }

    #[test]
    fn junk_is_refused_without_panicking() {
        assert_eq!(parse_sequence_header(&[]), None);
        assert_eq!(parse_sequence_header(&[0xe0]), None, "profile 7");
        for n in 0..64u32 {
            let junk: Vec<u8> = (0..n).map(|i| (i * 37 + n) as u8).collect();
            let _ = parse_sequence_header(&junk);
        }
        assert_eq!(parse_sequence_header(&[0x00, 0xff]), None, "cut short");
    }
}

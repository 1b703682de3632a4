//! H264 access units in, fMP4 samples out: NAL units split from Annex B (start codes) or AVCC
//! (4-byte lengths), parameter sets and access unit delimiters taken out of the sample. The
//! splitting is tern-proto's (`h264::nal_units`, `flv::avcc_nal_units`).

use tern_proto::h264::{NAL_AUD, NAL_PPS, NAL_SPS, nal_type, nal_units};
use tern_proto::rtmp::flv::avcc_nal_units;

/// The parameter sets an access unit carried in band (the first of each).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ParamSets<'a> {
    pub sps: Option<&'a [u8]>,
    pub pps: Option<&'a [u8]>,
}

fn append_nal<'a>(nal: &'a [u8], out: &mut Vec<u8>, params: &mut ParamSets<'a>) {
    let Ok(len) = u32::try_from(nal.len()) else {
        return;
    };
    match nal_type(nal) {
        NAL_SPS => {
            params.sps.get_or_insert(nal);
        }
        NAL_PPS => {
            params.pps.get_or_insert(nal);
        }
        NAL_AUD => {}
        _ => {
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(nal);
        }
    }
}

/// Appends an Annex B access unit to `out` as a length-prefixed sample, without its SPS, PPS
/// and AUD units, which are returned (the first of each).
pub(crate) fn annexb_to_sample<'a>(au: &'a [u8], out: &mut Vec<u8>) -> ParamSets<'a> {
    let mut params = ParamSets::default();
    for nal in nal_units(au) {
        append_nal(nal, out, &mut params);
    }
    params
}

/// The parameter sets an H265 access unit carried in band (the first of each).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct H265ParamSets<'a> {
    pub vps: Option<&'a [u8]>,
    pub sps: Option<&'a [u8]>,
    pub pps: Option<&'a [u8]>,
}

/// Appends an H265 Annex B access unit to `out` as a length-prefixed sample, without its
/// VPS, SPS, PPS and AUD units, which are returned (the first of each). H265 start codes
/// are H264's, so H264's splitter serves.
pub(crate) fn annexb_h265_to_sample<'a>(au: &'a [u8], out: &mut Vec<u8>) -> H265ParamSets<'a> {
    use tern_proto::h265;
    let mut params = H265ParamSets::default();
    for nal in nal_units(au) {
        let Ok(len) = u32::try_from(nal.len()) else {
            continue;
        };
        match h265::nal_type(nal) {
            h265::VPS => {
                params.vps.get_or_insert(nal);
            }
            h265::SPS => {
                params.sps.get_or_insert(nal);
            }
            h265::PPS => {
                params.pps.get_or_insert(nal);
            }
            h265::AUD => {}
            _ => {
                out.extend_from_slice(&len.to_be_bytes());
                out.extend_from_slice(nal);
            }
        }
    }
    params
}

/// Appends an AVCC access unit (4-byte big-endian lengths) to `out`, without its SPS, PPS and
/// AUD units, which are returned. `None` (and `out` as it was) if a length runs past the end.
pub(crate) fn avcc_to_sample<'a>(au: &'a [u8], out: &mut Vec<u8>) -> Option<ParamSets<'a>> {
    let mut params = ParamSets::default();
    for nal in avcc_nal_units(au, 4).ok()? {
        append_nal(nal, out, &mut params);
    }
    Some(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annexb_is_split_and_parameter_sets_are_taken_out() {
        let au = [
            0, 0, 0, 1, 0x09, 0xf0, // AUD
            0, 0, 0, 1, 0x67, 1, 2, // SPS
            0, 0, 1, 0x68, 3, // PPS
            0, 0, 1, 0x65, 0xaa, 0xbb, 0, // IDR slice with a trailing zero
            0, 0, 0, 1, 0x41, 0xcc, // non-IDR slice
        ];
        let mut out = Vec::new();
        let params = annexb_to_sample(&au, &mut out);
        assert_eq!(params.sps, Some(&[0x67, 1, 2][..]));
        assert_eq!(params.pps, Some(&[0x68, 3][..]));
        assert_eq!(out, [0, 0, 0, 3, 0x65, 0xaa, 0xbb, 0, 0, 0, 2, 0x41, 0xcc]);
    }

    #[test]
    fn avcc_is_checked_and_filtered() {
        let au = [0, 0, 0, 2, 0x09, 0xf0, 0, 0, 0, 2, 0x65, 1];
        let mut out = vec![9];
        let params = avcc_to_sample(&au, &mut out).expect("well formed");
        assert_eq!(params, ParamSets::default());
        assert_eq!(out, [9, 0, 0, 0, 2, 0x65, 1]);
        assert_eq!(avcc_to_sample(&[0, 0, 0, 9, 0x65], &mut out), None);
        assert_eq!(avcc_to_sample(&[0, 0], &mut out), None);
        assert_eq!(
            out,
            [9, 0, 0, 0, 2, 0x65, 1],
            "a bad AU leaves out untouched"
        );
    }

    #[test]
    fn annexb_garbage() {
        let mut out = Vec::new();
        assert_eq!(annexb_to_sample(&[], &mut out), ParamSets::default());
        annexb_to_sample(&[1, 2, 3, 4], &mut out);
        annexb_to_sample(&[0, 0, 1], &mut out);
        annexb_to_sample(&[0, 0, 1, 0, 0, 1, 0, 0, 0], &mut out);
        assert!(out.is_empty());
    }
}

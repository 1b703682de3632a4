//! H264 access units in, fMP4 samples out: NAL units split from Annex B (start codes) or AVCC
//! (4-byte lengths), parameter sets and access unit delimiters taken out of the sample.

const NAL_SPS: u8 = 7;
const NAL_PPS: u8 = 8;
const NAL_AUD: u8 = 9;

/// The parameter sets an access unit carried in band (the first of each).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ParamSets<'a> {
    pub sps: Option<&'a [u8]>,
    pub pps: Option<&'a [u8]>,
}

/// The NAL units of an Annex B byte stream, split on `00 00 01` (a 4-byte start code is the
/// same with a leading zero, stripped as trailing zero bytes of the unit before). Bytes
/// before the first start code are not a NAL unit and are skipped.
struct AnnexB<'a> {
    data: &'a [u8],
    pos: usize,
}

fn find_start_code(data: &[u8], from: usize) -> Option<(usize, usize)> {
    let tail = data.get(from..)?;
    tail.windows(3)
        .position(|w| w == [0, 0, 1])
        .map(|i| (from + i, from + i + 3))
}

impl<'a> Iterator for AnnexB<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        while self.pos < self.data.len() {
            let (end, next) =
                find_start_code(self.data, self.pos).unwrap_or((self.data.len(), self.data.len()));
            let mut nal = &self.data[self.pos..end];
            self.pos = next;
            while let [rest @ .., 0] = nal {
                nal = rest;
            }
            if !nal.is_empty() {
                return Some(nal);
            }
        }
        None
    }
}

fn append_nal<'a>(nal: &'a [u8], out: &mut Vec<u8>, params: &mut ParamSets<'a>) {
    let Some(&header) = nal.first() else { return };
    let Ok(len) = u32::try_from(nal.len()) else {
        return;
    };
    match header & 0x1f {
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
    let start = find_start_code(au, 0).map_or(au.len(), |(_, next)| next);
    let mut params = ParamSets::default();
    for nal in (AnnexB {
        data: au,
        pos: start,
    }) {
        append_nal(nal, out, &mut params);
    }
    params
}

/// Appends an AVCC access unit (4-byte big-endian lengths) to `out`, without its SPS, PPS and
/// AUD units, which are returned. `None` (and `out` as it was) if a length runs past the end.
pub(crate) fn avcc_to_sample<'a>(au: &'a [u8], out: &mut Vec<u8>) -> Option<ParamSets<'a>> {
    let mark = out.len();
    let mut params = ParamSets::default();
    let mut rest = au;
    while !rest.is_empty() {
        let parsed = rest.split_first_chunk::<4>().and_then(|(len, tail)| {
            let len = usize::try_from(u32::from_be_bytes(*len)).ok()?;
            (len <= tail.len()).then(|| tail.split_at(len))
        });
        let Some((nal, tail)) = parsed else {
            out.truncate(mark);
            return None;
        };
        append_nal(nal, out, &mut params);
        rest = tail;
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

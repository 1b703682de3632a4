//! H265 RTP packetization (RFC 7798) of access units given as length-prefixed NAL units (the
//! form an MP4 sample and an RTSP client's depacketizer hand over): a NAL unit that fits
//! goes in a single NAL unit packet (§4.4.1), a larger one is split into fragmentation units
//! (type 49, §4.4.3) of equal size. Access unit delimiters (35) and empty or one-byte NAL
//! units are dropped. No payload exceeds `max_payload`. A length that runs past the end
//! of the access unit is an error, never a panic.

use thiserror::Error;

/// NAL unit type of a fragmentation unit.
const FU: u8 = 49;
/// NAL unit type of an access unit delimiter.
pub const AUD: u8 = 35;
/// NAL unit type of a video parameter set.
pub const VPS: u8 = 32;
/// NAL unit type of a sequence parameter set.
pub const SPS: u8 = 33;
/// NAL unit type of a picture parameter set.
pub const PPS: u8 = 34;
/// The NAL unit header (2 bytes) and the FU header (1 byte).
const FU_OVERHEAD: usize = 3;
/// The smallest `max_payload` accepted: an FU must carry at least one byte.
pub const MIN_PAYLOAD: usize = FU_OVERHEAD + 1;

/// Why an access unit cannot be packetized.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum H265Error {
    /// A NAL unit's length runs past the end of the access unit.
    #[error("a NAL unit length ({len}) runs past the access unit ({left} bytes left)")]
    Truncated {
        /// The length read.
        len: usize,
        /// Bytes left after it.
        left: usize,
    },
    /// `max_payload` below [`MIN_PAYLOAD`].
    #[error("max_payload {0} is too small")]
    MaxPayloadTooSmall(usize),
}

/// The NAL unit type of a NAL unit (its header's bits 1-6).
pub fn nal_type(nal: &[u8]) -> u8 {
    nal.first().map_or(0, |b| (b >> 1) & 0x3f)
}

/// Whether a NAL unit is a parameter set (VPS, SPS or PPS).
pub fn is_parameter_set(nal: &[u8]) -> bool {
    matches!(nal_type(nal), VPS | SPS | PPS)
}

/// Whether a NAL unit is a slice of an IRAP picture (BLA, IDR, CRA and the reserved IRAP
/// types 16-23, H.265 §7.4.2.2): a picture a decoder can start at.
pub fn is_irap(nal: &[u8]) -> bool {
    (16..=23).contains(&nal_type(nal))
}

/// The NAL units of `au`, each after a 4-byte big-endian length.
pub fn split_length_prefixed(au: &[u8]) -> Result<Vec<&[u8]>, H265Error> {
    let mut out = Vec::new();
    let mut rest = au;
    while !rest.is_empty() {
        let Some((len, tail)) = rest.split_first_chunk::<4>() else {
            return Err(H265Error::Truncated {
                len: 4,
                left: rest.len(),
            });
        };
        let len = u32::from_be_bytes(*len) as usize;
        if len > tail.len() {
            return Err(H265Error::Truncated {
                len,
                left: tail.len(),
            });
        }
        out.push(&tail[..len]);
        rest = &tail[len..];
    }
    Ok(out)
}

/// Packetizes one access unit of 4-byte length-prefixed NAL units; `emit(payload, last)`
/// once per RTP payload, `last` on the access unit's final one (the marker bit).
pub fn packetize(
    au: &[u8],
    max_payload: usize,
    emit: &mut dyn FnMut(&[u8], bool),
) -> Result<(), H265Error> {
    if max_payload < MIN_PAYLOAD {
        return Err(H265Error::MaxPayloadTooSmall(max_payload));
    }
    let nals: Vec<&[u8]> = split_length_prefixed(au)?
        .into_iter()
        .filter(|n| n.len() > 2 && nal_type(n) != AUD)
        .collect();
    let mut scratch = Vec::with_capacity(max_payload);
    for (i, nal) in nals.iter().enumerate() {
        let last_nal = i + 1 == nals.len();
        if nal.len() <= max_payload {
            emit(nal, last_nal);
            continue;
        }
        // FU: the NAL header with type 49 (F, layer id and TID kept), then S/E and the type.
        let header = [(nal[0] & 0x81) | (FU << 1), nal[1]];
        let body = &nal[2..];
        let cap = max_payload - FU_OVERHEAD;
        let n = body.len().div_ceil(cap);
        let size = body.len().div_ceil(n);
        for (j, part) in body.chunks(size).enumerate() {
            let (start, end) = (j == 0, j + 1 == n);
            scratch.clear();
            scratch.extend_from_slice(&header);
            scratch.push(u8::from(start) << 7 | u8::from(end) << 6 | nal_type(nal));
            scratch.extend_from_slice(part);
            emit(&scratch, last_nal && end);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::VideoCodec;

    fn au(nals: &[&[u8]]) -> Vec<u8> {
        let mut v = Vec::new();
        for n in nals {
            v.extend_from_slice(&(n.len() as u32).to_be_bytes());
            v.extend_from_slice(n);
        }
        v
    }

    #[test]
    fn small_nals_go_whole_and_large_ones_in_fragments() {
        let vps = [32 << 1, 1, 0xaa, 0xbb];
        let aud = [35 << 1, 1, 0x50];
        let mut idr = vec![19 << 1, 1];
        idr.extend((0..2500u32).map(|i| i as u8));
        let mut out: Vec<(Vec<u8>, bool)> = Vec::new();
        packetize(&au(&[&vps, &aud, &idr]), 1200, &mut |p, last| {
            out.push((p.to_vec(), last))
        })
        .expect("packetize");
        assert_eq!(out.len(), 1 + 3, "VPS whole, the IDR in three fragments");
        assert_eq!(out[0], (vps.to_vec(), false));
        assert!(VideoCodec::H265.is_keyframe(&out[0].0));
        assert!(
            VideoCodec::H265.is_keyframe(&out[1].0),
            "FU start of an IDR"
        );
        assert!(out.iter().all(|(p, _)| p.len() <= 1200));
        assert!(out[3].1 && !out[2].1);
        assert_eq!(out[1].0[2], 0x80 | 19);
        assert_eq!(out[3].0[2], 0x40 | 19);
        // The fragments put back together are the NAL unit.
        let mut back = idr[..2].to_vec();
        for (p, _) in &out[1..] {
            back.extend_from_slice(&p[3..]);
        }
        assert_eq!(back, idr);
    }

    #[test]
    fn truncated_lengths_are_errors() {
        let mut bad = au(&[&[1 << 1, 1, 2]]);
        bad.extend_from_slice(&[0, 0, 0, 9, 1]);
        assert!(matches!(
            packetize(&bad, 1200, &mut |_, _| {}),
            Err(H265Error::Truncated { len: 9, left: 1 })
        ));
        assert!(packetize(&[0, 0], 1200, &mut |_, _| {}).is_err());
        assert!(packetize(&[], 3, &mut |_, _| {}).is_err());
    }
}

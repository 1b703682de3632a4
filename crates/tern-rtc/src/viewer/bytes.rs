//! Byte-level helpers of the viewer that depend on nothing else in it: the certificate
//! fingerprint's hash and RTP padding.

/// SHA-256 of `data` (certificate fingerprints, `a=fingerprint`).
pub(crate) fn sha256(data: &[u8]) -> [u8; 32] {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, data);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// RTP padding of `pad` bytes after the payload that ends at `end` (RFC 3550 §5.1): zeros,
/// then the count; and the P bit. Nothing for 0.
pub(super) fn write_padding(out: &mut [u8], end: usize, pad: u8) {
    if pad == 0 {
        return;
    }
    let last = end + usize::from(pad) - 1;
    out[end..last].fill(0);
    out[last] = pad;
    out[0] |= 0x20;
}

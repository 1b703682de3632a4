//! Byte-level helpers of the viewer that depend on nothing else in it: the certificate
//! fingerprint's hash, RTP padding and the sealed DTLS close alert.

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

/// A sealed DTLS close_notify record, inline (one alert is 24-39 bytes: DTLS 1.3 or 1.2
/// with AES-GCM). Empty when none was sealed or it did not fit.
#[derive(Clone, Copy)]
pub(super) struct CloseAlert {
    len: u8,
    buf: [u8; CLOSE_ALERT_MAX],
}

/// Room for the sealed alert: the largest tern's DTLS suites produce, with margin.
const CLOSE_ALERT_MAX: usize = 47;

impl Default for CloseAlert {
    fn default() -> Self {
        CloseAlert {
            len: 0,
            buf: [0; CLOSE_ALERT_MAX],
        }
    }
}

impl CloseAlert {
    pub(super) fn new(rec: &[u8]) -> Self {
        let mut a = CloseAlert::default();
        if let Some(dst) = a.buf.get_mut(..rec.len()) {
            dst.copy_from_slice(rec);
            a.len = rec.len() as u8;
        }
        a
    }

    pub(super) fn record(&self) -> Option<&[u8]> {
        (self.len > 0).then(|| &self.buf[..usize::from(self.len)])
    }
}

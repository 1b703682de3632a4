//! SRTP and SRTCP (RFC 3711) with AES-CM/HMAC-SHA1-80 and AEAD AES-GCM (RFC 7714).
//!
//! Session keys come from the RFC 3711 §4.3 AES-CM key derivation (key derivation rate 0),
//! run once in [`RtpCipher::new`] / [`RtcpCipher::new`]; the expanded cipher and HMAC keys are
//! kept in the cipher objects. `protect` and `unprotect` work in place on caller-owned
//! buffers and never allocate.
//!
//! The sender passes the rollover counter to [`RtpCipher::protect`] (it already tracks the
//! extended sequence number). The receiver side estimates it (RFC 3711 Appendix A) and keeps
//! a 64-packet replay window per SSRC, for up to [`MAX_STREAMS`] SSRCs per cipher; state is
//! only created or advanced by packets that authenticate.
//!
//! Files: `keys.rs` (profiles, keying material, key derivation), `packet.rs` (the
//! per-packet transforms, replay window and receive state), `ciphers.rs` (the contexts a
//! session holds); this file only declares and re-exports them.

mod ciphers;
mod keys;
mod packet;

pub use ciphers::{
    RTCP_RECEIVER_STREAMS, RtcpCipher, RtcpReceiver, RtcpSender, RtpCipher, RtpSender,
};
pub use keys::{MAX_STREAMS, SrtpError, SrtpKeys, SrtpProfile, split_keying_material};

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

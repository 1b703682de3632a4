//! Per-packet SRTP and SRTCP transforms: AES-CM with HMAC-SHA1 and AES-GCM (RFC 7714),
//! their IVs and tags, the replay window and the per-SSRC receive state, and sealing and
//! opening RTP and RTCP packets in place.

use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use aws_lc_rs::cipher::EncryptingKey;
use aws_lc_rs::constant_time::verify_slices_are_equal;
use aws_lc_rs::hmac;

use crate::rtp;

use super::keys::*;

/// Expanded AES-CM/HMAC-SHA1 state. Boxed inside [`Transform`] so that the GCM variant, the
/// one browsers negotiate, stays a pointer and a salt.
pub(super) struct CmState {
    pub(super) enc: EncryptingKey,
    pub(super) auth: hmac::Key,
    pub(super) salt: [u8; 14],
}

/// Expanded session crypto state for one of SRTP or SRTCP.
pub(super) enum Transform {
    Cm(Box<CmState>),
    Gcm { key: LessSafeKey, salt: [u8; 12] },
}

impl std::fmt::Debug for Transform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Cm { .. } => "AesCmHmacSha1",
            Self::Gcm { .. } => "AesGcm",
        })
    }
}

impl Transform {
    /// Derives session keys with the given (encryption, auth, salt) labels and expands them.
    pub(super) fn new(
        profile: SrtpProfile,
        keys: &SrtpKeys,
        labels: (u8, u8, u8),
    ) -> Result<Self, SrtpError> {
        Self::expand(profile, &SessionKeys::derive(profile, keys, labels)?)
    }

    /// Expands session keys into cipher contexts.
    pub(super) fn expand(profile: SrtpProfile, k: &SessionKeys) -> Result<Self, SrtpError> {
        let enc = &k.enc[..profile.key_len()];
        Ok(if profile.is_gcm() {
            let alg = match profile {
                SrtpProfile::AeadAes256Gcm => &aead::AES_256_GCM,
                _ => &aead::AES_128_GCM,
            };
            let unbound = UnboundKey::new(alg, enc).map_err(|_| SrtpError::Crypto)?;
            let mut salt = [0u8; 12];
            salt.copy_from_slice(&k.salt[..12]);
            Self::Gcm {
                key: LessSafeKey::new(unbound),
                salt,
            }
        } else {
            Self::Cm(Box::new(CmState {
                enc: ctr_key(enc)?,
                auth: hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, &k.auth),
                salt: k.salt,
            }))
        })
    }

    /// A transform from session keys directly (for RFC test vectors).
    #[cfg(test)]
    pub(super) fn from_session(key: &[u8], auth: &[u8], salt: &[u8]) -> Self {
        let mut k = SessionKeys {
            enc: [0; MAX_KEY_LEN],
            auth: [0; HMAC_KEY_LEN],
            salt: [0; MAX_SALT_LEN],
        };
        k.enc[..key.len()].copy_from_slice(key);
        k.auth[..auth.len()].copy_from_slice(auth);
        k.salt[..salt.len()].copy_from_slice(salt);
        let profile = match (salt.len(), key.len()) {
            (12, 32) => SrtpProfile::AeadAes256Gcm,
            (12, _) => SrtpProfile::AeadAes128Gcm,
            _ => SrtpProfile::Aes128CmHmacSha1_80,
        };
        Self::expand(profile, &k).expect("key")
    }
}

/// AES-CM counter block (RFC 3711 §4.1.1):
/// `(salt * 2^16) XOR (SSRC * 2^64) XOR (index * 2^16)`.
pub(super) fn cm_iv(salt: &[u8; 14], ssrc: u32, index: u64) -> [u8; 16] {
    let mut iv = [0u8; 16];
    iv[..14].copy_from_slice(salt);
    for (b, s) in iv[4..8].iter_mut().zip(ssrc.to_be_bytes()) {
        *b ^= s;
    }
    for (b, s) in iv[8..14].iter_mut().zip(&index.to_be_bytes()[2..]) {
        *b ^= s;
    }
    iv
}

/// 12-byte GCM IV: `(00 00 || SSRC || tail) XOR salt` where `tail` is `ROC || SEQ` for SRTP
/// (RFC 7714 §8.1) and `00 00 || SRTCP index` for SRTCP (§9.1).
pub(super) fn gcm_iv(salt: &[u8; 12], ssrc: u32, tail: [u8; 6]) -> Nonce {
    let mut iv = [0u8; 12];
    iv[2..6].copy_from_slice(&ssrc.to_be_bytes());
    iv[6..12].copy_from_slice(&tail);
    for (b, s) in iv.iter_mut().zip(salt) {
        *b ^= s;
    }
    Nonce::assume_unique_for_key(iv)
}

pub(super) fn rtp_gcm_tail(roc: u32, seq: u16) -> [u8; 6] {
    let mut t = [0u8; 6];
    t[..4].copy_from_slice(&roc.to_be_bytes());
    t[4..].copy_from_slice(&seq.to_be_bytes());
    t
}

pub(super) fn rtcp_gcm_tail(index: u32) -> [u8; 6] {
    let mut t = [0u8; 6];
    t[2..].copy_from_slice(&(index & MAX_SRTCP_INDEX).to_be_bytes());
    t
}

/// Truncated HMAC-SHA1 over `parts`, written to `out` (10 bytes).
pub(super) fn hmac_tag(key: &hmac::Key, parts: &[&[u8]], out: &mut [u8]) {
    let mut ctx = hmac::Context::with_key(key);
    for p in parts {
        ctx.update(p);
    }
    let tag = ctx.sign();
    out.copy_from_slice(&tag.as_ref()[..out.len()]);
}

pub(super) fn hmac_verify(key: &hmac::Key, parts: &[&[u8]], tag: &[u8]) -> Result<(), SrtpError> {
    let mut expected = [0u8; HMAC_TAG_LEN];
    hmac_tag(key, parts, &mut expected);
    verify_slices_are_equal(&expected, tag).map_err(|_| SrtpError::AuthFailed)
}

/// A 64-packet sliding replay window over extended indices (RFC 3711 §3.3.2).
#[derive(Debug, Clone, Copy)]
pub(super) struct ReplayWindow {
    /// Highest index received.
    pub(super) highest: u64,
    /// Bit i set: index `highest - i` was received.
    pub(super) bits: u64,
}

impl ReplayWindow {
    pub(super) fn new(index: u64) -> Self {
        Self {
            highest: index,
            bits: 1,
        }
    }

    pub(super) fn check(&self, index: u64) -> Result<(), SrtpError> {
        if index > self.highest {
            return Ok(());
        }
        let age = self.highest - index;
        if age >= REPLAY_WINDOW || self.bits & (1 << age) != 0 {
            return Err(SrtpError::Replay);
        }
        Ok(())
    }

    pub(super) fn accept(&mut self, index: u64) {
        if index > self.highest {
            let shift = index - self.highest;
            self.bits = if shift >= REPLAY_WINDOW {
                0
            } else {
                self.bits << shift
            };
            self.bits |= 1;
            self.highest = index;
        } else {
            self.bits |= 1 << (self.highest - index);
        }
    }
}

/// Per-SSRC receive state in a fixed array of `N` slots with least-recently-used replacement.
#[derive(Debug, Clone)]
pub(super) struct Streams<const N: usize> {
    pub(super) slots: [Option<(u32, u64, ReplayWindow)>; N],
    pub(super) clock: u64,
}

impl<const N: usize> Streams<N> {
    pub(super) fn new() -> Self {
        Self {
            slots: [None; N],
            clock: 0,
        }
    }

    pub(super) fn get(&self, ssrc: u32) -> Option<ReplayWindow> {
        self.slots
            .iter()
            .flatten()
            .find(|(s, _, _)| *s == ssrc)
            .map(|&(_, _, w)| w)
    }

    /// Records that `index` authenticated for `ssrc`.
    pub(super) fn accept(&mut self, ssrc: u32, index: u64) {
        self.clock += 1;
        let clock = self.clock;
        if let Some((_, used, w)) = self.slots.iter_mut().flatten().find(|(s, _, _)| *s == ssrc) {
            w.accept(index);
            *used = clock;
            return;
        }
        let slot = self
            .slots
            .iter_mut()
            .min_by_key(|s| s.map_or(0, |(_, used, _)| used));
        if let Some(slot) = slot {
            *slot = Some((ssrc, clock, ReplayWindow::new(index)));
        }
    }
}

/// Checks `len`/`header_len` against `buf` for an RTP protect call and returns
/// (sequence number, SSRC, protected length).
pub(super) fn rtp_seal_check(
    buf: &[u8],
    len: usize,
    header_len: usize,
    overhead: usize,
) -> Result<(u16, u32, usize), SrtpError> {
    if len > buf.len() || header_len > len || header_len < rtp::FIXED_HEADER_LEN {
        return Err(SrtpError::Malformed);
    }
    let out_len = len + overhead;
    if out_len > buf.len() {
        return Err(SrtpError::BufferTooSmall);
    }
    let seq = u16::from_be_bytes([buf[2], buf[3]]);
    let ssrc = u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]);
    Ok((seq, ssrc, out_len))
}

/// SRTP-protects `buf[..len]` in place (payload from `header_len`), appending the tag.
pub(super) fn rtp_seal(
    t: &Transform,
    buf: &mut [u8],
    len: usize,
    header_len: usize,
    roc: u32,
    overhead: usize,
) -> Result<usize, SrtpError> {
    let (seq, ssrc, out_len) = rtp_seal_check(buf, len, header_len, overhead)?;
    match t {
        Transform::Cm(cm) => {
            let index = (u64::from(roc) << 16) | u64::from(seq);
            aes_ctr(
                &cm.enc,
                cm_iv(&cm.salt, ssrc, index),
                &mut buf[header_len..len],
            )?;
            let (msg, tag) = buf.split_at_mut(len);
            hmac_tag(
                &cm.auth,
                &[&*msg, &roc.to_be_bytes()],
                &mut tag[..HMAC_TAG_LEN],
            );
        }
        Transform::Gcm { key, salt } => {
            let nonce = gcm_iv(salt, ssrc, rtp_gcm_tail(roc, seq));
            let (hdr, rest) = buf.split_at_mut(header_len);
            let (payload, tag_out) = rest.split_at_mut(len - header_len);
            let tag = key
                .seal_in_place_separate_tag(nonce, Aad::from(&*hdr), payload)
                .map_err(|_| SrtpError::Crypto)?;
            tag_out[..GCM_TAG_LEN].copy_from_slice(tag.as_ref());
        }
    }
    Ok(out_len)
}

/// Authenticates and decrypts SRTP in place; `window` is the replay state of the packet's
/// SSRC. Returns (plaintext length, SSRC, packet index).
pub(super) fn rtp_open(
    t: &Transform,
    buf: &mut [u8],
    len: usize,
    tag_len: usize,
    window: impl Fn(u32) -> Option<ReplayWindow>,
) -> Result<(usize, u32, u64), SrtpError> {
    let pkt = buf.get(..len).ok_or(SrtpError::Malformed)?;
    let h = rtp::parse_header_unpadded(pkt).map_err(|_| SrtpError::Malformed)?;
    if h.header_len + tag_len > len {
        return Err(SrtpError::Malformed);
    }
    let state = window(h.ssrc);
    let index = match state {
        None => u64::from(h.sequence),
        Some(w) => rtp::extend_seq(w.highest, h.sequence),
    };
    if index > MAX_SRTP_INDEX {
        return Err(SrtpError::Replay);
    }
    if let Some(w) = state {
        w.check(index)?;
    }
    let roc = (index >> 16) as u32;
    let body_len = len - tag_len;
    match t {
        Transform::Cm(cm) => {
            let (msg, tag) = buf[..len].split_at_mut(body_len);
            hmac_verify(&cm.auth, &[&*msg, &roc.to_be_bytes()], tag)?;
            aes_ctr(
                &cm.enc,
                cm_iv(&cm.salt, h.ssrc, index),
                &mut msg[h.header_len..],
            )?;
        }
        Transform::Gcm { key, salt } => {
            let nonce = gcm_iv(salt, h.ssrc, rtp_gcm_tail(roc, h.sequence));
            let (hdr, rest) = buf[..len].split_at_mut(h.header_len);
            key.open_in_place(nonce, Aad::from(&*hdr), rest)
                .map_err(|_| SrtpError::AuthFailed)?;
        }
    }
    Ok((body_len, h.ssrc, index))
}

/// SRTCP-protects `buf[..len]` in place with SRTCP index `index`.
pub(super) fn rtcp_seal(
    t: &Transform,
    buf: &mut [u8],
    len: usize,
    index: u32,
    overhead: usize,
) -> Result<usize, SrtpError> {
    if len > buf.len() || len < 8 {
        return Err(SrtpError::Malformed);
    }
    let out_len = len + overhead;
    if out_len > buf.len() {
        return Err(SrtpError::BufferTooSmall);
    }
    if index > MAX_SRTCP_INDEX {
        return Err(SrtpError::IndexExhausted);
    }
    let ssrc = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
    let trailer = (0x8000_0000 | index).to_be_bytes();
    match t {
        Transform::Cm(cm) => {
            aes_ctr(
                &cm.enc,
                cm_iv(&cm.salt, ssrc, u64::from(index)),
                &mut buf[8..len],
            )?;
            buf[len..len + SRTCP_INDEX_LEN].copy_from_slice(&trailer);
            let (msg, tag) = buf.split_at_mut(len + SRTCP_INDEX_LEN);
            hmac_tag(&cm.auth, &[&*msg], &mut tag[..HMAC_TAG_LEN]);
        }
        Transform::Gcm { key, salt } => {
            let mut aad = [0u8; 8 + SRTCP_INDEX_LEN];
            aad[..8].copy_from_slice(&buf[..8]);
            aad[8..].copy_from_slice(&trailer);
            let nonce = gcm_iv(salt, ssrc, rtcp_gcm_tail(index));
            let tag = key
                .seal_in_place_separate_tag(nonce, Aad::from(aad), &mut buf[8..len])
                .map_err(|_| SrtpError::Crypto)?;
            buf[len..len + GCM_TAG_LEN].copy_from_slice(tag.as_ref());
            buf[len + GCM_TAG_LEN..out_len].copy_from_slice(&trailer);
        }
    }
    Ok(out_len)
}

/// The SRTCP trailer of `buf[..len]`: (sender SSRC, E flag, SRTCP index, plaintext length).
pub(super) fn rtcp_trailer(
    gcm: bool,
    buf: &[u8],
    len: usize,
    overhead: usize,
) -> Result<(u32, bool, u32, usize), SrtpError> {
    let buf = buf.get(..len).ok_or(SrtpError::Malformed)?;
    if len < 8 + overhead {
        return Err(SrtpError::Malformed);
    }
    let plain_len = len - overhead;
    let ssrc = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
    let at = if gcm {
        len - SRTCP_INDEX_LEN
    } else {
        plain_len
    };
    let word = u32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
    Ok((
        ssrc,
        word & 0x8000_0000 != 0,
        word & MAX_SRTCP_INDEX,
        plain_len,
    ))
}

/// Authenticates and decrypts SRTCP in place, once the caller has checked the index against
/// its replay state. Returns the plaintext length.
pub(super) fn rtcp_open(
    t: &Transform,
    buf: &mut [u8],
    len: usize,
    overhead: usize,
) -> Result<usize, SrtpError> {
    let gcm = matches!(t, Transform::Gcm { .. });
    let (ssrc, encrypted, index, plain_len) = rtcp_trailer(gcm, buf, len, overhead)?;
    let buf = &mut buf[..len];
    let trailer = (u32::from(encrypted) << 31 | index).to_be_bytes();
    match t {
        Transform::Cm(cm) => {
            let (msg, tag) = buf.split_at_mut(plain_len + SRTCP_INDEX_LEN);
            hmac_verify(&cm.auth, &[&*msg], tag)?;
            if encrypted {
                aes_ctr(
                    &cm.enc,
                    cm_iv(&cm.salt, ssrc, u64::from(index)),
                    &mut msg[8..plain_len],
                )?;
            }
        }
        Transform::Gcm { key, salt } => {
            let trailer_at = len - SRTCP_INDEX_LEN;
            let nonce = gcm_iv(salt, ssrc, rtcp_gcm_tail(index));
            if encrypted {
                let mut aad = [0u8; 8 + SRTCP_INDEX_LEN];
                aad[..8].copy_from_slice(&buf[..8]);
                aad[8..].copy_from_slice(&trailer);
                key.open_in_place(nonce, Aad::from(aad), &mut buf[8..trailer_at])
                    .map_err(|_| SrtpError::AuthFailed)?;
            } else {
                // Authentication only: AAD = packet || E+index, empty ciphertext. Move
                // the index word next to the packet so the AAD is contiguous.
                let mut tag = [0u8; GCM_TAG_LEN];
                tag.copy_from_slice(&buf[plain_len..trailer_at]);
                buf[plain_len..plain_len + SRTCP_INDEX_LEN].copy_from_slice(&trailer);
                key.open_in_place(
                    nonce,
                    Aad::from(&buf[..plain_len + SRTCP_INDEX_LEN]),
                    &mut tag,
                )
                .map_err(|_| SrtpError::AuthFailed)?;
            }
        }
    }
    Ok(plain_len)
}

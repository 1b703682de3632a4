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

use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use aws_lc_rs::cipher::{AES_128, AES_256, EncryptingKey, EncryptionContext, UnboundCipherKey};
use aws_lc_rs::constant_time::verify_slices_are_equal;
use aws_lc_rs::hmac;
use aws_lc_rs::iv::FixedLength;

use crate::rtp;

/// Largest master key of any supported profile (AES-256).
const MAX_KEY_LEN: usize = 32;
/// Largest master salt of any supported profile (AES-CM, 112 bits).
const MAX_SALT_LEN: usize = 14;
/// Length of the SRTCP trailer word holding the E flag and the SRTCP index.
const SRTCP_INDEX_LEN: usize = 4;
/// Truncated HMAC-SHA1 tag length of the `_80` profile.
const HMAC_TAG_LEN: usize = 10;
/// HMAC-SHA1 key length (RFC 3711 §8.2, n_a = 160 bits).
const HMAC_KEY_LEN: usize = 20;
/// AES-GCM tag length (RFC 7714 §7: 16 octets).
const GCM_TAG_LEN: usize = 16;
/// Highest SRTCP index (31 bits).
const MAX_SRTCP_INDEX: u32 = 0x7fff_ffff;
/// Largest SRTP packet index (48 bits).
const MAX_SRTP_INDEX: u64 = (1 << 48) - 1;
/// Replay window size in packets (RFC 3711 §3.3.2 requires at least 64).
const REPLAY_WINDOW: u64 = 64;

/// Number of SSRCs whose receive state (rollover estimate, replay window) a cipher keeps; the
/// least recently used one is forgotten when a new SSRC authenticates.
pub const MAX_STREAMS: usize = 8;

/// SRTP key derivation labels (RFC 3711 §4.3.1, §4.3.2).
const LABEL_RTP_ENCRYPTION: u8 = 0;
const LABEL_RTP_AUTH: u8 = 1;
const LABEL_RTP_SALT: u8 = 2;
const LABEL_RTCP_ENCRYPTION: u8 = 3;
const LABEL_RTCP_AUTH: u8 = 4;
const LABEL_RTCP_SALT: u8 = 5;

/// Errors from SRTP/SRTCP processing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SrtpError {
    /// The buffer has no room for the authentication tag (and SRTCP index).
    #[error("buffer too small for SRTP overhead")]
    BufferTooSmall,
    /// The authentication tag does not match.
    #[error("SRTP authentication failed")]
    AuthFailed,
    /// The packet index was already received or is older than the replay window.
    #[error("SRTP replayed or too old packet")]
    Replay,
    /// The packet is too short, its header is invalid, or `len` / `header_len` are
    /// inconsistent with the buffer.
    #[error("malformed SRTP packet")]
    Malformed,
    /// Keying material or key lengths do not match the profile.
    #[error("keying material does not match the SRTP profile")]
    BadKeyingMaterial,
    /// The SRTCP index space (2^31 packets) is used up; the session must be rekeyed.
    #[error("SRTCP index exhausted")]
    IndexExhausted,
    /// The crypto library reported an unexpected failure.
    #[error("crypto library failure")]
    Crypto,
}

/// An SRTP protection profile (RFC 5764 §4.1.2, RFC 7714 §14.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SrtpProfile {
    /// `SRTP_AES128_CM_HMAC_SHA1_80` (0x0001).
    Aes128CmHmacSha1_80,
    /// `SRTP_AEAD_AES_128_GCM` (0x0007).
    AeadAes128Gcm,
    /// `SRTP_AEAD_AES_256_GCM` (0x0008).
    AeadAes256Gcm,
}

impl SrtpProfile {
    /// Master key length in bytes.
    pub const fn key_len(self) -> usize {
        match self {
            Self::Aes128CmHmacSha1_80 | Self::AeadAes128Gcm => 16,
            Self::AeadAes256Gcm => 32,
        }
    }

    /// Master salt length in bytes: 14 for AES-CM, 12 for GCM.
    pub const fn salt_len(self) -> usize {
        match self {
            Self::Aes128CmHmacSha1_80 => 14,
            Self::AeadAes128Gcm | Self::AeadAes256Gcm => 12,
        }
    }

    /// Bytes SRTP adds to an RTP packet (the authentication tag).
    pub const fn rtp_overhead(self) -> usize {
        match self {
            Self::Aes128CmHmacSha1_80 => HMAC_TAG_LEN,
            Self::AeadAes128Gcm | Self::AeadAes256Gcm => GCM_TAG_LEN,
        }
    }

    /// Bytes SRTCP adds to an RTCP packet (tag plus the E flag / SRTCP index word).
    pub const fn rtcp_overhead(self) -> usize {
        self.rtp_overhead() + SRTCP_INDEX_LEN
    }

    /// Length of the DTLS-SRTP exporter output for this profile (RFC 5764 §4.2):
    /// two keys and two salts.
    pub const fn keying_material_len(self) -> usize {
        2 * (self.key_len() + self.salt_len())
    }

    /// The profile's identifier in the DTLS `use_srtp` extension.
    pub const fn dtls_id(self) -> u16 {
        match self {
            Self::Aes128CmHmacSha1_80 => 0x0001,
            Self::AeadAes128Gcm => 0x0007,
            Self::AeadAes256Gcm => 0x0008,
        }
    }

    /// The profile with the given DTLS `use_srtp` identifier, if supported.
    pub const fn from_dtls_id(id: u16) -> Option<Self> {
        match id {
            0x0001 => Some(Self::Aes128CmHmacSha1_80),
            0x0007 => Some(Self::AeadAes128Gcm),
            0x0008 => Some(Self::AeadAes256Gcm),
            _ => None,
        }
    }

    const fn is_gcm(self) -> bool {
        !matches!(self, Self::Aes128CmHmacSha1_80)
    }
}

/// A master key and master salt for one direction. Zeroed on drop; `Debug` does not print
/// the key material.
#[derive(Clone)]
pub struct SrtpKeys {
    key: [u8; MAX_KEY_LEN],
    salt: [u8; MAX_SALT_LEN],
    key_len: usize,
    salt_len: usize,
}

impl SrtpKeys {
    /// Keys from a master key and master salt (lengths are checked against the profile in
    /// [`RtpCipher::new`] / [`RtcpCipher::new`]).
    ///
    /// # Errors
    /// [`SrtpError::BadKeyingMaterial`] if the key is longer than 32 bytes or the salt longer
    /// than 14.
    pub fn new(key: &[u8], salt: &[u8]) -> Result<Self, SrtpError> {
        if key.len() > MAX_KEY_LEN || salt.len() > MAX_SALT_LEN {
            return Err(SrtpError::BadKeyingMaterial);
        }
        let mut k = Self {
            key: [0; MAX_KEY_LEN],
            salt: [0; MAX_SALT_LEN],
            key_len: key.len(),
            salt_len: salt.len(),
        };
        k.key[..key.len()].copy_from_slice(key);
        k.salt[..salt.len()].copy_from_slice(salt);
        Ok(k)
    }

    /// The master key.
    pub fn key(&self) -> &[u8] {
        &self.key[..self.key_len]
    }

    /// The master salt.
    pub fn salt(&self) -> &[u8] {
        &self.salt[..self.salt_len]
    }

    fn check(&self, profile: SrtpProfile) -> Result<(), SrtpError> {
        if self.key_len == profile.key_len() && self.salt_len == profile.salt_len() {
            Ok(())
        } else {
            Err(SrtpError::BadKeyingMaterial)
        }
    }
}

impl std::fmt::Debug for SrtpKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SrtpKeys")
            .field("key_len", &self.key_len)
            .field("salt_len", &self.salt_len)
            .finish_non_exhaustive()
    }
}

impl Drop for SrtpKeys {
    fn drop(&mut self) {
        self.key.fill(0);
        self.salt.fill(0);
        std::hint::black_box(&mut *self);
    }
}

/// Splits DTLS-SRTP exporter output (RFC 5764 §4.2:
/// `client_key | server_key | client_salt | server_salt`) into (client, server) keys.
///
/// The client (DTLS client role) protects with the client keys; the server with the server
/// keys. Each side unprotects with the other side's keys.
///
/// # Errors
/// [`SrtpError::BadKeyingMaterial`] if `km` is not [`SrtpProfile::keying_material_len`]
/// bytes long.
pub fn split_keying_material(
    profile: SrtpProfile,
    km: &[u8],
) -> Result<(SrtpKeys, SrtpKeys), SrtpError> {
    if km.len() != profile.keying_material_len() {
        return Err(SrtpError::BadKeyingMaterial);
    }
    let (kl, sl) = (profile.key_len(), profile.salt_len());
    let (client_key, rest) = km.split_at(kl);
    let (server_key, rest) = rest.split_at(kl);
    let (client_salt, server_salt) = rest.split_at(sl);
    Ok((
        SrtpKeys::new(client_key, client_salt)?,
        SrtpKeys::new(server_key, server_salt)?,
    ))
}

/// Runs AES-CTR over `data` in place with the 16-byte initial counter block `iv`.
fn aes_ctr(key: &EncryptingKey, iv: [u8; 16], data: &mut [u8]) -> Result<(), SrtpError> {
    if data.is_empty() {
        return Ok(());
    }
    key.less_safe_encrypt(data, EncryptionContext::Iv128(FixedLength::from(iv)))
        .map(|_| ())
        .map_err(|_| SrtpError::Crypto)
}

fn ctr_key(key: &[u8]) -> Result<EncryptingKey, SrtpError> {
    let alg = match key.len() {
        16 => &AES_128,
        32 => &AES_256,
        _ => return Err(SrtpError::BadKeyingMaterial),
    };
    let unbound = UnboundCipherKey::new(alg, key).map_err(|_| SrtpError::BadKeyingMaterial)?;
    EncryptingKey::ctr(unbound).map_err(|_| SrtpError::Crypto)
}

/// The RFC 3711 §4.3.3 AES-CM PRF with key derivation rate 0: `x = label << 48 XOR salt`,
/// output = AES-CM keystream starting at counter block `x * 2^16`.
///
/// A 12-byte (GCM) master salt is zero-extended on the right to 14 bytes, as libsrtp and the
/// common WebRTC stacks do for RFC 7714.
struct Kdf<'a> {
    master: EncryptingKey,
    salt: &'a [u8],
}

impl<'a> Kdf<'a> {
    fn new(keys: &'a SrtpKeys) -> Result<Self, SrtpError> {
        Ok(Self {
            master: ctr_key(keys.key())?,
            salt: keys.salt(),
        })
    }

    fn derive(&self, label: u8, out: &mut [u8]) -> Result<(), SrtpError> {
        let mut iv = [0u8; 16];
        iv[..self.salt.len()].copy_from_slice(self.salt);
        iv[7] ^= label;
        out.fill(0);
        aes_ctr(&self.master, iv, out)
    }
}

/// Session keys of one of SRTP or SRTCP (RFC 3711 §4.3), derived once from the master key.
///
/// 66 bytes, zeroed on drop. The SRTCP directions of a viewer keep only these and expand them
/// into a [`Transform`] per packet: RTCP is about one packet per second each way, while an
/// expanded AES-GCM context costs ~600 bytes of heap per direction for the whole session.
#[derive(Clone)]
struct SessionKeys {
    enc: [u8; MAX_KEY_LEN],
    auth: [u8; HMAC_KEY_LEN],
    salt: [u8; MAX_SALT_LEN],
}

impl SessionKeys {
    /// Derives session keys with the given (encryption, auth, salt) labels.
    fn derive(
        profile: SrtpProfile,
        keys: &SrtpKeys,
        labels: (u8, u8, u8),
    ) -> Result<Self, SrtpError> {
        keys.check(profile)?;
        let kdf = Kdf::new(keys)?;
        let mut k = Self {
            enc: [0; MAX_KEY_LEN],
            auth: [0; HMAC_KEY_LEN],
            salt: [0; MAX_SALT_LEN],
        };
        kdf.derive(labels.0, &mut k.enc[..profile.key_len()])?;
        if profile.is_gcm() {
            kdf.derive(labels.2, &mut k.salt[..12])?;
        } else {
            kdf.derive(labels.2, &mut k.salt)?;
            kdf.derive(labels.1, &mut k.auth)?;
        }
        Ok(k)
    }
}

impl Drop for SessionKeys {
    fn drop(&mut self) {
        self.enc.fill(0);
        self.auth.fill(0);
        self.salt.fill(0);
        std::hint::black_box(&mut *self);
    }
}

/// Expanded AES-CM/HMAC-SHA1 state. Boxed inside [`Transform`] so that the GCM variant, the
/// one browsers negotiate, stays a pointer and a salt.
struct CmState {
    enc: EncryptingKey,
    auth: hmac::Key,
    salt: [u8; 14],
}

/// Expanded session crypto state for one of SRTP or SRTCP.
enum Transform {
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
    fn new(profile: SrtpProfile, keys: &SrtpKeys, labels: (u8, u8, u8)) -> Result<Self, SrtpError> {
        Self::expand(profile, &SessionKeys::derive(profile, keys, labels)?)
    }

    /// Expands session keys into cipher contexts.
    fn expand(profile: SrtpProfile, k: &SessionKeys) -> Result<Self, SrtpError> {
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
    fn from_session(key: &[u8], auth: &[u8], salt: &[u8]) -> Self {
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
fn cm_iv(salt: &[u8; 14], ssrc: u32, index: u64) -> [u8; 16] {
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
fn gcm_iv(salt: &[u8; 12], ssrc: u32, tail: [u8; 6]) -> Nonce {
    let mut iv = [0u8; 12];
    iv[2..6].copy_from_slice(&ssrc.to_be_bytes());
    iv[6..12].copy_from_slice(&tail);
    for (b, s) in iv.iter_mut().zip(salt) {
        *b ^= s;
    }
    Nonce::assume_unique_for_key(iv)
}

fn rtp_gcm_tail(roc: u32, seq: u16) -> [u8; 6] {
    let mut t = [0u8; 6];
    t[..4].copy_from_slice(&roc.to_be_bytes());
    t[4..].copy_from_slice(&seq.to_be_bytes());
    t
}

fn rtcp_gcm_tail(index: u32) -> [u8; 6] {
    let mut t = [0u8; 6];
    t[2..].copy_from_slice(&(index & MAX_SRTCP_INDEX).to_be_bytes());
    t
}

/// Truncated HMAC-SHA1 over `parts`, written to `out` (10 bytes).
fn hmac_tag(key: &hmac::Key, parts: &[&[u8]], out: &mut [u8]) {
    let mut ctx = hmac::Context::with_key(key);
    for p in parts {
        ctx.update(p);
    }
    let tag = ctx.sign();
    out.copy_from_slice(&tag.as_ref()[..out.len()]);
}

fn hmac_verify(key: &hmac::Key, parts: &[&[u8]], tag: &[u8]) -> Result<(), SrtpError> {
    let mut expected = [0u8; HMAC_TAG_LEN];
    hmac_tag(key, parts, &mut expected);
    verify_slices_are_equal(&expected, tag).map_err(|_| SrtpError::AuthFailed)
}

/// A 64-packet sliding replay window over extended indices (RFC 3711 §3.3.2).
#[derive(Debug, Clone, Copy)]
struct ReplayWindow {
    /// Highest index received.
    highest: u64,
    /// Bit i set: index `highest - i` was received.
    bits: u64,
}

impl ReplayWindow {
    fn new(index: u64) -> Self {
        Self {
            highest: index,
            bits: 1,
        }
    }

    fn check(&self, index: u64) -> Result<(), SrtpError> {
        if index > self.highest {
            return Ok(());
        }
        let age = self.highest - index;
        if age >= REPLAY_WINDOW || self.bits & (1 << age) != 0 {
            return Err(SrtpError::Replay);
        }
        Ok(())
    }

    fn accept(&mut self, index: u64) {
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
struct Streams<const N: usize> {
    slots: [Option<(u32, u64, ReplayWindow)>; N],
    clock: u64,
}

impl<const N: usize> Streams<N> {
    fn new() -> Self {
        Self {
            slots: [None; N],
            clock: 0,
        }
    }

    fn get(&self, ssrc: u32) -> Option<ReplayWindow> {
        self.slots
            .iter()
            .flatten()
            .find(|(s, _, _)| *s == ssrc)
            .map(|&(_, _, w)| w)
    }

    /// Records that `index` authenticated for `ssrc`.
    fn accept(&mut self, ssrc: u32, index: u64) {
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
fn rtp_seal_check(
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
fn rtp_seal(
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
fn rtp_open(
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
fn rtcp_seal(
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
fn rtcp_trailer(
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
fn rtcp_open(
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

/// SRTP protection for RTP packets in both directions of one crypto context, with receive
/// state for up to [`MAX_STREAMS`] SSRCs. A sender that never receives uses the smaller
/// [`RtpSender`].
#[derive(Debug)]
pub struct RtpCipher {
    profile: SrtpProfile,
    t: Transform,
    streams: Streams<MAX_STREAMS>,
}

impl RtpCipher {
    /// Derives the SRTP session keys (labels 0, 1, 2) from `keys`.
    ///
    /// # Errors
    /// [`SrtpError::BadKeyingMaterial`] if the key or salt length does not match `profile`.
    pub fn new(profile: SrtpProfile, keys: &SrtpKeys) -> Result<Self, SrtpError> {
        Ok(Self {
            profile,
            t: Transform::new(
                profile,
                keys,
                (LABEL_RTP_ENCRYPTION, LABEL_RTP_AUTH, LABEL_RTP_SALT),
            )?,
            streams: Streams::new(),
        })
    }

    /// The profile this cipher was built for.
    pub fn profile(&self) -> SrtpProfile {
        self.profile
    }

    /// Bytes [`Self::protect`] appends.
    pub fn overhead(&self) -> usize {
        self.profile.rtp_overhead()
    }

    /// Encrypts the payload `buf[header_len..len]` in place and appends the tag, returning the
    /// protected length `len + overhead()`.
    ///
    /// `header_len` is the full RTP header length (CSRCs and extension included); the
    /// sequence number and SSRC are read from `buf`. `roc` is the rollover counter: the
    /// packet index is `roc << 16 | seq`.
    ///
    /// # Errors
    /// [`SrtpError::Malformed`] if `len > buf.len()` or `header_len` is not in `12..=len`;
    /// [`SrtpError::BufferTooSmall`] if `buf` lacks `overhead()` bytes after `len`.
    pub fn protect(
        &mut self,
        buf: &mut [u8],
        len: usize,
        header_len: usize,
        roc: u32,
    ) -> Result<usize, SrtpError> {
        rtp_seal(&self.t, buf, len, header_len, roc, self.overhead())
    }

    /// Authenticates and decrypts the SRTP packet `buf[..len]` in place, returning the
    /// plaintext RTP length (header + payload, tag removed).
    ///
    /// The rollover counter is estimated from the highest index seen on the packet's SSRC
    /// (RFC 3711 Appendix A; 0 for a new SSRC). Receive state is only updated once the
    /// packet authenticates. On error the contents of `buf` are unspecified.
    ///
    /// # Errors
    /// [`SrtpError::Malformed`] for an invalid header or a packet shorter than header + tag,
    /// [`SrtpError::Replay`] for a repeated or too old index, [`SrtpError::AuthFailed`] if
    /// the tag does not verify.
    pub fn unprotect(&mut self, buf: &mut [u8], len: usize) -> Result<usize, SrtpError> {
        let streams = &self.streams;
        let (n, ssrc, index) = rtp_open(&self.t, buf, len, self.overhead(), |s| streams.get(s))?;
        self.streams.accept(ssrc, index);
        Ok(n)
    }
}

/// Send-only SRTP: the expanded keys of one direction and nothing else (no receive or replay
/// state), for a media sender such as a viewer session.
///
/// With GCM it is one heap-allocated aws-lc AEAD context (key schedule and GHASH table) and a
/// salt. [`Self::protect_payload`] encrypts straight from the caller's payload into the
/// output buffer, so the payload is read once and never copied in the clear.
#[derive(Debug)]
pub struct RtpSender {
    profile: SrtpProfile,
    t: Transform,
}

impl RtpSender {
    /// Derives the SRTP session keys (labels 0, 1, 2) from `keys`.
    ///
    /// # Errors
    /// [`SrtpError::BadKeyingMaterial`] if the key or salt length does not match `profile`.
    pub fn new(profile: SrtpProfile, keys: &SrtpKeys) -> Result<Self, SrtpError> {
        Ok(Self {
            profile,
            t: Transform::new(
                profile,
                keys,
                (LABEL_RTP_ENCRYPTION, LABEL_RTP_AUTH, LABEL_RTP_SALT),
            )?,
        })
    }

    /// The profile this sender was built for.
    pub fn profile(&self) -> SrtpProfile {
        self.profile
    }

    /// Bytes a protect call appends.
    pub fn overhead(&self) -> usize {
        self.profile.rtp_overhead()
    }

    /// As [`RtpCipher::protect`]: encrypts `buf[header_len..len]` in place and appends the tag.
    ///
    /// # Errors
    /// As [`RtpCipher::protect`].
    pub fn protect(
        &self,
        buf: &mut [u8],
        len: usize,
        header_len: usize,
        roc: u32,
    ) -> Result<usize, SrtpError> {
        rtp_seal(&self.t, buf, len, header_len, roc, self.overhead())
    }

    /// Writes the SRTP packet for the RTP header already in `out[..header_len]` and the
    /// plaintext `payload`: the payload is encrypted into `out[header_len..]` and the tag
    /// appended. Returns the protected length `header_len + payload.len() + overhead()`.
    ///
    /// # Errors
    /// [`SrtpError::Malformed`] if `header_len < 12`; [`SrtpError::BufferTooSmall`] if `out`
    /// cannot hold the packet.
    pub fn protect_payload(
        &self,
        out: &mut [u8],
        header_len: usize,
        payload: &[u8],
        roc: u32,
    ) -> Result<usize, SrtpError> {
        let len = header_len + payload.len();
        let (seq, ssrc, out_len) = rtp_seal_check(out, len, header_len, self.overhead())?;
        match &self.t {
            Transform::Gcm { key, salt } => {
                let nonce = gcm_iv(salt, ssrc, rtp_gcm_tail(roc, seq));
                let (hdr, rest) = out.split_at_mut(header_len);
                let (ct, tag) = rest.split_at_mut(payload.len());
                key.seal_out_of_place_scatter(
                    nonce,
                    Aad::from(&*hdr),
                    payload,
                    ct,
                    &[],
                    &mut tag[..GCM_TAG_LEN],
                )
                .map_err(|_| SrtpError::Crypto)?;
                Ok(out_len)
            }
            Transform::Cm(_) => {
                out[header_len..len].copy_from_slice(payload);
                rtp_seal(&self.t, out, len, header_len, roc, self.overhead())
            }
        }
    }
}

/// SRTCP protection for RTCP packets in both directions of one crypto context, with receive
/// state for up to [`MAX_STREAMS`] SSRCs. A session that sends RTCP only now and then uses
/// the smaller [`RtcpSender`] and [`RtcpReceiver`].
#[derive(Debug)]
pub struct RtcpCipher {
    profile: SrtpProfile,
    t: Transform,
    /// SRTCP index of the next packet [`Self::protect`] sends.
    next_index: u32,
    streams: Streams<MAX_STREAMS>,
}

impl RtcpCipher {
    /// Derives the SRTCP session keys (labels 3, 4, 5) from `keys`.
    ///
    /// # Errors
    /// [`SrtpError::BadKeyingMaterial`] if the key or salt length does not match `profile`.
    pub fn new(profile: SrtpProfile, keys: &SrtpKeys) -> Result<Self, SrtpError> {
        Ok(Self {
            profile,
            t: Transform::new(
                profile,
                keys,
                (LABEL_RTCP_ENCRYPTION, LABEL_RTCP_AUTH, LABEL_RTCP_SALT),
            )?,
            next_index: 0,
            streams: Streams::new(),
        })
    }

    /// The profile this cipher was built for.
    pub fn profile(&self) -> SrtpProfile {
        self.profile
    }

    /// Bytes [`Self::protect`] appends (tag and index word).
    pub fn overhead(&self) -> usize {
        self.profile.rtcp_overhead()
    }

    /// Encrypts the compound RTCP packet `buf[..len]` in place (everything after the first
    /// 8 bytes), appends the E flag / SRTCP index word and the tag, and returns the protected
    /// length `len + overhead()`. Each call uses the next SRTCP index, starting at 0.
    ///
    /// Layout: AES-CM `packet | E+index | tag` (RFC 3711 §3.4); GCM
    /// `packet | tag | E+index` (RFC 7714 §9.1, the index word is authenticated as AAD).
    ///
    /// # Errors
    /// [`SrtpError::Malformed`] if `len > buf.len()` or `len < 8`;
    /// [`SrtpError::BufferTooSmall`] if `buf` lacks `overhead()` bytes after `len`;
    /// [`SrtpError::IndexExhausted`] after 2^31 packets.
    pub fn protect(&mut self, buf: &mut [u8], len: usize) -> Result<usize, SrtpError> {
        let n = rtcp_seal(&self.t, buf, len, self.next_index, self.overhead())?;
        self.next_index += 1;
        Ok(n)
    }

    /// Authenticates and decrypts the SRTCP packet `buf[..len]` in place, returning the
    /// plaintext RTCP length. Packets with the E flag clear are authenticated only.
    ///
    /// Replay is checked with a 64-packet window on the SRTCP index per sender SSRC; state
    /// is only updated once the packet authenticates. On error the contents of `buf` are
    /// unspecified.
    ///
    /// # Errors
    /// [`SrtpError::Malformed`] if the packet is shorter than 8 bytes plus overhead,
    /// [`SrtpError::Replay`] for a repeated or too old index, [`SrtpError::AuthFailed`] if
    /// the tag does not verify.
    pub fn unprotect(&mut self, buf: &mut [u8], len: usize) -> Result<usize, SrtpError> {
        let overhead = self.overhead();
        let (ssrc, _, index, _) = rtcp_trailer(self.profile.is_gcm(), buf, len, overhead)?;
        if let Some(w) = self.streams.get(ssrc) {
            w.check(u64::from(index))?;
        }
        let n = rtcp_open(&self.t, buf, len, overhead)?;
        self.streams.accept(ssrc, u64::from(index));
        Ok(n)
    }

    /// Sets the SRTCP index of the next protected packet (tests and vectors).
    #[cfg(test)]
    fn set_next_index(&mut self, index: u32) {
        self.next_index = index;
    }
}

/// Send-only SRTCP for a session that sends RTCP now and then (sender reports, ~1/s).
///
/// It keeps the 66 bytes of session keys, not an expanded cipher: each [`Self::protect`]
/// expands them (an AES key schedule and a GHASH table, about a microsecond, with one
/// short-lived heap block), which at one report per second costs far less than holding the
/// ~600-byte context for the whole session.
pub struct RtcpSender {
    profile: SrtpProfile,
    keys: SessionKeys,
    next_index: u32,
}

impl std::fmt::Debug for RtcpSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RtcpSender")
            .field("profile", &self.profile)
            .field("next_index", &self.next_index)
            .finish_non_exhaustive()
    }
}

impl RtcpSender {
    /// Derives the SRTCP session keys (labels 3, 4, 5) from `keys`.
    ///
    /// # Errors
    /// [`SrtpError::BadKeyingMaterial`] if the key or salt length does not match `profile`.
    pub fn new(profile: SrtpProfile, keys: &SrtpKeys) -> Result<Self, SrtpError> {
        Ok(Self {
            profile,
            keys: SessionKeys::derive(
                profile,
                keys,
                (LABEL_RTCP_ENCRYPTION, LABEL_RTCP_AUTH, LABEL_RTCP_SALT),
            )?,
            next_index: 0,
        })
    }

    /// Bytes [`Self::protect`] appends (tag and index word).
    pub fn overhead(&self) -> usize {
        self.profile.rtcp_overhead()
    }

    /// As [`RtcpCipher::protect`].
    ///
    /// # Errors
    /// As [`RtcpCipher::protect`], and [`SrtpError::Crypto`] if the cipher cannot be built.
    pub fn protect(&mut self, buf: &mut [u8], len: usize) -> Result<usize, SrtpError> {
        let t = Transform::expand(self.profile, &self.keys)?;
        let n = rtcp_seal(&t, buf, len, self.next_index, self.overhead())?;
        self.next_index += 1;
        Ok(n)
    }
}

/// Number of sender SSRCs whose SRTCP replay windows an [`RtcpReceiver`] keeps: a browser
/// sends its RTCP (receiver reports, NACK, PLI) from one SSRC per receiving track.
pub const RTCP_RECEIVER_STREAMS: usize = 2;

/// Receive-only SRTCP for a session that receives RTCP now and then (receiver reports and
/// feedback, ~1/s): session keys expanded per packet as in [`RtcpSender`], and replay windows
/// for [`RTCP_RECEIVER_STREAMS`] sender SSRCs (least recently used replaced; a replay from
/// an SSRC that was replaced is accepted once more, which for RTCP feedback is harmless).
pub struct RtcpReceiver {
    profile: SrtpProfile,
    keys: SessionKeys,
    streams: Streams<RTCP_RECEIVER_STREAMS>,
}

impl std::fmt::Debug for RtcpReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RtcpReceiver")
            .field("profile", &self.profile)
            .finish_non_exhaustive()
    }
}

impl RtcpReceiver {
    /// Derives the SRTCP session keys (labels 3, 4, 5) from `keys` (the peer's keys).
    ///
    /// # Errors
    /// [`SrtpError::BadKeyingMaterial`] if the key or salt length does not match `profile`.
    pub fn new(profile: SrtpProfile, keys: &SrtpKeys) -> Result<Self, SrtpError> {
        Ok(Self {
            profile,
            keys: SessionKeys::derive(
                profile,
                keys,
                (LABEL_RTCP_ENCRYPTION, LABEL_RTCP_AUTH, LABEL_RTCP_SALT),
            )?,
            streams: Streams::new(),
        })
    }

    /// As [`RtcpCipher::unprotect`]. The replay check runs before any key is expanded, so a
    /// replayed or malformed packet costs no crypto set-up.
    ///
    /// # Errors
    /// As [`RtcpCipher::unprotect`].
    pub fn unprotect(&mut self, buf: &mut [u8], len: usize) -> Result<usize, SrtpError> {
        let overhead = self.profile.rtcp_overhead();
        let (ssrc, _, index, _) = rtcp_trailer(self.profile.is_gcm(), buf, len, overhead)?;
        if let Some(w) = self.streams.get(ssrc) {
            w.check(u64::from(index))?;
        }
        let t = Transform::expand(self.profile, &self.keys)?;
        let n = rtcp_open(&t, buf, len, overhead)?;
        self.streams.accept(ssrc, u64::from(index));
        Ok(n)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    const PROFILES: [SrtpProfile; 3] = [
        SrtpProfile::Aes128CmHmacSha1_80,
        SrtpProfile::AeadAes128Gcm,
        SrtpProfile::AeadAes256Gcm,
    ];

    fn keys(profile: SrtpProfile, seed: u8) -> SrtpKeys {
        let key: Vec<u8> = (0..profile.key_len() as u8).map(|i| i ^ seed).collect();
        let salt: Vec<u8> = (0..profile.salt_len() as u8)
            .map(|i| i.wrapping_mul(7) ^ seed)
            .collect();
        SrtpKeys::new(&key, &salt).unwrap()
    }

    fn rtp_packet(seq: u16, payload: usize) -> Vec<u8> {
        let mut p = vec![0x80, 96];
        p.extend_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(&1234u32.to_be_bytes());
        p.extend_from_slice(&0xcafe_babeu32.to_be_bytes());
        p.extend((0..payload).map(|i| i as u8));
        p
    }

    #[test]
    fn profile_constants() {
        use SrtpProfile::*;
        assert_eq!(
            (
                Aes128CmHmacSha1_80.rtp_overhead(),
                Aes128CmHmacSha1_80.rtcp_overhead()
            ),
            (10, 14)
        );
        assert_eq!(
            (AeadAes128Gcm.rtp_overhead(), AeadAes128Gcm.rtcp_overhead()),
            (16, 20)
        );
        assert_eq!(AeadAes256Gcm.key_len(), 32);
        assert_eq!(AeadAes256Gcm.salt_len(), 12);
        assert_eq!(Aes128CmHmacSha1_80.keying_material_len(), 60);
        assert_eq!(AeadAes128Gcm.keying_material_len(), 56);
        for p in PROFILES {
            assert_eq!(SrtpProfile::from_dtls_id(p.dtls_id()), Some(p));
        }
        assert_eq!(SrtpProfile::from_dtls_id(2), None);
    }

    #[test]
    fn split_keying_material_layout() {
        let km: Vec<u8> = (0..60).collect();
        let (c, s) = split_keying_material(SrtpProfile::Aes128CmHmacSha1_80, &km).unwrap();
        assert_eq!(c.key(), &km[0..16]);
        assert_eq!(s.key(), &km[16..32]);
        assert_eq!(c.salt(), &km[32..46]);
        assert_eq!(s.salt(), &km[46..60]);
        let km: Vec<u8> = (0..88).collect();
        let (c, s) = split_keying_material(SrtpProfile::AeadAes256Gcm, &km).unwrap();
        assert_eq!(c.key(), &km[0..32]);
        assert_eq!(s.key(), &km[32..64]);
        assert_eq!(c.salt(), &km[64..76]);
        assert_eq!(s.salt(), &km[76..88]);
        assert_eq!(
            split_keying_material(SrtpProfile::AeadAes128Gcm, &km).unwrap_err(),
            SrtpError::BadKeyingMaterial
        );
        assert!(!format!("{c:?}").contains("20"));
        // Keys of the wrong profile are rejected.
        assert_eq!(
            RtpCipher::new(SrtpProfile::AeadAes128Gcm, &c).unwrap_err(),
            SrtpError::BadKeyingMaterial
        );
    }

    /// RFC 3711 Appendix B.3 (AES-128) and RFC 6188 §7.2 (AES-256) key derivation.
    #[test]
    fn kdf_vectors() {
        let keys = SrtpKeys::new(
            &hex("E1F97A0D3E018BE0D64FA32C06DE4139"),
            &hex("0EC675AD498AFEEBB6960B3AABE6"),
        )
        .unwrap();
        let kdf = Kdf::new(&keys).unwrap();
        let mut k = [0u8; 16];
        kdf.derive(0, &mut k).unwrap();
        assert_eq!(k.to_vec(), hex("C61E7A93744F39EE10734AFE3FF7A087"));
        let mut s = [0u8; 14];
        kdf.derive(2, &mut s).unwrap();
        assert_eq!(s.to_vec(), hex("30CBBC08863D8C85D49DB34A9AE1"));
        let mut a = [0u8; 20];
        kdf.derive(1, &mut a).unwrap();
        assert_eq!(a.to_vec(), hex("CEBE321F6FF7716B6FD4AB49AF256A156D38BAA4"));

        let keys = SrtpKeys::new(
            &hex("f0f04914b513f2763a1b1fa130f10e2998f6f6e43e4309d1e622a0e332b9f1b6"),
            &hex("3b04803de51ee7c96423ab5b78d2"),
        )
        .unwrap();
        let kdf = Kdf::new(&keys).unwrap();
        let mut k = [0u8; 32];
        kdf.derive(0, &mut k).unwrap();
        assert_eq!(
            k.to_vec(),
            hex("5ba1064e30ec51613cad926c5a28ef731ec7fb397f70a960653caf06554cd8c4")
        );
        let mut s = [0u8; 14];
        kdf.derive(2, &mut s).unwrap();
        assert_eq!(s.to_vec(), hex("fa31791685ca444a9e07c6c64e93"));
        let mut a = [0u8; 20];
        kdf.derive(1, &mut a).unwrap();
        assert_eq!(a.to_vec(), hex("fd9c32d39ed5fbb5a9dc96b30818454d1313dc05"));
    }

    /// RFC 3711 Appendix B.2: AES-CM keystream for SSRC 0, index 0.
    #[test]
    fn aes_cm_keystream_vector() {
        let key = ctr_key(&hex("2B7E151628AED2A6ABF7158809CF4F3C")).unwrap();
        let mut salt = [0u8; 14];
        salt.copy_from_slice(&hex("F0F1F2F3F4F5F6F7F8F9FAFBFCFD"));
        let mut ks = [0u8; 48];
        aes_ctr(&key, cm_iv(&salt, 0, 0), &mut ks).unwrap();
        assert_eq!(
            ks.to_vec(),
            hex(
                "E03EAD0935C95E80E166B16DD92B4EB4 D23513162B02D0F72A43A2FE4A5F97AB
                 41E95B3BB0A2E8DD477901E4FCA894C0"
            )
        );
    }

    fn gcm_vector_cipher() -> Transform {
        Transform::from_session(
            &hex("000102030405060708090a0b0c0d0e0f"),
            &[],
            &hex("517569642070726f2071756f"),
        )
    }

    const RFC7714_RTP: &str = "8040f17b 8041f8d3 5501a0b2 47616c6c 69612065 7374206f
        6d6e6973 20646976 69736120 696e2070 61727465 73207472 6573";
    const RFC7714_SRTP: &str = "8040f17b 8041f8d3 5501a0b2 f24de3a3 fb34de6c acba861c
        9d7e4bca be633bd5 0d294e6f 42a5f47a 51c7d19b 36de3adf 8833899d 7f27beb1 6a9152cf
        765ee439 0cce";

    /// RFC 7714 §16.1: AEAD_AES_128_GCM SRTP encryption and decryption.
    #[test]
    fn gcm_rtp_vector() {
        let mut c = RtpCipher {
            profile: SrtpProfile::AeadAes128Gcm,
            t: gcm_vector_cipher(),
            streams: Streams::new(),
        };
        let plain = hex(RFC7714_RTP);
        let mut buf = plain.clone();
        buf.resize(plain.len() + 16, 0);
        let n = c.protect(&mut buf, plain.len(), 12, 0).unwrap();
        assert_eq!(buf[..n].to_vec(), hex(RFC7714_SRTP));
        let n = c.unprotect(&mut buf, n).unwrap();
        assert_eq!(buf[..n].to_vec(), plain);
    }

    const RFC7714_RTCP: &str = "81c8000d 4d617273 4e545031 4e545032 52545020 0000042a
        0000e930 4c756e61 deadbeef deadbeef deadbeef deadbeef deadbeef";
    const RFC7714_SRTCP: &str = "81c8000d 4d617273 63e94885 dcdab67c a727d766 2f6b7e99
        7ff5c0f7 6c06f32d c676a5f1 730d6fda 4ce09b46 86303ded 0bb9275b c84aa458 96cf4d2f
        c5abf872 45d9eade 800005d4";

    /// RFC 7714 §17.1: AEAD_AES_128_GCM SRTCP with index 0x5d4.
    #[test]
    fn gcm_rtcp_vector() {
        let mut c = RtcpCipher {
            profile: SrtpProfile::AeadAes128Gcm,
            t: gcm_vector_cipher(),
            next_index: 0,
            streams: Streams::new(),
        };
        c.set_next_index(0x5d4);
        let plain = hex(RFC7714_RTCP);
        let mut buf = plain.clone();
        buf.resize(plain.len() + 20, 0);
        let n = c.protect(&mut buf, plain.len()).unwrap();
        assert_eq!(buf[..n].to_vec(), hex(RFC7714_SRTCP));
        let n = c.unprotect(&mut buf, n).unwrap();
        assert_eq!(buf[..n].to_vec(), plain);
        // Altering the index word breaks authentication.
        let mut wire = hex(RFC7714_SRTCP);
        let l = wire.len();
        wire[l - 1] ^= 1;
        let mut c2 = RtcpCipher {
            profile: SrtpProfile::AeadAes128Gcm,
            t: gcm_vector_cipher(),
            next_index: 0,
            streams: Streams::new(),
        };
        assert_eq!(c2.unprotect(&mut wire, l), Err(SrtpError::AuthFailed));
    }

    /// libsrtp `srtp_driver` reference packets: SSRC 0xcafebabe, seq 0x1234, 16 bytes of
    /// 0xab, SRTCP index 1 (libsrtp's first).
    fn libsrtp_reference(profile: SrtpProfile, key: &str, salt: &str, srtp: &str, srtcp: &str) {
        let keys = SrtpKeys::new(&hex(key), &hex(salt)).unwrap();
        let mut tx = RtpCipher::new(profile, &keys).unwrap();
        let mut rx = RtpCipher::new(profile, &keys).unwrap();
        let plain = hex("800f1234decafbadcafebabe abababababababababababababababab");
        let mut buf = plain.clone();
        buf.resize(plain.len() + tx.overhead(), 0);
        let n = tx.protect(&mut buf, plain.len(), 12, 0).unwrap();
        assert_eq!(buf[..n].to_vec(), hex(srtp), "{profile:?} SRTP");
        let m = rx.unprotect(&mut buf, n).unwrap();
        assert_eq!(buf[..m].to_vec(), plain);

        let mut tx = RtcpCipher::new(profile, &keys).unwrap();
        let mut rx = RtcpCipher::new(profile, &keys).unwrap();
        tx.set_next_index(1);
        let plain = hex("81c8000bcafebabe abababababababababababababababab");
        let mut buf = plain.clone();
        buf.resize(plain.len() + tx.overhead(), 0);
        let n = tx.protect(&mut buf, plain.len()).unwrap();
        assert_eq!(buf[..n].to_vec(), hex(srtcp), "{profile:?} SRTCP");
        let m = rx.unprotect(&mut buf, n).unwrap();
        assert_eq!(buf[..m].to_vec(), plain);
    }

    #[test]
    fn libsrtp_reference_aes_cm() {
        libsrtp_reference(
            SrtpProfile::Aes128CmHmacSha1_80,
            "e1f97a0d3e018be0d64fa32c06de4139",
            "0ec675ad498afeebb6960b3aabe6",
            "800f1234decafbadcafebabe 4e55dc4ce79978d88ca4d215949d2402 b78d6acc99ea179b8dbb",
            "81c8000bcafebabe 7128035be487b9bdbef89041f977a5a8 80000001 993e08cd54d6c1230798",
        );
    }

    /// Also checks the KDF with a 12-byte GCM master salt against libsrtp.
    #[test]
    fn libsrtp_reference_aes_128_gcm() {
        libsrtp_reference(
            SrtpProfile::AeadAes128Gcm,
            "000102030405060708090a0b0c0d0e0f",
            "a0a1a2a3a4a5a6a7a8a9aaab",
            "800f1234decafbadcafebabe c5002ede04cfdd2eb91159e0880aa06e
             d2976826f796b201df3131a127e8a392",
            "81c8000bcafebabe c98b8b5df0392a55852b6c21ac8e7025
             c52c6fbea2b3b446ea31123ba88ce61e 80000001",
        );
    }

    /// AEAD_AES_256_GCM with the libsrtp reference packet layout (master key 00..1f, salt
    /// a0..ab), as published by an independent implementation; exercises the AES-256 PRF.
    #[test]
    fn reference_aes_256_gcm_rtp() {
        let keys = SrtpKeys::new(
            &hex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"),
            &hex("a0a1a2a3a4a5a6a7a8a9aaab"),
        )
        .unwrap();
        let mut tx = RtpCipher::new(SrtpProfile::AeadAes256Gcm, &keys).unwrap();
        let plain = hex("800f1234decafbadcafebabe abababababababababababababababab");
        let mut buf = plain.clone();
        buf.resize(plain.len() + 16, 0);
        let n = tx.protect(&mut buf, plain.len(), 12, 0).unwrap();
        assert_eq!(
            buf[..n].to_vec(),
            hex("800f1234decafbadcafebabe 0af7f21e8a90bdad7a425c9c31ed4bb1
                 d90238917e7390a2793500e1681acaea")
        );
    }

    #[test]
    fn rtp_round_trip_all_profiles() {
        for p in PROFILES {
            let k = keys(p, 3);
            let mut tx = RtpCipher::new(p, &k).unwrap();
            let mut rx = RtpCipher::new(p, &k).unwrap();
            for (seq, size) in [(1u16, 0usize), (2, 1), (3, 100), (4, 1200)] {
                let plain = rtp_packet(seq, size);
                let mut buf = plain.clone();
                buf.resize(plain.len() + tx.overhead(), 0);
                let n = tx.protect(&mut buf, plain.len(), 12, 0).unwrap();
                assert_eq!(n, plain.len() + p.rtp_overhead());
                if size > 16 {
                    assert_ne!(buf[12..plain.len()], plain[12..], "{p:?} not encrypted");
                }
                let m = rx.unprotect(&mut buf, n).unwrap();
                assert_eq!(buf[..m], plain[..], "{p:?}");
            }
            // With an extension header: the extension stays in the clear.
            let mut plain = vec![0x90, 96, 0, 9, 0, 0, 0, 1, 0xca, 0xfe, 0xba, 0xbe];
            plain.extend_from_slice(&[0xbe, 0xde, 0, 1, 0x10, 0xaa, 0, 0, 1, 2, 3]);
            let mut buf = plain.clone();
            buf.resize(plain.len() + tx.overhead(), 0);
            let n = tx.protect(&mut buf, plain.len(), 20, 0).unwrap();
            assert_eq!(buf[..20], plain[..20]);
            let m = rx.unprotect(&mut buf, n).unwrap();
            assert_eq!(buf[..m], plain[..]);
        }
    }

    #[test]
    fn rtcp_round_trip_all_profiles() {
        for p in PROFILES {
            let k = keys(p, 9);
            let mut tx = RtcpCipher::new(p, &k).unwrap();
            let mut rx = RtcpCipher::new(p, &k).unwrap();
            let mut plain = [0u8; 64];
            let len =
                crate::rtcp::write_rr(&mut plain, 0x0bad_cafe, &[Default::default()]).unwrap();
            let len =
                len + crate::rtcp::write_sdes_cname(&mut plain[len..], 0x0bad_cafe, "x").unwrap();
            for i in 0..3u32 {
                let mut buf = [0u8; 128];
                buf[..len].copy_from_slice(&plain[..len]);
                let n = tx.protect(&mut buf, len).unwrap();
                assert_eq!(n, len + p.rtcp_overhead());
                let idx_at = if p.is_gcm() { n - 4 } else { n - 14 };
                assert_eq!(buf[idx_at..idx_at + 4], (0x8000_0000 | i).to_be_bytes());
                assert_ne!(buf[8..len], plain[8..len]);
                let m = rx.unprotect(&mut buf, n).unwrap();
                assert_eq!(buf[..m], plain[..len], "{p:?}");
            }
        }
    }

    /// The send-only and receive-only types interoperate with the two-way ciphers, and
    /// `protect_payload` (out of place) gives the same bytes as `protect` (in place).
    #[test]
    fn sender_and_receiver_types_interoperate() {
        for p in PROFILES {
            let k = keys(p, 5);
            let tx = RtpSender::new(p, &k).unwrap();
            let mut rx = RtpCipher::new(p, &k).unwrap();
            for (seq, size) in [(7u16, 0usize), (8, 17), (9, 1188)] {
                let plain = rtp_packet(seq, size);
                let mut a = plain.clone();
                a.resize(plain.len() + tx.overhead(), 0);
                let n = tx.protect(&mut a, plain.len(), 12, 3).unwrap();
                let mut b = vec![0u8; 1500];
                b[..12].copy_from_slice(&plain[..12]);
                let m = tx.protect_payload(&mut b, 12, &plain[12..], 3).unwrap();
                assert_eq!(a[..n], b[..m], "{p:?}");
                // A receiver expects ROC 0 for a new SSRC: decrypt a ROC-0 copy.
                let m = tx.protect_payload(&mut b, 12, &plain[12..], 0).unwrap();
                let d = rx.unprotect(&mut b, m).unwrap();
                assert_eq!(b[..d], plain[..], "{p:?}");
            }
            let mut small = [0u8; 20];
            assert_eq!(
                tx.protect_payload(&mut small, 12, &[0; 8], 0).unwrap_err(),
                SrtpError::BufferTooSmall
            );

            let mut rtcp_tx = RtcpSender::new(p, &k).unwrap();
            let mut rtcp_rx = RtcpReceiver::new(p, &k).unwrap();
            let mut two_way = RtcpCipher::new(p, &k).unwrap();
            let mut plain = [0u8; 64];
            let len =
                crate::rtcp::write_rr(&mut plain, 0x0bad_cafe, &[Default::default()]).unwrap();
            for _ in 0..3 {
                let mut buf = [0u8; 128];
                buf[..len].copy_from_slice(&plain[..len]);
                let n = rtcp_tx.protect(&mut buf, len).unwrap();
                let mut copy = buf;
                assert_eq!(two_way.unprotect(&mut copy, n).unwrap(), len);
                assert_eq!(copy[..len], plain[..len]);
                assert_eq!(rtcp_rx.unprotect(&mut buf, n).unwrap(), len);
                assert_eq!(buf[..len], plain[..len]);
            }
            // Replay is rejected, tampering fails, and a two-way cipher's output is accepted.
            let mut buf = [0u8; 128];
            buf[..len].copy_from_slice(&plain[..len]);
            two_way.set_next_index(10);
            let n = two_way.protect(&mut buf, len).unwrap();
            let copy = buf;
            assert_eq!(rtcp_rx.unprotect(&mut buf, n).unwrap(), len);
            let mut again = copy;
            assert_eq!(
                rtcp_rx.unprotect(&mut again, n).unwrap_err(),
                SrtpError::Replay
            );
            let mut bad = copy;
            bad[3] ^= 1;
            assert!(rtcp_rx.unprotect(&mut bad, n).is_err());
        }
    }

    /// Builds an SRTCP packet with the E flag clear by hand and checks it authenticates.
    #[test]
    fn rtcp_unencrypted_accepted() {
        for p in PROFILES {
            let k = keys(p, 1);
            let tx = RtcpCipher::new(p, &k).unwrap();
            let mut rx = RtcpCipher::new(p, &k).unwrap();
            let mut buf = [0u8; 64];
            let len = crate::rtcp::write_bye(&mut buf, 77).unwrap();
            let trailer = 5u32.to_be_bytes();
            let n = len + p.rtcp_overhead();
            match &tx.t {
                Transform::Cm(cm) => {
                    buf[len..len + 4].copy_from_slice(&trailer);
                    let (msg, tag) = buf.split_at_mut(len + 4);
                    hmac_tag(&cm.auth, &[&*msg], &mut tag[..10]);
                }
                Transform::Gcm { key, salt } => {
                    let mut aad = buf[..len].to_vec();
                    aad.extend_from_slice(&trailer);
                    let tag = key
                        .seal_in_place_separate_tag(
                            gcm_iv(salt, 77, rtcp_gcm_tail(5)),
                            Aad::from(&aad),
                            &mut [],
                        )
                        .unwrap();
                    buf[len..len + 16].copy_from_slice(tag.as_ref());
                    buf[len + 16..len + 20].copy_from_slice(&trailer);
                }
            }
            assert_eq!(rx.unprotect(&mut buf, n), Ok(len), "{p:?}");
            assert_eq!(buf[..8], [0x81, 203, 0, 1, 0, 0, 0, 77]);
        }
    }

    #[test]
    fn tampering_fails_auth() {
        for p in PROFILES {
            let k = keys(p, 5);
            let mut tx = RtpCipher::new(p, &k).unwrap();
            let plain = rtp_packet(10, 50);
            let mut wire = plain.clone();
            wire.resize(plain.len() + tx.overhead(), 0);
            let n = tx.protect(&mut wire, plain.len(), 12, 0).unwrap();
            for at in [1, 5, 12, 30, n - 1] {
                let mut rx = RtpCipher::new(p, &k).unwrap();
                let mut b = wire.clone();
                b[at] ^= 0x40;
                assert_eq!(
                    rx.unprotect(&mut b, n),
                    Err(SrtpError::AuthFailed),
                    "{p:?} {at}"
                );
                // The failed packet left no state: the genuine one still goes through.
                let mut b = wire.clone();
                assert!(rx.unprotect(&mut b, n).is_ok());
            }
            // Wrong keys.
            let mut rx = RtpCipher::new(p, &keys(p, 6)).unwrap();
            let mut b = wire.clone();
            assert_eq!(rx.unprotect(&mut b, n), Err(SrtpError::AuthFailed));

            let mut tx = RtcpCipher::new(p, &k).unwrap();
            let mut rx = RtcpCipher::new(p, &k).unwrap();
            let mut buf = [0u8; 64];
            let len = crate::rtcp::write_pli(&mut buf, 1, 2).unwrap();
            let n = tx.protect(&mut buf, len).unwrap();
            for at in [0, 4, 9, n - 1, n - 5] {
                let mut b = buf;
                b[at] ^= 1;
                assert_eq!(
                    rx.unprotect(&mut b, n),
                    Err(SrtpError::AuthFailed),
                    "{p:?} {at}"
                );
            }
            assert_eq!(rx.unprotect(&mut buf, n), Ok(len));
        }
    }

    #[test]
    fn replay_rejected() {
        for p in PROFILES {
            let k = keys(p, 7);
            let mut tx = RtpCipher::new(p, &k).unwrap();
            let mut rx = RtpCipher::new(p, &k).unwrap();
            let mut wires = Vec::new();
            for seq in 0..100u16 {
                let plain = rtp_packet(seq, 20);
                let mut buf = plain.clone();
                buf.resize(plain.len() + tx.overhead(), 0);
                let n = tx.protect(&mut buf, plain.len(), 12, 0).unwrap();
                wires.push((buf, n));
            }
            // Deliver out of order: 0..50, then 99, then 60..99.
            for (b, n) in wires[..50].iter().chain(&wires[99..]).chain(&wires[60..99]) {
                let mut b = b.clone();
                rx.unprotect(&mut b, *n).unwrap();
            }
            // Duplicate inside the window.
            let (b, n) = &wires[70];
            assert_eq!(rx.unprotect(&mut b.clone(), *n), Err(SrtpError::Replay));
            // Late but new, inside the window (99 - 55 < 64).
            let (b, n) = &wires[55];
            assert!(rx.unprotect(&mut b.clone(), *n).is_ok());
            // Too old (99 - 20 >= 64).
            let (b, n) = &wires[20];
            assert_eq!(rx.unprotect(&mut b.clone(), *n), Err(SrtpError::Replay));

            let mut tx = RtcpCipher::new(p, &k).unwrap();
            let mut rx = RtcpCipher::new(p, &k).unwrap();
            let mut buf = [0u8; 64];
            let len = crate::rtcp::write_pli(&mut buf, 1, 2).unwrap();
            let n = tx.protect(&mut buf, len).unwrap();
            assert!(rx.unprotect(&mut buf.clone(), n).is_ok());
            assert_eq!(rx.unprotect(&mut buf.clone(), n), Err(SrtpError::Replay));
        }
    }

    #[test]
    fn roc_rollover() {
        for p in PROFILES {
            let k = keys(p, 11);
            let mut tx = RtpCipher::new(p, &k).unwrap();
            let mut rx = RtpCipher::new(p, &k).unwrap();
            let mut send = |ext: u64| {
                let plain = rtp_packet(ext as u16, 30);
                let mut buf = plain.clone();
                buf.resize(plain.len() + tx.overhead(), 0);
                let n = tx
                    .protect(&mut buf, plain.len(), 12, (ext >> 16) as u32)
                    .unwrap();
                (plain, buf, n)
            };
            let mut held = None;
            // `ext` is the extended sequence number the sender keeps.
            for ext in 65530u64..65542 {
                let (plain, mut buf, n) = send(ext);
                if ext == 65534 {
                    held = Some((plain, buf, n)); // reordered across the wrap
                } else {
                    let m = rx.unprotect(&mut buf, n).unwrap();
                    assert_eq!(buf[..m], plain[..], "{p:?} ext {ext}");
                }
            }
            let (plain, mut buf, n) = held.unwrap();
            let m = rx.unprotect(&mut buf, n).unwrap();
            assert_eq!(buf[..m], plain[..]);
            // A sender that forgot to bump the ROC fails authentication after the wrap.
            let plain = rtp_packet(20, 30);
            let mut buf = plain.clone();
            buf.resize(plain.len() + tx.overhead(), 0);
            let n = tx.protect(&mut buf, plain.len(), 12, 0).unwrap();
            assert_eq!(rx.unprotect(&mut buf, n), Err(SrtpError::AuthFailed));
        }
    }

    #[test]
    fn many_ssrcs_evict_oldest() {
        let p = SrtpProfile::AeadAes128Gcm;
        let k = keys(p, 2);
        let mut tx = RtpCipher::new(p, &k).unwrap();
        let mut rx = RtpCipher::new(p, &k).unwrap();
        let mut wire = |ssrc: u32, seq: u16| {
            let mut plain = rtp_packet(seq, 8);
            plain[8..12].copy_from_slice(&ssrc.to_be_bytes());
            let len = plain.len();
            plain.resize(len + 16, 0);
            let n = tx.protect(&mut plain, len, 12, 0).unwrap();
            (plain, n)
        };
        let first = wire(0, 1);
        rx.unprotect(&mut first.0.clone(), first.1).unwrap();
        for ssrc in 1..=MAX_STREAMS as u32 {
            let (mut b, n) = wire(ssrc, 1);
            rx.unprotect(&mut b, n).unwrap();
        }
        // SSRC 0 was evicted, so its replay state is gone (a fresh stream).
        assert!(rx.streams.get(0).is_none());
        assert!(rx.unprotect(&mut first.0.clone(), first.1).is_ok());
    }

    #[test]
    fn buffer_and_length_errors() {
        for p in PROFILES {
            let k = keys(p, 4);
            let mut c = RtpCipher::new(p, &k).unwrap();
            let plain = rtp_packet(1, 10);
            let mut buf = plain.clone();
            buf.resize(plain.len() + c.overhead() - 1, 0);
            assert_eq!(
                c.protect(&mut buf, plain.len(), 12, 0),
                Err(SrtpError::BufferTooSmall)
            );
            assert_eq!(
                c.protect(&mut buf, plain.len(), 11, 0),
                Err(SrtpError::Malformed)
            );
            assert_eq!(
                c.protect(&mut buf, plain.len(), plain.len() + 1, 0),
                Err(SrtpError::Malformed)
            );
            let too_long = buf.len() + 1;
            assert_eq!(
                c.protect(&mut buf, too_long, 12, 0),
                Err(SrtpError::Malformed)
            );
            assert_eq!(c.unprotect(&mut buf, too_long), Err(SrtpError::Malformed));
            assert_eq!(
                c.unprotect(&mut buf, 12 + c.overhead() - 1),
                Err(SrtpError::Malformed)
            );
            assert_eq!(c.unprotect(&mut buf, 5), Err(SrtpError::Malformed));

            let mut r = RtcpCipher::new(p, &k).unwrap();
            let mut buf = [0u8; 64];
            let len = crate::rtcp::write_pli(&mut buf, 1, 2).unwrap();
            assert_eq!(
                r.protect(&mut buf[..len + r.overhead() - 1], len),
                Err(SrtpError::BufferTooSmall)
            );
            assert_eq!(r.protect(&mut buf, 7), Err(SrtpError::Malformed));
            assert_eq!(
                r.unprotect(&mut buf, 8 + r.overhead() - 1),
                Err(SrtpError::Malformed)
            );
            assert_eq!(r.unprotect(&mut buf, 65), Err(SrtpError::Malformed));
            r.next_index = MAX_SRTCP_INDEX + 1;
            assert_eq!(r.protect(&mut buf, len), Err(SrtpError::IndexExhausted));
        }
    }

    #[test]
    fn random_input_never_panics() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut ciphers: Vec<_> = PROFILES
            .iter()
            .map(|&p| {
                (
                    RtpCipher::new(p, &keys(p, 0)).unwrap(),
                    RtcpCipher::new(p, &keys(p, 0)).unwrap(),
                )
            })
            .collect();
        let mut buf = [0u8; 80];
        for _ in 0..5_000 {
            for b in buf.iter_mut() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *b = state as u8;
            }
            buf[0] = (buf[0] & 0x3f) | 0x80;
            let len = (state >> 40) as usize % (buf.len() + 2);
            for (rtp, rtcp) in ciphers.iter_mut() {
                assert!(rtp.unprotect(&mut buf.clone(), len).is_err());
                assert!(rtcp.unprotect(&mut buf.clone(), len).is_err());
            }
        }
    }
}

//! SRTP keys: protection profiles, master keys from DTLS-SRTP keying material (RFC 5764),
//! and the RFC 3711 §4.3 key derivation into session keys.

use aws_lc_rs::cipher::{AES_128, AES_256, EncryptingKey, EncryptionContext, UnboundCipherKey};
use aws_lc_rs::iv::FixedLength;

/// Largest master key of any supported profile (AES-256).
pub(super) const MAX_KEY_LEN: usize = 32;
/// Largest master salt of any supported profile (AES-CM, 112 bits).
pub(super) const MAX_SALT_LEN: usize = 14;
/// Length of the SRTCP trailer word holding the E flag and the SRTCP index.
pub(super) const SRTCP_INDEX_LEN: usize = 4;
/// Truncated HMAC-SHA1 tag length of the `_80` profile.
pub(super) const HMAC_TAG_LEN: usize = 10;
/// HMAC-SHA1 key length (RFC 3711 §8.2, n_a = 160 bits).
pub(super) const HMAC_KEY_LEN: usize = 20;
/// AES-GCM tag length (RFC 7714 §7: 16 octets).
pub(super) const GCM_TAG_LEN: usize = 16;
/// Highest SRTCP index (31 bits).
pub(super) const MAX_SRTCP_INDEX: u32 = 0x7fff_ffff;
/// Largest SRTP packet index (48 bits).
pub(super) const MAX_SRTP_INDEX: u64 = (1 << 48) - 1;
/// Replay window size in packets (RFC 3711 §3.3.2 requires at least 64).
pub(super) const REPLAY_WINDOW: u64 = 64;

/// Number of SSRCs whose receive state (rollover estimate, replay window) a cipher keeps; the
/// least recently used one is forgotten when a new SSRC authenticates.
pub const MAX_STREAMS: usize = 8;

/// SRTP key derivation labels (RFC 3711 §4.3.1, §4.3.2).
pub(super) const LABEL_RTP_ENCRYPTION: u8 = 0;
pub(super) const LABEL_RTP_AUTH: u8 = 1;
pub(super) const LABEL_RTP_SALT: u8 = 2;
pub(super) const LABEL_RTCP_ENCRYPTION: u8 = 3;
pub(super) const LABEL_RTCP_AUTH: u8 = 4;
pub(super) const LABEL_RTCP_SALT: u8 = 5;

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
    /// The profile's name as Chromium reports it (`RTCTransportStats.srtpCipher`, shown in
    /// `chrome://webrtc-internals`): BoringSSL's names for the RFC 5764/7714 profiles.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Aes128CmHmacSha1_80 => "SRTP_AES128_CM_SHA1_80",
            Self::AeadAes128Gcm => "SRTP_AEAD_AES_128_GCM",
            Self::AeadAes256Gcm => "SRTP_AEAD_AES_256_GCM",
        }
    }

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

    pub(super) const fn is_gcm(self) -> bool {
        !matches!(self, Self::Aes128CmHmacSha1_80)
    }
}

/// A master key and master salt for one direction. Zeroed on drop; `Debug` does not print
/// the key material.
#[derive(Clone)]
pub struct SrtpKeys {
    pub(super) key: [u8; MAX_KEY_LEN],
    pub(super) salt: [u8; MAX_SALT_LEN],
    pub(super) key_len: usize,
    pub(super) salt_len: usize,
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

    pub(super) fn check(&self, profile: SrtpProfile) -> Result<(), SrtpError> {
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
pub(super) fn aes_ctr(key: &EncryptingKey, iv: [u8; 16], data: &mut [u8]) -> Result<(), SrtpError> {
    if data.is_empty() {
        return Ok(());
    }
    key.less_safe_encrypt(data, EncryptionContext::Iv128(FixedLength::from(iv)))
        .map(|_| ())
        .map_err(|_| SrtpError::Crypto)
}

pub(super) fn ctr_key(key: &[u8]) -> Result<EncryptingKey, SrtpError> {
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
pub(super) struct Kdf<'a> {
    pub(super) master: EncryptingKey,
    pub(super) salt: &'a [u8],
}

impl<'a> Kdf<'a> {
    pub(super) fn new(keys: &'a SrtpKeys) -> Result<Self, SrtpError> {
        Ok(Self {
            master: ctr_key(keys.key())?,
            salt: keys.salt(),
        })
    }

    pub(super) fn derive(&self, label: u8, out: &mut [u8]) -> Result<(), SrtpError> {
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
pub(super) struct SessionKeys {
    pub(super) enc: [u8; MAX_KEY_LEN],
    pub(super) auth: [u8; HMAC_KEY_LEN],
    pub(super) salt: [u8; MAX_SALT_LEN],
}

impl SessionKeys {
    /// Derives session keys with the given (encryption, auth, salt) labels.
    pub(super) fn derive(
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

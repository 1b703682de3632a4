//! The SRTP and SRTCP contexts a session holds: [`RtpCipher`] and [`RtcpCipher`] (both
//! directions, with receive state), and the smaller send-only or receive-only variants.

use aws_lc_rs::aead::Aad;

use super::keys::*;
use super::packet::*;

/// SRTP protection for RTP packets in both directions of one crypto context, with receive
/// state for up to [`MAX_STREAMS`] SSRCs. A sender that never receives uses the smaller
/// [`RtpSender`].
#[derive(Debug)]
pub struct RtpCipher {
    pub(super) profile: SrtpProfile,
    pub(super) t: Transform,
    pub(super) streams: Streams<MAX_STREAMS>,
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
    pub(super) profile: SrtpProfile,
    pub(super) t: Transform,
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
    pub(super) profile: SrtpProfile,
    pub(super) t: Transform,
    /// SRTCP index of the next packet [`Self::protect`] sends.
    pub(super) next_index: u32,
    pub(super) streams: Streams<MAX_STREAMS>,
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
    pub(super) fn set_next_index(&mut self, index: u32) {
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
    pub(super) profile: SrtpProfile,
    pub(super) keys: SessionKeys,
    pub(super) next_index: u32,
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
    pub(super) profile: SrtpProfile,
    pub(super) keys: SessionKeys,
    pub(super) streams: Streams<RTCP_RECEIVER_STREAMS>,
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

//! The DTLS material every viewer of a server shares ([`DtlsContext`]): one certificate and
//! one dimpl configuration, with the server's SRTP profile preference.

use std::sync::Arc;

use dimpl::DtlsCertificate;
use tern_proto::srtp::SrtpProfile;

use super::{DEFAULT_SRTP_PROFILES, ViewerError, dimpl_profiles, sha256};

/// Shared DTLS material: one certificate for every session of the server.
pub struct DtlsContext {
    pub(crate) config: Arc<dimpl::Config>,
    pub(crate) cert: DtlsCertificate,
    fingerprint: [u8; 32],
}

impl DtlsContext {
    /// Generates a fresh self-signed ECDSA P-256 certificate; as a server it picks SRTP
    /// profiles in [`DEFAULT_SRTP_PROFILES`] order.
    pub fn generate() -> Result<Self, ViewerError> {
        Self::generate_with(&DEFAULT_SRTP_PROFILES)
    }

    /// Like [`Self::generate`], with `profiles` as the server's preference (first = most
    /// preferred; the ones left out are never picked).
    pub fn generate_with(profiles: &[SrtpProfile]) -> Result<Self, ViewerError> {
        let cert = dimpl::certificate::generate_self_signed_certificate()
            .map_err(|e| ViewerError::Dtls(format!("certificate: {e:?}")))?;
        Self::from_certificate(cert.certificate, cert.private_key, profiles)
    }

    /// A context over a given certificate (DER) and private key (PKCS#8 or PKCS#1 DER, or
    /// PEM): ECDSA P-256/P-384 or RSA 2048-8192 bits.
    pub fn from_certificate(
        certificate: Vec<u8>,
        private_key: Vec<u8>,
        profiles: &[SrtpProfile],
    ) -> Result<Self, ViewerError> {
        let config = dimpl::Config::builder()
            .srtp_profiles(&dimpl_profiles(profiles))
            .build()
            .map_err(|e| ViewerError::Dtls(format!("config: {e}")))?;
        // Fail here, not in the first handshake, on a key dimpl cannot sign with.
        config
            .crypto_provider()
            .key_provider
            .load_private_key(&private_key)
            .map_err(|e| ViewerError::Dtls(format!("private key: {e}")))?;
        Ok(DtlsContext {
            fingerprint: sha256(&certificate),
            config: Arc::new(config),
            cert: DtlsCertificate {
                certificate,
                private_key,
            },
        })
    }

    /// SHA-256 fingerprint of the certificate, for `a=fingerprint`.
    pub fn fingerprint(&self) -> &[u8; 32] {
        &self.fingerprint
    }
}

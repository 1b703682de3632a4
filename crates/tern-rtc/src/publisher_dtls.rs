//! str0m's DTLS with tern's dimpl configuration, so the WHIP publisher path (str0m) picks
//! SRTP profiles in the same order as the lean viewer path.
//!
//! str0m 0.25 builds its `dimpl::Config` inside its crypto backend with dimpl's defaults and
//! takes no profile order, but it takes a whole [`CryptoProvider`]
//! (`RtcConfig::set_crypto_provider`): this one is str0m's own AWS-LC provider with the
//! DTLS factory swapped for one that adds `srtp_profiles` to the same settings str0m uses
//! (no server cookie, str0m's MTU). No patch to str0m is needed.

use std::sync::Arc;
use std::time::Instant;

use str0m::crypto::dtls::{
    DtlsCert, DtlsImplError, DtlsInstance, DtlsOutput, DtlsProvider, DtlsVersion, ProtocolVersion,
};
use str0m::crypto::{CryptoError, CryptoProvider};
use tern_proto::srtp::SrtpProfile;

use crate::viewer::dimpl_profiles;

/// The crypto provider every WHIP publisher of a server shares (built once, at start).
#[derive(Debug, Clone)]
pub struct PublisherDtls {
    provider: Arc<CryptoProvider>,
}

impl PublisherDtls {
    /// str0m's default provider with `profiles` as the DTLS server's SRTP preference.
    ///
    /// str0m wants `&'static` factories: each call leaks one small factory (a few dozen
    /// bytes), so build this once per server, not per publisher.
    pub fn new(profiles: &[SrtpProfile]) -> Self {
        let factory: &'static Factory = Box::leak(Box::new(Factory {
            profiles: dimpl_profiles(profiles),
        }));
        let provider = CryptoProvider {
            dtls_provider: factory,
            ..str0m::crypto::from_feature_flags()
        };
        PublisherDtls {
            provider: Arc::new(provider),
        }
    }

    pub(crate) fn provider(&self) -> Arc<CryptoProvider> {
        self.provider.clone()
    }
}

#[derive(Debug)]
struct Factory {
    profiles: Vec<dimpl::SrtpProfile>,
}

impl DtlsProvider for Factory {
    fn generate_certificate(&self) -> Option<DtlsCert> {
        dimpl::certificate::generate_self_signed_certificate().ok()
    }

    fn new_dtls(
        &self,
        cert: &DtlsCert,
        now: Instant,
        version: DtlsVersion,
        mtu: Option<usize>,
    ) -> Result<Box<dyn DtlsInstance>, CryptoError> {
        // As str0m's backend: ICE already proved return routability, so no cookie.
        let mut b = dimpl::Config::builder()
            .use_server_cookie(false)
            .srtp_profiles(&self.profiles);
        if let Some(mtu) = mtu {
            b = b.mtu(mtu);
        }
        let config = Arc::new(
            b.build()
                .map_err(|e| CryptoError::Other(format!("dimpl config: {e}")))?,
        );
        let dtls = match version {
            DtlsVersion::Dtls12 => dimpl::Dtls::new_12(config, cert.clone(), now),
            DtlsVersion::Dtls13 => dimpl::Dtls::new_13(config, cert.clone(), now),
            DtlsVersion::Auto => dimpl::Dtls::new_auto(config, cert.clone(), now),
            #[allow(unreachable_patterns)]
            v => return Err(CryptoError::Other(format!("DTLS version {v}"))),
        };
        Ok(Box::new(Instance(dtls)))
    }
}

struct Instance(dimpl::Dtls);

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Instance")
    }
}

impl DtlsInstance for Instance {
    fn set_active(&mut self, active: bool) {
        self.0.set_active(active);
    }

    fn handle_packet(&mut self, packet: &[u8]) -> Result<(), DtlsImplError> {
        self.0.handle_packet(packet)
    }

    fn poll_output<'a>(&mut self, buf: &'a mut [u8]) -> DtlsOutput<'a> {
        self.0.poll_output(buf)
    }

    fn handle_timeout(&mut self, now: Instant) -> Result<(), DtlsImplError> {
        self.0.handle_timeout(now)
    }

    fn send_application_data(&mut self, data: &[u8]) -> Result<usize, DtlsImplError> {
        self.0.send_application_data(data)
    }

    fn is_active(&self) -> bool {
        self.0.is_active()
    }

    fn protocol_version(&self) -> Option<ProtocolVersion> {
        self.0.protocol_version()
    }

    fn is_closing(&self) -> bool {
        self.0.is_closing()
    }

    fn is_closed(&self) -> bool {
        self.0.is_closed()
    }

    fn close(&mut self) -> Result<(), DtlsImplError> {
        self.0.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The factory str0m gets hands out DTLS servers that pick SRTP profiles in the given
    /// order, against a client (dimpl with its defaults, as str0m and browsers offer
    /// AES-256-GCM first) — and its default order stays tern's.
    #[test]
    fn str0m_dtls_factory_applies_the_preference() {
        let run = |profiles: &[SrtpProfile]| {
            let dtls = PublisherDtls::new(profiles);
            let p = dtls.provider();
            let now = Instant::now();
            let cert = p.dtls_provider.generate_certificate().expect("certificate");
            let mut server = p
                .dtls_provider
                .new_dtls(&cert, now, DtlsVersion::Dtls12, None)
                .expect("server");
            server.set_active(false);
            let client_cert = dimpl::certificate::generate_self_signed_certificate().expect("cert");
            let mut client =
                dimpl::Dtls::new_12(Arc::new(dimpl::Config::default()), client_cert, now);
            client.set_active(true);
            let mut buf = vec![0u8; 4096];
            let mut got = None;
            for _ in 0..20 {
                client.handle_timeout(now).expect("client timeout");
                server.handle_timeout(now).expect("server timeout");
                let mut to_server = Vec::new();
                loop {
                    match client.poll_output(&mut buf) {
                        DtlsOutput::Packet(d) => to_server.push(d.to_vec()),
                        DtlsOutput::Timeout(_) => break,
                        _ => {}
                    }
                }
                for d in &to_server {
                    server.handle_packet(d).expect("server input");
                }
                let mut to_client = Vec::new();
                loop {
                    match server.poll_output(&mut buf) {
                        DtlsOutput::Packet(d) => to_client.push(d.to_vec()),
                        DtlsOutput::KeyingMaterial(_, profile) => got = Some(profile),
                        DtlsOutput::Timeout(_) => break,
                        _ => {}
                    }
                }
                for d in &to_client {
                    client.handle_packet(d).expect("client input");
                }
                if got.is_some() {
                    break;
                }
            }
            got.expect("server derived SRTP keys")
        };
        assert_eq!(
            run(&crate::viewer::DEFAULT_SRTP_PROFILES),
            dimpl::SrtpProfile::AEAD_AES_128_GCM
        );
        assert_eq!(
            run(&[SrtpProfile::AeadAes256Gcm]),
            dimpl::SrtpProfile::AEAD_AES_256_GCM
        );
        assert_eq!(
            run(&[SrtpProfile::Aes128CmHmacSha1_80]),
            dimpl::SrtpProfile::AES128_CM_SHA1_80
        );
    }
}

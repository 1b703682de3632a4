//! The TLS client configuration of an `rtsps://` source, decided once at start: the
//! server's outbound one ([`Outbound::tls_config`]: the system's roots and `server.ca_file`,
//! name checked against the URL's host) with `tls_verify = true`, the default; with
//! `tls_verify = false`, one on the same provider whose verifier takes any certificate but
//! still checks the handshake's signatures with it (so the camera must hold the key of the
//! certificate it shows), for cameras with a self-signed certificate. The second does not
//! authenticate the camera: the server warns of it once per source at start.

use std::sync::Arc;

use tracing::warn;

use crate::config::SourceConfig;
use crate::outbound::Outbound;

/// The source's TLS configuration: `None` for `rtsp://`.
pub(super) fn client_config(
    key: &str,
    cfg: &SourceConfig,
    outbound: &Outbound,
) -> Option<Arc<rustls::ClientConfig>> {
    if !cfg.is_tls() {
        return None;
    }
    let verified = outbound.tls_config();
    if cfg.tls_verify {
        return Some(verified);
    }
    warn!(
        "rtsp {key}: tls_verify = false: the camera's certificate is not verified, so the connection to {} is encrypted but not authenticated (trust its certificate in server.ca_file instead)",
        cfg.shown_url()
    );
    Some(outbound.unverified_config())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SourceTransport;
    use crate::outbound::unverified;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

    fn source(url: &str, tls_verify: bool) -> SourceConfig {
        SourceConfig {
            stream: "door".into(),
            url: url.into(),
            on_demand: true,
            transport: SourceTransport::Tcp,
            tls_verify,
        }
    }

    /// A self-signed certificate for 127.0.0.1 and its key.
    fn self_signed() -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
        let c = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).expect("rcgen");
        let key = PrivateKeyDer::Pkcs8(c.signing_key.serialize_der().into());
        (c.cert.der().clone(), key)
    }

    /// A server showing `cert` and signing its handshake with `key` (which need not be
    /// `cert`'s: rustls's own `with_single_cert` would refuse the mismatch).
    fn server(cert: CertificateDer<'static>, key: PrivateKeyDer<'static>) -> rustls::ServerConfig {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let key = provider.key_provider.load_private_key(key).expect("key");
        let certified = rustls::sign::CertifiedKey::new(vec![cert], key);
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(certified)))
    }

    /// A TLS handshake in memory between `client` (for 127.0.0.1) and `server`: the
    /// client's verdict.
    fn handshake(
        client: Arc<rustls::ClientConfig>,
        server: rustls::ServerConfig,
    ) -> Result<(), rustls::Error> {
        let name = ServerName::try_from("127.0.0.1").expect("name");
        let mut c = rustls::ClientConnection::new(client, name)?;
        let mut s = rustls::ServerConnection::new(Arc::new(server))?;
        let mut wire = Vec::new();
        for _ in 0..8 {
            wire.clear();
            while c.wants_write() {
                c.write_tls(&mut wire).expect("client writes");
            }
            let mut rd = &wire[..];
            while !rd.is_empty() {
                s.read_tls(&mut rd).expect("server reads");
            }
            // The server's own errors surface as the client's alert.
            let _ = s.process_new_packets();
            wire.clear();
            while s.wants_write() {
                s.write_tls(&mut wire).expect("server writes");
            }
            let mut rd = &wire[..];
            while !rd.is_empty() {
                c.read_tls(&mut rd).expect("client reads");
            }
            c.process_new_packets()?;
            if !c.is_handshaking() {
                return Ok(());
            }
        }
        panic!("the handshake did not finish");
    }

    /// A CA file holding `cert`, under the system's temporary directory; removed after.
    fn with_ca_file<T>(cert: &CertificateDer<'_>, f: impl FnOnce(&std::path::Path) -> T) -> T {
        let path = std::env::temp_dir().join(format!(
            "tern-rtsps-ca-{}-{}.pem",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::write(
            &path,
            pem::encode(&pem::Pem::new("CERTIFICATE", cert.as_ref().to_vec())),
        )
        .expect("write ca");
        let r = f(&path);
        let _ = std::fs::remove_file(&path);
        r
    }

    /// `tls_verify = true` is the outbound configuration: a camera's self-signed certificate
    /// is refused unless `server.ca_file` trusts it; `tls_verify = false` takes it as it is.
    /// `rtsp://` has none.
    #[test]
    fn verified_unless_told_not_to() {
        let (cert, key) = self_signed();
        let (other, _) = self_signed();
        let trusting = with_ca_file(&cert, Outbound::only).expect("ca");
        let not_trusting = with_ca_file(&other, Outbound::only).expect("ca");
        let url = "rtsps://127.0.0.1:8322/cam";
        assert!(client_config("cams/door", &source("rtsp://cam/x", true), &trusting).is_none());

        let verified = client_config("cams/door", &source(url, true), &trusting).expect("tls");
        assert!(Arc::ptr_eq(&verified, &trusting.tls_config()));
        handshake(verified, server(cert.clone(), key.clone_key())).expect("trusted");

        let refused = client_config("cams/door", &source(url, true), &not_trusting).expect("tls");
        let e = handshake(refused, server(cert.clone(), key.clone_key())).expect_err("untrusted");
        assert!(e.to_string().contains("invalid peer certificate"), "{e}");

        let any = client_config("cams/door", &source(url, false), &not_trusting).expect("tls");
        handshake(any, server(cert, key)).expect("tls_verify = false takes any certificate");
    }

    /// With `tls_verify = false` the camera must still hold the key of the certificate it
    /// shows: a server signing with another key fails the handshake.
    #[test]
    fn unverified_still_checks_the_handshake_signature() {
        let (cert, _) = self_signed();
        let (_, wrong_key) = self_signed();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let e = handshake(Arc::new(unverified(provider)), server(cert, wrong_key))
            .expect_err("a signature by another key");
        assert!(
            matches!(
                e,
                rustls::Error::InvalidCertificate(rustls::CertificateError::BadSignature)
            ),
            "{e:?}"
        );
    }
}

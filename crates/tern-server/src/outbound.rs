//! Calling out: the one TLS client configuration every request tern makes uses, built once
//! at start ([`Outbound::load`]).
//!
//! Who calls out: the admission webhook and its close notifications, the JWKS of apps that
//! take public-key tokens (both on the HTTP runtime through [`Outbound::client`], HTTP/1.1 or
//! h2 as TLS's ALPN picks) and recording's `on_segment_url` (the same client on its hook
//! thread's own runtime); an edge's WHEP pull from its origin (the upstream's thread)
//! blocking through [`Outbound::agent`] (HTTP/1.1). Each takes `http://` and `https://`.
//!
//! Trust: the system's roots (`SSL_CERT_FILE`, `SSL_CERT_DIR`, else the distribution's bundle,
//! `/etc/ssl/certs` on Debian) plus every certificate of `server.ca_file` (a PEM bundle: a
//! private CA, or a service's self-signed certificate). A `ca_file` that does not load stops
//! start-up naming the key; a system store that does not load is logged and left out. TLS
//! 1.2 and 1.3 on the aws-lc-rs provider the HTTPS server uses; certificates are verified
//! (name and chain) with no way to turn that off.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tracing::{debug, warn};

/// Time allowed for the TCP connect of an async request (the request's own timeout, which
/// each caller sets, covers the rest).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Pooled idle connections of the async client are closed after this.
const POOL_IDLE: Duration = Duration::from_secs(30);

/// The async client: HTTP/1.1 and h2, `http://` and `https://`.
pub type HttpsClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Why `server.ca_file` did not load.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum OutboundError {
    /// The file could not be read, or holds no PEM certificate, or one that does not parse.
    #[error("{path}: {message}")]
    CaFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
}

/// The outbound TLS configuration: roots and provider, shared by every client made from it.
#[derive(Clone)]
pub struct Outbound {
    /// For the async client (hyper-rustls sets ALPN on its own copy).
    tls: Arc<rustls::ClientConfig>,
    /// The same roots for ureq's agents, which build their own rustls configuration.
    roots: Arc<Vec<ureq::tls::Certificate<'static>>>,
    provider: Arc<CryptoProvider>,
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbound")
            .field("roots", &self.roots.len())
            .finish_non_exhaustive()
    }
}

impl Outbound {
    /// The system's roots and those of `ca_file` (`server.ca_file`), if set.
    pub fn load(ca_file: Option<&Path>) -> Result<Outbound, OutboundError> {
        let system = rustls_native_certs::load_native_certs();
        for e in &system.errors {
            warn!("outbound TLS: the system's trusted roots: {e}");
        }
        let extra = match ca_file {
            Some(p) => ca_certs(p)?,
            None => Vec::new(),
        };
        Ok(Outbound::with_roots(system.certs, extra))
    }

    /// Trusting only `ca_file`'s certificates (no system roots): for tests that must not
    /// depend on the machine's store.
    pub fn only(ca_file: &Path) -> Result<Outbound, OutboundError> {
        Ok(Outbound::with_roots(Vec::new(), ca_certs(ca_file)?))
    }

    /// `system` (one that does not parse is skipped: a distribution's bundle may hold an odd
    /// one) and `extra` (checked already).
    fn with_roots(
        system: Vec<CertificateDer<'static>>,
        extra: Vec<CertificateDer<'static>>,
    ) -> Self {
        let mut store = rustls::RootCertStore::empty();
        let mut roots = Vec::with_capacity(system.len() + extra.len());
        let mut ignored = 0;
        for c in system.into_iter().chain(extra) {
            if store.add(c.clone()).is_ok() {
                roots.push(ureq::tls::Certificate::from_der(c.as_ref()).to_owned());
            } else {
                ignored += 1;
            }
        }
        debug!(roots = roots.len(), ignored, "outbound TLS roots");
        if roots.is_empty() {
            warn!(
                "outbound TLS: no trusted roots (the system has none, no server.ca_file): https:// callouts will fail"
            );
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("aws-lc-rs's default provider has the default TLS versions")
            .with_root_certificates(store)
            .with_no_client_auth();
        Outbound {
            tls: Arc::new(tls),
            roots: Arc::new(roots),
            provider,
        }
    }

    /// A new async client on these roots: pooled connections (idle ones closed after 30 s),
    /// TCP_NODELAY, a 2 s connect timeout; ALPN `h2` and `http/1.1` over TLS, HTTP/1.1 over
    /// plain TCP. Make one per user and keep it: its pool is per client.
    pub fn client(&self) -> HttpsClient {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        // https:// URLs go through it too (the TLS layer wraps it).
        http.enforce_http(false);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config((*self.tls).clone())
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(http);
        Client::builder(TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE)
            .build(https)
    }

    /// A new blocking agent on these roots: each call ends within `timeout` (connect, TLS,
    /// request and answer); with `status_as_error` a 4xx/5xx answer is an error.
    pub fn agent(&self, timeout: Duration, status_as_error: bool) -> ureq::Agent {
        let tls = ureq::tls::TlsConfig::builder()
            .provider(ureq::tls::TlsProvider::Rustls)
            .root_certs(ureq::tls::RootCerts::Specific(self.roots.clone()))
            .unversioned_rustls_crypto_provider(self.provider.clone())
            .build();
        ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(status_as_error)
            .tls_config(tls)
            .build()
            .into()
    }

    /// How many roots are trusted.
    pub fn roots(&self) -> usize {
        self.roots.len()
    }

    /// The TLS client configuration itself (these roots, no ALPN): for the clients that
    /// speak their own protocol over TLS, such as `rtsps://` cameras (`crate::rtsp`) and
    /// `rtmps://` forwards (`crate::forward`).
    pub fn tls_config(&self) -> Arc<rustls::ClientConfig> {
        self.tls.clone()
    }

    /// A configuration on the same provider whose verifier takes any certificate (but still
    /// checks the handshake's signatures with it): for `tls_verify = false` (a camera's or a
    /// receiver's self-signed certificate). It encrypts without authenticating.
    pub fn unverified_config(&self) -> Arc<rustls::ClientConfig> {
        Arc::new(unverified(self.tls.crypto_provider().clone()))
    }
}

/// A POST of `body` as `application/json` to `uri`, for [`HttpsClient`] (which adds `Host`
/// or h2's `:authority` from the URI).
pub fn post_json(uri: &hyper::Uri, body: Vec<u8>) -> hyper::Request<Full<Bytes>> {
    let mut req = hyper::Request::new(Full::new(Bytes::from(body)));
    *req.method_mut() = hyper::Method::POST;
    *req.uri_mut() = uri.clone();
    req.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    req
}

/// `e` and its sources, `: `-joined: hyper's client error says only "client error
/// (Connect)", the TLS verdict is further down.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut next = e.source();
    while let Some(c) = next {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        next = c.source();
    }
    s
}

/// Every certificate of the PEM bundle `path`, each one usable as a root.
fn ca_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, OutboundError> {
    let bad = |message: String| OutboundError::CaFile {
        path: path.to_path_buf(),
        message,
    };
    let bytes = std::fs::read(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("not a PEM certificate bundle: {e}")))?;
    if certs.is_empty() {
        return Err(bad("holds no CERTIFICATE".into()));
    }
    for (i, c) in certs.iter().enumerate() {
        rustls::RootCertStore::empty()
            .add(c.clone())
            .map_err(|e| bad(format!("certificate {} does not parse: {e}", i + 1)))?;
    }
    Ok(certs)
}

/// A client configuration on `provider` that accepts any certificate.
pub(crate) fn unverified(provider: Arc<CryptoProvider>) -> rustls::ClientConfig {
    rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("the outbound provider has the default TLS versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth()
}

/// Takes any certificate (`tls_verify = false`); the handshake signatures are verified
/// with the provider's algorithms against the certificate's key as usual.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    use axum::serve::Listener;
    use tokio::net::{TcpListener, TcpStream};
    use tokio_rustls::server::TlsStream;

    /// A directory of its own under the system's temporary one, removed on drop.
    struct Dir(PathBuf);

    impl Dir {
        fn new(tag: &str) -> Dir {
            let d = std::env::temp_dir().join(format!(
                "tern-outbound-{tag}-{}-{}",
                std::process::id(),
                rand::random::<u32>()
            ));
            std::fs::create_dir_all(&d).expect("temp dir");
            Dir(d)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// TLS over TCP for axum, ALPN `h2` and `http/1.1`: a handshake that fails is skipped.
    struct Tls {
        tcp: TcpListener,
        acceptor: tokio_rustls::TlsAcceptor,
    }

    impl Listener for Tls {
        type Io = TlsStream<TcpStream>;
        type Addr = SocketAddr;

        async fn accept(&mut self) -> (Self::Io, SocketAddr) {
            loop {
                let Ok((s, a)) = self.tcp.accept().await else {
                    continue;
                };
                if let Ok(t) = self.acceptor.accept(s).await {
                    return (t, a);
                }
            }
        }

        fn local_addr(&self) -> std::io::Result<SocketAddr> {
            self.tcp.local_addr()
        }
    }

    /// A self-signed certificate for 127.0.0.1 (its PEM at `dir/ca.pem`) and an HTTPS server
    /// with it that answers every request with the HTTP version it came in.
    async fn server(dir: &Path) -> (SocketAddr, PathBuf) {
        let c = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])
            .expect("rcgen");
        let ca = dir.join("ca.pem");
        std::fs::write(
            &ca,
            pem::encode(&pem::Pem::new("CERTIFICATE", c.cert.der().to_vec())),
        )
        .expect("write ca");
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(c.signing_key.serialize_der().into());
        let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![c.cert.der().clone()], key)
        .expect("cert");
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let tcp = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = tcp.local_addr().expect("addr");
        let app = axum::Router::new()
            .fallback(|req: axum::extract::Request| async move { format!("{:?}", req.version()) });
        let tls = Tls {
            tcp,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(cfg)),
        };
        tokio::spawn(async move { axum::serve(tls, app).await });
        (addr, ca)
    }

    async fn get(client: &HttpsClient, url: &str) -> Result<String, String> {
        use http_body_util::BodyExt;
        let mut req = hyper::Request::new(Full::new(Bytes::new()));
        *req.uri_mut() = url.parse().expect("uri");
        let r = client.request(req).await.map_err(|e| error_chain(&e))?;
        let b = r.into_body().collect().await.map_err(|e| e.to_string())?;
        Ok(String::from_utf8_lossy(&b.to_bytes()).into_owned())
    }

    fn blocking_get(agent: &ureq::Agent, url: &str) -> Result<String, String> {
        agent
            .get(url)
            .call()
            .map_err(|e| e.to_string())?
            .body_mut()
            .read_to_string()
            .map_err(|e| e.to_string())
    }

    /// With `ca_file` naming a service's self-signed certificate, the async client speaks h2
    /// to it (ALPN) and the blocking agent HTTP/1.1; without it the certificate is refused by
    /// both, as it is not in the system's roots.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn https_with_ca_file_and_untrusted_without() {
        let dir = Dir::new("https");
        let (addr, ca) = server(&dir.0).await;
        let url = format!("https://{addr}/x");
        let trusting = Outbound::load(Some(&ca)).expect("ca_file loads");
        assert!(trusting.roots() >= 1);
        assert_eq!(
            get(&trusting.client(), &url).await.as_deref(),
            Ok("HTTP/2.0")
        );
        let plain = Outbound::load(None).expect("system roots");
        let e = get(&plain.client(), &url).await.expect_err("untrusted");
        assert!(e.contains("certificate"), "{e}");
        let (u, t) = (url.clone(), trusting.clone());
        let blocking = tokio::task::spawn_blocking(move || {
            (
                blocking_get(&t.agent(Duration::from_secs(5), true), &u),
                blocking_get(&plain.agent(Duration::from_secs(5), true), &u),
            )
        })
        .await
        .expect("blocking calls");
        assert_eq!(blocking.0.as_deref(), Ok("HTTP/1.1"));
        let e = blocking.1.expect_err("untrusted");
        assert!(e.to_lowercase().contains("certificate"), "{e}");
        // A name the certificate does not carry is refused even with it trusted.
        let other = format!("https://127.0.0.2:{}/x", addr.port());
        assert!(get(&trusting.client(), &other).await.is_err());
    }

    #[test]
    fn a_bad_ca_file_is_an_error_naming_it() {
        let dir = Dir::new("bad");
        let missing = dir.0.join("missing.pem");
        let empty = dir.0.join("empty.pem");
        std::fs::write(&empty, "no PEM here\n").expect("write");
        let garbage = dir.0.join("garbage.pem");
        std::fs::write(
            &garbage,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .expect("write");
        for (p, says) in [
            (&missing, "cannot read it"),
            (&empty, "holds no CERTIFICATE"),
            (&garbage, "does not parse"),
        ] {
            let e = Outbound::only(p).expect_err("bad ca_file").to_string();
            assert!(
                e.starts_with(&p.display().to_string()) && e.contains(says),
                "{e}"
            );
        }
    }
}

//! HTTPS: the same router as plain HTTP behind TLS (rustls on the aws-lc-rs provider), with
//! ALPN `h2` and `http/1.1`, and a certificate that renews without a restart.
//!
//! - [`CertStore`] holds the certificate and key in use and answers every handshake with
//!   them. It re-reads the files when they change (polled every [`WATCH_EVERY`]; renewal
//!   tools replace files rather than signal) and on SIGHUP; a pair that does not load is
//!   logged and the old one kept. Open connections keep the certificate they shook hands
//!   with; new ones get the new pair.
//! - [`TlsListener`] accepts TCP under the same per-address limit as plain HTTP, runs each
//!   handshake on its own task (a slow client holds up no one else) with a deadline
//!   ([`HANDSHAKE_TIMEOUT`]), and hands finished connections to the HTTP server.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tracing::{debug, info, warn};
use x509_cert::der::Decode;

use crate::http::listener::{Guarded, LimitedListener, Peer};
use crate::limits::PerAddress;

/// How often the certificate files are checked for a change: a renewal is in use within
/// this (the contract is 10 s).
pub const WATCH_EVERY: Duration = Duration::from_secs(2);

/// A TLS handshake that has not finished after this is dropped (its connection and its
/// place in the per-address allowance freed).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshakes finished but not yet taken by the HTTP server.
const ACCEPTED_QUEUE: usize = 64;

/// Why a certificate pair did not load.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no PEM of the kind wanted.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The pair is unusable together (the key is not the certificate's, an unsupported key).
    #[error("{0}")]
    Pair(String),
}

fn file_error(path: &Path, message: impl std::fmt::Display) -> TlsError {
    TlsError::File {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

/// A loaded pair and the leaf certificate's end of validity (Unix seconds).
struct Loaded {
    key: Arc<CertifiedKey>,
    not_after: i64,
}

/// Reads and checks a certificate chain and its key.
fn load_pair(cert: &Path, key: &Path) -> Result<Loaded, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| file_error(cert, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_error(cert, e))?;
    let Some(leaf) = chain.first() else {
        return Err(file_error(cert, "no CERTIFICATE in the file"));
    };
    let parsed = x509_cert::Certificate::from_der(leaf)
        .map_err(|e| file_error(cert, format!("the first certificate does not parse: {e}")))?;
    let not_after = i64::try_from(
        parsed
            .tbs_certificate()
            .validity()
            .not_after
            .to_unix_duration()
            .as_secs(),
    )
    .unwrap_or(i64::MAX);
    let der = PrivateKeyDer::from_pem_file(key).map_err(|e| file_error(key, e))?;
    let signer = rustls::crypto::aws_lc_rs::sign::any_supported_type(&der)
        .map_err(|e| file_error(key, format!("unsupported private key: {e}")))?;
    let certified = CertifiedKey::new(chain, signer);
    certified
        .keys_match()
        .map_err(|e| TlsError::Pair(format!("the key is not the certificate's: {e}")))?;
    Ok(Loaded {
        key: Arc::new(certified),
        not_after,
    })
}

/// What identifies a file's version without reading it: changes when it is replaced or
/// rewritten.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp(Option<(SystemTime, u64)>, Option<(SystemTime, u64)>);

fn stamp_of(cert: &Path, key: &Path) -> Stamp {
    let one = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())))
    };
    Stamp(one(cert), one(key))
}

/// The certificate in use and where it comes from.
pub struct CertStore {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
    not_after: AtomicI64,
    stamp: Mutex<Stamp>,
    reloads: AtomicU64,
    failures: AtomicU64,
}

impl std::fmt::Debug for CertStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertStore")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl CertStore {
    /// Loads the pair; an error names the file and what is wrong.
    pub fn load(cert: &Path, key: &Path) -> Result<Arc<CertStore>, TlsError> {
        let stamp = stamp_of(cert, key);
        let loaded = load_pair(cert, key)?;
        Ok(Arc::new(CertStore {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            current: RwLock::new(loaded.key),
            not_after: AtomicI64::new(loaded.not_after),
            stamp: Mutex::new(stamp),
            reloads: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        }))
    }

    /// Re-reads the pair if its files changed since the last read (`force`: in any case).
    /// Returns whether a new pair is now in use; a pair that does not load is logged and
    /// counted, and the one in use stays.
    pub fn reload(&self, force: bool) -> bool {
        let stamp = stamp_of(&self.cert, &self.key);
        {
            let Ok(mut last) = self.stamp.lock() else {
                return false;
            };
            if !force && *last == stamp {
                return false;
            }
            *last = stamp;
        }
        match load_pair(&self.cert, &self.key) {
            Ok(l) => {
                if let Ok(mut cur) = self.current.write() {
                    *cur = l.key;
                }
                self.not_after.store(l.not_after, Ordering::Relaxed);
                self.reloads.fetch_add(1, Ordering::Relaxed);
                info!(
                    cert = %self.cert.display(),
                    "TLS certificate reloaded; new connections use it"
                );
                true
            }
            Err(e) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                warn!("TLS certificate not reloaded, the previous one stays in use: {e}");
                false
            }
        }
    }

    /// The end of validity (notAfter) of the certificate in use, Unix seconds.
    pub fn not_after(&self) -> i64 {
        self.not_after.load(Ordering::Relaxed)
    }

    /// Seconds until the certificate in use expires (negative once it has).
    pub fn seconds_left(&self) -> i64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        self.not_after.load(Ordering::Relaxed) - now
    }

    /// Pairs loaded after the first.
    pub fn reloads(&self) -> u64 {
        self.reloads.load(Ordering::Relaxed)
    }

    /// Reloads that failed (the old pair kept).
    pub fn reload_failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Watches the files (every [`WATCH_EVERY`]) and SIGHUP until the runtime stops.
    pub fn watch(self: &Arc<Self>) {
        let store = self.clone();
        tokio::spawn(async move {
            let mut hup =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
            let mut tick = tokio::time::interval(WATCH_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let force = match hup.as_mut() {
                    Some(h) => tokio::select! {
                        _ = tick.tick() => false,
                        _ = h.recv() => true,
                    },
                    None => {
                        tick.tick().await;
                        false
                    }
                };
                if force {
                    info!("SIGHUP: reloading the TLS certificate");
                }
                // File reads are small and rare; off the async workers all the same.
                let s = store.clone();
                let _ = tokio::task::spawn_blocking(move || s.reload(force)).await;
            }
        });
    }

    /// rustls's server configuration over this store: TLS 1.2 and 1.3, ALPN h2 then
    /// http/1.1.
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        self.config_with_alpn(vec![b"h2".to_vec(), b"http/1.1".to_vec()])
    }

    /// The same with the application protocols `alpn` (none: the client's choice is not
    /// looked at).
    pub fn config_with_alpn(
        self: &Arc<Self>,
        alpn: Vec<Vec<u8>>,
    ) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Pair(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        cfg.alpn_protocols = alpn;
        Ok(Arc::new(cfg))
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().ok().map(|k| k.clone())
    }
}

/// Accepts TLS connections for the HTTP server (see the module doc).
pub struct TlsListener {
    rx: mpsc::Receiver<(TlsStream<Guarded>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Starts accepting on `inner` (on the current runtime); `per_ip` caps each client
    /// address's open connections, handshakes included.
    pub fn spawn(
        inner: TcpListener,
        per_ip: Arc<PerAddress>,
        config: Arc<rustls::ServerConfig>,
    ) -> io::Result<TlsListener> {
        let local = inner.local_addr()?;
        let (tx, rx) = mpsc::channel(ACCEPTED_QUEUE);
        let acceptor = TlsAcceptor::from(config);
        let mut plain = LimitedListener::new(inner, per_ip);
        tokio::spawn(async move {
            loop {
                let (io, addr) = tokio::select! {
                    () = tx.closed() => return,
                    c = plain.accept() => c,
                };
                let acceptor = acceptor.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(io)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, addr)).await;
                        }
                        Ok(Err(e)) => debug!("HTTPS {addr}: handshake failed: {e}"),
                        Err(_) => debug!("HTTPS {addr}: no handshake in {HANDSHAKE_TIMEOUT:?}"),
                    }
                });
            }
        });
        Ok(TlsListener { rx, local })
    }
}

impl Listener for TlsListener {
    type Io = TlsStream<Guarded>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, SocketAddr) {
        match self.rx.recv().await {
            Some(c) => c,
            // The accept task ended (its runtime is stopping): nothing more will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}

impl Connected<IncomingStream<'_, TlsListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, TlsListener>) -> Peer {
        Peer(*stream.remote_addr())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let c = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("rcgen");
        write_pem(dir, name, c.cert.der(), &c.signing_key)
    }

    /// Writes a certificate and its key as `{name}.crt` and `{name}.key` (PEM).
    fn write_pem(
        dir: &Path,
        name: &str,
        cert_der: &[u8],
        signing_key: &rcgen::KeyPair,
    ) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{name}.crt"));
        let key = dir.join(format!("{name}.key"));
        std::fs::write(
            &cert,
            pem::encode(&pem::Pem::new("CERTIFICATE", cert_der.to_vec())),
        )
        .expect("write cert");
        let key_der = signing_key.serialize_der();
        std::fs::write(&key, pem::encode(&pem::Pem::new("PRIVATE KEY", key_der)))
            .expect("write key");
        (cert, key)
    }

    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tern-tls-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).expect("temp dir");
        d
    }

    #[test]
    fn a_pair_loads_and_a_broken_one_names_its_file() {
        let d = temp_dir("load");
        let (cert, key) = write_pair(&d, "a");
        let store = CertStore::load(&cert, &key).expect("loads");
        // rcgen's default validity runs to 4096, far ahead.
        assert!(store.seconds_left() > 365 * 86_400);

        let (_, other_key) = write_pair(&d, "b");
        let e = CertStore::load(&cert, &other_key).expect_err("mismatched key");
        assert!(e.to_string().contains("not the certificate's"), "{e}");

        std::fs::write(d.join("empty.crt"), "nothing here\n").expect("write");
        let e = CertStore::load(&d.join("empty.crt"), &key).expect_err("no certificate");
        assert!(e.to_string().contains("empty.crt"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_end_of_validity_is_the_leafs_not_after() {
        let d = temp_dir("not-after");
        let mut params = rcgen::CertificateParams::new(vec!["localhost".into()]).expect("params");
        // 2030-01-01T00:00:00Z (UTCTime) and 2051-06-01T00:00:00Z (GeneralizedTime).
        for ((y, m, day), unix) in [((2030, 1, 1), 1_893_456_000), ((2051, 6, 1), 2_569_190_400)] {
            params.not_after = rcgen::date_time_ymd(y, m, day);
            let signing_key = rcgen::KeyPair::generate().expect("key");
            let c = params.self_signed(&signing_key).expect("self-signed");
            let (cert, key) = write_pem(&d, &y.to_string(), c.der(), &signing_key);
            assert_eq!(
                load_pair(&cert, &key).expect("loads").not_after,
                unix,
                "{y}"
            );
            // What /metrics reports as tern_tls_cert_not_after_seconds.
            let store = CertStore::load(&cert, &key).expect("loads");
            assert_eq!(store.not_after(), unix, "{y}");
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn reload_takes_a_new_pair_and_keeps_the_old_one_when_the_new_is_bad() {
        let d = temp_dir("reload");
        let (cert, key) = write_pair(&d, "a");
        let store = CertStore::load(&cert, &key).expect("loads");
        let first = store.current.read().expect("lock").clone();
        assert!(!store.reload(false), "unchanged files are not re-read");

        // A renewal: both files replaced.
        let (c2, k2) = write_pair(&d, "b");
        std::fs::rename(&c2, &cert).expect("rename");
        std::fs::rename(&k2, &key).expect("rename");
        assert!(store.reload(true));
        let second = store.current.read().expect("lock").clone();
        assert_ne!(first.cert[0].as_ref(), second.cert[0].as_ref());
        assert_eq!(store.reloads(), 1);

        // Half-written: the old pair stays, counted.
        std::fs::write(&key, "-----BEGIN PRIVATE KEY-----\nAAAA\n").expect("write");
        assert!(!store.reload(true));
        assert_eq!(store.reload_failures(), 1);
        let kept = store.current.read().expect("lock").clone();
        assert_eq!(kept.cert[0].as_ref(), second.cert[0].as_ref());
        let _ = std::fs::remove_dir_all(&d);
    }
}

//! An admission webhook for the tests: a small HTTP/1.1 server, plain or over TLS, that
//! records every request body and answers from a policy (a JWKS server too: a GET's body is
//! `null`, and the policy's answer is the set); or an h2-only one over TLS (ALPN `h2` alone,
//! so a client that does not offer h2 fails its handshake), axum on a runtime of its own.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

type Policy = dyn Fn(&Value) -> Value + Send + Sync;

/// The test's admission webhook: every request body it got, answered by `policy` (its
/// answer's `_delay_ms` is slept first and left out).
pub struct Hook {
    addr: SocketAddr,
    scheme: &'static str,
    seen: Arc<Mutex<Vec<Value>>>,
    /// The HTTP version of each request, in the order of `seen`.
    versions: Arc<Mutex<Vec<String>>>,
    /// The h2 hook's runtime, kept while the hook lives.
    _rt: Option<tokio::runtime::Runtime>,
}

impl Hook {
    pub fn start(policy: impl Fn(&Value) -> Value + Send + Sync + 'static) -> Hook {
        Hook::start_with(None, policy)
    }

    /// The same over TLS with `tls` (HTTP/1.1 only, as ALPN says): `https://` URLs.
    pub fn start_tls(
        tls: Arc<rustls::ServerConfig>,
        policy: impl Fn(&Value) -> Value + Send + Sync + 'static,
    ) -> Hook {
        Hook::start_with(Some(tls), policy)
    }

    fn start_with(
        tls: Option<Arc<rustls::ServerConfig>>,
        policy: impl Fn(&Value) -> Value + Send + Sync + 'static,
    ) -> Hook {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind webhook");
        let addr = l.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let versions = Arc::new(Mutex::new(Vec::new()));
        let policy: Arc<Policy> = Arc::new(policy);
        let (s2, v2, p2) = (seen.clone(), versions.clone(), policy.clone());
        let scheme = if tls.is_some() { "https" } else { "http" };
        std::thread::spawn(move || {
            for c in l.incoming().flatten() {
                let (s3, v3, p3, tls) = (s2.clone(), v2.clone(), p2.clone(), tls.clone());
                std::thread::spawn(move || match tls {
                    None => serve_conn(c, &s3, &v3, &*p3),
                    // A client that does not trust the certificate ends the handshake: the
                    // first read fails and the connection is dropped, nothing recorded.
                    Some(cfg) => {
                        if let Ok(conn) = rustls::ServerConnection::new(cfg) {
                            serve_conn(rustls::StreamOwned::new(conn, c), &s3, &v3, &*p3);
                        }
                    }
                });
            }
        });
        Hook {
            addr,
            scheme,
            seen,
            versions,
            _rt: None,
        }
    }

    /// An h2-only webhook over TLS with `tls` (its ALPN set to `h2` alone): every POST's
    /// JSON body recorded, answered `{}`.
    pub fn start_h2(tls: Arc<rustls::ServerConfig>) -> Hook {
        let mut cfg = (*tls).clone();
        cfg.alpn_protocols = vec![b"h2".to_vec()];
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let versions = Arc::new(Mutex::new(Vec::new()));
        let (s2, v2) = (seen.clone(), versions.clone());
        let listener = rt.block_on(async {
            let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind h2 hook");
            H2Listener {
                tcp,
                acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(cfg)),
            }
        });
        let addr = listener.tcp.local_addr().expect("addr");
        let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
            let (s3, v3) = (s2.clone(), v2.clone());
            async move {
                let version = format!("{:?}", req.version());
                let bytes = axum::body::to_bytes(req.into_body(), 1 << 20)
                    .await
                    .unwrap_or_default();
                let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                v3.lock().expect("versions").push(version);
                s3.lock().expect("seen").push(body);
                "{}"
            }
        });
        rt.spawn(async move { axum::serve(listener, app).await });
        Hook {
            addr,
            scheme: "https",
            seen,
            versions,
            _rt: Some(rt),
        }
    }

    /// The HTTP version of each request so far (`HTTP/1.1`, `HTTP/2.0`).
    pub fn versions(&self) -> Vec<String> {
        self.versions.lock().expect("versions").clone()
    }

    pub fn url(&self) -> String {
        format!("{}://{}/admit", self.scheme, self.addr)
    }

    pub fn seen(&self) -> Vec<Value> {
        self.seen.lock().expect("seen").clone()
    }

    /// Waits (≤ `limit`) for a request matching `f`.
    pub fn wait_for(&self, limit: Duration, f: impl Fn(&Value) -> bool) -> Option<Value> {
        let end = Instant::now() + limit;
        loop {
            if let Some(v) = self.seen().into_iter().find(|v| f(v)) {
                return Some(v);
            }
            if Instant::now() > end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// TLS over TCP for axum: a handshake that fails (an untrusting client, no common ALPN) is
/// skipped.
struct H2Listener {
    tcp: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl axum::serve::Listener for H2Listener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
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

/// Serves keep-alive HTTP/1.1 requests on one connection until it closes.
fn serve_conn(
    mut c: impl Read + Write,
    seen: &Mutex<Vec<Value>>,
    versions: &Mutex<Vec<String>>,
    policy: &Policy,
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i;
            }
            match c.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        let len = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        while buf.len() < head_end + 4 + len {
            match c.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body: Value =
            serde_json::from_slice(&buf[head_end + 4..head_end + 4 + len]).unwrap_or(Value::Null);
        buf.drain(..head_end + 4 + len);
        versions.lock().expect("versions").push("HTTP/1.1".into());
        seen.lock().expect("seen").push(body.clone());
        let mut answer = policy(&body);
        if let Some(ms) = answer.get("_delay_ms").and_then(Value::as_u64) {
            std::thread::sleep(Duration::from_millis(ms));
        }
        if let Some(o) = answer.as_object_mut() {
            o.remove("_delay_ms");
        }
        let text = answer.to_string();
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}",
            text.len()
        );
        if c.write_all(resp.as_bytes())
            .and_then(|()| c.flush())
            .is_err()
        {
            return;
        }
    }
}

/// A TLS server configuration with a new self-signed certificate for 127.0.0.1 and
/// `localhost`, and that certificate as PEM (what `server.ca_file` names to trust it).
pub fn self_signed_tls() -> (Arc<rustls::ServerConfig>, String) {
    let c = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])
        .expect("rcgen");
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(c.signing_key.serialize_der().into());
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_no_client_auth()
    .with_single_cert(vec![c.cert.der().clone()], key)
    .expect("certificate");
    let pem = pem::encode(&pem::Pem::new("CERTIFICATE", c.cert.der().to_vec()));
    (Arc::new(cfg), pem)
}

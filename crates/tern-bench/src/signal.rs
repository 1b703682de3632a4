//! Signalling: WHEP over HTTP(S) (POST the offer, DELETE the session at the end).

use std::sync::Arc;
use std::time::Duration;

use ureq::Agent;
use ureq::config::ConfigBuilder;
use ureq::tls::TlsConfig;
use ureq::typestate::AgentScope;

/// An agent's configuration whose https goes through rustls on aws-lc-rs, the provider the
/// rest of tern uses (ureq's own `rustls` feature would add ring to the build).
pub(crate) fn agent_config() -> ConfigBuilder<AgentScope> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    Agent::config_builder().tls_config(
        TlsConfig::builder()
            .unversioned_rustls_crypto_provider(provider)
            .build(),
    )
}

/// Why a client could not get an answer. Each is counted by its [`SignalError::reason`].
#[derive(Debug)]
pub enum SignalError {
    /// No connection to the server (refused, unreachable, timed out).
    Transport(String),
    /// The server answered with an error status.
    Status(u16, String),
    /// The answer could not be used.
    BadAnswer(String),
}

impl SignalError {
    /// A short, stable reason for the failure tables ("HTTP 404", "refused", ...).
    pub fn reason(&self) -> String {
        match self {
            SignalError::Transport(_) => "signalling: no connection".into(),
            SignalError::Status(c, _) => format!("signalling: HTTP {c}"),
            SignalError::BadAnswer(_) => "signalling: bad answer SDP".into(),
        }
    }
}

impl std::fmt::Display for SignalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SignalError::Transport(e) => write!(f, "no connection: {e}"),
            SignalError::Status(c, body) => write!(f, "HTTP {c}: {}", body.trim()),
            SignalError::BadAnswer(e) => write!(f, "bad answer: {e}"),
        }
    }
}

/// A WHEP endpoint.
#[derive(Clone)]
pub struct Whep {
    agent: Agent,
    url: String,
}

impl Whep {
    /// A client for the WHEP endpoint `url`, with `timeout` for each request.
    pub fn new(url: &str, timeout: Duration) -> Self {
        let agent: Agent = agent_config()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .max_idle_connections(64)
            // A WHEP 307/308 (a cluster routing the viewer) is followed by `offer` itself,
            // re-sending the offer as a browser's fetch does.
            .max_redirects(0)
            .build()
            .into();
        Whep {
            agent,
            url: url.to_string(),
        }
    }

    /// POSTs `offer`; returns the answer SDP, the session URL from `Location` and the
    /// `Link` header values.
    ///
    /// A `307`/`308` answer (a cluster routing the viewer to another node) is followed, at
    /// most [`MAX_REDIRECTS`] times, with the same offer.
    pub fn offer(&self, offer: &str) -> Result<(String, Option<String>, Vec<String>), SignalError> {
        let mut url = self.url.clone();
        let mut hops = 0;
        let (mut resp, location) = loop {
            let resp = self
                .agent
                .post(&url)
                .header("Content-Type", "application/sdp")
                .send(offer)
                .map_err(|e| SignalError::Transport(e.to_string()))?;
            let location = resp
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
                .map(|l| resolve(&url, l));
            match (resp.status().as_u16(), location) {
                (307 | 308, Some(next)) if hops < MAX_REDIRECTS => {
                    hops += 1;
                    url = next;
                }
                (_, location) => break (resp, location),
            }
        };
        let status = resp.status().as_u16();
        let links: Vec<String> = resp
            .headers()
            .get_all("link")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| {
                v.split(", <")
                    .map(|p| p.trim_start_matches('<').to_string())
            })
            .collect();
        let body = resp
            .body_mut()
            .with_config()
            .limit(64 * 1024)
            .read_to_string()
            .map_err(|e| SignalError::Transport(e.to_string()))?;
        if status != 201 {
            return Err(SignalError::Status(status, body));
        }
        Ok((body, location, links))
    }

    /// Whether the stream is live (HEAD on the endpoint answers 200).
    pub fn live(&self) -> bool {
        self.agent
            .head(&self.url)
            .call()
            .is_ok_and(|r| r.status().as_u16() == 200)
    }

    /// DELETEs a session URL; errors are ignored (the server may have ended it already).
    pub fn delete(&self, location: &str) -> bool {
        self.agent
            .delete(location)
            .call()
            .is_ok_and(|r| r.status().is_success())
    }
}

/// Redirects one offer may follow.
const MAX_REDIRECTS: usize = 5;

/// Makes a `Location` value absolute against the URL that answered it.
fn resolve(url: &str, loc: &str) -> String {
    if loc.contains("://") {
        return loc.to_string();
    }
    let origin_end = url
        .find("://")
        .and_then(|i| url[i + 3..].find('/').map(|j| i + 3 + j))
        .unwrap_or(url.len());
    let origin = &url[..origin_end];
    if loc.starts_with('/') {
        format!("{origin}{loc}")
    } else {
        let path = url.split('?').next().unwrap_or(url);
        let base = &path[..path.rfind('/').unwrap_or(path.len())];
        format!("{base}/{loc}")
    }
}

/// TURN-over-UDP server and credentials from `Link: <turn:HOST:PORT?transport=udp>;
/// rel="ice-server"; username="..."; credential="..."` values (RFC 9725 §4.6).
pub fn turn_from_links(links: &[String]) -> Option<(std::net::SocketAddr, String, String)> {
    use std::net::ToSocketAddrs;
    links.iter().find_map(|l| {
        let rest = l.trim_start_matches('<').strip_prefix("turn:")?;
        let (url, params) = rest.split_once('>')?;
        let (hostport, query) = url.split_once('?').unwrap_or((url, ""));
        if !query.is_empty() && !query.contains("transport=udp") {
            return None;
        }
        let attr = |name: &str| {
            let i = params.find(&format!("{name}=\""))? + name.len() + 2;
            let end = params[i..].find('"')?;
            Some(params[i..i + end].to_string())
        };
        let addr = hostport.to_socket_addrs().ok()?.next()?;
        Some((addr, attr("username")?, attr("credential")?))
    })
}

/// GETs a URL and returns its body, for `/v1/memory` and `/v1/stats/current`.
pub fn get_text(url: &str, timeout: Duration) -> Result<String, String> {
    let agent: Agent = agent_config()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .build()
        .into();
    let mut resp = agent.get(url).call().map_err(|e| format!("{url}: {e}"))?;
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(4 * 1024 * 1024)
        .read_to_string()
        .map_err(|e| format!("{url}: {e}"))?;
    if status != 200 {
        return Err(format!("{url}: HTTP {status}"));
    }
    Ok(body)
}

/// The `scheme://host:port` part of a URL.
pub fn origin(url: &str) -> &str {
    let start = url.find("://").map_or(0, |i| i + 3);
    let end = url[start..].find('/').map_or(url.len(), |j| start + j);
    &url[..end]
}

/// A session held open over OvenMediaEngine's WebSocket signalling: the server ends the
/// viewer when the socket closes, so the socket lives as long as the client.
pub struct OmeSession {
    ws: tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<std::net::TcpStream>>,
    id: serde_json::Value,
    peer_id: serde_json::Value,
}

impl OmeSession {
    /// Sends `stop` and closes the socket.
    pub fn stop(mut self) {
        let msg = serde_json::json!({"command": "stop", "id": self.id, "peer_id": self.peer_id});
        let _ = self
            .ws
            .send(tungstenite::Message::Text(msg.to_string().into()));
        let _ = self.ws.close(None);
        let _ = self.ws.flush();
    }
}

/// Turns a server offer (SDP, candidate lines) into our answer SDP.
pub type MakeAnswer<'a> = dyn FnMut(&str, &[&str]) -> Result<String, SignalError> + 'a;

/// OvenMediaEngine signalling: `request_offer`, the server's `offer` (SDP and candidates),
/// our `answer`. `make_answer` turns the offer SDP and candidate lines into our answer SDP.
pub fn ome_exchange(
    url: &str,
    timeout: Duration,
    make_answer: &mut MakeAnswer<'_>,
) -> Result<OmeSession, SignalError> {
    use tungstenite::Message;
    let (mut ws, _) =
        tungstenite::connect(url).map_err(|e| SignalError::Transport(e.to_string()))?;
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_ref() {
        let _ = s.set_read_timeout(Some(timeout));
    }
    ws.send(Message::Text(r#"{"command":"request_offer"}"#.into()))
        .map_err(|e| SignalError::Transport(e.to_string()))?;
    let offer: serde_json::Value = loop {
        match ws.read() {
            Ok(Message::Text(t)) => {
                let v: serde_json::Value = serde_json::from_str(&t)
                    .map_err(|e| SignalError::BadAnswer(format!("offer is not JSON: {e}")))?;
                if v["command"] == "offer" {
                    break v;
                }
                if v.get("error").is_some() || v["code"].as_u64().is_some_and(|c| c >= 400) {
                    let code = v["code"].as_u64().unwrap_or(500) as u16;
                    return Err(SignalError::Status(code, t.to_string()));
                }
            }
            Ok(Message::Close(f)) => {
                return Err(SignalError::Status(
                    f.as_ref().map_or(1000, |f| u16::from(f.code)),
                    f.map_or(String::new(), |f| f.reason.to_string()),
                ));
            }
            Ok(_) => {}
            Err(e) => return Err(SignalError::Transport(e.to_string())),
        }
    };
    let sdp = offer["sdp"]["sdp"]
        .as_str()
        .ok_or_else(|| SignalError::BadAnswer("offer without sdp.sdp".into()))?;
    let cands: Vec<&str> = offer["candidates"]
        .as_array()
        .map(|a| a.iter().filter_map(|c| c["candidate"].as_str()).collect())
        .unwrap_or_default();
    let answer = make_answer(sdp, &cands)?;
    let msg = serde_json::json!({
        "command": "answer",
        "id": offer["id"],
        "peer_id": offer["peer_id"],
        "sdp": {"type": "answer", "sdp": answer},
    });
    ws.send(Message::Text(msg.to_string().into()))
        .map_err(|e| SignalError::Transport(e.to_string()))?;
    Ok(OmeSession {
        ws,
        id: offer["id"].clone(),
        peer_id: offer["peer_id"].clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_resolve_against_the_endpoint() {
        let url = "http://h:8080/live/demo/whep";
        assert_eq!(resolve(url, "/s/1"), "http://h:8080/s/1");
        assert_eq!(resolve(url, "s/1"), "http://h:8080/live/demo/s/1");
        assert_eq!(resolve(url, "https://x/y"), "https://x/y");
        // After a redirect the answer's URL, query and all, is the base.
        assert_eq!(
            resolve(
                "http://b:81/live/demo/whep?tern_node=b",
                "/live/demo/whep/s1"
            ),
            "http://b:81/live/demo/whep/s1"
        );
        assert_eq!(
            resolve("http://b:81/live/demo/whep?x=a/b", "s/1"),
            "http://b:81/live/demo/s/1"
        );
        assert_eq!(origin("http://h:8080/live/demo/whep"), "http://h:8080");
        assert_eq!(origin("http://h:8080"), "http://h:8080");
    }

    /// https goes through a real rustls handshake on aws-lc-rs: a server whose certificate
    /// no root vouches for is refused for that reason (without a provider ureq would panic).
    #[test]
    fn https_handshakes_and_checks_the_certificate() {
        use std::io::Read;
        let c = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("rcgen");
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(c.signing_key.serialize_der().into());
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![c.cert.der().clone()], key)
        .expect("server config");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let server = std::thread::spawn(move || {
            let (tcp, _) = listener.accept().expect("accept");
            let conn = rustls::ServerConnection::new(Arc::new(config)).expect("conn");
            let mut tls = rustls::StreamOwned::new(conn, tcp);
            let mut buf = [0u8; 64];
            // The client gives up on the certificate: the handshake fails on this side too.
            tls.read(&mut buf).map(|_| ()).map_err(|e| e.to_string())
        });
        let whep = Whep::new(
            &format!("https://localhost:{port}/live/demo/whep"),
            Duration::from_secs(5),
        );
        let e = whep.offer("v=0\r\n").expect_err("an unknown issuer");
        assert!(matches!(e, SignalError::Transport(_)), "{e}");
        assert!(e.to_string().contains("UnknownIssuer"), "{e}");
        assert!(server.join().expect("server thread").is_err());
    }

    #[test]
    fn turn_credentials_come_from_link_headers() {
        let links = vec![
            "stun:127.0.0.1:3478>; rel=\"ice-server\"".to_string(),
            "turn:127.0.0.1:3478?transport=udp>; rel=\"ice-server\"; username=\"1700:u\"; credential=\"c/+=\"; credential-type=\"password\"".to_string(),
            "turn:127.0.0.1:3478?transport=tcp>; rel=\"ice-server\"; username=\"x\"; credential=\"y\"".to_string(),
        ];
        let (addr, user, pass) = turn_from_links(&links).expect("udp entry");
        assert_eq!(addr, "127.0.0.1:3478".parse().expect("addr"));
        assert_eq!((user.as_str(), pass.as_str()), ("1700:u", "c/+="));
        assert!(turn_from_links(&links[2..]).is_none());
    }
}

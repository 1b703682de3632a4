//! An admission webhook for the tests: a small HTTP/1.1 server that records every request
//! body and answers from a policy.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

type Policy = dyn Fn(&Value) -> Value + Send + Sync;

/// The test's admission webhook: every request body it got, answered by `policy` (its
/// answer's `_delay_ms` is slept first and left out).
pub struct Hook {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Value>>>,
}

impl Hook {
    pub fn start(policy: impl Fn(&Value) -> Value + Send + Sync + 'static) -> Hook {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind webhook");
        let addr = l.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let policy: Arc<Policy> = Arc::new(policy);
        let (s2, p2) = (seen.clone(), policy.clone());
        std::thread::spawn(move || {
            for c in l.incoming().flatten() {
                let (s3, p3) = (s2.clone(), p2.clone());
                std::thread::spawn(move || serve_conn(c, &s3, &*p3));
            }
        });
        Hook { addr, seen }
    }

    pub fn url(&self) -> String {
        format!("http://{}/admit", self.addr)
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

/// Serves keep-alive HTTP/1.1 requests on one connection until it closes.
fn serve_conn(mut c: TcpStream, seen: &Mutex<Vec<Value>>, policy: &Policy) {
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
        if c.write_all(resp.as_bytes()).is_err() {
            return;
        }
    }
}

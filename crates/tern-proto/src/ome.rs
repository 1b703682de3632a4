//! OvenMediaEngine's WebSocket signalling messages: JSON text frames on
//! `ws://HOST:PORT/{app}/{stream}`, as OvenPlayer and OvenRtcTester speak them.
//!
//! The exchange: the player sends `{"command":"request_offer"}`; the server answers with
//! `{"command":"offer","id":N,"peer_id":0,"sdp":{"type":"offer","sdp":"..."},
//! "candidates":[...],"code":200}` (plus `iceServers` when it hands out TURN servers); the
//! player sends `{"command":"answer","id":N,"sdp":{"type":"answer","sdp":"..."}}`, trickles
//! `{"command":"candidate","id":N,"candidates":[{"candidate":"candidate:...",...}]}` and ends
//! with `{"command":"stop","id":N}`. Every command but `request_offer` must carry the `id` of
//! the offer. An error is `{"code":N,"error":"..."}` (HTTP status codes), after which the
//! server closes the socket.
//!
//! [`parse_message`] reads the envelope (command and id) and the accessors validate each
//! command's body, so a server can check the id before the body, in the order OME does. The
//! error texts are OME's where OME has one. Nothing here panics on any input (see the
//! `ome` fuzz target).

use serde_json::{Map, Value, json};

use crate::sdp::{self, Candidate};

/// Largest message accepted: an SDP answer is capped at [`sdp::MAX_SDP_LEN`]; JSON escaping
/// of line ends and quotes can double it.
pub const MAX_MESSAGE_LEN: usize = 2 * sdp::MAX_SDP_LEN + 4096;
/// Most candidates accepted in one `candidate` message (browsers send one at a time).
pub const MAX_CANDIDATES: usize = 32;
/// The `peer_id` of the server itself (OME's value when P2P is off).
pub const SERVER_PEER_ID: i64 = 0;

/// An error as OME sends it: `{"code":N,"error":"..."}`, N an HTTP status code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct SignalError {
    /// HTTP status code (400, 403, 404, 500, 503, ...).
    pub code: u16,
    /// The message.
    pub message: String,
}

impl SignalError {
    /// An error with this code and message.
    pub fn new(code: u16, message: impl Into<String>) -> Self {
        SignalError {
            code,
            message: message.into(),
        }
    }

    /// A 400 error.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, message)
    }

    /// The JSON text frame.
    pub fn to_json(&self) -> String {
        json!({ "code": self.code, "error": self.message }).to_string()
    }
}

/// The command of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `request_offer`: make an offer (no id needed).
    RequestOffer,
    /// `answer`: the player's SDP answer.
    Answer,
    /// `candidate`: trickled ICE candidates.
    Candidate,
    /// `stop`: end the session.
    Stop,
    /// `change_rendition`: pick an ABR rendition (tern serves one rendition).
    ChangeRendition,
    /// `offer_p2p` / `candidate_p2p`: OME's P2P mode, which tern does not run.
    P2p(&'static str),
    /// Anything else, as OME prints it in "Unknown command: ...".
    Other(String),
}

/// A parsed message: the command, the id, and the body for the accessors.
#[derive(Debug, Clone)]
pub struct Message {
    command: Command,
    id: Option<i64>,
    body: Map<String, Value>,
}

/// One trickled candidate of a `candidate` message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrickledCandidate {
    /// The parsed candidate; `None` for an mDNS (`.local`) address.
    pub candidate: Option<Candidate>,
    /// `sdpMid`, if given as a string.
    pub sdp_mid: Option<String>,
    /// `sdpMLineIndex`, if given as a number.
    pub sdp_mline_index: Option<u32>,
}

/// Parses a text frame's envelope. Errors (400) when it is too long, not JSON, not an object,
/// or has no `command`; a command that is not a string is named as JSON in
/// [`Command::Other`].
pub fn parse_message(text: &str) -> Result<Message, SignalError> {
    if text.len() > MAX_MESSAGE_LEN {
        return Err(SignalError::bad_request(format!(
            "Invalid request message: {} bytes (at most {MAX_MESSAGE_LEN})",
            text.len()
        )));
    }
    let invalid = || SignalError::bad_request("Invalid request message");
    let Ok(Value::Object(body)) = serde_json::from_str::<Value>(text) else {
        return Err(invalid());
    };
    let command = match body.get("command") {
        None | Some(Value::Null) => return Err(invalid()),
        Some(Value::String(s)) => match s.as_str() {
            "request_offer" => Command::RequestOffer,
            "answer" => Command::Answer,
            "candidate" => Command::Candidate,
            "stop" => Command::Stop,
            "change_rendition" => Command::ChangeRendition,
            "offer_p2p" => Command::P2p("offer_p2p"),
            "candidate_p2p" => Command::P2p("candidate_p2p"),
            other => Command::Other(truncate(other, 64)),
        },
        Some(v) => Command::Other(truncate(&v.to_string(), 64)),
    };
    let id = body.get("id").and_then(Value::as_i64);
    Ok(Message { command, id, body })
}

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

impl Message {
    /// The command.
    pub fn command(&self) -> &Command {
        &self.command
    }

    /// The `id` field, when it is an integer.
    pub fn id(&self) -> Option<i64> {
        self.id
    }

    /// The SDP of an `answer`: `sdp` must be an object with `"type":"answer"` and a string
    /// `sdp` (OME's checks and texts, all 400).
    pub fn answer_sdp(&self) -> Result<&str, SignalError> {
        let Some(Value::Object(sdp)) = self.body.get("sdp") else {
            return Err(SignalError::bad_request("There is no SDP"));
        };
        if sdp.get("type").and_then(Value::as_str) != Some("answer") {
            return Err(SignalError::bad_request("Invalid SDP type"));
        }
        sdp.get("sdp")
            .and_then(Value::as_str)
            .ok_or_else(|| SignalError::bad_request("SDP must be a string"))
    }

    /// The candidates of a `candidate` message. `candidates` must be an array (OME's texts);
    /// entries with an empty or missing `candidate` are skipped (the end-of-candidates
    /// marker); any other entry must parse as a candidate line, else "Invalid candidate".
    pub fn candidates(&self) -> Result<Vec<TrickledCandidate>, SignalError> {
        let list = match self.body.get("candidates") {
            None | Some(Value::Null) => {
                return Err(SignalError::bad_request("There is no candidate list"));
            }
            Some(Value::Array(a)) => a,
            Some(_) => return Err(SignalError::bad_request("Candidates must be array")),
        };
        if list.len() > MAX_CANDIDATES {
            return Err(SignalError::bad_request(format!(
                "Too many candidates: {} (at most {MAX_CANDIDATES})",
                list.len()
            )));
        }
        let mut out = Vec::with_capacity(list.len());
        for item in list {
            let invalid = || {
                SignalError::bad_request(format!(
                    "Invalid candidate: {}",
                    truncate(&item.to_string(), 200)
                ))
            };
            let Value::Object(c) = item else {
                return Err(invalid());
            };
            let line = match c.get("candidate") {
                None | Some(Value::Null) => continue,
                Some(Value::String(s)) if s.trim().is_empty() => continue,
                Some(Value::String(s)) => s,
                Some(_) => return Err(invalid()),
            };
            let candidate = sdp::parse_candidate_line(line).map_err(|_| invalid())?;
            out.push(TrickledCandidate {
                candidate,
                sdp_mid: c.get("sdpMid").and_then(Value::as_str).map(str::to_string),
                sdp_mline_index: c
                    .get("sdpMLineIndex")
                    .and_then(Value::as_u64)
                    .and_then(|n| u32::try_from(n).ok()),
            });
        }
        Ok(out)
    }
}

/// A candidate the server sends with its offer.
#[derive(Debug, Clone, Copy)]
pub struct OfferCandidate<'a> {
    /// `candidate:...` line.
    pub candidate: &'a str,
    /// The m-line it belongs to.
    pub sdp_mline_index: u32,
    /// The mid it belongs to.
    pub sdp_mid: Option<&'a str>,
}

/// An ICE server handed to the player with the offer (a TURN server, in OME's case its
/// TCP relay for `?transport=tcp`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IceServer {
    /// `turn:` / `stun:` URLs.
    pub urls: Vec<String>,
    /// TURN username.
    pub username: Option<String>,
    /// TURN credential.
    pub credential: Option<String>,
}

/// Writes the `offer` message. `iceServers` (and OME's older `ice_servers`, with
/// `user_name`, which older players read) are present only when `ice_servers` is not empty.
pub fn write_offer(
    id: i64,
    sdp: &str,
    candidates: &[OfferCandidate<'_>],
    ice_servers: &[IceServer],
) -> String {
    let cands: Vec<Value> = candidates
        .iter()
        .map(|c| {
            let mut o = json!({ "candidate": c.candidate, "sdpMLineIndex": c.sdp_mline_index });
            if let (Some(mid), Value::Object(m)) = (c.sdp_mid, &mut o) {
                m.insert("sdpMid".into(), mid.into());
            }
            o
        })
        .collect();
    let mut msg = json!({
        "command": "offer",
        "id": id,
        "peer_id": SERVER_PEER_ID,
        "sdp": { "type": "offer", "sdp": sdp },
        "candidates": cands,
        "code": 200,
    });
    if !ice_servers.is_empty()
        && let Value::Object(m) = &mut msg
    {
        let servers = |user_key: &str| -> Value {
            ice_servers
                .iter()
                .map(|s| {
                    let mut o = Map::new();
                    o.insert("urls".into(), s.urls.clone().into());
                    if let Some(u) = &s.username {
                        o.insert(user_key.into(), u.clone().into());
                    }
                    if let Some(c) = &s.credential {
                        o.insert("credential".into(), c.clone().into());
                    }
                    Value::Object(o)
                })
                .collect()
        };
        m.insert("iceServers".into(), servers("username"));
        m.insert("ice_servers".into(), servers("user_name"));
    }
    msg.to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn envelopes() {
        let m = parse_message(r#"{"command":"request_offer"}"#).unwrap();
        assert_eq!(m.command(), &Command::RequestOffer);
        assert_eq!(m.id(), None);
        let m = parse_message(r#"{"command":"stop","id":12345}"#).unwrap();
        assert_eq!((m.command(), m.id()), (&Command::Stop, Some(12345)));
        let m = parse_message(r#"{"command":"dance","id":"7"}"#).unwrap();
        assert_eq!(m.command(), &Command::Other("dance".into()));
        assert_eq!(m.id(), None, "a string id is no id");
        let m = parse_message(r#"{"command":5}"#).unwrap();
        assert_eq!(m.command(), &Command::Other("5".into()));
        for bad in ["", "{", "[]", "null", "\"x\"", "{}", r#"{"command":null}"#] {
            let e = parse_message(bad).unwrap_err();
            assert_eq!(
                (e.code, e.message.as_str()),
                (400, "Invalid request message")
            );
        }
        let long = format!(
            r#"{{"command":"x","pad":"{}"}}"#,
            "a".repeat(MAX_MESSAGE_LEN)
        );
        assert_eq!(parse_message(&long).unwrap_err().code, 400);
    }

    #[test]
    fn answers() {
        let ok =
            parse_message(r#"{"command":"answer","id":1,"sdp":{"type":"answer","sdp":"v=0"}}"#)
                .unwrap();
        assert_eq!(ok.answer_sdp().unwrap(), "v=0");
        for (body, want) in [
            (r#"{"command":"answer","id":1}"#, "There is no SDP"),
            (
                r#"{"command":"answer","id":1,"sdp":"v=0"}"#,
                "There is no SDP",
            ),
            (
                r#"{"command":"answer","id":1,"sdp":{"type":"offer","sdp":"v=0"}}"#,
                "Invalid SDP type",
            ),
            (
                r#"{"command":"answer","id":1,"sdp":{"type":"answer","sdp":3}}"#,
                "SDP must be a string",
            ),
        ] {
            let e = parse_message(body).unwrap().answer_sdp().unwrap_err();
            assert_eq!((e.code, e.message.as_str()), (400, want), "{body}");
        }
    }

    #[test]
    fn candidates() {
        let m = parse_message(
            r#"{"command":"candidate","id":1,"candidates":[
                {"candidate":"candidate:1 1 udp 2122260223 198.18.0.2 5000 typ host generation 0","sdpMid":"0","sdpMLineIndex":0,"usernameFragment":"abcd"},
                {"candidate":"candidate:2 1 udp 2122260223 0c2d8a1e.local 5001 typ host","sdpMid":"0","sdpMLineIndex":0},
                {"candidate":""},
                {"sdpMid":"1"}]}"#,
        )
        .unwrap();
        let c = m.candidates().unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].candidate.as_ref().unwrap().port, 5000);
        assert_eq!(c[0].sdp_mid.as_deref(), Some("0"));
        assert_eq!(c[0].sdp_mline_index, Some(0));
        assert!(c[1].candidate.is_none(), "mDNS is accepted, not used");
        for (body, want) in [
            (
                r#"{"command":"candidate","id":1}"#,
                "There is no candidate list",
            ),
            (
                r#"{"command":"candidate","id":1,"candidates":{}}"#,
                "Candidates must be array",
            ),
            (
                r#"{"command":"candidate","id":1,"candidates":[{"candidate":"garbage"}]}"#,
                "Invalid candidate: {\"candidate\":\"garbage\"}",
            ),
            (
                r#"{"command":"candidate","id":1,"candidates":[7]}"#,
                "Invalid candidate: 7",
            ),
        ] {
            let e = parse_message(body).unwrap().candidates().unwrap_err();
            assert_eq!((e.code, e.message.as_str()), (400, want), "{body}");
        }
    }

    #[test]
    fn offer_message() {
        let text = write_offer(
            77,
            "v=0\r\n",
            &[OfferCandidate {
                candidate: "candidate:1 1 UDP 2130706431 127.0.0.1 10000 typ host",
                sdp_mline_index: 0,
                sdp_mid: Some("0"),
            }],
            &[],
        );
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["command"], "offer");
        assert_eq!(v["id"], 77);
        assert_eq!(v["peer_id"], 0);
        assert_eq!(v["code"], 200);
        assert_eq!(v["sdp"]["type"], "offer");
        assert_eq!(v["sdp"]["sdp"], "v=0\r\n");
        assert_eq!(v["candidates"][0]["sdpMid"], "0");
        assert_eq!(v["candidates"][0]["sdpMLineIndex"], 0);
        assert!(v.get("iceServers").is_none() && v.get("ice_servers").is_none());
        let text = write_offer(
            1,
            "v=0",
            &[],
            &[IceServer {
                urls: vec!["turn:127.0.0.1:3478?transport=tcp".into()],
                username: Some("u".into()),
                credential: Some("p".into()),
            }],
        );
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["iceServers"][0]["username"], "u");
        assert_eq!(v["ice_servers"][0]["user_name"], "u");
        assert_eq!(
            v["iceServers"][0]["urls"][0],
            "turn:127.0.0.1:3478?transport=tcp"
        );
    }

    #[test]
    fn error_message() {
        let e = SignalError::new(404, "Cannot create offer");
        let v: Value = serde_json::from_str(&e.to_json()).unwrap();
        assert_eq!(v, json!({"code": 404, "error": "Cannot create offer"}));
    }
}

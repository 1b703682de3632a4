//! RTMP ingest, server side (Adobe RTMP 1.0), sans-IO.
//!
//! [`ServerSession`] is one publisher's connection: bytes from the TCP socket go in through
//! [`ServerSession::receive`], bytes to send come out of [`ServerSession::take_output`], and
//! what the caller must act on comes out as [`Event`]s. It does:
//!
//! * the plain handshake (C0/C1 → S0/S1/S2 → C2, version 3; S2 echoes C1, C2 is not
//!   checked, as ffmpeg and librtmp clients expect of a server without the digest scheme);
//! * the chunk stream ([`chunk`]): set chunk size, abort, window acknowledgement size and
//!   the acknowledgements it asks for, ping requests;
//! * the publishing command flow in AMF0 ([`amf0`]): `connect` → `_result`,
//!   `releaseStream`/`FCPublish` → `_result`, `createStream` → `_result` with stream id 1,
//!   `publish` → an [`Event::Publish`] the caller answers with
//!   [`ServerSession::accept_publish`] (`NetStream.Publish.Start`) or
//!   [`ServerSession::reject_publish`] (an error status such as `NetStream.Publish.BadName`);
//!   `FCUnpublish`/`deleteStream`/`closeStream` → [`Event::Unpublish`];
//! * once publishing, audio and video messages as [`Event::Audio`] and [`Event::Video`]
//!   with their FLV tag bodies, which [`flv`] parses.
//!
//! Anything malformed is an [`RtmpError`]; the caller closes the connection. Nothing here
//! panics on input.

pub mod amf0;
pub mod chunk;
pub mod client;
pub mod flv;

use thiserror::Error;

use amf0::{Amf0Error, Value, object};
use chunk::{ChunkError, ChunkReader, ChunkWriter, Message};

/// Size of C1, C2, S1 and S2.
pub const HANDSHAKE_SIZE: usize = 1536;
/// The RTMP version in C0/S0 (plain RTMP; 6 would be RTMPE).
pub const VERSION: u8 = 3;

/// Message type: Set Chunk Size.
pub const MSG_SET_CHUNK_SIZE: u8 = 1;
/// Message type: Abort.
pub const MSG_ABORT: u8 = 2;
/// Message type: Acknowledgement.
pub const MSG_ACK: u8 = 3;
/// Message type: User Control.
pub const MSG_USER_CONTROL: u8 = 4;
/// Message type: Window Acknowledgement Size.
pub const MSG_WINDOW_ACK_SIZE: u8 = 5;
/// Message type: Set Peer Bandwidth.
pub const MSG_SET_PEER_BANDWIDTH: u8 = 6;
/// Message type: audio (an FLV audio tag body).
pub const MSG_AUDIO: u8 = 8;
/// Message type: video (an FLV video tag body).
pub const MSG_VIDEO: u8 = 9;
/// Message type: AMF3 command (a format byte, then AMF0 in practice).
pub const MSG_COMMAND_AMF3: u8 = 17;
/// Message type: AMF0 data (`@setDataFrame`, `onMetaData`).
pub const MSG_DATA_AMF0: u8 = 18;
/// Message type: AMF0 command.
pub const MSG_COMMAND_AMF0: u8 = 20;

/// Window acknowledgement size and peer bandwidth we announce: 2.5 MB, what Adobe's and
/// most other servers send.
const WINDOW: u32 = 2_500_000;
/// Our outgoing chunk size (commands are small; fewer chunk headers).
const OUT_CHUNK_SIZE: u32 = 4096;
/// The one message stream a publisher gets from `createStream`.
const STREAM_ID: u32 = 1;
/// Chunk streams of our replies: protocol control, NetConnection, NetStream.
const CSID_CONTROL: u32 = 2;
const CSID_COMMAND: u32 = 3;
const CSID_STREAM: u32 = 5;
/// User control events.
const UC_STREAM_BEGIN: u16 = 0;
const UC_PING_REQUEST: u16 = 6;
const UC_PING_RESPONSE: u16 = 7;

/// Why a connection must be closed.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum RtmpError {
    /// C0 asks for another version (e.g. 6, RTMPE).
    #[error("unsupported RTMP version {0}")]
    Version(u8),
    /// A malformed chunk stream.
    #[error(transparent)]
    Chunk(#[from] ChunkError),
    /// A malformed AMF0 command.
    #[error("command: {0}")]
    Amf0(#[from] Amf0Error),
    /// A message that breaks the protocol (wrong order, missing fields, bad lengths).
    #[error("{0}")]
    Protocol(String),
    /// [`ServerSession::accept_publish`] or [`ServerSession::reject_publish`] without a
    /// pending `publish`.
    #[error("no publish request is pending")]
    NoPendingPublish,
}

/// What the caller must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `connect`: the application and the tcUrl the client gave.
    Connect {
        /// The `app` property (may carry a `?query`).
        app: String,
        /// The `tcUrl` property, if sent.
        tc_url: Option<String>,
    },
    /// `publish`: answer with [`ServerSession::accept_publish`] or
    /// [`ServerSession::reject_publish`].
    Publish {
        /// The publishing name, the stream key (may carry a `?query`).
        name: String,
    },
    /// An audio message while publishing (an FLV audio tag body).
    Audio {
        /// Timestamp in ms (wraps at 2^32).
        timestamp: u32,
        /// The body.
        data: Vec<u8>,
    },
    /// A video message while publishing (an FLV video tag body).
    Video {
        /// Timestamp in ms (wraps at 2^32).
        timestamp: u32,
        /// The body.
        data: Vec<u8>,
    },
    /// The client stopped publishing (`FCUnpublish`, `deleteStream` or `closeStream`).
    Unpublish,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for C0 and C1.
    C0C1,
    /// Waiting for C2.
    C2,
    /// Chunks.
    Open,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Publish {
    None,
    Pending,
    Live,
    Done,
}

/// One RTMP publisher connection, server side.
#[derive(Debug)]
pub struct ServerSession {
    state: State,
    input: Vec<u8>,
    output: Vec<u8>,
    reader: ChunkReader,
    writer: ChunkWriter,
    seed: u64,
    connected: bool,
    publish: Publish,
    /// Bytes received since the handshake.
    received: u64,
    /// The peer's window acknowledgement size.
    peer_window: u32,
    /// `received` when we last acknowledged.
    acked: u64,
}

fn u32_at(b: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(..4)?.try_into().ok()?))
}

fn status(level: &str, code: &str, description: &str) -> Value {
    object([
        ("level", Value::String(level.into())),
        ("code", Value::String(code.into())),
        ("description", Value::String(description.into())),
    ])
}

impl ServerSession {
    /// A connection waiting for the client's handshake. `seed` fills S1's random bytes
    /// (they need not be secret: the plain handshake has no cryptographic role).
    pub fn new(seed: u64) -> Self {
        ServerSession {
            state: State::C0C1,
            input: Vec::new(),
            output: Vec::new(),
            reader: ChunkReader::new(),
            writer: ChunkWriter::new(),
            seed: seed | 1,
            connected: false,
            publish: Publish::None,
            received: 0,
            peer_window: 0,
            acked: 0,
        }
    }

    /// Bytes waiting to be sent; empties the buffer.
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.output)
    }

    /// Whether the handshake is done.
    pub fn handshake_done(&self) -> bool {
        self.state == State::Open
    }

    /// Whether a `publish` was accepted and not ended.
    pub fn is_publishing(&self) -> bool {
        self.publish == Publish::Live
    }

    /// Bytes held for an incomplete handshake packet or chunk, and unfinished messages.
    pub fn buffered(&self) -> usize {
        self.input.len() + self.reader.buffered()
    }

    /// Feeds bytes from the socket; `ev` gets what follows. After an error the session is
    /// unusable: close the connection.
    pub fn receive(&mut self, data: &[u8], ev: &mut impl FnMut(Event)) -> Result<(), RtmpError> {
        self.input.extend_from_slice(data);
        let mut pos = 0;
        let res = self.parse(&mut pos, ev);
        self.input.drain(..pos.min(self.input.len()));
        res
    }

    fn parse(&mut self, pos: &mut usize, ev: &mut impl FnMut(Event)) -> Result<(), RtmpError> {
        loop {
            let rest = &self.input[*pos..];
            match self.state {
                State::C0C1 => {
                    let Some(c) = rest.get(..1 + HANDSHAKE_SIZE) else {
                        return Ok(());
                    };
                    if c[0] != VERSION {
                        return Err(RtmpError::Version(c[0]));
                    }
                    let c1 = c[1..].to_vec();
                    *pos += 1 + HANDSHAKE_SIZE;
                    self.write_s0s1s2(&c1);
                    self.state = State::C2;
                }
                State::C2 => {
                    if rest.len() < HANDSHAKE_SIZE {
                        return Ok(());
                    }
                    *pos += HANDSHAKE_SIZE;
                    self.state = State::Open;
                }
                State::Open => {
                    let Some((n, msg)) = self.reader.read_chunk(rest)? else {
                        return Ok(());
                    };
                    *pos += n;
                    self.received += n as u64;
                    if self.peer_window > 0
                        && self.received - self.acked >= u64::from(self.peer_window)
                    {
                        self.acked = self.received;
                        let seq = (self.received as u32).to_be_bytes();
                        self.send(CSID_CONTROL, MSG_ACK, 0, &seq);
                    }
                    if let Some(m) = msg {
                        self.message(m, ev)?;
                    }
                }
            }
        }
    }

    fn write_s0s1s2(&mut self, c1: &[u8]) {
        self.output.push(VERSION);
        // S1: time 0, zero 0, then pseudo-random bytes (xorshift64).
        self.output.extend_from_slice(&[0; 8]);
        let mut x = self.seed;
        for _ in 0..(HANDSHAKE_SIZE - 8) / 8 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.output.extend_from_slice(&x.to_le_bytes());
        }
        // S2: C1 echoed.
        self.output.extend_from_slice(c1);
    }

    fn send(&mut self, csid: u32, type_id: u8, stream_id: u32, payload: &[u8]) {
        // Our own messages are small: the writer cannot fail on them.
        let _ = self
            .writer
            .write(csid, 0, type_id, stream_id, payload, &mut self.output);
    }

    fn command(&mut self, csid: u32, stream_id: u32, values: &[Value]) {
        let mut body = Vec::new();
        for v in values {
            // Every value we send is small; encoding cannot fail on them.
            let _ = amf0::encode(v, &mut body);
        }
        self.send(csid, MSG_COMMAND_AMF0, stream_id, &body);
    }

    fn message(&mut self, m: Message, ev: &mut impl FnMut(Event)) -> Result<(), RtmpError> {
        let bad = |what: &str| RtmpError::Protocol(what.to_string());
        match m.type_id {
            MSG_SET_CHUNK_SIZE => {
                let size = u32_at(&m.payload).ok_or_else(|| bad("short Set Chunk Size"))?;
                self.reader.set_chunk_size(size)?;
            }
            MSG_ABORT => {
                let csid = u32_at(&m.payload).ok_or_else(|| bad("short Abort"))?;
                self.reader.abort(csid);
            }
            MSG_WINDOW_ACK_SIZE => {
                self.peer_window =
                    u32_at(&m.payload).ok_or_else(|| bad("short Window Ack Size"))?;
            }
            MSG_USER_CONTROL => {
                let [a, b, rest @ ..] = &m.payload[..] else {
                    return Err(bad("short User Control"));
                };
                if u16::from_be_bytes([*a, *b]) == UC_PING_REQUEST {
                    let t = u32_at(rest).ok_or_else(|| bad("short Ping Request"))?;
                    let mut p = UC_PING_RESPONSE.to_be_bytes().to_vec();
                    p.extend_from_slice(&t.to_be_bytes());
                    self.send(CSID_CONTROL, MSG_USER_CONTROL, 0, &p);
                }
            }
            MSG_COMMAND_AMF0 => self.on_command(&m.payload, ev)?,
            MSG_COMMAND_AMF3 => {
                // A format byte (0: AMF0 follows) precedes the command.
                let body = m.payload.get(1..).unwrap_or(&[]);
                self.on_command(body, ev)?;
            }
            MSG_AUDIO | MSG_VIDEO if self.publish == Publish::Live => {
                let (timestamp, data) = (m.timestamp, m.payload);
                ev(if m.type_id == MSG_AUDIO {
                    Event::Audio { timestamp, data }
                } else {
                    Event::Video { timestamp, data }
                });
            }
            // Acknowledgements, peer bandwidth, metadata, media before publishing, shared
            // objects, aggregates: nothing to do.
            _ => {}
        }
        Ok(())
    }

    fn on_command(&mut self, body: &[u8], ev: &mut impl FnMut(Event)) -> Result<(), RtmpError> {
        let vals = amf0::decode_all(body)?;
        let name = vals.first().and_then(Value::as_str).unwrap_or_default();
        let txn = vals.get(1).and_then(Value::as_f64).unwrap_or(0.0);
        let result = |v: Value| {
            vec![
                Value::String("_result".into()),
                Value::Number(txn),
                Value::Null,
                v,
            ]
        };
        match name {
            "connect" => {
                if self.connected {
                    return Err(RtmpError::Protocol("second connect".into()));
                }
                let props = vals.get(2);
                let app = props
                    .and_then(|p| p.get("app"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| RtmpError::Protocol("connect without app".into()))?
                    .to_string();
                let tc_url = props
                    .and_then(|p| p.get("tcUrl"))
                    .and_then(Value::as_str)
                    .map(str::to_string);
                self.connected = true;
                self.send(CSID_CONTROL, MSG_WINDOW_ACK_SIZE, 0, &WINDOW.to_be_bytes());
                let mut bw = WINDOW.to_be_bytes().to_vec();
                bw.push(2); // dynamic limit
                self.send(CSID_CONTROL, MSG_SET_PEER_BANDWIDTH, 0, &bw);
                self.send(
                    CSID_CONTROL,
                    MSG_SET_CHUNK_SIZE,
                    0,
                    &OUT_CHUNK_SIZE.to_be_bytes(),
                );
                self.writer.set_chunk_size(OUT_CHUNK_SIZE);
                let mut info = status(
                    "status",
                    "NetConnection.Connect.Success",
                    "Connection succeeded.",
                );
                if let Value::Object(p) = &mut info {
                    p.push(("objectEncoding".into(), Value::Number(0.0)));
                }
                self.command(
                    CSID_COMMAND,
                    0,
                    &[
                        Value::String("_result".into()),
                        Value::Number(txn),
                        object([
                            ("fmsVer", Value::String("FMS/3,0,1,123".into())),
                            ("capabilities", Value::Number(31.0)),
                        ]),
                        info,
                    ],
                );
                ev(Event::Connect { app, tc_url });
            }
            "releaseStream" | "FCPublish" => {
                self.command(CSID_COMMAND, 0, &result(Value::Undefined));
            }
            "createStream" => {
                if !self.connected {
                    return Err(RtmpError::Protocol("createStream before connect".into()));
                }
                self.command(
                    CSID_COMMAND,
                    0,
                    &result(Value::Number(f64::from(STREAM_ID))),
                );
            }
            "publish" => {
                if !self.connected || self.publish != Publish::None {
                    return Err(RtmpError::Protocol(
                        "publish before connect, or a second publish".into(),
                    ));
                }
                let name = vals
                    .get(3)
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| RtmpError::Protocol("publish without a name".into()))?
                    .to_string();
                self.publish = Publish::Pending;
                ev(Event::Publish { name });
            }
            "FCUnpublish" | "deleteStream" | "closeStream" => {
                if matches!(self.publish, Publish::Live | Publish::Pending) {
                    self.publish = Publish::Done;
                    ev(Event::Unpublish);
                }
            }
            // `_checkbw`, `getStreamLength`, `_result` to our nothing: ignored.
            _ => {}
        }
        Ok(())
    }

    /// Accepts the pending `publish`: User Control Stream Begin and `onStatus`
    /// `NetStream.Publish.Start`. Media messages are reported from now on.
    pub fn accept_publish(&mut self) -> Result<(), RtmpError> {
        if self.publish != Publish::Pending {
            return Err(RtmpError::NoPendingPublish);
        }
        self.publish = Publish::Live;
        let mut p = UC_STREAM_BEGIN.to_be_bytes().to_vec();
        p.extend_from_slice(&STREAM_ID.to_be_bytes());
        self.send(CSID_CONTROL, MSG_USER_CONTROL, 0, &p);
        self.on_status("status", "NetStream.Publish.Start", "Publishing started.");
        Ok(())
    }

    /// Refuses the pending `publish` with an error status, e.g.
    /// `NetStream.Publish.BadName` (the client shows `description`). Close the connection
    /// once the output is sent.
    pub fn reject_publish(&mut self, code: &str, description: &str) -> Result<(), RtmpError> {
        if self.publish != Publish::Pending {
            return Err(RtmpError::NoPendingPublish);
        }
        self.publish = Publish::Done;
        self.on_status("error", code, description);
        Ok(())
    }

    fn on_status(&mut self, level: &str, code: &str, description: &str) {
        self.command(
            CSID_STREAM,
            STREAM_ID,
            &[
                Value::String("onStatus".into()),
                Value::Number(0.0),
                Value::Null,
                status(level, code, description),
            ],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scripted client: chunk writer and reader plus the handshake.
    struct Client {
        w: ChunkWriter,
        r: ChunkReader,
        inbox: Vec<u8>,
    }

    impl Client {
        fn new() -> Self {
            Client {
                w: ChunkWriter::new(),
                r: ChunkReader::new(),
                inbox: Vec::new(),
            }
        }

        fn command(&mut self, stream_id: u32, vals: &[Value]) -> Vec<u8> {
            let mut body = Vec::new();
            for v in vals {
                amf0::encode(v, &mut body).expect("encode");
            }
            let mut out = Vec::new();
            self.w
                .write(3, 0, MSG_COMMAND_AMF0, stream_id, &body, &mut out)
                .expect("write");
            out
        }

        fn media(&mut self, type_id: u8, ts: u32, body: &[u8]) -> Vec<u8> {
            let mut out = Vec::new();
            let csid = if type_id == MSG_AUDIO { 4 } else { 6 };
            self.w
                .write(csid, ts, type_id, 1, body, &mut out)
                .expect("write");
            out
        }

        /// Reads the server's messages out of `bytes`, applying its Set Chunk Size.
        fn read(&mut self, bytes: &[u8]) -> Vec<Message> {
            self.inbox.extend_from_slice(bytes);
            let mut out = Vec::new();
            while let Some((n, m)) = self.r.read_chunk(&self.inbox).expect("server chunks") {
                self.inbox.drain(..n);
                if let Some(m) = m {
                    if m.type_id == MSG_SET_CHUNK_SIZE {
                        let size = u32_at(&m.payload).expect("size");
                        self.r.set_chunk_size(size).expect("chunk size");
                    }
                    out.push(m);
                }
            }
            out
        }
    }

    fn commands(msgs: &[Message]) -> Vec<Vec<Value>> {
        msgs.iter()
            .filter(|m| m.type_id == MSG_COMMAND_AMF0)
            .map(|m| amf0::decode_all(&m.payload).expect("amf0"))
            .collect()
    }

    fn code(cmd: &[Value]) -> Option<&str> {
        cmd.get(3)?.get("code")?.as_str()
    }

    fn handshake(s: &mut ServerSession) {
        let mut c0c1 = vec![VERSION];
        c0c1.extend((0..HANDSHAKE_SIZE).map(|i| i as u8));
        // Split across two reads: nothing happens until C1 is whole.
        let mut ev = Vec::new();
        s.receive(&c0c1[..700], &mut |e| ev.push(e)).expect("c0c1");
        assert!(s.take_output().is_empty());
        s.receive(&c0c1[700..], &mut |e| ev.push(e)).expect("c0c1");
        let out = s.take_output();
        assert_eq!(out.len(), 1 + 2 * HANDSHAKE_SIZE);
        assert_eq!(out[0], VERSION);
        assert_eq!(&out[1 + HANDSHAKE_SIZE..], &c0c1[1..], "S2 echoes C1");
        s.receive(&out[1..1 + HANDSHAKE_SIZE], &mut |e| ev.push(e))
            .expect("c2");
        assert!(s.handshake_done());
        assert!(ev.is_empty());
    }

    #[test]
    fn ffmpeg_style_publish_flow() {
        let mut s = ServerSession::new(7);
        handshake(&mut s);
        let mut c = Client::new();
        let mut ev = Vec::new();
        let mut bytes = c.command(
            0,
            &[
                Value::String("connect".into()),
                Value::Number(1.0),
                object([
                    ("app", Value::String("live".into())),
                    ("tcUrl", Value::String("rtmp://127.0.0.1/live".into())),
                ]),
            ],
        );
        for (name, txn) in [("releaseStream", 2.0), ("FCPublish", 3.0)] {
            bytes.extend(c.command(
                0,
                &[
                    Value::String(name.into()),
                    Value::Number(txn),
                    Value::Null,
                    Value::String("cam".into()),
                ],
            ));
        }
        bytes.extend(c.command(
            0,
            &[
                Value::String("createStream".into()),
                Value::Number(4.0),
                Value::Null,
            ],
        ));
        // Media before publish is ignored.
        bytes.extend(c.media(MSG_VIDEO, 0, &[0x17, 0, 0, 0, 0]));
        bytes.extend(c.command(
            1,
            &[
                Value::String("publish".into()),
                Value::Number(5.0),
                Value::Null,
                Value::String("cam?token=x".into()),
                Value::String("live".into()),
            ],
        ));
        s.receive(&bytes, &mut |e| ev.push(e)).expect("commands");
        assert_eq!(
            ev,
            vec![
                Event::Connect {
                    app: "live".into(),
                    tc_url: Some("rtmp://127.0.0.1/live".into())
                },
                Event::Publish {
                    name: "cam?token=x".into()
                }
            ]
        );
        let msgs = c.read(&s.take_output());
        let types: Vec<u8> = msgs.iter().map(|m| m.type_id).collect();
        assert_eq!(&types[..3], &[5, 6, 1]);
        let cmds = commands(&msgs);
        assert_eq!(cmds[0][0].as_str(), Some("_result"));
        assert_eq!(code(&cmds[0]), Some("NetConnection.Connect.Success"));
        assert_eq!(cmds[3][1].as_f64(), Some(4.0));
        assert_eq!(cmds[3][3].as_f64(), Some(1.0), "stream id 1");

        s.accept_publish().expect("accept");
        let msgs = c.read(&s.take_output());
        assert_eq!(msgs[0].type_id, MSG_USER_CONTROL);
        assert_eq!(code(&commands(&msgs)[0]), Some("NetStream.Publish.Start"));
        assert!(s.is_publishing());

        ev.clear();
        let mut bytes = c.media(MSG_VIDEO, 40, &[0x17, 1, 0, 0, 0, 0, 0, 0, 1, 0x65]);
        bytes.extend(c.media(MSG_AUDIO, 45, &[0xaf, 1, 0x21]));
        bytes.extend(c.command(
            0,
            &[
                Value::String("FCUnpublish".into()),
                Value::Number(6.0),
                Value::Null,
                Value::String("cam".into()),
            ],
        ));
        s.receive(&bytes, &mut |e| ev.push(e)).expect("media");
        assert_eq!(
            ev,
            vec![
                Event::Video {
                    timestamp: 40,
                    data: vec![0x17, 1, 0, 0, 0, 0, 0, 0, 1, 0x65]
                },
                Event::Audio {
                    timestamp: 45,
                    data: vec![0xaf, 1, 0x21]
                },
                Event::Unpublish
            ]
        );
        assert!(!s.is_publishing());
    }

    #[test]
    fn rejected_publish_and_acks() {
        let mut s = ServerSession::new(1);
        handshake(&mut s);
        let mut c = Client::new();
        let mut bytes = Vec::new();
        c.w.write(
            2,
            0,
            MSG_WINDOW_ACK_SIZE,
            0,
            &1000u32.to_be_bytes(),
            &mut bytes,
        )
        .expect("w");
        bytes.extend(c.command(
            0,
            &[
                Value::String("connect".into()),
                Value::Number(1.0),
                object([("app", Value::String("live".into()))]),
            ],
        ));
        bytes.extend(c.command(
            1,
            &[
                Value::String("publish".into()),
                Value::Number(0.0),
                Value::Null,
                Value::String("cam".into()),
            ],
        ));
        // Enough bytes to cross the 1000-byte window.
        bytes.extend(c.media(MSG_AUDIO, 0, &[0u8; 1200]));
        s.receive(&bytes, &mut |_| {}).expect("ok");
        assert!(s.accept_publish().is_ok());
        assert_eq!(s.reject_publish("x", "y"), Err(RtmpError::NoPendingPublish));
        let msgs = c.read(&s.take_output());
        assert!(msgs.iter().any(|m| m.type_id == MSG_ACK));

        let mut s = ServerSession::new(1);
        handshake(&mut s);
        let mut c = Client::new();
        let mut bytes = c.command(
            0,
            &[
                Value::String("connect".into()),
                Value::Number(1.0),
                object([("app", Value::String("live".into()))]),
            ],
        );
        bytes.extend(c.command(
            1,
            &[
                Value::String("publish".into()),
                Value::Number(0.0),
                Value::Null,
                Value::String("cam".into()),
            ],
        ));
        s.receive(&bytes, &mut |_| {}).expect("ok");
        s.reject_publish("NetStream.Publish.BadName", "busy")
            .expect("reject");
        let cmds = commands(&c.read(&s.take_output()));
        let last = cmds.last().expect("onStatus");
        assert_eq!(last[0].as_str(), Some("onStatus"));
        assert_eq!(code(last), Some("NetStream.Publish.BadName"));
        // Media after a refusal is not reported.
        let mut ev = Vec::new();
        let media = c.media(MSG_VIDEO, 0, &[0x17, 1, 0, 0, 0]);
        s.receive(&media, &mut |e| ev.push(e)).expect("ok");
        assert!(ev.is_empty());
    }

    #[test]
    fn malformed_input_is_an_error() {
        let mut s = ServerSession::new(1);
        let mut c0c1 = vec![6u8];
        c0c1.extend([0u8; HANDSHAKE_SIZE]);
        assert_eq!(s.receive(&c0c1, &mut |_| {}), Err(RtmpError::Version(6)));
        // Garbage after a good handshake.
        let mut s = ServerSession::new(1);
        handshake(&mut s);
        let garbage: Vec<u8> = (0..4000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        assert!(s.receive(&garbage, &mut |_| {}).is_err());
        // publish before connect.
        let mut s = ServerSession::new(1);
        handshake(&mut s);
        let mut c = Client::new();
        let b = c.command(
            1,
            &[
                Value::String("publish".into()),
                Value::Number(0.0),
                Value::Null,
                Value::String("cam".into()),
            ],
        );
        assert!(matches!(
            s.receive(&b, &mut |_| {}),
            Err(RtmpError::Protocol(_))
        ));
    }
}

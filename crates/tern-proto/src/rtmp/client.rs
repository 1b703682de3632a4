//! RTMP publishing, client side (what OBS and ffmpeg do to push to a server), sans-IO.
//!
//! [`ClientSession`] is one publishing connection: bytes from the TCP socket go in through
//! [`ClientSession::push`], bytes to send come out of [`ClientSession::take_output`]. It
//! does:
//!
//! * the plain handshake (C0/C1 → S0/S1/S2 → C2, version 3; C2 echoes S1, S2 is not
//!   checked, as ffmpeg and librtmp do);
//! * the chunk stream ([`super::chunk`]): Set Chunk Size both ways (ours is 4096), Abort,
//!   the acknowledgements the server's Window Acknowledgement Size asks for, a Window
//!   Acknowledgement Size in answer to Set Peer Bandwidth, ping responses;
//! * the publishing command flow in AMF0: `connect` (transaction 1) → `_result` →
//!   `releaseStream` (2), `FCPublish` (3), `createStream` (4) → `_result` with the stream
//!   id → `publish` (5, type `live`) on that message stream → `onStatus`
//!   `NetStream.Publish.Start`, after which [`ClientSession::is_publishing`] holds and
//!   [`ClientSession::send_video`], [`ClientSession::send_audio`] and
//!   [`ClientSession::send_data`] write FLV tag bodies ([`super::flv`] builds them);
//! * [`ClientSession::close`]: `FCUnpublish` and `deleteStream`.
//!
//! An `_error` answer, or an `onStatus` of level `error` (such as
//! `NetStream.Publish.BadName`), is [`ClientError::Refused`]. An `_error` to
//! `releaseStream` or `FCPublish` is ignored, as ffmpeg does: these commands are Adobe
//! leftovers some servers do not implement. Anything malformed is an error; the caller
//! closes the connection. Nothing here panics on input, and what it buffers is bounded by
//! the [`ChunkReader`] limits.

use thiserror::Error;

use super::amf0::{self, Amf0Error, Value, object};
use super::chunk::{ChunkError, ChunkReader, ChunkWriter, Message};
use super::{
    HANDSHAKE_SIZE, MSG_ABORT, MSG_ACK, MSG_AUDIO, MSG_COMMAND_AMF0, MSG_COMMAND_AMF3,
    MSG_DATA_AMF0, MSG_SET_CHUNK_SIZE, MSG_SET_PEER_BANDWIDTH, MSG_USER_CONTROL, MSG_VIDEO,
    MSG_WINDOW_ACK_SIZE, UC_PING_REQUEST, UC_PING_RESPONSE, VERSION, u32_at,
};

/// Our outgoing chunk size.
pub const CLIENT_CHUNK_SIZE: u32 = 4096;
/// The `flashVer` we announce in `connect`.
pub const FLASH_VER: &str = "FMLE/3.0 (compatible; tern)";

/// Chunk streams: protocol control, NetConnection commands, audio, NetStream commands and
/// data, video.
const CSID_CONTROL: u32 = 2;
const CSID_COMMAND: u32 = 3;
const CSID_AUDIO: u32 = 4;
const CSID_STREAM: u32 = 5;
const CSID_VIDEO: u32 = 6;

/// Transaction ids of our commands.
const TXN_CONNECT: u32 = 1;
const TXN_RELEASE_STREAM: u32 = 2;
const TXN_FC_PUBLISH: u32 = 3;
const TXN_CREATE_STREAM: u32 = 4;
const TXN_PUBLISH: u32 = 5;
const TXN_FC_UNPUBLISH: u32 = 6;
const TXN_DELETE_STREAM: u32 = 7;

/// Longest server text kept in a [`ClientError::Refused`], in characters.
const MAX_REASON: usize = 256;

/// Why a publishing connection failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ClientError {
    /// S0 names another version (e.g. 6, RTMPE).
    #[error("server answered with RTMP version {0}")]
    Version(u8),
    /// A malformed chunk stream, or a media message too long to send.
    #[error(transparent)]
    Chunk(#[from] ChunkError),
    /// A malformed AMF0 command.
    #[error("command: {0}")]
    Amf0(#[from] Amf0Error),
    /// A message that breaks the protocol (missing fields, bad lengths).
    #[error("{0}")]
    Protocol(String),
    /// The server refused `connect`, `createStream` or `publish`: its status code and
    /// description.
    #[error("refused by the server: {0}")]
    Refused(String),
    /// Media or data sent while not publishing.
    #[error("not publishing")]
    NotPublishing,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for S0 and S1.
    S0S1,
    /// Waiting for S2.
    S2,
    /// `connect` sent.
    Connecting,
    /// `createStream` sent.
    CreatingStream,
    /// `publish` sent.
    PublishRequested,
    /// `NetStream.Publish.Start` received.
    Publishing,
    /// [`ClientSession::close`] called.
    Closed,
}

/// One RTMP publishing connection, client side.
#[derive(Debug)]
pub struct ClientSession {
    app: String,
    tc_url: String,
    stream_name: String,
    state: State,
    input: Vec<u8>,
    output: Vec<u8>,
    /// Bytes handed out by `take_output`.
    sent: u64,
    reader: ChunkReader,
    writer: ChunkWriter,
    /// The message stream `createStream` gave.
    stream_id: Option<u32>,
    /// Bytes received since the handshake.
    received: u64,
    /// The server's window acknowledgement size (0: none asked).
    peer_window: u32,
    /// `received` when we last acknowledged.
    acked: u64,
    /// The window acknowledgement size we last announced (0: none).
    announced_window: u32,
    /// The error that ended the session.
    error: Option<ClientError>,
}

/// The server's reason from a status object: `code: description`.
fn reason(info: Option<&Value>, fallback: &str) -> String {
    let field = |k: &str| info.and_then(|i| i.get(k)).and_then(Value::as_str);
    let text = match (field("code"), field("description")) {
        (Some(c), Some(d)) if !d.is_empty() => format!("{c}: {d}"),
        (Some(c), _) => c.to_string(),
        (None, Some(d)) => d.to_string(),
        (None, None) => fallback.to_string(),
    };
    text.chars().take(MAX_REASON).collect()
}

impl ClientSession {
    /// A connection about to publish `stream_name` (the stream key, which may carry a
    /// `?query`) to application `app` at `tc_url` (e.g. `rtmp://host/live`). The output
    /// already holds C0 and C1; `seed` fills C1's random bytes (they need not be secret:
    /// the plain handshake has no cryptographic role).
    pub fn new(app: &str, tc_url: &str, stream_name: &str, seed: u64) -> Self {
        let mut output = Vec::with_capacity(1 + HANDSHAKE_SIZE);
        output.push(VERSION);
        // C1: time 0 (no clock here), zero 0, then pseudo-random bytes (xorshift64).
        output.extend_from_slice(&[0; 8]);
        let mut x = seed | 1;
        for _ in 0..(HANDSHAKE_SIZE - 8) / 8 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            output.extend_from_slice(&x.to_le_bytes());
        }
        ClientSession {
            app: app.to_string(),
            tc_url: tc_url.to_string(),
            stream_name: stream_name.to_string(),
            state: State::S0S1,
            input: Vec::new(),
            output,
            sent: 0,
            reader: ChunkReader::new(),
            writer: ChunkWriter::new(),
            stream_id: None,
            received: 0,
            peer_window: 0,
            acked: 0,
            announced_window: 0,
            error: None,
        }
    }

    /// Bytes waiting to be sent; empties the buffer.
    pub fn take_output(&mut self) -> Vec<u8> {
        let out = std::mem::take(&mut self.output);
        self.sent += out.len() as u64;
        out
    }

    /// Bytes handed out by [`ClientSession::take_output`] so far, handshake included.
    pub fn bytes_sent(&self) -> u64 {
        self.sent
    }

    /// Whether the server confirmed the publish (`NetStream.Publish.Start`) and
    /// [`ClientSession::close`] was not called.
    pub fn is_publishing(&self) -> bool {
        self.state == State::Publishing
    }

    /// The message stream id `createStream` gave, once it has.
    pub fn stream_id(&self) -> Option<u32> {
        self.stream_id
    }

    /// Bytes held for an incomplete handshake packet or chunk, and unfinished messages.
    pub fn buffered(&self) -> usize {
        self.input.len() + self.reader.buffered()
    }

    /// Feeds bytes from the socket. After an error the session is unusable (every later
    /// call returns the same error): close the connection.
    pub fn push(&mut self, input: &[u8]) -> Result<(), ClientError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        self.input.extend_from_slice(input);
        let mut pos = 0;
        let res = self.parse(&mut pos);
        self.input.drain(..pos.min(self.input.len()));
        if let Err(e) = &res {
            self.error = Some(e.clone());
            self.input = Vec::new();
        }
        res
    }

    fn parse(&mut self, pos: &mut usize) -> Result<(), ClientError> {
        loop {
            let rest = &self.input[*pos..];
            match self.state {
                State::S0S1 => {
                    let Some(s) = rest.get(..1 + HANDSHAKE_SIZE) else {
                        return Ok(());
                    };
                    if s[0] != VERSION {
                        return Err(ClientError::Version(s[0]));
                    }
                    // C2: S1 echoed.
                    self.output.extend_from_slice(&s[1..]);
                    *pos += 1 + HANDSHAKE_SIZE;
                    self.state = State::S2;
                }
                State::S2 => {
                    if rest.len() < HANDSHAKE_SIZE {
                        return Ok(());
                    }
                    *pos += HANDSHAKE_SIZE;
                    self.connect();
                }
                _ => {
                    let Some((n, msg)) = self.reader.read_chunk(rest)? else {
                        return Ok(());
                    };
                    *pos += n;
                    self.received += n as u64;
                    if self.peer_window > 0
                        && self.received - self.acked >= u64::from(self.peer_window)
                    {
                        self.acked = self.received;
                        // The sequence number wraps at 2^32.
                        let seq = (self.received as u32).to_be_bytes();
                        self.send(CSID_CONTROL, MSG_ACK, 0, &seq);
                    }
                    if let Some(m) = msg {
                        self.message(m)?;
                    }
                }
            }
        }
    }

    /// After the handshake: our chunk size, then `connect`.
    fn connect(&mut self) {
        self.send(
            CSID_CONTROL,
            MSG_SET_CHUNK_SIZE,
            0,
            &CLIENT_CHUNK_SIZE.to_be_bytes(),
        );
        self.writer.set_chunk_size(CLIENT_CHUNK_SIZE);
        let props = object([
            ("app", Value::String(self.app.clone())),
            ("type", Value::String("nonprivate".into())),
            ("flashVer", Value::String(FLASH_VER.into())),
            ("tcUrl", Value::String(self.tc_url.clone())),
        ]);
        self.command(
            CSID_COMMAND,
            0,
            &[
                Value::String("connect".into()),
                Value::Number(f64::from(TXN_CONNECT)),
                props,
            ],
        );
        self.state = State::Connecting;
    }

    fn send(&mut self, csid: u32, type_id: u8, stream_id: u32, payload: &[u8]) {
        // Our own control messages and commands are small (the names come from the
        // caller; one longer than 16 MiB is dropped): the writer cannot fail on them.
        let _ = self
            .writer
            .write(csid, 0, type_id, stream_id, payload, &mut self.output);
    }

    fn command(&mut self, csid: u32, stream_id: u32, values: &[Value]) {
        let mut body = Vec::new();
        for v in values {
            // Our values have short keys; long strings become AMF0 long strings.
            let _ = amf0::encode(v, &mut body);
        }
        self.send(csid, MSG_COMMAND_AMF0, stream_id, &body);
    }

    /// A NetStream or NetConnection command `[name, txn, null, args...]`.
    fn call(&mut self, csid: u32, stream_id: u32, name: &str, txn: u32, args: Vec<Value>) {
        let mut v = vec![
            Value::String(name.into()),
            Value::Number(f64::from(txn)),
            Value::Null,
        ];
        v.extend(args);
        self.command(csid, stream_id, &v);
    }

    fn message(&mut self, m: Message) -> Result<(), ClientError> {
        let bad = |what: &str| ClientError::Protocol(what.to_string());
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
            MSG_SET_PEER_BANDWIDTH => {
                let size = u32_at(&m.payload).ok_or_else(|| bad("short Set Peer Bandwidth"))?;
                if size != self.announced_window {
                    self.announced_window = size;
                    self.send(CSID_CONTROL, MSG_WINDOW_ACK_SIZE, 0, &size.to_be_bytes());
                }
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
            MSG_COMMAND_AMF0 => self.on_command(&m.payload)?,
            MSG_COMMAND_AMF3 => {
                // A format byte (0: AMF0 follows) precedes the command.
                let body = m.payload.get(1..).unwrap_or(&[]);
                self.on_command(body)?;
            }
            // Acknowledgements, data, media, shared objects, aggregates: nothing to do.
            _ => {}
        }
        Ok(())
    }

    fn on_command(&mut self, body: &[u8]) -> Result<(), ClientError> {
        if self.state == State::Closed {
            return Ok(());
        }
        let vals = amf0::decode_all(body)?;
        let name = vals.first().and_then(Value::as_str).unwrap_or_default();
        // Transaction ids are small integers; anything else matches none of ours.
        let txn = vals
            .get(1)
            .and_then(Value::as_f64)
            .filter(|t| (0.0..=f64::from(u32::MAX)).contains(t))
            .map(|t| t as u32);
        let info = vals.get(3);
        match (name, txn) {
            ("_error", Some(TXN_RELEASE_STREAM | TXN_FC_PUBLISH)) => {}
            ("_error", _) => return Err(ClientError::Refused(reason(info, "_error"))),
            ("_result", Some(TXN_CONNECT)) if self.state == State::Connecting => {
                let key = || vec![Value::String(self.stream_name.clone())];
                let (release, fc_publish) = (key(), key());
                self.call(
                    CSID_COMMAND,
                    0,
                    "releaseStream",
                    TXN_RELEASE_STREAM,
                    release,
                );
                self.call(CSID_COMMAND, 0, "FCPublish", TXN_FC_PUBLISH, fc_publish);
                self.call(CSID_COMMAND, 0, "createStream", TXN_CREATE_STREAM, vec![]);
                self.state = State::CreatingStream;
            }
            ("_result", Some(TXN_CREATE_STREAM)) if self.state == State::CreatingStream => {
                let id = info
                    .and_then(Value::as_f64)
                    .filter(|n| (0.0..=f64::from(u32::MAX)).contains(n))
                    .ok_or_else(|| {
                        ClientError::Protocol("createStream result without a stream id".into())
                    })? as u32;
                self.stream_id = Some(id);
                let args = vec![
                    Value::String(self.stream_name.clone()),
                    Value::String("live".into()),
                ];
                self.call(CSID_STREAM, id, "publish", TXN_PUBLISH, args);
                self.state = State::PublishRequested;
            }
            ("onStatus", _) => {
                let field = |k: &str| info.and_then(|i| i.get(k)).and_then(Value::as_str);
                if field("level") == Some("error") {
                    return Err(ClientError::Refused(reason(info, "onStatus error")));
                }
                if field("code") == Some("NetStream.Publish.Start")
                    && self.state == State::PublishRequested
                {
                    self.state = State::Publishing;
                }
            }
            // `onBWDone`, `onFCPublish`, `_result` to releaseStream and FCPublish, `_result`
            // out of turn, `|RtmpSampleAccess`, anything else: ignored.
            _ => {}
        }
        Ok(())
    }

    fn media(&mut self, csid: u32, type_id: u8, ts: u32, body: &[u8]) -> Result<(), ClientError> {
        let sid = match (self.state, self.stream_id) {
            (State::Publishing, Some(sid)) => sid,
            _ => return Err(ClientError::NotPublishing),
        };
        self.writer
            .write(csid, ts, type_id, sid, body, &mut self.output)?;
        Ok(())
    }

    /// Sends a video message: an FLV video tag body (see [`super::flv::avc_nalu`]) with an
    /// absolute timestamp in ms (the decoding time; it may wrap at 2^32). Only while
    /// publishing, else [`ClientError::NotPublishing`]; a body longer than 16 MiB is
    /// [`ChunkError::TooLong`].
    pub fn send_video(&mut self, timestamp_ms: u32, body: &[u8]) -> Result<(), ClientError> {
        self.media(CSID_VIDEO, MSG_VIDEO, timestamp_ms, body)
    }

    /// Sends an audio message: an FLV audio tag body (see [`super::flv::aac_raw`]) with an
    /// absolute timestamp in ms. Same conditions as [`ClientSession::send_video`].
    pub fn send_audio(&mut self, timestamp_ms: u32, body: &[u8]) -> Result<(), ClientError> {
        self.media(CSID_AUDIO, MSG_AUDIO, timestamp_ms, body)
    }

    /// Sends an AMF0 data message (type 18) at timestamp 0, e.g. the
    /// `@setDataFrame`/`onMetaData` body of [`super::flv::metadata`]. Same conditions as
    /// [`ClientSession::send_video`].
    pub fn send_data(&mut self, body: &[u8]) -> Result<(), ClientError> {
        self.media(CSID_STREAM, MSG_DATA_AMF0, 0, body)
    }

    /// Ends the publication: `FCUnpublish` and `deleteStream` once a stream was created
    /// (nothing otherwise). Send the output, then close the connection; media can no
    /// longer be sent and later commands from the server are ignored.
    pub fn close(&mut self) {
        if self.state == State::Closed {
            return;
        }
        self.state = State::Closed;
        let Some(sid) = self.stream_id else {
            return;
        };
        let key = vec![Value::String(self.stream_name.clone())];
        self.call(CSID_COMMAND, 0, "FCUnpublish", TXN_FC_UNPUBLISH, key);
        let id = vec![Value::Number(f64::from(sid))];
        self.call(CSID_COMMAND, 0, "deleteStream", TXN_DELETE_STREAM, id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rtmp::flv::{self, AvcPacketType, VideoTag};
    use crate::rtmp::{Event, ServerSession};
    use crate::test_rng::Rng;

    const APP: &str = "live";
    const URL: &str = "rtmp://127.0.0.1:1935/live";

    /// Passes bytes both ways until neither side has anything to say.
    fn pump(
        c: &mut ClientSession,
        s: &mut ServerSession,
        ev: &mut Vec<Event>,
    ) -> Result<(), ClientError> {
        loop {
            let up = c.take_output();
            let down = s.take_output();
            if up.is_empty() && down.is_empty() {
                return Ok(());
            }
            s.receive(&up, &mut |e| ev.push(e)).expect("server");
            c.push(&down)?;
        }
    }

    fn until_publish(key: &str) -> (ClientSession, ServerSession, Vec<Event>) {
        let mut c = ClientSession::new(APP, URL, key, 3);
        let mut s = ServerSession::new(9);
        let mut ev = Vec::new();
        pump(&mut c, &mut s, &mut ev).expect("pump");
        (c, s, ev)
    }

    #[test]
    fn publishes_to_server_session() {
        let (mut c, mut s, mut ev) = until_publish("cam?token=x");
        assert_eq!(
            ev,
            vec![
                Event::Connect {
                    app: APP.into(),
                    tc_url: Some(URL.into())
                },
                Event::Publish {
                    name: "cam?token=x".into()
                }
            ]
        );
        assert!(!c.is_publishing());
        assert_eq!(c.stream_id(), Some(1));
        assert_eq!(c.send_video(0, &[0x17]), Err(ClientError::NotPublishing));
        s.accept_publish().expect("accept");
        pump(&mut c, &mut s, &mut ev).expect("pump");
        assert!(c.is_publishing());
        assert!(s.is_publishing());
        assert_eq!(c.buffered(), 0);

        ev.clear();
        let record = flv::avc_decoder_record(&[0x67, 0x42, 0xc0, 0x1e, 0xd9], &[0x68, 0xcb]);
        let seq = flv::avc_sequence_header(&record);
        let idr: Vec<u8> = std::iter::once(0x65)
            .chain((0..100_000u32).map(|i| i as u8))
            .collect();
        let key = flv::avc_nalu(true, 0, &flv::avcc_frame(&[&idr]));
        let delta = flv::avc_nalu(false, 33, &flv::avcc_frame(&[&[0x41, 1, 2]]));
        let asc = flv::aac_sequence_header(&[0x12, 0x10]);
        let aac = flv::aac_raw(&[0x21; 300]);
        c.send_data(&flv::metadata(&[("width", 1280.0), ("height", 720.0)]))
            .expect("data");
        c.send_video(0, &seq).expect("video");
        c.send_audio(0, &asc).expect("audio");
        c.send_video(0, &key).expect("video");
        c.send_audio(23, &aac).expect("audio");
        c.send_video(33, &delta).expect("video");
        c.send_audio(46, &aac).expect("audio");
        c.send_video(66, &delta).expect("video");
        // A timestamp going back, and one past the 24-bit field.
        c.send_video(50, &delta).expect("video");
        c.send_video(0x0100_0000, &key).expect("video");
        pump(&mut c, &mut s, &mut ev).expect("pump");
        let video = |timestamp, data: &Vec<u8>| Event::Video {
            timestamp,
            data: data.clone(),
        };
        let audio = |timestamp, data: &Vec<u8>| Event::Audio {
            timestamp,
            data: data.clone(),
        };
        assert_eq!(
            ev,
            vec![
                video(0, &seq),
                audio(0, &asc),
                video(0, &key),
                audio(23, &aac),
                video(33, &delta),
                audio(46, &aac),
                video(66, &delta),
                video(50, &delta),
                video(0x0100_0000, &key),
            ]
        );
        let Event::Video { data, .. } = &ev[2] else {
            unreachable!("checked above")
        };
        let t = VideoTag::parse(data).expect("tag");
        assert_eq!(t.packet_type, AvcPacketType::Nalu);
        assert!(t.keyframe);

        ev.clear();
        let before = c.bytes_sent();
        c.close();
        assert!(!c.is_publishing());
        pump(&mut c, &mut s, &mut ev).expect("pump");
        assert!(c.bytes_sent() > before);
        assert_eq!(ev, vec![Event::Unpublish]);
        assert!(!s.is_publishing());
        assert_eq!(c.send_audio(100, &aac), Err(ClientError::NotPublishing));
    }

    #[test]
    fn rejected_publish_is_refused() {
        let (mut c, mut s, mut ev) = until_publish("busy");
        s.reject_publish("NetStream.Publish.BadName", "Stream busy")
            .expect("reject");
        let err = pump(&mut c, &mut s, &mut ev).expect_err("refused");
        assert_eq!(
            err,
            ClientError::Refused("NetStream.Publish.BadName: Stream busy".into())
        );
        assert!(!c.is_publishing());
        // The session stays failed.
        assert_eq!(c.push(&[]), Err(err));
    }

    /// A scripted server: the other end of the chunk stream, message by message.
    struct Server {
        w: ChunkWriter,
        r: ChunkReader,
        inbox: Vec<u8>,
        /// Chunk bytes sent to the client (after the handshake).
        sent: u64,
    }

    impl Server {
        fn new() -> Self {
            Server {
                w: ChunkWriter::new(),
                r: ChunkReader::new(),
                inbox: Vec::new(),
                sent: 0,
            }
        }

        fn msg(&mut self, c: &mut ClientSession, csid: u32, type_id: u8, sid: u32, p: &[u8]) {
            let mut out = Vec::new();
            self.w
                .write(csid, 0, type_id, sid, p, &mut out)
                .expect("write");
            self.sent += out.len() as u64;
            c.push(&out).expect("client");
        }

        fn command(&mut self, c: &mut ClientSession, sid: u32, vals: &[Value]) {
            let mut body = Vec::new();
            for v in vals {
                amf0::encode(v, &mut body).expect("encode");
            }
            self.msg(c, 3, MSG_COMMAND_AMF0, sid, &body);
        }

        /// The client's messages so far.
        fn read(&mut self, c: &mut ClientSession) -> Vec<Message> {
            self.inbox.extend(c.take_output());
            let mut out = Vec::new();
            while let Some((n, m)) = self.r.read_chunk(&self.inbox).expect("client chunks") {
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

    fn str_at(cmd: &[Value], i: usize) -> Option<&str> {
        cmd.get(i)?.as_str()
    }

    /// Runs the handshake against `c`, feeding S0/S1/S2 in uneven pieces.
    fn handshake(c: &mut ClientSession) -> Vec<u8> {
        let c0c1 = c.take_output();
        assert_eq!(c0c1.len(), 1 + HANDSHAKE_SIZE);
        assert_eq!(c0c1[0], VERSION);
        assert_eq!(&c0c1[1..9], &[0; 8]);
        let mut s = vec![VERSION];
        let s1: Vec<u8> = (0..HANDSHAKE_SIZE).map(|i| (i * 7) as u8).collect();
        s.extend_from_slice(&s1);
        s.extend_from_slice(&c0c1[1..]);
        for piece in s.chunks(500) {
            c.push(&piece[..1]).expect("handshake");
            c.push(&piece[1..]).expect("handshake");
        }
        let out = c.take_output();
        assert_eq!(&out[..HANDSHAKE_SIZE], &s1[..], "C2 echoes S1");
        out[HANDSHAKE_SIZE..].to_vec()
    }

    fn scripted_flow(server_chunk_size: u32) {
        let mut c = ClientSession::new(APP, URL, "key", 5);
        let mut srv = Server::new();
        let after = handshake(&mut c);
        srv.inbox = after;
        let msgs = srv.read(&mut c);
        assert_eq!(msgs[0].type_id, MSG_SET_CHUNK_SIZE);
        assert_eq!(u32_at(&msgs[0].payload), Some(CLIENT_CHUNK_SIZE));
        let cmds = commands(&msgs);
        assert_eq!(cmds.len(), 1);
        assert_eq!(str_at(&cmds[0], 0), Some("connect"));
        assert_eq!(cmds[0][1].as_f64(), Some(1.0));
        let props = &cmds[0][2];
        assert_eq!(props.get("app").and_then(Value::as_str), Some(APP));
        assert_eq!(props.get("tcUrl").and_then(Value::as_str), Some(URL));
        assert_eq!(
            props.get("type").and_then(Value::as_str),
            Some("nonprivate")
        );
        assert_eq!(
            props.get("flashVer").and_then(Value::as_str),
            Some(FLASH_VER)
        );

        // Control: a small window, peer bandwidth, the chunk size, a ping.
        srv.msg(&mut c, 2, MSG_WINDOW_ACK_SIZE, 0, &1000u32.to_be_bytes());
        srv.msg(
            &mut c,
            2,
            MSG_SET_PEER_BANDWIDTH,
            0,
            &[0, 0x4c, 0x4b, 0x40, 2],
        );
        srv.msg(
            &mut c,
            2,
            MSG_SET_CHUNK_SIZE,
            0,
            &server_chunk_size.to_be_bytes(),
        );
        srv.w.set_chunk_size(server_chunk_size);
        srv.msg(&mut c, 2, MSG_USER_CONTROL, 0, &[0, 6, 0, 0, 0x04, 0xd2]);
        let msgs = srv.read(&mut c);
        let was: Vec<_> = msgs
            .iter()
            .filter(|m| m.type_id == MSG_WINDOW_ACK_SIZE)
            .collect();
        assert_eq!(was.len(), 1);
        assert_eq!(u32_at(&was[0].payload), Some(5_000_000));
        let pong = msgs
            .iter()
            .find(|m| m.type_id == MSG_USER_CONTROL)
            .expect("pong");
        assert_eq!(pong.payload, [0, 7, 0, 0, 0x04, 0xd2]);

        // A message cut short by an Abort, on a chunk stream used again afterwards.
        let big = vec![0u8; 70_000];
        let mut part = Vec::new();
        srv.w
            .write(9, 0, MSG_COMMAND_AMF0, 0, &big, &mut part)
            .expect("write");
        part.truncate(12 + server_chunk_size as usize);
        srv.sent += part.len() as u64;
        c.push(&part).expect("partial");
        assert!(c.buffered() > 0);
        srv.msg(&mut c, 2, MSG_ABORT, 0, &9u32.to_be_bytes());
        assert_eq!(c.buffered(), 0);

        // connect's result, made long enough to span chunks and the 1000-byte window.
        let pad = "x".repeat(3000);
        srv.command(
            &mut c,
            0,
            &[
                Value::String("_result".into()),
                Value::Number(1.0),
                object([("fmsVer", Value::String(pad))]),
                object([
                    ("level", Value::String("status".into())),
                    (
                        "code",
                        Value::String("NetConnection.Connect.Success".into()),
                    ),
                ]),
            ],
        );
        let mut body = Vec::new();
        for v in [
            Value::String("onBWDone".into()),
            Value::Number(0.0),
            Value::Null,
        ] {
            amf0::encode(&v, &mut body).expect("encode");
        }
        srv.msg(&mut c, 9, MSG_COMMAND_AMF0, 0, &body);
        let msgs = srv.read(&mut c);
        let acks: Vec<u32> = msgs
            .iter()
            .filter(|m| m.type_id == MSG_ACK)
            .filter_map(|m| u32_at(&m.payload))
            .collect();
        assert!(!acks.is_empty(), "acknowledged");
        assert!(acks.windows(2).all(|w| w[1] - w[0] >= 1000));
        assert!(acks.iter().all(|&a| a >= 1000 && u64::from(a) <= srv.sent));
        let cmds = commands(&msgs);
        let names: Vec<_> = cmds.iter().map(|c| str_at(c, 0)).collect();
        assert_eq!(
            names,
            vec![
                Some("releaseStream"),
                Some("FCPublish"),
                Some("createStream")
            ]
        );
        assert_eq!(str_at(&cmds[0], 3), Some("key"));
        assert_eq!(cmds[2][1].as_f64(), Some(4.0));

        // releaseStream refused (ignored, as ffmpeg does), FCPublish answered, stream 7.
        for (name, txn) in [("_error", 2.0), ("_result", 3.0)] {
            srv.command(
                &mut c,
                0,
                &[
                    Value::String(name.into()),
                    Value::Number(txn),
                    Value::Null,
                    Value::Undefined,
                ],
            );
        }
        srv.command(
            &mut c,
            0,
            &[
                Value::String("_result".into()),
                Value::Number(4.0),
                Value::Null,
                Value::Number(7.0),
            ],
        );
        let msgs = srv.read(&mut c);
        let cmds = commands(&msgs);
        assert_eq!(cmds.len(), 1);
        assert_eq!(str_at(&cmds[0], 0), Some("publish"));
        assert_eq!(cmds[0][1].as_f64(), Some(5.0));
        assert_eq!(str_at(&cmds[0], 3), Some("key"));
        assert_eq!(str_at(&cmds[0], 4), Some("live"));
        assert_eq!(msgs.last().map(|m| m.stream_id), Some(7));
        assert_eq!(c.stream_id(), Some(7));

        assert!(!c.is_publishing());
        srv.command(
            &mut c,
            7,
            &[
                Value::String("onStatus".into()),
                Value::Number(0.0),
                Value::Null,
                object([
                    ("level", Value::String("status".into())),
                    ("code", Value::String("NetStream.Publish.Start".into())),
                ]),
            ],
        );
        assert!(c.is_publishing());
        let frame = vec![0x27; 10_000];
        c.send_video(33, &frame).expect("video");
        c.send_data(&flv::metadata(&[("framerate", 30.0)]))
            .expect("data");
        let msgs = srv.read(&mut c);
        assert_eq!(msgs.len(), 2);
        assert_eq!(
            (msgs[0].type_id, msgs[0].timestamp, msgs[0].stream_id),
            (MSG_VIDEO, 33, 7)
        );
        assert_eq!(msgs[0].payload, frame);
        assert_eq!((msgs[1].type_id, msgs[1].stream_id), (MSG_DATA_AMF0, 7));

        c.close();
        let cmds = commands(&srv.read(&mut c));
        assert_eq!(str_at(&cmds[0], 0), Some("FCUnpublish"));
        assert_eq!(str_at(&cmds[1], 0), Some("deleteStream"));
        assert_eq!(cmds[1][3].as_f64(), Some(7.0));
    }

    #[test]
    fn scripted_server_chunk_size_128() {
        scripted_flow(128);
    }

    #[test]
    fn scripted_server_chunk_size_60000() {
        scripted_flow(60_000);
    }

    #[test]
    fn connect_error_is_refused() {
        let mut c = ClientSession::new(APP, URL, "key", 5);
        let mut srv = Server::new();
        srv.inbox = handshake(&mut c);
        srv.read(&mut c);
        let mut body = Vec::new();
        for v in [
            Value::String("_error".into()),
            Value::Number(1.0),
            Value::Null,
            object([
                ("level", Value::String("error".into())),
                (
                    "code",
                    Value::String("NetConnection.Connect.Rejected".into()),
                ),
            ]),
        ] {
            amf0::encode(&v, &mut body).expect("encode");
        }
        let mut out = Vec::new();
        srv.w
            .write(3, 0, MSG_COMMAND_AMF0, 0, &body, &mut out)
            .expect("write");
        assert_eq!(
            c.push(&out),
            Err(ClientError::Refused(
                "NetConnection.Connect.Rejected".into()
            ))
        );
    }

    #[test]
    fn bad_handshake_and_bad_chunks() {
        let mut c = ClientSession::new(APP, URL, "key", 5);
        let mut s0s1 = vec![6u8];
        s0s1.extend([0u8; HANDSHAKE_SIZE]);
        assert_eq!(c.push(&s0s1), Err(ClientError::Version(6)));
        // A short Set Chunk Size, then a chunk size of 0.
        for payload in [&[0u8, 0][..], &[0, 0, 0, 0]] {
            let mut c = ClientSession::new(APP, URL, "key", 5);
            let mut srv = Server::new();
            srv.inbox = handshake(&mut c);
            let mut out = Vec::new();
            srv.w
                .write(2, 0, MSG_SET_CHUNK_SIZE, 0, payload, &mut out)
                .expect("write");
            assert!(c.push(&out).is_err());
        }
        // A message larger than the reader accepts.
        let mut c = ClientSession::new(APP, URL, "key", 5);
        let _ = handshake(&mut c);
        let header = [3, 0, 0, 0, 0xff, 0xff, 0xff, 20, 0, 0, 0, 0];
        assert!(matches!(
            c.push(&header),
            Err(ClientError::Chunk(ChunkError::MessageTooLarge(_)))
        ));
    }

    #[test]
    fn garbage_does_not_panic() {
        let mut rng = Rng(0x5eed);
        // A clean transcript of what ServerSession sends, to mutate.
        let mut c = ClientSession::new(APP, URL, "k", 1);
        let mut s = ServerSession::new(2);
        let mut transcript = Vec::new();
        loop {
            let up = c.take_output();
            let down = s.take_output();
            if up.is_empty() && down.is_empty() {
                break;
            }
            s.receive(&up, &mut |_| {}).expect("server");
            transcript.extend_from_slice(&down);
            c.push(&down).expect("client");
        }
        s.accept_publish().expect("accept");
        transcript.extend(s.take_output());
        let hs = 1 + 2 * HANDSHAKE_SIZE;
        for round in 0..300 {
            let mut c = ClientSession::new(APP, URL, "k", round);
            let input = match round % 3 {
                // Pure noise.
                0 => {
                    let n = rng.below(5000);
                    rng.bytes(n)
                }
                // A good handshake, then noise.
                1 => {
                    let mut b = transcript[..hs].to_vec();
                    let n = rng.below(3000);
                    b.extend(rng.bytes(n));
                    b
                }
                // The transcript with a few bytes changed.
                _ => {
                    let mut b = transcript.clone();
                    for _ in 0..1 + rng.below(4) {
                        let i = hs + rng.below(b.len() - hs);
                        b[i] = rng.next() as u8;
                    }
                    b
                }
            };
            let mut rest = &input[..];
            while !rest.is_empty() {
                let n = (1 + rng.below(700)).min(rest.len());
                if c.push(&rest[..n]).is_err() {
                    break;
                }
                rest = &rest[n..];
                let _ = c.take_output();
                let _ = c.send_video(round as u32, &[0x17, 1, 0, 0, 0]);
            }
            assert!(c.buffered() <= input.len());
            c.close();
        }
    }
}

//! The RTMP chunk stream: messages cut into chunks, each with a basic header (format and
//! chunk stream id) and a message header of 11, 7, 3 or 0 bytes (formats 0 to 3), plus an
//! extended timestamp when the 24-bit field is saturated.
//!
//! Header compression follows what ffmpeg and librtmp write and read: a format 1 or 2
//! header carries a timestamp delta; a format 3 header that starts a message repeats the
//! previous timestamp *field* of its chunk stream (the absolute timestamp after a format 0
//! header, the delta after a format 1 or 2 one); a format 3 continuation chunk repeats the
//! extended timestamp when the message's header had one.
//!
//! [`ChunkReader::read_chunk`] parses one chunk at a time from the front of a buffer and
//! changes nothing until the whole chunk is there, so a caller can feed it whatever the
//! socket returned. Memory is bounded: at most [`MAX_CHUNK_STREAMS`] chunk streams, messages
//! of at most [`MAX_MESSAGE_LEN`] bytes and [`MAX_BUFFERED`] bytes of partial messages in
//! all; anything beyond is an error, and a malformed stream is an error, never a panic.

use thiserror::Error;

/// Chunk size both sides start with (RTMP 1.0 §5.4.1).
pub const DEFAULT_CHUNK_SIZE: u32 = 128;
/// Largest chunk size accepted from a peer. A message cannot exceed 2^24 - 1 bytes, so a
/// larger chunk size changes nothing.
pub const MAX_CHUNK_SIZE: u32 = 0x00ff_ffff;
/// Largest message accepted: 8 MiB, above the largest keyframe a 4K encoder sends.
pub const MAX_MESSAGE_LEN: u32 = 8 << 20;
/// Most chunk streams a peer may open (encoders use 3 to 6).
pub const MAX_CHUNK_STREAMS: usize = 64;
/// Most bytes of unfinished messages held over all chunk streams.
pub const MAX_BUFFERED: usize = 16 << 20;

/// A malformed or oversized chunk stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ChunkError {
    /// A format 1, 2 or 3 header on a chunk stream that has had no format 0 header.
    #[error("chunk stream {0} continues a message header it never sent")]
    NoPreviousHeader(u32),
    /// A new message header on a chunk stream whose previous message is not complete.
    #[error("chunk stream {0} starts a message before finishing the previous one")]
    Interleaved(u32),
    /// More chunk streams than [`MAX_CHUNK_STREAMS`].
    #[error("too many chunk streams")]
    TooManyStreams,
    /// A message longer than [`MAX_MESSAGE_LEN`].
    #[error("message of {0} bytes is too large")]
    MessageTooLarge(u32),
    /// More than [`MAX_BUFFERED`] bytes of unfinished messages.
    #[error("too many bytes of unfinished messages")]
    TooMuchBuffered,
    /// A chunk size of 0, with the top bit set, or above [`MAX_CHUNK_SIZE`].
    #[error("invalid chunk size {0}")]
    BadChunkSize(u32),
    /// A message too long for the 24-bit length field (writer).
    #[error("message too long to send")]
    TooLong,
}

/// A complete RTMP message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Chunk stream it arrived on.
    pub csid: u32,
    /// Timestamp in milliseconds (wraps at 2^32).
    pub timestamp: u32,
    /// Message type id (1-6 protocol control, 8 audio, 9 video, 18/20 AMF0 data/command).
    pub type_id: u8,
    /// Message stream id.
    pub stream_id: u32,
    /// Body.
    pub payload: Vec<u8>,
}

#[derive(Debug, Default)]
struct ReadState {
    csid: u32,
    /// Absolute timestamp of the current or last message.
    timestamp: u32,
    /// Last timestamp field: absolute after format 0, delta after 1 and 2.
    ts_field: u32,
    length: u32,
    type_id: u8,
    stream_id: u32,
    /// The last format 0-2 header had an extended timestamp.
    extended: bool,
    /// The unfinished message (empty between messages).
    payload: Vec<u8>,
    /// A message is being assembled (its length may be 0 bytes so far).
    open: bool,
}

/// Reassembles messages from chunks.
#[derive(Debug)]
pub struct ChunkReader {
    chunk_size: u32,
    streams: Vec<ReadState>,
    buffered: usize,
}

impl Default for ChunkReader {
    fn default() -> Self {
        Self::new()
    }
}

fn be24(b: &[u8]) -> u32 {
    u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2])
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

impl ChunkReader {
    /// A reader at the default chunk size.
    pub fn new() -> Self {
        ChunkReader {
            chunk_size: DEFAULT_CHUNK_SIZE,
            streams: Vec::new(),
            buffered: 0,
        }
    }

    /// The peer's chunk size.
    pub fn chunk_size(&self) -> u32 {
        self.chunk_size
    }

    /// Applies a Set Chunk Size message from the peer.
    pub fn set_chunk_size(&mut self, size: u32) -> Result<(), ChunkError> {
        if size == 0 || size > MAX_CHUNK_SIZE {
            return Err(ChunkError::BadChunkSize(size));
        }
        self.chunk_size = size;
        Ok(())
    }

    /// Applies an Abort message: drops the unfinished message of a chunk stream.
    pub fn abort(&mut self, csid: u32) {
        if let Some(s) = self.streams.iter_mut().find(|s| s.csid == csid) {
            self.buffered -= s.payload.len();
            s.payload = Vec::new();
            s.open = false;
        }
    }

    /// Bytes of unfinished messages held.
    pub fn buffered(&self) -> usize {
        self.buffered
    }

    /// Parses one chunk from the front of `input`.
    ///
    /// Returns `Ok(None)` when `input` does not hold a whole chunk yet (nothing is
    /// consumed), else the number of bytes consumed and the message the chunk completed.
    pub fn read_chunk(
        &mut self,
        input: &[u8],
    ) -> Result<Option<(usize, Option<Message>)>, ChunkError> {
        // Basic header.
        let Some(&b0) = input.first() else {
            return Ok(None);
        };
        let fmt = b0 >> 6;
        let (csid, mut pos) = match b0 & 0x3f {
            0 => match input.get(1) {
                Some(&b) => (64 + u32::from(b), 2),
                None => return Ok(None),
            },
            1 => match input.get(1..3) {
                Some(b) => (64 + u32::from(b[0]) + 256 * u32::from(b[1]), 3),
                None => return Ok(None),
            },
            id => (u32::from(id), 1),
        };
        let idx = self.streams.iter().position(|s| s.csid == csid);
        let prev = idx.map(|i| &self.streams[i]);
        if fmt != 0 && prev.is_none() {
            return Err(ChunkError::NoPreviousHeader(csid));
        }
        let open = prev.is_some_and(|p| p.open);
        if open && fmt != 3 {
            return Err(ChunkError::Interleaved(csid));
        }
        // Message header.
        let hlen = [11, 7, 3, 0][usize::from(fmt)];
        let Some(h) = input.get(pos..pos + hlen) else {
            return Ok(None);
        };
        pos += hlen;
        let field24 = if fmt < 3 { be24(h) } else { 0 };
        let extended = if fmt < 3 {
            field24 == 0x00ff_ffff
        } else {
            prev.is_some_and(|p| p.extended)
        };
        let mut field = field24;
        if extended {
            let Some(e) = input.get(pos..pos + 4) else {
                return Ok(None);
            };
            field = be32(e);
            pos += 4;
        }
        // The header of the message this chunk belongs to.
        let (timestamp, ts_field, length, type_id, stream_id) = match (fmt, prev) {
            (0, _) => (
                field,
                field,
                be24(&h[3..6]),
                h[6],
                u32::from_le_bytes([h[7], h[8], h[9], h[10]]),
            ),
            (1, Some(p)) => (
                p.timestamp.wrapping_add(field),
                field,
                be24(&h[3..6]),
                h[6],
                p.stream_id,
            ),
            (2, Some(p)) => (
                p.timestamp.wrapping_add(field),
                field,
                p.length,
                p.type_id,
                p.stream_id,
            ),
            (_, Some(p)) if p.open => (p.timestamp, p.ts_field, p.length, p.type_id, p.stream_id),
            (_, Some(p)) => {
                // A new message with a format 3 header: the previous field again (read
                // from the extended timestamp when there is one).
                let f = if extended { field } else { p.ts_field };
                (
                    p.timestamp.wrapping_add(f),
                    f,
                    p.length,
                    p.type_id,
                    p.stream_id,
                )
            }
            (_, None) => return Err(ChunkError::NoPreviousHeader(csid)),
        };
        if length > MAX_MESSAGE_LEN {
            return Err(ChunkError::MessageTooLarge(length));
        }
        let have = prev.filter(|p| p.open).map_or(0, |p| p.payload.len());
        let want = (length as usize - have).min(self.chunk_size as usize);
        let Some(data) = input.get(pos..pos + want) else {
            return Ok(None);
        };
        pos += want;
        // The whole chunk is here: commit.
        let done = have + want == length as usize;
        if !done && self.buffered + want > MAX_BUFFERED {
            return Err(ChunkError::TooMuchBuffered);
        }
        let i = match idx {
            Some(i) => i,
            None => {
                if self.streams.len() >= MAX_CHUNK_STREAMS {
                    return Err(ChunkError::TooManyStreams);
                }
                self.streams.push(ReadState {
                    csid,
                    ..ReadState::default()
                });
                self.streams.len() - 1
            }
        };
        let s = &mut self.streams[i];
        s.timestamp = timestamp;
        s.ts_field = ts_field;
        s.length = length;
        s.type_id = type_id;
        s.stream_id = stream_id;
        if fmt < 3 {
            s.extended = extended;
        }
        if done {
            let mut payload = std::mem::take(&mut s.payload);
            self.buffered -= payload.len();
            payload.extend_from_slice(data);
            s.open = false;
            let msg = Message {
                csid,
                timestamp,
                type_id,
                stream_id,
                payload,
            };
            return Ok(Some((pos, Some(msg))));
        }
        s.payload.extend_from_slice(data);
        s.open = true;
        self.buffered += want;
        Ok(Some((pos, None)))
    }
}

#[derive(Debug, Clone, Copy)]
struct WriteState {
    csid: u32,
    timestamp: u32,
    ts_field: u32,
    length: u32,
    type_id: u8,
    stream_id: u32,
}

/// Cuts messages into chunks, compressing headers (formats 1-3) where the previous
/// message on the same chunk stream allows it.
#[derive(Debug)]
pub struct ChunkWriter {
    chunk_size: u32,
    streams: Vec<WriteState>,
}

impl Default for ChunkWriter {
    fn default() -> Self {
        Self::new()
    }
}

fn basic_header(fmt: u8, csid: u32, out: &mut Vec<u8>) {
    let f = fmt << 6;
    match csid {
        2..=63 => out.push(f | csid as u8),
        64..=319 => out.extend_from_slice(&[f, (csid - 64) as u8]),
        _ => {
            let c = csid.saturating_sub(64).min(0xffff);
            out.extend_from_slice(&[f | 1, c as u8, (c >> 8) as u8]);
        }
    }
}

fn put24(v: u32, out: &mut Vec<u8>) {
    out.extend_from_slice(&v.to_be_bytes()[1..]);
}

impl ChunkWriter {
    /// A writer at the default chunk size.
    pub fn new() -> Self {
        ChunkWriter {
            chunk_size: DEFAULT_CHUNK_SIZE,
            streams: Vec::new(),
        }
    }

    /// Our chunk size: call after sending Set Chunk Size (values outside 1..=2^24-1 are
    /// clamped into that range).
    pub fn set_chunk_size(&mut self, size: u32) {
        self.chunk_size = size.clamp(1, MAX_CHUNK_SIZE);
    }

    /// Appends the chunks of one message to `out`. `csid` must be in 2..=65599.
    pub fn write(
        &mut self,
        csid: u32,
        timestamp: u32,
        type_id: u8,
        stream_id: u32,
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), ChunkError> {
        let length = u32::try_from(payload.len())
            .ok()
            .filter(|&l| l <= 0x00ff_ffff)
            .ok_or(ChunkError::TooLong)?;
        let prev = self.streams.iter().position(|s| s.csid == csid);
        let (fmt, field) = match prev.map(|i| self.streams[i]) {
            Some(p) if p.stream_id == stream_id && timestamp >= p.timestamp => {
                let delta = timestamp - p.timestamp;
                if p.length != length || p.type_id != type_id {
                    (1, delta)
                } else if delta != p.ts_field {
                    (2, delta)
                } else {
                    (3, delta)
                }
            }
            _ => (0, timestamp),
        };
        let st = WriteState {
            csid,
            timestamp,
            ts_field: field,
            length,
            type_id,
            stream_id,
        };
        match prev {
            Some(i) => self.streams[i] = st,
            None => self.streams.push(st),
        }
        let extended = field >= 0x00ff_ffff;
        basic_header(fmt, csid, out);
        if fmt < 3 {
            put24(field.min(0x00ff_ffff), out);
        }
        if fmt < 2 {
            put24(length, out);
            out.push(type_id);
        }
        if fmt == 0 {
            out.extend_from_slice(&stream_id.to_le_bytes());
        }
        if extended {
            out.extend_from_slice(&field.to_be_bytes());
        }
        let mut chunks = payload.chunks(self.chunk_size as usize);
        if let Some(first) = chunks.next() {
            out.extend_from_slice(first);
        }
        for c in chunks {
            basic_header(3, csid, out);
            if extended {
                out.extend_from_slice(&field.to_be_bytes());
            }
            out.extend_from_slice(c);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(r: &mut ChunkReader, mut input: &[u8]) -> Vec<Message> {
        let mut out = Vec::new();
        while let Some((n, m)) = r.read_chunk(input).expect("valid chunk") {
            input = &input[n..];
            out.extend(m);
        }
        assert!(input.is_empty(), "{} bytes left", input.len());
        out
    }

    fn msg(csid: u32, timestamp: u32, type_id: u8, stream_id: u32, len: usize) -> Message {
        Message {
            csid,
            timestamp,
            type_id,
            stream_id,
            payload: (0..len)
                .map(|i| (i * 7 + timestamp as usize) as u8)
                .collect(),
        }
    }

    #[test]
    fn writer_and_reader_agree_on_every_format() {
        let msgs = vec![
            msg(3, 0, 20, 0, 200),
            msg(4, 0, 9, 1, 5000),
            msg(4, 33, 9, 1, 300),          // fmt 1: other length
            msg(4, 66, 9, 1, 300),          // fmt 3: same delta, length, type
            msg(4, 100, 9, 1, 300),         // fmt 2: other delta
            msg(4, 100, 9, 1, 300),         // fmt 2: delta 0
            msg(5, 0x0100_0000, 8, 1, 10),  // extended timestamp
            msg(5, 0x0100_0040, 8, 1, 400), // fmt 1 with a small delta
            msg(5, 0x0200_0040, 8, 1, 400), // extended delta, continuation chunks
            msg(70, 7, 8, 1, 0),            // two-byte basic header, empty message
            msg(400, 7, 18, 1, 1),          // three-byte basic header
            msg(4, 50, 9, 1, 10),           // backwards: fmt 0
        ];
        for chunk_size in [1, 128, 4096] {
            let mut w = ChunkWriter::new();
            w.set_chunk_size(chunk_size);
            let mut bytes = Vec::new();
            for m in &msgs {
                w.write(
                    m.csid,
                    m.timestamp,
                    m.type_id,
                    m.stream_id,
                    &m.payload,
                    &mut bytes,
                )
                .expect("write");
            }
            let mut r = ChunkReader::new();
            r.set_chunk_size(chunk_size).expect("chunk size");
            assert_eq!(read_all(&mut r, &bytes), msgs, "chunk size {chunk_size}");
            // Fed one byte more at a time, the reader waits and yields the same.
            let mut r = ChunkReader::new();
            r.set_chunk_size(chunk_size).expect("chunk size");
            let mut got = Vec::new();
            let mut start = 0;
            for end in 0..=bytes.len() {
                while let Some((n, m)) = r.read_chunk(&bytes[start..end]).expect("valid") {
                    start += n;
                    got.extend(m);
                }
            }
            assert_eq!(got, msgs);
            assert_eq!(r.buffered(), 0);
        }
    }

    #[test]
    fn interleaved_chunk_streams() {
        // Audio and video messages interleaved chunk by chunk, as encoders do.
        let mut w = ChunkWriter::new();
        let a = msg(4, 10, 8, 1, 300);
        let v = msg(6, 10, 9, 1, 300);
        let (mut ab, mut vb) = (Vec::new(), Vec::new());
        w.write(4, 10, 8, 1, &a.payload, &mut ab).expect("w");
        w.write(6, 10, 9, 1, &v.payload, &mut vb).expect("w");
        // Each is 12 + 128, 1 + 128, 1 + 44 bytes.
        let split = |b: &[u8]| vec![b[..140].to_vec(), b[140..269].to_vec(), b[269..].to_vec()];
        let (sa, sv) = (split(&ab), split(&vb));
        let mut bytes = Vec::new();
        for i in 0..3 {
            bytes.extend_from_slice(&sa[i]);
            bytes.extend_from_slice(&sv[i]);
        }
        let mut r = ChunkReader::new();
        assert_eq!(read_all(&mut r, &bytes), vec![a, v]);
    }

    #[test]
    fn malformed_streams_are_errors() {
        let mut r = ChunkReader::new();
        // fmt 1 on a fresh chunk stream.
        assert_eq!(
            r.read_chunk(&[0x43, 0, 0, 0, 0, 0, 1, 9]),
            Err(ChunkError::NoPreviousHeader(3))
        );
        // A message above the cap.
        assert_eq!(
            r.read_chunk(&[0x03, 0, 0, 0, 0xff, 0xff, 0xff, 9, 0, 0, 0, 0]),
            Err(ChunkError::MessageTooLarge(0xff_ffff))
        );
        // A new header in the middle of a message.
        let mut r = ChunkReader::new();
        let mut b = vec![0x03, 0, 0, 0, 0, 1, 0, 9, 1, 0, 0, 0];
        b.extend_from_slice(&[0u8; 128]);
        let (n, m) = r.read_chunk(&b).expect("ok").expect("whole chunk");
        assert_eq!((n, m), (b.len(), None));
        assert_eq!(
            r.read_chunk(&[0x43, 0, 0, 0, 0, 0, 1, 9]),
            Err(ChunkError::Interleaved(3))
        );
        assert_eq!(r.set_chunk_size(0), Err(ChunkError::BadChunkSize(0)));
        assert!(r.set_chunk_size(0x8000_0000).is_err());
        // Too many chunk streams.
        let mut r = ChunkReader::new();
        for csid in 0..MAX_CHUNK_STREAMS as u32 {
            let c = 64 + csid;
            let h = [0x00, (c - 64) as u8, 0, 0, 0, 0, 0, 0, 9, 1, 0, 0, 0];
            r.read_chunk(&h).expect("ok").expect("whole");
        }
        assert_eq!(
            r.read_chunk(&[0x00, 200, 0, 0, 0, 0, 0, 0, 9, 1, 0, 0, 0]),
            Err(ChunkError::TooManyStreams)
        );
    }
}

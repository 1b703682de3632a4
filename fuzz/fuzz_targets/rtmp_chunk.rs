//! RTMP ingest: the chunk reader on any bytes, fed in arbitrary pieces; the whole server
//! session (after a good handshake) on the same bytes, with every audio and video body it
//! reports going through the FLV parsers and the AVC packetizer; and the chunk writer's
//! output read back to the same messages. Nothing may panic, buffers stay bounded, and
//! every RTP payload fits the packetizer's limit.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tern_proto::rtmp::chunk::{ChunkReader, ChunkWriter, MAX_BUFFERED};
use tern_proto::rtmp::flv::{AudioSpecificConfig, AudioTag, AvcPacketType, AvcRtp, VideoTag};
use tern_proto::rtmp::{Event, HANDSHAKE_SIZE, ServerSession, VERSION};

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    // 1. The reader alone, in pieces of `split` bytes.
    let mut r = ChunkReader::new();
    let _ = r.set_chunk_size(u32::from(split).max(1) * 16);
    let mut buf: Vec<u8> = Vec::new();
    'outer: for piece in rest.chunks(usize::from(split).max(1)) {
        buf.extend_from_slice(piece);
        loop {
            match r.read_chunk(&buf) {
                Ok(Some((n, _))) => {
                    assert!(n > 0 && n <= buf.len());
                    buf.drain(..n);
                }
                Ok(None) => break,
                Err(_) => break 'outer,
            }
            assert!(r.buffered() <= MAX_BUFFERED);
        }
    }

    // 2. A server session after a good handshake, then the input.
    let mut s = ServerSession::new(u64::from(split));
    let mut hs = vec![VERSION];
    hs.extend(std::iter::repeat_n(7u8, 2 * HANDSHAKE_SIZE));
    s.receive(&hs, &mut |_| {}).expect("a valid handshake");
    assert!(s.handshake_done());
    let mut avc = AvcRtp::new(1200);
    let mut events = Vec::new();
    for piece in rest.chunks(usize::from(split).max(1)) {
        let res = s.receive(piece, &mut |e| events.push(e));
        for e in events.drain(..) {
            match e {
                Event::Publish { .. } => {
                    let _ = s.accept_publish();
                }
                Event::Video { data, .. } => {
                    if let Ok(t) = VideoTag::parse(&data) {
                        match t.packet_type {
                            AvcPacketType::SequenceHeader => {
                                let _ = avc.set_config(t.body);
                            }
                            AvcPacketType::Nalu => {
                                let _ = avc.frame(t.body, &mut |p, _| assert!(p.len() <= 1200));
                            }
                            AvcPacketType::EndOfSequence => {}
                        }
                    }
                }
                Event::Audio { data, .. } => {
                    if let Ok(t) = AudioTag::parse(&data)
                        && t.sequence_header
                    {
                        let _ = AudioSpecificConfig::parse(t.body);
                    }
                }
                _ => {}
            }
        }
        let _ = s.take_output();
        if res.is_err() {
            break;
        }
    }
    // The body of the input as one video tag and as one audio config, directly.
    let _ = avc.set_config(rest);
    let _ = avc.frame(rest, &mut |p, _| assert!(p.len() <= 1200));
    let _ = AudioSpecificConfig::parse(rest);

    // 3. Writer → reader: messages cut from the input read back the same.
    let mut w = ChunkWriter::new();
    w.set_chunk_size(u32::from(split).max(1));
    let mut bytes = Vec::new();
    let mut sent = Vec::new();
    for (i, m) in rest.chunks(37).enumerate() {
        let csid = 2 + u32::from(m[0] % 60) * 7;
        let ts = u32::from(m.get(1).copied().unwrap_or(0))
            .wrapping_mul(i as u32 + 1)
            .wrapping_mul(1_000_003);
        let type_id = 8 + m.len() as u8 % 2;
        w.write(csid, ts, type_id, 1, m, &mut bytes)
            .expect("small message");
        sent.push((csid, ts, type_id, m.to_vec()));
    }
    let mut r = ChunkReader::new();
    r.set_chunk_size(u32::from(split).max(1))
        .expect("valid size");
    let mut got = Vec::new();
    let mut input = &bytes[..];
    while let Some((n, m)) = r.read_chunk(input).expect("the writer's own chunks") {
        input = &input[n..];
        if let Some(m) = m {
            got.push((m.csid, m.timestamp, m.type_id, m.payload));
        }
    }
    assert!(input.is_empty());
    assert_eq!(got, sent);
});

//! Keyframe detection on VP8, VP9, AV1 and H265 RTP payloads as publishers send them (the
//! payload descriptors of RFC 7741, RFC 9628, the AV1 RTP format and RFC 7798): any bytes
//! give an answer, never a panic; the first byte picks the codec.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tern_proto::codec::VideoCodec;

fuzz_target!(|data: &[u8]| {
    let Some((&which, payload)) = data.split_first() else {
        return;
    };
    let codec = VideoCodec::ALL[usize::from(which) % VideoCodec::ALL.len()];
    let key = codec.is_keyframe(payload);
    // Nothing empty is a keyframe in any codec.
    assert!(!(key && payload.is_empty()));
});

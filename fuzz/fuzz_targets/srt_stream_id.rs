//! SRT stream IDs: parsing any text never panics, and a parsed ID names a stream
//! `app/stream` with exactly one slash and neither part empty.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tern_proto::srt_stream_id::StreamId;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(id) = StreamId::parse(s) {
        assert!(!id.app.is_empty() && !id.stream.is_empty());
        assert!(!id.app.contains('/') && !id.stream.contains('/'));
        assert_eq!(id.key().matches('/').count(), 1);
    }
});

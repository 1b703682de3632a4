//! Forwards: the RTMP publishing client on any bytes a receiver may send (after a good
//! handshake, fed in arbitrary pieces), with sends tried whatever state it reached; and the
//! forward URL parser and its redaction on the same bytes as text. Nothing may panic, the
//! client's buffer stays bounded, and a redacted URL never holds the stream key.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tern_config::{ForwardProtocol, ForwardUrl, redact_forward_url};
use tern_proto::rtmp::HANDSHAKE_SIZE;
use tern_proto::rtmp::chunk::MAX_BUFFERED;
use tern_proto::rtmp::client::ClientSession;

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let mut c = ClientSession::new("live", "rtmp://h:1935/live", "key", u64::from(split));
    let _ = c.take_output();
    let mut hs = vec![3u8];
    hs.extend(std::iter::repeat_n(9u8, 2 * HANDSHAKE_SIZE));
    if c.push(&hs).is_err() {
        return;
    }
    for piece in rest.chunks(usize::from(split).max(1)) {
        let res = c.push(piece);
        assert!(c.buffered() <= MAX_BUFFERED + 2 * HANDSHAKE_SIZE + 1);
        let _ = c.send_video(1, piece);
        let _ = c.send_audio(1, piece);
        let _ = c.take_output();
        if res.is_err() {
            break;
        }
    }
    c.close();
    let _ = c.take_output();

    if let Ok(text) = std::str::from_utf8(rest)
        && let Ok(u) = ForwardUrl::parse(text)
    {
        assert!(u.port > 0);
        let _ = u.tc_url();
        let shown = redact_forward_url(text);
        match u.protocol {
            ForwardProtocol::Rtmp | ForwardProtocol::Rtmps => {
                assert!(shown.ends_with("/***"), "{shown}");
            }
            ForwardProtocol::Srt => {
                if let Some(p) = &u.passphrase {
                    assert!(!shown.contains(&format!("passphrase={p}")), "{shown}");
                }
            }
        }
    }
});

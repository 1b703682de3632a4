//! STUN parser: arbitrary bytes must never panic; every accessor of a parsed message runs.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tern_proto::stun;

fuzz_target!(|data: &[u8]| {
    let Ok(m) = stun::Message::parse(data) else {
        return;
    };
    let _ = (m.class(), m.method(), m.transaction_id(), m.raw());
    let _ = (
        m.username(),
        m.use_candidate(),
        m.priority(),
        m.error_code(),
    );
    let _ = (m.ice_controlling(), m.ice_controlled(), m.mapped_address());
    let _ = m.u32_attr(stun::LIFETIME);
    for ty in [
        stun::XOR_MAPPED_ADDRESS,
        stun::XOR_PEER_ADDRESS,
        stun::XOR_RELAYED_ADDRESS,
    ] {
        let _ = m.xor_address(ty);
    }
    for (ty, v) in m.attrs() {
        assert!(m.attr(ty).is_some());
        let _ = v.len();
    }
    let _ = m.check_integrity(b"key");
    let _ = m.check_fingerprint();
    let _ = format!("{m:?}");

    // Re-encode what was parsed: the writer must accept it or fail cleanly, never panic.
    let mut out = [0u8; 1500];
    if let Ok(mut w) = stun::MessageWriter::new(&mut out, m.class(), m.method(), m.transaction_id())
    {
        let mut written = 0;
        for (ty, v) in m.attrs() {
            if ty == stun::MESSAGE_INTEGRITY || ty == stun::FINGERPRINT {
                continue;
            }
            if w.attr(ty, v).is_err() {
                break;
            }
            written += 1;
        }
        let signed = w.integrity(b"key").and_then(|w| w.fingerprint()).is_ok();
        if signed {
            written += 2;
        }
        let n = w.finish();
        match stun::Message::parse(&out[..n]) {
            Ok(again) if signed => {
                assert!(again.check_integrity(b"key"));
                assert!(again.check_fingerprint());
            }
            Ok(_) => {}
            Err(e) => assert!(
                e == stun::StunError::TooManyAttributes && written > stun::MAX_ATTRS,
                "what the writer wrote does not parse: {e}"
            ),
        }
    }
});

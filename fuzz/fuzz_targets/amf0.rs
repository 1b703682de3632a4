//! AMF0: decoding any bytes never panics, and whatever decodes re-encodes to bytes that
//! decode to the same encoding again (compared as bytes, so NaN numbers count as equal).
#![no_main]
use libfuzzer_sys::fuzz_target;
use tern_proto::rtmp::amf0;

fuzz_target!(|data: &[u8]| {
    let mut input = data;
    while let Ok(v) = amf0::decode(&mut input) {
        let mut once = Vec::new();
        if amf0::encode(&v, &mut once).is_err() {
            continue;
        }
        let back = amf0::decode(&mut &once[..]).expect("own encoding decodes");
        let mut twice = Vec::new();
        amf0::encode(&back, &mut twice).expect("re-encodes");
        assert_eq!(once, twice);
        let _ = (v.as_str(), v.as_f64(), v.get("app"));
    }
    let _ = amf0::decode_all(data);
});

//! RTP header parsing: header fields, payload bounds and every extension id in both forms.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tern_proto::rtp;

fuzz_target!(|data: &[u8]| {
    let _ = rtp::is_rtcp(data);
    if let Ok(h) = rtp::parse_header(data) {
        assert_eq!(
            h.header_len + h.payload_len + usize::from(h.padding),
            data.len()
        );
        assert_eq!(h.payload(data).len(), h.payload_len);
        let _ = h.extension_profile();
        for id in 0..=255u8 {
            if let Some(ext) = h.extension(data, id) {
                assert!(ext.len() <= data.len());
                let _ = rtp::abs_capture_time(ext);
            }
        }
    }
    // Sequence extension never panics and stays within one epoch of the reference.
    if data.len() >= 10 {
        let mut r = [0u8; 8];
        r.copy_from_slice(&data[..8]);
        let reference = u64::from_be_bytes(r);
        let seq = u16::from_be_bytes([data[8], data[9]]);
        let e = rtp::extend_seq(reference, seq);
        assert_eq!(e as u16, seq);
        assert!(e.abs_diff(reference) <= 1 << 16);
        let _ = rtp::ntp_to_unix(reference);
    }
});

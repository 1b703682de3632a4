//! What tern does itself with an RTSP camera's media (retina reads RTSP, the SDP and RTP):
//! the H265 packetizer on any length-prefixed access unit (every payload within the limit,
//! or an error); the H264 pipeline on any avcC record and access units, as a camera's
//! parameter sets and frames reach it; the G.711 transcoder on any bytes. No panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tern_rtc::av::{AvPipeline, TranscodeMode};
use tern_rtc::g711::{G711ToOpus, Law};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let max = 16 + usize::from(sel) * 4;
    let _ = tern_proto::h265::packetize(rest, max, &mut |p, _| assert!(p.len() <= max));
    let _ = tern_proto::h265::split_length_prefixed(rest);

    let cut = rest.len().min(usize::from(sel));
    let (record, frames) = rest.split_at(cut);
    let mut av = AvPipeline::new(1200);
    av.set_transcode(TranscodeMode::Never);
    if av.video_config(record).is_ok() {
        for (i, f) in frames.chunks(64 + usize::from(sel)).enumerate() {
            let t = i as i64 * 33;
            let _ = av.video_frame(0, t, t, i % 4 == 0, f, &mut |_| {});
        }
    }
    let law = if sel & 1 == 0 { Law::Mu } else { Law::A };
    if let Ok(mut g) = G711ToOpus::new(law) {
        for (i, f) in rest.chunks(160).enumerate() {
            let _ = g.push(f, i as u64 * 20, &mut |p, _| assert!(!p.is_empty()));
        }
    }
});

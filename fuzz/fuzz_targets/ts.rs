//! MPEG-TS demuxing: any bytes, pushed in any cuts, never panic; the same bytes cut
//! differently give the same PES packets; every PES is bounded; ADTS splitting of each
//! audio PES (and the Opus control headers of an Opus PES) never panics and its frames lie
//! inside the PES. The same bytes through the SRT publisher's [`TsPublisher`] (H264 and H265
//! access units, AAC, Opus, the timeline) never panic, and its H265 payloads (passed through,
//! parameter sets in front of IRAP pictures) stay within the payload limit.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tern_proto::codec::{MediaKind, VideoCodec};
use tern_proto::ts::{Demuxer, MAX_PES, Pes, TsCodec, adts_frames, opus_packets, opus_samples};
use tern_rtc::av::{AvEvent, TranscodeMode};
use tern_rtc::ts_publisher::TsPublisher;

fn run(data: &[u8], cut: usize) -> Vec<Pes> {
    let mut d = Demuxer::new();
    let mut out = Vec::new();
    for piece in data.chunks(cut.max(1)) {
        d.push(piece, &mut |p| out.push(p));
    }
    d.flush(&mut |p| out.push(p));
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, data)) = data.split_first() else {
        return;
    };
    let whole = run(data, data.len());
    assert_eq!(run(data, usize::from(cut)), whole);
    for p in &whole {
        assert!(p.data.len() <= MAX_PES);
        if p.codec == TsCodec::Aac {
            let (frames, _) = adts_frames(&p.data);
            assert!(frames.iter().map(|(_, f)| f.len()).sum::<usize>() <= p.data.len());
        }
        if p.codec == TsCodec::Opus {
            let (packets, _) = opus_packets(&p.data);
            assert!(packets.iter().map(|f| f.len()).sum::<usize>() <= p.data.len());
            for f in packets {
                assert!(opus_samples(f).is_none_or(|n| n <= 5760));
            }
        }
    }
    let mut publisher = TsPublisher::new(1200);
    publisher.media().set_transcode(TranscodeMode::Never);
    let mut h265_video = Vec::new();
    for piece in data.chunks(usize::from(cut).max(1) * 4) {
        publisher.receive(1 << 40, piece, &mut |e| {
            if let AvEvent::Packet(p) = e
                && p.kind == MediaKind::Video
            {
                h265_video.push(p.payload.len());
            }
        });
    }
    if publisher.video_codec() == Some(VideoCodec::H265) {
        assert!(h265_video.iter().all(|&n| n <= 1200));
    }
});

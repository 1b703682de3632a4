use super::*;

const SAMPLE: &[u8] = include_bytes!("../../../../assets/srt/sample.ts");

fn demux(chunks: &mut dyn Iterator<Item = &[u8]>) -> (Vec<Pes>, TsStats) {
    let mut d = Demuxer::new();
    let mut out = Vec::new();
    for c in chunks {
        d.push(c, &mut |p| out.push(p));
    }
    d.flush(&mut |p| out.push(p));
    (out, d.stats())
}

#[test]
fn sample_demuxes_into_h264_and_adts() {
    let (whole, stats) = demux(&mut std::iter::once(SAMPLE));
    assert_eq!(
        stats.cc_errors + stats.malformed + stats.dropped_pes,
        0,
        "{stats:?}"
    );
    assert_eq!(stats.resync_bytes, 0);
    assert!(stats.last_pcr.is_some());
    let video: Vec<&Pes> = whole.iter().filter(|p| p.codec == TsCodec::H264).collect();
    let audio: Vec<&Pes> = whole.iter().filter(|p| p.codec == TsCodec::Aac).collect();
    assert_eq!(video.len(), 30, "2 s at 15 fps");
    // Every access unit is Annex B with a PTS 6000 ticks (1/15 s) after the last one.
    assert!(video.iter().all(|p| p.data.starts_with(&[0, 0, 0, 1])));
    let pts: Vec<u64> = video.iter().map(|p| p.pts.expect("pts")).collect();
    assert!(pts.windows(2).all(|w| w[1] - w[0] == 6000), "{pts:?}");
    // The audio: ADTS frames of AAC-LC 44.1 kHz stereo, ~2 s of 1024-sample frames.
    let mut frames = 0;
    for a in &audio {
        let (f, clean) = adts_frames(&a.data);
        assert!(clean);
        for (cfg, raw) in f {
            assert_eq!(
                (cfg.object_type, cfg.sample_rate(), cfg.channels),
                (2, Some(44100), 2)
            );
            assert_eq!(cfg.audio_specific_config(), [0x12, 0x10]);
            assert!(!raw.is_empty());
            frames += 1;
        }
    }
    assert!((80..=90).contains(&frames), "{frames} AAC frames");
    assert!(whole.iter().all(|p| !p.discontinuity));
    // Cut anywhere, the same packets come out.
    for size in [1, 100, 1316, 4000] {
        let (pieces, _) = demux(&mut SAMPLE.chunks(size));
        assert_eq!(pieces, whole, "pushed in pieces of {size}");
    }
}

#[test]
fn a_lost_packet_drops_its_pes_and_marks_the_next() {
    let (whole, _) = demux(&mut std::iter::once(SAMPLE));
    // Drop the 40th TS packet of the first video PID.
    let vpid = whole
        .iter()
        .find(|p| p.codec == TsCodec::H264)
        .expect("video")
        .pid;
    let mut seen = 0;
    let mut cut = Vec::new();
    for p in SAMPLE.chunks(PACKET) {
        let pid = u16::from(p[1] & 0x1f) << 8 | u16::from(p[2]);
        if pid == vpid {
            seen += 1;
            if seen == 40 {
                continue;
            }
        }
        cut.extend_from_slice(p);
    }
    let (out, stats) = demux(&mut std::iter::once(&cut[..]));
    assert_eq!(stats.cc_errors, 1);
    assert_eq!(stats.dropped_pes, 1);
    let video: Vec<&Pes> = out.iter().filter(|p| p.codec == TsCodec::H264).collect();
    assert_eq!(video.len(), 29, "one access unit lost");
    assert_eq!(video.iter().filter(|p| p.discontinuity).count(), 1);
    // Audio untouched.
    let audio = |v: &[Pes]| v.iter().filter(|p| p.codec == TsCodec::Aac).count();
    assert_eq!(audio(&out), audio(&whole));
}

#[test]
fn garbage_is_counted_and_skipped() {
    let mut d = Demuxer::new();
    let mut n = 0;
    // Noise, then a valid stream: the demuxer resynchronises.
    let mut input: Vec<u8> = (0..5000u32)
        .map(|i| (i * 7919 % 251) as u8 & 0x46)
        .collect();
    input.extend_from_slice(SAMPLE);
    d.push(&input, &mut |_| n += 1);
    assert!(d.stats().resync_bytes >= 5000);
    assert!(n >= 30, "{n} PES packets after the noise");
    // Broken headers of every kind are counted, never a panic.
    let mut bad = [0x47u8; PACKET];
    bad[3] = 0x30; // adaptation field + payload
    bad[4] = 200; // adaptation field too long
    d.push(&bad, &mut |_| {});
    assert!(d.stats().malformed >= 1);
    let (frames, clean) = adts_frames(&[0xff, 0xf1, 0x50, 0x80, 0xff, 0xff, 0xfc]);
    assert!(frames.is_empty() && !clean, "ADTS length past the end");
}

#[test]
fn opus_control_headers_and_durations() {
    // Two packets: one of 3 bytes, one of 300 bytes with a start trim.
    let mut pes = vec![0x7f, 0xe0, 3, 0xfc, 1, 2];
    pes.extend([0x7f, 0xf0, 0xff, 45, 0, 0]);
    pes.extend(std::iter::repeat_n(0xfcu8, 300));
    let (packets, clean) = opus_packets(&pes);
    assert!(clean);
    assert_eq!(
        packets.iter().map(|p| p.len()).collect::<Vec<_>>(),
        [3, 300]
    );
    // TOC 0xfc: CELT fullband 20 ms, one frame.
    assert_eq!(opus_samples(&[0xfc]), Some(960));
    assert_eq!(opus_samples(&[0xfd]), Some(1920));
    assert_eq!(opus_samples(&[0x03]), None, "code 3 without its count byte");
    let (_, clean) = opus_packets(&[0x7f, 0xe0, 10, 1]);
    assert!(!clean, "size past the end");
}

//! Packager behaviour on synthetic streams: part and segment cutting, the playlist text,
//! the window, the fMP4 bytes parsed back with `mp4-atom`, discontinuities, garbage input.

use mp4_atom::{Codec, Decode, Ftyp, Mdat, Moof, Moov};
use tern_pool::MemoryRegistry;

use super::sps::tests::{PPS_720P_HIGH, SPS_360P_BASELINE, SPS_720P_HIGH};
use super::*;

/// 2026-11-25T16:00:00.000Z.
const WALL0: u64 = 1_795_622_400_000;
/// AAC-LC, 48 kHz, stereo.
const ASC: [u8; 2] = [0x11, 0x90];

fn packager(config: HlsConfig) -> (Packager, PoolCounter) {
    let counter = MemoryRegistry::new().counter("hls_parts", 0);
    (Packager::new(config, counter.clone()), counter)
}

fn aac() -> AudioConfig {
    AudioConfig::Aac {
        asc: ASC.to_vec(),
        sample_rate: 48_000,
        channels: 2,
    }
}

fn h264(sps: &[u8], pps: &[u8]) -> VideoConfig {
    VideoConfig::H264 {
        sps: sps.to_vec(),
        pps: pps.to_vec(),
    }
}

/// A fake access unit in AVCC: AUD, then SPS and PPS on keyframes (in band, to be dropped),
/// then one slice of `len` bytes.
fn avcc_au(keyframe: bool, len: usize) -> Vec<u8> {
    let mut au = Vec::new();
    let mut nal = |bytes: &[u8]| {
        au.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        au.extend_from_slice(bytes);
    };
    nal(&[0x09, 0xf0]);
    if keyframe {
        nal(SPS_720P_HIGH);
        nal(PPS_720P_HIGH);
    }
    let mut slice = vec![if keyframe { 0x65 } else { 0x41 }; len];
    slice[1] = 0x88;
    nal(&slice);
    au
}

/// Composition offset in frames for B-frame order P B B (a P shown after its two B).
fn b_frame_cts(i: i64) -> i64 {
    if i % 3 == 0 { 3 } else { 0 }
}

/// Feeds `secs` of 30 fps video (keyframe every 30 frames, dts from `dts0`) interleaved with
/// 48 kHz AAC frames (pts from `pts0`). Returns the next frame indexes.
struct Feed {
    dts0: i64,
    pts0: i64,
    video: i64,
    audio: i64,
    wall0: u64,
    bframes: bool,
    with_audio: bool,
}

impl Feed {
    fn new(dts0: i64) -> Feed {
        Feed {
            dts0,
            pts0: 7_777,
            video: 0,
            audio: 0,
            wall0: WALL0,
            bframes: false,
            with_audio: true,
        }
    }

    fn run(&mut self, p: &mut Packager, secs: u32) {
        let audio_ms = |k: i64| k * 1024 * 1000 / 48_000;
        for _ in 0..i64::from(secs) * 30 {
            let t_ms = self.video * 1000 / 30;
            let dts = self.dts0 + self.video * 3000;
            let cts = if self.bframes {
                b_frame_cts(self.video) * 3000
            } else {
                0
            };
            let key = self.video % 30 == 0;
            let au = avcc_au(key, if key { 4000 } else { 600 });
            p.push_video(dts, dts + cts, key, &au, self.wall0 + t_ms as u64);
            self.video += 1;
            let next_ms = self.video * 1000 / 30;
            while self.with_audio && audio_ms(self.audio) < next_ms {
                let wall = self.wall0 + audio_ms(self.audio) as u64;
                p.push_audio(self.pts0 + self.audio * 1024, &[0x21; 120], wall);
                self.audio += 1;
            }
        }
    }
}

/// moof, mdat payload and the moof's length, with the data offsets checked against the mdat.
fn parse_part(bytes: &[u8]) -> (Moof, Vec<u8>) {
    let mut buf = bytes;
    let moof = Moof::decode(&mut buf).expect("moof");
    let moof_len = bytes.len() - buf.len();
    let mdat = Mdat::decode(&mut buf).expect("mdat");
    assert!(buf.is_empty(), "nothing after the mdat");
    let mut expected_offset = moof_len + 8;
    for traf in &moof.traf {
        assert!(traf.tfhd.default_base_is_moof);
        assert_eq!(traf.trun.len(), 1);
        let trun = &traf.trun[0];
        assert_eq!(trun.data_offset, Some(expected_offset as i32));
        let sizes: usize = trun
            .samples
            .iter()
            .map(|s| s.size.unwrap_or(0) as usize)
            .sum();
        expected_offset += sizes;
    }
    assert_eq!(
        expected_offset,
        bytes.len(),
        "sample sizes add up to the mdat payload"
    );
    (moof, mdat.data)
}

/// The playlist's lines, with the tags every playlist has checked.
fn playlist_lines(p: &Packager, query: &str) -> Vec<String> {
    let text = p.media_playlist(query).expect("a playlist");
    assert!(text.ends_with('\n'));
    let lines: Vec<String> = text.lines().map(str::to_owned).collect();
    assert_eq!(lines[0], "#EXTM3U");
    assert_eq!(lines[1], "#EXT-X-VERSION:9");
    assert!(lines[2].starts_with("#EXT-X-TARGETDURATION:"));
    assert_eq!(
        lines[3],
        "#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=1.500"
    );
    assert_eq!(lines[4], "#EXT-X-PART-INF:PART-TARGET=0.500");
    assert!(lines[5].starts_with("#EXT-X-MEDIA-SEQUENCE:"));
    assert!(lines.contains(&"#EXT-X-INDEPENDENT-SEGMENTS".to_owned()));
    let suffix = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    for line in &lines {
        if let Some(uri) = line.split("URI=\"").nth(1) {
            let uri = uri.split('"').next().unwrap_or_default();
            assert!(
                uri.ends_with(&format!(".m4s{suffix}")) || uri.ends_with(&format!(".mp4{suffix}")),
                "{line}"
            );
        } else if !line.starts_with('#') {
            assert!(line.ends_with(&format!(".m4s{suffix}")), "{line}");
        }
    }
    lines
}

fn value<'a>(lines: &'a [String], tag: &str) -> Option<&'a str> {
    lines.iter().find_map(|l| l.strip_prefix(tag))
}

#[test]
fn ten_seconds_of_video_and_aac_cut_into_parts_and_segments() {
    let (mut p, counter) = packager(HlsConfig::default());
    p.set_audio(aac());
    p.set_video(h264(SPS_720P_HIGH, PPS_720P_HIGH));
    assert_eq!(p.media_playlist(""), None);
    Feed::new(123_456_789).run(&mut p, 10);

    let complete: Vec<&Segment> = p.segments.iter().filter(|s| s.complete).collect();
    assert_eq!(complete.len(), 4, "segments of 2 s over ~10 s");
    for seg in &complete {
        assert_eq!(
            seg.duration,
            2 * 90_000,
            "segments end at the keyframe at 2 s"
        );
        let (last, others) = seg.parts.split_last().expect("parts");
        for part in others {
            assert!(part.duration <= 45_000 && part.duration >= 45_000 * 85 / 100);
        }
        assert!(last.duration <= 45_000);
        assert!(seg.parts[0].independent, "a segment starts with a keyframe");
        // Keyframes every second: the third part starts with one too.
        let independent: Vec<bool> = seg.parts.iter().map(|p| p.independent).collect();
        assert_eq!(independent, [true, false, true, false]);
    }
    // Parts and their bytes.
    let mut next_video_dts = 0;
    let mut next_audio_dts = None;
    let mut audio_samples = 0;
    let mut sequence = 0;
    for seg in &complete {
        for (i, part) in seg.parts.iter().enumerate() {
            let (moof, payload) = parse_part(&part.data);
            assert!(moof.mfhd.sequence_number > sequence);
            sequence = moof.mfhd.sequence_number;
            let video = &moof.traf[0];
            assert_eq!(video.tfhd.track_id, 1);
            let tfdt = video.tfdt.as_ref().expect("tfdt").base_media_decode_time;
            assert_eq!(tfdt, next_video_dts, "video decode times are contiguous");
            let samples: Vec<_> = video.trun[0].samples.iter().collect();
            assert_eq!(samples.len(), 15);
            next_video_dts += samples
                .iter()
                .map(|s| u64::from(s.duration.unwrap_or(0)))
                .sum::<u64>();
            let flags = samples[0].flags.unwrap_or(0);
            if i % 2 == 0 {
                assert_eq!(flags, 0x0200_0000, "keyframe: depends on nothing");
                // The slice, SPS/PPS/AUD gone: length prefix then the IDR NAL header.
                assert_eq!(&payload[..5], &[0, 0, 0x0f, 0xa0, 0x65]);
            } else {
                assert_eq!(flags, 0x0101_0000, "non-sync, depends on others");
            }
            assert!(
                samples.iter().all(|s| s.cts.is_none()),
                "no B-frames, no offsets"
            );
            if let Some(audio) = moof.traf.get(1) {
                assert_eq!(audio.tfhd.track_id, 2);
                let tfdt = audio.tfdt.as_ref().expect("tfdt").base_media_decode_time;
                if let Some(expected) = next_audio_dts {
                    assert_eq!(tfdt, expected, "audio decode times are contiguous");
                }
                let run = &audio.trun[0].samples;
                audio_samples += run.len();
                assert!(
                    run.iter()
                        .all(|s| s.duration == Some(1024) && s.size == Some(120))
                );
                next_audio_dts = Some(tfdt + 1024 * run.len() as u64);
            }
        }
    }
    assert!(
        audio_samples > 300,
        "audio went into the parts: {audio_samples}"
    );

    // The init segment.
    let init = p.init(1).expect("init1");
    let mut buf = init.as_slice();
    let ftyp = Ftyp::decode(&mut buf).expect("ftyp");
    assert_eq!(ftyp.major_brand, b"iso6".into());
    assert!(ftyp.compatible_brands.contains(&b"cmfc".into()));
    let moov = Moov::decode(&mut buf).expect("moov");
    assert!(buf.is_empty());
    assert_eq!(moov.mvhd.timescale, 1000);
    assert_eq!(moov.trak.len(), 2);
    assert_eq!(moov.mvex.as_ref().map(|m| m.trex.len()), Some(2));
    let video = &moov.trak[0];
    assert_eq!(video.mdia.mdhd.timescale, 90_000);
    let Codec::Avc1(avc1) = &video.mdia.minf.stbl.stsd.codecs[0] else {
        panic!("avc1 expected");
    };
    assert_eq!((avc1.visual.width, avc1.visual.height), (1280, 720));
    assert_eq!(
        avc1.avcc.sequence_parameter_sets,
        vec![SPS_720P_HIGH.to_vec()]
    );
    let audio = &moov.trak[1];
    assert_eq!(audio.mdia.mdhd.timescale, 48_000);
    let Codec::Mp4a(mp4a) = &audio.mdia.minf.stbl.stsd.codecs[0] else {
        panic!("mp4a expected");
    };
    let dec = &mp4a.esds.es_desc.dec_config;
    assert_eq!(dec.object_type_indication, 0x40);
    assert_eq!(
        dec.dec_specific.as_ref().map(|d| d.raw.clone()),
        Some(ASC.to_vec())
    );
    assert_eq!(p.codecs().as_deref(), Some("avc1.64001f,mp4a.40.2"));

    // The playlist.
    let lines = playlist_lines(&p, "session=abc");
    assert_eq!(value(&lines, "#EXT-X-TARGETDURATION:"), Some("2"));
    assert_eq!(value(&lines, "#EXT-X-MEDIA-SEQUENCE:"), Some("0"));
    assert_eq!(value(&lines, "#EXT-X-DISCONTINUITY-SEQUENCE:"), None);
    assert_eq!(lines[7], "#EXT-X-MAP:URI=\"init1.mp4?session=abc\"");
    assert_eq!(
        lines[8],
        "#EXT-X-PROGRAM-DATE-TIME:2026-11-25T16:00:00.000Z"
    );
    assert!(lines.contains(&"#EXT-X-PROGRAM-DATE-TIME:2026-11-25T16:00:06.000Z".to_owned()));
    let extinf: Vec<_> = lines.iter().filter(|l| l.starts_with("#EXTINF:")).collect();
    assert_eq!(extinf, vec!["#EXTINF:2.000,"; 4]);
    assert!(lines.contains(&"3.m4s?session=abc".to_owned()));
    // Parts of the last segments (3 target durations back) and of the one in progress.
    assert!(
        !lines.iter().any(|l| l.contains("\"0.0.m4s")),
        "too old for parts"
    );
    assert!(lines.contains(
        &"#EXT-X-PART:DURATION=0.500,URI=\"3.0.m4s?session=abc\",INDEPENDENT=YES".to_owned()
    ));
    assert!(lines.contains(&"#EXT-X-PART:DURATION=0.500,URI=\"3.1.m4s?session=abc\"".to_owned()));
    let (msn, part) = p.next_part();
    assert_eq!(msn, 4);
    assert_eq!(
        lines.last().map(String::as_str),
        Some(format!("#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"4.{part}.m4s?session=abc\"").as_str())
    );
    assert!(p.has_part(4, part.saturating_sub(1)) || part == 0);
    assert!(!p.has_part(4, part));
    assert!(p.segment(4).is_none(), "in progress");
    assert_eq!(p.segment(3).map(|s| s.len()), Some(4));
    assert_eq!(p.oldest_msn(), Some(0));

    // Accounting.
    let stats = p.stats();
    assert_eq!(stats.segments, 4);
    assert_eq!(counter.report().items_in_use, stats.parts);
    assert_eq!(counter.report().used_bytes, stats.bytes);
    assert_eq!(stats.dropped_samples, 0);
    drop(p);
    assert_eq!(counter.report().used_bytes, 0);
    assert_eq!(counter.report().allocated_bytes, 0);
}

#[test]
fn window_slides_and_buffers_are_reused() {
    let (mut p, counter) = packager(HlsConfig::default());
    p.set_audio(aac());
    p.set_video(h264(SPS_720P_HIGH, PPS_720P_HIGH));
    let mut feed = Feed::new(0);
    feed.run(&mut p, 20);
    let lines = playlist_lines(&p, "");
    assert_eq!(p.stats().segments, 6);
    assert_eq!(value(&lines, "#EXT-X-MEDIA-SEQUENCE:"), Some("3"));
    assert_eq!(p.oldest_msn(), Some(3));
    assert_eq!(lines.iter().filter(|l| l.starts_with("#EXTINF")).count(), 6);
    assert!(p.part(2, 0).is_none() && p.segment(2).is_none());
    assert!(p.part(3, 0).is_some());
    assert!(
        !p.free.is_empty(),
        "evicted part buffers are kept for reuse"
    );
    let version = p.version();
    feed.run(&mut p, 4);
    assert!(p.version() > version);
    assert_eq!(p.oldest_msn(), Some(5));
    assert!(p.free.len() <= 16);
    assert_eq!(counter.report().items_in_use, p.stats().parts);
    let report = counter.report();
    assert!(report.allocated_bytes >= report.used_bytes);
}

#[test]
fn b_frames_give_composition_offsets() {
    let (mut p, _counter) = packager(HlsConfig::default());
    p.set_video(h264(SPS_720P_HIGH, PPS_720P_HIGH));
    let mut feed = Feed::new(-90_000);
    feed.bframes = true;
    feed.with_audio = false;
    feed.run(&mut p, 3);
    let part = p.part(0, 0).expect("first part");
    let (moof, _) = parse_part(&part);
    assert_eq!(moof.traf.len(), 1, "no audio track in use");
    let cts: Vec<i64> = moof.traf[0].trun[0]
        .samples
        .iter()
        .map(|s| s.cts.unwrap_or(-1))
        .collect();
    assert_eq!(&cts[..6], &[9000, 0, 0, 9000, 0, 0]);
}

#[test]
fn timestamp_jump_starts_a_discontinuity() {
    let (mut p, _counter) = packager(HlsConfig::default());
    p.set_audio(aac());
    p.set_video(h264(SPS_720P_HIGH, PPS_720P_HIGH));
    let mut first = Feed::new(5_000_000);
    first.run(&mut p, 3);
    // A new publisher: timestamps restart near zero, first frames are not keyframes.
    let mut second = Feed::new(0);
    second.video = 25;
    second.pts0 = 1_000;
    second.wall0 = WALL0 + 4_000;
    second.run(&mut p, 5);
    let mut third = Feed::new(10_000_000_000);
    third.wall0 = WALL0 + 10_000;
    third.run(&mut p, 3);
    let stats = p.stats();
    assert_eq!(stats.discontinuities, 2);
    assert!(
        stats.dropped_samples >= 5,
        "non-keyframes before the keyframe"
    );
    let lines = playlist_lines(&p, "");
    assert_eq!(
        lines
            .iter()
            .filter(|l| *l == "#EXT-X-DISCONTINUITY")
            .count(),
        2
    );
    // The init did not change: one EXT-X-MAP.
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("#EXT-X-MAP")).count(),
        1
    );
    // Decode times never go backwards, per track, across the discontinuities.
    let mut last = [0u64; 3];
    for seg in &p.segments {
        for part in &seg.parts {
            let (moof, _) = parse_part(&part.data);
            for traf in &moof.traf {
                let t = traf.tfdt.as_ref().map_or(0, |t| t.base_media_decode_time);
                let id = traf.tfhd.track_id as usize;
                assert!(t >= last[id], "track {id}: {t} < {}", last[id]);
                last[id] = t;
            }
        }
    }
    // PDT follows the wall clock again after the discontinuity.
    let pdt = lines
        .iter()
        .rev()
        .find(|l| l.starts_with("#EXT-X-PROGRAM-DATE-TIME:"))
        .expect("pdt");
    assert!(
        pdt.starts_with("#EXT-X-PROGRAM-DATE-TIME:2026-11-25T16:00:1"),
        "{pdt}"
    );
}

#[test]
fn annexb_parameter_sets_configure_and_a_new_sps_bumps_the_init() {
    let (mut p, _counter) = packager(HlsConfig::default());
    let au = |sps: &[u8], pps: &[u8], key: bool| {
        let mut au = Vec::new();
        if key {
            for nal in [sps, pps] {
                au.extend_from_slice(&[0, 0, 0, 1]);
                au.extend_from_slice(nal);
            }
        }
        au.extend_from_slice(&[0, 0, 1, if key { 0x65 } else { 0x41 }, 0x88, 0x84, 0x21]);
        au
    };
    let pps = [0x68, 0xcb, 0x83, 0xcb, 0x20];
    for i in 0..90i64 {
        let key = i % 30 == 0;
        p.push_video_annexb(
            i * 3000,
            i * 3000,
            key,
            &au(SPS_360P_BASELINE, &pps, key),
            WALL0,
        );
    }
    assert_eq!(p.codecs().as_deref(), Some("avc1.42c01e"));
    let init = p.init(1).expect("init1");
    let mut buf = init.as_slice();
    Ftyp::decode(&mut buf).expect("ftyp");
    let moov = Moov::decode(&mut buf).expect("moov");
    let Codec::Avc1(avc1) = &moov.trak[0].mdia.minf.stbl.stsd.codecs[0] else {
        panic!("avc1");
    };
    assert_eq!((avc1.visual.width, avc1.visual.height), (640, 360));
    // The publisher switches to 720p: same timeline, new SPS in band.
    for i in 90..150i64 {
        let key = i % 30 == 0;
        p.push_video_annexb(
            i * 3000,
            i * 3000,
            key,
            &au(SPS_720P_HIGH, PPS_720P_HIGH, key),
            WALL0,
        );
    }
    assert!(p.init(2).is_some());
    let lines = playlist_lines(&p, "");
    assert!(lines.contains(&"#EXT-X-MAP:URI=\"init2.mp4\"".to_owned()));
    assert!(lines.contains(&"#EXT-X-DISCONTINUITY".to_owned()));
    assert_eq!(p.stats().discontinuities, 1);
    assert_eq!(p.codecs().as_deref(), Some("avc1.64001f"));
}

#[test]
fn audio_only_opus_is_cut_on_the_audio_timeline() {
    let (mut p, _counter) = packager(HlsConfig::default());
    p.set_audio(AudioConfig::Opus { channels: 2 });
    for k in 0..400i64 {
        // 20 ms CELT packets (config 31, code 0).
        p.push_audio(960 * k, &[0xf8, 1, 2, 3], WALL0 + 20 * k as u64);
    }
    let stats = p.stats();
    assert_eq!(
        stats.dropped_samples, 50,
        "the first second waits for video"
    );
    let complete: Vec<&Segment> = p.segments.iter().filter(|s| s.complete).collect();
    assert_eq!(complete.len(), 3, "7 s after the grace second");
    for seg in complete {
        assert_eq!(seg.timescale, 48_000);
        assert_eq!(seg.duration, 2 * 48_000);
        assert!(
            seg.parts
                .iter()
                .all(|p| p.independent && p.duration == 24_000)
        );
    }
    let init = p.init(1).expect("init");
    let mut buf = init.as_slice();
    Ftyp::decode(&mut buf).expect("ftyp");
    let moov = Moov::decode(&mut buf).expect("moov");
    assert_eq!(moov.trak.len(), 1);
    assert!(matches!(
        moov.trak[0].mdia.minf.stbl.stsd.codecs[0],
        Codec::Opus(_)
    ));
    let (moof, _) = parse_part(&p.part(0, 1).expect("part"));
    assert_eq!(moof.traf[0].tfhd.track_id, 2);
    assert_eq!(moof.traf[0].trun[0].samples.len(), 25);
    let lines = playlist_lines(&p, "");
    assert!(
        lines.contains(&"#EXT-X-PART:DURATION=0.500,URI=\"1.2.m4s\",INDEPENDENT=YES".to_owned())
    );
    assert_eq!(p.codecs().as_deref(), Some("opus"));
}

#[test]
fn garbage_input_does_not_panic() {
    let (mut p, _counter) = packager(HlsConfig {
        window: 2,
        max_free_buffers: 1,
        ..HlsConfig::default()
    });
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let stamps = [i64::MIN, i64::MAX, 0, -1, 1, i64::MAX - 1, i64::MIN + 1];
    p.set_video(h264(&[0x67], &[]));
    p.set_audio(AudioConfig::Aac {
        asc: vec![],
        sample_rate: 0,
        channels: 0,
    });
    for i in 0..20_000u64 {
        let len = (next() % 64) as usize;
        let mut data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if i % 7 == 0 && len > 4 {
            data[..4].copy_from_slice(&[0, 0, 0, 1]);
        }
        let ts = if i % 13 == 0 {
            stamps[(next() % stamps.len() as u64) as usize]
        } else {
            (i as i64) * 3000 + (next() % 5000) as i64
        };
        let wall = if i % 17 == 0 { next() } else { WALL0 + i * 33 };
        match next() % 6 {
            0 => p.push_video(
                ts,
                ts.wrapping_add((next() % 9000) as i64),
                next() % 5 == 0,
                &data,
                wall,
            ),
            1 => p.push_video_annexb(ts, ts, next() % 3 == 0, &data, wall),
            2 => p.push_audio(ts, &data, wall),
            3 if i % 1000 == 0 => p.set_video(h264(SPS_720P_HIGH, PPS_720P_HIGH)),
            4 if i % 1500 == 0 => p.set_audio(AudioConfig::Opus { channels: 9 }),
            _ => p.push_video(ts, ts, true, &avcc_au(true, len + 2), wall),
        }
        if i % 500 == 0 {
            let _ = p.media_playlist("q");
            let (msn, part) = p.next_part();
            let _ = (
                p.part(msn, part),
                p.segment(msn.wrapping_sub(1)),
                p.has_part(u64::MAX, u32::MAX),
            );
        }
    }
    let stats = p.stats();
    assert!(stats.samples_in > 10_000);
    assert!(stats.dropped_samples > 0);
    assert!(p.stats().segments <= 2);
}

#[test]
fn whip_like_stream_with_audio_first_and_in_band_parameter_sets() {
    let (mut p, _counter) = packager(HlsConfig::default());
    p.set_audio(AudioConfig::Opus { channels: 2 });
    // Audio for 200 ms before any video (random RTP origins on both tracks).
    let audio_at = |p: &mut Packager, k: i64| {
        p.push_audio(1_000_000 + 960 * k, &[0xfc, 0xff], WALL0 + 20 * k as u64);
    };
    (0..10).for_each(|k| audio_at(&mut p, k));
    let mut k = 10;
    for i in 0..150i64 {
        let key = i % 30 == 0;
        let mut au = Vec::new();
        if key {
            for nal in [SPS_720P_HIGH, PPS_720P_HIGH] {
                au.extend_from_slice(&[0, 0, 0, 1]);
                au.extend_from_slice(nal);
            }
        }
        au.extend_from_slice(&[0, 0, 1, if key { 0x65 } else { 0x41 }, 0x88, 0x84]);
        let wall_ms = WALL0 + 200 + (i * 1000 / 30) as u64;
        p.push_video_annexb(77_000 + i * 3000, 77_000 + i * 3000, key, &au, wall_ms);
        while WALL0 + 20 * k as u64 <= wall_ms {
            audio_at(&mut p, k);
            k += 1;
        }
    }
    let stats = p.stats();
    assert_eq!(stats.discontinuities, 0);
    assert_eq!(
        stats.dropped_samples, 10,
        "only the audio before the first keyframe"
    );
    let init = p.init(1).expect("init");
    let mut buf = init.as_slice();
    Ftyp::decode(&mut buf).expect("ftyp");
    assert_eq!(Moov::decode(&mut buf).expect("moov").trak.len(), 2);
    assert_eq!(p.codecs().as_deref(), Some("avc1.64001f,opus"));
    // Audio starts where it arrived relative to the keyframe: at 0 here.
    let (moof, _) = parse_part(&p.part(0, 0).expect("part"));
    let audio_tfdt = moof.traf[1].tfdt.as_ref().map(|t| t.base_media_decode_time);
    assert_eq!(audio_tfdt, Some(0));
}

#[test]
fn frame_rate_is_the_peak_of_the_complete_segments() {
    let (mut p, _) = packager(HlsConfig::default());
    // 4 s at 10 fps (an encoder starting slowly), then 4 s at 30 fps; a keyframe a second.
    let mut t_ms = 0i64;
    for (fps, secs) in [(10i64, 4i64), (30, 4)] {
        for i in 0..fps * secs {
            let key = i % fps == 0;
            let au = avcc_au(key, 600);
            p.push_video(t_ms * 90, t_ms * 90, key, &au, WALL0 + t_ms as u64);
            t_ms += 1000 / fps;
        }
    }
    let fps = p.stats().frame_rate_milli;
    assert!(
        (29_500..=30_500).contains(&fps),
        "the peak, not the mean (about 20 fps): {fps}"
    );
    // Before any segment is complete, the rate of the parts held.
    let (mut slow, _) = packager(HlsConfig::default());
    for i in 0..19i64 {
        let au = avcc_au(i % 10 == 0, 600);
        slow.push_video(i * 9000, i * 9000, i % 10 == 0, &au, WALL0 + i as u64 * 100);
    }
    assert_eq!(slow.stats().segments, 0, "no complete segment yet");
    let fps = slow.stats().frame_rate_milli;
    assert!((9_500..=10_500).contains(&fps), "{fps}");
}

use std::borrow::Cow;

use super::*;

const SPS: &[u8] = &[0x67, 0x42, 0xc0, 0x1f, 0xda, 0x01, 0x40, 0x16, 0xe8];
const PPS: &[u8] = &[0x68, 0xce, 0x3c, 0x80];

fn annexb(nals: &[&[u8]]) -> Vec<u8> {
    let mut v = Vec::new();
    for n in nals {
        v.extend_from_slice(&[0, 0, 0, 1]);
        v.extend_from_slice(n);
    }
    v
}

fn video(dts: i64, pts: i64, keyframe: bool, format: VideoFormat, data: &[u8]) -> Unit<'_> {
    Unit::Video {
        dts,
        pts,
        keyframe,
        format,
        data: Cow::Borrowed(data),
    }
}

fn collect(o: &mut Outlet, unit: &Unit<'_>, shared: bool, now_ms: i64) -> Vec<OutFrame> {
    let mut v = Vec::new();
    o.push(unit, shared, now_ms, &mut |f| v.push(f));
    v
}

fn avcc_of(nal: &[u8]) -> Vec<u8> {
    let mut v = (nal.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(nal);
    v
}

#[test]
fn each_container_carries_its_codecs() {
    assert!(carried(VideoCodec::H264, Container::Flv).is_ok());
    assert!(carried(VideoCodec::H264, Container::Ts).is_ok());
    assert!(carried(VideoCodec::H265, Container::Ts).is_ok());
    let why = carried(VideoCodec::H265, Container::Flv).expect_err("H265 over RTMP");
    assert!(why.contains("H265") && why.contains("RTMP"), "{why}");
    let why = carried(VideoCodec::Vp8, Container::Ts).expect_err("VP8 is refused");
    assert!(why.contains("VP8"), "{why}");
}

#[test]
fn the_asc_of_aac_lc_48k_stereo() {
    assert_eq!(audio_specific_config(2, 48_000, 2), [0x11, 0x90]);
    assert_eq!(audio_specific_config(2, 44_100, 2), [0x12, 0x10]);
}

#[test]
fn rtp_access_units_lose_their_parameter_sets_to_a_configuration() {
    let mut o = Outlet::new();
    let idr = [0x65, 0x88, 0x80, 0x10];
    let key = annexb(&[&[0x09, 0xf0], SPS, PPS, &idr]);
    let out = collect(
        &mut o,
        &video(1000, 1000, true, VideoFormat::AnnexB, &key),
        false,
        0,
    );
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(
        out[0],
        OutFrame::VideoConfig {
            sps: SPS.into(),
            pps: PPS.into()
        }
    );
    let OutFrame::Video { avcc, keyframe, .. } = &out[1] else {
        panic!("{out:?}");
    };
    assert!(*keyframe);
    assert_eq!(
        &avcc[..],
        &avcc_of(&idr)[..],
        "no AUD, SPS or PPS in the unit"
    );
    // The same parameter sets again: no new configuration.
    let out = collect(
        &mut o,
        &video(4000, 4000, true, VideoFormat::AnnexB, &key),
        false,
        33,
    );
    assert_eq!(out.len(), 1, "{out:?}");
    // A frame before any parameter set is not given out.
    let mut fresh = Outlet::new();
    let p = annexb(&[&[0x41, 0x9a, 0x02]]);
    assert!(
        collect(
            &mut fresh,
            &video(0, 0, false, VideoFormat::AnnexB, &p),
            false,
            0
        )
        .is_empty()
    );
}

/// A publisher's frames: both tracks on the publisher's clock, the output starting at 0.
#[test]
fn a_publishers_tracks_keep_their_offset_and_start_at_zero() {
    let mut o = Outlet::new();
    collect(
        &mut o,
        &Unit::VideoConfig(VideoConfig::H264 {
            sps: SPS.to_vec(),
            pps: PPS.to_vec(),
        }),
        true,
        0,
    );
    let cfg = collect(
        &mut o,
        &Unit::AudioConfig(AudioConfig::Aac {
            asc: vec![0x12, 0x10],
            sample_rate: 44_100,
            channels: 2,
        }),
        true,
        0,
    );
    assert!(matches!(
        &cfg[..],
        [OutFrame::AudioConfig {
            sample_rate: 44_100,
            channels: 2,
            ..
        }]
    ));
    let f = avcc_of(&[0x65, 1]);
    // 10 s into the encoder's clock; B-frame offset 80 ms.
    let v = collect(
        &mut o,
        &video(900_000, 907_200, true, VideoFormat::Avcc, &f),
        true,
        5,
    );
    let [OutFrame::Video { dts, pts, .. }] = v[..] else {
        panic!("{v:?}");
    };
    assert_eq!((dts, pts), (0, 7_200));
    // Audio 20 ms later on the same clock (in 44.1 kHz samples), arriving 300 ms later.
    let a = collect(
        &mut o,
        &Unit::Audio {
            pts: 441_882,
            data: Cow::Borrowed(&[1, 2, 3]),
        },
        true,
        305,
    );
    let [OutFrame::Audio { pts, .. }] = a[..] else {
        panic!("{a:?}");
    };
    assert_eq!(
        pts,
        441_882 * 90_000 / 44_100 - 900_000,
        "the encoder's offset is kept"
    );
}

/// A new publisher whose clock starts over: the output goes on where arrival puts it.
#[test]
fn a_restart_continues_the_timeline() {
    let mut o = Outlet::new();
    let key = annexb(&[SPS, PPS, &[0x65, 1]]);
    collect(
        &mut o,
        &video(500_000, 500_000, true, VideoFormat::AnnexB, &key),
        false,
        1_000,
    );
    let v = collect(
        &mut o,
        &video(590_000, 590_000, false, VideoFormat::AnnexB, &key),
        false,
        2_000,
    );
    let [OutFrame::Video { dts: before, .. }] = v[..] else {
        panic!("{v:?}");
    };
    assert_eq!(before, 90_000);
    o.restart();
    // Three seconds later, timestamps from 0.
    let v = collect(
        &mut o,
        &video(0, 0, true, VideoFormat::AnnexB, &key),
        false,
        5_000,
    );
    let [OutFrame::Video { dts, .. }] = v[..] else {
        panic!("{v:?}");
    };
    assert_eq!(dts, 4_000 * 90, "at its arrival, after what was given");
    // Without a restart, a clock that jumps back far is anchored again, never going back.
    let v = collect(
        &mut o,
        &video(-10_000_000, -10_000_000, true, VideoFormat::AnnexB, &key),
        false,
        5_040,
    );
    let [OutFrame::Video { dts: after, .. }] = v[..] else {
        panic!("{v:?}");
    };
    assert!(after > dts, "{after} after {dts}");
}

/// Opus packets of a tone become AAC-LC frames that an AAC decoder reads.
#[test]
fn opus_becomes_aac_once() {
    let mut enc = opus::Encoder::new(48_000, opus::Channels::Stereo, opus::Application::Audio)
        .expect("opus encoder");
    let mut o = Outlet::new();
    let cfg = collect(
        &mut o,
        &Unit::AudioConfig(AudioConfig::Opus { channels: 2 }),
        false,
        0,
    );
    let [
        OutFrame::AudioConfig {
            asc,
            sample_rate: 48_000,
            channels: 2,
        },
    ] = &cfg[..]
    else {
        panic!("{cfg:?}");
    };
    assert_eq!(&asc[..], &[0x11, 0x90]);
    assert!(o.encodes_audio());
    let mut frames = Vec::new();
    let mut pcm = vec![0f32; 960 * 2];
    let mut buf = vec![0u8; 4000];
    for p in 0..50i64 {
        for i in 0..960usize {
            let t = (p as f32 * 960.0 + i as f32) / 48_000.0;
            let s = (t * 440.0 * std::f32::consts::TAU).sin() * 0.3;
            pcm[i * 2] = s;
            pcm[i * 2 + 1] = s;
        }
        let n = enc.encode_float(&pcm, &mut buf).expect("encode");
        // Packet 20 is lost: concealed.
        if p == 20 {
            continue;
        }
        let unit = Unit::Audio {
            pts: 123_000 + p * 960,
            data: Cow::Borrowed(&buf[..n]),
        };
        frames.extend(collect(&mut o, &unit, false, p * 20));
    }
    // 50 × 960 samples make 46 whole frames of 1024, less the encoder's own delay.
    assert!((40..=47).contains(&frames.len()), "{} frames", frames.len());
    let pts: Vec<i64> = frames
        .iter()
        .map(|f| match f {
            OutFrame::Audio { pts, .. } => *pts,
            other => panic!("{other:?}"),
        })
        .collect();
    assert!(pts.windows(2).all(|w| w[1] > w[0]), "{pts:?}");
    // AAC frames decode with the configuration given.
    use symphonia_core::codecs::audio::well_known::CODEC_ID_AAC;
    use symphonia_core::codecs::audio::{AudioCodecParameters, AudioDecoder, AudioDecoderOptions};
    let mut params = AudioCodecParameters::new();
    params
        .for_codec(CODEC_ID_AAC)
        .with_extra_data(asc.to_vec().into_boxed_slice());
    let mut dec =
        symphonia_codec_aac::AacDecoder::try_new(&params, &AudioDecoderOptions::default())
            .expect("AAC decoder");
    let mut decoded = 0;
    for f in &frames {
        let OutFrame::Audio { aac, .. } = f else {
            continue;
        };
        let pkt = symphonia_core::packet::PacketRef::new(
            0,
            symphonia_core::units::Timestamp::new(0),
            symphonia_core::units::Duration::new(1024),
            aac,
        );
        if dec.decode_ref(&pkt).is_ok_and(|b| b.frames() > 0) {
            decoded += 1;
        }
    }
    assert_eq!(decoded, frames.len(), "every AAC frame decodes");
}

/// The TS writer starts at a keyframe, puts the parameter sets in front of it, and its
/// output reads back through the demuxer as H264 and AAC.
#[test]
fn ts_out_starts_at_a_keyframe_with_its_parameter_sets() {
    let mut w = TsWriter::new();
    let mut out = Vec::new();
    let idr = avcc_of(&[0x65, 0x88, 0x80]);
    let p = avcc_of(&[0x41, 0x9a]);
    w.write(
        &OutFrame::Video {
            dts: 0,
            pts: 0,
            keyframe: false,
            avcc: p.clone().into(),
        },
        &mut out,
    );
    assert!(
        out.is_empty(),
        "nothing before a keyframe and its configuration"
    );
    w.write(
        &OutFrame::VideoConfig {
            sps: SPS.into(),
            pps: PPS.into(),
        },
        &mut out,
    );
    w.write(
        &OutFrame::AudioConfig {
            asc: vec![0x11, 0x90].into(),
            sample_rate: 48_000,
            channels: 2,
        },
        &mut out,
    );
    w.write(
        &OutFrame::Audio {
            pts: 8_000,
            aac: vec![1, 2, 3].into(),
        },
        &mut out,
    );
    assert!(out.is_empty(), "no audio before the first keyframe");
    w.write(
        &OutFrame::Video {
            dts: 9_000,
            pts: 9_000,
            keyframe: true,
            avcc: idr.into(),
        },
        &mut out,
    );
    w.write(
        &OutFrame::Audio {
            pts: 9_900,
            aac: vec![4, 5, 6].into(),
        },
        &mut out,
    );
    w.write(
        &OutFrame::Video {
            dts: 12_000,
            pts: 12_000,
            keyframe: false,
            avcc: p.into(),
        },
        &mut out,
    );
    assert_eq!(out.len() % 188, 0);
    let mut d = tern_proto::ts::Demuxer::new();
    let mut pes = Vec::new();
    d.push(&out, &mut |p| pes.push(p));
    d.flush(&mut |p| pes.push(p));
    let video: Vec<_> = pes
        .iter()
        .filter(|p| p.codec == tern_proto::ts::TsCodec::H264)
        .collect();
    let audio: Vec<_> = pes
        .iter()
        .filter(|p| p.codec == tern_proto::ts::TsCodec::Aac)
        .collect();
    assert_eq!(video.len(), 2, "{pes:?}");
    assert_eq!(audio.len(), 1);
    assert_eq!(video[0].pts, Some(90_000), "the first keyframe at 1 s");
    assert_eq!(video[1].pts, Some(93_000));
    assert_eq!(audio[0].pts, Some(90_900));
    let types: Vec<u8> = h264::nal_units(&video[0].data)
        .map(h264::nal_type)
        .collect();
    assert!(types.ends_with(&[7, 8, 5]), "SPS, PPS, IDR: {types:?}");
}

/// Opus packets that come late, twice, or from a clock that went back never take the AAC
/// timeline back.
#[test]
fn aac_times_never_go_back() {
    let mut enc = opus::Encoder::new(48_000, opus::Channels::Stereo, opus::Application::Audio)
        .expect("opus encoder");
    let mut o = Outlet::new();
    collect(
        &mut o,
        &Unit::AudioConfig(AudioConfig::Opus { channels: 2 }),
        false,
        0,
    );
    let pcm = vec![0.1f32; 960 * 2];
    let mut buf = vec![0u8; 4000];
    let n = enc.encode_float(&pcm, &mut buf).expect("encode");
    let packet = buf[..n].to_vec();
    // In order, then a repeat, a late one, and a clock that restarts 10 s back.
    let mut times: Vec<i64> = (0..40).map(|i| 500_000 + i * 960).collect();
    times.extend([500_000 + 39 * 960, 500_000 + 30 * 960]);
    times.extend((0..40).map(|i| 20_000 + i * 960));
    let mut pts = Vec::new();
    for (k, t) in times.iter().enumerate() {
        let unit = Unit::Audio {
            pts: *t,
            data: Cow::Borrowed(&packet),
        };
        for f in collect(&mut o, &unit, false, k as i64 * 20) {
            if let OutFrame::Audio { pts: p, .. } = f {
                pts.push(p);
            }
        }
    }
    assert!(pts.len() > 60, "{} frames", pts.len());
    assert!(pts.windows(2).all(|w| w[1] > w[0]), "{pts:?}");
}

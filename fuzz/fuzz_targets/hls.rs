//! The LL-HLS packager fed anything a publisher could send: H264 access units (Annex B and
//! length-prefixed), H265 ones (Annex B) and AV1 temporal units (whose sequence header is
//! parsed for the `av1C`) with any timestamps and keyframe flags, parameter sets (H264's and
//! H265's, whose SPS is parsed for the init segment and `CODECS`) that are junk,
//! AAC and Opus frames of any size, configuration changes mid-stream. A second packager
//! follows the first as a ladder's lower variant does (its cuts, the same H264 access units
//! on a clock a few frames off, any keyframe flags), and a third as a ladder's audio
//! rendition (the top's audio with its anchors, its cuts; the top then stores no audio on
//! every other input). Whatever comes in, no panic, and what
//! each serves stays well formed: a playlist starts with `#EXTM3U`, every part it lists can
//! be fetched, and a part is a `moof` box then an `mdat` box.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tern_pool::PoolCounter;
use tern_rtc::hls::{AudioConfig, HlsConfig, Packager, VideoConfig};

fn take<'a>(d: &mut &'a [u8], n: usize) -> &'a [u8] {
    let n = n.min(d.len());
    let (h, t) = d.split_at(n);
    *d = t;
    h
}

fn num(d: &mut &[u8]) -> i64 {
    let b = take(d, 2);
    i64::from(u16::from_le_bytes([
        b.first().copied().unwrap_or(0),
        b.get(1).copied().unwrap_or(0),
    ]))
}

/// The packager's output is well formed.
fn check(p: &Packager) {
    let _ = p.codecs();
    let _ = p.resolution();
    let _ = p.wants_keyframe();
    if let Some(pl) = p.media_playlist("session=f") {
        assert!(pl.starts_with("#EXTM3U\n"));
        assert!(!pl.contains("#EXT-X-INDEPENDENT-SEGMENTS") || p.independent_segments());
    }
    let (msn, part) = p.next_part();
    if let Some(first) = p.oldest_msn() {
        for m in first..=msn {
            for i in 0..32 {
                if let Some(b) = p.part(m, i) {
                    assert!(p.has_part(m, i));
                    assert_eq!(b.get(4..8), Some(&b"moof"[..]));
                    let moof = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
                    assert_eq!(b.get(moof + 4..moof + 8), Some(&b"mdat"[..]));
                }
            }
        }
    }
    assert!(!p.has_part(msn, part), "the next part is not made yet");
}

fuzz_target!(|data: &[u8]| {
    let mut d = data;
    let mut p = Packager::new(HlsConfig::default(), PoolCounter::new("fuzz_hls", 0));
    let mut low = Packager::new(HlsConfig::default(), PoolCounter::new("fuzz_hls", 0));
    low.follow();
    let mut audio = Packager::new(HlsConfig::default(), PoolCounter::new("fuzz_hls", 0));
    audio.audio_rendition();
    // The lower layer's clock, off the top's by up to a few frames either way.
    let shift = (num(&mut d) % 20_000) - 10_000;
    if shift & 1 == 0 {
        p.audio_apart();
    }
    let (mut vts, mut ats, mut wall) = (0i64, 0i64, 1_700_000_000_000u64);
    while let Some((&op, rest)) = d.split_first() {
        d = rest;
        let len = usize::from(take(&mut d, 1).first().copied().unwrap_or(0)) * 4;
        // Mostly forward in small steps, sometimes anywhere.
        let step = num(&mut d);
        match op % 9 {
            0 => {
                vts += step * 8;
                wall += 33;
                let au = take(&mut d, len);
                p.push_video_annexb(vts, vts + (step % 7) * 3000, op & 0x80 != 0, au, wall);
            }
            1 => {
                vts += step * 8;
                wall += 33;
                let au = take(&mut d, len);
                p.push_video(vts, vts, op & 0x80 != 0, au, wall);
                if let Some(cut) = p.last_cut() {
                    low.follow_cut(cut);
                    audio.follow_cut(cut);
                }
                let key = op & 0x40 != 0;
                low.push_video(vts + shift, vts + shift, key, au, wall);
            }
            3 => {
                let sps = take(&mut d, len / 2).to_vec();
                let pps = take(&mut d, 8).to_vec();
                low.set_video(VideoConfig::H264 {
                    sps: sps.clone(),
                    pps: pps.clone(),
                });
                p.set_video(VideoConfig::H264 { sps, pps });
            }
            2 => {
                ats += step;
                let frame = take(&mut d, len);
                p.push_audio(ats, frame, wall);
                let anchor = p.audio_anchor();
                let _ = anchor.map(|(_, out)| p.video_passed(out));
                audio.follow_audio(anchor);
                audio.push_audio(ats, frame, wall);
            }
            4 => {
                let asc = take(&mut d, 2).to_vec();
                let cfg = AudioConfig::Aac {
                    asc,
                    sample_rate: 44_100,
                    channels: (op >> 4) & 3,
                };
                audio.set_audio(cfg.clone());
                p.set_audio(cfg);
            }
            5 => {
                let cfg = AudioConfig::Opus { channels: op >> 6 };
                audio.set_audio(cfg.clone());
                p.set_audio(cfg);
            }
            6 => {
                vts += step * 8;
                wall += 33;
                let au = take(&mut d, len);
                p.push_h265(vts, vts + (step % 5) * 3000, op & 0x80 != 0, au, wall);
            }
            7 => {
                // An AV1 temporal unit: any OBUs, a sequence header among them or not.
                vts += step * 8;
                wall += 33;
                p.push_av1(vts, take(&mut d, len), wall);
            }
            _ => {
                let vps = take(&mut d, 8).to_vec();
                let sps = take(&mut d, len / 2).to_vec();
                let pps = take(&mut d, 8).to_vec();
                p.set_video(VideoConfig::H265 { vps, sps, pps });
            }
        }
    }
    check(&p);
    check(&low);
    check(&audio);
    let _ = audio.audio_channels();
});

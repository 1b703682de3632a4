//! Recorded files: the packager's init segment and parts laid end to end make a fragmented
//! MP4 (ftyp, moov, then moof + mdat per part) that plays up to its last complete fragment
//! whenever the writer stops, a crash included. What this module adds for a file:
//!
//! - [`file_init`]: the init with the recording's start in the `mvhd` creation time (so a
//!   listing reads it back from the file) and an `mehd` whose duration is 0 until the file
//!   is finished;
//! - [`finished_init`]: the same bytes with the duration filled in (same length, so it is
//!   written over the first one in place) on a clean stop;
//! - [`mfra`]: the random-access index appended on a clean stop (one entry per part that
//!   starts with a keyframe), which players use to seek without reading every fragment;
//! - [`parse_head`] and [`moof_end`]: what a listing reads back (start, codecs, duration
//!   of a finished file, or the end of the last fragment of one that was not).
//!
//! Sans-IO: bytes in, bytes out; the caller reads and writes the file.

use mp4_atom::{
    Any, Atom, Codec, Decode, Encode, FragmentInfo, Ftyp, Mehd, Mfra, Mfro, Moof, Moov, Tfra,
};

use super::fmp4::{AUDIO_TRACK_ID, VIDEO_TRACK_ID};

/// Seconds from the MP4 epoch (1904-01-01) to the Unix epoch.
const MP4_EPOCH_OFFSET: u64 = 2_082_844_800;

/// What a recorded file's init segment says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileHead {
    /// Length of the ftyp + moov, bytes: where the first fragment starts.
    pub len: usize,
    /// When the recording started, Unix ms (whole seconds: the mvhd's precision).
    pub start_unix_ms: u64,
    /// The duration written on a clean stop, ms; 0 when the file was not finished.
    pub duration_ms: u64,
    /// RFC 6381 codecs of its tracks (`avc1.64001f,mp4a.40.2`, `vp08.00.10.08,opus`).
    pub codecs: String,
    /// The track whose fragments carry the timeline (video if there is one) and its
    /// timescale.
    pub driver: (u32, u32),
    /// Every track: `(track id, timescale)`.
    pub tracks: Vec<(u32, u32)>,
}

fn split_init(init: &[u8]) -> mp4_atom::Result<(Ftyp, Moov)> {
    let mut buf = init;
    let ftyp = Ftyp::decode(&mut buf)?;
    let moov = Moov::decode(&mut buf)?;
    Ok((ftyp, moov))
}

fn join_init(ftyp: &Ftyp, moov: &Moov) -> mp4_atom::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(1024);
    ftyp.encode(&mut out)?;
    moov.encode(&mut out)?;
    Ok(out)
}

/// The init segment a recorded file starts with: the packager's `init`, with
/// `start_unix_ms` as the movie's creation time and an `mehd` announcing a duration of 0
/// (unknown) until [`finished_init`] fills it in.
pub fn file_init(init: &[u8], start_unix_ms: u64) -> mp4_atom::Result<Vec<u8>> {
    let (ftyp, mut moov) = split_init(init)?;
    let t = start_unix_ms / 1000 + MP4_EPOCH_OFFSET;
    moov.mvhd.creation_time = t;
    moov.mvhd.modification_time = t;
    moov.mvhd.duration = 0;
    if let Some(mvex) = moov.mvex.as_mut() {
        mvex.mehd = Some(Mehd {
            fragment_duration: 0,
        });
    }
    join_init(&ftyp, &moov)
}

/// `file_init`'s bytes (as [`file_init`] made them) with the file's duration in the `mvhd`
/// and the `mehd`: the same length, to be written over them.
pub fn finished_init(file_init: &[u8], duration_ms: u64) -> mp4_atom::Result<Vec<u8>> {
    let (ftyp, mut moov) = split_init(file_init)?;
    // The mvhd timescale is 1000 (ms).
    let duration = duration_ms * u64::from(moov.mvhd.timescale.max(1)) / 1000;
    moov.mvhd.duration = duration;
    if let Some(mehd) = moov.mvex.as_mut().and_then(|m| m.mehd.as_mut()) {
        mehd.fragment_duration = duration;
    }
    join_init(&ftyp, &moov)
}

/// The `mfra` box indexing the fragments of `track_id` that start with a sync sample:
/// `(decode time in the track's timescale, offset of the moof in the file)` each.
pub fn mfra(track_id: u32, entries: &[(u64, u64)]) -> mp4_atom::Result<Vec<u8>> {
    let tfra = Tfra {
        track_id,
        entries: entries
            .iter()
            .map(|&(time, moof_offset)| FragmentInfo {
                time,
                moof_offset,
                traf_number: 1,
                trun_number: 1,
                sample_delta: 1,
            })
            .collect(),
    };
    // mfro repeats the size of the whole mfra: encode once to measure it.
    let mut m = Mfra {
        tfra: vec![tfra],
        mfro: Mfro { parent_size: 0 },
    };
    let mut out = Vec::new();
    m.encode(&mut out)?;
    m.mfro.parent_size =
        u32::try_from(out.len()).map_err(|_| mp4_atom::Error::TooLarge(Mfra::KIND))?;
    out.clear();
    m.encode(&mut out)?;
    Ok(out)
}

fn codec_name(c: &Codec) -> Option<String> {
    Some(match c {
        Codec::Avc1(a) => format!(
            "avc1.{:02x}{:02x}{:02x}",
            a.avcc.avc_profile_indication,
            a.avcc.profile_compatibility,
            a.avcc.avc_level_indication
        ),
        Codec::Hvc1(h) => super::fmp4::hvcc_codec(&h.hvcc),
        Codec::Vp08(_) => "vp08.00.10.08".into(),
        Codec::Vp09(v) => format!("vp09.{:02}.10.08", v.vpcc.profile),
        Codec::Av01(a) => super::av1c::codec(&a.av1c),
        Codec::Mp4a(m) => {
            let aot = m
                .esds
                .es_desc
                .dec_config
                .dec_specific
                .as_ref()
                .map_or(2, |d| d.profile);
            format!("mp4a.40.{aot}")
        }
        Codec::Opus(_) => "opus".into(),
        _ => return None,
    })
}

/// Reads the head of a recorded file: `bytes` starts at the file's first byte and holds at
/// least its ftyp and moov. `None` when they do not parse.
pub fn parse_head(bytes: &[u8]) -> Option<FileHead> {
    if !decodable(bytes) {
        return None;
    }
    let mut buf = bytes;
    let _ftyp = Ftyp::decode(&mut buf).ok()?;
    let moov = Moov::decode(&mut buf).ok()?;
    let len = bytes.len() - buf.len();
    let timescale = moov.mvhd.timescale.max(1);
    let codecs: Vec<String> = moov
        .trak
        .iter()
        .filter_map(|t| t.mdia.minf.stbl.stsd.codecs.first())
        .filter_map(codec_name)
        .collect();
    let track = |id: u32| {
        moov.trak
            .iter()
            .find(|t| t.tkhd.track_id == id)
            .map(|t| (id, t.mdia.mdhd.timescale))
    };
    let driver = track(VIDEO_TRACK_ID).or_else(|| track(AUDIO_TRACK_ID))?;
    let tracks = moov
        .trak
        .iter()
        .map(|t| (t.tkhd.track_id, t.mdia.mdhd.timescale))
        .collect();
    Some(FileHead {
        tracks,
        len,
        start_unix_ms: moov.mvhd.creation_time.saturating_sub(MP4_EPOCH_OFFSET) * 1000,
        duration_ms: moov.mvhd.duration * 1000 / u64::from(timescale),
        codecs: codecs.join(","),
        driver,
    })
}

/// Where track `track_id`'s samples in this moof end: its `tfdt` plus the durations of its
/// samples, in the track's timescale. `None` when the moof does not parse or has no such
/// track.
pub fn moof_end(moof: &[u8], track_id: u32) -> Option<u64> {
    if !decodable(moof) {
        return None;
    }
    let mut buf = moof;
    let Any::Moof(m) = Any::decode(&mut buf).ok()? else {
        return None;
    };
    moof_track_end(&m, track_id)
}

fn moof_track_end(m: &Moof, track_id: u32) -> Option<u64> {
    let traf = m.traf.iter().find(|t| t.tfhd.track_id == track_id)?;
    let base = traf.tfdt.as_ref()?.base_media_decode_time;
    let default = traf.tfhd.default_sample_duration.unwrap_or(0);
    let d: u64 = traf
        .trun
        .iter()
        .flat_map(|t| t.samples.iter())
        .map(|s| u64::from(s.duration.unwrap_or(default)))
        .sum();
    Some(base + d)
}

/// False when `bytes` hold a box that mp4-atom (0.17) would decode without end.
///
/// Its `sgpd` decoder reads `entry_count` entries, and in a version-0 box of any grouping
/// type but `refs` an entry is "the rest of the box": the first takes every byte, and each
/// further one takes none and is pushed all the same. A 20-byte box asking for 2^29
/// entries grew the fuzzer's heap past 2 GiB (`fuzz/fuzz_targets/record.rs`). A listing
/// decodes whatever files lie in the recordings folder, so every `sgpd` pattern in the bytes
/// is checked before they reach the decoder: nested at any depth, or inside another box's
/// payload, where the check can only refuse a file tern did not write (tern writes no
/// `sgpd`). A listing leaves such a file out, as it does any file whose head does not parse.
///
/// The box's full-box header follows its type directly, or 8 bytes later when the box has a
/// 64-bit size (its 32-bit size is 1). Both places are checked for every `sgpd`: the second
/// would otherwise let a 35-byte box through (found by the fuzzer, see the test below).
fn decodable(bytes: &[u8]) -> bool {
    // Version + flags (4), grouping type (4), entry count (4).
    const SGPD_V0_LEN: usize = 12;
    // From the type: compact size (header at +4) or 64-bit size (header at +12).
    const HEADER_AT: [usize; 2] = [4, 12];
    let unbounded = |h: &[u8]| {
        h[0] == 0 && &h[4..8] != b"refs" && u32::from_be_bytes([h[8], h[9], h[10], h[11]]) > 1
    };
    let mut at = 4; // a box type follows its 4-byte size
    while let Some(i) = bytes
        .get(at..)
        .and_then(|rest| rest.windows(4).position(|w| w == b"sgpd"))
    {
        let ty = at + i;
        if HEADER_AT.iter().any(|&off| {
            bytes
                .get(ty + off..ty + off + SGPD_V0_LEN)
                .is_some_and(unbounded)
        }) {
            return false;
        }
        at = ty + 1;
    }
    true
}

/// The boxes directly inside `b` (a box's body): `(type, start of the body, end)`.
fn children(b: &[u8], from: usize, to: usize) -> Vec<([u8; 4], usize, usize)> {
    let mut out = Vec::new();
    let mut at = from;
    while at + 8 <= to {
        let size = u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]) as usize;
        if size < 8 || at + size > to {
            break;
        }
        out.push((
            [b[at + 4], b[at + 5], b[at + 6], b[at + 7]],
            at + 8,
            at + size,
        ));
        at += size;
    }
    out
}

/// Where each traf of the part's moof keeps its track id and its 64-bit `tfdt` value:
/// `(track id, offset of the tfdt value)`. Our parts always write a version-1 tfdt.
fn tfdt_slots(part: &[u8]) -> Vec<(u32, usize)> {
    let mut out = Vec::new();
    for (kind, from, to) in children(part, 0, part.len()) {
        if &kind != b"moof" {
            continue;
        }
        for (kind, from, to) in children(part, from, to) {
            if &kind != b"traf" {
                continue;
            }
            let mut track = None;
            let mut slot = None;
            for (kind, from, to) in children(part, from, to) {
                match &kind {
                    b"tfhd" if to >= from + 8 => {
                        let b = &part[from + 4..from + 8];
                        track = Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                    }
                    // Version 1: 4 bytes of version and flags, then 8 of time.
                    b"tfdt" if to >= from + 12 && part[from] == 1 => slot = Some(from + 4),
                    _ => {}
                }
            }
            if let (Some(t), Some(s)) = (track, slot) {
                out.push((t, s));
            }
        }
        break;
    }
    out
}

/// The base decode time of each track in a part (moof + mdat): `(track id, tfdt)`.
pub fn part_times(part: &[u8]) -> Vec<(u32, u64)> {
    tfdt_slots(part)
        .into_iter()
        .map(|(t, at)| {
            let mut v = [0u8; 8];
            v.copy_from_slice(&part[at..at + 8]);
            (t, u64::from_be_bytes(v))
        })
        .collect()
}

/// Moves a part's samples earlier on each track's timeline, in place: track `id`'s tfdt
/// loses `bases[id]` (saturating), so that a file's first fragment starts near 0.
pub fn rebase_part(part: &mut [u8], bases: &[(u32, u64)]) {
    for (track, at) in tfdt_slots(part) {
        let Some(&(_, base)) = bases.iter().find(|(t, _)| *t == track) else {
            continue;
        };
        let mut v = [0u8; 8];
        v.copy_from_slice(&part[at..at + 8]);
        let rebased = u64::from_be_bytes(v).saturating_sub(base);
        part[at..at + 8].copy_from_slice(&rebased.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::super::{AudioConfig, HlsConfig, Packager, TakenPart};
    use super::*;
    use std::time::Duration;
    use tern_pool::MemoryRegistry;

    /// A VP8 keyframe of 640x360 (frame tag, start code, size) padded to `len`.
    fn vp8_key(len: usize) -> Vec<u8> {
        let mut f = vec![0x50, 0x42, 0x00, 0x9d, 0x01, 0x2a, 0x80, 0x02, 0x68, 0x01];
        f.resize(len, 0x11);
        f
    }

    /// An inter frame (P bit set).
    fn vp8_inter(len: usize) -> Vec<u8> {
        vec![0x51; len]
    }

    /// 10 s of 30 fps VP8 (a keyframe every 2 s) and 20 ms Opus frames through a recording's
    /// packager (1 s parts, 4 s segments), with a timeline far from 0, as RTP gives it.
    fn record() -> Vec<TakenPart> {
        let counter = MemoryRegistry::new().counter("recordings", 0);
        let mut p = Packager::new(
            HlsConfig {
                part_target: Duration::from_secs(1),
                segment_target: Duration::from_secs(4),
                window: 1,
                max_free_buffers: 0,
            },
            counter.clone(),
        );
        p.set_audio(AudioConfig::Opus { channels: 2 });
        let wall0 = 1_795_622_400_000u64;
        let (v0, a0) = (1_000_000_000i64, 77_000i64);
        let mut parts = Vec::new();
        let mut audio = 0i64;
        for i in 0..300i64 {
            let ms = i * 1000 / 30;
            while audio * 20 <= ms {
                // TOC 0x78: a 20 ms CELT frame.
                p.push_audio(
                    a0 + audio * 960,
                    &[0x78, 1, 2, 3],
                    wall0 + (audio * 20) as u64,
                );
                audio += 1;
            }
            let frame = if i % 60 == 0 {
                vp8_key(3000)
            } else {
                vp8_inter(800)
            };
            p.push_vp8(v0 + i * 3000, &frame, wall0 + ms as u64);
            p.take_parts(&mut parts);
        }
        p.finish();
        p.take_parts(&mut parts);
        assert_eq!(p.stats().bytes, 0, "every part taken out");
        parts
    }

    #[test]
    fn vp8_and_opus_make_a_file_that_reads_back() {
        let parts = record();
        // Segments of >= 4 s at the 2 s keyframes: 0-4, 4-8, 8-10.
        let msns: Vec<u64> = parts.iter().map(|p| p.msn).collect();
        assert_eq!(msns.first(), Some(&0));
        assert_eq!(msns.last(), Some(&2), "{msns:?}");
        assert!(parts.iter().all(|p| p.codecs == "vp08.00.10.08,opus"));
        assert!(parts.iter().all(|p| p.timescale == 90_000));
        assert!(parts[0].independent);
        // The second segment as a file of its own, as the writer makes it.
        let seg: Vec<&TakenPart> = parts.iter().filter(|p| p.msn == 1).collect();
        let start_ms = seg[0].segment_pdt_ms;
        let init = file_init(&seg[0].init, start_ms).expect("init");
        let head = parse_head(&init).expect("head");
        assert_eq!(head.codecs, "vp08.00.10.08,opus");
        assert_eq!(head.duration_ms, 0, "not finished");
        assert_eq!(head.start_unix_ms, start_ms / 1000 * 1000);
        assert_eq!(head.driver, (1, 90_000));
        assert_eq!(head.tracks, vec![(1, 90_000), (2, 48_000)]);
        // Rebase: the video's first tfdt becomes 0; the audio keeps its offset to it.
        let times = part_times(&seg[0].data);
        let video0 = times.iter().find(|t| t.0 == 1).expect("video").1;
        assert_eq!(video0, seg[0].start);
        let bases = [(1, video0), (2, video0 * 48_000 / 90_000)];
        let mut file = init.clone();
        let mut index = Vec::new();
        let mut end = 0;
        for p in &seg {
            let mut data = p.data.clone();
            rebase_part(&mut data, &bases);
            let t = part_times(&data);
            let v = t.iter().find(|t| t.0 == 1).expect("video").1;
            assert_eq!(v, p.start - video0);
            if p.independent {
                index.push((v, file.len() as u64));
            }
            let moof_end_v = moof_end(&data, 1).expect("moof");
            assert_eq!(moof_end_v, v + p.duration);
            end = moof_end_v;
            file.extend_from_slice(&data);
        }
        // 4 s of 30 fps (the segment runs from the keyframe at 4 s to the one at 8 s).
        assert_eq!(end, 4 * 90_000);
        // The keyframes at 4 s and 6 s start parts: the index points at both.
        assert_eq!(index.len(), 2, "{index:?}");
        assert_eq!(index[0], (0, init.len() as u64));
        assert_eq!(index[1].0, 2 * 90_000);
        let finished = finished_init(&init, end / 90).expect("finished");
        assert_eq!(finished.len(), init.len(), "written in place");
        assert_eq!(parse_head(&finished).expect("head").duration_ms, 4000);
        let m = mfra(1, &index).expect("mfra");
        let mut buf = m.as_slice();
        let decoded = Mfra::decode(&mut buf).expect("decodes");
        assert_eq!(decoded.mfro.parent_size as usize, m.len());
        assert_eq!(decoded.tfra[0].entries[0].moof_offset, init.len() as u64);
    }

    #[test]
    fn garbage_does_not_panic() {
        let parts = record();
        let mut data = parts[3].data.clone();
        for cut in [0, 1, 7, 8, 9, 30, data.len() / 2] {
            let _ = part_times(&data[..cut]);
            let _ = moof_end(&data[..cut], 1);
            let _ = parse_head(&data[..cut]);
        }
        for b in data.iter_mut().step_by(7) {
            *b = b.wrapping_mul(31).wrapping_add(7);
        }
        let _ = part_times(&data);
        rebase_part(&mut data, &[(1, u64::MAX), (2, 5)]);
        let _ = moof_end(&data, 1);
        assert!(parse_head(&data).is_none());
    }

    /// A box: 32-bit size, type, body.
    fn mp4_box(kind: &[u8; 4], body: &[u8]) -> Vec<u8> {
        let mut b = u32::try_from(body.len() + 8)
            .expect("small")
            .to_be_bytes()
            .to_vec();
        b.extend_from_slice(kind);
        b.extend_from_slice(body);
        b
    }

    /// An `sgpd` body: version, flags 0, grouping type, entry count, then `rest`.
    fn sgpd(version: u8, grouping: &[u8; 4], count: u32, rest: &[u8]) -> Vec<u8> {
        let mut b = vec![version, 0, 0, 0];
        b.extend_from_slice(grouping);
        if version >= 1 {
            b.extend_from_slice(&4u32.to_be_bytes()); // default_length
        }
        b.extend_from_slice(&count.to_be_bytes());
        b.extend_from_slice(rest);
        mp4_box(b"sgpd", &b)
    }

    /// The fuzzer's input (`record` target, 2026-11-29): a size-0 (to the end) `sgpd` of
    /// version 0 asking for 673,738,016 entries. mp4-atom pushed them all, each taking no
    /// bytes, until the heap passed 2 GiB.
    #[test]
    fn an_sgpd_that_mp4_atom_would_decode_without_end_is_refused() {
        let fuzzed = b"\0\0\0\0sgpd\0\0\0\0sgpd((m ";
        assert!(!decodable(fuzzed));
        assert_eq!(moof_end(fuzzed, 1), None);
        assert_eq!(parse_head(fuzzed), None);
        // The fuzzer again (2026-12-06): a version-0 `sgpd` with a 64-bit size (35 bytes),
        // whose full-box header sits 8 bytes further on, asking for 2^31 + 2^29 + 2^27 + 2^24
        // entries.
        let large = b"\0\0\0\x01sgpd\0\0\0\0\0\0\0\x23\0\0\0\x01sgpd\xa9\0\0\0\0\0\0\0\
            \0\0\0\0\0\0\0\0\0\0\0\0\x55\0\0\0\x0a\x0au";
        assert!(!decodable(large));
        assert_eq!(moof_end(large, 1), None);
        assert_eq!(parse_head(large), None);
        // Nested in a moof's traf, 2^29 entries: refused at once, not decoded.
        let traf = mp4_box(b"traf", &sgpd(0, b"roll", 1 << 29, &[0, 1]));
        let moof = mp4_box(b"moof", &traf);
        assert!(!decodable(&moof));
        assert_eq!(moof_end(&moof, 1), None);
        // What mp4-atom decodes in bounded steps passes: one entry, `refs` entries (5 bytes
        // or more each), version 1 (a default length per entry), and a cut-off box.
        for ok in [
            sgpd(0, b"roll", 1, &[0, 1]),
            sgpd(0, b"refs", 1 << 29, &[]),
            sgpd(1, b"roll", 1 << 29, &[]),
            sgpd(0, b"roll", 7, &[])[..14].to_vec(),
        ] {
            assert!(
                decodable(&mp4_box(b"moof", &mp4_box(b"traf", &ok))),
                "{ok:?}"
            );
        }
        // And so do the files tern writes.
        let parts = record();
        let init = file_init(&parts[0].init, parts[0].segment_pdt_ms).expect("init");
        assert!(decodable(&init));
        assert!(parts.iter().all(|p| decodable(&p.data)));
    }
}

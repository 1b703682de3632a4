//! CMAF fMP4 boxes through `mp4-atom`: the init segment (ftyp + moov) and one part
//! (moof + mdat).

use mp4_atom::esds::{DecoderConfig, DecoderSpecific, EsDescriptor, SLConfig};
use mp4_atom::{
    Atom, Audio, Av01, Av1c, Avc1, Avcc, AvccExt, Codec, Dinf, Dops, Dref, Encode, Esds,
    FixedPoint, Ftyp, Hdlr, Header, Hvc1, HvcCArray, Hvcc, Mdat, Mdhd, Mdia, Mfhd, Minf, Moof,
    Moov, Mp4a, Mvex, Mvhd, Opus, Smhd, Stbl, Stco, Stsd, Tfdt, Tfhd, Tkhd, Traf, Trak, Trex, Trun,
    TrunEntry, Url, Visual, Vmhd, Vp08, Vp09, VpcC,
};

use super::sps::{parse_h265_sps, parse_sps};
use super::{AudioConfig, VideoConfig};

/// Track id of the video track.
pub(crate) const VIDEO_TRACK_ID: u32 = 1;
/// Track id of the audio track.
pub(crate) const AUDIO_TRACK_ID: u32 = 2;
/// The video timescale: the 90 kHz of the input timestamps.
pub(crate) const VIDEO_TIMESCALE: u32 = 90_000;
/// The Opus timescale (RFC 7845: Opus always runs at 48 kHz).
pub(crate) const OPUS_TIMESCALE: u32 = 48_000;

/// ISO/IEC 14496-12 8.8.3.1 sample flags: `sample_depends_on = 2` (an I picture).
const FLAGS_SYNC: u32 = 0x0200_0000;
/// `sample_depends_on = 1` and `sample_is_non_sync_sample`.
const FLAGS_NON_SYNC: u32 = 0x0101_0000;

/// One sample of a run, as the trun describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SampleInfo {
    /// Decode time in the track timescale, output timeline.
    pub dts: u64,
    pub duration: u32,
    pub size: u32,
    /// Composition offset (pts - dts).
    pub cts: i32,
    pub sync: bool,
}

/// One track's samples in a part: its traf and its bytes in the mdat.
pub(crate) struct Run<'a> {
    pub track_id: u32,
    pub samples: &'a [SampleInfo],
    pub data: &'a [u8],
}

/// The timescale of an audio track.
pub(crate) fn audio_timescale(cfg: &AudioConfig) -> u32 {
    match cfg {
        AudioConfig::Aac { sample_rate, .. } => (*sample_rate).max(1),
        AudioConfig::Opus { .. } => OPUS_TIMESCALE,
    }
}

fn video_trak(sps: &[u8], pps: &[u8]) -> mp4_atom::Result<Trak> {
    let info = parse_sps(sps);
    let (width, height) = info.map_or((0, 0), |i| (i.width as u16, i.height as u16));
    let mut avcc = Avcc::new(sps, pps)?;
    // ISO/IEC 14496-15 5.3.3.1.2: the extension is present for the High profiles.
    if let Some(i) = info.filter(|i| matches!(i.profile_idc, 100 | 110 | 122 | 144)) {
        avcc.ext = Some(AvccExt {
            chroma_format: i.chroma_format_idc,
            bit_depth_luma: i.bit_depth_luma,
            bit_depth_chroma: i.bit_depth_chroma,
            sequence_parameter_sets_ext: Vec::new(),
        });
    }
    let avc1 = Avc1 {
        visual: visual(width, height),
        avcc,
        ..Avc1::default()
    };
    Ok(video_track((width, height), avc1.into()))
}

/// A video sample entry's common fields: the picture size, the one data reference.
fn visual(width: u16, height: u16) -> Visual {
    Visual {
        data_reference_index: 1,
        width,
        height,
        ..Visual::default()
    }
}

/// H265 (ISO/IEC 14496-15 8.3): an `hvc1` sample entry, its `hvcC` holding the VPS, SPS and
/// PPS (so samples carry none), profile, tier, level, chroma format and bit depths from the
/// SPS, NAL unit lengths of 4 bytes. An SPS that does not parse leaves those fields 0 (the
/// parameter sets still decode).
fn hevc_trak(vps: &[u8], sps: &[u8], pps: &[u8]) -> Trak {
    let info = parse_h265_sps(sps);
    let (width, height) = info.map_or((0, 0), |i| (i.width as u16, i.height as u16));
    let array = |nal_unit_type: u8, nal: &[u8]| HvcCArray {
        completeness: true,
        nal_unit_type,
        nalus: vec![nal.to_vec()],
    };
    let mut hvcc = Hvcc::new();
    if let Some(i) = info {
        hvcc.general_profile_space = i.profile_space;
        hvcc.general_tier_flag = i.tier;
        hvcc.general_profile_idc = i.profile_idc;
        hvcc.general_profile_compatibility_flags = i.compatibility;
        hvcc.general_constraint_indicator_flags = i.constraints;
        hvcc.general_level_idc = i.level_idc;
        hvcc.chroma_format_idc = i.chroma_format_idc;
        hvcc.bit_depth_luma_minus8 = i.bit_depth_luma - 8;
        hvcc.bit_depth_chroma_minus8 = i.bit_depth_chroma - 8;
        hvcc.num_temporal_layers = i.sub_layers;
        hvcc.temporal_id_nested = i.temporal_id_nesting;
    }
    hvcc.length_size_minus_one = 3;
    hvcc.arrays = vec![array(32, vps), array(33, sps), array(34, pps)];
    let hvc1 = Hvc1 {
        visual: visual(width, height),
        hvcc,
        ..Hvc1::default()
    };
    video_track((width, height), hvc1.into())
}

/// The RFC 6381 / ISO/IEC 14496-15 Annex E codec string of an H265 SPS:
/// `hvc1.{space}{profile}.{compatibility, bit-reversed, hex}.{L|H}{level}.{constraint
/// bytes, trailing zero bytes left out}` (`hvc1.1.6.L93.B0`).
pub(crate) fn hevc_codec(sps: &[u8]) -> String {
    match parse_h265_sps(sps) {
        Some(i) => hvcc_codec(&Hvcc {
            general_profile_space: i.profile_space,
            general_tier_flag: i.tier,
            general_profile_idc: i.profile_idc,
            general_profile_compatibility_flags: i.compatibility,
            general_constraint_indicator_flags: i.constraints,
            general_level_idc: i.level_idc,
            ..Hvcc::new()
        }),
        None => "hvc1".into(),
    }
}

/// The same string from an `hvcC` record (a recorded file's init segment).
pub(crate) fn hvcc_codec(c: &Hvcc) -> String {
    let space = ["", "A", "B", "C"][usize::from(c.general_profile_space & 3)];
    let compat = u32::from_be_bytes(c.general_profile_compatibility_flags).reverse_bits();
    let tier = if c.general_tier_flag { 'H' } else { 'L' };
    let mut s = format!(
        "hvc1.{space}{}.{compat:X}.{tier}{}",
        c.general_profile_idc, c.general_level_idc
    );
    let flags = &c.general_constraint_indicator_flags;
    let keep = flags.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
    for b in &flags[..keep] {
        s.push_str(&format!(".{b:X}"));
    }
    s
}

/// VP8 in ISO-BMFF (the WebM project's "VP Codec ISO Media File Format Binding"): a `vp08`
/// sample entry with a `vpcC` (profile 0, 8 bits, 4:2:0; level unspecified).
fn vp8_trak(width: u16, height: u16) -> Trak {
    let vp08 = Vp08 {
        visual: visual(width, height),
        vpcc: VpcC {
            profile: 0,
            level: 10,
            bit_depth: 8,
            chroma_subsampling: 1,
            ..VpcC::default()
        },
        ..Vp08::default()
    };
    video_track((width, height), vp08.into())
}

/// VP9: a `vp09` sample entry with a `vpcC` (the profile of the key frames, 8 bits, 4:2:0;
/// level unspecified), as for VP8.
fn vp9_trak(width: u16, height: u16, profile: u8) -> Trak {
    let vp09 = Vp09 {
        visual: visual(width, height),
        vpcc: VpcC {
            profile,
            level: 10,
            bit_depth: 8,
            chroma_subsampling: 1,
            ..VpcC::default()
        },
        btrt: None,
        colr: None,
        pasp: None,
        spatial: None,
    };
    video_track((width, height), vp09.into())
}

/// AV1: an `av01` sample entry with an `av1C` of the sequence header's fields and the
/// sequence header OBU itself as its configOBUs (AV1-ISOBMFF §2.3).
fn av1_trak(info: &super::av1c::Av1Info, sequence_header: &[u8]) -> Trak {
    // set_video takes only sizes that fit 16 bits.
    let (width, height) = (info.width as u16, info.height as u16);
    let av01 = Av01 {
        visual: visual(width, height),
        av1c: Av1c {
            seq_profile: info.seq_profile,
            seq_level_idx_0: info.seq_level_idx_0,
            seq_tier_0: info.seq_tier_0,
            high_bitdepth: info.high_bitdepth,
            twelve_bit: info.twelve_bit,
            monochrome: info.monochrome,
            chroma_subsampling_x: info.chroma_subsampling_x,
            chroma_subsampling_y: info.chroma_subsampling_y,
            chroma_sample_position: info.chroma_sample_position,
            initial_presentation_delay: None,
            config_obus: sequence_header.to_vec(),
        },
        ..Av01::default()
    };
    video_track((width, height), av01.into())
}

fn audio_trak(cfg: &AudioConfig) -> Trak {
    let timescale = audio_timescale(cfg);
    let audio = |channels: u8| Audio {
        data_reference_index: 1,
        channel_count: u16::from(channels.max(1)),
        sample_size: 16,
        // 16.16 fixed point: a rate above 65535 Hz does not fit and is written as 0.
        sample_rate: FixedPoint::new(u16::try_from(timescale).unwrap_or(0), 0),
    };
    let codec: Codec = match cfg {
        AudioConfig::Aac { asc, channels, .. } => {
            let profile = asc.first().map_or(2, |b| b >> 3);
            Mp4a {
                audio: audio(*channels),
                esds: Esds {
                    es_desc: EsDescriptor {
                        es_id: AUDIO_TRACK_ID as u16,
                        dec_config: DecoderConfig {
                            // ISO/IEC 14496-1: 0x40 is MPEG-4 audio, stream type 5 audio.
                            object_type_indication: 0x40,
                            stream_type: 5,
                            dec_specific: Some(DecoderSpecific {
                                profile,
                                raw: asc.clone(),
                                ..DecoderSpecific::default()
                            }),
                            ..DecoderConfig::default()
                        },
                        sl_config: SLConfig::default(),
                        ..EsDescriptor::default()
                    },
                },
                btrt: None,
                taic: None,
            }
            .into()
        }
        AudioConfig::Opus { channels } => {
            // Mapping family 0 (no table) covers mono and stereo, which is what WebRTC sends.
            let channels = (*channels).clamp(1, 2);
            Opus {
                audio: audio(channels),
                dops: Dops {
                    output_channel_count: channels,
                    pre_skip: 0,
                    input_sample_rate: OPUS_TIMESCALE,
                    output_gain: 0,
                    channel_mapping: None,
                },
                btrt: None,
            }
            .into()
        }
    };
    trak(
        AUDIO_TRACK_ID,
        timescale,
        b"soun",
        "SoundHandler",
        (0, 0),
        codec,
    )
}

/// The video track of `codec`'s sample entry, its picture `size`.
fn video_track(size: (u16, u16), codec: Codec) -> Trak {
    trak(
        VIDEO_TRACK_ID,
        VIDEO_TIMESCALE,
        b"vide",
        "VideoHandler",
        size,
        codec,
    )
}

fn trak(
    track_id: u32,
    timescale: u32,
    handler: &[u8; 4],
    name: &str,
    (width, height): (u16, u16),
    codec: Codec,
) -> Trak {
    let video = handler == b"vide";
    Trak {
        tkhd: Tkhd {
            track_id,
            enabled: true,
            in_movie: true,
            volume: FixedPoint::new(u8::from(!video), 0),
            width: FixedPoint::new(width, 0),
            height: FixedPoint::new(height, 0),
            ..Tkhd::default()
        },
        mdia: Mdia {
            mdhd: Mdhd {
                timescale,
                language: "und".into(),
                ..Mdhd::default()
            },
            hdlr: Hdlr {
                handler: handler.into(),
                name: name.into(),
            },
            minf: Minf {
                vmhd: video.then(Vmhd::default),
                smhd: (!video).then(Smhd::default),
                dinf: Dinf {
                    dref: Dref {
                        entries: vec![Url::default().into()],
                    },
                },
                stbl: Stbl {
                    stsd: Stsd {
                        codecs: vec![codec],
                    },
                    stco: Some(Stco::default()),
                    ..Stbl::default()
                },
                ..Minf::default()
            },
        },
        ..Trak::default()
    }
}

/// The init segment for the configured tracks: ftyp (CMAF brands) and a moov with an empty
/// sample table per track and an mvex announcing fragments.
pub(crate) fn init_segment(
    video: Option<&VideoConfig>,
    audio: Option<&AudioConfig>,
) -> mp4_atom::Result<Vec<u8>> {
    let mut traks = Vec::new();
    match video {
        Some(VideoConfig::H264 { sps, pps }) => traks.push(video_trak(sps, pps)?),
        Some(VideoConfig::H265 { vps, sps, pps }) => traks.push(hevc_trak(vps, sps, pps)),
        Some(VideoConfig::Vp8 { width, height }) => traks.push(vp8_trak(*width, *height)),
        Some(VideoConfig::Vp9 {
            width,
            height,
            profile,
        }) => traks.push(vp9_trak(*width, *height, *profile)),
        Some(VideoConfig::Av1 { sequence_header }) => {
            // set_video takes only a sequence header that parses.
            if let Some(info) = super::av1_info(sequence_header) {
                traks.push(av1_trak(&info, sequence_header));
            }
        }
        None => {}
    }
    if let Some(cfg) = audio {
        traks.push(audio_trak(cfg));
    }
    let trex = traks
        .iter()
        .map(|t| Trex {
            track_id: t.tkhd.track_id,
            default_sample_description_index: 1,
            ..Trex::default()
        })
        .collect();
    let mut out = Vec::with_capacity(1024);
    Ftyp {
        major_brand: b"iso6".into(),
        minor_version: 0,
        compatible_brands: vec![b"iso6".into(), b"cmfc".into(), b"mp41".into()],
    }
    .encode(&mut out)?;
    Moov {
        mvhd: Mvhd {
            timescale: 1000,
            rate: FixedPoint::new(1, 0),
            volume: FixedPoint::new(1, 0),
            next_track_id: AUDIO_TRACK_ID + 1,
            ..Mvhd::default()
        },
        mvex: Some(Mvex { mehd: None, trex }),
        trak: traks,
        ..Moov::default()
    }
    .encode(&mut out)?;
    Ok(out)
}

fn traf(run: &Run<'_>, data_offset: i32) -> Traf {
    let with_cts = run.samples.iter().any(|s| s.cts != 0);
    let entries = run
        .samples
        .iter()
        .map(|s| TrunEntry {
            duration: Some(s.duration),
            size: Some(s.size),
            flags: Some(if s.sync { FLAGS_SYNC } else { FLAGS_NON_SYNC }),
            cts: with_cts.then_some(i64::from(s.cts)),
        })
        .collect::<Vec<_>>();
    Traf {
        tfhd: Tfhd {
            track_id: run.track_id,
            default_base_is_moof: true,
            ..Tfhd::default()
        },
        tfdt: Some(Tfdt {
            base_media_decode_time: run.samples.first().map_or(0, |s| s.dts),
        }),
        trun: vec![Trun {
            data_offset: Some(data_offset),
            samples: entries.into(),
        }],
        ..Traf::default()
    }
}

/// Appends one part to `out`: a moof (sequence number `seq`, one traf per non-empty run, data
/// offsets relative to the moof) and an mdat holding the runs' bytes in the same order.
pub(crate) fn write_part(out: &mut Vec<u8>, seq: u32, runs: &[Run<'_>]) -> mp4_atom::Result<()> {
    let runs: Vec<&Run<'_>> = runs.iter().filter(|r| !r.samples.is_empty()).collect();
    let payload: usize = runs.iter().map(|r| r.data.len()).sum();
    let mdat = Header {
        kind: Mdat::KIND,
        size: Some(payload),
    };
    let mut mdat_header = Vec::with_capacity(16);
    mdat.encode(&mut mdat_header)?;
    let start = out.len();
    let mut moof = Moof {
        mfhd: Mfhd {
            sequence_number: seq,
        },
        traf: runs.iter().map(|r| traf(r, 0)).collect(),
    };
    // The data offsets depend on the moof's size, which does not depend on their values:
    // encode once to measure, then again with the offsets filled in.
    moof.encode(out)?;
    let moof_len = out.len() - start;
    out.truncate(start);
    let mut offset = moof_len + mdat_header.len();
    for (traf, run) in moof.traf.iter_mut().zip(&runs) {
        let offset32 = i32::try_from(offset).map_err(|_| mp4_atom::Error::TooLarge(Mdat::KIND))?;
        for trun in &mut traf.trun {
            trun.data_offset = Some(offset32);
        }
        offset += run.data.len();
    }
    moof.encode(out)?;
    debug_assert_eq!(out.len() - start, moof_len);
    out.extend_from_slice(&mdat_header);
    for run in &runs {
        out.extend_from_slice(run.data);
    }
    Ok(())
}

/// The RFC 6381 `CODECS` value of the tracks (`avc1.64001f,mp4a.40.2`, `opus`).
pub(crate) fn codecs(video: Option<&VideoConfig>, audio: Option<&AudioConfig>) -> String {
    let mut parts = Vec::new();
    match video {
        Some(VideoConfig::H264 { sps, .. }) => {
            let b = |i: usize| sps.get(i).copied().unwrap_or(0);
            parts.push(format!("avc1.{:02x}{:02x}{:02x}", b(1), b(2), b(3)));
        }
        Some(VideoConfig::H265 { sps, .. }) => parts.push(hevc_codec(sps)),
        // profile 0, level 1.0, 8 bits, as the vpcC says.
        Some(VideoConfig::Vp8 { .. }) => parts.push("vp08.00.10.08".into()),
        Some(VideoConfig::Vp9 { profile, .. }) => parts.push(format!("vp09.{profile:02}.10.08")),
        Some(VideoConfig::Av1 { sequence_header }) => {
            parts.extend(super::av1_info(sequence_header).map(|i| i.codec()));
        }
        None => {}
    }
    match audio {
        Some(AudioConfig::Aac { asc, .. }) => {
            // The audio object type: 5 bits, 31 escaping to 32 + 6 more bits.
            let aot = match asc.as_slice() {
                [a, b, ..] if a >> 3 == 31 => 32 + (((a & 7) << 3) | (b >> 5)),
                [a, ..] => a >> 3,
                [] => 2,
            };
            parts.push(format!("mp4a.40.{aot}"));
        }
        Some(AudioConfig::Opus { .. }) => parts.push("opus".into()),
        None => {}
    }
    parts.join(",")
}

//! The feed on synthetic RTP and frames, into a real packager: which codecs it stores (the
//! one table), H264, H265 and VP8 rebuilt from packets, a skipped codec whose audio still
//! goes in, a codec change, and frames handed over as the encoder sent them.

use tern_pool::{BufferPool, MemoryRegistry, PoolConfig};

use super::*;
use crate::hls::HlsConfig;
use crate::hls::sps::tests::{PPS_720P_HIGH, SPS_720P_HIGH};

const WALL0: u64 = 1_795_622_400_000;

fn packager() -> Packager {
    let counter = MemoryRegistry::new().counter("hls_parts", 0);
    Packager::new(HlsConfig::default(), counter)
}

/// Packets with payloads from one pool.
struct Packets {
    pool: BufferPool,
    seq: u64,
}

impl Packets {
    fn new() -> Self {
        Packets {
            pool: BufferPool::new(PoolConfig::packets("test")).expect("pool"),
            seq: 1,
        }
    }

    fn packet(&mut self, kind: MediaKind, rtp_ts: u32, marker: bool, payload: &[u8]) -> RingPacket {
        let mut b = self.pool.alloc(payload.len());
        b.copy_from_slice(payload);
        let seq = self.seq;
        self.seq += 1;
        RingPacket {
            kind,
            layer: 0,
            seq,
            rtp_ts,
            marker,
            keyframe: false,
            capture_ntp: 0,
            payload: b.freeze(),
        }
    }
}

/// Every unit the feed gives for `pkts`, owned.
fn units(feed: &mut Feed, pkts: &[RingPacket]) -> Vec<Unit<'static>> {
    let mut out = Vec::new();
    for p in pkts {
        feed.push_rtp(p, &mut |u| out.push(u.into_owned()));
    }
    out
}

/// `frames` H264 frames at 30 fps, an IDR (with SPS and PPS) every 30, as RTP.
fn h264_packets(pk: &mut Packets, frames: u32) -> Vec<RingPacket> {
    let mut p = tern_proto::h264::Packetizer::new();
    let mut out = Vec::new();
    for i in 0..frames {
        let key = i % 30 == 0;
        let mut slice = vec![if key { 0x65 } else { 0x41 }; 2500];
        slice[1] = 0x88;
        let nals: Vec<&[u8]> = if key {
            vec![SPS_720P_HIGH, PPS_720P_HIGH, &slice]
        } else {
            vec![&slice]
        };
        let ts = i * 3000;
        let mut payloads = Vec::new();
        p.packetize(&nals, 1200, &mut |b, last| {
            payloads.push((b.to_vec(), last))
        })
        .expect("packetize");
        for (b, last) in payloads {
            out.push(pk.packet(MediaKind::Video, ts, last, &b));
        }
    }
    out
}

/// `frames` VP8 frames at 30 fps (640x360, a key frame every 30), one packet each.
fn vp8_packets(pk: &mut Packets, frames: u32) -> Vec<RingPacket> {
    (0..frames)
        .map(|i| {
            let key = i % 30 == 0;
            // RFC 7741 descriptor: S (start of partition), partition 0.
            let mut payload = vec![0x10];
            if key {
                // Frame tag (key frame, version 0, shown), start code, 640x360.
                payload.extend_from_slice(&[0x50, 0x42, 0x00, 0x9d, 0x01, 0x2a]);
                payload.extend_from_slice(&640u16.to_le_bytes());
                payload.extend_from_slice(&360u16.to_le_bytes());
            } else {
                payload.extend_from_slice(&[0x51, 0x42, 0x00]);
            }
            payload.resize(900, 0x5a);
            pk.packet(MediaKind::Video, i * 3000, true, &payload)
        })
        .collect()
}

/// `n` 20-ms Opus packets.
fn opus_packets(pk: &mut Packets, n: u32) -> Vec<RingPacket> {
    (0..n)
        .map(|i| pk.packet(MediaKind::Audio, i * 960, true, &[0xfc, 0xff, 0xfe]))
        .collect()
}

#[test]
fn the_table_decides_which_video_codecs_are_rebuilt() {
    for codec in VideoCodec::ALL {
        let d = VideoDepacketizer::from(codec);
        assert_eq!(d.codec(), codec);
        assert_eq!(
            !matches!(d, VideoDepacketizer::Skipped(_)),
            packaged(codec),
            "{codec}"
        );
    }
    let stored: Vec<VideoCodec> = VideoCodec::ALL
        .into_iter()
        .filter(|c| packaged(*c))
        .collect();
    assert_eq!(
        stored,
        [
            VideoCodec::H264,
            VideoCodec::Vp8,
            VideoCodec::Vp9,
            VideoCodec::Av1,
            VideoCodec::H265
        ]
    );
}

/// libx265, 320x180, 4 frames (IDR, P, CRA with its VPS/SPS/PPS again, P), access unit
/// delimiters on: `ffmpeg -f lavfi -i testsrc2=size=320x180:rate=30 -frames:v 4 -c:v libx265
/// -x265-params keyint=2:bframes=0:aud=1 -f hevc`.
const X265_320X180: &[u8] = include_bytes!("x265-320x180.h265");

/// The clip's access units as RTP (RFC 7798, 1,200-byte payloads), 30 fps.
fn h265_packets(pk: &mut Packets) -> Vec<RingPacket> {
    use tern_proto::h264::nal_units;
    // Access units start at their delimiter (type 35); each becomes length-prefixed.
    let mut aus: Vec<Vec<u8>> = Vec::new();
    for nal in nal_units(X265_320X180) {
        if h265::nal_type(nal) == h265::AUD {
            aus.push(Vec::new());
        }
        let au = aus.last_mut().expect("starts with a delimiter");
        au.extend_from_slice(&(nal.len() as u32).to_be_bytes());
        au.extend_from_slice(nal);
    }
    assert_eq!(aus.len(), 4);
    let mut out = Vec::new();
    for (i, au) in aus.iter().enumerate() {
        let mut payloads = Vec::new();
        h265::packetize(au, 1200, &mut |b, last| payloads.push((b.to_vec(), last)))
            .expect("packetize");
        for (b, last) in payloads {
            out.push(pk.packet(MediaKind::Video, i as u32 * 3000, last, &b));
        }
    }
    out
}

#[test]
fn h265_rtp_is_rebuilt_and_packaged_as_hvc1() {
    use mp4_atom::{Codec, Decode, Ftyp, Moov};
    let mut pk = Packets::new();
    let pkts = h265_packets(&mut pk);
    assert!(pkts.len() > 4, "fragmented: {} packets", pkts.len());
    let mut feed = Feed::new(VideoCodec::H265);
    let u = units(&mut feed, &pkts);
    let keys: Vec<(i64, bool)> = u
        .iter()
        .map(|u| match u {
            Unit::Video {
                dts,
                keyframe,
                format: VideoFormat::H265,
                ..
            } => (*dts, *keyframe),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        keys,
        [(0, true), (3000, false), (6000, true), (9000, false)]
    );
    assert_eq!(feed.skipped_frames(), 0);
    let mut p = packager();
    for (i, unit) in u.iter().enumerate() {
        unit.apply(&mut p, WALL0 + i as u64 * 33);
    }
    assert_eq!(p.codecs().as_deref(), Some("hvc1.1.6.L60.90"));
    assert_eq!(p.resolution(), Some((320, 180)));
    let init = p.init(1).expect("init segment");
    let mut buf = init.as_slice();
    Ftyp::decode(&mut buf).expect("ftyp");
    let moov = Moov::decode(&mut buf).expect("moov");
    let Codec::Hvc1(hvc1) = &moov.trak[0].mdia.minf.stbl.stsd.codecs[0] else {
        panic!(
            "hvc1 expected: {:?}",
            moov.trak[0].mdia.minf.stbl.stsd.codecs
        );
    };
    assert_eq!((hvc1.visual.width, hvc1.visual.height), (320, 180));
    // A recording's listing reads the same codec back from the file's head.
    let head = crate::hls::file::parse_head(&init).expect("head");
    assert_eq!(head.codecs, "hvc1.1.6.L60.90");
    let c = &hvc1.hvcc;
    assert_eq!((c.general_profile_idc, c.general_level_idc), (1, 60));
    assert_eq!((c.chroma_format_idc, c.length_size_minus_one), (1, 3));
    let types: Vec<u8> = c.arrays.iter().map(|a| a.nal_unit_type).collect();
    assert_eq!(types, [32, 33, 34], "VPS, SPS, PPS");
    assert!(
        c.arrays
            .iter()
            .all(|a| a.nalus.len() == 1 && a.completeness)
    );
    // The samples carry no parameter sets and no delimiters: each NAL unit after its
    // length is a slice (types 0-31).
    let mut sample = Vec::new();
    let params = crate::hls::nal::annexb_h265_to_sample(
        match &u[0] {
            Unit::Video { data, .. } => data,
            _ => unreachable!(),
        },
        &mut sample,
    );
    assert!(params.vps.is_some() && params.sps.is_some() && params.pps.is_some());
    let nals = h265::split_length_prefixed(&sample).expect("length-prefixed");
    assert!(!nals.is_empty());
    assert!(
        nals.iter().all(|n| h265::nal_type(n) < 32),
        "{:?}",
        nals.iter().map(|n| h265::nal_type(n)).collect::<Vec<_>>()
    );
}

/// libaom, 320x180 yuv420p, 60 frames at 30 fps, a key frame every 30: `ffmpeg -f lavfi -i
/// testsrc=size=320x180:rate=30 -frames:v 60 -pix_fmt yuv420p -c:v libaom-av1 -cpu-used 8
/// -g 30 -b:v 200k -f obu` (temporal units of sized OBUs, each after a temporal delimiter).
const AOM_320X180: &[u8] = include_bytes!("aom-320x180.obu");

/// The clip's temporal units as RTP (the AOM payload format), one packet each: the
/// aggregation header (W = 0: every element after its length; N on a key frame's), then its
/// OBUs without their size fields, the temporal delimiter left out as senders do.
fn av1_packets(pk: &mut Packets) -> Vec<RingPacket> {
    use tern_proto::av1::{OBU_TEMPORAL_DELIMITER, is_keyframe_tu, obus, write_leb128};
    let mut tus: Vec<Vec<u8>> = Vec::new();
    let mut at = 0;
    let mut walk = obus(AOM_320X180);
    for obu in walk.by_ref() {
        let len = 1 + usize::from(obu.extension.is_some());
        let mut size = Vec::new();
        write_leb128(obu.payload.len(), &mut size);
        let whole = len + size.len() + obu.payload.len();
        if obu.obu_type == OBU_TEMPORAL_DELIMITER {
            tus.push(Vec::new());
        }
        tus.last_mut()
            .expect("starts with a delimiter")
            .extend_from_slice(&AOM_320X180[at..at + whole]);
        at += whole;
    }
    assert!(!walk.malformed());
    assert_eq!(tus.len(), 60);
    let mut out = Vec::new();
    for (i, tu) in tus.iter().enumerate() {
        let key = is_keyframe_tu(tu);
        let mut payload = vec![if key { 0x08 } else { 0x00 }];
        for obu in obus(tu).filter(|o| o.obu_type != OBU_TEMPORAL_DELIMITER) {
            let mut element = vec![obu.obu_type << 3 | u8::from(obu.extension.is_some()) << 2];
            element.extend(obu.extension);
            element.extend_from_slice(obu.payload);
            write_leb128(element.len(), &mut payload);
            payload.extend_from_slice(&element);
        }
        out.push(pk.packet(MediaKind::Video, i as u32 * 3000, true, &payload));
    }
    out
}

#[test]
fn av1_rtp_is_rebuilt_and_packaged_as_av01() {
    use mp4_atom::{Codec, Decode, Ftyp, Moov};
    let mut pk = Packets::new();
    let pkts = av1_packets(&mut pk);
    let mut feed = Feed::new(VideoCodec::Av1);
    let u = units(&mut feed, &pkts);
    let keys: Vec<i64> = u
        .iter()
        .filter_map(|u| match u {
            Unit::Video {
                dts,
                keyframe,
                format: VideoFormat::Av1,
                ..
            } => keyframe.then_some(*dts),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(u.len(), 60);
    assert_eq!(keys, [0, 90_000], "a key frame every 30");
    assert_eq!((feed.skipped_frames(), feed.damaged_frames()), (0, 0));
    let mut p = packager();
    for (i, unit) in u.iter().enumerate() {
        unit.apply(&mut p, WALL0 + i as u64 * 33);
    }
    // Profile 0, level 2.0 (index 0), Main tier, 8 bits: as ffprobe reads the file.
    assert_eq!(p.codecs().as_deref(), Some("av01.0.00M.08"));
    assert_eq!(p.resolution(), Some((320, 180)));
    let stats = p.stats();
    assert_eq!(stats.dropped_samples, 0);
    assert!(stats.parts >= 3, "{stats:?}");
    let init = p.init(1).expect("init segment");
    let mut buf = init.as_slice();
    Ftyp::decode(&mut buf).expect("ftyp");
    let moov = Moov::decode(&mut buf).expect("moov");
    let Codec::Av01(av01) = &moov.trak[0].mdia.minf.stbl.stsd.codecs[0] else {
        panic!(
            "av01 expected: {:?}",
            moov.trak[0].mdia.minf.stbl.stsd.codecs
        );
    };
    assert_eq!((av01.visual.width, av01.visual.height), (320, 180));
    let c = &av01.av1c;
    assert_eq!(
        (c.seq_profile, c.seq_level_idx_0, c.seq_tier_0),
        (0, 0, false)
    );
    assert!(c.chroma_subsampling_x && c.chroma_subsampling_y && !c.high_bitdepth);
    // The configOBUs are the sequence header OBU, whole, with its size field.
    assert_eq!(c.config_obus[0], 0x0a, "{:02x?}", c.config_obus);
    let head = crate::hls::file::parse_head(&init).expect("head");
    assert_eq!(head.codecs, "av01.0.00M.08");
    // Every part's first sample starts with an OBU other than a temporal delimiter (the
    // key frame's sequence header, header byte 0x0a, in the first).
    let first = p.part(0, 0).expect("part 0.0");
    let mdat = first.windows(4).position(|w| w == b"mdat").expect("mdat");
    assert_eq!(
        first[mdat + 4],
        0x0a,
        "a sequence header, no temporal delimiter"
    );
}

#[test]
fn h264_rtp_is_rebuilt_into_annex_b_access_units_that_package() {
    let mut pk = Packets::new();
    let pkts = h264_packets(&mut pk, 90);
    let mut feed = Feed::new(VideoCodec::H264);
    let u = units(&mut feed, &pkts);
    assert_eq!(u.len(), 90, "one unit per access unit");
    let keys: Vec<i64> = u
        .iter()
        .filter_map(|u| match u {
            Unit::Video {
                keyframe: true,
                dts,
                format: VideoFormat::AnnexB,
                ..
            } => Some(*dts),
            _ => None,
        })
        .collect();
    assert_eq!(keys, [0, 90_000, 180_000]);
    let mut p = packager();
    for (i, unit) in u.iter().enumerate() {
        unit.apply(&mut p, WALL0 + i as u64 * 33);
    }
    assert!(
        p.codecs().is_some_and(|c| c.starts_with("avc1.64001f")),
        "{:?}",
        p.codecs()
    );
    assert!(p.has_complete_segment());
    assert_eq!(feed.damaged_frames(), 0);
}

#[test]
fn a_lost_packet_damages_its_access_unit_alone() {
    let mut pk = Packets::new();
    let mut pkts = h264_packets(&mut pk, 3);
    // The IDR is split into fragments: lose the second one.
    let lost = pkts.remove(1);
    assert!(!lost.marker);
    let mut feed = Feed::new(VideoCodec::H264);
    let u = units(&mut feed, &pkts);
    assert_eq!(u.len(), 2, "{u:?}");
    assert_eq!(feed.damaged_frames(), 1);
}

#[test]
fn vp8_rtp_is_rebuilt_into_frames_that_package() {
    let mut pk = Packets::new();
    let pkts = vp8_packets(&mut pk, 90);
    let mut feed = Feed::new(VideoCodec::Vp8);
    let u = units(&mut feed, &pkts);
    assert_eq!(u.len(), 90);
    assert!(matches!(
        u[0],
        Unit::Video {
            keyframe: true,
            format: VideoFormat::Vp8,
            ..
        }
    ));
    let mut p = packager();
    for (i, unit) in u.iter().enumerate() {
        unit.apply(&mut p, WALL0 + i as u64 * 33);
    }
    assert!(
        p.codecs().is_some_and(|c| c.starts_with("vp08")),
        "{:?}",
        p.codecs()
    );
    assert_eq!(p.resolution(), Some((640, 360)));
}

#[test]
fn a_codec_outside_the_table_is_counted_and_its_audio_still_goes_in() {
    let mut pk = Packets::new();
    // AV1 packets (an aggregation header and one OBU), one per frame.
    let video: Vec<RingPacket> = (0..30)
        .map(|i| pk.packet(MediaKind::Video, i * 3000, true, &[0x10, 0x32, 0x00]))
        .collect();
    let audio = opus_packets(&mut pk, 50);
    // Every codec of the table is packaged now: the feed a codec taken out of it would
    // get.
    let mut feed = Feed {
        video: VideoDepacketizer::Skipped(VideoCodec::Av1),
        ..Feed::new(VideoCodec::H264)
    };
    let mut u = units(&mut feed, &video);
    assert!(u.is_empty(), "{u:?}");
    assert_eq!(feed.skipped_frames(), 30);
    u = units(&mut feed, &audio);
    assert_eq!(u.len(), 51, "the configuration, then every packet");
    assert_eq!(u[0], Unit::AudioConfig(AudioConfig::Opus { channels: 2 }));
    let times: Vec<i64> = u[1..]
        .iter()
        .map(|u| match u {
            Unit::Audio { pts, .. } => *pts,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(times[..3], [0, 960, 1920]);
}

#[test]
fn a_codec_change_brings_its_own_depacketizer() {
    let mut pk = Packets::new();
    let mut feed = Feed::new(VideoCodec::Av1);
    let h264 = h264_packets(&mut pk, 2);
    assert!(units(&mut feed, &h264).is_empty(), "H264 read as AV1");
    feed.set_codec(VideoCodec::H264);
    assert_eq!(feed.codec(), VideoCodec::H264);
    let h264 = h264_packets(&mut pk, 2);
    assert_eq!(units(&mut feed, &h264).len(), 2);
    feed.set_codec(VideoCodec::Vp8);
    let vp8 = vp8_packets(&mut pk, 2);
    assert_eq!(units(&mut feed, &vp8).len(), 2);
}

#[test]
fn frames_are_handed_over_as_they_came_at_90_khz() {
    let mut feed = Feed::default();
    let mut out = Vec::new();
    let samples = [
        Sample::VideoConfig {
            sps: SPS_720P_HIGH.to_vec(),
            pps: PPS_720P_HIGH.to_vec(),
        },
        Sample::Video {
            dts_ms: 1000,
            pts_ms: 1066,
            keyframe: true,
            avcc: vec![0, 0, 0, 2, 0x65, 0x88],
        },
        Sample::Audio {
            pts: 4096,
            data: vec![1, 2, 3],
        },
    ];
    for s in &samples {
        feed.push_sample(s, &mut |u| out.push(u.into_owned()));
    }
    assert!(matches!(
        out[0],
        Unit::VideoConfig(VideoConfig::H264 { .. })
    ));
    assert_eq!(
        out[1],
        Unit::Video {
            dts: 90_000,
            pts: 95_940,
            keyframe: true,
            format: VideoFormat::Avcc,
            data: Cow::Owned(vec![0, 0, 0, 2, 0x65, 0x88]),
        }
    );
    assert_eq!(
        out[2],
        Unit::Audio {
            pts: 4096,
            data: Cow::Owned(vec![1, 2, 3]),
        }
    );
}

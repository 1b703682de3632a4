//! MPEG-2 transport stream muxing (ISO/IEC 13818-1), sans-IO: access units and audio
//! frames in with their 90 kHz times, whole 188-byte TS packets out, ready to be cut into
//! 7-packet (1316-byte) SRT messages for what reads a live TS (srt-live-transmit, ffmpeg,
//! vMix, OBS).
//!
//! One program (number [`PROGRAM`], PMT on [`PMT_PID`]) with at most one video stream
//! (H.264 or H.265 on [`VIDEO_PID`]) and one audio stream (AAC in ADTS, or Opus as ffmpeg
//! writes it, on [`AUDIO_PID`]). The PCR rides on the video PID, or on the audio PID when
//! there is no video, in the first TS packet of every PES of that PID: at [`PCR_DELAY`]
//! behind the access unit's DTS. PTS and DTS are written as given (masked to 33 bits); a
//! caller offsets them so that they start at [`PCR_DELAY`] or later (below that the PCR
//! stays at 0 and the first units have less than the usual decoder buffer time).
//!
//! PAT and PMT go out before every keyframe and otherwise whenever [`PSI_INTERVAL`] of
//! stream time passed since the last pair (or the times jumped back by more than a second).

use super::{PACKET, TsCodec};

/// PID of the program map table.
pub const PMT_PID: u16 = 0x1000;
/// PID of the video elementary stream.
pub const VIDEO_PID: u16 = 0x100;
/// PID of the audio elementary stream.
pub const AUDIO_PID: u16 = 0x101;
/// Number of the one program.
pub const PROGRAM: u16 = 1;
/// How far the PCR runs behind the DTS it is sent with: 700 ms of 90 kHz ticks (the
/// decoder buffer time ffmpeg's muxer uses by default).
pub const PCR_DELAY: u64 = 63_000;
/// Most stream time between two PAT/PMT pairs: 100 ms of 90 kHz ticks.
pub const PSI_INTERVAL: u64 = 9_000;

/// 33-bit timestamps.
const MASK33: u64 = (1 << 33) - 1;
/// A backward time jump larger than this (1 s) is a new timeline: PAT/PMT go out again.
const JUMP_BACK: u64 = 90_000;
/// The access unit delimiters put in front of units that lack one (any picture type).
const AUD_H264: &[u8] = &[0, 0, 0, 1, 0x09, 0xf0];
const AUD_H265: &[u8] = &[0, 0, 0, 1, 0x46, 0x01, 0x50];
/// Continuity counter slots.
const CC_PAT: usize = 0;
const CC_PMT: usize = 1;
const CC_VIDEO: usize = 2;
const CC_AUDIO: usize = 3;

/// The MPEG-2 CRC-32 table (polynomial 0x04C11DB7, not reflected).
const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = (i as u32) << 24;
        let mut k = 0;
        while k < 8 {
            c = if c & 0x8000_0000 != 0 {
                (c << 1) ^ 0x04c1_1db7
            } else {
                c << 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

/// The CRC-32 of PSI sections (MPEG-2: initial value all ones, not reflected, no final
/// xor). Over a whole section including its CRC it is 0.
pub fn crc32(data: &[u8]) -> u32 {
    data.iter().fold(0xffff_ffff, |crc, &b| {
        (crc << 8) ^ CRC_TABLE[usize::from((crc >> 24) as u8 ^ b)]
    })
}

/// The 7-byte ADTS header (no CRC) of a raw AAC frame of `frame_len` bytes, from the
/// stream's AudioSpecificConfig (at least 2 bytes: object type 1 to 4, a sampling
/// frequency index 0 to 12, a channel configuration 1 to 7). `None` if the configuration
/// does not fit ADTS or the frame is longer than ADTS can say (8184 bytes).
pub fn adts_header(asc: &[u8], frame_len: usize) -> Option<[u8; 7]> {
    let (&a, &b) = (asc.first()?, asc.get(1)?);
    let object_type = a >> 3;
    let frequency_index = (a & 7) << 1 | b >> 7;
    let channels = (b >> 3) & 0x0f;
    if !(1..=4).contains(&object_type) || frequency_index > 12 || !(1..=7).contains(&channels) {
        return None;
    }
    let len = frame_len.checked_add(7).filter(|&l| l <= 0x1fff)?;
    Some([
        0xff,
        // MPEG-4, layer 0, no CRC.
        0xf1,
        (object_type - 1) << 6 | frequency_index << 2 | channels >> 2,
        (channels & 3) << 6 | (len >> 11) as u8,
        (len >> 3) as u8,
        // Buffer fullness 0x7ff (variable rate), one raw data block.
        (len as u8 & 7) << 5 | 0x1f,
        0xfc,
    ])
}

/// The muxer of one transport stream: one program, a video and an audio stream.
#[derive(Debug)]
pub struct Muxer {
    video: Option<TsCodec>,
    audio: Option<TsCodec>,
    /// The PAT and PMT sections, CRC included.
    pat: Vec<u8>,
    pmt: Vec<u8>,
    /// Continuity counters: PAT, PMT, video, audio.
    cc: [u8; 4],
    /// Stream time of the last PAT/PMT pair.
    last_psi: Option<u64>,
    packets: u64,
    /// The PES being written (kept to reuse its allocation).
    pes: Vec<u8>,
}

impl Muxer {
    /// A muxer of a video stream (H.264 or H.265) and an audio stream (AAC or Opus); a
    /// codec of the wrong kind counts as no stream. Nothing is written until the first
    /// unit.
    pub fn new(video: Option<TsCodec>, audio: Option<TsCodec>) -> Muxer {
        let video = video.filter(|c| matches!(c, TsCodec::H264 | TsCodec::H265));
        let audio = audio.filter(|c| matches!(c, TsCodec::Aac | TsCodec::Opus));
        let pcr_pid = match (video, audio) {
            (Some(_), _) => VIDEO_PID,
            (None, Some(_)) => AUDIO_PID,
            // No PCR.
            (None, None) => 0x1fff,
        };
        let mut pat = vec![0x00, 0, 0, 0, 1, 0xc1, 0, 0];
        pat.extend(PROGRAM.to_be_bytes());
        pat.extend((0xe000 | PMT_PID).to_be_bytes());
        let mut pmt = vec![0x02, 0, 0];
        pmt.extend(PROGRAM.to_be_bytes());
        pmt.extend([0xc1, 0, 0]);
        pmt.extend((0xe000 | pcr_pid).to_be_bytes());
        // No program info.
        pmt.extend([0xf0, 0]);
        let mut es = |ty: u8, pid: u16, desc: &[u8]| {
            pmt.push(ty);
            pmt.extend((0xe000 | pid).to_be_bytes());
            pmt.extend((0xf000 | desc.len() as u16).to_be_bytes());
            pmt.extend_from_slice(desc);
        };
        match video {
            Some(TsCodec::H264) => es(0x1b, VIDEO_PID, &[]),
            Some(TsCodec::H265) => es(0x24, VIDEO_PID, &[]),
            _ => {}
        }
        match audio {
            Some(TsCodec::Aac) => es(0x0f, AUDIO_PID, &[]),
            // Registration 'Opus'; DVB extension descriptor, Opus tag 0x80, channel
            // configuration 2 (stereo: what WebRTC signals; mono packets decode too).
            Some(TsCodec::Opus) => es(
                0x06,
                AUDIO_PID,
                &[0x05, 4, b'O', b'p', b'u', b's', 0x7f, 2, 0x80, 2],
            ),
            _ => {}
        }
        finish_section(&mut pat);
        finish_section(&mut pmt);
        Muxer {
            video,
            audio,
            pat,
            pmt,
            cc: [0; 4],
            last_psi: None,
            packets: 0,
            pes: Vec::new(),
        }
    }

    /// TS packets written so far.
    pub fn packets_written(&self) -> u64 {
        self.packets
    }

    /// Writes one video access unit, Annex B (start codes), decoded at `dts` and shown at
    /// `pts` (90 kHz). An access unit delimiter is put first if the unit does not start
    /// with one; a keyframe gets PAT and PMT before it and the random access indicator.
    /// Returns whether anything was written (not without a video stream).
    pub fn video(
        &mut self,
        dts: u64,
        pts: u64,
        keyframe: bool,
        annexb: &[u8],
        out: &mut Vec<u8>,
    ) -> bool {
        let Some(codec) = self.video else {
            return false;
        };
        let (dts, pts) = (dts & MASK33, pts & MASK33);
        if keyframe || self.psi_due(dts) {
            self.psi(dts, out);
        }
        let mut pes = std::mem::take(&mut self.pes);
        pes_header(&mut pes, 0xe0, pts, (dts != pts).then_some(dts));
        let (aud, is_aud): (&[u8], fn(u8) -> bool) = match codec {
            TsCodec::H265 => (AUD_H265, |h| (h >> 1) & 0x3f == 35),
            _ => (AUD_H264, |h| h & 0x1f == 9),
        };
        if !first_nal_header(annexb).is_some_and(is_aud) {
            pes.extend_from_slice(aud);
        }
        pes.extend_from_slice(annexb);
        // PES_packet_length stays 0 (unbounded), as video may.
        self.packetize(VIDEO_PID, CC_VIDEO, &pes, keyframe, Some(pcr(dts)), out);
        self.pes = pes;
        true
    }

    /// Writes one raw AAC frame shown at `pts` (90 kHz), in an ADTS header made from the
    /// stream's AudioSpecificConfig `asc` (see [`adts_header`]). Returns whether anything
    /// was written (not without an AAC stream, nor with a configuration ADTS cannot say).
    pub fn aac(&mut self, pts: u64, asc: &[u8], frame: &[u8], out: &mut Vec<u8>) -> bool {
        if self.audio != Some(TsCodec::Aac) {
            return false;
        }
        let Some(header) = adts_header(asc, frame.len()) else {
            return false;
        };
        self.audio_pes(0xc0, pts, &[&header, frame], out)
    }

    /// Writes one Opus packet shown at `pts` (90 kHz), behind the control header of ETSI
    /// TS 102 366 as ffmpeg writes it (`0x7f 0xe0`, then the size as 0xff bytes and the
    /// remainder; no trims). Returns whether anything was written (not without an Opus
    /// stream, nor for a packet over 64 KiB).
    pub fn opus(&mut self, pts: u64, packet: &[u8], out: &mut Vec<u8>) -> bool {
        if self.audio != Some(TsCodec::Opus) {
            return false;
        }
        let mut control = Vec::with_capacity(3 + packet.len() / 255);
        control.extend([0x7f, 0xe0]);
        control.extend(std::iter::repeat_n(0xff, packet.len() / 255));
        control.push((packet.len() % 255) as u8);
        self.audio_pes(0xbd, pts, &[&control, packet], out)
    }

    /// Writes an audio PES of `parts` (with its length set) on the audio PID.
    fn audio_pes(&mut self, stream_id: u8, pts: u64, parts: &[&[u8]], out: &mut Vec<u8>) -> bool {
        let pts = pts & MASK33;
        let mut pes = std::mem::take(&mut self.pes);
        pes_header(&mut pes, stream_id, pts, None);
        for p in parts {
            pes.extend_from_slice(p);
        }
        let Ok(len) = u16::try_from(pes.len() - 6) else {
            self.pes = pes;
            return false;
        };
        pes[4..6].copy_from_slice(&len.to_be_bytes());
        if self.psi_due(pts) {
            self.psi(pts, out);
        }
        // Without video, the audio carries the PCR and every frame is a random access
        // point.
        let alone = self.video.is_none();
        let pcr = alone.then(|| pcr(pts));
        self.packetize(AUDIO_PID, CC_AUDIO, &pes, alone, pcr, out);
        self.pes = pes;
        true
    }

    /// Whether PAT and PMT are due at stream time `t`.
    fn psi_due(&self, t: u64) -> bool {
        self.last_psi.is_none_or(|last| {
            let ahead = t.wrapping_sub(last) & MASK33;
            let behind = last.wrapping_sub(t) & MASK33;
            if ahead <= behind {
                ahead >= PSI_INTERVAL
            } else {
                behind > JUMP_BACK
            }
        })
    }

    /// Writes PAT and PMT, one packet each.
    fn psi(&mut self, t: u64, out: &mut Vec<u8>) {
        let pat = std::mem::take(&mut self.pat);
        let pmt = std::mem::take(&mut self.pmt);
        self.section_packet(0, CC_PAT, &pat, out);
        self.section_packet(PMT_PID, CC_PMT, &pmt, out);
        self.pat = pat;
        self.pmt = pmt;
        self.last_psi = Some(t);
    }

    /// One TS packet holding a whole section (they are all short), 0xff-stuffed.
    fn section_packet(&mut self, pid: u16, cc: usize, section: &[u8], out: &mut Vec<u8>) {
        let start = out.len();
        let counter = self.next_cc(cc);
        // Unit start, payload only, pointer field 0.
        out.extend([0x47, 0x40 | (pid >> 8) as u8, pid as u8, 0x10 | counter, 0]);
        out.extend_from_slice(section);
        out.resize(start + PACKET, 0xff);
        self.packets += 1;
    }

    /// The next continuity counter of slot `i`.
    fn next_cc(&mut self, i: usize) -> u8 {
        let c = self.cc[i];
        self.cc[i] = (c + 1) & 0x0f;
        c
    }

    /// Cuts a PES into TS packets on `pid`. The first gets an adaptation field with the
    /// random access indicator and the PCR (if given and `pid` carries it); the last
    /// is filled up with adaptation field stuffing.
    fn packetize(
        &mut self,
        pid: u16,
        cc: usize,
        pes: &[u8],
        random_access: bool,
        pcr: Option<u64>,
        out: &mut Vec<u8>,
    ) {
        let pcr = pcr.filter(|_| self.pcr_pid() == pid);
        let mut rest = pes;
        let mut first = true;
        while first || !rest.is_empty() {
            let start = out.len();
            let pusi = if first { 0x40 } else { 0 };
            out.extend([0x47, pusi | (pid >> 8) as u8 & 0x1f, pid as u8, 0]);
            // Adaptation field bytes needed (length byte included) for the flags.
            let (flags, fixed) = match (first, random_access, pcr) {
                (true, ra, Some(_)) => (if ra { 0x50 } else { 0x10 }, 8),
                (true, true, None) => (0x40, 2),
                _ => (0, 0),
            };
            let take = rest.len().min(184 - fixed);
            let field = 184 - take;
            if field > 0 {
                // Length, then flags, PCR and stuffing, if there is room for them.
                out.push((field - 1) as u8);
                if field > 1 {
                    out.push(flags);
                    if let (true, Some(pcr)) = (first, pcr) {
                        out.extend(pcr_bytes(pcr));
                    }
                    out.resize(start + 4 + field, 0xff);
                }
            }
            out.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            let afc = if field > 0 { 0x30 } else { 0x10 };
            out[start + 3] = afc | self.next_cc(cc);
            self.packets += 1;
            first = false;
        }
    }

    /// The PID carrying the PCR.
    fn pcr_pid(&self) -> u16 {
        if self.video.is_some() {
            VIDEO_PID
        } else {
            AUDIO_PID
        }
    }
}

/// Fills in a PSI section's length (from its first 3 bytes to the end) and appends the
/// CRC.
fn finish_section(sec: &mut Vec<u8>) {
    let len = (sec.len() - 3 + 4) as u16;
    // Syntax indicator, '0', reserved '11'.
    sec[1..3].copy_from_slice(&(0xb000 | len).to_be_bytes());
    let crc = crc32(sec);
    sec.extend(crc.to_be_bytes());
}

/// Starts a PES packet in `pes` (cleared): start code, stream id, length 0, flags, PTS and
/// DTS if given.
fn pes_header(pes: &mut Vec<u8>, stream_id: u8, pts: u64, dts: Option<u64>) {
    pes.clear();
    pes.extend([0, 0, 1, stream_id, 0, 0]);
    // '10', data alignment (a unit starts here).
    pes.push(0x84);
    match dts {
        Some(dts) => {
            pes.extend([0xc0, 10]);
            pes.extend(timestamp(0x3, pts));
            pes.extend(timestamp(0x1, dts));
        }
        None => {
            pes.extend([0x80, 5]);
            pes.extend(timestamp(0x2, pts));
        }
    }
}

/// A PTS or DTS field: 4-bit prefix, 33 bits with marker bits.
fn timestamp(prefix: u8, t: u64) -> [u8; 5] {
    [
        prefix << 4 | ((t >> 30) as u8 & 7) << 1 | 1,
        (t >> 22) as u8,
        (t >> 14) as u8 | 1,
        (t >> 7) as u8,
        (t << 1) as u8 | 1,
    ]
}

/// The PCR base sent with a unit decoded at `t` (90 kHz).
fn pcr(t: u64) -> u64 {
    t.saturating_sub(PCR_DELAY)
}

/// A PCR field: 33-bit base, 6 reserved bits, 9-bit extension (0).
fn pcr_bytes(base: u64) -> [u8; 6] {
    [
        (base >> 25) as u8,
        (base >> 17) as u8,
        (base >> 9) as u8,
        (base >> 1) as u8,
        (base as u8 & 1) << 7 | 0x7e,
        0,
    ]
}

/// The header byte of the first NAL unit of an Annex B access unit.
fn first_nal_header(annexb: &[u8]) -> Option<u8> {
    let at = if annexb.starts_with(&[0, 0, 1]) {
        3
    } else if annexb.starts_with(&[0, 0, 0, 1]) {
        4
    } else {
        return None;
    };
    annexb.get(at).copied()
}

#[cfg(test)]
mod tests {
    use super::super::{AdtsConfig, Demuxer, Pes, TsStats, adts_frames, opus_packets};
    use super::*;
    use std::collections::HashMap;

    const SAMPLE: &[u8] = include_bytes!("../../../../assets/srt/sample.ts");
    /// AAC-LC, 44.1 kHz, stereo.
    const ASC: [u8; 2] = [0x12, 0x10];

    fn demux(ts: &[u8]) -> (Vec<Pes>, TsStats) {
        let mut d = Demuxer::new();
        let mut out = Vec::new();
        d.push(ts, &mut |p| out.push(p));
        d.flush(&mut |p| out.push(p));
        (out, d.stats())
    }

    fn assert_clean(stats: &TsStats) {
        assert_eq!(
            stats.cc_errors + stats.malformed + stats.dropped_pes + stats.resync_bytes,
            0,
            "{stats:?}"
        );
    }

    /// What [`check`] saw of one TS packet.
    #[derive(Debug)]
    struct Seen {
        pid: u16,
        start: bool,
        random_access: bool,
        pcr: Option<u64>,
    }

    /// Checks the packet structure of a muxer output: sync bytes, adaptation fields,
    /// continuity counters per PID, PSI sections and their CRC.
    fn check(ts: &[u8]) -> Vec<Seen> {
        assert_eq!(ts.len() % PACKET, 0, "whole packets only");
        let mut cc: HashMap<u16, u8> = HashMap::new();
        let mut seen = Vec::new();
        for p in ts.chunks(PACKET) {
            assert_eq!(p[0], 0x47);
            assert_eq!(p[1] & 0x80, 0, "no transport error");
            let start = p[1] & 0x40 != 0;
            let pid = u16::from(p[1] & 0x1f) << 8 | u16::from(p[2]);
            let afc = (p[3] >> 4) & 3;
            assert!(afc == 1 || afc == 3, "always a payload: {afc}");
            if let Some(prev) = cc.insert(pid, p[3] & 0x0f) {
                assert_eq!(p[3] & 0x0f, (prev + 1) & 0x0f, "counter of PID {pid:#x}");
            }
            let (mut random_access, mut pcr) = (false, None);
            let mut body = &p[4..];
            if afc == 3 {
                let len = usize::from(body[0]);
                assert!(len <= 182, "room for a payload byte");
                if len > 0 {
                    let flags = body[1];
                    random_access = flags & 0x40 != 0;
                    if flags & 0x10 != 0 {
                        let b = &body[2..8];
                        assert_eq!(b[4] & 0x7e, 0x7e, "reserved bits");
                        pcr = Some(
                            u64::from(b[0]) << 25
                                | u64::from(b[1]) << 17
                                | u64::from(b[2]) << 9
                                | u64::from(b[3]) << 1
                                | u64::from(b[4] >> 7),
                        );
                    }
                    let used = 2 + if pcr.is_some() { 6 } else { 0 };
                    assert!(body[used..=len].iter().all(|&b| b == 0xff), "stuffing");
                }
                body = &body[1 + len..];
            }
            if pid == 0 || pid == PMT_PID {
                assert!(start);
                assert_eq!(body[0], 0, "pointer field");
                let sec = &body[1..];
                assert_eq!(sec[0], if pid == 0 { 0 } else { 2 }, "table id");
                let len = usize::from(sec[1] & 0x0f) << 8 | usize::from(sec[2]);
                assert_eq!(crc32(&sec[..3 + len]), 0, "CRC of PID {pid:#x}");
                assert!(sec[3 + len..].iter().all(|&b| b == 0xff));
            }
            seen.push(Seen {
                pid,
                start,
                random_access,
                pcr,
            });
        }
        seen
    }

    /// An Annex B NAL unit of `len` bytes (header included) of a pseudo-random payload
    /// without start code emulation.
    fn nal(header: u8, len: usize, seed: u32) -> Vec<u8> {
        let mut v = vec![0, 0, 0, 1, header];
        v.extend(
            (0..len.saturating_sub(1) as u32).map(|i| (i.wrapping_mul(31) ^ seed) as u8 | 0x80),
        );
        v
    }

    #[test]
    fn crc_of_the_check_string() {
        assert_eq!(crc32(b"123456789"), 0x0376_e6e7);
        assert_eq!(crc32(&[]), 0xffff_ffff);
    }

    #[test]
    fn adts_header_from_the_audio_specific_config() {
        let frame = [0x21u8, 0x1b, 0x80, 0x03];
        let h = adts_header(&ASC, frame.len()).expect("AAC-LC");
        let mut adts = h.to_vec();
        adts.extend(frame);
        let (frames, clean) = adts_frames(&adts);
        assert!(clean);
        let expect = AdtsConfig {
            object_type: 2,
            frequency_index: 4,
            channels: 2,
        };
        assert_eq!(frames, [(expect, &frame[..])]);
        // 48 kHz mono HE-AAC signalled as its core, extra ASC bytes ignored.
        let h = adts_header(&[0x11, 0x88, 0x56, 0xe5], 0).expect("48 kHz mono");
        let (frames, _) = adts_frames(&h);
        assert_eq!(frames[0].0.audio_specific_config(), [0x11, 0x88]);
        assert_eq!(adts_header(&ASC, 8184).map(|h| h[3] & 3), Some(3));
        assert_eq!(adts_header(&ASC, 8185), None, "length past 13 bits");
        assert_eq!(adts_header(&[0x12], 10), None, "short");
        assert_eq!(adts_header(&[0xf8, 0x10], 10), None, "escaped object type");
        assert_eq!(adts_header(&[0x17, 0x90], 10), None, "explicit frequency");
        assert_eq!(adts_header(&[0x12, 0x00], 10), None, "channels in a PCE");
    }

    #[test]
    fn h264_and_aac_come_back_through_the_demuxer() {
        let mut m = Muxer::new(Some(TsCodec::H264), Some(TsCodec::Aac));
        let mut ts = Vec::new();
        let mut expect = Vec::new();
        let aud = AUD_H264.to_vec();
        let base = 200_000u64;
        // Sizes around the packet boundaries (stuffing of 0, 1, 2 and more bytes).
        let sizes: Vec<usize> = (150..=200)
            .chain(330..=380)
            .chain([1, 5000, 20_000])
            .collect();
        for (i, &size) in sizes.iter().enumerate() {
            let t = base + i as u64 * 3000;
            let keyframe = i % 30 == 0;
            let mut unit = Vec::new();
            if keyframe {
                unit.extend(nal(0x67, 12, 1));
                unit.extend(nal(0x68, 4, 2));
                unit.extend(nal(0x65, size, i as u32));
            } else if i % 7 == 0 {
                // Already delimited, with a 3-byte start code: kept as it is.
                unit.extend([0, 0, 1, 0x09, 0x30]);
                unit.extend(nal(0x41, size, i as u32));
            } else {
                unit.extend(nal(0x41, size, i as u32));
            }
            // Every other unit shown later than decoded (B-frame reordering).
            let pts = if i % 2 == 0 { t } else { t + 6000 };
            assert!(m.video(t, pts, keyframe, &unit, &mut ts));
            let data = if i % 7 == 0 && !keyframe {
                unit
            } else {
                [aud.clone(), unit].concat()
            };
            expect.push((VIDEO_PID, TsCodec::H264, pts, (pts != t).then_some(t), data));
            let frame: Vec<u8> = (0..size.min(6000) as u32 / 2)
                .map(|b| (b * 7 + i as u32) as u8)
                .collect();
            assert!(m.aac(t + 10, &ASC, &frame, &mut ts));
            expect.push((AUDIO_PID, TsCodec::Aac, t + 10, None, frame));
        }
        assert_eq!(m.packets_written() as usize * PACKET, ts.len());
        assert!(!m.opus(base, &[0xfc], &mut ts), "no Opus stream");
        let seen = check(&ts);
        let (out, stats) = demux(&ts);
        assert_clean(&stats);
        assert!(stats.last_pcr.is_some());
        assert_eq!(out.len(), expect.len());
        // A video PES (no length) comes out when the next one starts: compare per PID.
        let by_pid = |pid| out.iter().filter(move |p: &&Pes| p.pid == pid);
        let out = by_pid(VIDEO_PID).chain(by_pid(AUDIO_PID));
        expect.sort_by_key(|e| e.0);
        for (pes, (pid, codec, pts, dts, data)) in out.zip(expect) {
            assert_eq!(
                (pes.pid, pes.codec, pes.pts, pes.dts),
                (pid, codec, Some(pts), dts)
            );
            assert!(!pes.discontinuity);
            if codec == TsCodec::Aac {
                let (frames, clean) = adts_frames(&pes.data);
                assert!(clean);
                assert_eq!(frames.len(), 1);
                assert_eq!(frames[0].0.audio_specific_config(), ASC);
                assert_eq!(frames[0].1, &data[..]);
            } else {
                assert_eq!(pes.data, data);
            }
        }
        // The PCR is only on the video PID, in the first packet of each PES, 700 ms
        // behind the DTS.
        let pcrs: Vec<u64> = seen.iter().filter_map(|s| s.pcr).collect();
        assert_eq!(pcrs.len(), sizes.len());
        assert!(
            seen.iter()
                .all(|s| s.pcr.is_none() || (s.pid == VIDEO_PID && s.start))
        );
        assert_eq!(pcrs[0], base - PCR_DELAY);
        assert!(pcrs.windows(2).all(|w| w[1] - w[0] == 3000));
    }

    #[test]
    fn tables_before_keyframes_and_every_100_ms() {
        let mut m = Muxer::new(Some(TsCodec::H264), Some(TsCodec::Aac));
        let mut ts = Vec::new();
        // 2 s at 30 fps, a keyframe each second.
        for i in 0..60u64 {
            let t = 90_000 + i * 3000;
            m.video(t, t, i % 30 == 0, &nal(0x41, 400, 0), &mut ts);
        }
        let seen = check(&ts);
        let mut psi_at = Vec::new();
        let mut frame = 0;
        for (i, s) in seen.iter().enumerate() {
            if s.pid == 0 {
                assert_eq!(seen[i + 1].pid, PMT_PID, "PMT right after the PAT");
                psi_at.push(frame);
            }
            if s.pid == VIDEO_PID && s.start {
                assert_eq!(s.random_access, frame % 30 == 0, "frame {frame}");
                if s.random_access {
                    // PAT and PMT just before.
                    assert_eq!((seen[i - 2].pid, seen[i - 1].pid), (0, PMT_PID));
                }
                frame += 1;
            } else {
                assert!(!s.random_access);
            }
        }
        // Keyframes, then every 3 frames (100 ms) in between.
        let expect: Vec<u64> = (0..60).filter(|f| f % 30 % 3 == 0).collect();
        assert_eq!(psi_at, expect);
        // A jump back in time (a new timeline) sends them again; audio too.
        let mut more = Vec::new();
        m.aac(1000, &ASC, &[1, 2, 3], &mut more);
        assert_eq!(more.len(), 3 * PACKET);
        more.clear();
        m.aac(1000 + PSI_INTERVAL - 1, &ASC, &[1, 2, 3], &mut more);
        assert_eq!(more.len(), PACKET);
    }

    #[test]
    fn opus_comes_back_and_carries_the_pcr_alone() {
        let mut m = Muxer::new(None, Some(TsCodec::Opus));
        let mut ts = Vec::new();
        let sizes = [1usize, 3, 120, 254, 255, 256, 509, 510, 511, 1275];
        let mut sent = Vec::new();
        // 1 s of 20 ms packets.
        for i in 0..50u64 {
            let size = sizes[i as usize % sizes.len()];
            let mut packet = vec![0xfc];
            packet.extend((1..size as u32).map(|b| (b * 13 + i as u32) as u8));
            let pts = 100_000 + i * 1800;
            assert!(m.opus(pts, &packet, &mut ts));
            sent.push((pts, packet));
        }
        assert!(
            !m.video(0, 0, true, &[0, 0, 0, 1, 0x65], &mut ts),
            "no video"
        );
        assert!(!m.aac(0, &ASC, &[1], &mut ts), "no AAC");
        let seen = check(&ts);
        // PAT/PMT every 100 ms: 10 times in a second.
        assert_eq!(seen.iter().filter(|s| s.pid == 0).count(), 10);
        // Every audio PES is a random access point with a PCR.
        let starts: Vec<&Seen> = seen
            .iter()
            .filter(|s| s.pid == AUDIO_PID && s.start)
            .collect();
        assert_eq!(starts.len(), 50);
        assert!(starts.iter().all(|s| s.random_access && s.pcr.is_some()));
        let mut d = Demuxer::new();
        let mut out = Vec::new();
        d.push(&ts, &mut |p| out.push(p));
        assert_eq!(
            d.streams().collect::<Vec<_>>(),
            [(AUDIO_PID, TsCodec::Opus)]
        );
        assert_clean(&d.stats());
        assert!(d.stats().last_pcr.is_some());
        assert_eq!(
            out.len(),
            sent.len(),
            "audio PES have a length: none held back"
        );
        for (pes, (pts, packet)) in out.iter().zip(&sent) {
            assert_eq!(
                (pes.codec, pes.pts, pes.dts),
                (TsCodec::Opus, Some(*pts), None)
            );
            assert_eq!(
                pes.data[..3],
                [
                    0x7f,
                    0xe0,
                    if packet.len() < 255 {
                        packet.len() as u8
                    } else {
                        0xff
                    }
                ]
            );
            let (packets, clean) = opus_packets(&pes.data);
            assert!(clean);
            assert_eq!(packets, [&packet[..]]);
        }
        if let Some(streams) = probe("opus", &ts) {
            assert!(streams.contains("codec_name=opus"), "{streams}");
            assert!(streams.contains("channels=2"), "{streams}");
        }
    }

    #[test]
    fn h265_gets_its_delimiter_and_stream_type() {
        let mut m = Muxer::new(Some(TsCodec::H265), None);
        let mut ts = Vec::new();
        // VPS, SPS, PPS, IDR_W_RADL.
        let unit = [
            nal(0x40, 10, 0),
            nal(0x42, 10, 1),
            nal(0x44, 5, 2),
            nal(0x26, 300, 3),
        ]
        .concat();
        m.video(90_000, 90_000, true, &unit, &mut ts);
        let delimited = [AUD_H265, &unit].concat();
        m.video(93_000, 93_000, false, &delimited, &mut ts);
        check(&ts);
        let (out, stats) = demux(&ts);
        assert_clean(&stats);
        assert_eq!(out.len(), 2);
        assert!(
            out.iter()
                .all(|p| p.codec == TsCodec::H265 && p.data == delimited)
        );
        // A codec of the wrong kind is no stream.
        let mut m = Muxer::new(Some(TsCodec::Aac), Some(TsCodec::H264));
        assert!(!m.video(0, 0, true, &unit, &mut ts));
        assert!(!m.aac(0, &ASC, &[1], &mut ts));
        assert_eq!(m.packets_written(), 0);
    }

    /// Writes `ts` to a temporary file and runs `ffprobe -show_streams` on it; `None`
    /// (with a note) when ffprobe is not installed.
    fn probe(name: &str, ts: &[u8]) -> Option<String> {
        let path = temp_file(name, ts);
        let out = std::process::Command::new("ffprobe")
            .args(["-v", "error", "-show_streams"])
            .arg(&path)
            .output();
        let _ = std::fs::remove_file(&path);
        match out {
            Ok(out) => {
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                Some(String::from_utf8_lossy(&out.stdout).into_owned())
            }
            Err(e) => {
                println!("ffprobe not run ({e}): skipping the probe of {name}");
                None
            }
        }
    }

    fn temp_file(name: &str, ts: &[u8]) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("tern-mux-{}-{name}.ts", std::process::id()));
        std::fs::write(&path, ts).expect("write the temporary file");
        path
    }

    /// The NAL unit types (H.264) of an Annex B unit.
    fn nal_types(annexb: &[u8]) -> Vec<u8> {
        annexb
            .windows(4)
            .filter(|w| w[..3] == [0, 0, 1])
            .map(|w| w[3] & 0x1f)
            .collect()
    }

    #[test]
    fn the_sample_remuxed_decodes() {
        let (orig, stats) = demux(SAMPLE);
        assert_clean(&stats);
        let mut m = Muxer::new(Some(TsCodec::H264), Some(TsCodec::Aac));
        let mut ts = Vec::new();
        let mut frames_in = Vec::new();
        for pes in &orig {
            let pts = pes.pts.expect("pts");
            match pes.codec {
                TsCodec::H264 => {
                    let keyframe = nal_types(&pes.data).contains(&5);
                    let dts = pes.dts.unwrap_or(pts);
                    assert!(m.video(dts, pts, keyframe, &pes.data, &mut ts));
                }
                _ => {
                    let (frames, clean) = adts_frames(&pes.data);
                    assert!(clean);
                    for (k, (cfg, raw)) in frames.into_iter().enumerate() {
                        let asc = cfg.audio_specific_config();
                        let t = pts + (k as u64 * 1024 * 90_000).div_ceil(44_100);
                        assert!(m.aac(t, &asc, raw, &mut ts));
                        frames_in.push((t, raw.to_vec()));
                    }
                }
            }
        }
        check(&ts);
        let (out, stats) = demux(&ts);
        assert_clean(&stats);
        let video = |v: &[Pes]| -> Vec<(Option<u64>, Option<u64>, Vec<u8>)> {
            v.iter()
                .filter(|p| p.codec == TsCodec::H264)
                .map(|p| {
                    let data = if nal_types(&p.data).first() == Some(&9) {
                        p.data.clone()
                    } else {
                        [AUD_H264, &p.data].concat()
                    };
                    (p.pts, p.dts, data)
                })
                .collect()
        };
        assert_eq!(video(&out), video(&orig));
        let frames_out: Vec<(u64, Vec<u8>)> = out
            .iter()
            .filter(|p| p.codec == TsCodec::Aac)
            .map(|p| {
                let (frames, clean) = adts_frames(&p.data);
                assert!(clean && frames.len() == 1);
                assert_eq!(frames[0].0.audio_specific_config(), ASC);
                (p.pts.expect("pts"), frames[0].1.to_vec())
            })
            .collect();
        assert_eq!(frames_out, frames_in);

        let Some(streams) = probe("sample", &ts) else {
            return;
        };
        assert!(streams.contains("codec_name=h264"), "{streams}");
        assert!(streams.contains("codec_name=aac"), "{streams}");
        assert!(streams.contains("width=160"), "{streams}");
        let path = temp_file("sample-decode", &ts);
        let out = std::process::Command::new("ffmpeg")
            .args(["-nostdin", "-v", "error", "-i"])
            .arg(&path)
            .args(["-f", "null", "-"])
            .output()
            .expect("ffmpeg next to ffprobe");
        let _ = std::fs::remove_file(&path);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && stderr.is_empty(), "{stderr}");
    }
}

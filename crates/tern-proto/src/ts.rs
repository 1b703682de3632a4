//! MPEG-2 transport stream demuxing (ISO/IEC 13818-1), push-based: bytes in as they come
//! off an SRT connection, whole PES packets out with their timestamps.
//!
//! Hand-written rather than a crate, on purpose: `mpeg2ts` (0.6) reads from an `io::Read`
//! (pull, blocking), and `mpeg2ts-reader` (0.18) is push-based but built around a generic
//! demux context with per-stream trait objects and hands PES payloads out in pieces the
//! caller must reassemble and bound anyway. What SRT ingest needs is small: the PAT, the
//! first program's PMT, and PES reassembly for four stream types, with bounded buffers,
//! continuity checks and no panic on any input; that is this file, fuzzed
//! (`fuzz/fuzz_targets/ts.rs`).
//!
//! What it keeps: per elementary stream one PES being assembled (at most [`MAX_PES`] bytes),
//! and up to 187 bytes of a TS packet cut across two pushes. Malformed packets, lost packets
//! (a continuity counter gap) and oversize PES packets are dropped and counted in
//! [`TsStats`]; the demuxer resynchronises on the next sync byte and goes on.

pub mod mux;

/// TS packet size.
pub const PACKET: usize = 188;
/// Largest PES packet assembled (a 4K IDR at high bitrate fits; more is dropped).
pub const MAX_PES: usize = 4 << 20;
/// Most elementary streams followed in a program.
const MAX_STREAMS: usize = 8;

/// The codec of an elementary stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TsCodec {
    /// H.264 (stream type 0x1b).
    H264,
    /// H.265 (stream type 0x24).
    H265,
    /// AAC in ADTS (stream type 0x0f).
    Aac,
    /// Opus (stream type 0x06 with an `Opus` registration descriptor).
    Opus,
}

/// A whole PES packet of a followed stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pes {
    /// The elementary stream's PID.
    pub pid: u16,
    /// Its codec.
    pub codec: TsCodec,
    /// Presentation time, 90 kHz, 33 bits.
    pub pts: Option<u64>,
    /// Decode time, 90 kHz, 33 bits (absent when equal to the PTS).
    pub dts: Option<u64>,
    /// A packet was lost (or the stream said discontinuity) before this one.
    pub discontinuity: bool,
    /// The elementary stream bytes.
    pub data: Vec<u8>,
}

/// What the demuxer counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TsStats {
    /// TS packets read.
    pub packets: u64,
    /// Bytes skipped to find a sync byte.
    pub resync_bytes: u64,
    /// Continuity counter gaps on followed streams (lost TS packets).
    pub cc_errors: u64,
    /// Malformed tables, adaptation fields or PES headers.
    pub malformed: u64,
    /// PES packets dropped (incomplete after a loss, or over [`MAX_PES`]).
    pub dropped_pes: u64,
    /// The last PCR seen (27 MHz).
    pub last_pcr: Option<u64>,
}

#[derive(Debug)]
struct Stream {
    pid: u16,
    codec: TsCodec,
    cc: Option<u8>,
    /// The PES being assembled, once its start was seen.
    pes: Option<Vec<u8>>,
    /// A loss happened since the last PES went out.
    lost: bool,
}

/// The demuxer of one transport stream.
#[derive(Debug, Default)]
pub struct Demuxer {
    carry: Vec<u8>,
    pmt_pid: Option<u16>,
    pcr_pid: Option<u16>,
    streams: Vec<Stream>,
    /// PMT version last applied.
    pmt_version: Option<u8>,
    stats: TsStats,
}

impl Demuxer {
    /// A demuxer that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// What it counted so far.
    pub fn stats(&self) -> TsStats {
        self.stats
    }

    /// The followed streams: (PID, codec), once a PMT was read.
    pub fn streams(&self) -> impl Iterator<Item = (u16, TsCodec)> + '_ {
        self.streams.iter().map(|s| (s.pid, s.codec))
    }

    /// Feeds bytes; whole PES packets go to `out`. Never fails: what is broken is counted.
    pub fn push(&mut self, mut data: &[u8], out: &mut dyn FnMut(Pes)) {
        if !self.carry.is_empty() {
            let need = PACKET - self.carry.len();
            let take = need.min(data.len());
            self.carry.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.carry.len() < PACKET {
                return;
            }
            let mut pkt = [0u8; PACKET];
            pkt.copy_from_slice(&self.carry);
            self.carry.clear();
            self.packet(&pkt, out);
        }
        while !data.is_empty() {
            if data[0] != 0x47 {
                let skip = data.iter().position(|&b| b == 0x47).unwrap_or(data.len());
                self.stats.resync_bytes += skip as u64;
                data = &data[skip..];
                continue;
            }
            if data.len() < PACKET {
                self.carry.extend_from_slice(data);
                return;
            }
            let (pkt, rest) = data.split_at(PACKET);
            self.packet(pkt, out);
            data = rest;
        }
    }

    /// Emits the PES packets still being assembled (the publisher left).
    pub fn flush(&mut self, out: &mut dyn FnMut(Pes)) {
        for i in 0..self.streams.len() {
            self.finish(i, out);
        }
    }

    fn packet(&mut self, p: &[u8], out: &mut dyn FnMut(Pes)) {
        self.stats.packets += 1;
        let tei = p[1] & 0x80 != 0;
        let start = p[1] & 0x40 != 0;
        let pid = u16::from(p[1] & 0x1f) << 8 | u16::from(p[2]);
        let afc = (p[3] >> 4) & 3;
        let cc = p[3] & 0x0f;
        if tei || afc == 0 {
            self.stats.malformed += 1;
            return;
        }
        let mut body = &p[4..];
        let mut discontinuity = false;
        if afc & 2 != 0 {
            let len = usize::from(body[0]);
            if len > 183 {
                self.stats.malformed += 1;
                return;
            }
            let af = &body[1..1 + len];
            if let Some(&flags) = af.first() {
                discontinuity = flags & 0x80 != 0;
                if flags & 0x10 != 0 && af.len() >= 7 && Some(pid) == self.pcr_pid {
                    let b = &af[1..7];
                    let base = u64::from(b[0]) << 25
                        | u64::from(b[1]) << 17
                        | u64::from(b[2]) << 9
                        | u64::from(b[3]) << 1
                        | u64::from(b[4] >> 7);
                    let ext = u64::from(b[4] & 1) << 8 | u64::from(b[5]);
                    self.stats.last_pcr = Some(base * 300 + ext);
                }
            }
            body = &body[1 + len..];
        }
        let has_payload = afc & 1 != 0;
        if pid == 0 {
            if has_payload && start {
                self.pat(body);
            }
            return;
        }
        if Some(pid) == self.pmt_pid {
            if has_payload && start {
                self.pmt(body);
            }
            return;
        }
        let Some(i) = self.streams.iter().position(|s| s.pid == pid) else {
            return;
        };
        let s = &mut self.streams[i];
        if has_payload {
            let expected = s.cc.map(|c| (c + 1) & 0x0f);
            // A repeated counter is a duplicate packet (allowed once): ignore it.
            if s.cc == Some(cc) && !discontinuity {
                return;
            }
            if expected.is_some_and(|e| e != cc) && !discontinuity {
                self.stats.cc_errors += 1;
                s.lost = true;
                if s.pes.take().is_some() {
                    self.stats.dropped_pes += 1;
                }
            }
            s.cc = Some(cc);
        }
        if discontinuity {
            s.lost = true;
        }
        if !has_payload {
            return;
        }
        if start {
            self.finish(i, out);
            self.streams[i].pes = Some(Vec::with_capacity(body.len() * 8));
        }
        let s = &mut self.streams[i];
        if let Some(pes) = s.pes.as_mut() {
            if pes.len() + body.len() > MAX_PES {
                s.pes = None;
                s.lost = true;
                self.stats.dropped_pes += 1;
                return;
            }
            pes.extend_from_slice(body);
            // A PES with a length is complete as soon as it is all there.
            if let Some(total) = pes_total(pes)
                && pes.len() >= total
            {
                pes.truncate(total);
                self.finish(i, out);
            }
        }
    }

    /// Parses the PES being assembled on stream `i` and emits it.
    fn finish(&mut self, i: usize, out: &mut dyn FnMut(Pes)) {
        let s = &mut self.streams[i];
        let Some(pes) = s.pes.take() else {
            return;
        };
        match parse_pes(&pes) {
            Some((pts, dts, start)) => {
                let mut data = pes;
                data.drain(..start);
                let discontinuity = std::mem::take(&mut s.lost);
                out(Pes {
                    pid: s.pid,
                    codec: s.codec,
                    pts,
                    dts,
                    discontinuity,
                    data,
                });
            }
            None => {
                s.lost = true;
                self.stats.malformed += 1;
            }
        }
    }

    fn pat(&mut self, body: &[u8]) {
        let Some(sec) = section(body, 0x00) else {
            self.stats.malformed += 1;
            return;
        };
        // Entries after the 5 bytes of table id extension, version, section numbers.
        let entries = &sec[5..];
        let pmt = entries
            .chunks_exact(4)
            .find(|e| u16::from_be_bytes([e[0], e[1]]) != 0)
            .map(|e| u16::from(e[2] & 0x1f) << 8 | u16::from(e[3]));
        if pmt.is_some() && pmt != self.pmt_pid {
            self.pmt_pid = pmt;
            self.pmt_version = None;
        }
    }

    fn pmt(&mut self, body: &[u8]) {
        let Some(sec) = section(body, 0x02) else {
            self.stats.malformed += 1;
            return;
        };
        if sec.len() < 9 {
            self.stats.malformed += 1;
            return;
        }
        let version = (sec[2] >> 1) & 0x1f;
        if self.pmt_version == Some(version) {
            return;
        }
        self.pcr_pid = Some(u16::from(sec[5] & 0x1f) << 8 | u16::from(sec[6]));
        let info_len = usize::from(sec[7] & 0x0f) << 8 | usize::from(sec[8]);
        let Some(mut es) = sec.get(9 + info_len..) else {
            self.stats.malformed += 1;
            return;
        };
        let mut streams = Vec::new();
        while es.len() >= 5 {
            let ty = es[0];
            let pid = u16::from(es[1] & 0x1f) << 8 | u16::from(es[2]);
            let len = usize::from(es[3] & 0x0f) << 8 | usize::from(es[4]);
            let Some(desc) = es.get(5..5 + len) else {
                self.stats.malformed += 1;
                return;
            };
            let codec = match ty {
                0x1b => Some(TsCodec::H264),
                0x24 => Some(TsCodec::H265),
                0x0f => Some(TsCodec::Aac),
                0x06 if registration(desc) == Some(*b"Opus") => Some(TsCodec::Opus),
                _ => None,
            };
            if let Some(codec) = codec
                && streams.len() < MAX_STREAMS
            {
                // A stream the previous PMT had keeps its state.
                let old = self.streams.iter().position(|s| s.pid == pid);
                let s = match old {
                    Some(i) if self.streams[i].codec == codec => self.streams.swap_remove(i),
                    _ => Stream {
                        pid,
                        codec,
                        cc: None,
                        pes: None,
                        lost: false,
                    },
                };
                streams.push(s);
            }
            es = &es[5 + len..];
        }
        self.streams = streams;
        self.pmt_version = Some(version);
    }
}

/// The format identifier of a registration descriptor (tag 5) in `desc`, if any.
fn registration(mut desc: &[u8]) -> Option<[u8; 4]> {
    while desc.len() >= 2 {
        let (tag, len) = (desc[0], usize::from(desc[1]));
        let body = desc.get(2..2 + len)?;
        if tag == 5 && len >= 4 {
            return Some([body[0], body[1], body[2], body[3]]);
        }
        desc = &desc[2 + len..];
    }
    None
}

/// The section of table `table_id` starting in a payload (pointer field first), from the
/// byte after `section_length` up to the CRC (not checked: SRT protects the bytes).
fn section(body: &[u8], table_id: u8) -> Option<&[u8]> {
    let pointer = usize::from(*body.first()?);
    let sec = body.get(1 + pointer..)?;
    if *sec.first()? != table_id || sec.len() < 3 {
        return None;
    }
    let len = usize::from(sec[1] & 0x0f) << 8 | usize::from(sec[2]);
    if len < 9 {
        return None;
    }
    // Without the 4 bytes of CRC.
    sec.get(3..3 + len - 4)
}

/// The total size of a PES packet whose length field is set (video often leaves it 0).
fn pes_total(pes: &[u8]) -> Option<usize> {
    if pes.len() < 6 {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([pes[4], pes[5]]));
    (len > 0).then_some(6 + len)
}

/// A PES header: (PTS, DTS, offset of the payload); `None` if malformed.
fn parse_pes(pes: &[u8]) -> Option<(Option<u64>, Option<u64>, usize)> {
    if pes.len() < 9 || pes[..3] != [0, 0, 1] {
        return None;
    }
    let flags = pes[7] >> 6;
    let header_len = usize::from(pes[8]);
    let start = 9 + header_len;
    if start > pes.len() {
        return None;
    }
    let opt = &pes[9..start];
    let ts = |b: &[u8]| -> Option<u64> {
        let b = b.get(..5)?;
        Some(
            u64::from(b[0] >> 1 & 7) << 30
                | u64::from(b[1]) << 22
                | u64::from(b[2] >> 1) << 15
                | u64::from(b[3]) << 7
                | u64::from(b[4] >> 1),
        )
    };
    let (pts, dts) = match flags {
        2 => (Some(ts(opt)?), None),
        3 => (Some(ts(opt)?), Some(ts(opt.get(5..)?)?)),
        _ => (None, None),
    };
    Some((pts, dts, start))
}

/// An ADTS header's AAC configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdtsConfig {
    /// Audio object type (profile + 1: 2 is AAC-LC).
    pub object_type: u8,
    /// Sampling frequency index.
    pub frequency_index: u8,
    /// Channel configuration.
    pub channels: u8,
}

impl AdtsConfig {
    /// The two-byte AudioSpecificConfig it stands for.
    pub fn audio_specific_config(&self) -> [u8; 2] {
        let v = u16::from(self.object_type) << 11
            | u16::from(self.frequency_index & 0x0f) << 7
            | u16::from(self.channels & 0x0f) << 3;
        v.to_be_bytes()
    }

    /// Sampling rate (Hz), if the index is a defined one.
    pub fn sample_rate(&self) -> Option<u32> {
        const RATES: [u32; 13] = [
            96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350,
        ];
        RATES.get(usize::from(self.frequency_index)).copied()
    }
}

/// The raw AAC frames of an ADTS buffer with their configuration; stops at the first
/// malformed header (the rest of the buffer is dropped by the caller, counted there).
pub fn adts_frames(mut data: &[u8]) -> (Vec<(AdtsConfig, &[u8])>, bool) {
    let mut frames = Vec::new();
    while !data.is_empty() {
        if data.len() < 7 || data[0] != 0xff || data[1] & 0xf0 != 0xf0 {
            return (frames, false);
        }
        let protection_absent = data[1] & 1 != 0;
        let cfg = AdtsConfig {
            object_type: (data[2] >> 6) + 1,
            frequency_index: (data[2] >> 2) & 0x0f,
            channels: (data[2] & 1) << 2 | data[3] >> 6,
        };
        let len =
            usize::from(data[3] & 3) << 11 | usize::from(data[4]) << 3 | usize::from(data[5] >> 5);
        let header = if protection_absent { 7 } else { 9 };
        if len < header || len > data.len() {
            return (frames, false);
        }
        frames.push((cfg, &data[header..len]));
        data = &data[len..];
    }
    (frames, true)
}

/// The Opus packets of an Opus PES (ETSI TS 102 366-style control headers, as ffmpeg's
/// muxer writes them: `0x7fe0 | flags`, the size in 255-steps, optional trims and
/// extension); stops at the first malformed header, with `false`.
pub fn opus_packets(mut data: &[u8]) -> (Vec<&[u8]>, bool) {
    let mut out = Vec::new();
    while !data.is_empty() {
        if data.len() < 2 || data[0] != 0x7f || data[1] & 0xe0 != 0xe0 {
            return (out, false);
        }
        let flags = data[1];
        let mut i = 2;
        let mut size = 0usize;
        loop {
            let Some(&b) = data.get(i) else {
                return (out, false);
            };
            i += 1;
            size += usize::from(b);
            if b != 0xff {
                break;
            }
        }
        if flags & 0x10 != 0 {
            i += 2;
        }
        if flags & 0x08 != 0 {
            i += 2;
        }
        if flags & 0x04 != 0 {
            let Some(&n) = data.get(i) else {
                return (out, false);
            };
            i += 1 + usize::from(n);
        }
        let Some(packet) = data.get(i..i + size) else {
            return (out, false);
        };
        out.push(packet);
        data = &data[i + size..];
    }
    (out, true)
}

/// Samples at 48 kHz in an Opus packet, from its TOC byte (RFC 6716 §3.1); `None` if
/// malformed.
pub fn opus_samples(packet: &[u8]) -> Option<u32> {
    let toc = *packet.first()?;
    let config = toc >> 3;
    let frame = match config {
        0..=11 => [480, 960, 1920, 2880][usize::from(config % 4)],
        12..=15 => [480, 960][usize::from(config % 2)],
        _ => [120, 240, 480, 960][usize::from(config % 4)],
    };
    let frames = match toc & 3 {
        0 => 1,
        1 | 2 => 2,
        _ => u32::from(*packet.get(1)? & 0x3f),
    };
    Some(frame * frames).filter(|&n| n > 0 && n <= 5760)
}

#[cfg(test)]
mod tests;

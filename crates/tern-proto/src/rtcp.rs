//! RTCP compound packets (RFC 3550 §6), transport and payload-specific feedback
//! (RFC 4585 §6, RFC 5104 §4.3.1) and REMB (draft-alvestrand-rmcat-remb).
//!
//! [`iter_compound`] walks a compound packet without copying: every [`RtcpPacket`] borrows
//! from the input. Writers fill caller-owned buffers and return the number of bytes written,
//! or [`RtcpError::BufferTooSmall`]; they never allocate or panic.

/// Packet type of a sender report.
pub const PT_SR: u8 = 200;
/// Packet type of a receiver report.
pub const PT_RR: u8 = 201;
/// Packet type of a source description.
pub const PT_SDES: u8 = 202;
/// Packet type of a goodbye.
pub const PT_BYE: u8 = 203;
/// Packet type of an application-defined packet.
pub const PT_APP: u8 = 204;
/// Packet type of transport-layer feedback (RFC 4585).
pub const PT_RTPFB: u8 = 205;
/// Packet type of payload-specific feedback (RFC 4585).
pub const PT_PSFB: u8 = 206;

/// FMT of a generic NACK within [`PT_RTPFB`].
pub const FMT_NACK: u8 = 1;
/// FMT of a picture loss indication within [`PT_PSFB`].
pub const FMT_PLI: u8 = 1;
/// FMT of a full intra request within [`PT_PSFB`].
pub const FMT_FIR: u8 = 4;
/// FMT of application-layer feedback (used by REMB) within [`PT_PSFB`].
pub const FMT_AFB: u8 = 15;

/// Length of one report block (RFC 3550 §6.4.1).
pub const REPORT_BLOCK_LEN: usize = 24;
/// Largest number of report blocks, SSRCs or SDES chunks a 5-bit count field can hold.
pub const MAX_COUNT: usize = 31;

/// Errors from parsing or writing RTCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RtcpError {
    /// The buffer is shorter than a header or than the length a header declares.
    #[error("RTCP packet truncated")]
    Truncated,
    /// The version field is not 2.
    #[error("RTCP version is not 2")]
    BadVersion,
    /// The padding count is zero or larger than the packet body.
    #[error("RTCP padding count invalid")]
    BadPadding,
    /// A count field (reports, SSRCs) or an inner length does not fit the packet body.
    #[error("RTCP count or inner length does not fit the packet")]
    BadCount,
    /// The output buffer is too small for the packet being written.
    #[error("output buffer too small")]
    BufferTooSmall,
    /// A writer argument is out of range (more than 31 report blocks, CNAME over 255 bytes,
    /// empty NACK list).
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be64(b: &[u8], at: usize) -> u64 {
    (u64::from(be32(b, at)) << 32) | u64::from(be32(b, at + 4))
}

/// A report block of an SR or RR (RFC 3550 §6.4.1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReportBlock {
    /// SSRC of the source this block reports on.
    pub ssrc: u32,
    /// Fraction of packets lost since the previous report, in 1/256 units.
    pub fraction_lost: u8,
    /// Cumulative number of packets lost (24-bit signed; duplicates can make it negative).
    /// The writer clamps it to the 24-bit range.
    pub cumulative_lost: i32,
    /// Extended highest sequence number received.
    pub highest_seq: u32,
    /// Interarrival jitter in timestamp units.
    pub jitter: u32,
    /// Middle 32 bits of the NTP timestamp of the last SR received from this source.
    pub lsr: u32,
    /// Delay since that SR in 1/65536 seconds.
    pub dlsr: u32,
}

impl ReportBlock {
    fn parse(b: &[u8]) -> Self {
        let lost24 = u32::from_be_bytes([0, b[5], b[6], b[7]]);
        Self {
            ssrc: be32(b, 0),
            fraction_lost: b[4],
            // Sign-extend from 24 bits.
            cumulative_lost: ((lost24 << 8) as i32) >> 8,
            highest_seq: be32(b, 8),
            jitter: be32(b, 12),
            lsr: be32(b, 16),
            dlsr: be32(b, 20),
        }
    }

    fn write(&self, out: &mut [u8]) {
        let lost = self.cumulative_lost.clamp(-(1 << 23), (1 << 23) - 1) as u32;
        out[0..4].copy_from_slice(&self.ssrc.to_be_bytes());
        out[4] = self.fraction_lost;
        out[5..8].copy_from_slice(&lost.to_be_bytes()[1..]);
        out[8..12].copy_from_slice(&self.highest_seq.to_be_bytes());
        out[12..16].copy_from_slice(&self.jitter.to_be_bytes());
        out[16..20].copy_from_slice(&self.lsr.to_be_bytes());
        out[20..24].copy_from_slice(&self.dlsr.to_be_bytes());
    }
}

/// Iterator over the report blocks of an SR or RR.
#[derive(Debug, Clone)]
pub struct ReportBlocks<'a>(std::slice::ChunksExact<'a, u8>);

impl Iterator for ReportBlocks<'_> {
    type Item = ReportBlock;

    fn next(&mut self) -> Option<ReportBlock> {
        self.0.next().map(ReportBlock::parse)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl ExactSizeIterator for ReportBlocks<'_> {}

/// A sender report (RFC 3550 §6.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderReport<'a> {
    /// SSRC of the sender.
    pub ssrc: u32,
    /// 64-bit NTP timestamp of the report.
    pub ntp: u64,
    /// RTP timestamp corresponding to `ntp`.
    pub rtp_ts: u32,
    /// Packets sent since the start of transmission.
    pub packet_count: u32,
    /// Payload octets sent since the start of transmission.
    pub octet_count: u32,
    blocks: &'a [u8],
}

impl<'a> SenderReport<'a> {
    /// The report blocks.
    pub fn blocks(&self) -> ReportBlocks<'a> {
        ReportBlocks(self.blocks.chunks_exact(REPORT_BLOCK_LEN))
    }

    /// The sender info section, in the form [`write_sr`] takes.
    pub fn sender_info(&self) -> SenderInfo {
        SenderInfo {
            ssrc: self.ssrc,
            ntp: self.ntp,
            rtp_ts: self.rtp_ts,
            packet_count: self.packet_count,
            octet_count: self.octet_count,
        }
    }
}

/// A receiver report (RFC 3550 §6.4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiverReport<'a> {
    /// SSRC of the packet sender.
    pub ssrc: u32,
    blocks: &'a [u8],
}

impl<'a> ReceiverReport<'a> {
    /// The report blocks.
    pub fn blocks(&self) -> ReportBlocks<'a> {
        ReportBlocks(self.blocks.chunks_exact(REPORT_BLOCK_LEN))
    }
}

/// A list of 32-bit SSRCs stored big-endian in the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SsrcList<'a>(&'a [u8]);

impl<'a> SsrcList<'a> {
    /// Number of SSRCs.
    pub fn len(&self) -> usize {
        self.0.len() / 4
    }

    /// True if the list holds no SSRC.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The SSRCs in packet order.
    pub fn iter(&self) -> Ssrcs<'a> {
        Ssrcs(self.0.chunks_exact(4))
    }
}

/// Iterator over an [`SsrcList`].
#[derive(Debug, Clone)]
pub struct Ssrcs<'a>(std::slice::ChunksExact<'a, u8>);

impl Iterator for Ssrcs<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        self.0.next().map(|c| be32(c, 0))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl ExactSizeIterator for Ssrcs<'_> {}

/// A generic NACK (RFC 4585 §6.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nack<'a> {
    /// SSRC of the sender of the feedback.
    pub sender_ssrc: u32,
    /// SSRC of the media source the NACK refers to.
    pub media_ssrc: u32,
    fci: &'a [u8],
}

impl<'a> Nack<'a> {
    /// The raw (PID, BLP) pairs.
    pub fn pairs(&self) -> impl Iterator<Item = (u16, u16)> + 'a {
        self.fci.chunks_exact(4).map(|c| (be16(c, 0), be16(c, 2)))
    }

    /// Every lost sequence number: for each pair the PID, then PID+i+1 for each set bit i of
    /// the BLP (wrapping at 65535).
    pub fn lost(&self) -> NackLost<'a> {
        NackLost {
            fci: self.fci.chunks_exact(4),
            pid: 0,
            bit: 16,
            blp: 0,
        }
    }
}

/// Iterator over the lost sequence numbers of a [`Nack`].
#[derive(Debug, Clone)]
pub struct NackLost<'a> {
    fci: std::slice::ChunksExact<'a, u8>,
    pid: u16,
    /// Next BLP bit to look at; 16 means the pair is exhausted.
    bit: u16,
    blp: u16,
}

impl Iterator for NackLost<'_> {
    type Item = u16;

    fn next(&mut self) -> Option<u16> {
        while self.bit < 16 {
            let bit = self.bit;
            self.bit += 1;
            if self.blp & (1 << bit) != 0 {
                return Some(self.pid.wrapping_add(bit + 1));
            }
        }
        let c = self.fci.next()?;
        self.pid = be16(c, 0);
        self.blp = be16(c, 2);
        self.bit = 0;
        Some(self.pid)
    }
}

/// A full intra request (RFC 5104 §4.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fir<'a> {
    /// SSRC of the sender of the request.
    pub sender_ssrc: u32,
    /// Media source SSRC field of the common header (RFC 5104 says it SHALL be 0; the
    /// targets are in [`Fir::entries`]).
    pub media_ssrc: u32,
    fci: &'a [u8],
}

impl<'a> Fir<'a> {
    /// The FCI entries as (target SSRC, command sequence number).
    pub fn entries(&self) -> impl Iterator<Item = (u32, u8)> + 'a {
        self.fci.chunks_exact(8).map(|c| (be32(c, 0), c[4]))
    }
}

/// Receiver estimated maximum bitrate (draft-alvestrand-rmcat-remb), an application-layer
/// feedback message carried in [`PT_PSFB`] / [`FMT_AFB`] with the identifier `REMB`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remb<'a> {
    /// SSRC of the sender of the estimate.
    pub sender_ssrc: u32,
    /// Estimated maximum bitrate in bits per second (mantissa << exponent, saturating).
    pub bitrate: u64,
    /// SSRCs the estimate applies to.
    pub ssrcs: SsrcList<'a>,
}

/// One packet of a compound RTCP packet. Every variant borrows from the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RtcpPacket<'a> {
    /// Sender report (PT 200).
    SenderReport(SenderReport<'a>),
    /// Receiver report (PT 201).
    ReceiverReport(ReceiverReport<'a>),
    /// Source description (PT 202): the chunks, unparsed.
    Sdes(&'a [u8]),
    /// Goodbye (PT 203).
    Bye {
        /// SSRCs leaving.
        ssrcs: SsrcList<'a>,
        /// Optional reason text (empty if absent), not validated as UTF-8.
        reason: &'a [u8],
    },
    /// Generic NACK (PT 205, FMT 1).
    Nack(Nack<'a>),
    /// Picture loss indication (PT 206, FMT 1).
    Pli {
        /// SSRC of the sender of the PLI.
        sender_ssrc: u32,
        /// SSRC of the media source that should send a keyframe.
        media_ssrc: u32,
    },
    /// Full intra request (PT 206, FMT 4).
    Fir(Fir<'a>),
    /// Receiver estimated maximum bitrate (PT 206, FMT 15, `REMB`).
    Remb(Remb<'a>),
    /// Any other packet type or feedback format; callers can ignore it.
    Other {
        /// Packet type.
        pt: u8,
        /// The 5-bit count/FMT field.
        fmt: u8,
        /// Bytes after the 4-byte common header, padding removed.
        body: &'a [u8],
    },
}

/// Iterator over the packets of a compound RTCP packet; see [`iter_compound`].
#[derive(Debug, Clone)]
pub struct Compound<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Compound<'a> {
    type Item = Result<RtcpPacket<'a>, RtcpError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        match parse_packet(self.rest) {
            Ok((pkt, used)) => {
                self.rest = &self.rest[used..];
                Some(Ok(pkt))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

/// Walks the packets of a compound RTCP packet. After the first error the iterator ends.
pub fn iter_compound(buf: &[u8]) -> Compound<'_> {
    Compound { rest: buf }
}

/// Parses the packet at the start of `buf`, returning it and its length in bytes.
fn parse_packet(buf: &[u8]) -> Result<(RtcpPacket<'_>, usize), RtcpError> {
    if buf.len() < 4 {
        return Err(RtcpError::Truncated);
    }
    if buf[0] >> 6 != 2 {
        return Err(RtcpError::BadVersion);
    }
    let count = buf[0] & 0x1f;
    let pt = buf[1];
    let len = (usize::from(be16(buf, 2)) + 1) * 4;
    let pkt = buf.get(..len).ok_or(RtcpError::Truncated)?;
    let mut body = &pkt[4..];
    if buf[0] & 0x20 != 0 {
        let pad = usize::from(pkt[len - 1]);
        if pad == 0 || pad > body.len() {
            return Err(RtcpError::BadPadding);
        }
        body = &body[..body.len() - pad];
    }
    let n = usize::from(count);
    let packet = match (pt, count) {
        (PT_SR, _) => {
            let blocks = body
                .get(24..24 + n * REPORT_BLOCK_LEN)
                .ok_or(RtcpError::BadCount)?;
            RtcpPacket::SenderReport(SenderReport {
                ssrc: be32(body, 0),
                ntp: be64(body, 4),
                rtp_ts: be32(body, 12),
                packet_count: be32(body, 16),
                octet_count: be32(body, 20),
                blocks,
            })
        }
        (PT_RR, _) => {
            let blocks = body
                .get(4..4 + n * REPORT_BLOCK_LEN)
                .ok_or(RtcpError::BadCount)?;
            RtcpPacket::ReceiverReport(ReceiverReport {
                ssrc: be32(body, 0),
                blocks,
            })
        }
        (PT_SDES, _) => RtcpPacket::Sdes(body),
        (PT_BYE, _) => {
            let ssrcs = body.get(..4 * n).ok_or(RtcpError::BadCount)?;
            let reason = match body.get(4 * n) {
                None => &[][..],
                Some(&rlen) => body
                    .get(4 * n + 1..4 * n + 1 + usize::from(rlen))
                    .ok_or(RtcpError::BadCount)?,
            };
            RtcpPacket::Bye {
                ssrcs: SsrcList(ssrcs),
                reason,
            }
        }
        (PT_RTPFB, FMT_NACK) => {
            let (sender_ssrc, media_ssrc, fci) = feedback(body)?;
            RtcpPacket::Nack(Nack {
                sender_ssrc,
                media_ssrc,
                fci,
            })
        }
        (PT_PSFB, FMT_PLI) => {
            let (sender_ssrc, media_ssrc, _) = feedback(body)?;
            RtcpPacket::Pli {
                sender_ssrc,
                media_ssrc,
            }
        }
        (PT_PSFB, FMT_FIR) => {
            let (sender_ssrc, media_ssrc, fci) = feedback(body)?;
            RtcpPacket::Fir(Fir {
                sender_ssrc,
                media_ssrc,
                fci,
            })
        }
        (PT_PSFB, FMT_AFB) if body.len() >= 16 && &body[8..12] == b"REMB" => {
            let num = usize::from(body[12]);
            let exp = u32::from(body[13] >> 2);
            let mantissa = (u64::from(body[13] & 3) << 16) | u64::from(be16(body, 14));
            let ssrcs = body.get(16..16 + 4 * num).ok_or(RtcpError::BadCount)?;
            let bitrate = if mantissa == 0 {
                0
            } else if mantissa.leading_zeros() < exp {
                u64::MAX
            } else {
                mantissa << exp
            };
            RtcpPacket::Remb(Remb {
                sender_ssrc: be32(body, 0),
                bitrate,
                ssrcs: SsrcList(ssrcs),
            })
        }
        _ => RtcpPacket::Other {
            pt,
            fmt: count,
            body,
        },
    };
    Ok((packet, len))
}

/// Splits a feedback body (RFC 4585 §6.1) into sender SSRC, media SSRC and FCI.
fn feedback(body: &[u8]) -> Result<(u32, u32, &[u8]), RtcpError> {
    if body.len() < 8 {
        return Err(RtcpError::Truncated);
    }
    Ok((be32(body, 0), be32(body, 4), &body[8..]))
}

/// The sender info section of an SR (RFC 3550 §6.4.1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SenderInfo {
    /// SSRC of the sender.
    pub ssrc: u32,
    /// 64-bit NTP timestamp of the report.
    pub ntp: u64,
    /// RTP timestamp corresponding to `ntp`.
    pub rtp_ts: u32,
    /// Packets sent since the start of transmission.
    pub packet_count: u32,
    /// Payload octets sent since the start of transmission.
    pub octet_count: u32,
}

/// Takes the first `len` bytes of `out` and writes a common header with the given count and
/// packet type (no padding) into them.
fn start(out: &mut [u8], len: usize, count: u8, pt: u8) -> Result<&mut [u8], RtcpError> {
    debug_assert!(len.is_multiple_of(4) && len >= 4);
    let words = u16::try_from(len / 4 - 1).map_err(|_| RtcpError::BufferTooSmall)?;
    let out = out.get_mut(..len).ok_or(RtcpError::BufferTooSmall)?;
    out[0] = 0x80 | count;
    out[1] = pt;
    out[2..4].copy_from_slice(&words.to_be_bytes());
    Ok(out)
}

fn block_count(blocks: &[ReportBlock]) -> Result<u8, RtcpError> {
    u8::try_from(blocks.len())
        .ok()
        .filter(|&n| usize::from(n) <= MAX_COUNT)
        .ok_or(RtcpError::InvalidArgument("more than 31 report blocks"))
}

/// Writes a sender report with up to 31 report blocks.
///
/// # Errors
/// [`RtcpError::BufferTooSmall`], or [`RtcpError::InvalidArgument`] for more than 31 blocks.
pub fn write_sr(
    out: &mut [u8],
    info: &SenderInfo,
    blocks: &[ReportBlock],
) -> Result<usize, RtcpError> {
    let count = block_count(blocks)?;
    let len = 28 + blocks.len() * REPORT_BLOCK_LEN;
    let out = start(out, len, count, PT_SR)?;
    out[4..8].copy_from_slice(&info.ssrc.to_be_bytes());
    out[8..16].copy_from_slice(&info.ntp.to_be_bytes());
    out[16..20].copy_from_slice(&info.rtp_ts.to_be_bytes());
    out[20..24].copy_from_slice(&info.packet_count.to_be_bytes());
    out[24..28].copy_from_slice(&info.octet_count.to_be_bytes());
    for (b, chunk) in blocks
        .iter()
        .zip(out[28..].chunks_exact_mut(REPORT_BLOCK_LEN))
    {
        b.write(chunk);
    }
    Ok(len)
}

/// Writes a receiver report with up to 31 report blocks.
///
/// # Errors
/// [`RtcpError::BufferTooSmall`], or [`RtcpError::InvalidArgument`] for more than 31 blocks.
pub fn write_rr(
    out: &mut [u8],
    sender_ssrc: u32,
    blocks: &[ReportBlock],
) -> Result<usize, RtcpError> {
    let count = block_count(blocks)?;
    let len = 8 + blocks.len() * REPORT_BLOCK_LEN;
    let out = start(out, len, count, PT_RR)?;
    out[4..8].copy_from_slice(&sender_ssrc.to_be_bytes());
    for (b, chunk) in blocks
        .iter()
        .zip(out[8..].chunks_exact_mut(REPORT_BLOCK_LEN))
    {
        b.write(chunk);
    }
    Ok(len)
}

/// Writes an SDES packet with one chunk holding a CNAME item (RFC 3550 §6.5.1).
///
/// # Errors
/// [`RtcpError::BufferTooSmall`], or [`RtcpError::InvalidArgument`] if `cname` is longer
/// than 255 bytes.
pub fn write_sdes_cname(out: &mut [u8], ssrc: u32, cname: &str) -> Result<usize, RtcpError> {
    let name = cname.as_bytes();
    let name_len =
        u8::try_from(name.len()).map_err(|_| RtcpError::InvalidArgument("CNAME over 255 bytes"))?;
    // SSRC, type, length, text, then 1..=4 zero bytes ending the item list and padding the
    // chunk to a 32-bit boundary.
    let chunk = 4 + 2 + name.len();
    let len = 4 + chunk + (4 - chunk % 4);
    let out = start(out, len, 1, PT_SDES)?;
    out[4..8].copy_from_slice(&ssrc.to_be_bytes());
    out[8] = 1; // CNAME
    out[9] = name_len;
    out[10..10 + name.len()].copy_from_slice(name);
    out[10 + name.len()..].fill(0);
    Ok(len)
}

/// Writes a generic NACK (RFC 4585 §6.2.1) for the sequence numbers in `lost`.
///
/// `lost` need not be sorted: each number joins the first written (PID, BLP) pair that
/// covers it (PID..=PID+16, wrapping) or starts a new pair. Sorted input gives the fewest
/// pairs and costs O(n); duplicates are harmless.
///
/// # Errors
/// [`RtcpError::BufferTooSmall`], or [`RtcpError::InvalidArgument`] if `lost` is empty.
pub fn write_nack(
    out: &mut [u8],
    sender_ssrc: u32,
    media_ssrc: u32,
    lost: &[u16],
) -> Result<usize, RtcpError> {
    if lost.is_empty() {
        return Err(RtcpError::InvalidArgument("empty NACK list"));
    }
    if out.len() < 16 {
        return Err(RtcpError::BufferTooSmall);
    }
    let mut pairs = 0usize;
    'seqs: for &seq in lost {
        // Newest pair first: with sorted input the match is always the last pair.
        for i in (0..pairs).rev() {
            let at = 12 + 4 * i;
            let pid = be16(out, at);
            match seq.wrapping_sub(pid) {
                0 => continue 'seqs,
                d @ 1..=16 => {
                    let blp = be16(out, at + 2) | (1 << (d - 1));
                    out[at + 2..at + 4].copy_from_slice(&blp.to_be_bytes());
                    continue 'seqs;
                }
                _ => {}
            }
        }
        let at = 12 + 4 * pairs;
        let pair = out.get_mut(at..at + 4).ok_or(RtcpError::BufferTooSmall)?;
        pair[0..2].copy_from_slice(&seq.to_be_bytes());
        pair[2..4].fill(0);
        pairs += 1;
    }
    let len = 12 + 4 * pairs;
    let out = start(out, len, FMT_NACK, PT_RTPFB)?;
    out[4..8].copy_from_slice(&sender_ssrc.to_be_bytes());
    out[8..12].copy_from_slice(&media_ssrc.to_be_bytes());
    Ok(len)
}

/// Writes a picture loss indication (RFC 4585 §6.3.1), 12 bytes.
///
/// # Errors
/// [`RtcpError::BufferTooSmall`].
pub fn write_pli(out: &mut [u8], sender_ssrc: u32, media_ssrc: u32) -> Result<usize, RtcpError> {
    let out = start(out, 12, FMT_PLI, PT_PSFB)?;
    out[4..8].copy_from_slice(&sender_ssrc.to_be_bytes());
    out[8..12].copy_from_slice(&media_ssrc.to_be_bytes());
    Ok(12)
}

/// Writes a full intra request (RFC 5104 §4.3.1) asking `media_ssrc` for a keyframe, 20 bytes.
///
/// The header's media source field is 0 as RFC 5104 requires; `media_ssrc` goes into the FCI
/// entry with command sequence number `seq_nr`.
///
/// # Errors
/// [`RtcpError::BufferTooSmall`].
pub fn write_fir(
    out: &mut [u8],
    sender_ssrc: u32,
    media_ssrc: u32,
    seq_nr: u8,
) -> Result<usize, RtcpError> {
    let out = start(out, 20, FMT_FIR, PT_PSFB)?;
    out[4..8].copy_from_slice(&sender_ssrc.to_be_bytes());
    out[8..12].fill(0);
    out[12..16].copy_from_slice(&media_ssrc.to_be_bytes());
    out[16] = seq_nr;
    out[17..20].fill(0);
    Ok(20)
}

/// Writes a BYE for one SSRC without a reason, 8 bytes.
///
/// # Errors
/// [`RtcpError::BufferTooSmall`].
pub fn write_bye(out: &mut [u8], ssrc: u32) -> Result<usize, RtcpError> {
    let out = start(out, 8, 1, PT_BYE)?;
    out[4..8].copy_from_slice(&ssrc.to_be_bytes());
    Ok(8)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn one(buf: &[u8]) -> RtcpPacket<'_> {
        let mut it = iter_compound(buf);
        let p = it.next().unwrap().unwrap();
        assert!(it.next().is_none());
        p
    }

    fn block(i: u32) -> ReportBlock {
        ReportBlock {
            ssrc: 0x1000 + i,
            fraction_lost: i as u8,
            cumulative_lost: -(i as i32) * 1000,
            highest_seq: 70_000 + i,
            jitter: 30 + i,
            lsr: 0xdead_0000 + i,
            dlsr: 65536 * i,
        }
    }

    #[test]
    fn sr_round_trip() {
        let info = SenderInfo {
            ssrc: 0x1234_5678,
            ntp: 0xe000_0000_8000_0000,
            rtp_ts: 90_000,
            packet_count: 7,
            octet_count: 7000,
        };
        let blocks: Vec<_> = (0..3).map(block).collect();
        let mut out = [0u8; 256];
        let n = write_sr(&mut out, &info, &blocks).unwrap();
        assert_eq!(n, 28 + 72);
        let RtcpPacket::SenderReport(sr) = one(&out[..n]) else {
            panic!("not an SR")
        };
        assert_eq!(sr.sender_info(), info);
        assert_eq!(sr.ntp, info.ntp);
        assert_eq!(sr.blocks().collect::<Vec<_>>(), blocks);
        assert_eq!(sr.blocks().len(), 3);

        let n = write_sr(&mut out, &info, &[]).unwrap();
        assert_eq!(n, 28);
        assert_eq!(
            write_sr(&mut out[..27], &info, &[]),
            Err(RtcpError::BufferTooSmall)
        );
        let many = [ReportBlock::default(); 32];
        assert!(matches!(
            write_sr(&mut [0u8; 2048], &info, &many),
            Err(RtcpError::InvalidArgument(_))
        ));
    }

    #[test]
    fn rr_round_trip_and_clamp() {
        let mut blocks: Vec<_> = (0..31).map(block).collect();
        blocks[0].cumulative_lost = -(1 << 23);
        blocks[1].cumulative_lost = (1 << 23) - 1;
        let mut out = [0u8; 1024];
        let n = write_rr(&mut out, 42, &blocks).unwrap();
        let RtcpPacket::ReceiverReport(rr) = one(&out[..n]) else {
            panic!("not an RR")
        };
        assert_eq!(rr.ssrc, 42);
        assert_eq!(rr.blocks().collect::<Vec<_>>(), blocks);

        let big = ReportBlock {
            cumulative_lost: i32::MAX,
            ..block(1)
        };
        let small = ReportBlock {
            cumulative_lost: i32::MIN,
            ..block(1)
        };
        let n = write_rr(&mut out, 42, &[big, small]).unwrap();
        let RtcpPacket::ReceiverReport(rr) = one(&out[..n]) else {
            panic!("not an RR")
        };
        let lost: Vec<_> = rr.blocks().map(|b| b.cumulative_lost).collect();
        assert_eq!(lost, [(1 << 23) - 1, -(1 << 23)]);
        assert_eq!(
            write_rr(&mut out[..31], 1, &[big]),
            Err(RtcpError::BufferTooSmall)
        );
    }

    #[test]
    fn sdes_round_trip() {
        let mut out = [0u8; 300];
        for name in ["", "a", "ab", "abc", "abcd", "tern-0123456789abcdef"] {
            let n = write_sdes_cname(&mut out, 7, name).unwrap();
            assert_eq!(n % 4, 0);
            let RtcpPacket::Sdes(body) = one(&out[..n]) else {
                panic!("not SDES")
            };
            assert_eq!(be32(body, 0), 7);
            assert_eq!(body[4], 1);
            assert_eq!(usize::from(body[5]), name.len());
            assert_eq!(&body[6..6 + name.len()], name.as_bytes());
            assert!(body[6 + name.len()..].iter().all(|&b| b == 0));
            assert!(body.len() > 6 + name.len());
        }
        let long = "x".repeat(256);
        assert!(matches!(
            write_sdes_cname(&mut [0u8; 400], 1, &long),
            Err(RtcpError::InvalidArgument(_))
        ));
        assert_eq!(
            write_sdes_cname(&mut out[..11], 1, "abc"),
            Err(RtcpError::BufferTooSmall)
        );
    }

    #[test]
    fn nack_known_bytes() {
        // PID 100, BLP 0b101 (101 and 103 lost); PID 65535, BLP 0x8000 (0xffff + 16 = 15).
        let bytes = [
            0x81, 205, 0, 4, 0, 0, 0, 1, 0, 0, 0, 2, 0, 100, 0x00, 0x05, 0xff, 0xff, 0x80, 0x00,
        ];
        let RtcpPacket::Nack(n) = one(&bytes) else {
            panic!("not a NACK")
        };
        assert_eq!((n.sender_ssrc, n.media_ssrc), (1, 2));
        assert_eq!(n.lost().collect::<Vec<_>>(), [100, 101, 103, 65535, 15]);
        assert_eq!(n.pairs().collect::<Vec<_>>(), [(100, 5), (65535, 0x8000)]);

        let mut out = [0u8; 64];
        let len = write_nack(&mut out, 1, 2, &[100, 101, 103, 65535, 15]).unwrap();
        assert_eq!(&out[..len], &bytes);
    }

    #[test]
    fn nack_packing() {
        let mut out = [0u8; 256];
        // Unsorted, with duplicates and a gap larger than 16.
        let lost = [5u16, 3, 21, 4, 3, 22, 100, 37, 38];
        let n = write_nack(&mut out, 9, 8, &lost).unwrap();
        let RtcpPacket::Nack(nack) = one(&out[..n]) else {
            panic!("not a NACK")
        };
        let mut got: Vec<_> = nack.lost().collect();
        got.sort_unstable();
        assert_eq!(got, [3, 4, 5, 21, 22, 37, 38, 100]);
        assert_eq!(
            nack.pairs().collect::<Vec<_>>(),
            [(5, 0x8000), (3, 1), (22, 0xc000), (100, 0)]
        );

        // A run of 17 fits one pair.
        let run: Vec<u16> = (65530..=65535).chain(0..11).collect();
        let n = write_nack(&mut out, 1, 2, &run).unwrap();
        assert_eq!(n, 16);
        let RtcpPacket::Nack(nack) = one(&out[..n]) else {
            panic!("not a NACK")
        };
        assert_eq!(nack.lost().collect::<Vec<_>>(), run);

        assert!(matches!(
            write_nack(&mut out, 1, 2, &[]),
            Err(RtcpError::InvalidArgument(_))
        ));
        assert_eq!(
            write_nack(&mut out[..16], 1, 2, &[1, 100]),
            Err(RtcpError::BufferTooSmall)
        );
        assert_eq!(
            write_nack(&mut out[..15], 1, 2, &[1]),
            Err(RtcpError::BufferTooSmall)
        );
    }

    #[test]
    fn pli_fir_bye_round_trip() {
        let mut out = [0u8; 64];
        let n = write_pli(&mut out, 1, 2).unwrap();
        assert_eq!(
            one(&out[..n]),
            RtcpPacket::Pli {
                sender_ssrc: 1,
                media_ssrc: 2
            }
        );
        let n = write_fir(&mut out, 1, 2, 9).unwrap();
        let RtcpPacket::Fir(fir) = one(&out[..n]) else {
            panic!("not a FIR")
        };
        assert_eq!((fir.sender_ssrc, fir.media_ssrc), (1, 0));
        assert_eq!(fir.entries().collect::<Vec<_>>(), [(2, 9)]);
        let n = write_bye(&mut out, 77).unwrap();
        let RtcpPacket::Bye { ssrcs, reason } = one(&out[..n]) else {
            panic!("not a BYE")
        };
        assert_eq!(ssrcs.iter().collect::<Vec<_>>(), [77]);
        assert_eq!(ssrcs.len(), 1);
        assert!(reason.is_empty());
        assert_eq!(
            write_pli(&mut out[..11], 1, 2),
            Err(RtcpError::BufferTooSmall)
        );
        assert_eq!(
            write_fir(&mut out[..19], 1, 2, 0),
            Err(RtcpError::BufferTooSmall)
        );
        assert_eq!(write_bye(&mut out[..7], 1), Err(RtcpError::BufferTooSmall));
    }

    #[test]
    fn compound_and_other() {
        let mut buf = [0u8; 256];
        let mut n = write_rr(&mut buf, 5, &[block(1)]).unwrap();
        n += write_sdes_cname(&mut buf[n..], 5, "cname").unwrap();
        // APP packet: unknown to the parser, surfaces as Other.
        buf[n..n + 12].copy_from_slice(&[0x80, PT_APP, 0, 2, 0, 0, 0, 5, b'a', b'b', b'c', b'd']);
        n += 12;
        // REMB: 1 SSRC, exp 3, mantissa 0x2_0010.
        buf[n..n + 24].copy_from_slice(&[
            0x8f, PT_PSFB, 0, 5, 0, 0, 0, 5, 0, 0, 0, 0, b'R', b'E', b'M', b'B', 1, 0x0e, 0x00,
            0x10, 0, 0, 0, 9,
        ]);
        n += 24;
        n += write_bye(&mut buf[n..], 5).unwrap();
        let pkts: Vec<_> = iter_compound(&buf[..n]).collect::<Result<_, _>>().unwrap();
        assert_eq!(pkts.len(), 5);
        assert!(matches!(pkts[0], RtcpPacket::ReceiverReport(_)));
        assert!(matches!(pkts[1], RtcpPacket::Sdes(_)));
        assert_eq!(
            pkts[2],
            RtcpPacket::Other {
                pt: PT_APP,
                fmt: 0,
                body: &[0, 0, 0, 5, b'a', b'b', b'c', b'd']
            }
        );
        let RtcpPacket::Remb(remb) = pkts[3] else {
            panic!("not REMB")
        };
        assert_eq!(remb.sender_ssrc, 5);
        assert_eq!(remb.bitrate, 0x2_0010 << 3);
        assert_eq!(remb.ssrcs.iter().collect::<Vec<_>>(), [9]);
        assert!(matches!(pkts[4], RtcpPacket::Bye { .. }));
    }

    #[test]
    fn bye_with_reason_and_padding() {
        // BYE, P set, 1 SSRC, reason "ab", then 1 byte of item padding and 4 bytes of padding.
        let bytes = [0xa1, PT_BYE, 0, 3, 0, 0, 0, 1, 2, b'a', b'b', 0, 0, 0, 0, 4];
        let RtcpPacket::Bye { ssrcs, reason } = one(&bytes) else {
            panic!("not a BYE")
        };
        assert_eq!(ssrcs.iter().collect::<Vec<_>>(), [1]);
        assert_eq!(reason, b"ab");
    }

    #[test]
    fn malformed_inputs() {
        let err = |b: &[u8]| iter_compound(b).next().unwrap().unwrap_err();
        assert_eq!(err(&[0x80, 200, 0]), RtcpError::Truncated);
        assert_eq!(err(&[0x40, 200, 0, 0]), RtcpError::BadVersion);
        assert_eq!(err(&[0x80, 201, 0, 1, 0, 0]), RtcpError::Truncated);
        // RR claiming one block without room for it.
        assert_eq!(err(&[0x81, 201, 0, 1, 0, 0, 0, 1]), RtcpError::BadCount);
        // SR too short for sender info.
        assert_eq!(err(&[0x80, 200, 0, 1, 0, 0, 0, 1]), RtcpError::BadCount);
        // Padding of 0 and padding beyond the body.
        assert_eq!(err(&[0xa0, 201, 0, 1, 0, 0, 0, 0]), RtcpError::BadPadding);
        assert_eq!(err(&[0xa0, 201, 0, 1, 0, 0, 0, 5]), RtcpError::BadPadding);
        // BYE with 2 SSRCs declared, 1 present; reason overrunning.
        assert_eq!(err(&[0x82, 203, 0, 1, 0, 0, 0, 1]), RtcpError::BadCount);
        assert_eq!(
            err(&[0x81, 203, 0, 2, 0, 0, 0, 1, 9, 0, 0, 0]),
            RtcpError::BadCount
        );
        // Feedback without SSRCs.
        assert_eq!(err(&[0x81, 205, 0, 1, 0, 0, 0, 1]), RtcpError::Truncated);
        // Every strict prefix of a valid packet fails cleanly; iteration stops after an error.
        let mut out = [0u8; 128];
        let n = write_sr(&mut out, &SenderInfo::default(), &[block(1)]).unwrap();
        for cut in 1..n {
            let mut it = iter_compound(&out[..cut]);
            assert!(it.next().unwrap().is_err());
            assert!(it.next().is_none());
        }
        // A valid packet followed by garbage yields the packet, then one error.
        let m = write_pli(&mut out[n..], 1, 2).unwrap();
        out[n + m] = 0;
        let v: Vec<_> = iter_compound(&out[..n + m + 1]).collect();
        assert_eq!(v.len(), 3);
        assert!(v[0].is_ok() && v[1].is_ok() && v[2].is_err());
    }

    #[test]
    fn no_panic_on_random_input() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut buf = [0u8; 96];
        for _ in 0..20_000 {
            for b in buf.iter_mut() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *b = state as u8;
            }
            buf[0] = (buf[0] & 0x3f) | 0x80;
            buf[1] = 200 + (buf[1] % 8);
            buf[2] = 0;
            buf[3] %= 24;
            let len = (state >> 40) as usize % buf.len();
            for p in iter_compound(&buf[..len]) {
                match p {
                    Ok(RtcpPacket::SenderReport(sr)) => assert!(sr.blocks().count() < 32),
                    Ok(RtcpPacket::ReceiverReport(rr)) => assert!(rr.blocks().count() < 32),
                    Ok(RtcpPacket::Nack(n)) => assert!(n.lost().count() <= 17 * 24),
                    Ok(RtcpPacket::Fir(f)) => assert!(f.entries().count() < 24),
                    Ok(RtcpPacket::Bye { ssrcs, .. }) => assert!(ssrcs.iter().count() < 32),
                    Ok(RtcpPacket::Remb(r)) => assert!(r.ssrcs.len() < 24),
                    _ => {}
                }
            }
        }
    }
}

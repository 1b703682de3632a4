//! Opus packet durations from the TOC byte (RFC 6716 section 3.1).

/// Samples at 48 kHz in one frame of an Opus packet with this TOC byte: the frame size is set
/// by the configuration number (the top 5 bits).
fn frame_samples(toc: u8) -> u32 {
    let config = toc >> 3;
    match config {
        // SILK-only: 10, 20, 40, 60 ms.
        0..=11 => [480, 960, 1920, 2880][usize::from(config % 4)],
        // Hybrid: 10, 20 ms.
        12..=15 => [480, 960][usize::from(config % 2)],
        // CELT-only: 2.5, 5, 10, 20 ms.
        _ => [120, 240, 480, 960][usize::from(config % 4)],
    }
}

/// The duration of an Opus packet in 48 kHz samples: frame size times frame count (code 0:
/// one frame, 1 and 2: two, 3: the count in the second byte). `None` for an empty packet, a
/// code 3 packet without its count byte, a count of zero, or more than the 120 ms a packet
/// may carry (RFC 6716 3.2.5).
pub(crate) fn packet_duration(packet: &[u8]) -> Option<u32> {
    let toc = *packet.first()?;
    let frames = match toc & 0x3 {
        0 => 1,
        1 | 2 => 2,
        _ => u32::from(packet.get(1)? & 0x3f),
    };
    let samples = frame_samples(toc) * frames;
    (frames > 0 && samples <= 5760).then_some(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opus_toc_durations() {
        // config 1 (SILK NB 20 ms), code 0: one frame.
        assert_eq!(packet_duration(&[1 << 3, 0xaa]), Some(960));
        // config 31 (CELT FB 20 ms), code 0: the usual WebRTC packet.
        assert_eq!(packet_duration(&[31 << 3]), Some(960));
        // config 28 (CELT FB 2.5 ms), code 1: two frames.
        assert_eq!(packet_duration(&[(28 << 3) | 1]), Some(240));
        // config 13 (Hybrid SWB 20 ms), code 2: two frames.
        assert_eq!(packet_duration(&[(13 << 3) | 2]), Some(1920));
        // config 3 (SILK NB 60 ms), code 3 with two frames: 120 ms, the maximum.
        assert_eq!(packet_duration(&[(3 << 3) | 3, 2]), Some(5760));
        // code 3 with three 60 ms frames: over 120 ms.
        assert_eq!(packet_duration(&[(3 << 3) | 3, 3]), None);
        // config 16 (CELT NB 2.5 ms), code 3, 48 frames: 120 ms.
        assert_eq!(packet_duration(&[(16 << 3) | 3, 0x80 | 48]), Some(5760));
        assert_eq!(packet_duration(&[(16 << 3) | 3, 0]), None);
        assert_eq!(packet_duration(&[(16 << 3) | 3]), None);
        assert_eq!(packet_duration(&[]), None);
        // config 10 (SILK WB 40 ms).
        assert_eq!(packet_duration(&[10 << 3]), Some(1920));
    }
}

//! Still pictures of a stream: one keyframe decoded with libavcodec, then scaled and encoded
//! as JPEG (libavcodec's MJPEG encoder), for `GET /{app}/{stream}/thumb.jpg`.
//!
//! A keyframe decodes on its own (an H264 IDR with its parameter sets in band, a VP8 or
//! VP9 key frame), so a thumbnail needs no decoder kept per stream: [`decode`] opens one,
//! decodes the frame and drops it. The decoded picture ([`Still`]) is kept by the caller and
//! scaled to each width asked for ([`Still::jpeg`]) without decoding again.
//!
//! Why libavcodec: tern links it already (the B-frame transcoder, [`crate::video_transcode`]);
//! it decodes every codec tern carries (H264, H265, VP8, VP9, and AV1 when the build has
//! libdav1d or libaom), and its MJPEG encoder and swscale are the reference for both jobs.

use ffmpeg_next as ff;
use tern_proto::codec::VideoCodec;
use thiserror::Error;

use crate::video_transcode::init;

/// Widest thumbnail made: wider asks are served at this width.
pub const MAX_WIDTH: u32 = 3840;
/// Narrowest thumbnail made.
pub const MIN_WIDTH: u32 = 16;

/// Why no picture could be made.
#[derive(Debug, Error)]
#[error("thumbnail: {0}")]
pub struct ThumbnailError(String);

fn err(what: &str, e: impl std::fmt::Display) -> ThumbnailError {
    ThumbnailError(format!("{what}: {e}"))
}

/// A decoded keyframe.
pub struct Still {
    frame: ff::frame::Video,
}

impl std::fmt::Debug for Still {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Still")
            .field("width", &self.width())
            .field("height", &self.height())
            .finish()
    }
}

fn decoder_id(codec: VideoCodec) -> ff::codec::Id {
    match codec {
        VideoCodec::H264 => ff::codec::Id::H264,
        VideoCodec::H265 => ff::codec::Id::HEVC,
        VideoCodec::Vp8 => ff::codec::Id::VP8,
        VideoCodec::Vp9 => ff::codec::Id::VP9,
        VideoCodec::Av1 => ff::codec::Id::AV1,
    }
}

/// Decodes one keyframe of `codec`: H264 and H265 as Annex B with their parameter sets in
/// band, VP8 and VP9 as one frame, AV1 as a temporal unit (OBUs with sizes, the sequence
/// header in band).
pub fn decode(codec: VideoCodec, keyframe: &[u8]) -> Result<Still, ThumbnailError> {
    init().map_err(|e| err("init", e))?;
    let id = decoder_id(codec);
    let found = ff::decoder::find(id).ok_or_else(|| {
        ThumbnailError(format!(
            "this libavcodec has no {} decoder",
            codec.sdp_name()
        ))
    })?;
    let mut ctx = ff::codec::Context::new_with_codec(found);
    // One picture: no frame threads (each would hold a frame back until the end).
    ctx.set_threading(ff::threading::Config {
        kind: ff::threading::Type::Slice,
        count: 1,
        ..Default::default()
    });
    let mut dec = ctx
        .decoder()
        .video()
        .map_err(|e| err("open the decoder", e))?;
    dec.send_packet(&ff::Packet::copy(keyframe))
        .map_err(|e| err("decode", e))?;
    // Drain: a decoder with delay gives its picture only at the end of the stream.
    let _ = dec.send_eof();
    let mut frame = ff::frame::Video::empty();
    dec.receive_frame(&mut frame)
        .map_err(|e| err("the keyframe gave no picture", e))?;
    if frame.width() == 0 || frame.height() == 0 {
        return Err(ThumbnailError("the keyframe gave an empty picture".into()));
    }
    Ok(Still { frame })
}

impl Still {
    /// Its width in pixels.
    pub fn width(&self) -> u32 {
        self.frame.width()
    }

    /// Its height in pixels.
    pub fn height(&self) -> u32 {
        self.frame.height()
    }

    /// The size of a thumbnail `width` wide (its own width when `None`), the aspect kept:
    /// the width clamped to [`MIN_WIDTH`]..=[`MAX_WIDTH`], both sides even (4:2:0).
    pub fn size_for(&self, width: Option<u32>) -> (u32, u32) {
        let w = width
            .unwrap_or(self.width())
            .clamp(MIN_WIDTH, MAX_WIDTH)
            .max(2)
            & !1;
        let h = (u64::from(self.height()) * u64::from(w) / u64::from(self.width().max(1))) as u32;
        (w, h.max(2) & !1)
    }

    /// The picture as a baseline JPEG, `width` wide (see [`Still::size_for`]).
    pub fn jpeg(&self, width: Option<u32>) -> Result<Vec<u8>, ThumbnailError> {
        let (w, h) = self.size_for(width);
        // MJPEG takes full-range 4:2:0.
        let target = ff::format::Pixel::YUVJ420P;
        let mut scaler = ff::software::scaling::Context::get(
            self.frame.format(),
            self.width(),
            self.height(),
            target,
            w,
            h,
            ff::software::scaling::Flags::BILINEAR,
        )
        .map_err(|e| err("scaler", e))?;
        let mut scaled = ff::frame::Video::empty();
        scaler
            .run(&self.frame, &mut scaled)
            .map_err(|e| err("scale", e))?;
        scaled.set_pts(Some(0));
        let codec = ff::encoder::find(ff::codec::Id::MJPEG)
            .ok_or_else(|| ThumbnailError("this libavcodec has no MJPEG encoder".into()))?;
        let mut enc = ff::codec::Context::new_with_codec(codec)
            .encoder()
            .video()
            .map_err(|e| err("MJPEG encoder", e))?;
        enc.set_width(w);
        enc.set_height(h);
        enc.set_format(target);
        enc.set_time_base((1, 25));
        // Quantizers 2-4 of 31: a still that looks like the stream, ~30-60 KB at 720p.
        enc.set_qmin(2);
        enc.set_qmax(4);
        let mut enc = enc.open().map_err(|e| err("open the MJPEG encoder", e))?;
        enc.send_frame(&scaled).map_err(|e| err("encode", e))?;
        let _ = enc.send_eof();
        let mut packet = ff::Packet::empty();
        enc.receive_packet(&mut packet)
            .map_err(|e| err("the encoder gave no JPEG", e))?;
        packet
            .data()
            .map(<[u8]>::to_vec)
            .ok_or_else(|| ThumbnailError("the encoder gave an empty JPEG".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The built-in clip's first keyframe, as the engine would have it: decodes, and its
    /// JPEG starts with SOI and ends with EOI, in the size asked.
    /// The first access unit of an Annex B stream that holds an IDR: every NAL unit from
    /// the start up to the last slice of the first IDR picture.
    fn first_keyframe(annex_b: &[u8]) -> Vec<u8> {
        let starts: Vec<usize> = (0..annex_b.len().saturating_sub(3))
            .filter(|&i| annex_b[i..i + 3] == [0, 0, 1])
            .collect();
        let mut end = None;
        for (n, &at) in starts.iter().enumerate() {
            let kind = annex_b[at + 3] & 0x1f;
            let next = starts.get(n + 1).copied().unwrap_or(annex_b.len());
            if kind == 5 {
                end = Some(next);
            } else if end.is_some() {
                break;
            }
        }
        annex_b[..end.expect("an IDR slice")].to_vec()
    }

    #[test]
    fn the_clips_keyframe_makes_a_jpeg_of_the_size_asked() {
        let key = first_keyframe(include_bytes!("../../../assets/clip/demo.h264"));
        let still = decode(VideoCodec::H264, &key).expect("decode");
        assert!(still.width() >= 320 && still.height() >= 180, "{still:?}");
        let full = still.jpeg(None).expect("jpeg");
        assert_eq!(&full[..2], &[0xFF, 0xD8], "SOI");
        assert_eq!(&full[full.len() - 2..], &[0xFF, 0xD9], "EOI");
        let small = still.jpeg(Some(160)).expect("jpeg 160");
        assert!(small.len() < full.len());
        assert_eq!(still.size_for(Some(160)).0, 160);
        assert_eq!(still.size_for(Some(1)).0, MIN_WIDTH);
        assert_eq!(still.size_for(Some(99_999)).0, MAX_WIDTH);
        assert_eq!(still.size_for(Some(161)).0 % 2, 0);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for codec in [VideoCodec::H264, VideoCodec::Vp8, VideoCodec::Vp9] {
            assert!(
                decode(codec, &[0, 0, 0, 1, 0x65, 1, 2, 3]).is_err(),
                "{codec:?}"
            );
            assert!(decode(codec, &[]).is_err(), "{codec:?}");
        }
    }
}

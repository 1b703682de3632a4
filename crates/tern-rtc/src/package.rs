//! The packaging feed: what every packager (LL-HLS, recordings) takes from a stream, in one
//! vocabulary whatever the stream's publisher.
//!
//! A stream reaches a packager in one of two forms:
//! - frames as an encoder sent them ([`Sample`]: RTMP, SRT and RTSP-H264 publishers hand
//!   them over), which [`Feed::push_sample`] turns into [`Unit`]s as they are;
//! - RTP packets of the stream's ring ([`RingPacket`]: WHIP publishers, clip sources, edge
//!   pulls), which [`Feed::push_rtp`] depacketizes with the [`VideoDepacketizer`] chosen
//!   `From<VideoCodec>` (str0m's `From<Codec> for CodecDepacketizer`).
//!
//! Both end in [`Unit::apply`] on a [`Packager`], so every packager accepts the same codecs
//! by construction: those the codecs table gives LL-HLS and recordings ([`packaged`]; and
//! Opus and AAC audio). A video codec outside it is counted ([`Feed::skipped_frames`]) and left out; its audio still goes in.
//!
//! Sans-IO: nothing here reads the clock; the caller passes wall-clock times to
//! [`Unit::apply`].

use std::borrow::Cow;

use tern_proto::codec::{MediaKind, VideoCodec};
use tern_proto::rtp::Unwrap32;
use tern_proto::{av1, h264, h265, vp8, vp9};

use crate::av::Sample;
use crate::codecs::{self, Output};
use crate::hls::{AudioConfig, Packager, VideoConfig};
use crate::stream::RingPacket;

/// Whether packagers (LL-HLS, recordings) store `codec`'s video: the codecs table's answer
/// ([`crate::codecs::TABLE`]). [`VideoDepacketizer::from`] rebuilds exactly those (a unit
/// test holds the two together).
pub fn packaged(codec: VideoCodec) -> bool {
    codecs::carries(Output::LlHls, codec) && codecs::carries(Output::Recording, codec)
}

/// How a video unit's bytes are laid out, which says how a packager takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VideoFormat {
    /// H264, each NAL unit after a 4-byte length (an RTMP, SRT or RTSP publisher's frame).
    Avcc,
    /// H264 with start codes (an access unit rebuilt from RTP).
    AnnexB,
    /// H265 with start codes (an access unit rebuilt from RTP, RFC 7798).
    H265,
    /// One VP8 frame.
    Vp8,
    /// One VP9 frame or superframe.
    Vp9,
    /// One AV1 temporal unit of sized OBUs (a temporal delimiter first), as rebuilt from RTP.
    Av1,
}

/// One thing for a packager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unit<'a> {
    /// The video's configuration (H264 parameter sets from an encoder's sequence header).
    VideoConfig(VideoConfig),
    /// The audio's configuration (AAC's AudioSpecificConfig, or Opus at a stream's first
    /// audio packet).
    AudioConfig(AudioConfig),
    /// One video frame.
    Video {
        /// Decode time, 90 kHz.
        dts: i64,
        /// Presentation time, 90 kHz.
        pts: i64,
        /// A keyframe (an IDR access unit, a VP8/VP9 key frame).
        keyframe: bool,
        /// The layout of `data`.
        format: VideoFormat,
        /// The frame.
        data: Cow<'a, [u8]>,
    },
    /// One audio frame (AAC or Opus), its time in the audio's clock rate.
    Audio {
        /// Presentation time.
        pts: i64,
        /// The frame.
        data: Cow<'a, [u8]>,
    },
}

impl Unit<'_> {
    /// The unit with its bytes copied out (to be held past the call that made it).
    pub fn into_owned(self) -> Unit<'static> {
        match self {
            Unit::VideoConfig(c) => Unit::VideoConfig(c),
            Unit::AudioConfig(c) => Unit::AudioConfig(c),
            Unit::Video {
                dts,
                pts,
                keyframe,
                format,
                data,
            } => Unit::Video {
                dts,
                pts,
                keyframe,
                format,
                data: Cow::Owned(data.into_owned()),
            },
            Unit::Audio { pts, data } => Unit::Audio {
                pts,
                data: Cow::Owned(data.into_owned()),
            },
        }
    }

    /// Hands the unit to `p`; `wall_ms` is when it was taken (Unix ms, for the playlist's
    /// program date-time).
    pub fn apply(&self, p: &mut Packager, wall_ms: u64) {
        match self {
            Unit::VideoConfig(c) => p.set_video(c.clone()),
            Unit::AudioConfig(c) => p.set_audio(c.clone()),
            Unit::Video {
                dts,
                pts,
                keyframe,
                format,
                data,
            } => match format {
                VideoFormat::Avcc => p.push_video(*dts, *pts, *keyframe, data, wall_ms),
                VideoFormat::AnnexB => p.push_video_annexb(*dts, *pts, *keyframe, data, wall_ms),
                VideoFormat::H265 => p.push_h265(*dts, *pts, *keyframe, data, wall_ms),
                VideoFormat::Vp8 => p.push_vp8(*dts, data, wall_ms),
                VideoFormat::Vp9 => p.push_vp9(*dts, data, wall_ms),
                VideoFormat::Av1 => p.push_av1(*dts, data, wall_ms),
            },
            Unit::Audio { pts, data } => p.push_audio(*pts, data, wall_ms),
        }
    }
}

/// Frames out of one video codec's RTP payloads, chosen `From<VideoCodec>`.
#[derive(Debug)]
pub enum VideoDepacketizer {
    /// H264 (RFC 6184) into Annex B access units.
    H264(h264::Depacketizer),
    /// H265 (RFC 7798) into Annex B access units.
    H265(h265::Depacketizer),
    /// VP8 (RFC 7741).
    Vp8(vp8::Depacketizer),
    /// VP9 (RFC 9628).
    Vp9(vp9::Depacketizer),
    /// AV1 (the AOM RTP payload format) into temporal units.
    Av1(av1::Depacketizer),
    /// A codec packagers do not store: its frames are counted, not rebuilt.
    Skipped(VideoCodec),
}

impl From<VideoCodec> for VideoDepacketizer {
    fn from(codec: VideoCodec) -> Self {
        // The table decides: a codec it takes out of the packagers is skipped here too.
        if !packaged(codec) {
            return VideoDepacketizer::Skipped(codec);
        }
        match codec {
            VideoCodec::H264 => VideoDepacketizer::H264(h264::Depacketizer::default()),
            VideoCodec::H265 => VideoDepacketizer::H265(h265::Depacketizer::default()),
            VideoCodec::Vp8 => VideoDepacketizer::Vp8(vp8::Depacketizer::default()),
            VideoCodec::Vp9 => VideoDepacketizer::Vp9(vp9::Depacketizer::default()),
            VideoCodec::Av1 => VideoDepacketizer::Av1(av1::Depacketizer::default()),
        }
    }
}

impl VideoDepacketizer {
    /// The codec it rebuilds.
    pub fn codec(&self) -> VideoCodec {
        match self {
            VideoDepacketizer::H264(_) => VideoCodec::H264,
            VideoDepacketizer::H265(_) => VideoCodec::H265,
            VideoDepacketizer::Vp8(_) => VideoCodec::Vp8,
            VideoDepacketizer::Vp9(_) => VideoCodec::Vp9,
            VideoDepacketizer::Av1(_) => VideoCodec::Av1,
            VideoDepacketizer::Skipped(c) => *c,
        }
    }

    /// Frames dropped because a packet was lost or malformed.
    pub fn damaged_frames(&self) -> u64 {
        match self {
            VideoDepacketizer::H264(d) => d.damaged_frames(),
            VideoDepacketizer::H265(d) => d.damaged_frames(),
            VideoDepacketizer::Vp8(d) => d.damaged_frames(),
            VideoDepacketizer::Vp9(d) => d.damaged_frames(),
            VideoDepacketizer::Av1(d) => d.damaged_frames(),
            VideoDepacketizer::Skipped(_) => 0,
        }
    }

    /// One RTP payload in; a completed frame (keyframe flag, layout, bytes) out.
    fn push(
        &mut self,
        seq: u16,
        rtp_ts: u32,
        marker: bool,
        payload: &[u8],
    ) -> Option<(bool, VideoFormat, &[u8])> {
        match self {
            // A malformed payload damages its access unit, which the depacketizer drops
            // and counts.
            VideoDepacketizer::H264(d) => match d.push(seq, rtp_ts, marker, payload) {
                Ok(Some(au)) => {
                    let key = h264::nal_units(au).any(|n| h264::nal_type(n) == h264::NAL_IDR);
                    Some((key, VideoFormat::AnnexB, au))
                }
                _ => None,
            },
            VideoDepacketizer::H265(d) => match d.push(seq, rtp_ts, marker, payload) {
                Ok(Some(au)) => Some((h265::is_keyframe_au(au), VideoFormat::H265, au)),
                _ => None,
            },
            VideoDepacketizer::Vp8(d) => {
                let f = d.push(seq, rtp_ts, marker, payload)?;
                Some((f.first().is_some_and(|b| b & 1 == 0), VideoFormat::Vp8, f))
            }
            VideoDepacketizer::Vp9(d) => {
                let f = d.push(seq, rtp_ts, marker, payload)?;
                let key = vp9::frame_info(f).is_some_and(|i| i.keyframe);
                Some((key, VideoFormat::Vp9, f))
            }
            VideoDepacketizer::Av1(d) => match d.push(seq, rtp_ts, marker, payload) {
                Ok(Some(tu)) => Some((av1::is_keyframe_tu(tu), VideoFormat::Av1, tu)),
                _ => None,
            },
            VideoDepacketizer::Skipped(_) => None,
        }
    }
}

/// One stream's way into a packager: the depacketizer of its video codec and the
/// timestamp unwrapping of its RTP, or its publisher's frames as they come.
#[derive(Debug)]
pub struct Feed {
    video: VideoDepacketizer,
    video_ts: Unwrap32,
    audio_ts: Unwrap32,
    /// The first audio packet was seen (its configuration given).
    audio_known: bool,
    /// Video frames of a codec packagers do not store (packets with a marker).
    skipped: u64,
    /// Damaged-frame counts of the depacketizers replaced by a codec change.
    damaged_before: u64,
}

impl Default for Feed {
    /// A feed for an H264 stream (the codec of a stream nobody has published yet).
    fn default() -> Self {
        Feed::new(VideoCodec::H264)
    }
}

impl Feed {
    /// A feed for a stream whose video is `codec`.
    pub fn new(codec: VideoCodec) -> Feed {
        Feed {
            video: codec.into(),
            video_ts: Unwrap32::default(),
            audio_ts: Unwrap32::default(),
            audio_known: false,
            skipped: 0,
            damaged_before: 0,
        }
    }

    /// The video codec it expects.
    pub fn codec(&self) -> VideoCodec {
        self.video.codec()
    }

    /// The stream's video is `codec` now (a publisher in another codec took it): a new
    /// depacketizer for it, nothing when it is unchanged.
    pub fn set_codec(&mut self, codec: VideoCodec) {
        if self.video.codec() != codec {
            self.damaged_before += self.video.damaged_frames();
            self.video = codec.into();
            self.video_ts = Unwrap32::default();
        }
    }

    /// Frames lost to loss or malformed payloads, in every codec this feed has had.
    pub fn damaged_frames(&self) -> u64 {
        self.damaged_before + self.video.damaged_frames()
    }

    /// Video frames left out because packagers do not store their codec.
    pub fn skipped_frames(&self) -> u64 {
        self.skipped
    }

    /// One ring packet in; what it completes to `out` (nothing, a frame, or at the first
    /// audio packet the audio's configuration and the frame). Times are the RTP
    /// timestamps, unwrapped: 90 kHz video, 48 kHz Opus.
    pub fn push_rtp(&mut self, pkt: &RingPacket, out: &mut dyn FnMut(Unit<'_>)) {
        match pkt.kind {
            MediaKind::Video => {
                let ts = self.video_ts.extend(pkt.rtp_ts);
                if let VideoDepacketizer::Skipped(_) = self.video {
                    self.skipped += u64::from(pkt.marker);
                    return;
                }
                if let Some((keyframe, format, data)) =
                    self.video
                        .push(pkt.seq as u16, pkt.rtp_ts, pkt.marker, &pkt.payload)
                {
                    out(Unit::Video {
                        dts: ts,
                        pts: ts,
                        keyframe,
                        format,
                        data: Cow::Borrowed(data),
                    });
                }
            }
            MediaKind::Audio => {
                if !self.audio_known {
                    // WebRTC's Opus is always signalled as two channels; a mono encoder's
                    // packets decode as stereo.
                    self.audio_known = true;
                    out(Unit::AudioConfig(AudioConfig::Opus { channels: 2 }));
                }
                let ts = self.audio_ts.extend(pkt.rtp_ts);
                out(Unit::Audio {
                    pts: ts,
                    data: Cow::Borrowed(&pkt.payload),
                });
            }
        }
    }

    /// One frame of a publisher that hands its frames over (H264 and AAC as the encoder
    /// sent them: B-frames keep their composition offsets) in; its unit to `out`.
    pub fn push_sample(&mut self, sample: &Sample, out: &mut dyn FnMut(Unit<'_>)) {
        out(sample_unit(sample));
    }
}

/// A publisher's frame as a unit (RTMP's millisecond times at 90 kHz).
pub fn sample_unit(sample: &Sample) -> Unit<'_> {
    match sample {
        Sample::VideoConfig { sps, pps } => Unit::VideoConfig(VideoConfig::H264 {
            sps: sps.clone(),
            pps: pps.clone(),
        }),
        Sample::AudioConfig {
            asc,
            sample_rate,
            channels,
        } => Unit::AudioConfig(AudioConfig::Aac {
            asc: asc.clone(),
            sample_rate: *sample_rate,
            channels: *channels,
        }),
        Sample::Video {
            dts_ms,
            pts_ms,
            keyframe,
            avcc,
        } => Unit::Video {
            dts: dts_ms * 90,
            pts: pts_ms * 90,
            keyframe: *keyframe,
            format: VideoFormat::Avcc,
            data: Cow::Borrowed(avcc),
        },
        Sample::Audio { pts, data } => Unit::Audio {
            pts: *pts,
            data: Cow::Borrowed(data),
        },
    }
}

#[cfg(test)]
mod tests;

//! The RTMP publisher session: an RTMP connection in, RTP-ready media packets out.
//!
//! [`RtmpPublisher`] wraps [`tern_proto::rtmp::ServerSession`] (handshake, chunks, the
//! `connect`/`publish` flow) and hands the media it reports to the shared
//! [`AvPipeline`] (the one SRT's MPEG-TS also feeds), which makes [`IngestPacket`]s, the
//! same packets a WHIP publisher produces, so the server's ingest path treats all alike:
//!
//! * video: AVC sequence headers give the SPS/PPS; each AVC frame is an access unit with
//!   PTS = RTMP timestamp + composition time, in ms (B-frames, the transcoder and the
//!   renditions: see [`crate::av`]);
//! * audio: the AAC sequence header starts the AAC → Opus transcoder, raw AAC frames go to
//!   it at their RTMP timestamp.
//!
//! Both timestamps count from the same RTMP epoch (one 32-bit unwrapper for both), so the
//! pipeline's capture times keep lip sync.
//!
//! Sans-IO: bytes in with [`RtmpPublisher::receive`], bytes out with
//! [`RtmpPublisher::take_output`]; the caller passes the time.

use tern_proto::rtmp::flv::{AudioTag, AvcPacketType, FlvError, VideoTag};
use tern_proto::rtmp::{Event, RtmpError, ServerSession};
use tern_proto::rtp::Unwrap32;
use thiserror::Error;

use crate::av::{AvEvent, AvPipeline, MediaError};
use crate::publisher::IngestPacket;
use crate::renditions::{RenditionSink, RenditionSpec, RenditionStats};
use crate::video_transcode::{TranscodeStats, VideoTranscodeError};

/// Why an RTMP publisher must be disconnected.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RtmpIngestError {
    /// The RTMP connection itself is malformed.
    #[error(transparent)]
    Rtmp(#[from] RtmpError),
    /// A malformed or unsupported audio/video tag.
    #[error(transparent)]
    Flv(#[from] FlvError),
    /// Media the pipeline could not take (a bad configuration, audio that cannot be
    /// transcoded).
    #[error(transparent)]
    Media(#[from] MediaError),
}

/// What the caller must act on.
#[derive(Debug)]
pub enum RtmpEvent {
    /// `connect` with the application (may carry `?query`) and tcUrl.
    Connect {
        /// The `app` property.
        app: String,
        /// The `tcUrl` property.
        tc_url: Option<String>,
    },
    /// `publish`: answer with [`RtmpPublisher::accept_publish`] or
    /// [`RtmpPublisher::reject_publish`].
    Publish {
        /// The publishing name (stream key, may carry `?query`).
        name: String,
    },
    /// A media packet, numbered in this publisher's own sequence and timestamp space.
    Packet(IngestPacket),
    /// The client stopped publishing.
    Unpublish,
    /// Something about the video the caller reports (log, API, event).
    Video(VideoNotice),
    /// The publisher's media as it came, for a packager (LL-HLS), while
    /// [`RtmpPublisher::set_samples`] is on.
    Sample(Sample),
}

pub use crate::av::{Sample, TranscodeMode, VideoNotice};

impl From<AvEvent> for RtmpEvent {
    fn from(e: AvEvent) -> Self {
        match e {
            AvEvent::Packet(p) => RtmpEvent::Packet(p),
            AvEvent::Video(n) => RtmpEvent::Video(n),
            AvEvent::Sample(s) => RtmpEvent::Sample(s),
        }
    }
}

/// One RTMP publisher: the RTMP session, and the media pipeline its tags feed.
#[derive(Debug)]
pub struct RtmpPublisher {
    session: ServerSession,
    /// One unwrapper for both tracks: they share the RTMP clock.
    clock: Unwrap32,
    pub(crate) av: AvPipeline,
}

impl RtmpPublisher {
    /// A new connection; `seed` fills the handshake's random bytes, `max_payload` caps RTP
    /// payloads.
    pub fn new(seed: u64, max_payload: usize) -> Self {
        RtmpPublisher {
            session: ServerSession::new(seed),
            clock: Unwrap32::default(),
            av: AvPipeline::new(max_payload),
        }
    }

    /// The media pipeline (transcoding, renditions, samples, counts): see [`AvPipeline`].
    pub fn media(&mut self) -> &mut AvPipeline {
        &mut self.av
    }

    /// See [`AvPipeline::set_samples`].
    pub fn set_samples(&mut self, on: bool) {
        self.av.set_samples(on);
    }

    /// See [`AvPipeline::set_transcode`].
    pub fn set_transcode(&mut self, mode: TranscodeMode) {
        self.av.set_transcode(mode);
    }

    /// See [`AvPipeline::set_viewers`].
    pub fn set_viewers(&mut self, wanted: bool) {
        self.av.set_viewers(wanted);
    }

    /// See [`AvPipeline::has_b_frames`].
    pub fn has_b_frames(&self) -> bool {
        self.av.has_b_frames()
    }

    /// See [`AvPipeline::request_keyframe`].
    pub fn request_keyframe(&mut self) {
        self.av.request_keyframe();
    }

    /// See [`AvPipeline::set_renditions`].
    pub fn set_renditions(
        &mut self,
        specs: &[RenditionSpec],
        sink: RenditionSink,
    ) -> Result<(), VideoTranscodeError> {
        self.av.set_renditions(specs, sink)
    }

    /// See [`AvPipeline::rendition_stats`].
    pub fn rendition_stats(&self) -> Vec<RenditionStats> {
        self.av.rendition_stats()
    }

    /// See [`AvPipeline::request_layer_keyframe`].
    pub fn request_layer_keyframe(&mut self, layer: u8) {
        self.av.request_layer_keyframe(layer);
    }

    /// See [`AvPipeline::transcode_stats`].
    pub fn transcode_stats(&self) -> Option<TranscodeStats> {
        self.av.transcode_stats()
    }

    /// See [`AvPipeline::audio_dropped`].
    pub fn audio_dropped(&self) -> u64 {
        self.av.audio_dropped()
    }

    /// See [`AvPipeline::counts`].
    pub fn counts(&self) -> (u64, u64, u64) {
        self.av.counts()
    }

    /// Bytes to send to the client; empties the buffer.
    pub fn take_output(&mut self) -> Vec<u8> {
        self.session.take_output()
    }

    /// Whether a publish was accepted and is going on.
    pub fn is_publishing(&self) -> bool {
        self.session.is_publishing()
    }

    /// Accepts the pending publish (`NetStream.Publish.Start`).
    pub fn accept_publish(&mut self) -> Result<(), RtmpError> {
        self.session.accept_publish()
    }

    /// Refuses the pending publish with an error status; close after sending the output.
    pub fn reject_publish(&mut self, code: &str, description: &str) -> Result<(), RtmpError> {
        self.session.reject_publish(code, description)
    }

    /// Feeds bytes from the socket at `now_ntp` (64-bit NTP time). After an error, close
    /// the connection.
    pub fn receive(
        &mut self,
        now_ntp: u64,
        data: &[u8],
        ev: &mut dyn FnMut(RtmpEvent),
    ) -> Result<(), RtmpIngestError> {
        let mut events = Vec::new();
        let res = self.session.receive(data, &mut |e| events.push(e));
        for e in events {
            match e {
                Event::Connect { app, tc_url } => ev(RtmpEvent::Connect { app, tc_url }),
                Event::Publish { name } => ev(RtmpEvent::Publish { name }),
                Event::Unpublish => ev(RtmpEvent::Unpublish),
                Event::Video { timestamp, data } => {
                    let tag = VideoTag::parse(&data)?;
                    match tag.packet_type {
                        AvcPacketType::SequenceHeader => self.av.video_config(tag.body)?,
                        AvcPacketType::EndOfSequence => {}
                        AvcPacketType::Nalu => {
                            let dts = self.clock.extend(timestamp);
                            let pts = (dts + i64::from(tag.composition_time)).max(0);
                            let (key, body) = (tag.keyframe, tag.body);
                            self.av
                                .video_frame(now_ntp, dts, pts, key, body, &mut |e| ev(e.into()))?;
                        }
                    }
                }
                Event::Audio { timestamp, data } => {
                    let tag = AudioTag::parse(&data)?;
                    if tag.sequence_header {
                        self.av.audio_config(tag.body)?;
                    } else {
                        let ms = self.clock.extend(timestamp);
                        self.av
                            .audio_frame(now_ntp, ms, tag.body, &mut |e| ev(e.into()))?;
                    }
                }
            }
        }
        Ok(res?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::av::ntp_of;
    use tern_proto::codec::MediaKind;
    use tern_proto::h264;
    use tern_proto::rtmp::amf0::{self, Value, object};
    use tern_proto::rtmp::chunk::ChunkWriter;
    use tern_proto::rtmp::{HANDSHAKE_SIZE, MSG_AUDIO, MSG_COMMAND_AMF0, MSG_VIDEO, VERSION};

    const SAMPLE: &[u8] = include_bytes!("../../../assets/rtmp/sample.flv");

    /// The tags of an FLV file: (type, timestamp ms, body).
    fn flv_tags(mut f: &[u8]) -> Vec<(u8, u32, &[u8])> {
        assert_eq!(&f[..3], b"FLV");
        let header = u32::from_be_bytes([f[5], f[6], f[7], f[8]]) as usize;
        f = &f[header + 4..];
        let mut tags = Vec::new();
        while f.len() >= 11 {
            let size = (usize::from(f[1]) << 16) | (usize::from(f[2]) << 8) | usize::from(f[3]);
            let ts = u32::from_be_bytes([f[7], f[4], f[5], f[6]]);
            tags.push((f[0], ts, &f[11..11 + size]));
            f = &f[11 + size + 4..];
        }
        tags
    }

    fn command(w: &mut ChunkWriter, stream: u32, vals: &[Value], out: &mut Vec<u8>) {
        let mut body = Vec::new();
        for v in vals {
            amf0::encode(v, &mut body).expect("encode");
        }
        w.write(3, 0, MSG_COMMAND_AMF0, stream, &body, out)
            .expect("write");
    }

    /// Goertzel power of `freq` in `x` relative to the signal's total power.
    fn tone_share(x: &[f32], freq: f32, rate: f32) -> f32 {
        let k = 2.0 * (2.0 * std::f32::consts::PI * freq / rate).cos();
        let (mut s1, mut s2) = (0.0f32, 0.0f32);
        for &v in x {
            let s = v + k * s1 - s2;
            s2 = s1;
            s1 = s;
        }
        let p = s1 * s1 + s2 * s2 - k * s1 * s2;
        let total: f32 = x.iter().map(|v| v * v).sum::<f32>() * x.len() as f32 / 2.0;
        p / total.max(1e-9)
    }

    /// The sample FLV pushed over a scripted RTMP connection: H264 comes out as RTP with
    /// keyframes led by SPS/PPS, AAC comes out as Opus that decodes back to the 440 Hz
    /// sine, and the two tracks' timestamps and capture times agree.
    /// Handshake, `connect` and `publish` of `cam` on `p`, accepted; returns the chunk
    /// writer to send media with.
    fn start_publishing(p: &mut RtmpPublisher) -> ChunkWriter {
        let mut input = vec![VERSION];
        input.extend([0u8; 2 * HANDSHAKE_SIZE]);
        let mut w = ChunkWriter::new();
        command(
            &mut w,
            0,
            &[
                Value::String("connect".into()),
                Value::Number(1.0),
                object([("app", Value::String("live".into()))]),
            ],
            &mut input,
        );
        command(
            &mut w,
            1,
            &[
                Value::String("publish".into()),
                Value::Number(0.0),
                Value::Null,
                Value::String("cam".into()),
            ],
            &mut input,
        );
        let mut events = Vec::new();
        p.receive(1 << 40, &input, &mut |e| events.push(e))
            .expect("connect + publish");
        assert!(matches!(events.last(), Some(RtmpEvent::Publish { name }) if name == "cam"));
        p.accept_publish().expect("accept");
        assert!(p.is_publishing());
        w
    }

    #[test]
    fn sample_flv_becomes_rtp() {
        let mut p = RtmpPublisher::new(3, 1200);
        let mut w = start_publishing(&mut p);
        let mut packets = Vec::new();
        let mut bytes = Vec::new();
        let mut audio_tags = 0;
        for (ty, ts, mut body) in flv_tags(SAMPLE) {
            let (csid, mt) = match ty {
                8 => (4, MSG_AUDIO),
                9 => (6, MSG_VIDEO),
                _ => continue,
            };
            if ty == 8 {
                audio_tags += 1;
                // One AAC frame cut short, as a corrupt encoder might send it.
                if audio_tags == 10 {
                    body = &body[..4];
                }
            }
            w.write(csid, ts, mt, 1, body, &mut bytes).expect("write");
        }
        // Fed in uneven pieces, as a socket would.
        for piece in bytes.chunks(1000) {
            p.receive(1 << 40, piece, &mut |e| {
                if let RtmpEvent::Packet(pk) = e {
                    packets.push(pk);
                }
            })
            .expect("media");
        }
        let video: Vec<&IngestPacket> = packets
            .iter()
            .filter(|p| p.kind == MediaKind::Video)
            .collect();
        let audio: Vec<&IngestPacket> = packets
            .iter()
            .filter(|p| p.kind == MediaKind::Audio)
            .collect();
        let (frames, aac, opus) = p.counts();
        // The cut frame was dropped and counted, and the audio went on.
        assert_eq!(p.audio_dropped(), 1);
        assert_eq!(frames, 30, "2 s at 15 fps");
        assert_eq!(video.iter().filter(|p| p.marker).count(), 30);
        // Every keyframe starts with a STAP-A holding the SPS and PPS.
        let mut au_start = true;
        let mut keyframes = 0;
        for v in &video {
            if au_start && h264::is_keyframe(&v.payload) {
                keyframes += 1;
                assert_eq!(h264::nal_type(&v.payload), h264::NAL_STAP_A);
            }
            au_start = v.marker;
            assert!(v.payload.len() <= 1200);
        }
        assert_eq!(keyframes, 2);
        // No B-frames: after one whole GOP the publisher is no longer probed and no GOP is
        // kept for a transcoder.
        assert!(!p.has_b_frames());
        assert!(p.av.reorder.settled && p.av.reorder.gop.is_empty() && p.av.reorder.gop_bytes == 0);
        assert!(p.transcode_stats().is_none());
        // Sequence numbers are dense, video timestamps step by 90 kHz / 15 fps.
        assert!(video.windows(2).all(|w| w[1].seq == w[0].seq + 1));
        // (FLV timestamps are whole ms: 1/15 s steps are 66 or 67 ms, ±90 around 6000.)
        let ts: Vec<u64> = video
            .iter()
            .filter(|p| p.marker)
            .map(|p| p.rtp_ts)
            .collect();
        assert!(
            ts.windows(2).all(|w| w[1].abs_diff(w[0] + 6000) <= 90),
            "{ts:?}"
        );
        assert!(ts[29].abs_diff(ts[0] + 29 * 6000) <= 90, "{ts:?}");

        // Audio: ~2 s of 20 ms frames.
        assert!(aac >= 85, "{aac} AAC frames");
        assert_eq!(opus as usize, audio.len());
        // Every AAC sample comes out, but for the resampler's start-up delay and the last
        // unfinished 20 ms frame.
        let want = aac as usize * 1024 * 48_000 / 44_100 / 960;
        assert!(
            (want - 2..=want).contains(&audio.len()),
            "{} Opus frames from {aac} AAC frames",
            audio.len()
        );
        assert!(audio.windows(2).all(|w| w[1].rtp_ts - w[0].rtp_ts == 960));
        // Both tracks on the RTMP epoch: the first video packet at its tag's PTS
        // (timestamp + composition time) × 90, the first Opus frame at the first raw AAC
        // tag's timestamp × 48.
        let tags = flv_tags(SAMPLE);
        let (vt, vb) = tags
            .iter()
            .find(|(ty, _, b)| *ty == 9 && b[1] == 1)
            .map(|(_, t, b)| (*t, *b))
            .expect("a video frame");
        let cts = i64::from(i32::from_be_bytes([vb[2], vb[3], vb[4], 0]) >> 8);
        assert_eq!(video[0].rtp_ts as i64, (i64::from(vt) + cts) * 90);
        let at = tags
            .iter()
            .find(|(ty, _, b)| *ty == 8 && b[1] == 1)
            .map(|(_, t, _)| *t)
            .expect("an AAC frame");
        assert_eq!(audio[0].rtp_ts, u64::from(at) * 48);
        // One NTP timeline: capture times differ exactly as media times do (to 1 ms).
        let ms = (1i64 << 32) / 1000;
        for (v, a) in [
            (video[0], audio[0]),
            (video[video.len() / 2], audio[audio.len() / 2]),
        ] {
            let (vn, an) = (v.capture_ntp.expect("ntp"), a.capture_ntp.expect("ntp"));
            let media = ntp_of(v.rtp_ts as i64, 90_000) - ntp_of(a.rtp_ts as i64, 48_000);
            let capture = vn.wrapping_sub(an) as i64;
            assert!((capture - media).abs() < ms, "{capture} vs {media}");
        }

        // The Opus decodes back to the 440 Hz sine.
        let mut dec = opus::Decoder::new(48_000, opus::Channels::Stereo).expect("decoder");
        let mut pcm = Vec::new();
        let mut frame = vec![0f32; 960 * 2];
        for a in &audio {
            let n = dec
                .decode_float(&a.payload, &mut frame, false)
                .expect("decode");
            assert_eq!(n, 960);
            pcm.extend(frame.chunks(2).map(|s| s[0]));
        }
        let tail = &pcm[pcm.len() / 2..];
        let rms = (tail.iter().map(|v| v * v).sum::<f32>() / tail.len() as f32).sqrt();
        assert!(rms > 0.05, "audible: rms {rms}");
        let share = tone_share(tail, 440.0, 48_000.0);
        assert!(share > 0.9, "440 Hz holds {share:.3} of the power");
        assert!(tone_share(tail, 1000.0, 48_000.0) < 0.01);
    }

    #[test]
    fn unsupported_codecs_are_errors() {
        let mut p = RtmpPublisher::new(3, 1200);
        let mut input = vec![VERSION];
        input.extend([0u8; 2 * HANDSHAKE_SIZE]);
        let mut w = ChunkWriter::new();
        command(
            &mut w,
            0,
            &[
                Value::String("connect".into()),
                Value::Number(1.0),
                object([("app", Value::String("live".into()))]),
            ],
            &mut input,
        );
        command(
            &mut w,
            1,
            &[
                Value::String("publish".into()),
                Value::Number(0.0),
                Value::Null,
                Value::String("cam".into()),
            ],
            &mut input,
        );
        p.receive(0, &input, &mut |_| {}).expect("ok");
        p.accept_publish().expect("accept");
        // MP3 audio (sound format 2).
        let mut b = Vec::new();
        w.write(4, 0, MSG_AUDIO, 1, &[0x2f, 0xff, 0xfb], &mut b)
            .expect("w");
        let err = p.receive(0, &b, &mut |_| {}).expect_err("mp3 refused");
        assert!(err.to_string().contains("sound format 2"), "{err}");
    }

    /// With renditions a B-frame stream is decoded once, for the renditions and the
    /// transcoder: layers 1 and 2 come out of the sink at their sizes (decoded back),
    /// Baseline, with IDRs where the source has them and where a viewer asked, on the
    /// source's timeline; layer 0 passes through without a viewer and is transcoded (by the
    /// shared decoder's pictures, no GOP kept) with one.
    #[test]
    fn renditions_and_the_transcoder_share_one_decoder() {
        use crate::renditions::RenditionEvent;
        use crate::renditions::tests::{decoded, keeping_sink, layer_frames, spec};
        let Some(flv) = crate::video_transcode::tests::b_frame_sample(3, "flv") else {
            eprintln!("ffmpeg not installed: skipped");
            return;
        };
        let mut p = RtmpPublisher::new(5, 1200);
        let mut w = start_publishing(&mut p);
        let (sink, kept) = keeping_sink(std::time::Duration::ZERO);
        p.set_renditions(&[spec("m", 64, 300), spec("l", 32, 100)], sink)
            .expect("renditions");
        let tags = flv_tags(&flv);
        // One tag at a time, each rendition done before the next (no drops in a test).
        let mut phase = |p: &mut RtmpPublisher, from: u32, to: u32| {
            let (mut packets, mut notices) = (Vec::new(), Vec::new());
            for (ty, ts, body) in &tags {
                if *ty != 9 || !(from..to).contains(ts) {
                    continue;
                }
                let mut bytes = Vec::new();
                w.write(6, *ts, MSG_VIDEO, 1, body, &mut bytes)
                    .expect("write");
                p.receive(1 << 40, &bytes, &mut |e| match e {
                    RtmpEvent::Packet(pk) => packets.push(pk),
                    RtmpEvent::Video(n) => notices.push(n),
                    _ => {}
                })
                .expect("media");
                p.av.renditions.as_ref().expect("renditions").drain();
            }
            (packets, notices)
        };
        let (pass, notices) = phase(&mut p, 0, 1000);
        assert_eq!(notices, [VideoNotice::BFrames]);
        assert!(pass.iter().all(|k| k.layer == 0));
        p.set_viewers(true);
        let (coded, notices) = phase(&mut p, 1000, 1500);
        assert_eq!(notices, [VideoNotice::TranscodeStarted]);
        let t = p.av.reorder.transcoder.as_ref().expect("transcoding");
        assert!(t.is_fed(), "on the renditions' decoder");
        assert!(p.av.reorder.gop.is_empty(), "no GOP kept");
        p.request_layer_keyframe(2);
        let (coded2, _) = phase(&mut p, 1500, 2000);
        p.set_viewers(false);
        let (back, notices) = phase(&mut p, 2000, 3000);
        assert!(
            matches!(&notices[..], [VideoNotice::TranscodeStopped(s)] if s.frames_out >= 25),
            "{notices:?}"
        );
        // Layer 0: transcoded from the first frame after what was passed through, Baseline,
        // in display order, numbering dense across the three phases.
        let coded: Vec<&IngestPacket> = coded.iter().chain(&coded2).collect();
        assert!(h264::is_keyframe(&coded[0].payload));
        assert_eq!(
            h264::sps_profile_level_id(&coded[0].payload).map(|s| s[0]),
            Some(66)
        );
        let ts: Vec<u64> = coded
            .iter()
            .filter(|k| k.marker)
            .map(|k| k.rtp_ts)
            .collect();
        assert!(
            ts.len() >= 25 && ts.windows(2).all(|w| w[1] > w[0]),
            "{ts:?}"
        );
        let max_pass = pass.iter().map(|k| k.rtp_ts).max().expect("passed");
        assert!(ts[0] > max_pass, "never back in time");
        let all: Vec<&IngestPacket> = pass.iter().chain(coded).chain(&back).collect();
        assert!(all.windows(2).all(|w| w[1].seq == w[0].seq + 1));
        let stats = p.rendition_stats();
        drop(p);
        let events = std::mem::take(&mut *kept.lock().expect("events"));
        let RenditionEvent::Started { source, sizes } = &events[0] else {
            panic!("first the sizes: {:?}", events.first());
        };
        assert_eq!(*source, (160, 96));
        let sizes: Vec<(u8, &str, u32, u32)> = sizes
            .iter()
            .map(|s| (s.layer, &*s.rid, s.width, s.height))
            .collect();
        assert_eq!(sizes, [(1, "m", 106, 64), (2, "l", 54, 32)]);
        assert!(matches!(events.last(), Some(RenditionEvent::Stopped(s)) if s.len() == 2));
        // The source's keyframes: FLV frame type 1, pts = timestamp + composition time.
        let source_keys: Vec<u64> = tags
            .iter()
            .filter(|(ty, _, b)| *ty == 9 && b[0] >> 4 == 1 && b[1] == 1)
            .map(|(_, t, b)| {
                u64::from(*t) + (i32::from_be_bytes([b[2], b[3], b[4], 0]) >> 8) as u64
            })
            .collect();
        assert_eq!(source_keys.len(), 3, "{source_keys:?}");
        let mut keys = Vec::new();
        for (layer, size) in [(1u8, (106, 64)), (2, (54, 32))] {
            let s = &stats[usize::from(layer) - 1];
            // libx264 holds the newest picture until the next one's timestamp gives its
            // duration (variable frame rate: see open_x264).
            assert_eq!((s.dropped, s.frames_in), (0, s.frames_out + 1), "{s:?}");
            let frames = layer_frames(&events, layer);
            // 90 source frames, less the decoder's reordering delay at the end.
            assert!(frames.len() >= 85, "layer {layer}: {} frames", frames.len());
            assert!(frames.windows(2).all(|w| w[1].0 > w[0].0), "display order");
            // On the source's timeline: every frame at a source frame's pts x 90.
            assert!(frames.iter().all(|f| f.0 % 90 == 0 && f.0 / 90 < 3000));
            let key_ts: Vec<u64> = frames.iter().filter(|f| f.1).map(|f| f.0 / 90).collect();
            for k in &source_keys {
                assert!(
                    key_ts.contains(k),
                    "layer {layer}: an IDR at the source's {k} ms: {key_ts:?}"
                );
            }
            keys.push(key_ts);
            let (pictures, profiles) = decoded(&events, layer);
            assert_eq!(pictures.len(), frames.len(), "every frame decodes");
            assert!(
                pictures.iter().all(|&p| p == size),
                "layer {layer}: {pictures:?}"
            );
            assert!(
                !profiles.is_empty() && profiles.iter().all(|&p| p == 66),
                "Baseline"
            );
        }
        assert_eq!(keys[0], source_keys, "layer 1: the source's IDRs");
        // Layer 2: also one where it was asked for (between 1500 and 2000 ms).
        let asked: Vec<&u64> = keys[1]
            .iter()
            .filter(|k| !source_keys.contains(k))
            .collect();
        assert!(
            keys[1].len() == 4 && asked.len() == 1 && (1400..2000).contains(asked[0]),
            "layer 2: {:?}",
            keys[1]
        );
    }

    /// B-frames are reported; with viewers the video is transcoded (Baseline, no
    /// reordering, starting on a keyframe), without them it passes through again from the
    /// next source keyframe; sequence numbers stay dense throughout.
    #[test]
    fn b_frames_are_transcoded_while_wanted() {
        let Some(flv) = crate::video_transcode::tests::b_frame_sample(3, "flv") else {
            eprintln!("ffmpeg not installed: skipped");
            return;
        };
        let mut p = RtmpPublisher::new(5, 1200);
        let mut w = start_publishing(&mut p);
        let tags = flv_tags(&flv);
        let mut phase = |p: &mut RtmpPublisher, from: u32, to: u32| {
            let mut bytes = Vec::new();
            for (ty, ts, body) in &tags {
                if *ty == 9 && (from..to).contains(ts) {
                    w.write(6, *ts, MSG_VIDEO, 1, body, &mut bytes)
                        .expect("write");
                }
            }
            let (mut packets, mut notices) = (Vec::new(), Vec::new());
            p.receive(1 << 40, &bytes, &mut |e| match e {
                RtmpEvent::Packet(pk) => packets.push(pk),
                RtmpEvent::Video(n) => notices.push(n),
                _ => {}
            })
            .expect("media");
            (packets, notices)
        };
        // The first second, nobody watching: reported, passed through (display order
        // differs from decode order in the RTP timestamps).
        let (pass, notices) = phase(&mut p, 0, 1000);
        assert_eq!(notices, [VideoNotice::BFrames]);
        assert!(p.has_b_frames());
        let ts: Vec<u64> = pass.iter().filter(|k| k.marker).map(|k| k.rtp_ts).collect();
        assert!(
            ts.windows(2).any(|w| w[1] < w[0]),
            "passthrough keeps the reordering"
        );
        // A viewer: transcoded from the next frame on.
        p.set_viewers(true);
        let (coded, notices) = phase(&mut p, 1000, 2000);
        assert_eq!(notices, [VideoNotice::TranscodeStarted]);
        assert!(p.transcode_stats().is_some());
        assert!(h264::is_keyframe(&coded[0].payload), "starts on a keyframe");
        let sps = h264::sps_profile_level_id(&coded[0].payload).expect("SPS in front");
        assert_eq!(sps[0], 66, "Baseline");
        let ts: Vec<u64> = coded
            .iter()
            .filter(|k| k.marker)
            .map(|k| k.rtp_ts)
            .collect();
        assert!(ts.len() >= 25, "{} frames out of 30", ts.len());
        assert!(
            ts.windows(2).all(|w| w[1] > w[0]),
            "no reordering left: {ts:?}"
        );
        // The viewer left: back to passthrough, from the source keyframe at 2 s.
        p.set_viewers(false);
        let (back, notices) = phase(&mut p, 2000, 3000);
        assert!(
            matches!(&notices[..], [VideoNotice::TranscodeStopped(s)] if s.frames_out >= 25),
            "{notices:?}"
        );
        assert!(p.transcode_stats().is_none());
        assert!(h264::is_keyframe(&back[0].payload));
        let all: Vec<&IngestPacket> = pass.iter().chain(&coded).chain(&back).collect();
        assert!(
            all.windows(2).all(|w| w[1].seq == w[0].seq + 1),
            "dense numbering"
        );
    }
}

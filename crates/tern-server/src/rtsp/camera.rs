//! One RTSP session with a camera: DESCRIBE, SETUP of its video (H264, else H265) and audio
//! (AAC, else PCMU, PCMA or Opus) streams, PLAY, then its frames to the engine as one
//! publisher (its slot from `feed::attach_source`, its events through a [`FrameSink`]),
//! until the camera fails, goes silent, the source goes idle or the server stops:
//! H264 and AAC through [`AvPipeline`] (as RTMP's), H265 passed through
//! ([`AvPipeline::h265_frame`], as SRT's), G.711 transcoded to Opus ([`tern_rtc::g711`]) and
//! handed to the pipeline as Opus, Opus passed through the pipeline as it comes (retina's
//! Opus depacketizer is tern's patch: `vendor/retina/PATCHES.md`).
//!
//! Every step with the camera has a deadline ([`STEP`]); a playing camera that sends no
//! frame for [`SILENCE`] is taken as gone. Whatever the camera answers, the worst outcome
//! is a failed session ([`End::Failed`]) that the pull retries: `retina` returns errors for
//! what it cannot parse, and a frame the pipeline refuses is dropped and counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use retina::client::{
    Credentials, PlayOptions, Session, SessionOptions, SetupOptions, TcpTransportOptions,
    Transport, UdpTransportOptions,
};
use retina::codec::{CodecItem, FrameFormat, ParametersRef};
use tern_proto::codec::VideoCodec;
use tern_rtc::av::{AvEvent, AvPipeline, TranscodeMode};
use tern_rtc::g711::{G711ToOpus, Law};
use tracing::{debug, info};

use super::entry::{Idle, Job};
use super::status::{Failure, SourceState};
use crate::config::{AppConfig, SourceTransport, TranscodeSetting};
use crate::feed::{Feed, FrameSink, MEDIA_STALL, PublisherSlot, attach_source};
use crate::media::{NtpClock, Source};
use crate::session::Core;

/// Deadline of each step with the camera (TCP connect, TLS handshake for `rtsps://` and
/// DESCRIBE; each SETUP; PLAY).
const STEP: Duration = Duration::from_secs(5);
/// A playing camera that sends no frame for this long is taken as gone.
const SILENCE: Duration = Duration::from_secs(5);
/// How often the session looks at its flags (stop, idle, kicked) without frames.
const TICK: Duration = Duration::from_millis(200);

/// How a session ended.
pub(super) enum End {
    /// The server stops.
    Stop,
    /// The source is idle (on demand, no viewer for the grace).
    Idle,
    /// The camera failed; retry after the backoff.
    Failed {
        /// Media flowed in this session (the backoff starts over).
        went_live: bool,
        /// Why, in a word.
        failure: Failure,
        /// Why, for the log and the snapshot (no credentials).
        message: String,
    },
}

fn failed(failure: Failure, message: impl Into<String>) -> End {
    End::Failed {
        went_live: false,
        failure,
        message: message.into(),
    }
}

/// A `retina` error as a failure: its first line (the rest is connection context).
fn camera_error(e: &retina::Error) -> End {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or("").to_string();
    let failure = match e.status_code() {
        Some(401) => Failure::Auth,
        Some(_) => Failure::Camera,
        None if first.starts_with("Unable to connect") => Failure::Unreachable,
        None => Failure::Camera,
    };
    failed(failure, first)
}

/// The URL without its credentials, and the credentials (percent-decoded).
fn split_credentials(raw: &str) -> Result<(url::Url, Option<Credentials>), String> {
    let mut url = url::Url::parse(raw).map_err(|e| format!("bad URL: {e}"))?;
    let decode = |s: &str| {
        percent_decode(s).ok_or_else(|| "bad percent-encoding in the credentials".to_string())
    };
    let creds = match (url.username(), url.password()) {
        ("", None) => None,
        (u, p) => Some(Credentials {
            username: decode(u)?,
            password: decode(p.unwrap_or(""))?,
        }),
    };
    let _ = url.set_username("");
    let _ = url.set_password(None);
    Ok((url, creds))
}

/// `%XX` sequences decoded (the URL crate leaves user info encoded).
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Takes the stream's publisher slot in the engine (a camera is the server's own source:
/// no grant), with the app's renditions as its lower layers when its video is H264 (they
/// are made from H264 only). `keyframe` gets the layers viewers ask a keyframe of: the
/// renditions' encoders can make one, the camera cannot.
async fn add_publisher(
    core: &Arc<Core>,
    index: usize,
    codec: VideoCodec,
    app: Option<&AppConfig>,
    keyframe: Arc<AtomicU8>,
) -> Result<PublisherSlot, String> {
    let rids = match (codec, app) {
        (VideoCodec::H264, Some(a)) => a.layer_rids(),
        _ => Vec::new(),
    };
    let feed = Feed::Frames {
        source: Source::Rtsp,
        codec,
        rids,
        keyframe,
    };
    attach_source(&core.engine, index, feed)
        .await
        .map_err(|e| e.to_string())
}

/// Runs `f` with the step deadline; a timeout is an unreachable camera.
async fn step<T>(
    what: &str,
    f: impl std::future::Future<Output = Result<T, retina::Error>>,
) -> Result<T, End> {
    match tokio::time::timeout(STEP, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(camera_error(&e)),
        Err(_) => Err(failed(
            Failure::Unreachable,
            format!("no answer to {what} within {STEP:?}"),
        )),
    }
}

/// One session; `t0` is when the wait for media began (for the first-frame figure). Its
/// heap is booked in the `rtsp_ingest` pool (the pull thread runs its session alone, on a
/// runtime of its own).
pub(super) async fn session(job: &Job, idle: &mut Idle, t0: Instant) -> End {
    let e = &job.entry;
    let core = &job.core;
    let sink = FrameSink::new(&core.engine, &core.tap, &core.pools.rtsp);
    let Some(info) = core.streams.get(&e.key) else {
        return failed(Failure::Camera, "the stream is not in the directory");
    };
    let (url, creds) = match split_credentials(&e.cfg.url) {
        Ok(x) => x,
        Err(m) => return failed(Failure::Camera, m),
    };
    e.status.connects.fetch_add(1, Ordering::Relaxed);
    let mut opts = SessionOptions::default()
        .creds(creds)
        .user_agent(format!("tern/{}", env!("CARGO_PKG_VERSION")));
    if let Some(tls) = &e.tls {
        opts = opts.tls_config(tls.clone());
    }
    let mut described = match step("DESCRIBE", Session::describe(url, opts)).await {
        Ok(s) => s,
        Err(end) => return end,
    };
    let streams = described.streams();
    let find = |media: &str, name: &str| {
        streams
            .iter()
            .position(|s| s.media() == media && s.encoding_name() == name)
    };
    let video = find("video", "h264")
        .map(|i| (i, VideoCodec::H264))
        .or_else(|| find("video", "h265").map(|i| (i, VideoCodec::H265)));
    let audio = find("audio", "mpeg4-generic")
        .map(|i| (i, AudioCodec::Aac))
        .or_else(|| find("audio", "pcmu").map(|i| (i, AudioCodec::G711(Law::Mu))))
        .or_else(|| find("audio", "pcma").map(|i| (i, AudioCodec::G711(Law::A))))
        .or_else(|| find("audio", "opus").map(|i| (i, AudioCodec::Opus)));
    let offered: Vec<String> = streams
        .iter()
        .map(|s| format!("{}/{}", s.media(), s.encoding_name()))
        .collect();
    let Some(video) = video else {
        return failed(
            Failure::Unsupported,
            format!("no H264 or H265 video among the camera's streams {offered:?}"),
        );
    };
    let transport = match e.cfg.transport {
        SourceTransport::Tcp => Transport::Tcp(TcpTransportOptions::default()),
        SourceTransport::Udp => Transport::Udp(UdpTransportOptions::default()),
    };
    let (video, codec) = video;
    for i in std::iter::once(video).chain(audio.map(|a| a.0)) {
        // H264's parameter sets are put in front of keyframes by the pipeline; H265 is
        // passed through as it comes, so they come inline, before each keyframe.
        let format = match codec {
            VideoCodec::H264 => FrameFormat::MP4,
            _ => FrameFormat::default(),
        };
        let o = SetupOptions::default()
            .transport(transport.clone())
            .frame_format(format);
        if let Err(end) = step("SETUP", described.setup(i, o)).await {
            return end;
        }
    }
    let playing = match step("PLAY", described.play(PlayOptions::default())).await {
        Ok(p) => p,
        Err(end) => return end,
    };
    let mut demuxed = match playing.demuxed() {
        Ok(d) => d,
        Err(err) => return camera_error(&err),
    };
    let cfg = core.config();
    let app = cfg.app(e.key.split_once('/').map_or("", |(a, _)| a));
    let keyframe = Arc::new(AtomicU8::new(0));
    let slot = match add_publisher(core, info.index, codec, app, keyframe.clone()).await {
        Ok(s) => s,
        Err(m) => return failed(Failure::Camera, m),
    };
    info!(
        "rtsp {}: playing {} ({offered:?})",
        e.key,
        e.cfg.shown_url()
    );
    let mut media = Media::new(core, job, &slot, codec, audio.map(|a| a.1), sink);
    if let Some(a) = app.filter(|_| codec == VideoCodec::H264) {
        crate::feed::start_renditions(&core.engine, &mut media.av, slot.id(), a, &e.key);
    }
    drop(cfg);
    let mut last_frame = Instant::now();
    loop {
        let now = Instant::now();
        if job.stopping() {
            return End::Stop;
        }
        if idle.over(job, now) {
            return End::Idle;
        }
        if slot.closed() {
            return media.end(Failure::Camera, "publisher removed by the server".into());
        }
        if now.duration_since(last_frame) >= SILENCE {
            return media.end(Failure::Silent, format!("no frame for {SILENCE:?}"));
        }
        media.tick(now, t0);
        // Keyframes asked of the renditions (layers 1 and up; the camera places its own).
        let wanted = keyframe.swap(0, Ordering::Relaxed);
        for layer in (1..8u8).filter(|l| wanted & 1 << l != 0) {
            media.av.request_layer_keyframe(layer);
        }
        let item = match tokio::time::timeout(TICK, demuxed.next()).await {
            Err(_) => continue,
            Ok(None) => return media.end(Failure::Camera, "the camera ended the session".into()),
            Ok(Some(Err(err))) => {
                let End::Failed {
                    failure, message, ..
                } = camera_error(&err)
                else {
                    return End::Stop;
                };
                return media.end(failure, message);
            }
            Ok(Some(Ok(item))) => item,
        };
        match item {
            CodecItem::VideoFrame(f) => {
                last_frame = Instant::now();
                let wants = codec == VideoCodec::H264
                    && (f.has_new_parameters() || !media.av.has_video_config());
                let params = match wants {
                    true => match demuxed
                        .streams()
                        .get(f.stream_id())
                        .and_then(|s| s.parameters())
                    {
                        Some(ParametersRef::Video(v)) => Some(v.extra_data().to_vec()),
                        _ => None,
                    },
                    false => None,
                };
                media.video(&f, params.as_deref());
            }
            CodecItem::AudioFrame(f) => {
                last_frame = Instant::now();
                if media.audio_config.is_none() {
                    let config = match demuxed
                        .streams()
                        .get(f.stream_id())
                        .and_then(|s| s.parameters())
                    {
                        Some(ParametersRef::Audio(a)) => Some(a.extra_data().to_vec()),
                        _ => None,
                    };
                    media.audio_config(config.as_deref());
                }
                media.audio(&f);
            }
            _ => {}
        }
        if let Err(m) = media.flush() {
            return media.end(Failure::Camera, m);
        }
    }
}

/// The session's media: the pipeline, its sink, the counters.
struct Media<'a> {
    core: &'a Arc<Core>,
    job: &'a Job,
    slot: &'a PublisherSlot,
    av: AvPipeline,
    clock: NtpClock,
    /// Where the pipeline's events go; it measures the session's heap on this thread
    /// into the `rtsp_ingest` pool.
    sink: FrameSink,
    events: Vec<AvEvent>,
    /// The audio's codec, once its configuration was taken (`None` before).
    audio_config: Option<AudioCodec>,
    live: bool,
    codec: VideoCodec,
    audio: Option<AudioCodec>,
    g711: Option<G711ToOpus>,
}

/// The audio codecs taken from cameras.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AudioCodec {
    /// AAC (RFC 3640 `mpeg4-generic`), transcoded to Opus by the pipeline.
    Aac,
    /// G.711, transcoded to Opus here.
    G711(Law),
    /// Opus (RFC 7587), passed through.
    Opus,
}

impl AudioCodec {
    fn name(self) -> &'static str {
        match self {
            AudioCodec::Aac => "AAC (to Opus)",
            AudioCodec::G711(Law::Mu) => "PCMU (to Opus)",
            AudioCodec::G711(Law::A) => "PCMA (to Opus)",
            AudioCodec::Opus => "Opus",
        }
    }
}

/// A retina timestamp in ms on the camera's clock.
fn ms(t: retina::Timestamp) -> i64 {
    t.elapsed() * 1000 / i64::from(t.clock_rate().get())
}

impl<'a> Media<'a> {
    fn new(
        core: &'a Arc<Core>,
        job: &'a Job,
        slot: &'a PublisherSlot,
        codec: VideoCodec,
        audio: Option<AudioCodec>,
        mut sink: FrameSink,
    ) -> Self {
        let mut av = AvPipeline::new(core.config().tunables.max_payload);
        let (app, _) = job.entry.key.split_once('/').unwrap_or_default();
        let mode = core
            .config()
            .app(app)
            .map_or(TranscodeSetting::Auto, |a| a.transcode);
        av.set_transcode(match mode {
            TranscodeSetting::Auto => TranscodeMode::Auto,
            TranscodeSetting::Never => TranscodeMode::Never,
        });
        sink.attach(slot.id(), &job.entry.key, mode);
        Media {
            core,
            job,
            slot,
            av,
            clock: NtpClock::now(),
            sink,
            events: Vec::new(),
            audio_config: None,
            live: false,
            codec,
            audio,
            g711: None,
        }
    }

    /// Once per loop: samples on while packaged (LL-HLS, recordings), the B-frame watch,
    /// and whether the stream went live (its first keyframe forwarded).
    fn tick(&mut self, now: Instant, t0: Instant) {
        self.sink.tick(&mut self.av, now);
        if !self.live
            && self
                .core
                .engine
                .stats
                .stream(self.slot.id().stream)
                .is_some_and(|c| c.live.load(Ordering::Relaxed))
        {
            self.live = true;
            let e = &self.job.entry;
            let waited = t0.elapsed();
            e.status
                .first_frame_ms
                .store(waited.as_millis() as u64, Ordering::Relaxed);
            e.status.set_codecs(
                Some(self.codec.sdp_name().into()),
                self.audio.map(|a| a.name().to_string()),
            );
            e.status
                .set(SourceState::Live, &self.core.engine.stats.snapshots);
            info!(
                "rtsp {}: live {waited:?} after the wake ({}, audio {:?})",
                e.key,
                self.codec.sdp_name(),
                self.audio.map(AudioCodec::name)
            );
        }
    }

    fn video(&mut self, f: &retina::codec::VideoFrame, params: Option<&[u8]>) {
        let s = &self.job.entry.status;
        if let Some(p) = params
            && let Err(err) = self.av.video_config(p)
        {
            debug!("rtsp {}: parameter sets refused: {err}", self.job.entry.key);
        }
        s.video_frames.fetch_add(1, Ordering::Relaxed);
        s.bytes.fetch_add(f.data().len() as u64, Ordering::Relaxed);
        let t = ms(f.timestamp());
        if self.codec == VideoCodec::H265 {
            return self.h265(f, t);
        }
        let ntp = self.clock.ntp(Instant::now());
        let events = &mut self.events;
        let res = self
            .av
            .video_frame(ntp, t, t, f.is_random_access_point(), f.data(), &mut |e| {
                events.push(e)
            });
        if let Err(err) = res {
            debug!("rtsp {}: frame dropped: {err}", self.job.entry.key);
        }
    }

    /// H265 passed through ([`AvPipeline::h265_frame`], as an SRT publisher's): RFC 7798
    /// payloads of the access unit (its parameter sets in front of keyframes, as the
    /// camera's depacketizer puts them), at 90 kHz.
    fn h265(&mut self, f: &retina::codec::VideoFrame, t: i64) {
        let ntp = self.clock.ntp(Instant::now());
        let events = &mut self.events;
        if let Err(err) = self
            .av
            .h265_frame(ntp, t, t, f.data(), &mut |e| events.push(e))
        {
            debug!("rtsp {}: frame dropped: {err}", self.job.entry.key);
        }
    }

    fn audio_config(&mut self, config: Option<&[u8]>) {
        self.audio_config = self.audio;
        if let Some(AudioCodec::G711(law)) = self.audio {
            match G711ToOpus::new(law) {
                Ok(t) => self.g711 = Some(t),
                Err(err) => info!("rtsp {}: no audio: {err}", self.job.entry.key),
            }
            return;
        }
        if self.audio == Some(AudioCodec::Opus) {
            return;
        }
        if let Some(c) = config
            && let Err(err) = self.av.audio_config(c)
        {
            info!(
                "rtsp {}: AAC config refused, no audio: {err}",
                self.job.entry.key
            );
        }
    }

    fn audio(&mut self, f: &retina::codec::AudioFrame) {
        let s = &self.job.entry.status;
        s.audio_frames.fetch_add(1, Ordering::Relaxed);
        s.bytes.fetch_add(f.data().len() as u64, Ordering::Relaxed);
        let ntp = self.clock.ntp(Instant::now());
        let events = &mut self.events;
        let t = ms(f.timestamp());
        if let Some(g) = self.g711.as_mut() {
            let mut opus: Vec<(Vec<u8>, u64)> = Vec::new();
            let res = g.push(f.data(), t.max(0) as u64, &mut |p, ts| {
                opus.push((p.to_vec(), ts));
            });
            if let Err(err) = res {
                debug!("rtsp {}: audio frame dropped: {err}", self.job.entry.key);
            }
            for (p, ts) in opus {
                let ms = (ts / 48) as i64;
                self.av
                    .opus_frame(ntp, ms, 960, &p, &mut |e| events.push(e));
            }
            return;
        }
        if self.audio == Some(AudioCodec::Opus) {
            return self
                .av
                .opus_frame(ntp, t, f.frame_length().get(), f.data(), &mut |e| {
                    events.push(e)
                });
        }
        let res = self
            .av
            .audio_frame(ntp, t, f.data(), &mut |e| events.push(e));
        if let Err(err) = res {
            debug!("rtsp {}: audio frame dropped: {err}", self.job.entry.key);
        }
    }

    /// Hands the frame's events to the sink: packets to the engine, samples to the
    /// packagers.
    fn flush(&mut self) -> Result<(), String> {
        for e in self.events.drain(..) {
            self.sink.handle(&self.av, e);
        }
        self.sink
            .flush()
            .map_err(|e| format!("{e} for {MEDIA_STALL:?}"))
    }

    /// The session failed after PLAY.
    fn end(&self, failure: Failure, message: String) -> End {
        End::Failed {
            went_live: self.live,
            failure,
            message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_leave_the_url() {
        let (url, creds) = split_credentials("rtsp://adm%40n:p%3Ass@cam:8554/a/b").expect("url");
        assert_eq!(url.as_str(), "rtsp://cam:8554/a/b");
        let c = creds.expect("credentials");
        assert_eq!(
            (c.username.as_str(), c.password.as_str()),
            ("adm@n", "p:ss")
        );
        let (url, creds) = split_credentials("rtsp://cam/x").expect("url");
        assert_eq!((url.as_str(), creds), ("rtsp://cam/x", None));
        assert!(split_credentials("rtsp://u:%zz@cam/x").is_err());
    }
}

//! One SRT publisher's thread (`SrtSession`): the session layer's answer, the publisher
//! attached (`Publish::attach` in [`crate::feed`]), then MPEG-TS from the listener through
//! [`tern_rtc::ts_publisher::TsPublisher`] into a [`FrameSink`], as an RTMP connection's
//! thread does with FLV: packets to the engine (same bounded queue, same stall rule),
//! samples to LL-HLS and recordings. The slot is taken as H264 before any TS comes; an H265 video stream (passed through) is announced to the
//! engine ahead of its first packet, and viewers answered in another codec are ended so
//! they rejoin in H265, as for a WHIP publisher in a new codec. The app's renditions start
//! with the stream ([`crate::feed::start_renditions`], as for RTMP) and stop if its video
//! turns out to be H265.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use tern_proto::codec::VideoCodec;
use tern_proto::srt_stream_id::StreamId;
use tern_rtc::av::TranscodeMode;
use tern_rtc::ts_publisher::TsPublisher;
use tracing::{info, warn};

use super::link::{Control, Inbound, SrtCounters, reject_code};
use super::transport::{ConnId, SrtStats};
use crate::config::TranscodeSetting;
use crate::feed::{Feed, FrameSink, MEDIA_STALL, PublisherSlot};
use crate::media::{NtpClock, Source};
use crate::session::{Core, Credentials, Protocol, PublishAsk, Refusal};
/// How often the thread wakes without data (kicks, the B-frame watch).
const TICK: Duration = Duration::from_millis(200);
/// How often the publisher snapshot's SRT figures are refreshed.
const SNAPSHOT_EVERY: Duration = Duration::from_secs(2);

/// What the listener hands a publisher's thread.
pub(super) struct Job {
    pub conn: ConnId,
    pub peer: SocketAddr,
    pub id: StreamId,
    pub key_len: Option<u16>,
    pub core: Arc<Core>,
    pub max_payload: usize,
    pub inbound: Receiver<Inbound>,
    pub control: Sender<Control>,
    pub stats: Arc<Mutex<SrtStats>>,
    pub counters: Arc<SrtCounters>,
}

impl Job {
    /// Has the listener accept the caller with its app's passphrase and waits for it to
    /// connect; false (logged, naming `what`) when it did not.
    pub(super) fn accept(&self, what: &str) -> bool {
        let peer = self.peer;
        let pass = self
            .core
            .config()
            .app(&self.id.app)
            .and_then(|a| a.srt_passphrase.clone());
        let _ = self.control.send(Control::Accept(self.conn, pass));
        // The listener answers the caller, then says whether it connected.
        match self
            .inbound
            .recv_timeout(super::transport::HANDSHAKE_TIMEOUT)
        {
            Ok(Inbound::Open) => true,
            Ok(Inbound::Closed(why)) => {
                info!("srt {peer}: {what} not started: {why}");
                false
            }
            _ => {
                warn!("srt {peer}: {what} not started: no answer from the listener");
                false
            }
        }
    }
}

/// The publisher's slot, counted in `tern_srt_publishers` while it lives; dropping it ends
/// the publisher (the slot's own `Drop`), whatever the way out.
struct Slot(PublisherSlot, Arc<SrtCounters>);

impl Slot {
    fn new(slot: PublisherSlot, counters: &Arc<SrtCounters>) -> Slot {
        counters.publishers.fetch_add(1, Ordering::Relaxed);
        Slot(slot, counters.clone())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.1.publishers.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The thread's body.
pub(super) fn run(job: Job) {
    let (peer, key) = (job.peer, job.id.key());
    let keyframe = Arc::new(AtomicU8::new(0));
    let slot = match publish(&job, keyframe.clone()) {
        Ok(slot) => Slot::new(slot, &job.counters),
        Err(refusal) => {
            let code = reject_code(&refusal);
            warn!(
                "srt {peer}: refused ({} {}): {refusal}",
                code.libsrt(),
                code.name()
            );
            let _ = job.control.send(Control::Reject(job.conn, code));
            return;
        }
    };
    if !job.accept(&key) {
        return;
    }
    let enc = match job.key_len {
        Some(n) => format!("AES-{}", n * 8),
        None => "no encryption".into(),
    };
    info!("srt {peer}: publishing {key} ({enc})");
    let why = stream(&job, &slot, &keyframe);
    let s = job.stats.lock().map(|s| *s).unwrap_or_default();
    let c = &job.counters;
    c.lost.fetch_add(s.lost, Ordering::Relaxed);
    c.retransmitted
        .fetch_add(s.retransmitted, Ordering::Relaxed);
    c.dropped.fetch_add(s.dropped, Ordering::Relaxed);
    info!(
        "srt {peer}: {key} ended: {why}; {} packets, {} lost, {} retransmitted, {} recovered, {} dropped, RTT {:.1} ms",
        s.packets, s.lost, s.retransmitted, s.recovered, s.dropped, s.rtt_ms
    );
    if !slot.0.closed() {
        let _ = job.control.send(Control::Close(job.conn));
    }
    drop(slot);
}

/// The figures as the publisher snapshot shows them.
fn snapshot_json(s: &SrtStats, key_len: Option<u16>) -> serde_json::Value {
    serde_json::json!({
        "rtt_ms": (s.rtt_ms * 10.0).round() / 10.0,
        "latency_ms": s.latency_ms,
        "packets": s.packets,
        "bytes": s.bytes,
        "packets_lost": s.lost,
        "packets_retransmitted": s.retransmitted,
        "packets_recovered": s.recovered,
        "packets_dropped": s.dropped,
        "packets_undecrypted": s.undecrypted,
        "key_length": key_len,
    })
}

/// Streams until the caller leaves or the engine ends the publisher; the reason.
fn stream(job: &Job, slot: &Slot, keyframe: &AtomicU8) -> &'static str {
    let core = &job.core;
    let clock = NtpClock::now();
    let mut ts = TsPublisher::new(job.max_payload);
    let cfg = core.config();
    let app = cfg.app(&job.id.app);
    let mode = app.map_or(TranscodeSetting::Auto, |a| a.transcode);
    ts.media().set_transcode(match mode {
        TranscodeSetting::Auto => TranscodeMode::Auto,
        TranscodeSetting::Never => TranscodeMode::Never,
    });
    let mut sink = FrameSink::new(&core.engine, &core.tap, &core.pools.srt);
    sink.attach(slot.0.id(), &job.id.key(), mode);
    let id = slot.0.id();
    if let Some(a) = app {
        crate::feed::start_renditions(&core.engine, ts.media(), id, a, &job.id.key());
    }
    let mut last_snapshot = Instant::now();
    let mut events = Vec::new();
    // The codec the slot was taken with ([`publish`]).
    let mut announced = VideoCodec::H264;
    loop {
        if slot.0.closed() {
            let _ = job.control.send(Control::Close(job.conn));
            return "publisher removed by the server";
        }
        let now = Instant::now();
        sink.tick(ts.media(), now);
        let wanted = keyframe.swap(0, Ordering::Relaxed);
        for layer in (0..8u8).filter(|l| wanted & 1 << l != 0) {
            ts.media().request_layer_keyframe(layer);
        }
        if now.duration_since(last_snapshot) >= SNAPSHOT_EVERY {
            last_snapshot = now;
            if let Ok(s) = job.stats.lock() {
                let v = snapshot_json(&s, job.key_len);
                core.engine.stats.snapshots.publisher_srt(id.serial, v);
            }
        }
        let data = match job.inbound.recv_timeout(TICK) {
            Ok(Inbound::Data(d)) => d,
            Ok(Inbound::Open) => continue,
            Ok(Inbound::Closed(why)) => return why,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return "listener stopped",
        };
        // Whatever else is queued, in the same batch (a close after it ends the loop).
        let mut batch = vec![data];
        let mut end = None;
        while let Ok(m) = job.inbound.try_recv() {
            match m {
                Inbound::Data(d) => batch.push(d),
                Inbound::Open => {}
                Inbound::Closed(why) => {
                    end = Some(why);
                    break;
                }
            }
        }
        // Measured from here: the messages were allocated by the listener thread, and are
        // freed (after the mark) outside the measure.
        sink.resume();
        let ntp = clock.ntp(Instant::now());
        for d in &batch {
            ts.receive(ntp, d, &mut |e| events.push(e));
        }
        for e in events.drain(..) {
            sink.handle(ts.media(), e);
        }
        if let Some(e) = ts.take_error() {
            warn!("srt {}: {}: frame dropped: {e}", job.peer, job.id.key());
        }
        if let Some(codec) = ts.video_codec()
            && codec != announced
        {
            // The slot was taken as H264 before any TS came; the first video PES says H265:
            // the engine answers viewers in it from now on (sent ahead of its packets).
            announced = codec;
            let was = core.engine.stats.video(id.stream).codec;
            if let Err(e) = sink.set_codec(codec) {
                warn!("srt {}: {e} for {MEDIA_STALL:?}", job.peer);
                return "the media engine did not take its codec";
            }
            info!("srt {}: {}: video is {codec}", job.peer, job.id.key());
            if codec != VideoCodec::H264 {
                crate::feed::stop_renditions(&core.engine, ts.media(), id, &job.id.key());
            }
            if was != codec {
                core.end_viewers_of_other_codec(&job.id.key(), was, codec);
            }
        }
        if let Err(e) = sink.flush() {
            warn!("srt {}: {e} for {MEDIA_STALL:?}", job.peer);
            return "the media engine did not take its packets";
        }
        drop(batch);
        if let Some(why) = end {
            return why;
        }
    }
}

/// Asks the session layer for the stream (name, token, JWT, admission) and attaches the
/// publisher (cluster claim, the stream's slot).
fn publish(job: &Job, keyframe: Arc<AtomicU8>) -> Result<PublisherSlot, Refusal> {
    let core = &job.core;
    let id = &job.id;
    // `token=` or `s=` for admission (JWT); the app token is that, or MediaMTX's password.
    let app_token = id.token.clone().or_else(|| id.pass.clone());
    let ask = PublishAsk {
        app: id.app.clone(),
        stream: id.stream.clone(),
        protocol: Protocol::Srt,
        client: job.peer,
        credentials: Credentials {
            app_token,
            token: id.token.clone(),
            query: id.query.clone(),
        },
    };
    let rt = core
        .runtime()
        .ok_or(Refusal::Unavailable("admission is not running"))?;
    let publish = rt.block_on(core.begin_publish(ask))?;
    // The app's renditions are the stream's lower layers (started with the stream).
    let rids = core
        .config()
        .app(&id.app)
        .map_or_else(Vec::new, |a| a.layer_rids());
    let feed = Feed::Frames {
        source: Source::Srt,
        codec: VideoCodec::H264,
        rids,
        keyframe,
    };
    publish.attach_blocking(core, feed)
}

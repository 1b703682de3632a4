//! Renditions of a frame publisher (RTMP, SRT, RTSP cameras: `[[app]] renditions`), started the same way
//! whatever its container: its [`AvPipeline`] makes them, their packets go to the engine
//! as the publisher's lower layers, their news to the log.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tern_rtc::av::AvPipeline;
use tern_rtc::renditions::{RenditionEvent, RenditionSink, RenditionStats};
use tracing::{info, warn};

use super::sink::MEDIA_STALL;
use crate::config::AppConfig;
use crate::media::{EngineHandle, FrameCommand, PublisherId};

/// Starts `app`'s renditions (if it has any) on publisher `id`'s pipeline, which just took
/// its slot for stream `key` (its layers were announced with [`AppConfig::layer_rids`]).
/// An encoder that cannot start leaves the source layer alone, and the stream with one
/// layer.
pub fn start_renditions(
    engine: &EngineHandle,
    av: &mut AvPipeline,
    id: PublisherId,
    app: &AppConfig,
    key: &str,
) {
    let specs = app.rendition_specs();
    if specs.is_empty() {
        return;
    }
    let sink = rendition_sink(engine.clone(), id, key.to_string());
    if let Err(e) = av.set_renditions(&specs, sink) {
        warn!("{key}: no renditions: {e}; the source layer goes on alone");
        // Before its first packet: the stream goes live with one layer.
        engine.stats.set_rids(id.stream, &[]);
    }
}

/// Stops publisher `id`'s renditions (its video turned out not to be H264, which they
/// decode): the stream goes on with its source layer alone.
pub fn stop_renditions(engine: &EngineHandle, av: &mut AvPipeline, id: PublisherId, key: &str) {
    if av.rendition_stats().is_empty() {
        return;
    }
    let _ = av.set_renditions(&[], Arc::new(|_| {}));
    engine.stats.set_rids(id.stream, &[]);
    info!("{key}: renditions stopped: they are made from H264 video only");
}

/// Where a frame publisher's renditions report: their packets go to the engine as the
/// connection's do (from the renditions' threads, waiting up to [`MEDIA_STALL`] for room),
/// their news to the log: the sizes at the start, the first time an encoder falls behind
/// (once per stream), a failure, and what each did when the publisher leaves.
pub(super) fn rendition_sink(engine: EngineHandle, id: PublisherId, key: String) -> RenditionSink {
    let (behind, refused) = (AtomicBool::new(false), AtomicBool::new(false));
    Arc::new(move |e| match e {
        RenditionEvent::Packets(packets) => {
            let sent = engine.send_frames(FrameCommand::Media { id, packets }, MEDIA_STALL);
            if let Err(e) = sent
                && !refused.swap(true, Ordering::Relaxed)
            {
                warn!("{key}: rendition packets dropped: {e}");
            }
        }
        RenditionEvent::Started { source, sizes } => {
            let list: Vec<String> = sizes
                .iter()
                .map(|s| {
                    let (rid, w, h, kbps) = (&s.rid, s.width, s.height, s.bitrate_kbps);
                    format!("{rid} (layer {}) {w}x{h} at {kbps} kbit/s", s.layer)
                })
                .collect();
            info!(
                "{key}: renditions of the {}x{} source (layer h): {}",
                source.0,
                source.1,
                list.join(", ")
            );
        }
        // Once per stream.
        RenditionEvent::Behind { layer, rid } if !behind.swap(true, Ordering::Relaxed) => {
            warn!(
                "{key}: rendition {rid} (layer {layer}) cannot keep up: pictures are dropped up to its next IDR (counts in the log when the publisher leaves)"
            );
        }
        RenditionEvent::Failed { layer, rid, error } => {
            warn!(
                "{key}: rendition {rid} (layer {layer}) stopped: {error}; the other layers go on"
            );
        }
        RenditionEvent::Stopped(stats) => {
            let list: Vec<String> = stats.iter().map(rendition_summary).collect();
            info!("{key}: renditions stopped: {}", list.join("; "));
        }
        _ => {}
    })
}

/// One rendition's figures for the log.
fn rendition_summary(s: &RenditionStats) -> String {
    let per_frame = |t: Duration, n: u64| t.as_secs_f64() * 1e3 / n.max(1) as f64;
    format!(
        "{} {} frames in, {} out, {} dropped, {} kB, scale {:.2} ms and encode {:.2} ms a frame",
        s.rid,
        s.frames_in,
        s.frames_out,
        s.dropped,
        s.bytes / 1000,
        per_frame(s.scale_time, s.frames_in.saturating_sub(s.dropped)),
        per_frame(s.encode_time, s.frames_out),
    )
}

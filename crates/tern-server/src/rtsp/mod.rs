//! RTSP cameras (`[[app.source]]`): tern pulls an IP camera into one of an app's streams
//! while someone watches it (or always, `on_demand = false`), and plays it over WebRTC and
//! LL-HLS like any published stream.
//!
//! | file | what |
//! | --- | --- |
//! | `mod.rs` | [`Sources`]: one entry per source, the wake from a play request, the metrics |
//! | `entry.rs` | what a source's thread and sessions share: its entry, the thread's job, the idle rule |
//! | `status.rs` | a source's state (idle, connecting, live, retrying), last error, counters; its snapshot and events |
//! | `pull.rs` | one source's thread (`RtspPull`): connect, stream, back off and retry, stop when idle |
//! | `camera.rs` | one RTSP session with the camera: DESCRIBE/SETUP/PLAY with `retina`, its frames through [`tern_rtc::av::AvPipeline`] to the engine |
//! | `tls.rs` | an `rtsps://` source's TLS client configuration: the server's outbound roots, or any certificate with `tls_verify = false` |
//!
//! # The client: `retina`
//!
//! The RTSP client is the `retina` crate (Moonfire NVR's), as the issue proposed, kept on
//! this evidence: it is pure Rust (no FFI, so no `unsafe` and no C library's own threads
//! beside ours; GStreamer's or ffmpeg's RTSP clients would bring both), async on tokio (which
//! tern runs already), and does what cameras need and tern would otherwise write itself:
//! basic and digest authentication, TCP-interleaved and UDP transport, keepalives, the
//! camera quirks it has met in the field (live555's TCP bug, bad RTP timestamps), and the
//! depacketizers for H264 (with parameter sets that change mid-stream, reported per frame),
//! H265, AAC (RFC 3640) and G.711. It was tested against GStreamer's RTSP server in
//! `crates/tern/tests/e2e/rtsp.rs` (H264 + AAC, basic auth, a server killed and started
//! again). Its URL may not carry credentials: tern takes them out of the configured URL and
//! hands them over as `Credentials`, so the password is in no request line and no error.
//!
//! # RTSPS
//!
//! `rtsps://` is RTSP over TLS (RFC 7826 §4.2, port 322 by default), which retina did not
//! speak: tern's patch 4 (`vendor/retina/PATCHES.md`) runs its connection over
//! `tokio-rustls` with a `rustls::ClientConfig` the caller gives. The media comes
//! interleaved in the TLS connection (an `rtsps://` source with `transport = "udp"` is a
//! configuration error: RTP beside it on UDP would be in the clear). The certificate is
//! verified against the server's outbound roots (system roots and `server.ca_file`,
//! [`crate::outbound`]) for the URL's host, unless the source says `tls_verify = false`
//! (`tls.rs`). A failed handshake is a `camera error` whose message names the certificate
//! problem ("invalid peer certificate: UnknownIssuer").
//!
//! # Ingest
//!
//! Each RTSP session is one publisher in the engine (`feed::attach_source` with the source
//! `rtsp`), its frames made into RTP by the same [`tern_rtc::av::AvPipeline`] as RTMP's and
//! SRT's (H264 access units with their parameter sets in front of keyframes, AAC to Opus)
//! and handed on by the same [`crate::feed::FrameSink`], so LL-HLS and recordings take its
//! frames as they take RTMP's (a camera's H265 from the stream's ring). A session that ends (the camera gone, an
//! error) removes its publisher; the next one is a returning publisher on the same stream,
//! which ingest maps onto the stream's numbering: viewers stay connected, keep their SSRCs
//! and resume at the next keyframe. A camera cannot be asked for a keyframe: joins use the
//! keyframe cache.
//!
//! Sources come from the configuration, so the session layer's name, token and admission
//! steps do not apply to them; a publisher on a source's stream is refused
//! ([`crate::session::Refusal::Source`]).

mod camera;
mod entry;
mod pull;
mod status;
mod tls;

pub use status::{SourceState, SourceStatus};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tracing::{info, warn};

use crate::metrics::{Expose, Exposition};
use crate::outbound::Outbound;
use crate::session::{Core, SourcePulls};
use entry::{Entry, Run};

/// The configured sources and their threads.
pub struct Sources {
    core: Arc<Core>,
    entries: HashMap<String, Arc<Entry>>,
    stop: Arc<AtomicBool>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Sources {
    /// Every `[[app.source]]` of the configuration; the always-on ones start pulling now.
    /// Set as the session layer's [`Core::sources`] so that play requests wake the others,
    /// and registered with the server's `/metrics` ([`Core::exposed`]). `rtsps://` sources
    /// verify their cameras' certificates with `outbound`'s roots.
    pub fn start(core: Arc<Core>, outbound: &Outbound) -> Arc<Sources> {
        let mut entries = HashMap::new();
        for app in &core.config.apps {
            for s in &app.sources {
                let key = format!("{}/{}", app.name, s.stream);
                let e = Entry {
                    tls: tls::client_config(&key, s, outbound),
                    key: key.clone(),
                    cfg: s.clone(),
                    grace: std::time::Duration::from_secs(app.idle_grace_s),
                    status: SourceStatus::new(&key, s),
                    run: Mutex::new(Run::default()),
                };
                e.status.publish(&core.engine.stats.snapshots, None);
                entries.insert(key, Arc::new(e));
            }
        }
        let me = Arc::new(Sources {
            core: core.clone(),
            entries,
            stop: Arc::new(AtomicBool::new(false)),
            threads: Mutex::new(Vec::new()),
        });
        if !me.entries.is_empty() {
            info!("rtsp: {} camera source(s)", me.entries.len());
            let _ = core.sources.set(me.clone());
            let mut list: Vec<Arc<Entry>> = me.entries.values().cloned().collect();
            list.sort_by(|a, b| a.key.cmp(&b.key));
            core.exposed.add(Arc::new(SourceMetrics(list)));
        }
        for e in me.entries.values() {
            if !e.cfg.on_demand {
                me.wake(&e.key);
            }
        }
        me
    }

    /// Stops every pull and waits for the threads.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let threads = self
            .threads
            .lock()
            .map(|mut t| std::mem::take(&mut *t))
            .unwrap_or_default();
        for t in threads {
            let _ = t.join();
        }
    }

    /// The status of the source of `key`.
    pub fn status(&self, key: &str) -> Option<&SourceStatus> {
        self.entries.get(key).map(|e| &e.status)
    }
}

impl SourcePulls for Sources {
    fn wake(&self, key: &str) -> bool {
        let Some(e) = self.entries.get(key) else {
            return false;
        };
        let Ok(mut run) = e.run.lock() else {
            return true;
        };
        run.wakes += 1;
        if run.running || self.stop.load(Ordering::Relaxed) {
            return true;
        }
        run.running = true;
        let job = entry::Job {
            core: self.core.clone(),
            entry: e.clone(),
            stop: self.stop.clone(),
        };
        match std::thread::Builder::new()
            .name("RtspPull".into())
            .spawn(move || pull::run(job))
        {
            Ok(t) => {
                if let Ok(mut threads) = self.threads.lock() {
                    threads.retain(|t| !t.is_finished());
                    threads.push(t);
                }
            }
            Err(err) => {
                run.running = false;
                warn!("rtsp {key}: cannot start a thread: {err}");
            }
        }
        true
    }

    fn last_error(&self, key: &str) -> Option<String> {
        self.entries.get(key).and_then(|e| e.status.last_error())
    }
}

/// The sources' `tern_source_*` families, by key: registered with the server's `/metrics`
/// by [`Sources::start`] when there are sources.
struct SourceMetrics(Vec<Arc<Entry>>);

impl Expose for SourceMetrics {
    fn write_metrics(&self, o: &mut Exposition) {
        status::write_metrics(self.0.iter().map(|e| &e.status), o);
    }
}

impl Drop for Sources {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

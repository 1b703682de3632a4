//! What the forwards' hub (`mod.rs`) and a forward's thread (`link.rs`) share: a forward's
//! [`Entry`] and [`State`], and the [`OutletReader`] through which a reader (a forward, an SRT
//! reader) takes a stream's frames, over the [`Outlets`] the hub is.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crossbeam_channel::Receiver;
use serde_json::json;
use tern_rtc::outlet::{Container, OutFrame};

use crate::clock::unix_ms;
use crate::snapshot::EventKind;

/// What a reader asks of the streams' outlets (the hub, `Forwards`).
pub trait Outlets: Send + Sync {
    /// Takes reader `id` off stream `index`'s outlet.
    fn detach(&self, index: usize, id: u64);
    /// Asks stream `index`'s publisher for a keyframe.
    fn ask_keyframe(&self, index: usize);
    /// Whether stream `index`'s video can go out in `container`; why not.
    fn codec_ok(&self, index: usize, container: Container) -> Result<(), String>;
    /// An event about forward `entry`.
    fn event(&self, kind: EventKind, entry: &Entry, reason: Option<&'static str>);
}

/// What a forward is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Connecting and publishing.
    Connecting,
    /// Sending.
    Live,
    /// Waiting to connect again after a failure.
    Retrying,
    /// Its stream's media cannot go over its protocol (a codec); it waits for other media.
    Failed,
}

impl State {
    /// The name the API and metrics use.
    pub fn name(self) -> &'static str {
        match self {
            State::Connecting => "connecting",
            State::Live => "live",
            State::Retrying => "retrying",
            State::Failed => "failed",
        }
    }

    pub(super) const ALL: [State; 4] = [
        State::Connecting,
        State::Live,
        State::Retrying,
        State::Failed,
    ];
}

/// Who made a forward.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Origin {
    /// `[[app.forward]]` with this URL (before `%app`/`%stream`).
    Config(String),
    /// `POST /v1/streams/{app}/{stream}/forwards`.
    Api,
}

#[derive(Debug)]
pub(super) struct Status {
    pub(super) state: State,
    pub(super) since_ms: u64,
    pub(super) last_error: Option<String>,
}

/// One forward.
#[derive(Debug)]
pub struct Entry {
    /// Its id in the API.
    pub id: String,
    /// `app/stream`.
    pub key: String,
    /// The stream's engine index.
    pub index: usize,
    /// Where to (with its secrets): never shown.
    pub(super) url: String,
    /// The URL as shown.
    pub shown: String,
    pub(super) tls_verify: bool,
    pub(super) origin: Origin,
    pub(super) status: Mutex<Status>,
    /// Bytes written to the receiver.
    pub bytes: AtomicU64,
    /// Connections made again after a failure.
    pub reconnects: AtomicU64,
    /// Told to stop.
    pub(super) stop: AtomicBool,
    /// When its stream was last seen not live (none while live).
    pub(super) not_live: Mutex<Option<Instant>>,
    pub(super) thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Entry {
    fn status(&self) -> MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Its state now.
    pub fn state(&self) -> State {
        self.status().state
    }

    /// Enters `state` (its `since` moves when it changes); `error` becomes `last_error`.
    pub(super) fn set_state(&self, state: State, error: Option<String>) {
        let mut s = self.status();
        if s.state != state {
            s.since_ms = unix_ms();
        }
        s.state = state;
        if error.is_some() {
            s.last_error = error;
        }
    }

    /// The API's view of it.
    pub fn json(&self) -> serde_json::Value {
        let s = self.status();
        let (app, stream) = self.key.split_once('/').unwrap_or((&self.key, ""));
        json!({
            "id": self.id,
            "app": app,
            "stream": stream,
            "url": self.shown,
            "state": s.state.name(),
            "since": s.since_ms,
            "bytes": self.bytes.load(Ordering::Relaxed),
            "reconnects": self.reconnects.load(Ordering::Relaxed),
            "last_error": s.last_error,
            "origin": match self.origin { Origin::Config(_) => "config", Origin::Api => "api" },
        })
    }
}

/// One reader of a stream's outlet (a forward's thread, an SRT reader): its frames, in
/// order, from the configurations in force on; dropping it leaves the outlet (and the
/// outlet stops with its last reader).
pub struct OutletReader {
    /// The frames.
    pub rx: Receiver<Arc<OutFrame>>,
    pub(super) overflow: Arc<AtomicBool>,
    pub(super) id: u64,
    pub(super) index: usize,
    pub(super) hub: Arc<dyn Outlets>,
}

impl std::fmt::Debug for OutletReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutletReader")
            .field("stream", &self.index)
            .finish()
    }
}

impl OutletReader {
    /// Whether frames were missed (its queue was full) since the last call: the reader
    /// must start again at a keyframe.
    pub fn missed(&self) -> bool {
        self.overflow.swap(false, Ordering::Relaxed)
    }

    /// Asks the stream's publisher for a keyframe.
    pub fn ask_keyframe(&self) {
        self.hub.ask_keyframe(self.index);
    }

    /// Whether the stream's video can go out in `container`; why not.
    pub fn codec_ok(&self, container: Container) -> Result<(), String> {
        self.hub.codec_ok(self.index, container)
    }

    /// Tells of forward `entry` (an event).
    pub(super) fn event(&self, kind: EventKind, entry: &Entry, reason: Option<&'static str>) {
        self.hub.event(kind, entry, reason);
    }
}

impl Drop for OutletReader {
    fn drop(&mut self) {
        self.hub.detach(self.index, self.id);
    }
}

//! Lean, cached, immutable state snapshots and the events that carry them (Asterisk's
//! lesson): a snapshot is built only when its state changes, never on read; it is made of
//! segments so an unchanged part is shared, not copied; each segment's JSON and hash are
//! computed once, when it is built; an event is a cached snapshot plus a small blob.
//! Counters that change per packet are not in snapshots: readers take them live from the
//! engine's atomics.
//!
//! The media engine writes here only on state changes (a viewer joins, connects, leaves; a
//! stream gains or loses its publisher), under a short write lock; API reads clone `Arc`s
//! under a read lock and build nothing. Every segment build is counted
//! ([`Snapshots::builds`]), so tests and `/metrics` can prove there are no extra builds.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::clock::unix_ms;
use serde_json::json;
use tern_pool::PoolCounter;
use tokio::sync::broadcast;

/// Events kept for slow subscribers before they start losing the oldest.
const EVENT_BACKLOG: usize = 4096;

/// One immutable segment: its JSON text and hash, computed once.
#[derive(Debug)]
pub struct Segment {
    /// The segment as a JSON object.
    pub json: String,
    /// Hash of `json`.
    pub hash: u64,
}

impl Segment {
    fn build(v: serde_json::Value, builds: &AtomicU64) -> Arc<Segment> {
        builds.fetch_add(1, Ordering::Relaxed);
        let json = v.to_string();
        let mut h = DefaultHasher::new();
        json.hash(&mut h);
        Arc::new(Segment {
            json,
            hash: h.finish(),
        })
    }
}

/// A viewer: identity (built once) and connection (rebuilt on state changes).
#[derive(Debug, Clone)]
pub struct ViewerSnapshot {
    /// Viewer id (as in the API).
    pub id: u64,
    /// `app/stream`.
    pub stream: Arc<str>,
    /// Id, stream, signalling, creation time.
    pub identity: Arc<Segment>,
    /// State, remote address, connection time.
    pub connection: Arc<Segment>,
    /// Whether its video is paused (also `video_paused` in `connection`, from the first
    /// pause on).
    pub video_paused: bool,
}

impl ViewerSnapshot {
    /// The whole snapshot as JSON (segments are spliced, not re-serialized).
    pub fn json(&self) -> String {
        format!(
            "{{\"identity\":{},\"connection\":{}}}",
            self.identity.json, self.connection.json
        )
    }

    /// Hash of the snapshot (from its segments' hashes).
    pub fn hash(&self) -> u64 {
        self.identity.hash.rotate_left(1) ^ self.connection.hash
    }
}

/// A stream: its one segment (key, source, publisher state).
#[derive(Debug, Clone)]
pub struct StreamSnapshot {
    /// `app/stream`.
    pub key: Arc<str>,
    /// Key, source kind, live flag, publisher.
    pub state: Arc<Segment>,
}

/// A publisher (WHIP or RTMP): identity (built once) and state (rebuilt when it goes live).
#[derive(Debug, Clone)]
pub struct PublisherSnapshot {
    /// Publisher id (unique in the process).
    pub id: u64,
    /// `app/stream`.
    pub stream: Arc<str>,
    /// Id, stream, protocol, creation time.
    pub identity: Arc<Segment>,
    /// State (`connecting`, `live`) and when it went live.
    pub state: Arc<Segment>,
    /// What tern found in its video and does about it (`null` until there is something):
    /// `{"b_frames": true, "transcode": "auto", "transcoding": …}`.
    pub video: Arc<Segment>,
    /// An SRT publisher's transport figures (RTT, packets lost, retransmitted, recovered,
    /// dropped), refreshed every few seconds without an event; absent for other protocols.
    pub srt: Option<Arc<Segment>>,
}

impl PublisherSnapshot {
    /// The whole snapshot as JSON (segments are spliced, not re-serialized).
    pub fn json(&self) -> String {
        let srt = match &self.srt {
            Some(s) => format!(",\"srt\":{}", s.json),
            None => String::new(),
        };
        format!(
            "{{\"identity\":{},\"state\":{},\"video\":{}{srt}}}",
            self.identity.json, self.state.json, self.video.json
        )
    }
}

/// A TURN allocation: one segment (id, user, transport, client and relayed addresses),
/// built when it is created. Its traffic counters are not in it.
#[derive(Debug, Clone)]
pub struct AllocationSnapshot {
    /// Allocation id (unique in the process).
    pub id: u64,
    /// The segment.
    pub identity: Arc<Segment>,
}

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// A viewer session was created (offer answered).
    ViewerJoined,
    /// A viewer completed ICE and DTLS.
    ViewerConnected,
    /// A viewer left (DELETE, timeout, kicked).
    ViewerLeft,
    /// A viewer of a simulcast stream started on a layer or moved to another.
    ViewerLayer,
    /// A single-layer stream's viewer's video paused: its path's estimate is below the
    /// stream's video rate (`tunables.pause_video_below_estimate`); its audio goes on.
    ViewerVideoPaused,
    /// A paused viewer's video resumes (from the stream's next keyframe).
    ViewerVideoResumed,
    /// A stream went live or stopped being live.
    StreamChanged,
    /// A publisher made a stream on an undeclared name.
    StreamCreated,
    /// A publisher-made stream was removed (no publisher for its grace).
    StreamRemoved,
    /// A publisher session was created (offer answered, or RTMP publish accepted).
    PublisherJoined,
    /// A publisher's media started flowing.
    PublisherLive,
    /// A publisher left (DELETE, timeout, kicked, connection closed).
    PublisherLeft,
    /// Something in a publisher's media its viewers would suffer from (B-frames), or a
    /// change in what tern does about it (transcoding started, stopped, failed).
    PublisherWarning,
    /// A TURN allocation was made.
    AllocationCreated,
    /// A TURN allocation ended (expired, refreshed to 0, its TCP connection closed).
    AllocationClosed,
    /// A recording started (its first file is opened at the first keyframe).
    RecordingStarted,
    /// A recording finished a file (the segment webhook's object).
    RecordingSegment,
    /// A recording stopped: the API, the stream's end, or an error it names.
    RecordingStopped,
    /// A camera source changed state (idle, connecting, live, retrying).
    SourceChanged,
    /// A camera source's session failed (auth failed, unreachable, unsupported codec, …);
    /// it is retried.
    SourceError,
    /// A reload put a new configuration in force (`crate::reload`): the snapshot says what
    /// changed and which keys wait for a restart.
    ConfigReloaded,
    /// A reload was refused (the file or the change does not parse or check): the snapshot
    /// lists every problem; nothing changed.
    ConfigRejected,
    /// A forward is sending to its receiver (connected and publishing).
    ForwardStarted,
    /// A forward ended: deleted, its stream ended, its configuration removed.
    ForwardStopped,
    /// A forward's connection failed (it is retried), or its stream's codec cannot go
    /// over its protocol.
    ForwardFailed,
}

impl EventKind {
    /// The event's type name in the API (`viewer.joined`, ...).
    pub fn name(self) -> &'static str {
        match self {
            EventKind::ViewerJoined => "viewer.joined",
            EventKind::ViewerConnected => "viewer.connected",
            EventKind::ViewerLeft => "viewer.left",
            EventKind::ViewerLayer => "viewer.layer",
            EventKind::ViewerVideoPaused => "viewer.video_paused",
            EventKind::ViewerVideoResumed => "viewer.video_resumed",
            EventKind::StreamChanged => "stream.changed",
            EventKind::StreamCreated => "stream.created",
            EventKind::StreamRemoved => "stream.removed",
            EventKind::PublisherJoined => "publisher.joined",
            EventKind::PublisherLive => "publisher.live",
            EventKind::PublisherLeft => "publisher.left",
            EventKind::PublisherWarning => "publisher.warning",
            EventKind::AllocationCreated => "allocation.created",
            EventKind::AllocationClosed => "allocation.closed",
            EventKind::RecordingStarted => "recording.started",
            EventKind::RecordingSegment => "recording.segment",
            EventKind::RecordingStopped => "recording.stopped",
            EventKind::SourceChanged => "source.changed",
            EventKind::SourceError => "source.error",
            EventKind::ConfigReloaded => "config.reloaded",
            EventKind::ConfigRejected => "config.rejected",
            EventKind::ForwardStarted => "forward.started",
            EventKind::ForwardStopped => "forward.stopped",
            EventKind::ForwardFailed => "forward.failed",
        }
    }
}

/// An event: a cached snapshot plus a small blob (type, time, reason).
#[derive(Debug, Clone)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// The stream it concerns.
    pub stream: Arc<str>,
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The snapshot's JSON, shared with the cache.
    pub snapshot: SnapshotRef,
    /// Why, for `viewer.left`.
    pub reason: Option<&'static str>,
}

/// The snapshot an event carries.
#[derive(Debug, Clone)]
pub enum SnapshotRef {
    /// A viewer's.
    Viewer(ViewerSnapshot),
    /// A stream's.
    Stream(StreamSnapshot),
    /// A publisher's.
    Publisher(PublisherSnapshot),
    /// A TURN allocation's.
    Allocation(AllocationSnapshot),
    /// A recording's, or a reload's (built once per event: both are rare).
    Recording(Arc<str>),
    /// A camera source's.
    Source(Arc<Segment>),
}

impl Event {
    /// The event as one JSON line.
    pub fn json(&self) -> String {
        let snap = match &self.snapshot {
            SnapshotRef::Viewer(v) => v.json(),
            SnapshotRef::Stream(s) => s.state.json.clone(),
            SnapshotRef::Publisher(p) => p.json(),
            SnapshotRef::Allocation(a) => a.identity.json.clone(),
            SnapshotRef::Recording(r) => r.to_string(),
            SnapshotRef::Source(x) => x.json.clone(),
        };
        // A TURN allocation belongs to no stream.
        let stream = if self.stream.is_empty() {
            serde_json::Value::Null
        } else {
            json!(&*self.stream)
        };
        let reason = self
            .reason
            .map_or(String::new(), |r| format!(",\"reason\":\"{r}\""));
        format!(
            "{{\"type\":\"{}\",\"stream\":{},\"at_ms\":{}{reason},\"snapshot\":{snap}}}",
            self.kind.name(),
            stream,
            self.at_ms
        )
    }
}

/// The snapshot cache and the event bus.
#[derive(Debug)]
pub struct Snapshots {
    viewers: RwLock<HashMap<u64, ViewerSnapshot>>,
    streams: RwLock<HashMap<Arc<str>, StreamSnapshot>>,
    publishers: RwLock<HashMap<u64, PublisherSnapshot>>,
    allocations: RwLock<HashMap<u64, AllocationSnapshot>>,
    /// Camera sources by `app/stream`.
    sources: RwLock<HashMap<Arc<str>, Arc<Segment>>>,
    builds: AtomicU64,
    /// The `null` video segment every publisher starts with (one, shared, never rebuilt).
    no_video: Arc<Segment>,
    events: broadcast::Sender<Event>,
    /// The `snapshots` memory pool, and what is booked in it for the viewer cache:
    /// (items, used, allocated).
    pool: PoolCounter,
    booked: Mutex<(usize, usize, usize)>,
}

impl Default for Snapshots {
    fn default() -> Self {
        Snapshots {
            viewers: RwLock::default(),
            streams: RwLock::default(),
            publishers: RwLock::default(),
            allocations: RwLock::default(),
            sources: RwLock::default(),
            builds: AtomicU64::new(0),
            no_video: Segment::build(serde_json::Value::Null, &AtomicU64::new(0)),
            events: broadcast::channel(EVENT_BACKLOG).0,
            pool: PoolCounter::new("snapshots", std::mem::size_of::<(u64, ViewerSnapshot)>()),
            booked: Mutex::new((0, 0, 0)),
        }
    }
}

/// Heap bytes of a segment held through an `Arc` (two counters, the struct, its JSON).
fn segment_bytes(s: &Segment) -> usize {
    2 * std::mem::size_of::<usize>() + std::mem::size_of::<Segment>() + s.json.capacity()
}

/// After a change to the viewer cache (under its write lock): gives back the capacity a wave
/// of departed viewers left (to nothing when empty, to twice the length when under a quarter
/// full) and re-books the `snapshots` pool. O(viewers), on state changes only.
fn rebook(
    m: &mut HashMap<u64, ViewerSnapshot>,
    pool: &PoolCounter,
    booked: &Mutex<(usize, usize, usize)>,
) {
    tern_pool::shrink_map(m);
    let entry = std::mem::size_of::<(u64, ViewerSnapshot)>();
    let held: usize = m
        .values()
        .map(|v| {
            segment_bytes(&v.identity)
                + segment_bytes(&v.connection)
                + 2 * std::mem::size_of::<usize>()
                + v.stream.len()
        })
        .sum();
    let cap = m.capacity();
    let buckets = if cap == 0 {
        0
    } else {
        (cap * 8 / 7).next_power_of_two()
    };
    let now = (
        m.len(),
        m.len() * entry + held,
        buckets * (entry + 1) + held,
    );
    if let Ok(mut b) = booked.lock() {
        pool.sub(b.0, b.1);
        pool.unreserve(b.2);
        pool.add(now.0, now.1);
        pool.reserve(now.2);
        *b = now;
    }
}

impl Snapshots {
    /// Segment builds since start.
    pub fn builds(&self) -> u64 {
        self.builds.load(Ordering::Relaxed)
    }

    /// A new receiver of events.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    /// Event subscribers connected now.
    pub fn subscribers(&self) -> usize {
        self.events.receiver_count()
    }

    fn publish(&self, e: Event) {
        // No subscriber is the common case: then the event is dropped at once.
        if self.events.receiver_count() > 0 {
            let _ = self.events.send(e);
        }
    }

    /// A viewer was created on `stream`.
    pub fn viewer_joined(&self, id: u64, stream: &str) {
        self.viewer_joined_via(id, stream, "whep");
    }

    /// A viewer was created on `stream`, its `signalling` (`whep`, `srt` for an SRT reader)
    /// named.
    pub fn viewer_joined_via(&self, id: u64, stream: &str, signalling: &'static str) {
        let stream: Arc<str> = stream.into();
        let at = unix_ms();
        let identity = Segment::build(
            json!({"id": id, "stream": &*stream, "signalling": signalling, "created_ms": at}),
            &self.builds,
        );
        let connection = Segment::build(
            json!({"state": "connecting", "remote": null, "connected_ms": null, "srtp": null}),
            &self.builds,
        );
        let snap = ViewerSnapshot {
            id,
            stream: stream.clone(),
            identity,
            connection,
            video_paused: false,
        };
        if let Ok(mut m) = self.viewers.write() {
            m.insert(id, snap.clone());
            rebook(&mut m, &self.pool, &self.booked);
        }
        self.publish(Event {
            kind: EventKind::ViewerJoined,
            stream,
            at_ms: at,
            snapshot: SnapshotRef::Viewer(snap),
            reason: None,
        });
    }

    /// A viewer completed its handshake from `remote` with SRTP profile `srtp` (its RFC
    /// name, as `chrome://webrtc-internals` shows it): only the connection segment is
    /// rebuilt; the identity segment is shared.
    pub fn viewer_connected(&self, id: u64, remote: Option<SocketAddr>, srtp: Option<&str>) {
        let at = unix_ms();
        let snap = {
            let Ok(mut m) = self.viewers.write() else {
                return;
            };
            let Some(old) = m.get(&id) else { return };
            let connection = Segment::build(
                json!({
                    "state": "connected",
                    "remote": remote.map(|a| a.to_string()),
                    "connected_ms": at,
                    "srtp": srtp,
                }),
                &self.builds,
            );
            let snap = ViewerSnapshot {
                connection,
                ..old.clone()
            };
            m.insert(id, snap.clone());
            rebook(&mut m, &self.pool, &self.booked);
            snap
        };
        self.publish(Event {
            kind: EventKind::ViewerConnected,
            stream: snap.stream.clone(),
            at_ms: at,
            snapshot: SnapshotRef::Viewer(snap),
            reason: None,
        });
    }

    /// A viewer of a simulcast stream is now sent layer `rid` (`pinned`: by `?layer=` or
    /// the API): the connection segment is rebuilt with both.
    pub fn viewer_layer(&self, id: u64, rid: &str, pinned: bool) {
        self.viewer_connection(id, EventKind::ViewerLayer, |v, _| {
            v["layer"] = json!(rid);
            v["pinned"] = json!(pinned);
        });
    }

    /// A viewer's video paused (`true`: its path is too narrow for the stream) or resumed:
    /// the connection segment is rebuilt with `video_paused`.
    pub fn viewer_video_paused(&self, id: u64, paused: bool) {
        let kind = if paused {
            EventKind::ViewerVideoPaused
        } else {
            EventKind::ViewerVideoResumed
        };
        self.viewer_connection(id, kind, |v, s| {
            v["video_paused"] = json!(paused);
            s.video_paused = paused;
        });
    }

    /// Rebuilds a viewer's connection segment with `edit` and publishes `kind` with it.
    fn viewer_connection(
        &self,
        id: u64,
        kind: EventKind,
        edit: impl FnOnce(&mut serde_json::Value, &mut ViewerSnapshot),
    ) {
        let at = unix_ms();
        let snap = {
            let Ok(mut m) = self.viewers.write() else {
                return;
            };
            let Some(old) = m.get(&id) else { return };
            let mut v: serde_json::Value =
                serde_json::from_str(&old.connection.json).unwrap_or_else(|_| json!({}));
            let mut snap = old.clone();
            edit(&mut v, &mut snap);
            snap.connection = Segment::build(v, &self.builds);
            m.insert(id, snap.clone());
            rebook(&mut m, &self.pool, &self.booked);
            snap
        };
        self.publish(Event {
            kind,
            stream: snap.stream.clone(),
            at_ms: at,
            snapshot: SnapshotRef::Viewer(snap),
            reason: None,
        });
    }

    /// A viewer left; its last snapshot goes out with the event, nothing is built.
    pub fn viewer_left(&self, id: u64, reason: &'static str) {
        let snap = self.viewers.write().ok().and_then(|mut m| {
            let snap = m.remove(&id);
            rebook(&mut m, &self.pool, &self.booked);
            snap
        });
        if let Some(snap) = snap {
            self.publish(Event {
                kind: EventKind::ViewerLeft,
                stream: snap.stream.clone(),
                at_ms: unix_ms(),
                snapshot: SnapshotRef::Viewer(snap),
                reason: Some(reason),
            });
        }
    }

    /// A stream's state: `source` is `clip`, `whip`, `rtmp` or `none`.
    /// `layers` are the RIDs of its simulcast layers (empty without simulcast).
    pub fn stream_state(&self, key: &str, source: &str, live: bool, layers: &[Box<str>]) {
        self.put_stream(key, source, live, layers, EventKind::StreamChanged);
    }

    /// A publisher made stream `key`: cached (not live yet) and announced.
    pub fn stream_created(&self, key: &str) {
        self.put_stream(key, "none", false, &[], EventKind::StreamCreated);
    }

    /// Builds and caches a stream's snapshot and announces it as `kind`.
    fn put_stream(
        &self,
        key: &str,
        source: &str,
        live: bool,
        layers: &[Box<str>],
        kind: EventKind,
    ) {
        let key: Arc<str> = key.into();
        let layers: Vec<serde_json::Value> = layers.iter().map(|r| json!({"rid": &**r})).collect();
        let state = Segment::build(
            json!({"key": &*key, "source": source, "live": live, "layers": layers,
                "changed_ms": unix_ms()}),
            &self.builds,
        );
        let snap = StreamSnapshot {
            key: key.clone(),
            state,
        };
        if let Ok(mut m) = self.streams.write() {
            m.insert(key.clone(), snap.clone());
        }
        self.publish(Event {
            kind,
            stream: key,
            at_ms: unix_ms(),
            snapshot: SnapshotRef::Stream(snap),
            reason: None,
        });
    }

    /// Camera source `key`'s state changed: its snapshot is rebuilt and announced, as
    /// `source.error` with `error` as the reason when a session failed, else as
    /// `source.changed`.
    pub fn source_state(&self, key: &str, v: serde_json::Value, error: Option<&'static str>) {
        let key: Arc<str> = key.into();
        let seg = Segment::build(v, &self.builds);
        if let Ok(mut m) = self.sources.write() {
            m.insert(key.clone(), seg.clone());
        }
        self.publish(Event {
            kind: match error {
                Some(_) => EventKind::SourceError,
                None => EventKind::SourceChanged,
            },
            stream: key,
            at_ms: unix_ms(),
            snapshot: SnapshotRef::Source(seg),
            reason: error,
        });
    }

    /// Camera source `key`'s snapshot, if the stream has a source.
    pub fn source(&self, key: &str) -> Option<Arc<Segment>> {
        self.sources.read().ok()?.get(key).cloned()
    }

    /// Stream `key` was removed: out of the cache, announced with its last snapshot.
    pub fn stream_removed(&self, key: &str) {
        let snap = self.streams.write().ok().and_then(|mut m| {
            let s = m.remove(key);
            tern_pool::shrink_map(&mut m);
            s
        });
        if let Some(snap) = snap {
            self.publish(Event {
                kind: EventKind::StreamRemoved,
                stream: snap.key.clone(),
                at_ms: unix_ms(),
                snapshot: SnapshotRef::Stream(snap),
                reason: Some("no publisher for the idle grace"),
            });
        }
    }

    /// A publisher session was created on `stream`; `protocol` is `whip` or `rtmp`.
    pub fn publisher_joined(&self, id: u64, stream: &str, protocol: &'static str) {
        let stream: Arc<str> = stream.into();
        let at = unix_ms();
        let identity = Segment::build(
            json!({"id": id, "stream": &*stream, "protocol": protocol, "created_ms": at}),
            &self.builds,
        );
        let state = Segment::build(
            json!({"state": "connecting", "live_ms": null}),
            &self.builds,
        );
        let snap = PublisherSnapshot {
            id,
            stream: stream.clone(),
            identity,
            state,
            video: self.no_video.clone(),
            srt: None,
        };
        if let Ok(mut m) = self.publishers.write() {
            m.insert(id, snap.clone());
        }
        self.publish(Event {
            kind: EventKind::PublisherJoined,
            stream,
            at_ms: at,
            snapshot: SnapshotRef::Publisher(snap),
            reason: None,
        });
    }

    /// A publisher's media started flowing: only the state segment is rebuilt.
    pub fn publisher_live(&self, id: u64) {
        let at = unix_ms();
        let snap = {
            let Ok(mut m) = self.publishers.write() else {
                return;
            };
            let Some(old) = m.get(&id) else { return };
            let state = Segment::build(json!({"state": "live", "live_ms": at}), &self.builds);
            let snap = PublisherSnapshot {
                state,
                ..old.clone()
            };
            m.insert(id, snap.clone());
            snap
        };
        self.publish(Event {
            kind: EventKind::PublisherLive,
            stream: snap.stream.clone(),
            at_ms: at,
            snapshot: SnapshotRef::Publisher(snap),
            reason: None,
        });
    }

    /// What tern found in publisher `id`'s video changed: only the video segment is rebuilt
    /// (from `video`), and `publisher.warning` goes out with `reason`.
    pub fn publisher_video(&self, id: u64, video: serde_json::Value, reason: &'static str) {
        let snap = {
            let Ok(mut m) = self.publishers.write() else {
                return;
            };
            let Some(old) = m.get(&id) else { return };
            let snap = PublisherSnapshot {
                video: Segment::build(video, &self.builds),
                ..old.clone()
            };
            m.insert(id, snap.clone());
            snap
        };
        self.publish(Event {
            kind: EventKind::PublisherWarning,
            stream: snap.stream.clone(),
            at_ms: unix_ms(),
            snapshot: SnapshotRef::Publisher(snap),
            reason: Some(reason),
        });
    }

    /// Publisher `id`'s SRT figures changed: only its `srt` segment is rebuilt, quietly (no
    /// event: these are counters, refreshed every few seconds while it publishes).
    pub fn publisher_srt(&self, id: u64, srt: serde_json::Value) {
        let Ok(mut m) = self.publishers.write() else {
            return;
        };
        if let Some(old) = m.get_mut(&id) {
            old.srt = Some(Segment::build(srt, &self.builds));
        }
    }

    /// A publisher left; its last snapshot goes out with the event, nothing is built.
    pub fn publisher_left(&self, id: u64, reason: &'static str) {
        let snap = self.publishers.write().ok().and_then(|mut m| {
            let s = m.remove(&id);
            if m.is_empty() {
                m.shrink_to_fit();
            }
            s
        });
        if let Some(snap) = snap {
            self.publish(Event {
                kind: EventKind::PublisherLeft,
                stream: snap.stream.clone(),
                at_ms: unix_ms(),
                snapshot: SnapshotRef::Publisher(snap),
                reason: Some(reason),
            });
        }
    }

    /// A reload's event (`config.reloaded`, `config.rejected`): `snapshot` is its JSON
    /// object; it concerns no stream.
    pub fn config_event(&self, kind: EventKind, snapshot: &serde_json::Value) {
        self.publish(Event {
            kind,
            stream: "".into(),
            at_ms: unix_ms(),
            snapshot: SnapshotRef::Recording(snapshot.to_string().into()),
            reason: None,
        });
    }

    /// A recording's event on `stream`: `snapshot` is its JSON object.
    pub fn recording(
        &self,
        kind: EventKind,
        stream: &str,
        snapshot: String,
        reason: Option<&'static str>,
    ) {
        self.publish(Event {
            kind,
            stream: stream.into(),
            at_ms: unix_ms(),
            snapshot: SnapshotRef::Recording(snapshot.into()),
            reason,
        });
    }

    /// A TURN allocation was made for `user` from `client` (`udp` or `tcp`), relayed at
    /// `relay`.
    pub fn allocation_created(
        &self,
        id: u64,
        user: &str,
        transport: &'static str,
        client: SocketAddr,
        relay: SocketAddr,
    ) {
        let at = unix_ms();
        let identity = Segment::build(
            json!({"id": id, "user": user, "transport": transport, "client": client.to_string(),
                   "relayed": relay.to_string(), "created_ms": at}),
            &self.builds,
        );
        let snap = AllocationSnapshot { id, identity };
        if let Ok(mut m) = self.allocations.write() {
            m.insert(id, snap.clone());
        }
        self.publish(Event {
            kind: EventKind::AllocationCreated,
            stream: Arc::from(""),
            at_ms: at,
            snapshot: SnapshotRef::Allocation(snap),
            reason: None,
        });
    }

    /// A TURN allocation ended; its snapshot goes out with the event, nothing is built.
    pub fn allocation_closed(&self, id: u64, reason: &'static str) {
        let snap = self.allocations.write().ok().and_then(|mut m| {
            let s = m.remove(&id);
            tern_pool::shrink_map(&mut m);
            s
        });
        if let Some(snap) = snap {
            self.publish(Event {
                kind: EventKind::AllocationClosed,
                stream: Arc::from(""),
                at_ms: unix_ms(),
                snapshot: SnapshotRef::Allocation(snap),
                reason: Some(reason),
            });
        }
    }

    /// Cached TURN allocation snapshots, by id.
    pub fn allocations(&self) -> Vec<AllocationSnapshot> {
        let mut v: Vec<AllocationSnapshot> = self
            .allocations
            .read()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        v.sort_by_key(|a| a.id);
        v
    }

    /// A TURN allocation's cached snapshot.
    pub fn allocation(&self, id: u64) -> Option<AllocationSnapshot> {
        self.allocations.read().ok()?.get(&id).cloned()
    }

    /// Cached publisher snapshots, by id.
    pub fn publishers(&self) -> Vec<PublisherSnapshot> {
        let mut v: Vec<PublisherSnapshot> = self
            .publishers
            .read()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        v.sort_by_key(|p| p.id);
        v
    }

    /// Cached snapshots of the viewers of `stream` (all streams when `None`), by id.
    pub fn viewers(&self, stream: Option<&str>) -> Vec<ViewerSnapshot> {
        let mut v: Vec<ViewerSnapshot> = self
            .viewers
            .read()
            .map(|m| {
                m.values()
                    .filter(|s| stream.is_none_or(|k| &*s.stream == k))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        v.sort_by_key(|s| s.id);
        v
    }

    /// A viewer's cached snapshot.
    pub fn viewer(&self, id: u64) -> Option<ViewerSnapshot> {
        self.viewers.read().ok()?.get(&id).cloned()
    }

    /// Cached stream snapshots, by key.
    pub fn streams(&self) -> Vec<StreamSnapshot> {
        let mut v: Vec<StreamSnapshot> = self
            .streams
            .read()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        v.sort_by(|a, b| a.key.cmp(&b.key));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_happen_on_change_only_and_segments_are_shared() {
        let s = Snapshots::default();
        s.viewer_joined(1, "live/demo");
        assert_eq!(s.builds(), 2);
        let before = s.viewer(1).expect("cached");
        s.viewer_connected(
            1,
            Some("127.0.0.1:5000".parse().expect("addr")),
            Some("SRTP_AEAD_AES_128_GCM"),
        );
        assert_eq!(s.builds(), 3, "only the connection segment is rebuilt");
        let after = s.viewer(1).expect("cached");
        assert!(Arc::ptr_eq(&before.identity, &after.identity));
        assert!(!Arc::ptr_eq(&before.connection, &after.connection));
        assert_ne!(before.hash(), after.hash());
        // Reads build nothing.
        for _ in 0..100 {
            let _ = s.viewers(Some("live/demo"));
            let _ = s.viewer(1);
        }
        assert_eq!(s.builds(), 3);
        s.viewer_left(1, "deleted");
        assert_eq!(s.builds(), 3);
        assert!(s.viewer(1).is_none());
    }

    #[test]
    fn events_carry_the_cached_snapshot() {
        let s = Snapshots::default();
        let mut rx = s.subscribe();
        s.viewer_joined(7, "live/demo");
        let e = rx.try_recv().expect("event");
        assert_eq!(e.kind, EventKind::ViewerJoined);
        let SnapshotRef::Viewer(v) = &e.snapshot else {
            panic!("viewer snapshot expected")
        };
        let cached = s.viewer(7).expect("cached");
        assert!(Arc::ptr_eq(&v.identity, &cached.identity));
        let parsed: serde_json::Value = serde_json::from_str(&e.json()).expect("json");
        assert_eq!(parsed["type"], "viewer.joined");
        assert_eq!(parsed["snapshot"]["identity"]["id"], 7);
        assert_eq!(parsed["snapshot"]["connection"]["state"], "connecting");
    }
}

//! What the SRT listener thread and the publisher threads say to each other, and what
//! they count (a neutral module both import, as `media/link.rs` is for the engine).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::metrics::{Expose, Exposition, Kind};
use crate::session::Refusal;
use crate::srt::transport::{ConnId, RejectCode};

/// Listener to a publisher's thread.
#[derive(Debug)]
pub(super) enum Inbound {
    /// The caller is connected (its handshake answered).
    Open,
    /// A message of its stream.
    Data(bytes::Bytes),
    /// It is gone.
    Closed(&'static str),
}

/// A publisher's thread to the listener.
#[derive(Debug)]
pub(super) enum Control {
    /// Accept the caller with its app's passphrase.
    Accept(ConnId, Option<String>),
    /// Refuse it.
    Reject(ConnId, RejectCode),
    /// Close it (its publisher or reader ended).
    Close(ConnId),
    /// Send a message of a reader's stream.
    Send(ConnId, bytes::Bytes),
}

/// What the listener counts for `/metrics`: one set per server (the listener registers it
/// with the server's `metrics::Exposed`).
#[derive(Debug, Default)]
pub struct SrtCounters {
    /// Callers accepted.
    pub accepted: AtomicU64,
    /// Callers refused, by reason (index: [`REASONS`]).
    pub refused: [AtomicU64; REASONS.len()],
    /// Publishers live now.
    pub publishers: AtomicUsize,
    /// Readers (`m=request`) playing now.
    pub readers: AtomicUsize,
    /// Messages sent to readers.
    pub reader_messages: AtomicU64,
    /// Messages dropped: a reader's stream was more than the listener could take.
    pub reader_drops: AtomicU64,
    /// Messages readers queued that the listener has not sent yet.
    pub pending: AtomicUsize,
    /// Messages dropped because a publisher's queue was full.
    pub queue_drops: AtomicU64,
    /// The transport's counts, copied once a second.
    pub handshake_timeouts: AtomicU64,
    /// First packets dropped by `limits.srt_connections_per_ip` or the peer cap.
    pub limited: AtomicU64,
    /// Datagrams that did not parse or belonged to no peer.
    pub stray: AtomicU64,
    /// Inputs the SRT library panicked on (their peer was dropped).
    pub panics: AtomicU64,
    /// Sums over finished and running connections: packets lost, retransmitted, dropped.
    pub lost: AtomicU64,
    /// Retransmitted packets received.
    pub retransmitted: AtomicU64,
    /// Packets SRT gave up on.
    pub dropped: AtomicU64,
}

/// The reject reasons, in [`SrtCounters::refused`]'s order.
pub const REASONS: [RejectCode; 11] = [
    RejectCode::BadSecret,
    RejectCode::Unsecure,
    RejectCode::BadRequest,
    RejectCode::Unauthorized,
    RejectCode::Overload,
    RejectCode::Forbidden,
    RejectCode::NotFound,
    RejectCode::BadMode,
    RejectCode::Conflict,
    RejectCode::Internal,
    RejectCode::Unavailable,
];

impl SrtCounters {
    pub(super) fn refused(&self, code: RejectCode) {
        if let Some(i) = REASONS.iter().position(|r| *r == code) {
            self.refused[i].fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Expose for SrtCounters {
    /// The `tern_srt_*` families.
    fn write_metrics(&self, o: &mut Exposition) {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        o.gauge(
            "tern_srt_publishers",
            "SRT publishers connected.",
            self.publishers.load(Ordering::Relaxed) as u64,
        );
        o.gauge(
            "tern_srt_readers",
            "SRT readers (m=request) playing.",
            self.readers.load(Ordering::Relaxed) as u64,
        );
        o.counter(
            "tern_srt_reader_messages_total",
            "MPEG-TS messages sent to SRT readers.",
            l(&self.reader_messages),
        );
        o.counter(
            "tern_srt_reader_drops_total",
            "MPEG-TS messages to SRT readers dropped: the listener's queue was full.",
            l(&self.reader_drops),
        );
        o.counter(
            "tern_srt_accepted_total",
            "SRT callers accepted.",
            l(&self.accepted),
        );
        o.counter(
            "tern_srt_handshake_timeouts_total",
            "SRT handshakes dropped unfinished after 5 s.",
            l(&self.handshake_timeouts),
        );
        o.counter(
            "tern_srt_limited_total",
            "SRT handshakes dropped by limits.srt_connections_per_ip.",
            l(&self.limited),
        );
        o.counter(
            "tern_srt_stray_total",
            "SRT datagrams that did not parse or belonged to no caller.",
            l(&self.stray),
        );
        o.counter(
            "tern_srt_queue_drops_total",
            "SRT messages dropped: a publisher's queue was full.",
            l(&self.queue_drops),
        );
        o.counter(
            "tern_srt_library_panics_total",
            "SRT inputs the SRT library panicked on (peer dropped).",
            l(&self.panics),
        );
        o.counter(
            "tern_srt_packets_lost_total",
            "SRT data packets found missing (sum over publishers).",
            l(&self.lost),
        );
        o.counter(
            "tern_srt_packets_retransmitted_total",
            "SRT retransmitted data packets received.",
            l(&self.retransmitted),
        );
        o.counter(
            "tern_srt_packets_dropped_total",
            "SRT data packets given up as too late.",
            l(&self.dropped),
        );
        let mut f = o.family(
            "tern_srt_refused_total",
            "SRT callers refused at the handshake, by reject reason.",
            Kind::Counter,
        );
        for (r, n) in REASONS.iter().zip(&self.refused) {
            f.sample(&[("reason", &r.name())], l(n));
        }
    }
}

/// A session layer refusal as SRT tells it: the reject reason the caller gets.
pub fn reject_code(r: &Refusal) -> RejectCode {
    match r {
        Refusal::BadName(_) => RejectCode::BadRequest,
        Refusal::NotFound(_) => RejectCode::NotFound,
        Refusal::Unauthorized { .. } => RejectCode::Unauthorized,
        Refusal::Denied { status: 401, .. } => RejectCode::Unauthorized,
        Refusal::Denied { status: 503, .. } => RejectCode::Unavailable,
        Refusal::Denied { .. } => RejectCode::Forbidden,
        Refusal::TooMany(_) | Refusal::Full(_) | Refusal::Capacity => RejectCode::Overload,
        Refusal::PublishedElsewhere { .. } | Refusal::Busy(_) | Refusal::Source(_) => {
            RejectCode::Conflict
        }
        Refusal::Unavailable(_) | Refusal::Draining => RejectCode::Unavailable,
        _ => RejectCode::BadRequest,
    }
}

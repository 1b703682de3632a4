//! [`Refusal`]: why a client may not publish or play, in words that belong to no protocol.
//! Each surface maps it once to its own wire signal: `http/error.rs` to a status and body,
//! `rtmp.rs` to a NetStream code, `http/ome.rs` to an OME error.

use crate::directory::ClaimError;
use crate::limits::LimitReached;

/// Why a session is refused. The message (`Display`) is the one clients read.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The stream name breaks the naming rule.
    #[error("stream name {0:?} {rule}", rule = crate::config::NAME_RULE)]
    BadName(String),
    /// No such app or stream, or the app takes only its declared streams.
    #[error("stream {0} not found")]
    NotFound(String),
    /// The app's static token is missing or wrong.
    #[error("missing or wrong token for app {app}")]
    Unauthorized {
        /// The app whose token it is.
        app: String,
    },
    /// Admission (JWT, webhook) said no.
    #[error("{reason}")]
    Denied {
        /// 401 (no or bad token), 403 (refused) or 503 (webhook busy or unreachable with
        /// `on_error = "deny"`): HTTP's words, which the webhook contract speaks.
        status: u16,
        /// Why, for the client.
        reason: String,
    },
    /// The client's address is over one of its limits.
    #[error("{0}")]
    TooMany(LimitReached),
    /// Every dynamic stream slot is taken.
    #[error("{0}")]
    Full(ClaimError),
    /// Another node of the cluster has the stream's publisher.
    #[error("stream {key} is already published on node {node}")]
    PublishedElsewhere {
        /// `app/stream`.
        key: String,
        /// The node that holds the claim.
        node: String,
    },
    /// The stream already has a publisher here (or is a built-in clip).
    #[error("stream {0} already has a publisher (or is a built-in clip)")]
    Busy(String),
    /// The stream is fed by a camera (`[[app.source]]`): no publisher may take it.
    #[error("stream {0} is pulled from a camera ([[app.source]]); it takes no publisher")]
    Source(String),
    /// The stream exists but has no media yet.
    #[error("stream {0} is not live")]
    NotLive(String),
    /// Too many viewers or handshakes in progress.
    #[error("too many viewers or handshakes in progress; retry")]
    Capacity,
    /// In a cluster: the stream could not be found or pulled here in time.
    #[error("{0}")]
    PullFailed(String),
    /// The media engine (or the runtime admission runs on) is not running.
    #[error("{0}")]
    Unavailable(&'static str),
    /// The node is draining for an upgrade (`POST /v1/drain`, SIGTERM with
    /// `server.shutdown_drain_s`): it takes no new sessions.
    #[error("this server is draining (shutting down): it takes no new sessions; retry on another")]
    Draining,
}

//! A lean sans-IO WebRTC receiver: the far end of a WHEP session, for tests and the load
//! tester.
//!
//! It behaves like a browser on the wire where that matters to the server: ICE as the
//! controlling agent (binding requests with USE-CANDIDATE, then consent refreshes every
//! [`CONSENT_INTERVAL`]), DTLS 1.2 client, SRTP/SRTCP, RTCP receiver reports every second
//! and generic NACKs for gaps. It verifies every packet's SRTP authentication tag but does
//! not decode media; instead it keeps the statistics a load tester reports (unique packets,
//! loss, duplicates, reordering, jitter, latency from the sender's capture time, frames and
//! keyframes).
//!
//! Unlike a full WebRTC stack it holds no jitter buffer and no per-packet history: a few
//! hundred bytes per track, so one process can hold thousands of them.
//!
//! Files: `connection.rs` (the [`Client`]: ICE, DTLS, SRTP, RTCP), `track.rs` (per-track
//! statistics and the sequence window), `offer.rs` (the client half of offer/answer, ending
//! in [`ClientParams`]); this file only declares and re-exports them.

mod connection;
mod offer;
mod track;

pub use connection::{CONSENT_INTERVAL, Client, ClientState, ConnectTimes, Received};
pub use offer::{
    AnswerError, ClientAnswer, ClientOffer, ClientParams, answer_offer, client_params,
};
pub use track::TrackStats;

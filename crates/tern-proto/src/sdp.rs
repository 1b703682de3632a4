//! The subset of SDP (RFC 8866, JSEP RFC 8829) a WHEP server needs.
//!
//! - [`SessionDescription::parse`] reads an offer (or, in a test client, an answer) into
//!   owned media sections. Errors name the line and the problem ("line 7: m= line has no
//!   port"). Input is capped at [`MAX_SDP_LEN`] bytes and [`MAX_MEDIA`] media sections.
//! - [`negotiate`] decides what the server can send: the stream's video codec (H264, VP8,
//!   VP9, AV1 or H265) and Opus audio, sendonly.
//! - [`write_answer`] writes the ICE-lite, DTLS-passive answer for a negotiated offer.
//! - [`parse_sdpfrag`] reads trickle-ICE PATCH bodies (RFC 8840).
//! - [`write_offer`] writes the recvonly offer of a lean test client.
//! - [`write_server_offer`], [`negotiate_answer`] and [`write_client_answer`] are the
//!   server-offer direction of OvenMediaEngine-style signalling (the server offers).
//!
//! Session-level `a=ice-ufrag`, `a=ice-pwd`, `a=fingerprint`, `a=setup`, direction and
//! `a=extmap` lines are inherited by every media section that does not override them, so
//! the per-media accessors already give the effective value.
//!
//! Files: `model.rs` (the types), `parse.rs`, `negotiate.rs`, `write.rs`, `frag.rs`
//! (trickle fragments) and `server_offer.rs`; this file only declares and re-exports them.

mod frag;
mod model;
mod negotiate;
mod parse;
mod server_offer;
mod write;

pub use frag::{SdpFrag, parse_sdpfrag};
pub use model::{
    ABS_CAPTURE_TIME_URI, ABS_SEND_TIME_URI, Candidate, Direction, Extmap, MAX_MEDIA, MAX_SDP_LEN,
    MediaDescription, PayloadType, SdpError, SessionDescription, Setup, TRANSPORT_CC_URI,
};
pub use negotiate::{
    NegotiateError, Negotiated, NegotiatedMedia, StreamVideo, carries, negotiate, negotiate_for,
};
pub use parse::parse;
pub use server_offer::{
    AnswerMismatch, ClientAnswerParams, ClientChoice, SERVER_ABS_CAPTURE_TIME_ID, SERVER_AUDIO_PT,
    SERVER_VIDEO_PT, ServerOfferParams, negotiate_answer, parse_candidate_line,
    write_client_answer, write_server_offer,
};

pub use write::{AnswerParams, HostCandidate, OfferParams, write_answer, write_offer};

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

//! Sans-IO sessions for tern: the lean viewer, the WHIP publisher, the stream ring, the
//! clip source, the
//! offer/answer glue and a lean receiving client for tests and load.

#![forbid(unsafe_code)]

pub mod client;
pub mod clip;
pub mod publisher;
pub mod session;
pub mod stream;
pub mod turn;
pub mod turn_client;
pub mod viewer;

//! The HTTP side: WHEP, WHIP, OvenMediaEngine signalling, the REST API, events and pages.

pub mod api;
pub mod ome;
pub mod whep;
pub mod whip;

pub use whep::{AppState, StreamInfo};

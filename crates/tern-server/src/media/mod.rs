//! The media path: the engine's threads around the one UDP port (see [`engine`]), the
//! publisher slots that feed each stream ([`ingest`]) and the batched sends ([`batch`]).
//!
//! Code outside this folder names what it needs through the re-exports below, so the files
//! inside can be arranged without touching the HTTP side.

pub mod batch;
pub mod engine;
pub mod ingest;
mod socket;

pub use batch::SendBatch;
pub use engine::{
    Command, Engine, EngineConfig, EngineHandle, EngineStats, EngineStream, MAX_WORKERS, NtpClock,
    SessionMemory, ViewerId, WorkerCounts,
};
pub use ingest::{AddError, PublisherId, RtmpCommand};

//! The media path: the engine's threads around the one UDP port.
//!
//! Imports point one way, top to bottom:
//!
//! - [`engine`]: [`Engine::spawn`] starts the threads; [`EngineHandle`] is the HTTP side's
//!   handle on them (commands, frame publishers' media, session reports);
//! - `worker`: the app and stream workers (viewers, publishers, timers and RTCP);
//! - `socket`: the socket workers that receive on the media port and route each datagram,
//!   and `sys`, the raw `sendmmsg` with UDP GSO control messages (the crate's only `unsafe`);
//! - `table` (the viewer session table), `ledger` (memory booking), [`ingest`] (publisher
//!   slots: handover, sequence and timestamp rewriting), [`batch`] (`sendmmsg`, UDP GSO);
//! - [`slate`]: what a stream plays while it has no publisher (`[[app]] fallback`);
//! - `link`: the messages and ids every thread speaks, [`stats`] the counters they share
//!   (NTP time is `crate::clock`'s, a leaf).
//!
//! Code outside this folder names what it needs through the re-exports below, so the files
//! inside can be arranged without touching the HTTP side.

pub mod batch;
pub mod engine;
pub mod ingest;
mod ledger;
pub mod link;
pub mod slate;
mod socket;
pub mod stats;
mod table;
mod worker;

pub use crate::clock::NtpClock;
pub use batch::SendBatch;
pub use engine::{Engine, EngineConfig, EngineHandle, EngineThreads, WorkerCounts};
pub use ingest::{AddError, EndReason, FrameCommand, PublisherId, PublisherTimeouts, Source};
pub use link::{Command, MAX_WORKERS, SessionMemory, TAP_QUEUE, TapPacket, ViewerId, WhipLayers};
pub use slate::Slates;
pub use stats::{EngineStats, StreamCounters};
pub use worker::EngineStream;

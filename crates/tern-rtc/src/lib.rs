//! Sans-IO sessions for tern: the lean viewer, the WHIP publisher, the RTMP publisher and the
//! SRT publisher's MPEG-TS (over one encoded-media pipeline, `av`, with its AAC → Opus
//! transcoder and its video renditions), the stream ring, the clip source, the
//! offer/answer glue and a lean receiving client for tests and load.

#![forbid(unsafe_code)]

pub mod av;
pub mod bwe;
pub mod client;
pub mod clip;
pub mod g711;
pub mod hls;
pub mod package;
pub mod peer_policy;
pub mod publisher;
pub mod publisher_dtls;
pub mod renditions;
pub mod rtmp;
pub mod session;
pub mod stream;
pub mod transcode;
pub mod ts_publisher;
pub mod turn;
pub mod turn_client;
pub mod video_transcode;
pub mod viewer;

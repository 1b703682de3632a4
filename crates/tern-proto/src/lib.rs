//! Sans-IO wire formats for tern.
//!
//! Nothing in this crate touches a socket, a thread or the clock: parsers take `&[u8]`,
//! writers fill caller-owned buffers, and anything time-dependent takes `now` from the caller.
//! A parser never panics on input from the network; it returns an error instead, and every
//! parser here has a cargo-fuzz target under `fuzz/`.

#![forbid(unsafe_code)]

pub mod av1;
pub mod codec;
pub mod h264;
pub mod h265;
pub mod ome;
mod reassembly;
pub mod rtcp;
pub mod rtmp;
pub mod rtp;
pub mod sdp;
pub mod srt_stream_id;
pub mod srtp;
pub mod stun;
#[cfg(test)]
mod test_rng;
pub mod ts;
pub mod turn;
pub mod twcc;
pub mod vp8;
pub mod vp9;

//! Sans-IO sessions for tern: every call takes `now`, packets come in as bytes and go out
//! into caller-owned buffers; nothing here opens a socket. `tern-server` drives these on its
//! threads. The one exception to "no thread, no clock" is `renditions`, whose encoders run
//! on threads of their own (libavcodec is too slow for the caller's) and time themselves.
//!
//! # Module map
//!
//! | where | what |
//! | --- | --- |
//! | `viewer` | the lean viewer session: ICE-lite, a transient DTLS handshake, SRTP, RTCP, NACK from the ring, layer choice (`viewer/adapt`) |
//! | `session` | the server's half of offer/answer for a viewer (WHEP, OME), ending in `ViewerParams` |
//! | `bwe` | a viewer's bandwidth estimate from transport-wide congestion control feedback |
//! | `stream` | a stream's rings of RTP payloads, shared by every viewer, and its keyframe cache |
//! | `publisher`, `publisher_dtls` | the WHIP publisher: a full str0m peer, with tern's DTLS configuration |
//! | `av` | the encoded-media pipeline frame publishers share: access units and audio frames in, `AvEvent`s out (RTP-ready packets, samples for packagers, video notices) |
//! | `rtmp`, `ts_publisher` | RTMP (FLV) and SRT (MPEG-TS) publishers over `av` |
//! | `transcode`, `video_transcode`, `g711`, `renditions` | AAC → Opus, B-frame H264 → Constrained Baseline, G.711 → Opus, lower video layers of an RTMP publisher |
//! | `codecs` | the one table of which video codec goes to which output (WebRTC, LL-HLS, recording, RTMP forward, SRT) |
//! | `package` | the packaging feed: a stream's ring packets (depacketizer chosen `From<VideoCodec>`) or a publisher's frames as units for any packager, for the codecs `codecs` gives LL-HLS |
//! | `hls` | the CMAF packager (parts, segments, playlists) LL-HLS and recordings use |
//! | `clip` | the built-in demo clip and its pacer |
//! | `client` | a lean receiving WebRTC client (tests, the load tester, an edge's upstream) |
//! | `turn`, `turn_client`, `peer_policy` | the TURN server's allocation table, a TURN client, which peers a relay may reach |

#![forbid(unsafe_code)]

pub mod av;
pub mod bwe;
pub mod client;
pub mod clip;
pub mod codecs;
pub mod g711;
pub mod hls;
pub mod outlet;
pub mod package;
pub mod peer_policy;
pub mod publisher;
pub mod publisher_dtls;
pub mod renditions;
pub mod rtmp;
pub mod session;
pub mod stream;
pub mod thumbnail;
pub mod transcode;
pub mod ts_publisher;
pub mod turn;
pub mod turn_client;
pub mod video_transcode;
pub mod viewer;

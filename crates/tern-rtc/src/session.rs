//! The server's half of offer/answer for a viewer, in both directions, ending in the same
//! [`ViewerParams`] for the same lean [`crate::viewer::Viewer`]:
//!
//! - WHEP (the viewer offers): [`accept`] turns a negotiated offer into the SDP answer and
//!   the viewer's parameters.
//! - OvenMediaEngine-style WebSocket signalling (the server offers): [`offer`] mints
//!   credentials and SSRCs and writes the offer; [`ServerOffer::accept_answer`] reads the
//!   player's answer into the viewer's parameters.
//!
//! The client's half (reading the answer to its offer, answering a server offer) lives beside
//! the lean client, in [`crate::client`] (`client/offer.rs`).
//!
//! Randomness comes from the caller (`rand` closure) so this stays sans-IO and tests are
//! repeatable.

use std::net::IpAddr;

use tern_proto::sdp::{self, AnswerMismatch, Negotiated, SdpError, SessionDescription};

use crate::viewer::{PWD_LEN, TrackParams, UFRAG_LEN, ViewerParams, ViewerTimeouts};

/// Characters of minted ICE credentials (RFC 8445 §15.4 ice-char, minus `+` and `/` so they
/// need no escaping anywhere).
const ALPHABET: &[u8; 62] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// Fills `out` with random credential characters.
pub fn random_chars(out: &mut [u8], rand: &mut dyn FnMut() -> u64) {
    for b in out {
        *b = ALPHABET[(rand() % ALPHABET.len() as u64) as usize];
    }
}

/// What the server side announces about itself.
#[derive(Debug, Clone, Copy)]
pub struct LocalInfo<'a> {
    /// SHA-256 fingerprint of the shared DTLS certificate.
    pub fingerprint: &'a [u8; 32],
    /// Addresses of the host candidates, most preferred first (at least one).
    pub candidate_ips: &'a [IpAddr],
    /// Media port of the host candidates.
    pub candidate_port: u16,
    /// RTCP CNAME of the stream.
    pub cname: &'a str,
}

/// The result of accepting an offer.
#[derive(Debug)]
pub struct Accepted {
    /// SDP answer.
    pub answer: String,
    /// Parameters for [`crate::viewer::Viewer::new`].
    pub params: ViewerParams,
}

/// Mints credentials, SSRCs and offsets, and writes the answer for a negotiated offer.
pub fn accept(
    offer: &SessionDescription,
    neg: &Negotiated,
    local: &LocalInfo<'_>,
    rand: &mut dyn FnMut() -> u64,
) -> Accepted {
    let mut ufrag = [0u8; UFRAG_LEN];
    let mut pwd = [0u8; PWD_LEN];
    random_chars(&mut ufrag, rand);
    random_chars(&mut pwd, rand);
    let video_ssrc = rand() as u32;
    let audio_ssrc = (rand() as u32) ^ 1;
    let rtx_ssrc = (rand() as u32) ^ 2;
    let mut track = |m: &sdp::NegotiatedMedia, ssrc: u32| TrackParams {
        pt: m.pt,
        ssrc,
        abs_capture_time_ext: m.abs_capture_time_ext,
        transport_cc_ext: m.transport_cc_ext,
        abs_send_time_ext: m.abs_send_time_ext,
        rtx: None,
        vp8: m.vp8,
        nack: m.nack,
        // Below 2^15 so the first wrap is far away (a habit from libwebrtc).
        initial_seq: (rand() % 0x8000) as u16,
        ts_offset: rand() as u32,
    };
    let video = neg.video().map(|m| TrackParams {
        rtx: m.rtx_pt.map(|pt| (pt, rtx_ssrc)),
        ..track(m, video_ssrc)
    });
    let audio = neg.audio().map(|m| track(m, audio_ssrc));
    // Credentials are ASCII by construction.
    let ufrag_s = String::from_utf8_lossy(&ufrag).into_owned();
    let pwd_s = String::from_utf8_lossy(&pwd).into_owned();
    let answer = sdp::write_answer(
        offer,
        neg,
        &sdp::AnswerParams {
            ice_ufrag: &ufrag_s,
            ice_pwd: &pwd_s,
            fingerprint_sha256: local.fingerprint,
            candidate_ips: local.candidate_ips,
            candidate_port: local.candidate_port,
            video_ssrc,
            audio_ssrc,
            rtx_ssrc,
            cname: local.cname,
            session_id: rand() >> 2,
        },
    );
    Accepted {
        answer,
        params: ViewerParams {
            local_ufrag: ufrag,
            local_pwd: pwd,
            remote_ufrag: neg.remote_ufrag.clone().into_boxed_str(),
            remote_fingerprint: neg.remote_fingerprint,
            video,
            audio,
            pin: None,
            timeouts: ViewerTimeouts::default(),
        },
    }
}

/// Per-track values minted with a server offer and used once the answer is in.
#[derive(Debug, Clone, Copy)]
struct TrackSeed {
    ssrc: u32,
    initial_seq: u16,
    ts_offset: u32,
}

impl TrackSeed {
    fn mint(ssrc: u32, rand: &mut dyn FnMut() -> u64) -> Self {
        TrackSeed {
            ssrc,
            // Below 2^15 so the first wrap is far away (as in `accept`).
            initial_seq: (rand() % 0x8000) as u16,
            ts_offset: rand() as u32,
        }
    }

    fn params(self, m: &sdp::NegotiatedMedia) -> TrackParams {
        TrackParams {
            pt: m.pt,
            ssrc: self.ssrc,
            abs_capture_time_ext: m.abs_capture_time_ext,
            transport_cc_ext: m.transport_cc_ext,
            abs_send_time_ext: m.abs_send_time_ext,
            rtx: None,
            vp8: m.vp8,
            nack: m.nack,
            initial_seq: self.initial_seq,
            ts_offset: self.ts_offset,
        }
    }
}

/// An offer the server made (OvenMediaEngine-style signalling), waiting for the player's
/// answer. It holds only what the answer needs: credentials, SSRCs and offsets; no engine
/// state exists until [`ServerOffer::accept_answer`] succeeds and the caller adds the viewer.
#[derive(Debug)]
pub struct ServerOffer {
    /// The SDP offer to send.
    pub sdp: String,
    /// The server's host candidates as `candidate:...`, for the signalling to send beside the
    /// SDP (the offer itself carries no candidate, as OME's does not).
    pub candidates: Vec<String>,
    local_ufrag: [u8; UFRAG_LEN],
    local_pwd: [u8; PWD_LEN],
    video: Option<TrackSeed>,
    audio: Option<TrackSeed>,
}

/// Why a player's answer to a server offer cannot be used.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ServerAnswerError {
    /// The answer is not valid SDP.
    #[error("malformed SDP answer: {0}")]
    Sdp(#[from] SdpError),
    /// The answer does not fit the offer.
    #[error(transparent)]
    Mismatch(#[from] AnswerMismatch),
}

/// Mints credentials, SSRCs and offsets and writes the server's offer for a stream with video
/// (`video`) and audio (`audio`): ICE-lite, `a=setup:passive`, sendonly H264 and Opus (see
/// [`sdp::write_server_offer`]); `stream` is the stream's video codec and, for H264, the
/// profile-level-id of its SPS when known.
pub fn offer(
    local: &LocalInfo<'_>,
    video: bool,
    audio: bool,
    stream: sdp::StreamVideo,
    rand: &mut dyn FnMut() -> u64,
) -> ServerOffer {
    let mut ufrag = [0u8; UFRAG_LEN];
    let mut pwd = [0u8; PWD_LEN];
    random_chars(&mut ufrag, rand);
    random_chars(&mut pwd, rand);
    let video_seed = video.then(|| TrackSeed::mint(rand() as u32, rand));
    // Distinct from the video SSRC, as in `accept`.
    let audio_seed = audio.then(|| {
        let ssrc = (rand() as u32) ^ 1;
        let ssrc = match video_seed {
            Some(v) if v.ssrc == ssrc => ssrc ^ 2,
            _ => ssrc,
        };
        TrackSeed::mint(ssrc, rand)
    });
    let ufrag_s = String::from_utf8_lossy(&ufrag).into_owned();
    let pwd_s = String::from_utf8_lossy(&pwd).into_owned();
    let sdp = sdp::write_server_offer(&sdp::ServerOfferParams {
        ice_ufrag: &ufrag_s,
        ice_pwd: &pwd_s,
        fingerprint_sha256: local.fingerprint,
        video_ssrc: video_seed.map(|s| s.ssrc),
        audio_ssrc: audio_seed.map(|s| s.ssrc),
        cname: local.cname,
        session_id: rand() >> 2,
        video: stream,
    });
    ServerOffer {
        sdp,
        candidates: local
            .candidate_ips
            .iter()
            .enumerate()
            .map(|(i, ip)| sdp::HostCandidate::new(i, *ip, local.candidate_port).to_string())
            .collect(),
        local_ufrag: ufrag,
        local_pwd: pwd,
        video: video_seed,
        audio: audio_seed,
    }
}

impl ServerOffer {
    /// Our ICE username fragment, as in the offer.
    pub fn local_ufrag(&self) -> &str {
        // Minted from ASCII characters only.
        std::str::from_utf8(&self.local_ufrag).unwrap_or_default()
    }

    /// Reads the player's answer into the parameters of the viewer: the same
    /// [`ViewerParams`] [`accept`] gives for a WHEP offer with the same tracks.
    pub fn accept_answer(&self, answer: &str) -> Result<ViewerParams, ServerAnswerError> {
        let sd = SessionDescription::parse(answer)?;
        let neg = sdp::negotiate_answer(&sd, self.video.is_some(), self.audio.is_some())?;
        Ok(self.params(&neg))
    }

    fn params(&self, neg: &Negotiated) -> ViewerParams {
        ViewerParams {
            local_ufrag: self.local_ufrag,
            local_pwd: self.local_pwd,
            remote_ufrag: neg.remote_ufrag.clone().into_boxed_str(),
            remote_fingerprint: neg.remote_fingerprint,
            video: self.video.zip(neg.video()).map(|(s, m)| s.params(m)),
            audio: self.audio.zip(neg.audio()).map(|(s, m)| s.params(m)),
            pin: None,
            timeouts: ViewerTimeouts::default(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::net::{Ipv4Addr, SocketAddr};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use tern_proto::codec::MediaKind;
    use tern_proto::stun;

    use super::*;
    use crate::client::{AnswerError, Client, ClientOffer, ClientState, answer_offer};
    use crate::viewer::{CloseReason, DtlsContext, Viewer, ViewerState};

    fn rng(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            seed >> 1
        }
    }

    fn client_offer(now: Instant) -> ClientOffer {
        ClientOffer {
            ufrag: "cliU".into(),
            pwd: "clientPasswordClientPw".into(),
            rtcp: true,
            ntp_base: (now, 0),
        }
    }

    /// Server offer → lean client answer → viewer parameters, then ICE and DTLS between the
    /// lean viewer and the lean client in one process: both end connected.
    #[test]
    fn server_offer_connects_viewer_and_client() {
        let server_ctx = DtlsContext::generate().unwrap();
        let client_ctx = Arc::new(DtlsContext::generate().unwrap());
        let mut rand = rng(7);
        let local = LocalInfo {
            fingerprint: server_ctx.fingerprint(),
            candidate_ips: &[IpAddr::V4(Ipv4Addr::LOCALHOST)],
            candidate_port: 10000,
            cname: "tern-test",
        };
        let so = offer(&local, true, true, sdp::StreamVideo::default(), &mut rand);
        assert!(
            !so.sdp.contains("a=candidate"),
            "candidates go beside the SDP"
        );
        assert_eq!(
            so.candidates,
            ["candidate:1 1 udp 2130706431 127.0.0.1 10000 typ host"]
        );
        let t0 = Instant::now();
        let ca = answer_offer(
            &so.sdp,
            &[&so.candidates[0]],
            &client_offer(t0),
            client_ctx.fingerprint(),
        )
        .unwrap();
        assert_eq!(ca.params.server, SocketAddr::from(([127, 0, 0, 1], 10000)));
        assert_eq!(ca.params.remote_ufrag, so.local_ufrag());
        assert_eq!(ca.params.video_pt, Some(sdp::SERVER_VIDEO_PT));
        assert_eq!(ca.params.audio_pt, Some(sdp::SERVER_AUDIO_PT));
        let vp = so.accept_answer(&ca.answer).unwrap();
        assert_eq!(&*vp.remote_ufrag, "cliU");
        assert_eq!(&vp.remote_fingerprint, client_ctx.fingerprint());
        let (v, a) = (vp.video.unwrap(), vp.audio.unwrap());
        assert!(v.nack && v.ssrc != a.ssrc);
        assert_eq!(
            v.abs_capture_time_ext,
            Some(sdp::SERVER_ABS_CAPTURE_TIME_ID)
        );

        let mut viewer = Viewer::new(vp, t0);
        let mut client = Client::new(ca.params, client_ctx, t0, 1);
        let from = SocketAddr::from(([127, 0, 0, 1], 40000));
        let mut now = t0;
        let mut to_client: Vec<Vec<u8>> = Vec::new();
        for _ in 0..1000 {
            client.handle_timeout(now);
            let mut to_server: Vec<Vec<u8>> = Vec::new();
            client.drain(&mut |d| to_server.push(d.to_vec()));
            for d in &mut to_server {
                match d.first() {
                    Some(0..=3) => {
                        let msg = stun::Message::parse(d).unwrap();
                        let mut out = [0u8; 256];
                        if let Ok(n) = viewer.handle_stun(now, &msg, from, &mut out) {
                            to_client.push(out[..n].to_vec());
                        }
                    }
                    Some(20..=63) => {
                        let _ = viewer
                            .handle_dtls(now, d, &server_ctx, &mut |p| to_client.push(p.to_vec()));
                    }
                    _ => {
                        let _ = viewer.handle_rtcp(now, d, &mut |_| {});
                    }
                }
            }
            viewer.handle_timeout(now, &mut |p| to_client.push(p.to_vec()));
            for d in &mut to_client {
                client.handle_input(now, d);
            }
            to_client.clear();
            // Run on until the client's first SRTCP has let the viewer drop its DTLS engine.
            if viewer.state() == ViewerState::Connected
                && client.state() == ClientState::Connected
                && !viewer.has_handshake()
            {
                break;
            }
            now += Duration::from_millis(10);
        }
        assert_eq!(viewer.state(), ViewerState::Connected);
        assert_eq!(client.state(), ClientState::Connected);
        assert!(!viewer.has_handshake());

        // RTP padding (for equal-size GSO runs) is encrypted with the payload and taken off
        // by the receiver: the same payload comes out, 1, 7 or 16 bytes longer on the wire.
        let pool = tern_pool::BufferPool::new(tern_pool::PoolConfig::packets("padding test"))
            .expect("pool");
        // A video packet of the ring, with `payload`.
        let packet = |seq: u64, rtp_ts: u32, keyframe: bool, payload: tern_pool::Buf| {
            crate::stream::RingPacket {
                kind: MediaKind::Video,
                layer: 0,
                seq,
                rtp_ts,
                marker: true,
                keyframe,
                capture_ntp: 0,
                payload: payload.freeze(),
            }
        };
        let mut sizes = Vec::new();
        for (i, pad) in [0u8, 1, 7, 16].into_iter().enumerate() {
            let mut buf = pool.alloc(301);
            buf[0] = 0x65; // an H264 IDR slice: the video track starts here
            for (k, b) in buf[1..].iter_mut().enumerate() {
                *b = (k as u8) ^ (i as u8);
            }
            let pkt = packet(i as u64, 0, true, buf);
            let mut out = vec![0u8; 1500];
            let n = viewer
                .write_media_padded(&pkt, &mut out, pad)
                .expect("written")
                .expect("taken");
            sizes.push(n);
            let got = client
                .handle_input(now, &mut out[..n])
                .expect("a media packet");
            assert_eq!(&out[got.payload.clone()], &pkt.payload[..], "pad {pad}");
        }
        assert_eq!(
            sizes.iter().map(|&n| n - sizes[0]).collect::<Vec<_>>(),
            [0, 1, 7, 16]
        );

        // A padded packet delivered twice is one duplicate, whatever its last octet (on the
        // wire, the auth tag's): one whose tag ends in 0 was once counted as malformed.
        let mut ends_in_0 = 0;
        for seq in 4..4_000u64 {
            let mut buf = pool.alloc(301);
            buf[0] = 0x41; // a non-IDR slice
            let pkt = packet(seq, seq as u32 * 3_000, false, buf);
            let mut out = vec![0u8; 1500];
            let n = viewer
                .write_media_padded(&pkt, &mut out, 7)
                .expect("written")
                .expect("taken");
            let last = out[n - 1];
            let mut copy = out[..n].to_vec();
            let dups = client.track(MediaKind::Video).expect("video").duplicates;
            assert!(client.handle_input(now, &mut out[..n]).is_some());
            assert!(client.handle_input(now, &mut copy).is_none(), "a duplicate");
            let track = client.track(MediaKind::Video).expect("video");
            assert_eq!(track.duplicates, dups + 1, "seq {seq}, last octet {last}");
            if last == 0 {
                ends_in_0 += 1;
                if ends_in_0 == 3 {
                    break;
                }
            }
        }
        assert_eq!(ends_in_0, 3, "no packet whose tag ends in 0 in 4,000");

        // Closed from the server's side, the viewer still tells the client with the
        // close_notify it sealed before dropping the engine, and the client's DTLS accepts it.
        let mut alerts: Vec<Vec<u8>> = Vec::new();
        viewer.close_locally(&mut |p| alerts.push(p.to_vec()));
        assert_eq!(viewer.state(), ViewerState::Closed(CloseReason::Local));
        assert_eq!(alerts.len(), 1, "one close_notify record");
        assert!(!client.close_notify);
        for a in &mut alerts {
            client.handle_input(now, a);
        }
        assert!(client.close_notify, "the client saw close_notify");
        // Once closed there is nothing more to send.
        let mut again = 0;
        viewer.close_locally(&mut |_| again += 1);
        assert_eq!(again, 0);
    }

    /// The same tracks reached by WHEP (`accept`) and by the server offer give viewer
    /// parameters of the same shape: only the minted values differ.
    #[test]
    fn both_directions_give_the_same_viewer_params() {
        let fp = [9u8; 32];
        let local = LocalInfo {
            fingerprint: &fp,
            candidate_ips: &[IpAddr::V4(Ipv4Addr::LOCALHOST)],
            candidate_port: 1,
            cname: "c",
        };
        let cfp = [3u8; 32];
        let whep_offer = sdp::write_offer(&sdp::OfferParams {
            ice_ufrag: "cliU",
            ice_pwd: "clientPasswordClientPw",
            fingerprint_sha256: &cfp,
            video: true,
            audio: true,
            abs_capture_time: true,
            all_video: false,
        });
        let o = SessionDescription::parse(&whep_offer).unwrap();
        let whep = accept(&o, &sdp::negotiate(&o).unwrap(), &local, &mut rng(1)).params;
        let so = offer(&local, true, true, sdp::StreamVideo::default(), &mut rng(2));
        let ca = answer_offer(
            &so.sdp,
            &[&so.candidates[0]],
            &client_offer(Instant::now()),
            &cfp,
        )
        .unwrap();
        let ome = so.accept_answer(&ca.answer).unwrap();
        assert_eq!(whep.remote_ufrag, ome.remote_ufrag);
        assert_eq!(whep.remote_fingerprint, ome.remote_fingerprint);
        for (a, b) in [(whep.video, ome.video), (whep.audio, ome.audio)] {
            let (a, b) = (a.unwrap(), b.unwrap());
            assert_eq!(
                (a.pt, a.nack, a.abs_capture_time_ext.is_some()),
                (b.pt, b.nack, b.abs_capture_time_ext.is_some())
            );
        }
    }

    #[test]
    fn answers_and_offers_that_cannot_be_used() {
        let fp = [9u8; 32];
        let local = LocalInfo {
            fingerprint: &fp,
            candidate_ips: &[IpAddr::V4(Ipv4Addr::LOCALHOST)],
            candidate_port: 1,
            cname: "c",
        };
        let so = offer(
            &local,
            true,
            true,
            sdp::StreamVideo::h264(Some([0x64, 0x00, 0x28])),
            &mut rng(3),
        );
        // The stream's own profile, from its SPS.
        assert!(so.sdp.contains("profile-level-id=640028"), "{}", so.sdp);
        assert!(!so.sdp.contains("42e01f"), "{}", so.sdp);
        let ca = answer_offer(&so.sdp, &[], &client_offer(Instant::now()), &[3; 32]);
        // No candidate in the SDP and none beside it: the client has nowhere to go.
        assert!(matches!(ca, Err(AnswerError::Offer(_))));
        let ca = answer_offer(
            &so.sdp,
            &["bogus", &so.candidates[0]],
            &client_offer(Instant::now()),
            &[3; 32],
        )
        .unwrap();
        assert!(matches!(
            so.accept_answer("not sdp"),
            Err(ServerAnswerError::Sdp(_))
        ));
        let passive = ca.answer.replace("a=setup:active", "a=setup:passive");
        assert!(matches!(
            so.accept_answer(&passive),
            Err(ServerAnswerError::Mismatch(AnswerMismatch::Setup))
        ));
        let active_offer = so.sdp.replace("a=setup:passive", "a=setup:active");
        assert!(matches!(
            answer_offer(
                &active_offer,
                &[&so.candidates[0]],
                &client_offer(Instant::now()),
                &[3; 32]
            ),
            Err(AnswerError::Offer(_))
        ));
    }
}

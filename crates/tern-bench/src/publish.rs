//! WHIP publishers: str0m peers that send a clip (tern's built-in one, or an MP4 file's H264
//! or H265) in real time, for `tern bench --publish N` and ingest tests.
//!
//! A publisher is a full WebRTC sender (answers NACKs from its history, sends sender
//! reports; it does not honour keyframe requests: the built-in clips have a keyframe every
//! second, an MP4 file's keyframes are where its encoder put them),
//! so str0m is the right tool; there are few of them, so each gets its own thread.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use str0m::change::{SdpAnswer, SdpPendingOffer};
use str0m::media::{Direction, MediaKind as StrKind, Mid};
use str0m::net::{Protocol, Receive};
use str0m::rtp::{ExtensionValues, RtpWrite, SeqNo};
use str0m::{Candidate, Event, IceConnectionState, Input, Output, Rtc, RtcConfig};
use tern_proto::codec::{MediaKind, VideoCodec};
use tern_proto::sdp::SessionDescription;
use tern_rtc::clip::{Clip, ClipSource};
use ureq::Agent;

/// Counters of one publisher, shared with whoever started it.
#[derive(Debug, Default)]
pub struct PublisherStats {
    /// ICE and DTLS completed.
    pub connected: AtomicBool,
    /// RTP packets written.
    pub packets: AtomicU64,
    /// Set when the publisher failed, with the reason printed to stderr.
    pub failed: AtomicBool,
    /// Set when the server ended the session with a DTLS close_notify.
    pub closed_by_server: AtomicBool,
}

/// A running publisher thread.
pub struct PublisherHandle {
    /// Its counters.
    pub stats: Arc<PublisherStats>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl PublisherHandle {
    /// Stops the publisher (DELETE of its session) and waits for its thread.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for PublisherHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts a publisher that POSTs to the WHIP endpoint `url` and sends `clip` until
/// stopped.
pub fn start(url: &str, bind: IpAddr, clip: Arc<Clip>) -> Result<PublisherHandle, String> {
    let stats = Arc::new(PublisherStats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let session = Session::connect(url, bind, clip.video_codec())?;
    let (st, sp) = (stats.clone(), stop.clone());
    let thread = std::thread::Builder::new()
        .name("bench-publish".into())
        .spawn(move || session.run(clip, &st, &sp))
        .map_err(|e| format!("publisher thread: {e}"))?;
    Ok(PublisherHandle {
        stats,
        stop,
        thread: Some(thread),
    })
}

struct Session {
    rtc: Rtc,
    socket: UdpSocket,
    local: SocketAddr,
    location: Option<String>,
    agent: Agent,
    video: (Mid, u8),
    audio: (Mid, u8),
}

fn first_pt(answer: &str, kind: &str) -> Option<u8> {
    let sd = SessionDescription::parse(answer).ok()?;
    sd.media()
        .iter()
        .find(|m| m.kind() == kind && m.port() != 0)
        .and_then(|m| m.formats().first().copied())
}

impl Session {
    /// POSTs an offer of `video` (H264 or H265) and Opus to `url` and applies the answer.
    fn connect(url: &str, bind: IpAddr, video: VideoCodec) -> Result<Session, String> {
        let socket = UdpSocket::bind(SocketAddr::new(bind, 0)).map_err(|e| e.to_string())?;
        let mut local = socket.local_addr().map_err(|e| e.to_string())?;
        if local.ip().is_unspecified() {
            local.set_ip(IpAddr::from([127, 0, 0, 1]));
        }
        let mut rtc = RtcConfig::new()
            .set_rtp_mode(true)
            .clear_codecs()
            .enable_h264(video == VideoCodec::H264)
            .enable_h265(video == VideoCodec::H265)
            .enable_opus(true, false)
            .set_stats_interval(None)
            .build(Instant::now());
        let cand = Candidate::host(local, "udp").map_err(|e| format!("candidate: {e}"))?;
        rtc.add_local_candidate(cand);
        let mut api = rtc.sdp_api();
        let vmid = api.add_media(StrKind::Video, Direction::SendOnly, None, None, None);
        let amid = api.add_media(StrKind::Audio, Direction::SendOnly, None, None, None);
        let (offer, pending): (_, SdpPendingOffer) = api.apply().ok_or("no offer")?;
        let agent: Agent = crate::signal::agent_config()
            .timeout_global(Some(Duration::from_secs(10)))
            .http_status_as_error(false)
            .build()
            .into();
        let mut resp = agent
            .post(url)
            .header("Content-Type", "application/sdp")
            .send(offer.to_sdp_string())
            .map_err(|e| format!("POST {url}: {e}"))?;
        let status = resp.status().as_u16();
        let location = resp
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .map(|l| {
                if l.starts_with('/') {
                    format!("{}{l}", crate::signal::origin(url))
                } else {
                    l.to_string()
                }
            });
        let body = resp
            .body_mut()
            .read_to_string()
            .map_err(|e| format!("POST {url}: {e}"))?;
        if status != 201 {
            return Err(format!("POST {url}: HTTP {status}: {}", body.trim()));
        }
        let answer = SdpAnswer::from_sdp_string(&body).map_err(|e| format!("answer: {e}"))?;
        rtc.sdp_api()
            .accept_answer(pending, answer)
            .map_err(|e| format!("accept_answer: {e}"))?;
        let vpt = first_pt(&body, "video").ok_or("answer has no video")?;
        let apt = first_pt(&body, "audio").ok_or("answer has no audio")?;
        Ok(Session {
            rtc,
            socket,
            local,
            location,
            agent,
            video: (vmid, vpt),
            audio: (amid, apt),
        })
    }

    fn run(mut self, clip: Arc<Clip>, stats: &PublisherStats, stop: &AtomicBool) {
        let mut source: Option<ClipSource> = None;
        // Random timestamp bases, as a browser's (RFC 3550 §5.1): the clip's start at 0.
        let bases: (u32, u32) = (rand::random(), rand::random());
        let mut buf = vec![0u8; 2048];
        let deadline = Instant::now() + Duration::from_secs(10);
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            let _ = self.rtc.handle_input(Input::Timeout(now));
            if source.is_none() && now > deadline {
                eprintln!("bench: publisher did not connect within 10 s");
                stats.failed.store(true, Ordering::Relaxed);
                break;
            }
            if let Some(src) = source.as_mut() {
                let (video, audio) = (self.video, self.audio);
                let mut api = self.rtc.direct_api();
                src.poll(now, &mut |mp| {
                    let ((mid, pt), base) = match mp.kind {
                        MediaKind::Video => (video, bases.0),
                        MediaKind::Audio => (audio, bases.1),
                    };
                    if let Some(tx) = api.stream_tx_by_mid(mid, None) {
                        tx.write_rtp(
                            RtpWrite::new(
                                pt.into(),
                                SeqNo::from(mp.seq),
                                mp.rtp_ts.wrapping_add(base),
                                mp.capture_time,
                                mp.payload.to_vec(),
                            )
                            .marker(mp.marker)
                            .ext_vals(ExtensionValues::default())
                            .nackable(mp.kind == MediaKind::Video),
                        );
                        stats.packets.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            let mut next = now + Duration::from_millis(5);
            loop {
                match self.rtc.poll_output() {
                    Ok(Output::Transmit(t)) => {
                        let _ = self.socket.send_to(&t.contents, t.destination);
                    }
                    Ok(Output::Timeout(t)) => {
                        next = next.min(t);
                        break;
                    }
                    Ok(Output::Event(Event::Connected)) => {
                        stats.connected.store(true, Ordering::Relaxed);
                        source = Some(ClipSource::new(clip.clone(), Instant::now()));
                    }
                    Ok(Output::Event(Event::Closed)) => {
                        stats.closed_by_server.store(true, Ordering::Relaxed);
                        return;
                    }
                    Ok(Output::Event(Event::IceConnectionStateChange(
                        IceConnectionState::Disconnected,
                    ))) => {
                        eprintln!("bench: publisher disconnected");
                        stats.failed.store(true, Ordering::Relaxed);
                        return;
                    }
                    Ok(Output::Event(_)) => {}
                    Err(e) => {
                        eprintln!("bench: publisher: {e}");
                        stats.failed.store(true, Ordering::Relaxed);
                        return;
                    }
                }
            }
            if let Some(src) = &source {
                next = next.min(src.poll_timeout());
            }
            let wait = next
                .saturating_duration_since(Instant::now())
                .max(Duration::from_micros(200));
            let _ = self.socket.set_read_timeout(Some(wait));
            match self.socket.recv_from(&mut buf) {
                Ok((n, from)) => {
                    if let Ok(r) = Receive::new(Protocol::Udp, from, self.local, &buf[..n]) {
                        let _ = self.rtc.handle_input(Input::Receive(Instant::now(), r));
                    }
                }
                Err(_) => {
                    let _ = self.rtc.handle_input(Input::Timeout(Instant::now()));
                }
            }
        }
        if let Some(l) = &self.location {
            let _ = self.agent.delete(l).call();
        }
    }
}

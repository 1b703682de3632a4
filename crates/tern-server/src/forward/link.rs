//! One forward's thread: connect to the receiver, publish, send the stream's frames; after a
//! failure, connect again with backoff, for as long as the forward runs.
//!
//! RTMP and RTMPS: a blocking TCP connection (TLS by rustls for `rtmps://`, checked against
//! the server's roots and `server.ca_file` unless `tls_verify = false`), the publishing
//! client of [`ClientSession`] (handshake, `connect`, `createStream`, `publish`), then FLV
//! tags: the onMetaData, the AVC and AAC sequence headers and frames from a keyframe on.
//! Each connection's timestamps start at 0 (what a platform expects of a new stream) and
//! never go back; the outlet's timeline ([`tern_rtc::outlet`]) already goes on across a
//! publisher that reconnects. Time limits: 10 s to connect and to be publishing, 10 s for a
//! write the receiver does not take.
//!
//! SRT: a caller ([`SrtCaller`]: the URL's `streamid`, `passphrase` and `latency`) sending
//! MPEG-TS ([`TsWriter`]) in messages of 7 TS packets, from a keyframe on.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use tern_proto::rtmp::client::ClientSession;
use tern_proto::rtmp::flv;
use tern_rtc::outlet::{Container, OutFrame, TsWriter};
use tracing::{info, warn};

use super::entry::{Entry, OutletReader, State};
use crate::config::{ForwardProtocol, ForwardUrl};
use crate::snapshot::EventKind;
use crate::srt::caller::{MAX_MESSAGE, SrtCaller};

/// The first wait after a failure; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Time to connect, and then to be publishing.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A write the receiver has not taken in this long fails the connection.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// A read's wait while connecting (the thread looks at its stop flag between reads).
const HANDSHAKE_READ: Duration = Duration::from_millis(200);
/// How often the receiver's bytes (acknowledgements, pings) are read while sending.
const READ_EVERY: Duration = Duration::from_millis(200);

/// The TLS client configurations of `rtmps://`: certificates checked, and not
/// (`tls_verify = false`).
pub(super) type Tls = (Arc<rustls::ClientConfig>, Arc<rustls::ClientConfig>);

/// The configurations a forward has seen, kept across its connections.
#[derive(Debug, Default)]
pub(super) struct Configs {
    /// H264's SPS and PPS.
    video: Option<[Arc<[u8]>; 2]>,
    audio: Option<Arc<[u8]>>,
}

impl Configs {
    /// The configurations as frames, for a writer that starts now.
    fn frames(&self) -> Vec<OutFrame> {
        let mut v = Vec::new();
        if let Some([sps, pps]) = &self.video {
            v.push(OutFrame::VideoConfig {
                sps: sps.clone(),
                pps: pps.clone(),
            });
        }
        if let Some(asc) = &self.audio {
            v.push(OutFrame::AudioConfig {
                asc: asc.clone(),
                sample_rate: 0,
                channels: 0,
            });
        }
        v
    }

    /// Keeps `f` if it is a configuration.
    pub(super) fn note(&mut self, f: &OutFrame) {
        match f {
            OutFrame::VideoConfig { sps, pps } => self.video = Some([sps.clone(), pps.clone()]),
            OutFrame::AudioConfig { asc, .. } => self.audio = Some(asc.clone()),
            _ => {}
        }
    }
}

/// The forward's thread: until it is told to stop.
pub(super) fn run(entry: &Arc<Entry>, reader: &OutletReader, tls: Option<&Tls>) {
    let rx = &reader.rx;
    let mut configs = Configs::default();
    let mut backoff = FIRST_BACKOFF;
    let mut failures = 0u64;
    while !entry.stop.load(Ordering::Relaxed) {
        let container = match ForwardUrl::parse(&entry.url).map(|u| u.protocol) {
            Ok(ForwardProtocol::Srt) => Container::Ts,
            _ => Container::Flv,
        };
        if let Err(why) = reader.codec_ok(container) {
            if entry.state() != State::Failed {
                warn!(forward = %entry.id, stream = %entry.key, "{why}");
                entry.set_state(State::Failed, Some(why));
                reader.event(EventKind::ForwardFailed, entry, Some("codec"));
            }
            drain(
                rx,
                Instant::now() + FIRST_BACKOFF,
                &mut configs,
                &entry.stop,
            );
            continue;
        }
        if failures > 0 {
            entry.reconnects.fetch_add(1, Ordering::Relaxed);
        }
        entry.set_state(State::Connecting, None);
        let began = Instant::now();
        let result = match ForwardUrl::parse(&entry.url) {
            Ok(url) => match url.protocol {
                ForwardProtocol::Rtmp | ForwardProtocol::Rtmps => {
                    rtmp(entry, reader, tls, &mut configs, &url)
                }
                ForwardProtocol::Srt => srt(entry, reader, &mut configs, &url),
            },
            Err(e) => Err(e),
        };
        let Err(why) = result else {
            break;
        };
        if entry.stop.load(Ordering::Relaxed) {
            break;
        }
        if began.elapsed() > MAX_BACKOFF {
            // It was up a while: this failure is a new one.
            backoff = FIRST_BACKOFF;
        }
        failures += 1;
        warn!(forward = %entry.id, stream = %entry.key, url = %entry.shown, "forward failed, again in {backoff:?}: {why}");
        entry.set_state(State::Retrying, Some(why));
        reader.event(EventKind::ForwardFailed, entry, Some("connection"));
        drain(rx, Instant::now() + backoff, &mut configs, &entry.stop);
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// A byte stream to the receiver: TCP, or TLS over it.
enum Conn {
    Tcp(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Conn {
    fn socket(&self) -> &TcpStream {
        match self {
            Conn::Tcp(s) => s,
            Conn::Tls(s) => &s.sock,
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.read(buf),
            Conn::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.write(buf),
            Conn::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Tcp(s) => s.flush(),
            Conn::Tls(s) => s.flush(),
        }
    }
}

fn io_err(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

/// TCP (and TLS for `rtmps://`) to the URL's host.
fn connect(tls: Option<&Tls>, entry: &Entry, url: &ForwardUrl) -> Result<Conn, String> {
    let addrs: Vec<SocketAddr> = (url.host.as_str(), url.port)
        .to_socket_addrs()
        .map_err(|e| io_err(&format!("resolve {}", url.host), e))?
        .collect();
    let mut last = format!("{} has no address", url.host);
    let mut tcp = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, CONNECT_TIMEOUT) {
            Ok(s) => {
                tcp = Some(s);
                break;
            }
            Err(e) => last = io_err(&format!("connect to {a}"), e),
        }
    }
    let mut tcp = tcp.ok_or(last)?;
    let _ = tcp.set_nodelay(true);
    tcp.set_write_timeout(Some(WRITE_TIMEOUT))
        .and_then(|()| tcp.set_read_timeout(Some(HANDSHAKE_READ)))
        .map_err(|e| io_err("socket", e))?;
    if url.protocol != ForwardProtocol::Rtmps {
        return Ok(Conn::Tcp(tcp));
    }
    let Some((verified, unverified)) = tls else {
        return Err("TLS is not set up".into());
    };
    let cfg = if entry.tls_verify {
        verified.clone()
    } else {
        unverified.clone()
    };
    let name = rustls::pki_types::ServerName::try_from(url.host.clone())
        .map_err(|e| io_err("TLS server name", e))?;
    let mut conn = rustls::ClientConnection::new(cfg, name).map_err(|e| io_err("TLS", e))?;
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    while conn.is_handshaking() {
        match conn.complete_io(&mut tcp) {
            Ok(_) => {}
            Err(e) if timed_out(&e) && Instant::now() < deadline => {}
            Err(e) => return Err(io_err("TLS handshake", e)),
        }
    }
    Ok(Conn::Tls(Box::new(rustls::StreamOwned::new(conn, tcp))))
}

/// Whether a read error is only the read timeout passing.
fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Writes what the session has to send.
fn flush(io: &mut Conn, cs: &mut ClientSession, entry: &Entry) -> Result<(), String> {
    let out = cs.take_output();
    if out.is_empty() {
        return Ok(());
    }
    io.write_all(&out)
        .and_then(|()| io.flush())
        .map_err(|e| io_err("send", e))?;
    entry.bytes.fetch_add(out.len() as u64, Ordering::Relaxed);
    Ok(())
}

/// Reads what the receiver sent, if anything, into the session.
fn read(io: &mut Conn, cs: &mut ClientSession, buf: &mut [u8]) -> Result<(), String> {
    match io.read(buf) {
        Ok(0) => Err("the receiver closed the connection".into()),
        Ok(n) => cs.push(&buf[..n]).map_err(|e| io_err("the receiver", e)),
        Err(e) if timed_out(&e) => Ok(()),
        Err(e) => Err(io_err("receive", e)),
    }
}

/// One RTMP connection: until the forward stops (`Ok`) or the connection fails.
fn rtmp(
    entry: &Entry,
    reader: &OutletReader,
    tls: Option<&Tls>,
    configs: &mut Configs,
    url: &ForwardUrl,
) -> Result<(), String> {
    let mut io = connect(tls, entry, url)?;
    let seed = rand::random::<u64>();
    let mut cs = ClientSession::new(&url.app, &url.tc_url(), &url.key, seed);
    let mut buf = vec![0u8; 16 * 1024];
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    flush(&mut io, &mut cs, entry)?;
    while !cs.is_publishing() {
        if entry.stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the receiver did not take the stream within {CONNECT_TIMEOUT:?}"
            ));
        }
        read(&mut io, &mut cs, &mut buf)?;
        flush(&mut io, &mut cs, entry)?;
    }
    // While sending, a read only looks for what the receiver sent (acknowledgements,
    // pings): it must not hold the thread.
    io.socket()
        .set_read_timeout(Some(Duration::from_millis(2)))
        .map_err(|e| io_err("socket", e))?;
    entry.set_state(State::Live, None);
    info!(forward = %entry.id, stream = %entry.key, url = %entry.shown, "forward live");
    reader.event(EventKind::ForwardStarted, entry, None);
    reader.ask_keyframe();
    let rx = &reader.rx;
    let mut w = FlvOut::default();
    let mut last_read = Instant::now();
    loop {
        if entry.stop.load(Ordering::Relaxed) {
            cs.close();
            let _ = flush(&mut io, &mut cs, entry);
            return Ok(());
        }
        if reader.missed() {
            // Frames were missed: start again at a keyframe.
            w.waiting = true;
            reader.ask_keyframe();
        }
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(f) => {
                configs.note(&f);
                w.write(&f, configs, &mut cs)?;
                while let Ok(f) = rx.try_recv() {
                    configs.note(&f);
                    w.write(&f, configs, &mut cs)?;
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        }
        flush(&mut io, &mut cs, entry)?;
        if last_read.elapsed() >= READ_EVERY {
            last_read = Instant::now();
            read(&mut io, &mut cs, &mut buf)?;
            flush(&mut io, &mut cs, entry)?;
        }
    }
}

/// The receiver's address.
fn resolve(url: &ForwardUrl) -> Result<SocketAddr, String> {
    (url.host.as_str(), url.port)
        .to_socket_addrs()
        .map_err(|e| io_err(&format!("resolve {}", url.host), e))?
        .next()
        .ok_or_else(|| format!("{} has no address", url.host))
}

/// One SRT connection: until the forward stops (`Ok`) or the connection fails.
fn srt(
    entry: &Entry,
    reader: &OutletReader,
    configs: &mut Configs,
    url: &ForwardUrl,
) -> Result<(), String> {
    let to = resolve(url)?;
    let latency = Duration::from_millis(url.latency_ms.unwrap_or(120));
    let mut caller = SrtCaller::connect(
        to,
        url.stream_id.as_deref(),
        url.passphrase.as_deref(),
        latency,
        CONNECT_TIMEOUT,
    )?;
    entry.set_state(State::Live, None);
    info!(forward = %entry.id, stream = %entry.key, url = %entry.shown, "forward live");
    reader.event(EventKind::ForwardStarted, entry, None);
    reader.ask_keyframe();
    let mut ts = TsWriter::new();
    let mut out = Vec::with_capacity(64 * 188);
    for f in configs.frames() {
        ts.write(&f, &mut out);
    }
    loop {
        if entry.stop.load(Ordering::Relaxed) {
            caller.close();
            return Ok(());
        }
        if reader.missed() {
            ts.resync();
            reader.ask_keyframe();
        }
        match reader.rx.recv_timeout(Duration::from_millis(10)) {
            Ok(f) => {
                configs.note(&f);
                ts.write(&f, &mut out);
                while let Ok(f) = reader.rx.try_recv() {
                    configs.note(&f);
                    ts.write(&f, &mut out);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        }
        for m in out.chunks(MAX_MESSAGE) {
            caller.send(m)?;
            entry.bytes.fetch_add(m.len() as u64, Ordering::Relaxed);
        }
        out.clear();
        caller.poll(Duration::ZERO)?;
    }
}

/// FLV out of one connection's frames.
#[derive(Debug)]
struct FlvOut {
    /// The outlet time (90 kHz) that is this connection's 0.
    base: Option<i64>,
    /// Waiting for a keyframe (the start, or frames missed).
    waiting: bool,
    /// The FLV time of the last video and audio frame sent (ms), none before the first.
    last_video: Option<u32>,
    last_audio: Option<u32>,
}

impl Default for FlvOut {
    fn default() -> Self {
        FlvOut {
            base: None,
            waiting: true,
            last_video: None,
            last_audio: None,
        }
    }
}

fn ms(t: i64, base: i64) -> u32 {
    u32::try_from((t - base).max(0) / 90).unwrap_or(u32::MAX)
}

/// The FLV time of a frame at `t` ms: at least 1 ms after the track's `last` one when it
/// has one. FLV counts whole milliseconds, and two frames under 1 ms apart would share a
/// timestamp, which RTMP servers and players take for a broken stream.
fn after(t: u32, last: Option<u32>) -> u32 {
    last.map_or(t, |l| t.max(l.saturating_add(1)))
}

impl FlvOut {
    fn write(
        &mut self,
        f: &OutFrame,
        configs: &Configs,
        cs: &mut ClientSession,
    ) -> Result<(), String> {
        let e = |e| io_err("RTMP", e);
        match f {
            OutFrame::VideoConfig { sps, pps } if !self.waiting => {
                let rec = flv::avc_decoder_record(sps, pps);
                cs.send_video(
                    self.last_video.unwrap_or(0),
                    &flv::avc_sequence_header(&rec),
                )
                .map_err(e)?;
            }
            OutFrame::AudioConfig { asc, .. } if !self.waiting => {
                cs.send_audio(self.last_audio.unwrap_or(0), &flv::aac_sequence_header(asc))
                    .map_err(e)?;
            }
            OutFrame::Video {
                dts,
                pts,
                keyframe,
                avcc,
            } => {
                if self.waiting {
                    let Some([sps, pps]) = configs.video.as_ref().filter(|_| *keyframe) else {
                        return Ok(());
                    };
                    self.waiting = false;
                    let base = *self.base.get_or_insert(*dts);
                    let at = ms(*dts, base).max(self.last_video.unwrap_or(0));
                    if at == 0 {
                        cs.send_data(&flv::metadata(&[
                            ("videocodecid", 7.0),
                            ("audiocodecid", 10.0),
                        ]))
                        .map_err(e)?;
                    }
                    let rec = flv::avc_decoder_record(sps, pps);
                    cs.send_video(at, &flv::avc_sequence_header(&rec))
                        .map_err(e)?;
                    if let Some(asc) = &configs.audio {
                        cs.send_audio(at, &flv::aac_sequence_header(asc))
                            .map_err(e)?;
                    }
                }
                let Some(base) = self.base else {
                    return Ok(());
                };
                let t = ms(*dts, base);
                let at = after(t, self.last_video);
                // A DTS moved later keeps its PTS: the composition offset shrinks as much.
                let moved = i64::from(at) - i64::from(t);
                let cts = i32::try_from(((pts - dts) / 90 - moved).max(0)).unwrap_or(0);
                cs.send_video(at, &flv::avc_nalu(*keyframe, cts, avcc))
                    .map_err(e)?;
                self.last_video = Some(at);
            }
            OutFrame::Audio { pts, aac } => {
                let (Some(base), false, Some(_)) = (self.base, self.waiting, &configs.audio) else {
                    return Ok(());
                };
                if *pts < base {
                    return Ok(());
                }
                let at = after(ms(*pts, base), self.last_audio);
                cs.send_audio(at, &flv::aac_raw(aac)).map_err(e)?;
                self.last_audio = Some(at);
            }
            _ => {}
        }
        Ok(())
    }
}

/// Takes a forward's frames while it waits (a failure's backoff): what it must know
/// later (the configurations) is kept, the rest dropped.
fn drain(rx: &Receiver<Arc<OutFrame>>, until: Instant, configs: &mut Configs, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        match rx.recv_timeout(left.min(Duration::from_millis(200))) {
            Ok(f) => configs.note(&f),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{after, ms};

    #[test]
    fn flv_times_rise_by_a_millisecond_at_least() {
        // Two frames 0.5 ms apart (45 ticks at 90 kHz) fall in the same millisecond.
        let base = 1_000;
        let (a, b) = (ms(base + 900, base), ms(base + 945, base));
        assert_eq!((a, b), (10, 10));
        assert_eq!(after(a, None), 10, "a track's first frame keeps its time");
        assert_eq!(after(b, Some(a)), 11, "the next is moved 1 ms on");
        assert_eq!(after(40, Some(11)), 40, "a later frame keeps its own");
        assert_eq!(after(5, Some(11)), 12, "an earlier one follows the last");
        assert_eq!(
            after(0, Some(u32::MAX)),
            u32::MAX,
            "no overflow at the end of time"
        );
    }
}

//! `tern lab`: in-process measurements of the lean viewer path, with no network in the way.
//!
//! Because the viewer session is sans-IO, N server-side viewers and N lean clients can be
//! wired to each other by function calls in one thread. That makes the figures exact and
//! repeatable:
//!
//! - **heap**: the server's heap is a ledger of the counting allocator's live bytes taken
//!   around every server-side call (parse offer, accept, `Viewer::new`, every packet in,
//!   every timer, `write_media`, drop). Client-side allocations fall outside the ledger.
//!   Printed as a table at pjnath's lifecycle checkpoints.
//! - **handshakes**: server CPU time spent in ICE and DTLS calls, per handshake.
//! - **fanout**: time per forwarded packet per viewer; run under `valgrind --tool=callgrind`
//!   twice with different `--packets` to get instructions per packet per viewer (see
//!   `bench/core.sh`).
//! - `--udp`: also send every forwarded packet with `sendmmsg` to a loopback sink, for
//!   CPU-seconds per million packets including the kernel.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_pool::{BufferPool, CountingAlloc, PoolConfig};
use tern_proto::codec::MediaKind;
use tern_proto::sdp::{self, SessionDescription};
use tern_proto::stun;
use tern_rtc::client::{Client, ClientOffer, ClientState, client_params};
use tern_rtc::session::{self, LocalInfo};
use tern_rtc::stream::{RingPacket, Stream};
use tern_rtc::viewer::{DtlsContext, Viewer, ViewerEvent, ViewerState};
use tern_server::media::batch::SendBatch;

/// Options of `tern lab`.
#[derive(Debug, Clone, clap::Args)]
pub struct LabArgs {
    /// Viewers.
    #[arg(long, default_value_t = 1000)]
    pub viewers: usize,
    /// Simulated seconds of streaming for the steady-state checkpoint.
    #[arg(long, default_value_t = 60)]
    pub seconds: u32,
    /// Video bitrate of the synthetic stream, kbit/s (1188-byte payloads, 30 fps).
    #[arg(long, default_value_t = 4000)]
    pub kbps: u32,
    /// Fan-out only: connect, then forward exactly this many source packets and stop
    /// (for instruction counting). Skips the steady-state and teardown checkpoints.
    #[arg(long)]
    pub packets: Option<u64>,
    /// Deliver every forwarded packet to the clients, which verify its SRTP tag and
    /// sequence. Costs client CPU; the server figures do not include it.
    #[arg(long)]
    pub verify: bool,
    /// Also send forwarded packets over loopback UDP with sendmmsg.
    #[arg(long)]
    pub udp: bool,
    /// Give every viewer a bandwidth estimate, as a viewer of a simulcast stream has:
    /// transport-wide sequence numbers on its video, and a transport-wide feedback for
    /// what it was sent every 100 ms (built here: the lean client sends none).
    #[arg(long)]
    pub bwe: bool,
    /// The server's SRTP profile preference, most preferred first (as `[tunables]
    /// srtp_profiles`): e.g. `--srtp aes256gcm` to measure AES-256-GCM.
    #[arg(long, value_delimiter = ',', default_values = ["aes128gcm", "aes256gcm", "aes128cm"])]
    pub srtp: Vec<SrtpArg>,
}

/// An SRTP profile on `tern lab`'s command line.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum SrtpArg {
    /// AEAD_AES_128_GCM.
    Aes128gcm,
    /// AEAD_AES_256_GCM.
    Aes256gcm,
    /// AES_CM_128_HMAC_SHA1_80.
    Aes128cm,
}

impl From<SrtpArg> for tern_proto::srtp::SrtpProfile {
    fn from(a: SrtpArg) -> Self {
        match a {
            SrtpArg::Aes128gcm => Self::AeadAes128Gcm,
            SrtpArg::Aes256gcm => Self::AeadAes256Gcm,
            SrtpArg::Aes128cm => Self::Aes128CmHmacSha1_80,
        }
    }
}

/// The transport-wide sequence number's extension id in `--bwe` mode.
const TWCC_EXT: u8 = 5;

/// Server heap ledger: live bytes attributed to server-side calls.
struct Ledger {
    live: i64,
    peak: i64,
    allocs: u64,
    cpu: Duration,
}

impl Ledger {
    fn run<T>(&mut self, f: impl FnOnce() -> T) -> T {
        let a = CountingAlloc::stats();
        let t = Instant::now();
        let r = f();
        self.cpu += t.elapsed();
        let b = CountingAlloc::stats();
        self.live += b.live_bytes as i64 - a.live_bytes as i64;
        self.allocs += b.allocations.saturating_sub(a.allocations);
        self.peak = self.peak.max(self.live);
        r
    }
}

struct Row {
    name: &'static str,
    live: i64,
    viewers: usize,
    allocs: u64,
}

/// A synthetic ~`kbps` H264-like stream: 30 fps, fixed-size payloads, a keyframe each
/// second (FU-A start with an IDR header so clients can find it).
struct Synthetic {
    per_frame: usize,
    frame: u64,
    seq: u64,
    audio_seq: u64,
}

const PAYLOAD: usize = 1188;

impl Synthetic {
    fn new(kbps: u32) -> Self {
        let per_frame = ((kbps as usize * 1000 / 8 / 30) / PAYLOAD).max(1);
        Synthetic {
            per_frame,
            frame: 0,
            seq: 0,
            audio_seq: 0,
        }
    }

    /// Packets of the next 1/30 s: one video frame and (every third frame, rounded) audio.
    fn next(&mut self, pool: &BufferPool, ntp: u64, out: &mut Vec<RingPacket>) {
        let key = self.frame.is_multiple_of(30);
        for i in 0..self.per_frame {
            let mut b = pool.alloc(PAYLOAD);
            b.fill(0x55);
            b[0] = 0x7c; // FU-A, NRI 3
            b[1] = match (i == 0, i + 1 == self.per_frame) {
                (true, _) => 0x80 | if key { 5 } else { 1 },
                (false, true) => 0x40 | if key { 5 } else { 1 },
                _ => {
                    if key {
                        5
                    } else {
                        1
                    }
                }
            };
            out.push(RingPacket {
                kind: MediaKind::Video,
                layer: 0,
                seq: self.seq,
                rtp_ts: (self.frame * 3000) as u32,
                marker: i + 1 == self.per_frame,
                keyframe: key && i == 0,
                capture_ntp: ntp,
                payload: b.freeze(),
            });
            self.seq += 1;
        }
        // 50 audio packets per second against 30 frames: 5 every 3 frames.
        let audio = [2usize, 2, 1][(self.frame % 3) as usize];
        for _ in 0..audio {
            let mut b = pool.alloc(120);
            b.fill(0x11);
            out.push(RingPacket {
                kind: MediaKind::Audio,
                layer: 0,
                seq: self.audio_seq,
                rtp_ts: (self.audio_seq * 960) as u32,
                marker: false,
                keyframe: false,
                capture_ntp: ntp,
                payload: b.freeze(),
            });
            self.audio_seq += 1;
        }
        self.frame += 1;
    }
}

struct Pair {
    viewer: Option<Viewer>,
    client: Client,
    addr: SocketAddr,
}

/// Runs the lab and prints its report.
pub fn run(a: &LabArgs) -> Result<(), String> {
    let n = a.viewers.max(1);
    let before = CountingAlloc::stats();
    let mut rows = Vec::new();
    let mut ledger = Ledger {
        live: 0,
        peak: 0,
        allocs: 0,
        cpu: Duration::ZERO,
    };

    // Startup: certificate, packet pool, ring.
    let (server_ctx, pool, mut stream) = ledger.run(|| {
        let profiles: Vec<_> = a.srtp.iter().map(|&p| p.into()).collect();
        let ctx = DtlsContext::generate_with(&profiles).map_err(|e| e.to_string())?;
        let pool = BufferPool::new(PoolConfig {
            name: "packet_buffers",
            lower: 1,
            upper: 1200,
            initial: 4096,
            max_free: 8192,
            low_water: 1024,
            prefault: true,
            huge_pages: false,
        })
        .map_err(|e| e.to_string())?;
        Ok::<_, String>((Arc::new(ctx), pool, Stream::new(2048, 256)))
    })?;
    rows.push(Row {
        name: "startup (cert, packet pool, rings)",
        live: ledger.live,
        viewers: 0,
        allocs: ledger.allocs,
    });

    // Idle: the ring full of a stream nobody watches.
    let t0 = Instant::now();
    let ntp0 = tern_proto::rtp::ntp_from_unix(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default(),
    );
    let ntp_at = |t: Instant| -> u64 {
        let d = t.saturating_duration_since(t0);
        ntp0.wrapping_add(d.as_secs() << 32)
            .wrapping_add((u64::from(d.subsec_nanos()) << 32) / 1_000_000_000)
    };
    let mut src = Synthetic::new(a.kbps);
    let mut fresh = Vec::new();
    let mut now = t0;
    ledger.run(|| {
        for _ in 0..150 {
            src.next(&pool, ntp_at(now), &mut fresh);
            for p in fresh.drain(..) {
                stream.push(p);
            }
            now += Duration::from_micros(33_333);
        }
    });
    let ring_bytes = ledger.live;
    rows.push(Row {
        name: "idle (ring filled, no viewers)",
        live: ledger.live,
        viewers: 0,
        allocs: ledger.allocs,
    });
    let idle = ledger.live;

    // Offer/answer for N viewers.
    let client_ctx = Arc::new(DtlsContext::generate().map_err(|e| e.to_string())?);
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut rand = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let local = LocalInfo {
        fingerprint: server_ctx.fingerprint(),
        candidate_ips: &[IpAddr::V4(Ipv4Addr::LOCALHOST)],
        candidate_port: 10000,
        cname: "tern-lab",
    };
    let mut pairs = Vec::with_capacity(n);
    for i in 0..n {
        let mut uf = [0u8; 8];
        let mut pw = [0u8; 24];
        session::random_chars(&mut uf, &mut rand);
        session::random_chars(&mut pw, &mut rand);
        let ufrag = String::from_utf8_lossy(&uf).into_owned();
        let pwd = String::from_utf8_lossy(&pw).into_owned();
        let offer_sdp = sdp::write_offer(&sdp::OfferParams {
            ice_ufrag: &ufrag,
            ice_pwd: &pwd,
            fingerprint_sha256: client_ctx.fingerprint(),
            video: true,
            audio: true,
            abs_capture_time: true,
            all_video: false,
        });
        let (answer, viewer) = ledger.run(|| {
            let offer = SessionDescription::parse(&offer_sdp).map_err(|e| e.to_string())?;
            let neg = sdp::negotiate(&offer).map_err(|e| e.to_string())?;
            let mut acc = session::accept(&offer, &neg, &local, &mut rand);
            if a.bwe
                && let Some(v) = acc.params.video.as_mut()
            {
                v.transport_cc_ext = Some(TWCC_EXT);
            }
            let v = Viewer::new(acc.params, now);
            Ok::<_, String>((acc.answer, v))
        })?;
        let cp = client_params(
            &answer,
            &ClientOffer {
                ufrag,
                pwd,
                rtcp: true,
                ntp_base: (t0, ntp0),
            },
        )
        .map_err(|e| e.to_string())?;
        let client = Client::new(cp, client_ctx.clone(), now, i as u64 + 1);
        let addr = SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(127, 1, (i >> 8) as u8, i as u8)),
            40000 + (i % 20000) as u16,
        );
        // The answer string is server output handed to the client: it leaves the ledger.
        ledger.run(|| drop(answer));
        pairs.push(Pair {
            viewer: Some(viewer),
            client,
            addr,
        });
    }
    rows.push(Row {
        name: "viewers created (offer/answer done)",
        live: ledger.live,
        viewers: n,
        allocs: ledger.allocs,
    });
    let created_allocs = ledger.allocs;

    // Handshakes: ICE + DTLS + first SRTCP (which drops the handshake state).
    let hs_cpu_before = ledger.cpu;
    let hs_start = Instant::now();
    let mut peak_hs = ledger.live;
    let mut queue: Vec<Vec<u8>> = Vec::new();
    let mut connected = 0;
    for round in 0..2000 {
        let mut pending = false;
        for p in pairs.iter_mut() {
            let Some(v) = p.viewer.as_mut() else { continue };
            p.client.handle_timeout(now);
            queue.clear();
            p.client.drain(&mut |d| queue.push(d.to_vec()));
            for d in queue.iter_mut() {
                server_input(&mut ledger, v, &server_ctx, now, d, p.addr, &mut p.client);
            }
            if v.has_handshake() || v.state() != ViewerState::Connected {
                pending = true;
            }
        }
        peak_hs = peak_hs.max(ledger.peak);
        connected = pairs
            .iter()
            .filter(|p| {
                p.viewer
                    .as_ref()
                    .is_some_and(|v| v.state() == ViewerState::Connected)
            })
            .count();
        if !pending {
            break;
        }
        if round == 1999 {
            return Err(format!("only {connected} of {n} viewers connected"));
        }
        now += Duration::from_millis(10);
    }
    let hs_cpu = ledger.cpu - hs_cpu_before;
    let hs_wall = hs_start.elapsed();
    let failed = pairs
        .iter()
        .filter(|p| matches!(p.client.state(), ClientState::Failed(_)))
        .count();
    rows.push(Row {
        name: "handshakes complete (DTLS state dropped)",
        live: ledger.live,
        viewers: n,
        allocs: ledger.allocs,
    });
    if a.bwe {
        for p in pairs.iter_mut() {
            if let Some(v) = p.viewer.as_mut() {
                ledger.run(|| v.enable_bwe(now));
            }
        }
        rows.push(Row {
            name: "bandwidth estimators on (--bwe)",
            live: ledger.live,
            viewers: n,
            allocs: ledger.allocs,
        });
    }

    // Steady state or fan-out only.
    let mut out = vec![0u8; 1536];
    let mut batch = SendBatch::new();
    let sink = if a.udp {
        Some(UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?)
    } else {
        None
    };
    let sink_addr = sink.as_ref().and_then(|s| s.local_addr().ok());
    let sender = if a.udp {
        let s = UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        s.set_nonblocking(true).map_err(|e| e.to_string())?;
        Some(s)
    } else {
        None
    };
    let mut forwarded = 0u64;
    let mut source_packets = 0u64;
    let fan_cpu_before = ledger.cpu;
    let fan_wall = Instant::now();
    let proc_cpu_before = process_cpu();
    let ticks = match a.packets {
        Some(_) => u64::MAX,
        None => u64::from(a.seconds) * 30,
    };
    let mut tick = 0u64;
    let mut sweep_buf = vec![0u8; 512];
    let mut fb_buf = Vec::with_capacity(1024);
    // `--bwe`: the transport-wide sequence numbers fed back so far, and sent so far.
    let mut twcc = (0u16, 0u16);
    'outer: while tick < ticks {
        now += Duration::from_micros(33_333);
        fresh.clear();
        ledger.run(|| src.next(&pool, ntp_at(now), &mut fresh));
        for pkt in fresh.drain(..) {
            if a.packets.is_some_and(|max| source_packets >= max) {
                break 'outer;
            }
            source_packets += 1;
            ledger.run(|| stream.push(pkt.clone()));
            // In fan-out-only mode the ledger stays out of the loop: reading the
            // allocator's counters around each call would dominate what is measured.
            let ledger = if a.packets.is_some() {
                None
            } else {
                Some(&mut ledger)
            };
            let verify = a.verify.then_some((now, &mut out));
            forwarded += fan_out_packet(
                &pkt,
                &mut pairs,
                &mut batch,
                sender.as_ref(),
                sink_addr,
                ledger,
                verify,
            )?;
            // Every viewer is sent every packet: one count of transport-wide sequence
            // numbers serves them all.
            if pkt.kind == MediaKind::Video {
                twcc.1 = twcc.1.wrapping_add(1);
            }
        }
        if a.bwe && tick % 3 == 2 {
            let l = a.packets.is_none().then_some(&mut ledger);
            let at = now.duration_since(t0).as_micros() as i64 - 100_000;
            feed_back(&mut pairs, (now, at), twcc, &mut fb_buf, l);
            twcc.0 = twcc.1;
        }
        if !batch.is_empty() {
            flush(&mut batch, sender.as_ref());
        }
        // Timers every frame: SR out, RR/NACK in.
        if a.packets.is_none() {
            for p in pairs.iter_mut() {
                let Some(v) = p.viewer.as_mut() else { continue };
                let due = v.poll_timeout().is_some_and(|(t, _)| t <= now);
                if due {
                    let sr = ledger.run(|| {
                        v.handle_timeout(now, &mut |_| {});
                        v.poll_sender_report(now, "tern-lab", &mut sweep_buf)
                    });
                    if let Some(len) = sr {
                        out[..len].copy_from_slice(&sweep_buf[..len]);
                        p.client.handle_input(now, &mut out[..len]);
                    }
                }
                p.client.handle_timeout(now);
                queue.clear();
                p.client.drain(&mut |d| queue.push(d.to_vec()));
                for d in queue.iter_mut() {
                    server_input(&mut ledger, v, &server_ctx, now, d, p.addr, &mut p.client);
                }
            }
        }
        tick += 1;
    }
    let fan_cpu = if a.packets.is_some() {
        fan_wall.elapsed() // loop wall time: source, write_media and batch bookkeeping
    } else {
        ledger.cpu - fan_cpu_before
    };
    let proc_cpu = process_cpu().saturating_sub(proc_cpu_before);
    if a.packets.is_none() {
        rows.push(Row {
            name: "steady state (streaming)",
            live: ledger.live,
            viewers: n,
            allocs: ledger.allocs,
        });
    }
    let steady_live = ledger.live;
    let steady_allocs = ledger.allocs;

    // Verify what the clients saw.
    let mut lost = 0u64;
    let mut received = 0u64;
    let mut bad = 0u64;
    for p in &pairs {
        for k in [MediaKind::Video, MediaKind::Audio] {
            if let Some(t) = p.client.track(k) {
                lost += t.lost();
                received += t.packets;
                bad += t.bad;
            }
        }
    }

    if a.packets.is_none() {
        for p in pairs.iter_mut() {
            let v = p.viewer.take();
            ledger.run(|| drop(v));
        }
        rows.push(Row {
            name: "all viewers gone",
            live: ledger.live,
            viewers: 0,
            allocs: ledger.allocs,
        });
    }

    // Report.
    println!(
        "tern lab: {n} viewers, synthetic stream {} kbit/s ({} x {PAYLOAD} B per frame, 30 fps, audio 50 pkt/s)",
        a.kbps, src.per_frame
    );
    println!();
    println!("Server heap at lifecycle checkpoints (counting allocator, server-side calls only)");
    println!(
        "{:<44} {:>14} {:>14} {:>12} {:>12}",
        "checkpoint", "live bytes", "above idle", "per viewer", "allocations"
    );
    for r in &rows {
        let above = r.live - idle;
        let per = if r.viewers > 0 {
            format!("{:.0}", above as f64 / r.viewers as f64)
        } else {
            "-".into()
        };
        println!(
            "{:<44} {:>14} {:>14} {:>12} {:>12}",
            r.name, r.live, above, per, r.allocs
        );
    }
    println!(
        "{:<44} {:>14} {:>14} {:>12}",
        "peak during handshakes",
        peak_hs,
        peak_hs - idle,
        format!("{:.0}", (peak_hs - idle) as f64 / n as f64)
    );
    let inline = std::mem::size_of::<Viewer>();
    let steady_per = (steady_live - idle) as f64 / n as f64;
    println!(
        "inline Viewer struct (held in the engine's slot table, not heap-allocated): {inline} B; per connected viewer, heap + inline: {:.0} B",
        steady_per + inline as f64
    );
    let ps = pool.stats();
    println!();
    println!(
        "shared ring: {} video + {} audio slots; packet pool {} B allocated ({} buffers), {} in use; ring payload {} B; ring+pool share of idle heap {} B",
        stream.ring(MediaKind::Video).capacity(),
        stream.ring(MediaKind::Audio).capacity(),
        ps.allocated_bytes,
        ps.free + ps.in_use,
        ps.in_use,
        stream.ring(MediaKind::Video).payload_bytes()
            + stream.ring(MediaKind::Audio).payload_bytes(),
        ring_bytes,
    );
    println!(
        "handshakes: {connected}/{n} connected, {failed} failed; server CPU {:.3} s => {:.0} handshakes/s per core (wall {:.2} s incl. clients)",
        hs_cpu.as_secs_f64(),
        n as f64 / hs_cpu.as_secs_f64().max(1e-9),
        hs_wall.as_secs_f64()
    );
    println!(
        "allocations: {} while creating viewers; {} during streaming ({} source packets, {} forwarded)",
        created_allocs,
        steady_allocs.saturating_sub(created_allocs),
        source_packets,
        forwarded
    );
    if forwarded > 0 {
        println!(
            "fan-out: {:.0} ns per forwarded packet per viewer in write_media (server calls only){}",
            fan_cpu.as_nanos() as f64 / forwarded as f64,
            if a.udp {
                format!(
                    "; process CPU incl. sendmmsg+loopback {:.2} s per million packets",
                    proc_cpu.as_secs_f64() / forwarded as f64 * 1e6
                )
            } else {
                String::new()
            }
        );
    }
    if a.verify || a.packets.is_none() {
        println!(
            "clients: {received} packets verified, {lost} lost, {bad} failed SRTP; steady live {steady_live}"
        );
    }
    let after = CountingAlloc::stats();
    println!(
        "process: live {} B at start, {} B now, peak {} B",
        before.live_bytes, after.live_bytes, after.peak_bytes
    );
    if failed > 0 || (a.verify && (lost > 0 || bad > 0)) {
        return Err(format!(
            "{failed} clients failed, {lost} packets lost, {bad} bad"
        ));
    }
    Ok(())
}

/// Forwards one source packet to every viewer: header rewrite and SRTP into the send batch,
/// flushing it when full. Returns the number of packets written. Kept out of line so that
/// `callgrind --toggle-collect` can count exactly this, the server's per-packet work (see
/// `bench/core.sh`).
#[inline(never)]
fn fan_out_packet(
    pkt: &RingPacket,
    pairs: &mut [Pair],
    batch: &mut SendBatch,
    sender: Option<&UdpSocket>,
    sink_addr: Option<SocketAddr>,
    mut ledger: Option<&mut Ledger>,
    mut verify: Option<(Instant, &mut Vec<u8>)>,
) -> Result<u64, String> {
    let mut forwarded = 0;
    for p in pairs.iter_mut() {
        let Some(v) = p.viewer.as_mut() else { continue };
        let slot = match batch.slot() {
            Some(s) => s,
            None => {
                flush(batch, sender);
                batch.slot().ok_or("empty batch has no slot")?
            }
        };
        let wrote = match ledger.as_deref_mut() {
            Some(l) => l.run(|| v.write_media(pkt, slot)),
            None => v.write_media(pkt, slot),
        };
        if let Ok(Some(len)) = wrote {
            forwarded += 1;
            if let Some((now, out)) = verify.as_mut() {
                out[..len].copy_from_slice(&slot[..len]);
                p.client.handle_input(*now, &mut out[..len]);
            }
            batch.commit(len, sink_addr.unwrap_or(p.addr));
        }
    }
    Ok(forwarded)
}

/// `--bwe`: each viewer's transport-wide feedback for the video sent since the last one
/// (sequence numbers `acked..sent`), every packet received, arrivals spread over the last
/// 100 ms. Kept out of line, like
/// [`fan_out_packet`], so that callgrind can count it with it (see `bench/bwe.sh`).
#[inline(never)]
fn feed_back(
    pairs: &mut [Pair],
    (now, base): (Instant, i64),
    (acked, sent): (u16, u16),
    buf: &mut Vec<u8>,
    mut ledger: Option<&mut Ledger>,
) {
    let n = sent.wrapping_sub(acked);
    if n == 0 {
        return;
    }
    let step = 100_000 / i64::from(n);
    let statuses: Vec<tern_proto::twcc::PacketStatus> = (0..n)
        .map(|i| tern_proto::twcc::PacketStatus {
            seq: acked.wrapping_add(i),
            arrival_us: Some(base + i64::from(i) * step),
        })
        .collect();
    buf.clear();
    tern_proto::twcc::write(&statuses, 0, buf);
    for p in pairs.iter_mut() {
        let Some(v) = p.viewer.as_mut() else { continue };
        match ledger.as_deref_mut() {
            Some(l) => l.run(|| v.on_transport_feedback(buf, now)),
            None => v.on_transport_feedback(buf, now),
        }
    }
}

/// One datagram from a client into its viewer, with the replies delivered back.
fn server_input(
    ledger: &mut Ledger,
    v: &mut Viewer,
    ctx: &DtlsContext,
    now: Instant,
    d: &mut [u8],
    from: SocketAddr,
    client: &mut Client,
) {
    let mut replies: Vec<Vec<u8>> = Vec::new();
    match d.first() {
        Some(0..=3) => {
            let mut out = [0u8; 256];
            let r = ledger.run(|| {
                let msg = stun::Message::parse(d).ok()?;
                v.handle_stun(now, &msg, from, &mut out).ok()
            });
            if let Some(len) = r {
                replies.push(out[..len].to_vec());
            }
        }
        Some(20..=63) => {
            ledger.run(|| {
                let _ = v.handle_dtls(now, d, ctx, &mut |p| replies.push(p.to_vec()));
            });
            // The replies vector is the driver's, not the session's.
            ledger.live -= replies.iter().map(|r| r.capacity() as i64).sum::<i64>()
                + (replies.capacity() * std::mem::size_of::<Vec<u8>>()) as i64;
        }
        _ => {
            ledger.run(|| {
                let _ = v.handle_rtcp(now, d, &mut |ev: ViewerEvent| {
                    let _ = ev;
                });
            });
        }
    }
    for r in replies.iter_mut() {
        client.handle_input(now, r);
    }
}

fn flush(batch: &mut SendBatch, sender: Option<&UdpSocket>) {
    match sender {
        Some(s) => {
            batch.flush(s.as_raw_fd());
        }
        // No socket: just empty it (the in-memory fan-out figure).
        None => batch.clear(),
    }
}

/// CPU time (user + system) of this process, from /proc.
fn process_cpu() -> Duration {
    let Ok(s) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // Fields after the command name (which is in parentheses and may hold spaces).
    let Some(rest) = s.rfind(')').map(|i| &s[i + 1..]) else {
        return Duration::ZERO;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15 (1-based), i.e. 11 and 12 after the name.
    let t = ticks(11) + ticks(12);
    // USER_HZ is 100 on Linux.
    Duration::from_millis(t * 10)
}

//! LL-HLS over HTTP: `GET /{app}/{stream}/index.m3u8` (admission, then a multivariant
//! playlist naming the session's media playlist), `media.m3u8` (with blocking reload,
//! `_HLS_msn` / `_HLS_part`), `init{v}.mp4`, `{msn}.m4s` and `{msn}.{part}.m4s` (a
//! preload-hinted part blocks until it exists). Every URI after the first carries the
//! session token (`?session=`): admission runs once per player, not once per request.
//! A plain `media.m3u8` of a stream with no complete segment yet (packaging just started)
//! waits for one, at most three segment targets, so players without LL-HLS start cold.
//!
//! `index.m3u8` is always a multivariant playlist, with one variant until renditions
//! exist: its variant URI is how the session token reaches the player, and players treat
//! the variant's URI as the media playlist they reload (a media playlist at `index.m3u8`
//! itself would be reloaded without the token). A ladder's variants carry `&layer=RID`
//! (lower layers) and its audio rendition `&media=audio` on every URI.
//!
//! Caching (for a CDN in front): `index.m3u8` and a plain `media.m3u8` are `no-cache`
//! (the first mints a session, the second changes every part); a blocking-reload answer
//! names one playlist version, cacheable for a segment target; parts and segments never
//! change once made (`max-age` 60 s, longer than they stay listed); init segments a day.
//!
//! Playlists go out gzip-compressed to a client whose `Accept-Encoding` takes gzip (as
//! Apple's HLS authoring rules ask), with `Vary: Accept-Encoding`: a media playlist shrinks
//! to about a fifth (0.22-0.23 in bench/hls-gzip.sh), which a player on a slow link gets
//! back for its media (a ladder's 3 KB playlists, reloaded twice a second for the video and
//! for the audio rendition, took a third of 400 kbit/s). Media is sent as it is.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use tern_rtc::hls::Packager;

use crate::hls::{AUDIO_LAYER, Hls, OpenError};
use crate::http::error::HttpError;
use crate::http::extract::{StreamPath, credentials, layer_of};
use crate::http::listener::Peer;
use crate::http::reply::cors;
use crate::http::state::AppState;
use crate::media::Command;
use crate::session::{PlayAsk, Protocol, Refusal};

/// Longest wait for the first part of a stream whose packaging just started: a keyframe
/// must come first, and encoders send one every 1-10 s.
const FIRST_PART_WAIT: Duration = Duration::from_secs(12);

/// Longest `index.m3u8` waits, after the top variant's first part, for the lower variants'
/// (a rendition's encoder or a simulcast layer's keyframe comes a little after the top's).
const LADDER_WAIT: Duration = Duration::from_secs(3);

/// One variant of a stream: its video layer (0: the top).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Variant {
    stream: usize,
    layer: u8,
}

/// What a request after `index.m3u8` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resource {
    Media,
    Init(u32),
    Segment(u64),
    Part(u64, u32),
}

fn resource(file: &str) -> Option<Resource> {
    if file == "media.m3u8" {
        return Some(Resource::Media);
    }
    if let Some(v) = file
        .strip_prefix("init")
        .and_then(|f| f.strip_suffix(".mp4"))
    {
        return v.parse().ok().map(Resource::Init);
    }
    let name = file.strip_suffix(".m4s")?;
    match name.split_once('.') {
        None => name.parse().ok().map(Resource::Segment),
        Some((m, p)) => Some(Resource::Part(m.parse().ok()?, p.parse().ok()?)),
    }
}

fn set(r: &mut Response, name: header::HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        r.headers_mut().insert(name, v);
    }
}

/// A 200 with `body`, its type and caching.
fn ok(body: Body, content_type: &str, cache: &str) -> Response {
    let mut r = Response::new(body);
    cors(r.headers_mut());
    set(&mut r, header::CONTENT_TYPE, content_type);
    set(&mut r, header::CACHE_CONTROL, cache);
    r
}

/// Shares a packaged buffer with the response body (no copy).
struct Shared(Arc<Vec<u8>>);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// `GET /{app}/{stream}/{file}`: the HLS resources.
pub(super) async fn get(
    State(st): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    path: StreamPath,
    Path((_, _, file)): Path<(String, String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    if !st.config().hls.enabled {
        return Err(HttpError::NotFound(
            "HLS is off (hls.enabled = false)".into(),
        ));
    }
    let gzip = accepts_gzip(&headers);
    if file == "index.m3u8" {
        return open(&st, peer, &path, query, &headers)
            .await
            .map(|body| playlist(body, "no-cache", gzip));
    }
    let Some(res) = resource(&file) else {
        return Err(HttpError::NotFound(format!(
            "no such HLS resource {file:?}"
        )));
    };
    let q = query.unwrap_or_default();
    let Some(token) = crate::http::reply::query_param(&q, "session") else {
        return Err(HttpError::Forbidden(
            "no HLS session: load index.m3u8 first (its URIs carry ?session=)",
        ));
    };
    let hub = &st.hls;
    let now = Instant::now();
    let Some(index) = hub.touch(token, now) else {
        return Err(HttpError::Forbidden(
            "unknown or expired HLS session: load index.m3u8 again",
        ));
    };
    if st.streams.get(&path.key()).is_none_or(|i| i.index != index) {
        return Err(HttpError::Forbidden(
            "this HLS session is for another stream",
        ));
    }
    // `layer=RID`: a lower variant; `media=audio`: a ladder's audio rendition (the URIs of
    // its playlist carry either on).
    let rid = crate::http::reply::query_param(&q, "layer");
    let audio = crate::http::reply::query_param(&q, "media") == Some("audio");
    let layer = match (rid, audio) {
        (_, true) => AUDIO_LAYER,
        (None, false) => 0,
        (Some(rid), false) => layer_of(&path.key(), &st.engine.stats.rids(index), rid)?,
    };
    let v = Variant {
        stream: index,
        layer,
    };
    let uris = match audio {
        true => audio_query(token),
        false => uri_query(token, rid),
    };
    match res {
        Resource::Media => {
            let (body, cache) = media_playlist(hub, v, &uris, &q).await?;
            Ok(playlist(body, &cache, gzip))
        }
        Resource::Init(n) => match hub.with_packager(index, layer, |p| p.init(n)).flatten() {
            Some(b) => Ok(media(hub, vec![b], "public, max-age=86400")),
            None => Err(HttpError::NotFound(format!("no init segment {n}"))),
        },
        Resource::Segment(msn) => segment(hub, v, msn).await,
        Resource::Part(msn, part) => part_of(hub, v, msn, part).await,
    }
}

/// The query every URI of a variant's playlist carries.
fn uri_query(token: &str, rid: Option<&str>) -> String {
    match rid {
        Some(rid) => format!("session={token}&layer={rid}"),
        None => format!("session={token}"),
    }
}

/// The query every URI of a ladder's audio rendition carries.
fn audio_query(token: &str) -> String {
    format!("session={token}&media=audio")
}

/// A response carrying packaged bytes.
fn media(hub: &Hls, parts: Vec<Arc<Vec<u8>>>, cache: &str) -> Response {
    use std::sync::atomic::Ordering::Relaxed;
    let len: usize = parts.iter().map(|p| p.len()).sum();
    hub.counters.media.fetch_add(1, Relaxed);
    hub.counters.media_bytes.fetch_add(len as u64, Relaxed);
    let body = if parts.len() == 1 {
        let one = parts.into_iter().next().unwrap_or_default();
        Body::from(Bytes::from_owner(Shared(one)))
    } else {
        let mut all = Vec::with_capacity(len);
        for p in &parts {
            all.extend_from_slice(p);
        }
        Body::from(all)
    };
    let mut r = ok(body, "video/mp4", cache);
    set(&mut r, header::CONTENT_LENGTH, &len.to_string());
    r
}

/// Smallest playlist worth compressing: below it gzip's header and trailer (18 bytes) and
/// the extra header lines eat most of the saving.
const GZIP_FROM: usize = 512;

/// Whether `Accept-Encoding` takes gzip (RFC 9110 §12.5.3): the weight of `gzip` (or
/// `x-gzip`) where listed, else that of `*`, above 0. Codings and the `q` parameter are
/// matched without case; a weight that does not parse counts as 1.
fn accepts_gzip(headers: &HeaderMap) -> bool {
    let (mut named, mut any): (Option<f32>, Option<f32>) = (None, None);
    let items = headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','));
    for item in items {
        let mut parts = item.split(';').map(str::trim);
        let coding = parts.next().unwrap_or_default();
        let weight = parts
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
            .and_then(|(_, q)| q.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        let slot = if ["gzip", "x-gzip"]
            .iter()
            .any(|c| coding.eq_ignore_ascii_case(c))
        {
            &mut named
        } else if coding == "*" {
            &mut any
        } else {
            continue;
        };
        *slot = Some(slot.map_or(weight, |w| w.max(weight)));
    }
    named.or(any).is_some_and(|q| q > 0.0)
}

/// gzip (RFC 1952) at the fastest level: a playlist is text that repeats itself (the
/// session token on every URI), and the fastest level takes most of what the slowest
/// would. The deflate state (about 315 KB: miniz_oxide's window, hash tables and buffers)
/// is made once per HTTP thread that serves a playlist, kept for the thread's life, and
/// reset for each playlist: a new encoder per playlist cost 0.17 ms of CPU, five times the
/// rest of the request (bench/hls-gzip.sh).
fn gzip(body: &[u8]) -> Option<Vec<u8>> {
    use flate2::{Compress, Compression, Crc, FlushCompress, Status};
    thread_local! {
        static DEFLATE: std::cell::RefCell<Compress> =
            std::cell::RefCell::new(Compress::new(Compression::fast(), false));
    }
    // Header: deflate, no flags or time, no extra flags, OS unknown.
    const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    DEFLATE.with(|d| {
        let mut d = d.try_borrow_mut().ok()?;
        d.reset();
        let mut out = Vec::with_capacity(HEADER.len() + body.len() / 3 + 64);
        out.extend_from_slice(&HEADER);
        // Deflate writes into the spare capacity only: grow it until the stream ends (a
        // bound, though a stored block is at most the input plus 5 bytes per 64 KB).
        for _ in 0..32 {
            let read = usize::try_from(d.total_in()).ok()?;
            let rest = body.get(read..)?;
            if d.compress_vec(rest, &mut out, FlushCompress::Finish).ok()? == Status::StreamEnd {
                let mut crc = Crc::new();
                crc.update(body);
                out.extend_from_slice(&crc.sum().to_le_bytes());
                out.extend_from_slice(&(body.len() as u32).to_le_bytes());
                return Some(out);
            }
            out.reserve(out.capacity().max(256));
        }
        None
    })
}

/// A 200 with a playlist, gzip-compressed when `gzip` (the client takes it) and it is
/// large enough to gain.
fn playlist(body: String, cache: &str, gzip_ok: bool) -> Response {
    let packed = (gzip_ok && body.len() >= GZIP_FROM)
        .then(|| gzip(body.as_bytes()))
        .flatten();
    let compressed = packed.is_some();
    let body = packed.map_or_else(|| Body::from(body), Body::from);
    let mut r = ok(body, "application/vnd.apple.mpegurl", cache);
    if compressed {
        set(&mut r, header::CONTENT_ENCODING, "gzip");
    }
    set(&mut r, header::VARY, "Accept-Encoding");
    r
}

/// The first request of a player: admission, a session, packaging started, and the
/// multivariant playlist (returned as text): one variant per video layer (simulcast
/// layers, renditions), or the one `?layer=RID` names.
async fn open(
    st: &Arc<AppState>,
    peer: Peer,
    path: &StreamPath,
    query: Option<String>,
    headers: &HeaderMap,
) -> Result<String, HttpError> {
    let pin = query
        .as_deref()
        .and_then(|q| crate::http::reply::query_param(q, "layer"))
        .map(str::to_string);
    let play = st
        .begin_play(PlayAsk {
            app: path.app.clone(),
            stream: path.stream.clone(),
            protocol: Protocol::Hls,
            client: peer.0,
            credentials: credentials(headers, query),
            session: None,
            from_node: false,
        })
        .await?;
    let info = play.info();
    let video = st.engine.stats.video(info.index);
    if let Some(why) = crate::tap::refusal(&path.key(), video.codec) {
        return Err(HttpError::Conflict(why));
    }
    let rids = st.engine.stats.rids(info.index);
    let pin = match pin {
        None => None,
        Some(rid) => Some(layer_of(&path.key(), &rids, &rid)?),
    };
    let grant = play.admit(st).await?;
    let token = grant.session().to_string();
    let lifetime = grant.lifetime();
    let now = Instant::now();
    let started_before = st.hls.with_packager(info.index, 0, |_| ()).is_some();
    let key = match st.hls.open(
        token.clone(),
        info.index,
        peer.0.ip(),
        lifetime.map(|l| now + l),
        now,
    ) {
        Ok(k) => k,
        Err(OpenError::PerAddress(e)) => return Err(Refusal::TooMany(e).into()),
        Err(e @ OpenError::Full(_)) => {
            return Err(HttpError::Unavailable(format!("{e}; retry"), Some("5")));
        }
    };
    grant.started(st, key);
    if !started_before {
        // Segments start at a keyframe: ask the publisher for one now on every layer rather
        // than wait for its next (a WebRTC encoder sends them only when asked).
        let _ = st.engine.send(Command::RequestLayerKeyframes(info.index));
    }
    // The variants' attributes come from their first parts (the player would wait for them
    // on the media playlists anyway); past the waits the playlist goes out with what is
    // known.
    let stream = info.index;
    let top = Variant { stream, layer: 0 };
    let _ = wait_for(&st.hls, top, FIRST_PART_WAIT, has_a_part).await;
    let layers: Vec<u8> = match pin {
        Some(l) => vec![l],
        None => (0..rids.len().max(1).min(usize::from(u8::MAX)) as u8).collect(),
    };
    let deadline = tokio::time::Instant::now() + LADDER_WAIT;
    // The audio rendition too, where the audio is apart.
    let apart = st.hls.with_packager(stream, AUDIO_LAYER, |_| ()).is_some();
    let waits = layers.iter().copied().filter(|l| *l != 0);
    for layer in waits.chain(apart.then_some(AUDIO_LAYER)) {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let _ = wait_for(&st.hls, Variant { stream, layer }, left, has_a_part).await;
    }
    // The audio rendition, once it has its configuration: its codec, channels and rates
    // go into every variant's attributes.
    let audio = st
        .hls
        .with_packager(stream, AUDIO_LAYER, |p| {
            let codec = p.codecs().filter(|c| !c.is_empty())?;
            let stats = p.stats();
            Some(AudioRendition {
                codec,
                channels: p.audio_channels().unwrap_or(2),
                peak: stats.peak_bitrate,
                average: stats.average_bitrate,
            })
        })
        .flatten();
    let mut body = String::from("#EXTM3U\n");
    if let Some(a) = &audio {
        body.push_str(&format!(
            "#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"{AUDIO_GROUP}\",NAME=\"audio\",DEFAULT=YES,AUTOSELECT=YES,CHANNELS=\"{}\",URI=\"media.m3u8?{}\"\n",
            a.channels,
            audio_query(&token)
        ));
    }
    let mut variants = String::new();
    let mut independent = true;
    // Every layer comes from one capture: the top's rate is the ladder's (measured rates of
    // the lower layers differ from it by noise, which players would take for a real
    // difference when they switch).
    let fps = st
        .hls
        .with_packager(stream, 0, |p| p.stats().frame_rate_milli)
        .unwrap_or(0);
    for &layer in &layers {
        let attrs = st.hls.with_packager(stream, layer, |p| {
            (p.codecs().is_some() || layer == 0).then(|| {
                let attrs = variant_attributes(p, fps, audio.as_ref());
                (attrs, p.independent_segments())
            })
        });
        let (attrs, ind) = match attrs.flatten() {
            Some(a) => a,
            // The top before its first part: a typical 720p variant.
            None if layer == 0 => (format!("BANDWIDTH={DEFAULT_BANDWIDTH}"), true),
            // A lower layer that has not started: left out.
            None => continue,
        };
        independent &= ind;
        let rid = (layer != 0).then(|| rids.get(usize::from(layer))).flatten();
        let q = uri_query(&token, rid.map(|r| &**r));
        variants.push_str(&format!("#EXT-X-STREAM-INF:{attrs}\nmedia.m3u8?{q}\n"));
    }
    // In a multivariant playlist the tag covers every segment of every variant, now and
    // later: a lower variant may yet cut without a keyframe, so a ladder leaves it to each
    // media playlist.
    if independent && layers == [0] {
        body.push_str("#EXT-X-INDEPENDENT-SEGMENTS\n");
    }
    body.push_str(&variants);
    hub_count_playlist(&st.hls);
    Ok(body)
}

fn hub_count_playlist(hub: &Hls) {
    hub.counters
        .playlists
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// A variant's BANDWIDTH before anything is packaged: a typical 720p stream's.
const DEFAULT_BANDWIDTH: u64 = 2_500_000;

/// The `GROUP-ID` of a ladder's audio rendition.
const AUDIO_GROUP: &str = "audio";

/// What the variants of a ladder whose audio is apart say of its audio rendition.
struct AudioRendition {
    /// Its RFC 6381 codec (`mp4a.40.2`, `opus`).
    codec: String,
    channels: u8,
    /// Its peak and average bit rates (bit/s), as a variant's.
    peak: u64,
    average: u64,
}

/// The `EXT-X-STREAM-INF` attributes of a variant's packager. BANDWIDTH: the peak bit rate
/// of the segments held (of the first parts while no segment is complete), with a quarter
/// more for the peaks of segments to come; AVERAGE-BANDWIDTH over the segments held, once
/// one is complete; FRAME-RATE from `fps_milli` (the ladder's, frames per 1000 s: see
/// [`frame_rate`]). CODECS and RESOLUTION once the packager has its configurations. With
/// an audio rendition, the variant names its group (`AUDIO`), and its rates and CODECS
/// include the audio's (RFC 8216bis 4.4.6.2: every format of every rendition it may play
/// with).
fn variant_attributes(p: &Packager, fps_milli: u64, audio: Option<&AudioRendition>) -> String {
    let stats = p.stats();
    let (audio_peak, audio_average) = audio.map_or((0, 0), |a| (a.peak, a.average));
    let peak = stats.peak_bitrate;
    let bandwidth = if peak > 0 {
        (peak + audio_peak) + (peak + audio_peak) / 4
    } else {
        DEFAULT_BANDWIDTH
    };
    let mut attrs = format!("BANDWIDTH={bandwidth}");
    if stats.average_bitrate > 0 {
        let average = stats.average_bitrate + audio_average;
        attrs.push_str(&format!(",AVERAGE-BANDWIDTH={average}"));
    }
    if let Some(c) = p.codecs() {
        match audio {
            Some(a) => attrs.push_str(&format!(",CODECS=\"{c},{}\"", a.codec)),
            None => attrs.push_str(&format!(",CODECS=\"{c}\"")),
        }
    }
    if audio.is_some() {
        attrs.push_str(&format!(",AUDIO=\"{AUDIO_GROUP}\""));
    }
    if let Some((w, h)) = p.resolution().filter(|(w, h)| *w > 0 && *h > 0) {
        attrs.push_str(&format!(",RESOLUTION={w}x{h}"));
    }
    if let Some(fps) = frame_rate(fps_milli) {
        attrs.push_str(&format!(",FRAME-RATE={fps:.3}"));
    }
    attrs
}

/// The usual frame rates: a measured one within 3 % of one of them is taken as it.
const NOMINAL_RATES: [f64; 8] = [
    24_000.0 / 1001.0,
    24.0,
    25.0,
    30_000.0 / 1001.0,
    30.0,
    50.0,
    60_000.0 / 1001.0,
    60.0,
];

/// `FRAME-RATE` from a measured rate (frames per 1000 s): the nominal rate it is within
/// 3 % of, else the measurement; `None` without one.
fn frame_rate(fps_milli: u64) -> Option<f64> {
    let fps = fps_milli as f64 / 1000.0;
    if fps <= 0.0 {
        return None;
    }
    let nominal = NOMINAL_RATES
        .iter()
        .copied()
        .min_by(|a, b| (a - fps).abs().total_cmp(&(b - fps).abs()))
        .filter(|n| (n - fps).abs() <= 0.03 * n);
    Some(nominal.unwrap_or(fps))
}

/// Waits (bounded by `limit`) until `ready` holds for variant `v`'s packager (a lower
/// variant that has not started yet is waited for too). `Err` when the packaging stopped
/// or the wait timed out.
async fn wait_for(
    hub: &Hls,
    v: Variant,
    limit: Duration,
    ready: impl Fn(&Packager) -> bool,
) -> Result<(), &'static str> {
    let Some(mut rx) = hub.subscribe(v.stream) else {
        return Err("no such stream");
    };
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        rx.borrow_and_update();
        match hub.with_packager(v.stream, v.layer, &ready) {
            Some(true) => return Ok(()),
            Some(false) => {}
            None if hub.with_packager(v.stream, 0, |_| ()).is_none() => {
                return Err("the stream's packaging stopped");
            }
            None => {}
        }
        match tokio::time::timeout_at(deadline, rx.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err("the stream's packaging stopped"),
            Err(_) => return Err("timed out"),
        }
    }
}

/// Whether the packager has made a part (its playlist can be served).
fn has_a_part(p: &Packager) -> bool {
    p.oldest_msn().is_some_and(|m| p.has_part(m, 0))
}

fn unavailable(why: &str) -> HttpError {
    HttpError::Unavailable(why.to_string(), Some("1"))
}

/// `media.m3u8`, plain or blocking (`_HLS_msn`, `_HLS_part`): its text and its caching.
async fn media_playlist(
    hub: &Hls,
    v: Variant,
    uris: &str,
    q: &str,
) -> Result<(String, String), HttpError> {
    let msn = crate::http::reply::query_param(q, "_HLS_msn").map(str::parse::<u64>);
    let part = crate::http::reply::query_param(q, "_HLS_part").map(str::parse::<u32>);
    let target = Duration::from_millis(hub.settings().segment_target_ms);
    let (msn, part) = match (msn, part) {
        (Some(Err(_)), _) | (_, Some(Err(_))) => {
            return Err(HttpError::BadRequest(
                "_HLS_msn and _HLS_part must be numbers".into(),
            ));
        }
        (None, Some(_)) => {
            return Err(HttpError::BadRequest("_HLS_part needs _HLS_msn".into()));
        }
        (m, p) => (m.and_then(Result::ok), p.and_then(Result::ok)),
    };
    let blocking = msn.is_some();
    let waited = match msn {
        Some(m) => {
            let next = hub.with_packager(v.stream, v.layer, |p| p.next_part().0);
            if next.is_some_and(|n| m > n + 2) {
                return Err(HttpError::BadRequest(
                    "_HLS_msn is more than two segments past the playlist's last".into(),
                ));
            }
            // A part index past the segment's end means the next segment's first part.
            wait_for(hub, v, 3 * target.max(Duration::from_secs(1)), |p| {
                let (nm, np) = p.next_part();
                match part {
                    Some(i) => (nm, np) > (m, i),
                    None => nm > m,
                }
            })
            .await
        }
        None => {
            // Cold start: players without LL-HLS (ffmpeg, VLC) read whole segments and give
            // up on a playlist that lists none, so a plain request waits for the first one
            // (at most three segment targets), then takes what parts there are.
            let cold = wait_for(hub, v, 3 * target, Packager::has_complete_segment).await;
            match cold {
                Ok(()) => Ok(()),
                Err(_) => wait_for(hub, v, FIRST_PART_WAIT, has_a_part).await,
            }
        }
    };
    if let Err(why) = waited {
        return Err(unavailable(&format!("playlist not ready: {why}")));
    }
    let Some(body) = hub
        .with_packager(v.stream, v.layer, |p| p.media_playlist(uris))
        .flatten()
    else {
        return Err(unavailable("the stream's packaging stopped"));
    };
    hub_count_playlist(hub);
    let cache = if blocking {
        format!("public, max-age={}", target.as_secs().max(1))
    } else {
        "no-cache".to_string()
    };
    Ok((body, cache))
}

/// `{msn}.m4s`: a complete segment (waiting for the one in progress to complete).
async fn segment(hub: &Hls, v: Variant, msn: u64) -> Result<Response, HttpError> {
    let target = Duration::from_millis(hub.settings().segment_target_ms);
    let ahead = hub.with_packager(v.stream, v.layer, |p| msn > p.next_part().0);
    if ahead != Some(false) {
        return Err(HttpError::NotFound(format!("no segment {msn}")));
    }
    if wait_for(hub, v, 3 * target, |p| p.next_part().0 > msn)
        .await
        .is_err()
    {
        return Err(unavailable("segment not complete yet"));
    }
    match hub
        .with_packager(v.stream, v.layer, |p| p.segment(msn))
        .flatten()
    {
        Some(parts) => Ok(media(hub, parts, "public, max-age=60")),
        None => Err(HttpError::NotFound(format!("segment {msn} is gone"))),
    }
}

/// `{msn}.{part}.m4s`: a part; the one the playlist hints at next is waited for.
async fn part_of(hub: &Hls, v: Variant, msn: u64, part: u32) -> Result<Response, HttpError> {
    let part_target = Duration::from_millis(hub.settings().part_target_ms);
    let hinted = hub.with_packager(v.stream, v.layer, |p| {
        let (nm, np) = p.next_part();
        (msn, part) == (nm, np) || (msn == nm + 1 && part == 0)
    });
    if hinted == Some(true)
        && wait_for(hub, v, 3 * part_target + Duration::from_secs(1), |p| {
            p.has_part(msn, part) || p.next_part().0 > msn
        })
        .await
        .is_err()
    {
        return Err(unavailable("part not made yet"));
    }
    match hub
        .with_packager(v.stream, v.layer, |p| p.part(msn, part))
        .flatten()
    {
        Some(b) => Ok(media(hub, vec![b], "public, max-age=60")),
        None => Err(HttpError::NotFound(format!(
            "no part {part} of segment {msn}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names() {
        assert_eq!(
            resource("index.m3u8"),
            None,
            "answered before resources are parsed"
        );
        assert_eq!(resource("media.m3u8"), Some(Resource::Media));
        assert_eq!(resource("init0.mp4"), Some(Resource::Init(0)));
        assert_eq!(resource("12.m4s"), Some(Resource::Segment(12)));
        assert_eq!(resource("12.3.m4s"), Some(Resource::Part(12, 3)));
        for bad in [
            "whep",
            "x.m4s",
            "1.x.m4s",
            "init.mp4",
            "1.2.3.m4s",
            "",
            "-1.m4s",
        ] {
            assert_eq!(resource(bad), None, "{bad}");
        }
    }

    #[test]
    fn accept_encoding_is_read_as_rfc_9110_says() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(
                header::ACCEPT_ENCODING,
                HeaderValue::from_str(v).expect("a header value"),
            );
            accepts_gzip(&h)
        };
        assert!(!accepts_gzip(&HeaderMap::new()));
        for yes in [
            "gzip",
            "gzip, deflate, br, zstd",
            "br;q=1.0, GZIP;q=0.5",
            "x-gzip",
            "*",
            "deflate, *;q=0.1",
            "gzip;q=0.5, *;q=0",
        ] {
            assert!(with(yes), "{yes}");
        }
        for no in [
            "identity",
            "br, deflate",
            "gzip;q=0",
            "gzip; q=0.000",
            "GZIP;Q=0",
            "gzipped",
            "gzip;q=0, *",
            "*, gzip;q=0",
            "x-gzip;q=0, *",
            "*;q=0",
        ] {
            assert!(!with(no), "{no}");
        }
    }

    #[test]
    fn a_playlist_is_gzipped_when_asked_and_large_enough() {
        use std::io::Read;
        let text: String = (0..40)
            .map(|i| {
                format!("#EXT-X-PART:DURATION=0.500,URI=\"{i}.0.m4s?session=AbCdEfGhIjKlMnOp\"\n")
            })
            .collect();
        let r = playlist(text.clone(), "no-cache", true);
        assert_eq!(r.headers()[header::CONTENT_ENCODING], "gzip");
        assert_eq!(r.headers()[header::VARY], "Accept-Encoding");
        let packed = gzip(text.as_bytes()).expect("gzip");
        assert!(
            packed.len() * 4 < text.len(),
            "{} of {}",
            packed.len(),
            text.len()
        );
        let gunzip = |packed: &[u8]| {
            let mut back = Vec::new();
            flate2::read::GzDecoder::new(packed)
                .read_to_end(&mut back)
                .expect("gunzip");
            back
        };
        assert_eq!(gunzip(&packed), text.as_bytes());
        // The thread's deflate state is reset between playlists; output that does not fit
        // the first guess (200 KB that do not compress) grows.
        let noise: Vec<u8> = (0..200_000).map(|_| rand::random::<u8>()).collect();
        assert_eq!(gunzip(&gzip(&noise).expect("gzip")), noise);
        assert_eq!(
            gunzip(&gzip(text.as_bytes()).expect("gzip")),
            text.as_bytes()
        );
        // Not asked, or too small to gain: as it is, still saying that it varies.
        let r = playlist(text.clone(), "no-cache", false);
        assert!(r.headers().get(header::CONTENT_ENCODING).is_none());
        assert_eq!(r.headers()[header::VARY], "Accept-Encoding");
        let r = playlist("#EXTM3U\n".into(), "no-cache", true);
        assert!(r.headers().get(header::CONTENT_ENCODING).is_none());
    }

    #[test]
    fn frame_rates_snap_to_the_usual_ones() {
        assert_eq!(frame_rate(0), None);
        assert_eq!(frame_rate(29_500), Some(30_000.0 / 1001.0));
        assert_eq!(frame_rate(30_400), Some(30.0));
        assert_eq!(frame_rate(24_990), Some(25.0));
        assert_eq!(frame_rate(18_867), Some(18.867));
        assert_eq!(frame_rate(59_100), Some(60_000.0 / 1001.0));
    }

    #[test]
    fn query_params() {
        let q = "session=abc&_HLS_msn=4&_HLS_part=1";
        assert_eq!(crate::http::reply::query_param(q, "session"), Some("abc"));
        assert_eq!(crate::http::reply::query_param(q, "_HLS_msn"), Some("4"));
        assert_eq!(crate::http::reply::query_param(q, "_HLS_part"), Some("1"));
        assert_eq!(crate::http::reply::query_param(q, "_HLS"), None);
        assert_eq!(crate::http::reply::query_param("", "session"), None);
    }
}

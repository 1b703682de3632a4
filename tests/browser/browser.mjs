// Launches Debian's headless Chromium through playwright-core, in a fresh profile that is
// removed again on close. Refuses to run outside a private network namespace
// (scripts/netns-run.sh), so that the browser can offer no ICE candidate on a real interface.

import { execFileSync } from 'node:child_process';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

export const CHROMIUM = process.env.TERN_CHROMIUM || '/usr/bin/chromium';

export const CHROMIUM_FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--disable-features=WebRtcHideLocalIpsWithMdns',
  '--use-fake-ui-for-media-stream',
];

/** The private range scripts/netns-run.sh puts on its veth pair (198.18.0.0/15, RFC 2544). */
function isPrivateTestAddress(addr) {
  return /^198\.1[89]\./.test(addr);
}

/**
 * Throws unless every interface is loopback or carries only netns-run.sh's test addresses
 * (IPv6 link-local aside). Set TERN_BROWSER_HOST_NET=1 to skip the check (not for CI).
 */
export function assertPrivateNetwork() {
  if (process.env.TERN_BROWSER_HOST_NET === '1') return;
  const offending = [];
  for (const [name, addrs] of Object.entries(networkInterfaces())) {
    for (const a of addrs ?? []) {
      if (a.internal) continue;
      if (a.family === 'IPv6' && a.address.toLowerCase().startsWith('fe80:')) continue;
      if (a.family === 'IPv4' && isPrivateTestAddress(a.address)) continue;
      offending.push(`${name} ${a.address}`);
    }
  }
  if (offending.length > 0) {
    throw new Error(
      `browser tests must run inside a private network namespace ` +
        `(./scripts/netns-run.sh node --test tests/browser/); found: ${offending.join(', ')}`,
    );
  }
}

/**
 * Starts Chromium with a fresh --user-data-dir. Returns { context, close }; close() shuts the
 * browser down and deletes the profile directory. `executablePath` replaces Debian's chromium
 * (e.g. a wrapper that runs it in another network namespace); `extraArgs` are added to the
 * standard flags (e.g. a certificate to trust).
 */
export async function launchBrowser({ executablePath = CHROMIUM, extraArgs = [] } = {}) {
  assertPrivateNetwork();
  const userDataDir = await mkdtemp(join(tmpdir(), 'tern-chromium-'));
  let context;
  try {
    // launchPersistentContext is playwright's way to pass --user-data-dir.
    context = await chromium.launchPersistentContext(userDataDir, {
      executablePath,
      headless: true,
      args: [...CHROMIUM_FLAGS, ...extraArgs],
      timeout: 30_000,
    });
  } catch (err) {
    await rm(userDataDir, { recursive: true, force: true });
    throw new Error(`cannot start ${executablePath}: ${err.message}`);
  }
  let closed = false;
  return {
    context,
    async close() {
      if (closed) return;
      closed = true;
      try {
        await context.close();
      } finally {
        await rm(userDataDir, { recursive: true, force: true });
      }
    },
  };
}

/** Opens a page that records console messages and page errors, for failure messages. */
/**
 * `page.goto(url, options)`, once more if Chromium answers `net::ERR_NETWORK_CHANGED`: it
 * says so when an interface of its network namespace comes or goes, which tests running
 * beside it do (CI: an https page's first load, while another test set up its own).
 */
export async function gotoSteady(page, url, options) {
  try {
    return await page.goto(url, options);
  } catch (err) {
    if (!String(err?.message ?? err).includes('ERR_NETWORK_CHANGED')) throw err;
    console.log(`# ${url}: ERR_NETWORK_CHANGED, loading once more`);
    await new Promise((ok) => setTimeout(ok, 500));
    return page.goto(url, options);
  }
}

export async function newLoggedPage(context) {
  const page = await context.newPage();
  const log = [];
  page.on('console', (m) => log.push(`console.${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => log.push(`pageerror: ${e.message}`));
  page.on('requestfailed', (r) => log.push(`requestfailed: ${r.method()} ${r.url()} ${r.failure()?.errorText}`));
  return { page, log: () => log.slice(-30).join('\n') };
}

/**
 * Runs in a player page (`page.evaluate(readVideo)`): the video inbound-rtp figures of the
 * player's peer connection (`window.ternPc`), and its ICE state; `{}` before it exists.
 */
export async function readVideo() {
  const pc = window.ternPc;
  if (!pc) return {};
  const out = { ice: pc.iceConnectionState, audioPackets: 0 };
  (await pc.getStats()).forEach((s) => {
    if (s.type === 'inbound-rtp' && s.kind === 'audio') out.audioPackets = s.packetsReceived ?? 0;
    if (s.type !== 'inbound-rtp' || s.kind !== 'video') return;
    Object.assign(out, {
      framesDecoded: s.framesDecoded ?? 0,
      framesDropped: s.framesDropped ?? 0,
      keyFramesDecoded: s.keyFramesDecoded ?? 0,
      packetsReceived: s.packetsReceived ?? 0,
      packetsLost: s.packetsLost ?? 0,
      nackCount: s.nackCount ?? 0,
      pliCount: s.pliCount ?? 0,
      freezeCount: s.freezeCount ?? 0,
      totalFreezesDuration: s.totalFreezesDuration ?? 0,
      frameWidth: s.frameWidth ?? 0,
    });
  });
  return out;
}

/**
 * In a page (`page.evaluate(publishCanvas, { endpoint, codec, tone, width, height })`):
 * publishes a 30 fps canvas (640x360 unless `width` and `height` say) over WHIP with only
 * `codec` offered (and, with `tone`, a 440 Hz tone as a
 * second, audio track); the peer connection is window.pubPc, the drawing timer
 * window.drawTimer and the WHIP resource window.whipLocation. Returns the video codecs the
 * answer names (`answered`) and its audio ones (`audio`), or `{ error }`.
 */
export async function publishCanvas({ endpoint, codec, tone = false, width = 640, height = 360 }) {
  const canvas = document.createElement('canvas');
  canvas.width = width;
  canvas.height = height;
  document.body.append(canvas);
  const g = canvas.getContext('2d');
  let n = 0;
  // Drawn every 16 ms and captured at 30 fps at most: every 33 ms capture window holds a
  // new picture, where a 33 ms timer's jitter left some windows without one (24-29.5 fps).
  window.drawTimer = setInterval(() => {
    n += 1;
    g.fillStyle = `hsl(${(n * 4) % 360} 80% 50%)`;
    g.fillRect(0, 0, width, height);
    g.fillStyle = '#fff';
    g.font = `${Math.round(height / 7.5)}px sans-serif`;
    g.fillText(String(n), width / 16 + (n % Math.round(width * 0.6)), height / 2);
  }, 16);
  const caps = RTCRtpSender.getCapabilities('video').codecs;
  const want = caps.filter((c) => c.mimeType.toLowerCase() === `video/${codec.toLowerCase()}`);
  if (want.length === 0) return { error: `this Chromium cannot send ${codec}: ${caps.map((c) => c.mimeType).join(' ')}` };
  const pc = new RTCPeerConnection();
  window.pubPc = pc;
  const track = canvas.captureStream(30).getVideoTracks()[0];
  // Keep the frame rate when the encoder is short of CPU (a smaller picture instead).
  track.contentHint = 'motion';
  const tr = pc.addTransceiver(track, { direction: 'sendonly' });
  tr.setCodecPreferences(want);
  const params = tr.sender.getParameters();
  params.degradationPreference = 'maintain-framerate';
  await tr.sender.setParameters(params).catch(() => {});
  if (tone) {
    const ac = new AudioContext();
    const osc = ac.createOscillator();
    osc.frequency.value = 440;
    const dest = ac.createMediaStreamDestination();
    osc.connect(dest);
    osc.start();
    await ac.resume();
    pc.addTransceiver(dest.stream.getAudioTracks()[0], { direction: 'sendonly' });
  }
  await pc.setLocalDescription(await pc.createOffer());
  await new Promise((ok) => {
    if (pc.iceGatheringState === 'complete') ok();
    pc.onicegatheringstatechange = () => pc.iceGatheringState === 'complete' && ok();
    setTimeout(ok, 2000);
  });
  const res = await fetch(endpoint, {
    method: 'POST',
    headers: { 'content-type': 'application/sdp' },
    body: pc.localDescription.sdp,
  });
  const answer = await res.text();
  if (res.status !== 201) return { error: `WHIP POST ${res.status}: ${answer}` };
  await pc.setRemoteDescription({ type: 'answer', sdp: answer });
  window.whipLocation = new URL(res.headers.get('location'), endpoint).toString();
  const answered = [...new Set([...answer.matchAll(/a=rtpmap:\d+ ([^/]+)\/90000/g)].map((m) => m[1]))]
    .filter((c) => !/^(rtx|red|ulpfec)$/i.test(c));
  const audio = [...new Set([...answer.matchAll(/a=rtpmap:\d+ ([^/]+)\/48000/g)].map((m) => m[1]))];
  return { answered, audio };
}

/**
 * In the page: publishes a 30 fps 16:9 canvas (`width` wide, 1280 by default) over WHIP as simulcast with `rids` (the
 * first full size, each next one half the size of the one before, each at most its entry of
 * `maxBitrates`), in `codec` (`vp8`, or `h264` in packetization mode 1); with `tone`, a
 * 440 Hz tone too (Opus). Returns `{ ok: true }` or `{ error }`.
 */
export async function publishSimulcast({ endpoint, rids, codec = 'vp8', maxBitrates = [2_000_000, 600_000, 200_000], width = 1280, tone = false }) {
  const W = width;
  const H = (width * 9) / 16;
  const canvas = document.createElement('canvas');
  canvas.width = W;
  canvas.height = H;
  document.body.append(canvas);
  const g = canvas.getContext('2d');
  let n = 0;
  window.drawTimer = setInterval(() => {
    n += 1;
    // Moving detail, so that each layer has a bitrate of its own.
    g.fillStyle = `hsl(${(n * 7) % 360} 80% 50%)`;
    g.fillRect(0, 0, W, H);
    g.fillStyle = '#fff';
    g.font = '96px sans-serif';
    for (let i = 0; i < 6; i++) g.fillText(String(n + i), (n * 9 + i * 200) % W, 100 + i * 110);
  }, 33);
  const pc = new RTCPeerConnection();
  window.pubPc = pc;
  const track = canvas.captureStream(30).getVideoTracks()[0];
  const tr = pc.addTransceiver(track, {
    direction: 'sendonly',
    sendEncodings: rids.map((rid, i) => ({
      rid,
      scaleResolutionDownBy: 2 ** i,
      maxBitrate: maxBitrates[i],
    })),
  });
  const want = new RegExp(codec, 'i');
  const prefs = RTCRtpSender.getCapabilities('video').codecs.filter(
    (c) => want.test(c.mimeType) && (codec !== 'h264' || /packetization-mode=1/.test(c.sdpFmtpLine ?? '')),
  );
  tr.setCodecPreferences(prefs);
  if (tone) {
    const ac = new AudioContext();
    const osc = ac.createOscillator();
    osc.frequency.value = 440;
    const dest = ac.createMediaStreamDestination();
    osc.connect(dest);
    osc.start();
    await ac.resume();
    pc.addTransceiver(dest.stream.getAudioTracks()[0], { direction: 'sendonly' });
  }
  await pc.setLocalDescription(await pc.createOffer());
  await new Promise((ok) => {
    if (pc.iceGatheringState === 'complete') ok();
    pc.onicegatheringstatechange = () => pc.iceGatheringState === 'complete' && ok();
    setTimeout(ok, 2000);
  });
  const res = await fetch(endpoint, {
    method: 'POST',
    headers: { 'content-type': 'application/sdp' },
    body: pc.localDescription.sdp,
  });
  const answer = await res.text();
  if (res.status !== 201) return { error: `WHIP POST ${res.status}: ${answer}` };
  await pc.setRemoteDescription({ type: 'answer', sdp: answer });
  return { ok: true };
}

/** In the publisher's page: per RID, the frame width and frames sent of its outbound-rtp. */
export async function readLayers() {
  const out = {};
  (await window.pubPc.getStats()).forEach((s) => {
    if (s.type === 'outbound-rtp' && s.kind === 'video' && s.rid) {
      out[s.rid] = {
        width: s.frameWidth ?? 0,
        frames: s.framesSent ?? 0,
        bytes: s.bytesSent ?? 0,
        fps: s.framesPerSecond ?? 0,
        limit: s.qualityLimitationReason,
        plis: s.pliCount ?? 0,
        keyframes: s.keyFramesEncoded ?? 0,
      };
    }
  });
  return out;
}

/** In a viewer page (`page.evaluate(openWhepViewer, { endpoint })`): opens a WHEP viewer on
 * `endpoint` (video, and audio too with `audio: true`), kept as window.viewPc. */
export async function openWhepViewer({ endpoint, audio = false }) {
  const pc = new RTCPeerConnection();
  window.viewPc = pc;
  pc.addTransceiver('video', { direction: 'recvonly' });
  if (audio) pc.addTransceiver('audio', { direction: 'recvonly' });
  await pc.setLocalDescription(await pc.createOffer());
  await new Promise((ok) => setTimeout(ok, 300));
  const res = await fetch(endpoint, {
    method: 'POST',
    headers: { 'content-type': 'application/sdp' },
    body: pc.localDescription.sdp,
  });
  const answer = await res.text();
  if (res.status !== 201) return { status: res.status, error: answer };
  await pc.setRemoteDescription({ type: 'answer', sdp: answer });
  window.viewLocation = new URL(res.headers.get('location'), endpoint).toString();
  return { status: res.status };
}

/** In a viewer page opened by openWhepViewer: its video inbound-rtp figures. */
export async function readWhepViewer() {
  const pc = window.viewPc;
  const out = { ice: pc.iceConnectionState, audioPackets: 0 };
  (await pc.getStats()).forEach((s) => {
    if (s.type === 'inbound-rtp' && s.kind === 'audio') out.audioPackets = s.packetsReceived ?? 0;
    if (s.type !== 'inbound-rtp' || s.kind !== 'video') return;
    Object.assign(out, {
      width: s.frameWidth ?? 0,
      frames: s.framesDecoded ?? 0,
      lost: s.packetsLost ?? 0,
      freezes: s.freezeCount ?? 0,
      freezeSecs: s.totalFreezesDuration ?? 0,
      keyframes: s.keyFramesDecoded ?? 0,
      received: s.framesReceived ?? 0,
      dropped: s.framesDropped ?? 0,
      nacks: s.nackCount ?? 0,
      plis: s.pliCount ?? 0,
      packets: s.packetsReceived ?? 0,
    });
  });
  return out;
}

/** In the page (hls.js loaded): plays `url` muted in a new <video>, with lowLatencyMode. */
export function startHls({ url }) {
  const video = document.createElement('video');
  video.muted = true;
  video.autoplay = true;
  video.playsInline = true;
  document.body.append(video);
  const st = { errors: [], parts: 0, frags: 0, playingAt: null, startedAt: performance.now(), waiting: 0 };
  window.hlsState = st;
  // eslint-disable-next-line no-undef
  const H = Hls;
  if (!H.isSupported()) return { error: 'Hls.isSupported() is false: no MediaSource with H264/AAC in this Chromium' };
  const hls = new H({ lowLatencyMode: true, backBufferLength: 30 });
  window.hls = hls;
  hls.on(H.Events.ERROR, (_e, d) => {
    st.errors.push({
      type: d.type, details: d.details, fatal: d.fatal,
      reason: d.reason ?? d.error?.message ?? null,
      url: d.frag?.url ?? d.part?.url ?? d.url ?? d.context?.url ?? null,
      code: d.response?.code ?? null,
    });
  });
  hls.on(H.Events.FRAG_LOADED, (_e, d) => {
    if (d.part) st.parts += 1;
    else st.frags += 1;
  });
  hls.on(H.Events.MANIFEST_PARSED, () => {
    video.play().catch((err) => st.errors.push({ type: 'play()', details: err.message, fatal: false }));
  });
  video.addEventListener('playing', () => {
    st.playingAt ??= performance.now() - st.startedAt;
  });
  video.addEventListener('waiting', () => {
    st.waiting += 1;
  });
  hls.loadSource(url);
  hls.attachMedia(video);
  return { version: H.version };
}

/** In the page: the <video>'s and hls.js's figures. */
export function readHls() {
  const video = document.querySelector('video');
  const hls = window.hls;
  const q = video.getVideoPlaybackQuality();
  const level = hls.levels?.[Math.max(hls.currentLevel, 0)];
  const d = level?.details;
  return {
    currentTime: video.currentTime,
    paused: video.paused,
    readyState: video.readyState,
    videoWidth: video.videoWidth,
    videoHeight: video.videoHeight,
    frames: q.totalVideoFrames,
    dropped: q.droppedVideoFrames,
    audioBytes: video.webkitAudioDecodedByteCount ?? null,
    buffered: video.buffered.length ? video.buffered.end(video.buffered.length - 1) - video.currentTime : 0,
    latency: hls.latency,
    targetLatency: hls.targetLatency,
    playingDate: hls.playingDate ? hls.playingDate.getTime() : null,
    now: Date.now(),
    live: d?.live ?? null,
    canBlockReload: d?.canBlockReload ?? null,
    partTarget: d?.partTarget ?? null,
    partHoldBack: d?.partHoldBack ?? null,
    videoCodec: level?.videoCodec ?? null,
    audioCodec: level?.audioCodec ?? null,
    ...window.hlsState,
    errors: window.hlsState.errors.slice(-10),
  };
}

const run = (cmd, ...args) => execFileSync(cmd, args, { stdio: 'pipe' });

/**
 * A narrow link for adaptive tests: a network namespace of its own joined to this one by a
 * veth pair (198.19.0.1 here, 198.19.0.2 there, RFC 2544 range, existing only inside the
 * test's namespace). `limit(rate)` puts a token bucket (`tc tbf`) on this end, so what tern
 * sends to the namespace is held to `rate`; `lift()` takes it off; `stats()` reads its
 * counters. `wrap(bin, dir)` writes a
 * script that runs `bin` in the namespace (e.g. Chromium for playwright); `exec(args)`
 * gives the argv that runs a command there. `close()` deletes both. Needs root in the test's
 * namespace (scripts/netns-run.sh).
 */
export function narrowLink() {
  const ns = `tern-lim-${process.pid}`;
  const dev = `tlim${process.pid % 10000}`;
  const host = '198.19.0.1';
  const peer = '198.19.0.2';
  run('ip', 'netns', 'add', ns);
  run('ip', 'link', 'add', dev, 'type', 'veth', 'peer', 'name', `${dev}p`);
  run('ip', 'link', 'set', `${dev}p`, 'netns', ns);
  run('ip', 'addr', 'add', `${host}/24`, 'dev', dev);
  run('ip', 'link', 'set', dev, 'up');
  run('ip', 'netns', 'exec', ns, 'ip', 'addr', 'add', `${peer}/24`, 'dev', `${dev}p`);
  run('ip', 'netns', 'exec', ns, 'ip', 'link', 'set', `${dev}p`, 'up');
  run('ip', 'netns', 'exec', ns, 'ip', 'link', 'set', 'lo', 'up');
  return {
    ns,
    dev,
    host,
    peer,
    limit: (rate) => run('tc', 'qdisc', 'replace', 'dev', dev, 'root', 'tbf', 'rate', rate, 'burst', '20kb', 'latency', '300ms'),
    lift: () => run('tc', 'qdisc', 'del', 'dev', dev, 'root'),
    /** The root qdisc's counters on this end (what went towards the namespace): bytes and
     * packets sent, packets dropped (the token bucket's queue was full), and its backlog. */
    stats() {
      const out = run('tc', '-s', 'qdisc', 'show', 'dev', dev).toString();
      const m = out.match(/Sent (\d+) bytes (\d+) pkt \(dropped (\d+), overlimits (\d+)/);
      const b = out.match(/backlog (\S+) (\d+)p/);
      return m ? { bytes: +m[1], packets: +m[2], dropped: +m[3], overlimits: +m[4], backlog: b?.[1] } : null;
    },
    exec: (args) => ['ip', ['netns', 'exec', ns, ...args]],
    async wrap(bin, dir) {
      const path = join(dir, `in-${ns}`);
      await writeFile(path, `#!/bin/sh\nexec ip netns exec ${ns} ${bin} "$@"\n`);
      await chmod(path, 0o755);
      return path;
    },
    close() {
      try {
        run('ip', 'netns', 'del', ns);
      } catch {}
      try {
        run('ip', 'link', 'del', dev);
      } catch {}
    },
  };
}

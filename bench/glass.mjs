// Glass-to-glass latency added by SRT ingest against RTMP's (issue 36), on one host and one
// clock. A generator (this script) writes raw 640x360 grey frames at 30 fps into ffmpeg's
// stdin; each frame carries Date.now() at the moment it is written, as a barcode of 40
// large black/white blocks (32 bits of the millisecond clock and an 8-bit check), robust to
// x264 at 1.5 Mbit/s. ffmpeg (x264 Baseline, -tune zerolatency, a keyframe a second; with
// GLASS_AUDIO=1 also silent AAC from `-re anullsrc`) publishes to `tern demo` over SRT (an app at libsrt's default 120 ms latency and one
// at 200 ms) and over RTMP, one arm after the other in the same run. Headless Chromium plays
// each over WHEP; in requestVideoFrameCallback it draws the frame to a canvas, reads the
// barcode and records Date.now() minus the encoded time. Per arm: median, p95, min, max of
// the samples after a warm-up, and how many frames did not decode as a barcode.
//
//   ./scripts/netns-run.sh node bench/glass.mjs [SECONDS]     (bench/glass.sh does this)
//
// Video alone by default: with the silent AAC track, ffmpeg's own interleaving of the paced
// pipe and the `-re` audio source held the video back by ~0.7 s, a delay that varies from
// arm to arm and drowns the difference between the ingest protocols (BENCHMARKS.md has
// both runs). GLASS_ARGS adds encoder options.
//
// Every loop is bounded: frames by SECONDS, waits by deadlines.

import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { launchBrowser, newLoggedPage, openWhepViewer } from '../tests/browser/browser.mjs';
import { freeTcpPort, startServer } from '../tests/browser/server.mjs';

const SECONDS = Number(process.argv[2] ?? 20);
const WARMUP_MS = 3_000;
const W = 640;
const H = 360;
const COLS = 8;
const ROWS = 5;
const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

/** The 40 bits of a frame: `ms` (32 bits, low first) and a check byte. */
function bits(ms) {
  const b = [];
  for (let i = 0; i < 32; i++) b.push((ms >>> i) & 1);
  const check = (((ms & 0xff) + ((ms >>> 8) & 0xff) + ((ms >>> 16) & 0xff) + ((ms >>> 24) & 0xff)) & 0xff) ^ 0xa5;
  for (let i = 0; i < 8; i++) b.push((check >>> i) & 1);
  return b;
}

/** A grey frame with `ms` drawn as blocks (white = 1). */
function frame(ms) {
  const f = Buffer.alloc(W * H);
  const b = bits(ms);
  const bw = W / COLS;
  const bh = H / ROWS;
  for (let k = 0; k < b.length; k++) {
    if (!b[k]) continue;
    const x0 = (k % COLS) * bw;
    const y0 = Math.floor(k / COLS) * bh;
    for (let y = y0; y < y0 + bh; y++) f.fill(255, y * W + x0, y * W + x0 + bw);
  }
  return f;
}

/** Starts ffmpeg publishing generated frames to `target` as `format`; frames for `seconds`. */
function publish(target, format, seconds) {
  const ff = spawn('ffmpeg', [
    '-hide_banner', '-nostdin', '-loglevel', 'warning',
    '-f', 'rawvideo', '-pix_fmt', 'gray', '-s', `${W}x${H}`, '-framerate', '30', '-i', 'pipe:0',
    ...(process.env.GLASS_AUDIO !== '1' ? [] : [
      '-re', '-f', 'lavfi', '-i', 'anullsrc=channel_layout=stereo:sample_rate=44100',
      '-map', '0:v', '-map', '1:a', '-shortest']),
    '-c:v', 'libx264', '-preset', 'veryfast', '-tune', 'zerolatency', '-profile:v', 'baseline',
    '-g', '30', '-b:v', '1500k', '-pix_fmt', 'yuv420p', '-c:a', 'aac', '-flush_packets', '1',
    ...(process.env.GLASS_ARGS ?? '').split(' ').filter(Boolean),
    '-f', format, target,
  ], { stdio: ['pipe', 'ignore', 'pipe'] });
  let log = '';
  ff.stderr.on('data', (d) => { log = (log + d).slice(-4000); });
  ff.stdin.on('error', () => {});
  const total = Math.round(seconds * 30);
  const t0 = Date.now();
  let i = 0;
  const next = () => {
    if (i >= total || ff.exitCode !== null) return ff.stdin.end();
    ff.stdin.write(frame(Date.now() % 2 ** 32));
    i += 1;
    setTimeout(next, Math.max(0, t0 + (i * 1000) / 30 - Date.now()));
  };
  next();
  return { ff, log: () => log };
}

/** In the page: attaches the WHEP viewer's video and measures each frame's latency. */
async function measure({ cols, rows, w, h }) {
  const pc = window.viewPc;
  const track = pc.getReceivers().map((r) => r.track).find((t) => t.kind === 'video');
  const v = document.createElement('video');
  v.muted = true;
  v.playsInline = true;
  v.srcObject = new MediaStream([track]);
  document.body.appendChild(v);
  await v.play();
  const canvas = new OffscreenCanvas(w, h);
  const g = canvas.getContext('2d', { willReadFrequently: true });
  const out = { samples: [], bad: 0, frames: 0 };
  window.glass = out;
  const bw = w / cols;
  const bh = h / rows;
  const cb = () => {
    const now = Date.now() % 2 ** 32;
    out.frames += 1;
    g.drawImage(v, 0, 0, w, h);
    const d = g.getImageData(0, 0, w, h).data;
    const b = [];
    for (let k = 0; k < cols * rows; k++) {
      const cx = Math.floor((k % cols) * bw + bw / 2);
      const cy = Math.floor(Math.floor(k / cols) * bh + bh / 2);
      let sum = 0;
      for (let y = cy - 8; y < cy + 8; y++) for (let x = cx - 8; x < cx + 8; x++) sum += d[(y * w + x) * 4];
      b.push(sum / 256 > 128 ? 1 : 0);
    }
    let ms = 0;
    for (let i = 0; i < 32; i++) ms += b[i] * 2 ** i;
    let check = 0;
    for (let i = 0; i < 8; i++) check |= b[32 + i] << i;
    const want = (((ms & 0xff) + ((ms >>> 8) & 0xff) + ((ms >>> 16) & 0xff) + ((ms >>> 24) & 0xff)) & 0xff) ^ 0xa5;
    const lat = (now - ms + 2 ** 32) % 2 ** 32;
    if (check === want && lat < 10_000) out.samples.push([Date.now(), lat]);
    else out.bad += 1;
    v.requestVideoFrameCallback(cb);
  };
  v.requestVideoFrameCallback(cb);
  return true;
}

function stats(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const q = (p) => s[Math.min(s.length - 1, Math.floor(p * s.length))];
  return { n: s.length, median: q(0.5), p95: q(0.95), min: s[0], max: s[s.length - 1] };
}

async function arm(server, browser, name, key, target, format) {
  const pub = publish(target, format, SECONDS + 8);
  const deadline = Date.now() + 15_000;
  while (!server.output().includes(`${key} is live`)) {
    if (Date.now() > deadline) {
      pub.ff.kill('SIGKILL');
      throw new Error(`${key} did not go live\n--- ffmpeg ---\n${pub.log()}\n--- server ---\n${server.tail()}`);
    }
    await sleep(100);
  }
  const { page, log } = await newLoggedPage(browser.context);
  try {
    await page.goto(`${server.base}/`, { timeout: 10_000, waitUntil: 'domcontentloaded' });
    const r = await page.evaluate(openWhepViewer, { endpoint: `${server.base}/${key}/whep`, audio: true });
    if (r.status !== 201) throw new Error(`${key}: WHEP ${r.status} ${r.error}`);
    await page.evaluate(measure, { cols: COLS, rows: ROWS, w: W, h: H });
    const start = Date.now();
    await sleep(WARMUP_MS + SECONDS * 1000);
    const g = await page.evaluate(() => window.glass);
    const kept = g.samples.filter(([t]) => t >= start + WARMUP_MS).map(([, l]) => l);
    if (kept.length === 0) throw new Error(`${name}: no frame decoded as a barcode (${JSON.stringify({ frames: g.frames, bad: g.bad })})\n${log()}`);
    const s = stats(kept);
    const row = { arm: name, ...s, frames: g.frames, undecoded: g.bad };
    console.log(JSON.stringify(row));
    return row;
  } finally {
    await page.close();
    pub.ff.kill('SIGTERM');
    await sleep(1_000);
  }
}

const dir = await mkdtemp(join(tmpdir(), 'tern-glass-'));
const config = join(dir, 'tern.toml');
await writeFile(config, '[[app]]\nname = "live"\n\n[[app]]\nname = "l200"\nsrt_latency_ms = 200\n');
const rtmp = await freeTcpPort();
const server = await startServer({
  readyTimeoutMs: 20_000,
  extraArgs: ['--config', config, '--rtmp', `127.0.0.1:${rtmp}`, '--srt', '127.0.0.1:0'],
});
const srt = /\bsrt=(\S+)/.exec(server.output())?.[1];
const browser = await launchBrowser();
const rows = [];
try {
  if (!srt || srt === '-') throw new Error(`no SRT address in\n${server.tail()}`);
  rows.push(await arm(server, browser, 'rtmp', 'live/rtmp', `rtmp://127.0.0.1:${rtmp}/live/rtmp`, 'flv'));
  rows.push(await arm(server, browser, 'srt latency 120 ms', 'live/srt120', `srt://${srt}?streamid=live/srt120`, 'mpegts'));
  rows.push(await arm(server, browser, 'srt latency 200 ms', 'l200/srt200', `srt://${srt}?streamid=l200/srt200`, 'mpegts'));
} finally {
  await browser.close();
  await server.stop();
  await rm(dir, { recursive: true, force: true });
}
const base = rows[0].median;
console.log('\n| arm | frames measured | median ms | p95 ms | min ms | max ms | median − RTMP |');
console.log('|---|---|---|---|---|---|---|');
for (const r of rows) {
  console.log(`| ${r.arm} | ${r.n} | ${r.median} | ${r.p95} | ${r.min} | ${r.max} | ${r.median - base} |`);
}

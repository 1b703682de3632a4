// Non-browser WHEP viewers for the adaptive tests, as child processes that print one JSON
// line of cumulative figures every half second: the pion/webrtc v4 viewer
// (tests/interop/pion-viewer, built by scripts/install-deps.sh) and aiortc
// (tests/interop/aiortc_client.py `watch`, in the venv install-deps.sh makes). Both print
// `frames`, `video_packets`, `lost`, `audio_packets` and `audio_gap_ms` (the longest gap
// between two audio packets since the line before). Also GStreamer's webrtcbin
// (tests/interop/gst_client.py) as a WHIP publisher or WHEP viewer, for its tests. And
// ffmpeg decoding an HLS playlist (`decode`).

import { execFile, spawn } from 'node:child_process';
import { publishSimulcast, readLayers } from './browser.mjs';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const PION_VIEWER = process.env.TERN_PION_VIEWER || join(ROOT, 'tests/interop/pion-viewer/pion-viewer');
export const AIORTC_PYTHON = join(ROOT, 'tests/interop/.venv/bin/python');
// Debian's interpreter: python3-gi is installed for it, not for any other python3 on PATH.
export const GST_PYTHON = '/usr/bin/python3';
const GST_CLIENT = join(ROOT, 'tests/interop/gst_client.py');

/** Runs tests/interop/gst_client.py (GStreamer's webrtcbin) with `args`: its child, a
 * promise of its exit code, its JSON result line once it printed one, and its output. */
export function gst(args) {
  const child = spawn(GST_PYTHON, [GST_CLIENT, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d) => { out += d; });
  child.stderr.on('data', (d) => { out += d; });
  const done = new Promise((ok) => child.once('exit', (code) => ok(code)));
  const result = () => out.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l))[0];
  return { child, done, result, output: () => out };
}

/** Every JSON line `stream` gives, parsed, in an array that grows as they come (lines
 * that are not JSON are skipped). */
export function jsonLines(stream) {
  const lines = [];
  let partial = '';
  stream.on('data', (d) => {
    partial += d;
    const parts = partial.split('\n');
    partial = parts.pop();
    for (const p of parts) {
      try {
        lines.push(JSON.parse(p));
      } catch {}
    }
  });
  return lines;
}

/**
 * Starts a `kind` ('pion' or 'aiortc') viewer of `whep` for `seconds`, in `link`'s
 * namespace when given (see narrowLink), with `args` added (pion: e.g. `-nack-all`).
 * Returns { lines, last(), stderr(), stop() }: every JSON line so far, the newest, the
 * client's stderr, and a stop that asks it to end (SIGTERM: both DELETE their session) and
 * waits for it, killing it after 5 s.
 */
export function startClient(kind, whep, seconds, link = null, args = []) {
  let argv;
  if (kind === 'pion') {
    if (!existsSync(PION_VIEWER)) throw new Error(`${PION_VIEWER} missing: run scripts/install-deps.sh`);
    argv = [PION_VIEWER, '-whep', whep, '-seconds', String(seconds), '-every', '500', ...args];
  } else {
    if (!existsSync(AIORTC_PYTHON)) throw new Error(`${AIORTC_PYTHON} missing: run scripts/install-deps.sh`);
    argv = [AIORTC_PYTHON, join(ROOT, 'tests/interop/aiortc_client.py'), 'watch', whep, String(seconds), ...args];
  }
  const [cmd, rest] = link ? link.exec(argv) : [argv[0], argv.slice(1)];
  const child = spawn(cmd, rest, { stdio: ['ignore', 'pipe', 'pipe'] });
  const lines = jsonLines(child.stdout);
  let err = '';
  child.stderr.on('data', (d) => {
    err = (err + d).slice(-4000);
  });
  const done = new Promise((ok) => child.on('close', ok));
  return {
    lines,
    last: () => lines[lines.length - 1],
    stderr: () => err,
    async stop() {
      child.kill('SIGTERM');
      const closed = await Promise.race([done.then(() => true), new Promise((ok) => setTimeout(() => ok(false), 5000))]);
      if (!closed) child.kill('SIGKILL');
    },
  };
}

/**
 * The viewers of `stream` (`app/name`) by where they are, with their live figures
 * (`GET /v1/viewers/{id}`): `narrow` for the one whose remote address is `ip`, `free` for
 * another one. Each is `{ id, layer, paused, live }` (layer: the RID sent; paused: its video
 * is paused, from the snapshot).
 */
export async function viewersBy(base, stream, ip) {
  const res = await fetch(`${base}/v1/streams/${stream}/viewers`);
  if (!res.ok) return {};
  const out = {};
  for (const v of await res.json()) {
    const remote = String(v.connection?.remote ?? '');
    const one = await fetch(`${base}/v1/viewers/${v.identity.id}`);
    const live = one.ok ? (await one.json()).live : null;
    out[remote.startsWith(`${ip}:`) ? 'narrow' : 'free'] = { id: v.identity.id, layer: v.connection?.layer, paused: v.connection?.video_paused ?? false, live };
  }
  return out;
}

/** Waits (at most `ms`) until `stream` has no viewer at `ip`: a client that ended without
 * its DELETE leaves its session to tern's consent timeout, and its traffic on the link. */
export async function noViewerAt(base, stream, ip, ms = 35_000) {
  for (const t0 = Date.now(); Date.now() - t0 < ms; await new Promise((ok) => setTimeout(ok, 250))) {
    if (!(await viewersBy(base, stream, ip)).narrow) return true;
  }
  return false;
}

/** The publisher of the adaptive tests with other clients and of bench/time-to-layer.mjs:
 * from `page` (a logged page on tern's origin), three H264 simulcast layers h/m/l (600, 250
 * and 100 kbit/s at most, 960x540 at the top: three 720p encodes starve a 2-core machine)
 * to `endpoint` over WHIP. Waits (30 s at most) until Chromium sends all three. Returns the
 * publish result (`ok`) and the layers last read. */
export async function publishThreeH264Layers(page, endpoint) {
  const p = await page.evaluate(publishSimulcast, {
    endpoint,
    rids: ['h', 'm', 'l'],
    codec: 'h264',
    maxBitrates: [600_000, 250_000, 100_000],
    width: 960,
  });
  let layers = {};
  for (const t0 = Date.now(); p.ok && Date.now() - t0 < 30_000; await new Promise((ok) => setTimeout(ok, 500))) {
    layers = await page.evaluate(readLayers);
    if (['h', 'm', 'l'].every((r) => layers[r]?.frames > 30)) break;
  }
  return { ...p, layers };
}

/**
 * Runs `attempt(n)` and, if it throws, once more (n = 2) after `pauseMs`, printing why the
 * first failed through `t.diagnostic`. For the scenarios whose figures ride on the timing of
 * a narrow link on a shared 2-core runner (a token bucket, two WebRTC clients and tern on two
 * cores): a single scheduling stall can cost one run its bound (an audio gap of 229 ms where
 * 200 is allowed; an aiortc decoder waiting 16 s for a keyframe after an unrecovered loss),
 * while a regression fails both runs. Each attempt must start its own clients and leave the
 * link lifted.
 */
export async function retryOnce(t, attempt, pauseMs = 3_000) {
  try {
    return await attempt(1);
  } catch (err) {
    const first = String(err?.message ?? err).split('\n')[0];
    t.diagnostic(`attempt 1 failed (${first}); running the scenario once more`);
    console.log(`# attempt 1 failed: ${first}`);
    await new Promise((ok) => setTimeout(ok, pauseMs));
    return attempt(2);
  }
}

/** The longest run of `samples` (each { t, frames }, t in ms) in which `frames` did not
 * grow, in ms. */
export function longestStall(samples) {
  let worst = 0;
  let since = samples[0]?.t ?? 0;
  for (let i = 1; i < samples.length; i++) {
    if (samples[i].frames > samples[i - 1].frames) since = samples[i].t;
    else worst = Math.max(worst, samples[i].t - since);
  }
  return worst;
}

/**
 * ffmpeg decoding `seconds` of `url` (an HLS playlist), stream `map` (the first video by
 * default), with -xerror: resolves to `{ code, frames, stderr }`, frames counted from
 * framemd5's lines; killed 25 s past `seconds`.
 */
export function decode(url, seconds, map = '0:v:0') {
  return new Promise((ok) => {
    execFile(
      'timeout',
      [`${seconds + 25}`, 'ffmpeg', '-hide_banner', '-nostdin', '-v', 'error', '-xerror', '-i', url,
        '-map', map, '-t', `${seconds}`, '-f', 'framemd5', '-'],
      { maxBuffer: 64 << 20 },
      (err, stdout, stderr) => {
        const frames = stdout.split('\n').filter((l) => /^0,/.test(l.trim())).length;
        ok({ code: err ? (err.code ?? 1) : 0, frames, stderr: stderr.trim() });
      },
    );
  });
}

// Time to the right simulcast layer (issue 41), for Chromium, pion and aiortc viewers in
// one run of one scenario. Headless Chromium publishes three H264 simulcast layers over
// WHIP (top ~530 kbit/s, as tests/browser/adaptive-clients.test.mjs); one viewer at a time
// plays it from a network namespace of its own (tests/browser/browser.mjs narrowLink).
// Each round: the viewer plays `h` on an unlimited path for 3 s; a 300 kbit/s token bucket goes on
// (`tc tbf rate 300kbit burst 20kb latency 300ms`) and the time until tern sends it `m` or
// `l` is "down"; HOLD seconds later the bucket comes off and the time until it is on `h`
// again is "back" (at most 60 s). Layers are read from tern's API every 100 ms, so a time
// is at most ~100 ms late. Also printed: the frames a second the viewer decoded under the
// limit, and how often it was seen on `h` under the limit (a failed up-move).
//
//   ./scripts/netns-run.sh node bench/time-to-layer.mjs [ROUNDS] [HOLD]   (defaults 2, 20)
//   TTL_CLIENTS=pion,aiortc ... (default chromium,pion,aiortc); TTL_TRACE=1 prints, once a
//   second, the viewer's live figures, the token bucket's counters and the client's own.
//
// bench/time-to-layer.sh builds tern and runs it; it needs what scripts/install-deps.sh
// installs (Chromium, the pion viewer, the aiortc venv) and root in its namespace.

import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CHROMIUM, launchBrowser, narrowLink, newLoggedPage, openWhepViewer, readWhepViewer } from '../tests/browser/browser.mjs';
import { noViewerAt, publishThreeH264Layers, startClient, viewersBy } from '../tests/browser/clients.mjs';
import { startServer } from '../tests/browser/server.mjs';

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));
const ROUNDS = Number(process.argv[2] ?? 2);
const HOLD_S = Number(process.argv[3] ?? 20);
const KINDS = (process.env.TTL_CLIENTS ?? 'chromium,pion,aiortc').split(',');
const LIMIT = '300kbit';
const BACK_MAX_MS = 60_000;
const TRACE = process.env.TTL_TRACE === '1';

/** A viewer of `whep` in `link`'s namespace: `frames()` decoded so far, `stop()`. */
async function startViewer(kind, whep, link, narrowBrowser) {
  if (kind !== 'chromium') {
    const c = startClient(kind, whep, 600, link);
    return { frames: () => c.last()?.frames ?? 0, stop: () => c.stop(), detail: () => c.last() };
  }
  const page = await newLoggedPage(narrowBrowser.context);
  await page.page.goto(new URL('/', whep).toString(), { waitUntil: 'domcontentloaded' });
  const r = await page.page.evaluate(openWhepViewer, { endpoint: whep, audio: true });
  if (r.status !== 201) throw new Error(`Chromium viewer: ${JSON.stringify(r)}`);
  let last = {};
  const timer = setInterval(async () => {
    last = await page.page.evaluate(readWhepViewer).catch(() => last);
  }, 250);
  return {
    frames: () => last.frames ?? 0,
    detail: () => last,
    async stop() {
      clearInterval(timer);
      await page.page.evaluate(() => fetch(window.viewLocation, { method: 'DELETE' })).catch(() => {});
      await page.page.close().catch(() => {});
    },
  };
}

/** One round for `kind`: the figures described at the top of the file. */
async function round(kind, server, link, narrowBrowser) {
  const whep = `${server.base}/live/sim/whep`;
  const v = await startViewer(kind, whep, link, narrowBrowser);
  let lastTrace = 0;
  const layer = async () => {
    const narrow = (await viewersBy(server.base, 'live/sim', link.peer)).narrow;
    if (TRACE && Date.now() - lastTrace >= 1000) {
      lastTrace = Date.now();
      console.log(`# trace ${JSON.stringify({ kind, layer: narrow?.layer, live: narrow?.live, link: link.stats(), client: v.detail() })}`);
    }
    return narrow?.layer;
  };
  try {
    // Playing h for 3 s (aiortc's REMB on a clean path can move it between h and m: then
    // the wait starts again, 60 s at most), and the limit goes on at once.
    let l;
    let onH = null;
    for (const t0 = Date.now(); Date.now() - t0 < 60_000; await sleep(250)) {
      l = await layer();
      onH = l === 'h' && v.frames() > 30 ? (onH ?? Date.now()) : null;
      if (onH !== null && Date.now() - onH >= 3000) break;
    }
    if (onH === null || Date.now() - onH < 3000) return { kind, error: `not on h for 3 s within 60 s (on ${l}): ${JSON.stringify(v.detail())}` };
    const framesAt = v.frames();
    link.limit(LIMIT);
    const on = Date.now();
    let down = null;
    let upUnder = 0;
    while (Date.now() - on < HOLD_S * 1000) {
      l = await layer();
      if (down === null && (l === 'm' || l === 'l')) down = Date.now() - on;
      else if (down !== null && l === 'h') upUnder++;
      await sleep(100);
    }
    const fps = (v.frames() - framesAt) / ((Date.now() - on) / 1000);
    link.lift();
    const off = Date.now();
    let back = null;
    while (back === null && Date.now() - off < BACK_MAX_MS) {
      if ((await layer()) === 'h') back = Date.now() - off;
      else await sleep(100);
    }
    return { kind, down, back, fps, upUnder };
  } finally {
    try {
      link.lift();
    } catch {}
    await v.stop();
    if (!(await noViewerAt(server.base, 'live/sim', link.peer))) console.log(`# the ${kind} viewer's session outlived its client`);
  }
}

/** Each round's figure, in round order ("-": none), and the median of those there are. */
const stat = (xs) => {
  const s = xs.filter((x) => x !== null).sort((a, b) => a - b);
  const each = xs.map((x) => x ?? '-').join(' / ');
  if (!s.length) return each;
  const mid = s.length % 2 ? s[(s.length - 1) / 2] : Math.round((s[s.length / 2 - 1] + s[s.length / 2]) / 2);
  return `${each} (median ${mid})`;
};

const dir = await mkdtemp(join(tmpdir(), 'tern-ttl-'));
const link = narrowLink();
let server;
let browser;
let narrowBrowser;
try {
  const config = join(dir, 'tern.toml');
  await writeFile(config, '[[app]]\nname = "live"\nstreams = ["sim"]\n');
  server = await startServer({ readyTimeoutMs: 20_000, extraArgs: ['--config', config], host: link.host });
  browser = await launchBrowser();
  if (KINDS.includes('chromium')) narrowBrowser = await launchBrowser({ executablePath: await link.wrap(CHROMIUM, dir) });
  const pub = await newLoggedPage(browser.context);
  await pub.page.goto(`${server.base}/`, { waitUntil: 'domcontentloaded' });
  const p = await publishThreeH264Layers(pub.page, `${server.base}/live/sim/whip`);
  if (!p.ok) throw new Error(`publish failed: ${JSON.stringify(p)}`);
  const results = [];
  for (let i = 0; i < ROUNDS; i++) {
    for (const kind of KINDS) {
      const r = await round(kind, server, link, narrowBrowser);
      console.log(`# round ${i + 1} ${JSON.stringify(r)}`);
      results.push(r);
    }
  }
  console.log(`\n| viewer | down to m/l (ms) | back on h (ms) | fps under the limit | seen on h under the limit (polls) | rounds |`);
  console.log('|---|---|---|---|---|---|');
  for (const kind of KINDS) {
    const rs = results.filter((r) => r.kind === kind && !r.error);
    const fps = rs.map((r) => r.fps.toFixed(1));
    console.log(
      `| ${kind} | ${stat(rs.map((r) => r.down))} | ${stat(rs.map((r) => r.back))} | ${fps.join(', ')} | ${rs.map((r) => r.upUnder).join(', ')} | ${rs.length} of ${ROUNDS}${rs.some((r) => r.back === null) ? ` (not back within ${BACK_MAX_MS} ms: ${rs.filter((r) => r.back === null).length})` : ''} |`,
    );
  }
} finally {
  await narrowBrowser?.close();
  await browser?.close();
  await server?.stop();
  link.close();
  await rm(dir, { recursive: true, force: true });
}

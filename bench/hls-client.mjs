// Clients for bench/hls.sh (run inside scripts/netns-run.sh, like the browser tests).
//
//   node bench/hls-client.mjs latency URL SECONDS
//     headless Chromium plays URL (an index.m3u8) with hls.js (lowLatencyMode) and samples,
//     once a second after a 10 s warm-up, Date.now() - hls.playingDate: how far the picture
//     on screen is behind the wall-clock time tern stamped on it (EXT-X-PROGRAM-DATE-TIME is
//     the time its first sample reached tern). Prints one JSON line.
//   node bench/hls-client.mjs rate URL SECONDS CONCURRENCY
//     CONCURRENCY keep-alive connections GET URL back to back for SECONDS; prints one JSON
//     line with requests, bytes (as sent: compressed if they were), requests/s and non-200
//     answers. With HLS_ACCEPT_ENCODING set, each request sends it as Accept-Encoding.
//   node bench/hls-client.mjs reader URL SECONDS
//     one LL-HLS reader as a player behaves, without decoding: it fetches the preload-hinted
//     part (which blocks until made), then reloads the playlist for that part to learn the
//     next hint. Prints parts and bytes read.
import http from 'node:http';
import { createRequire } from 'node:module';
import { launchBrowser } from '../tests/browser/browser.mjs';

const require = createRequire(new URL('../tests/browser/package.json', import.meta.url));
const HLS_JS = require.resolve('hls.js/dist/hls.min.js');
const [mode, url, secs, conc] = process.argv.slice(2);
const seconds = Math.min(Number(secs ?? 20), 600);
const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

function get(agent, u) {
  return new Promise((ok, fail) => {
    const enc = mode === 'rate' ? process.env.HLS_ACCEPT_ENCODING : '';
    const headers = enc ? { 'accept-encoding': enc } : {};
    const req = http.get(u, { agent, headers }, (res) => {
      let bytes = 0;
      let body = [];
      res.on('data', (c) => { bytes += c.length; if (mode !== 'rate') body.push(c); });
      res.on('end', () => ok({ status: res.statusCode, bytes, body: Buffer.concat(body).toString('latin1') }));
    });
    req.setTimeout(10_000, () => req.destroy(new Error('timeout')));
    req.on('error', fail);
  });
}

if (mode === 'rate') {
  const agent = new http.Agent({ keepAlive: true, maxSockets: Number(conc) });
  const end = Date.now() + seconds * 1000;
  let requests = 0, bytes = 0, bad = 0;
  await Promise.all(Array.from({ length: Number(conc) }, async () => {
    while (Date.now() < end) {
      const r = await get(agent, url);
      requests += 1;
      bytes += r.bytes;
      if (r.status !== 200) bad += 1;
    }
  }));
  agent.destroy();
  console.log(JSON.stringify({ requests, bytes, bad, per_second: requests / seconds }));
} else if (mode === 'reader') {
  const agent = new http.Agent({ keepAlive: true });
  const index = await get(agent, url);
  const media = new URL(index.body.trim().split('\n').pop(), url).href;
  let pl = (await get(agent, media)).body;
  const end = Date.now() + seconds * 1000;
  let parts = 0, bytes = 0;
  while (Date.now() < end) {
    const hint = /#EXT-X-PRELOAD-HINT:TYPE=PART,URI="(\d+)\.(\d+)\.m4s\?([^"]*)"/.exec(pl);
    if (!hint) throw new Error(`no preload hint in\n${pl}`);
    const [, msn, part, q] = hint;
    const p = await get(agent, new URL(`${msn}.${part}.m4s?${q}`, media).href);
    parts += 1;
    bytes += p.bytes;
    // The part just read exists: this answers at once, with the next part as its hint.
    pl = (await get(agent, `${media}&_HLS_msn=${msn}&_HLS_part=${part}`)).body;
  }
  agent.destroy();
  console.log(JSON.stringify({ parts, bytes }));
} else if (mode === 'latency') {
  const browser = await launchBrowser();
  try {
    const page = await browser.context.newPage();
    // As in tests/browser/hls.test.mjs: a page of its own content (a page loaded from
    // about:blank has its loopback requests refused).
    await page.setContent('<!doctype html><html><head><title>hls.js</title></head><body></body></html>');
    await page.addScriptTag({ path: HLS_JS });
    await page.evaluate((u) => {
      const video = document.createElement('video');
      video.muted = true;
      video.autoplay = true;
      video.playsInline = true;
      document.body.appendChild(video);
      const hls = new window.Hls({ lowLatencyMode: true });
      window.hls = hls;
      window.video = video;
      window.errors = [];
      hls.on(window.Hls.Events.ERROR, (_, e) => window.errors.push(`${e.details}${e.fatal ? ' (fatal)' : ''}`));
      hls.on(window.Hls.Events.MANIFEST_PARSED, () => video.play().catch((e) => window.errors.push(e.message)));
      hls.loadSource(u);
      hls.attachMedia(video);
    }, url);
    await sleep(10_000);
    const samples = [];
    let last = null;
    const end = Date.now() + seconds * 1000;
    while (Date.now() < end) {
      const s = await page.evaluate(() => ({
        pdt: window.hls.playingDate ? Date.now() - window.hls.playingDate.getTime() : null,
        latency: window.hls.latency,
        frames: window.video.getVideoPlaybackQuality().totalVideoFrames,
        errors: window.errors.slice(-5),
      }));
      last = s;
      if (s.pdt !== null) samples.push(s);
      await sleep(1000);
    }
    const pdt = samples.map((s) => s.pdt).sort((a, b) => a - b);
    const mean = pdt.reduce((a, b) => a + b, 0) / Math.max(pdt.length, 1);
    console.log(JSON.stringify({
      samples: pdt.length,
      mean_ms: Math.round(mean),
      min_ms: pdt[0],
      max_ms: pdt[pdt.length - 1],
      hls_latency_s: samples.length ? samples[samples.length - 1].latency : null,
      frames: samples.length ? samples[samples.length - 1].frames : 0,
      last,
    }));
  } finally {
    await browser.close();
  }
} else {
  console.error('usage: hls-client.mjs latency|rate|reader URL SECONDS [CONCURRENCY]');
  process.exit(2);
}

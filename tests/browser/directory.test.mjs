// The front page's stream directory and the player's figures line, in Chromium (issue 55):
// `tern demo` (the live/demo clip) with two RTMP encoders (ffmpeg's testsrc at 1280x720 as
// live/studio, its game of life at 640x360 as live/lobby), so three live streams.
//
// - `/` shows three cards whose thumbnails decode (naturalWidth > 0), each with its
//   resolution (the thumbnail's size), and figures that change between two reads 5 s apart;
// - the player's figures line shows fps > 0, the picture's size, a bitrate and the round
//   trip over WebRTC, and fps > 0 over LL-HLS when asked with ?mode=hls (the LL-HLS button).
//
// With TERN_SCREENSHOTS=1 it also writes the documentation's screenshots
// (docs/src/images/directory.png, player.png), 1000x700.
//
// Run inside a private network namespace: ./scripts/netns-run.sh node --test tests/browser/

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { launchBrowser, newLoggedPage } from './browser.mjs';
import { freeTcpPort, publishRtmp, startServer } from './server.mjs';

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));
const IMAGES = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'docs', 'src', 'images');
const SCREENSHOTS = process.env.TERN_SCREENSHOTS === '1';
const VIEWPORT = { width: 1000, height: 700 };

/** Saves `page`'s screenshot as docs/src/images/`name`, in 128 colours (a third of the bytes). */
async function screenshot(page, dir, name) {
  const raw = join(dir, name);
  await page.screenshot({ path: raw });
  execFileSync('ffmpeg', ['-hide_banner', '-loglevel', 'error', '-y', '-i', raw, '-vf',
    'split[a][b];[a]palettegen=max_colors=128:stats_mode=full[p];[b][p]paletteuse=dither=none',
    join(IMAGES, name)]);
}

/** ffmpeg's arguments for an RTMP encoder of `source` (a lavfi video) to `url`. */
function encoder(source, url) {
  return [
    '-hide_banner', '-nostdin', '-loglevel', 'warning',
    '-re', '-f', 'lavfi', '-i', source,
    '-re', '-f', 'lavfi', '-i', 'sine=frequency=440:sample_rate=44100',
    '-t', '180', '-c:v', 'libx264', '-preset', 'ultrafast', '-profile:v', 'baseline', '-tune', 'zerolatency',
    '-b:v', '1500k', '-maxrate', '1500k', '-bufsize', '1500k',
    '-pix_fmt', 'yuv420p', '-g', '30', '-bf', '0', '-c:a', 'aac',
    '-f', 'flv', url,
  ];
}

/** In the directory page: each card's name, picture and figures. */
function readCards() {
  return [...document.querySelectorAll('#streams .card')].map((a) => {
    const img = a.querySelector('img');
    const fig = {};
    a.querySelectorAll('[data-fig]').forEach((s) => { fig[s.dataset.fig] = s.textContent; });
    return {
      key: a.dataset.key,
      href: a.getAttribute('href'),
      shown: !img.hidden,
      naturalWidth: img.naturalWidth,
      naturalHeight: img.naturalHeight,
      fig,
    };
  });
}

/** In the player page: the figures line as shown and its numbers. */
function readFigures() {
  const text = {};
  document.querySelectorAll('#figures span').forEach((s) => { text[s.id.replace('fig-', '')] = s.textContent; });
  return {
    text,
    figures: window.ternFigures ?? null,
    mode: window.ternMode ?? null,
    status: document.querySelector('#status').textContent,
    on: [...document.querySelectorAll('#choice a.on')].map((a) => a.id),
    video: { readyState: document.querySelector('#video').readyState, currentTime: document.querySelector('#video').currentTime },
  };
}

describe('stream directory and player figures', { timeout: 240_000 }, () => {
  let dir;
  let server;
  let browser;
  const encoders = [];

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tern-directory-'));
    const config = join(dir, 'tern.toml');
    await writeFile(config, '[[app]]\nname = "live"\nstreams = ["studio", "lobby"]\n');
    const rtmpPort = await freeTcpPort();
    server = await startServer({
      readyTimeoutMs: 20_000,
      extraArgs: ['--config', config, '--rtmp', `127.0.0.1:${rtmpPort}`],
    });
    encoders.push(await publishRtmp(server, 'live/studio',
      encoder('testsrc=size=1280x720:rate=30', `rtmp://127.0.0.1:${rtmpPort}/live/studio`)));
    encoders.push(await publishRtmp(server, 'live/lobby',
      encoder('life=size=640x360:rate=30:mold=10:ratio=0.2:life_color=#50c878:death_color=#102030:mold_color=#204060',
        `rtmp://127.0.0.1:${rtmpPort}/live/lobby`)));
    browser = await launchBrowser();
  }, { timeout: 90_000 });

  after(async () => {
    for (const e of encoders) e.proc.kill('SIGKILL');
    await browser?.close();
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('/?format=json: the three live streams and their figures', async () => {
    const res = await fetch(`${server.base}/?format=json`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /^application\/json/);
    assert.equal(res.headers.get('cache-control'), 'no-store');
    const body = await res.json();
    assert.ok(body.now_ms > 0);
    assert.deepEqual(body.streams.map((s) => s.key).sort(), ['live/demo', 'live/lobby', 'live/studio']);
    for (const s of body.streams) {
      assert.equal(s.codec, 'H264', JSON.stringify(s));
      assert.equal(typeof s.viewers, 'number');
      assert.equal(typeof s.bytes_out, 'number');
      assert.ok(s.live_since_ms > 0 && s.live_since_ms <= body.now_ms, JSON.stringify(s));
    }
    const studio = body.streams.find((s) => s.key === 'live/studio');
    assert.equal(studio.app, 'live');
    assert.equal(studio.stream, 'studio');
    assert.equal(studio.source, 'rtmp');
    assert.equal(body.streams.find((s) => s.key === 'live/demo').source, 'clip');
    assert.match(studio.profile_level_id, /^42/, 'baseline, as encoded');
    // Without JavaScript: the names as links.
    const html = await (await fetch(`${server.base}/`)).text();
    assert.match(html, /<noscript><ul><li><a href="\/live\/demo">live\/demo<\/a><\/li>/);
  });

  it('the player plays over WebRTC and its figures line shows fps > 0', { timeout: 60_000 }, async () => {
    const { page, log } = await newLoggedPage(browser.context);
    await page.setViewportSize(VIEWPORT);
    try {
      await page.goto(`${server.base}/live/studio`, { waitUntil: 'domcontentloaded' });
      let s;
      const deadline = Date.now() + 30_000;
      for (;;) {
        s = await page.evaluate(readFigures);
        if (s.figures?.fps > 0 && s.figures?.bps > 0 && s.figures?.rttMs !== null && s.figures?.width > 0) break;
        assert.ok(Date.now() < deadline, `no figures over WebRTC in 30 s: ${JSON.stringify(s)}\n${log()}`);
        await sleep(500);
      }
      // A few seconds of playing, so that the figures settle (and the screenshot has a picture).
      await sleep(3000);
      s = await page.evaluate(readFigures);
      console.log(`player (WebRTC): ${JSON.stringify(s.text)}`);
      assert.equal(s.mode, 'webrtc');
      assert.ok(s.figures.fps > 0, JSON.stringify(s));
      assert.match(s.text.fps, /^[1-9]\d* fps$/);
      assert.equal(s.text.resolution, '1280×720');
      assert.match(s.text.bitrate, /^[\d.]+ [kM]b\/s$/);
      assert.match(s.text.rtt, /^round trip (< 1|\d+) ms$/);
      assert.equal(s.text.layer, 'layer –', 'no simulcast');
      assert.equal(s.text.mode, 'WebRTC');
      assert.deepEqual(s.on, ['mode-webrtc']);
      const hlsHref = await page.getAttribute('#mode-hls', 'href');
      assert.equal(hlsHref, '/live/studio?mode=hls');
      if (SCREENSHOTS) await screenshot(page, dir, 'player.png');
    } finally {
      await page.close();
    }
  });

  it('/ shows three cards whose pictures decode and whose figures change', { timeout: 90_000 }, async () => {
    // A viewer on live/studio, so that its card has one and a bitrate.
    const viewer = await newLoggedPage(browser.context);
    await viewer.page.goto(`${server.base}/live/studio`, { waitUntil: 'domcontentloaded' });
    const { page, log } = await newLoggedPage(browser.context);
    await page.setViewportSize(VIEWPORT);
    try {
      await page.goto(`${server.base}/`, { waitUntil: 'domcontentloaded' });
      let cards;
      const deadline = Date.now() + 30_000;
      for (;;) {
        cards = await page.evaluate(readCards);
        const studio = cards.find((c) => c.key === 'live/studio');
        if (cards.length === 3 && cards.every((c) => c.shown && c.naturalWidth > 0) &&
          studio.fig.viewers === '1 viewer' && /b\/s$/.test(studio.fig.bitrate) && studio.fig.bitrate !== '– b/s') break;
        assert.ok(Date.now() < deadline, `cards after 30 s: ${JSON.stringify(cards)}\n${log()}\n${server.tail()}`);
        await sleep(500);
      }
      const first = cards;
      const reads = await page.evaluate(() => window.ternDirectory.reads);
      // The page reads every 5 s: wait for the next read.
      await page.waitForFunction((n) => window.ternDirectory.reads > n, reads, { timeout: 8_000 });
      await sleep(300);
      const second = await page.evaluate(readCards);
      console.log(`directory, first read: ${JSON.stringify(first.map((c) => [c.key, c.fig]))}`);
      console.log(`directory, next read:  ${JSON.stringify(second.map((c) => [c.key, c.fig]))}`);
      assert.deepEqual(second.map((c) => c.key), ['live/demo', 'live/lobby', 'live/studio']);
      for (const c of second) {
        const before = first.find((x) => x.key === c.key);
        assert.notDeepEqual(c.fig, before.fig, `${c.key}'s figures did not change: ${JSON.stringify(c.fig)}`);
        assert.ok(c.naturalWidth > 0, `${c.key}'s picture`);
        assert.equal(c.fig.resolution, `${c.naturalWidth}×${c.naturalHeight}`);
        assert.equal(c.href, `/${c.key}`);
        assert.match(c.fig.codec, /^H264 /);
        assert.match(c.fig.uptime, /^live \d/);
      }
      const by = Object.fromEntries(second.map((c) => [c.key, c]));
      assert.equal(by['live/studio'].fig.resolution, '1280×720');
      assert.equal(by['live/lobby'].fig.resolution, '640×360');
      assert.equal(by['live/studio'].fig.codec, 'H264 Constrained Baseline 3.1');
      assert.match(by['live/studio'].fig.bitrate, /^[\d.]+ [kM]b\/s$/);
      const summary = await page.textContent('#summary');
      assert.match(summary, /^3 live streams · 1 viewer · /);
      if (SCREENSHOTS) await screenshot(page, dir, 'directory.png');
      // A card links to its player.
      await page.click('.card[data-key="live/lobby"]');
      await page.waitForURL(`${server.base}/live/lobby`);
    } finally {
      await page.close();
      await viewer.page.close();
    }
  });

  it('?mode=hls plays LL-HLS and its figures line shows fps > 0', { timeout: 60_000 }, async () => {
    // live/demo: its LL-HLS is packaged from ring packets (see the next test for why not an
    // RTMP stream the directory took thumbnails of).
    const { page, log } = await newLoggedPage(browser.context);
    try {
      await page.goto(`${server.base}/live/demo?mode=hls`, { waitUntil: 'domcontentloaded' });
      let s;
      const deadline = Date.now() + 40_000;
      for (;;) {
        s = await page.evaluate(readFigures);
        // Past 4 s of media: hls.js stalls for a few seconds after its first parts here.
        if (s.figures?.fps > 0 && s.figures?.width > 0 && s.figures?.bps > 0 && s.video.currentTime > 4) break;
        assert.ok(Date.now() < deadline, `no figures over LL-HLS in 40 s: ${JSON.stringify(s)}\n${log()}`);
        await sleep(500);
      }
      console.log(`player (LL-HLS): ${JSON.stringify(s.text)}`);
      assert.equal(s.mode, 'hls');
      assert.equal(await page.evaluate(() => !!window.ternPc), false, 'no WebRTC was tried');
      assert.equal(s.status, 'playing LL-HLS');
      assert.equal(s.text.mode, 'LL-HLS');
      assert.equal(s.text.resolution, '640×360');
      assert.match(s.text.fps, /^[1-9]\d* fps$/);
      assert.match(s.text.bitrate, /^[\d.]+ [kM]b\/s$/);
      assert.match(s.text.rtt, /^latency [\d.]+ s$/);
      assert.deepEqual(s.on, ['mode-hls']);
    } finally {
      await page.close();
    }
  });

  // An RTMP (frame) publisher sends its codec configuration again when a packager joins the
  // ones reading it (here LL-HLS after the directory's thumbnails): without that, index.m3u8
  // waited for a first part that never came.
  it('LL-HLS of an RTMP stream whose thumbnail was taken first', { timeout: 30_000 }, async () => {
    const thumb = await fetch(`${server.base}/live/lobby/thumb.jpg`);
    assert.equal(thumb.status, 200);
    const res = await fetch(`${server.base}/live/lobby/index.m3u8`, { signal: AbortSignal.timeout(10_000) });
    assert.equal(res.status, 200);
  });
});

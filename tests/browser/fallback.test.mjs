// The player page's fallback to LL-HLS: when WebRTC cannot connect (here: a browser
// without RTCPeerConnection) the page at /{app}/{stream} plays the stream's index.m3u8
// with hls.js, loaded from `hls.player_script` (pointed by this test at a copy of the npm
// package served on loopback). A page that has WebRTC stays on it.
//
// Run inside a private network namespace: ./scripts/netns-run.sh node --test tests/browser/

import assert from 'node:assert/strict';
import { readFile, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { launchBrowser, newLoggedPage } from './browser.mjs';
import { startServer } from './server.mjs';

const require = createRequire(import.meta.url);
const HLS_JS = require.resolve('hls.js/dist/hls.min.js');
const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

/** In the player page: which way it plays, its status line and the video's progress. */
function readPlayer() {
  const video = document.querySelector('#video');
  const q = video.getVideoPlaybackQuality();
  return {
    mode: window.ternMode ?? null,
    status: document.querySelector('#status').textContent,
    currentTime: video.currentTime,
    frames: q.totalVideoFrames,
    hls: !!window.ternHls,
  };
}

describe('player page falls back to LL-HLS', { timeout: 120_000 }, () => {
  let dir;
  let scripts;
  let server;
  let browser;
  let scriptRequests = 0;

  before(async () => {
    const js = await readFile(HLS_JS);
    scripts = createServer((req, res) => {
      scriptRequests += 1;
      res.writeHead(200, { 'content-type': 'text/javascript', 'access-control-allow-origin': '*' });
      res.end(js);
    });
    await new Promise((ok) => scripts.listen(0, '127.0.0.1', ok));
    dir = await mkdtemp(join(tmpdir(), 'tern-fallback-'));
    const config = join(dir, 'tern.toml');
    await writeFile(
      config,
      `[hls]\nplayer_script = "http://127.0.0.1:${scripts.address().port}/hls.min.js"\n`,
    );
    server = await startServer({ extraArgs: ['--config', config] });
    browser = await launchBrowser();
  });

  after(async () => {
    await browser?.close();
    await server?.stop();
    scripts?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('without WebRTC the page plays HLS with hls.js', async () => {
    const { page, log } = await newLoggedPage(browser.context);
    await page.addInitScript(() => {
      window.RTCPeerConnection = undefined;
    });
    await page.goto(`${server.base}/live/demo`);
    let s;
    const deadline = Date.now() + 30_000;
    for (;;) {
      s = await page.evaluate(readPlayer);
      if (s.mode === 'hls' && s.currentTime > 4 && s.frames > 100) break;
      assert.ok(Date.now() < deadline, `no HLS playback after 30 s: ${JSON.stringify(s)}\n${log()}`);
      await sleep(500);
    }
    console.log(`fallback: ${JSON.stringify(s)}`);
    assert.equal(s.hls, true, 'hls.js played it (Chromium has no native HLS)');
    assert.match(s.status, /no WebRTC in this browser; playing HLS/);
    assert.ok(scriptRequests >= 1, 'hls.js came from hls.player_script');
    await page.close();
  });

  it('with WebRTC the page stays on WebRTC', async () => {
    const { page, log } = await newLoggedPage(browser.context);
    await page.goto(`${server.base}/live/demo`);
    await sleep(6000);
    const s = await page.evaluate(readPlayer);
    assert.equal(s.mode, 'webrtc', `${JSON.stringify(s)}\n${log()}`);
    assert.equal(s.hls, false);
    assert.ok(s.frames > 60, `frames ${s.frames}`);
    await page.close();
  });
});

// The player page's fallback to LL-HLS: when WebRTC cannot connect (here: a browser
// without RTCPeerConnection) the page at /{app}/{stream} plays the stream's index.m3u8
// with hls.js, loaded by default from tern itself (`/assets/hls.min.js`, the pinned copy built
// into the binary): the page asks no host but tern for anything. A page that has WebRTC stays
// on it.
//
// Run inside a private network namespace: ./scripts/netns-run.sh node --test tests/browser/

import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
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
  let server;
  let browser;

  before(async () => {
    server = await startServer({});
    browser = await launchBrowser();
  });

  after(async () => {
    await browser?.close();
    await server?.stop();
  });

  it('serves the pinned hls.js, the same bytes as the npm package the tests pin', async () => {
    const res = await fetch(`${server.base}/assets/hls.min.js`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /^text\/javascript/);
    assert.match(res.headers.get('cache-control'), /max-age=\d{6,}/);
    const body = Buffer.from(await res.arrayBuffer());
    const npm = await readFile(HLS_JS);
    assert.ok(body.equals(npm), `built-in hls.js (${body.length} B) differs from npm's (${npm.length} B)`);
    const version = require('hls.js/package.json').version;
    assert.equal(res.headers.get('etag'), `"hls.js-${version}"`);
    const again = await fetch(`${server.base}/assets/hls.min.js`, {
      headers: { 'if-none-match': res.headers.get('etag') },
    });
    assert.equal(again.status, 304);
  });

  it('without WebRTC the page plays HLS with hls.js', async () => {
    const { page, log } = await newLoggedPage(browser.context);
    const requests = [];
    page.on('request', (r) => requests.push(r.url()));
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
    const origin = new URL(server.base).origin;
    const elsewhere = requests.filter((u) => !u.startsWith(`${origin}/`) && !u.startsWith('blob:'));
    assert.deepEqual(elsewhere, [], 'the page asked no host but tern');
    assert.ok(
      requests.includes(`${origin}/assets/hls.min.js`),
      `hls.js came from tern: ${requests.slice(0, 5).join(' ')}`,
    );
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

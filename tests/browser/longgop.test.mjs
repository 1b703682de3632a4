// Joining a long-GOP stream mid-GOP: ffmpeg pushes RTMP with a keyframe every 10 s
// (640x360, ~1.5 Mbit/s, so a GOP is ~1,500 packets), Chromium opens the player ~4 s after
// a keyframe. tern sends the GOP so far from its keyframe cache, paced, then live: the
// viewer shows a picture at once and its video has no hole in its sequence numbers
// (packetsLost 0: a hole would be counted lost, as Chromium and pion did when the cache
// went out in one burst).
//
// Run inside a private network namespace: ./scripts/netns-run.sh node --test tests/browser/

import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { launchBrowser, newLoggedPage, readVideo } from './browser.mjs';
import { freeTcpPort, publishRtmp, startServer } from './server.mjs';

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));
const GOP_S = 10;

describe('joining a 10 s GOP stream mid-GOP in Chromium', { timeout: 150_000 }, () => {
  let dir;
  let server;
  let browser;
  let ffmpeg;
  let liveAt = 0;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tern-longgop-'));
    const config = join(dir, 'tern.toml');
    await writeFile(config, '[[app]]\nname = "live"\nstreams = ["gop"]\n');
    const rtmpPort = await freeTcpPort();
    server = await startServer({
      readyTimeoutMs: 20_000,
      extraArgs: ['--config', config, '--rtmp', `127.0.0.1:${rtmpPort}`],
    });
    ffmpeg = await publishRtmp(server, 'live/gop', [
      '-hide_banner', '-nostdin', '-loglevel', 'warning',
      '-re', '-f', 'lavfi', '-i', 'testsrc2=size=640x360:rate=30',
      '-t', '60', '-c:v', 'libx264', '-profile:v', 'baseline', '-tune', 'zerolatency',
      '-preset', 'veryfast', '-b:v', '1500k', '-maxrate', '1500k', '-bufsize', '750k',
      '-pix_fmt', 'yuv420p', '-g', String(GOP_S * 30), '-keyint_min', String(GOP_S * 30),
      '-sc_threshold', '0', '-an',
      '-f', 'flv', `rtmp://127.0.0.1:${rtmpPort}/live/gop`,
    ]);
    liveAt = Date.now();
    browser = await launchBrowser();
  }, { timeout: 60_000 });

  after(async () => {
    ffmpeg?.proc.kill('SIGKILL');
    await browser?.close();
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('a viewer joining 4 s into a GOP decodes at once and loses nothing', { timeout: 60_000 }, async (t) => {
    // The stream went live on its first keyframe: join half a GOP later.
    await sleep(Math.max(0, liveAt + 4_000 - Date.now()));
    const { page, log } = await newLoggedPage(browser.context);
    const failure = (what, s) =>
      `${what}\nlast video stats: ${JSON.stringify(s)}\n--- page log ---\n${log()}\n` +
      `--- ffmpeg ---\n${ffmpeg?.log() ?? ''}\n--- server output ---\n${server.tail()}`;
    try {
      const started = Date.now();
      await page.goto(`${server.base}/live/gop`, { timeout: 10_000, waitUntil: 'domcontentloaded' });
      let s = {};
      while (Date.now() - started < 8_000) {
        s = await page.evaluate(readVideo);
        if (s.framesDecoded > 0) break;
        await sleep(100);
      }
      const firstFrameMs = Date.now() - started;
      assert.ok(s.framesDecoded > 0, failure('no frame decoded within 8 s (before the next keyframe)', s));
      // Watch 3 s more: all before the next keyframe, so every frame decoded came from the
      // cache's keyframe.
      await sleep(3_000);
      s = await page.evaluate(readVideo);
      t.diagnostic(`first frame ${firstFrameMs} ms after opening the page; then ${JSON.stringify(s)}`);
      console.log(`long GOP join: first frame ${firstFrameMs} ms; ${JSON.stringify(s)}`);
      assert.equal(s.keyFramesDecoded, 1, failure('one keyframe (the cached one) so far', s));
      assert.ok(s.packetsReceived > 500, failure('the GOP so far and live video arrived', s));
      assert.equal(s.packetsLost, 0, failure('a hole in the sequence numbers', s));
      assert.ok(s.framesDecoded > 120, failure('frames decoded from the cached keyframe on', s));
      assert.ok(s.totalFreezesDuration < 1, failure('frozen for a second or more', s));
      assert.equal(s.frameWidth, 640, failure('decoded frames are not 640 wide', s));
    } finally {
      await page.close();
    }
  });
});

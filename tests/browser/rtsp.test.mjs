// RTSP cameras (issue 37) in Chromium: GStreamer's RTSP server (tests/rtsp/camera.py: x264 +
// AAC behind basic auth) is an on-demand [[app.source]] of `tern serve`; nothing connects to
// it before the first viewer; Chromium plays it over WHEP (video decoded, Opus audio
// received and decoded) with the first frame within 3 s of the request, and hls.js plays its
// LL-HLS. The figures are printed on lines starting with "rtsp".
//
// Run inside a private network namespace: ./scripts/netns-run.sh node --test tests/browser/rtsp.test.mjs

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { launchBrowser, newLoggedPage, openWhepViewer, readHls, readWhepViewer, startHls } from './browser.mjs';
import { freeTcpPort, startServer } from './server.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const CAMERA = join(HERE, '..', 'rtsp', 'camera.py');
const HLS_JS = join(HERE, 'node_modules', 'hls.js', 'dist', 'hls.min.js');
const PASSWORD = 'Pw-0f-the-c4mera';
const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

/** Starts the test camera on `port`; resolves once it listens. */
async function startCamera(port) {
  const proc = spawn('/usr/bin/python3', [CAMERA, String(port), '--user', 'viewer', '--password', PASSWORD],
    { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout.on('data', (c) => { out += c.toString(); });
  proc.stderr.on('data', (c) => { out += c.toString(); });
  const t0 = Date.now();
  while (!out.includes('ready')) {
    if (Date.now() - t0 > 15_000 || proc.exitCode !== null) throw new Error(`camera did not start:\n${out}`);
    await sleep(50);
  }
  return { proc, log: () => out, connections: () => out.split('client-connected').length - 1 };
}

describe('an RTSP camera played in Chromium', { timeout: 120_000 }, () => {
  let dir;
  let server;
  let browser;
  let camera;

  before(async () => {
    const port = await freeTcpPort();
    camera = await startCamera(port);
    dir = await mkdtemp(join(tmpdir(), 'tern-rtsp-'));
    const config = join(dir, 'tern.toml');
    await writeFile(config, '[[app]]\nname = "cams"\nidle_grace_s = 3\n\n[[app.source]]\nstream = "door"\n' +
      `url = "rtsp://viewer:${PASSWORD}@127.0.0.1:${port}/cam"\n`);
    server = await startServer({ extraArgs: ['--config', config, '--rtmp', 'none'] });
    browser = await launchBrowser();
  }, { timeout: 60_000 });

  after(async () => {
    await browser?.close();
    await server?.stop();
    camera?.proc.kill('SIGKILL');
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const failure = (what, s, log) => `${what}\nlast state: ${JSON.stringify(s)}\n--- page log ---\n${log()}\n` +
    `--- camera ---\n${camera.log()}\n--- server output ---\n${server.tail()}`;

  it('WHEP: no camera connection before the request, first frame within 3 s, video and audio decoded', { timeout: 40_000 }, async (t) => {
    await sleep(1_000);
    assert.equal(camera.connections(), 0, `the camera was connected before any viewer:\n${camera.log()}`);
    const { page, log } = await newLoggedPage(browser.context);
    try {
      await page.goto(`${server.base}/`, { waitUntil: 'domcontentloaded' });
      const started = Date.now();
      const r = await page.evaluate(openWhepViewer, { endpoint: `${server.base}/cams/door/whep`, audio: true });
      assert.equal(r.status, 201, failure(`WHEP answered ${r.status}: ${r.error}`, r, log));
      // The audio played out (Chromium decodes a received track only into a sink).
      await page.evaluate(() => {
        const a = document.createElement('audio');
        a.srcObject = new MediaStream(window.viewPc.getReceivers().map((x) => x.track));
        document.body.append(a);
        return a.play().catch(() => {});
      });
      let s = {};
      while (Date.now() - started < 10_000) {
        s = await page.evaluate(readWhepViewer);
        if (s.frames > 0) break;
        await sleep(50);
      }
      const first = Date.now() - started;
      assert.ok(s.frames > 0, failure('no frame decoded within 10 s', s, log));
      await sleep(5_000);
      s = await page.evaluate(readWhepViewer);
      const audio = await page.evaluate(async () => {
        let out = {};
        (await window.viewPc.getStats()).forEach((x) => {
          if (x.type === 'inbound-rtp' && x.kind === 'audio') out = { samples: x.totalSamplesReceived ?? 0, level: x.audioLevel ?? 0 };
        });
        return out;
      });
      console.log(`rtsp WHEP: first frame ${first} ms after the request; then ${s.frames} frames ${s.width} wide, ` +
        `${s.audioPackets} audio packets, ${audio.samples} samples, level ${audio.level}`);
      t.diagnostic(`first frame after ${first} ms`);
      assert.ok(first < 3_000, failure(`first frame after ${first} ms (want < 3 s)`, s, log));
      assert.ok(s.frames >= 100, failure(`${s.frames} frames decoded in ~5 s`, s, log));
      assert.equal(s.width, 640, failure('frames are not 640 wide', s, log));
      assert.ok(s.audioPackets > 150, failure(`${s.audioPackets} audio packets in ~5 s`, s, log));
      assert.ok(audio.samples > 0, failure('no audio decoded', audio, log));
      assert.ok(camera.connections() >= 1);
    } finally {
      await page.close();
    }
  });

  it('LL-HLS: hls.js plays the camera', { timeout: 40_000 }, async () => {
    const { page, log } = await newLoggedPage(browser.context);
    let s = {};
    try {
      await page.setContent('<!doctype html><html><head><title>hls.js</title></head><body></body></html>');
      await page.addScriptTag({ path: HLS_JS });
      const started = await page.evaluate(startHls, { url: `${server.base}/cams/door/index.m3u8` });
      assert.equal(started.error, undefined, failure(started.error, s, log));
      const t0 = Date.now();
      while (Date.now() - t0 < 20_000) {
        s = await page.evaluate(readHls);
        if (s.currentTime > 3 && s.frames > 0) break;
        if (s.errors.some((e) => e.fatal)) break;
        await sleep(250);
      }
      console.log(`rtsp LL-HLS: currentTime ${s.currentTime}, ${s.frames} frames, ${s.videoWidth}x${s.videoHeight}, ` +
        `codecs ${s.videoCodec} ${s.audioCodec}, latency ${s.latency}`);
      assert.deepEqual(s.errors.filter((e) => e.fatal), [], failure('hls.js fatal error', s, log));
      assert.ok(s.currentTime > 3 && s.frames > 0, failure('hls.js did not play 3 s within 20 s', s, log));
      assert.equal(s.videoWidth, 640, failure('not 640 wide', s, log));
    } finally {
      await page.close();
    }
  });
});

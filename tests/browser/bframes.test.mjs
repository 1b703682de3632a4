// RTMP with B-frames, as ffmpeg and OBS send by default (x264 High profile, -bf 3; and an
// OBS-like 1280x720 with -bf 2 and a 10 s GOP, joined mid-GOP): tern
// transcodes the video to Constrained Baseline while the stream has a WebRTC viewer, so a
// Chromium viewer plays it smoothly. With `transcode = "never"` the video passes through
// and the publisher carries a warning. Both cases: the warning in the API
// (GET /v1/publishers) and a `publisher.warning` event; the viewer's decoded frames,
// freezes and losses printed (and asserted for the transcoded case).
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

/** In a page: collects the server's publisher.warning events. */
function listen(base) {
  window.warnings = [];
  const ws = new WebSocket(`${base.replace('http', 'ws')}/v1/events?type=publisher.warning`);
  ws.onmessage = (m) => window.warnings.push(JSON.parse(m.data));
  return new Promise((ok) => {
    ws.onopen = () => ok(true);
    ws.onerror = () => ok(false);
  });
}

describe('RTMP with B-frames (x264 High, -bf 3) to Chromium', { timeout: 200_000 }, () => {
  let dir;
  let server;
  let browser;
  let rtmpPort;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tern-bframes-'));
    const config = join(dir, 'tern.toml');
    await writeFile(
      config,
      '[[app]]\nname = "live"\nstreams = ["bf"]\n\n[[app]]\nname = "raw"\nstreams = ["bf"]\ntranscode = "never"\n' +
        '\n[[app]]\nname = "obs"\nstreams = ["bf"]\n',
    );
    rtmpPort = await freeTcpPort();
    server = await startServer({
      readyTimeoutMs: 20_000,
      extraArgs: ['--config', config, '--rtmp', `127.0.0.1:${rtmpPort}`],
    });
    browser = await launchBrowser();
  }, { timeout: 60_000 });

  after(async () => {
    await browser?.close();
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const CASES = [
    { app: 'live', transcode: 'auto', size: '640x360', bf: '3', gop: '60', rate: '1200k' },
    { app: 'raw', transcode: 'never', size: '640x360', bf: '3', gop: '60', rate: '1200k' },
    // OBS's defaults at 720p: 2 B-frames, a keyframe every 10 s (keyint 300 at 30 fps).
    { app: 'obs', transcode: 'auto', size: '1280x720', bf: '2', gop: '300', rate: '2500k' },
  ];
  for (const { app, transcode, size, bf, gop, rate } of CASES) {
    it(`transcode = "${transcode}", ${size}, -bf ${bf}, GOP ${gop} frames`, { timeout: 90_000 }, async () => {
      const events = await newLoggedPage(browser.context);
      await events.page.goto(`${server.base}/`);
      assert.ok(await events.page.evaluate(listen, server.base), 'event stream opened');
      // OBS-like: High profile, 3 B-frames, a keyframe every 2 s, AAC audio.
      const ffmpeg = await publishRtmp(server, `${app}/bf`, [
        '-hide_banner', '-nostdin', '-loglevel', 'warning',
        '-re', '-f', 'lavfi', '-i', `testsrc2=size=${size}:rate=30`,
        '-re', '-f', 'lavfi', '-i', 'sine=frequency=440:sample_rate=48000',
        '-t', '40', '-c:v', 'libx264', '-profile:v', 'high', '-bf', bf, '-preset', 'veryfast',
        '-b:v', rate, '-pix_fmt', 'yuv420p', '-g', gop, '-c:a', 'aac', '-b:a', '128k',
        '-f', 'flv', `rtmp://127.0.0.1:${rtmpPort}/${app}/bf`,
      ]);
      const { page, log } = await newLoggedPage(browser.context);
      const failure = (what, s) =>
        `${what}\nlast video stats: ${JSON.stringify(s)}\n--- page log ---\n${log()}\n` +
        `--- ffmpeg ---\n${ffmpeg.log()}\n--- server output ---\n${server.tail()}`;
      try {
        await sleep(1000);
        await page.goto(`${server.base}/${app}/bf`, { timeout: 10_000, waitUntil: 'domcontentloaded' });
        await sleep(3000);
        const before = await page.evaluate(readVideo);
        await sleep(10_000);
        const s = await page.evaluate(readVideo);
        const frames = s.framesDecoded - (before.framesDecoded ?? 0);
        const pubs = await (await fetch(`${server.base}/v1/publishers`)).json();
        const pub = (pubs.publishers ?? pubs).find((p) => p.identity?.stream === `${app}/bf`);
        const warnings = await events.page.evaluate(() => window.warnings);
        console.log(`${app} transcode=${transcode} ${size} bf=${bf} gop=${gop}: ${frames} frames decoded in the last 10 s; ${JSON.stringify(s)}`);
        console.log(`${app} transcode=${transcode}: publisher video ${JSON.stringify(pub?.video)}; events ${JSON.stringify(warnings.map((w) => w.reason))}`);
        assert.ok(pub, failure('publisher in /v1/publishers', pubs));
        assert.equal(pub.video?.b_frames, true, failure('the API says B-frames', pub));
        assert.equal(pub.video?.transcode, transcode, failure('the API says the mode', pub));
        assert.ok(warnings.some((w) => w.reason === 'b-frames' && w.stream === `${app}/bf`),
          failure('a publisher.warning event for the B-frames', warnings));
        if (transcode === 'auto') {
          assert.equal(pub.video.transcoding, true, failure('transcoding while a viewer watches', pub));
          assert.ok(warnings.some((w) => w.reason === 'transcode-started'), failure('transcode-started event', warnings));
          assert.ok(frames >= 250, failure(`at least 250 of 300 frames decoded in 10 s (got ${frames})`, s));
          assert.ok(s.totalFreezesDuration < 1, failure('frozen for a second or more', s));
          assert.equal(s.packetsLost, 0, failure('packets lost', s));
          assert.equal(s.frameWidth, Number(size.split('x')[0]), failure('source size kept', s));
        } else {
          assert.equal(pub.video.transcoding, false, failure('never transcoding', pub));
        }
      } finally {
        ffmpeg.proc.kill('SIGKILL');
        await page.close();
        await events.page.close();
      }
      if (app === 'live') {
        // The last viewer left: the transcoder stops after its grace (5 s) at the next frame.
        let stopped = false;
        for (let i = 0; i < 10 && !stopped; i++) {
          await sleep(1000);
          stopped = server.output().includes('live/bf: transcoding stopped');
        }
        // ffmpeg was killed with the page: the stream may have ended before the grace, in
        // which case the publisher simply left. Either way no transcoder is left running.
        console.log(`${app} transcode=auto: stopped after the viewer left: ${stopped}`);
      }
    });
  }
});

// Any stream name with an admission webhook, in Chromium: ffmpeg pushes RTMP to a name no
// config declares (live/anyname), the webhook served by this test admits the publish and
// the play, and headless Chromium plays the stream from its player page (frames decoded).
//
// Run inside a private network namespace: ./scripts/netns-run.sh node --test tests/browser/

import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { launchBrowser, newLoggedPage } from './browser.mjs';
import { freeTcpPort, publishRtmp, startServer } from './server.mjs';

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

describe('undeclared stream admitted by a webhook, played in Chromium', { timeout: 120_000 }, () => {
  let dir;
  let server;
  let browser;
  let ffmpeg;
  let hook;
  const asked = [];

  before(async () => {
    hook = createServer((req, res) => {
      let body = '';
      req.on('data', (d) => { body += d; });
      req.on('end', () => {
        asked.push(JSON.parse(body));
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify({ allow: true }));
      });
    });
    await new Promise((ok) => hook.listen(0, '127.0.0.1', ok));
    dir = await mkdtemp(join(tmpdir(), 'tern-admission-'));
    const config = join(dir, 'tern.toml');
    await writeFile(config, '[[app]]\nname = "live"\n\n[app.admission]\n' +
      `url = "http://127.0.0.1:${hook.address().port}/admit"\n`);
    const rtmpPort = await freeTcpPort();
    server = await startServer({
      readyTimeoutMs: 20_000,
      extraArgs: ['--config', config, '--rtmp', `127.0.0.1:${rtmpPort}`],
    });
    ffmpeg = await publishRtmp(server, 'live/anyname', [
      '-hide_banner', '-nostdin', '-loglevel', 'warning',
      '-re', '-f', 'lavfi', '-i', 'testsrc=size=320x240:rate=30',
      '-re', '-f', 'lavfi', '-i', 'sine=frequency=440:sample_rate=44100',
      '-t', '40', '-c:v', 'libx264', '-profile:v', 'baseline', '-tune', 'zerolatency',
      '-pix_fmt', 'yuv420p', '-g', '30', '-c:a', 'aac',
      '-f', 'flv', `rtmp://127.0.0.1:${rtmpPort}/live/anyname?token=key1`,
    ]);
    browser = await launchBrowser();
  }, { timeout: 60_000 });

  after(async () => {
    ffmpeg?.proc.kill('SIGKILL');
    await browser?.close();
    await server?.stop();
    hook?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('the player page plays live/anyname and the webhook saw publish and play', { timeout: 45_000 }, async () => {
    const { page, log } = await newLoggedPage(browser.context);
    try {
      await page.goto(`${server.base}/live/anyname`, { timeout: 10_000, waitUntil: 'domcontentloaded' });
      let frames = 0;
      const started = Date.now();
      while (Date.now() - started < 20_000 && frames < 30) {
        frames = await page.evaluate(async () => {
          let n = 0;
          const pc = window.ternPc;
          if (pc) (await pc.getStats()).forEach((s) => {
            if (s.type === 'inbound-rtp' && s.kind === 'video') n = s.framesDecoded ?? 0;
          });
          return n;
        });
        await sleep(200);
      }
      assert.ok(frames >= 30, `only ${frames} frames decoded\n--- page ---\n${log()}\n--- server ---\n${server.tail()}`);
      const publish = asked.find((a) => a.action === 'publish');
      assert.equal(publish?.protocol, 'rtmp');
      assert.equal(publish?.stream, 'anyname');
      assert.equal(publish?.token, 'key1');
      const play = asked.find((a) => a.action === 'play');
      assert.equal(play?.protocol, 'whep');
      assert.equal(play?.stream, 'anyname');
    } finally {
      await page.close();
    }
  });
});

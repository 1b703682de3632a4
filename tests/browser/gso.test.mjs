// UDP GSO on the fan-out (issue 35) with real Chromium viewers: tern sends each viewer's run
// of equal-size packets as one UDP_SEGMENT message, the kernel cuts it, and Chromium must see
// ordinary datagrams: no packet lost, no freeze, with GSO messages counted in /metrics.
//   1. an RTMP stream (ffmpeg, 640x360 H264 at ~1.5 Mbit/s: several packets a frame), played
//      from the WHEP player page;
//   2. a Chromium WHIP publisher (H264 canvas; libwebrtc splits frames "about equally", so
//      the runs come from RTP padding), watched by a Chromium WHEP viewer.
//
// Run inside a private network namespace: ./scripts/netns-run.sh node --test tests/browser/

import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  launchBrowser, newLoggedPage, openWhepViewer, publishCanvas, readVideo, readWhepViewer,
} from './browser.mjs';
import { freeTcpPort, publishRtmp, startServer } from './server.mjs';

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

async function metric(server, name) {
  const text = await (await fetch(`${server.base}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  assert.ok(line, `metric ${name} missing`);
  return Number(line.split(' ')[1]);
}

async function gsoCounters(server) {
  return {
    messages: await metric(server, 'tern_gso_messages_total'),
    packets: await metric(server, 'tern_gso_packets_total'),
    fallbacks: await metric(server, 'tern_gso_fallbacks_total'),
    out: await metric(server, 'tern_packets_out_total'),
  };
}

describe('GSO messages to Chromium viewers', { timeout: 180_000 }, () => {
  let dir;
  let server;
  let browser;
  let ffmpeg;
  let rtmpPort;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tern-gso-'));
    const config = join(dir, 'tern.toml');
    await writeFile(config, '[tunables]\ngso = "auto"\n\n[[app]]\nname = "live"\nstreams = ["cam", "whip"]\n');
    rtmpPort = await freeTcpPort();
    server = await startServer({
      readyTimeoutMs: 20_000,
      extraArgs: ['--config', config, '--rtmp', `127.0.0.1:${rtmpPort}`],
    });
    browser = await launchBrowser();
  }, { timeout: 60_000 });

  after(async () => {
    ffmpeg?.proc.kill('SIGKILL');
    await browser?.close();
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('an RTMP stream plays without loss or freeze, its video in GSO messages', { timeout: 60_000 }, async (t) => {
    ffmpeg = await publishRtmp(server, 'live/cam', [
      '-hide_banner', '-nostdin', '-loglevel', 'warning',
      '-re', '-f', 'lavfi', '-i', 'testsrc2=size=640x360:rate=30',
      '-t', '40', '-c:v', 'libx264', '-profile:v', 'baseline', '-tune', 'zerolatency',
      '-x264-params', 'sliced-threads=0', '-b:v', '1500k', '-maxrate', '1500k', '-bufsize', '1M',
      '-pix_fmt', 'yuv420p', '-g', '30', '-an',
      '-f', 'flv', `rtmp://127.0.0.1:${rtmpPort}/live/cam`,
    ]);
    const { page, log } = await newLoggedPage(browser.context);
    const failure = (what, s) =>
      `${what}\nlast player state: ${JSON.stringify(s)}\n--- page log ---\n${log()}\n` +
      `--- ffmpeg ---\n${ffmpeg?.log() ?? ''}\n--- server output ---\n${server.tail()}`;
    try {
      const before = await gsoCounters(server);
      await page.goto(`${server.base}/live/cam`, { timeout: 10_000, waitUntil: 'domcontentloaded' });
      let s = {};
      const started = Date.now();
      while (Date.now() - started < 20_000) {
        s = await page.evaluate(readVideo);
        if (s.framesDecoded > 0) break;
        await sleep(200);
      }
      assert.ok(s.framesDecoded > 0, failure('no video frame decoded within 20 s', s));
      const base = s.framesDecoded;
      await sleep(10_000);
      s = await page.evaluate(readVideo);
      const g = await gsoCounters(server);
      const gso = { messages: g.messages - before.messages, packets: g.packets - before.packets, out: g.out - before.out };
      t.diagnostic(`RTMP: +${s.framesDecoded - base} frames, ${s.packetsReceived} packets, lost ${s.packetsLost}, ` +
        `freezes ${s.freezeCount}, nacks ${s.nackCount}; GSO ${JSON.stringify(gso)}, fallbacks ${g.fallbacks}`);
      assert.ok(s.framesDecoded - base >= 250, failure('fewer than 250 frames in 10 s', s));
      assert.equal(s.packetsLost, 0, failure('packets lost', s));
      assert.equal(s.freezeCount, 0, failure('the video froze', s));
      assert.equal(g.fallbacks, 0, failure('a GSO send failed', s));
      assert.ok(gso.messages > 0, failure(`no GSO message: ${JSON.stringify(gso)}`, s));
      // Nearly all of the viewer's packets are video in runs of several.
      assert.ok(gso.packets >= 0.8 * gso.out, failure(`GSO carried too little: ${JSON.stringify(gso)}`, s));
    } finally {
      await page.close();
    }
  });

  it('a Chromium WHIP publisher reaches a Chromium viewer without loss or freeze, through GSO', { timeout: 60_000 }, async (t) => {
    const pub = await newLoggedPage(browser.context);
    const view = await newLoggedPage(browser.context);
    const stream = `${server.base}/live/whip`;
    const why = (s) => `${JSON.stringify(s)}\n--- publisher ---\n${pub.log()}\n--- viewer ---\n${view.log()}\n--- server ---\n${server.tail()}`;
    try {
      await pub.page.goto(`${server.base}/`);
      await view.page.goto(`${server.base}/`);
      const p = await pub.page.evaluate(publishCanvas, { endpoint: `${stream}/whip`, codec: 'H264' });
      assert.equal(p.error, undefined, why(p));
      await sleep(2000);
      const before = await gsoCounters(server);
      const v = await view.page.evaluate(openWhepViewer, { endpoint: `${stream}/whep` });
      assert.equal(v.status, 201, why(v));
      let s = {};
      const started = Date.now();
      while (Date.now() - started < 15_000) {
        s = await view.page.evaluate(readWhepViewer);
        if (s.frames > 0) break;
        await sleep(200);
      }
      assert.ok(s.frames > 0, why(s));
      const base = s.frames;
      await sleep(10_000);
      s = await view.page.evaluate(readWhepViewer);
      const g = await gsoCounters(server);
      const gso = { messages: g.messages - before.messages, packets: g.packets - before.packets, out: g.out - before.out };
      t.diagnostic(`WHIP: +${s.frames - base} frames, ${s.packets} packets, lost ${s.lost}, freezes ${s.freezes}, ` +
        `nacks ${s.nacks}; GSO ${JSON.stringify(gso)}, fallbacks ${g.fallbacks}`);
      assert.ok(s.frames - base >= 200, why(s));
      assert.equal(s.lost, 0, why(s));
      assert.equal(s.freezes, 0, why(s));
      assert.equal(g.fallbacks, 0, why(s));
      assert.ok(gso.messages > 0, `no GSO message: ${JSON.stringify(gso)} ${why(s)}`);
    } finally {
      await pub.page.evaluate(() => {
        clearInterval(window.drawTimer);
        window.pubPc?.close();
      }).catch(() => {});
      await pub.page.close();
      await view.page.close();
    }
  });
});

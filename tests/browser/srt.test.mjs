// End-to-end SRT ingest (issue 36): Debian's ffmpeg (libsrt) publishes testsrc (H264) + sine
// (AAC) as MPEG-TS over SRT to `tern serve --srt`, with each stream ID form (bare, SRT access
// control with pbkeylen 16, MediaMTX with pbkeylen 32; and through srt-live-transmit with
// pbkeylen 24), and headless Chromium plays each from
// the WHEP player page: video frames decoded, Opus audio received, decoded and audible (the
// 440 Hz sine made it through AAC -> Opus).
//
// Run inside a private network namespace: ./scripts/netns-run.sh node --test tests/browser/

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { launchBrowser, newLoggedPage } from './browser.mjs';
import { freeUdpPort, listenAddress, publishRtmp, startServer } from './server.mjs';

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));
const PASS = 'correct horse battery';

/** Runs in the page: the player's inbound-rtp stats. */
async function readPlayer() {
  const out = { status: document.querySelector('#status')?.textContent ?? null };
  const pc = window.ternPc;
  if (!pc) return out;
  out.ice = pc.iceConnectionState;
  (await pc.getStats()).forEach((s) => {
    if (s.type !== 'inbound-rtp') return;
    if (s.kind === 'video') {
      out.framesDecoded = s.framesDecoded ?? 0;
      out.frameWidth = s.frameWidth ?? 0;
    }
    if (s.kind === 'audio') {
      out.audioPackets = s.packetsReceived ?? 0;
      out.samples = s.totalSamplesReceived ?? 0;
      out.audioLevel = s.audioLevel ?? 0;
    }
  });
  return out;
}

describe('SRT ingest played in Chromium', { timeout: 240_000 }, () => {
  let dir;
  let server;
  let browser;
  let srt;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tern-srt-'));
    const config = join(dir, 'tern.toml');
    await writeFile(config, `[[app]]\nname = "live"\n\n[[app]]\nname = "sec"\nsrt_passphrase = "${PASS}"\n`);
    server = await startServer({
      readyTimeoutMs: 20_000,
      extraArgs: ['--config', config, '--rtmp', 'none', '--srt', '127.0.0.1:0'],
    });
    // Port 0: the port the kernel chose.
    srt = await listenAddress(server, 'srt');
    assert.ok(srt, `no SRT address in\n${server.tail()}`);
    browser = await launchBrowser();
  }, { timeout: 60_000 });

  after(async () => {
    await browser?.close();
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  // [stream, SRT query, relay]: with a relay, ffmpeg sends the TS over UDP to Debian's
  // srt-live-transmit, which calls tern.
  const forms = [
    ['live/bare', 'streamid=live/bare', false],
    ['sec/ac', `streamid=#!::r=sec/ac,m=publish&passphrase=${PASS}&pbkeylen=16`, false],
    ['sec/mtx', `streamid=publish:sec/mtx:user:pw&passphrase=${PASS}&pbkeylen=32`, false],
    ['sec/relay', `streamid=#!::r=sec/relay,m=publish&passphrase=${PASS}&pbkeylen=24`, true],
  ];
  for (const [key, query, relayed] of forms) {
    it(`player page plays ${key} (${query.split('&').slice(0, 1)}${relayed ? ', via srt-live-transmit' : ''}): frames decoded, audio audible`, { timeout: 60_000 }, async (t) => {
      let relay = null;
      let target = `srt://${srt}?${query}`;
      if (relayed) {
        const udp = await freeUdpPort();
        relay = spawn('srt-live-transmit', [`udp://127.0.0.1:${udp}`, target], { stdio: 'ignore' });
        await sleep(300);
        target = `udp://127.0.0.1:${udp}?pkt_size=1316`;
      }
      const ffmpeg = await publishRtmp(server, key, [
        '-hide_banner', '-nostdin', '-loglevel', 'warning',
        '-re', '-f', 'lavfi', '-i', 'testsrc=size=320x240:rate=30',
        '-re', '-f', 'lavfi', '-i', 'sine=frequency=440:sample_rate=44100',
        '-t', '30', '-c:v', 'libx264', '-profile:v', 'baseline', '-tune', 'zerolatency',
        '-pix_fmt', 'yuv420p', '-g', '30', '-c:a', 'aac',
        '-f', 'mpegts', target,
      ]);
      const { page, log } = await newLoggedPage(browser.context);
      const failure = (what, s) =>
        `${what}\nlast player state: ${JSON.stringify(s)}\n--- page log ---\n${log()}\n` +
        `--- ffmpeg ---\n${ffmpeg.log()}\n--- server output ---\n${server.tail()}`;
      try {
        const started = Date.now();
        await page.goto(`${server.base}/${key}`, { timeout: 10_000, waitUntil: 'domcontentloaded' });
        let s = {};
        while (Date.now() - started < 20_000) {
          s = await page.evaluate(readPlayer);
          if (s.framesDecoded > 0) break;
          await sleep(200);
        }
        assert.ok(s.framesDecoded > 0, failure('no video frame decoded within 20 s', s));
        await page.click('#video');
        await page.evaluate(async () => {
          const video = document.querySelector('#video');
          video.muted = false;
          video.volume = 1;
          await video.play();
        });
        const firstAt = Date.now();
        const base = s.framesDecoded;
        while (Date.now() - firstAt < 10_000) {
          s = await page.evaluate(readPlayer);
          if (s.framesDecoded - base >= 120 && s.audioPackets > 200 && s.samples > 0 && s.audioLevel > 0.05) break;
          await sleep(250);
        }
        const grown = s.framesDecoded - base;
        t.diagnostic(`${key}: first frame after ${firstAt - started} ms; then +${grown} frames; audio: ` +
          `${s.audioPackets} packets, ${s.samples} samples, level ${s.audioLevel}`);
        assert.ok(grown >= 120, failure(`framesDecoded grew by ${grown} (want >= 120 in 10 s)`, s));
        assert.equal(s.frameWidth, 320, failure('decoded frames are not 320 wide', s));
        assert.ok(s.audioPackets > 200, failure(`audio packetsReceived ${s.audioPackets} (want > 200)`, s));
        assert.ok(s.samples > 0, failure('no audio samples decoded', s));
        assert.ok(s.audioLevel > 0.05 && s.audioLevel < 0.25, failure(`audio level ${s.audioLevel} (want ~0.125)`, s));
      } finally {
        await page.close();
        ffmpeg.proc.kill('SIGKILL');
        relay?.kill('SIGKILL');
      }
    });
  }
});

// End-to-end RTMP ingest: Debian's ffmpeg pushes testsrc (H264 baseline) + sine (AAC) over
// RTMPS (RTMP over TLS, `--rtmps` with a self-signed certificate; plain RTMP's Chromium tests
// are slate, bframes and others) to `tern demo --config ... --rtmps ...`, and headless
// Chromium plays live/cam from the WHEP player page: video frames decoded, Opus audio
// received and decoded (samples and a non-zero audio level: the 440 Hz sine made it through
// AAC -> Opus).
//
// Run inside a private network namespace: ./scripts/netns-run.sh node --test tests/browser/

import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { launchBrowser, newLoggedPage } from './browser.mjs';
import { makeCertificate } from './certs.mjs';
import { freeTcpPort, publishRtmp, startServer } from './server.mjs';

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

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
      out.audioLost = s.packetsLost ?? 0;
      out.samples = s.totalSamplesReceived ?? 0;
      out.audioLevel = s.audioLevel ?? 0;
      out.audioEnergy = s.totalAudioEnergy ?? 0;
    }
  });
  return out;
}

describe('RTMPS ingest played in Chromium', { timeout: 120_000 }, () => {
  let dir;
  let server;
  let browser;
  let ffmpeg;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tern-rtmp-'));
    const config = join(dir, 'tern.toml');
    await writeFile(config, '[[app]]\nname = "live"\nstreams = ["cam"]\n');
    const rtmpPort = await freeTcpPort();
    const { cert, key } = makeCertificate(dir);
    server = await startServer({
      readyTimeoutMs: 20_000,
      extraArgs: ['--config', config, '--rtmp', 'none', '--rtmps', `127.0.0.1:${rtmpPort}`, '--tls-cert', cert, '--tls-key', key],
    });
    ffmpeg = await publishRtmp(server, 'live/cam', [
      '-hide_banner', '-nostdin', '-loglevel', 'warning',
      '-re', '-f', 'lavfi', '-i', 'testsrc=size=320x240:rate=30',
      '-re', '-f', 'lavfi', '-i', 'sine=frequency=440:sample_rate=44100',
      '-t', '40', '-c:v', 'libx264', '-profile:v', 'baseline', '-tune', 'zerolatency',
      '-pix_fmt', 'yuv420p', '-g', '30', '-c:a', 'aac',
      '-f', 'flv', `rtmps://127.0.0.1:${rtmpPort}/live/cam`,
    ]);
    browser = await launchBrowser();
  }, { timeout: 60_000 });

  after(async () => {
    ffmpeg?.proc.kill('SIGKILL');
    await browser?.close();
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('player page plays live/cam: frames decoded, Opus audio received and audible', { timeout: 45_000 }, async (t) => {
    const { page, log } = await newLoggedPage(browser.context);
    const failure = (what, s) =>
      `${what}\nlast player state: ${JSON.stringify(s)}\n--- page log ---\n${log()}\n` +
      `--- ffmpeg ---\n${ffmpeg?.log() ?? ''}\n--- server output ---\n${server.tail()}`;
    try {
      const started = Date.now();
      await page.goto(`${server.base}/live/cam`, { timeout: 10_000, waitUntil: 'domcontentloaded' });
      let s = {};
      while (Date.now() - started < 20_000) {
        s = await page.evaluate(readPlayer);
        if (s.framesDecoded > 0) break;
        await sleep(200);
      }
      assert.ok(s.framesDecoded > 0, failure('no video frame decoded within 20 s', s));
      // The player starts muted (autoplay policy); a click is the user gesture that lets
      // it unmute, so that Chromium plays the audio out and measures its level.
      await page.click('#video');
      await page.evaluate(async () => {
        const video = document.querySelector('#video');
        video.muted = false;
        video.volume = 1;
        await video.play();
      });
      const firstAt = Date.now();
      const base = s.framesDecoded;
      // 5 s of playing: ~150 frames at 30 fps, ~250 Opus packets.
      while (Date.now() - firstAt < 10_000) {
        s = await page.evaluate(readPlayer);
        if (s.framesDecoded - base >= 120 && s.audioPackets > 200 && s.samples > 0 && s.audioLevel > 0.05) break;
        await sleep(250);
      }
      const grown = s.framesDecoded - base;
      t.diagnostic(`first frame after ${firstAt - started} ms; then +${grown} frames; audio: ${s.audioPackets} packets, ` +
        `${s.audioLost} lost, ${s.samples} samples, level ${s.audioLevel}, energy ${s.audioEnergy}`);
      assert.ok(grown >= 120, failure(`framesDecoded grew by ${grown} (want >= 120 in 10 s)`, s));
      assert.equal(s.frameWidth, 320, failure('decoded frames are not 320 wide', s));
      assert.ok(s.audioPackets > 200, failure(`audio packetsReceived ${s.audioPackets} (want > 200)`, s));
      assert.ok(s.samples > 0, failure('no audio samples decoded', s));
      // ffmpeg's sine has an amplitude of 1/8: the level Chromium measures should be near it.
      assert.ok(s.audioLevel > 0.05 && s.audioLevel < 0.25, failure(`audio level ${s.audioLevel} (want ~0.125)`, s));
    } finally {
      await page.close();
    }
  });
});

// Recording a WHIP publisher (issue 38): headless Chromium publishes a canvas (VP8, then
// VP9) and a WebAudio tone (Opus) over WHIP to an app with `record.enabled`; after ~12 s it stops.
// The file tern wrote is checked with ffprobe (vp8 + opus), then played back from the API
// URL in Chromium's <video> (served with Range): it plays, has the picture size, decodes
// frames and audio, and seeks to 6 s and plays on from there.
//
// Run inside a private network namespace: ./scripts/netns-run.sh node --test tests/browser/

import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { launchBrowser, newLoggedPage, publishCanvas } from './browser.mjs';
import { startServer } from './server.mjs';

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

/** In the page: ends the WHIP session. */
async function unpublish() {
  clearInterval(window.drawTimer);
  await fetch(window.whipLocation, { method: 'DELETE' });
  window.pubPc.close();
}

/** In the page: plays `url` in a <video>, then seeks to `seekTo` s and plays on. */
async function playBack({ url, seekTo }) {
  const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));
  const v = document.createElement('video');
  v.muted = true;
  v.src = url;
  document.body.append(v);
  const error = () => (v.error ? `${v.error.code} ${v.error.message}` : null);
  try {
    await v.play();
  } catch (e) {
    return { error: `play(): ${e} ${error()}` };
  }
  await sleep(2000);
  const first = {
    currentTime: v.currentTime,
    duration: v.duration,
    width: v.videoWidth,
    height: v.videoHeight,
    frames: v.getVideoPlaybackQuality().totalVideoFrames,
    audioBytes: v.webkitAudioDecodedByteCount ?? null,
  };
  const seeked = new Promise((ok) => v.addEventListener('seeked', ok, { once: true }));
  v.currentTime = seekTo;
  await Promise.race([seeked, sleep(5000)]);
  const atSeek = v.currentTime;
  const framesAtSeek = v.getVideoPlaybackQuality().totalVideoFrames;
  await sleep(1500);
  return {
    first,
    atSeek,
    after: v.currentTime,
    framesAfter: v.getVideoPlaybackQuality().totalVideoFrames - framesAtSeek,
    paused: v.paused,
    error: error(),
  };
}

const CASES = [
  { codec: 'VP8', codecs: 'vp08.00.10.08,opus', ffprobe: ['opus', 'vp8'] },
  { codec: 'VP9', codecs: 'vp09.00.10.08,opus', ffprobe: ['opus', 'vp9'] },
];

describe('a WHIP publisher (VP8 or VP9 + Opus) recorded and played back in Chromium', { timeout: 120_000 }, () => {
  let server;
  let browser;
  let dir;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tern-recording-'));
    const config = join(dir, 'tern.toml');
    await writeFile(
      config,
      `[[app]]\nname = "live"\nstreams = ["vp8", "vp9"]\n[app.record]\nenabled = true\npath = "${dir}/rec/%stream-%Y%m%d-%H%M%S"\n`,
    );
    server = await startServer({ readyTimeoutMs: 20_000, extraArgs: ['--config', config] });
    browser = await launchBrowser();
  }, { timeout: 60_000 });

  after(async () => {
    await browser?.close();
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  for (const c of CASES) it(`${c.codec}: records the file, which plays and seeks in <video>`, { timeout: 90_000 }, async () => {
    const name = c.codec.toLowerCase();
    const pub = await newLoggedPage(browser.context);
    const view = await newLoggedPage(browser.context);
    const why = () => `\n--- publisher ---\n${pub.log()}\n--- viewer ---\n${view.log()}\n--- server ---\n${server.tail()}`;
    await pub.page.goto(`${server.base}/`);
    const p = await pub.page.evaluate(publishCanvas, { endpoint: `${server.base}/live/${name}/whip`, codec: c.codec, tone: true });
    assert.equal(p.error, undefined, `${JSON.stringify(p)}${why()}`);
    const state = await pub.page
      .waitForFunction(() => window.pubPc.connectionState === 'connected', null, { polling: 100, timeout: 10_000 })
      .then(() => 'connected', () => pub.page.evaluate(() => window.pubPc.connectionState));
    assert.equal(state, 'connected', why());
    assert.ok(p.answered.includes(c.codec) && p.audio.includes('opus'), `${JSON.stringify(p)}`);
    await sleep(12_000);
    await pub.page.evaluate(unpublish);

    // The recording stops with the stream and is listed once its file is finished.
    let files = [];
    for (let i = 0; i < 100; i++) {
      files = await (await fetch(`${server.base}/v1/recordings?app=live&stream=${name}`)).json();
      if (files.length === 1 && files[0].duration_s >= 9) break;
      await sleep(200);
    }
    assert.equal(files.length, 1, `${JSON.stringify(files)}${why()}`);
    const f = files[0];
    console.log(`recorded: ${JSON.stringify(f)}`);
    assert.equal(f.codecs, c.codecs, JSON.stringify(f));
    assert.ok(f.duration_s >= 9 && f.duration_s <= 13, JSON.stringify(f));
    const probe = JSON.parse(
      execFileSync('ffprobe', ['-v', 'error', '-show_entries', 'stream=codec_name,width,height', '-of', 'json', f.path]).toString(),
    );
    const names = probe.streams.map((s) => s.codec_name).sort();
    assert.deepEqual(names, c.ffprobe, JSON.stringify(probe));
    // ffmpeg reports on stderr (this check read its stdout before, where nothing comes);
    // the frames keep their own times (see forward.test.mjs).
    const dec = spawnSync('ffmpeg', ['-v', 'error', '-i', f.path, '-enc_time_base', '-1', '-fps_mode', 'passthrough', '-f', 'null', '-'], { stdio: ['ignore', 'pipe', 'pipe'] });
    assert.equal(dec.status, 0, dec.stderr.toString());
    assert.equal(dec.stderr.toString().trim(), '', dec.stderr.toString());

    await view.page.goto(`${server.base}/`);
    const r = await view.page.evaluate(playBack, { url: `${server.base}${f.url}`, seekTo: 6 });
    console.log(`playback: ${JSON.stringify(r)}`);
    assert.equal(r.error, null, `${JSON.stringify(r)}${why()}`);
    assert.equal(r.first.width, 640, JSON.stringify(r));
    assert.equal(r.first.height, 360, JSON.stringify(r));
    assert.ok(r.first.currentTime > 1, `playing: ${JSON.stringify(r)}`);
    assert.ok(r.first.frames > 20, JSON.stringify(r));
    assert.ok(Math.abs(r.first.duration - f.duration_s) < 1, `duration known: ${JSON.stringify(r)}`);
    assert.ok(r.atSeek >= 5.9 && r.atSeek < 7, `seeked: ${JSON.stringify(r)}`);
    assert.ok(r.after > r.atSeek + 0.5, `plays on after the seek: ${JSON.stringify(r)}`);
    assert.ok(r.framesAfter > 10, JSON.stringify(r));
    assert.ok((r.first.audioBytes ?? 1) > 0, `audio decoded: ${JSON.stringify(r)}`);
  });
});

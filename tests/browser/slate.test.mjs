// A channel that never goes black (issue 55, point 1): an app with `fallback = "clip"` and
// one with `fallback = "file:..."` (an MP4 of H264 and AAC that ffmpeg makes, 480x270). Each
// declared stream plays its slate before its first publisher; ffmpeg pushes RTMP (320x240
// testsrc + AAC), stops for 10 s, and pushes again. Three pion viewers and a Chromium
// viewer watch all along: a decoded frame in every second (pion over its half-second lines,
// Chromium over quarter-second reads), pion at 20 fps or more over the gap, Chromium on the
// slate's picture over the gap and back on the live picture (320 wide) soon after the
// encoder's return, and every viewer still connected at the end (0 lost). An LL-HLS session
// read along marks each switch (to the slate and back) with EXT-X-DISCONTINUITY, and a
// viewer's figures (GET /v1/viewers/{id}) say `feed: "slate"` over the gap.
//
// Run inside a private network namespace: ./scripts/netns-run.sh node --test tests/browser/

import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { launchBrowser, newLoggedPage, openWhepViewer, readWhepViewer } from './browser.mjs';
import { longestStall, startClient } from './clients.mjs';
import { freeTcpPort, publishRtmp, rtmpPushArgs as pushArgs, startServer } from './server.mjs';

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

/** The stream snapshot's `source` of `key`, from GET /v1/streams/{key}. */
async function source(base, key) {
  const r = await fetch(`${base}/v1/streams/${key}`);
  if (!r.ok) return `HTTP ${r.status}`;
  const v = await r.json();
  return v.snapshot?.source ?? v.source ?? JSON.stringify(v).slice(0, 200);
}

/** Opens an LL-HLS session of `key`: its media playlist's URL. */
async function openHls(base, key) {
  const text = await (await fetch(`${base}/${key}/index.m3u8`)).text();
  const uri = text.split('\n').find((l) => l.startsWith('media.m3u8'));
  assert.ok(uri, `no media playlist in ${text}`);
  return `${base}/${key}/${uri}`;
}

/** How many discontinuities a media playlist has seen: its EXT-X-DISCONTINUITY-SEQUENCE
 * (those evicted) and the EXT-X-DISCONTINUITY tags it holds. */
function discontinuities(playlist) {
  const evicted = Number(/#EXT-X-DISCONTINUITY-SEQUENCE:(\d+)/.exec(playlist)?.[1] ?? 0);
  return evicted + playlist.split('\n').filter((l) => l.trim() === '#EXT-X-DISCONTINUITY').length;
}

describe('slate: streams with a fallback across an encoder gap', { timeout: 200_000 }, () => {
  let dir;
  let server;
  let browser;
  let rtmpPort;
  const pushes = [];

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tern-slate-'));
    const slate = join(dir, 'slate.mp4');
    const made = spawnSync('ffmpeg', [
      '-hide_banner', '-loglevel', 'error', '-f', 'lavfi', '-i', 'testsrc2=size=480x270:rate=25',
      '-f', 'lavfi', '-i', 'sine=frequency=660:sample_rate=48000', '-t', '4',
      '-c:v', 'libx264', '-profile:v', 'baseline', '-pix_fmt', 'yuv420p', '-g', '25', '-bf', '0',
      '-c:a', 'aac', slate,
    ]);
    assert.equal(made.status, 0, `ffmpeg could not make the slate: ${made.stderr}`);
    const config = join(dir, 'tern.toml');
    await writeFile(
      config,
      '[[app]]\nname = "live"\nstreams = ["cam"]\nfallback = "clip"\n\n' +
        `[[app]]\nname = "file"\nstreams = ["cam"]\nfallback = "file:${slate}"\n`,
    );
    rtmpPort = await freeTcpPort();
    server = await startServer({
      readyTimeoutMs: 20_000,
      extraArgs: ['--config', config, '--rtmp', `127.0.0.1:${rtmpPort}`],
    });
    browser = await launchBrowser();
  }, { timeout: 60_000 });

  after(async () => {
    for (const p of pushes) p.proc.kill('SIGKILL');
    await browser?.close();
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** The scenario on `key` (`app/cam`): a push of `push` s, a gap of `gap` s, a second push;
   * the slate's picture is `slateWidth` wide. */
  async function acrossAGap(t, { key, slateWidth, push, gap }) {
    const base = server.base;
    const whep = `${base}/${key}/whep`;
    const url = `rtmp://127.0.0.1:${rtmpPort}/${key}`;
    // Before any publisher: the declared stream plays its slate.
    assert.equal(await source(base, key), 'slate');

    pushes.push(await publishRtmp(server, key, pushArgs(url, push)));
    const t0 = Date.now();
    const again = (push + gap) * 1000;
    const total = again + 12_000;
    const pion = [0, 1, 2].map(() => startClient('pion', whep, total / 1000 + 2));
    const { page, log } = await newLoggedPage(browser.context);
    const opened = await page.evaluate(openWhepViewer, { endpoint: whep, audio: true });
    assert.equal(opened.status, 201, JSON.stringify(opened));
    const hls = await openHls(base, key);
    let marks = 0;
    let playlist = '';
    const chromium = [];
    const sources = [];
    const feeds = [];
    let secondPush = null;
    while (Date.now() - t0 < total) {
      const at = Date.now() - t0;
      chromium.push({ t: at, ...(await page.evaluate(readWhepViewer)) });
      const now = await source(base, key);
      if (sources.at(-1)?.source !== now) sources.push({ t: at, source: now });
      if (chromium.length % 4 === 2) {
        // A viewer's `feed` (GET /v1/viewers/{id}): `slate` or `live`.
        const list = await (await fetch(`${base}/v1/streams/${key}/viewers`)).json();
        const id = list[0]?.identity?.id;
        const one = id === undefined ? null : await fetch(`${base}/v1/viewers/${id}`);
        const feed = one?.ok ? (await one.json()).live?.feed : null;
        if (feeds.at(-1)?.feed !== feed) feeds.push({ t: at, feed });
      }
      if (chromium.length % 4 === 0) {
        // Read once a second, which also keeps the LL-HLS session open.
        const r = await fetch(hls);
        if (r.ok) {
          playlist = await r.text();
          marks = Math.max(marks, discontinuities(playlist));
        }
      }
      // The first push ends near `push` s; `gap` s of slate; then the encoder is back.
      if (!secondPush && at >= again) {
        secondPush = at;
        pushes.push({ proc: spawn('ffmpeg', pushArgs(url, 10), { stdio: 'ignore' }) });
      }
      await sleep(250);
    }
    const lines = pion.map((c) => c.lines.slice());
    const ends = pion.map((c) => c.last());
    await Promise.all(pion.map((c) => c.stop()));
    await page.close();
    const failure = (what) =>
      `${key}: ${what}\nsources: ${JSON.stringify(sources)}\nfeeds: ${JSON.stringify(feeds)}\nchromium: ${JSON.stringify(chromium.filter((_, i) => i % 4 === 0))}\n` +
      `pion last: ${JSON.stringify(ends)}\n--- page log ---\n${log()}\n--- server ---\n${server.tail()}`;

    // The stream went slate when the first push ended, and live again after the second.
    const slateSeen = sources.find((s) => s.source === 'slate');
    assert.ok(slateSeen && slateSeen.t > push * 1000 - 2_000 && slateSeen.t < again, failure('no slate over the gap'));
    assert.ok(sources.some((s) => s.t > secondPush && s.source === 'rtmp'), failure('the second push never went live'));
    t.diagnostic(`${key}: on the slate for ${sources.find((s) => s.t > slateSeen.t && s.source === 'rtmp').t - slateSeen.t} ms`);

    // Chromium: a decoded frame in every second; the slate's picture over the gap, 320 after.
    const stall = longestStall(chromium.filter((s) => s.t > 2_000).map((s) => ({ t: s.t, frames: s.frames })));
    t.diagnostic(`${key} chromium: longest stall ${stall} ms; ${chromium.at(-1).frames} frames; lost ${chromium.at(-1).lost}`);
    assert.ok(stall < 1_000, failure(`Chromium went ${stall} ms without a decoded frame`));
    const inGap = chromium.filter((s) => s.t > push * 1000 + 3_000 && s.t < again - 1_000);
    assert.ok(inGap.length > 4 && inGap.every((s) => s.width === slateWidth), failure(`Chromium did not show the slate (${slateWidth} wide) over the gap`));
    const back = chromium.find((s) => s.t > secondPush && s.width === 320);
    assert.ok(back, failure('Chromium never came back to the live picture'));
    // The stream's source turns `rtmp` again with the encoder's first keyframe (ingest
    // waits for it): the live picture is on the screen within a second of that (both read
    // every 250 ms, so 250 ms more are allowed).
    const liveAgain = sources.find((s) => s.t > secondPush && s.source === 'rtmp');
    t.diagnostic(`${key} chromium back on the live picture ${back.t - secondPush} ms after the second push started, ${back.t - liveAgain.t} ms after its first keyframe`);
    assert.ok(back.t - liveAgain.t <= 1_250, failure(`the live picture came back ${back.t - liveAgain.t} ms after the encoder's first keyframe`));
    assert.equal(chromium.at(-1).ice, 'connected', failure('Chromium lost its connection'));

    // A viewer's figures say what it is fed: live, the slate over the gap, live again (and
    // the slate once more when the second push ends, near the end).
    t.diagnostic(`${key} viewer feed: ${JSON.stringify(feeds)}`);
    assert.deepEqual(
      feeds.filter((f) => f.feed).map((f) => f.feed).slice(0, 3),
      ['live', 'slate', 'live'],
      failure(`a viewer's feed went ${JSON.stringify(feeds)}`),
    );

    // LL-HLS: each switch, to the slate and back, is marked.
    t.diagnostic(`${key} LL-HLS: ${marks} discontinuities`);
    assert.ok(marks >= 2, failure(`LL-HLS marked ${marks} switches; the playlist:\n${playlist}`));

    // pion: frames in every second, ≥ 20 fps over the gap, all three there to the end.
    for (const [i, ls] of lines.entries()) {
      const samples = ls.map((l) => ({ t: l.ms, frames: l.frames })).filter((s) => s.t > 2_000);
      const worst = longestStall(samples);
      const gapLines = ls.filter((l) => l.ms >= push * 1000 + 2_000 && l.ms <= again - 1_000);
      const fps = gapLines.length > 1
        ? ((gapLines.at(-1).frames - gapLines[0].frames) * 1000) / (gapLines.at(-1).ms - gapLines[0].ms)
        : 0;
      t.diagnostic(`${key} pion ${i}: longest stall ${worst} ms, ${fps.toFixed(1)} fps over the gap, last ${JSON.stringify(ls.at(-1))}`);
      assert.ok(worst < 1_000, failure(`pion ${i} went ${worst} ms without a frame`));
      assert.ok(fps >= 20, failure(`pion ${i}: ${fps} fps over the gap`));
      assert.ok(ls.at(-1)?.ms > total - 4_000, failure(`pion ${i} ended early`));
      assert.equal(ls.at(-1).lost, 0, failure(`pion ${i} lost packets`));
    }
  }

  it('fallback = "clip": frames throughout, the built-in clip over the gap, live after', { timeout: 80_000 }, async (t) => {
    await acrossAGap(t, { key: 'live/cam', slateWidth: 640, push: 8, gap: 10 });
  });

  it('fallback = "file:...": the same with an MP4 of H264 and AAC', { timeout: 80_000 }, async (t) => {
    await acrossAGap(t, { key: 'file/cam', slateWidth: 480, push: 6, gap: 10 });
  });
});

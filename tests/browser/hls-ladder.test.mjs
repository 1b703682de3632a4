// LL-HLS ladders from simulcast (issue 54): headless Chromium publishes a 960x540 canvas
// over WHIP as three H264 simulcast layers (RIDs h, m, l at full, half and quarter size, at
// most 1 Mbit/s, 300 and 100 kbit/s; 960x540 is the smallest size Chromium sends three
// layers of, and a third of 1280x720's encoding on these 2 cores) and a tone (Opus). tern's index.m3u8 must list three variants with distinct RESOLUTION and
// BANDWIDTH rising with it, each naming the one audio rendition (EXT-X-MEDIA TYPE=AUDIO);
// each variant's and the rendition's media playlist must keep the rules of hls-validate.mjs;
// ffmpeg must decode 10 s of each variant and of the audio without an error; and hls.js
// (video from the variants, audio from the rendition) in another Chromium page
// must start on the top variant, move to a lower one within 15 s of the page's network
// being throttled to 400 kbit/s (DevTools protocol), and be back on the top within 20 s of
// the limit lifting, with no stall over 2 s (the times and the longest stall are printed;
// the hls.js part runs once more, in a new page, if its first run fails). What hls.js did is printed too: a trace every 250 ms (time, level's
// height, its bandwidth estimate, buffer ahead) and each video part it buffered (start,
// level/msn.part, size, time to first byte, download time, its estimate then).
//
// Run inside a private network namespace: ./scripts/netns-run.sh node --test tests/browser/

import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { launchBrowser, newLoggedPage, publishSimulcast, readLayers } from './browser.mjs';
import { decode, retryOnce } from './clients.mjs';
import { checkMedia, parseMedia, parseMultivariant } from './hls-validate.mjs';
import { startServer } from './server.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const HLS_JS = join(HERE, 'node_modules', 'hls.js', 'dist', 'hls.min.js');
const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

/** In the page (hls.js loaded): plays `url` muted, recording level switches and stalls. */
function startLadder({ url }) {
  const video = document.createElement('video');
  video.muted = true;
  video.autoplay = true;
  document.body.append(video);
  const st = { errors: [], levels: [], switches: [], stalls: [], waitingSince: null, playing: false, audioFrags: 0, audioTracks: 0 };
  window.ladder = st;
  // eslint-disable-next-line no-undef
  const H = Hls;
  if (!H.isSupported()) return { error: 'Hls.isSupported() is false' };
  // hls.js picks its first variant from a bandwidth guess before it has measured any
  // (abrEwmaDefaultEstimate, 500 kbit/s by default, which would pick the lowest here): a
  // player on a fast link guesses high.
  const hls = new H({ lowLatencyMode: true, backBufferLength: 30, abrEwmaDefaultEstimate: 8_000_000 });
  window.hls = hls;
  hls.on(H.Events.ERROR, (_e, d) => st.errors.push({ details: d.details, fatal: d.fatal }));
  hls.on(H.Events.MANIFEST_PARSED, (_e, d) => {
    st.levels = d.levels.map((l) => ({ height: l.height, bitrate: l.bitrate }));
    video.play().catch((err) => st.errors.push({ details: err.message, fatal: false }));
  });
  hls.on(H.Events.AUDIO_TRACKS_UPDATED, (_e, d) => {
    st.audioTracks = d.audioTracks.length;
  });
  st.loads = [];
  const t0 = performance.now();
  hls.on(H.Events.FRAG_BUFFERED, (_e, d) => {
    if (d.frag.type === 'audio') st.audioFrags += 1;
    else {
      const x = d.part ? d.part.stats : d.frag.stats;
      st.loads.push(`${((x.loading.start - t0) / 1000).toFixed(1)}:L${d.frag.level}/${d.frag.sn}.${d.part ? d.part.index : '-'}:${Math.round(x.loaded / 1024)}KB:ttfb${Math.round(x.loading.first - x.loading.start)}:dl${Math.round(x.loading.end - x.loading.first)}${x.aborted ? ':ab' : ''}:est${Math.round(hls.bandwidthEstimate / 1000)}`);
    }
  });
  hls.on(H.Events.FRAG_LOAD_EMERGENCY_ABORTED, () => st.loads.push('EMERGENCY'));
  hls.on(H.Events.LEVEL_SWITCHED, (_e, d) => {
    st.switches.push({ at: Date.now(), height: hls.levels[d.level]?.height ?? null });
  });
  video.addEventListener('waiting', () => {
    st.waitingSince ??= Date.now();
  });
  video.addEventListener('playing', () => {
    st.playing = true;
    if (st.waitingSince !== null) st.stalls.push({ at: st.waitingSince, ms: Date.now() - st.waitingSince });
    st.waitingSince = null;
  });
  hls.loadSource(url);
  hls.attachMedia(video);
  return { version: H.version };
}

/** In the page: what startLadder recorded, the level playing and the decoded height. */
function readLadder() {
  const st = window.ladder;
  const video = document.querySelector('video');
  const level = window.hls.levels?.[window.hls.currentLevel];
  return {
    ...st,
    now: Date.now(),
    height: level?.height ?? null,
    videoHeight: video.videoHeight,
    currentTime: video.currentTime,
    estimate: Math.round(window.hls.bandwidthEstimate / 1000),
    buffered: video.buffered.length ? +(video.buffered.end(video.buffered.length - 1) - video.currentTime).toFixed(2) : 0,
    stalledFor: st.waitingSince === null ? 0 : Date.now() - st.waitingSince,
    errors: st.errors.slice(-10),
    loads: st.loads.slice(-80),
  };
}

describe('LL-HLS ladder of a simulcast WHIP publisher (Chromium, ffmpeg, hls.js)', { timeout: 300_000 }, () => {
  let server;
  let browser;
  let dir;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tern-ladder-'));
    const config = join(dir, 'tern.toml');
    // LADDER_HLS: more `[hls]` keys (bench/hls-ladder-stalls.sh compares segment lengths).
    const hls = process.env.LADDER_HLS ? `[hls]\n${process.env.LADDER_HLS}\n` : '';
    await writeFile(config, `[[app]]\nname = "live"\nstreams = ["sim"]\n${hls}`);
    server = await startServer({ readyTimeoutMs: 20_000, extraArgs: ['--config', config] });
    browser = await launchBrowser();
  }, { timeout: 60_000 });

  after(async () => {
    await browser?.close();
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('three variants, each valid and decodable; hls.js moves down under 400 kbit/s and back up', { timeout: 400_000 }, async (t) => {
    const pub = await newLoggedPage(browser.context);
    const why = (what, s) => `${what}\nstate: ${JSON.stringify(s)}\n--- publisher ---\n${pub.log()}\n--- server ---\n${server.tail()}`;
    await pub.page.goto(`${server.base}/`, { waitUntil: 'domcontentloaded' });
    const p = await pub.page.evaluate(publishSimulcast, {
      endpoint: `${server.base}/live/sim/whip`,
      rids: ['h', 'm', 'l'],
      codec: 'h264',
      tone: true,
      width: 960,
      maxBitrates: [1_000_000, 300_000, 100_000],
    });
    assert.ok(p.ok, why('publish failed', p));
    let layers = {};
    const t0 = Date.now();
    while (Date.now() - t0 < 30_000) {
      layers = await pub.page.evaluate(readLayers);
      if (['h', 'm', 'l'].every((r) => layers[r]?.frames > 30)) break;
      await sleep(500);
    }
    assert.ok(['h', 'm', 'l'].every((r) => layers[r]?.frames > 30), why('Chromium did not send three layers', layers));

    // The multivariant playlist: three variants, top first.
    const index = `${server.base}/live/sim/index.m3u8`;
    const r = await fetch(index);
    const text = await r.text();
    assert.equal(r.status, 200, why(`GET index.m3u8: ${text}`));
    const mv = parseMultivariant(text);
    assert.deepEqual(mv.problems, [], text);
    assert.equal(mv.variants.length, 3, why(`three variants:\n${text}`));
    const sizes = mv.variants.map((v) => v.attrs.RESOLUTION);
    assert.equal(new Set(sizes).size, 3, `distinct RESOLUTION: ${sizes}`);
    const heights = sizes.map((s) => Number(s.split('x')[1]));
    assert.ok(heights[0] > heights[1] && heights[1] > heights[2], `top first: ${sizes}`);
    const bandwidth = mv.variants.map((v) => Number(v.attrs.BANDWIDTH));
    assert.ok(bandwidth[2] < bandwidth[1] && bandwidth[1] < bandwidth[0], `BANDWIDTH rises with the size: ${bandwidth}`);
    // One audio rendition (the tone, Opus), named by every variant, whose CODECS list it.
    assert.equal(mv.media.length, 1, why(`one audio rendition:\n${text}`));
    const audio = mv.media[0];
    assert.equal(audio.TYPE, 'AUDIO', text);
    assert.match(audio.URI ?? '', /^media\.m3u8\?session=[^&]+&media=audio$/, text);
    for (const v of mv.variants) {
      assert.match(v.attrs.CODECS, /^avc1\.[0-9a-f]{6},opus$/, text);
      assert.equal(v.attrs.AUDIO, audio['GROUP-ID'], text);
    }
    console.log(`ladder: ${mv.variants.map((v) => `${v.attrs.RESOLUTION} ${v.attrs.BANDWIDTH} b/s`).join(', ')}`);

    // Every variant's media playlist keeps the validator's rules; ffmpeg decodes 10 s of each.
    await sleep(6_000);
    const base = `${server.base}/live/sim/`;
    const [audioDecode, ...decodes] = await Promise.all([
      decode(base + audio.URI, 10, '0:a:0'),
      ...mv.variants.map((v) => decode(base + v.uri, 10)),
    ]);
    {
      const res = await fetch(base + audio.URI);
      const body = await res.text();
      const pl = parseMedia(body);
      const session = /session=([^&]+)/.exec(audio.URI)[1];
      const problems = checkMedia(pl, { session, partTarget: 0.5, independent: true });
      assert.deepEqual(problems, [], `audio rendition:\n${body}`);
      console.log(`audio rendition: ffmpeg decoded ${audioDecode.frames} frames in 10 s, exit ${audioDecode.code}`);
      assert.equal(audioDecode.code, 0, `ffmpeg on the audio: ${audioDecode.stderr}`);
      assert.equal(audioDecode.stderr, '', 'ffmpeg on the audio reported errors');
      // Opus frames of 20 ms: 500 in 10 s; at least half.
      assert.ok(audioDecode.frames >= 250, `ffmpeg decoded ${audioDecode.frames} audio frames in 10 s`);
    }
    for (const [i, v] of mv.variants.entries()) {
      const res = await fetch(base + v.uri);
      const body = await res.text();
      const pl = parseMedia(body);
      const session = /session=([^&]+)/.exec(v.uri)[1];
      // Chromium's canvas encoder on a loaded machine sends frames unevenly (gaps of 100 ms
      // and more), and a part ends between frames: a part may be short by one such gap.
      const problems = checkMedia(pl, { session, partTarget: 0.5, independent: pl.independent, minPart: 0.6 });
      assert.deepEqual(problems, [], `variant ${v.attrs.RESOLUTION}:\n${body}`);
      const d = decodes[i];
      console.log(`variant ${v.attrs.RESOLUTION}: ffmpeg decoded ${d.frames} frames in 10 s, exit ${d.code}, independent segments: ${pl.independent}`);
      assert.equal(d.code, 0, `ffmpeg on ${v.attrs.RESOLUTION}: ${d.stderr}`);
      assert.equal(d.stderr, '', `ffmpeg on ${v.attrs.RESOLUTION} reported errors`);
      // Chromium's canvas encoder runs below 30 fps on a busy machine, and lower layers
      // below the top (146 frames of 240x134 in 10 s, once, with other tests running): at
      // least 4 s of 10 s at the ladder's FRAME-RATE (the top's rate, the same on every
      // variant).
      const fps = Number(v.attrs['FRAME-RATE'] ?? 0);
      assert.equal(v.attrs['FRAME-RATE'], mv.variants[0].attrs['FRAME-RATE'], text);
      assert.ok(fps >= 10, `FRAME-RATE ${v.attrs['FRAME-RATE']} of ${v.attrs.RESOLUTION}`);
      assert.ok(d.frames >= 4 * fps, `ffmpeg decoded ${d.frames} frames of ${v.attrs.RESOLUTION} in 10 s at ${fps} fps`);
    }

    {
      const body = await (await fetch(base + mv.variants[0].uri)).text();
      const parts = body.split('\n').filter((l) => l.startsWith('#EXT-X-PART:')).slice(-12);
      const sizes = [];
      for (const l of parts) {
        const uri = /URI="([^"]+)"/.exec(l)[1];
        const dur = /DURATION=([\d.]+)/.exec(l)[1];
        const n = (await (await fetch(base + uri)).arrayBuffer()).byteLength;
        sizes.push(`${dur}s:${Math.round(n / 1024)}KB${/INDEPENDENT=YES/.test(l) ? 'K' : ''}`);
      }
      console.log(`top parts: ${sizes.join(' ')}`);
    }
    // hls.js: starts on the top variant; throttled, it moves down; freed, it comes back.
    // Each watch is a new page; it asserts all but the stall bound and returns what it saw.
    const top = heights[0];
    const watch = async (attempt) => {
      const { page, log } = await newLoggedPage(browser.context);
      try {
        let s = {};
        const fail = (what) => why(`${what}\nhls.js: ${JSON.stringify(s)}\n--- page ---\n${log()}`, layers);
        await page.setContent('<!doctype html><html><head><title>ladder</title></head><body></body></html>');
        await page.addScriptTag({ path: HLS_JS });
        const started = await page.evaluate(startLadder, { url: index });
        assert.equal(started.error, undefined, fail(started.error));
        const trace = [];
        const t00 = Date.now();
        const until = async (ms, ok) => {
          const from = Date.now();
          while (Date.now() - from < ms) {
            s = await page.evaluate(readLadder);
            trace.push(`${((Date.now() - t00) / 1000).toFixed(1)}s:${s.height}/${s.estimate}k/${s.buffered}`);
            if (ok(s)) return Date.now() - from;
            await sleep(250);
          }
          return null;
        };
        const playingTop = await until(20_000, (x) => x.playing && x.height === top && x.videoHeight === top);
        assert.ok(playingTop !== null, fail('hls.js did not play the top variant'));
        assert.equal(s.switches[0]?.height, top, fail('hls.js started on another variant'));
        assert.equal(s.audioTracks, 1, fail('hls.js lists the audio rendition'));
        await sleep(3_000);
        s = await page.evaluate(readLadder);
        assert.equal(s.height, top, fail('hls.js left the top variant unthrottled'));

        const cdp = await page.context().newCDPSession(page);
        await cdp.send('Network.enable');
        await cdp.send('Network.emulateNetworkConditions', {
          offline: false, latency: 0, downloadThroughput: 400_000 / 8, uploadThroughput: -1,
        });
        const throttledAt = Date.now();
        // Issue 54: a lower variant within 15 s, and the top again within 20 s of the limit
        // lifting. hls.js measures its link and abandons a variant at a segment's first
        // part; behind the live edge it loads the segment's other parts in a row (1.7.4,
        // doFragPartsLoad), so it moves down only after the segment it is in (see the stall
        // bound below).
        const down = await until(15_000, (x) => x.height !== null && x.height < top);
        assert.ok(down !== null, fail(`attempt ${attempt}: hls.js stayed on the top variant at 400 kbit/s for 15 s`));
        console.log(`hls.js moved down to ${s.height} lines ${down} ms after the limit`);
        await sleep(5_000);
        await cdp.send('Network.emulateNetworkConditions', {
          offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1,
        });
        const lifted = await page.evaluate(readLadder);
        const up = await until(20_000, (x) => x.height === top);
        console.log(up === null
          ? `hls.js still on ${s.height} lines 20 s after the limit lifted`
          : `hls.js back on ${top} lines ${up} ms after the limit lifted`);
        assert.ok(up !== null, fail(`attempt ${attempt}: hls.js not back on the top variant 20 s after the limit lifted`));
        await sleep(2_000);
        s = await page.evaluate(readLadder);
        const watched = (s.now - lifted.now) / 1000;
        const played = s.currentTime - lifted.currentTime;
        assert.ok(played >= watched / 2, fail(`hls.js played ${played.toFixed(1)} s of media in the ${watched.toFixed(1)} s after the limit lifted`));
        const stalls = s.stalls.filter((x) => x.at >= throttledAt - 1_000);
        const longest = Math.max(0, s.stalledFor, ...stalls.map((x) => x.ms));
        console.log(`trace (time:level/estimate/buffer): ${trace.join(' ')}`);
        console.log(`loads: ${s.loads.join(' ')}`);
        console.log(`switches: ${JSON.stringify(s.switches.map((x) => x.height))}; stalls: ${JSON.stringify(stalls)}; longest ${longest} ms`);
        assert.deepEqual(s.errors.filter((e) => e.fatal), [], fail('hls.js fatal error'));
        assert.ok(s.audioFrags >= 10, fail(`hls.js buffered ${s.audioFrags} audio fragments`));
        return { down, up, longest, fail };
      } finally {
        await page.evaluate(() => window.hls?.destroy()).catch(() => {});
        await page.close().catch(() => {});
      }
    };

    // bench/hls-ladder-stalls.sh: LADDER_RUNS watches, each one's figures printed, the
    // stall bound not asserted (it is what is measured).
    const runs = Number(process.env.LADDER_RUNS ?? 0);
    if (runs > 0) {
      for (let i = 1; i <= runs; i++) {
        // A failed watch: its first two lines (what failed, and hls.js's state).
        const r = await watch(i).catch((err) => ({ error: String(err?.message ?? err).split('\n').slice(0, 2).join(' | ').slice(0, 1500) }));
        console.log(`ladder run ${i}: ${r.error ?? `down ${r.down} ms, up ${r.up} ms, longest stall ${r.longest} ms`}`);
      }
      return;
    }
    // Issue 54: no stall over 2 s. It holds with a ladder's 1 s segments
    // (hls.ladder_segment_target_ms): at 2 s, hls.js finished the segment it was in at
    // 400 kbit/s before it could move down, and stalled 2.3-2.5 s (BENCHMARKS.md, "LL-HLS
    // ladders: how long hls.js stalls"). The watch runs once more, in a new page, if its
    // first run fails (clients.mjs retryOnce; the failure is printed); both keep the bounds.
    await retryOnce(t, async (attempt) => {
      const r = await watch(attempt);
      assert.ok(r.longest <= 2_000, r.fail(`attempt ${attempt}: a stall of ${r.longest} ms`));
    });
  });
});

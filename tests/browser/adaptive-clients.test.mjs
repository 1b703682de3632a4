// Adaptive layers for viewers that are not Chromium (issue 41): headless Chromium publishes
// three H264 simulcast layers over WHIP (top ~530 kbit/s); a pion/webrtc v4 viewer with
// pion's default interceptors (transport-wide feedback, NACK) plays it unlimited, and a
// second viewer (pion, then aiortc) plays it from a namespace of its own behind a
// 300 kbit/s token bucket. Within 10 s of the limit the narrow viewer must be on `m` or
// `l`, over 45 s it must average at least 12 frames a second with under 2 % of its video
// packets lost after the move (those numbered after it: what the bucket dropped of the top
// layer before the move is printed, not bounded), and the unlimited viewer must stay on `h`.
// When the limit lifts the narrow viewer may climb back (pion's time within 20 s is printed;
// aiortc, whose REMB follows what it receives, is not probed and stays lower, so it is not
// waited for: bench/time-to-layer.mjs).
// Each client must end its session when stopped (its DELETE): a session left to tern's
// consent timeout would keep sending into the link the next case uses.
// Each case runs once more if its first run fails (clients.mjs `retryOnce`: on a shared
// 2-core runner an aiortc decoder once waited 16 s for a keyframe after an unrecovered loss,
// 6.5 fps over the 45 s); the first run's failure is printed.
//
// Needs root in the test's namespace (ip netns, tc), and the clients that
// scripts/install-deps.sh builds (tests/interop/pion-viewer/pion-viewer, the aiortc venv).

import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { launchBrowser, narrowLink, newLoggedPage } from './browser.mjs';
import { startServer } from './server.mjs';
import { noViewerAt, publishThreeH264Layers, retryOnce, startClient, viewersBy } from './clients.mjs';

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

/** The share of video packets numbered after `from` (a `highest` a client reported) and
 * up to 100 before `end`'s highest (the newest 100 are not judged yet) that the client's
 * reports up to `end` count lost. */
function lossBetween(lines, from, end) {
  const upTo = end.highest - 100;
  let lost = 0;
  for (const line of lines) {
    if (line.ms > end.ms) break;
    lost += (line.lost_seqs ?? []).filter((s) => s > from && s <= upTo).length;
  }
  return lost / Math.max(1, upTo - from);
}
const LIMIT = '300kbit';

describe('adaptive layers for pion and aiortc viewers behind 300 kbit/s', { timeout: 1_000_000 }, () => {
  let server;
  let browser;
  let link;
  let dir;
  let pub;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tern-adaptive-clients-'));
    link = narrowLink();
    const config = join(dir, 'tern.toml');
    await writeFile(config, '[[app]]\nname = "live"\nstreams = ["sim"]\n');
    server = await startServer({ readyTimeoutMs: 20_000, extraArgs: ['--config', config], host: link.host });
    browser = await launchBrowser();
    pub = await newLoggedPage(browser.context);
    await pub.page.goto(`${server.base}/`, { waitUntil: 'domcontentloaded' });
    const p = await publishThreeH264Layers(pub.page, `${server.base}/live/sim/whip`);
    assert.ok(p.ok, `publish failed: ${JSON.stringify(p)}\n${server.tail()}`);
    assert.ok(['h', 'm', 'l'].every((r) => p.layers[r]?.frames > 30), `Chromium did not send three layers: ${JSON.stringify(p.layers)}`);
  }, { timeout: 120_000 });

  after(async () => {
    await pub?.page.close().catch(() => {});
    await browser?.close();
    await server?.stop();
    link?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  for (const kind of ['pion', 'aiortc']) {
    it(`a ${kind} viewer behind ${LIMIT} moves to m or l within 10 s and plays at 12 fps or more, the unlimited pion viewer stays on h`, { timeout: 420_000 }, (t) => retryOnce(t, async () => {
      const whep = `${server.base}/live/sim/whep`;
      const free = startClient('pion', whep, 150);
      const narrow = startClient(kind, whep, 150, link);
      let trace = [];
      const why = (what, extra = {}) =>
        `${what}\n${JSON.stringify({ free: free.last(), narrow: narrow.last(), ...extra })}\n${trace.slice(-60).map((t) => JSON.stringify(t)).join('\n')}\n--- narrow client ---\n${narrow.stderr()}\n--- server ---\n${server.tail()}`;
      try {
        // Every read of the viewers' layers is kept (with the narrow one's live figures) and
        // shown when an assertion fails.
        trace = [];
        const t0 = Date.now();
        const layer = async () => {
          const v = await viewersBy(server.base, 'live/sim', link.peer);
          const c = narrow.last() ?? {};
          trace.push({
            ms: Date.now() - t0,
            free: v.free?.layer,
            narrow: v.narrow?.layer,
            live: v.narrow?.live,
            link: link.stats(),
            client: { frames: c.frames, lost: c.lost, nacks: c.nacks, plis: c.plis, overflows: c.overflows },
          });
          return { free: v.free?.layer, narrow: v.narrow?.layer };
        };
        let l = {};
        for (const t0 = Date.now(); Date.now() - t0 < 40_000; await sleep(500)) {
          l = await layer();
          if (l.free === 'h' && l.narrow === 'h' && narrow.last()?.frames > 30) break;
        }
        // aiortc's first REMB (about 3 s in) moves it to m, and probes lift that REMB back
        // to h's rate some 8 s later (BENCHMARKS.md, issue 41's fifth pass); if it is still
        // on m when the wait ends, the limit goes on there.
        const clean = l.narrow === 'h' || (kind === 'aiortc' && l.narrow === 'm' && narrow.last()?.frames > 30);
        assert.ok(l.free === 'h' && clean, why('both viewers should play h first', l));
        if (l.narrow !== 'h') console.log(`# ${kind}: on ${l.narrow} by its own REMB before the limit`);

        link.limit(LIMIT);
        const on = Date.now();
        const atLimit = narrow.last();
        let moved = null;
        let freeLeft = null;
        for (const t0 = Date.now(); Date.now() - t0 < 10_000 && !moved; await sleep(250)) {
          l = await layer();
          if (l.free !== 'h') freeLeft = l.free;
          if (l.narrow === 'm' || l.narrow === 'l') moved = { ms: Date.now() - on, layer: l.narrow, stats: narrow.last() };
        }
        assert.ok(moved, why(`narrow viewer still on ${l.narrow} 10 s after the ${LIMIT} limit`));
        // Packets sent before the move may still be in the bucket's queue (300 ms at most) or
        // lost in it; the client's report a second after the move is seen names a sequence
        // number past them, and loss "after the move" counts the packets numbered after it.
        await sleep(1000);
        const afterMove = narrow.last();
        // 45 s from the limit on: frames, and loss after the move.
        while (Date.now() - on < 45_000) {
          await sleep(500);
          l = await layer();
          if (l.free !== 'h') freeLeft = l.free;
          assert.ok(l.narrow === 'm' || l.narrow === 'l', why(`narrow viewer went back to ${l.narrow} under the limit`));
        }
        const end = narrow.last();
        const fps = (end.frames - atLimit.frames) / ((Date.now() - on) / 1000);
        const loss = lossBetween(narrow.lines, afterMove.highest, end);
        const withMove = lossBetween(narrow.lines, atLimit.highest, end);
        console.log(
          `# ${kind}: on ${moved.layer} ${moved.ms} ms after the ${LIMIT} limit; ${fps.toFixed(1)} fps over 45 s; ` +
            `${(loss * 100).toFixed(2)} % of video packets lost after the move, ${(withMove * 100).toFixed(2)} % from the limit on; ` +
            `client: ${JSON.stringify({ nacks: end.nacks, plis: end.plis, overflows: end.overflows, dups: end.dups })}`,
        );
        assert.ok(fps >= 12, why(`narrow viewer averaged ${fps.toFixed(1)} fps over 45 s`));
        assert.equal(freeLeft, null, why(`unlimited viewer left h for ${freeLeft}`));
        assert.ok(loss < 0.02, why(`narrow viewer lost ${(loss * 100).toFixed(2)} % of its video packets after the move`));

        link.lift();
        // The climb back is printed, not judged (bench/time-to-layer.mjs measures it): pion's
        // probes bring it back within seconds, so it gets 20 s; aiortc is not probed and
        // stays lower, so waiting for it would only spend CI time.
        const climb = kind === 'pion' ? 20_000 : 0;
        const off = Date.now();
        let back = null;
        for (const t0 = Date.now(); Date.now() - t0 < climb && !back; await sleep(250)) {
          if ((await layer()).narrow === 'h') back = Date.now() - off;
        }
        if (climb === 0) console.log(`# ${kind}: its climb back is not waited for (not probed)`);
        else console.log(`# ${kind}: back on h ${back ?? `not within ${climb}`} ms after the limit lifted`);
      } finally {
        await free.stop();
        await narrow.stop();
        try {
          link.lift();
        } catch {}
        assert.ok(await noViewerAt(server.base, 'live/sim', link.peer), `the ${kind} viewer's session outlived its client`);
      }
    }));
  }
});

// A viewer behind a rate-limited link: headless Chromium publishes three VP8 simulcast
// layers over WHIP; one Chromium viewer watches from this namespace (unlimited), a second
// Chromium runs in a network namespace of its own behind a veth pair whose tern-side end
// gets a 1 Mbit/s token bucket (tc tbf). Once both play the top layer, the limit goes on:
// the limited viewer must settle on a lower layer within 10 s with no freeze longer than
// 1 s, while the unlimited one plays on untouched; the limit comes off and the limited
// viewer must climb back to the top layer.
//
// Needs root in the test's namespace (ip netns, tc): run inside
// ./scripts/netns-run.sh node --test tests/browser/ (as scripts/test.sh does).

import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  CHROMIUM,
  launchBrowser,
  narrowLink,
  newLoggedPage,
  openWhepViewer,
  publishSimulcast,
  readLayers,
  readWhepViewer,
} from './browser.mjs';
import { startServer } from './server.mjs';

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));
const LIMIT = '1mbit';

describe('adaptive layers for a viewer behind a rate-limited link', { timeout: 300_000 }, () => {
  let server;
  let open;
  let limited;
  let dir;
  let link;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tern-adaptive-'));
    // The limited viewer's namespace, and Chromium for it (a wrapper playwright starts).
    link = narrowLink();
    const wrapper = await link.wrap(CHROMIUM, dir);
    const config = join(dir, 'tern.toml');
    await writeFile(config, '[[app]]\nname = "live"\nstreams = ["sim"]\n');
    server = await startServer({ readyTimeoutMs: 20_000, extraArgs: ['--config', config], host: link.host });
    open = await launchBrowser();
    limited = await launchBrowser({ executablePath: wrapper });
  }, { timeout: 90_000 });

  after(async () => {
    await limited?.close();
    await open?.close();
    await server?.stop();
    link?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('settles lower within 10 s without a freeze over 1 s, climbs back when lifted; the other viewer is unaffected', { timeout: 240_000 }, async () => {
    const pub = await newLoggedPage(open.context);
    const free = await newLoggedPage(open.context);
    const lim = await newLoggedPage(limited.context);
    const why = (what, s) => `${what}\nstate: ${JSON.stringify(s)}\n--- server ---\n${server.tail()}`;
    try {
      await pub.page.goto(`${server.base}/`, { waitUntil: 'domcontentloaded' });
      const p = await pub.page.evaluate(publishSimulcast, { endpoint: `${server.base}/live/sim/whip`, rids: ['h', 'm', 'l'] });
      assert.ok(p.ok, why('publish failed', p));
      let layers = {};
      for (const t0 = Date.now(); Date.now() - t0 < 30_000; await sleep(500)) {
        layers = await pub.page.evaluate(readLayers);
        if (['h', 'm', 'l'].every((r) => layers[r]?.frames > 30)) break;
      }
      assert.ok(['h', 'm', 'l'].every((r) => layers[r]?.frames > 30), why('Chromium did not send three layers', layers));
      const top = layers.h.width;
      await sleep(2_000);

      for (const v of [free, lim]) {
        await v.page.goto(`${server.base}/`, { waitUntil: 'domcontentloaded' });
        const r = await v.page.evaluate(openWhepViewer, { endpoint: `${server.base}/live/sim/whep` });
        assert.equal(r.status, 201, why('WHEP POST', r));
      }
      const read = async () => ({ free: await free.page.evaluate(readWhepViewer), lim: await lim.page.evaluate(readWhepViewer) });
      // Both climb to the top layer on the open path.
      let s = {};
      for (const t0 = Date.now(); Date.now() - t0 < 40_000; await sleep(500)) {
        s = await read();
        if (s.free.width === top && s.lim.width === top) break;
      }
      assert.ok(s.free.width === top && s.lim.width === top, why('both viewers should reach the top layer first', s));

      // The limit goes on (tern to the limited viewer).
      link.limit(LIMIT);
      const on = Date.now();
      const before = await read();
      // Sample every 250 ms. Two views of the longest freeze: the longest stretch without
      // a new decoded frame, and Chromium's own (its freezeCount and totalFreezesDuration
      // grow when a freeze ends: a poll that sees one more freeze sees its length).
      const watch = async (ms, until) => {
        const gap = { free: 0, lim: 0 };
        const freeze = { free: 0, lim: 0 };
        const last = { free: [Date.now(), -1], lim: [Date.now(), -1] };
        let prev = await read();
        let cur = prev;
        for (const t0 = Date.now(); Date.now() - t0 < ms; await sleep(250)) {
          cur = await read();
          for (const k of ['free', 'lim']) {
            if (cur[k].frames !== last[k][1]) last[k] = [Date.now(), cur[k].frames];
            gap[k] = Math.max(gap[k], Date.now() - last[k][0]);
            // Several freezes ended in one poll: their sum bounds the longest.
            if (cur[k].freezes > prev[k].freezes) {
              freeze[k] = Math.max(freeze[k], cur[k].freezeSecs - prev[k].freezeSecs);
            }
          }
          prev = cur;
          if (until?.(cur)) break;
        }
        return { gap, freeze, cur };
      };
      const down = await watch(10_000, (c) => c.lim.width > 0 && c.lim.width < top);
      const settledMs = Date.now() - on;
      assert.ok(down.cur.lim.width < top, why(`limited viewer still on the top layer 10 s after the ${LIMIT} limit`, down));
      // Then it stays lower and keeps playing for 8 s.
      const held = await watch(8_000);
      const afterLimit = await read();
      const limFreeze = Math.max(down.freeze.lim, held.freeze.lim);
      const limGap = Math.max(down.gap.lim, held.gap.lim);
      assert.ok(held.cur.lim.width < top, why('limited viewer went back up under the limit', held));
      assert.ok(afterLimit.lim.frames - before.lim.frames > 150, why('limited viewer stalled', { before, afterLimit }));
      assert.ok(limGap <= 1_000, why(`limited viewer froze ${limGap} ms`, { down, held }));
      assert.ok(limFreeze <= 1.0, why(`limited viewer had a freeze of ${limFreeze} s`, { down, held }));
      // The unlimited viewer: top layer, playing, never frozen.
      const freeGap = Math.max(down.gap.free, held.gap.free);
      assert.equal(afterLimit.free.width, top, why('unlimited viewer left the top layer', afterLimit));
      assert.ok(freeGap <= 500, why(`unlimited viewer froze ${freeGap} ms`, { down, held }));
      assert.equal(afterLimit.free.freezeSecs - before.free.freezeSecs, 0, why('unlimited viewer froze', { before, afterLimit }));

      // The limit comes off: the limited viewer climbs back to the top.
      link.lift();
      const off = Date.now();
      const up = await watch(45_000, (c) => c.lim.width === top);
      const climbMs = Date.now() - off;
      assert.equal(up.cur.lim.width, top, why('limited viewer did not climb back within 45 s of the limit lifting', up));
      console.log(`# settled on a lower layer (width ${down.cur.lim.width}) ${settledMs} ms after the ${LIMIT} limit; longest gap between frames ${limGap} ms, longest freeze (Chromium) ${limFreeze.toFixed(3)} s, ${afterLimit.lim.freezes - before.lim.freezes} freezes, ${afterLimit.lim.lost - before.lim.lost} packets lost; unlimited viewer's longest gap ${freeGap} ms; back on the top layer ${climbMs} ms after the limit lifted`);
    } finally {
      for (const v of [pub, free, lim]) await v.page.close().catch(() => {});
    }
  });
});

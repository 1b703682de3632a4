// Simulcast over WHIP: headless Chromium publishes a 1280x720 canvas as three VP8 layers
// (RIDs h, m, l at full, half and quarter size) and two Chromium viewers watch over WHEP:
// the plain one must be sent the top layer, the one with `?layer=l` the lowest. Then the
// API pins the plain viewer to `m` and unpins it again; each move must show in the
// decoded frame size and in the viewer's snapshot, without a freeze or a lost packet.
//
// Run inside a private network namespace: ./scripts/netns-run.sh node --test tests/browser/

import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  launchBrowser,
  newLoggedPage,
  openWhepViewer as openViewer,
  publishSimulcast,
  readLayers,
  readWhepViewer as readViewer,
} from './browser.mjs';
import { startServer } from './server.mjs';

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

describe('simulcast WHIP ingest and layer choice (Chromium to Chromium)', { timeout: 240_000 }, () => {
  let server;
  let browser;
  let dir;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tern-simulcast-'));
    const config = join(dir, 'tern.toml');
    await writeFile(config, '[[app]]\nname = "live"\nstreams = ["sim"]\n');
    server = await startServer({ readyTimeoutMs: 20_000, extraArgs: ['--config', config] });
    browser = await launchBrowser();
  }, { timeout: 60_000 });

  after(async () => {
    await browser?.close();
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const api = async (path, init) => {
    const r = await fetch(`${server.base}${path}`, init);
    const body = await r.text();
    return { status: r.status, body, json: () => JSON.parse(body) };
  };
  const viewerLayer = async () => {
    const list = (await api('/v1/streams/live/sim/viewers')).json();
    return Object.fromEntries(list.map((v) => [v.identity.id, v.connection.layer ?? null]));
  };

  it('three layers in; plain viewer on the top one, ?layer=l on the lowest; API pin and unpin', { timeout: 200_000 }, async () => {
    const pub = await newLoggedPage(browser.context);
    const plain = await newLoggedPage(browser.context);
    const low = await newLoggedPage(browser.context);
    const why = (what, s) =>
      `${what}\nstate: ${JSON.stringify(s)}\n--- publisher ---\n${pub.log()}\n--- server ---\n${server.tail()}`;
    try {
      await pub.page.goto(`${server.base}/`, { waitUntil: 'domcontentloaded' });
      const p = await pub.page.evaluate(publishSimulcast, {
        endpoint: `${server.base}/live/sim/whip`,
        rids: ['h', 'm', 'l'],
      });
      assert.ok(p.ok, why('publish failed', p));

      // The encoder sends all three once its bandwidth estimate allows the top one.
      let layers = {};
      const t0 = Date.now();
      while (Date.now() - t0 < 30_000) {
        layers = await pub.page.evaluate(readLayers);
        if (['h', 'm', 'l'].every((r) => layers[r]?.frames > 30)) break;
        await sleep(500);
      }
      assert.ok(['h', 'm', 'l'].every((r) => layers[r]?.frames > 30), why('Chromium did not send three layers', layers));
      const width = Object.fromEntries(Object.entries(layers).map(([r, l]) => [r, l.width]));
      assert.ok(width.h > width.m && width.m > width.l, why('layer sizes', width));

      const snap = (await api('/v1/streams/live/sim')).json();
      assert.deepEqual(snap.snapshot.layers.map((l) => l.rid), ['h', 'm', 'l'], JSON.stringify(snap));

      // A layer the stream does not have is refused, naming the ones it has.
      const bad = await api('/live/sim/whep?layer=x', {
        method: 'POST',
        headers: { 'content-type': 'application/sdp' },
        body: 'v=0\r\n',
      });
      assert.ok(bad.status === 400 && /layers are h, m, l/.test(bad.body), `${bad.status} ${bad.body}`);

      // Let the rates settle so "top" is measured, then the two viewers.
      await sleep(2_000);
      for (const [page, q] of [[plain.page, ''], [low.page, '?layer=l']]) {
        await page.goto(`${server.base}/`, { waitUntil: 'domcontentloaded' });
        const v = await page.evaluate(openViewer, { endpoint: `${server.base}/live/sim/whep${q}` });
        assert.equal(v.status, 201, why('WHEP POST', v));
      }
      const settle = async (page, want, label) => {
        let s = {};
        const t = Date.now();
        while (Date.now() - t < 15_000) {
          s = await page.evaluate(readViewer);
          if (s.width === want && s.frames > 0) return s;
          await sleep(250);
        }
        assert.fail(why(`${label}: decoded width never became ${want}`, s));
      };
      await settle(plain.page, width.h, 'plain viewer');
      await settle(low.page, width.l, '?layer=l viewer');
      // Both keep playing: 60 more frames each in at most 6 s.
      const a0 = await plain.page.evaluate(readViewer);
      const b0 = await low.page.evaluate(readViewer);
      await sleep(4_000);
      const a1 = await plain.page.evaluate(readViewer);
      const b1 = await low.page.evaluate(readViewer);
      const pubNow = await pub.page.evaluate(readLayers);
      assert.ok(a1.frames - a0.frames >= 60, why('plain viewer stalled', { a0, a1, pubNow }));
      assert.ok(b1.frames - b0.frames >= 60, why('?layer=l viewer stalled', { b0, b1 }));
      assert.equal(a1.width, width.h);
      assert.equal(b1.width, width.l);
      let byId = await viewerLayer();
      assert.deepEqual(Object.values(byId).sort(), ['h', 'l'], JSON.stringify(byId));

      // The API pins the plain viewer to m, then unpins it: it follows both, no freeze.
      const plainId = Object.entries(byId).find(([, l]) => l === 'h')[0];
      const pin = await api(`/v1/viewers/${plainId}/layer`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ rid: 'm' }),
      });
      assert.equal(pin.status, 204, pin.body);
      await settle(plain.page, width.m, 'pinned to m');
      byId = await viewerLayer();
      assert.equal(byId[plainId], 'm', JSON.stringify(byId));
      const badPin = await api(`/v1/viewers/${plainId}/layer`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ rid: 'zz' }),
      });
      assert.equal(badPin.status, 400, badPin.body);
      const unpin = await api(`/v1/viewers/${plainId}/layer`, { method: 'DELETE' });
      assert.equal(unpin.status, 204, unpin.body);
      const back = await settle(plain.page, width.h, 'unpinned');
      assert.equal(back.lost, 0, why('the plain viewer lost packets', back));
      assert.ok(back.freezeSecs < 1, why('the plain viewer froze', back));
      const lowEnd = await low.page.evaluate(readViewer);
      assert.equal(lowEnd.lost, 0, why('the ?layer=l viewer lost packets', lowEnd));
      assert.equal(lowEnd.width, width.l);
      console.log(`layers ${JSON.stringify(width)}; plain ${JSON.stringify(back)}; low ${JSON.stringify(lowEnd)}`);
    } finally {
      await pub.page.close();
      await plain.page.close();
      await low.page.close();
    }
  });
});

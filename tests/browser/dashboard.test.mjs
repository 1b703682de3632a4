// The dashboard in Chromium: `tern demo` with 50 viewers from `tern bench`; the page must
// show them (viewer count, the stream's row, the memory pool table). A screenshot is saved
// to tests/browser/artifacts/dashboard.png (or $ARTIFACTS_DIR/dashboard.png).
//
// Run inside a private network namespace: ./scripts/netns-run.sh node --test tests/browser/

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { launchBrowser, newLoggedPage } from './browser.mjs';
import { startServer, ternBin } from './server.mjs';

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));
const here = dirname(fileURLToPath(import.meta.url));

describe('dashboard', { timeout: 120_000 }, () => {
  let server;
  let browser;
  let bench;
  let benchOut = '';

  before(async () => {
    server = await startServer({ readyTimeoutMs: 20_000 });
    browser = await launchBrowser();
    // 50 viewers for 40 s (bounded); the test ends them early.
    bench = spawn(ternBin(), ['bench', '-url', `${server.base}/live/demo/whep`, '-n', '50', '-cint', '20',
      '-life', '40', '-sint', '60000'], { stdio: ['ignore', 'pipe', 'pipe'] });
    bench.stdout.on('data', (d) => { benchOut += d; });
    bench.stderr.on('data', (d) => { benchOut += d; });
  }, { timeout: 60_000 });

  after(async () => {
    bench?.kill('SIGINT');
    await browser?.close();
    await server?.stop();
  });

  it('shows the live stream, its 50 viewers and the memory pools', { timeout: 60_000 }, async () => {
    const { page, log } = await newLoggedPage(browser.context);
    await page.goto(`${server.base}/dashboard`, { timeout: 10_000, waitUntil: 'domcontentloaded' });
    const read = () => page.evaluate(() => ({
      viewers: document.querySelector('#viewers')?.textContent,
      rows: [...document.querySelectorAll('#streams tbody tr')].map((tr) =>
        [...tr.children].map((td) => td.textContent)),
      pools: document.querySelectorAll('#pools tbody tr').length,
      egress: document.querySelector('#egress')?.textContent,
    }));
    let s = {};
    const started = Date.now();
    while (Date.now() - started < 30_000) {
      s = await read();
      const row = s.rows.find((r) => r[0] === 'live/demo');
      if (s.viewers === '50' && row && row[3] === '50' && s.pools > 0 && !/^0 /.test(s.egress ?? '0 ')) break;
      await sleep(500);
    }
    const dir = process.env.ARTIFACTS_DIR || join(here, 'artifacts');
    mkdirSync(dir, { recursive: true });
    await page.screenshot({ path: join(dir, 'dashboard.png'), fullPage: true });
    const detail = `page state ${JSON.stringify(s)}\n--- page log ---\n${log()}\n--- bench ---\n${benchOut.slice(-2000)}\n--- server ---\n${server.tail()}`;
    assert.equal(s.viewers, '50', detail);
    const row = s.rows.find((r) => r[0] === 'live/demo');
    assert.ok(row, detail);
    assert.equal(row[1], 'clip', detail);
    assert.equal(row[2], 'yes', detail);
    assert.equal(row[3], '50', detail);
    assert.ok(s.pools > 0, detail);
    assert.ok(!/^0 /.test(s.egress), `egress shown as ${s.egress}\n${detail}`);
  });
});

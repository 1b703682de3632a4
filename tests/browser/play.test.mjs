// End-to-end: `tern demo` on loopback, played by headless Chromium.
//
// Contract with the server (see docs/src/protocols/whep.md):
//   GET  /live/demo        player page: creates window.ternPc (RTCPeerConnection), plays over
//                          WHEP into <video id="video">, shows status text in #status
//   POST /live/demo/whep   SDP offer (application/sdp) -> 201, Location, SDP answer
//   DELETE <Location>      ends the session -> 200 or 204
//   GET  /live/nosuch      player page whose #status says "not found" or "not live"
//   SIGTERM                the server exits 0
//
// Run inside a private network namespace: ./scripts/netns-run.sh node --test tests/browser/
// (scripts/test.sh --only browser builds tern first and does that).

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { launchBrowser, newLoggedPage } from './browser.mjs';
import { startServer } from './server.mjs';

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

/** Runs in the page: the player's stats, status line and video element state. */
async function readPlayer() {
  const status = document.querySelector('#status')?.textContent ?? null;
  const video = document.querySelector('#video');
  const out = {
    status,
    hasPc: !!window.ternPc,
    paused: video ? video.paused : null,
    videoWidth: video ? video.videoWidth : null,
  };
  const pc = window.ternPc;
  if (!pc) return out;
  out.ice = pc.iceConnectionState;
  out.framesDecoded = 0;
  out.audioPackets = 0;
  (await pc.getStats()).forEach((s) => {
    if (s.type !== 'inbound-rtp') return;
    if (s.kind === 'video') out.framesDecoded = s.framesDecoded ?? 0;
    if (s.kind === 'audio') out.audioPackets = s.packetsReceived ?? 0;
  });
  return out;
}

describe('tern demo in Chromium', { timeout: 180_000 }, () => {
  let server;
  let browser;

  before(async () => {
    server = await startServer({ readyTimeoutMs: 20_000 });
    browser = await launchBrowser();
  }, { timeout: 60_000 });

  after(async () => {
    await browser?.close();
    await server?.stop();
  });

  const failure = (what, state, log) =>
    `${what}\nlast player state: ${JSON.stringify(state)}\n--- page log ---\n${log()}\n--- server output ---\n${server.tail()}`;

  it('player page plays live/demo: 250 frames decoded within 10 s of the first, audio flowing', { timeout: 40_000 }, async (t) => {
    const { page, log } = await newLoggedPage(browser.context);
    try {
      const started = Date.now();
      await page.goto(`${server.base}/live/demo`, { timeout: 10_000, waitUntil: 'domcontentloaded' });
      // Phase 1: the first decoded frame, by 28 s into the test.
      let s = {};
      while (Date.now() - started < 28_000) {
        s = await page.evaluate(readPlayer);
        if (s.framesDecoded > 0) break;
        await sleep(200);
      }
      assert.ok(s.framesDecoded > 0, failure('no video frame decoded within 28 s', s, log));
      const firstAt = Date.now();
      const base = s.framesDecoded;
      // Phase 2: 250 more frames and > 100 audio packets within 10 s.
      while (Date.now() - firstAt < 10_000) {
        s = await page.evaluate(readPlayer);
        if (s.framesDecoded - base >= 250 && s.audioPackets > 100) break;
        await sleep(250);
      }
      const grown = s.framesDecoded - base;
      const secs = ((Date.now() - firstAt) / 1000).toFixed(1);
      t.diagnostic(`first frame after ${firstAt - started} ms; +${grown} frames, ${s.audioPackets} audio packets after ${secs} s`);
      assert.ok(grown >= 250, failure(`framesDecoded grew by ${grown} in ${secs} s (want >= 250 in 10 s)`, s, log));
      assert.ok(s.audioPackets > 100, failure(`audio packetsReceived ${s.audioPackets} (want > 100)`, s, log));
      assert.equal(s.paused, false, failure('the <video> element is paused (autoplay blocked?)', s, log));
      assert.ok(s.videoWidth > 0, failure('the <video> element has no picture size', s, log));
    } finally {
      await page.close();
    }
  });

  it('raw WHEP: POST offer -> 201 + Location + answer, ICE connects, DELETE ends it', { timeout: 40_000 }, async (t) => {
    const { page, log } = await newLoggedPage(browser.context);
    try {
      // Any page of the server's origin, so that fetch() is same-origin.
      await page.goto(`${server.base}/`, { timeout: 10_000, waitUntil: 'domcontentloaded' });
      await page.evaluate(() => {
        document.documentElement.innerHTML = '<body></body>';
      });
      const r = await page.evaluate(async (endpoint) => {
        const out = {};
        const pc = new RTCPeerConnection();
        try {
          pc.addTransceiver('video', { direction: 'recvonly' });
          pc.addTransceiver('audio', { direction: 'recvonly' });
          await pc.setLocalDescription(await pc.createOffer());
          // Send the offer with the candidates gathered within 2 s (non-trickle).
          await new Promise((ok) => {
            if (pc.iceGatheringState === 'complete') return ok();
            pc.addEventListener('icegatheringstatechange', () => pc.iceGatheringState === 'complete' && ok());
            setTimeout(ok, 2_000);
          });
          const res = await fetch(endpoint, {
            method: 'POST',
            headers: { 'Content-Type': 'application/sdp' },
            body: pc.localDescription.sdp,
          });
          out.status = res.status;
          out.location = res.headers.get('Location');
          out.contentType = res.headers.get('Content-Type');
          out.body = await res.text();
          if (res.status !== 201) return out;
          try {
            await pc.setRemoteDescription({ type: 'answer', sdp: out.body });
            out.answerAccepted = true;
          } catch (e) {
            out.answerError = String(e);
          }
          if (out.answerAccepted) {
            const t0 = performance.now();
            while (performance.now() - t0 < 10_000) {
              if (['connected', 'completed', 'failed'].includes(pc.iceConnectionState)) break;
              await new Promise((ok) => setTimeout(ok, 50));
            }
            out.ice = pc.iceConnectionState;
            out.iceMs = Math.round(performance.now() - t0);
          }
          if (out.location) {
            const del = await fetch(new URL(out.location, location.href), { method: 'DELETE' });
            out.deleteStatus = del.status;
          }
        } catch (e) {
          out.error = String(e);
        } finally {
          pc.close();
        }
        return out;
      }, '/live/demo/whep');
      const why = (what) => `${what}\nWHEP exchange: ${JSON.stringify(r)}\n--- page log ---\n${log()}\n--- server output ---\n${server.tail()}`;
      assert.equal(r.error, undefined, why('the exchange threw'));
      assert.equal(r.status, 201, why('POST /live/demo/whep did not answer 201 Created'));
      assert.ok(r.location, why('201 without a Location header'));
      assert.match(r.contentType ?? '', /^application\/sdp/i, why('answer is not application/sdp'));
      assert.equal(r.answerAccepted, true, why('setRemoteDescription rejected the answer'));
      assert.ok(['connected', 'completed'].includes(r.ice), why(`iceConnectionState is ${r.ice} after ${r.iceMs} ms (want connected within 10 s)`));
      t.diagnostic(`ICE ${r.ice} in ${r.iceMs} ms; DELETE ${r.location} -> ${r.deleteStatus}`);
      assert.ok([200, 204].includes(r.deleteStatus), why(`DELETE of the session answered ${r.deleteStatus} (want 200 or 204)`));
    } finally {
      await page.close();
    }
  });

  it('player page of a stream that is not live says so in #status', { timeout: 20_000 }, async () => {
    const { page, log } = await newLoggedPage(browser.context);
    try {
      const res = await page.goto(`${server.base}/live/nosuch`, { timeout: 10_000, waitUntil: 'domcontentloaded' });
      try {
        await page.waitForFunction(
          () => /not found|not live/i.test(document.querySelector('#status')?.textContent ?? ''),
          null,
          { timeout: 10_000, polling: 100 },
        );
      } catch {
        const s = await page.evaluate(readPlayer).catch((e) => ({ error: String(e) }));
        assert.fail(
          `#status did not say "not found" or "not live" within 10 s (page HTTP status ${res?.status()})\n` +
            `last player state: ${JSON.stringify(s)}\n--- page log ---\n${log()}`,
        );
      }
    } finally {
      await page.close();
    }
  });

  it('server exits 0 on SIGTERM', { timeout: 20_000 }, async () => {
    await browser.close();
    const r = await server.stop({ killAfterMs: 5_000 });
    const out = `--- server output ---\n${server.tail()}`;
    assert.equal(r.killed, false, `tern was still running 5 s after SIGTERM and was killed\n${out}`);
    assert.equal(r.signal, null, `tern died of signal ${r.signal}\n${out}`);
    assert.equal(r.code, 0, `tern exited ${r.code} on SIGTERM\n${out}`);
  });
});

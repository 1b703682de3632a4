// Self-test of the browser harness, independent of tern: Chromium starts inside the private
// network namespace, gathers candidates only on the namespace's own address, and two peer
// connections in one page carry a canvas stream to each other over it with frames decoded.
// If this fails, play.test.mjs failing says nothing about tern.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { assertPrivateNetwork, launchBrowser, newLoggedPage } from './browser.mjs';

describe('browser harness', { timeout: 90_000 }, () => {
  let browser;

  before(async () => {
    browser = await launchBrowser();
  }, { timeout: 40_000 });

  after(async () => {
    await browser?.close();
  });

  it('runs in a private network namespace', () => {
    assert.doesNotThrow(assertPrivateNetwork);
  });

  it('two peer connections in one page connect and decode a canvas stream', { timeout: 40_000 }, async (t) => {
    const { page, log } = await newLoggedPage(browser.context);
    try {
      await page.goto('about:blank');
      const r = await page.evaluate(async () => {
        const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));
        const out = { candidates: [] };
        const canvas = document.createElement('canvas');
        canvas.width = 320;
        canvas.height = 240;
        document.body.append(canvas);
        const g = canvas.getContext('2d');
        let n = 0;
        const draw = setInterval(() => {
          n += 1;
          g.fillStyle = `hsl(${(n * 7) % 360} 80% 50%)`;
          g.fillRect(0, 0, 320, 240);
          g.fillStyle = '#000';
          g.fillText(String(n), 10, 20);
        }, 33);
        const a = new RTCPeerConnection();
        const b = new RTCPeerConnection();
        try {
          a.onicecandidate = (e) => {
            if (e.candidate) {
              out.candidates.push(e.candidate.candidate);
              b.addIceCandidate(e.candidate).catch(() => {});
            }
          };
          b.onicecandidate = (e) => {
            if (e.candidate) {
              out.candidates.push(e.candidate.candidate);
              a.addIceCandidate(e.candidate).catch(() => {});
            }
          };
          const video = document.createElement('video');
          video.muted = true;
          video.autoplay = true;
          document.body.append(video);
          b.ontrack = (e) => {
            video.srcObject = e.streams[0] ?? new MediaStream([e.track]);
          };
          const stream = canvas.captureStream(30);
          for (const t of stream.getTracks()) a.addTrack(t, stream);
          await a.setLocalDescription(await a.createOffer());
          await b.setRemoteDescription(a.localDescription);
          await b.setLocalDescription(await b.createAnswer());
          await a.setRemoteDescription(b.localDescription);

          const t0 = performance.now();
          while (performance.now() - t0 < 10_000) {
            if (['connected', 'completed'].includes(b.iceConnectionState)) break;
            await sleep(50);
          }
          out.ice = b.iceConnectionState;
          out.iceMs = Math.round(performance.now() - t0);
          const frames = async () => {
            let f = 0;
            (await b.getStats()).forEach((s) => {
              if (s.type === 'inbound-rtp' && s.kind === 'video') f = s.framesDecoded ?? 0;
            });
            return f;
          };
          const t1 = performance.now();
          let first = 0;
          while (performance.now() - t1 < 10_000 && first === 0) {
            first = await frames();
            await sleep(100);
          }
          out.firstFrames = first;
          await sleep(3_000);
          out.framesIn3s = (await frames()) - first;
          (await b.getStats()).forEach((s) => {
            if (s.type === 'candidate-pair' && s.nominated && s.state === 'succeeded') out.pair = s.id;
          });
          out.videoWidth = video.videoWidth;
        } finally {
          clearInterval(draw);
          a.close();
          b.close();
        }
        return out;
      });
      const detail = `${JSON.stringify(r)}\n${log()}`;
      t.diagnostic(`ICE ${r.ice} in ${r.iceMs} ms, ${r.framesIn3s} frames decoded in 3 s, candidates: ${r.candidates.join(' | ')}`);
      assert.ok(['connected', 'completed'].includes(r.ice), `ICE did not connect: ${detail}`);
      assert.ok(r.candidates.length > 0, `no ICE candidates: ${detail}`);
      for (const c of r.candidates) {
        // candidate:<foundation> <component> <proto> <priority> <address> <port> typ ...
        const addr = c.split(' ')[4];
        assert.match(addr, /^198\.1[89]\.|^127\./, `candidate on an address outside the namespace: ${c}`);
      }
      assert.ok(r.firstFrames > 0, `no frame decoded: ${detail}`);
      assert.ok(r.framesIn3s >= 30, `only ${r.framesIn3s} frames decoded in 3 s: ${detail}`);
      assert.equal(r.videoWidth, 320, `video element did not get the 320 px stream: ${detail}`);
    } finally {
      await page.close();
    }
  });
});

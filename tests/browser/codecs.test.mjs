// Video codecs passed through from WHIP publishers: headless Chromium publishes a canvas
// stream over WHIP with one codec preferred (VP8, VP9, AV1; H264 as the reference), and a
// second Chromium page watches it over WHEP, joining mid-stream. Each case asserts the
// viewer decoded that codec (its inbound-rtp's codec), its frames, freezes and losses, that
// a viewer who offers only another codec gets a 422 naming both, and that the stream's
// thumbnail (thumb.jpg) is a JPEG the browser decodes.
//
// Run inside a private network namespace: ./scripts/netns-run.sh node --test tests/browser/

import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { launchBrowser, newLoggedPage, publishCanvas } from './browser.mjs';
import { startServer } from './server.mjs';

const CODECS = ['H264', 'VP8', 'VP9', 'AV1'];

/** In the page: a WHEP viewer kept open; reports its DTLS transport's state changes. */
async function openViewer({ endpoint }) {
  const pc = new RTCPeerConnection();
  window.keptPc = pc;
  window.keptStates = [];
  pc.addTransceiver('video', { direction: 'recvonly' });
  await pc.setLocalDescription(await pc.createOffer());
  await new Promise((ok) => setTimeout(ok, 500));
  const res = await fetch(endpoint, {
    method: 'POST',
    headers: { 'content-type': 'application/sdp' },
    body: pc.localDescription.sdp,
  });
  const answer = await res.text();
  if (res.status !== 201) return { error: `${res.status} ${answer}` };
  await pc.setRemoteDescription({ type: 'answer', sdp: answer });
  const dtls = pc.getReceivers()[0].transport;
  dtls.onstatechange = () => window.keptStates.push(dtls.state);
  for (let i = 0; i < 100 && pc.connectionState !== 'connected'; i++) await new Promise((ok) => setTimeout(ok, 100));
  return { state: pc.connectionState, codec: answer.match(/a=rtpmap:\d+ ([^/]+)\/90000/)[1] };
}

/**
 * In the page: watch over WHEP for `seconds`; `only` limits the offer to one codec (to see
 * the refusal). Returns the viewer's figures.
 */
async function watch({ endpoint, seconds, only }) {
  const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));
  const pc = new RTCPeerConnection();
  const tr = pc.addTransceiver('video', { direction: 'recvonly' });
  pc.addTransceiver('audio', { direction: 'recvonly' });
  if (only) {
    const caps = RTCRtpReceiver.getCapabilities('video').codecs;
    tr.setCodecPreferences(caps.filter((c) => c.mimeType.toLowerCase() === `video/${only.toLowerCase()}`));
  }
  await pc.setLocalDescription(await pc.createOffer());
  await new Promise((ok) => {
    if (pc.iceGatheringState === 'complete') ok();
    pc.onicegatheringstatechange = () => pc.iceGatheringState === 'complete' && ok();
    setTimeout(ok, 2000);
  });
  const t0 = performance.now();
  const res = await fetch(endpoint, {
    method: 'POST',
    headers: { 'content-type': 'application/sdp' },
    body: pc.localDescription.sdp,
  });
  const body = await res.text();
  if (res.status !== 201) {
    pc.close();
    return { status: res.status, body };
  }
  await pc.setRemoteDescription({ type: 'answer', sdp: body });
  const location = new URL(res.headers.get('location'), endpoint).toString();
  let firstFrameMs = null;
  const end = t0 + seconds * 1000;
  let v = {};
  let mime = null;
  while (performance.now() < end) {
    await sleep(100);
    const stats = await pc.getStats();
    stats.forEach((s) => {
      if (s.type === 'inbound-rtp' && s.kind === 'video') {
        v = s;
        if (s.codecId && stats.get(s.codecId)) mime = stats.get(s.codecId).mimeType;
      }
    });
    if (firstFrameMs === null && (v.framesDecoded ?? 0) > 0) firstFrameMs = Math.round(performance.now() - t0);
  }
  const out = {
    status: res.status,
    mime,
    firstFrameMs,
    framesDecoded: v.framesDecoded ?? 0,
    keyFramesDecoded: v.keyFramesDecoded ?? 0,
    freezeCount: v.freezeCount ?? 0,
    totalFreezesDuration: v.totalFreezesDuration ?? 0,
    packetsReceived: v.packetsReceived ?? 0,
    packetsLost: v.packetsLost ?? 0,
    frameWidth: v.frameWidth ?? 0,
    frameHeight: v.frameHeight ?? 0,
    pliCount: v.pliCount ?? 0,
  };
  await fetch(location, { method: 'DELETE' });
  pc.close();
  return out;
}

describe('WHIP codecs passed through to WHEP viewers (Chromium to Chromium)', { timeout: 300_000 }, () => {
  let server;
  let browser;
  let dir;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tern-codecs-'));
    const config = join(dir, 'tern.toml');
    const names = CODECS.map((c) => `"${c.toLowerCase()}"`).join(', ');
    await writeFile(config, `[[app]]\nname = "live"\nstreams = [${names}]\n`);
    server = await startServer({ readyTimeoutMs: 20_000, extraArgs: ['--config', config] });
    browser = await launchBrowser();
  }, { timeout: 60_000 });

  after(async () => {
    await browser?.close();
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  for (const codec of CODECS) {
    it(`${codec}: publisher's codec reaches the viewer, decoded without loss`, { timeout: 60_000 }, async () => {
      const pub = await newLoggedPage(browser.context);
      const view = await newLoggedPage(browser.context);
      const stream = `${server.base}/live/${codec.toLowerCase()}`;
      try {
        await pub.page.goto(`${server.base}/`);
        await view.page.goto(`${server.base}/`);
        const p = await pub.page.evaluate(publishCanvas, { endpoint: `${stream}/whip`, codec });
        const why = () => `${JSON.stringify(p)}\n--- publisher ---\n${pub.log()}\n--- viewer ---\n${view.log()}\n--- server ---\n${server.tail()}`;
        assert.equal(p.error, undefined, why());
        assert.deepEqual(p.answered, [codec], `the answer offers the publisher only ${codec}: ${why()}`);
        // Join mid-stream, after a couple of seconds of publishing.
        await new Promise((ok) => setTimeout(ok, 2500));
        if (codec !== 'H264') {
          // (An H264 stream keeps its rule: a viewer without H264 gets the audio only.)
          const refused = await view.page.evaluate(watch, { endpoint: `${stream}/whep`, seconds: 1, only: 'H264' });
          console.log(`${codec}: viewer offering only H264: ${refused.status} ${refused.body}`);
          assert.equal(refused.status, 422, why());
          assert.match(refused.body, new RegExp(`stream's video is ${codec}; the offer's video section has H264`), why());
        }
        const v = await view.page.evaluate(watch, { endpoint: `${stream}/whep`, seconds: 8 });
        console.log(`${codec}: ${JSON.stringify(v)}`);
        assert.equal(v.status, 201, `${JSON.stringify(v)} ${why()}`);
        assert.equal(v.mime?.toLowerCase(), `video/${codec.toLowerCase()}`, why());
        assert.ok(v.firstFrameMs !== null && v.firstFrameMs < 4000, `first frame within 4 s: ${JSON.stringify(v)}`);
        assert.ok(v.framesDecoded >= 90, `at least 90 frames decoded in 8 s: ${JSON.stringify(v)}`);
        assert.ok(v.keyFramesDecoded >= 1, JSON.stringify(v));
        assert.equal(v.packetsLost, 0, `no packet lost: ${JSON.stringify(v)}`);
        assert.ok(v.totalFreezesDuration < 1, `freezes under 1 s in all: ${JSON.stringify(v)}`);
        // The API says what viewers are answered with.
        const api = await (await fetch(`${server.base}/v1/streams/live/${codec.toLowerCase()}`)).json();
        assert.equal(api.video?.codec, codec, JSON.stringify(api));
        // Its thumbnail: a JPEG the browser decodes, at the stream's size (libavcodec decodes
        // every codec, AV1 included; H264, VP8 and VP9 through the tap's feed, AV1 through
        // the thumbnails' own depacketizer).
        // A 503 (no keyframe within 5 s) is asked again, as its Retry-After says: each
        // request that finds none asks the publisher once more.
        const thumb = await view.page.evaluate(async (url) => {
          let r;
          for (let i = 0; i < 3; i++) {
            r = await fetch(url);
            if (r.status !== 503) break;
          }
          if (!r.ok) return { status: r.status, body: await r.text() };
          const img = await createImageBitmap(await r.blob());
          return { status: r.status, type: r.headers.get('content-type'), width: img.width, height: img.height };
        }, `${stream}/thumb.jpg`);
        console.log(`${codec}: thumbnail ${JSON.stringify(thumb)}`);
        assert.equal(thumb.status, 200, `thumbnail: ${JSON.stringify(thumb)} ${why()}`);
        assert.equal(thumb.type, 'image/jpeg', JSON.stringify(thumb));
        assert.ok(thumb.width > 0 && thumb.height > 0, JSON.stringify(thumb));
        // The thumbnail asked the publisher for a keyframe: its PLI reached Chromium (a
        // publisher without simulcast once got none, and its viewers waited for keyframes
        // it was never asked for).
        const plis = await pub.page.evaluate(async () => {
          let n = 0;
          (await window.pubPc.getStats()).forEach((s) => { if (s.type === 'outbound-rtp' && s.kind === 'video') n += s.pliCount ?? 0; });
          return n;
        });
        assert.ok(plis >= 1, `the publisher got ${plis} PLIs: ${why()}`);
        // (Chromium's encoder may scale its picture under load: the shape is compared.)
        if (v.frameWidth > 0 && v.frameHeight > 0) {
          const ratio = (thumb.width / thumb.height) / (v.frameWidth / v.frameHeight);
          assert.ok(Math.abs(ratio - 1) < 0.05, `thumbnail of the stream's shape: ${JSON.stringify(thumb)} ${JSON.stringify(v)}`);
        }
        // The WHIP path (str0m) picks SRTP profiles in [tunables] srtp_profiles order too.
        const cipher = await pub.page.evaluate(async () => {
          let c = null;
          (await window.pubPc.getStats()).forEach((s) => { if (s.type === 'transport') c = s.srtpCipher; });
          return c;
        });
        assert.equal(cipher, 'SRTP_AEAD_AES_128_GCM', `the publisher's srtpCipher: ${why()}`);
      } finally {
        await pub.page.evaluate(() => {
          clearInterval(window.drawTimer);
          return window.whipLocation ? fetch(window.whipLocation, { method: 'DELETE' }).then((r) => r.status) : 0;
        }).catch(() => 0);
        await pub.page.close();
        await view.page.close();
      }
    });
  }

  it('a publisher in another codec takes the stream: old viewers are closed, a new POST gets the new codec', { timeout: 60_000 }, async () => {
    const pub = await newLoggedPage(browser.context);
    const view = await newLoggedPage(browser.context);
    // live/h264 is free again (the H264 case ended its publisher).
    const stream = `${server.base}/live/h264`;
    try {
      await pub.page.goto(`${server.base}/`);
      await view.page.goto(`${server.base}/`);
      const why = () => `--- publisher ---\n${pub.log()}\n--- viewer ---\n${view.log()}\n--- server ---\n${server.tail()}`;
      let p = await pub.page.evaluate(publishCanvas, { endpoint: `${stream}/whip`, codec: 'H264' });
      assert.equal(p.error, undefined, why());
      const kept = await view.page.evaluate(openViewer, { endpoint: `${stream}/whep` });
      assert.deepEqual(kept, { state: 'connected', codec: 'H264' }, why());
      // The H264 publisher leaves; a VP8 one arrives.
      await pub.page.evaluate(() => {
        clearInterval(window.drawTimer);
        window.pubPc.close();
        return fetch(window.whipLocation, { method: 'DELETE' }).then((r) => r.status);
      });
      p = await pub.page.evaluate(publishCanvas, { endpoint: `${stream}/whip`, codec: 'VP8' });
      assert.equal(p.error, undefined, why());
      let states = [];
      for (let i = 0; i < 50 && !states.includes('closed'); i++) {
        await new Promise((ok) => setTimeout(ok, 100));
        states = await view.page.evaluate(() => window.keptStates);
      }
      console.log(`switch: the H264 viewer's DTLS states: ${JSON.stringify(states)}`);
      assert.ok(states.includes('closed'), `the H264 viewer got a DTLS close: ${JSON.stringify(states)} ${why()}`);
      const v = await view.page.evaluate(watch, { endpoint: `${stream}/whep`, seconds: 5 });
      console.log(`switch: rejoined: ${JSON.stringify(v)}`);
      assert.equal(v.mime?.toLowerCase(), 'video/vp8', `${JSON.stringify(v)} ${why()}`);
      assert.ok(v.framesDecoded >= 50, JSON.stringify(v));
    } finally {
      await pub.page.evaluate(() => {
        clearInterval(window.drawTimer);
        return window.whipLocation ? fetch(window.whipLocation, { method: 'DELETE' }).then((r) => r.status) : 0;
      }).catch(() => 0);
      await pub.page.close();
      await view.page.close();
    }
  });
});

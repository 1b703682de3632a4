// HTTPS end to end (issue 39): tern serves its own certificate (made here with openssl, and
// trusted by Chromium through --ignore-certificate-errors-spki-list, no CA involved), and on
// an https:// page Chromium
//   - publishes a fake camera (getUserMedia, a secure-context API) over WHIP and a second
//     page plays it over WHEP;
//   - plays live/demo with OvenPlayer over wss://;
//   - plays LL-HLS with the built-in hls.js over HTTP/2 (the player page's fallback).
//
// Run inside a private network namespace: ./scripts/netns-run.sh node --test tests/browser/

import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { gotoSteady, launchBrowser, newLoggedPage } from './browser.mjs';
import { makeCertificate } from './certs.mjs';
import { freeTcpPort, startServer } from './server.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const OVENPLAYER_JS = join(HERE, 'node_modules', 'ovenplayer', 'dist', 'ovenplayer.js');
const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

/** In a page: publishes the fake camera and microphone over WHIP to `endpoint`. */
async function publishCamera({ endpoint }) {
  const media = await navigator.mediaDevices.getUserMedia({ video: { width: 640, height: 360 }, audio: true });
  const pc = new RTCPeerConnection();
  window.pubPc = pc;
  for (const track of media.getTracks()) pc.addTransceiver(track, { direction: 'sendonly' });
  await pc.setLocalDescription(await pc.createOffer());
  await new Promise((ok) => {
    if (pc.iceGatheringState === 'complete') ok();
    pc.onicegatheringstatechange = () => pc.iceGatheringState === 'complete' && ok();
    setTimeout(ok, 2000);
  });
  const res = await fetch(endpoint, { method: 'POST', headers: { 'content-type': 'application/sdp' }, body: pc.localDescription.sdp });
  const answer = await res.text();
  if (res.status !== 201) return { error: `WHIP POST ${res.status}: ${answer}` };
  await pc.setRemoteDescription({ type: 'answer', sdp: answer });
  return { ok: true, secure: window.isSecureContext };
}

/** In a page: a WHEP viewer of `endpoint` (video and audio), kept as window.viewPc. */
async function playWhep({ endpoint }) {
  const pc = new RTCPeerConnection();
  window.viewPc = pc;
  pc.addTransceiver('video', { direction: 'recvonly' });
  pc.addTransceiver('audio', { direction: 'recvonly' });
  await pc.setLocalDescription(await pc.createOffer());
  const res = await fetch(endpoint, { method: 'POST', headers: { 'content-type': 'application/sdp' }, body: pc.localDescription.sdp });
  const answer = await res.text();
  if (res.status !== 201) return { error: `WHEP POST ${res.status}: ${answer}` };
  await pc.setRemoteDescription({ type: 'answer', sdp: answer });
  // Chromium decodes received audio only for a sink: a muted, playing element.
  const el = document.createElement('video');
  el.muted = true;
  el.autoplay = true;
  el.srcObject = new MediaStream(pc.getReceivers().map((r) => r.track));
  document.body.append(el);
  return { ok: true };
}

/** In a page: decoded video frames and audio samples of the peer connection `name`. */
async function readPc(name) {
  const pc = window[name];
  const out = { ice: pc?.iceConnectionState, frames: 0, samples: 0 };
  if (!pc) return out;
  (await pc.getStats()).forEach((s) => {
    if (s.type !== 'inbound-rtp') return;
    if (s.kind === 'video') out.frames = s.framesDecoded ?? 0;
    if (s.kind === 'audio') out.samples = s.totalSamplesReceived ?? 0;
  });
  return out;
}

async function waitFor(page, fn, arg, ok, ms, what) {
  const deadline = Date.now() + ms;
  let s;
  for (;;) {
    s = await page.evaluate(fn, arg);
    if (ok(s)) return s;
    assert.ok(Date.now() < deadline, `${what} after ${ms} ms: ${JSON.stringify(s)}`);
    await sleep(250);
  }
}

describe('HTTPS: WHIP, WHEP, wss:// and LL-HLS over HTTP/2 in Chromium', { timeout: 150_000 }, () => {
  let dir;
  let server;
  let browser;
  let base;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tern-https-'));
    const { cert, key, spki } = makeCertificate(dir);
    const config = join(dir, 'tern.toml');
    await writeFile(config, '[[app]]\nname = "live"\nstreams = ["cam"]\n');
    const httpsPort = await freeTcpPort();
    server = await startServer({
      extraArgs: ['--config', config, '--https', `127.0.0.1:${httpsPort}`, '--tls-cert', cert, '--tls-key', key],
    });
    base = `https://127.0.0.1:${httpsPort}`;
    browser = await launchBrowser({
      extraArgs: [`--ignore-certificate-errors-spki-list=${spki}`, '--use-fake-device-for-media-stream'],
    });
  });

  after(async () => {
    await browser?.close();
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('a fake camera published over WHIP on an https page plays over WHEP', async () => {
    const pub = await newLoggedPage(browser.context);
    const view = await newLoggedPage(browser.context);
    const failure = (what) => `${what}\n--- publisher ---\n${pub.log()}\n--- viewer ---\n${view.log()}\n--- server ---\n${server.tail()}`;
    await gotoSteady(pub.page, `${base}/`);
    const p = await pub.page.evaluate(publishCamera, { endpoint: `${base}/live/cam/whip` });
    assert.equal(p.error, undefined, failure(p.error));
    assert.equal(p.secure, true, 'the https page is a secure context');
    await gotoSteady(view.page, `${base}/`);
    await sleep(1500);
    const v = await view.page.evaluate(playWhep, { endpoint: `${base}/live/cam/whep` });
    assert.equal(v.error, undefined, failure(v.error));
    const s = await waitFor(view.page, readPc, 'viewPc', (x) => x.frames > 60 && x.samples > 0, 30_000, failure('no playback'));
    console.log(`https: WHIP camera -> WHEP viewer: ${JSON.stringify(s)}`);
    await pub.page.close();
    await view.page.close();
  });

  it('OvenPlayer plays live/demo over wss://', async () => {
    const { page, log } = await newLoggedPage(browser.context);
    await gotoSteady(page, `${base}/`, { waitUntil: 'domcontentloaded' });
    await page.evaluate(() => {
      document.body.innerHTML = '<div id="player"></div>';
    });
    await page.addScriptTag({ path: OVENPLAYER_JS });
    const file = `${base.replace('https://', 'wss://')}/live/demo`;
    await page.evaluate((f) => {
      window.ovenErrors = [];
      const player = window.OvenPlayer.create('player', { autoStart: true, mute: true, sources: [{ label: 'tern', type: 'webrtc', file: f }] });
      player.on('peerConnectionPrepared', (pc) => {
        window.ovenPc = pc;
      });
      player.on('error', (e) => window.ovenErrors.push(JSON.stringify(e)));
    }, file);
    const s = await waitFor(page, readPc, 'ovenPc', (x) => x.frames > 60 && x.samples > 0, 30_000,
      `OvenPlayer over ${file}: ${JSON.stringify(await page.evaluate(() => window.ovenErrors))} ${log()}\n${server.tail()}`);
    const errors = await page.evaluate(() => window.ovenErrors);
    assert.deepEqual(errors, [], log());
    console.log(`https: OvenPlayer over wss: ${JSON.stringify(s)}`);
    await page.close();
  });

  it('the player page falls back to LL-HLS with hls.js over HTTP/2', async () => {
    const { page, log } = await newLoggedPage(browser.context);
    await page.addInitScript(() => {
      window.RTCPeerConnection = undefined;
    });
    await gotoSteady(page, `${base}/live/demo`);
    const read = () => {
      const video = document.querySelector('#video');
      const protocols = performance.getEntriesByType('resource')
        .filter((e) => /\.(m3u8|m4s|mp4)(\?|$)/.test(e.name) || e.name.includes('.m3u8?'))
        .map((e) => e.nextHopProtocol);
      return {
        mode: window.ternMode ?? null,
        currentTime: video.currentTime,
        frames: video.getVideoPlaybackQuality().totalVideoFrames,
        protocols: [...new Set(protocols)],
        hlsRequests: protocols.length,
      };
    };
    const s = await waitFor(page, read, undefined, (x) => x.mode === 'hls' && x.currentTime > 3 && x.frames > 60, 40_000,
      `HLS over HTTPS: ${log()}`);
    console.log(`https: hls.js: ${JSON.stringify(s)}`);
    assert.ok(s.hlsRequests > 3, `HLS requests seen: ${JSON.stringify(s)}`);
    assert.deepEqual(s.protocols, ['h2'], 'every HLS request went over HTTP/2');
    await page.close();
  });
});

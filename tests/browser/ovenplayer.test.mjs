// End-to-end: OvenPlayer (the npm package `ovenplayer`, unchanged) plays `tern demo` through
// tern's OvenMediaEngine-compatible WebSocket signalling, ws://HOST:PORT/live/demo, in
// headless Chromium.
//
// Contract with the server (see docs/src/protocols/ome.md):
//   GET ws://HOST:PORT/{app}/{stream}   WebSocket: request_offer -> offer (server offers),
//                                       answer, candidate, stop; closing it ends the session
//   GET /v1/memory                      the ome_signalling pool counts open sockets
//   ws://.../live/demo?transport=tcp    with TURN on (--turn), the offer carries iceServers
//                                       (TURN over TCP) and OvenPlayer relays over TCP
//
// Run inside a private network namespace: ./scripts/netns-run.sh node --test tests/browser/
// (scripts/test.sh --only browser builds tern first and does that). TERN_SCREENSHOT=FILE.png
// saves a picture of the playing player.

import assert from 'node:assert/strict';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { launchBrowser, newLoggedPage } from './browser.mjs';
import { freeUdpPort, startServer } from './server.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const OVENPLAYER_JS = join(HERE, 'node_modules', 'ovenplayer', 'dist', 'ovenplayer.js');

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

/** Runs in the page: OvenPlayer's state, the <video> element and the peer connection's stats. */
async function readPlayer() {
  const video = document.querySelector('#player video');
  const out = {
    state: window.ovenPlayer ? window.ovenPlayer.getState() : null,
    errors: window.ovenErrors.slice(-3),
    hasPc: !!window.ovenPc,
    currentTime: video ? video.currentTime : null,
    paused: video ? video.paused : null,
    videoWidth: video ? video.videoWidth : null,
    decodedFrames: video && video.getVideoPlaybackQuality ? video.getVideoPlaybackQuality().totalVideoFrames : 0,
  };
  const pc = window.ovenPc;
  if (!pc) return out;
  out.ice = pc.iceConnectionState;
  out.framesDecoded = 0;
  out.audioPackets = 0;
  out.audioSamples = 0;
  const stats = await pc.getStats();
  let pairId;
  stats.forEach((s) => {
    if (s.type === 'transport') pairId = s.selectedCandidatePairId;
    if (s.type !== 'inbound-rtp') return;
    if (s.kind === 'video') out.framesDecoded = s.framesDecoded ?? 0;
    if (s.kind === 'audio') {
      out.audioPackets = s.packetsReceived ?? 0;
      out.audioSamples = s.totalSamplesReceived ?? 0;
    }
  });
  const pair = pairId && stats.get(pairId);
  const local = pair && stats.get(pair.localCandidateId);
  if (local) {
    out.localType = local.candidateType;
    out.relayProtocol = local.relayProtocol ?? null;
  }
  return out;
}

async function signallingSockets(base) {
  const r = await fetch(`${base}/v1/memory`);
  const body = await r.json();
  const pool = body.pools.find((p) => p.name === 'ome_signalling');
  return pool ? pool.items_in_use : 0;
}

/**
 * Loads OvenPlayer into an emptied page of tern's origin, plays `query` appended to
 * ws://.../live/demo, checks playback (currentTime, frames, audio), runs `extra(state)`, then
 * destroys the player and checks that the server freed the signalling socket.
 */
async function playWithOvenPlayer(server, browser, t, query, extra) {
  const { page, log } = await newLoggedPage(browser.context);
  const failure = (what, state) =>
    `${what}\nlast player state: ${JSON.stringify(state)}\n--- page log ---\n${log()}\n--- server output ---\n${server.tail()}`;
  try {
    // A page of tern's origin, emptied, with OvenPlayer's published bundle loaded into it.
    await page.goto(`${server.base}/`, { timeout: 10_000, waitUntil: 'domcontentloaded' });
    await page.evaluate(() => {
      document.body.innerHTML = '<div id="player"></div>';
    });
    await page.addScriptTag({ path: OVENPLAYER_JS });
    const wsUrl = `ws://127.0.0.1:${server.httpPort}/live/demo${query}`;
    const started = Date.now();
    await page.evaluate((file) => {
      window.ovenErrors = [];
      const player = window.OvenPlayer.create('player', {
        autoStart: true,
        mute: true,
        sources: [{ label: 'tern', type: 'webrtc', file }],
      });
      player.on('peerConnectionPrepared', (pc) => {
        window.ovenPc = pc;
      });
      player.on('error', (e) => window.ovenErrors.push(JSON.stringify(e)));
      window.ovenPlayer = player;
    }, wsUrl);

    // Phase 1: playing with a first decoded frame, by 25 s.
    let s = {};
    while (Date.now() - started < 25_000) {
      s = await page.evaluate(readPlayer);
      if (s.framesDecoded > 0 && s.currentTime > 0) break;
      if (s.errors.length > 0) break;
      await sleep(200);
    }
    assert.deepEqual(s.errors, [], failure('OvenPlayer reported an error', s));
    assert.ok(s.framesDecoded > 0, failure('no video frame decoded within 25 s', s));
    const firstAt = Date.now();
    const t0 = s.currentTime;
    const f0 = s.framesDecoded;
    assert.equal(await signallingSockets(server.base), 1, 'one signalling socket while playing');

    // Phase 2: 3 s of playback: currentTime advances by > 2 s, > 60 frames, audio flows.
    while (Date.now() - firstAt < 10_000) {
      s = await page.evaluate(readPlayer);
      if (s.currentTime - t0 > 3 && s.framesDecoded - f0 > 60 && s.audioPackets > 100) break;
      await sleep(250);
    }
    const secs = ((Date.now() - firstAt) / 1000).toFixed(1);
    t.diagnostic(
      `${wsUrl}: first frame after ${firstAt - started} ms; then in ${secs} s: currentTime +${(s.currentTime - t0).toFixed(2)} s, ` +
        `+${s.framesDecoded - f0} frames, ${s.audioPackets} audio packets, ${s.audioSamples} audio samples; ` +
        `state ${s.state}, ICE ${s.ice}, local candidate ${s.localType}${s.relayProtocol ? '/' + s.relayProtocol : ''}`,
    );
    assert.equal(s.state, 'playing', failure('OvenPlayer is not in the playing state', s));
    assert.ok(s.currentTime - t0 > 2, failure(`currentTime advanced ${(s.currentTime - t0).toFixed(2)} s (want > 2)`, s));
    assert.ok(s.framesDecoded - f0 > 60, failure(`framesDecoded grew by ${s.framesDecoded - f0} (want > 60)`, s));
    assert.ok(s.audioPackets > 100, failure(`audio packetsReceived ${s.audioPackets} (want > 100)`, s));
    assert.ok(s.audioSamples > 0, failure('no audio samples decoded', s));
    assert.equal(s.paused, false, failure('the <video> element is paused', s));
    assert.ok(s.videoWidth > 0, failure('the <video> element has no picture size', s));
    extra(s, failure);

    if (process.env.TERN_SCREENSHOT) await page.screenshot({ path: process.env.TERN_SCREENSHOT });

    // OvenPlayer's destroy sends stop and closes the socket: the server frees the session.
    await page.evaluate(() => window.ovenPlayer.remove());
    let open = 1;
    const until = Date.now() + 5_000;
    while (Date.now() < until) {
      open = await signallingSockets(server.base);
      if (open === 0) break;
      await sleep(100);
    }
    assert.equal(open, 0, failure('the signalling socket is still held 5 s after player.remove()', s));
  } finally {
    await page.close();
  }
}

describe('OvenPlayer against tern over OME signalling', { timeout: 120_000 }, () => {
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

  it('OvenPlayer plays ws://.../live/demo: currentTime advances, frames decode, audio arrives; destroy frees the session', { timeout: 60_000 }, async (t) => {
    await playWithOvenPlayer(server, browser, t, '', (s, failure) => {
      assert.equal(s.localType, 'host', failure('without TURN the pair should be host-to-host', s));
    });
  });
});

describe('OvenPlayer with ?transport=tcp against tern with TURN', { timeout: 120_000 }, () => {
  let server;
  let browser;

  before(async () => {
    const turnPort = await freeUdpPort();
    server = await startServer({
      readyTimeoutMs: 20_000,
      extraArgs: ['--turn', `127.0.0.1:${turnPort}`, '--turn-relay-ip', '127.0.0.1'],
    });
    browser = await launchBrowser();
  }, { timeout: 60_000 });

  after(async () => {
    await browser?.close();
    await server?.stop();
  });

  it('the offer carries TURN-over-TCP iceServers and OvenPlayer plays relayed over TCP', { timeout: 60_000 }, async (t) => {
    await playWithOvenPlayer(server, browser, t, '?transport=tcp', (s, failure) => {
      assert.equal(s.localType, 'relay', failure('the selected pair is not relayed', s));
      assert.equal(s.relayProtocol, 'tcp', failure('the relay does not run over TCP', s));
    });
  });
});

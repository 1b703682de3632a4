// End-to-end: headless Chromium plays live/demo through tern's built-in TURN server with
// iceTransportPolicy 'relay' (no host candidates at all), over UDP, over TCP, and over TLS
// given only the `turns:` server (issue 56; the certificate is trusted through
// --ignore-certificate-errors-spki-list, as in https.test.mjs).
//
// Contract with the server (see docs/src/protocols/turn.md):
//   tern demo --turn ADDR --turn-relay-ip 127.0.0.1 --turn-tls ADDR --tls-cert C --tls-key K
//   OPTIONS and POST /live/demo/whep   carry Link: <turn:HOST:PORT?transport=udp|tcp>;
//                                      rel="ice-server"; username=...; credential=...
//                                      and <turns:HOST:TLSPORT?transport=tcp>; ...
//
// Run inside a private network namespace: ./scripts/netns-run.sh node --test tests/browser/

import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { launchBrowser, newLoggedPage } from './browser.mjs';
import { makeCertificate } from './certs.mjs';
import { freeTcpPort, freeUdpPort, startServer } from './server.mjs';

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

/**
 * Runs in the page: reads the ICE servers from the Link headers of OPTIONS, keeps the TURN
 * URL of the wanted transport, and starts a relay-only WHEP session. Returns what it saw.
 */
async function startRelayed(transport) {
  const out = {};
  const parseLinks = (value) =>
    (value ?? '')
      .split(/,\s*(?=<)/)
      .filter((l) => /rel="ice-server"/.test(l))
      .map((l) => {
        const param = (k) => (l.match(new RegExp(`${k}="([^"]*)"`)) ?? [])[1];
        return { urls: l.match(/^<([^>]*)>/)[1], username: param('username'), credential: param('credential') };
      });
  const opt = await fetch('/live/demo/whep', { method: 'OPTIONS' });
  out.optionsLinks = parseLinks(opt.headers.get('Link'));
  // TLS: the `turns:` server only; UDP and TCP: the `turn:` server of that transport.
  const turn = out.optionsLinks.filter((s) =>
    transport === 'tls' ? s.urls.startsWith('turns:') : s.urls.startsWith('turn:') && s.urls.endsWith(`transport=${transport}`));
  out.iceServers = turn;
  const pc = new RTCPeerConnection({ iceServers: turn, iceTransportPolicy: 'relay' });
  window.ternPc = pc;
  pc.addTransceiver('video', { direction: 'recvonly' });
  pc.addTransceiver('audio', { direction: 'recvonly' });
  const candidates = [];
  pc.addEventListener('icecandidate', (e) => e.candidate && candidates.push(e.candidate.candidate));
  await pc.setLocalDescription(await pc.createOffer());
  await new Promise((ok) => {
    if (pc.iceGatheringState === 'complete') return ok();
    pc.addEventListener('icegatheringstatechange', () => pc.iceGatheringState === 'complete' && ok());
    setTimeout(ok, 8_000);
  });
  out.candidates = candidates;
  const res = await fetch('/live/demo/whep', {
    method: 'POST',
    headers: { 'Content-Type': 'application/sdp' },
    body: pc.localDescription.sdp,
  });
  out.status = res.status;
  out.postLinks = parseLinks(res.headers.get('Link'));
  const answer = await res.text();
  if (res.status === 201) await pc.setRemoteDescription({ type: 'answer', sdp: answer });
  return out;
}

/** Runs in the page: decoded frames and the selected candidate pair's local candidate. */
async function readRelayed() {
  const pc = window.ternPc;
  const out = { ice: pc.iceConnectionState, framesDecoded: 0 };
  const stats = await pc.getStats();
  let pairId;
  stats.forEach((s) => {
    if (s.type === 'inbound-rtp' && s.kind === 'video') out.framesDecoded = s.framesDecoded ?? 0;
    if (s.type === 'transport') pairId = s.selectedCandidatePairId;
  });
  const pair = pairId && stats.get(pairId);
  const local = pair && stats.get(pair.localCandidateId);
  if (local) {
    out.localType = local.candidateType;
    out.relayProtocol = local.relayProtocol;
    out.localAddress = `${local.address}:${local.port}`;
  }
  return out;
}

describe('tern demo through tern TURN in Chromium (relay only)', { timeout: 180_000 }, () => {
  let server;
  let browser;
  let turnPort;
  let dir;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tern-turns-'));
    const { cert, key, spki } = makeCertificate(dir);
    turnPort = await freeUdpPort();
    const tlsPort = await freeTcpPort();
    server = await startServer({
      readyTimeoutMs: 20_000,
      extraArgs: ['--turn', `127.0.0.1:${turnPort}`, '--turn-relay-ip', '127.0.0.1',
        '--turn-tls', `127.0.0.1:${tlsPort}`, '--tls-cert', cert, '--tls-key', key],
    });
    browser = await launchBrowser({ extraArgs: [`--ignore-certificate-errors-spki-list=${spki}`] });
  }, { timeout: 60_000 });

  after(async () => {
    await browser?.close();
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  for (const transport of ['udp', 'tcp', 'tls']) {
    it(`plays over a TURN/${transport.toUpperCase()} relay: 100 frames decoded, selected pair is relay/${transport}`, { timeout: 50_000 }, async (t) => {
      const { page, log } = await newLoggedPage(browser.context);
      try {
        await page.goto(`${server.base}/`, { timeout: 10_000, waitUntil: 'domcontentloaded' });
        const setup = await page.evaluate(startRelayed, transport);
        const why = (what, s) =>
          `${what}\nsetup: ${JSON.stringify(setup)}\nstate: ${JSON.stringify(s)}\n--- page log ---\n${log()}\n--- server output ---\n${server.tail()}`;
        assert.equal(setup.optionsLinks.length, 4, why('OPTIONS did not carry 4 ice-server Links'));
        assert.equal(setup.postLinks.length, 4, why('the 201 did not carry 4 ice-server Links'));
        assert.equal(setup.iceServers.length, 1, why(`no TURN Link for ${transport}`));
        assert.ok(setup.candidates.length > 0 && setup.candidates.every((c) => / typ relay /.test(c)), why('Chromium gathered no relay candidate (or a non-relay one)'));
        assert.equal(setup.status, 201, why('WHEP POST did not answer 201'));
        const started = Date.now();
        let s = {};
        while (Date.now() - started < 30_000) {
          s = await page.evaluate(readRelayed);
          if (s.framesDecoded >= 100 && s.localType) break;
          await sleep(250);
        }
        t.diagnostic(`${transport}: ${s.framesDecoded} frames after ${Date.now() - started} ms via ${s.localType}/${s.relayProtocol} ${s.localAddress}`);
        assert.ok(s.framesDecoded >= 100, why(`only ${s.framesDecoded} frames decoded within 30 s`, s));
        assert.equal(s.localType, 'relay', why('the selected pair is not relayed', s));
        assert.equal(s.relayProtocol, transport, why(`the relay runs over ${s.relayProtocol}`, s));
        await page.evaluate(() => window.ternPc.close());
      } finally {
        await page.close();
      }
    });
  }
});

// Trickle ICE and ICE restart over PATCH from Chromium, on a page of another origin (so
// every request goes through CORS, PATCH and If-Match preflights included), for both a WHEP
// viewer of live/demo and a WHIP publisher of a canvas stream to live/trickled:
//
//   1. POST the offer at once, before any candidate is gathered, then PATCH each candidate
//      as Chromium finds it (application/trickle-ice-sdpfrag): 204 each, ICE connects.
//   2. pc.restartIce(): PATCH the new ufrag/pwd with If-Match = the ETag: 200 with the
//      server's new credentials, a new ETag; the answer is applied with them and ICE
//      connects again, media keeps flowing (frames decoded / packets the server counts).
//
// Run inside a private network namespace: ./scripts/netns-run.sh node --test tests/browser/

import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { launchBrowser, newLoggedPage } from './browser.mjs';
import { freeTcpPort, startServer } from './server.mjs';

/** A blank page on another port: another origin than tern's. */
async function startOtherOrigin() {
  const port = await freeTcpPort();
  const srv = createServer((_, res) => {
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end('<!doctype html><title>other origin</title><canvas id="c" width="320" height="240"></canvas>');
  });
  await new Promise((ok) => srv.listen(port, '127.0.0.1', ok));
  return { url: `http://127.0.0.1:${port}/`, close: () => new Promise((ok) => srv.close(ok)) };
}

/**
 * Runs in the page: one WHEP or WHIP session with trickle and an ICE restart. Returns what
 * happened, step by step.
 */
async function trickleSession({ endpoint, kind }) {
  const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));
  const out = { kind, patches: [], errors: [] };
  const pc = new RTCPeerConnection();
  window.pc = pc;
  let timer;
  if (kind === 'whep') {
    pc.addTransceiver('video', { direction: 'recvonly' });
    pc.addTransceiver('audio', { direction: 'recvonly' });
  } else {
    const canvas = document.querySelector('#c');
    const g = canvas.getContext('2d');
    let n = 0;
    timer = setInterval(() => {
      n += 1;
      g.fillStyle = `hsl(${(n * 7) % 360} 80% 50%)`;
      g.fillRect(0, 0, 320, 240);
      g.fillStyle = '#fff';
      g.fillText(String(n), 20 + (n % 200), 120);
    }, 33);
    const track = canvas.captureStream(30).getVideoTracks()[0];
    const tr = pc.addTransceiver(track, { direction: 'sendonly' });
    const h264 = RTCRtpSender.getCapabilities('video').codecs.filter((c) => /h264/i.test(c.mimeType));
    tr.setCodecPreferences(h264);
  }
  const candidates = [];
  pc.onicecandidate = (e) => {
    if (e.candidate && e.candidate.candidate) candidates.push(e.candidate);
  };
  const offer = await pc.createOffer();
  await pc.setLocalDescription(offer);
  // POST before gathering has finished: the offer carries no candidates.
  const res = await fetch(endpoint, {
    method: 'POST',
    headers: { 'content-type': 'application/sdp' },
    body: pc.localDescription.sdp.replace(/a=candidate:.*\r\n/g, ''),
  });
  out.postStatus = res.status;
  const answer = await res.text();
  if (res.status !== 201) {
    out.errors.push(`POST ${res.status}: ${answer}`);
    return out;
  }
  const location = new URL(res.headers.get('location'), endpoint).toString();
  let etag = res.headers.get('etag');
  out.etag = etag;
  out.acceptPatch = res.headers.get('accept-patch');
  await pc.setRemoteDescription({ type: 'answer', sdp: answer });

  const creds = (sdp) => ({
    ufrag: sdp.match(/a=ice-ufrag:(\S+)/)[1],
    pwd: sdp.match(/a=ice-pwd:(\S+)/)[1],
  });
  const mid = pc.getTransceivers()[0].mid;
  const frag = (c, lines) =>
    `a=ice-ufrag:${c.ufrag}\r\na=ice-pwd:${c.pwd}\r\nm=video 9 UDP/TLS/RTP/SAVPF 0\r\na=mid:${mid}\r\n${lines}`;
  const patch = async (body, headers = {}) => {
    const r = await fetch(location, {
      method: 'PATCH',
      headers: { 'content-type': 'application/trickle-ice-sdpfrag', ...headers },
      body,
    });
    const text = await r.text();
    out.patches.push(r.status);
    return { status: r.status, text, etag: r.headers.get('etag') };
  };
  // Trickle what has been gathered so far and what comes later, until connected.
  let sent = 0;
  const trickle = async () => {
    const c = creds(pc.localDescription.sdp);
    while (sent < candidates.length) {
      const cand = candidates[sent++];
      await patch(frag(c, `a=candidate:${cand.candidate.replace(/^candidate:/, '')}\r\n`));
    }
  };
  const waitConnected = async (what) => {
    for (let i = 0; i < 150; i++) {
      await trickle();
      if (pc.iceConnectionState === 'connected' || pc.iceConnectionState === 'completed') return true;
      await sleep(100);
    }
    out.errors.push(`${what}: ICE ${pc.iceConnectionState}`);
    return false;
  };
  if (!(await waitConnected('first connect'))) return out;
  await trickle();
  await patch(frag(creds(pc.localDescription.sdp), 'a=end-of-candidates\r\n'));
  out.tricklePatches = out.patches.slice();

  const media = async () => {
    let frames = 0;
    let packets = 0;
    (await pc.getStats()).forEach((s) => {
      if (s.type === 'inbound-rtp' && s.kind === 'video') frames = s.framesDecoded ?? 0;
      if (s.type === 'outbound-rtp' && s.kind === 'video') packets = s.packetsSent ?? 0;
    });
    return kind === 'whep' ? frames : packets;
  };
  await sleep(2000);
  out.mediaBeforeRestart = await media();

  // ICE restart.
  const oldLocal = creds(pc.localDescription.sdp);
  pc.restartIce();
  const reoffer = await pc.createOffer();
  // The restart gathers anew: trickle only the new candidates.
  candidates.length = 0;
  sent = 0;
  await pc.setLocalDescription(reoffer);
  const fresh = creds(pc.localDescription.sdp);
  out.newLocalCreds = fresh.ufrag !== oldLocal.ufrag;
  const noMatch = await patch(frag(fresh, ''));
  out.restartWithoutIfMatch = noMatch.status;
  const wrong = await patch(frag(fresh, ''), { 'if-match': '"nope"' });
  out.restartWrongEtag = wrong.status;
  const r = await patch(frag(fresh, ''), { 'if-match': etag });
  out.restartStatus = r.status;
  out.restartBody = r.text;
  if (r.status !== 200) {
    out.errors.push(`restart PATCH ${r.status}: ${r.text}`);
    return out;
  }
  out.newEtag = r.etag && r.etag !== etag;
  etag = r.etag;
  const server = creds(r.text);
  out.newServerCreds = server.ufrag !== creds(pc.remoteDescription.sdp).ufrag;
  const sdp = pc.remoteDescription.sdp
    .replace(/a=ice-ufrag:\S+/g, `a=ice-ufrag:${server.ufrag}`)
    .replace(/a=ice-pwd:\S+/g, `a=ice-pwd:${server.pwd}`);
  await pc.setRemoteDescription({ type: 'answer', sdp });
  // Connected again with the new credentials: wait for the checks to succeed.
  await sleep(300);
  if (!(await waitConnected('after restart'))) return out;
  // The transport now runs on the restarted credentials.
  (await pc.getStats()).forEach((s) => {
    if (s.type === 'transport') {
      out.transportUfragAfterRestart = s.iceLocalUsernameFragment;
      out.transportIceState = s.iceState;
    }
  });
  out.freshUfrag = fresh.ufrag;
  await sleep(2500);
  out.mediaAfterRestart = await media();
  out.iceAfter = pc.iceConnectionState;
  // Ended by the test, once it has read the server's counters.
  window.endSession = async () => {
    const del = await fetch(location, { method: 'DELETE' });
    clearInterval(timer);
    pc.close();
    return del.status;
  };
  return out;
}

/** The server's count of media packets from publishers. */
async function ingestPackets(base) {
  const r = await fetch(`${base}/v1/stats/current`);
  return (await r.json()).response.ingestPackets;
}

describe('trickle ICE and ICE restart over PATCH, cross-origin', { timeout: 180_000 }, () => {
  let server;
  let browser;
  let other;

  let dir;

  before(async () => {
    // live/demo (the built-in clip) for WHEP, live/trickled declared for the WHIP publisher.
    dir = await mkdtemp(join(tmpdir(), 'tern-trickle-'));
    const config = join(dir, 'tern.toml');
    await writeFile(config, '[[app]]\nname = "live"\nstreams = ["trickled"]\n');
    server = await startServer({ readyTimeoutMs: 20_000, extraArgs: ['--config', config] });
    other = await startOtherOrigin();
    browser = await launchBrowser();
  }, { timeout: 60_000 });

  after(async () => {
    await browser?.close();
    await other?.close();
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  for (const kind of ['whep', 'whip']) {
    it(`${kind.toUpperCase()}: candidates trickled, then ICE restarted, media flows throughout`, { timeout: 60_000 }, async () => {
      const { page, log } = await newLoggedPage(browser.context);
      try {
        await page.goto(other.url);
        const endpoint = kind === 'whep' ? `${server.base}/live/demo/whep` : `${server.base}/live/trickled/whip`;
        const out = await page.evaluate(trickleSession, { endpoint, kind });
        const why = `${JSON.stringify(out)}\n--- page log ---\n${log()}\n--- server ---\n${server.tail()}`;
        console.log(`${kind}: ${JSON.stringify(out)}`);
        assert.deepEqual(out.errors, [], why);
        assert.equal(out.postStatus, 201, why);
        assert.ok(out.etag, `POST answer has an ETag: ${why}`);
        assert.equal(out.acceptPatch, 'application/trickle-ice-sdpfrag', why);
        assert.ok(out.tricklePatches.length >= 2, `a candidate and end-of-candidates were PATCHed: ${why}`);
        assert.ok(out.tricklePatches.every((s) => s === 204), `every trickle PATCH got 204: ${why}`);
        assert.ok(out.mediaBeforeRestart > 20, `media before the restart: ${why}`);
        assert.equal(out.restartWithoutIfMatch, 428, why);
        assert.equal(out.restartWrongEtag, 412, why);
        assert.equal(out.restartStatus, 200, why);
        assert.ok(out.newLocalCreds && out.newServerCreds && out.newEtag, `new credentials both ways and a new ETag: ${why}`);
        assert.equal(out.transportUfragAfterRestart, out.freshUfrag, `the transport runs on the new credentials: ${why}`);
        assert.equal(out.transportIceState, 'connected', why);
        assert.ok(
          out.mediaAfterRestart > out.mediaBeforeRestart + 30,
          `media kept flowing after the restart (${out.mediaBeforeRestart} → ${out.mediaAfterRestart}): ${why}`,
        );
        if (kind === 'whip') {
          // What the browser sent after the restart reached the server.
          const a = await ingestPackets(server.base);
          await new Promise((ok) => setTimeout(ok, 2000));
          const b = await ingestPackets(server.base);
          console.log(`whip: the server took ${b - a} packets in 2 s after the restart`);
          assert.ok(b - a > 30, `server ingest after the restart: ${a} → ${b}: ${why}`);
        }
        assert.equal(await page.evaluate(() => window.endSession()), 200, why);
      } finally {
        await page.close();
      }
    });
  }
});

// Interop with GStreamer's webrtcbin (Debian's 1.22 through python3-gi), which authenticates
// with its default RSA-2048 certificate (OpenSSL DTLS 1.2): tests/interop/gst_client.py
// publishes H264 + Opus over WHIP and a Chromium viewer plays it over WHEP; a second
// webrtcbin plays live/demo over WHEP and decodes frames, with bundle-policy max-bundle
// (its audio section offered as port 0 with a=bundle-only, RFC 8843) and max-compat. Each side's SRTP profile is read
// where it is reported: Chromium's transport stats (`srtpCipher`) and tern's viewer
// snapshot (`connection.srtp`), which must agree on AES-128-GCM, tern's first preference.
//
// Run inside a private network namespace: ./scripts/netns-run.sh node --test tests/browser/

import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { launchBrowser, newLoggedPage, openWhepViewer, readWhepViewer } from './browser.mjs';
import { GST_PYTHON as PY, gst } from './clients.mjs';
import { startServer } from './server.mjs';

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));


/** The SRTP profile in each viewer snapshot of `stream` (`app/name`). */
async function snapshotProfiles(base, stream) {
  const list = await (await fetch(`${base}/v1/streams/${stream}/viewers`)).json();
  const viewers = Array.isArray(list) ? list : (list.viewers ?? []);
  return viewers.map((v) => v.connection?.srtp ?? null);
}

/** In the page: the SRTP and DTLS ciphers Chromium's transport reports. */
async function readTransport() {
  const out = {};
  (await window.viewPc.getStats()).forEach((s) => {
    if (s.type === 'transport') {
      Object.assign(out, { srtpCipher: s.srtpCipher, dtlsCipher: s.dtlsCipher, tls: s.tlsVersion });
    }
  });
  return out;
}

describe('GStreamer 1.22 webrtcbin (RSA certificate) as WHIP publisher and WHEP viewer', { timeout: 180_000 }, () => {
  let dir;
  let server;
  let browser;

  before(async () => {
    assert.ok(existsSync(PY), `no ${PY}: run scripts/install-deps.sh`);
    dir = await mkdtemp(join(tmpdir(), 'tern-gst-'));
    const config = join(dir, 'tern.toml');
    await writeFile(config, '[[app]]\nname = "live"\nstreams = ["gst"]\n');
    // On the namespace's veth address: libnice leaves loopback interfaces out of its host
    // candidates, so a 127.0.0.1 candidate is one webrtcbin cannot reach.
    server = await startServer({ readyTimeoutMs: 20_000, host: '198.18.0.1', extraArgs: ['--config', config] });
    browser = await launchBrowser();
  }, { timeout: 60_000 });

  after(async () => {
    await browser?.close();
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('webrtcbin publishes H264 + Opus over WHIP; Chromium plays it with AES-128-GCM', { timeout: 90_000 }, async () => {
    const stream = `${server.base}/live/gst`;
    const pub = gst(['publish', `${stream}/whip`, '25']);
    const { page, log } = await newLoggedPage(browser.context);
    const why = (what, extra) =>
      `${what}: ${JSON.stringify(extra)}\n--- page ---\n${log()}\n--- gst publisher ---\n${pub.output()}\n--- server ---\n${server.tail()}`;
    try {
      let deadline = Date.now() + 15_000;
      while (!server.output().includes('live/gst is live')) {
        assert.ok(Date.now() < deadline, why('not live within 15 s', {}));
        await sleep(100);
      }
      await page.goto(`${server.base}/v1/streams`, { timeout: 10_000 });
      const opened = await page.evaluate(openWhepViewer, { endpoint: `${stream}/whep`, audio: true });
      assert.equal(opened.status, 201, why('WHEP offer', opened));
      let v = {};
      deadline = Date.now() + 15_000;
      while (Date.now() < deadline) {
        v = await page.evaluate(readWhepViewer);
        if (v.frames >= 150) break;
        await sleep(250);
      }
      console.log(`Chromium viewer of the GStreamer publisher: ${JSON.stringify(v)}`);
      assert.ok(v.frames >= 150, why('150 frames decoded within 15 s', v));
      assert.equal(v.width, 640, why("the publisher's 640x360", v));
      assert.ok(v.audioPackets >= 100, why("the publisher's Opus reaches Chromium", v));
      const transport = await page.evaluate(readTransport);
      console.log(`Chromium transport: ${JSON.stringify(transport)}`);
      assert.equal(transport.srtpCipher, 'SRTP_AEAD_AES_128_GCM', why('Chromium srtpCipher', transport));
      const profiles = await snapshotProfiles(server.base, 'live/gst');
      assert.deepEqual(profiles, ['SRTP_AEAD_AES_128_GCM'], why('viewer snapshot srtp', profiles));

      assert.equal(await pub.done, 0, pub.output());
      const p = pub.result();
      console.log(`GStreamer publisher: ${JSON.stringify(p)}`);
      assert.equal(p.status, 201, pub.output());
      assert.equal(p.state, 'connected', pub.output());
      assert.equal(p.key, 'rsaEncryption 2048', `webrtcbin's own RSA certificate: ${pub.output()}`);
      assert.equal(p.delete, 200, pub.output());
    } finally {
      pub.child.kill('SIGKILL');
      await page.close();
    }
  });

  for (const policy of ['max-bundle', 'max-compat']) it(`webrtcbin (bundle-policy ${policy}) plays live/demo over WHEP and decodes H264 and Opus`, { timeout: 60_000 }, async () => {
    // max-bundle offers the audio section as port 0 with a=bundle-only (RFC 8843 §6):
    // tern's answer takes it into the BUNDLE group, so audio plays too.
    const view = gst(['view', `${server.base}/live/demo/whep`, '12', policy]);
    // Mid-run, the server's snapshot of this viewer: which profile did OpenSSL agree to?
    let profiles = [];
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline) {
      profiles = await snapshotProfiles(server.base, 'live/demo');
      if (profiles.some((x) => x)) break;
      await sleep(250);
    }
    assert.equal(await view.done, 0, view.output());
    const v = view.result();
    console.log(`GStreamer viewer of live/demo: ${JSON.stringify(v)}; tern's snapshot srtp: ${JSON.stringify(profiles)}`);
    const why = `${JSON.stringify(v)}\n${view.output()}\n--- server ---\n${server.tail()}`;
    assert.equal(v.status, 201, why);
    assert.equal(v.state, 'connected', why);
    assert.equal(v.key, 'rsaEncryption 2048', why);
    assert.ok(v.frames_decoded >= 200, `200 frames decoded in 12 s: ${why}`);
    assert.ok(v.longest_gap_ms < 1000, `no second without a frame: ${why}`);
    assert.ok(v.audio_buffers >= 300, `Opus decoded (20 ms buffers): ${why}`);
    assert.equal(v.delete, 200, why);
    assert.equal(profiles.length, 1, why);
    assert.ok(['SRTP_AEAD_AES_128_GCM', 'SRTP_AEAD_AES_256_GCM', 'SRTP_AES128_CM_SHA1_80'].includes(profiles[0]), `${profiles}: ${why}`);
  });
});

// Forwards (restreaming) of a WHIP publisher: headless Chromium publishes a canvas in H264
// and a WebAudio tone in Opus over WHIP to live/cam; a forward to nginx with Debian's RTMP
// module (the reference RTMP server, as in crates/tern/tests/e2e/forward.rs) is added
// through the API. Once GET /v1/forwards says it is live, ffmpeg pulls 6 s back from nginx,
// the publisher halving its resolution 3 s in: ffprobe finds H264 video at both widths and
// AAC audio (Opus encoded to AAC by tern), 6 s of it, and ffmpeg decodes it without an
// error. The forward is then deleted (204) and the list is
// empty again. A second Chromium publisher sends VP8 to live/vp8cam: a forward of it fails
// (state "failed", last_error naming VP8 and H264) while a WHEP viewer (the player page)
// still plays the stream, and the forward is deleted (204).
//
// Run inside a private network namespace: ./scripts/netns-run.sh node --test tests/browser/forward.test.mjs

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { launchBrowser, newLoggedPage, publishCanvas, readVideo } from './browser.mjs';
import { freeTcpPort, startServer } from './server.mjs';

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

/** Runs a command with a deadline (SIGKILL after timeoutMs): { code, signal, stdout, stderr, timedOut }. */
function run(cmd, args, timeoutMs) {
  return new Promise((ok) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    child.stdout.on('data', (d) => {
      stdout += d;
    });
    child.stderr.on('data', (d) => {
      stderr = (stderr + d).slice(-8000);
    });
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    child.once('error', (err) => {
      clearTimeout(timer);
      ok({ code: null, signal: null, stdout, stderr: `${stderr}\n${err.message}`, timedOut });
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      ok({ code, signal, stdout, stderr, timedOut });
    });
  });
}

/** Whether something accepts TCP connections on 127.0.0.1:port (≤ 1 s). */
function listening(port) {
  return new Promise((ok) => {
    const s = connect({ host: '127.0.0.1', port });
    const done = (v) => {
      s.destroy();
      ok(v);
    };
    s.setTimeout(1000, () => done(false));
    s.once('connect', () => done(true));
    s.once('error', () => done(false));
  });
}

/**
 * nginx with the RTMP module on 127.0.0.1:port (`application live` takes and plays any
 * stream; a player joining starts at a keyframe, `wait_key`, as players are served in
 * production: without it the pull may begin mid-GOP and its first frames decode with
 * errors that are not the forward's), its prefix, pid and error log in `dir`. Resolves once
 * it listens (≤ 10 s).
 */
async function startNginxRtmp(port, dir) {
  const conf = join(dir, 'nginx.conf');
  await writeFile(
    conf,
    'load_module /usr/lib/nginx/modules/ngx_rtmp_module.so;\n' +
      `daemon off;\nmaster_process off;\npid ${dir}/nginx.pid;\nerror_log ${dir}/error.log;\n` +
      'events { worker_connections 64; }\n' +
      `rtmp {\n  server {\n    listen 127.0.0.1:${port};\n    chunk_size 4096;\n` +
      '    application live {\n      live on;\n      record off;\n      wait_key on;\n      wait_video on;\n    }\n  }\n}\n',
  );
  const child = spawn('nginx', ['-p', dir, '-c', conf], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => {
    stderr = (stderr + d).slice(-4000);
  });
  let exit = null;
  const exited = new Promise((ok) => {
    child.once('exit', (code, signal) => ok((exit = { code, signal })));
    child.once('error', (err) => ok((exit = { error: err.message })));
  });
  const errorLog = async () => `${stderr}\n${await readFile(join(dir, 'error.log'), 'utf8').catch(() => '')}`;
  const nginx = {
    port,
    url: (key) => `rtmp://127.0.0.1:${port}/live/${key}`,
    errorLog,
    /** SIGTERM, SIGKILL after 3 s. */
    async stop() {
      if (exit) return;
      child.kill('SIGTERM');
      if ((await Promise.race([exited, sleep(3000).then(() => 'timeout')])) === 'timeout') {
        child.kill('SIGKILL');
        await exited;
      }
    },
  };
  const deadline = Date.now() + 10_000;
  while (!(await listening(port))) {
    if (exit || Date.now() > deadline) {
      await nginx.stop();
      throw new Error(
        `nginx-rtmp did not listen on 127.0.0.1:${port} (${JSON.stringify(exit)}; scripts/install-deps.sh installs ` +
          `nginx-light and libnginx-mod-rtmp):\n${await errorLog()}`,
      );
    }
    await sleep(50);
  }
  return nginx;
}

/** GET /v1/forwards. */
async function forwards(base) {
  const r = await fetch(`${base}/v1/forwards`, { signal: AbortSignal.timeout(5_000) });
  const text = await r.text();
  assert.equal(r.status, 200, text);
  return JSON.parse(text);
}

describe('forwards of a WHIP publisher', { timeout: 120_000 }, () => {
  let dir;
  let nginx;
  let server;
  let browser;
  const pages = [];

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tern-forward-'));
    nginx = await startNginxRtmp(await freeTcpPort(), dir);
    const config = join(dir, 'tern.toml');
    await writeFile(config, '[[app]]\nname = "live"\nstreams = ["cam"]\n');
    server = await startServer({ readyTimeoutMs: 20_000, extraArgs: ['--config', config] });
    browser = await launchBrowser();
  }, { timeout: 60_000 });

  after(async () => {
    for (const pg of pages) await pg.page.close().catch(() => {});
    await browser?.close();
    await server?.stop();
    await nginx?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('a Chromium WHIP publisher is forwarded to nginx-rtmp, H264 + AAC', { timeout: 90_000 }, async () => {
    const pub = await newLoggedPage(browser.context);
    const why = async () =>
      `\n--- publisher ---\n${pub.log()}\n--- server ---\n${server.tail()}\n--- nginx ---\n${await nginx.errorLog()}`;
    await pub.page.goto(`${server.base}/`);
    const p = await pub.page.evaluate(publishCanvas, { endpoint: `${server.base}/live/cam/whip`, codec: 'H264', tone: true });
    assert.equal(p.error, undefined, `${JSON.stringify(p)}${await why()}`);
    assert.deepEqual(p.answered, ['H264'], JSON.stringify(p));
    assert.ok(p.audio.includes('opus'), JSON.stringify(p));
    const state = await pub.page
      .waitForFunction(() => window.pubPc.connectionState === 'connected', null, { polling: 100, timeout: 10_000 })
      .then(() => 'connected', () => pub.page.evaluate(() => window.pubPc.connectionState));
    assert.equal(state, 'connected', await why());

    // Forwarded through the API; the stream may take a moment to be known as live.
    const key = 'fwdkey';
    let created;
    const deadline = Date.now() + 10_000;
    for (;;) {
      const r = await fetch(`${server.base}/v1/streams/live/cam/forwards`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ url: nginx.url(key) }),
        signal: AbortSignal.timeout(5_000),
      });
      const text = await r.text();
      if (r.status === 201) {
        created = JSON.parse(text);
        break;
      }
      assert.ok(Date.now() < deadline && (r.status === 404 || r.status === 409), `POST forward: ${r.status} ${text}${await why()}`);
      await sleep(200);
    }
    console.log(`forward created: ${JSON.stringify(created)}`);
    assert.equal(typeof created.id, 'string', JSON.stringify(created));
    assert.equal(created.url, `rtmp://127.0.0.1:${nginx.port}/live/***`, 'the key is hidden');

    let live = null;
    let list = [];
    const liveBy = Date.now() + 20_000;
    while (!live && Date.now() < liveBy) {
      list = await forwards(server.base);
      live = list.find((f) => f.id === created.id && f.state === 'live') ?? null;
      if (!live) await sleep(200);
    }
    assert.ok(live, `not live within 20 s: ${JSON.stringify(list)}${await why()}`);
    assert.equal(live.app, 'live', JSON.stringify(live));
    assert.equal(live.stream, 'cam', JSON.stringify(live));
    assert.equal(live.origin, 'api', JSON.stringify(live));

    // 6 s pulled back from nginx, copied into FLV. The publisher's resolution changes
    // mid-stream (below; Chromium also lowers it by itself under load), and the forward
    // sends the new parameter sets as a new AVC sequence header, as RTMP carries them.
    // Matroska keeps only the first ones: copied into it, the frames after a change decoded
    // at the old size (CI, when Chromium went to 480 wide: "top block unavailable for
    // requested intra mode ... MB 30 0"; here, with Matroska, every frame came out 640
    // wide). FLV keeps the change where it happens.
    const out = join(dir, 'pulled.flv');
    const t0 = performance.now();
    const pulling = run(
      'ffmpeg',
      ['-hide_banner', '-nostdin', '-v', 'error', '-y', '-rw_timeout', '10000000', '-i', nginx.url(key), '-t', '6', '-c', 'copy', out],
      30_000,
    );
    // Halfway, the publisher halves its resolution (as Chromium does by itself under load):
    // the forward must carry the new parameter sets.
    await sleep(3_000);
    const scaled = await pub.page.evaluate(async () => {
      const sender = window.pubPc.getSenders().find((x) => x.track?.kind === 'video');
      const params = sender.getParameters();
      params.encodings[0].scaleResolutionDownBy = 2;
      await sender.setParameters(params);
      return sender.getParameters().encodings[0].scaleResolutionDownBy;
    });
    assert.equal(scaled, 2, 'the publisher takes scaleResolutionDownBy');
    const pull = await pulling;
    console.log(`ffmpeg pulled in ${Math.round(performance.now() - t0)} ms`);
    assert.ok(pull.code === 0 && !pull.timedOut, `ffmpeg pull: ${JSON.stringify({ ...pull, stdout: undefined })}${await why()}`);

    // Both sizes are in the file, each frame decoded at its own.
    const sized = await run('ffprobe', ['-v', 'error', '-select_streams', 'v:0', '-show_entries', 'frame=width', '-of', 'csv=p=0', out], 30_000);
    assert.equal(sized.code, 0, sized.stderr);
    const widths = [...new Set(sized.stdout.split('\n').map((l) => l.trim()).filter(Boolean))];
    console.log(`frame widths: ${widths.join(', ')}`);
    assert.ok(widths.length >= 2, `one frame width in the pulled file: ${widths}`);
    const probe = await run('ffprobe', ['-v', 'error', '-of', 'json', '-show_streams', '-show_entries', 'format=duration', out], 15_000);
    assert.equal(probe.code, 0, probe.stderr);
    const info = JSON.parse(probe.stdout);
    const streams = info.streams.map((s) => `${s.codec_type} ${s.codec_name}`);
    const duration = Number(info.format?.duration);
    console.log(`ffprobe: ${streams.join(', ')}; ${duration} s`);
    assert.ok(streams.includes('video h264'), `no H264 video: ${probe.stdout}`);
    assert.ok(streams.includes('audio aac'), `no AAC audio: ${probe.stdout}`);
    assert.ok(Math.abs(duration - 6) <= 1, `duration ${duration} s, not 6 ± 1: ${probe.stdout}`);
    // Frames keep their own times (`-enc_time_base -1 -fps_mode passthrough`): Chromium's
    // canvas frames come at uneven times (15-17 ms apart at times, 30 fps on average), and
    // the null muxer's default 1/30 s clock put two of them on one tick ("non monotonically
    // increasing dts to muxer ... 163 >= 163", twice in CI; the file's own times rise, as
    // ffprobe shows).
    const decode = await run('ffmpeg', ['-hide_banner', '-nostdin', '-v', 'error', '-i', out, '-enc_time_base', '-1', '-fps_mode', 'passthrough', '-f', 'null', '-'], 30_000);
    assert.equal(decode.code, 0, decode.stderr);
    assert.equal(decode.stderr.trim(), '', `decode errors:\n${decode.stderr}`);

    const del = await fetch(`${server.base}/v1/streams/live/cam/forwards/${created.id}`, { method: 'DELETE' });
    assert.equal(del.status, 204, await del.text());
    assert.deepEqual(await forwards(server.base), []);

    await pub.page.evaluate(async () => {
      clearInterval(window.drawTimer);
      await fetch(window.whipLocation, { method: 'DELETE' });
      window.pubPc.close();
    });
  });

  it('a forward of a VP8 WHIP publisher fails, naming VP8 and H264; WebRTC plays on', { timeout: 60_000 }, async () => {
    const pub = await newLoggedPage(browser.context);
    pages.push(pub);
    const view = await newLoggedPage(browser.context);
    pages.push(view);
    const why = async () =>
      `\n--- publisher ---\n${pub.log()}\n--- viewer ---\n${view.log()}\n--- server ---\n${server.tail()}` +
      `\n--- nginx ---\n${await nginx.errorLog()}`;
    await pub.page.goto(`${server.base}/`);
    const p = await pub.page.evaluate(publishCanvas, { endpoint: `${server.base}/live/vp8cam/whip`, codec: 'VP8', tone: true });
    assert.equal(p.error, undefined, `${JSON.stringify(p)}${await why()}`);
    assert.deepEqual(p.answered, ['VP8'], JSON.stringify(p));
    const state = await pub.page
      .waitForFunction(() => window.pubPc.connectionState === 'connected', null, { polling: 100, timeout: 10_000 })
      .then(() => 'connected', () => pub.page.evaluate(() => window.pubPc.connectionState));
    assert.equal(state, 'connected', await why());

    let created;
    const deadline = Date.now() + 10_000;
    for (;;) {
      const r = await fetch(`${server.base}/v1/streams/live/vp8cam/forwards`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ url: nginx.url('vp8key') }),
        signal: AbortSignal.timeout(5_000),
      });
      const text = await r.text();
      if (r.status === 201) {
        created = JSON.parse(text);
        break;
      }
      assert.ok(Date.now() < deadline && (r.status === 404 || r.status === 409), `POST forward: ${r.status} ${text}${await why()}`);
      await sleep(200);
    }
    console.log(`VP8 forward created: ${JSON.stringify(created)}`);
    assert.equal(typeof created.id, 'string', JSON.stringify(created));

    // Within 10 s the forward is failed, with the reason.
    let failed = null;
    let list = [];
    const failedBy = Date.now() + 10_000;
    while (!failed && Date.now() < failedBy) {
      list = await forwards(server.base);
      failed = list.find((f) => f.id === created.id && f.state === 'failed') ?? null;
      if (!failed) await sleep(200);
    }
    assert.ok(failed, `not failed within 10 s: ${JSON.stringify(list)}${await why()}`);
    console.log(`VP8 forward: ${JSON.stringify(failed)}`);
    assert.equal(failed.stream, 'vp8cam', JSON.stringify(failed));
    assert.equal(typeof failed.last_error, 'string', JSON.stringify(failed));
    assert.match(failed.last_error, /VP8/, JSON.stringify(failed));
    assert.match(failed.last_error, /forwards carry H264/, JSON.stringify(failed));

    // The WebRTC side is unaffected: the publisher is connected and a WHEP viewer plays VP8.
    assert.equal(await pub.page.evaluate(() => window.pubPc.connectionState), 'connected', await why());
    await view.page.goto(`${server.base}/live/vp8cam`, { timeout: 10_000, waitUntil: 'domcontentloaded' });
    let v = {};
    const playBy = Date.now() + 15_000;
    while (!((v.framesDecoded ?? 0) > 30) && Date.now() < playBy) {
      await sleep(250);
      v = await view.page.evaluate(readVideo);
    }
    console.log(`WHEP viewer: ${JSON.stringify(v)}`);
    assert.ok((v.framesDecoded ?? 0) > 30, `the viewer did not play within 15 s: ${JSON.stringify(v)}${await why()}`);

    const del = await fetch(`${server.base}/v1/streams/live/vp8cam/forwards/${created.id}`, {
      method: 'DELETE',
      signal: AbortSignal.timeout(5_000),
    });
    assert.equal(del.status, 204, await del.text());
    list = await forwards(server.base);
    assert.ok(!list.some((f) => f.id === created.id), `still listed: ${JSON.stringify(list)}`);

    await pub.page.evaluate(async () => {
      clearInterval(window.drawTimer);
      await fetch(window.whipLocation, { method: 'DELETE' });
      window.pubPc.close();
    });
  });
});

// Changing a running server (issue 53): three pion viewers and an RTMP encoder (ffmpeg) on
// app `live` across ten reloads, mixed (the file edited and picked up by the watcher, the
// file edited and SIGHUP, the configuration API), each adding or changing another app. The
// viewers lose no packet and never reconnect (the same three sessions, frames all along), the
// encoder keeps its one publisher session, and every reload is counted.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { longestStall, startClient } from './clients.mjs';
import { freeTcpPort, publishRtmp, rtmpPushArgs, startServer } from './server.mjs';

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

const HEAD = '# reload test: the app the viewers watch\n[server]\nwatch_config = true\n\n' +
  '[[app]]\nname = "live" # the encoder pushes here\nstreams = ["cam"]\n';

describe('reload: viewers and an encoder across ten reloads', { timeout: 150_000 }, () => {
  let dir;
  let config;
  let server;
  let rtmpPort;
  let push;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tern-reload-'));
    config = join(dir, 'tern.toml');
    await writeFile(config, HEAD);
    rtmpPort = await freeTcpPort();
    server = await startServer({ extraArgs: ['--config', config, '--rtmp', `127.0.0.1:${rtmpPort}`] });
  }, { timeout: 60_000 });

  after(async () => {
    push?.proc.kill('SIGKILL');
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const json = async (path, init) => {
    const r = await fetch(`${server.base}${path}`, init);
    const text = await r.text();
    return { status: r.status, body: text ? JSON.parse(text) : null };
  };
  const appNames = async () => (await json('/v1/config')).body.app.map((a) => a.name);
  const reloadsApplied = async () => {
    const text = await (await fetch(`${server.base}/metrics`)).text();
    return Number(/tern_config_reloads_total\{result="applied"\} (\d+)/.exec(text)?.[1] ?? -1);
  };
  const viewerIds = async () =>
    (await json('/v1/streams/live/cam/viewers')).body.map((v) => v.identity.id).sort();

  it('0 packets lost, no viewer reconnects, one publisher session', { timeout: 140_000 }, async (t) => {
    push = await publishRtmp(server, 'live/cam', rtmpPushArgs(`rtmp://127.0.0.1:${rtmpPort}/live/cam`, 70));
    const whep = `${server.base}/live/cam/whep`;
    const pion = [0, 1, 2].map(() => startClient('pion', whep, 60));
    const t0 = Date.now();
    while ((await viewerIds()).length < 3) {
      assert.ok(Date.now() - t0 < 15_000, `3 viewers not connected:\n${server.tail()}`);
      await sleep(200);
    }
    const ids = await viewerIds();
    const publisher = (await json('/v1/streams/live/cam/publisher')).body?.identity?.id;
    assert.ok(publisher !== undefined, 'the encoder has a publisher session');
    await sleep(3_000);

    let text = HEAD;
    const kinds = [];
    for (let i = 0; i < 10; i++) {
      const kind = ['file', 'signal', 'api'][i % 3];
      const name = `a${i}`;
      const started = Date.now();
      if (kind === 'api') {
        // A new app through the API; the odd ones change the app before it too.
        const r = await json(`/v1/config/apps/${name}`, {
          method: 'PUT',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ streams: ['x'], idle_grace_s: 5 + i }),
        });
        assert.equal(r.status, 201, JSON.stringify(r.body));
        text = await readFile(config, 'utf8');
      } else {
        // The previous app changed (no more publisher-made streams), and a new one.
        if (i > 0) text = text.replace(`name = "a${i - 1}"\n`, `name = "a${i - 1}"\ndynamic = false\n`);
        text += `\n# app ${name}\n[[app]]\nname = "${name}"\n`;
        await writeFile(config, text);
        if (kind === 'signal') server.child.kill('SIGHUP');
      }
      while (!(await appNames()).includes(name)) {
        assert.ok(Date.now() - started < 2_000, `reload ${i} (${kind}) not in force within 2 s\n${server.tail()}`);
        await sleep(50);
      }
      kinds.push(`${kind} ${Date.now() - started} ms`);
      await sleep(2_500);
    }
    t.diagnostic(`reloads: ${kinds.join(', ')}`);
    const applied = await reloadsApplied();
    assert.ok(applied >= 10, `tern_config_reloads_total{result="applied"} = ${applied}`);
    const file = await readFile(config, 'utf8');
    assert.ok(file.includes('# the encoder pushes here') && file.includes('# app a0'), `comments lost:\n${file}`);

    await sleep(3_000);
    const lines = pion.map((c) => c.lines.slice());
    const after = await viewerIds();
    const publisherAfter = (await json('/v1/streams/live/cam/publisher')).body?.identity?.id;
    await Promise.all(pion.map((c) => c.stop()));
    assert.deepEqual(after, ids, 'the same three viewer sessions throughout');
    assert.equal(publisherAfter, publisher, 'the same publisher session');
    for (const [i, ls] of lines.entries()) {
      const last = ls.at(-1);
      const stall = longestStall(ls.filter((l) => l.ms > 3_000).map((l) => ({ t: l.ms, frames: l.frames })));
      t.diagnostic(`pion ${i}: ${last.frames} frames, ${last.video_packets} video packets, lost ${last.lost}, longest stall ${stall} ms`);
      assert.equal(last.lost, 0, `pion ${i} lost packets: ${JSON.stringify(last)}`);
      assert.ok(stall < 1_000, `pion ${i} went ${stall} ms without a frame`);
      assert.ok(last.frames > 30 * 30, `pion ${i}: ${last.frames} frames`);
    }
  });
});

// Interop with aiortc (pip, a Python WebRTC stack tern's authors did not write): aiortc
// publishes over WHIP (H264, then VP8) a 640x360 30 fps file with audio, and an aiortc viewer
// watches over WHEP, joining mid-stream; and an aiortc viewer of the built-in clip. Each case
// asserts the codec answered, frames decoded, the longest gap between decoded frames (a
// freeze) and packets lost, from aiortc's own receiver.
//
// Run inside a private network namespace: ./scripts/netns-run.sh node --test tests/browser/

import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { startServer } from './server.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const PY = join(here, '..', 'interop', '.venv', 'bin', 'python');
const CLIENT = join(here, '..', 'interop', 'aiortc_client.py');
const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

/** Runs the aiortc client; resolves with its JSON lines and its output. */
function aiortc(args) {
  const child = spawn(PY, [CLIENT, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d) => { out += d; });
  child.stderr.on('data', (d) => { out += d; });
  const done = new Promise((ok) => child.once('exit', (code) => ok(code)));
  const lines = () => out.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));
  return { child, done, lines, output: () => out };
}

describe('aiortc 1.16 as WHIP publisher and WHEP viewer', { timeout: 240_000 }, () => {
  let dir;
  let server;
  let media;

  before(async () => {
    assert.ok(existsSync(PY), `no aiortc venv at ${PY}: run scripts/install-deps.sh`);
    dir = await mkdtemp(join(tmpdir(), 'tern-interop-'));
    media = join(dir, 'clip.mp4');
    const made = spawnSync('ffmpeg', [
      '-v', 'error', '-y', '-f', 'lavfi', '-i', 'testsrc2=size=640x360:rate=30',
      '-f', 'lavfi', '-i', 'sine=frequency=440:sample_rate=48000', '-t', '40',
      '-c:v', 'libx264', '-pix_fmt', 'yuv420p', '-g', '30', '-c:a', 'aac', media,
    ]);
    assert.equal(made.status, 0, `ffmpeg made the clip: ${made.stderr}`);
    const config = join(dir, 'tern.toml');
    await writeFile(config, '[[app]]\nname = "live"\nstreams = ["aio-h264", "aio-vp8"]\n');
    server = await startServer({ readyTimeoutMs: 20_000, extraArgs: ['--config', config] });
  }, { timeout: 60_000 });

  after(async () => {
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const checkViewer = (v, codec, why) => {
    console.log(`aiortc viewer (${codec}): ${JSON.stringify(v)}`);
    assert.equal(v.status, 201, why);
    assert.equal(v.codec, codec, why);
    assert.ok(v.frames_decoded >= 250, `at least 250 frames decoded in 10 s: ${why}`);
    assert.ok(v.longest_gap_ms < 500, `no gap of 500 ms between frames: ${why}`);
    assert.equal(v.packets_lost, 0, `no packet lost: ${why}`);
    assert.ok(v.audio_frames >= 400, `audio decoded too (20 ms frames): ${why}`);
    assert.equal(v.delete, 200, why);
  };

  for (const codec of ['H264', 'VP8']) {
    it(`aiortc publishes ${codec} over WHIP, an aiortc viewer watches over WHEP`, { timeout: 90_000 }, async () => {
      const stream = `${server.base}/live/aio-${codec.toLowerCase()}`;
      const pub = aiortc(['publish', `${stream}/whip`, '22', media, codec]);
      try {
        const deadline = Date.now() + 15_000;
        while (!server.output().includes(`live/aio-${codec.toLowerCase()} is live`)) {
          assert.ok(Date.now() < deadline, `not live\n${pub.output()}\n${server.tail()}`);
          await sleep(100);
        }
        await sleep(3000);
        const view = aiortc(['view', `${stream}/whep`, '10']);
        assert.equal(await view.done, 0, view.output());
        const [v] = view.lines();
        checkViewer(v, codec, `${JSON.stringify(v)}\n${view.output()}\n--- publisher ---\n${pub.output()}\n--- server ---\n${server.tail()}`);
        assert.equal(await pub.done, 0, pub.output());
        const p = pub.lines().find((l) => l.status !== undefined);
        console.log(`aiortc publisher (${codec}): ${JSON.stringify(p)}`);
        assert.equal(p.status, 201, pub.output());
        assert.equal(p.codec, codec, pub.output());
        assert.equal(p.delete, 200, pub.output());
      } finally {
        pub.child.kill('SIGKILL');
      }
    });
  }

  it('an aiortc viewer of the built-in clip', { timeout: 60_000 }, async () => {
    const view = aiortc(['view', `${server.base}/live/demo/whep`, '10']);
    assert.equal(await view.done, 0, view.output());
    const [v] = view.lines();
    checkViewer(v, 'H264', `${JSON.stringify(v)}\n${view.output()}\n--- server ---\n${server.tail()}`);
  });
});

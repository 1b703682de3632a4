// LL-HLS and recordings take the same codecs (issue 51): both packagers are fed through
// tern-rtc's package::Feed, whose depacketizer is chosen from the stream's video codec by
// one table (tern_rtc::codecs: H264, VP8, VP9, H265). GStreamer's webrtcbin publishes the same
// picture and Opus over WHIP in VP8, then in H265 (issue 54: packaged as hvc1); for each, the
// test asks both surfaces: LL-HLS's playlist (200 with the codec in its CODECS) and a
// recording through the API (201 and a file whose tracks ffprobe reads). TABLE below says
// what each takes; both must answer it alike. A codec outside the table (AV1, which this
// GStreamer cannot encode) is refused by both with one reason: tern-server's
// tap::tests::refusal_names_the_table_and_the_streams_codec.
//
// Run inside a private network namespace: ./scripts/netns-run.sh node --test tests/browser/

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { GST_PYTHON as PY, gst } from './clients.mjs';
import { startServer } from './server.mjs';

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

// What LL-HLS and recordings take, per publisher codec: the same for both.
const TABLE = [
  { codec: 'vp8', sdp: 'VP8', packaged: true, hlsCodecs: 'vp08', ffprobe: ['opus', 'vp8'] },
  { codec: 'h265', sdp: 'H265', packaged: true, hlsCodecs: 'hvc1.1.', ffprobe: ['hevc', 'opus'] },
];


describe('LL-HLS and recordings take the codecs of one table', { timeout: 240_000 }, () => {
  let dir;
  let server;

  before(async () => {
    assert.ok(existsSync(PY), `no ${PY}: run scripts/install-deps.sh`);
    dir = await mkdtemp(join(tmpdir(), 'tern-packaging-'));
    const config = join(dir, 'tern.toml');
    await writeFile(
      config,
      `[[app]]\nname = "live"\nstreams = ["vp8", "h265"]\n[app.record]\npath = "${dir}/rec/%stream-%Y%m%d-%H%M%S"\n`,
    );
    // On the namespace's veth address: libnice leaves loopback out of its candidates.
    server = await startServer({ readyTimeoutMs: 20_000, host: '198.18.0.1', extraArgs: ['--config', config] });
  }, { timeout: 60_000 });

  after(async () => {
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  for (const c of TABLE) it(`${c.sdp}: LL-HLS and a recording both ${c.packaged ? 'take' : 'refuse'} it`, { timeout: 100_000 }, async () => {
    const stream = `${server.base}/live/${c.codec}`;
    const pub = gst(['publish', `${stream}/whip`, '30', c.codec]);
    const why = () => `\n--- gst ---\n${pub.output()}\n--- server ---\n${server.tail()}`;
    // Live once WHEP's probe says so.
    let live = false;
    for (let i = 0; i < 150 && !live; i++) {
      live = (await fetch(`${stream}/whep`, { method: 'HEAD' })).status === 200;
      if (!live) await sleep(100);
    }
    assert.ok(live, `not live${why()}`);
    const info = await (await fetch(`${server.base}/v1/streams/live/${c.codec}`)).json();
    assert.equal(info.video?.codec ?? info.state?.video?.codec, c.sdp, `${JSON.stringify(info)}${why()}`);

    const hls = await fetch(`${stream}/index.m3u8`);
    const hlsText = await hls.text();
    const rec = await fetch(`${server.base}/v1/streams/live/${c.codec}/recordings`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ id: 'table' }),
    });
    const recText = await rec.text();
    console.log(`${c.sdp}: LL-HLS ${hls.status}, recording ${rec.status}`);
    if (!c.packaged) {
      assert.equal(hls.status, 409, hlsText);
      assert.equal(rec.status, 409, recText);
      // One reason, from one table, in both answers.
      for (const text of [hlsText, recText]) {
        assert.match(text, /package H264, VP8, VP9, H265 video/, text);
        assert.match(text, new RegExp(`video is ${c.sdp}`), text);
      }
      pub.child.kill('SIGINT');
      await pub.done;
      return;
    }
    assert.equal(hls.status, 200, `${hlsText}${why()}`);
    assert.equal(rec.status, 201, `${recText}${why()}`);
    // The playlist names the codec once the packager's init segment exists.
    let codecs = null;
    for (let i = 0; i < 100 && !codecs; i++) {
      const text = await (await fetch(`${stream}/index.m3u8`)).text();
      codecs = text.match(/CODECS="([^"]+)"/)?.[1] ?? null;
      if (!codecs) await sleep(200);
    }
    assert.ok(codecs?.startsWith(c.hlsCodecs), `CODECS ${codecs}${why()}`);
    await sleep(8_000);
    const del = await fetch(`${server.base}/v1/streams/live/${c.codec}/recordings/table`, { method: 'DELETE' });
    assert.equal(del.status, 204);
    let files = [];
    for (let i = 0; i < 50 && files.length === 0; i++) {
      files = await (await fetch(`${server.base}/v1/recordings?app=live&stream=${c.codec}`)).json();
      if (files.length === 0) await sleep(200);
    }
    assert.equal(files.length, 1, `${JSON.stringify(files)}${why()}`);
    assert.ok(files[0].codecs.startsWith(c.hlsCodecs), JSON.stringify(files[0]));
    const probe = JSON.parse(
      execFileSync('ffprobe', ['-v', 'error', '-show_entries', 'stream=codec_name', '-of', 'json', files[0].path]).toString(),
    );
    assert.deepEqual(probe.streams.map((s) => s.codec_name).sort(), c.ffprobe, JSON.stringify(probe));
    pub.child.kill('SIGINT');
    await pub.done;
  });
});

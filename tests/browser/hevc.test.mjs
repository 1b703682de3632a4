// H265 into LL-HLS and recordings (issue 54): an SRT contribution (ffmpeg's libx265 in
// MPEG-TS with AAC) and a WHIP publisher (tern's own client, `tern bench --publish 1
// --publish-clip FILE`, sending an H265 MP4 that ffmpeg made, with Opus). For each: the
// multivariant playlist names hvc1; every variant's media playlist (and the audio
// rendition's, if any) keeps the rules of hls-validate.mjs; ffmpeg decodes 5 s of the
// variant as HEVC at the source's size, at 30 fps; a recording of about 8 s has its hevc
// track with at least 29 frames a second (ffprobe -count_frames). The WHIP run also has a
// WHEP viewer (tern bench's, offering every codec) that is answered in H265.
//
// No browser: Node drives ffmpeg, tern bench and tern. Run inside a private network
// namespace: ./scripts/netns-run.sh node --test tests/browser/

import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { decode } from './clients.mjs';
import { checkMedia, parseMedia, parseMultivariant } from './hls-validate.mjs';
import { listenAddress, publishRtmp, startServer, ternBin } from './server.mjs';

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

/** The x265 settings both sources use: no B-frames (WebRTC has none), a keyframe a second. */
const X265 = ['-c:v', 'libx265', '-preset', 'ultrafast', '-pix_fmt', 'yuv420p',
  '-x265-params', 'bframes=0:keyint=30:min-keyint=30:scenecut=0:log-level=error'];

describe('H265 over SRT and over WHIP: LL-HLS as hvc1 and recorded', { timeout: 200_000 }, () => {
  let dir;
  let server;
  let srt;
  let clip;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tern-hevc-'));
    // tern bench's WHIP publisher loops an MP4: 6 s of a 640x360 pattern and a tone.
    clip = join(dir, 'clip.mp4');
    execFileSync('ffmpeg', ['-v', 'error', '-nostdin', '-y',
      '-f', 'lavfi', '-i', 'testsrc2=size=640x360:rate=30',
      '-f', 'lavfi', '-i', 'sine=frequency=440:sample_rate=48000',
      '-t', '6', ...X265, '-tag:v', 'hvc1', '-c:a', 'libopus', '-b:a', '64k', clip]);
    const config = join(dir, 'tern.toml');
    await writeFile(config, `[[app]]\nname = "live"\n[app.record]\npath = "${dir}/rec/%stream-%Y%m%d-%H%M%S"\n`);
    server = await startServer({
      readyTimeoutMs: 20_000,
      extraArgs: ['--config', config, '--rtmp', 'none', '--srt', '127.0.0.1:0'],
    });
    // Port 0: the port the kernel chose.
    srt = await listenAddress(server, 'srt');
    assert.ok(srt, `no SRT address in\n${server.tail()}`);
  }, { timeout: 60_000 });

  after(async () => {
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /**
   * The checks of one live H265 stream `name` (app live) of `width`x`height`: LL-HLS and a
   * recording. `why()` adds the publisher's log to a failure.
   */
  async function checkStream(name, width, height, why) {
    const stream = `${server.base}/live/${name}`;
    const rec = await fetch(`${server.base}/v1/streams/live/${name}/recordings`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ id: name }),
    });
    assert.equal(rec.status, 201, `recording: ${await rec.text()}${why()}`);
    const recordingFrom = Date.now();
    // The playlist names the codec once the init segment exists; ffmpeg's HLS reader wants
    // a whole segment in its first playlist.
    let mv = null;
    let text = '';
    let media = '';
    for (let i = 0; i < 75; i++) {
      text = await (await fetch(`${stream}/index.m3u8`)).text();
      mv = parseMultivariant(text);
      const v = mv.variants[0];
      if (v?.attrs.CODECS) {
        media = await (await fetch(`${stream}/${v.uri}`)).text();
        if (media.includes('#EXTINF')) break;
      }
      await sleep(200);
    }
    console.log(`${name}: ${text.trim().replace(/\n/g, ' | ')}`);
    assert.deepEqual(mv.problems, [], text);
    assert.equal(mv.variants.length, 1, text);
    const v = mv.variants[0];
    assert.match(v.attrs.CODECS ?? '', /^hvc1\.1\.6\.L\d+(\.[0-9A-F]+)*(,(mp4a\.40\.2|opus))?$/, `${text}${why()}`);
    assert.equal(v.attrs.RESOLUTION, `${width}x${height}`, text);
    assert.ok(media.includes('#EXTINF'), `no segment:\n${media}${why()}`);
    // Every media playlist keeps the validator's rules.
    const uris = [v.uri, ...mv.media.filter((m) => m.URI).map((m) => m.URI)];
    for (const uri of uris) {
      const body = await (await fetch(`${stream}/${uri}`)).text();
      const session = /session=([^&]+)/.exec(uri)?.[1];
      const problems = checkMedia(parseMedia(body), { session, partTarget: 0.5 });
      assert.deepEqual(problems, [], `${uri}:\n${body}`);
    }
    // ffmpeg reads the variant as HEVC at the source's size and decodes 5 s of it.
    const probe = JSON.parse(execFileSync('timeout', ['20', 'ffprobe', '-v', 'error', '-show_entries',
      'stream=codec_name,width,height', '-of', 'json', `${stream}/${v.uri}`]).toString());
    const video = probe.streams.find((s) => s.codec_name === 'hevc');
    assert.ok(video, `ffprobe finds no hevc in the variant: ${JSON.stringify(probe)}`);
    assert.equal(`${video.width}x${video.height}`, `${width}x${height}`);
    const d = await decode(`${stream}/${v.uri}`, 5);
    console.log(`${name}: ffmpeg decoded ${d.frames} HEVC frames of 5 s, exit ${d.code}`);
    assert.equal(d.code, 0, `ffmpeg: ${d.stderr}`);
    assert.equal(d.stderr, '', 'ffmpeg reported errors');
    assert.ok(d.frames >= 29 * 5, `ffmpeg decoded ${d.frames} frames of 5 s`);
    // The recording: stopped after about 8 s, its file has the video track at 30 fps.
    await sleep(Math.max(0, 8_000 - (Date.now() - recordingFrom)));
    const del = await fetch(`${server.base}/v1/streams/live/${name}/recordings/${name}`, { method: 'DELETE' });
    assert.equal(del.status, 204);
    let files = [];
    for (let i = 0; i < 50 && files.length === 0; i++) {
      files = await (await fetch(`${server.base}/v1/recordings?app=live&stream=${name}`)).json();
      if (files.length === 0) await sleep(200);
    }
    assert.equal(files.length, 1, JSON.stringify(files));
    assert.match(files[0].codecs, /^hvc1\./, JSON.stringify(files[0]));
    const file = JSON.parse(execFileSync('ffprobe', ['-v', 'error', '-count_frames', '-show_entries',
      'stream=codec_name,nb_read_frames,start_time,duration', '-show_entries', 'format=duration', '-of', 'json', files[0].path]).toString());
    const track = file.streams.find((s) => s.codec_name === 'hevc');
    const secs = Number(file.format.duration);
    console.log(`${name} recording: ${JSON.stringify(file.streams)}, ${secs} s`);
    assert.ok(track, `the recording has no hevc track: ${JSON.stringify(file)}`);
    assert.ok(secs >= 6, `a recording of ${secs} s`);
    // The frame rate over the video track's own span, which must cover the file but for the
    // audio's offset at the start (an SRT source's audio started 0.24-0.30 s after its video
    // in the file) and half a second more (CI once: video 7.03 s of a 7.64 s file whose
    // audio started 0.30 s in).
    const videoSecs = Number(track.duration);
    const audioStart = Math.max(0, ...file.streams.filter((s) => s !== track).map((s) => Number(s.start_time) || 0));
    assert.ok(videoSecs >= secs - audioStart - 0.5, `the video spans ${videoSecs} s of a ${secs} s recording (audio from ${audioStart} s)`);
    assert.ok(Number(track.nb_read_frames) >= 29 * videoSecs, `${track.nb_read_frames} HEVC frames in ${videoSecs} s`);
  }

  it('H265 and AAC over SRT (ffmpeg, MPEG-TS)', { timeout: 80_000 }, async () => {
    const ff = await publishRtmp(server, 'live/srt', [
      '-hide_banner', '-nostdin', '-loglevel', 'warning',
      '-re', '-f', 'lavfi', '-i', 'testsrc2=size=640x360:rate=30',
      '-re', '-f', 'lavfi', '-i', 'sine=frequency=440:sample_rate=48000',
      '-t', '40', ...X265, '-c:a', 'aac', '-f', 'mpegts', `srt://${srt}?streamid=live/srt`,
    ]);
    try {
      await checkStream('srt', 640, 360, () => `\n--- ffmpeg ---\n${ff.log()}\n--- server ---\n${server.tail()}`);
    } finally {
      ff.proc.kill('SIGKILL');
    }
  });

  it("H265 and Opus over WHIP from tern's own client (tern bench --publish-clip), and a WHEP viewer in H265", { timeout: 80_000 }, async () => {
    let out = '';
    const bench = spawn(ternBin(), ['bench', '-url', `${server.base}/live/whip/whep`, '--publish', '1',
      '--publish-clip', clip, '-n', '1', '--life', '30', '--all-video', '--details', 'true'],
    { stdio: ['ignore', 'pipe', 'pipe'] });
    bench.stdout.on('data', (c) => { out += c; });
    bench.stderr.on('data', (c) => { out += c; });
    const done = new Promise((ok) => bench.once('exit', (code) => ok(code)));
    const why = () => `\n--- tern bench ---\n${out.slice(-4000)}\n--- server ---\n${server.tail()}`;
    try {
      let live = false;
      for (let i = 0; i < 150 && !live; i++) {
        live = (await fetch(`${server.base}/live/whip/whep`, { method: 'HEAD' })).status === 200;
        if (!live) await sleep(100);
      }
      assert.ok(live, `not live${why()}`);
      const info = await (await fetch(`${server.base}/v1/streams/live/whip`)).json();
      assert.equal(info.video?.codec, 'H265', `${JSON.stringify(info)}${why()}`);
      await checkStream('whip', 640, 360, why);
      const code = await done;
      console.log(out.split('\n').filter((l) => /video_codec|Server check|Publishers/.test(l)).join('\n'));
      assert.equal(code, 0, `tern bench exit ${code}${why()}`);
      assert.match(out, /video_codec\(H265\)/, why());
      assert.match(out, /packet_loss\(0\)/, why());
    } finally {
      bench.kill('SIGKILL');
    }
  });
});

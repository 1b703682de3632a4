// Spawns `tern demo` on free loopback ports, waits until it answers HTTP, and stops it.
//
//   const server = await startServer();   // server.base = 'http://127.0.0.1:PORT'
//   ...
//   const { code, signal } = await server.stop();   // SIGTERM, SIGKILL after 5 s
//
// The binary is $TERN_BIN, else $CARGO_TARGET_DIR/release/tern, else target/release/tern
// at the repository root.

import { spawn } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

export function ternBin() {
  if (process.env.TERN_BIN) return resolve(process.env.TERN_BIN);
  const targetDir = process.env.CARGO_TARGET_DIR
    ? resolve(REPO, process.env.CARGO_TARGET_DIR)
    : join(REPO, 'target');
  return join(targetDir, 'release', 'tern');
}

/** A TCP port on 127.0.0.1 that was free a moment ago. */
export function freeTcpPort() {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once('error', fail);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });
}

/** A UDP port on 127.0.0.1 that was free a moment ago. */
export function freeUdpPort() {
  return new Promise((ok, fail) => {
    const s = createSocket('udp4');
    s.once('error', fail);
    s.bind(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Starts `tern demo --http 127.0.0.1:P --media 127.0.0.1:Q --candidate 127.0.0.1` (P a free
 * port, or `httpPort`; `host` in place of 127.0.0.1 when given) and resolves once `GET /` answers with any HTTP status. Rejects, with the tail of the server's
 * output, if the binary is missing, exits early, or does not answer within readyTimeoutMs.
 */
export async function startServer({ readyTimeoutMs = 20_000, extraArgs = [], httpPort: port, host = '127.0.0.1' } = {}) {
  const bin = ternBin();
  if (!existsSync(bin)) {
    throw new Error(`tern binary not found at ${bin}: run \`cargo build --release -p tern\` or set TERN_BIN`);
  }
  const httpPort = port ?? (await freeTcpPort());
  const mediaPort = await freeUdpPort();
  const base = `http://${host}:${httpPort}`;
  const args = [
    'demo',
    '--http', `${host}:${httpPort}`,
    '--media', `${host}:${mediaPort}`,
    '--candidate', host,
    ...extraArgs,
  ];
  const child = spawn(bin, args, {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { RUST_LOG: 'info', ...process.env },
  });
  let output = '';
  const keep = (chunk) => {
    output += chunk.toString();
    if (output.length > 64_000) output = output.slice(-32_000);
  };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  if (process.env.TERN_SERVER_LOG === '1') {
    child.stdout.pipe(process.stderr);
    child.stderr.pipe(process.stderr);
  }
  const exited = new Promise((ok) => {
    child.once('exit', (code, signal) => ok({ code, signal }));
    child.once('error', (err) => ok({ code: null, signal: null, error: err }));
  });
  let exitStatus = null;
  exited.then((s) => {
    exitStatus = s;
  });
  const tail = () => output.split('\n').slice(-40).join('\n');

  const server = {
    base,
    httpPort,
    mediaPort,
    child,
    output: () => output,
    tail,
    exited,
    /** SIGTERM; SIGKILL if still running after killAfterMs. Resolves { code, signal, killed }. */
    async stop({ killAfterMs = 5_000 } = {}) {
      if (exitStatus) return { ...exitStatus, killed: false };
      child.kill('SIGTERM');
      const timer = sleep(killAfterMs).then(() => 'timeout');
      const first = await Promise.race([exited, timer]);
      if (first !== 'timeout') return { ...first, killed: false };
      child.kill('SIGKILL');
      return { ...(await exited), killed: true };
    },
  };

  const deadline = Date.now() + readyTimeoutMs;
  let lastErr = null;
  while (Date.now() < deadline) {
    if (exitStatus) {
      const why = exitStatus.error ? exitStatus.error.message : `exit code ${exitStatus.code}, signal ${exitStatus.signal}`;
      throw new Error(`tern exited before answering HTTP (${why}); ${bin} ${args.join(' ')}\n--- output ---\n${tail()}`);
    }
    try {
      const res = await fetch(`${base}/`, { signal: AbortSignal.timeout(1_000) });
      await res.arrayBuffer();
      return server;
    } catch (err) {
      lastErr = err;
    }
    await sleep(100);
  }
  await server.stop();
  throw new Error(
    `tern did not answer GET ${base}/ within ${readyTimeoutMs} ms (last error: ${lastErr?.cause?.code ?? lastErr?.message})\n--- output ---\n${tail()}`,
  );
}

/**
 * The address `server` listens on for `name` (`srt`, `rtmp`, ...) from the line tern prints
 * once its listeners are up (`listening http=... srt=...`): with port 0, the port the kernel
 * chose. HTTP can answer before that line reaches us (a CI run read the log 660 ms in and
 * found only the first line), so it is waited for, `timeoutMs` at most. Resolves to the
 * address, or null when the line names none (`-`) or did not come.
 */
export async function listenAddress(server, name, timeoutMs = 10_000) {
  const re = new RegExp(`\\b${name}=(\\S+)`);
  for (const end = Date.now() + timeoutMs; Date.now() < end; await sleep(100)) {
    const addr = re.exec(server.output())?.[1];
    if (addr) return addr === '-' ? null : addr;
  }
  return null;
}

/**
 * Starts ffmpeg with `args` (an RTMP publisher) and waits (≤ timeoutMs) until `server` logs
 * `${live} is live`. Resolves to `{ proc, log }`, `log()` being the last 4,000 characters of
 * ffmpeg's stderr; rejects with both logs' tails if the stream does not go live (ffmpeg is
 * killed then).
 */
export async function publishRtmp(server, live, args, { timeoutMs = 15_000 } = {}) {
  const proc = spawn('ffmpeg', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let tail = '';
  proc.stderr.on('data', (d) => {
    tail = (tail + d.toString()).slice(-4000);
  });
  const log = () => tail;
  const deadline = Date.now() + timeoutMs;
  while (!server.output().includes(`${live} is live`)) {
    if (Date.now() > deadline) {
      proc.kill('SIGKILL');
      throw new Error(`${live} did not go live\n--- ffmpeg ---\n${log()}\n--- server ---\n${server.tail()}`);
    }
    await sleep(100);
  }
  return { proc, log };
}

/** ffmpeg's arguments for `seconds` of 320x240 30 fps H264 (baseline, a keyframe a second) +
 * AAC pushed to `url` (an `rtmp://` URL) in real time. */
export function rtmpPushArgs(url, seconds) {
  return [
    '-hide_banner', '-nostdin', '-loglevel', 'warning',
    '-re', '-f', 'lavfi', '-i', 'testsrc=size=320x240:rate=30',
    '-re', '-f', 'lavfi', '-i', 'sine=frequency=440:sample_rate=48000',
    '-t', String(seconds), '-c:v', 'libx264', '-profile:v', 'baseline', '-tune', 'zerolatency',
    '-pix_fmt', 'yuv420p', '-g', '30', '-c:a', 'aac', '-f', 'flv', url,
  ];
}

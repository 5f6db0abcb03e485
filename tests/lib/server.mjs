// server.mjs: what the node suites (tests/server, tests/webui) share to drive llaisys-server:
// start one on the tiny-qwen2 fixture, fetch with a time limit, poll until something holds.
// Node built-ins only, so that it loads from either suite (each has its own node_modules).
// Every server listens on 127.0.0.1 (at a port the kernel picks unless asked), every wait has a
// time limit, and every server started here is killed when its test file ends.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { after } from 'node:test';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const root = path.resolve(here, '..', '..');
export const model = path.join(root, 'tests', 'fixtures', 'tiny-qwen2');
// The server under test: $LLAISYS_SERVER (relative to the repository root), else ./llaisys-server.
const binary = path.resolve(root, process.env.LLAISYS_SERVER || 'llaisys-server');

const servers = new Set();
after(async () => {
  for (const s of servers) await s.stop();
});

// Start llaisys-server with extra flags; resolves once it serves, to
// {url, port, proc, exited (resolves to {code, sig}), stderr(), stop() (SIGTERM, then SIGKILL
// after 20 s; resolves to {code, sig})}. Rejects if it exits or is not serving in timeoutMs.
export async function startServer(args = [], { port = 0, timeoutMs = 60000 } = {}) {
  const proc = spawn(binary, ['--model', model, '--host', '127.0.0.1', '--port', String(port),
    '--log-level', 'warn', ...args], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  proc.stderr.on('data', (d) => { err += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code, sig) => resolve({ code, sig })));
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${err}`)), timeoutMs);
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/^llaisys-server: serving .* at (http:\S+)$/m);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    exited.then(({ code }) => { clearTimeout(timer); reject(new Error(`server exited (${code}):\n${err}`)); });
  });
  const server = {
    url,
    port: Number(new URL(url).port),
    proc,
    exited,
    stderr: () => err,
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), 20000);
      const r = await exited;
      clearTimeout(t);
      servers.delete(server);
      return r;
    },
  };
  servers.add(server);
  return server;
}

// fetch with a time limit (opts.timeoutMs, default 30 s).
export function http(url, opts = {}) {
  return fetch(url, { signal: AbortSignal.timeout(opts.timeoutMs ?? 30000), ...opts });
}

// Poll fn() every stepMs until it returns a truthy value or timeoutMs passes; returns the last
// value.
export async function waitFor(fn, timeoutMs = 10000, stepMs = 50) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v || Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

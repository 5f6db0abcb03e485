// helpers.mjs: start llaisys-server on the tiny-qwen2 fixture for the SDK tests, and small
// HTTP helpers. Every server listens on 127.0.0.1 at a port the kernel picks (--port 0), every
// request has a time limit, and every server is killed when its test file ends.
import { spawn } from 'node:child_process';
import { after } from 'node:test';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';

const here = path.dirname(fileURLToPath(import.meta.url));
export const root = path.resolve(here, '..', '..');
export const model = path.join(root, 'tests', 'fixtures', 'tiny-qwen2');
const binary = process.env.LLAISYS_SERVER
  ? path.resolve(root, process.env.LLAISYS_SERVER)
  : path.join(root, 'llaisys-server');

const servers = new Set();
after(async () => {
  for (const s of servers) await s.stop();
});

// Start a server with extra flags; resolves to {url, client, stop(), proc, stderr()}.
export async function startServer(args = [], { apiKey = 'none', startTimeoutMs = 60000 } = {}) {
  const proc = spawn(binary, ['--model', model, '--port', '0', '--log-level', 'warn', ...args], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  proc.stderr.on('data', (d) => { err += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code, sig) => resolve({ code, sig })));
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${err}`)), startTimeoutMs);
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/^llaisys-server: serving .* at (http:\S+)$/m);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    exited.then(({ code }) => { clearTimeout(timer); reject(new Error(`server exited (${code}):\n${err}`)); });
  });
  const server = {
    url,
    proc,
    exited,
    stderr: () => err,
    client: new OpenAI({ baseURL: `${url}/v1`, apiKey, timeout: 60000, maxRetries: 0 }),
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

// fetch with a time limit.
export async function http(url, opts = {}) {
  return fetch(url, { signal: AbortSignal.timeout(opts.timeoutMs ?? 30000), ...opts });
}

// The value of one sample of /metrics (first line that starts with name{ and contains label).
export async function metric(server, name, label = '', headers = {}) {
  const text = await (await http(`${server.url}/metrics`, { headers })).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(label));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}

// Poll until pred(value of the metric) holds or timeoutMs passes; returns the last value.
export async function waitMetric(server, name, label, pred, timeoutMs = 10000) {
  const end = Date.now() + timeoutMs;
  let v;
  for (;;) {
    v = await metric(server, name, label);
    if (pred(v) || Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
}

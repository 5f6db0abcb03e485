// helpers.mjs: what the SDK tests add to the shared server helpers (tests/lib/server.mjs): a
// server comes with an OpenAI client of the official Node SDK, and /metrics samples.
import OpenAI from 'openai';
import { startServer as start, http, root, waitFor } from '../lib/server.mjs';

export { http, root };

// Start a server with extra flags (see tests/lib/server.mjs); the result also has `client`, an
// OpenAI client for it with apiKey, a 60 s time limit and no retries.
export async function startServer(args = [], { apiKey = 'none', ...opts } = {}) {
  const server = await start(args, opts);
  server.client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey, timeout: 60000, maxRetries: 0 });
  return server;
}

// The value of one sample of /metrics (first line that starts with name{ and contains label).
export async function metric(server, name, label = '', headers = {}) {
  const text = await (await http(`${server.url}/metrics`, { headers })).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(label));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}

// Poll until pred(value of the metric) holds or timeoutMs passes; returns the last value.
export async function waitMetric(server, name, label, pred, timeoutMs = 10000) {
  let v;
  await waitFor(async () => pred(v = await metric(server, name, label)), timeoutMs);
  return v;
}

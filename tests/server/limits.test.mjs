// limits.test.mjs: llaisys-server's guards seen through the OpenAI Node SDK and raw sockets:
// API keys, queue-full 429, a client that stops reading (write timeout), SIGTERM with
// streams in flight, and a stream's request settled before its end (a concurrency-1 key).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { startServer, http, metric, waitMetric } from './helpers.mjs';

const long = {
  messages: [{ role: 'user', content: 'Tell me a very long story' }],
  max_tokens: 4000, temperature: 0, ignore_eos: true,
};

test('API keys: AuthenticationError without the right key, success with it', async () => {
  const srv = await startServer(['--api-key', 'k-123', '--threads', '1'], { apiKey: 'k-123' });
  const bad = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'k-124', maxRetries: 0, timeout: 30000 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
  await assert.rejects(
    bad.chat.completions.create({ messages: [{ role: 'user', content: 'x' }] }),
    (e) => e.status === 401 && e.code === 'invalid_api_key',
  );
  const r = await srv.client.chat.completions.create({
    messages: [{ role: 'user', content: 'x' }], max_tokens: 2,
  });
  assert.equal(r.choices.length, 1);
  assert.equal((await http(`${srv.url}/health`)).status, 200);
  assert.equal((await http(`${srv.url}/metrics`)).status, 401);
  assert.deepEqual(await srv.stop(), { code: 0, sig: null });
});

test('queue full: RateLimitError while one runs and one waits', async () => {
  const srv = await startServer(['--max-seqs', '1', '--max-queue', '1', '--threads', '1']);
  const ac = new AbortController();
  const a = srv.client.chat.completions.create({ ...long, stream: true }, { signal: ac.signal });
  await waitMetric(srv, 'llaisys_num_requests_running', '', (v) => v === 1);
  const b = srv.client.chat.completions.create({ ...long, stream: true }, { signal: ac.signal });
  await waitMetric(srv, 'llaisys_num_requests_waiting', '', (v) => v === 1);
  await assert.rejects(
    srv.client.chat.completions.create({ ...long, max_tokens: 5 }),
    (e) => e instanceof OpenAI.RateLimitError && e.status === 429,
  );
  ac.abort();
  await Promise.allSettled([a, b]);
  assert.equal(await waitMetric(srv, 'llaisys_kv_cache_blocks', 'state="in_use"', (v) => v === 0), 0);
  assert.equal(await waitMetric(srv, 'llaisys_num_requests_waiting', '', (v) => v === 0), 0);
  assert.deepEqual(await srv.stop(), { code: 0, sig: null });
});

test('a client that reads nothing for --write-timeout is cancelled', async () => {
  const srv = await startServer(['--write-timeout', '1', '--threads', '1']);
  const port = Number(new URL(srv.url).port);
  const before = await metric(srv, 'llaisys_generation_tokens_total');
  // 16 choices of 4000 tokens: ~15 MB of SSE, far more than the socket buffers hold
  const body = JSON.stringify({ prompt: 'x', max_tokens: 4000, temperature: 0, ignore_eos: true,
    n: 16, stream: true });
  const sock = net.connect(port, '127.0.0.1', () => {
    sock.write(`POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${body.length}\r\n\r\n${body}`);
    sock.pause(); // never read
  });
  sock.on('error', () => {});
  try {
    await waitMetric(srv, 'llaisys_num_requests_running', '', (v) => v > 0);
    const running = await waitMetric(srv, 'llaisys_num_requests_running', '', (v) => v === 0, 120000);
    assert.equal(running, 0);
    assert.equal(await metric(srv, 'llaisys_request_cancellations_total', 'reason="disconnect"'), 16);
    const generated = (await metric(srv, 'llaisys_generation_tokens_total')) - before;
    assert.ok(generated < 16 * 4000, `generated ${generated}`);
    assert.equal(await metric(srv, 'llaisys_kv_cache_blocks', 'state="in_use"'), 0);
  } finally {
    sock.destroy();
  }
  assert.deepEqual(await srv.stop(), { code: 0, sig: null });
});

test('SIGTERM: in-flight streams end with a final chunk, the process exits 0', async () => {
  const srv = await startServer(['--shutdown-grace', '0.5', '--threads', '1', '--reasoning-parser', 'none']);
  const stream = await srv.client.chat.completions.create({ ...long, stream: true });
  const seen = (async () => {
    let finish;
    let n = 0;
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta?.content && ++n === 3) srv.proc.kill('SIGTERM');
      if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
    }
    return { finish, n };
  })();
  const { finish, n } = await seen;
  assert.equal(finish, 'cancelled');
  assert.ok(n >= 3 && n < 4000);
  assert.deepEqual(await srv.exited, { code: 0, sig: null });
});

test('SIGTERM: a short request in flight finishes normally within the grace period', async () => {
  const srv = await startServer(['--shutdown-grace', '30', '--threads', '1', '--reasoning-parser', 'none']);
  const stream = await srv.client.chat.completions.create({
    ...long, max_tokens: 300, stream: true, stream_options: { include_usage: true },
  });
  let finish;
  let usage;
  let n = 0;
  for await (const chunk of stream) {
    if (chunk.choices[0]?.delta?.content && ++n === 1) srv.proc.kill('SIGTERM');
    if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 300);
  assert.deepEqual(await srv.exited, { code: 0, sig: null });
});

// Read one HTTP/1.1 exchange on a fresh connection until `until` appears in what came back
// (the end of a stream: [DONE] or the Responses API's final event) or the connection closes.
function exchange(port, method, path, body, headers, until) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1');
    const data = body === undefined ? '' : JSON.stringify(body);
    let got = '';
    const timer = setTimeout(() => { sock.destroy(); reject(new Error(`no end: ${got}`)); }, 30000);
    const done = () => { clearTimeout(timer); sock.destroy(); resolve(got); };
    sock.on('data', (d) => {
      got += d;
      if (until(got)) done();
    });
    sock.on('end', done);
    sock.on('error', (e) => { clearTimeout(timer); reject(e); });
    sock.write(`${method} ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n${headers}` +
      `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(data)}\r\n\r\n${data}`);
  });
}

// A stream's request is settled (its key's concurrency slot freed, its session's turn recorded,
// counted in /metrics) before the client can read its end: the next request, sent the moment
// [DONE] arrives, sees all of it. Until session 11 that happened when the response finished
// sending, just after [DONE]; the race lost about one turn in 200-300 on a 2-core VM, so this
// runs 400 back-to-back turns of each kind (a regression fails it with high probability, not
// certainty; a correct server never does).
test('a stream is settled before its end: back-to-back streams of a concurrency-1 key', async () => {
  const dir = await mkdtemp(path.join(tmpdir(), 'llaisys-keys-'));
  const keys = path.join(dir, 'keys');
  await writeFile(keys, 'key-one name=one concurrency=1\n');
  const srv = await startServer(['--api-key-file', keys, '--threads', '1'], { apiKey: 'key-one' });
  const auth = 'Authorization: Bearer key-one\r\n';
  const body = (r) => JSON.parse(r.slice(r.indexOf('\r\n\r\n') + 4));
  const sess = body(await exchange(srv.port, 'POST', '/v1/sessions', {}, auth, () => false));
  const kinds = [
    ['/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }, 'data: [DONE]'],
    ['/v1/completions', { prompt: 'Once', max_tokens: 2 }, 'data: [DONE]'],
    ['/v1/responses', { input: 'hi', max_output_tokens: 2 }, 'event: response.completed'],
  ];
  let turns = 0;
  for (let i = 0; i < 400; i++) {
    const [route, req, end] = kinds[i % kinds.length];
    const r = await exchange(srv.port, 'POST', route,
      { ...req, stream: true, ...(route === '/v1/chat/completions' ? { session_id: sess.id } : {}) },
      auth, (g) => g.includes(end) || g.startsWith('HTTP/1.1 4'));
    assert.match(r, /^HTTP\/1\.1 200/, `turn ${i} (${route}): ${r.slice(0, 300)}`);
    if (route !== '/v1/chat/completions') continue;
    turns++;
    const s = await exchange(srv.port, 'GET', `/v1/sessions/${sess.id}`, undefined, auth, () => false);
    assert.equal(body(s).turns, turns, `turn ${i}: the session has not recorded it yet`);
  }
  assert.equal(await metric(srv, 'llaisys_key_requests_active', 'key="one"',
    { Authorization: 'Bearer key-one' }), 0);
  assert.deepEqual(await srv.stop(), { code: 0, sig: null });
  await rm(dir, { recursive: true });
});

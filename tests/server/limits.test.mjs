// limits.test.mjs: llaisys-server's guards seen through the OpenAI Node SDK and raw sockets:
// API keys, queue-full 429, a client that stops reading (write timeout), and SIGTERM with
// streams in flight.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
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

// embeddings.test.mjs: POST /v1/embeddings through the official OpenAI Node SDK (which asks for
// base64 and decodes it), LangChain's OpenAIEmbeddings and the Vercel AI SDK's embedMany: the
// answer's shape and usage, unit vectors of the model's width, base64 equal to the float
// form, many inputs (more than --max-seqs, so they are submitted as room comes) equal to each
// alone, token-id inputs equal to their text, shortened vectors, the pooling of --pooling and
// of a directory's sentence-transformers files (and a pooling that is not implemented refused
// while chat still works), errors named, and a client that leaves mid-request frees the KV.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { OpenAIEmbeddings } from '@langchain/openai';
import { embed, embedMany } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { startServer, http, metric, waitMetric, root } from './helpers.mjs';

const H = 64; // tiny-qwen2's hidden_size
let srv;
before(async () => {
  srv = await startServer(['--max-seqs', '4', '--threads', '1']);
});

const texts = Array.from({ length: 23 }, (_, i) => `document ${i}: ${'lorem ipsum '.repeat(i % 5)}end`);

async function embedRaw(server, body) {
  const r = await http(`${server.url}/v1/embeddings`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  return { status: r.status, json: await r.json() };
}

const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

test('SDK: shape, usage, unit vectors; base64 equals float', async () => {
  const r = await srv.client.embeddings.create({ model: 'tiny-qwen2', input: ['hello world', 'second'] });
  assert.equal(r.object, 'list');
  assert.equal(r.model, 'tiny-qwen2');
  assert.equal(r.data.length, 2);
  assert.deepEqual(r.data.map((d) => [d.object, d.index]), [['embedding', 0], ['embedding', 1]]);
  for (const d of r.data) {
    assert.equal(d.embedding.length, H);
    assert.ok(Math.abs(norm(d.embedding) - 1) < 1e-5);
  }
  assert.notDeepEqual(r.data[0].embedding, r.data[1].embedding);
  const tok = await (await http(`${srv.url}/tokenize`, {
    method: 'POST', body: JSON.stringify({ prompt: 'hello world' }),
  })).json();
  const tok2 = await (await http(`${srv.url}/tokenize`, {
    method: 'POST', body: JSON.stringify({ prompt: 'second' }),
  })).json();
  assert.equal(r.usage.prompt_tokens, tok.count + tok2.count);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens);
  // the float form, parsed as f32, is the same vector bit for bit
  const f = await srv.client.embeddings.create({ input: 'hello world', encoding_format: 'float' });
  assert.deepEqual(Array.from(Float32Array.from(f.data[0].embedding)), r.data[0].embedding);
  // token ids embed as their text does
  const ids = await srv.client.embeddings.create({ input: [tok.tokens, tok2.tokens] });
  assert.deepEqual(ids.data.map((d) => d.embedding), r.data.map((d) => d.embedding));
});

test('many inputs (more than --max-seqs) equal each alone, in order', async () => {
  const all = await srv.client.embeddings.create({ input: texts });
  assert.deepEqual(all.data.map((d) => d.index), texts.map((_, i) => i));
  for (const i of [0, 7, 22]) {
    const one = await srv.client.embeddings.create({ input: texts[i] });
    assert.deepEqual(one.data[0].embedding, all.data[i].embedding);
  }
  // and beside generating requests
  const [chat, again] = await Promise.all([
    srv.client.chat.completions.create({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 30 }),
    srv.client.embeddings.create({ input: texts }),
  ]);
  assert.equal(chat.usage.completion_tokens, 30);
  assert.deepEqual(again.data, all.data);
});

test('dimensions: the first values, normalized again', async () => {
  const full = await srv.client.embeddings.create({ input: 'shorten me', encoding_format: 'float' });
  const short = await srv.client.embeddings.create({ input: 'shorten me', dimensions: 8, encoding_format: 'float' });
  const v = short.data[0].embedding;
  assert.equal(v.length, 8);
  const head = full.data[0].embedding.slice(0, 8);
  const n = norm(head);
  v.forEach((x, i) => assert.ok(Math.abs(x - head[i] / n) < 1e-6));
});

test('errors name the field', async () => {
  const cases = [
    [{ input: '' }, 400, 'input', /must not be an empty string/],
    [{ input: ['a', ''] }, 400, 'input[1]', /must not be an empty string/],
    [{ input: [] }, 400, 'input', /must not be empty/],
    [{ input: 'a', stream: true }, 400, 'stream', /not supported by \/v1\/embeddings/],
    [{ input: 'a', encoding_format: 'int8' }, 400, 'encoding_format', /"float" or "base64"/],
    [{ input: 'a', dimensions: 65 }, 400, 'dimensions', /this model's embeddings have 64/],
    [{ input: 'a', dimensions: 0 }, 400, 'dimensions', /between 1 and/],
    [{ input: [[1, 2], [151936]] }, 400, 'input[1]', /outside the vocabulary/],
    [{ input: [1, -2] }, 400, 'input', /'input\[1\]' must be a token id/],
    [{ input: 'a', model: 'other' }, 404, 'model', /other/],
    [{}, 400, 'input', /'input' is required/],
    [{ input: 'word '.repeat(5000) }, 400, 'input', /maximum context length is 4096 tokens/],
  ];
  for (const [body, status, param, re] of cases) {
    const r = await embedRaw(srv, body);
    assert.equal(r.status, status, JSON.stringify(body).slice(0, 80));
    assert.equal(r.json.error.param, param);
    assert.match(r.json.error.message, re);
  }
  const big = await embedRaw(srv, { input: Array.from({ length: 2049 }, () => 'x') });
  assert.equal(big.status, 400);
  assert.match(big.json.error.message, /at most 2048 inputs/);
  // GET is not the method
  const g = await http(`${srv.url}/v1/embeddings`);
  assert.equal(g.status, 405);
});

test('LangChain OpenAIEmbeddings and the AI SDK embedMany get the same vectors', async () => {
  const ref = await srv.client.embeddings.create({ input: texts.slice(0, 9) });
  const lc = new OpenAIEmbeddings({
    model: 'tiny-qwen2', apiKey: 'none', batchSize: 4,
    configuration: { baseURL: `${srv.url}/v1` },
  });
  // (a client that asks for floats reads decimals: the same f32 values)
  const f32 = (v) => Array.from(Float32Array.from(v));
  const docs = await lc.embedDocuments(texts.slice(0, 9));
  assert.equal(docs.length, 9);
  docs.forEach((v, i) => assert.deepEqual(f32(v), ref.data[i].embedding));
  assert.deepEqual(f32(await lc.embedQuery(texts[3])), ref.data[3].embedding);
  const provider = createOpenAICompatible({ name: 'llaisys', baseURL: `${srv.url}/v1`, apiKey: 'none' });
  const model = provider.textEmbeddingModel('tiny-qwen2');
  const many = await embedMany({ model, values: texts.slice(0, 9) });
  many.embeddings.forEach((v, i) => assert.deepEqual(f32(v), ref.data[i].embedding));
  const one = await embed({ model, value: texts[5] });
  assert.deepEqual(f32(one.embedding), ref.data[5].embedding);
});

test('a client that leaves mid-request: its requests end, the KV pool empties', async () => {
  const slow = await startServer(['--max-seqs', '2', '--threads', '1']);
  const ac = new AbortController();
  const p = http(`${slow.url}/v1/embeddings`, {
    method: 'POST', signal: ac.signal,
    body: JSON.stringify({ input: Array.from({ length: 400 }, (_, i) => `text ${i} ${'x y z '.repeat(300)}`) }),
  }).catch((e) => e);
  await waitMetric(slow, 'llaisys_kv_cache_blocks', 'state="in_use"', (v) => v > 0);
  ac.abort();
  await p;
  await waitMetric(slow, 'llaisys_kv_cache_blocks', 'state="in_use"', (v) => v === 0);
  await waitMetric(slow, 'llaisys_num_requests_running', '', (v) => v === 0);
  assert.ok(await metric(slow, 'llaisys_embeddings_total') < 400); // cancelled, not finished
  // and it still serves
  const r = await slow.client.embeddings.create({ input: 'after' });
  assert.equal(r.data[0].embedding.length, H);
  await slow.stop();
});

test('past --request-timeout: a 503 naming it, and the server serves on', async () => {
  const t = await startServer(['--max-seqs', '2', '--threads', '1', '--request-timeout', '0.3']);
  const r = await embedRaw(t, {
    input: Array.from({ length: 400 }, (_, i) => `text ${i} ${'x y z '.repeat(300)}`),
  });
  assert.equal(r.status, 503);
  assert.equal(r.json.error.code, 'timeout');
  assert.match(r.json.error.message, /inputs were not embedded: the request ran past --request-timeout/);
  await waitMetric(t, 'llaisys_kv_cache_blocks', 'state="in_use"', (v) => v === 0);
  const ok = await t.client.embeddings.create({ input: 'after' });
  assert.equal(ok.data[0].embedding.length, H);
  await t.stop();
});

let dir;
after(() => { if (dir) fs.rmSync(dir, { recursive: true, force: true }); });

test('pooling: --pooling mean differs; a directory\'s files decide; max is refused', async () => {
  const mean = await startServer(['--pooling', 'mean', '--threads', '1']);
  const a = await srv.client.embeddings.create({ input: 'pool me' });
  const b = await mean.client.embeddings.create({ input: 'pool me' });
  assert.notDeepEqual(a.data[0].embedding, b.data[0].embedding);
  assert.match(mean.stderr(), /pooling: mean, L2-normalized \(--pooling\)/);
  await mean.stop();

  // a sentence-transformers directory: mean pooling, no Normalize module
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'llaisys-st-'));
  const fixture = path.join(root, 'tests', 'fixtures', 'tiny-qwen2');
  for (const f of fs.readdirSync(fixture)) fs.symlinkSync(path.join(fixture, f), path.join(dir, f));
  fs.mkdirSync(path.join(dir, '1_Pooling'));
  fs.writeFileSync(path.join(dir, 'modules.json'), JSON.stringify([
    { idx: 0, name: '0', path: '', type: 'sentence_transformers.models.Transformer' },
    { idx: 1, name: '1', path: '1_Pooling', type: 'sentence_transformers.models.Pooling' },
  ]));
  fs.writeFileSync(path.join(dir, '1_Pooling', 'config.json'),
    JSON.stringify({ pooling_mode_mean_tokens: true, pooling_mode_lasttoken: false }));
  const st = await startServer(['--model', dir, '--threads', '1']);
  const c = await st.client.embeddings.create({ input: 'pool me', encoding_format: 'float' });
  const n = norm(c.data[0].embedding);
  assert.ok(Math.abs(n - 1) > 1e-3, `not normalized: norm ${n}`);
  const cn = c.data[0].embedding.map((x) => x / n);
  cn.forEach((x, i) => assert.ok(Math.abs(x - b.data[0].embedding[i]) < 1e-5));
  await st.stop();

  fs.writeFileSync(path.join(dir, '1_Pooling', 'config.json'),
    JSON.stringify({ pooling_mode_max_tokens: true }));
  const mx = await startServer(['--model', dir, '--threads', '1']);
  const r = await embedRaw(mx, { input: 'x' });
  assert.equal(r.status, 400);
  assert.match(r.json.error.message, /pooling_mode_max_tokens is not implemented/);
  const chat = await mx.client.chat.completions.create({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 3 });
  assert.equal(chat.choices[0].finish_reason, 'length');
  await mx.stop();
});

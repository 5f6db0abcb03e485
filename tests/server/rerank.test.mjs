// rerank.test.mjs: POST /v1/rerank (and /rerank, Cohere's /v2/rerank) in Jina's and Cohere's
// shape, through plain HTTP and the Vercel AI SDK's rerank() over its Cohere provider: results
// best first with their indices, top_n, return_documents, each document's score the same alone
// as among many (more than --max-seqs, submitted as room comes) and beside a chat request, the
// instruction, the head chosen by --rerank-tokens or by a Qwen3-Reranker README, a model that
// does not rank refused naming why while chat works, and every malformed request named.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { rerank } from 'ai';
import { createCohere } from '@ai-sdk/cohere';
import { startServer, http, metric, root } from './helpers.mjs';

let srv;
before(async () => {
  // (the fixture's logits are large: "no" and "yes" saturate its scores, "a" and "b" do not)
  srv = await startServer(['--rerank-tokens', 'a,b', '--max-seqs', '4', '--threads', '1']);
});
let dir;
after(() => { if (dir) fs.rmSync(dir, { recursive: true, force: true }); });

const query = 'Which animal is black and white and eats bamboo?';
const docs = [
  'The giant panda is a bear native to China; it eats bamboo.',
  'Paris is the capital of France.',
  'Zebras have black and white stripes.',
  'A recipe for bamboo shoots with garlic.',
  'Quantum computers use qubits.',
  'Pandas live in the mountains of central China.',
  'The stock market closed higher today.',
  'Penguins are black and white birds.',
  'Red pandas are not closely related to giant pandas.',
];

async function post(server, route, body) {
  const r = await http(`${server.url}${route}`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  return { status: r.status, json: await r.json() };
}

test('results best first, usage, documents, top_n; the same through every route', async () => {
  const r = await post(srv, '/v1/rerank', { model: 'tiny-qwen2', query, documents: docs, return_documents: true });
  assert.equal(r.status, 200);
  const j = r.json;
  assert.match(j.id, /^rerank-[0-9a-f]{32}$/);
  assert.equal(j.model, 'tiny-qwen2');
  assert.equal(j.results.length, docs.length);
  assert.deepEqual(j.results.map((x) => x.index).sort((a, b) => a - b), docs.map((_, i) => i));
  for (let i = 0; i < j.results.length; i++) {
    const x = j.results[i];
    assert.ok(x.relevance_score > 0 && x.relevance_score < 1, `score ${x.relevance_score}`);
    assert.equal(x.document.text, docs[x.index]);
    if (i) assert.ok(j.results[i - 1].relevance_score >= x.relevance_score);
  }
  assert.ok(new Set(j.results.map((x) => x.relevance_score)).size > 1);
  // usage: the prompts' tokens, each the query and a document in the reranking prompt
  assert.ok(j.usage.prompt_tokens > docs.length * 40);
  assert.equal(j.usage.total_tokens, j.usage.prompt_tokens);
  assert.deepEqual(j.meta, { tokens: { input_tokens: j.usage.prompt_tokens, output_tokens: 0 } });

  const top = await post(srv, '/v1/rerank', { query, documents: docs, top_n: 3 });
  assert.equal(top.json.usage.prompt_tokens, j.usage.prompt_tokens); // every document was scored
  assert.deepEqual(top.json.results, j.results.slice(0, 3).map(({ index, relevance_score }) => ({ index, relevance_score })));
  for (const route of ['/rerank', '/v2/rerank']) {
    const o = await post(srv, route, { query, documents: docs.map((text) => ({ text })), return_documents: true });
    assert.equal(o.status, 200);
    assert.deepEqual(o.json.results, j.results);
    assert.deepEqual(o.json.usage, j.usage);
  }
});

test('a document scores the same alone, among many and beside a chat request', async () => {
  const many = Array.from({ length: 14 }, (_, i) => `${docs[i % docs.length]} (copy ${i})`);
  const all = (await post(srv, '/v1/rerank', { query, documents: many })).json;
  const byIndex = new Map(all.results.map((x) => [x.index, x.relevance_score]));
  for (const i of [0, 5, 13]) {
    const one = (await post(srv, '/v1/rerank', { query, documents: [many[i]] })).json;
    assert.deepEqual(one.results, [{ index: 0, relevance_score: byIndex.get(i) }]);
  }
  const before = await metric(srv, 'llaisys_embeddings_total');
  const [chat, again] = await Promise.all([
    srv.client.chat.completions.create({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 20 }),
    post(srv, '/v1/rerank', { query, documents: many }),
  ]);
  assert.equal(chat.usage.completion_tokens, 20);
  assert.deepEqual(again.json.results, all.results);
  assert.equal(await metric(srv, 'llaisys_embeddings_total'), before + many.length);
});

test('instruction: its own prompt; the default spelled out is the default', async () => {
  const base = (await post(srv, '/v1/rerank', { query, documents: docs })).json;
  const same = (await post(srv, '/v1/rerank', {
    query, documents: docs,
    instruction: 'Given a web search query, retrieve relevant passages that answer the query',
  })).json;
  assert.deepEqual(same.results, base.results);
  const other = (await post(srv, '/v1/rerank', { query, documents: docs, instruction: 'Find recipes' })).json;
  assert.notDeepEqual(other.results, base.results);
  assert.notEqual(other.usage.prompt_tokens, base.usage.prompt_tokens);
});

test('the AI SDK: rerank() with its Cohere provider', async () => {
  const cohere = createCohere({ baseURL: `${srv.url}/v2`, apiKey: 'none' });
  const raw = (await post(srv, '/v2/rerank', { model: 'tiny-qwen2', query, documents: docs, top_n: 4 })).json;
  const { ranking, rerankedDocuments } = await rerank({
    model: cohere.reranking('tiny-qwen2'), query, documents: docs, topN: 4,
  });
  assert.deepEqual(ranking.map((x) => [x.originalIndex, x.score]),
    raw.results.map((x) => [x.index, x.relevance_score]));
  assert.deepEqual(rerankedDocuments, raw.results.map((x) => docs[x.index]));
});

test('malformed requests are refused naming the field', async () => {
  const cases = [
    [{ documents: docs }, 'query', /'query' is required/],
    [{ query: '', documents: docs }, 'query', /must not be empty/],
    [{ query: 3, documents: docs }, 'query', /must be a string/],
    [{ query }, 'documents', /'documents' is required/],
    [{ query, documents: [] }, 'documents', /1 to 2048 documents, got 0/],
    [{ query, documents: 'one' }, 'documents', /must be an array/],
    [{ query, documents: ['a', 7] }, 'documents[1]', /must be a string or an object/],
    [{ query, documents: ['a', ''] }, 'documents[1]', /must not be empty/],
    [{ query, documents: [{ text: 'a', title: 'b' }] }, 'documents[0].title', /not supported/],
    [{ query, documents: docs, top_n: 0 }, 'top_n', /top_n/],
    [{ query, documents: docs, return_documents: 'yes' }, 'return_documents', /return_documents/],
    [{ query, documents: docs, max_tokens_per_doc: 10 }, 'max_tokens_per_doc', /not supported by \/v1\/rerank/],
    [{ query, documents: docs, rank_fields: ['text'] }, 'rank_fields', /not supported/],
    [{ query, documents: ['word '.repeat(5000)] }, 'documents[0]', /maximum context length is \d+ tokens/],
    [{ query, documents: docs, model: 'other' }, 'model', /other/],
  ];
  for (const [body, param, message] of cases) {
    const r = await post(srv, '/v1/rerank', body);
    assert.equal(r.status, param === 'model' ? 404 : 400, JSON.stringify(body).slice(0, 80));
    assert.equal(r.json.error.param, param);
    assert.match(r.json.error.message, message);
  }
  const tooMany = await post(srv, '/v1/rerank', { query, documents: Array(2049).fill('d') });
  assert.equal(tooMany.status, 400);
  assert.match(tooMany.json.error.message, /1 to 2048 documents, got 2049/);
  const get = await http(`${srv.url}/v1/rerank`);
  assert.equal(get.status, 405);
  const bad = await http(`${srv.url}/v1/rerank`, { method: 'POST', body: '{"query": ' });
  assert.equal(bad.status, 400);
});

test('the head: none refused while chat works; a Qwen3-Reranker README; a bad token', async () => {
  const plain = await startServer(['--threads', '1']);
  assert.match(plain.stderr(), /rerank: none: this model has no relevance head/);
  const r = await post(plain, '/v1/rerank', { query, documents: docs });
  assert.equal(r.status, 400);
  assert.match(r.json.error.message, /This model does not rerank: .*--rerank-tokens NO,YES/);
  const chat = await plain.client.chat.completions.create({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 3 });
  assert.equal(chat.choices[0].finish_reason, 'length');
  await plain.stop();

  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'llaisys-reranker-'));
  const fixture = path.join(root, 'tests', 'fixtures', 'tiny-qwen2');
  for (const f of fs.readdirSync(fixture)) fs.symlinkSync(path.join(fixture, f), path.join(dir, f));
  fs.writeFileSync(path.join(dir, 'README.md'), '---\nlicense: apache-2.0\n---\n# Qwen3-Reranker-0.6B\n');
  const readme = await startServer(['--model', dir, '--threads', '1']);
  assert.match(readme.stderr(), /rerank: lm_head rows of no,yes \(README\.md: Qwen3-Reranker\)/);
  const a = (await post(readme, '/v1/rerank', { query, documents: docs })).json;
  await readme.stop();
  const flag = await startServer(['--model', dir, '--rerank-tokens', 'no,yes', '--threads', '1']);
  assert.match(flag.stderr(), /rerank: lm_head rows of no,yes \(--rerank-tokens\)/);
  const b = (await post(flag, '/v1/rerank', { query, documents: docs })).json;
  assert.deepEqual(a.results, b.results);
  await flag.stop();

  await assert.rejects(startServer(['--rerank-tokens', 'no,Not one token', '--threads', '1']),
    /"Not one token" is \d+ tokens of this vocabulary, not one/);
});

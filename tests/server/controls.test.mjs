// controls.test.mjs: the sampling and stopping controls through the official OpenAI Node SDK:
// stop strings (whole and streamed, across token boundaries, at the very start), logprobs in the
// chat and the legacy completions shapes, n > 1 with per-choice randomness reproducible by seed,
// every control at once, and the reasoning split (reasoning_content, streamed and not, with and
// without </think>) that the tiny model's R1 chat template turns on by itself.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { startServer } from './helpers.mjs';

let srv;
before(async () => {
  srv = await startServer(['--max-seqs', '16', '--threads', '1']); // reasoning split: auto
});

const hello = [{ role: 'user', content: 'Hello' }];
const story = { prompt: 'Once upon a time', max_tokens: 16, temperature: 0, ignore_eos: true };

async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

const join = (chunks, field, index = 0) => chunks.flatMap((c) => c.choices)
  .filter((ch) => ch.index === index)
  .map((ch) => (field === 'text' ? ch.text : ch.delta?.[field]) ?? '').join('');

test('stop strings: cut before the match, never emitted, streamed alike', async () => {
  const full = (await srv.client.completions.create(story)).choices[0].text;
  const chars = [...full];
  assert.ok(chars.length >= 8);
  for (const at of [3, 6]) {
    const stop = chars.slice(at, at + 2).join('');
    const want = full.slice(0, full.indexOf(stop));
    const r = await srv.client.completions.create({ ...story, stop: ['\u0001never', stop] });
    assert.equal(r.choices[0].text, want);
    assert.equal(r.choices[0].finish_reason, 'stop');
    const chunks = await collect(await srv.client.completions.create({ ...story, stop, stream: true }));
    assert.equal(join(chunks, 'text'), want);
    assert.ok(!chunks.some((c) => c.choices[0]?.text?.includes(stop)));
  }
  const first = await srv.client.completions.create({ ...story, stop: chars[0] });
  assert.equal(first.choices[0].text, '');
  assert.equal(first.choices[0].finish_reason, 'stop');
});

test('completions logprobs: the legacy shape, consistent with the text', async () => {
  const r = await srv.client.completions.create({ ...story, logprobs: 5 });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 16);
  assert.equal(lp.token_logprobs.length, 16);
  assert.equal(lp.text_offset[0], 0);
  lp.top_logprobs.forEach((top, i) => {
    const vals = Object.values(top);
    assert.ok(vals.length >= 1 && vals.length <= 6);
    assert.ok(vals.every((v) => v <= 0));
    // greedy: the chosen token is the most likely one
    assert.equal(Math.max(...vals), lp.token_logprobs[i]);
  });
  for (let i = 1; i < 16; i++) assert.ok(lp.text_offset[i] >= lp.text_offset[i - 1]);
});

test('chat logprobs: content entries with bytes and ordered top_logprobs', async () => {
  const r = await srv.client.chat.completions.create({
    messages: hello, max_tokens: 8, temperature: 0.8, seed: 3, logprobs: true, top_logprobs: 4,
  });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, 8);
  let sum = 0;
  for (const e of content) {
    assert.equal(typeof e.token, 'string');
    assert.ok(Array.isArray(e.bytes) && e.bytes.length > 0);
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, 4);
    for (let j = 1; j < 4; j++) assert.ok(e.top_logprobs[j].logprob <= e.top_logprobs[j - 1].logprob);
    const p = e.top_logprobs.reduce((a, t) => a + Math.exp(t.logprob), 0);
    assert.ok(p <= 1 + 1e-5);
    const mine = e.top_logprobs.find((t) => t.token === e.token);
    if (mine) assert.equal(mine.logprob, e.logprob);
    sum += e.logprob;
  }
  assert.ok(Number.isFinite(sum));
  // the same request streamed carries the same logprobs
  const chunks = await collect(await srv.client.chat.completions.create({
    messages: hello, max_tokens: 8, temperature: 0.8, seed: 3, logprobs: true, top_logprobs: 4,
    stream: true,
  }));
  const streamed = chunks.flatMap((c) => c.choices).flatMap((ch) => ch.logprobs?.content ?? []);
  assert.deepEqual(streamed, content);
});

test('n choices: different, each reproducible with the seed; every control at once', async () => {
  const params = {
    prompt: 'Once upon a time, in a land far away, there lived a dragon who', max_tokens: 12,
    temperature: 1.5, seed: 11, n: 4, ignore_eos: true,
  };
  const a = await srv.client.completions.create(params);
  const b = await srv.client.completions.create(params);
  assert.equal(a.choices.length, 4);
  assert.deepEqual(b.choices.map((c) => c.text), a.choices.map((c) => c.text));
  assert.ok(new Set(a.choices.map((c) => c.text)).size >= 2);
  const c = await srv.client.completions.create({ ...params, seed: 12 });
  assert.notDeepEqual(c.choices.map((x) => x.text), a.choices.map((x) => x.text));
  const all = {
    ...params, top_p: 0.9, top_k: 40, min_p: 0.05, presence_penalty: 0.5,
    frequency_penalty: 0.3, repetition_penalty: 1.1, logit_bias: { 11: 5 }, min_tokens: 2,
    stop: ['\u0001x', '\u0002y', '\u0003z', '\u0004w'], logprobs: 2,
  };
  const d = await srv.client.completions.create(all);
  const e = await srv.client.completions.create(all);
  assert.deepEqual(e.choices.map((x) => x.text), d.choices.map((x) => x.text));
  assert.deepEqual(e.choices.map((x) => x.logprobs), d.choices.map((x) => x.logprobs));
});

test('reasoning: without </think> everything is reasoning_content', async () => {
  const r = await srv.client.chat.completions.create({ messages: hello, max_tokens: 10, temperature: 0 });
  const m = r.choices[0].message;
  assert.equal(m.content, '');
  assert.ok(m.reasoning_content.length > 0);
  assert.equal(r.usage.completion_tokens_details.reasoning_tokens, 10);
  const chunks = await collect(await srv.client.chat.completions.create({
    messages: hello, max_tokens: 10, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  }));
  assert.equal(join(chunks, 'reasoning_content'), m.reasoning_content);
  assert.equal(join(chunks, 'content'), '');
  assert.equal(chunks.at(-1).usage.completion_tokens_details.reasoning_tokens, 10);
});

test('reasoning: </think> splits reasoning_content from content, streamed apart', async () => {
  // a bias of 100 on </think> (151649) makes the tiny model close its reasoning early
  const params = { messages: hello, max_tokens: 10, temperature: 0, logit_bias: { 151649: 100 } };
  const r = await srv.client.chat.completions.create({ ...params, logprobs: true });
  const tokens = r.choices[0].logprobs.content.map((e) => e.token);
  const k = tokens.indexOf('</think>');
  assert.ok(k >= 0);
  assert.equal(r.usage.completion_tokens_details.reasoning_tokens, k + 1);
  assert.equal(r.choices[0].message.reasoning_content, tokens.slice(0, k).join(''));
  assert.equal(r.choices[0].message.content, tokens.slice(k + 1).join(''));
  const chunks = await collect(await srv.client.chat.completions.create({ ...params, stream: true }));
  assert.equal(join(chunks, 'reasoning_content'), r.choices[0].message.reasoning_content);
  assert.equal(join(chunks, 'content'), r.choices[0].message.content);
  // no chunk mixes the two
  assert.ok(!chunks.some((c) => c.choices[0]?.delta?.content && c.choices[0]?.delta?.reasoning_content));
});

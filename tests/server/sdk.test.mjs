// sdk.test.mjs: llaisys-server through the official OpenAI Node SDK: chat and completions,
// stream and not, n, seeds, usage, models, errors as SDK exceptions, 16 concurrent streams
// equal to the same requests run alone, and cancellation (client abort, cancel route).
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, http, metric, waitMetric } from './helpers.mjs';

let srv;
before(async () => {
  // (the tiny model never closes <think>: without the split its text is the answer)
  srv = await startServer(['--max-seqs', '16', '--threads', '1', '--reasoning-parser', 'none']);
});

const hello = [{ role: 'user', content: 'Hello' }];

async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

function textOf(chunks, index = 0) {
  return chunks
    .flatMap((c) => c.choices)
    .filter((ch) => ch.index === index)
    .map((ch) => ch.delta?.content ?? ch.text ?? '')
    .join('');
}

test('chat completion: shape, finish_reason, usage', async () => {
  const r = await srv.client.chat.completions.create({
    model: 'tiny-qwen2', messages: hello, max_tokens: 10, temperature: 0,
  });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.model, 'tiny-qwen2');
  assert.equal(typeof r.created, 'number');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.ok(r.choices[0].message.content.length > 0);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.deepEqual(
    [r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens],
    [6, 10, 16],
  );
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(r.usage.completion_tokens_details.reasoning_tokens, 0);
});

test('chat stream equals the whole response, usage chunk last', async () => {
  const params = { model: 'tiny-qwen2', messages: hello, max_tokens: 20, temperature: 0 };
  const whole = await srv.client.chat.completions.create(params);
  const chunks = await collect(await srv.client.chat.completions.create({
    ...params, stream: true, stream_options: { include_usage: true },
  }));
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  assert.equal(textOf(chunks), whole.choices[0].message.content);
  const finishes = chunks.flatMap((c) => c.choices).map((c) => c.finish_reason).filter(Boolean);
  assert.deepEqual(finishes, ['length']);
  const last = chunks.at(-1);
  assert.equal(last.choices.length, 0);
  assert.equal(last.usage.completion_tokens, 20);
  assert.equal(new Set(chunks.map((c) => c.id)).size, 1);
});

test('chat content as text parts, system and developer roles', async () => {
  const a = await srv.client.chat.completions.create({
    messages: [{ role: 'developer', content: 'Be brief.' },
      { role: 'user', content: [{ type: 'text', text: 'Hel' }, { type: 'text', text: 'lo' }] }],
    max_tokens: 8, temperature: 0,
  });
  const b = await srv.client.chat.completions.create({
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hel\nlo' }],
    max_tokens: 8, temperature: 0,
  });
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assert.equal(a.usage.prompt_tokens, b.usage.prompt_tokens);
});

test('completions: text, ids, several prompts, stream', async () => {
  const r = await srv.client.completions.create({
    model: 'tiny-qwen2', prompt: 'Once upon a time', max_tokens: 12, temperature: 0,
  });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.usage.completion_tokens, 12);
  const tok = await (await http(`${srv.url}/tokenize`, {
    method: 'POST', body: JSON.stringify({ prompt: 'Once upon a time' }),
  })).json();
  const byIds = await srv.client.completions.create({
    prompt: tok.tokens, max_tokens: 12, temperature: 0,
  });
  assert.equal(byIds.choices[0].text, r.choices[0].text);
  const two = await srv.client.completions.create({
    prompt: ['Once upon a time', 'The sky'], max_tokens: 12, temperature: 0,
  });
  assert.deepEqual(two.choices.map((c) => c.index), [0, 1]);
  assert.equal(two.choices[0].text, r.choices[0].text);
  const chunks = await collect(await srv.client.completions.create({
    prompt: 'Once upon a time', max_tokens: 12, temperature: 0, stream: true,
  }));
  assert.equal(textOf(chunks), r.choices[0].text);
});

test('n choices: stream and whole agree per index; seed repeats', async () => {
  const params = { messages: hello, max_tokens: 12, temperature: 2, seed: 7, n: 3 };
  const whole = await srv.client.chat.completions.create(params);
  assert.equal(whole.choices.length, 3);
  assert.ok(new Set(whole.choices.map((c) => c.message.content)).size >= 2);
  const again = await srv.client.chat.completions.create(params);
  assert.deepEqual(again.choices.map((c) => c.message.content),
    whole.choices.map((c) => c.message.content));
  const chunks = await collect(await srv.client.chat.completions.create({ ...params, stream: true }));
  for (let i = 0; i < 3; i++) assert.equal(textOf(chunks, i), whole.choices[i].message.content);
  const other = await srv.client.chat.completions.create({ ...params, seed: 8 });
  assert.notDeepEqual(other.choices.map((c) => c.message.content),
    whole.choices.map((c) => c.message.content));
});

test('models list', async () => {
  const list = [];
  for await (const m of srv.client.models.list()) list.push(m);
  assert.equal(list.length, 1);
  assert.equal(list[0].id, 'tiny-qwen2');
  assert.equal(list[0].max_model_len, 4096);
  const one = await srv.client.models.retrieve('tiny-qwen2');
  assert.equal(one.id, 'tiny-qwen2');
});

test('errors surface as SDK exceptions with status and param', async () => {
  await assert.rejects(
    srv.client.chat.completions.create({ messages: hello, temperature: 'hot' }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'temperature',
  );
  await assert.rejects(
    srv.client.chat.completions.create({ model: 'gpt-4o', messages: hello }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found',
  );
  await assert.rejects(
    srv.client.chat.completions.create({ messages: hello, max_tokens: 5000 }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded' &&
      /4096/.test(e.message),
  );
  // what cannot be served: a clear 400 naming the field
  await assert.rejects(
    srv.client.completions.create({ prompt: 'x', max_tokens: 4, echo: true, logprobs: 1 }),
    (e) => e.status === 400 && /not supported/.test(e.message) && e.param === 'echo',
  );
  await assert.rejects(
    srv.client.chat.completions.create({ messages: hello, max_tokens: 2, min_tokens: 3 }),
    (e) => e.status === 400 && e.param === 'min_tokens',
  );
  // default values of the sampling fields are fine
  const ok = await srv.client.chat.completions.create({
    messages: hello, max_tokens: 2, presence_penalty: 0, frequency_penalty: 0, logprobs: false,
  });
  assert.equal(ok.choices.length, 1);
});

test('16 concurrent streams equal the same requests run alone (greedy)', async () => {
  const prompts = Array.from({ length: 16 }, (_, i) => `Request number ${i}: tell me about ${'abcdefghijklmnop'[i]}`);
  const alone = [];
  for (const p of prompts) {
    const r = await srv.client.chat.completions.create({
      messages: [{ role: 'user', content: p }], max_tokens: 32, temperature: 0, ignore_eos: true,
    });
    alone.push(r.choices[0].message.content);
  }
  const streams = await Promise.all(prompts.map(async (p) => collect(
    await srv.client.chat.completions.create({
      messages: [{ role: 'user', content: p }], max_tokens: 32, temperature: 0,
      ignore_eos: true, stream: true,
    }),
  )));
  const ids = new Set();
  streams.forEach((chunks, i) => {
    assert.equal(textOf(chunks), alone[i], `stream ${i}`);
    const own = new Set(chunks.map((c) => c.id));
    assert.equal(own.size, 1, `stream ${i} carries one id`);
    ids.add([...own][0]);
    assert.equal(chunks.flatMap((c) => c.choices).filter((c) => c.finish_reason).length, 1);
  });
  assert.equal(ids.size, 16);
  assert.equal(await waitMetric(srv, 'llaisys_kv_cache_blocks', 'state="in_use"', (v) => v === 0), 0);
});

const longChat = {
  messages: [{ role: 'user', content: 'Tell me a very long story' }],
  max_tokens: 4000, temperature: 0, ignore_eos: true, stream: true,
};

test('client abort mid-stream cancels the request and frees its KV blocks', async () => {
  const before = await metric(srv, 'llaisys_request_cancellations_total', 'reason="disconnect"');
  const ac = new AbortController();
  const stream = await srv.client.chat.completions.create(longChat, { signal: ac.signal });
  let n = 0;
  try { // (the SDK ends the iteration quietly on abort; some versions throw)
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta?.content && ++n === 5) {
        ac.abort();
        break; // a chunk already read may still be yielded after the abort (seen under TSan)
      }
    }
  } catch (e) {
    assert.ok(ac.signal.aborted, String(e));
  }
  assert.equal(n, 5);
  assert.equal(await waitMetric(srv, 'llaisys_request_cancellations_total', 'reason="disconnect"',
    (v) => v === before + 1), before + 1);
  assert.equal(await waitMetric(srv, 'llaisys_kv_cache_blocks', 'state="in_use"', (v) => v === 0), 0);
  assert.equal(await waitMetric(srv, 'llaisys_num_requests_running', '', (v) => v === 0), 0);
});

test('cancel route by response id ends the stream with finish_reason cancelled', async () => {
  const stream = await srv.client.chat.completions.create(longChat);
  let id;
  let finish;
  let tokens = 0;
  for await (const chunk of stream) {
    if (!id) {
      id = chunk.id;
      const r = await http(`${srv.url}/v1/requests/${id}/cancel`, { method: 'POST' });
      assert.equal(r.status, 200);
      assert.equal((await r.json()).cancelled, 1);
    }
    if (chunk.choices[0]?.delta?.content) tokens++;
    if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.equal(finish, 'cancelled');
  assert.ok(tokens < 4000);
  assert.equal(await waitMetric(srv, 'llaisys_kv_cache_blocks', 'state="in_use"', (v) => v === 0), 0);
  const r = await http(`${srv.url}/v1/requests/${id}/cancel`, { method: 'POST' });
  assert.equal(r.status, 404);
});

test('queued and mid-prefill requests cancel too (non-stream, client abort)', async () => {
  const before = await metric(srv, 'llaisys_request_cancellations_total', 'reason="disconnect"');
  const ac = new AbortController();
  const p = srv.client.completions.create(
    { prompt: 'x', max_tokens: 4000, temperature: 0, ignore_eos: true },
    { signal: ac.signal },
  );
  await waitMetric(srv, 'llaisys_num_requests_running', '', (v) => v === 1);
  ac.abort();
  await assert.rejects(p);
  assert.equal(await waitMetric(srv, 'llaisys_request_cancellations_total', 'reason="disconnect"',
    (v) => v === before + 1), before + 1);
  assert.equal(await waitMetric(srv, 'llaisys_kv_cache_blocks', 'state="in_use"', (v) => v === 0), 0);
});

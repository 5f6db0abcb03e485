// agents.test.mjs: structured output, tool calling and the Responses API through the clients
// agent frameworks use, against the real server on the tiny random model. The model's weights
// are random, so every assertion is about shape and validity, which the grammar guarantees:
// parsed objects pass the clients' own zod validation, tool calls name a given function with
// arguments that parse and validate, streams are well-formed. Greedy decoding (temperature 0)
// keeps every run the same.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import OpenAI from 'openai';
import { zodFunction, zodResponseFormat, zodTextFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import { generateObject, generateText, streamObject, stepCountIs, tool, jsonSchema } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { createOpenAI } from '@ai-sdk/openai';
import { ChatOpenAI } from '@langchain/openai';
import { tool as lcTool } from '@langchain/core/tools';
import { startServer, http, root } from './helpers.mjs';

// Qwen2.5's template renders the tools (hermes calls); the fixture's own R1 template does not
// (a fallback prompt, deepseek_v3 calls, and the <think> split).
let qwen;
let r1;
before(async () => {
  qwen = await startServer(['--threads', '1', '--reasoning-parser', 'none', '--chat-template',
    path.join(root, 'tests', 'fixtures', 'chat-templates', 'qwen25.jinja')]);
  r1 = await startServer(['--threads', '1']);
});

const Weather = z.object({
  city: z.string(),
  temperature: z.number(),
  unit: z.enum(['celsius', 'fahrenheit']),
  tags: z.array(z.string()),
});
const ask = [{ role: 'user', content: 'What is the weather in Paris? Answer as JSON.' }];

test('openai: chat.completions.parse with a zod schema', async () => {
  const r = await qwen.client.chat.completions.parse({
    model: 'tiny-qwen2', messages: ask, temperature: 0, max_completion_tokens: 300,
    response_format: zodResponseFormat(Weather, 'weather'),
  });
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.ok(m.parsed, `no parsed object from: ${m.content}`);
  assert.ok(Weather.safeParse(m.parsed).success);
  assert.deepEqual(m.parsed, JSON.parse(m.content));
});

test('openai: parse with bounds, dates, uuids, patterns (zod)', async () => {
  // zod writes minimum / maximum, and a pattern beside each format
  const Booking = z.object({
    guests: z.int().min(1).max(8),
    rating: z.number().min(0).max(5),
    deposit: z.number().positive().lt(1000),
    floor: z.int().gte(-3).lte(40),
    day: z.iso.date(),
    at: z.iso.datetime(),
    id: z.uuid(),
    code: z.string().regex(/^[A-Z]{3}-\d{3}$/),
  });
  for (const seed of [1, 2, 3]) {
    const r = await qwen.client.chat.completions.parse({
      model: 'tiny-qwen2', messages: ask, temperature: 1, seed, max_completion_tokens: 300,
      response_format: zodResponseFormat(Booking, 'booking'),
    });
    const m = r.choices[0].message;
    assert.equal(r.choices[0].finish_reason, 'stop');
    const check = Booking.safeParse(JSON.parse(m.content));
    assert.ok(check.success, `zod refuses ${m.content}: ${check.error}`);
  }
});

test('openai: parse with every zod string format that has a pattern, and records (zod)', async () => {
  // zod writes a format beside a pattern for each (its own names: cuid, e164, mac, ...), base64
  // with contentEncoding, lookaheads in duration and iban, anchors per alternative in mac and
  // base64, propertyNames for records; split in two objects to keep each answer short
  const Ids = z.object({
    nanoid: z.nanoid(), cuid: z.cuid().max(24), cuid2: z.cuid2().max(24), ulid: z.ulid(),
    xid: z.xid(), ksuid: z.ksuid(), guid: z.guid(), uuid4: z.uuidv4(), hash: z.hash('sha256'),
    hex: z.hex().max(24), b64: z.base64().max(24), b64url: z.base64url().max(24),
  });
  const Mixed = z.object({
    ip4: z.ipv4(), ip6: z.ipv6(), mac: z.mac(), cidr4: z.cidrv4(), cidr6: z.cidrv6(),
    phone: z.e164(), span: z.iso.duration().max(24), lower: z.string().lowercase().max(24),
    upper: z.string().uppercase().max(24), starts: z.string().startsWith('id-').max(24),
    ends: z.string().endsWith('.json').max(24), has: z.string().includes('@').max(24),
    scores: z.record(z.string().regex(/^[a-z]{1,8}$/), z.int().min(0).max(9)),
    sizes: z.record(z.enum(['s', 'm']), z.number()),
    flags: z.partialRecord(z.enum(['x', 'y']), z.boolean()),
  });
  // z.toJSONSchema as it is: the OpenAI SDK's strict helper refuses propertyNames and
  // contentEncoding on the client, but vLLM clients, the AI SDK and LangChain send them
  for (const [name, schema] of [['ids', Ids], ['mixed', Mixed]]) {
    for (const seed of [1, 2]) {
      const r = await qwen.client.chat.completions.create({
        model: 'tiny-qwen2', messages: ask, temperature: 1, seed, max_completion_tokens: 1500,
        response_format: { type: 'json_schema',
          json_schema: { name, schema: z.toJSONSchema(schema), strict: true } },
      });
      const m = r.choices[0].message;
      assert.equal(r.choices[0].finish_reason, 'stop', m.content);
      const check = schema.safeParse(JSON.parse(m.content));
      assert.ok(check.success, `zod refuses ${m.content.slice(0, 300)}: ${JSON.stringify(check.error?.issues)}`);
    }
  }
});

test("vLLM's guided_choice, guided_regex and structured_outputs (chat and completions)", async () => {
  const choices = ['positive', 'negative', 'neutral'];
  for (const seed of [1, 2, 3]) {
    const r = await qwen.client.chat.completions.create({
      model: 'tiny-qwen2', messages: ask, temperature: 1, seed, max_tokens: 50,
      guided_choice: choices,
    });
    assert.ok(choices.includes(r.choices[0].message.content), r.choices[0].message.content);
    assert.equal(r.choices[0].finish_reason, 'stop');
    const c = await qwen.client.completions.create({
      model: 'tiny-qwen2', prompt: 'Code:', temperature: 1, seed, max_tokens: 50,
      guided_regex: '[A-Z]{3}-\\d{2,4}( "ok")?',
    });
    assert.match(c.choices[0].text, /^[A-Z]{3}-\d{2,4}( "ok")?$/);
    // the same through vLLM's newer structured_outputs, and its json / json_object
    const so = await qwen.client.chat.completions.create({
      model: 'tiny-qwen2', messages: ask, temperature: 1, seed, max_tokens: 50,
      structured_outputs: { choice: choices },
    });
    assert.ok(choices.includes(so.choices[0].message.content));
    const sr = await qwen.client.completions.create({
      model: 'tiny-qwen2', prompt: 'Code:', temperature: 1, seed, max_tokens: 50,
      structured_outputs: { regex: '(?!ZZ)[A-Z]{2}\\d', disable_fallback: true },
    });
    assert.match(sr.choices[0].text, /^(?!ZZ)[A-Z]{2}\d$/);
    const sj = await qwen.client.chat.completions.create({
      model: 'tiny-qwen2', messages: ask, temperature: 1, seed, max_tokens: 150,
      structured_outputs: { json: { type: 'object', properties: { n: { type: 'integer',
        multipleOf: 3 } }, required: ['n'], additionalProperties: false } },
    });
    assert.equal(JSON.parse(sj.choices[0].message.content).n % 3, 0);
    const so2 = await qwen.client.chat.completions.create({
      model: 'tiny-qwen2', messages: ask, temperature: 1, seed, max_tokens: 150,
      structured_outputs: { json_object: true },
    });
    assert.equal(typeof JSON.parse(so2.choices[0].message.content), 'object');
  }
});

test('openai: json_object streamed, n = 2, with logprobs', async () => {
  const stream = await qwen.client.chat.completions.create({
    model: 'tiny-qwen2', messages: ask, temperature: 1, seed: 3, n: 2, max_tokens: 200,
    response_format: { type: 'json_object' }, stream: true, logprobs: true, top_logprobs: 2,
  });
  const text = ['', ''];
  let lps = 0;
  for await (const chunk of stream) {
    for (const ch of chunk.choices) {
      text[ch.index] += ch.delta?.content ?? '';
      for (const lp of ch.logprobs?.content ?? []) {
        lps++;
        assert.ok(lp.logprob <= 0 && lp.top_logprobs.length <= 2);
      }
    }
  }
  assert.ok(lps > 0);
  for (const t of text) {
    const v = JSON.parse(t);
    assert.equal(typeof v, 'object');
    assert.ok(!Array.isArray(v) && v !== null);
  }
});

test('openai: runTools with two tools', async () => {
  const calls = [];
  const runner = qwen.client.chat.completions.runTools({
    model: 'tiny-qwen2', temperature: 0, max_tokens: 300, tool_choice: 'required',
    messages: [{ role: 'user', content: 'Weather and time in Paris?' }],
    tools: [
      zodFunction({
        name: 'get_weather', parameters: z.object({ city: z.string() }),
        function: (a) => { calls.push(['get_weather', a]); return { temperature: 21 }; },
      }),
      zodFunction({
        name: 'get_time', parameters: z.object({ timezone: z.string(), hour24: z.boolean() }),
        function: (a) => { calls.push(['get_time', a]); return { time: '12:00' }; },
      }),
    ],
  }, { maxChatCompletions: 2 });
  await runner.done();
  const msgs = runner.messages;
  assert.ok(calls.length >= 2, `tools ran ${calls.length} times`);
  for (const [name, args] of calls) {
    assert.ok(['get_weather', 'get_time'].includes(name));
    const schema = name === 'get_weather' ? z.object({ city: z.string() })
      : z.object({ timezone: z.string(), hour24: z.boolean() });
    assert.ok(schema.safeParse(args).success, JSON.stringify(args));
  }
  // the history went back with assistant tool_calls and tool results
  assert.ok(msgs.some((m) => m.role === 'tool'));
  assert.ok(msgs.some((m) => m.role === 'assistant' && m.tool_calls?.length));
});

test('openai: a named tool_choice, streamed delta.tool_calls, finish_reason tool_calls', async () => {
  const stream = await qwen.client.chat.completions.create({
    model: 'tiny-qwen2', messages: ask, temperature: 0, max_tokens: 200, stream: true,
    tools: [{ type: 'function', function: { name: 'a', parameters: { type: 'object' } } },
      { type: 'function', function: { name: 'b', strict: true, parameters: {
        type: 'object', properties: { n: { type: 'integer' } }, required: ['n'],
        additionalProperties: false } } }],
    tool_choice: { type: 'function', function: { name: 'b' } },
  });
  const deltas = [];
  let finish;
  for await (const chunk of stream) {
    const ch = chunk.choices[0];
    if (ch?.delta?.tool_calls) deltas.push(...ch.delta.tool_calls);
    if (ch?.finish_reason) finish = ch.finish_reason;
  }
  assert.equal(finish, 'tool_calls');
  // the call's id and name first, then its arguments piece by piece, as OpenAI streams them
  assert.ok(deltas.length > 2, JSON.stringify(deltas));
  assert.equal(deltas[0].index, 0);
  assert.equal(deltas[0].function.name, 'b');
  assert.match(deltas[0].id, /^call_/);
  for (const d of deltas.slice(1)) {
    assert.equal(d.index, 0);
    assert.equal(d.id, undefined);
    assert.equal(d.function.name, undefined);
    assert.ok(d.function.arguments.length > 0);
  }
  const args = deltas.map((d) => d.function.arguments).join('');
  assert.ok(Number.isInteger(JSON.parse(args).n), args);
});

test('legacy functions / function_call: one call, streamed name first, then its arguments', async () => {
  const body = {
    model: 'tiny-qwen2', messages: ask, temperature: 0, max_tokens: 200,
    functions: [{ name: 'f', parameters: { type: 'object', properties: { k: { type: 'string' } },
      required: ['k'] } }],
    function_call: { name: 'f' },
  };
  const whole = await qwen.client.chat.completions.create(body);
  assert.equal(whole.choices[0].finish_reason, 'function_call');
  const fc = whole.choices[0].message.function_call;
  assert.equal(fc.name, 'f');
  assert.equal(typeof JSON.parse(fc.arguments).k, 'string');
  const stream = await qwen.client.chat.completions.create({ ...body, stream: true });
  const deltas = [];
  let finish;
  for await (const chunk of stream) {
    const ch = chunk.choices[0];
    if (ch?.delta?.function_call) deltas.push(ch.delta.function_call);
    if (ch?.finish_reason) finish = ch.finish_reason;
  }
  assert.equal(finish, 'function_call');
  assert.ok(deltas.length > 2);
  assert.equal(deltas[0].name, 'f');
  assert.ok(deltas.slice(1).every((d) => d.name === undefined));
  assert.equal(deltas.map((d) => d.arguments).join(''), fc.arguments); // greedy: the same call
});

test('AI SDK (openai-compatible): generateObject, streamObject, generateText with tools', async () => {
  const provider = createOpenAICompatible({
    name: 'llaisys', baseURL: `${qwen.url}/v1`, supportsStructuredOutputs: true,
  });
  const model = provider('tiny-qwen2');
  const obj = await generateObject({
    model, schema: Weather, prompt: 'Weather in Paris?', temperature: 0, maxOutputTokens: 300,
  });
  assert.ok(Weather.safeParse(obj.object).success);

  const s = streamObject({
    model, schema: Weather, prompt: 'Weather in Rome?', temperature: 0, maxOutputTokens: 300,
  });
  let partials = 0;
  for await (const p of s.partialObjectStream) { if (p) partials++; }
  assert.ok(partials > 0);
  assert.ok(Weather.safeParse(await s.object).success);

  let ran = 0;
  const r = await generateText({
    model, prompt: 'Weather in Oslo?', temperature: 0, maxOutputTokens: 300,
    toolChoice: 'required', stopWhen: stepCountIs(1),
    tools: {
      getWeather: tool({
        description: 'the weather of a city',
        inputSchema: z.object({ city: z.string() }),
        execute: async ({ city }) => { ran++; return { city, temperature: 3 }; },
      }),
    },
  });
  assert.ok(r.toolCalls.length >= 1);
  assert.equal(r.toolCalls[0].toolName, 'getWeather');
  assert.equal(typeof r.toolCalls[0].input.city, 'string');
  assert.equal(ran, r.toolCalls.length);
  assert.equal(r.finishReason, 'tool-calls');
});

test('AI SDK (@ai-sdk/openai, Responses API): generateObject and tools', async () => {
  const openai = createOpenAI({ baseURL: `${qwen.url}/v1`, apiKey: 'none' });
  const obj = await generateObject({
    model: openai('tiny-qwen2'), schema: Weather, prompt: 'Weather in Lima?', temperature: 0,
    maxOutputTokens: 300,
  });
  assert.ok(Weather.safeParse(obj.object).success);
  const r = await generateText({
    model: openai('tiny-qwen2'), prompt: 'Weather in Lima?', temperature: 0,
    maxOutputTokens: 300, toolChoice: 'required', stopWhen: stepCountIs(1),
    tools: {
      getWeather: tool({
        inputSchema: jsonSchema({ type: 'object', properties: { city: { type: 'string' } },
          required: ['city'], additionalProperties: false }),
        execute: async ({ city }) => ({ city, temperature: 3 }),
      }),
    },
  });
  assert.ok(r.toolCalls.length >= 1);
  assert.equal(typeof r.toolCalls[0].input.city, 'string');
});

test('LangChain: withStructuredOutput (both methods) and bindTools', async () => {
  const llm = new ChatOpenAI({
    model: 'tiny-qwen2', temperature: 0, maxTokens: 300, apiKey: 'none', maxRetries: 0,
    configuration: { baseURL: `${qwen.url}/v1` },
  });
  for (const method of ['functionCalling', 'jsonSchema']) {
    const out = await llm.withStructuredOutput(Weather, { method, name: 'weather' })
      .invoke('Weather in Paris?');
    assert.ok(Weather.safeParse(out).success, `${method}: ${JSON.stringify(out)}`);
  }
  const getWeather = lcTool(async ({ city }) => `sunny in ${city}`, {
    name: 'get_weather', description: 'the weather of a city',
    schema: z.object({ city: z.string() }),
  });
  const msg = await llm.bindTools([getWeather], { tool_choice: 'any' }).invoke('Weather?');
  assert.ok(msg.tool_calls.length >= 1);
  assert.equal(msg.tool_calls[0].name, 'get_weather');
  assert.equal(typeof msg.tool_calls[0].args.city, 'string');
});

test('openai: responses.create streaming with a tool, then the result as input', async () => {
  const tools = [{ type: 'function', name: 'get_weather', strict: true,
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'],
      additionalProperties: false } }];
  const stream = await qwen.client.responses.create({
    model: 'tiny-qwen2', input: 'Weather in Paris?', instructions: 'Use the tools.', tools,
    tool_choice: 'required', temperature: 0, max_output_tokens: 300, stream: true,
  });
  const types = [];
  let last = -1;
  let done;
  let added;
  let pieces = '';
  let argsDone;
  for await (const ev of stream) {
    types.push(ev.type);
    assert.ok(ev.sequence_number > last);
    last = ev.sequence_number;
    if (ev.type === 'response.completed') done = ev.response;
    if (ev.type === 'response.output_item.added' && ev.item.type === 'function_call') added = ev.item;
    if (ev.type === 'response.function_call_arguments.delta') pieces += ev.delta;
    if (ev.type === 'response.function_call_arguments.done') argsDone = ev.arguments;
  }
  assert.equal(types[0], 'response.created');
  assert.ok(types.includes('response.output_item.added'));
  // the call is added with its name and no arguments, which then come piece by piece
  assert.equal(added.name, 'get_weather');
  assert.equal(added.arguments, '');
  assert.ok(types.filter((t) => t === 'response.function_call_arguments.delta').length > 2);
  assert.equal(pieces, argsDone);
  assert.ok(types.includes('response.function_call_arguments.done'));
  assert.equal(types.at(-1), 'response.completed');
  const call = done.output.find((o) => o.type === 'function_call');
  assert.equal(call.arguments, argsDone);
  assert.equal(call.name, 'get_weather');
  assert.equal(typeof JSON.parse(call.arguments).city, 'string');
  assert.equal(done.usage.total_tokens, done.usage.input_tokens + done.usage.output_tokens);

  // the conversation continues with the function's output (no stored sessions needed)
  const next = await qwen.client.responses.create({
    model: 'tiny-qwen2', tools, temperature: 0, max_output_tokens: 20,
    input: [{ role: 'user', content: 'Weather in Paris?' }, call,
      { type: 'function_call_output', call_id: call.call_id, output: '21 C' }],
  });
  assert.ok(['completed', 'incomplete'].includes(next.status));

  // the same turn by previous_response_id: the stored conversation, then the output
  const chained = await qwen.client.responses.create({
    model: 'tiny-qwen2', tools, temperature: 0, max_output_tokens: 20, previous_response_id: done.id,
    input: [{ type: 'function_call_output', call_id: call.call_id, output: '21 C' }],
  });
  assert.equal(chained.previous_response_id, done.id);
  assert.equal(chained.store, true);
  // (the instructions of the first turn are not carried over, as OpenAI documents)
  assert.equal(chained.usage.input_tokens, next.usage.input_tokens);
  assert.deepEqual(chained.output.map((o) => o.type), next.output.map((o) => o.type));
  assert.equal(chained.output_text, next.output_text);
  // retrieve and delete through the SDK
  const got = await qwen.client.responses.retrieve(done.id);
  assert.equal(got.id, done.id);
  assert.deepEqual(got.output, done.output);
  assert.deepEqual(got.usage, done.usage);
  // the second turn's input items, newest first: the call's output, the call, the question
  const items = [];
  for await (const it of qwen.client.responses.inputItems.list(chained.id, { limit: 2 })) {
    items.push(it);
  }
  assert.deepEqual(items.map((it) => it.type).slice(0, 2),
    ['function_call_output', 'function_call']);
  assert.equal(items.at(-1).type, 'message');
  assert.equal(items.at(-1).content[0].text, 'Weather in Paris?');
  assert.ok(items.every((it) => typeof it.id === 'string'));
  await qwen.client.responses.delete(done.id);
  await assert.rejects(qwen.client.responses.retrieve(done.id), (e) => e.status === 404);
  await assert.rejects(qwen.client.responses.create({
    model: 'tiny-qwen2', input: 'x', previous_response_id: done.id }),
  (e) => e.status === 400 && e.param === 'previous_response_id' &&
    e.code === 'previous_response_not_found');
});

test('openai: responses.parse with zodTextFormat', async () => {
  const r = await qwen.client.responses.parse({
    model: 'tiny-qwen2', input: 'Weather in Paris?', temperature: 0, max_output_tokens: 300,
    text: { format: zodTextFormat(Weather, 'weather') },
  });
  assert.equal(r.status, 'completed');
  assert.ok(Weather.safeParse(r.output_parsed).success);
});

test('@openai/agents: an agent with a tool', async () => {
  const agents = await import('@openai/agents');
  const { Agent, run, setDefaultOpenAIClient, setTracingDisabled, setOpenAIAPI } = agents;
  setTracingDisabled(true);
  setDefaultOpenAIClient(new OpenAI({ baseURL: `${qwen.url}/v1`, apiKey: 'none', maxRetries: 0 }));
  setOpenAIAPI('responses');
  let ran = 0;
  const getWeather = agents.tool({
    name: 'get_weather', description: 'the weather of a city',
    parameters: z.object({ city: z.string() }),
    execute: async ({ city }) => { ran++; return `sunny in ${city}`; },
  });
  const agent = new Agent({
    name: 'weather', instructions: 'Answer with the tool.', model: 'tiny-qwen2',
    tools: [getWeather], toolUseBehavior: 'stop_on_first_tool',
    modelSettings: { toolChoice: 'required', temperature: 0, maxTokens: 200 },
  });
  const result = await run(agent, 'Weather in Paris?', { maxTurns: 2 });
  assert.equal(ran, 1);
  assert.match(result.finalOutput, /^sunny in /);
  // the next turn on the server's stored conversation (the SDK sends only the new input)
  assert.match(result.lastResponseId, /^resp_/);
  const more = await run(agent, 'And in Rome?', { maxTurns: 2,
    previousResponseId: result.lastResponseId });
  assert.equal(ran, 2);
  assert.match(more.finalOutput, /^sunny in /);
  assert.notEqual(more.lastResponseId, result.lastResponseId);
  const stored = await qwen.client.responses.retrieve(more.lastResponseId);
  assert.equal(stored.previous_response_id, result.lastResponseId);
  assert.ok(stored.usage.input_tokens > 0);
});

test('R1 template: deepseek_v3 calls after the reasoning, json after </think>', async () => {
  const r = await r1.client.chat.completions.create({
    model: 'tiny-qwen2', messages: ask, temperature: 0, max_tokens: 400,
    tools: [{ type: 'function', function: { name: 'get_weather',
      parameters: { type: 'object', properties: { city: { type: 'string' } },
        required: ['city'] } } }],
    tool_choice: 'required',
  });
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(m.tool_calls[0].function.name, 'get_weather');
  assert.equal(typeof JSON.parse(m.tool_calls[0].function.arguments).city, 'string');
  assert.equal(typeof m.reasoning_content, 'string');

  const j = await r1.client.chat.completions.parse({
    model: 'tiny-qwen2', messages: ask, temperature: 0, max_tokens: 400,
    response_format: zodResponseFormat(Weather, 'weather'),
  });
  assert.ok(Weather.safeParse(j.choices[0].message.parsed).success);

  // the Responses API: the <think> part as a reasoning item, then the JSON message
  const rr = await r1.client.responses.parse({
    model: 'tiny-qwen2', input: 'Weather in Paris?', temperature: 0, max_output_tokens: 400,
    text: { format: zodTextFormat(Weather, 'weather') },
  });
  assert.equal(rr.output[0].type, 'reasoning');
  assert.equal(rr.output[0].content[0].type, 'reasoning_text');
  assert.ok(rr.usage.output_tokens_details.reasoning_tokens > 0);
  assert.equal(rr.output.at(-1).type, 'message');
  assert.ok(Weather.safeParse(rr.output_parsed).success);
});

test('no silent ignores: unknown fields, bad formats, tool_choice, methods', async () => {
  const bad = async (body, param, code) => {
    const res = await http(`${qwen.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'tiny-qwen2', messages: ask, ...body }),
    });
    assert.equal(res.status, 400);
    const e = (await res.json()).error;
    assert.equal(e.param, param);
    if (code) assert.equal(e.code, code);
  };
  await bad({ web_search_options: {} }, 'web_search_options', 'unsupported_parameter');
  await bad({ guided_grammar: 'root ::= "a"' }, 'guided_grammar', 'unsupported_parameter');
  await bad({ response_format: { type: 'yaml' } }, 'response_format.type');
  await bad({ response_format: { type: 'json_schema', json_schema: { name: 'x',
    schema: { type: 'string', format: 'iri' } } } }, 'response_format.json_schema.schema',
  'unsupported_schema');
  // a format of no known meaning and no pattern (zod's jwt), formats with a checksum
  for (const t of [z.jwt(), z.creditCard(), z.iban()]) {
    await bad({ response_format: { type: 'json_schema',
      json_schema: { name: 'x', schema: z.toJSONSchema(z.object({ t })) } } },
    'response_format.json_schema.schema', 'unsupported_schema');
  }
  await bad({ tools: [{ type: 'function', function: { name: 'f' } }],
    tool_choice: { type: 'function', function: { name: 'g' } } }, 'tool_choice.function.name');
  await bad({ tool_choice: 'sometimes' }, 'tool_choice');
  // hints are accepted
  const ok = await qwen.client.chat.completions.create({
    model: 'tiny-qwen2', messages: ask, max_tokens: 2, user: 'u', metadata: { a: 'b' },
    store: false, service_tier: 'auto', reasoning_effort: 'low',
  });
  assert.equal(ok.choices.length, 1);
  for (const p of ['/v1/chat/completions', '/v1/responses', '/completions']) {
    const res = await http(`${qwen.url}${p}`);
    assert.equal(res.status, 405);
    assert.match(res.headers.get('allow'), /POST/);
  }
  const models = await (await http(`${qwen.url}/models`)).json();
  assert.equal(models.data[0].id, 'tiny-qwen2');
});

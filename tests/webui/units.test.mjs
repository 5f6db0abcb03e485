// units.test.mjs: the WebUI's browser-free modules run under node: the SSE parser (events cut
// at any byte, CR/LF/CRLF line ends, comments, multi-line data) and the import of exported
// conversations (what is accepted, what is refused and why, the session id kept or replaced).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SseParser } from '../../webui/src/sse.js';
import { EXPORT_FORMAT, exportJson, importJson, titleFrom } from '../../webui/src/store.js';

const STREAM = ': keep-alive\n\ndata: {"a":1}\n\nevent: x\r\ndata: line one\r\ndata: line two\r\n\r\n' +
  'data:no-space\rdata: [DONE]\n\n';
const EVENTS = ['{"a":1}', 'line one\nline two', 'no-space\n[DONE]'];

test('SSE parser: the same events however the stream is cut', () => {
  for (let size = 1; size <= STREAM.length; size++) {
    const p = new SseParser();
    const got = [];
    for (let i = 0; i < STREAM.length; i += size) got.push(...p.feed(STREAM.slice(i, i + size)));
    assert.deepEqual(got, EVENTS, `pieces of ${size}`);
  }
  // a CR at the end of one piece and its LF at the start of the next make one line end
  const p = new SseParser();
  assert.deepEqual([...p.feed('data: x\r'), ...p.feed('\n\r'), ...p.feed('\n')], ['x']);
  // no event without its blank line
  assert.deepEqual(new SseParser().feed('data: unfinished\n'), []);
});

test('import: exported files, bare conversations and arrays; bad files refused with a reason', () => {
  const conv = {
    id: 'c1', title: 'T', created: 1, updated: 2,
    messages: [{ id: 'm1', role: 'user', content: 'hi' },
      { id: 'm2', role: 'assistant', content: 'hello', reasoning: 'think', stats: { completionTokens: 3 }, pending: true }],
  };
  const exported = JSON.parse(exportJson([conv]));
  assert.equal(exported.format, EXPORT_FORMAT);
  const [back] = importJson(JSON.stringify(exported));
  assert.equal(back.title, 'T');
  assert.equal(back.messages[1].reasoning, 'think');
  assert.equal(back.messages[1].pending, undefined, 'an imported answer is never still streaming');
  assert.equal(importJson(JSON.stringify(conv)).length, 1);
  assert.equal(importJson(JSON.stringify([conv, conv])).length, 2);
  // a message without an id gets one
  assert.match(importJson('{"messages":[{"role":"user","content":"x"}]}')[0].messages[0].id, /^[0-9a-f]{24}$/);
  // the session id travels with the conversation; one missing or malformed is replaced
  assert.equal(importJson(JSON.stringify({ ...conv, sessionId: 'webui-abc:1.x_y' }))[0].sessionId, 'webui-abc:1.x_y');
  const fresh = importJson(JSON.stringify(conv))[0].sessionId;
  assert.match(fresh, /^webui-[0-9a-f]{24}$/);
  assert.notEqual(importJson(JSON.stringify(conv))[0].sessionId, fresh, 'each gets its own');
  for (const bad of ['', 'has space', 'x'.repeat(65), 7]) {
    assert.match(importJson(JSON.stringify({ ...conv, sessionId: bad }))[0].sessionId, /^webui-[0-9a-f]{24}$/, String(bad));
  }

  assert.throws(() => importJson('not json'), /Not a JSON file/);
  assert.throws(() => importJson('{"x":1}'), /No conversations/);
  assert.throws(() => importJson('[{"messages":[{"role":"system","content":"x"}]}]'), /Conversation 1 is not valid/);
  assert.throws(() => importJson('[{"messages":[{"role":"user","content":5}]}]'), /Conversation 1/);
  assert.throws(() => importJson(`[${JSON.stringify(conv)},{"messages":"no"}]`), /Conversation 2/);
});

test('titles from the first message', () => {
  assert.equal(titleFrom('  Hello\n  world  '), 'Hello world');
  assert.equal(titleFrom(''), 'New chat');
  const long = titleFrom('x'.repeat(100));
  assert.equal(long.length, 48);
  assert.ok(long.endsWith('…'));
});

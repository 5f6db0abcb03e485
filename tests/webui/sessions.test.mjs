// sessions.test.mjs: the WebUI's use of server-side sessions and its request switches, in
// headless Chromium against the real llaisys-server (tiny-qwen2): one session per conversation
// (sent in the body and as X-Session-Id, kept through a reload, export and import) whose later
// turns are served from the cached prefix; the debug panel; streaming off; prefix reuse off;
// deleting a conversation deletes its session; a session the server refuses does not stop the
// chat.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { before, test } from 'node:test';
import {
  SETTINGS_KEY, answerDone, http, launchBrowser, mainUrl, metricSum, openPage, send, shot, startServer,
  waitFor,
} from './helpers.mjs';

const CONVERSATIONS_KEY = 'llaisys.webui.conversations.v1';
// Long enough to fill several 16-token KV blocks: the prefix a later turn finds cached. It starts
// with a word of its own per run, so that the server's prefix cache holds nothing of it before.
const SYSTEM = `You are assistant ${Date.now().toString(36)}. ${Array.from({ length: 40 }, (_, i) => `rule${i}`).join(' ')}.`;
const SESSION_ID = /^webui-[0-9a-f]{24}$/;

let browser;
let url;
before(async () => {
  url = await mainUrl();
  browser = await launchBrowser();
});

// The stored conversations of the page (localStorage), newest first.
function stored(page) {
  return page.evaluate((k) => JSON.parse(localStorage.getItem(k) || '[]'), CONVERSATIONS_KEY);
}

async function sessionState(base, id, headers = {}) {
  const res = await http(`${base}/v1/sessions/${id}`, { headers });
  return { status: res.status, body: await res.json() };
}

// Tick a settings switch on or off through the dialog.
async function setSwitch(page, name, on) {
  await page.click('#open-settings');
  await page.setChecked(`[name=${name}]`, on);
  await page.click('#settings-save');
  await page.locator('#settings').waitFor({ state: 'hidden' });
}

test('a conversation is a session: later turns reuse the cached prefix; the id survives reload, export, import', async () => {
  const page = await openPage(browser, url, { storage: { [SETTINGS_KEY]: { max_tokens: 6, systemPrompt: SYSTEM } } });
  const cached = [];
  for (const q of ['First question', 'Second question', 'Third question']) {
    await send(page, q);
    cached.push(Number((await answerDone(page)).cached));
  }
  assert.equal(cached[0], 0, 'nothing cached on the first turn');
  assert.ok(cached[1] > 0 && cached[2] > cached[1], `cached prompt tokens per turn: ${cached}`);
  const sid = page.requests[0].body.session_id;
  assert.match(sid, SESSION_ID);
  for (const r of page.requests) {
    assert.equal(r.body.session_id, sid, 'every turn in the same session');
    assert.equal(r.headers['x-session-id'], sid, 'and the header for a load balancer');
    assert.equal(r.body.cache_prompt, undefined, 'prefix reuse is on by default');
  }
  const srv = await sessionState(url, sid);
  assert.equal(srv.status, 200);
  assert.equal(srv.body.turns, 3);
  assert.ok(srv.body.pinned_blocks > 0, JSON.stringify(srv.body));
  assert.equal((await stored(page))[0].sessionId, sid);

  // after a reload the conversation goes on in its session
  await page.reload();
  await page.locator('.msg-assistant .stats[data-finish]').first().waitFor();
  await send(page, 'Fourth question');
  const fourth = await answerDone(page);
  assert.equal(page.requests.at(-1).body.session_id, sid);
  assert.ok(Number(fourth.cached) > cached[2], `4th turn cached ${fourth.cached}`);
  assert.equal((await sessionState(url, sid)).body.turns, 4);

  // a new chat is a new session
  await page.click('#new-chat');
  await send(page, 'Another conversation');
  await answerDone(page);
  const other = page.requests.at(-1).body.session_id;
  assert.match(other, SESSION_ID);
  assert.notEqual(other, sid);

  // export keeps the ids; an import into an empty browser goes on in the same session
  const [download] = await Promise.all([page.waitForEvent('download'), page.click('#export')]);
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'llaisys-webui-')), 'export.json');
  await download.saveAs(file);
  const data = JSON.parse(fs.readFileSync(file, 'utf8'));
  assert.deepEqual(data.conversations.map((c) => c.sessionId), [other, sid]);
  assert.deepEqual(page.errors, []);
  await page.context().close();

  const fresh = await openPage(browser, url, { storage: { [SETTINGS_KEY]: { max_tokens: 6, systemPrompt: SYSTEM } } });
  await fresh.setInputFiles('#import-file', file);
  await fresh.locator('.notice', { hasText: 'Imported 2 conversations' }).waitFor();
  await fresh.locator('.conv-item', { hasText: 'First question' }).locator('.conv-open').click();
  await send(fresh, 'Fifth question');
  const fifth = await answerDone(fresh);
  assert.equal(fresh.requests.at(-1).body.session_id, sid);
  // (whole 16-token blocks: a short turn may add none)
  assert.ok(Number(fifth.cached) >= Number(fourth.cached), `5th turn cached ${fifth.cached}, 4th ${fourth.cached}`);
  // importing the same file again makes copies: new conversations, new sessions
  await fresh.setInputFiles('#import-file', file);
  await waitFor(async () => (await fresh.locator('.conv-item').count()) === 4);
  const ids = (await stored(fresh)).map((c) => c.sessionId);
  assert.equal(new Set(ids).size, 4, `session ids: ${ids}`);
  assert.deepEqual(fresh.errors, []);
  await fresh.context().close();
  fs.rmSync(path.dirname(file), { recursive: true, force: true });
});

test('debug panel: request body, usage, timings and the session as the server sees it', async () => {
  const page = await openPage(browser, url, { storage: { [SETTINGS_KEY]: { max_tokens: 8, systemPrompt: SYSTEM } } });
  await send(page, 'No panel yet');
  await answerDone(page);
  assert.equal(await page.locator('.debug').count(), 0, 'off by default');
  await setSwitch(page, 'debugPanel', true);
  // the answer from before shows its figures; its request was recorded too (same page)
  assert.equal(await page.locator('.debug').count(), 1);
  await send(page, 'With the panel');
  const stats = await answerDone(page);
  const panel = page.locator('.msg-assistant').last().locator('.debug');
  const session = panel.locator('.debug-session[data-state=found]');
  await session.waitFor();
  const usage = await panel.locator('.debug-usage').evaluate((el) => ({ ...el.dataset }));
  assert.deepEqual(usage, { prompt: stats.prompt, cached: stats.cached, completion: '8' });
  assert.ok(Number(usage.cached) > 0, 'the second turn hit the session prefix');
  const timings = await panel.locator('.debug-timings').evaluate((el) => ({ ...el.dataset, text: el.textContent }));
  assert.equal(timings.ttft, stats.ttft);
  // (no speed when the whole answer arrived in one read: then neither shows one)
  assert.equal(timings.tps, stats.tps);
  assert.ok(Number(timings.total) >= Number(timings.ttft), JSON.stringify(timings));
  assert.match(timings.text, stats.tps === undefined ? /TTFT \d+.*total/ : /TTFT \d+.*tok\/s.*total/);

  const sid = page.requests.at(-1).body.session_id;
  const s = await session.evaluate((el) => ({ ...el.dataset, text: el.textContent }));
  const server = (await sessionState(url, sid)).body;
  assert.equal(s.sessionId, sid);
  assert.equal(Number(s.turns), 2);
  assert.equal(Number(s.tokens), server.tokens);
  assert.equal(Number(s.tokens), Number(stats.prompt) + 8, 'the history is the prompt and the answer');
  assert.equal(Number(s.pinned), server.pinned_blocks);
  assert.ok(Number(s.pinned) > 0);
  assert.ok(Math.abs(Number(s.lastUse) - Date.now() / 1000) < 60, `last use ${s.lastUse}`);
  assert.match(s.text, /pinned blocks.*last use/);

  await panel.locator('.debug-request summary').click();
  const shown = JSON.parse(await panel.locator('.debug-request pre').textContent());
  assert.deepEqual(shown, page.requests.at(-1).body, 'the body exactly as sent');
  assert.equal(shown.stream, true);
  await shot(page, 'debug-panel');

  // switched off, the panels go
  await setSwitch(page, 'debugPanel', false);
  assert.equal(await page.locator('.debug').count(), 0);
  // after a reload the figures remain, the request is not kept
  await page.evaluate((k) => localStorage.setItem(k, JSON.stringify({ ...JSON.parse(localStorage.getItem(k)), debugPanel: true })), SETTINGS_KEY);
  await page.reload();
  await page.locator('.debug').first().waitFor();
  assert.match(await page.locator('.debug-session').last().textContent(), /not recorded/);
  assert.equal(await page.locator('.debug-usage').last().getAttribute('data-cached'), stats.cached);
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('streaming off: the answer arrives in one piece, rendered as a streamed one', async () => {
  const page = await openPage(browser, url, { storage: { [SETTINGS_KEY]: { max_tokens: 24, seed: 7, debugPanel: true } } });
  await send(page, 'Say something');
  const streamed = await answerDone(page);
  const html = await page.locator('.msg-assistant .answer').innerHTML();
  assert.ok(html.length > 0);

  await setSwitch(page, 'stream', false);
  // record the answer's lengths at every frame: one step from nothing to all of it
  const sampling = page.evaluate(() => new Promise((resolve) => {
    const lengths = [];
    const end = Date.now() + 30000;
    const tick = () => {
      const answer = document.querySelector('.msg-assistant:last-of-type .answer');
      const done = document.querySelector('.msg-assistant:last-of-type .stats[data-finish]');
      if (answer && lengths.at(-1) !== answer.textContent.length) lengths.push(answer.textContent.length);
      if (done || Date.now() > end) resolve(lengths);
      else requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  }));
  await page.click('[data-action=regenerate]');
  const lengths = await sampling;
  const stats = await answerDone(page);
  const body = page.requests.at(-1).body;
  assert.equal(body.stream, false);
  assert.equal(body.stream_options, undefined);
  assert.equal(body.session_id, page.requests[0].body.session_id, 'still in its session');
  assert.deepEqual(lengths.filter((n) => n > 0).length, 1, `answer lengths seen: ${lengths}`);
  assert.equal(stats.tokens, '24');
  assert.equal(stats.finish, 'length');
  assert.equal(stats.prompt, streamed.prompt);
  assert.equal(stats.ttft, undefined, 'no first-token time without a stream');
  assert.equal(await page.locator('.msg-assistant .answer').innerHTML(), html, 'same seed, same rendering');
  const timings = page.locator('.debug-timings');
  assert.equal(await timings.getAttribute('data-streamed'), 'false');
  assert.match(await timings.textContent(), /not streamed.*tok\/s over the whole request/);
  await shot(page, 'stream-off');
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('prefix reuse off: cache_prompt false and no cached tokens; back on, the cache serves again', async () => {
  const page = await openPage(browser, url, { storage: { [SETTINGS_KEY]: { max_tokens: 6, systemPrompt: SYSTEM } } });
  await send(page, 'Turn one');
  await answerDone(page);
  await send(page, 'Turn two');
  assert.ok(Number((await answerDone(page)).cached) > 0, 'the session prefix is cached');

  await setSwitch(page, 'reusePrefix', false);
  await send(page, 'Turn three');
  const off = await answerDone(page);
  assert.equal(page.requests.at(-1).body.cache_prompt, false);
  assert.equal(off.cached, '0');
  assert.match(off.text, /prompt \d+/);
  assert.doesNotMatch(off.text, /cached/);
  await page.click('[data-action=regenerate]');
  assert.equal((await answerDone(page)).cached, '0', 'not even the same prompt again');

  await setSwitch(page, 'reusePrefix', true);
  await send(page, 'Turn four');
  const on = await answerDone(page);
  assert.equal(page.requests.at(-1).body.cache_prompt, undefined);
  assert.ok(Number(on.cached) > 0, `cached ${on.cached}`);
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('deleting a conversation deletes its session on the server', async () => {
  const page = await openPage(browser, url, { storage: { [SETTINGS_KEY]: { max_tokens: 6, systemPrompt: SYSTEM } } });
  await send(page, 'Keep me');
  await answerDone(page);
  const keep = page.requests.at(-1).body.session_id;
  await page.click('#new-chat');
  await send(page, 'Delete me');
  await answerDone(page);
  const gone = page.requests.at(-1).body.session_id;
  assert.equal((await sessionState(url, gone)).status, 200);
  const active = await metricSum(url, 'llaisys_sessions_active');
  const pinned = await metricSum(url, 'llaisys_session_pinned_blocks');
  const own = (await sessionState(url, gone)).body.pinned_blocks;
  assert.ok(own > 0);

  page.once('dialog', (d) => d.accept());
  const deleted = page.waitForRequest((r) => r.method() === 'DELETE');
  await page.locator('.conv-item', { hasText: 'Delete me' }).locator('.conv-delete').click();
  const del = await deleted;
  assert.ok(del.url().endsWith(`/v1/sessions/${gone}`), del.url());
  assert.equal(del.headers()['x-session-id'], gone);
  assert.ok(await waitFor(async () => (await sessionState(url, gone)).status === 404, 10000), 'the session is gone');
  assert.equal(await metricSum(url, 'llaisys_sessions_active'), active - 1);
  // its blocks are unpinned (those it shares with the other session, the system prompt's, stay)
  assert.ok(await waitFor(async () => (await metricSum(url, 'llaisys_session_pinned_blocks')) < pinned, 10000),
    'its pinned blocks are released');
  assert.ok(await metricSum(url, 'llaisys_session_pinned_blocks') >= pinned - own);
  assert.equal((await sessionState(url, keep)).status, 200, 'the other conversation keeps its session');
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('a session the server refuses does not stop the chat', async () => {
  // another API key's session (404 for this key): the conversation takes a new session
  const srv = await startServer(['--api-key', 'key-a', '--api-key', 'key-b']);
  const taken = 'webui-taken-by-key-a';
  const res = await http(`${srv.url}/v1/sessions`, {
    method: 'POST', headers: { Authorization: 'Bearer key-a' }, body: JSON.stringify({ id: taken }),
  });
  assert.equal(res.status, 200);
  const conv = {
    id: 'c0', sessionId: taken, title: 'Old chat', created: 1, updated: 1,
    messages: [{ id: 'm0', role: 'user', content: 'Hello' }, { id: 'm1', role: 'assistant', content: 'Hi' }],
  };
  const page = await openPage(browser, srv.url, {
    storage: { [SETTINGS_KEY]: { max_tokens: 4, apiKey: 'key-b' }, [CONVERSATIONS_KEY]: [conv] },
  });
  await send(page, 'Still there?');
  const stats = await answerDone(page);
  assert.equal(stats.tokens, '4');
  assert.equal(await page.locator('.msg-error').count(), 0);
  const [first, second] = page.requests;
  assert.equal(page.requests.length, 2);
  assert.equal(first.body.session_id, taken);
  assert.match(second.body.session_id, SESSION_ID);
  assert.equal((await stored(page))[0].sessionId, second.body.session_id, 'the new session is kept');
  const mine = await sessionState(srv.url, second.body.session_id, { Authorization: 'Bearer key-b' });
  assert.equal(mine.body.turns, 1);
  assert.equal((await sessionState(srv.url, taken, { Authorization: 'Bearer key-a' })).body.turns, 0, "key-a's session untouched");
  await page.context().close();
  await srv.stop();

  // no room for another session (--max-sessions 1, the one there busy: 429): this turn goes
  // without a session, the next tries again
  const full = await startServer(['--max-sessions', '1']);
  const hold = new AbortController();
  const busy = http(`${full.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, signal: hold.signal,
    body: JSON.stringify({ messages: [{ role: 'user', content: 'Go on and on' }], max_tokens: 3500, ignore_eos: true, session_id: 'holder', stream: true }),
  }).then((r) => r.body.getReader().read()).catch(() => {});
  await busy;
  assert.equal((await sessionState(full.url, 'holder')).body.in_flight, 1);
  const crowded = await openPage(browser, full.url, { storage: { [SETTINGS_KEY]: { max_tokens: 4 } } });
  await send(crowded, 'Room for me?');
  assert.equal((await answerDone(crowded)).tokens, '4');
  assert.deepEqual(crowded.requests.map((r) => !!r.body.session_id), [true, false]);
  hold.abort();
  assert.ok(await waitFor(async () => (await sessionState(full.url, 'holder')).body.in_flight === 0, 10000));
  await send(crowded, 'And now?');
  assert.equal((await answerDone(crowded)).tokens, '4');
  assert.equal(crowded.requests.at(-1).body.session_id, crowded.requests[0].body.session_id, 'back in its session');
  assert.equal(crowded.requests.length, 3, 'the idle holder made room without a refusal');
  assert.equal(await crowded.locator('.msg-error').count(), 0);
  assert.deepEqual(crowded.errors, []);
  await crowded.context().close();
  await full.stop();

  // a server without sessions (an older llaisys refuses the field: staged here in the server's
  // error format); the turn goes again without it and later turns do not send it
  const old = await openPage(browser, url, { storage: { [SETTINGS_KEY]: { max_tokens: 4, debugPanel: true } } });
  await old.route('**/v1/chat/completions', (route) => {
    if (!route.request().postDataJSON().session_id) return route.continue();
    return route.fulfill({
      status: 400,
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ error: { message: "'session_id' is not supported by this server", type: 'invalid_request_error', param: 'session_id', code: 'unsupported_parameter' } }),
    });
  });
  await send(old, 'One');
  assert.equal((await answerDone(old)).tokens, '4');
  await send(old, 'Two');
  assert.equal((await answerDone(old)).tokens, '4');
  assert.deepEqual(old.requests.map((r) => !!r.body.session_id), [true, false, false]);
  assert.equal(old.requests[2].headers['x-session-id'], undefined);
  assert.match(await old.locator('.debug-session').last().textContent(), /none \(not sent/);
  assert.equal(await old.locator('.msg-error').count(), 0);
  assert.deepEqual(old.errors, []);
  await old.context().close();
});

// errors.test.mjs: errors shown inline in the WebUI with the server's own message, and the UI
// recovering: the server stopped (then started again), a missing API key (401, then set in
// Settings), a full queue (429), a conversation longer than the context (400).
import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import {
  SETTINGS_KEY, answerDone, freePort, http, launchBrowser, mainUrl, openPage, send, shot, startServer,
  waitFor,
} from './helpers.mjs';

let browser;
before(async () => {
  browser = await launchBrowser();
});

const errorBox = (page) => page.locator('.msg-assistant').last().locator('.msg-error');

test('server stopped: the error shows inline, and Retry works once it is back', async () => {
  const port = await freePort();
  let srv = await startServer([], { port });
  const page = await openPage(browser, srv.url, { storage: { [SETTINGS_KEY]: { max_tokens: 5 } } });
  await page.locator('#model').filter({ hasText: 'tiny-qwen2' }).waitFor();
  const stopped = await srv.stop();
  assert.equal(stopped.code, 0);

  await send(page, 'Is anyone there?');
  await errorBox(page).waitFor();
  assert.match(await errorBox(page).textContent(), /Cannot reach the server/);
  assert.match(await errorBox(page).textContent(), /Check that the server is running/);
  assert.equal((await answerDone(page)).finish, 'error');
  assert.ok(await page.locator('#send').isVisible(), 'the composer is usable again');
  await shot(page, 'error-server-down');

  srv = await startServer([], { port });
  await page.click('[data-action=retry]');
  const stats = await answerDone(page);
  assert.equal(stats.tokens, '5');
  assert.equal(await page.locator('.msg-error').count(), 0);
  assert.equal(await page.locator('.msg').count(), 2, 'the failed answer was replaced');
  assert.deepEqual(page.errors, []);
  await page.context().close();
  await srv.stop();
});

test('401: the server\'s message inline; with the key set in Settings the request carries it', async () => {
  const srv = await startServer(['--api-key', 'ui-secret']);
  const page = await openPage(browser, srv.url, { storage: { [SETTINGS_KEY]: { max_tokens: 4 } } });
  // the model list is refused too: the header says so and a notice asks for the key
  await page.locator('.notice-error', { hasText: 'API key' }).waitFor();
  assert.equal(await page.locator('#model').textContent(), 'API key needed');
  await send(page, 'Let me in');
  await errorBox(page).waitFor();
  const text = await errorBox(page).textContent();
  const expected = (await (await http(`${srv.url}/v1/chat/completions`, { method: 'POST', body: '{}' })).json()).error.message;
  assert.ok(text.includes('Error 401') && text.includes(expected), text);
  await shot(page, 'error-401');

  await errorBox(page).locator('[data-action=settings]').click();
  await page.fill('[name=apiKey]', 'ui-secret');
  await page.click('#settings-save');
  await page.locator('#model').filter({ hasText: 'tiny-qwen2' }).waitFor();
  await page.click('[data-action=retry]');
  assert.equal((await answerDone(page)).tokens, '4');
  assert.equal(page.requests.at(-1).headers.authorization, 'Bearer ui-secret');
  // the key is remembered in this browser
  await page.reload();
  await page.locator('#model').filter({ hasText: 'tiny-qwen2' }).waitFor();
  assert.deepEqual(page.errors, []);
  await page.context().close();
  await srv.stop();
});

test('a conversation longer than the context: 400 with the server\'s message and a hint', async () => {
  const srv = await startServer(['--ctx', '64']);
  const page = await openPage(browser, srv.url);
  const long = Array.from({ length: 120 }, (_, i) => `word${i}`).join(' ');
  await send(page, long);
  await errorBox(page).waitFor();
  const text = await errorBox(page).textContent();
  assert.match(text, /Error 400/);
  assert.match(text, /Start a new chat, or edit an earlier message/);
  const res = await http(`${srv.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: long }] }),
  });
  assert.equal(res.status, 400);
  assert.ok(text.includes((await res.json()).error.message), text);
  await shot(page, 'error-context-too-long');

  // editing the message down recovers
  const user = page.locator('.msg-user').first();
  await user.hover();
  await user.locator('[data-action=edit]').click();
  await page.fill('.edit-input', 'short now');
  await page.click('[data-action=edit-save]');
  const stats = await answerDone(page);
  assert.ok(['length', 'stop'].includes(stats.finish), stats.finish);
  assert.equal(await page.locator('.msg-error').count(), 0);
  assert.ok(await waitFor(async () => (await page.locator('.msg').count()) === 2));
  assert.deepEqual(page.errors, []);
  await page.context().close();
  await srv.stop();
});

// The tiny model empties any queue too fast to fill it reliably, so the 429 is the one answer
// here that is staged (in the server's error format); the retry goes to the real server.
test('429 (server busy): the message and a hint inline, and Retry works', async () => {
  const page = await openPage(browser, await mainUrl(), { storage: { [SETTINGS_KEY]: { max_tokens: 4 } } });
  const busy = {
    error: { message: 'The server is at capacity (256 requests queued); retry later', type: 'rate_limit_error', param: null, code: 'queue_full' },
  };
  await page.route('**/v1/chat/completions', (route) => route.fulfill({
    status: 429, headers: { 'Content-Type': 'application/json', 'Retry-After': '1' }, body: JSON.stringify(busy),
  }));
  await send(page, 'Busy?');
  await errorBox(page).waitFor();
  const text = await errorBox(page).textContent();
  assert.match(text, /Error 429/);
  assert.ok(text.includes(busy.error.message), text);
  assert.match(text, /The server is busy: retry in a moment/);
  await shot(page, 'error-429');
  await page.unroute('**/v1/chat/completions');
  await page.click('[data-action=retry]');
  assert.equal((await answerDone(page)).tokens, '4');
  assert.equal(await page.locator('.msg-error').count(), 0);
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

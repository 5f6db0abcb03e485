// chat.test.mjs: the WebUI in headless Chromium against the real llaisys-server (tiny-qwen2):
// streaming in several steps, stop (the server counts a cancellation), history kept across a
// reload, conversations (new, switch, rename, delete), edit-and-continue, regenerate, settings
// that change the request, export and import, the phone layout and the dark theme.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { before, test } from 'node:test';
import {
  PHONE, SETTINGS_KEY, answerDone, launchBrowser, mainUrl, metricSum, openPage, send, shot, waitFor,
} from './helpers.mjs';

let browser;
let url;
before(async () => {
  url = await mainUrl();
  browser = await launchBrowser();
});

// The texts of the messages on screen, in order: [{role, text}].
function transcript(page) {
  return page.$$eval('.msg', (els) => els.map((el) => ({
    role: el.classList.contains('msg-user') ? 'user' : 'assistant',
    text: (el.querySelector('.bubble, .answer') || el).textContent,
  })));
}

test('a message streams in: the answer grows in several steps, then shows its figures', async () => {
  const page = await openPage(browser, url, { storage: { [SETTINGS_KEY]: { max_tokens: 400 } } });
  await page.locator('#model').filter({ hasText: 'tiny-qwen2' }).waitFor();
  // record, at every frame while it streams, the answer's length and whether the page shows it
  // as streaming with Send turned into Stop (sampled in the page: the tiny model makes a token
  // in about a millisecond on a quiet machine, so 400 of them span a few frames, and they can
  // finish before a locator's polling would see those transient states)
  const sampling = page.evaluate(() => new Promise((resolve) => {
    const lengths = [];
    let streaming = false;
    let stop = false;
    const end = Date.now() + 30000;
    const tick = () => {
      const answer = document.querySelector('.msg-assistant:last-of-type .answer');
      const done = document.querySelector('.msg-assistant:last-of-type .stats[data-finish]');
      const stopBtn = document.querySelector('#stop');
      if (answer && lengths.at(-1) !== answer.textContent.length) lengths.push(answer.textContent.length);
      streaming ||= !!document.querySelector('.msg-assistant.streaming');
      stop ||= !!(stopBtn && stopBtn.offsetParent !== null);
      if (done || Date.now() > end) resolve({ lengths, done: !!done, streaming, stop });
      else requestAnimationFrame(tick);
    };
    tick();
  }));
  await send(page, 'Tell me a long story');
  const { lengths, done, streaming, stop } = await sampling;
  assert.ok(done, 'the answer finished');
  assert.ok(streaming, 'the answer was marked as streaming while it streamed');
  assert.ok(stop, 'Send turned into Stop while the answer streamed');
  const steps = lengths.filter((n) => n > 0);
  assert.ok(steps.length >= 3, `the answer appeared in ${steps.length} step(s): ${lengths.join(',')}`);
  const stats = await answerDone(page);
  assert.equal(stats.tokens, '400');
  assert.equal(stats.finish, 'length');
  assert.ok(Number(stats.ttft) > 0 && Number(stats.tps) > 0, JSON.stringify(stats));
  assert.ok(Number(stats.prompt) > 0, 'prompt tokens from usage');
  assert.match(stats.text, /400 tokens.*first token.*tok\/s.*prompt \d+/);
  assert.ok(await page.locator('#send').isVisible());
  const [req] = page.requests;
  assert.equal(req.body.stream, true);
  assert.equal(req.body.model, 'tiny-qwen2');
  assert.deepEqual(req.body.messages, [{ role: 'user', content: 'Tell me a long story' }]);
  assert.match(req.headers['x-request-id'], /^webui-[0-9a-f]+$/);
  assert.equal(await page.locator('.conv-item').count(), 1);
  assert.equal(await page.locator('#conv-title').textContent(), 'Tell me a long story');
  await shot(page, 'desktop-light-chat');
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('Stop aborts the answer mid-stream and the server counts a cancellation', async () => {
  const page = await openPage(browser, url, { storage: { [SETTINGS_KEY]: { max_tokens: 3500 } } });
  const before = await metricSum(url, 'llaisys_request_cancellations_total');
  await send(page, 'Count to a million');
  const answer = page.locator('.msg-assistant .answer');
  await waitFor(async () => (await answer.textContent()).length > 20, 20000);
  await shot(page, 'streaming');
  await page.click('#stop');
  const stats = await answerDone(page);
  assert.equal(stats.finish, 'stopped');
  assert.match(stats.text, /stopped/);
  const cancelled = await waitFor(async () => (await metricSum(url, 'llaisys_request_cancellations_total')) > before, 10000);
  assert.ok(cancelled, 'llaisys_request_cancellations_total went up');
  assert.ok(await waitFor(async () => (await metricSum(url, 'llaisys_num_requests_running')) === 0, 10000),
    'nothing left running on the server');
  const kept = await answer.textContent();
  assert.ok(kept.length > 20, 'the partial answer stays');
  assert.ok(Number(stats.tokens) < 3500, `stopped early (${stats.tokens} tokens)`);
  assert.ok(await page.locator('#send').isVisible(), 'the composer is back');
  // and the conversation goes on
  await page.evaluate((k) => localStorage.setItem(k, JSON.stringify({ max_tokens: 4 })), SETTINGS_KEY);
  await page.reload();
  await send(page, 'Go on');
  assert.equal((await answerDone(page)).tokens, '4');
  assert.equal(page.requests.at(-1).body.messages.length, 3);
  await shot(page, 'stopped');
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('history survives a reload; conversations can be switched, renamed and deleted', async () => {
  const page = await openPage(browser, url, { storage: { [SETTINGS_KEY]: { max_tokens: 6 } } });
  await send(page, 'First conversation');
  await answerDone(page);
  await page.click('#new-chat');
  assert.equal(await page.locator('.msg').count(), 0);
  await send(page, 'Second conversation');
  await answerDone(page);
  const before = await transcript(page);

  await page.reload();
  await page.locator('.msg-assistant .stats[data-finish]').waitFor();
  assert.deepEqual(await transcript(page), before, 'the open conversation is restored');
  const names = await page.locator('.conv-name').allTextContents();
  assert.deepEqual(names, ['Second conversation', 'First conversation']);
  assert.equal((await answerDone(page)).tokens, '6', 'figures are kept too');

  await page.locator('.conv-item', { hasText: 'First conversation' }).locator('.conv-open').click();
  assert.equal((await transcript(page))[0].text, 'First conversation');
  assert.equal(await page.locator('#conv-title').textContent(), 'First conversation');

  // rename
  await page.locator('.conv-item.active .conv-rename').click();
  await page.fill('.conv-rename-input', 'Renamed chat');
  await page.press('.conv-rename-input', 'Enter');
  assert.equal(await page.locator('.conv-item.active .conv-name').textContent(), 'Renamed chat');
  // delete the other one (confirm)
  page.once('dialog', (d) => d.accept());
  await page.locator('.conv-item', { hasText: 'Second conversation' }).locator('.conv-delete').click();
  await waitFor(async () => (await page.locator('.conv-item').count()) === 1);

  await page.reload();
  assert.deepEqual(await page.locator('.conv-name').allTextContents(), ['Renamed chat']);
  assert.equal((await transcript(page))[0].text, 'First conversation');
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('edit an earlier message: later turns are dropped and the answer starts over; regenerate', async () => {
  const page = await openPage(browser, url, { storage: { [SETTINGS_KEY]: { max_tokens: 6 } } });
  await send(page, 'Question one');
  await answerDone(page);
  await send(page, 'Question two');
  await answerDone(page);
  assert.equal(await page.locator('.msg').count(), 4);
  assert.equal(page.requests.at(-1).body.messages.length, 3);

  const first = page.locator('.msg-user').first();
  await first.hover();
  await first.locator('[data-action=edit]').click();
  await page.fill('.edit-input', 'Question one, edited');
  await shot(page, 'editing');
  await page.click('[data-action=edit-save]');
  await answerDone(page);
  const t = await transcript(page);
  assert.equal(t.length, 2, 'the later turns are gone');
  assert.deepEqual(t[0], { role: 'user', text: 'Question one, edited' });
  assert.deepEqual(page.requests.at(-1).body.messages, [{ role: 'user', content: 'Question one, edited' }]);
  assert.equal(await page.locator('.conv-name').first().textContent(), 'Question one, edited');

  // regenerate the last answer: same request again, the answer replaced (not added)
  const oldId = await page.locator('.msg-assistant').getAttribute('data-id');
  const n = page.requests.length;
  await page.click('[data-action=regenerate]');
  await waitFor(async () => (await page.locator('.msg-assistant').getAttribute('data-id')) !== oldId);
  await answerDone(page);
  assert.equal(page.requests.length, n + 1);
  assert.deepEqual(page.requests.at(-1).body.messages, page.requests.at(-2).body.messages);
  assert.equal(await page.locator('.msg').count(), 2);
  // only the last answer offers it
  await send(page, 'Question three');
  await answerDone(page);
  assert.equal(await page.locator('[data-action=regenerate]').count(), 1);
  assert.equal(await page.locator('.msg-assistant').last().locator('[data-action=regenerate]').count(), 1);
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('settings change the request: system prompt, sampling, max tokens, seed, thinking', async () => {
  const page = await openPage(browser, url);
  await page.click('#open-settings');
  await page.fill('[name=systemPrompt]', 'You are terse.');
  await page.fill('[name=temperature]', '0.7');
  await page.fill('[name=top_p]', '0.9');
  await page.fill('[name=top_k]', '20');
  await page.fill('[name=max_tokens]', '9');
  await page.fill('[name=seed]', '1234');
  await page.selectOption('[name=thinking]', 'off');
  await shot(page, 'settings');
  // an invalid value is refused with a message, nothing saved
  await page.fill('[name=temperature]', '7');
  await page.click('#settings-save');
  assert.match(await page.locator('#settings-error').textContent(), /Temperature/);
  assert.ok(await page.locator('#settings').isVisible());
  await page.fill('[name=temperature]', '0.7');
  await page.click('#settings-save');
  await page.locator('#settings').waitFor({ state: 'hidden' });

  await send(page, 'Hello');
  const stats = await answerDone(page);
  const body = page.requests.at(-1).body;
  assert.deepEqual(body.messages, [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Hello' }]);
  assert.equal(body.temperature, 0.7);
  assert.equal(body.top_p, 0.9);
  assert.equal(body.top_k, 20);
  assert.equal(body.max_tokens, 9);
  assert.equal(body.seed, 1234);
  assert.deepEqual(body.chat_template_kwargs, { enable_thinking: false });
  assert.equal(stats.tokens, '9', 'the server honoured max_tokens');
  // the same seed gives the same answer again
  const text = await page.locator('.msg-assistant .answer').textContent();
  await page.click('[data-action=regenerate]');
  await page.locator('.msg-assistant.streaming').waitFor({ state: 'detached', timeout: 20000 }).catch(() => {});
  await answerDone(page);
  assert.equal(await page.locator('.msg-assistant .answer').textContent(), text);

  // kept across a reload, and back to the server's defaults after Reset
  await page.reload();
  await page.click('#open-settings');
  assert.equal(await page.inputValue('[name=seed]'), '1234');
  assert.equal(await page.inputValue('[name=thinking]'), 'off');
  await page.click('#settings-reset');
  await page.click('#settings-save');
  await send(page, 'Again');
  await page.locator('#stop').waitFor();
  await page.click('#stop');
  await answerDone(page);
  const plain = page.requests.at(-1).body;
  for (const k of ['temperature', 'top_p', 'top_k', 'max_tokens', 'seed', 'chat_template_kwargs']) {
    assert.equal(plain[k], undefined, k);
  }
  assert.equal(plain.messages[0].role, 'user', 'no system prompt');
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('export to JSON and import into an empty browser', async () => {
  const page = await openPage(browser, url, { storage: { [SETTINGS_KEY]: { max_tokens: 5 } } });
  await send(page, 'Exported one');
  await answerDone(page);
  await page.click('#new-chat');
  await send(page, 'Exported two');
  await answerDone(page);
  const [download] = await Promise.all([page.waitForEvent('download'), page.click('#export')]);
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'llaisys-webui-')), 'export.json');
  await download.saveAs(file);
  const data = JSON.parse(fs.readFileSync(file, 'utf8'));
  assert.equal(data.format, 'llaisys-webui-conversations');
  assert.deepEqual(data.conversations.map((c) => c.title), ['Exported two', 'Exported one']);
  assert.deepEqual(data.conversations[1].messages.map((m) => m.role), ['user', 'assistant']);
  await page.context().close();

  const fresh = await openPage(browser, url);
  assert.equal(await fresh.locator('.conv-item').count(), 0);
  await fresh.setInputFiles('#import-file', file);
  await fresh.locator('.notice', { hasText: 'Imported 2 conversations' }).waitFor();
  assert.deepEqual(await fresh.locator('.conv-name').allTextContents(), ['Exported two', 'Exported one']);
  assert.equal((await transcript(fresh))[0].text, 'Exported two');
  // importing the same file again adds copies, never overwrites
  await fresh.setInputFiles('#import-file', file);
  await waitFor(async () => (await fresh.locator('.conv-item').count()) === 4);
  // a file that is not an export is refused with a message
  await fresh.setInputFiles('#import-file', { name: 'bad.json', mimeType: 'application/json', buffer: Buffer.from('{"x":1}') });
  await fresh.locator('.notice-error', { hasText: 'Import failed' }).waitFor();
  assert.equal(await fresh.locator('.conv-item').count(), 4);
  assert.deepEqual(fresh.errors, []);
  await fresh.context().close();
  fs.rmSync(path.dirname(file), { recursive: true, force: true });
});

test('phone-sized screen and dark theme', async () => {
  const page = await openPage(browser, url, { ...PHONE, colorScheme: 'dark', storage: { [SETTINGS_KEY]: { max_tokens: 40 } } });
  const sidebar = page.locator('#sidebar');
  const inView = () => sidebar.evaluate((el) => el.getBoundingClientRect().right > 1);
  assert.equal(await inView(), false, 'the sidebar is off screen on a phone');
  await send(page, 'Hi from a phone');
  await answerDone(page);
  const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  assert.equal(bg, 'rgb(23, 24, 28)', 'the system dark theme is followed');
  const box = await page.locator('#input').boundingBox();
  assert.ok(box.x >= 0 && box.x + box.width <= 390, 'the composer fits the screen');
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth);
  assert.equal(overflow, false, 'no sideways scrolling');
  await shot(page, 'phone-dark-chat');
  await page.click('#toggle-sidebar');
  await waitFor(async () => (await sidebar.evaluate((el) => el.getBoundingClientRect().left)) === 0, 3000);
  await shot(page, 'phone-dark-sidebar');
  await page.click('#new-chat');
  assert.ok(await waitFor(async () => !(await inView()), 3000), 'choosing closes the drawer');

  // the theme button overrides the system's choice, and sticks
  await page.click('#toggle-theme');
  assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), 'light');
  assert.equal(await page.evaluate(() => getComputedStyle(document.body).backgroundColor), 'rgb(255, 255, 255)');
  await page.reload();
  assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), 'light');
  await page.locator('.conv-item').first().waitFor({ state: 'attached' });
  await page.click('#toggle-sidebar');
  await page.locator('.conv-item', { hasText: 'Hi from a phone' }).locator('.conv-open').click();
  await page.locator('.msg-assistant .stats[data-finish]').waitFor();
  assert.ok(await waitFor(async () => !(await inView()), 3000), 'the drawer closed');
  await shot(page, 'phone-light-chat');
  assert.deepEqual(page.errors, []);
  await page.context().close();

  const desk = await openPage(browser, url, { colorScheme: 'dark', storage: { [SETTINGS_KEY]: { max_tokens: 30 } } });
  await send(desk, 'Hello in the dark');
  await answerDone(desk);
  await shot(desk, 'desktop-dark-chat');
  await desk.context().close();
});

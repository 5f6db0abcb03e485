// render.test.mjs: how the WebUI shows what a model writes, for text the tiny random model
// cannot produce: Markdown (lists, tables, highlighted code, math), raw HTML that must never
// run, and R1 reasoning (reasoning_content, or <think>…</think> in the text) in a "Thinking"
// panel apart from the answer. The page comes from the real server; only the answer's stream
// is replaced, by a fetch stub that sends scripted SSE events with pauses between them.
import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import { answerDone, launchBrowser, mainUrl, openPage, send, shot, waitFor } from './helpers.mjs';

let browser;
let url;
before(async () => {
  url = await mainUrl();
  browser = await launchBrowser();
});

// Make the page's POSTs to v1/chat/completions answer with `deltas` as SSE, one event every
// delayMs; the request bodies are kept in window.__bodies.
async function stubChat(page, deltas, { delayMs = 0, usage = null } = {}) {
  await page.evaluate(({ deltas, delayMs, usage }) => {
    const realFetch = window.__realFetch || window.fetch;
    window.__realFetch = realFetch;
    window.__bodies = window.__bodies || [];
    window.fetch = (input, init = {}) => {
      if (!String(input).endsWith('v1/chat/completions')) return realFetch(input, init);
      window.__bodies.push(JSON.parse(init.body));
      const base = { id: 'chatcmpl-stub', object: 'chat.completion.chunk', created: 0, model: 'stub' };
      const events = deltas.map((d) => ({ ...base, choices: [{ index: 0, delta: d, finish_reason: null }] }));
      events.push({ ...base, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] });
      if (usage) events.push({ ...base, choices: [], usage });
      const enc = new TextEncoder();
      const body = new ReadableStream({
        async start(ctrl) {
          for (const e of events) {
            ctrl.enqueue(enc.encode(`data: ${JSON.stringify(e)}\n\n`));
            if (delayMs) await new Promise((r) => setTimeout(r, delayMs));
          }
          ctrl.enqueue(enc.encode('data: [DONE]\n\n'));
          ctrl.close();
        },
      });
      return Promise.resolve(new Response(body, { status: 200, headers: { 'Content-Type': 'text/event-stream' } }));
    };
  }, { deltas, delayMs, usage });
}

const MARKDOWN = `# Title

Some **bold** text, \`inline code\`, a [link](https://example.com/) and [a bad one](javascript:window.__xss=3).

1. first
2. second

| name | value |
|------|-------|
| a    | 1     |

\`\`\`python
def add(x, y):
    return x + y  # sum
\`\`\`

Inline math $E = mc^2$ and a display formula:

$$\\int_0^1 x^2\\,dx = \\frac{1}{3}$$

Prices like $5 and $10 stay text.

<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>
<b onmouseover="window.__xss=4">hover me</b> <iframe src="https://example.com/"></iframe>

![tracker](http://127.0.0.1:9/pixel.png)
`;

test('Markdown: lists, tables, highlighted code, math; raw HTML shown as text and never run', async () => {
  const page = await openPage(browser, url);
  const outside = [];
  page.on('request', (r) => { if (!r.url().startsWith(url)) outside.push(r.url()); });
  // in pieces, as a model would stream it
  const pieces = MARKDOWN.match(/[\s\S]{1,17}/g).map((content) => ({ content }));
  await stubChat(page, pieces, { usage: { prompt_tokens: 12, completion_tokens: pieces.length, total_tokens: 12 + pieces.length, prompt_tokens_details: { cached_tokens: 8 } } });
  await send(page, 'Show me some Markdown');
  const stats = await answerDone(page);
  assert.equal(stats.cached, '8');
  assert.match(stats.text, /prompt 12 \(8 cached\)/);
  const answer = page.locator('.msg-assistant .answer');
  assert.equal(await answer.locator('h1').textContent(), 'Title');
  assert.equal(await answer.locator('ol > li').count(), 2);
  assert.equal(await answer.locator('table td').count(), 2);
  assert.equal(await answer.locator('strong').textContent(), 'bold');
  const code = answer.locator('pre code.language-python');
  assert.match(await code.locator('.hljs-keyword').first().textContent(), /def/);
  assert.equal(await code.locator('.hljs-comment').textContent(), '# sum');
  assert.equal(await answer.locator('.code-lang').textContent(), 'python');
  // formulas become MathML once the math chunk has loaded
  await answer.locator('.math-display math').waitFor();
  assert.equal(await answer.locator('.math math').count(), 2);
  assert.match(await answer.textContent(), /Prices like \$5 and \$10 stay text/);
  // links open in a new tab, safely; the javascript: one has no target to run
  const good = answer.locator('a', { hasText: 'link' }).first();
  assert.equal(await good.getAttribute('href'), 'https://example.com/');
  assert.equal(await good.getAttribute('target'), '_blank');
  assert.match(await good.getAttribute('rel'), /noopener/);
  const bad = await answer.locator('a', { hasText: 'a bad one' }).getAttribute('href');
  assert.ok(bad === null || !/^javascript:/i.test(bad), `href ${bad}`);
  // raw HTML: shown, not parsed, not run
  assert.equal(await answer.locator('img, script, iframe, [onerror], [onmouseover]').count(), 0);
  assert.match(await answer.textContent(), /<script>window.__xss=2<\/script>/);
  await answer.getByText('hover me').hover().catch(() => {});
  await answer.locator('a', { hasText: 'a bad one' }).click().catch(() => {});
  assert.equal(await page.evaluate(() => window.__xss), undefined);
  // an image is a link: nothing fetched from elsewhere
  assert.equal(await answer.locator('a.image-link').getAttribute('href'), 'http://127.0.0.1:9/pixel.png');
  assert.deepEqual(outside, []);
  await shot(page, 'markdown-light');
  // copy a code block
  await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: url });
  await answer.locator('.copy-code').click();
  await answer.locator('.copy-code', { hasText: 'Copied' }).waitFor();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), 'def add(x, y):\n    return x + y  # sum');
  await page.emulateMedia({ colorScheme: 'dark' });
  await shot(page, 'markdown-dark');
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('reasoning_content streams into a Thinking panel, apart from the answer and from the next request', async () => {
  const page = await openPage(browser, url);
  const thoughts = ['Let me ', 'think about ', 'this: ', '2 + 2 ', 'is 4.'].map((r) => ({ reasoning_content: r }));
  const answer = ['The answer ', 'is **4**.'].map((c) => ({ content: c }));
  await stubChat(page, [...thoughts, ...answer], { delayMs: 150 });
  await send(page, 'What is 2 + 2?');
  const panel = page.locator('.msg-assistant .thinking');
  await panel.waitFor();
  // while the reasoning streams the panel is open and says so
  assert.ok(await waitFor(() => panel.evaluate((el) => el.open), 3000));
  assert.equal(await panel.locator('.thinking-label').textContent(), 'Thinking…');
  assert.ok(await waitFor(async () => (await panel.locator('.thinking-body').textContent()).includes('think about'), 3000));
  await shot(page, 'thinking-streaming');
  await answerDone(page);
  assert.equal((await panel.locator('.thinking-body').textContent()).trim(), 'Let me think about this: 2 + 2 is 4.');
  assert.equal((await page.locator('.msg-assistant .answer').textContent()).trim(), 'The answer is 4.');
  assert.equal(await panel.evaluate((el) => el.open), false, 'the panel folds when the answer comes');
  assert.match(await panel.locator('.thinking-label').textContent(), /^Thought for \d/);
  await panel.locator('summary').click();
  assert.equal(await panel.evaluate((el) => el.open), true);
  await shot(page, 'thinking-done');

  // the reasoning is kept across a reload but not sent back to the model
  await page.reload();
  await page.locator('.msg-assistant .thinking').waitFor();
  assert.match(await page.locator('.thinking-body').textContent(), /2 \+ 2 is 4/);
  await stubChat(page, [{ content: 'ok' }]);
  await send(page, 'And 3 + 3?');
  await waitFor(() => page.evaluate(() => window.__bodies && window.__bodies.length === 1));
  const body = await page.evaluate(() => window.__bodies[0]);
  assert.deepEqual(body.messages, [
    { role: 'user', content: 'What is 2 + 2?' },
    { role: 'assistant', content: 'The answer is **4**.' },
    { role: 'user', content: 'And 3 + 3?' },
  ]);
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('<think>…</think> inside the text (no reasoning parser) is split the same way', async () => {
  const page = await openPage(browser, url);
  await stubChat(page, ['<think>\nHmm, ', 'a greeting.', '\n</think>\n\n', 'Hello ', 'there!'].map((c) => ({ content: c })), { delayMs: 100 });
  await send(page, 'Hi');
  const panel = page.locator('.msg-assistant .thinking');
  await panel.waitFor();
  assert.equal(await panel.locator('.thinking-label').textContent(), 'Thinking…');
  await answerDone(page);
  assert.equal((await panel.locator('.thinking-body').textContent()).trim(), 'Hmm, a greeting.');
  assert.equal((await page.locator('.msg-assistant .answer').textContent()).trim(), 'Hello there!');
  // a template that opens <think> itself leaves only the closing tag in the text
  await stubChat(page, [{ content: 'Just pondering.</think>Done.' }]);
  await send(page, 'Again');
  await waitFor(async () => (await page.locator('.msg-assistant').count()) === 2);
  await answerDone(page);
  const last = page.locator('.msg-assistant').last();
  assert.equal((await last.locator('.thinking-body').textContent()).trim(), 'Just pondering.');
  assert.equal((await last.locator('.answer').textContent()).trim(), 'Done.');
  const body = await page.evaluate(() => window.__bodies.at(-1));
  assert.equal(body.messages[1].content, 'Hello there!', 'the earlier answer goes back without its reasoning');
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

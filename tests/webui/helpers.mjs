// helpers.mjs: what the WebUI end-to-end tests share: headless Chromium (Debian's, driven by
// playwright-core, with a fresh profile and no network beyond 127.0.0.1), llaisys-server on the
// tiny-qwen2 fixture (tests/lib/server.mjs), /metrics samples, and screenshots under
// build/webui-screenshots/.
//
// tests/cli_webui.sh starts the main server and passes its URL in WEBUI_URL; tests that need a
// server of their own (an API key, a tiny context, one to stop) start it here. Every server and
// browser started here is killed when its test file ends, and every wait has a time limit.
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { after } from 'node:test';
import { chromium } from 'playwright-core';
import { http, root, startServer, waitFor } from '../lib/server.mjs';

export { http, startServer, waitFor };
export const shotDir = path.join(root, 'build', 'webui-screenshots');
export const chromiumPath = process.env.CHROMIUM || '/usr/bin/chromium';

// ---- servers (started by tests/lib/server.mjs) ----

// A TCP port free on 127.0.0.1 right now.
export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

// The main server of the run (tests/cli_webui.sh), or one started for this file.
let mainServer = null;
export async function mainUrl() {
  if (process.env.WEBUI_URL) return process.env.WEBUI_URL.replace(/\/$/, '');
  if (!mainServer) mainServer = await startServer();
  return mainServer.url;
}

// The sum of the samples of a /metrics family (every label set).
export async function metricSum(url, name) {
  const text = await (await http(`${url}/metrics`)).text();
  return text.split('\n').filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `))
    .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
}

// ---- the browser ----

// Every browser launched here is closed when its test file ends.
const browsers = new Set();
after(async () => {
  for (const b of browsers) await b.close().catch(() => {});
});

// Debian's Chromium, headless, in a fresh temporary profile (Playwright makes one per launch),
// with everything that would reach for the network switched off.
export async function launchBrowser() {
  const browser = await chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    timeout: 30000,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--disable-default-apps', '--disable-extensions', '--no-default-browser-check'],
  });
  browsers.add(browser);
  return browser;
}

export const DESKTOP = { viewport: { width: 1280, height: 800 } };
export const PHONE = { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 };

// A fresh context (empty storage) and page on url; page errors fail the test via errors[].
export async function openPage(browser, url, { storage = null, ...opts } = {}) {
  const context = await browser.newContext({ ...DESKTOP, acceptDownloads: true, ...opts });
  context.setDefaultTimeout(15000);
  if (storage) {
    await context.addInitScript((items) => {
      if (sessionStorage.getItem('seeded')) return; // only before the first load
      sessionStorage.setItem('seeded', '1');
      for (const [k, v] of Object.entries(items)) localStorage.setItem(k, JSON.stringify(v));
    }, storage);
  }
  const page = await context.newPage();
  page.errors = [];
  page.on('pageerror', (e) => page.errors.push(e.message));
  page.requests = [];
  page.on('request', (r) => {
    if (r.url().endsWith('/v1/chat/completions')) {
      page.requests.push({ body: r.postDataJSON(), headers: r.headers() });
    }
  });
  await page.goto(`${url}/`);
  await page.waitForSelector('#input');
  return page;
}

export const SETTINGS_KEY = 'llaisys.webui.settings.v1';

// Send text from the composer.
export async function send(page, text) {
  await page.fill('#input', text);
  await page.press('#input', 'Enter');
}

// Wait until the last answer has finished (its figures are shown); returns its figures.
export async function answerDone(page, timeout = 30000) {
  const stats = page.locator('.msg-assistant').last().locator('.stats[data-finish]');
  await stats.waitFor({ state: 'attached', timeout });
  return stats.evaluate((el) => ({ ...el.dataset, text: el.textContent }));
}

export async function shot(page, name) {
  fs.mkdirSync(shotDir, { recursive: true });
  await page.screenshot({ path: path.join(shotDir, `${name}.png`) });
}

// A mocked streamed answer (for what the tiny model cannot write: Markdown, reasoning).
export function sseBody(deltas, { usage = null, finish = 'stop' } = {}) {
  const base = { id: 'chatcmpl-mock', object: 'chat.completion.chunk', created: 0, model: 'mock' };
  const events = [{ ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] }];
  for (const d of deltas) events.push({ ...base, choices: [{ index: 0, delta: d, finish_reason: null }] });
  events.push({ ...base, choices: [{ index: 0, delta: {}, finish_reason: finish }] });
  if (usage) events.push({ ...base, choices: [], usage });
  return `${events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join('')}data: [DONE]\n\n`;
}

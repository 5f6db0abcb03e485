// static.test.mjs: how llaisys-server serves the WebUI's files (no browser): content types,
// caching (immutable hashed assets, revalidated index.html, ETag and 304), gzip, HEAD, no API
// key needed for the files while the API still asks for one, 404s, --webui-dir (and refusing
// paths that leave it), --no-webui.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import nodeHttp from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { http, mainUrl, startServer } from './helpers.mjs';

// GET with the path sent exactly as written (fetch would resolve the dot segments first).
function rawGet(url, rawPath) {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = nodeHttp.request({ host: u.hostname, port: u.port, path: rawPath, timeout: 10000 }, (res) => {
      let body = '';
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}

async function assetsOf(url) {
  const html = await (await http(`${url}/`)).text();
  return [...html.matchAll(/(?:src|href)="(assets\/[^"]+)"/g)].map((m) => m[1]);
}

test('index.html: HTML, no-cache, ETag, CSP, and 304 when unchanged', async () => {
  const url = await mainUrl();
  const res = await http(`${url}/`);
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('content-type'), 'text/html; charset=utf-8');
  assert.equal(res.headers.get('cache-control'), 'no-cache');
  assert.match(res.headers.get('content-security-policy'), /script-src 'self'/);
  assert.equal(res.headers.get('x-content-type-options'), 'nosniff');
  const body = await res.text();
  assert.match(body, /<script type="module" src="assets\/app-[A-Z0-9]+\.js"><\/script>/);
  const etag = res.headers.get('etag');
  assert.match(etag, /^"[0-9a-f]+(-gz)?"$/);
  const again = await http(`${url}/`, { headers: { 'If-None-Match': etag } });
  assert.equal(again.status, 304);
  assert.equal(again.headers.get('etag'), etag);
  assert.equal((await again.arrayBuffer()).byteLength, 0);
  const other = await http(`${url}/index.html`, { headers: { 'If-None-Match': '"something-else"' } });
  assert.equal(other.status, 200);
});

test('hashed assets: right types, immutable for a year, gzip when accepted', async () => {
  const url = await mainUrl();
  const assets = await assetsOf(url);
  assert.ok(assets.some((a) => a.endsWith('.js')) && assets.some((a) => a.endsWith('.css')), assets.join());
  for (const a of assets) {
    const res = await http(`${url}/${a}`, { headers: { 'Accept-Encoding': 'identity' } });
    assert.equal(res.status, 200, a);
    assert.equal(res.headers.get('content-type'),
      a.endsWith('.js') ? 'text/javascript; charset=utf-8' : 'text/css; charset=utf-8');
    assert.equal(res.headers.get('cache-control'), 'public, max-age=31536000, immutable');
    assert.equal(res.headers.get('content-encoding'), null);
    const plain = Buffer.from(await res.arrayBuffer());
    assert.equal(Number(res.headers.get('content-length')), plain.length);
    // fetch() decodes gzip itself: the bytes must come out the same, from fewer on the wire
    const gz = await http(`${url}/${a}`, { headers: { 'Accept-Encoding': 'gzip' } });
    assert.equal(gz.headers.get('content-encoding'), 'gzip', a);
    assert.ok(Number(gz.headers.get('content-length')) < plain.length);
    assert.notEqual(gz.headers.get('etag'), res.headers.get('etag'));
    assert.equal(gz.headers.get('vary'), 'Accept-Encoding');
    assert.ok(Buffer.from(await gz.arrayBuffer()).equals(plain), `${a}: gzip copy differs`);
  }
  for (const [ae, gz] of [['gzip;q=0', false], ['br, gzip;q=0.5', true], ['*', true], ['*;q=0, gzip', true],
    ['gzip;q=0, *', false], ['deflate', false], ['GZIP', true]]) {
    const r = await http(`${url}/${assets[0]}`, { method: 'HEAD', headers: { 'Accept-Encoding': ae } });
    assert.equal(r.headers.get('content-encoding'), gz ? 'gzip' : null, ae);
  }
});

test('HEAD, unknown files, and other methods', async () => {
  const url = await mainUrl();
  const head = await http(`${url}/`, { method: 'HEAD' });
  assert.equal(head.status, 200);
  assert.equal(head.headers.get('content-type'), 'text/html; charset=utf-8');
  assert.equal((await head.arrayBuffer()).byteLength, 0);
  const missing = await http(`${url}/assets/nothing-here.js`);
  assert.equal(missing.status, 404);
  assert.match((await missing.json()).error.message, /No such WebUI file/);
  assert.equal((await http(`${url}/`, { method: 'POST', body: '{}' })).status, 404);
  // the API is untouched by the WebUI routes
  assert.equal((await http(`${url}/health`)).status, 200);
  assert.equal((await http(`${url}/v1/models`)).status, 200);
});

test('with --api-key: the page loads without a key, the API still needs one', async () => {
  const srv = await startServer(['--api-key', 'webui-test-key']);
  const page = await http(`${srv.url}/`);
  assert.equal(page.status, 200);
  for (const a of await assetsOf(srv.url)) assert.equal((await http(`${srv.url}/${a}`)).status, 200, a);
  assert.equal((await http(`${srv.url}/v1/models`)).status, 401);
  const ok = await http(`${srv.url}/v1/models`, { headers: { Authorization: 'Bearer webui-test-key' } });
  assert.equal(ok.status, 200);
  assert.equal((await srv.stop()).code, 0, 'clean exit (no leaks under ASan)');
});

test('--webui-dir serves from disk, refuses paths out of it; --no-webui serves nothing', async () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'llaisys-webui-'));
  try {
    const dir = path.join(tmp, 'ui');
    fs.mkdirSync(path.join(dir, 'assets'), { recursive: true });
    fs.writeFileSync(path.join(dir, 'index.html'), '<!doctype html><title>dev copy</title>');
    fs.writeFileSync(path.join(dir, 'assets', 'x.css'), 'body{}');
    fs.writeFileSync(path.join(tmp, 'secret.txt'), 'do not serve');
    fs.symlinkSync(path.join(tmp, 'secret.txt'), path.join(dir, 'assets', 'link.txt'));
    const srv = await startServer(['--webui-dir', dir]);
    const res = await http(`${srv.url}/`);
    assert.equal(res.status, 200);
    assert.equal(await res.text(), '<!doctype html><title>dev copy</title>');
    assert.equal(res.headers.get('cache-control'), 'no-cache');
    const etag = res.headers.get('etag');
    assert.equal((await http(`${srv.url}/`, { headers: { 'If-None-Match': etag } })).status, 304);
    fs.writeFileSync(path.join(dir, 'index.html'), '<!doctype html><title>edited</title>');
    const edited = await http(`${srv.url}/`, { headers: { 'If-None-Match': etag } });
    assert.equal(edited.status, 200, 'an edited file is served again');
    assert.equal(await edited.text(), '<!doctype html><title>edited</title>');
    const css = await http(`${srv.url}/assets/x.css`);
    assert.equal(css.headers.get('content-type'), 'text/css; charset=utf-8');
    assert.equal(await css.text(), 'body{}');
    assert.equal((await rawGet(srv.url, '/assets/x.css')).body, 'body{}');
    for (const p of ['/assets/../../secret.txt', '/assets/../index.html', '/assets/%2e%2e/%2e%2e/secret.txt', '/assets/..%2f..%2fsecret.txt',
      '/assets/link.txt', '/assets//x.css', '/assets/.hidden', '/assets/']) {
      const r = await rawGet(srv.url, p);
      assert.equal(r.status, 404, p);
      assert.doesNotMatch(r.body, /do not serve/, p);
    }
    assert.equal((await srv.stop()).code, 0, 'clean exit (no leaks under ASan)');

    const off = await startServer(['--no-webui']);
    assert.equal((await http(`${off.url}/`)).status, 404);
    assert.equal((await http(`${off.url}/health`)).status, 200);
    assert.equal((await off.stop()).code, 0);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

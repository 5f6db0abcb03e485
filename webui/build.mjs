// build.mjs: bundles the WebUI into dist/ for llaisys-server to embed.
//
//   dist/index.html                 the page (no-cache when served)
//   dist/assets/app-HASH.js|.css    the application and its styles (immutable when served)
//   dist/assets/*-HASH.js           chunks loaded on demand (the math renderer)
//
// Every asset name carries a hash of its content, so the server can let browsers keep them for
// a year; only index.html, which names them, is revalidated. `--out DIR` writes elsewhere than
// dist/ (the Makefile builds into build/); `--dev` skips minification (for
// `llaisys-server --webui-dir webui/dist` while working on the UI). The result is written
// beside DIR and renamed into place, so a concurrent reader never sees half a build.
import { build } from 'esbuild';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const src = path.join(here, 'src');
const args = process.argv.slice(2);
const outIndex = args.indexOf('--out');
const final = outIndex >= 0 ? path.resolve(args[outIndex + 1]) : path.join(here, 'dist');
const dev = args.includes('--dev');
const dist = `${final}.tmp${process.pid}`;

fs.rmSync(dist, { recursive: true, force: true });

const result = await build({
  entryPoints: { app: path.join(src, 'main.js') },
  bundle: true,
  splitting: true, // the math renderer is a separate chunk, fetched when a formula first shows
  format: 'esm',
  outdir: dist,
  entryNames: 'assets/[name]-[hash]',
  chunkNames: 'assets/[name]-[hash]',
  assetNames: 'assets/[name]-[hash]',
  minify: !dev,
  sourcemap: false,
  target: ['chrome100', 'firefox100', 'safari15'],
  legalComments: 'eof',
  metafile: true,
  logLevel: 'warning',
});

// The entry's script and style, as named in the metafile.
let js, css;
for (const [file, out] of Object.entries(result.metafile.outputs)) {
  if (out.entryPoint && out.entryPoint.endsWith('main.js')) {
    js = path.relative(dist, file);
    if (out.cssBundle) css = path.relative(dist, out.cssBundle);
  }
}
if (!js || !css) throw new Error('build.mjs: the bundle has no entry script or stylesheet');

// Relative URLs, so the page also works under a path prefix of a reverse proxy.
const icon = fs.readFileSync(path.join(src, 'icon.svg'), 'utf8').trim();
const html = fs
  .readFileSync(path.join(src, 'index.html'), 'utf8')
  .replace('%ICON%', `data:image/svg+xml,${encodeURIComponent(icon)}`)
  .replace('%CSS%', css)
  .replace('%JS%', js);
fs.writeFileSync(path.join(dist, 'index.html'), html);

let total = 0;
for (const file of Object.keys(result.metafile.outputs).concat([path.join(dist, 'index.html')])) {
  const n = fs.statSync(file).size;
  total += n;
  console.log(`  ${path.relative(dist, file).padEnd(32)} ${(n / 1024).toFixed(1).padStart(7)} KiB`);
}
console.log(`  ${'total'.padEnd(32)} ${(total / 1024).toFixed(1).padStart(7)} KiB -> ${path.relative(process.cwd(), final) || '.'}`);

const old = `${final}.old${process.pid}`;
if (fs.existsSync(final)) fs.renameSync(final, old);
fs.renameSync(dist, final);
fs.rmSync(old, { recursive: true, force: true });

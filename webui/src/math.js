// math.js: turns the formula placeholders of markdown.js (.math elements holding TeX as text)
// into MathML, with temml loaded on first use as a separate chunk (it is larger than the rest
// of the UI); its MathML goes through DOMPurify like the rest. Formulas already converted are
// cached by their source, since a streaming answer is rendered again for every piece of text.

import DOMPurify from 'dompurify';

let temml = null;
let loading = null;
const cache = new Map();

function load() {
  if (!loading) {
    loading = import('temml').then((m) => {
      temml = m.default || m;
    });
  }
  return loading;
}

function convert(tex, display) {
  const key = `${display ? 'D' : 'I'}${tex}`;
  let html = cache.get(key);
  if (html === undefined) {
    try {
      html = DOMPurify.sanitize(
        temml.renderToString(tex, { displayMode: display, throwOnError: true, trust: false }),
        { USE_PROFILES: { mathMl: true } },
      );
    } catch {
      html = null; // not valid TeX: keep showing the source
    }
    if (cache.size > 500) cache.clear();
    cache.set(key, html);
  }
  return html;
}

// Render every unconverted formula under root (now or once temml has loaded).
export function renderMath(root) {
  const nodes = root.querySelectorAll('.math:not([data-done])');
  if (!nodes.length) return;
  if (!temml) {
    load().then(() => renderMath(root), () => {});
    return;
  }
  for (const el of nodes) {
    el.dataset.done = '1';
    const html = convert(el.textContent, el.dataset.display === '1');
    if (html) {
      el.title = el.textContent;
      el.innerHTML = html;
    } else {
      el.classList.add('math-error');
    }
  }
}

// markdown.js: the model's text as safe HTML: Markdown (GitHub flavour) by marked, code
// highlighted by highlight.js, TeX formulas ($…$, $$…$$, \(…\), \[…\]) marked for math.js,
// and everything passed through DOMPurify.
//
// Raw HTML in the model's text is shown as text, never interpreted: the renderer escapes it,
// DOMPurify then removes anything active that could remain, and the page's Content-Security-
// Policy (set by the server) refuses inline scripts besides. Images become links, so a model
// cannot make the browser fetch a remote URL.
import { Marked } from 'marked';
import DOMPurify from 'dompurify';
import hljs from 'highlight.js/lib/core';
import bash from 'highlight.js/lib/languages/bash';
import c from 'highlight.js/lib/languages/c';
import cpp from 'highlight.js/lib/languages/cpp';
import css from 'highlight.js/lib/languages/css';
import diff from 'highlight.js/lib/languages/diff';
import go from 'highlight.js/lib/languages/go';
import java from 'highlight.js/lib/languages/java';
import javascript from 'highlight.js/lib/languages/javascript';
import json from 'highlight.js/lib/languages/json';
import makefile from 'highlight.js/lib/languages/makefile';
import markdown from 'highlight.js/lib/languages/markdown';
import python from 'highlight.js/lib/languages/python';
import rust from 'highlight.js/lib/languages/rust';
import sql from 'highlight.js/lib/languages/sql';
import typescript from 'highlight.js/lib/languages/typescript';
import xml from 'highlight.js/lib/languages/xml';
import yaml from 'highlight.js/lib/languages/yaml';

const languages = { bash, c, cpp, css, diff, go, java, javascript, json, makefile, markdown,
  python, rust, sql, typescript, xml, yaml };
for (const [name, def] of Object.entries(languages)) hljs.registerLanguage(name, def);
hljs.registerAliases(['sh', 'shell', 'zsh', 'console'], { languageName: 'bash' });
hljs.registerAliases(['html', 'svg'], { languageName: 'xml' });

export function escapeHtml(s) {
  return s.replace(/[&<>"']/g, (ch) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[ch]);
}

function highlight(text, lang) {
  try {
    if (lang && hljs.getLanguage(lang)) return hljs.highlight(text, { language: lang, ignoreIllegals: true }).value;
    if (!lang && text.length < 4000) return hljs.highlightAuto(text).value;
  } catch {
    /* fall back to plain text */
  }
  return escapeHtml(text);
}

function mathHtml(tex, display) {
  const tag = display ? 'div' : 'span';
  return `<${tag} class="math${display ? ' math-display' : ''}" data-display="${display ? 1 : 0}">${escapeHtml(tex)}</${tag}>`;
}

const blockMath = {
  name: 'blockMath',
  level: 'block',
  start(src) {
    const m = src.match(/^ {0,3}(\$\$|\\\[)/m);
    return m ? m.index : undefined;
  },
  tokenizer(src) {
    const m = /^ {0,3}\$\$([\s\S]+?)\$\$[ \t]*(?:\n|$)/.exec(src) ||
      /^ {0,3}\\\[([\s\S]+?)\\\][ \t]*(?:\n|$)/.exec(src);
    if (m) return { type: 'blockMath', raw: m[0], text: m[1].trim() };
    return undefined;
  },
  renderer(tok) {
    return `${mathHtml(tok.text, true)}\n`;
  },
};

const inlineMath = {
  name: 'inlineMath',
  level: 'inline',
  start(src) {
    const m = src.match(/\$|\\\(/);
    return m ? m.index : undefined;
  },
  tokenizer(src) {
    let m = /^\$\$([^$\n]+?)\$\$/.exec(src);
    if (m) return { type: 'inlineMath', raw: m[0], text: m[1].trim(), display: true };
    // $…$: no space just inside the dollars and no digit just after ("$5 and $10" is money)
    m = /^\$(?![\s$])((?:\\.|[^\\\n$])+?)(?<!\s)\$(?!\d)/.exec(src);
    if (m) return { type: 'inlineMath', raw: m[0], text: m[1], display: false };
    m = /^\\\(([\s\S]+?)\\\)/.exec(src);
    if (m) return { type: 'inlineMath', raw: m[0], text: m[1].trim(), display: false };
    return undefined;
  },
  renderer(tok) {
    return mathHtml(tok.text, tok.display);
  },
};

const marked = new Marked({
  gfm: true,
  breaks: false,
  extensions: [blockMath, inlineMath],
  renderer: {
    html({ text }) {
      return escapeHtml(text);
    },
    code({ text, lang }) {
      const name = ((lang || '').match(/^[\w+#.-]+/) || [''])[0].toLowerCase();
      const label = name ? escapeHtml(name) : 'text';
      const cls = name && hljs.getLanguage(name) ? ` language-${escapeHtml(name)}` : '';
      return `<div class="code-block"><div class="code-head"><span class="code-lang">${label}</span>` +
        '<button type="button" class="copy-code">Copy</button></div>' +
        `<pre><code class="hljs${cls}">${highlight(text.replace(/\n$/, ''), name)}</code></pre></div>\n`;
    },
    image({ href, text }) {
      return `<a href="${escapeHtml(href || '')}" class="image-link">${escapeHtml(text || href || 'image')}</a>`;
    },
  },
});

DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A' && node.hasAttribute('href')) {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer nofollow');
  }
});

const PURIFY = {
  USE_PROFILES: { html: true },
  FORBID_TAGS: ['style', 'form', 'img', 'video', 'audio', 'iframe', 'object', 'embed'],
  FORBID_ATTR: ['style'],
};

// Markdown text into sanitised HTML.
export function renderMarkdown(text) {
  return DOMPurify.sanitize(marked.parse(text, { async: false }), PURIFY);
}

// view.js: DOM for the conversation list and the messages. Pure builders: they read the data
// given and return elements; the buttons carry data-action attributes that main.js handles by
// event delegation. Text from users and models goes in as text, or as sanitised Markdown
// (markdown.js), never as raw HTML.
import { renderMarkdown } from './markdown.js';
import { renderMath } from './math.js';

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) el.append(c);
  return el;
}

// Static SVG icons (markup of our own, never data).
const ICONS = {
  edit: '<path d="M4 20h4L19 9l-4-4L4 16v4z" fill="none" stroke="currentColor" stroke-width="2" stroke-linejoin="round"/>',
  trash: '<path d="M5 7h14M10 7V4h4v3M7 7l1 13h8l1-13" fill="none" stroke="currentColor" stroke-width="2" stroke-linejoin="round"/>',
};

function icon(name) {
  const span = h('span', { class: 'icon', 'aria-hidden': 'true' });
  span.innerHTML = `<svg viewBox="0 0 24 24" width="16" height="16">${ICONS[name]}</svg>`;
  return span;
}

// ---- the conversation list ----

export function convItem(conv, { active, running, renaming }) {
  const item = h('div', { class: `conv-item${active ? ' active' : ''}`, dataset: { id: conv.id } });
  if (renaming) {
    item.append(h('input', { class: 'conv-rename-input', value: conv.title || 'New chat',
      'aria-label': 'Conversation title', maxlength: 200 }));
    return item;
  }
  item.append(
    h('button', { class: 'conv-open', type: 'button', dataset: { action: 'open' },
      'aria-current': active ? 'page' : null, title: conv.title || 'New chat' },
    running ? h('span', { class: 'dot', 'aria-label': 'generating' }) : null,
    h('span', { class: 'conv-name', text: conv.title || 'New chat' })),
    h('button', { class: 'icon-btn conv-rename', type: 'button', dataset: { action: 'rename' },
      'aria-label': 'Rename', title: 'Rename' }, icon('edit')),
    h('button', { class: 'icon-btn conv-delete', type: 'button', dataset: { action: 'delete' },
      'aria-label': 'Delete', title: 'Delete' }, icon('trash')),
  );
  return item;
}

// ---- messages ----

// The answer and its reasoning: reasoning_content when the server splits it, else a
// <think>…</think> part at the start of the text (R1 served without a reasoning parser).
export function splitThinking(msg) {
  if (msg.reasoning) return { reasoning: msg.reasoning, answer: msg.content, open: false };
  const text = msg.content;
  const start = text.match(/^\s*<think>/);
  const close = text.indexOf('</think>');
  if (close >= 0 && (start || !text.slice(0, close).includes('<think>'))) {
    const from = start ? start[0].length : 0;
    return { reasoning: text.slice(from, close), answer: text.slice(close + 8).replace(/^\s+/, ''), open: false };
  }
  if (start) return { reasoning: text.slice(start[0].length), answer: '', open: true };
  return { reasoning: '', answer: text, open: false };
}

function fmtSeconds(s) {
  return s < 1 ? `${Math.round(s * 1000)} ms` : `${s.toFixed(2)} s`;
}

const FINISH_TEXT = {
  length: 'stopped at the token limit',
  stopped: 'stopped',
  interrupted: 'interrupted (page reloaded)',
};

// The line of figures under an answer; its data-* attributes carry the numbers.
export function statsLine(stats) {
  const el = h('div', { class: 'stats' });
  if (!stats) return el;
  const parts = [];
  if (stats.completionTokens !== undefined && stats.completionTokens !== null) {
    const thinking = stats.reasoningTokens ? ` (${stats.reasoningTokens} thinking)` : '';
    parts.push(h('span', { class: 'stat-tokens',
      text: `${stats.estimated ? '≈' : ''}${stats.completionTokens} tokens${thinking}` }));
    el.dataset.tokens = String(stats.completionTokens);
  }
  if (stats.ttft !== undefined && stats.ttft !== null) {
    parts.push(h('span', { class: 'stat-ttft', title: 'time to first token',
      text: `first token ${fmtSeconds(stats.ttft)}` }));
    el.dataset.ttft = String(stats.ttft);
  }
  if (stats.tps) {
    parts.push(h('span', { class: 'stat-tps',
      title: stats.streamed === false ? 'tokens per second over the whole request (not streamed)'
        : 'generation speed after the first token',
      text: `${stats.tps.toFixed(1)} tok/s` }));
    el.dataset.tps = String(stats.tps);
  }
  if (stats.promptTokens !== undefined && stats.promptTokens !== null) {
    const cached = stats.cachedTokens || 0;
    parts.push(h('span', { class: 'stat-prompt', title: 'prompt tokens (of which served from the prefix cache)',
      text: `prompt ${stats.promptTokens}${cached ? ` (${cached} cached)` : ''}` }));
    el.dataset.prompt = String(stats.promptTokens);
    el.dataset.cached = String(cached);
  }
  if (stats.finish && FINISH_TEXT[stats.finish]) {
    parts.push(h('span', { class: 'stat-finish', text: FINISH_TEXT[stats.finish] }));
  }
  if (stats.finish) el.dataset.finish = stats.finish;
  parts.forEach((p, i) => {
    if (i) el.append(h('span', { class: 'sep', 'aria-hidden': 'true', text: '·' }));
    el.append(p);
  });
  return el;
}

function fmtTime(unixSeconds) {
  return new Date(unixSeconds * 1000).toLocaleTimeString();
}

function debugRow(label, cls, text, data = {}) {
  return h('div', { class: `debug-row ${cls}`, dataset: data },
    h('span', { class: 'debug-label', text: label }), h('span', { class: 'debug-value', text }));
}

// The debug panel under an answer (Settings > Debug panel): the usage the server reported, the
// times measured here, the conversation's session as the server described it right after the
// answer, and the request body as sent. debug is {request?, asking?, session?} (main.js: kept for the
// answers of this page only); data-* attributes carry the numbers.
export function debugPanel(msg, debug, { running }) {
  const s = msg.stats || {};
  const rows = [];
  if (running) rows.push(debugRow('Usage', 'debug-usage', 'answer under way'));
  else if (s.promptTokens === null || s.promptTokens === undefined) {
    rows.push(debugRow('Usage', 'debug-usage', 'not reported by the server (stopped or failed)'));
  } else {
    rows.push(debugRow('Usage', 'debug-usage',
      `prompt ${s.promptTokens} · cached ${s.cachedTokens || 0} · completion ${s.completionTokens}`,
      { prompt: s.promptTokens, cached: s.cachedTokens || 0, completion: s.completionTokens }));
  }
  if (!running && s.total !== undefined) {
    const parts = [s.ttft !== null && s.ttft !== undefined ? `TTFT ${fmtSeconds(s.ttft)}`
      : 'TTFT not measured (not streamed)'];
    if (s.tps) parts.push(`${s.tps.toFixed(1)} tok/s${s.streamed === false ? ' over the whole request' : ''}`);
    parts.push(`total ${fmtSeconds(s.total)}`);
    // a figure not measured has no attribute, as in the answer's footer (stats)
    const data = { total: s.total, streamed: String(s.streamed !== false) };
    if (s.ttft !== null && s.ttft !== undefined) data.ttft = s.ttft;
    if (s.tps) data.tps = s.tps;
    rows.push(debugRow('Timings', 'debug-timings', parts.join(' · '), data));
  }
  const sessionId = debug.request && debug.request.session_id;
  if (!debug.request) rows.push(debugRow('Session', 'debug-session', 'not recorded (answered before this page was loaded)'));
  else if (!sessionId) rows.push(debugRow('Session', 'debug-session', 'none (not sent with this request)'));
  else if (debug.session === undefined) {
    const why = running ? '' : debug.asking ? ' · asking the server…' : ' · not asked (the panel was off after this answer)';
    rows.push(debugRow('Session', 'debug-session', `${sessionId}${why}`, { sessionId }));
  } else if (debug.session === null) {
    rows.push(debugRow('Session', 'debug-session', `${sessionId} · not on the server (expired or deleted)`,
      { sessionId, state: 'missing' }));
  } else if (debug.session.error) {
    rows.push(debugRow('Session', 'debug-session', `${sessionId} · ${debug.session.error}`, { sessionId, state: 'error' }));
  } else {
    const x = debug.session;
    rows.push(debugRow('Session', 'debug-session',
      `${sessionId} · ${x.tokens} tokens · ${x.pinned_blocks} pinned blocks · ${x.turns} turns · ` +
      `last use ${fmtTime(x.last_use)}`,
      { sessionId, state: 'found', tokens: x.tokens, pinned: x.pinned_blocks, turns: x.turns, lastUse: x.last_use }));
  }
  const panel = h('div', { class: 'debug' }, rows);
  if (debug.request) {
    panel.append(h('details', { class: 'debug-request' },
      h('summary', { text: 'Request body' }),
      h('pre', { text: JSON.stringify(debug.request, null, 2) })));
  }
  return panel;
}

function errorHint(err) {
  if (err.status === 401) return 'Set the API key in Settings.';
  if (err.status === 429) return 'The server is busy: retry in a moment.';
  if (err.status === 503) return 'The server is starting or stopping: retry in a moment.';
  if (/too long|context length|context_length/i.test(err.message)) {
    return 'Start a new chat, or edit an earlier message to make the conversation shorter.';
  }
  if (!err.status) return 'Check that the server is running, then retry.';
  return '';
}

function errorBox(err) {
  const hint = errorHint(err);
  return h('div', { class: 'msg-error', role: 'alert' },
    h('strong', { text: err.status ? `Error ${err.status}` : 'Error' }),
    h('span', { class: 'error-text', text: ` ${err.message}` }),
    hint ? h('div', { class: 'error-hint', text: hint }) : null,
    h('div', { class: 'error-actions' },
      h('button', { class: 'btn btn-small', type: 'button', dataset: { action: 'retry' }, text: 'Retry' }),
      err.status === 401
        ? h('button', { class: 'btn btn-small btn-ghost', type: 'button', dataset: { action: 'settings' }, text: 'Settings' })
        : null));
}

export function userMessage(msg, { editing }) {
  const el = h('article', { class: 'msg msg-user', dataset: { id: msg.id } });
  if (editing) {
    const ta = h('textarea', { class: 'edit-input', rows: 3, 'aria-label': 'Edit message' });
    ta.value = msg.content;
    el.append(h('div', { class: 'edit-box' }, ta,
      h('div', { class: 'edit-actions' },
        h('button', { class: 'btn btn-ghost btn-small', type: 'button', dataset: { action: 'edit-cancel' }, text: 'Cancel' }),
        h('button', { class: 'btn btn-primary btn-small', type: 'button', dataset: { action: 'edit-save' }, text: 'Save & send' }))));
    return el;
  }
  el.append(
    h('div', { class: 'bubble', text: msg.content }),
    h('div', { class: 'msg-actions' },
      h('button', { class: 'btn btn-small btn-ghost', type: 'button', dataset: { action: 'edit' }, text: 'Edit' })),
  );
  return el;
}

export function assistantMessage(msg, opts) {
  const el = h('article', { class: 'msg msg-assistant', dataset: { id: msg.id } });
  const thinking = h('details', { class: 'thinking', hidden: true },
    h('summary', {}, h('span', { class: 'thinking-label', text: 'Thinking' })),
    h('div', { class: 'thinking-body md' }));
  // a toggle by the user sticks; until then the panel follows the stream
  thinking.addEventListener('toggle', () => {
    if (thinking.dataset.auto !== thinking.open.toString()) thinking.dataset.user = '1';
  });
  el.append(thinking, h('div', { class: 'answer md' }), h('div', { class: 'msg-error-slot' }),
    h('div', { class: 'msg-foot' }, h('div', { class: 'stats' }), h('div', { class: 'msg-actions' })),
    h('div', { class: 'debug-slot' }));
  updateAssistant(el, msg, opts);
  return el;
}

function setThinkingOpen(details, open) {
  if (details.dataset.user) return;
  details.dataset.auto = String(open);
  details.open = open;
}

// Bring an assistant message's element up to date with msg (called for every streamed piece).
// debug: what debugPanel shows, or null for no panel.
export function updateAssistant(el, msg, { running, last, debug = null }) {
  const { reasoning, answer, open } = splitThinking(msg);
  const thinking = el.querySelector('.thinking');
  const answerEl = el.querySelector('.answer');
  if (reasoning) {
    thinking.hidden = false;
    const streamingThoughts = running && (open || !answer);
    el.querySelector('.thinking-label').textContent = streamingThoughts
      ? 'Thinking…'
      : msg.stats && msg.stats.thinkSeconds ? `Thought for ${fmtSeconds(msg.stats.thinkSeconds)}` : 'Thoughts';
    const body = thinking.querySelector('.thinking-body');
    if (body.renderedSrc !== reasoning) {
      body.innerHTML = renderMarkdown(reasoning);
      body.renderedSrc = reasoning;
      renderMath(body);
    }
    setThinkingOpen(thinking, streamingThoughts);
  } else {
    thinking.hidden = true;
  }
  if (answerEl.renderedSrc !== answer) {
    answerEl.innerHTML = renderMarkdown(answer);
    answerEl.renderedSrc = answer;
    renderMath(answerEl);
  }
  el.classList.toggle('streaming', !!running);
  el.classList.toggle('waiting', !!running && !answer && !reasoning);

  const slot = el.querySelector('.msg-error-slot');
  slot.replaceChildren(msg.error ? errorBox(msg.error) : '');
  el.querySelector('.stats').replaceWith(running ? h('div', { class: 'stats' }) : statsLine(msg.stats));
  const debugSlot = el.querySelector('.debug-slot');
  if (debug) {
    // an opened request body stays open through the redraws
    const wasOpen = debugSlot.querySelector('.debug-request[open]') !== null;
    const panel = debugPanel(msg, debug, { running });
    const req = panel.querySelector('.debug-request');
    if (req) req.open = wasOpen;
    debugSlot.replaceChildren(panel);
  } else debugSlot.replaceChildren();
  const actions = el.querySelector('.msg-actions');
  actions.replaceChildren(
    !running && msg.content
      ? h('button', { class: 'btn btn-small btn-ghost', type: 'button', dataset: { action: 'copy' }, text: 'Copy' })
      : '',
    !running && last && !msg.error
      ? h('button', { class: 'btn btn-small btn-ghost', type: 'button', dataset: { action: 'regenerate' }, text: 'Regenerate' })
      : '',
  );
}

export function emptyState(model) {
  return h('div', { class: 'empty' },
    h('div', { class: 'empty-title', text: model ? `Chat with ${model}` : 'Chat' }),
    h('p', { text: 'Answers stream in as the model writes them. Conversations stay in this browser.' }));
}

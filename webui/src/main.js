// main.js: the WebUI's state and behaviour: conversations (new, open, rename, delete, export,
// import), sending and streaming answers, stop, regenerate, edit-and-continue, settings,
// theme, and the phone layout's sliding sidebar.
//
// State lives here and in localStorage (store.js); the DOM is rebuilt from it (view.js), except
// that a streaming answer updates only its own element, at most once per animation frame.
// Each conversation can have one answer streaming; several conversations may stream at once.
//
// Each conversation is a server-side session (its sessionId, sent as session_id): the server
// keeps the conversation's KV blocks pinned between turns, so a turn computes only its new
// tokens. Sessions are an optimisation, never a condition: a server that refuses the session
// gets the turn again without it (sessionRefused), and deleting a conversation deletes its
// session on a best-effort basis.
import './style.css';
import {
  ApiError, cancelRequest, deleteSession, getSession, listModels, sendChat,
} from './api.js';
import {
  DEFAULT_SETTINGS, SWITCHES, exportJson, importJson, isStorageKey, loadConversations,
  loadCurrentId, loadSettings, newId, newSessionId, saveConversations, saveCurrentId, saveSettings,
  titleFrom,
} from './store.js';
import {
  assistantMessage, convItem, emptyState, splitThinking, updateAssistant, userMessage,
} from './view.js';

const $ = (id) => document.getElementById(id);
const els = {
  app: $('app'), sidebar: $('sidebar'), scrim: $('scrim'), convList: $('conv-list'),
  title: $('conv-title'), model: $('model'), notice: $('notice'), messages: $('messages'),
  composer: $('composer'), input: $('input'), send: $('send'), stop: $('stop'),
  settings: $('settings'), settingsForm: $('settings-form'), settingsError: $('settings-error'),
  importFile: $('import-file'), toggleSidebar: $('toggle-sidebar'),
};

const state = {
  settings: loadSettings(),
  conversations: loadConversations(),
  currentId: loadCurrentId(),
  model: null,          // id of the served model, from v1/models
  modelError: null,
  running: new Map(),   // conversation id -> {controller, requestId, msg, settled}
  sessions: true,       // false once the server said it has no sessions (until a reload)
  // answer id -> {request (the body sent), asking (the session state was asked for), session
  // (GET v1/sessions/{id} after the answer: the object, null for none, or {error})}; this
  // page's answers only, never stored
  debug: new Map(),
  editingId: null,      // user message being edited
  renamingId: null,     // conversation being renamed
};

// ---- persistence ----

let saveTimer = 0;
function persist() {
  clearTimeout(saveTimer);
  saveTimer = 0;
  const err = saveConversations(state.conversations.filter((c) => c.messages.length));
  if (err) notify(err, 'error');
}
function persistSoon() {
  if (!saveTimer) saveTimer = setTimeout(persist, 1000);
}

// ---- notices ----

let noticeTimer = 0;
function notify(text, kind = 'info') {
  clearTimeout(noticeTimer);
  els.notice.textContent = text;
  els.notice.className = `notice notice-${kind}`;
  els.notice.hidden = false;
  if (kind === 'info') noticeTimer = setTimeout(() => { els.notice.hidden = true; }, 5000);
}
els.notice.addEventListener('click', () => { els.notice.hidden = true; });

// ---- conversations ----

function current() {
  return state.conversations.find((c) => c.id === state.currentId) || null;
}

function createConversation() {
  const now = Date.now();
  const conv = { id: newId(), sessionId: newSessionId(), title: '', created: now, updated: now, messages: [] };
  state.conversations.unshift(conv);
  return conv;
}

// Focus the composer, except on touch screens, where that would pop the keyboard up.
function focusInput() {
  if (!window.matchMedia('(pointer: coarse)').matches) els.input.focus();
}

function openConversation(id) {
  // an empty conversation left behind is dropped
  state.conversations = state.conversations.filter((c) => c.messages.length || c.id === id);
  state.currentId = id;
  state.editingId = null;
  saveCurrentId(id);
  closeSidebar();
  render();
  focusInput();
}

function newChat() {
  const cur = current();
  // an empty conversation is reused rather than piling up
  const conv = cur && cur.messages.length === 0 ? cur : createConversation();
  openConversation(conv.id);
}

function deleteConversation(id) {
  const conv = state.conversations.find((c) => c.id === id);
  if (!conv) return;
  if (!window.confirm(`Delete "${conv.title || 'New chat'}"?`)) return;
  // the session goes once a stopped answer has ended here (its turn ends on the server then too)
  const run = state.running.get(id);
  stop(conv);
  if (conv.messages.length) {
    Promise.resolve(run && run.settled).then(() => deleteSession(conv.sessionId, state.settings.apiKey));
  }
  for (const m of conv.messages) state.debug.delete(m.id);
  state.conversations = state.conversations.filter((c) => c.id !== id);
  if (state.currentId === id) state.currentId = state.conversations[0] ? state.conversations[0].id : null;
  saveCurrentId(state.currentId);
  persist();
  render();
}

function finishRename(id, title) {
  const conv = state.conversations.find((c) => c.id === id);
  state.renamingId = null;
  if (conv && title !== null) {
    conv.title = title.trim().slice(0, 200) || conv.title;
    persist();
  }
  renderSidebar();
  renderHeader();
}

// ---- rendering ----

function renderSidebar() {
  const items = state.conversations.map((c) => convItem(c, {
    active: c.id === state.currentId,
    running: state.running.has(c.id),
    renaming: c.id === state.renamingId,
  }));
  els.convList.replaceChildren(...items);
  const input = els.convList.querySelector('.conv-rename-input');
  if (input) {
    const id = state.renamingId;
    input.focus();
    input.select();
    let done = false;
    const end = (title) => { if (!done) { done = true; finishRename(id, title); } };
    input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') { e.preventDefault(); end(input.value); }
      if (e.key === 'Escape') { e.preventDefault(); end(null); }
    });
    input.addEventListener('blur', () => end(input.value));
  }
}

function renderHeader() {
  const conv = current();
  const title = conv && conv.title ? conv.title : 'New chat';
  els.title.textContent = title;
  document.title = `${title} · llaisys`;
  els.model.textContent = state.model || (state.modelError ? state.modelError.label : '…');
  els.model.classList.toggle('model-offline', !state.model && !!state.modelError);
  els.model.title = state.model ? `Model: ${state.model}`
    : state.modelError ? state.modelError.message : 'Loading the model list';
}

function renderComposer() {
  const conv = current();
  const running = conv && state.running.has(conv.id);
  els.send.hidden = !!running;
  els.stop.hidden = !running;
}

function isNearBottom() {
  const m = els.messages;
  return m.scrollHeight - m.scrollTop - m.clientHeight < 80;
}

function scrollToBottom() {
  els.messages.scrollTop = els.messages.scrollHeight;
}

function renderMessages() {
  const conv = current();
  if (!conv || conv.messages.length === 0) {
    els.messages.replaceChildren(emptyState(state.model));
    return;
  }
  const run = state.running.get(conv.id);
  const lastIndex = conv.messages.length - 1;
  const nodes = conv.messages.map((m, i) => (m.role === 'user'
    ? userMessage(m, { editing: m.id === state.editingId })
    : assistantMessage(m, { running: run && run.msg === m, last: i === lastIndex, debug: debugOf(m) })));
  els.messages.replaceChildren(...nodes);
  const edit = els.messages.querySelector('.edit-input');
  if (edit) {
    edit.focus();
    edit.setSelectionRange(edit.value.length, edit.value.length);
  }
}

function render() {
  renderSidebar();
  renderHeader();
  renderMessages();
  renderComposer();
  if (!state.editingId) scrollToBottom();
}

// What the debug panel of an answer shows beyond its figures; null: no panel (Settings).
function debugOf(msg) {
  return state.settings.debugPanel ? state.debug.get(msg.id) || {} : null;
}

// A streamed piece arrived: redraw that answer on the next frame (if it is on screen).
const dirty = new Set();
let frame = 0;
function scheduleUpdate(conv, msg) {
  if (conv.id !== state.currentId) return;
  dirty.add(msg);
  if (frame) return;
  frame = requestAnimationFrame(() => {
    frame = 0;
    const stick = isNearBottom();
    const cur = current();
    for (const m of dirty) {
      const el = els.messages.querySelector(`.msg[data-id="${m.id}"]`);
      const run = cur && state.running.get(cur.id);
      if (el) updateAssistant(el, m, { running: run && run.msg === m, last: cur.messages.at(-1) === m, debug: debugOf(m) });
    }
    dirty.clear();
    if (stick) scrollToBottom();
  });
}

// ---- generation ----

function numberOrNull(v) {
  return v === null || v === undefined || v === '' || Number.isNaN(Number(v)) ? null : Number(v);
}

// The request body for the conversation's messages so far, as sent: streaming or not, in the
// conversation's session (unless the server has none, or `session` is false), with the prefix
// cache switched off when the settings say so.
function requestBody(conv, { session = true } = {}) {
  const s = state.settings;
  const messages = [];
  if (s.systemPrompt && s.systemPrompt.trim()) messages.push({ role: 'system', content: s.systemPrompt });
  for (const m of conv.messages) {
    if (m.role === 'user') messages.push({ role: 'user', content: m.content });
    else {
      // earlier answers go back without their reasoning, as R1 models expect
      const { answer } = splitThinking(m);
      if (answer) messages.push({ role: 'assistant', content: answer });
    }
  }
  const body = { messages };
  if (state.model) body.model = state.model;
  for (const k of ['temperature', 'top_p', 'top_k', 'max_tokens', 'seed']) {
    const v = numberOrNull(s[k]);
    if (v !== null) body[k] = v;
  }
  body.stream = s.stream;
  if (s.stream) body.stream_options = { include_usage: true };
  if (session && state.sessions) body.session_id = conv.sessionId;
  // the server's name for it (llama.cpp's); reuse_prefix is the same switch
  if (!s.reusePrefix) body.cache_prompt = false;
  // the templates' switch for thinking (Qwen3's; others ignore it)
  if (s.thinking === 'on' || s.thinking === 'off') {
    body.chat_template_kwargs = { enable_thinking: s.thinking === 'on' };
  }
  return body;
}

// The figures shown under an answer, from the usage the server sent (estimated from the
// pieces received when it sent none: a stopped answer) and the times seen here (ms). An answer
// that came in one piece (streaming off) has no first-token time, and its speed is over the
// whole request (prompt included).
function figures({ result, msg, pieces, streamed, t0, tFirst, tAnswer, tEnd }) {
  const usage = result && result.usage;
  const completion = usage ? usage.completion_tokens : pieces;
  const gen = tFirst ? (tEnd - tFirst) / 1000 : 0;
  const total = (tEnd - t0) / 1000;
  const details = (usage && usage.prompt_tokens_details) || {};
  const completionDetails = (usage && usage.completion_tokens_details) || {};
  return {
    finish: result ? result.finishReason || 'stop' : msg.error ? 'error' : 'stopped',
    completionTokens: completion,
    estimated: !usage,
    streamed,
    ttft: streamed && tFirst ? (tFirst - t0) / 1000 : null,
    tps: !streamed ? (completion > 0 && total > 0 ? completion / total : null)
      : completion > 1 && gen > 0 ? (completion - 1) / gen : null,
    total,
    promptTokens: usage ? usage.prompt_tokens : null,
    cachedTokens: details.cached_tokens || 0,
    reasoningTokens: completionDetails.reasoning_tokens || 0,
    thinkSeconds: streamed && tFirst && splitThinking(msg).reasoning ? ((tAnswer || tEnd) - tFirst) / 1000 : null,
    model: state.model,
  };
}

// The server refused the turn's session (err.param is session_id, before any answer): when it
// has no sessions, stop sending them; when the id is another API key's (404), the conversation
// takes a new one. Returns the body to send again: in the new session, or without one.
function sessionRefused(conv, err) {
  if (err.code === 'unsupported_parameter') state.sessions = false;
  if (err.status === 404) {
    conv.sessionId = newSessionId();
    return requestBody(conv);
  }
  return requestBody(conv, { session: false });
}

async function generate(conv) {
  let body = requestBody(conv);
  const msg = { id: newId(), role: 'assistant', content: '', reasoning: '', pending: true, stats: {} };
  conv.messages.push(msg);
  conv.updated = Date.now();
  const run = { controller: new AbortController(), requestId: `webui-${newId()}`, msg };
  let settle;
  run.settled = new Promise((resolve) => { settle = resolve; });
  state.running.set(conv.id, run);
  persist();
  if (conv.id === state.currentId) render();
  else renderSidebar();

  const t0 = performance.now();
  let tFirst = 0;
  let tAnswer = 0;
  let pieces = 0;
  let result = null;
  const onDelta = ({ content, reasoning }) => {
    const now = performance.now();
    if (!tFirst) tFirst = now;
    pieces++;
    msg.reasoning += reasoning;
    msg.content += content;
    if (!tAnswer && splitThinking(msg).answer) tAnswer = now;
    scheduleUpdate(conv, msg);
    persistSoon();
  };
  for (let retried = false; ;) {
    state.debug.set(msg.id, { request: body });
    try {
      result = await sendChat({
        body, apiKey: state.settings.apiKey, requestId: run.requestId, signal: run.controller.signal, onDelta,
      });
    } catch (err) {
      if (!retried && body.session_id && err instanceof ApiError && err.param === 'session_id') {
        retried = true;
        body = sessionRefused(conv, err);
        continue;
      }
      if (!(err instanceof ApiError) || err.kind !== 'abort') {
        const e = err instanceof ApiError ? err : new ApiError(String(err), { kind: 'stream' });
        msg.error = { message: e.message, status: e.status };
        if (e.status === 401) refreshModels();
      }
    }
    break;
  }
  const tEnd = performance.now();
  msg.stats = msg.error && !pieces
    ? { finish: 'error' }
    : figures({ result, msg, pieces, streamed: body.stream, t0, tFirst, tAnswer, tEnd });
  if (!msg.reasoning) delete msg.reasoning;
  delete msg.pending;
  if (state.running.get(conv.id) === run) state.running.delete(conv.id);
  settle();
  conv.updated = Date.now();
  persist();
  if (result && !state.model) refreshModels();
  if (conv.id === state.currentId) {
    const stick = isNearBottom();
    renderMessages();
    renderComposer();
    if (stick) scrollToBottom();
  }
  renderSidebar();
  if (result && body.session_id && state.settings.debugPanel) showSession(conv, msg, body.session_id);
}

// The debug panel's session state: the server's view of the session right after the answer.
async function showSession(conv, msg, sessionId) {
  const debug = state.debug.get(msg.id);
  if (debug) debug.asking = true;
  let session;
  try {
    session = await getSession(sessionId, state.settings.apiKey, AbortSignal.timeout(10000));
  } catch (err) {
    session = { error: err.message };
  }
  if (!debug) return;
  debug.session = session;
  if (conv.id !== state.currentId) return;
  const el = els.messages.querySelector(`.msg[data-id="${msg.id}"]`);
  const run = state.running.get(conv.id);
  if (el) updateAssistant(el, msg, { running: run && run.msg === msg, last: conv.messages.at(-1) === msg, debug: debugOf(msg) });
}

function stop(conv) {
  const run = conv && state.running.get(conv.id);
  if (!run) return;
  // the server cancels on the route at once; the aborted connection would tell it too
  cancelRequest(run.requestId, state.settings.apiKey);
  run.controller.abort();
}

function send(text) {
  if (!text.trim()) return;
  let conv = current();
  if (!conv) {
    conv = createConversation();
    state.currentId = conv.id;
    saveCurrentId(conv.id);
  }
  if (state.running.has(conv.id)) return;
  if (!conv.title) conv.title = titleFrom(text);
  conv.messages.push({ id: newId(), role: 'user', content: text });
  // most recent first in the list
  state.conversations = [conv, ...state.conversations.filter((c) => c !== conv)];
  generate(conv);
}

function regenerate(conv) {
  if (!conv || state.running.has(conv.id)) return;
  const last = conv.messages.at(-1);
  if (last && last.role === 'assistant') conv.messages.pop();
  if (!conv.messages.length) return;
  generate(conv);
}

function saveEdit(conv, msgId, text) {
  const i = conv.messages.findIndex((m) => m.id === msgId);
  if (i < 0 || !text.trim()) return;
  // a title taken from the first message follows its edit; one given by the user stays
  if (i === 0 && conv.title === titleFrom(conv.messages[0].content)) conv.title = titleFrom(text);
  stop(conv);
  state.running.delete(conv.id); // the stopped answer's late end leaves the new turn alone
  state.editingId = null;
  conv.messages = conv.messages.slice(0, i);
  conv.messages.push({ id: newId(), role: 'user', content: text });
  generate(conv);
}

async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    // plain http on another host has no clipboard API: the selection way still works
    const ta = document.createElement('textarea');
    ta.value = text;
    ta.style.position = 'fixed';
    ta.style.opacity = '0';
    document.body.append(ta);
    ta.select();
    const ok = document.execCommand('copy');
    ta.remove();
    return ok;
  }
}

// ---- models ----

let modelsLoading = null;
let modelsRetry = 0;
function refreshModels() {
  if (modelsLoading) return modelsLoading;
  modelsLoading = listModels(state.settings.apiKey, AbortSignal.timeout(10000))
    .then((models) => {
      state.model = models.length ? models[0].id : null;
      state.modelError = null;
    })
    .catch((err) => {
      state.model = null;
      state.modelError = { message: err.message, label: err.status === 401 ? 'API key needed' : 'offline' };
      if (err.status === 401) notify('This server needs an API key: set it in Settings.', 'error');
      // down or still loading the model: look again in a while
      else if (!modelsRetry) modelsRetry = setTimeout(() => { modelsRetry = 0; refreshModels(); }, 5000);
    })
    .finally(() => {
      modelsLoading = null;
      renderHeader();
      const conv = current();
      if (!conv || !conv.messages.length) renderMessages();
    });
  return modelsLoading;
}

// ---- settings and theme ----

function applyTheme() {
  const t = state.settings.theme;
  if (t === 'light' || t === 'dark') document.documentElement.dataset.theme = t;
  else delete document.documentElement.dataset.theme;
}

function effectiveDark() {
  const t = state.settings.theme;
  if (t === 'dark') return true;
  if (t === 'light') return false;
  return window.matchMedia('(prefers-color-scheme: dark)').matches;
}

function fillSettingsForm(s) {
  const f = els.settingsForm.elements;
  for (const k of Object.keys(DEFAULT_SETTINGS)) {
    if (!f[k]) continue;
    if (SWITCHES.includes(k)) f[k].checked = !!s[k];
    else f[k].value = s[k] === null || s[k] === undefined ? '' : String(s[k]);
  }
}

// The form's values, or an error message.
function readSettingsForm() {
  const f = els.settingsForm.elements;
  const out = { ...state.settings };
  out.apiKey = f.apiKey.value.trim();
  out.systemPrompt = f.systemPrompt.value;
  out.theme = f.theme.value;
  out.thinking = f.thinking.value;
  for (const k of SWITCHES) out[k] = f[k].checked;
  const ranges = {
    temperature: [0, 2, false, 'Temperature'],
    top_p: [0, 1, false, 'top_p'],
    top_k: [-1, 2 ** 31 - 1, true, 'top_k'],
    max_tokens: [1, 2 ** 31 - 1, true, 'Max tokens'],
    seed: [-(2 ** 53) + 1, 2 ** 53 - 1, true, 'Seed'],
  };
  for (const [k, [min, max, integer, label]] of Object.entries(ranges)) {
    const raw = f[k].value.trim();
    if (raw === '') { out[k] = null; continue; }
    const v = Number(raw);
    if (!Number.isFinite(v) || v < min || v > max || (integer && !Number.isInteger(v)) ||
        (k === 'top_p' && v === 0)) {
      return `${label} must be ${integer ? 'an integer' : 'a number'} ${k === 'top_p' ? 'above 0 and at most 1' : `from ${min} to ${max}`}`;
    }
    out[k] = v;
  }
  return out;
}

function openSettings() {
  fillSettingsForm(state.settings);
  els.settingsError.hidden = true;
  closeSidebar();
  els.settings.showModal();
}

els.settingsForm.addEventListener('submit', (e) => {
  if (e.submitter && e.submitter.value !== 'save') return;
  const s = readSettingsForm();
  if (typeof s === 'string') {
    e.preventDefault();
    els.settingsError.textContent = s;
    els.settingsError.hidden = false;
    return;
  }
  const keyChanged = s.apiKey !== state.settings.apiKey;
  state.settings = s;
  const err = saveSettings(s);
  if (err) notify(err, 'error');
  applyTheme();
  renderMessages(); // the debug panels follow their switch
  if (keyChanged || !state.model) refreshModels();
});
$('settings-reset').addEventListener('click', () => {
  fillSettingsForm({ ...DEFAULT_SETTINGS, apiKey: els.settingsForm.elements.apiKey.value });
});

$('toggle-theme').addEventListener('click', () => {
  state.settings = { ...state.settings, theme: effectiveDark() ? 'light' : 'dark' };
  saveSettings(state.settings);
  applyTheme();
});

// ---- sidebar (a drawer on narrow screens) ----

function openSidebar() {
  els.app.classList.add('sidebar-open');
  els.scrim.hidden = false;
  els.toggleSidebar.setAttribute('aria-expanded', 'true');
}
function closeSidebar() {
  els.app.classList.remove('sidebar-open');
  els.scrim.hidden = true;
  els.toggleSidebar.setAttribute('aria-expanded', 'false');
}
els.toggleSidebar.addEventListener('click', () => {
  if (els.app.classList.contains('sidebar-open')) closeSidebar();
  else openSidebar();
});
els.scrim.addEventListener('click', closeSidebar);

// ---- export / import ----

$('export').addEventListener('click', () => {
  const blob = new Blob([exportJson(state.conversations)], { type: 'application/json' });
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = `llaisys-chats-${new Date().toISOString().slice(0, 10)}.json`;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
});
$('import').addEventListener('click', () => els.importFile.click());
els.importFile.addEventListener('change', async () => {
  const file = els.importFile.files[0];
  els.importFile.value = '';
  if (!file) return;
  try {
    const list = importJson(await file.text());
    const ids = new Set(state.conversations.map((c) => c.id));
    for (const c of list) {
      // an import never overwrites; a copy is a conversation of its own, with its own session
      if (ids.has(c.id)) {
        c.id = newId();
        c.sessionId = newSessionId();
      }
      ids.add(c.id);
    }
    state.conversations = [...list, ...state.conversations].sort((a, b) => b.updated - a.updated);
    persist();
    if (list.length) openConversation(list[0].id);
    notify(`Imported ${list.length} conversation${list.length === 1 ? '' : 's'}.`);
  } catch (err) {
    notify(`Import failed: ${err.message}`, 'error');
  }
});

// ---- events ----

$('new-chat').addEventListener('click', newChat);
$('open-settings').addEventListener('click', openSettings);

els.convList.addEventListener('click', (e) => {
  const btn = e.target.closest('[data-action]');
  const item = e.target.closest('.conv-item');
  if (!btn || !item) return;
  const id = item.dataset.id;
  if (btn.dataset.action === 'open') openConversation(id);
  else if (btn.dataset.action === 'rename') { state.renamingId = id; renderSidebar(); }
  else if (btn.dataset.action === 'delete') deleteConversation(id);
});

els.messages.addEventListener('click', async (e) => {
  const btn = e.target.closest('button');
  if (!btn) return;
  const conv = current();
  const msgEl = btn.closest('.msg');
  const msg = conv && msgEl ? conv.messages.find((m) => m.id === msgEl.dataset.id) : null;
  if (btn.classList.contains('copy-code')) {
    const code = btn.closest('.code-block').querySelector('code');
    if (await copyText(code.textContent)) flash(btn, 'Copied');
    return;
  }
  switch (btn.dataset.action) {
    case 'edit':
      state.editingId = msg.id;
      renderMessages();
      break;
    case 'edit-cancel':
      state.editingId = null;
      renderMessages();
      break;
    case 'edit-save':
      saveEdit(conv, msg.id, msgEl.querySelector('.edit-input').value);
      break;
    case 'regenerate':
    case 'retry':
      regenerate(conv);
      break;
    case 'copy':
      if (await copyText(splitThinking(msg).answer)) flash(btn, 'Copied');
      break;
    case 'settings':
      openSettings();
      break;
    default:
  }
});

els.messages.addEventListener('keydown', (e) => {
  if (!e.target.classList.contains('edit-input')) return;
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    const msgEl = e.target.closest('.msg');
    saveEdit(current(), msgEl.dataset.id, e.target.value);
  } else if (e.key === 'Escape') {
    state.editingId = null;
    renderMessages();
  }
});

function flash(btn, text) {
  const old = btn.textContent;
  btn.textContent = text;
  setTimeout(() => { btn.textContent = old; }, 1200);
}

function autosize() {
  els.input.style.height = 'auto';
  els.input.style.height = `${Math.min(els.input.scrollHeight, window.innerHeight * 0.4)}px`;
}

els.composer.addEventListener('submit', (e) => {
  e.preventDefault();
  const conv = current();
  if (conv && state.running.has(conv.id)) return;
  const text = els.input.value;
  if (!text.trim()) return;
  els.input.value = '';
  autosize();
  send(text);
});
els.input.addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    els.composer.requestSubmit();
  }
});
els.input.addEventListener('input', autosize);
els.stop.addEventListener('click', () => stop(current()));
document.addEventListener('keydown', (e) => {
  if (e.key === 'Escape' && !els.settings.open) {
    const conv = current();
    if (conv && state.running.has(conv.id)) stop(conv);
    else closeSidebar();
  }
});

// Another tab changed the stored conversations or settings: follow it when idle here.
window.addEventListener('storage', (e) => {
  if (!isStorageKey(e.key) || state.running.size) return;
  state.settings = loadSettings();
  state.conversations = loadConversations();
  applyTheme();
  render();
});
window.addEventListener('pagehide', () => { if (saveTimer) persist(); });

// ---- start ----

applyTheme();
if (!current()) state.currentId = state.conversations[0] ? state.conversations[0].id : null;
render();
refreshModels();
focusInput();

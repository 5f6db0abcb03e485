// store.js: what the WebUI keeps in the browser's localStorage: the conversations, the
// settings (API key included: it never leaves this browser except to this server), and which
// conversation is open; plus export to and import from a JSON file.
//
// A conversation is {id, sessionId, title, created, updated, messages}: sessionId names its
// server-side session (kept with it through reloads, export and import); a message is
// {id, role: 'user'|'assistant', content, reasoning?, stats?, error?, pending?}.
// `pending` marks an answer still streaming; one found at load time was cut by a reload.

const KEY_CONVERSATIONS = 'llaisys.webui.conversations.v1';
const KEY_SETTINGS = 'llaisys.webui.settings.v1';
const KEY_CURRENT = 'llaisys.webui.current.v1';
export const EXPORT_FORMAT = 'llaisys-webui-conversations';

export const DEFAULT_SETTINGS = Object.freeze({
  apiKey: '',
  systemPrompt: '',
  temperature: null,
  top_p: null,
  top_k: null,
  max_tokens: null,
  seed: null,
  thinking: 'auto',    // 'on' / 'off': chat_template_kwargs.enable_thinking (Qwen3's switch)
  theme: 'auto',
  stream: true,        // false: ask for the whole answer in one response
  reusePrefix: true,   // false: the server neither takes from nor adds to its prefix cache
  debugPanel: false,   // a panel under each answer: request, usage, timings, session state
});

// The settings that are on/off switches (checkboxes in the form).
export const SWITCHES = Object.freeze(['stream', 'reusePrefix', 'debugPanel']);

export function newId() {
  const b = new Uint8Array(12);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

// A session id for the server: 1-64 of [A-Za-z0-9._:-] (src/server/sessions.c).
const SESSION_ID = /^[A-Za-z0-9._:-]{1,64}$/;
export function newSessionId() {
  return `webui-${newId()}`;
}

function readJson(key, fallback) {
  try {
    const text = localStorage.getItem(key);
    return text === null ? fallback : JSON.parse(text);
  } catch {
    return fallback;
  }
}

// Returns null, or the reason the browser refused (storage full or disabled).
function writeJson(key, value) {
  try {
    localStorage.setItem(key, JSON.stringify(value));
    return null;
  } catch (err) {
    return err && err.name === 'QuotaExceededError'
      ? 'The browser storage is full: delete or export old conversations'
      : 'The browser refused to store the conversations';
  }
}

export function loadSettings() {
  const s = readJson(KEY_SETTINGS, {});
  const out = { ...DEFAULT_SETTINGS };
  if (s && typeof s === 'object') {
    for (const k of Object.keys(DEFAULT_SETTINGS)) if (k in s) out[k] = s[k];
  }
  for (const k of SWITCHES) out[k] = !!out[k];
  return out;
}

export function saveSettings(s) {
  return writeJson(KEY_SETTINGS, s);
}

function cleanMessage(m) {
  if (!m || typeof m !== 'object') return null;
  if (m.role !== 'user' && m.role !== 'assistant') return null;
  if (typeof m.content !== 'string') return null;
  const out = { id: typeof m.id === 'string' && m.id ? m.id : newId(), role: m.role, content: m.content };
  if (typeof m.reasoning === 'string' && m.reasoning) out.reasoning = m.reasoning;
  if (m.stats && typeof m.stats === 'object') out.stats = { ...m.stats };
  if (m.error && typeof m.error === 'object' && typeof m.error.message === 'string') {
    out.error = { message: m.error.message, status: Number(m.error.status) || 0 };
  }
  if (m.pending) out.pending = true;
  return out;
}

// A conversation from outside (storage or an imported file), checked and normalised; null
// when it is not one.
export function cleanConversation(c) {
  if (!c || typeof c !== 'object' || !Array.isArray(c.messages)) return null;
  const messages = c.messages.map(cleanMessage);
  if (messages.some((m) => m === null)) return null;
  const now = Date.now();
  return {
    id: typeof c.id === 'string' && c.id ? c.id : newId(),
    // conversations from before sessions, or with a malformed id, get a new one
    sessionId: typeof c.sessionId === 'string' && SESSION_ID.test(c.sessionId) ? c.sessionId : newSessionId(),
    title: typeof c.title === 'string' ? c.title : '',
    created: Number(c.created) || now,
    updated: Number(c.updated) || Number(c.created) || now,
    messages,
  };
}

// The stored conversations, newest first. Answers left streaming by a reload are closed.
export function loadConversations() {
  const list = readJson(KEY_CONVERSATIONS, []);
  if (!Array.isArray(list)) return [];
  const out = [];
  for (const c of list) {
    const conv = cleanConversation(c);
    if (!conv) continue;
    for (const m of conv.messages) {
      if (m.pending) {
        delete m.pending;
        m.stats = { ...(m.stats || {}), finish: 'interrupted' };
      }
    }
    out.push(conv);
  }
  return out.sort((a, b) => b.updated - a.updated);
}

export function saveConversations(list) {
  return writeJson(KEY_CONVERSATIONS, list);
}

export function loadCurrentId() {
  return readJson(KEY_CURRENT, null);
}

export function saveCurrentId(id) {
  writeJson(KEY_CURRENT, id);
}

export function isStorageKey(key) {
  return key === KEY_CONVERSATIONS || key === KEY_SETTINGS;
}

// The title a conversation gets from its first message.
export function titleFrom(text) {
  const line = text.replace(/\s+/g, ' ').trim();
  if (!line) return 'New chat';
  return line.length > 48 ? `${line.slice(0, 47)}…` : line;
}

export function exportJson(conversations) {
  return JSON.stringify(
    { format: EXPORT_FORMAT, version: 1, exported: new Date().toISOString(), conversations },
    null,
    2,
  );
}

// Conversations from an exported file (or a bare conversation, or an array of them). Throws an
// Error naming what is wrong.
export function importJson(text) {
  let data;
  try {
    data = JSON.parse(text);
  } catch (err) {
    throw new Error(`Not a JSON file (${err.message})`);
  }
  let list;
  if (Array.isArray(data)) list = data;
  else if (data && Array.isArray(data.conversations)) list = data.conversations;
  else if (data && Array.isArray(data.messages)) list = [data];
  else throw new Error('No conversations in this file');
  const out = [];
  list.forEach((c, i) => {
    const conv = cleanConversation(c);
    if (!conv) throw new Error(`Conversation ${i + 1} is not valid (each needs messages with a role and content)`);
    for (const m of conv.messages) delete m.pending;
    out.push(conv);
  });
  return out;
}

// api.js: the HTTP calls of the WebUI to llaisys-server: the model list, chat completions
// (streamed or in one response), cancelling a request by its id, and a conversation's session
// (its state, and deleting it).
//
// URLs are relative to the page, so the UI works at / and under a reverse proxy's path prefix.
// Every failure becomes an ApiError whose message is the server's own when it sent one.
// Requests that belong to a session also carry it as the X-Session-Id header: a load balancer in
// front of several replicas (deploy/nginx) routes on it without reading bodies.
import { SseParser } from './sse.js';

export class ApiError extends Error {
  // kind: 'network' (no answer), 'http' (an error status), 'stream' (the stream broke or
  // carried an error), 'abort' (we stopped it).
  // param: the request field the server blamed ('' when none).
  constructor(message, { kind, status = 0, type = '', code = '', param = '' } = {}) {
    super(message);
    this.name = 'ApiError';
    this.kind = kind;
    this.status = status;
    this.type = type;
    this.code = code;
    this.param = param;
  }
}

function headers(apiKey, extra = {}) {
  const h = { ...extra };
  if (apiKey) h.Authorization = `Bearer ${apiKey}`;
  return h;
}

// An error status into an ApiError carrying the server's message (OpenAI error body).
async function httpError(res) {
  let message = `${res.status} ${res.statusText || 'error'}`.trim();
  let type = '';
  let code = '';
  let param = '';
  try {
    const body = await res.json();
    if (body && body.error) {
      if (body.error.message) message = body.error.message;
      type = body.error.type || '';
      code = body.error.code || '';
      param = body.error.param || '';
    }
  } catch {
    /* not JSON: keep the status line */
  }
  return new ApiError(message, { kind: 'http', status: res.status, type, code, param });
}

function networkError(err) {
  if (err && err.name === 'AbortError') return new ApiError('stopped', { kind: 'abort' });
  return new ApiError('Cannot reach the server: is llaisys-server running?', { kind: 'network' });
}

// GET v1/models: the ids of the models served.
export async function listModels(apiKey, signal) {
  let res;
  try {
    res = await fetch('v1/models', { headers: headers(apiKey), signal });
  } catch (err) {
    throw networkError(err);
  }
  if (!res.ok) throw await httpError(res);
  const body = await res.json();
  return (body.data || []).map((m) => ({ id: String(m.id), maxLen: m.max_model_len || 0 }));
}

// POST v1/chat/completions with body as given (its session_id, if any, also as the header).
// Calls onDelta({content, reasoning}) for each piece of text, in order: many with
// body.stream, one with the whole answer without. Resolves to {finishReason, usage (or null),
// id} once the answer is complete; rejects with an ApiError otherwise (kind 'abort' after
// signal aborts).
export async function sendChat({ body, apiKey, requestId, signal, onDelta }) {
  const extra = { 'Content-Type': 'application/json', 'X-Request-Id': requestId };
  if (body.session_id) extra['X-Session-Id'] = body.session_id;
  let res;
  try {
    res = await fetch('v1/chat/completions', {
      method: 'POST', headers: headers(apiKey, extra), body: JSON.stringify(body), signal,
    });
  } catch (err) {
    throw networkError(err);
  }
  if (!res.ok) throw await httpError(res);
  return body.stream ? readStream(res, signal, onDelta) : readWhole(res, signal, onDelta);
}

function deltaText(d) {
  return {
    content: typeof d.content === 'string' ? d.content : '',
    reasoning: typeof d.reasoning_content === 'string' ? d.reasoning_content : '',
  };
}

// A chat.completion object: its first choice's message, in one piece.
async function readWhole(res, signal, onDelta) {
  let data;
  try {
    data = await res.json();
  } catch {
    if (signal && signal.aborted) throw new ApiError('stopped', { kind: 'abort' });
    throw new ApiError('The server sent a malformed answer', { kind: 'stream' });
  }
  const choice = data && data.choices && data.choices[0];
  if (!choice || !choice.message) throw new ApiError('The server sent an answer without a message', { kind: 'stream' });
  const { content, reasoning } = deltaText(choice.message);
  if (content || reasoning) onDelta({ content, reasoning });
  return { finishReason: choice.finish_reason || null, usage: data.usage || null, id: data.id || '' };
}

// An SSE stream of chat.completion.chunk events, up to its [DONE].
async function readStream(res, signal, onDelta) {
  const parser = new SseParser();
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let finishReason = null;
  let usage = null;
  let id = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      for (const data of parser.feed(value)) {
        if (data === '[DONE]') return { finishReason, usage, id };
        let chunk;
        try {
          chunk = JSON.parse(data);
        } catch {
          throw new ApiError('The server sent a malformed stream event', { kind: 'stream' });
        }
        if (chunk.error) {
          throw new ApiError(chunk.error.message || 'The server reported an error', {
            kind: 'stream',
            type: chunk.error.type || '',
            code: chunk.error.code || '',
          });
        }
        if (chunk.id) id = chunk.id;
        if (chunk.usage) usage = chunk.usage;
        const choice = chunk.choices && chunk.choices[0];
        if (!choice) continue;
        const { content, reasoning } = deltaText(choice.delta || {});
        if (content || reasoning) onDelta({ content, reasoning });
        if (choice.finish_reason) finishReason = choice.finish_reason;
      }
    }
  } catch (err) {
    if (err instanceof ApiError) throw err;
    if (signal && signal.aborted) throw new ApiError('stopped', { kind: 'abort' });
    throw new ApiError('The connection to the server broke during the answer', { kind: 'stream' });
  } finally {
    reader.releaseLock();
  }
  if (signal && signal.aborted) throw new ApiError('stopped', { kind: 'abort' });
  throw new ApiError('The server closed the stream before the end of the answer', { kind: 'stream' });
}

// POST v1/requests/{id}/cancel; best effort (the aborted connection cancels it too).
export async function cancelRequest(requestId, apiKey) {
  try {
    await fetch(`v1/requests/${encodeURIComponent(requestId)}/cancel`, {
      method: 'POST',
      headers: headers(apiKey),
      signal: AbortSignal.timeout(5000),
    });
  } catch {
    /* the server may be gone: nothing to cancel then */
  }
}

// GET v1/sessions/{id}: the session's state ({tokens, pinned_blocks, turns, last_use, ...}), or
// null when the server has none by that id (expired, deleted, or a server without sessions).
export async function getSession(sessionId, apiKey, signal) {
  let res;
  try {
    res = await fetch(`v1/sessions/${encodeURIComponent(sessionId)}`, {
      headers: headers(apiKey, { 'X-Session-Id': sessionId }), signal,
    });
  } catch (err) {
    throw networkError(err);
  }
  if (res.status === 404) return null;
  if (!res.ok) throw await httpError(res);
  return res.json();
}

// DELETE v1/sessions/{id}: frees the session's pinned KV blocks; best effort (a session
// already gone, or a server without sessions, is not an error).
export async function deleteSession(sessionId, apiKey) {
  try {
    await fetch(`v1/sessions/${encodeURIComponent(sessionId)}`, {
      method: 'DELETE',
      headers: headers(apiKey, { 'X-Session-Id': sessionId }),
      signal: AbortSignal.timeout(5000),
    });
  } catch {
    /* unreachable server: the session expires there after its idle time */
  }
}

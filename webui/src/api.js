// api.js: the HTTP calls of the WebUI to llaisys-server: the model list, streamed chat
// completions, and cancelling a request by its id.
//
// URLs are relative to the page, so the UI works at / and under a reverse proxy's path prefix.
// Every failure becomes an ApiError whose message is the server's own when it sent one.
import { SseParser } from './sse.js';

export class ApiError extends Error {
  // kind: 'network' (no answer), 'http' (an error status), 'stream' (the stream broke or
  // carried an error), 'abort' (we stopped it).
  constructor(message, { kind, status = 0, type = '', code = '' } = {}) {
    super(message);
    this.name = 'ApiError';
    this.kind = kind;
    this.status = status;
    this.type = type;
    this.code = code;
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
  try {
    const body = await res.json();
    if (body && body.error) {
      if (body.error.message) message = body.error.message;
      type = body.error.type || '';
      code = body.error.code || '';
    }
  } catch {
    /* not JSON: keep the status line */
  }
  return new ApiError(message, { kind: 'http', status: res.status, type, code });
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

// POST v1/chat/completions with stream: true. Calls onDelta({content, reasoning}) for each
// piece of text, in order. Resolves to {finishReason, usage (or null), id} when the stream
// ends with [DONE]; rejects with an ApiError otherwise (kind 'abort' after signal aborts).
export async function streamChat({ body, apiKey, requestId, signal, onDelta, onStart }) {
  let res;
  try {
    res = await fetch('v1/chat/completions', {
      method: 'POST',
      headers: headers(apiKey, { 'Content-Type': 'application/json', 'X-Request-Id': requestId }),
      body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
      signal,
    });
  } catch (err) {
    throw networkError(err);
  }
  if (!res.ok) throw await httpError(res);
  if (onStart) onStart();

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
        const delta = choice.delta || {};
        const content = typeof delta.content === 'string' ? delta.content : '';
        const reasoning = typeof delta.reasoning_content === 'string' ? delta.reasoning_content : '';
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

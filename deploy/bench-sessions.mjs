// bench-sessions.mjs: time to first token of a conversation's turns through a load balancer,
// with and without session affinity (deploy/bench-sessions.sh starts the replicas and nginx).
//
//   node deploy/bench-sessions.mjs --url URL [--conversations N] [--turns T] [--parallel P]
//        [--system-words W] [--user-words U] [--max-tokens M] [--rounds R] [--json]
//
// Each round runs N conversations of T turns twice, once per mode, the modes alternating so
// that load from elsewhere on the machine falls on both alike:
//   affinity     every turn carries the X-Session-Id header (nginx hashes on it: one replica)
//   no-affinity  no header (nginx spreads the turns over the replicas)
// Both send session_id in the body, as the WebUI does; only the balancer's view differs. Each
// conversation opens with a system prompt of W words that starts with a word of its own, so no
// two conversations share a cached prefix and a turn's cache hit can only come from that
// conversation's earlier turns. P conversations run at once; the turns of one run in order. A
// turn's TTFT is from sending the request to the first streamed text. Prints, per mode and
// turn, the TTFT p50/p90 and the mean prompt and cached prompt tokens.
const args = process.argv.slice(2);
function opt(name, def) {
  const i = args.indexOf(`--${name}`);
  if (i < 0) return def;
  const v = args[i + 1];
  if (v === undefined) throw new Error(`--${name} needs a value`);
  return v;
}
function intOpt(name, def, min) {
  const raw = opt(name, String(def));
  const v = Number(raw);
  if (!Number.isInteger(v) || v < min) throw new Error(`--${name} must be an integer >= ${min}, got '${raw}'`);
  return v;
}

const url = String(opt('url', '')).replace(/\/$/, '');
if (!url) {
  console.error('bench-sessions.mjs: --url URL is required (the load balancer, e.g. http://127.0.0.1:8000)');
  process.exit(2);
}
const cfg = {
  conversations: intOpt('conversations', 12, 1),
  turns: intOpt('turns', 5, 1),
  parallel: intOpt('parallel', 2, 1),
  systemWords: intOpt('system-words', 1200, 1),
  userWords: intOpt('user-words', 40, 1),
  maxTokens: intOpt('max-tokens', 24, 1),
  rounds: intOpt('rounds', 1, 1),
};
const json = args.includes('--json');
const runTag = Date.now().toString(36);

// Deterministic filler text from a small vocabulary (the model is random: meaning is moot).
const WORDS = ['river', 'stone', 'lamp', 'orbit', 'cedar', 'signal', 'harbor', 'quartz', 'meadow',
  'engine', 'copper', 'violet', 'summit', 'thread', 'canyon', 'ember', 'glacier', 'pixel', 'saddle', 'tundra'];
function words(n, seed) {
  let x = seed >>> 0 || 1;
  const out = [];
  for (let i = 0; i < n; i++) {
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
    out.push(WORDS[x % WORDS.length]);
  }
  return out.join(' ');
}

// One streamed turn: resolves to {ttft (s), text, usage}.
async function turn(body, sessionHeader) {
  const headers = { 'Content-Type': 'application/json' };
  if (sessionHeader) headers['X-Session-Id'] = sessionHeader;
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers, body: JSON.stringify(body), signal: AbortSignal.timeout(600000),
  });
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const decoder = new TextDecoder();
  let buf = '';
  let ttft = null;
  let text = '';
  let usage = null;
  for await (const chunk of res.body) {
    buf += decoder.decode(chunk, { stream: true });
    let cut;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
        const data = JSON.parse(line.slice(6));
        if (data.error) throw new Error(`stream error: ${data.error.message}`);
        if (data.usage) usage = data.usage;
        const d = data.choices && data.choices[0] && data.choices[0].delta;
        const piece = d ? (d.content || '') + (d.reasoning_content || '') : '';
        if (piece && ttft === null) ttft = (performance.now() - t0) / 1000;
        if (d && d.content) text += d.content;
      }
    }
  }
  if (ttft === null || !usage) throw new Error('the stream ended without text or usage');
  return { ttft, text, usage };
}

async function conversation(mode, round, i) {
  const id = `bench-${runTag}-${mode}-${round}-${i}`;
  const messages = [{ role: 'system', content: `${id}. ${words(cfg.systemWords, 7919 * (i + 1) + round)}` }];
  const out = [];
  for (let t = 0; t < cfg.turns; t++) {
    messages.push({ role: 'user', content: words(cfg.userWords, 104729 * (i + 1) + 31 * t + round) });
    const body = {
      messages, max_tokens: cfg.maxTokens, ignore_eos: true, seed: i, stream: true,
      stream_options: { include_usage: true }, session_id: id,
    };
    const r = await turn(body, mode === 'affinity' ? id : null);
    messages.push({ role: 'assistant', content: r.text });
    out.push({ turn: t + 1, ttft: r.ttft, prompt: r.usage.prompt_tokens,
      cached: (r.usage.prompt_tokens_details || {}).cached_tokens || 0 });
  }
  return out;
}

// N conversations, P at a time.
async function runMode(mode, round) {
  const results = [];
  let next = 0;
  const worker = async () => {
    while (next < cfg.conversations) {
      const i = next++;
      results.push(...await conversation(mode, round, i));
    }
  };
  await Promise.all(Array.from({ length: cfg.parallel }, worker));
  return results;
}

function quantile(sorted, q) {
  if (!sorted.length) return NaN;
  const pos = (sorted.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

const modes = ['affinity', 'no-affinity'];
const all = { affinity: [], 'no-affinity': [] };
for (let round = 0; round < cfg.rounds; round++) {
  for (const mode of round % 2 ? [...modes].reverse() : modes) all[mode].push(...await runMode(mode, round));
}

const summary = [];
for (const mode of modes) {
  for (let t = 1; t <= cfg.turns; t++) {
    const rows = all[mode].filter((r) => r.turn === t);
    const ttfts = rows.map((r) => r.ttft).sort((a, b) => a - b);
    const mean = (k) => rows.reduce((s, r) => s + r[k], 0) / rows.length;
    summary.push({ mode, turn: t, n: rows.length, ttft_p50: quantile(ttfts, 0.5), ttft_p90: quantile(ttfts, 0.9),
      prompt_mean: mean('prompt'), cached_mean: mean('cached') });
  }
}
if (json) {
  console.log(JSON.stringify({ config: cfg, url, summary }));
} else {
  console.log(`${cfg.rounds} round(s) x ${cfg.conversations} conversations x ${cfg.turns} turns per mode, ` +
    `${cfg.parallel} at a time, system prompt ${cfg.systemWords} words, ${cfg.maxTokens} tokens per answer`);
  console.log('mode         turn   n  TTFT p50  TTFT p90  prompt  cached');
  for (const s of summary) {
    console.log(`${s.mode.padEnd(12)} ${String(s.turn).padStart(4)} ${String(s.n).padStart(3)} ` +
      `${s.ttft_p50.toFixed(3).padStart(8)}s ${s.ttft_p90.toFixed(3).padStart(8)}s ` +
      `${s.prompt_mean.toFixed(0).padStart(7)} ${s.cached_mean.toFixed(0).padStart(7)}`);
  }
}

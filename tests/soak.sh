#!/bin/sh
# soak.sh: a soak at capacity (issue 16), not a timed test: starts llaisys-server on MODEL,
# measures its capacity (MAX_SEQS clients, closed loop: finished requests per second), then
# offers that rate open loop (Poisson arrivals, `llaisys-cli bench-serve --rate`) for MINUTES,
# sampling the server's RSS, open descriptors (/proc) and KV tokens in use (/metrics) every
# 10 s, and prints every sample, first / last / max of each, and the load's summary. Exits 1
# when a request failed, a 429 came without Retry-After, an admitted stream did not finish, or
# the server did not stop cleanly.
# usage: sh tests/soak.sh [MINUTES [MODEL]]   (default 30, tests/fixtures/tiny-qwen2)
# environment: MAX_SEQS (8), MAX_QUEUE (MAX_SEQS), THREADS (2), PROMPT (64), GEN (32) tokens,
# LLAISYS_SERVER, LLAISYS_CLI; SERVER_ARGS is passed on to the server. All the load comes from
# one address, so the server allows it 512 connections (--max-connections-per-ip).
minutes=${1:-30}
model=${2:-tests/fixtures/tiny-qwen2}
. tests/lib/load.sh # MAX_SEQS and the rest, start_load, bench
start_load soak || exit 1
bench --clients "$seqs" --requests $((seqs * 20)) >"$tmp/cap" 2>"$tmp/cap.err" ||
    { cat "$tmp/cap.err"; exit 1; }
cap=$(jq -r .requests_per_s "$tmp/cap")
echo "# $model: max-seqs $seqs, max-queue $queue, $threads threads, $prompt-token prompts, $gen new tokens"
echo "# capacity ($seqs clients, closed loop): $cap requests/s; soak: $minutes min at that rate, open loop"
rc=0
bench --rate "$cap" --duration $((minutes * 60)) --server-pid "$PID" --sample-every 10 \
    --warmup 0 >"$tmp/soak" 2>"$tmp/soak.err" || rc=1
grep -v '^bench-serve: sample' "$tmp/soak.err"
echo "# samples (every 10 s):"
grep '^bench-serve: sample' "$tmp/soak.err" | sed 's/^bench-serve: sample /# /'
jq -rs '.[0] as $r | .[1] as $w |
    "load: offered \($r.offered) (\($r.offered_per_s * 100 | round / 100)/s), answered \($r.answered), 429 \($r.rejected_429) (\($r.rejected_429_share * 1000 | round / 10)%, \($r.rejected_429_with_retry_after) with Retry-After), errors \($r.errors), admitted \($r.admitted), finished \($r.finished); TTFT p50 / p99 \($r.ttft_p50_s) / \($r.ttft_p99_s) s, ITL p50 / p99 \($r.itl_p50_s * 1000) / \($r.itl_p99_s * 1000) ms",
    "server, \($w.samples) samples (first / last / max): RSS \($w.rss_kb.start) / \($w.rss_kb.end) / \($w.rss_kb.max) kB, open fds \($w.fds.start) / \($w.fds.end) / \($w.fds.max), KV tokens \($w.kv_tokens.start) / \($w.kv_tokens.end) / \($w.kv_tokens.max)"' \
    "$tmp/soak"
[ "$(jq -rs '.[0].finished == .[0].admitted' "$tmp/soak")" = true ] || rc=1
kill -TERM "$PID"; wait "$PID" || { echo "# the server did not exit 0 on SIGTERM"; rc=1; }
exit $rc

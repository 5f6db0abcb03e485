#!/bin/sh
# overload.sh: overload figures (issue 16), not a timed test: starts llaisys-server on MODEL,
# measures the unloaded latency (1 client, closed loop) and the capacity (MAX_SEQS clients,
# closed loop: finished requests per second), then offers 2x and 4x that rate open loop
# (Poisson arrivals, `llaisys-cli bench-serve --rate`) for SECONDS each and prints, per rate:
# the share answered 429 (and how many carried Retry-After), errors, admitted streams and how
# many finished, TTFT and ITL p50/p99 of the admitted streams, ITL p99 against unloaded and
# against the closed loop at capacity (the same batch size without overload), and the
# server's RSS, open descriptors and KV tokens (start / max / end). Exits 1 when a run had
# errors, a 429 without Retry-After, an admitted stream that did not finish, or the server did
# not stop cleanly.
# usage: sh tests/overload.sh [MODEL [SECONDS]]   (default tests/fixtures/tiny-qwen2, 60)
# environment: MAX_SEQS (8), MAX_QUEUE (MAX_SEQS), THREADS (2), PROMPT (64), GEN (32) tokens,
# FACTORS ("2 4"), UNLOADED_REQUESTS (16), CAP_REQUESTS (6 x MAX_SEQS), LLAISYS_SERVER,
# LLAISYS_CLI; SERVER_ARGS is passed on to the server.
model=${1:-tests/fixtures/tiny-qwen2}
secs=${2:-60}
. tests/lib/load.sh # MAX_SEQS and the rest, start_load, bench
start_load overload || exit 1

echo "# $model: max-seqs $seqs, max-queue $queue, $threads threads, $prompt-token prompts, $gen new tokens"
bench --clients 1 --requests "${UNLOADED_REQUESTS:-16}" >"$tmp/unloaded" 2>"$tmp/unloaded.err" ||
    { cat "$tmp/unloaded.err"; exit 1; }
bench --clients "$seqs" --requests "${CAP_REQUESTS:-$((seqs * 6))}" --warmup 0 >"$tmp/cap" 2>"$tmp/cap.err" ||
    { cat "$tmp/cap.err"; exit 1; }
itl0=$(jq -r .itl_p99_s "$tmp/unloaded")
itlc=$(jq -r .itl_p99_s "$tmp/cap")
cap=$(jq -r .requests_per_s "$tmp/cap")
ms() { jq -r "(.$1 * 10000 | round) / 10" "$2"; }
echo "# unloaded (1 client): TTFT p50 $(jq -r .ttft_p50_s "$tmp/unloaded") s, ITL p50 $(ms itl_p50_s "$tmp/unloaded") ms, p99 $(ms itl_p99_s "$tmp/unloaded") ms"
echo "# capacity ($seqs clients, closed loop): $cap requests/s, $(jq -r .tokens_per_s "$tmp/cap") tokens/s, ITL p50 $(ms itl_p50_s "$tmp/cap") ms, p99 $(ms itl_p99_s "$tmp/cap") ms"
echo
echo "| load | offered/s | answered/s | 429 share | 429 with Retry-After | errors | admitted finished | TTFT p50 / p99 s | ITL p50 / p99 ms | ITL p99 / unloaded | ITL p99 / at capacity | RSS MiB start / max / end | fds start / max / end | KV tokens start / max / end |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
rc=0
for f in ${FACTORS:-2 4}; do
    rate=$(echo "$cap * $f" | bc -l)
    bench --rate "$rate" --duration "$secs" --server-pid "$PID" --sample-every 1 --warmup 0 \
        >"$tmp/open$f" 2>"$tmp/open$f.err" || { rc=1; grep -v '^bench-serve: sample' "$tmp/open$f.err"; }
    jq -rs --arg f "$f" --argjson itl0 "$itl0" --argjson itlc "$itlc" '.[0] as $r | .[1] as $w |
        "| \($f)x | \($r.offered_per_s * 100 | round / 100) | \($r.answered_per_s * 100 | round / 100) | \($r.rejected_429_share * 1000 | round / 10)% | \($r.rejected_429_with_retry_after) of \($r.rejected_429) | \($r.errors) | \($r.finished) of \($r.admitted) | \($r.ttft_p50_s) / \($r.ttft_p99_s) | \($r.itl_p50_s * 1000 | round) / \($r.itl_p99_s * 1000 | round) | \($r.itl_p99_s / $itl0 * 100 | round / 100) | \($r.itl_p99_s / $itlc * 100 | round / 100) | \($w.rss_kb.start / 1024 | round) / \($w.rss_kb.max / 1024 | round) / \($w.rss_kb.end / 1024 | round) | \($w.fds.start) / \($w.fds.max) / \($w.fds.end) | \($w.kv_tokens.start) / \($w.kv_tokens.max) / \($w.kv_tokens.end) |"' \
        "$tmp/open$f"
    [ "$(jq -rs '.[0].finished == .[0].admitted' "$tmp/open$f")" = true ] || rc=1
done
kill -TERM "$PID"; wait "$PID" || { echo "# the server did not exit 0 on SIGTERM"; rc=1; }
exit $rc

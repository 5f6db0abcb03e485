#!/bin/sh
# cli_ops.sh: what operators of a shared server rely on (issue 16): exact admission (a burst of
# exactly max-seqs + max-queue streams is admitted whole, one more gets 429 with Retry-After,
# and the slots of clients that hung up are free again at once); the metrics the design names,
# with their values; GET /v1/requests/{id} and its ownership; per-key budgets (requests per
# minute, tokens per minute, concurrency) with OpenAI's x-ratelimit-* headers, and one key's
# flood not starving another key. The server under test is $LLAISYS_SERVER.
model=tests/fixtures/tiny-qwen2
. tests/lib/harness.sh # $srv, $tmp, $pids, check, start, stop

for tool in curl jq; do
    command -v "$tool" >/dev/null || { echo "not ok ops tests need $tool"; exit 0; }
done
c() { curl -s -m 60 "$@"; }
MKEY=""
# metric NAME [LABELS]: the value of the first sample NAME{...LABELS...}
metric() {
    c $MKEY "$URL/metrics" | grep "^$1{" | grep -F "${2:-}" | head -n 1 | sed 's/.* //'
}
# wait_metric NAME LABEL VALUE: up to 30 s for the sample to equal VALUE
wait_metric() {
    i=0
    while [ $i -lt 300 ]; do
        [ "$(metric "$1" "$2")" = "$3" ] && return 0
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}
# wait_status FILE...: up to 60 s for every header file to hold a status line; prints the codes
wait_status() {
    i=0
    while [ $i -lt 600 ]; do
        n=0
        for f in "$@"; do grep -q '^HTTP/' "$f" 2>/dev/null && n=$((n + 1)); done
        [ $n -eq $# ] && break
        sleep 0.1
        i=$((i + 1))
    done
    for f in "$@"; do sed -n 's/^HTTP\/[0-9.]* \([0-9]*\).*/\1/p' "$f" 2>/dev/null | tail -n 1; done |
        tr '\n' ' '
}
long='{"messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":4000,"temperature":0,"ignore_eos":true,"stream":true}'

# ---- exact admission (finding 6) ----
start burst --model "$model" --max-seqs 2 --max-queue 3 --threads 1 || exit 0
[ "$(metric llaisys_admission_limit)" = 5 ]
check "admission limit is max-seqs + max-queue (5)" $?
# burst ROUND: five streams at once, their pids in $bp
burst() {
    bp=""
    for i in 1 2 3 4 5; do
        rm -f "$tmp/bh$1.$i"
        curl -s -N -m 120 -D "$tmp/bh$1.$i" -o /dev/null -d "$long" "$URL/v1/chat/completions" &
        bp="$bp $!"
    done
    pids="$pids $bp"
}
burst 1
codes=$(wait_status "$tmp/bh1.1" "$tmp/bh1.2" "$tmp/bh1.3" "$tmp/bh1.4" "$tmp/bh1.5")
[ "$codes" = "200 200 200 200 200 " ]
check "a burst of exactly max-seqs + max-queue streams: every one admitted (got $codes)" $?
wait_metric llaisys_num_requests_held "" 5
check "the engine holds all five" $?
got=$(c -D "$tmp/h429" -o "$tmp/e429" -w '%{http_code}' -d "$long" "$URL/v1/chat/completions")
[ "$got" = 429 ] && grep -qi '^retry-after: [1-9]' "$tmp/h429" &&
    [ "$(jq -r .error.type "$tmp/e429")" = rate_limit_error ]
check "one more: 429 rate_limit_error with Retry-After" $?
kill $bp 2>/dev/null
wait_metric llaisys_num_requests_held "" 0
check "clients hang up: their slots are free (held 0)" $?
burst 2
codes=$(wait_status "$tmp/bh2.1" "$tmp/bh2.2" "$tmp/bh2.3" "$tmp/bh2.4" "$tmp/bh2.5")
[ "$codes" = "200 200 200 200 200 " ]
check "right after a disconnect storm the next full burst is admitted (got $codes)" $?
kill $bp 2>/dev/null
wait_metric llaisys_num_requests_held "" 0
wait_metric llaisys_kv_cache_blocks 'state="in_use"' 0
check "after both storms: nothing held, no KV block in use" $?
stop burst

#!/bin/sh
# cli_ops.sh: what operators of a shared server rely on (issue 16): exact admission (a burst of
# exactly max-seqs + max-queue streams is admitted whole, one more gets 429 with Retry-After,
# and the slots of clients that hung up are free again at once); the metrics the design names,
# with their values; GET /v1/requests/{id} and its ownership; per-key budgets (requests per
# minute, tokens per minute, concurrency) with OpenAI's x-ratelimit-* headers, and one key's
# flood not starving another key; the compute pool dropping to one thread beside busy
# processes and back (and not with --fixed-threads). The server under test is $LLAISYS_SERVER.
model=tests/fixtures/tiny-qwen2
. tests/lib/harness.sh # $srv, $tmp, $pids, check, start, stop

for tool in curl jq; do
    command -v "$tool" >/dev/null || { echo "not ok ops tests need $tool"; exit 0; }
done
c() { curl -s -m 60 "$@"; }
MKEY=""
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

# ---- per-key budgets ----
printf 'key-bad rpm=5\nkey-worse burst=2\n' >"$tmp/badkeys"
"$srv" --model "$model" --port 0 --api-key-file "$tmp/badkeys" >/dev/null 2>"$tmp/badkeys.err"
rc=$?
[ $rc -eq 2 ] && grep -q "badkeys:2: unknown budget 'burst'" "$tmp/badkeys.err"
check "a bad budget in the key file: exit 2 naming the file's line" $?

cat >"$tmp/keys" <<'KEYS'
# name, then budgets; dave takes the --key-* defaults
key-alice name=alice rpm=3
key-bob name=bob tpm=60
key-carol name=carol concurrency=2
key-dave
KEYS
start keys --model "$model" --api-key-file "$tmp/keys" --key-rpm 1000 --max-seqs 3 --max-queue 1 \
    --threads 1 || exit 0
A='Authorization: Bearer key-alice'
B='Authorization: Bearer key-bob'
C='Authorization: Bearer key-carol'
D='Authorization: Bearer key-dave'
metric() {
    c -H "$D" "$URL/metrics" | grep "^$1{" | grep -F "${2:-}" | head -n 1 | sed 's/.* //'
}
hdr() { sed -n "s/^$1: *\([^[:space:]]*\).*/\1/Ip" "$2" | tail -n 1; }
small='{"prompt":"Once upon a time","max_tokens":1}'

for i in 1 2 3; do
    c -D "$tmp/ha$i" -o "$tmp/ba$i" -H "$A" -d "$small" "$URL/v1/completions"
done
[ "$(hdr x-ratelimit-limit-requests "$tmp/ha1")" = 3 ] &&
    [ "$(hdr x-ratelimit-remaining-requests "$tmp/ha1")" = 2 ] &&
    [ "$(hdr x-ratelimit-reset-requests "$tmp/ha1")" = 20s ] &&
    [ "$(hdr x-ratelimit-remaining-requests "$tmp/ha3")" = 0 ] &&
    grep -q '^HTTP/1.1 200' "$tmp/ha3" && ! grep -qi '^x-ratelimit-limit-tokens' "$tmp/ha1"
check "rpm: 3 requests, headers count down (limit 3, remaining 2..0, reset 20s)" $?
got=$(c -D "$tmp/ha4" -o "$tmp/ba4" -w '%{http_code}' -H "$A" -d "$small" "$URL/v1/completions")
ra=$(hdr retry-after "$tmp/ha4")
[ "$got" = 429 ] && [ "$ra" -ge 15 ] && [ "$ra" -le 20 ] &&
    jq -e '.error.code == "rate_limit_exceeded" and (.error.message | test("key .alice.: requests per minute"))' \
        "$tmp/ba4" >/dev/null && [ "$(hdr x-ratelimit-remaining-requests "$tmp/ha4")" = 0 ]
check "rpm: the 4th is 429 rate_limit_exceeded with Retry-After $ra (15..20 s) and the headers" $?
got=$(c -D "$tmp/hm" -o /dev/null -w '%{http_code}' -H "$A" "$URL/v1/models")
[ "$got" = 200 ] && [ "$(hdr x-ratelimit-limit-requests "$tmp/hm")" = 3 ] &&
    [ "$(hdr x-ratelimit-remaining-requests "$tmp/hm")" = 0 ]
check "every response of a keyed request carries the headers (GET /v1/models), taking nothing" $?
c -D "$tmp/hh" -o /dev/null "$URL/health"
! grep -qi '^x-ratelimit' "$tmp/hh"
check "a request without a key: no x-ratelimit headers" $?
c -D "$tmp/hd" -o /dev/null -H "$D" -d "$small" "$URL/v1/completions"
# (the bucket refills 1000/60 a second, so by the time the answer is written it may be full again)
left=$(hdr x-ratelimit-remaining-requests "$tmp/hd")
[ "$(hdr x-ratelimit-limit-requests "$tmp/hd")" = 1000 ] && { [ "$left" = 999 ] || [ "$left" = 1000 ]; }
check "a key without rpm= takes --key-rpm (1000; remaining $left)" $?

# the answer's headers are written before its generated tokens are taken; the bucket refills
# one token a second meanwhile (a slow machine or a sanitizer build takes seconds)
t0=$(date +%s)
c -D "$tmp/hb1" -o "$tmp/bb1" -H "$B" \
    -d '{"prompt":"Once upon a time","max_tokens":100,"ignore_eos":true,"temperature":0}' \
    "$URL/v1/completions"
dt=$(($(date +%s) - t0 + 1))
P=$(jq .usage.prompt_tokens "$tmp/bb1")
left=$(hdr x-ratelimit-remaining-tokens "$tmp/hb1")
[ "$(jq .usage.completion_tokens "$tmp/bb1")" = 100 ] &&
    [ "$(hdr x-ratelimit-limit-tokens "$tmp/hb1")" = 60 ] && [ "$left" -le $((60 - P + dt)) ] &&
    [ -n "$(hdr x-ratelimit-reset-tokens "$tmp/hb1")" ]
check "tpm: headers (limit 60, remaining $left after a prompt of $P and ${dt} s)" $?
got=$(c -D "$tmp/hb2" -o "$tmp/bb2" -w '%{http_code}' -H "$B" -d "$small" "$URL/v1/completions")
ra=$(hdr retry-after "$tmp/hb2")
[ "$got" = 429 ] && [ "$ra" -ge 30 ] && [ "$(hdr x-ratelimit-remaining-tokens "$tmp/hb2")" = 0 ] &&
    jq -e '.error.message | test("key .bob.: tokens per minute")' "$tmp/bb2" >/dev/null
check "tpm: prompt + 100 generated tokens spent the 60: next is 429, Retry-After $ra s" $?
[ "$(metric llaisys_key_tokens_total 'key="bob"')" = $((P + 100)) ] &&
    [ "$(metric llaisys_key_rejections_total 'key="bob",limit="tpm"')" = 1 ] &&
    [ "$(metric llaisys_key_rejections_total 'key="alice",limit="rpm"')" = 1 ] &&
    [ "$(metric llaisys_key_requests_total 'key="alice"')" = 3 ] &&
    [ "$(metric llaisys_key_budget 'key="carol",budget="concurrency"')" = 2 ]
check "per-key counters in /metrics by name" $?
n=$(c -H "$D" "$URL/metrics" | grep -c 'key-alice\|key-bob\|key-carol\|key-dave')
name=$(c -H "$D" "$URL/metrics" | sed -n 's/^llaisys_key_requests_total{.*key="\(key-[0-9a-f]*\)"} .*/\1/p')
[ "$n" = 0 ] && [ ${#name} = 12 ]
check "no key in /metrics: an unnamed key is labelled by a hash ($name)" $?

# concurrency, and one key's flood does not hold another key back
fp=""
for i in 1 2 3 4 5 6 7 8; do
    rm -f "$tmp/hc$i"
    curl -s -N -m 120 -D "$tmp/hc$i" -o "$tmp/bc$i" -H "$C" -d "$long" "$URL/v1/chat/completions" &
    fp="$fp $!"
done
pids="$pids $fp"
codes=$(wait_status "$tmp/hc1" "$tmp/hc2" "$tmp/hc3" "$tmp/hc4" "$tmp/hc5" "$tmp/hc6" "$tmp/hc7" "$tmp/hc8")
n200=$(echo "$codes" | tr ' ' '\n' | grep -c '^200$')
n429=$(echo "$codes" | tr ' ' '\n' | grep -c '^429$')
[ "$n200" = 2 ] && [ "$n429" = 6 ] &&
    [ "$(metric llaisys_key_rejections_total 'key="carol",limit="concurrency"')" = 6 ] &&
    [ "$(metric llaisys_key_requests_active 'key="carol"')" = 2 ]
check "concurrency 2: a flood of 8 streams gets 2 admitted, 6 refused ($codes)" $?
got=$(c -o "$tmp/bd" -w '%{http_code}' -H "$D" \
    -d '{"prompt":"Once upon a time","max_tokens":5,"ignore_eos":true}' "$URL/v1/completions")
running=0
for p in $fp; do kill -0 "$p" 2>/dev/null && running=$((running + 1)); done
[ "$got" = 200 ] && [ "$(jq .usage.completion_tokens "$tmp/bd")" = 5 ] && [ "$running" = 2 ]
check "another key's request is served in full while the flooding key's streams still run" $?
kill $fp 2>/dev/null
wait_metric llaisys_key_requests_active 'key="carol"' 0
got=$(c -o /dev/null -w '%{http_code}' -H "$C" -d "$small" "$URL/v1/completions")
[ "$got" = 200 ]
check "the key's slots come back when its clients go" $?
stop keys

# ---- GET /v1/requests/{id}, and the metrics the design names ----
printf 'key-alice name=alice\nkey-bob name=bob\n' >"$tmp/keys2"
start status --model "$model" --api-key-file "$tmp/keys2" --max-seqs 1 --max-queue 4 \
    --request-retention 2 --kv-blocks 300 --threads 1 || exit 0
A='Authorization: Bearer key-alice'
B='Authorization: Bearer key-bob'
metric() {
    c -H "$A" "$URL/metrics" | grep "^$1{" | grep -F "${2:-}" | head -n 1 | sed 's/.* //'
}
[ "$(metric llaisys_requests_per_second)" = 0 ] &&
    [ "$(metric llaisys_time_to_first_token_seconds_p50)" = NaN ] &&
    [ "$(metric llaisys_kv_cache_capacity_tokens)" = 4800 ] &&
    [ "$(metric llaisys_kv_cache_usage_tokens_peak)" = 0 ] &&
    [ "$(metric llaisys_compute_threads)" = 1 ]
check "metrics before any request: 0 requests/s, p50 NaN, KV capacity 4800 tokens, peak 0, 1 compute thread" $?
st() { c -H "$1" "$URL/v1/requests/$2"; }
# wait_state KEY ID JQ: up to 30 s for the status to satisfy JQ
wait_state() {
    i=0
    while [ $i -lt 300 ]; do
        st "$1" "$2" | jq -e "$3" >/dev/null 2>&1 && return 0
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}
curl -s -N -m 120 -H "$A" -H 'X-Request-Id: story-1' -d "$long" "$URL/v1/chat/completions" >"$tmp/s1" &
s1=$!
pids="$pids $s1"
wait_state "$A" story-1 '.state == "running" and .choices[0].completion_tokens > 0'
check "a running stream: state running, tokens so far" $?
st "$A" story-1 >"$tmp/st1"
jq -e '.object == "request" and .request_id == "story-1" and (.id | startswith("chatcmpl-"))
    and .usage.prompt_tokens > 0 and .finish_reason == null and .stream == true
    and (.timings.ttft_s | type) == "number" and .timings.queue_s >= 0
    and .timings.elapsed_s >= .timings.ttft_s' "$tmp/st1" >/dev/null
check "its status: ids, prompt tokens, timings (ttft, queue, elapsed)" $?
jid=$(jq -r .id "$tmp/st1")
[ "$(st "$A" "$jid" | jq -r .request_id)" = story-1 ]
check "found by its response id too" $?
b1=$(c -o /dev/null -w '%{http_code}' -H "$B" "$URL/v1/requests/story-1")
b2=$(c -o /dev/null -w '%{http_code}' -H "$B" "$URL/v1/requests/$jid")
[ "$b1" = 404 ] && [ "$b2" = 404 ]
check "another key's request is 404, by X-Request-Id and by id" $?
curl -s -N -m 120 -H "$A" -H 'X-Request-Id: story-2' -d "$long" "$URL/v1/chat/completions" >"$tmp/s2" &
s2=$!
pids="$pids $s2"
wait_state "$A" story-2 '.state == "waiting"'
st "$A" story-2 | jq -e '.choices[0].state == "waiting" and .choices[0].completion_tokens == 0
    and .timings.queue_s == null and .timings.ttft_s == null' >/dev/null
check "behind it (--max-seqs 1): state waiting, no tokens, no queue time yet" $?
c -o /dev/null -H "$A" -X POST "$URL/v1/requests/story-1/cancel"
wait_state "$A" story-1 '.state == "finished"'
st "$A" story-1 | jq -e '.finish_reason == "cancelled" and .choices[0].finish_reason == "cancelled"
    and .usage.completion_tokens > 0 and (.timings.e2e_s | type) == "number"' >/dev/null
check "cancelled: state finished, finish_reason cancelled, its tokens and e2e kept" $?
wait_state "$A" story-2 '.state == "running" and .choices[0].completion_tokens > 1'
check "the waiting one runs next" $?
c -o /dev/null -H "$A" -X POST "$URL/v1/requests/story-2/cancel"
wait $s1 $s2
c -o "$tmp/d1" -H "$A" -H 'X-Request-Id: done-1' \
    -d '{"prompt":"Once upon a time","max_tokens":3,"ignore_eos":true}' "$URL/v1/completions"
st "$A" done-1 | jq -e '.state == "finished" and .finish_reason == "length" and .stream == false
    and .choices[0].completion_tokens == 3 and .usage.completion_tokens == 3
    and .timings.tpot_s >= 0' >/dev/null
check "a finished request: length, 3 tokens, TPOT" $?
sleep 3
[ "$(c -o /dev/null -w '%{http_code}' -H "$A" "$URL/v1/requests/done-1")" = 404 ]
check "gone after --request-retention (2 s): 404" $?
# the request metrics: three requests ended, each with at least two tokens
tpot_n=$(metric llaisys_time_per_output_token_seconds_count)
e2e_n=$(metric llaisys_e2e_request_latency_seconds_count)
rps=$(metric llaisys_requests_per_second)
ttft50=$(metric llaisys_time_to_first_token_seconds_p50)
e2e50=$(metric llaisys_e2e_request_latency_seconds_p50)
e2e99=$(metric llaisys_e2e_request_latency_seconds_p99)
kvpeak=$(metric llaisys_kv_cache_usage_tokens_peak)
kvmin=$(jq '.usage.prompt_tokens + 2' "$tmp/d1") # done-1's prompt and tokens before its last
[ "$tpot_n" = 3 ] && [ "$e2e_n" = 3 ] && awk "BEGIN { exit !($rps > 0) }" &&
    [ "$ttft50" != NaN ] && awk "BEGIN { exit !($e2e99 >= $e2e50) }" && [ "$kvpeak" -ge "$kvmin" ]
check "requests/s $rps > 0, TPOT histogram of $tpot_n = 3 requests (e2e $e2e_n), TTFT p50 $ttft50, e2e p50 $e2e50 <= p99 $e2e99, KV tokens peak $kvpeak >= $kvmin" $?
stop status

# KV pressure: 12 blocks of 16 tokens; two choices of ~130 tokens cannot both stay
start kv --model "$model" --max-seqs 2 --kv-blocks 12 --threads 1 || exit 0
metric() {
    c "$URL/metrics" | grep "^$1{" | grep -F "${2:-}" | head -n 1 | sed 's/.* //'
}
c -o /dev/null -H 'X-Request-Id: kv-1' \
    -d '{"prompt":"Once upon a time","max_tokens":120,"ignore_eos":true,"n":2}' "$URL/v1/completions"
# the gauges are a snapshot taken at the end of the step that finished the request, which may
# come a moment after its response: wait for the usage to read 0 (2 s at most)
kvnow=$(metric llaisys_kv_cache_usage_tokens)
for _ in $(seq 20); do
    [ "$kvnow" = 0 ] && break
    sleep 0.1
    kvnow=$(metric llaisys_kv_cache_usage_tokens)
done
kvpre=$(c "$URL/v1/requests/kv-1" | jq -c '[.choices[].preemptions]')
npre=$(metric llaisys_num_preemptions_total)
kvpeak=$(metric llaisys_kv_cache_usage_tokens_peak)
# the peak sums each running sequence's tokens: a preempted choice that resumes on blocks the
# other one published (where the two choices wrote the same tokens) counts them again, so it may
# pass the 192 tokens of the pool (223 seen), never the two choices' 2 × (prompt + 120)
echo "$kvpre" | jq -e 'add >= 1' >/dev/null && [ "$npre" -ge 1 ] && [ "$kvpeak" -ge 120 ] &&
    [ "$kvpeak" -le 250 ] && [ "$kvnow" = 0 ]
check "KV pressure: a choice preempted (choices $kvpre, metric $npre), KV tokens peak $kvpeak in 120..250, now $kvnow" $?
stop kv

# ---- fewer compute threads while busy processes hold every core ----
ncpu=$(nproc)
if [ "$ncpu" -lt 2 ] || [ "$ncpu" -gt 8 ]; then
    echo "# SKIP compute threads beside busy processes: $ncpu CPUs (the check fills 2 to 8)"
    exit 0
fi
req='{"prompt":"Once upon a time","max_tokens":48,"ignore_eos":true}'
# requests 0.3 s apart: the pool looks at the CPUs at most every quarter second of its ops
requests() { for _ in 1 2 3 4 5 6; do c -o /dev/null -d "$req" "$URL/v1/completions"; sleep 0.3; done; }
busy_start() {
    busy=""
    for _ in $(seq "$ncpu"); do
        (while :; do :; done) &
        busy="$busy $!"
    done
    pids="$pids $busy"
}
busy_stop() { kill $busy 2>/dev/null; wait $busy 2>/dev/null; }
start adapt --model "$model" --threads 2 --log-level info || exit 0
busy_start
requests
n_busy=$(metric llaisys_compute_threads)
busy_stop
requests
n_quiet=$(metric llaisys_compute_threads)
[ "$n_busy" = 1 ] && [ "$n_quiet" = 2 ] &&
    grep -q 'compute pool: 1 of 2 threads (other processes used' "$tmp/adapt.err" &&
    grep -q 'compute pool: 2 of 2 threads' "$tmp/adapt.err"
check "beside $ncpu busy processes the pool runs 1 of 2 threads (metric $n_busy, logged), then 2 again once they end (metric $n_quiet)" $?
stop adapt
start fixed --model "$model" --threads 2 --log-level info --fixed-threads || exit 0
busy_start
requests
n_fixed=$(metric llaisys_compute_threads)
busy_stop
[ "$n_fixed" = 2 ] && ! grep -q 'compute pool:' "$tmp/fixed.err"
check "--fixed-threads: 2 of 2 threads beside the busy processes (metric $n_fixed), no change logged" $?
stop fixed

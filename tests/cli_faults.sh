#!/bin/sh
# cli_faults.sh: faults under load (issue 16), black-box against llaisys-server on the mock
# model with the test faults of src/model/mock.h (every forward pass sleeps delay_us; a batch
# holding token 7 fails): a client that hangs up while its request is queued, prefilling,
# decoding, or right after its finish chunk (before the usage chunk and [DONE]) - then no KV
# block is held and the server still serves; a cancel storm; KV exhaustion with preemption
# under load (every stream finishes, with the text it has alone); a request that fails inside
# the forward pass (only it ends, with the model's message; the streams beside it finish with
# the text they have alone); clients killed while the server writes (SIGPIPE does not stop
# it); SIGTERM under load (in-flight streams end with [DONE] within the grace period, exit 0);
# and llaisys-cli bench-serve's open loop (429 share, Retry-After, server sampling).
# The server under test is $LLAISYS_SERVER.
. tests/lib/harness.sh # $srv, $tmp, $pids, check, start, stop

for tool in curl jq; do
    command -v "$tool" >/dev/null || { echo "not ok fault tests need $tool"; exit 0; }
done
c() { curl -s -m 60 "$@"; }
# metric NAME [LABELS]: the value of the first sample NAME{...LABELS...}
metric() { c "$URL/metrics" | grep "^$1{" | grep -F "${2:-}" | head -n 1 | sed 's/.* //'; }
# wait_metric NAME LABEL VALUE: up to 30 s for the sample to equal VALUE
wait_metric() {
    i=0
    while [ $i -lt 600 ]; do
        [ "$(metric "$1" "$2")" = "$3" ] && return 0
        sleep 0.05
        i=$((i + 1))
    done
    echo "# $1{$2} is $(metric "$1" "$2"), not $3"
    return 1
}
# wait_text FILE N: up to 30 s for FILE to hold N text deltas of a stream
wait_text() {
    i=0
    while [ $i -lt 600 ]; do
        [ "$(grep -c '"text":"[^"]' "$1" 2>/dev/null)" -ge "$2" ] && return 0
        sleep 0.05
        i=$((i + 1))
    done
    return 1
}
# wait_gone PID...: up to 30 s for the processes to exit
wait_gone() {
    i=0
    while [ $i -lt 600 ]; do
        alive=0
        for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ $alive -eq 0 ] && return 0
        sleep 0.05
        i=$((i + 1))
    done
    return 1
}
# ids FROM N: a JSON list of N token ids from FROM on
ids() { seq "$1" $(($1 + $2 - 1)) | paste -sd, -; }
# body PROMPT_FROM PROMPT_LEN MAX_TOKENS [STREAM]: a greedy completions body on token ids
body() {
    printf '{"prompt":[%s],"max_tokens":%d,"temperature":0,"ignore_eos":true,"stream":%s,"stream_options":{"include_usage":true}}' \
        "$(ids "$1" "$2")" "$3" "${4:-true}"
}
# stream NAME BODY [curl args]: a streamed completion into $tmp/NAME in the background; sets SP
stream() {
    n=$1; b=$2; shift 2
    curl -sN -m 120 -d "$b" "$@" "$URL/v1/completions" >"$tmp/$n" 2>/dev/null &
    SP=$!
    pids="$pids $SP"
}
# text_of FILE: the text of a streamed completion (its deltas joined)
text_of() { sed -n 's/^data: \({.*\)/\1/p' "$1" | jq -rj '.choices[0].text // empty'; }
# alone BODY: the text of the same request sent alone, not streamed
alone() { c -d "$(echo "$1" | jq -c '.stream = false')" "$URL/v1/completions" | jq -rj '.choices[0].text'; }
# kv_empty NAME: no block in use, no token held, nothing running or waiting
kv_empty() {
    wait_metric llaisys_kv_cache_blocks 'state="in_use"' 0 &&
        wait_metric llaisys_kv_cache_usage_tokens "" 0 &&
        wait_metric llaisys_num_requests_running "" 0 &&
        wait_metric llaisys_num_requests_waiting "" 0
    check "$1: no KV block in use, nothing running or waiting" $?
}
serves() { # serves NAME: a plain request still gets its 5 tokens
    [ "$(c -d "$(body 3000 8 5 false)" "$URL/v1/completions" | jq -r .usage.completion_tokens)" = 5 ]
    check "$1: the server still serves" $?
}

# the mock model with both faults: 20 ms per forward pass, token 7 fails
mkdir "$tmp/mock"
for f in tokenizer.json tokenizer_config.json; do ln -s "$PWD/tests/fixtures/mock/$f" "$tmp/mock/$f"; done
jq '. + {fail_token: 7, delay_us: 20000}' tests/fixtures/mock/config.json >"$tmp/mock/config.json"
model=$tmp/mock

# ---- a client hangs up at every stage ----
start stages --model "$model" --max-seqs 4 --max-queue 8 --max-batch-tokens 16 \
    --kv-blocks 64 --threads 1 || exit 0
hogs=""
for i in 1 2 3 4; do
    stream "hog$i" "$(body $((1000 + 100 * i)) 20 900)"
    hogs="$hogs $SP"
done
wait_metric llaisys_num_requests_running "" 4
check "stages: four long streams run" $?
stream queued "$(body 2000 20 50)"
qp=$SP
wait_metric llaisys_num_requests_waiting "" 1 && kill "$qp" &&
    wait_metric llaisys_num_requests_waiting "" 0 &&
    wait_metric llaisys_request_cancellations_total 'reason="disconnect"' 1
check "stages: a queued request whose client hung up leaves the queue (cancelled: disconnect)" $?

set -- $hogs
wait_text "$tmp/hog1" 3 && wait_text "$tmp/hog2" 3 && kill "$1" "$2" &&
    wait_metric llaisys_num_requests_running "" 2 &&
    wait_metric llaisys_request_cancellations_total 'reason="disconnect"' 3
check "stages: two decoding streams whose clients hung up stop (running 4 -> 2)" $?
left="$3 $4"

# a 480-token prompt in chunks of at most 16 tokens beside two decode rows: 30+ steps of 20 ms
stream prefill "$(body 5000 480 20)"
pp=$SP
wait_metric llaisys_num_requests_running "" 3 && kill "$pp" &&
    ! grep -q '"text":"[^"]' "$tmp/prefill" &&
    wait_metric llaisys_num_requests_running "" 2 &&
    wait_metric llaisys_request_cancellations_total 'reason="disconnect"' 4
check "stages: a request whose client hung up while its prompt was computed stops before any token" $?

# the client reads up to its finish chunk and hangs up before the usage chunk and [DONE]
curl -sN -m 60 -d "$(body 6000 20 4)" "$URL/v1/completions" 2>/dev/null |
    sed '/"finish_reason":"length"/q' >"$tmp/final"
grep -q '"finish_reason":"length"' "$tmp/final" && ! grep -q '\[DONE\]' "$tmp/final"
check "stages: a client hangs up after its finish chunk, before usage and [DONE]" $?
kill $left
wait_gone $hogs $qp $pp
kv_empty stages
serves stages

# ---- a cancel storm ----
storm=""
for i in $(seq 1 12); do
    stream "storm$i" "$(body $((10000 + 50 * i)) 24 900)" -H "X-Request-Id: storm-$i"
    storm="$storm $SP"
done
wait_metric llaisys_num_requests_running "" 4 && wait_metric llaisys_num_requests_waiting "" 8
check "storm: 12 streams admitted (4 running, 8 waiting)" $?
cancel_codes=""
cp=""
for i in $(seq 1 12); do
    c -o /dev/null -w '%{http_code}' -X POST "$URL/v1/requests/storm-$i/cancel" >"$tmp/cc$i" &
    cp="$cp $!"
done
wait_gone $cp
for i in $(seq 1 12); do cancel_codes="$cancel_codes$(cat "$tmp/cc$i")"; done
wait_gone $storm
[ "$cancel_codes" = "$(printf '200%.0s' $(seq 1 12))" ]
check "storm: 12 cancels at once, each 200 (got $cancel_codes)" $?
n=0
for i in $(seq 1 12); do grep -q '\[DONE\]' "$tmp/storm$i" && n=$((n + 1)); done
[ $n -eq 12 ]
check "storm: every cancelled stream ended with [DONE] ($n of 12)" $?
kv_empty storm
serves storm

# ---- a request that fails inside the forward pass ----
good=""
for i in 1 2 3; do
    stream "good$i" "$(body $((20000 + 100 * i)) 20 30)"
    good="$good $SP"
done
wait_metric llaisys_num_requests_running "" 3
stream bad "$(body 3 20 30)" # ids 3..22 hold 7
wait_gone $good $SP
grep -q '"message":"generation failed: mock: the forward pass failed on token 7' "$tmp/bad" &&
    ! grep -q '"text":"[^"]' "$tmp/bad"
check "forward failure: the request holding the failing token ends with the model's message" $?
ok=0
for i in 1 2 3; do
    t=$(text_of "$tmp/good$i")
    [ -n "$t" ] && [ "$t" = "$(alone "$(body $((20000 + 100 * i)) 20 30)")" ] &&
        grep -q '"completion_tokens":30' "$tmp/good$i" && grep -q '\[DONE\]' "$tmp/good$i" &&
        ok=$((ok + 1))
done
[ $ok -eq 3 ]
check "forward failure: the three streams beside it finish with the text they have alone ($ok of 3)" $?
c -o "$tmp/bad.json" -w '%{http_code}' -d "$(body 3 20 5 false)" "$URL/v1/completions" >"$tmp/bad.code"
[ "$(cat "$tmp/bad.code")" = 500 ] &&
    jq -e '.error.message | test("forward pass failed on token 7")' "$tmp/bad.json" >/dev/null
check "forward failure: not streamed, a 500 with the model's message" $?
kv_empty "forward failure"

# ---- llaisys-cli bench-serve's open loop against it: 40/s offered, about 16/s served ----
cli="${LLAISYS_CLI:-./llaisys-cli}"
"$cli" bench-serve --url "$URL" --rate 40 --duration 2 --arrivals fixed --prompt-tokens 8 \
    --max-tokens 10 --server-pid "$PID" --warmup 0 --json >"$tmp/open" 2>"$tmp/open.err"
rc=$?
jq -se '.[0] as $r | .[1] as $w | $r.mode == "open" and $r.offered == 80 and
        $r.rejected_429 > 0 and $r.rejected_429_with_retry_after == $r.rejected_429 and
        $r.errors == 0 and $r.admitted > 0 and $r.finished == $r.admitted and
        $r.admitted + $r.rejected_429 == $r.sent and $r.itl_p99_s > 0 and
        $w.server_pid > 0 and $w.rss_kb.max >= $w.rss_kb.start and $w.rss_kb.start > 0 and
        $w.fds.max > $w.fds.start and $w.kv_tokens.max > 0 and $w.kv_tokens.end == 0' \
    "$tmp/open" >/dev/null && [ $rc -eq 0 ] || cat "$tmp/open" "$tmp/open.err" | sed "s/^/# /"
check "bench-serve --rate: 80 arrivals, 429s all with Retry-After, admitted all finished, server sampled (exit $rc)" $?
"$cli" bench-serve --url "$URL" --rate 5 --arrivals bursty >/dev/null 2>"$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q -- '--arrivals must be poisson or fixed' "$tmp/e"
check "bench-serve: a bad --arrivals is refused naming the choices" $?
kv_empty "open loop"
stop stages

# ---- KV exhaustion with preemption, then SIGTERM under load ----
# 8 blocks of 16 tokens; four requests of 20 + 40 tokens need 15
start kv --model "$model" --max-seqs 4 --max-queue 8 --kv-blocks 8 --threads 1 \
    --shutdown-grace 20 || exit 0
kvp=""
for i in 1 2 3 4; do
    stream "kv$i" "$(body $((30000 + 100 * i)) 20 40)"
    kvp="$kvp $SP"
done
wait_gone $kvp
ok=0
for i in 1 2 3 4; do
    t=$(text_of "$tmp/kv$i")
    grep -q '"completion_tokens":40' "$tmp/kv$i" && grep -q '\[DONE\]' "$tmp/kv$i" &&
        [ "$t" = "$(alone "$(body $((30000 + 100 * i)) 20 40)")" ] && ok=$((ok + 1))
done
p=$(metric llaisys_num_preemptions_total)
[ $ok -eq 4 ] && [ "${p:-0}" -gt 0 ]
check "kv: four streams that outgrow the pool all finish with their text alone ($ok of 4; $p preemptions)" $?
kv_empty kv

sig=""
for i in 1 2 3 4 5 6; do
    stream "term$i" "$(body $((40000 + 100 * i)) 8 25)"
    sig="$sig $SP"
done
# all six held (four running, two queued) before the signal: a request that reaches the server
# after it would be refused with a 503, not drained
wait_metric llaisys_num_requests_running "" 4
wait_metric llaisys_num_requests_held "" 6
t0=$(date +%s)
kill -TERM "$PID"
wait "$PID"; rc=$?
t1=$(date +%s)
wait_gone $sig
n=0
for i in 1 2 3 4 5 6; do
    grep -q '"completion_tokens":25' "$tmp/term$i" && grep -q '\[DONE\]' "$tmp/term$i" &&
        n=$((n + 1))
done
[ $rc -eq 0 ] && [ $n -eq 6 ] && [ $((t1 - t0)) -lt 20 ]
check "SIGTERM under load: six streams (two queued) finish with [DONE] ($n), exit $rc after $((t1 - t0)) s of a 20 s grace" $?

# a grace shorter than the streams: they end at its end with a final chunk and [DONE]
start short --model "$model" --max-seqs 4 --threads 1 --shutdown-grace 1 || exit 0
sig=""
for i in 1 2 3; do
    stream "cut$i" "$(body $((50000 + 100 * i)) 8 3000)"
    sig="$sig $SP"
done
wait_metric llaisys_num_requests_running "" 3
kill -TERM "$PID"
wait "$PID"; rc=$?
wait_gone $sig
n=0
for i in 1 2 3; do
    grep -q '"finish_reason":"cancelled"' "$tmp/cut$i" && grep -q '\[DONE\]' "$tmp/cut$i" &&
        n=$((n + 1))
done
[ $rc -eq 0 ] && [ $n -eq 3 ]
check "SIGTERM, 1 s grace: three long streams end cancelled with [DONE] ($n), exit $rc" $?

# ---- SIGPIPE: clients killed while the server writes as fast as it can ----
start pipe --model tests/fixtures/mock --max-seqs 8 --threads 1 || exit 0
for round in 1 2 3; do
    kp=""
    for i in 1 2 3 4 5 6; do
        stream "pipe$i" "$(body $((60000 + 100 * i)) 8 4000)"
        kp="$kp $SP"
    done
    for i in 1 2 3 4 5 6; do wait_text "$tmp/pipe$i" 20; done
    kill -9 $kp
    wait_gone $kp
done
kill -0 "$PID"
check "SIGPIPE: 18 clients killed mid-stream, the server is still running" $?
kv_empty pipe
serves pipe
stop pipe

#!/bin/sh
# cli_server.sh: black-box tests of llaisys-server with curl (and jq) on the tiny-qwen2 fixture:
# routes, streaming and non-streaming chat and completions, greedy and seeded reproducibility,
# n, usage, request ids, tokenize/detokenize, stop strings, logprobs (both shapes), logit_bias,
# speculative decoding (--spec: the same answers as without, usage and /metrics counts),
# echo, every sampling control at once, the reasoning split (reasoning_content, streamed and
# not, with and without </think>), every error status (400, 401, 404, 413, 429, 503
# shape), a malformed-input table, cancellation by route and by client disconnect (KV back to
# empty in /metrics), SSE keep-alives, and an orderly SIGTERM. Then the OpenAI Node SDK suite
# of tests/server/ when its node_modules are installed (npm ci --prefix tests/server).
# Servers listen on 127.0.0.1 at a free port, every request has a time limit, and every server
# is killed on exit. The server under test is $LLAISYS_SERVER (default ./llaisys-server).
model=tests/fixtures/tiny-qwen2
. tests/lib/harness.sh # $srv, $tmp, $pids, check, start, stop

for tool in curl jq; do
    command -v "$tool" >/dev/null || { echo "not ok server tests need $tool"; exit 0; }
done

# c ARGS...: curl with a time limit, body to stdout
c() { curl -s -m 30 "$@"; }
# code ARGS...: the HTTP status only
code() { curl -s -m 30 -o /dev/null -w '%{http_code}' "$@"; }
post() { # post PATH JSON [curl args]: POST JSON, body to stdout
    p=$1; j=$2; shift 2
    c -H 'Content-Type: application/json' -d "$j" "$@" "$URL$p"
}
MKEY=""

if nm "$srv" 2>/dev/null | grep -qE '__(asan|tsan|ubsan)_'; then
    : # sanitizer builds link dynamically
else
    file -L "$srv" | grep -q 'statically linked'
    check "server binary is statically linked" $?
fi

"$srv" --help >"$tmp/help" 2>&1
grep -q -- '--write-timeout' "$tmp/help" && grep -q 'LLAISYS_API_KEY' "$tmp/help" &&
    grep -q -- '--cors-origins' "$tmp/help"
check "--help documents flags and variables" $?
grep -q -- '--max-seqs N .*(1 to 4096; default 32)' "$tmp/help" &&
    grep -q 'LLAISYS_MAX_BATCH_TOKENS' "$tmp/help" &&
    grep -q -- '--max-batch-tokens N .*default max(512, max-seqs)' "$tmp/help"
check "--help prints the engine-option table with the server profile's defaults" $?
"$srv" --model "$model" --threads 1024 >/dev/null 2>"$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q -- '--threads: must be an integer from 1 to 256' "$tmp/e"
check "--threads above the engine's 256: exit 2 with the range" $?
"$srv" --port 1 >/dev/null 2>"$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q -- '--model' "$tmp/e"
check "missing --model: exit 2 naming it" $?
"$srv" --model "$model" --port 99999 >/dev/null 2>"$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q -- '--port' "$tmp/e"
check "bad --port value: exit 2 naming it" $?
LLAISYS_MAX_SEQS=0 "$srv" --model "$model" >/dev/null 2>"$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q 'LLAISYS_MAX_SEQS' "$tmp/e"
check "bad LLAISYS_MAX_SEQS: exit 2 naming it" $?
"$srv" --model /nonexistent --port 0 >/dev/null 2>"$tmp/e"; rc=$?
[ $rc -eq 1 ] && grep -q '/nonexistent' "$tmp/e"
check "unloadable model: exit 1 naming it" $?
"$srv" --model "$model" --spec fast >/dev/null 2>"$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--spec: must be one of off, ngram, ngram-always (got 'fast')" "$tmp/e"
check "bad --spec mode: exit 2 listing the modes" $?
LLAISYS_ITL_TARGET_MS=0 "$srv" --model "$model" >/dev/null 2>"$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q 'LLAISYS_ITL_TARGET_MS: must be an integer from 1 to 600000' "$tmp/e"
check "bad LLAISYS_ITL_TARGET_MS: exit 2 with the range" $?
"$srv" --model "$model" --spec-max-draft 17 >/dev/null 2>"$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q -- '--spec-max-draft: must be an integer from 1 to 16' "$tmp/e"
check "--spec-max-draft above 16: exit 2 with the range" $?
grep -q -- '--spec MODE .*off, ngram or ngram-always: .*(default off)' "$tmp/help" &&
    grep -q -- '--itl-target-ms MS .*(1 to 600000; default [0-9]*)' "$tmp/help" &&
    grep -q 'LLAISYS_SPEC_MAX_DRAFT' "$tmp/help"
check "--help documents --spec, --spec-max-draft and --itl-target-ms" $?

start main --model "$model" --max-body 65536 --max-seqs 4 --reasoning-parser none || { echo "not ok server starts"; exit 0; }
echo "ok server starts and prints its URL"
grep -q 'max-seqs: 4' "$tmp/main.err" && grep -q 'max-batch-tokens: 512' "$tmp/main.err" &&
    grep -q 'ctx: 4096' "$tmp/main.err"
check "effective configuration printed at start-up" $?

# ---- basic routes ----
h=$(c -i "$URL/health")
echo "$h" | head -n 1 | grep -q ' 200' && echo "$h" | grep -qi '^x-request-id: [0-9a-f]\{32\}'
check "GET /health 200 with a generated X-Request-Id" $?
m=$(c "$URL/v1/models")
[ "$(echo "$m" | jq -r '.data[0].id')" = tiny-qwen2 ] &&
    [ "$(echo "$m" | jq -r '.data[0].max_model_len')" = 4096 ]
check "GET /v1/models: served name and context length" $?
[ "$(code "$URL/v1/models/tiny-qwen2")" = 200 ] && [ "$(code "$URL/v1/models/other")" = 404 ]
check "GET /v1/models/{id}: 200, and 404 for another" $?

chat='{"messages":[{"role":"user","content":"Hello"}],"max_tokens":12,"temperature":0}'
post /v1/chat/completions "$chat" -D "$tmp/h1" -H 'X-Request-Id: test-req-1' >"$tmp/c1"
[ "$(jq -r '.object' "$tmp/c1")" = chat.completion ] &&
    [ "$(jq -r '.choices[0].finish_reason' "$tmp/c1")" = length ] &&
    [ "$(jq -r '.usage.completion_tokens' "$tmp/c1")" = 12 ] &&
    [ "$(jq -r '.usage.prompt_tokens' "$tmp/c1")" = 6 ] &&
    [ "$(jq -r '.usage.total_tokens' "$tmp/c1")" = 18 ] &&
    [ "$(jq -r '.usage.prompt_tokens_details.cached_tokens' "$tmp/c1")" = 0 ] &&
    [ "$(jq -r '.usage.completion_tokens_details.reasoning_tokens' "$tmp/c1")" = 0 ] &&
    [ "$(jq -r '.model' "$tmp/c1")" = tiny-qwen2 ] &&
    jq -r '.id' "$tmp/c1" | grep -q '^chatcmpl-' &&
    [ -n "$(jq -r '.choices[0].message.content' "$tmp/c1")" ]
check "chat non-stream: object, finish_reason, usage, model, id" $?
grep -qi '^x-request-id: test-req-1' "$tmp/h1"
check "X-Request-Id of the client is echoed" $?

post /v1/chat/completions "$chat" >"$tmp/c2"
[ "$(jq -r '.choices[0].message.content' "$tmp/c1")" = \
  "$(jq -r '.choices[0].message.content' "$tmp/c2")" ]
check "greedy chat repeats" $?

stream='{"messages":[{"role":"user","content":"Hello"}],"max_tokens":12,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}'
post /v1/chat/completions "$stream" -N -D "$tmp/hs" >"$tmp/s1"
grep -qi '^content-type: text/event-stream' "$tmp/hs" && [ "$(tail -n 2 "$tmp/s1" | head -n 1)" = "data: [DONE]" ]
check "chat stream: text/event-stream, ends with data: [DONE]" $?
grep '^data: {' "$tmp/s1" | sed 's/^data: //' >"$tmp/s1.json"
[ "$(head -n 1 "$tmp/s1.json" | jq -r '.choices[0].delta.role')" = assistant ] &&
    [ "$(jq -rs '[.[] | select(.choices|length>0) | .choices[0].finish_reason | select(.!=null)] | join(",")' "$tmp/s1.json")" = length ] &&
    [ "$(tail -n 1 "$tmp/s1.json" | jq -r '.usage.completion_tokens')" = 12 ] &&
    [ "$(tail -n 1 "$tmp/s1.json" | jq -r '.choices | length')" = 0 ] &&
    [ "$(jq -rs '[.[] | .object] | unique | join(",")' "$tmp/s1.json")" = chat.completion.chunk ]
check "chat stream: role first, one finish_reason, usage chunk last" $?
[ "$(jq -rsj '[.[] | select(.choices|length>0) | .choices[0].delta.content // ""] | join("")' "$tmp/s1.json")" = \
  "$(jq -rj '.choices[0].message.content' "$tmp/c1")" ]
check "chat stream text equals the non-stream text (greedy)" $?
! grep -q '"usage"' "$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":3,"stream":true}' -N >"$tmp/s2"; echo "$tmp/s2")"
check "stream without include_usage carries no usage" $?

comp='{"prompt":"Once upon a time","max_tokens":10,"temperature":0}'
post /v1/completions "$comp" >"$tmp/p1"
[ "$(jq -r '.object' "$tmp/p1")" = text_completion ] &&
    [ "$(jq -r '.usage.completion_tokens' "$tmp/p1")" = 10 ] &&
    [ "$(jq -r '.usage.prompt_tokens' "$tmp/p1")" = 5 ] &&
    jq -r '.id' "$tmp/p1" | grep -q '^cmpl-'
check "completions with a string prompt (BOS added)" $?
ids=$(post /tokenize '{"prompt":"Once upon a time"}' | jq -c '.tokens')
post /v1/completions "{\"prompt\":$ids,\"max_tokens\":10,\"temperature\":0}" >"$tmp/p2"
[ "$(jq -r '.choices[0].text' "$tmp/p1")" = "$(jq -r '.choices[0].text' "$tmp/p2")" ]
check "completions with token ids equal the text prompt" $?
post /v1/completions '{"prompt":["Once upon a time","Hello"],"max_tokens":4,"temperature":0,"n":2}' >"$tmp/p3"
[ "$(jq -r '[.choices[].index] | join(",")' "$tmp/p3")" = "0,1,2,3" ] &&
    [ "$(jq -r '.choices[0].text' "$tmp/p3")" = "$(jq -r '.choices[1].text' "$tmp/p3")" ] &&
    [ "$(jq -r '.usage.completion_tokens' "$tmp/p3")" = 16 ]
check "completions with two prompts and n=2: four choices" $?
post /v1/completions '{"prompt":"Once upon a time","max_tokens":10,"temperature":0,"stream":true}' -N >"$tmp/p4"
[ "$(grep '^data: {' "$tmp/p4" | sed 's/^data: //' | jq -rsj '[.[] | .choices[0].text] | join("")')" = \
  "$(jq -rj '.choices[0].text' "$tmp/p1")" ]
check "completions stream text equals the non-stream text" $?

seeded='{"prompt":"Once upon a time","max_tokens":16,"temperature":1.0,"seed":1234}'
a=$(post /v1/completions "$seeded" | jq -r '.choices[0].text')
b=$(post /v1/completions "$seeded" | jq -r '.choices[0].text')
d=$(post /v1/completions '{"prompt":"Once upon a time","max_tokens":16,"temperature":1.0,"seed":99}' | jq -r '.choices[0].text')
[ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" != "$d" ]
check "seed: same seed repeats, another seed differs" $?
post /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":8,"temperature":2,"seed":7,"n":3}' >"$tmp/n3"
[ "$(jq -r '.choices | length' "$tmp/n3")" = 3 ] &&
    [ "$(jq -r '[.choices[].message.content] | unique | length' "$tmp/n3")" -ge 2 ] &&
    [ "$(jq -r '.usage.completion_tokens' "$tmp/n3")" = 24 ]
check "chat n=3: three different choices, usage summed" $?

t=$(post /tokenize '{"messages":[{"role":"user","content":"Hello"}]}')
[ "$(echo "$t" | jq -r '.count')" = 6 ] && [ "$(echo "$t" | jq -r '.max_model_len')" = 4096 ]
check "tokenize chat messages as the chat route does" $?
d=$(post /detokenize "{\"tokens\":$ids}" | jq -r '.prompt')
[ "$d" = "<｜begin▁of▁sentence｜>Once upon a time" ]
check "detokenize inverts tokenize" $?

# ---- errors ----
err() { # err NAME STATUS TYPE PATH BODY [curl args]
    name=$1; want=$2; type=$3; p=$4; body=$5; shift 5
    got=$(curl -s -m 30 -o "$tmp/err" -w '%{http_code}' -H 'Content-Type: application/json' \
        --data-binary "$body" "$@" "$URL$p")
    [ "$got" = "$want" ] && [ "$(jq -r '.error.type' "$tmp/err")" = "$type" ] &&
        [ -n "$(jq -r '.error.message' "$tmp/err")" ]
    check "$name: $want $type" $?
}
msgs='"messages":[{"role":"user","content":"x"}]'
err "truncated JSON" 400 invalid_request_error /v1/chat/completions '{"messages":[{"role":'
err "not an object" 400 invalid_request_error /v1/chat/completions '[1,2,3]'
err "wrong type" 400 invalid_request_error /v1/chat/completions "{$msgs,\"temperature\":\"hot\"}"
[ "$(jq -r '.error.param' "$tmp/err")" = temperature ]
check "wrong type names the field in error.param" $?
err "negative max_tokens" 400 invalid_request_error /v1/chat/completions "{$msgs,\"max_tokens\":-5}"
err "huge max_tokens" 400 invalid_request_error /v1/chat/completions "{$msgs,\"max_tokens\":100000000}"
grep -q '4096' "$tmp/err"
check "huge max_tokens: message gives the context length" $?
err "bad role" 400 invalid_request_error /v1/chat/completions '{"messages":[{"role":"wizard","content":"x"}]}'
err "empty messages" 400 invalid_request_error /v1/chat/completions '{"messages":[]}'
err "token id outside the vocabulary" 400 invalid_request_error /v1/completions '{"prompt":[5,999999999]}'
err "echo with logprobs" 400 invalid_request_error /v1/completions '{"prompt":"x","echo":true,"logprobs":1}'
[ "$(jq -r '.error.param' "$tmp/err")" = echo ] && grep -q 'not supported' "$tmp/err"
check "unsupported combination: names the field, says not supported" $?
err "min_tokens above max_tokens" 400 invalid_request_error /v1/chat/completions "{$msgs,\"max_tokens\":2,\"min_tokens\":3}"
err "logit_bias id outside the vocabulary" 400 invalid_request_error /v1/chat/completions "{$msgs,\"logit_bias\":{\"999999\":1}}"
err "stop string over 256 bytes" 400 invalid_request_error /v1/chat/completions "{$msgs,\"stop\":[\"$(printf '%0300d' 0)\"]}"
printf '{"messages":[{"role":"user","content":"\377\376"}]}' >"$tmp/badutf8"
got=$(curl -s -m 30 -o "$tmp/err" -w '%{http_code}' --data-binary @"$tmp/badutf8" "$URL/v1/chat/completions")
[ "$got" = 400 ] && grep -q 'UTF-8' "$tmp/err"
check "invalid UTF-8 body: 400 saying so" $?
awk 'BEGIN { for (i = 0; i < 5000; i++) printf "["; for (i = 0; i < 5000; i++) printf "]" }' >"$tmp/deep"
got=$(curl -s -m 30 -o "$tmp/err" -w '%{http_code}' --data-binary @"$tmp/deep" "$URL/v1/chat/completions")
[ "$got" = 400 ]
check "deeply nested JSON: 400" $?
awk 'BEGIN { printf "{\"prompt\":\""; for (i = 0; i < 5000; i++) printf "hello world "; printf "\"}" }' >"$tmp/long"
n=$(curl -s -m 30 --data-binary @"$tmp/long" "$URL/tokenize" | jq -r '.count')
got=$(curl -s -m 30 -o "$tmp/err" -w '%{http_code}' --data-binary @"$tmp/long" "$URL/v1/completions")
[ "$got" = 400 ] && [ "$(jq -r '.error.code' "$tmp/err")" = context_length_exceeded ] &&
    [ "$n" -gt 4096 ] && grep -q '4096' "$tmp/err" && grep -q "$n" "$tmp/err"
check "prompt longer than the context: 400 giving both numbers" $?
awk 'BEGIN { printf "{\"prompt\":\""; for (i = 0; i < 70000; i++) printf "a"; printf "\"}" }' >"$tmp/huge"
got=$(curl -s -m 30 -o "$tmp/err" -w '%{http_code}' --data-binary @"$tmp/huge" "$URL/v1/completions")
[ "$got" = 413 ] && [ "$(jq -r '.error.type' "$tmp/err")" = invalid_request_error ]
check "body over --max-body: 413" $?
got=$(awk 'BEGIN { printf "{\"prompt\":\""; for (i = 0; i < 70000; i++) printf "a"; printf "\"}" }' |
    curl -s -m 30 -o "$tmp/err" -w '%{http_code}' -H 'Transfer-Encoding: chunked' --data-binary @- "$URL/v1/completions")
[ "$got" = 413 ]
check "chunked body over --max-body: 413" $?
err "unknown route" 404 not_found_error /v1/nothing '{}'
err "unknown model" 404 not_found_error /v1/chat/completions "{$msgs,\"model\":\"gpt-4\"}"
[ "$(jq -r '.error.code' "$tmp/err")" = model_not_found ]
check "unknown model: code model_not_found" $?
err "cancel of an unknown id" 404 not_found_error /v1/requests/nope/cancel ''
[ "$(code -X DELETE "$URL/v1/models")" = 405 ] && [ "$(code "$URL/v1/chat/completions")" = 405 ] &&
    c -i "$URL/v1/responses" | grep -qi '^Allow: POST' && [ "$(code "$URL/v1/nope")" = 404 ]
check "wrong method on a route: 405 with Allow; unknown route: 404" $?
kill -0 "$PID"
check "server alive after the malformed inputs" $?

# ---- cancellation ----
long='{"messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":4000,"temperature":0,"ignore_eos":true,"stream":true}'
curl -s -N -m 60 -H 'X-Request-Id: long-1' -d "$long" "$URL/v1/chat/completions" >"$tmp/long1" &
cpid=$!
wait_metric llaisys_num_requests_running "" 1
code -X POST "$URL/v1/requests/long-1/cancel" >"$tmp/cancel_code"
wait $cpid
[ "$(cat "$tmp/cancel_code")" = 200 ] &&
    [ "$(grep '^data: {' "$tmp/long1" | tail -n 1 | sed 's/^data: //' | jq -r '.choices[0].finish_reason')" = cancelled ] &&
    [ "$(tail -n 2 "$tmp/long1" | head -n 1)" = "data: [DONE]" ]
check "cancel route by X-Request-Id: stream ends with finish_reason cancelled and [DONE]" $?
wait_metric llaisys_kv_cache_blocks 'state="in_use"' 0 &&
    [ "$(metric llaisys_request_cancellations_total 'reason="cancel_route"')" = 1 ] &&
    [ "$(metric llaisys_num_requests_running)" = 0 ]
check "after the cancel: KV in use back to 0, cancellation counted" $?

curl -s -N -m 60 -d "$long" "$URL/v1/chat/completions" >"$tmp/long2" &
cpid=$!
wait_metric llaisys_num_requests_running "" 1
kill "$cpid"; wait "$cpid" 2>/dev/null
wait_metric llaisys_kv_cache_blocks 'state="in_use"' 0 &&
    wait_metric llaisys_request_cancellations_total 'reason="disconnect"' 1 &&
    [ "$(metric llaisys_num_requests_running)" = 0 ]
check "stream client disconnect: request cancelled, KV back to 0" $?

nonstream='{"prompt":"x","max_tokens":4000,"temperature":0,"ignore_eos":true}'
curl -s -m 60 -d "$nonstream" "$URL/v1/completions" >/dev/null &
cpid=$!
wait_metric llaisys_num_requests_running "" 1
kill "$cpid"; wait "$cpid" 2>/dev/null
wait_metric llaisys_kv_cache_blocks 'state="in_use"' 0 &&
    wait_metric llaisys_request_cancellations_total 'reason="disconnect"' 2
check "non-stream client disconnect: request cancelled, KV back to 0" $?
cli="${LLAISYS_CLI:-./llaisys-cli}"
if [ -x "$cli" ]; then
    "$cli" bench-serve --url "$URL" --clients 4 --requests 8 --prompt-tokens 20 --max-tokens 16 \
        --json >"$tmp/bench" 2>&1
    [ "$(jq -r .errors "$tmp/bench")" = 0 ] && [ "$(jq -r .requests "$tmp/bench")" = 8 ] &&
        [ "$(jq -r .generated_tokens "$tmp/bench")" = 128 ] &&
        [ "$(jq -r '.ttft_p50_s > 0 and .itl_p99_s > 0' "$tmp/bench")" = true ]
    check "llaisys-cli bench-serve: 8 streamed requests, 128 tokens, latencies" $?
fi
stop main

# ---- sampling and stopping controls, logprobs, n, the reasoning split ----
start ctl --model "$model" --max-seqs 8 || exit 0
grep -q 'reasoning-parser: auto: deepseek_r1 (the chat template opens <think>)' "$tmp/ctl.err"
check "reasoning split chosen automatically: the template opens <think>" $?
grep -Eq '^  kernels: matmul (scalar|avx2|avx512bf16|amx), ops (scalar|avx2|avx512), attention [a-z0-9]+$' \
    "$tmp/ctl.err"
check "start-up names the kernels chosen (a dense model: the dense matmul)" $?
cp='{"prompt":"Once upon a time","max_tokens":16,"temperature":0,"ignore_eos":true}'
post /v1/completions "$cp" >"$tmp/k0"
full=$(jq -r '.choices[0].text' "$tmp/k0")
s2=$(jq -r '.choices[0].text[5:7]' "$tmp/k0")  # two characters from the middle
post /v1/completions "$(echo "$cp" | jq -c --arg s "$s2" '. + {stop: ["\u0001never", $s]}')" >"$tmp/k1"
got=$(jq -r '.choices[0].text' "$tmp/k1")
[ "$(jq -r '.choices[0].finish_reason' "$tmp/k1")" = stop ] &&
    jq -e --arg f "$full" --arg s "$s2" '.choices[0].text as $t | ($f | startswith($t + $s)) and ($t | contains($s) | not)' "$tmp/k1" >/dev/null &&
    [ "$(jq -r '.usage.completion_tokens < 16' "$tmp/k1")" = true ]
check "stop string: text cut before it, finish_reason stop" $?
post /v1/completions "$(echo "$cp" | jq -c --arg s "$s2" '. + {stop: $s, stream: true}')" -N >"$tmp/k2"
[ "$(grep '^data: {' "$tmp/k2" | sed 's/^data: //' | jq -rsj '[.[] | .choices[0].text] | join("")')" = "$got" ] &&
    [ "$(grep '^data: {' "$tmp/k2" | sed 's/^data: //' | jq -rs '[.[] | .choices[0].finish_reason | select(.!=null)] | join(",")')" = stop ]
check "stop string, streamed: the same text, never the stop string" $?
s1=$(jq -r '.choices[0].text[0:1]' "$tmp/k0")
post /v1/completions "$(echo "$cp" | jq -c --arg s "$s1" '. + {stop: [$s]}')" >"$tmp/k3"
[ "$(jq -r '.choices[0].text' "$tmp/k3")" = "" ] && [ "$(jq -r '.choices[0].finish_reason' "$tmp/k3")" = stop ]
check "stop string at the very start: empty text" $?
post /v1/completions "$(echo "$cp" | jq -c '. + {logprobs: 3}')" >"$tmp/k4"
jq -e '.choices[0].logprobs as $l | ($l.tokens | length) == 16 and ($l.token_logprobs | length) == 16 and
    ($l.top_logprobs | length) == 16 and ($l.text_offset[0] == 0) and
    ([$l.token_logprobs[] | select(. > 0)] | length) == 0 and
    ([range(1; 16) as $i | select($l.text_offset[$i] < $l.text_offset[$i - 1])] | length) == 0 and
    ([$l.top_logprobs[] | select(length < 1 or length > 4)] | length) == 0' "$tmp/k4" >/dev/null &&
    [ "$(jq -r '.choices[0].text' "$tmp/k4")" = "$full" ]
check "completions logprobs: tokens, token_logprobs, top_logprobs, text_offset" $?
first=$(post /tokenize "{\"prompt\":$(jq -c '.choices[0].logprobs.tokens[0]' "$tmp/k4"),\"add_special_tokens\":false}" | jq -r '.tokens[0]')
post /v1/completions "$(echo "$cp" | jq -c --arg id "$first" '. + {logit_bias: {($id): -100}, logprobs: 0}')" >"$tmp/k5"
[ -n "$first" ] && [ "$(jq -r '.choices[0].logprobs.tokens[0]' "$tmp/k5")" != "$(jq -r '.choices[0].logprobs.tokens[0]' "$tmp/k4")" ]
check "logit_bias -100 bans greedy's first token" $?
post /v1/completions "$(echo "$cp" | jq -c '. + {echo: true}')" >"$tmp/k6"
[ "$(jq -r '.choices[0].text' "$tmp/k6")" = "Once upon a time$full" ]
check "echo: the prompt, then the completion" $?
ex='{"prompt":"Once upon a time","max_tokens":12,"temperature":0.9,"seed":5,"min_p":0.05,"top_k":50,"presence_penalty":0.5,"frequency_penalty":0.5,"repetition_penalty":1.2,"logit_bias":{"11":2},"min_tokens":2,"n":3}'
post /v1/completions "$ex" >"$tmp/k7"
post /v1/completions "$ex" >"$tmp/k8"
[ "$(jq -r '.choices | length' "$tmp/k7")" = 3 ] && [ "$(jq -c '[.choices[].text]' "$tmp/k7")" = "$(jq -c '[.choices[].text]' "$tmp/k8")" ] &&
    [ "$(jq -r '.usage.completion_tokens' "$tmp/k7")" -ge 6 ]
check "every control at once, n=3: accepted, seed reproduces each choice" $?

hi='{"messages":[{"role":"user","content":"Hello"}],"max_tokens":10,"temperature":0}'
post /v1/chat/completions "$hi" >"$tmp/r1"
jq -e '.choices[0].message.content == "" and (.choices[0].message.reasoning_content | length) > 0 and
    .usage.completion_tokens_details.reasoning_tokens == 10' "$tmp/r1" >/dev/null
check "reasoning: no </think>, everything is reasoning_content, 10 reasoning tokens" $?
post /v1/chat/completions "$(echo "$hi" | jq -c '. + {stream: true, stream_options: {include_usage: true}}')" -N >"$tmp/r2"
grep '^data: {' "$tmp/r2" | sed 's/^data: //' >"$tmp/r2.json"
[ "$(jq -rsj '[.[] | select(.choices|length>0) | .choices[0].delta.reasoning_content // ""] | join("")' "$tmp/r2.json")" = \
  "$(jq -rj '.choices[0].message.reasoning_content' "$tmp/r1")" ] &&
    [ "$(jq -rsj '[.[] | select(.choices|length>0) | .choices[0].delta.content // ""] | join("")' "$tmp/r2.json")" = "" ] &&
    [ "$(tail -n 1 "$tmp/r2.json" | jq -r '.usage.completion_tokens_details.reasoning_tokens')" = 10 ]
check "reasoning streamed as reasoning_content deltas" $?
# A bias of 100 on </think> (id 151649) makes the tiny model write it within a few tokens: the
# reasoning is what comes before, the answer what comes after (the chat logprobs list both).
post /v1/chat/completions "$(echo "$hi" | jq -c '. + {logit_bias: {"151649": 100}, logprobs: true, top_logprobs: 2}')" >"$tmp/r3"
jq -e '.choices[0].logprobs.content as $c | ([$c[].token] | index("</think>")) as $k |
    $k != null and .usage.completion_tokens_details.reasoning_tokens == $k + 1 and
    .choices[0].message.reasoning_content == ([$c[:$k][].token] | join("")) and
    .choices[0].message.content == ([$c[$k + 1:][].token] | join("")) and
    ($c | length) == 10 and ([$c[] | select((.top_logprobs | length) != 2)] | length) == 0 and
    ([$c[] | select(.logprob > 0)] | length) == 0' "$tmp/r3" >/dev/null
check "reasoning closed by </think>: reasoning before it, content after, reasoning_tokens; chat logprobs" $?
post /v1/chat/completions "$(echo "$hi" | jq -c '. + {logit_bias: {"151649": 100}, stream: true}')" -N >"$tmp/r4"
[ "$(grep '^data: {' "$tmp/r4" | sed 's/^data: //' | jq -rsj '[.[] | .choices[0].delta.content // ""] | join("")')" = \
  "$(jq -rj '.choices[0].message.content' "$tmp/r3")" ]
check "reasoning closed: the answer streams as content deltas" $?
stop ctl

# ---- queue full, keep-alives, shutdown with a stream in flight ----
start queue --model "$model" --max-seqs 1 --max-queue 1 --sse-keepalive 0.2 --shutdown-grace 0.3 || exit 0
curl -s -N -m 60 -d "$long" "$URL/v1/chat/completions" >"$tmp/qa" &
qa=$!
wait_metric llaisys_num_requests_running "" 1
curl -s -N -m 60 -d "$long" "$URL/v1/chat/completions" >"$tmp/qb" &
qb=$!
wait_metric llaisys_num_requests_waiting "" 1
got=$(curl -s -m 30 -D "$tmp/h429" -o "$tmp/err" -w '%{http_code}' -d "$long" "$URL/v1/chat/completions")
[ "$got" = 429 ] && [ "$(jq -r '.error.type' "$tmp/err")" = rate_limit_error ] &&
    grep -qi '^retry-after:' "$tmp/h429"
check "queue full: 429 rate_limit_error with Retry-After" $?
sleep 0.5
grep -q '^: keep-alive' "$tmp/qb"
check "queued stream receives SSE keep-alive comments" $?
kill -TERM "$PID"; wait "$PID"; rc=$?
wait $qa $qb
[ $rc -eq 0 ] && [ "$(tail -n 2 "$tmp/qa" | head -n 1)" = "data: [DONE]" ] &&
    [ "$(tail -n 2 "$tmp/qb" | head -n 1)" = "data: [DONE]" ] &&
    [ "$(grep '^data: {' "$tmp/qa" | tail -n 1 | sed 's/^data: //' | jq -r '.choices[0].finish_reason')" = cancelled ]
check "SIGTERM with streams in flight: final chunks, [DONE], exit 0" $?

# ---- auth ----
printf '# keys\nfile-key-1\n\n' >"$tmp/keys"
start auth --model "$model" --api-key sekret --api-key-file "$tmp/keys" --log-level info || exit 0
[ "$(code "$URL/v1/models")" = 401 ] &&
    [ "$(code -H 'Authorization: Bearer wrong' "$URL/v1/models")" = 401 ] &&
    [ "$(code -H 'Authorization: Bearer sekretX' "$URL/v1/models")" = 401 ] &&
    [ "$(code -H 'Authorization: Basic sekret' "$URL/v1/models")" = 401 ]
check "auth: missing, wrong, longer and non-Bearer keys get 401" $?
curl -s -m 30 -o "$tmp/err" "$URL/v1/chat/completions" -d "{$msgs}"
[ "$(jq -r '.error.type' "$tmp/err")" = authentication_error ]
check "auth: 401 body has the OpenAI error shape" $?
[ "$(code -H 'Authorization: Bearer sekret' "$URL/v1/models")" = 200 ] &&
    [ "$(code -H 'Authorization: Bearer file-key-1' "$URL/v1/models")" = 200 ]
check "auth: keys from --api-key and --api-key-file accepted" $?
[ "$(code "$URL/health")" = 200 ] && [ "$(code "$URL/metrics")" = 401 ] &&
    [ "$(code -H 'Authorization: Bearer sekret' "$URL/metrics")" = 200 ]
check "auth: /health is public, /metrics needs a key" $?
post /v1/chat/completions "$chat" -H 'Authorization: Bearer sekret' -H 'X-Request-Id: logged-1' >/dev/null
sleep 0.2
grep -q 'logged-1 POST /v1/chat/completions 200 model=tiny-qwen2 finish=length choices=1 prompt=6' "$tmp/auth.err" &&
    grep -q 'completion=12 ttft=' "$tmp/auth.err"
check "log line carries request id, model, status, tokens and latencies" $?
stop auth

start pub --model "$model" --api-key sekret --metrics-public --cors-origins 'https://app.example' \
    --request-timeout 0.3 || exit 0
[ "$(code "$URL/metrics")" = 200 ]
check "--metrics-public serves /metrics without a key" $?
c -i -X OPTIONS -H 'Origin: https://app.example' "$URL/v1/chat/completions" >"$tmp/cors"
head -n 1 "$tmp/cors" | grep -q ' 204' &&
    grep -qi '^access-control-allow-origin: https://app.example' "$tmp/cors" &&
    grep -qi '^access-control-allow-headers:.*authorization' "$tmp/cors"
check "CORS preflight for an allowed origin" $?
! c -i -H 'Origin: https://evil.example' "$URL/health" | grep -qi '^access-control-allow-origin'
check "no CORS header for another origin" $?
post /v1/chat/completions "$(echo "$long" | sed 's/"stream":true/"stream":true,"stream_options":{"include_usage":true}/')" \
    -N -H 'Authorization: Bearer sekret' >"$tmp/tl"
grep '^data: {' "$tmp/tl" | sed 's/^data: //' >"$tmp/tl.json"
[ "$(jq -rs '[.[] | select(.choices|length>0) | .choices[0].finish_reason | select(.!=null)] | join(",")' "$tmp/tl.json")" = length ] &&
    [ "$(tail -n 1 "$tmp/tl.json" | jq -r '.usage.completion_tokens < 4000')" = true ] &&
    [ "$(metric llaisys_request_cancellations_total 'reason="time_limit"')" = 1 ] &&
    wait_metric llaisys_kv_cache_blocks 'state="in_use"' 0
check "--request-timeout: the stream ends with finish_reason length, KV freed" $?
stop pub

# ---- speculative decoding: the same answers with drafts, usage and /metrics counting them ----
cli="${LLAISYS_CLI:-./llaisys-cli}"
if "$cli" mkmodel --preset tiny --untied --copy 16 --tokenizer "$model" "$tmp/copy" >/dev/null 2>&1; then
    fixture=$model
    model=$tmp/copy
    # a greedy answer that repeats its prompt (logprobs too), and seeded choices with a stop
    b1='{"prompt":[400,401,402,403,404,405,406,407,408,409],"max_tokens":60,"temperature":0,"logprobs":3}'
    b2='{"prompt":[400,401,402,403,404,405],"max_tokens":50,"temperature":0.1,"seed":3,"n":2,"stop":["lic $;"],"logit_bias":{"400":8,"401":8,"402":8,"403":8,"404":8,"405":8,"406":8,"407":8,"408":8,"409":8,"410":8,"411":8,"412":8,"413":8,"414":8,"415":8}}'
    b3='{"prompt":[2400,2401,2402,2403],"max_tokens":40,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}'
    for mode in off ngram-always ngram; do
        start "spec-$mode" --model "$model" --spec "$mode" --spec-max-draft 5 || exit 0
        post /v1/completions "$b1" >"$tmp/$mode.1"
        post /v1/completions "$b2" >"$tmp/$mode.2"
        post /v1/completions "$b3" -N | grep '^data: {' | sed 's/^data: //' >"$tmp/$mode.3"
        metric llaisys_spec_decode_num_accepted_tokens_total >"$tmp/$mode.acc"
        metric llaisys_spec_decode_num_draft_tokens_total >"$tmp/$mode.drafted"
        stop "spec-$mode"
    done
    same=0
    for mode in ngram-always ngram; do
        for k in 1 2; do
            [ "$(jq -c '[.choices[] | [.text, .finish_reason, .logprobs]]' "$tmp/off.$k")" = \
              "$(jq -c '[.choices[] | [.text, .finish_reason, .logprobs]]' "$tmp/$mode.$k")" ] &&
                [ "$(jq -r '.usage.completion_tokens' "$tmp/off.$k")" = \
                  "$(jq -r '.usage.completion_tokens' "$tmp/$mode.$k")" ] || same=1
        done
        [ "$(jq -rj 'select(.choices|length>0) | .choices[0].text' "$tmp/off.3")" = \
          "$(jq -rj 'select(.choices|length>0) | .choices[0].text' "$tmp/$mode.3")" ] || same=1
    done
    [ $same -eq 0 ] && [ "$(jq -r '.choices[0].finish_reason' "$tmp/off.2")" = stop ]
    check "--spec ngram and ngram-always: the same texts, finishes and logprobs as --spec off" $?
    a1=$(jq -r '.usage.completion_tokens_details.accepted_prediction_tokens' "$tmp/ngram-always.1")
    r1=$(jq -r '.usage.completion_tokens_details.rejected_prediction_tokens' "$tmp/ngram-always.1")
    a2=$(jq -r '.usage.completion_tokens_details.accepted_prediction_tokens' "$tmp/ngram-always.2")
    r2=$(jq -r '.usage.completion_tokens_details.rejected_prediction_tokens' "$tmp/ngram-always.2")
    a3=$(tail -n 1 "$tmp/ngram-always.3" | jq -r '.usage.completion_tokens_details.accepted_prediction_tokens')
    r3=$(tail -n 1 "$tmp/ngram-always.3" | jq -r '.usage.completion_tokens_details.rejected_prediction_tokens')
    [ "$a1" -gt 30 ] && [ "$a3" -gt 20 ] &&
        [ "$(jq -r '.usage.completion_tokens_details.accepted_prediction_tokens' "$tmp/off.1")" = 0 ] &&
        [ "$(jq -r '.usage.completion_tokens_details.rejected_prediction_tokens' "$tmp/off.1")" = 0 ]
    check "usage.completion_tokens_details counts accepted and rejected draft tokens" $?
    [ "$(cat "$tmp/ngram-always.acc")" = $((a1 + a2 + a3)) ] &&
        [ "$(cat "$tmp/ngram-always.drafted")" = $((a1 + r1 + a2 + r2 + a3 + r3)) ] &&
        [ "$(cat "$tmp/off.drafted")" = 0 ]
    check "/metrics: spec draft and accepted token counters equal the usages' sums" $?
    model=$fixture
else
    echo "not ok mkmodel --copy for the speculative decoding checks"
fi

# ---- 503 while the model loads: config.json is a FIFO, so loading waits for us ----
mkdir "$tmp/slow"
for f in model.safetensors generation_config.json tokenizer.json tokenizer_config.json; do
    ln -s "$PWD/$model/$f" "$tmp/slow/$f"
done
mkfifo "$tmp/slow/config.json"
"$srv" --model "$tmp/slow" --port 0 --log-level info >"$tmp/slow.out" 2>"$tmp/slow.err" &
PID=$!
pids="$pids $PID"
i=0
URL=""
while [ -z "$URL" ] && [ $i -lt 300 ]; do
    sleep 0.1
    URL=$(sed -n 's/.*listening on \(http:[^,]*\), loading.*/\1/p' "$tmp/slow.err")
    i=$((i + 1))
done
got=$(curl -s -m 30 -D "$tmp/h503" -o "$tmp/b503" -w '%{http_code}' "$URL/health")
[ "$got" = 503 ] && [ "$(jq -r '.status' "$tmp/b503")" = loading ]
check "/health answers 503 while the model loads" $?
got=$(curl -s -m 30 -D "$tmp/h503" -o "$tmp/err" -w '%{http_code}' -d "{$msgs}" "$URL/v1/chat/completions")
[ "$got" = 503 ] && [ "$(jq -r '.error.type' "$tmp/err")" = server_error ] &&
    grep -qi '^retry-after:' "$tmp/h503"
check "generation while loading: 503 with Retry-After" $?
cat "$model/config.json" >"$tmp/slow/config.json"
i=0
while [ "$(code "$URL/health")" != 200 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
[ "$(code "$URL/health")" = 200 ] && [ "$(post /v1/completions '{"prompt":"a","max_tokens":2}' | jq -r '.usage.completion_tokens')" = 2 ]
check "/health 200 and generation once loaded" $?
stop slow

# ---- the OpenAI Node SDK suite ----
if [ -d tests/server/node_modules/openai ] && command -v node >/dev/null; then
    LLAISYS_SERVER="$srv" node --test --test-reporter=tap tests/server/ >"$tmp/node" 2>&1
    # top-level TAP results of node's runner: "ok N - name" / "not ok N - name"
    sed -n 's/^\(not ok\|ok\) [0-9]* - \(.*\)/\1 sdk: \2/p' "$tmp/node"
    # what a failed test saw: its TAP block (error, expected and actual values, where)
    awk '/^not ok /{p = 1} /^ok /{p = 0} p' "$tmp/node" | head -n 60 | sed 's/^/# /'
    grep -q '^ok ' "$tmp/node" || { echo "not ok sdk suite ran"; sed 's/^/# /' "$tmp/node" | tail -n 30; }
else
    echo "not ok sdk suite installed (make installs it with 'npm ci --prefix tests/server')"
fi

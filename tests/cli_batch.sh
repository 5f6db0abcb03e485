#!/bin/sh
# cli_batch.sh: black-box tests of `llaisys-cli batch` on the tiny-qwen2 fixture: lines are
# /v1/completions or /v1/chat/completions bodies; one JSON line per request with the documented
# fields; batched greedy and seeded outputs equal `generate`'s; the same outputs with a tiny KV
# pool (preemption) and small prompt chunks; prefix-cache hits are reported; stop ids; stop
# strings; logprobs; n choices sharing the prompt's blocks; several prompts in one line; echo;
# bad lines and impossible requests give error lines in the server's error shape, with the
# server's ranges; bad arguments fail.
cli="${LLAISYS_CLI:-./llaisys-cli}"
model=tests/fixtures/tiny-qwen2
. tests/lib/harness.sh # $tmp, check
# line_of FILE ID: the output line of request ID (string ids); ids_of LINE: its token ids.
line_of() { grep "^{\"id\":\"$2\"" "$1"; }
ids_of() { printf '%s\n' "$1" | sed -n 's/.*"token_ids":\[\([0-9,]*\)\].*/\1/p' | tr ',' ' '; }

p1="151646 9707 11 1879 25 279 3974 13876 38835"
p2="151646 785 4226 304 1156 1052"
j1=$(echo "$p1" | tr ' ' ',')
j2=$(echo "$p2" | tr ' ' ',')
cat >"$tmp/in.jsonl" <<EOT
{"id":"g1","prompt":[$j1],"max_tokens":8,"temperature":0,"ignore_eos":true}
{"id":"g2","prompt":[$j2],"max_tokens":7,"temperature":0,"ignore_eos":true}
{"id":"s1","prompt":[$j1],"max_tokens":9,"temperature":0.8,"top_p":0.9,"top_k":40,"seed":11,"ignore_eos":true}
{"id":"t1","prompt":"Hello, world","max_tokens":6,"temperature":0,"ignore_eos":true}
{"id":"c1","messages":[{"role":"user","content":"Hi there"}],"max_tokens":5,"temperature":0,"ignore_eos":true}
EOT
"$cli" batch --model "$model" --input "$tmp/in.jsonl" >"$tmp/out" 2>"$tmp/err"
check "batch exits 0 when every request finishes" $?
[ "$(wc -l <"$tmp/out")" -eq 5 ]
check "batch prints one line per request" $?
l=$(line_of "$tmp/out" g1)
for f in '"text":' '"token_ids":' '"finish_reason":"length"' '"prompt_tokens":9' \
    '"completion_tokens":8' '"cached_tokens":' '"ttft_ms":' '"total_ms":'; do
    case "$l" in *"$f"*) ;; *) echo "missing $f in: $l"; false ;; esac || break
done
check "result line has text, token_ids, finish_reason, usage, timings" $?

want=$("$cli" generate --model "$model" --ids "$p1" --temp 0 --print-ids -n 8 2>/dev/null)
[ -n "$want" ] && [ "$(ids_of "$l")" = "$want" ]
check "batched greedy ids = generate (request 1)" $?
want2=$("$cli" generate --model "$model" --ids "$p2" --temp 0 --print-ids -n 7 2>/dev/null)
[ -n "$want2" ] && [ "$(ids_of "$(line_of "$tmp/out" g2)")" = "$want2" ]
check "batched greedy ids = generate (request 2)" $?
wants=$("$cli" generate --model "$model" --ids "$p1" --temp 0.8 --top-p 0.9 --top-k 40 \
    --seed 11 --print-ids -n 9 2>/dev/null)
[ -n "$wants" ] && [ "$(ids_of "$(line_of "$tmp/out" s1)")" = "$wants" ]
check "batched seeded sampling = generate with the same seed" $?
wantt=$("$cli" generate --model "$model" --prompt "Hello, world" --temp 0 -n 6 2>/dev/null)
gott=$(line_of "$tmp/out" t1 | sed -n 's/.*"text":"\([^"]*\)".*/\1/p')
[ -n "$wantt" ] && [ "$gott" = "$wantt" ]
check "text prompt: text = generate's text" $?
line_of "$tmp/out" c1 | grep -q '"completion_tokens":5'
check "messages prompt runs through the chat template" $?

# Tiny pool (preemption) and small chunks give the same tokens.
"$cli" batch --model "$model" --input "$tmp/in.jsonl" --kv-blocks 3 --block-size 8 \
    --max-batch-tokens 8 --max-seqs 4 >"$tmp/out2" 2>"$tmp/err2"
check "batch with a tiny KV pool exits 0" $?
grep -q '"preemptions":[1-9]' "$tmp/out2"
check "a tiny KV pool preempts" $?
"$cli" batch --model "$model" --input "$tmp/in.jsonl" --block-size 8 >"$tmp/out3" 2>/dev/null
same=0
for id in g1 g2 s1 t1 c1; do
    [ "$(ids_of "$(line_of "$tmp/out2" $id)")" = "$(ids_of "$(line_of "$tmp/out3" $id)")" ] ||
        same=1
done
check "preempted and chunked outputs = unhindered outputs" $same

# Prefix cache: run one at a time; the second shares 32 tokens of the first's prompt.
pre="151646"
i=1
while [ $i -le 40 ]; do pre="$pre,$((1000 + i * 37))"; i=$((i + 1)); done
cat >"$tmp/pre.jsonl" <<EOT
{"id":"p1","prompt":[$pre,5,6],"max_tokens":3,"temperature":0}
{"id":"p2","prompt":[$pre,7,8,9],"max_tokens":3,"temperature":0}
EOT
"$cli" batch --model "$model" --input "$tmp/pre.jsonl" --max-seqs 1 >"$tmp/pre.out" 2>/dev/null
line_of "$tmp/pre.out" p1 | grep -q '"cached_tokens":0' &&
    line_of "$tmp/pre.out" p2 | grep -q '"cached_tokens":32'
check "prefix cache hit reported in usage.prompt_tokens_details.cached_tokens" $?
"$cli" batch --model "$model" --input "$tmp/pre.jsonl" --max-seqs 1 --no-prefix-cache \
    >"$tmp/pre2.out" 2>/dev/null
line_of "$tmp/pre2.out" p2 | grep -q '"cached_tokens":0' &&
    [ "$(ids_of "$(line_of "$tmp/pre.out" p2)")" = "$(ids_of "$(line_of "$tmp/pre2.out" p2)")" ]
check "--no-prefix-cache: no hit, same tokens" $?

# Stop ids: stop at the third greedy token of request 1.
third=$(echo "$want" | cut -d' ' -f3)
echo "{\"id\":\"st\",\"prompt\":[$j1],\"max_tokens\":8,\"temperature\":0,\"stop_token_ids\":[$third]}" \
    >"$tmp/stop.jsonl"
"$cli" batch --model "$model" --input "$tmp/stop.jsonl" >"$tmp/stop.out" 2>/dev/null
l=$(line_of "$tmp/stop.out" st)
first2=$(echo "$want" | cut -d' ' -f1-2)
case "$first2" in *"$third"*) skip=1 ;; *) skip=0 ;; esac
[ $skip -eq 1 ] || { echo "$l" | grep -q '"finish_reason":"stop"' &&
    echo "$l" | grep -q "\"stop_token_id\":$third" && [ "$(ids_of "$l")" = "$first2" ]; }
check "stop_token_ids end the request with finish_reason stop" $?

# Stop strings, logprobs, n choices (jq reads the lines).
if command -v jq >/dev/null; then
    echo "{\"id\":\"f\",\"prompt\":[$j1],\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":3}" \
        >"$tmp/f.jsonl"
    "$cli" batch --model "$model" --input "$tmp/f.jsonl" >"$tmp/f.out" 2>/dev/null
    full=$(jq -r '.text' "$tmp/f.out")
    jq -e '(.logprobs | length) == 12 and ([.logprobs[] | select((.top_logprobs | length) != 3 or
        .top_logprobs[0][0] != .id or .logprob > 0)] | length) == 0 and .index == 0' "$tmp/f.out" >/dev/null
    check "logprobs: one entry per token, greedy's token first among 3 alternatives" $?
    s2=$(jq -r '.text[4:6]' "$tmp/f.out")
    echo "{\"id\":\"cut\",\"prompt\":[$j1],\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true}" |
        jq -c --arg s "$s2" '. + {stop: ["\u0001no", $s]}' >"$tmp/cut.jsonl"
    "$cli" batch --model "$model" --input "$tmp/cut.jsonl" >"$tmp/cut.out" 2>/dev/null
    jq -e --arg f "$full" --arg s "$s2" '.finish_reason == "stop" and .stop_reason == $s and
        (.text as $t | ($f | startswith($t + $s)) and ($t | contains($s) | not))' "$tmp/cut.out" >/dev/null
    check "stop strings: text cut before the match, stop_reason names it" $?
    pl="151646"
    i=1
    while [ $i -le 40 ]; do pl="$pl,$((2000 + i * 53))"; i=$((i + 1)); done
    echo "{\"id\":\"n4\",\"prompt\":[$pl],\"max_tokens\":6,\"temperature\":1.5,\"seed\":9,\"n\":4,\"ignore_eos\":true}" >"$tmp/n.jsonl"
    "$cli" batch --model "$model" --input "$tmp/n.jsonl" >"$tmp/n.out" 2>/dev/null
    "$cli" batch --model "$model" --input "$tmp/n.jsonl" --no-prefix-cache >"$tmp/n2.out" 2>/dev/null
    [ "$(jq -s -c 'sort_by(.index) | [.[].index]' "$tmp/n.out")" = "[0,1,2,3]" ] &&
        [ "$(jq -s -c 'sort_by(.index) | [.[].usage.prompt_tokens_details.cached_tokens]' "$tmp/n.out")" = "[0,32,32,32]" ] &&
        [ "$(jq -s -c 'sort_by(.index) | [.[].token_ids]' "$tmp/n.out")" = \
          "$(jq -s -c 'sort_by(.index) | [.[].token_ids]' "$tmp/n2.out")" ] &&
        [ "$(jq -s '[.[].token_ids] | unique | length' "$tmp/n.out")" -ge 2 ]
    check "n=4: four choices sharing the prompt's blocks, the same without sharing" $?
    cat >"$tmp/mp.jsonl" <<EOT
{"id":"mp","prompt":[[$j1],[$j2]],"max_tokens":3,"temperature":0,"n":2,"ignore_eos":true}
{"id":"ec","prompt":"Hello, world","max_tokens":6,"temperature":0,"ignore_eos":true,"echo":true}
{"id":"rs","prompt":[$j1],"max_tokens":8,"temperature":1,"ignore_eos":true}
{"prompt":[$j2],"max_tokens":1,"temperature":0}
EOT
    "$cli" batch --model "$model" --input "$tmp/mp.jsonl" >"$tmp/mp.out" 2>/dev/null
    g1=$(echo "$want" | cut -d' ' -f1-3 | tr ' ' ',')
    g2=$(echo "$want2" | cut -d' ' -f1-3 | tr ' ' ',')
    [ "$(jq -s -c '[.[] | select(.id == "mp")] | sort_by(.index) | [.[] | [.index, .token_ids]]' "$tmp/mp.out")" = \
      "[[0,[$g1]],[1,[$g1]],[2,[$g2]],[3,[$g2]]]" ]
    check "two prompts, n=2: four lines, index = prompt x n + choice, each prompt's greedy ids" $?
    jq -s -e --arg t "Hello, world$gott" 'map(select(.id == "ec"))[0].text == $t' "$tmp/mp.out" >/dev/null
    check "echo: the prompt's text, then the completion" $?
    [ "$(jq -s -c 'map(select(.id == 4))[0].token_ids' "$tmp/mp.out")" = "[$(echo "$want2" | cut -d' ' -f1)]" ]
    check "a line without an id is named by its line number" $?
    seed=$(grep '^{"id":"rs"' "$tmp/mp.out" | sed -n 's/.*"seed":\([0-9]*\).*/\1/p')
    echo "{\"id\":\"rs\",\"prompt\":[$j1],\"max_tokens\":8,\"temperature\":1,\"ignore_eos\":true,\"seed\":$seed}" \
        >"$tmp/rs.jsonl"
    "$cli" batch --model "$model" --input "$tmp/rs.jsonl" >"$tmp/rs.out" 2>/dev/null
    [ -n "$seed" ] && [ "$(jq -c .token_ids "$tmp/rs.out")" = \
        "$(jq -c 'select(.id == "rs") | .token_ids' "$tmp/mp.out")" ]
    check "the seed drawn for a request without one is reported exactly: giving it back repeats the tokens" $?
else
    echo "not ok batch tests need jq"
fi

# Errors: a bad line, an impossible request, a bad field; the others still run.
cat >"$tmp/bad.jsonl" <<EOT
{"id":"ok","prompt":[$j2],"max_tokens":2,"temperature":0}
this is not json
{"id":"long","prompt":[$j2],"max_tokens":100000}
{"id":"temp","prompt":[$j2],"temperature":"hot"}
{"id":"none","max_tokens":2}
{"id":"badn","prompt":[$j2],"n":0}
{"id":"badstop","prompt":[$j2],"stop":[""]}
{"id":"hot","prompt":[$j2],"temperature":3}
{"id":"oldids","ids":[$j2]}
{"id":"both","prompt":"a","messages":[{"role":"user","content":"b"}]}
EOT
"$cli" batch --model "$model" --input "$tmp/bad.jsonl" --ctx 64 >"$tmp/bad.out" 2>/dev/null
rc=$?
[ $rc -eq 1 ]
check "batch exits 1 when a request failed" $?
line_of "$tmp/bad.out" ok | grep -q '"finish_reason":"length"'
check "good requests run beside bad lines" $?
grep '^{"id":2,' "$tmp/bad.out" | grep -q '"error":{"message":"line 2: request: invalid JSON at line 1, column 1 (byte offset 0)","type":"invalid_request_error","param":null,"code":"invalid_json"}'
check "a line that is not JSON gives an error line naming it, in the server's error shape" $?
line_of "$tmp/bad.out" long | grep -q 'exceeds the context'
check "a request beyond the context is rejected with a clear error" $?
line_of "$tmp/bad.out" temp | grep -q 'temperature.*must be a number'
check "a bad sampling field is named" $?
line_of "$tmp/bad.out" none | grep -q "needs 'messages' (a chat request) or 'prompt'" &&
    line_of "$tmp/bad.out" both | grep -q "not both"
check "a request without a prompt, or with both prompt and messages, is rejected" $?
line_of "$tmp/bad.out" badn | grep -q "'n' must be between 1 and 64, got 0\",.*\"param\":\"n\"" &&
    line_of "$tmp/bad.out" badstop | grep -q "\"param\":\"stop\[0\]\""
check "a bad n or an empty stop string is rejected, naming the field" $?
line_of "$tmp/bad.out" hot | grep -q "'temperature' must be at least 0 and at most 2, got 3"
check "temperature above 2 is refused, as by the server (it was accepted up to 100)" $?
line_of "$tmp/bad.out" oldids | grep -q "give token ids as"
check "the old \"ids\" field is refused, pointing to \"prompt\"" $?

"$cli" batch --model "$model" >/dev/null 2>"$tmp/e1"
[ $? -eq 2 ] && grep -q -- '--input' "$tmp/e1"
check "batch without --input fails with usage" $?
"$cli" batch --model "$model" --input "$tmp/in.jsonl" --max-seqs 0 >/dev/null 2>"$tmp/e2"
[ $? -eq 2 ] && grep -q -- '--max-seqs' "$tmp/e2"
check "batch rejects a bad engine option" $?
# One range per engine option, the engine's: threads <= 256, max-batch-tokens <= 65536.
"$cli" batch --model "$model" --input "$tmp/in.jsonl" --threads 257 >/dev/null 2>"$tmp/e2"
[ $? -eq 2 ] && grep -q -- '--threads: must be an integer from 1 to 256' "$tmp/e2"
check "batch --threads above the engine's 256 is refused with the range" $?
"$cli" batch --model "$model" --input "$tmp/in.jsonl" --max-batch-tokens=65537 >/dev/null \
    2>"$tmp/e2"
[ $? -eq 2 ] && grep -q -- '--max-batch-tokens: must be an integer from 1 to 65536' "$tmp/e2"
check "batch --max-batch-tokens=N above 65536 is refused with the range" $?
"$cli" batch --model "$model" --input "$tmp/in.jsonl" --kv-memory 12Q >/dev/null 2>"$tmp/e2"
[ $? -eq 2 ] && grep -q -- '--kv-memory: must be a size' "$tmp/e2"
check "batch --kv-memory with a bad unit is refused" $?
"$cli" batch --help >"$tmp/help"
grep -q -- '--max-seqs N .*sequences decoded at once (1 to 4096; default 16)' "$tmp/help" &&
    grep -q -- '--ctx N .*default min(4096, max_position_embeddings))' "$tmp/help"
check "batch --help prints the engine-option table with ranges and defaults" $?
grep -q '^engine: threads: 2, ctx: 4096, max-seqs: 16, max-batch-tokens: 512, ' "$tmp/err"
check "batch prints the resolved engine options by their flag names" $?
"$cli" batch --model "$model" --input "$tmp/nope.jsonl" >/dev/null 2>"$tmp/e3"
[ $? -eq 1 ] && grep -q 'nope.jsonl' "$tmp/e3"
check "batch names a missing input file" $?

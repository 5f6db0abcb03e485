#!/bin/sh
# cli_params.sh: one sampling policy (include/gen_params.h) in the three entry points. For the
# same model directory, prompt and settings, `llaisys-cli generate`, `llaisys-cli batch` and the
# server's /v1/completions give the same tokens: greedy; seeded with explicit settings; seeded
# with nothing but generation_config.json's defaults, min_p and repetition_penalty included
# (generate used to ignore both; batch dropped top_p/top_k/min_p when do_sample was false);
# and greedy for all three when generation_config says "do_sample": false. The server's tokens
# are compared through its text and token count (it returns no ids); batch's text is checked
# against its ids. $LLAISYS_CLI and $LLAISYS_SERVER are the programs under test.
cli="${LLAISYS_CLI:-./llaisys-cli}"
fixture=tests/fixtures/tiny-qwen2
. tests/lib/harness.sh # $srv, $tmp, check, start, stop

for tool in curl jq; do
    command -v "$tool" >/dev/null || { echo "not ok params tests need $tool"; exit 0; }
done

# model DIR GENERATION_CONFIG: the fixture's weights and tokenizer with another
# generation_config.json
model() {
    mkdir -p "$1"
    for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do
        ln -s "$PWD/$fixture/$f" "$1/$f"
    done
    printf '%s\n' "$2" >"$1/generation_config.json"
}
ids='{"bos_token_id":151646,"eos_token_id":151643'
model "$tmp/sampling" "$ids,\"do_sample\":true,\"temperature\":0.9,\"top_p\":0.9,\"top_k\":40,\"min_p\":0.02,\"repetition_penalty\":1.5}"
model "$tmp/greedy" "$ids,\"do_sample\":false,\"temperature\":0.9,\"top_k\":3}"

prompt="151646 9707 11 1879" # "Hello, world": its greedy continuation repeats tokens
jprompt=$(echo "$prompt" | tr ' ' ',')
n=16

# same NAME DIR GENERATE-FLAGS JSON-FIELDS: generate, batch and the server (running on DIR)
# give the same tokens for the prompt. Sets GOT to generate's ids.
same() {
    name=$1 dir=$2 flags=$3 fields=$4
    # shellcheck disable=SC2086
    GOT=$("$cli" generate --model "$dir" --ids "$prompt" -n $n --print-ids $flags 2>"$tmp/gen.err")
    # shellcheck disable=SC2086
    gtext=$("$cli" generate --model "$dir" --ids "$prompt" -n $n $flags 2>/dev/null)
    body="{\"prompt\":[$jprompt],\"max_tokens\":$n$fields}"
    echo "$body" >"$tmp/in.jsonl"
    "$cli" batch --model "$dir" --input "$tmp/in.jsonl" >"$tmp/batch.out" 2>/dev/null
    curl -s -m 120 -H 'Content-Type: application/json' -d "$body" "$URL/v1/completions" \
        >"$tmp/srv.json"
    bids=$(jq -r '.token_ids | map(tostring) | join(" ")' "$tmp/batch.out")
    btext=$(jq -r '.text' "$tmp/batch.out")
    stext=$(jq -r '.choices[0].text' "$tmp/srv.json")
    scount=$(jq -r '.usage.completion_tokens' "$tmp/srv.json")
    [ -n "$GOT" ] && [ "$GOT" = "$bids" ] && [ "$gtext" = "$btext" ] && [ "$btext" = "$stext" ] &&
        [ "$scount" = "$(echo "$GOT" | wc -w)" ]
    rc=$?
    check "$name: generate = batch = server" $rc
    [ $rc -eq 0 ] || { echo "# generate: $GOT"; echo "# batch:    $bids"; echo "# server:   $scount tokens";
        echo "# texts: [$gtext] [$btext] [$stext]"; }
}

start sampling --model "$tmp/sampling" || { echo "not ok server starts"; exit 0; }
same "greedy" "$tmp/sampling" "--temp 0" ',"temperature":0'
greedy_penalized=$GOT
same "seeded, every setting given" "$tmp/sampling" \
    "--seed 11 --temp 1.2 --top-p 0.8 --top-k 20 --min-p 0.05 --repetition-penalty 1.2" \
    ',"seed":11,"temperature":1.2,"top_p":0.8,"top_k":20,"min_p":0.05,"repetition_penalty":1.2'
same "seeded, generation_config's defaults (min_p, repetition_penalty, top_k)" "$tmp/sampling" \
    "--seed 5" ',"seed":5'
defaults=$GOT
grep -q 'sampling: temperature 0.9, top-k 40, top-p 0.9, min-p 0.02, repetition penalty 1.5, seed 5' "$tmp/gen.err"
check "generate reports the defaults it took from generation_config.json" $?
explicit=$("$cli" generate --model "$tmp/sampling" --ids "$prompt" -n $n --print-ids --seed 5 \
    --temp 0.9 --top-p 0.9 --top-k 40 --min-p 0.02 --repetition-penalty 1.5 2>/dev/null)
neutral=$("$cli" generate --model "$tmp/sampling" --ids "$prompt" -n $n --print-ids --seed 5 \
    --min-p 0 --repetition-penalty 1 2>/dev/null)
[ "$explicit" = "$defaults" ] && [ "$neutral" != "$defaults" ]
check "the defaults equal the same values given as flags, and min_p/repetition_penalty matter" $?
unpenalized=$("$cli" generate --model "$fixture" --ids "$prompt" -n $n --print-ids --temp 0 2>/dev/null)
[ -n "$unpenalized" ] && [ "$unpenalized" != "$greedy_penalized" ]
check "greedy decoding applies generation_config's repetition_penalty" $?
stop sampling

start greedy --model "$tmp/greedy" || { echo "not ok server starts"; exit 0; }
same "do_sample false: greedy without a temperature" "$tmp/greedy" "--seed 3" ',"seed":3'
plain_greedy=$("$cli" generate --model "$tmp/greedy" --ids "$prompt" -n $n --print-ids --temp 0 2>/dev/null)
[ "$GOT" = "$plain_greedy" ]
check "do_sample false: the default is greedy (temperature 0)" $?
same "do_sample false, a temperature given: sampled with generation_config's top_k" \
    "$tmp/greedy" "--seed 3 --temp 1.5" ',"seed":3,"temperature":1.5'
with_top_k=$GOT
no_top_k=$("$cli" generate --model "$tmp/greedy" --ids "$prompt" -n $n --print-ids --seed 3 \
    --temp 1.5 --top-k 0 2>/dev/null)
[ "$with_top_k" != "$plain_greedy" ] && [ -n "$no_top_k" ] && [ "$with_top_k" != "$no_top_k" ]
check "do_sample false, a temperature given: samples, and generation_config's top_k applies" $?
stop greedy

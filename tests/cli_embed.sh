#!/bin/sh
# cli_embed.sh: black-box tests of `llaisys-cli embed` on tests/fixtures/tiny-qwen2: one JSON
# array of the model's width per non-blank line, unit vectors, the same vectors as the
# server's /v1/embeddings (float form) for the same texts, --pooling mean differs, a stdin
# input, and bad arguments failing with a message; and under the sanitizers the server's
# embeddings route with a client that leaves mid-request (the server still exits cleanly).
cli="${LLAISYS_CLI:-./llaisys-cli}"
model=tests/fixtures/tiny-qwen2
. tests/lib/harness.sh # $tmp, check, start, stop

printf 'first line\n\nthe second line, longer than the first\r\nthird\n' >"$tmp/in.txt"
"$cli" embed --model "$model" --threads 1 --input "$tmp/in.txt" >"$tmp/last.jsonl" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && [ "$(wc -l <"$tmp/last.jsonl")" -eq 3 ] &&
    grep -q '^embedded 3 texts, [0-9]* tokens' "$tmp/err" &&
    grep -q '^pooling: last, L2-normalized (no modules.json' "$tmp/err"
check "embed: one line per non-blank text, figures on stderr" $?

# every line: 64 numbers, unit norm
awk -F, '{ gsub(/[][]/, ""); s = 0; for (i = 1; i <= NF; i++) s += $i * $i;
           if (NF != 64 || s < 0.99999 || s > 1.00001) bad = 1 } END { exit bad }' "$tmp/last.jsonl"
check "embed: 64 values a line, unit vectors" $?

printf 'first line\nthird\n' | "$cli" embed --model "$model" --threads 1 --input - >"$tmp/stdin.jsonl" 2>/dev/null
sed -n '1p;3p' "$tmp/last.jsonl" | cmp -s - "$tmp/stdin.jsonl"
check "embed: standard input, each text's vector whatever else is in the batch" $?

"$cli" embed --model "$model" --threads 1 --input "$tmp/in.txt" --pooling mean >"$tmp/mean.jsonl" 2>/dev/null &&
    [ "$(wc -l <"$tmp/mean.jsonl")" -eq 3 ] && ! cmp -s "$tmp/last.jsonl" "$tmp/mean.jsonl"
check "embed --pooling mean gives other vectors" $?

out=$("$cli" embed --model "$model" --input "$tmp/in.txt" --pooling max 2>&1)
[ $? -eq 2 ] && printf '%s' "$out" | grep -q -- '--pooling must be last, mean or first'
check "embed --pooling max is refused" $?
out=$("$cli" embed --model "$model" --input "$tmp/none.txt" 2>&1)
[ $? -ne 0 ] && printf '%s' "$out" | grep -q "none.txt"
check "embed: a missing input file is named" $?
out=$("$cli" embed --input "$tmp/in.txt" 2>&1)
[ $? -eq 2 ] && printf '%s' "$out" | grep -q -- '--model and --input are required'
check "embed without --model is refused" $?

# the server gives the same vectors (its float form: the same 9 digits)
if start embed --model "$model" --threads 1; then
    curl -s -m 60 -H 'Content-Type: application/json' "$URL/v1/embeddings" -d \
        '{"input":["first line","the second line, longer than the first","third"],"encoding_format":"float"}' \
        >"$tmp/server.json"
    tr -d '\n' <"$tmp/server.json" | grep -o '"embedding":\[[^]]*\]' | sed 's/"embedding"://' >"$tmp/server.jsonl"
    cmp -s "$tmp/last.jsonl" "$tmp/server.jsonl"
    check "embed and the server's /v1/embeddings give the same vectors" $?

    # a client that leaves mid-request (many long inputs): the server ends them and serves on
    awk 'BEGIN { printf "{\"input\":["; for (i = 0; i < 300; i++) { printf "%s\"text %d", i ? "," : "", i;
                 for (j = 0; j < 200; j++) printf " lorem ipsum"; printf "\"" } print "]}" }' >"$tmp/big.json"
    curl -s -m 0.3 -H 'Content-Type: application/json' "$URL/v1/embeddings" -d @"$tmp/big.json" >/dev/null 2>&1
    out=$(curl -s -m 60 -H 'Content-Type: application/json' "$URL/v1/embeddings" -d '{"input":"after"}')
    printf '%s' "$out" | grep -q '"object":"embedding"'
    check "embeddings: a client leaving mid-request, the next one served" $?
    stop embed
fi

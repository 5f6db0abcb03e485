#!/bin/sh
# cli_rerank.sh: black-box tests of `llaisys-cli rerank` on tests/fixtures/tiny-qwen2 judged by
# --rerank-tokens: one JSON line per non-blank document, best first, every index once; the same
# scores as the server's /v1/rerank for the same query and documents; a standard-input
# input, --quiet, and what cannot rank or is malformed failing with a message naming why; and
# under the sanitizers the server's rerank route with a client that leaves mid-request (the
# server still exits cleanly).
cli="${LLAISYS_CLI:-./llaisys-cli}"
model=tests/fixtures/tiny-qwen2
. tests/lib/harness.sh # $tmp, check, start, stop

q='Which animal eats bamboo?'
printf 'The giant panda eats bamboo.\n\nParis is in France.\r\nZebras have stripes.\nBamboo shoots, a recipe.\n' >"$tmp/in.txt"
"$cli" rerank --model "$model" --threads 1 --rerank-tokens a,b --query "$q" --input "$tmp/in.txt" \
    >"$tmp/out.jsonl" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && [ "$(wc -l <"$tmp/out.jsonl")" -eq 4 ] &&
    grep -q '^scored 4 documents, [0-9]* tokens' "$tmp/err" &&
    grep -q '^rerank: lm_head rows of a,b (--rerank-tokens); prompt [0-9]* + [0-9]* tokens' "$tmp/err"
check "rerank: one line per non-blank document, figures on stderr" $?

# best first, each index 0..3 once
sed 's/{"index":\([0-9]*\),"relevance_score":\([^}]*\)}/\1 \2/' "$tmp/out.jsonl" >"$tmp/pairs"
awk 'NR > 1 && $2 > prev { bad = 1 } { prev = $2; seen[$1]++; if ($2 < 0 || $2 > 1) bad = 1 }
     END { for (i = 0; i < 4; i++) if (seen[i] != 1) bad = 1; exit bad }' "$tmp/pairs"
check "rerank: best first, every document once, scores in [0, 1]" $?

printf 'Zebras have stripes.\n' | "$cli" rerank --model "$model" --threads 1 --rerank-tokens a,b \
    --query "$q" --input - >"$tmp/one.jsonl" 2>/dev/null
[ "$(sed 's/.*"relevance_score":\([^}]*\)}/\1/' "$tmp/one.jsonl")" = \
  "$(awk '$1 == 2 { print $2 }' "$tmp/pairs")" ]
check "rerank: standard input; a document scores the same alone" $?

"$cli" rerank --model "$model" --threads 1 --rerank-tokens a,b --query "$q" --input "$tmp/in.txt" \
    --quiet >"$tmp/quiet" 2>"$tmp/err" && [ ! -s "$tmp/quiet" ] && grep -q '^scored 4 documents' "$tmp/err"
check "rerank --quiet prints the figures only" $?

out=$("$cli" rerank --model "$model" --query "$q" --input "$tmp/in.txt" 2>&1)
[ $? -eq 1 ] && printf '%s' "$out" | grep -q 'no relevance head.*--rerank-tokens NO,YES'
check "rerank: a model without a head is refused, saying how to give it one" $?
out=$("$cli" rerank --model "$model" --rerank-tokens no,yes,maybe --query "$q" --input "$tmp/in.txt" 2>&1)
[ $? -eq 1 ] && printf '%s' "$out" | grep -q 'one or two tokens'
check "rerank: three tokens are refused" $?
out=$("$cli" rerank --model "$model" --input "$tmp/in.txt" 2>&1)
[ $? -eq 2 ] && printf '%s' "$out" | grep -q -- '--model, --query and --input are required'
check "rerank without --query is refused" $?

# the server gives the same scores
if start rerank --model "$model" --threads 1 --rerank-tokens a,b; then
    curl -s -m 60 -H 'Content-Type: application/json' "$URL/v1/rerank" -d "{\"query\":\"$q\",
        \"documents\":[\"The giant panda eats bamboo.\",\"Paris is in France.\",
        \"Zebras have stripes.\",\"Bamboo shoots, a recipe.\"]}" >"$tmp/server.json"
    tr -d '\n' <"$tmp/server.json" | grep -o '{"index":[0-9]*,"relevance_score":[^}]*}' >"$tmp/server.jsonl"
    cmp -s "$tmp/out.jsonl" "$tmp/server.jsonl"
    check "rerank and the server's /v1/rerank give the same ranking and scores" $?

    # a client that leaves mid-request (many long documents): the server ends them, serves on
    awk 'BEGIN { printf "{\"query\":\"q\",\"documents\":["; for (i = 0; i < 300; i++) { printf "%s\"doc %d", i ? "," : "", i;
                 for (j = 0; j < 200; j++) printf " lorem ipsum"; printf "\"" } print "]}" }' >"$tmp/big.json"
    curl -s -m 0.3 -H 'Content-Type: application/json' "$URL/v1/rerank" -d @"$tmp/big.json" >/dev/null 2>&1
    out=$(curl -s -m 60 -H 'Content-Type: application/json' "$URL/v1/rerank" -d '{"query":"q","documents":["after"]}')
    printf '%s' "$out" | grep -q '"relevance_score"'
    check "rerank: a client leaving mid-request, the next one served" $?
    stop rerank
fi

#!/bin/sh
# cli_quant.sh: black-box tests of 8- and 4-bit weights (q8_0, q4_0, q4_k, q4_k_m) on the tiny-qwen2
# fixture: `llaisys-cli quantize` writes a directory (config with quantization_config, tokenizer
# copied) that generates the same greedy ids as --quant at load, and is refused as a target
# without --force;
# --quant reaches generate, score, bench, batch, bench-engine and the server (flag and
# LLAISYS_QUANT), logs its time, and rejects an unknown type; `llaisys-cli kl` gives zero
# divergence for a model against itself, the same figures for the quantized directory as for
# --quant at load, a larger error for q4_0 than q8_0, a smaller one for q4_k than q4_0 and for
# q4_k_m than q4_k;
# bad arguments fail naming the problem.
cli="${LLAISYS_CLI:-./llaisys-cli}"
model=tests/fixtures/tiny-qwen2
text=tests/fixtures/kl-text.txt
. tests/lib/harness.sh # $srv, $tmp, check, start, stop

ids="151646 9707 11 1879 25 279 3974 13876 38835"

# quantize: a directory that loads as written
for t in q8_0 q4_0 q4_k q4_k_m; do
    "$cli" quantize --model "$model" --type "$t" "$tmp/$t" 2>"$tmp/err"
    [ $? -eq 0 ] && grep -q "15 linear weights as $t" "$tmp/err" &&
        grep -q "\"quantization_config\"" "$tmp/$t/config.json" &&
        grep -q "\"format\":.*\"$t\"" "$tmp/$t/config.json" &&
        cmp -s "$model/tokenizer.json" "$tmp/$t/tokenizer.json" &&
        cmp -s "$model/tokenizer_config.json" "$tmp/$t/tokenizer_config.json" &&
        cmp -s "$model/generation_config.json" "$tmp/$t/generation_config.json"
    check "quantize $t writes config (quantization_config), weights and the tokenizer files" $?
    a=$("$cli" generate --model "$tmp/$t" --ids "$ids" --temp 0 -n 12 --print-ids 2>"$tmp/err.dir")
    b=$("$cli" generate --model "$model" --quant "$t" --ids "$ids" --temp 0 -n 12 --print-ids \
        2>"$tmp/err.load")
    [ -n "$a" ] && [ "$a" = "$b" ] && [ "$(echo "$a" | wc -w)" -eq 12 ]
    check "generate: the $t directory = --quant $t at load (greedy ids)" $?
    grep -q "quantized 15 linear weights (.*) to $t in [0-9.]* s on 2 threads" "$tmp/err.load" &&
        ! grep -q "quantized" "$tmp/err.dir"
    check "--quant $t logs the time it took; the directory needs no quantizing" $?
done
q8=$("$cli" generate --model "$model" --quant q8_0 --ids "$ids" --temp 0 -n 12 --print-ids 2>/dev/null)
q4=$("$cli" generate --model "$model" --quant q4_0 --ids "$ids" --temp 0 -n 12 --print-ids 2>/dev/null)
bf=$("$cli" generate --model "$model" --ids "$ids" --temp 0 -n 12 --print-ids 2>/dev/null)
qk=$("$cli" generate --model "$model" --quant q4_k --ids "$ids" --temp 0 -n 12 --print-ids 2>/dev/null)
[ "$q8" != "$q4" ] && [ "$bf" != "$q4" ] && [ -n "$qk" ] && [ "$qk" != "$q4" ]
check "q4_0 weights change the greedy continuation (q8_0 $( [ "$q8" = "$bf" ] && echo keeps || echo changes) it, q4_k $( [ "$qk" = "$bf" ] && echo keeps || echo changes) it)" $?

"$cli" quantize --model "$model" --type q4_0 "$tmp/q4_0" 2>"$tmp/err"
[ $? -ne 0 ] && grep -q "already exists" "$tmp/err"
check "quantize refuses an existing OUT_DIR" $?
"$cli" quantize --model "$model" --type q4_0 --force "$tmp/q4_0" 2>"$tmp/err"
check "quantize --force replaces a directory it wrote" $?
"$cli" quantize --model "$model" --type q5_0 "$tmp/q5" 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "type: must be q8_0, q4_0, q4_k or q4_k_m (got 'q5_0')" "$tmp/err"
check "quantize rejects an unknown --type" $?
"$cli" quantize --model "$tmp/q8_0" --type q4_0 "$tmp/q8q4" 2>"$tmp/err"
[ $? -ne 0 ] && grep -q "stored quantized as q8_0" "$tmp/err" && [ ! -e "$tmp/q8q4" ]
check "quantize refuses to quantize quantized weights again" $?
"$cli" quantize --model "$tmp/q4_k" --type q4_0 "$tmp/qkq4" 2>"$tmp/err"
[ $? -ne 0 ] && grep -q "stored quantized as q4_k" "$tmp/err" && [ ! -e "$tmp/qkq4" ]
check "quantize refuses to quantize q4_k weights to q4_0" $?
"$cli" generate --model "$model" --quant q5 --ids "$ids" -n 2 2>"$tmp/err"
[ $? -eq 2 ] && grep -q -- "--quant: must be one of none, q8_0, q4_0, q4_k, q4_k_m, bf16p (got 'q5')" "$tmp/err"
check "generate rejects an unknown --quant" $?

# --quant on the other commands
"$cli" score --model "$model" --ids "$ids" --top 2 --quant q4_0 >"$tmp/score" 2>/dev/null
[ $? -eq 0 ] && [ "$(wc -l <"$tmp/score")" -eq 9 ]
check "score --quant q4_0" $?
"$cli" bench --model "$model" --pp 16 --tg 4 --reps 1 --quant q8_0 >"$tmp/bench" 2>/dev/null
[ $? -eq 0 ] && grep -q "q8_0 (quantized at load in [0-9.]* s; BF16 embedding) weights" "$tmp/bench" &&
    grep -q "open + quantize + runtime" "$tmp/bench" && grep -q "^| tg4 " "$tmp/bench"
check "bench --quant q8_0 reports the weights and the load with quantizing" $?
"$cli" bench --model "$tmp/q4_0" --pp 16 --tg 4 --reps 1 >"$tmp/bench" 2>/dev/null
[ $? -eq 0 ] && grep -q "q4_0 (stored; BF16 embedding) weights" "$tmp/bench"
check "bench on a q4_0 directory" $?
"$cli" bench --model "$model" --pp 16 --tg 4 --reps 1 --quant q4_k >"$tmp/bench" 2>/dev/null
[ $? -eq 0 ] && grep -q "q4_k (quantized at load in [0-9.]* s; BF16 embedding) weights" "$tmp/bench"
check "bench --quant q4_k" $?
jids=$(echo "$ids" | tr ' ' ',')
echo "{\"prompt\":[$jids],\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true}" >"$tmp/in.jsonl"
"$cli" batch --model "$model" --quant q4_0 --input "$tmp/in.jsonl" >"$tmp/batch" 2>/dev/null
[ $? -eq 0 ] && grep -q "\"token_ids\":\[$(echo "$q4" | tr ' ' ',')\]" "$tmp/batch"
check "batch --quant q4_0 = generate --quant q4_0" $?
"$cli" bench-engine --model "$tmp/q8_0" --streams 2 --prompt 8 --gen 4 --long 0 \
    >"$tmp/be" 2>/dev/null
[ $? -eq 0 ] && grep -q "q8_0 (stored" "$tmp/be" && grep -Eq "kernels: matmul (amx|avx512vnni|avxvnni|avx2|scalar)" "$tmp/be"
check "bench-engine on a q8_0 directory" $?

# the server: --quant and LLAISYS_QUANT, and a completion equal to generate's
if command -v curl >/dev/null && command -v jq >/dev/null; then
    if start quant --model "$model" --quant q4_0 --threads 1; then
        body="{\"prompt\":[$jids],\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true}"
        curl -s -m 30 -H 'Content-Type: application/json' -d "$body" "$URL/v1/completions" \
            >"$tmp/srv.json"
        want=$("$cli" generate --model "$model" --quant q4_0 --ids "$ids" --temp 0 -n 12 2>/dev/null)
        [ "$(jq -r '.choices[0].text' "$tmp/srv.json")" = "$want" ]
        check "server --quant q4_0: a greedy completion = generate --quant q4_0" $?
        grep -q "quant: q4_0" "$tmp/quant.out" "$tmp/quant.err"
        check "server prints quant: q4_0 among its options" $?
        stop quant
    fi
    LLAISYS_QUANT=q8_0 "$srv" --model "$model" --port 0 --quant q3 >"$tmp/bad.out" 2>"$tmp/bad.err"
    [ $? -ne 0 ] && grep -q -- "--quant: must be one of none, q8_0, q4_0, q4_k, q4_k_m, bf16p (got 'q3')" "$tmp/bad.err"
    check "server rejects an unknown --quant" $?
    LLAISYS_QUANT=q7 "$srv" --model "$model" --port 0 >"$tmp/bad.out" 2>"$tmp/bad.err"
    [ $? -ne 0 ] && grep -q "LLAISYS_QUANT: must be one of none, q8_0, q4_0, q4_k, q4_k_m, bf16p (got 'q7')" "$tmp/bad.err"
    check "server rejects an unknown LLAISYS_QUANT" $?
fi

# kl: llama-perplexity's protocol on the tiny model, 64-token chunks
kl_field() { sed -n "s/^$2: *\([0-9.]*\).*/\1/p" "$1"; }
"$cli" kl --model "$model" --model-q "$model" --input "$text" --ctx 64 --chunks 6 >"$tmp/self" 2>/dev/null
[ $? -eq 0 ] && grep -q "6 chunks of 64, scored on positions 32..62 of each (186 positions)" "$tmp/self" &&
    [ "$(kl_field "$tmp/self" "mean KL divergence")" = "0.000000" ] &&
    [ "$(kl_field "$tmp/self" "p99 KL divergence")" = "0.000000" ] &&
    [ "$(kl_field "$tmp/self" "same top-1")" = "100.00" ]
check "kl: a model against itself: KL 0, top-1 100 %" $?
# bf16p is lossless: the same next-token distributions, bit for bit, as the bf16 weights
"$cli" kl --model "$model" --quant bf16p --input "$text" --ctx 64 --chunks 6 >"$tmp/kl-bf16p" 2>"$tmp/err"
[ $? -eq 0 ] && [ "$(tail -n 5 "$tmp/kl-bf16p")" = "$(tail -n 5 "$tmp/self")" ] &&
    { grep -q "packed 15 bf16 linear weights" "$tmp/err" || grep -q "bf16p: .*the weights stay as stored" "$tmp/err"; }
check "kl --quant bf16p: KL 0, top-1 100 % (packed, or the reason it is not)" $?
"$cli" quantize --model "$model" --type bf16p "$tmp/bf16p" 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "must be q8_0, q4_0, q4_k or q4_k_m (got 'bf16p')" "$tmp/err"
check "quantize refuses bf16p (a packing at load, not a file format)" $?
for t in q8_0 q4_0 q4_k q4_k_m; do
    "$cli" kl --model "$model" --quant "$t" --input "$text" --ctx 64 --chunks 6 >"$tmp/kl-load-$t" 2>/dev/null &&
        "$cli" kl --model "$model" --model-q "$tmp/$t" --input "$text" --ctx 64 --chunks 6 \
            >"$tmp/kl-dir-$t" 2>/dev/null &&
        [ "$(tail -n 5 "$tmp/kl-load-$t")" = "$(tail -n 5 "$tmp/kl-dir-$t")" ]
    check "kl --quant $t = kl --model-q (the $t directory)" $?
done
k8=$(kl_field "$tmp/kl-load-q8_0" "mean KL divergence")
k4=$(kl_field "$tmp/kl-load-q4_0" "mean KL divergence")
t8=$(kl_field "$tmp/kl-load-q8_0" "same top-1")
t4=$(kl_field "$tmp/kl-load-q4_0" "same top-1")
awk -v a="$k8" -v b="$k4" -v c="$t8" -v d="$t4" \
    'BEGIN { exit !(a > 0 && a < 0.2 && b > 10 * a && c > 85 && d < c) }'
check "kl: q8_0 error small (KL $k8, top-1 $t8 %), q4_0 larger (KL $k4, top-1 $t4 %)" $?
kk=$(kl_field "$tmp/kl-load-q4_k" "mean KL divergence")
awk -v a="$k8" -v b="$k4" -v k="$kk" 'BEGIN { exit !(k > a && k < 0.9 * b) }'
check "kl: q4_k error between q8_0's and q4_0's (KL $kk)" $?
km=$(kl_field "$tmp/kl-load-q4_k_m" "mean KL divergence")
awk -v a="$k8" -v k="$kk" -v m="$km" 'BEGIN { exit !(m > a && m < 0.9 * k) }'
check "kl: q4_k_m error between q8_0's and q4_k's (KL $km)" $?
"$cli" kl --model "$model" --input "$text" >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "give one of --quant T" "$tmp/err"
check "kl needs --quant or --model-q" $?
printf 'too short' >"$tmp/short.txt"
"$cli" kl --model "$model" --quant q8_0 --input "$tmp/short.txt" >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "fewer than one chunk of 512" "$tmp/err"
check "kl refuses a text shorter than one chunk" $?

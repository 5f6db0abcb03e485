#!/bin/sh
# cli_mistral.sh: a Mistral model end to end with the real Mistral-Nemo tokenizer and chat
# template (models/mistral-nemo-tokenizer) on a random tiny Mistral made by mkmodel: its
# config.json as Mistral-Nemo publishes it (MistralForCausalLM, head_dim, sliding_window null,
# BOS <s> 1, EOS </s> 2, no sampling defaults); the template's [INST]
# turns; greedy generation the same twice and the same from a quantized directory as from
# --quant at load; a sliding window shorter than the context is every layer's window (the
# positions inside it score as full attention, later ones do not); Mistral-7B v0.1's shapes
# (small) with its SentencePiece-style tokenizer
# (models/llama2-tokenizer); the server streams an answer equal to the non-streamed one, and
# exits 0 on SIGTERM. (Its tool calls: tests/cli_mistral_tools.sh.)
cli="${LLAISYS_CLI:-./llaisys-cli}"
tok=models/mistral-nemo-tokenizer
. tests/lib/harness.sh # $srv, $tmp, $pids, check, start, stop

for tool in curl jq; do
    command -v "$tool" >/dev/null || { echo "not ok mistral tests need $tool"; exit 0; }
done
m="$tmp/mis"
"$cli" mkmodel --preset tiny --family mistral --head-dim 32 --vocab 131072 --seed 3 \
    --tokenizer "$tok" "$m" 2>"$tmp/mk.err"
check "mkmodel --family mistral with the Mistral-Nemo tokenizer" $?
jq -e '.architectures == ["MistralForCausalLM"] and .model_type == "mistral" and
        .head_dim == 32 and .sliding_window == null and .bos_token_id == 1 and
        .eos_token_id == 2 and (has("attention_bias") | not)' "$m/config.json" >/dev/null &&
    jq -e '. == {"_from_model_config": true, "bos_token_id": 1, "eos_token_id": 2}' \
        "$m/generation_config.json" >/dev/null &&
    grep -q '"model.layers.1.self_attn.q_proj.weight":{"dtype":"BF16","shape":\[128,64\]' \
        "$m/model.safetensors" &&
    ! grep -q 'q_proj.bias' "$m/model.safetensors" && ! grep -q 'q_norm' "$m/model.safetensors"
check "mistral config.json (bos <s>, eos </s>, head_dim), no sampling defaults, no biases" $?


printf '{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello!"},{"role":"user","content":"Sum?"}],"add_generation_prompt":true}' |
    "$cli" template --model "$m" >"$tmp/render.txt" 2>/dev/null &&
    [ "$(cat "$tmp/render.txt")" = "<s>[INST]Hi[/INST]Hello!</s>[INST]Be brief.

Sum?[/INST]" ]
check "the Mistral-Nemo template: [INST] turns, the system prompt in the last user turn" $?
printf '[INST]Hi[/INST]' | "$cli" tokenize --model "$m" >"$tmp/ids.txt" 2>/dev/null &&
    [ "$(cat "$tmp/ids.txt")" = "1 3 37133 4" ]
check "the tekken tokenizer: BOS, [INST] and [/INST] as control tokens, 'Hi' one token" $?

g1=$("$cli" generate --model "$m" --chat "Hello there" -n 12 --temp 0 2>/dev/null)
g2=$("$cli" generate --model "$m" --chat "Hello there" -n 12 --temp 0 2>/dev/null)
[ -n "$g1" ] && [ "$g1" = "$g2" ]
check "mistral greedy generation is the same twice" $?

"$cli" quantize --model "$m" --type q4_k_m "$tmp/misq" 2>/dev/null &&
    gq=$("$cli" generate --model "$tmp/misq" --chat "Hello there" -n 12 --temp 0 2>/dev/null) &&
    gl=$("$cli" generate --model "$m" --quant q4_k_m --chat "Hello there" -n 12 --temp 0 \
        2>/dev/null) &&
    [ -n "$gq" ] && [ "$gq" = "$gl" ]
check "mistral quantized directory generates as --quant at load (q4_k_m)" $?

# a window shorter than max_position_embeddings (4096): every layer's; a context past it is
# served, and the positions inside the window score as without one, those past it do not
cp -r "$m" "$tmp/win"
jq '.sliding_window = 8' "$m/config.json" >"$tmp/win/config.json"
ids=$(seq 100 140 | tr '\n' ' ')
"$cli" score --model "$m" --exact --ids "$ids" --top 3 >"$tmp/full.sc" 2>/dev/null &&
    "$cli" score --model "$tmp/win" --exact --ids "$ids" --top 3 >"$tmp/win.sc" 2>/dev/null &&
    [ "$(wc -l <"$tmp/win.sc")" -eq 41 ] &&
    [ "$(head -8 "$tmp/win.sc")" = "$(head -8 "$tmp/full.sc")" ] &&
    [ "$(paste -d '|' "$tmp/win.sc" "$tmp/full.sc" | tail -n +9 | awk -F'|' '$1 != $2' |
        wc -l)" -ge 16 ] &&
    "$cli" generate --model "$tmp/win" --prompt "Hello" -n 4 --temp 0 --ctx 65 >/dev/null 2>&1
check "mistral: a sliding window of 8: the first 8 positions as full attention, later ones not" $?
"$cli" bench --model "$tmp/win" --pp 16 --tg 4 --reps 1 >"$tmp/win.out" 2>&1 &&
    grep -q 'sliding window 8 in every layer' "$tmp/win.out"
check "mistral: bench states the window" $?
rm -rf "$tmp/win"

# Mistral-7B v0.1's shapes (small) with its SentencePiece-style tokenizer: byte fallback, a
# sliding window of 4096
m7="$tmp/m7"
"$cli" mkmodel --preset mistral-7b --hidden 64 --layers 2 --heads 4 --kv-heads 2 \
    --intermediate 128 --tokenizer models/llama2-tokenizer "$m7" 2>/dev/null &&
    jq -e '.sliding_window == 4096 and .vocab_size == 32000 and .bos_token_id == 1 and
        .eos_token_id == 2' "$m7/config.json" >/dev/null &&
    [ "$(printf 'Hello world 😀 𝄞' | "$cli" tokenize --model "$m7" 2>/dev/null)" = \
      "1 22557 1526 28705 30575 28705 243 160 135 161" ] && # 𝄞 as its four bytes
    g1=$("$cli" generate --model "$m7" --prompt "Hello world" -n 8 --temp 0 2>/dev/null) &&
    g2=$("$cli" generate --model "$m7" --prompt "Hello world" -n 8 --temp 0 2>/dev/null) &&
    [ -n "$g1" ] && [ "$g1" = "$g2" ] &&
    "$cli" bench --model "$m7" --pp 16 --tg 4 --reps 1 2>&1 |
    grep -q 'sliding window 4096 in every layer'
check "mistral-7b preset with Mistral-7B's SentencePiece tokenizer: byte fallback, greedy twice, the window" $?

start mis --model "$m" --threads 1 || exit 1

body='"messages":[{"role":"user","content":"What is 12345 + 678?"}],"max_tokens":8,"temperature":0'
on=$(chat "{$body}")
[ "$(printf '%s' "$on" | jq -r .choices[0].finish_reason)" = length ] &&
    stream_matches "$body" "$on"
check "mistral stream: the same text as the non-streamed answer, then [DONE]" $?

stop mis

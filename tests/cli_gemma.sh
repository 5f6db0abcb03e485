#!/bin/sh
# cli_gemma.sh: a Gemma 3 model end to end with the real Gemma 3 tokenizer and chat template
# (models/gemma3-tokenizer) on a random small Gemma 3 made by mkmodel: its config.json as
# google/gemma-3-1b publishes it (Gemma3ForCausalLM, gemma3_text, gelu_pytorch_tanh,
# query_pre_attn_scalar, sliding_window with sliding_window_pattern 6, rope_local_base_freq,
# eos [<eos>, <end_of_turn>]); the template's <start_of_turn> turns, the system prompt in the
# first user turn, roles that do not alternate refused with a 400 naming the template; the
# SentencePiece-style tokenizer; greedy generation the same twice, and the same from a quantized
# directory as from --quant at load; a prompt longer than the window; the server streams an
# answer equal to the non-streamed one, and exits 0 on SIGTERM.
cli="${LLAISYS_CLI:-./llaisys-cli}"
tok=models/gemma3-tokenizer
. tests/lib/harness.sh # $srv, $tmp, $pids, check, start, stop

for tool in curl jq; do
    command -v "$tool" >/dev/null || { echo "not ok gemma tests need $tool"; exit 0; }
done
m="$tmp/g3"
"$cli" mkmodel --preset gemma3-1b --hidden 64 --layers 6 --heads 4 --kv-heads 1 --head-dim 32 \
    --intermediate 128 --window 16 --seed 3 --tokenizer "$tok" "$m" 2>"$tmp/mk.err"
check "mkmodel --preset gemma3-1b (small) with the Gemma 3 tokenizer" $?
jq -e '.architectures == ["Gemma3ForCausalLM"] and .model_type == "gemma3_text" and
        .hidden_activation == "gelu_pytorch_tanh" and .query_pre_attn_scalar == 32 and
        .sliding_window == 16 and .sliding_window_pattern == 6 and
        .rope_local_base_freq == 10000.0 and .rope_theta == 1000000.0 and
        .bos_token_id == 2 and .eos_token_id == [1, 106] and .tie_word_embeddings and
        .final_logit_softcapping == null and (has("hidden_act") | not)' "$m/config.json" \
    >/dev/null &&
    jq -e '.top_k == 64 and .top_p == 0.95 and .eos_token_id == [1, 106] and
        (has("temperature") | not)' "$m/generation_config.json" >/dev/null &&
    grep -q '"model.layers.5.post_feedforward_layernorm.weight"' "$m/model.safetensors" &&
    grep -q '"model.layers.0.self_attn.q_norm.weight"' "$m/model.safetensors" &&
    ! grep -q 'lm_head' "$m/model.safetensors"
check "gemma3 config.json and generation_config.json as published, four norms, tied" $?

printf '{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello!"},{"role":"user","content":"Sum?"}],"add_generation_prompt":true}' |
    "$cli" template --model "$m" >"$tmp/render.txt" 2>/dev/null &&
    printf '<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n<start_of_turn>user\nSum?<end_of_turn>\n<start_of_turn>model\n' |
    cmp -s - "$tmp/render.txt"
check "the Gemma 3 template: <start_of_turn> turns, the system prompt in the first user turn" $?
printf '<start_of_turn>user\nHello world<end_of_turn>' | "$cli" tokenize --model "$m" \
    >"$tmp/ids.txt" 2>/dev/null &&
    [ "$(cat "$tmp/ids.txt")" = "2 105 2364 107 9259 1902 106" ]
check "the Gemma 3 tokenizer: <bos>, turn markers as one token each, words with their space" $?

g1=$("$cli" generate --model "$m" --chat "Hello there" -n 12 --temp 0 2>/dev/null)
g2=$("$cli" generate --model "$m" --chat "Hello there" -n 12 --temp 0 2>/dev/null)
[ -n "$g1" ] && [ "$g1" = "$g2" ]
check "gemma3 greedy generation is the same twice" $?

"$cli" quantize --model "$m" --type q8_0 "$tmp/g3q" 2>/dev/null &&
    gq=$("$cli" generate --model "$tmp/g3q" --chat "Hello there" -n 12 --temp 0 2>/dev/null) &&
    gl=$("$cli" generate --model "$m" --quant q8_0 --chat "Hello there" -n 12 --temp 0 \
        2>/dev/null) &&
    [ -n "$gq" ] && [ "$gq" = "$gl" ]
check "gemma3 quantized directory generates as --quant at load (q8_0)" $?

"$cli" bench --model "$m" --pp 64 --tg 4 --reps 1 >"$tmp/bench.out" 2>&1 &&
    grep -q 'sliding window 16 in 5 of the layers' "$tmp/bench.out"
check "gemma3: bench runs a 64-token prompt past the window of 16 and names the windowed layers" $?

start g3 --model "$m" --threads 1 || exit 1

body='"messages":[{"role":"user","content":"What is 12345 + 678?"}],"max_tokens":8,"temperature":0'
on=$(chat "{$body}")
[ "$(printf '%s' "$on" | jq -r .usage.prompt_tokens)" = 23 ] && # digits one a token
    stream_matches "$body" "$on"
check "gemma3 stream: the same text as the non-streamed answer, then [DONE]" $?

bad=$(curl -s -m 30 -w '\n%{http_code}' -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}],"max_tokens":2}' \
    "$URL/v1/chat/completions")
[ "$(printf '%s' "$bad" | tail -1)" = 400 ] &&
    printf '%s' "$bad" | head -1 | jq -e '.error.code == "chat_template_error" and
        (.error.message | test("roles must alternate"))' >/dev/null &&
    [ "$(printf '%s' "$(chat "{$body}")" | jq -r .choices[0].message.content)" = \
      "$(printf '%s' "$on" | jq -r .choices[0].message.content)" ]
check "gemma3: roles that do not alternate are a 400 naming the template's error; serving goes on" $?

stop g3

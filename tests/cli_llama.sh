#!/bin/sh
# cli_llama.sh: a Llama 3 model end to end with the real Llama 3.2 tokenizer and chat template
# (models/llama3-tokenizer) on a random tiny Llama made by mkmodel: its config.json and tensors
# as Llama 3.x publishes them (no biases, BOS <|begin_of_text|>, EOS <|eot_id|>, rope_scaling
# "llama3" in the presets); the chat template's dated header comes from strftime_now (today);
# greedy generation is the same twice and the same from a quantized directory as from --quant
# at load; the server serves it with the llama3_json tool format its template asks for (a
# required call, grammar-constrained, parsed into tool_calls, streamed as tool_call deltas),
# a streamed answer equal to the non-streamed one, and SIGTERM exit 0.
cli="${LLAISYS_CLI:-./llaisys-cli}"
tok=models/llama3-tokenizer
. tests/lib/harness.sh # $srv, $tmp, $pids, check, start, stop

for tool in curl jq; do
    command -v "$tool" >/dev/null || { echo "not ok llama tests need $tool"; exit 0; }
done
m="$tmp/l3"
"$cli" mkmodel --preset tiny --family llama --vocab 128256 --seed 3 --tokenizer "$tok" "$m" \
    2>"$tmp/mk.err"
check "mkmodel --family llama with the Llama 3.2 tokenizer" $?
grep -q '"LlamaForCausalLM"' "$m/config.json" &&
    grep -q '"model_type": "llama",' "$m/config.json" &&
    grep -q '"attention_bias": false,' "$m/config.json" &&
    grep -q '"mlp_bias": false,' "$m/config.json" &&
    grep -q '"bos_token_id": 128000,' "$m/config.json" &&
    grep -q '"eos_token_id": 128009,' "$m/config.json" &&
    grep -q '"rope_scaling": null,' "$m/config.json" &&
    grep -q '"top_p": 0.9' "$m/generation_config.json" &&
    grep -q '"model.layers.1.self_attn.q_proj.weight"' "$m/model.safetensors" &&
    ! grep -q 'q_proj.bias' "$m/model.safetensors" && ! grep -q 'q_norm' "$m/model.safetensors"
check "llama config.json (bos <|begin_of_text|>, eos <|eot_id|>), generation defaults, no biases" $?

"$cli" mkmodel --preset llama3.2-1b --layers 1 --tokenizer "$tok" "$tmp/p1b" 2>/dev/null &&
    grep -q '"hidden_size": 2048,' "$tmp/p1b/config.json" &&
    grep -q '"head_dim": 64,' "$tmp/p1b/config.json" &&
    grep -q '"num_key_value_heads": 8,' "$tmp/p1b/config.json" &&
    grep -q '"rope_theta": 500000.0,' "$tmp/p1b/config.json" &&
    grep -q '"rms_norm_eps": 1e-05,' "$tmp/p1b/config.json" &&
    grep -q '"tie_word_embeddings": true,' "$tmp/p1b/config.json" &&
    jq -e '.rope_scaling == {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192, "rope_type": "llama3"}' "$tmp/p1b/config.json" \
        >/dev/null
check "mkmodel --preset llama3.2-1b has Llama-3.2-1B's shapes and rope_scaling" $?
rm -rf "$tmp/p1b"
"$cli" mkmodel --preset tiny --rope-factor 8 --rope-original-max 64 --tokenizer "$tok" \
    "$tmp/bad" 2>"$tmp/bad.err"
[ $? -ne 0 ] && grep -q 'rope scaling ("llama3") is for llama models only' "$tmp/bad.err" &&
    [ ! -e "$tmp/bad" ]
check "mkmodel: rope scaling on a qwen2 model is refused" $?

today=$(date +'%d %b %Y')
printf '{"messages":[{"role":"user","content":"Hi"}],"add_generation_prompt":true}' |
    "$cli" template --model "$m" >"$tmp/render.txt" 2>/dev/null &&
    grep -q "^Today Date: $today\$" "$tmp/render.txt" &&
    head -c 17 "$tmp/render.txt" | grep -q '^<|begin_of_text|>$'
check "the Llama 3.2 template's header is dated today by strftime_now ($today)" $?

g1=$("$cli" generate --model "$m" --chat "Hello there" -n 12 --temp 0 2>/dev/null)
g2=$("$cli" generate --model "$m" --chat "Hello there" -n 12 --temp 0 2>/dev/null)
[ -n "$g1" ] && [ "$g1" = "$g2" ]
check "llama greedy generation is the same twice" $?

"$cli" quantize --model "$m" --type q4_0 "$tmp/l3q" 2>/dev/null &&
    gq=$("$cli" generate --model "$tmp/l3q" --chat "Hello there" -n 12 --temp 0 2>/dev/null) &&
    gl=$("$cli" generate --model "$m" --quant q4_0 --chat "Hello there" -n 12 --temp 0 \
        2>/dev/null) &&
    [ -n "$gq" ] && [ "$gq" = "$gl" ]
check "llama quantized directory generates as --quant at load (q4_0)" $?

start l3 --model "$m" --threads 1 || exit 1
grep -q 'tool-parser: auto: llama3_json (the chat template writes Llama 3 calls); tools rendered by the chat template' "$tmp/l3.err"
check "llama server: the tool format is llama3_json, from its template" $?

body='"messages":[{"role":"user","content":"What is 12345 + 678?"}],"max_tokens":8,"temperature":0'
on=$(chat "{$body}")
[ "$(printf '%s' "$on" | jq -r .choices[0].finish_reason)" = length ] &&
    stream_matches "$body" "$on"
check "llama stream: the same text as the non-streamed answer, then [DONE]" $?

tools='"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]'
tc=$(chat "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}],\"max_tokens\":60,\"temperature\":0,\"tool_choice\":\"required\",$tools}")
[ "$(printf '%s' "$tc" | jq -r '.choices[0] | .finish_reason + " " + .message.tool_calls[0].function.name')" = "tool_calls get_weather" ] &&
    printf '%s' "$tc" | jq -e '.choices[0].message.tool_calls[0].function.arguments | fromjson | .city | type == "string"' >/dev/null &&
    [ "$(printf '%s' "$tc" | jq -r '.choices[0].message.content')" = null ]
check "llama tool calls: a required call in llama3_json, parsed into tool_calls" $?
ts=$(curl -s -N -m 60 -H 'Content-Type: application/json' -d "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}],\"max_tokens\":60,\"temperature\":0,\"tool_choice\":\"required\",\"stream\":true,$tools}" "$URL/v1/chat/completions")
args=$(printf '%s\n' "$ts" | sed -n 's/^data: //p' | grep -v '^\[DONE\]$' |
    jq -j '.choices[0].delta.tool_calls[0].function.arguments // ""')
[ "$args" = "$(printf '%s' "$tc" | jq -j '.choices[0].message.tool_calls[0].function.arguments')" ] &&
    printf '%s\n' "$ts" | sed -n 's/^data: //p' | grep -v '^\[DONE\]$' |
    jq -e 'select(.choices[0].finish_reason != null) | .choices[0].finish_reason == "tool_calls"' >/dev/null
check "llama tool calls streamed: the deltas add up to the same arguments" $?
# the history of a tool round goes back through the template (the call as JSON, the result as
# an ipython turn)
hist=$(chat "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"sunny\"}],\"max_tokens\":4,\"temperature\":0,$tools}")
[ "$(printf '%s' "$hist" | jq -r '.choices[0].finish_reason')" = length ]
check "llama tool round in the history renders and runs" $?
stop l3

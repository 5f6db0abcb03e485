#!/bin/sh
# cli_qwen3.sh: a Qwen3 model end to end with the real Qwen3 tokenizer and chat template
# (models/qwen3-tokenizer) on a random tiny Qwen3 made by mkmodel: its config.json and tensors
# as Qwen3 publishes them (per-head q/k norms, no biases, no BOS); greedy generation is the same
# twice, and the same from a directory written by `llaisys-cli quantize` as from --quant at
# load; the server serves it, with the reasoning split on (the tokenizer has <think>), the
# template's enable_thinking set through chat_template_kwargs (its empty think block is 4 more
# prompt tokens), a streamed answer equal to the non-streamed one, tool calls in the hermes
# format its template writes (a required call, grammar-constrained, parsed into tool_calls), a
# JSON schema applied after a reasoning the model opens itself, and SIGTERM exit 0.
cli="${LLAISYS_CLI:-./llaisys-cli}"
tok=models/qwen3-tokenizer
. tests/lib/harness.sh # $srv, $tmp, $pids, check, start, stop

for tool in curl jq; do
    command -v "$tool" >/dev/null || { echo "not ok qwen3 tests need $tool"; exit 0; }
done
m="$tmp/q3"
"$cli" mkmodel --preset tiny --family qwen3 --head-dim 32 --seed 5 --tokenizer "$tok" "$m" \
    2>"$tmp/mk.err"
check "mkmodel --family qwen3 with the Qwen3 tokenizer" $?
grep -q '"Qwen3ForCausalLM"' "$m/config.json" &&
    grep -q '"model_type": "qwen3",' "$m/config.json" &&
    grep -q '"attention_bias": false,' "$m/config.json" &&
    grep -q '"head_dim": 32,' "$m/config.json" &&
    grep -q '"eos_token_id": 151645,' "$m/config.json" &&
    ! grep -q bos_token_id "$m/config.json" &&
    grep -q '"top_k": 20,' "$m/generation_config.json" &&
    grep -q '"model.layers.1.self_attn.q_norm.weight"' "$m/model.safetensors" &&
    grep -q '"model.layers.0.self_attn.k_norm.weight"' "$m/model.safetensors" &&
    ! grep -q 'q_proj.bias' "$m/model.safetensors"
check "qwen3 config.json (no bos, eos <|im_end|>), generation defaults, q/k norms and no biases" $?

"$cli" mkmodel --preset tiny --family phimoe --tokenizer "$tok" "$tmp/bad" 2>"$tmp/bad.err"
[ $? -eq 2 ] && grep -q -- '--family must be qwen2, qwen3, llama, .*, granite or granitemoe' \
    "$tmp/bad.err" && [ ! -e "$tmp/bad" ]
check "mkmodel --family phimoe is refused, naming the choices" $?
"$cli" mkmodel --preset qwen3-0.6b --layers 1 --tokenizer "$tok" "$tmp/p06" 2>/dev/null &&
    grep -q '"hidden_size": 1024,' "$tmp/p06/config.json" &&
    grep -q '"head_dim": 128,' "$tmp/p06/config.json" &&
    grep -q '"num_key_value_heads": 8,' "$tmp/p06/config.json" &&
    grep -q '"rope_theta": 1000000.0,' "$tmp/p06/config.json" &&
    grep -q '"max_position_embeddings": 40960,' "$tmp/p06/config.json"
check "mkmodel --preset qwen3-0.6b has Qwen3-0.6B's shapes" $?
rm -rf "$tmp/p06"

g1=$("$cli" generate --model "$m" --chat "Hello there" -n 12 --temp 0 2>/dev/null)
g2=$("$cli" generate --model "$m" --chat "Hello there" -n 12 --temp 0 2>/dev/null)
[ -n "$g1" ] && [ "$g1" = "$g2" ]
check "qwen3 greedy generation is the same twice" $?

"$cli" quantize --model "$m" --type q4_k_m "$tmp/q3q" 2>/dev/null &&
    gq=$("$cli" generate --model "$tmp/q3q" --chat "Hello there" -n 12 --temp 0 2>/dev/null) &&
    gl=$("$cli" generate --model "$m" --quant q4_k_m --chat "Hello there" -n 12 --temp 0 \
        2>/dev/null) &&
    [ -n "$gq" ] && [ "$gq" = "$gl" ] && grep -q q_norm "$tmp/q3q/model.safetensors"
check "qwen3 quantized directory generates as --quant at load (q4_k_m)" $?

"$srv" --model "$m" --port 0 --reasoning-parser qwen4 >/dev/null 2>"$tmp/rp.err"
[ $? -ne 0 ] && grep -q -- "--reasoning-parser: must be deepseek_r1, qwen3 or none (got 'qwen4')" "$tmp/rp.err"
check "--reasoning-parser qwen4 is refused, naming the choices" $?
start q3named --model "$m" --threads 1 --reasoning-parser qwen3 &&
    grep -q 'reasoning-parser: qwen3 (--reasoning-parser)' "$tmp/q3named.err"
check "--reasoning-parser qwen3 (vLLM's name) is accepted" $?
kill -TERM "$PID"; wait "$PID"

start q3 --model "$m" --threads 1 || exit 1
grep -q 'reasoning-parser: auto: deepseek_r1 (the tokenizer has <think> and </think>)' \
    "$tmp/q3.err"
check "qwen3 server: the reasoning split is on" $?

body='"messages":[{"role":"user","content":"Hello there"}],"max_tokens":8,"temperature":0'
on=$(chat "{$body}")
off=$(chat "{$body,\"chat_template_kwargs\":{\"enable_thinking\":false}}")
[ "$(printf '%s' "$off" | jq .usage.prompt_tokens)" -eq \
    $(($(printf '%s' "$on" | jq .usage.prompt_tokens) + 4)) ] &&
    [ "$(printf '%s' "$on" | jq -r .choices[0].finish_reason)" = length ]
check "qwen3 enable_thinking false adds the empty think block ($(printf '%s' "$on" | jq .usage.prompt_tokens) / $(printf '%s' "$off" | jq .usage.prompt_tokens) prompt tokens)" $?

stream_matches "$body" "$on"
check "qwen3 stream: the same text as the non-streamed answer, then [DONE]" $?
grep -q 'tool-parser: auto: hermes (the chat template writes <tool_call>); tools rendered by the chat template' "$tmp/q3.err" &&
    tc=$(chat '{"messages":[{"role":"user","content":"Weather in Paris?"}],"max_tokens":60,"temperature":0,"tool_choice":"required","tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}],"chat_template_kwargs":{"enable_thinking":false}}') &&
    [ "$(printf '%s' "$tc" | jq -r '.choices[0] | .finish_reason + " " + .message.tool_calls[0].function.name')" = "tool_calls get_weather" ] &&
    printf '%s' "$tc" | jq -e '.choices[0].message.tool_calls[0].function.arguments | fromjson | .city | type == "string"' >/dev/null
check "qwen3 tool calls: hermes from its template, a required call parsed into tool_calls" $?
# structured output with thinking on: the model may open <think> itself (pushed to here by a
# logit bias on its id), and the schema then applies after the reasoning, not from the start
schema='"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"],"additionalProperties":false}}}'
js=$(chat "{\"messages\":[{\"role\":\"user\",\"content\":\"Give JSON\"}],\"max_tokens\":40,\"temperature\":0,\"logit_bias\":{\"151667\":100},$schema}")
plain=$(chat "{\"messages\":[{\"role\":\"user\",\"content\":\"Give JSON\"}],\"max_tokens\":40,\"temperature\":0,$schema}")
[ "$(printf '%s' "$js" | jq -r '.choices[0].finish_reason')" = stop ] &&
    [ "$(printf '%s' "$js" | jq '.usage.completion_tokens_details.reasoning_tokens')" -gt 0 ] &&
    printf '%s' "$js" | jq -e '.choices[0].message.content | fromjson | .ok | type == "boolean"' >/dev/null &&
    printf '%s' "$plain" | jq -e '.choices[0].message.content | fromjson | .ok | type == "boolean"' >/dev/null
check "qwen3 json_schema after a reasoning the model opens ($(printf '%s' "$js" | jq '.usage.completion_tokens_details.reasoning_tokens') reasoning tokens), and without one" $?
stop q3

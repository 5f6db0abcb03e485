#!/bin/sh
# cli_moe.sh: the mixture-of-experts families end to end on random tiny models made by mkmodel
# with the real tokenizers: a Qwen3-MoE (models/qwen3-tokenizer) and a Qwen2-MoE
# (models/deepseek-r1-distill-qwen-tokenizer). Their config.json and tensors as Qwen publishes
# them (the router mlp.gate, mlp.experts.E.*, Qwen2-MoE's shared expert and its gate, a dense
# layer through mlp_only_layers); greedy generation is the same twice, the same from a
# directory written by `llaisys-cli quantize` as from --quant at load (the router stays as
# stored); the server serves a streamed answer equal to the non-streamed one and the same
# tokens alone as beside three other streams (each expert then runs over other rows), and exits
# 0 on SIGTERM. A MoE config over weights without experts is refused naming the field.
cli="${LLAISYS_CLI:-./llaisys-cli}"
. tests/lib/harness.sh # $srv, $tmp, $pids, check, start, stop

for tool in curl jq; do
    command -v "$tool" >/dev/null || { echo "not ok moe tests need $tool"; exit 0; }
done
m="$tmp/q3m"
"$cli" mkmodel --preset tiny --family qwen3_moe --head-dim 32 --experts 8 --experts-used 2 \
    --moe-intermediate 64 --mlp-only-layers 1 --layers 3 --seed 5 \
    --tokenizer models/qwen3-tokenizer "$m" 2>"$tmp/mk.err"
check "mkmodel --family qwen3_moe with the Qwen3 tokenizer" $?
grep -q '8 experts (2 a token) of MLP 64' "$tmp/mk.err" &&
    jq -e '.architectures == ["Qwen3MoeForCausalLM"] and .model_type == "qwen3_moe" and
        .num_experts == 8 and .num_experts_per_tok == 2 and .moe_intermediate_size == 64 and
        .norm_topk_prob == true and .decoder_sparse_step == 1 and .mlp_only_layers == [1] and
        (has("shared_expert_intermediate_size") | not)' "$m/config.json" >/dev/null &&
    grep -q '"model.layers.0.mlp.gate.weight"' "$m/model.safetensors" &&
    grep -q '"model.layers.2.mlp.experts.7.down_proj.weight"' "$m/model.safetensors" &&
    grep -q '"model.layers.1.mlp.gate_proj.weight"' "$m/model.safetensors" &&
    ! grep -q 'model.layers.1.mlp.experts' "$m/model.safetensors" &&
    ! grep -q 'shared_expert' "$m/model.safetensors" && grep -q q_norm "$m/model.safetensors"
check "qwen3_moe config.json and tensors: router, experts, layer 1 dense, no shared expert" $?

g1=$("$cli" generate --model "$m" --chat "Hello there" -n 12 --temp 0 --print-ids 2>/dev/null)
g2=$("$cli" generate --model "$m" --chat "Hello there" -n 12 --temp 0 --print-ids 2>/dev/null)
[ -n "$g1" ] && [ "$g1" = "$g2" ]
check "qwen3_moe greedy generation is the same twice" $?

"$cli" quantize --model "$m" --type q4_k_m "$tmp/q3mq" 2>"$tmp/quant.err" &&
    gq=$("$cli" generate --model "$tmp/q3mq" --chat "Hello there" -n 12 --temp 0 --print-ids \
        2>/dev/null) &&
    gl=$("$cli" generate --model "$m" --quant q4_k_m --chat "Hello there" -n 12 --temp 0 \
        --print-ids 2>/dev/null) &&
    [ -n "$gq" ] && [ "$gq" = "$gl" ] &&
    grep -q '"model.layers.0.mlp.experts.3.up_proj.weight.qs"' "$tmp/q3mq/model.safetensors" &&
    grep -q '"model.layers.0.mlp.gate.weight":{"dtype":"BF16"' "$tmp/q3mq/model.safetensors"
check "qwen3_moe quantized directory generates as --quant at load (q4_k_m), router as stored" $?

start q3m --model "$m" --threads 2 || exit 1
body='"messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":16,"temperature":0,"chat_template_kwargs":{"enable_thinking":false}'
one=$(chat "{$body}")
[ -n "$(printf '%s' "$one" | jq -j '.choices[0].message.content // ""')" ] &&
    stream_matches "$body" "$one"
check "qwen3_moe stream: the same text as the non-streamed answer, then [DONE]" $?
# the same request beside three others (other prompts): the batch's experts see other rows
others=""
for i in 1 2 3; do
    chat "{\"messages\":[{\"role\":\"user\",\"content\":\"Other prompt number $i, longer\"}],\"max_tokens\":16,\"temperature\":0}" \
        >"$tmp/other$i.json" &
    others="$others $!"
done
chat "{$body}" >"$tmp/again.json"
wait $others
[ "$(jq -c .choices[0].message "$tmp/again.json")" = "$(printf '%s' "$one" | jq -c .choices[0].message)" ] &&
    [ "$(jq -r .choices[0].finish_reason "$tmp/other3.json")" = length ]
check "qwen3_moe: the same answer alone and beside three other streams" $?
stop q3m

m2="$tmp/q2m"
"$cli" mkmodel --preset tiny --family qwen2_moe --experts 4 --experts-used 2 \
    --moe-intermediate 32 --shared-intermediate 96 --seed 9 \
    --tokenizer models/deepseek-r1-distill-qwen-tokenizer "$m2" 2>/dev/null &&
    jq -e '.architectures == ["Qwen2MoeForCausalLM"] and .model_type == "qwen2_moe" and
        .norm_topk_prob == false and .shared_expert_intermediate_size == 96' \
        "$m2/config.json" >/dev/null &&
    grep -q '"model.layers.1.mlp.shared_expert_gate.weight"' "$m2/model.safetensors" &&
    grep -q '"model.layers.0.mlp.shared_expert.down_proj.weight"' "$m2/model.safetensors" &&
    grep -q '"model.layers.0.self_attn.q_proj.bias"' "$m2/model.safetensors"
check "mkmodel --family qwen2_moe: shared expert and its gate, q/k/v biases" $?
# a dense preset with experts: the defaults follow the final shapes (--intermediate given)
"$cli" mkmodel --preset tiny --family qwen2_moe --intermediate 256 --layers 1 --seed 2 \
    --tokenizer models/deepseek-r1-distill-qwen-tokenizer "$tmp/dflt" 2>/dev/null &&
    jq -e '.num_experts == 8 and .num_experts_per_tok == 2 and .moe_intermediate_size == 64 and
        .shared_expert_intermediate_size == 256 and .intermediate_size == 256' \
        "$tmp/dflt/config.json" >/dev/null &&
    ! "$cli" mkmodel --preset tiny --family qwen2 --experts 4 \
        --tokenizer models/deepseek-r1-distill-qwen-tokenizer "$tmp/dx" 2>"$tmp/dx.err" &&
    grep -q 'experts are for the qwen2_moe, qwen3_moe and granitemoe families' "$tmp/dx.err"
check "mkmodel: a dense preset's expert defaults follow --intermediate; --experts on qwen2 refused" $?
rm -rf "$tmp/dflt"
a=$("$cli" generate --model "$m2" --chat "Hi" -n 10 --temp 0 --print-ids 2>/dev/null) &&
    b=$("$cli" generate --model "$m2" --chat "Hi" -n 10 --temp 0 --print-ids --threads 1 \
        2>/dev/null) &&
    [ -n "$a" ] && [ "$a" = "$b" ] &&
    "$cli" generate --model "$m2" --chat "Hi" -n 10 --temp 0 --quant q8_0 >/dev/null 2>&1
check "qwen2_moe generates, the same on one thread as on two, and with --quant q8_0" $?

# a MoE config over a dense model's weights
"$cli" mkmodel --preset tiny --family qwen2 --seed 1 \
    --tokenizer models/deepseek-r1-distill-qwen-tokenizer "$tmp/dense" 2>/dev/null &&
    sed -i 's/"model_type": "qwen2"/"model_type": "qwen2_moe", "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64/' \
        "$tmp/dense/config.json" &&
    ! "$cli" generate --model "$tmp/dense" --prompt x -n 1 2>"$tmp/dense.err" &&
    grep -q "missing tensor 'model.layers.0.mlp.gate.weight'" "$tmp/dense.err"
check "a qwen2_moe config over dense weights is refused, naming the router" $?

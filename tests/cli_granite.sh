#!/bin/sh
# cli_granite.sh: a Granite model end to end on a random small granite-3.1-2b made by mkmodel.
# No Granite tokenizer ships here: GPT-2's (models/gpt2-tokenizer, the ByteLevel scheme
# Granite's uses) with Granite's four control tokens added as special tokens, and a chat
# template of Granite 3.x's form (tests/fixtures/chat-templates/granite.jinja: role turns
# <|start_of_role|>ROLE<|end_of_role|>...<|end_of_text|>, the tools in a "tools" turn, an
# assistant's calls as <|tool_call|>[...]). Checked: config.json as granite-3.1-2b publishes
# it (GraniteForCausalLM, the four multipliers), the template's render, greedy generation the
# same twice and the same from a quantized directory as from --quant at load; the server
# detects the granite tool format from the template, a required call made by the grammar
# comes out in tool_calls (the <|tool_call|> token kept for the parser, out of the content),
# streamed with the same arguments, and a tool round (a call, its result) renders and runs.
cli="${LLAISYS_CLI:-./llaisys-cli}"
. tests/lib/harness.sh # $srv, $tmp, $pids, check, start, stop

for tool in curl jq; do
    command -v "$tool" >/dev/null || { echo "not ok granite tests need $tool"; exit 0; }
done
tok="$tmp/tok"
mkdir "$tok" &&
    jq '.added_tokens += ([["<|start_of_role|>", 50257], ["<|end_of_role|>", 50258],
            ["<|end_of_text|>", 50259], ["<|tool_call|>", 50260]] |
            map({id: .[1], content: .[0], single_word: false, lstrip: false, rstrip: false,
                 normalized: false, special: true}))' \
        models/gpt2-tokenizer/tokenizer.json >"$tok/tokenizer.json" &&
    jq --rawfile t tests/fixtures/chat-templates/granite.jinja \
        '.chat_template = $t | .bos_token = "<|end_of_text|>" | .eos_token = "<|end_of_text|>"' \
        models/gpt2-tokenizer/tokenizer_config.json >"$tok/tokenizer_config.json"
check "a Granite-style tokenizer: GPT-2's with <|start_of_role|> ... <|tool_call|>, Granite's template" $?
m="$tmp/g"
"$cli" mkmodel --preset granite3-2b --hidden 64 --layers 2 --heads 4 --kv-heads 2 \
    --intermediate 128 --vocab 50261 --seed 3 --untied --tokenizer "$tok" "$m" 2>"$tmp/mk.err"
check "mkmodel --preset granite3-2b (small, untied: a tied random model repeats its last token)" $?
jq -e '.architectures == ["GraniteForCausalLM"] and .model_type == "granite" and
        .embedding_multiplier == 12 and .attention_multiplier == 0.015625 and
        .residual_multiplier == 0.22 and .logits_scaling == 8 and
        .rms_norm_eps == 1e-05 and .rope_theta == 10000000 and .bos_token_id == 50259 and
        .eos_token_id == 50259' "$m/config.json" >/dev/null &&
    jq -e 'has("temperature") | not' "$m/generation_config.json" >/dev/null
check "granite config.json as published (the four multipliers), <|end_of_text|> as bos and eos" $?

msgs='[{"role":"user","content":"Weather in Paris?"},{"role":"assistant","content":"",'
msgs=$msgs'"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather",'
msgs=$msgs'"arguments":{"city":"Paris"}}}]},{"role":"tool","tool_call_id":"c1","content":"sunny"}]'
printf '{"messages":%s,"add_generation_prompt":true}' "$msgs" |
    "$cli" template --model "$m" >"$tmp/render.txt" 2>/dev/null && {
    printf '<|start_of_role|>system<|end_of_role|>You are Granite, developed by IBM.<|end_of_text|>\n'
    printf '<|start_of_role|>user<|end_of_role|>Weather in Paris?<|end_of_text|>\n'
    printf '<|start_of_role|>assistant<|end_of_role|><|tool_call|>[{"name": "get_weather", '
    printf '"arguments": {"city": "Paris"}}]<|end_of_text|>\n'
    printf '<|start_of_role|>tool_response<|end_of_role|>sunny<|end_of_text|>\n'
    printf '<|start_of_role|>assistant<|end_of_role|>'
} >"$tmp/want.txt" && cmp -s "$tmp/want.txt" "$tmp/render.txt"
check "the Granite template: role turns, the assistant's call after <|tool_call|>, tool_response" $?
ids=$(printf '<|start_of_role|>user<|end_of_role|>Hi<|end_of_text|><|tool_call|>' |
    "$cli" tokenize --model "$m" --no-bos 2>/dev/null)
[ "$ids" = "50257 7220 50258 17250 50259 50260" ]
check "the role markers and <|tool_call|> encode as their special tokens" $?

g1=$("$cli" generate --model "$m" --chat "Hello there" -n 12 --temp 0 2>/dev/null)
g2=$("$cli" generate --model "$m" --chat "Hello there" -n 12 --temp 0 2>/dev/null)
[ -n "$g1" ] && [ "$g1" = "$g2" ]
check "granite greedy generation is the same twice" $?
"$cli" quantize --model "$m" --type q8_0 "$tmp/gq" 2>/dev/null &&
    jq -e '.embedding_multiplier == 12 and .logits_scaling == 8' "$tmp/gq/config.json" \
        >/dev/null &&
    gq=$("$cli" generate --model "$tmp/gq" --chat "Hello there" -n 12 --temp 0 2>/dev/null) &&
    gl=$("$cli" generate --model "$m" --quant q8_0 --chat "Hello there" -n 12 --temp 0 \
        2>/dev/null) &&
    [ -n "$gq" ] && [ "$gq" = "$gl" ]
check "granite quantized directory (its multipliers kept) generates as --quant at load" $?

tools='"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{}}}}]'
ask='"messages":[{"role":"user","content":"Weather in Paris?"}],"max_tokens":60,"temperature":0'
is_call='.choices[0] | .finish_reason == "tool_calls" and .message.content == null and
    (.message.tool_calls[0].id | test("^call_[0-9a-f]{24}$")) and
    (.message.tool_calls[0].function.arguments | fromjson | type == "object")'
start gs --model "$m" --threads 1 || exit 1
grep -q 'tool-parser: auto: granite (the chat template writes <|tool_call|>); tools rendered by the chat template' "$tmp/gs.err"
check "granite: the tool format detected from the template, tools rendered by it" $?
# <|tool_call|> (50260) biased: the grammar allows its text, the token must reach the parser
force='"tool_choice":"required","parallel_tool_calls":false,"logit_bias":{"50260":100}'
tc=$(chat "{$ask,$force,\"logprobs\":true,$tools}")
printf '%s' "$tc" | jq -e "$is_call" >/dev/null &&
    printf '%s' "$tc" | jq -e '.choices[0].logprobs.content[0].token == "<|tool_call|>"' >/dev/null
check "granite: a required call parsed into tool_calls, the <|tool_call|> token kept for the parser" $?
st=$(curl -s -N -m 60 -H 'Content-Type: application/json' \
    -d "{$ask,$force,\"stream\":true,$tools}" \
    "$URL/v1/chat/completions" | sed -n 's/^data: //p' | grep -v '^\[DONE\]$')
args=$(printf '%s\n' "$st" | jq -j '.choices[0].delta.tool_calls[0].function.arguments // ""')
[ -n "$args" ] &&
    [ "$args" = "$(printf '%s' "$tc" | jq -j '.choices[0].message.tool_calls[0].function.arguments')" ] &&
    [ "$(printf '%s\n' "$st" | jq -j '.choices[0].delta.content // ""')" = "" ]
check "granite streamed: the same arguments, no content (the marker is not content)" $?
hist=$(chat "{\"messages\":$(printf '%s' "$msgs" | jq -c '.[1].tool_calls[0].function.arguments |= tojson'),\"max_tokens\":4,\"temperature\":0,$tools}")
[ "$(printf '%s' "$hist" | jq -r '.choices[0].finish_reason')" = length ]
check "granite: a tool round (a call, its result) renders and runs" $?
stop gs

# GraniteMoE (granite-3.1-1b-a400m's shapes, small): experts stacked in two 3-D tensors
mm="$tmp/gm"
"$cli" mkmodel --preset granite3-1b-a400m --hidden 64 --layers 2 --heads 4 --kv-heads 2 \
    --experts 8 --experts-used 2 --moe-intermediate 32 --vocab 50261 --seed 4 --untied \
    --tokenizer "$tok" "$mm" 2>"$tmp/mkm.err" &&
    jq -e '.architectures == ["GraniteMoeForCausalLM"] and .model_type == "granitemoe" and
        .num_local_experts == 8 and .num_experts_per_tok == 2 and .intermediate_size == 32 and
        .logits_scaling == 6' "$mm/config.json" >/dev/null &&
    grep -q '"model.layers.1.block_sparse_moe.input_linear.weight":{"dtype":"BF16","shape":\[8,64,64\]' \
        "$mm/model.safetensors"
check "mkmodel --preset granite3-1b-a400m (small): num_local_experts, the stacks as 3-D tensors" $?
m1=$("$cli" generate --model "$mm" --chat "Hello there" -n 12 --temp 0 2>/dev/null)
m2=$("$cli" generate --model "$mm" --chat "Hello there" -n 12 --temp 0 2>/dev/null)
"$cli" quantize --model "$mm" --type q4_0 "$tmp/gmq" 2>/dev/null &&
    ! grep -q 'input_linear\|output_linear' "$tmp/gmq/model.safetensors" &&
    grep -q '"model.layers.1.block_sparse_moe.experts.7.down_proj.weight.qs"' \
        "$tmp/gmq/model.safetensors" &&
    mq=$("$cli" generate --model "$tmp/gmq" --chat "Hello there" -n 12 --temp 0 2>/dev/null) &&
    ml=$("$cli" generate --model "$mm" --quant q4_0 --chat "Hello there" -n 12 --temp 0 \
        2>/dev/null) &&
    [ -n "$m1" ] && [ "$m1" = "$m2" ] && [ -n "$mq" ] && [ "$mq" = "$ml" ]
check "granitemoe: greedy the same twice; a quantized directory (the experts by name) as --quant" $?

#!/bin/sh
# cli_mistral_tools.sh: the mistral tool-call format through the server. On the tiny-qwen2
# fixture with --tool-parser mistral (there [TOOL_CALLS] is plain text, and the tools go into the
# fallback system prompt, its template rendering none): a required call made by
# the grammar from random weights, parsed into tool_calls with a 9-character id, the same
# arguments streamed, one call when parallel_tool_calls is false. Then on a random model with
# Mistral-Nemo's tokenizer and template (models/mistral-nemo-tokenizer), where [TOOL_CALLS] is a
# special token: the format detected from the template, the token forced by logit_bias kept in
# the text for the parser and out of the content, and a history whose call ids are not 9
# characters long rendered (mapped) rather than refused by the template. Then the newer
# [TOOL_CALLS]NAME[ARGS]{...} spelling (mistral_args): forced on tiny-qwen2, and detected on the
# same random Mistral with a template of that spelling and a copy of the tokenizer in which a
# spare special token is renamed [ARGS] (Mistral's newer tokenizers have it; the ones of those
# models are not in the repository): both markers kept for the parser and out of the content.
cli="${LLAISYS_CLI:-./llaisys-cli}"
. tests/lib/harness.sh # $srv, $tmp, $pids, check, start, stop

for tool in curl jq; do
    command -v "$tool" >/dev/null || { echo "not ok mistral tool tests need $tool"; exit 0; }
done
stream() {
    curl -s -N -m 60 -H 'Content-Type: application/json' -d "$1" "$URL/v1/chat/completions" |
        sed -n 's/^data: //p' | grep -v '^\[DONE\]$'
}
tools='"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{}}}}]'
ask='"messages":[{"role":"user","content":"Weather in Paris?"}],"max_tokens":80,"temperature":0'
# a 9-letter-or-digit id, the call's name, content null, finish_reason tool_calls
is_call='.choices[0] | .finish_reason == "tool_calls" and .message.content == null and
    (.message.tool_calls[0].id | test("^[A-Za-z0-9]{9}$")) and
    (.message.tool_calls[0].function.arguments | fromjson | type == "object")'

start mt --model tests/fixtures/tiny-qwen2 --threads 1 --tool-parser mistral || exit 1
grep -q 'tool-parser: mistral (--tool-parser); tools in a fallback system prompt' "$tmp/mt.err"
check "mistral tools: --tool-parser mistral is the server's format" $?
tc=$(chat "{$ask,\"tool_choice\":\"required\",$tools}")
printf '%s' "$tc" | jq -e "$is_call" >/dev/null
check "mistral tools: a required call parsed into tool_calls, a 9-character id" $?
st=$(stream "{$ask,\"tool_choice\":\"required\",\"stream\":true,$tools}")
args=$(printf '%s\n' "$st" | jq -j '.choices[0].delta.tool_calls[0].function.arguments // ""')
[ "$args" = "$(printf '%s' "$tc" | jq -j '.choices[0].message.tool_calls[0].function.arguments')" ] &&
    [ "$(printf '%s\n' "$st" | jq -r '.choices[0].delta.tool_calls[0].id // empty' | wc -l)" -eq 1 ] &&
    printf '%s\n' "$st" | jq -r '.choices[0].delta.tool_calls[0].id // empty' | grep -Eq '^[A-Za-z0-9]{9}$' &&
    [ "$(printf '%s\n' "$st" | jq -j '.choices[0].delta.content // ""')" = "" ]
check "mistral tools streamed: one id, the deltas add up to the same arguments, no content" $?
one=$(chat "{$ask,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}},\"parallel_tool_calls\":false,$tools}")
[ "$(printf '%s' "$one" | jq -r '.choices[0].message.tool_calls | map(.function.name) | join(",")')" = get_time ]
check "mistral tools: a named tool_choice gives exactly one call of it" $?
stop mt

# a random Mistral with Mistral-Nemo's tokenizer and template
tok=models/mistral-nemo-tokenizer
m="$tmp/nemo"
"$cli" mkmodel --preset tiny --family mistral --vocab 131072 --seed 5 --tokenizer "$tok" "$m" \
    2>"$tmp/mk.err"
check "mkmodel --family mistral with the Mistral-Nemo tokenizer" $?
start nemo --model "$m" --threads 1 || exit 1
grep -q 'tool-parser: auto: mistral (the chat template writes \[TOOL_CALLS\]); tools rendered by the chat template' "$tmp/nemo.err"
check "mistral-nemo: the tool format is mistral, from its template" $?
# [TOOL_CALLS] is id 9, a special token: forced first, it must reach the parser, not the content
# (the bias also makes the model write it inside the arguments' strings, where the grammar
# allows its text: that is the model's text, and stays in the arguments)
tc=$(chat "{$ask,\"tool_choice\":\"required\",\"logit_bias\":{\"9\":100},\"logprobs\":true,$tools}")
printf '%s' "$tc" | jq -e "$is_call" >/dev/null &&
    printf '%s' "$tc" | jq -e '.choices[0].logprobs.content[0].token == "[TOOL_CALLS]"' >/dev/null
check "mistral-nemo: the [TOOL_CALLS] token reaches the parser, a call comes out" $?
st=$(stream "{$ask,\"tool_choice\":\"required\",\"logit_bias\":{\"9\":100},\"stream\":true,$tools}")
args=$(printf '%s\n' "$st" | jq -j '.choices[0].delta.tool_calls[0].function.arguments // ""')
[ "$args" = "$(printf '%s' "$tc" | jq -j '.choices[0].message.tool_calls[0].function.arguments')" ] &&
    [ "$(printf '%s\n' "$st" | jq -j '.choices[0].delta.content // ""')" = "" ]
check "mistral-nemo streamed: the same arguments, no content (the marker is not content)" $?
# ids of other lengths (OpenAI's call_…, a short one) for a call and its result: mapped the same
# way, so the template renders instead of raising
hist=$(chat "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"call_0123456789abcdef01234567\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}},{\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"call_0123456789abcdef01234567\",\"content\":\"sunny\"},{\"role\":\"tool\",\"tool_call_id\":\"c2\",\"content\":\"noon\"}],\"max_tokens\":4,\"temperature\":0,$tools}")
[ "$(printf '%s' "$hist" | jq -r '.choices[0].finish_reason')" = length ]
check "mistral-nemo: a tool round whose ids are not 9 characters renders and runs" $?
stop nemo

# mistral_args forced on tiny-qwen2 (its markers plain text there)
start ma --model tests/fixtures/tiny-qwen2 --threads 1 --tool-parser mistral_args || exit 1
grep -q 'tool-parser: mistral_args (--tool-parser); tools in a fallback system prompt' "$tmp/ma.err"
check "mistral_args tools: --tool-parser mistral_args is the server's format" $?
# one call (parallel_tool_calls false): the grammar's budget ends it at max_tokens, and with
# more calls allowed that end would read as "length"
tc=$(chat "{$ask,\"tool_choice\":\"required\",\"parallel_tool_calls\":false,$tools}")
printf '%s' "$tc" | jq -e "$is_call" >/dev/null
check "mistral_args tools: a required call parsed into tool_calls, a 9-character id" $?
st=$(stream "{$ask,\"tool_choice\":\"required\",\"parallel_tool_calls\":false,\"stream\":true,$tools}")
args=$(printf '%s\n' "$st" | jq -j '.choices[0].delta.tool_calls[0].function.arguments // ""')
[ "$args" = "$(printf '%s' "$tc" | jq -j '.choices[0].message.tool_calls[0].function.arguments')" ] &&
    [ "$(printf '%s\n' "$st" | jq -j '.choices[0].delta.content // ""')" = "" ]
check "mistral_args tools streamed: the same arguments, no content" $?
one=$(chat "{$ask,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}},$tools}")
[ "$(printf '%s' "$one" | jq -r '.choices[0].message.tool_calls | map(.function.name) | join(",")')" = get_time ]
check "mistral_args tools: a named tool_choice gives exactly one call of it" $?
stop ma
"$srv" --model tests/fixtures/tiny-qwen2 --tool-parser mistral_v2 2>"$tmp/bad.err"
[ $? -ne 0 ] && grep -q 'mistral_args, granite or none' "$tmp/bad.err"
check "mistral_args tools: an unknown --tool-parser is refused, naming mistral_args" $?

# the random Mistral with [ARGS] as a special token (id 32, a spare control token renamed) and a
# template rendering calls as [TOOL_CALLS]NAME[ARGS]{...}
v="$tmp/v11"
mkdir "$v" && cp -r "$m"/. "$v"/ &&
    sed 's/<SPECIAL_32>/[ARGS]/g' "$tok/tokenizer.json" >"$v/tokenizer.json" &&
    jq --arg t "{{- bos_token }}{%- if tools %}[AVAILABLE_TOOLS]{{ tools|tojson }}[/AVAILABLE_TOOLS]{%- endif %}{%- for m in messages %}{%- if m.role == 'user' %}[INST]{{ m.content }}[/INST]{%- elif m.role == 'assistant' and m.tool_calls %}{%- for tc in m.tool_calls %}[TOOL_CALLS]{{ tc.function.name }}[ARGS]{{ tc.function.arguments|tojson }}{%- endfor %}{{ eos_token }}{%- elif m.role == 'assistant' %}{{ m.content }}{{ eos_token }}{%- elif m.role == 'tool' %}[TOOL_RESULTS]{{ m.content }}[/TOOL_RESULTS]{%- endif %}{%- endfor %}" \
        '.chat_template = $t | .added_tokens_decoder."32".content = "[ARGS]"' \
        "$tok/tokenizer_config.json" >"$v/tokenizer_config.json"
check "mistral_args: a Mistral model whose tokenizer has [ARGS]" $?
start v11 --model "$v" --threads 1 || exit 1
grep -q 'tool-parser: auto: mistral_args (the chat template writes \[TOOL_CALLS\] and \[ARGS\]); tools rendered by the chat template' "$tmp/v11.err"
check "mistral_args: the tool format detected from the template" $?
# [TOOL_CALLS] (9) and [ARGS] (32) forced where the grammar allows their text: both tokens must
# reach the parser, and neither the content
force='"tool_choice":"required","parallel_tool_calls":false,"logit_bias":{"9":100,"32":100}'
tc=$(chat "{$ask,$force,\"logprobs\":true,$tools}")
printf '%s' "$tc" | jq -e "$is_call" >/dev/null &&
    printf '%s' "$tc" | jq -e '.choices[0].logprobs.content | map(.token) |
        .[0] == "[TOOL_CALLS]" and index("[ARGS]") != null' >/dev/null &&
    printf '%s' "$tc" | jq -e '.choices[0].message.tool_calls | length == 1' >/dev/null
check "mistral_args: the [TOOL_CALLS] and [ARGS] tokens reach the parser, one call comes out" $?
st=$(stream "{$ask,$force,\"stream\":true,$tools}")
args=$(printf '%s\n' "$st" | jq -j '.choices[0].delta.tool_calls[0].function.arguments // ""')
[ "$args" = "$(printf '%s' "$tc" | jq -j '.choices[0].message.tool_calls[0].function.arguments')" ] &&
    [ "$(printf '%s\n' "$st" | jq -j '.choices[0].delta.content // ""')" = "" ]
check "mistral_args streamed: the same arguments, no content (the markers are not content)" $?
stop v11

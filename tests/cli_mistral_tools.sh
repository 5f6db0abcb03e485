#!/bin/sh
# cli_mistral_tools.sh: the mistral tool-call format through the server. On the tiny-qwen2
# fixture with --tool-parser mistral (there [TOOL_CALLS] is plain text, and the tools go into the
# fallback system prompt, its template rendering none): a required call made by
# the grammar from random weights, parsed into tool_calls with a 9-character id, the same
# arguments streamed, one call when parallel_tool_calls is false. Then on a random model with
# Mistral-Nemo's tokenizer and template (models/mistral-nemo-tokenizer), where [TOOL_CALLS] is a
# special token: the format detected from the template, the token forced by logit_bias kept in
# the text for the parser and out of the content, and a history whose call ids are not 9
# characters long rendered (mapped) rather than refused by the template.
cli="${LLAISYS_CLI:-./llaisys-cli}"
. tests/lib/harness.sh # $srv, $tmp, $pids, check, start, stop

for tool in curl jq; do
    command -v "$tool" >/dev/null || { echo "not ok mistral tool tests need $tool"; exit 0; }
done
chat() { curl -s -m 60 -H 'Content-Type: application/json' -d "$1" "$URL/v1/chat/completions"; }
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

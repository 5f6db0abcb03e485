#!/bin/sh
# cli_template.sh: black-box tests of `llaisys-cli template`: the DeepSeek-R1 template loaded with
# --model from tests/fixtures/tiny-qwen2 (tokenizer_config.json) on fixture contexts, the
# Qwen2.5 template (tool calling, tojson) through --template/--bos/--eos, exact bytes out (no
# newline added), --help, and errors (template syntax, raise_exception, bad input, bad usage)
# failing with a message. Expected texts are the fixture renders of
# tests/fixtures/chat-templates/*.cases.json.
cli="${LLAISYS_CLI:-./llaisys-cli}"
model=tests/fixtures/tiny-qwen2
tpl=tests/fixtures/chat-templates
. tests/lib/harness.sh # $tmp, check

# r1.cases.json single_user, template and bos token from the model directory
cat >"$tmp/ctx1.json" <<'EOF_'
{"messages": [{"role": "user", "content": "Hello, who are you?"}], "add_generation_prompt": true}
EOF_
cat >"$tmp/want1.txt" <<'EOF_'
<｜begin▁of▁sentence｜><｜User｜>Hello, who are you?<｜Assistant｜><think>
EOF_
"$cli" template --model "$model" <"$tmp/ctx1.json" >"$tmp/out1.txt"
check "template --model renders r1 single_user exactly" $(cmp -s "$tmp/out1.txt" "$tmp/want1.txt"; echo $?)

# r1.cases.json think_strip: the reasoning of earlier turns is dropped
cat >"$tmp/ctx2.json" <<'EOF_'
{"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "<think>\nsimple\n</think>\n\n4"}, {"role": "user", "content": "3+3?"}], "add_generation_prompt": true}
EOF_
cat >"$tmp/want2.txt" <<'EOF_'
<｜begin▁of▁sentence｜><｜User｜>2+2?<｜Assistant｜>

4<｜end▁of▁sentence｜><｜User｜>3+3?<｜Assistant｜><think>
EOF_
"$cli" template --model "$model" <"$tmp/ctx2.json" >"$tmp/out2.txt"
check "template --model renders r1 think_strip exactly" $(cmp -s "$tmp/out2.txt" "$tmp/want2.txt"; echo $?)

# qwen25.cases.json tools_call through --template (tool schemas through tojson)
cat >"$tmp/ctx3.json" <<'EOF_'
{"messages": [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}, {"role": "tool", "content": "{\"temp\": 21}"}], "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}], "add_generation_prompt": true}
EOF_
cat >"$tmp/want3.txt" <<'EOF_'
<|im_start|>system
You are Qwen, created by Alibaba Cloud. You are a helpful assistant.

# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
<|im_start|>user
Weather in Paris?<|im_end|>
<|im_start|>assistant
<tool_call>
{"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}
</tool_call><|im_end|>
<|im_start|>user
<tool_response>
{"temp": 21}
</tool_response><|im_end|>
<|im_start|>assistant
EOF_
"$cli" template --template "$tpl/qwen25.jinja" --bos '<｜begin▁of▁sentence｜>' --eos '<｜end▁of▁sentence｜>' \
    <"$tmp/ctx3.json" >"$tmp/out3.txt"
check "template --template renders qwen25 tools_call exactly" $(cmp -s "$tmp/out3.txt" "$tmp/want3.txt"; echo $?)

# --bos overrides the model's token; no newline is added to the output
printf '{"messages": [], "add_generation_prompt": false}' |
    "$cli" template --model "$model" --bos '[B]' >"$tmp/out4.txt"
printf '[B]' >"$tmp/want4.txt"
check "template --bos overrides the model and adds no newline" $(cmp -s "$tmp/out4.txt" "$tmp/want4.txt"; echo $?)

# a template syntax error: non-zero exit, message with the position
printf 'ok\n{%% for m in messages %%}{{ m.content }}{%% endif %%}' >"$tmp/bad.jinja"
printf '{}' | "$cli" template --template "$tmp/bad.jinja" >"$tmp/out5.txt" 2>"$tmp/err5.txt"
rc=$?
[ "$rc" -ne 0 ] && [ ! -s "$tmp/out5.txt" ] && grep -q "line 2, column 42" "$tmp/err5.txt" &&
    grep -q "endfor" "$tmp/err5.txt"
check "template syntax error fails with line and column" $?

# raise_exception: non-zero exit carrying the message
printf "{{ raise_exception('Only user and assistant roles are supported!') }}" >"$tmp/raise.jinja"
printf '{}' | "$cli" template --template "$tmp/raise.jinja" >/dev/null 2>"$tmp/err6.txt"
rc=$?
[ "$rc" -ne 0 ] && grep -q "Only user and assistant roles are supported!" "$tmp/err6.txt"
check "template raise_exception fails with its message" $?

# bad input: stdin not a JSON object, no template given, unknown option, missing model
printf '[1, 2' | "$cli" template --model "$model" >/dev/null 2>"$tmp/err7.txt"
rc=$?
[ "$rc" -ne 0 ] && [ -s "$tmp/err7.txt" ]
check "template rejects stdin that is not a JSON object" $?

printf '{}' | "$cli" template >/dev/null 2>"$tmp/err8.txt"
[ $? -eq 2 ] && grep -q -- "--model" "$tmp/err8.txt"
check "template without --model or --template is a usage error" $?

printf '{}' | "$cli" template --model "$tmp/no-such-dir" >/dev/null 2>"$tmp/err9.txt"
rc=$?
[ "$rc" -ne 0 ] && grep -q "tokenizer_config.json" "$tmp/err9.txt"
check "template with a missing model directory names the file" $?

"$cli" template --help >"$tmp/help.txt" 2>&1
[ $? -eq 0 ] && grep -q "usage: llaisys-cli template" "$tmp/help.txt"
check "template --help" $?

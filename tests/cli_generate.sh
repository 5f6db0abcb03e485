#!/bin/sh
# cli_generate.sh: black-box tests of `llaisys-cli generate`, `score` and `bench` on the tiny-qwen2
# fixture: greedy ids equal the float64 reference (tiny-qwen2.expected.json) over its stable
# prefix on both math paths, score's top-1 agrees with the reference, seeded sampling repeats,
# text and chat prompts run, sampling defaults follow gen_params.h's policy, and bad arguments
# fail with a message naming the problem. (tests/cli_params.sh compares generate with batch and
# the server.)
cli="${LLAISYS_CLI:-./llaisys-cli}"
model=tests/fixtures/tiny-qwen2
exp=tests/fixtures/tiny-qwen2.expected.json
. tests/lib/harness.sh # $tmp, check

# One case of expected.json on a line of its own; then its fields.
case_json() { sed 's/{"name":/\n{"name":/g' "$exp" | grep "^{\"name\":\"$1\""; }
field_list() { sed -n "s/.*\"$2\":\[\([0-9,]*\)\].*/\1/p" "$1" | tr ',' ' '; }
field_int() { sed -n "s/.*\"$2\":\([0-9]*\).*/\1/p" "$1"; }

for name in story chat_hello; do
    case_json "$name" >"$tmp/$name.json"
    ids=$(field_list "$tmp/$name.json" ids)
    stable=$(field_int "$tmp/$name.json" greedy_stable_prefix)
    want=$(field_list "$tmp/$name.json" greedy | tr ' ' '\n' | head -n "$stable" | tr '\n' ' ' |
        sed 's/ $//')
    [ -n "$ids" ] && [ -n "$want" ]
    check "extract reference case $name" $?
    for mode in --exact ""; do
        # shellcheck disable=SC2086
        got=$("$cli" generate --model "$model" --ids "$ids" --temp 0 --print-ids -n "$stable" \
            $mode 2>"$tmp/err")
        [ "$got" = "$want" ]
        check "generate greedy ids $name ${mode:-fast} = reference ($stable tokens)" $?
    done
    grep -q 'tokens/s' "$tmp/err"
    check "generate $name prints tokens/s to stderr" $?
done

# score: one JSON line per position; the last line's best id is the reference's first greedy id.
ids=$(field_list "$tmp/story.json" ids)
n_ids=$(echo "$ids" | wc -w)
first=$(field_list "$tmp/story.json" greedy | cut -d' ' -f1)
"$cli" score --model "$model" --ids "$ids" --top 3 --exact >"$tmp/score" 2>"$tmp/err"
[ $? -eq 0 ] && [ "$(wc -l <"$tmp/score")" -eq "$n_ids" ] &&
    tail -n 1 "$tmp/score" | grep -q "^\[\[$first,"
check "score: a line per position, last top-1 = reference greedy[0]" $?
head -n 1 "$tmp/score" | grep -Eq '^\[\[53853,124\.8[0-9]*\],\[62813,121\.2[0-9]*\],\[[0-9]+,[0-9.-]+\]\]$'
check "score: first position top-3 as JSON [id, logit] pairs, reference values" $?

# Seeded sampling is reproducible.
a=$("$cli" generate --model "$model" --prompt "Once upon a time" --temp 1.0 --top-p 0.9 \
    --seed 7 -n 12 --print-ids 2>/dev/null)
b=$("$cli" generate --model "$model" --prompt "Once upon a time" --temp 1.0 --top-p 0.9 \
    --seed 7 -n 12 --print-ids 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && [ "$(echo "$a" | wc -w)" -eq 12 ]
check "generate same seed gives the same 12 tokens" $?

# Text and chat prompts.
"$cli" generate --model "$model" --prompt "Hello, world" -n 8 --temp 0 >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && grep -q 'prompt: [0-9]* tokens' "$tmp/err"
check "generate --prompt runs" $?
# --chat renders the template and encodes without BOS: "Hello, who are you?" is the chat_hello
# case's prompt, so greedy decoding gives its reference ids.
ids=$(field_list "$tmp/chat_hello.json" ids)
stable=$(field_int "$tmp/chat_hello.json" greedy_stable_prefix)
want=$(field_list "$tmp/chat_hello.json" greedy | tr ' ' '\n' | head -n "$stable" | tr '\n' ' ' |
    sed 's/ $//')
got=$("$cli" generate --model "$model" --chat "Hello, who are you?" --temp 0 -n "$stable" \
    --print-ids --exact 2>"$tmp/err")
rc=$?
[ $rc -eq 0 ] && [ "$got" = "$want" ] && grep -q "prompt: $(echo "$ids" | wc -w) tokens" "$tmp/err"
check "generate --chat: template prompt of chat_hello, reference greedy ids" $?
[ $rc -eq 0 ] || sed 's/^/# /' "$tmp/err"
"$cli" generate --model "$model" --chat "Who are you?" -n 8 --seed 1 >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && [ -s "$tmp/out" ] && grep -q 'sampling: temperature 0.6' "$tmp/err"
check "generate --chat streams text, sampling defaults from generation_config.json" $?

# The default policy of gen_params.h: a generation_config.json without sampling fields samples
# at temperature 1 with nothing else on (generate used to decode greedily, with top-k 50).
mkdir "$tmp/plain"
for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do
    ln -s "$PWD/$model/$f" "$tmp/plain/$f"
done
echo '{"bos_token_id":151646,"eos_token_id":151643}' >"$tmp/plain/generation_config.json"
"$cli" generate --model "$tmp/plain" --prompt "Once upon a time" -n 4 --seed 2 >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] &&
    grep -q 'sampling: temperature 1, top-k 0, top-p 1, min-p 0, repetition penalty 1, seed 2$' "$tmp/err"
check "generate without sampling fields in generation_config: temperature 1, nothing else on" $?
"$cli" generate --model "$model" --prompt hi --temp 2.5 >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] && grep -q -- '--temp must be in \[0, 2\]' "$tmp/err"
check "generate --temp above 2 is refused, as by the server" $?

# one argument loop for every command (src/cli/cli_args.c): ranges with an open end, a flag
# without a value, a value given to a switch, an unknown option, --flag=VALUE
"$cli" generate --model "$model" --prompt hi --top-p 0 >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] && grep -q -- '--top-p must be in (0, 1\], got 0' "$tmp/err" && [ ! -s "$tmp/out" ]
check "generate --top-p 0 is refused: the range is open at 0" $?
"$cli" generate --model "$model" --prompt >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] && grep -q -- '--prompt needs a value' "$tmp/err" &&
    grep -q 'usage: llaisys-cli generate' "$tmp/err"
check "generate --prompt without a value is refused with the usage" $?
"$cli" generate --model "$model" --prompt hi --print-ids=yes >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] && grep -q -- '--print-ids takes no value' "$tmp/err"
check "generate --print-ids=yes is refused: a switch takes no value" $?
"$cli" generate --model "$model" --prompt hi --bogus 3 >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] && grep -q -- "unknown option '--bogus'" "$tmp/err"
check "generate names an unknown option" $?
"$cli" generate --model="$model" --ids="1 2" --temp=0 -n 3 --print-ids >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && [ "$(wc -w <"$tmp/out")" -eq 3 ]
check "generate takes --flag=VALUE for its own options" $?

# Bad input: non-zero exit and a message naming the problem.
"$cli" generate --model "$tmp/nonexistent" --prompt hi >"$tmp/out" 2>"$tmp/err"
[ $? -ne 0 ] && grep -q "nonexistent" "$tmp/err"
check "generate bad --model fails naming the path" $?
mkdir "$tmp/empty"
"$cli" generate --model "$tmp/empty" --prompt hi >"$tmp/out" 2>"$tmp/err"
[ $? -ne 0 ] && grep -q "config.json" "$tmp/err"
check "generate --model without config.json fails naming config.json" $?
"$cli" generate --model "$model" --ids "1 2x 3" >"$tmp/out" 2>"$tmp/err"
[ $? -ne 0 ] && grep -q "2x" "$tmp/err"
check "generate bad --ids fails naming the item" $?
"$cli" generate --model "$model" --ids "1 999999" >"$tmp/out" 2>"$tmp/err"
[ $? -ne 0 ] && grep -q "999999" "$tmp/err"
check "generate out-of-vocabulary id fails naming it" $?
"$cli" generate --model "$model" --ids "1 2 3 4 5" --ctx 4 >"$tmp/out" 2>"$tmp/err"
[ $? -ne 0 ] && grep -q "context" "$tmp/err"
check "generate prompt longer than --ctx fails" $?
"$cli" generate --model "$model" --ids "1" --ctx 1 >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] && grep -q -- "--ctx: must be an integer from 2 to" "$tmp/err"
check "generate --ctx below the engine's 2 is refused with the range" $?
"$cli" generate --model "$model" --ids "1 2" --ctx=3 --threads=1 --exact --temp 0 --print-ids -n 5 \
    >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && [ "$(wc -w <"$tmp/out")" -eq 1 ] && grep -q "context full" "$tmp/err"
check "generate takes --ctx=N and stops when the context is full" $?
"$cli" score --model "$model" --ids "1 2" --threads 300 >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q -- "--threads: must be an integer from 1 to 256" "$tmp/err"
check "score --threads uses the engine's range" $?
"$cli" generate --help | grep -q -- '--threads N .*compute threads (1 to 256; default the physical cores this process may use, [0-9]* here)'
check "generate --help prints the engine-option lines" $?
"$cli" generate --model "$model" >"$tmp/out" 2>"$tmp/err"
[ $? -ne 0 ] && grep -q -- "--prompt" "$tmp/err"
check "generate without a prompt fails" $?

# bench runs on the tiny model and prints its table.
"$cli" bench --model "$model" --pp 16 --tg 4 --reps 1 >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && grep -q '^| pp16 ' "$tmp/out" && grep -q '^| tg4 ' "$tmp/out" &&
    grep -q 'VmRSS' "$tmp/out"
check "bench prints pp and tg rows and memory" $?

# --depth: each test starts with that many tokens in the context (llama-bench's -d); a depth past
# the model's positions is refused, naming them
"$cli" bench --model "$model" --pp 16 --tg 4 --depth 40 --reps 1 >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && grep -q '^| pp16 @ d40 ' "$tmp/out" && grep -q '^| tg4 @ d40 ' "$tmp/out"
check "bench --depth prints pp and tg rows at that depth" $?
"$cli" bench --model "$model" --pp 16 --tg 4 --depth 1000000 --reps 1 >"$tmp/out" 2>"$tmp/err"
[ $? -ne 0 ] && grep -q 'needs 1000016 positions; the model has [0-9]* (max_position_embeddings)' "$tmp/err"
check "bench --depth past the model's positions is refused" $?

# a prompt shorter than the untimed warm-up pass, and no decode rows
"$cli" bench --model "$model" --pp 4 --tg 0 --reps 1 >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && grep -q '^| pp4 ' "$tmp/out" && ! grep -q '^| tg' "$tmp/out"
check "bench takes a prompt shorter than its warm-up and --tg 0" $?

# LLAISYS_KERNEL is the one dispatch knob: it caps every kernel family; an unknown value is
# reported and ignored.
LLAISYS_KERNEL=scalar "$cli" bench --model "$model" --pp 16 --tg 4 --reps 1 >"$tmp/out" 2>&1
[ $? -eq 0 ] && grep -q 'kernels: matmul scalar, ops scalar, attention scalar;' "$tmp/out"
check "LLAISYS_KERNEL=scalar makes every kernel scalar" $?
LLAISYS_KERNEL=sse9 "$cli" bench --model "$model" --pp 16 --tg 4 --reps 1 >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && grep -q 'LLAISYS_KERNEL=sse9 unknown (scalar|avx2|avxvnni|avx512|amx)' "$tmp/err"
check "LLAISYS_KERNEL with an unknown value is reported" $?

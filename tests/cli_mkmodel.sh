#!/bin/sh
# cli_mkmodel.sh: black-box tests of `llaisys-cli mkmodel`: byte-identical output for a seed
# (whatever the thread count), different weights for another seed, HF file layout, refusal to
# overwrite, and bad arguments failing with a message and no output directory left behind.
cli="${LLAISYS_CLI:-./llaisys-cli}"
tok=models/deepseek-r1-distill-qwen-tokenizer
files="config.json generation_config.json model.safetensors tokenizer.json tokenizer_config.json"
. tests/lib/harness.sh # $tmp, check

same_files() { # same_files DIR1 DIR2: every file byte-identical
    for f in $files; do cmp -s "$1/$f" "$2/$f" || return 1; done
}

"$cli" mkmodel --preset tiny --seed 1 --tokenizer "$tok" "$tmp/a" 2>"$tmp/log"
check "mkmodel tiny succeeds" $?
"$cli" mkmodel --preset tiny --seed 1 --tokenizer "$tok" "$tmp/b" 2>/dev/null
same_files "$tmp/a" "$tmp/b"
check "mkmodel same seed gives identical files" $?
"$cli" mkmodel --preset tiny --seed 1 --threads 1 --tokenizer "$tok" "$tmp/t1" 2>/dev/null
same_files "$tmp/a" "$tmp/t1"
check "mkmodel output does not depend on the thread count" $?
"$cli" mkmodel --preset tiny --seed 2 --tokenizer "$tok" "$tmp/c" 2>/dev/null
! cmp -s "$tmp/a/model.safetensors" "$tmp/c/model.safetensors" &&
    cmp -s "$tmp/a/config.json" "$tmp/c/config.json"
check "mkmodel other seed gives other weights, same config" $?

# Layout: HF config fields, generation defaults, header as the safetensors library writes it.
grep -q '"hidden_size": 64,' "$tmp/a/config.json" &&
    grep -q '"tie_word_embeddings": true,' "$tmp/a/config.json" &&
    grep -q '"bos_token_id": 151646,' "$tmp/a/config.json" &&
    grep -q '"eos_token_id": 151643,' "$tmp/a/config.json" &&
    grep -q '"torch_dtype": "bfloat16",' "$tmp/a/config.json" &&
    grep -q '"Qwen2ForCausalLM"' "$tmp/a/config.json" &&
    grep -q '"rope_theta": 10000.0,' "$tmp/a/config.json" &&
    grep -q '"temperature": 0.6,' "$tmp/a/generation_config.json" &&
    grep -q '"top_p": 0.95' "$tmp/a/generation_config.json"
check "mkmodel config.json and generation_config.json fields" $?
head -c 39 "$tmp/a/model.safetensors" | tail -c 31 | grep -q '^{"__metadata__":{"format":"pt"}'
check "mkmodel safetensors header starts with __metadata__" $?
cmp -s "$tmp/a/tokenizer.json" "$tok/tokenizer.json" &&
    cmp -s "$tmp/a/tokenizer_config.json" "$tok/tokenizer_config.json"
check "mkmodel copies the tokenizer files" $?
[ "$(wc -c <"$tmp/a/model.safetensors")" -eq 19623784 ]
check "mkmodel tiny has the fixture's size" $?

"$cli" mkmodel --preset small --untied --layers 1 --seed 3 --tokenizer "$tok" "$tmp/s" 2>/dev/null &&
    grep -q '"hidden_size": 256,' "$tmp/s/config.json" &&
    grep -q '"num_hidden_layers": 1,' "$tmp/s/config.json" &&
    grep -q '"tie_word_embeddings": false,' "$tmp/s/config.json" &&
    grep -q '"lm_head.weight"' "$tmp/s/model.safetensors"
check "mkmodel preset with overrides" $?

# Existing output: refused without --force, replaced with it.
"$cli" mkmodel --preset tiny --seed 1 --tokenizer "$tok" "$tmp/a" 2>"$tmp/err"
[ $? -ne 0 ] && grep -q "already exists" "$tmp/err"
check "mkmodel refuses an existing directory" $?
"$cli" mkmodel --preset tiny --seed 2 --force --tokenizer "$tok" "$tmp/a" 2>/dev/null &&
    same_files "$tmp/a" "$tmp/c"
check "mkmodel --force replaces a model directory" $?
mkdir "$tmp/other" && echo keep >"$tmp/other/notes.txt"
"$cli" mkmodel --preset tiny --force --tokenizer "$tok" "$tmp/other" 2>"$tmp/err"
[ $? -ne 0 ] && grep -q "not a model directory" "$tmp/err" && [ -f "$tmp/other/notes.txt" ]
check "mkmodel --force leaves a foreign directory alone" $?

# Bad arguments: non-zero exit, a message naming the problem, no directory left behind.
bad() { # bad NAME EXPECTED-MESSAGE ARGS...
    name=$1 msg=$2
    shift 2
    "$cli" mkmodel "$@" 2>"$tmp/err" >/dev/null
    rc=$?
    [ $rc -ne 0 ] && grep -q -- "$msg" "$tmp/err" && [ ! -e "$tmp/x" ] &&
        [ -z "$(ls -d "$tmp"/x.tmp-* 2>/dev/null)" ]
    check "mkmodel rejects $name" $?
}
bad "an unknown preset" "unknown preset 'huge'" --preset huge --tokenizer "$tok" "$tmp/x"
bad "heads not dividing hidden" "hidden size 64 is not a multiple of head count 5" \
    --heads 5 --kv-heads 1 --tokenizer "$tok" "$tmp/x"
bad "heads not a multiple of kv heads" "head count 4 is not a multiple of KV head count 3" \
    --kv-heads 3 --tokenizer "$tok" "$tmp/x"
bad "a zero size" "--layers needs an integer in \[1, 1024\]" --layers 0 --tokenizer "$tok" "$tmp/x"
bad "a bad seed" "--seed needs an integer" --seed abc --tokenizer "$tok" "$tmp/x"
bad "an unknown option" "unknown option '--bogus'" --bogus --tokenizer "$tok" "$tmp/x"
bad "a missing value" "--hidden needs a value" --tokenizer "$tok" "$tmp/x" --hidden
bad "a missing output directory" "missing OUT_DIR" --tokenizer "$tok"
bad "a missing tokenizer" "missing --tokenizer" "$tmp/x"
bad "a tokenizer directory without files" "$tmp/none/tokenizer.json" --tokenizer "$tmp/none" "$tmp/x"
bad "a vocabulary smaller than the tokenizer" "vocab size 1000 is smaller than the tokenizer" \
    --vocab 1000 --tokenizer "$tok" "$tmp/x"

"$cli" mkmodel --help | grep -q -- "--preset NAME"
check "mkmodel --help" $?
exit 0

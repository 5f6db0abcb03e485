#!/bin/sh
# cli_tokenize.sh: black-box tests of `llaisys-cli tokenize`, `detokenize` and `bench-tokenizer`
# on the DeepSeek-R1-Distill-Qwen tokenizer of tests/fixtures/tiny-qwen2: fixture cases through
# standard input (expected ids copied from tests/fixtures/tokenizer-cases.json), --no-bos, a
# round trip through a pipe, exact text out of detokenize, --help, and bad arguments or a bad
# --model directory failing with a message; and Mistral-Nemo's tokenizer (models/mistral-nemo-tokenizer)
# on two fixture cases and a round trip.
cli="${LLAISYS_CLI:-./llaisys-cli}"
model=tests/fixtures/tiny-qwen2
. tests/lib/harness.sh # $tmp, check

# bos_hello: add_special_tokens true
out=$(printf 'Hello, world!' | "$cli" tokenize --model "$model")
[ "$out" = "151646 9707 11 1879 0" ]
check "tokenize adds BOS by default (fixture bos_hello)" $?

out=$(printf 'Hello, world!' | "$cli" tokenize --model "$model" --no-bos)
[ "$out" = "9707 11 1879 0" ]
check "tokenize --no-bos" $?

# llamacpp_32 and zh: no BOS
out=$(printf "Hello, y'all! How are you \360\237\230\201 ?\346\210\221\346\203\263\345\234\250apple\345\267\245\344\275\2341314151\345\244\251\357\275\236" |
    "$cli" tokenize --model "$model" --no-bos)
[ "$out" = "9707 11 379 64848 0 2585 525 498 26525 223 937 104100 18493 22377 99257 16 18 16 19 16 20 16 35727 21216" ]
check "tokenize fixture llamacpp_32 (emoji, Chinese, digits)" $?

printf '大语言模型推理系统需要高效地管理KV缓存，并在多个请求之间进行连续批处理。请解释分页注意力的基本思想。' >"$tmp/zh.txt"
out=$("$cli" tokenize --model "$model" --no-bos <"$tmp/zh.txt")
[ "$out" = "26288 102064 104949 113272 72448 85106 102202 29490 39352 82707 99982 24360 90395 18493 101213 34859 101920 71817 104005 99358 54542 1773 14880 104136 17177 18538 108260 105166 100383 1773" ]
check "tokenize fixture zh from a file on stdin" $?

out=$("$cli" tokenize --model "$model" </dev/null)
[ "$out" = "151646" ]
check "tokenize empty input gives BOS only" $?

# detokenize prints exactly the text (no newline added)
"$cli" detokenize --model "$model" 9707 11 1879 0 >"$tmp/out"
printf 'Hello, world!' | cmp -s - "$tmp/out"
check "detokenize prints the exact text" $?

"$cli" detokenize --model "$model" 151646 9707 >"$tmp/out"
printf '<\357\275\234begin\342\226\201of\342\226\201sentence\357\275\234>Hello' | cmp -s - "$tmp/out"
check "detokenize shows BOS text" $?

"$cli" detokenize --model "$model" --skip-special 151646 9707 151643 151700 >"$tmp/out"
printf 'Hello' | cmp -s - "$tmp/out"
check "detokenize --skip-special; ids without text give nothing" $?

ids=$("$cli" tokenize --model "$model" --no-bos <"$tmp/zh.txt")
# shellcheck disable=SC2086
"$cli" detokenize --model "$model" $ids >"$tmp/back"
cmp -s "$tmp/zh.txt" "$tmp/back"
check "tokenize | detokenize round trip" $?

printf 'a\377b\355\240\200c' | "$cli" tokenize --model "$model" --no-bos >"$tmp/ids"
# shellcheck disable=SC2046
"$cli" detokenize --model "$model" $(cat "$tmp/ids") >"$tmp/back"
printf 'a\357\277\275b\357\277\275\357\277\275\357\277\275c' | cmp -s - "$tmp/back"
check "invalid UTF-8 on stdin becomes U+FFFD" $?

# help and bad arguments
for c in tokenize detokenize bench-tokenizer; do
    "$cli" "$c" --help >"$tmp/help" 2>&1 && grep -q "usage: llaisys-cli $c" "$tmp/help"
    check "$c --help" $?
done

printf 'x' | "$cli" tokenize --model "$tmp/nowhere" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -ne 0 ] && grep -q "nowhere/tokenizer.json" "$tmp/err" && [ ! -s "$tmp/out" ]
check "tokenize with a bad --model dir fails naming tokenizer.json" $?

"$cli" detokenize --model "$tmp/nowhere" 1 2 >/dev/null 2>"$tmp/err"
rc=$?
[ "$rc" -ne 0 ] && grep -q "tokenizer.json" "$tmp/err"
check "detokenize with a bad --model dir fails" $?

mkdir "$tmp/broken" && printf '{"model": {"vocab": ' >"$tmp/broken/tokenizer.json"
printf 'x' | "$cli" tokenize --model "$tmp/broken" >/dev/null 2>"$tmp/err"
rc=$?
[ "$rc" -ne 0 ] && grep -q "invalid JSON" "$tmp/err"
check "tokenize with a truncated tokenizer.json fails with a message" $?

"$cli" detokenize --model "$model" 12 x3 >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "'x3' is not a token id" "$tmp/err"
check "detokenize rejects a non-numeric id" $?

printf 'x' | "$cli" tokenize >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q -- "--model DIR is required" "$tmp/err"
check "tokenize without --model is a usage error" $?

# the benchmark on a small file: runs, reports load time and throughput, round trip ok
cp "$tmp/zh.txt" "$tmp/bench.txt" && printf 'Hello, world! int main(void) { return 0; }\n' >>"$tmp/bench.txt"
"$cli" bench-tokenizer --model "$model" --passes 1 "$tmp/bench.txt" >"$tmp/bench" 2>&1 &&
    grep -q "^load: " "$tmp/bench" && grep -q "MB/s" "$tmp/bench" && grep -q "round trip: ok" "$tmp/bench"
check "bench-tokenizer on a file" $?

# Mistral-Nemo's tokenizer: the tekken split (expected ids copied from
# tests/fixtures/mistral-nemo-tokenizer-cases.json, slashes_bos and caps_then_lower)
nemo=models/mistral-nemo-tokenizer
out=$(printf 'a/b//c\n' | "$cli" tokenize --model "$nemo")
[ "$out" = "1 1097 15836 1555 1099 1010" ]
check "tokenize Mistral-Nemo: BOS, slashes kept after symbols and a line break" $?

printf 'HTTPServer XMLParser IOError ABCdef' >"$tmp/nemo.txt"
out=$("$cli" tokenize --model "$nemo" --no-bos <"$tmp/nemo.txt")
[ "$out" = "30499 11473 23521 18067 19989 4507 24176 3149" ]
check "tokenize Mistral-Nemo: words split where the case changes" $?

# shellcheck disable=SC2086
"$cli" detokenize --model "$nemo" $out >"$tmp/back"
cmp -s "$tmp/nemo.txt" "$tmp/back"
check "Mistral-Nemo tokenize | detokenize round trip" $?

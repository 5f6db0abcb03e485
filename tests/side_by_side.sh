#!/bin/sh
# side_by_side.sh: llaisys against llama.cpp on the same machine and weights, not a timed test.
# The machines of this project drift (memory bandwidth by +-30 % within minutes), so one run of
# each says little: this alternates one run of ours (`llaisys-cli bench`) with one of theirs
# (`llama-bench`) PAIRS times per format and prints each pair's t/s and ratio, then the median
# ratio. Formats are ours:theirs, e.g. q4_k_m:q4_k_m; "none" is the weights as stored (bf16);
# theirs names the GGUF as MODEL_NAME-THEIRS.gguf in GGUF_DIR.
# usage: sh tests/side_by_side.sh MODEL GGUF_DIR [FORMATS]
#   FORMATS default: "none:bf16 bf16p:bf16 q8_0:q8_0 q4_0:q4_0 q4_k_m:q4_k_m"
# environment: LLAMA_BENCH (llama-bench; its directory is put on LD_LIBRARY_PATH), PAIRS (3),
# TEST (tg128, or pp512), THREADS (2), LLAISYS_CLI, MODEL_NAME (basename of MODEL)
# example: LLAMA_BENCH=/work/llama.cpp/build/bin/llama-bench \
#            sh tests/side_by_side.sh /work/models/r1-1.5b /work/models/gguf
model=$1
gguf=$2
formats=${3:-"none:bf16 bf16p:bf16 q8_0:q8_0 q4_0:q4_0 q4_k_m:q4_k_m"}
cli=${LLAISYS_CLI:-./llaisys-cli}
lb=${LLAMA_BENCH:-llama-bench}
pairs=${PAIRS:-3}
test=${TEST:-tg128}
threads=${THREADS:-2}
name=${MODEL_NAME:-$(basename "$model")}
if [ -z "$model" ] || [ -z "$gguf" ]; then
    echo "usage: sh tests/side_by_side.sh MODEL GGUF_DIR [FORMATS]" >&2
    exit 2
fi
case $test in
tg*) n=${test#tg} ours_args="--pp 0 --tg $n" theirs_args="-p 0 -n $n" ;;
pp*) n=${test#pp} ours_args="--pp $n --tg 0" theirs_args="-p $n -n 0" ;;
*) echo "side_by_side.sh: TEST must be tgN or ppN (got '$test')" >&2; exit 2 ;;
esac
LD_LIBRARY_PATH=$(dirname "$lb")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH

# t/s of `test` from the markdown table row of either tool: the column `skip` after the one
# holding the test's name (ours: | tg128 | 128 | 9.5 ± 0.1 | ...; llama-bench: ... | tg128 | 9.5 ± 0.1 |)
rate() { awk -F'|' -v t="$test" -v k="$1" '{ for (i = 1; i < NF; i++) { f = $i; gsub(/ /, "", f); if (f == t) { split($(i + k), a, " "); print a[1]; exit } } }'; }

echo "side by side: $test, $threads threads, $pairs alternating pairs; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
status=0
for f in $formats; do
    ours=${f%%:*} theirs=${f##*:}
    file="$gguf/$name-$theirs.gguf"
    if [ ! -f "$file" ]; then
        echo "$ours vs $theirs: no $file, skipped"
        continue
    fi
    ratios=""
    for i in $(seq "$pairs"); do
        # shellcheck disable=SC2086
        a=$("$cli" bench --model "$model" --threads "$threads" --quant "$ours" $ours_args --reps 1 2>/dev/null | rate 2)
        # shellcheck disable=SC2086
        b=$("$lb" -m "$file" -t "$threads" $theirs_args -r 1 2>/dev/null | rate 1)
        if [ -z "$a" ] || [ -z "$b" ]; then
            echo "$ours vs $theirs: a run failed (llaisys '$a', llama.cpp '$b')"
            status=1
            continue
        fi
        r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", a / b }')
        ratios="$ratios $r"
        echo "$ours vs $theirs: llaisys $a t/s, llama.cpp $b t/s, ratio $r ($(date -u +%H:%M:%S), load $(cut -d' ' -f1 /proc/loadavg))"
    done
    [ -n "$ratios" ] && echo "$ours vs $theirs: median ratio $(echo $ratios | tr ' ' '\n' | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')"
done
exit $status

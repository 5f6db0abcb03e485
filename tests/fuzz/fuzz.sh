#!/bin/sh
# fuzz.sh SECONDS TARGET...: runs each libFuzzer target (build/fuzz/fuzz_NAME) for SECONDS, one
# after the other, from the repository root, and prints "ok NAME: ..." (executions, coverage)
# or "not ok NAME" with the end of libFuzzer's log. Each starts from the committed seeds
# (tests/fuzz/corpus/NAME, which also hold the inputs of past findings, so every run replays
# them first) and the corpus grown by earlier runs (build/fuzz/corpus/NAME; with
# FUZZ_FRESH=1 an emptied build/fuzz/corpus-fresh/NAME instead, so a short run costs the same
# every time), with the
# dictionary tests/fuzz/NAME.dict when there is one. A finding is written to
# build/fuzz/findings/NAME-crash-... (or -timeout-, -leak-, -oom-). Exit status: non-zero if
# any target found something.
cd "$(dirname "$0")/../.." || exit 1
seconds=$1; shift
failed=0
mkdir -p build/fuzz/findings
for bin in "$@"; do
    name=$(basename "$bin")
    seeds=tests/fuzz/corpus/$name
    grown=build/fuzz/corpus/$name
    if [ "${FUZZ_FRESH:-0}" = 1 ]; then grown=build/fuzz/corpus-fresh/$name; rm -rf "$grown"; fi
    mkdir -p "$grown"
    dict=""; [ -f "tests/fuzz/$name.dict" ] && dict="-dict=tests/fuzz/$name.dict"
    log=build/fuzz/$name.log
    # -timeout: one input may take 10 s (a hang is a finding); -rss_limit_mb: memory per process
    # shellcheck disable=SC2086
    "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2560 -print_final_stats=1 \
        -artifact_prefix="build/fuzz/findings/$name-" $dict "$grown" "$seeds" >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    cov=$(grep -E '^#[0-9]+' "$log" | tail -n 1 | sed -n 's/.*cov: \([0-9]*\) ft: \([0-9]*\).*/cov \1, ft \2/p')
    if [ "$rc" -eq 0 ]; then
        echo "ok $name: ${execs:-?} executions in ${seconds}s, ${cov:-no coverage line}, corpus $(ls "$grown" | wc -l) grown + $(ls "$seeds" 2>/dev/null | wc -l) seeds"
    else
        failed=1
        echo "not ok $name: exit $rc (log: $log; input: $(ls -t build/fuzz/findings/"$name"-* 2>/dev/null | head -n 1))"
        grep -aE 'ERROR|SUMMARY|fuzz: invariant|runtime error|^    #[0-9] ' "$log" | head -n 30
    fi
done
exit $failed

#!/bin/sh
# run.sh TEST_BINARY... [SCRIPT.sh...]: runs each cmocka test binary from the repository root,
# then the black-box scripts named (all of tests/cli_*.sh when none is; each prints "ok NAME" /
# "not ok NAME" lines), and prints one closing line "tests: N passed, N failed". Exit status is
# non-zero if anything failed. The CLI under test is $LLAISYS_CLI (default ./llaisys-cli).
cd "$(dirname "$0")/.." || exit 1
bins=""; scripts=""
for a in "$@"; do
    case $a in *.sh) scripts="$scripts $a" ;; *) bins="$bins $a" ;; esac
done
[ -n "$scripts" ] || scripts=$(echo tests/cli_*.sh)
passed=0; failed=0; broken=""
log=$(mktemp); trap 'rm -f "$log"' EXIT
for t in $bins; do
    "$t" >"$log" 2>&1; rc=$?
    cat "$log"
    # (a binary may run several groups: each prints its own totals)
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{ s += $1 } END { if (NR) print s }')
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{ s += $1 } END { if (NR) print s }')
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0}))
    if [ "$rc" -ne 0 ] && [ -z "$f" ]; then failed=$((failed + 1)); broken="$broken $t"; fi
done
for s in $scripts; do
    [ -f "$s" ] || continue
    sh "$s" >"$log" 2>&1; rc=$?
    cat "$log"
    p=$(grep -c '^ok ' "$log"); f=$(grep -c '^not ok ' "$log")
    passed=$((passed + p)); failed=$((failed + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then failed=$((failed + 1)); broken="$broken $s"; fi
done
[ -z "$broken" ] || echo "crashed or exited non-zero without a report:$broken"
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

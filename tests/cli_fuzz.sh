#!/bin/sh
# cli_fuzz.sh: every libFuzzer target of tests/fuzz/ (built by `make test` into build/fuzz with
# clang, ASan and UBSan) for LLAISYS_FUZZ_SECONDS each (default 5): it replays the committed
# seeds and past findings (tests/fuzz/corpus/NAME), then mutates from them alone (not from
# the corpus longer runs grew, so the step costs the same on every run). One "ok NAME" /
# "not ok NAME" line per target (tests/fuzz/fuzz.sh). Run once, in the plain pass: the
# targets carry their own sanitizers, so the ASan pass of `make test` skips them.
cd "$(dirname "$0")/.." || exit 1
if [ -n "$LLAISYS_SANITIZE" ]; then
    echo "# fuzz targets: run in the plain pass (they are built with ASan+UBSan)"
    exit 0
fi
bins=""
for src in tests/fuzz/fuzz_*.c; do
    bin=build/fuzz/$(basename "$src" .c)
    if [ ! -x "$bin" ]; then
        echo "not ok $(basename "$bin"): $bin is not built (make fuzz-build)"
        continue
    fi
    bins="$bins $bin"
done
[ -n "$bins" ] || exit 0
# shellcheck disable=SC2086
FUZZ_FRESH=1 ./tests/fuzz/fuzz.sh "${LLAISYS_FUZZ_SECONDS:-5}" $bins
exit 0

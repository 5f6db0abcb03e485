#!/bin/sh
# cli_python.sh: the Python package's tests (tests/python/test_*.py) with Debian's python3 and
# python3-pytest, against $LLAISYS_LIBRARY (default build/libllaisys.so) and $LLAISYS_CLI. Each
# pytest result becomes an "ok NAME" / "not ok NAME" line for tests/run.sh; pytest's own output
# (with its closing "N passed" summary) is shown above them. The exit status is pytest's.
# Under a sanitizer build ($LLAISYS_SANITIZE set) the sanitizer runtimes are preloaded into
# python3 (an uninstrumented program cannot load an instrumented library otherwise) with leak
# detection off: the interpreter itself keeps memory at exit; the library's own leaks are
# checked by the C tests (test_api).
py=/usr/bin/python3
[ -x "$py" ] || py=python3
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
if ! "$py" -c 'import pytest' 2>/dev/null; then
    echo "not ok python: $py has no pytest (third_party/setup.sh installs python3-pytest)"
    exit 1
fi
PYTHONPATH="$(pwd)/python${PYTHONPATH:+:$PYTHONPATH}"
LLAISYS_LIBRARY="$(cd "$(dirname "${LLAISYS_LIBRARY:-build/libllaisys.so}")" && pwd)/$(basename "${LLAISYS_LIBRARY:-build/libllaisys.so}")"
export PYTHONPATH LLAISYS_LIBRARY
if [ -n "$LLAISYS_SANITIZE" ]; then
    preload=""
    case "$LLAISYS_SANITIZE" in *address*) preload="$(${CC:-cc} -print-file-name=libasan.so)" ;; esac
    case "$LLAISYS_SANITIZE" in *undefined*)
        preload="$preload $(${CC:-cc} -print-file-name=libubsan.so)" ;; esac
    LD_PRELOAD="$preload" ASAN_OPTIONS="detect_leaks=0:${ASAN_OPTIONS:-}" \
        "$py" -m pytest -v -p no:cacheprovider tests/python >"$tmp/log" 2>&1
    rc=$?
else
    "$py" -m pytest -v -p no:cacheprovider tests/python >"$tmp/log" 2>&1
    rc=$?
fi
cat "$tmp/log"
sed -n -e 's/^\(tests\/python\/[^ ]*\) PASSED.*/ok python \1/p' \
       -e 's/^\(tests\/python\/[^ ]*\) \(FAILED\|ERROR\).*/not ok python \1/p' \
       -e 's/^\(FAILED\|ERROR\) \(tests\/python\/[^ ]*\).*/not ok python \2/p' "$tmp/log" |
    awk '!seen[$0]++'  # a failure shows in the -v line and again in the short summary
exit $rc

#!/bin/sh
# setup.sh: installs what the build needs on Debian 12, only what is missing, then builds the
# static libraries Debian does not ship (cJSON) from Debian's source packages.
# Idempotent; run by `make` before anything is compiled. Needs root only when something is missing.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")

# Debian packages the build and the tests need.
#  - gcc/make/libc6-dev: the toolchain; dpkg-dev + xz-utils: `apt-get source` unpacking.
#  - libutf8proc-dev, libopenblas-dev (static libopenblas.a), libgfortran-12-dev (OpenBLAS's
#    static archive needs libgfortran.a), libcmocka-dev: libraries.
#  - file, curl, jq: the black-box tests (static-link check, HTTP requests, JSON checks).
#  - nodejs + npm (only when no node is on PATH): the WebUI bundle and the SDK/browser tests.
#  - chromium: the WebUI's end-to-end tests (driven by playwright-core from npm).
#  - python3 + python3-pytest: the Python package (python/llaisys, ctypes) and its tests;
#    pkgconf: tests/api_example.c is built through pkg-config against the installed library.
#  - clang + libclang-rt-dev (libFuzzer and the sanitizer runtimes): the fuzz targets of
#    tests/fuzz/ (`make fuzz`; `make test` runs each for a few seconds).
packages="gcc make libc6-dev dpkg-dev xz-utils file curl jq nginx chromium libutf8proc-dev libopenblas-dev libgfortran-12-dev libcmocka-dev python3 python3-pytest pkgconf clang libclang-rt-dev"
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || packages="$packages nodejs npm"

missing=""
for p in $packages; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        echo "setup: need root to run: $*" >&2; exit 1; fi
}

if [ -n "$missing" ]; then
    echo "setup: installing Debian packages:$missing"
    as_root apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q --no-install-recommends $missing
    echo "setup: installed:"
    # shellcheck disable=SC2086
    dpkg-query -W -f='  ${Package} ${Version}\n' $missing
fi

"$here/cjson.sh" "$top/build/third_party"
"$here/microhttpd.sh" "$top/build/third_party"

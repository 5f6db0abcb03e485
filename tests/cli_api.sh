#!/bin/sh
# cli_api.sh: the library as an application sees it (include/llaisys.h, `make install`):
# build/libllaisys.so exports exactly the functions llaisys.h declares (nothing internal, no
# cJSON), under the soname of LLAISYS_API_VERSION; the installed prefix has the header, both
# libraries and llaisys.pc; tests/api_example.c, built by make through pkg-config against that
# prefix, runs: its model-level and engine-level greedy ids agree with each other and with
# `llaisys-cli generate`; the example also links against the installed static archive alone.
# Needs LLAISYS_API_EXAMPLE (the built example) and LLAISYS_LIBRARY (the .so); `make test`
# passes them.
cli="${LLAISYS_CLI:-./llaisys-cli}"
so="${LLAISYS_LIBRARY:-build/libllaisys.so}"
example="${LLAISYS_API_EXAMPLE:-build/tests/api_example}"
prefix="${LLAISYS_PREFIX:-build/prefix}"
model=tests/fixtures/tiny-qwen2
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

check() { # check NAME CONDITION-EXIT-STATUS
    if [ "$2" -eq 0 ]; then echo "ok $1"; else echo "not ok $1"; fi
}

# Exported symbols = the LLAISYS_API declarations of the header.
nm -D --defined-only "$so" | awk '{print $3}' | sort >"$tmp/exported"
sed -n 's/^LLAISYS_API [^(]*[ *]\(llaisys_[a-z_0-9]*\)(.*/\1/p' include/llaisys.h | sort >"$tmp/declared"
[ -s "$tmp/declared" ] && cmp -s "$tmp/exported" "$tmp/declared"
check "libllaisys.so exports exactly llaisys.h's $(wc -l <"$tmp/declared") functions" $?
[ $? -eq 0 ] || diff "$tmp/declared" "$tmp/exported" | sed 's/^/# /'
version=$(sed -n 's/^#define LLAISYS_API_VERSION \([0-9]*\).*/\1/p' include/llaisys.h)
objdump -p "$so" | grep -q "SONAME *libllaisys.so.$version\$"
check "soname libllaisys.so.$version" $?

[ -f "$prefix/include/llaisys.h" ] && [ -f "$prefix/lib/libllaisys.a" ] &&
    [ -f "$prefix/lib/libllaisys.so.$version" ] && [ -L "$prefix/lib/libllaisys.so" ] &&
    [ "$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --modversion llaisys)" = "$version.0" ]
check "make install: header, libraries, llaisys.pc" $?
# a bare `make` builds the programs, the libraries and the default model (no earlier rule, such
# as an objects' stamp, may become the goal)
make -p -q 2>/dev/null | grep -qx '.DEFAULT_GOAL := all'
check "bare make builds all (.DEFAULT_GOAL)" $?

"$example" "$model" "Once upon a time" >"$tmp/out" 2>"$tmp/err"
rc=$?
model_ids=$(sed -n 's/^model ids: //p' "$tmp/out")
engine_ids=$(sed -n 's/^engine ids: //p' "$tmp/out")
[ $rc -eq 0 ] && [ "$(echo "$model_ids" | wc -w)" -eq 8 ] && [ "$model_ids" = "$engine_ids" ]
check "api_example: model-level ids = engine ids (8 greedy tokens)" $?
[ $rc -eq 0 ] || sed 's/^/# /' "$tmp/err"
grep -q "^finish: length, 5 prompt + 8 generated tokens" "$tmp/out"
check "api_example: the engine's finish and usage" $?
cli_ids=$("$cli" generate --model "$model" --prompt "Once upon a time" --temp 0 -n 8 \
    --print-ids 2>/dev/null)
[ -n "$cli_ids" ] && [ "$cli_ids" = "$model_ids" ]
check "api_example ids = llaisys-cli generate --temp 0" $?

# The installed static archive is self-contained but for Debian's libraries.
san=""
[ -n "$LLAISYS_SANITIZE" ] && san="-fsanitize=$LLAISYS_SANITIZE"
# shellcheck disable=SC2086
${CC:-cc} -std=c99 $san -I"$prefix/include" tests/api_example.c "$prefix/lib/libllaisys.a" \
    -lutf8proc -lopenblas -lm -pthread -o "$tmp/static_example" 2>"$tmp/err" &&
    "$tmp/static_example" "$model" "Once upon a time" >"$tmp/out2" 2>>"$tmp/err" &&
    cmp -s "$tmp/out" "$tmp/out2"
check "api_example linked against the installed libllaisys.a gives the same output" $?

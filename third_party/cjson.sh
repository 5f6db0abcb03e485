#!/bin/sh
# cjson.sh DEST: builds DEST/cjson/libcjson.a and DEST/cjson/include/cjson/cJSON.h from Debian's
# cjson source package (Debian ships only the shared library). Does nothing if already built.
set -eu
dest=$1
version=1.7.15
out="$dest/cjson"
[ -f "$out/libcjson.a" ] && [ -f "$out/include/cjson/cJSON.h" ] && exit 0

here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dest"
"$here/debsrc.sh" cjson "$version" "$dest"
src="$dest/cjson-src"
mkdir -p "$out/include/cjson"
${CC:-gcc} -O2 -fPIC -std=c99 -c "$src/cJSON.c" -o "$out/cJSON.o"
ar rcs "$out/libcjson.a" "$out/cJSON.o"
cp "$src/cJSON.h" "$out/include/cjson/cJSON.h"
rm -f "$out/cJSON.o"
echo "setup: built $out/libcjson.a (cJSON $version)"

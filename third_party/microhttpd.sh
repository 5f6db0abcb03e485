#!/bin/sh
# microhttpd.sh DEST: builds DEST/microhttpd/lib/libmicrohttpd.a and
# DEST/microhttpd/include/microhttpd.h from Debian's libmicrohttpd source package, without TLS.
# Debian's own libmicrohttpd.a is built against GnuTLS, which cannot be linked statically; TLS is
# left to a reverse proxy. Only the library is built (no docs, examples, tests, curl, gettext).
# Does nothing if already built.
set -eu
dest=$1
version=0.9.75
out="$dest/microhttpd"
[ -f "$out/lib/libmicrohttpd.a" ] && [ -f "$out/include/microhttpd.h" ] && exit 0

here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
out="$dest/microhttpd"
"$here/debsrc.sh" libmicrohttpd "$version" "$dest"
src="$dest/libmicrohttpd-src"
obj="$dest/microhttpd-build"
rm -rf "$obj"
mkdir -p "$obj"

# The configure checks need no network and no optional library: the features switched off here
# are exactly those that would pull in something we cannot link statically.
(
    cd "$obj"
    CC=${CC:-gcc} CFLAGS="-O2 -g0" "$src/configure" -q \
        --prefix="$out" \
        --enable-static --disable-shared --with-pic \
        --disable-https --without-gnutls --without-libgcrypt-prefix \
        --disable-curl --disable-doc --disable-examples --disable-nls \
        --disable-dauth --disable-bauth --disable-postprocessor --disable-httpupgrade \
        --disable-dependency-tracking --enable-epoll=no --enable-poll=yes \
        >configure.log 2>&1 || { tail -n 40 configure.log >&2; exit 1; }
    make -s -C src/microhttpd -j"$(nproc 2>/dev/null || echo 2)" >make.log 2>&1 ||
        { tail -n 40 make.log >&2; exit 1; }
    make -s -C src/microhttpd install-libLTLIBRARIES >>make.log 2>&1
    make -s -C src/include install-includeHEADERS >>make.log 2>&1
)
# Fail now, not at link time, if TLS slipped in.
if nm "$out/lib/libmicrohttpd.a" 2>/dev/null | grep -q ' U gnutls_'; then
    echo "setup: libmicrohttpd.a references GnuTLS; it must be built without TLS" >&2
    exit 1
fi
rm -rf "$obj" "$out/lib/pkgconfig" "$out/lib/"*.la
echo "setup: built $out/lib/libmicrohttpd.a (libmicrohttpd $version, no TLS)"

#!/bin/sh
# debsrc.sh NAME UPSTREAM_VERSION DEST: fetches and unpacks Debian's source package NAME into
# DEST/NAME-src, checking that its upstream version is UPSTREAM_VERSION (the Debian revision may
# change with security updates; the upstream version we build against may not).
# Adds a deb-src entry of its own the first time (it never edits the system's lists).
set -eu
name=$1; want=$2; dest=$3

list=/etc/apt/sources.list.d/llaisys-deb-src.sources
if ! apt-get source --print-uris -qq "$name" >/dev/null 2>&1; then
    echo "setup: adding $list (Debian source packages)"
    cat > "$list" <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    apt-get update -qq
fi

have=$(apt-cache showsrc "$name" | sed -n 's/^Version: //p' | sort -V | tail -n 1)
case "$have" in
    "$want"-*|"$want") ;;
    *) echo "setup: Debian's $name is $have, this build is pinned to upstream $want" >&2; exit 1 ;;
esac

work="$dest/$name-dl"
rm -rf "$work" "$dest/$name-src"
mkdir -p "$work"
(cd "$work" && apt-get source -qq "$name=$have" >/dev/null 2>&1) || {
    # apt drops privileges to _apt for downloads; fall back to a plain unsandboxed run
    (cd "$work" && apt-get source -q "$name=$have")
}
src=$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -n 1)
[ -n "$src" ] || { echo "setup: apt-get source $name unpacked nothing" >&2; exit 1; }
mv "$src" "$dest/$name-src"
rm -rf "$work"
echo "setup: unpacked Debian source $name $have"

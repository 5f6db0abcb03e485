#!/bin/sh
# cli_webui.sh: end-to-end tests of the bundled WebUI: llaisys-server ($LLAISYS_SERVER, default
# ./llaisys-server) on the tiny-qwen2 fixture at a free port of 127.0.0.1, driven in headless
# Chromium (Debian's chromium package, $CHROMIUM to use another) by the node:test files of
# tests/webui/ (playwright-core from tests/webui/package-lock.json). Prints "ok NAME" /
# "not ok NAME" per test. The whole run has a time limit; on exit the server and everything
# the test runner started (browsers, extra servers) are killed. Screenshots of the main states
# go to build/webui-screenshots/.
srv="${LLAISYS_SERVER:-./llaisys-server}"
# The fixture's R1 template opens <think>, so with the reasoning split every answer of the random
# model would be reasoning; these tests check the answer path, the Thinking panel is covered by
# render.test.mjs. The variable reaches every server the tests start.
export LLAISYS_REASONING_PARSER=none
chromium="${CHROMIUM:-/usr/bin/chromium}"
model=tests/fixtures/tiny-qwen2
limit="${WEBUI_TEST_TIMEOUT:-300}"
tmp=$(mktemp -d) || exit 1
spid=""
npid=""
cleanup() {
    # the runner leads its own process group: that takes its browsers and servers with it
    [ -n "$npid" ] && kill -KILL -- "-$npid" 2>/dev/null
    [ -n "$spid" ] && kill -KILL "$spid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

if [ ! -x "$chromium" ]; then
    echo "not ok webui: chromium installed ($chromium; Debian: apt-get install --no-install-recommends chromium)"
    exit 0
fi
if [ ! -d tests/webui/node_modules/playwright-core ] || ! command -v node >/dev/null; then
    echo "not ok webui: playwright-core installed (npm ci --prefix tests/webui)"
    exit 0
fi
if ! command -v setsid >/dev/null; then
    echo "not ok webui: setsid available (util-linux)"
    exit 0
fi

"$srv" --model "$model" --host 127.0.0.1 --port 0 --log-level warn >"$tmp/srv.out" 2>"$tmp/srv.err" &
spid=$!
url=""
i=0
while [ -z "$url" ] && [ $i -lt 600 ]; do
    url=$(sed -n 's/^llaisys-server: serving .* at \(http:[^ ]*\)$/\1/p' "$tmp/srv.out")
    [ -n "$url" ] && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
    i=$((i + 1))
done
if [ -z "$url" ]; then
    echo "not ok webui: server started"
    sed 's/^/# /' "$tmp/srv.err" | tail -n 20
    exit 0
fi

# One test file at a time: each drives a browser, and the machine may have only two cores.
WEBUI_URL="$url" LLAISYS_SERVER="$srv" CHROMIUM="$chromium" \
    setsid timeout -k 5 "$limit" node --test --test-reporter=tap --test-concurrency=1 \
    tests/webui/ >"$tmp/node" 2>&1 &
npid=$!
wait "$npid"
rc=$?
# top-level TAP results of node's runner: "ok N - name" / "not ok N - name"
sed -n 's/^\(not ok\|ok\) [0-9]* - \(.*\)/\1 webui: \2/p' "$tmp/node"
if [ "$rc" -ne 0 ]; then
    [ "$rc" -eq 124 ] && echo "not ok webui: suite finished within ${limit}s"
    grep -q '^not ok ' "$tmp/node" || echo "not ok webui: suite exited with status $rc"
    # each failed test's diagnostics (node's YAML block after its "not ok" line)
    awk '/^not ok /{p=1} p{print "# " $0} p&&/^  \.\.\.$/{p=0}' "$tmp/node" | head -n 80
fi
grep -q '^ok ' "$tmp/node" || echo "not ok webui: suite ran"
# the server survived the suite and stops cleanly (under ASan: without leaks)
kill -TERM "$spid" 2>/dev/null
i=0
while kill -0 "$spid" 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
if kill -0 "$spid" 2>/dev/null; then
    rc=124
else
    wait "$spid"; rc=$?
    spid=""
fi
if [ "$rc" -eq 0 ]; then echo "ok webui: server exits 0 on SIGTERM after the suite"; else
    echo "not ok webui: server exits 0 on SIGTERM after the suite (status $rc)"
    sed 's/^/# /' "$tmp/srv.err" | tail -n 20
fi

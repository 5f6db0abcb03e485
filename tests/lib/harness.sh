# harness.sh: sourced, from the repository root, by the black-box scripts tests/cli_*.sh.
# Gives $tmp, a fresh directory removed on exit, and $pids, processes killed on exit; check NAME
# STATUS, which prints the "ok NAME" / "not ok NAME" line tests/run.sh counts; start/stop for
# llaisys-server ($srv: $LLAISYS_SERVER, default ./llaisys-server); chat and stream_matches
# send it chat requests; metric and wait_metric read its /metrics.
srv="${LLAISYS_SERVER:-./llaisys-server}"
tmp=$(mktemp -d) || exit 1
pids=""
cleanup() {
    for p in $pids; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

check() { # check NAME STATUS
    if [ "$2" -eq 0 ]; then echo "ok $1"; else echo "not ok $1"; fi
}

# start NAME ARGS...: starts "$srv --port 0 --log-level warn ARGS" (a later flag wins; stdout
# and stderr in $tmp/NAME.out and $tmp/NAME.err) and waits up to 60 s for its "serving" line;
# sets URL and PID. Returns 1, with the end of its stderr as "# " lines, if it exits first or
# does not serve in time.
start() {
    name=$1; shift
    "$srv" --port 0 --log-level warn "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
    PID=$!
    pids="$pids $PID"
    URL=""
    i=0
    while [ $i -lt 600 ]; do
        URL=$(sed -n 's/^llaisys-server: serving .* at \(http:[^ ]*\)$/\1/p' "$tmp/$name.out" 2>/dev/null)
        [ -n "$URL" ] && return 0
        kill -0 "$PID" 2>/dev/null || break
        sleep 0.1
        i=$((i + 1))
    done
    echo "# server $name did not start:"; sed 's/^/# /' "$tmp/$name.err" | tail -n 20
    return 1
}

# stop NAME: SIGTERM the current server (PID) and check that it exits 0 (under ASan: without
# leaks; under TSan: without a report).
stop() {
    kill -TERM "$PID"; wait "$PID"; rc=$?
    [ $rc -eq 0 ] || sed 's/^/# /' "$tmp/$1.err" | tail -n 20
    check "$1 server: SIGTERM, exit 0" $rc
}

# chat BODY: POST the JSON object BODY to $URL/v1/chat/completions; prints the response.
chat() { curl -s -m 60 -H 'Content-Type: application/json' -d "$1" "$URL/v1/chat/completions"; }

# stream_matches MEMBERS ANSWER: sends {MEMBERS,"stream":true} (MEMBERS: a request's members
# without the braces) and succeeds when the stream ends with [DONE] and its deltas
# (reasoning_content, then content) add up to ANSWER's message, ANSWER being the same request's
# response without streaming.
stream_matches() {
    st=$(curl -s -N -m 60 -H 'Content-Type: application/json' -d "{$1,\"stream\":true}" \
        "$URL/v1/chat/completions")
    text=$(printf '%s\n' "$st" | sed -n 's/^data: //p' | grep -v '^\[DONE\]$' |
        jq -j '.choices[0].delta | (.reasoning_content // "") + (.content // "")')
    want=$(printf '%s' "$2" | jq -j '.choices[0].message |
        (.reasoning_content // "") + (.content // "")')
    printf '%s\n' "$st" | grep -q '^data: \[DONE\]$' && [ "$text" = "$want" ]
}

# metric NAME [LABEL]: the value of the first sample NAME{...} of $URL/metrics whose line holds
# LABEL ($MKEY: curl arguments the scrape needs, e.g. an Authorization header).
metric() {
    curl -s -m 60 ${MKEY:-} "$URL/metrics" | grep "^$1{" | grep -F "${2:-}" | head -n 1 |
        sed 's/.* //'
}

# wait_metric NAME LABEL VALUE [SECONDS]: waits up to SECONDS (default 30) for that sample to
# equal VALUE; returns 1 if it never does.
wait_metric() {
    i=0
    while [ $i -lt $((${4:-30} * 10)) ]; do
        [ "$(metric "$1" "$2")" = "$3" ] && return 0
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}

#!/bin/sh
# cli_robust.sh: regression tests for what was found when the server was tried as an attacker
# would (issue 16): a NUL escape in request text is refused with a 400 instead of silently
# cutting the text; one API key cannot cancel another key's requests, even under the same
# X-Request-Id; a tokenizer.json whose vocab repeats an id or a token is refused with a message.
# The server under test is $LLAISYS_SERVER (default ./llaisys-server), the CLI $LLAISYS_CLI.
model=tests/fixtures/tiny-qwen2
cli="${LLAISYS_CLI:-./llaisys-cli}"
. tests/lib/harness.sh # $srv, $tmp, $pids, check, start, stop

for tool in curl jq; do
    command -v "$tool" >/dev/null || { echo "not ok robust tests need $tool"; exit 0; }
done
c() { curl -s -m 30 "$@"; }
code() { curl -s -m 30 -o /dev/null -w '%{http_code}' "$@"; }

# ---- tokenizer.json with a repeated vocab id or token ----
mkdir "$tmp/dup" && cp "$model"/*.json "$model"/model.safetensors "$tmp/dup/"
jq -c '.model.vocab["zzdup"] = .model.vocab["a"]' "$model/tokenizer.json" >"$tmp/dup/tokenizer.json"
printf 'a' | "$cli" tokenize --model "$tmp/dup" >/dev/null 2>"$tmp/dup.err"; rc=$?
[ $rc -ne 0 ] && grep -q 'model.vocab\["zzdup"\]: id [0-9]* is already the id of "a"' "$tmp/dup.err"
check "tokenizer.json: a vocab id given to two tokens is refused, naming both" $?
# a JSON object with the same key twice (cJSON keeps both members)
python3 - "$model/tokenizer.json" "$tmp/dup/tokenizer.json" <<'PY' 2>/dev/null
import json, sys
t = json.load(open(sys.argv[1]))
v = t["model"]["vocab"]
s = json.dumps(t)
# append a second "a" member with a fresh id after the vocab's first member
first = json.dumps(next(iter(v)))
s = s.replace('"vocab": {' + first, '"vocab": {"a": %d, ' % (max(v.values()) + 1) + first, 1)
open(sys.argv[2], "w").write(s)
PY
if [ $? -eq 0 ]; then
    printf 'a' | "$cli" tokenize --model "$tmp/dup" >/dev/null 2>"$tmp/dup2.err"; rc=$?
    [ $rc -ne 0 ] && grep -q 'model.vocab: the token "a" appears twice' "$tmp/dup2.err"
    check "tokenizer.json: a vocab token listed twice is refused" $?
fi

# ---- two keys: ownership of requests, NUL escapes ----
printf 'key-alice\nkey-bob\n' >"$tmp/keys"
start keys --model "$model" --api-key-file "$tmp/keys" || exit 0
A='Authorization: Bearer key-alice'
B='Authorization: Bearer key-bob'

out=$(c -H "$A" -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"a\u0000b"}],"max_tokens":2}' \
    -w ' %{http_code}' "$URL/v1/chat/completions")
echo "$out" | grep -q ' 400$' && echo "${out% 400}" | jq -e '.error.message | test("NUL")' >/dev/null
check "\\u0000 in a message: 400 naming NUL (not a silently cut prompt)" $?
for body in '{"prompt":"x\u0000","max_tokens":2}' '{"prompt":"x","stop":["\u0000"],"max_tokens":2}'; do
    [ "$(code -H "$A" -d "$body" "$URL/v1/completions")" = 400 ] || { rc=1; break; }
    rc=0
done
check "\\u0000 in a prompt or a stop string: 400" $rc
[ "$(code -H "$A" -d '{"prompt":"x\\u0000","max_tokens":2}' "$URL/v1/completions")" = 200 ]
check "an escaped backslash before u0000 is plain text: 200" $?

long='{"messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":4000,"temperature":0,"ignore_eos":true,"stream":true}'
curl -s -N -m 60 -H "$A" -H 'X-Request-Id: shared-1' -d "$long" "$URL/v1/chat/completions" >"$tmp/alice" &
apid=$!
i=0
until grep -q '^data: {' "$tmp/alice" 2>/dev/null || [ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
jid=$(grep '^data: {' "$tmp/alice" | head -n 1 | sed 's/^data: //' | jq -r .id)
b1=$(code -H "$B" -X POST "$URL/v1/requests/shared-1/cancel")
b2=$(code -H "$B" -X POST "$URL/v1/requests/$jid/cancel")
kill -0 $apid 2>/dev/null; alive=$?
[ "$b1" = 404 ] && [ "$b2" = 404 ] && [ $alive -eq 0 ]
check "another key cannot cancel a request, by X-Request-Id or by id: 404, it goes on" $?
a1=$(code -H "$A" -X POST "$URL/v1/requests/shared-1/cancel")
wait $apid
[ "$a1" = 200 ] &&
    [ "$(grep '^data: {' "$tmp/alice" | tail -n 1 | sed 's/^data: //' | jq -r '.choices[0].finish_reason')" = cancelled ]
check "the owning key cancels its request" $?
stop keys

# ---- slow and idle connections (slowloris): the head deadline and the per-address limit ----
if command -v python3 >/dev/null; then
    start slow --model "$model" --header-timeout 2 --max-connections-per-ip 40 || exit 0
    port=${URL##*:}
    # 15 sockets trickling one header byte every 0.5 s, 15 silent ones (under the per-address
    # limit of 40): /health must answer meanwhile, and every slow one be cut by ~2 s
    python3 - "$port" >"$tmp/slow.out" 2>&1 <<'PY' &
import socket, sys, time
port = int(sys.argv[1])
socks = []
for i in range(30):
    try:
        socks.append(socket.create_connection(("127.0.0.1", port), timeout=1))
    except OSError:
        pass
trickle = socks[:15]
start = time.time()
cut = set()
while time.time() - start < 6 and len(cut) < len(socks):
    for i, s in enumerate(socks):
        if i in cut:
            continue
        try:
            if s in trickle:
                s.send(b"G" if i == 0 else b"X")
            s.setblocking(False)
            try:
                if s.recv(1) == b"":
                    cut.add(i)
            except BlockingIOError:
                pass
            s.setblocking(True)
        except OSError:
            cut.add(i)
    time.sleep(0.5)
print("opened", len(socks), "cut", len(cut), "after", round(time.time() - start, 1))
PY
    ppid=$!
    sleep 0.5
    ok=0
    for i in 1 2 3 4 5 6; do
        [ "$(curl -s -m 3 -o /dev/null -w '%{http_code}' "$URL/health")" = 200 ] && ok=$((ok + 1))
        sleep 0.5
    done
    wait $ppid
    sed 's/^/# /' "$tmp/slow.out"
    [ $ok -ge 5 ]
    check "slow and silent connections: /health answers meanwhile ($ok of 6 probes)" $?
    set -- $(cat "$tmp/slow.out")
    [ "$2" -ge 1 ] && [ "$2" = "$4" ] && awk -v t="$6" 'BEGIN { exit !(t <= 5) }'
    check "every slow connection is cut by the head deadline (2 s) within 5 s" $?
    [ "$(code "$URL/health")" = 200 ]
    check "after the slow connections, /health answers" $?
    # the per-address limit: with 40 idle sockets open, the 41st from that address is closed
    python3 - "$port" >"$tmp/ip.out" 2>&1 <<'PY'
import socket, sys, time
port = int(sys.argv[1])
socks = [socket.create_connection(("127.0.0.1", port), timeout=2) for _ in range(40)]
time.sleep(0.3)
extra = socket.create_connection(("127.0.0.1", port), timeout=2)
try:
    extra.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    got = extra.recv(100)
except OSError:
    got = b""
print("closed" if not got.startswith(b"HTTP/1.1 200") else "served")
PY
    grep -q closed "$tmp/ip.out"
    check "--max-connections-per-ip 40: the 41st connection from one address is closed" $?
    sleep 2.5
    [ "$(code "$URL/health")" = 200 ]
    check "once the idle ones are cut, that address is served again" $?
    stop slow
fi

# ---- HTTP-layer errors in the OpenAI JSON shape; Host; absolute-form targets ----
start http --model "$model" || exit 0
long_url="$URL/v1/models/$(head -c 9000 /dev/zero | tr '\0' a)"
got=$(c -D "$tmp/h414" -o "$tmp/b414" -w '%{http_code}' "$long_url")
[ "$got" = 414 ] && jq -e '.error.code == "uri_too_long"' "$tmp/b414" >/dev/null &&
    grep -qi '^x-request-id:' "$tmp/h414"
check "URL over 8 KiB: 414 in the OpenAI error shape with X-Request-Id" $?
big=$(head -c 20000 /dev/zero | tr '\0' b)
got=$(c -D "$tmp/h431" -o "$tmp/b431" -w '%{http_code}' -H "X-A: $big" -H "X-B: $big" "$URL/health")
[ "$got" = 431 ] && jq -e '.error.code == "headers_too_large"' "$tmp/b431" >/dev/null &&
    grep -qi '^x-request-id:' "$tmp/h431"
check "headers over 32 KiB: 431 in the OpenAI error shape with X-Request-Id" $?
got=$(c -D "$tmp/h413" -o "$tmp/b413" -w '%{http_code}' -H 'Content-Length: 99999999999' -d x "$URL/v1/completions")
[ "$got" = 413 ] && jq -e '.error.type == "invalid_request_error"' "$tmp/b413" >/dev/null &&
    grep -qi '^x-request-id:' "$tmp/h413"
check "huge Content-Length: 413 in the OpenAI error shape" $?
port=${URL##*:}
python3 - "$port" >"$tmp/raw.out" 2>&1 <<'PY'
import socket, sys
port = int(sys.argv[1])
def ask(req):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(req)
    data = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        data += d
    s.close()
    return data.decode("latin-1")
r = ask(b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n")
print("nohost", r.split(" ")[1], "missing_host" in r)
r = ask(b"GET http://example.com/health HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n")
print("absolute", r.split(" ")[1])
r = ask(b"GET /health HTTP/1.0\r\n\r\n")
print("http10", r.split(" ")[1])
PY
grep -q '^nohost 400 True$' "$tmp/raw.out"
check "HTTP/1.1 without Host: 400 missing_host" $?
grep -q '^absolute 200$' "$tmp/raw.out"
check "absolute-form target (GET http://host/health): served as /health" $?
grep -q '^http10 200$' "$tmp/raw.out"
check "HTTP/1.0 without Host: served" $?
stop http

# ---- SIGTERM: the listening socket closes at once, the stream in flight finishes ----
start term --model "$model" --shutdown-grace 30 || exit 0
mid='{"messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":150,"temperature":0,"ignore_eos":true,"stream":true}'
curl -s -N -m 60 -d "$mid" "$URL/v1/chat/completions" >"$tmp/term1" &
tp=$!
i=0
until grep -q '^data: {' "$tmp/term1" 2>/dev/null || [ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
kill -TERM "$PID"
sleep 0.3
t0=$(date +%s.%N)
curl -s -m 10 -o /dev/null "$URL/health"; crc=$?
t1=$(date +%s.%N)
wait "$PID"; rc=$?
wait $tp
[ $crc -eq 7 ] && awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 2) }'
check "during the shutdown grace a new connection is refused at once (curl exit $crc)" $?
fin=$(grep '^data: {' "$tmp/term1" | tail -n 1 | sed 's/^data: //' | jq -r '.choices[0].finish_reason')
[ $rc -eq 0 ] && [ "$(tail -n 2 "$tmp/term1" | head -n 1)" = "data: [DONE]" ] && [ "$fin" = length ]
r=$?
[ $r -eq 0 ] || { tail -n 3 "$tmp/term1"; sed 's/^/# /' "$tmp/term.err" | tail -n 20; } | sed 's/^/# /'
check "the stream in flight at SIGTERM finishes (finish_reason $fin, [DONE]), exit $rc" $r

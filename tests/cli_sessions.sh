#!/bin/sh
# cli_sessions.sh: server-side sessions on the tiny-qwen2 fixture with curl and jq: a 5-turn
# conversation whose prefix stays cached (usage.prompt_tokens_details.cached_tokens) while
# other traffic cycles a small KV pool, with a control run without a session that loses it;
# the X-Session-Id header; POST/GET/DELETE /v1/sessions; expiry (--session-ttl), the session
# limit (--max-sessions), ownership under API keys, edit/regenerate, cache_prompt=false,
# bad ids; the session metrics; SIGTERM exit 0. Loopback only; every curl has a time limit.
model=tests/fixtures/tiny-qwen2
. tests/lib/harness.sh # $srv, $tmp, $pids, check, start, stop

for tool in curl jq; do
    command -v "$tool" >/dev/null || { echo "not ok session tests need $tool"; exit 0; }
done
c() { curl -s -m 60 "$@"; }
code() { curl -s -m 60 -o /dev/null -w '%{http_code}' "$@"; }
post() { p=$1; j=$2; shift 2; c -H 'Content-Type: application/json' -d "$j" "$@" "$URL$p"; }

# A small pool: 16 blocks of 16 tokens; sessions may pin half of it.
start s1 --model "$model" --host 127.0.0.1 --kv-blocks 16 --block-size 16 --max-seqs 4 \
    --session-kv-share 50 || exit 1

# filler K: a distinct ~150-token prompt, so two of them per turn cycle the unpinned blocks
filler() {
    words=$(seq "$1" 3 900 | head -n 45 | tr '\n' ' ')
    post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"$words\"}],
        \"max_tokens\":4,\"temperature\":0}" >/dev/null
}

# converse SID OUT: 5 turns; each turn's messages are the previous ones, the answer and a new
# user message. Writes "prompt_tokens cached_tokens" per turn to OUT.
converse() {
    sid=$1; out=$2; : >"$out"
    msgs=$(jq -nc --arg s "You are a terse assistant who answers every question in one short line (${sid:-no session})." '[{role:"system",content:$s}]')
    t=1
    while [ $t -le 5 ]; do
        msgs=$(printf "%s\n" "$msgs" | jq -c --arg u "question number $t about topic $t" \
            '. + [{"role":"user","content":$u}]')
        if [ -n "$sid" ]; then
            body=$(jq -nc --argjson m "$msgs" --arg s "$sid" \
                '{messages:$m,max_tokens:12,temperature:0,session_id:$s}')
        else
            body=$(jq -nc --argjson m "$msgs" '{messages:$m,max_tokens:12,temperature:0}')
        fi
        r=$(post /v1/chat/completions "$body")
        printf "%s\n" "$r" | jq -e .usage >/dev/null || echo "# turn $t: $r"
        common=0
        [ -n "$sid" ] && common=$(c "$URL/v1/sessions/$sid" | jq -r .last_turn.common_prefix)
        printf "%s\n" "$r" | jq -r --arg k "$common" '"\(.usage.prompt_tokens) \(.usage.prompt_tokens_details.cached_tokens // 0) \($k)"' >>"$out"
        ans=$(printf "%s\n" "$r" | jq -r '.choices[0].message.content')
        msgs=$(printf "%s\n" "$msgs" | jq -c --arg a "$ans" '. + [{"role":"assistant","content":$a}]')
        filler $((t * 7)); filler $((t * 7 + 1))
        t=$((t + 1))
    done
}

# every turn after the first takes from the cache every full block of what its prompt shares
# with the session's history (column 3; the template re-renders the last answer, so the shared
# part ends a few tokens before the previous prompt's end), and that is most of the prompt
all_cached() {
    awk 'NR > 1 { want = int(($3 < $1 ? $3 : $1 - 1) / 16) * 16
                  if ($2 < want || $2 == 0 || $3 < prev - 8) bad = 1 } { prev = $1 }
         END { exit bad }' "$1"
}
# the control has no history column: take each turn's previous prompt as the shared part
fill_common() { awk 'NR == 1 { print $1, $2, 0 } NR > 1 { print $1, $2, prev - 8 } { prev = $1 }' "$1"; }
converse chat-1 "$tmp/with"
sed 's/^/# with session: prompt cached: /' "$tmp/with"
all_cached "$tmp/with"; check "5 turns through a session: each turn computes only its new tokens" $?
converse "" "$tmp/without"
sed 's/^/# without: prompt cached: /' "$tmp/without"
fill_common "$tmp/without" >"$tmp/without3"
! all_cached "$tmp/without3"; check "control: without a session the other traffic evicts the prefix" $?

g=$(c "$URL/v1/sessions/chat-1")
[ "$(printf "%s\n" "$g" | jq -r .id)" = chat-1 ] && [ "$(printf "%s\n" "$g" | jq -r .turns)" = 5 ] &&
    [ "$(printf "%s\n" "$g" | jq -r .tokens)" -gt "$(tail -n 1 "$tmp/with" | cut -d' ' -f1)" ] &&
    [ "$(printf "%s\n" "$g" | jq -r .pinned_blocks)" -ge 1 ]
check "GET /v1/sessions/{id}: turns, token history, pinned blocks" $?
[ "$(metric llaisys_sessions_active)" = 1 ] && [ "$(metric llaisys_session_hits_total)" -ge 4 ] &&
    [ "$(metric llaisys_session_tokens_saved_total)" -gt 0 ] &&
    [ "$(metric llaisys_session_pinned_blocks)" -ge 1 ]
check "metrics: sessions active, hits, tokens saved, pinned blocks" $?

# edit/regenerate: a turn that does not extend the history still works, history replaced
r=$(post /v1/chat/completions '{"messages":[{"role":"system","content":"You are a terse assistant who answers every question in one short line (chat-1)."},
    {"role":"user","content":"an edited first question"}],"max_tokens":5,"temperature":0,
    "session_id":"chat-1"}')
t2=$(c "$URL/v1/sessions/chat-1" | jq -r .tokens)
[ "$(printf "%s\n" "$r" | jq -r .object)" = chat.completion ] &&
    [ "$(printf "%s\n" "$r" | jq -r .usage.prompt_tokens_details.cached_tokens)" -ge 16 ] &&
    echo "# edited: $(printf '%s' "$r" | jq -c .usage) history $t2" &&
    [ "$t2" -eq $(($(printf "%s\n" "$r" | jq -r .usage.prompt_tokens) + $(printf "%s\n" "$r" | jq -r .usage.completion_tokens))) ]
check "edited turn: common prefix reused, history replaced" $?

# header form, streaming
post /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,
    "stream":true}' -H 'X-Session-Id: hdr-1' >"$tmp/sse"
grep -q '\[DONE\]' "$tmp/sse" && [ "$(c "$URL/v1/sessions/hdr-1" | jq -r .turns)" = 1 ]
check "X-Session-Id header, streamed turn" $?

# create, delete
cr=$(post /v1/sessions '{}')
id=$(printf "%s\n" "$cr" | jq -r .id)
[ "$(printf "%s\n" "$cr" | jq -r .tokens)" = 0 ] && [ "$(code -X DELETE "$URL/v1/sessions/$id")" = 200 ] &&
    [ "$(code "$URL/v1/sessions/$id")" = 404 ] && [ "$(code -X DELETE "$URL/v1/sessions/$id")" = 404 ]
check "POST /v1/sessions, DELETE, then 404" $?
before=$(metric llaisys_session_pins)
[ "$(c "$URL/v1/sessions/chat-1" | jq -r .pinned_blocks)" -ge 1 ] &&
    [ "$(code -X DELETE "$URL/v1/sessions/chat-1")" = 200 ] &&
    i=0 && while [ $i -lt 50 ] && [ "$(metric llaisys_session_pins)" != $((before - 1)) ]; do sleep 0.1; i=$((i + 1)); done &&
    [ "$(metric llaisys_session_pins)" = $((before - 1)) ]
check "DELETE releases the session's pinned blocks" $?
[ "$(post /v1/sessions '{"id":"fixed-1"}' | jq -r .id)" = fixed-1 ] &&
    [ "$(code -H 'Content-Type: application/json' -d '{"id":"fixed-1"}' "$URL/v1/sessions")" = 400 ]
check "POST /v1/sessions with an id; the same id again is 400" $?

# bad input
e=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"session_id":"a b"}')
[ "$(printf "%s\n" "$e" | jq -r .error.param)" = session_id ] &&
    [ "$(code -H 'Content-Type: application/json' -d '{"messages":[{"role":"user","content":"x"}],"session_id":5}' "$URL/v1/chat/completions")" = 400 ] &&
    [ "$(code -H 'Content-Type: application/json' -d '{"messages":[{"role":"user","content":"x"}],"session_id":"s","n":2}' "$URL/v1/chat/completions")" = 400 ] &&
    [ "$(code -H 'Content-Type: application/json' -d '{"id":7}' "$URL/v1/sessions")" = 400 ] &&
    [ "$(code -H 'Content-Type: application/json' -d '{"messages":[{"role":"user","content":"x"}],"cache_prompt":"no"}' "$URL/v1/chat/completions")" = 400 ] &&
    [ "$(code -X PUT "$URL/v1/sessions/x")" = 400 ]
check "bad session ids, types, n > 1 with a session, wrong method: 400" $?

# cache_prompt / reuse_prefix false: the same prompt twice is computed twice
pp='"prompt":"one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty twenty-one","max_tokens":2,"temperature":0'
post /v1/completions "{$pp}" >/dev/null
a=$(post /v1/completions "{$pp,\"cache_prompt\":false}" | jq -r '.usage.prompt_tokens_details.cached_tokens // 0')
b=$(post /v1/completions "{$pp,\"reuse_prefix\":true}" | jq -r '.usage.prompt_tokens_details.cached_tokens // 0')
[ "$a" = 0 ] && [ "$b" -ge 16 ]
check "cache_prompt false: no prefix reuse for that request (reuse_prefix true: reuse)" $?
stop s1

# limits: ttl and max sessions
start s2 --model "$model" --host 127.0.0.1 --session-ttl 1 --max-sessions 2 || exit 1
post /v1/sessions '{"id":"a"}' >/dev/null
post /v1/sessions '{"id":"b"}' >/dev/null
post /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,
    "session_id":"a"}' >/dev/null # a is the most recently used now
post /v1/sessions '{"id":"c"}' >/dev/null
[ "$(code "$URL/v1/sessions/b")" = 404 ] && [ "$(code "$URL/v1/sessions/a")" = 200 ] &&
    [ "$(metric llaisys_sessions_evicted_total)" = 1 ]
check "--max-sessions: the least recently used session goes" $?
sleep 1.6
[ "$(code "$URL/v1/sessions/a")" = 404 ] && [ "$(metric llaisys_sessions_active)" = 0 ] &&
    [ "$(metric llaisys_sessions_expired_total)" = 2 ]
check "--session-ttl: idle sessions expire" $?
stop s2

# ownership under API keys
start s3 --model "$model" --host 127.0.0.1 --api-key k1 --api-key k2 || exit 1
post /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,
    "session_id":"mine"}' -H 'Authorization: Bearer k1' >/dev/null
[ "$(code -H 'Authorization: Bearer k1' "$URL/v1/sessions/mine")" = 200 ] &&
    [ "$(code -H 'Authorization: Bearer k2' "$URL/v1/sessions/mine")" = 404 ] &&
    [ "$(code -H 'Authorization: Bearer k2' -X DELETE "$URL/v1/sessions/mine")" = 404 ] &&
    [ "$(code -H 'Authorization: Bearer k2' -H 'Content-Type: application/json' -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"session_id":"mine"}' "$URL/v1/chat/completions")" = 404 ] &&
    [ "$(code "$URL/v1/sessions/mine")" = 401 ]
check "API keys: a session belongs to the key that made it (another key: 404)" $?
stop s3

#!/bin/sh
# cli_replicas.sh: deploy/nginx/llaisys.conf on loopback: three llaisys-server replicas of the
# tiny-qwen2 fixture behind Debian's nginx (skipped, with the reason, when nginx is not
# installed). A session's turns all land on one replica (each replica's /metrics) and hit its
# cache; requests without a session spread; killing a replica mid-load ends its streams (no
# [DONE], curl reports the cut) while the others finish, and new requests go to the others.
# Only 127.0.0.1; every curl has a time limit; every process is killed on exit.
model=tests/fixtures/tiny-qwen2
. tests/lib/harness.sh # $srv, $tmp, $pids, check, start

nginx=$(command -v nginx || ls /usr/sbin/nginx 2>/dev/null)
if [ -z "$nginx" ]; then
    echo "ok replicas test skipped: nginx is not installed (apt-get install nginx)"
    exit 0
fi
for tool in curl jq; do
    command -v "$tool" >/dev/null || { echo "not ok replicas tests need $tool"; exit 0; }
done
c() { curl -s -m 60 "$@"; }
metric() { c "$1/metrics" | grep "^$2{" | head -n 1 | sed 's/.* //'; }

ports=""
for r in 1 2 3; do
    start "r$r" --model "$model" --host 127.0.0.1 || exit 1
    eval "url$r=\$URL pid$r=\$PID"
    ports="$ports ${URL##*:}"
done
set -- $ports

# nginx on a free loopback port, with the deploy file's blocks and the replicas' ports
mkdir -p "$tmp/nginx"
i=0
while [ $i -lt 20 ]; do
    lbport=$((20000 + ($$ * 7 + i * 131) % 30000))
    sed -e "s/127.0.0.1:8001/127.0.0.1:$1/; s/127.0.0.1:8002/127.0.0.1:$2/" \
        -e "s/127.0.0.1:8003/127.0.0.1:$3/; s/listen 127.0.0.1:8000/listen 127.0.0.1:$lbport/" \
        deploy/nginx/llaisys.conf >"$tmp/nginx/llaisys.conf"
    cat >"$tmp/nginx/nginx.conf" <<EOC
worker_processes 1;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/error.log;
events { worker_connections 256; }
http {
    access_log $tmp/nginx/access.log;
    client_body_temp_path $tmp/nginx/body;
    proxy_temp_path $tmp/nginx/proxy;
    fastcgi_temp_path $tmp/nginx/fastcgi;
    uwsgi_temp_path $tmp/nginx/uwsgi;
    scgi_temp_path $tmp/nginx/scgi;
    include $tmp/nginx/llaisys.conf;
}
EOC
    "$nginx" -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" -g 'daemon off; master_process off;' 2>"$tmp/nginx/start.err" &
    npid=$!
    pids="$pids $npid"
    j=0
    while [ $j -lt 50 ] && kill -0 $npid 2>/dev/null; do
        [ "$(curl -s -m 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$lbport/health")" = 200 ] && break
        sleep 0.1
        j=$((j + 1))
    done
    kill -0 $npid 2>/dev/null && break
    i=$((i + 1))
done
LB=http://127.0.0.1:$lbport
[ "$(curl -s -m 5 "$LB/health" | jq -r .status)" = ok ]
check "nginx in front of 3 replicas answers /health" $? || exit 0

# a session's 5 turns: all on one replica, each after the first hitting its cache
msgs='[]'
hits=0
t=1
while [ $t -le 5 ]; do
    msgs=$(printf '%s\n' "$msgs" | jq -c --arg u "turn $t: tell me everything you know about the number $t and why it matters to anyone" '. + [{"role":"user","content":$u}]')
    r=$(c -H 'Content-Type: application/json' -H 'X-Session-Id: conv-1' \
        -d "$(jq -nc --argjson m "$msgs" '{messages:$m,max_tokens:8,temperature:0}')" \
        "$LB/v1/chat/completions")
    [ "$(printf '%s\n' "$r" | jq -r '.usage.prompt_tokens_details.cached_tokens // 0')" -gt 0 ] && hits=$((hits + 1))
    a=$(printf '%s\n' "$r" | jq -r '.choices[0].message.content')
    msgs=$(printf '%s\n' "$msgs" | jq -c --arg a "$a" '. + [{"role":"assistant","content":$a}]')
    t=$((t + 1))
done
owners=0
for r in 1 2 3; do
    eval "u=\$url$r"
    n=$(metric "$u" llaisys_sessions_active)
    echo "# replica $r: sessions $n, session hits $(metric "$u" llaisys_session_hits_total)"
    [ "$n" = 1 ] && owners=$((owners + 1)) && owner=$r
done
eval "ou=\$url$owner"
[ $owners -eq 1 ] && [ $hits -ge 4 ] && [ "$(metric "$ou" llaisys_session_hits_total)" -ge 4 ]
check "a session's turns all land on one replica and hit its cache" $?

# without a session: spread over the replicas
k=0
while [ $k -lt 15 ]; do
    c -o /dev/null -H 'Content-Type: application/json' \
        -d '{"prompt":"hello","max_tokens":1}' "$LB/v1/completions"
    k=$((k + 1))
done
used=0
for r in 1 2 3; do
    eval "u=\$url$r"
    n=$(metric "$u" llaisys_request_success_total | head -n 1)
    s=$(c "$u/metrics" | grep '^llaisys_request_success_total{' | sed 's/.* //' | awk '{s += $1} END {print s + 0}')
    echo "# replica $r: finished choices $s"
    [ "$s" -ge 2 ] && used=$((used + 1))
done
[ $used -ge 2 ]
check "requests without a session spread over the replicas" $?

# kill a replica mid-load: its streams end without [DONE]; the others finish; new requests
# go to the surviving replicas
k=1
while [ $k -le 6 ]; do
    curl -s -N -m 120 -H 'Content-Type: application/json' -d '{"prompt":"count","max_tokens":200,
        "ignore_eos":true,"stream":true}' "$LB/v1/completions" >"$tmp/stream$k" 2>/dev/null &
    eval "cpid$k=\$!"
    k=$((k + 1))
done
sleep 0.5
# the replica with the most streams running
victim=1 most=-1
for r in 1 2 3; do
    eval "u=\$url$r"
    n=$(metric "$u" llaisys_num_requests_running)
    [ "${n:-0}" -gt $most ] && most=$n && victim=$r
done
echo "# killing replica $victim ($most streams running)"
eval "kill -9 \$pid$victim"
cut=0 done=0 bad=0
k=1
while [ $k -le 6 ]; do
    eval "wait \$cpid$k"; rc=$?
    echo "# stream $k: curl exit $rc, $(grep -c '^data: {' "$tmp/stream$k") chunks"
    if grep -q '^data: \[DONE\]' "$tmp/stream$k"; then
        [ $rc -eq 0 ] && done=$((done + 1)) || bad=$((bad + 1))
    else
        [ $rc -ne 0 ] && [ $rc -ne 28 ] && cut=$((cut + 1)) || bad=$((bad + 1))
    fi
    k=$((k + 1))
done
echo "# streams: $done finished, $cut cut by the kill, $bad other"
[ $bad -eq 0 ] && [ $((done + cut)) -eq 6 ]
check "killing a replica mid-load: its streams end cleanly (no [DONE], curl sees the cut)" $?
ok=0
k=0
while [ $k -lt 8 ]; do
    [ "$(curl -s -m 30 -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
        -d '{"prompt":"again","max_tokens":2}' "$LB/v1/completions")" = 200 ] && ok=$((ok + 1))
    k=$((k + 1))
done
[ $ok -eq 8 ]
check "after the kill, new requests go to the other replicas (8/8 answered)" $?
kill "$npid" 2>/dev/null; wait "$npid" 2>/dev/null

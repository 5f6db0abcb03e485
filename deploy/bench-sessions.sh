#!/bin/sh
# bench-sessions.sh: the "Running several replicas" TTFT figure: a conversation's 5th turn with
# session affinity (X-Session-Id) versus without (turns spread over the replicas), through nginx
# configured from deploy/nginx/llaisys.conf. Starts $REPLICAS (default 3) llaisys-server
# replicas of $MODEL (default models/qwen2-small-random) on 127.0.0.1:18611..., one nginx on
# 127.0.0.1:18610 (no master process, so stopping it leaves no worker behind), runs
# deploy/bench-sessions.mjs with the arguments given, then stops everything.
#
#   sh deploy/bench-sessions.sh [--conversations N] [--rounds R] [--system-words W] ...
# Needs nginx (Debian: apt-get install -y nginx), node and a built tree; run from anywhere.
cd "$(dirname "$0")/.." || exit 1
model="${MODEL:-models/qwen2-small-random}"
n="${REPLICAS:-3}"
command -v nginx >/dev/null || { echo "bench-sessions.sh: nginx not found (apt-get install -y nginx)" >&2; exit 1; }
[ -x ./llaisys-server ] || { echo "bench-sessions.sh: ./llaisys-server missing (make -j2 llaisys-server)" >&2; exit 1; }
[ -f "$model/config.json" ] || { echo "bench-sessions.sh: no model at $model (set MODEL=DIR)" >&2; exit 1; }

T=$(mktemp -d) || exit 1
pids=""
trap 'for p in $pids; do kill "$p" 2>/dev/null; done; wait; rm -rf "$T"' EXIT
trap 'exit 1' INT TERM

servers=""
for i in $(seq 1 "$n"); do
    ./llaisys-server --model "$model" --host 127.0.0.1 --port "1861$i" --log-level warn \
        ${SERVER_ARGS:-} >"$T/r$i.out" 2>&1 &
    pids="$pids $!"
    servers="$servers    server 127.0.0.1:1861$i max_fails=1 fail_timeout=10s;\n"
done
# the shipped configuration with this run's replicas and port
sed -e '/server 127.0.0.1:800[123]/d' -e 's/listen 127.0.0.1:8000/listen 127.0.0.1:18610/' \
    deploy/nginx/llaisys.conf |
    awk -v s="$servers" '{print} /hash \$llaisys_affinity consistent;/{printf s}' >"$T/llaisys.conf"
mkdir -p "$T/ngx"
cat >"$T/nginx.conf" <<EOF
worker_processes 1;
pid $T/ngx/pid;
error_log $T/ngx/error.log;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path $T/ngx/b; proxy_temp_path $T/ngx/p; fastcgi_temp_path $T/ngx/f;
    uwsgi_temp_path $T/ngx/u; scgi_temp_path $T/ngx/s;
    include $T/llaisys.conf;
}
EOF
nginx -p "$T/ngx" -c "$T/nginx.conf" -g 'daemon off; master_process off;' &
pids="$pids $!"

# every replica answers /health (model loaded), and nginx passes requests on
for i in $(seq 1 "$n"); do
    k=0
    until curl -sf "http://127.0.0.1:1861$i/health" >/dev/null; do
        k=$((k + 1))
        if [ $k -gt 600 ]; then echo "bench-sessions.sh: replica $i did not start:" >&2; cat "$T/r$i.out" >&2; exit 1; fi
        sleep 0.1
    done
done
k=0
until curl -sf http://127.0.0.1:18610/health >/dev/null; do
    k=$((k + 1))
    if [ $k -gt 100 ]; then echo "bench-sessions.sh: nginx did not start:" >&2; cat "$T/ngx/error.log" >&2; exit 1; fi
    sleep 0.1
done

echo "== $n replicas of $model behind nginx (deploy/nginx/llaisys.conf)"
node deploy/bench-sessions.mjs --url http://127.0.0.1:18610 "$@"

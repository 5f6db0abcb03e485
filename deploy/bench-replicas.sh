#!/bin/sh
# bench-replicas.sh: the "Running several replicas" figures: tiny-qwen2 replicas on 127.0.0.1:18601-3,
# one nginx per replica count (1870N) from deploy/nginx/llaisys.conf, bench-serve 8 clients
# (nginx without a master process, so that killing it leaves no worker behind).
# Run from anywhere; needs nginx and a built tree at /work/wt/sessions (edit the cd line).
cd "$(dirname "$0")/.."
T=$(mktemp -d); pids=""
trap 'for p in $pids; do kill $p 2>/dev/null; done' EXIT
for i in 1 2 3; do ./llaisys-server --model tests/fixtures/tiny-qwen2 --host 127.0.0.1 --port 1860$i --log-level warn >$T/r$i.out 2>&1 & pids="$pids $!"; done
sleep 3
for n in 1 2 3; do
  servers=""; for i in $(seq 1 $n); do servers="$servers    server 127.0.0.1:1860$i max_fails=1 fail_timeout=10s;\n"; done
  sed -e '/server 127.0.0.1:800[123]/d' -e "s/listen 127.0.0.1:8000/listen 127.0.0.1:1870$n/" deploy/nginx/llaisys.conf | awk -v s="$servers" '{print} /hash \$llaisys_affinity consistent;/{printf s}' > $T/l$n.conf
  mkdir -p $T/n$n
  printf 'worker_processes 1;\npid %s/n%s/pid;\nerror_log %s/n%s/err;\nevents { worker_connections 256; }\nhttp { access_log off; client_body_temp_path %s/n%s/b; proxy_temp_path %s/n%s/p; fastcgi_temp_path %s/n%s/f; uwsgi_temp_path %s/n%s/u; scgi_temp_path %s/n%s/s; include %s/l%s.conf; }\n' $T $n $T $n $T $n $T $n $T $n $T $n $T $n $T $n > $T/n$n.conf
  nginx -p $T/n$n -c $T/n$n.conf -g 'daemon off; master_process off;' & pids="$pids $!"
done
sleep 1
echo "== direct, one replica"; ./llaisys-cli bench-serve --url http://127.0.0.1:18601 --clients 8 --requests 32 --max-tokens 64 --timeout 60 2>&1 | tail -3
for n in 1 2 3; do echo "== nginx, $n replica(s)"; ./llaisys-cli bench-serve --url http://127.0.0.1:1870$n --clients 8 --requests 32 --max-tokens 64 --timeout 60 2>&1 | tail -3; done

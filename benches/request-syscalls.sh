#!/usr/bin/env bash
# System calls of a whole tokenmeter process over N non-streamed requests
# (one keep-alive connection, in front of `tokenmeter sim`), counted by
# `strace -c -f`: how many reads a request costs, and how many of them fail
# (EAGAIN). Needs strace and a release build.
#
#   benches/request-syscalls.sh [BIN] [N]     # default target/release/tokenmeter, 1000
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/tokenmeter} n=${2:-1000}
sim_bin=target/release/tokenmeter
dir=$(mktemp -d)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
sim=$(port) px=$(port) adm=$(port)
"$sim_bin" sim --listen "127.0.0.1:$sim" --ttft-ms 0 --itl-ms 1 --tokens 10 >/dev/null 2>&1 &
sim_pid=$!
trap 'kill $sim_pid 2>/dev/null; pkill -TERM -f "$dir/c.yaml" 2>/dev/null; rm -rf "$dir"' EXIT
printf 'listen: 127.0.0.1:%s\nadmin:\n  listen: 127.0.0.1:%s\nroutes:\n  - name: bench\n    upstream: http://127.0.0.1:%s\n    protocol: auto\n' \
    "$px" "$adm" "$sim" >"$dir/c.yaml"
TOKENMETER_LOG=warn strace -f -c -o "$dir/strace" "$bin" serve --config "$dir/c.yaml" >/dev/null 2>&1 &
strace_pid=$!
python3 - "$px" "$n" <<'PY'
import http.client, json, socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
for _ in range(300):
    try:
        socket.create_connection(('127.0.0.1', port), 0.5).close(); break
    except OSError:
        time.sleep(0.1)
body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False})
c = http.client.HTTPConnection('127.0.0.1', port, timeout=30)
for _ in range(n):
    c.request('POST', '/v1/chat/completions', body, {'content-type': 'application/json'})
    r = c.getresponse(); r.read()
    if r.status != 200: raise SystemExit(f'status {r.status}')
PY
# The proxy, not strace, gets the signal: strace then writes its counts.
pkill -TERM -f "$bin serve --config $dir/c.yaml"
wait $strace_pid || true
echo "$n requests (the probe connection that waited for the port adds a few calls)"
grep -E 'calls|----|recv|read|writev|epoll_wait' "$dir/strace"

#!/usr/bin/env bash
# What the kernel's receive timestamps cost the host: a `perf record -a`
# profile of both cores during a `tokenmeter bench` leg (250 streams), and
# the share of its samples that read the wall clock for a received packet
# (`ktime_get_with_offset` under the receive path) or build the proxy's
# timestamp control message (`tcp_recv_timestamp`). Needs perf and a
# release build.
#
#   benches/receive-stamp-cost.sh [BIN]     # default target/release/tokenmeter
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/tokenmeter}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$bin" bench --concurrency 250 --itl-ms 20 --tokens 50 --duration 8s --warmup 2s --rounds 1 \
    --settle 1s --legs tokenmeter >"$out/bench" 2>&1 &
bench=$!
sleep 6 # into the measured window
perf record -F 4000 -a -g -o "$out/perf.data" -- sleep 5 >/dev/null 2>&1
wait $bench
grep -E '^tokenmeter +[0-9]+ +[0-9]+ ' "$out/bench" | head -1
perf script -i "$out/perf.data" 2>/dev/null | awk -v hz=4000 -v secs=5 'BEGIN { RS = "" }
    { total++ }
    /ktime_get_with_offset/ && /(netif_receive|process_backlog|ip_local_deliver|net_timestamp)/ { rx++ }
    /tcp_recv_timestamp/ { msg++ }
    END {
        printf "%d samples; wall-clock reads on the receive path %d, timestamp control messages %d: %.2f %% of the machine, %.2f ms of CPU per second\n",
            total, rx, msg, 100 * (rx + msg) / total, 1000 * (rx + msg) / hz / secs
    }'

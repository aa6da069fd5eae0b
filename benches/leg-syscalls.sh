#!/usr/bin/env bash
# System calls of each proxy on its core while it forwards the Poisson
# scenario (200 req/s of 50 chunks at 20 ms): `tokenmeter bench` runs the
# legs one after another, and `perf stat -C 0` counts, for 4 s inside each
# leg's measured window, the system calls made on core 0, where the bench
# pins the proxy under test and nothing else of the rig. Needs perf (Debian:
# linux-perf), root for the tracepoints, two cores, and a release build.
#
#   benches/leg-syscalls.sh                           # tokenmeter,unmetered,nginx
#   LEGS=tokenmeter,nginx benches/leg-syscalls.sh
#   LEGS=tokenmeter,baseline BASELINE=OLD_BIN benches/leg-syscalls.sh   # two builds
set -euo pipefail
cd "$(dirname "$0")/.."
bin=target/release/tokenmeter
[ -x "$bin" ] || { echo "build first: cargo build --release" >&2; exit 1; }
legs=${LEGS:-tokenmeter,unmetered,nginx}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
calls=(epoll_wait recvfrom recvmsg writev write futex epoll_ctl accept4 close)
events=raw_syscalls:sys_enter,context-switches,page-faults
for c in "${calls[@]}"; do events+=",syscalls:sys_enter_$c"; done
baseline=()
[ -n "${BASELINE:-}" ] && baseline=(--baseline-bin "$BASELINE")
"$bin" bench --rate 200 --poisson --itl-ms 20 --tokens 50 --duration 10s --warmup 2s \
    --rounds 1 --settle 1s --legs "$legs" "${baseline[@]}" >"$out/report" 2>"$out/progress" &
bench=$!
for leg in ${legs//,/ }; do
    until grep -q "leg $leg\$" "$out/progress"; do
        kill -0 $bench 2>/dev/null || { cat "$out/progress" >&2; exit 1; }
        sleep 0.2
    done
    sleep 5 # past the warm-up
    perf stat -C 0 -x, -e "$events" -o "$out/$leg" -- sleep 4
done
wait $bench
printf '%-28s' "4 s on core 0"
for leg in ${legs//,/ }; do printf '%14s' "$leg"; done
echo
for ev in ${events//,/ }; do
    printf '%-28s' "${ev#syscalls:sys_enter_}"
    for leg in ${legs//,/ }; do
        printf '%14s' "$(awk -F, -v e="$ev" '$3 == e { print $1 }' "$out/$leg")"
    done
    echo
done
echo "chunks per second in each leg (the report's chunks/s column):"
awk '/^leg .*proxy cpu/ { exit } /^leg .*chunks\/s/ { on = 1; next } on && NF > 4 { print "  " $1, $5 }' "$out/report"

#!/usr/bin/env bash
# Instructions per forwarded chunk of a whole tokenmeter process (user space,
# every thread: forwarding, metering, runtime), counted by callgrind: unlike
# CPU time this does not move with other tenants of the machine, so two
# builds can be compared on a shared one. Needs valgrind and a release build.
#
#   benches/proxy-instructions.sh                      # target/release/tokenmeter
#   benches/proxy-instructions.sh OLD_BIN NEW_BIN      # two builds, same load
#
# Each binary runs as the `baseline` leg of `tokenmeter bench` under
# callgrind, twice: 4 streams of 400 chunks at 5 ms, for a short and a long
# measured window. The figure is the difference in instructions divided by
# the difference in chunks, so start-up and shutdown cancel out; requests
# (one per 400 chunks) are included. Kernel work (syscalls) is not counted.
#
# STREAMS, ITL_MS and TOKENS change the load (4, 5 and 400 by default);
# CACHE=1 also simulates the caches (callgrind --cache-sim=yes, the host's
# cache sizes) and prints the data-cache misses per chunk, first level
# (D1) and last level (LL), reads and writes together.
#
# UNMETERED=1 runs each binary with its route's `protocol: none` (forwarding
# without metering, as the bench's `unmetered` leg), so that a binary's
# figure with and without it is what metering costs per chunk. With
# TOKENS=50 and TOKENS=400 the two figures also split the cost per chunk
# from the cost per request (a figure is per chunk + per request / chunks
# per request).
#
# Beside the instructions it prints the allocations per chunk (calls to
# jemalloc's allocating entry points, benches/callgrind-calls.py), by the
# same difference.
#
# The word `nginx` in place of a binary runs the bench's nginx leg under
# callgrind instead (its master and worker, `--trace-children=yes`; the
# master only waits), for the reference proxy's own figure in the same
# units (its allocations are glibc's `malloc`, `calloc` and `realloc`,
# under its pools); NGINX_BIN names another nginx than the one on the PATH.
#
# KEEP=DIR keeps the callgrind profile of each binary's long run in DIR
# (DIR/<n>.cg.<pid>, n counting the binaries from 1), for
# `callgrind_annotate --inclusive=yes DIR/1.cg.*` (where the instructions go).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
rig=target/release/tokenmeter
[ -x "$rig" ] || { echo "build first: cargo build --release" >&2; exit 1; }
[ $# -eq 0 ] && set -- "$rig"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

streams=${STREAMS:-4} itl=${ITL_MS:-5} tokens=${TOKENS:-400}
sim=""
[ -n "${CACHE:-}" ] && sim="--cache-sim=yes"

# Instructions, D1 and LL misses (0 without CACHE) and chunks of one run of
# `$1` with a measured window of `$2`.
run() {
    local bin wrapper leg children="" allocs=()
    if [ "$1" = nginx ]; then
        # glibc's allocator, under nginx's pools.
        allocs=(--match '^(malloc|calloc|realloc)$')
        bin=$(command -v "${NGINX_BIN:-nginx}") || { echo "nginx is not installed" >&2; exit 1; }
        leg=(--legs nginx --nginx)
        children="--trace-children=yes"
    else
        bin=$(realpath "$1")
        leg=(--legs baseline --baseline-bin)
    fi
    wrapper="$out/wrapper"
    rm -f "$out"/cg.*
    {
        echo '#!/bin/sh'
        if [ -n "${UNMETERED:-}" ]; then
            # The bench's generated config is the last argument
            # (`serve ... --config FILE`).
            echo 'for last; do :; done'
            echo 'sed -i "s/protocol: auto/protocol: none/" "$last"'
        fi
        printf 'exec valgrind --tool=callgrind %s %s --callgrind-out-file=%s/cg.%%p %s "$@"\n' \
            "$sim" "$children" "$out" "$bin"
    } >"$wrapper"
    chmod +x "$wrapper"
    "$rig" bench --concurrency "$streams" --itl-ms "$itl" --tokens "$tokens" --duration "$2" --warmup 2s \
        --rounds 1 --settle 1s "${leg[@]}" "$wrapper" >"$out/report" 2>&1 ||
        { cat "$out/report" >&2; exit 1; }
    local chunks counts
    chunks=$(grep -oE 'events=[0-9]+' "$out/report" | head -n 1 | cut -d= -f2)
    # The summary's events: Ir, or with the cache simulation
    # Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw.
    counts=$(cat "$out"/cg.* | awk '/^summary:/ { ir += $2; d1 += $6 + $7; ll += $9 + $10 }
        END { printf "%d %d %d", ir, d1, ll }')
    grep -q 'identical=true' "$out/report" || { echo "fidelity check failed" >&2; exit 1; }
    echo "$counts $(python3 benches/callgrind-calls.py "$out"/cg.* "${allocs[@]}") $chunks"
}

if [ -n "$sim" ]; then
    printf '%-50s %14s %12s %10s %10s %12s\n' binary instructions/chunk allocs/chunk D1/chunk LL/chunk chunks
else
    printf '%-50s %14s %12s %12s\n' binary instructions/chunk allocs/chunk chunks
fi
for bin in "$@"; do
    read -r i1 d1 l1 a1 c1 < <(run "$bin" 3s)
    read -r i2 d2 l2 a2 c2 < <(run "$bin" 9s)
    if [ -n "${KEEP:-}" ]; then
        mkdir -p "$KEEP"
        n=$(( ${n:-0} + 1 ))
        for f in "$out"/cg.*; do cp "$f" "$KEEP/$n.$(basename "$f")"; done
    fi
    c=$((c2 - c1))
    allocs=$(awk -v a="$a1" -v b="$a2" -v c="$c" 'BEGIN { printf "%.2f", (b - a) / c }')
    if [ -n "$sim" ]; then
        printf '%-50s %14s %12s %10s %10s %12s\n' "$bin" "$(( (i2 - i1) / c ))" "$allocs" \
            "$(awk -v a="$d1" -v b="$d2" -v c="$c" 'BEGIN { printf "%.1f", (b - a) / c }')" \
            "$(awk -v a="$l1" -v b="$l2" -v c="$c" 'BEGIN { printf "%.2f", (b - a) / c }')" "$c"
    else
        printf '%-50s %14s %12s %12s\n' "$bin" "$(( (i2 - i1) / c ))" "$allocs" "$c"
    fi
done

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

# Instructions and chunks of one run of `$1` with a measured window of `$2`.
run() {
    local bin wrapper
    bin=$(realpath "$1")
    wrapper="$out/wrapper"
    rm -f "$out"/cg.*
    printf '#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file=%s/cg.%%p %s "$@"\n' \
        "$out" "$bin" >"$wrapper"
    chmod +x "$wrapper"
    "$rig" bench --concurrency 4 --itl-ms 5 --tokens 400 --duration "$2" --warmup 2s \
        --rounds 1 --settle 1s --legs baseline --baseline-bin "$wrapper" >"$out/report" 2>&1 ||
        { cat "$out/report" >&2; exit 1; }
    local chunks instructions
    chunks=$(grep -oE 'events=[0-9]+' "$out/report" | head -n 1 | cut -d= -f2)
    instructions=$(cat "$out"/cg.* | awk '/^summary:/ { s += $2 } END { printf "%d", s }')
    grep -q 'identical=true' "$out/report" || { echo "fidelity check failed" >&2; exit 1; }
    echo "$instructions $chunks"
}

printf '%-50s %14s %12s\n' binary instructions/chunk chunks
for bin in "$@"; do
    read -r i1 c1 < <(run "$bin" 3s)
    read -r i2 c2 < <(run "$bin" 9s)
    if [ -n "${KEEP:-}" ]; then
        mkdir -p "$KEEP"
        n=$(( ${n:-0} + 1 ))
        for f in "$out"/cg.*; do cp "$f" "$KEEP/$n.$(basename "$f")"; done
    fi
    printf '%-50s %14s %12s\n' "$bin" "$(( (i2 - i1) / (c2 - c1) ))" "$((c2 - c1))"
done

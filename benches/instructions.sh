#!/usr/bin/env bash
# Instructions per chunk of the metering path (`meter_data` in
# benches/meter.rs), counted by callgrind: repeatable on a shared machine,
# where wall-clock figures are not. Needs valgrind (Debian: `valgrind`).
#
#   benches/instructions.sh                 # every capture
#   benches/instructions.sh openai-chat-n3.sse gemini-stream-text.sse
#   BENCH=OLD_BENCH_BINARY benches/instructions.sh   # another build's bench
#
# Each capture runs under callgrind for one second of criterion's
# `--profile-time`; the count is the inclusive cost of the bench's
# `meter_frame` (`StreamMeter::data` and the clock reading, never inlined)
# divided by its number of calls (one call per frame, one event per frame).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
bin=${BENCH:-$(cargo bench --bench meter --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "meter":
        print(m["executable"])')}
if [ $# -eq 0 ]; then
    set -- $(cd tests/data/streams && ls *.sse *.ndjson)
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf '%-42s %12s %8s\n' capture instructions frames
for name in "$@"; do
    valgrind --tool=callgrind --callgrind-out-file="$out/cg" "$bin" --bench \
        --profile-time 1 "meter_data/${name}\$" >/dev/null 2>&1
    (cd "$out" && callgrind_annotate --tree=caller cg 2>/dev/null) | python3 -c '
import re, sys
lines = sys.stdin.read().splitlines()
# The caller lines (`<`) above the `*` line of `meter_frame` carry its
# inclusive cost from each caller and the number of calls.
for i, line in enumerate(lines):
    if re.search(r"\*  .*meter::meter_frame", line):
        total = calls = 0
        j = i - 1
        while j >= 0 and (m := re.match(r"\s*([\d,]+) .*<.*\(([\d,]+)x\)", lines[j])):
            total += int(m.group(1).replace(",", ""))
            calls += int(m.group(2).replace(",", ""))
            j -= 1
        if calls:
            print(f"{sys.argv[1]:42s} {total / calls:12.0f} {calls:8d}")
            sys.exit()
print("%-42s %12s" % (sys.argv[1], "?"))
' "$name"
done

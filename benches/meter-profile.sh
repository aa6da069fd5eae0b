#!/usr/bin/env bash
# Where the metering path's instructions go, per function, for one capture:
# callgrind's count for each instruction of the bench binary, summed over
# the functions the compiler left (so inlined helpers count in their
# callers) and divided by the number of frames. Needs valgrind and objdump.
#
#   benches/meter-profile.sh openai-chat-basic-usage.sse [TOP]
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n '2,7p' "$0"; exit 2; }
capture=$1 top=${2:-18}
bin=$(cargo bench --bench meter --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "meter":
        print(m["executable"])')
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
valgrind --tool=callgrind --dump-instr=yes --compress-pos=no --compress-strings=no \
    --callgrind-out-file="$out/cg" "$bin" --bench --profile-time 1 \
    "meter_data/${capture}\$" >/dev/null 2>&1
objdump -d --no-show-raw-insn -C "$bin" >"$out/dis"
python3 - "$out" "$top" <<'PY'
import collections, re, sys
out, top = sys.argv[1], int(sys.argv[2])
cost = collections.Counter()
after_calls = False
for line in open(f"{out}/cg"):
    if line.startswith("calls="):
        after_calls = True  # the next cost line is the call's inclusive cost
        continue
    m = re.match(r"^(0x[0-9a-f]+)\s+\d+\s+(\d+)", line)
    if m:
        if not after_calls:
            cost[int(m.group(1), 16)] += int(m.group(2))
        after_calls = False
per_fn, first = collections.Counter(), {}
fn = None
for line in open(f"{out}/dis"):
    m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
    if m:
        fn = m.group(1)
        continue
    m = re.match(r"^\s+([0-9a-f]+):", line)
    if m and fn:
        c = cost.get(int(m.group(1), 16), 0)
        per_fn[fn] += c
        first.setdefault(fn, c)
frames = first.get("meter::meter_frame", 0)  # its first instruction runs once per frame
if not frames:
    sys.exit("meter_frame not found in the bench binary")
own = {n: c for n, c in per_fn.items() if not n.startswith("meter::frames")}  # not the bench's set-up
print(f"{frames} frames; {sum(own.values()) / frames:.0f} instructions per frame in all; exclusive, by function:")
for name, c in collections.Counter(own).most_common(top):
    print(f"{c / frames:8.0f}  {name[:110]}")
PY

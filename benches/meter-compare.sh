#!/usr/bin/env bash
# Wall-clock ns per chunk of the metering path (`meter_data` in
# benches/meter.rs) for two builds side by side, in rounds (A B A B ...),
# pinned to one core: the ratio is what a shared, noisy machine can tell.
#
#   benches/meter-compare.sh OLD_BENCH_BINARY NEW_BENCH_BINARY [ROUNDS] [FILTER]
#
# A bench binary is what `cargo bench --bench meter --no-run` prints
# (target/release/deps/meter-...); build the old one in a worktree of the
# old commit. Each round runs every capture (or those FILTER matches) for
# 2 s per build; the table gives each build's median over the rounds of
# criterion's estimate, and new/old.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,12p' "$0"; exit 2; }
old=$1 new=$2 rounds=${3:-3} filter=${4:-}
core=$(( $(nproc) - 1 ))
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for r in $(seq "$rounds"); do
    for leg in old new; do
        bin=${!leg}
        CRITERION_HOME="$out/criterion-$leg" taskset -c "$core" "$bin" --bench \
            --warm-up-time 1 --measurement-time 2 "meter_data/${filter}" \
            >"$out/$leg.$r" 2>/dev/null
    done
done
python3 - "$out" "$rounds" "$core" <<'PY'
import re, statistics, sys
out, rounds, core = sys.argv[1], int(sys.argv[2]), sys.argv[3]
unit = {"elem/s": 1e-9, "Kelem/s": 1e-6, "Melem/s": 1e-3, "Gelem/s": 1.0}
def ns(path):
    res, name = {}, None
    for line in open(path):
        m = re.match(r"^meter_data/(\S+)", line)
        if m:
            name = m.group(1)
        m = re.search(r"thrpt:\s+\[\S+ \S+ (\S+) (\S+) \S+ \S+\]", line)
        if m and name:
            per_ns = float(m.group(1)) * unit[m.group(2)]
            res[name] = 1 / per_ns
            name = None
    return res
legs = {leg: [ns(f"{out}/{leg}.{r}") for r in range(1, rounds + 1)] for leg in ("old", "new")}
print(f"ns per chunk, median of {rounds} rounds, pinned to core {core}")
print(f"{'capture':42s} {'old':>7s} {'new':>7s} {'new/old':>8s}")
for name in legs["old"][0]:
    o = statistics.median(r[name] for r in legs["old"])
    n = statistics.median(r[name] for r in legs["new"])
    print(f"{name:42s} {o:7.0f} {n:7.0f} {n / o:8.2f}")
PY

#!/usr/bin/env bash
# A/B of two nvmf-bench binaries on the three cases of BENCHMARKS.md, alternating
# (A B A B ..., ROUNDS rounds per case), under `flock /work/notes/measure.lock`-style
# exclusion when MEASURE_LOCK names a lock file. Prints each run, then the median and
# [min-max] per binary and case, and the embedded target's datagram counters (packets
# and datagrams per I/O, load independent).
#
# Usage: scripts/ab-nvmf-bench.sh A_BINARY B_BINARY [ROUNDS]   (default 3)
# Environment: RUNTIME (seconds per run, default 5), EMBEDDED_DIR (ext4, default
# /var/tmp), MEASURE_LOCK (a lock file; unset: none), OUT (raw outputs directory),
# CASES (which of "qd1 qd32 128k", default all).
set -euo pipefail
A=${1:?usage: ab-nvmf-bench.sh A_BINARY B_BINARY [ROUNDS]}
B=${2:?usage: ab-nvmf-bench.sh A_BINARY B_BINARY [ROUNDS]}
ROUNDS=${3:-3}
RUNTIME=${RUNTIME:-5}
EMBEDDED_DIR=${EMBEDDED_DIR:-/var/tmp}
OUT=${OUT:-$(mktemp -d -t ab-nvmf-bench.XXXXXX)}
mkdir -p "$OUT"
lock() { if [ -n "${MEASURE_LOCK:-}" ]; then flock "$MEASURE_LOCK" "$@"; else "$@"; fi; }

cases=(
    "qd1|--rw randread --bs 4k --iodepth 1"
    "qd32|--rw randread --bs 4k --iodepth 32"
    "128k|--rw read --bs 128k --iodepth 16"
)
echo "load at start: $(uptime)"
for c in "${cases[@]}"; do
    name=${c%%|*}
    args=${c#*|}
    [[ " ${CASES:-qd1 qd32 128k} " == *" $name "* ]] || continue
    for r in $(seq 1 "$ROUNDS"); do
        for side in A B; do
            bin=$A; [ "$side" = B ] && bin=$B
            log=$OUT/$name.$side.$r
            # shellcheck disable=SC2086
            lock "$bin" --time_based --runtime "$RUNTIME" --embedded-dir "$EMBEDDED_DIR" \
                $args --output-format json --output "$log.json" 2>"$log.err" >/dev/null
            python3 - "$log.json" "$log.err" "$name" "$side" "$r" <<'PY'
import json, re, sys
doc = json.load(open(sys.argv[1]))
err = open(sys.argv[2]).read()
name, side, r = sys.argv[3:6]
rd = doc["jobs"][0]["read"]
ios = rd["total_ios"] if "total_ios" in rd else rd.get("io_kbytes", 0)
line = f"{name} {side} round {r}: p50_us={rd['clat_ns']['percentile']['50.000000']/1000:.1f} iops={rd['iops']:.0f} mibps={rd['bw_bytes']/2**20:.0f}"
m = re.search(r"(\d+) packets sent(?: in (\d+) datagrams)?, (\d+) received(?: in (\d+) datagrams)?", err)
if m and ios:
    sp, sd, rp, rdg = m.groups()
    line += f" target_per_io: sent_pkts={int(sp)/ios:.2f}"
    if sd: line += f" sent_dgrams={int(sd)/ios:.2f}"
    line += f" rcvd_pkts={int(rp)/ios:.2f}"
    if rdg: line += f" rcvd_dgrams={int(rdg)/ios:.2f}"
print(line, flush=True)
PY
        done
    done
done | tee "$OUT/runs.txt"
echo "load at end: $(uptime)"
python3 - "$OUT/runs.txt" <<'PY'
import re, statistics, sys
runs = {}
for l in open(sys.argv[1]):
    m = re.match(r"(\S+) (A|B) round \d+: p50_us=(\S+) iops=(\S+) mibps=(\S+)", l)
    if m:
        runs.setdefault((m[1], m[2]), []).append((float(m[3]), float(m[4]), float(m[5])))
metric = {"qd1": (0, "p50 us"), "qd32": (1, "IOPS"), "128k": (2, "MiB/s")}
for name, (k, label) in metric.items():
    for side in "AB":
        v = [x[k] for x in runs.get((name, side), [])]
        if v:
            print(f"{name} {side}: {label} median {statistics.median(v):.1f} [{min(v):.1f}-{max(v):.1f}] n={len(v)}")
PY
echo "raw outputs: $OUT"

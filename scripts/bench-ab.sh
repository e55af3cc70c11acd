#!/usr/bin/env bash
# A/B of two nvmf-bench binaries on one case, alternating (A B A B ..., ROUNDS of
# each), each run with --baseline so it also measures the 4 KiB UDP round-trip floor
# in the same run. Prints every run as it ends, then per binary the median [min-max]
# of: p50 clat (us), IOPS, MiB/s, p50 / 4 KiB floor, and packets and datagrams per I/O both
# ways (the embedded target's counters, independent of the machine's load), and
# the ratios B / A of the medians. Holds `flock $LOCK` (if set) around each run so
# that two people never benchmark at once. See BENCHMARKS.md for the method.
#
# Usage: scripts/bench-ab.sh A_BINARY B_BINARY [ROUNDS] [-- nvmf-bench arguments]
#   default arguments: --rw randread --bs 4k --iodepth 1 (the QD1 latency case)
# Environment: RUNTIME (seconds per run, default 5), EMBEDDED_DIR (ext4, default
#   /var/tmp), OUT (raw outputs; default a new temporary directory), LOCK (a lock
#   file for flock, default none), BASELINE=0 (no UDP floor run: on a loaded machine
#   its 1 s echo timeout can fail the run; the floor columns then read 0).
set -euo pipefail

die() { echo "bench-ab.sh: $*" >&2; exit 2; }
[[ $# -ge 2 ]] || die "usage: scripts/bench-ab.sh A_BINARY B_BINARY [ROUNDS] [-- nvmf-bench arguments]"
A=$1 B=$2
shift 2
ROUNDS=3
if [[ $# -gt 0 && $1 != -- ]]; then ROUNDS=$1; shift; fi
[[ $# -gt 0 && $1 == -- ]] && shift
ARGS=("$@")
[[ ${#ARGS[@]} -gt 0 ]] || ARGS=(--rw randread --bs 4k --iodepth 1)
[[ -x $A && -x $B ]] || die "both binaries must be executable: '$A' '$B'"
[[ $ROUNDS =~ ^[0-9]+$ && $ROUNDS -ge 1 ]] || die "ROUNDS must be a positive integer, not '$ROUNDS'"
command -v python3 >/dev/null || die "needs python3 (apt-get install python3)"
RUNTIME=${RUNTIME:-5}
EMBEDDED_DIR=${EMBEDDED_DIR:-/var/tmp}
OUT=${OUT:-$(mktemp -d -t bench-ab.XXXXXX)}
mkdir -p "$OUT"
echo "bench-ab.sh: $ROUNDS rounds of A=$A, B=$B; ${ARGS[*]}; ${RUNTIME}s each; raw outputs in $OUT"
echo "bench-ab.sh: load at start: $(cut -d' ' -f1-3 /proc/loadavg)"

run() { # label round binary
    local json=$OUT/$1.$2.json err=$OUT/$1.$2.err
    local cmd=("$3" --time_based --runtime "$RUNTIME" --embedded-dir "$EMBEDDED_DIR"
        "${ARGS[@]}" --output-format json --output "$json")
    [[ ${BASELINE:-1} == 0 ]] || cmd+=(--baseline)
    if [[ -n ${LOCK:-} ]]; then cmd=(flock "$LOCK" "${cmd[@]}"); fi
    local load
    load=$(cut -d' ' -f1 /proc/loadavg)
    "${cmd[@]}" 2>"$err" || { tail -n 5 "$err" >&2; die "$1 round $2 failed"; }
    python3 - "$json" "$err" "$1" "$2" "$load" <<'EOF'
import json, re, sys
path, err, label, rnd, load = sys.argv[1:]
d = json.load(open(path))
# Builds before issue 19 put a top-level "group" and their own keys beside the jobs;
# later ones keep fio's keys only (one job per group with group_reporting) and their
# own under "nvmf-bench".
grp = d["group"] if "group" in d else d["jobs"][0]
g = grp["read"] if grp["read"]["total_ios"] else grp["write"]
ios = g["total_ios"] or 1
b = d.get("nvmf-bench", d).get("baseline") or {}
floor = (b.get("udp_rtt_4096") or {}).get("p50_us", 0.0)
p50 = g["clat_ns"]["percentile"]["50.000000"] / 1000
m = re.search(r"embedded target: (\d+) packets sent in (\d+) datagrams, (\d+) received in (\d+) datagrams",
              open(err).read())
tx, txd, rx, rxd = (int(x) for x in m.groups()) if m else (0, 0, 0, 0)
row = dict(p50_us=p50, iops=g["iops"], mib_s=g["bw_bytes"] / 2**20,
           p50_over_floor=p50 / floor if floor else 0.0, floor_us=floor,
           tgt_tx_pkt_io=tx / ios, tgt_tx_dgram_io=txd / ios,
           tgt_rx_pkt_io=rx / ios, tgt_rx_dgram_io=rxd / ios, load1=float(load))
print(label, rnd, " ".join(f"{k}={v:.2f}" for k, v in row.items()), flush=True)
open(path + ".row", "w").write(json.dumps(row))
EOF
}

for r in $(seq 1 "$ROUNDS"); do
    run A "$r" "$A"
    run B "$r" "$B"
done

python3 - "$OUT" "$ROUNDS" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
rows = {l: [json.load(open(f"{out}/{l}.{r}.json.row")) for r in range(1, rounds + 1)] for l in "AB"}
keys = list(rows["A"][0])
med = {l: {k: statistics.median(x[k] for x in rows[l]) for k in keys} for l in "AB"}
print(f"{'metric':<16}{'A median [min-max]':>30}{'B median [min-max]':>30}{'B/A':>8}")
for k in keys:
    cells = []
    for l in "AB":
        v = [x[k] for x in rows[l]]
        cells.append(f"{med[l][k]:.2f} [{min(v):.2f}-{max(v):.2f}]")
    ratio = med["B"][k] / med["A"][k] if med["A"][k] else float("nan")
    print(f"{k:<16}{cells[0]:>30}{cells[1]:>30}{ratio:>8.3f}")
EOF
echo "bench-ab.sh: load at end: $(cut -d' ' -f1-3 /proc/loadavg)"

#!/usr/bin/env bash
# Our nvmf-bench against SPDK's NVMe/TCP anchor on the same machine, alternating
# (A B A B ...: ours, then SPDK, ROUNDS times), and the UDP round-trip floor in the
# same rounds. Prints every run as it ends, then a table of medians with [min-max]
# and the ratios ours / SPDK and QD1 p50 / 4 KiB floor (see BENCHMARKS.md).
#
# Cases (both stacks, RUNTIME seconds each, 1 GiB file on ext4 in the page cache):
#   4k-randread-qd1     p50 and p99 completion latency, us
#   4k-randread-qd32    IOPS
#   128k-seqread-qd16   MiB/s
# Floor: transport/examples/udp_pingpong.rs (busy-polled UDP ping-pong over
# loopback, 64 B and 4 KiB), p50 round trip, us; and the QD1 case runs with
# --baseline, which measures the 4 KiB floor inside the same nvmf-bench run.
#
# Usage: scripts/bench-vs-spdk.sh [ROUNDS]      (default 3; at least 3 for medians)
# Environment:
#   RUNTIME        seconds per case (default 10)
#   SPDK_DIR       a built SPDK v26.05 tree; unset: the SPDK side is skipped (with a
#                  message). The anchor runs as root.
#   SPDK_ANCHOR    the anchor script (default ../shared/anchors/spdk-tcp/run.sh)
#   EMBEDDED_DIR   directory (on ext4) for nvmf-bench's embedded target file
#                  (default /var/tmp, where the anchor keeps its file too)
#   PINGPONG_ITERS round trips per size for the floor (default 100000)
#   OUT            directory for the raw outputs (default: a new temporary one)
#   NVMF_BENCH, UDP_PINGPONG   binaries (default: built here with cargo --release)
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${1:-3}
RUNTIME=${RUNTIME:-10}
EMBEDDED_DIR=${EMBEDDED_DIR:-/var/tmp}
PINGPONG_ITERS=${PINGPONG_ITERS:-100000}
SPDK_ANCHOR=${SPDK_ANCHOR:-../shared/anchors/spdk-tcp/run.sh}
OUT=${OUT:-$(mktemp -d -t bench-vs-spdk.XXXXXX)}
mkdir -p "$OUT"

die() { echo "bench-vs-spdk.sh: $*" >&2; exit 2; }
note() { echo "bench-vs-spdk.sh: $*" >&2; }

command -v python3 >/dev/null || die "needs python3 (apt-get install python3)"
[[ $ROUNDS =~ ^[0-9]+$ && $ROUNDS -ge 1 ]] || die "ROUNDS must be a positive integer, not '$ROUNDS'"
[[ $ROUNDS -ge 3 ]] || note "only $ROUNDS round(s): medians need at least 3"
[[ -d $EMBEDDED_DIR ]] || die "EMBEDDED_DIR $EMBEDDED_DIR is not a directory; point it at one on ext4"
fstype=$(findmnt -n -o FSTYPE -T "$EMBEDDED_DIR")
[[ $fstype == ext4 ]] || die "EMBEDDED_DIR $EMBEDDED_DIR is on $fstype, not ext4 (both stacks read a file on ext4); set EMBEDDED_DIR to a directory on ext4"

if [[ -z ${NVMF_BENCH:-} || -z ${UDP_PINGPONG:-} ]]; then
    cargo build --release --quiet -p nvmf-bench --bin nvmf-bench
    cargo build --release --quiet -p transport --example udp_pingpong
    dir=$(cargo metadata --format-version 1 --no-deps |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release
    NVMF_BENCH=${NVMF_BENCH:-$dir/nvmf-bench}
    UDP_PINGPONG=${UDP_PINGPONG:-$dir/examples/udp_pingpong}
fi

spdk=1
if [[ -z ${SPDK_DIR:-} ]]; then
    note "SPDK side skipped: SPDK_DIR is not set (build SPDK v26.05 as ../shared/anchors/spdk-tcp/README.md says, then SPDK_DIR=/path/to/spdk)"
    spdk=0
elif [[ $(id -u) != 0 ]]; then
    note "SPDK side skipped: the anchor needs root (run this script as root)"
    spdk=0
elif [[ ! -x $SPDK_ANCHOR ]]; then
    note "SPDK side skipped: no anchor script at $SPDK_ANCHOR (set SPDK_ANCHOR)"
    spdk=0
fi

RUNS=$OUT/runs.tsv # round, stack, metric, value
: >"$RUNS"
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$RUNS"; }

# nvmf-bench case: name, then its arguments; records the case's number(s).
ours_case() {
    local r=$1 name=$2
    shift 2
    local json=$OUT/ours.$r.$name.json
    if ! "$NVMF_BENCH" --name "$name" --time_based --runtime "$RUNTIME" \
        --embedded-dir "$EMBEDDED_DIR" "$@" --output-format json --output "$json" \
        2>"$OUT/ours.$r.$name.err"; then
        tail -n 5 "$OUT/ours.$r.$name.err" >&2
        die "nvmf-bench $name failed (round $r; log $OUT/ours.$r.$name.err)"
    fi
    python3 - "$json" "$name" <<'EOF' | while read -r metric value; do record "$r" ours "$metric" "$value"; done
import json, sys
doc, name = json.load(open(sys.argv[1])), sys.argv[2]
rd = doc["jobs"][0]["read"]
if name == "4k-randread-qd1":
    pct = rd["clat_ns"]["percentile"]
    print(name + ".p50_us", pct["50.000000"] / 1000)
    print(name + ".p99_us", pct["99.000000"] / 1000)
    # --baseline: the 4 KiB floor measured inside this very run, and p50 / floor.
    b = doc.get("nvmf-bench", doc).get("baseline", {})
    if "p50_over_floor" in b:
        print(name + ".run_floor_4096_us", b["udp_rtt_4096"]["p50_us"])
        print(name + ".p50_over_run_floor", b["p50_over_floor"])
elif name == "4k-randread-qd32":
    print(name + ".iops", rd["iops"])
else:
    print(name + ".mibps", rd["bw_bytes"] / 2**20)
EOF
}

floor() {
    local r=$1 log=$OUT/floor.$r.txt
    "$UDP_PINGPONG" "$PINGPONG_ITERS" >"$log" 2>&1 || die "udp_pingpong failed (log $log)"
    # "UDP ping-pong    64 B: rtt p50 9.1 us, ..."
    sed -n 's/^UDP ping-pong *\([0-9]*\) B: rtt p50 \([0-9.]*\) us.*/\1 \2/p' "$log" |
        while read -r size p50; do record "$r" floor "udp-${size}.p50_us" "$p50"; done
}

anchor() {
    local r=$1 log=$OUT/spdk.$r.txt
    if ! SPDK_DIR=$SPDK_DIR ANCHOR_DURATION_S=$RUNTIME ANCHOR_OUT=$OUT/spdk.$r.logs \
        "$SPDK_ANCHOR" >"$log" 2>"$OUT/spdk.$r.err"; then
        tail -n 5 "$OUT/spdk.$r.err" >&2
        die "SPDK anchor failed (round $r; log $OUT/spdk.$r.err)"
    fi
    # "case=4k-randread-qd1 iops=... mibps=... avg_us=... p50_us=... p99_us=..."
    python3 - "$log" <<'EOF' | while read -r metric value; do record "$r" spdk "$metric" "$value"; done
import sys
for line in open(sys.argv[1]):
    if not line.startswith("case="):
        continue
    kv = dict(f.split("=", 1) for f in line.split())
    name = kv["case"]
    if name == "4k-randread-qd1":
        print(name + ".p50_us", kv["p50_us"])
        print(name + ".p99_us", kv["p99_us"])
    elif name == "4k-randread-qd32":
        print(name + ".iops", kv["iops"])
    else:
        print(name + ".mibps", kv["mibps"])
EOF
}

show_round() { # round, stack: prints what the round recorded for the stack
    awk -F'\t' -v r="$1" -v s="$2" '$1 == r && $2 == s { printf " %s=%s", $3, $4 } END { print "" }' "$RUNS"
}

echo "# bench-vs-spdk rounds=$ROUNDS runtime_s=$RUNTIME spdk=$spdk embedded_dir=$EMBEDDED_DIR out=$OUT"
echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $(uname -r) cpus=$(nproc) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
for r in $(seq 1 "$ROUNDS"); do
    # Busy-polling numbers on a shared machine mean little while others run: the load
    # average at the start of each round says how quiet it was.
    echo "round $r load: $(cut -d' ' -f1-3 /proc/loadavg)"
    floor "$r"
    ours_case "$r" 4k-randread-qd1 --rw randread --bs 4k --iodepth 1 --baseline
    ours_case "$r" 4k-randread-qd32 --rw randread --bs 4k --iodepth 32
    ours_case "$r" 128k-seqread-qd16 --rw read --bs 128k --iodepth 16
    echo "round $r floor:$(show_round "$r" floor)"
    echo "round $r ours: $(show_round "$r" ours)"
    if [[ $spdk == 1 ]]; then
        anchor "$r"
        echo "round $r spdk: $(show_round "$r" spdk)"
    fi
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo

python3 - "$RUNS" <<'EOF'
import statistics, sys
from collections import defaultdict

runs = defaultdict(list)           # (stack, metric) -> [value per round]
by_round = defaultdict(dict)       # round -> {(stack, metric): value}
for line in open(sys.argv[1]):
    r, stack, metric, value = line.rstrip("\n").split("\t")
    runs[(stack, metric)].append(float(value))
    by_round[r][(stack, metric)] = float(value)

def fmt(v):
    return f"{v:,.0f}" if v >= 1000 else f"{v:.1f}"

def summary(vals):
    if not vals:
        return "-"
    return f"{fmt(statistics.median(vals))} [{fmt(min(vals))}-{fmt(max(vals))}]"

def ratio_summary(pairs):
    # One ratio per round (both numbers from the same round), then their median.
    rs = [a / b for a, b in pairs if b]
    if not rs:
        return "-"
    return f"{statistics.median(rs):.2f} [{min(rs):.2f}-{max(rs):.2f}]"

def pairs(a, b):
    return [(d[a], d[b]) for d in by_round.values() if a in d and b in d]

rows = [
    ("4 KiB randread QD1 p50 (us)", "4k-randread-qd1.p50_us", "lower"),
    ("4 KiB randread QD1 p99 (us)", "4k-randread-qd1.p99_us", "lower"),
    ("4 KiB randread QD32 IOPS", "4k-randread-qd32.iops", "higher"),
    ("128 KiB seq read QD16 (MiB/s)", "128k-seqread-qd16.mibps", "higher"),
]
print("| workload | nvmf-bench | SPDK NVMe/TCP | ours / SPDK |")
print("|---|---|---|---|")
for label, m, better in rows:
    print(f"| {label} | {summary(runs[('ours', m)])} | {summary(runs[('spdk', m)])} "
          f"| {ratio_summary(pairs(('ours', m), ('spdk', m)))} ({better} is better) |")
print()
print("| floor, same rounds | p50 round trip (us) |")
print("|---|---|")
for size in (64, 4096):
    print(f"| UDP ping-pong {size} B | {summary(runs[('floor', f'udp-{size}.p50_us')])} |")
print()
qd1 = ("ours", "4k-randread-qd1.p50_us")
print("QD1 p50 / 4 KiB floor (per round, median [min-max]):",
      ratio_summary(pairs(qd1, ("floor", "udp-4096.p50_us"))))
inrun = runs[("ours", "4k-randread-qd1.p50_over_run_floor")]
if inrun:
    print("QD1 p50 / 4 KiB floor of the same nvmf-bench run (--baseline), median [min-max]:",
          f"{statistics.median(inrun):.2f} [{min(inrun):.2f}-{max(inrun):.2f}];",
          "that floor:", summary(runs[("ours", "4k-randread-qd1.run_floor_4096_us")]), "us")
print("Ratios are taken per round (both numbers from the same round), then the median.")
EOF
echo "raw outputs: $OUT"

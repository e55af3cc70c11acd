#!/usr/bin/env bash
# How nvmf-bench's jobs scale: 4 KiB random reads at QD1 against the embedded target
# with 1, 2 and 4 jobs (one I/O queue each), ROUNDS rounds with the job counts
# alternating (1 2 4, then 4 2 1, ...) and, given several binaries in BINS, the
# binaries alternating within each step (A B, then B A). Prints every run and the
# medians of the total IOPS, the IOPS per job, the read clat p50 and the CPU of the
# job threads (fio's cpu line, per job thread; 0 for a build without it).
#
#   bench/scripts/scaling.sh                                  # build/release/nvmf-bench
#   BINS="/tmp/old/nvmf-bench build/release/nvmf-bench" ROUNDS=3 RUNTIME=5 bench/scripts/scaling.sh
#   EXTRA="--cpus_allowed=1 --cpus_allowed_policy=split" bench/scripts/scaling.sh
#   QUIET=85 bench/scripts/scaling.sh   # before each run, wait until the CPUs were 85 % idle for 3 s
#   NICE=-19 bench/scripts/scaling.sh   # run at this nice level (root), ahead of builds sharing the machine
set -euo pipefail
cd "$(dirname "$0")/../.."
BINS=${BINS:-build/release/nvmf-bench}
ROUNDS=${ROUNDS:-3}
RUNTIME=${RUNTIME:-5}
JOBS=${JOBS:-"1 2 4"}
EXTRA=${EXTRA:-}
QUIET=${QUIET:-0}
NICE=${NICE:-0}
# Waits (at most 10 minutes) until the machine's CPUs were QUIET % idle over 3 s: on a
# machine shared with builds, a run measures nothing while others compile.
quiet() {
    [ "$QUIET" -gt 0 ] || return 0
    # Local: the caller's loop variable is n.
    local tries=0 u n s i w q sq u2 n2 s2 i2 w2 q2 sq2
    while [ $tries -lt 200 ]; do
        read -r _ u n s i w q sq _ < /proc/stat
        sleep 3
        read -r _ u2 n2 s2 i2 w2 q2 sq2 _ < /proc/stat
        local busy=$(( (u2 + n2 + s2 + q2 + sq2) - (u + n + s + q + sq) ))
        local idle=$(( (i2 + w2) - (i + w) ))
        [ $((100 * idle / (busy + idle + 1))) -ge "$QUIET" ] && return 0
        tries=$((tries + 1))
    done
    echo "# never quiet: running anyway" >&2
}
for b in $BINS; do [ -x "$b" ] || { echo "no $b: cargo build --release -p nvmf-bench" >&2; exit 1; }; done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
rev() { echo "$1" | tr ' ' '\n' | tac | tr '\n' ' '; }
echo "# $(date -u '+%Y-%m-%d %H:%M UTC') $(git rev-parse --short HEAD) nproc=$(nproc) nice=$NICE extra=[$EXTRA] load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# bin round jobs total_iops iops_per_job p50_us usr% sys%"
step=0
for r in $(seq 1 "$ROUNDS"); do
    order=$JOBS
    [ $((r % 2)) -eq 0 ] && order=$(rev "$JOBS")
    for n in $order; do
        bins=$BINS
        [ $((step % 2)) -eq 1 ] && bins=$(rev "$BINS")
        step=$((step + 1))
        for b in $bins; do
            f="$out/run.json"
            quiet
            # shellcheck disable=SC2086
            nice -n "$NICE" "$b" --name=scale --numjobs "$n" --iodepth 1 --time_based --runtime "$RUNTIME" \
                --embedded-size 256M --group_reporting --output-format json $EXTRA >"$f" 2>/dev/null
            python3 - "$f" "$b" "$r" "$n" <<'PY'
import json, sys
t = open(sys.argv[1]).read()
d = json.loads(t[t.index('{'):])
n = int(sys.argv[4])
# This build reports the group as one job (fio's group_reporting); older ones kept a
# top-level "group" beside the jobs.
j = d["group"] if "group" in d else d["jobs"][0]
r = j["read"]
print(sys.argv[2], sys.argv[3], n, round(r["iops"]), round(r["iops"] / n),
      round(r["clat_ns"]["percentile"]["50.000000"] / 1000, 1),
      round(j.get("usr_cpu", 0), 1), round(j.get("sys_cpu", 0), 1))
PY
        done
    done
done | tee "$out/all"
echo "# $(date -u '+%H:%M UTC') load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# medians: bin jobs total_iops iops_per_job p50_us usr% sys% (cpu: per job thread)"
python3 - "$out/all" <<'PY'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1]) if not l.startswith('#')]
for b in dict.fromkeys(r[0] for r in rows):
    for n in sorted({int(r[2]) for r in rows if r[0] == b}):
        rs = [r for r in rows if r[0] == b and int(r[2]) == n]
        med = lambda i: statistics.median(float(r[i]) for r in rs)
        print(b, n, round(med(3)), round(med(4)), med(5), med(6), med(7))
PY

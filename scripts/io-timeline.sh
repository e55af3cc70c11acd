#!/usr/bin/env bash
# The timeline of one 4 KiB QD1 read, from the kernel's syscall tracepoints: runs
# nvmf-bench (embedded target) under `perf record` with the sendmmsg, recvmmsg (only
# those that returned datagrams) and io_uring_enter tracepoints, then prints the most
# common cycle between two of the target's sendmmsg calls that answer a read (WRITE,
# SEND and ACK: 2 or more datagrams), each event with its median time in us from the
# start of the cycle. T = the target's poll-group thread, H = the host's thread.
# Tracing adds about 1 us per event: compare timelines with each other, not with
# untraced latencies. Needs root (tracepoints) and python3.
#
# Usage: scripts/io-timeline.sh [NVMF_BENCH] [RUNTIME_S]   (default build/release/nvmf-bench, 3)
# Environment: EMBEDDED_DIR (ext4, default /var/tmp), OUT (perf data and the decoded
#   trace; default a new temporary directory).
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "io-timeline.sh: $*" >&2; exit 2; }
BENCH=${1:-build/release/nvmf-bench}
RUNTIME=${2:-3}
[[ -x $BENCH ]] || die "no nvmf-bench at $BENCH (cargo build --release --bin nvmf-bench)"
command -v perf >/dev/null || die "needs perf (apt-get install linux-perf)"
command -v python3 >/dev/null || die "needs python3 (apt-get install python3)"
OUT=${OUT:-$(mktemp -d -t io-timeline.XXXXXX)}
perf record -q -o "$OUT/trace.data" \
    -e syscalls:sys_enter_sendmmsg -e syscalls:sys_exit_sendmmsg \
    -e syscalls:sys_exit_recvmmsg --filter 'ret > 0' \
    -e syscalls:sys_enter_io_uring_enter -e syscalls:sys_exit_io_uring_enter -- \
    "$BENCH" --time_based --runtime "$RUNTIME" --embedded-dir "${EMBEDDED_DIR:-/var/tmp}" \
    --rw randread --bs 4k --iodepth 1 >"$OUT/bench.txt" 2>&1 ||
    die "perf record failed (root needed for tracepoints): $(tail -n 3 "$OUT/bench.txt")"
grep -E "p50=|embedded target" "$OUT/bench.txt" || true
perf script -i "$OUT/trace.data" --ns -F tid,time,event,trace >"$OUT/trace.txt" 2>/dev/null
python3 - "$OUT/trace.txt" <<'EOF'
import re, statistics, sys
ev = []
for line in open(sys.argv[1]):
    m = re.match(r"\s*(\d+)\s+([\d.]+):\s+syscalls:(\S+):\s*(.*)", line)
    if not m:
        continue
    tid, t, name, rest = int(m[1]), float(m[2]), m[3], m[4]
    vlen = re.search(r"vlen: 0x([0-9a-f]+)", rest)
    arg = f"vlen={int(vlen[1], 16)}" if vlen else ("ret=" + rest.strip() if name.startswith("sys_exit") else "")
    ev.append((tid, t, name, arg))
if not ev:
    sys.exit("io-timeline.sh: no events traced")
tgt = statistics.mode(e[0] for e in ev if "io_uring" in e[2])
others = [e[0] for e in ev if e[0] != tgt and e[2] == "sys_enter_sendmmsg"]
host = statistics.mode(others) if others else None
anchors = [i for i, e in enumerate(ev)
           if e[0] == tgt and e[2] == "sys_enter_sendmmsg" and int(e[3].split("=")[1]) >= 2]
cycles = {}
for a, b in zip(anchors, anchors[1:]):
    t0 = ev[a][1]
    if ev[b][1] - t0 > 200e-6:
        continue
    row = [(("T" if e[0] == tgt else "H") + " " + e[2] + " " + e[3], (e[1] - t0) * 1e6)
           for e in ev[a:b + 1] if e[0] in (tgt, host)]
    cycles.setdefault(tuple(l for l, _ in row), []).append([x for _, x in row])
if not cycles:
    sys.exit("io-timeline.sh: no complete cycle found")
key, vals = max(cycles.items(), key=lambda kv: len(kv[1]))
total = sum(len(v) for v in cycles.values())
print(f"most common cycle: {len(vals)} of {total} cycles; median us from the target's answer sendmmsg")
for i, label in enumerate(key):
    print(f"  {statistics.median(v[i] for v in vals):6.1f}  {label}")
EOF
echo "io-timeline.sh: perf data and decoded trace in $OUT"

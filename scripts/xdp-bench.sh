#!/usr/bin/env bash
# nvmf-target in one network namespace, nvmf-bench in another, over a veth pair: the
# UDP packet path vs AF_XDP (issue 10, scope 3), alternating (UDP XDP UDP XDP ...).
#
#   sudo scripts/xdp-bench.sh [ROUNDS=3] [RUNTIME_S=5]
#
# Namespaces nvmfbA (target, 10.50.0.1 on xbA) and nvmfbB (bench, 10.50.0.2 on xbB),
# veth MTU 9000 (path MTU 4096) with 2 queues per end (the host's admin and I/O poll
# groups; the target runs 2 poll groups so each QP's packets arrive on its own poll
# group's queue); removed on exit. Workloads: 4 KiB randread QD1 (p50), QD32 (IOPS),
# 128 KiB read QD16 (MiB/s), on a 1 GiB file in the page cache. Needs root and
#   cargo build --release --bin nvmf-target --bin nvmf-bench
# Logs: the last target's in /tmp/xdp-bench-target.log, the hosts' appended to
# /tmp/xdp-bench-host.log (RUST_LOG=info adds each poll group's XSK counters).
# XDP_BENCH_ONLY_128K=1: the 128 KiB run only; XDP_BENCH_ETHTOOL=1: veth's per-queue
# XDP counters after each run.
set -euo pipefail
ROUNDS=${1:-3}
RT=${2:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${NVMF_BIN:-$ROOT/build/release}
[ "$(id -u)" = 0 ] || { echo "xdp-bench: needs root (network namespaces, XDP, AF_XDP)" >&2; exit 1; }
A=nvmfbA B=nvmfbB NQN=nqn.2026-11.io.nvmf-rdma:xdp
IMG=${XDP_BENCH_FILE:-/var/tmp/nvmf-xdp-bench.img}
TPID=
cleanup() {
  [ -n "$TPID" ] && kill "$TPID" 2>/dev/null && wait "$TPID" 2>/dev/null
  ip netns del $A 2>/dev/null || true
  ip netns del $B 2>/dev/null || true
}
trap cleanup EXIT
cleanup
[ -s "$IMG" ] || dd if=/dev/urandom of="$IMG" bs=1M count=1024 status=none
cat "$IMG" >/dev/null # into the page cache
ip netns add $A
ip netns add $B
ip link add xbA netns $A numtxqueues 2 numrxqueues 2 type veth peer name xbB netns $B numtxqueues 2 numrxqueues 2
for x in "$A xbA 10.50.0.1" "$B xbB 10.50.0.2"; do
  set -- $x
  ip -n "$1" link set lo up
  ip -n "$1" link set "$2" mtu 9000
  ip -n "$1" addr add "$3/24" dev "$2"
  ip -n "$1" link set "$2" up
done
run() { # path workload-args...
  local path=$1; shift
  local pp=(--packet-path udp)
  [ "$path" = xdp ] && pp=(--packet-path af-xdp)
  ip netns exec $A "$BIN/nvmf-target" --addr 10.50.0.1 --file "$IMG" --nqn $NQN --poll-groups 2 \
      "${pp[@]}" --interface xbA >/tmp/xdp-bench-target.log 2>&1 &
  TPID=$!
  sleep 1
  ip netns exec $B "$BIN/nvmf-bench" --traddr 10.50.0.1 --host-traddr 10.50.0.2 --subnqn $NQN \
      "${pp[@]}" --interface xbB --time_based --runtime "$RT" --eta never --output-format json "$@" \
      >/tmp/xdp-bench.json 2>>/tmp/xdp-bench-host.log
  if [ -n "${XDP_BENCH_ETHTOOL:-}" ]; then
    ip netns exec $A ethtool -S xbA | grep -v ": 0$" || true
    ip netns exec $B ethtool -S xbB | grep -v ": 0$" || true
  fi
  kill $TPID; wait $TPID 2>/dev/null || true
  TPID=
  python3 - "$path" "$*" /tmp/xdp-bench.json <<'PY'
import json, sys
path, wl, f = sys.argv[1], sys.argv[2], sys.argv[3]
j = json.load(open(f))["jobs"][0]["read"]
p50 = j["clat_ns"]["percentile"].get("50.000000", 0) / 1000
print(f"{path:4} {wl:45} p50 {p50:8.1f} us  IOPS {j['iops']:10.0f}  {j['bw']/1024:8.1f} MiB/s")
PY
}
echo "# xdp-bench: $ROUNDS rounds, ${RT}s each; $(uptime)"
for r in $(seq 1 "$ROUNDS"); do
  for path in udp xdp; do
    if [ -z "${XDP_BENCH_ONLY_128K:-}" ]; then
      run $path --rw randread --bs 4k --iodepth 1
      run $path --rw randread --bs 4k --iodepth 32
    fi
    run $path --rw read --bs 128k --iodepth 16
  done
done

#!/usr/bin/env bash
# System calls per I/O of nvmf-bench (4 KiB randread QD1, 3 s) over the veth pair of
# scripts/xdp-bench.sh, UDP path vs AF_XDP path (strace -c -f on the bench; the target
# untraced). Root; release binaries as for xdp-bench.sh.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${NVMF_BIN:-$ROOT/build/release}
A=nvmfsA B=nvmfsB NQN=nqn.2026-11.io.nvmf-rdma:xdp IMG=/var/tmp/nvmf-xdp-syscalls.img
TPID=
cleanup() {
  [ -n "$TPID" ] && kill "$TPID" 2>/dev/null && wait "$TPID" 2>/dev/null
  ip netns del $A 2>/dev/null || true; ip netns del $B 2>/dev/null || true
  rm -f "$IMG"
}
trap cleanup EXIT
cleanup
ip netns add $A; ip netns add $B
ip link add xsA netns $A numtxqueues 2 numrxqueues 2 type veth peer name xsB netns $B numtxqueues 2 numrxqueues 2
for x in "$A xsA 10.52.0.1" "$B xsB 10.52.0.2"; do
  set -- $x
  ip -n "$1" link set "$2" mtu 9000; ip -n "$1" addr add "$3/24" dev "$2"; ip -n "$1" link set "$2" up
done
for path in udp af-xdp; do
  ip netns exec $A "$BIN/nvmf-target" --addr 10.52.0.1 --file "$IMG" --size 256M --nqn $NQN \
      --poll-groups 2 --packet-path $path --interface xsA >/dev/null 2>&1 &
  TPID=$!
  sleep 1
  ip netns exec $B strace -c -f -o /tmp/xdp-syscalls-$path.txt "$BIN/nvmf-bench" --traddr 10.52.0.1 \
      --host-traddr 10.52.0.2 --subnqn $NQN --packet-path $path --interface xsB --time_based \
      --runtime 3 --eta never --output-format json >/tmp/xdp-syscalls-$path.json
  kill $TPID; wait $TPID 2>/dev/null || true; TPID=
  python3 - $path /tmp/xdp-syscalls-$path.json /tmp/xdp-syscalls-$path.txt <<'PY'
import json, sys
path, jf, sf = sys.argv[1:]
ios = json.load(open(jf))["jobs"][0]["read"]["total_ios"]
rows = []
for line in open(sf):
    f = line.split()
    if len(f) >= 5 and f[0][0].isdigit() and f[-1] != "total":
        calls = int(f[3]); errs = int(f[4]) if len(f) == 6 else 0
        rows.append((calls, f[-1], errs))
rows.sort(reverse=True)
print(f"{path}: {ios} I/Os; per I/O: " + ", ".join(f"{n} {c/ios:.2f} ({e/ios:.2f} failed)" for c, n, e in rows[:5]))
PY
done

#!/usr/bin/env bash
# cpu-clock profiles (perf record -a, 3 s in the middle of a 6 s 4 KiB randread QD32
# run) of nvmf-target + nvmf-bench over a veth pair, UDP path then AF_XDP path; prints
# IOPS and the top symbols of each. Root, perf, release binaries as for xdp-bench.sh.
BIN=${NVMF_BIN:-$(cd "$(dirname "$0")/.." && pwd)/build/release}; A=nvmfpA B=nvmfpB NQN=nqn.x:p IMG=/var/tmp/nvmf-xdp-perf.img
ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null
ip netns add $A; ip netns add $B
ip link add xpA netns $A numtxqueues 2 numrxqueues 2 type veth peer name xpB netns $B numtxqueues 2 numrxqueues 2
for x in "$A xpA 10.53.0.1" "$B xpB 10.53.0.2"; do set -- $x; ip -n $1 link set $2 mtu 9000; ip -n $1 addr add $3/24 dev $2; ip -n $1 link set $2 up; done
for path in udp af-xdp; do
  ip netns exec $A $BIN/nvmf-target --addr 10.53.0.1 --file $IMG --size 256M --nqn $NQN --poll-groups 2 --packet-path $path --interface xpA >/dev/null 2>&1 &
  T=$!; sleep 1
  ip netns exec $B $BIN/nvmf-bench --traddr 10.53.0.1 --host-traddr 10.53.0.2 --subnqn $NQN --packet-path $path --interface xpB --time_based --runtime 6 --iodepth 32 --eta never --output-format json > /tmp/perf-$path.json &
  Bp=$!; sleep 2
  perf record -q -e cpu-clock -a -o /tmp/perf-$path.data -- sleep 3 2>/dev/null
  wait $Bp; kill $T; wait $T
  echo "== $path: $(python3 -c "import json;print(round(json.load(open('/tmp/perf-$path.json'))['jobs'][0]['read']['iops']))") IOPS"
  perf report -i /tmp/perf-$path.data --no-children --sort sym --stdio 2>/dev/null | grep -v "^#" | grep -v "^$" | head -22
done
ip netns del $A; ip netns del $B; rm -f $IMG

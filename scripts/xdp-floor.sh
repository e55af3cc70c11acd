#!/usr/bin/env bash
# The packet-path floor on a veth pair between two network namespaces (issue 10,
# scope 3): UDP sockets vs AF_XDP, alternating (UDP XDP UDP XDP ...), each round a
# ping-pong of 64 B and 4 KiB (RTT p50/p99) and a pipelined datagrams/s figure.
#
#   sudo scripts/xdp-floor.sh [ROUNDS=3] [ROUND_TRIPS=100000]
#
# Creates namespaces xdpfA/xdpfB joined by veth xdpa<->xdpb (MTU 9000, so a 4 KiB
# RoCE packet fits one frame; 10.47.0.1/24 and 10.47.0.2/24) and removes them on exit.
# Needs root, iproute2 and a release build of the example:
#   cargo build --release -p transport --example xdp_floor
set -euo pipefail
ROUNDS=${1:-3}
N=${2:-100000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${XDP_FLOOR_BIN:-$ROOT/build/release/examples/xdp_floor}
[ -x "$BIN" ] || { echo "xdp-floor: $BIN missing: cargo build --release -p transport --example xdp_floor" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "xdp-floor: needs root (network namespaces, XDP, AF_XDP)" >&2; exit 1; }
A=xdpfA B=xdpfB
ECHO_PID=
cleanup() {
  [ -n "$ECHO_PID" ] && kill "$ECHO_PID" 2>/dev/null && wait "$ECHO_PID" 2>/dev/null
  ip netns del $A 2>/dev/null || true
  ip netns del $B 2>/dev/null || true
}
trap cleanup EXIT
cleanup
ip netns add $A
ip netns add $B
ip link add xdpa netns $A type veth peer name xdpb netns $B
for ns_if_ip in "$A xdpa 10.47.0.1" "$B xdpb 10.47.0.2"; do
  set -- $ns_if_ip
  ip -n "$1" link set lo up
  ip -n "$1" link set "$2" mtu 9000
  ip -n "$1" addr add "$3/24" dev "$2"
  ip -n "$1" link set "$2" up
done
echo "# xdp-floor: veth xdpa<->xdpb, MTU 9000, $ROUNDS rounds, $N round trips per size; $(uptime)"
for r in $(seq 1 "$ROUNDS"); do
  for path in udp xdp; do
    ip netns exec $B "$BIN" echo --path $path --iface xdpb --local 10.47.0.2 --peer 10.47.0.1 &
    ECHO_PID=$!
    sleep 0.5
    ip netns exec $A "$BIN" ping --path $path --iface xdpa --local 10.47.0.1 --peer 10.47.0.2 --round-trips "$N" | sed "s/^/round $r: /"
    kill $ECHO_PID; wait $ECHO_PID 2>/dev/null || true
    ECHO_PID=
  done
done

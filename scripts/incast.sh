#!/usr/bin/env bash
# N-to-1 incast over real UDP sockets (soft provider, loopback), DCQCN on and off,
# ROUNDS alternating runs each: N sender QPs RDMA WRITE to one receiver through a
# rate-limited, RED-marking, tail-dropping queue on the receiver's receive path (the
# fault layer's `queue`: this machine's kernel has no red/choke/codel qdisc). Prints
# one line per run and a table of medians (BENCHMARKS.md, "Incast").
#
#   scripts/incast.sh                  # 8 flows, 3 rounds, defaults of the example
#   ROUNDS=5 scripts/incast.sh --flows 4 --rate-mbps 500
#   INCAST_NETNS=incast scripts/incast.sh   # inside a network namespace (created)
#
# Extra arguments go to every run of the example (transport/examples/incast).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
nice -n 10 cargo build --release -q -p transport --example incast
BIN=build/release/examples/incast
run() {
    if [[ -n "${INCAST_NETNS:-}" ]]; then
        ip netns list | grep -qw "$INCAST_NETNS" || ip netns add "$INCAST_NETNS"
        ip netns exec "$INCAST_NETNS" ip link set lo up
        ip netns exec "$INCAST_NETNS" "$BIN" "$@"
    else
        "$BIN" "$@"
    fi
}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq 1 "$ROUNDS"); do
    for cc in on off; do
        line=$(run --dcqcn "$cc" --seed "$r" "$@")
        echo "round $r $line"
        echo "$line" >>"$out"
    done
done
python3 - "$out" <<'PY'
import statistics, sys
rows = [dict(kv.split("=", 1) for kv in l.split()) for l in open(sys.argv[1])]
keys = ["goodput_mbps", "p50_us", "p99_us", "queue_drops", "resent_pkts",
        "mean_depth_kib", "max_depth_kib", "marks", "cnps_sent", "cnps_handled"]
print()
print("| DCQCN | runs | goodput Mbit/s | p50 us | p99 us | queue drops | RC resent pkts "
      "| mean queue KiB | max queue KiB | CE marks | CNPs sent | CNPs handled | intact |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for cc in ("on", "off"):
    rs = [r for r in rows if r["dcqcn"] == cc]
    med = lambda k: statistics.median(float(r[k]) for r in rs)
    rng = lambda k: "%g-%g" % (min(float(r[k]) for r in rs), max(float(r[k]) for r in rs))
    cells = ["%.0f [%s]" % (med(k), rng(k)) for k in keys]
    print("| %s | %d | %s | %s |" % (cc, len(rs), " | ".join(cells),
          all(r["intact"] == "true" for r in rs)))
PY

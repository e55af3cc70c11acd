#!/usr/bin/env bash
# reconnect-check.sh - a killed benchmark comes back at once, and the target says what
# happened (issue 8, items 3 and 7), with the release binaries:
#
#   1. nvmf-target on 127.0.0.230, logging JSON (--log-format json) to a file;
#   2. nvmf-bench from 127.0.0.231 runs I/O against it and is killed with SIGKILL
#      (no disconnect, the target keeps the old queues);
#   3. nvmf-bench runs again from the same address right away: it must connect and
#      finish with exit status 0 and I/O done;
#   4. the target's log: every line is JSON, and it records the connects, the second
#      host's disconnect, and the killed host's queues going away (QP error or Keep
#      Alive expiry), each with host_addr, qid and QPNs.
#
# Usage: scripts/reconnect-check.sh [BIN_DIR]   (default build/release)
# Needs python3 (for the JSON). Exit status 0 when every check passed.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/release}
TARGET_IP=127.0.0.230
HOST_IP=127.0.0.231
NQN=nqn.2026-11.io.nvmf-rdma:reconnect
for b in nvmf-target nvmf-bench; do
    [ -x "$BIN/$b" ] || { echo "FAIL: $BIN/$b missing (cargo build --release --bin $b)"; exit 1; }
done
dir=$(mktemp -d)
tpid=""
bpid=""
cleanup() {
    [ -n "$bpid" ] && kill -KILL "$bpid" 2>/dev/null || true
    [ -n "$tpid" ] && kill -KILL "$tpid" 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*"
    echo "--- target log"; cat "$dir/target.log" || true
    for f in "$dir"/bench*.err; do echo "--- $f"; cat "$f"; done
    exit 1
}
# Waits up to $2 seconds for a line containing $1 in the target's log.
wait_log() {
    for _ in $(seq 1 $(($2 * 10))); do
        grep -q "$1" "$dir/target.log" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

"$BIN/nvmf-target" --addr "$TARGET_IP" --nqn "$NQN" --file "$dir/ns.img" --size 64M \
    --log-format json 2>"$dir/target.log" &
tpid=$!
wait_log '"serving' 20 || fail "nvmf-target did not come up"

bench_args=(--traddr "$TARGET_IP" --subnqn "$NQN" --host-traddr "$HOST_IP" --size 16M)
# Started directly (not through a function), so that $! is nvmf-bench itself.
"$BIN/nvmf-bench" "${bench_args[@]}" --rw randrw --time_based --runtime 60 \
    >/dev/null 2>"$dir/bench1.err" &
bpid=$!
wait_log 'I/O queue connected' 30 || fail "the first run did not connect"
sleep 1
kill -KILL "$bpid"
wait "$bpid" 2>/dev/null || true
bpid=""
echo "killed the first nvmf-bench (SIGKILL) in the middle of its run"

t0=$(date +%s%N)
if ! "$BIN/nvmf-bench" "${bench_args[@]}" --rw randread --time_based --runtime 2 \
    --output-format json \
    >"$dir/bench2.json" 2>"$dir/bench2.err"; then
    fail "the second run, right after the kill, failed"
fi
t1=$(date +%s%N)
echo "second run: exit 0 after $(((t1 - t0) / 1000000)) ms (2 s of I/O)"
python3 - "$dir/bench2.json" <<'EOF' || fail "the second run did no I/O"
import json, sys
j = json.load(open(sys.argv[1]))
ios = sum(job["read"]["total_ios"] + job["write"]["total_ios"] for job in j["jobs"])
print(f"second run: {ios} I/Os")
sys.exit(0 if ios > 0 else 1)
EOF

# The killed host's queues: its I/O QP fails within ~4 s (retries exhausted), its
# admin queue goes at the Keep Alive expiry (10 s).
wait_log 'Keep Alive timer expired' 30 || fail "no Keep Alive expiry for the killed host"
kill -TERM "$tpid"
wait "$tpid" || fail "nvmf-target did not exit cleanly on SIGTERM"
tpid=""

python3 - "$dir/target.log" "$HOST_IP" <<'EOF' || fail "the target's log"
import json, sys
path, host = sys.argv[1], sys.argv[2]
lines = [l for l in open(path) if l.strip()]
events = []
for l in lines:
    if "\x1b" in l:
        sys.exit(f"ANSI escape in {l!r}")
    try:
        events.append(json.loads(l))
    except ValueError as e:
        sys.exit(f"not JSON ({e}): {l!r}")
def having(msg, **fields):
    return [e for e in events if e.get("message", "").startswith(msg)
            and all(e.get(k) == v for k, v in fields.items())]
need = {
    "RDMA CM connection accepted": having("RDMA CM connection accepted", host_addr=host),
    "controller created": having("controller created", host_addr=host),
    "I/O queue connected": having("I/O queue connected", host_addr=host, qid=1),
    "disconnect by the second host": having("queue disconnected", host_addr=host, by="host"),
    "killed host's queues torn down": having("queue disconnected", host_addr=host, by="target"),
    "Keep Alive expiry": having("Keep Alive timer expired"),
}
for what, found in need.items():
    if len(found) == 0:
        sys.exit(f"no {what!r} event")
    e = found[0]
    print(f"ok {what}: " + " ".join(f"{k}={e[k]}" for k in
          ("level", "host_addr", "host_qpn", "qpn", "qid", "cntlid", "hostnqn", "reason")
          if k in e))
for e in need["controller created"] + need["I/O queue connected"]:
    for k in ("host_addr", "host_qpn", "qpn", "qid", "cntlid", "hostnqn", "subnqn"):
        if k not in e:
            sys.exit(f"{e['message']!r} lacks {k}: {e}")
EOF
echo "PASS: reconnect after SIGKILL, target operator log"

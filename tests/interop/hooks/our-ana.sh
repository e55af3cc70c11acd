#!/bin/bash
# our-ana.sh - run.sh host hook (-H) of the interop group `ana` (issue 16 item 4): our
# target with two ports on the bridge address, 4420 (PORTID 1) and 4421 (PORTID 2),
# one subsystem whose namespace 1 is in ANA group 1: optimized through port 1,
# non-optimized through port 2. It runs the example ana_control (stdin: `set PORTID
# GRPID STATE`) and flips the states when the guest (ana-host.sh) asks: once
# $LP_SHARE/out/B/flip appears, port 1 -> inaccessible and port 2 -> optimized, then
# it touches $LP_SHARE/out/B/flipped.
#
# Env from run.sh: LP_SHARE, LP_HOST_IP (192.168.77.1).
# Env from run-matrix.sh: ANA_CONTROL_BIN (the example), INTEROP_IMG (backing file,
# created sparse at INTEROP_NS_SIZE), INTEROP_NQN.
# Touches $LP_SHARE/out/A/ready once the target listens; stops it (end of its stdin)
# when $LP_SHARE/out/stop appears; its exit status goes to $LP_SHARE/target.rc, its
# log to $LP_SHARE/target.log, its answers to $LP_SHARE/ana-control.txt.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ip=${LP_HOST_IP:-192.168.77.1}
log="$LP_SHARE/target.log"
cfg="$LP_SHARE/ana-target.toml"
cat >"$cfg" <<TOML
[[listen]]
addr = "$ip"
trsvcid = 4420
portid = 1
ana_groups = [{ grpid = 1, state = "optimized" }]

[[listen]]
addr = "$ip"
trsvcid = 4421
portid = 2
ana_groups = [{ grpid = 1, state = "non-optimized" }]

[[subsystems]]
nqn = "$INTEROP_NQN"

[[subsystems.namespaces]]
nsid = 1
path = "$INTEROP_IMG"
size = "$INTEROP_NS_SIZE"
ana_grpid = 1
TOML
fifo="$LP_SHARE/ana-control.fifo"
rm -f "$fifo"
mkfifo "$fifo"
echo "$(date +%T) starting $ANA_CONTROL_BIN $cfg ($INTEROP_NQN on $ip:4420 and $ip:4421)"
NO_COLOR=1 RUST_LOG="${INTEROP_TARGET_LOG:-info}" "$ANA_CONTROL_BIN" "$cfg" \
    <"$fifo" >"$LP_SHARE/ana-control.txt" 2>"$log" &
pid=$!
exec 3>"$fifo"   # keeps the example's stdin open until we close it
stop_target() {
    exec 3>&-
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && { echo "target did not stop at the end of its stdin, SIGKILL"; kill -KILL "$pid"; }
    wait "$pid" 2>/dev/null
    echo $? >"$LP_SHARE/target.rc"
    echo "$(date +%T) target exited with status $(cat "$LP_SHARE/target.rc")"
}
trap 'stop_target; exit 0' TERM INT

wait_serving ana_control
mkdir -p "$LP_SHARE/out/A" "$LP_SHARE/out/B"
touch "$LP_SHARE/out/A/ready"
echo "$(date +%T) target ready"
flipped=0
while [ ! -e "$LP_SHARE/out/stop" ]; do
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "$(date +%T) ana_control died during the run"
        stop_target
        exit 1
    fi
    if [ $flipped = 0 ] && [ -e "$LP_SHARE/out/B/flip" ]; then
        echo "set 1 1 inaccessible" >&3
        echo "set 2 1 optimized" >&3
        for _ in $(seq 1 50); do [ "$(grep -c '^ok' "$LP_SHARE/ana-control.txt")" -ge 2 ] && break; sleep 0.1; done
        echo "$(date +%T) flipped: $(tr '\n' ';' <"$LP_SHARE/ana-control.txt")"
        touch "$LP_SHARE/out/B/flipped"
        flipped=1
    fi
    sleep 0.2
done
echo "$(date +%T) out/stop seen"
stop_target

#!/bin/bash
# our-target.sh - run.sh host hook (-H) of the interop matrix: serves our nvmf-target
# on the bridge address inside the run's network namespace, for the Linux host in the
# VM (guest scenario interop-host.sh).
#
# Env from run.sh: LP_SHARE (results dir = the 9p share), LP_HOST_IP (192.168.77.1),
# LP_BRIDGE.
# Env from run-matrix.sh:
#   NVMF_TARGET_BIN  the nvmf-target executable
#   INTEROP_IMG      backing file of namespace 1 (created sparse at INTEROP_NS_SIZE)
#   INTEROP_NS_SIZE  namespace size (e.g. 64M)
#   INTEROP_NQN      subsystem NQN
#   INTEROP_IPV6     1: serve on fd77::1 (the bridge gets IPv6 first, see ipv6.sh)
#   INTEROP_LOOP     1: serve INTEROP_IMG through a loop device with O_DIRECT (the
#                    block-device back end: BLKGETSIZE64, BLKSSZGET, O_EXCL, --direct);
#                    the loop device is detached after the target exits
#   INTEROP_READY    the name under out/ whose ready file it touches (default A; the
#                    nvme-cli group uses "ours", VM A being Linux nvmet there)
#   INTEROP_LOSS_PCT drop this percentage of our RoCE packets (UDP to 4791) on their
#                    way out, at random (nftables numgen; this kernel has no netem);
#                    the table with its counters is left in $LP_SHARE/nft-loss.txt
#   INTEROP_CE_MARK  the target takes this fraction (0-1) of the RoCE packets it
#                    receives as CE-marked (NVMF_SOFT_CE_MARK), so it sends CNPs
# Touches $LP_SHARE/out/A/ready once the target listens; stops the target (SIGTERM)
# when $LP_SHARE/out/stop appears, and writes its exit status to
# $LP_SHARE/target.rc. The target's log is $LP_SHARE/target.log.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ip=${LP_HOST_IP:-192.168.77.1}
log="$LP_SHARE/target.log"
if [ "${INTEROP_IPV6:-0}" = 1 ]; then
    . "$(dirname "$0")/ipv6.sh"
    bridge_ipv6 || { echo "$(date +%T) cannot give $LP_BRIDGE IPv6 address $INTEROP_HOST_IP6"; exit 1; }
    ip=$INTEROP_HOST_IP6
fi
ns=("$INTEROP_IMG") loopdev=""
if [ "${INTEROP_LOOP:-0}" = 1 ]; then
    truncate -s "$INTEROP_NS_SIZE" "$INTEROP_IMG"
    loopdev=$(losetup --find --show "$INTEROP_IMG") || { echo "$(date +%T) losetup failed"; exit 1; }
    ns=("$loopdev" --direct)
fi
if [ -n "${INTEROP_LOSS_PCT:-}" ]; then
    nft -f - <<NFT || { echo "$(date +%T) nft could not install the loss rule"; exit 1; }
table inet nvmf_loss {
    chain out {
        type filter hook output priority 0; policy accept;
        udp dport 4791 counter numgen random mod 100 < $INTEROP_LOSS_PCT counter drop
    }
}
NFT
    echo "$(date +%T) dropping $INTEROP_LOSS_PCT% of our RoCE packets on their way out"
fi
if [ -n "${INTEROP_CE_MARK:-}" ]; then
    export NVMF_SOFT_CE_MARK=$INTEROP_CE_MARK
    echo "$(date +%T) the target takes $INTEROP_CE_MARK of what it receives as CE-marked"
fi
echo "$(date +%T) starting $NVMF_TARGET_BIN on $ip:4420 ($INTEROP_NQN, ${ns[*]} over $INTEROP_IMG, $INTEROP_NS_SIZE)"
NO_COLOR=1 RUST_LOG="${INTEROP_TARGET_LOG:-info}" "$NVMF_TARGET_BIN" --addr "$ip" --port 4420 \
    --nqn "$INTEROP_NQN" --size "$INTEROP_NS_SIZE" --file "${ns[@]}" >"$log" 2>&1 &
pid=$!
stop_target() {
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && { echo "target ignored SIGTERM for 5 s, SIGKILL"; kill -KILL "$pid"; }
    fi
    wait "$pid" 2>/dev/null
    echo $? >"$LP_SHARE/target.rc"
    [ -n "$loopdev" ] && losetup -d "$loopdev"
    if [ -n "${INTEROP_LOSS_PCT:-}" ]; then
        nft list table inet nvmf_loss >"$LP_SHARE/nft-loss.txt" 2>&1
        nft delete table inet nvmf_loss
    fi
    echo "$(date +%T) target exited with status $(cat "$LP_SHARE/target.rc")"
}
trap 'stop_target; exit 0' TERM INT

wait_serving nvmf-target
ready="$LP_SHARE/out/${INTEROP_READY:-A}"
mkdir -p "$ready"
touch "$ready/ready"
echo "$(date +%T) target ready"
while [ ! -e "$LP_SHARE/out/stop" ]; do
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "$(date +%T) nvmf-target died during the run"
        stop_target
        exit 1
    fi
    sleep 0.2
done
echo "$(date +%T) out/stop seen"
stop_target

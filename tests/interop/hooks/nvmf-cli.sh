#!/bin/bash
# nvmf-cli.sh - run.sh host hook (-H) of the nvme-cli group's boot when the nvmf-cli
# group rides on it: runs hooks/our-target.sh (our nvmf-target for the nvme-cli
# cells) and, beside it, our `nvmf` command line against Linux nvmet in VM A
# (192.168.77.10): the commands whose nvme-cli `-o json` guest/nvme-cli-diff.sh saves,
# for nvmf-cli-diff.py to compare field by field; then the same against our target.
#
# Our nvmf opens its soft RDMA device on a second address of the bridge,
# 192.168.77.2 (INTEROP_NVMF_CLI_IP): 192.168.77.1 is our target's (the soft provider
# opens one device per local address).
# Env from run.sh: LP_SHARE, LP_BRIDGE. From run-matrix.sh: NVMF_CLI_BIN (the nvmf
# executable) and what our-target.sh needs.
# Per side (nvmet, then ours): waits for /host/out/B/json-done-<side> (nvme-cli's side
# done), writes $LP_SHARE/nvmf-cli/<side>/<command>.json (stdout), .err (stderr), .rc
# ("rc=N"), touches $LP_SHARE/out/nvmf-cli/done-<side>.
set -u
here="$(dirname "${BASH_SOURCE[0]}")"
"$here/our-target.sh" &
tpid=$!
trap 'kill -TERM $tpid 2>/dev/null; wait $tpid; exit 0' TERM INT

ip=${INTEROP_NVMF_CLI_IP:-192.168.77.2}
out="$LP_SHARE/nvmf-cli"
mkdir -p "$out" "$LP_SHARE/out/nvmf-cli"
ip addr add "$ip/24" dev "$LP_BRIDGE" 2>/dev/null
export NVMF_STATE_DIR="$out/state"

# side SIDE ADDR NQN: after nvme-cli's side (out/B/json-done-SIDE), our nvmf's same
# commands against SIDE's controller into $out/SIDE/, then out/nvmf-cli/done-SIDE.
side() {
    local s=$1 addr=$2 nqn=$3 d="$out/$1"
    mkdir -p "$d"
    echo "$(date +%T) nvmf-cli: $s: waiting for nvme-cli's side (out/B/json-done-$s)"
    for _ in $(seq 1 2000); do [ -e "$LP_SHARE/out/B/json-done-$s" ] && break; sleep 0.2; done
    [ -e "$LP_SHARE/out/B/json-done-$s" ] || echo "$(date +%T) nvmf-cli: $s: nvme-cli's side never finished"
    # nvmf NAME ARGS...: our command against the side, its outputs in $d/NAME.*
    nvmf() {
        local name=$1; shift
        timeout 60 "$NVMF_CLI_BIN" "$@" -t rdma -a "$addr" -s 4420 -w "$ip" \
            >"$d/$name.json" 2>"$d/$name.err"
        echo "rc=$?" >"$d/$name.rc"
        echo "$(date +%T) nvmf-cli: $s: $name $(cat "$d/$name.rc")"
    }
    nvmf discover discover -o json
    nvmf id-ctrl id-ctrl -n "$nqn" -o json
    nvmf id-ns id-ns -n "$nqn" --namespace-id 1 -o json
    nvmf smart-log smart-log -n "$nqn" -o json
    nvmf error-log error-log -n "$nqn" -e 64 -o json
    # nvme-cli's get-log has no -o json: the status line and exit code are compared.
    nvmf get-log-bad get-log -n "$nqn" -i 0xc0 -l 512
    touch "$LP_SHARE/out/nvmf-cli/done-$s"
}
side nvmet 192.168.77.10 nqn.2026-11.io.example:ref
side ours "${LP_HOST_IP:-192.168.77.1}" "$INTEROP_NQN"
echo "$(date +%T) nvmf-cli: done"
wait $tpid

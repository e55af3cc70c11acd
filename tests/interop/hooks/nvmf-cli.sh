#!/bin/bash
# nvmf-cli.sh - run.sh host hook (-H) of the nvme-cli group's boot when the nvmf-cli
# group rides on it: runs hooks/our-target.sh (our nvmf-target for the nvme-cli
# cells) and, beside it, our `nvmf` command line against Linux nvmet in VM A
# (192.168.77.10): the commands whose nvme-cli `-o json` guest/nvme-cli-diff.sh saves,
# for nvmf-cli-diff.py to compare field by field.
#
# Our nvmf opens its soft RDMA device on a second address of the bridge,
# 192.168.77.2 (INTEROP_NVMF_CLI_IP): 192.168.77.1 is our target's (the soft provider
# opens one device per local address).
# Env from run.sh: LP_SHARE, LP_BRIDGE. From run-matrix.sh: NVMF_CLI_BIN (the nvmf
# executable) and what our-target.sh needs.
# Waits for /host/out/B/json-done (nvme-cli's side done), writes
# $LP_SHARE/nvmf-cli/<command>.json (stdout), .err (stderr), .rc ("rc=N"), touches
# $LP_SHARE/out/nvmf-cli/done.
set -u
here="$(dirname "${BASH_SOURCE[0]}")"
"$here/our-target.sh" &
tpid=$!
trap 'kill -TERM $tpid 2>/dev/null; wait $tpid; exit 0' TERM INT

ip=${INTEROP_NVMF_CLI_IP:-192.168.77.2}
nvmet=192.168.77.10
nqn=nqn.2026-11.io.example:ref
out="$LP_SHARE/nvmf-cli"
mkdir -p "$out" "$LP_SHARE/out/nvmf-cli"
ip addr add "$ip/24" dev "$LP_BRIDGE" 2>/dev/null
echo "$(date +%T) nvmf-cli: $NVMF_CLI_BIN from $ip, waiting for nvme-cli's side (out/B/json-done)"
for _ in $(seq 1 1500); do [ -e "$LP_SHARE/out/B/json-done" ] && break; sleep 0.2; done
[ -e "$LP_SHARE/out/B/json-done" ] || echo "$(date +%T) nvmf-cli: nvme-cli's side never finished"

# nvmf NAME ARGS...: our command against nvmet, its outputs in $out/NAME.*
nvmf() {
    local name=$1; shift
    timeout 60 "$NVMF_CLI_BIN" "$@" -t rdma -a "$nvmet" -s 4420 -w "$ip" -o json \
        >"$out/$name.json" 2>"$out/$name.err"
    echo "rc=$?" >"$out/$name.rc"
    echo "$(date +%T) nvmf-cli: $name $(cat "$out/$name.rc")"
}
export NVMF_STATE_DIR="$out/state"
nvmf discover discover
nvmf id-ctrl id-ctrl -n "$nqn"
nvmf id-ns id-ns -n "$nqn" --namespace-id 1
nvmf smart-log smart-log -n "$nqn"
nvmf error-log error-log -n "$nqn" -e 4
# nvme-cli's get-log has no -o json: the status line and exit code are compared.
timeout 60 "$NVMF_CLI_BIN" get-log -t rdma -a "$nvmet" -s 4420 -w "$ip" -n "$nqn" -i 0xc0 -l 512 \
    >"$out/get-log-bad.json" 2>"$out/get-log-bad.err"
echo "rc=$?" >"$out/get-log-bad.rc"
touch "$LP_SHARE/out/nvmf-cli/done"
echo "$(date +%T) nvmf-cli: done"
wait $tpid

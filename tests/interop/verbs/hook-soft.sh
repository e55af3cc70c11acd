#!/bin/bash
# hook-soft.sh - run.sh host hook (-H) of tests/interop/verbs/run.sh: the soft provider
# on the host side of the bridge (192.168.77.1, in the run's network namespace) against
# the verbs provider in the guests:
#   soft-server  soft_pingpong server on :7473 with a memory window, for VM B's
#                verbs_pingpong client (verbs client -> soft server)
#   soft-client  soft_pingpong client from 192.168.77.2 (a second address on the bridge:
#                a soft device owns UDP 4791 of its address) against VM A's
#                verbs_pingpong server on :7474 (soft client -> verbs server)
# Touches $LP_SHARE/out/host-ready once the server listens; writes
# `cell <name> PASS|FAIL <reason>` lines to $LP_SHARE/cells-host.txt.
# Env from run.sh: LP_SHARE, LP_HOST_IP, LP_VMS.
set -u
BIN="$LP_SHARE/bin"
ip=${LP_HOST_IP:-192.168.77.1}
ip2=192.168.77.2
ip addr add "$ip2/24" dev "${LP_BRIDGE:-lpbr0}" 2>/dev/null
A=$(echo "$LP_VMS" | tr ',' '\n' | sed -n 's/^A=//p')
CELLS="$LP_SHARE/cells-host.txt"
: >"$CELLS"
cell() { c_n=$1 c_v=$2; shift 2; echo "cell $c_n $c_v $*" | tee -a "$CELLS"; }

"$BIN/soft_pingpong" server --addr "$ip" --port 7473 --mw --timeout 300 >"$LP_SHARE/soft-server.txt" 2>&1 &
srv=$!
for _ in $(seq 1 100); do grep -q listening "$LP_SHARE/soft-server.txt" && break; sleep 0.1; done
touch "$LP_SHARE/out/host-ready"

for _ in $(seq 1 2000); do [ -e "$LP_SHARE/out/A/ready" ] && break; sleep 0.2; done
if [ -e "$LP_SHARE/out/A/ready" ]; then
    timeout 240 "$BIN/soft_pingpong" client --addr "$ip2" --server "$A" --port 7474 \
        --sizes "${VERBS_SIZES:-1,64,4096,65536,1048576}" --iters "${VERBS_ITERS:-3}" \
        >"$LP_SHARE/soft-client.txt" 2>&1
    rc=$?
    cat "$LP_SHARE/soft-client.txt"
    [ $rc = 0 ] && cell soft-client PASS "$(tail -1 "$LP_SHARE/soft-client.txt")" ||
        cell soft-client FAIL "exit $rc: $(tail -2 "$LP_SHARE/soft-client.txt" | tr '\n' ' ')"
else
    cell soft-client FAIL "VM A never became ready"
fi
wait $srv
rc=$?
cat "$LP_SHARE/soft-server.txt"
[ $rc = 0 ] && cell soft-server PASS "$(tail -1 "$LP_SHARE/soft-server.txt")" ||
    cell soft-server FAIL "exit $rc: $(tail -2 "$LP_SHARE/soft-server.txt" | tr '\n' ' ')"

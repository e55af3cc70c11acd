#!/bin/bash
# hook-soft.sh - run.sh host hook (-H) of tests/interop/verbs/run.sh: the soft provider
# on the host side of the bridge (192.168.77.1, in the run's network namespace) against
# the verbs provider in the guests:
#   soft-server  soft_pingpong server on :7473 with a memory window, for VM B's
#                verbs_pingpong client (verbs client -> soft server)
#   soft-client  soft_pingpong client from 192.168.77.2 (a second address on the bridge:
#                a soft device owns UDP 4791 of its address) against VM A's
#                verbs_pingpong server on :7474 (soft client -> verbs server)
#   soft-target  our nvmf-target (the soft provider) on 192.168.77.3:4420, a 64 MiB
#                sparse file, for VM B's nvmf-bench on the verbs provider; stopped
#                (SIGTERM) once VM B touches out/B/soft-done; PASS when it exits with
#                status 0 and no ERROR or panic in its log
# Touches $LP_SHARE/out/host-ready once the server listens, out/host-target-ready once
# the target serves, out/host-target-stopped after it stopped; writes
# `cell <name> PASS|FAIL <reason>` lines to $LP_SHARE/cells-host.txt.
# Env from run.sh: LP_SHARE, LP_HOST_IP, LP_VMS.
set -u
BIN="$LP_SHARE/bin"
ip=${LP_HOST_IP:-192.168.77.1}
ip2=192.168.77.2
ip3=192.168.77.3
ip addr add "$ip2/24" dev "${LP_BRIDGE:-lpbr0}" 2>/dev/null
ip addr add "$ip3/24" dev "${LP_BRIDGE:-lpbr0}" 2>/dev/null
A=$(echo "$LP_VMS" | tr ',' '\n' | sed -n 's/^A=//p')
CELLS="$LP_SHARE/cells-host.txt"
: >"$CELLS"
cell() { c_n=$1 c_v=$2; shift 2; echo "cell $c_n $c_v $*" | tee -a "$CELLS"; }

tlog="$LP_SHARE/soft-target.log"
rm -f "$LP_SHARE/soft-ns.img"
NO_COLOR=1 RUST_LOG=info "$BIN/nvmf-target" --addr "$ip3" --port 4420 \
    --nqn nqn.2026-11.io.nvmf-rdma:verbs --file "$LP_SHARE/soft-ns.img" --size 64M >"$tlog" 2>&1 &
tgt=$!
# run.sh kills the hook (SIGTERM) when the VMs are gone: take the target along
trap 'kill -TERM $tgt 2>/dev/null; exit 0' TERM INT
for _ in $(seq 1 100); do
    grep -q serving "$tlog" 2>/dev/null && break
    kill -0 $tgt 2>/dev/null || break
    sleep 0.1
done
grep -q serving "$tlog" 2>/dev/null && touch "$LP_SHARE/out/host-target-ready"

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

# our target: stopped once VM B is done with it
for _ in $(seq 1 3000); do [ -e "$LP_SHARE/out/B/soft-done" ] && break; sleep 0.2; done
if kill -0 $tgt 2>/dev/null; then
    kill -TERM $tgt
    for _ in $(seq 1 50); do kill -0 $tgt 2>/dev/null || break; sleep 0.1; done
    kill -0 $tgt 2>/dev/null && { echo "nvmf-target ignored SIGTERM for 5 s, SIGKILL"; kill -KILL $tgt; }
fi
wait $tgt
rc=$?
cat "$tlog"
if [ $rc = 0 ] && ! grep -qiE "panicked|ERROR" "$tlog"; then
    cell soft-target PASS "nvmf-target (soft) on $ip3 served VM B's verbs nvmf-bench and stopped cleanly (status 0, no ERROR/panic in its log)"
else
    cell soft-target FAIL "status $rc; $(grep -m2 -iE 'panicked|ERROR|error' "$tlog" | tr '\n' ' ')"
fi
touch "$LP_SHARE/out/host-target-stopped"

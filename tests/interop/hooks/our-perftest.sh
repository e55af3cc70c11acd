#!/bin/bash
# our-perftest.sh - run.sh host hook (-H) of the interop matrix's `perftest` group
# (issue 17 item 1): our rdma-perf (soft provider on the bridge, 192.168.77.1) against
# Linux's perftest on rxe0 in VM A (guest/perftest-cells.sh), both roles:
#   ours-client/<test>   rdma-perf <test> ... 192.168.77.10 against ib_<test> serving in
#                        the guest, for write_bw, read_bw, send_lat, send_bw-UD
#                        (`-c UD`, 1024-byte messages) and write_bw-UC (`-c UC`);
#   guest-client/<test>  ib_<test> ... 192.168.77.1 in the guest against our rdma-perf
#                        server.
# A cell passes when both sides exit 0 and both print a result row for the size and
# iterations asked for (BW: perftest's server prints the client's row, which ours
# sends it over TCP; latency: both measure). Writes `cell ...` lines to
# $LP_SHARE/cells-perftest.txt and touches $LP_SHARE/out/stop.
#
#   verbs-client/<test> our rdma-perf on the verbs provider (rxe0) in the guest, when the
#                        run put one at $LP_SHARE/bin/rdma-perf, against our server, for
#                        write_bw and send_lat.
# Env from run.sh: LP_SHARE, LP_HOST_IP, LP_VMS. From run-matrix.sh: RDMA_PERF_BIN.
# LP_PERF_BW / LP_PERF_LAT (size:iters) must match the guest's (-a perf_bw=...).
set -u
BIN=${RDMA_PERF_BIN:?RDMA_PERF_BIN not set}
host_ip=${LP_HOST_IP:-192.168.77.1}
vm=$(echo "$LP_VMS" | tr ',' '\n' | sed -n 's/^A=//p')
BW=${LP_PERF_BW:-65536:200} LAT=${LP_PERF_LAT:-64:200}
CELLS="$LP_SHARE/cells-perftest.txt"
A="$LP_SHARE/out/A"
: >"$CELLS"
cell() { c_n=$1 c_v=$2; shift 2; echo "cell $c_n $c_v $*" | tee -a "$CELLS"; }
done_() { touch "$LP_SHARE/out/stop"; exit 0; }
trap done_ TERM INT
# An item is TEST or TEST@CONN (perftest's -c CONN); cells and files name it TEST-CONN.
ITEMS="write_bw read_bw send_lat send_bw@UD write_bw@UC"
spec() {   # size:iters of an item (UD: one 1024-byte MTU, rxe's on the bridge)
    case $1 in *_bw*) s_=$BW ;; *) s_=$LAT ;; esac
    case $1 in *@UD) s_=1024:${s_##*:} ;; esac
    echo "$s_"
}
conn() { case $1 in *@*) echo "-c ${1#*@}" ;; esac; }
wait_for() { for _ in $(seq 1 "$2"); do [ -e "$1" ] && return 0; sleep 0.2; done; return 1; }
# has_row FILE SIZE ITERS: a result row " SIZE  ITERS ..." with a positive figure
has_row() {
    awk -v s="$2" -v n="$3" '$1 == s && $2 == n && $4 + 0 > 0 { f = 1 } END { exit !f }' "$1"
}
row() { awk -v s="$2" '$1 == s' "$1" | head -1 | tr -s ' \t' ' '; }
judge() {   # judge CELL TEST OURS_LOG OURS_RC GUEST_LOG GUEST_RC
    local c=$1 t=$2 size iters
    size=${3%%:*}; iters=${3##*:}; shift 3
    if [ "$2" = 0 ] && [ "$4" = 0 ] && has_row "$1" "$size" "$iters" && has_row "$3" "$size" "$iters"; then
        cell "$c" PASS "both exit 0; ours: $(row "$1" "$size"); peer: $(row "$3" "$size")"
    else
        cell "$c" FAIL "ours exit $2, peer exit $4; ours: $(tail -2 "$1" | tr "\n" " "); peer: $(tail -3 "$3" 2>/dev/null | tr '\n' ' ')"
    fi
}

# 1. Linux's perftest serving, our client.
for item in $ITEMS; do
    s=$(spec "$item")
    t=$(echo "$item" | tr @ -)
    log="$LP_SHARE/ours-client-$t.log"
    if ! wait_for "$A/srv-$t-ready" 1200; then
        cell "ours-client/$t" FAIL "the guest never started ib_$t (see console-A.log)"
        continue
    fi
    sleep 0.5
    echo "$(date +%T) ours-client/$t"
    # shellcheck disable=SC2046
    timeout 150 "$BIN" "${item%@*}" $(conn "$item") --bind "$host_ip" -s "${s%%:*}" -n "${s##*:}" "$vm" >"$log" 2>&1
    rc=$?
    wait_for "$A/guest-server-$t.rc" 750
    judge "ours-client/$t" "$t" "$s" "$log" "$rc" "$A/guest-server-$t.log" "$(cat "$A/guest-server-$t.rc" 2>/dev/null || echo '?')"
done
serve() {   # serve CELL ITEM READY_FILE GUEST_PREFIX: our server, a guest client
    local c=$1 item=$2 t s log rc pid
    s=$(spec "$item")
    t=$(echo "$item" | tr @ -)
    log="$LP_SHARE/ours-server-${c//\//-}.log"
    echo "$(date +%T) $c"
    # shellcheck disable=SC2046
    timeout 150 "$BIN" "${item%@*}" $(conn "$item") --bind "$host_ip" -s "${s%%:*}" -n "${s##*:}" >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do ss -ltn 2>/dev/null | grep -q ':18515 ' && break; sleep 0.1; done
    touch "$3"
    wait $pid; rc=$?
    wait_for "$A/$4-$t.rc" 750
    judge "$c" "$t" "$s" "$log" "$rc" "$A/$4-$t.log" "$(cat "$A/$4-$t.rc" 2>/dev/null || echo '?')"
}
# 2. Our server, Linux's perftest as the client.
for item in $ITEMS; do
    t=$(echo "$item" | tr @ -)
    serve "guest-client/$t" "$item" "$LP_SHARE/out/ours-srv-$t-ready" guest-client
done
# 3. Our server, our rdma-perf on the verbs provider (rxe0) in the guest as the client.
if [ -x "$LP_SHARE/bin/rdma-perf" ]; then
    for t in write_bw send_lat; do
        serve "verbs-client/$t" "$t" "$LP_SHARE/out/ours-srv-verbs-$t-ready" verbs-client
    done
fi
done_

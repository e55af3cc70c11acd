# perftest-cells.sh - guest scenario (VM A, busybox sh) of the interop matrix's
# `perftest` group (issue 17 item 1): Linux's perftest on rxe0 against our rdma-perf on
# the host side of the bridge (hooks/our-perftest.sh), both roles, one boot.
#   1. ib_write_bw, ib_read_bw, ib_send_lat, and (issue 17 item 5) ib_send_bw -c UD and
#      ib_write_bw -c UC as servers here (our rdma-perf the client);
#   2. the same five as clients of our rdma-perf server at $LP_HOST (192.168.77.1);
#   3. with /host/bin/rdma-perf (a --features verbs build): it, on rxe0, as the client
#      of our soft server, for write_bw and send_lat.
# For each test it writes $LP_OUT/<role>-<test>.log and .rc (perftest's exit status);
# the hook judges the cells. Handshake files on the share: here -> host
# $LP_OUT/srv-<test>-ready (our client may connect), host -> here
# /host/out/ours-srv-<test>-ready (our server listens), /host/out/stop (the end).
# (The loop variable is not `t`: lib.sh's wait_file sets t.)
# Sizes: LP_PERF_BW="65536:200" (size:iters of the BW tests), LP_PERF_LAT="64:200"; a UD
# test sends 1024 bytes (rxe's MTU on the 1500-byte bridge: UD messages are one MTU).
# A test item is TEST or TEST@CONN (`send_bw@UD`: perftest's -c UD); its files are named
# TEST-CONN.
. /host/scenarios/lib.sh
HOST=${LP_HOST:-192.168.77.1}
gid_table
GIDX=$(ipv4_gid_index); GIDX=${GIDX:-1}
echo "IPv4 RoCE v2 GID index: $GIDX"
BW=${LP_PERF_BW:-65536:200} LAT=${LP_PERF_LAT:-64:200}
args() {   # args ITEM: [-c CONN] -s SIZE -n ITERS of the test
    case $1 in *_bw*) spec=$BW ;; *) spec=$LAT ;; esac
    case $1 in *@UD) spec=1024:${spec##*:} ;; esac
    case $1 in *@*) echo "-c ${1#*@} -s ${spec%%:*} -n ${spec##*:}" ;;
    *) echo "-s ${spec%%:*} -n ${spec##*:}" ;; esac
}
ITEMS="write_bw read_bw send_lat send_bw@UD write_bw@UC"

listening() {   # TCP 18515 = 0x4853 in LISTEN (0A)
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '$2 ~ /:4853$/ && $4 == "0A" {f=1} END {exit !f}'
}
for item in $ITEMS; do
    tst=$(echo "$item" | tr @ -)
    echo "=== server: ib_${item%@*} -d rxe0 -x $GIDX $(args $item)"
    ib_${item%@*} -d rxe0 -x "$GIDX" $(args $item) > "$LP_OUT/guest-server-$tst.log" 2>&1 &
    pid=$!
    i=0; while ! listening; do i=$((i + 1)); [ $i -gt 100 ] && break; sleep 0.1; done
    touch "$LP_OUT/srv-$tst-ready"
    # perftest's server waits for its client without a limit: bound it here.
    ( sleep 120; kill $pid 2>/dev/null ) & guard=$!
    wait $pid; echo $? > "$LP_OUT/guest-server-$tst.rc"
    kill $guard 2>/dev/null
    cat "$LP_OUT/guest-server-$tst.log"; echo "=== server exit status $(cat "$LP_OUT/guest-server-$tst.rc")"
done
for item in $ITEMS; do
    tst=$(echo "$item" | tr @ -)
    wait_file "/host/out/ours-srv-$tst-ready" 120 || { echo 99 > "$LP_OUT/guest-client-$tst.rc"; continue; }
    sleep 0.3
    echo "=== client: ib_${item%@*} -d rxe0 -x $GIDX $(args $item) $HOST"
    timeout 120 ib_${item%@*} -d rxe0 -x "$GIDX" $(args $item) "$HOST" > "$LP_OUT/guest-client-$tst.log" 2>&1
    echo $? > "$LP_OUT/guest-client-$tst.rc"
    cat "$LP_OUT/guest-client-$tst.log"; echo "=== client exit status $(cat "$LP_OUT/guest-client-$tst.rc")"
done
# 3. Our rdma-perf on the verbs provider (rxe0 here), when the run brought one
#    (/host/bin/rdma-perf, built with --features verbs), against our soft server.
if [ -x /host/bin/rdma-perf ]; then
    for tst in write_bw send_lat; do
        wait_file "/host/out/ours-srv-verbs-$tst-ready" 120 || { echo 99 > "$LP_OUT/verbs-client-$tst.rc"; continue; }
        sleep 0.3
        echo "=== verbs client: rdma-perf $tst -d rxe0 -x $GIDX $(args $tst) $HOST"
        timeout 120 /host/bin/rdma-perf $tst -d rxe0 -x "$GIDX" $(args $tst) "$HOST" > "$LP_OUT/verbs-client-$tst.log" 2>&1
        echo $? > "$LP_OUT/verbs-client-$tst.rc"
        cat "$LP_OUT/verbs-client-$tst.log"; echo "=== verbs client exit status $(cat "$LP_OUT/verbs-client-$tst.rc")"
    done
fi
wait_file /host/out/stop 300
rxe_counters | tee "$LP_OUT/rxe-counters-after.txt"

# guest-verbs-b.sh - guest scenario (VM B) of the verbs provider's proof on Linux rxe
# (tests/interop/verbs/run.sh): verbs_devinfo, then verbs_pingpong clients against VM
# A's servers (7471: region behind a type 2 memory window; 7472: the MR's rkey), over
# rxe0 <-> rxe0 across the bridge, then against the host's soft-provider server
# (hook-soft.sh, 192.168.77.1:7473, memory window). SEND, RDMA WRITE and RDMA READ of
# 1 B .. 1 MiB, every byte checked. Waits for /host/out/A/ready and /host/out/host-ready.
. /host/scenarios/lib.sh
CELLS="$LP_OUT/cells.txt"
: >"$CELLS"
cell() { c_n=$1 c_v=$2; shift 2; echo "cell $c_n $c_v $*" | tee -a "$CELLS"; }
BIN=/host/bin
A=$(vm_ip A)
ulimit -l unlimited 2>/dev/null

if "$BIN/verbs_devinfo" "$LP_ADDR" >"$LP_OUT/verbs-devinfo.txt" 2>&1; then
    cell devinfo-B PASS "$(grep '^open ' "$LP_OUT/verbs-devinfo.txt")"
else
    cell devinfo-B FAIL "$(tail -2 "$LP_OUT/verbs-devinfo.txt" | tr '\n' ' ')"
fi
specs=""
if wait_file /host/out/A/ready "${LP_READY_TIMEOUT:-400}"; then
    specs="mw:$A:7471 mr:$A:7472"
else
    cell pingpong-mw FAIL "VM A never became ready (see out/A/scenario.log)"
    cell pingpong-mr FAIL "VM A never became ready"
fi
if wait_file /host/out/host-ready 60; then
    specs="$specs soft:192.168.77.1:7473"
else
    cell pingpong-soft FAIL "the host's soft-provider server never became ready (hook.log)"
fi
for spec in $specs; do
    rest=${spec#*:}
    set -- "${spec%%:*}" "${rest%%:*}" "${rest#*:}"   # name, server, port
    log="$LP_OUT/pingpong-client-$1.txt"
    timeout 240 "$BIN/verbs_pingpong" client --addr "$LP_ADDR" --server "$2" --port "$3" \
        --sizes "${LP_SIZES:-1,64,4096,65536,1048576}" --iters "${LP_ITERS:-3}" --timeout 60 >"$log" 2>&1
    rc=$?
    cat "$log"
    if [ $rc = 0 ]; then
        cell "pingpong-$1" PASS "$(tail -1 "$log")"
    else
        cell "pingpong-$1" FAIL "exit $rc: $(tail -2 "$log" | tr '\n' ' ')"
    fi
done
rxe_counters >"$LP_OUT/rxe-counters.txt"

# guest-verbs-b.sh - guest scenario (VM B) of the verbs provider's proof on Linux rxe
# (tests/interop/verbs/run.sh): verbs_devinfo, then verbs_pingpong clients against VM
# A's servers (7471: region behind a type 2 memory window; 7472: the MR's rkey), over
# rxe0 <-> rxe0 across the bridge, then against the host's soft-provider server
# (hook-soft.sh, 192.168.77.1:7473, memory window). SEND, RDMA WRITE and RDMA READ of
# 1 B .. 1 MiB, every byte checked. Waits for /host/out/A/ready and /host/out/host-ready.
# Then our nvmf-bench on the verbs provider (issue 9 §5), each cell a fresh connect,
# Identify, verified randrw (--verify crc32c) and disconnect, sleeping on CQ events
# (--completion event: a busy poller would share this one vCPU with rxe):
#   nvme-soft-*   against our soft-provider nvmf-target on the host side of the bridge
#                 (hook-soft.sh, 192.168.77.3; waits for /host/out/host-target-ready)
#   nvme-linux-*  against Linux nvmet-rdma in VM A (waits for /host/out/A/nvmet-ready)
# at 4 KiB and 128 KiB, iodepth 1 and 32. Touches $LP_OUT/soft-done after the first
# group (the host stops its target) and $LP_OUT/bench-done at the end (VM A stops).
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

# ---- nvmf-bench --provider verbs -----------------------------------------------------
# bench_cells PREFIX TARGET NQN: one cell per spec (name bs iodepth offset size)
bench_cells() {
    b_pfx=$1 b_tgt=$2 b_nqn=$3
    for b_spec in "4k-qd1 4k 1 0 4M" "4k-qd32 4k 32 4M 8M" "128k-qd1 128k 1 12M 16M" \
        "128k-qd32 128k 32 28M 32M"; do
        set -- $b_spec
        b_name="$b_pfx-$1" b_json="$LP_OUT/$b_pfx-$1.json" b_err="$LP_OUT/$b_pfx-$1.stderr"
        NO_COLOR=1 RUST_LOG="${LP_BENCH_LOG:-info}" timeout -s INT -k 10 150 "$BIN/nvmf-bench" \
            --provider verbs --completion event --name "$b_name" \
            --traddr "$b_tgt" --trsvcid 4420 --subnqn "$b_nqn" --host-traddr "$LP_ADDR" \
            --rw randrw --bs "$2" --iodepth "$3" --offset "$4" --size "$5" --runtime 100 \
            --verify crc32c --output-format json --output "$b_json" >"$b_err.out" 2>"$b_err"
        b_rc=$?
        cat "$b_err"
        b_errs=$(grep -oE -m1 '"error" *: *[0-9]+' "$b_json" 2>/dev/null | head -1 | tr -dc '0-9')
        b_rios=$(grep -oE '"total_ios" *: *[0-9]+' "$b_json" 2>/dev/null | sed -n 1p | tr -dc '0-9')
        b_wios=$(grep -oE '"total_ios" *: *[0-9]+' "$b_json" 2>/dev/null | sed -n 2p | tr -dc '0-9')
        b_ver=$(grep -m1 '^verify: [0-9]* blocks verified' "$b_err")
        if [ $b_rc = 0 ] && [ "$b_errs" = 0 ] && echo "$b_ver" | grep -q ' [1-9][0-9]* blocks verified, 0 mismatches'; then
            cell "$b_name" PASS "randrw bs=$2 iodepth=$3 $5 at $4 -> $b_tgt: ${b_rios:-?} reads, ${b_wios:-?} writes, 0 errors, $b_ver"
        elif [ $b_rc = 124 ] || [ $b_rc = 128 ] || [ $b_rc = 130 ]; then
            cell "$b_name" FAIL "stopped by SIGINT after 150 s (the report shows what ran): $(tail -3 "$b_err" | tr '\n' ' ')"
        else
            cell "$b_name" FAIL "exit status $b_rc, error '$b_errs', '$b_ver': $(tail -3 "$b_err" | tr '\n' ' ')"
        fi
    done
}
if [ ! -x "$BIN/nvmf-bench" ]; then
    for g in soft linux; do for c in 4k-qd1 4k-qd32 128k-qd1 128k-qd32; do
        cell "nvme-$g-$c" FAIL "no $BIN/nvmf-bench (built with --features verbs by run.sh)"
    done; done
else
    if wait_file /host/out/host-target-ready 120; then
        bench_cells nvme-soft "${LP_SOFT_TARGET:-192.168.77.3}" "${LP_SOFT_NQN:-nqn.2026-11.io.nvmf-rdma:verbs}"
    else
        cell nvme-soft-target FAIL "the host's nvmf-target never became ready (hook.log, soft-target.log)"
    fi
    touch "$LP_OUT/soft-done"
    if wait_file /host/out/A/nvmet-ready 400; then
        bench_cells nvme-linux "$A" nqn.2026-11.io.example:ref
    else
        cell nvme-linux-target FAIL "VM A's nvmet-rdma never became ready (out/A/scenario.log)"
    fi
fi
touch "$LP_OUT/bench-done"
# the host writes its target's exit cell after soft-done; give it time before power off
wait_file /host/out/host-target-stopped 30 >/dev/null
rxe_counters >"$LP_OUT/rxe-counters.txt"

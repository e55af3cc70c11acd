# guest-verbs-a.sh - guest scenario (VM A) of the verbs provider's proof on Linux rxe
# (tests/interop/verbs/run.sh): our binaries from /host/bin, built with
# `--features verbs`, on the guest's Soft-RoCE device rxe0.
#
#   1. devinfo   verbs_devinfo $LP_ADDR (devices, caps, ports, GID table; the device of
#                the address), next to ibv_devinfo for reference
#   2. tests     the device tests transport/tests/verbs_rxe.rs (--ignored), on rxe0
#   3. pingpong  verbs_pingpong servers: 7471 (region behind a memory window) and 7472
#                (the MR's rkey) for VM B's verbs clients, 7474 for the host's soft-provider
#                client (hook-soft.sh); touches $LP_OUT/ready once all listen
# One `cell <name> PASS|FAIL <reason>` line per step, also in $LP_OUT/cells.txt.
. /host/scenarios/lib.sh
CELLS="$LP_OUT/cells.txt"
: >"$CELLS"
cell() { c_n=$1 c_v=$2; shift 2; echo "cell $c_n $c_v $*" | tee -a "$CELLS"; }
BIN=/host/bin
T0=$(cut -d' ' -f1 /proc/uptime)
ulimit -l unlimited 2>/dev/null

ibv_devinfo -v -d rxe0 >"$LP_OUT/ibv_devinfo.txt" 2>&1
if "$BIN/verbs_devinfo" "$LP_ADDR" >"$LP_OUT/verbs-devinfo.txt" 2>&1; then
    cell devinfo-A PASS "$(grep '^open ' "$LP_OUT/verbs-devinfo.txt")"
else
    cell devinfo-A FAIL "$(tail -2 "$LP_OUT/verbs-devinfo.txt" | tr '\n' ' ')"
fi
cat "$LP_OUT/verbs-devinfo.txt"

echo "--- device tests (verbs_rxe --ignored)"
VERBS_TEST_IP=$LP_ADDR RUST_BACKTRACE=1 timeout "${LP_TESTS_TIMEOUT:-300}" \
    "$BIN/verbs_rxe" --ignored --test-threads=1 --nocapture >"$LP_OUT/verbs_rxe.txt" 2>&1
rc=$?
cat "$LP_OUT/verbs_rxe.txt"
res=$(grep -E '^test result:' "$LP_OUT/verbs_rxe.txt" | tail -1)
if [ $rc = 0 ]; then
    cell tests PASS "$res"
else
    cell tests FAIL "exit status $rc: $res $(grep -E '^test .* FAILED$' "$LP_OUT/verbs_rxe.txt" | tr '\n' ' ')"
fi

echo "--- ping-pong servers"
"$BIN/verbs_pingpong" server --addr "$LP_ADDR" --port 7471 --mw --timeout 240 \
    >"$LP_OUT/pingpong-server-mw.txt" 2>&1 &
p1=$!
"$BIN/verbs_pingpong" server --addr "$LP_ADDR" --port 7472 --timeout 240 \
    >"$LP_OUT/pingpong-server-mr.txt" 2>&1 &
p2=$!
"$BIN/verbs_pingpong" server --addr "$LP_ADDR" --port 7474 --timeout 240 \
    >"$LP_OUT/pingpong-server-soft.txt" 2>&1 &
p3=$!
for _ in $(seq 1 300); do
    grep -q listening "$LP_OUT/pingpong-server-mw.txt" && grep -q listening "$LP_OUT/pingpong-server-mr.txt" &&
        grep -q listening "$LP_OUT/pingpong-server-soft.txt" && break
    sleep 0.2
done
touch "$LP_OUT/ready"
wait $p1; r1=$?
wait $p2; r2=$?
wait $p3; r3=$?
cat "$LP_OUT/pingpong-server-mw.txt" "$LP_OUT/pingpong-server-mr.txt" "$LP_OUT/pingpong-server-soft.txt"
[ $r1 = 0 ] && cell pingpong-server-mw PASS "$(tail -1 "$LP_OUT/pingpong-server-mw.txt")" ||
    cell pingpong-server-mw FAIL "exit $r1: $(tail -2 "$LP_OUT/pingpong-server-mw.txt" | tr '\n' ' ')"
[ $r2 = 0 ] && cell pingpong-server-mr PASS "$(tail -1 "$LP_OUT/pingpong-server-mr.txt")" ||
    cell pingpong-server-mr FAIL "exit $r2: $(tail -2 "$LP_OUT/pingpong-server-mr.txt" | tr '\n' ' ')"
[ $r3 = 0 ] && cell pingpong-server-for-soft PASS "$(tail -1 "$LP_OUT/pingpong-server-soft.txt")" ||
    cell pingpong-server-for-soft FAIL "exit $r3: $(tail -2 "$LP_OUT/pingpong-server-soft.txt" | tr '\n' ' ')"
rxe_counters >"$LP_OUT/rxe-counters.txt"
echo "guest A scenario took $(awk -v t0="$T0" '{printf "%.1f", $1-t0}' /proc/uptime)s"

# verbs-target.sh - guest scenario (VM A) of the interop matrix's verbs-target group:
# our nvmf-target on the verbs provider (built with `--features verbs`, from
# /host/bin) on the guest's Soft-RoCE device rxe0, for Linux's NVMe/RDMA host in VM B
# (interop-host.sh, with lp_target_ip= this VM's address).
#
# Kernel command line (run.sh -a KEY=VAL -> $LP_KEY):
#   LP_NQN       subsystem NQN to serve
#   LP_NS_BYTES  namespace size in bytes (a sparse file in the guest's tmpfs)
# Touches $LP_OUT/ready (= /host/out/A/ready, what interop-host.sh waits for) once
# the target listens; stops it (SIGTERM) when /host/out/stop appears (interop-host.sh
# touches it when done); then compares the regions VM B lists in /host/out/B/data.txt
# ("name offset length sha256") with the backing file.
# Cells (also in $LP_OUT/cells.txt): target-start, data-intact, target-exit (status 0;
# no ERROR, panic or queue the target tore down in its log).
. /host/scenarios/lib.sh
NQN=${LP_NQN:?lp_nqn= missing}
NS_BYTES=${LP_NS_BYTES:-67108864}
CELLS="$LP_OUT/cells.txt"
LOG="$LP_OUT/target.log"
IMG=/tmp/ns1.img
: >"$CELLS"
cell() { c_n=$1 c_v=$2; shift 2; echo "cell $c_n $c_v $*" | tee -a "$CELLS"; }
T0=$(cut -d' ' -f1 /proc/uptime)
ulimit -l unlimited 2>/dev/null
rxe_counters >"$LP_OUT/rxe-counters-before.txt"

# A 16 MiB data slab: 1 GiB guests (the slab is pinned by io_uring and ibv_reg_mr).
NO_COLOR=1 RUST_LOG="${LP_TARGET_LOG:-info}" /host/bin/nvmf-target --provider verbs \
    --addr "$LP_ADDR" --port 4420 --nqn "$NQN" --file "$IMG" --size "$((NS_BYTES / 1048576))M" \
    --data-slab 16M >"$LOG" 2>&1 &
pid=$!
i=0
while ! grep -q serving "$LOG" 2>/dev/null && kill -0 $pid 2>/dev/null && [ $i -lt 300 ]; do
    i=$((i + 1)); sleep 0.1
done
if grep -q serving "$LOG"; then
    cell target-start PASS "$(grep -m1 -o 'serving .*' "$LOG")"
else
    cell target-start FAIL "nvmf-target --provider verbs did not come up: $(tail -3 "$LOG" | tr '\n' ' ')"
    kill -TERM $pid 2>/dev/null
    touch "$LP_OUT/ready"   # VM B then fails its cells at once rather than waiting
    exit 0
fi
touch "$LP_OUT/ready"

wait_file /host/out/stop "${LP_TARGET_TIMEOUT:-420}"
kill -TERM $pid 2>/dev/null
i=0
while kill -0 $pid 2>/dev/null && [ $i -lt 50 ]; do i=$((i + 1)); sleep 0.1; done
kill -0 $pid 2>/dev/null && { echo "!! target ignored SIGTERM for 5 s: SIGKILL"; kill -KILL $pid; }
wait $pid
rc=$?
cat "$LOG"

# The guest's data, compared with the backing file after the target closed it.
bad="" n=0
if [ -s /host/out/B/data.txt ]; then
    while read -r name off len want; do
        got=$(dd if=$IMG bs=1048576 skip=$((off / 1048576)) count=$((len / 1048576)) 2>/dev/null |
            sha256sum | cut -d' ' -f1)
        n=$((n + 1))
        [ "$got" = "$want" ] || bad="$bad $name(file $(echo "$got" | cut -c1-12) != guest $(echo "$want" | cut -c1-12))"
    done </host/out/B/data.txt
    if [ -z "$bad" ]; then
        cell data-intact PASS "$n regions VM B wrote/discarded equal in the backing file ($(du -k $IMG | cut -f1) KiB allocated)"
    else
        cell data-intact FAIL "backing file differs from VM B:$bad"
    fi
else
    cell data-intact FAIL "no /host/out/B/data.txt from VM B"
fi
if [ $rc = 0 ] && ! grep -qiE 'panicked|ERROR|by="target"' "$LOG"; then
    cell target-exit PASS "nvmf-target (verbs) stopped cleanly (status 0; no ERROR, panic or queue torn down by the target in its log); $(grep -o 'idle_sleeps=[0-9]*' "$LOG" | head -1) (poll group asleep on CQ events)"
else
    cell target-exit FAIL "status $rc; $(grep -m2 -iE 'panicked|ERROR|by="target"' "$LOG" | tr '\n' ' ')"
fi
rxe_counters >"$LP_OUT/rxe-counters-after.txt"
echo "guest A scenario took $(awk -v t0="$T0" '{printf "%.1f", $1-t0}' /proc/uptime)s"

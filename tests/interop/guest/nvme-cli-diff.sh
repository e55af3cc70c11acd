# nvme-cli-diff.sh - guest scenario of the interop matrix's nvme-cli group (issue 16
# item 7): the same nvme-cli commands against Linux nvmet (VM A, a 64 MiB null_blk,
# nvmet-target.sh) and against our nvmf-target (on the bridge), their outputs saved
# side by side for the driver to compare (tests/interop/nvme-cli-diff.py).
#
# Runs in VM B (dash, busybox applets). Kernel command line:
#   LP_TARGET_IP  our target's address (192.168.77.1, the bridge)
#   LP_NQN        the subsystem NQN our target serves
# Waits for /host/out/A/ready (nvmet) and /host/out/ours/ready (our target's hook),
# writes $LP_OUT/<side>/<command>.txt (stdout and stderr, then "rc=N") for side nvmet
# and ours, touches /host/out/stop at the end.
# With lp_nvmf_cli=1 (the nvmf-cli group, same boot): after each side's commands,
# nvme-cli's `-o json` of discover, id-ctrl, id-ns, smart-log and error-log against that
# side's controller go to $LP_OUT/<side>-json/<command>.json (stderr in .err, "rc=N"
# in .rc); then it touches /host/out/B/json-done-<side> and waits for our nvmf's same
# commands from the host side (hooks/nvmf-cli.sh, /host/out/nvmf-cli/done-<side>), and
# runs the failing one (get-log of a log neither target has) last, so both read the
# same error log.
. /host/scenarios/lib.sh
OURS=${LP_TARGET_IP:?lp_target_ip= missing}
OURS_NQN=${LP_NQN:?lp_nqn= missing}
NVMET=$(vm_ip A)
NVMET_NQN=nqn.2026-11.io.example:ref
CTRL=/dev/nvme0
DEV=/dev/nvme0n1
T0=$(cut -d' ' -f1 /proc/uptime)

wait_file /host/out/A/ready 240 || echo "!! nvmet never ready"
wait_file /host/out/ours/ready 240 || echo "!! our target never ready"

# save SIDE NAME CMD...: run CMD, keep its output and exit status in SIDE/NAME.txt
save() {
    s_dir="$LP_OUT/$1" s_name=$2; shift 2
    "$@" >"$s_dir/$s_name.txt" 2>&1
    echo "rc=$?" >>"$s_dir/$s_name.txt"
}

# one SIDE ADDR NQN: connect, a little I/O (so the SMART counters move), the commands
one() {
    side=$1 addr=$2 nqn=$3
    mkdir -p "$LP_OUT/$side"
    save "$side" discover timeout 60 nvme discover -t rdma -a "$addr" -s 4420
    save "$side" connect timeout 90 nvme connect -t rdma -a "$addr" -s 4420 -n "$nqn"
    for _ in $(seq 1 100); do [ -b $DEV ] && break; sleep 0.1; done
    if [ ! -b $DEV ]; then
        echo "!! $side: $DEV did not appear" | tee "$LP_OUT/$side/missing.txt"
        return
    fi
    # 1 MiB written and 2 MiB read with O_DIRECT: 2048 + 4096 blocks of 512 bytes.
    dd if=/dev/urandom of=/tmp/pat bs=1048576 count=1 2>/dev/null
    dd if=/tmp/pat of=$DEV bs=1048576 count=1 oflag=direct 2>/dev/null
    dd if=$DEV of=/dev/null bs=1048576 count=2 iflag=direct 2>/dev/null
    # A failing command for the error log: a read past the end of the namespace.
    save "$side" read-past-end nvme read $DEV --start-block=$((64 * 2048)) --block-count=0 \
        --data-size=512 --data=/tmp/out
    save "$side" id-ctrl nvme id-ctrl $CTRL
    save "$side" id-ns nvme id-ns $DEV
    save "$side" list-ns nvme list-ns $CTRL
    save "$side" ns-descs nvme ns-descs $DEV
    save "$side" smart-log nvme smart-log $CTRL
    save "$side" smart-log-ns1 nvme smart-log $CTRL --namespace-id=1
    save "$side" error-log nvme error-log $CTRL --log-entries=4
    save "$side" fw-log nvme fw-log $CTRL
    save "$side" effects-log nvme effects-log $CTRL
    save "$side" changed-ns-list-log nvme changed-ns-list-log $CTRL
    for f in 1 2 4 5 6 7 8 9 0xa 0xb 0xf 0x81; do
        save "$side" "get-feature-$f" nvme get-feature $CTRL --feature-id=$f
    done
    for l in 0 1 2 3 4 5; do
        save "$side" "get-log-$l" nvme get-log $CTRL --log-id=$l --log-len=512
    done
    # Compare (05h): SPDK has it, Linux nvmet does not.
    dd if=$DEV of=/tmp/blk bs=4096 count=1 iflag=direct 2>/dev/null
    save "$side" compare nvme compare $DEV --start-block=0 --block-count=7 \
        --data-size=4096 --data=/tmp/blk
    save "$side" disconnect nvme disconnect -n "$nqn"
    for _ in $(seq 1 50); do [ -e $CTRL ] || break; sleep 0.1; done
}

# json NAME CMD...: nvme-cli's JSON of CMD in nvmet-json/NAME.json, its status in NAME.rc
json() {
    j_name=$1; shift
    "$@" >"$LP_OUT/$j_side-json/$j_name.json" 2>"$LP_OUT/$j_side-json/$j_name.err"
    echo "rc=$?" >"$LP_OUT/$j_side-json/$j_name.rc"
}

# nvmf_cli_side SIDE ADDR NQN (the nvmf-cli group): nvme-cli's -o json against SIDE,
# for our nvmf's to be compared with.
nvmf_cli_side() {
    j_side=$1 j_addr=$2 j_nqn=$3
    mkdir -p "$LP_OUT/$j_side-json"
    json discover timeout 60 nvme discover -t rdma -a "$j_addr" -s 4420 -o json
    timeout 90 nvme connect -t rdma -a "$j_addr" -s 4420 -n "$j_nqn" >/dev/null 2>&1
    for _ in $(seq 1 100); do [ -b $DEV ] && break; sleep 0.1; done
    json id-ctrl nvme id-ctrl $CTRL -o json
    json id-ns nvme id-ns $DEV -o json
    json smart-log nvme smart-log $CTRL -o json
    json error-log nvme error-log $CTRL --log-entries=64 -o json
    touch "/host/out/B/json-done-$j_side"
    wait_file "/host/out/nvmf-cli/done-$j_side" 240 || echo "!! our nvmf never finished ($j_side)"
    json get-log-bad nvme get-log $CTRL --log-id=0xc0 --log-len=512
    nvme disconnect -n "$j_nqn" >/dev/null 2>&1
    for _ in $(seq 1 50); do [ -e $CTRL ] || break; sleep 0.1; done
}

one nvmet "$NVMET" "$NVMET_NQN"
[ "${LP_NVMF_CLI:-0}" = 1 ] && nvmf_cli_side nvmet "$NVMET" "$NVMET_NQN"
one ours "$OURS" "$OURS_NQN"
[ "${LP_NVMF_CLI:-0}" = 1 ] && nvmf_cli_side ours "$OURS" "$OURS_NQN"
echo "guest scenario took $(awk -v t0="$T0" '{printf "%.1f", $1-t0}' /proc/uptime)s"
touch /host/out/stop

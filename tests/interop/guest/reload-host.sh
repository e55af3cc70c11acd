# reload-host.sh - guest scenario of the interop group `reload` (issue 16 item 2):
# Linux's NVMe/RDMA host against our nvmf-target, which the host hook
# (hooks/our-reload.sh) reconfigures with SIGHUP while fio with verification runs on
# namespace 1: namespace 2 must appear on the same controller (no reconnect), a
# configuration that does not parse must change nothing, namespace 2 must go again;
# then the second port (4421, another subsystem, connected as nvme1) is removed: its
# controller must lose its connection and fail to reconnect while fio on namespace 1
# (port 4420) goes on; fio on namespace 1 must pass.
#
# Runs inside a linux-peer VM (dash, busybox applets); helpers from lib.sh. Cells
# (`cell NAME PASS|FAIL reason`) also go to $LP_OUT/cells.txt: connect, fio-started,
# ns2-appears, ns2-io, bad-config-unchanged, ns2-disappears, connect-port2,
# port2-ctrl-lost, port2-reconnect-fails, port2-fio-n1-continues, fio-n1-verify,
# no-reconnect (nvme0), disconnect.
# Kernel command line: LP_TARGET_IP, LP_NQN (run.sh -a target_ip=.. -a nqn=..).
# Waits for /host/out/A/ready; asks for each step with /host/out/B/want-*, waits for the
# hook's /host/out/A/<done>; touches /host/out/stop at the end.
. /host/scenarios/lib.sh
NQN=${LP_NQN:?lp_nqn= missing}
T=${LP_TARGET_IP:?lp_target_ip= missing}
CELLS="$LP_OUT/cells.txt"
: > "$CELLS"
cell() {   # cell NAME PASS|FAIL REASON...
    c_n=$1 c_v=$2; shift 2
    echo "cell $c_n $c_v $*" | tee -a "$CELLS"
}
finish() {
    touch /host/out/stop
    exit 0
}
# Error recovery lines of controller nvme0 (the port that stays).
recovery() { dmesg | grep -cE 'nvme nvme0: (Reconnecting|starting error recovery|I/O .*timeout|resetting)'; }
# wait_dev DEV PRESENT(1|0) SECS: until DEV exists (1) or is gone (0)
wait_dev() {
    i=0
    while [ $i -lt $(($3 * 5)) ]; do
        if [ "$2" = 1 ]; then [ -b "$1" ] && return 0; else [ -b "$1" ] || return 0; fi
        sleep 0.2; i=$((i + 1))
    done
    return 1
}

if ! wait_file /host/out/A/ready 180; then
    cell connect FAIL "our target never touched out/A/ready (see hook.log)"
    finish
fi
out=$(timeout 90 nvme connect -t rdma -a "$T" -s 4420 -n "$NQN" 2>&1); rc=$?
echo "$out"
wait_dev /dev/nvme0n1 1 10
if [ $rc != 0 ] || [ ! -b /dev/nvme0n1 ]; then
    cell connect FAIL "nvme connect exit status $rc: $(echo "$out" | tail -1)"
    finish
fi
ctrl=nvme0
cntlid0=$(cat /sys/class/nvme/$ctrl/cntlid 2>/dev/null)
cell connect PASS "/dev/nvme0n1 present, controller $ctrl cntlid $cntlid0"
# The second port's subsystem, as nvme1 (/dev/nvme1n1).
NQN2="$NQN-port2"
out=$(timeout 90 nvme connect -t rdma -a "$T" -s 4421 -n "$NQN2" 2>&1); rc=$?
echo "$out"
wait_dev /dev/nvme1n1 1 10
if [ $rc = 0 ] && [ -b /dev/nvme1n1 ] && [ "$(cat /sys/class/nvme/nvme1/state 2>/dev/null)" = live ]; then
    cell connect-port2 PASS "$NQN2 through port 4421: nvme1 live, /dev/nvme1n1 present"
else
    cell connect-port2 FAIL "nvme connect -s 4421 exit status $rc: $(echo "$out" | tail -1); nvme1 '$(cat /sys/class/nvme/nvme1/state 2>/dev/null)'"
fi
rec0=$(recovery)

# fio with verification on namespace 1, long enough to span the four reloads (the last
# cell below needs about 25 s after fio starts, up to 55 s when the guest is slow).
FIO_S=60
json="$LP_OUT/fio-n1.json"
fio --name=fio-n1 --filename=/dev/nvme0n1 --direct=1 --ioengine=libaio --rw=randrw \
    --bs=4k --iodepth=16 --size=16M --time_based --runtime=$FIO_S --verify=crc32c \
    --verify_backlog=256 --verify_fatal=1 --output-format=json --output="$json" \
    > "$LP_OUT/fio-n1.stderr" 2>&1 &
fio_pid=$!
sleep 5
if kill -0 $fio_pid 2>/dev/null; then
    cell fio-started PASS "fio randrw 4k iodepth=16 verify=crc32c on /dev/nvme0n1 running"
else
    cell fio-started FAIL "fio ended at once: $(tail -3 "$LP_OUT/fio-n1.stderr" | tr '\n' ' ')"
fi

# ---- namespace 2 added (SIGHUP) -----------------------------------------------------
touch /host/out/B/want-add
wait_file /host/out/A/added 60
if wait_dev /dev/nvme0n2 1 30; then
    cntlid=$(cat /sys/class/nvme/$ctrl/cntlid 2>/dev/null)
    if [ "$cntlid" = "$cntlid0" ]; then
        cell ns2-appears PASS "/dev/nvme0n2 appeared on $ctrl (cntlid $cntlid, the same controller: no reconnect); $(dmesg | grep -m1 -iE 'rescan|changed ns|ns.*attribute' | tr -s ' ')"
    else
        cell ns2-appears FAIL "/dev/nvme0n2 appeared, but $ctrl's cntlid is now '$cntlid' (was $cntlid0): reconnected"
    fi
    head -c 1048576 /dev/urandom > /tmp/r1m
    want=$(sha256sum /tmp/r1m | cut -d' ' -f1)
    dd if=/tmp/r1m of=/dev/nvme0n2 bs=1048576 count=1 oflag=direct 2>/dev/null; rc=$?
    got=$(dd if=/dev/nvme0n2 bs=1048576 count=1 iflag=direct 2>/dev/null | sha256sum | cut -d' ' -f1)
    if [ $rc = 0 ] && [ "$got" = "$want" ]; then
        cell ns2-io PASS "1 MiB written to /dev/nvme0n2 read back equal"
    else
        cell ns2-io FAIL "dd exit status $rc, read $got, wrote $want"
    fi
else
    cell ns2-appears FAIL "/dev/nvme0n2 did not appear within 30 s of the reload: $(dmesg | tail -3 | tr '\n' ' ')"
    cell ns2-io FAIL "no /dev/nvme0n2"
fi

# ---- a configuration that does not parse changes nothing ------------------------------
touch /host/out/B/want-bad
wait_file /host/out/A/bad-done 60
sleep 3
if [ -b /dev/nvme0n2 ] && [ -b /dev/nvme0n1 ]; then
    cell bad-config-unchanged PASS "after the refused reload /dev/nvme0n1 and /dev/nvme0n2 are still there"
else
    cell bad-config-unchanged FAIL "after the refused reload: n1 $([ -b /dev/nvme0n1 ] && echo present || echo gone), n2 $([ -b /dev/nvme0n2 ] && echo present || echo gone)"
fi

# ---- namespace 2 removed (SIGHUP) -----------------------------------------------------
touch /host/out/B/want-remove
wait_file /host/out/A/removed 60
if wait_dev /dev/nvme0n2 0 30; then
    cell ns2-disappears PASS "/dev/nvme0n2 went away; /dev/nvme0n1 $([ -b /dev/nvme0n1 ] && echo 'still present' || echo GONE)"
else
    cell ns2-disappears FAIL "/dev/nvme0n2 still present 30 s after the reload"
fi

# ---- the second port removed (SIGHUP) ---------------------------------------------------
touch /host/out/B/want-port-remove
wait_file /host/out/A/port-removed 60
i=0; st=live
while [ $i -lt 100 ]; do
    st=$(cat /sys/class/nvme/nvme1/state 2>/dev/null || echo gone)
    [ "$st" != live ] && break
    sleep 0.2; i=$((i + 1))
done
if [ "$st" != live ]; then
    cell port2-ctrl-lost PASS "nvme1 (port 4421) is '$st' after the reload removed its port: $(dmesg | grep 'nvme nvme1:' | tail -2 | tr -s ' ' | tr '\n' ' ')"
else
    cell port2-ctrl-lost FAIL "nvme1 still live 20 s after the reload removed port 4421"
fi
# nvme-rdma retries every reconnect_delay (10 s); the port is gone, so each attempt fails.
i=0; failed=""
while [ $i -lt 150 ]; do
    failed=$(dmesg | grep -m1 -E 'nvme nvme1: (Failed reconnect attempt|rdma connection establishment failed|Connect rejected)')
    [ -n "$failed" ] && break
    sleep 0.2; i=$((i + 1))
done
st=$(cat /sys/class/nvme/nvme1/state 2>/dev/null || echo gone)
if [ -n "$failed" ] && [ "$st" != live ]; then
    cell port2-reconnect-fails PASS "$(echo "$failed" | tr -s ' '); nvme1 '$st'"
else
    cell port2-reconnect-fails FAIL "no failed reconnect of nvme1 within 30 s (state '$st'): $(dmesg | grep 'nvme1' | tail -3 | tr '\n' ' ')"
fi
if kill -0 $fio_pid 2>/dev/null && [ "$(cat /sys/class/nvme/nvme0/state 2>/dev/null)" = live ]; then
    cell port2-fio-n1-continues PASS "fio on /dev/nvme0n1 (port 4420) still running, nvme0 live"
else
    cell port2-fio-n1-continues FAIL "fio on nvme0n1 $(kill -0 $fio_pid 2>/dev/null && echo running || echo ended), nvme0 '$(cat /sys/class/nvme/nvme0/state 2>/dev/null)'"
fi
timeout 60 nvme disconnect -n "$NQN2" >/dev/null 2>&1

# ---- fio on namespace 1 kept going -----------------------------------------------------
wait $fio_pid; rc=$?
errs=$(grep -oE -m1 '"error" *: *[0-9]+' "$json" 2>/dev/null | head -1 | tr -dc '0-9')
rios=$(grep -oE '"total_ios" *: *[0-9]+' "$json" 2>/dev/null | sed -n 1p | tr -dc '0-9')
wios=$(grep -oE '"total_ios" *: *[0-9]+' "$json" 2>/dev/null | sed -n 2p | tr -dc '0-9')
if [ $rc = 0 ] && [ "$errs" = 0 ]; then
    cell fio-n1-verify PASS "randrw 4k iodepth=16 $FIO_S s verify=crc32c across four reloads: ${rios:-?} reads, ${wios:-?} writes, 0 errors"
else
    cell fio-n1-verify FAIL "fio exit status $rc, error '$errs': $(grep -m3 -iE 'verify|error|bad' "$LP_OUT/fio-n1.stderr" | tr '\n' ' ')"
fi
rec=$(( $(recovery) - rec0 ))
if [ "$rec" = 0 ]; then
    cell no-reconnect PASS "no error recovery, reset, I/O timeout or reconnect in the host's log"
else
    cell no-reconnect FAIL "$rec lines: $(dmesg | grep -m3 -E 'nvme nvme[0-9]+: (Reconnecting|starting error recovery|I/O .*timeout|resetting)' | tr '\n' ' ')"
fi
dmesg | grep -iE 'nvme' | tail -30 > "$LP_OUT/dmesg-nvme.txt"

out=$(timeout 60 nvme disconnect -n "$NQN" 2>&1); rc=$?
if [ $rc = 0 ]; then cell disconnect PASS "$out"; else cell disconnect FAIL "exit status $rc: $out"; fi
finish

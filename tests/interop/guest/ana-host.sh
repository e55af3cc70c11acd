# ana-host.sh - guest scenario of the interop group `ana` (issue 16 item 4): Linux's
# native NVMe multipath (nvme_core.multipath=Y, Debian's default) over two paths to
# our target, whose ANA states flip under fio.
#
# Runs inside a linux-peer VM (dash, busybox applets); helpers from lib.sh. Our
# target (hooks/our-ana.sh) serves one subsystem on $LP_TARGET_IP ports 4420
# (namespace 1's group optimized) and 4421 (non-optimized). Cells:
#   connect      both paths connected into one subsystem (one multipath head)
#   list-subsys  nvme list-subsys shows both paths; the kernel's per-path ana_state is
#                optimized (4420) and non-optimized (4421)
#   io-before    fio's I/O goes through the optimized path only
#   ana-flip     after the hook set 4420 inaccessible and 4421 optimized (the AEN makes
#                the host reread the ANA log), the host shows the new states
#   io-moved     I/O after the flip goes through 4421, none through 4420
#   fio-verify   fio randrw 4 KiB QD16 verify=crc32c across the flip: no error
#   disconnect   nvme disconnect of the subsystem
# Waits for /host/out/A/ready; asks for the flip by touching $LP_OUT/flip and waits
# for $LP_OUT/flipped; touches /host/out/stop when done.
. /host/scenarios/lib.sh
NQN=${LP_NQN:?lp_nqn= missing}
T=${LP_TARGET_IP:?lp_target_ip= missing}
SECS=${LP_ANA_SECS:-40}
CELLS="$LP_OUT/cells.txt"
: > "$CELLS"
cell() {   # cell NAME PASS|FAIL REASON...
    c_n=$1 c_v=$2; shift 2
    echo "cell $c_n $c_v $*" | tee -a "$CELLS"
}
finish() {
    nvme disconnect -n "$NQN" > /dev/null 2>&1
    touch /host/out/stop
    exit 0
}
# ctrl_of PORT: the controller (nvmeN) whose address names trsvcid=PORT
ctrl_of() {
    for c in /sys/class/nvme/nvme*; do
        grep -q "trsvcid=$1" "$c/address" 2>/dev/null && { basename "$c"; return 0; }
    done
    return 1
}
# path_of CTRL: the path device (nvmeXcYnZ) of namespace 1 under controller CTRL
path_of() {
    for p in /sys/class/nvme/"$1"/nvme*c*n1; do
        [ -e "$p" ] && { basename "$p"; return 0; }
    done
    return 1
}
state_of() { cat "/sys/block/$1/ana_state" 2>/dev/null || echo "?"; }
# ios_of PATH: reads + writes completed through path device PATH (its stat fields 1, 5)
ios_of() { awk '{print $1 + $5}' "/sys/block/$1/stat" 2>/dev/null || echo 0; }

echo "multipath: $(cat /sys/module/nvme_core/parameters/multipath 2>/dev/null)"
if ! wait_file /host/out/A/ready 180; then
    cell target-ready FAIL "our target never touched out/A/ready (see hook.log)"
    finish
fi

# ---- connect both paths ----------------------------------------------------------
ok=1 why=""
for port in 4420 4421; do
    out=$(timeout 90 nvme connect -t rdma -a "$T" -s $port -n "$NQN" 2>&1) || { ok=0; why="$why port $port: $(echo "$out" | tail -1)"; }
done
sleep 2
C1=$(ctrl_of 4420) C2=$(ctrl_of 4421)
P1=$(path_of "$C1") P2=$(path_of "$C2")
HEAD=$(ls /sys/class/nvme-subsystem/*/ 2>/dev/null | grep -m1 -E '^nvme[0-9]+n1$')
DEV=/dev/$HEAD
echo "controllers $C1 $C2, paths $P1 $P2, head $HEAD"
if [ $ok = 1 ] && [ -n "$P1" ] && [ -n "$P2" ] && [ -b "$DEV" ]; then
    cell connect PASS "4420 -> $C1 ($P1), 4421 -> $C2 ($P2), one multipath head $DEV"
else
    cell connect FAIL "connect:$why; controllers '$C1' '$C2', paths '$P1' '$P2', head '$HEAD'"
    finish
fi

# ---- list-subsys -----------------------------------------------------------------
nvme list-subsys > "$LP_OUT/list-subsys-before.txt" 2>&1
nvme list-subsys "$DEV" >> "$LP_OUT/list-subsys-before.txt" 2>&1
cat "$LP_OUT/list-subsys-before.txt"
s1=$(state_of "$P1") s2=$(state_of "$P2")
paths=$(grep -c "trsvcid=442[01]" "$LP_OUT/list-subsys-before.txt")
if [ "$s1" = optimized ] && [ "$s2" = non-optimized ] && grep -q "trsvcid=4420" "$LP_OUT/list-subsys-before.txt" \
    && grep -q "trsvcid=4421" "$LP_OUT/list-subsys-before.txt"; then
    cell list-subsys PASS "both paths listed ($paths lines), ana_state $P1 (4420) $s1, $P2 (4421) $s2; $(grep -m2 -E 'optimized' "$LP_OUT/list-subsys-before.txt" | tr -s ' ' | tr '\n' ';')"
else
    cell list-subsys FAIL "ana_state $P1 '$s1' (want optimized), $P2 '$s2' (want non-optimized); list-subsys: $(tr -s ' ' <"$LP_OUT/list-subsys-before.txt" | tr '\n' ';' | cut -c1-300)"
fi

# ---- fio verify across the flip ----------------------------------------------------
json="$LP_OUT/fio-ana.json"
timeout $((SECS + 120)) fio --name=ana --filename="$DEV" --direct=1 --ioengine=libaio \
    --rw=randrw --bs=4k --iodepth=16 --size=32M --time_based --runtime="$SECS" \
    --verify=crc32c --verify_backlog=256 --verify_fatal=1 \
    --output-format=json --output="$json" > "$LP_OUT/fio-ana.stderr" 2>&1 &
fio_pid=$!
sleep $((SECS / 4))
a1=$(ios_of "$P1") a2=$(ios_of "$P2")
sleep 3
b1=$(ios_of "$P1") b2=$(ios_of "$P2")
if [ $((b1 - a1)) -gt 0 ] && [ $((b2 - a2)) = 0 ]; then
    cell io-before PASS "3 s before the flip: $((b1 - a1)) I/Os through $P1 (4420, optimized), $((b2 - a2)) through $P2"
else
    cell io-before FAIL "3 s before the flip: $((b1 - a1)) I/Os through $P1 (4420), $((b2 - a2)) through $P2 (4421)"
fi
t_flip=$(cut -d' ' -f1 /proc/uptime)
touch "$LP_OUT/flip"
if ! wait_file "$LP_OUT/flipped" 30; then
    cell ana-flip FAIL "the hook did not flip the states (no $LP_OUT/flipped)"
else
    i=0
    while [ $i -lt 100 ]; do
        s1=$(state_of "$P1") s2=$(state_of "$P2")
        [ "$s1" = inaccessible ] && [ "$s2" = optimized ] && break
        i=$((i + 1)); sleep 0.2
    done
    took=$(awk -v t0="$t_flip" '{printf "%.1f", $1-t0}' /proc/uptime)
    nvme list-subsys "$DEV" > "$LP_OUT/list-subsys-after.txt" 2>&1
    if [ "$s1" = inaccessible ] && [ "$s2" = optimized ]; then
        cell ana-flip PASS "the host saw $P1 (4420) $s1, $P2 (4421) $s2 ${took}s after asking; $(grep -m2 -E 'optimized|inaccessible' "$LP_OUT/list-subsys-after.txt" | tr -s ' ' | tr '\n' ';')"
    else
        cell ana-flip FAIL "after ${took}s the host shows $P1 '$s1', $P2 '$s2'; $(dmesg | grep -i -m3 ana | tr '\n' ';')"
    fi
fi
sleep 3
c1=$(ios_of "$P1") c2=$(ios_of "$P2")
sleep 3
d1=$(ios_of "$P1") d2=$(ios_of "$P2")
if [ $((d2 - c2)) -gt 0 ] && [ $((d1 - c1)) = 0 ]; then
    cell io-moved PASS "3 s after the flip: $((d2 - c2)) I/Os through $P2 (4421, now optimized), $((d1 - c1)) through $P1"
else
    cell io-moved FAIL "3 s after the flip: $((d1 - c1)) I/Os through $P1 (4420), $((d2 - c2)) through $P2 (4421)"
fi
wait $fio_pid
rc=$?
errs=$(grep -oE -m1 '"error" *: *[0-9]+' "$json" 2>/dev/null | head -1 | tr -dc '0-9')
rios=$(grep -oE '"total_ios" *: *[0-9]+' "$json" 2>/dev/null | sed -n 1p | tr -dc '0-9')
wios=$(grep -oE '"total_ios" *: *[0-9]+' "$json" 2>/dev/null | sed -n 2p | tr -dc '0-9')
if [ $rc = 0 ] && [ "$errs" = 0 ]; then
    cell fio-verify PASS "randrw 4k QD16 ${SECS}s verify=crc32c across the flip: ${rios:-?} reads, ${wios:-?} writes, 0 errors"
else
    cell fio-verify FAIL "fio exit status $rc, error '$errs': $(grep -m3 -iE 'verify|error|bad' "$LP_OUT/fio-ana.stderr" | tr '\n' ' ')"
fi
dmesg | grep -iE "nvme|ana" | tail -20 > "$LP_OUT/dmesg-nvme.txt"

# ---- disconnect ----------------------------------------------------------------------
out=$(timeout 60 nvme disconnect -n "$NQN" 2>&1); rc=$?
if [ $rc = 0 ] && echo "$out" | grep -q "2 controller"; then
    cell disconnect PASS "$(echo "$out" | tail -1)"
else
    cell disconnect FAIL "status $rc: $(echo "$out" | tail -1)"
fi
touch /host/out/stop
exit 0

# interop-host.sh - guest scenario of the interop matrix: Linux's NVMe/RDMA host
# (nvme-cli, nvme-rdma, fio) against our nvmf-target on the host side of the bridge.
#
# Runs inside a linux-peer VM (dash, busybox applets); sourced helpers from lib.sh.
# Every step prints one line `cell <name> PASS|FAIL <reason>`, also collected in
# $LP_OUT/cells.txt, which the driver (tests/interop/run-matrix.sh) reads.
#
# Kernel command line (run.sh -a KEY=VAL -> $LP_KEY):
#   LP_TARGET_IP  our target's address (192.168.77.1, the bridge; fd77::1 over IPv6)
#   LP_NQN        subsystem NQN served by our target
#   LP_NS_BYTES   expected namespace size in bytes (checked against id-ns)
#   LP_IPV6=1     this VM gets fd77::<last IPv4 octet>/64 (lib.sh: ipv6_setup), and
#                 the discovery log must list our target as adrfam ipv6
#   LP_SHORT=1    only discover, connect, fio 4k/128k at iodepth 32, disconnect (the
#                 IPv6 group: the rest is the IPv4 group's)
#   LP_LOSS=1     the loss group (issue 18 item 7; the hook drops LP_LOSS_PCT % of our
#                 target's packets): discover, connect, fio randrw 4 KiB QD16 with
#                 verification for LP_LOSS_SECS s, then the host's reconnects (its
#                 dmesg) and the duplicates its rxe counted against what it received,
#                 disconnect
# Waits for /host/out/A/ready (the hook touches it once nvmf-target listens) and
# touches /host/out/stop when done (the hook then stops the target).
# Data left for the driver in $LP_OUT/data.txt: "name offset length sha256" lines of
# regions whose contents the driver compares with the target's backing file.
. /host/scenarios/lib.sh
NQN=${LP_NQN:?lp_nqn= missing}
T=${LP_TARGET_IP:?lp_target_ip= missing}
NS_BYTES=${LP_NS_BYTES:-0}
CELLS="$LP_OUT/cells.txt"
DATA="$LP_OUT/data.txt"
DEV=/dev/nvme0n1
: > "$CELLS"
: > "$DATA"
T0=$(cut -d' ' -f1 /proc/uptime)
# full: true unless -a short=1
full() { [ "${LP_SHORT:-0}" != 1 ] && ! loss; }
loss() { [ "${LP_LOSS:-0}" = 1 ]; }
if [ "${LP_IPV6:-0}" = 1 ]; then
    ipv6_setup
fi

cell() {   # cell NAME PASS|FAIL REASON...
    c_n=$1 c_v=$2; shift 2
    echo "cell $c_n $c_v $*" | tee -a "$CELLS"
}
MiB=1048576
# sha_region OFFSET_MIB LENGTH_MIB: sha256 of a device region read with O_DIRECT
sha_region() {
    dd if=$DEV bs=$MiB skip="$1" count="$2" iflag=direct 2>/dev/null | sha256sum | cut -d' ' -f1
}
finish() {
    echo "guest scenario took $(awk -v t0="$T0" '{printf "%.1f", $1-t0}' /proc/uptime)s"
    rxe_counters > "$LP_OUT/rxe-counters-after.txt"
    touch /host/out/stop
    exit 0
}

rxe_counters > "$LP_OUT/rxe-counters-before.txt"
if ! wait_file /host/out/A/ready 180; then
    cell target-ready FAIL "our target never touched out/A/ready (see hook.log)"
    finish
fi

# ---- discovery --------------------------------------------------------------------
out=$(timeout 60 nvme discover -t rdma -a "$T" -s 4420 2>&1); rc=$?
echo "$out" | tee "$LP_OUT/discover.txt"
if [ $rc != 0 ]; then
    cell discover FAIL "nvme discover exit status $rc: $(echo "$out" | tail -1)"
elif ! echo "$out" | grep -q "subnqn: *$NQN"; then
    cell discover FAIL "log page has no entry for $NQN"
elif ! echo "$out" | grep -q "trtype: *rdma"; then
    cell discover FAIL "entry's trtype is not rdma"
elif [ "${LP_IPV6:-0}" = 1 ] && ! echo "$out" | grep -q "adrfam: *ipv6"; then
    cell discover FAIL "entry's adrfam is not ipv6: $(echo "$out" | grep -m1 adrfam)"
else
    cell discover PASS "$(echo "$out" | grep -c '^=====Discovery Log Entry') entries, $NQN on rdma $(echo "$out" | grep -m1 'adrfam:' | tr -s ' ') $(echo "$out" | grep -m1 'traddr:' | tr -s ' ')"
fi

# ---- connect ----------------------------------------------------------------------
out=$(timeout 90 nvme connect -t rdma -a "$T" -s 4420 -n "$NQN" 2>&1); rc=$?
echo "$out"
for _ in $(seq 1 100); do [ -b $DEV ] && break; sleep 0.1; done
if [ $rc != 0 ]; then
    cell connect FAIL "nvme connect exit status $rc: $(echo "$out" | tail -1)"
    dmesg | tail -20
    finish
elif [ ! -b $DEV ]; then
    cell connect FAIL "connected, but $DEV did not appear within 10 s"
    dmesg | tail -20
    run nvme disconnect -n "$NQN"
    finish
else
    cell connect PASS "$DEV present"
fi

if full; then
out=$(nvme list 2>&1); rc=$?
echo "$out" | tee "$LP_OUT/list.txt"
if [ $rc = 0 ] && echo "$out" | grep -q "$DEV"; then
    cell list PASS "$(echo "$out" | grep "$DEV" | tr -s ' ')"
else
    cell list FAIL "exit status $rc or $DEV not listed"
fi

out=$(nvme id-ctrl /dev/nvme0 2>&1); rc=$?
echo "$out" > "$LP_OUT/id-ctrl.txt"
subnqn=$(echo "$out" | sed -n 's/^subnqn *: *//p')
oncs=$(echo "$out" | sed -n 's/^oncs *: *//p')
if [ $rc != 0 ]; then
    cell id-ctrl FAIL "exit status $rc: $(echo "$out" | tail -1)"
elif [ "$subnqn" != "$NQN" ]; then
    cell id-ctrl FAIL "subnqn '$subnqn', wanted '$NQN'"
else
    cell id-ctrl PASS "subnqn $subnqn, oncs $oncs, mdts $(echo "$out" | sed -n 's/^mdts *: *//p')"
fi

out=$(nvme id-ns $DEV 2>&1); rc=$?
echo "$out" > "$LP_OUT/id-ns.txt"
nsze=$(echo "$out" | sed -n 's/^nsze *: *//p')
lbads=$(echo "$out" | sed -n 's/.*lbads:\([0-9]*\).*(in use).*/\1/p')
if [ $rc != 0 ] || [ -z "$nsze" ] || [ -z "$lbads" ]; then
    cell id-ns FAIL "exit status $rc, nsze '$nsze', lbads '$lbads'"
else
    bytes=$(( nsze * (1 << lbads) ))
    if [ "$NS_BYTES" != 0 ] && [ "$bytes" != "$NS_BYTES" ]; then
        cell id-ns FAIL "nsze $nsze x 2^$lbads = $bytes bytes, wanted $NS_BYTES"
    else
        cell id-ns PASS "nsze $nsze, lbads $lbads ($bytes bytes)"
    fi
fi
fi   # full

# ---- fio with verification: 4 KiB / 128 KiB, QD 1 / 32, separate regions ------------
# name:bs:iodepth:offset:size
specs="fio-4k-qd1:4k:1:0:4M fio-4k-qd32:4k:32:4M:4M fio-128k-qd1:128k:1:8M:8M fio-128k-qd32:128k:32:16M:8M"
full || specs="fio-4k-qd32:4k:32:4M:4M fio-128k-qd32:128k:32:16M:8M"
loss && specs=""
for spec in $specs; do
    ifs=$IFS; IFS=:; set -- $spec; IFS=$ifs
    json="$LP_OUT/$1.json"
    timeout 300 fio --name="$1" --filename=$DEV --direct=1 --ioengine=libaio \
        --rw=randrw --bs="$2" --iodepth="$3" --offset="$4" --size="$5" \
        --verify=crc32c --do_verify=1 --verify_fatal=1 \
        --output-format=json --output="$json" > "$LP_OUT/$1.stderr" 2>&1
    rc=$?
    errs=$(grep -oE -m1 '"error" *: *[0-9]+' "$json" 2>/dev/null | head -1 | tr -dc '0-9')
    # the first two total_ios of the job are its read and write counts (fio's layout)
    rios=$(grep -oE '"total_ios" *: *[0-9]+' "$json" 2>/dev/null | sed -n 1p | tr -dc '0-9')
    wios=$(grep -oE '"total_ios" *: *[0-9]+' "$json" 2>/dev/null | sed -n 2p | tr -dc '0-9')
    if [ $rc = 0 ] && [ "$errs" = 0 ]; then
        cell "$1" PASS "randrw bs=$2 iodepth=$3 $5 at $4, verify=crc32c: ${rios:-?} reads, ${wios:-?} writes, 0 errors"
    else
        cell "$1" FAIL "fio exit status $rc, error '$errs': $(grep -m3 -iE 'verify|error|bad' "$LP_OUT/$1.stderr" | tr '\n' ' ')"
    fi
done

# ---- 1 MiB sequential writes at QD8 with verification (issue 10 item 5) -------------------
# Each write is an RDMA READ of 1 MiB by our target from this slow emulated host: a
# requester that resends READs while their responses are still arriving wastes the
# link and, once its retries run out, tears the queue down (the driver counts the
# queues our target tore down: cell slow-peer).
if full; then
    timeout 300 fio --name=fio-1m-write-qd8 --filename=$DEV --direct=1 --ioengine=libaio \
        --rw=write --bs=1m --iodepth=8 --offset=48M --size=16M \
        --verify=crc32c --do_verify=1 --verify_fatal=1 \
        --output-format=json --output="$LP_OUT/fio-1m-write-qd8.json" > "$LP_OUT/fio-1m-write-qd8.stderr" 2>&1
    rc=$?
    errs=$(grep -oE -m1 '"error" *: *[0-9]+' "$LP_OUT/fio-1m-write-qd8.json" 2>/dev/null | head -1 | tr -dc '0-9')
    bw=$(grep -oE '"bw" *: *[0-9]+' "$LP_OUT/fio-1m-write-qd8.json" 2>/dev/null | sed -n 2p | tr -dc '0-9')
    if [ $rc = 0 ] && [ "$errs" = 0 ]; then
        cell fio-1m-write-qd8 PASS "write bs=1m iodepth=8 16M at 48M, verify=crc32c: 0 errors, ${bw:-?} KiB/s"
    else
        cell fio-1m-write-qd8 FAIL "fio exit status $rc, error '$errs': $(grep -m3 -iE 'verify|error|bad' "$LP_OUT/fio-1m-write-qd8.stderr" | tr '\n' ' ')"
    fi
    echo "fio-1m-write $((48 * MiB)) $((16 * MiB)) $(sha_region 48 16)" >> "$DATA"
fi

# ---- under loss: fio with verification, reconnects, duplicates (issue 18 item 7) ------
if loss; then
    secs=${LP_LOSS_SECS:-30}
    counter() { cat /sys/class/infiniband/rxe0/ports/1/hw_counters/"$1" 2>/dev/null || echo 0; }
    dup0=$(counter duplicate_request) rcv0=$(counter rcvd_pkts)
    rec0=$(dmesg | grep -cE 'nvme nvme[0-9]+: (Reconnecting|starting error recovery|I/O .*timeout)')
    json="$LP_OUT/fio-4k-qd16-loss.json"
    timeout $((secs + 240)) fio --name=fio-4k-qd16-loss --filename=$DEV --direct=1 \
        --ioengine=libaio --rw=randrw --bs=4k --iodepth=16 --size=16M --time_based \
        --runtime="$secs" --verify=crc32c --verify_backlog=256 --verify_fatal=1 \
        --output-format=json --output="$json" > "$LP_OUT/fio-4k-qd16-loss.stderr" 2>&1
    rc=$?
    errs=$(grep -oE -m1 '"error" *: *[0-9]+' "$json" 2>/dev/null | head -1 | tr -dc '0-9')
    rios=$(grep -oE '"total_ios" *: *[0-9]+' "$json" 2>/dev/null | sed -n 1p | tr -dc '0-9')
    wios=$(grep -oE '"total_ios" *: *[0-9]+' "$json" 2>/dev/null | sed -n 2p | tr -dc '0-9')
    if [ $rc = 0 ] && [ "$errs" = 0 ]; then
        cell fio-4k-qd16-loss PASS "randrw 4k iodepth=16 16M ${secs}s, verify=crc32c, ${LP_LOSS_PCT:-?}% of the target's packets dropped: ${rios:-?} reads, ${wios:-?} writes, 0 errors"
    else
        cell fio-4k-qd16-loss FAIL "fio exit status $rc, error '$errs': $(grep -m3 -iE 'verify|error|bad' "$LP_OUT/fio-4k-qd16-loss.stderr" | tr '\n' ' ')"
    fi
    rec=$(( $(dmesg | grep -cE 'nvme nvme[0-9]+: (Reconnecting|starting error recovery|I/O .*timeout)') - rec0 ))
    if [ "$rec" = 0 ]; then
        cell no-reconnect PASS "no error recovery, I/O timeout or reconnect in the host's log"
    else
        cell no-reconnect FAIL "$rec error recovery / timeout / reconnect lines: $(dmesg | grep -m3 -E 'nvme nvme[0-9]+: (Reconnecting|starting error recovery|I/O .*timeout)' | tr '\n' ' ')"
    fi
    dup=$(( $(counter duplicate_request) - dup0 )) rcv=$(( $(counter rcvd_pkts) - rcv0 ))
    # At most twice the loss rate (the issue's goal): dup / rcv <= 2 x pct / 100.
    if [ "$rcv" -gt 0 ] && [ $(( dup * 100 * 100 )) -le $(( 2 * ${LP_LOSS_PCT:-1} * 100 * rcv )) ]; then
        cell duplicates PASS "$dup duplicate requests of $rcv packets received ($(awk -v d="$dup" -v r="$rcv" 'BEGIN{printf "%.2f", 100*d/r}')%, at most $((2 * ${LP_LOSS_PCT:-1}))%)"
    else
        cell duplicates FAIL "$dup duplicate requests of $rcv packets received ($(awk -v d="$dup" -v r="$rcv" 'BEGIN{printf "%.2f", r ? 100*d/r : 0}')%, more than $((2 * ${LP_LOSS_PCT:-1}))%)"
    fi
    echo "fio-loss-region 0 $((16 * MiB)) $(sha_region 0 16)" >> "$DATA"
elif ! full; then
    echo "fio-regions 0 $((24 * MiB)) $(sha_region 0 24)" >> "$DATA"
else
# ---- flush ------------------------------------------------------------------------
out=$(timeout 60 nvme flush $DEV -n 1 2>&1); rc=$?
echo "$out"
if [ $rc = 0 ]; then cell flush PASS "$out"; else cell flush FAIL "exit status $rc: $out"; fi

# ---- data written by the guest, compared with the backing file later -----------------
# The fio regions (0..24 MiB) plus 1 MiB of random bytes at 32 MiB written with dd.
head -c $MiB /dev/urandom > /tmp/rand1m
want=$(sha256sum /tmp/rand1m | cut -d' ' -f1)
dd if=/tmp/rand1m of=$DEV bs=$MiB seek=32 count=1 oflag=direct 2>/dev/null; rc=$?
got=$(sha_region 32 1)
if [ $rc = 0 ] && [ "$got" = "$want" ]; then
    cell readback PASS "1 MiB of random bytes at 32 MiB read back equal (sha256 ${want%${want#????????????}})"
else
    cell readback FAIL "dd exit status $rc, sha256 read $got, written $want"
fi
echo "random-1m $((32 * MiB)) $MiB $want" >> "$DATA"
echo "fio-regions 0 $((24 * MiB)) $(sha_region 0 24)" >> "$DATA"

# ---- deallocate (blkdiscard) then read zeroes ---------------------------------------
dd if=/tmp/rand1m of=$DEV bs=$MiB seek=40 count=1 oflag=direct 2>/dev/null
zero=$(head -c $MiB /dev/zero | sha256sum | cut -d' ' -f1)
echo "discard: max_bytes=$(cat /sys/block/nvme0n1/queue/discard_max_bytes)" \
     "granularity=$(cat /sys/block/nvme0n1/queue/discard_granularity)"
out=$(timeout 60 blkdiscard -o $((40 * MiB)) -l $MiB $DEV 2>&1); rc=$?
got=$(sha_region 40 1)
if [ $rc != 0 ]; then
    cell discard FAIL "blkdiscard exit status $rc: $out"
elif [ "$got" != "$zero" ]; then
    cell discard FAIL "1 MiB at 40 MiB does not read as zeroes after blkdiscard"
else
    cell discard PASS "blkdiscard of 1 MiB at 40 MiB, reads back as zeroes"
fi
echo "discarded-1m $((40 * MiB)) $MiB $zero" >> "$DATA"
fi   # full

# ---- disconnect -------------------------------------------------------------------
out=$(timeout 60 nvme disconnect -n "$NQN" 2>&1); rc=$?
echo "$out"
if [ $rc = 0 ] && echo "$out" | grep -q "disconnected 1 controller"; then
    cell disconnect PASS "$out"
else
    cell disconnect FAIL "exit status $rc: $out"
fi
sleep 0.5
[ -e /dev/nvme0 ] && echo "!! /dev/nvme0 still present after disconnect"
dmesg | grep -iE 'nvme|rdma' | tail -30
finish

# auth-ublk-host.sh - guest scenario (VM B, Linux 6.12, busybox sh) of the interop
# matrix's `dhchap` group: first linux-peer's nvme-auth-host.sh as it is (its final
# `touch /host/out/stop` deferred), then, on the same boot, issue 15 item 5's
# `nvmf connect --ublk`: our nvmf (/host/bin/nvmf, copied by hooks/our-auth.sh) on our
# soft RoCEv2 provider (rdma_rxe unloaded first: it binds UDP 4791) -> our nvmf-target
# on $LP_HOST (192.168.77.1), subsystem $UNQN, its namespace made /dev/ublkbN by the
# kernel's ublk driver; mkfs.ext4 (the host's mke2fs in /host/bin), mount, a 4 MiB
# file, sync, umount, mount again, sha256 compared, nvmf stopped, the device gone.
# Cells (`cell NAME PASS|FAIL reason`) go to $LP_OUT/ublk-cells.txt; the hook adds
# ublk/backing-file (the file read out of the target's backing file with debugfs).
T0=$(cut -d' ' -f1 /proc/uptime)
sed 's#^touch /host/out/stop$#echo "(stop deferred to the ublk cells)"#' \
    /host/scenarios/nvme-auth-host.sh > /tmp/nvme-auth-host.sh
sh /tmp/nvme-auth-host.sh
. /host/scenarios/lib.sh
HOST=${LP_HOST:-192.168.77.1}
ME=192.168.77.11
UNQN=nqn.2026-11.io.example:ublk
C="$LP_OUT/ublk-cells.txt"
: > "$C"
up() { cut -d' ' -f1 /proc/uptime; }
secs() { awk -v a="$1" -v b="$(up)" 'BEGIN { printf "%.1f", b - a }'; }
cell() { echo "cell $1 $2 $3" | tee -a "$C"; }
export LD_LIBRARY_PATH=/host/bin/lib NVMF_STATE_DIR=/tmp/nvmf-state MKE2FS_CONFIG=/host/bin/mke2fs.conf
NVMF="/host/bin/nvmf connect --ublk -t rdma -a $HOST -s 4420 -n $UNQN -w $ME"
echo "=== ublk: auth part took $(secs "$T0") s; waiting for the hook's binaries and target"
wait_file /host/out/ours/ublk-ready 300 || { cell ublk/setup FAIL "the hook never wrote ublk-ready"; touch /host/out/stop; exit 0; }

# Our soft provider binds UDP 4791 here: Linux's rxe must go first.
run rdma link delete rxe0
run modprobe -r rdma_rxe
grep -q '^rdma_rxe ' /proc/modules && echo "!! rdma_rxe still loaded"

# 1. No driver: the error names modprobe ublk_drv and the exit status is non-zero.
run modprobe -r ublk_drv
t=$(up)
$NVMF > "$LP_OUT/ublk-nodriver.log" 2>&1; rc=$?
cat "$LP_OUT/ublk-nodriver.log"
if [ $rc != 0 ] && grep -q 'modprobe ublk_drv' "$LP_OUT/ublk-nodriver.log" && grep -q 'CONFIG_BLK_DEV_UBLK' "$LP_OUT/ublk-nodriver.log"; then
    cell ublk/no-driver PASS "exit $rc in $(secs "$t") s: $(head -c 200 "$LP_OUT/ublk-nodriver.log" | tr '\n' ' ')"
else
    cell ublk/no-driver FAIL "exit $rc: $(head -c 300 "$LP_OUT/ublk-nodriver.log" | tr '\n' ' ')"
fi
run modprobe ublk_drv
for i in 1 2 3 4 5 6 7 8 9 10; do [ -c /dev/ublk-control ] && break; sleep 0.2; done

# 2. connect --ublk: the device line within 120 s.
t=$(up)
$NVMF > "$LP_OUT/ublk-connect.log" 2> "$LP_OUT/ublk-connect.err" &
pid=$!
dev=""
i=0
while [ $i -lt 600 ]; do
    dev=$(grep -o '^/dev/ublkb[0-9]*' "$LP_OUT/ublk-connect.log" 2>/dev/null | head -1)
    [ -n "$dev" ] && break
    kill -0 $pid 2>/dev/null || break
    i=$((i + 1)); sleep 0.2
done
cat "$LP_OUT/ublk-connect.log" "$LP_OUT/ublk-connect.err"
if [ -n "$dev" ] && [ -b "$dev" ]; then
    cell ublk/connect PASS "$dev up in $(secs "$t") s: $(grep -m1 '^/dev/ublkb' "$LP_OUT/ublk-connect.log"); $(cat /sys/block/${dev#/dev/}/size) sectors, $(cat /sys/block/${dev#/dev/}/queue/logical_block_size)-byte blocks"
else
    cell ublk/connect FAIL "no block device after $(secs "$t") s: $(tail -3 "$LP_OUT/ublk-connect.err" | tr '\n' ' ')"
    for c in mkfs write remount-read stop; do cell ublk/$c FAIL "no device (connect failed)"; done
    kill -TERM $pid 2>/dev/null; wait $pid
    touch /host/out/stop; exit 0
fi

# 3. mkfs.ext4, mount, write 4 MiB, sync, umount.
t=$(up)
if run /host/bin/mke2fs -t ext4 -F -q "$dev" > "$LP_OUT/ublk-mkfs.log" 2>&1; then
    cell ublk/mkfs PASS "mke2fs -t ext4 $dev in $(secs "$t") s"
else
    cell ublk/mkfs FAIL "mke2fs: $(tail -3 "$LP_OUT/ublk-mkfs.log" | tr '\n' ' ')"
fi
cat "$LP_OUT/ublk-mkfs.log"
modprobe ext4 2>/dev/null
mkdir -p /mnt/u
dd if=/dev/urandom of=/tmp/ublk-data bs=1M count=4 2>/dev/null
want=$(sha256sum /tmp/ublk-data | cut -d' ' -f1)
echo "$want" > "$LP_OUT/ublk-data.sha256"
t=$(up)
if run mount -t ext4 "$dev" /mnt/u && cp /tmp/ublk-data /mnt/u/data && sync && run umount /mnt/u; then
    cell ublk/write PASS "mount, 4 MiB file (sha256 $(echo "$want" | cut -c1-16)...), sync, umount in $(secs "$t") s"
else
    cell ublk/write FAIL "mount/write/umount failed: $(dmesg | tail -3 | tr '\n' ' ')"
fi

# 4. Caches dropped, mounted again, read back and compared.
echo 3 > /proc/sys/vm/drop_caches
t=$(up)
got=""
if run mount -t ext4 -o ro "$dev" /mnt/u; then
    got=$(sha256sum /mnt/u/data | cut -d' ' -f1)
    run umount /mnt/u
fi
if [ -n "$got" ] && [ "$got" = "$want" ]; then
    cell ublk/remount-read PASS "mounted again, the file's sha256 matches in $(secs "$t") s"
else
    cell ublk/remount-read FAIL "sha256 ${got:-none} != $want"
fi

# 5. SIGTERM: nvmf deletes the device, disconnects, exits 0.
t=$(up)
kill -TERM $pid
i=0; while kill -0 $pid 2>/dev/null && [ $i -lt 300 ]; do i=$((i + 1)); sleep 0.1; done
wait $pid; rc=$?
sleep 0.5
name=${dev#/dev/}
if [ $rc = 0 ] && [ ! -e "$dev" ] && [ ! -e "/sys/block/$name" ] && [ ! -e "/dev/ublkc${name#ublkb}" ]; then
    cell ublk/stop PASS "nvmf exit 0 in $(secs "$t") s; $dev, /sys/block/$name and /dev/ublkc${name#ublkb} gone"
else
    cell ublk/stop FAIL "nvmf exit $rc; $(ls -l "$dev" /sys/block/$name 2>&1 | tr '\n' ' '); $(tail -2 "$LP_OUT/ublk-connect.err" | tr '\n' ' ')"
fi
cat "$LP_OUT/ublk-connect.err"
echo "=== ublk part took $(secs "$T0") s since the scenario began"
touch /host/out/stop

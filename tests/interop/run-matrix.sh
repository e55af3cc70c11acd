#!/bin/bash
# run-matrix.sh - the interop matrix against Linux 6.1 in QEMU (issue 3 §4).
#
#   tests/interop/run-matrix.sh            (as root; tests/interop.rs runs it)
#
# Cells (each prints `cell <name> PASS|FAIL <reason>`):
#   linux-host/*    Linux's NVMe/RDMA host (nvme-cli, fio) in a VM -> our nvmf-target on
#                   the bridge (192.168.77.1), namespace 1 a loop device opened with
#                   O_DIRECT (IPv6: a sparse file, page cache): discover, connect, list, id-ctrl, id-ns,
#                   fio randrw verify=crc32c at 4k/128k x QD1/QD32, flush, read-back,
#                   blkdiscard reads as zeroes, disconnect; data-intact compares what the
#                   guest wrote with our backing file afterwards; fio 1 MiB writes at QD8
#                   (RDMA READs from the slow emulated host) and slow-peer: no queue torn
#                   down by our target, from the QP counters it logs; target-exit.
#   linux-target/*  our initiator (nvmf-bench --verify crc32c, randrw 4k/128k x QD1/QD32)
#                   -> Linux nvmet-rdma in a VM (192.168.77.10): connect, identify,
#                   verified I/O, disconnect.
#   linux-host-ipv6/*, linux-target-ipv6/*  the same over IPv6 (fd77::/64: our side
#                   fd77::1 on the bridge, the VMs fd77::10 / fd77::11), where Linux
#                   rxe sends every RoCEv2 packet with UDP checksum 0: discover (adrfam
#                   ipv6), connect, fio 4k/128k QD32 verify, disconnect, data-intact,
#                   target-exit; nvmf-bench 4k/128k QD32 --verify crc32c.
#   verbs-target/*  our nvmf-target on the verbs provider (`--features verbs`, kernel
#                   verbs) in VM A (192.168.77.10, Linux rxe) <- Linux's NVMe/RDMA host in
#                   VM B: the linux-host cells (interop-host.sh), then VM A's
#                   target-start, data-intact (VM B's regions in the backing file) and
#                   target-exit (guest/verbs-target.sh). Not in the default groups (it
#                   needs rdma-core's -dev packages to build): .ci/run runs it in its
#                   verbs section with INTEROP_GROUPS=verbs-target.
#   nvme-cli/*      issue 16 item 7: the same nvme-cli commands (id-ctrl, id-ns, smart-log,
#                   error-log, get-feature, list-ns, ns-descs, get-log, ...) from VM B
#                   against Linux nvmet in VM A and against our nvmf-target, compared
#                   field by field (nvme-cli-diff.py): a cell fails on a difference
#                   not listed there with its reason. Not a default group:
#                   INTEROP_GROUPS=nvme-cli (.ci/run runs it).
#   nvmf-cli/*      issue 15 item 5: our `nvmf` command line (tools/src/bin/nvmf.rs) on the
#                   host side (192.168.77.2) -> Linux nvmet in VM A (nvmf-cli/nvmet/*) and
#                   -> our nvmf-target (nvmf-cli/ours/*), on the nvme-cli group's boot
#                   (one boot for both): discover, id-ctrl, id-ns, smart-log, error-log with
#                   `-o json`, parsed and compared field by field with VM B's nvme-cli
#                   `-o json` of the same controller of the same target (nvmf-cli-diff.py, the fields that
#                   differ legitimately listed there with their reasons), and
#                   status-and-exit (a log page nvmet refuses: the same "NVMe status:"
#                   line and exit code). hooks/nvmf-cli.sh. Not a default group:
#                   INTEROP_GROUPS="nvme-cli nvmf-cli" (.ci/run runs it with nvme-cli);
#                   alone it boots the same run and reports only its cells.
#   perftest/*      issue 17 item 1: our rdma-perf (soft provider on the bridge) against
#                   Linux's perftest on rxe0 in VM A, one boot: ours-client/{write_bw,
#                   read_bw,send_lat,send_bw-UD,write_bw-UC} (ib_* serving in the guest;
#                   -c UD / -c UC, issue 17 item 5), guest-client/{...}
#                   (ib_* in the guest against our rdma-perf server), icrc (every RoCEv2
#                   packet of the capture, icrc_check.py); with RDMA_PERF_VERBS_BIN
#                   also verbs-client/{write_bw,send_lat} (that rdma-perf, built with
#                   --features verbs, on rxe0 in the guest against our soft server).
#                   hooks/our-perftest.sh, guest/perftest-cells.sh. Not a default
#                   group: INTEROP_GROUPS=perftest (.ci/run runs it in its verbs
#                   section, with the verbs build).
#   dhchap/*        issue 16 item 5: in-band authentication (DH-HMAC-CHAP) with Linux 6.12
#                   (guest image $LP_OUT_612, built with KVER=6.12 when missing), one boot
#                   of two guests (hooks/our-auth.sh): our host (nvmf-bench
#                   --dhchap-secret/--dhchap-ctrl-secret) -> Linux nvmet in VM A with
#                   host and controller keys (right, bidirectional ffdhe2048, wrong
#                   key, wrong controller key), then Linux's nvme connect in VM B ->
#                   our nvmf-target (no secret, right, bidirectional, wrong controller
#                   secret, wrong secret; the wrong ones refused at once). Then, on
#                   the same boot, ublk/* (issue 15 item 5, guest/auth-ublk-host.sh):
#                   our `nvmf connect --ublk` in VM B (soft provider, rdma_rxe
#                   unloaded) -> our nvmf-target: no-driver (ublk_drv unloaded: the
#                   error names modprobe ublk_drv, exit 1), connect (/dev/ublkbN),
#                   mkfs (ext4), write (mount, 4 MiB file, sync, umount),
#                   remount-read (sha256 matches), stop (SIGTERM: exit 0, device
#                   gone), backing-file (the file out of the target's backing file,
#                   debugfs). Not a default group: INTEROP_GROUPS=dhchap (.ci/run runs it).
#   ana/*           issue 16 item 4: ANA with Linux's native multipath in VM B (nvme_core
#                   multipath=Y): our target (the example ana_control, hooks/our-ana.sh)
#                   on 192.168.77.1 ports 4420 (optimized) and 4421 (non-optimized),
#                   both connected (connect), nvme list-subsys and the kernel's
#                   per-path ana_state (list-subsys), fio randrw verify on the
#                   multipath head through the optimized path (io-before), the hook
#                   flips 4420 -> inaccessible and 4421 -> optimized (ana-flip: the
#                   host rereads the log on the ANA change AEN), I/O moved
#                   (io-moved: per-path /sys/block/nvmeXcYn1/stat), fio-verify,
#                   disconnect, target-exit (guest/ana-host.sh). Not a default group:
#                   INTEROP_GROUPS=ana (.ci/run runs it with nvme-cli).
#   nvmet-ana/*     issue 15 item 4: our host's native multipath (the example
#                   multipath_io, hooks/nvmet-ana.sh, from 192.168.77.3 and .4) ->
#                   Linux nvmet-rdma in VM N (192.168.77.10, guest/nvmet-ana-target.sh)
#                   on ports 4420 (ANA group optimized) and 4421 (non-optimized):
#                   both paths one namespace by nvmet's UUID (CNS 03h; nvmet reports
#                   no NGUID) (connect), I/O on the optimized path only (io-before),
#                   nvmet flips 4420 -> inaccessible and 4421 -> optimized and our
#                   host sees it through the ANA Change AEN (ana-flip), I/O moved to
#                   4421 (io-moved), every block read back as written with no error
#                   (verify), disconnect. Rides on the ana group's boot (one more VM
#                   beside VM B); INTEROP_GROUPS="ana nvmet-ana".
#   reload/*        issue 16 item 2: Linux's host in VM B -> our nvmf-target --config,
#                   reconfigured with SIGHUP by hooks/our-reload.sh while fio with
#                   verification runs on namespace 1 (guest/reload-host.sh): connect,
#                   fio-started, ns2-appears (same controller, no reconnect), ns2-io,
#                   bad-config-unchanged, ns2-disappears, connect-port2 (a second
#                   subsystem through port 4421), port2-ctrl-lost and
#                   port2-reconnect-fails (the reload removed 4421),
#                   port2-fio-n1-continues, fio-n1-verify, no-reconnect (nvme0),
#                   disconnect; the hook's sighup-add, sighup-bad-refused,
#                   sighup-remove, sighup-port-remove (the target's log line for
#                   each); target-exit. Not
#                   a default group: INTEROP_GROUPS=reload (.ci/run runs it).
#   tshark/*        tshark's verdict on the capture of each run (check-capture.sh).
# Exit status: 0 all cells passed, 1 a cell failed, 2 the matrix cannot run here (no
# root, no network namespaces, no QEMU/tcpdump/tshark, no guest image) - with the reason.
#
# Env (all optional):
#   NVMF_TARGET_BIN, NVMF_BENCH_BIN  executables (default build/debug/{nvmf-target,nvmf-bench})
#   RDMA_PERF_BIN  rdma-perf for the perftest group (default build/debug/rdma-perf)
#   NVMF_CLI_BIN  our nvmf command line for the nvmf-cli group (default build/debug/nvmf:
#               cargo build --workspace --bin nvmf)
#   ANA_CONTROL_BIN  the example ana_control for the ana group (default
#               build/debug/examples/ana_control: cargo build --workspace --example ana_control)
#   MULTIPATH_IO_BIN  the example multipath_io for the nvmet-ana group (default
#               build/debug/examples/multipath_io: cargo build --workspace --example multipath_io)
#   RDMA_PERF_VERBS_BIN  rdma-perf built with `--features verbs`: the perftest group's
#               verbs-client cells run it in the guest (none without it)
#   NVMF_TARGET_VERBS_BIN  nvmf-target built with `--features verbs` for verbs-target
#               (default: built here, `cargo build-verbs-cells`, .cargo/config.toml)
#   LP_DIR      the linux-peer harness (default ../shared/linux-peer beside the repository)
#   LP_OUT      guest kernel + initramfs; built with $LP_DIR/build.sh when missing
#               (default /tmp/linux-peer)
#   INTEROP_OUT results (default /tmp/nvmf-interop/run-<time>, the last 3 kept): logs,
#               pcaps (~120 MB), cells.txt
#   INTEROP_GROUPS  which groups to run (default "linux-host linux-target
#               linux-host-ipv6 linux-target-ipv6")
#   INTEROP_PARALLEL=1  run the two VM groups at once (default: one after the other)
#   LP_OUT_612  the Linux 6.12 guest image of the dhchap group (default /tmp/linux-peer-612)
set -u
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
HERE="$REPO/tests/interop"
LP_DIR="${LP_DIR:-$REPO/../shared/linux-peer}"
export LP_OUT="${LP_OUT:-/tmp/linux-peer}"
if [ -z "${INTEROP_OUT:-}" ]; then
    # default results dir; earlier default runs beyond the last 2 are removed (~125 MB each)
    ls -dt /tmp/nvmf-interop/run-* 2>/dev/null | tail -n +3 | xargs -r rm -rf
    INTEROP_OUT="/tmp/nvmf-interop/run-$(date +%Y%m%d-%H%M%S)"
fi
OUT="$INTEROP_OUT"
GROUPS_="${INTEROP_GROUPS:-linux-host linux-target linux-host-ipv6 linux-target-ipv6}"
export NVMF_TARGET_BIN="${NVMF_TARGET_BIN:-$REPO/build/debug/nvmf-target}"
export NVMF_BENCH_BIN="${NVMF_BENCH_BIN:-$REPO/build/debug/nvmf-bench}"
export RDMA_PERF_BIN="${RDMA_PERF_BIN:-$REPO/build/debug/rdma-perf}"
export ANA_CONTROL_BIN="${ANA_CONTROL_BIN:-$REPO/build/debug/examples/ana_control}"
export MULTIPATH_IO_BIN="${MULTIPATH_IO_BIN:-$REPO/build/debug/examples/multipath_io}"
export NVMF_CLI_BIN="${NVMF_CLI_BIN:-$REPO/build/debug/nvmf}"
export INTEROP_NQN=nqn.2026-11.io.nvmf-rdma:interop
export INTEROP_NS_SIZE=64M
NS_BYTES=$((64 << 20))
T_START=$(date +%s)

say() { echo "[interop $(date +%T)] $*"; }
cannot() { echo "interop: CANNOT RUN the matrix: $*" >&2; exit 2; }

# ---- preflight: say exactly why the matrix cannot run ---------------------------------
[ "$(id -u)" = 0 ] || cannot "needs root (network namespaces, tap devices); running as uid $(id -u)"
for c in qemu-system-x86_64 tcpdump tshark ip python3 timeout; do
    command -v "$c" >/dev/null ||
        cannot "'$c' not installed (Debian: apt-get install qemu-system-x86 tcpdump tshark iproute2 python3)"
done
[ -c /dev/net/tun ] || cannot "/dev/net/tun missing (QEMU's tap networking needs it)"
probe_ns="nvmf-interop-probe-$$"
ip netns add "$probe_ns" 2>/tmp/interop-netns.err ||
    cannot "cannot create a network namespace: $(cat /tmp/interop-netns.err)"
ip netns del "$probe_ns"
[ -x "$LP_DIR/run.sh" ] || cannot "linux-peer harness not found at $LP_DIR (set LP_DIR)"
case " $GROUPS_ " in
    *" linux-host"* | *" linux-target"* | *" nvme-cli "* | *" nvmf-cli "* | *" dhchap "* | *" reload "*)
        for b in "$NVMF_TARGET_BIN" "$NVMF_BENCH_BIN"; do
            [ -x "$b" ] || cannot "$b not built (cargo build -p nvmf-target -p nvmf-bench --bins)"
        done ;;
esac
case " $GROUPS_ " in
    *" nvmf-cli "* | *" dhchap "*)
        [ -x "$NVMF_CLI_BIN" ] || cannot "$NVMF_CLI_BIN not built (cargo build --workspace --bin nvmf)" ;;
esac
case " $GROUPS_ " in
    *" ana "* | *" nvmet-ana "*)
        [ -x "$ANA_CONTROL_BIN" ] || cannot "$ANA_CONTROL_BIN not built (cargo build --workspace --example ana_control)" ;;
esac
case " $GROUPS_ " in
    *" nvmet-ana "*)
        [ -x "$MULTIPATH_IO_BIN" ] || cannot "$MULTIPATH_IO_BIN not built (cargo build --workspace --example multipath_io)" ;;
esac
case " $GROUPS_ " in
    *" linux-host-loss "*) command -v nft >/dev/null ||
        cannot "'nft' not installed (the loss group drops packets with nftables; Debian: apt-get install nftables)" ;;
esac
case " $GROUPS_ " in
    *" perftest "*)
        [ -x "$RDMA_PERF_BIN" ] || cannot "$RDMA_PERF_BIN not built (cargo build -p rdma-tools --bin rdma-perf)" ;;
esac
mkdir -p "$OUT"
OUT="$(realpath "$OUT")"
if [[ " $GROUPS_ " == *" verbs-target "* ]] && [ -z "${NVMF_TARGET_VERBS_BIN:-}" ]; then
    say "building nvmf-target with the verbs provider (release, log $OUT/build-verbs.log)"
    (cd "$REPO" && cargo build-verbs-cells) \
        >"$OUT/build-verbs.log" 2>&1 ||
        cannot "cargo build-verbs-cells failed (libibverbs-dev, librdmacm-dev, libclang-dev, pkg-config installed?): $(tail -3 "$OUT/build-verbs.log" | tr '\n' ' ')"
    # Copied at once: a later build without the feature rewrites build/release/nvmf-target.
    mkdir -p "$OUT/verbs-bin"
    cp "$REPO/build/release/nvmf-target" "$OUT/verbs-bin/nvmf-target"
    NVMF_TARGET_VERBS_BIN="$OUT/verbs-bin/nvmf-target"
fi
if [ ! -f "$LP_OUT/bzImage" ] || [ ! -f "$LP_OUT/initramfs.cpio.gz" ]; then
    say "no guest image in $LP_OUT: building it ($LP_DIR/build.sh, log $OUT/build.log)"
    "$LP_DIR/build.sh" >"$OUT/build.log" 2>&1 ||
        cannot "building the guest failed ($LP_DIR/build.sh): $(tail -3 "$OUT/build.log" | tr '\n' ' ')"
fi
LP_OUT_612="${LP_OUT_612:-/tmp/linux-peer-612}"
# build.sh's 6.12 module set (DH-HMAC-CHAP, ublk_drv) plus ext4 for the dhchap group's
# ublk cells (mkfs.ext4 and mount on /dev/ublkbN); an image without ext4 is rebuilt.
LP_612_MODULES="nvme-auth nvme-keyring dh_generic kpp hmac sha256_generic sha512_generic
                sha256-ssse3 sha512-ssse3 ublk_drv ext4"
if [[ " $GROUPS_ " == *" dhchap "* ]] && { [ ! -f "$LP_OUT_612/bzImage" ] || [ ! -f "$LP_OUT_612/initramfs.cpio.gz" ] ||
    ! zcat "$LP_OUT_612/initramfs.cpio.gz" | cpio -t 2>/dev/null | grep -q '/ext4\.ko'; }; then
    say "no Linux 6.12 guest image with ext4 in $LP_OUT_612: building it (KVER=6.12 $LP_DIR/build.sh, log $OUT/build-612.log)"
    KVER=6.12 LP_OUT="$LP_OUT_612" LP_EXTRA_MODULES="$LP_612_MODULES" "$LP_DIR/build.sh" >"$OUT/build-612.log" 2>&1 ||
        cannot "building the 6.12 guest failed: $(tail -3 "$OUT/build-612.log" | tr '\n' ' ')"
fi
# QEMU must at least start (TCG is enough): a failing accelerator or missing ROMs show here.
timeout 20 qemu-system-x86_64 -accel tcg -machine none -nodefaults -display none -S \
    -monitor none -serial none -daemonize -pidfile "$OUT/qemu-probe.pid" >"$OUT/qemu-probe.log" 2>&1 ||
    cannot "qemu-system-x86_64 does not start: $(tr '\n' ' ' <"$OUT/qemu-probe.log")"
kill "$(cat "$OUT/qemu-probe.pid")" 2>/dev/null

# ---- a writable copy of linux-peer with our guest scenario in it -----------------------
LP="$OUT/linux-peer"
rm -rf "$LP"
cp -r "$LP_DIR" "$LP"
chmod -R u+w "$LP"
cp "$HERE"/guest/*.sh "$LP/scenarios/"
export LP_DIR
say "results in $OUT (guest image $LP_OUT, harness copy $LP)"
say "binaries: $NVMF_TARGET_BIN, $NVMF_BENCH_BIN"

CELLS="$OUT/cells.txt"
: >"$CELLS"
add_cells() {   # add_cells GROUP FILE EXPECTED...: cells of FILE, missing ones FAIL
    local group=$1 file=$2; shift 2
    if [ -f "$file" ]; then
        sed -nE "s#^cell ([^ ]*) (PASS|FAIL) (.*)#cell $group/\1 \2 \3#p" "$file" >>"$CELLS"
    fi
    for c in "$@"; do
        grep -q "^cell $group/$c " "$CELLS" || echo "cell $group/$c FAIL never reported (run cut short; see $OUT/$group)" >>"$CELLS"
    done
}

# The cell target-exit of a group whose hook ran our target: PASS when its exit status
# ($d/target.rc) is 0 and its log ($d/target.log) has no line matching PATTERN (grep -E,
# with FLAG -i or ""). Usage: target_exit_cell DIR CELLS NAME FLAG PATTERN [PASS_EXTRA]
target_exit_cell() {
    local d=$1 f=$2 name=$3 flag=$4 pattern=$5 extra=${6:-} rc
    rc=$(cat "$d/target.rc" 2>/dev/null || echo "?")
    if [ "$rc" = 0 ] && ! grep -q $flag -E "$pattern" "$d/target.log"; then
        echo "cell target-exit PASS $name stopped cleanly (status 0, no ERROR/panic in its log)$extra" >>"$f"
    else
        echo "cell target-exit FAIL status $rc; $(grep -m2 $flag -E "$pattern" "$d/target.log" | tr '\n' ' ')" >>"$f"
    fi
}

# ---- group 1: Linux host -> our target (GROUP linux-host or linux-host-ipv6) -------------
run_linux_host() {
    local g=$1 d="$OUT/$1" ipv6=0 tip=192.168.77.1 extra=() ns
    # IPv4: namespace 1 is a loop device opened with O_DIRECT (the block-device back
    # end); IPv6: a sparse file through the page cache (the file back end).
    export INTEROP_LOOP=1
    local capture=(-c "$OUT/$g.pcap")
    unset INTEROP_LOSS_PCT INTEROP_CE_MARK
    if [ "$g" = linux-host-ipv6 ]; then
        ipv6=1 tip=fd77::1 extra=(-a ipv6=1 -a short=1) INTEROP_LOOP=0
    fi
    # Loss toward the Linux host (issue 18 item 7): the hook drops INTEROP_LOSS_PCT % of
    # our target's RoCE packets on their way out; the guest runs fio with verification
    # for INTEROP_LOSS_SECS and counts its reconnects and the duplicates its rxe saw.
    # No capture: the drops happen before the bridge, and the wire checks are the
    # other groups'.
    if [ "$g" = linux-host-loss ]; then
        extra=(-a loss=1 -a loss_secs="${LOSS_SECS:-30}" -a loss_pct="${LOSS_PCT:-1}")
        INTEROP_LOOP=0 capture=()
        export INTEROP_LOSS_PCT=${LOSS_PCT:-1}
        # ECN toward rxe (issue 17 item 4): our target takes CE_MARK of what it
        # receives as CE-marked (NVMF_SOFT_CE_MARK), so its notification point sends
        # CNPs to the host's rxe QPs under the same fio verify; cell cnps-to-rxe, and
        # fio-4k-qd16-loss / no-reconnect say they did no harm.
        export INTEROP_CE_MARK=${CE_MARK:-0.02}
    fi
    mkdir -p "$d"
    export INTEROP_IMG="$OUT/$g-ns1.img"
    rm -f "$INTEROP_IMG"
    ns="$(stat -f -c %T "$OUT") backing file"
    [ "$INTEROP_LOOP" = 1 ] && ns="loop device with O_DIRECT over a $ns"
    say "$g: VM B (nvme-cli, fio) -> our nvmf-target on $tip ($ns)"
    local t0
    t0=$(date +%s)
    INTEROP_IPV6=$ipv6 "$LP/run.sh" -t 480 -o "$d" "${capture[@]}" -a target_ip="$tip" \
        -a nqn="$INTEROP_NQN" -a ns_bytes="$NS_BYTES" "${extra[@]}" -H "$HERE/hooks/our-target.sh" \
        B:192.168.77.11:interop-host.sh >"$OUT/$g.log" 2>&1
    say "$g: run.sh exit status $? after $(( $(date +%s) - t0 )) s"
    local f="$OUT/$g.cells"
    cp "$d/out/B/cells.txt" "$f" 2>/dev/null || : >"$f"
    # data written by the guest against our backing file, after the target closed it
    if [ -s "$d/out/B/data.txt" ] && [ -f "$INTEROP_IMG" ]; then
        local bad="" n=0 name off len want got
        while read -r name off len want; do
            got=$(dd if="$INTEROP_IMG" bs=1M skip=$((off >> 20)) count=$((len >> 20)) 2>/dev/null | sha256sum | cut -d' ' -f1)
            n=$((n + 1))
            [ "$got" = "$want" ] || bad="$bad $name(file ${got:0:12} != guest ${want:0:12})"
        done <"$d/out/B/data.txt"
        if [ -z "$bad" ]; then
            echo "cell data-intact PASS $n regions the guest wrote/discarded equal in our backing file ($(du -k "$INTEROP_IMG" | cut -f1) KiB allocated of 64 MiB)" >>"$f"
        else
            echo "cell data-intact FAIL backing file differs from the guest:$bad" >>"$f"
        fi
    else
        echo "cell data-intact FAIL no data.txt from the guest or no backing file" >>"$f"
    fi
    # Queues our target tore down itself (a QP that failed, a Keep Alive expiry): none
    # may, also not under the slow emulated host's 1 MiB writes (issue 10 item 5); the
    # QP counters it logs at each queue end say what its requesters resent.
    if [ -f "$d/target.log" ]; then
        local torn failed qps resends
        torn=$(grep -c 'queue disconnected.*by="target"' "$d/target.log")
        failed=$(grep 'QP counters at queue end' "$d/target.log" | grep -c 'failed=true')
        qps=$(grep -c 'QP counters at queue end' "$d/target.log")
        resends=$(grep -o 'QP counters at queue end.*' "$d/target.log" | awk '
            { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[2] != "") s[kv[1]] += kv[2] } }
            END { printf "go-back-N restarts %d (adaptive timer %d, IBTA timer %d), READ/WRITE requests %d",
                  s["go_back_n"], s["rto_timeouts"], s["local_ack_timeouts"], s["rdma_sends"] }')
        if [ "$qps" -gt 0 ] && [ "$torn" = 0 ] && [ "$failed" = 0 ]; then
            echo "cell slow-peer PASS $qps queues, none torn down by the target, no QP failed; $resends" >>"$f"
        else
            echo "cell slow-peer FAIL $torn queues torn down by the target, $failed QPs failed ($qps QP counter lines); $resends; $(grep -m2 'by="target"' "$d/target.log" | tr '\n' ' ')" >>"$f"
        fi
    else
        echo "cell slow-peer FAIL no target.log" >>"$f"
    fi
    if [ "$g" = linux-host-loss ]; then
        local cnp
        cnp=$(grep -o 'QP counters at queue end.*' "$d/target.log" 2>/dev/null | awk '
            { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[2] != "") s[kv[1]] += kv[2] } }
            END { printf "%d %d", s["np_cnp_sent"], s["np_ecn_marked"] }')
        if [ "${cnp%% *}" -gt 0 ] 2>/dev/null; then
            echo "cell cnps-to-rxe PASS our target sent ${cnp%% *} CNPs to rxe's QPs for ${cnp##* } CE marks (NVMF_SOFT_CE_MARK=$INTEROP_CE_MARK); fio verify and no-reconnect above ran under them" >>"$f"
        else
            echo "cell cnps-to-rxe FAIL no CNP sent (np_cnp_sent, np_ecn_marked: ${cnp:-no QP counter lines})" >>"$f"
        fi
    fi
    target_exit_cell "$d" "$f" nvmf-target -i "panicked|ERROR"
}

# ---- group 2: our initiator -> Linux target (GROUP linux-target or linux-target-ipv6) ----
run_linux_target() {
    local g=$1 d="$OUT/$1" ipv6=0 tip=192.168.77.10 extra=()
    if [ "$g" = linux-target-ipv6 ]; then
        ipv6=1 tip=fd77::10 extra=(-a ipv6=1)
    fi
    mkdir -p "$d"
    say "$g: our nvmf-bench -> VM A nvmet-rdma ($tip)"
    local t0
    t0=$(date +%s)
    INTEROP_IPV6=$ipv6 "$LP/run.sh" -t 360 -o "$d" -c "$OUT/$g.pcap" -a target_timeout=300 \
        "${extra[@]}" -H "$HERE/hooks/our-initiator.sh" A:192.168.77.10:nvmet-target.sh >"$OUT/$g.log" 2>&1
    say "$g: run.sh exit status $? after $(( $(date +%s) - t0 )) s"
    cp "$d/cells-initiator.txt" "$OUT/$g.cells" 2>/dev/null || : >"$OUT/$g.cells"
}

# ---- group 4: nvme-cli against Linux nvmet (VM A) and against our target, compared -------
# One boot for the nvme-cli and nvmf-cli groups (whichever is asked for; the run's
# directory is nvme-cli/ either way): with nvmf-cli, the guest also saves nvme-cli's
# -o json against nvmet and the hook (hooks/nvmf-cli.sh) runs our nvmf beside our target.
run_nvme_cli() {
    local g=nvme-cli d="$OUT/nvme-cli" hook="$HERE/hooks/our-target.sh" extra=()
    mkdir -p "$d"
    export INTEROP_IMG="$OUT/$g-ns1.img" INTEROP_LOOP=0 INTEROP_READY=ours
    rm -f "$INTEROP_IMG"
    if [[ " $GROUPS_ " == *" nvmf-cli "* ]]; then
        hook="$HERE/hooks/nvmf-cli.sh" extra=(-a nvmf_cli=1)
        say "nvmf-cli: our nvmf ($NVMF_CLI_BIN, from 192.168.77.2) -> Linux nvmet in VM A, against VM B's nvme-cli -o json"
    fi
    say "$g: VM B's nvme-cli -> Linux nvmet in VM A (192.168.77.10) and -> our nvmf-target (192.168.77.1)"
    local t0
    t0=$(date +%s)
    "$LP/run.sh" -t 540 -o "$d" -a target_ip=192.168.77.1 -a nqn="$INTEROP_NQN" \
        -a target_timeout=460 "${extra[@]}" -H "$hook" \
        A:192.168.77.10:nvmet-target.sh B:192.168.77.11:nvme-cli-diff.sh >"$OUT/$g.log" 2>&1
    say "$g: run.sh exit status $? after $(( $(date +%s) - t0 )) s"
    unset INTEROP_READY
    python3 "$HERE/nvme-cli-diff.py" "$d/out/B/nvmet" "$d/out/B/ours" >"$OUT/$g.cells" 2>"$OUT/$g.diff.log"
    if [[ " $GROUPS_ " == *" nvmf-cli "* ]]; then
        : >"$OUT/nvmf-cli.cells"
        for side in nvmet ours; do
            python3 "$HERE/nvmf-cli-diff.py" "$d/out/B/$side-json" "$d/nvmf-cli/$side" "$side" \
                >>"$OUT/nvmf-cli.cells" 2>>"$OUT/nvmf-cli.diff.log"
        done
    fi
}

# ---- group 5: DH-HMAC-CHAP with Linux 6.12, both ways, one boot (issue 16 item 5) ---------
run_dhchap() {
    local g=$1 d="$OUT/$1"
    mkdir -p "$d"
    export INTEROP_IMG="$OUT/$g-ns1.img"
    rm -f "$INTEROP_IMG"
    say "$g: our nvmf-bench -> Linux 6.12 nvmet (VM A), then VM B's nvme connect --dhchap-secret -> our nvmf-target"
    local t0
    t0=$(date +%s)
    LP_OUT="$LP_OUT_612" "$LP/run.sh" -t 600 -o "$d" -c "$OUT/$g.pcap" -a target_ip=192.168.77.1 \
        -a target_name=ours -a target_timeout=500 -H "$HERE/hooks/our-auth.sh" \
        A:192.168.77.10:nvmet-auth-target.sh B:192.168.77.11:auth-ublk-host.sh >"$OUT/$g.log" 2>&1
    say "$g: run.sh exit status $? after $(( $(date +%s) - t0 )) s"
    cp "$d/cells-auth.txt" "$OUT/$g.cells" 2>/dev/null || : >"$OUT/$g.cells"
}

# ---- group 6: ANA under Linux's native multipath, the optimized path flipped under fio ------
run_ana() {
    local g=ana d="$OUT/ana"   # also when only nvmet-ana, which rides on this boot, is asked
    mkdir -p "$d"
    export INTEROP_IMG="$OUT/$g-ns1.img"
    rm -f "$INTEROP_IMG"
    local hook="$HERE/hooks/our-ana.sh" vms=(B:192.168.77.11:ana-host.sh)
    say "$g: VM B (native multipath, fio) -> our target on 192.168.77.1:4420 and :4421, ANA flipped mid-run"
    if [[ " $GROUPS_ " == *" nvmet-ana "* ]]; then
        hook="$HERE/hooks/nvmet-ana.sh" vms+=(N:192.168.77.10:nvmet-ana-target.sh)
        say "nvmet-ana: our multipath host ($MULTIPATH_IO_BIN) -> Linux nvmet in VM N on 192.168.77.10:4420 and :4421, ANA flipped mid-run"
    fi
    local t0
    t0=$(date +%s)
    "$LP/run.sh" -t 420 -o "$d" -a target_ip=192.168.77.1 -a nqn="$INTEROP_NQN" \
        -a ana_secs="${ANA_SECS:-40}" -H "$hook" "${vms[@]}" >"$OUT/$g.log" 2>&1
    say "$g: run.sh exit status $? after $(( $(date +%s) - t0 )) s"
    cp "$d/nvmet-ana/cells.txt" "$OUT/nvmet-ana.cells" 2>/dev/null || : >"$OUT/nvmet-ana.cells"
    local f="$OUT/$g.cells"
    cp "$d/out/B/cells.txt" "$f" 2>/dev/null || : >"$f"
    target_exit_cell "$d" "$f" ana_control -i "panicked|ERROR" "; $(tr '\n' ';' <"$d/ana-control.txt")"
}

# ---- group 7: Linux host -> our target, reconfigured live with SIGHUP (issue 16 item 2) --
run_reload() {
    local g=$1 d="$OUT/$1"
    mkdir -p "$d"
    export INTEROP_IMG="$OUT/$g-ns1.img"
    rm -f "$INTEROP_IMG"
    say "$g: VM B (fio on n1) -> our nvmf-target --config, namespace 2 added and removed by SIGHUP"
    local t0
    t0=$(date +%s)
    "$LP/run.sh" -t 480 -o "$d" -a target_ip=192.168.77.1 -a nqn="$INTEROP_NQN" \
        -H "$HERE/hooks/our-reload.sh" B:192.168.77.11:reload-host.sh >"$OUT/$g.log" 2>&1
    say "$g: run.sh exit status $? after $(( $(date +%s) - t0 )) s"
    cat "$d/out/B/cells.txt" "$d/cells-hook.txt" >"$OUT/$g.cells" 2>/dev/null
    # ERROR as the log level: the refused reload's warning quotes a TOML "parse error".
    target_exit_cell "$d" "$OUT/$g.cells" nvmf-target "" "panicked| ERROR "
}

# ---- group 3: Linux host (VM B) -> our target on the verbs provider in VM A ----------------
run_verbs_target() {
    local g=$1 d="$OUT/$1"
    mkdir -p "$d/bin"
    [ -x "${NVMF_TARGET_VERBS_BIN:-}" ] || { echo "no verbs nvmf-target ($NVMF_TARGET_VERBS_BIN)" >"$OUT/$g.log"; : >"$OUT/$g.cells"; return; }
    cp "$NVMF_TARGET_VERBS_BIN" "$d/bin/nvmf-target"
    say "$g: VM B (nvme-cli, fio) -> our nvmf-target --provider verbs in VM A (192.168.77.10, rxe0)"
    local t0
    t0=$(date +%s)
    "$LP/run.sh" -t 540 -o "$d" -a target_ip=192.168.77.10 -a nqn="$INTEROP_NQN" \
        -a ns_bytes="$NS_BYTES" A:192.168.77.10:verbs-target.sh B:192.168.77.11:interop-host.sh \
        >"$OUT/$g.log" 2>&1
    say "$g: run.sh exit status $? after $(( $(date +%s) - t0 )) s"
    cat "$d/out/B/cells.txt" "$d/out/A/cells.txt" >"$OUT/$g.cells" 2>/dev/null
}

# ---- group 5: our rdma-perf <-> Linux's perftest in VM A, both roles, one boot ----------
run_perftest() {
    local g=$1 d="$OUT/$1"
    mkdir -p "$d"
    export LP_PERF_BW=65536:200 LP_PERF_LAT=64:200
    rm -rf "$d/bin"
    if [ -n "${RDMA_PERF_VERBS_BIN:-}" ]; then
        mkdir -p "$d/bin" && cp "$RDMA_PERF_VERBS_BIN" "$d/bin/rdma-perf"
        PERFTEST_CELLS="$PERFTEST_CELLS verbs-client/write_bw verbs-client/send_lat"
    fi
    say "$g: our rdma-perf (192.168.77.1) <-> perftest on rxe0 in VM A (192.168.77.10)"
    local t0
    t0=$(date +%s)
    "$LP/run.sh" -t 600 -o "$d" -c "$OUT/$g.pcap" -f "udp port 4791 or tcp port 18515" \
        -a perf_bw=$LP_PERF_BW -a perf_lat=$LP_PERF_LAT -H "$HERE/hooks/our-perftest.sh" \
        A:192.168.77.10:perftest-cells.sh >"$OUT/$g.log" 2>&1
    say "$g: run.sh exit status $? after $(( $(date +%s) - t0 )) s"
    cp "$d/cells-perftest.txt" "$OUT/$g.cells" 2>/dev/null || : >"$OUT/$g.cells"
    if [ -s "$OUT/$g.pcap" ]; then
        local icrc
        icrc=$(python3 "$LP_DIR/icrc_check.py" "$OUT/$g.pcap" 2>&1 | tail -1)
        # "N ICRC ok, M bad (...)": every packet, both directions, correct
        if echo "$icrc" | awk '$2 == "ICRC" && $1 > 0 && $4 == 0 { f = 1 } END { exit !f }'; then
            echo "cell icrc PASS $icrc" >>"$OUT/$g.cells"
        else
            echo "cell icrc FAIL $icrc" >>"$OUT/$g.cells"
        fi
    else
        echo "cell icrc FAIL no capture $OUT/$g.pcap" >>"$OUT/$g.cells"
    fi
}

PERFTEST_CELLS="ours-client/write_bw ours-client/read_bw ours-client/send_lat
            ours-client/send_bw-UD ours-client/write_bw-UC
            guest-client/write_bw guest-client/read_bw guest-client/send_lat
            guest-client/send_bw-UD guest-client/write_bw-UC icrc"
HOST_CELLS="discover connect list id-ctrl id-ns fio-4k-qd1 fio-4k-qd32 fio-128k-qd1 fio-128k-qd32
            fio-1m-write-qd8 flush readback discard disconnect data-intact slow-peer target-exit"
HOST6_CELLS="discover connect fio-4k-qd32 fio-128k-qd32 disconnect data-intact slow-peer target-exit"
HOSTLOSS_CELLS="connect fio-4k-qd16-loss no-reconnect duplicates disconnect data-intact slow-peer cnps-to-rxe target-exit"
TARGET_CELLS="bench-4k-qd1 bench-4k-qd32 bench-128k-qd1 bench-128k-qd32 connect identify disconnect"
TARGET6_CELLS="bench-4k-qd32 bench-128k-qd32 connect identify disconnect"
VERBS_TARGET_CELLS="target-start discover connect list id-ctrl id-ns fio-4k-qd1 fio-4k-qd32
            fio-128k-qd1 fio-128k-qd32 fio-1m-write-qd8 flush readback discard disconnect data-intact target-exit"
DHCHAP_CELLS="our-host/h1-right-key our-host/h2-bidirectional our-host/h2-wrong-ctrl-key
            our-host/h1-wrong-key linux-host/a-H1-no-secret linux-host/b-H1-right-secret
            linux-host/b-data-read-back-matches linux-host/d-H2-bidirectional
            linux-host/e-H2-wrong-ctrl-secret linux-host/c-H1-wrong-secret
            linux-host/refused-at-once-(c) linux-host/refused-at-once-(e) target-exit
            ublk/no-driver ublk/connect ublk/mkfs ublk/write ublk/remount-read ublk/stop
            ublk/backing-file"
ANA_CELLS="connect list-subsys io-before ana-flip io-moved fio-verify disconnect target-exit"
NVMET_ANA_CELLS="connect io-before ana-flip io-moved verify disconnect"
RELOAD_CELLS="connect fio-started ns2-appears ns2-io bad-config-unchanged ns2-disappears
            connect-port2 port2-ctrl-lost port2-reconnect-fails port2-fio-n1-continues
            fio-n1-verify no-reconnect disconnect sighup-add sighup-bad-refused sighup-remove
            sighup-port-remove target-exit"
NVMF_CLI_CELLS="nvmet/discover nvmet/id-ctrl nvmet/id-ns nvmet/smart-log nvmet/error-log
            nvmet/status-and-exit ours/discover ours/id-ctrl ours/id-ns ours/smart-log
            ours/error-log ours/status-and-exit"
NVME_CLI_CELLS="discover connect id-ctrl id-ns list-ns ns-descs smart-log smart-log-ns1
            error-log fw-log effects-log changed-ns-list-log get-features get-logs compare
            disconnect"
# Linux's own captures of the same traffic, for the dissector's known limitation.
REF4="$REPO/testdata/captures/linux-nvme-rdma-rxe.pcap"
REF6="$REPO/testdata/captures/linux-nvme-rdma-rxe-ipv6.pcap"

pids=()
for g in $GROUPS_; do
    case "$g" in
        linux-host | linux-host-ipv6 | linux-host-loss) fn=run_linux_host ;;
        linux-target | linux-target-ipv6) fn=run_linux_target ;;
        verbs-target) fn=run_verbs_target ;;
        nvme-cli) fn=run_nvme_cli ;;
        # Rides on the nvme-cli group's boot; boots it alone when that group is not asked for.
        nvmf-cli) [[ " $GROUPS_ " == *" nvme-cli "* ]] && continue; fn=run_nvme_cli ;;
        perftest) fn=run_perftest ;;
        dhchap) fn=run_dhchap ;;
        ana) fn=run_ana ;;
        # Rides on the ana group's boot (VM N beside VM B); boots it alone otherwise.
        nvmet-ana) [[ " $GROUPS_ " == *" ana "* ]] && continue; fn=run_ana ;;
        reload) fn=run_reload ;;
        *) cannot "unknown group '$g' in INTEROP_GROUPS" ;;
    esac
    if [ "${INTEROP_PARALLEL:-0}" = 1 ]; then $fn "$g" & pids+=($!); else $fn "$g"; fi
done
for p in "${pids[@]}"; do wait "$p"; done

for g in $GROUPS_; do
    ours=192.168.77.1 ref=$REF4
    case "$g" in
        linux-host) add_cells $g "$OUT/$g.cells" $HOST_CELLS ;;
        linux-target) add_cells $g "$OUT/$g.cells" $TARGET_CELLS ;;
        linux-host-ipv6) add_cells $g "$OUT/$g.cells" $HOST6_CELLS; ours=fd77::1 ref=$REF6 ;;
        # Drops before the bridge: no capture.
        linux-host-loss) add_cells $g "$OUT/$g.cells" $HOSTLOSS_CELLS; continue ;;
        linux-target-ipv6) add_cells $g "$OUT/$g.cells" $TARGET6_CELLS; ours=fd77::1 ref=$REF6 ;;
        # Linux rxe on both ends: no capture (nothing of our wire code to check).
        verbs-target) add_cells $g "$OUT/$g.cells" $VERBS_TARGET_CELLS; continue ;;
        # Two Linux-side runs compared: no capture.
        nvme-cli) add_cells $g "$OUT/$g.cells" $NVME_CLI_CELLS; continue ;;
        # Our nvmf and nvme-cli against the same nvmet: no capture of ours to check.
        nvmf-cli) add_cells $g "$OUT/$g.cells" $NVMF_CLI_CELLS; continue ;;
        # Its capture's check is its icrc cell (tshark has no perftest dissector).
        perftest) add_cells $g "$OUT/$g.cells" $PERFTEST_CELLS; continue ;;
        # Linux 6.12 on both VMs and ours in the middle: the capture is kept for
        # ../shared/linux-peer/dhchap_verify.py, not checked by tshark.
        dhchap) add_cells $g "$OUT/$g.cells" $DHCHAP_CELLS; continue ;;
        # No capture: the wire is the linux-host groups'.
        ana) add_cells $g "$OUT/$g.cells" $ANA_CELLS; continue ;;
        # Linux nvmet's wire, our host's code: its outcome is in its cells.
        nvmet-ana) add_cells $g "$OUT/$g.cells" $NVMET_ANA_CELLS; continue ;;
        # The reload's outcome is in its cells; the wire is the linux-host group's.
        reload) add_cells $g "$OUT/$g.cells" $RELOAD_CELLS; continue ;;
    esac
    if [ -s "$OUT/$g.pcap" ]; then
        "$HERE/check-capture.sh" "$g" "$OUT/$g.pcap" "$ours" "$ref" >"$OUT/tshark-$g.txt" 2>&1
        sed 's/^/    /' "$OUT/tshark-$g.txt" | grep -v '^    cell '
        add_cells tshark "$OUT/tshark-$g.txt" "$g"
    else
        echo "cell tshark/$g FAIL no capture $OUT/$g.pcap" >>"$CELLS"
    fi
done

echo
echo "== interop matrix ($(( $(date +%s) - T_START )) s wall clock; details in $OUT)"
cat "$CELLS"
for g in $GROUPS_; do
    grep -h "boot_to_ready" "$OUT/$g/timing.txt" 2>/dev/null | sed "s/^/    $g: /"
done
fails=$(grep -c '^cell [^ ]* FAIL' "$CELLS")
passes=$(grep -c '^cell [^ ]* PASS' "$CELLS")
echo "== $passes passed, $fails failed"
if [ "$fails" != 0 ]; then
    for g in $GROUPS_; do
        echo "--- $g: run.sh log (tail)"; tail -5 "$OUT/$g.log" 2>/dev/null
    done
    exit 1
fi
exit 0

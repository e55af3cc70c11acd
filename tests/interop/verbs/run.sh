#!/bin/bash
# run.sh - the verbs provider (transport --features verbs) on Linux's kernel verbs:
# Soft-RoCE (rdma_rxe) in two linux-peer guests (Linux 6.1, QEMU), issue 9 §5.
#
#   tests/interop/verbs/run.sh          (as root)
#
# Builds (release) verbs_devinfo, verbs_pingpong, the device tests verbs_rxe and
# nvmf-bench with --features verbs, and nvmf-target, puts them on the guests' 9p share
# (/host/bin) and boots:
#   VM A 192.168.77.10  guest-verbs-a.sh: devinfo, the device tests (--ignored) on rxe0,
#                       two ping-pong servers (memory window / MR rkey), then Linux
#                       nvmet-rdma (64 MiB null_blk) for B's nvmf-bench
#   VM B 192.168.77.11  guest-verbs-b.sh: devinfo, ping-pong clients against A over the
#                       bridge (SEND, RDMA WRITE, RDMA READ, 1 B .. 1 MiB, bytes checked)
#                       and against the host's soft-provider server; then nvmf-bench
#                       --provider verbs --verify crc32c (randrw 4k/128k x QD1/QD32)
#                       against the host's nvmf-target (nvme-soft-*) and A's nvmet-rdma
#                       (nvme-linux-*)
#   host 192.168.77.1   hook-soft.sh: soft_pingpong (the soft provider) as server for B
#                       and as client of A: soft <-> verbs both ways; nvmf-target (the
#                       soft provider) on 192.168.77.3 for B's nvmf-bench
# and prints one `cell <name> PASS|FAIL <reason>` line per step.
# Exit status: 0 all cells passed, 1 a cell failed, 2 it cannot run here (the reason).
#
# Env (optional): LP_DIR (default ../shared/linux-peer beside the repository), LP_OUT
# (guest image, default /tmp/linux-peer, built when missing), VERBS_OUT (results,
# default /tmp/nvmf-verbs/run-<time>), VERBS_NO_BUILD=1 (use the binaries in
# VERBS_BIN_DIR as they are), VERBS_SIZES / VERBS_ITERS (ping-pong sizes, iterations).
set -u
REPO="$(cd "$(dirname "$0")/../../.." && pwd)"
HERE="$REPO/tests/interop/verbs"
LP_DIR="${LP_DIR:-$REPO/../shared/linux-peer}"
export LP_OUT="${LP_OUT:-/tmp/linux-peer}"
OUT="${VERBS_OUT:-/tmp/nvmf-verbs/run-$(date +%Y%m%d-%H%M%S)}"
say() { echo "[verbs $(date +%T)] $*"; }
cannot() { echo "verbs interop: CANNOT RUN: $*" >&2; exit 2; }

[ "$(id -u)" = 0 ] || cannot "needs root (network namespaces, tap devices); running as uid $(id -u)"
for c in qemu-system-x86_64 ip timeout cargo; do
    command -v "$c" >/dev/null || cannot "'$c' not installed (Debian: apt-get install qemu-system-x86 iproute2)"
done
[ -c /dev/net/tun ] || cannot "/dev/net/tun missing (QEMU's tap networking needs it)"
[ -x "$LP_DIR/run.sh" ] || cannot "linux-peer harness not found at $LP_DIR (set LP_DIR)"
mkdir -p "$OUT/run/bin" || cannot "cannot create $OUT"
OUT="$(realpath "$OUT")"
if [ ! -f "$LP_OUT/bzImage" ] || [ ! -f "$LP_OUT/initramfs.cpio.gz" ]; then
    say "no guest image in $LP_OUT: building it ($LP_DIR/build.sh)"
    "$LP_DIR/build.sh" >"$OUT/build-image.log" 2>&1 ||
        cannot "building the guest failed: $(tail -3 "$OUT/build-image.log" | tr '\n' ' ')"
fi

# ---- binaries --------------------------------------------------------------------------
BIN_DIR="${VERBS_BIN_DIR:-$REPO/build/release}"
if [ "${VERBS_NO_BUILD:-0}" != 1 ]; then
    say "building (release, every crate's verbs feature): examples, the device tests, nvmf-target and nvmf-bench"
    # One invocation for all of them (the alias in .cargo/config.toml), so this build is
    # shared with the verbs-target and perftest groups and with `cargo test-verbs --release`.
    # nvmf-target runs the soft provider on the host side (its default), nvmf-bench the
    # verbs provider in the guests; build/release/nvmf-{target,bench} link rdma-core until
    # the next build without the feature.
    (cd "$REPO" && cargo build-verbs-cells) >"$OUT/build.log" 2>&1 ||
        cannot "cargo build-verbs-cells failed (libibverbs-dev, librdmacm-dev, libclang-dev, pkg-config installed?): $(tail -3 "$OUT/build.log" | tr '\n' ' ')"
    # The same feature set: current after the build above; it prints the test's path.
    (cd "$REPO" && cargo test-verbs --release --test verbs_rxe --no-run) >>"$OUT/build.log" 2>&1 ||
        cannot "building the device tests failed: $(tail -3 "$OUT/build.log" | tr '\n' ' ')"
    TEST_BIN=$(sed -nE 's#.*Executable tests/verbs_rxe.rs \((.*)\)#\1#p' "$OUT/build.log" | tail -1)
    case "$TEST_BIN" in /*) ;; *) TEST_BIN="$REPO/$TEST_BIN" ;; esac
else
    TEST_BIN="${VERBS_TEST_BIN:-$(ls -t "$BIN_DIR"/deps/verbs_rxe-* 2>/dev/null | grep -v '\.d$' | head -1)}"
fi
for b in "$BIN_DIR/examples/verbs_devinfo" "$BIN_DIR/examples/verbs_pingpong" \
    "$BIN_DIR/examples/soft_pingpong" "$BIN_DIR/nvmf-bench" "$BIN_DIR/nvmf-target" "$TEST_BIN"; do
    [ -x "$b" ] || cannot "$b not built"
done
cp "$BIN_DIR/examples/verbs_devinfo" "$BIN_DIR/examples/verbs_pingpong" \
    "$BIN_DIR/examples/soft_pingpong" "$BIN_DIR/nvmf-bench" "$BIN_DIR/nvmf-target" "$OUT/run/bin/"
cp "$TEST_BIN" "$OUT/run/bin/verbs_rxe"

# ---- a writable copy of linux-peer with our guest scenarios ------------------------------
LP="$OUT/linux-peer"
rm -rf "$LP"
cp -r "$LP_DIR" "$LP" && chmod -R u+w "$LP"
cp "$HERE"/guest-*.sh "$LP/scenarios/"

say "results in $OUT/run (guest image $LP_OUT)"
t0=$(date +%s)
extra=()
[ -n "${VERBS_SIZES:-}" ] && extra+=(-a "sizes=$VERBS_SIZES")
[ -n "${VERBS_ITERS:-}" ] && extra+=(-a "iters=$VERBS_ITERS")
export VERBS_SIZES VERBS_ITERS
"$LP/run.sh" -t 900 -o "$OUT/run" -c "$OUT/verbs.pcap" -f "udp port 4791" "${extra[@]}" \
    -H "$HERE/hook-soft.sh" \
    A:192.168.77.10:guest-verbs-a.sh B:192.168.77.11:guest-verbs-b.sh >"$OUT/run.log" 2>&1
say "run.sh exit status $? after $(( $(date +%s) - t0 )) s"

CELLS="$OUT/cells.txt"
: >"$CELLS"
for f in "$OUT/run/out/A/cells.txt" "$OUT/run/out/B/cells.txt" "$OUT/run/cells-host.txt"; do
    [ -f "$f" ] && cat "$f" >>"$CELLS"
done
for c in devinfo-A tests pingpong-server-mw pingpong-server-mr pingpong-server-for-soft \
    devinfo-B pingpong-mw pingpong-mr pingpong-soft soft-client soft-server \
    nvmet-A nvme-soft-4k-qd1 nvme-soft-4k-qd32 nvme-soft-128k-qd1 nvme-soft-128k-qd32 \
    nvme-linux-4k-qd1 nvme-linux-4k-qd32 nvme-linux-128k-qd1 nvme-linux-128k-qd32 soft-target; do
    grep -q "^cell $c " "$CELLS" || echo "cell $c FAIL never reported (see $OUT/run/console-*.log)" >>"$CELLS"
done
if command -v tcpdump >/dev/null && [ -s "$OUT/verbs.pcap" ]; then
    n=$(tcpdump -r "$OUT/verbs.pcap" 2>/dev/null | wc -l)
    echo "capture: $n RoCEv2 (UDP 4791) frames between the guests in $OUT/verbs.pcap"
fi
echo "== verbs provider on Linux rxe ($(( $(date +%s) - t0 )) s; details in $OUT)"
cat "$CELLS"
fails=$(grep -c '^cell [^ ]* FAIL' "$CELLS")
echo "== $(grep -c '^cell [^ ]* PASS' "$CELLS") passed, $fails failed"
[ "$fails" = 0 ] || exit 1
exit 0

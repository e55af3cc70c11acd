#!/bin/bash
# our-initiator.sh - run.sh host hook (-H) of the interop matrix: our initiator
# (nvmf-bench) against Linux's nvmet-rdma target in VM A (scenario nvmet-target.sh,
# subsystem nqn.2026-11.io.example:ref, 64 MiB memory-backed null_blk).
#
# Env from run.sh: LP_SHARE, LP_HOST_IP (192.168.77.1), LP_VMS (A=192.168.77.10),
# LP_BRIDGE.
# Env from run-matrix.sh: NVMF_BENCH_BIN (the nvmf-bench executable); INTEROP_IPV6=1
# for the IPv6 group: from fd77::1 (the bridge gets IPv6 first, see ipv6.sh) to the
# target's fd77::<octet> (VM A runs with -a ipv6=1), 4 KiB and 128 KiB at iodepth 32.
# Waits for $LP_SHARE/out/A/ready, runs one verified randrw job per cell (4 KiB and
# 128 KiB, iodepth 1 and 32; each a fresh connect, Identify, I/O, disconnect), writes
# `cell <name> PASS|FAIL <reason>` lines to $LP_SHARE/cells-initiator.txt and touches
# $LP_SHARE/out/stop (the target VM then powers off).
set -u
NQN=nqn.2026-11.io.example:ref
host_ip=${LP_HOST_IP:-192.168.77.1}
tgt=$(echo "$LP_VMS" | tr ',' '\n' | sed -n 's/^A=//p')
# name bs iodepth offset size
specs=("bench-4k-qd1 4k 1 0 4M" "bench-4k-qd32 4k 32 4M 4M"
       "bench-128k-qd1 128k 1 8M 8M" "bench-128k-qd32 128k 32 16M 8M")
CELLS="$LP_SHARE/cells-initiator.txt"
: >"$CELLS"
cell() { c_n=$1 c_v=$2; shift 2; echo "cell $c_n $c_v $*" | tee -a "$CELLS"; }
done_() { touch "$LP_SHARE/out/stop"; exit 0; }
trap done_ TERM INT

if [ "${INTEROP_IPV6:-0}" = 1 ]; then
    . "$(dirname "$0")/ipv6.sh"
    bridge_ipv6 || { cell ipv6-setup FAIL "cannot give $LP_BRIDGE IPv6 address $INTEROP_HOST_IP6"; done_; }
    host_ip=$INTEROP_HOST_IP6 tgt=$(ip6_of "$tgt")
    specs=("${specs[1]}" "${specs[3]}")
fi

for _ in $(seq 1 900); do [ -e "$LP_SHARE/out/A/ready" ] && break; sleep 0.2; done
if [ ! -e "$LP_SHARE/out/A/ready" ]; then
    cell target-ready FAIL "VM A never touched out/A/ready (see console-A.log)"
    done_
fi
echo "$(date +%T) Linux target $tgt ready"

connects=0 identifies=0 disconnects=0 failures=""
for spec in "${specs[@]}"; do
    set -- $spec
    json="$LP_SHARE/$1.json" err="$LP_SHARE/$1.stderr"
    echo "$(date +%T) $1"
    NO_COLOR=1 RUST_LOG="${INTEROP_BENCH_LOG:-warn}" timeout 120 "$NVMF_BENCH_BIN" --name "$1" \
        --traddr "$tgt" --trsvcid 4420 --subnqn "$NQN" --host-traddr "$host_ip" \
        --rw randrw --bs "$2" --iodepth "$3" --offset "$4" --size "$5" --runtime 60 \
        --verify crc32c --output-format json --output "$json" >"$err.out" 2>"$err"
    rc=$?
    cat "$err"
    errs=$(grep -oE -m1 '"error" *: *[0-9]+' "$json" 2>/dev/null | head -1 | tr -dc '0-9')
    # the first two total_ios of the job are its read and write counts (fio's layout)
    rios=$(grep -oE '"total_ios" *: *[0-9]+' "$json" 2>/dev/null | sed -n 1p | tr -dc '0-9')
    wios=$(grep -oE '"total_ios" *: *[0-9]+' "$json" 2>/dev/null | sed -n 2p | tr -dc '0-9')
    grep -q "connecting to" "$err" || connects=$((connects + 1))
    grep -qE "connecting to|namespace [0-9]+:" "$err" || identifies=$((identifies + 1))
    [ $rc = 0 ] && ! grep -q "disconnect:" "$err" && disconnects=$((disconnects + 1))
    if [ $rc = 0 ] && [ "$errs" = 0 ]; then
        cell "$1" PASS "randrw bs=$2 iodepth=$3 $5 at $4: ${rios:-?} reads, ${wios:-?} writes, 0 errors, $(grep -m1 '^verify:' "$err")"
    else
        reason="exit status $rc, error '${errs}': $(tail -3 "$err" | tr '\n' ' ')"
        [ $rc = 124 ] && reason="timed out after 120 s: $(tail -3 "$err" | tr '\n' ' ')"
        cell "$1" FAIL "$reason"
        failures="$failures $1"
    fi
done
n=${#specs[@]}
[ $connects = $n ] && cell connect PASS "$n of $n connects (admin + I/O queue, Fabrics Connect)" \
    || cell connect FAIL "$connects of $n connects succeeded"
[ $identifies = $n ] && cell identify PASS "$n of $n Identify Controller + Namespace" \
    || cell identify FAIL "$identifies of $n identify steps succeeded"
[ $disconnects = $n ] && cell disconnect PASS "$n of $n clean disconnects" \
    || cell disconnect FAIL "$disconnects of $n runs ended cleanly (see $LP_SHARE/*.stderr)"
done_

#!/bin/bash
# our-auth.sh - run.sh host hook (-H) of the interop matrix's `dhchap` group (issue 16
# item 5): in-band authentication (DH-HMAC-CHAP) against Linux 6.12, both ways, in one
# boot of two guests:
#   1. our host (nvmf-bench --dhchap-secret/--dhchap-ctrl-secret, from 192.168.77.2)
#      -> Linux nvmet in VM A (scenario nvmet-auth-target.sh, its keys in
#      out/A/auth.env): H1 right key, H2 bidirectional (sha384, ffdhe2048), H1 wrong
#      key (refused), H2 wrong controller key (refused by our host);
#   2. then Linux's `nvme connect --dhchap-secret [--dhchap-ctrl-secret]` in VM B
#      (scenario nvme-auth-host.sh, lp_target_name=ours) -> our nvmf-target on
#      192.168.77.1 with the same hosts and keys in its TOML: its five cases.
#   3. on the same boot, VM B (guest/auth-ublk-host.sh) runs our `nvmf connect --ublk`
#      (issue 15 item 5; $NVMF_CLI_BIN, copied to $LP_SHARE/bin with the host's mke2fs)
#      -> subsystem $UNQN of the same nvmf-target (any host, namespace 1 the file
#      $UBLK_IMG): its ublk/* cells, and here ublk/backing-file: the file VM B wrote
#      through ext4 on /dev/ublkbN, read out of the target's backing file (debugfs).
# Cells (cell NAME PASS|FAIL reason) go to $LP_SHARE/cells-auth.txt.
# Env from run.sh: LP_SHARE, LP_HOST_IP (192.168.77.1), LP_BRIDGE.
# Env from run-matrix.sh: NVMF_TARGET_BIN, NVMF_BENCH_BIN, NVMF_CLI_BIN, INTEROP_IMG,
# INTEROP_NS_SIZE.
set -u
ip=${LP_HOST_IP:-192.168.77.1}
host_ip=192.168.77.2
cells="$LP_SHARE/cells-auth.txt"
: >"$cells"
cell() { echo "cell $1 $2 $3" | tee -a "$cells"; }
ip addr add "$host_ip/24" dev "$LP_BRIDGE" 2>/dev/null

# ---- 1. our host -> Linux nvmet (VM A) ---------------------------------------------
for _ in $(seq 1 1800); do [ -e "$LP_SHARE/out/A/ready" ] && break; sleep 0.1; done
if [ -e "$LP_SHARE/out/A/ready" ]; then
    . "$LP_SHARE/out/A/auth.env"
else
    echo "$(date +%T) Linux nvmet (VM A) never became ready"
fi
ANQN=${ANQN:-nqn.2026-11.io.example:auth}
H1=${H1:-nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000a1}
H2=${H2:-nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000a2}
K1=${K1:-DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:}
K2=${K2:-DHHC-1:02:QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl9gYWJjZGVmZ2hpamtsbW5voBXMjQ==:}
KC2=${KC2:-DHHC-1:03:gIGCg4SFhoeIiYqLjI2Oj5CRkpOUlZaXmJmam5ydnp+goaKjpKWmp6ipqqusra6vsLGys7S1tre4ubq7vL2+v6rfDIU=:}
K1BAD=DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHv/ynCwx:
KC2BAD=DHHC-1:03:gIGCg4SFhoeIiYqLjI2Oj5CRkpOUlZaXmJmam5ydnp+goaKjpKWmp6ipqqusra6vsLGys7S1tre4ubq7vL2+ALdx0t4=:
# bench NAME EXPECT(ok|refused) HOSTNQN SECRET [CTRL]: a 2 s verified randrw against VM A
bench() {
    local name=$1 expect=$2 h=$3 k=$4 c=${5:-} log="$LP_SHARE/bench-$1.log" extra=() t0 rc got
    [ -n "$c" ] && extra=(--dhchap-ctrl-secret "$c")
    t0=$(date +%s.%N)
    NO_COLOR=1 RUST_LOG=warn timeout 120 "$NVMF_BENCH_BIN" --name "$name" --traddr 192.168.77.10 \
        --trsvcid 4420 --subnqn "$ANQN" --host-traddr "$host_ip" --hostnqn "$h" \
        --dhchap-secret "$k" "${extra[@]}" --completion event --rw randrw --bs 4k --iodepth 4 \
        --size 4M --runtime 2 --verify crc32c >"$log" 2>&1
    rc=$?
    local secs
    secs=$(echo "$(date +%s.%N) - $t0" | bc)
    got=refused; [ $rc = 0 ] && got=ok
    if [ "$got" = "$expect" ]; then
        cell "our-host/$name" PASS "expected $expect, got $got (exit $rc) in ${secs%???????} s; $(grep -m1 '^nvmf-bench: ' "$log" | cut -c1-240)"
    else
        cell "our-host/$name" FAIL "expected $expect, got $got (exit $rc) in ${secs%???????} s: $(tail -3 "$log" | tr '\n' ' ' | cut -c1-300)"
    fi
}
bench h1-right-key ok "$H1" "$K1"
bench h2-bidirectional ok "$H2" "$K2" "$KC2"
bench h2-wrong-ctrl-key refused "$H2" "$K2" "$KC2BAD"
bench h1-wrong-key refused "$H1" "$K1BAD"

# ---- 2. Linux host (VM B) -> our nvmf-target ---------------------------------------
cfg="$LP_SHARE/our-auth-target.toml"
truncate -s "$INTEROP_NS_SIZE" "$INTEROP_IMG"
# 3.'s subsystem: any host, a 64 MiB file; its binaries for VM B (nvmf, the host's
# mke2fs, the shared libraries either needs; Debian 12 on both sides).
UNQN=nqn.2026-11.io.example:ublk
UBLK_IMG="${INTEROP_IMG%.img}-ublk.img"
rm -f "$UBLK_IMG"
truncate -s 64M "$UBLK_IMG"
mkdir -p "$LP_SHARE/bin/lib"
cp "$NVMF_CLI_BIN" "$LP_SHARE/bin/nvmf"
cp "$(command -v mke2fs)" "$LP_SHARE/bin/mke2fs"
cp /etc/mke2fs.conf "$LP_SHARE/bin/mke2fs.conf" 2>/dev/null
for b in "$LP_SHARE/bin/nvmf" "$LP_SHARE/bin/mke2fs"; do
    ldd "$b" | awk '$3 ~ /^\// {print $3}' | grep -v -e '/libc\.so' -e 'ld-linux' |
        while read -r l; do cp -L "$l" "$LP_SHARE/bin/lib/"; done
done
cat >"$cfg" <<E
[[listen]]
addr = "$ip"

[[subsystems]]
nqn = "$ANQN"
allow_any_host = false
hosts = ["$H1", "$H2"]

[[subsystems.host_keys]]
hostnqn = "$H1"
dhchap_key = "$K1"
dhchap_hash = ["sha256"]
dhchap_dhgroup = ["null"]

[[subsystems.host_keys]]
hostnqn = "$H2"
dhchap_key = "$K2"
dhchap_ctrl_key = "$KC2"
dhchap_hash = ["sha384"]
dhchap_dhgroup = ["ffdhe2048"]

[[subsystems.namespaces]]
nsid = 1
path = "$INTEROP_IMG"

[[subsystems]]
nqn = "$UNQN"
allow_any_host = true

[[subsystems.namespaces]]
nsid = 1
path = "$UBLK_IMG"
E
log="$LP_SHARE/target.log"
NO_COLOR=1 RUST_LOG=info "$NVMF_TARGET_BIN" --config "$cfg" >"$log" 2>&1 &
pid=$!
stop_target() {
    kill -TERM "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    echo $? >"$LP_SHARE/target.rc"
}
trap 'stop_target; exit 0' TERM INT
for _ in $(seq 1 100); do grep -q "serving" "$log" 2>/dev/null && break; sleep 0.1; done
mkdir -p "$LP_SHARE/out/ours"
cat >"$LP_SHARE/out/ours/auth.env" <<E
ANQN=$ANQN
H1=$H1
H2=$H2
K1=$K1
K2=$K2
KC2=$KC2
E
touch "$LP_SHARE/out/ours/ready"
touch "$LP_SHARE/out/ours/ublk-ready"
echo "$(date +%T) our target ready on $ip"
while [ ! -e "$LP_SHARE/out/stop" ] && kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
sleep 1
stop_target
rc=$(cat "$LP_SHARE/target.rc")
r="$LP_SHARE/out/B/auth-results.txt"
# nvme-auth-host.sh: "RESULT (b) H1 right secret: expected ok, got ok (nvme connect exit 0): PASS"
if [ -s "$r" ]; then
    # also "RESULT (b) data read back matches: PASS" (no reason part)
    sed -nE -e 's/^RESULT \(([a-e])\) ([^:]*): (.*): (PASS|FAIL)$/\1 \2|\4|\3/p;t' \
        -e 's/^RESULT \(([a-e])\) ([^:]*): (PASS|FAIL)$/\1 \2|\3|as nvme-auth-host.sh checked it/p' "$r" |
        while IFS='|' read -r n v why; do
            cell "linux-host/$(echo "$n" | tr ' ' '-')" "$v" "$why"
        done
else
    cell linux-host/results FAIL "no auth-results.txt from VM B"
fi
# A wrong secret is refused at once: the Failure1 (c) and the Failure2's CQE (e) are
# answered, so nvme connect returns within seconds, not 6 x admin_timeout.
for c in "(c)" "(e)"; do
    t=$(grep -A40 "=== $c" "$LP_SHARE/out/B/scenario.log" 2>/dev/null | grep -m1 -o 'connect returned after [0-9.]* s' | grep -o '[0-9.]*')
    if [ -n "$t" ] && [ "${t%.*}" -lt 10 ]; then
        cell "linux-host/refused-at-once-$c" PASS "nvme connect returned after $t s"
    else
        cell "linux-host/refused-at-once-$c" FAIL "nvme connect returned after ${t:-?} s"
    fi
done
# 3. VM B's ublk cells, then the file it wrote, out of our target's backing file.
if [ -s "$LP_SHARE/out/B/ublk-cells.txt" ]; then
    grep '^cell ublk/' "$LP_SHARE/out/B/ublk-cells.txt" >>"$cells"
fi
want=$(cat "$LP_SHARE/out/B/ublk-data.sha256" 2>/dev/null)
rm -f "$LP_SHARE/ublk-data.back"
debugfs -R "dump /data $LP_SHARE/ublk-data.back" "$UBLK_IMG" >"$LP_SHARE/ublk-debugfs.log" 2>&1
got=$(sha256sum "$LP_SHARE/ublk-data.back" 2>/dev/null | cut -d' ' -f1)
if [ -n "$want" ] && [ "$got" = "$want" ]; then
    cell ublk/backing-file PASS "/data read out of the target's backing file (debugfs): $(stat -c %s "$LP_SHARE/ublk-data.back") bytes, sha256 matches VM B's"
else
    cell ublk/backing-file FAIL "sha256 ${got:-none} of /data in $UBLK_IMG != ${want:-none} (VM B's); $(tail -2 "$LP_SHARE/ublk-debugfs.log" | tr '\n' ' ')"
fi
n_ok=$(grep -c 'host authenticated (DH-HMAC-CHAP)' "$log")
n_bad=$(grep -c 'authentication (DH-HMAC-CHAP) failed:' "$log")
if [ "$rc" = 0 ] && ! grep -q panicked "$log"; then
    cell target-exit PASS "status 0; $n_ok queues authenticated, $n_bad transactions refused (target log)"
else
    cell target-exit FAIL "status $rc; $(grep -m2 -iE 'panicked|ERROR' "$log" | tr '\n' ' ')"
fi

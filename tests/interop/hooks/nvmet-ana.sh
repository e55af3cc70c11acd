#!/bin/bash
# nvmet-ana.sh - run.sh host hook (-H) of the ana group's boot when the nvmet-ana group
# rides on it (issue 15 item 4): runs hooks/our-ana.sh (our target for VM B's cells)
# and, beside it, our host's native multipath (the example multipath_io) against Linux
# nvmet-rdma in VM N (192.168.77.10, guest/nvmet-ana-target.sh), ports 4420 and 4421,
# from 192.168.77.3 and 192.168.77.4 on the bridge (the soft provider opens one device
# per local address; 192.168.77.1 is our target's). After FLIP_AT s of verified I/O it
# asks VM N to flip the ANA states (out/nvmet-ana/flip -> out/N/flipped), lets the I/O
# run to NVMET_ANA_SECS, then writes the cells to $LP_SHARE/nvmet-ana/cells.txt and
# touches out/nvmet-ana/done (VM N stops after it and out/stop).
# Env from run.sh: LP_SHARE, LP_BRIDGE. From run-matrix.sh: MULTIPATH_IO_BIN and what
# our-ana.sh needs.
set -u
here="$(dirname "${BASH_SOURCE[0]}")"
"$here/our-ana.sh" &
apid=$!
trap 'kill -TERM $apid 2>/dev/null; wait $apid; exit 0' TERM INT

nqn=nqn.2026-11.io.example:ref
peer=192.168.77.10
secs=${NVMET_ANA_SECS:-20} flip_at=${NVMET_ANA_FLIP_AT:-8}
out="$LP_SHARE/nvmet-ana"
mkdir -p "$out" "$LP_SHARE/out/nvmet-ana"
cells="$out/cells.txt"
: >"$cells"
done_() { touch "$LP_SHARE/out/nvmet-ana/done"; wait $apid; exit 0; }
for a in 192.168.77.3 192.168.77.4; do ip addr add "$a/24" dev "$LP_BRIDGE" 2>/dev/null; done

echo "$(date +%T) nvmet-ana: waiting for VM N's nvmet (out/N/ready)"
for _ in $(seq 1 1500); do [ -e "$LP_SHARE/out/N/ready" ] && break; sleep 0.2; done
if [ ! -e "$LP_SHARE/out/N/ready" ]; then
    echo "cell connect FAIL VM N's nvmet never became ready (console-N.log)" >>"$cells"
    done_
fi
echo "$(date +%T) nvmet-ana: $MULTIPATH_IO_BIN $secs 4 $nqn $peer:4420=192.168.77.3 $peer:4421=192.168.77.4"
NO_COLOR=1 RUST_LOG=warn timeout $((secs + 60)) "$MULTIPATH_IO_BIN" "$secs" 4 "$nqn" \
    "$peer:4420=192.168.77.3" "$peer:4421=192.168.77.4" >"$out/io.txt" 2>"$out/io.err" &
iopid=$!
sleep "$flip_at"
before=$(grep -c '^t=' "$out/io.txt")
touch "$LP_SHARE/out/nvmet-ana/flip"
for _ in $(seq 1 100); do [ -e "$LP_SHARE/out/N/flipped" ] && break; sleep 0.1; done
echo "$(date +%T) nvmet-ana: flip asked after status line $before; flipped: $([ -e "$LP_SHARE/out/N/flipped" ] && echo yes || echo no)"
wait $iopid
rc=$?
echo "$(date +%T) nvmet-ana: multipath_io exit status $rc"
python3 - "$out/io.txt" "$before" "$rc" "$([ -e "$LP_SHARE/out/N/flipped" ] && echo 1 || echo 0)" \
    "$(head -c 400 "$out/io.err" | tr '\n' ' ')" >>"$cells" <<'PY'
import ast, re, sys
path, before, rc, flipped, err = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5]
lines = open(path).read().splitlines()
def cell(name, ok, why):
    print(f"cell {name} {'PASS' if ok else 'FAIL'} {why}")
head = next((l for l in lines if l.startswith("namespace 1")), None)
m = head and re.search(r"paths \[([0-9, ]*)\] of (\d+), UUID ([0-9a-f]+), NGUID ([0-9a-f]+)", head)
if not m or m.group(2) != "2":
    cell("connect", False, f"not both paths connected (exit {rc}): {head}; {err}")
    for c in ("io-before", "ana-flip", "io-moved", "verify", "disconnect"):
        cell(c, False, "not connected")
    sys.exit(0)
uuid, nguid = m.group(3), m.group(4)
cell("connect", m.group(1).replace(" ", "") == "0,1" and m.group(2) == "2" and set(uuid) != {"0"},
     f"both paths one namespace by UUID {uuid} (NGUID {nguid}): {head}")
st = []
for l in lines:
    s = re.match(r"(?:done )?t=([0-9.]+) ios=(\d+) errors=(\d+) mismatches=(\d+) per_path=(\[[^]]*\]) ana=(\[[^]]*\])", l)
    if s:
        st.append((float(s.group(1)), int(s.group(2)), int(s.group(3)), int(s.group(4)),
                   ast.literal_eval(s.group(5)), s.group(6), l.startswith("done")))
pre = st[:before]
if pre and len(pre) > 4:
    a, b = pre[2], pre[-1]   # skip the first half second (connect, first I/O)
    d0, d1 = b[4][0] - a[4][0], b[4][1] - a[4][1]
    cell("io-before", d0 > 0 and d1 == 0 and b[5] == "[Optimized, NonOptimized]",
         f"t {a[0]}..{b[0]}: path 4420 +{d0}, 4421 +{d1} commands; ANA {b[5]}")
else:
    cell("io-before", False, f"only {len(pre)} status lines before the flip")
post = st[before:]
seen = next((i for i, x in enumerate(post) if x[5] == "[Inaccessible, Optimized]"), None)
cell("ana-flip", flipped and seen is not None,
     f"nvmet flipped: {flipped}; our host's ANA states " +
     (f"[Inaccessible, Optimized] at t={post[seen][0]}" if seen is not None else f"never flipped (last {post[-1][5] if post else '?'})"))
if seen is not None and len(post) > seen + 6:
    a, b = post[seen + 4], post[-1]   # 1 s after the host saw the flip
    d0, d1 = b[4][0] - a[4][0], b[4][1] - a[4][1]
    cell("io-moved", d0 == 0 and d1 > 0, f"t {a[0]}..{b[0]}: path 4420 +{d0}, 4421 +{d1} commands")
else:
    cell("io-moved", False, "too few status lines after the flip")
last = st[-1] if st else None
cell("verify", last is not None and last[6] and last[2] == 0 and last[3] == 0 and last[1] > 0,
     f"{last[1] if last else 0} I/Os, {last[2] if last else '?'} errors, {last[3] if last else '?'} mismatches; {err}")
cell("disconnect", rc == 0 and last is not None and last[6], f"multipath_io exit status {rc}")
PY
cat "$cells"
done_

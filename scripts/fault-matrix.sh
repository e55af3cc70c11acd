#!/usr/bin/env bash
# The end-to-end fault matrix (issue 4 §5) with the release nvmf-bench and its
# embedded target: for each cell (loss 0, 0.0001, 0.001, 0.01, 0.05; reordering,
# duplication and corruption alone), a 4k randread QD32 run and a 4k randrw QD32 run
# with --verify crc32c on a 2 MiB region, each RUNTIME seconds. Faults are injected
# on receive by both the embedded target's and the host's soft RoCE devices (every
# packet, either direction, meets one fault layer). Prints one table: throughput as a fraction of
# the loss-free cell, p99 completion latency, verified blocks, mismatches, and the
# faults injected. Exits non-zero if any run failed or any block mismatched.
#
# Usage: scripts/fault-matrix.sh [RUNTIME_SECONDS]   (default 5)
# Environment: SEED (--inject-seed, default 1), OUT (directory for the JSON reports,
# default a temporary one), NVMF_BENCH (binary; default: built with cargo --release).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNTIME=${1:-5}
SEED=${SEED:-1}
OUT=${OUT:-$(mktemp -d -t fault-matrix.XXXXXX)}
mkdir -p "$OUT"
command -v python3 >/dev/null || { echo "fault-matrix.sh: needs python3" >&2; exit 2; }

if [[ -z "${NVMF_BENCH:-}" ]]; then
    cargo build --release --quiet --bin nvmf-bench
    NVMF_BENCH=$(cargo metadata --format-version 1 --no-deps |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/nvmf-bench
fi

# name | --inject-* arguments
CELLS=(
    "loss-0|"
    "loss-0.0001|--inject-loss 0.0001"
    "loss-0.001|--inject-loss 0.001"
    "loss-0.01|--inject-loss 0.01"
    "loss-0.05|--inject-loss 0.05"
    "reorder-0.01|--inject-reorder 0.01"
    "dup-0.01|--inject-dup 0.01"
    "corrupt-0.01|--inject-corrupt 0.01"
)

failed=0
for cell in "${CELLS[@]}"; do
    name=${cell%%|*}
    inject=${cell#*|}
    seed_arg=()
    [[ -n "$inject" ]] && seed_arg=(--inject-seed "$SEED")
    for rw in randread randrw; do
        verify=()
        # Offsets are a random permutation of the region per pass (fio's random map),
        # so a read checks a block written in an earlier pass: a 2 MiB region (512
        # blocks) makes many passes in a run.
        [[ $rw == randrw ]] && verify=(--verify crc32c --size 2M)
        # shellcheck disable=SC2086 # $inject is a list of arguments
        if ! "$NVMF_BENCH" --name "$name" --rw "$rw" --bs 4k --iodepth 32 \
            --runtime "$RUNTIME" --time_based --embedded-size 256M \
            "${verify[@]}" $inject "${seed_arg[@]}" \
            --output-format json --output "$OUT/$name.$rw.json" 2>"$OUT/$name.$rw.err"; then
            echo "fault-matrix.sh: $name $rw failed:" >&2
            tail -n 5 "$OUT/$name.$rw.err" >&2
            failed=1
        fi
    done
done

table=0
python3 - "$OUT" "${CELLS[@]%%|*}" <<'EOF' || table=$?
import json, os, sys

out, cells = sys.argv[1], sys.argv[2:]

def load(name, rw):
    try:
        with open(os.path.join(out, f"{name}.{rw}.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

def iops(doc):
    # All jobs' reads plus writes (before issue 19 a top-level "group" held the sums).
    if "group" in doc:
        return doc["group"]["read"]["iops"] + doc["group"]["write"]["iops"]
    return sum(j[d]["iops"] for j in doc["jobs"] for d in ("read", "write"))

def p99_us(doc):
    worst = 0
    for job in doc["jobs"]:
        for d in ("read", "write"):
            if job[d]["total_ios"]:
                worst = max(worst, job[d]["clat_ns"]["percentile"]["99.000000"])
    return worst / 1000.0

def injected(doc):
    f = doc.get("nvmf-bench", doc).get("faults")
    if not f:
        return "-"
    s = {"dropped": 0, "reordered": 0, "duplicated": 0, "corrupted": 0, "icrc_errors": 0}
    for d in f["devices"]:
        for k in s:
            s[k] += d[k]
    return "drop={dropped} reord={reordered} dup={duplicated} corr={corrupted} icrc={icrc_errors}".format(**s)

base = {rw: load("loss-0", rw) for rw in ("randread", "randrw")}
hdr = f"{'cell':<14} {'randread IOPS':>13} {'frac':>6} {'p99 us':>8} | {'randrw IOPS':>11} {'frac':>6} {'p99 us':>8} {'verified':>9} {'mismatch':>8} | injected (randrw run, both devices)"
print(hdr)
print("-" * len(hdr))
bad = False
for name in cells:
    row = [f"{name:<14}"]
    for rw in ("randread", "randrw"):
        d = load(name, rw)
        if d is None or any(j["error"] for j in d["jobs"]):
            row.append(f"{'FAILED':>13} {'':>6} {'':>8}" if rw == "randread" else f"{'FAILED':>11} {'':>6} {'':>8} {'':>9} {'':>8}")
            bad = True
            continue
        b = base[rw]
        frac = iops(d) / iops(b) if b and iops(b) else float("nan")
        w = 13 if rw == "randread" else 11
        cellstr = f"{iops(d):>{w}.0f} {frac:>6.2f} {p99_us(d):>8.1f}"
        if rw == "randrw":
            v = d.get("nvmf-bench", d).get("verify", {})
            mism = v.get("mismatches", 0)
            bad |= mism != 0
            cellstr += f" {v.get('verified_blocks', 0):>9} {mism:>8} | {injected(d)}"
        row.append(cellstr)
    print(" ".join(row[:1]) + " " + " | ".join(row[1:]))
print(f"\nreports: {out}", flush=True)
sys.exit(1 if bad else 0)
EOF
exit $(( failed | table ))

#!/usr/bin/env python3
"""nvmf-cli-diff.py NVME_CLI_DIR NVMF_DIR SIDE - the nvmf-cli group's verdict (issue 15 item 5).

NVME_CLI_DIR holds nvme-cli's `-o json` outputs (2.3, Debian 12) in VM B against one
target (SIDE: `nvmet`, Linux 6.1's nvmet in VM A, or `ours`, our nvmf-target on the
bridge), saved by guest/nvme-cli-diff.sh; NVMF_DIR the same commands of our `nvmf` from
the host side (hooks/nvmf-cli.sh), against the same controller of the same target, read right after nvme-cli's with nothing in between that changes them. Each
`<command>.json` is parsed and compared field by field (nested objects and arrays
flattened to paths such as `psds[0].max_power`); `<command>.rc` holds "rc=N" and
`<command>.err` stderr. A difference fails its cell unless EXPECTED names the field
with the reason. Prints one "cell SIDE/NAME PASS|FAIL reason" line per
cell, the differences on stderr.
"""
import json
import os
import re
import sys

# Fields that differ legitimately, with why. "*" matches every field.
EXPECTED = {
    "discover": {},
    "id-ctrl": {
        "cntlid": "dynamic controller model: nvme-cli's and our connection each got their own controller",
    },
    "id-ns": {},
    "smart-log": {},
    "error-log": {},
}


SIDE = ""


def flatten(v, prefix=""):
    """{path: scalar} of a parsed JSON value."""
    out = {}
    if isinstance(v, dict):
        for k, x in v.items():
            out.update(flatten(x, f"{prefix}.{k}" if prefix else k))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            out.update(flatten(x, f"{prefix}[{i}]"))
    else:
        out[prefix] = v
    return out


def base(k):
    """The field's name without array indexes: psds[0].max_power -> psds.max_power."""
    return re.sub(r"\[\d+\]", "", k)


def read(d, name, ext):
    p = os.path.join(d, f"{name}.{ext}")
    if not os.path.exists(p):
        return None
    with open(p, errors="replace") as f:
        return f.read()


def compare(name, a_dir, b_dir, expected):
    ra, rb = read(a_dir, name, "rc"), read(b_dir, name, "rc")
    if rb is None:
        return "FAIL", f"no output of our nvmf ({b_dir}/{name}.*)"
    if ra is None:
        return "FAIL", f"no output of nvme-cli ({a_dir}/{name}.*)"
    ra, rb = ra.strip(), rb.strip()
    if ra != "rc=0" or rb != "rc=0":
        ea = (read(a_dir, name, "err") or "").strip()[:160]
        eb = (read(b_dir, name, "err") or "").strip()[:160]
        return "FAIL", f"nvme-cli {ra} ({ea!r}), nvmf {rb} ({eb!r})"
    try:
        ja = json.loads(read(a_dir, name, "json"))
        jb = json.loads(read(b_dir, name, "json"))
    except (TypeError, ValueError) as e:
        return "FAIL", f"output is not JSON: {e}"
    fa, fb = flatten(ja), flatten(jb)
    diffs, unexpected = [], []
    for k in sorted(set(fa) | set(fb)):
        va, vb = fa.get(k, "<absent>"), fb.get(k, "<absent>")
        # nvme-cli prints some unsigned 128-bit counters as strings of digits.
        if str(va) != str(vb):
            diffs.append((k, va, vb))
    for k, va, vb in diffs:
        why = expected.get(base(k)) or expected.get("*")
        print(f"{SIDE}/{name}: {k}: nvme-cli {va!r} nvmf {vb!r} -> {why or 'UNEXPECTED'}", file=sys.stderr)
        if not why:
            unexpected.append(f"{k} (nvme-cli {va!r}, nvmf {vb!r})")
    if unexpected:
        return "FAIL", f"{len(unexpected)} field(s) differ: " + "; ".join(unexpected[:6])
    same = len(set(fa) & set(fb)) - len(diffs)
    if diffs:
        names = sorted({base(k) for k, _, _ in diffs})
        return "PASS", f"{same} fields equal; differ as expected: {', '.join(names)}"
    return "PASS", f"all {same} fields equal"


def status_cell(a_dir, b_dir):
    """A command nvmet refuses: the same status line on stderr and the same exit code."""
    name = "get-log-bad"
    ra, rb = read(a_dir, name, "rc"), read(b_dir, name, "rc")
    if ra is None or rb is None:
        return "FAIL", "missing outputs of get-log-bad"
    line = lambda t: next((l for l in (t or "").splitlines() if l.startswith("NVMe status:")), None)
    la, lb = line(read(a_dir, name, "err")), line(read(b_dir, name, "err"))
    print(f"{SIDE}/{name}: nvme-cli {ra.strip()} {la!r}; nvmf {rb.strip()} {lb!r}", file=sys.stderr)
    if la is None:
        return "FAIL", f"nvme-cli printed no status line ({ra.strip()})"
    if la != lb or ra.strip() != rb.strip():
        return "FAIL", f"nvme-cli {ra.strip()} {la!r}, nvmf {rb.strip()} {lb!r}"
    return "PASS", f"{ra.strip()} and {la!r} on both"


def main():
    global SIDE
    a_dir, b_dir, side = sys.argv[1], sys.argv[2], sys.argv[3]
    SIDE = side
    for name, expected in EXPECTED.items():
        v, why = compare(name, a_dir, b_dir, expected)
        print(f"cell {side}/{name} {v} {why}")
    v, why = status_cell(a_dir, b_dir)
    print(f"cell {side}/status-and-exit {v} {why}")


if __name__ == "__main__":
    main()

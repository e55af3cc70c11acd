#!/usr/bin/env python3
"""nvme-cli-diff.py NVMET_DIR OURS_DIR - the nvme-cli group's verdict (issue 16 item 7).

Each directory holds one file per nvme-cli command that nvme-cli-diff.sh ran in the
guest (its output, then "rc=N"), against Linux 6.1's nvmet (a 64 MiB null_blk) and
against our nvmf-target (a 64 MiB file). The outputs are compared field by field
("name : value" lines; other lines by position). A difference is expected only when
EXPECTED below names the command and the field with the reason; any other difference
fails the command's cell. Prints one "cell NAME PASS|FAIL reason" line per cell, the
field-by-field differences on stderr.
"""
import os
import re
import sys

# Differences that are not bugs, with why (each seen in a run against Linux 6.1's
# nvmet, 2026-12-02). "*" matches any field of the command.
OWN = "each target's own identity (subsystem NQN, serial, model, firmware revision)"
BDEV = "nvmet reports the null_blk's block-layer statistics (the host's partition scan included)"
M_BIT = "nvmet sets the More bit (0x2000) on errors it logs; we log every failed command and leave M clear (optional)"
EXPECTED = {
    "discover": {
        "line 1": "each target's discovery log generation counter",
        "subnqn": "each target serves its own subsystem NQN",
        "traddr": "each target's address",
    },
    "connect": {},
    "id-ctrl": {
        "sn": OWN,
        "mn": OWN,
        "fr": OWN,
        "subnqn": OWN,
        "cntlid": "controller IDs are handed out per target",
        "nn": "nvmet reports NVMET_MAX_NAMESPACES (1024); we report the largest NSID we serve",
        "mnan": "nvmet reports NVMET_MAX_NAMESPACES; we report NN (a Linux host needs 0 < MNAN <= NN for ANA)",
        "maxcmd": "nvmet reports 1024; we report our queue size (max_queue_size, 128)",
        "oncs": "we have Compare (bit 0), as SPDK; nvmet does not",
        "nwpc": "nvmet has namespace write protection; we do not",
    },
    "id-ns": {
        "nguid": "namespace identifiers are each target's own (nvmet's default NGUID is 0)",
        "dlfeat": "our file reads deallocated blocks as zeroes (punched holes); nvmet's null_blk cannot say",
        "nsfeat": "nvmet reports the null_blk's optimal I/O sizes (NPWG..NOWS, bit 4) and NSABP (bit 1)",
        "npwg": "nvmet reports the null_blk's optimal I/O sizes",
        "npwa": "nvmet reports the null_blk's optimal I/O sizes",
        "npdg": "nvmet reports the null_blk's optimal I/O sizes",
        "npda": "nvmet reports the null_blk's optimal I/O sizes",
        "nows": "nvmet reports the null_blk's optimal I/O sizes",
    },
    "list-ns": {},
    "ns-descs": {
        "uuid": "namespace identifiers are each target's own",
        "nguid": "we always give an NGUID; nvmet's default NGUID is 0, which it leaves out",
    },
    "smart-log": {
        "data_units_read": BDEV,
        "data_units_written": BDEV,
        "host_read_commands": BDEV,
        "host_write_commands": BDEV,
        "power_on_hours": "we count the hours since the target started; nvmet reports 0",
        "temperature": "nvmet reports 0 K; we report 300 K, as QEMU's emulated NVMe",
        "available_spare": "nvmet reports 0 %; we report 100 % (nothing used), as QEMU",
        "available_spare_threshold": "nvmet reports 0 %; we report 10 %, as QEMU",
        "num_err_log_entries": "each target's own count of failed commands",
    },
    "smart-log-ns1": None,
    "error-log": {
        "error_count": "nvmet's log begins at the slot after its newest entry; ours newest first",
        "cmdid": "each host's command IDs",
        "status_field": "a read past the end: nvmet answers Internal Error, we LBA Out of Range",
        "parm_err_loc": "we name the SLBA field (byte 40) of an LBA Out of Range",
        "sqid": "nvmet's log begins at the slot after its newest entry; ours newest first",
        "lba": "nvmet's log begins at the slot after its newest entry; ours newest first",
        "nsid": "nvmet's log begins at the slot after its newest entry; ours newest first",
    },
    "fw-log": {
        "afi": "nvmet returns a zeroed log; we report slot 1 active (AFI 1)",
        "frs1": "nvmet returns a zeroed log; we report our firmware revision in slot 1",
    },
    "effects-log": {},
    "changed-ns-list-log": {},
    "compare": {
        "rc": "nvmet has no Compare (Invalid Command Opcode); we have it, as SPDK",
        "NVMe status": "nvmet has no Compare (Invalid Command Opcode); we have it, as SPDK",
        "compare": "nvmet has no Compare (Invalid Command Opcode); we have it, as SPDK",
    },
    "disconnect": {"NQN": "the line names each target's subsystem"},
}

# Cells made of several commands: the cell's name, the prefix of its commands' files.
GROUPED = {"get-features": "get-feature-", "get-logs": "get-log-"}
# Per feature and log (nvme get-feature / get-log with 512 bytes), what may differ.
FEATURE_REFUSED = {"NVMe status": M_BIT}
GROUP_EXPECTED = {
    "get-feature-1": FEATURE_REFUSED,
    "get-feature-2": FEATURE_REFUSED,
    "get-feature-4": FEATURE_REFUSED,
    "get-feature-5": FEATURE_REFUSED,
    "get-feature-8": FEATURE_REFUSED,
    "get-feature-9": FEATURE_REFUSED,
    "get-feature-0xa": FEATURE_REFUSED,
    "get-feature-7": {
        "get-feature": "Number of Queues: we report the queues granted to the host's Set "
        "Features (the specification's NSQA/NCQA); nvmet reports its maximum"
    },
    "get-feature-0x81": {
        "NVMe status": "both refuse a Host Identifier without EXHID: nvmet checks the data "
        "length first (Data SGL Length Invalid), we the field (Invalid Field)"
    },
    "get-log-0": {"*": "Supported Log Pages: nvmet 6.1 has none (Invalid Field); we list ours"},
    "get-log-1": {"*": "the error logs hold each target's entries, see error-log"},
    "get-log-2": {"*": "the SMART counters, see smart-log"},
    "get-log-3": {"*": "the firmware slot log, see fw-log"},
    "get-log-4": {"*": "nvmet refuses a Changed Namespace List shorter than 4 KiB (Internal Error); we return the first 512 bytes"},
    "get-log-5": {"*": "nvmet refuses an effects log shorter than 4 KiB (Data SGL Length Invalid); we return the first 512 bytes"},
}

FIELD = re.compile(r"^\s*([^:]+?)\s*:\s*(.*)$")


def fields(path):
    """(rc, {field: value}) of one saved output; repeated names are numbered."""
    out, rc, seen = {}, None, {}
    with open(path, errors="replace") as f:
        for n, line in enumerate(f):
            line = line.rstrip("\n")
            if line.startswith("rc="):
                rc = line[3:]
                continue
            m = FIELD.match(line)
            if m and not re.match(r"^[0-9a-f]{4}:", line.strip()):
                k, v = m.group(1), m.group(2)
            else:
                k, v = f"line {n}", line.strip()
            seen[k] = seen.get(k, 0) + 1
            if seen[k] > 1:
                k = f"{k} #{seen[k]}"
            out[k] = v
    return rc, out


def base(k):
    return re.sub(r" #\d+$", "", k)


def compare(name, a_dir, b_dir, expected):
    """PASS/FAIL and the reason for command `name`."""
    pa, pb = os.path.join(a_dir, name + ".txt"), os.path.join(b_dir, name + ".txt")
    if not os.path.exists(pb):
        return "FAIL", f"no output of ours ({pb})"
    if not os.path.exists(pa):
        return "FAIL", f"no output of nvmet ({pa})"
    (ra, fa), (rb, fb) = fields(pa), fields(pb)
    diffs, unexpected = [], []
    if ra != rb:
        diffs.append(("rc", ra, rb))
    for k in sorted(set(fa) | set(fb)):
        if fa.get(k) != fb.get(k):
            diffs.append((k, fa.get(k), fb.get(k)))
    for k, va, vb in diffs:
        why = expected.get(base(k)) or expected.get("*")
        print(f"{name}: {k}: nvmet {va!r} ours {vb!r} -> {why or 'UNEXPECTED'}", file=sys.stderr)
        if not why:
            unexpected.append(f"{k} (nvmet {va!r}, ours {vb!r})")
    if unexpected:
        return "FAIL", "; ".join(unexpected[:6])
    if diffs:
        names = sorted({base(k) for k, _, _ in diffs})
        return "PASS", f"exit {rb}; {len(diffs)} field(s) differ as expected: {', '.join(names[:12])}"
    return "PASS", f"exit {rb} as nvmet's; same output"


# The SMART log of namespace 1 alone differs as the whole one.
EXPECTED["smart-log-ns1"] = EXPECTED["smart-log"]


def main():
    a_dir, b_dir = sys.argv[1], sys.argv[2]
    for name, expected in EXPECTED.items():
        v, why = compare(name, a_dir, b_dir, expected)
        print(f"cell {name} {v} {why}")
    for cell, prefix in GROUPED.items():
        names = sorted(
            f[:-4] for f in os.listdir(b_dir) if f.startswith(prefix) and f.endswith(".txt")
        ) if os.path.isdir(b_dir) else []
        bad = []
        for n in names:
            v, why = compare(n, a_dir, b_dir, GROUP_EXPECTED.get(n, {}))
            if v == "FAIL":
                bad.append(f"{n}: {why}")
        if not names:
            print(f"cell {cell} FAIL no outputs")
        elif bad:
            print(f"cell {cell} FAIL " + " | ".join(bad[:4]))
        else:
            print(f"cell {cell} PASS {len(names)} commands, differences as expected")


if __name__ == "__main__":
    main()

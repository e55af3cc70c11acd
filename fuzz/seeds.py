#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into fuzz/corpus/<target>/.

packet_parse: RoCEv2 UDP payloads from ../shared/captures (or $CAPTURES): the first
two packets of every opcode of every capture (CM MADs included), the corrupted probe,
and the smallest capture as a pcap file.
rc_responder: hand-made programs in the harness's input encoding (see
src/rc_responder.rs): SEND/WRITE/READ at the responder, ACK/NAK/RNR/READ responses at
the completer, PSN wrap, invalidation, memory window, raw captured packets.
capsule: hand-made programs (see src/capsule.rs): admin Connect in-capsule and keyed,
enable, Identify, Get Log Page, Features, AER, I/O Connect, Read, Write in-capsule and
keyed, Flush, Write Zeroes, DSM, discovery controller, raw capsules.

Usage: python3 fuzz/seeds.py [captures-dir [target ...]]
(all three targets by default)
"""
import hashlib
import os
import struct
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))
CAPTURES = (sys.argv[1] if len(sys.argv) > 1 else
            os.environ.get("CAPTURES", os.path.join(ROOT, "..", "..", "shared", "captures")))


def write(target, data, name=None):
    d = os.path.join(ROOT, "corpus", target)
    os.makedirs(d, exist_ok=True)
    name = name or hashlib.sha1(data).hexdigest()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ----- pcap -----

def roce_payloads(path):
    """(frame number, UDP payload) of every IPv4/IPv6 UDP datagram to port 4791."""
    b = open(path, "rb").read()
    magic = struct.unpack_from("<I", b, 0)[0]
    assert magic in (0xA1B2C3D4, 0xA1B23C4D), path
    off, n = 24, 0
    while off + 16 <= len(b):
        incl = struct.unpack_from("<I", b, off + 8)[0]
        frame = b[off + 16: off + 16 + incl]
        off += 16 + incl
        n += 1
        et, p = struct.unpack_from(">H", frame, 12)[0], 14
        if et == 0x8100:
            et, p = struct.unpack_from(">H", frame, 16)[0], 18
        if et == 0x0800:
            ihl = (frame[p] & 0xF) * 4
            proto, total = frame[p + 9], struct.unpack_from(">H", frame, p + 2)[0]
            udp, end = p + ihl, p + total
        elif et == 0x86DD:
            proto, plen = frame[p + 6], struct.unpack_from(">H", frame, p + 4)[0]
            udp, end = p + 40, p + 40 + plen
        else:
            continue
        if proto != 17:
            continue
        dport = struct.unpack_from(">H", frame, udp + 2)[0]
        if dport == 4791:
            yield n, frame[udp + 8: end], frame


def packet_parse_seeds():
    files = sorted(f for f in os.listdir(CAPTURES) if f.endswith(".pcap"))
    for f in files:
        seen = {}
        for n, payload, _ in roce_payloads(os.path.join(CAPTURES, f)):
            op = payload[0]
            if seen.get(op, 0) >= 2:
                continue
            seen[op] = seen.get(op, 0) + 1
            write("packet_parse", payload, "%s-frame%d" % (f[:-5], n))
    # Whole Ethernet frames for the link-frame parser.
    for n, _, frame in roce_payloads(os.path.join(CAPTURES, "e-roce-probe.pcap")):
        write("packet_parse", frame, "e-roce-probe-ethernet-frame%d" % n)


def capture_packets(name, ops, limit):
    out = []
    for _, p, _ in roce_payloads(os.path.join(CAPTURES, name)):
        if p[0] in ops and len(out) < limit:
            out.append(p)
    return out


# ----- rc_responder program encoding (mirrors src/rc_responder.rs) -----

OPS = ["SendFirst", "SendMiddle", "SendLast", "SendLastImm", "SendOnly", "SendOnlyImm",
       "WriteFirst", "WriteMiddle", "WriteLast", "WriteLastImm", "WriteOnly", "WriteOnlyImm",
       "ReadRequest", "ReadRespFirst", "ReadRespMiddle", "ReadRespLast", "ReadRespOnly",
       "Ack", "AtomicAck", "CompareSwap", "FetchAdd", "SendLastInv", "SendOnlyInv",
       "UdSendOnly", "UdSendOnlyImm", "Cnp"]
RETH = {"WriteFirst", "WriteOnly", "WriteOnlyImm", "ReadRequest"}
AETH = {"ReadRespFirst", "ReadRespLast", "ReadRespOnly", "Ack", "AtomicAck"}
IMM = {"SendLastImm", "SendOnlyImm", "WriteLastImm", "WriteOnlyImm", "UdSendOnlyImm"}
IETH = {"SendLastInv", "SendOnlyInv"}
DETH = {"UdSendOnly", "UdSendOnlyImm"}
RESPONSE = {"ReadRespFirst", "ReadRespMiddle", "ReadRespLast", "ReadRespOnly", "Ack",
            "AtomicAck"}
# Region / key selectors of the harness.
VA = {"w": 0, "r": 3, "l": 4, "f": 5}
KEY = {"w": 0, "r": 3, "l": 4, "f": 5, "d": 6, "mw": 7, "stale_w": 8}


class Prog:
    def __init__(self, cfg):
        self.b = bytearray([cfg])
        self.sent = False

    def u8(self, v):
        self.b.append(v & 0xFF)

    def u16(self, v):
        self.b += struct.pack("<H", v & 0xFFFF)

    def u32(self, v):
        self.b += struct.pack("<I", v & 0xFFFFFFFF)

    def u64(self, v):
        self.b += struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF)

    def pkt(self, op, delta=0, ack_req=True, va=("w", 0), key="w", dma_len=None,
            syndrome=None, msn=0, length=0, resp_idx=0, fill=0x11):
        self.u8(0)
        self.u8(OPS.index(op))
        if op in RESPONSE and self.sent:
            self.u8(resp_idx)
        self.u8((delta & 0xF) << 4)
        self.u8(1 if ack_req else 0)
        if op in DETH:
            self.u32(0x80010000)
            self.u32(1)
        if op in RETH:
            self.u8(VA[va[0]])
            self.u16(va[1])
            self.u8(KEY[key])
            self.u8(3)  # dma_len: u16 % (4096 + 64)
            self.u16(dma_len if dma_len is not None else length)
        if op in AETH:
            if syndrome is None:
                self.u8(0)
            else:
                self.u8(4)
                self.u8(syndrome)
            self.u8(0)
            self.u8(msn)
        if op in IMM:
            self.u32(0xABCD0001)
        if op in IETH:
            self.u8(KEY["w"])
        if length == "mtu":
            self.u8(1)
        else:
            self.u8(3)  # u16 % (mtu + 1)
            self.u16(length)
        self.u8(fill)

    def raw(self, payload, aim=True):
        self.u8(5)
        self.u16(len(payload))
        self.b += payload
        self.u8(1 if aim else 0)

    def transmit(self, n=15):
        self.u8(6)
        self.u8(n)

    def time(self, shift=30, to_timer=True):
        self.u8(8)
        self.u8(shift)
        self.u8(1 if to_timer else 0)

    def post_recv(self, off=0, length=2047):
        self.u8(9)
        self.u8(1)  # one SGE
        self.u8(0)  # local MR
        self.u16(off)
        self.u16(length)
        self.u8(0)

    def post_send(self, kind, length=100, remote=0, rkey=0):
        self.u8(10)
        self.u8(kind)
        if kind == 1:
            self.u32(0x12345678)
        if kind == 2:
            self.u8(KEY["w"])
        if kind in (3, 4, 5):
            self.u64(remote)
            self.u32(rkey)
        if kind == 4:
            self.u32(7)
        if kind == 6:
            self.u8(KEY["mw"])
        if kind == 7:
            self.u16(64)   # offset in the RW MR
            self.u16(512)  # length
            self.u8(2)     # read + write
        if kind not in (6, 7):
            self.u8(1)  # one SGE
            self.u8(0)  # source (read-only MR) or destination (local MR) for READ
            self.u16(0)
            self.u16(length)
            self.u8(0)
        self.sent = True

    def state(self, sel):
        self.u8(11)
        self.u8(sel)


def rc_responder_seeds():
    progs = {}
    p = Prog(0x21)  # MTU 1024, own RQ, IRD 1
    p.post_recv()
    p.pkt("SendOnly", length=100)
    p.transmit()
    p.pkt("SendOnly", length=200, delta=0)
    p.transmit()
    progs["send-only"] = p

    p = Prog(0x20)  # MTU 256
    p.post_recv()
    p.pkt("SendFirst", length="mtu", ack_req=False)
    p.pkt("SendMiddle", length="mtu", ack_req=False)
    p.pkt("SendLast", length=10)
    p.transmit()
    p.pkt("SendFirst", length="mtu", delta=-3)  # duplicate
    p.transmit()
    progs["send-multi"] = p

    p = Prog(0x21)
    p.pkt("WriteOnly", va=("w", 16), key="w", length=200)
    p.pkt("WriteFirst", va=("w", 1000), key="w", dma_len=1500, length="mtu", ack_req=False)
    p.pkt("WriteLast", length=476)
    p.transmit()
    progs["write"] = p

    p = Prog(0x21)
    p.post_recv()
    p.pkt("WriteOnlyImm", va=("w", 0), key="w", length=64)
    p.transmit()
    progs["write-imm"] = p

    p = Prog(0x21)
    p.pkt("WriteOnly", va=("r", 0), key="r", length=64)  # no remote write right
    p.transmit()
    progs["write-readonly-mr"] = p

    p = Prog(0x21)
    p.pkt("WriteOnly", va=("f", 0), key="f", length=64)  # other PD
    p.transmit()
    progs["write-other-pd"] = p

    p = Prog(0x21)
    p.pkt("ReadRequest", va=("r", 0), key="r", dma_len=2048, length=0)
    p.transmit()
    p.pkt("ReadRequest", va=("r", 0), key="r", dma_len=2048, length=0, delta=-2)  # dup
    p.transmit()
    progs["read"] = p

    p = Prog(0x21)
    p.post_send(0, length=100)
    p.transmit(2)
    p.pkt("Ack", syndrome=None, msn=1)
    p.transmit()
    progs["ack"] = p

    p = Prog(0x21)
    p.post_send(0, length=1500)
    p.post_send(3, length=300, remote=0x10000, rkey=0x100)
    p.transmit(4)
    p.pkt("Ack", syndrome=0x60, msn=0)  # PSN sequence error NAK
    p.transmit()
    p.time()
    p.transmit()
    progs["nak-seq"] = p

    p = Prog(0x21)
    p.post_send(0, length=100)
    p.transmit(2)
    p.pkt("Ack", syndrome=0x21, msn=0)  # RNR NAK
    p.time(20)
    p.transmit()
    p.time(30)
    p.time(30)
    p.time(30)
    progs["rnr"] = p

    p = Prog(0x21)
    p.post_send(5, length=1500, remote=0x20000, rkey=0x200)
    p.transmit(2)
    p.pkt("ReadRespFirst", length="mtu")
    p.pkt("ReadRespLast", length=476, delta=1)
    p.transmit()
    progs["read-response"] = p

    p = Prog(0x21)
    p.post_send(1, length=10)
    p.transmit()
    p.time(30)
    p.time(30)
    p.time(30)
    p.time(30)
    progs["retry-exceeded"] = p

    p = Prog(0x29)  # PSNs near the 24-bit wrap
    p.post_recv()
    p.post_recv(off=1024, length=1024)
    for _ in range(4):
        p.pkt("SendOnly", length=8)
    p.pkt("SendOnly", length=8)
    p.post_send(0, length=20)
    p.post_send(0, length=20)
    p.transmit()
    p.pkt("Ack", msn=2, delta=1)
    progs["psn-wrap"] = p

    p = Prog(0x21)
    p.post_recv()
    p.pkt("SendOnlyInv", length=16)  # invalidates the RW MR's key
    p.pkt("WriteOnly", va=("w", 0), key="w", length=16)
    p.transmit()
    progs["send-inv"] = p

    p = Prog(0x21)
    p.post_send(7)  # bind the memory window over part of the RW MR
    p.transmit()
    p.pkt("WriteOnly", va=("w", 64), key="mw", length=100)
    p.pkt("WriteOnly", va=("w", 0), key="mw", length=100)  # outside the window
    p.transmit()
    progs["mw-bind"] = p

    p = Prog(0x25)  # SRQ
    p.post_recv()
    p.pkt("SendOnly", length=100)
    p.pkt("SendOnly", length=100)  # RNR: SRQ empty
    p.transmit()
    p.state(0)
    progs["srq-rnr"] = p

    p = Prog(0x31)  # no remote access rights
    p.pkt("ReadRequest", va=("r", 0), key="r", dma_len=64, length=0)
    p.transmit()
    progs["no-access"] = p

    # Captured packets, aimed at this QP.
    p = Prog(0x21)
    p.post_recv()
    for pkt in capture_packets("linux-rping-rxe.pcap", {0x04, 0x0A, 0x0C, 0x11}, 6):
        p.raw(pkt)
        p.transmit(4)
    progs["rping-raw"] = p

    for name, p in progs.items():
        write("rc_responder", bytes(p.b), name)


# ----- capsule program encoding (mirrors src/capsule.rs) -----

ADMIN_OPS = [0x06, 0x02, 0x09, 0x0A, 0x18, 0x0C, 0x08, 0x7F, 0x06, 0x02, 0xFF]
IO_OPS = [0x00, 0x01, 0x02, 0x08, 0x09, 0x01, 0x02, 0x7F, 0xFF]
SUBNQNS = ["fuzz", "fuzz", "discovery", "restricted", "x"]


class Caps:
    def __init__(self, io_qid_sel=0):
        self.b = bytearray([io_qid_sel])

    def u8(self, v):
        self.b.append(v & 0xFF)

    def u16(self, v):
        self.b += struct.pack("<H", v & 0xFFFF)

    def u32(self, v):
        self.b += struct.pack("<I", v & 0xFFFFFFFF)

    def u64(self, v):
        self.b += struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF)

    def connect(self, admin=True, in_capsule=True, sub="fuzz", host=0, kato=1):
        self.u8(5 | (0 if admin else 0x80))
        self.u8(0)      # QID of the queue
        self.u8(0)      # SQSIZE 31
        self.u8(kato)   # KATO: 0, 5000 ms
        self.u16(0x10)  # CID
        self.u8(0)      # RECFMT 0
        self.u8(SUBNQNS.index(sub))
        self.u8(host)
        self.u8(0)      # CNTLID: FFFFh (admin) / the admin controller (I/O)
        self.u8(1 if in_capsule else 0)
        if not in_capsule:
            self.u32(0x1234)  # rkey
            self.u8(1)        # invalidate

    def enable(self, mode=0):
        self.u8(6)
        self.u16(0x20)
        self.u8(mode)
        if mode == 4:
            self.u8(0)

    def sqe(self, admin, op, cid=1, nsid_sel=0, fctype=None, dws=(), icd=0, sgl=("keyed", 4096),
            host=0, icd_bytes=b"", host_bytes=b""):
        self.u8(0 | (0 if admin else 0x80))
        ops = ADMIN_OPS if admin else IO_OPS
        self.u8(ops.index(op))
        self.u8(0)  # flags 40h
        self.u16(cid)
        self.u8(nsid_sel)
        if op == 0x7F:
            self.u8([0x00, 0x01, 0x04, 0x05, 0x08].index(fctype))
        dws = list(dws) + [0] * (6 - len(dws))
        for d in dws:
            self.u8(3)
            self.u32(d)
        # in-capsule length: 0 (mode 0) or 1024 (mode 3) or u16 % 4097 (mode 4)
        if icd == 0:
            self.u8(0)
        elif icd == 1024:
            self.u8(3)
        else:
            self.u8(4)
            self.u16(icd)
        kind = sgl[0]
        if kind == "keyed":
            self.u8(0)
            self.u8(3)
            self.u16(sgl[1])
            self.u64(0x7F00_0000_1000)
            self.u32(0xBEEF)
            self.u8(1)
        elif kind == "inline":
            self.u8(3)
            self.u8(0)  # offset 0
            self.u8(1)  # length = in-capsule length
        self.u8(0x33)   # fill
        # The harness takes min(icd, 64) bytes of in-capsule data from the input.
        self.b += (icd_bytes + bytes(icd))[:min(icd, 64)]
        # host data: 0 (mode 0), 1024 (1), 4096 (2), u16 % 8192 (3); then its bytes
        self.u8({0: 0, 1024: 1, 4096: 2}.get(host, 3))
        if host not in (0, 1024, 4096):
            self.u16(host)
        self.b += (host_bytes + bytes(host))[:min(host, 64)]


def capsule_seeds():
    progs = {}
    c = Caps()
    c.connect(admin=True, in_capsule=False)
    c.enable()
    c.sqe(True, 0x06, dws=[0x01])                   # Identify Controller
    c.sqe(True, 0x06, nsid_sel=0, dws=[0x00])       # Identify Namespace 1
    c.sqe(True, 0x06, dws=[0x02])                   # active NS list
    c.sqe(True, 0x06, dws=[0x03])                   # NS descriptors
    c.sqe(True, 0x02, dws=[0x03FF0002], sgl=("keyed", 512))   # SMART log
    c.sqe(True, 0x02, dws=[0x00FF0005], sgl=("keyed", 1024))  # effects log
    c.sqe(True, 0x09, dws=[0x07, 0x00030003], sgl=("keyed", 0))  # Number of Queues
    c.sqe(True, 0x0A, dws=[0x81], sgl=("keyed", 16))             # Host Identifier
    c.sqe(True, 0x09, dws=[0x0F, 5000], sgl=("keyed", 0))        # Keep Alive Timer
    c.sqe(True, 0x0C, cid=7, sgl=("keyed", 0))                   # AER (held)
    c.sqe(True, 0x18, sgl=("keyed", 0))                          # Keep Alive
    c.connect(admin=False, in_capsule=True)
    c.sqe(False, 0x02, dws=[0, 0, 7], sgl=("keyed", 4096))       # Read 8 blocks
    c.sqe(False, 0x00, sgl=("keyed", 0))                         # Flush
    c.sqe(False, 0x08, dws=[16, 0, 7], sgl=("keyed", 0))         # Write Zeroes
    ranges = struct.pack("<IIQ", 0, 8, 0) + struct.pack("<IIQ", 0, 8, 100)
    c.sqe(False, 0x09, dws=[1, 4], sgl=("keyed", 32), host=32, host_bytes=ranges)  # DSM
    c.sqe(False, 0x01, dws=[8, 0, 7], icd=4096, sgl=("inline",)) # Write in-capsule
    progs["session"] = c

    c = Caps()
    c.connect(admin=True, in_capsule=True)
    c.enable()
    c.connect(admin=False, in_capsule=False)
    c.sqe(False, 0x01, dws=[0, 0, 1], sgl=("keyed", 1024), host=1024,
          host_bytes=bytes(range(256)) * 4)  # Write by RDMA READ
    c.enable(2)  # shutdown
    c.sqe(False, 0x02, dws=[0, 0, 0], sgl=("keyed", 512))
    progs["keyed-write-shutdown"] = c

    c = Caps()
    c.connect(admin=True, in_capsule=False, sub="discovery", kato=0)
    c.enable()
    c.sqe(True, 0x02, dws=[0x00FF0070], sgl=("keyed", 1024))  # discovery log page
    c.sqe(True, 0x06, dws=[0x01])
    progs["discovery"] = c

    c = Caps()
    c.connect(admin=True, in_capsule=False, sub="restricted", host=0)
    c.connect(admin=True, in_capsule=False, sub="restricted", host=2)
    c.connect(admin=True, in_capsule=False, sub="x")
    c.enable(4)
    progs["connect-refused"] = c

    c = Caps(1)
    c.sqe(True, 0x7F, fctype=0x04, sgl=("keyed", 0))  # Property Get before Connect
    c.sqe(True, 0x06, dws=[0x01])                     # Identify before Connect
    progs["before-connect"] = c

    # Raw capsules from the capture: the SEND payloads of capsules (SQE + data).
    c = Caps()
    for p in capture_packets("linux-nvme-rdma-rxe.pcap", {0x04}, 40):
        body = p[12:-4]
        if len(body) == 64 and body[0] in (0x7F, 0x06, 0x02, 0x09, 0x0A, 0x0C, 0x18):
            c.u8(4)           # raw, admin queue
            c.u16(len(body))
            c.b += body
            c.u16(0)          # no host data
    progs["capture-raw"] = c

    for name, c in progs.items():
        write("capsule", bytes(c.b), name)


if __name__ == "__main__":
    GEN = {"packet_parse": packet_parse_seeds, "rc_responder": rc_responder_seeds,
           "capsule": capsule_seeds}
    for t in sys.argv[2:] or GEN:
        GEN[t]()

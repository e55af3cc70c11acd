//! The XDP program, as eBPF instructions assembled here (no BPF compiler at build
//! time): UDP datagrams to port 4791 (RoCEv2) over IPv4 (no options, not fragmented)
//! or IPv6 (next header UDP) go to the AF_XDP socket in the XSKMAP slot of the receive
//! queue they arrived on (`bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS)`:
//! with no socket in that slot, the packet passes), when their BTH DestQP steers to
//! that queue's poll group (`dest_qp % groups == rx_queue_index`, the soft provider's
//! QPN classes, [`crate::soft::QpnAllocator`]) and is not QP1. Everything else passes
//! to the stack, whose SO_REUSEPORT group hands it to the right poll group's UDP socket
//! (or QP1's, the CM agent's): an XSK receives only from its own queue, so a packet
//! that arrived on another poll group's queue is handed on through the kernel. In C:
//!
//! ```c
//! if (eth + 1 > end) return XDP_PASS;
//! if (eth->h_proto == htons(ETH_P_IP)) {
//!     if (udp4 + 1 > end || ip->version_ihl != 0x45 || ip->protocol != IPPROTO_UDP
//!         || (ip->frag_off & htons(0x3FFF)) || udp4->dest != htons(4791)) return XDP_PASS;
//! } else if (eth->h_proto == htons(ETH_P_IPV6)) {
//!     if (udp6 + 1 > end || ip6->nexthdr != IPPROTO_UDP || udp6->dest != htons(4791))
//!         return XDP_PASS;
//! } else return XDP_PASS;
//! if (bth + 1 > end) return XDP_PASS;
//! u32 qpn = bth->dest_qp[0] << 16 | bth->dest_qp[1] << 8 | bth->dest_qp[2];
//! if (qpn == 1 || qpn % GROUPS != ctx->rx_queue_index) return XDP_PASS;
//! return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
//! ```
//!
//! Instruction encoding: `include/uapi/linux/bpf.h` (`struct bpf_insn`) and
//! `Documentation/bpf/standardization/instruction-set.rst`.
use crate::wire::ROCE_V2_UDP_DPORT;

/// One eBPF instruction (`struct bpf_insn`): opcode, destination register (low
/// nibble) and source register (high nibble), offset, immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct BpfInsn {
    pub code: u8,
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

/// `XDP_PASS`, the program's return value for packets that are not ours.
pub const XDP_PASS: i32 = 2;
/// `BPF_FUNC_redirect_map`, the helper's number.
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
/// `BPF_PSEUDO_MAP_FD`: the 64-bit immediate load holds a map's file descriptor.
const BPF_PSEUDO_MAP_FD: u8 = 1;

// Opcodes (class | size/op | source).
const LDX_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
const LDX_H: u8 = 0x69; // BPF_LDX | BPF_MEM | BPF_H
const LDX_B: u8 = 0x71; // BPF_LDX | BPF_MEM | BPF_B
const MOV64_X: u8 = 0xbf;
const MOV64_K: u8 = 0xb7;
const ADD64_K: u8 = 0x07;
const AND64_K: u8 = 0x57;
const LSH64_K: u8 = 0x67;
const OR64_X: u8 = 0x4f;
const MOD64_K: u8 = 0x97;
const JNE_X: u8 = 0x5d;
const JGT_X: u8 = 0x2d;
const JEQ_K: u8 = 0x15;
const JNE_K: u8 = 0x55;
const JA: u8 = 0x05;
const LD_DW_IMM: u8 = 0x18;
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;

// struct xdp_md field offsets.
const XDP_MD_DATA: i16 = 0;
const XDP_MD_DATA_END: i16 = 4;
const XDP_MD_RX_QUEUE_INDEX: i16 = 16;

// Frame layout (bytes from the start of the Ethernet header).
const ETH_TYPE_AT: i16 = 12;
const ETH_LEN: i32 = 14;
const IPV4_VER_IHL_AT: i16 = 14;
const IPV4_FRAG_AT: i16 = 20;
const IPV4_PROTO_AT: i16 = 23;
const IPV4_UDP_DPORT_AT: i16 = 36;
const IPV4_UDP_END: i32 = 42;
const IPV6_NEXT_HDR_AT: i16 = 20;
const IPV6_UDP_DPORT_AT: i16 = 56;
const IPV6_UDP_END: i32 = 62;
const IPPROTO_UDP: i32 = 17;
/// The BTH's DestQP (3 bytes) from the BTH's start, and the BTH's length.
const BTH_DEST_QP_AT: i16 = 5;
const BTH_LEN: i32 = crate::wire::BTH_LEN as i32;
/// QP1, the CM's QP: its MADs go to the CM agent's socket.
const GSI_QPN: i32 = 1;

/// A big-endian 16-bit wire value as the program's native-endian `u16` load sees it.
fn wire16(v: u16) -> i32 {
    i32::from(u16::from_ne_bytes(v.to_be_bytes()))
}

/// Jump targets, resolved after assembly.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Label {
    Ipv4,
    Redirect,
    Pass,
}

struct Asm {
    insns: Vec<BpfInsn>,
    fixups: Vec<(usize, Label)>,
    labels: Vec<(Label, usize)>,
}

impl Asm {
    fn op(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.insns.push(BpfInsn {
            code,
            regs: dst | (src << 4),
            off,
            imm,
        });
    }
    fn jump(&mut self, code: u8, dst: u8, src: u8, imm: i32, to: Label) {
        self.fixups.push((self.insns.len(), to));
        self.op(code, dst, src, 0, imm);
    }
    fn label(&mut self, l: Label) {
        self.labels.push((l, self.insns.len()));
    }
    fn finish(mut self) -> Vec<BpfInsn> {
        for &(at, to) in &self.fixups {
            let target = self
                .labels
                .iter()
                .find(|(l, _)| *l == to)
                .map(|&(_, i)| i)
                .expect("every label the program jumps to is defined");
            self.insns[at].off = (target as i64 - at as i64 - 1) as i16;
        }
        self.insns
    }
}

/// The program's instructions, with `xskmap_fd` (the XSKMAP's file descriptor) in its
/// map load, for a device of `groups` poll groups (at least 1).
pub fn redirect_roce_program(xskmap_fd: i32, groups: u32) -> Vec<BpfInsn> {
    let (r0, r1, r2, r3, r4, r5, r6, r7) = (0, 1, 2, 3, 4, 5, 6, 7);
    let groups = groups.clamp(1, i32::MAX as u32) as i32;
    let mut a = Asm {
        insns: Vec::with_capacity(48),
        fixups: Vec::new(),
        labels: Vec::new(),
    };
    a.op(MOV64_X, r6, r1, 0, 0); // r6 = ctx
    a.op(LDX_W, r2, r1, XDP_MD_DATA, 0);
    a.op(LDX_W, r3, r1, XDP_MD_DATA_END, 0);
    // The Ethernet header.
    a.op(MOV64_X, r4, r2, 0, 0);
    a.op(ADD64_K, r4, 0, 0, ETH_LEN);
    a.jump(JGT_X, r4, r3, 0, Label::Pass);
    a.op(LDX_H, r5, r2, ETH_TYPE_AT, 0);
    a.jump(JEQ_K, r5, 0, wire16(0x0800), Label::Ipv4);
    a.jump(JNE_K, r5, 0, wire16(0x86DD), Label::Pass);
    // IPv6 + UDP.
    a.op(MOV64_X, r4, r2, 0, 0);
    a.op(ADD64_K, r4, 0, 0, IPV6_UDP_END);
    a.jump(JGT_X, r4, r3, 0, Label::Pass);
    a.op(LDX_B, r5, r2, IPV6_NEXT_HDR_AT, 0);
    a.jump(JNE_K, r5, 0, IPPROTO_UDP, Label::Pass);
    a.op(LDX_H, r5, r2, IPV6_UDP_DPORT_AT, 0);
    a.jump(JNE_K, r5, 0, wire16(ROCE_V2_UDP_DPORT), Label::Pass);
    a.op(MOV64_X, r7, r2, 0, 0);
    a.op(ADD64_K, r7, 0, 0, IPV6_UDP_END); // r7 = the BTH
    a.jump(JA, 0, 0, 0, Label::Redirect);
    // IPv4 + UDP.
    a.label(Label::Ipv4);
    a.op(MOV64_X, r4, r2, 0, 0);
    a.op(ADD64_K, r4, 0, 0, IPV4_UDP_END);
    a.jump(JGT_X, r4, r3, 0, Label::Pass);
    a.op(LDX_B, r5, r2, IPV4_VER_IHL_AT, 0);
    a.jump(JNE_K, r5, 0, 0x45, Label::Pass);
    a.op(LDX_B, r5, r2, IPV4_PROTO_AT, 0);
    a.jump(JNE_K, r5, 0, IPPROTO_UDP, Label::Pass);
    a.op(LDX_H, r5, r2, IPV4_FRAG_AT, 0);
    a.op(AND64_K, r5, 0, 0, wire16(0x3FFF)); // MF and the fragment offset
    a.jump(JNE_K, r5, 0, 0, Label::Pass);
    a.op(LDX_H, r5, r2, IPV4_UDP_DPORT_AT, 0);
    a.jump(JNE_K, r5, 0, wire16(ROCE_V2_UDP_DPORT), Label::Pass);
    a.op(MOV64_X, r7, r2, 0, 0);
    a.op(ADD64_K, r7, 0, 0, IPV4_UDP_END); // r7 = the BTH
                                           // The BTH's DestQP: QP1 and other poll groups' QPs pass.
    a.label(Label::Redirect);
    a.op(MOV64_X, r4, r7, 0, 0);
    a.op(ADD64_K, r4, 0, 0, BTH_LEN);
    a.jump(JGT_X, r4, r3, 0, Label::Pass);
    a.op(LDX_B, r5, r7, BTH_DEST_QP_AT, 0);
    a.op(LSH64_K, r5, 0, 0, 16);
    a.op(LDX_B, r4, r7, BTH_DEST_QP_AT + 1, 0);
    a.op(LSH64_K, r4, 0, 0, 8);
    a.op(OR64_X, r5, r4, 0, 0);
    a.op(LDX_B, r4, r7, BTH_DEST_QP_AT + 2, 0);
    a.op(OR64_X, r5, r4, 0, 0);
    a.jump(JEQ_K, r5, 0, GSI_QPN, Label::Pass);
    a.op(MOD64_K, r5, 0, 0, groups);
    // return bpf_redirect_map(xsks, ctx->rx_queue_index, XDP_PASS)
    a.op(LDX_W, r2, r6, XDP_MD_RX_QUEUE_INDEX, 0);
    a.jump(JNE_X, r5, r2, 0, Label::Pass);
    a.op(LD_DW_IMM, r1, BPF_PSEUDO_MAP_FD, 0, xskmap_fd);
    a.op(0, 0, 0, 0, 0); // the immediate's upper half
    a.op(MOV64_K, r3, 0, 0, XDP_PASS);
    a.op(CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP);
    a.op(EXIT, 0, 0, 0, 0);
    a.label(Label::Pass);
    a.op(MOV64_K, r0, 0, 0, XDP_PASS);
    a.op(EXIT, 0, 0, 0, 0);
    a.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_land_on_their_labels_and_the_map_fd_is_in_place() {
        let p = redirect_roce_program(7, 3);
        assert_eq!(std::mem::size_of::<BpfInsn>(), 8);
        let pass = p.len() - 2;
        assert_eq!((p[pass].code, p[pass].imm), (MOV64_K, XDP_PASS));
        assert_eq!(p.last().unwrap().code, EXIT);
        // Every jump stays inside the program; the bounds checks go to "pass".
        for (i, insn) in p.iter().enumerate() {
            if [JGT_X, JEQ_K, JNE_K, JNE_X, JA].contains(&insn.code) {
                let to = i as i64 + 1 + i64::from(insn.off);
                assert!((0..p.len() as i64).contains(&to), "insn {i} jumps to {to}");
                if insn.code == JGT_X {
                    assert_eq!(to as usize, pass);
                }
            }
        }
        let ld = p.iter().position(|i| i.code == LD_DW_IMM).unwrap();
        assert_eq!((p[ld].regs, p[ld].imm), (1 | (BPF_PSEUDO_MAP_FD << 4), 7));
        assert_eq!(
            (p[ld + 3].code, p[ld + 3].imm),
            (CALL, BPF_FUNC_REDIRECT_MAP)
        );
    }

    #[test]
    fn wire_constants_are_as_a_native_load_sees_them() {
        // 4791 = 0x12B7 travels as bytes 12 B7.
        assert_eq!((wire16(4791) as u16).to_ne_bytes(), [0x12, 0xB7]);
    }
}

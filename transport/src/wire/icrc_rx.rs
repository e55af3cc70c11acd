//! Receive-side ICRC check when the IPv4 identification field is not visible.
//!
//! The ICRC covers the IPv4 identification (RoCEv2 Annex A17.3.3: only ToS, TTL and the
//! header checksum are masked). A UDP socket delivers the payload and the addresses but
//! never the IP header, so the receiver does not know the ID the sender wrote:
//!
//! - our own sender writes 0: Linux gives a DF packet of an unconnected UDP socket the
//!   ID 0 (`ip_select_ident_segs`), and numbers the segments of a UDP GSO train from
//!   it 0, 1, 2, ... (`inet_gso_segment`); so the receiver tries the predicted ID first
//!   (0 for a lone datagram, `i` for segment `i` of a datagram that UDP GRO coalesced),
//!   and then the check has its full 32-bit strength;
//! - Linux rdma_rxe writes `__ip_select_ident` values: a per-destination counter that
//!   jumps by a random amount after idle periods, so it cannot be predicted.
//!
//! CRC-32 is affine over GF(2): flipping ID bit `b` changes the final CRC by a value
//! `delta_b(n)` that depends only on the number `n` of bytes hashed after the ID. So
//! `stored ^ icrc(id = 0) = sum of delta_b(n) over the set bits of the real ID`, a
//! 32-equation system in 16 unknowns. [`IcrcChecker`] solves it with a basis
//! precomputed per length (16 reduction steps per packet). A packet is accepted when a
//! solution exists; the solved ID is returned for counting and diagnostics.
//!
//! What this costs: an intact packet always passes; a corrupted packet whose damage
//! happens to look like an ID change passes with probability about 2^-16 instead of
//! 2^-32 (every single-bit error is still caught). To keep the full check for senders
//! that write predictable IDs (our own peers), the checker learns per source address:
//! once [`ZERO_ID_SENDER_AFTER`] packets in a row from a source matched their predicted
//! ID and none ever needed a solved ID of [`UDP_GSO_MAX_SEGMENTS`] or more, that source
//! is settled: from it only the predicted ID, or a solved ID below
//! [`UDP_GSO_MAX_SEGMENTS`] (a segment of a train that arrived apart from the segments
//! before it: a NIC without GRO, or GRO that coalesced only part of a train), is
//! accepted, a check of about 32 - 6 = 26 bits in that rare case. A sender that numbers its packets (rxe) essentially never writes
//! ID 0 that many times in a row. On Ethernet the link FCS has already dropped frames
//! damaged on the wire, so the ICRC's remaining job is end to end; we accept the weaker
//! bound for numbering senders rather than read every packet twice through a raw socket
//! (which would also need CAP_NET_RAW).
use std::collections::HashMap;
use std::net::IpAddr;

use super::headers::ICRC_LEN;
use super::icrc::{icrc, stored_icrc, IcrcIpInfo};

/// Bytes of the ICRC input before the IPv4 ID: 8 (masked LRH) + 4 (IPv4 version .. total
/// length); the ID is the next 2.
const ID_END_IN_INPUT: usize = 8 + 4 + 2;
/// Bytes of the ICRC input before the UDP payload for IPv4: 8 + 20 (IPv4) + 8 (UDP).
const INPUT_BEFORE_PAYLOAD_V4: usize = 8 + 20 + 8;

/// Outcome of [`IcrcChecker::check`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IcrcCheck {
    /// The ICRC matches with the IPv4 ID given in the [`IcrcIpInfo`] (or IPv6, which has
    /// no ID): the full 32-bit check.
    Exact,
    /// The ICRC matches for exactly this IPv4 identification value (16-bit check).
    SolvedIpv4Id(u16),
    /// No IPv4 ID makes the ICRC match, or the packet is shorter than an ICRC: drop it.
    Bad,
}

impl IcrcCheck {
    /// Whether the packet is to be accepted.
    pub fn is_ok(self) -> bool {
        self != IcrcCheck::Bad
    }
}

/// The 16 raw ID-bit deltas for one packet length: `bits[b]` is what flipping IPv4 ID
/// bit `b` does to the ICRC when `n` bytes are hashed after the ID (CRC-32 is affine,
/// so the delta of any ID is the XOR of its bits' deltas). Used both to solve for an
/// unknown ID ([`IdBasis`]) and, on transmit, to give segment `i` of a UDP GSO train
/// the ICRC of ID `i` without hashing the packet twice ([`IcrcChecker::ipv4_id_delta`]).
#[derive(Clone, Debug)]
struct IdDeltas {
    bits: [u32; 16],
}

impl IdDeltas {
    /// The deltas for `n` bytes hashed after the ID. Allocates nothing (it runs on the
    /// data path the first time a packet length is seen): the zeros come from a static
    /// block, hashed as many times as `n` needs.
    fn new(n: usize) -> Self {
        let hash = |id: u16| {
            let mut h = crc32fast::Hasher::new();
            h.update(&id.to_be_bytes());
            let mut rest = n;
            while rest > 0 {
                let k = rest.min(ZEROS.len());
                h.update(&ZEROS[..k]);
                rest -= k;
            }
            h.finalize()
        };
        let base = hash(0);
        let mut bits = [0u32; 16];
        for (bit, d) in bits.iter_mut().enumerate() {
            *d = hash(1u16 << bit) ^ base;
        }
        IdDeltas { bits }
    }

    /// What ID `id` (instead of 0) changes in the ICRC.
    fn delta(&self, id: u16) -> u32 {
        let mut d = 0;
        let mut rest = id;
        while rest != 0 {
            d ^= self.bits[rest.trailing_zeros() as usize];
            rest &= rest - 1;
        }
        d
    }
}

/// A row-reduced basis of the 16 ID-bit deltas for one packet length: `(vector, ID bits
/// that produce it, pivot bit)`, with the raw deltas it was built from.
#[derive(Clone, Debug)]
struct IdBasis {
    deltas: IdDeltas,
    /// `rows[..len]` is the basis (at most 16 rows, one per ID bit).
    rows: [(u32, u16, u32); 16],
    len: usize,
}

impl IdBasis {
    /// Basis for `n` bytes hashed after the ID.
    fn new(n: usize) -> Self {
        let deltas = IdDeltas::new(n);
        let mut rows = [(0u32, 0u16, 0u32); 16];
        let mut len = 0;
        for (bit, &raw) in deltas.bits.iter().enumerate() {
            let id = 1u16 << bit;
            let mut v = raw;
            let mut combo = id;
            for &(rv, rc, pivot) in &rows[..len] {
                if v & pivot != 0 {
                    v ^= rv;
                    combo ^= rc;
                }
            }
            if v != 0 {
                let pivot = 1 << v.trailing_zeros();
                // Keep the basis fully reduced: clear the new pivot from older rows.
                for row in &mut rows[..len] {
                    if row.0 & pivot != 0 {
                        row.0 ^= v;
                        row.1 ^= combo;
                    }
                }
                rows[len] = (v, combo, pivot);
                len += 1;
            }
        }
        IdBasis { deltas, rows, len }
    }

    /// The ID whose deltas sum to `target`, if any.
    fn solve(&self, mut target: u32) -> Option<u16> {
        let mut id = 0u16;
        for &(v, combo, pivot) in &self.rows[..self.len] {
            if target & pivot != 0 {
                target ^= v;
                id ^= combo;
            }
        }
        (target == 0).then_some(id)
    }
}

/// Most segments in one of our UDP GSO trains (the kernel allows `UDP_MAX_SEGMENTS`,
/// 64 or 128 depending on its version): the IPv4 IDs our trains use are `0..` this,
/// which the receive check accepts from settled sources when they are not the
/// predicted one.
pub const UDP_GSO_MAX_SEGMENTS: u16 = 64;

/// Consecutive exact (predicted ID) matches after which a source that never needed a solved ID
/// is taken to be a zero-ID sender, from which only exact matches are accepted.
pub const ZERO_ID_SENDER_AFTER: u32 = 8;
/// Packet lengths whose ID basis fits the checker's table before it grows (a QP's
/// traffic uses a handful: ACKs, capsules, responses, full and last segments).
pub const LENGTHS_RESERVED: usize = 64;
/// Sources that fit the checker's table before it grows.
pub const SOURCES_RESERVED: usize = 16;
/// A block of zeros hashed for the ID deltas of any packet length.
static ZEROS: [u8; 1024] = [0; 1024];
/// Sources remembered at most; the table is cleared when full (learning starts again).
const MAX_SOURCES: usize = 4096;

/// What the checker has learnt about one source address.
#[derive(Clone, Copy, Debug, Default)]
struct Sender {
    /// Exact matches in a row (saturating).
    exact_run: u32,
    /// Some packet from this source needed a solved (non-zero) ID.
    numbers_packets: bool,
}

/// Receive-side ICRC checker for one receiving thread; caches one small basis per
/// packet length seen (a few hundred bytes each) and what it learnt per source.
#[derive(Debug)]
pub struct IcrcChecker {
    bases: HashMap<usize, IdBasis>,
    senders: HashMap<IpAddr, Sender>,
    /// The last source found to be a zero-ID sender: its exact matches need no table
    /// lookup (the common case on the data path between our own peers).
    settled: Option<IpAddr>,
}

impl Default for IcrcChecker {
    fn default() -> Self {
        Self::new()
    }
}

impl IcrcChecker {
    /// A checker with an empty cache, its tables sized up front so that the first
    /// packets of a new length or source do not allocate on the data path (up to
    /// [`LENGTHS_RESERVED`] lengths and [`SOURCES_RESERVED`] sources).
    pub fn new() -> Self {
        IcrcChecker {
            bases: HashMap::with_capacity(LENGTHS_RESERVED),
            senders: HashMap::with_capacity(SOURCES_RESERVED),
            settled: None,
        }
    }

    /// Checks the ICRC of a received UDP payload (BTH .. ICRC). `ip` gives the
    /// addresses and ports the socket reported; its `ipv4_id` is the predicted ID,
    /// tried first (0 for a lone datagram, `i` for segment `i` of a GRO datagram). For
    /// IPv4 packets that do not match it, the ID is solved for (see the module docs for
    /// which solved IDs a settled source may use).
    pub fn check(&mut self, ip: &IcrcIpInfo, udp_payload_with_icrc: &[u8]) -> IcrcCheck {
        let Some((body, stored)) = stored_icrc(udp_payload_with_icrc) else {
            return IcrcCheck::Bad;
        };
        let computed = icrc(ip, body);
        if !ip.is_ipv4() {
            return if computed == stored {
                IcrcCheck::Exact
            } else {
                IcrcCheck::Bad
            };
        }
        if computed == stored && self.settled == Some(ip.src) {
            return IcrcCheck::Exact;
        }
        if self.senders.len() >= MAX_SOURCES && !self.senders.contains_key(&ip.src) {
            self.senders.clear();
            self.settled = None;
        }
        let sender = self.senders.entry(ip.src).or_default();
        if computed == stored {
            sender.exact_run = sender.exact_run.saturating_add(1);
            if !sender.numbers_packets && sender.exact_run >= ZERO_ID_SENDER_AFTER {
                self.settled = Some(ip.src);
            }
            return IcrcCheck::Exact;
        }
        let settled = !sender.numbers_packets && sender.exact_run >= ZERO_ID_SENDER_AFTER;
        // Bytes hashed after the ID: the rest of the IPv4 header, the UDP header, the
        // payload without the ICRC.
        let n = INPUT_BEFORE_PAYLOAD_V4 + udp_payload_with_icrc.len() - ICRC_LEN - ID_END_IN_INPUT;
        let basis = self.bases.entry(n).or_insert_with(|| IdBasis::new(n));
        let Some(id) = basis.solve(computed ^ stored).map(|d| ip.ipv4_id ^ d) else {
            return IcrcCheck::Bad;
        };
        if id < UDP_GSO_MAX_SEGMENTS {
            // A segment of one of our trains that arrived apart from the segments
            // before it (a NIC without GRO, a partly coalesced train): accepted, and it
            // says nothing about whether the source numbers its packets.
            return IcrcCheck::SolvedIpv4Id(id);
        }
        if settled {
            return IcrcCheck::Bad;
        }
        sender.numbers_packets = true;
        sender.exact_run = 0;
        IcrcCheck::SolvedIpv4Id(id)
    }

    /// What IPv4 ID `id` instead of 0 changes in the ICRC of a packet whose UDP payload
    /// (BTH .. ICRC) is `udp_payload_len_with_icrc` bytes: the sender of a UDP GSO train
    /// computes each segment's ICRC with ID 0 and XORs this for segment `id` (the
    /// kernel numbers the segments 0, 1, 2, ...). Shares the per-length cache of the
    /// receive check.
    pub fn ipv4_id_delta(&mut self, udp_payload_len_with_icrc: usize, id: u16) -> u32 {
        if id == 0 {
            return 0;
        }
        let n = INPUT_BEFORE_PAYLOAD_V4 + udp_payload_len_with_icrc - ICRC_LEN - ID_END_IN_INPUT;
        self.bases
            .entry(n)
            .or_insert_with(|| IdBasis::new(n))
            .deltas
            .delta(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_captures::Capture;
    use std::net::Ipv4Addr;

    fn info(id: u16) -> IcrcIpInfo {
        IcrcIpInfo {
            src: Ipv4Addr::new(192, 168, 77, 10).into(),
            dst: Ipv4Addr::new(192, 168, 77, 1).into(),
            ipv4_id: id,
            udp_sport: 0xC123,
            udp_dport: 4791,
        }
    }

    fn packet(id: u16, len: usize) -> Vec<u8> {
        let mut p: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
        let crc = icrc(&info(id), &p);
        p.extend_from_slice(&crc.to_le_bytes());
        p
    }

    #[test]
    fn every_id_is_recovered_at_several_lengths() {
        let mut c = IcrcChecker::new();
        for len in [12, 28, 76, 1036, 4108] {
            for id in (0..=u16::MAX).step_by(251).chain([1, 0x8000, 0xFFFF]) {
                let want = if id == 0 {
                    IcrcCheck::Exact
                } else {
                    IcrcCheck::SolvedIpv4Id(id)
                };
                assert_eq!(
                    c.check(&info(0), &packet(id, len)),
                    want,
                    "len {len} id {id}"
                );
            }
        }
    }

    #[test]
    fn ids_other_than_the_hint_are_solved_relative_to_it() {
        let mut c = IcrcChecker::new();
        let p = packet(0x1234, 100);
        assert_eq!(c.check(&info(0x1234), &p), IcrcCheck::Exact);
        assert_eq!(c.check(&info(0x0F0F), &p), IcrcCheck::SolvedIpv4Id(0x1234));
    }

    /// Any single flipped bit outside the masked BTH byte is caught (a single-bit error
    /// is never a multiple of the ID deltas), and so are most random corruptions.
    #[test]
    fn corruption_is_detected() {
        let mut c = IcrcChecker::new();
        let p = packet(0xBEEF, 64);
        for bit in 0..p.len() * 8 {
            let mut bad = p.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            let r = c.check(&info(0), &bad);
            if bit / 8 == 4 {
                assert_eq!(r, IcrcCheck::SolvedIpv4Id(0xBEEF), "masked byte, bit {bit}");
            } else {
                assert_eq!(r, IcrcCheck::Bad, "bit {bit}");
            }
        }
        // Random 2-byte corruptions: about 2^-16 of them may pass; none should in 2000.
        let mut passed = 0;
        let mut x = 0x9E37_79B9u32;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let mut bad = p.clone();
            let at = 5 + (x as usize % (p.len() - 5));
            bad[at] ^= (x >> 8) as u8 | 1;
            if c.check(&info(0), &bad).is_ok() {
                passed += 1;
            }
        }
        assert_eq!(passed, 0);
        assert_eq!(c.check(&info(0), &[1, 2, 3]), IcrcCheck::Bad);
    }

    /// A source that sends ID 0 keeps the full 32-bit check: once it is known, damage
    /// that merely looks like an ID change is refused. A numbering source is not
    /// affected by another source's history.
    #[test]
    fn zero_id_senders_keep_the_full_check() {
        let mut c = IcrcChecker::new();
        let ours = packet(0, 1036);
        // The same bytes with the ICRC an ID of 0x55 gives: to a zero-ID sender's
        // receiver, damage (here to the ICRC field) that looks exactly like an ID change.
        let looks_like_id = packet(0x55, 1036);
        assert_eq!(
            c.check(&info(0), &looks_like_id),
            IcrcCheck::SolvedIpv4Id(0x55),
            "unknown source: solved"
        );
        let mut c = IcrcChecker::new();
        for _ in 0..ZERO_ID_SENDER_AFTER {
            assert_eq!(c.check(&info(0), &ours), IcrcCheck::Exact);
        }
        assert_eq!(c.check(&info(0), &looks_like_id), IcrcCheck::Bad);
        let mut rxe = info(0x55);
        rxe.src = Ipv4Addr::new(192, 168, 77, 11).into();
        let mut from_rxe = ours[..ours.len() - 4].to_vec();
        from_rxe.extend_from_slice(&icrc(&rxe, &from_rxe).to_le_bytes());
        rxe.ipv4_id = 0;
        assert_eq!(
            c.check(&rxe, &from_rxe),
            IcrcCheck::SolvedIpv4Id(0x55),
            "another source"
        );
    }

    /// Segment `i` of a GSO train carries the ICRC of ID `i`: the sender's shortcut
    /// (ICRC of ID 0 plus [`IcrcChecker::ipv4_id_delta`]) equals hashing with ID `i`,
    /// and the receiver's prediction `i` checks it exactly. A settled source may still
    /// send a lone packet with a small ID (a segment the network did not coalesce), but
    /// not one that looks like a large ID.
    #[test]
    fn train_segments_use_their_index_as_id() {
        let mut c = IcrcChecker::new();
        for len in [36, 1040, 4128] {
            for id in [1u16, 2, 7, 15, 63] {
                let body = &packet(0, len)[..len];
                let shortcut = icrc(&info(0), body) ^ c.ipv4_id_delta(len + ICRC_LEN, id);
                assert_eq!(shortcut, icrc(&info(id), body), "len {len} id {id}");
            }
        }
        let mut c = IcrcChecker::new();
        for _ in 0..ZERO_ID_SENDER_AFTER {
            assert_eq!(c.check(&info(0), &packet(0, 200)), IcrcCheck::Exact);
        }
        assert_eq!(c.check(&info(3), &packet(3, 200)), IcrcCheck::Exact);
        assert_eq!(
            c.check(&info(0), &packet(3, 200)),
            IcrcCheck::SolvedIpv4Id(3)
        );
        let last = UDP_GSO_MAX_SEGMENTS - 1;
        assert_eq!(
            c.check(&info(0), &packet(last, 200)),
            IcrcCheck::SolvedIpv4Id(last)
        );
        assert_eq!(
            c.check(&info(0), &packet(UDP_GSO_MAX_SEGMENTS, 200)),
            IcrcCheck::Bad
        );
        // Still settled: exact matches keep the fast path.
        assert_eq!(c.check(&info(0), &packet(0, 200)), IcrcCheck::Exact);
    }

    /// Every RoCEv2 packet Linux rxe sent in the IPv4 reference capture passes with the
    /// ID the capture shows, solved without seeing the IP header; IPv6 ones check exactly.
    #[test]
    fn linux_rxe_packets_pass_with_their_real_ids() {
        let mut c = IcrcChecker::new();
        for (name, v4) in [
            ("linux-nvme-rdma-rxe.pcap", true),
            ("linux-perftest-rxe.pcap", true),
            ("linux-nvme-rdma-rxe-ipv6.pcap", false),
        ] {
            let bytes = crate::test_captures::read(name);
            let pcap = Capture::parse(&bytes).expect("pcap");
            let mut solved = 0;
            for (frame, udp) in pcap.roce() {
                let real = udp.icrc_info();
                let mut hidden = real;
                hidden.ipv4_id = 0;
                let r = c.check(&hidden, udp.payload);
                if v4 {
                    let want = if real.ipv4_id == 0 {
                        IcrcCheck::Exact
                    } else {
                        IcrcCheck::SolvedIpv4Id(real.ipv4_id)
                    };
                    assert_eq!(r, want, "{name} #{}", frame.number);
                    solved += usize::from(real.ipv4_id != 0);
                } else {
                    assert_eq!(r, IcrcCheck::Exact, "{name} #{}", frame.number);
                }
            }
            assert_eq!(solved > 100, v4, "{name}: {solved} non-zero IDs");
        }
    }
}

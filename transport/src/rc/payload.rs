//! Outgoing packets: headers plus a zero-copy payload referencing registered memory.
use crate::verbs::MAX_SGE;
use crate::wire::PacketHeaders;

use super::mem::MemRef;

/// Most segments of one payload: a packet of a SEND/WRITE may span all SGEs of its WR.
pub const MAX_PAYLOAD_SEGMENTS: usize = MAX_SGE + 1;

/// The payload of an outgoing packet: up to [`MAX_PAYLOAD_SEGMENTS`] ranges of
/// registered memory, sent back to back. The [`MemRef`]s keep the memory alive; the
/// bytes are read when the driver sends the packet (zero copy: the socket copy plays the
/// part of the NIC's DMA).
#[derive(Clone, Debug, Default)]
pub struct Payload {
    segs: [MemRef; MAX_PAYLOAD_SEGMENTS],
    n: u8,
    len: usize,
}

impl Payload {
    /// The empty payload.
    pub fn empty() -> Self {
        Payload::default()
    }

    /// Appends a segment; `false` if all segments are used (nothing appended).
    pub fn push(&mut self, m: MemRef) -> bool {
        if m.is_empty() {
            return true;
        }
        let Some(slot) = self.segs.get_mut(self.n as usize) else {
            return false;
        };
        self.len += m.len();
        *slot = m;
        self.n += 1;
        true
    }

    /// The segments in order.
    ///
    /// The slices alias registered memory that the application promised not to modify
    /// while the work request is outstanding (the RDMA contract); the RC core only hands
    /// out payloads of outstanding requests, so reading them is sound under that
    /// contract. Concurrent modification by a misbehaving application yields garbage
    /// bytes on the wire, as on a real RNIC.
    pub fn segments(&self) -> impl Iterator<Item = &[u8]> {
        // SAFETY: see above; every MemRef keeps its allocation alive.
        self.segs[..self.n as usize]
            .iter()
            .map(|m| unsafe { m.as_slice() })
    }

    /// Total bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes copied into one vector (tests, slow paths).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        for s in self.segments() {
            v.extend_from_slice(s);
        }
        v
    }
}

/// A packet for the driver to send: headers (BTH `pad_count` already set from the
/// payload length) and the payload. The driver adds IP/UDP and the ICRC.
#[derive(Clone, Debug)]
pub struct TxPacket {
    pub hdr: PacketHeaders,
    pub payload: Payload,
}

/// Builds the payload for `[off, off + len)` of the concatenation of `segs`.
/// `None` if the range exceeds the segments.
pub(crate) fn gather(segs: &[MemRef], mut off: usize, mut len: usize) -> Option<Payload> {
    let mut p = Payload::empty();
    for s in segs {
        if len == 0 {
            break;
        }
        if off >= s.len() {
            off -= s.len();
            continue;
        }
        let take = (s.len() - off).min(len);
        if !p.push(s.sub(off, take)?) {
            return None;
        }
        off = 0;
        len -= take;
    }
    (len == 0).then_some(p)
}

/// Writes `data` at `off` of the concatenation of `segs`; `false` (possibly after a
/// partial write) if it does not fit.
///
/// # Safety
/// As [`MemRef::write_at`]: nobody else accesses those bytes concurrently.
pub(crate) unsafe fn scatter(segs: &[MemRef], mut off: usize, mut data: &[u8]) -> bool {
    for s in segs {
        if data.is_empty() {
            break;
        }
        if off >= s.len() {
            off -= s.len();
            continue;
        }
        let take = (s.len() - off).min(data.len());
        // SAFETY: forwarded contract.
        if !unsafe { s.write_at(off, &data[..take]) } {
            return false;
        }
        off = 0;
        data = &data[take..];
    }
    data.is_empty()
}

//! The AF_XDP packet path of a soft device ([`PacketPath::AfXdp`]): the XDP program on
//! the interface ([`XdpDevice`], one per device) and one XSK per poll group, bound to
//! the interface queue of the poll group's index ([`XdpQueue`]). QP1 (the CM agent)
//! stays on its UDP socket: the program passes its MADs to the stack.
use std::net::IpAddr;

use super::bpf::{BpfError, XdpProgram};
use super::frame::{headers_len, write_headers, FrameEnds, MacAddr};
use super::neigh::{ifindex, local_mac, peer_mac, NeighError};
use super::xsk::{Xsk, XskConfig, XskError, MAX_FRAME_BYTES};

/// How a soft device sends and receives its RoCEv2 packets (not QP1's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PacketPath {
    /// UDP sockets (the default; runs anywhere, unprivileged).
    #[default]
    Udp,
    /// AF_XDP sockets on `interface`, the interface that holds the device's address
    /// (root only; the interface needs a receive queue per poll group; IPv4 only).
    AfXdp { interface: String },
}

/// Why the AF_XDP path could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    #[error(transparent)]
    Bpf(#[from] BpfError),
    #[error(transparent)]
    Xsk(#[from] XskError),
    #[error(transparent)]
    Neigh(#[from] NeighError),
}

/// The device's side: the interface, its MAC and the attached XDP program.
pub struct XdpDevice {
    pub iface: String,
    pub ifindex: u32,
    pub src_mac: MacAddr,
    prog: XdpProgram,
}

impl std::fmt::Debug for XdpDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpDevice")
            .field("iface", &self.iface)
            .field("native", &self.prog.native)
            .finish()
    }
}

impl XdpDevice {
    /// Attaches the XDP program to `iface` for `groups` poll groups.
    ///
    /// # Errors
    /// [`XdpError`]: no such interface, not root, XDP refused.
    pub fn open(iface: &str, groups: u32) -> Result<XdpDevice, XdpError> {
        let ix = ifindex(iface)?;
        let src_mac = local_mac(iface)?;
        let prog = XdpProgram::attach(ix, groups)?;
        Ok(XdpDevice {
            iface: iface.to_owned(),
            ifindex: ix,
            src_mac,
            prog,
        })
    }

    /// Opens poll group `queue`'s XSK on interface queue `queue` and puts it in the
    /// program's map.
    ///
    /// # Errors
    /// [`XdpError::Xsk`]: the interface has no such queue (the message names the fix).
    pub fn open_queue(&self, queue: u32) -> Result<XdpQueue, XdpError> {
        let xsk = Xsk::open(self.ifindex, queue, XskConfig::default())?;
        self.prog.insert(queue, xsk.fd())?;
        Ok(XdpQueue {
            xsk,
            scratch: vec![0; MAX_FRAME_BYTES],
            queue,
        })
    }

    /// Takes poll group `queue`'s XSK out of the map (its packets pass to the stack).
    pub fn close_queue(&self, queue: u32) {
        self.prog.remove(queue);
    }

    /// The MAC of `peer` on this interface.
    ///
    /// # Errors
    /// [`XdpError::Neigh`], naming the fix.
    pub fn peer_mac(&self, peer: IpAddr) -> Result<MacAddr, XdpError> {
        Ok(peer_mac(peer, &self.iface)?)
    }
}

/// A poll group's XSK and the buffer its frames are put together in.
pub struct XdpQueue {
    pub xsk: Xsk,
    scratch: Vec<u8>,
    /// The interface queue (= poll group index).
    pub queue: u32,
}

impl XdpQueue {
    /// Queues one frame to `ends` whose UDP payload is `parts` concatenated; false when
    /// the XSK has no room or the payload does not fit a frame (the caller counts a
    /// drop; RC retransmits).
    pub fn send_parts(&mut self, ends: &FrameEnds, parts: &[&[u8]]) -> bool {
        let hl = headers_len(ends.dst.is_ipv6());
        let mut at = hl;
        for p in parts {
            let Some(dst) = self.scratch.get_mut(at..at + p.len()) else {
                return false;
            };
            dst.copy_from_slice(p);
            at += p.len();
        }
        match write_headers(&mut self.scratch, ends, at - hl) {
            Ok(n) => self.xsk.send(&self.scratch[..n]),
            Err(_) => false,
        }
    }
}

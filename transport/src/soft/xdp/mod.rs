//! AF_XDP, a second packet path of the soft provider (issue 10, scope 3): RoCEv2
//! frames go between an interface queue and this process through an AF_XDP socket,
//! past the kernel's IP/UDP stack.
//!
//! - [`prog`]: the XDP program (UDP port 4791 to the queue's XSK, the rest to the
//!   stack), assembled here; [`bpf`]: loading it and its XSKMAP, attached through a BPF
//!   link that detaches on drop;
//! - [`ring`]: the shared rings' index arithmetic; [`xsk`]: the socket, its UMEM and
//!   rings;
//! - [`frame`]: the Ethernet/IP/UDP headers we write and parse; [`neigh`]: the MAC
//!   addresses they carry;
//! - [`path`]: the device option ([`PacketPath`]) and the pieces a device and its poll
//!   groups own.
//!
//! Everything that touches the kernel needs root (CAP_BPF, CAP_NET_ADMIN,
//! CAP_NET_RAW).
pub mod bpf;
pub mod frame;
pub mod neigh;
pub mod path;
pub mod prog;
pub mod ring;
pub mod xsk;

pub use path::{PacketPath, XdpDevice, XdpError, XdpQueue};

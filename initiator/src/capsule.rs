//! How one command's capsule is built (NVMe RDMA Transport 1.x §2, NVMe over Fabrics
//! 1.1 §2.3): which SGL the SQE carries, whether a memory window must be bound first,
//! and how many bytes of in-capsule data follow the SQE. Pure: no verbs calls, so each
//! case is unit tested.
use nvme::{SglDescriptor, SglError, Sqe, PSDT_SGL_MPTR_CONTIG};
use transport::verbs::AccessFlags;

/// Direction and length of a command's data, in the slot's data buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataDir {
    /// No data: the SQE carries the keyed null SGL (identifier 40h, length 0, key 0),
    /// as Linux sends.
    None,
    /// `len` bytes from host to controller (Write, Connect data, Dataset Management
    /// ranges): in-capsule when it fits the controller's in-capsule size, otherwise
    /// pulled by the target with RDMA READ.
    HostToController {
        /// Bytes, from the start of the slot's buffer.
        len: usize,
    },
    /// `len` bytes from controller to host (Read, Identify, Get Log Page): the target
    /// RDMA WRITEs them into the slot's buffer.
    ControllerToHost {
        /// Bytes, from the start of the slot's buffer.
        len: usize,
    },
}

impl DataDir {
    /// Bytes of data.
    pub fn len(&self) -> usize {
        match *self {
            DataDir::None => 0,
            DataDir::HostToController { len } | DataDir::ControllerToHost { len } => len,
        }
    }

    /// Whether no data moves.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A type 2 memory window bind to post before the capsule (IBTA Vol 1 §10.6.7.2.3):
/// `rkey` over exactly `[addr, addr + length)` with `access`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowBind {
    /// The fresh key (the window's previous key with the next 8-bit tag).
    pub rkey: u32,
    /// First byte (iova of the slot buffer).
    pub addr: u64,
    /// Bytes.
    pub length: u64,
    /// REMOTE_WRITE (the controller writes host memory) or REMOTE_READ.
    pub access: AccessFlags,
}

/// The result of [`build_capsule`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capsule {
    /// The SQE to send, with CID, PSDT 01b and SGL1 filled in.
    pub sqe: Sqe,
    /// The window to bind first, for a keyed SGL.
    pub bind: Option<WindowBind>,
    /// Bytes of in-capsule data to send after the SQE (0 = none).
    pub in_capsule_len: usize,
}

/// The key a keyed SGL carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataKey {
    /// A memory window bound first with this fresh key; the SGL asks for SEND with
    /// Invalidate of it (identifier 4Fh).
    Window(u32),
    /// The data region's own rkey: no bind, and no invalidation (identifier 40h), since
    /// the key must stay valid for the next commands.
    Region(u32),
}

/// Builds the capsule of command `cid`: `buf_addr` is the iova of the command's data
/// buffer, `in_capsule_max` the in-capsule data size this queue may use (0 on the
/// admin queue), `key` the key to grant if the data moves by RDMA.
///
/// Host-to-controller data up to `in_capsule_max` bytes: SGL Data Block / Offset
/// (identifier 01h) at offset 0. Other data: a Keyed SGL Data Block over the whole
/// transfer, with Invalidate (identifier 4Fh) of a window's key, so the target answers
/// with SEND with Invalidate, or without (40h) for the region's key. No data: the keyed
/// null descriptor.
///
/// # Errors
/// [`SglError::LengthTooLarge`] for a keyed length over 24 bits.
pub fn build_capsule(
    mut sqe: Sqe,
    cid: u16,
    data: DataDir,
    in_capsule_max: usize,
    buf_addr: u64,
    key: DataKey,
) -> Result<Capsule, SglError> {
    sqe.set_cid(cid);
    sqe.set_psdt(PSDT_SGL_MPTR_CONTIG);
    let (sgl, bind, in_capsule_len) = match data {
        _ if data.is_empty() => (SglDescriptor::keyed_null(), None, 0),
        DataDir::HostToController { len } if len <= in_capsule_max => {
            (SglDescriptor::inline_offset(0, len as u32), None, len)
        }
        DataDir::HostToController { len } | DataDir::ControllerToHost { len } => {
            let access = if matches!(data, DataDir::ControllerToHost { .. }) {
                AccessFlags::REMOTE_WRITE
            } else {
                AccessFlags::REMOTE_READ
            };
            let len32 = u32::try_from(len).map_err(|_| SglError::LengthTooLarge {
                len: len as u64,
                max: u64::from(u32::MAX),
            })?;
            let (rkey, invalidate) = match key {
                DataKey::Window(k) => (k, true),
                DataKey::Region(k) => (k, false),
            };
            let sgl = SglDescriptor::keyed(buf_addr, len32, rkey, invalidate)?;
            let bind = invalidate.then_some(WindowBind {
                rkey,
                addr: buf_addr,
                length: len as u64,
                access,
            });
            (sgl, bind, 0)
        }
        DataDir::None => (SglDescriptor::keyed_null(), None, 0),
    };
    sqe.set_sgl(sgl);
    Ok(Capsule {
        sqe,
        bind,
        in_capsule_len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADDR: u64 = 0x7f00_1234_5000;

    #[test]
    fn no_data_is_keyed_null() {
        let c = build_capsule(
            Sqe::keep_alive(0),
            5,
            DataDir::None,
            4096,
            ADDR,
            DataKey::Window(0x1234),
        )
        .unwrap();
        let b = c.sqe.to_array();
        // Keep Alive as in linux-nvme-rdma-errors.pcap frame 122: flags 40h, SGL all
        // zero but the identifier 40h.
        assert_eq!(b[0], 0x18);
        assert_eq!(b[1], 0x40);
        assert_eq!(&b[2..4], &5u16.to_le_bytes());
        assert_eq!(&b[24..39], &[0u8; 15]);
        assert_eq!(b[39], 0x40);
        assert_eq!((c.bind, c.in_capsule_len), (None, 0));
        // Zero-length transfers too.
        let z = build_capsule(
            Sqe::flush(0, 1),
            1,
            DataDir::ControllerToHost { len: 0 },
            0,
            ADDR,
            DataKey::Window(1),
        )
        .unwrap();
        assert_eq!(z.sqe.sgl(), SglDescriptor::keyed_null());
    }

    #[test]
    fn small_write_goes_in_capsule() {
        let c = build_capsule(
            Sqe::write(0, 1, 0, 7, false),
            3,
            DataDir::HostToController { len: 4096 },
            4096,
            ADDR,
            DataKey::Window(9),
        )
        .unwrap();
        let b = c.sqe.to_array();
        // Capture frame 322: SGL type 01h, address (offset) 0, length 4096.
        assert_eq!(&b[24..32], &[0u8; 8]);
        assert_eq!(&b[32..36], &4096u32.to_le_bytes());
        assert_eq!(b[39], 0x01);
        assert_eq!((c.bind, c.in_capsule_len), (None, 4096));
    }

    #[test]
    fn large_write_binds_for_remote_read() {
        let c = build_capsule(
            Sqe::write(0, 1, 0x200, 63, false),
            2,
            DataDir::HostToController { len: 32768 },
            4096,
            ADDR,
            DataKey::Window(0xABCD_EF02),
        )
        .unwrap();
        let b = c.sqe.to_array();
        assert_eq!(&b[24..32], &ADDR.to_le_bytes());
        assert_eq!(&b[32..35], &[0x00, 0x80, 0x00]);
        assert_eq!(&b[35..39], &0xABCD_EF02u32.to_le_bytes());
        assert_eq!(b[39], 0x4F);
        assert_eq!(
            c.bind,
            Some(WindowBind {
                rkey: 0xABCD_EF02,
                addr: ADDR,
                length: 32768,
                access: AccessFlags::REMOTE_READ
            })
        );
        assert_eq!(c.in_capsule_len, 0);
    }

    #[test]
    fn read_binds_for_remote_write_and_admin_never_inlines() {
        let c = build_capsule(
            Sqe::read(0, 1, 0, 0, false),
            0,
            DataDir::ControllerToHost { len: 512 },
            4096,
            ADDR,
            DataKey::Window(7),
        )
        .unwrap();
        assert_eq!(
            c.bind.map(|b| (b.access, b.length)),
            Some((AccessFlags::REMOTE_WRITE, 512))
        );
        assert_eq!(c.sqe.sgl().identifier(), 0x4F);
        // Admin Connect data: in_capsule_max 0 -> keyed, read by the target.
        let a = build_capsule(
            Sqe::keep_alive(0),
            0,
            DataDir::HostToController { len: 1024 },
            0,
            ADDR,
            DataKey::Window(7),
        )
        .unwrap();
        assert_eq!(a.bind.map(|b| b.access), Some(AccessFlags::REMOTE_READ));
        assert!(build_capsule(
            Sqe::keep_alive(0),
            0,
            DataDir::ControllerToHost { len: 1 << 24 },
            0,
            ADDR,
            DataKey::Window(7)
        )
        .is_err());
    }

    /// With the region's key there is nothing to bind and nothing to invalidate.
    #[test]
    fn region_key_is_keyed_without_invalidate() {
        let c = build_capsule(
            Sqe::read(0, 1, 0, 7, false),
            4,
            DataDir::ControllerToHost { len: 4096 },
            4096,
            ADDR,
            DataKey::Region(0x55),
        )
        .unwrap();
        let b = c.sqe.to_array();
        assert_eq!(&b[35..39], &0x55u32.to_le_bytes());
        assert_eq!(b[39], 0x40);
        assert_eq!(c.bind, None);
    }
}

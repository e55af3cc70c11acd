//! `nvmf connect --ublk`, sans-IO: the shape of a ublk device (its options, what the
//! controller offers, whether the kernel has the driver) and the mapping of one ublk
//! request (its `op_flags`, `start_sector` and `nr_sectors` from the driver's
//! `ublksrv_io_desc`, in 512-byte sectors) to the NVMe command that serves it, in the
//! namespace's logical blocks (NVM Command Set 1.x §3.3), or the errno the request is
//! answered with. No kernel, no controller, no libublk: unit-tested here, built
//! without the `ublk` feature too, used by `super::ublk` (the libublk glue, feature
//! `ublk`).
//!
//! | ublk op (`UBLK_IO_OP_*`) | NVMe command |
//! | --- | --- |
//! | READ (0) | Read, SLBA/NLB |
//! | WRITE (1) | Write, SLBA/NLB, FUA from `UBLK_IO_F_FUA` |
//! | FLUSH (2) | Flush |
//! | DISCARD (3) | Dataset Management, Attribute Deallocate, one range |
//! | WRITE_ZEROES (5) | Write Zeroes (split into 65536-block commands by the library) |
//! | anything else | `-EOPNOTSUPP` |
//!
//! A request whose start or length is not a whole number of logical blocks is
//! answered `-EINVAL`; one that ends past the namespace (NSZE) `-EIO` (what the
//! block layer answers for I/O beyond the end of a device); an empty read or write
//! `-EINVAL`.

/// The driver's sector: ublk counts `start_sector` and `nr_sectors` in 512 bytes,
/// whatever the logical block size.
pub const SECTOR_BYTES: u64 = 512;

/// `UBLK_IO_OP_READ` (include/uapi/linux/ublk_cmd.h).
pub const OP_READ: u8 = 0;
/// `UBLK_IO_OP_WRITE`.
pub const OP_WRITE: u8 = 1;
/// `UBLK_IO_OP_FLUSH`.
pub const OP_FLUSH: u8 = 2;
/// `UBLK_IO_OP_DISCARD`.
pub const OP_DISCARD: u8 = 3;
/// `UBLK_IO_OP_WRITE_ZEROES`.
pub const OP_WRITE_ZEROES: u8 = 5;
/// `UBLK_IO_F_FUA`: a bit of `op_flags` (Force Unit Access on a write).
pub const IO_F_FUA: u32 = 1 << 13;

/// A namespace's shape, from Identify Namespace: the LBA format's data size and NSZE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Logical block size in bytes (a power of two, >= 512).
    pub lba_size: u32,
    /// Size in logical blocks (NSZE).
    pub nlb: u64,
}

impl Geometry {
    /// The capacity in bytes (`nlb * lba_size`).
    pub fn bytes(&self) -> u64 {
        self.nlb.saturating_mul(u64::from(self.lba_size))
    }

    /// `log2(lba_size)`: the ublk parameters' `logical_bs_shift`.
    pub fn lba_shift(&self) -> u8 {
        self.lba_size.trailing_zeros() as u8
    }
}

/// The NVMe command that serves one ublk request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockOp {
    /// Read `nlb` blocks (1-based count) from `slba` into the request's buffer.
    Read {
        /// Starting LBA.
        slba: u64,
        /// Number of logical blocks (not 0's based).
        nlb: u32,
    },
    /// Write `nlb` blocks from the request's buffer at `slba`.
    Write {
        /// Starting LBA.
        slba: u64,
        /// Number of logical blocks (not 0's based).
        nlb: u32,
        /// Force Unit Access.
        fua: bool,
    },
    /// Flush (the volatile write cache).
    Flush,
    /// Dataset Management, Attribute Deallocate, of one range.
    Deallocate {
        /// Starting LBA.
        slba: u64,
        /// Number of logical blocks.
        nlb: u32,
    },
    /// Write Zeroes of `nlb` blocks.
    WriteZeroes {
        /// Starting LBA.
        slba: u64,
        /// Number of logical blocks.
        nlb: u64,
    },
}

impl BlockOp {
    /// Bytes of data the request moves through its buffer (read, write), else 0.
    pub fn data_bytes(&self, lba_size: u32) -> usize {
        match *self {
            BlockOp::Read { nlb, .. } | BlockOp::Write { nlb, .. } => {
                nlb as usize * lba_size as usize
            }
            _ => 0,
        }
    }

    /// The request's answer on success: the bytes done for a read or write (what the
    /// ublk driver expects), 0 otherwise.
    pub fn success_result(&self, lba_size: u32) -> i32 {
        i32::try_from(self.data_bytes(lba_size)).unwrap_or(i32::MAX)
    }
}

/// Why a ublk request is not sent to the controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    /// The start or length (bytes) is not a multiple of the logical block size.
    #[error("bytes {start}..+{len} are not whole {lba_size}-byte logical blocks")]
    Unaligned {
        /// Start in bytes.
        start: u64,
        /// Length in bytes.
        len: u64,
        /// The logical block size.
        lba_size: u32,
    },
    /// The request ends past the namespace.
    #[error("blocks {slba}..+{nlb} end past the namespace's {size} blocks")]
    PastEnd {
        /// Starting LBA.
        slba: u64,
        /// Number of blocks.
        nlb: u64,
        /// NSZE.
        size: u64,
    },
    /// A read or write of no bytes.
    #[error("a read or write of 0 bytes")]
    Empty,
    /// A read or write larger than one request may be (`u32` blocks).
    #[error("{0} blocks in one read or write")]
    TooLarge(u64),
    /// An op this device does not serve (zoned ops, WRITE_SAME).
    #[error("ublk op {0} is not served")]
    Unsupported(u8),
}

impl MapError {
    /// The negative errno the ublk request is completed with.
    pub fn errno(&self) -> i32 {
        match self {
            MapError::Unaligned { .. } | MapError::Empty | MapError::TooLarge(_) => -libc::EINVAL,
            MapError::PastEnd { .. } => -libc::EIO,
            MapError::Unsupported(_) => -libc::EOPNOTSUPP,
        }
    }
}

/// Maps one ublk request (`op_flags`: op in bits 0-7, `UBLK_IO_F_*` above; start and
/// length in 512-byte sectors) onto `geometry`. Errors: [`MapError`] (see the module
/// docs for the errno of each).
pub fn map(
    geometry: Geometry,
    op_flags: u32,
    start_sector: u64,
    nr_sectors: u32,
) -> Result<BlockOp, MapError> {
    let op = (op_flags & 0xff) as u8;
    if op == OP_FLUSH {
        return Ok(BlockOp::Flush);
    }
    if !matches!(op, OP_READ | OP_WRITE | OP_DISCARD | OP_WRITE_ZEROES) {
        return Err(MapError::Unsupported(op));
    }
    let lba = u64::from(geometry.lba_size);
    let start = start_sector.saturating_mul(SECTOR_BYTES);
    let len = u64::from(nr_sectors) * SECTOR_BYTES;
    if lba == 0 || !start.is_multiple_of(lba) || !len.is_multiple_of(lba) {
        return Err(MapError::Unaligned {
            start,
            len,
            lba_size: geometry.lba_size,
        });
    }
    let slba = start / lba;
    let nlb = len / lba;
    if nlb == 0 {
        return Err(MapError::Empty);
    }
    if slba.checked_add(nlb).is_none_or(|end| end > geometry.nlb) {
        return Err(MapError::PastEnd {
            slba,
            nlb,
            size: geometry.nlb,
        });
    }
    let nlb32 = u32::try_from(nlb).map_err(|_| MapError::TooLarge(nlb));
    Ok(match op {
        OP_READ => BlockOp::Read { slba, nlb: nlb32? },
        OP_WRITE => BlockOp::Write {
            slba,
            nlb: nlb32?,
            fua: op_flags & IO_F_FUA != 0,
        },
        OP_DISCARD => BlockOp::Deallocate { slba, nlb: nlb32? },
        _ => BlockOp::WriteZeroes { slba, nlb },
    })
}

/// The ublk driver's control node.
pub const CONTROL: &str = "/dev/ublk-control";
/// Default number of ublk queues per device (`--ublk-queues`).
pub const DEFAULT_QUEUES: u16 = 1;
/// Default depth of each ublk queue (`--ublk-depth`): requests in flight per queue.
pub const DEFAULT_DEPTH: u16 = 64;
/// The driver's largest queue depth (`UBLK_MAX_QUEUE_DEPTH`).
pub const MAX_DEPTH: u16 = 4096;
/// The driver's largest number of queues (`UBLK_MAX_NR_QUEUES`).
pub const MAX_QUEUES: u16 = 4096;

/// `--ublk-queues` and `--ublk-depth`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// ublk queues per device (1..=4096).
    pub queues: u16,
    /// Requests in flight per queue (1..=4096).
    pub depth: u16,
}

impl Options {
    /// Checks the ranges the driver accepts. Errors: a message naming the flag.
    pub fn check(&self) -> Result<(), String> {
        if self.queues == 0 || self.queues > MAX_QUEUES {
            return Err(format!(
                "--ublk-queues {}: give 1..={MAX_QUEUES} (the ublk driver's limit)",
                self.queues
            ));
        }
        if self.depth == 0 || self.depth > MAX_DEPTH {
            return Err(format!(
                "--ublk-depth {}: give 1..={MAX_DEPTH} (the ublk driver's limit)",
                self.depth
            ));
        }
        Ok(())
    }
}

/// What the controller offers beyond read/write/flush (Identify Controller).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Features {
    /// ONCS bit 2: Dataset Management (discard as Deallocate).
    pub discard: bool,
    /// ONCS bit 3: Write Zeroes.
    pub write_zeroes: bool,
    /// VWC bit 0: a volatile write cache (the kernel then sends FLUSH and FUA).
    pub volatile_cache: bool,
}

impl Features {
    /// From Identify Controller's ONCS and VWC (NVMe Base 2.x §5.1.13.2.1).
    pub fn from_identify(oncs: u16, vwc: u8) -> Self {
        Features {
            discard: oncs & (1 << 2) != 0,
            write_zeroes: oncs & (1 << 3) != 0,
            volatile_cache: vwc & 1 != 0,
        }
    }
}

/// Whether this kernel can give us ublk devices: `/dev/ublk-control` exists and opens
/// read-write. Errors: a message naming the cause and the fix (load `ublk_drv`; a
/// kernel >= 6.0 with `CONFIG_BLK_DEV_UBLK`; run as root).
pub fn check_kernel() -> Result<(), String> {
    check_control(std::path::Path::new(CONTROL))
}

fn check_control(path: &std::path::Path) -> Result<(), String> {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
            "--ublk: no {}: this kernel has no ublk driver loaded; load it with \
             `modprobe ublk_drv` (it needs Linux >= 6.0 built with CONFIG_BLK_DEV_UBLK=m \
             or =y), or connect without --ublk",
            path.display()
        )),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM)) => {
            Err(format!(
                "--ublk: {}: {e}: creating ublk devices needs root (CAP_SYS_ADMIN): run \
                 `nvmf connect --ublk` as root",
                path.display()
            ))
        }
        Err(e) => Err(format!("--ublk: opening {}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G512: Geometry = Geometry {
        lba_size: 512,
        nlb: 1 << 20,
    };
    const G4K: Geometry = Geometry {
        lba_size: 4096,
        nlb: 1000,
    };

    #[test]
    fn read_write_in_512_byte_blocks_are_sectors() {
        assert_eq!(
            map(G512, u32::from(OP_READ), 8, 16),
            Ok(BlockOp::Read { slba: 8, nlb: 16 })
        );
        assert_eq!(
            map(G512, u32::from(OP_WRITE), 0, 1),
            Ok(BlockOp::Write {
                slba: 0,
                nlb: 1,
                fua: false
            })
        );
        assert_eq!(BlockOp::Read { slba: 8, nlb: 16 }.success_result(512), 8192);
    }

    #[test]
    fn four_k_blocks_divide_sectors_by_eight() {
        // 4 KiB blocks: sector 8 is LBA 1, 16 sectors are 2 blocks.
        assert_eq!(
            map(G4K, u32::from(OP_READ), 8, 16),
            Ok(BlockOp::Read { slba: 1, nlb: 2 })
        );
        assert_eq!(
            map(G4K, u32::from(OP_WRITE) | IO_F_FUA, 7992, 8),
            Ok(BlockOp::Write {
                slba: 999,
                nlb: 1,
                fua: true
            })
        );
        assert_eq!(
            BlockOp::Write {
                slba: 0,
                nlb: 2,
                fua: false
            }
            .data_bytes(4096),
            8192
        );
    }

    #[test]
    fn unaligned_requests_are_einval() {
        let e = map(G4K, u32::from(OP_READ), 4, 8).unwrap_err();
        assert!(matches!(
            e,
            MapError::Unaligned {
                start: 2048,
                len: 4096,
                lba_size: 4096
            }
        ));
        assert_eq!(e.errno(), -libc::EINVAL);
        let e = map(G4K, u32::from(OP_WRITE), 8, 4).unwrap_err();
        assert_eq!(e.errno(), -libc::EINVAL);
        assert_eq!(
            map(G4K, u32::from(OP_DISCARD), 1, 8).unwrap_err().errno(),
            -libc::EINVAL
        );
        assert_eq!(map(G512, u32::from(OP_READ), 0, 0), Err(MapError::Empty));
    }

    #[test]
    fn past_end_requests_are_eio() {
        // The last block is 999: 999 + 1 fits, 999 + 2 does not.
        assert!(map(G4K, u32::from(OP_READ), 999 * 8, 8).is_ok());
        let e = map(G4K, u32::from(OP_READ), 999 * 8, 16).unwrap_err();
        assert_eq!(
            e,
            MapError::PastEnd {
                slba: 999,
                nlb: 2,
                size: 1000
            }
        );
        assert_eq!(e.errno(), -libc::EIO);
        assert_eq!(
            map(G4K, u32::from(OP_WRITE_ZEROES), 1000 * 8, 8)
                .unwrap_err()
                .errno(),
            -libc::EIO
        );
        // A start so large that start * 512 overflows is past the end, not a wrap.
        assert!(map(G512, u32::from(OP_READ), u64::MAX / 2, 1).is_err());
    }

    #[test]
    fn flush_discard_write_zeroes() {
        assert_eq!(map(G4K, u32::from(OP_FLUSH), 0, 0), Ok(BlockOp::Flush));
        assert_eq!(
            map(G4K, u32::from(OP_DISCARD), 80, 800),
            Ok(BlockOp::Deallocate { slba: 10, nlb: 100 })
        );
        assert_eq!(
            map(G512, u32::from(OP_WRITE_ZEROES), 100, (1 << 20) - 100),
            Ok(BlockOp::WriteZeroes {
                slba: 100,
                nlb: (1 << 20) - 100
            })
        );
        assert_eq!(BlockOp::Flush.success_result(4096), 0);
    }

    #[test]
    fn other_ops_are_eopnotsupp() {
        for op in [4u32, 10, 13, 18, 0xff] {
            assert_eq!(map(G512, op, 0, 8).unwrap_err().errno(), -libc::EOPNOTSUPP);
        }
    }

    #[test]
    fn geometry_shift_and_bytes() {
        assert_eq!(G4K.lba_shift(), 12);
        assert_eq!(G512.lba_shift(), 9);
        assert_eq!(G4K.bytes(), 4096 * 1000);
    }

    #[test]
    fn missing_control_node_names_modprobe_and_the_kernel() {
        let dir = tempfile::tempdir().unwrap();
        let e = check_control(&dir.path().join("ublk-control")).unwrap_err();
        assert!(e.contains("modprobe ublk_drv"), "{e}");
        assert!(e.contains("Linux >= 6.0"), "{e}");
        assert!(e.contains("CONFIG_BLK_DEV_UBLK"), "{e}");
    }

    #[test]
    fn this_kernel_is_answered_without_panic() {
        // Where the driver is loaded and we are root this is Ok; anywhere else the
        // message names the cause.
        if let Err(e) = check_kernel() {
            assert!(e.contains("modprobe ublk_drv") || e.contains("root"), "{e}");
        }
    }

    #[test]
    fn features_from_oncs_and_vwc() {
        let f = Features::from_identify(0b1100, 1);
        assert!(f.discard && f.write_zeroes && f.volatile_cache);
        let f = Features::from_identify(0b0001, 0);
        assert!(!f.discard && !f.write_zeroes && !f.volatile_cache);
    }

    #[test]
    fn option_ranges() {
        assert!(Options {
            queues: 1,
            depth: 64
        }
        .check()
        .is_ok());
        assert!(Options {
            queues: 0,
            depth: 64
        }
        .check()
        .unwrap_err()
        .contains("--ublk-queues"));
        assert!(Options {
            queues: 1,
            depth: 5000
        }
        .check()
        .unwrap_err()
        .contains("--ublk-depth"));
    }
}

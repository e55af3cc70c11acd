//! NVM command set I/O commands (NVM Command Set 1.x §3.3): decoding and checking a
//! Read, Write, Compare, Flush, Write Zeroes or Dataset Management SQE against its namespace,
//! before any data moves, and the status (and log line) for one the file system
//! failed. The poll group turns the commands into io_uring operations.
//!
//! Durability, as the poll group carries it out: a Write completes once the page cache
//! holds its data, unless it is a write-through (FUA, or the controller's volatile
//! write cache turned off, [`crate::controller::Controller::write_through`]); then it
//! is written with `RWF_DSYNC`, so it completes only once durable. A write-through
//! Write Zeroes is followed by `fdatasync` before it completes. Flush is `fdatasync`.
use std::time::Instant;

use nvme::status::{GenericStatus, MediaStatus, Status};
use nvme::{NvmOpcode, Sqe};

use crate::admin::{CSUPP, LBCC};
use crate::subsystem::NamespaceEntry;

/// A decoded, checked I/O command. Byte offsets and lengths are within the namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoCommand {
    /// Read `len` bytes at byte `offset`.
    Read { offset: u64, len: u32 },
    /// Write `len` bytes at byte `offset`; `fua` makes it durable before completion.
    Write { offset: u64, len: u32, fua: bool },
    /// Compare the `len` bytes at byte `offset` with the command's data (NVM Command
    /// Set 1.x §3.3.1): Compare Failure when they differ ([`compare_status`]).
    Compare { offset: u64, len: u32 },
    /// Make completed writes durable (fdatasync).
    Flush,
    /// Zero `len` bytes at byte `offset`; `fua` makes it durable before completion.
    WriteZeroes { offset: u64, len: u64, fua: bool },
    /// Dataset Management with `ranges` 16-byte range entries in the data;
    /// `deallocate` is the AD attribute.
    DatasetManagement { ranges: u32, deallocate: bool },
}

impl IoCommand {
    /// Bytes the host sends (host-to-controller data) for this command.
    pub fn host_to_controller_len(&self) -> u32 {
        match *self {
            IoCommand::Write { len, .. } | IoCommand::Compare { len, .. } => len,
            IoCommand::DatasetManagement { ranges, .. } => ranges * 16,
            _ => 0,
        }
    }
    /// Bytes the controller returns (controller-to-host data).
    pub fn controller_to_host_len(&self) -> u32 {
        match *self {
            IoCommand::Read { len, .. } => len,
            _ => 0,
        }
    }

    /// The command's name in log lines ("write", "flush", ...).
    pub fn name(&self) -> &'static str {
        match self {
            IoCommand::Read { .. } => "read",
            IoCommand::Write { .. } => "write",
            IoCommand::Compare { .. } => "compare",
            IoCommand::Flush => "flush",
            IoCommand::WriteZeroes { .. } => "write zeroes",
            IoCommand::DatasetManagement { .. } => "deallocate",
        }
    }

    /// The byte range `(offset, len)` the command touches, when it names one.
    pub fn byte_range(&self) -> Option<(u64, u64)> {
        match *self {
            IoCommand::Read { offset, len }
            | IoCommand::Write { offset, len, .. }
            | IoCommand::Compare { offset, len } => Some((offset, u64::from(len))),
            IoCommand::WriteZeroes { offset, len, .. } => Some((offset, len)),
            _ => None,
        }
    }
}

/// The NVM commands the target serves with their Commands Supported and Effects log
/// entries (NVMe Base 2.x §5.16.1.6): [`decode`] and this list are the one place an
/// I/O command is added.
pub const COMMAND_EFFECTS: &[(NvmOpcode, u32)] = &[
    (NvmOpcode::Flush, CSUPP),
    (NvmOpcode::Write, CSUPP | LBCC),
    (NvmOpcode::Read, CSUPP),
    (NvmOpcode::Compare, CSUPP),
    (NvmOpcode::WriteZeroes, CSUPP | LBCC),
    (NvmOpcode::DatasetManagement, CSUPP | LBCC),
];

/// The status of a Compare whose command data is `host` and whose logical blocks read
/// `media` (NVM Command Set 1.x §3.3.1): success when equal, else Compare Failure
/// (SCT 2h, SC 85h; no DNR: a later Compare may match).
pub fn compare_status(host: &[u8], media: &[u8]) -> Status {
    if host == media {
        Status::SUCCESS
    } else {
        Status::media(MediaStatus::CompareFailure)
    }
}

/// The status for an I/O command the file system failed with `errno` (positive), as
/// Linux nvmet's `errno_to_nvme_status` maps it (drivers/nvme/target/core.c, Linux
/// 6.12; used by io-cmd-file.c for reads, writes, flush, Write Zeroes and Deallocate):
///
/// | errno | status |
/// |---|---|
/// | `ENOSPC` | Capacity Exceeded (generic 81h), DNR |
/// | `EREMOTEIO` | LBA Out of Range (generic 80h), DNR |
/// | `EOPNOTSUPP` | Invalid Command Opcode (generic 01h), DNR |
/// | `ENODATA` | Access Denied (media and data integrity 86h) |
/// | `EIO`, anything else | Internal Error (generic 06h), DNR |
pub fn errno_status(errno: i32) -> Status {
    match errno {
        libc::ENOSPC => generic(GenericStatus::CapacityExceeded).with_dnr(),
        libc::EREMOTEIO => generic(GenericStatus::LbaOutOfRange).with_dnr(),
        libc::EOPNOTSUPP => generic(GenericStatus::InvalidOpcode).with_dnr(),
        libc::ENODATA => Status::media(MediaStatus::AccessDenied),
        _ => generic(GenericStatus::InternalError).with_dnr(),
    }
}

/// What an operator can do about `errno` on a namespace file, for the log line.
fn errno_hint(errno: i32) -> &'static str {
    match errno {
        libc::ENOSPC | libc::EDQUOT => {
            "the file system holding the (sparse) namespace file is full: free space on it, \
             or move the file to a larger file system"
        }
        libc::EIO => {
            "the storage under the namespace file reported an I/O error: see the kernel log (dmesg)"
        }
        libc::EROFS => {
            "the file system holding the namespace file is read-only: remount it read-write"
        }
        libc::EFBIG => "the file size limit (ulimit -f) is below the namespace size: raise it",
        _ => "",
    }
}

/// Logs (at `warn`) an I/O command `cmd` on namespace `ns` of subsystem `subnqn` that
/// the file system failed with `errno`, answered with `status`: the line names the
/// subsystem NQN, the NSID, the file, the byte range, the error, the status and what
/// to do. Rate-limited per namespace (see [`crate::backend::Backend::error_log_due`]):
/// the first failure, then at most one line per interval with the number not logged.
pub fn log_io_error(
    ns: &NamespaceEntry,
    subnqn: &str,
    cmd: &IoCommand,
    errno: i32,
    status: Status,
    now: Instant,
) {
    let Some(suppressed) = ns.ns.error_log_due(now) else {
        return;
    };
    let range = cmd
        .byte_range()
        .map(|(o, l)| format!(" of {l} bytes at byte {o}"))
        .unwrap_or_default();
    let hint = errno_hint(errno);
    let hint = if hint.is_empty() {
        String::new()
    } else {
        format!("; {hint}")
    };
    let more = if suppressed > 0 {
        format!(" ({suppressed} more I/O errors on this namespace were not logged)")
    } else {
        String::new()
    };
    tracing::warn!(
        subnqn,
        nsid = ns.nsid,
        path = %ns.ns.path().display(),
        errno,
        "namespace {} of {subnqn} ({}): {}{range} failed: {}; answered {}{hint}{more}",
        ns.nsid,
        ns.ns.path().display(),
        cmd.name(),
        std::io::Error::from_raw_os_error(errno),
        status.name().unwrap_or("an error status"),
    );
}

fn generic(code: GenericStatus) -> Status {
    Status::generic(code)
}

/// Decodes `sqe` for a namespace of `nlb` blocks of `block_size` bytes, with a
/// maximum data transfer of `mdts_bytes`.
///
/// Errors: Invalid Command Opcode for opcodes outside the NVM set we serve; LBA Out
/// of Range (with DNR) when `slba + nlb` passes the end; Invalid Field when a transfer
/// exceeds MDTS.
pub fn decode(sqe: &Sqe, nlb: u64, block_size: u32, mdts_bytes: u32) -> Result<IoCommand, Status> {
    let Some(op) = NvmOpcode::from_value(sqe.opcode()) else {
        return Err(generic(GenericStatus::InvalidOpcode).with_dnr());
    };
    let range = |count: u64| -> Result<(u64, u64), Status> {
        let slba = sqe.slba();
        let end = slba
            .checked_add(count)
            .ok_or(generic(GenericStatus::LbaOutOfRange).with_dnr())?;
        if end > nlb {
            return Err(generic(GenericStatus::LbaOutOfRange).with_dnr());
        }
        Ok((slba * block_size as u64, count * block_size as u64))
    };
    match op {
        NvmOpcode::Read | NvmOpcode::Write | NvmOpcode::Compare => {
            let (offset, len) = range(sqe.nlb() as u64)?;
            if len > mdts_bytes as u64 {
                return Err(generic(GenericStatus::InvalidField).with_dnr());
            }
            let len = len as u32;
            Ok(match op {
                NvmOpcode::Read => IoCommand::Read { offset, len },
                NvmOpcode::Compare => IoCommand::Compare { offset, len },
                _ => IoCommand::Write {
                    offset,
                    len,
                    fua: sqe.fua(),
                },
            })
        }
        NvmOpcode::Flush => Ok(IoCommand::Flush),
        NvmOpcode::WriteZeroes => {
            let (offset, len) = range(sqe.nlb() as u64)?;
            Ok(IoCommand::WriteZeroes {
                offset,
                len,
                fua: sqe.fua(),
            })
        }
        NvmOpcode::DatasetManagement => Ok(IoCommand::DatasetManagement {
            ranges: sqe.dsm_nr_0based() as u32 + 1,
            deallocate: sqe.dsm_deallocate_attr(),
        }),
    }
}

/// One Dataset Management range (NVM Command Set §3.3.3, 16 bytes): context
/// attributes (u32), length in logical blocks (u32), starting LBA (u64), little endian.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DsmRange {
    pub nlb: u32,
    pub slba: u64,
}

/// Parses `ranges` DSM range entries from `data`; checks each against `nlb` blocks.
pub fn parse_dsm_ranges(data: &[u8], ranges: u32, nlb: u64) -> Result<Vec<DsmRange>, Status> {
    let need = ranges as usize * 16;
    if data.len() < need {
        return Err(generic(GenericStatus::DataSglLengthInvalid).with_dnr());
    }
    let mut out = Vec::with_capacity(ranges as usize);
    for c in data[..need].chunks_exact(16) {
        let len = u32::from_le_bytes([c[4], c[5], c[6], c[7]]);
        let slba = u64::from_le_bytes([c[8], c[9], c[10], c[11], c[12], c[13], c[14], c[15]]);
        let end = slba.checked_add(len as u64);
        if end.is_none_or(|e| e > nlb) {
            return Err(generic(GenericStatus::LbaOutOfRange).with_dnr());
        }
        out.push(DsmRange { nlb: len, slba });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_past_end_is_lba_out_of_range() {
        let sqe = Sqe::read(1, 1, 100, 7, false);
        assert_eq!(
            decode(&sqe, 104, 512, 1 << 20),
            Err(generic(GenericStatus::LbaOutOfRange).with_dnr())
        );
        let sqe = Sqe::read(1, 1, 96, 7, false);
        assert_eq!(
            decode(&sqe, 104, 512, 1 << 20),
            Ok(IoCommand::Read {
                offset: 96 * 512,
                len: 4096
            })
        );
    }

    #[test]
    fn slba_overflow_is_refused() {
        let sqe = Sqe::write(1, 1, u64::MAX - 2, 7, false);
        assert!(decode(&sqe, u64::MAX, 512, 1 << 20).is_err());
    }

    #[test]
    fn transfer_over_mdts_is_invalid_field() {
        let sqe = Sqe::read(1, 1, 0, 0xFFFF, false); // 65536 blocks x 512 = 32 MiB
        assert_eq!(
            decode(&sqe, 1 << 30, 512, 1 << 20),
            Err(generic(GenericStatus::InvalidField).with_dnr())
        );
    }

    #[test]
    fn errnos_map_as_nvmet() {
        let field = |e| errno_status(e).to_field();
        // Generic (SCT 0) Capacity Exceeded 81h with DNR: (0x81 << 1) | (1 << 15).
        assert_eq!(field(libc::ENOSPC), 0x8102);
        assert_eq!(
            errno_status(libc::ENOSPC),
            generic(GenericStatus::CapacityExceeded).with_dnr()
        );
        assert_eq!(
            errno_status(libc::EREMOTEIO),
            generic(GenericStatus::LbaOutOfRange).with_dnr()
        );
        assert_eq!(
            errno_status(libc::EOPNOTSUPP),
            generic(GenericStatus::InvalidOpcode).with_dnr()
        );
        // Media and data integrity (SCT 2) Access Denied 86h, no DNR.
        assert_eq!(field(libc::ENODATA), (2 << 9) | (0x86 << 1));
        for e in [libc::EIO, libc::EINVAL, libc::EFAULT, libc::EBADF] {
            assert_eq!(
                errno_status(e),
                generic(GenericStatus::InternalError).with_dnr(),
                "errno {e}"
            );
        }
    }

    #[test]
    fn write_zeroes_carries_fua() {
        let mut sqe = Sqe::write_zeroes(1, 1, 8, 7, false);
        assert_eq!(
            decode(&sqe, 100, 512, 1 << 20),
            Ok(IoCommand::WriteZeroes {
                offset: 8 * 512,
                len: 8 * 512,
                fua: false
            })
        );
        sqe.set_cdw12(sqe.cdw12() | 1 << 30);
        assert!(matches!(
            decode(&sqe, 100, 512, 1 << 20),
            Ok(IoCommand::WriteZeroes { fua: true, .. })
        ));
    }

    #[test]
    fn compare_is_decoded_and_judged() {
        let sqe = Sqe::compare(1, 1, 8, 7);
        let cmd = decode(&sqe, 100, 512, 1 << 20).unwrap();
        assert_eq!(
            cmd,
            IoCommand::Compare {
                offset: 8 * 512,
                len: 4096
            }
        );
        assert_eq!(
            (cmd.host_to_controller_len(), cmd.controller_to_host_len()),
            (4096, 0)
        );
        assert!(decode(&Sqe::compare(1, 1, 96, 7), 100, 512, 1 << 20).is_err());
        assert_eq!(compare_status(b"abc", b"abc"), Status::SUCCESS);
        let miss = compare_status(b"abc", b"abd");
        assert_eq!(
            miss.to_field(),
            (2 << 9) | (0x85 << 1),
            "SCT 2h, SC 85h, no DNR"
        );
    }

    #[test]
    fn unknown_opcode() {
        let mut sqe = Sqe::flush(1, 1);
        sqe.set_opcode(0x7E);
        assert_eq!(
            decode(&sqe, 10, 512, 4096),
            Err(generic(GenericStatus::InvalidOpcode).with_dnr())
        );
    }

    #[test]
    fn dsm_ranges_are_checked() {
        let mut d = vec![0u8; 32];
        d[4..8].copy_from_slice(&8u32.to_le_bytes());
        d[8..16].copy_from_slice(&16u64.to_le_bytes());
        d[20..24].copy_from_slice(&8u32.to_le_bytes());
        d[24..32].copy_from_slice(&100u64.to_le_bytes());
        assert_eq!(
            parse_dsm_ranges(&d, 2, 200).unwrap()[1],
            DsmRange { nlb: 8, slba: 100 }
        );
        assert!(parse_dsm_ranges(&d, 2, 104).is_err());
        assert!(parse_dsm_ranges(&d[..16], 2, 200).is_err());
    }
}

//! NVM command set I/O commands (NVM Command Set 1.x §3.3): decoding and checking a
//! Read, Write, Flush, Write Zeroes or Dataset Management SQE against its namespace,
//! before any data moves. The poll group turns the result into io_uring operations.
use nvme::status::{GenericStatus, Status};
use nvme::{NvmOpcode, Sqe};

/// A decoded, checked I/O command. Byte offsets and lengths are within the namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoCommand {
    /// Read `len` bytes at byte `offset`.
    Read { offset: u64, len: u32 },
    /// Write `len` bytes at byte `offset`; `fua` makes it durable before completion.
    Write { offset: u64, len: u32, fua: bool },
    /// Make completed writes durable (fdatasync).
    Flush,
    /// Zero `len` bytes at byte `offset`.
    WriteZeroes { offset: u64, len: u64 },
    /// Dataset Management with `ranges` 16-byte range entries in the data;
    /// `deallocate` is the AD attribute.
    DatasetManagement { ranges: u32, deallocate: bool },
}

impl IoCommand {
    /// Bytes the host sends (host-to-controller data) for this command.
    pub fn host_to_controller_len(&self) -> u32 {
        match *self {
            IoCommand::Write { len, .. } => len,
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
        NvmOpcode::Read | NvmOpcode::Write => {
            let (offset, len) = range(sqe.nlb() as u64)?;
            if len > mdts_bytes as u64 {
                return Err(generic(GenericStatus::InvalidField).with_dnr());
            }
            let len = len as u32;
            Ok(if op == NvmOpcode::Read {
                IoCommand::Read { offset, len }
            } else {
                IoCommand::Write {
                    offset,
                    len,
                    fua: sqe.fua(),
                }
            })
        }
        NvmOpcode::Flush => Ok(IoCommand::Flush),
        NvmOpcode::WriteZeroes => {
            let (offset, len) = range(sqe.nlb() as u64)?;
            Ok(IoCommand::WriteZeroes { offset, len })
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

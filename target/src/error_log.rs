//! A controller's Error Information log (NVMe Base 2.x §5.16.1.2, log page 01h): an
//! entry for every command of the controller that completed with an error status,
//! the newest first, [`ERROR_LOG_SLOTS`] kept (nvmet's `NVMET_ERROR_LOG_SLOTS`;
//! Identify Controller ELPE = slots - 1). Entries carry an increasing Error Count (the
//! SMART log's Number of Error Information Log Entries is the last one), the queue,
//! the CID, the status, where in the command the error is when it is known, the LBA of
//! an I/O command and the NSID. Unlike nvmet, every failed command gets an entry (nvmet
//! logs only those whose failing field it names); the CQE's More bit stays clear.
use nvme::log::ErrorLogEntry;
use nvme::status::{GenericStatus, Status};
use nvme::{NvmOpcode, Sqe};
use zerocopy::byteorder::little_endian::{U16, U32, U64};
use zerocopy::IntoBytes;

/// Entries kept per controller.
pub const ERROR_LOG_SLOTS: usize = 128;

/// Parameter Error Location when the failing field is not known (FFFFh).
pub const NO_ERROR_LOCATION: u16 = 0xFFFF;

/// Transport Type of an entry for an error the transport caused: RDMA (NVMe over
/// Fabrics TRTYPE 1); other errors carry 0, "not transport related" (as nvmet's; a
/// differential run of nvme-cli showed `error-log` calling an LBA Out of Range an
/// "RDMA Transport error" otherwise).
pub const TRTYPE_RDMA: u8 = 1;

/// The Transport Type an error `status` gets: RDMA for a data transfer the transport
/// failed (Data Transfer Error, Transient Transport Error), else 0.
pub fn error_trtype(status: Status) -> u8 {
    match status.as_generic() {
        Some(GenericStatus::DataTransferError | GenericStatus::TransientTransportError) => {
            TRTYPE_RDMA
        }
        _ => 0,
    }
}

/// The entries of one controller (see the module docs).
#[derive(Debug)]
pub struct ErrorLog {
    /// Errors recorded so far (the Error Count of the newest entry).
    count: u64,
    /// Ring of the last entries; entry `n` (1-based count) is at `(n - 1) % SLOTS`.
    slots: Vec<ErrorLogEntry>,
}

impl Default for ErrorLog {
    fn default() -> Self {
        ErrorLog {
            count: 0,
            slots: vec![ErrorLogEntry::default(); ERROR_LOG_SLOTS],
        }
    }
}

/// Where in command `sqe` the error `status` lies (Parameter Error Location: byte in
/// bits 7:0, bit in bits 10:8), for the statuses whose field is clear: an unknown
/// opcode (byte 0), namespace (NSID, byte 4), an LBA range (SLBA, byte 40), an SGL
/// (DPTR, byte 24); [`NO_ERROR_LOCATION`] otherwise.
pub fn error_location(status: Status) -> u16 {
    match status.as_generic() {
        Some(GenericStatus::InvalidOpcode) => 0,
        Some(GenericStatus::InvalidNamespaceOrFormat) => 4,
        Some(GenericStatus::LbaOutOfRange) => 40,
        Some(
            GenericStatus::DataSglLengthInvalid
            | GenericStatus::SglDescriptorTypeInvalid
            | GenericStatus::SglOffsetInvalid,
        ) => 24,
        _ => NO_ERROR_LOCATION,
    }
}

/// The LBA an I/O command names (SLBA of Read, Write, Compare, Write Zeroes), else 0.
fn command_lba(qid: u16, sqe: &Sqe) -> u64 {
    let with_lba = matches!(
        NvmOpcode::from_value(sqe.opcode()),
        Some(NvmOpcode::Read | NvmOpcode::Write | NvmOpcode::Compare | NvmOpcode::WriteZeroes)
    );
    if qid != 0 && with_lba {
        sqe.slba()
    } else {
        0
    }
}

impl ErrorLog {
    /// Records that command `sqe` of queue `qid` completed with `status`.
    pub fn record(&mut self, qid: u16, sqe: &Sqe, status: Status) {
        self.count += 1;
        let e = ErrorLogEntry {
            error_count: U64::new(self.count),
            sqid: U16::new(qid),
            cid: U16::new(sqe.cid()),
            status_field: U16::new(status.to_field()),
            parameter_error_location: U16::new(error_location(status)),
            lba: U64::new(command_lba(qid, sqe)),
            nsid: U32::new(sqe.nsid()),
            trtype: error_trtype(status),
            ..ErrorLogEntry::default()
        };
        let at = ((self.count - 1) % ERROR_LOG_SLOTS as u64) as usize;
        self.slots[at] = e;
    }

    /// Errors recorded so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The log page: [`ERROR_LOG_SLOTS`] entries of 64 bytes, the newest first, then
    /// the older ones; slots never used are zeros (Error Count 0: invalid entry).
    pub fn page(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(ERROR_LOG_SLOTS * 64);
        for k in 0..ERROR_LOG_SLOTS as u64 {
            let e = match self.count.checked_sub(k) {
                Some(n) if n > 0 => &self.slots[((n - 1) % ERROR_LOG_SLOTS as u64) as usize],
                _ => &ErrorLogEntry::default(),
            };
            out.extend_from_slice(e.as_bytes());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::FromBytes;

    fn entry(page: &[u8], k: usize) -> ErrorLogEntry {
        ErrorLogEntry::read_from_bytes(&page[k * 64..(k + 1) * 64]).unwrap()
    }

    #[test]
    fn newest_first_and_the_ring_wraps() {
        let mut log = ErrorLog::default();
        let page = log.page();
        assert_eq!(page.len(), 128 * 64);
        assert!(page.iter().all(|&b| b == 0), "no entry: all invalid");
        let lba_range = Status::generic(GenericStatus::LbaOutOfRange).with_dnr();
        log.record(1, &Sqe::read(7, 1, 1000, 7, false), lba_range);
        let opcode = Status::generic(GenericStatus::InvalidOpcode).with_dnr();
        log.record(0, &Sqe::new(0xC3, 9), opcode);
        let page = log.page();
        let (newest, older) = (entry(&page, 0), entry(&page, 1));
        assert_eq!(newest.error_count.get(), 2);
        assert_eq!((newest.sqid.get(), newest.cid.get()), (0, 9));
        assert_eq!(newest.status_field.get(), opcode.to_field());
        assert_eq!(newest.parameter_error_location.get(), 0);
        assert_eq!((older.sqid.get(), older.cid.get()), (1, 7));
        assert_eq!((older.lba.get(), older.nsid.get()), (1000, 1));
        assert_eq!(older.parameter_error_location.get(), 40);
        assert_eq!(older.trtype, 0, "not transport related");
        log.record(
            1,
            &Sqe::flush(1, 1),
            Status::generic(GenericStatus::DataTransferError),
        );
        assert_eq!(entry(&log.page(), 0).trtype, TRTYPE_RDMA);
        assert_eq!(entry(&page, 2).error_count.get(), 0);
        // 200 errors: the last 128 are kept, 200 first, 73 last.
        for cid in 0..197u16 {
            log.record(1, &Sqe::flush(cid, 1), lba_range);
        }
        assert_eq!(log.count(), 200);
        let page = log.page();
        assert_eq!(entry(&page, 0).error_count.get(), 200);
        assert_eq!(entry(&page, 127).error_count.get(), 73);
        assert_eq!(entry(&page, 0).cid.get(), 196);
        assert_eq!(entry(&page, 0).lba.get(), 0, "Flush names no LBA");
    }
}

//! What each namespace served: the read and write commands and their bytes, counted
//! by the poll groups as commands complete, read by the SMART / Health Information log
//! (NVMe Base 2.x §5.16.1.3: Data Units Read/Written, Host Read/Write Commands).
//!
//! No lock and no shared counter per I/O: every namespace has [`STAT_SLOTS`]
//! cache-line padded slots, and poll group `g` counts in slot `g % STAT_SLOTS`, so
//! poll groups do not write the same cache line (up to [`STAT_SLOTS`] of them); a
//! reader sums the slots. Counted as nvmet counts a block device's `part_stat`: every
//! command that completed successfully, its data bytes; Compare counts as a read (NVM
//! Command Set 1.x: logical blocks read by Compare are included), Write Zeroes and
//! Dataset Management are neither.
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam::utils::CachePadded;

/// Counter slots per namespace: poll groups beyond this share slots (still correct,
/// the counters are atomic adds).
pub const STAT_SLOTS: usize = 16;

/// Bytes in one SMART log data unit: 1000 units of 512 bytes (NVMe Base 2.x §5.16.1.3,
/// Data Units Read: "reported in thousands ... of 512 bytes").
pub const DATA_UNIT_BYTES: u64 = 512 * 1000;

#[derive(Debug, Default)]
struct Slot {
    read_commands: AtomicU64,
    read_bytes: AtomicU64,
    write_commands: AtomicU64,
    write_bytes: AtomicU64,
}

/// The I/O counters of one namespace (see the module docs).
#[derive(Debug)]
pub struct NamespaceStats {
    slots: Box<[CachePadded<Slot>]>,
}

impl Default for NamespaceStats {
    fn default() -> Self {
        NamespaceStats {
            slots: (0..STAT_SLOTS).map(|_| CachePadded::default()).collect(),
        }
    }
}

/// Sums of a namespace's (or several namespaces') counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IoTotals {
    /// Read (and Compare) commands completed successfully.
    pub read_commands: u64,
    /// Their bytes.
    pub read_bytes: u64,
    /// Write commands completed successfully.
    pub write_commands: u64,
    /// Their bytes.
    pub write_bytes: u64,
}

impl IoTotals {
    /// Data Units Read: thousands of 512-byte units, rounded up.
    pub fn data_units_read(&self) -> u64 {
        self.read_bytes.div_ceil(DATA_UNIT_BYTES)
    }

    /// Data Units Written: thousands of 512-byte units, rounded up.
    pub fn data_units_written(&self) -> u64 {
        self.write_bytes.div_ceil(DATA_UNIT_BYTES)
    }
}

impl std::ops::Add for IoTotals {
    type Output = IoTotals;
    fn add(self, o: IoTotals) -> IoTotals {
        IoTotals {
            read_commands: self.read_commands + o.read_commands,
            read_bytes: self.read_bytes + o.read_bytes,
            write_commands: self.write_commands + o.write_commands,
            write_bytes: self.write_bytes + o.write_bytes,
        }
    }
}

impl NamespaceStats {
    fn slot(&self, poll_group: u32) -> &Slot {
        &self.slots[poll_group as usize % STAT_SLOTS]
    }

    /// Poll group `poll_group` completed a read (or Compare) of `bytes` bytes.
    pub fn count_read(&self, poll_group: u32, bytes: u64) {
        let s = self.slot(poll_group);
        s.read_commands.fetch_add(1, Ordering::Relaxed);
        s.read_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Poll group `poll_group` completed a write of `bytes` bytes.
    pub fn count_write(&self, poll_group: u32, bytes: u64) {
        let s = self.slot(poll_group);
        s.write_commands.fetch_add(1, Ordering::Relaxed);
        s.write_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The sums over every slot.
    pub fn totals(&self) -> IoTotals {
        self.slots
            .iter()
            .map(|s| IoTotals {
                read_commands: s.read_commands.load(Ordering::Relaxed),
                read_bytes: s.read_bytes.load(Ordering::Relaxed),
                write_commands: s.write_commands.load(Ordering::Relaxed),
                write_bytes: s.write_bytes.load(Ordering::Relaxed),
            })
            .fold(IoTotals::default(), |a, b| a + b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_sum_and_data_units_round_up() {
        let s = NamespaceStats::default();
        s.count_read(0, 4096);
        s.count_read(17, 4096); // shares slot 1 with poll group 1
        s.count_read(1, 512);
        s.count_write(3, 1 << 20);
        let t = s.totals();
        assert_eq!((t.read_commands, t.read_bytes), (3, 8704));
        assert_eq!((t.write_commands, t.write_bytes), (1, 1 << 20));
        // 8704 bytes = 17 units of 512: rounds up to 1 thousand; 1 MiB = 2048 units: 3.
        assert_eq!((t.data_units_read(), t.data_units_written()), (1, 3));
        assert_eq!(IoTotals::default().data_units_read(), 0);
        assert_eq!((t + t).read_commands, 6);
    }
}

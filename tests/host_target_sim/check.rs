//! The checker: what a read may return, given what the host acknowledged.
//!
//! Every block a write stamps holds the write's id and the block's LBA ([`stamp`]), so
//! a read tells which write's data it found. Per LBA, a read `R` (issued at `r0`,
//! completed at `r1`) may find write `X`'s data (or the zeros of the fresh namespace,
//! write 0) unless
//! - `X` was issued after `R` completed, or
//! - some other write `W` of that LBA supersedes `X`: `W` was acknowledged as a success
//!   before `R` was issued, `W` was issued after `X` ended (`X` acknowledged or failed
//!   to the caller: NVMe orders nothing among commands in flight together), and `W`'s
//!   data survived every target crash from `W`'s issue to `R`'s completion (the read
//!   may have run as late as that: held, reissued after a reconnect; the namespace promises only
//!   what is durable: a write with FUA once acknowledged, any write acknowledged before
//!   a Flush was submitted once that Flush is acknowledged; Identify Controller VWC 1).
//!
//! A write that ended with an error may or may not have reached the media; it is
//! taken as settled when the caller hears of it (a target finishes a command it
//! fetched within its io_uring latency, far below the host's failure detection).
use std::collections::BTreeMap;

/// Simulated time, µs.
pub type T = u64;

/// Bytes per block of the simulated namespace.
pub const BLOCK: usize = 512;

/// The contents write `id` puts in block `lba`: its id, the LBA, then a pattern of both.
pub fn stamp(id: u64, lba: u64) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK];
    if id == 0 {
        return b;
    }
    b[..8].copy_from_slice(&id.to_le_bytes());
    b[8..16].copy_from_slice(&lba.to_le_bytes());
    for (i, x) in b[16..].iter_mut().enumerate() {
        *x = (id.wrapping_mul(31) ^ lba.wrapping_mul(7) ^ i as u64) as u8;
    }
    b
}

/// Which write's data `block` (read at `lba`) holds: `Err` when it is no write's.
pub fn unstamp(block: &[u8], lba: u64) -> Result<u64, String> {
    let id = u64::from_le_bytes(block[..8].try_into().unwrap());
    if stamp(id, lba) == block {
        Ok(id)
    } else {
        Err(format!(
            "block {lba} holds no write's data (id field {id}, LBA field {})",
            u64::from_le_bytes(block[8..16].try_into().unwrap())
        ))
    }
}

#[derive(Clone, Debug)]
struct WriteRec {
    lbas: std::ops::Range<u64>,
    fua: bool,
    issued: T,
    /// When the caller heard the outcome, and whether it was a success.
    ended: Option<(T, bool)>,
}

/// What the checker knows: the writes, flushes and crashes so far.
#[derive(Debug, Default)]
pub struct Checker {
    /// Write id -> record (ids start at 1).
    writes: BTreeMap<u64, WriteRec>,
    /// LBA -> write ids of that LBA.
    by_lba: BTreeMap<u64, Vec<u64>>,
    /// Flushes acknowledged: (issued, acknowledged).
    flushes: Vec<(T, T)>,
    /// Times the target crashed.
    crashes: Vec<T>,
    /// Reads checked, blocks checked.
    pub reads_checked: u64,
    pub blocks_checked: u64,
}

impl Checker {
    pub fn write_issued(&mut self, id: u64, slba: u64, nblk: u64, fua: bool, now: T) {
        self.writes.insert(
            id,
            WriteRec {
                lbas: slba..slba + nblk,
                fua,
                issued: now,
                ended: None,
            },
        );
        for lba in slba..slba + nblk {
            self.by_lba.entry(lba).or_default().push(id);
        }
    }

    pub fn write_ended(&mut self, id: u64, ok: bool, now: T) {
        let w = self.writes.get_mut(&id).expect("a write the checker knows");
        assert!(w.ended.is_none(), "write {id} ended twice");
        w.ended = Some((now, ok));
    }

    pub fn flush_acked(&mut self, issued: T, now: T) {
        self.flushes.push((issued, now));
    }

    pub fn crashed(&mut self, now: T) {
        self.crashes.push(now);
    }

    /// When write `w`'s data was certainly durable, if it was.
    fn durable_at(&self, w: &WriteRec) -> Option<T> {
        let (acked, true) = w.ended? else {
            return None;
        };
        if w.fua {
            return Some(acked);
        }
        self.flushes
            .iter()
            .filter(|(fi, _)| *fi >= acked)
            .map(|&(_, fa)| fa)
            .min()
    }

    /// Whether `w` (acknowledged) kept its data through every crash from its issue to `until`.
    fn survives(&self, w: &WriteRec, until: T) -> bool {
        let durable = self.durable_at(w);
        self.crashes
            .iter()
            .filter(|&&c| c > w.issued && c < until)
            .all(|&c| durable.is_some_and(|d| d <= c))
    }

    /// Checks that a read of `lba` issued at `r0` and completed at `r1` may return write
    /// `found`'s data (see the module docs).
    pub fn check_block(&mut self, lba: u64, found: u64, r0: T, r1: T) -> Result<(), String> {
        self.blocks_checked += 1;
        let (x_end, x_name) = if found == 0 {
            (0, "the fresh namespace's zeros".to_string())
        } else {
            let Some(x) = self.writes.get(&found) else {
                return Err(format!("block {lba}: data of write {found}, never issued"));
            };
            if !x.lbas.contains(&lba) {
                return Err(format!(
                    "block {lba}: data of write {found}, which wrote {:?}",
                    x.lbas
                ));
            }
            if x.issued > r1 {
                return Err(format!("block {lba}: write {found} issued after the read"));
            }
            (x.ended.map_or(T::MAX, |(t, _)| t), format!("write {found}"))
        };
        for &wid in self.by_lba.get(&lba).map_or(&[][..], |v| &v[..]) {
            if wid == found {
                continue;
            }
            let w = &self.writes[&wid];
            let Some((acked, true)) = w.ended else {
                continue;
            };
            if acked < r0 && w.issued > x_end && self.survives(w, r1) {
                return Err(format!(
                    "block {lba}: read (issued {r0} µs, done {r1} µs) found {x_name} \
                     (ended {x_end} µs), but write {wid} (issued {} µs, acknowledged {acked} µs, \
                     FUA {}, durable at {:?}) superseded it: an acknowledged write was lost",
                    w.issued,
                    w.fua,
                    self.durable_at(w)
                ));
            }
        }
        Ok(())
    }
}

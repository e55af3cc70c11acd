//! Receive buffers of the admin queues' own (issue 16 item 9): I/O that fills a poll
//! group's shared receive queue must not starve an admin queue's Keep Alive, so an
//! admin queue's QP gets a receive queue of its own with [`ADMIN_QUEUE_BUFFERS`]
//! buffers (`NVME_AQ_DEPTH`), taken from a pool of blocks beyond the SRQ's buffers
//! (request slots `srq_depth..`). An admin buffer holds the 64-byte SQE only, as
//! nvmet-rdma's admin commands have no in-capsule data. When the pool is used up, an
//! admin queue shares the SRQ as before.
//!
//! This is the bookkeeping, without the provider: which block a queue owns, and which
//! QP each buffer is posted on, so that a completion that comes after its QP was
//! destroyed (a flushed receive) is recognised and dropped, never posting a buffer
//! twice.
use std::ops::Range;

/// Receive buffers of one admin queue: its SQ entries (`NVME_AQ_DEPTH`).
pub const ADMIN_QUEUE_BUFFERS: u32 = nvme::NVME_AQ_DEPTH as u32;

/// Admin queues per poll group with buffers of their own (by default).
pub const DEFAULT_ADMIN_QUEUES: u32 = 32;

#[derive(Debug, Clone, Default)]
struct Block {
    /// The admin queue (QPN) that owns the block.
    owner: Option<u32>,
    /// The QP each buffer is posted on now.
    posted: Vec<Option<u32>>,
}

/// The admin buffer pool of a poll group (see the module docs).
#[derive(Debug, Clone)]
pub struct AdminBuffers {
    /// The first admin slot (the SRQ's depth).
    base: u32,
    blocks: Vec<Block>,
}

impl AdminBuffers {
    /// A pool of `queues` blocks after the SRQ's `srq_depth` slots.
    pub fn new(srq_depth: u32, queues: u32) -> Self {
        AdminBuffers {
            base: srq_depth,
            blocks: (0..queues)
                .map(|_| Block {
                    owner: None,
                    posted: vec![None; ADMIN_QUEUE_BUFFERS as usize],
                })
                .collect(),
        }
    }

    /// Request slots the pool adds to the SRQ's.
    pub fn slots(&self) -> u32 {
        self.blocks.len() as u32 * ADMIN_QUEUE_BUFFERS
    }

    fn locate(&self, slot: u32) -> Option<(usize, usize)> {
        let k = slot.checked_sub(self.base)?;
        let b = (k / ADMIN_QUEUE_BUFFERS) as usize;
        (b < self.blocks.len()).then_some((b, (k % ADMIN_QUEUE_BUFFERS) as usize))
    }

    /// Whether `slot` is an admin buffer (not one of the SRQ's).
    pub fn is_admin(&self, slot: u32) -> bool {
        self.locate(slot).is_some()
    }

    /// Gives admin queue `qpn` a block whose buffers are all idle (none posted, and
    /// `idle(slot)`: its request is free); returns its slots, or `None` when none is.
    pub fn claim(&mut self, qpn: u32, idle: impl Fn(u32) -> bool) -> Option<Range<u32>> {
        let base = self.base;
        let (b, block) = self.blocks.iter_mut().enumerate().find(|(b, blk)| {
            let first = base + *b as u32 * ADMIN_QUEUE_BUFFERS;
            blk.owner.is_none()
                && blk.posted.iter().all(Option::is_none)
                && (first..first + ADMIN_QUEUE_BUFFERS).all(&idle)
        })?;
        block.owner = Some(qpn);
        let first = base + b as u32 * ADMIN_QUEUE_BUFFERS;
        Some(first..first + ADMIN_QUEUE_BUFFERS)
    }

    /// The admin queue that owns `slot`'s block, if any.
    pub fn owner(&self, slot: u32) -> Option<u32> {
        let (b, _) = self.locate(slot)?;
        self.blocks[b].owner
    }

    /// Buffer `slot` was posted on QP `qpn`.
    pub fn posted(&mut self, slot: u32, qpn: u32) {
        if let Some((b, i)) = self.locate(slot) {
            self.blocks[b].posted[i] = Some(qpn);
        }
    }

    /// A receive of buffer `slot` completed on QP `qpn`: `true` when the buffer was
    /// posted there (the completion is current; the buffer is no longer posted),
    /// `false` for a completion of a QP that is gone (drop it).
    pub fn completed(&mut self, slot: u32, qpn: u32) -> bool {
        let Some((b, i)) = self.locate(slot) else {
            return false;
        };
        let p = &mut self.blocks[b].posted[i];
        if *p == Some(qpn) {
            *p = None;
            true
        } else {
            false
        }
    }

    /// Admin queue `qpn` is gone (its QP destroyed, so nothing is posted on it): its
    /// block goes back to the pool.
    pub fn release(&mut self, qpn: u32) {
        for blk in &mut self.blocks {
            if blk.owner == Some(qpn) {
                blk.owner = None;
            }
            for p in &mut blk.posted {
                if *p == Some(qpn) {
                    *p = None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_claimed_used_and_released_and_late_completions_dropped() {
        let mut a = AdminBuffers::new(512, 2);
        assert_eq!(a.slots(), 64);
        assert!(!a.is_admin(511) && a.is_admin(512) && a.is_admin(575) && !a.is_admin(576));
        let r = a.claim(0x10, |_| true).unwrap();
        assert_eq!(r, 512..544);
        for s in r.clone() {
            a.posted(s, 0x10);
        }
        assert_eq!(a.owner(520), Some(0x10));
        assert_eq!(a.claim(0x11, |_| true).unwrap(), 544..576);
        assert_eq!(
            a.claim(0x12, |_| true),
            None,
            "the pool is used up: the SRQ then"
        );
        // A capsule on 520, then the queue goes: its block comes back ...
        assert!(a.completed(520, 0x10));
        a.release(0x10);
        assert_eq!(a.owner(520), None);
        // ... but not while a request still holds one of its buffers.
        assert_eq!(a.claim(0x13, |s| s != 520), None);
        let r = a.claim(0x13, |_| true).unwrap();
        assert_eq!(r, 512..544);
        a.posted(521, 0x13);
        // The old QP's flushed receive of 521 comes late: dropped, 521 stays posted.
        assert!(!a.completed(521, 0x10));
        assert!(a.completed(521, 0x13));
    }
}

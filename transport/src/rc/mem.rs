//! Registered memory, memory windows and key validation (IBTA Vol 1 §10.6; the
//! responder's remote access checks of §9.7.4.1).
//!
//! Keys follow Linux rxe: `key = index << 8 | tag`, where `index` (24 bits) names a
//! slot of the device's [`KeyTable`] and `tag` is an 8-bit value that changes every time
//! the slot is reused or a memory window is re-bound, so a stale key never validates.
//! An MR's lkey and rkey are the same value. Index 0 is never handed out, so key 0 is
//! always invalid.
use std::sync::Arc;

use parking_lot::RwLock;

use crate::verbs::{AccessFlags, VerbsError, WcStatus};

pub use super::region::{MemRef, MrMemory, MR_ALIGN};

/// The keys and range of a registered MR (`struct ibv_mr`): `addr` is the iova of its
/// first byte, `length` its size in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrKeys {
    pub lkey: u32,
    pub rkey: u32,
    pub addr: u64,
    pub length: u64,
}

struct MrEntry {
    pd: u32,
    mem: Arc<MrMemory>,
    /// Offset of the MR's first byte inside `mem`.
    offset: usize,
    iova: u64,
    length: u64,
    access: AccessFlags,
    /// False once invalidated (Local Invalidate or SEND with Invalidate of its key).
    valid: bool,
}

impl MrEntry {
    /// The MemRef for `[va, va + len)` if it lies inside the MR.
    fn range(&self, va: u64, len: u64) -> Option<MemRef> {
        let end = va.checked_add(len)?;
        let mr_end = self.iova.checked_add(self.length)?;
        if va < self.iova || end > mr_end {
            return None;
        }
        let off = self
            .offset
            .checked_add(usize::try_from(va - self.iova).ok()?)?;
        MemRef::new(self.mem.clone(), off, usize::try_from(len).ok()?)
    }
}

#[derive(Clone, Copy)]
struct MwBinding {
    qpn: u32,
    mr_index: u32,
    addr: u64,
    length: u64,
    access: AccessFlags,
}

enum Obj {
    Free,
    Mr(MrEntry),
    /// A type 2 memory window; `None` = free (invalid) state, not usable remotely.
    Mw {
        pd: u32,
        binding: Option<MwBinding>,
    },
}

struct Slot {
    tag: u8,
    obj: Obj,
}

struct Inner {
    slots: Vec<Slot>,
    free: Vec<u32>,
    next_pd: u32,
}

/// Largest slot index (24 bits).
const MAX_INDEX: u32 = 0x00FF_FFFF;

impl Inner {
    fn alloc(&mut self, obj: Obj) -> Result<u32, VerbsError> {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                let i = self.slots.len() as u32;
                if i > MAX_INDEX {
                    return Err(VerbsError::NoResources("key table full"));
                }
                // rxe-like starting tags; any value works.
                self.slots.push(Slot {
                    tag: (i as u8).wrapping_mul(37),
                    obj: Obj::Free,
                });
                i
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.tag = slot.tag.wrapping_add(1);
        slot.obj = obj;
        Ok(index << 8 | slot.tag as u32)
    }

    fn slot(&self, key: u32) -> Option<&Slot> {
        let s = self.slots.get((key >> 8) as usize)?;
        (s.tag == key as u8).then_some(s)
    }

    fn slot_mut(&mut self, key: u32) -> Option<&mut Slot> {
        let s = self.slots.get_mut((key >> 8) as usize)?;
        (s.tag == key as u8).then_some(s)
    }

    fn release(&mut self, index: u32) {
        if let Some(s) = self.slots.get_mut(index as usize) {
            s.obj = Obj::Free;
            self.free.push(index);
        }
    }
}

/// The memory keys of one device: protection domains, MRs and type 2 memory windows.
///
/// Shared by all QPs and threads of the device (`Send + Sync`; a read-write lock inside,
/// taken for reading on every key check).
pub struct KeyTable {
    inner: RwLock<Inner>,
}

impl Default for KeyTable {
    fn default() -> Self {
        Self::new()
    }
}

impl KeyTable {
    /// An empty table. Slot 0 is reserved so key 0 never validates.
    pub fn new() -> Self {
        let reserved = Slot {
            tag: 0,
            obj: Obj::Free,
        };
        KeyTable {
            inner: RwLock::new(Inner {
                slots: vec![reserved],
                free: Vec::new(),
                next_pd: 1,
            }),
        }
    }

    /// A new protection domain handle (never 0).
    pub fn alloc_pd(&self) -> u32 {
        let mut g = self.inner.write();
        let pd = g.next_pd;
        g.next_pd = g.next_pd.wrapping_add(1).max(1);
        pd
    }

    /// Registers `length` bytes at `offset` of `mem` in `pd` (`ibv_reg_mr`, IBTA §10.6.2).
    /// The MR's iova is `mem.addr() + offset`.
    ///
    /// Errors: `InvalidArgument` if the range exceeds `mem` or remote write/atomic is
    /// asked without local write (IBTA o10-31); `NoResources` if the table is full.
    pub fn reg_mr(
        &self,
        pd: u32,
        mem: &Arc<MrMemory>,
        offset: usize,
        length: usize,
        access: AccessFlags,
    ) -> Result<MrKeys, VerbsError> {
        if !matches!(offset.checked_add(length), Some(end) if end <= mem.len()) {
            return Err(VerbsError::InvalidArgument("MR range outside the memory"));
        }
        if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(VerbsError::InvalidArgument(
                "remote write requires local write",
            ));
        }
        let iova = mem.addr() + offset as u64;
        let entry = MrEntry {
            pd,
            mem: mem.clone(),
            offset,
            iova,
            length: length as u64,
            access,
            valid: true,
        };
        let key = self.inner.write().alloc(Obj::Mr(entry))?;
        Ok(MrKeys {
            lkey: key,
            rkey: key,
            addr: iova,
            length: length as u64,
        })
    }

    /// Deregisters the MR of `lkey` (`ibv_dereg_mr`). Its keys stop validating at once
    /// and memory windows bound to it return to the free (invalid) state. In-flight
    /// [`MemRef`]s keep the memory itself alive. Errors: `NoSuchObject`.
    pub fn dereg_mr(&self, lkey: u32) -> Result<(), VerbsError> {
        let mut g = self.inner.write();
        match g.slot(lkey) {
            Some(Slot {
                obj: Obj::Mr(_), ..
            }) => {}
            _ => return Err(VerbsError::NoSuchObject),
        }
        let index = lkey >> 8;
        for s in g.slots.iter_mut() {
            if let Obj::Mw { binding, .. } = &mut s.obj {
                if binding.is_some_and(|b| b.mr_index == index) {
                    *binding = None;
                }
            }
        }
        g.release(index);
        Ok(())
    }

    /// Allocates a type 2 memory window in `pd` (`ibv_alloc_mw`, IBTA §10.6.7). Returns
    /// its rkey, not valid until bound (see [`KeyTable::bind_mw`]).
    pub fn alloc_mw(&self, pd: u32) -> Result<u32, VerbsError> {
        self.inner.write().alloc(Obj::Mw { pd, binding: None })
    }

    /// Frees the memory window whose rkey (any tag: only the index counts) is `rkey`.
    /// Errors: `NoSuchObject`.
    pub fn dealloc_mw(&self, rkey: u32) -> Result<(), VerbsError> {
        let mut g = self.inner.write();
        match g.slots.get((rkey >> 8) as usize) {
            Some(Slot {
                obj: Obj::Mw { .. },
                ..
            }) if rkey >> 8 != 0 => {}
            _ => return Err(VerbsError::NoSuchObject),
        }
        g.release(rkey >> 8);
        Ok(())
    }

    /// Validates a local SGE: `lkey` names a valid MR of `pd` containing
    /// `[addr, addr + len)` with `access` (only `LOCAL_WRITE` matters; local read is
    /// always granted). A zero-length range needs no key. Error: `LocProtErr`.
    pub fn check_local(
        &self,
        pd: u32,
        lkey: u32,
        addr: u64,
        len: u64,
        access: AccessFlags,
    ) -> Result<MemRef, WcStatus> {
        if len == 0 {
            return Ok(MemRef::empty());
        }
        let g = self.inner.read();
        match g.slot(lkey) {
            Some(Slot {
                obj: Obj::Mr(mr), ..
            }) if mr.valid
                && mr.pd == pd
                && mr.access.contains(access & AccessFlags::LOCAL_WRITE) =>
            {
                mr.range(addr, len).ok_or(WcStatus::LocProtErr)
            }
            _ => Err(WcStatus::LocProtErr),
        }
    }

    /// The responder's remote access check (IBTA §9.7.4.1.5, §10.6.7.2): `rkey` names a
    /// valid MR of `pd`, or a memory window of `pd` bound to QP `qpn`, whose range holds
    /// `[va, va + len)` (no u64 overflow) with `access` (REMOTE_READ / REMOTE_WRITE).
    /// A zero-length access needs no valid key (IBTA §9.4.3) and returns an empty range.
    #[allow(clippy::result_unit_err)]
    pub fn check_remote(
        &self,
        pd: u32,
        qpn: u32,
        rkey: u32,
        va: u64,
        len: u64,
        access: AccessFlags,
    ) -> Result<MemRef, ()> {
        if len == 0 {
            return Ok(MemRef::empty());
        }
        let g = self.inner.read();
        let slot = g.slot(rkey).ok_or(())?;
        match &slot.obj {
            Obj::Mr(mr) if mr.valid && mr.pd == pd && mr.access.contains(access) => {
                mr.range(va, len).ok_or(())
            }
            Obj::Mw {
                pd: mw_pd,
                binding: Some(b),
            } if *mw_pd == pd && b.qpn == qpn && b.access.contains(access) => {
                let end = va.checked_add(len).ok_or(())?;
                let b_end = b.addr.checked_add(b.length).ok_or(())?;
                if va < b.addr || end > b_end {
                    return Err(());
                }
                match g.slots.get(b.mr_index as usize).map(|s| &s.obj) {
                    Some(Obj::Mr(mr)) if mr.valid => mr.range(va, len).ok_or(()),
                    _ => Err(()),
                }
            }
            _ => Err(()),
        }
    }

    /// Binds a type 2 memory window (IBV_WR_BIND_MW, IBTA §10.6.7.2.3). `mw_handle` is
    /// the window's rkey as [`KeyTable::alloc_mw`] returned it (only its index is used);
    /// `new_rkey` must carry the same index and a tag different from the current one.
    /// The window must be free (unbound) and in `pd`; the MR `mr_lkey` in `pd` must have
    /// MW_BIND, contain `[addr, addr + length)`, and have LOCAL_WRITE if `access` has
    /// REMOTE_WRITE. Error: `MwBindErr`.
    #[allow(clippy::too_many_arguments)]
    pub fn bind_mw(
        &self,
        pd: u32,
        qpn: u32,
        mw_handle: u32,
        new_rkey: u32,
        mr_lkey: u32,
        addr: u64,
        length: u64,
        access: AccessFlags,
    ) -> Result<(), WcStatus> {
        const E: WcStatus = WcStatus::MwBindErr;
        let mut g = self.inner.write();
        let index = mw_handle >> 8;
        if index == 0 || new_rkey >> 8 != index {
            return Err(E);
        }
        let mr_index = mr_lkey >> 8;
        match g.slot(mr_lkey) {
            Some(Slot {
                obj: Obj::Mr(mr), ..
            }) if mr.valid
                && mr.pd == pd
                && mr.access.contains(AccessFlags::MW_BIND)
                && (!access.contains(AccessFlags::REMOTE_WRITE)
                    || mr.access.contains(AccessFlags::LOCAL_WRITE))
                && mr.range(addr, length).is_some() => {}
            _ => return Err(E),
        }
        let slot = g.slots.get_mut(index as usize).ok_or(E)?;
        if slot.tag == new_rkey as u8 {
            return Err(E);
        }
        match &mut slot.obj {
            Obj::Mw { pd: mw_pd, binding } if *mw_pd == pd && binding.is_none() => {
                *binding = Some(MwBinding {
                    qpn,
                    mr_index,
                    addr,
                    length,
                    access,
                });
                slot.tag = new_rkey as u8;
                Ok(())
            }
            _ => Err(E),
        }
    }

    /// Invalidates `rkey` (IBTA §10.6.7.2.5 / §10.6.5): Local Invalidate (`qpn` None) or
    /// the responder's part of SEND with Invalidate (`qpn` = the receiving QP, which the
    /// window must be bound to). A memory window returns to the free state (it may be
    /// bound again with a new tag); an MR becomes invalid for local and remote access
    /// until deregistered. Error: `MwBindErr` (unknown or stale key, other PD, window
    /// not bound or bound to another QP, MR already invalid).
    pub fn invalidate(&self, pd: u32, qpn: Option<u32>, rkey: u32) -> Result<(), WcStatus> {
        let mut g = self.inner.write();
        let slot = g.slot_mut(rkey).ok_or(WcStatus::MwBindErr)?;
        match &mut slot.obj {
            Obj::Mw {
                pd: mw_pd,
                binding: binding @ Some(_),
            } if *mw_pd == pd && (qpn.is_none() || binding.is_some_and(|b| Some(b.qpn) == qpn)) => {
                *binding = None;
                Ok(())
            }
            Obj::Mr(mr) if mr.pd == pd && mr.valid => {
                mr.valid = false;
                Ok(())
            }
            _ => Err(WcStatus::MwBindErr),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::inc_rkey;

    const RW: AccessFlags = AccessFlags::LOCAL_WRITE
        .union(AccessFlags::REMOTE_WRITE)
        .union(AccessFlags::REMOTE_READ)
        .union(AccessFlags::MW_BIND);

    #[test]
    fn reg_mr_rules() {
        let t = KeyTable::new();
        let pd = t.alloc_pd();
        let m = MrMemory::new(8192).unwrap();
        assert!(t
            .reg_mr(pd, &m, 0, 8192, AccessFlags::REMOTE_WRITE)
            .is_err());
        assert!(t
            .reg_mr(pd, &m, 4096, 8192, AccessFlags::LOCAL_WRITE)
            .is_err());
        let k = t.reg_mr(pd, &m, 4096, 4096, RW).unwrap();
        assert_eq!(k.addr, m.addr() + 4096);
        assert_eq!(k.lkey >> 8, 1);
        let r = t
            .check_remote(pd, 5, k.rkey, k.addr + 4000, 96, AccessFlags::REMOTE_WRITE)
            .unwrap();
        assert_eq!(r.as_ptr() as u64, k.addr + 4000);
        assert!(t
            .check_remote(pd, 5, k.rkey, k.addr + 4000, 97, AccessFlags::REMOTE_WRITE)
            .is_err());
        assert!(t
            .check_remote(pd, 5, k.rkey, u64::MAX - 1, 4, AccessFlags::REMOTE_WRITE)
            .is_err());
        assert!(t
            .check_remote(pd + 1, 5, k.rkey, k.addr, 4, AccessFlags::REMOTE_WRITE)
            .is_err());
        assert!(t
            .check_remote(pd, 5, k.rkey ^ 1, k.addr, 4, AccessFlags::REMOTE_WRITE)
            .is_err());
        assert!(t
            .check_remote(pd, 5, 0, 0, 0, AccessFlags::REMOTE_WRITE)
            .is_ok());
        assert!(t
            .check_local(pd, k.lkey, k.addr, 4096, AccessFlags::LOCAL_WRITE)
            .is_ok());
        t.dereg_mr(k.lkey).unwrap();
        assert_eq!(
            t.check_local(pd, k.lkey, k.addr, 1, AccessFlags::empty())
                .unwrap_err(),
            WcStatus::LocProtErr
        );
        assert!(t
            .check_remote(pd, 5, k.rkey, k.addr, 4, AccessFlags::REMOTE_WRITE)
            .is_err());
        // The reused slot gets a new tag.
        let k2 = t.reg_mr(pd, &m, 0, 4096, RW).unwrap();
        assert_eq!(k2.lkey >> 8, k.lkey >> 8);
        assert_ne!(k2.lkey, k.lkey);
    }

    #[test]
    fn mw_bind_and_invalidate() {
        let t = KeyTable::new();
        let pd = t.alloc_pd();
        let m = MrMemory::new(8192).unwrap();
        let k = t.reg_mr(pd, &m, 0, 8192, RW).unwrap();
        let mw = t.alloc_mw(pd).unwrap();
        assert!(t
            .check_remote(pd, 7, mw, k.addr, 1, AccessFlags::REMOTE_READ)
            .is_err());
        let rkey = inc_rkey(mw);
        assert_eq!(
            t.bind_mw(pd, 7, mw, mw, k.lkey, k.addr, 100, AccessFlags::REMOTE_READ),
            Err(WcStatus::MwBindErr)
        );
        assert_eq!(
            t.bind_mw(
                pd,
                7,
                mw,
                rkey,
                k.lkey,
                k.addr + 8100,
                100,
                AccessFlags::REMOTE_READ
            ),
            Err(WcStatus::MwBindErr)
        );
        t.bind_mw(
            pd,
            7,
            mw,
            rkey,
            k.lkey,
            k.addr + 100,
            100,
            AccessFlags::REMOTE_READ,
        )
        .unwrap();
        assert!(t
            .check_remote(pd, 7, rkey, k.addr + 100, 100, AccessFlags::REMOTE_READ)
            .is_ok());
        assert!(t
            .check_remote(pd, 7, rkey, k.addr + 100, 101, AccessFlags::REMOTE_READ)
            .is_err());
        assert!(t
            .check_remote(pd, 7, rkey, k.addr + 99, 1, AccessFlags::REMOTE_READ)
            .is_err());
        assert!(t
            .check_remote(pd, 7, rkey, k.addr + 100, 1, AccessFlags::REMOTE_WRITE)
            .is_err());
        assert!(t
            .check_remote(pd, 8, rkey, k.addr + 100, 1, AccessFlags::REMOTE_READ)
            .is_err());
        assert!(t
            .check_remote(pd, 7, mw, k.addr + 100, 1, AccessFlags::REMOTE_READ)
            .is_err());
        // Already bound.
        assert!(t
            .bind_mw(
                pd,
                7,
                mw,
                inc_rkey(rkey),
                k.lkey,
                k.addr,
                1,
                AccessFlags::REMOTE_READ
            )
            .is_err());
        assert!(t.invalidate(pd, Some(8), rkey).is_err());
        t.invalidate(pd, Some(7), rkey).unwrap();
        assert!(t
            .check_remote(pd, 7, rkey, k.addr + 100, 1, AccessFlags::REMOTE_READ)
            .is_err());
        let r2 = inc_rkey(rkey);
        t.bind_mw(pd, 7, mw, r2, k.lkey, k.addr, 8, AccessFlags::REMOTE_READ)
            .unwrap();
        t.dereg_mr(k.lkey).unwrap();
        assert!(t
            .check_remote(pd, 7, r2, k.addr, 8, AccessFlags::REMOTE_READ)
            .is_err());
        t.dealloc_mw(r2).unwrap();
        assert!(t.dealloc_mw(r2).is_err());
    }
}

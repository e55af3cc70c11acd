//! A poll group of the verbs provider ([`Context`] for [`VerbsProvider`]): its
//! completion channel, CQs, SRQs and QPs, kept in tables from the model's handles to
//! the `ibv_*` objects (a work request costs one lookup), and the sleep on the
//! completion channel and the async descriptor ([`Context::wait`]), so a poll group
//! with nothing to do does not spin (the QEMU guests run rxe on the same single vCPU).
//!
//! One thread drives a context (`Send`, not `Sync`).
use std::mem::MaybeUninit;
use std::sync::Arc;
use std::time::Duration;

use rdma_sys::{
    ibv_ah, ibv_comp_channel, ibv_cq, ibv_mr, ibv_mw, ibv_qp, ibv_srq, ibv_wc, rdma_cm_id,
};

use super::cm::CmLink;
use super::device::VerbsDevice;
use super::event::Owned;
use super::wr::{self, SendLimits};
use super::VerbsProvider;
use super::{cq, qp, srq};
use crate::verbs::{
    Ah, AhAttr, AsyncEvent, Context, Cq, Device as _, Pd, Qp, QpAttr, QpCap, QpInitAttr, QpState,
    QpType, RecvWr, SendWr, Srq, VerbsError, WorkCompletion,
};

/// Completions fetched per `ibv_poll_cq` call at most.
const WC_BATCH: usize = 64;

struct SrqSlot {
    srq: *mut ibv_srq,
    max_wr: u32,
}

struct QpSlot {
    qp: *mut ibv_qp,
    qp_type: QpType,
    limits: SendLimits,
    granted: QpCap,
    /// The rdma_cm id the QP was created on (`rdma_create_qp`), if any.
    cm: Option<CmLink>,
}

/// One poll group: see the module docs.
pub struct VerbsContext {
    dev: Arc<VerbsDevice>,
    index: u32,
    channel: *mut ibv_comp_channel,
    cqs: Vec<*mut ibv_cq>,
    srqs: Vec<SrqSlot>,
    /// Sorted by QPN (binary search; no hashing per work request).
    qps: Vec<(u32, QpSlot)>,
    /// Address handles by index (`ibv_create_ah`); NULL once destroyed.
    ahs: Vec<*mut ibv_ah>,
    wc_buf: Vec<MaybeUninit<ibv_wc>>,
}

/// The device's keys and this poll group's address handles, for [`wr::fill_send`].
struct Resolver<'a> {
    dev: &'a VerbsDevice,
    ahs: &'a [*mut ibv_ah],
}

impl wr::KeyResolver for Resolver<'_> {
    fn mw(&self, mw_handle: u32) -> Option<*mut ibv_mw> {
        wr::KeyResolver::mw(self.dev, mw_handle)
    }
    fn mr(&self, lkey: u32) -> Option<*mut ibv_mr> {
        wr::KeyResolver::mr(self.dev, lkey)
    }
    fn ah(&self, ah: Ah) -> Option<*mut ibv_ah> {
        self.ahs
            .get(ah.0 as usize)
            .copied()
            .filter(|p| !p.is_null())
    }
}

// SAFETY: the ibverbs objects may be used from any thread; the context is driven by
// one thread at a time (it is not Sync).
unsafe impl Send for VerbsContext {}

impl std::fmt::Debug for VerbsContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsContext")
            .field("dev", &self.dev)
            .field("index", &self.index)
            .field("qps", &self.qps.len())
            .finish()
    }
}

impl VerbsContext {
    pub(crate) fn new(dev: Arc<VerbsDevice>, index: u32) -> Result<VerbsContext, VerbsError> {
        // SAFETY: the device context is live.
        let channel = unsafe { cq::create_channel(dev.raw())? };
        Ok(VerbsContext {
            dev,
            index,
            channel,
            cqs: Vec::new(),
            srqs: Vec::new(),
            qps: Vec::new(),
            ahs: Vec::new(),
            wc_buf: (0..WC_BATCH).map(|_| MaybeUninit::uninit()).collect(),
        })
    }

    fn slot(&self, qp: Qp) -> Result<&QpSlot, VerbsError> {
        self.qps
            .binary_search_by_key(&qp.0, |(n, _)| *n)
            .map(|i| &self.qps[i].1)
            .map_err(|_| VerbsError::NoSuchObject)
    }

    fn cq_ptr(&self, cq: Cq) -> Result<*mut ibv_cq, VerbsError> {
        self.cqs
            .get(cq.0 as usize)
            .copied()
            .ok_or(VerbsError::InvalidArgument("no such CQ in this poll group"))
    }

    fn srq_slot(&self, srq: Srq) -> Result<&SrqSlot, VerbsError> {
        self.srqs
            .get(srq.0 as usize)
            .ok_or(VerbsError::InvalidArgument(
                "no such SRQ in this poll group",
            ))
    }

    fn init_ptrs(
        &self,
        attr: &QpInitAttr,
    ) -> Result<(*mut ibv_cq, *mut ibv_cq, *mut ibv_srq), VerbsError> {
        let s = match attr.srq {
            Some(h) => self.srq_slot(h)?.srq,
            None => std::ptr::null_mut(),
        };
        Ok((self.cq_ptr(attr.send_cq)?, self.cq_ptr(attr.recv_cq)?, s))
    }

    fn insert_qp(
        &mut self,
        p: *mut ibv_qp,
        qp_type: QpType,
        granted: QpCap,
        cm: Option<CmLink>,
    ) -> Qp {
        // SAFETY: live QP.
        let qpn = unsafe { (*p).qp_num };
        let slot = QpSlot {
            qp: p,
            qp_type,
            limits: SendLimits {
                max_inline_data: granted.max_inline_data,
                max_send_sge: granted.max_send_sge,
            },
            granted,
            cm,
        };
        let i = self
            .qps
            .binary_search_by_key(&qpn, |(n, _)| *n)
            .unwrap_or_else(|i| i);
        self.qps.insert(i, (qpn, slot));
        self.dev
            .events()
            .register(p.cast(), self.index, Owned::Qp(Qp(qpn)));
        Qp(qpn)
    }

    /// Creates the QP of an rdma_cm id (`rdma_create_qp`: the QP comes out in Init, and
    /// `rdma_accept` / the REP move it to RTR and RTS). The caller holds the CM's lock
    /// of `id`.
    ///
    /// # Safety
    /// `id` is a live cm_id of this device, not used concurrently.
    pub(crate) unsafe fn create_qp_on_cm_id(
        &mut self,
        id: *mut rdma_cm_id,
        attr: &QpInitAttr,
        link: CmLink,
    ) -> Result<Qp, VerbsError> {
        let caps = self.dev.caps();
        caps.check_qp_cap(&attr.cap, attr.srq.is_some())?;
        if (*id).verbs != self.dev.raw() {
            return Err(VerbsError::InvalidArgument(
                "the connection's RDMA device is not this poll group's",
            ));
        }
        let (scq, rcq, s) = self.init_ptrs(attr)?;
        let p = self.dev.pd_ptr(attr.pd)?;
        let mut init = qp::init_attr(scq, rcq, s, &attr.cap);
        let rc = rdma_sys::rdma_create_qp(id, p, &mut init);
        if rc != 0 || (*id).qp.is_null() {
            return Err(super::sys::os_err("rdma_create_qp"));
        }
        Ok(self.insert_qp((*id).qp, QpType::Rc, qp::granted(&init.cap), Some(link)))
    }
}

impl Context for VerbsContext {
    type Provider = VerbsProvider;

    /// The device of this poll group.
    fn device(&self) -> &Arc<VerbsDevice> {
        &self.dev
    }

    /// Creates a CQ of at least `cqe` entries on the poll group's completion channel
    /// (`ibv_create_cq`).
    ///
    /// # Errors
    /// `CapabilityExceeded` beyond `max_cqe`; `Os` (EINVAL, ENOMEM).
    fn poll_group(&self) -> u32 {
        self.index
    }

    fn create_cq(&mut self, cqe: u32) -> Result<Cq, VerbsError> {
        // SAFETY: the device context and channel are live.
        let c = unsafe { cq::create(self.dev.raw(), cqe, self.channel, &self.dev.caps())? };
        self.cqs.push(c);
        let h = Cq(self.cqs.len() as u32 - 1);
        self.dev
            .events()
            .register(c.cast(), self.index, Owned::Cq(h));
        Ok(h)
    }

    /// Creates an SRQ of `max_wr` receive WRs in `pd` (`ibv_create_srq`).
    ///
    /// # Errors
    /// `CapabilityExceeded` beyond `max_srq_wr`; `NoSuchObject` for an unknown PD;
    /// `Os` (EINVAL, ENOMEM, ENOSYS).
    fn create_srq(&mut self, pd: Pd, max_wr: u32) -> Result<Srq, VerbsError> {
        let p = self.dev.pd_ptr(pd)?;
        // SAFETY: p is live.
        let s = unsafe { srq::create(p, max_wr, &self.dev.caps())? };
        self.srqs.push(SrqSlot { srq: s, max_wr });
        let h = Srq(self.srqs.len() as u32 - 1);
        self.dev
            .events()
            .register(s.cast(), self.index, Owned::Srq(h));
        Ok(h)
    }

    /// Arms the SRQ limit (`ibv_modify_srq` IBV_SRQ_LIMIT): one-shot; an
    /// [`AsyncEvent::SrqLimitReached`] comes when fewer than `limit` WRs remain; re-arm
    /// after it.
    ///
    /// # Errors
    /// `InvalidArgument` for an unknown SRQ or a limit outside 1..max_wr; `Os`.
    fn arm_srq_limit(&mut self, srq: Srq, limit: u32) -> Result<(), VerbsError> {
        let s = self.srq_slot(srq)?;
        // SAFETY: live SRQ of this group.
        unsafe { srq::arm_limit(s.srq, limit, s.max_wr) }
    }

    /// Creates a QP of `attr.qp_type` (IBV_QPT_RC, IBV_QPT_UC or IBV_QPT_UD) in Reset
    /// (`ibv_create_qp`); the granted capacities (inline data included) are kept and
    /// checked at post time ([`Context::qp_cap`]).
    ///
    /// # Errors
    /// `CapabilityExceeded` for sizes beyond the device's; `InvalidArgument` for CQs or
    /// an SRQ of another group; `NoSuchObject` for an unknown PD; `Os` (EINVAL, ENOMEM).
    fn create_qp(&mut self, attr: &QpInitAttr) -> Result<Qp, VerbsError> {
        let (scq, rcq, s) = self.init_ptrs(attr)?;
        let p = self.dev.pd_ptr(attr.pd)?;
        // SAFETY: all objects are live and of this device.
        let (q, granted) =
            unsafe { qp::create(p, scq, rcq, s, &attr.cap, attr.qp_type, &self.dev.caps())? };
        Ok(self.insert_qp(q, attr.qp_type, granted, None))
    }

    /// `ibv_create_ah` toward `attr.dest` (a RoCEv2 GRH from the device's GID index).
    ///
    /// # Errors
    /// `NoSuchObject` for an unknown PD; `Os` from `ibv_create_ah` (the kernel resolves
    /// the destination's MAC address: EINVAL or ENODATA for an unreachable one).
    fn create_ah(&mut self, pd: Pd, attr: &AhAttr) -> Result<Ah, VerbsError> {
        let p = self.dev.pd_ptr(pd)?;
        let path = self.dev.path();
        let mut a = rdma_sys::ibv_ah_attr {
            grh: rdma_sys::ibv_global_route {
                dgid: rdma_sys::ibv_gid {
                    raw: super::sys::gid_of(attr.dest),
                },
                flow_label: attr.flow_label & 0x000F_FFFF,
                sgid_index: path.sgid_index,
                hop_limit: attr.hop_limit,
                traffic_class: attr.traffic_class,
            },
            dlid: 0,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            is_global: 1,
            port_num: path.port_num,
        };
        // SAFETY: a live PD of this device and a filled attribute struct.
        let ah = unsafe { rdma_sys::ibv_create_ah(p, &mut a) };
        if ah.is_null() {
            return Err(super::sys::os_err("ibv_create_ah"));
        }
        self.ahs.push(ah);
        Ok(Ah(self.ahs.len() as u32 - 1))
    }

    /// `ibv_destroy_ah`.
    ///
    /// # Errors
    /// `NoSuchObject` for an unknown or destroyed handle; `Os`.
    fn destroy_ah(&mut self, ah: Ah) -> Result<(), VerbsError> {
        let slot = self
            .ahs
            .get_mut(ah.0 as usize)
            .filter(|p| !p.is_null())
            .ok_or(VerbsError::NoSuchObject)?;
        let p = std::mem::replace(slot, std::ptr::null_mut());
        // SAFETY: ours, live, and out of the table.
        let rc = unsafe { rdma_sys::ibv_destroy_ah(p) };
        if rc != 0 {
            return Err(super::sys::rc_err("ibv_destroy_ah", rc));
        }
        Ok(())
    }

    /// The capacities the device granted `qp` at creation (`max_inline_data` included).
    fn qp_cap(&self, qp: Qp) -> Option<QpCap> {
        self.slot(qp).ok().map(|s| s.granted)
    }

    /// Modifies `qp` (`ibv_modify_qp`) after checking the transition from its current
    /// state and the attributes it requires (see [`qp::build_attr`]).
    ///
    /// # Errors
    /// `InvalidTransition { from, to }`; `InvalidArgument` naming missing attributes;
    /// `CapabilityExceeded` for RDMA READ depths; `NoSuchObject`; `Os` (EINVAL).
    fn modify_qp(&mut self, qp: Qp, attr: &QpAttr) -> Result<(), VerbsError> {
        let s = self.slot(qp)?;
        // SAFETY: live QP of this group.
        unsafe { qp::modify(s.qp, s.qp_type, attr, self.dev.path(), &self.dev.caps()) }
    }

    /// The QP's state as the device reports it (`ibv_query_qp`); `None` for an unknown
    /// QP.
    fn query_qp_state(&self, qp: Qp) -> Option<QpState> {
        let s = self.slot(qp).ok()?;
        // SAFETY: live QP of this group.
        unsafe { qp::query_state(s.qp) }
    }

    /// Destroys `qp` (`ibv_destroy_qp`, or `rdma_destroy_qp` for a QP of a cm_id that
    /// still exists).
    ///
    /// # Errors
    /// `NoSuchObject`; `Os` (EBUSY).
    fn destroy_qp(&mut self, qp: Qp) -> Result<(), VerbsError> {
        let i = self
            .qps
            .binary_search_by_key(&qp.0, |(n, _)| *n)
            .map_err(|_| VerbsError::NoSuchObject)?;
        let (_, slot) = self.qps.remove(i);
        self.dev.events().unregister(slot.qp.cast());
        // SAFETY: the QP is ours and leaves the table; the CM forgets it first.
        unsafe {
            match &slot.cm {
                Some(link) => link.destroy_qp(slot.qp),
                None => qp::destroy(slot.qp),
            }
        }
    }

    /// Posts one send WR (`ibv_post_send`).
    ///
    /// # Errors
    /// `NoSuchObject`; `CapabilityExceeded` (SGEs, inline bytes beyond the QP's grant);
    /// `QueueFull` (ENOMEM); `Os` (EINVAL).
    fn post_send(&mut self, qp: Qp, wr: &SendWr) -> Result<(), VerbsError> {
        self.post_send_list(qp, std::slice::from_ref(wr))
    }

    /// Posts a chain of send WRs: one `ibv_post_send` per [`wr::POST_CHUNK`] WRs, linked
    /// on the stack. On error the WRs before the failing one were posted.
    ///
    /// # Errors
    /// As [`Context::post_send`].
    fn post_send_list(&mut self, qp: Qp, wrs: &[SendWr]) -> Result<(), VerbsError> {
        let s = self.slot(qp)?;
        // SAFETY: live QP of this group; the SGEs are the caller's registered memory.
        let keys = Resolver {
            dev: &self.dev,
            ahs: &self.ahs,
        };
        unsafe { wr::post_send_list(s.qp, wrs, s.limits, &keys) }
    }

    /// Posts one receive WR on `qp`'s own receive queue (`ibv_post_recv`).
    ///
    /// # Errors
    /// `NoSuchObject`; `QueueFull` (ENOMEM); `Os` (EINVAL).
    fn post_recv(&mut self, qp: Qp, wr: &RecvWr) -> Result<(), VerbsError> {
        let s = self.slot(qp)?;
        // SAFETY: live QP of this group.
        unsafe { wr::post_recv(s.qp, wr) }
    }

    /// Posts one receive WR on `srq` (`ibv_post_srq_recv`).
    ///
    /// # Errors
    /// `InvalidArgument` for an unknown SRQ; `QueueFull` (ENOMEM); `Os` (EINVAL).
    fn post_srq_recv(&mut self, srq: Srq, wr: &RecvWr) -> Result<(), VerbsError> {
        let s = self.srq_slot(srq)?;
        // SAFETY: live SRQ of this group.
        unsafe { wr::post_srq_recv(s.srq, wr) }
    }

    /// Moves up to `out.len()` completions of `cq` into `out` (`ibv_poll_cq`); returns
    /// how many. 0 for an unknown CQ.
    fn poll_cq(&mut self, cq: Cq, out: &mut [WorkCompletion]) -> usize {
        let Ok(c) = self.cq_ptr(cq) else {
            return 0;
        };
        let mut done = 0;
        while done < out.len() {
            // SAFETY: live CQ of this group.
            let n = unsafe { cq::poll(c, &mut self.wc_buf, &mut out[done..]) };
            done += n;
            if n < WC_BATCH {
                break;
            }
        }
        done
    }

    /// The next asynchronous event of this poll group's objects (or of the port or
    /// device), without blocking (`ibv_get_async_event` on the non-blocking async
    /// descriptor, read when nothing is queued).
    fn poll_async_event(&mut self) -> Option<AsyncEvent> {
        let ev = self.dev.events();
        if let Some(e) = ev.pop(self.index) {
            return Some(e);
        }
        // SAFETY: the device context is live; its async fd is non-blocking.
        if unsafe { ev.drain(self.dev.raw()) } > 0 {
            return ev.pop(self.index);
        }
        None
    }

    /// Arms `cq` for one completion event (`ibv_req_notify_cq`); poll the CQ once more
    /// after arming, then [`Context::wait`].
    ///
    /// # Errors
    /// `InvalidArgument` for an unknown CQ; `Os`.
    fn req_notify_cq(&mut self, cq: Cq) -> Result<(), VerbsError> {
        let c = self.cq_ptr(cq)?;
        // SAFETY: live CQ of this group.
        unsafe { cq::req_notify(c) }
    }

    /// Sleeps until a completion event of an armed CQ, an async event, or `timeout`
    /// (`poll(2)` on the completion channel and the async descriptor); takes and
    /// acknowledges the events it wakes for (`ibv_get_cq_event` + `ibv_ack_cq_events`,
    /// `ibv_get_async_event` + `ibv_ack_async_event`).
    fn wait(&mut self, timeout: Duration) {
        let ev = self.dev.events();
        if ev.pending(self.index) {
            return;
        }
        // SAFETY: live channel and context.
        let (cfd, afd) = unsafe { (cq::channel_fd(self.channel), (*self.dev.raw()).async_fd) };
        let mut pfds = [
            libc::pollfd {
                fd: cfd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: afd,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ms = i32::try_from(timeout.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
        // SAFETY: two valid pollfds.
        let n = unsafe { libc::poll(pfds.as_mut_ptr(), 2, ms) };
        if n <= 0 {
            return;
        }
        if pfds[0].revents != 0 {
            // SAFETY: live channel.
            unsafe { cq::drain_events(self.channel) };
        }
        if pfds[1].revents != 0 {
            // SAFETY: live context.
            unsafe { ev.drain(self.dev.raw()) };
        }
    }
}

impl Drop for VerbsContext {
    fn drop(&mut self) {
        let ev = self.dev.events();
        for (_, slot) in self.qps.drain(..) {
            ev.unregister(slot.qp.cast());
            // SAFETY: ours; nothing uses it after this.
            let r = unsafe {
                match &slot.cm {
                    Some(link) => link.destroy_qp(slot.qp),
                    None => qp::destroy(slot.qp),
                }
            };
            if let Err(e) = r {
                tracing::warn!(%e, "destroying a QP of a closing poll group");
            }
        }
        for ah in self.ahs.drain(..).filter(|p| !p.is_null()) {
            // SAFETY: ours; the QPs that sent with it are gone.
            let rc = unsafe { rdma_sys::ibv_destroy_ah(ah) };
            if rc != 0 {
                tracing::warn!(rc, "destroying an address handle of a closing poll group");
            }
        }
        for s in self.srqs.drain(..) {
            ev.unregister(s.srq.cast());
            // SAFETY: ours; its QPs are gone.
            if let Err(e) = unsafe { srq::destroy(s.srq) } {
                tracing::warn!(%e, "SRQ");
            }
        }
        // SAFETY: live channel; acknowledge what is still pending before the CQs go.
        unsafe { cq::drain_events(self.channel) };
        for c in self.cqs.drain(..) {
            ev.unregister(c.cast());
            // SAFETY: ours; its QPs and SRQs are gone, its events acknowledged.
            if let Err(e) = unsafe { cq::destroy(c) } {
                tracing::warn!(%e, "CQ");
            }
        }
        // SAFETY: no CQ uses it any more.
        if let Err(e) = unsafe { cq::destroy_channel(self.channel) } {
            tracing::warn!(%e, "completion channel");
        }
        self.dev.context_closed(self.index);
    }
}

//! Asynchronous events (`ibv_get_async_event` / `ibv_ack_async_event`, IBTA Vol 1
//! §11.6.3): read from the device's non-blocking async descriptor by whichever poll
//! group looks first, acknowledged at once, and routed to the poll group that owns the
//! object (QP, SRQ, CQ) as an [`AsyncEvent`]; port and device events go to every group.
use std::collections::{HashMap, VecDeque};

use parking_lot::Mutex;
use rdma_sys::{ibv_ack_async_event, ibv_async_event, ibv_context, ibv_get_async_event};

use crate::verbs::{AsyncEvent, Cq, Qp, Srq};

/// The object an event names, as the poll group knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owned {
    /// A QP of the group.
    Qp(Qp),
    /// An SRQ of the group.
    Srq(Srq),
    /// A CQ of the group.
    Cq(Cq),
}

/// `enum ibv_event_type` values (rdma-core `verbs.h`).
mod ty {
    pub const CQ_ERR: u32 = 0;
    pub const QP_FATAL: u32 = 1;
    pub const QP_REQ_ERR: u32 = 2;
    pub const QP_ACCESS_ERR: u32 = 3;
    pub const COMM_EST: u32 = 4;
    pub const SQ_DRAINED: u32 = 5;
    pub const DEVICE_FATAL: u32 = 8;
    pub const PORT_ACTIVE: u32 = 9;
    pub const PORT_ERR: u32 = 10;
    pub const LID_CHANGE: u32 = 11;
    pub const PKEY_CHANGE: u32 = 12;
    pub const SM_CHANGE: u32 = 13;
    pub const SRQ_ERR: u32 = 14;
    pub const SRQ_LIMIT_REACHED: u32 = 15;
    pub const QP_LAST_WQE_REACHED: u32 = 16;
    pub const CLIENT_REREGISTER: u32 = 17;
    pub const GID_CHANGE: u32 = 18;
}

/// Which element of `struct ibv_async_event` an event type fills.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Element {
    /// `element.qp`.
    Qp,
    /// `element.srq`.
    Srq,
    /// `element.cq`.
    Cq,
    /// `element.port_num`.
    Port,
    /// Nothing (device events) or an element the model does not route (WQ).
    None,
}

/// The element an `enum ibv_event_type` value carries.
pub fn element_of(event_type: u32) -> Element {
    match event_type {
        ty::CQ_ERR => Element::Cq,
        ty::QP_FATAL
        | ty::QP_REQ_ERR
        | ty::QP_ACCESS_ERR
        | ty::COMM_EST
        | ty::SQ_DRAINED
        | ty::QP_LAST_WQE_REACHED
        | 6
        | 7 => Element::Qp,
        ty::SRQ_ERR | ty::SRQ_LIMIT_REACHED => Element::Srq,
        ty::PORT_ACTIVE
        | ty::PORT_ERR
        | ty::LID_CHANGE
        | ty::PKEY_CHANGE
        | ty::SM_CHANGE
        | ty::CLIENT_REREGISTER
        | ty::GID_CHANGE => Element::Port,
        _ => Element::None,
    }
}

/// The model's event for an event type and the object or port it names (pure).
pub fn to_async_event(event_type: u32, owned: Option<Owned>, port: u8) -> AsyncEvent {
    match (event_type, owned) {
        (ty::SRQ_LIMIT_REACHED, Some(Owned::Srq(srq))) => AsyncEvent::SrqLimitReached { srq },
        (ty::SRQ_ERR, Some(Owned::Srq(srq))) => AsyncEvent::SrqError { srq },
        (ty::QP_FATAL, Some(Owned::Qp(qp))) => AsyncEvent::QpFatal { qp },
        (ty::QP_REQ_ERR, Some(Owned::Qp(qp))) => AsyncEvent::QpRequestError { qp },
        (ty::QP_ACCESS_ERR, Some(Owned::Qp(qp))) => AsyncEvent::QpAccessError { qp },
        (ty::COMM_EST, Some(Owned::Qp(qp))) => AsyncEvent::CommEstablished { qp },
        (ty::SQ_DRAINED, Some(Owned::Qp(qp))) => AsyncEvent::SqDrained { qp },
        (ty::QP_LAST_WQE_REACHED, Some(Owned::Qp(qp))) => AsyncEvent::QpLastWqeReached { qp },
        (ty::CQ_ERR, Some(Owned::Cq(cq))) => AsyncEvent::CqError { cq },
        (ty::PORT_ACTIVE, _) => AsyncEvent::PortActive { port },
        (ty::PORT_ERR, _) => AsyncEvent::PortError { port },
        (ty::GID_CHANGE, _) => AsyncEvent::GidChange { port },
        (ty::DEVICE_FATAL, _) => AsyncEvent::DeviceFatal,
        (t, _) => AsyncEvent::Other { event_type: t },
    }
}

/// `struct ibv_async_event` read with its type as a plain integer (so a value this
/// build does not know is not an invalid Rust enum).
#[repr(C)]
struct RawAsyncEvent {
    element: RawElement,
    event_type: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
union RawElement {
    ptr: *mut libc::c_void,
    port_num: libc::c_int,
}

const _: () = assert!(
    std::mem::size_of::<RawAsyncEvent>() == std::mem::size_of::<ibv_async_event>()
        && std::mem::align_of::<RawAsyncEvent>() == std::mem::align_of::<ibv_async_event>()
);

#[derive(Default)]
struct Inner {
    /// Object pointer -> (poll group, handle).
    routes: HashMap<usize, (u32, Owned)>,
    /// Per poll group: events not yet handed out.
    queues: Vec<VecDeque<AsyncEvent>>,
    /// Events read for objects no group owns any more (acknowledged and dropped).
    unrouted: u64,
}

/// The device's router of async events to its poll groups.
pub struct AsyncRouter {
    inner: Mutex<Inner>,
}

impl AsyncRouter {
    /// A router for `groups` poll groups.
    pub fn new(groups: u32) -> Self {
        AsyncRouter {
            inner: Mutex::new(Inner {
                queues: (0..groups).map(|_| VecDeque::new()).collect(),
                ..Default::default()
            }),
        }
    }

    /// Routes events of the object at `ptr` to `group` as `owned`.
    pub fn register(&self, ptr: *const libc::c_void, group: u32, owned: Owned) {
        self.inner
            .lock()
            .routes
            .insert(ptr as usize, (group, owned));
    }

    /// Stops routing events of the object at `ptr` (it is being destroyed).
    pub fn unregister(&self, ptr: *const libc::c_void) {
        self.inner.lock().routes.remove(&(ptr as usize));
    }

    /// Drops what is queued for `group` (its context closes).
    pub fn clear(&self, group: u32) {
        if let Some(q) = self.inner.lock().queues.get_mut(group as usize) {
            q.clear();
        }
    }

    /// The next event of `group`, if any.
    pub fn pop(&self, group: u32) -> Option<AsyncEvent> {
        self.inner
            .lock()
            .queues
            .get_mut(group as usize)?
            .pop_front()
    }

    /// Whether `group` has events waiting.
    pub fn pending(&self, group: u32) -> bool {
        self.inner
            .lock()
            .queues
            .get(group as usize)
            .is_some_and(|q| !q.is_empty())
    }

    /// Reads every pending event of the device (`ibv_get_async_event` on the
    /// non-blocking async descriptor), acknowledges each (`ibv_ack_async_event`) and
    /// queues it for its group (port and device events for all). Returns how many were
    /// read.
    ///
    /// # Safety
    /// `ctx` is a live device context whose async descriptor is non-blocking.
    pub unsafe fn drain(&self, ctx: *mut ibv_context) -> usize {
        let mut n = 0;
        let mut inner = self.inner.lock();
        loop {
            let mut ev = std::mem::MaybeUninit::<RawAsyncEvent>::zeroed();
            let p = ev.as_mut_ptr() as *mut ibv_async_event;
            if ibv_get_async_event(ctx, p) != 0 {
                return n;
            }
            n += 1;
            let raw = ev.assume_init_ref();
            let t = raw.event_type;
            let (owned_at, port) = match element_of(t) {
                Element::Qp | Element::Srq | Element::Cq => {
                    (inner.routes.get(&(raw.element.ptr as usize)).copied(), 0)
                }
                Element::Port => (None, raw.element.port_num as u8),
                Element::None => (None, 0),
            };
            ibv_ack_async_event(p);
            match (element_of(t), owned_at) {
                (Element::Qp | Element::Srq | Element::Cq, Some((group, owned))) => {
                    let e = to_async_event(t, Some(owned), 0);
                    if let Some(q) = inner.queues.get_mut(group as usize) {
                        q.push_back(e);
                    }
                }
                (Element::Qp | Element::Srq | Element::Cq, None) => inner.unrouted += 1,
                _ => {
                    let e = to_async_event(t, None, port);
                    for q in &mut inner.queues {
                        q.push_back(e);
                    }
                }
            }
            tracing::debug!(event_type = t, "async event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_sys::ibv_event_type as E;

    #[test]
    fn event_type_values_are_rdma_cores() {
        assert_eq!(E::IBV_EVENT_SRQ_LIMIT_REACHED as u32, ty::SRQ_LIMIT_REACHED);
        assert_eq!(E::IBV_EVENT_QP_FATAL as u32, ty::QP_FATAL);
        assert_eq!(E::IBV_EVENT_CQ_ERR as u32, ty::CQ_ERR);
        assert_eq!(E::IBV_EVENT_PORT_ACTIVE as u32, ty::PORT_ACTIVE);
        assert_eq!(E::IBV_EVENT_PORT_ERR as u32, ty::PORT_ERR);
        assert_eq!(E::IBV_EVENT_GID_CHANGE as u32, ty::GID_CHANGE);
        assert_eq!(E::IBV_EVENT_DEVICE_FATAL as u32, ty::DEVICE_FATAL);
        assert_eq!(
            E::IBV_EVENT_QP_LAST_WQE_REACHED as u32,
            ty::QP_LAST_WQE_REACHED
        );
        assert_eq!(E::IBV_EVENT_COMM_EST as u32, ty::COMM_EST);
        assert_eq!(E::IBV_EVENT_SRQ_ERR as u32, ty::SRQ_ERR);
    }

    #[test]
    fn events_map_to_the_owned_object() {
        let srq = Srq(2);
        assert_eq!(
            to_async_event(ty::SRQ_LIMIT_REACHED, Some(Owned::Srq(srq)), 0),
            AsyncEvent::SrqLimitReached { srq }
        );
        assert_eq!(element_of(ty::SRQ_LIMIT_REACHED), Element::Srq);
        let qp = Qp(0x11);
        assert_eq!(
            to_async_event(ty::QP_FATAL, Some(Owned::Qp(qp)), 0),
            AsyncEvent::QpFatal { qp }
        );
        assert_eq!(element_of(ty::QP_LAST_WQE_REACHED), Element::Qp);
        assert_eq!(
            to_async_event(ty::PORT_ERR, None, 1),
            AsyncEvent::PortError { port: 1 }
        );
        assert_eq!(element_of(ty::GID_CHANGE), Element::Port);
        assert_eq!(
            to_async_event(ty::DEVICE_FATAL, None, 0),
            AsyncEvent::DeviceFatal
        );
        assert_eq!(element_of(19), Element::None);
        assert_eq!(
            to_async_event(19, None, 0),
            AsyncEvent::Other { event_type: 19 }
        );
    }

    #[test]
    fn router_queues_per_group() {
        let r = AsyncRouter::new(2);
        let p = 0x1000 as *const libc::c_void;
        r.register(p, 1, Owned::Srq(Srq(0)));
        assert!(!r.pending(1));
        r.inner.lock().queues[1].push_back(AsyncEvent::DeviceFatal);
        assert!(r.pending(1) && !r.pending(0));
        assert_eq!(r.pop(1), Some(AsyncEvent::DeviceFatal));
        assert_eq!(r.pop(1), None);
        assert_eq!(r.pop(7), None);
        r.unregister(p);
        assert!(r.inner.lock().routes.is_empty());
    }
}

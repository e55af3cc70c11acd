//! The verbs provider: the verbs model on a real RDMA device through libibverbs and
//! librdmacm (`rdma-sys`), behind the `verbs` cargo feature. A Linux RNIC driver or
//! Soft-RoCE (`rdma_rxe`) supplies the device.
//!
//! One file per noun, each naming the C calls it wraps:
//! - [`device`]: `rdma_get_devices` / `ibv_query_device` / `ibv_query_port`: the device
//!   whose RoCEv2 GID is the configured IP address ([`VerbsDevice`]), its
//!   capabilities ([`DeviceCaps`](crate::verbs::DeviceCaps)) and the device list
//!   ([`devices`]), with a typed "no RDMA devices" error where there are none.
//! - [`port`]: port attributes (`ibv_query_port`).
//! - [`gid`]: the sysfs GID table and RoCEv2 GID selection (pure, unit-tested; it is
//!   [`crate::sysfs::gid`], built without the `verbs` feature too).
//! - [`pd`], [`mr`], [`mw`]: protection domains, memory regions (pinned memory counted
//!   against `RLIMIT_MEMLOCK` first, in the process's [`crate::memlock::PinBudget`]),
//!   type 2 memory windows.
//! - [`cq`], [`srq`], [`qp`]: completion queues with a completion channel, SRQs with
//!   limit events, RC QPs (attribute mapping and the state machine checks).
//! - [`wr`], [`wc`]: work requests built on the stack, work completions mapped one to one.
//! - [`event`]: asynchronous events (`ibv_get_async_event`) routed to poll groups.
//! - [`context`]: a poll group ([`VerbsContext`]): the tables from handles to `ibv_*`
//!   objects and the sleep on the completion channel.
//! - [`cm`]: librdmacm ([`VerbsCm`]): an event channel thread turning `rdma_cm` events
//!   into [`CmEvent`](crate::cm::CmEvent)s, connect / accept / reject / disconnect.
//!
//! [`VerbsProvider`] names the family for the provider traits
//! ([`crate::verbs::provider`]): [`VerbsDevice`], [`VerbsContext`], [`VerbsMr`] and
//! [`VerbsCm`] implement them (bring them into scope, `use transport::verbs::{Context as
//! _, ...}`, to call their methods).
pub mod cm;
pub mod context;
pub mod cq;
pub mod device;
pub mod event;
pub mod mr;
pub mod mw;
pub mod pd;
pub mod port;
pub mod qp;
pub mod srq;
mod sys;
pub mod wc;
pub mod wr;

/// The sysfs GID table and RoCEv2 GID selection, which need no libibverbs: it lives in
/// [`crate::sysfs::gid`] (the tools read it without the `verbs` feature).
pub use crate::sysfs::gid;
pub use cm::VerbsCm;
pub use context::VerbsContext;
pub use device::{devices, DeviceConfig, DeviceError, DeviceInfo, VerbsDevice};
pub use gid::{GidEntry, GidError, GidType};
pub use mr::VerbsMr;
pub use port::PortInfo;

/// The verbs provider: a real RDMA device through libibverbs and librdmacm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerbsProvider;

impl crate::verbs::Provider for VerbsProvider {
    type Device = VerbsDevice;
    type Context = VerbsContext;
    type Mr = VerbsMr;
    type Cm = VerbsCm;
    type DeviceConfig = DeviceConfig;
    type OpenError = DeviceError;
    /// The verbs provider has no options of its own.
    type Options = ();
    const NAME: &'static str = "verbs";
    /// `ibv_reg_mr` pins the pages (see [`VerbsMr`]).
    const PINS_REGISTERED_MEMORY: bool = true;

    /// [`DeviceConfig::new`] with `poll_groups` poll groups (at least 1).
    fn device_config(ip: std::net::IpAddr, poll_groups: u32) -> DeviceConfig {
        DeviceConfig {
            poll_groups: poll_groups.max(1),
            ..DeviceConfig::new(ip)
        }
    }

    /// [`Provider::device_config`](crate::verbs::Provider::device_config): there are no options.
    fn device_config_with(ip: std::net::IpAddr, poll_groups: u32, _options: &()) -> DeviceConfig {
        Self::device_config(ip, poll_groups)
    }

    /// [`DeviceConfig::roce_mtu`]: checked against the port's active MTU when the
    /// device opens (a larger one is refused with [`DeviceError::RoceMtuAboveActive`],
    /// see [`device::roce_mtu_for_port`]).
    fn set_roce_mtu(
        cfg: &mut DeviceConfig,
        mtu: crate::verbs::Mtu,
    ) -> Result<(), crate::verbs::RoceMtuFixed> {
        cfg.roce_mtu = Some(mtu);
        Ok(())
    }

    /// [`VerbsDevice::open`].
    fn open(cfg: &DeviceConfig) -> Result<std::sync::Arc<VerbsDevice>, DeviceError> {
        VerbsDevice::open(cfg)
    }
}

/// The thread-safety the provider traits ask for, checked at compile time: a device,
/// an MR and the CM are shared across threads; a poll group moves to its thread.
#[allow(dead_code)]
fn _assert_thread_safety() {
    fn send_sync<T: Send + Sync + 'static>() {}
    fn send<T: Send + 'static>() {}
    fn clone<T: Clone>() {}
    send_sync::<VerbsDevice>();
    send_sync::<VerbsMr>();
    send_sync::<VerbsCm>();
    clone::<VerbsCm>();
    send::<VerbsContext>();
}

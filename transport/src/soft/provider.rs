//! The soft provider behind the provider traits ([`crate::verbs::provider`]):
//! [`SoftProvider`] names the family (`SoftDevice`, `Context`, `Mr`, `CmAgent`).
//!
//! The traits delegate to the types' own methods, whose behaviour they keep; what the
//! traits add is checked here: sizes against [`SOFT_CAPS`] (`CapabilityExceeded`),
//! errors as the traits type them, and the connection bring-up of [`super::conn`].
//! (Where an inherent method and a trait method share a name, a call on the concrete
//! type takes the inherent one: code generic over `P: Provider` gets the trait's.)
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use crossbeam::channel::Receiver;

use super::cm_agent::{CmAgent, CmAgentError};
use super::conn::{self, agent_error};
use super::context::Context as SoftContext;
use super::device::{DeviceConfig, Mr, SoftDevice, SOFT_CAPS};
use super::fault::FaultConfig;
use super::socket::SocketError;
use super::xdp::PacketPath;
use crate::cm::{AcceptParams, CmEvent, ConnId};
use crate::rc::{MrMemory, QpCounters};
use crate::verbs::connection::{
    AcceptToken, ActiveConn, ConnError, ConnRequest, ConnectRequestParams, CM_REJ_CONSUMER_DEFINED,
};
use crate::verbs::{
    AccessFlags, Ah, AhAttr, AsyncEvent, ConnectionManager, Context, Cq, Device, DeviceCaps,
    MemoryRegion, Mtu, Pd, PostReceives, Provider, Qp, QpAttr, QpCap, QpInitAttr, QpState, RecvWr,
    SendWr, Srq, VerbsError, WorkCompletion, MAX_SGE,
};

/// The soft provider's own options ([`Provider::Options`]): what its devices have and
/// no other provider's do.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SoftOptions {
    /// Receive fault injection on the device's poll groups (tests, `nvmf-bench
    /// --inject-*`; see [`crate::soft::fault`]); `None` (the default) for none.
    pub faults: Option<FaultConfig>,
    /// How the device moves its RoCEv2 packets: UDP sockets (the default) or AF_XDP
    /// (see [`crate::soft::xdp`]).
    pub packet_path: PacketPath,
    /// The RoCE MTU to use ([`DeviceConfig::roce_mtu`]); `None` (the default) from the
    /// interface MTU.
    pub roce_mtu: Option<crate::verbs::Mtu>,
}

/// The soft provider: userspace RoCEv2 over UDP sockets (see [`crate::soft`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SoftProvider;

impl Provider for SoftProvider {
    type Device = SoftDevice;
    type Context = SoftContext;
    type Mr = Mr;
    type Cm = CmAgent;
    type DeviceConfig = DeviceConfig;
    type OpenError = SocketError;
    type Options = SoftOptions;
    const NAME: &'static str = "soft";
    /// Soft regions are plain memory: nothing is pinned.
    const PINS_REGISTERED_MEMORY: bool = false;

    /// [`DeviceConfig::new`] with `poll_groups` receive queues (at least 1).
    fn device_config(ip: IpAddr, poll_groups: u32) -> DeviceConfig {
        DeviceConfig {
            rx_queues: poll_groups.max(1),
            ..DeviceConfig::new(ip)
        }
    }

    /// [`SoftProvider::device_config`] with the fault injection and packet path of
    /// `options`.
    fn device_config_with(ip: IpAddr, poll_groups: u32, options: &SoftOptions) -> DeviceConfig {
        DeviceConfig {
            faults: options.faults.or_else(FaultConfig::from_env),
            packet_path: options.packet_path.clone(),
            roce_mtu: options.roce_mtu,
            ..Self::device_config(ip, poll_groups)
        }
    }

    /// [`DeviceConfig::roce_mtu`]; checked against the interface MTU when the device
    /// opens.
    fn set_roce_mtu(
        cfg: &mut DeviceConfig,
        mtu: crate::verbs::Mtu,
    ) -> Result<(), crate::verbs::RoceMtuFixed> {
        cfg.roce_mtu = Some(mtu);
        Ok(())
    }

    /// [`SoftDevice::open`].
    fn open(cfg: &DeviceConfig) -> Result<Arc<SoftDevice>, SocketError> {
        SoftDevice::open(cfg.clone())
    }
}

/// A CM agent's start failure as a verbs error (its sockets, eventfd or thread).
fn agent_start_error(e: CmAgentError) -> VerbsError {
    let os = |call, e: &std::io::Error| VerbsError::Os {
        call,
        errno: e.raw_os_error().unwrap_or(libc::EIO),
    };
    match e {
        CmAgentError::Io(e) => os("starting the soft CM agent (eventfd, thread)", &e),
        CmAgentError::Socket(SocketError::PortInUse { .. }) => VerbsError::Os {
            call: "binding the CM agent's UDP socket",
            errno: libc::EADDRINUSE,
        },
        CmAgentError::Socket(SocketError::Bind { source, .. })
        | CmAgentError::Socket(SocketError::Setup { source, .. }) => {
            os("setting up the CM agent's UDP socket", &source)
        }
        CmAgentError::Socket(SocketError::OpenFiles(n)) => VerbsError::OpenFiles(n),
        CmAgentError::Socket(SocketError::AfXdp(_)) => {
            VerbsError::InvalidArgument("the AF_XDP packet path")
        }
        CmAgentError::Socket(SocketError::Faults { .. }) => {
            VerbsError::InvalidArgument("fault injection configuration")
        }
        CmAgentError::Socket(SocketError::RoceMtu { .. }) => {
            VerbsError::InvalidArgument("the RoCE MTU")
        }
        CmAgentError::AlreadyStarted => VerbsError::InvalidArgument(
            "the device's CM agent is stopping and has not given QP1's socket back; retry",
        ),
        CmAgentError::Cm(_) | CmAgentError::Gone => VerbsError::Os {
            call: "starting the soft CM agent",
            errno: libc::EIO,
        },
    }
}

impl Device for SoftDevice {
    type Provider = SoftProvider;

    fn ip(&self) -> IpAddr {
        SoftDevice::ip(self)
    }
    fn path_mtu(&self) -> Mtu {
        SoftDevice::path_mtu(self)
    }
    fn caps(&self) -> DeviceCaps {
        SOFT_CAPS
    }
    fn poll_groups(&self) -> u32 {
        self.rx_queues()
    }
    fn hw_counters(&self) -> Vec<(&'static str, u64)> {
        // The info socket's list, less the fault layer's own counters.
        super::info_socket::named_counters(&self.counters().snapshot())
            .into_iter()
            .filter(|(name, _)| !name.starts_with("injected_"))
            .collect()
    }
    fn alloc_pd(&self) -> Result<Pd, VerbsError> {
        Ok(SoftDevice::alloc_pd(self))
    }
    fn reg_mr(self: &Arc<Self>, pd: Pd, len: usize, access: AccessFlags) -> Result<Mr, VerbsError> {
        if len == 0 {
            return Err(VerbsError::InvalidArgument("a memory region of 0 bytes"));
        }
        SoftDevice::reg_mr(self, pd, len, access)
    }
    fn alloc_mw(&self, pd: Pd) -> Result<u32, VerbsError> {
        SoftDevice::alloc_mw(self, pd)
    }
    fn open_context(self: &Arc<Self>, index: u32) -> Result<SoftContext, VerbsError> {
        SoftDevice::open_context(self, index)
    }
    /// [`SoftDevice::cm_agent`].
    fn cm(self: &Arc<Self>) -> Result<CmAgent, VerbsError> {
        self.cm_agent().map_err(agent_start_error)
    }
}

impl MemoryRegion for Mr {
    fn lkey(&self) -> u32 {
        Mr::lkey(self)
    }
    fn rkey(&self) -> u32 {
        Mr::rkey(self)
    }
    fn addr(&self) -> u64 {
        Mr::addr(self)
    }
    fn len(&self) -> usize {
        Mr::len(self)
    }
    fn as_ptr(&self) -> *mut u8 {
        Mr::as_ptr(self)
    }
    fn pd(&self) -> Pd {
        self.pd
    }
    fn memory(&self) -> &Arc<MrMemory> {
        Mr::memory(self)
    }
}

impl Context for SoftContext {
    type Provider = SoftProvider;

    fn device(&self) -> &Arc<SoftDevice> {
        SoftContext::device(self)
    }
    fn poll_group(&self) -> u32 {
        self.rx_queue()
    }
    fn create_cq(&mut self, cqe: u32) -> Result<Cq, VerbsError> {
        SOFT_CAPS.check_cq(cqe)?;
        Ok(SoftContext::create_cq(self, cqe))
    }
    fn create_srq(&mut self, pd: Pd, max_wr: u32) -> Result<Srq, VerbsError> {
        SOFT_CAPS.check_srq(max_wr, MAX_SGE as u32)?;
        Ok(SoftContext::create_srq(self, pd, max_wr))
    }
    fn arm_srq_limit(&mut self, srq: Srq, limit: u32) -> Result<(), VerbsError> {
        SoftContext::arm_srq_limit(self, srq, limit)
    }
    fn create_qp(&mut self, attr: &QpInitAttr) -> Result<Qp, VerbsError> {
        SOFT_CAPS.check_qp_cap(&attr.cap, attr.srq.is_some())?;
        SoftContext::create_qp(self, attr)
    }
    fn create_ah(&mut self, pd: Pd, attr: &AhAttr) -> Result<Ah, VerbsError> {
        SoftContext::create_ah(self, pd, attr)
    }
    fn destroy_ah(&mut self, ah: Ah) -> Result<(), VerbsError> {
        SoftContext::destroy_ah(self, ah)
    }
    fn qp_udp_sport(&self, qp: Qp) -> Option<u16> {
        SoftContext::qp_udp_sport(self, qp)
    }
    fn qp_cap(&self, qp: Qp) -> Option<QpCap> {
        SoftContext::qp_cap(self, qp)
    }
    fn modify_qp(&mut self, qp: Qp, attr: &QpAttr) -> Result<(), VerbsError> {
        SOFT_CAPS.check_rd_atomic(attr.max_rd_atomic, attr.max_dest_rd_atomic)?;
        SoftContext::modify_qp(self, qp, attr)
    }
    fn query_qp_state(&self, qp: Qp) -> Option<QpState> {
        self.qp_state(qp)
    }
    fn destroy_qp(&mut self, qp: Qp) -> Result<(), VerbsError> {
        SoftContext::destroy_qp(self, qp)
    }
    fn post_send(&mut self, qp: Qp, wr: &SendWr) -> Result<(), VerbsError> {
        SoftContext::post_send(self, qp, wr)
    }
    fn post_send_list(&mut self, qp: Qp, wrs: &[SendWr]) -> Result<(), VerbsError> {
        SoftContext::post_send_list(self, qp, wrs)
    }
    fn post_send_deferred(&mut self, qp: Qp, wr: &SendWr) -> Result<(), VerbsError> {
        SoftContext::post_send_deferred(self, qp, wr)
    }
    fn post_recv(&mut self, qp: Qp, wr: &RecvWr) -> Result<(), VerbsError> {
        SoftContext::post_recv(self, qp, wr)
    }
    fn post_srq_recv(&mut self, srq: Srq, wr: &RecvWr) -> Result<(), VerbsError> {
        SoftContext::post_srq_recv(self, srq, wr)
    }
    fn poll_cq(&mut self, cq: Cq, out: &mut [WorkCompletion]) -> usize {
        SoftContext::poll_cq(self, cq, out)
    }
    fn poll_async_event(&mut self) -> Option<AsyncEvent> {
        SoftContext::poll_async_event(self)
    }
    fn req_notify_cq(&mut self, cq: Cq) -> Result<(), VerbsError> {
        SoftContext::req_notify_cq(self, cq)
    }
    fn wait(&mut self, timeout: Duration) {
        SoftContext::wait(self, timeout)
    }
    fn progress(&mut self) -> usize {
        SoftContext::progress(self)
    }
    fn set_deferred_transmit(&mut self, on: bool) {
        SoftContext::set_deferred_transmit(self, on)
    }
    fn flush_deferred(&mut self) {
        SoftContext::flush_deferred(self)
    }
    fn qp_counters(&self, qp: Qp) -> Option<QpCounters> {
        SoftContext::qp_counters(self, qp).copied()
    }
}

impl ConnectionManager for CmAgent {
    type Provider = SoftProvider;

    fn listen(&self, port: u16) -> Result<Receiver<CmEvent>, ConnError> {
        CmAgent::listen(self, port).map_err(agent_error)
    }
    fn unlisten(&self, port: u16) -> Result<bool, ConnError> {
        CmAgent::unlisten(self, port).map_err(agent_error)
    }
    /// See [`super::conn`]: the QP is created and brought to RTS here, in the poll
    /// group (the CM agent is not involved until `accept`).
    fn create_accept_qp(
        &self,
        ctx: &mut SoftContext,
        req: &ConnRequest,
        init: &QpInitAttr,
        ord: u8,
    ) -> Result<(Qp, AcceptToken), ConnError> {
        conn::create_accept_qp(ctx, req, init, ord)
    }
    fn accept(
        &self,
        req: ConnId,
        token: AcceptToken,
        private_data: &[u8],
    ) -> Result<(), ConnError> {
        let p = AcceptParams {
            local_qpn: token.qpn,
            starting_psn: token.starting_psn,
            responder_resources: token.responder_resources,
            initiator_depth: token.initiator_depth,
            rnr_retry_count: token.rnr_retry_count,
            private_data: private_data.to_vec(),
        };
        CmAgent::accept(self, req, p).map_err(agent_error)
    }
    fn reject(&self, req: ConnId, private_data: &[u8]) -> Result<(), ConnError> {
        CmAgent::reject(self, req, CM_REJ_CONSUMER_DEFINED, private_data).map_err(agent_error)
    }
    fn connect(
        &self,
        ctx: &mut SoftContext,
        init: &QpInitAttr,
        params: &ConnectRequestParams,
        post_receives: &mut PostReceives<'_, SoftContext>,
    ) -> Result<ActiveConn, ConnError> {
        conn::connect(self, ctx, init, params, post_receives)
    }
    fn disconnect(&self, id: ConnId) -> Result<(), ConnError> {
        CmAgent::disconnect(self, id).map_err(agent_error)
    }
}

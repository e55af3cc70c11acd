//! Ports of a device: `ibv_query_port` and the port's GID table from sysfs.
use std::path::Path;

use rdma_sys::{___ibv_query_port, ibv_context, ibv_port_attr, ibv_port_state};

use super::gid::{read_gid_table, GidEntry};
use super::sys::rc_err;
use crate::verbs::{Mtu, VerbsError};

/// What `ibv_query_port` says of one port, with its used GID entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// The port (1-based).
    pub port: u8,
    /// `enum ibv_port_state` value (4 = IBV_PORT_ACTIVE).
    pub state: u32,
    /// Largest MTU the port supports.
    pub max_mtu: Option<Mtu>,
    /// MTU in use (for RoCE derived from the netdev's MTU).
    pub active_mtu: Option<Mtu>,
    /// 1 = InfiniBand, 2 = Ethernet (RoCE), 0 = unspecified.
    pub link_layer: u8,
    /// Slots of the GID table.
    pub gid_tbl_len: u32,
    /// Largest message in bytes.
    pub max_msg_sz: u32,
    /// The used GID entries (from sysfs; empty if unreadable).
    pub gids: Vec<GidEntry>,
}

impl PortInfo {
    /// Whether the port is IBV_PORT_ACTIVE.
    pub fn is_active(&self) -> bool {
        self.state == ibv_port_state::IBV_PORT_ACTIVE
    }

    /// The ibverbs name of the state (`PORT_ACTIVE`, `PORT_DOWN`, ...).
    pub fn state_name(&self) -> &'static str {
        state_name(self.state)
    }
}

/// The ibverbs name of an `enum ibv_port_state` value.
pub fn state_name(state: u32) -> &'static str {
    use ibv_port_state::*;
    match state {
        IBV_PORT_NOP => "PORT_NOP",
        IBV_PORT_DOWN => "PORT_DOWN",
        IBV_PORT_INIT => "PORT_INIT",
        IBV_PORT_ARMED => "PORT_ARMED",
        IBV_PORT_ACTIVE => "PORT_ACTIVE",
        IBV_PORT_ACTIVE_DEFER => "PORT_ACTIVE_DEFER",
        _ => "PORT_UNKNOWN",
    }
}

/// Queries `port` of the device (`ibv_query_port`) and reads its GID table below
/// `sysfs_root` (normally [`super::gid::SYSFS_INFINIBAND`]).
///
/// # Errors
/// [`VerbsError::Os`] from `ibv_query_port`: EINVAL (no such port), ENOMEM.
///
/// # Safety
/// `ctx` is a live device context whose device is named `device`.
pub unsafe fn query(
    ctx: *mut ibv_context,
    device: &str,
    port: u8,
    sysfs_root: &Path,
) -> Result<PortInfo, VerbsError> {
    let mut a: ibv_port_attr = std::mem::zeroed();
    let rc = ___ibv_query_port(ctx, port, &mut a);
    if rc != 0 {
        return Err(rc_err("ibv_query_port", rc));
    }
    let mtu = |v: u32| u8::try_from(v).ok().and_then(Mtu::from_code);
    Ok(PortInfo {
        port,
        state: a.state,
        max_mtu: mtu(a.max_mtu),
        active_mtu: mtu(a.active_mtu),
        link_layer: a.link_layer,
        gid_tbl_len: u32::try_from(a.gid_tbl_len).unwrap_or(0),
        max_msg_sz: a.max_msg_sz,
        gids: read_gid_table(sysfs_root, device, port).unwrap_or_default(),
    })
}

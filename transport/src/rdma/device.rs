//! RDMA devices: the list librdmacm opened (`rdma_get_devices`, so that cm_ids and our
//! PDs, CQs and QPs share one `ibv_context` per device, as SPDK does), their
//! capabilities (`ibv_query_device`) and ports, and [`VerbsDevice`]: the device whose
//! RoCE v2 GID is the configured IP address, with its PDs, MRs, MWs, poll groups and
//! connection manager.
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use rdma_sys::{
    ibv_context, ibv_device_attr, ibv_get_device_name, ibv_mr, ibv_mw, ibv_pd, ibv_query_device,
    ibv_query_gid, rdma_free_devices, rdma_get_devices,
};

use super::cm::VerbsCm;
use super::context::VerbsContext;
use super::event::AsyncRouter;
use super::gid::{self, GidEntry, GidError, SYSFS_INFINIBAND};
use super::mr::VerbsMr;
use super::port::{self, PortInfo};
use super::qp::PathInfo;
use super::sys::{carray, cstr, errno, rc_err, set_nonblocking};
use super::wr::KeyResolver;
use super::VerbsProvider;
use super::{mw, pd};
use crate::verbs::{AccessFlags, Device, DeviceCaps, Mtu, Pd, VerbsError};

/// How to open a verbs device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceConfig {
    /// The local address: the device and port whose GID table has a RoCE v2 entry for
    /// it are opened.
    pub ip: IpAddr,
    /// Number of poll groups (contexts) to be opened with [`VerbsDevice::open_context`].
    pub poll_groups: u32,
    /// Where the GID tables are read (default [`SYSFS_INFINIBAND`]).
    pub sysfs_root: PathBuf,
    /// A RoCE MTU chosen by the user (`Provider::set_roce_mtu`): connections then run
    /// at it rather than at the port's active MTU, which it must not exceed (checked
    /// when the device opens, [`roce_mtu_for_port`]). `None`: the active MTU.
    pub roce_mtu: Option<Mtu>,
}

impl DeviceConfig {
    /// One poll group on `ip`, GID tables from `/sys/class/infiniband`.
    pub fn new(ip: IpAddr) -> Self {
        DeviceConfig {
            ip,
            poll_groups: 1,
            sysfs_root: PathBuf::from(SYSFS_INFINIBAND),
            roce_mtu: None,
        }
    }
}

/// Why a device could not be opened.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// A verbs call failed; [`VerbsError::NoDevice`] when there is no RDMA device at all.
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    /// No RoCE v2 GID for the address (the tables looked at are named).
    #[error(transparent)]
    Gid(#[from] GidError),
    /// The port of the address is not active.
    #[error("{device} port {port} is {state}, not PORT_ACTIVE: check the link of its netdev (`rdma link`, `ip link`)")]
    PortNotActive {
        device: String,
        port: u8,
        state: &'static str,
    },
    /// The RoCE MTU chosen is above the port's active MTU.
    #[error(
        "RoCE MTU {asked} on {device} port {port}: the port's active MTU is {active} (it follows \
         the MTU of the port's netdev); choose a RoCE MTU of {active} or less, or raise the \
         netdev's MTU (ip link set dev IFACE mtu {need}) so the port offers {asked}",
        need = asked + 108
    )]
    RoceMtuAboveActive {
        device: String,
        port: u8,
        asked: u32,
        active: u32,
    },
    /// sysfs lists the device but librdmacm did not open it.
    #[error("{device} has the GID of {ip} in sysfs but librdmacm has no context for it (devices: {opened}); is its user-space provider (libibverbs-d / ibverbs-providers) installed?")]
    NotOpened {
        device: String,
        ip: IpAddr,
        opened: String,
    },
}

/// The path MTU of a port whose active MTU is `active` when the user chose `asked`
/// (`Provider::set_roce_mtu`): `asked` when it is not above `active` (a smaller MTU is
/// the user's to choose), `active` without a choice.
///
/// # Errors
/// [`DeviceError::RoceMtuAboveActive`] (naming `device` and `port`) for an `asked`
/// above `active`: the port cannot carry it.
pub fn roce_mtu_for_port(
    asked: Option<Mtu>,
    active: Mtu,
    device: &str,
    port: u8,
) -> Result<Mtu, DeviceError> {
    match asked {
        Some(m) if m > active => Err(DeviceError::RoceMtuAboveActive {
            device: device.to_string(),
            port,
            asked: m.bytes(),
            active: active.bytes(),
        }),
        Some(m) => Ok(m),
        None => Ok(active),
    }
}

/// The message of [`VerbsError::NoDevice`] when librdmacm finds no device.
fn no_devices(why: &str) -> VerbsError {
    VerbsError::NoDevice(format!(
        "no RDMA devices: rdma_get_devices found none ({why}); is rdma_rxe or the RNIC \
         driver loaded? check `rdma link` and {SYSFS_INFINIBAND} (Soft-RoCE: `rdma link \
         add rxe0 type rxe netdev eth0`)"
    ))
}

/// The device contexts librdmacm opened (`rdma_get_devices`), freed with
/// `rdma_free_devices` (the contexts themselves stay open for the process).
struct DeviceList {
    list: *mut *mut ibv_context,
    len: usize,
}

impl DeviceList {
    /// # Errors
    /// [`VerbsError::NoDevice`] when the list is NULL (ENODEV / ENOSYS: no RDMA in
    /// the kernel or no `/dev/infiniband/rdma_cm`) or empty.
    fn get() -> Result<DeviceList, VerbsError> {
        let mut n = 0;
        // SAFETY: writes the count; returns NULL or an array of n contexts.
        let list = unsafe { rdma_get_devices(&mut n) };
        if list.is_null() {
            let e = errno();
            return Err(no_devices(
                &std::io::Error::from_raw_os_error(e).to_string(),
            ));
        }
        let out = DeviceList {
            list,
            len: usize::try_from(n).unwrap_or(0),
        };
        if out.len == 0 {
            return Err(no_devices("the list is empty"));
        }
        Ok(out)
    }

    fn contexts(&self) -> impl Iterator<Item = *mut ibv_context> + '_ {
        // SAFETY: the array holds len contexts.
        (0..self.len).map(move |i| unsafe { *self.list.add(i) })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the array rdma_get_devices returned.
        unsafe { rdma_free_devices(self.list) };
    }
}

/// The name of a context's device (`ibv_get_device_name`).
///
/// # Safety
/// `ctx` is live.
unsafe fn device_name(ctx: *mut ibv_context) -> String {
    cstr(ibv_get_device_name((*ctx).device))
}

/// What `ibv_query_device` says, as the model's capabilities plus identification.
///
/// # Safety
/// `ctx` is live.
unsafe fn query_device(ctx: *mut ibv_context) -> Result<(DeviceCaps, ibv_device_attr), VerbsError> {
    let mut a: ibv_device_attr = std::mem::zeroed();
    let rc = ibv_query_device(ctx, &mut a);
    if rc != 0 {
        return Err(rc_err("ibv_query_device", rc));
    }
    let u = |v: i32| u32::try_from(v).unwrap_or(0);
    let caps = DeviceCaps {
        max_qp_wr: u(a.max_qp_wr),
        max_sge: u(a.max_sge),
        max_sge_rd: u(a.max_sge_rd),
        max_srq_wr: u(a.max_srq_wr),
        max_srq_sge: u(a.max_srq_sge),
        max_cqe: u(a.max_cqe),
        max_qp: u(a.max_qp),
        max_qp_rd_atom: u(a.max_qp_rd_atom),
        max_qp_init_rd_atom: u(a.max_qp_init_rd_atom),
        max_inline_data: 0,
        max_mr_size: a.max_mr_size,
        max_mr: u(a.max_mr),
        max_mw: u(a.max_mw),
        max_pd: u(a.max_pd),
        local_ca_ack_delay: a.local_ca_ack_delay,
        phys_port_cnt: a.phys_port_cnt,
    };
    Ok((caps, a))
}

/// One device as `ibv_devinfo` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device name (`rxe0`, `mlx5_0`).
    pub name: String,
    /// Firmware version text.
    pub fw_ver: String,
    /// Node GUID (host order of the big-endian value).
    pub node_guid: u64,
    /// Vendor ID (IEEE OUI; rxe reports 0xffffff).
    pub vendor_id: u32,
    /// Vendor part ID.
    pub vendor_part_id: u32,
    /// The capabilities the provider honours.
    pub caps: DeviceCaps,
    /// Its ports.
    pub ports: Vec<PortInfo>,
}

/// Every device librdmacm opened, with capabilities, ports and GID tables (read below
/// [`SYSFS_INFINIBAND`]): what `ibv_devinfo` prints.
///
/// # Errors
/// [`VerbsError::NoDevice`] when there is none; [`VerbsError::Os`] from
/// `ibv_query_device` / `ibv_query_port`.
pub fn devices() -> Result<Vec<DeviceInfo>, VerbsError> {
    let list = DeviceList::get()?;
    let root = PathBuf::from(SYSFS_INFINIBAND);
    let mut out = Vec::new();
    for ctx in list.contexts() {
        // SAFETY: contexts of the list are live for the process.
        unsafe {
            let name = device_name(ctx);
            let (caps, a) = query_device(ctx)?;
            let mut ports = Vec::new();
            for p in 1..=a.phys_port_cnt {
                ports.push(port::query(ctx, &name, p, &root)?);
            }
            out.push(DeviceInfo {
                name,
                fw_ver: carray(&a.fw_ver),
                node_guid: u64::from_be(a.node_guid),
                vendor_id: a.vendor_id,
                vendor_part_id: a.vendor_part_id,
                caps,
                ports,
            });
        }
    }
    Ok(out)
}

#[derive(Default)]
struct Keys {
    /// lkey -> MR (for memory window binds).
    mrs: HashMap<u32, *mut ibv_mr>,
    /// Key index -> memory window.
    mws: HashMap<u32, *mut ibv_mw>,
}

/// The RDMA device of one local IP address (the provider's device): see the module docs.
pub struct VerbsDevice {
    ctx: *mut ibv_context,
    name: String,
    gid: GidEntry,
    path: PathInfo,
    path_mtu: Mtu,
    caps: DeviceCaps,
    poll_groups: u32,
    pds: Mutex<Vec<*mut ibv_pd>>,
    keys: RwLock<Keys>,
    opened: Mutex<Vec<bool>>,
    events: AsyncRouter,
    cm: Mutex<Option<VerbsCm>>,
}

// SAFETY: ibverbs objects may be used from any thread (libibverbs is thread safe);
// the tables of raw pointers are behind locks.
unsafe impl Send for VerbsDevice {}
// SAFETY: see above.
unsafe impl Sync for VerbsDevice {}

impl std::fmt::Debug for VerbsDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsDevice")
            .field("name", &self.name)
            .field("gid", &self.gid.to_string())
            .field("path_mtu", &self.path_mtu)
            .finish()
    }
}

impl VerbsDevice {
    /// Opens the device whose RoCE v2 GID is `cfg.ip` (see [`gid::find_roce_v2_gid`]),
    /// on the context librdmacm opened for it, with `cfg.poll_groups` poll groups.
    ///
    /// # Errors
    /// [`DeviceError::Verbs`] with [`VerbsError::NoDevice`] when there is no RDMA device
    /// (rdma-core's ENODEV / ENOSYS); [`DeviceError::Gid`] when no port has a RoCE v2
    /// GID for the address (the message names the GID tables);
    /// [`DeviceError::PortNotActive`]; [`DeviceError::NotOpened`]; [`VerbsError::Os`]
    /// from `ibv_query_device`, `ibv_query_port`, `ibv_query_gid`.
    pub fn open(cfg: &DeviceConfig) -> Result<Arc<VerbsDevice>, DeviceError> {
        let list = DeviceList::get()?;
        let entry = match gid::find_roce_v2_gid(&cfg.sysfs_root, cfg.ip) {
            Ok(e) => e,
            Err(GidError::NoDevices { root }) => {
                return Err(no_devices(&format!(
                    "librdmacm lists devices but {} has none",
                    root.display()
                ))
                .into())
            }
            Err(e) => return Err(e.into()),
        };
        let mut names = Vec::new();
        let mut found = None;
        for ctx in list.contexts() {
            // SAFETY: contexts of the list are live for the process.
            let n = unsafe { device_name(ctx) };
            if n == entry.device {
                found = Some(ctx);
            }
            names.push(n);
        }
        let ctx = found.ok_or_else(|| DeviceError::NotOpened {
            device: entry.device.clone(),
            ip: cfg.ip,
            opened: names.join(", "),
        })?;
        // SAFETY: ctx is live for the process.
        let (caps, port) = unsafe {
            let (caps, _) = query_device(ctx)?;
            let port = port::query(ctx, &entry.device, entry.port, &cfg.sysfs_root)?;
            (caps, port)
        };
        if !port.is_active() {
            return Err(DeviceError::PortNotActive {
                device: entry.device.clone(),
                port: entry.port,
                state: port.state_name(),
            });
        }
        let path_mtu = roce_mtu_for_port(
            cfg.roce_mtu,
            port.active_mtu.unwrap_or(Mtu::Mtu1024),
            &entry.device,
            entry.port,
        )?;
        let sgid_index = u8::try_from(entry.index).map_err(|_| {
            VerbsError::InvalidArgument("GID index above 255 (the address vector holds 8 bits)")
        })?;
        // Check the sysfs entry against the device's own table.
        let mut g = rdma_sys::ibv_gid { raw: [0; 16] };
        // SAFETY: writes one GID.
        let rc = unsafe { ibv_query_gid(ctx, entry.port, entry.index as i32, &mut g) };
        if rc != 0 {
            return Err(rc_err("ibv_query_gid", rc).into());
        }
        // SAFETY: raw is the union's byte view.
        if std::net::Ipv6Addr::from(unsafe { g.raw }) != entry.gid {
            return Err(VerbsError::NoDevice(format!(
                "{} port {} GID[{}] changed while opening (sysfs {}); retry",
                entry.device, entry.port, entry.index, entry.gid
            ))
            .into());
        }
        // SAFETY: the context's async descriptor; poll groups read it without blocking.
        set_nonblocking(unsafe { (*ctx).async_fd }, "fcntl(async fd, O_NONBLOCK)")?;
        let groups = cfg.poll_groups.max(1);
        tracing::info!(device = %entry.device, port = entry.port, gid = %entry, "verbs device open");
        Ok(Arc::new(VerbsDevice {
            ctx,
            name: entry.device.clone(),
            path: PathInfo {
                port_num: entry.port,
                sgid_index,
            },
            gid: entry,
            path_mtu,
            caps,
            poll_groups: groups,
            pds: Mutex::new(Vec::new()),
            keys: RwLock::new(Keys::default()),
            opened: Mutex::new(vec![false; groups as usize]),
            events: AsyncRouter::new(groups),
            cm: Mutex::new(None),
        }))
    }

    /// The device name (`rxe0`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The GID entry in use (device, port, index, type, netdev).
    pub fn gid(&self) -> &GidEntry {
        &self.gid
    }

    /// The port and source GID index of address vectors.
    pub fn path(&self) -> PathInfo {
        self.path
    }

    pub(crate) fn raw(&self) -> *mut ibv_context {
        self.ctx
    }

    pub(crate) fn events(&self) -> &AsyncRouter {
        &self.events
    }

    /// The `ibv_pd` of `pd`.
    ///
    /// # Errors
    /// [`VerbsError::NoSuchObject`] for a PD of another device.
    pub(crate) fn pd_ptr(&self, pd: Pd) -> Result<*mut ibv_pd, VerbsError> {
        self.pds
            .lock()
            .get(pd.0 as usize)
            .copied()
            .ok_or(VerbsError::NoSuchObject)
    }

    /// Poll group `index` closed: it may be opened again.
    pub(crate) fn context_closed(&self, index: u32) {
        if let Some(o) = self.opened.lock().get_mut(index as usize) {
            *o = false;
        }
        self.events.clear(index);
    }

    pub(crate) fn remember_mr(&self, lkey: u32, mr: *mut ibv_mr) {
        self.keys.write().mrs.insert(lkey, mr);
    }

    pub(crate) fn forget_mr(&self, lkey: u32) {
        self.keys.write().mrs.remove(&lkey);
    }
}

impl Device for VerbsDevice {
    type Provider = VerbsProvider;

    /// The local IP address (its RoCE v2 GID).
    fn ip(&self) -> IpAddr {
        self.gid.ip()
    }

    /// The port's active MTU.
    fn path_mtu(&self) -> Mtu {
        self.path_mtu
    }

    /// What the device supports (`ibv_query_device`).
    fn caps(&self) -> DeviceCaps {
        self.caps
    }

    /// Number of poll groups.
    fn poll_groups(&self) -> u32 {
        self.poll_groups
    }

    /// Allocates a protection domain (`ibv_alloc_pd`).
    ///
    /// # Errors
    /// [`VerbsError::Os`]: ENOMEM.
    fn alloc_pd(&self) -> Result<Pd, VerbsError> {
        // SAFETY: the context is live.
        let p = unsafe { pd::alloc(self.ctx)? };
        let mut pds = self.pds.lock();
        pds.push(p);
        Ok(Pd(pds.len() as u32 - 1))
    }

    /// Allocates `len` bytes (page aligned, zeroed) and registers them in `pd`
    /// (`ibv_reg_mr`), after charging them to the pinned-memory budget.
    ///
    /// # Errors
    /// See [`VerbsMr`]'s registration: `InvalidArgument`, `Memlock`,
    /// `NoResources`, `Os` (ENOMEM, EINVAL, EFAULT); `NoSuchObject` for an unknown PD.
    fn reg_mr(
        self: &Arc<Self>,
        pd: Pd,
        len: usize,
        access: AccessFlags,
    ) -> Result<VerbsMr, VerbsError> {
        if len as u64 > self.caps.max_mr_size {
            return Err(VerbsError::CapabilityExceeded {
                what: "MR bytes (max_mr_size)",
                asked: u32::try_from(len).unwrap_or(u32::MAX),
                max: u32::try_from(self.caps.max_mr_size).unwrap_or(u32::MAX),
            });
        }
        let p = self.pd_ptr(pd)?;
        VerbsMr::register(self, pd, p, len, access)
    }

    /// Allocates a type 2 memory window in `pd` (`ibv_alloc_mw`); returns its (not yet
    /// valid) rkey, which also names it in `SendOp::BindMw::mw_handle`.
    ///
    /// # Errors
    /// `CapabilityExceeded` without memory windows; `Os` (EOPNOTSUPP, ENOMEM).
    fn alloc_mw(&self, pd: Pd) -> Result<u32, VerbsError> {
        let p = self.pd_ptr(pd)?;
        // SAFETY: p is live.
        let (w, rkey) = unsafe { mw::alloc(p, &self.caps)? };
        self.keys.write().mws.insert(mw::mw_index(rkey), w);
        Ok(rkey)
    }

    /// Opens poll group `index` (0-based, below `poll_groups`); each opens once at a
    /// time.
    ///
    /// # Errors
    /// `InvalidArgument` for an index out of range or already open; `Os` from
    /// `ibv_create_comp_channel`.
    fn open_context(self: &Arc<Self>, index: u32) -> Result<VerbsContext, VerbsError> {
        {
            let mut opened = self.opened.lock();
            match opened.get_mut(index as usize) {
                Some(o) if !*o => *o = true,
                _ => {
                    return Err(VerbsError::InvalidArgument(
                        "poll group already open or out of range",
                    ))
                }
            }
        }
        VerbsContext::new(self.clone(), index).inspect_err(|_| self.context_closed(index))
    }

    /// The device's connection manager (librdmacm), started on first use.
    ///
    /// # Errors
    /// [`VerbsError::NoDevice`] / `Os` when the RDMA CM event channel cannot be created
    /// (`rdma_create_event_channel`: ENODEV without `/dev/infiniband/rdma_cm`).
    fn cm(self: &Arc<Self>) -> Result<VerbsCm, VerbsError> {
        let mut cm = self.cm.lock();
        if let Some(c) = &*cm {
            return Ok(c.clone());
        }
        let c = VerbsCm::start(self)?;
        *cm = Some(c.clone());
        Ok(c)
    }
}

impl KeyResolver for VerbsDevice {
    fn mw(&self, mw_handle: u32) -> Option<*mut ibv_mw> {
        self.keys.read().mws.get(&mw::mw_index(mw_handle)).copied()
    }
    fn mr(&self, lkey: u32) -> Option<*mut ibv_mr> {
        self.keys.read().mrs.get(&lkey).copied()
    }
}

impl Drop for VerbsDevice {
    fn drop(&mut self) {
        // MRs and contexts hold the device, so only windows and PDs are left.
        for (_, w) in self.keys.get_mut().mws.drain() {
            // SAFETY: allocated here; nothing uses it after the device.
            if let Err(e) = unsafe { mw::dealloc(w) } {
                tracing::warn!(%e, "memory window");
            }
        }
        for p in self.pds.get_mut().drain(..) {
            // SAFETY: allocated here; every MR, QP and SRQ of it is gone.
            if let Err(e) = unsafe { pd::dealloc(p) } {
                tracing::warn!(%e, "protection domain");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chosen RoCE MTU is the path MTU when the port's active MTU carries it, and is
    /// refused naming the port, the active MTU and the fix when it does not.
    #[test]
    fn a_roce_mtu_is_checked_against_the_ports_active_mtu() {
        let f = |asked| roce_mtu_for_port(asked, Mtu::Mtu1024, "rxe0", 1);
        assert_eq!(f(None), Ok(Mtu::Mtu1024));
        assert_eq!(f(Some(Mtu::Mtu512)), Ok(Mtu::Mtu512));
        assert_eq!(f(Some(Mtu::Mtu1024)), Ok(Mtu::Mtu1024));
        let e = f(Some(Mtu::Mtu4096)).unwrap_err();
        assert_eq!(
            e,
            DeviceError::RoceMtuAboveActive {
                device: "rxe0".into(),
                port: 1,
                asked: 4096,
                active: 1024
            }
        );
        let m = e.to_string();
        assert!(
            m.contains("RoCE MTU 4096 on rxe0 port 1: the port's active MTU is 1024")
                && m.contains("choose a RoCE MTU of 1024 or less")
                && m.contains("ip link set dev IFACE mtu 4204"),
            "{m}"
        );
        let mut cfg = <super::super::VerbsProvider as crate::verbs::Provider>::device_config(
            "192.0.2.1".parse().unwrap(),
            1,
        );
        <super::super::VerbsProvider as crate::verbs::Provider>::set_roce_mtu(
            &mut cfg,
            Mtu::Mtu2048,
        )
        .unwrap();
        assert_eq!(cfg.roce_mtu, Some(Mtu::Mtu2048));
    }

    /// On a machine without RDMA (no rdma_cm in the kernel, as the project's build
    /// machine): a typed "no RDMA devices" error, never a crash. With devices: an
    /// address that no GID table holds is refused naming the tables.
    #[test]
    fn no_rdma_device_is_a_typed_error() {
        let ip: IpAddr = "192.0.2.77".parse().unwrap(); // TEST-NET-1, on no port
        let have_devices = !gid::list_devices(std::path::Path::new(SYSFS_INFINIBAND)).is_empty();
        let err = VerbsDevice::open(&DeviceConfig::new(ip)).unwrap_err();
        let msg = err.to_string();
        if have_devices {
            assert!(
                matches!(err, DeviceError::Gid(GidError::NoRoceV2Gid { .. })),
                "{msg}"
            );
            assert!(msg.contains("no RoCE v2 GID for 192.0.2.77"), "{msg}");
        } else {
            assert!(
                matches!(err, DeviceError::Verbs(VerbsError::NoDevice(_))),
                "{msg}"
            );
            assert!(msg.starts_with("no RDMA devices"), "{msg}");
            assert!(msg.contains("rdma link"), "{msg}");
            let list = devices().unwrap_err();
            assert!(matches!(list, VerbsError::NoDevice(_)), "{list}");
        }
    }
}

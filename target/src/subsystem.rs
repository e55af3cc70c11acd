//! NVM subsystems, their namespaces, and the registry of subsystems and live
//! controllers the command logic works on (NVMe Base 2.x §1.5 "NVM subsystem",
//! §3.1 "Controller"; NVMe over Fabrics: the dynamic controller model).
//!
//! Transport-free: the poll groups hold an `Arc<Registry>` and look controllers up
//! by CNTLID; the registry's controller table is the only shared mutable state, and
//! it is touched on Connect, teardown and the Keep Alive sweep, never per I/O.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use arc_swap::{ArcSwap, Guard};

use nvme::properties::Vs;
use nvme::status::{CommandSpecificStatus, Status};
use nvme::NVMF_DISCOVERY_NQN;
use parking_lot::Mutex;

use nvme::ana::AnaState;

use crate::ana::AnaTable;
use crate::backend::Backend;
use crate::controller::Controller;
use crate::stats::NamespaceStats;

/// Model Number (Identify Controller MN) of every subsystem unless set otherwise.
pub const DEFAULT_MODEL: &str = "nvmf-rdma";

/// Lowest controller ID handed out (nvmet's `cntlid_min`).
pub const CNTLID_MIN: u16 = 1;
/// Highest controller ID handed out: FFF0h..FFFFh are reserved (NVMe Base 2.x §5.17.2.1,
/// CNTLID; FFFFh is the dynamic-model wildcard of Connect).
pub const CNTLID_MAX: u16 = 0xFFEF;

/// Port ID (PORTID) of the first listen address in the discovery log page; listen
/// address `i` (0-based, in configuration order) is port `PORT_ID + i` unless the
/// configuration names its `portid`.
pub const PORT_ID: u16 = 1;

/// io_uring fixed-file slots of each poll group's ring: the most namespaces a target
/// opens over its life (at start and by reloads; a slot is not reused, see
/// [`Registry::next_file_index`]).
pub const MAX_NAMESPACE_FILES: u32 = 4096;

/// One namespace of a subsystem: its NSID, the backing file, and its identifiers.
#[derive(Debug, Clone)]
pub struct NamespaceEntry {
    /// Namespace ID (1-based; 0 and FFFFFFFFh are not valid NSIDs).
    pub nsid: u32,
    /// The backing file namespace (size, block size, fd).
    pub ns: Arc<Backend>,
    /// io_uring fixed-file index of `ns` in every poll group's ring (set by the server).
    pub file_index: u32,
    /// Namespace Globally Unique Identifier (Identify Namespace NGUID and the NIDT 2
    /// descriptor).
    pub nguid: [u8; 16],
    /// Namespace UUID (the NIDT 3 descriptor), an RFC 9562 version 8 UUID unless
    /// configured.
    pub uuid: [u8; 16],
    /// IEEE Extended Unique Identifier (Identify Namespace EUI64 and the NIDT 1
    /// descriptor); all zeros: none.
    pub eui64: [u8; 8],
    /// What the poll groups served from it (the SMART / Health log's counters).
    pub stats: Arc<NamespaceStats>,
    /// Its ANA group (Identify Namespace ANAGRPID, 1..=[`crate::ana::ANAGRPMAX`]):
    /// each port's state of that group decides what its I/O gets ([`crate::ana`]).
    pub ana_grpid: u32,
}

impl NamespaceEntry {
    /// Entry `nsid` of subsystem `subnqn`, with NGUID and UUID derived from the
    /// subsystem NQN and NSID, so they stay the same across restarts (a host keys its
    /// multipath and udev names on them).
    pub fn new(nsid: u32, ns: Arc<Backend>, file_index: u32, subnqn: &str) -> Self {
        let (nguid, uuid) = derive_ids(subnqn, nsid);
        NamespaceEntry {
            nsid,
            ns,
            file_index,
            nguid,
            uuid,
            eui64: [0; 8],
            stats: Arc::new(NamespaceStats::default()),
            ana_grpid: crate::ana::DEFAULT_ANA_GRPID,
        }
    }

    /// The entry with the identifiers the configuration gives in place of the derived
    /// ones (NGUID, UUID) and the absent one (EUI-64). An all-zero value is reported
    /// as none: a zero field in Identify Namespace, no descriptor (as nvmet).
    pub fn with_ids(
        mut self,
        nguid: Option<[u8; 16]>,
        uuid: Option<[u8; 16]>,
        eui64: Option<[u8; 8]>,
    ) -> Self {
        self.nguid = nguid.unwrap_or(self.nguid);
        self.uuid = uuid.unwrap_or(self.uuid);
        self.eui64 = eui64.unwrap_or(self.eui64);
        self
    }
}

/// FNV-1a, 64-bit, over `bytes`, from `seed`.
fn fnv1a64(seed: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(seed, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
    })
}

/// NGUID and UUID for namespace `nsid` of `subnqn`: two independent 128-bit hashes.
/// The UUID gets version 8 (custom) and the RFC 9562 variant bits.
fn derive_ids(subnqn: &str, nsid: u32) -> ([u8; 16], [u8; 16]) {
    let mut input = subnqn.as_bytes().to_vec();
    input.extend_from_slice(&nsid.to_le_bytes());
    let h = |seed: u64| fnv1a64(seed, &input).to_be_bytes();
    let mut nguid = [0u8; 16];
    nguid[..8].copy_from_slice(&h(0xcbf2_9ce4_8422_2325));
    nguid[8..].copy_from_slice(&h(0x9e37_79b9_7f4a_7c15));
    let mut uuid = [0u8; 16];
    uuid[..8].copy_from_slice(&h(0x6a09_e667_f3bc_c908));
    uuid[8..].copy_from_slice(&h(0xbb67_ae85_84ca_a73b));
    uuid[6] = (uuid[6] & 0x0F) | 0x80;
    uuid[8] = (uuid[8] & 0x3F) | 0x80;
    (nguid, uuid)
}

/// A subsystem's namespace list as one snapshot, in increasing NSID order
/// ([`Subsystem::namespaces`]); a reload swaps the whole list.
pub type NamespaceList = Guard<Arc<Vec<NamespaceEntry>>>;

/// One namespace of a snapshot of its subsystem's list ([`Subsystem::namespace`]):
/// derefs to the entry; holding it keeps that snapshot (not the live list) alive.
pub struct NamespaceRef {
    list: NamespaceList,
    at: usize,
}

impl std::ops::Deref for NamespaceRef {
    type Target = NamespaceEntry;
    fn deref(&self) -> &NamespaceEntry {
        &self.list[self.at]
    }
}

impl std::fmt::Debug for NamespaceRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

/// Who may connect to a subsystem and who must authenticate (nvmet's
/// `attr_allow_any_host`, `allowed_hosts` and the hosts' DH-HMAC-CHAP keys); a reload
/// replaces it whole ([`Subsystem::set_access`]).
#[derive(Debug, Clone, Default)]
pub struct HostAccess {
    /// Every host NQN may connect (nvmet's `attr_allow_any_host`).
    pub allow_any_host: bool,
    /// Host NQNs allowed when `allow_any_host` is false.
    pub hosts: Vec<String>,
    /// DH-HMAC-CHAP policy per host NQN: a host listed here must authenticate every
    /// queue (NVMe Base 2.x §8.13; [`Subsystem::with_host_keys`]).
    pub host_keys: HashMap<String, Arc<dhchap::ControllerPolicy>>,
}

/// An NVM subsystem (NVMe Base 2.x §1.5): an NQN, the hosts allowed to connect, and
/// namespaces. Also used for the well-known discovery subsystem, which has no
/// namespaces and admits every host. The hosts and the namespaces can change while it
/// runs (a reload, [`crate::reload`]); the rest is fixed.
#[derive(Debug)]
pub struct Subsystem {
    /// NVM Subsystem NQN (Identify Controller SUBNQN, Connect SUBNQN).
    pub nqn: String,
    /// Serial Number (Identify Controller SN, 20 ASCII characters at most; longer
    /// values are cut). Derived from the NQN when the configuration gives none.
    pub serial: String,
    /// Model Number (Identify Controller MN, 40 ASCII characters at most).
    pub model: String,
    /// Firmware Revision (Identify Controller FR, 8 ASCII characters at most).
    pub firmware: String,
    /// IEEE OUI Identifier (Identify Controller IEEE, 24 bits).
    pub ieee_oui: u32,
    /// The NVMe version reported (VS property, Identify Controller VER).
    pub version: Vs,
    /// Controller IDs its controllers get (nvmet's `cntlid_min`..=`cntlid_max`).
    pub cntlids: RangeInclusive<u16>,
    /// Most I/O queues a controller is granted (nvmet's `qid_max`); the target's
    /// limit applies too. `None`: the target's limit.
    pub qid_max: Option<u16>,
    /// Who may connect ([`Subsystem::access`]).
    access: ArcSwap<HostAccess>,
    /// Namespaces in increasing NSID order ([`Subsystem::namespaces`]).
    namespaces: ArcSwap<Vec<NamespaceEntry>>,
}

impl Subsystem {
    /// A subsystem with model [`DEFAULT_MODEL`]; `namespaces` are sorted by NSID.
    /// Without a `serial`, the serial number is 16 hexadecimal digits derived from the
    /// NQN (stable across restarts; nvmet draws a random one).
    pub fn new(
        nqn: String,
        serial: impl Into<Option<String>>,
        allow_any_host: bool,
        hosts: Vec<String>,
        mut namespaces: Vec<NamespaceEntry>,
    ) -> Self {
        namespaces.sort_by_key(|n| n.nsid);
        let serial = serial
            .into()
            .unwrap_or_else(|| format!("{:016x}", fnv1a64(0xcbf2_9ce4_8422_2325, nqn.as_bytes())));
        Subsystem {
            nqn,
            serial,
            model: DEFAULT_MODEL.to_string(),
            firmware: crate::admin::FIRMWARE_REVISION.to_string(),
            ieee_oui: 0,
            version: crate::fabrics::VERSION,
            cntlids: CNTLID_MIN..=CNTLID_MAX,
            qid_max: None,
            access: ArcSwap::from_pointee(HostAccess {
                allow_any_host,
                hosts,
                host_keys: HashMap::new(),
            }),
            namespaces: ArcSwap::from_pointee(namespaces),
        }
    }

    /// The subsystem with `keys`: the DH-HMAC-CHAP policy of each host that must
    /// authenticate.
    pub fn with_host_keys(self, keys: HashMap<String, Arc<dhchap::ControllerPolicy>>) -> Self {
        let mut access = HostAccess::clone(&self.access.load());
        access.host_keys = keys;
        self.set_access(access);
        self
    }

    /// The authentication policy of `hostnqn`, if it must authenticate.
    pub fn auth_policy(&self, hostnqn: &str) -> Option<Arc<dhchap::ControllerPolicy>> {
        self.access.load().host_keys.get(hostnqn).cloned()
    }

    /// Who may connect now.
    pub fn access(&self) -> Arc<HostAccess> {
        self.access.load_full()
    }

    /// Replaces who may connect (a reload): later Connects are checked against
    /// `access`; controllers already connected stay.
    pub fn set_access(&self, access: HostAccess) {
        self.access.store(Arc::new(access));
    }

    /// The namespaces now, in increasing NSID order (a snapshot: a reload does not
    /// change it under the caller).
    pub fn namespaces(&self) -> NamespaceList {
        self.namespaces.load()
    }

    /// Replaces the namespace list (a reload); `namespaces` are sorted by NSID. A
    /// command already parsed against the old list keeps its snapshot; later ones see
    /// the new list (a removed NSID: Invalid Namespace or Format).
    pub fn set_namespaces(&self, mut namespaces: Vec<NamespaceEntry>) {
        namespaces.sort_by_key(|n| n.nsid);
        self.namespaces.store(Arc::new(namespaces));
    }

    /// The well-known discovery subsystem (NQN [`NVMF_DISCOVERY_NQN`], NVMe over
    /// Fabrics §5): no namespaces, every host allowed.
    pub fn discovery() -> Self {
        Subsystem::new(
            NVMF_DISCOVERY_NQN.to_string(),
            None,
            true,
            Vec::new(),
            Vec::new(),
        )
    }

    /// Whether this is the discovery subsystem.
    pub fn is_discovery(&self) -> bool {
        self.nqn == NVMF_DISCOVERY_NQN
    }

    /// The active namespace `nsid`, if any.
    pub fn namespace(&self, nsid: u32) -> Option<NamespaceRef> {
        let list = self.namespaces.load();
        let at = list.iter().position(|n| n.nsid == nsid)?;
        Some(NamespaceRef { list, at })
    }

    /// Whether `hostnqn` may connect: any host when `allow_any_host` or for the
    /// discovery subsystem (as nvmet), else only the listed hosts.
    pub fn host_allowed(&self, hostnqn: &str) -> bool {
        let a = self.access.load();
        a.allow_any_host || self.is_discovery() || a.hosts.iter().any(|h| h == hostnqn)
    }

    /// Largest active NSID, 0 without namespaces (Identify Controller NN).
    pub fn max_nsid(&self) -> u32 {
        self.namespaces
            .load()
            .iter()
            .map(|n| n.nsid)
            .max()
            .unwrap_or(0)
    }
}

/// One address the target listens on (nvmet's port): reported in the discovery log
/// page (TRADDR, TRSVCID, ADRFAM, PORTID), with the subsystems it serves and its
/// referrals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    /// Transport address (IPv4 or IPv6).
    pub traddr: IpAddr,
    /// Transport service ID: the RDMA CM port (4420 by default).
    pub trsvcid: u16,
    /// Port ID (PORTID).
    pub portid: u16,
    /// NQNs of the subsystems served here; `None`: every subsystem (and the
    /// discovery log page then lists every port that also serves every subsystem).
    pub subsystems: Option<Vec<String>>,
    /// Discovery services the discovery log page read here refers hosts to.
    pub referrals: Vec<Referral>,
    /// The ANA groups this port configures, with their states at start; every other
    /// group is optimized here ([`crate::ana`]).
    pub ana_groups: Vec<(u32, AnaState)>,
    /// A reload removed this listen entry: nothing connects or is listed here any more
    /// (the slot stays so the later ports keep their indices; [`Registry::set_ports`]).
    pub removed: bool,
}

/// A referral to another RDMA discovery service (Discovery Log Page Entry SUBTYPE 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Referral {
    /// Its address (TRADDR).
    pub traddr: IpAddr,
    /// Its RDMA CM port (TRSVCID).
    pub trsvcid: u16,
    /// Its port ID (PORTID).
    pub portid: u16,
}

impl PortInfo {
    /// Port [`PORT_ID`] on `traddr`:`trsvcid`, serving every subsystem, no referrals.
    pub fn new(traddr: IpAddr, trsvcid: u16) -> PortInfo {
        PortInfo {
            traddr,
            trsvcid,
            portid: PORT_ID,
            subsystems: None,
            referrals: Vec::new(),
            ana_groups: Vec::new(),
            removed: false,
        }
    }

    /// Whether subsystem `nqn` is served on this port.
    pub fn serves(&self, nqn: &str) -> bool {
        !self.removed
            && self
                .subsystems
                .as_ref()
                .is_none_or(|list| list.iter().any(|s| s == nqn))
    }
}

/// Sizes the target advertises and enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest I/O queue in entries (1's based): CAP.MQES = this - 1; Connect SQSIZE
    /// (0's based) must be below it.
    pub max_queue_size: u16,
    /// Most I/O queues one controller may have (Number of Queues feature); at least 1.
    pub max_io_queues: u16,
    /// Largest data transfer in bytes (Identify Controller MDTS = log2(this / 4096),
    /// 0 meaning no limit when this is 0).
    pub mdts_bytes: u32,
    /// In-capsule data bytes an I/O command capsule may carry after the SQE
    /// (IOCCSZ = (64 + this) / 16; SGLS bit 20 when non-zero).
    pub in_capsule_bytes: u32,
    /// Identify Controller MAXCMD: most outstanding commands per queue.
    pub max_cmd: u16,
    /// Keep Alive Timeout in ms a discovery controller gets when its Connect asks for
    /// none (KATO 0), so an abandoned discovery session is reaped (nvmet's
    /// `NVMET_DISC_KATO_MS`); 0 leaves such a controller without a timer. I/O
    /// controllers always keep the KATO of their Connect (0 = no timer).
    pub discovery_kato_ms: u32,
}

impl Default for Limits {
    /// nvmet-rdma's values: 128-entry queues, 1 MiB MDTS, 4 KiB in-capsule data,
    /// 120 s discovery KATO.
    fn default() -> Self {
        Limits {
            max_queue_size: 128,
            max_io_queues: 8,
            mdts_bytes: 1 << 20,
            in_capsule_bytes: 4096,
            max_cmd: 128,
            discovery_kato_ms: crate::controller::DISCOVERY_KATO_MS,
        }
    }
}

/// Subsystems, the ports, limits, and the live controllers by CNTLID.
#[derive(Debug)]
pub struct Registry {
    /// NVM subsystems (not the discovery subsystem): [`Registry::subsystems`].
    subsystems: ArcSwap<Vec<Arc<Subsystem>>>,
    /// The discovery subsystem.
    pub discovery: Arc<Subsystem>,
    /// Whether the discovery subsystem is served: when false, [`Registry::lookup`]
    /// does not find it, so a Connect to it is refused as one to an unknown NQN.
    pub serve_discovery: bool,
    /// The addresses the target listens on (at least one), in configuration order;
    /// a queue knows its port by index in this list ([`Registry::ports`]).
    ports: ArcSwap<Vec<PortInfo>>,
    /// Advertised and enforced sizes.
    pub limits: Limits,
    /// When the registry (the target) started: the SMART log's Power On Hours.
    pub started: Instant,
    /// Refused connections by reason (Fabrics Connects and RDMA CM requests), for the
    /// metrics endpoint ([`crate::metrics::refusals`]).
    pub refusals: crate::metrics::ConnectRefusals,
    /// Every port's ANA state of every group ([`crate::ana`]), from the ports'
    /// `ana_groups` and the namespaces' groups.
    pub ana: AnaTable,
    controllers: Mutex<ControllerTable>,
    genctr: AtomicU64,
    /// The next io_uring fixed-file index a namespace gets ([`Registry::next_file_index`]).
    next_file: AtomicU32,
}

#[derive(Debug)]
struct ControllerTable {
    by_id: BTreeMap<u16, Arc<Controller>>,
    /// Where the next CNTLID search starts (round robin, so an ID is not reused
    /// right after its controller went away).
    next: u16,
}

impl Registry {
    /// A registry of `subsystems` (plus the discovery subsystem, served) on one `port`.
    pub fn new(subsystems: Vec<Arc<Subsystem>>, port: PortInfo, limits: Limits) -> Arc<Registry> {
        Registry::with_ports(subsystems, vec![port], limits, true)
    }

    /// A registry of `subsystems` reachable on each of `ports`; the discovery
    /// subsystem answers Connects only when `serve_discovery`.
    pub fn with_ports(
        subsystems: Vec<Arc<Subsystem>>,
        ports: Vec<PortInfo>,
        limits: Limits,
        serve_discovery: bool,
    ) -> Arc<Registry> {
        let next_file = subsystems
            .iter()
            .flat_map(|s| {
                s.namespaces()
                    .iter()
                    .map(|n| n.file_index + 1)
                    .collect::<Vec<_>>()
            })
            .max()
            .unwrap_or(0);
        let ana_ports: Vec<_> = (ports.iter())
            .map(|p| (p.portid, p.ana_groups.clone()))
            .collect();
        let ns_groups = (subsystems.iter())
            .flat_map(|s| {
                s.namespaces()
                    .iter()
                    .map(|n| n.ana_grpid)
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>();
        Arc::new(Registry {
            ana: AnaTable::new(&ana_ports, ns_groups),
            subsystems: ArcSwap::from_pointee(subsystems),
            discovery: Arc::new(Subsystem::discovery()),
            serve_discovery,
            ports: ArcSwap::from_pointee(ports),
            limits,
            started: Instant::now(),
            refusals: crate::metrics::ConnectRefusals::default(),
            controllers: Mutex::new(ControllerTable {
                by_id: BTreeMap::new(),
                next: CNTLID_MIN,
            }),
            genctr: AtomicU64::new(1),
            next_file: AtomicU32::new(next_file),
        })
    }

    /// The NVM subsystems now (not the discovery subsystem), in configuration order.
    pub fn subsystems(&self) -> Guard<Arc<Vec<Arc<Subsystem>>>> {
        self.subsystems.load()
    }

    /// Replaces the NVM subsystems (a reload). Controllers of a subsystem no longer
    /// listed keep their `Arc` until the caller tears them down.
    pub fn set_subsystems(&self, subsystems: Vec<Arc<Subsystem>>) {
        self.subsystems.store(Arc::new(subsystems));
    }

    /// The ports now, in configuration order (a queue's port is an index here).
    pub fn ports(&self) -> Guard<Arc<Vec<PortInfo>>> {
        self.ports.load()
    }

    /// Replaces the ports (a reload). The caller keeps every slot of the list now in
    /// its place, so a queue's port index stays its port: a port removed stays as a
    /// slot marked [`PortInfo::removed`], a port added is appended (its ANA states
    /// join the ANA table at the same index).
    pub fn set_ports(&self, ports: Vec<PortInfo>) {
        for (i, p) in ports.iter().enumerate() {
            if i >= self.ana.port_slots() {
                self.ana.add_port(p.portid, &p.ana_groups);
            }
            if p.removed {
                self.ana.remove_port(i);
            }
        }
        self.ports.store(Arc::new(ports));
    }

    /// A fresh io_uring fixed-file index for a namespace opened after the start (a
    /// reload): indices are never reused, so a command still queued against a removed
    /// namespace can only fail (EBADF), never reach another file.
    pub fn next_file_index(&self) -> u32 {
        self.next_file.fetch_add(1, Ordering::Relaxed)
    }

    /// The NVM subsystem named `nqn` (not the discovery subsystem).
    pub fn subsystem(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        self.subsystems
            .load()
            .iter()
            .find(|s| s.nqn == nqn)
            .cloned()
    }

    /// The subsystem named `nqn`, the discovery subsystem included when it is served.
    pub fn lookup(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        if nqn == NVMF_DISCOVERY_NQN {
            self.serve_discovery.then(|| self.discovery.clone())
        } else {
            self.subsystem(nqn)
        }
    }

    /// [`Registry::lookup`] for a host connected through port `port` (an index in
    /// [`Registry::ports`]): an NVM subsystem only when that port serves it (nvmet
    /// looks the NQN up among the port's linked subsystems); the discovery subsystem
    /// on every port.
    pub fn lookup_on(&self, port: usize, nqn: &str) -> Option<Arc<Subsystem>> {
        let s = self.lookup(nqn)?;
        (s.is_discovery() || self.ports.load().get(port).is_some_and(|p| p.serves(nqn)))
            .then_some(s)
    }

    /// The live controller `cntlid`.
    pub fn controller(&self, cntlid: u16) -> Option<Arc<Controller>> {
        self.controllers.lock().by_id.get(&cntlid).cloned()
    }

    /// Forgets controller `cntlid` (its admin queue went away or Keep Alive expired).
    pub fn remove_controller(&self, cntlid: u16) {
        self.controllers.lock().by_id.remove(&cntlid);
    }

    /// All live controllers, in CNTLID order.
    pub fn controllers(&self) -> Vec<Arc<Controller>> {
        self.controllers.lock().by_id.values().cloned().collect()
    }

    /// Discovery log Generation Counter (GENCTR): changes whenever the log's content
    /// may have changed.
    pub fn genctr(&self) -> u64 {
        self.genctr.load(Ordering::Relaxed)
    }

    /// Notes a configuration change visible in the discovery log page.
    pub fn bump_genctr(&self) {
        self.genctr.fetch_add(1, Ordering::Relaxed);
    }

    /// Allocates a CNTLID in `range` (a subsystem's [`Subsystem::cntlids`], within
    /// [`CNTLID_MIN`]..=[`CNTLID_MAX`]) that no live controller has, and registers the
    /// controller `make` builds for it.
    ///
    /// Errors: Connect Controller Busy (SCT 1h, SC 81h) with DNR when every ID of the
    /// range is taken (nvmet answers the same).
    pub fn add_controller(
        &self,
        range: RangeInclusive<u16>,
        make: impl FnOnce(u16) -> Controller,
    ) -> Result<Arc<Controller>, Status> {
        let (lo, hi) = (
            (*range.start()).max(CNTLID_MIN),
            (*range.end()).min(CNTLID_MAX),
        );
        let busy =
            || Status::command_specific(CommandSpecificStatus::ConnectControllerBusy).with_dnr();
        if lo > hi {
            return Err(busy());
        }
        let mut t = self.controllers.lock();
        let span = u32::from(hi - lo) + 1;
        let start = u32::from(t.next.clamp(lo, hi) - lo);
        let free = (0..span)
            .map(|i| lo + ((start + i) % span) as u16)
            .find(|id| !t.by_id.contains_key(id));
        if let Some(id) = free {
            let ctrl = Arc::new(make(id));
            t.by_id.insert(id, ctrl.clone());
            t.next = if id == CNTLID_MAX { CNTLID_MIN } else { id + 1 };
            return Ok(ctrl);
        }
        Err(busy())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// Restricted subsystem NQN used by the tests of this crate's command logic.
    pub const REF_NQN: &str = "nqn.2026-11.io.example:ref";
    /// Subsystem that admits one host only.
    pub const RESTRICTED_NQN: &str = "nqn.2026-11.io.example:restricted";
    /// The host the restricted subsystem admits.
    pub const ALLOWED_HOST: &str =
        "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001";
    /// The Linux host NQN of the error capture.
    pub const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:cf25660b-4036-4a6d-88a2-80c857dbb57a";

    /// The error capture's target: `ref` (any host, namespaces as given) and
    /// `restricted` (one host), on 192.168.77.10:4420.
    pub fn registry_with(namespaces: Vec<NamespaceEntry>) -> Arc<Registry> {
        let r = Subsystem::new(
            REF_NQN.into(),
            "a1b2c3d4e5f6".to_string(),
            true,
            vec![],
            namespaces,
        );
        let s = Subsystem::new(
            RESTRICTED_NQN.into(),
            "ffff".to_string(),
            false,
            vec![ALLOWED_HOST.into()],
            vec![],
        );
        Registry::new(
            vec![Arc::new(r), Arc::new(s)],
            PortInfo::new(IpAddr::V4(Ipv4Addr::new(192, 168, 77, 10)), 4420),
            Limits::default(),
        )
    }

    /// A sparse file namespace of `size` bytes with `block` byte blocks in `dir`.
    pub fn file_ns(dir: &tempfile::TempDir, name: &str, size: u64, block: u32) -> Arc<Backend> {
        Arc::new(Backend::open(&dir.path().join(name), Some(size), block).unwrap())
    }

    #[test]
    fn host_allowed_rules() {
        let reg = registry_with(vec![]);
        assert!(reg.subsystem(REF_NQN).unwrap().host_allowed(HOST));
        let s = reg.subsystem(RESTRICTED_NQN).unwrap();
        assert!(!s.host_allowed(HOST));
        assert!(s.host_allowed(ALLOWED_HOST));
        assert!(reg.discovery.host_allowed(HOST));
        assert!(reg.subsystem(NVMF_DISCOVERY_NQN).is_none());
        assert!(reg.lookup(NVMF_DISCOVERY_NQN).unwrap().is_discovery());
        assert!(reg.lookup("nqn.2026-11.io.example:nosuchsubsys").is_none());
    }

    #[test]
    fn discovery_can_be_switched_off() {
        let sub = Arc::new(Subsystem::new(REF_NQN.into(), None, true, vec![], vec![]));
        let port = PortInfo::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 4420);
        let reg = Registry::with_ports(vec![sub], vec![port], Limits::default(), false);
        assert!(reg.lookup(NVMF_DISCOVERY_NQN).is_none());
        assert!(reg.lookup(REF_NQN).is_some());
    }

    #[test]
    fn namespaces_sorted_and_ids_stable() {
        let dir = tempfile::tempdir().unwrap();
        let a = NamespaceEntry::new(3, file_ns(&dir, "a", 1 << 20, 512), 0, REF_NQN);
        let b = NamespaceEntry::new(1, file_ns(&dir, "b", 1 << 20, 512), 1, REF_NQN);
        let again = NamespaceEntry::new(3, a.ns.clone(), 0, REF_NQN);
        assert_eq!((a.nguid, a.uuid), (again.nguid, again.uuid));
        assert_ne!(a.nguid, b.nguid);
        assert_ne!(a.nguid, a.uuid);
        assert_eq!(a.uuid[6] >> 4, 8, "UUID version 8");
        assert_eq!(a.uuid[8] >> 6, 0b10, "RFC 9562 variant");
        let s = Subsystem::new(REF_NQN.into(), "sn".to_string(), true, vec![], vec![a, b]);
        assert_eq!(
            s.namespaces().iter().map(|n| n.nsid).collect::<Vec<_>>(),
            vec![1, 3]
        );
        assert_eq!(s.max_nsid(), 3);
        assert_eq!(s.namespace(3).unwrap().file_index, 0);
        let derived = Subsystem::new(REF_NQN.into(), None, true, vec![], vec![]);
        assert_eq!(derived.serial.len(), 16);
        assert_eq!(
            derived.serial,
            Subsystem::new(REF_NQN.into(), None, true, vec![], vec![]).serial
        );
        assert!(s.namespace(2).is_none());
    }

    #[test]
    fn cntlid_allocation_round_robin() {
        let reg = registry_with(vec![]);
        let sub = reg.subsystem(REF_NQN).unwrap().clone();
        let now = Instant::now();
        let mk = |id| Controller::new(id, sub.clone(), HOST.into(), [0; 16], 0, &reg.limits, now);
        let all = CNTLID_MIN..=CNTLID_MAX;
        let c1 = reg.add_controller(all.clone(), mk).unwrap();
        let c2 = reg.add_controller(all.clone(), mk).unwrap();
        assert_eq!((c1.cntlid, c2.cntlid), (1, 2));
        reg.remove_controller(1);
        assert!(reg.controller(1).is_none());
        assert_eq!(reg.add_controller(all, mk).unwrap().cntlid, 3);
        assert_eq!(reg.controller(2).unwrap().cntlid, 2);
        assert_eq!(reg.controllers().len(), 2);
        // A subsystem's own range (nvmet's cntlid_min/cntlid_max): its first free ID,
        // then busy once the range is used up.
        assert_eq!(reg.add_controller(10..=11, mk).unwrap().cntlid, 10);
        assert_eq!(reg.add_controller(10..=11, mk).unwrap().cntlid, 11);
        let busy = reg.add_controller(10..=11, mk).unwrap_err();
        assert_eq!(
            busy,
            Status::command_specific(CommandSpecificStatus::ConnectControllerBusy).with_dnr()
        );
        // IDs are unique across subsystems: 2 and 3 are live, 1 is free again.
        assert!(reg.add_controller(2..=3, mk).is_err());
        assert_eq!(reg.add_controller(1..=3, mk).unwrap().cntlid, 1);
    }
}

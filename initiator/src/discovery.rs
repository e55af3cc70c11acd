//! The discovery client (NVMe over Fabrics 1.1 §5 "Discovery Service", NVMe Base 2.x
//! §5.16.1.23 "Discovery Log Page"), as nvme-cli's `nvme discover` / `connect-all`
//! and Linux's persistent discovery controllers do it.
//!
//! - [`read_discovery_log`]: the log read in pieces by offset: the 1024-byte header
//!   first (GENCTR, NUMREC), then the entries (at most [`ADMIN_MAX_IO_BYTES`] per
//!   Get Log Page), then the header again; a GENCTR that moved meanwhile means the
//!   log changed under the reads, and it is read again (at most
//!   [`GENCTR_RETRIES`] times). Every entry is typed ([`DiscoveryEntry`]).
//! - [`discover`]: one discovery controller connected (subsystem
//!   [`NVMF_DISCOVERY_NQN`]), its log read, the controller shut down; referrals
//!   (SUBTYPE 1) followed to their discovery controllers, each address once and at
//!   most [`MAX_DISCOVERY_CONTROLLERS`] in all (the loop guard).
//! - [`connect_all`]: a [`Host`] connected to every NVM subsystem entry (SUBTYPE 2).
//! - [`DiscoveryController`]: a persistent discovery controller: kept connected with
//!   Keep Alive (KATO), Discovery Log Page Change notices enabled, an Asynchronous
//!   Event Request outstanding; on the notice the log is read again and reported
//!   ([`DiscoveryController::events`]: [`ControllerEvent::DiscoveryLogChanged`]).
//!
//! Each connection opens its own RDMA device on the options' local address (the soft
//! provider binds UDP port 4791 there): connections that live together need distinct
//! local addresses ([`connect_all`]'s `local_ip`).
use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use nvme::log::{
    AddressFamily, DiscoveryLogEntry, DiscoveryLogPageHeader, SubsystemType, TransportType,
};
use nvme::{LogPageId, NVMF_DISCOVERY_NQN};
use tokio::sync::broadcast;
use transport::soft::SoftProvider;
use transport::verbs::{Device as _, DeviceOf, Provider};
use zerocopy::FromBytes;

use crate::aen::{AsyncEvents, ControllerEvent};
use crate::controller::{Controller, ControllerOptions, ADMIN_MAX_IO_BYTES};
use crate::error::HostError;
use crate::health::ControllerHealth;
use crate::host::Host;
use crate::keeper::AdminKeeper;
use crate::lifecycle::{CtrlState, ReconnectOptions};
use crate::options::HostOptions;

/// Bytes of the Discovery log page header and of each entry.
pub const DISCOVERY_RECORD_LEN: usize = 1024;

/// How often the log is read again when GENCTR moved during a read.
pub const GENCTR_RETRIES: u32 = 8;

/// The most records a log may hold for this host (1 MiB of entries); more is refused
/// as a protocol error.
pub const MAX_DISCOVERY_RECORDS: u64 = 1024;

/// The most discovery controllers [`discover`] visits through referrals.
pub const MAX_DISCOVERY_CONTROLLERS: usize = 16;

/// Buffer pool of a discovery connection when the options give none: the admin
/// queue's slots and a few pieces of the log.
pub const DISCOVERY_POOL_BYTES: usize = 1 << 20;

/// One Discovery log page entry, typed (NVMe Base 2.x Figure "Discovery Log Page
/// Entry"). Text fields are as the controller wrote them, without padding.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DiscoveryEntry {
    /// Transport Type (TRTYPE), raw: 1 RDMA, 3 TCP ([`TransportType`]).
    pub trtype: u8,
    /// Address Family (ADRFAM), raw: 1 IPv4, 2 IPv6 ([`AddressFamily`]).
    pub adrfam: u8,
    /// Subsystem Type (SUBTYPE), raw: 1 referral, 2 NVM subsystem, 3 this discovery
    /// subsystem ([`SubsystemType`]).
    pub subtype: u8,
    /// Transport Requirements (TREQ).
    pub treq: u8,
    /// Port ID (PORTID).
    pub portid: u16,
    /// Controller ID (CNTLID): FFFFh for the dynamic controller model.
    pub cntlid: u16,
    /// Admin Max SQ Size (ASQSZ).
    pub asqsz: u16,
    /// Entry Flags (EFLAGS).
    pub eflags: u16,
    /// Transport Service Identifier (TRSVCID): the RDMA CM port in decimal.
    pub trsvcid: String,
    /// NVM Subsystem NQN (SUBNQN).
    pub subnqn: String,
    /// Transport Address (TRADDR).
    pub traddr: String,
    /// The RDMA Transport Specific Address Subtype (TSAS) fields: `(RDMA_QPTYPE,
    /// RDMA_PRTYPE, RDMA_CMS, RDMA_PKEY)` (NVMe RDMA Transport 1.x §3.1.2), as the
    /// controller wrote them; meaningful for TRTYPE RDMA only.
    pub rdma_tsas: (u8, u8, u8, u16),
}

impl DiscoveryEntry {
    /// Types a raw entry. Errors: a text field that is not UTF-8 or not terminated.
    pub fn parse(e: &DiscoveryLogEntry) -> Result<Self, HostError> {
        let field = |name: &str, r: Result<&str, nvme::StrFieldError>| {
            r.map(str::to_string)
                .map_err(|err| HostError::Protocol(format!("discovery log entry {name}: {err}")))
        };
        Ok(DiscoveryEntry {
            trtype: e.trtype,
            adrfam: e.adrfam,
            subtype: e.subtype,
            treq: e.treq,
            portid: e.portid.get(),
            cntlid: e.cntlid.get(),
            asqsz: e.asqsz.get(),
            eflags: e.eflags.get(),
            trsvcid: field("TRSVCID", e.trsvcid())?,
            subnqn: field("SUBNQN", e.subnqn())?,
            traddr: field("TRADDR", e.traddr())?,
            rdma_tsas: (e.tsas.qptype, e.tsas.prtype, e.tsas.cms, e.tsas.pkey.get()),
        })
    }

    /// SUBTYPE, decoded (`None` for a value the specification does not define).
    pub fn subsystem_type(&self) -> Option<SubsystemType> {
        SubsystemType::from_value(self.subtype)
    }

    /// Whether this is an RDMA entry of an NVM subsystem (what [`connect_all`] takes).
    pub fn is_rdma_nvm(&self) -> bool {
        self.trtype == TransportType::Rdma.value()
            && self.subsystem_type() == Some(SubsystemType::Nvm)
    }

    /// Whether this is a referral to another discovery controller.
    pub fn is_referral(&self) -> bool {
        self.subsystem_type() == Some(SubsystemType::Referral)
    }

    /// TRADDR and TRSVCID as a socket address. Errors: an address family other than
    /// IPv4 or IPv6, or text that does not parse as one.
    pub fn socket_addr(&self) -> Result<SocketAddr, HostError> {
        let bad = |what: &str| {
            HostError::Protocol(format!(
                "discovery log entry of {}: {what} (TRADDR {:?}, TRSVCID {:?}, ADRFAM {})",
                self.subnqn, self.traddr, self.trsvcid, self.adrfam
            ))
        };
        let ip: IpAddr = match AddressFamily::from_value(self.adrfam) {
            Some(AddressFamily::Ipv4 | AddressFamily::Ipv6) => self
                .traddr
                .parse()
                .map_err(|_| bad("TRADDR is no IP address"))?,
            _ => return Err(bad("not an IP address family")),
        };
        let port: u16 = self
            .trsvcid
            .parse()
            .map_err(|_| bad("TRSVCID is no port number"))?;
        Ok(SocketAddr::new(ip, port))
    }
}

/// A Discovery log page as read: its Generation Counter and every entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscoveryLog {
    /// Generation Counter (GENCTR): changes whenever the log's content may have.
    pub genctr: u64,
    /// The entries, in the controller's order.
    pub entries: Vec<DiscoveryEntry>,
}

fn header<P: Provider>(c: &mut Controller<P>, retain: bool) -> Result<(u64, u64), HostError> {
    let data = c.get_log_page(
        LogPageId::Discovery.value(),
        0,
        0,
        DISCOVERY_RECORD_LEN,
        retain,
    )?;
    let (h, _) = DiscoveryLogPageHeader::read_from_prefix(&data).map_err(|_| {
        HostError::Protocol(format!("Discovery log header of {} bytes", data.len()))
    })?;
    Ok((h.genctr.get(), h.numrec.get()))
}

/// Reads the whole Discovery log of discovery controller `c` in pieces (see the
/// module docs); the last read (the header) has RAE clear, so the controller reports
/// the next Discovery Log Page Change.
///
/// Errors: the commands'; [`HostError::Protocol`] for more than
/// [`MAX_DISCOVERY_RECORDS`] records, an entry that does not parse, or a log that
/// kept changing over [`GENCTR_RETRIES`] reads.
pub fn read_discovery_log<P: Provider>(c: &mut Controller<P>) -> Result<DiscoveryLog, HostError> {
    let (mut genctr, mut numrec) = header(c, true)?;
    for _ in 0..=GENCTR_RETRIES {
        if numrec > MAX_DISCOVERY_RECORDS {
            return Err(HostError::Protocol(format!(
                "the Discovery log holds {numrec} records, more than the {MAX_DISCOVERY_RECORDS} \
                 this host reads"
            )));
        }
        let total = numrec as usize * DISCOVERY_RECORD_LEN;
        let mut raw = Vec::with_capacity(total);
        while raw.len() < total {
            let piece = (total - raw.len()).min(ADMIN_MAX_IO_BYTES);
            let offset = (DISCOVERY_RECORD_LEN + raw.len()) as u64;
            raw.extend(c.get_log_page(LogPageId::Discovery.value(), 0, offset, piece, true)?);
        }
        let (again, numrec_again) = header(c, false)?;
        if again == genctr && numrec_again == numrec {
            let entries = raw
                .chunks_exact(DISCOVERY_RECORD_LEN)
                .map(|r| {
                    DiscoveryLogEntry::ref_from_bytes(r)
                        .map_err(|_| HostError::Protocol("Discovery log entry size".into()))
                        .and_then(DiscoveryEntry::parse)
                })
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(DiscoveryLog { genctr, entries });
        }
        tracing::debug!(
            genctr,
            again,
            "the Discovery log changed while read: reading again"
        );
        (genctr, numrec) = (again, numrec_again);
    }
    Err(HostError::Protocol(format!(
        "the Discovery log kept changing (GENCTR {genctr}) over {GENCTR_RETRIES} reads"
    )))
}

/// `opts` for the discovery controller at `traddr`: subsystem [`NVMF_DISCOVERY_NQN`],
/// no I/O queue, a small buffer pool unless the options give one.
fn discovery_options(opts: &HostOptions, traddr: SocketAddr) -> HostOptions {
    let mut o = opts.clone();
    o.traddr = traddr;
    o.subnqn = NVMF_DISCOVERY_NQN.to_string();
    o.io_queues = 0;
    o.buffer_pool_bytes = Some(opts.buffer_pool_bytes.unwrap_or(DISCOVERY_POOL_BYTES));
    o
}

/// Connects the admin queue of a discovery controller on provider `P` (device on
/// `opts.local_ip`, one poll group): what [`discover`] and [`DiscoveryController`]
/// start from.
fn connect_discovery<P: Provider>(
    opts: &HostOptions,
    options: &P::Options,
) -> Result<(Arc<DeviceOf<P>>, Controller<P>), HostError> {
    let dev = crate::device::open_device::<P>(opts, options)?;
    let pd = dev
        .alloc_pd()
        .map_err(|e| HostError::Device(format!("protection domain: {e}")))?;
    let pool = crate::sync_host::register_pool::<P>(&dev, pd, opts)?;
    let cm = dev
        .cm()
        .map_err(|e| HostError::Device(format!("RDMA connection manager: {e}")))?;
    let ctx = dev
        .open_context(0)
        .map_err(|e| HostError::Device(format!("poll group 0: {e}")))?;
    let c = Controller::connect(ctx, &cm, ControllerOptions::from(opts), pd, &pool)?;
    Ok((dev, c))
}

/// Reads the Discovery log at `opts.traddr` (the discovery controller there, then
/// each referral's, each address once, at most [`MAX_DISCOVERY_CONTROLLERS`]): every
/// entry of every log read, each once, in the order found (on the soft provider).
/// `opts.subnqn` is ignored (the discovery NQN is used); the host NQN matters, as a
/// target lists only the subsystems that host may connect to.
///
/// Errors: those of the first discovery controller (connect, Get Log Page); a
/// referral that cannot be reached is logged and skipped.
pub fn discover(opts: &HostOptions) -> Result<Vec<DiscoveryEntry>, HostError> {
    discover_with::<SoftProvider>(opts, &Default::default())
}

/// [`discover`] on provider `P` with the provider's `options`.
pub fn discover_with<P: Provider>(
    opts: &HostOptions,
    options: &P::Options,
) -> Result<Vec<DiscoveryEntry>, HostError> {
    let mut to_visit = vec![opts.traddr];
    let mut visited: HashSet<SocketAddr> = HashSet::new();
    let mut seen: HashSet<DiscoveryEntry> = HashSet::new();
    let mut out = Vec::new();
    while let Some(addr) = to_visit.pop() {
        if !visited.insert(addr) {
            continue;
        }
        if visited.len() > MAX_DISCOVERY_CONTROLLERS {
            tracing::warn!(
                %addr,
                "more than {MAX_DISCOVERY_CONTROLLERS} discovery controllers through referrals: \
                 not following further"
            );
            break;
        }
        let first = out.is_empty() && visited.len() == 1;
        let log = connect_discovery::<P>(&discovery_options(opts, addr), options).and_then(
            |(_dev, mut c)| {
                let log = read_discovery_log(&mut c);
                let _ = c.shutdown(Vec::new());
                log
            },
        );
        let log = match log {
            Ok(l) => l,
            Err(e) if first => return Err(e),
            Err(e) => {
                tracing::warn!(%addr, "referral not read: {e}");
                continue;
            }
        };
        // Followed in the order listed.
        let mut referrals = Vec::new();
        for e in log.entries {
            if e.is_referral() {
                match e.socket_addr() {
                    Ok(a) => referrals.push(a),
                    Err(err) => tracing::warn!("referral skipped: {err}"),
                }
            }
            if seen.insert(e.clone()) {
                out.push(e);
            }
        }
        to_visit.extend(referrals.into_iter().rev());
    }
    Ok(out)
}

/// Connects a [`Host`] (soft provider) to every RDMA NVM subsystem entry of `entries`
/// (from [`discover`]), with `opts` for everything but the address and the NQN, and
/// the local address `local_ip` gives for the entry (each host opens its own device;
/// `None` keeps `opts.local_ip`). Returns each entry connected with its result, in
/// order; entries of other types or transports are skipped.
pub async fn connect_all(
    opts: &HostOptions,
    entries: &[DiscoveryEntry],
    mut local_ip: impl FnMut(&DiscoveryEntry) -> Option<IpAddr>,
) -> Vec<(DiscoveryEntry, Result<Host, HostError>)> {
    let mut out = Vec::new();
    for e in entries.iter().filter(|e| e.is_rdma_nvm()) {
        let r = match e.socket_addr() {
            Ok(addr) => {
                let mut o = opts.clone();
                o.traddr = addr;
                o.subnqn = e.subnqn.clone();
                if let Some(ip) = local_ip(e) {
                    o.local_ip = Some(ip);
                }
                Host::connect(o).await
            }
            Err(err) => Err(err),
        };
        out.push((e.clone(), r));
    }
    out
}

/// A persistent discovery controller (see the module docs) on provider `P`.
pub struct DiscoveryController<P: Provider = SoftProvider> {
    keeper: Option<AdminKeeper<P>>,
    events: AsyncEvents,
    _dev: Arc<DeviceOf<P>>,
}

impl<P: Provider> std::fmt::Debug for DiscoveryController<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscoveryController")
            .field("keeper", &self.keeper)
            .finish()
    }
}

impl DiscoveryController<SoftProvider> {
    /// Connects the discovery controller at `opts.traddr` on the soft provider:
    /// [`DiscoveryController::connect_with`].
    pub fn connect(opts: &HostOptions) -> Result<Self, HostError> {
        Self::connect_with(opts, &Default::default())
    }
}

impl<P: Provider> DiscoveryController<P> {
    /// Connects the discovery controller at `opts.traddr` with KATO `opts.kato_ms`
    /// (a persistent discovery controller needs one: 0 is refused), enables
    /// Discovery Log Page Change notices, posts an Asynchronous Event Request and
    /// starts the Keep Alive thread. No reconnect: a lost controller ends the
    /// thread ([`DiscoveryController::state`] turns `Dead`).
    ///
    /// Errors: [`HostError::InvalidArgument`] for KATO 0; the bring-up's.
    pub fn connect_with(opts: &HostOptions, options: &P::Options) -> Result<Self, HostError> {
        if opts.kato_ms == 0 {
            return Err(HostError::InvalidArgument(
                "a persistent discovery controller needs a Keep Alive Timeout (kato_ms > 0)".into(),
            ));
        }
        let (dev, c) = connect_discovery::<P>(&discovery_options(opts, opts.traddr), options)?;
        let events = AsyncEvents::new();
        let reconnect = ReconnectOptions {
            kato_ms: opts.kato_ms,
            ..ReconnectOptions::never()
        };
        let keeper = AdminKeeper::start_with_events(
            c,
            reconnect,
            ControllerHealth::new(),
            None,
            Some(events.clone()),
        );
        Ok(DiscoveryController {
            keeper: Some(keeper),
            events,
            _dev: dev,
        })
    }

    /// Reads the Discovery log now ([`read_discovery_log`]).
    ///
    /// Errors: [`HostError::ControllerDead`] once the controller was lost; the reads'.
    pub fn log(&self) -> Result<DiscoveryLog, HostError> {
        match &self.keeper {
            Some(k) => k.with_controller(|c| read_discovery_log(c))?,
            None => Err(HostError::Disconnected),
        }
    }

    /// The controller's events from now on: [`ControllerEvent::DiscoveryLogChanged`]
    /// with the log read again after each Discovery Log Page Change notice.
    pub fn events(&self) -> broadcast::Receiver<ControllerEvent> {
        self.events.subscribe()
    }

    /// `Live`, or `Dead` once Keep Alive or the admin queue failed.
    pub fn state(&self) -> CtrlState {
        self.keeper
            .as_ref()
            .map_or(CtrlState::Dead, |k| k.health().state())
    }

    /// Stops the Keep Alive thread, shuts the controller down (CC.SHN, at most
    /// [`crate::controller::SHUTDOWN_TIMEOUT`]) and disconnects.
    ///
    /// Errors: the shutdown's; the loss that ended the controller earlier.
    pub fn disconnect(mut self) -> Result<(), HostError> {
        match self.keeper.take() {
            Some(k) => k.shutdown(Vec::new()),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme::log::discovery_log_page;

    #[test]
    fn entries_typed() {
        let raw = DiscoveryLogEntry::rdma(
            AddressFamily::Ipv6,
            SubsystemType::Referral,
            3,
            32,
            "4421",
            NVMF_DISCOVERY_NQN,
            "fd00::2",
        )
        .unwrap();
        let page = discovery_log_page(5, &[raw]);
        let e = DiscoveryEntry::parse(
            DiscoveryLogEntry::ref_from_bytes(&page[DISCOVERY_RECORD_LEN..]).unwrap(),
        )
        .unwrap();
        assert!(e.is_referral());
        assert!(!e.is_rdma_nvm());
        assert_eq!((e.portid, e.cntlid, e.asqsz), (3, 0xFFFF, 32));
        assert_eq!(e.socket_addr().unwrap(), "[fd00::2]:4421".parse().unwrap());
        let mut bad = e.clone();
        bad.trsvcid = "port".into();
        assert!(matches!(bad.socket_addr(), Err(HostError::Protocol(_))));
        bad = e;
        bad.adrfam = AddressFamily::Fc.value();
        assert!(bad.socket_addr().is_err());
    }
}

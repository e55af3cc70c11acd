//! Asynchronous events of a controller (NVMe Base 2.x §5.2 "Asynchronous Event
//! Request", §5.27.1.7 "Asynchronous Event Configuration"), as Linux's
//! `nvme_async_event_work` and `nvme_scan_work` handle them.
//!
//! [`AsyncEvents`] arms a controller ([`AsyncEvents::arm`]: Set Features 0Bh with the
//! notices the controller lists in OAES, its active namespace list read, Asynchronous
//! Event Requests posted up to AERL + 1 and [`AERS_POSTED`]) and handles what the
//! requests report ([`AsyncEvents::handle`]), each event's log page read with RAE
//! clear so that the controller reports that event type again:
//! - Namespace Attribute Changed: the Changed Namespace List (04h), then the active
//!   namespace list (Identify CNS 02h) again: [`ControllerEvent::NamespacesChanged`]
//!   with the namespaces that appeared and went;
//! - ANA Change: the ANA log page (0Ch): [`ControllerEvent::AnaChanged`];
//! - Discovery Log Page Change: the discovery log (70h) read again
//!   ([`crate::discovery::read_discovery_log`]): [`ControllerEvent::DiscoveryLogChanged`];
//! - any other: [`ControllerEvent::Other`].
//!
//! The keeper thread ([`crate::keeper::AdminKeeper`]) calls both, at bring-up and after
//! each reconnect; callers watch [`AsyncEvents::subscribe`] (a tokio broadcast channel:
//! `recv().await`, or `blocking_recv()` outside a runtime) and read
//! [`AsyncEvents::namespaces`].
use std::sync::Arc;

use nvme::features::{
    AsyncEventType, AEC_ANA_CHANGE, AEC_DISCOVERY_CHANGE, AEC_NS_ATTR, AEN_NOTICE_ANA_CHANGE,
    AEN_NOTICE_DISCOVERY_CHANGE, AEN_NOTICE_NS_ATTR_CHANGED,
};
use nvme::{AsyncEvent, FeatureId, LogPageId, Sqe, NVMF_DISCOVERY_NQN};
use parking_lot::Mutex;
use tokio::sync::broadcast;
use transport::verbs::Provider;

use crate::capsule::DataDir;
use crate::controller::{Controller, ADMIN_MAX_IO_BYTES};
use crate::discovery::DiscoveryLog;
use crate::error::HostError;

/// Asynchronous Event Requests the host keeps outstanding (fewer when the
/// controller's AERL + 1 is smaller).
pub const AERS_POSTED: usize = 4;

/// Events a subscriber may fall behind by before it misses some
/// (`broadcast::error::RecvError::Lagged`).
pub const EVENT_BACKLOG: usize = 64;

/// Length of the Changed Namespace List log page (04h): 1024 NSIDs.
pub const CHANGED_NS_LIST_LEN: usize = 4096;

/// The first entry of a Changed Namespace List when more than 1024 namespaces changed.
pub const CHANGED_NS_OVERFLOW: u32 = 0xFFFF_FFFF;

/// What an asynchronous event told the host, after the host read its log page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControllerEvent {
    /// Namespace Attribute Changed (Notice 00h).
    NamespacesChanged {
        /// The Changed Namespace List (log 04h): NSIDs in the controller's order;
        /// `[CHANGED_NS_OVERFLOW]` when more than 1024 changed.
        changed: Vec<u32>,
        /// Active NSIDs that were not active before the event.
        added: Vec<u32>,
        /// NSIDs active before the event and no longer.
        removed: Vec<u32>,
        /// The active namespace list now (Identify CNS 02h).
        active: Vec<u32>,
    },
    /// ANA Change (Notice 03h): the ANA log page (0Ch) as read, to decode with
    /// `nvme::ana`.
    AnaChanged {
        /// The log page's bytes (header, group descriptors, NSID lists).
        log: Vec<u8>,
    },
    /// Discovery Log Page Change (Notice F0h): the log read again.
    DiscoveryLogChanged(DiscoveryLog),
    /// Any other event (its log page read with RAE clear, if it names one).
    Other(AsyncEvent),
}

/// A controller's asynchronous events: see the module docs. Cheap to clone; clones
/// share the channel and the namespace list.
#[derive(Clone, Debug)]
pub struct AsyncEvents {
    tx: broadcast::Sender<ControllerEvent>,
    namespaces: Arc<Mutex<Vec<u32>>>,
}

impl Default for AsyncEvents {
    fn default() -> Self {
        Self::new()
    }
}

impl AsyncEvents {
    /// No subscriber yet, no namespace known.
    pub fn new() -> Self {
        AsyncEvents {
            tx: broadcast::channel(EVENT_BACKLOG).0,
            namespaces: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// A receiver of every event from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<ControllerEvent> {
        self.tx.subscribe()
    }

    /// The active namespace IDs as last read (at [`AsyncEvents::arm`] and after each
    /// Namespace Attribute Changed event), ascending.
    pub fn namespaces(&self) -> Vec<u32> {
        self.namespaces.lock().clone()
    }

    /// Arms controller `c`: Set Features Asynchronous Event Configuration with the
    /// notices it supports (OAES bits 8, 11, 31), the active namespace list read (not
    /// on a discovery controller), the ANA log read where it reports ANA (CMIC bit 3),
    /// Asynchronous Event Requests posted. A namespace change since the last read (a
    /// reconnect) is reported as an event, and so is the ANA log
    /// ([`ControllerEvent::AnaChanged`]).
    ///
    /// Errors: the admin commands'.
    pub fn arm<P: Provider>(&self, c: &mut Controller<P>) -> Result<(), HostError> {
        let aec = c.info().oaes & (AEC_NS_ATTR | AEC_ANA_CHANGE | AEC_DISCOVERY_CHANGE);
        if aec != 0 {
            let sqe = Sqe::set_features(0, FeatureId::AsyncEventConfiguration, aec);
            c.admin_command(sqe, DataDir::None, |_| {})?;
        }
        if c.options().subnqn != NVMF_DISCOVERY_NQN {
            if let Some(ev) = self.rescan(c, Vec::new(), false)? {
                let _ = self.tx.send(ev);
            }
        }
        if c.info().cmic & nvme::ana::CMIC_ANA_REPORTING != 0 {
            // After a reconnect the states may have moved (Linux reads the log at each
            // connect): subscribers get the log as it is now.
            match read_ana_log(c) {
                Ok(log) => {
                    let _ = self.tx.send(ControllerEvent::AnaChanged { log });
                }
                Err(e) => tracing::warn!("reading the ANA log: {e}"),
            }
        }
        c.post_async_event_requests(AERS_POSTED)?;
        Ok(())
    }

    /// Handles the events `c`'s requests reported (from
    /// [`Controller::take_async_events`]), then posts the requests again. An event
    /// whose log page cannot be read is logged and reported as
    /// [`ControllerEvent::Other`].
    pub fn handle<P: Provider>(&self, c: &mut Controller<P>, events: Vec<AsyncEvent>) {
        for ev in events {
            let out = match self.handle_one(c, ev) {
                Ok(out) => out,
                Err(e) => {
                    tracing::warn!(?ev, "handling an asynchronous event failed: {e}");
                    Some(ControllerEvent::Other(ev))
                }
            };
            if let Some(out) = out {
                tracing::info!(?out, "asynchronous event");
                // No subscriber is fine.
                let _ = self.tx.send(out);
            }
        }
        if let Err(e) = c.post_async_event_requests(AERS_POSTED) {
            tracing::warn!("posting Asynchronous Event Requests again failed: {e}");
        }
    }

    fn handle_one<P: Provider>(
        &self,
        c: &mut Controller<P>,
        ev: AsyncEvent,
    ) -> Result<Option<ControllerEvent>, HostError> {
        let notice = ev.event_type == AsyncEventType::Notice as u8;
        match ev.info {
            AEN_NOTICE_NS_ATTR_CHANGED if notice => {
                let log = c.get_log_page(
                    LogPageId::ChangedNamespaceList.value(),
                    0xFFFF_FFFF,
                    0,
                    CHANGED_NS_LIST_LEN,
                    false,
                )?;
                let changed = parse_changed_ns_list(&log);
                self.rescan(c, changed, true)
            }
            AEN_NOTICE_ANA_CHANGE if notice => {
                let log = read_ana_log(c)?;
                Ok(Some(ControllerEvent::AnaChanged { log }))
            }
            AEN_NOTICE_DISCOVERY_CHANGE if notice => {
                let log = crate::discovery::read_discovery_log(c)?;
                Ok(Some(ControllerEvent::DiscoveryLogChanged(log)))
            }
            _ => {
                if ev.lid != 0 {
                    // Reading it with RAE clear lets the controller report the type again.
                    if let Err(e) = c.get_log_page(ev.lid, 0xFFFF_FFFF, 0, 64, false) {
                        tracing::debug!(lid = ev.lid, "reading the event's log page: {e}");
                    }
                }
                Ok(Some(ControllerEvent::Other(ev)))
            }
        }
    }

    /// Reads the active namespace list and compares it with the last one; returns the
    /// event when `report` or when it changed.
    fn rescan<P: Provider>(
        &self,
        c: &mut Controller<P>,
        changed: Vec<u32>,
        report: bool,
    ) -> Result<Option<ControllerEvent>, HostError> {
        let mut active = c.active_namespaces()?;
        active.sort_unstable();
        let before = std::mem::replace(&mut *self.namespaces.lock(), active.clone());
        let added: Vec<u32> = active
            .iter()
            .filter(|n| !before.contains(n))
            .copied()
            .collect();
        let removed: Vec<u32> = before
            .iter()
            .filter(|n| !active.contains(n))
            .copied()
            .collect();
        let moved = !before.is_empty() && (!added.is_empty() || !removed.is_empty());
        Ok(
            (report || moved).then_some(ControllerEvent::NamespacesChanged {
                changed,
                added,
                removed,
                active,
            }),
        )
    }
}

/// The NSIDs of a Changed Namespace List (log 04h): little-endian dwords up to the
/// first 0.
pub fn parse_changed_ns_list(log: &[u8]) -> Vec<u32> {
    log.chunks_exact(4)
        .map(|d| u32::from_le_bytes([d[0], d[1], d[2], d[3]]))
        .take_while(|&n| n != 0)
        .collect()
}

/// Bytes of the ANA log page of a controller at most, as Linux sizes it
/// (`nvme_init_ana`): the 16-byte header, a 32-byte descriptor per ANA group
/// (NANAGRPID) and 4 bytes per namespace (NN), from its Identify Controller `info`.
pub fn ana_log_len(info: &crate::identify::ControllerInfo) -> usize {
    let groups = info.nanagrpid.max(1) as usize;
    let ns = info.nn.min(1 << 16) as usize;
    16 + groups.min(1 << 12) * 32 + ns * 4
}

/// Whether `raw`, the first bytes of an ANA log page, holds the whole log its header
/// and descriptors describe (it decodes without running short).
pub fn ana_log_is_whole(raw: &[u8]) -> bool {
    !matches!(
        nvme::ana::AnaLog::decode(raw),
        Err(nvme::ana::AnaLogError::Truncated { .. })
    )
}

/// Reads the ANA log page (0Ch) of `c` in pieces of at most [`ADMIN_MAX_IO_BYTES`], up
/// to [`ana_log_len`] bytes, stopping as soon as the pieces hold the whole log (a
/// controller answers an offset past its log's end with Invalid Field, NVMe Base 2.x
/// §5.16). The pieces retain the event (RAE) but the last command clears it, so the
/// controller reports the next ANA change; a log that ends before the last piece gets
/// one more 16-byte read with RAE clear.
///
/// Errors: the commands'.
pub fn read_ana_log<P: Provider>(c: &mut Controller<P>) -> Result<Vec<u8>, HostError> {
    let lid = LogPageId::AnaLog.value();
    let len = ana_log_len(c.info()).next_multiple_of(4);
    let mut out = Vec::with_capacity(len);
    loop {
        let piece = (len - out.len()).min(ADMIN_MAX_IO_BYTES);
        let last = out.len() + piece == len;
        let data = c.get_log_page(lid, 0xFFFF_FFFF, out.len() as u64, piece, !last)?;
        out.extend_from_slice(&data);
        if last {
            return Ok(out);
        }
        if ana_log_is_whole(&out) {
            c.get_log_page(lid, 0xFFFF_FFFF, 0, 16, false)?;
            return Ok(out);
        }
    }
}

/// Reads `len` bytes (rounded up to whole dwords) of log `lid` of the controller
/// (NSID FFFFFFFFh) in pieces of at most [`ADMIN_MAX_IO_BYTES`], by offset; `retain`
/// (RAE) on every piece but the last, which carries the caller's `retain`.
///
/// Errors: the commands'.
pub fn read_log<P: Provider>(
    c: &mut Controller<P>,
    lid: u8,
    len: usize,
    retain: bool,
) -> Result<Vec<u8>, HostError> {
    let len = len.max(4).next_multiple_of(4);
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        let piece = (len - out.len()).min(ADMIN_MAX_IO_BYTES);
        let last = out.len() + piece == len;
        let data = c.get_log_page(lid, 0xFFFF_FFFF, out.len() as u64, piece, !last || retain)?;
        out.extend_from_slice(&data);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_list() {
        let mut log = vec![0u8; CHANGED_NS_LIST_LEN];
        log[..4].copy_from_slice(&3u32.to_le_bytes());
        log[4..8].copy_from_slice(&7u32.to_le_bytes());
        log[12..16].copy_from_slice(&9u32.to_le_bytes());
        assert_eq!(parse_changed_ns_list(&log), vec![3, 7]);
        log[..4].copy_from_slice(&CHANGED_NS_OVERFLOW.to_le_bytes());
        assert_eq!(parse_changed_ns_list(&log)[0], CHANGED_NS_OVERFLOW);
        assert!(parse_changed_ns_list(&[1, 0]).is_empty());
    }
}

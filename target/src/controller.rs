//! One controller of the dynamic controller model (NVMe Base 2.x §3.1, NVMe over
//! Fabrics): created by an admin-queue Connect, it holds the controller properties
//! (CC, CSTS), the Keep Alive timer, the I/O queues it granted and connected, the
//! features a host may set, and the Asynchronous Event Requests waiting for an event.
//!
//! State lives behind one small mutex: it is touched by admin commands, Connects and
//! the Keep Alive sweep, not per I/O. The I/O path reads `subsys` and the Volatile
//! Write Cache setting, which is an atomic of its own for that reason.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme::features::{
    AsyncEvent, AsyncEventType, AEC_NS_ATTR, AEN_NOTICE_DISCOVERY_CHANGE,
    AEN_NOTICE_NS_ATTR_CHANGED,
};
use nvme::properties::{Cc, Csts, ShutdownStatus};
use nvme::status::{CommandSpecificStatus, GenericStatus, Status};
use nvme::LogPageId;
use parking_lot::Mutex;

use crate::error_log::ErrorLog;
use crate::subsystem::{Limits, Subsystem};

/// Outstanding Asynchronous Event Requests a controller holds (Identify Controller
/// AERL + 1; nvmet's `NVMET_ASYNC_EVENTS`).
pub const MAX_AER: usize = 4;

/// Default Keep Alive Timeout a discovery controller gets when its Connect asks for
/// none (nvmet's `NVMET_DISC_KATO_MS`), so an abandoned discovery session is reaped;
/// the configuration's `kato_ms` ([`Limits::discovery_kato_ms`]) replaces it.
pub const DISCOVERY_KATO_MS: u32 = 120_000;

/// CC.IOSQES a host must program before enabling: 2^6 = 64-byte SQEs.
pub const IOSQES: u8 = 6;
/// CC.IOCQES a host must program before enabling: 2^4 = 16-byte CQEs.
pub const IOCQES: u8 = 4;

/// AER completion DW0 for "Namespace Attribute Changed": type Notice (2h), info 00h,
/// log page Changed Namespace List (04h) (NVMe Base 2.x §5.2.1): 00040002h.
pub const AEN_NS_ATTR_CHANGED: u32 = AsyncEvent::new(
    AsyncEventType::Notice,
    AEN_NOTICE_NS_ATTR_CHANGED,
    LogPageId::ChangedNamespaceList.value(),
)
.to_dw0();
/// AER completion DW0 for "Discovery Log Page Change": type Notice (2h), info F0h,
/// log page Discovery (70h): 0070F002h.
pub const AEN_DISCOVERY_CHANGED: u32 = AsyncEvent::new(
    AsyncEventType::Notice,
    AEN_NOTICE_DISCOVERY_CHANGE,
    LogPageId::Discovery.value(),
)
.to_dw0();

/// Which kind of controller (Identify Controller CNTRLTYPE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControllerKind {
    /// I/O controller (CNTRLTYPE 1) of an NVM subsystem.
    Io,
    /// Discovery controller (CNTRLTYPE 2) of the discovery subsystem.
    Discovery,
}

/// An Asynchronous Event Request to complete: the held command's CID and the
/// completion DW0 describing the event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AerCompletion {
    /// Command Identifier of the held Asynchronous Event Request.
    pub cid: u16,
    /// Completion DW0: event type (bits 2:0), info (15:8), log page (23:16).
    pub dw0: u32,
}

#[derive(Debug)]
struct State {
    cc: Cc,
    csts: Csts,
    /// Keep Alive Timeout in ms, a whole number of seconds (KAS 10 = 1 s units); 0 off.
    kato_ms: u32,
    last_keep_alive: Instant,
    /// I/O queues granted by Number of Queues (1's based).
    io_queues: u16,
    /// Connected queue IDs (0 = admin).
    connected: Vec<u16>,
    aer_cids: VecDeque<u16>,
    events: VecDeque<u32>,
    aen_config: u32,
    /// Log page identifiers whose asynchronous event was reported and not yet cleared
    /// by reading the log with RAE cleared: no second event of theirs until then
    /// (NVMe Base 2.x §5.2: an event type is masked until its log page is read).
    masked_logs: Vec<u8>,
    changed_ns: Vec<u32>,
}

/// A controller: identity (fixed at Connect) plus its mutable state.
#[derive(Debug)]
pub struct Controller {
    /// Controller ID (1..=FFEFh).
    pub cntlid: u16,
    /// The subsystem (the discovery subsystem for a discovery controller).
    pub subsys: Arc<Subsystem>,
    /// Host NQN of the Connect that created it; I/O queue Connects must repeat it.
    pub hostnqn: String,
    /// Host Identifier (HOSTID) of that Connect (Get Features Host Identifier).
    pub hostid: [u8; 16],
    /// I/O or discovery controller.
    pub kind: ControllerKind,
    /// The port (index in [`crate::subsystem::Registry::ports`]) its admin queue
    /// connected through: its discovery log page is that port's ([`Controller::on_port`]).
    pub port: usize,
    limits: Limits,
    /// Volatile Write Cache enabled (feature 06h WCE); read by every write.
    vwc_enabled: AtomicBool,
    /// A command arrived, or one of its queues was set up or torn down, since the Keep
    /// Alive sweep last looked: Traffic Based Keep Alive (Identify Controller CTRATT
    /// bit 6, NVMe Base 2.x §3.9.2), as nvmet's `reset_tbkas`.
    traffic_seen: AtomicBool,
    state: Mutex<State>,
    /// The Error Information log (a lock of its own: poll groups record failed
    /// commands into it).
    errors: Mutex<ErrorLog>,
    /// The tracing span of this controller (`controller{cntlid hostnqn subnqn}`): the
    /// parent of its queues' spans, entered by the log lines about it, so each carries
    /// the controller's fields ([`crate::oplog`]).
    pub span: tracing::Span,
}

/// Rounds a Keep Alive Timeout up to whole seconds, as nvmet (KAS 10: 1 s units).
fn round_kato(kato_ms: u32) -> u32 {
    kato_ms.div_ceil(1000).saturating_mul(1000)
}

impl Controller {
    /// Controller `cntlid` of `subsys` for `hostnqn`/`hostid`, with Keep Alive Timeout
    /// `kato_ms` from the Connect (rounded up to seconds; a discovery controller
    /// asking for 0 gets `limits.discovery_kato_ms`, also rounded up). The timer starts
    /// at `now`. The admin queue counts as connected. Disabled (CC 0, CSTS 0) until the
    /// host sets CC.EN. The volatile write cache starts enabled.
    pub fn new(
        cntlid: u16,
        subsys: Arc<Subsystem>,
        hostnqn: String,
        hostid: [u8; 16],
        kato_ms: u32,
        limits: &Limits,
        now: Instant,
    ) -> Controller {
        let kind = if subsys.is_discovery() {
            ControllerKind::Discovery
        } else {
            ControllerKind::Io
        };
        let kato_ms = if kind == ControllerKind::Discovery && kato_ms == 0 {
            round_kato(limits.discovery_kato_ms)
        } else {
            round_kato(kato_ms)
        };
        let span = tracing::info_span!(
            "controller",
            cntlid,
            hostnqn = %hostnqn,
            subnqn = %subsys.nqn
        );
        // A subsystem's qid_max lowers the I/O queues its controllers are granted.
        let mut limits = *limits;
        if let Some(q) = subsys.qid_max {
            limits.max_io_queues = limits.max_io_queues.min(q);
        }
        Controller {
            span,
            cntlid,
            subsys,
            hostnqn,
            hostid,
            kind,
            port: 0,
            limits,
            vwc_enabled: AtomicBool::new(true),
            traffic_seen: AtomicBool::new(false),
            state: Mutex::new(State {
                cc: Cc(0),
                csts: Csts(0),
                kato_ms,
                last_keep_alive: now,
                io_queues: limits.max_io_queues.max(1),
                connected: vec![0],
                aer_cids: VecDeque::new(),
                events: VecDeque::new(),
                aen_config: 0,
                masked_logs: Vec::new(),
                changed_ns: Vec::new(),
            }),
            errors: Mutex::new(ErrorLog::default()),
        }
    }

    /// The controller of a host connected through port `port` (an index in
    /// [`crate::subsystem::Registry::ports`]; 0 unless set).
    pub fn on_port(mut self, port: usize) -> Self {
        self.port = port;
        self
    }

    /// The limits this controller was created with (the I/O queues lowered to its
    /// subsystem's `qid_max`).
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Controller Configuration (CC) as last set.
    pub fn cc(&self) -> Cc {
        self.state.lock().cc
    }

    /// Controller Status (CSTS).
    pub fn csts(&self) -> Csts {
        self.state.lock().csts
    }

    /// Applies a Property Set of CC as nvmet's `nvmet_update_cc` does:
    /// EN 0->1 sets CSTS.RDY if IOSQES = 6, IOCQES = 4, MPS = 0, AMS = 0 and CSS is
    /// NVM (000b) or all I/O command sets (110b), else sets CSTS.CFS; EN 1->0 clears
    /// RDY and CC; SHN becoming non-zero clears RDY and CC and reports SHST complete
    /// (10b); SHN returning to 0 clears SHST. Enabling restarts the Keep Alive timer.
    pub fn update_cc(&self, new: Cc, now: Instant) {
        let mut s = self.state.lock();
        let old = s.cc;
        s.cc = new;
        if new.en() && !old.en() {
            let css_ok = matches!(new.css(), 0 | 6);
            if new.iosqes() != IOSQES
                || new.iocqes() != IOCQES
                || new.mps() != 0
                || new.ams() != 0
                || !css_ok
            {
                s.csts = Csts(0).with_cfs(true);
            } else {
                s.csts = Csts(0).with_rdy(true);
                s.last_keep_alive = now;
            }
        }
        if !new.en() && old.en() {
            s.csts = s.csts.with_rdy(false);
            s.cc = Cc(0);
        }
        if new.shn_bits() != 0 && old.shn_bits() == 0 {
            s.csts = s.csts.with_rdy(false).with_shst(ShutdownStatus::Complete);
            s.cc = Cc(0);
        }
        if new.shn_bits() == 0 && old.shn_bits() != 0 {
            s.csts = s.csts.with_shst(ShutdownStatus::Normal);
        }
    }

    /// Whether the controller is enabled and ready: CC.EN = 1 and CSTS.RDY = 1.
    pub fn is_enabled(&self) -> bool {
        let s = self.state.lock();
        s.cc.en() && s.csts.rdy()
    }

    /// `Ok` when commands other than Fabrics ones may run (CC.EN and CSTS.RDY set).
    ///
    /// Errors: Command Sequence Error with DNR otherwise (nvmet's
    /// `nvmet_check_ctrl_status`).
    pub fn check_ready(&self) -> Result<(), Status> {
        if self.is_enabled() {
            Ok(())
        } else {
            Err(Status::generic(GenericStatus::CommandSequenceError).with_dnr())
        }
    }

    /// Sets CSTS.CFS (Controller Fatal Status), e.g. when Keep Alive expired.
    pub fn set_fatal(&self) {
        let mut s = self.state.lock();
        s.csts = s.csts.with_cfs(true);
    }

    /// Keep Alive Timeout in milliseconds (0 = disabled).
    pub fn kato_ms(&self) -> u32 {
        self.state.lock().kato_ms
    }

    /// Sets the Keep Alive Timeout (Set Features Keep Alive Timer), rounded up to
    /// seconds, and restarts the timer at `now`.
    pub fn set_kato_ms(&self, kato_ms: u32, now: Instant) {
        let mut s = self.state.lock();
        s.kato_ms = round_kato(kato_ms);
        s.last_keep_alive = now;
    }

    /// Restarts the Keep Alive timer (a Keep Alive command arrived at `now`).
    pub fn keep_alive(&self, now: Instant) {
        self.state.lock().last_keep_alive = now;
    }

    /// Notes traffic for Traffic Based Keep Alive: a command of this controller arrived
    /// (on any of its queues), or one of its queues was set up or torn down. The next
    /// [`Controller::keep_alive_sweep`] restarts the timer, as nvmet's Keep Alive work
    /// does on `reset_tbkas`. Called per command by the poll groups: a load of a flag
    /// that is written only when it changes, so a busy controller's queues share the
    /// cache line read-only between two sweeps.
    pub fn note_traffic(&self) {
        if !self.traffic_seen.load(Ordering::Relaxed) {
            self.traffic_seen.store(true, Ordering::Relaxed);
        }
    }

    /// The Keep Alive sweep at `now` (the control thread, every 100 ms): with traffic
    /// since the last sweep ([`Controller::note_traffic`]) the timer restarts at `now`
    /// and has not expired; otherwise [`Controller::kato_expired`].
    pub fn keep_alive_sweep(&self, now: Instant) -> bool {
        if self.traffic_seen.swap(false, Ordering::Relaxed) {
            self.keep_alive(now);
            return false;
        }
        self.kato_expired(now)
    }

    /// Whether the Keep Alive timer expired at `now`: KATO is non-zero and no Keep
    /// Alive arrived for KATO since the last one (or since Connect / enable).
    pub fn kato_expired(&self, now: Instant) -> bool {
        let s = self.state.lock();
        s.kato_ms != 0
            && now.saturating_duration_since(s.last_keep_alive)
                >= Duration::from_millis(u64::from(s.kato_ms))
    }

    /// I/O queues granted (1's based): [`Limits::max_io_queues`] until Set Features
    /// Number of Queues asks for fewer.
    pub fn io_queues(&self) -> u16 {
        self.state.lock().io_queues
    }

    /// Grants `min(requested, max_io_queues)` I/O queues (both `requested` 1's based,
    /// at least 1) and returns the number granted.
    pub fn set_io_queues(&self, requested: u16) -> u16 {
        let granted = requested.clamp(1, self.limits.max_io_queues.max(1));
        self.state.lock().io_queues = granted;
        granted
    }

    /// Records queue `qid` as connected.
    ///
    /// Errors: Command Sequence Error with DNR if it already is (nvmet: "qid already
    /// created").
    pub fn connect_queue(&self, qid: u16) -> Result<(), Status> {
        let mut s = self.state.lock();
        if s.connected.contains(&qid) {
            return Err(Status::generic(GenericStatus::CommandSequenceError).with_dnr());
        }
        s.connected.push(qid);
        drop(s);
        // Queue setup restarts the Keep Alive timer (nvmet's nvmet_install_queue): a
        // host that took long to bring an I/O queue up keeps its controller.
        self.note_traffic();
        Ok(())
    }

    /// Forgets queue `qid` (its RDMA connection went away), so it may connect again.
    /// Like queue setup, a teardown restarts the Keep Alive timer (nvmet's
    /// nvmet_sq_destroy): the host may be busy reconnecting it.
    pub fn release_queue(&self, qid: u16) {
        self.state.lock().connected.retain(|&q| q != qid);
        self.note_traffic();
    }

    /// Whether queue `qid` is connected.
    pub fn queue_connected(&self, qid: u16) -> bool {
        self.state.lock().connected.contains(&qid)
    }

    /// Asynchronous Event Configuration (feature 0Bh).
    pub fn aen_config(&self) -> u32 {
        self.state.lock().aen_config
    }

    /// Sets the Asynchronous Event Configuration.
    pub fn set_aen_config(&self, value: u32) {
        self.state.lock().aen_config = value;
    }

    /// Volatile Write Cache enabled (feature 06h, WCE, NVMe Base 2.x §5.27.1.4).
    /// When false, every write of this controller's queues completes only once durable
    /// (as with FUA): see [`Controller::write_through`].
    pub fn vwc_enabled(&self) -> bool {
        self.vwc_enabled.load(Ordering::Relaxed)
    }

    /// Sets Volatile Write Cache enable (Set Features 06h). Writes queued after the
    /// change follow it; writes already executing keep the setting they started with.
    pub fn set_vwc_enabled(&self, enabled: bool) {
        self.vwc_enabled.store(enabled, Ordering::Relaxed);
    }

    /// Whether a write with Force Unit Access `fua` must be durable before it completes
    /// (NVM Command Set 1.x §3.3.6: FUA, or the volatile write cache turned off).
    pub fn write_through(&self, fua: bool) -> bool {
        fua || !self.vwc_enabled()
    }

    /// Holds Asynchronous Event Request `cid`, or, when an event is already pending,
    /// returns its completion DW0 at once (`Ok(Some(dw0))`).
    ///
    /// Errors: Asynchronous Event Request Limit Exceeded (SCT 1h, SC 05h) with DNR
    /// when [`MAX_AER`] are already held.
    pub fn push_aer(&self, cid: u16) -> Result<Option<u32>, Status> {
        let mut s = self.state.lock();
        if let Some(dw0) = s.events.pop_front() {
            s.masked_logs.push(event_log_page(dw0));
            return Ok(Some(dw0));
        }
        if s.aer_cids.len() >= MAX_AER {
            return Err(Status::command_specific(
                CommandSpecificStatus::AsyncEventRequestLimitExceeded,
            )
            .with_dnr());
        }
        s.aer_cids.push_back(cid);
        Ok(None)
    }

    /// Queues event `dw0` (an AER completion DW0); one of each is kept until reported,
    /// and none while an event of the same log page was reported and its log not yet
    /// read with RAE cleared ([`Controller::log_read`]). Call
    /// [`take_aer`](Self::take_aer) afterwards to complete a held request.
    pub fn post_event(&self, dw0: u32) {
        let mut s = self.state.lock();
        Self::queue_event(&mut s, dw0);
    }

    /// [`post_event`](Self::post_event) when the host enabled the event: when any bit
    /// of `aec_mask` is set in its Asynchronous Event Configuration (feature 0Bh; e.g.
    /// [`nvme::features::AEC_ANA_CHANGE`], bit 11), or always for a mask of 0. Returns
    /// whether the event was posted.
    pub fn post_event_if_enabled(&self, dw0: u32, aec_mask: u32) -> bool {
        let mut s = self.state.lock();
        if aec_mask != 0 && s.aen_config & aec_mask == 0 {
            return false;
        }
        Self::queue_event(&mut s, dw0);
        true
    }

    fn queue_event(s: &mut State, dw0: u32) {
        if !s.events.contains(&dw0) && !s.masked_logs.contains(&event_log_page(dw0)) {
            s.events.push_back(dw0);
        }
    }

    /// A held Asynchronous Event Request paired with a pending event, if both exist:
    /// the caller completes command `cid` with success and DW0 `dw0`. The event's log
    /// page is masked until the host reads it with RAE cleared.
    pub fn take_aer(&self) -> Option<AerCompletion> {
        let mut s = self.state.lock();
        if s.aer_cids.is_empty() || s.events.is_empty() {
            return None;
        }
        let cid = s.aer_cids.pop_front()?;
        let dw0 = s.events.pop_front()?;
        s.masked_logs.push(event_log_page(dw0));
        Some(AerCompletion { cid, dw0 })
    }

    /// Log page `lid` was read with Retain Asynchronous Event cleared: its event may be
    /// reported again (NVMe Base 2.x §5.16, RAE).
    pub fn log_read(&self, lid: u8) {
        self.state.lock().masked_logs.retain(|&l| l != lid);
    }

    /// Records that command `sqe` of queue `qid` completed with error `status` (the
    /// Error Information log, [`crate::error_log`]).
    pub fn record_error(&self, qid: u16, sqe: &nvme::Sqe, status: Status) {
        self.errors.lock().record(qid, sqe, status);
    }

    /// The Error Information log page (log page 01h), newest entry first.
    pub fn error_log_page(&self) -> Vec<u8> {
        self.errors.lock().page()
    }

    /// Errors recorded so far (SMART log: Number of Error Information Log Entries).
    pub fn error_count(&self) -> u64 {
        self.errors.lock().count()
    }

    /// Removes and returns every held Asynchronous Event Request (controller teardown:
    /// they complete with Command Aborted due to SQ Deletion, or are dropped with the
    /// queue).
    pub fn drain_aers(&self) -> Vec<u16> {
        self.state.lock().aer_cids.drain(..).collect()
    }

    /// Number of held Asynchronous Event Requests.
    pub fn held_aers(&self) -> usize {
        self.state.lock().aer_cids.len()
    }

    /// Records that namespace `nsid` changed (added, removed, resized) and, when the
    /// host enabled Namespace Attribute Notices, queues that event.
    pub fn notify_namespace_changed(&self, nsid: u32) {
        let mut s = self.state.lock();
        if !s.changed_ns.contains(&nsid) && s.changed_ns.len() < 1024 {
            s.changed_ns.push(nsid);
        }
        if s.aen_config & AEC_NS_ATTR != 0 {
            Self::queue_event(&mut s, AEN_NS_ATTR_CHANGED);
        }
    }

    /// The Changed Namespace List, sorted; `clear` (a read with RAE cleared) empties
    /// it.
    pub fn changed_ns(&self, clear: bool) -> Vec<u32> {
        let mut s = self.state.lock();
        let mut v = if clear {
            std::mem::take(&mut s.changed_ns)
        } else {
            s.changed_ns.clone()
        };
        v.sort_unstable();
        v
    }

    /// Takes the Changed Namespace List (a read with RAE cleared), sorted.
    pub fn take_changed_ns(&self) -> Vec<u32> {
        self.changed_ns(true)
    }
}

/// The log page an AER completion DW0 names (bits 23:16).
fn event_log_page(dw0: u32) -> u8 {
    (dw0 >> 16) as u8
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subsystem::tests::{registry_with, HOST, REF_NQN};
    use nvme::properties::ShutdownNotification;

    #[test]
    fn event_dwords() {
        assert_eq!(AEN_NS_ATTR_CHANGED, 0x0004_0002);
        assert_eq!(AEN_DISCOVERY_CHANGED, 0x0070_F002);
    }

    fn ctrl(kato_ms: u32, now: Instant) -> Controller {
        let reg = registry_with(vec![]);
        let sub = reg.subsystem(REF_NQN).unwrap().clone();
        Controller::new(1, sub, HOST.into(), [7; 16], kato_ms, &reg.limits, now)
    }

    #[test]
    fn enable_and_shutdown_follow_nvmet() {
        let t0 = Instant::now();
        let c = ctrl(5000, t0);
        assert!(!c.is_enabled());
        assert!(c.check_ready().is_err());
        // Capture frames 17, 29: CC 00460060 then 00460061 -> CSTS 1.
        c.update_cc(Cc(0x0046_0060), t0);
        assert_eq!(c.csts(), Csts(0));
        c.update_cc(Cc(0x0046_0061), t0);
        assert_eq!(c.csts(), Csts(1));
        assert!(c.is_enabled());
        assert_eq!(c.check_ready(), Ok(()));
        // Frame 79: CC 00464061 (SHN normal) -> CSTS 8 (SHST complete, RDY 0).
        c.update_cc(Cc(0x0046_4061), t0);
        assert_eq!(c.csts(), Csts(8));
        assert_eq!(c.cc(), Cc(0));
        assert!(!c.is_enabled());
        // Shutdown cleared CC (as nvmet), so SHST stays until the next enable.
        c.update_cc(Cc(0x0046_0060), t0);
        assert_eq!(c.csts().shst(), Some(ShutdownStatus::Complete));
        c.update_cc(Cc(0x0046_0061), t0);
        assert_eq!(c.csts(), Csts(1));
        // Abrupt shutdown: the same.
        c.update_cc(Cc(0x0046_0061).with_shn(ShutdownNotification::Abrupt), t0);
        assert_eq!((c.csts(), c.cc()), (Csts(8), Cc(0)));
    }

    #[test]
    fn enable_with_bad_entry_sizes_is_fatal() {
        let t0 = Instant::now();
        let c = ctrl(0, t0);
        c.update_cc(Cc(0).with_iosqes(7).with_iocqes(4).with_en(true), t0);
        assert!(c.csts().cfs());
        assert!(!c.csts().rdy());
        let c = ctrl(0, t0);
        c.update_cc(
            Cc(0)
                .with_iosqes(6)
                .with_iocqes(4)
                .with_css(1)
                .with_en(true),
            t0,
        );
        assert!(c.csts().cfs());
        // Disabling clears CC and RDY.
        let c = ctrl(0, t0);
        c.update_cc(Cc(0x0046_0061), t0);
        c.update_cc(Cc(0x0046_0060), t0);
        assert_eq!((c.cc(), c.csts().rdy()), (Cc(0), false));
        c.set_fatal();
        assert!(c.csts().cfs());
    }

    #[test]
    fn keep_alive_expiry_with_synthetic_time() {
        let t0 = Instant::now();
        let c = ctrl(4500, t0);
        assert_eq!(c.kato_ms(), 5000, "rounded up to whole seconds");
        assert!(!c.kato_expired(t0 + Duration::from_millis(4999)));
        assert!(c.kato_expired(t0 + Duration::from_millis(5000)));
        c.keep_alive(t0 + Duration::from_secs(4));
        assert!(!c.kato_expired(t0 + Duration::from_millis(8999)));
        assert!(c.kato_expired(t0 + Duration::from_secs(9)));
        // An instant before the last keep alive never counts as expired.
        assert!(!c.kato_expired(t0));
        // KATO 0: never.
        let off = ctrl(0, t0);
        assert!(!off.kato_expired(t0 + Duration::from_secs(3600)));
        off.set_kato_ms(1, t0);
        assert_eq!(off.kato_ms(), 1000);
        assert!(off.kato_expired(t0 + Duration::from_secs(1)));
    }

    #[test]
    fn traffic_restarts_the_keep_alive_timer_at_the_next_sweep() {
        let t0 = Instant::now();
        let c = ctrl(2000, t0);
        let at = |ms| t0 + Duration::from_millis(ms);
        // No traffic: the sweep sees the timer run out at KATO.
        assert!(!c.keep_alive_sweep(at(1900)));
        // A command at 1.95 s: the sweep at 2.0 s restarts the timer instead.
        c.note_traffic();
        assert!(!c.keep_alive_sweep(at(2000)));
        assert!(!c.keep_alive_sweep(at(3900)));
        assert!(
            c.keep_alive_sweep(at(4000)),
            "2 s of silence after the restart"
        );
        // Queue setup and teardown count as traffic (nvmet: install_queue, sq_destroy).
        let c = ctrl(2000, t0);
        c.connect_queue(1).unwrap();
        assert!(!c.keep_alive_sweep(at(2500)));
        assert!(!c.keep_alive_sweep(at(4400)));
        c.release_queue(1);
        assert!(!c.keep_alive_sweep(at(4600)));
        assert!(c.keep_alive_sweep(at(6600)));
        // KATO 0: the sweep never expires it.
        let off = ctrl(0, t0);
        assert!(!off.keep_alive_sweep(at(3_600_000)));
    }

    #[test]
    fn discovery_controller_gets_default_kato() {
        let reg = registry_with(vec![]);
        let t0 = Instant::now();
        let c = Controller::new(
            2,
            reg.discovery.clone(),
            HOST.into(),
            [0; 16],
            0,
            &reg.limits,
            t0,
        );
        assert_eq!(c.kind, ControllerKind::Discovery);
        assert_eq!(c.kato_ms(), DISCOVERY_KATO_MS);
        // The configured discovery KATO (rounded up to seconds) replaces the default;
        // 0 leaves the discovery controller without a timer; a KATO the host asks for
        // wins; an I/O controller asking for none gets none.
        let mk = |sub: &Arc<Subsystem>, asked: u32, configured: u32| {
            let limits = Limits {
                discovery_kato_ms: configured,
                ..reg.limits
            };
            Controller::new(2, sub.clone(), HOST.into(), [0; 16], asked, &limits, t0).kato_ms()
        };
        let io = reg.subsystem(REF_NQN).unwrap().clone();
        assert_eq!(mk(&reg.discovery, 0, 1500), 2000);
        assert_eq!(mk(&reg.discovery, 0, 0), 0);
        assert_eq!(mk(&reg.discovery, 5000, 1500), 5000);
        assert_eq!(mk(&io, 0, 1500), 0);
    }

    #[test]
    fn write_through_follows_fua_and_vwc() {
        let c = ctrl(0, Instant::now());
        assert!(c.vwc_enabled(), "the volatile write cache starts enabled");
        assert!(!c.write_through(false));
        assert!(c.write_through(true));
        c.set_vwc_enabled(false);
        assert!(c.write_through(false));
        assert!(c.write_through(true));
        c.set_vwc_enabled(true);
        assert!(!c.write_through(false));
    }

    #[test]
    fn queues_and_aers() {
        let t0 = Instant::now();
        let c = ctrl(0, t0);
        assert_eq!(c.io_queues(), 8);
        assert_eq!(c.set_io_queues(100), 8);
        assert_eq!(c.set_io_queues(2), 2);
        assert!(c.queue_connected(0));
        assert_eq!(c.connect_queue(1), Ok(()));
        assert!(c.connect_queue(1).is_err());
        c.release_queue(1);
        assert_eq!(c.connect_queue(1), Ok(()));

        for cid in 0..MAX_AER as u16 {
            assert_eq!(c.push_aer(cid), Ok(None));
        }
        let e = c.push_aer(9).unwrap_err();
        assert_eq!(e.to_field(), 0x820A, "SCT 1, SC 05h, DNR");
        assert_eq!(c.take_aer(), None);
        c.set_aen_config(AEC_NS_ATTR);
        c.notify_namespace_changed(5);
        c.notify_namespace_changed(5);
        assert_eq!(
            c.take_aer(),
            Some(AerCompletion {
                cid: 0,
                dw0: AEN_NS_ATTR_CHANGED
            })
        );
        assert_eq!(c.take_aer(), None);
        assert_eq!(c.take_changed_ns(), vec![5]);
        assert!(c.take_changed_ns().is_empty());
        assert_eq!(c.drain_aers(), vec![1, 2, 3]);
        // The namespace notice was reported: no second one until log 04h is read with
        // RAE cleared.
        c.post_event(AEN_NS_ATTR_CHANGED);
        assert_eq!(c.push_aer(7), Ok(None));
        assert_eq!(c.take_aer(), None);
        c.log_read(LogPageId::ChangedNamespaceList.value());
        // With no held request, a pending event completes the next AER at once.
        c.drain_aers();
        c.post_event(AEN_NS_ATTR_CHANGED);
        assert_eq!(c.push_aer(7), Ok(Some(AEN_NS_ATTR_CHANGED)));
        assert_eq!(c.held_aers(), 0);
        // A read with RAE set keeps the list; one with RAE cleared empties it.
        c.notify_namespace_changed(9);
        assert_eq!(c.changed_ns(false), vec![9]);
        assert_eq!(c.changed_ns(true), vec![9]);
        assert!(c.changed_ns(true).is_empty());
    }
}

//! How much memory the target pins: each poll group registers its data slab and its
//! receive region as io_uring fixed buffers, which the kernel charges against
//! `RLIMIT_MEMLOCK` (see [`transport::memlock`]); with a provider whose memory
//! registration pins too (verbs: `ibv_reg_mr`), every registered region (the slab and
//! the receive region again, the SQE and response slots) is charged once more. This
//! module decides the data slab's size, and whether io_uring registers it, before any
//! poll group starts.
//!
//! Two charges, two checks. io_uring charges the *user*: the sum over all of the
//! user's processes must stay within the registering process's limit, so what the
//! user's other processes hold ([`OtherPins`], as far as `/proc` shows it) is not
//! available here. `ibv_reg_mr` charges the *process* (its `VmPin`, which counts its
//! io_uring pins too). io_uring registration is an optimisation: without it the ring
//! reads and writes the same memory as plain buffers ([`crate::uring::Ring::add_plain_buffers`]:
//! the kernel looks the pages up per I/O, and nothing is charged). `ibv_reg_mr` is not
//! optional: an RDMA device reaches only registered memory.
//!
//! - Configured (`data_slab` in the configuration, `--data-slab`): used as given,
//!   registered with io_uring when that fits, as plain buffers otherwise (one warning
//!   line says so, with the cost and how to raise the limit). Only when the provider's
//!   own registration (verbs) does not fit does the target not start
//!   ([`MemlockError::OverLimit`], which says how to raise the limit or pin less).
//! - Automatic (the default): [`DEFAULT_DATA_SLAB_BYTES`] (64 MiB) per poll group when
//!   the limit allows it (root, `CAP_IPC_LOCK`, a large `ulimit -l`); otherwise what
//!   fits in the limit, beside what the user's other processes hold, less a headroom of
//!   1/[`HEADROOM_DIVISOR`] for the rest of the process (a host in the same process, the
//!   rings themselves on kernels before 5.12), in whole multiples of MDTS. Under the
//!   common 8 MiB limit, with no other process of the user pinning, one poll group gets
//!   a 5 MiB slab (plus its 2 MiB receive region: the in-capsule data of its 512 receive
//!   buffers; their 64-byte SQEs land in a region io_uring does not pin). When not even
//!   one MDTS fits (a second target of the same user beside the first, a tiny limit),
//!   the slab is used as plain buffers instead: the soft provider then pins nothing and
//!   gets the full 64 MiB, the verbs provider what its own registration leaves room for.
//!
//! The poll group registers what the plan says ([`crate::rdma::PollGroup`]); when the
//! kernel still refuses (a process out of `/proc`'s sight, a ring closed a moment ago),
//! it registers the data slab alone, then nothing, and says so in one log line: the
//! target starts while one MDTS I/O can be served.
//!
//! A slab smaller than MDTS x the commands in flight works: commands wait for a buffer
//! (the request pipeline's NeedBuffer state). A slab smaller than MDTS is refused (the
//! configuration check, [`crate::config::check_data_slab`]): one command could never be
//! served, and the advertised MDTS is not lowered behind the operator's back.
use transport::memlock::{Bytes, MemlockError, MemlockLimit, OtherPins, PinBudget};

/// The data slab per poll group when the memlock limit does not constrain it.
pub const DEFAULT_DATA_SLAB_BYTES: u64 = 64 << 20;
/// Automatic sizing leaves 1/this of a finite limit unpinned for the rest of the process.
pub const HEADROOM_DIVISOR: u64 = 8;

/// What plain (unregistered) buffers cost, for the log lines that announce them:
/// measured with `scripts/bench-ab.sh`-style alternating runs of `nvmf-bench` (see
/// BENCHMARKS.md, "Plain buffers").
pub const PLAIN_BUFFER_COST: &str = "the kernel looks up the buffer's pages on every read \
     and write (about 0.3 us more per 4 KiB read, 1-2% of a 4 KiB NVMe-oF read)";

/// What to fit: the limit, what is pinned already, the poll groups' shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanInput {
    /// The limit in force ([`transport::memlock::PinBudget::limit`]).
    pub limit: MemlockLimit,
    /// Bytes this process has pinned already.
    pub pinned_bytes: u64,
    /// Bytes the user's other processes hold ([`OtherPins::total_bytes`]): io_uring's
    /// charge is the user's, so they are not available to this process's io_uring
    /// registration (a provider's own registration, charged per process, ignores them).
    pub others_pinned_bytes: u64,
    /// Poll groups, each registering one data slab and one receive region.
    pub poll_groups: u32,
    /// Bytes one receive region pins (whole pages).
    pub recv_region_bytes: u64,
    /// Largest data transfer of one command (MDTS) in bytes; the data slab is at least this.
    pub mdts_bytes: u64,
    /// The configured data slab, `None` for automatic sizing.
    pub data_slab_bytes: Option<u64>,
    /// The provider's memory registration pins as well
    /// (`Provider::PINS_REGISTERED_MEMORY`): the slab, the receive region and
    /// [`PlanInput::other_mr_bytes`] are pinned by it, whether or not io_uring registers
    /// the first two.
    pub registration_pins: bool,
    /// Bytes of the poll group's other registered regions (SQE and response slots),
    /// pinned only when `registration_pins`.
    pub other_mr_bytes: u64,
}

/// The registered memory of every poll group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Bytes of each poll group's data slab.
    pub data_slab_bytes: u64,
    /// Bytes each poll group's receive region pins.
    pub recv_region_bytes: u64,
    /// Poll groups.
    pub poll_groups: u32,
    /// Whether the slab was sized automatically (not configured).
    pub automatic: bool,
    /// The limit it was sized for.
    pub limit: MemlockLimit,
    /// Whether io_uring registers the data slab and the receive region as fixed
    /// buffers; `false`: the ring uses them as plain buffers, pinning nothing.
    pub io_uring_fixed: bool,
    /// The provider's registration pins (verbs).
    pub registration_pins: bool,
    /// Bytes of the SQE and response slots, pinned when `registration_pins`.
    pub other_mr_bytes: u64,
}

impl MemoryPlan {
    /// Bytes one poll group pins: io_uring's fixed buffers (when registered) and the
    /// provider's registrations (when they pin).
    pub fn per_group_bytes(&self) -> u64 {
        per_group(
            self.data_slab_bytes,
            self.recv_region_bytes,
            self.other_mr_bytes,
            self.registration_pins,
            self.io_uring_fixed,
        )
    }

    /// Bytes every poll group together pins.
    pub fn total_bytes(&self) -> u64 {
        u64::from(self.poll_groups) * self.per_group_bytes()
    }

    /// Whether an automatic slab came out smaller than [`DEFAULT_DATA_SLAB_BYTES`], or
    /// is not registered with io_uring.
    pub fn reduced(&self) -> bool {
        self.automatic && (self.data_slab_bytes < DEFAULT_DATA_SLAB_BYTES || !self.io_uring_fixed)
    }
}

/// Bytes one poll group pins with a `slab`-byte data slab.
fn per_group(slab: u64, recv: u64, other: u64, registration_pins: bool, io_uring: bool) -> u64 {
    let provider = if registration_pins {
        slab + recv + other
    } else {
        0
    };
    let ring = if io_uring { slab + recv } else { 0 };
    provider + ring
}

/// How a target pins less, for [`MemlockError`]'s message: the configuration keys
/// ([`crate::config::TargetConfig`]). A program replaces it with its own options
/// ([`MemlockError::with_smaller`]).
pub const PIN_LESS_HINT: &str =
    "a smaller data_slab (at least mdts_bytes), fewer poll_groups, or a smaller inline_data_size \
     (target configuration)";

/// Sizes the data slab and decides whether io_uring registers it (see the module docs).
///
/// # Errors
/// [`MemlockError::OverLimit`] when the provider's own registration (verbs) of the
/// configured slab, or for automatic sizing of a slab of one MDTS, does not fit in the
/// limit with every poll group's receive region and slots. With a provider whose
/// registration does not pin (soft), never.
pub fn plan(input: &PlanInput) -> Result<MemoryPlan, MemlockError> {
    let groups = u64::from(input.poll_groups.max(1));
    let make = |slab: u64, automatic, io_uring_fixed| MemoryPlan {
        data_slab_bytes: slab,
        recv_region_bytes: input.recv_region_bytes,
        poll_groups: groups as u32,
        automatic,
        limit: input.limit,
        io_uring_fixed,
        registration_pins: input.registration_pins,
        other_mr_bytes: input.other_mr_bytes,
    };
    let Some(limit) = input.limit.bytes() else {
        let slab = input.data_slab_bytes.unwrap_or(DEFAULT_DATA_SLAB_BYTES);
        return Ok(make(slab, input.data_slab_bytes.is_none(), true));
    };
    // Whether every group's `slab` fits under `limit - reserve`: the process's own pins
    // (VmPin, what a provider's registration is checked against) and, with io_uring
    // registration, the user's (the others' too, what io_uring is checked against).
    let fits = |slab: u64, io_uring: bool, reserve: u64| {
        let room = limit.saturating_sub(reserve);
        let g = |io_uring| {
            per_group(
                slab,
                input.recv_region_bytes,
                input.other_mr_bytes,
                input.registration_pins,
                io_uring,
            )
        };
        let process = input.pinned_bytes.saturating_add(groups * g(io_uring));
        let user = input
            .pinned_bytes
            .saturating_add(input.others_pinned_bytes)
            .saturating_add(groups * (g(true) - g(false)));
        process <= room && (!io_uring || user <= room)
    };
    if let Some(slab) = input.data_slab_bytes {
        return [true, false]
            .into_iter()
            .find(|&io_uring| fits(slab, io_uring, 0))
            .map(|io_uring| make(slab, false, io_uring))
            .ok_or_else(|| over(input, groups, slab));
    }
    let mdts = input.mdts_bytes.max(1);
    let headroom = limit / HEADROOM_DIVISOR;
    for io_uring in [true, false] {
        // The largest whole number of MDTS up to the default that fits with the headroom.
        let most = DEFAULT_DATA_SLAB_BYTES / mdts;
        if let Some(n) = (1..=most)
            .rev()
            .find(|&n| fits(n * mdts, io_uring, headroom))
        {
            return Ok(make(n * mdts, true, io_uring));
        }
        // Not even one MDTS with the headroom: one MDTS without it, if that fits.
        if fits(mdts, io_uring, 0) {
            return Ok(make(mdts, true, io_uring));
        }
    }
    Err(over(input, groups, mdts))
}

/// The refusal when the provider's own registration of a `slab`-byte data slab per
/// group does not fit.
fn over(input: &PlanInput, groups: u64, slab: u64) -> MemlockError {
    MemlockError::OverLimit {
        what: format!(
            "{groups} poll group(s), each registering a {} data slab, a {} receive region and \
             {} of SQE and response slots with the RDMA device (ibv_reg_mr pins them)",
            Bytes(slab),
            Bytes(input.recv_region_bytes),
            Bytes(input.other_mr_bytes)
        ),
        limit: input.limit,
        pinned: input.pinned_bytes,
        needed: groups
            * per_group(
                slab,
                input.recv_region_bytes,
                input.other_mr_bytes,
                input.registration_pins,
                false,
            ),
        smaller: Some(PIN_LESS_HINT.to_string()),
    }
}

/// [`plan`] for a target configuration and its poll group shape, against this
/// process's budget ([`PinBudget::process`]) and what the user's other processes hold
/// ([`OtherPins::of_this_user`]); logs the outcome: at info when the slab is smaller
/// than [`DEFAULT_DATA_SLAB_BYTES`], with how to get the full size; a warning when
/// io_uring will not register it, with the cost.
///
/// `registration_pins`: the provider's memory registration pins as well
/// (`Provider::PINS_REGISTERED_MEMORY`).
///
/// # Errors
/// As [`plan`].
pub fn plan_for(
    cfg: &crate::config::TargetConfig,
    group: &crate::rdma::PollGroupConfig,
    registration_pins: bool,
) -> Result<MemoryPlan, MemlockError> {
    let budget = PinBudget::process();
    let page = transport::memlock::page_size();
    let limit = budget.limit();
    let others = match limit {
        MemlockLimit::Unlimited => OtherPins::default(),
        MemlockLimit::Bytes(_) => OtherPins::of_this_user(),
    };
    let input = PlanInput {
        limit,
        pinned_bytes: budget.pinned_bytes(),
        others_pinned_bytes: others.total_bytes(),
        // Each distinct listen address has its own device and poll groups.
        poll_groups: cfg.poll_groups.max(1) as u32 * distinct_listen_addrs(cfg),
        recv_region_bytes: (group.recv_region_bytes() as u64).div_ceil(page) * page,
        mdts_bytes: u64::from(cfg.mdts_bytes),
        data_slab_bytes: cfg.data_slab,
        registration_pins,
        other_mr_bytes: group.other_mr_bytes() as u64,
    };
    let p = plan(&input)?;
    // The limit at which every poll group gets a registered 64 MiB slab with the headroom.
    let full_kib = |slab: u64| {
        let full = MemoryPlan {
            data_slab_bytes: slab,
            io_uring_fixed: true,
            ..p
        };
        ((input.pinned_bytes + input.others_pinned_bytes + full.total_bytes()) * HEADROOM_DIVISOR
            / (HEADROOM_DIVISOR - 1))
            .div_ceil(1024)
    };
    // io_uring charges the user: say who else holds part of the limit.
    let others_note = if others.holders.is_empty() {
        String::new()
    } else {
        format!(
            "; io_uring charges all processes of a user together, and {}",
            others.describe()
        )
    };
    if !p.io_uring_fixed {
        tracing::warn!(
            "RLIMIT_MEMLOCK {} leaves no room to register each of {} poll group(s)' {} data slab \
             and {} receive region with io_uring{others_note}. They serve as plain buffers \
             instead, so {PLAIN_BUFFER_COST}; `ulimit -l {}` or more (or CAP_IPC_LOCK) \
             registers them",
            p.limit,
            p.poll_groups,
            Bytes(p.data_slab_bytes),
            Bytes(p.recv_region_bytes),
            full_kib(p.data_slab_bytes.min(DEFAULT_DATA_SLAB_BYTES)),
        );
    } else if p.reduced() {
        tracing::info!(
            "RLIMIT_MEMLOCK {}: each of {} poll group(s) registers a {} data slab (64 MiB with \
             `ulimit -l {}` or more, or CAP_IPC_LOCK); commands wait for a buffer when it is in \
             use{others_note}",
            p.limit,
            p.poll_groups,
            Bytes(p.data_slab_bytes),
            full_kib(DEFAULT_DATA_SLAB_BYTES),
        );
    } else {
        tracing::debug!(
            "each of {} poll group(s) registers a {} data slab and a {} receive region (RLIMIT_MEMLOCK {})",
            p.poll_groups,
            Bytes(p.data_slab_bytes),
            Bytes(p.recv_region_bytes),
            p.limit
        );
    }
    Ok(p)
}

/// How many listen addresses of `cfg` differ (the target opens a device, and its poll
/// groups, per address).
fn distinct_listen_addrs(cfg: &crate::config::TargetConfig) -> u32 {
    let mut addrs: Vec<_> = cfg.listen.iter().map(|l| l.addr).collect();
    addrs.sort();
    addrs.dedup();
    addrs.len().max(1) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    /// A receive region of 2.03 MiB (512 x (64 + 4096) bytes, whole pages; the poll
    /// group's own is [`crate::rdma::PollGroupConfig::recv_region_bytes`]).
    const RECV: u64 = (512 * (64 + 4096) as u64).div_ceil(4096) * 4096;

    fn input(limit: MemlockLimit, groups: u32, slab: Option<u64>) -> PlanInput {
        PlanInput {
            limit,
            pinned_bytes: 0,
            others_pinned_bytes: 0,
            poll_groups: groups,
            recv_region_bytes: RECV,
            mdts_bytes: MIB,
            data_slab_bytes: slab,
            registration_pins: false,
            other_mr_bytes: 0,
        }
    }

    #[test]
    fn unlimited_keeps_64_mib_slabs() {
        let p = plan(&input(MemlockLimit::Unlimited, 2, None)).unwrap();
        assert_eq!(p.data_slab_bytes, 64 * MIB);
        assert!(p.automatic && !p.reduced() && p.io_uring_fixed);
        assert_eq!(p.total_bytes(), 2 * (64 * MIB + RECV));
        // A large limit is as good as none.
        let p = plan(&input(MemlockLimit::Bytes(1 << 30), 1, None)).unwrap();
        assert_eq!(p.data_slab_bytes, 64 * MIB);
    }

    #[test]
    fn default_8_mib_limit_fits_one_and_two_poll_groups() {
        let p = plan(&input(MemlockLimit::Bytes(8 * MIB), 1, None)).unwrap();
        assert_eq!(p.data_slab_bytes, 4 * MIB);
        assert!(p.reduced() && p.io_uring_fixed);
        assert!(p.total_bytes() <= 8 * MIB - MIB, "headroom kept");
        let p = plan(&input(MemlockLimit::Bytes(8 * MIB), 2, None)).unwrap();
        assert_eq!(p.data_slab_bytes, MIB);
        assert!(p.io_uring_fixed);
        assert!(p.total_bytes() <= 8 * MIB);
        // Three groups' receive regions alone take 6 MiB: one MDTS each does not fit,
        // so they serve from plain buffers, the full default slab, pinning nothing.
        let p = plan(&input(MemlockLimit::Bytes(8 * MIB), 3, None)).unwrap();
        assert!(!p.io_uring_fixed && p.reduced());
        assert_eq!((p.data_slab_bytes, p.total_bytes()), (64 * MIB, 0));
    }

    #[test]
    fn the_default_poll_group_gets_5_mib_under_8_mib() {
        let recv = crate::rdma::PollGroupConfig::default().recv_region_bytes() as u64;
        assert_eq!(recv, 2 * MIB, "512 x 4 KiB of in-capsule data");
        let i = PlanInput {
            recv_region_bytes: recv,
            ..input(MemlockLimit::Bytes(8 * MIB), 1, None)
        };
        let p = plan(&i).unwrap();
        assert_eq!(p.data_slab_bytes, 5 * MIB);
        assert_eq!(p.total_bytes(), 7 * MIB, "1/8 of the limit left");
    }

    #[test]
    fn automatic_sizing_counts_what_is_pinned_and_dips_into_headroom_last() {
        let mut i = input(MemlockLimit::Bytes(8 * MIB), 1, None);
        i.pinned_bytes = 3 * MIB;
        // 8 - 3 - 1 (headroom) - 2.03 (receive region) = 1.97: one MiB.
        assert_eq!(plan(&i).unwrap().data_slab_bytes, MIB);
        i.pinned_bytes = 4 * MIB + MIB / 2;
        // Only without the headroom: 8 - 4.5 = 3.5 >= 1 + 2.03.
        assert_eq!(plan(&i).unwrap().data_slab_bytes, MIB);
        i.pinned_bytes = 5 * MIB + MIB / 2;
        let p = plan(&i).unwrap();
        assert!(
            !p.io_uring_fixed,
            "no room left: plain buffers, not a refusal"
        );
        // Slabs are whole MDTS multiples.
        let mut i = input(MemlockLimit::Bytes(16 * MIB), 1, None);
        i.mdts_bytes = 4 * MIB;
        assert_eq!(plan(&i).unwrap().data_slab_bytes, 8 * MIB);
    }

    /// io_uring charges the user: what the user's other processes hold is not there to
    /// register. A second target beside one that took 7 of 8 MiB still starts.
    #[test]
    fn other_processes_of_the_user_shrink_or_unregister_the_slab() {
        let mut i = input(MemlockLimit::Bytes(64 * MIB), 1, None);
        i.others_pinned_bytes = 56 * MIB;
        // 64 - 56 - 8 (headroom) leaves nothing; without the headroom one MDTS fits.
        let p = plan(&i).unwrap();
        assert!(p.io_uring_fixed);
        assert_eq!(p.data_slab_bytes, MIB);
        i.others_pinned_bytes = 30 * MIB;
        assert_eq!(plan(&i).unwrap().data_slab_bytes, 23 * MIB);
        let mut i = input(MemlockLimit::Bytes(8 * MIB), 1, None);
        i.others_pinned_bytes = 7 * MIB;
        let p = plan(&i).unwrap();
        assert!(!p.io_uring_fixed);
        assert_eq!(p.total_bytes(), 0);
    }

    #[test]
    fn configured_slab_is_registered_or_served_plain() {
        let p = plan(&input(MemlockLimit::Bytes(8 * MIB), 1, Some(2 * MIB))).unwrap();
        assert_eq!((p.data_slab_bytes, p.automatic), (2 * MIB, false));
        assert!(p.io_uring_fixed);
        let p = plan(&input(MemlockLimit::Unlimited, 4, Some(256 * MIB))).unwrap();
        assert_eq!(p.data_slab_bytes, 256 * MIB);
        // Too big to register: used as given, as plain buffers.
        let p = plan(&input(MemlockLimit::Bytes(8 * MIB), 1, Some(64 * MIB))).unwrap();
        assert_eq!((p.data_slab_bytes, p.io_uring_fixed), (64 * MIB, false));
        assert!(!p.reduced(), "configured, not automatic");
    }

    /// With the verbs provider the RDMA device must reach the slab: `ibv_reg_mr` pins it
    /// (per process, beside what others hold), so io_uring's registration is what gives.
    #[test]
    fn a_pinning_provider_registers_what_the_device_needs_first() {
        let verbs = |limit: u64, slab: Option<u64>| PlanInput {
            registration_pins: true,
            other_mr_bytes: 64 << 10,
            ..input(MemlockLimit::Bytes(limit), 1, slab)
        };
        // 16 MiB: slab x 2 + receive region x 2 + slots within 14 MiB: 4 MiB slab.
        let p = plan(&verbs(16 * MIB, None)).unwrap();
        assert_eq!((p.data_slab_bytes, p.io_uring_fixed), (4 * MIB, true));
        assert_eq!(p.total_bytes(), 2 * (4 * MIB + RECV) + (64 << 10));
        // 8 MiB: one MDTS, registered twice.
        let p = plan(&verbs(8 * MIB, None)).unwrap();
        assert_eq!((p.data_slab_bytes, p.io_uring_fixed), (MIB, true));
        // 6 MiB: io_uring's copy does not fit beside the device's, so only the device's.
        let p = plan(&verbs(6 * MIB, None)).unwrap();
        assert_eq!((p.data_slab_bytes, p.io_uring_fixed), (3 * MIB, false));
        assert_eq!(p.total_bytes(), 3 * MIB + RECV + (64 << 10));
        // Others' pins count against io_uring's registration, not the device's.
        let mut i = verbs(8 * MIB, None);
        i.others_pinned_bytes = 8 * MIB;
        let p = plan(&i).unwrap();
        assert_eq!((p.data_slab_bytes, p.io_uring_fixed), (4 * MIB, false));
        // A configured slab the device's registration cannot take is refused.
        let e = plan(&verbs(8 * MIB, Some(64 * MIB))).unwrap_err();
        match &e {
            MemlockError::OverLimit { needed, .. } => {
                assert_eq!(*needed, 64 * MIB + RECV + (64 << 10))
            }
            other => panic!("{other:?}"),
        }
        let msg = e.to_string();
        for want in [
            "64 MiB data slab",
            "ibv_reg_mr",
            "ulimit -l",
            "LimitMEMLOCK=",
            "a smaller data_slab",
        ] {
            assert!(msg.contains(want), "missing {want:?}: {msg}");
        }
        // A limit below one MDTS with its receive region: refused, naming the limit.
        let e = plan(&verbs(2 * MIB, None)).unwrap_err();
        assert!(e.to_string().contains("RLIMIT_MEMLOCK (2 MiB)"), "{e}");
    }
}

//! How much memory the target pins: each poll group registers its data slab and its
//! receive region as io_uring fixed buffers, which the kernel charges against
//! `RLIMIT_MEMLOCK` (see [`transport::memlock`]); with a provider whose memory
//! registration pins too (verbs: `ibv_reg_mr`), every registered region (the slab and
//! the receive region again, the SQE and response slots) is charged once more. This
//! module decides the data slab's size before any poll group starts.
//!
//! - Configured (`data_slab` in the configuration, `--data-slab`): used as given; when
//!   every poll group's slab and receive region do not fit the limit, the target does not
//!   start ([`MemlockError::OverLimit`], which says how to raise the limit).
//! - Automatic (the default): [`DEFAULT_DATA_SLAB_BYTES`] (64 MiB) per poll group when
//!   the limit allows it (root, `CAP_IPC_LOCK`, a large `ulimit -l`); otherwise what
//!   fits in the limit less a headroom of 1/[`HEADROOM_DIVISOR`] for the rest of the
//!   process (a host in the same process, the rings themselves on kernels before 5.12),
//!   in whole multiples of MDTS. Under the common 8 MiB limit one poll group gets a
//!   5 MiB slab (plus its 2 MiB receive region: the in-capsule data of its 512 receive
//!   buffers; their 64-byte SQEs land in a region io_uring does not pin).
//!
//! A slab smaller than MDTS x the commands in flight works: commands wait for a buffer
//! (the request pipeline's NeedBuffer state). A slab smaller than MDTS is refused (the
//! configuration check, [`crate::config::check_data_slab`], and here when the limit
//! leaves less than one MDTS per poll group): one command could never be served, and
//! the advertised MDTS is not lowered behind the operator's back.
use transport::memlock::{Bytes, MemlockError, MemlockLimit, PinBudget};

/// The data slab per poll group when the memlock limit does not constrain it.
pub const DEFAULT_DATA_SLAB_BYTES: u64 = 64 << 20;
/// Automatic sizing leaves 1/this of a finite limit unpinned for the rest of the process.
pub const HEADROOM_DIVISOR: u64 = 8;

/// What to fit: the limit, what the process already pins, the poll groups' shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanInput {
    /// The limit in force ([`transport::memlock::PinBudget::limit`]).
    pub limit: MemlockLimit,
    /// Bytes the process has pinned already.
    pub pinned_bytes: u64,
    /// Poll groups, each registering one data slab and one receive region.
    pub poll_groups: u32,
    /// Bytes one receive region pins (whole pages).
    pub recv_region_bytes: u64,
    /// Largest data transfer of one command (MDTS) in bytes; the data slab is at least this.
    pub mdts_bytes: u64,
    /// The configured data slab, `None` for automatic sizing.
    pub data_slab_bytes: Option<u64>,
    /// The provider's memory registration pins as well
    /// (`Provider::PINS_REGISTERED_MEMORY`): the slab and the receive region count
    /// twice, and [`PlanInput::other_mr_bytes`] once.
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
    /// Bytes each poll group pins besides its data slab(s): the receive region (twice
    /// when registration pins) and the other registered regions.
    pub fixed_bytes: u64,
    /// Times the data slab is pinned: 1 (io_uring), 2 when registration pins too.
    pub slab_pins: u64,
}

impl MemoryPlan {
    /// Bytes every poll group together pins.
    pub fn total_bytes(&self) -> u64 {
        u64::from(self.poll_groups) * (self.slab_pins * self.data_slab_bytes + self.fixed_bytes)
    }

    /// Whether an automatic slab came out smaller than [`DEFAULT_DATA_SLAB_BYTES`].
    pub fn reduced(&self) -> bool {
        self.automatic && self.data_slab_bytes < DEFAULT_DATA_SLAB_BYTES
    }
}

/// How a target pins less, for [`MemlockError`]'s message.
pub const PIN_LESS_HINT: &str =
    "a smaller data_slab (target configuration, nvmf-target --data-slab; at least mdts_bytes), \
     fewer poll_groups, or a smaller inline_data_size";

/// Sizes the data slab (see the module docs).
///
/// # Errors
/// [`MemlockError::OverLimit`] when the configured slab, or for automatic sizing a slab
/// of one MDTS, does not fit in the limit with every poll group's receive region.
pub fn plan(input: &PlanInput) -> Result<MemoryPlan, MemlockError> {
    let groups = u64::from(input.poll_groups.max(1));
    let (slab_pins, fixed) = if input.registration_pins {
        (2, 2 * input.recv_region_bytes + input.other_mr_bytes)
    } else {
        (1, input.recv_region_bytes)
    };
    let per_group = |slab: u64| slab_pins * slab + fixed;
    let make = |slab: u64, automatic| MemoryPlan {
        data_slab_bytes: slab,
        recv_region_bytes: input.recv_region_bytes,
        poll_groups: groups as u32,
        automatic,
        limit: input.limit,
        fixed_bytes: fixed,
        slab_pins,
    };
    let over = |slab: u64| {
        let mut what = format!(
            "{groups} poll group(s), each pinning a {} data slab and a {} receive region as io_uring fixed buffers",
            Bytes(slab),
            Bytes(input.recv_region_bytes)
        );
        if input.registration_pins {
            what.push_str(&format!(
                " and registering them, with {} of SQE and response slots, with the RDMA device (ibv_reg_mr pins them again)",
                Bytes(input.other_mr_bytes)
            ));
        }
        MemlockError::OverLimit {
            what,
            limit: input.limit,
            pinned: input.pinned_bytes,
            needed: groups * per_group(slab),
            smaller: Some(PIN_LESS_HINT.to_string()),
        }
    };
    let available = input
        .limit
        .bytes()
        .map(|l| l.saturating_sub(input.pinned_bytes));
    if let Some(slab) = input.data_slab_bytes {
        return match available {
            Some(a) if groups * per_group(slab) > a => Err(over(slab)),
            _ => Ok(make(slab, false)),
        };
    }
    let (Some(limit), Some(available)) = (input.limit.bytes(), available) else {
        return Ok(make(DEFAULT_DATA_SLAB_BYTES, true));
    };
    let mdts = input.mdts_bytes.max(1);
    let usable = available.saturating_sub(limit / HEADROOM_DIVISOR);
    let slab_room = (usable / groups).saturating_sub(fixed) / slab_pins;
    let slab = (slab_room / mdts * mdts).min(DEFAULT_DATA_SLAB_BYTES);
    if slab >= mdts {
        return Ok(make(slab, true));
    }
    // Not even one MDTS with the headroom: one MDTS without it, if that fits.
    if groups * per_group(mdts) <= available {
        Ok(make(mdts, true))
    } else {
        Err(over(mdts))
    }
}

/// [`plan`] for a target configuration and its poll group shape, against this
/// process's budget ([`PinBudget::process`]); logs the outcome (at info when the slab is
/// smaller than [`DEFAULT_DATA_SLAB_BYTES`], with how to get the full size).
///
/// # Errors
/// As [`plan`].
/// `registration_pins`: the provider's memory registration pins as well
/// (`Provider::PINS_REGISTERED_MEMORY`).
pub fn plan_for(
    cfg: &crate::config::TargetConfig,
    group: &crate::rdma::PollGroupConfig,
    registration_pins: bool,
) -> Result<MemoryPlan, MemlockError> {
    let budget = PinBudget::process();
    let page = transport::memlock::page_size();
    let input = PlanInput {
        limit: budget.limit(),
        pinned_bytes: budget.pinned_bytes(),
        // Each distinct listen address has its own device and poll groups.
        poll_groups: cfg.poll_groups.max(1) as u32 * distinct_listen_addrs(cfg),
        recv_region_bytes: (group.recv_region_bytes() as u64).div_ceil(page) * page,
        mdts_bytes: u64::from(cfg.mdts_bytes),
        data_slab_bytes: cfg.data_slab,
        registration_pins,
        other_mr_bytes: group.other_mr_bytes() as u64,
    };
    let p = plan(&input)?;
    if p.reduced() {
        let full = (input.pinned_bytes
            + u64::from(p.poll_groups) * (p.slab_pins * DEFAULT_DATA_SLAB_BYTES + p.fixed_bytes))
            * HEADROOM_DIVISOR
            / (HEADROOM_DIVISOR - 1);
        tracing::info!(
            "RLIMIT_MEMLOCK {}: each of {} poll group(s) registers a {} data slab (64 MiB with \
             `ulimit -l {}` or more, or CAP_IPC_LOCK); commands wait for a buffer when it is in use",
            p.limit,
            p.poll_groups,
            Bytes(p.data_slab_bytes),
            full.div_ceil(1024),
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
        assert!(p.automatic && !p.reduced());
        assert_eq!(p.total_bytes(), 2 * (64 * MIB + RECV));
        // A large limit is as good as none.
        let p = plan(&input(MemlockLimit::Bytes(1 << 30), 1, None)).unwrap();
        assert_eq!(p.data_slab_bytes, 64 * MIB);
    }

    #[test]
    fn default_8_mib_limit_fits_one_and_two_poll_groups() {
        let p = plan(&input(MemlockLimit::Bytes(8 * MIB), 1, None)).unwrap();
        assert_eq!(p.data_slab_bytes, 4 * MIB);
        assert!(p.reduced());
        assert!(p.total_bytes() <= 8 * MIB - MIB, "headroom kept");
        let p = plan(&input(MemlockLimit::Bytes(8 * MIB), 2, None)).unwrap();
        assert_eq!(p.data_slab_bytes, MIB);
        assert!(p.total_bytes() <= 8 * MIB);
        // Three groups' receive regions alone take 6 MiB: one MDTS each does not fit.
        let e = plan(&input(MemlockLimit::Bytes(8 * MIB), 3, None)).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("3 poll group(s)") && msg.contains("fewer poll_groups"),
            "{msg}"
        );
        assert!(msg.contains("RLIMIT_MEMLOCK (8 MiB)"), "{msg}");
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
        assert!(matches!(
            plan(&i),
            Err(MemlockError::OverLimit { pinned, .. }) if pinned == 5 * MIB + MIB / 2
        ));
        // Slabs are whole MDTS multiples.
        let mut i = input(MemlockLimit::Bytes(16 * MIB), 1, None);
        i.mdts_bytes = 4 * MIB;
        assert_eq!(plan(&i).unwrap().data_slab_bytes, 8 * MIB);
    }

    #[test]
    fn configured_slab_is_used_or_refused() {
        let p = plan(&input(MemlockLimit::Bytes(8 * MIB), 1, Some(2 * MIB))).unwrap();
        assert_eq!((p.data_slab_bytes, p.automatic), (2 * MIB, false));
        let p = plan(&input(MemlockLimit::Unlimited, 4, Some(256 * MIB))).unwrap();
        assert_eq!(p.data_slab_bytes, 256 * MIB);
        let e = plan(&input(MemlockLimit::Bytes(8 * MIB), 1, Some(64 * MIB))).unwrap_err();
        match &e {
            MemlockError::OverLimit { needed, .. } => assert_eq!(*needed, 64 * MIB + RECV),
            other => panic!("{other:?}"),
        }
        let msg = e.to_string();
        for want in [
            "64 MiB data slab",
            "ulimit -l",
            "LimitMEMLOCK=",
            "a smaller data_slab",
        ] {
            assert!(msg.contains(want), "missing {want:?}: {msg}");
        }
    }
}

//! Process limits: `RLIMIT_MEMLOCK` against what the target pins, `RLIMIT_NOFILE`
//! against one UDP socket per QP (soft provider).
//!
//! The memlock rule is the target's own ([`nvmf_target::memory::plan`]): each poll
//! group registers its data slab and its receive region with io_uring, which the
//! kernel charges against the limit unless the process has `CAP_IPC_LOCK`; the verbs
//! provider's `ibv_reg_mr` pins them once more. Over the limit the soft provider's
//! target serves from plain buffers (slower: a warning), the verbs provider's does not
//! start (a failure).
use nvmf_target::memory::{plan, PlanInput, DEFAULT_DATA_SLAB_BYTES, HEADROOM_DIVISOR};
use nvmf_target::rdma::PollGroupConfig;
use transport::fdlimit::NofileLimit;
use transport::memlock::{page_size, Bytes, MemlockLimit, OtherPins};
use transport::ProviderKind;

use super::{Finding, Options, Status};

/// Descriptors a target needs beside its QP sockets (receive sockets, CM, files, logs).
pub const NOFILE_HEADROOM: u64 = 64;

/// The target's poll group shape for `opts` (its defaults otherwise).
fn group(opts: &Options) -> PollGroupConfig {
    PollGroupConfig {
        max_io_bytes: opts.mdts_bytes,
        in_capsule_bytes: super::target_defaults().inline_data_size,
        ..PollGroupConfig::default()
    }
}

/// Adds the memlock and nofile findings.
pub fn check(opts: &Options, out: &mut Vec<Finding>) {
    memlock(opts, MemlockLimit::of_process(), out);
    nofile(opts, out);
}

/// The memlock finding for `limit`.
pub fn memlock(opts: &Options, limit: MemlockLimit, out: &mut Vec<Finding>) {
    let g = group(opts);
    let page = page_size();
    let others = match limit {
        MemlockLimit::Unlimited => 0,
        MemlockLimit::Bytes(_) => OtherPins::of_this_user().total_bytes(),
    };
    let pins = opts.provider == ProviderKind::Verbs;
    let input = PlanInput {
        limit,
        pinned_bytes: 0,
        others_pinned_bytes: others,
        poll_groups: opts.poll_groups.max(1),
        recv_region_bytes: (g.recv_region_bytes() as u64).div_ceil(page) * page,
        mdts_bytes: u64::from(opts.mdts_bytes),
        data_slab_bytes: opts.data_slab_bytes,
        registration_pins: pins,
        other_mr_bytes: g.other_mr_bytes() as u64,
    };
    let slab = opts.data_slab_bytes.unwrap_or(DEFAULT_DATA_SLAB_BYTES);
    // What every group pins with the wanted slab registered with io_uring (and the
    // device), plus what the user's other processes hold; automatic sizing keeps
    // 1/HEADROOM_DIVISOR free.
    let per_group = (slab + input.recv_region_bytes) * if pins { 2 } else { 1 }
        + if pins { input.other_mr_bytes } else { 0 };
    let mut need = others + u64::from(input.poll_groups) * per_group;
    if opts.data_slab_bytes.is_none() {
        need = need * HEADROOM_DIVISOR / (HEADROOM_DIVISOR - 1);
    }
    let kib = need.div_ceil(1024);
    let fix = Some(format!(
        "ulimit -l {kib} in the shell that starts the target (LimitMEMLOCK={} in its systemd \
         unit, or `prlimit --memlock={}:{} --pid <PID>`; CAP_IPC_LOCK lifts the limit)",
        kib * 1024,
        kib * 1024,
        kib * 1024
    ));
    let what = format!(
        "{} poll group(s) x ({} data slab + {} receive region){}",
        input.poll_groups,
        Bytes(slab),
        Bytes(input.recv_region_bytes),
        if pins {
            ", registered with io_uring and with the RDMA device"
        } else {
            ", registered with io_uring"
        }
    );
    match plan(&input) {
        Err(e) => out.push(Finding::new(
            "memlock",
            Status::Fail,
            format!("RLIMIT_MEMLOCK {limit} is too small for {what}: {e}"),
            "the verbs provider must pin every registered region (ibv_reg_mr): the target \
             does not start",
            fix,
        )),
        Ok(p) if !p.io_uring_fixed => out.push(Finding::new(
            "memlock",
            Status::Warn,
            format!(
                "RLIMIT_MEMLOCK {limit} is too small for {what} ({} needed{})",
                Bytes(need),
                if others > 0 {
                    format!(", the user's other processes hold {}", Bytes(others))
                } else {
                    String::new()
                }
            ),
            format!(
                "the target serves from plain buffers instead: {}",
                nvmf_target::memory::PLAIN_BUFFER_COST
            ),
            fix,
        )),
        Ok(p) if p.reduced() => out.push(Finding::new(
            "memlock",
            Status::Warn,
            format!(
                "RLIMIT_MEMLOCK {limit}: each poll group gets a {} data slab, not {}",
                Bytes(p.data_slab_bytes),
                Bytes(DEFAULT_DATA_SLAB_BYTES)
            ),
            "commands wait for a buffer when the smaller slab is in use",
            fix,
        )),
        Ok(p) => out.push(Finding::new(
            "memlock",
            Status::Ok,
            format!(
                "RLIMIT_MEMLOCK {limit}: {} poll group(s) register a {} data slab each",
                p.poll_groups,
                Bytes(p.data_slab_bytes)
            ),
            "",
            None,
        )),
    }
}

fn show(v: u64) -> String {
    if v == libc::RLIM_INFINITY {
        "unlimited".into()
    } else {
        v.to_string()
    }
}

/// The nofile finding: the hard limit (nvmf-target and nvmf-bench raise the soft limit
/// to it) against one socket per QP plus [`NOFILE_HEADROOM`].
pub fn nofile(opts: &Options, out: &mut Vec<Finding>) {
    let Ok(l) = NofileLimit::of_process() else {
        out.push(Finding::new(
            "nofile",
            Status::Skip,
            "RLIMIT_NOFILE does not read",
            "not visible here",
            None,
        ));
        return;
    };
    if opts.provider == ProviderKind::Verbs {
        out.push(Finding::new(
            "nofile",
            Status::Ok,
            format!(
                "RLIMIT_NOFILE {} (hard {}); the verbs provider opens no descriptor per QP",
                show(l.soft),
                show(l.hard)
            ),
            "",
            None,
        ));
        return;
    }
    let need = opts.qps + u64::from(opts.poll_groups) + NOFILE_HEADROOM;
    if l.hard != libc::RLIM_INFINITY && l.hard < need {
        out.push(Finding::new(
            "nofile",
            Status::Warn,
            format!(
                "RLIMIT_NOFILE hard limit {} is below the {need} descriptors {} QPs need (one UDP \
                 socket each on the soft provider, plus {} for the rest)",
                show(l.hard),
                opts.qps,
                need - opts.qps
            ),
            "QPs beyond the limit are refused (\"no file descriptor left for a QP's UDP socket\")",
            Some(format!(
                "ulimit -n {need} as root before starting the target (LimitNOFILE={need} in a \
                 systemd unit, `nofile` in /etc/security/limits.conf)"
            )),
        ));
    } else {
        out.push(Finding::new(
            "nofile",
            Status::Ok,
            format!(
                "RLIMIT_NOFILE {} (hard {}): room for {} QPs (the target raises the soft limit \
                 to the hard one)",
                show(l.soft),
                show(l.hard),
                opts.qps
            ),
            "",
            None,
        ));
    }
}

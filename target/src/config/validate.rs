//! The one validator: every rule a configuration must meet, whichever reader made it
//! ([`TargetConfig::validate_as`]). Each refusal names the item by its place in the
//! model (`listen[1]`, `subsystems[0] (NQN): namespaces[2]`) and says what to do.

use std::collections::HashSet;
use std::path::Path;

use nvme::properties::Vs;
use nvme::{NVME_NQN_MAX, NVMF_DISCOVERY_NQN};

use super::model::*;
use super::size::parse_size;
use super::ConfigError;
use crate::provider::ProviderKind;

/// Whether `nqn` is a syntactically acceptable NQN: "nqn." prefix, at most 223 bytes,
/// no control characters (NVMe Base 2.x §4.7).
pub fn is_valid_nqn(nqn: &str) -> bool {
    nqn.starts_with("nqn.")
        && nqn.len() > 4
        && nqn.len() <= NVME_NQN_MAX
        && !nqn.chars().any(|c| c.is_control())
}

fn nqn_problem(nqn: &str) -> Option<String> {
    if !nqn.starts_with("nqn.") {
        Some(format!("NQN {nqn:?} does not start with \"nqn.\""))
    } else if nqn.len() > NVME_NQN_MAX {
        Some(format!(
            "NQN {nqn:?} is {} bytes, more than {NVME_NQN_MAX}",
            nqn.len()
        ))
    } else if !is_valid_nqn(nqn) {
        Some(format!(
            "NQN {nqn:?} is empty after \"nqn.\" or has control characters"
        ))
    } else {
        None
    }
}

impl TargetConfig {
    /// Checks every rule the parser checks (use after editing a parsed or default
    /// configuration).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] with origin "configuration", naming the first problem.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_as("configuration")
    }

    /// [`TargetConfig::validate`] for a configuration that came from `origin` (e.g.
    /// "command line"): the same reasons, with that origin.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] with origin `origin`, naming the first problem.
    pub fn validate_as(&self, origin: &str) -> Result<(), ConfigError> {
        self.check().map_err(|reason| ConfigError::Invalid {
            origin: origin.to_string(),
            reason,
        })
    }

    fn check(&self) -> Result<(), String> {
        if self.listen.is_empty() {
            return Err("at least one [[listen]] address is needed".into());
        }
        self.check_links()?;
        for (i, l) in self.listen.iter().enumerate() {
            if l.trsvcid == 0 {
                return Err(format!("listen[{i}] ({}): trsvcid 0 is not a port", l.addr));
            }
            for (r, referral) in l.referrals.iter().enumerate() {
                if referral.trsvcid == 0 {
                    return Err(format!(
                        "listen[{i}] ({l}): referrals[{r}] ({}): trsvcid 0 is not a port",
                        referral.addr
                    ));
                }
            }
            for (g, group) in l.ana_groups.iter().enumerate() {
                if !(1..=crate::ana::ANAGRPMAX).contains(&group.grpid) {
                    return Err(format!(
                        "listen[{i}] ({l}): ana_groups[{g}]: grpid {} is outside 1..={}",
                        group.grpid,
                        crate::ana::ANAGRPMAX
                    ));
                }
                if l.ana_groups[..g].iter().any(|e| e.grpid == group.grpid) {
                    return Err(format!(
                        "listen[{i}] ({l}): ana_groups[{g}]: grpid {} is listed twice",
                        group.grpid
                    ));
                }
            }
            if let Some(tos) = l.tos {
                if tos & transport::soft::ECN_MASK != 0 {
                    return Err(format!(
                        "listen[{i}] ({l}): tos {tos:#04x} sets the ECN bits (1:0), which \
                         stay the transport's: give the DSCP shifted left by 2, e.g. {:#04x}",
                        tos & !transport::soft::ECN_MASK
                    ));
                }
                if self.provider == ProviderKind::Verbs {
                    return Err(format!(
                        "listen[{i}] ({l}): tos is an option of the soft provider; on a \
                         kernel RDMA device set the RoCE traffic class with rdma_cm's \
                         default_roce_tos (`cma_roce_tos -d <device> -t {tos}`)"
                    ));
                }
            }
            if let Some(j) = self.listen[..i]
                .iter()
                .position(|e| e.socket_addr() == l.socket_addr())
            {
                return Err(format!(
                    "listen[{i}] ({l}): the same address and trsvcid as listen[{j}]; remove one"
                ));
            }
        }
        if self.poll_groups == 0 {
            return Err(
                "poll_groups 0: at least 1 poll group (a busy-polling thread) is needed; \
                 give one per core the target may use"
                    .into(),
            );
        }
        if !self.inline_data_size.is_multiple_of(16) || self.inline_data_size > MAX_INLINE_DATA_SIZE
        {
            return Err(format!(
                "inline_data_size {} must be a multiple of 16 and at most {MAX_INLINE_DATA_SIZE}",
                self.inline_data_size
            ));
        }
        if !self.mdts_bytes.is_power_of_two()
            || !(MIN_MDTS_BYTES..=MAX_MDTS_BYTES).contains(&self.mdts_bytes)
        {
            return Err(format!(
                "mdts_bytes {} must be a power of two from {MIN_MDTS_BYTES} (8K, the smallest \
                 MDTS a host can be told) to {MAX_MDTS_BYTES} (8M, the largest a 24-bit keyed \
                 SGL length carries), e.g. \"1M\"",
                self.mdts_bytes
            ));
        }
        if let Some(slab) = self.data_slab {
            check_data_slab(slab, self.mdts_bytes)?;
        }
        if !(MIN_SRQ_DEPTH..=MAX_SRQ_DEPTH).contains(&self.srq_depth) {
            return Err(format!(
                "srq_depth {} must be from {MIN_SRQ_DEPTH} to {MAX_SRQ_DEPTH} (receive buffers \
                 per poll group; default {DEFAULT_SRQ_DEPTH})",
                self.srq_depth
            ));
        }
        if !(100..=3_600_000).contains(&self.shutdown_timeout_ms) {
            return Err(format!(
                "shutdown_timeout_ms {} must be from 100 to 3600000 (the bound of a clean \
                 shutdown; default {})",
                self.shutdown_timeout_ms,
                default_shutdown_timeout_ms()
            ));
        }
        if let Some(m) = self.roce_mtu {
            let Some(mtu) = transport::verbs::Mtu::from_bytes(m) else {
                return Err(format!(
                    "roce_mtu {m} must be 256, 512, 1024, 2048 or 4096 (a RoCE MTU: payload \
                     bytes per packet)"
                ));
            };
            if self.provider != ProviderKind::Soft {
                return Err(format!(
                    "roce_mtu {}: {}",
                    mtu.bytes(),
                    "the verbs provider uses its RDMA port's active MTU (it follows the \
                     interface MTU: ip link set dev IFACE mtu N); drop roce_mtu"
                ));
            }
        }
        if self.max_queue_size < 2 {
            return Err(format!(
                "max_queue_size {} must be at least 2",
                self.max_queue_size
            ));
        }
        if self.subsystems.is_empty() {
            return Err("at least one [[subsystems]] entry is needed".into());
        }
        let mut host_nqns = HashSet::new();
        for (h, host) in self.hosts.iter().enumerate() {
            if let Some(p) = nqn_problem(&host.nqn) {
                return Err(format!("hosts[{h}]: {p}"));
            }
            if !host_nqns.insert(host.nqn.as_str()) {
                return Err(format!("hosts[{h}]: host NQN {} is used twice", host.nqn));
            }
        }
        let mut nqns = HashSet::new();
        let mut paths: HashSet<&Path> = HashSet::new();
        for (i, s) in self.subsystems.iter().enumerate() {
            let at = format!("subsystems[{i}]");
            if let Some(p) = nqn_problem(&s.nqn) {
                return Err(format!("{at}: {p}"));
            }
            if s.nqn == NVMF_DISCOVERY_NQN {
                return Err(format!(
                    "{at}: {NVMF_DISCOVERY_NQN} is the discovery subsystem; use `discovery = true`"
                ));
            }
            if !nqns.insert(s.nqn.as_str()) {
                return Err(format!("{at}: NQN {} is used twice", s.nqn));
            }
            let at = format!("{at} ({})", s.nqn);
            for (h, host) in s.hosts.iter().enumerate() {
                if let Some(p) = nqn_problem(host) {
                    return Err(format!("{at}: hosts[{h}]: {p}"));
                }
            }
            let mut keyed = HashSet::new();
            for (h, k) in s.host_keys.iter().enumerate() {
                let at = format!("{at}: host_keys[{h}] ({})", k.hostnqn);
                if let Some(p) = nqn_problem(&k.hostnqn) {
                    return Err(format!("{at}: {p}"));
                }
                if !keyed.insert(k.hostnqn.as_str()) {
                    return Err(format!("{at}: a second entry for the same host"));
                }
                if !s.allow_any_host && !s.hosts.contains(&k.hostnqn) {
                    return Err(format!(
                        "{at}: the host is not in `hosts` and allow_any_host is false, so \
                         it could never connect; add it to `hosts`"
                    ));
                }
                k.policy().map_err(|e| format!("{at}: {e}"))?;
            }
            if !s.allow_any_host && s.hosts.is_empty() {
                return Err(format!(
                    "{at}: allow_any_host = false with no hosts: nobody could connect"
                ));
            }
            if s.allow_any_host && !s.hosts.is_empty() {
                return Err(format!(
                    "{at}: allow_any_host = true with hosts: the host list would do nothing \
                     (nvmet refuses it too); set allow_any_host = false to admit only those \
                     hosts, or drop them"
                ));
            }
            for (key, value, max) in [
                ("serial", &s.serial, SERIAL_MAX_LEN),
                ("model", &s.model, MODEL_MAX_LEN),
                ("firmware", &s.firmware, FIRMWARE_MAX_LEN),
            ] {
                if let Some(v) = value {
                    if v.is_empty()
                        || v.len() > max
                        || !v.bytes().all(|b| (0x20..=0x7E).contains(&b))
                    {
                        return Err(format!(
                            "{at}: {key} {v:?} must be 1 to {max} printable ASCII characters"
                        ));
                    }
                }
            }
            if s.ieee_oui >= 1 << 24 {
                return Err(format!(
                    "{at}: ieee_oui {:#x} does not fit the 24-bit IEEE OUI field",
                    s.ieee_oui
                ));
            }
            s.version_vs().map_err(|e| format!("{at}: {e}"))?;
            if s.cntlid_min == 0 || s.cntlid_min > s.cntlid_max || s.cntlid_max > DEFAULT_CNTLID_MAX
            {
                return Err(format!(
                    "{at}: cntlid_min {} / cntlid_max {}: need 1 <= cntlid_min <= cntlid_max \
                     <= {DEFAULT_CNTLID_MAX} (FFF0h and above are reserved)",
                    s.cntlid_min, s.cntlid_max
                ));
            }
            if let Some(q) = s.qid_max {
                if !(1..=MAX_QID_MAX).contains(&q) {
                    return Err(format!("{at}: qid_max {q} must be from 1 to {MAX_QID_MAX}"));
                }
            }
            let mut nsids = HashSet::new();
            for (j, n) in s.namespaces.iter().enumerate() {
                let at = format!("{at}: namespaces[{j}]");
                if n.nsid == 0 || n.nsid == u32::MAX {
                    return Err(format!(
                        "{at}: nsid {:#x} is reserved (valid: 1 to 0xFFFFFFFE)",
                        n.nsid
                    ));
                }
                if !nsids.insert(n.nsid) {
                    return Err(format!("{at}: nsid {} is used twice", n.nsid));
                }
                match n.backend {
                    NamespaceBackend::File => {
                        if n.path.as_os_str().is_empty() {
                            return Err(format!(
                                "{at}: path is empty (a file or block device, or backend = \"null\" / \"ram\")"
                            ));
                        }
                        if !paths.insert(n.path.as_path()) {
                            return Err(format!(
                                "{at}: path {} backs two namespaces",
                                n.path.display()
                            ));
                        }
                    }
                    NamespaceBackend::Null | NamespaceBackend::Ram => {
                        let kind = if n.backend == NamespaceBackend::Null {
                            "null"
                        } else {
                            "ram"
                        };
                        if !n.path.as_os_str().is_empty() {
                            return Err(format!(
                                "{at}: backend = \"{kind}\" has no file: remove path {}",
                                n.path.display()
                            ));
                        }
                        if n.size.is_none() {
                            return Err(format!(
                                "{at}: backend = \"{kind}\" needs a size, e.g. size = \"1G\""
                            ));
                        }
                        if n.direct {
                            return Err(format!(
                                "{at}: direct = true is for files and block devices, not backend = \"{kind}\""
                            ));
                        }
                    }
                }
                if !(1..=crate::ana::ANAGRPMAX).contains(&n.ana_grpid) {
                    return Err(format!(
                        "{at}: ana_grpid {} is outside 1..={} (a group every port has: \
                         optimized unless its ana_groups says otherwise)",
                        n.ana_grpid,
                        crate::ana::ANAGRPMAX
                    ));
                }
                if let Some(b) = n.block_size {
                    if !b.is_power_of_two() || !(512..=4096).contains(&b) {
                        return Err(format!(
                            "{at}: block_size {b} must be 512, 1024, 2048 or 4096"
                        ));
                    }
                }
                if let Some(s) = &n.size {
                    let bytes = parse_size(s).map_err(|e| format!("{at}: size: {e}"))?;
                    let block = n
                        .block_size
                        .unwrap_or(crate::backend::DEFAULT_FILE_BLOCK_SIZE);
                    if bytes == 0 || bytes % u64::from(block) != 0 {
                        return Err(format!(
                            "{at}: size {s} ({bytes} bytes) must be a positive multiple of block_size {block}"
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

impl TargetConfig {
    /// The port links: absent on every `listen` entry (every subsystem everywhere) or
    /// present on every one, each naming configured subsystems, none twice, at least
    /// one; port IDs unique.
    fn check_links(&self) -> Result<(), String> {
        let linked = self.listen.iter().position(|l| l.subsystems.is_some());
        let mut portids = HashSet::new();
        for (i, l) in self.listen.iter().enumerate() {
            let portid = l.portid.unwrap_or(i as u16 + 1);
            if !portids.insert(portid) {
                return Err(format!(
                    "listen[{i}] ({l}): portid {portid} is used by another entry; give each \
                     its own"
                ));
            }
            let (Some(j), None) = (linked, &l.subsystems) else {
                continue;
            };
            return Err(format!(
                "listen[{i}] ({l}) names no subsystems while listen[{j}] does: once one \
                 entry links subsystems, each serves only those it names; add \
                 `subsystems = [...]` to listen[{i}] (or drop them everywhere to serve every \
                 subsystem on every entry)"
            ));
        }
        for (i, l) in self.listen.iter().enumerate() {
            let Some(links) = &l.subsystems else { continue };
            if links.is_empty() {
                return Err(format!(
                    "listen[{i}] ({l}): subsystems is empty, so nothing would be served \
                     there (nvmet does not enable such a port); link a subsystem or drop \
                     the entry"
                ));
            }
            let mut seen = HashSet::new();
            for (k, nqn) in links.iter().enumerate() {
                if !self.subsystems.iter().any(|s| &s.nqn == nqn) {
                    return Err(format!(
                        "listen[{i}] ({l}): subsystems[{k}] {nqn:?} is not a configured \
                         subsystem"
                    ));
                }
                if !seen.insert(nqn) {
                    return Err(format!(
                        "listen[{i}] ({l}): subsystems[{k}] {nqn:?} is linked twice"
                    ));
                }
            }
        }
        Ok(())
    }
}

impl SubsystemConfig {
    /// `version` as the VS property encodes it (NVMe Base 2.x §3.1.4.2); 1.3 when
    /// absent.
    ///
    /// # Errors
    /// A message naming the value when it is not "MAJOR.MINOR[.TERTIARY]" with major
    /// 1 or 2 (each part at most 255).
    pub fn version_vs(&self) -> Result<Vs, String> {
        let Some(v) = &self.version else {
            return Ok(Vs::V1_3);
        };
        let parts: Vec<Option<u8>> = v.trim().split('.').map(|p| p.parse().ok()).collect();
        match parts[..] {
            [Some(major @ 1..=2), Some(minor)] => Ok(Vs::new(major.into(), minor, 0)),
            [Some(major @ 1..=2), Some(minor), Some(ter)] => Ok(Vs::new(major.into(), minor, ter)),
            _ => Err(format!(
                "version {v:?} must be MAJOR.MINOR or MAJOR.MINOR.TERTIARY with major 1 or \
                 2, e.g. \"1.3\""
            )),
        }
    }
}

/// Checks a configured data slab size against MDTS: a slab smaller than one command's
/// largest transfer could never serve that command, so it is refused (rather than
/// lowering the advertised MDTS behind the operator's back).
///
/// # Errors
/// A message naming both values and the fix.
pub fn check_data_slab(slab_bytes: u64, mdts_bytes: u32) -> Result<(), String> {
    if slab_bytes < u64::from(mdts_bytes) {
        return Err(format!(
            "data_slab {slab_bytes} bytes is smaller than mdts_bytes {mdts_bytes}: a command \
             transferring MDTS bytes could never get a buffer; raise data_slab to at least \
             {mdts_bytes} or lower mdts_bytes"
        ));
    }
    if slab_bytes > MAX_DATA_SLAB_BYTES {
        return Err(format!(
            "data_slab {slab_bytes} bytes is more than {MAX_DATA_SLAB_BYTES} (1 GiB, the largest \
             io_uring fixed buffer)"
        ));
    }
    Ok(())
}

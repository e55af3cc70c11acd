//! `-o json` with nvme-cli's field names (nvme-cli 2.x, `nvme-print-json.c`): Identify
//! Controller, Identify Namespace, the SMART / Health log, the Error Information log
//! and the Discovery log, each from the wire structure of the `nvme` crate.
//!
//! Numbers are JSON numbers (128-bit counters too, as nvme-cli prints them); text
//! fields are as the controller wrote them up to the first NUL, padding kept
//! (nvme-cli's `%-.*s`); NGUID, EUI-64 and FGUID are lowercase hex.
use nvme::{ErrorLogEntry, IdentifyController, IdentifyNamespace, SmartLog};
use nvmf_initiator::{DiscoveryEntry, DiscoveryLog};
use serde_json::{json, Map, Value};

/// Text of a fixed-size field up to its first NUL, not trimmed.
fn text(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// A little-endian 128-bit counter as a JSON number (u64 where it fits, as
/// serde_json's `Value` holds no wider integer; beyond it the decimal digits).
fn u128_value(b: &[u8; 16]) -> Value {
    json_u128(u128::from_le_bytes(*b))
}

fn json_u128(v: u128) -> Value {
    match u64::try_from(v) {
        Ok(x) => json!(x),
        Err(_) => {
            // serde_json parses a bare decimal of any size as f64: keep the exact digits.
            Value::String(v.to_string())
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A UUID as nvme-cli prints FGUID (`8-4-4-4-12` lowercase hex).
pub(super) fn uuid_text(b: &[u8; 16]) -> String {
    uuid::Uuid::from_bytes(*b).hyphenated().to_string()
}

/// `nvme id-ctrl -o json`: every field of Identify Controller by nvme-cli's name, and
/// `psds`, the power state descriptors 0..=NPSS.
pub fn id_ctrl(c: &IdentifyController) -> Value {
    let ieee = u32::from(c.ieee[2]) << 16 | u32::from(c.ieee[1]) << 8 | u32::from(c.ieee[0]);
    let mut m = Map::new();
    let mut put = |k: &str, v: Value| {
        m.insert(k.to_string(), v);
    };
    put("vid", json!(c.vid.get()));
    put("ssvid", json!(c.ssvid.get()));
    put("sn", json!(text(&c.sn)));
    put("mn", json!(text(&c.mn)));
    put("fr", json!(text(&c.fr)));
    put("rab", json!(c.rab));
    put("ieee", json!(ieee));
    put("cmic", json!(c.cmic));
    put("mdts", json!(c.mdts));
    put("cntlid", json!(c.cntlid.get()));
    put("ver", json!(c.ver.get()));
    put("rtd3r", json!(c.rtd3r.get()));
    put("rtd3e", json!(c.rtd3e.get()));
    put("oaes", json!(c.oaes.get()));
    put("ctratt", json!(c.ctratt.get()));
    put("rrls", json!(c.rrls.get()));
    put("cntrltype", json!(c.cntrltype));
    put("fguid", json!(uuid_text(&c.fguid)));
    put("crdt1", json!(c.crdt[0].get()));
    put("crdt2", json!(c.crdt[1].get()));
    put("crdt3", json!(c.crdt[2].get()));
    // NVMe-MI fields at 253..256 (inside the structure's reserved 134..256).
    put("nvmsr", json!(c.rsvd134[253 - 134]));
    put("vwci", json!(c.rsvd134[254 - 134]));
    put("mec", json!(c.rsvd134[255 - 134]));
    put("oacs", json!(c.oacs.get()));
    put("acl", json!(c.acl));
    put("aerl", json!(c.aerl));
    put("frmw", json!(c.frmw));
    put("lpa", json!(c.lpa));
    put("elpe", json!(c.elpe));
    put("npss", json!(c.npss));
    put("avscc", json!(c.avscc));
    put("apsta", json!(c.apsta));
    put("wctemp", json!(c.wctemp.get()));
    put("cctemp", json!(c.cctemp.get()));
    put("mtfa", json!(c.mtfa.get()));
    put("hmpre", json!(c.hmpre.get()));
    put("hmmin", json!(c.hmmin.get()));
    put("tnvmcap", u128_value(&c.tnvmcap));
    put("unvmcap", u128_value(&c.unvmcap));
    put("rpmbs", json!(c.rpmbs.get()));
    put("edstt", json!(c.edstt.get()));
    put("dsto", json!(c.dsto));
    put("fwug", json!(c.fwug));
    put("kas", json!(c.kas.get()));
    put("hctma", json!(c.hctma.get()));
    put("mntmt", json!(c.mntmt.get()));
    put("mxtmt", json!(c.mxtmt.get()));
    put("sanicap", json!(c.sanicap.get()));
    put("hmminds", json!(c.hmminds.get()));
    put("hmmaxd", json!(c.hmmaxd.get()));
    put("nsetidmax", json!(c.nsetidmax.get()));
    put("endgidmax", json!(c.endgidmax.get()));
    put("anatt", json!(c.anatt));
    put("anacap", json!(c.anacap));
    put("anagrpmax", json!(c.anagrpmax.get()));
    put("nanagrpid", json!(c.nanagrpid.get()));
    put("pels", json!(c.pels.get()));
    put("domainid", json!(c.domainid.get()));
    put("megcap", u128_value(&c.megcap));
    put("sqes", json!(c.sqes));
    put("cqes", json!(c.cqes));
    put("maxcmd", json!(c.maxcmd.get()));
    put("nn", json!(c.nn.get()));
    put("oncs", json!(c.oncs.get()));
    put("fuses", json!(c.fuses.get()));
    put("fna", json!(c.fna));
    put("vwc", json!(c.vwc));
    put("awun", json!(c.awun.get()));
    put("awupf", json!(c.awupf.get()));
    put("icsvscc", json!(c.icsvscc));
    put("nwpc", json!(c.nwpc));
    put("acwu", json!(c.acwu.get()));
    put("ocfs", json!(c.cdfs.get()));
    put("sgls", json!(c.sgls.get()));
    put("mnan", json!(c.mnan.get()));
    put("maxdna", u128_value(&c.maxdna));
    put("maxcna", json!(c.maxcna.get()));
    let subnqn = text(&c.subnqn);
    if !subnqn.is_empty() {
        put("subnqn", json!(subnqn));
    }
    put("ioccsz", json!(c.ioccsz.get()));
    put("iorcsz", json!(c.iorcsz.get()));
    put("icdoff", json!(c.icdoff.get()));
    put("fcatt", json!(c.fcatt));
    put("msdbd", json!(c.msdbd));
    put("ofcs", json!(c.ofcs.get()));
    let psds: Vec<Value> = c
        .psd
        .iter()
        .take(usize::from(c.npss) + 1)
        .map(|p| {
            let b = zerocopy::IntoBytes::as_bytes(p);
            let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
            let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
            json!({
                "max_power": u16_at(0),
                // Byte 3: MXPS (bit 0), NOPS (bit 1); nvme-cli prints the byte.
                "flags": b[3],
                "entry_lat": u32_at(4),
                "exit_lat": u32_at(8),
                "read_tput": b[12] & 0x1f,
                "read_lat": b[13] & 0x1f,
                "write_tput": b[14] & 0x1f,
                "write_lat": b[15] & 0x1f,
                "idle_power": u16_at(16),
                "idle_scale": b[18] >> 6,
                "active_power": u16_at(20),
                "active_power_work": b[22] & 7,
                "active_scale": b[22] >> 6,
            })
        })
        .collect();
    put("psds", Value::Array(psds));
    Value::Object(m)
}

/// `nvme id-ns -o json`: Identify Namespace by nvme-cli's names and `lbafs` (ms, ds,
/// rp of formats 0..=NLBAF).
pub fn id_ns(ns: &IdentifyNamespace) -> Value {
    let mut m = Map::new();
    let mut put = |k: &str, v: Value| {
        m.insert(k.to_string(), v);
    };
    put("nsze", json!(ns.nsze.get()));
    put("ncap", json!(ns.ncap.get()));
    put("nuse", json!(ns.nuse.get()));
    put("nsfeat", json!(ns.nsfeat));
    put("nlbaf", json!(ns.nlbaf));
    put("flbas", json!(ns.flbas));
    put("mc", json!(ns.mc));
    put("dpc", json!(ns.dpc));
    put("dps", json!(ns.dps));
    put("nmic", json!(ns.nmic));
    put("rescap", json!(ns.rescap));
    put("fpi", json!(ns.fpi));
    put("dlfeat", json!(ns.dlfeat));
    put("nawun", json!(ns.nawun.get()));
    put("nawupf", json!(ns.nawupf.get()));
    put("nacwu", json!(ns.nacwu.get()));
    put("nabsn", json!(ns.nabsn.get()));
    put("nabo", json!(ns.nabo.get()));
    put("nabspf", json!(ns.nabspf.get()));
    put("noiob", json!(ns.noiob.get()));
    put("nvmcap", u128_value(&ns.nvmcap));
    if ns.nsfeat & 0x10 != 0 {
        put("npwg", json!(ns.npwg.get()));
        put("npwa", json!(ns.npwa.get()));
        put("npdg", json!(ns.npdg.get()));
        put("npda", json!(ns.npda.get()));
        put("nows", json!(ns.nows.get()));
    }
    put("mssrl", json!(ns.mssrl.get()));
    put("mcl", json!(ns.mcl.get()));
    put("msrc", json!(ns.msrc));
    // NULBAF (byte 84, NVM Command Set 1.x), inside the structure's reserved 81..92.
    put("nulbaf", json!(ns.rsvd81[84 - 81]));
    put("anagrpid", json!(ns.anagrpid.get()));
    put("nsattr", json!(ns.nsattr));
    put("nvmsetid", json!(ns.nvmsetid.get()));
    put("endgid", json!(ns.endgid.get()));
    put("nguid", json!(hex(&ns.nguid)));
    put("eui64", json!(hex(&ns.eui64)));
    let lbafs: Vec<Value> = ns
        .lbaf
        .iter()
        .take(usize::from(ns.nlbaf) + 1)
        .map(|f| json!({"ms": f.ms.get(), "ds": f.lbads, "rp": f.rp & 3}))
        .collect();
    put("lbafs", Value::Array(lbafs));
    Value::Object(m)
}

/// `nvme smart-log -o json`: the SMART / Health log by nvme-cli's names (temperatures
/// in kelvin; `temperature_sensor_N` only for sensors that report).
pub fn smart_log(s: &SmartLog) -> Value {
    let mut m = Map::new();
    let mut put = |k: &str, v: Value| {
        m.insert(k.to_string(), v);
    };
    let c = |x: &zerocopy::byteorder::little_endian::U128| json_u128(x.get());
    put("critical_warning", json!(s.critical_warning));
    put("temperature", json!(s.composite_temperature.get()));
    put("avail_spare", json!(s.available_spare));
    put("spare_thresh", json!(s.available_spare_threshold));
    put("percent_used", json!(s.percentage_used));
    put(
        "endurance_grp_critical_warning_summary",
        json!(s.endurance_group_critical_warning),
    );
    put("data_units_read", c(&s.data_units_read));
    put("data_units_written", c(&s.data_units_written));
    put("host_read_commands", c(&s.host_read_commands));
    put("host_write_commands", c(&s.host_write_commands));
    put("controller_busy_time", c(&s.controller_busy_time));
    put("power_cycles", c(&s.power_cycles));
    put("power_on_hours", c(&s.power_on_hours));
    put("unsafe_shutdowns", c(&s.unsafe_shutdowns));
    put("media_errors", c(&s.media_errors));
    put("num_err_log_entries", c(&s.num_error_log_entries));
    put("warning_temp_time", json!(s.warning_temp_time.get()));
    put("critical_comp_time", json!(s.critical_temp_time.get()));
    for (i, t) in s.temp_sensors.iter().enumerate() {
        if t.get() != 0 {
            put(&format!("temperature_sensor_{}", i + 1), json!(t.get()));
        }
    }
    put(
        "thm_temp1_trans_count",
        json!(s.thm_temp_transition_count[0].get()),
    );
    put(
        "thm_temp2_trans_count",
        json!(s.thm_temp_transition_count[1].get()),
    );
    put(
        "thm_temp1_total_time",
        json!(s.thm_temp_total_time[0].get()),
    );
    put(
        "thm_temp2_total_time",
        json!(s.thm_temp_total_time[1].get()),
    );
    Value::Object(m)
}

/// `nvme error-log -o json`: `{"errors": [...]}`, one object per entry by nvme-cli's
/// names (`status_field` without the phase tag, which is `phase_tag`).
pub fn error_log(entries: &[ErrorLogEntry]) -> Value {
    let errors: Vec<Value> = entries
        .iter()
        .map(|e| {
            let sf = e.status_field.get();
            json!({
                "error_count": e.error_count.get(),
                "sqid": e.sqid.get(),
                "cmdid": e.cid.get(),
                "status_field": sf >> 1,
                "phase_tag": sf & 1,
                "parm_error_location": e.parameter_error_location.get(),
                "lba": e.lba.get(),
                "nsid": e.nsid.get(),
                "vs": e.vs,
                "trtype": e.trtype,
                "cs": e.csi.get(),
                "trtype_spec_info": e.trtype_specific.get(),
            })
        })
        .collect();
    json!({ "errors": errors })
}

/// TRTYPE as libnvme names it (`nvmf_trtype_str`).
pub fn trtype_str(v: u8) -> &'static str {
    match v {
        1 => "rdma",
        2 => "fc",
        3 => "tcp",
        254 => "loop",
        _ => "unrecognized",
    }
}

/// ADRFAM as libnvme names it.
pub fn adrfam_str(v: u8) -> &'static str {
    match v {
        1 => "ipv4",
        2 => "ipv6",
        3 => "infiniband",
        4 => "fibre-channel",
        254 => "loop",
        _ => "unrecognized",
    }
}

/// SUBTYPE as libnvme names it.
pub fn subtype_str(v: u8) -> &'static str {
    match v {
        1 => "discovery subsystem referral",
        2 => "nvme subsystem",
        3 => "current discovery subsystem",
        _ => "unrecognized",
    }
}

/// TREQ as libnvme words it: the secure channel requirement (bits 1:0), then
/// `, sq flow control disable supported` for bit 2.
pub fn treq_str(v: u8) -> String {
    let base = match v & 3 {
        0 => "not specified",
        1 => "required",
        2 => "not required",
        _ => "reserved",
    };
    if v & nvme::log::TREQ_DISABLE_SQFLOW != 0 {
        format!("{base}, sq flow control disable supported")
    } else {
        base.to_string()
    }
}

/// EFLAGS as libnvme words it.
pub fn eflags_str(v: u16) -> String {
    let mut parts = Vec::new();
    if v & 1 != 0 {
        parts.push("duplicate returned information");
    }
    if v & 2 != 0 {
        parts.push("explicit discovery connections");
    }
    if v & 4 != 0 {
        parts.push("no cdc connectivity");
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

/// RDMA_PRTYPE as libnvme names it.
pub fn prtype_str(v: u8) -> &'static str {
    match v {
        1 => "not specified",
        2 => "infiniband",
        3 => "roce",
        4 => "roce-v2",
        5 => "iwarp",
        _ => "unrecognized",
    }
}

/// RDMA_QPTYPE as libnvme names it.
pub fn qptype_str(v: u8) -> &'static str {
    match v {
        1 => "connected",
        2 => "datagram",
        _ => "unrecognized",
    }
}

/// RDMA_CMS as libnvme names it.
pub fn cms_str(v: u8) -> &'static str {
    match v {
        1 => "rdma-cm",
        _ => "unrecognized",
    }
}

/// One discovery log record by nvme-cli's names (the RDMA TSAS fields for RDMA
/// entries).
pub fn discovery_record(e: &DiscoveryEntry) -> Value {
    let mut m = Map::new();
    m.insert("trtype".into(), json!(trtype_str(e.trtype)));
    m.insert("adrfam".into(), json!(adrfam_str(e.adrfam)));
    m.insert("subtype".into(), json!(subtype_str(e.subtype)));
    m.insert("treq".into(), json!(treq_str(e.treq)));
    m.insert("portid".into(), json!(e.portid));
    m.insert("trsvcid".into(), json!(e.trsvcid));
    m.insert("subnqn".into(), json!(e.subnqn));
    m.insert("traddr".into(), json!(e.traddr));
    m.insert("eflags".into(), json!(eflags_str(e.eflags)));
    if e.trtype == 1 {
        let (qptype, prtype, cms, pkey) = e.rdma_tsas;
        m.insert("rdma_prtype".into(), json!(prtype_str(prtype)));
        m.insert("rdma_qptype".into(), json!(qptype_str(qptype)));
        m.insert("rdma_cms".into(), json!(cms_str(cms)));
        m.insert("rdma_pkey".into(), json!(pkey));
    }
    Value::Object(m)
}

/// `nvme discover -o json`: `genctr`, and `records`.
pub fn discovery_log(log: &DiscoveryLog) -> Value {
    json!({
        "genctr": log.genctr,
        "records": log.entries.iter().map(discovery_record).collect::<Vec<_>>(),
    })
}

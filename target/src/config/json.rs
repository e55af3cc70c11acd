//! The nvmetcli JSON reader: the file `nvmetcli save` writes from Linux nvmet's
//! configfs tree (`/etc/nvmet/config.json`), read into the same
//! [`model`](super::model) as the TOML and checked by the same validator. Example:
//! `target/examples/nvmetcli.json`.
//!
//! The file's shape is nvmetcli's dump of configfs: `hosts`, `ports` and `subsystems`;
//! each configfs attribute `GROUP_NAME` becomes `"GROUP": {"NAME": "value"}` with the
//! value as configfs shows it (a string), while `nsid`, `portid`, `grpid`, `enable` and
//! `ana_grpid` are numbers. What each key becomes:
//!
//! | nvmetcli JSON | model |
//! |---|---|
//! | `hosts[].nqn` | [`HostConfig::nqn`] |
//! | `ports[].portid` | [`ListenAddr::portid`] (PORTID) |
//! | `ports[].addr.traddr`, `.trsvcid` | [`ListenAddr::addr`], [`ListenAddr::trsvcid`] |
//! | `ports[].subsystems` | [`ListenAddr::subsystems`] (the port's links) |
//! | `ports[].referrals[]` (`addr`, `enable`) | [`ListenAddr::referrals`] |
//! | `ports[].param.inline_data_size`, `.max_queue_size` | [`TargetConfig::inline_data_size`], [`TargetConfig::max_queue_size`] ("-1": the target's default; every port must agree, the target has one value) |
//! | `subsystems[].attr.allow_any_host`, `.serial`, `.model`, `.firmware`, `.ieee_oui`, `.version`, `.cntlid_min`, `.cntlid_max`, `.qid_max` | the [`SubsystemConfig`] fields of those names |
//! | `subsystems[].allowed_hosts` | [`SubsystemConfig::hosts`] (each must be a `hosts` entry, as nvmet's links) |
//! | `subsystems[].namespaces[].nsid`, `.enable`, `.device.path`, `.device.nguid`, `.device.uuid` | the [`NamespaceConfig`] fields ([`NamespaceConfig::path`] for `path`); `device.eui64` is this target's addition |
//!
//! Accepted because they change nothing here (checked, not ignored): `addr.trtype =
//! "rdma"`, `addr.adrfam` matching the address, `addr.treq = "not specified"`,
//! `addr.tsas = "connected"` (what every discovery log entry of this target says),
//! `param.pi_enable` and `attr.pi_enable` = "0", `resv.enable = "0"`. A port's
//! `ana_groups[]` (`grpid`, `ana.state`) become [`ListenAddr::ana_groups`] and a
//! namespace's `ana_grpid` [`NamespaceConfig::ana_grpid`]. A host's
//! `dhchap` (`key`, `ctrl_key`, `hash`, `dhgroup`) becomes a
//! [`SubsystemConfig::host_keys`] entry of each subsystem that allows the host; empty
//! keys mean no authentication, as in nvmet. Any other value of those, and any other key, is refused naming its
//! path and value, e.g. `ports[0].addr.trtype = "tcp": only rdma is served`.
//!
//! Namespaces take the target's defaults for what nvmetcli has no key for: the file
//! or device must exist (there is no `size`), files have 512-byte blocks, no O_DIRECT
//! (nvmet's `buffered_io` is not in the dump). The validator's messages name items as
//! the model does, with `listen[i]` written `ports[i]`.

use std::net::IpAddr;

use serde_json::{Map, Value};

use super::model::*;
use super::{ConfigError, Eui64, Nguid};

/// Parses and validates nvmetcli JSON `s` from `origin` (a path, or "configuration").
///
/// # Errors
/// [`ConfigError::Json`] for text that is not JSON; [`ConfigError::Invalid`] naming
/// the path of a key or value the target does not serve, or a rule of the validator.
pub fn parse(s: &str, origin: &str) -> Result<TargetConfig, ConfigError> {
    let root: Value = serde_json::from_str(s).map_err(|source| ConfigError::Json {
        origin: origin.to_string(),
        source,
    })?;
    let invalid = |reason: String| ConfigError::Invalid {
        origin: origin.to_string(),
        reason,
    };
    let cfg = read(&root).map_err(invalid)?;
    match cfg.validate_as(origin) {
        Err(ConfigError::Invalid { reason, .. }) => {
            Err(invalid(reason.replace("listen[", "ports[")))
        }
        other => other.map(|()| cfg),
    }
}

/// One JSON object of the file and its path there (`ports[0].addr`).
struct Obj<'a> {
    path: String,
    map: &'a Map<String, Value>,
}

/// `value` in the text form of the error messages (JSON: strings quoted).
fn shown(value: &Value) -> String {
    value.to_string()
}

impl<'a> Obj<'a> {
    /// `v` at `path`, which must be an object whose keys are all in `known`.
    fn new(v: &'a Value, path: String, known: &[&str]) -> Result<Obj<'a>, String> {
        let Value::Object(map) = v else {
            return Err(format!("{path} = {}: expected an object {{...}}", shown(v)));
        };
        if let Some(k) = map.keys().find(|k| !known.contains(&k.as_str())) {
            let at = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            return Err(format!(
                "{at}: not a key this target serves (known here: {})",
                known.join(", ")
            ));
        }
        Ok(Obj { path, map })
    }

    /// The path of `key` in this object.
    fn at(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key)
    }

    /// The object under `key` (absent: `None`), with keys in `known`.
    fn obj(&self, key: &str, known: &[&str]) -> Result<Option<Obj<'a>>, String> {
        self.get(key)
            .map(|v| Obj::new(v, self.at(key), known))
            .transpose()
    }

    /// The array under `key` (absent: empty).
    fn list(&self, key: &str) -> Result<&'a [Value], String> {
        match self.get(key) {
            None => Ok(&[]),
            Some(Value::Array(a)) => Ok(a),
            Some(v) => Err(format!(
                "{} = {}: expected a list [...]",
                self.at(key),
                shown(v)
            )),
        }
    }

    /// The value under `key` as configfs text: a string as is, a number or a boolean
    /// in decimal ("1"/"0"); absent: `None`.
    fn text(&self, key: &str) -> Result<Option<String>, String> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.trim().to_string())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(Value::Bool(b)) => Ok(Some(if *b { "1" } else { "0" }.to_string())),
            Some(v) => Err(format!(
                "{} = {}: expected a string or a number",
                self.at(key),
                shown(v)
            )),
        }
    }

    /// [`Obj::text`] that must be present.
    fn required(&self, key: &str) -> Result<String, String> {
        self.text(key)?
            .ok_or_else(|| format!("{}: missing (nvmetcli always writes it)", self.at(key)))
    }

    /// The value under `key` as an integer of type `T` (decimal, or hexadecimal
    /// after "0x", as configfs' kstrto* read them).
    fn int<T: TryFrom<u64>>(&self, key: &str) -> Result<Option<T>, String> {
        let Some(t) = self.text(key)? else {
            return Ok(None);
        };
        let n = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => t.parse::<u64>().ok(),
        };
        n.and_then(|n| T::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| self.bad(key, "not an integer in range"))
    }

    /// A boolean attribute ("0"/"1", as kstrtobool also "n"/"y").
    fn flag(&self, key: &str) -> Result<Option<bool>, String> {
        match self.text(key)?.as_deref() {
            None => Ok(None),
            Some("1" | "y" | "Y" | "true") => Ok(Some(true)),
            Some("0" | "n" | "N" | "false") => Ok(Some(false)),
            Some(_) => Err(self.bad(key, "expected \"0\" or \"1\"")),
        }
    }

    /// Requires the value under `key`, when present, to be one of `allowed` (as
    /// text), else refuses it with `why`.
    fn only(&self, key: &str, allowed: &[&str], why: &str) -> Result<(), String> {
        match self.text(key)? {
            Some(t) if !allowed.contains(&t.as_str()) => Err(self.bad(key, why)),
            _ => Ok(()),
        }
    }

    /// `PATH = VALUE: why`.
    fn bad(&self, key: &str, why: &str) -> String {
        let v = self.get(key).map_or_else(|| "(absent)".to_string(), shown);
        format!("{} = {v}: {why}", self.at(key))
    }
}

/// The objects of a list, each at `PATH[i]` with keys in `known`.
fn objects<'a>(parent: &Obj<'a>, key: &str, known: &[&str]) -> Result<Vec<Obj<'a>>, String> {
    parent
        .list(key)?
        .iter()
        .enumerate()
        .map(|(i, v)| Obj::new(v, format!("{}[{i}]", parent.at(key)), known))
        .collect()
}

/// The strings of a list, each with its path.
fn strings(parent: &Obj<'_>, key: &str) -> Result<Vec<(String, String)>, String> {
    parent
        .list(key)?
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let at = format!("{}[{i}]", parent.at(key));
            match v {
                Value::String(s) => Ok((at, s.clone())),
                other => Err(format!("{at} = {}: expected a string", shown(other))),
            }
        })
        .collect()
}

const ANA_STATES: &str =
    "not an ANA state: optimized, non-optimized, inaccessible, persistent-loss or change";

/// nvmet's name of an ANA state (`ana/state`).
fn ana_state(name: &str) -> Option<AnaStateConfig> {
    serde_json::from_value(Value::String(name.to_string())).ok()
}

fn read(root: &Value) -> Result<TargetConfig, String> {
    let root = Obj::new(root, String::new(), &["hosts", "ports", "subsystems"])?;
    let mut cfg = TargetConfig::new(Vec::new());
    let mut keys = std::collections::HashMap::new();
    for h in objects(&root, "hosts", &["nqn", "dhchap"])? {
        let (host, key) = read_host(&h)?;
        if let Some(k) = key {
            keys.insert(host.nqn.clone(), k);
        }
        cfg.hosts.push(host);
    }
    let mut inline: Option<(String, u32)> = None;
    let mut queue_size: Option<(String, u16)> = None;
    for p in objects(
        &root,
        "ports",
        &[
            "addr",
            "param",
            "portid",
            "referrals",
            "ana_groups",
            "subsystems",
        ],
    )? {
        cfg.listen.push(read_port(&p)?);
        if let Some(param) = p.obj(
            "param",
            &["inline_data_size", "max_queue_size", "pi_enable"],
        )? {
            agree(&param, "inline_data_size", &mut inline)?;
            agree(&param, "max_queue_size", &mut queue_size)?;
            param.only(
                "pi_enable",
                &["0"],
                "protection information (T10 PI) is not served",
            )?;
        }
    }
    if cfg.listen.is_empty() {
        return Err(
            "ports: none; at least one port (with the subsystems it serves linked) \
                    is needed"
                .into(),
        );
    }
    if let Some((_, n)) = inline {
        cfg.inline_data_size = n;
    }
    if let Some((_, n)) = queue_size {
        cfg.max_queue_size = n;
    }
    for s in objects(
        &root,
        "subsystems",
        &["nqn", "allowed_hosts", "attr", "namespaces", "passthru"],
    )? {
        cfg.subsystems.push(read_subsystem(&s, &cfg.hosts, &keys)?);
    }
    Ok(cfg)
}

/// A per-port parameter the target has once: "-1" (the transport's choice) or a
/// value every port that sets one shares.
fn agree<T: TryFrom<u64> + PartialEq + Copy>(
    param: &Obj<'_>,
    key: &str,
    seen: &mut Option<(String, T)>,
) -> Result<(), String> {
    if param.text(key)?.as_deref() == Some("-1") {
        return Ok(());
    }
    let Some(v) = param.int::<T>(key)? else {
        return Ok(());
    };
    match seen {
        Some((first, f)) if *f != v => Err(param.bad(
            key,
            &format!(
                "differs from {first}: this target has one {key} for every port; give every \
                 port the same value (or \"-1\" for the default)"
            ),
        )),
        Some(_) => Ok(()),
        None => {
            *seen = Some((param.at(key), v));
            Ok(())
        }
    }
}

/// A host entry, and its DH-HMAC-CHAP secrets when its `dhchap.key` is set (nvmet's
/// host attributes `dhchap_key`, `dhchap_ctrl_key`, `dhchap_hash`, `dhchap_dhgroup`:
/// one hash and one group, as configfs holds them).
fn read_host(h: &Obj<'_>) -> Result<(HostConfig, Option<HostKeyConfig>), String> {
    let nqn = h.required("nqn")?;
    let mut keys = None;
    if let Some(d) = h.obj("dhchap", &["key", "ctrl_key", "hash", "dhgroup"])? {
        let set = |key: &str| -> Result<Option<String>, String> {
            Ok(d.text(key)?.filter(|t| !t.is_empty()))
        };
        match (set("key")?, set("ctrl_key")?) {
            (None, None) => {}
            (None, Some(_)) => {
                return Err(d.bad(
                    "ctrl_key",
                    "a controller key needs the host's own key (dhchap.key) as well",
                ))
            }
            (Some(key), ctrl) => {
                let k = HostKeyConfig {
                    hostnqn: nqn.clone(),
                    dhchap_key: key,
                    dhchap_ctrl_key: ctrl,
                    dhchap_hash: set("hash")?.map(|h| vec![h]),
                    dhchap_dhgroup: set("dhgroup")?.map(|g| vec![g]),
                };
                k.policy().map_err(|e| format!("{}: {e}", d.at("key")))?;
                keys = Some(k);
            }
        }
    }
    Ok((HostConfig { nqn }, keys))
}

/// The address group of a port or referral: `trtype` rdma, `adrfam` matching
/// `traddr`, `treq` not specified; the address and the port.
fn read_addr(a: &Obj<'_>) -> Result<(IpAddr, u16), String> {
    let trtype = a.required("trtype")?;
    if trtype != "rdma" {
        return Err(a.bad("trtype", "only rdma is served"));
    }
    let traddr = a.required("traddr")?;
    let addr: IpAddr = traddr
        .parse()
        .map_err(|_| a.bad("traddr", "not an IPv4 or IPv6 address (RoCEv2 is IP)"))?;
    let family = if addr.is_ipv4() { "ipv4" } else { "ipv6" };
    a.only(
        "adrfam",
        &[family],
        &format!("traddr {traddr} is {family}; only ipv4 and ipv6 (RoCEv2) are served"),
    )?;
    a.only(
        "treq",
        &["not specified", ""],
        "this target has no secure channel; only \"not specified\" is served",
    )?;
    let trsvcid = a
        .int::<u16>("trsvcid")?
        .ok_or_else(|| a.bad("trsvcid", "missing (nvmetcli always writes it)"))?;
    Ok((addr, trsvcid))
}

fn read_port(p: &Obj<'_>) -> Result<ListenAddr, String> {
    let addr_keys = ["trtype", "adrfam", "traddr", "trsvcid", "treq", "tsas"];
    let a = p
        .obj("addr", &addr_keys)?
        .ok_or_else(|| format!("{}: missing (nvmetcli always writes it)", p.at("addr")))?;
    let (addr, trsvcid) = read_addr(&a)?;
    a.only(
        "tsas",
        &["connected", ""],
        "RDMA ports here are reliable connected (TSAS qptype connected) only",
    )?;
    let mut port = ListenAddr::new(addr, trsvcid);
    port.portid = Some(
        p.int::<u16>("portid")?
            .ok_or_else(|| p.bad("portid", "missing (nvmetcli always writes it)"))?,
    );
    port.subsystems = Some(
        strings(p, "subsystems")?
            .into_iter()
            .map(|(_, s)| s)
            .collect(),
    );
    for r in objects(p, "referrals", &["name", "addr", "enable"])? {
        let ra = r
            .obj(
                "addr",
                &["trtype", "adrfam", "traddr", "trsvcid", "treq", "portid"],
            )?
            .ok_or_else(|| format!("{}: missing (nvmetcli always writes it)", r.at("addr")))?;
        let (raddr, rsvcid) = read_addr(&ra)?;
        port.referrals.push(ReferralConfig {
            addr: raddr,
            trsvcid: rsvcid,
            portid: ra.int::<u16>("portid")?.unwrap_or(0),
            enable: r.flag("enable")?.unwrap_or(true),
        });
    }
    for g in objects(p, "ana_groups", &["grpid", "ana"])? {
        let grpid = g
            .int::<u32>("grpid")?
            .ok_or_else(|| g.bad("grpid", "missing (nvmetcli always writes it)"))?;
        let state = match g.obj("ana", &["state"])? {
            Some(ana) => match ana.text("state")? {
                Some(name) => ana_state(&name).ok_or_else(|| ana.bad("state", ANA_STATES))?,
                None => AnaStateConfig::Optimized,
            },
            None => AnaStateConfig::Optimized,
        };
        port.ana_groups.push(AnaGroupConfig { grpid, state });
    }
    Ok(port)
}

/// A subsystem; an allowed host with DH-HMAC-CHAP secrets (`keys`) must authenticate
/// to it (nvmet authenticates the hosts a subsystem allows, not those of
/// `allow_any_host`).
fn read_subsystem(
    s: &Obj<'_>,
    hosts: &[HostConfig],
    keys: &std::collections::HashMap<String, HostKeyConfig>,
) -> Result<SubsystemConfig, String> {
    if s.get("passthru").is_some() {
        return Err(s.bad(
            "passthru",
            "passthru subsystems (a whole NVMe controller handed through) are not served",
        ));
    }
    let mut sub = SubsystemConfig::new(&s.required("nqn")?);
    for (at, nqn) in strings(s, "allowed_hosts")? {
        if !hosts.iter().any(|h| h.nqn == nqn) {
            return Err(format!(
                "{at} = {nqn:?}: not in hosts; as in nvmet, an allowed host links a hosts entry"
            ));
        }
        if let Some(k) = keys.get(&nqn) {
            sub.host_keys.push(k.clone());
        }
        sub.hosts.push(nqn);
    }
    let attr_keys = [
        "allow_any_host",
        "serial",
        "model",
        "version",
        "cntlid_min",
        "cntlid_max",
        "qid_max",
        "ieee_oui",
        "firmware",
        "pi_enable",
    ];
    if let Some(attr) = s.obj("attr", &attr_keys)? {
        // nvmet's default is no host: allow_any_host 0.
        sub.allow_any_host = attr.flag("allow_any_host")?.unwrap_or(false);
        sub.serial = attr.text("serial")?;
        sub.model = attr.text("model")?;
        sub.firmware = attr.text("firmware")?;
        sub.version = attr.text("version")?;
        sub.ieee_oui = attr.int("ieee_oui")?.unwrap_or(0);
        sub.cntlid_min = attr.int("cntlid_min")?.unwrap_or(DEFAULT_CNTLID_MIN);
        sub.cntlid_max = attr.int("cntlid_max")?.unwrap_or(DEFAULT_CNTLID_MAX);
        sub.qid_max = attr.int("qid_max")?;
        attr.only(
            "pi_enable",
            &["0"],
            "protection information (T10 PI) is not served",
        )?;
    } else {
        sub.allow_any_host = false;
    }
    for n in objects(
        s,
        "namespaces",
        &["nsid", "enable", "device", "ana_grpid", "ana", "resv"],
    )? {
        sub.namespaces.push(read_namespace(&n)?);
    }
    Ok(sub)
}

fn read_namespace(n: &Obj<'_>) -> Result<NamespaceConfig, String> {
    let nsid = n
        .int::<u32>("nsid")?
        .ok_or_else(|| n.bad("nsid", "missing (nvmetcli always writes it)"))?;
    let mut ns = NamespaceConfig::new(nsid);
    ns.enable = n.flag("enable")?.unwrap_or(true);
    let d = n
        .obj("device", &["path", "nguid", "uuid", "eui64"])?
        .ok_or_else(|| format!("{}: missing (nvmetcli always writes it)", n.at("device")))?;
    ns.path = d.required("path")?.into();
    let id = |key: &str| -> Result<Option<String>, String> { d.text(key) };
    ns.nguid = id("nguid")?
        .map(|t| {
            t.parse::<Nguid>()
                .map_err(|e| d.bad("nguid", &e.to_string()))
        })
        .transpose()?;
    ns.eui64 = id("eui64")?
        .map(|t| {
            t.parse::<Eui64>()
                .map_err(|e| d.bad("eui64", &e.to_string()))
        })
        .transpose()?;
    ns.uuid = id("uuid")?
        .map(|t| uuid::Uuid::parse_str(&t).map_err(|e| d.bad("uuid", &format!("not a UUID: {e}"))))
        .transpose()?;
    // nvmetcli writes the group twice: `ana_grpid` (a number) and `ana.grpid` (the
    // configfs text); the first wins, the second serves when it is alone.
    let configfs = match n.obj("ana", &["grpid"])? {
        Some(ana) => ana.int::<u32>("grpid")?,
        None => None,
    };
    if let Some(g) = n.int::<u32>("ana_grpid")?.or(configfs) {
        ns.ana_grpid = g;
    }
    if let Some(resv) = n.obj("resv", &["enable"])? {
        resv.only("enable", &["0"], "reservations are not served")?;
    }
    Ok(ns)
}

#[cfg(test)]
mod tests;

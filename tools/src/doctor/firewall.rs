//! Firewall rules that drop RoCEv2 (UDP port 4791), parsed from the rule sets
//! themselves: `nft -j list ruleset` (nftables' JSON, every table of every family) and
//! `iptables -S` / `ip6tables -S` (the filter table's rules as commands).
//!
//! A rule counts as dropping RoCE when its verdict is `drop` or `reject` and it selects
//! UDP port 4791: a destination port match that admits 4791 (a value, a set, a range,
//! or `!=` something else), or UDP without a port, or no match at all (an
//! unconditional drop). Rules on other selectors only (connection state, TCP) are not
//! taken for RoCE drops. An earlier accept of UDP 4791 in the same chain shadows a
//! later drop. A base chain hooked on input with policy drop and no rule accepting UDP
//! 4791 is a warning (the rule that admits RoCE may come from elsewhere).
use serde_json::Value;

use super::{command, CmdOutput, Finding, Status};

/// The RoCEv2 UDP destination port (IBTA RoCEv2 Annex A17.2).
pub const ROCE_PORT: u64 = 4791;

/// A rule that drops UDP 4791, or a chain whose policy does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dropper {
    /// Where: `nft inet filter input handle 3`, `iptables INPUT`.
    pub location: String,
    /// The rule as the tool shows it (or the policy).
    pub rule: String,
    /// The command that removes it.
    pub fix: String,
    /// Only a chain policy (a warning, not a failure).
    pub policy_only: bool,
}

/// Whether an nft JSON port value (number, `{"set": [...]}`, `{"range": [a, b]}`)
/// contains 4791.
fn nft_has_port(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.as_u64() == Some(ROCE_PORT),
        Value::Object(o) => {
            if let Some(Value::Array(s)) = o.get("set") {
                return s.iter().any(nft_has_port);
            }
            if let Some(Value::Array(r)) = o.get("range") {
                let lo = r.first().and_then(Value::as_u64).unwrap_or(u64::MAX);
                let hi = r.get(1).and_then(Value::as_u64).unwrap_or(0);
                return (lo..=hi).contains(&ROCE_PORT);
            }
            false
        }
        Value::Array(a) => a.iter().any(nft_has_port),
        _ => false,
    }
}

/// What one nft rule says of UDP 4791: `Some(true)` it selects it, `Some(false)` it
/// selects something else only, `None` no port or protocol match at all.
fn nft_selects_roce(expr: &[Value]) -> Option<bool> {
    let mut seen = false;
    let mut other = false;
    for e in expr {
        let Some(m) = e.get("match") else { continue };
        let op = m.get("op").and_then(Value::as_str).unwrap_or("==");
        let left = m.get("left").unwrap_or(&Value::Null);
        let right = m.get("right").unwrap_or(&Value::Null);
        let payload = left.get("payload");
        let field = payload
            .and_then(|p| p.get("field"))
            .and_then(Value::as_str)
            .unwrap_or("");
        if field == "dport" {
            seen = true;
            let proto = payload
                .and_then(|p| p.get("protocol"))
                .and_then(Value::as_str)
                .unwrap_or("");
            if !matches!(proto, "udp" | "th") || (op == "!=") == nft_has_port(right) {
                return Some(false);
            }
            continue;
        }
        // `meta l4proto udp`, `ip protocol udp`, `meta l4proto { tcp, udp }`.
        let l4 = left
            .get("meta")
            .and_then(|m| m.get("key"))
            .and_then(Value::as_str)
            == Some("l4proto")
            || field == "protocol"
            || field == "nexthdr";
        if l4 {
            seen = true;
            if (op == "!=") == right.to_string().contains("udp") {
                return Some(false);
            }
        } else {
            // Connection state, addresses, interfaces: a condition, not about RoCE
            // unless a port or protocol match says so.
            other = true;
        }
    }
    if seen {
        Some(true)
    } else if other {
        Some(false)
    } else {
        None
    }
}

/// An nft JSON value as `nft list` prints it (`4791`, `{ 4420, 4791 }`, `4000-5000`).
fn nft_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Array(a) => a.iter().map(nft_value).collect::<Vec<_>>().join(", "),
        Value::Object(o) => {
            if let Some(s) = o.get("set") {
                return format!("{{ {} }}", nft_value(s));
            }
            if let Some(Value::Array(r)) = o.get("range") {
                return r.iter().map(nft_value).collect::<Vec<_>>().join("-");
            }
            if let Some(p) = o.get("payload") {
                let f = |k| p.get(k).and_then(Value::as_str).unwrap_or("?");
                return format!("{} {}", f("protocol"), f("field"));
            }
            if let Some(m) = o.get("meta") {
                return format!(
                    "meta {}",
                    m.get("key").and_then(Value::as_str).unwrap_or("?")
                );
            }
            match o.iter().next() {
                Some((k, Value::Null)) => k.clone(),
                Some((k, v)) => format!("{k} {}", nft_value(v)),
                None => String::new(),
            }
        }
        _ => v.to_string(),
    }
}

/// An nft JSON rule as `nft list ruleset` prints it, near enough to recognise
/// (`udp dport 4791 drop`).
fn nft_rule_text(expr: &[Value]) -> String {
    expr.iter()
        .map(|e| match e.get("match") {
            Some(m) => {
                let op = m.get("op").and_then(Value::as_str).unwrap_or("==");
                let l = nft_value(m.get("left").unwrap_or(&Value::Null));
                let r = nft_value(m.get("right").unwrap_or(&Value::Null));
                if op == "==" || op == "in" {
                    format!("{l} {r}")
                } else {
                    format!("{l} {op} {r}")
                }
            }
            None => nft_value(e),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn verdict(expr: &[Value]) -> Option<&'static str> {
    expr.iter().find_map(|e| {
        let o = e.as_object()?;
        if o.contains_key("drop") {
            Some("drop")
        } else if o.contains_key("reject") {
            Some("reject")
        } else if o.contains_key("accept") {
            Some("accept")
        } else {
            None
        }
    })
}

/// The droppers of an `nft -j list ruleset` output.
///
/// # Errors
/// When the text is not nftables' JSON.
pub fn nft_droppers(json: &str) -> Result<Vec<Dropper>, String> {
    let v: Value = serde_json::from_str(json).map_err(|e| format!("nft -j did not parse: {e}"))?;
    let items = v
        .get("nftables")
        .and_then(Value::as_array)
        .ok_or("nft -j: no \"nftables\" array")?;
    let key = |o: &Value| {
        let s = |k| o.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        (
            s("family"),
            s("table"),
            s(if o.get("chain").is_some() {
                "chain"
            } else {
                "name"
            }),
        )
    };
    let mut out = Vec::new();
    // Chains hooked on input with policy drop: (family, table, name) -> accepted 4791.
    let mut policy: Vec<((String, String, String), bool)> = Vec::new();
    for it in items {
        if let Some(c) = it.get("chain") {
            if c.get("hook").and_then(Value::as_str) == Some("input")
                && c.get("policy").and_then(Value::as_str) == Some("drop")
            {
                policy.push((key(c), false));
            }
        }
    }
    let mut accepted: Vec<(String, String, String)> = Vec::new();
    for it in items {
        let Some(r) = it.get("rule") else { continue };
        let k = key(r);
        let expr = r
            .get("expr")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let selects = nft_selects_roce(&expr);
        // No match at all: an unconditional verdict.
        let roce = selects != Some(false);
        match verdict(&expr) {
            Some("accept") if roce => {
                accepted.push(k.clone());
                if let Some(p) = policy.iter_mut().find(|(c, _)| *c == k) {
                    p.1 = true;
                }
            }
            Some("drop" | "reject") if roce && !accepted.contains(&k) => {
                let handle = r.get("handle").and_then(Value::as_u64).unwrap_or(0);
                let (f, t, c) = &k;
                out.push(Dropper {
                    location: format!("nft {f} {t} {c} handle {handle}"),
                    rule: nft_rule_text(&expr),
                    fix: format!("nft delete rule {f} {t} {c} handle {handle}"),
                    policy_only: false,
                });
            }
            _ => {}
        }
    }
    for ((f, t, c), ok) in policy {
        if !ok {
            out.push(Dropper {
                location: format!("nft {f} {t} {c}"),
                rule: "policy drop, and no rule of the chain accepts udp dport 4791".into(),
                fix: format!("nft insert rule {f} {t} {c} udp dport 4791 accept"),
                policy_only: true,
            });
        }
    }
    Ok(out)
}

/// Whether an iptables port spec (`4791`, `4000:5000`, `4420,4791`) contains 4791.
fn ipt_has_port(spec: &str) -> bool {
    spec.split(',').any(|p| match p.split_once(':') {
        Some((lo, hi)) => {
            let lo = if lo.is_empty() {
                0
            } else {
                lo.parse().unwrap_or(u64::MAX)
            };
            let hi = if hi.is_empty() {
                65535
            } else {
                hi.parse().unwrap_or(0)
            };
            (lo..=hi).contains(&ROCE_PORT)
        }
        None => p.parse() == Ok(ROCE_PORT),
    })
}

/// The droppers of an `iptables -S` (or `ip6tables -S`, `tool` names which) output.
pub fn iptables_droppers(text: &str, tool: &str) -> Vec<Dropper> {
    let mut out = Vec::new();
    let mut accepted: Vec<String> = Vec::new();
    let mut input_policy_drop = false;
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["-P", "INPUT", "DROP"] => input_policy_drop = true,
            ["-A", chain, rest @ ..] => {
                let mut proto: Option<(bool, &str)> = None;
                let mut dport: Option<(bool, &str)> = None;
                let mut target = "";
                let mut other = false;
                let mut neg = false;
                let mut i = 0;
                while i < rest.len() {
                    let a = rest[i];
                    let val = rest.get(i + 1).copied().unwrap_or("");
                    match a {
                        "!" => {
                            neg = true;
                            i += 1;
                            continue;
                        }
                        "-p" | "--protocol" => proto = Some((neg, val)),
                        "--dport" | "--destination-port" | "--dports" | "--destination-ports" => {
                            dport = Some((neg, val))
                        }
                        "-j" | "--jump" => target = val,
                        "-m" | "--match" => {}
                        _ if a.starts_with('-') => other = true,
                        _ => {
                            i += 1;
                            continue;
                        }
                    }
                    neg = false;
                    i += 2;
                }
                let proto_ok = match proto {
                    None => dport.is_none(),
                    Some((n, p)) => (p == "udp" || p == "all") != n,
                };
                let port_ok = match dport {
                    None => true,
                    Some((n, d)) => ipt_has_port(d) != n,
                };
                let selects = proto_ok && port_ok && (proto.is_some() || dport.is_some() || !other);
                let roce = selects && !(other && proto.is_none() && dport.is_none());
                match target {
                    "ACCEPT" if roce => accepted.push(chain.to_string()),
                    "DROP" | "REJECT" if roce && !accepted.iter().any(|c| c == chain) => {
                        out.push(Dropper {
                            location: format!("{tool} {chain}"),
                            rule: line.to_string(),
                            fix: format!("{tool} {}", line.replacen("-A", "-D", 1)),
                            policy_only: false,
                        })
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    if input_policy_drop && !accepted.iter().any(|c| c == "INPUT") {
        out.push(Dropper {
            location: format!("{tool} INPUT"),
            rule: "-P INPUT DROP, and no rule of INPUT accepts udp dport 4791".into(),
            fix: format!("{tool} -I INPUT -p udp --dport 4791 -j ACCEPT"),
            policy_only: true,
        });
    }
    out
}

/// Adds the firewall finding: reads every rule set it can.
pub fn check(out: &mut Vec<Finding>) {
    let mut droppers = Vec::new();
    let mut read = Vec::new();
    let mut unread = Vec::new();
    match command("nft", &["-j", "list", "ruleset"]) {
        CmdOutput::Ok(s) => match nft_droppers(&s) {
            Ok(d) => {
                read.push("nft");
                droppers.extend(d);
            }
            Err(e) => unread.push(format!("nft: {e}")),
        },
        CmdOutput::Missing => {}
        CmdOutput::Failed(e) => unread.push(format!("nft: {e}")),
    }
    for tool in ["iptables", "ip6tables"] {
        match command(tool, &["-S"]) {
            CmdOutput::Ok(s) => {
                read.push(tool);
                droppers.extend(iptables_droppers(&s, tool));
            }
            CmdOutput::Missing => {}
            CmdOutput::Failed(e) => unread.push(format!("{tool}: {e}")),
        }
    }
    if read.is_empty() {
        let why = if unread.is_empty() {
            "neither nft nor iptables is installed".to_string()
        } else {
            unread.join("; ")
        };
        out.push(Finding::new(
            "firewall",
            Status::Skip,
            format!("no firewall rule set readable: {why}"),
            "not visible here (reading rule sets needs root)",
            None,
        ));
        return;
    }
    let (drops, policies): (Vec<&Dropper>, Vec<&Dropper>) =
        droppers.iter().partition(|d| !d.policy_only);
    if !drops.is_empty() {
        out.push(Finding::new(
            "firewall",
            Status::Fail,
            format!(
                "{} rule(s) drop UDP 4791: {}",
                drops.len(),
                drops
                    .iter()
                    .map(|d| format!("{}: {}", d.location, d.rule))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            "every RoCEv2 packet (data, ACKs and the CM's MADs) is UDP to port 4791: \
             connections time out",
            Some(
                drops
                    .iter()
                    .map(|d| d.fix.clone())
                    .collect::<Vec<_>>()
                    .join(" && "),
            ),
        ));
    } else if !policies.is_empty() {
        out.push(Finding::new(
            "firewall",
            Status::Warn,
            policies
                .iter()
                .map(|d| format!("{}: {}", d.location, d.rule))
                .collect::<Vec<_>>()
                .join("; "),
            "RoCEv2 packets to UDP 4791 are dropped unless another rule admits them",
            Some(
                policies
                    .iter()
                    .map(|d| d.fix.clone())
                    .collect::<Vec<_>>()
                    .join(" && "),
            ),
        ));
    } else {
        out.push(Finding::new(
            "firewall",
            Status::Ok,
            format!("no rule drops UDP 4791 (read: {})", read.join(", ")),
            "",
            None,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nft_drop_of_4791_and_shadowing_accept() {
        let j = r#"{"nftables":[{"metainfo":{"version":"1.0.6"}},
          {"table":{"family":"inet","name":"f","handle":1}},
          {"chain":{"family":"inet","table":"f","name":"in","handle":1,"type":"filter","hook":"input","prio":0,"policy":"accept"}},
          {"rule":{"family":"inet","table":"f","chain":"in","handle":2,"expr":[{"match":{"op":"==","left":{"payload":{"protocol":"udp","field":"dport"}},"right":4791}},{"drop":null}]}},
          {"rule":{"family":"inet","table":"f","chain":"in","handle":3,"expr":[{"match":{"op":"==","left":{"payload":{"protocol":"tcp","field":"dport"}},"right":4791}},{"drop":null}]}},
          {"rule":{"family":"inet","table":"f","chain":"in","handle":4,"expr":[{"match":{"op":"in","left":{"ct":{"key":"state"}},"right":"invalid"}},{"drop":null}]}}]}"#;
        let d = nft_droppers(j).unwrap();
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].fix, "nft delete rule inet f in handle 2");
        assert_eq!(d[0].rule, "udp dport 4791 drop");
        let ranged = j.replace(
            "\"right\":4791}},{\"drop",
            "\"right\":{\"range\":[4000,5000]}}},{\"drop",
        );
        assert_eq!(nft_droppers(&ranged).unwrap().len(), 1);
        let set = j.replace(
            "\"right\":4791}},{\"drop",
            "\"right\":{\"set\":[4420,4791]}}},{\"drop",
        );
        assert_eq!(nft_droppers(&set).unwrap().len(), 1);
        let other = j.replace("\"right\":4791}},{\"drop", "\"right\":53}},{\"drop");
        assert!(nft_droppers(&other).unwrap().is_empty());
        let policy = r#"{"nftables":[{"chain":{"family":"ip","table":"t","name":"c","hook":"input","policy":"drop"}}]}"#;
        let d = nft_droppers(policy).unwrap();
        assert!(d[0].policy_only && d[0].fix.contains("udp dport 4791 accept"));
    }

    #[test]
    fn iptables_rules() {
        let s = "-P INPUT ACCEPT\n-A INPUT -p udp -m udp --dport 4791 -j DROP\n\
                 -A INPUT -p tcp -m tcp --dport 4791 -j DROP\n\
                 -A INPUT -m conntrack --ctstate INVALID -j DROP\n";
        let d = iptables_droppers(s, "iptables");
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(
            d[0].fix,
            "iptables -D INPUT -p udp -m udp --dport 4791 -j DROP"
        );
        let r = iptables_droppers(
            "-A INPUT -p udp -m multiport --dports 4000:5000 -j REJECT\n",
            "iptables",
        );
        assert_eq!(r.len(), 1);
        let shadowed = "-A INPUT -p udp --dport 4791 -j ACCEPT\n-A INPUT -p udp -j DROP\n";
        assert!(iptables_droppers(shadowed, "iptables").is_empty());
        let pol = iptables_droppers("-P INPUT DROP\n", "iptables");
        assert!(pol[0].policy_only);
        assert!(iptables_droppers("-A INPUT -p udp --dport 53 -j DROP\n", "iptables").is_empty());
    }
}

//! PFC and ETS, where the host can see them: `dcb pfc show` / `dcb ets show`
//! (iproute2's dcbnl client) on the RoCE interface, else `lldptool` (lldpad's, which
//! needs its daemon). Virtual interfaces (veth, loopback) and drivers without dcbnl
//! show nothing: "not visible here". A lossless RoCE fabric pauses the RoCE priority
//! (PFC) instead of dropping; without PFC, RC's go-back-N retransmits whole windows
//! after each loss and ECN marking (DCQCN) is what keeps queues short.
use super::{command, CmdOutput, Finding, Options, Status};
use crate::netif::{holder, NetIf};

/// The priorities with PFC on in `dcb pfc show` output (`prio-pfc 0:off 1:off 3:on`).
pub fn pfc_enabled(text: &str) -> Option<Vec<u8>> {
    let mut seen = false;
    let mut on = Vec::new();
    let mut in_prio = false;
    for w in text.split_whitespace() {
        if w == "prio-pfc" {
            seen = true;
            in_prio = true;
            continue;
        }
        if in_prio {
            match w.split_once(':') {
                Some((p, s)) => {
                    if let (Ok(p), "on") = (p.parse::<u8>(), s) {
                        on.push(p);
                    }
                }
                None => in_prio = false,
            }
        }
    }
    seen.then_some(on)
}

/// Adds the DCB finding.
pub fn check(opts: &Options, ifs: &[NetIf], out: &mut Vec<Finding>) {
    let Some((i, _)) = holder(ifs, opts.addr) else {
        return;
    };
    let ifname = i.name.as_str();
    let pfc = command("dcb", &["pfc", "show", "dev", ifname]);
    let why = match &pfc {
        CmdOutput::Ok(s) => match pfc_enabled(s) {
            Some(on) => {
                let ets = match command("dcb", &["ets", "show", "dev", ifname]) {
                    CmdOutput::Ok(e) => format!(
                        "; ETS: {}",
                        e.split_whitespace().collect::<Vec<_>>().join(" ")
                    ),
                    _ => String::new(),
                };
                if on.is_empty() {
                    out.push(Finding::new(
                        "dcb",
                        Status::Warn,
                        format!("{ifname}: PFC on no priority (dcb pfc show){ets}"),
                        "the link is lossy: a dropped RoCE packet costs a go-back-N resend of \
                         the window, and incast loses packets unless ECN marking (DCQCN) keeps \
                         the queues short",
                        Some(format!(
                            "dcb pfc set dev {ifname} prio-pfc 3:on (the RoCE priority; the \
                             switch port must match)"
                        )),
                    ));
                } else {
                    let list: Vec<String> = on.iter().map(|p| p.to_string()).collect();
                    out.push(Finding::new(
                        "dcb",
                        Status::Ok,
                        format!("{ifname}: PFC on priorities {}{ets}", list.join(",")),
                        "",
                        None,
                    ));
                }
                return;
            }
            None => format!("dcb printed no prio-pfc: {}", s.trim()),
        },
        CmdOutput::Missing => "dcb (iproute2) is not installed".to_string(),
        CmdOutput::Failed(e) => format!("dcb: {e}"),
    };
    let l = match command("lldptool", &["-t", "-i", ifname, "-V", "PFC"]) {
        CmdOutput::Ok(s) => {
            let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
            out.push(Finding::new(
                "dcb",
                Status::Ok,
                format!("{ifname}: lldptool PFC TLV: {s}"),
                "",
                None,
            ));
            return;
        }
        CmdOutput::Missing => "lldptool is not installed".to_string(),
        CmdOutput::Failed(e) => format!("lldptool: {e}"),
    };
    out.push(Finding::new(
        "dcb",
        Status::Skip,
        format!("PFC/ETS of {ifname} not visible here ({why}; {l})"),
        "the interface's driver shows no DCB state (veth, loopback and many NICs have \
         none): check PFC and ECN on the switch port",
        None,
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pfc_priorities() {
        let s = "pfc-cap 8 macsec-bypass off delay 4096\nprio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off\n";
        assert_eq!(pfc_enabled(s), Some(vec![3]));
        assert_eq!(pfc_enabled("prio-pfc 0:off 1:off\n"), Some(vec![]));
        assert_eq!(pfc_enabled("Attribute failed policy validation"), None);
    }
}

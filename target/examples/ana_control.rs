//! ANA states changed at run time (issue 16 item 4): runs a target from a TOML or
//! nvmetcli JSON configuration and reads commands on standard input, one per line:
//!
//! ```text
//! set PORTID GRPID STATE     # STATE: optimized, non-optimized, inaccessible,
//!                            # persistent-loss or change
//! ```
//!
//! Each answers `ok PORTID GRPID STATE changed=BOOL` or `error ...` on standard output.
//! The end of standard input stops the target. The interop group `ana`
//! (tests/interop/hooks/our-ana.sh) drives it to flip the optimized path of a Linux
//! host's native multipath under fio.
//!
//! ```text
//! cargo run -p nvmf-target --example ana_control -- target/examples/ana.toml
//! ```
use std::io::{BufRead, Write};
use std::path::PathBuf;

use nvme::ana::AnaState;
use nvmf_target::config::TargetConfig;
use nvmf_target::logging::{self, LogFormat};

/// One command line: `set PORTID GRPID STATE`.
fn parse(line: &str) -> Result<(u16, u32, AnaState), String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let [cmd, portid, grpid, state] = words[..] else {
        return Err("expected: set PORTID GRPID STATE".into());
    };
    if cmd != "set" {
        return Err(format!("unknown command {cmd:?}: expected set"));
    }
    let portid = portid
        .parse()
        .map_err(|e| format!("PORTID {portid:?}: {e}"))?;
    let grpid = grpid.parse().map_err(|e| format!("GRPID {grpid:?}: {e}"))?;
    let state = AnaState::from_name(state).ok_or_else(|| {
        format!(
            "STATE {state:?}: not optimized, non-optimized, inaccessible, persistent-loss or change"
        )
    })?;
    Ok((portid, grpid, state))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    logging::init(LogFormat::Text, "info");
    let path: PathBuf = std::env::args_os()
        .nth(1)
        .ok_or("usage: ana_control CONFIG (a TOML or nvmetcli JSON file)")?
        .into();
    let cfg = TargetConfig::from_file(&path)?;
    let target = nvmf_target::start(&cfg)?;
    let addrs: Vec<String> = target
        .listen_addrs()
        .iter()
        .map(|a| a.to_string())
        .collect();
    tracing::info!("serving on {}", addrs.join(", "));
    let mut out = std::io::stdout().lock();
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let answer = parse(&line).and_then(|(portid, grpid, state)| {
            target
                .set_ana_state(portid, grpid, state)
                .map(|changed| format!("ok {portid} {grpid} {state} changed={changed}"))
                .map_err(|e| e.to_string())
        });
        match answer {
            Ok(s) => writeln!(out, "{s}")?,
            Err(e) => writeln!(out, "error {e}")?,
        }
        out.flush()?;
    }
    target.shutdown();
    Ok(())
}

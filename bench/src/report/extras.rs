//! nvmf-bench's own report lines, which fio has no place for: the verification
//! summary, the injected faults, the `--baseline` floor and the embedded target's
//! counters. In every output format they go to standard error (so standard output
//! is fio's report and nothing else); the JSON also carries them under its
//! `nvmf-bench` key ([`crate::report::json::own_json`]).

use std::fmt::Write as _;

use super::text::verify_problem;
use crate::result::{BenchResult, FaultSummary};

/// The lines for standard error after a run; empty when there is nothing to add.
pub fn render_extras(result: &BenchResult) -> String {
    let mut out = String::new();
    if let Some(f) = &result.faults {
        render_faults(&mut out, f);
    }
    if let Some(b) = &result.baseline {
        out += &crate::baseline::render_text(b, result);
    }
    if let Some(v) = result.verify {
        let _ = writeln!(
            out,
            "verify: {} blocks verified, {} mismatches",
            v.verified, v.mismatches
        );
        if let Some(why) = verify_problem(&v, result.interrupted) {
            let _ = writeln!(out, "verify: error: {why}");
        }
    }
    out
}

/// The `--inject-*` summary: the probabilities, then one line per device.
fn render_faults(out: &mut String, f: &FaultSummary) {
    let _ = writeln!(
        out,
        "Injected faults (per received packet: loss={}, reorder={}, dup={}, corrupt={}; seed={}):",
        f.loss, f.reorder, f.duplicate, f.corrupt, f.seed
    );
    for s in &f.sides {
        let _ = writeln!(
            out,
            "  {}: dropped={}, reordered={}, duplicated={}, corrupted={}, icrc_errors={}, rcvd_pkts={}, sent_pkts={}",
            s.side,
            s.dropped,
            s.reordered,
            s.duplicated,
            s.corrupted,
            s.icrc_errors,
            s.rcvd_pkts,
            s.sent_pkts
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::testdata;
    use crate::result::{InjectedFaults, VerifySummary};

    #[test]
    fn faults_then_the_verify_lines() {
        let mut r = testdata::result();
        r.faults = Some(FaultSummary {
            loss: 0.01,
            reorder: 0.0,
            duplicate: 0.0,
            corrupt: 0.0,
            seed: 5,
            sides: vec![InjectedFaults {
                side: "target".into(),
                dropped: 12,
                duplicated: 0,
                reordered: 0,
                corrupted: 0,
                icrc_errors: 0,
                rcvd_pkts: 1188,
                sent_pkts: 1300,
            }],
        });
        let text = render_extras(&r);
        assert!(
            text.starts_with("Injected faults (per received packet: loss=0.01, reorder=0, dup=0, corrupt=0; seed=5):\n  target: dropped=12, reordered=0,"),
            "{text}"
        );
        assert!(
            text.ends_with("\nverify: 7 blocks verified, 0 mismatches\n"),
            "{text}"
        );
        r.verify = Some(VerifySummary {
            verified: 2051,
            written: 3027,
            unchecked: 976,
            cut_short: true,
            ..VerifySummary::default()
        });
        r.interrupted = true;
        assert!(render_extras(&r).contains(
            "verify: 2051 blocks verified, 0 mismatches\nverify: error: the read-back was cut short by a signal: 976"
        ));
        r.faults = None;
        r.verify = None;
        assert_eq!(render_extras(&r), "");
    }
}

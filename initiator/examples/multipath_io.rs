//! Verified I/O through native multipath for a while, with a status line every 250 ms:
//! the I/Os done, errors, data mismatches, the commands each path completed and each
//! path's ANA state. Flip the target's ANA states (or kill a listener) while it runs to
//! watch the I/O move; the interop group `nvmet-ana` runs it against Linux nvmet-rdma
//! (tests/interop/hooks/nvmet-ana.sh).
//!
//!     cargo run -p nvmf-initiator --example multipath_io -- 20 4 \
//!         nqn.2026-11.io.example:ref 192.168.77.10:4420=192.168.77.3 \
//!         192.168.77.10:4421=192.168.77.4
//!
//! Arguments: seconds, tasks (each one write then one read of a block at a time, on
//! blocks no other task touches), the subsystem NQN, then one `TRADDR:TRSVCID=LOCAL_IP`
//! per path (each path opens its own device on its local address). Paths are chosen
//! by [`PathPolicy::FirstOptimized`]. Exits 1 if any I/O failed or read back other data
//! than was written.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmf_initiator::{HostOptions, MultipathHost, MultipathOptions, PathPolicy};

#[derive(Default)]
struct Counts {
    ios: AtomicU64,
    errors: AtomicU64,
    mismatches: AtomicU64,
}

/// The block's content for write number `seq` of block `lba`: both, repeated.
fn pattern(buf: &mut [u8], lba: u64, seq: u64) {
    for (i, c) in buf.chunks_exact_mut(16).enumerate() {
        c[..8].copy_from_slice(&lba.to_le_bytes());
        c[8..].copy_from_slice(&(seq ^ i as u64).to_le_bytes());
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: multipath_io SECS TASKS SUBNQN TRADDR:TRSVCID=LOCAL_IP...";
    let secs: f64 = args.next().ok_or(usage)?.parse()?;
    let tasks: u64 = args.next().ok_or(usage)?.parse()?;
    let subnqn = args.next().ok_or(usage)?;
    let mut paths = Vec::new();
    for a in args {
        let (target, local) = a.split_once('=').ok_or(usage)?;
        let mut o = HostOptions::new(target.parse()?, subnqn.clone());
        o.local_ip = Some(local.parse()?);
        paths.push(o);
    }
    if paths.is_empty() || tasks == 0 {
        return Err(usage.into());
    }
    let opts = MultipathOptions {
        policy: PathPolicy::FirstOptimized,
        ..MultipathOptions::default()
    };
    let asked = paths.len();
    let mp = MultipathHost::connect(paths, opts).await?;
    if mp.paths().len() < asked {
        eprintln!(
            "only {} of {asked} paths connected (RUST_LOG=warn with a tracing subscriber \
             names why; check each TRADDR:TRSVCID answers)",
            mp.paths().len()
        );
    }
    let ns = mp.namespace(1).await?;
    println!(
        "namespace 1 of {}: paths {:?} of {}, UUID {}, NGUID {}, ANA group {}, {} blocks of {} B",
        mp.subnqn(),
        ns.path_indices(),
        mp.paths().len(),
        hex(&ns.ids.uuid),
        hex(&ns.ids.nguid),
        ns.anagrpid,
        ns.nlb,
        ns.block_size
    );
    let stripe = (ns.nlb / tasks).min(256);
    if stripe == 0 {
        return Err(format!(
            "namespace 1 has {} blocks, fewer than {tasks} tasks",
            ns.nlb
        )
        .into());
    }
    let counts = Arc::new(Counts::default());
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    let mut workers = Vec::new();
    for t in 0..tasks {
        let (ns, counts) = (ns.clone(), counts.clone());
        workers.push(tokio::spawn(async move {
            let bs = ns.block_size as usize;
            let (mut data, mut back) = (vec![0u8; bs], vec![0u8; bs]);
            let mut seq = 0u64;
            while Instant::now() < end {
                let lba = t * stripe + seq % stripe;
                pattern(&mut data, lba, seq);
                seq += 1;
                let r = match ns.write(lba, &data, false).await {
                    Ok(()) => ns.read(lba, &mut back).await,
                    Err(e) => Err(e),
                };
                counts.ios.fetch_add(2, Ordering::Relaxed);
                match r {
                    Err(e) => {
                        if counts.errors.fetch_add(1, Ordering::Relaxed) < 5 {
                            eprintln!("task {t}: block {lba}: {e}");
                        }
                    }
                    Ok(()) if back != data => {
                        if counts.mismatches.fetch_add(1, Ordering::Relaxed) < 5 {
                            eprintln!("task {t}: block {lba}: read back other data");
                        }
                    }
                    Ok(()) => {}
                }
            }
        }));
    }
    let status = |counts: &Counts| {
        format!(
            "t={:.2} ios={} errors={} mismatches={} per_path={:?} ana={:?} failovers={}",
            start.elapsed().as_secs_f64(),
            counts.ios.load(Ordering::Relaxed),
            counts.errors.load(Ordering::Relaxed),
            counts.mismatches.load(Ordering::Relaxed),
            mp.completed_per_path(),
            mp.ana_states(&ns),
            mp.failovers()
        )
    };
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(250)).await;
        println!("{}", status(&counts));
    }
    for w in workers {
        w.await?;
    }
    println!("done {}", status(&counts));
    let bad = counts.errors.load(Ordering::Relaxed) + counts.mismatches.load(Ordering::Relaxed);
    drop(ns);
    mp.disconnect().await?;
    if bad > 0 {
        std::process::exit(1);
    }
    Ok(())
}

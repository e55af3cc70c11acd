//! Connects one subsystem through several paths as one host (native multipath),
//! writes and reads back a block through the paths the policy picks, and prints the
//! ANA state and the commands of each path (the soft provider).
//!
//!     printf '[[listen]]\naddr = "127.0.0.2"\n[[listen]]\naddr = "127.0.0.3"\n%s\n' \
//!         '[[subsystems]]
//!     nqn = "nqn.2026-11.io.nvmf-rdma:target"
//!     [[subsystems.namespaces]]
//!     nsid = 1
//!     path = "/var/tmp/ns1.img"
//!     size = "1G"' > /var/tmp/two-ports.toml
//!     cargo run --release -p nvmf-target --bin nvmf-target -- --config /var/tmp/two-ports.toml &
//!     cargo run -p nvmf-initiator --example multipath -- nqn.2026-11.io.nvmf-rdma:target \
//!         127.0.0.2:4420=127.0.0.10 127.0.0.3:4420=127.0.0.11
//!
//! Arguments: the subsystem NQN, then one `TRADDR:TRSVCID=LOCAL_IP` per path (each
//! path opens its own device on its local address).
use nvmf_initiator::{HostOptions, MultipathHost, MultipathOptions, PathPolicy};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: multipath SUBNQN TRADDR:TRSVCID=LOCAL_IP...";
    let subnqn = args.next().ok_or(usage)?;
    let mut paths = Vec::new();
    for a in args {
        let (target, local) = a.split_once('=').ok_or(usage)?;
        let mut o = HostOptions::new(target.parse()?, subnqn.clone());
        o.local_ip = Some(local.parse()?);
        paths.push(o);
    }
    if paths.is_empty() {
        return Err(usage.into());
    }
    let opts = MultipathOptions {
        policy: PathPolicy::RoundRobin,
        ..MultipathOptions::default()
    };
    let mp = MultipathHost::connect(paths, opts).await?;
    let ns = mp.namespace(1).await?;
    let bs = ns.block_size as usize;
    for i in 0..8u64 {
        let data = vec![i as u8; bs];
        ns.write(i, &data, false).await?;
        let mut back = vec![0u8; bs];
        ns.read(i, &mut back).await?;
        assert_eq!(back, data, "block {i}");
    }
    println!(
        "{}: namespace 1 through paths {:?}, ANA {:?}, commands per path {:?}",
        mp.subnqn(),
        ns.path_indices(),
        mp.ana_states(&ns),
        mp.completed_per_path()
    );
    drop(ns);
    mp.disconnect().await?;
    Ok(())
}

//! Reads the Discovery log of a discovery controller (following its referrals),
//! prints every entry, and with `--connect` connects every NVM subsystem listed
//! (nvme-cli's `discover` and `connect-all`; the soft provider).
//!
//!     cargo run --release -p nvmf-target --bin nvmf-target -- --addr 127.0.0.2 \
//!         --file /var/tmp/ns1.img --size 1G &
//!     cargo run -p nvmf-initiator --example discovery -- 127.0.0.2:4420 127.0.0.3 --connect
//!
//! Arguments: the discovery controller's address and RDMA CM port, the local
//! address, and `--connect` to connect each subsystem (each host on the next local
//! address: 127.0.0.4, 127.0.0.5, ... for a local address 127.0.0.3).
use std::net::IpAddr;

use nvmf_initiator::discovery;
use nvmf_initiator::HostOptions;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: discovery TRADDR:TRSVCID LOCAL_IP [--connect]";
    let traddr = args.next().ok_or(usage)?.parse()?;
    let local: IpAddr = args.next().ok_or(usage)?.parse()?;
    let connect = args.next().as_deref() == Some("--connect");
    let mut opts = HostOptions::new(traddr, "unused");
    opts.local_ip = Some(local);
    let entries = tokio::task::spawn_blocking({
        let opts = opts.clone();
        move || discovery::discover(&opts)
    })
    .await??;
    for (i, e) in entries.iter().enumerate() {
        println!(
            "entry {i}: subtype {} trtype {} adrfam {} traddr {} trsvcid {} portid {} subnqn {}",
            e.subtype, e.trtype, e.adrfam, e.traddr, e.trsvcid, e.portid, e.subnqn
        );
    }
    if !connect {
        return Ok(());
    }
    let mut next = local;
    let hosts = discovery::connect_all(&opts, &entries, |_| {
        if let IpAddr::V4(v4) = next {
            next = IpAddr::V4((u32::from(v4) + 1).into());
        }
        Some(next)
    })
    .await;
    for (e, h) in hosts {
        match h {
            Ok(h) => {
                println!(
                    "connected {} at {}: namespaces {:?}",
                    e.subnqn,
                    e.traddr,
                    h.active_namespace_ids()
                );
                h.disconnect().await?;
            }
            Err(err) => println!("{} at {}: {err}", e.subnqn, e.traddr),
        }
    }
    Ok(())
}

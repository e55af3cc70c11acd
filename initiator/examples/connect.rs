//! Connects to an NVMe-oF subsystem, prints the controller and its namespaces, and
//! disconnects (the soft provider; no RDMA hardware needed).
//!
//!     cargo run --release -p nvmf-target --bin nvmf-target -- --addr 127.0.0.2 \
//!         --file /var/tmp/ns1.img --size 1G &
//!     cargo run -p nvmf-initiator --example connect -- 127.0.0.2:4420 \
//!         nqn.2026-11.io.nvmf-rdma:target 127.0.0.3
//!
//! Arguments: the target's address and RDMA CM port, the subsystem NQN, and
//! optionally the local address (default: the kernel's source address toward it).
use nvmf_initiator::{Host, HostError, HostOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: connect TRADDR:TRSVCID SUBNQN [LOCAL_IP]";
    let traddr = args.next().ok_or(usage)?.parse()?;
    let subnqn = args.next().ok_or(usage)?;
    let mut opts = HostOptions::new(traddr, subnqn);
    if let Some(ip) = args.next() {
        opts.local_ip = Some(ip.parse()?);
    }
    println!("host NQN {}", opts.hostnqn);
    let host = Host::connect(opts).await?;
    let c = host.controller_info();
    println!(
        "controller {} of {}: model {:?}, serial {:?}, firmware {:?}",
        c.cntlid, c.subnqn, c.model_number, c.serial_number, c.firmware_revision
    );
    for nsid in host.namespaces().await? {
        let ns = host.namespace(nsid).await?;
        println!(
            "namespace {nsid}: {} blocks of {} bytes ({} MiB)",
            ns.nlb,
            ns.block_size,
            (ns.nlb * u64::from(ns.block_size)) >> 20
        );
    }
    host.disconnect().await.map_err(|e: HostError| e.into())
}

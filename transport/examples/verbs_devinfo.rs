//! Lists the RDMA devices as `ibv_devinfo` does, through the verbs provider: devices,
//! capabilities the provider honours, ports, and each port's GID table with entry types
//! and netdevs (the table RoCEv2 GID selection reads).
//!
//! `cargo run -p transport --features verbs --example verbs_devinfo [-- IP]`
//!
//! With an IP address it also opens the device of that address (its RoCE v2 GID) and
//! prints which GID it chose. Exits 1 with the reason (e.g. "no RDMA devices: ...")
//! when there is nothing to show.
use std::net::IpAddr;
use std::process::ExitCode;

use transport::rdma::{devices, DeviceConfig, VerbsDevice};
use transport::verbs::Device as _;

fn main() -> ExitCode {
    let list = match devices() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("verbs_devinfo: {e}");
            return ExitCode::FAILURE;
        }
    };
    for d in &list {
        let c = &d.caps;
        println!("hca_id: {}", d.name);
        println!("\tfw_ver:\t\t\t{}", d.fw_ver);
        println!("\tnode_guid:\t\t{:016x}", d.node_guid);
        println!("\tvendor_id:\t\t{:#x}", d.vendor_id);
        println!("\tvendor_part_id:\t\t{}", d.vendor_part_id);
        println!("\tphys_port_cnt:\t\t{}", c.phys_port_cnt);
        println!("\tmax_qp:\t\t\t{}", c.max_qp);
        println!("\tmax_qp_wr:\t\t{}", c.max_qp_wr);
        println!("\tmax_sge:\t\t{}", c.max_sge);
        println!("\tmax_sge_rd:\t\t{}", c.max_sge_rd);
        println!("\tmax_cqe:\t\t{}", c.max_cqe);
        println!("\tmax_mr:\t\t\t{}", c.max_mr);
        println!("\tmax_mr_size:\t\t{:#x}", c.max_mr_size);
        println!("\tmax_mw:\t\t\t{}", c.max_mw);
        println!("\tmax_pd:\t\t\t{}", c.max_pd);
        println!("\tmax_qp_rd_atom:\t\t{}", c.max_qp_rd_atom);
        println!("\tmax_qp_init_rd_atom:\t{}", c.max_qp_init_rd_atom);
        println!("\tmax_srq_wr:\t\t{}", c.max_srq_wr);
        println!("\tmax_srq_sge:\t\t{}", c.max_srq_sge);
        println!("\tlocal_ca_ack_delay:\t{}", c.local_ca_ack_delay);
        for p in &d.ports {
            println!("\t\tport:\t{}", p.port);
            println!("\t\t\tstate:\t\t{} ({})", p.state_name(), p.state);
            let mtu =
                |m: Option<transport::verbs::Mtu>| m.map_or("-".into(), |m| m.bytes().to_string());
            println!("\t\t\tmax_mtu:\t{}", mtu(p.max_mtu));
            println!("\t\t\tactive_mtu:\t{}", mtu(p.active_mtu));
            let ll = match p.link_layer {
                1 => "InfiniBand",
                2 => "Ethernet",
                _ => "Unspecified",
            };
            println!("\t\t\tlink_layer:\t{ll}");
            println!("\t\t\tmax_msg_sz:\t{:#x}", p.max_msg_sz);
            println!("\t\t\tgid_tbl_len:\t{}", p.gid_tbl_len);
            for g in &p.gids {
                println!("\t\t\tGID{g}");
            }
        }
    }
    if let Some(ip) = std::env::args().nth(1) {
        let ip: IpAddr = match ip.parse() {
            Ok(ip) => ip,
            Err(e) => {
                eprintln!("verbs_devinfo: {ip:?} is not an IP address ({e})");
                return ExitCode::FAILURE;
            }
        };
        match VerbsDevice::open(&DeviceConfig::new(ip)) {
            Ok(dev) => println!(
                "open {ip}: {} port {} GID{} path_mtu {}",
                dev.name(),
                dev.path().port_num,
                dev.gid(),
                dev.path_mtu().bytes()
            ),
            Err(e) => {
                eprintln!("verbs_devinfo: open {ip}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

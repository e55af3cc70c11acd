//! `rdma-info` as a program: over a sysfs tree built in a temporary directory (this
//! machine has no RDMA device), over the recorded rxe0 table of the QEMU guest, and
//! over this host's own interfaces (the soft provider).
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rdma-info");

fn write(p: &Path, s: &str) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, format!("{s}\n")).unwrap();
}

/// An mlx5-shaped device (RoCE v1 and v2 per address, ECN counters) and an rxe
/// device, and their netdevs.
fn tree() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let ib = t.path().join("infiniband");
    let net = t.path().join("net");
    let m = ib.join("mlx5_0");
    write(&m.join("node_type"), "1: CA");
    write(&m.join("node_guid"), "0c42:a103:0065:2a6c");
    write(&m.join("sys_image_guid"), "0c42:a103:0065:2a6c");
    write(&m.join("fw_ver"), "22.36.1010");
    write(&m.join("board_id"), "MT_0000000359");
    let p = m.join("ports/1");
    write(&p.join("state"), "4: ACTIVE");
    write(&p.join("phys_state"), "5: LinkUp");
    write(&p.join("rate"), "100 Gb/sec (2X HDR)");
    write(&p.join("link_layer"), "Ethernet");
    let gids = [
        ("fe80:0000:0000:0000:0e42:a1ff:fe65:2a6c", "IB/RoCE v1"),
        ("fe80:0000:0000:0000:0e42:a1ff:fe65:2a6c", "RoCE v2"),
        ("0000:0000:0000:0000:0000:ffff:c0a8:0102", "IB/RoCE v1"),
        ("0000:0000:0000:0000:0000:ffff:c0a8:0102", "RoCE v2"),
    ];
    for (i, (g, ty)) in gids.iter().enumerate() {
        write(&p.join(format!("gids/{i}")), g);
        write(&p.join(format!("gid_attrs/types/{i}")), ty);
        write(&p.join(format!("gid_attrs/ndevs/{i}")), "ens1f0");
    }
    write(&p.join("gids/4"), "0000:0000:0000:0000:0000:0000:0000:0000");
    write(&p.join("hw_counters/np_cnp_sent"), "41");
    write(&p.join("hw_counters/rp_cnp_handled"), "40");
    write(&p.join("hw_counters/out_of_sequence"), "3");
    write(&p.join("hw_counters/lifespan"), "10");
    write(&net.join("ens1f0/mtu"), "9000");
    let r = ib.join("rxe0");
    write(&r.join("parent"), "eth1");
    write(&r.join("node_type"), "1: CA");
    let p = r.join("ports/1");
    write(&p.join("state"), "1: DOWN");
    write(&p.join("phys_state"), "3: Disabled");
    write(&p.join("link_layer"), "Ethernet");
    write(&p.join("gids/0"), "fd77:0000:0000:0000:0000:0000:0000:0010");
    write(&p.join("gid_attrs/types/0"), "RoCE v2");
    write(&p.join("gid_attrs/ndevs/0"), "eth1");
    write(&p.join("hw_counters/sent_pkts"), "100");
    write(&p.join("hw_counters/rcvd_pkts"), "90");
    write(&net.join("eth1/mtu"), "1500");
    t
}

fn run(t: &Path, args: &[&str]) -> (i32, String, String) {
    let o = Command::new(BIN)
        .args(["--provider", "verbs", "--sysfs-root"])
        .arg(t.join("infiniband"))
        .arg("--net-root")
        .arg(t.join("net"))
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn devinfo_layout_over_a_constructed_sysfs_tree() {
    let t = tree();
    let (rc, out, err) = run(t.path(), &["-v"]);
    assert_eq!(rc, 0, "{err}");
    for want in [
        "hca_id:\tmlx5_0\n\ttransport:\t\t\tInfiniBand (0)\n\tfw_ver:\t\t\t\t22.36.1010\n",
        "\tnode_guid:\t\t\t0c42:a103:0065:2a6c\n",
        "\tboard_id:\t\t\tMT_0000000359\n",
        "\tphys_port_cnt:\t\t\t1\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n",
        "\t\t\tmax_mtu:\t\t4096 (5)\n\t\t\tactive_mtu:\t\t4096 (5)\n",
        "\t\t\tport_lmc:\t\t0x00\n\t\t\tlink_layer:\t\tEthernet\n",
        "\t\t\trate:\t\t\t100 Gb/sec (2X HDR)\n",
        "\t\t\tphys_state:\t\tLINK_UP (5)\n",
        "\t\t\tGID[  0]:\t\tfe80::e42:a1ff:fe65:2a6c, IB/RoCE v1\n",
        "\t\t\tGID[  3]:\t\t::ffff:192.168.1.2, RoCE v2\n",
        "hca_id:\trxe0\n",
        "\t\t\tstate:\t\t\tPORT_DOWN (1)\n",
        "\t\t\tactive_mtu:\t\t1024 (3)\n",
        "\t\t\tphys_state:\t\tDISABLED (3)\n",
        "\t\t\tGID[  0]:\t\tfd77::10, RoCE v2\n",
    ] {
        assert!(out.contains(want), "missing {want:?} in\n{out}");
    }
    assert!(
        !out.contains("GID[  4]"),
        "an empty slot is not listed:\n{out}"
    );
    // Without -v: ibv_devinfo's short form, no GID lines.
    let (_, short, _) = run(t.path(), &[]);
    assert!(
        short.contains("link_layer:\t\tEthernet") && !short.contains("GID["),
        "{short}"
    );
}

#[test]
fn show_gids_layout_and_the_recorded_rxe_table() {
    let t = tree();
    let (rc, out, _) = run(t.path(), &["--gids"]);
    assert_eq!(rc, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV"
    );
    assert!(
        lines.contains(
            &"mlx5_0\t1\t3\t0000:0000:0000:0000:0000:ffff:c0a8:0102\t192.168.1.2    \tv2\tens1f0"
        ),
        "{out}"
    );
    assert!(
        lines.contains(&"mlx5_0\t1\t0\tfe80:0000:0000:0000:0e42:a1ff:fe65:2a6c\t\t\tv1\tens1f0"),
        "{out}"
    );
    assert_eq!(lines.last(), Some(&"n_gids_found=5"));

    // The table recorded in the QEMU guest (transport/testdata/rxe-gids).
    let rec = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../transport/testdata/rxe-gids");
    let o = Command::new(BIN)
        .args(["--provider", "verbs", "--gids", "--sysfs-root"])
        .arg(&rec)
        .arg("--net-root")
        .arg(t.path().join("net"))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(
            "rxe0\t1\t1\t0000:0000:0000:0000:0000:ffff:c0a8:4d0a\t192.168.77.10  \tv2\teth0"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "rxe0\t1\t2\t0000:0000:0000:0000:0000:ffff:c0a8:640a\t192.168.100.10 \tv2\teth0.100"
        ),
        "{out}"
    );
    assert!(out.ends_with("n_gids_found=5\n"), "{out}");
}

#[test]
fn counters_once_json_and_every_second() {
    let t = tree();
    let (_, out, _) = run(t.path(), &["--counters", "-d", "mlx5_0"]);
    // rxe's names first (absent ones as -), then the ECN/CNP names, then the rest.
    let sent = out.find("\tsent_pkts").unwrap();
    let cnp = out.find("\tnp_cnp_sent").unwrap();
    let other = out.find("\tout_of_sequence").unwrap();
    assert!(sent < cnp && cnp < other, "{out}");
    assert!(
        out.contains("np_cnp_sent                                   41"),
        "{out}"
    );
    assert!(
        out.contains("np_ecn_marked_roce_packets                     -"),
        "{out}"
    );
    assert!(!out.contains("lifespan"), "{out}");

    let (rc, json, _) = run(t.path(), &["-o", "json"]);
    assert_eq!(rc, 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let port = &v["devices"][0]["ports"][0];
    assert_eq!(v["devices"][0]["name"], "mlx5_0");
    assert_eq!(port["state"], "PORT_ACTIVE");
    assert_eq!(port["active_mtu"], 4096);
    assert_eq!(port["rate_gbps"], 100.0);
    assert_eq!(port["gids"][3]["gid"], "::ffff:192.168.1.2");
    assert_eq!(port["gids"][3]["gid_type"], "RoCE v2");
    assert_eq!(port["gids"][3]["ipv4"], "192.168.1.2");
    assert_eq!(port["counters"][0]["name"], "np_cnp_sent");

    // -w: a second block with the rate of a counter that moved in between.
    let mut child = Command::new(BIN)
        .args([
            "--provider",
            "verbs",
            "-c",
            "-w",
            "-d",
            "rxe0",
            "--sysfs-root",
        ])
        .arg(t.path().join("infiniband"))
        .arg("--net-root")
        .arg(t.path().join("net"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    write(
        &t.path()
            .join("infiniband/rxe0/ports/1/hw_counters/sent_pkts"),
        "1100",
    );
    let start = Instant::now();
    std::thread::sleep(Duration::from_millis(1500));
    child.kill().unwrap();
    let o = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(out.matches("rxe0/1 (eth1):").count(), 2, "{out}");
    let line = out
        .lines()
        .filter(|l| l.contains("sent_pkts"))
        .nth(1)
        .expect("a second sent_pkts line");
    assert!(line.contains("1100") && line.ends_with("/s"), "{line}");
    let rate: f64 = line
        .split_whitespace()
        .nth(2)
        .unwrap()
        .trim_end_matches("/s")
        .parse()
        .unwrap();
    assert!(
        (500.0..=1000.0).contains(&rate),
        "1000 packets in about a second: {line}"
    );
}

#[test]
fn soft_provider_lists_this_hosts_addresses_as_roce_v2_gids() {
    let o = Command::new(BIN)
        .args(["--provider", "soft", "-o", "json"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let d = &v["devices"][0];
    assert_eq!(
        (d["name"].as_str(), d["provider"].as_str()),
        (Some("soft"), Some("soft"))
    );
    let lo = d["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["netdev"] == "lo")
        .expect("lo is a port");
    assert_eq!(lo["netdev_mtu"], 65536);
    assert_eq!(lo["active_mtu"], 4096);
    let g = lo["gids"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["ipv4"] == "127.0.0.1")
        .expect("127.0.0.1");
    assert_eq!(g["gid"], "::ffff:127.0.0.1");
    assert_eq!(g["gid_raw"], "0000:0000:0000:0000:0000:ffff:7f00:0001");
    assert_eq!(g["gid_type"], "RoCE v2");
    assert!(
        lo["counters"].is_null(),
        "soft counters live in the process that opened it"
    );
    let o = Command::new(BIN).args(["-d", "nosuch0"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no device \"nosuch0\"") && err.contains("soft"),
        "{err}"
    );
}

use super::*;
use nvme::{NVME_NQN_MAX, NVMF_DISCOVERY_NQN};

const EXAMPLE: &str = include_str!("../../examples/target.toml");
const EXAMPLE_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/target.toml");

const MINIMAL: &str = r#"
[[listen]]
addr = "10.0.0.1"
[[subsystems]]
nqn = "nqn.2026-11.io.example:a"
"#;

fn invalid(toml: &str) -> String {
    match TargetConfig::from_toml_str(toml) {
        Err(ConfigError::Invalid { reason, .. }) => reason,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

/// MINIMAL plus extra text in the last subsystem (or top-level keys prepended).
fn with_ns(ns: &str) -> String {
    format!("{MINIMAL}{ns}")
}

#[test]
fn example_file_parses() {
    let a = TargetConfig::from_toml_str(EXAMPLE).unwrap();
    let b = TargetConfig::from_file(Path::new(EXAMPLE_PATH)).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.listen.len(), 1);
    assert_eq!(a.listen[0].socket_addr(), "127.0.0.2:4420".parse().unwrap());
    assert_eq!(a.poll_groups, 1);
    assert_eq!(a.mdts_bytes, 1 << 20);
    assert_eq!(a.inline_data_size, 4096);
    assert_eq!(a.max_queue_size, 128);
    assert!(a.discovery);
    assert_eq!(a.subsystems.len(), 2);
    let s0 = &a.subsystems[0];
    assert_eq!(s0.nqn, "nqn.2026-11.io.nvmf-rdma:target");
    assert!(s0.allow_any_host);
    assert_eq!(s0.serial.as_deref(), Some("NVMFRDMA0001"));
    assert_eq!(s0.namespaces[0].nsid, 1);
    assert_eq!(s0.namespaces[0].size_bytes(), Ok(Some(1 << 30)));
    assert_eq!(s0.namespaces[0].block_size, Some(512));
    assert!(!s0.namespaces[0].direct);
    assert_eq!(s0.namespaces[1].block_size, None);
    assert_eq!(s0.namespaces[1].size_bytes(), Ok(Some(64 << 20)));
    let s1 = &a.subsystems[1];
    assert!(!s1.allow_any_host);
    assert_eq!(s1.hosts.len(), 1);
    assert_eq!(s1.namespaces[0].block_size, Some(4096));
    assert_eq!(s1.namespaces[0].size_bytes(), Ok(Some(256 << 20)));
}

#[test]
fn null_and_ram_namespaces_need_a_size_and_no_path() {
    let ok = with_ns(
        "[[subsystems.namespaces]]\nnsid = 1\nbackend = \"null\"\nsize = \"1G\"\n\
         [[subsystems.namespaces]]\nnsid = 2\nbackend = \"ram\"\nsize = \"64M\"\n",
    );
    let c = TargetConfig::from_toml_str(&ok).unwrap();
    let ns = &c.subsystems[0].namespaces;
    assert_eq!(
        (ns[0].backend, ns[1].backend),
        (NamespaceBackend::Null, NamespaceBackend::Ram)
    );
    assert_eq!(c.shutdown_timeout_ms, 10_000);
    let e = invalid(&with_ns(
        "[[subsystems.namespaces]]\nnsid = 1\nbackend = \"ram\"\n",
    ));
    assert!(e.contains("needs a size"), "{e}");
    let e = invalid(&with_ns(
        "[[subsystems.namespaces]]\nnsid = 1\nbackend = \"null\"\nsize = 4096\npath = \"/x\"\n",
    ));
    assert!(e.contains("has no file"), "{e}");
    let e = invalid(&with_ns("[[subsystems.namespaces]]\nnsid = 1\n"));
    assert!(e.contains("path is empty"), "{e}");
    let e = invalid(&format!("shutdown_timeout_ms = 5\n{MINIMAL}"));
    assert!(e.contains("shutdown_timeout_ms 5"), "{e}");
}

#[test]
fn cpus_and_tos_are_read_and_checked() {
    let c = TargetConfig::from_toml_str(&format!("cpus = [1, 0]\n{MINIMAL}")).unwrap();
    assert_eq!(c.cpus.unwrap().0, [1, 0]);
    let c = TargetConfig::from_toml_str(&format!("cpus = \"0x5\"\n{MINIMAL}")).unwrap();
    assert_eq!(c.cpus.unwrap().0, [0, 2]);
    let e = TargetConfig::from_toml_str(&format!("cpus = [1, 1]\n{MINIMAL}")).unwrap_err();
    assert!(e.to_string().contains("twice"), "{e}");
    let tos = "[[listen]]\naddr = \"10.0.0.1\"\ntrsvcid = 4421\ntos = 0x60\n";
    let c = TargetConfig::from_toml_str(&format!("{MINIMAL}{tos}")).unwrap();
    assert_eq!((c.listen[1].tos, c.listen[0].tos), (Some(0x60), None));
    let e = invalid(&format!("{MINIMAL}{}", tos.replace("0x60", "0x63")));
    assert!(e.contains("ECN bits") && e.contains("0x60"), "{e}");
    let e = invalid(&format!("provider = \"verbs\"\n{MINIMAL}{tos}"));
    assert!(e.contains("cma_roce_tos"), "{e}");
}

#[test]
fn defaults_apply() {
    let c = TargetConfig::from_toml_str(MINIMAL).unwrap();
    assert_eq!(c.listen[0].trsvcid, 4420);
    assert_eq!(c.poll_groups, 1);
    assert_eq!(c.inline_data_size, 4096);
    assert_eq!(c.mdts_bytes, 1 << 20);
    assert_eq!(c.max_queue_size, 128);
    assert_eq!(c.kato_ms, 120_000);
    assert!(c.discovery);
    assert!(c.subsystems[0].allow_any_host);
    assert!(c.subsystems[0].hosts.is_empty());
    assert!(c.subsystems[0].namespaces.is_empty());
    let c = TargetConfig::from_toml_str(&with_ns(
        "[[subsystems.namespaces]]\nnsid = 3\npath = \"x.img\"\nsize = 1048576\n",
    ))
    .unwrap();
    let n = &c.subsystems[0].namespaces[0];
    assert_eq!((n.nsid, n.block_size, n.direct), (3, None, false));
    assert_eq!(n.size.as_deref(), Some("1048576"));
    assert_eq!(n.size_bytes(), Ok(Some(1 << 20)));
    let c = TargetConfig::from_toml_str(&with_ns(
        "[[subsystems.namespaces]]\nnsid = 1\npath = \"/dev/loop7\"\ndirect = true\n",
    ))
    .unwrap();
    let n = &c.subsystems[0].namespaces[0];
    assert!(n.direct);
    assert_eq!(
        n.options(),
        Ok(crate::backend::NamespaceOptions {
            create_size_bytes: None,
            block_size: None,
            direct: true,
            read_only: false,
        })
    );
}

#[test]
fn default_for_is_valid() {
    let c = TargetConfig::default_for(
        "127.0.0.2".parse().unwrap(),
        "nqn.2026-11.io.nvmf-rdma:target",
        Path::new("nvmf-target.img"),
        1 << 30,
    );
    c.validate().unwrap();
    assert_eq!(
        c.subsystems[0].namespaces[0].size_bytes(),
        Ok(Some(1 << 30))
    );
    assert_eq!(c.listen[0].trsvcid, 4420);
    // It survives a TOML round trip.
    let text = ::toml::to_string(&c).unwrap();
    assert_eq!(TargetConfig::from_toml_str(&text).unwrap(), c);
}

#[test]
fn parse_size_units() {
    for (s, v) in [
        ("0", 0u64),
        ("4096", 4096),
        ("4096B", 4096),
        ("1K", 1024),
        ("1k", 1024),
        ("4KiB", 4096),
        ("512M", 512 << 20),
        ("512MB", 512 << 20),
        ("1G", 1 << 30),
        ("1 GiB", 1 << 30),
        (" 2gb ", 2 << 30),
        ("3T", 3 << 40),
        ("16777215T", 16_777_215u64 << 40),
        ("1.5G", 3 << 29),
        ("2P", 2 << 50),
    ] {
        assert_eq!(parse_size(s), Ok(v), "{s}");
    }
    for s in [
        "",
        "G",
        "-1",
        "1X",
        "1GiBs",
        "1 G B",
        "16777216T",
        "99999999999999999999",
    ] {
        let e = parse_size(s).unwrap_err();
        assert_eq!(e.input, s);
        assert!(e.to_string().contains("invalid size"), "{e}");
    }
}

#[test]
fn nqn_rules() {
    let ok = format!("nqn.{}", "a".repeat(NVME_NQN_MAX - 4));
    assert_eq!(ok.len(), 223);
    assert!(is_valid_nqn(&ok));
    let long = format!("{ok}b");
    let r = invalid(&format!(
        "[[listen]]\naddr = \"::1\"\n[[subsystems]]\nnqn = \"{long}\"\n"
    ));
    assert!(r.contains("224 bytes"), "{r}");
    let r =
        invalid("[[listen]]\naddr = \"::1\"\n[[subsystems]]\nnqn = \"iqn.2001-04.com.example\"\n");
    assert!(r.contains("does not start with \"nqn.\""), "{r}");
    let r = invalid(&format!(
        "[[listen]]\naddr = \"::1\"\n[[subsystems]]\nnqn = \"{NVMF_DISCOVERY_NQN}\"\n"
    ));
    assert!(r.contains("discovery"), "{r}");
    let r = invalid(&format!(
        "{MINIMAL}[[subsystems]]\nnqn = \"nqn.2026-11.io.example:a\"\n"
    ));
    assert!(r.contains("used twice"), "{r}");
    let r = invalid(&format!(
        "{MINIMAL}[[subsystems]]\nnqn = \"nqn.x:b\"\nallow_any_host = false\n"
    ));
    assert!(r.contains("nobody could connect"), "{r}");
    let r = invalid(&format!(
        "{MINIMAL}[[subsystems]]\nnqn = \"nqn.x:b\"\nallow_any_host = false\nhosts = [\"host1\"]\n"
    ));
    assert!(r.contains("hosts[0]"), "{r}");
}

#[test]
fn structural_errors() {
    assert!(invalid("[[listen]]\naddr = \"10.0.0.1\"\n").contains("at least one [[subsystems]]"));
    assert!(invalid("[[subsystems]]\nnqn = \"nqn.x:a\"\n").contains("[[listen]]"));
    assert!(invalid(&format!("poll_groups = 0\n{MINIMAL}")).contains("poll_groups"));
    assert!(invalid(&format!("mdts_bytes = 3000\n{MINIMAL}")).contains("mdts_bytes"));
    assert!(invalid(&format!("mdts_bytes = \"16M\"\n{MINIMAL}")).contains("mdts_bytes"));
    assert!(invalid(&format!("inline_data_size = 100\n{MINIMAL}")).contains("inline_data_size"));
    assert!(invalid(&format!("max_queue_size = 1\n{MINIMAL}")).contains("max_queue_size"));
    assert!(invalid(&with_ns("serial = \"ABCDEFGHIJKLMNOPQRSTU\"\n")).contains("serial"));
    let c = TargetConfig::from_toml_str(&format!("mdts_bytes = \"256KiB\"\n{MINIMAL}")).unwrap();
    assert_eq!(c.mdts_bytes, 256 << 10);
    // MDTS 0 means "no limit": 4 KiB cannot be advertised, 8 KiB (MDTS 1) can.
    assert!(invalid(&format!("mdts_bytes = 4096\n{MINIMAL}")).contains("8K"));
    let c = TargetConfig::from_toml_str(&format!("mdts_bytes = \"8K\"\n{MINIMAL}")).unwrap();
    assert_eq!(c.mdts_bytes, 8 << 10);
    let c = TargetConfig::from_toml_str(&format!("mdts_bytes = \"8M\"\n{MINIMAL}")).unwrap();
    assert_eq!(c.mdts_bytes, MAX_MDTS_BYTES);
}

#[test]
fn several_listen_addresses() {
    let c = TargetConfig::from_toml_str(&format!(
        "{MINIMAL}[[listen]]\naddr = \"10.0.0.1\"\ntrsvcid = 4421\n[[listen]]\naddr = \"::1\"\n"
    ))
    .unwrap();
    let got: Vec<String> = c.listen.iter().map(|l| l.to_string()).collect();
    assert_eq!(got, ["10.0.0.1:4420", "10.0.0.1:4421", "[::1]:4420"]);
    let r = invalid(&format!(
        "{MINIMAL}[[listen]]\naddr = \"10.0.0.2\"\n[[listen]]\naddr = \"10.0.0.1\"\ntrsvcid = 4420\n"
    ));
    assert!(
        r.contains("listen[2]") && r.contains("listen[0]") && r.contains("10.0.0.1:4420"),
        "{r}"
    );
}

#[test]
fn command_line_origin_keeps_the_reason() {
    let mut c = TargetConfig::default_for(
        "127.0.0.2".parse().unwrap(),
        "nqn.2026-11.io.nvmf-rdma:target",
        Path::new("nvmf-target.img"),
        1 << 30,
    );
    c.poll_groups = 0;
    let from_file = invalid(&format!("poll_groups = 0\n{MINIMAL}"));
    let e = c.validate_as("command line").unwrap_err();
    assert_eq!(e.to_string(), format!("command line: {from_file}"));
}

#[test]
fn unknown_keys_are_refused_by_name_at_every_level() {
    for (text, key) in [
        (format!("kato = 5\n{MINIMAL}"), "kato"),
        (
            "[[listen]]\naddr = \"10.0.0.1\"\nport = 4420\n[[subsystems]]\nnqn = \"nqn.x:a\"\n"
                .to_string(),
            "port",
        ),
        (format!("{MINIMAL}allowed_hosts = []\n"), "allowed_hosts"),
        (
            format!(
                "{MINIMAL}[[subsystems.namespaces]]\nnsid = 1\npath = \"a\"\nreadonly = true\n"
            ),
            "readonly",
        ),
    ] {
        let e = TargetConfig::from_toml_str(&text).unwrap_err();
        assert!(matches!(e, ConfigError::Parse { .. }), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("unknown field `{key}`")),
            "{key}: {msg}"
        );
    }
}

#[test]
fn data_slab_is_sized_or_automatic() {
    assert_eq!(
        TargetConfig::from_toml_str(MINIMAL).unwrap().data_slab,
        None
    );
    let c = TargetConfig::from_toml_str(&format!("data_slab = \"4M\"\n{MINIMAL}")).unwrap();
    assert_eq!(c.data_slab, Some(4 << 20));
    let c = TargetConfig::from_toml_str(&format!("data_slab = 2097152\n{MINIMAL}")).unwrap();
    assert_eq!(c.data_slab, Some(2 << 20));
    // Smaller than MDTS: refused, naming both and the fix.
    let r = invalid(&format!("data_slab = \"512K\"\n{MINIMAL}"));
    assert!(
        r.contains("data_slab 524288") && r.contains("mdts_bytes 1048576"),
        "{r}"
    );
    assert!(r.contains("lower mdts_bytes"), "{r}");
    let c = TargetConfig::from_toml_str(&format!(
        "data_slab = \"512K\"\nmdts_bytes = \"256K\"\n{MINIMAL}"
    ))
    .unwrap();
    assert_eq!(c.data_slab, Some(512 << 10));
    assert!(invalid(&format!("data_slab = \"2G\"\n{MINIMAL}")).contains("1 GiB"));
    assert!(matches!(
        TargetConfig::from_toml_str(&format!("data_slab = \"lots\"\n{MINIMAL}")),
        Err(ConfigError::Parse { .. })
    ));
}

#[test]
fn namespace_errors() {
    let ns = |body: &str| with_ns(&format!("[[subsystems.namespaces]]\n{body}\n"));
    let r = invalid(&ns("nsid = 0\npath = \"a\""));
    assert!(r.contains("namespaces[0]") && r.contains("reserved"), "{r}");
    let r = invalid(&ns("nsid = 4294967295\npath = \"a\""));
    assert!(r.contains("reserved"), "{r}");
    let r = invalid(&format!(
        "{}[[subsystems.namespaces]]\nnsid = 1\npath = \"b\"\n",
        ns("nsid = 1\npath = \"a\"")
    ));
    assert!(
        r.contains("namespaces[1]") && r.contains("nsid 1 is used twice"),
        "{r}"
    );
    let r = invalid(&format!(
        "{}[[subsystems.namespaces]]\nnsid = 2\npath = \"a\"\n",
        ns("nsid = 1\npath = \"a\"")
    ));
    assert!(r.contains("backs two namespaces"), "{r}");
    let r = invalid(&ns("nsid = 1\npath = \"a\"\nblock_size = 1000"));
    assert!(r.contains("block_size 1000"), "{r}");
    let r = invalid(&ns("nsid = 1\npath = \"a\"\nsize = \"1.5 parsecs\""));
    assert!(r.contains("invalid size"), "{r}");
    let r = invalid(&ns("nsid = 1\npath = \"a\"\nsize = 1000"));
    assert!(r.contains("multiple of block_size 512"), "{r}");
    let r = invalid(&ns("nsid = 1\npath = \"a\"\nsize = \"1M\"\nblock_size = 4096\n[[subsystems.namespaces]]\nnsid = 2\npath = \"b\"\nsize = \"6K\"\nblock_size = 4096"));
    assert!(r.contains("namespaces[1]") && r.contains("6K"), "{r}");
    // Same NSID in two subsystems is fine.
    TargetConfig::from_toml_str(&format!(
        "{}[[subsystems]]\nnqn = \"nqn.x:b\"\n[[subsystems.namespaces]]\nnsid = 1\npath = \"b\"\n",
        ns("nsid = 1\npath = \"a\"")
    ))
    .unwrap();
}

#[test]
fn parse_errors_name_the_line() {
    let e = TargetConfig::from_toml_str(&format!("{MINIMAL}typo_field = 1\n")).unwrap_err();
    assert!(matches!(e, ConfigError::Parse { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.starts_with("configuration:"), "{msg}");
    assert!(msg.contains("typo_field"), "{msg}");
    let e = TargetConfig::from_toml_str("[[listen]]\naddr = \"10.0.0.256\"\n").unwrap_err();
    assert!(matches!(e, ConfigError::Parse { .. }), "{e}");
    assert!(e.to_string().contains("line 2"), "{e}");
    let e = TargetConfig::from_toml_str("[[listen]\n").unwrap_err();
    assert!(matches!(e, ConfigError::Parse { .. }), "{e}");
}

#[test]
fn file_errors_name_the_file() {
    let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    let missing = dir.path().join("absent.toml");
    let e = TargetConfig::from_file(&missing).unwrap_err();
    assert!(matches!(e, ConfigError::Read { .. }));
    assert!(
        e.to_string().contains(&missing.display().to_string()),
        "{e}"
    );
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[[listen]]\naddr = \"10.0.0.1\"\n").unwrap();
    let e = TargetConfig::from_file(&bad).unwrap_err();
    assert!(matches!(e, ConfigError::Invalid { .. }));
    assert!(e.to_string().starts_with(&bad.display().to_string()), "{e}");
    std::fs::write(&bad, "listen = 3\n").unwrap();
    let e = TargetConfig::from_file(&bad).unwrap_err();
    assert!(matches!(e, ConfigError::Parse { .. }));
    assert!(e.to_string().starts_with(&bad.display().to_string()), "{e}");
}

/// Two ports, the second linking only `b`, with a referral; the namespace keys.
const LINKED: &str = r#"
[[listen]]
addr = "10.0.0.1"
portid = 7
subsystems = ["nqn.x:a", "nqn.x:b"]
[[listen.referrals]]
addr = "10.0.0.9"
portid = 3
[[listen]]
addr = "10.0.0.1"
trsvcid = 4421
subsystems = ["nqn.x:b"]
[[hosts]]
nqn = "nqn.x:host"
[[subsystems]]
nqn = "nqn.x:a"
model = "Linux"
firmware = "6.12.0"
ieee_oui = 0x123456
version = "1.4"
cntlid_min = 10
cntlid_max = 20
qid_max = 4
[[subsystems.namespaces]]
nsid = 1
path = "a.img"
nguid = "ef90689c-6c46-d44c-89c1-4067801309a8"
uuid = "6f2c8ab1-1f0e-4c47-9d43-0c1a5e0b7a11"
eui64 = "002538b1c1004a1e"
[[subsystems.namespaces]]
nsid = 2
path = "b.img"
enable = false
[[subsystems]]
nqn = "nqn.x:b"
allow_any_host = false
hosts = ["nqn.x:host"]
"#;

#[test]
fn port_links_referrals_and_identity_keys_are_read() {
    let c = TargetConfig::from_toml_str(LINKED).unwrap();
    let (p0, p1) = (&c.listen[0], &c.listen[1]);
    assert_eq!((p0.portid, p1.portid), (Some(7), None));
    assert_eq!(p1.subsystems.as_deref(), Some(&["nqn.x:b".to_string()][..]));
    assert_eq!(
        p0.referrals,
        [ReferralConfig {
            addr: "10.0.0.9".parse().unwrap(),
            trsvcid: 4420,
            portid: 3,
            enable: true
        }]
    );
    assert_eq!(c.hosts[0].nqn, "nqn.x:host");
    let a = &c.subsystems[0];
    assert_eq!(a.model.as_deref(), Some("Linux"));
    assert_eq!(a.firmware.as_deref(), Some("6.12.0"));
    assert_eq!(a.ieee_oui, 0x123456);
    assert_eq!(a.version_vs().unwrap(), nvme::properties::Vs::V1_4);
    assert_eq!((a.cntlid_min, a.cntlid_max, a.qid_max), (10, 20, Some(4)));
    let n = &a.namespaces[0];
    assert_eq!(n.nguid.unwrap().0[..2], [0xef, 0x90]);
    assert_eq!(
        n.uuid.unwrap().to_string(),
        "6f2c8ab1-1f0e-4c47-9d43-0c1a5e0b7a11"
    );
    assert_eq!(n.eui64.unwrap().to_string(), "002538b1c1004a1e");
    assert!(n.enable && !a.namespaces[1].enable);
    // Without links (today's files): every subsystem on every port.
    let c = TargetConfig::from_toml_str(MINIMAL).unwrap();
    assert_eq!(c.listen[0].subsystems, None);
    // It survives a TOML round trip.
    let c = TargetConfig::from_toml_str(LINKED).unwrap();
    let text = ::toml::to_string(&c).unwrap();
    assert_eq!(TargetConfig::from_toml_str(&text).unwrap(), c);
}

#[test]
fn link_and_identity_errors_name_the_item() {
    let cases = [
        (
            "subsystems = [\"nqn.x:b\"]\n",
            "",
            "listen[1] (10.0.0.1:4421) names no subsystems while listen[0] does",
        ),
        (
            "subsystems = [\"nqn.x:b\"]\n",
            "subsystems = [\"nqn.x:c\"]\n",
            "listen[1] (10.0.0.1:4421): subsystems[0] \"nqn.x:c\" is not a configured subsystem",
        ),
        (
            "subsystems = [\"nqn.x:b\"]\n",
            "subsystems = []\n",
            "listen[1] (10.0.0.1:4421): subsystems is empty",
        ),
        (
            "subsystems = [\"nqn.x:b\"]\n",
            "subsystems = [\"nqn.x:b\", \"nqn.x:b\"]\n",
            "subsystems[1] \"nqn.x:b\" is linked twice",
        ),
        (
            "trsvcid = 4421\n",
            "trsvcid = 4421\nportid = 7\n",
            "listen[1] (10.0.0.1:4421): portid 7 is used",
        ),
        (
            "model = \"Linux\"",
            "model = \"\"",
            "subsystems[0] (nqn.x:a): model \"\" must be 1 to 40",
        ),
        (
            "firmware = \"6.12.0\"",
            "firmware = \"6.12.0-rc1\"",
            "firmware \"6.12.0-rc1\" must be 1 to 8",
        ),
        (
            "ieee_oui = 0x123456",
            "ieee_oui = 0x1234567",
            "ieee_oui 0x1234567",
        ),
        (
            "version = \"1.4\"",
            "version = \"1.x\"",
            "version \"1.x\" must be",
        ),
        (
            "cntlid_min = 10",
            "cntlid_min = 30",
            "cntlid_min 30 / cntlid_max 20",
        ),
        (
            "qid_max = 4",
            "qid_max = 0",
            "qid_max 0 must be from 1 to 128",
        ),
        (
            "allow_any_host = false\n",
            "",
            "allow_any_host = true with hosts",
        ),
        (
            "[[hosts]]\nnqn = \"nqn.x:host\"\n",
            "[[hosts]]\nnqn = \"host\"\n",
            "hosts[0]: NQN \"host\"",
        ),
        (
            "portid = 3\n",
            "portid = 3\ntrsvcid = 0\n",
            "referrals[0] (10.0.0.9): trsvcid 0",
        ),
    ];
    for (from, to, want) in cases {
        assert!(LINKED.contains(from), "{from}");
        let r = invalid(&LINKED.replacen(from, to, 1));
        assert!(r.contains(want), "{want}\n  got: {r}");
    }
    for (from, to, key) in [
        ("nsid = 1\n", "nsid = 1\nnguid = \"12\"\n", "invalid NGUID"),
        (
            "uuid = \"6f2c8ab1-1f0e-4c47-9d43-0c1a5e0b7a11\"",
            "uuid = \"6f2c8ab1\"",
            "uuid = \"6f2c8ab1\"",
        ),
        (
            "eui64 = \"002538b1c1004a1e\"",
            "eui64 = \"0025\"",
            "invalid EUI-64",
        ),
    ] {
        let text = LINKED
            .replacen(from, to, 1)
            .replace("nguid = \"ef90689c-6c46-d44c-89c1-4067801309a8\"\n", "");
        let e = TargetConfig::from_toml_str(&text).unwrap_err();
        assert!(matches!(e, ConfigError::Parse { .. }), "{e}");
        assert!(e.to_string().contains(key), "{key}: {e}");
    }
}

#[test]
fn roce_mtu_must_be_a_roce_mtu_and_is_the_soft_providers() {
    let c = TargetConfig::from_toml_str(&format!("roce_mtu = 1024\n{MINIMAL}")).unwrap();
    assert_eq!(c.roce_mtu, Some(1024));
    let r = invalid(&format!("roce_mtu = 1500\n{MINIMAL}"));
    assert!(
        r.contains("roce_mtu 1500 must be 256, 512, 1024, 2048 or 4096"),
        "{r}"
    );
    let r = invalid(&format!("provider = \"verbs\"\nroce_mtu = 1024\n{MINIMAL}"));
    assert!(
        r.contains("port's active MTU") && r.contains("drop roce_mtu"),
        "{r}"
    );
}

#[test]
fn host_keys_parse_and_bad_ones_are_named() {
    const KEY: &str = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
    let good = format!(
        "{MINIMAL}allow_any_host = false\nhosts = [\"nqn.h:1\"]\n\
         [[subsystems.host_keys]]\nhostnqn = \"nqn.h:1\"\ndhchap_key = \"{KEY}\"\n\
         dhchap_ctrl_key = \"{KEY}\"\ndhchap_hash = [\"sha384\", \"hmac(sha256)\"]\n\
         dhchap_dhgroup = [\"ffdhe2048\", \"null\"]\n"
    );
    let c = TargetConfig::from_toml_str(&good).unwrap();
    let p = c.subsystems[0].host_keys[0].policy().unwrap();
    assert_eq!(p.hashes, [dhchap::HashId::Sha384, dhchap::HashId::Sha256]);
    assert_eq!(
        p.dhgroups,
        [dhchap::DhGroupId::Ffdhe2048, dhchap::DhGroupId::Null]
    );
    assert!(p.ctrl_key.is_some());
    let entry =
        |extra: &str| format!("{MINIMAL}[[subsystems.host_keys]]\nhostnqn = \"nqn.h:1\"\n{extra}");
    let r = invalid(&entry("dhchap_key = \"DHHC-1:00:AAECAwQF:\"\n"));
    assert!(
        r.contains("host_keys[0]") && r.contains("32, 48 or 64"),
        "{r}"
    );
    let r = invalid(&entry(&format!(
        "dhchap_key = \"{KEY}\"\ndhchap_hash = [\"md5\"]\n"
    )));
    assert!(r.contains("dhchap_hash") && r.contains("md5"), "{r}");
    let r = invalid(&entry(&format!(
        "dhchap_key = \"{KEY}\"\ndhchap_dhgroup = [\"modp\"]\n"
    )));
    assert!(r.contains("dhchap_dhgroup"), "{r}");
    let r = invalid(&format!(
        "{MINIMAL}allow_any_host = false\nhosts = [\"nqn.h:2\"]\n\
         [[subsystems.host_keys]]\nhostnqn = \"nqn.h:1\"\ndhchap_key = \"{KEY}\"\n"
    ));
    assert!(r.contains("not in `hosts`"), "{r}");
}

#[test]
fn ana_groups_and_namespace_groups_are_read_and_checked() {
    let two_ports = r#"
[[listen]]
addr = "10.0.0.1"
ana_groups = [{ grpid = 1, state = "optimized" }, { grpid = 2, state = "non-optimized" }]
[[listen]]
addr = "10.0.0.1"
trsvcid = 4421
ana_groups = [{ grpid = 1, state = "inaccessible" }, { grpid = 2, state = "persistent-loss" }]
[[subsystems]]
nqn = "nqn.2026-11.io.example:a"
[[subsystems.namespaces]]
nsid = 1
path = "/tmp/a.img"
[[subsystems.namespaces]]
nsid = 2
path = "/tmp/b.img"
ana_grpid = 2
"#;
    let c = TargetConfig::from_toml_str(two_ports).unwrap();
    let states = |i: usize| {
        c.listen[i]
            .ana_groups
            .iter()
            .map(|g| (g.grpid, nvme::ana::AnaState::from(g.state)))
            .collect::<Vec<_>>()
    };
    use nvme::ana::AnaState::*;
    assert_eq!(states(0), [(1, Optimized), (2, NonOptimized)]);
    assert_eq!(states(1), [(1, Inaccessible), (2, PersistentLoss)]);
    let ns = &c.subsystems[0].namespaces;
    assert_eq!(
        (ns[0].ana_grpid, ns[1].ana_grpid),
        (1, 2),
        "default group 1"
    );
    for (from, to, want) in [
        (
            "grpid = 2, state = \"non",
            "grpid = 0, state = \"non",
            "ana_groups[1]: grpid 0 is outside 1..=128",
        ),
        (
            "grpid = 2, state = \"non",
            "grpid = 129, state = \"non",
            "grpid 129 is outside",
        ),
        (
            "grpid = 2, state = \"non",
            "grpid = 1, state = \"non",
            "grpid 1 is listed twice",
        ),
        (
            "ana_grpid = 2",
            "ana_grpid = 0",
            "namespaces[1]: ana_grpid 0 is outside 1..=128",
        ),
    ] {
        let r = invalid(&two_ports.replacen(from, to, 1));
        assert!(r.contains(want), "{want}\n  got: {r}");
    }
    let r =
        TargetConfig::from_toml_str(&two_ports.replacen("\"persistent-loss\"", "\"standby\"", 1))
            .unwrap_err()
            .to_string();
    assert!(r.contains("standby") && r.contains("non-optimized"), "{r}");
}

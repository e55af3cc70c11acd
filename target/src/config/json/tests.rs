//! The nvmetcli JSON reader on the shape `nvmetcli save` writes
//! (target/examples/nvmetcli.json, written as nvmetcli dumps a Linux 6.12 nvmet
//! configfs tree: sorted keys, configfs attribute values as strings).
use super::*;
use std::path::Path;

const EXAMPLE: &str = include_str!("../../../examples/nvmetcli.json");
const EXAMPLE_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/nvmetcli.json");
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:7f5c3a52-9d1e-4c1b-8a57-1b2c3d4e5f60";

/// The example with `from` replaced by `to` (which must occur).
fn edited(from: &str, to: &str) -> String {
    assert!(EXAMPLE.contains(from), "{from}");
    EXAMPLE.replacen(from, to, 1)
}

/// The refusal of `text`, checked to be a named one (not a parse error).
fn refused(text: &str) -> String {
    match TargetConfig::from_nvmetcli_json_str(text) {
        Err(ConfigError::Invalid { reason, .. }) => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn the_example_reads_into_the_model() {
    let c = TargetConfig::from_nvmetcli_json_str(EXAMPLE).unwrap();
    assert_eq!(c, TargetConfig::from_file(Path::new(EXAMPLE_PATH)).unwrap());
    assert_eq!(c.hosts, [HostConfig { nqn: HOST.into() }]);
    assert_eq!(c.listen.len(), 2);
    let (p0, p1) = (&c.listen[0], &c.listen[1]);
    assert_eq!(p0.socket_addr(), "127.0.0.2:4420".parse().unwrap());
    assert_eq!((p0.portid, p1.portid), (Some(1), Some(2)));
    assert_eq!(
        p0.subsystems.as_deref(),
        Some(&["nqn.2026-11.io.nvmf-rdma:target".to_string()][..])
    );
    assert_eq!(p1.subsystems.as_ref().map(Vec::len), Some(2));
    assert_eq!(
        p0.referrals,
        [ReferralConfig {
            addr: "127.0.0.3".parse().unwrap(),
            trsvcid: 4420,
            portid: 2,
            enable: true,
        }]
    );
    // "-1": the target's defaults.
    assert_eq!((c.inline_data_size, c.max_queue_size), (4096, 128));
    let s0 = &c.subsystems[0];
    assert!(s0.allow_any_host && s0.hosts.is_empty());
    assert_eq!(s0.serial.as_deref(), Some("8a1e3f0c5d2b4e71"));
    assert_eq!(s0.model.as_deref(), Some("Linux"));
    assert_eq!(s0.firmware.as_deref(), Some("6.12.0"));
    assert_eq!(s0.version_vs().unwrap(), nvme::properties::Vs::V1_3);
    assert_eq!(
        (s0.cntlid_min, s0.cntlid_max, s0.qid_max),
        (1, 0xFFEF, Some(128))
    );
    let n = &s0.namespaces[0];
    assert_eq!((n.nsid, n.enable), (1, true));
    assert_eq!(n.path, Path::new("/var/tmp/nvmf-target-ns1.img"));
    assert_eq!(
        n.nguid.unwrap().to_string(),
        "ef90689c-6c46-d44c-89c1-4067801309a8"
    );
    assert_eq!(
        n.uuid.unwrap().to_string(),
        "6f2c8ab1-1f0e-4c47-9d43-0c1a5e0b7a11"
    );
    assert_eq!(
        (n.size.as_deref(), n.read_only, n.eui64),
        (None, false, None)
    );
    let s1 = &c.subsystems[1];
    assert!(!s1.allow_any_host);
    assert_eq!(s1.hosts, [HOST]);
    // nvmet's unset NGUID: zeros, reported as none.
    assert_eq!(s1.namespaces[0].nguid, Some(Nguid([0; 16])));
}

#[test]
fn unsupported_values_are_named_with_their_path() {
    for (from, to, want) in [
        (
            r#""trtype": "rdma""#,
            r#""trtype": "tcp""#,
            r#"ports[0].addr.trtype = "tcp": only rdma is served"#,
        ),
        (
            r#""adrfam": "ipv4""#,
            r#""adrfam": "ipv6""#,
            r#"ports[0].addr.adrfam = "ipv6": traddr 127.0.0.2 is ipv4"#,
        ),
        (
            r#""traddr": "127.0.0.2""#,
            r#""traddr": "mlx5_0""#,
            r#"ports[0].addr.traddr = "mlx5_0": not an IPv4 or IPv6 address"#,
        ),
        (
            r#""treq": "not specified""#,
            r#""treq": "required""#,
            r#"ports[0].addr.treq = "required": this target has no secure channel"#,
        ),
        (
            r#""tsas": "connected""#,
            r#""tsas": "datagram""#,
            r#"ports[0].addr.tsas = "datagram""#,
        ),
        (
            r#""pi_enable": "0""#,
            r#""pi_enable": "1""#,
            r#"ports[0].param.pi_enable = "1": protection information"#,
        ),
        (
            r#""state": "optimized""#,
            r#""state": "standby""#,
            r#"ports[0].ana_groups[0].ana.state = "standby": not an ANA state"#,
        ),
        (
            r#""ana_grpid": 1"#,
            r#""ana_grpid": 200"#,
            "subsystems[0] (nqn.2026-11.io.nvmf-rdma:target): namespaces[0]: ana_grpid 200 is outside 1..=128",
        ),
        (
            r#""key": """#,
            r#""key": "DHHC-1:00:AAECAwQF:""#,
            "hosts[0].dhchap.key: dhchap_key:",
        ),
        (
            r#""resv": {}"#,
            r#""resv": {"enable": "1"}"#,
            r#"subsystems[0].namespaces[0].resv.enable = "1": reservations are not served"#,
        ),
        (
            r#""allowed_hosts": [],"#,
            r#""allowed_hosts": [], "passthru": [{}],"#,
            "subsystems[0].passthru = [{}]: passthru subsystems",
        ),
        (
            r#""nguid": "ef90689c-6c46-d44c-89c1-4067801309a8""#,
            r#""nguid": "ef90689c""#,
            r#"subsystems[0].namespaces[0].device.nguid = "ef90689c": invalid NGUID"#,
        ),
        (
            r#""uuid": "6f2c8ab1-1f0e-4c47-9d43-0c1a5e0b7a11""#,
            r#""uuid": "6f2c8ab1""#,
            r#"subsystems[0].namespaces[0].device.uuid = "6f2c8ab1": not a UUID"#,
        ),
    ] {
        let r = refused(&edited(from, to));
        assert!(r.starts_with(want), "{want}\n  got: {r}");
    }
}

#[test]
fn unknown_keys_are_named_with_their_path() {
    for (from, to, want) in [
        (
            r#""hosts": ["#,
            r#""discovery": 1, "hosts": ["#,
            "discovery: not a key",
        ),
        (
            r#""portid": 1,"#,
            r#""portid": 1, "tos": 96,"#,
            "ports[0].tos: not a key",
        ),
        (
            r#""tsas": "connected""#,
            r#""tsas": "connected", "trsvcid2": "1""#,
            "ports[0].addr.trsvcid2: not a key",
        ),
        (
            r#""version": "1.3""#,
            r#""version": "1.3", "discovery_nqn": "x""#,
            "subsystems[0].attr.discovery_nqn: not a key",
        ),
        (
            r#""nsid": 1,"#,
            r#""nsid": 1, "buffered_io": "1","#,
            "subsystems[0].namespaces[0].buffered_io: not a key",
        ),
        (
            r#""path": "/var/tmp/nvmf-target-ns1.img","#,
            r#""path": "/var/tmp/nvmf-target-ns1.img", "p2pmem": "0","#,
            "subsystems[0].namespaces[0].device.p2pmem: not a key",
        ),
    ] {
        let r = refused(&edited(from, to));
        assert!(r.starts_with(want), "{want}\n  got: {r}");
    }
}

#[test]
fn links_and_host_entries_are_checked() {
    let r = refused(&edited(
        r#""subsystems": [
        "nqn.2026-11.io.nvmf-rdma:target"
      ]"#,
        r#""subsystems": ["nqn.2026-11.io.nvmf-rdma:nosuch"]"#,
    ));
    assert!(
        r.starts_with("ports[0] (127.0.0.2:4420): subsystems[0] \"nqn.2026-11.io.nvmf-rdma:nosuch\" is not a configured subsystem"),
        "{r}"
    );
    let r = refused(&edited(
        r#""subsystems": [
        "nqn.2026-11.io.nvmf-rdma:target"
      ]"#,
        r#""subsystems": []"#,
    ));
    assert!(
        r.contains("ports[0]") && r.contains("nothing would be served"),
        "{r}"
    );
    let r = refused(&edited(
        &format!("\"allowed_hosts\": [\n        \"{HOST}\""),
        "\"allowed_hosts\": [\n        \"nqn.2014-08.org.nvmexpress:uuid:other\"",
    ));
    assert!(
        r.starts_with("subsystems[1].allowed_hosts[0] = \"nqn.2014-08.org.nvmexpress:uuid:other\": not in hosts"),
        "{r}"
    );
    // The validator's rules, with the file's names.
    let r = refused(&edited(r#""portid": 2,"#, r#""portid": 1,"#));
    assert!(r.starts_with("ports[1] (127.0.0.2:4421): portid 1"), "{r}");
    let r = refused(&edited(r#""cntlid_min": "1""#, r#""cntlid_min": "70000""#));
    assert!(
        r.starts_with("subsystems[0].attr.cntlid_min = \"70000\""),
        "{r}"
    );
    let r = refused(&edited(
        r#""cntlid_max": "65519""#,
        r#""cntlid_max": "65535""#,
    ));
    assert!(
        r.contains("subsystems[0]") && r.contains("cntlid_max 65535"),
        "{r}"
    );
    let r = refused(&edited(r#""version": "1.3""#, r#""version": "3.0""#));
    assert!(r.contains("version \"3.0\""), "{r}");
}

#[test]
fn per_port_parameters_map_to_the_targets_one_value() {
    let c = TargetConfig::from_nvmetcli_json_str(
        &edited(
            r#""inline_data_size": "-1""#,
            r#""inline_data_size": "8192""#,
        )
        .replacen(r#""max_queue_size": "-1""#, r#""max_queue_size": "64""#, 1),
    )
    .unwrap();
    assert_eq!((c.inline_data_size, c.max_queue_size), (8192, 64));
    // Two ports that disagree: refused, naming both.
    let two = edited(
        r#""inline_data_size": "-1""#,
        r#""inline_data_size": "8192""#,
    )
    .replacen(
        r#""inline_data_size": "-1""#,
        r#""inline_data_size": "16384""#,
        1,
    );
    let r = refused(&two);
    assert!(
        r.starts_with("ports[1].param.inline_data_size = \"16384\": differs from ports[0].param.inline_data_size"),
        "{r}"
    );
}

#[test]
fn namespace_enable_and_ids() {
    let c = TargetConfig::from_nvmetcli_json_str(&edited(
        r#""enable": 1,
          "nsid": 1,"#,
        r#""enable": 0,
          "nsid": 1,"#,
    ))
    .unwrap();
    assert!(!c.subsystems[0].namespaces[0].enable);
    // device.eui64: this target's addition, any of the hexadecimal forms.
    let c = TargetConfig::from_nvmetcli_json_str(&edited(
        r#""path": "/var/tmp/nvmf-target-ns1.img","#,
        r#""eui64": "00:25:38:b1:c1:00:4a:1e", "path": "/var/tmp/nvmf-target-ns1.img","#,
    ))
    .unwrap();
    assert_eq!(
        c.subsystems[0].namespaces[0].eui64,
        Some(Eui64([0x00, 0x25, 0x38, 0xb1, 0xc1, 0x00, 0x4a, 0x1e]))
    );
}

#[test]
fn not_json_is_a_parse_error_naming_the_line() {
    let e = TargetConfig::from_nvmetcli_json_str("{\n  \"hosts\": [\n").unwrap_err();
    assert!(matches!(e, ConfigError::Json { .. }), "{e}");
    assert!(e.to_string().contains("line 3"), "{e}");
    let e = TargetConfig::from_nvmetcli_json_str("[]").unwrap_err();
    assert!(e.to_string().contains("expected an object"), "{e}");
    let r = refused(r#"{"hosts": [], "ports": [], "subsystems": []}"#);
    assert!(r.starts_with("ports: none"), "{r}");
}

/// A host's `dhchap` secrets (nvmet's host attributes) make it authenticate to the
/// subsystems that allow it, with the one hash and group configfs holds; a controller
/// key without the host's own is refused.
#[test]
fn host_dhchap_secrets_become_the_allowing_subsystems_host_keys() {
    const KEY: &str = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
    let text = edited(r#""key": """#, &format!(r#""key": "{KEY}""#));
    let c = TargetConfig::from_nvmetcli_json_str(&text).unwrap();
    let keyed: Vec<_> = c
        .subsystems
        .iter()
        .filter(|s| !s.host_keys.is_empty())
        .collect();
    assert_eq!(keyed.len(), 1, "only the subsystem that lists the host");
    let k = &keyed[0].host_keys[0];
    assert_eq!(k.hostnqn, HOST);
    assert_eq!(k.dhchap_key, KEY);
    assert_eq!(k.dhchap_ctrl_key, None);
    let p = k.policy().unwrap();
    assert_eq!(p.hashes, [dhchap::HashId::Sha256]);
    assert_eq!(p.dhgroups, [dhchap::DhGroupId::Null]);
    let r = refused(&edited(
        r#""ctrl_key": """#,
        &format!(r#""ctrl_key": "{KEY}""#),
    ));
    assert!(
        r.contains("hosts[0].dhchap.ctrl_key") && r.contains("needs the host's own key"),
        "{r}"
    );
}

#[test]
fn ana_groups_and_namespace_groups_are_read() {
    let text = edited(r#""state": "optimized""#, r#""state": "non-optimized""#).replacen(
        r#""ana_grpid": 1"#,
        r#""ana_grpid": 2"#,
        1,
    );
    let text = text.replacen(
        r#""grpid": 1
        }"#,
        r#""grpid": 1
        }, {"ana": {"state": "inaccessible"}, "grpid": 2}"#,
        1,
    );
    let c = TargetConfig::from_nvmetcli_json_str(&text).unwrap();
    assert_eq!(
        c.listen[0].ana_groups,
        vec![
            AnaGroupConfig {
                grpid: 1,
                state: AnaStateConfig::NonOptimized
            },
            AnaGroupConfig {
                grpid: 2,
                state: AnaStateConfig::Inaccessible
            }
        ]
    );
    assert_eq!(c.subsystems[0].namespaces[0].ana_grpid, 2);
    assert_eq!(c.subsystems[1].namespaces[0].ana_grpid, 1);
}

//! Temporary probe (to be deleted).
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use nvmf_initiator::bench::engine::{IoCompletion, IoEngine};
use nvmf_initiator::bench::workload::{IoOp, IoRequest};
use nvmf_initiator::{HostOptions, QueueEngine, SyncHost};
use nvmf_target::config::TargetConfig;

#[test]
#[ignore]
fn probe() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let toml = format!("poll_groups = 1\n[[listen]]\naddr = \"127.0.0.51\"\n[[subsystems]]\nnqn = \"nqn.x:p\"\n[[subsystems.namespaces]]\nnsid = 1\npath = \"{}\"\nsize = \"256M\"\n", dir.path().join("ns").display());
    let target = nvmf_target::start(&TargetConfig::from_toml_str(&toml).unwrap()).unwrap();
    let qd: usize = std::env::var("QD").ok().and_then(|v| v.parse().ok()).unwrap_or(32);
    let mut o = HostOptions::new(SocketAddr::new("127.0.0.51".parse().unwrap(), 4420), "nqn.x:p");
    o.local_ip = Some("127.0.0.52".parse::<IpAddr>().unwrap());
    o.queue_depth = qd as u16 + 1;
    o.max_io_bytes = 4096;
    let host = SyncHost::connect(&o).unwrap();
    let dev = host.device().clone();
    let (mut qs, keeper) = host.into_io_queues();
    let mut e = QueueEngine::new(qs.remove(0), 1, 512).unwrap();
    let mut out: Vec<IoCompletion> = Vec::new();
    let mut x: u64 = 12345;
    let mut next = |x: &mut u64| { *x ^= *x << 13; *x ^= *x >> 7; *x ^= *x << 17; (*x % 65536) * 4096 };
    for t in 0..qd as u32 { e.submit(t, &IoRequest { op: IoOp::Read, offset: next(&mut x), len: 4096 }).unwrap(); }
    let t0 = Instant::now();
    let mut n = 0u64;
    let mut max = Duration::ZERO;
    let mut last = Instant::now();
    while t0.elapsed() < Duration::from_secs(2) {
        e.poll(&mut out).unwrap();
        if !out.is_empty() { let g = last.elapsed(); if g > max { max = g; } last = Instant::now(); }
        for c in out.drain(..) { assert!(c.result.is_ok()); n += 1; e.submit(c.tag, &IoRequest { op: IoOp::Read, offset: next(&mut x), len: 4096 }).unwrap(); }
    }
    eprintln!("QD{qd}: {} IOPS, longest gap without completions {:?}", n / 2, max);
    eprintln!("host dev {:?}", dev.counters().snapshot());
    eprintln!("host qp {:?}", e.queue().context().qp_counters(transport::soft::Qp(e.queue().qp_num())));
    eprintln!("target dev {:?}", target.device().counters().snapshot());
    drop(e);
    let _ = keeper.shutdown(Vec::new());
}

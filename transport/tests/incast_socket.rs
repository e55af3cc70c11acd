//! The incast example's run over real UDP sockets on loopback, small: 4 sender QPs
//! write through the receiver's rate-limited RED queue, DCQCN on and off; every byte
//! must arrive intact and every WRITE complete. With DCQCN on the queue's marks must
//! bring CNPs that the senders act on. Nothing about timings is asserted (the numbers
//! are `scripts/incast.sh`'s, in BENCHMARKS.md).
#[path = "../examples/incast/run.rs"]
#[allow(dead_code)] // the example reads every field; this test only some
mod run;

use std::time::Duration;

use transport::soft::RxQueueConfig;

fn cfg(dcqcn: bool, rx: u8, tx: u8) -> run::IncastCfg {
    run::IncastCfg {
        flows: 4,
        bytes_per_flow: 1 << 20,
        msg_len: 16 << 10,
        depth: 4,
        dcqcn,
        queue: RxQueueConfig {
            rate_mbps: 1000,
            kmin_bytes: 8 << 10,
            kmax_bytes: 64 << 10,
            pmax: 0.1,
            limit_bytes: 128 << 10,
        },
        ip_rx: format!("127.0.0.{rx}").parse().unwrap(),
        ip_tx: format!("127.0.0.{tx}").parse().unwrap(),
        seed: 5,
        timeout: Duration::from_secs(60),
    }
}

#[test]
fn incast_through_a_marking_queue_delivers_every_byte_with_and_without_dcqcn() {
    let on = run::run(&cfg(true, 61, 62)).expect("DCQCN on");
    assert!(on.intact, "{on:?}");
    assert!(on.marks > 0, "the queue marked nothing: {on:?}");
    assert!(on.cnps_sent > 0 && on.cnps_handled > 0, "{on:?}");
    let off = run::run(&cfg(false, 63, 64)).expect("DCQCN off");
    assert!(off.intact, "{off:?}");
    assert_eq!(off.cnps_sent + off.cnps_handled, 0, "{off:?}");
}

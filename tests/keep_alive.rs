//! Keep Alive as Linux's target does it (issue 16 item 11): Traffic Based Keep Alive
//! (CTRATT bit 6) with the timer restarted by every command and by queue setup, so
//! (1) a host that takes longer than KATO between its admin Connect and an I/O queue's
//! Connect keeps its controller, and (2) a host busy with I/O that sends no Keep Alive
//! command keeps it too, while (3) a silent host still loses it after KATO.
//!
//! These tests wait real seconds (KATO is whole seconds); they assert outcomes (the
//! controller is there or gone, I/O succeeds), never durations.
//!
//! Addresses: 127.0.0.160..=127.0.0.165.
mod common;

use std::time::{Duration, Instant};

use common::*;
use nvme::Sqe;
use nvmf_initiator::capsule::DataDir;
use nvmf_initiator::controller::{Controller, ControllerOptions};
use transport::soft::{CmAgent, DeviceConfig, SoftDevice};

/// Waits up to 20 s for the target to have `n` controllers (the Keep Alive sweep runs
/// every 100 ms).
fn wait_controllers(t: &TestTarget, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while t.target.registry().controllers().len() != n {
        assert!(
            Instant::now() < deadline,
            "the target still has {} controllers, not {n}",
            t.target.registry().controllers().len()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn identify_advertises_traffic_based_keep_alive() {
    let t = start_target(160, 1 << 20);
    let mut host = connect(&t, 161, 1, 8);
    let info = host.controller().identify_controller().expect("identify");
    assert_eq!(
        info.ctratt, 0x41,
        "128-bit host ID and TBKAS, as Linux nvmet"
    );
    host.disconnect().expect("disconnect");
}

#[test]
fn a_slow_io_queue_connect_keeps_the_controller() {
    // KATO 4 s: the I/O queue comes up 3 s after the admin Connect, and is used 3 s
    // after that (6 s after the admin Connect, past the first KATO); no Keep Alive
    // command is sent at all.
    let t = start_target(162, 1 << 20);
    let dev = SoftDevice::open(DeviceConfig {
        rx_queues: 2,
        ..DeviceConfig::new(ip(163))
    })
    .expect("device");
    let cm = CmAgent::start(&dev).expect("CM agent");
    let mut opts = host_options(&t, 163, 1, 8);
    opts.kato_ms = 4000;
    let ctx = dev.open_context(0).expect("context 0");
    let (pd, pool) = test_pool(&dev);
    let mut ctrl =
        Controller::connect(ctx, &cm, ControllerOptions::from(&opts), pd, &pool).expect("admin");
    assert_eq!(ctrl.set_number_of_queues(1).expect("number of queues"), 1);
    std::thread::sleep(Duration::from_secs(3));
    let ctx = dev.open_context(1).expect("context 1");
    let mut q = ctrl
        .connect_io_queue(ctx, 1, 8, 1 << 20)
        .expect("the I/O queue connects 3 s after the admin queue");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        t.target.registry().controllers().len(),
        1,
        "the queue setup restarted the Keep Alive timer"
    );
    let data = pattern(0, 4096, 1);
    let (_, r) = run(
        &mut q,
        Sqe::write(0, 1, 0, 7, false),
        DataDir::HostToController { len: 4096 },
        &data,
    );
    r.expect("I/O 6 s after the admin Connect");
    ctrl.shutdown(vec![q]).expect("shutdown");
}

#[test]
fn a_busy_host_without_keep_alive_commands_keeps_the_controller() {
    // KATO 2 s; a SyncHost sends no Keep Alive of its own (no AdminKeeper).
    let t = start_target(164, 16 << 20);
    let mut opts = host_options(&t, 165, 1, 16);
    opts.kato_ms = 2000;
    let mut host = nvmf_initiator::SyncHost::connect(&opts).expect("host");
    let cntlid = host.controller().cntlid();
    // Five seconds of I/O, two and a half KATOs.
    let until = Instant::now() + Duration::from_secs(5);
    let mut round = 0u8;
    while Instant::now() < until {
        pass(&mut host, 0, 4096, 256, 16, true, round);
        pass(&mut host, 0, 4096, 256, 16, false, round);
        round = round.wrapping_add(1);
    }
    assert!(
        t.target.registry().controller(cntlid).is_some(),
        "I/O alone kept the controller"
    );
    // Silent for KATO and more: now the timer expires, as it must.
    wait_controllers(&t, 0);
    drop(host);
}

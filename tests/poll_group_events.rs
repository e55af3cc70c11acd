//! The poll group's event-driven paths on the soft provider, in process on loopback:
//! an idle poll group arms its CQ and sleeps (`Context::wait`) and wakes for the next
//! capsule; a poll group whose shared receive queue runs low gets the SRQ limit event
//! (`IBV_EVENT_SRQ_LIMIT_REACHED`), re-arms it, and every command still completes.
mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;

/// Waits (bounded) until `counter` exceeds `above`; returns its value.
fn wait_above(counter: &AtomicU64, above: u64, what: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = counter.load(Ordering::Relaxed);
        if v > above {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: still {v} after 10 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn idle_poll_group_sleeps_on_its_cq_and_wakes_for_the_next_command() {
    let t = start_target(184, 16 << 20);
    let mut opts = host_options(&t, 185, 1, 32);
    // No Keep Alive traffic: the target is idle between the passes below.
    opts.kato_ms = 0;
    let mut host = nvmf_initiator::SyncHost::connect(&opts).expect("host connects");
    let pg = t.target.poll_group_counters()[0].clone();

    // Connected and idle (two QPs on the group): it sleeps.
    let slept = wait_above(&pg.sleeps, 0, "idle poll group sleeps");
    // Each command after a sleep wakes it: QD1, with a pause longer than the idle spin
    // (200 us) and the longest sleep (10 ms) between commands, so the group is asleep
    // when each capsule comes.
    for i in 0..8u64 {
        let before = pg.sleeps.load(Ordering::Relaxed);
        wait_above(&pg.sleeps, before, "poll group back to sleep");
        pass(&mut host, i * 4096, 4096, 1, 1, true, 7);
        pass(&mut host, i * 4096, 4096, 1, 1, false, 7);
    }
    // And a burst at QD32 after a sleep.
    pass(&mut host, 1 << 20, 65536, 64, 32, true, 9);
    pass(&mut host, 1 << 20, 65536, 64, 32, false, 9);
    let after = wait_above(&pg.sleeps, slept + 8, "sleeps between the commands");
    assert!(after > slept);
    let file = std::fs::read(&t.path).unwrap();
    assert_eq!(&file[..4096], &pattern(0, 4096, 7)[..], "file bytes at 0");
    host.disconnect().expect("disconnect");
}

#[test]
fn srq_limit_event_when_commands_in_flight_hold_the_receive_buffers() {
    // 16 receive buffers for the poll group (limit 2) and 64 commands in flight over
    // two I/O queues: the host's burst takes every buffer (the rest meet RNR NAKs and
    // are retried), so the SRQ limit fires.
    let t = start_target_with(186, 64 << 20, |cfg| cfg.srq_depth = 16);
    let mut opts = host_options(&t, 187, 2, 64);
    opts.kato_ms = 0;
    let mut host = nvmf_initiator::SyncHost::connect(&opts).expect("host connects");
    let pg = t.target.poll_group_counters()[0].clone();

    pass(&mut host, 0, 131072, 128, 64, true, 3);
    let events = wait_above(&pg.srq_limit_events, 0, "SRQ limit events");
    // Re-armed once the buffers came back: the read-back burst fires it again, and
    // every command completed with the data written.
    pass(&mut host, 0, 131072, 128, 64, false, 3);
    wait_above(
        &pg.srq_limit_events,
        events,
        "SRQ limit events after re-arming",
    );
    let file = std::fs::read(&t.path).unwrap();
    let last = 127 * 131072;
    assert_eq!(
        &file[last..last + 131072],
        &pattern(last as u64, 131072, 3)[..],
        "file bytes at {last}"
    );
    host.disconnect().expect("disconnect");
}

//! The lifecycle in virtual time: every transition, timer and action without sockets.
use super::*;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn opts(delay: u64, loss: Option<u64>, fast: Option<u64>) -> ReconnectOptions {
    ReconnectOptions {
        reconnect_delay: secs(delay),
        ctrl_loss_tmo: loss.map(secs),
        fast_io_fail_tmo: fast.map(secs),
        kato_ms: 10_000,
    }
}

fn actions(l: &mut Lifecycle) -> Vec<Action> {
    std::iter::from_fn(|| l.poll_action()).collect()
}

/// A live controller at `t0`.
fn live(o: ReconnectOptions, t0: Instant) -> Lifecycle {
    let mut l = Lifecycle::new(o);
    assert_eq!(l.state(), CtrlState::New);
    assert_eq!(l.io_disposition(), IoDisposition::Hold);
    l.connected(t0).unwrap();
    assert_eq!(l.state(), CtrlState::Live);
    assert_eq!(l.io_disposition(), IoDisposition::Submit);
    l
}

#[test]
fn linux_defaults() {
    let o = ReconnectOptions::default();
    assert_eq!(o.reconnect_delay, secs(10));
    assert_eq!(o.ctrl_loss_tmo, Some(secs(600)));
    assert_eq!(o.fast_io_fail_tmo, None);
    assert_eq!(o.max_reconnects(), Some(60));
    assert_eq!(opts(2, Some(3), None).max_reconnects(), Some(2));
    assert_eq!(opts(2, None, None).max_reconnects(), None);
    assert_eq!(o.keep_alive_interval(), Some(secs(5)));
    assert_eq!(o.keep_alive_timeout(), Some(secs(10)));
    assert_eq!(CtrlState::Connecting.name(), "connecting");
    for s in [
        CtrlState::New,
        CtrlState::Live,
        CtrlState::Resetting,
        CtrlState::Connecting,
        CtrlState::Deleting,
        CtrlState::Dead,
    ] {
        assert_eq!(CtrlState::from_u8(s.to_u8()), s);
    }
}

#[test]
fn a_restarted_target_is_reconnected_after_reconnect_delay() {
    let t0 = Instant::now();
    let mut l = live(opts(10, Some(600), None), t0);
    let t1 = t0 + secs(3);
    assert!(l.error(t1, "transport error on queue 1: IBV_WC_RETRY_EXC_ERR"));
    // A second error of the same loss starts nothing new.
    assert!(!l.error(t1, "queue 2 too"));
    assert_eq!(l.state(), CtrlState::Resetting);
    assert_eq!(l.io_disposition(), IoDisposition::Hold);
    assert_eq!(actions(&mut l), [Action::TearDown { disable: false }]);
    l.torn_down(t1).unwrap();
    assert_eq!(l.state(), CtrlState::Connecting);
    assert_eq!(l.io_disposition(), IoDisposition::Hold);
    assert_eq!(l.poll_timeout(), Some(t1 + secs(10)));
    l.handle_timeout(t1 + secs(9));
    assert_eq!(actions(&mut l), []);
    l.handle_timeout(t1 + secs(10));
    assert_eq!(actions(&mut l), [Action::Reconnect { attempt: 1 }]);
    // No timer while the attempt runs.
    assert_eq!(l.poll_timeout(), None);
    l.connect_failed(t1 + secs(15), "no answer").unwrap();
    assert_eq!(l.reason(), Some("no answer"));
    assert_eq!(l.poll_timeout(), Some(t1 + secs(25)));
    l.handle_timeout(t1 + secs(25));
    assert_eq!(actions(&mut l), [Action::Reconnect { attempt: 2 }]);
    l.connected(t1 + secs(26)).unwrap();
    assert_eq!(l.state(), CtrlState::Live);
    assert_eq!((l.reconnects(), l.attempts()), (1, 0));
    assert_eq!(l.io_disposition(), IoDisposition::Submit);
    // Keep Alive again KATO/2 after the reconnect.
    assert_eq!(l.poll_timeout(), Some(t1 + secs(31)));
}

#[test]
fn a_target_that_never_returns_is_deleted_at_ctrl_loss_tmo() {
    let t0 = Instant::now();
    let mut l = live(opts(2, Some(5), None), t0);
    l.error(t0, "lost");
    let _ = actions(&mut l);
    l.torn_down(t0).unwrap();
    let mut t = t0;
    let mut attempts = 0;
    // Attempts at 2 and 4 s; the one at 6 s would be past the deadline.
    while l.state() == CtrlState::Connecting {
        t = l.poll_timeout().expect("a timer while connecting");
        l.handle_timeout(t);
        for a in actions(&mut l) {
            match a {
                Action::Reconnect { attempt } => {
                    attempts += 1;
                    assert_eq!(attempt, attempts);
                    l.connect_failed(t, "unreachable").unwrap();
                }
                Action::Delete => {}
                other => panic!("{other:?}"),
            }
        }
        assert!(t <= t0 + secs(5));
    }
    assert_eq!(attempts, 2);
    assert_eq!(t, t0 + secs(5));
    assert_eq!(l.state(), CtrlState::Deleting);
    assert_eq!(l.io_disposition(), IoDisposition::Fail);
    assert_eq!(l.reason(), Some("unreachable"));
    l.deleted().unwrap();
    assert_eq!(l.state(), CtrlState::Dead);
    assert_eq!(l.io_disposition(), IoDisposition::Fail);
    assert_eq!(l.poll_timeout(), None);
    // Nothing brings a dead controller back.
    assert!(!l.error(t, "again"));
    assert_eq!(
        l.connected(t),
        Err(InvalidTransition {
            from: CtrlState::Dead,
            to: CtrlState::Live
        })
    );
}

#[test]
fn an_attempt_that_ends_past_the_deadline_deletes_at_once() {
    let t0 = Instant::now();
    let mut l = live(opts(1, Some(3), None), t0);
    l.error(t0, "lost");
    let _ = actions(&mut l);
    l.torn_down(t0).unwrap();
    l.handle_timeout(t0 + secs(1));
    assert_eq!(actions(&mut l), [Action::Reconnect { attempt: 1 }]);
    // The connect waited 5 s for an answer.
    l.connect_failed(t0 + secs(6), "timed out").unwrap();
    assert_eq!(actions(&mut l), [Action::Delete]);
    assert_eq!(l.state(), CtrlState::Deleting);
}

#[test]
fn at_least_one_attempt_when_the_delay_exceeds_the_loss_timeout() {
    let t0 = Instant::now();
    let mut l = live(opts(10, Some(3), None), t0);
    l.error(t0, "lost");
    let _ = actions(&mut l);
    l.torn_down(t0).unwrap();
    // Linux: max_reconnects = DIV_ROUND_UP(3, 10) = 1.
    assert_eq!(l.poll_timeout(), Some(t0 + secs(10)));
    l.handle_timeout(t0 + secs(5));
    assert_eq!(actions(&mut l), []);
    l.handle_timeout(t0 + secs(10));
    assert_eq!(actions(&mut l), [Action::Reconnect { attempt: 1 }]);
    l.connect_failed(t0 + secs(10), "refused").unwrap();
    assert_eq!(actions(&mut l), [Action::Delete]);
}

#[test]
fn ctrl_loss_tmo_zero_never_reconnects_and_none_reconnects_forever() {
    let t0 = Instant::now();
    let mut l = live(ReconnectOptions::never(), t0);
    l.error(t0, "lost");
    assert_eq!(actions(&mut l), [Action::TearDown { disable: false }]);
    l.torn_down(t0).unwrap();
    assert_eq!(actions(&mut l), [Action::Delete]);
    assert_eq!(l.state(), CtrlState::Deleting);

    let mut l = live(opts(1, None, None), t0);
    l.error(t0, "lost");
    let _ = actions(&mut l);
    l.torn_down(t0).unwrap();
    for i in 1..=1000u32 {
        let t = l.poll_timeout().unwrap();
        l.handle_timeout(t);
        assert_eq!(actions(&mut l), [Action::Reconnect { attempt: i }]);
        l.connect_failed(t, "down").unwrap();
    }
    assert_eq!(l.state(), CtrlState::Connecting);
    assert_eq!(l.io_disposition(), IoDisposition::Hold);
}

#[test]
fn fast_io_fail_tmo_fails_held_io_and_the_controller_keeps_reconnecting() {
    let t0 = Instant::now();
    let mut l = live(opts(2, Some(60), Some(5)), t0);
    l.error(t0, "lost");
    let _ = actions(&mut l);
    l.torn_down(t0 + secs(1)).unwrap();
    let mut t;
    loop {
        t = l.poll_timeout().unwrap();
        l.handle_timeout(t);
        let a = actions(&mut l);
        if a.contains(&Action::FailHeldIo) {
            break;
        }
        for a in a {
            assert!(matches!(a, Action::Reconnect { .. }), "{a:?}");
            l.connect_failed(t, "down").unwrap();
        }
    }
    // Five seconds after CONNECTING was entered.
    assert_eq!(t, t0 + secs(6));
    assert!(l.failfast_expired());
    assert_eq!(l.io_disposition(), IoDisposition::Fail);
    assert_eq!(l.state(), CtrlState::Connecting);
    // Reconnecting goes on; once live, I/O runs again.
    let t = l.poll_timeout().unwrap();
    l.handle_timeout(t);
    assert!(matches!(actions(&mut l)[..], [Action::Reconnect { .. }]));
    l.connected(t).unwrap();
    assert!(!l.failfast_expired());
    assert_eq!(l.io_disposition(), IoDisposition::Submit);
}

#[test]
fn keep_alive_every_half_kato_and_a_lost_one_starts_recovery() {
    let t0 = Instant::now();
    let mut l = live(opts(10, Some(600), None), t0);
    assert_eq!(l.poll_timeout(), Some(t0 + secs(5)));
    l.handle_timeout(t0 + secs(5));
    assert_eq!(actions(&mut l), [Action::SendKeepAlive]);
    // One at a time.
    assert_eq!(l.poll_timeout(), None);
    l.handle_timeout(t0 + secs(6));
    assert_eq!(actions(&mut l), []);
    l.keep_alive_done(t0 + secs(6), Ok::<(), &str>(()));
    assert_eq!(l.poll_timeout(), Some(t0 + secs(11)));
    l.handle_timeout(t0 + secs(11));
    assert_eq!(actions(&mut l), [Action::SendKeepAlive]);
    l.keep_alive_done(
        t0 + secs(21),
        Err("timed out waiting for Keep Alive on queue 0"),
    );
    assert_eq!(l.state(), CtrlState::Resetting);
    assert_eq!(actions(&mut l), [Action::TearDown { disable: false }]);
    assert!(l
        .reason()
        .unwrap()
        .starts_with("Keep Alive lost: timed out"));
    // No Keep Alive while recovering.
    l.torn_down(t0 + secs(21)).unwrap();
    l.handle_timeout(t0 + secs(31));
    assert_eq!(actions(&mut l), [Action::Reconnect { attempt: 1 }]);

    let mut none = live(
        ReconnectOptions {
            kato_ms: 0,
            ..ReconnectOptions::default()
        },
        t0,
    );
    assert_eq!(none.poll_timeout(), None);
    none.handle_timeout(t0 + secs(3600));
    assert_eq!(actions(&mut none), []);
}

#[test]
fn the_caller_deletes_from_any_state_and_bad_events_are_refused() {
    let t0 = Instant::now();
    for setup in 0..4 {
        let mut l = Lifecycle::new(ReconnectOptions::default());
        if setup >= 1 {
            l.connected(t0).unwrap();
        }
        if setup >= 2 {
            l.error(t0, "x");
        }
        if setup >= 3 {
            l.torn_down(t0).unwrap();
        }
        l.delete().unwrap();
        assert_eq!(l.state(), CtrlState::Deleting);
        assert_eq!(l.poll_timeout(), None);
        l.deleted().unwrap();
        assert!(l.delete().is_err());
    }
    let mut l = Lifecycle::new(ReconnectOptions::default());
    assert!(l.torn_down(t0).is_err());
    assert!(l.connect_failed(t0, "x").is_err());
    assert!(l.deleted().is_err());
    l.connected(t0).unwrap();
    assert!(l.connected(t0).is_err());
}

#[test]
fn a_reset_disables_first_and_reconnects_at_once() {
    let t0 = Instant::now();
    let mut l = live(opts(10, Some(600), None), t0);
    assert!(l.reset(t0, "Read (CID 3) on queue 1 timed out; Abort: not aborted"));
    assert_eq!(actions(&mut l), [Action::TearDown { disable: true }]);
    assert_eq!(l.io_disposition(), IoDisposition::Hold);
    l.torn_down(t0).unwrap();
    assert_eq!(l.poll_timeout(), Some(t0));
    l.handle_timeout(t0);
    assert_eq!(actions(&mut l), [Action::Reconnect { attempt: 1 }]);
    // A failed reset waits reconnect_delay as any recovery.
    l.connect_failed(t0, "refused").unwrap();
    assert_eq!(l.poll_timeout(), Some(t0 + secs(10)));
    l.handle_timeout(t0 + secs(10));
    assert_eq!(actions(&mut l), [Action::Reconnect { attempt: 2 }]);
    l.connected(t0 + secs(10)).unwrap();
    // The next loss is a plain one again.
    assert!(l.error(t0 + secs(20), "lost"));
    assert_eq!(actions(&mut l), [Action::TearDown { disable: false }]);
    l.torn_down(t0 + secs(20)).unwrap();
    assert_eq!(l.poll_timeout(), Some(t0 + secs(30)));
    // Not live: no reset.
    assert!(!l.reset(t0 + secs(21), "x"));
}

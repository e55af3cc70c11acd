//! DCQCN's reaction point (Zhu et al., SIGCOMM 2015, §3 and Fig. 7), with the
//! parameters and their names as NVIDIA ConnectX firmware ships them (`mlxconfig`'s
//! `RPG_*`, `DCE_TCP_*`, `RATE_*` and `CLAMP_TGT_RATE*` per priority; the same names
//! under mlx5's `cc_params`).
//!
//! - **Rate decrease** on a CNP (at most once per `rate_reduce_monitor_period`):
//!   the target rate R_T takes the current rate R_C if the rate rose since the last
//!   cut (see [`DcqcnParams::clamp_tgt_rate`]), then
//!   `R_C = R_C * (1 - alpha * 1024 / 2^rpg_gd)` (with the default `rpg_gd` 11, the
//!   paper's `R_C (1 - alpha/2)`), never below `rpg_min_dec_fac` percent of R_C nor
//!   below `rpg_min_rate`. The increase counters restart.
//! - **Alpha**, the congestion estimate, is updated once per `dce_tcp_rtt`:
//!   `alpha = alpha * g + (1 - g) * F` with `g = dce_tcp_g / 1024` and F = 1 if a CNP
//!   arrived in that period, else 0. It is evaluated lazily (periods without a CNP
//!   decay it by `g^n` when next needed), so it costs no timer at a 1 us period.
//! - **Rate increase**: the timer counter T (every `rpg_time_reset` us, timer
//!   [`Timer::CcRate`]) and the byte counter BC (every `rpg_byte_reset` bytes sent)
//!   each count events since the last CNP. Each event: *fast recovery* while both are
//!   at most `rpg_threshold` (`R_C = (R_T + R_C) / 2`), *hyper increase* once both
//!   exceed it (`R_T += (min(T, BC) - rpg_threshold) * rpg_hai_rate`), else *additive
//!   increase* (`R_T += rpg_ai_rate`), then `R_C = (R_T + R_C) / 2`. Back at the line
//!   rate the limiter switches off.
//! - **Pacing**: while limited, each packet of `n` bytes on the wire moves the next
//!   send time on by `n * 8 / R_C` ([`Timer::Pacing`]).
use std::time::Duration;

use super::{CongestionControl, Timer, Timers};
use crate::time::Timestamp;

/// DCQCN parameters. Rates in Mbit/s, times in microseconds; the defaults are
/// ConnectX's (as `mlxconfig -d DEV query` lists them for a port's priority), but for
/// the alpha period (see [`DcqcnParams::dce_tcp_rtt_us`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DcqcnParams {
    /// The rate the limiter starts from and returns to (the link speed; the soft
    /// provider has none, so 100 Gbit/s). ConnectX's `rpg_max_rate` 0 means this.
    pub line_rate_mbps: u32,
    /// `rpg_time_reset`: the rate-increase timer period (us). Default 300.
    pub rpg_time_reset_us: u32,
    /// `rpg_byte_reset`: bytes sent per byte-counter event. Default 32767.
    pub rpg_byte_reset: u32,
    /// `rpg_threshold`: events of either counter in fast recovery (the paper's F).
    /// Default 1.
    pub rpg_threshold: u32,
    /// `rpg_ai_rate`: additive increase step (Mbit/s). Default 5.
    pub rpg_ai_rate_mbps: u32,
    /// `rpg_hai_rate`: hyper increase step (Mbit/s). Default 50.
    pub rpg_hai_rate_mbps: u32,
    /// `rpg_gd`: log2 of the decrease divisor for the 10-bit alpha (11: alpha/2).
    /// Default 11.
    pub rpg_gd: u32,
    /// `rpg_min_dec_fac`: a CNP leaves at least this percentage of the current rate.
    /// Default 50.
    pub rpg_min_dec_fac: u32,
    /// `rpg_min_rate`: the rate never goes below this (Mbit/s). Default 1.
    pub rpg_min_rate_mbps: u32,
    /// `rate_to_set_on_first_cnp`: the current rate the first CNP starts from
    /// (Mbit/s); 0 means the line rate. Default 0.
    pub rate_to_set_on_first_cnp_mbps: u32,
    /// `dce_tcp_g`: alpha's weight on its old value, of 1024. Default 1019.
    pub dce_tcp_g: u32,
    /// `dce_tcp_rtt`: the alpha update period (us). Default 55, the paper's K: ConnectX
    /// lists `DCE_TCP_RTT 1` in a unit its tools do not state, and an alpha that
    /// decays every microsecond falls to nothing between CNPs 50 us apart (the
    /// notification point's spacing here), so cuts would stop biting.
    pub dce_tcp_rtt_us: u32,
    /// `rate_reduce_monitor_period`: the least time between two rate decreases (us).
    /// Default 4.
    pub rate_reduce_monitor_period_us: u32,
    /// `initial_alpha_value`: alpha at the first CNP, of 1023. Default 1023.
    pub initial_alpha_value: u32,
    /// `clamp_tgt_rate`: every cut first sets the target rate to the current rate.
    /// Default false: only a cut after the byte counter raised the rate does (and a
    /// cut after the timer did, with `clamp_tgt_rate_after_time_inc`); cuts in a row
    /// keep the target of before the first, for fast recovery towards it.
    pub clamp_tgt_rate: bool,
    /// `clamp_tgt_rate_after_time_inc`: a cut after the timer (not only the byte
    /// counter) raised the rate also sets the target rate to the current rate.
    /// Default true.
    pub clamp_tgt_rate_after_time_inc: bool,
}

impl Default for DcqcnParams {
    fn default() -> Self {
        DcqcnParams {
            line_rate_mbps: 100_000,
            rpg_time_reset_us: 300,
            rpg_byte_reset: 32767,
            rpg_threshold: 1,
            rpg_ai_rate_mbps: 5,
            rpg_hai_rate_mbps: 50,
            rpg_gd: 11,
            rpg_min_dec_fac: 50,
            rpg_min_rate_mbps: 1,
            rate_to_set_on_first_cnp_mbps: 0,
            dce_tcp_g: 1019,
            dce_tcp_rtt_us: 55,
            rate_reduce_monitor_period_us: 4,
            initial_alpha_value: 1023,
            clamp_tgt_rate: false,
            clamp_tgt_rate_after_time_inc: true,
        }
    }
}

/// One QP's DCQCN reaction point.
#[derive(Clone, Debug)]
pub struct Dcqcn {
    p: DcqcnParams,
    /// Rate limiting is on (a CNP arrived and the rate has not yet climbed back).
    limited: bool,
    /// R_C and R_T, Mbit/s.
    rc: f64,
    rt: f64,
    /// alpha in [0, 1], as of the end of period `alpha_period`.
    alpha: f64,
    /// Index of the alpha period (of `dce_tcp_rtt`) `alpha` is current to; a CNP in
    /// the period after it is pending in `cnp_in_period`.
    alpha_period: u64,
    cnp_in_period: bool,
    /// Rate-increase events since the last CNP: timer (T) and byte counter (BC).
    t: u32,
    bc: u32,
    /// Bytes towards the next byte-counter event.
    bytes: u64,
    /// The timer, or the byte counter, raised the rate since the last cut.
    timer_increased: bool,
    bytes_increased: bool,
    last_decrease: Option<Timestamp>,
    next_send: Timestamp,
}

impl Dcqcn {
    /// An unlimited reaction point with parameters `p` (values of 0 where a positive
    /// one is needed are taken as 1).
    pub fn new(p: DcqcnParams) -> Self {
        let line = f64::from(p.line_rate_mbps.max(1));
        Dcqcn {
            p,
            limited: false,
            rc: line,
            rt: line,
            alpha: f64::from(p.initial_alpha_value.min(1023)) / 1023.0,
            alpha_period: 0,
            cnp_in_period: false,
            t: 0,
            bc: 0,
            bytes: 0,
            timer_increased: false,
            bytes_increased: false,
            last_decrease: None,
            next_send: Timestamp(0),
        }
    }

    /// The congestion estimate alpha in [0, 1] as of `now`.
    pub fn alpha(&mut self, now: Timestamp) -> f64 {
        self.settle_alpha(now);
        self.alpha
    }

    /// The current rate R_C and target rate R_T (Mbit/s).
    pub fn rates_mbps(&self) -> (f64, f64) {
        (self.rc, self.rt)
    }

    /// Whether the limiter is on.
    pub fn is_limited(&self) -> bool {
        self.limited
    }

    fn line(&self) -> f64 {
        f64::from(self.p.line_rate_mbps.max(1))
    }

    fn period_of(&self, now: Timestamp) -> u64 {
        now.as_nanos() / (u64::from(self.p.dce_tcp_rtt_us.max(1)) * 1000)
    }

    /// Brings alpha up to the period before `now`'s: the pending period's update
    /// (F = whether a CNP came in it), then `g^n` for `n` periods without one.
    fn settle_alpha(&mut self, now: Timestamp) {
        let cur = self.period_of(now);
        if cur <= self.alpha_period {
            return;
        }
        let g = f64::from(self.p.dce_tcp_g.min(1024)) / 1024.0;
        let f = if self.cnp_in_period { 1.0 } else { 0.0 };
        self.alpha = self.alpha * g + (1.0 - g) * f;
        let quiet = cur - self.alpha_period - 1;
        if quiet > 0 {
            self.alpha *= g.powi(quiet.min(i32::MAX as u64) as i32);
        }
        self.alpha_period = cur;
        self.cnp_in_period = false;
    }

    fn increase(&mut self, by_timer: bool, timers: &mut Timers) {
        let f = self.p.rpg_threshold;
        if self.t.max(self.bc) <= f {
            // Fast recovery: towards the rate before the cut.
        } else if self.t.min(self.bc) > f {
            let i = f64::from(self.t.min(self.bc) - f);
            self.rt += i * f64::from(self.p.rpg_hai_rate_mbps);
        } else {
            self.rt += f64::from(self.p.rpg_ai_rate_mbps);
        }
        let line = self.line();
        self.rt = self.rt.min(line);
        self.rc = ((self.rt + self.rc) / 2.0).min(line);
        if by_timer {
            self.timer_increased = true;
        } else {
            self.bytes_increased = true;
        }
        if self.rc >= line * (1.0 - 1e-9) {
            // Back at the line rate: the limiter switches off.
            self.limited = false;
            self.rc = line;
            self.rt = line;
            timers.stop(Timer::CcRate);
            timers.stop(Timer::Pacing);
        }
    }

    fn time_reset(&self) -> Duration {
        Duration::from_micros(u64::from(self.p.rpg_time_reset_us.max(1)))
    }
}

impl CongestionControl for Dcqcn {
    fn on_cnp(&mut self, now: Timestamp, timers: &mut Timers) -> bool {
        self.settle_alpha(now);
        if !self.limited {
            self.limited = true;
            let first = self.p.rate_to_set_on_first_cnp_mbps;
            self.rc = if first > 0 {
                f64::from(first).min(self.line())
            } else {
                self.line()
            };
            self.rt = self.rc;
            self.alpha = f64::from(self.p.initial_alpha_value.min(1023)) / 1023.0;
            self.next_send = now;
            self.bytes_increased = false;
            self.timer_increased = false;
        }
        // This period saw a CNP: alpha rises at its end.
        self.cnp_in_period = true;
        let monitor = Duration::from_micros(u64::from(self.p.rate_reduce_monitor_period_us));
        let may_cut = self.last_decrease.is_none_or(|t| now.since(t) >= monitor);
        if may_cut {
            let clamp = self.p.clamp_tgt_rate
                || self.bytes_increased
                || (self.p.clamp_tgt_rate_after_time_inc && self.timer_increased);
            if clamp || self.last_decrease.is_none() {
                self.rt = self.rc;
            }
            let cut = self.alpha * 1024.0 / f64::from(1u32 << self.p.rpg_gd.min(31));
            let floor = self.rc * f64::from(self.p.rpg_min_dec_fac.min(100)) / 100.0;
            self.rc = (self.rc * (1.0 - cut))
                .max(floor)
                .max(f64::from(self.p.rpg_min_rate_mbps.max(1)));
            self.last_decrease = Some(now);
            self.bytes_increased = false;
            self.timer_increased = false;
        }
        self.t = 0;
        self.bc = 0;
        self.bytes = 0;
        timers.set(Timer::CcRate, now + self.time_reset());
        true
    }

    fn on_sent(&mut self, now: Timestamp, wire_bytes: usize, timers: &mut Timers) {
        if !self.limited {
            return;
        }
        let start = self.next_send.max(now);
        let ns = (wire_bytes as f64 * 8.0 * 1000.0 / self.rc) as u64;
        self.next_send = Timestamp(start.as_nanos().saturating_add(ns));
        self.bytes += wire_bytes as u64;
        let reset = u64::from(self.p.rpg_byte_reset.max(1));
        while self.limited && self.bytes >= reset {
            self.bytes -= reset;
            self.bc = self.bc.saturating_add(1);
            self.increase(false, timers);
        }
        if self.limited {
            timers.set(Timer::Pacing, self.next_send);
        }
    }

    fn on_timer(&mut self, now: Timestamp, timer: Timer, timers: &mut Timers) {
        if timer != Timer::CcRate || !self.limited {
            return;
        }
        self.t = self.t.saturating_add(1);
        self.increase(true, timers);
        if self.limited {
            timers.set(Timer::CcRate, now + self.time_reset());
        }
    }

    fn next_send_time(&self) -> Option<Timestamp> {
        self.limited.then_some(self.next_send)
    }

    fn rate_mbps(&self) -> Option<f64> {
        self.limited.then_some(self.rc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000;

    fn at(us: u64) -> Timestamp {
        Timestamp(us * US)
    }

    /// Runs the rate-increase timer until `until_us` (no CNPs, no bytes).
    fn run_timers(d: &mut Dcqcn, timers: &mut Timers, until_us: u64) {
        while let Some(t) = timers.get(Timer::CcRate) {
            if t > at(until_us) {
                break;
            }
            timers.stop(Timer::CcRate);
            d.on_timer(t, Timer::CcRate, timers);
        }
    }

    #[test]
    fn a_cnp_cuts_the_rate_by_alpha_over_two_once_per_monitor_period() {
        let mut d = Dcqcn::new(DcqcnParams::default());
        let mut tm = Timers::default();
        assert_eq!(d.rate_mbps(), None, "unlimited before any CNP");
        assert!(d.on_cnp(at(100), &mut tm));
        // alpha starts at 1: R_C = line * (1 - 1/2).
        let (rc, rt) = d.rates_mbps();
        assert!((rc - 50_000.0).abs() < 1.0, "{rc}");
        assert_eq!(rt, 100_000.0, "the target keeps the rate before the cut");
        // A second CNP within rate_reduce_monitor_period (4 us) cuts nothing more.
        d.on_cnp(at(102), &mut tm);
        assert_eq!(d.rates_mbps().0, rc);
        // After it, the next cut uses the alpha of then (still close to 1).
        d.on_cnp(at(110), &mut tm);
        let rc2 = d.rates_mbps().0;
        assert!(rc2 < rc * 0.55 && rc2 >= rc * 0.5, "{rc2}");
        assert!(tm.is_armed(Timer::CcRate), "the increase timer runs");
    }

    #[test]
    fn the_rate_never_falls_below_min_dec_fac_or_min_rate() {
        let mut d = Dcqcn::new(DcqcnParams {
            rpg_min_dec_fac: 80,
            ..DcqcnParams::default()
        });
        let mut tm = Timers::default();
        d.on_cnp(at(0), &mut tm);
        assert!((d.rates_mbps().0 - 80_000.0).abs() < 1.0);
        // A thousand CNPs 5 us apart: never below rpg_min_rate.
        for i in 1..1000 {
            d.on_cnp(at(i * 5), &mut tm);
        }
        assert!(d.rates_mbps().0 >= 1.0);
    }

    #[test]
    fn without_cnps_the_rate_recovers_to_the_line_rate_and_the_limiter_stops() {
        let mut d = Dcqcn::new(DcqcnParams::default());
        let mut tm = Timers::default();
        d.on_cnp(at(0), &mut tm);
        let (rc0, rt0) = d.rates_mbps();
        // The first timer event is fast recovery: halfway back to the target.
        run_timers(&mut d, &mut tm, 300);
        let (rc1, rt1) = d.rates_mbps();
        assert_eq!(rt1, rt0);
        assert!((rc1 - (rc0 + rt0) / 2.0).abs() < 1e-6, "{rc1}");
        // Then the rate only rises, and reaches the line rate.
        let mut last = rc1;
        let mut t = 300;
        while d.is_limited() && t < 10_000_000 {
            t += 300;
            run_timers(&mut d, &mut tm, t);
            let rc = d.rates_mbps().0;
            assert!(rc >= last, "the rate fell without a CNP at {t} us");
            last = rc;
        }
        assert!(!d.is_limited(), "still limited after 10 s");
        assert_eq!(d.rate_mbps(), None);
        assert!(!tm.is_armed(Timer::CcRate) && !tm.is_armed(Timer::Pacing));
    }

    #[test]
    fn the_byte_counter_raises_the_rate_and_both_counters_reach_hyper_increase() {
        let p = DcqcnParams {
            rate_to_set_on_first_cnp_mbps: 10_000,
            ..DcqcnParams::default()
        };
        let mut d = Dcqcn::new(p);
        let mut tm = Timers::default();
        d.on_cnp(at(0), &mut tm);
        // Three byte-counter events and no timer: additive increase once past the
        // threshold (R_T + 5 Mbit/s per event after fast recovery).
        let rt0 = d.rates_mbps().1;
        d.on_sent(at(1), p.rpg_byte_reset as usize * 3, &mut tm);
        assert_eq!(d.bc, 3);
        assert!((d.rates_mbps().1 - (rt0 + 2.0 * 5.0)).abs() < 1e-6);
        // Now timer events too: once both exceed the threshold, hyper increase.
        run_timers(&mut d, &mut tm, 600);
        assert_eq!(d.t, 2);
        let before = d.rates_mbps().1;
        run_timers(&mut d, &mut tm, 900);
        // T = 3, BC = 3: i = min(T, BC) - 1 = 2 steps of 50 Mbit/s.
        assert!((d.rates_mbps().1 - (before + 2.0 * 50.0)).abs() < 1e-6);
    }

    #[test]
    fn alpha_rises_with_cnps_and_decays_without_them() {
        let mut d = Dcqcn::new(DcqcnParams {
            initial_alpha_value: 0,
            dce_tcp_rtt_us: 1,
            ..DcqcnParams::default()
        });
        let mut tm = Timers::default();
        for i in 0..200 {
            d.on_cnp(at(i), &mut tm);
        }
        let high = d.alpha(at(200));
        // 200 periods of 1 us with a CNP each: 1 - (1019/1024)^200 ~ 0.62.
        assert!(
            (high - (1.0 - (1019.0f64 / 1024.0).powi(200))).abs() < 0.01,
            "{high}"
        );
        let later = d.alpha(at(1200));
        assert!(
            (later - high * (1019.0f64 / 1024.0).powi(1000)).abs() < 0.01,
            "{later}"
        );
    }

    #[test]
    fn pacing_spaces_packets_at_the_current_rate() {
        let mut d = Dcqcn::new(DcqcnParams::default());
        let mut tm = Timers::default();
        assert_eq!(d.next_send_time(), None);
        d.on_cnp(at(0), &mut tm);
        let rc = d.rates_mbps().0;
        // 10 packets of 1000 bytes at R_C Mbit/s: 10 * 8000 / R_C us.
        for _ in 0..10 {
            d.on_sent(at(0), 1000, &mut tm);
        }
        let want = 10.0 * 8000.0 / rc * 1000.0;
        let got = d.next_send_time().unwrap().as_nanos() as f64;
        assert!((got - want).abs() < 20.0, "{got} ns, want {want}");
        assert_eq!(tm.get(Timer::Pacing), d.next_send_time());
    }

    /// Two flows share a bottleneck: a fluid model in 1 us steps with a queue that
    /// marks each 1000-byte packet with a probability rising from 0 at Kmin to Pmax
    /// at Kmax (RED as the paper configures it: 5 KB, 200 KB, 1%), and one CNP per
    /// flow per 50 us at most, as the notification point sends them. From a start
    /// of 10:1, DCQCN keeps the link busy and brings the flows to within a bound of
    /// each other; the same for several seeds.
    #[test]
    fn two_flows_converge_to_a_fair_share_of_a_bottleneck() {
        use rand::{rngs::StdRng, Rng, SeedableRng};
        let p = DcqcnParams {
            line_rate_mbps: 40_000,
            ..DcqcnParams::default()
        };
        let cap_bytes_per_us = 25_000.0 / 8.0;
        let (kmin, kmax, pmax) = (5_000.0, 200_000.0, 0.01);
        for seed in 0..4u64 {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut flows = [Dcqcn::new(p), Dcqcn::new(p)];
            let mut tms = [Timers::default(), Timers::default()];
            let mut last_cnp = [None::<u64>; 2];
            // Flow 1 starts cut to about a tenth of flow 0.
            for i in 0..4 {
                flows[1].on_cnp(at(5 * i), &mut tms[1]);
            }
            let mut queue = 0.0f64;
            let mut pkt = [0.0f64; 2];
            let (mut sent, mut busy) = ([0.0f64; 2], 0.0f64);
            let total_us = 400_000;
            let measure_from = total_us / 2;
            for us in 0..total_us {
                let now = at(us);
                let mut arriving = 0.0;
                for f in 0..2 {
                    run_timers(&mut flows[f], &mut tms[f], us);
                    let rate = flows[f].rate_mbps().unwrap_or(f64::from(p.line_rate_mbps));
                    let bytes = rate / 8.0;
                    flows[f].on_sent(now, bytes as usize, &mut tms[f]);
                    arriving += bytes;
                    pkt[f] += bytes;
                    if us >= measure_from {
                        sent[f] += bytes;
                    }
                }
                let out = (queue + arriving).min(cap_bytes_per_us);
                queue = (queue + arriving - out).max(0.0);
                if us >= measure_from {
                    busy += out;
                }
                let mark = ((queue - kmin) / (kmax - kmin)).clamp(0.0, 1.0) * pmax;
                let mark = if queue >= kmax { 1.0 } else { mark };
                for f in 0..2 {
                    while pkt[f] >= 1000.0 {
                        pkt[f] -= 1000.0;
                        let marked = mark > 0.0 && rng.gen_bool(mark);
                        if marked && last_cnp[f].is_none_or(|t| us - t >= 50) {
                            last_cnp[f] = Some(us);
                            flows[f].on_cnp(now, &mut tms[f]);
                        }
                    }
                }
            }
            let util = busy / (cap_bytes_per_us * (total_us - measure_from) as f64);
            let ratio = sent[0].min(sent[1]) / sent[0].max(sent[1]);
            eprintln!("seed {seed}: utilisation {util:.3}, share ratio {ratio:.3}");
            assert!(util > 0.85, "seed {seed}: link utilisation {util:.3}");
            assert!(
                ratio > 0.7,
                "seed {seed}: share ratio {ratio:.3} ({sent:?})"
            );
        }
    }
}

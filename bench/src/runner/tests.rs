use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::engine::{EngineError, IoCompletion};
use crate::mem_engine::{shared_disk, MemEngine, ReadCorruption};
use crate::options::RwMode;
use crate::result::{ERRNO_EILSEQ, ERRNO_EINVAL};
use crate::workload::IoRequest;

const BS: u32 = 4096;

fn spec(rw: RwMode, index: u32, blocks: u64, io_blocks: u64, iodepth: u32) -> JobSpec {
    JobSpec {
        name: "t".into(),
        index,
        thread_number: index + 1,
        rw,
        rwmixread: 50,
        bs: BS,
        iodepth,
        offset: u64::from(index) * blocks * u64::from(BS),
        size: blocks * u64::from(BS),
        io_limit: Some(io_blocks * u64::from(BS)),
        seed: 0x89 + u64::from(index),
        runtime: Duration::from_secs(3600),
        ..JobSpec::default()
    }
}

fn verifying(mut s: JobSpec, mode: VerifyMode) -> JobSpec {
    s.verify = mode;
    s
}

fn opts() -> RunOptions {
    RunOptions::default()
}

fn mem(blocks: u64, jobs: u64, depth: usize) -> MemEngine {
    MemEngine::new((blocks * jobs) as usize * BS as usize, depth, BS as usize)
}

#[test]
fn counts_every_io_of_a_sized_job() {
    let jobs = vec![
        Job::new(
            spec(RwMode::RandRead, 0, 64, 64, 4),
            Box::new(mem(64, 2, 8)),
        ),
        Job::new(spec(RwMode::Write, 1, 64, 100, 1), Box::new(mem(64, 2, 8))),
    ];
    let r = run(jobs, &opts());
    assert_eq!(r.jobs.len(), 2);
    let d = &r.jobs[0].dirs[0];
    assert_eq!((d.ios, d.issued, d.bytes), (64, 64, 64 * 4096));
    assert_eq!(d.clat.count(), 64);
    assert_eq!(d.slat.count(), 64);
    assert_eq!(d.lat.count(), 64);
    assert!(d.lat.mean_ns() >= d.clat.mean_ns());
    assert_eq!(r.jobs[0].dirs[1].ios, 0);
    assert_eq!(r.jobs[1].dirs[1].ios, 100);
    assert!(r.jobs.iter().all(|j| j.error.is_none()));
    assert!(r.jobs[0].runtime_ms[0] >= 1 && r.jobs[0].runtime_ms[1] == 0);
    assert!(r.jobs[1].runtime_ms[1] >= 1 && r.jobs[1].runtime_ms[0] == 0);
    assert_eq!(r.jobs[0].lat_buckets.iter().sum::<u64>(), 64);
    assert_eq!(r.jobs[0].depth.map.iter().sum::<u64>(), 64);
    assert!(r.jobs[0].depth.total_submit > 0 && r.jobs[0].depth.total_complete > 0);
    let all = r.all_jobs().unwrap();
    assert_eq!((all.dirs[0].ios, all.dirs[1].ios), (64, 100));
    assert!(r.verify.is_none());
}

#[test]
fn each_job_runs_on_its_own_thread() {
    let jobs: Vec<Job> = (0..3)
        .map(|i| {
            Job::new(
                spec(RwMode::RandRead, i, 32, 256, 2),
                Box::new(mem(32, 3, 2)),
            )
        })
        .collect();
    let r = run(jobs, &opts());
    let mut tids: Vec<i32> = r.jobs.iter().map(|j| j.tid).collect();
    assert!(tids.iter().all(|&t| t > 0), "{tids:?}");
    assert!(!tids.contains(&thread::gettid()), "{tids:?}");
    tids.sort_unstable();
    tids.dedup();
    assert_eq!(tids.len(), 3, "one thread per job");
    for j in &r.jobs {
        assert!(j.total_run_time_ms <= j.elapsed.as_millis() as u64 + 1);
    }
}

#[test]
fn randrw_with_crc32c_verifies_without_mismatch() {
    let jobs = vec![
        Job::new(
            verifying(spec(RwMode::RandRw, 0, 64, 64 * 20, 8), VerifyMode::Crc32c),
            Box::new(mem(64, 2, 8)),
        ),
        Job::new(
            verifying(
                spec(RwMode::ReadWrite, 1, 64, 64 * 20, 1),
                VerifyMode::Crc32c,
            ),
            Box::new(mem(64, 2, 8)),
        ),
    ];
    let r = run(jobs, &opts());
    let v = r.verify.unwrap();
    assert_eq!(v.mismatches, 0);
    assert!(v.verified > 100, "only {} blocks verified", v.verified);
    assert_eq!(v.unchecked, 0, "{v:?}");
    assert!(
        r.jobs.iter().all(|j| j.error.is_none()),
        "{:?}",
        r.jobs[0].error
    );
}

#[test]
fn verification_is_per_run() {
    let mut jobs = vec![Job::new(
        verifying(spec(RwMode::Write, 0, 32, 32, 4), VerifyMode::Crc32c),
        Box::new(mem(32, 1, 4)),
    )];
    let w = run_in_place(&mut jobs, &opts(), None);
    assert_eq!(w.jobs[0].dirs[1].ios, 32);
    // fio's verify phase read every written block back; as in fio, its reads are in
    // the read statistics, with their own run time.
    assert_eq!(
        w.verify.unwrap(),
        VerifySummary {
            verified: 32,
            written: 32,
            ..VerifySummary::default()
        }
    );
    assert_eq!(w.jobs[0].dirs[0].ios, 32);
    assert!(w.jobs[0].runtime_ms[0] >= 1);
    // A second run over the same engine reads the blocks back, but only blocks
    // written in the same run are checked.
    jobs[0].spec.rw = RwMode::Read;
    let r = run_in_place(&mut jobs, &opts(), None);
    assert_eq!(r.jobs[0].dirs[0].ios, 32);
    assert_eq!(r.verify.unwrap(), VerifySummary::default());
    assert!(r.passed(), "nothing written, nothing to verify");
}

#[test]
fn md5_sha256_and_pattern_verify_end_to_end() {
    for mode in [VerifyMode::Md5, VerifyMode::Sha256, VerifyMode::Pattern] {
        let mut s = verifying(spec(RwMode::RandWrite, 0, 32, 32, 4), mode);
        s.verify_pattern = vec![0xde, 0xad, 0xbe, 0xef];
        let r = run(vec![Job::new(s, Box::new(mem(32, 1, 4)))], &opts());
        let v = r.verify.unwrap();
        assert_eq!(
            (v.verified, v.mismatches, v.written),
            (32, 0, 32),
            "{mode:?}"
        );
        // Damaged reads are caught in every mode.
        let mut s = verifying(spec(RwMode::RandWrite, 0, 32, 32, 4), mode);
        s.verify_pattern = vec![0x5a];
        let mut e = mem(32, 1, 4);
        e.corrupt_reads(ReadCorruption::FlipLastByte);
        let r = run(vec![Job::new(s, Box::new(e))], &opts());
        assert!(r.verify.unwrap().mismatches > 0, "{mode:?}");
        assert_eq!(r.jobs[0].errno(), ERRNO_EILSEQ, "{mode:?}");
    }
}

#[test]
fn corrupted_reads_are_mismatches_that_stop_the_job() {
    let mut engine = mem(64, 1, 4);
    engine.corrupt_reads(ReadCorruption::FlipLastByte);
    let jobs = vec![Job::new(
        verifying(spec(RwMode::RandRw, 0, 64, 64 * 20, 4), VerifyMode::Crc32c),
        Box::new(engine),
    )];
    let r = run(jobs, &opts());
    let v = r.verify.unwrap();
    assert!(v.mismatches > 0);
    let e = r.jobs[0].error.as_ref().unwrap();
    assert_eq!(e.errno, ERRNO_EILSEQ);
    assert_eq!(e.func, "io_u_queued_complete");
    assert!(e.message.contains("bad crc32c at offset"), "{}", e.message);
}

#[test]
fn verify_phase_after_writes_catches_corruption() {
    let mut engine = mem(64, 1, 4);
    engine.corrupt_reads(ReadCorruption::FlipLastByte);
    let jobs = vec![Job::new(
        verifying(spec(RwMode::RandWrite, 0, 64, 64, 4), VerifyMode::Crc32c),
        Box::new(engine),
    )];
    let r = run(jobs, &opts());
    assert_eq!(r.jobs[0].dirs[1].ios, 64);
    // The reads already in flight when the first mismatch stops the job count too.
    assert!((1..=4).contains(&r.verify.unwrap().mismatches));
    assert_eq!(r.jobs[0].errno(), ERRNO_EILSEQ);
}

#[test]
fn failed_io_stops_the_job_with_eio_as_fio_names_it() {
    let mut engine = mem(16, 1, 1);
    engine.fail_at(5 * 4096);
    let jobs = vec![Job::new(spec(RwMode::Read, 0, 16, 16, 1), Box::new(engine))];
    let r = run(jobs, &opts());
    let e = r.jobs[0].error.as_ref().unwrap();
    assert_eq!(e.errno, ERRNO_EIO);
    assert_eq!(e.func, "io_u error");
    assert!(e.message.contains("read at offset 20480"), "{}", e.message);
    assert!(e
        .verror()
        .ends_with("func=io_u error, error=Input/output error"));
    assert_eq!(r.jobs[0].dirs[0].ios, 5);
    assert_eq!(r.jobs[0].dirs[0].issued, 6, "the failed I/O was issued");
}

#[test]
fn busy_engine_is_retried() {
    let mut engine = mem(16, 1, 4);
    engine.busy_every(3);
    let jobs = vec![Job::new(
        verifying(spec(RwMode::RandWrite, 0, 16, 48, 4), VerifyMode::Crc32c),
        Box::new(engine),
    )];
    let r = run(jobs, &opts());
    assert!(r.jobs[0].error.is_none());
    assert_eq!(r.jobs[0].dirs[1].ios, 48);
}

#[test]
fn stop_flag_ends_a_time_based_run() {
    let mut s = spec(RwMode::RandRead, 0, 16, 0, 2);
    s.io_limit = None;
    let mut jobs = vec![Job::new(s, Box::new(mem(16, 1, 2)))];
    let stop = AtomicBool::new(true);
    let r = run_in_place(&mut jobs, &opts(), Some(&stop));
    assert!(r.jobs[0].error.is_none());
    assert!(r.interrupted);
}

#[test]
fn a_stop_during_the_read_back_says_it_was_cut_short() {
    // 64 fast writes, then a read-back of 64 reads of 50 ms each (3.2 s), stopped
    // half a second in.
    let mut engine = mem(64, 1, 1);
    engine.set_latency(Duration::from_millis(50), Duration::ZERO);
    let mut jobs = vec![Job::new(
        verifying(spec(RwMode::Write, 0, 64, 64, 1), VerifyMode::Crc32c),
        Box::new(engine),
    )];
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = Arc::clone(&stop);
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        s2.store(true, Ordering::Relaxed);
    });
    let r = run_in_place(&mut jobs, &opts(), Some(&stop));
    t.join().unwrap();
    let v = r.verify.unwrap();
    assert!(r.interrupted);
    assert!(v.cut_short, "{v:?}");
    assert_eq!(v.written, 64);
    assert!(v.verified < 64 && v.unchecked == 64 - v.verified, "{v:?}");
    assert!(!v.passed());
}

#[test]
fn runtime_end_of_the_write_phase_still_verifies_every_written_block() {
    // A time-based random write job whose runtime ends the write phase: fio would
    // skip its verify phase; every block written is read back here.
    // Depth 1: no two writes of one block overlap (which would leave its content
    // unknown and unverifiable).
    let mut s = verifying(spec(RwMode::RandWrite, 0, 256, 0, 1), VerifyMode::Crc32c);
    s.io_limit = None;
    s.runtime = Duration::from_millis(30);
    s.time_based = true;
    let mut engine = mem(256, 1, 4);
    engine.set_latency(Duration::ZERO, Duration::from_micros(200));
    let mut jobs = vec![Job::new(s, Box::new(engine))];
    let r = run_in_place(&mut jobs, &opts(), None);
    let v = r.verify.unwrap();
    let writes = r.jobs[0].dirs[1].ios;
    assert!(writes > 0 && v.written == writes, "{v:?}, {writes} writes");
    // Each block written once or more is read back once.
    assert_eq!(v.verified, writes.min(256), "{v:?}");
    assert_eq!(
        r.jobs[0].dirs[0].ios, v.verified,
        "read-back reads are counted"
    );
    assert!(r.passed() && !r.interrupted);
}

#[test]
fn runtime_zero_is_no_limit() {
    let mut engine = mem(64, 1, 2);
    engine.set_latency(Duration::from_millis(1), Duration::ZERO);
    let mut s = spec(RwMode::RandRead, 0, 64, 64, 2);
    s.runtime = Duration::ZERO;
    let r = run(vec![Job::new(s, Box::new(engine))], &opts());
    assert_eq!(r.jobs[0].dirs[0].ios, 64);
    assert!(r.jobs[0].error.is_none());
}

#[test]
fn samples_skip_windows_without_io_of_their_direction() {
    // 16 fast writes (inside the first 500 ms window), then a read-back of 16 slow
    // reads (1.6 s: three windows). The write direction gets its one window's sample
    // and no zeros after it; the reads get theirs.
    let mut engine = mem(16, 1, 1);
    engine.set_latency(Duration::from_millis(100), Duration::from_millis(1));
    let jobs = vec![Job::new(
        verifying(spec(RwMode::Write, 0, 16, 16, 1), VerifyMode::Crc32c),
        Box::new(engine),
    )];
    let r = run(jobs, &opts());
    assert_eq!(r.verify.unwrap().verified, 16);
    let w = &r.jobs[0].dirs[1];
    assert_eq!(w.ios, 16);
    assert_eq!(w.bw_kib_samples.count(), 1, "{:?}", w.bw_kib_samples);
    assert!(w.bw_kib_samples.min() > 0.0, "no zero samples");
    let rd = &r.jobs[0].dirs[0];
    assert!(rd.bw_kib_samples.count() >= 3, "{:?}", rd.bw_kib_samples);
    assert!(rd.iops_samples.min() > 0.0);
}

#[test]
fn progress_is_reported_while_jobs_run() {
    let mut engine = mem(32, 1, 1);
    engine.set_latency(Duration::from_millis(2), Duration::from_millis(2));
    let mut jobs = vec![Job::new(
        verifying(spec(RwMode::Write, 0, 32, 32, 1), VerifyMode::Crc32c),
        Box::new(engine),
    )];
    let mut seen: Vec<Progress> = Vec::new();
    let mut hook = |p: &Progress| seen.push(p.clone());
    let r = run_with(
        &mut jobs,
        &opts(),
        RunControl {
            progress: Some(&mut hook),
            progress_interval: Duration::from_millis(10),
            ..RunControl::default()
        },
    );
    assert!(r.passed());
    assert!(seen.len() >= 2, "{} progress reports", seen.len());
    assert!(seen.iter().any(|p| p.jobs[0].phase == JobPhase::Running));
    assert!(seen.iter().any(|p| p.jobs[0].phase == JobPhase::Verifying));
    let last = seen.last().unwrap();
    assert!(last.jobs[0].bytes[1] > 0 && last.elapsed > Duration::ZERO);
    assert_eq!(last.jobs[0].total_bytes, 2 * 32 * 4096);
}

#[test]
fn status_interval_hands_out_snapshots_and_job_ends_are_told() {
    let mut engine = mem(64, 1, 1);
    engine.set_latency(Duration::from_millis(5), Duration::ZERO);
    let mut jobs = vec![Job::new(spec(RwMode::Read, 0, 64, 64, 1), Box::new(engine))];
    let o = RunOptions {
        status_interval: Some(Duration::from_millis(50)),
        ..opts()
    };
    let mut snapshots = Vec::new();
    let mut on_status = |r: &BenchResult| snapshots.push(r.jobs[0].dirs[0].ios);
    let mut ended = 0;
    let mut on_done = |r: &JobResult| {
        assert_eq!(r.dirs[0].ios, 64);
        ended += 1;
    };
    let r = run_with(
        &mut jobs,
        &o,
        RunControl {
            status: Some(&mut on_status),
            job_done: Some(&mut on_done),
            ..RunControl::default()
        },
    );
    assert_eq!(r.jobs[0].dirs[0].ios, 64);
    assert_eq!(ended, 1);
    assert!(!snapshots.is_empty());
    assert!(snapshots.windows(2).all(|w| w[0] <= w[1]), "{snapshots:?}");
    assert!(snapshots.iter().any(|&n| n > 0 && n < 64), "{snapshots:?}");
}

#[test]
fn a_stonewalled_job_starts_after_the_jobs_before_it() {
    // Job 0 writes a region; job 1, stonewalled, reads it back with verification:
    // every block checks, which it could not if it raced job 0.
    let disk = shared_disk(64 * BS as usize);
    let mut w = verifying(spec(RwMode::RandWrite, 0, 64, 64, 4), VerifyMode::Crc32c);
    w.offset = 0;
    let mut rd = verifying(spec(RwMode::RandRead, 1, 64, 64, 4), VerifyMode::Crc32c);
    rd.offset = 0;
    rd.stonewall = true;
    rd.groupid = 1;
    let mut slow = MemEngine::with_disk(disk.clone(), 4, BS as usize);
    slow.set_latency(Duration::ZERO, Duration::from_millis(2));
    let jobs = vec![
        Job::new(w, Box::new(slow)),
        Job::new(rd, Box::new(MemEngine::with_disk(disk, 4, BS as usize))),
    ];
    let r = run(jobs, &opts());
    assert!(r.passed(), "{:?}", r.jobs[1].error);
    // Job 0's read-back and job 1's reads: each block checked twice.
    assert_eq!(r.verify.unwrap().verified, 128);
    assert_eq!(r.jobs[1].dirs[0].ios, 64);
    // total_run_time_ms is rounded up to the millisecond (as fio's is), so job 1's
    // start computed from it may read up to 1 ms early.
    let started_1 = r.jobs[1].elapsed + Duration::from_millis(1)
        - Duration::from_millis(r.jobs[1].total_run_time_ms).min(r.jobs[1].elapsed);
    assert!(
        started_1 >= r.jobs[0].elapsed,
        "job 1 started at {started_1:?}, before job 0 ended at {:?}",
        r.jobs[0].elapsed
    );
}

#[test]
fn a_cpu_that_does_not_exist_fails_the_job_at_setup() {
    let mut s = spec(RwMode::Read, 0, 16, 16, 1);
    s.cpus = Some(vec![1000]);
    let r = run(vec![Job::new(s, Box::new(mem(16, 1, 1)))], &opts());
    let e = r.jobs[0].error.as_ref().expect("pinning refused");
    assert_eq!(e.func, "cpu_set_affinity");
    assert_eq!(e.errno, ERRNO_EINVAL);
    assert_eq!(r.jobs[0].dirs[0].issued, 0);
    let cpu = thread::allowed_cpus().unwrap()[0];
    let mut ok = spec(RwMode::Read, 0, 16, 16, 1);
    ok.cpus = Some(vec![cpu]);
    let r = run(vec![Job::new(ok, Box::new(mem(16, 1, 1)))], &opts());
    assert!(r.passed(), "{:?}", r.jobs[0].error);
}

#[test]
fn thinktime_and_rate_hold_the_job_back() {
    // Lower bounds only: pauses and caps make a job at least this slow.
    let mut s = spec(RwMode::Read, 0, 16, 10, 1);
    s.thinktime = Duration::from_millis(20);
    s.thinktime_blocks = 2;
    let t = Instant::now();
    let r = run(vec![Job::new(s, Box::new(mem(16, 1, 1)))], &opts());
    assert_eq!(r.jobs[0].dirs[0].ios, 10);
    assert!(
        t.elapsed() >= Duration::from_millis(80),
        "{:?}",
        t.elapsed()
    );
    // 10 writes of 4 KiB at 100 KiB/s: the 10th may start 9 x 40 ms after the first.
    let mut s = spec(RwMode::Write, 0, 16, 10, 4);
    s.rate = [0, 100 << 10, 0];
    let t = Instant::now();
    let r = run(vec![Job::new(s, Box::new(mem(16, 1, 4)))], &opts());
    assert_eq!(r.jobs[0].dirs[1].ios, 10);
    assert!(
        t.elapsed() >= Duration::from_millis(350),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn fsync_flushes_every_n_writes_and_end_fsync_once_more() {
    let mut s = spec(RwMode::Write, 0, 64, 64, 4);
    s.fsync = 8;
    s.end_fsync = true;
    let r = run(vec![Job::new(s, Box::new(mem(64, 1, 4)))], &opts());
    let j = &r.jobs[0];
    assert!(j.error.is_none(), "{:?}", j.error);
    // fio counts the flushes of fsync=N, not the one of end_fsync.
    assert_eq!(j.sync.issued, 8);
    assert_eq!(j.sync.lat.count(), 8);
    assert_eq!(j.dirs[1].ios, 64);
}

#[test]
fn trims_deallocate_their_blocks() {
    for rw in [RwMode::Trim, RwMode::RandTrim] {
        let engine = mem(32, 1, 4);
        engine.disk().fill(0xff);
        let disk = engine.shared();
        let s = spec(rw, 0, 32, 32, 4);
        let r = run(vec![Job::new(s, Box::new(engine))], &opts());
        let j = &r.jobs[0];
        assert_eq!((j.dirs[2].ios, j.dirs[2].bytes), (32, 32 * 4096), "{rw:?}");
        assert!(j.runtime_ms[2] >= 1);
        assert!(disk.lock().unwrap().iter().all(|&b| b == 0), "{rw:?}");
    }
}

#[test]
fn verify_backlog_reads_back_as_it_goes() {
    let mut s = verifying(spec(RwMode::RandWrite, 0, 64, 64, 4), VerifyMode::Crc32c);
    s.verify_backlog = 8;
    let r = run(vec![Job::new(s, Box::new(mem(64, 1, 4)))], &opts());
    let v = r.verify.unwrap();
    assert_eq!((v.verified, v.mismatches, v.unchecked), (64, 0, 0), "{v:?}");
    assert_eq!(r.jobs[0].dirs[0].ios, 64, "each block read back once");
}

/// An engine whose completions show up only every third poll, and which records
/// its idle calls (and whether its previous poll found nothing).
struct Sluggish {
    inner: MemEngine,
    held: Vec<IoCompletion>,
    polls: usize,
    last_poll_empty: bool,
    idles: Arc<AtomicUsize>,
    idle_after_progress: Arc<AtomicBool>,
}

impl IoEngine for Sluggish {
    fn max_outstanding(&self) -> usize {
        self.inner.max_outstanding()
    }
    fn submit(&mut self, tag: u32, req: &IoRequest) -> Result<(), EngineError> {
        self.inner.submit(tag, req)
    }
    fn poll(&mut self, out: &mut Vec<IoCompletion>) -> Result<(), EngineError> {
        self.inner.poll(&mut self.held)?;
        self.polls += 1;
        let release = self.polls.is_multiple_of(3);
        self.last_poll_empty = !release || self.held.is_empty();
        if release {
            out.append(&mut self.held);
        }
        Ok(())
    }
    fn buffer(&mut self, tag: u32) -> &mut [u8] {
        self.inner.buffer(tag)
    }
    fn idle(&mut self, _timeout: Duration) {
        self.idles.fetch_add(1, Ordering::Relaxed);
        if !self.last_poll_empty {
            self.idle_after_progress.store(true, Ordering::Relaxed);
        }
    }
}

#[test]
fn an_engine_idles_only_after_a_round_without_progress() {
    let idles = Arc::new(AtomicUsize::new(0));
    let after_progress = Arc::new(AtomicBool::new(false));
    let engine = Sluggish {
        inner: mem(32, 1, 4),
        held: Vec::new(),
        polls: 0,
        last_poll_empty: true,
        idles: idles.clone(),
        idle_after_progress: after_progress.clone(),
    };
    let jobs = vec![Job::new(
        verifying(spec(RwMode::RandRw, 0, 32, 64, 4), VerifyMode::Crc32c),
        Box::new(engine),
    )];
    let r = run(jobs, &opts());
    assert!(r.jobs[0].error.is_none(), "{:?}", r.jobs[0].error);
    assert!(r.jobs[0].dirs[0].ios + r.jobs[0].dirs[1].ios >= 64);
    assert!(idles.load(Ordering::Relaxed) > 0, "never idled");
    assert!(
        !after_progress.load(Ordering::Relaxed),
        "idled right after a poll that completed I/Os"
    );
}

//! The fio JSON that `nvmf-bench --output-format=json` writes, read by a fio-JSON
//! consumer (`tests/fio_json`: the fields and arithmetic tools built on fio's JSON
//! rely on), carries the numbers of the run that produced it.

mod fio_json;

use fio_json::FioReport;
use nvmf_bench::invocation::Invocation;
use nvmf_bench::report::render_json;
use nvmf_bench::{run, shared_disk, Job, MemEngine};

#[test]
fn fio_json_consumer_reads_the_numbers_of_the_run() {
    let namespace_bytes: u64 = 1 << 20;
    let inv = Invocation::parse(
        [
            "nvmf-bench",
            "--name=fio-test",
            "--rw=randrw",
            "--rwmixread=70",
            "--bs=4k",
            "--iodepth=8",
            "--numjobs=2",
            "--size=512k",
            "--offset_increment=512k",
            "--io_size=8m",
            "--verify=crc32c",
            "--output-format=json",
        ]
        .map(String::from)
        .to_vec(),
    )
    .expect("valid options");
    let args = &inv.run;
    let disk = shared_disk(namespace_bytes as usize);
    let jobs: Vec<Job> = inv
        .job_specs(namespace_bytes)
        .expect("valid job specs")
        .into_iter()
        .map(|spec| {
            let engine =
                MemEngine::with_disk(disk.clone(), spec.iodepth as usize, spec.bs as usize);
            Job::new(spec, Box::new(engine))
        })
        .collect();
    let result = run(jobs, &args.run_options());
    assert!(result.jobs.iter().all(|j| j.error.is_none()));
    assert_eq!(result.verify.expect("verifying").mismatches, 0);

    // As fio may print warnings before its JSON, so may anything in front of a consumer.
    let json = render_json(&result, &args.fio_global_options());
    let report = FioReport::parse(&format!("fio: a warning line\n{json}")).expect("fio JSON");

    assert!(!report.fio_version.is_empty());
    assert!(report.timestamp > 1_700_000_000, "{}", report.timestamp);
    assert!(!report.time.is_empty());
    assert_eq!(report.jobs.len(), 2, "one entry per job of --numjobs=2");
    for (job, ran) in report.jobs.iter().zip(&result.jobs) {
        assert_eq!(job.jobname, "fio-test");
        assert_eq!(job.groupid, 0);
        assert_eq!(job.error, 0);
        assert_eq!(
            job.job_options.get("rw").map(String::as_str),
            Some("randrw")
        );
        assert_eq!(
            job.job_options.get("rwmixread").map(String::as_str),
            Some("70")
        );
        assert_eq!(
            job.job_options.get("iodepth").map(String::as_str),
            Some("8")
        );
        assert_eq!(job.bs_bytes(), Some(4096));
        assert_eq!(job.job_runtime, ran.total_run_time_ms);
        for (d, rw) in ["read", "write"].into_iter().enumerate() {
            let problems = job.check_dir(rw);
            assert!(problems.is_empty(), "{problems:#?}");
            let got = job.dir(rw);
            let want = &ran.dirs[d];
            assert!(want.ios > 0, "{rw}: the run did no I/O");
            assert_eq!(got.total_ios, want.issued, "{rw}");
            assert_eq!(got.io_bytes, want.bytes, "{rw}");
            assert_eq!(got.clat_ns.n, want.clat.count(), "{rw}");
            assert_eq!(got.clat_ns.min, want.clat.min_ns(), "{rw}");
            assert_eq!(got.clat_ns.max, want.clat.max_ns(), "{rw}");
            for p in [50.0, 99.0, 99.9] {
                assert_eq!(
                    got.clat_ns.percentile_ns(p),
                    Some(want.clat.percentile_ns(p)),
                    "{rw} p{p}"
                );
            }
            let s = job.summary(rw).expect("the direction did I/O");
            let secs = got.runtime as f64 / 1000.0;
            assert!((s.iops - want.ios as f64 / secs).abs() < 1.0, "{rw}: {s:?}");
            assert!((s.clat_mean_us - want.clat.mean_ns() / 1000.0).abs() < 1e-6);
            assert!(
                s.p50_us <= s.p99_us && s.p99_us <= s.p99_9_us,
                "{rw}: {s:?}"
            );
            println!("{} {rw:5} {s:?}", job.jobname);
        }
        // The mix: 30 % writes, within what 8 MiB of 4 KiB I/Os can deviate (the
        // reads also hold the read-back of what was written, as fio counts them).
        let share = job.write.io_bytes as f64 / (8 << 20) as f64;
        assert!((0.2..0.4).contains(&share), "write share {share}");
        assert_eq!(job.trim.total_ios, 0);
    }
    // --io_size=8m per job: each job moved 8 MiB, and read back at most its writes.
    for job in &report.jobs {
        let total = job.read.io_bytes + job.write.io_bytes;
        assert!(
            total >= 8 << 20 && total <= (8 << 20) + job.write.io_bytes,
            "{total}"
        );
    }
}

#[test]
fn fio_json_consumer_refuses_what_is_not_fio_json() {
    assert!(FioReport::parse("fio: no JSON here").is_err());
    assert!(FioReport::parse("{\"fio version\": \"fio-3.33\"}").is_err());
    let no_clat = r#"{"fio version": "fio-3.33", "timestamp": 1, "time": "x",
        "jobs": [{"jobname": "j", "groupid": 0, "error": 0, "job options": {},
        "job_runtime": 1, "read": {}, "write": {}, "trim": {}}]}"#;
    let e = FioReport::parse(no_clat).unwrap_err();
    assert!(e.contains("io_bytes"), "{e}");
    assert_eq!(fio_json::parse_size("4k"), Some(4096));
    assert_eq!(fio_json::parse_size("128K"), Some(128 << 10));
    assert_eq!(fio_json::parse_size("4096"), Some(4096));
    assert_eq!(fio_json::parse_size("1m"), Some(1 << 20));
    assert_eq!(fio_json::parse_size("four"), None);
}

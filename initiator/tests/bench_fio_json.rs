//! The fio JSON that `nvmf-bench --output-format=json` writes is read by the existing
//! fio-JSON consumer, `shared/linux-peer/summarize.py`, which reads
//! `RESULTS_DIR/out/<VM>/fio-*.json` and prints IOPS and clat percentiles per
//! direction.

use std::path::PathBuf;
use std::process::Command;

use clap::Parser;
use nvmf_initiator::bench::report::render_json;
use nvmf_initiator::bench::{run, shared_disk, BenchArgs, Job, MemEngine};

fn summarize_py() -> PathBuf {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/linux-peer/summarize.py");
    assert!(
        path.is_file(),
        "fio-JSON consumer {} is missing: this test needs the shared linux-peer tools",
        path.display()
    );
    path
}

#[test]
fn summarize_py_reads_our_fio_json() {
    let script = summarize_py();
    let namespace_bytes: u64 = 1 << 20;
    let args = BenchArgs::parse_from([
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
    ]);
    let disk = shared_disk(namespace_bytes as usize);
    let jobs: Vec<Job> = args
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

    let json = render_json(&result, &args.fio_global_options());
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("out").join("A");
    std::fs::create_dir_all(&out).expect("create out/A");
    std::fs::write(out.join("fio-test.json"), &json).expect("write fio-test.json");

    let output = Command::new("python3")
        .arg(&script)
        .arg(dir.path())
        .output()
        .expect("python3 must be installed to run summarize.py");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "summarize.py failed: {stderr}\n{stdout}"
    );
    assert!(!stdout.contains("unreadable"), "{stdout}");

    // summarize.py reports jobs[0]: check it printed the numbers we wrote.
    let doc: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    for rw in ["read", "write"] {
        let s = &doc["jobs"][0][rw];
        assert!(s["total_ios"].as_u64().unwrap() > 0, "{rw}: no I/O");
        let iops = s["iops"].as_f64().unwrap();
        let p99_ns = s["clat_ns"]["percentile"]["99.000000"].as_f64().unwrap();
        let line = stdout
            .lines()
            .find(|l| l.contains(&format!(" {rw:5} iops=")))
            .unwrap_or_else(|| panic!("no {rw} line in:\n{stdout}"));
        assert!(line.starts_with("out/A/fio-test.json"), "{line}");
        assert!(
            line.contains(&format!("iops={iops:9.1}")),
            "{line} vs iops {iops}"
        );
        assert!(
            line.contains(&format!("p99={:>8}", format!("{:.1}", p99_ns / 1000.0))),
            "{line} vs p99 {p99_ns} ns"
        );
        assert!(line.contains("errors=0"), "{line}");
        println!("{line}");
    }
}

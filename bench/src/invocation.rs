//! The jobs of one `nvmf-bench` invocation, as fio reads its command line and job
//! files: options before the first `--name` are global, each `--name` starts a job;
//! each job file (a positional argument, [`crate::jobfile`]) adds its `[job]`
//! sections, its `[global]` options applying to the jobs after them and overriding
//! the command line's; several files run one after another (a stonewall between
//! them). Each job is its global options followed by its own, parsed as one
//! [`BenchArgs`] (a later option wins).
//!
//! Options that describe the whole run (the target, the output, fault injection,
//! `group_reporting`...) may be given only among the global ones; an option
//! nvmf-bench does not know is refused by name, never ignored. The options are kept
//! as given for fio's JSON (`global options`, `job options`) and `--showcmd`.

use std::collections::HashMap;
use std::path::PathBuf;

use clap::{CommandFactory, Parser};

use crate::jobfile;
use crate::jobspec::JobSpec;
use crate::options::{BenchArgs, OptionsError};

/// Options of one job, as fio has them per job (everything else applies to the
/// whole run and may only be global).
pub const JOB_OPTIONS: &[&str] = &[
    "name",
    "rw",
    "rwmixread",
    "bs",
    "iodepth",
    "numjobs",
    "runtime",
    "time_based",
    "size",
    "io_size",
    "offset",
    "offset_increment",
    "randseed",
    "ramp_time",
    "verify",
    "thread",
    "direct",
    "ioengine",
    "cpus_allowed",
    "cpus_allowed_policy",
    "stonewall",
    "new_group",
    "description",
    "rate",
    "rate_iops",
    "thinktime",
    "thinktime_blocks",
    "bssplit",
    "random_distribution",
    "fsync",
    "end_fsync",
    "percentile_list",
    "verify_pattern",
    "verify_backlog",
    "write_lat_log",
    "write_bw_log",
    "write_iops_log",
    "log_avg_msec",
];

/// Options of the program rather than of jobs (fio's own command-line options): not
/// echoed among the JSON's options.
pub const PROGRAM_OPTIONS: &[&str] = &[
    "output-format",
    "output",
    "eta",
    "showcmd",
    "status-interval",
    "log-format",
    "plot",
];

/// Options that apply to the run wherever they are given on the command line (fio's
/// program options, and `group_reporting`, which fio users put after `--name`).
pub fn hoisted(name: &str) -> bool {
    PROGRAM_OPTIONS.contains(&name) || name == "group_reporting"
}

/// fio options often met in job files that nvmf-bench does not take, with the fix.
fn hint(key: &str) -> Option<&'static str> {
    Some(match key {
        "filename" | "directory" | "filename_format" | "nrfiles" => {
            "the namespace is the target's: give --traddr, --subnqn and --nsid (or use \
             the embedded target, --embedded-size)"
        }
        "iodepth_batch" | "iodepth_batch_complete" | "iodepth_low" => {
            "each job submits up to its iodepth at once"
        }
        "norandommap" | "randrepeat" => "random patterns use fio's random map, seeded by randseed",
        "unlink" | "create_on_open" | "fallocate" | "invalidate" => {
            "there are no files on the host side"
        }
        _ => return None,
    })
}

/// Why an invocation was refused, and the exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvocationError {
    /// The whole message.
    pub message: String,
    /// The exit status (2 for usage errors, as clap's).
    pub code: i32,
}

impl std::fmt::Display for InvocationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

fn usage(message: String) -> InvocationError {
    InvocationError { message, code: 2 }
}

/// What the command line knows of one option.
#[derive(Debug, Clone)]
struct OptInfo {
    name: String,
    takes_value: bool,
    value_optional: bool,
}

fn option_table() -> HashMap<String, OptInfo> {
    let mut cmd = BenchArgs::command();
    cmd.build();
    let mut t = HashMap::new();
    for a in cmd.get_arguments() {
        let Some(long) = a.get_long() else { continue };
        let range = a.get_num_args();
        let info = OptInfo {
            name: long.to_string(),
            takes_value: a.get_action().takes_values(),
            value_optional: range.is_some_and(|r| r.min_values() == 0),
        };
        t.insert(long.to_string(), info.clone());
        for alias in a.get_all_aliases().unwrap_or_default() {
            t.insert(alias.to_string(), info.clone());
        }
    }
    t
}

/// One option as given: its canonical name and value.
pub type Given = (String, Option<String>);

/// A job before parsing: the global options that apply, its own, where it comes
/// from, whether a job file boundary stonewalls it, its section's name.
type RawJob = (Vec<Given>, Vec<Given>, String, bool, Option<String>);

/// One job section: its options as given (its own, after the global ones) and where
/// it comes from.
#[derive(Debug, Clone)]
pub struct JobSection {
    /// The section's options parsed (global ones, then its own).
    pub args: BenchArgs,
    /// Its own options as given (fio's JSON `job options`).
    pub given: Vec<Given>,
    /// The global options that apply to it, as given.
    pub globals: Vec<Given>,
    /// `command line` or `FILE [section]`.
    pub origin: String,
    /// The first job of a later job file (fio puts a stonewall between files).
    pub file_stonewall: bool,
    /// The section's name from a job file (`--name` of the job).
    pub section_name: Option<String>,
}

/// Every job of an invocation; see the module docs.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The run-wide options (the first job's parse).
    pub run: BenchArgs,
    /// The job sections, in order (before `--numjobs`).
    pub sections: Vec<JobSection>,
    /// The global options as given (fio's JSON `global options`).
    pub globals: Vec<Given>,
}

fn token(name: &str, value: &Option<String>) -> String {
    match value {
        Some(v) => format!("--{name}={v}"),
        None => format!("--{name}"),
    }
}

/// Resolves `key` (as written, with or without dashes) to its option, or the error.
fn lookup<'t>(
    table: &'t HashMap<String, OptInfo>,
    key: &str,
    at: &str,
) -> Result<&'t OptInfo, InvocationError> {
    let k = key.trim_start_matches('-');
    table.get(k).ok_or_else(|| {
        let fix = hint(k)
            .unwrap_or("remove it; `nvmf-bench --help` lists the fio options nvmf-bench takes");
        usage(format!(
            "nvmf-bench: {at}: fio option '{k}' is not supported by nvmf-bench: {fix}"
        ))
    })
}

impl Invocation {
    /// The invocation of this process's arguments. `--help` and `--version` print and
    /// exit (clap's).
    ///
    /// Errors: see [`Invocation::parse`].
    pub fn from_env() -> Result<Self, InvocationError> {
        Self::parse(std::env::args().collect())
    }

    /// The invocation of `argv` (the program name first).
    ///
    /// Errors: an unknown option (named), a missing value, a value an option refuses
    /// (clap's message, with the job file and section), a run-wide option inside a
    /// job, a job file that cannot be read or has no job.
    pub fn parse(argv: Vec<String>) -> Result<Self, InvocationError> {
        let rest = argv.get(1..).unwrap_or_default();
        if rest
            .iter()
            .any(|a| matches!(a.as_str(), "-h" | "--help" | "-V" | "--version"))
        {
            // clap prints the help or version and exits.
            BenchArgs::parse_from(&argv);
        }
        let table = option_table();
        // Tokens: (name, value) per option; job files.
        let mut globals: Vec<Given> = Vec::new();
        let mut cli_jobs: Vec<Vec<Given>> = Vec::new();
        let mut files: Vec<PathBuf> = Vec::new();
        let mut i = 0;
        while i < rest.len() {
            let a = &rest[i];
            i += 1;
            if a == "--" {
                files.extend(rest[i..].iter().map(PathBuf::from));
                break;
            }
            if !a.starts_with('-') || a == "-" {
                files.push(PathBuf::from(a));
                continue;
            }
            let (key, inline) = match a.split_once('=') {
                Some((k, v)) => (k, Some(v.to_string())),
                None => (a.as_str(), None),
            };
            let info = lookup(&table, key, "command line")?;
            let value = match inline {
                Some(v) => Some(v),
                None if info.takes_value && !info.value_optional => {
                    let v = rest.get(i).cloned().ok_or_else(|| {
                        usage(format!(
                            "nvmf-bench: --{} needs a value: --{}=VALUE",
                            info.name, info.name
                        ))
                    })?;
                    i += 1;
                    Some(v)
                }
                None => None,
            };
            if info.name == "jobfile" {
                continue;
            }
            if info.name == "name" {
                cli_jobs.push(Vec::new());
            }
            if hoisted(&info.name) {
                globals.push((info.name.clone(), value));
                continue;
            }
            match cli_jobs.last_mut() {
                Some(job) => job.push((info.name.clone(), value)),
                None => globals.push((info.name.clone(), value)),
            }
        }
        let mut raw: Vec<RawJob> = Vec::new();
        for job in cli_jobs {
            raw.push((globals.clone(), job, "command line".into(), false, None));
        }
        let mut all_globals = globals.clone();
        for (f, path) in files.iter().enumerate() {
            let jf = jobfile::parse_file(path).map_err(|m| usage(format!("nvmf-bench: {m}")))?;
            let mut file_globals = globals.clone();
            let mut first = true;
            let mut seen_job = false;
            for s in &jf.sections {
                let mut opts = Vec::new();
                for o in &s.opts {
                    let info = lookup(&table, &o.key, &o.at)?;
                    if info.name == "name" {
                        return Err(usage(format!(
                            "nvmf-bench: {}: a job file names its jobs by their [section]; \
                             remove name=",
                            o.at
                        )));
                    }
                    if info.takes_value && !info.value_optional && o.value.is_none() {
                        return Err(usage(format!(
                            "nvmf-bench: {}: {} needs a value: {}=VALUE",
                            o.at, info.name, info.name
                        )));
                    }
                    opts.push((info.name.clone(), o.value.clone(), o.at.clone()));
                }
                if s.global {
                    for (n, v, at) in opts {
                        if seen_job && !JOB_OPTIONS.contains(&n.as_str()) {
                            return Err(usage(format!(
                                "nvmf-bench: {at}: {n} applies to the whole run; set it in the \
                                 first [global] section or on the command line"
                            )));
                        }
                        file_globals.push((n.clone(), v.clone()));
                        all_globals.push((n, v));
                    }
                    continue;
                }
                seen_job = true;
                let own: Vec<Given> = opts.into_iter().map(|(n, v, _)| (n, v)).collect();
                raw.push((
                    file_globals.clone(),
                    own,
                    format!("{} [{}]", path.display(), s.name),
                    f > 0 && first,
                    Some(s.name.clone()),
                ));
                first = false;
            }
            if !seen_job {
                return Err(usage(format!(
                    "nvmf-bench: {}: no job in the file; add a [job] section",
                    path.display()
                )));
            }
        }
        // Without --name or a job file, the options make the one job (fio's options
        // are then all the job's own).
        let implicit = raw.is_empty();
        let single = raw.len() <= 1;
        if implicit {
            raw.push((
                Vec::new(),
                globals.clone(),
                "command line".into(),
                false,
                None,
            ));
            all_globals.clear();
        }
        let mut sections = Vec::with_capacity(raw.len());
        for (g, own, origin, file_stonewall, section_name) in raw {
            // With one job, its options may be anything; with several, only job
            // options, so that the run's target and output are one.
            if !implicit && !single {
                if let Some((n, _)) = own
                    .iter()
                    .find(|(n, _)| !JOB_OPTIONS.contains(&n.as_str()) && !hoisted(n))
                {
                    return Err(usage(format!(
                        "nvmf-bench: {origin}: --{n} applies to the whole run; give it before \
                         the first --name (or in [global])"
                    )));
                }
            }
            let mut args = vec!["nvmf-bench".to_string()];
            args.extend(g.iter().map(|(n, v)| token(n, v)));
            if let Some(s) = &section_name {
                args.push(format!("--name={s}"));
            }
            args.extend(own.iter().map(|(n, v)| token(n, v)));
            let parsed = BenchArgs::try_parse_from(&args).map_err(|e| {
                let msg = e.render().to_string();
                let msg = if origin == "command line" {
                    msg
                } else {
                    format!("nvmf-bench: {origin}: {msg}")
                };
                InvocationError {
                    message: msg,
                    code: e.exit_code(),
                }
            })?;
            sections.push(JobSection {
                args: parsed,
                given: own,
                globals: g,
                origin,
                file_stonewall,
                section_name,
            });
        }
        let mut run = sections[0].args.clone();
        run.group_reporting = sections.iter().any(|s| s.args.group_reporting);
        Ok(Invocation {
            run,
            sections,
            globals: all_globals,
        })
    }

    /// The job specs of every section for a namespace of `namespace_bytes` bytes:
    /// `--numjobs` clones each, numbered from 1 across the run (fio's
    /// `thread_number`), a new reporting group at each `stonewall`/`new_group`, the
    /// options as given attached.
    ///
    /// Errors: a section's [`BenchArgs::job_specs`] error, prefixed with where it came
    /// from when that is a job file.
    pub fn job_specs(&self, namespace_bytes: u64) -> Result<Vec<JobSpec>, OptionsError> {
        let mut out: Vec<JobSpec> = Vec::new();
        let mut group = 0;
        for (k, s) in self.sections.iter().enumerate() {
            let specs = s.args.job_specs(namespace_bytes).map_err(|e| {
                if s.origin == "command line" {
                    e
                } else {
                    OptionsError::Conflict(format!("{}: {e}", s.origin))
                }
            })?;
            let stonewall = s.args.fio.stonewall || s.file_stonewall;
            if k > 0 && (stonewall || s.args.fio.new_group) {
                group += 1;
            }
            for mut spec in specs {
                spec.thread_number = out.len() as u32 + 1;
                spec.groupid = group;
                spec.stonewall = stonewall && spec.index == 0 && k > 0;
                if let Some(cpus) = &s.args.fio.cpus_allowed {
                    if s.args.fio.cpus_allowed_policy == crate::fio_args::CpusPolicy::Split {
                        // fio splits by the job's number in the whole run.
                        let n = (spec.thread_number - 1) as usize;
                        spec.cpus = Some(vec![cpus[n % cpus.len()]]);
                    }
                }
                let mut given = s.given.clone();
                given.retain(|(n, _)| !PROGRAM_OPTIONS.contains(&n.as_str()));
                spec.given = given;
                out.push(spec);
            }
        }
        Ok(out)
    }

    /// The global options as given, without fio's program options (JSON `global
    /// options`).
    pub fn global_options(&self) -> Vec<Given> {
        self.globals
            .iter()
            .filter(|(n, _)| !PROGRAM_OPTIONS.contains(&n.as_str()))
            .cloned()
            .collect()
    }

    /// fio's `--showcmd`: the jobs as one command line, `nvmf-bench --opt=value ...
    /// --name=job --opt ... ` (each option followed by a space, as fio prints them).
    pub fn showcmd(&self) -> String {
        let mut out = String::from("nvmf-bench ");
        let mut opt = |n: &str, v: &Option<String>| {
            if n == "showcmd" {
                return;
            }
            out.push_str(&token(n, v));
            out.push(' ');
        };
        for (n, v) in &self.globals {
            opt(n, v);
        }
        for s in &self.sections {
            if let Some(name) = &s.section_name {
                opt("name", &Some(name.clone()));
            }
            for (n, v) in &s.given {
                opt(n, v);
            }
        }
        out.push('\n');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv(args: &[&str]) -> Result<Invocation, InvocationError> {
        Invocation::parse(
            std::iter::once("nvmf-bench")
                .chain(args.iter().copied())
                .map(String::from)
                .collect(),
        )
    }

    #[test]
    fn one_job_from_plain_options_keeps_them_as_its_own() {
        let i = inv(&[
            "--rw",
            "randread",
            "--bs=4k",
            "--time_based",
            "--numjobs",
            "2",
        ])
        .unwrap();
        assert_eq!(i.sections.len(), 1);
        assert!(i.global_options().is_empty());
        let specs = i.job_specs(1 << 30).unwrap();
        assert_eq!(specs.len(), 2);
        assert_eq!(
            specs[0].given,
            vec![
                ("rw".to_string(), Some("randread".to_string())),
                ("bs".into(), Some("4k".into())),
                ("time_based".into(), None),
                ("numjobs".into(), Some("2".into())),
            ]
        );
        assert_eq!((specs[1].thread_number, specs[1].index), (2, 1));
    }

    #[test]
    fn names_split_the_command_line_into_jobs() {
        let i = inv(&[
            "--rw=read",
            "--output-format=json",
            "--name=a",
            "--bs=8k",
            "--name=b",
            "--stonewall",
            "--rw=write",
        ])
        .unwrap();
        assert_eq!(i.sections.len(), 2);
        assert_eq!(
            i.global_options(),
            vec![("rw".to_string(), Some("read".to_string()))]
        );
        let s = i.job_specs(1 << 30).unwrap();
        assert_eq!((s[0].name.as_str(), s[0].bs, s[0].groupid), ("a", 8192, 0));
        assert_eq!(
            (s[1].name.as_str(), s[1].rw.fio_name(), s[1].groupid),
            ("b", "write", 1)
        );
        assert!(s[1].stonewall && !s[0].stonewall);
        assert_eq!(s[1].given[0], ("name".to_string(), Some("b".to_string())));
        assert_eq!(
            i.showcmd(),
            "nvmf-bench --rw=read --output-format=json --name=a --bs=8k --name=b --stonewall --rw=write \n"
        );
        // A run-wide option inside one of several jobs is refused; program options and
        // group_reporting apply wherever they are.
        let e = inv(&["--name=a", "--name=b", "--traddr=10.0.0.1"]).unwrap_err();
        assert!(
            e.message.contains("--traddr applies to the whole run"),
            "{e}"
        );
        let one = inv(&[
            "--name=a",
            "--traddr=10.0.0.1",
            "--subnqn=x",
            "--group_reporting",
        ]);
        assert_eq!(one.unwrap().run.traddr.as_deref(), Some("10.0.0.1"));
        let two = inv(&["--name=a", "--output-format=json", "--name=b"]).unwrap();
        assert_eq!(two.run.output_format, crate::OutputFormat::Json);
    }

    #[test]
    fn job_files_groups_globals_and_unknown_options() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("two.fio");
        std::fs::write(
            &f,
            "[global]\nioengine=nvmf-rdma\nsize=1m\ntime_based\nruntime=1\n\n[seq]\nrw=read\nnumjobs=2\n\n[rand]\nnew_group\nrw=randwrite\niodepth=4\n",
        )
        .unwrap();
        let i = inv(&["--group_reporting", f.to_str().unwrap()]).unwrap();
        assert!(i.run.group_reporting);
        let s = i.job_specs(16 << 20).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(
            s.iter().map(|j| j.groupid).collect::<Vec<_>>(),
            vec![0, 0, 1]
        );
        assert_eq!(s[2].name, "rand");
        assert!(!s[2].stonewall, "new_group alone does not wait");
        assert_eq!(s[2].iodepth, 4);
        assert_eq!(s[0].size, 1 << 20);
        assert_eq!(
            s[2].given,
            vec![
                ("new_group".to_string(), None),
                ("rw".into(), Some("randwrite".into())),
                ("iodepth".into(), Some("4".into()))
            ]
        );
        assert_eq!(
            i.global_options(),
            vec![
                ("group_reporting".to_string(), None),
                ("ioengine".into(), Some("nvmf-rdma".into())),
                ("size".into(), Some("1m".into())),
                ("time_based".into(), None),
                ("runtime".into(), Some("1".into())),
            ]
        );
        assert!(i.showcmd().starts_with(
            "nvmf-bench --group_reporting --ioengine=nvmf-rdma --size=1m --time_based --runtime=1 --name=seq --rw=read --numjobs=2 --name=rand --new_group"
        ), "{}", i.showcmd());
        std::fs::write(&f, "[j]\nrw=read\nfilename=/dev/nvme0n1\n").unwrap();
        let e = inv(&[f.to_str().unwrap()]).unwrap_err();
        assert!(
            e.message
                .contains("two.fio:3: fio option 'filename' is not supported")
                && e.message.contains("--traddr"),
            "{e}"
        );
        std::fs::write(&f, "[j]\nioengine=libaio\n").unwrap();
        let e = inv(&[f.to_str().unwrap()]).unwrap_err();
        assert!(
            e.message.contains("[j]") && e.message.contains("nvmf-rdma"),
            "{e}"
        );
        std::fs::write(&f, "[i]\n[j]\ntraddr=10.0.0.1\n").unwrap();
        assert!(inv(&[f.to_str().unwrap()])
            .unwrap_err()
            .message
            .contains("whole run"));
        let e = inv(&["--frobnicate=1"]).unwrap_err();
        assert!(e.message.contains("'frobnicate' is not supported"), "{e}");
        assert_eq!(e.code, 2);
    }

    #[test]
    fn a_second_job_file_waits_for_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.fio");
        let b = dir.path().join("b.fio");
        std::fs::write(&a, "[one]\nrw=read\n").unwrap();
        std::fs::write(&b, "[two]\nrw=write\n").unwrap();
        let i = inv(&[a.to_str().unwrap(), b.to_str().unwrap()]).unwrap();
        let s = i.job_specs(1 << 20).unwrap();
        assert!(!s[0].stonewall && s[1].stonewall);
        assert_eq!(s[1].groupid, 1);
    }
}

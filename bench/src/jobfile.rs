//! fio's job file format (init.c `__parse_jobs_ini`): an INI file of sections, each
//! `[name]` a job except those named `global` (options for the jobs after it), with
//! one option a line, `key=value` or a bare `key` for a flag. A line whose first
//! visible character is `;` or `#` is a comment; `include FILE` reads the lines of
//! another file (relative to this one) into the current section; `${VAR}` is
//! replaced by the environment variable VAR.
//!
//! Parsing gives the sections and their options with line numbers; which options
//! exist and what they mean is [`crate::invocation`]'s business.

use std::path::{Path, PathBuf};

/// One option line of a job file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileOpt {
    /// The option's name as written.
    pub key: String,
    /// Its value; `None` for a bare flag.
    pub value: Option<String>,
    /// Where it was written: `file:line`.
    pub at: String,
}

/// One `[section]` of a job file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// The name between the brackets.
    pub name: String,
    /// Whether it is a `[global]` section (fio: a name starting with `global`).
    pub global: bool,
    /// Its options, in order.
    pub opts: Vec<FileOpt>,
    /// Where it starts: `file:line`.
    pub at: String,
}

/// A parsed job file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFile {
    /// The file.
    pub path: PathBuf,
    /// Its sections, in order.
    pub sections: Vec<Section>,
}

/// How deep `include` may nest.
const MAX_INCLUDE_DEPTH: usize = 8;

fn expand_env(line: &str, at: &str) -> Result<String, String> {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let Some(end) = after.find('}') else {
            return Err(format!("{at}: '${{' without a closing '}}'"));
        };
        let var = &after[..end];
        match std::env::var(var) {
            Ok(v) => out.push_str(&v),
            Err(_) => {
                return Err(format!(
                    "{at}: ${{{var}}} names an environment variable that is not set; \
                     export {var} or write the value"
                ))
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn is_comment(line: &str) -> bool {
    matches!(
        line.trim_start().chars().next(),
        None | Some(';') | Some('#')
    )
}

/// Reads the option lines of `path` (an included file) into `opts`.
fn read_lines(
    path: &Path,
    depth: usize,
    sections: &mut Vec<Section>,
    in_include: bool,
) -> Result<(), String> {
    if depth > MAX_INCLUDE_DEPTH {
        return Err(format!(
            "{}: includes nest more than {MAX_INCLUDE_DEPTH} deep (an include loop?)",
            path.display()
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "cannot read the job file {}: {e}; give the path of an fio job file",
            path.display()
        )
    })?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    for (n, raw) in text.lines().enumerate() {
        let at = format!("{}:{}", path.display(), n + 1);
        if is_comment(raw) {
            continue;
        }
        let line = expand_env(raw.trim(), &at)?;
        if let Some(name) = line.strip_prefix('[') {
            if in_include {
                return Err(format!("{at}: no new sections in included files (as fio)"));
            }
            let Some(name) = name.strip_suffix(']') else {
                return Err(format!("{at}: {line:?} opens a section without closing it"));
            };
            let name = name.trim().to_string();
            if name.is_empty() {
                return Err(format!("{at}: a section needs a name: [job1]"));
            }
            sections.push(Section {
                global: name.starts_with("global"),
                name,
                opts: Vec::new(),
                at,
            });
            continue;
        }
        if let Some(file) = line.strip_prefix("include ") {
            let file = file.trim();
            let p = if Path::new(file).is_absolute() {
                PathBuf::from(file)
            } else {
                dir.join(file)
            };
            if sections.is_empty() {
                return Err(format!("{at}: include before any [section]"));
            }
            read_lines(&p, depth + 1, sections, true)
                .map_err(|e| format!("{at}: in the file it includes: {e}"))?;
            continue;
        }
        let Some(section) = sections.last_mut() else {
            return Err(format!(
                "{at}: option {line:?} comes before any [section]; put it under [global] \
                 or a [job] section"
            ));
        };
        let (key, value) = match line.split_once('=') {
            Some((k, v)) => (k.trim().to_string(), Some(v.trim().to_string())),
            None => (line.clone(), None),
        };
        if key.is_empty() {
            return Err(format!("{at}: {line:?} has no option name"));
        }
        section.opts.push(FileOpt { key, value, at });
    }
    Ok(())
}

/// Reads and parses the job file at `path`.
///
/// Errors: the file (or an included one) cannot be read, a line outside any section,
/// a malformed section header, an unset `${VAR}`, an include loop.
pub fn parse_file(path: &Path) -> Result<JobFile, String> {
    let mut sections = Vec::new();
    read_lines(path, 0, &mut sections, false)?;
    Ok(JobFile {
        path: path.to_path_buf(),
        sections,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_options_comments_includes_and_variables() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("common.inc"), "bs=8k\n; note\n").unwrap();
        let f = dir.path().join("j.fio");
        std::env::set_var("NVMF_BENCH_TEST_DEPTH", "16");
        std::fs::write(
            &f,
            "; a comment\n[global]\nioengine=nvmf-rdma\n  time_based\n\n[a]\nrw = randread\n\
             # another\ninclude common.inc\niodepth=${NVMF_BENCH_TEST_DEPTH}\n[b]\nstonewall\n",
        )
        .unwrap();
        let j = parse_file(&f).unwrap();
        assert_eq!(j.sections.len(), 3);
        assert!(j.sections[0].global && !j.sections[1].global);
        let opts = |s: &Section| -> Vec<(String, Option<String>)> {
            s.opts
                .iter()
                .map(|o| (o.key.clone(), o.value.clone()))
                .collect()
        };
        assert_eq!(
            opts(&j.sections[0]),
            vec![
                ("ioengine".into(), Some("nvmf-rdma".into())),
                ("time_based".into(), None)
            ]
        );
        assert_eq!(
            opts(&j.sections[1]),
            vec![
                ("rw".into(), Some("randread".into())),
                ("bs".into(), Some("8k".into())),
                ("iodepth".into(), Some("16".into()))
            ]
        );
        assert_eq!(j.sections[2].name, "b");
        assert!(
            j.sections[1].opts[0].at.ends_with("j.fio:7"),
            "{}",
            j.sections[1].opts[0].at
        );
    }

    #[test]
    fn malformed_files_are_refused_with_where() {
        let dir = tempfile::tempdir().unwrap();
        for (text, says) in [
            ("rw=read\n", "before any [section]"),
            ("[a\n", "without closing"),
            ("[]\n", "needs a name"),
            ("[a]\nbs=${NVMF_BENCH_UNSET_VAR}\n", "NVMF_BENCH_UNSET_VAR"),
            ("[a]\ninclude loop.inc\n", "nest more than"),
        ] {
            std::fs::write(dir.path().join("loop.inc"), "include loop.inc\n").unwrap();
            let f = dir.path().join("self.fio");
            std::fs::write(&f, text).unwrap();
            let e = parse_file(&f).unwrap_err();
            assert!(e.contains(says) && e.contains("self.fio"), "{text:?}: {e}");
        }
        let e = parse_file(Path::new("/nonexistent/x.fio")).unwrap_err();
        assert!(
            e.contains("cannot read the job file /nonexistent/x.fio"),
            "{e}"
        );
    }
}

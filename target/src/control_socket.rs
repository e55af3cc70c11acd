//! The daemon's control socket (`nvmf-target --control-socket PATH`): a Unix stream
//! socket taking one command line per connection and answering one line, so a
//! command-line client (`nvmf-target reload --control-socket PATH`) learns the outcome
//! and exits non-zero on a failure. The one command is `reload` (read the
//! configuration file again and apply it, as SIGHUP does, [`crate::reload`]); the
//! answer is `ok: WHAT CHANGED` or `error: WHY`.
//!
//! The socket file is created with mode 0600 (only the daemon's user, root for a
//! system daemon, may reconfigure it) and removed when the daemon stops.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The reload command's word on the socket.
pub const RELOAD: &str = "reload";

/// How long the client waits for the answer (a reload opens files, so it may take a
/// moment, never this long unless the daemon is stuck).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

/// A listening control socket; dropping it removes the socket file (the thread ends
/// with the process).
#[derive(Debug)]
pub struct ControlSocket {
    path: PathBuf,
}

impl ControlSocket {
    /// Listens on `path` and answers each connection's command on a thread of its
    /// own: `reload` runs `reload` (its `Ok` is what changed, its `Err` why nothing
    /// did). A socket file left by a daemon that is gone is replaced; one a live
    /// daemon answers on is not.
    ///
    /// # Errors
    /// `AddrInUse` when a daemon answers on `path`; the bind's or `chmod`'s error.
    pub fn serve(
        path: &Path,
        reload: impl Fn() -> Result<String, String> + Send + 'static,
    ) -> io::Result<ControlSocket> {
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!(
                        "{}: another daemon answers on this control socket",
                        path.display()
                    ),
                ));
            }
            std::fs::remove_file(path)?;
        }
        let listener = UnixListener::bind(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        std::thread::Builder::new()
            .name("nvmf-control-socket".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    match conn {
                        Ok(c) => {
                            if let Err(e) = answer(c, &reload) {
                                tracing::warn!("control socket: {e}");
                            }
                        }
                        Err(e) => tracing::warn!("control socket: accept: {e}"),
                    }
                }
            })?;
        Ok(ControlSocket {
            path: path.to_path_buf(),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Reads one command from `c` and writes its answer line.
fn answer(c: UnixStream, reload: &impl Fn() -> Result<String, String>) -> io::Result<()> {
    c.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut line = String::new();
    BufReader::new(&c).read_line(&mut line)?;
    let reply = match line.trim() {
        RELOAD => match reload() {
            Ok(what) => format!("ok: {what}"),
            Err(why) => format!("error: {why}"),
        },
        other => format!("error: unknown command {other:?}: the command is `{RELOAD}`"),
    };
    (&c).write_all(format!("{}\n", reply.replace('\n', " ")).as_bytes())
}

/// Sends `command` to the daemon's control socket at `path` and returns its answer:
/// `Ok` with what follows `ok: `, `Err` with what follows `error: `.
///
/// # Errors
/// The daemon's `error:` answer, or why the socket could not be reached (with what to
/// check).
pub fn request(path: &Path, command: &str) -> Result<String, String> {
    let unreachable = |e: io::Error| {
        format!(
            "{}: {e} (is nvmf-target running with --control-socket {}?)",
            path.display(),
            path.display()
        )
    };
    let mut c = UnixStream::connect(path).map_err(unreachable)?;
    c.set_read_timeout(Some(CLIENT_TIMEOUT))
        .map_err(unreachable)?;
    c.write_all(format!("{command}\n").as_bytes())
        .map_err(unreachable)?;
    let mut line = String::new();
    BufReader::new(&c)
        .read_line(&mut line)
        .map_err(unreachable)?;
    let line = line.trim_end();
    if let Some(ok) = line.strip_prefix("ok: ") {
        Ok(ok.to_string())
    } else if let Some(err) = line.strip_prefix("error: ") {
        Err(err.to_string())
    } else {
        Err(format!("{}: unexpected answer {line:?}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    #[test]
    fn reload_answers_ok_or_error_and_the_file_goes_with_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl.sock");
        let n = Arc::new(AtomicU32::new(0));
        let n2 = n.clone();
        let sock = ControlSocket::serve(&path, move || match n2.fetch_add(1, Ordering::SeqCst) {
            0 => Ok("namespaces added: x nsid 2".into()),
            _ => Err("not applied: poll_groups changed".into()),
        })
        .unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            request(&path, RELOAD),
            Ok("namespaces added: x nsid 2".into())
        );
        assert_eq!(
            request(&path, RELOAD),
            Err("not applied: poll_groups changed".into())
        );
        let unknown = request(&path, "frobnicate").unwrap_err();
        assert!(unknown.contains("unknown command"), "{unknown}");
        // A second daemon on the same path is refused while the first answers.
        let again = ControlSocket::serve(&path, || Ok(String::new())).unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::AddrInUse);
        drop(sock);
        assert!(!path.exists());
        let gone = request(&path, RELOAD).unwrap_err();
        assert!(gone.contains("--control-socket"), "{gone}");
    }
}

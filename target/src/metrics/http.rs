//! The metrics endpoint: plain HTTP/1.1 on a TCP address of the operator's choosing,
//! served by `tiny_http` and one thread of ours that answers `GET /metrics` with a
//! fresh [`super::Snapshot`] in the Prometheus text format, anything else with 404
//! (another path) or 405 (another method).
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::Sources;

/// The path scraped.
pub const METRICS_PATH: &str = "/metrics";

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The address cannot be bound (in use, not local, a privileged port).
    #[error(
        "metrics endpoint {addr}: cannot listen: {source}; {}",
        bind_fix(source)
    )]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The error of `bind(2)`.
        source: std::io::Error,
    },
    /// The HTTP server or its thread could not be started.
    #[error("metrics endpoint {addr}: {reason}")]
    Start {
        /// The address.
        addr: SocketAddr,
        /// What failed.
        reason: String,
    },
}

/// The fix for a failed bind, by its cause.
fn bind_fix(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::AddrInUse => {
            "another process listens there (node_exporter uses 9100; `ss -ltnp` names it): \
             choose another port with --metrics ADDR:PORT or `metrics = \"ADDR:PORT\"` in the \
             configuration file"
        }
        std::io::ErrorKind::AddrNotAvailable => {
            "the address is not one of this machine's: use a local address (127.0.0.1 to \
             scrape from this machine only) in --metrics or `metrics =`"
        }
        std::io::ErrorKind::PermissionDenied => {
            "ports below 1024 need root or CAP_NET_BIND_SERVICE: use a port above 1023 in \
             --metrics or `metrics =`"
        }
        _ => "check the address in --metrics or `metrics =` (ADDR:PORT of this machine)",
    }
}

/// A bound, not yet serving, endpoint: the target binds it before it opens anything
/// else, so a bad address fails the start at once.
#[derive(Debug)]
pub struct BoundEndpoint {
    addr: SocketAddr,
    listener: TcpListener,
}

/// A serving endpoint; dropping it stops its thread.
pub struct MetricsEndpoint {
    addr: SocketAddr,
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for MetricsEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsEndpoint")
            .field("addr", &self.addr)
            .finish()
    }
}

impl BoundEndpoint {
    /// Binds `addr` (port 0: one the kernel picks, [`BoundEndpoint::local_addr`]).
    ///
    /// # Errors
    /// [`MetricsError::Bind`], naming the address, the cause and the fix.
    pub fn bind(addr: SocketAddr) -> Result<BoundEndpoint, MetricsError> {
        let listener =
            TcpListener::bind(addr).map_err(|source| MetricsError::Bind { addr, source })?;
        let addr = listener.local_addr().unwrap_or(addr);
        Ok(BoundEndpoint { addr, listener })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves `sources` on a thread of its own (`nvmf-metrics`).
    ///
    /// # Errors
    /// [`MetricsError::Start`] when the server or the thread cannot start.
    pub fn serve(self, sources: Sources) -> Result<MetricsEndpoint, MetricsError> {
        let addr = self.addr;
        let start = |reason: String| MetricsError::Start { addr, reason };
        let server = tiny_http::Server::from_listener(self.listener, None)
            .map_err(|e| start(e.to_string()))?;
        let server = Arc::new(server);
        let s2 = server.clone();
        let thread = std::thread::Builder::new()
            .name("nvmf-metrics".into())
            .spawn(move || run(&s2, &sources))
            .map_err(|e| start(format!("spawning its thread: {e}")))?;
        tracing::info!(
            metrics_addr = %addr,
            "metrics endpoint: http://{addr}{METRICS_PATH} (Prometheus text format)"
        );
        Ok(MetricsEndpoint {
            addr,
            server,
            thread: Some(thread),
        })
    }
}

impl MetricsEndpoint {
    /// The address served.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the thread (a scrape under way is answered first).
    pub fn stop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for MetricsEndpoint {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(server: &tiny_http::Server, sources: &Sources) {
    // `recv` fails once `unblock` was called: the endpoint stops.
    while let Ok(req) = server.recv() {
        let path = req.url().split('?').next().unwrap_or("");
        let response = match (req.method(), path) {
            (tiny_http::Method::Get | tiny_http::Method::Head, METRICS_PATH) => {
                let body = super::encode::encode(sources.snapshot());
                with_type(
                    tiny_http::Response::from_string(body),
                    super::encode::CONTENT_TYPE,
                )
            }
            (tiny_http::Method::Get | tiny_http::Method::Head, _) => with_type(
                tiny_http::Response::from_string(format!(
                    "not found: the metrics are at {METRICS_PATH}\n"
                ))
                .with_status_code(404),
                "text/plain; charset=utf-8",
            ),
            _ => with_type(
                tiny_http::Response::from_string("only GET and HEAD are served\n")
                    .with_status_code(405),
                "text/plain; charset=utf-8",
            ),
        };
        if let Err(e) = req.respond(response) {
            tracing::debug!("metrics endpoint: answering a request: {e}");
        }
    }
}

fn with_type(
    r: tiny_http::Response<std::io::Cursor<Vec<u8>>>,
    content_type: &str,
) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    match tiny_http::Header::from_bytes(&b"Content-Type"[..], content_type.as_bytes()) {
        Ok(h) => r.with_header(h),
        Err(()) => r,
    }
}

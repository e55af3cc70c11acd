//! RC ping-pong over a real RDMA device through the verbs provider (librdmacm connect
//! and accept with private data, SEND, RDMA WRITE, RDMA READ, a type 2 memory window),
//! every byte checked. The same generic code (`pingpong/run.rs` and `pingpong/proto.rs`,
//! over `P: Provider`) is `soft_pingpong` on the soft provider, so either side can be
//! either provider. Usable across machines; the poll loops sleep on the completion
//! channel, so it shares a CPU with Soft-RoCE politely.
//!
//! ```text
//! verbs_pingpong server --addr 192.168.77.10 [--port 7471] [--clients 1] [--mw]
//! verbs_pingpong client --addr 192.168.77.11 --server 192.168.77.10 [--port 7471] \
//!     [--sizes 1,64,4096,65536,1048576] [--iters 3]
//! ```
//!
//! Exit status 0 when every check passed; 1 with the reason otherwise.
use std::process::ExitCode;

use transport::rdma::VerbsProvider;

#[path = "pingpong/proto.rs"]
mod proto;
#[path = "pingpong/run.rs"]
mod run;

fn main() -> ExitCode {
    run::main::<VerbsProvider>("verbs_pingpong")
}

//! The ping-pong of `pingpong/` on the soft provider: a userspace RoCEv2 QP over UDP and
//! our CM agent, so a soft-provider process and a verbs-provider process (e.g. in a QEMU
//! guest on Linux rxe) check each other: CM REQ/REP with private data, SEND, RDMA WRITE,
//! RDMA READ, a memory window. The same generic code (`pingpong/run.rs`, over
//! `P: Provider`) is `verbs_pingpong` on the verbs provider.
//!
//! ```text
//! soft_pingpong server --addr 192.168.77.1 [--port 7471] [--clients 1] [--mw]
//! soft_pingpong client --addr 192.168.77.2 --server 192.168.77.10 [--port 7471] \
//!     [--sizes 1,64,4096,65536,1048576] [--iters 3]
//! ```
//!
//! Exit status 0 when every check passed; 1 with the reason otherwise.
use std::process::ExitCode;

use transport::soft::SoftProvider;

#[path = "pingpong/proto.rs"]
mod proto;
#[path = "pingpong/run.rs"]
mod run;

fn main() -> ExitCode {
    run::main::<SoftProvider>("soft_pingpong")
}

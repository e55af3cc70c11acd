//! `rdma-perf`: perftest's bandwidth and latency tests (`ib_write_bw`, `ib_read_bw`,
//! `ib_send_bw`, `ib_write_lat`, `ib_read_lat`, `ib_send_lat`) over the transport
//! library's verbs model, wire-compatible with perftest 4.5 (its out-of-band exchange
//! on TCP 18515 and its data phase), so either side may be perftest itself.
//!
//! - [`oob`]: the out-of-band messages (version, system data, MTU, QP records, BW
//!   reports), encode/decode only;
//! - [`stats`]: the result arithmetic and perftest's table lines;
//! - [`kind`]: the six tests and their handshake plans;
//! - [`session`]: the TCP connection and perftest's symmetric exchange;
//! - [`run`]: resources, the exchange and connection, over any provider;
//! - `phase`: the data phase of each test.
pub mod kind;
pub mod oob;
mod phase;
pub mod run;
pub mod session;
pub mod stats;

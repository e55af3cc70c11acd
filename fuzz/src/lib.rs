//! Fuzz harnesses for the workspace (issue 4 §6).
//!
//! Each module exposes `run(data: &[u8])`: it decodes the fuzzer's bytes into inputs
//! for one part of the product and asserts its invariants (no panic, no out-of-bounds
//! write, round trips). The cargo-fuzz binaries in `fuzz_targets/` call them, and the
//! main workspace's `tests/fuzz_corpus.rs` includes the same files (by `#[path]`) to
//! replay every committed corpus file under the stable toolchain.
//!
//! The modules only use `std`, `nvme`, `transport` and `nvmf-target`, and refer to
//! each other as `super::...`, so they compile both here and inside that test.
pub mod capsule;
pub mod input;
pub mod packet_parse;
pub mod rc_responder;

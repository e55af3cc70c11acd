//! cargo-fuzz entry point; the harness is [`nvmf_fuzz::capsule`] (shared with the stable
//! corpus replay test `tests/fuzz_corpus.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nvmf_fuzz::capsule::run(data));

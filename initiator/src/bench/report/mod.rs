//! Reports of a [`BenchResult`](crate::bench::result::BenchResult): fio's normal text
//! output ([`render_text`]) and fio 3.x JSON ([`render_json`], [`fio_json`]).

pub mod fmt;
pub mod json;
pub mod text;

pub use json::{fio_json, fio_job_options, render_json, FioJson};
pub use text::render_text;

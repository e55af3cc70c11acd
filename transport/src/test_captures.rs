//! The Linux reference captures the tests read: `testdata/captures/` of this
//! repository (its README lists each file, its frame counts and the facts the tests
//! rely on). Compiled into the unit tests as `crate::test_captures` and into the
//! integration tests through `#[path]`, so the location is written once.

/// The bytes of reference capture `name` (e.g. `"linux-nvme-rdma-rxe.pcap"`).
///
/// # Panics
/// When the file cannot be read: the test fails and names the path; it never skips.
pub fn read(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/captures")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read reference capture {}: {e}; the captures ship with the repository \
             in testdata/captures/ (restore them with git checkout -- testdata)",
            path.display()
        )
    })
}

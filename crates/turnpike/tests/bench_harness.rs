//! The benchmark harness's measuring arithmetic (`bench/test_benchlib.py`, standard-library
//! Python), run with the rest of the tests: how it counts requests on a port, reads CPU time
//! and turns two snapshots into CPU per request.

use std::path::Path;
use std::process::Command;

#[test]
fn the_bench_harness_counts_requests_and_cpu_time() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("python3")
        .args([
            "-m",
            "unittest",
            "discover",
            "-s",
            "bench",
            "-p",
            "test_*.py",
        ])
        .current_dir(&root)
        .output()
        .expect("python3 starts");
    assert!(
        out.status.success(),
        "bench/test_benchlib.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

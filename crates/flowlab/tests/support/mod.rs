//! Helpers of the binary's integration tests: those of every crate's
//! ([`flowlab_testkit`]), and those that run the flowlab binary.

#![allow(dead_code)]

pub use flowlab_testkit::*;

/// Runs `flowlab net down NAME` when dropped: a topology a test brought up is taken
/// down (its emulator, and what it holds, gone) however the test ends.
pub struct NetDown(pub &'static str);

impl Drop for NetDown {
    fn drop(&mut self) {
        let _ = assert_cmd::Command::cargo_bin("flowlab")
            .expect("the flowlab binary")
            .args(["net", "down", self.0])
            .output();
    }
}

/// A usage error prints exactly one line that names the flag, and exits 2.
pub fn usage_error(args: &[&str], names: &str) {
    let out = assert_cmd::Command::cargo_bin("flowlab")
        .expect("the flowlab binary")
        .args(args)
        .timeout(std::time::Duration::from_secs(10))
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "{args:?}: more than one line: {stderr}"
    );
    assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    assert!(
        stderr.contains(names),
        "{args:?}: '{names}' not named in: {stderr}"
    );
}

//! The studies shipped in studies/: each one checks, runs at a small scale, and its
//! report builds with a table per metric.

use std::path::PathBuf;
use std::time::Duration;

fn studies() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../studies");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("studies/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no study in {}", dir.display());
    files
}

fn flowlab() -> assert_cmd::Command {
    assert_cmd::Command::cargo_bin("flowlab").expect("the flowlab binary")
}

#[test]
fn every_shipped_study_runs_small_and_reports() {
    for study in studies() {
        let name = study
            .file_stem()
            .expect("name")
            .to_string_lossy()
            .to_string();
        let dir = tempfile::tempdir().expect("tempdir");
        let out = flowlab()
            .current_dir(dir.path())
            .arg("run")
            .arg(&study)
            .args(["--scale", "0.01"])
            .timeout(Duration::from_secs(300))
            .output()
            .expect("run");
        let said = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {said}");
        assert!(
            said.contains(&format!("study {name}: ")) && said.contains(" 0 failed"),
            "{name}: {said}"
        );
        let out = flowlab()
            .current_dir(dir.path())
            .args(["report", "results.db", "-o", "report.html"])
            .timeout(Duration::from_secs(60))
            .output()
            .expect("report");
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let html = std::fs::read_to_string(dir.path().join("report.html")).expect("report.html");
        assert!(html.contains(&format!("<h1>Study {name}</h1>")), "{name}");
        assert!(
            html.matches("<section class=\"metric\">").count() >= 2,
            "{name}: tables per metric"
        );
    }
}

//! Names the commit the binary is built from, for `flowlab -v`: `FLOWLAB_COMMIT` is the
//! commit's short hash and date, or says the source was not a git checkout (a crate
//! from crates.io, a tarball).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let commit = git(&dir, &["log", "-1", "--format=%h %cs", "--abbrev=12"]);
    match (&commit, git(&dir, &["rev-parse", "--absolute-git-dir"])) {
        (Some(c), Some(git_dir)) => {
            println!("cargo:rustc-env=FLOWLAB_COMMIT=commit {c}");
            // A new commit or checkout moves HEAD or a ref: then the name is made anew.
            let git_dir = Path::new(&git_dir);
            for f in ["HEAD", "packed-refs", "refs"] {
                println!("cargo:rerun-if-changed={}", git_dir.join(f).display());
            }
        }
        _ => println!("cargo:rustc-env=FLOWLAB_COMMIT=built outside a git checkout"),
    }
    println!("cargo:rerun-if-changed=build.rs");
}

/// What `git ARGS` prints in `dir`, trimmed, if it runs and succeeds.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}

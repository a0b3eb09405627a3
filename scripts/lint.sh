#!/usr/bin/env bash
# The gates CI runs before the tests: formatting, clippy with warnings as errors, and the
# API docs with warnings as errors (a broken intra-doc link fails here, as in CI).
# `.ci/run` and `scripts/fresh-check.sh` both call it, so a fresh-clone check cannot pass
# where CI would fail.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
echo "lint.sh: fmt, clippy and rustdoc clean"

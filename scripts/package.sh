#!/usr/bin/env bash
# Builds flowlab's Debian package, target/debian/flowlab_VERSION-1_ARCH.deb, and prints
# its path: the release binary, its man pages and shell completions (made by the
# binary itself), and the flowlab-serve system service (packaging/debian/). Installs
# cargo-deb (crates.io) first when it is missing.
#
#   scripts/package.sh            build the package
#   scripts/package.sh --check    then install it, check it and purge it again (as root:
#                                 what CI does after the test suite)
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_DEB_VERSION=3.6.2
if ! cargo deb --version 2>/dev/null | grep -q "$CARGO_DEB_VERSION"; then
  echo "package.sh: installing cargo-deb $CARGO_DEB_VERSION (crates.io)" >&2
  cargo install --locked --quiet cargo-deb --version "$CARGO_DEB_VERSION"
fi

cargo build --release --locked -p flowlab
out=target/release/package
rm -rf "$out"
mkdir -p "$out/man" "$out/completions"
target/release/flowlab man --dir "$out/man" >/dev/null
gzip -9n "$out"/man/*.1                      # as Debian ships manual pages
target/release/flowlab completions bash > "$out/completions/flowlab.bash"
target/release/flowlab completions zsh > "$out/completions/_flowlab"
target/release/flowlab completions fish > "$out/completions/flowlab.fish"
# Stripped: the release profile keeps line tables for backtraces, which a package
# need not carry (57 MB against about 11).
deb="$(realpath --relative-to=. "$(cargo deb -p flowlab --no-build --strip --quiet)")"
echo "$deb"

[ "${1:-}" = "--check" ] || exit 0
exec scripts/check_package.sh "$deb"

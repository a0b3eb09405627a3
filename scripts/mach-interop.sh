#!/usr/bin/env bash
# scripts/mach-interop.sh — Cloudflare's responsiveness client, `mach` (crate cf-mach),
# against `flowlab serve --http --tls-self-signed` on loopback: the check behind
# docs/web.md's "Responsiveness clients". Not in the suite: cf-mach builds BoringSSL
# (cmake, libclang-dev), minutes on two cores.
#
# Usage: scripts/mach-interop.sh            (installs cf-mach under target/mach once)
#        MACH=/path/to/mach scripts/mach-interop.sh
set -euo pipefail
cd "$(dirname "$0")/.."
mach="${MACH:-target/mach/bin/mach}"
if [ ! -x "$mach" ]; then
  command -v cmake >/dev/null && dpkg -s libclang-dev >/dev/null 2>&1 || {
    echo "mach-interop.sh: building cf-mach needs cmake and libclang-dev (Debian packages)" >&2
    exit 2
  }
  cargo install --locked cf-mach --root target/mach
fi
cargo build --release --quiet -p flowlab
flowlab=target/release/flowlab
port=18561
"$flowlab" serve -p 18560 --http "127.0.0.1:$port" --tls-self-signed >/dev/null 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
until curl -sk -o /dev/null "https://127.0.0.1:$port/small"; do sleep 0.1; done
echo "$("$mach" --version); flowlab $(git rev-parse --short HEAD); $(nproc) cores, kernel $(uname -r)"
echo "\$ mach rpm -c https://127.0.0.1:$port/config --insecure --disable-aim-scores"
"$mach" rpm -c "https://127.0.0.1:$port/config" --insecure --disable-aim-scores
echo "\$ flowlab rpm https://127.0.0.1:$port/config -k -q"
"$flowlab" rpm "https://127.0.0.1:$port/config" -k -q || true

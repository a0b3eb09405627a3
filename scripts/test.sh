#!/usr/bin/env bash
# Runs flowlab's whole test suite. Installs what the tests need when it is missing:
# iperf3 (Debian's package) for the interoperability tests.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v iperf3 >/dev/null 2>&1; then
  echo "test.sh: installing iperf3 (Debian package) for the interop tests"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq iperf3 >/dev/null
fi

cargo test --workspace --all-targets

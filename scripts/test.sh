#!/usr/bin/env bash
# Runs flowlab's whole test suite. Installs what the tests need when it is missing, from
# Debian packages: iperf3 (interoperability tests) and iproute2 (`ip`, `tc`: the
# `flowlab net` tests, which also need root).
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v iperf3 >/dev/null 2>&1 || missing+=(iperf3)
{ command -v ip >/dev/null 2>&1 && command -v tc >/dev/null 2>&1; } || missing+=(iproute2)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "test.sh: installing ${missing[*]} (Debian packages) for the tests"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

cargo test --workspace --all-targets

#!/usr/bin/env bash
# Runs flowlab's whole test suite. Installs what the tests need when it is missing, from
# Debian packages: iperf3 (interoperability tests), iproute2 (`ip`, `tc`: the
# `flowlab net` tests, which also need root), util-linux (`setpriv`: the net tests run
# flowlab as an unprivileged user too), chromium (the HTML report opened in a real
# headless browser) and openssl (RSA keys for the authentication interop tests, made as
# iperf3's own auth test makes them) and groff-base (`nroff`: the generated manual pages
# rendered as `man` renders them).
#
# Every test binary runs (--no-fail-fast), so one failure cannot hide others, and the
# last line sums up: test binaries and tests passed, failed and skipped (a test skips,
# saying why, only outside CI when it lacks root or a tool).
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v iperf3 >/dev/null 2>&1 || missing+=(iperf3)
{ command -v ip >/dev/null 2>&1 && command -v tc >/dev/null 2>&1; } || missing+=(iproute2)
command -v setpriv >/dev/null 2>&1 || missing+=(util-linux)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v nroff >/dev/null 2>&1 || missing+=(groff-base)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "test.sh: installing ${missing[*]} (Debian packages) for the tests"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

log="$(mktemp)"
FLOWLAB_SKIPPED="$(mktemp)"
export FLOWLAB_SKIPPED
trap 'rm -f "$log" "$FLOWLAB_SKIPPED"' EXIT

set +e
cargo test --workspace --all-targets --no-fail-fast 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e

# cargo prints "Running <binary>" before each test binary and "test result: ok. N passed;
# M failed; …" after it; a binary that crashed has no result line. Skipped tests pass in
# cargo's count: they are taken out of the passed ones.
skipped=$(sort -u "$FLOWLAB_SKIPPED" | grep -c . || true)
if [ "$skipped" -gt 0 ]; then
  echo "skipped:"
  sort -u "$FLOWLAB_SKIPPED" | sed 's/^/  /'
fi
# Each failed test with the first lines of what it said, next to the summary (a long
# log's tail shows them too).
if grep -q '^---- .* stdout ----$' "$log"; then
  echo "failed:"
  awk '/^---- .* stdout ----$/ { name = $2; n = 0; inside = 1; print "  " name; next }
       inside && (/^stack backtrace:/ || /^---- / || /^failures:$/ || n >= 6) { inside = 0 }
       inside && NF { print "    " $0; n++ }' "$log"
fi
# Where the time went: the slowest test binaries, each with the seconds its tests ran
# (building comes before and is not counted).
echo "slowest test binaries (seconds running):"
awk '/^ +Running / { deps = $NF; gsub(/[()]/, "", deps); sub(/.*\//, "", deps)
                     sub(/-[0-9a-f]+$/, "", deps)
                     name = deps " (" (($2 == "unittests") ? $3 : $2) ")" }
     /^test result: / && name != "" {
       for (i = 1; i <= NF; i++) if ($i == "in") t = $(i+1)
       sub(/s$/, "", t); printf "%8.1f  %s\n", t, name; name = "" }' "$log" |
  sort -rn | head -8
awk -v skipped="$skipped" -v status="$status" '
  /^ +Running / { binaries++ }
  /^test result: / {
    results++
    if ($3 == "ok.") ok++
    for (i = 1; i <= NF; i++) {
      if ($(i+1) ~ /^passed;?$/) passed += $i
      if ($(i+1) ~ /^failed;?$/) failed += $i
    }
  }
  END {
    if (binaries == 0 && status != 0) {
      print "test.sh: the tests did not build (exit " status ")"
      exit
    }
    printf "test.sh: %d test binaries: %d passed, %d failed; tests: %d passed, %d failed, %d skipped\n",
      binaries, ok, binaries - ok, passed - skipped, failed, skipped
  }' "$log"
exit "$status"

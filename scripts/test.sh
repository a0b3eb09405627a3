#!/usr/bin/env bash
# Runs flowlab's whole test suite. Installs what the tests need when it is missing, from
# Debian packages: iperf3 (interoperability tests), iproute2 (`ip`, `tc`: the
# `flowlab net` tests, which also need root), util-linux (`setpriv`: the net tests run
# flowlab as an unprivileged user too), chromium (the HTML report opened in a real
# headless browser) and openssl (RSA keys for the authentication interop tests, made as
# iperf3's own auth test makes them) and groff-base (`nroff`: the generated manual pages
# rendered as `man` renders them), prometheus (`promtool`: `serve --metrics`' text
# read by Prometheus's own parser), openssh-server and openssh-client (a host over
# SSH: sshd in a namespace of the test's own), postgresql (results in PostgreSQL: a
# server of the test's own, in a temporary directory) and nginx-light (a stock HTTP/2
# server that `flowlab rpm URL` measures, as Apple's reference configuration shapes it)
# and python3-venv (aioquic, the second QUIC stack of the QUIC interop tests, is on no
# Debian release: it is installed from PyPI, at a pinned version, into a virtual
# environment under target/).
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
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v nroff >/dev/null 2>&1 || missing+=(groff-base)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
{ command -v ssh >/dev/null 2>&1 && command -v ssh-keygen >/dev/null 2>&1; } || missing+=(openssh-client)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
command -v nginx >/dev/null 2>&1 || missing+=(nginx-light)
command -v mptcpize >/dev/null 2>&1 || missing+=(mptcpd)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "test.sh: installing ${missing[*]} (Debian packages) for the tests"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  # No daemon a package brings (sshd, PostgreSQL's cluster, nginx) starts on this machine: the
  # tests start their own. Debian's policy-rc.d forbids it while the packages install.
  policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    trap '$sudo rm -f "$policy"' EXIT
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
    $sudo chmod 755 "$policy"
  fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  if [ -n "$policy" ]; then
    $sudo rm -f "$policy"
    trap - EXIT
  fi
fi

aioquic="${CARGO_TARGET_DIR:-$PWD/target}/aioquic"
if ! "$aioquic/bin/python" -c 'import aioquic' >/dev/null 2>&1; then
  echo "test.sh: installing aioquic 1.7.2 (PyPI) into $aioquic for the tests"
  python3 -m venv "$aioquic"
  "$aioquic/bin/pip" install --quiet --disable-pip-version-check aioquic==1.7.2
fi
export FLOWLAB_AIOQUIC_PYTHON="$aioquic/bin/python"

log="$(mktemp)"
work="$(mktemp -d)"
FLOWLAB_SKIPPED="$work/skipped"
: > "$FLOWLAB_SKIPPED"
export FLOWLAB_SKIPPED
trap 'rm -rf "$log" "$work"' EXIT

# Build every test binary first; cargo's JSON messages name each one, its package's
# directory and its source.
set +e
cargo test --workspace --all-targets --no-fail-fast --no-run \
  --message-format=json-render-diagnostics > "$work/build.json"
status=$?
set -e
if [ "$status" -ne 0 ]; then
  echo "test.sh: the tests did not build (exit $status)"
  exit "$status"
fi

# Then run them in three lanes side by side, each lane one binary after another, as
# `cargo test` would run them (in the package's directory, CARGO_MANIFEST_DIR set):
#   1. tests/net.rs, whose tests build topologies one at a time and are mostly waiting
#      on the links they emulate: first its tests that need the machine to themselves
#      (`machine_alone::`: no other topology beside them, the CPU latency request
#      theirs alone), then the rest;
#   2. the binaries that mostly wait (on timeouts, a stalled peer) and fragments.rs,
#      whose paced servers must reach their rates, while lane 1's first part runs;
#      then tests/studies.rs and tests/monitor.rs, whose topologies run beside the
#      rest of net.rs, and last a few of net.rs's shared tests (`net_beside`);
#   3. the rest, which mostly keep the CPUs busy for the seconds their tests last.
# What the first two lanes measure is timing (an emulated link's delay, a server's
# pacing, a timeout) and they use little CPU, so they run at a higher priority (nice
# -10 and -5; as root, which their topology tests need) and get the CPU when they ask;
# the third's tests run for a time, not a quantity of work, and lose little. Which tests
# need the machine alone and which share it is a file lock the tests take
# (crates/flowlab/tests/support); the order here only keeps them from waiting on it.
# plan_of NAME: one line per run of test binary NAME: its lane, its rank in the lane
# (lowest first) and the arguments it runs with.
# Three of net.rs's slowest shared tests run in lane 2 after its studies: lane 1 alone
# would be the suite's longest by a minute and a half; five made lane 2 the longest.
net_beside="the_table_names_the_congestion_control a_path_relayed_across_a_medium \
the_rtt_through_the_emulator"
plan_of() {
  case "$1" in
    net)
      printf '1\t0\tmachine_alone::\n'
      # Split into words on purpose: one --skip each.
      # shellcheck disable=SC2086
      printf '1\t1\t--skip machine_alone::%s\n' "$(printf ' --skip %s' $net_beside)"
      printf '2\t2\t%s\n' "$net_beside"
      ;;
    fragments | hostile | stalled_receiver | public_server | bad_input) printf '2\t0\t\n' ;;
    studies | monitor) printf '2\t1\t\n' ;;
    # Its topology test shares the machine (waiting for net.rs's machine_alone:: tests
    # to end): last in its lane, it finds them ended rather than holding the lane up.
    multicast) printf '3\t1\t\n' ;;
    *) printf '3\t0\t\n' ;;
  esac
}
sed -n 's/.*"manifest_path":"\([^"]*\)".*"name":"\([^"]*\)","src_path":"\([^"]*\)".*"profile":{[^}]*"test":true[^}]*}.*"executable":"\([^"]*\)".*/\1\t\2\t\3\t\4/p' \
  "$work/build.json" | while IFS=$'\t' read -r manifest name src exe; do
  dir="$(dirname "$manifest")"
  plan_of "$name" | while IFS=$'\t' read -r lane rank args; do
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$lane" "$rank" "$dir" "${src#"$dir"/}" "$exe" "$args"
  done
done | sort -s -t $'\t' -k1,1n -k2,2n > "$work/binaries"

# One lane: each binary's output is kept, then printed whole (not interleaved with
# another lane's) in cargo's own form, "Running SRC (BINARY)" and the binary's lines.
run_lane() {
  local lane rank dir src exe args out began rc niceness
  while IFS=$'\t' read -r lane rank dir src exe args; do
    [ "$lane" = "$1" ] || continue
    out="$work/$(basename "$exe").$rank.out"
    began=$EPOCHREALTIME
    set +e
    # Not the list on standard input: a test's child could read it away.
    case "$lane" in 1) niceness=-10 ;; 2) niceness=-5 ;; *) niceness=0 ;; esac
    # Without root `nice` cannot raise a priority: it says so (in the output), and runs on.
    # $args is split into words on purpose.
    # shellcheck disable=SC2086
    (cd "$dir" && CARGO_MANIFEST_DIR="$dir" nice -n "$niceness" "$exe" $args) < /dev/null > "$out" 2>&1
    rc=$?
    set -e
    [ -z "$args" ] || src="$src $args"
    awk -v rc="$rc" -v from="$began" -v to="$EPOCHREALTIME" -v pkg="$(basename "$dir")" \
      -v src="$src" 'BEGIN { printf "%d %.1f %s %s\n", rc, to - from, pkg, src }' >> "$work/ran"
    flock "$work/print.lock" sh -c '{ printf "\n     Running %s (%s)\n" "$1" "$2"; cat "$3"
      [ "$4" -eq 0 ] || echo "test.sh: $2 exited $4"; } | tee -a "$5"' \
      - "$src" "$exe" "$out" "$rc" "$log"
  done < "$work/binaries"
}
began=$SECONDS
: > "$work/ran"
run_lane 1 & run_lane 2 & run_lane 3 & wait
lanes=$((SECONDS - began))
status=0
awk '$1 != 0 { bad = 1 } END { exit bad }' "$work/ran" || status=101

# Each binary prints "test result: ok. N passed; M failed; …" at its end; one that
# crashed has no result line, and exited other than 0. Skipped tests pass in the test
# harness's count: they are taken out of the passed ones.
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
# Where the time went: the slowest test binaries, each with the seconds it ran
# (building came before and is not counted), and how long the lanes took together.
echo "slowest test binaries (seconds running):"
sort -k2 -rn "$work/ran" | head -8 | awk '{ t = $2; $1 = $2 = ""; sub(/^ +/, ""); printf "%8.1f  %s\n", t, $0 }'
echo "the three lanes ran ${lanes} s side by side"
# A binary run in parts (net.rs) counts once, and failed if a part did.
binaries=$(awk '{ print $3, $4 }' "$work/ran" | sort -u | grep -c . || true)
bad=$(awk '$1 != 0 { print $3, $4 }' "$work/ran" | sort -u | grep -c . || true)
awk -v skipped="$skipped" -v binaries="$binaries" -v bad="$bad" '
  /^test result: / {
    for (i = 1; i <= NF; i++) {
      if ($(i+1) ~ /^passed;?$/) passed += $i
      if ($(i+1) ~ /^failed;?$/) failed += $i
    }
  }
  END {
    printf "test.sh: %d test binaries: %d passed, %d failed; tests: %d passed, %d failed, %d skipped\n",
      binaries, binaries - bad, bad, passed - skipped, failed, skipped
  }' "$log"
exit "$status"

#!/usr/bin/env bash
# bench/fuzz.sh — runs every fuzz target under fuzz/ (cargo-fuzz, libFuzzer, coverage
# guided) for a fixed number of executions, and reports executions per second and any
# finding (a crash, a failed assertion, a leak or a timeout) with the input that caused it.
#
# Each target is one parser of untrusted bytes (fuzz/fuzz_targets/*.rs). The corpus in
# fuzz/corpus/<target>/ grows from run to run (not committed). A finding is written to
# fuzz/artifacts/<target>/ and reproduced with
#     cargo +nightly fuzz run <target> fuzz/artifacts/<target>/<file>
#
# Needs: nightly Rust (rustup toolchain install nightly), cargo-fuzz (installed here on
# first use with `cargo install cargo-fuzz --locked`), a C++ compiler (libFuzzer).
#
# Figures: executions and coverage (edges) are libFuzzer's own final counts
# (stat::number_of_executed_units, the last "cov:"); executions/s is executions divided by
# the target's wall time, which includes starting it and loading its corpus (the build
# is done before any clock starts).
#
# Env: FUZZ_RUNS (executions per target, default 200000), FUZZ_TARGETS (space-separated,
#      default every target), FUZZ_MAX_LEN (longest input, default 4096 bytes).
# Exit status: 0 when no target found anything, 1 when one did, 2 on a setup error.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="${FUZZ_RUNS:-200000}"
MAX_LEN="${FUZZ_MAX_LEN:-4096}"

die() { echo "fuzz.sh: error: $*" >&2; exit 2; }
[[ "$RUNS" =~ ^[0-9]+$ && "$RUNS" -ge 1 ]] || die "FUZZ_RUNS must be a positive integer"
[[ "$MAX_LEN" =~ ^[0-9]+$ && "$MAX_LEN" -ge 1 ]] || die "FUZZ_MAX_LEN must be a positive integer"
cargo +nightly --version >/dev/null 2>&1 \
    || die "nightly Rust is needed for libFuzzer's instrumentation (rustup toolchain install nightly)"
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz (cargo install cargo-fuzz --locked)…" >&2
    cargo install cargo-fuzz --locked >/dev/null || die "cargo install cargo-fuzz failed"
fi
cd "$ROOT/fuzz"
TARGETS="${FUZZ_TARGETS:-$(cargo +nightly fuzz list)}"

echo "# command:  $0  (FUZZ_RUNS=$RUNS FUZZ_MAX_LEN=$MAX_LEN)"
echo "# date:     $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
echo "# machine:  nproc=$(nproc)  kernel=$(uname -r)"
echo "# rustc:    $(rustc +nightly --version)"
echo

# Built once, before any clock starts: the times below are fuzzing alone.
cargo +nightly fuzz build >/dev/null 2>&1 || die "cargo +nightly fuzz build failed (run it in fuzz/ to see why)"

found=0
rows=()
for t in $TARGETS; do
    log="$(mktemp)"
    mkdir -p "corpus/$t"
    # The shipped topology files seed the topology target: libFuzzer mutates from
    # inputs the parser accepts, not only from bytes it refuses at the first character.
    if [[ "$t" == topology ]]; then cp -n "$ROOT"/topologies/*.toml "corpus/$t/" 2>/dev/null || true; fi
    start=$(date +%s%N)
    # -seed fixes the mutations' order, so a run can be repeated; the corpus still grows.
    if cargo +nightly fuzz run "$t" "corpus/$t" -- \
        -runs="$RUNS" -seed=1 -max_len="$MAX_LEN" -print_final_stats=1 >"$log" 2>&1; then
        verdict="none"
    else
        verdict="FOUND (see below)"
        found=1
    fi
    end=$(date +%s%N)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    ms=$(( (end - start) / 1000000 ))
    per_s="?"
    if [[ -n "$execs" && "$ms" -gt 0 ]]; then per_s=$(( execs * 1000 / ms )); fi
    rows+=("| $t | ${execs:-?} | $per_s | ${cov:-?} | $(( ms / 1000 )).$(( ms / 100 % 10 )) | $verdict |")
    if [[ "$verdict" != "none" ]]; then
        echo "== $t: finding"
        grep -E 'panicked|ERROR|SUMMARY|Test unit written|artifact_prefix' "$log" | head -20 || tail -20 "$log"
        echo
    fi
    rm -f "$log"
done

echo "| target | executions | executions/s | coverage (edges) | seconds | finding |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
exit "$found"

#!/usr/bin/env bash
# The fresh-clone check: clones this repository's committed HEAD into a new temporary
# directory of mode 0700 (as `mktemp -d` makes it, like any private checkout), then runs
# the two set-up commands from the first lines of README.md there, exactly as written,
# then CI's lint gates (scripts/lint.sh) and, as root, its package check
# (scripts/package.sh --check), and says which passed. Run it before every
# submission: a suite that passes only in the tree where it was written is a broken suite.
#
#   scripts/fresh-check.sh [--runs N] [--busy] [--keep]
#
#   --runs N   run the two commands N times in a row in the same clone (default 1)
#   --busy     keep every CPU busy meanwhile (stress-ng --cpu 0), as a loaded CI host is
#   --keep     leave the clone behind for a look (its path is printed)
set -euo pipefail

runs=1 busy=0 keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="${2:?--runs needs a number}"; shift 2 ;;
    --busy) busy=1; shift ;;
    --keep) keep=1; shift ;;
    *) echo "fresh-check.sh: unknown argument '$1' (--runs N, --busy, --keep)" >&2; exit 2 ;;
  esac
done
case "$runs" in ''|*[!0-9]*|0) echo "fresh-check.sh: --runs takes a number ≥ 1, not '$runs'" >&2; exit 2 ;; esac

repo="$(cd "$(dirname "$0")/.." && pwd)"
if [ -n "$(git -C "$repo" status --porcelain)" ]; then
  echo "fresh-check.sh: note: uncommitted changes are not checked (the clone takes HEAD)"
fi

# The first ```sh block of README.md holds the two commands, one a line, each followed
# by a comment.
mapfile -t commands < <(awk '/^```sh$/ { inside = 1; next } inside && /^```/ { exit }
  inside { sub(/[[:space:]]+#.*$/, ""); if (length($0)) print }' "$repo/README.md")
if [ "${#commands[@]}" -ne 2 ]; then
  echo "fresh-check.sh: README.md must open with a \`\`\`sh block of exactly two commands; found ${#commands[@]}" >&2
  exit 2
fi

dir="$(mktemp -d)"
chmod 0700 "$dir"
stress_pid=""
cleanup() {
  [ -n "$stress_pid" ] && kill "$stress_pid" 2>/dev/null && wait "$stress_pid" 2>/dev/null
  if [ "$keep" -eq 1 ]; then echo "fresh-check.sh: the clone is in $dir/flowlab"; else rm -rf "$dir"; fi
}
trap cleanup EXIT

git clone --quiet "$repo" "$dir/flowlab"
echo "fresh-check.sh: $(git -C "$dir/flowlab" log -1 --format='%h %s' | cut -c1-72) in $dir (mode $(stat -c %a "$dir"))"

if [ "$busy" -eq 1 ]; then
  command -v stress-ng >/dev/null || { echo "fresh-check.sh: --busy needs stress-ng (apt-get install stress-ng)" >&2; exit 2; }
  stress-ng --cpu 0 --quiet &
  stress_pid=$!
  echo "fresh-check.sh: every CPU kept busy by stress-ng (pid $stress_pid)"
fi

failed=0
for run in $(seq 1 "$runs"); do
  for cmd in "${commands[@]}"; do
    echo "fresh-check.sh: run $run/$runs: $cmd"
    start=$(date +%s)
    # No variable of this shell's build (a target dir elsewhere) may leak in.
    if (cd "$dir/flowlab" && env -u CARGO_TARGET_DIR bash -c "$cmd") > "$dir/out.log" 2>&1; then
      echo "fresh-check.sh: PASS ($(( $(date +%s) - start )) s): $cmd"
      # The suite's own running time (its build before it is not counted), which the
      # README keeps under ten minutes, and its slowest binaries: which lane led.
      awk '/^slowest test binaries/ { p = 1 } p { print } /^the three lanes ran/ { exit }' \
        "$dir/out.log" | sed 's/^/    /' || true
      grep -v '^[[:space:]]*$' "$dir/out.log" | tail -n 1 | sed 's/^/    /'
    else
      failed=$((failed + 1))
      echo "fresh-check.sh: FAIL ($(( $(date +%s) - start )) s): $cmd — its last 40 lines:"
      tail -n 40 "$dir/out.log" | sed 's/^/    /'
    fi
  done
done

# CI runs the lint gates before the tests (.ci/run): a clone that passes the README's
# commands but fails them would still fail CI.
echo "fresh-check.sh: CI's lint gates: scripts/lint.sh"
start=$(date +%s)
if (cd "$dir/flowlab" && env -u CARGO_TARGET_DIR scripts/lint.sh) > "$dir/out.log" 2>&1; then
  echo "fresh-check.sh: PASS ($(( $(date +%s) - start )) s): scripts/lint.sh"
else
  failed=$((failed + 1))
  echo "fresh-check.sh: FAIL ($(( $(date +%s) - start )) s): scripts/lint.sh — its last 40 lines:"
  tail -n 40 "$dir/out.log" | sed 's/^/    /'
fi

# And the package, as CI builds, installs, checks and purges it after the suite (root).
steps=$((2 * runs + 1))
if [ "$(id -u)" -eq 0 ]; then
  steps=$((steps + 1))
  echo "fresh-check.sh: CI's package check: scripts/package.sh --check"
  start=$(date +%s)
  if (cd "$dir/flowlab" && env -u CARGO_TARGET_DIR scripts/package.sh --check) > "$dir/out.log" 2>&1; then
    echo "fresh-check.sh: PASS ($(( $(date +%s) - start )) s): scripts/package.sh --check"
    tail -n 1 "$dir/out.log" | sed 's/^/    /'
  else
    failed=$((failed + 1))
    echo "fresh-check.sh: FAIL ($(( $(date +%s) - start )) s): scripts/package.sh --check — its last 40 lines:"
    tail -n 40 "$dir/out.log" | sed 's/^/    /'
  fi
else
  echo "fresh-check.sh: the package check needs root (apt-get install): not run"
fi

if [ "$failed" -eq 0 ]; then
  echo "fresh-check.sh: PASS: both README commands, $runs run(s), the lint gates and (as root) the package, in a fresh 0700 clone"
else
  echo "fresh-check.sh: FAIL: $failed of $steps command runs failed"
  exit 1
fi

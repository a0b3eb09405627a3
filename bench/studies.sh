#!/usr/bin/env bash
# bench/studies.sh — what a study costs beyond its measurements, on loopback:
#
#   runner-overhead  `flowlab run` of a study of N tiny trials (one 128 KiB block each)
#                    against a server already up  vs  the same N `flowlab test -J` run
#                    bare in a shell loop: the difference per trial is what the runner
#                    adds (claim, record in its own transaction, spawn, metrics).
#                    Target: under 50 ms.
#   report-10k       `flowlab report` of a database of 10 000 trials to HTML (charts
#                    included)  vs  to CSV. Target: under 2 s.
#   db size          bytes of the database per trial (a test's whole -J document, its
#                    metrics and the trial's rows), after a WAL checkpoint.
#   runner-versions  with OLD_FLOWLAB given: this build's `flowlab run` of the same study
#                    vs the old build's, alternating; the difference per trial is what
#                    the change costs or saves the runner.
#
# Usage: bench/studies.sh [OLD_FLOWLAB]
#
# Each A/B case runs alternately through bench/ab.py (at least 7 runs each, min / median
# / max, the ratio, runs spread over 25 % flagged).
#
# Env: BENCH_RUNS (default 7), BENCH_TRIALS (N, default 40), BENCH_PORT (default 5431).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FLOWLAB="$ROOT/target/release/flowlab"
OLD="${1:-}"
RUNS="${BENCH_RUNS:-7}"
TRIALS="${BENCH_TRIALS:-40}"
PORT="${BENCH_PORT:-5431}"
AB="python3 $ROOT/bench/ab.py"

die() { echo "studies.sh: error: $*" >&2; exit 2; }
command -v python3 >/dev/null || die "python3 not found"
[[ "$RUNS" =~ ^[0-9]+$ && "$RUNS" -ge 7 ]] || die "BENCH_RUNS must be 7 or more"
[[ "$TRIALS" =~ ^[0-9]+$ && "$TRIALS" -ge 4 && $((TRIALS % 4)) -eq 0 ]] || die "BENCH_TRIALS must be a multiple of 4"
[[ -z "$OLD" || -x "$OLD" ]] || die "$OLD is not an executable flowlab"
if [[ ! -x "$FLOWLAB" ]]; then
    (cd "$ROOT" && cargo build --release) || die "cargo build --release failed"
fi

WORK="$(mktemp -d)"
SERVER=""
cleanup() {
    [[ -n "$SERVER" ]] && { kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; }
    rm -rf "$WORK"
}
trap cleanup EXIT

echo "machine: $(nproc) CPUs, kernel $(uname -r), congestion control $(cat /proc/sys/net/ipv4/tcp_congestion_control)"
echo "flowlab: $("$FLOWLAB" --version)"

"$FLOWLAB" serve -B 127.0.0.1 -p "$PORT" >/dev/null &
SERVER=$!
for _ in $(seq 50); do "$FLOWLAB" test 127.0.0.1 -p "$PORT" -k 1 -i 0 -J >/dev/null 2>&1 && break; sleep 0.1; done

# 4 cells (2 lengths x 2 directions), TRIALS / 4 repetitions each.
cat > "$WORK/overhead.toml" <<TOML
name = "overhead"
repeat = $((TRIALS / 4))
[params]
length = ["64K", "128K"]
[params.direction]
up = ""
down = "-R"
[[step]]
kind = "test"
args = "127.0.0.1 -p $PORT -k 1 -i 0 -l {length} {direction}"
TOML
cat > "$WORK/bare.sh" <<SH
for rep in \$(seq $((TRIALS / 4))); do
  for length in 64K 128K; do
    "$FLOWLAB" test 127.0.0.1 -p $PORT -k 1 -i 0 -l \$length -J >/dev/null
    "$FLOWLAB" test 127.0.0.1 -p $PORT -k 1 -i 0 -l \$length -R -J >/dev/null
  done
done
SH

echo "| case | metric | A: min / median / max | B: min / median / max | A/B | paired | spread |"
echo "|---|---|---|---|---|---|---|"
$AB runner-overhead wall-ms \
    "cd $WORK && $FLOWLAB run overhead.toml --db run-\$(date +%s%N).db >/dev/null" \
    "bash $WORK/bare.sh" \
    --runs "$RUNS" --label-a "flowlab run" --label-b "bare loop" --per "$TRIALS"
if [[ -n "$OLD" ]]; then
    echo "old flowlab: $("$OLD" --version) ($OLD)"
    $AB runner-versions wall-ms \
        "cd $WORK && $FLOWLAB run overhead.toml --db new-\$(date +%s%N).db >/dev/null" \
        "cd $WORK && $OLD run overhead.toml --db old-\$(date +%s%N).db >/dev/null" \
        --runs "$RUNS" --label-a "new" --label-b "old" --per "$TRIALS"
fi

# A database of 10 000 trials: one real run, its trials copied (new repetitions) until
# there are 10 000, the study's file made to say so.
(cd "$WORK" && "$FLOWLAB" run overhead.toml --db real.db >/dev/null)
python3 - "$WORK/real.db" "$WORK/big.db" "$TRIALS" <<'PY'
import shutil, sqlite3, sys
real, big, trials = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = sqlite3.connect(real)
c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
c.close()
size = __import__("os").path.getsize(real)
print(f"  db size: {size} bytes for {trials} trials: {size / trials:.0f} bytes per trial")
shutil.copy(real, big)
c = sqlite3.connect(big)
per_cell = trials // 4
copies = 10000 // trials
rows = c.execute("SELECT id, study_id, cell, params, repetition, status, runner_id, started, ended, error FROM trial").fetchall()
for k in range(1, copies):
    for (tid, study, cell, params, rep, status, runner, started, ended, error) in rows:
        cur = c.execute(
            "INSERT INTO trial (study_id, cell, params, repetition, status, runner_id, started, ended, error) VALUES (?,?,?,?,?,?,?,?,?)",
            (study, cell, params, rep + k * per_cell, status, runner, started, ended, error))
        new = cur.lastrowid
        c.execute("INSERT INTO step SELECT ?, idx, name, kind, args, started, ended, error, result FROM step WHERE trial_id = ?", (new, tid))
        c.execute("INSERT INTO metric SELECT ?, step, name, value FROM metric WHERE trial_id = ?", (new, tid))
(file,) = c.execute("SELECT file FROM study").fetchone()
c.execute("UPDATE study SET file = ?", (file.replace(f"repeat = {per_cell}", f"repeat = {per_cell * copies}"),))
c.commit()
(n,) = c.execute("SELECT count(*) FROM trial").fetchone()
print(f"  report database: {n} trials")
PY
$AB report-10k wall-ms \
    "$FLOWLAB report $WORK/big.db -o $WORK/r.html" \
    "$FLOWLAB report $WORK/big.db --format csv >/dev/null" \
    --runs "$RUNS" --label-a "html" --label-b "csv"

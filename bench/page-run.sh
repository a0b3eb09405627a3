#!/usr/bin/env bash
# bench/page-run.sh — one run of flowlab's speed-test page in headless Chromium, for
# bench/http.sh: opens SERVER/?auto=1&seconds=S&streams=N, waits for the page to send its
# result (a new last entry of SERVER/results, which lists the runs from this address),
# and prints that flowlab.web/1 document with only DIRECTION's test (download or upload),
# which bench/ab.py's gbps metric reads.
#
# Usage: bench/page-run.sh [-n NETNS] SERVER DIRECTION SECONDS STREAMS
#        (SERVER as http://HOST:PORT; with -n, Chromium and curl run in that namespace)
set -euo pipefail
in=()
if [ "${1:-}" = -n ]; then in=(ip netns exec "$2"); shift 2; fi
[ "$#" -eq 4 ] || { echo "usage: page-run.sh [-n NETNS] SERVER DIRECTION SECONDS STREAMS" >&2; exit 2; }
server="$1" seconds="$3" streams="$4"
case "$2" in download) which=0 ;; upload) which=1 ;; *) echo "page-run.sh: $2: download or upload" >&2; exit 2 ;; esac
last() { "${in[@]}" curl -sf "$server/results" | jq -c '.[-1] // null'; }
before="$(last)"
profile="$(mktemp -d)"
browser=""
# The browser's helpers may still be writing its profile a moment after it is stopped:
# the profile is removed on a few tries, and never decides the exit status.
cleanup() {
  if [ -n "$browser" ]; then
    kill "$browser" 2>/dev/null
    wait "$browser" 2>/dev/null
  fi
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    rm -rf "$profile" 2>/dev/null && break
    sleep 0.2
  done
}
trap cleanup EXIT
"${in[@]}" chromium --headless --no-sandbox --disable-gpu --no-first-run \
  --remote-debugging-port=0 --user-data-dir="$profile" --enable-logging=stderr --v=0 \
  "$server/?auto=1&seconds=$seconds&streams=$streams" >/dev/null 2>"$profile/chromium.log" &
browser=$!
deadline=$((SECONDS + 3 * seconds + 60))
while :; do
  now="$(last)"
  if [ "$now" != "$before" ] && [ "$now" != null ]; then break; fi
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "page-run.sh: $server: the page sent no result in $((3 * seconds + 60)) s; the browser said:" >&2
    grep -i "console\|error" "$profile/chromium.log" | tail -5 >&2
    exit 1
  fi
  sleep 0.5
done
jq -c --argjson i "$which" '.tests = [.tests[$i]]' <<<"$now"
exit 0

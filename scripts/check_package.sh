#!/usr/bin/env bash
# Installs flowlab's Debian package as a user would (`apt-get install ./….deb`), checks
# what it put where, that the installed binary runs flowlab's main job, and that the
# flowlab-serve and flowlab-monitor units pass systemd's own checks; then purges it. Any copy installed
# before is purged first. Needs root. Exit 0 when every check held, 1 otherwise.
#
#   scripts/check_package.sh target/debian/flowlab_0.1.0-1_amd64.deb
set -euo pipefail

deb="$(realpath "${1:?usage: check_package.sh PACKAGE.deb}")"
[ "$(id -u)" -eq 0 ] || { echo "check_package.sh: needs root (apt-get install)" >&2; exit 2; }
export DEBIAN_FRONTEND=noninteractive
fail() { echo "check_package.sh: $*" >&2; exit 1; }
# systemd-analyze checks the unit: from Debian's systemd package where it is missing
# (the machine need not run systemd).
if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "check_package.sh: installing systemd (Debian package) for systemd-analyze"
  apt-get update -qq && apt-get install -y -qq systemd >/dev/null
fi
purge() { apt-get purge -y -qq flowlab >/dev/null 2>&1 || true; }
purge
trap purge EXIT
apt-get install -y -qq "$deb" >/dev/null

unit=/usr/lib/systemd/system/flowlab-serve.service
monitor_unit=/usr/lib/systemd/system/flowlab-monitor.service
files=(
  /usr/bin/flowlab
  /usr/share/man/man1/flowlab.1.gz
  /usr/share/man/man1/flowlab-serve.1.gz
  /usr/share/man/man1/flowlab-test.1.gz
  /usr/share/bash-completion/completions/flowlab
  /usr/share/zsh/vendor-completions/_flowlab
  /usr/share/fish/vendor_completions.d/flowlab.fish
  /usr/share/man/man1/flowlab-monitor.1.gz
  "$unit"
  /etc/default/flowlab-serve
  "$monitor_unit"
  /etc/default/flowlab-monitor
  /usr/share/flowlab/grafana/flowlab-mesh.json
  /usr/share/doc/flowlab/monitor.md
  /usr/share/doc/flowlab/copyright
)
listed="$(dpkg -L flowlab)"
for f in "${files[@]}"; do
  grep -qxF "$f" <<<"$listed" || fail "$f is not in the package's file list"
  [ -e "$f" ] || fail "$f is listed but not installed"
done

version="$(dpkg-deb -f "$deb" Version)"
shown="$(/usr/bin/flowlab -v)"
[[ "$shown" == "flowlab ${version%-*} ("* ]] || fail "flowlab -v says '$shown' for package $version"
/usr/bin/flowlab completions bash | cmp -s - /usr/share/bash-completion/completions/flowlab \
  || fail "the packaged bash completion is not the binary's"

# The main job, from the installed binary, in a directory of its own.
work="$(mktemp -d)"
(cd "$work" && /usr/bin/flowlab quick -t 1) || fail "flowlab quick failed"
rm -rf "$work"

# The unit: systemd's checks, its hardening score, and not enabled by the install.
systemd-analyze verify "$unit" || fail "systemd-analyze verify $unit"
systemd-analyze security --offline=true --threshold=20 "$unit" >/dev/null \
  || fail "the unit's exposure is above 2.0 (systemd-analyze security; --threshold counts tenths)"
[ ! -e /etc/systemd/system/multi-user.target.wants/flowlab-serve.service ] \
  || fail "the install enabled flowlab-serve"
# The monitor builds namespaces as root: systemd's checks, and its exposure said (its
# capabilities put it well above the server's), not enabled either.
systemd-analyze verify "$monitor_unit" || fail "systemd-analyze verify $monitor_unit"
systemd-analyze security --offline=true "$monitor_unit" | tail -1
[ ! -e /etc/systemd/system/multi-user.target.wants/flowlab-monitor.service ] \
  || fail "the install enabled flowlab-monitor"
cmp -s /usr/share/flowlab/grafana/flowlab-mesh.json "$(dirname "$0")/../deploy/grafana/flowlab-mesh.json" \
  || fail "the packaged Grafana dashboard is not deploy/grafana/flowlab-mesh.json"

purge
trap - EXIT
for f in "${files[@]}"; do
  [ ! -e "$f" ] || fail "$f is still there after the purge"
done
echo "check_package.sh: $(basename "$deb") installed, ran flowlab quick, its units passed systemd-analyze, and purged cleanly"

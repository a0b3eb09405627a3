#!/usr/bin/env bash
# bench/ssh_overhead.sh — what a host over SSH adds to each run: a one-echo `flowlab
# ping` run as flowlab's SSH place runs it (through a reused master connection, stdin
# held, FLOWLAB_EXIT_WITH_STDIN set) against the same command run directly in the
# host's namespace, alternately, RUNS times each; the difference of the medians is the
# controller's overhead per run. A second case times `true` through the same connection
# against `true` here: what OpenSSH itself takes to run a command there, the floor under
# any tool's overhead. The host is a network namespace of this script's with a
# real sshd (Debian openssh-server) behind a veth, and a `flowlab serve` for the ping.
# Needs root.
#
# sshd runs every command through the login's shell, and bash reads ~/.bashrc when sshd
# starts it, interactive or not: whatever that file does for a non-interactive shell
# (`pyenv init`, conda) is paid by every command. By default the host's root login
# gets the ~/.bashrc Debian gives every new user (/etc/skel/.bashrc, which returns at
# once when not interactive), bound over root's in sshd's own mount namespace;
# --machine-bashrc keeps this machine's.
#
# Usage: bench/ssh_overhead.sh [--machine-bashrc] [RUNS]        (default 15)
set -euo pipefail
cd "$(dirname "$0")/.."
bashrc=/etc/skel/.bashrc
if [ "${1:-}" = "--machine-bashrc" ]; then
  bashrc=""
  shift
fi
runs="${1:-15}"
[ "$(id -u)" -eq 0 ] || { echo "ssh_overhead.sh: needs root (a namespace)" >&2; exit 2; }
[ -x /usr/sbin/sshd ] || { echo "ssh_overhead.sh: needs openssh-server" >&2; exit 2; }
source bench/lib.sh
cargo build --release --quiet -p flowlab
flowlab="$PWD/target/release/flowlab"
ns=fl-bench-ssh
work="$(mktemp -d)"
cleanup() {
  ssh -S "$work/master" -O exit root@10.252.0.2 >/dev/null 2>&1 || true
  ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
  ip link del flbenchssh 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ip netns del "$ns" 2>/dev/null || true
ip netns add "$ns"
ip -n "$ns" link set lo up
ip link add flbenchssh type veth peer name eth0 netns "$ns"
ip addr add 10.252.0.1/30 dev flbenchssh
ip link set flbenchssh up
ip -n "$ns" addr add 10.252.0.2/30 dev eth0
ip -n "$ns" link set eth0 up

ssh-keygen -q -t ed25519 -N '' -f "$work/key"
ssh-keygen -q -t ed25519 -N '' -f "$work/host"
cat > "$work/sshd_config" <<EOF
ListenAddress 10.252.0.2:22
HostKey $work/host
AuthorizedKeysFile $work/key.pub
PermitRootLogin prohibit-password
PasswordAuthentication no
UsePAM no
StrictModes no
PidFile none
EOF
mkdir -p /run/sshd
# `ip netns exec` gives sshd a mount namespace of its own: the bind stays there.
if [ -n "$bashrc" ]; then
  ip netns exec "$ns" sh -c "mount --bind $bashrc /root/.bashrc && exec /usr/sbin/sshd -D -e -f $work/sshd_config" 2>/dev/null &
else
  ip netns exec "$ns" /usr/sbin/sshd -D -e -f "$work/sshd_config" 2>/dev/null &
fi
ip netns exec "$ns" "$flowlab" serve -p 5299 >/dev/null 2>&1 &
sleep 1

opts=(-F /dev/null -i "$work/key" -o IdentitiesOnly=yes -o StrictHostKeyChecking=no
      -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -S "$work/master" -o BatchMode=yes
      -o ServerAliveInterval=5 -o ServerAliveCountMax=3)
ssh "${opts[@]}" -M -N -o ControlPersist=no root@10.252.0.2 &
until ssh "${opts[@]}" -O check root@10.252.0.2 2>/dev/null; do sleep 0.05; done

ping_line="$flowlab ping 127.0.0.1 -p 5299 -c 1 -J"
over_ssh="ssh ${opts[*]} -T root@10.252.0.2 -- 'cd . && FLOWLAB_EXIT_WITH_STDIN=1 exec $ping_line' < <(sleep 5 2>/dev/null)"
direct="bash -c \"ip netns exec $ns $ping_line\""

echo "the host's root ~/.bashrc: ${bashrc:-as this machine has it}"
echo "machine: $(nproc) cores, kernel $(uname -r), congestion control $(cat /proc/sys/net/ipv4/tcp_congestion_control); flowlab $(checkout_id "$PWD")"
python3 bench/ab.py "one-echo ping, over SSH vs in the namespace" wall-ms \
  "bash -c \"$over_ssh\"" "$direct" --runs "$runs" --label-a "over SSH" --label-b direct --per 1
python3 bench/ab.py "true, over SSH vs here" wall-ms \
  "bash -c \"ssh ${opts[*]} -T root@10.252.0.2 -- true\"" "bash -c true" --runs "$runs" \
  --label-a "over SSH" --label-b here --per 1

# A study's trials: ten small tests (64 KiB) with the server and the client on the host
# over SSH, against the same study with both on this machine; each run into a new
# database. Per trial, the difference is what the controller adds for a host over SSH:
# the connection (made once a run), the host's clock read, the server and each step
# started through it.
key_opts=$(printf '"%s", ' -F /dev/null -i "$work/key" -o IdentitiesOnly=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR)
tables='[[server]]
name = "s"
NODE
[[step]]
name = "t"
kind = "test"
FROM
args = "{s.host} -p {s.port} -n 64K"'
{ printf 'name = "over-ssh"\nrepeat = 10\norder = "sequential"\n'
  echo "ssh_options = [${key_opts%, }]"
  echo "[ssh]"; echo "a = { url = \"ssh://root@10.252.0.2\", flowlab = \"$flowlab\" }"
  echo "$tables" | sed 's/^NODE$/node = "a"/; s/^FROM$/from = "a"/'; } > "$work/ssh.toml"
{ printf 'name = "here"\nrepeat = 10\norder = "sequential"\n'
  echo "$tables" | sed '/^NODE$/d; /^FROM$/d'; } > "$work/here.toml"
python3 bench/ab.py "a study's trial, over SSH vs here" wall-ms \
  "bash -c \"rm -f $work/a.db*; $flowlab run $work/ssh.toml --db $work/a.db >/dev/null\"" \
  "bash -c \"rm -f $work/b.db*; $flowlab run $work/here.toml --db $work/b.db >/dev/null\"" \
  --runs "$runs" --label-a "over SSH" --label-b here --per 10

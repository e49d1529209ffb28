#!/usr/bin/env bash
# Hosts on one machine: N Linux network namespaces joined by a bridge, each with its own
# hostname, so that Open MPI runs ranks "on N hosts" that talk only over TCP.
#
#   scripts/netns-cluster.sh up N [DIR]   make hosts h1..hN; write DIR/hostfile, DIR/rsh (the
#                                         agent) and DIR/env (what to export); DIR defaults to
#                                         /tmp/strata-netns; each host has $SLOTS slots
#                                         (default 2) in the hostfile
#   scripts/netns-cluster.sh down [DIR]   remove everything `up` made (also after a failure)
#   scripts/netns-cluster.sh kill HOST [DIR]  SIGKILL every process running on HOST
#   scripts/netns-cluster.sh cut HOST [DIR]   take HOST's link down (a network partition)
#   scripts/netns-cluster.sh mend HOST [DIR]  bring it back up
#   scripts/netns-cluster.sh check        exit 0 when this machine can make them (root, ip
#                                         netns, unshare), else print why and exit 1
#
# Host hK is the network namespace strata-hK (address 10.77.0.K/24 on a veth pair whose other
# end is on the bridge strata-br0, which has 10.77.0.254) and a UTS namespace bound at
# DIR/uts/hK whose hostname is hK: Open MPI decides which ranks share a node by hostname, so
# each namespace must have its own. The rsh agent `DIR/rsh hK CMD...` runs CMD in both, as
# ssh would on a real host; Open MPI is pointed at it with OMPI_MCA_plm_rsh_agent (DIR/env).
# The namespaces share the file system (checkpoints and logs need no copying), not the
# network: ranks on different hosts have only TCP between them.
#
# Needs root (CI has it). Every name it makes starts with strata-, so `down` finds them all.
# One cluster at a time on a machine: the names are global, and `up` first removes any other
# (ctest runs its two users under one RESOURCE_LOCK).
set -euo pipefail

bridge=strata-br0
subnet=10.77.0
usage() {
  sed -n '4,14p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

check() {
  if [ "$(id -u)" != 0 ]; then
    echo "netns-cluster: needs root (network namespaces)"
    return 1
  fi
  for tool in ip unshare nsenter; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      echo "netns-cluster: needs $tool (iproute2, util-linux)"
      return 1
    fi
  done
  if ! ip netns add strata-probe 2>/dev/null; then
    echo "netns-cluster: 'ip netns add' is refused here (no CAP_SYS_ADMIN in this container?)"
    return 1
  fi
  ip netns del strata-probe
}

down() {
  local dir=$1
  for ns in $(ip netns list 2>/dev/null | awk '/^strata-h[0-9]+/ {print $1}'); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '/strata-v[0-9]+/ {sub(/@.*/, "", $2); print $2}'); do
    ip link del "$link" 2>/dev/null || true
  done
  if [ -d "$dir/uts" ]; then
    for uts in "$dir"/uts/*; do
      [ -e "$uts" ] || continue
      umount "$uts" 2>/dev/null || true
      rm -f "$uts"
    done
    rmdir "$dir/uts" 2>/dev/null || true
  fi
  rm -f "$dir/hostfile" "$dir/rsh" "$dir/env" "$dir/hosts"
  rmdir "$dir" 2>/dev/null || true
}

up() {
  local count=$1 dir=$2
  [[ "$count" =~ ^[1-9][0-9]?$ && "$count" -le 64 ]] || {
    echo "netns-cluster: N must be 1..64, got '$count'" >&2
    exit 2
  }
  check >&2 || exit 1
  down "$dir"  # what an earlier run left behind
  trap 'echo "netns-cluster: up failed; removing what it made" >&2; down "$dir"' ERR
  mkdir -p "$dir/uts"
  ip link add "$bridge" type bridge
  ip addr add "$subnet.254/24" dev "$bridge"
  ip link set "$bridge" up
  : >"$dir/hostfile"
  : >"$dir/hosts"
  for k in $(seq 1 "$count"); do
    local ns=strata-h$k
    ip netns add "$ns"
    ip link add "strata-v$k" type veth peer name eth0 netns "$ns"
    ip link set "strata-v$k" master "$bridge" up
    ip -n "$ns" addr add "$subnet.$k/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    # A UTS namespace that outlives this command: unshare binds it to the file.
    touch "$dir/uts/h$k"
    unshare --uts="$dir/uts/h$k" hostname "h$k"
    echo "h$k slots=${SLOTS:-2}" >>"$dir/hostfile"
    echo "$subnet.$k h$k" >>"$dir/hosts"
  done
  cat >"$dir/rsh" <<EOF
#!/bin/sh
# rsh agent for the hosts of scripts/netns-cluster.sh: \$1 is the host, the rest the command
# (one shell string, as ssh takes it).
host=\$1
shift
[ -e "$dir/uts/\$host" ] || { echo "rsh: no host \$host" >&2; exit 255; }
exec nsenter --net=/run/netns/strata-\$host --uts="$dir/uts/\$host" /bin/sh -c "\$*"
EOF
  chmod +x "$dir/rsh"
  cat >"$dir/env" <<EOF
# Open MPI over the hosts of scripts/netns-cluster.sh: its own agent, TCP on the bridge only.
export OMPI_MCA_plm_rsh_agent=$dir/rsh
export OMPI_MCA_oob_tcp_if_include=$subnet.0/24
export OMPI_MCA_btl_tcp_if_include=$subnet.0/24
EOF
  trap - ERR
  echo "netns-cluster: $count hosts up (h1..h$count at $subnet.1..$count); hostfile $dir/hostfile; source $dir/env"
}

host_ns() {
  [[ "${1:-}" =~ ^h[0-9]+$ ]] || usage
  ip netns list | grep -q "^strata-$1\b" || {
    echo "netns-cluster: no host $1" >&2
    exit 1
  }
  echo "strata-$1"
}

command=${1:-}
case "$command" in
  up) [ $# -ge 2 ] || usage; up "$2" "${3:-/tmp/strata-netns}" ;;
  down) down "${2:-/tmp/strata-netns}" ;;
  kill) ns=$(host_ns "${2:-}"); ip netns pids "$ns" | xargs -r kill -9 ;;
  cut) ns=$(host_ns "${2:-}"); ip -n "$ns" link set eth0 down ;;
  mend) ns=$(host_ns "${2:-}"); ip -n "$ns" link set eth0 up ;;
  check) check ;;
  *) usage ;;
esac

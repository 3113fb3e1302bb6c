#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Open MPI's "rsh agent" for ranks in network namespaces on this machine.
# mpirun calls it like ssh: `netns-rsh.sh [options] HOST COMMAND...`; HOST is
# an address from the hostfile, mapped to a namespace by the file named in
# CS_RSH_MAP (lines "ADDRESS NAMESPACE"), and COMMAND (the orted launch line,
# a shell command) runs in that namespace, in a UTS namespace of its own
# whose hostname is the namespace name (so daemons and ranks see distinct
# hosts and session directories, as on a real cluster). A third column
# in the map, a CPU list ("ADDRESS NAMESPACE CPUS"), runs the orted, and
# so the ranks it starts (mpirun --bind-to none), on those CPUs only:
#
#   CS_RSH_MAP=hosts.map mpirun --mca plm_rsh_agent scripts/netns-rsh.sh ...
set -euo pipefail

# ssh-style options mpirun may put before the host (none by default).
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do
	shift
done
[ $# -ge 2 ] || { echo "netns-rsh: usage: $0 HOST COMMAND..." >&2; exit 255; }
host=$1
shift
map=${CS_RSH_MAP:?netns-rsh: CS_RSH_MAP (address-to-namespace file) unset}
read -r ns cpus < <(awk -v h="$host" '$1 == h || $2 == h { print $2, $3; exit }' "$map") || true
[ -n "${ns:-}" ] || { echo "netns-rsh: $host not in $map" >&2; exit 255; }
pin=()
[ -n "${cpus:-}" ] && pin=(taskset -c "$cpus")
exec ip netns exec "$ns" "${pin[@]}" unshare --uts /bin/sh -c \
	'hostname "$0" && exec /bin/sh -c "$1"' "$ns" "$*"

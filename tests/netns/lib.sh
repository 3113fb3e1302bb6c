# SPDX-License-Identifier: MIT
# Helpers the netns test scripts share; sourced, not run.

# cs_ctl RUN_DIR REQUEST: one request on a sidecar's control socket
# (RUN_DIR/ctl.sock); prints the reply line.
cs_ctl() {
	python3 - "$1" "$2" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(20)
s.connect(sys.argv[1] + "/ctl.sock")
s.sendall((sys.argv[2] + "\n").encode())
buf = b""
while not buf.endswith(b"\n"):
    c = s.recv(4096)
    if not c:
        break
    buf += c
print(buf.decode().strip())
PY
}

# kv LINE KEY: the integer value of KEY=... in a reply line.
kv() { sed -n "s/.*[ ]$2=\([-0-9]*\).*/\1/p" <<<"$1"; }

# loop_sidecar NAME: one collstackd ($DAEMON) on the loop port, no root and
# no namespaces, coll.deadline 3 s, in a new folder /tmp/cs-NAME.*; sets
# dir, pid, ENV (its cluster file for `collstack launch`) and LAUNCH_ARGS
# (--no-netns). Stopped and removed at exit. Needs fail().
loop_sidecar() {
	dir=$(mktemp -d "/tmp/cs-$1.XXXXXX")
	trap 'kill -TERM "$pid" 2>/dev/null; wait; rm -rf "$dir"' EXIT
	"$DAEMON" --set name=l0 --set run_dir="$dir/l0" --set port.type=loop \
		--set coll.deadline=3s </dev/null >"$dir/l0.log" 2>&1 &
	pid=$!
	for _ in $(seq 300); do
		[ -f "$dir/l0/ready" ] && break
		kill -0 "$pid" 2>/dev/null || { cat "$dir/l0.log"; fail "collstackd died"; }
		sleep 0.1
	done
	printf 'CS_NODES="l0"\nCS_RUN=%s\n' "$dir" >"$dir/cluster.env"
	ENV=$dir/cluster.env
	LAUNCH_ARGS=(--no-netns)
}

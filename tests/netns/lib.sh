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

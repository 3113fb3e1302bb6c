#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# collstackd's config handling: every key documented, bad input refused
# with a message that names the key (and the file line), flags over file.
set -uo pipefail
D=${CS_BUILD_DIR:?}/sidecar/collstackd
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

help=$("$D" --help-config) || fail "--help-config failed"
for k in name run_dir node.rank node.peers log.level port.type port.dev \
	 port.iface port.ip port.mac port.udp_port port.mtu port.queues \
	 port.rx_desc port.rx_posted port.tx_desc port.afp_frames port.pool_mbufs port.pool_cache \
	 port.sock_buf port.no_huge port.zero_copy port.memif_role \
	 port.memif_socket port.eal_args port.vdev_args fault.seed fault.drop \
	 fault.dup fault.reorder fault.delay fault.corrupt fault.delay_ns \
	 fault.reorder_depth lcore.poll lcore.cpus lcore.spin lcore.sleep \
	 lcore.pin lcore.yield lcore.spin_wake ipc.idle_spin ipc.on_lcore \
	 rel.window rel.rto_min cc.enable coll.channels coll.chunk \
	 ps.ckpt_share; do
	grep -q "^  $k " <<<"$help" || fail "key $k missing from --help-config"
done

out=$("$D" --set nosuch.key=1 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "nosuch.key" <<<"$out" || fail "unknown key: rc $rc, '$out'"
out=$("$D" --set port.mtu=100 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "port.mtu" <<<"$out" || fail "out of range: rc $rc, '$out'"
out=$("$D" --set port.afp_frames=8 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "port.afp_frames: 8 is neither" <<<"$out" || fail "afp_frames 8: rc $rc, '$out'"
out=$("$D" --set ps.ckpt_share=0 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "ps.ckpt_share" <<<"$out" || fail "ckpt_share 0: rc $rc, '$out'"
out=$("$D" --set fault.drop=abc 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "fault.drop" <<<"$out" || fail "bad value: rc $rc, '$out'"
# string keys with a fixed set of values
for kv in lcore.poll=banana lcore.pin=maybe lcore.pin= auth.enable=maybe \
	auth.mac=sha256 auth.mac=; do
	# (not refused, the sidecar would start: timeout ends it)
	out=$(timeout 10 "$D" --set "$kv" --set port.type=loop \
		--set run_dir="$tmp/runk" 2>&1); rc=$?
	[ $rc -eq 2 ] && grep -q "${kv%%=*}: '.*' is not" <<<"$out" ||
		fail "bad value $kv: rc $rc, '$out'"
done
printf '# comment\nport.type = udp\n\nbogus line\n' >"$tmp/c.conf"
out=$("$D" --config "$tmp/c.conf" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "c.conf:4" <<<"$out" || fail "bad line: rc $rc, '$out'"
printf 'port.typo = udp\n' >"$tmp/d.conf"
out=$("$D" --config "$tmp/d.conf" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "d.conf:1.*port.typo" <<<"$out" || fail "bad key in file: rc $rc, '$out'"

# A loop-port sidecar starts, gets ready, answers, and stops on SIGTERM,
# leaving nothing in its run folder; --set wins over the file.
printf 'port.type = udp\nname = fromfile\n' >"$tmp/e.conf"
"$D" --config "$tmp/e.conf" --set port.type=loop --set name=cfgtest \
	--set run_dir="$tmp/run" >"$tmp/log" 2>&1 &
pid=$!
for _ in $(seq 100); do [ -f "$tmp/run/ready" ] && break; sleep 0.1; done
[ -f "$tmp/run/ready" ] || { cat "$tmp/log"; fail "not ready"; }
grep -q "^cfgtest " "$tmp/run/ready" || fail "--set did not win: $(cat "$tmp/run/ready")"
grep -q "loop port" "$tmp/log" || grep -q "ready: cfgtest rank 0, loop" "$tmp/log" ||
	fail "port.type from --set not used"
kill -TERM $pid
wait $pid || fail "exit status $? after SIGTERM"
[ -e "$tmp/run" ] && fail "run folder left behind: $(ls "$tmp/run")"

# ipc.trace_dir must be a folder it can write to: else it does not start
out=$(timeout 10 "$D" --set port.type=loop --set name=tracex \
	--set run_dir="$tmp/runt" --set ipc.trace_dir="$tmp/nosuch" 2>&1); rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "ipc.trace_dir $tmp/nosuch" <<<"$out" ||
	fail "ipc.trace_dir that does not exist: rc $rc, '$out'"

# lcore.pin=on pins an adaptive lcore and says so
"$D" --set port.type=loop --set name=pintest --set lcore.pin=on \
	--set run_dir="$tmp/runp" >"$tmp/logp" 2>&1 &
pid=$!
for _ in $(seq 100); do [ -f "$tmp/runp/ready" ] && break; sleep 0.1; done
[ -f "$tmp/runp/ready" ] || { cat "$tmp/logp"; fail "lcore.pin=on: not ready"; }
grep -q "lcore 0: queue 0, pinned to CPU [0-9]* (.*), adaptive polling" "$tmp/logp" ||
	fail "lcore.pin=on: $(grep 'lcore 0' "$tmp/logp")"
kill -TERM $pid
wait $pid || fail "lcore.pin=on: exit status $? after SIGTERM"

# auth.enable: documented; on without a job token it refuses to start,
# saying why; with one (static peers) it starts and reports auth=1.
grep -q "^  auth.enable " <<<"$help" || fail "key auth.enable missing from --help-config"
out=$(env -u COLLSTACK_JOB_TOKEN "$D" --set port.type=loop --set name=authx \
	--set run_dir="$tmp/runa" --set auth.enable=1 </dev/null 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "auth.enable=1 needs the job token" <<<"$out" ||
	fail "auth.enable=1 without a token: rc $rc, '$out'"
COLLSTACK_JOB_TOKEN=t0ken "$D" --set port.type=loop --set name=authy \
	--set run_dir="$tmp/runb" --set auth.enable=1 >"$tmp/loga" 2>&1 &
pid=$!
for _ in $(seq 100); do [ -f "$tmp/runb/ready" ] && break; sleep 0.1; done
[ -f "$tmp/runb/ready" ] || { cat "$tmp/loga"; fail "auth sidecar not ready"; }
grep -q "packet authentication on" "$tmp/loga" || fail "no auth log line"
kill -TERM $pid
wait $pid || fail "auth sidecar: exit status $? after SIGTERM"

# auth.enable=auto (the default): on whenever a job token is set, off
# with a warning that says how to turn it on when none is; =0: off.
# auth_start NAME LINE [env/--set ...]: the sidecar gets ready and logs LINE.
auth_start() {
	local name=$1 line=$2
	shift 2
	env -u COLLSTACK_JOB_TOKEN "$@" --set port.type=loop --set name=$name \
		--set run_dir="$tmp/run$name" >"$tmp/log$name" 2>&1 &
	pid=$!
	for _ in $(seq 100); do [ -f "$tmp/run$name/ready" ] && break; sleep 0.1; done
	[ -f "$tmp/run$name/ready" ] || { cat "$tmp/log$name"; fail "$name: not ready"; }
	kill -TERM $pid
	wait $pid || fail "$name: exit status $? after SIGTERM"
	grep -q "$line" "$tmp/log$name" ||
		{ cat "$tmp/log$name"; fail "$name: no '$line' in its log"; }
}
grep -A1 "^  auth.enable " <<<"$help" | grep -q "(default auto" ||
	fail "auth.enable's default is not auto: $(grep -A1 "^  auth.enable " <<<"$help")"
auth_start autoenv "packet authentication on" COLLSTACK_JOB_TOKEN=t0ken "$D"
printf 'file-t0ken\n' >"$tmp/tok"
chmod 600 "$tmp/tok"
auth_start autofile "packet authentication on" "$D" --set boot.token_file="$tmp/tok"
auth_start autonone "packet authentication off: no job token" "$D"
grep -q "packet authentication on" "$tmp/logautonone" &&
	fail "auto without a token turned authentication on"
# auth.mac: documented, auto by default; the log names the code in use
grep -A1 "^  auth.mac " <<<"$help" | grep -q "(default auto" ||
	fail "auth.mac is not documented with default auto"
if grep -qw aes /proc/cpuinfo && grep -qw pclmulqdq /proc/cpuinfo; then
	grep -q "on: .*(gmac-aes256-openssl: auth.mac=auto, this CPU has" \
		"$tmp/logautoenv" || fail "auto on an AES-NI CPU: not gmac"
else
	grep -q "on: .*(siphash128-libsodium: auth.mac=auto, this CPU lacks" \
		"$tmp/logautoenv" || fail "auto without AES-NI: not siphash"
fi
auth_start sip "(siphash128-libsodium: auth.mac=siphash" \
	COLLSTACK_JOB_TOKEN=t0ken "$D" --set auth.mac=siphash
auth_start gmac "(gmac-aes256-openssl: auth.mac=gmac" \
	COLLSTACK_JOB_TOKEN=t0ken "$D" --set auth.mac=gmac
auth_start off "packet authentication off (auth.enable=0)" \
	COLLSTACK_JOB_TOKEN=t0ken "$D" --set auth.enable=0
grep -q "packet authentication on" "$tmp/logoff" &&
	fail "auth.enable=0 with a token turned authentication on"
# a token file that is named but cannot be read: refused, not turned off
out=$(env -u COLLSTACK_JOB_TOKEN timeout 10 "$D" --set port.type=loop \
	--set name=authz --set run_dir="$tmp/runz" \
	--set boot.token_file="$tmp/nosuch.token" </dev/null 2>&1); rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "nosuch.token" <<<"$out" &&
	grep -q "auth.enable=auto needs the job token" <<<"$out" ||
	fail "auto with an unreadable token file: rc $rc, '$out'"

# node.rendezvous: documented; a bad value names the key; etcd without
# boot.world, with the coordinator, or unreachable: refused, saying why
grep -q "^  node.rendezvous " <<<"$help" || fail "key node.rendezvous missing from --help-config"
for v in etcd:/h:1/p http://h:1/p bogus; do
	out=$("$D" --set node.rendezvous=$v 2>&1); rc=$?
	[ $rc -eq 2 ] && grep -q "node.rendezvous: '$v'" <<<"$out" ||
		fail "node.rendezvous=$v: rc $rc, '$out'"
done
if "$D" --help-config | grep -q "port types:.* udp" &&
   grep -q "CS_HAVE_ETCD 1" "${CS_BUILD_DIR}/cs_config.h" 2>/dev/null; then
	out=$(timeout 30 "$D" --set port.type=loop --set name=etcdx \
		--set run_dir="$tmp/rune" --set node.rendezvous=etcd://127.0.0.1:1/j \
		--set boot.token=t 2>&1); rc=$?
	[ $rc -eq 3 ] && grep -q "needs boot.world" <<<"$out" ||
		fail "etcd without boot.world: rc $rc, '$out'"
	out=$(timeout 30 "$D" --set port.type=loop --set name=etcdy \
		--set run_dir="$tmp/runf" --set node.rendezvous=etcd://127.0.0.1:1/j \
		--set boot.token=t --set boot.world=2 --set boot.coordinator=1 2>&1); rc=$?
	[ $rc -eq 3 ] && grep -q "with etcd there is no coordinator" <<<"$out" ||
		fail "etcd with boot.coordinator=1: rc $rc, '$out'"
	# port 1 on loopback: nobody listens; gives up after boot.timeout
	out=$(timeout 60 "$D" --set port.type=loop --set name=etcdz \
		--set run_dir="$tmp/rung" --set node.rendezvous=etcd://127.0.0.1:1/j \
		--set boot.token=t --set boot.world=2 --set boot.timeout=1s 2>&1); rc=$?
	[ $rc -eq 3 ] && grep -q "etcd etcd://127.0.0.1:1/j unreachable.*Connection refused" <<<"$out" ||
		fail "etcd unreachable: rc $rc, '$out'"
fi

# collstack run's and collstack bench's arguments: a bad one is refused
# before any sidecar is asked or any trainer started.
C=${CS_BUILD_DIR:?}/tools/collstack
for a in "--iters 0" "--iters -1" "--iters 3x" "--warmup -2" "--timeout 0" \
	 "--iters 99999999999"; do
	out=$("$C" run allreduce --cluster "$tmp/none.env" $a 2>&1); rc=$?
	[ $rc -eq 2 ] && grep -q "usage: collstack run allreduce" <<<"$out" ||
		fail "collstack run allreduce $a: rc $rc, '$out'"
done
for a in "-n 0" "-n 3x" "-w -1" "-f 1" "-b 4X" "-e 0" "-o allgather" \
	 "--trainers-per-node 0" "--trainers-per-node 2x" "--timeout 0"; do
	out=$("$C" bench $a --cluster "$tmp/none.env" 2>&1); rc=$?
	[ $rc -eq 2 ] && grep -q "collstack bench" <<<"$out" ||
		fail "collstack bench $a: rc $rc, '$out'"
done
out=$("$C" bench -o all_gather -b 4K -e 1M -f 4 -n 3 -w 0 \
	--trainers-per-node 2 --timeout 30 --cluster "$tmp/none.env" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "none.env" <<<"$out" ||
	fail "collstack bench, good arguments, no cluster: rc $rc, '$out'"
out=$("$C" run allreduce --cluster "$tmp/none.env" --iters 2 --per-op 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "none.env" <<<"$out" ||
	fail "collstack run without a cluster: rc $rc, '$out'"
# observe/ (docs/observe.md): bad keys named; an address that cannot be
# bound refused at start; bad control requests and CLI arguments refused
for kv in metrics.listen=nonsense metrics.listen=1.2.3.4 \
	  metrics.listen=1.2.3.4:99999 metrics.listen=:80 trace.events=1 \
	  trace.rings=0 trace.rings=17 trace.clock_offset=x \
	  flight.auto_after=0 flight.auto_after=x; do
	out=$("$D" --set "$kv" 2>&1); rc=$?
	[ $rc -eq 2 ] && grep -q "${kv%%=*}" <<<"$out" ||
		fail "observe key $kv: rc $rc, '$out'"
done
python3 -c 'import socket, time, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True); time.sleep(30)' >"$tmp/port" &
busy=$!
for _ in $(seq 50); do [ -s "$tmp/port" ] && break; sleep 0.1; done
out=$(timeout 20 "$D" --set port.type=loop --set run_dir="$tmp/runm" \
	--set metrics.listen=127.0.0.1:$(cat "$tmp/port") 2>&1); rc=$?
kill "$busy" 2>/dev/null
[ $rc -eq 1 ] && grep -q "metrics.listen 127.0.0.1:[0-9]*: " <<<"$out" ||
	fail "metrics.listen on a port in use: rc $rc, '$out'"
"$D" --set port.type=loop --set run_dir="$tmp/runo" >"$tmp/runo.log" 2>&1 &
obs=$!
for _ in $(seq 100); do [ -f "$tmp/runo/ready" ] && break; sleep 0.1; done
python3 - "$tmp/runo/ctl.sock" <<'PY' || fail "observe control requests"
import socket, sys
def ask(req):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    s.sendall((req + "\n").encode())
    buf = b""
    while not buf.endswith(b"\n"):
        c = s.recv(1)
        if not c:
            break
        buf += c
    s.close()
    return buf.decode().strip()
for bad in ("trace_on 2", "trace_on", "trace_offset abc", "trace_offset 1e9"):
    r = ask(bad)
    assert r.startswith("err usage"), (bad, r)
for good in ("trace_dump", "flight", "metrics"):
    r = ask(good)
    assert r.startswith("ok ") and " bytes=" in r, (good, r)
assert ask("clock").startswith("ok now="), "clock"
r = ask("clock_hb")  # static peers: no heartbeats, said so
assert r.startswith("err no heartbeat clock: static peers"), r
print(ask("quit"))
PY
wait "$obs"
for a in "trace" "trace --out x --samples 0" "trace --out x --last -1" \
	 "top --interval 0" "top extra" "doctor --min-age x" "doctor --bogus" \
	 "trace --out x --clock ntp" "doctor --trigger op-1"; do
	out=$("$C" $a --cluster "$tmp/none.env" 2>&1); rc=$?
	[ $rc -eq 2 ] && grep -q "collstack ${a%% *}" <<<"$out" ||
		fail "collstack $a: rc $rc, '$out'"
done
for a in "trace --out $tmp/t.json" "top --once" "doctor"; do
	out=$("$C" $a --cluster "$tmp/none.env" 2>&1); rc=$?
	[ $rc -eq 1 ] && grep -q "none.env" <<<"$out" ||
		fail "collstack $a without a cluster: rc $rc, '$out'"
done
# doctor --from: a missing folder, a folder without records, and records
# that are not flight records (named, not parsed as empty)
out=$("$C" doctor --from "$tmp/nofolder" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "nofolder" <<<"$out" ||
	fail "doctor --from a missing folder: rc $rc, '$out'"
mkdir -p "$tmp/fl"
out=$("$C" doctor --from "$tmp/fl" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "no flight record" <<<"$out" ||
	fail "doctor --from an empty folder: rc $rc, '$out'"
printf 'group 1 g x 1 0\n' >"$tmp/fl/op-1.n0.flight"
out=$("$C" doctor --from "$tmp/fl" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "op-1.n0.flight: Protocol error" <<<"$out" ||
	fail "doctor --from a malformed record: rc $rc, '$out'"
printf '# flight record of n0\ngroup 1 g 2 1 0\nop 1 5 1 16 0x1 0 0 3000000000 -1\n' >"$tmp/fl/op-2.n0.flight"
printf '# flight record of n1\ngroup 1 g 2 1 1\n' >"$tmp/fl/op-2.n1.flight"
out=$("$C" doctor --from "$tmp/fl" --trigger op-2 2>&1); rc=$?
[ $rc -eq 3 ] && grep -q "missing ranks: {1}" <<<"$out" &&
	grep -q "rank 1: node n1, local rank 0: joined, did not post op 5" <<<"$out" ||
	fail "doctor --from two records: rc $rc, '$out'"
echo PASS

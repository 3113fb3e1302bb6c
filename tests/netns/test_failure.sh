#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Bootstrap and failure cases on a real cluster (scripts/cluster.sh --boot):
# sidecars get their membership from the coordinator in csn0.
#
#   test_failure.sh CASE   (suite netns; CS_BUILD_DIR set by meson)
#
#   boot_kill      kill -9 a sidecar during an allreduce: the run ends with
#                  CS_ERR_PEER_LOST naming its rank (bounded time), then
#                  the 3 survivors run a correct allreduce (--exclude-lost)
#   boot_intruder  a fifth sidecar with the wrong token is refused (log
#                  lines on both sides, exit 3); the group still works
#   boot_stale     authentication on by default (no auth.enable given):
#                  frames stamped with an older epoch are dropped and
#                  counted (stats rx_stale_epoch) before the tag check;
#                  results stay correct
#   boot_stall     SIGSTOP a sidecar during an allreduce with a deadline
#                  shorter than fail_timeout: CS_ERR_TIMEOUT naming it;
#                  after SIGCONT the next allreduce is correct
#   boot_coord     kill -9 the coordinator's sidecar: every member reports
#                  "coordinator lost" (log, ping) within fail_timeout + 5 s
#   boot_coord_stall  SIGSTOP it instead: the same, from the silence
#   etcd_kill_first   --rendezvous etcd: boot_kill of csn0, the first
#                  sidecar (CS_ERR_PEER_LOST naming rank 0, survivors re-form)
#   etcd_kill_mid  the same with csn2
#   etcd_store_kill   kill -9 etcd: every member names its loss (log,
#                  ping) within fail_timeout + 5 s; allreduces go on
#   etcd_partition csn2's link down: declared lost (lease expiry); link
#                  up: csn2 finds its lease gone, refuses operations as
#                  stale ("must rejoin"); the other three run
#   etcd_token     a sidecar with another job token is refused by the
#                  etcd rendezvous (exit 3, the reason in its log)
#   boot_auth      authentication on by default (auth.enable=auto with
#                  the cluster's token): allreduces stay correct; frames of the
#                  current epoch aimed at the last operation with a wrong
#                  tag or none are dropped and counted (ar_stats
#                  rx_auth_fail, rx_auth_notag); a frame with the right
#                  tag (key from the job token) passes the check;
#                  frames recorded during an allreduce and sent again byte
#                  for byte (valid tags) are taken for duplicates
#                  (dup_rcvd rises by at least their number), the next
#                  allreduce is correct
#   boot_auth_kill boot_kill with auth.enable=1: the survivors re-form at
#                  the new epoch under its new key (auth_rekey) with no
#                  authentication failure, and the allreduce is correct
#
# CS_CLUSTER=P names the namespaces P... (default cs), as cluster.sh does.
# Needs root, ip, nft, python3 (skips with 77 otherwise); uses the udp
# port (CS_FAIL_PORT=af_packet for the DPDK one). Tears down by trap.
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/netns/lib.sh

CASE=${1:?usage: test_failure.sh CASE}
BUILD=${CS_BUILD_DIR:-build}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
CLI=$BUILD/tools/collstack
DAEMON=$BUILD/sidecar/collstackd
PORT=${CS_FAIL_PORT:-udp}
RUN=/run/collstack
# CS_CLUSTER=P names everything P... (default cs: csn0.., cssw, csv<i>),
# as scripts/cluster.sh does, so that several checkouts can test at once.
P=${CS_CLUSTER:-cs}
[[ "$P" =~ ^[a-z0-9]{1,6}$ ]] || { echo "FAIL: bad CS_CLUSTER '$P'"; exit 1; }
export CS_CLUSTER=$P
if [ "$P" = cs ]; then ENV_FILE=$RUN/cluster.env; else ENV_FILE=$RUN/cluster-$P.env; fi
export CS_CLUSTER_ENV=$ENV_FILE
# Loaded 2-core machines: a slow heartbeat path must not look like a loss,
# and a descheduled peer must not make a session give up.
FAIL_S=${CS_FAIL_TIMEOUT_S:-3}
COMMON=(--set member.hb_interval=200ms --set member.fail_timeout=${FAIL_S}s
	--set rel.max_timeouts=3000)

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

[ -x "$CLI" ] && [ -x "$DAEMON" ] || fail "not built: $CLI, $DAEMON"
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces)"
for t in ip nft python3; do
	command -v $t >/dev/null || skip "missing tool: $t"
done
[ -f "$ENV_FILE" ] && skip "a cluster is already up ($ENV_FILE)"
grep -q "^${P}n[0-9]" < <(ip netns list) && skip "${P}n* namespaces exist (in use?)"
if [ "$PORT" = udp ]; then
	"$DAEMON" --help-config | grep 'port types:.* udp' >/dev/null ||
		skip "collstackd built without io_uring (no udp port)"
else
	"$DAEMON" --help-config | grep 'port types:.* dpdk' >/dev/null ||
		skip "collstackd built without DPDK"
fi

TMP=$(mktemp -d /tmp/cs-failure.XXXXXX)
EXTRA_PIDS=()
cleanup() {
	for p in "${EXTRA_PIDS[@]}"; do
		kill -CONT "$p" 2>/dev/null
		kill -TERM "$p" 2>/dev/null
	done
	# keep the sidecars' logs of the last run for a post-mortem
	mkdir -p /tmp/cs-failure-logs && cp $RUN/${P}n*.log "$TMP"/*.log \
		/tmp/cs-failure-logs/ 2>/dev/null
	scripts/cluster.sh down >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT

up() {	# N [more cluster.sh args]
	local n=$1; shift
	CS_BUILD_DIR=$BUILD scripts/cluster.sh up "$n" --port "$PORT" --boot \
		"${COMMON[@]}" "$@" || fail "cluster.sh up $n --boot"
	# shellcheck disable=SC1090
	. "$ENV_FILE"
}

pid_of() { echo "$CS_PIDS" | cut -d' ' -f$(($1 + 1)); }

ctl() { cs_ctl "$RUN/$1" "$2"; }	# node request -> reply line

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

run_ok() {	# [args]: a correct allreduce
	"$CLI" run allreduce -b 1K -e 64K --iters 1 --warmup 0 "$@" \
		>"$TMP/ok.out" 2>&1
	local rc=$?
	cat "$TMP/ok.out"
	[ $rc = 0 ] && grep -q 'Out of bounds values : 0 OK' "$TMP/ok.out" ||
		fail "allreduce $* failed (rc $rc)"
}

boot_kill() {	# [victim [cluster.sh args]]
	local victim=${1:-2} p t_kill t_end rc dt lost_at
	shift || true
	up 4 "$@"
	run_ok
	p=$(pid_of $victim)
	"$CLI" run allreduce --bytes 16M --iters 50 --warmup 0 \
		--timeout 300000 >"$TMP/kill.out" 2>&1 &
	local rp=$!
	sleep 3
	t_kill=$(now)
	kill -9 "$p"
	wait $rp
	rc=$?
	t_end=$(now)
	cat "$TMP/kill.out"
	[ $rc != 0 ] || fail "the run did not fail after a kill -9"
	grep -q "CS_ERR_PEER_LOST: rank $victim lost" "$TMP/kill.out" ||
		fail "no CS_ERR_PEER_LOST naming rank $victim"
	dt=$(secs "$t_kill" "$t_end")
	lost_at=$(grep -h "peer lost: rank $victim" $RUN/${P}n1.log | head -1 |
		  cut -d' ' -f1)
	echo "kill -9 ${P}n$victim -> survivors' view: $(secs "$t_kill" "$lost_at") s;" \
	     "-> collstack run exited: $dt s (member.fail_timeout ${FAIL_S} s)"
	# generous: far below the op's 300 s deadline, i.e. not a timeout
	awk -v d="$dt" -v f="$FAIL_S" 'BEGIN { exit !(d < 2 * f + 20) }' ||
		fail "took $dt s"
	echo "${P}n0: $(ctl ${P}n0 ping)"
	run_ok --exclude-lost
	grep -q '3 ranks' "$TMP/ok.out" || fail "survivors did not re-form"
}

boot_intruder() {
	local rc
	up 4
	# In ${P}n3's namespace, another UDP port, the wrong token.
	ip netns exec ${P}n3 "$DAEMON" --set name=csx --set run_dir=$TMP/csx \
		--set node.rank=4 --set port.type=udp --set port.ip=10.77.0.4 \
		--set port.udp_port=7702 --set boot.addr=10.77.0.1:7701 \
		--set boot.token=not-the-job-token --set boot.timeout=20s \
		</dev/null >"$TMP/csx.log" 2>&1
	rc=$?
	cat "$TMP/csx.log"
	[ $rc = 3 ] || fail "the intruder exited $rc, want 3"
	grep -q "bootstrap refused: coordinator refused us: bad job token" \
		"$TMP/csx.log" || fail "no refusal line in the intruder's log"
	grep "does not hold the job token" $RUN/${P}n0.log ||
		fail "no refusal line in the coordinator's log"
	run_ok
}

# A well-formed DATA frame stamped with epoch 0 (the group is at 1+).
inject_stale() {
	ip netns exec ${P}n1 python3 - <<'PY'
import socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 11, 1)	# SO_NO_CHECK (see netns_test.sh)
s.bind(("10.77.0.2", 7798))
# version 1, DATA, flags 0, src 1, channel 0, group 0, epoch 0, op 7, ...
hdr = struct.pack("!BBHHHIIIIIIQQIIQQI", 1, 1, 0, 1, 0, 0, 0, 7,
                  0, 0, 0, 0, 0, 8, 0, 0, 0, 0)
for _ in range(5):
    s.sendto(hdr + b"\xff" * 8, ("10.77.0.1", 7700))
PY
	sleep 0.5
}

boot_stale() {
	local st ar
	up 2	# packet authentication on by default (the cluster's token)
	ar=$(ctl ${P}n0 ar_stats)
	[ "$(kv "$ar" auth)" = 1 ] || fail "authentication is not on by default: $ar"
	st=$(ctl ${P}n0 stats)
	[ "$(kv "$st" rx_stale_epoch)" = 0 ] || fail "stale frames before: $st"
	inject_stale
	st=$(ctl ${P}n0 stats)
	echo "${P}n0: $st"
	[ "$(kv "$st" rx_stale_epoch)" -ge 5 ] ||
		fail "stale-epoch frames were not counted"
	ar=$(ctl ${P}n0 ar_stats)
	echo "${P}n0: $ar"
	# dropped by the epoch check, before their (missing) tag is looked at
	[ "$(kv "$ar" rx_auth_fail)" = 0 ] ||
		fail "stale frames reached the tag check: $ar"
	run_ok
}

boot_stall() {
	local victim=2 p rc
	# collstack run waits deadline + 30 s for a silent sidecar: the
	# stall must stay shorter than fail_timeout all that time
	[ "$FAIL_S" -lt 90 ] && FAIL_S=90 &&
		COMMON=(--set member.hb_interval=200ms
			--set member.fail_timeout=90s --set rel.max_timeouts=3000)
	up 4
	run_ok
	p=$(pid_of $victim)
	EXTRA_PIDS+=("$p")
	"$CLI" run allreduce --bytes 16M --iters 50 --warmup 0 \
		--timeout 3000 >"$TMP/stall.out" 2>&1 &
	local rp=$!
	sleep 1
	kill -STOP "$p"
	wait $rp
	rc=$?
	kill -CONT "$p"
	cat "$TMP/stall.out"
	[ $rc != 0 ] || fail "the run did not fail with a stalled sidecar"
	grep -q "CS_ERR_TIMEOUT: ${P}n$victim" "$TMP/stall.out" ||
		fail "no CS_ERR_TIMEOUT naming ${P}n$victim"
	[ -n "$(grep "CS_ERR_TIMEOUT" "$TMP/stall.out" | grep -v "${P}n$victim ")" ] &&
		fail "a live sidecar was named as stalled"
	grep -q "peer lost" $RUN/${P}n0.log && fail "a stall was taken for a loss"
	run_ok
}

# Every member in $2.. reports the loss of the $1 ("coordinator" or "etcd")
# in its log and ping within $3 seconds of now-ish ($4: the loss's time).
all_report_lost() {
	local what=$1 bound=$2 t0=$3 n r t dt
	shift 3
	for n in "$@"; do
		for _ in $(seq $((bound * 10 + 100))); do
			r=$(ctl "$n" ping)
			[[ $r == *coordinator=lost* ]] && break
			sleep 0.1
		done
		echo "$n: $r"
		[[ $r == *coordinator=lost* ]] || fail "$n did not report it"
		t=$(grep -h "boot: $what lost" "$RUN/$n.log" | head -1 |
		    cut -d' ' -f1)
		[ -n "$t" ] || fail "no '$what lost' line in $n's log"
		dt=$(secs "$t0" "$t")
		echo "$n: '$what lost' $dt s after the loss (bound $bound s)"
		awk -v d="$dt" -v b="$bound" 'BEGIN { exit !(d <= b) }' ||
			fail "$n named it after $dt s"
	done
}

boot_coord() {	# kill -9: the connections close, every member knows at once
	local t0
	up 3
	t0=$(now)
	kill -9 "$(pid_of 0)"
	all_report_lost coordinator $((FAIL_S + 5)) "$t0" ${P}n1 ${P}n2
}

boot_coord_stall() {	# SIGSTOP: silence, named within fail_timeout
	local t0 p
	up 3
	p=$(pid_of 0)
	EXTRA_PIDS+=("$p")
	t0=$(now)
	kill -STOP "$p"
	all_report_lost coordinator $((FAIL_S + 5)) "$t0" ${P}n1 ${P}n2
	kill -CONT "$p"
}

etcd_kill_first() {	# the first sidecar: no coordinator to lose with it
	boot_kill 0 --rendezvous etcd
	grep -q "peers from the etcd store" $RUN/${P}n1.log ||
		fail "${P}n1 did not meet the others in etcd"
}

etcd_kill_mid() {
	boot_kill 2 --rendezvous etcd
}

etcd_store_kill() {	# etcd dies: named on every member; peers go on
	local t0
	up 3 --rendezvous etcd
	run_ok
	t0=$(now)
	kill -9 "$CS_ETCD_PID"
	all_report_lost etcd $((FAIL_S + 5)) "$t0" ${P}n0 ${P}n1 ${P}n2
	run_ok
}

etcd_partition() {	# cut ${P}n2 off; healed, it is stale until it rejoins
	local st t0
	up 4 --rendezvous etcd
	run_ok
	t0=$(now)
	ip -n ${P}sw link set ${P}v2 down
	for _ in $(seq $((FAIL_S * 10 + 300))); do
		st=$(ctl ${P}n1 ping)
		[ "$(kv "$st" lost)" = 2 ] && break
		sleep 0.1
	done
	echo "${P}n1: $st"
	[ "$(kv "$st" lost)" = 2 ] || fail "${P}n2 was not declared lost"
	echo "${P}n2 cut off -> declared lost after $(secs "$t0" "$(now)") s"
	ip -n ${P}sw link set ${P}v2 up
	# healed: ${P}n2 finds its lease gone and itself out of the view
	for _ in $(seq 600); do
		grep -q "our lease expired" $RUN/${P}n2.log && break
		sleep 0.1
	done
	grep "our lease expired" $RUN/${P}n2.log ||
		fail "${P}n2 did not notice that its lease expired"
	# ... and applies the store's view without itself at its next poll
	# of the store (the log line comes first: a run started between the
	# two timed out at ${P}n2 instead of being refused there)
	for _ in $(seq 300); do
		[ "$(kv "$(ctl ${P}n2 ping)" epoch)" = "$(kv "$st" epoch)" ] &&
			break
		sleep 0.1
	done
	echo "${P}n2: $(ctl ${P}n2 ping)"
	"$CLI" run allreduce -b 1K -e 1K --iters 1 --warmup 0 \
		--timeout 20000 >"$TMP/stale.out" 2>&1 &&
		fail "an allreduce with the stale ${P}n2 in it succeeded"
	cat "$TMP/stale.out"
	grep -q "rank 2) is not in the group's view.*must rejoin" \
		"$TMP/stale.out" || fail "${P}n2 was not refused as stale"
	sed "s/^CS_NODES=.*/CS_NODES=\"${P}n0 ${P}n1 ${P}n3\"/" "$ENV_FILE" \
		>"$TMP/three.env"
	run_ok --cluster "$TMP/three.env"
	grep -q '3 ranks' "$TMP/ok.out" || fail "the three did not run"
}

etcd_token() {	# a sidecar with another job token is refused
	local rc
	up 2 --rendezvous etcd
	ip netns exec ${P}n1 "$DAEMON" --set name=csx --set run_dir=$TMP/csx \
		--set node.rank=1 --set port.type=udp --set port.ip=10.77.0.2 \
		--set port.udp_port=7702 --set boot.world=2 \
		--set node.rendezvous=etcd://10.77.0.254:2379/$P-job \
		--set boot.token=not-the-job-token --set boot.timeout=10s \
		</dev/null >"$TMP/csx.log" 2>&1
	rc=$?
	cat "$TMP/csx.log"
	[ $rc = 3 ] || fail "the intruder exited $rc, want 3"
	grep -q "refused by the etcd.*wrong job token" "$TMP/csx.log" ||
		fail "no refusal line in the intruder's log"
	run_ok
}

# DATA frames from csn1 to csn0 of epoch $1 for operation $2: $3 frames
# each with (a) the AUTH flag and a wrong tag, (b) no tag, (c) the right
# tag computed from the job token in $4 (for operation $5 instead: one
# csn0 does not run, so a passed check only reaches the transport core,
# counted in its rx_frames, and goes no further). (a) and (c) alternate
# the two tag codes: SipHash (16-byte tag) and AES-GMAC (16-byte nonce, a
# random sender instance and a counter, then the tag), both checked by
# every sidecar.
inject_auth() {
	ip netns exec ${P}n1 python3 - "$@" <<'PY'
import os, socket, struct, sys
sys.path.insert(0, "tests/netns")
import cs_auth
epoch, op, n, tokfile, op_ok = (int(sys.argv[1]), int(sys.argv[2]),
                                int(sys.argv[3]), sys.argv[4],
                                int(sys.argv[5]))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 11, 1)	# SO_NO_CHECK (see netns_test.sh)
s.bind(("10.77.0.2", 7797))
F_AUTH, F_LAST, F_GMAC = 0x0004, 0x0020, 0x0080
payload = b"\x7f" * 8
sid = os.urandom(12)	# this injector's GMAC sender instance
def fields(flags, op, seq):
    # version, type DATA, flags, src 1, channel 0, group 0, epoch, op,
    # step, seq, ack, sack, offset, len, credit, ts, ts_echo
    return (1, 1, flags, 1, 0, 0, epoch, op, 0, seq, 0, 0, 0,
            len(payload), 0, 1, 0)
def frame(flags, op, seq, tag=b""):
    return (struct.pack("!BBHHHIIIIIIQQIIQQI", *fields(flags, op, seq), 0)
            + tag + payload)
def good_tag(flags, op, seq):
    """the tag (GMAC: nonce and tag) of frame(flags, op, seq)"""
    tok = open(tokfile, "rb").read().split(b"\n")[0].rstrip(b"\r")
    if not flags & F_GMAC:
        return cs_auth.tag(cs_auth.epoch_key(tok, 0, epoch),
                           fields(flags, op, seq), payload)
    nonce = sid + struct.pack(">I", seq)
    return nonce + cs_auth.gmac_tag(cs_auth.gmac_epoch_key(tok, 0, epoch),
                                    fields(flags, op, seq), payload, nonce)
dst = ("10.77.0.1", 7700)
for i in range(n):	# (a) wrong tag, either code
    fl = F_AUTH | F_LAST | (F_GMAC if i % 2 else 0)
    s.sendto(frame(fl, op, i, os.urandom(32 if i % 2 else 16)), dst)
for i in range(n):	# (b) no tag
    s.sendto(frame(F_LAST, op, i), dst)
for i in range(n):	# (c) right tag, either code, an op ${P}n0 does not run
    fl = F_AUTH | F_LAST | (F_GMAC if i % 2 else 0)
    s.sendto(frame(fl, op_ok, i, good_tag(fl, op_ok, i)), dst)
PY
	sleep 0.5
}

# Record the dataplane frames ${P}n0 receives from ${P}n1 into $1 until $2
# exists (udp port: the kernel's socket, so a packet socket sees them).
sniff() {
	ip netns exec ${P}n0 python3 - "$1" "$2" "${P}d0" <<'PY'
import os, socket, struct, sys
out, stop, dev = sys.argv[1], sys.argv[2], sys.argv[3]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
s.bind((dev, 0))
s.settimeout(0.05)
open(out + ".ready", "w").close()
with open(out, "wb") as f:
    while not os.path.exists(stop):
        try:
            fr = s.recv(65536)
        except socket.timeout:
            continue
        ihl = (fr[14] & 15) * 4
        ip, udp = fr[14:], fr[14 + ihl:]
        if ip[9] != 17 or socket.inet_ntoa(ip[12:16]) != "10.77.0.2":
            continue
        if struct.unpack("!H", udp[2:4])[0] != 7700:
            continue
        body = udp[8:]
        f.write(struct.pack("!I", len(body)) + body)
PY
}

# Send ${P}n0 again, from ${P}n1, the recorded DATA frames (file $1), byte
# for byte. Prints how many.
replay_frames() {
	ip netns exec ${P}n1 python3 - "$1" <<'PY'
import socket, struct, sys
data = open(sys.argv[1], "rb").read()
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 11, 1)	# SO_NO_CHECK (see netns_test.sh)
s.bind(("10.77.0.2", 7796))
def frames(body):
    # a GSO datagram holds several frames back to back, each 76 header
    # bytes (+ a 16-byte tag when flags has AUTH, + a 16-byte nonce when
    # it has GMAC) + len (bytes 48..51)
    o = 0
    while o + 76 <= len(body):
        flags, = struct.unpack_from("!H", body, o + 2)
        ln, = struct.unpack_from("!I", body, o + 48)
        end = (o + 76 + (16 if flags & 4 else 0) +
               (16 if flags & 0x80 else 0) + ln)
        yield body[o:end]
        o = end
i = n = 0
while i + 4 <= len(data):
    ln, = struct.unpack_from("!I", data, i)
    body = data[i + 4:i + 4 + ln]
    i += 4 + ln
    for f in frames(body):
        if f[1] == 1:	# type DATA (wire.h)
            s.sendto(f, ("10.77.0.1", 7700))
            n += 1
print(n)
PY
}

boot_auth() {
	local st ar ep op fail0 notag0 other0 fail1 notag1 other1 n=5
	up 2	# auth.enable=auto, the default: on with the cluster's token
	grep -q "packet authentication on" $RUN/${P}n0.log ||
		fail "${P}n0 did not turn authentication on"
	run_ok
	ar=$(ctl ${P}n0 ar_stats)
	echo "${P}n0 before: $ar"
	[ "$(kv "$ar" auth)" = 1 ] || fail "ar_stats does not say auth=1"
	# auth.mac=auto: GMAC where the CPU has AES-NI (and PCLMULQDQ)
	if grep -qw aes /proc/cpuinfo && grep -qw pclmulqdq /proc/cpuinfo; then
		grep -q " auth_mac=gmac-aes256-openssl" <<<"$ar" ||
			fail "an AES-NI CPU does not send GMAC tags: $ar"
		[ "$(kv "$ar" auth_skeys)" -ge 2 ] ||
			fail "no sender keys (its own and its peer's): $ar"
	fi
	fail0=$(kv "$ar" rx_auth_fail)
	notag0=$(kv "$ar" rx_auth_notag)
	other0=$(kv "$ar" rx_frames)
	[ "$fail0" = 0 ] || fail "authentication failures in a clean run: $ar"
	[ "$(kv "$ar" ops_done)" -gt 0 ] || fail "no operation ran: $ar"
	op=1
	st=$(ctl ${P}n0 stats)
	ep=$(kv "$st" epoch)
	[ -n "$ep" ] && [ "$ep" -ge 1 ] || fail "no group epoch: $st"
	inject_auth "$ep" "$op" $n "$RUN/$P-job.token" 2147418112
	ar=$(ctl ${P}n0 ar_stats)
	echo "${P}n0 after: $ar"
	fail1=$(kv "$ar" rx_auth_fail)
	notag1=$(kv "$ar" rx_auth_notag)
	other1=$(kv "$ar" rx_frames)
	[ $((fail1 - fail0)) = $((2 * n)) ] ||
		fail "rx_auth_fail rose by $((fail1 - fail0)), want $((2 * n))"
	[ $((notag1 - notag0)) = $n ] ||
		fail "rx_auth_notag rose by $((notag1 - notag0)), want $n"
	[ $((other1 - other0)) -ge $n ] ||
		fail "rightly tagged frames did not pass the check"
	[ "$(kv "$(ctl ${P}n0 stats)" rx_stale_epoch)" = 0 ] ||
		fail "the frames were taken for stale ones"
	# Replay: frames recorded during an allreduce, sent again byte for
	# byte (valid tags): the peer's session (it outlives operations)
	# takes them for duplicates (dup_rcvd), nothing is reduced twice.
	local rec=$TMP/rec stop=$TMP/rec.stop sp nrep dup0 dup1
	sniff "$rec" "$stop" &
	sp=$!
	for _ in $(seq 100); do [ -f "$rec.ready" ] && break; sleep 0.1; done
	run_ok
	touch "$stop"
	wait $sp
	ar=$(ctl ${P}n0 ar_stats)
	dup0=$(kv "$ar" dup_rcvd)
	nrep=$(replay_frames "$rec")
	echo "replayed $nrep recorded DATA frames"
	[ "$nrep" -ge 1 ] || fail "no DATA frame was recorded"
	run_ok
	ar=$(ctl ${P}n0 ar_stats)
	echo "${P}n0 after the replay and the next run: $ar"
	dup1=$(kv "$ar" dup_rcvd)
	[ $((dup1 - dup0)) -ge "$nrep" ] ||
		fail "dup_rcvd rose by $((dup1 - dup0)), want >= $nrep replays"
	[ "$(kv "$ar" rx_auth_fail)" = "$fail1" ] ||
		fail "authentication failures in the runs after"
}

boot_auth_kill() {
	local ar n
	COMMON+=(--set auth.enable=1)
	boot_kill
	for n in 0 1 3; do
		ar=$(ctl ${P}n$n ar_stats)
		echo "${P}n$n: $ar"
		[ "$(kv "$ar" auth)" = 1 ] || fail "${P}n$n: not auth=1"
		[ "$(kv "$ar" rx_auth_fail)" = 0 ] ||
			fail "${P}n$n: authentication failures across the loss"
		[ "$(kv "$ar" auth_rekey)" -ge 2 ] ||
			fail "${P}n$n: no key for the new epoch"
	done
}

# Start an elastic trainer (cs-trainer-elastic) of rank $1 of $2 beside
# sidecar $1; steps after the first wait for $TMP/go.<step>.
start_elastic() {
	ip netns exec ${P}n$1 env RANK=$1 WORLD_SIZE=$2 \
		ELASTIC_JOIN=${ELASTIC_JOIN:-0} \
		COLLSTACK_SOCKET=$RUN/${P}n$1/collstack.sock \
		timeout 600 "$ELASTIC" el "$TMP/go" "$3" >"$TMP/t$1.out" 2>&1 &
	TPIDS[$1]=$!
	EXTRA_PIDS+=($!)
}

# The trainer started beside sidecar $1 (under timeout(1)) and it.
kill_trainer() {
	local p=${TPIDS[$1]}
	kill -9 $(pgrep -P "$p") "$p" 2>/dev/null
	wait "$p" 2>/dev/null
}

# wait_line FILE PATTERN [PID]: until FILE has a line matching PATTERN.
wait_line() {
	for _ in $(seq 1200); do
		grep -q "$2" "$1" 2>/dev/null && return 0
		[ -n "${3:-}" ] && ! kill -0 "$3" 2>/dev/null &&
			grep -q "$2" "$1" 2>/dev/null && return 0
		[ -n "${3:-}" ] && ! kill -0 "$3" 2>/dev/null && break
		sleep 0.1
	done
	cat "$1"
	fail "no '$2' in $1"
}

# lost_everywhere N V: sidecars 0..N-1 but V see node V lost.
lost_everywhere() {
	local n=$1 v=$2 i st
	for ((i = 0; i < n; i++)); do
		[ $i = $v ] && continue
		for _ in $(seq $((FAIL_S * 10 + 300))); do
			st=$(ctl ${P}n$i ping)
			[ "$(kv "$st" lost)" = $v ] && break
			sleep 0.1
		done
		[ "$(kv "$st" lost)" = $v ] || fail "${P}n$i: node $v not lost: $st"
	done
}

# expect_step S N V SIZE SUM: every trainer but V's printed step S with
# SIZE ranks, its rank renumbered past the lost V, and SUM.
expect_step() {
	local s=$1 n=$2 v=$3 size=$4 sum=$5 i want
	for ((i = 0; i < n; i++)); do
		[ $i = $v ] && continue
		want=$i; [ $v -ge 0 ] && [ $i -gt $v ] && want=$((i - 1))
		wait_line "$TMP/t$i.out" "^step $s " "${TPIDS[$i]}"
		grep -q "^step $s size=$size rank=$want sum=$sum$" \
			"$TMP/t$i.out" || { cat "$TMP/t$i.out"
			fail "trainer $i: step $s is not size=$size rank=$want sum=$sum"; }
	done
}

# Elastic shrink: N sidecars, one trainer each in an elastic group (rank
# r adds 1 << r); step 1 sums all; kill -9 sidecar V (its trainer goes
# too); once the others' view lost it, step 2 runs on them without a new
# join: size N-1, the ranks above V one lower, the sum without 1 << V.
elastic_shrink() {	# N V [cluster.sh args]
	local n=$1 v=$2 i sum
	shift 2
	ELASTIC=$BUILD/tests/netns/cs-trainer-elastic
	[ -x "$ELASTIC" ] || fail "not built: $ELASTIC"
	TPIDS=()
	up "$n" "$@"
	for ((i = 0; i < n; i++)); do start_elastic $i "$n" 2; done
	sum=$(((1 << n) - 1))
	expect_step 1 "$n" -1 "$n" $sum
	echo "step 1: $n trainers, sum $sum on each"
	kill -9 "$(pid_of $v)"
	kill_trainer $v
	lost_everywhere "$n" $v
	echo "node $v lost on the others; step 2"
	touch "$TMP/go.2"
	expect_step 2 "$n" $v $((n - 1)) $((sum - (1 << v)))
	for ((i = 0; i < n; i++)); do
		[ $i = $v ] || cat "$TMP/t$i.out"
	done
	grep -h "re-formed" $RUN/${P}n$(((v + 1) % n)).log | tail -2
}

# Elastic kill/join cycle with the etcd rendezvous, N sidecars (one
# trainer each, elastic group, every rank adds 1 << its first rank):
#   step 1  all N                       sum 2^N - 1, size N (then
#                                       collstack run allreduce on all N)
#   kill -9 sidecar V = N/2 (and its trainer); the others' view loses it
#   step 2  N-1, no new join            sum - 2^V, size N-1, ranks above
#                                       V one lower
#   scripts/cluster.sh join: sidecar N joins (rank N, view grows); its
#   trainer joins with no rank (ELASTIC_JOIN=1) and adds 2^N
#   step 3  N, the newcomer last        sum + 2^N, size N, rank N-1
elastic_cycle() {	# N [cluster.sh args]
	local n=$1 v=$(($1 / 2)) i sum t0 ep0 ep rc
	shift
	ELASTIC=$BUILD/tests/netns/cs-trainer-elastic
	[ -x "$ELASTIC" ] || fail "not built: $ELASTIC"
	TPIDS=()
	t0=$(now)
	up "$n" --rendezvous etcd "$@"
	echo "up $n: $(secs "$t0" "$(now)") s"
	for ((i = 0; i < n; i++)); do start_elastic $i "$n" 3; done
	sum=$(((1 << n) - 1))
	expect_step 1 "$n" -1 "$n" $sum
	echo "step 1: $n trainers, sum $sum on each ($(secs "$t0" "$(now)") s)"
	[ -n "${CS_NO_RUN:-}" ] || run_ok	# and the sidecars' own allreduce over all N, 1 KiB .. 64 KiB
	kill -9 "$(pid_of $v)"
	kill_trainer $v
	lost_everywhere "$n" $v
	ep0=$(kv "$(ctl ${P}n0 ping)" epoch)
	touch "$TMP/go.2"
	sum=$((sum - (1 << v)))
	expect_step 2 "$n" $v $((n - 1)) $sum
	echo "step 2 after the loss of node $v: size $((n - 1)), sum $sum ($(secs "$t0" "$(now)") s)"
	CS_BUILD_DIR=$BUILD scripts/cluster.sh join "${COMMON[@]}" ||
		fail "cluster.sh join"
	. "$ENV_FILE"
	for ((i = 0; i < n; i++)); do
		[ $i = $v ] && continue
		for _ in $(seq 600); do
			ep=$(kv "$(ctl ${P}n$i ping)" epoch)
			[ "$ep" -gt "$ep0" ] && break
			sleep 0.1
		done
		[ "$ep" -gt "$ep0" ] || fail "${P}n$i did not see node $n join"
	done
	ELASTIC_JOIN=3 start_elastic $n $((n + 1)) 3
	touch "$TMP/go.3"
	sum=$((sum + (1 << n)))
	expect_step 3 $((n + 1)) $v "$n" $sum
	for ((i = 0; i <= n; i++)); do
		[ $i = $v ] && continue
		wait "${TPIDS[$i]}" ||
			{ rc=$?; cat "$TMP/t$i.out"; fail "trainer $i exited $rc"; }
	done
	echo "step 3 after node $n joined: size $n, sum $sum ($(secs "$t0" "$(now)") s)"
	grep -h "re-formed" $RUN/${P}n0.log | tail -2
}

case $CASE in
elastic_cycle_4|elastic_cycle_16)
	command -v etcd >/dev/null ||
		skip "no etcd binary (Debian's etcd-server)"
	# 16 sidecars, 16 trainers and etcd on 2 loaded cores: with a 3 s
	# lease TTL live members were dropped (a process off the CPU that
	# long; 4 nodes too at load 20, once); 10 s by default here
	if [ -z "${CS_FAIL_TIMEOUT_S:-}" ]; then
		FAIL_S=10
		COMMON=(--set member.hb_interval=500ms
			--set member.fail_timeout=${FAIL_S}s
			--set rel.max_timeouts=3000)
	fi
	elastic_cycle ${CASE#elastic_cycle_} ;;
elastic_shrink) elastic_shrink 4 2 ;;	# TCP coordinator in sidecar 0
elastic_shrink_etcd)	# node 0 lost: no coordinator goes with it
	command -v etcd >/dev/null ||
		skip "no etcd binary (Debian's etcd-server)"
	elastic_shrink 3 0 --rendezvous etcd ;;
boot_kill|boot_intruder|boot_stale|boot_stall|boot_coord) $CASE ;;
boot_coord_stall) $CASE ;;
etcd_kill_first|etcd_kill_mid|etcd_store_kill|etcd_token|etcd_partition)
	command -v etcd >/dev/null ||
		skip "no etcd binary (Debian's etcd-server)"
	$CASE ;;
boot_auth) $CASE ;;
boot_auth_kill) $CASE ;;
*) fail "unknown case $CASE" ;;
esac
echo "PASS: $CASE"

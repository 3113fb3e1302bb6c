#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# observe/ on a 4-node namespace cluster (scripts/cluster.sh, names of its
# own): the merged timeline, the Prometheus endpoint, collstack top and
# collstack doctor (docs/observe.md).
#
#   test_observe.sh CASE      (meson suite netns; CS_BUILD_DIR set)
#
# Cases:
#   trace_4     clock offsets injected into three sidecars (+5 s, -3 s,
#               +1.234567 s; trace_offset) are recovered within the bound
#               collstack trace prints, from the heartbeats (--clock hb)
#               and from the control socket (--clock ctl), and exactly
#               from this machine's clock (the default here, --delays:
#               one row per ring neighbour, none negative; a collector
#               in a time namespace of its own is refused --clock host
#               and gets the heartbeat offsets); the JSON parses, has events of
#               every node, its timestamps never go back, and every frame
#               received was, on the aligned clocks, sent before it
#               (within the two nodes' bounds); every node shows its ops
#   metrics_4   Debian's prometheus (started here, in the first
#               namespace, on its loopback) scrapes the 4 sidecars'
#               /metrics while 2 % of frames are dropped by the fault
#               shim: every target is up, promtool check metrics passes on
#               each scrape, the drops Prometheus stored equal what each
#               fault shim counted (collstack stats), and retransmissions
#               were counted; collstack top --once shows every node and path
#   health_4    the bridge drops 15 % of the dataplane frames towards node
#               2 (an nft rule on its switch port, in a table of this
#               test's own): collstack top --once flags the ring
#               path node 1 -> node 2 (LOSS) and neither 0 -> 1 nor 3 -> 0
#   doctor_4x1  one trainer per node runs allreduces; the rank-2 trainer
#               is stopped (SIGSTOP): collstack doctor names it,
#               "missing ranks: {2}", on its node
#   flight_auto_4x1  (membership from the coordinator) the rank-2 trainer
#               is stopped: past flight.auto_after every one of the four
#               sidecars writes its flight record under one trigger, and
#               collstack doctor --from names rank 2; then node 3's
#               sidecar is killed and the three survivors write theirs
# Needs root (else exit 77), prometheus/promtool for metrics_4 (else 77).
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/netns/lib.sh

CASE=${1:?usage: test_observe.sh CASE}
BUILD=${CS_BUILD_DIR:-build}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
CLI=$BUILD/tools/collstack
DAEMON=$BUILD/sidecar/collstackd
TMP=
PROM_PID=
BENCH_PID=
TPIDS=()

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

[ -x "$CLI" ] && [ -x "$DAEMON" ] || fail "not built: $CLI, $DAEMON"
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces)"
for t in ip nft python3 curl; do
	command -v $t >/dev/null || skip "missing tool: $t"
done
PORT=udp
"$DAEMON" --help-config | grep 'port types:.* dpdk' >/dev/null && PORT=af_packet

# a caller's CS_CLUSTER prefix (up to 4 characters) keeps the names apart
# from other sessions' clusters
export CS_CLUSTER=${CS_CLUSTER:-o$(printf '%02d' $(($$ % 100)))}$(printf '%s' "$CASE" | cksum | cut -c1-2)
export CS_CLUSTER_ENV=/run/collstack/cluster-$CS_CLUSTER.env
RUNROOT=/run/collstack

cleanup() {
	for p in "${TPIDS[@]}"; do
		kill -CONT "$p" 2>/dev/null
		kill -KILL "$p" 2>/dev/null
	done
	if [ -n "$BENCH_PID" ]; then
		kill -KILL "$BENCH_PID" 2>/dev/null
		wait "$BENCH_PID" 2>/dev/null
	fi
	if [ -n "$PROM_PID" ]; then
		kill -TERM "$PROM_PID" 2>/dev/null
		wait "$PROM_PID" 2>/dev/null
	fi
	CS_BUILD_DIR=$BUILD scripts/cluster.sh down >/dev/null 2>&1
	[ -n "$TMP" ] && rm -rf "$TMP"
}
trap cleanup EXIT
TMP=$(mktemp -d)

cluster_up() {
	CS_BUILD_DIR=$BUILD scripts/cluster.sh up 4 --port $PORT "$@" ||
		fail "cluster.sh up $*"
}

node() { echo "$RUNROOT/${CS_CLUSTER}n$1"; }

case_trace_4() {
	local offs=(0 5 -3 1.234567) i r out
	cluster_up --boot # the coordinator's heartbeats carry the stamps
	for i in 1 2 3; do
		r=$(cs_ctl "$(node $i)" "trace_offset ${offs[$i]}")
		[[ $r == ok* ]] || fail "trace_offset on node $i: $r"
	done
	"$CLI" run allreduce -b 1M -e 4M --iters 2 --warmup 0 \
		--timeout 300000 >"$TMP/run.out" ||
		fail "allreduce: $(tail -3 "$TMP/run.out")"
	out=$("$CLI" trace --clock ctl --out "$TMP/c.json") ||
		fail "collstack trace --clock ctl: $out"
	echo "$out" | tee "$TMP/ctl.out"
	out=$("$CLI" trace --clock hb --out "$TMP/t.json") ||
		fail "collstack trace --clock hb: $out"
	echo "$out" | tee "$TMP/trace.out"
	# the default here: every sidecar reads this machine's clock
	out=$("$CLI" trace --out "$TMP/h.json" --delays) ||
		fail "collstack trace --delays: $out"
	echo "$out" | tee "$TMP/host.out"
	python3 - "$TMP/host.out" "$CS_CLUSTER" "${offs[*]}" <<'PY' ||
import re, sys
prefix, offs = sys.argv[2], [float(x) for x in sys.argv[3].split()]
lines = open(sys.argv[1]).read().splitlines()
assert "clock reference: this machine's (every sidecar reads it)" in lines, "not the host clock"
for i, off in enumerate(offs):
    l = [x for x in lines if x.startswith(f"{prefix}n{i} ") and "clock offset" in x]
    m = re.search(r"clock offset ([-+0-9.]+) s \+- ([0-9.]+) s \(host\)", l[0])
    assert m, f"node {i}: {l[0]}"
    assert float(m.group(1)) == off and float(m.group(2)) == 0, f"node {i}: {l[0]} vs {off}"
rows = [x.split() for x in lines if re.match(rf"{prefix}n\d +{prefix}n\d +\d", x)]
pairs = {(r[0], r[1]) for r in rows}
ring = {(f"{prefix}n{i}", f"{prefix}n{(i + 1) % 4}") for i in range(4)}
assert pairs == ring, f"pairs with delays {sorted(pairs)}, not the ring's"
allrow = [x.split() for x in lines if x.startswith("all ")]
assert allrow, "no row over all pairs"
n, lo = int(allrow[0][1]), float(allrow[0][2])
assert n == sum(int(r[2]) for r in rows), "the pairs do not add up to the row over all"
assert lo >= 0, f"a frame handled before its send on one clock: {lo} us"
m = re.search(r"(\d+) frame\(s\) handled, (\d+) paired.*?(\d+) handled before every", " ".join(lines))
assert m and int(m.group(2)) == n and int(m.group(3)) == 0, f"counts: {m and m.groups()}"
assert n > 100, f"only {n} frames paired"
print(f"host clock: offsets are the injected skews exactly; {n} frames' delays, none negative")
PY
		fail "host clock and delays"
	# a collector on another clock (its own time namespace, monotonic
	# moved by 5 s): --clock host refuses, auto takes the heartbeats
	if unshare --time --monotonic 5 true 2>/dev/null; then
		out=$(unshare --time --monotonic 5 "$CLI" trace --clock host \
			--out "$TMP/x.json" 2>&1) &&
			fail "--clock host from another clock: $out"
		[[ $out == *"needs every sidecar on this machine's clock"* ]] ||
			fail "--clock host from another clock said: $out"
		out=$(unshare --time --monotonic 5 "$CLI" trace \
			--out "$TMP/y.json") ||
			fail "collstack trace from another clock: $out"
		[[ $out == *"does not read this machine's clock: heartbeat offsets"* &&
			$out == *"clock reference: the coordinator's (heartbeat offsets)"* ]] ||
			fail "auto from another clock: $out"
		echo "another clock: --clock host refused, auto took the heartbeats"
	else
		echo "unshare --time unsupported here: the other-clock checks skipped"
	fi
	python3 - "$TMP/ctl.out" "$CS_CLUSTER" "${offs[*]}" control <<'PY' ||
import re, sys
prefix, offs, how = sys.argv[2], [float(x) for x in sys.argv[3].split()], sys.argv[4]
lines = open(sys.argv[1]).read().splitlines()
for i, off in enumerate(offs):
    l = [x for x in lines if x.startswith(f"{prefix}n{i} ") and "clock offset" in x]
    assert l, f"no line for node {i}"
    m = re.search(r"clock offset ([-+0-9.]+) s \+- ([0-9.]+) s \((\w+)\)", l[0])
    est, b = float(m.group(1)), float(m.group(2))
    assert m.group(3) == how, f"node {i}: offset from {m.group(3)}, not {how}"
    assert abs(est - off) <= b + 1e-9, f"node {i}: {est} vs injected {off} +- {b}"
    print(f"{how}: node {i}: injected {off:+.6f} s, estimated {est:+.9f} s +- {b:.9f} s: ok")
PY
		fail "control-socket offsets"
	python3 - "$TMP/t.json" "$CS_CLUSTER" "${offs[*]}" "$TMP/trace.out" <<'PY' ||
import json, re, sys
path, prefix, offs = sys.argv[1], sys.argv[2], [float(x) for x in sys.argv[3].split()]
lines = open(sys.argv[4]).read().splitlines()
assert "clock reference: the coordinator's (heartbeat offsets)" in lines, "not the heartbeat offsets"
bound = {}
for i, off in enumerate(offs):
    l = [x for x in lines if x.startswith(f"{prefix}n{i} ") and "clock offset" in x]
    assert l, f"no line for node {i}"
    m = re.search(r"clock offset ([-+0-9.]+) s \+- ([0-9.]+) s \(heartbeats\)", l[0])
    assert m, f"node {i}: not from the heartbeats: {l[0]}"
    est, b = float(m.group(1)), float(m.group(2))
    assert abs(est - off) <= b + 1e-9, f"node {i}: {est} vs injected {off} +- {b}"
    bound[i + 1] = b
    print(f"node {i}: injected {off:+.6f} s, estimated {est:+.9f} s +- {b:.9f} s: ok")
d = json.load(open(path))
ev = [e for e in d["traceEvents"] if e["ph"] != "M"]
pids = {e["pid"] for e in ev}
assert pids == {1, 2, 3, 4}, f"events from pids {sorted(pids)}"
ts = [e["ts"] for e in ev]
assert all(a <= b for a, b in zip(ts, ts[1:])), "timestamps go back"
ops = {e["pid"] for e in ev if e.get("cat") == "op"}
assert ops == {1, 2, 3, 4}, f"op spans only on {sorted(ops)}"
tx = {}
for e in ev:
    if e["name"] == "tx":
        a = e["args"]
        k = (e["pid"] - 1, a["peer"], a["group"], a["op"], a["seq"], a["channel"])
        tx.setdefault(k, e["ts"])
matched = worst = 0
for e in ev:
    if e["name"] == "rx":
        a = e["args"]
        k = (a["peer"], e["pid"] - 1, a["group"], a["op"], a["seq"], a["channel"])
        if k in tx:
            matched += 1
            slack = (bound[a["peer"] + 1] + bound[e["pid"]]) * 1e6
            assert e["ts"] >= tx[k] - slack, f"rx before tx: {k} {e['ts']} < {tx[k]} - {slack}"
            worst = max(worst, tx[k] - e["ts"])
assert matched > 100, f"only {matched} tx/rx pairs matched"
print(f"{len(ev)} events from 4 nodes, monotonic; {matched} tx->rx pairs causal on the aligned clocks")
PY
		fail "trace checks"
	echo "trace_4 ok"
}

# The fault shims' drops summed over the cluster, from collstack stats.
shim_drops() {
	"$CLI" stats --raw | sed -n 's/.* stats: .* f_dropped=\([0-9]*\).*/\1/p' |
		awk '{s += $1} END {print s + 0}'
}

case_metrics_4() {
	local i r sum_stats sum_prom q out ns
	command -v prometheus >/dev/null && command -v promtool >/dev/null ||
		skip "missing prometheus/promtool (scripts/setup.sh installs them)"
	cluster_up --set 'metrics.listen=*:9464' \
		--set fault.drop=0.02
	ns=${CS_CLUSTER}n0
	for i in 0 1 2 3; do
		ip netns exec "$ns" curl -sf "http://10.77.0.$((i + 1)):9464/metrics" \
			>"$TMP/scrape$i.txt" || fail "scrape of node $i"
		promtool check metrics <"$TMP/scrape$i.txt" ||
			fail "promtool check metrics: node $i"
	done
	cat >"$TMP/prom.yml" <<YML
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: collstack
    static_configs:
      - targets: ['10.77.0.1:9464', '10.77.0.2:9464', '10.77.0.3:9464', '10.77.0.4:9464']
YML
	promtool check config "$TMP/prom.yml" >/dev/null || fail "prometheus config"
	ip netns exec "$ns" prometheus --config.file="$TMP/prom.yml" \
		--storage.tsdb.path="$TMP/data" \
		--web.listen-address=127.0.0.1:9090 >"$TMP/prom.log" 2>&1 &
	PROM_PID=$!
	"$CLI" run allreduce -b 4M -e 4M --iters 2 --warmup 0 \
		--timeout 300000 >"$TMP/run.out" ||
		fail "allreduce: $(tail -3 "$TMP/run.out")"
	sum_stats=$(shim_drops)
	[ "$sum_stats" -gt 0 ] || fail "the fault shim dropped nothing"
	# The shims go on dropping heartbeat frames after the run, so the
	# count Prometheus stored is checked against the shims' counts read
	# just before and just after it: s1 is read more than two scrape
	# intervals before the query, so Prometheus' latest sample was taken
	# between s1 and s2, and a correct exporter gives s1 <= prom <= s2
	# (equal when nothing was dropped meanwhile). A scrape delayed by a
	# loaded machine only makes this round retry.
	q='sum(collstack_fault_injected_total{action="drop"})'
	local s1 s2 ok=
	for _ in $(seq 60); do
		s1=$(shim_drops)
		sleep 2.5
		out=$(ip netns exec "$ns" curl -sf "http://127.0.0.1:9090/api/v1/query" \
			--data-urlencode "query=$q") || out=
		sum_prom=$(sed -n 's/.*"value":\[[0-9.]*,"\([0-9]*\)"\].*/\1/p' <<<"$out")
		s2=$(shim_drops)
		if [ -n "$sum_prom" ] && [ "$sum_prom" -ge "$s1" ] &&
			[ "$sum_prom" -le "$s2" ] && [ "$sum_prom" -ge "$sum_stats" ]; then
			ok=1
			break
		fi
	done
	echo "fault shim drops: collstack stats $sum_stats after the run, $s1..$s2 around the query; Prometheus $sum_prom"
	[ -n "$ok" ] || { tail -5 "$TMP/prom.log"; fail "Prometheus has '$sum_prom' drops, the shims counted $s1..$s2"; }
	out=$(ip netns exec "$ns" curl -sf "http://127.0.0.1:9090/api/v1/query" \
		--data-urlencode 'query=count(up == 1)')
	grep -q '"value":\[[0-9.]*,"4"\]' <<<"$out" || fail "targets up: $out"
	out=$(ip netns exec "$ns" curl -sf "http://127.0.0.1:9090/api/v1/query" \
		--data-urlencode 'query=sum(collstack_peer_retransmits_total)')
	r=$(sed -n 's/.*"value":\[[0-9.]*,"\([0-9]*\)"\].*/\1/p' <<<"$out")
	echo "retransmissions Prometheus stored: $r"
	[ "${r:-0}" -gt 0 ] || fail "no retransmission counted: $out"
	out=$("$CLI" top --once --interval 0.3) || fail "collstack top: $out"
	echo "$out"
	[ "$(grep -c "^${CS_CLUSTER}n[0-3] " <<<"$out")" -ge 8 ] ||
		fail "top: expected 4 node rows and peer rows"
	grep -q "peer path(s) flagged" <<<"$out" || fail "top: no health line"
	echo "metrics_4 ok"
}

# The PIDs of the trainers whose socket is node $1's.
trainers_of() {
	local p
	for p in $(ps -eo pid=,comm= | awk '$2 == "cs-trainer-benc" {print $1}'); do
		{ tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null |
			grep -qx "COLLSTACK_SOCKET=$(node $1)/collstack.sock" &&
			echo "$p"
	done
}

# One trainer per node runs 64 KiB allreduces until the flight recorders
# know the group.
bench_started() {
	local out
	"$CLI" bench -o allreduce -b 64K -e 64K -n 10000000 -w 0 \
		--trainers-per-node 1 --timeout 600 >"$TMP/bench.out" 2>&1 &
	BENCH_PID=$!
	for _ in $(seq 60); do
		out=$("$CLI" doctor --min-age 0 2>&1)
		grep -q "group 'bench'" <<<"$out" && break
		sleep 1
	done
	grep -q "group 'bench'" <<<"$out" || fail "no group recorded: $out"
}

# SIGSTOP the trainer of node 2 (every trainer is resumed and killed by
# cleanup).
stop_trainer_2() {
	local i p stopped
	for i in 0 1 2 3; do
		for p in $(trainers_of $i); do TPIDS+=("$p"); done
	done
	stopped=$(trainers_of 2)
	[ -n "$stopped" ] || fail "no trainer of node 2 found"
	kill -STOP $stopped
	echo "stopped the trainer of node 2 (pid $stopped)"
}

case_doctor_4x1() {
	local out
	cluster_up
	bench_started
	stop_trainer_2
	# until the others wait on it past --min-age (before that, a snapshot
	# may rightly show the others not having posted the op it posted last)
	for _ in $(seq 90); do
		out=$("$CLI" doctor --min-age 1 2>&1)
		grep -q "missing ranks: {2}$" <<<"$out" && break
		sleep 1
	done
	echo "$out"
	grep -q "missing ranks: {2}$" <<<"$out" || fail "doctor did not name rank 2"
	grep -q "rank 2: node ${CS_CLUSTER}n2, local rank 0: joined, did not post" <<<"$out" ||
		fail "doctor did not name its node"
	echo "doctor_4x1 ok"
}

# Flight records written on their own: a stalled trainer, then a killed
# sidecar; nobody runs collstack doctor against the live cluster.
case_flight_auto_4x1() {
	local fl i out trig n pid
	fl=$TMP/flight
	cluster_up --boot --set flight.auto_after=3s --set "flight.dir=$fl"
	bench_started
	# (an operation slowed past flight.auto_after by a loaded machine
	# may have written records already: those triggers are not ours)
	local before
	before=$(ls "$fl" 2>/dev/null | cut -d. -f1 | sort -u)
	stop_trainer_2
	# the other three pass flight.auto_after; the first to notice asks
	# every sidecar (node 2's too) for its record under one trigger
	for _ in $(seq 60); do
		trig=$(ls "$fl" 2>/dev/null | grep '^op-.*\.flight$' | cut -d. -f1 |
			grep -vxF "${before:-none}" | sort | uniq -c | awk '$1 == 4 {print $2; exit}')
		[ -n "$trig" ] && break
		sleep 1
	done
	ls -l "$fl"
	[ -n "$trig" ] || fail "no trigger with the records of all 4 nodes"
	for i in 0 1 2 3; do
		head -1 "$fl/$trig.${CS_CLUSTER}n$i.flight"
	done
	out=$("$CLI" doctor --from "$fl" --trigger "$trig" --min-age 1 2>&1)
	echo "$out"
	grep -q "missing ranks: {2}$" <<<"$out" || fail "doctor --from did not name rank 2"
	grep -q "rank 2: node ${CS_CLUSTER}n2, local rank 0: joined, did not post" <<<"$out" ||
		fail "doctor --from did not name its node"
	# a killed sidecar: the survivors write their records (its epoch)
	pid=$(cat "$RUNROOT/${CS_CLUSTER}n3/pid") || fail "no pid of node 3"
	kill -KILL "$pid"
	echo "killed the sidecar of node 3 (pid $pid)"
	for _ in $(seq 30); do
		n=$(ls "$fl" | grep -c '^epoch-.*\.flight$')
		[ "$n" -ge 3 ] && break
		sleep 1
	done
	ls "$fl" | grep '^epoch-'
	for i in 0 1 2; do
		ls "$fl" | grep -q "^epoch-[0-9]*\.${CS_CLUSTER}n$i\.flight$" ||
			fail "node $i wrote no record when node 3 was lost"
		grep -h "^# " "$fl"/epoch-*."${CS_CLUSTER}n$i".flight
	done
	grep -q "peer lost: rank 3" "$fl"/epoch-*."${CS_CLUSTER}n0".flight ||
		fail "the record does not say why"
	echo "flight_auto_4x1 ok"
}

case_health_4() {
	local out
	cluster_up
	ip netns exec "${CS_CLUSTER}sw" nft -f - <<EOF || fail "nft rule"
table bridge ${CS_CLUSTER}to2 {
	chain forward {
		type filter hook forward priority 0; policy accept;
		oifname "${CS_CLUSTER}v2" udp dport 7700 numgen random mod 100 < 15 counter drop
	}
}
EOF
	"$CLI" run allreduce -b 4M -e 4M --iters 3 --warmup 0 \
		--timeout 300000 >"$TMP/run.out" ||
		fail "allreduce: $(tail -3 "$TMP/run.out")"
	out=$("$CLI" top --once --interval 0.2) || fail "collstack top: $out"
	echo "$out"
	grep -Eq "^${CS_CLUSTER}n1 +2 .*LOSS" <<<"$out" ||
		fail "the lossy path 1 -> 2 is not flagged"
	grep -Eq "^${CS_CLUSTER}n(0 +1|3 +0) .*(RTT|LOSS)" <<<"$out" &&
		fail "a clean ring path is flagged"
	echo "health_4 ok"
}

case $CASE in
trace_4 | metrics_4 | health_4 | doctor_4x1 | flight_auto_4x1) "case_$CASE" ;;
*) fail "unknown case '$CASE'" ;;
esac

#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# collstack model fit (simulator, 4 nodes) then model check --quick (8 and
# 64 ranks, small sizes), predict and plan, and the CLI's refusals of bad
# input. Usage: model_check.sh COLLSTACK EXAMPLE_MODEL.json
set -uo pipefail
cs=$1 example=$2
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

"$cs" model fit -o "$d/m.json" 2>"$d/fit.log" || { cat "$d/fit.log"; bad "fit"; }
grep -q '"source": "sim"' "$d/m.json" || bad "model file: no source"
grep -q '"have_ps": true' "$d/m.json" || bad "model file: PS not fitted"

"$cs" model check --quick -m "$d/m.json" | tee "$d/check.log"
[ "${PIPESTATUS[0]}" = 0 ] || bad "check --quick beyond 15% or a run failed"
n=$(grep -c '^check ' "$d/check.log")
[ "$n" = 12 ] || bad "check printed $n case lines, want 12"

out=$("$cs" model predict -m "$d/m.json" --ranks 256 --op allreduce --bytes 16M)
echo "$out"
[[ $out == "predict allreduce ranks=256 "*" algo=ring time_us="* ]] || bad "predict line"
out=$("$cs" model predict -m "$d/m.json" --ranks 256 --ranks-per-node 8 --op alltoall --bytes 64K)
[[ $out == *"algo=two-level"* ]] || bad "alltoall at 32 x 8 should be two-level: $out"

"$cs" plan "$example" --ranks 64 -m "$d/m.json" -o "$d/plan.conf" |
	tee "$d/plan.log" || bad "plan"
# -o: the config column as a strategies file, one line per group
[ "$(grep -v '^#' "$d/plan.conf")" = "$(awk '!/^#/ && NF > 2 && $1 != "group" {
	print "group", $1, $NF }' "$d/plan.log")" ] || bad "plan -o: not the config column"
grep -q '^group experts local$' "$d/plan.conf" || bad "plan -o: experts not on local"
printf '{ "name": "x", "groups": [ { "name": "two words", "kind": "dense", "params": 10 } ] }' \
	>"$d/blank.json"
"$cs" plan "$d/blank.json" --ranks 8 -m "$d/m.json" >/dev/null ||
	bad "plan without -o: a name with a blank is fine in the table"
out=$("$cs" plan "$d/blank.json" --ranks 8 -m "$d/m.json" -o "$d/blank.conf" 2>&1 >/dev/null) &&
	bad "plan -o accepted a group name with a blank"
[[ $out == *"cannot be written to a strategies file"* ]] || bad "plan -o: '$out'"
[ ! -e "$d/blank.conf" ] || bad "plan -o left a partial strategies file"
grep -q '^embedding .* ps  ' "$d/plan.log" || bad "plan: the sparse table should go to PS"
grep -q '^experts .* alltoall  *local$' "$d/plan.log" ||
	bad "plan: the MoE layer should go to all-to-all, configured as 'local'"
# the dense MLP: allreduce and PS are close at 64 ranks (16 MiB), so the
# pick must be whichever the row predicts faster
awk '$1 == "mlp" { a = $4; q = $5
	exit !($8 == (a + 0 <= q + 0 ? "allreduce" : "ps")) }' "$d/plan.log" ||
	bad "plan: the dense MLP's pick is not its faster of allreduce and ps"

# refusals, each with a message and a non-zero exit
refuse() {	# expected-text command...
	local want=$1; shift
	local err
	if err=$("$@" 2>&1 >/dev/null); then
		bad "accepted: $*"
	elif [[ $err != *"$want"* ]]; then
		bad "'$*' said '$err', want '$want'"
	fi
}
refuse "unknown --op" "$cs" model predict -m "$d/m.json" --ranks 8 --op gather --bytes 1K
refuse "does not divide" "$cs" model predict -m "$d/m.json" --ranks 10 --ranks-per-node 4 --op allreduce --bytes 1K
refuse "bad --bytes" "$cs" model predict -m "$d/m.json" --ranks 8 --op allreduce --bytes 1X
refuse "No such file" "$cs" model predict -m "$d/none.json" --ranks 8 --op allreduce --bytes 1K
sed 's/"have_alltoall": true/"have_alltoall": false/; s/"source": "sim"/"source": "cluster"/' "$d/m.json" >"$d/c.json"
refuse "no all-to-all constants" "$cs" model predict -m "$d/c.json" --ranks 64 --op alltoall --bytes 1K
sed 's/"window": 8/"window": -8/' "$d/m.json" >"$d/w.json"
refuse "protocol.window" "$cs" model check --quick -m "$d/w.json"
echo '{"groups": [{"name": "x", "kind": "dense"}]}' >"$d/p.json"
refuse "groups[0].params: missing" "$cs" plan "$d/p.json" --ranks 8 -m "$d/m.json"
refuse "usage" "$cs" plan "$example" -m "$d/m.json"
refuse "is a cluster up" env CS_CLUSTER_ENV="$d/none.env" "$cs" model fit --cluster -o "$d/x.json"

[ "$fails" = 0 ] && echo "model_check: ok" || echo "model_check: $fails failed"
[ "$fails" = 0 ]

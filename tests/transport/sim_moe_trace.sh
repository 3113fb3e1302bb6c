#!/bin/sh
# collstack sim moe --trace FILE (issue 23): the timeline changes nothing
# in the run (the same line with and without it), names every node and
# rank, each rank's combine ends after its dispatch, every window's link
# busy fraction is in [0, 1.05], and the combine's busiest link is busy
# for the line's second link_us figure.
# usage: sim_moe_trace.sh COLLSTACK
cs=$1
t=$(mktemp) || exit 1
trap 'rm -f "$t"' EXIT
args="--nodes 4 --ranks-per-node 4 --tokens 32 --hidden 256 --topk 4 \
	--experts 32 --algo rail --node-sum --payload synth --dtype bf16 \
	--loss 0.01 --seed 3"
# shellcheck disable=SC2086
a=$("$cs" sim moe $args) || exit 1
# shellcheck disable=SC2086
b=$("$cs" sim moe $args --trace "$t" --trace-win-us 5) || exit 1
echo "$b"
if [ "$a" != "$b" ]; then
	echo "differ: without --trace: $a"
	exit 1
fi
link=$(echo "$b" | sed -E 's/.* link_us=[0-9.]+\+([0-9.]+) .*/\1/')
awk -v link="$link" '
/^node / { nodes++ }
/^rank / {
	ranks++
	split($3, d, "="); split($4, c, "=")
	if (d[2] + 0 <= 0 || c[2] + 0 < d[2] + 0) { print "bad: " $0; bad = 1 }
}
/^combine busiest link:/ {
	busy = $(NF - 2); sub(/\(/, "", busy)
	if (busy != link) { print "busiest " busy " != link_us " link; bad = 1 }
	seen = 1
}
/^win / {
	wins++
	for (i = 3; i <= NF; i++)
		if ($i < 0 || $i > 1.05) { print "bad window: " $0; bad = 1 }
}
END {
	if (nodes != 4 || ranks != 16 || !seen || wins < 5) {
		print "nodes " nodes " ranks " ranks " windows " wins; bad = 1
	}
	exit bad
}' "$t" || { cat "$t"; exit 1; }

#!/bin/sh
# collstack sim moe with a hold of 2 frames per core (issue 23): frames of
# an operation not posted yet are refused, reported busy, parked by their
# senders and resumed, under 5 % loss, and every dispatched row and
# combined value still checks (the line says ok, wrong=0). The trace must
# show refusals, parked frames and resumes, so that the path ran.
# usage: sim_moe_hold.sh COLLSTACK
cs=$1
t=$(mktemp) || exit 1
trap 'rm -f "$t"' EXIT
out=$("$cs" sim moe --nodes 4 --ranks-per-node 4 --tokens 32 --hidden 256 \
	--topk 4 --experts 32 --skew 1.1 --algo rail --node-sum \
	--payload synth --dtype bf16 --loss 0.05 --seed 3 \
	--set tp.hold_frames=2 --trace "$t") || { echo "$out"; exit 1; }
echo "$out"
case "$out" in
"moe ok "*" wrong=0 "*) ;;
*) echo "not ok"; exit 1 ;;
esac
awk '
/^tp rx_hold_full / { split($3, d, "="); split($4, c, "="); full = d[2] + c[2] }
/^tp rel_parked / { split($3, d, "="); split($4, c, "="); parked = d[2] + c[2] }
/^tp tx_resumes / { split($3, d, "="); split($4, c, "="); res = d[2] + c[2] }
END {
	print "refused " full ", parked " parked ", resumes sent " res
	exit !(full > 0 && parked > 0 && res > 0)
}' "$t" || { cat "$t"; exit 1; }

#!/bin/sh
# collstack sim moe --payload synth against --payload full (issue 23):
#   same: every algorithm, clean and 5 % loss, rows split over frames
#     (--mtu 256) or not: the two lines must be equal but for payload=
#     and checked= (the same frames, queues, retransmissions and times);
#   corrupt: --corrupt dispatch|combine must fail with wrong=1.
# usage: sim_moe_synth.sh COLLSTACK same|corrupt
cs=$1
strip() { sed -E 's/ payload=[a-z]+//; s/ checked=[0-9]+//'; }
case $2 in
same)
	for mtu in 256 8896; do
		for a in flat two-level rail "two-level --node-rows" \
			"rail --node-rows" "two-level --node-sum" \
			"rail --node-sum"; do
			for l in 0 0.05; do
				args="--ranks 16 --ranks-per-node 4 --tokens 24 \
					--hidden 100 --topk 4 --experts 32 --skew 1.1 \
					--mtu $mtu --algo $a --loss $l --seed 2"
				# shellcheck disable=SC2086
				f=$("$cs" sim moe $args --payload full) || exit 1
				# shellcheck disable=SC2086
				s=$("$cs" sim moe $args --payload synth) || exit 1
				echo "$s"
				if [ "$(echo "$f" | strip)" != "$(echo "$s" | strip)" ]; then
					echo "differ: full: $f"
					exit 1
				fi
			done
		done
	done
	# bf16 runs and checks too (no full mode to compare with)
	"$cs" sim moe --ranks 16 --ranks-per-node 4 --tokens 24 --hidden 100 \
		--topk 4 --experts 32 --algo rail --node-sum --payload synth \
		--dtype bf16 --loss 0.05 || exit 1
	;;
corrupt)
	for ph in dispatch combine; do
		for a in flat "rail --node-sum" two-level; do
			# shellcheck disable=SC2086
			out=$("$cs" sim moe --ranks 16 --ranks-per-node 4 \
				--tokens 24 --hidden 100 --topk 4 --experts 32 \
				--algo $a --payload synth --dtype bf16 --corrupt $ph)
			rc=$?
			echo "$out"
			[ $rc = 1 ] || { echo "corrupt $ph $a: rc $rc"; exit 1; }
			echo "$out" | grep -q "^moe FAILED .* wrong=1 " ||
				{ echo "corrupt $ph $a: not wrong=1"; exit 1; }
			echo "$out" | grep -q "^moe: rank .* $ph row .*values differ" ||
				{ echo "corrupt $ph $a: no such row named"; exit 1; }
		done
	done
	;;
*)
	echo "usage: $0 COLLSTACK same|corrupt" >&2
	exit 2
	;;
esac

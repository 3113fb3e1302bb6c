/* SPDX-License-Identifier: MIT */
/*
 * A trainer of the MoE API (collstack/moe.h) across nodes, started by
 * `collstack launch` (test_trainers.sh moe_api_*): dispatch and combine
 * checked against the single-process reference, every value, then bad
 * input on one rank refused on every rank (tests/client/moe_check.h).
 * Usage: cs-trainer-moe [ROUNDS [node-sum|node-rows|node-rows-sum]]:
 * node-sum runs the check of a CS_MOE_LAYER_NODE_SUM layer, node-rows of
 * a CS_MOE_LAYER_NODE_ROWS one, node-rows-sum of one with both
 * (mc_run_flags(), the ranks per node from LOCAL_WORLD_SIZE) instead.
 * Exits 0 or the failing check's code.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../client/moe_check.h"
#include "collstack/collstack.h"

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 4, ret;
	struct cs_client *c;
	struct cs_group *g;

	if (cs_connect(NULL, &c) || cs_group_join_env(c, "moe", &g)) {
		fprintf(stderr, "cs-trainer-moe: connect or join failed\n");
		return 2;
	}
	int rank = cs_group_rank(g), size = cs_group_size(g);

	if (argc > 2) {
		const char *ls = getenv("LOCAL_WORLD_SIZE");
		int G = ls ? atoi(ls) : 1;
		uint32_t flags =
			!strcmp(argv[2], "node-sum")	? CS_MOE_LAYER_NODE_SUM
			: !strcmp(argv[2], "node-rows") ? CS_MOE_LAYER_NODE_ROWS
			: !strcmp(argv[2], "node-rows-sum")
				? CS_MOE_LAYER_NODE_ROWS | CS_MOE_LAYER_NODE_SUM
				: 0;

		if (!flags) {
			fprintf(stderr,
				"cs-trainer-moe: %s: node-sum, "
				"node-rows or node-rows-sum\n",
				argv[2]);
			return 2;
		}
		ret = mc_run_flags(c, g, rank, size, G < 1 ? 1 : G, flags,
				   rounds, 60ll * 1000000000);
		if (!ret && cs_group_leave(g))
			ret = 3;
		if (!ret && rank == 0)
			printf("moe api %s: %d ranks, %d rounds + 4 bad "
			       "inputs + layers that differ: ok\n",
			       argv[2], size, rounds);
		cs_disconnect(c);
		return ret;
	}
	ret = mc_run(c, g, rank, size, rounds, 60ll * 1000000000);
	/* (cs_group_leave() frees @g: rank and size were read before) */
	if (!ret && cs_group_leave(g))
		ret = 3;
	if (!ret && rank == 0)
		printf("moe api: %d ranks, %d rounds + 4 bad inputs: ok\n",
		       size, rounds);
	cs_disconnect(c);
	return ret;
}

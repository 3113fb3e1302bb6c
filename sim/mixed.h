/* SPDX-License-Identifier: MIT */
/*
 * The "mixed" scenario of the simulator (collstack sim mixed): groups over
 * random subsets of the ranks, each posting operations of random kinds and
 * sizes, all in flight together, over the transport core collstackd runs.
 */
#ifndef CS_SIM_MIXED_H
#define CS_SIM_MIXED_H

#include <stdbool.h>
#include <stdint.h>

#include "collectives/ring.h"
#include "control/xport.h"
#include "transport/tp.h"

struct cs_mixed_cfg {
	uint32_t ranks, groups, ops;
	uint64_t min_bytes, max_bytes; /* per operation, log-uniform */
	double loss; /* per frame, on every link */
	double gbps;
	uint64_t delay_ns; /* per link (host to switch) */
	uint64_t post_gap_ns; /* a rank posts its next op within this */
	uint64_t seed;
	uint64_t time_limit_ns; /* simulated */
	bool nodata; /* timing only: no bytes, nothing verified */
	struct cs_xport_params xp;
	struct cs_tp_params tp;
	struct cs_coll_cfg coll;
};

struct cs_mixed_result {
	uint64_t ops; /* operation instances (per rank) */
	uint64_t done, failed, wrong;
	uint64_t time_ns; /* when the last one completed */
	uint32_t peak_in_flight; /* on one node */
	uint64_t held, retx, fillers, proto, hold_full, sessions;
	char first[200]; /* the first failure or wrong element */
};

/**
 * cs_mixed_cfg_default - 8 ranks, 4 groups, 64 ops, 4 B .. 16 MiB, no loss
 * Returns: 0 or -EINVAL.
 */
int cs_mixed_cfg_default(struct cs_mixed_cfg *c);

/**
 * cs_mixed_run - run the scenario
 * @c: settings
 * @res: out: what happened; every element checked unless @c->nodata
 * Returns: 0 when the simulation ran (check @res: done == ops, failed
 *	and wrong 0), or a negative error for bad settings or no memory.
 */
int cs_mixed_run(const struct cs_mixed_cfg *c, struct cs_mixed_result *res);

#endif

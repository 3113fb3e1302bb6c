/* SPDX-License-Identifier: MIT */
/*
 * The MoE scenario of the simulator (collstack sim moe): dispatch, the
 * experts, combine, over the transport core, one core per rank (the
 * network of sim/a2a.c); every dispatched row and every combined value is
 * checked bit for bit against a single-process reference.
 */
#ifndef CS_SIM_MOE_H
#define CS_SIM_MOE_H

#include <stdio.h>

#include "sim/a2a.h"

/**
 * struct cs_moe_sim_cfg - the network (@net: ranks, rpn, algo, loss,
 * links, seed ...; bytes and uneven unused) and the layer
 * @tokens: per rank, @hidden: H, @topk: K, @experts: E
 * @skew: Zipf exponent of the expert choice (0: uniform)
 * @node_rows: a token's row once per destination node
 *	(CS_MOE_F_NODE_ROWS; two-level and rail only)
 * @node_sum: combine sums per node first (CS_MOE_F_NODE_SUM; needs
 *	@node_rows); the reference sums the same way
 * @synth: synthetic payloads (--payload synth): no rank stores values;
 *	they are made from (rank, token, value) when a frame is built and
 *	checked when it arrives (CS_MOE_F_NO_VALUES, struct cs_a2a_virt);
 *	the same frames, so the same timing, as a run that stores them
 * @vbytes: bytes per value: 4 (f32) or 2 (bf16, @synth only)
 * @corrupt: fault injection for tests: 1 (2): the first tail byte that
 *	crosses the network in dispatch (combine) is checked with one bit
 *	flipped, as if it arrived so (@synth only)
 * @trace: NULL, or a file the run's timeline is written to (--trace):
 *	when each node and rank finished each phase, the transport
 *	counters per phase, and per @trace_win_ns window how busy the NIC
 *	links were, with the combine's busiest link on its own
 */
struct cs_moe_sim_cfg {
	struct cs_a2a_sim_cfg net;
	uint32_t tokens, hidden, topk, experts;
	double skew;
	bool node_rows, node_sum;
	bool synth;
	uint32_t vbytes;
	uint32_t corrupt;
	FILE *trace;
	uint64_t trace_win_ns;
};

struct cs_moe_sim_result {
	enum cs_a2a_algo algo;
	uint32_t done, failed;
	uint64_t wrong, checked; /* dispatched rows and combined values */
	uint64_t disp_bytes; /* dispatch bytes sent over the network */
	uint64_t t_dispatch_ns; /* last rank's dispatch done */
	uint64_t time_ns; /* last rank's combine done */
	uint64_t max_queue, drops, retx;
	/* the busiest node's bytes over its links in dispatch (the larger
	 * of what it sends and receives, a token's row counted once per
	 * other node it goes to); combine moves the same back */
	uint64_t node_bytes_max;
	/* the busiest NIC link (either direction) of each phase: its
	 * serialization time, ps, and the frame bytes it carried */
	uint64_t link_busy_ps[2], link_bytes[2];
	char first[200];
};

int cs_moe_sim_cfg_default(struct cs_moe_sim_cfg *c);
int cs_moe_sim_run(const struct cs_moe_sim_cfg *c,
		   struct cs_moe_sim_result *res);

#endif

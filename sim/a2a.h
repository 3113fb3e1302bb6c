/* SPDX-License-Identifier: MIT */
/*
 * The all-to-all scenario of the simulator (collstack sim alltoall): one
 * all-to-all(v) over n ranks, one transport core per rank, every rank's
 * NIC on one output-queued switch; ranks grouped into nodes of L for the
 * two-level algorithm (the intra-node stage is a memory copy). Every
 * received element is checked.
 */
#ifndef CS_SIM_A2A_H
#define CS_SIM_A2A_H

#include <stdbool.h>
#include <stdint.h>

#include "collectives/alltoall.h"
#include "control/xport.h"
#include "transport/tp.h"

/**
 * struct cs_a2a_sim_cfg - the scenario's settings
 * @ranks: n
 * @rpn: ranks per node (L); divides @ranks
 * @bytes: each rank's send buffer (mean, with @uneven): n blocks
 * @uneven: per (source, destination) sizes drawn from a skewed
 *	distribution (some zero), all-to-all-v
 * @algo: CS_A2A_FLAT, CS_A2A_TWO_LEVEL or CS_A2A_AUTO (cs_a2a_choose())
 * @no_bucket: every block starts a new frame (for comparison)
 * @loss: per frame, on every link
 * @gbps: link rate
 * @delay_ns: per link
 * @port_buffer: switch port buffer (tail drop), bytes
 * @nic_ring: bytes a NIC queues before the core stops handing it frames
 * @credit: receiver credit budget in bytes, split evenly over the ranks
 *	that send to it (rel.credit); 0: off
 * @mtu: payload bytes per frame
 * @seed: everything random comes from it
 * @time_limit_ns: simulated
 * @nodata: timing only, nothing verified
 * @dynamic: receivers do not know their counts: they arrive in the same
 *	operation (CS_A2A_F_RECV_DYNAMIC)
 */
struct cs_a2a_sim_cfg {
	uint32_t ranks, rpn;
	uint64_t bytes;
	bool uneven;
	enum cs_a2a_algo algo;
	bool no_bucket;
	double loss, gbps;
	uint64_t delay_ns, port_buffer, nic_ring, credit;
	uint32_t mtu;
	uint64_t seed, time_limit_ns;
	bool nodata, dynamic;
	struct cs_xport_params xp;
	struct cs_tp_params tp;
};

struct cs_a2a_sim_result {
	enum cs_a2a_algo algo; /* the one that ran */
	uint32_t done, failed;
	uint64_t wrong, checked; /* elements */
	uint64_t time_ns; /* when the last rank completed */
	uint64_t max_bytes; /* most bytes one rank sends */
	uint64_t total_bytes; /* every block, every rank */
	uint64_t net_bytes; /* of which crossed the network */
	uint64_t frames, retx, drops, proto;
	uint64_t max_queue; /* deepest switch port queue, bytes */
	uint64_t staged; /* bytes copied into two-level streams */
	double jain; /* fairness of the senders' rates, 0..1 */
	char first[200];
};

/**
 * cs_a2a_sim_cfg_default - 8 ranks, 1 per node, 1 MiB, auto, no loss
 * Returns: 0 or -EINVAL.
 */
int cs_a2a_sim_cfg_default(struct cs_a2a_sim_cfg *c);

/**
 * cs_a2a_sim_run - run one all-to-all(v)
 * Returns: 0 when the simulation ran (check @res), or a negative error
 *	for bad settings or no memory.
 */
int cs_a2a_sim_run(const struct cs_a2a_sim_cfg *c,
		   struct cs_a2a_sim_result *res);

#endif

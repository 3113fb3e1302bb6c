/* SPDX-License-Identifier: MIT */
/* Simulated scenarios over cs_rel + cs_path: p2p transfer and N-to-1 incast. */
#ifndef CS_SIM_SCEN_H
#define CS_SIM_SCEN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "control/cc.h"
#include "control/pacer.h"
#include "control/rel.h"
#include "control/xport.h"
#include "sim/sim.h"

/* Payload per packet at MTU 9000: 9000 - IPv4 20 - UDP 8 - header 76. */
#define CS_SIM_MTU_PAYLOAD 8896u

/**
 * struct cs_sim_p2p_cfg - one sender, one receiver, a link each way
 * @bytes: bytes to move
 * @seed: PRNG seed
 * @link: both directions (impairments apply to data and ACKs alike)
 * @payload: payload per packet (<= CS_SIM_MTU_PAYLOAD)
 * @isn: first sequence number (tests start near 2^32 to wrap)
 * @outage_start/@outage_len: a data-link outage (len 0: none)
 * @fail_at: the receiver dies at this time (0: never)
 * @time_limit: give up (FAIL) after this much simulated time
 * @synthetic: carry no payload bytes (large runs): exactly-once delivery
 *	of every packet is still checked, the checksums are not
 * @xp: transport parameters (cc.line_gbps is set from @link.gbps)
 */
struct cs_sim_p2p_cfg {
	uint64_t bytes;
	bool synthetic;
	uint64_t seed;
	struct cs_sim_link_params link;
	uint32_t payload;
	uint32_t isn;
	cs_ns_t outage_start, outage_len;
	cs_ns_t fail_at;
	cs_ns_t time_limit;
	struct cs_xport_params xp;
};

/**
 * struct cs_sim_p2p_result - what happened
 * @ok: every byte arrived exactly once, checksums equal, all acknowledged
 * @time_ns: from the first send to the last byte delivered
 * @goodput_frac: payload bits / (time * link rate)
 */
struct cs_sim_p2p_result {
	bool ok;
	uint64_t bytes_delivered;
	uint64_t packets;
	cs_ns_t time_ns;
	double goodput_frac;
	uint64_t retx, fast_retx, timeouts, dup_rcvd, delivered_twice;
	uint64_t acks, events;
	uint64_t csum_src, csum_dst;
	char why[160];
};

/**
 * cs_sim_p2p_defaults - 100 Gb/s, 2 us, no impairment, MTU payload
 * @cfg: out
 * Returns: 0 or -EINVAL.
 */
int cs_sim_p2p_defaults(struct cs_sim_p2p_cfg *cfg);

/**
 * cs_sim_p2p_run - run one transfer to completion
 * @cfg: the scenario
 * @res: out
 * Returns: 0 when the run completed (see @res->ok), negative errno when it
 *	could not be set up.
 */
int cs_sim_p2p_run(const struct cs_sim_p2p_cfg *cfg,
		   struct cs_sim_p2p_result *res);

/**
 * struct cs_sim_incast_cfg - N senders -> switch -> one receiver
 * @senders: N
 * @bytes: bytes per sender
 * @link: every host link (both directions)
 * @port_buffer: switch egress buffer per port (the bound to respect)
 * @ecn_bytes: switch ECN threshold (0: none)
 * @credit_budget: bytes the receiver grants in total, split evenly
 */
struct cs_sim_incast_cfg {
	uint32_t senders;
	uint64_t bytes;
	uint64_t seed;
	struct cs_sim_link_params link;
	uint64_t port_buffer;
	uint64_t ecn_bytes;
	uint64_t credit_budget;
	uint32_t payload;
	cs_ns_t time_limit;
	struct cs_xport_params xp;
};

struct cs_sim_incast_result {
	bool ok;
	cs_ns_t time_ns; /* first send to last byte delivered */
	double util; /* receiver link busy fraction */
	double goodput_frac; /* payload bits / (time * link rate) */
	uint64_t queue_max; /* switch port to the receiver, bytes */
	uint64_t drops; /* anywhere */
	double jain; /* over per-sender throughput */
	uint64_t retx, timeouts, events;
	char why[160];
};

int cs_sim_incast_defaults(struct cs_sim_incast_cfg *cfg);
int cs_sim_incast_run(const struct cs_sim_incast_cfg *cfg,
		      struct cs_sim_incast_result *res);

#endif

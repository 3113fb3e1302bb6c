/* SPDX-License-Identifier: MIT */
/* Delay-based congestion control (Swift/Timely-like) and the per-peer path. */
#ifndef CS_CONTROL_CC_H
#define CS_CONTROL_CC_H

#include <stdbool.h>
#include <stdint.h>

#include "control/pacer.h"
#include "internal/config.h"
#include "internal/util.h"

/**
 * struct cs_cc_params - congestion-control tunables (config keys "cc.*")
 * @enable: false pins the rate at @line_gbps (a benchmark baseline).
 * @line_gbps: the local link rate; the rate never exceeds it.
 * @init_frac: starting rate as a fraction of @line_gbps.
 * @min_gbps: floor of the rate.
 * @target_qdelay: target queueing delay: RTT minus the smallest RTT seen.
 * @ai_gbps: additive increase per RTT while below the target.
 * @beta: multiplicative-decrease gain: rate *= 1 - beta * over / qdelay,
 *	where over = qdelay - target (Swift's formula).
 * @max_mdf: largest single decrease (fraction of the rate).
 * @ecn: react to ECN echoes (CS_PKT_F_ECE) as a second signal.
 * @ecn_md: decrease on an ECN echo (at most once per RTT).
 * @rto_md: decrease on a retransmission timeout.
 * @fs_range: Swift's flow scaling: up to this much is added to the target
 *	when the flow's window (rate * base RTT) is small, so that N flows
 *	into one receiver settle with a queue instead of starving each other.
 *	The addition is a / sqrt(cwnd) + b, 0 at @fs_max_cwnd packets and
 *	@fs_range at @fs_min_cwnd packets (clamped to [0, @fs_range]).
 * @fs_min_cwnd: see @fs_range (packets)
 * @fs_max_cwnd: see @fs_range (packets)
 * @pkt_bytes: bytes of a packet when counting the window in packets.
 */
struct cs_cc_params {
	bool enable;
	double line_gbps;
	double init_frac;
	double min_gbps;
	uint64_t target_qdelay;
	double ai_gbps;
	double beta;
	double max_mdf;
	bool ecn;
	double ecn_md;
	double rto_md;
	uint64_t fs_range;
	double fs_min_cwnd;
	double fs_max_cwnd;
	uint32_t pkt_bytes;
};

extern const struct cs_cfg_entry cs_cc_cfg[];
extern const size_t cs_cc_cfg_len;

/**
 * struct cs_cc - controller state for one destination
 *
 * Signal: rtt = now - ts_echo, where the receiver has already added the
 * time it held the acknowledgement (see cs_rel), so coalescing does not
 * look like queueing. qdelay = rtt - base_rtt (the smallest rtt seen).
 */
struct cs_cc {
	struct cs_cc_params p;
	double rate; /* bytes per second */
	double line, min; /* bytes per second */
	cs_ns_t base_rtt; /* smallest RTT seen (kept when !enable too);
			   * CS_NS_NEVER before one */
	cs_ns_t last_rtt;
	cs_ns_t last_decrease; /* at most one decrease per RTT */
	double fs_a, fs_b; /* flow-scaling coefficients, ns */
	cs_ns_t target; /* last target used (statistics) */
	uint64_t decreases, ecn_decreases, timeouts;
	double rate_before_timeout; /* undone by a spurious timeout; 0: none */
};

/**
 * cs_cc_init - start a controller
 * @cc: the controller
 * @params: tunables (copied)
 * Returns: 0, or -EINVAL for inconsistent parameters.
 */
int cs_cc_init(struct cs_cc *cc, const struct cs_cc_params *params);

/**
 * cs_cc_on_ack - feed one acknowledgement that acknowledged new data
 * @cc: the controller
 * @rtt: now - ts_echo, ns (0: no sample)
 * @acked: payload bytes newly acknowledged
 * @ece: the acknowledgement echoed a congestion mark
 * @now: current time, ns
 *
 * A decrease happens at most once per RTT: only a signal about a packet
 * sent after the last decrease (now - rtt > last decrease) may cause one.
 */
void cs_cc_on_ack(struct cs_cc *cc, cs_ns_t rtt, uint64_t acked, bool ece,
		  cs_ns_t now);

/**
 * cs_cc_on_timeout - a retransmission timeout fired on this path
 * @cc: the controller
 * @now: current time, ns
 */
void cs_cc_on_timeout(struct cs_cc *cc, cs_ns_t now);

/**
 * cs_cc_on_spurious - the last timeout was spurious (the ACK of what it
 * resent also covered packets sent before it): its decrease is undone
 * @cc: the controller
 * @now: current time, ns
 */
void cs_cc_on_spurious(struct cs_cc *cc, cs_ns_t now);

/**
 * struct cs_path - everything shared by the sessions to one destination:
 * its pacer and its congestion controller. cs_rel sessions point at one;
 * several sessions (channels) to the same peer share it.
 */
struct cs_path {
	struct cs_pacer pacer;
	struct cs_cc cc;
};

/**
 * cs_path_init - set up a path's controller and pacer
 * @path: the path
 * @pp: pacer tunables
 * @cp: congestion-control tunables; the pacer starts at its initial rate
 * Returns: 0 or -EINVAL.
 */
int cs_path_init(struct cs_path *path, const struct cs_pacer_params *pp,
		 const struct cs_cc_params *cp);

/**
 * cs_path_on_ack - feed the controller and move the pacer to its rate
 * @path: the path
 * @rtt: RTT sample in ns (0: none)
 * @acked: bytes newly acknowledged
 * @ece: congestion echo
 * @now: current time, ns
 */
void cs_path_on_ack(struct cs_path *path, cs_ns_t rtt, uint64_t acked, bool ece,
		    cs_ns_t now);

/**
 * cs_path_on_timeout - a session on this path timed out
 * @path: the path
 * @now: current time, ns
 */
void cs_path_on_timeout(struct cs_path *path, cs_ns_t now);

/**
 * cs_path_on_spurious - a session on this path found its last timeout
 * spurious: the controller's timeout decrease is undone
 * @path: the path
 * @now: current time, ns
 */
void cs_path_on_spurious(struct cs_path *path, cs_ns_t now);

#endif

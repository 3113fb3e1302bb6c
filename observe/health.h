/* SPDX-License-Identifier: MIT */
/*
 * Peer health: a (node, peer) path is flagged when its p99 RTT or its
 * loss rate leaves the group's normal range, judged against the median
 * of every path of the cluster (a lone bad path stands out; a uniformly
 * slow fabric flags nothing):
 *   RTT:  p99 > CS_HEALTH_RTT_FACTOR x median p99, and > CS_HEALTH_RTT_FLOOR_S
 *   LOSS: loss > CS_HEALTH_LOSS_FACTOR x median loss, and > CS_HEALTH_LOSS_FLOOR
 * Loss rate: retransmissions / first transmissions. A path that sent
 * fewer than CS_HEALTH_MIN_FRAMES frames is neither judged nor part of
 * the medians (a handful of frames, e.g. the small direct exchanges of
 * barriers, gives no rate worth the name). Pure arithmetic.
 */
#ifndef CS_OBSERVE_HEALTH_H
#define CS_OBSERVE_HEALTH_H

#include <stdbool.h>
#include <stdint.h>

#define CS_HEALTH_RTT_FACTOR 4.0
#define CS_HEALTH_RTT_FLOOR_S 200e-6
#define CS_HEALTH_LOSS_FACTOR 4.0
#define CS_HEALTH_LOSS_FLOOR 0.01
#define CS_HEALTH_MIN_FRAMES 1000

enum { CS_HEALTH_RTT = 1, CS_HEALTH_LOSS = 2 };

struct cs_health_path {
	double p99_s; /* < 0: no RTT samples */
	double loss; /* < 0: nothing sent */
	double frames; /* first transmissions */
	unsigned flags; /* out */
};

/**
 * cs_health_judge - set each path's flags against the medians
 * Returns: the number of paths flagged.
 */
unsigned cs_health_judge(struct cs_health_path *p, unsigned n);

/**
 * cs_health_quantile - quantile @q of a histogram of @nb bounds @le (and
 * +Inf) given cumulative counts @cum[0..nb] (Prometheus'
 * histogram_quantile: linear within the bucket)
 * Returns: seconds, or -1 with no samples.
 */
double cs_health_quantile(const double *le, const double *cum, unsigned nb,
			  double q);

#endif

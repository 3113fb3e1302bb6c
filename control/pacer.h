/* SPDX-License-Identifier: MIT */
/* Per-destination pacer: a token bucket run as GCRA virtual scheduling. */
#ifndef CS_CONTROL_PACER_H
#define CS_CONTROL_PACER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal/config.h"
#include "internal/util.h"

/* "Never": no deadline, or blocked until some event other than time. */
#ifndef CS_NS_NEVER
#define CS_NS_NEVER UINT64_MAX
#endif

/**
 * struct cs_pacer_params - pacer tunables (config keys "pacer.*")
 * @burst_bytes: bucket depth: how far ahead of its rate a sender may run.
 *	At least one full frame, or a rate-limited sender could never send.
 * @frame_overhead: bytes charged per packet on top of the payload, so that
 *	a rate equal to the link rate fills the link exactly. The default
 *	(142) is CS_PROTO_FRAME_OVERHEAD (118) plus 24 bytes of Ethernet
 *	preamble, inter-frame gap and FCS, which is what the simulator's
 *	links charge too (CS_SIM_WIRE_EXTRA).
 */
struct cs_pacer_params {
	uint64_t burst_bytes;
	uint32_t frame_overhead;
};

extern const struct cs_cfg_entry cs_pacer_cfg[];
extern const size_t cs_pacer_cfg_len;

/*
 * The pacer keeps a theoretical transmission time (TAT) in picoseconds so
 * that a rate equal to the link rate does not drift by rounding; the
 * callers' clock is nanoseconds.
 */
struct cs_pacer {
	double rate; /* bytes per second */
	uint64_t tat_ps; /* when the bucket would be empty again */
	uint64_t burst_ps; /* burst_bytes at the current rate */
	uint64_t burst_bytes;
	uint32_t frame_overhead;
	uint64_t sent_bytes; /* frame bytes charged (statistics) */
};

/**
 * cs_pacer_init - set up a pacer at @rate bytes per second
 * @p: the pacer
 * @params: tunables (copied)
 * @rate: initial rate in bytes per second (> 0)
 * Returns: 0, or -EINVAL for a rate <= 0 or a zero burst.
 */
int cs_pacer_init(struct cs_pacer *p, const struct cs_pacer_params *params,
		  double rate);

/**
 * cs_pacer_set_rate - change the rate (bytes per second, > 0)
 * @p: the pacer
 * @rate: new rate
 * @now: current time, ns: the wait still ahead of the bucket is rescaled
 *	to the new rate, so an increase takes effect at once rather than
 *	after a packet charged at a low rate has been paid off.
 */
void cs_pacer_set_rate(struct cs_pacer *p, double rate, cs_ns_t now);

/**
 * cs_pacer_frame_bytes - bytes the pacer charges for a @len-byte payload
 * @p: the pacer
 * @len: payload bytes
 * Returns: @len plus the per-frame overhead.
 */
static inline uint64_t cs_pacer_frame_bytes(const struct cs_pacer *p,
					    uint32_t len)
{
	return (uint64_t)len + p->frame_overhead;
}

/**
 * cs_pacer_next - earliest time a packet may leave
 * @p: the pacer
 * @now: current time, ns
 * Returns: @now if a packet may be sent now, else the (rounded up) time
 *	in ns at which one may.
 */
cs_ns_t cs_pacer_next(const struct cs_pacer *p, cs_ns_t now);

/**
 * cs_pacer_consume - charge a packet of @len payload bytes sent at @now
 * @p: the pacer
 * @len: payload bytes (the frame overhead is added)
 * @now: current time, ns
 *
 * May be called when cs_pacer_next() said "not yet" (e.g. an urgent ACK);
 * the debt is then paid by later packets.
 */
void cs_pacer_consume(struct cs_pacer *p, uint32_t len, cs_ns_t now);

#endif

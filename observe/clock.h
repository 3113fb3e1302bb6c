/* SPDX-License-Identifier: MIT */
/*
 * Clock alignment for the merged timeline: Cristian's method over the
 * control socket. The collector notes its clock before a "clock" request
 * (t0) and after the reply (t1); the sidecar's reading (remote) was taken
 * somewhere in between, so remote - (t0 + t1) / 2 is its offset within
 * +-(t1 - t0) / 2. Of several exchanges the one with the shortest round
 * trip gives the tightest bound. Pure arithmetic: tested with injected
 * offsets and delays (tests/observe/test_observe.c).
 */
#ifndef CS_OBSERVE_CLOCK_H
#define CS_OBSERVE_CLOCK_H

#include <stddef.h>
#include <stdint.h>

#include "internal/util.h"

struct cs_clock_sample {
	cs_ns_t t0; /* collector, before the request */
	cs_ns_t remote; /* the sidecar's clock in its reply */
	cs_ns_t t1; /* collector, after the reply */
};

/* remote clock = collector clock + offset, within +-bound */
struct cs_clock_est {
	int64_t offset;
	cs_ns_t bound;
};

/**
 * cs_clock_estimate - the offset of the remote clock from @n exchanges
 * Returns: 0, or -EINVAL when @n is 0 or a sample ends before it starts.
 */
int cs_clock_estimate(const struct cs_clock_sample *s, unsigned n,
		      struct cs_clock_est *out);

/**
 * cs_clock_host_id - which CLOCK_MONOTONIC this process reads: the
 * machine's boot id and its time namespace's monotonic offset (ns) as
 * "BOOT/OFFSET". Two processes with the same id read the same clock, so a
 * collector that finds its own id in a sidecar's "clock" reply needs no
 * exchange to align it (network namespaces share the clock).
 * Returns: 0, -ENOSPC when @len is too small, or a negative errno.
 */
int cs_clock_host_id(char *out, size_t len);

#endif

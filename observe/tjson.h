/* SPDX-License-Identifier: MIT */
/*
 * The merged timeline as Chrome / Perfetto Trace Event JSON: each node a
 * process, each recording thread (lcore, IPC thread) a thread, each
 * trainer rank a thread of its node ("rank R"). Timestamps are moved onto
 * the collector's clock (minus each node's offset) and written in
 * microseconds from the earliest event, sorted, so they never go back.
 *
 *   core op (post .. done)        "X"  cat op       on the lcore
 *   trainer op (post .. complete) "X"  cat trainer  on "rank R"
 *   stall (window/credit/pacing)  "X"  cat stall
 *   tx, rx, retx (with cause)     "i"  cat frame / retx
 */
#ifndef CS_OBSERVE_TJSON_H
#define CS_OBSERVE_TJSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "observe/trace.h"

struct cs_tj_ring {
	char name[CS_TRACE_NAME_MAX];
	int tid;
	struct cs_trace_ev *ev;
	size_t n;
};

struct cs_tj_node {
	const char *name;
	int64_t offset; /* its clock minus the collector's */
	struct cs_tj_ring *rings;
	unsigned nrings;
};

struct cs_tj_stats {
	size_t events; /* trace events written (metadata not counted) */
	unsigned nodes_with_events;
	int64_t first_ns, last_ns; /* aligned, on the collector's clock */
};

/* The names of trainer op kinds (CS_IPC_OP_*), for labels and names. */
extern const char *const cs_obs_op_kind[];

/**
 * cs_tj_write - write @n nodes' events as one JSON document
 * @last_ns: keep only events at most this long before the newest (0: all)
 * Returns: 0, -ENOMEM, or -EIO when writing failed.
 */
int cs_tj_write(FILE *out, const struct cs_tj_node *nodes, unsigned n,
		cs_ns_t last_ns, struct cs_tj_stats *st);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * Frame delays from the merged timeline: every data frame a node's lcore
 * handled (CS_TR_RX, duplicates left out) paired with its sender's last
 * send of it before then (CS_TR_TX or CS_TR_RETX of the same group,
 * operation, sequence number and pair of nodes), both on the collector's
 * clock (struct cs_tj_node's offsets). The delay is what the frame spent
 * between the sender's transport core and the receiver's: the sender's
 * burst, the port and kernel both ways, the wire, and the wait until the
 * receiver's lcore ran. Per pair of nodes and over all: min, p50, p90,
 * p99 and max (nearest rank). Pure arithmetic on the rings: tested with
 * made-up events (tests/observe/test_observe.c).
 */
#ifndef CS_OBSERVE_TDELAY_H
#define CS_OBSERVE_TDELAY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "observe/tjson.h"

#define CS_TD_ALL UINT32_MAX /* the row over every pair */

struct cs_td_row {
	uint32_t src, dst; /* node indexes (CS_TD_ALL: the row over all) */
	size_t n;
	int64_t min, p50, p90, p99, max; /* ns */
};

struct cs_td_stats {
	size_t rx; /* frames handled by a receiver, duplicates left out */
	size_t matched; /* ... paired with a send */
	size_t unsent; /* no send in the rings (before their window) */
	size_t early; /* every send of it later than its handling: the
		       * clocks' error (or a node's id unknown) */
};

/**
 * cs_td_compute - the delays of @n nodes' frames
 * @id: the node id (node.rank) of each node, as the frames name them
 * @last_ns: only frames handled at most this long before the newest
 *	event (0: all)
 * @rows: receives one row per pair of nodes with a matched frame, in
 *	(src, dst) order, then the row over all (src = dst = CS_TD_ALL)
 * @max_rows: room in @rows (n * n + 1 always suffices)
 * Returns: the number of rows, or -ENOMEM.
 */
int cs_td_compute(const struct cs_tj_node *nodes, const uint32_t *id,
		  unsigned n, cs_ns_t last_ns, struct cs_td_row *rows,
		  unsigned max_rows, struct cs_td_stats *st);

/* cs_td_print - the rows as a table, names from @nodes, and the counts */
void cs_td_print(FILE *out, const struct cs_tj_node *nodes,
		 const struct cs_td_row *rows, unsigned nrows,
		 const struct cs_td_stats *st);

#endif

/* SPDX-License-Identifier: MIT */
/* The ring collectives as an engine of the transport core (flow.h). */
#include <errno.h>

#include "collectives/ring.h"

static uint32_t rf_channels(const void *f)
{
	return cs_coll_channels(f);
}

static int64_t rf_chan_peer(const void *f, uint32_t ch)
{
	int64_t next, prev;

	cs_coll_chan_peers(f, ch, &next, &prev);
	return next;
}

static void rf_copy(struct cs_flow_tx *out, const struct cs_coll_tx *tx)
{
	out->dst = tx->dst;
	out->hdr = tx->hdr;
	out->payload = tx->payload;
	out->len = tx->len;
	out->cookie = tx->cookie;
}

static unsigned rf_next(void *f, cs_ns_t now, uint32_t ch,
			struct cs_flow_tx *out, unsigned max)
{
	struct cs_coll_tx tx;
	unsigned n = 0;

	while (n < max && cs_coll_next_on(f, now, ch, &tx, 1))
		rf_copy(&out[n++], &tx);
	return n;
}

static int rf_on_data(void *f, cs_ns_t now, const struct cs_pkt_hdr *h,
		      const void *payload)
{
	return cs_coll_on_data(f, now, h, payload);
}

static int rf_on_acked(void *f, uint64_t cookie)
{
	return cs_coll_on_acked(f, cookie);
}

static int rf_rebuild(void *f, uint64_t cookie, struct cs_flow_tx *out)
{
	struct cs_coll_tx tx;
	int ret = cs_coll_rebuild(f, cookie, &tx);

	if (!ret || ret == -ESTALE)
		rf_copy(out, &tx);
	return ret;
}

static int rf_status(const void *f, uint32_t *culprit)
{
	return cs_coll_status(f, culprit);
}

static int rf_abort(void *f, int err, uint32_t culprit)
{
	int ret = cs_coll_abort(f, err, culprit);

	return ret == -EALREADY ? 0 : ret;
}

static bool rf_check_deadline(void *f, cs_ns_t now)
{
	return cs_coll_check_deadline(f, now);
}

static cs_ns_t rf_deadline(const void *f)
{
	return cs_coll_next_deadline(f);
}

/* A direct exchange resends its input from its scratch slot: its owner
 * may have the buffers back once the result is in. */
static bool rf_early_ok(const void *f)
{
	return cs_coll_resends_own_copy(f) && cs_coll_result_ready(f);
}

static bool rf_result_ready(const void *f)
{
	return cs_coll_result_ready(f);
}

const struct cs_flow_ops cs_coll_flow_ops = {
	.channels = rf_channels,
	.chan_peer = rf_chan_peer,
	.next = rf_next,
	.on_data = rf_on_data,
	.on_acked = rf_on_acked,
	.rebuild = rf_rebuild,
	.status = rf_status,
	.abort = rf_abort,
	.check_deadline = rf_check_deadline,
	.deadline = rf_deadline,
	.result_ready = rf_result_ready,
	.early_ok = rf_early_ok,
};

/* SPDX-License-Identifier: MIT */
/*
 * A tiny in-process "network" for the ring engine's unit tests: no time,
 * no transport, just a bag of packets delivered in random order, with
 * seeded loss, duplication and lost acknowledgements. Lost packets and
 * lost acks become retransmissions rebuilt from cookies, and every rebuilt
 * payload is compared with the bytes of the original transmission.
 */
#ifndef CS_TESTS_RING_HARNESS_H
#define CS_TESTS_RING_HARNESS_H

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/ring.h"
#include "internal/util.h"

struct rh_msg {
	uint32_t src, dst;
	bool ack; /* an acknowledgement of @cookie to @dst */
	bool retx; /* a retransmission entry (not yet rebuilt) */
	struct cs_pkt_hdr hdr;
	uint8_t *data; /* bytes of the ORIGINAL transmission */
	uint64_t cookie;
};

struct rh_net {
	uint32_t n;
	struct cs_coll **ops;
	struct rh_msg *q;
	size_t nq, cap;
	uint64_t rng;
	double loss, dup, ackloss;
	/* what happened */
	uint64_t delivered, dups, retx, stale, bad;
	const char *err; /* first invariant broken, or NULL */
};

static inline void rh_push(struct rh_net *w, const struct rh_msg *m)
{
	if (w->nq == w->cap) {
		w->cap = w->cap ? 2 * w->cap : 256;
		w->q = realloc(w->q, w->cap * sizeof(*w->q));
	}
	w->q[w->nq++] = *m;
}

static inline uint8_t *rh_dup(const void *p, uint32_t len)
{
	uint8_t *d = malloc(len ? len : 1);

	if (p && len)
		memcpy(d, p, len);
	return d;
}

static inline void rh_fail(struct rh_net *w, const char *why)
{
	if (!w->err)
		w->err = why;
}

static inline void rh_pump(struct rh_net *w)
{
	struct cs_coll_tx tx[8];

	for (uint32_t r = 0; r < w->n; r++) {
		unsigned k = cs_coll_next_packets(w->ops[r], 0, tx, 8);

		for (unsigned i = 0; i < k; i++) {
			struct rh_msg m = {
				.src = r,
				.dst = tx[i].dst,
				.hdr = tx[i].hdr,
				.cookie = tx[i].cookie,
				.data = rh_dup(tx[i].payload, tx[i].len),
			};
			rh_push(w, &m);
		}
	}
}

static inline bool rh_all_done(const struct rh_net *w)
{
	for (uint32_t r = 0; r < w->n; r++)
		if (!cs_coll_done(w->ops[r]))
			return false;
	return true;
}

static inline void rh_one(struct rh_net *w, struct rh_msg m)
{
	struct cs_coll_tx tx;
	int ret;

	if (m.retx) {
		ret = cs_coll_rebuild(w->ops[m.src], m.cookie, &tx);
		if (ret == -ESTALE) {
			/* refused: the receiver must provably hold it */
			w->stale++;
			if (!cs_coll_rx_has(w->ops[m.dst], m.hdr.step,
					    m.hdr.channel, m.hdr.offset))
				rh_fail(w, "stale rebuild of a packet the "
					   "receiver does not hold");
			cs_coll_on_acked(w->ops[m.src], m.cookie);
			free(m.data);
			return;
		}
		if (ret) {
			rh_fail(w, "rebuild failed");
			free(m.data);
			return;
		}
		if (tx.len != m.hdr.len || tx.hdr.offset != m.hdr.offset ||
		    tx.hdr.step != m.hdr.step || tx.dst != m.dst ||
		    tx.hdr.channel != m.hdr.channel ||
		    !(tx.hdr.flags & CS_PKT_F_RETX) ||
		    (tx.len && tx.payload &&
		     memcmp(tx.payload, m.data, tx.len)))
			rh_fail(w, "retransmission differs from original");
		w->retx++;
		m.retx = false;
		rh_push(w, &m); /* carries the original's bytes */
		return;
	}
	if (m.ack) {
		if (cs_rand_unit(&w->rng) < w->ackloss) {
			/* the sender never hears: it will resend */
			m.ack = false;
			m.retx = true;
			m.dst = m.src; /* ack went dst->src; swap back */
			m.src = m.hdr.src;
			rh_push(w, &m);
			return;
		}
		if (cs_coll_on_acked(w->ops[m.dst], m.cookie))
			rh_fail(w, "on_acked refused a cookie");
		free(m.data);
		return;
	}
	if (cs_rand_unit(&w->rng) < w->loss) {
		m.retx = true;
		rh_push(w, &m);
		return;
	}
	ret = cs_coll_on_data(w->ops[m.dst], 0, &m.hdr, m.data);
	if (ret < 0) {
		w->bad++;
		rh_fail(w, "on_data rejected a packet of the schedule");
	} else if (ret == CS_COLL_RX_DUP) {
		w->dups++;
	} else {
		w->delivered++;
	}
	if (cs_rand_unit(&w->rng) < w->dup) {
		struct rh_msg d = m;

		d.data = rh_dup(m.data, m.hdr.len);
		rh_push(w, &d);
	}
	/* acknowledge: an ack message from dst back to src */
	m.ack = true;
	{
		uint32_t s = m.src;

		m.src = m.dst;
		m.dst = s;
	}
	rh_push(w, &m);
}

/**
 * rh_run - drive every operation of @w to completion
 * Returns: true when all completed with no invariant broken.
 */
static inline bool rh_run(struct rh_net *w, uint64_t max_events)
{
	uint64_t ev = 0;

	rh_pump(w);
	while (w->nq && ev++ < max_events && !w->err) {
		size_t i = cs_rand_next(&w->rng) % w->nq;
		struct rh_msg m = w->q[i];

		w->q[i] = w->q[--w->nq];
		rh_one(w, m);
		rh_pump(w);
	}
	for (size_t i = 0; i < w->nq; i++)
		free(w->q[i].data);
	free(w->q);
	w->q = NULL;
	w->nq = w->cap = 0;
	if (!w->err && !rh_all_done(w))
		rh_fail(w, "operations did not complete");
	return !w->err;
}

#endif

// SPDX-License-Identifier: MIT
/*
 * cs_ps_flow: PS messages as frames of one transport-core operation
 * (ps_flow.h). A message lives in a slot from cs_ps_flow_send() until its
 * frame is acknowledged; the frame's cookie is the slot index and the
 * slot's generation, so a stale or foreign cookie is refused, not
 * followed.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/ps/ps.h"
#include "collectives/ps/ps_wire.h"
#include "collstack/types.h"
#include "transport/ps_flow.h"

struct psf_slot {
	uint8_t *buf;
	uint32_t len;
	uint32_t dst;
	uint32_t gen;
	bool used;
	bool handed; /* given to the core, not yet acknowledged */
};

/* FIFO of slot indices. */
struct psf_fifo {
	uint32_t *v;
	uint32_t head, n, cap;
};

struct cs_ps_flow {
	uint32_t n, self, mss;
	cs_ps_flow_rx_fn rx;
	void *ctx;
	struct psf_slot *slot;
	uint32_t nslots, cap_slots;
	uint32_t *free_idx;
	uint32_t nfree;
	/* per rank: messages not handed to the core yet; [self] holds the
	 * local ones (channel self sends nothing) */
	struct psf_fifo *q;
	uint64_t backlog; /* slots in use */
	uint64_t offset; /* frames handed out (header offset: diagnostics) */
	bool closed;
	int err;
	uint32_t culprit;
	struct cs_ps_flow_stats st;
};

static int psf_fifo_push(struct psf_fifo *q, uint32_t x)
{
	if (q->n == q->cap) {
		uint32_t cap = q->cap ? 2 * q->cap : 16;
		uint32_t *v = malloc((size_t)cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		for (uint32_t i = 0; i < q->n; i++)
			v[i] = q->v[(q->head + i) % q->cap];
		free(q->v);
		q->v = v;
		q->head = 0;
		q->cap = cap;
	}
	q->v[(q->head + q->n) % q->cap] = x;
	q->n++;
	return 0;
}

static uint32_t psf_fifo_pop(struct psf_fifo *q)
{
	uint32_t x = q->v[q->head];

	q->head = (q->head + 1) % q->cap;
	q->n--;
	return x;
}

int cs_ps_flow_create(uint32_t n, uint32_t self, uint32_t mss,
		      cs_ps_flow_rx_fn rx, void *ctx, struct cs_ps_flow **out)
{
	struct cs_ps_flow *f;

	if (!n || self >= n || !mss || !rx || !out)
		return -EINVAL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->q = calloc(n, sizeof(*f->q));
	if (!f->q) {
		free(f);
		return -ENOMEM;
	}
	f->n = n;
	f->self = self;
	f->mss = mss;
	f->rx = rx;
	f->ctx = ctx;
	f->culprit = UINT32_MAX;
	*out = f;
	return 0;
}

void cs_ps_flow_destroy(struct cs_ps_flow *f)
{
	if (!f)
		return;
	for (uint32_t i = 0; i < f->nslots; i++)
		free(f->slot[i].buf);
	for (uint32_t r = 0; r < f->n; r++)
		free(f->q[r].v);
	free(f->q);
	free(f->slot);
	free(f->free_idx);
	free(f);
}

static int psf_slot_get(struct cs_ps_flow *f, uint32_t *idx)
{
	if (f->nfree) {
		*idx = f->free_idx[--f->nfree];
		return 0;
	}
	if (f->nslots == f->cap_slots) {
		uint32_t cap = f->cap_slots ? 2 * f->cap_slots : 64;
		struct psf_slot *s = realloc(f->slot, cap * sizeof(*s));
		uint32_t *fi;

		if (!s)
			return -ENOMEM;
		f->slot = s;
		fi = realloc(f->free_idx, cap * sizeof(*fi));
		if (!fi)
			return -ENOMEM;
		f->free_idx = fi;
		memset(s + f->cap_slots, 0, (cap - f->cap_slots) * sizeof(*s));
		f->cap_slots = cap;
	}
	*idx = f->nslots++;
	return 0;
}

static void psf_slot_put(struct cs_ps_flow *f, uint32_t idx)
{
	struct psf_slot *s = &f->slot[idx];

	free(s->buf);
	s->buf = NULL;
	s->used = false;
	s->handed = false;
	s->gen++;
	f->free_idx[f->nfree++] = idx;
	f->backlog--;
}

int cs_ps_flow_send(struct cs_ps_flow *f, uint32_t dst, const void *msg,
		    size_t len)
{
	struct psf_slot *s;
	uint32_t idx;
	int ret;

	if (dst >= f->n || !len || !msg)
		return -EINVAL;
	if (len > f->mss)
		return -EMSGSIZE;
	if (f->closed || f->err)
		return -EPIPE;
	ret = psf_slot_get(f, &idx);
	if (ret)
		return ret;
	s = &f->slot[idx];
	s->buf = malloc(len);
	if (!s->buf) {
		f->free_idx[f->nfree++] = idx;
		return -ENOMEM;
	}
	memcpy(s->buf, msg, len);
	s->len = (uint32_t)len;
	s->dst = dst;
	s->used = true;
	s->handed = false;
	f->backlog++;
	ret = psf_fifo_push(&f->q[dst], idx);
	if (ret) {
		psf_slot_put(f, idx);
		return ret;
	}
	if (dst == f->self)
		f->st.local++;
	else
		f->st.sent++;
	return 0;
}

unsigned cs_ps_flow_drain_local(struct cs_ps_flow *f, cs_ns_t now, unsigned max)
{
	struct psf_fifo *q = &f->q[f->self];
	unsigned done = 0;

	while (q->n && done < max && !f->err) {
		uint32_t idx = psf_fifo_pop(q);
		struct psf_slot *s = &f->slot[idx];
		uint8_t *buf = s->buf;
		uint32_t len = s->len;

		/* the slot is free before the callback runs: what it sends
		 * may reuse it; the bytes stay ours until delivered */
		s->buf = NULL;
		psf_slot_put(f, idx);
		f->rx(f->ctx, f->self, buf, len, now);
		free(buf);
		done++;
	}
	return done;
}

void cs_ps_flow_close(struct cs_ps_flow *f)
{
	f->closed = true;
}

uint64_t cs_ps_flow_backlog(const struct cs_ps_flow *f)
{
	return f->backlog;
}

void cs_ps_flow_get_stats(const struct cs_ps_flow *f,
			  struct cs_ps_flow_stats *st)
{
	*st = f->st;
}

int cs_ps_flow_route(struct cs_ps_store *st, struct cs_ps_worker *w,
		     uint32_t src, const void *msg, size_t len, cs_ns_t now)
{
	const uint8_t *b = msg;

	if (len < 4)
		return -EPROTO;
	switch (b[3]) { /* the type byte (ps_wire.h) */
	case CS_PS_MSG_PUSH:
	case CS_PS_MSG_PULL:
		return st ? cs_ps_store_rx(st, msg, len) : -EPROTO;
	case CS_PS_MSG_PUSH_ACK:
	case CS_PS_MSG_PULL_REPLY:
		return w ? cs_ps_worker_rx(w, src, msg, len, now) : -EPROTO;
	default:
		return -EPROTO;
	}
}

/* ---- struct cs_flow_ops ------------------------------------------------ */

static uint32_t psf_channels(const void *p)
{
	const struct cs_ps_flow *f = p;

	return f->n;
}

static int64_t psf_chan_peer(const void *p, uint32_t ch)
{
	const struct cs_ps_flow *f = p;

	return ch == f->self || ch >= f->n ? -1 : (int64_t)ch;
}

static void psf_tx(struct cs_ps_flow *f, uint32_t idx, struct cs_flow_tx *out)
{
	const struct psf_slot *s = &f->slot[idx];

	memset(out, 0, sizeof(*out));
	out->dst = s->dst;
	out->hdr.version = CS_PROTO_VERSION;
	out->hdr.type = CS_PKT_DATA;
	out->hdr.channel = (uint16_t)s->dst;
	out->payload = s->buf;
	out->len = s->len;
	out->cookie = (uint64_t)s->gen << 32 | idx;
}

static unsigned psf_next(void *p, cs_ns_t now, uint32_t ch,
			 struct cs_flow_tx *out, unsigned max)
{
	struct cs_ps_flow *f = p;
	unsigned k = 0;

	(void)now;
	if (ch >= f->n || ch == f->self || f->err)
		return 0;
	while (k < max && f->q[ch].n) {
		uint32_t idx = psf_fifo_pop(&f->q[ch]);

		f->slot[idx].handed = true;
		psf_tx(f, idx, &out[k]);
		out[k].hdr.offset = f->offset++;
		k++;
	}
	return k;
}

static int psf_on_data(void *p, cs_ns_t now, const struct cs_pkt_hdr *h,
		       const void *payload)
{
	struct cs_ps_flow *f = p;

	/* the channel names the rank the frame was sent to: a frame that
	 * reached another node (a switch floods frames to a MAC it has not
	 * learnt yet, and the port takes them) is not this rank's message */
	if (!h->len || !payload || h->src >= f->n || h->src == f->self ||
	    h->channel != f->self) {
		f->st.rx_bad++;
		return -EPROTO;
	}
	if (f->err)
		return 0; /* aborted here: acknowledged, not applied */
	f->st.rx++;
	f->rx(f->ctx, h->src, payload, h->len, now);
	/* a request or a reply somebody waits for: no coalescing delay */
	return CS_FLOW_RX_ACK_NOW;
}

static struct psf_slot *psf_cookie(struct cs_ps_flow *f, uint64_t cookie,
				   uint32_t *idx)
{
	uint32_t i = (uint32_t)cookie;
	struct psf_slot *s;

	if (i >= f->nslots)
		return NULL;
	s = &f->slot[i];
	if (!s->used || !s->handed || s->gen != (uint32_t)(cookie >> 32))
		return NULL;
	*idx = i;
	return s;
}

static int psf_on_acked(void *p, uint64_t cookie)
{
	struct cs_ps_flow *f = p;
	uint32_t idx;

	if (!psf_cookie(f, cookie, &idx))
		return -ENOENT;
	psf_slot_put(f, idx);
	f->st.acked++;
	return 0;
}

static int psf_rebuild(void *p, uint64_t cookie, struct cs_flow_tx *out)
{
	struct cs_ps_flow *f = p;
	uint32_t idx;

	if (!psf_cookie(f, cookie, &idx))
		return -ENOENT;
	psf_tx(f, idx, out);
	out->hdr.flags |= CS_PKT_F_RETX;
	f->st.rebuilt++;
	return 0;
}

static int psf_status(const void *p, uint32_t *culprit)
{
	const struct cs_ps_flow *f = p;

	if (f->err) {
		*culprit = f->culprit;
		return f->err;
	}
	*culprit = UINT32_MAX;
	return f->closed && !f->backlog ? 0 : -EINPROGRESS;
}

static int psf_abort(void *p, int err, uint32_t culprit)
{
	struct cs_ps_flow *f = p;

	if (!f->err) {
		f->err = err ? err : -ECANCELED;
		f->culprit = culprit;
	}
	return 0;
}

const struct cs_flow_ops cs_ps_flow_ops = {
	.channels = psf_channels,
	.chan_peer = psf_chan_peer,
	.next = psf_next,
	.on_data = psf_on_data,
	.on_acked = psf_on_acked,
	.rebuild = psf_rebuild,
	.status = psf_status,
	.abort = psf_abort,
};

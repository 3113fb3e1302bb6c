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

/* A slot is one frame: a whole message, or one fragment of a longer one. */
struct psf_slot {
	uint8_t *buf;
	uint32_t len;
	uint32_t dst;
	uint32_t gen;
	uint32_t msg_id; /* per destination, from 1 (hdr.step) */
	uint32_t msg_len; /* the whole message's bytes */
	uint16_t unit; /* fragment size: every fragment but the last */
	uint16_t frag; /* this fragment's index */
	bool used;
	bool handed; /* given to the core, not yet acknowledged */
};

/* A message being reassembled from its fragments (one source rank). */
struct psf_part {
	uint8_t *buf;
	uint64_t *have; /* bit per fragment */
	uint32_t msg_id, msg_len, nfrag, got;
	uint16_t unit;
};

/* Partial messages kept per source rank (more: the fragment is refused;
 * the session window bounds what can be in flight far below this). */
#define PSF_PARTS_MAX 256u
/* ... and their bytes: each is allocated whole at its first fragment, so
 * 256 first fragments of 1 MiB messages would otherwise hold 256 MiB. A
 * sender's session window keeps far less than this in flight. */
#define PSF_PART_BYTES (32u << 20)

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
	uint32_t *next_id; /* per rank: the last message id sent to it */
	struct psf_part **part; /* per source rank: [PSF_PARTS_MAX] */
	uint32_t *nparts;
	uint64_t backlog; /* slots in use */
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

	if (!n || self >= n || mss < 64 || mss > UINT16_MAX || !rx || !out)
		return -EINVAL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->q = calloc(n, sizeof(*f->q));
	f->next_id = calloc(n, sizeof(*f->next_id));
	f->part = calloc(n, sizeof(*f->part));
	f->nparts = calloc(n, sizeof(*f->nparts));
	if (!f->q || !f->next_id || !f->part || !f->nparts) {
		free(f->q);
		free(f->next_id);
		free(f->part);
		free(f->nparts);
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
	for (uint32_t r = 0; r < f->n; r++) {
		free(f->q[r].v);
		for (uint32_t i = 0; f->part[r] && i < f->nparts[r]; i++) {
			free(f->part[r][i].buf);
			free(f->part[r][i].have);
		}
		free(f->part[r]);
	}
	free(f->q);
	free(f->next_id);
	free(f->part);
	free(f->nparts);
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

/* Queue one frame (a copy of @len bytes at @p) for @dst. */
static int psf_queue(struct cs_ps_flow *f, uint32_t dst, const uint8_t *p,
		     uint32_t len, uint32_t msg_id, uint32_t msg_len,
		     uint16_t frag)
{
	struct psf_slot *s;
	uint32_t idx;
	int ret;

	ret = psf_slot_get(f, &idx);
	if (ret)
		return ret;
	s = &f->slot[idx];
	s->buf = malloc(len);
	if (!s->buf) {
		f->free_idx[f->nfree++] = idx;
		return -ENOMEM;
	}
	memcpy(s->buf, p, len);
	s->len = len;
	s->dst = dst;
	s->msg_id = msg_id;
	s->msg_len = msg_len;
	s->unit = (uint16_t)f->mss;
	s->frag = frag;
	s->used = true;
	s->handed = false;
	f->backlog++;
	ret = psf_fifo_push(&f->q[dst], idx);
	if (ret) {
		psf_slot_put(f, idx);
		return ret;
	}
	return 0;
}

int cs_ps_flow_send(struct cs_ps_flow *f, uint32_t dst, const void *msg,
		    size_t len)
{
	const uint8_t *p = msg;
	uint32_t id, nfrag;
	int ret;

	if (dst >= f->n || !len || !msg)
		return -EINVAL;
	if (len > CS_PS_FLOW_MSG_MAX)
		return -EMSGSIZE;
	if (f->closed || f->err)
		return -EPIPE;
	if (dst == f->self) {
		/* never on the wire: one slot, whatever its size */
		ret = psf_queue(f, dst, p, (uint32_t)len, 0, (uint32_t)len, 0);
		if (!ret)
			f->st.local++;
		return ret;
	}
	id = ++f->next_id[dst];
	if (!id)
		id = f->next_id[dst] = 1;
	nfrag = (uint32_t)((len + f->mss - 1) / f->mss);
	for (uint32_t i = 0; i < nfrag; i++) {
		size_t off = (size_t)i * f->mss;
		uint32_t fl = (uint32_t)CS_MIN((size_t)f->mss, len - off);

		/* a failure after some fragments leaves a message that never
		 * completes at the receiver: it is the same as a lost one
		 * (the worker's timer resends; the store deduplicates) */
		ret = psf_queue(f, dst, p + off, fl, id, (uint32_t)len,
				(uint16_t)i);
		if (ret)
			return ret;
	}
	f->st.sent++;
	if (nfrag > 1)
		f->st.frag_tx += nfrag;
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
	out->hdr.step = s->msg_id;
	out->hdr.offset =
		(uint64_t)s->msg_len << 32 | (uint32_t)s->unit << 16 | s->frag;
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
		k++;
	}
	return k;
}

static void psf_part_drop(struct cs_ps_flow *f, uint32_t src, uint32_t i)
{
	struct psf_part *pt = f->part[src];

	free(pt[i].buf);
	free(pt[i].have);
	pt[i] = pt[--f->nparts[src]];
}

/*
 * A fragment of message @id from @src: into its partial message (made at
 * its first fragment). Returns 1 with *@msg (the whole message, the
 * caller frees it) when it completed, 0 when more are due, -EPROTO for a
 * fragment that does not fit (its message's length or unit differ, its
 * index or length are wrong, it overlaps one already taken, too many
 * partial messages) and -ENOMEM.
 */
static int psf_reasm(struct cs_ps_flow *f, uint32_t src, uint32_t id,
		     uint32_t msg_len, uint32_t unit, uint32_t frag,
		     const uint8_t *p, uint32_t len, uint8_t **msg)
{
	struct psf_part *pt;
	uint32_t nfrag, i;

	if (!f->part[src]) {
		f->part[src] = calloc(PSF_PARTS_MAX, sizeof(*f->part[src]));
		if (!f->part[src])
			return -ENOMEM;
	}
	for (i = 0; i < f->nparts[src]; i++)
		if (f->part[src][i].msg_id == id)
			break;
	nfrag = (msg_len + unit - 1) / unit;
	if (i == f->nparts[src]) {
		uint64_t held = msg_len;

		for (uint32_t j = 0; j < i; j++)
			held += f->part[src][j].msg_len;
		if (i == PSF_PARTS_MAX || held > PSF_PART_BYTES)
			return -EPROTO;
		pt = &f->part[src][i];
		memset(pt, 0, sizeof(*pt));
		pt->buf = malloc(msg_len);
		pt->have = calloc((nfrag + 63) / 64, sizeof(uint64_t));
		if (!pt->buf || !pt->have) {
			free(pt->buf);
			free(pt->have);
			return -ENOMEM;
		}
		pt->msg_id = id;
		pt->msg_len = msg_len;
		pt->nfrag = nfrag;
		pt->unit = (uint16_t)unit;
		f->nparts[src]++;
	}
	pt = &f->part[src][i];
	if (pt->msg_len != msg_len || pt->unit != unit ||
	    pt->have[frag / 64] >> (frag % 64) & 1)
		return -EPROTO;
	memcpy(pt->buf + (size_t)frag * unit, p, len);
	pt->have[frag / 64] |= 1ull << (frag % 64);
	if (++pt->got < pt->nfrag)
		return 0;
	*msg = pt->buf;
	pt->buf = NULL;
	psf_part_drop(f, src, i);
	return 1;
}

static int psf_on_data(void *p, cs_ns_t now, const struct cs_pkt_hdr *h,
		       const void *payload)
{
	struct cs_ps_flow *f = p;
	uint32_t msg_len = (uint32_t)(h->offset >> 32);
	uint32_t unit = (uint32_t)(h->offset >> 16) & 0xffff;
	uint32_t frag = (uint32_t)h->offset & 0xffff, nfrag;
	uint8_t *msg = NULL;
	int ret;

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
	/* the fragment's place: every fragment but the last is @unit bytes,
	 * the last what remains; a message of one fragment is the frame */
	if (!msg_len || msg_len > CS_PS_FLOW_MSG_MAX || unit < 64) {
		f->st.rx_bad++;
		return -EPROTO;
	}
	nfrag = (msg_len + unit - 1) / unit;
	if (frag >= nfrag ||
	    h->len != (frag + 1 < nfrag ? unit : msg_len - frag * unit)) {
		f->st.rx_bad++;
		return -EPROTO;
	}
	if (nfrag > 1) {
		ret = psf_reasm(f, h->src, h->step, msg_len, unit, frag,
				payload, h->len, &msg);
		if (ret < 0) {
			f->st.rx_bad++;
			f->st.frag_bad++;
			return ret == -ENOMEM ? ret : -EPROTO;
		}
		f->st.frag_rx++;
		if (!ret)
			return CS_FLOW_RX_ACK_NOW;
		payload = msg;
	}
	f->st.rx++;
	f->rx(f->ctx, h->src, payload, msg_len, now);
	free(msg);
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

/* SPDX-License-Identifier: MIT */
/* Point-to-point send and receive for trainers, the IPC side (ipc_p2p.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define CS_LOG_MODULE "ipc"
#include "internal/log.h"
#include "ipc_p2p.h"
#include "ipc_ps.h" /* what ipc_server.c lends: members, segments */

/* One (group handle, peer, tag, direction) sequence counter. */
struct p2p_ctr {
	uint32_t handle, peer, tag;
	bool recv;
	uint64_t next;
};

struct cs_ipc_p2p_tr {
	struct p2p_ctr *c;
	uint32_t n, cap;
};

struct cs_ipc_p2p {
	const struct cs_ipc_p2p_ops *ops;
	void *ctx;
	/* submitted, not completed yet (every trainer's) */
	struct cs_ipc_p2p_req *inflight;
};

/*
 * Does the failure of the trainer's group end a transfer with @peer? A
 * collective needs every rank, a transfer only its two: a group failed
 * because a rank left or died (CS_IPC_LOST_RANK) still carries transfers
 * between the others (the ones with that rank end through the backend's
 * gone()); any other failure (a node lost, a refusal) ends them all.
 */
static bool group_ends(const struct cs__ipc_member_info *mi, uint32_t peer)
{
	if (!mi->fail_status)
		return false;
	return !(mi->fail_status == CS_ERR_PEER_LOST &&
		 mi->fail_detail == CS_IPC_LOST_RANK && mi->fail_peer >= 0 &&
		 (uint32_t)mi->fail_peer != peer);
}

bool cs_ipc_p2p_is_op(uint8_t op)
{
	return op == CS_IPC_OP_SEND || op == CS_IPC_OP_RECV;
}

int cs_ipc_server_set_p2p(struct cs_ipc_server *s,
			  const struct cs_ipc_p2p_ops *ops, void *ctx)
{
	struct cs_ipc_p2p **pp = cs__ipc_p2p_state(s);

	if (!*pp) {
		*pp = calloc(1, sizeof(**pp));
		if (!*pp)
			return -ENOMEM;
	}
	(*pp)->ops = ops;
	(*pp)->ctx = ctx;
	return 0;
}

uint64_t cs_ipc_p2p_gkey(const char *name, uint32_t size)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a, 64 bits */

	for (; *name; name++)
		h = (h ^ (uint8_t)*name) * 1099511628211ull;
	for (unsigned i = 0; i < 4; i++)
		h = (h ^ ((size >> (8 * i)) & 0xff)) * 1099511628211ull;
	return h;
}

void cs_ipc_p2p_req_free(struct cs_ipc_p2p_req *r)
{
	if (!r)
		return;
	free(r->buf);
	free(r);
}

/* Hand @r to the backend for good (its trainer is gone), or free it when
 * the backend is done with it already. */
static void req_orphan(struct cs_ipc_p2p_req *r)
{
	if (atomic_exchange_explicit(&r->state, CS_IPC_P2P_ORPHAN,
				     memory_order_acq_rel) == CS_IPC_P2P_DONE)
		cs_ipc_p2p_req_free(r);
}

/* The sequence counter of (@handle, @peer, @tag, @recv) for @t (a new one
 * at 0); NULL without memory. Moved on only once the request is taken. */
static uint64_t *seq_of(struct trainer *t, uint32_t handle, uint32_t peer,
			uint32_t tag, bool recv)
{
	struct cs_ipc_p2p_tr **trp = cs__ipc_trainer_p2p(t), *tr;

	if (!*trp) {
		*trp = calloc(1, sizeof(**trp));
		if (!*trp)
			return NULL;
	}
	tr = *trp;
	for (uint32_t i = 0; i < tr->n; i++) {
		struct p2p_ctr *c = &tr->c[i];

		if (c->handle == handle && c->peer == peer && c->tag == tag &&
		    c->recv == recv)
			return &c->next;
	}
	if (tr->n == tr->cap) {
		uint32_t cap = tr->cap ? 2 * tr->cap : 16;
		struct p2p_ctr *nc = realloc(tr->c, cap * sizeof(*nc));

		if (!nc)
			return NULL;
		tr->c = nc;
		tr->cap = cap;
	}
	tr->c[tr->n] = (struct p2p_ctr){
		.handle = handle, .peer = peer, .tag = tag, .recv = recv
	};
	return &tr->c[tr->n++].next;
}

/* The checks a descriptor passes; returns 0 or the enum cs_ipc_bad of
 * the first that fails. *@mem: the buffer in the trainer's segment. */
static unsigned check_desc(struct cs_ipc_server *s, struct trainer *t,
			   const struct cs__ipc_member_info *mi,
			   const struct cs_ipc_sqe *d, uint8_t **mem)
{
	size_t esz = cs_dtype_size((enum cs_dtype)d->dtype);
	bool recv = d->op == CS_IPC_OP_RECV;
	uint32_t seg = recv ? d->recv_seg : d->send_seg;
	uint64_t off = recv ? d->recv_off : d->send_off;

	if (d->flags || d->redop || d->reserved1)
		return CS_IPC_BAD_FLAGS;
	if (!esz)
		return CS_IPC_BAD_DTYPE;
	if (mi->rank < 0 || !mi->size)
		return CS_IPC_BAD_GROUP;
	if (d->root >= mi->size || d->root == (uint32_t)mi->rank)
		return CS_IPC_BAD_ROOT;
	if (d->count > CS_IPC_P2P_MAX / esz)
		return CS_IPC_BAD_COUNT;
	*mem = NULL;
	if (!d->count)
		return 0;
	if (!cs__ipc_seg(s, t, seg, 0, 0, false))
		return recv ? CS_IPC_BAD_RECV_SEG : CS_IPC_BAD_SEND_SEG;
	if (off % esz)
		return CS_IPC_BAD_ALIGN;
	*mem = cs__ipc_seg(s, t, seg, off, d->count * esz, false);
	if (!*mem)
		return recv ? CS_IPC_BAD_RECV_RANGE : CS_IPC_BAD_SEND_RANGE;
	return 0;
}

void cs_ipc_p2p_take(struct cs_ipc_server *s, struct trainer *t,
		     const struct cs_ipc_sqe *d)
{
	struct cs_ipc_p2p *p = *cs__ipc_p2p_state(s);
	struct cs__ipc_member_info mi;
	struct cs_ipc_p2p_req *r;
	uint8_t *mem = NULL;
	unsigned bad = 0;
	uint64_t *seq;
	int ret;

	if (!p || !p->ops) {
		cs__ipc_complete(s, t, d->user_id, CS_ERR_BAD_DESC,
				 CS_IPC_BAD_OP, -1, 0);
		return;
	}
	if (cs__ipc_member(s, t, d->group, &mi)) {
		cs__ipc_complete(s, t, d->user_id, CS_ERR_BAD_DESC,
				 CS_IPC_BAD_GROUP, -1, 0);
		return;
	}
	if (group_ends(&mi, d->root)) {
		cs__ipc_complete(s, t, d->user_id, mi.fail_status,
				 mi.fail_detail, mi.fail_peer, mi.fail_aux);
		return;
	}
	bad = check_desc(s, t, &mi, d, &mem);
	if (bad) {
		cs__ipc_complete(s, t, d->user_id, CS_ERR_BAD_DESC, bad, -1, 0);
		return;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		goto out_nomem;
	atomic_init(&r->state, CS_IPC_P2P_QUEUED);
	r->recv = d->op == CS_IPC_OP_RECV;
	r->gkey = cs_ipc_p2p_gkey(mi.group, mi.size);
	r->rank = (uint32_t)mi.rank;
	r->peer = d->root;
	r->size = mi.size;
	r->local_size = mi.local_size;
	r->tag = d->reserved0;
	r->len = d->count * cs_dtype_size((enum cs_dtype)d->dtype);
	r->err_peer = -1;
	r->buf = malloc(r->len ? r->len : 1);
	seq = seq_of(t, d->group, r->peer, r->tag, r->recv);
	if (!r->buf || !seq)
		goto out_nomem;
	r->seq = *seq;
	/* one copy, then only the copy is read: the trainer may change its
	 * buffer as soon as the send is posted */
	if (!r->recv && r->len)
		memcpy(r->buf, mem, r->len);
	if (r->recv && r->len) {
		/* held until the data is in: it cannot be unregistered */
		r->into = cs__ipc_seg(s, t, d->recv_seg, d->recv_off, r->len,
				      true);
		r->recv_seg = d->recv_seg;
	}
	r->t = t;
	r->group = d->group;
	r->user_id = d->user_id;
	ret = p->ops->submit(p->ctx, r, &bad);
	if (ret) {
		if (r->into)
			cs__ipc_seg_put(s, t, r->recv_seg);
		cs_ipc_p2p_req_free(r);
		cs__ipc_complete(s, t, d->user_id, ret,
				 ret == CS_ERR_BAD_DESC ? bad : 0, -1, 0);
		return;
	}
	(*seq)++; /* a refused descriptor takes no number */
	r->srv_next = p->inflight;
	p->inflight = r;
	return;
out_nomem:
	cs_ipc_p2p_req_free(r);
	cs__ipc_complete(s, t, d->user_id, -ENOMEM, 0, -1, 0);
}

unsigned cs_ipc_p2p_poll(struct cs_ipc_server *s)
{
	struct cs_ipc_p2p *p = *cs__ipc_p2p_state(s);
	unsigned work = 0;

	if (!p)
		return 0;
	if (p->ops && p->ops->poll)
		work += p->ops->poll(p->ctx);
	for (struct cs_ipc_p2p_req **pp = &p->inflight, *r; (r = *pp);) {
		struct cs__ipc_member_info mi = { .fail_status = 0 };

		if (atomic_load_explicit(&r->state, memory_order_acquire) !=
		    CS_IPC_P2P_DONE) {
			/* its group failed (a local rank died, a node was
			 * lost) or the trainer left it: it ends now with the
			 * group's error; the backend frees it once done
			 * with it (and tells its peer) */
			if (cs__ipc_member(s, r->t, r->group, &mi))
				mi.fail_status = CS_ERR_CANCELLED;
			if (!group_ends(&mi, r->peer)) {
				pp = &r->srv_next;
				continue;
			}
			*pp = r->srv_next;
			if (r->into)
				cs__ipc_seg_put(s, r->t, r->recv_seg);
			cs__ipc_complete(s, r->t, r->user_id, mi.fail_status,
					 mi.fail_detail, mi.fail_peer,
					 mi.fail_aux);
			req_orphan(r);
			work++;
			continue;
		}
		*pp = r->srv_next;
		if (r->into) {
			if (!r->status)
				memcpy(r->into, r->buf, r->len);
			cs__ipc_seg_put(s, r->t, r->recv_seg);
		}
		cs__ipc_complete(s, r->t, r->user_id, r->status, r->detail,
				 r->err_peer, r->aux);
		cs_ipc_p2p_req_free(r);
		work++;
	}
	return work;
}

/* @t's rank of group @handle is gone: tell the backend (once per group
 * it used for point-to-point). */
static void tell_gone(struct cs_ipc_server *s, struct trainer *t,
		      uint32_t handle)
{
	struct cs_ipc_p2p *p = *cs__ipc_p2p_state(s);
	struct cs__ipc_member_info mi;

	if (p && p->ops && p->ops->gone && !cs__ipc_member(s, t, handle, &mi) &&
	    mi.rank >= 0)
		p->ops->gone(p->ctx, cs_ipc_p2p_gkey(mi.group, mi.size),
			     (uint32_t)mi.rank);
}

void cs_ipc_p2p_leave(struct cs_ipc_server *s, struct trainer *t,
		      uint32_t handle)
{
	struct cs_ipc_p2p_tr *tr = *cs__ipc_trainer_p2p(t);
	bool used = false;

	for (uint32_t i = 0; tr && i < tr->n && !used; i++)
		used = tr->c[i].handle == handle;
	if (used)
		tell_gone(s, t, handle);
	for (uint32_t i = 0; tr && i < tr->n;)
		if (tr->c[i].handle == handle)
			tr->c[i] = tr->c[--tr->n];
		else
			i++;
}

void cs_ipc_p2p_trainer_gone(struct cs_ipc_server *s, struct trainer *t)
{
	struct cs_ipc_p2p *p = *cs__ipc_p2p_state(s);
	struct cs_ipc_p2p_tr **trp = cs__ipc_trainer_p2p(t);

	for (struct cs_ipc_p2p_req **pp = p ? &p->inflight : NULL, *r;
	     pp && (r = *pp);) {
		if (r->t != t) {
			pp = &r->srv_next;
			continue;
		}
		*pp = r->srv_next;
		req_orphan(r); /* its segments go with the trainer */
	}
	/* every group it sent or received on: its rank there is gone */
	for (uint32_t i = 0; *trp && i < (*trp)->n; i++) {
		bool seen = false;

		for (uint32_t j = 0; j < i && !seen; j++)
			seen = (*trp)->c[j].handle == (*trp)->c[i].handle;
		if (!seen)
			tell_gone(s, t, (*trp)->c[i].handle);
	}
	if (*trp)
		free((*trp)->c);
	free(*trp);
	*trp = NULL;
}

void cs_ipc_p2p_fini(struct cs_ipc_server *s)
{
	struct cs_ipc_p2p **pp = cs__ipc_p2p_state(s);

	if (!*pp)
		return;
	/* the trainers were dropped first: nothing is left in flight */
	for (struct cs_ipc_p2p_req *r = (*pp)->inflight, *nx; r; r = nx) {
		nx = r->srv_next;
		req_orphan(r);
	}
	free(*pp);
	*pp = NULL;
}

/* SPDX-License-Identifier: MIT */
/* Parameter-server tables for trainers, the IPC side (ipc_ps.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CS_LOG_MODULE "ipc"
#include "internal/log.h"
#include "ipc_ps.h"

/* Tables one trainer holds open at once. */
#define IPC_PS_HANDLES 16u
/* Keys of one push or pull; rows of one request at most this many bytes
 * (the server copies them once). */
#define IPC_PS_KEYS_MAX (1u << 22)
#define IPC_PS_ROWS_MAX ((uint64_t)1 << 30)

/* A table a trainer opened. */
struct ps_handle {
	bool used;
	void *table; /* the backend's */
	uint32_t group; /* the trainer's group handle */
	uint32_t wrank;
	uint32_t dim;
	enum cs_dtype dtype;
	uint64_t key_max;
	size_t row_bytes;
};

struct cs_ipc_ps_tr {
	struct ps_handle h[IPC_PS_HANDLES];
};

struct cs_ipc_ps {
	const struct cs_ipc_ps_ops *ops;
	void *ctx;
	/* submitted, not completed yet (every trainer's) */
	struct cs_ipc_ps_req *inflight;
};

bool cs_ipc_ps_is_op(uint8_t op)
{
	return op == CS_IPC_OP_PS_PUSH || op == CS_IPC_OP_PS_PULL ||
	       op == CS_IPC_OP_PS_CKPT || op == CS_IPC_OP_PS_RESTORE;
}

int cs_ipc_server_set_ps(struct cs_ipc_server *s,
			 const struct cs_ipc_ps_ops *ops, void *ctx)
{
	struct cs_ipc_ps **pp = cs__ipc_ps_state(s);

	if (!*pp) {
		*pp = calloc(1, sizeof(**pp));
		if (!*pp)
			return -ENOMEM;
	}
	(*pp)->ops = ops;
	(*pp)->ctx = ctx;
	return 0;
}

void cs_ipc_ps_req_free(struct cs_ipc_ps_req *r)
{
	if (!r)
		return;
	free(r->keys);
	free(r->rows);
	free(r->path);
	free(r);
}

/* Hand @r to the backend for good (its trainer is gone), or free it when
 * the backend is done with it already. */
static void req_orphan(struct cs_ipc_ps_req *r)
{
	if (atomic_exchange_explicit(&r->state, CS_IPC_PS_ORPHAN,
				     memory_order_acq_rel) == CS_IPC_PS_DONE)
		cs_ipc_ps_req_free(r);
}

static struct ps_handle *handle_of(struct trainer *t, uint32_t h)
{
	struct cs_ipc_ps_tr *tr = *cs__ipc_trainer_ps(t);

	if (!tr || h >= IPC_PS_HANDLES || !tr->h[h].used)
		return NULL;
	return &tr->h[h];
}

/* The checks a descriptor passes before its keys are read; returns 0 or
 * the enum cs_ipc_bad of the first that fails. */
static unsigned check_desc(struct cs_ipc_server *s, struct trainer *t,
			   const struct ps_handle *h,
			   const struct cs_ipc_sqe *d, uint8_t **keys,
			   uint8_t **rows)
{
	size_t esz = cs_dtype_size(h->dtype);

	if (d->flags || d->redop || d->reserved0)
		return CS_IPC_BAD_FLAGS;
	if (d->dtype != h->dtype || d->root != h->dim)
		return CS_IPC_BAD_PS_ROW;
	/* a push of no key is a worker's empty version (sync and ssp need
	 * one from every worker); a pull of none is a mistake */
	if (!d->count && d->op == CS_IPC_OP_PS_PUSH)
		return 0;
	if (!d->count || d->count > IPC_PS_KEYS_MAX ||
	    d->count * h->row_bytes > IPC_PS_ROWS_MAX)
		return CS_IPC_BAD_COUNT;
	if (!cs__ipc_seg(s, t, d->send_seg, 0, 0, false))
		return CS_IPC_BAD_SEND_SEG;
	if (d->send_off % sizeof(uint64_t))
		return CS_IPC_BAD_ALIGN;
	*keys = cs__ipc_seg(s, t, d->send_seg, d->send_off,
			    d->count * sizeof(uint64_t), false);
	if (!*keys)
		return CS_IPC_BAD_SEND_RANGE;
	if (!cs__ipc_seg(s, t, d->recv_seg, 0, 0, false))
		return CS_IPC_BAD_RECV_SEG;
	if (d->recv_off % esz)
		return CS_IPC_BAD_ALIGN;
	*rows = cs__ipc_seg(s, t, d->recv_seg, d->recv_off,
			    d->count * h->row_bytes, false);
	return *rows ? 0 : CS_IPC_BAD_RECV_RANGE;
}

/* A checkpoint's or restore's descriptor: the path is read once (a
 * NUL-terminated string of d->count bytes); the result's room is held.
 * Returns 0, an enum cs_ipc_bad, or -ENOMEM. */
static int ctl_take(struct cs_ipc_server *s, struct trainer *t,
		    const struct cs_ipc_sqe *d, struct cs_ipc_ps_req *r)
{
	const char *path;

	if (d->flags || d->redop || d->reserved0 || d->reserved1 || d->dtype ||
	    d->root)
		return CS_IPC_BAD_FLAGS;
	if (d->count < 2 || d->count > CS_IPC_PS_PATH_MAX)
		return CS_IPC_BAD_COUNT;
	path = (const char *)cs__ipc_seg(s, t, d->send_seg, d->send_off,
					 d->count, false);
	if (!path)
		return cs__ipc_seg(s, t, d->send_seg, 0, 0, false)
			       ? CS_IPC_BAD_SEND_RANGE
			       : CS_IPC_BAD_SEND_SEG;
	if (d->recv_off % sizeof(int64_t))
		return CS_IPC_BAD_ALIGN;
	if (!cs__ipc_seg(s, t, d->recv_seg, d->recv_off, CS_IPC_PS_CTL_RESULT,
			 false))
		return cs__ipc_seg(s, t, d->recv_seg, 0, 0, false)
			       ? CS_IPC_BAD_RECV_RANGE
			       : CS_IPC_BAD_RECV_SEG;
	r->path = malloc(d->count);
	r->rows = calloc(1, CS_IPC_PS_CTL_RESULT);
	if (!r->path || !r->rows)
		return -ENOMEM;
	/* one copy: the trainer may change its buffer meanwhile */
	memcpy(r->path, path, d->count);
	if (strnlen(r->path, d->count) != d->count - 1)
		return CS_IPC_BAD_COUNT; /* not one string of count bytes */
	r->ctl = d->op == CS_IPC_OP_PS_CKPT ? CS_IPC_PS_CTL_CKPT
					    : CS_IPC_PS_CTL_RESTORE;
	r->rows_len = CS_IPC_PS_CTL_RESULT;
	r->recv =
		cs__ipc_seg(s, t, d->recv_seg, d->recv_off, r->rows_len, true);
	r->recv_seg = d->recv_seg;
	return 0;
}

void cs_ipc_ps_take(struct cs_ipc_server *s, struct trainer *t,
		    const struct cs_ipc_sqe *d)
{
	struct cs_ipc_ps *ps = *cs__ipc_ps_state(s);
	struct cs__ipc_member_info mi;
	struct ps_handle *h = handle_of(t, d->group);
	struct cs_ipc_ps_req *r;
	uint8_t *keys = NULL, *rows = NULL;
	unsigned bad;
	int ret;

	if (!ps || !ps->ops || !h) {
		cs__ipc_complete(s, t, d->user_id, CS_ERR_BAD_DESC,
				 CS_IPC_BAD_PS_TABLE, -1, 0);
		return;
	}
	if (cs__ipc_member(s, t, h->group, &mi)) { /* left the group */
		cs__ipc_complete(s, t, d->user_id, CS_ERR_BAD_DESC,
				 CS_IPC_BAD_GROUP, -1, 0);
		return;
	}
	if (mi.fail_status) {
		cs__ipc_complete(s, t, d->user_id, mi.fail_status,
				 mi.fail_detail, mi.fail_peer, mi.fail_aux);
		return;
	}
	if (d->op == CS_IPC_OP_PS_CKPT || d->op == CS_IPC_OP_PS_RESTORE) {
		r = calloc(1, sizeof(*r));
		if (!r)
			goto out_nomem;
		atomic_init(&r->state, CS_IPC_PS_QUEUED);
		r->wrank = h->wrank;
		ret = ctl_take(s, t, d, r);
		if (ret < 0)
			goto out_nomem;
		if (ret) {
			cs_ipc_ps_req_free(r);
			cs__ipc_complete(s, t, d->user_id, CS_ERR_BAD_DESC,
					 (unsigned)ret, -1, 0);
			return;
		}
		goto submit;
	}
	bad = check_desc(s, t, h, d, &keys, &rows);
	if (bad) {
		cs__ipc_complete(s, t, d->user_id, CS_ERR_BAD_DESC, bad, -1, 0);
		return;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		goto out_nomem;
	atomic_init(&r->state, CS_IPC_PS_QUEUED);
	r->pull = d->op == CS_IPC_OP_PS_PULL;
	r->wrank = h->wrank;
	r->clock = d->reserved1;
	r->n = (uint32_t)d->count;
	r->rows_len = d->count * h->row_bytes;
	r->keys = malloc(CS_MAX(d->count, 1) * sizeof(uint64_t));
	r->rows = malloc(CS_MAX(r->rows_len, 1));
	if (!r->keys || !r->rows)
		goto out_nomem;
	/* one copy, then only the copy is read: the trainer may change its
	 * buffer meanwhile, the checked keys stay checked */
	if (d->count)
		memcpy(r->keys, keys, d->count * sizeof(uint64_t));
	for (uint32_t i = 0; i < r->n; i++)
		if (r->keys[i] >= h->key_max) {
			cs_ipc_ps_req_free(r);
			cs__ipc_complete(s, t, d->user_id, CS_ERR_BAD_DESC,
					 CS_IPC_BAD_PS_KEY, -1, i);
			return;
		}
	if (r->pull) {
		/* held until the rows are in: it cannot be unregistered */
		r->recv = cs__ipc_seg(s, t, d->recv_seg, d->recv_off,
				      r->rows_len, true);
		r->recv_seg = d->recv_seg;
	} else if (r->rows_len) {
		memcpy(r->rows, rows, r->rows_len);
	}
submit:
	r->t = t;
	r->group = h->group;
	r->user_id = d->user_id;
	ret = ps->ops->submit(ps->ctx, h->table, r);
	if (ret) {
		if (r->pull || r->ctl)
			cs__ipc_seg_put(s, t, r->recv_seg);
		cs_ipc_ps_req_free(r);
		cs__ipc_complete(s, t, d->user_id, ret, 0, -1, 0);
		return;
	}
	r->srv_next = ps->inflight;
	ps->inflight = r;
	return;
out_nomem:
	cs_ipc_ps_req_free(r);
	cs__ipc_complete(s, t, d->user_id, -ENOMEM, 0, -1, 0);
}

unsigned cs_ipc_ps_poll(struct cs_ipc_server *s)
{
	struct cs_ipc_ps *ps = *cs__ipc_ps_state(s);
	unsigned work = 0;

	if (!ps)
		return 0;
	if (ps->ops && ps->ops->poll)
		work += ps->ops->poll(ps->ctx);
	for (struct cs_ipc_ps_req **pp = &ps->inflight, *r; (r = *pp);) {
		struct cs__ipc_member_info mi = { .fail_status = 0 };

		if (atomic_load_explicit(&r->state, memory_order_acquire) !=
		    CS_IPC_PS_DONE) {
			/* its group failed (a local rank died, a node was
			 * lost): it ends now with the group's error, and
			 * the backend frees it once done with it */
			if (cs__ipc_member(s, r->t, r->group, &mi))
				mi.fail_status = CS_ERR_CANCELLED;
			if (!mi.fail_status) {
				pp = &r->srv_next;
				continue;
			}
			*pp = r->srv_next;
			if (r->pull || r->ctl)
				cs__ipc_seg_put(s, r->t, r->recv_seg);
			cs__ipc_complete(s, r->t, r->user_id, mi.fail_status,
					 mi.fail_detail, mi.fail_peer,
					 mi.fail_aux);
			req_orphan(r);
			work++;
			continue;
		}
		*pp = r->srv_next;
		if (r->pull || r->ctl) {
			if (!r->status && r->rows)
				memcpy(r->recv, r->rows, r->rows_len);
			cs__ipc_seg_put(s, r->t, r->recv_seg);
		}
		cs__ipc_complete(s, r->t, r->user_id, r->status, r->detail,
				 r->peer, 0);
		cs_ipc_ps_req_free(r);
		work++;
	}
	return work;
}

static int ps_create(struct cs_ipc_server *s, struct cs_ipc_ps *ps,
		     struct trainer *t, const struct cs_ipc_msg *msg,
		     uint32_t *val, char *why, size_t wl)
{
	struct cs_ipc_ps_tr **trp = cs__ipc_trainer_ps(t);
	const struct cs_ipc_ps_create *c = &msg->u.ps_create;
	struct cs__ipc_member_info mi;
	struct cs_ipc_ps_open o = { 0 };
	char name[CS_IPC_PS_NAME_MAX];
	struct ps_handle *h = NULL;
	uint32_t i;
	int ret;

	if (cs__ipc_member(s, t, c->group, &mi)) {
		snprintf(why, wl, "not a group of this trainer");
		return -EINVAL;
	}
	if (mi.fail_status) {
		snprintf(why, wl, "the group failed: %s",
			 cs_strerror(mi.fail_status));
		return mi.fail_status;
	}
	if (mi.rank < 0 || !mi.size) {
		snprintf(why, wl, "the group has no rank here yet");
		return -EINVAL;
	}
	memcpy(name, c->name, sizeof(name));
	if (!name[0] || memchr(name, 0, sizeof(name)) == NULL) {
		snprintf(why, wl, "table name empty or longer than %d bytes",
			 CS_IPC_PS_NAME_MAX - 1);
		return -EINVAL;
	}
	if (!*trp) {
		*trp = calloc(1, sizeof(**trp));
		if (!*trp)
			return -ENOMEM;
	}
	for (i = 0; i < IPC_PS_HANDLES && !h; i++)
		if (!(*trp)->h[i].used)
			h = &(*trp)->h[i];
	if (!h) {
		snprintf(why, wl, "%u tables open already", IPC_PS_HANDLES);
		return -ENOSPC;
	}
	o.group = mi.group;
	o.name = name;
	o.nonce = c->nonce;
	o.rank = (uint32_t)mi.rank;
	o.size = mi.size;
	o.local_size = mi.local_size;
	o.spec.dim = c->dim;
	o.spec.dtype = (enum cs_dtype)c->dtype;
	o.spec.key_max = c->key_max;
	o.spec.mode = (enum cs_ps_mode)c->mode;
	o.spec.staleness = c->staleness;
	o.spec.opt = (struct cs_ps_opt){ .kind = (enum cs_ps_opt_kind)c->opt,
					 .lr = c->lr,
					 .momentum = c->momentum,
					 .beta1 = c->beta1,
					 .beta2 = c->beta2,
					 .eps = c->eps,
					 .initial_acc = c->initial_acc };
	o.spec.init =
		(struct cs_ps_init){ .kind = (enum cs_ps_init_kind)c->init,
				     .seed = c->seed,
				     .scale = c->scale };
	o.mem_budget = c->mem_budget;
	ret = ps->ops->open(ps->ctx, &o, &h->table, why, wl);
	if (ret)
		return ret;
	h->used = true;
	h->group = c->group;
	h->wrank = o.rank;
	h->dim = c->dim;
	h->dtype = o.spec.dtype;
	h->key_max = c->key_max;
	h->row_bytes = (size_t)c->dim * cs_dtype_size(h->dtype);
	*val = (uint32_t)(h - (*trp)->h);
	return 0;
}

int cs_ipc_ps_msg(struct cs_ipc_server *s, struct trainer *t,
		  const struct cs_ipc_msg *msg, uint32_t *val, char *why,
		  size_t wl)
{
	struct cs_ipc_ps *ps = *cs__ipc_ps_state(s);
	struct ps_handle *h;

	if (!ps || !ps->ops) {
		snprintf(why, wl, "this sidecar has no parameter server");
		return -EOPNOTSUPP;
	}
	if (msg->type == CS_IPC_MSG_PS_CREATE)
		return ps_create(s, ps, t, msg, val, why, wl);
	h = handle_of(t, msg->u.ps_destroy.table);
	if (!h) {
		snprintf(why, wl, "no such table");
		return -ENOENT;
	}
	/* its requests in flight end (CS_ERR_CANCELLED) and complete */
	ps->ops->close(ps->ctx, h->table, h->wrank);
	memset(h, 0, sizeof(*h));
	return 0;
}

void cs_ipc_ps_trainer_gone(struct cs_ipc_server *s, struct trainer *t)
{
	struct cs_ipc_ps *ps = *cs__ipc_ps_state(s);
	struct cs_ipc_ps_tr **trp = cs__ipc_trainer_ps(t);

	if (ps) {
		for (struct cs_ipc_ps_req **pp = &ps->inflight, *r;
		     (r = *pp);) {
			if (r->t != t) {
				pp = &r->srv_next;
				continue;
			}
			*pp = r->srv_next;
			req_orphan(r);
		}
		for (uint32_t i = 0; *trp && i < IPC_PS_HANDLES; i++)
			if ((*trp)->h[i].used)
				ps->ops->close(ps->ctx, (*trp)->h[i].table,
					       (*trp)->h[i].wrank);
	}
	free(*trp);
	*trp = NULL;
}

void cs_ipc_ps_fini(struct cs_ipc_server *s)
{
	struct cs_ipc_ps **pp = cs__ipc_ps_state(s);

	if (!*pp)
		return;
	/* the trainers were dropped first: nothing is left in flight */
	for (struct cs_ipc_ps_req *r = (*pp)->inflight, *nx; r; r = nx) {
		nx = r->srv_next;
		req_orphan(r);
	}
	free(*pp);
	*pp = NULL;
}

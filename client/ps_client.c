/* SPDX-License-Identifier: MIT */
/*
 * libcollstack: parameter-server tables (collstack/ps.h). A table is opened
 * on the local sidecar by every rank of a group (CS_IPC_MSG_PS_CREATE);
 * pushes and pulls are descriptors on the trainer's submission ring, done
 * by the sidecar and waited for like any request.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "collstack/ps.h"
#include "internal/util.h"

struct cs_ps_table {
	struct cs_group *g;
	struct cs_client *c;
	uint32_t handle; /* the sidecar's */
	struct cs_ps_table_attr attr;
	size_t row_bytes;
	char name[CS_IPC_PS_NAME_MAX];
	struct cs_buf *agree; /* the attributes' allreduce */
};

cs_export void cs_ps_table_attr_init(struct cs_ps_table_attr *a, uint32_t dim,
				     uint64_t key_max, enum cs_ps_opt_kind opt)
{
	memset(a, 0, sizeof(*a));
	a->dim = dim;
	a->dtype = CS_F32;
	a->key_max = key_max;
	a->mode = CS_PS_SYNC;
	/* the engine's defaults (cs_ps_opt_defaults in collectives/ps/) */
	a->opt.kind = opt;
	a->opt.lr = 0.01f;
	a->opt.momentum = 0.9f;
	a->opt.beta1 = 0.9f;
	a->opt.beta2 = 0.999f;
	a->opt.eps = opt == CS_PS_OPT_ADAGRAD ? 1e-10f : 1e-8f;
	a->init.kind = CS_PS_INIT_ZERO;
}

static void fnv(uint64_t *h, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		*h = (*h ^ b[i]) * 0x100000001b3ull;
}

/* A hash of the name and every attribute, field by field (no padding). */
static uint64_t attr_hash(const char *name, const struct cs_ps_table_attr *a)
{
	uint64_t h = 0xcbf29ce484222325ull;
	uint32_t u[6] = { a->dim, (uint32_t)a->dtype, (uint32_t)a->mode,
			  a->staleness, (uint32_t)a->opt.kind,
			  (uint32_t)a->init.kind };
	float f[7] = { a->opt.lr, a->opt.momentum, a->opt.beta1,
		       a->opt.beta2, a->opt.eps, a->opt.initial_acc,
		       a->init.scale };

	fnv(&h, name, strlen(name));
	fnv(&h, u, sizeof(u));
	fnv(&h, f, sizeof(f));
	fnv(&h, &a->key_max, sizeof(a->key_max));
	fnv(&h, &a->init.seed, sizeof(a->init.seed));
	fnv(&h, &a->mem_budget, sizeof(a->mem_budget));
	return h >> 2; /* its negation fits an int64_t */
}

/*
 * Every rank's attributes equal? An allreduce (max) of (h, -h): both come
 * back unchanged only if every rank had the same h. It also orders every
 * rank's open before any rank's first push.
 */
static int agree(struct cs_ps_table *t)
{
	int64_t *v = cs_buf_ptr(t->agree), h = (int64_t)attr_hash(t->name,
								   &t->attr);
	cs_req_t r;
	int ret;

	v[0] = h;
	v[1] = -h;
	ret = cs_allreduce(t->g, v, v, 2, CS_I64, CS_MAX, &r);
	if (!ret)
		ret = cs_wait(t->c, r, -1);
	if (ret)
		return ret;
	if (v[0] != h || v[1] != -h) {
		cs__client_set_err(t->c,
				   "rank %d create PS table '%s' on group "
				   "'%s': another rank created it with other "
				   "attributes (or another name)",
				   cs_group_rank(t->g), t->name,
				   cs__group_name(t->g));
		return -EINVAL;
	}
	return 0;
}

static int table_close(struct cs_ps_table *t)
{
	struct cs_ipc_msg m = { .type = CS_IPC_MSG_PS_DESTROY }, r;

	m.u.ps_destroy.table = t->handle;
	return cs__client_rpc(t->c, &m, &r);
}

cs_export int cs_ps_table_create(struct cs_group *g, const char *name,
				 const struct cs_ps_table_attr *a,
				 struct cs_ps_table **out)
{
	struct cs_ipc_msg m = { .type = CS_IPC_MSG_PS_CREATE }, r;
	struct cs_ipc_ps_create *pc = &m.u.ps_create;
	struct cs_ps_table *t;
	struct cs_client *c;
	int ret;

	if (!g || !name || !a || !out)
		return -EINVAL;
	c = cs__group_client(g);
	if (!name[0] || strlen(name) >= CS_IPC_PS_NAME_MAX ||
	    !cs_dtype_size(a->dtype) || !a->dim) {
		cs__client_set_err(c,
				   "rank %d create PS table on group '%s': a "
				   "name of 1-%d bytes, dim >= 1 and a known "
				   "dtype",
				   cs_group_rank(g), cs__group_name(g),
				   CS_IPC_PS_NAME_MAX - 1);
		return -EINVAL;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->g = g;
	t->c = c;
	t->attr = *a;
	t->row_bytes = (size_t)a->dim * cs_dtype_size(a->dtype);
	strcpy(t->name, name);
	ret = cs_buf_alloc(c, 2 * sizeof(int64_t), &t->agree);
	if (ret)
		goto out_free;
	pc->group = cs__group_handle(g);
	pc->seq = cs__group_ps_seq(g);
	pc->dim = a->dim;
	pc->key_max = a->key_max;
	pc->dtype = (uint8_t)a->dtype;
	pc->mode = (uint8_t)a->mode;
	pc->opt = (uint8_t)a->opt.kind;
	pc->init = (uint8_t)a->init.kind;
	pc->staleness = a->staleness;
	pc->lr = a->opt.lr;
	pc->momentum = a->opt.momentum;
	pc->beta1 = a->opt.beta1;
	pc->beta2 = a->opt.beta2;
	pc->eps = a->opt.eps;
	pc->initial_acc = a->opt.initial_acc;
	pc->scale = a->init.scale;
	pc->seed = a->init.seed;
	pc->mem_budget = a->mem_budget;
	memcpy(pc->name, name, strlen(name) + 1);
	ret = cs__client_rpc(c, &m, &r);
	if (ret) {
		cs__client_set_err(c,
				   "rank %d create PS table '%s' on group "
				   "'%s': %s",
				   cs_group_rank(g), name, cs__group_name(g),
				   ret == -ENOTCONN ? "sidecar gone"
						    : r.u.reply.text);
		goto out_buf;
	}
	t->handle = r.u.reply.value;
	ret = agree(t);
	if (ret) {
		(void)table_close(t);
		goto out_buf;
	}
	*out = t;
	return 0;
out_buf:
	cs_buf_free(t->agree);
out_free:
	free(t);
	return ret;
}

cs_export int cs_ps_table_destroy(struct cs_ps_table *t)
{
	cs_req_t r;
	int ret, rc;

	if (!t)
		return 0;
	ret = cs_barrier(t->g, &r);
	if (!ret)
		ret = cs_wait(t->c, r, -1);
	rc = table_close(t);
	if (!ret && rc && rc != -ENOTCONN) {
		cs__client_set_err(t->c,
				   "rank %d destroy PS table '%s': the sidecar "
				   "refused: %s",
				   cs_group_rank(t->g), t->name,
				   cs_strerror(rc));
		ret = rc;
	}
	cs_buf_free(t->agree);
	free(t);
	return ret;
}

static int ps_post(struct cs_ps_table *t, uint8_t op, uint64_t clock,
		   const uint64_t *keys, size_t n, const void *rows,
		   cs_req_t *req)
{
	struct cs_ipc_sqe d = { .op = op, .count = n, .reserved1 = clock };

	if (!t || !req)
		return -EINVAL;
	d.group = t->handle;
	d.dtype = (uint8_t)t->attr.dtype;
	d.root = t->attr.dim;
	return cs__client_post_bufs(t->g, &d, keys, n * sizeof(*keys), rows,
				    n * t->row_bytes, req);
}

cs_export int cs_ps_push(struct cs_ps_table *t, uint64_t version,
			 const uint64_t *keys, const void *rows, size_t n,
			 cs_req_t *req)
{
	return ps_post(t, CS_IPC_OP_PS_PUSH, version, keys, n, rows, req);
}

cs_export int cs_ps_pull(struct cs_ps_table *t, uint64_t clock,
			 const uint64_t *keys, size_t n, void *rows,
			 cs_req_t *req)
{
	return ps_post(t, CS_IPC_OP_PS_PULL, clock, keys, n, rows, req);
}

cs_export uint32_t cs_ps_table_dim(const struct cs_ps_table *t)
{
	return t->attr.dim;
}

cs_export enum cs_dtype cs_ps_table_dtype(const struct cs_ps_table *t)
{
	return t->attr.dtype;
}

cs_export size_t cs_ps_table_row_bytes(const struct cs_ps_table *t)
{
	return t->row_bytes;
}

uint32_t cs__ps_table_handle(const struct cs_ps_table *t)
{
	return t->handle;
}

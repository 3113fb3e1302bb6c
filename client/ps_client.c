/* SPDX-License-Identifier: MIT */
/*
 * libcollstack: parameter-server tables (collstack/ps.h). A table is opened
 * on the local sidecar by every rank of a group (CS_IPC_MSG_PS_CREATE);
 * pushes and pulls are descriptors on the trainer's submission ring, done
 * by the sidecar and waited for like any request.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "client_internal.h"
#include "client_internal_strategy.h"
#include "collstack/ps.h"
#include "internal/util.h"

struct cs_ps_table {
	struct cs_group *g;
	struct cs_client *c;
	uint32_t handle; /* the sidecar's */
	struct cs_ps_table_attr attr;
	size_t row_bytes;
	char name[CS_IPC_PS_NAME_MAX];
	/* the ranks' allreduces at create; a checkpoint's or restore's
	 * result (at 0) and directory (at PS_CTL_PATH_OFF) */
	struct cs_buf *agree;
	uint64_t clock; /* restored at (cs_ps_table_restore()) */
	bool ctl_busy; /* a checkpoint or restore not finished yet */
};

#define PS_CTL_PATH_OFF 64u
#define PS_AGREE_BYTES (PS_CTL_PATH_OFF + CS_IPC_PS_PATH_MAX)

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
	uint32_t u[6] = {
		a->dim,	      (uint32_t)a->dtype,    (uint32_t)a->mode,
		a->staleness, (uint32_t)a->opt.kind, (uint32_t)a->init.kind
	};
	float f[7] = { a->opt.lr,    a->opt.momentum, a->opt.beta1,
		       a->opt.beta2, a->opt.eps,      a->opt.initial_acc,
		       a->init.scale };

	fnv(&h, name, strlen(name));
	fnv(&h, u, sizeof(u));
	fnv(&h, f, sizeof(f));
	fnv(&h, &a->key_max, sizeof(a->key_max));
	fnv(&h, &a->init.seed, sizeof(a->init.seed));
	fnv(&h, &a->mem_budget, sizeof(a->mem_budget));
	return h >> 2; /* its negation fits an int64_t */
}

/* An allreduce (max) of @n int64 on the table's group, waited for. */
static int all_max(struct cs_ps_table *t, int64_t *v, size_t n)
{
	int64_t *b = cs_buf_ptr(t->agree);
	cs_req_t r;
	int ret;

	memcpy(b, v, n * sizeof(*v));
	ret = cs_allreduce(t->g, b, b, n, CS_I64, CS_MAX, &r);
	if (!ret)
		ret = cs_wait(t->c, r, -1);
	memcpy(v, b, n * sizeof(*v));
	return ret;
}

/*
 * Before the open: every rank's attributes equal? An allreduce (max) of
 * (nonce, h, -h): h and -h come back unchanged on every rank only if every
 * rank had the same h, and the largest nonce names this incarnation of
 * the table (its flow's op id on every node: a table created again gets
 * another, so nothing of the old one's frames can reach it).
 */
static int agree(struct cs_ps_table *t, uint32_t *nonce)
{
	int64_t h = (int64_t)attr_hash(t->name, &t->attr), v[3];
	uint32_t x;
	int ret;

	if (getrandom(&x, sizeof(x), GRND_NONBLOCK) != sizeof(x))
		x = (uint32_t)time(NULL) ^ ((uint32_t)getpid() << 16);
	v[0] = x;
	v[1] = h;
	v[2] = -h;
	ret = all_max(t, v, 3);
	if (ret)
		return ret;
	if (v[1] != h || v[2] != -h) {
		cs__client_set_err(t->c,
				   "rank %d create PS table '%s' on group "
				   "'%s': another rank created it with other "
				   "attributes (or another name)",
				   cs_group_rank(t->g), t->name,
				   cs__group_name(t->g));
		return -EINVAL;
	}
	*nonce = (uint32_t)v[0];
	return 0;
}

static int table_close(struct cs_ps_table *t)
{
	struct cs_ipc_msg m = { .type = CS_IPC_MSG_PS_DESTROY }, r;

	m.u.ps_destroy.table = t->handle;
	return cs__client_rpc(t->c, &m, &r);
}

/*
 * Whether @c's sidecar serves PS tables, asked locally (no collective): a
 * destroy of a handle no table has is refused with -EOPNOTSUPP by a
 * sidecar without a parameter server and with -ENOENT by one with it.
 * Returns 0, -EOPNOTSUPP (@why says so), or -ENOTCONN.
 */
int cs__ps_probe(struct cs_client *c, char *why, size_t whylen)
{
	struct cs_ipc_msg m = { .type = CS_IPC_MSG_PS_DESTROY }, r;
	int ret;

	m.u.ps_destroy.table = UINT32_MAX;
	ret = cs__client_rpc(c, &m, &r);
	if (ret == -EOPNOTSUPP)
		snprintf(why, whylen, "%s", r.u.reply.text);
	else if (ret == -ENOTCONN)
		snprintf(why, whylen, "sidecar gone");
	return ret == -ENOENT || !ret ? 0 : ret;
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
	ret = cs_buf_alloc(c, PS_AGREE_BYTES, &t->agree);
	if (ret)
		goto out_free;
	ret = agree(t, &pc->nonce);
	if (ret)
		goto out_buf;
	pc->group = cs__group_handle(g);
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
	if (ret)
		cs__client_set_err(c,
				   "rank %d create PS table '%s' on group "
				   "'%s': %s",
				   cs_group_rank(g), name, cs__group_name(g),
				   ret == -ENOTCONN ? "sidecar gone"
						    : r.u.reply.text);
	t->handle = r.u.reply.value;
	/* every rank opened it (so a push finds every shard), or none
	 * keeps it: (failed here, failed somewhere) */
	{
		int64_t v = ret != 0;
		int rc = all_max(t, &v, 1);

		if (!ret && (rc || v)) {
			(void)table_close(t);
			if (rc)
				ret = rc;
			else {
				ret = -EIO;
				cs__client_set_err(
					c,
					"rank %d create PS table "
					"'%s' on group '%s': another "
					"rank's sidecar refused it",
					cs_group_rank(g), name,
					cs__group_name(g));
			}
		}
	}
	if (ret)
		goto out_buf;
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

/* ---- checkpoint and restore ------------------------------------------------
 */

/* One cs_ps_checkpoint() or cs_ps_table_restore() in stages. */
struct ps_ctl_op {
	struct cs_ps_table *t;
	uint8_t op; /* CS_IPC_OP_PS_CKPT or _RESTORE */
	unsigned stage;
	size_t plen; /* the directory's bytes, NUL included */
};

enum { CTL_BARRIER, CTL_SHARD, CTL_AGREE, CTL_DONE };

/*
 * The stages (client lock held): a barrier (checkpoint only: every rank's
 * earlier pushes were taken by their shards before any shard starts its
 * snapshot), this node's shard (the sidecar lets the lowest local rank
 * drive it and answers the others at once), then an allreduce (max) of
 * the results, so that every rank ends with every shard's outcome.
 */
static int ctl_next(void *arg, cs_req_t *sub)
{
	struct ps_ctl_op *o = arg;
	struct cs_ps_table *t = o->t;
	uint8_t *b = cs_buf_ptr(t->agree);
	struct cs_ipc_sqe d = { .group = cs__group_handle(t->g) };
	int ret;

	switch (o->stage++) {
	case CTL_BARRIER:
		d.op = CS_IPC_OP_BARRIER;
		ret = cs__client_post_bufs_locked(t->g, &d, NULL, 0, NULL, 0,
						  sub);
		break;
	case CTL_SHARD:
		d.op = o->op;
		d.group = t->handle;
		d.count = o->plen;
		ret = cs__client_post_bufs_locked(t->g, &d, b + PS_CTL_PATH_OFF,
						  o->plen, b,
						  CS_IPC_PS_CTL_RESULT, sub);
		break;
	case CTL_AGREE:
		d.op = CS_IPC_OP_ALLREDUCE;
		d.dtype = CS_I64;
		d.redop = CS_MAX;
		d.count = CS_IPC_PS_CTL_RESULT / sizeof(int64_t);
		ret = cs__client_post_bufs_locked(t->g, &d, b,
						  CS_IPC_PS_CTL_RESULT, b,
						  CS_IPC_PS_CTL_RESULT, sub);
		break;
	default:
		return 0;
	}
	return ret ? ret : 1;
}

static const char *ctl_why(int err, bool ckpt)
{
	switch (err) {
	case EINVAL:
		return ckpt ? "the table's name is not a file name (a '/' "
			      "in it)"
			    : "the file is another table's (its dim, dtype, "
			      "key range or optimizer differ)";
	case EBADMSG:
		return "the file is damaged (its header, size or a checksum "
		       "is wrong)";
	case EBUSY:
		return "a checkpoint of this table is already running";
	case EEXIST:
		return "the table is not empty (restore right after create, "
		       "before any push)";
	default:
		return strerror(err);
	}
}

/* Why a restore refused a file (the sidecar's enum cs_ps_restore_why,
 * collectives/ps/ps_io.h), in words; NULL: the errno says it. */
static const char *restore_why(unsigned why)
{
	switch (why) {
	case 2: /* CS_PS_RS_MISSING */
		return "No such file or directory: the checkpoint's file of "
		       "that shard is missing (not a complete set of shards)";
	case 3: /* CS_PS_RS_DAMAGED */
		return "the file is damaged (its header, size or a checksum "
		       "is wrong)";
	case 4: /* CS_PS_RS_OTHER_TABLE */
		return "the file is another table's (a table of another name)";
	case 5: /* CS_PS_RS_SPEC */
		return "the file is another table's (its dim, dtype, row size, "
		       "key range or optimizer differ)";
	case 6: /* CS_PS_RS_CLOCK */
		return "its clock differs from shard 0's file: not one "
		       "checkpoint";
	case 7: /* CS_PS_RS_SET */
		return "it is not of the checkpoint's set of shards (another "
		       "shard count or number, or rows of another shard)";
	default:
		return NULL;
	}
}

/* The request ended: every shard's outcome, or the stage that failed. */
static int ctl_fin(void *arg, int status, char *err, size_t len)
{
	struct ps_ctl_op *o = arg;
	struct cs_ps_table *t = o->t;
	const struct cs_ipc_ps_ctl_result *v = cs_buf_ptr(t->agree);
	bool ckpt = o->op == CS_IPC_OP_PS_CKPT;
	const char *dir = (const char *)cs_buf_ptr(t->agree) + PS_CTL_PATH_OFF;
	char what[CS_IPC_PS_PATH_MAX + 128], part[256];

	snprintf(what, sizeof(what), "rank %d %s of PS table '%s' %s '%s'",
		 cs_group_rank(t->g), ckpt ? "checkpoint" : "restore", t->name,
		 ckpt ? "to" : "from", dir);
	if (status) {
		snprintf(part, sizeof(part), "%s", err);
		snprintf(err, len, "%s: %s", what, part);
	} else if (v->err) {
		uint64_t x = (uint64_t)v->err >> 32;
		int e = (int)(x & 0xff);
		unsigned file = (unsigned)(x >> 8) & 0xffff;
		const char *why =
			ckpt ? NULL : restore_why((unsigned)(x >> 24));

		if (why)
			snprintf(err, len, "%s: node %u: %s (file of shard %u)",
				 what, (uint32_t)(v->err & 0xffffffff), why,
				 file);
		else
			snprintf(err, len, "%s: node %u: %s", what,
				 (uint32_t)(v->err & 0xffffffff),
				 ctl_why(e, ckpt));
		status = -e;
	} else if (!ckpt && v->clock != -v->nclock) {
		snprintf(err, len,
			 "%s: the shards' files are of different clocks "
			 "(%lld to %lld): not one checkpoint (create the table "
			 "again)",
			 what, (long long)-v->nclock, (long long)v->clock);
		status = -EBADMSG;
	} else if (!ckpt) {
		t->clock = (uint64_t)v->clock;
	}
	t->ctl_busy = false;
	free(o);
	return status;
}

static int ctl_post(struct cs_ps_table *t, uint8_t op, const char *dir,
		    cs_req_t *req)
{
	struct ps_ctl_op *o;
	size_t plen;
	int ret;

	if (!t || !dir || !req)
		return -EINVAL;
	plen = strlen(dir) + 1;
	if (plen < 2 || plen > CS_IPC_PS_PATH_MAX) {
		cs__client_set_err(t->c,
				   "rank %d %s of PS table '%s': a directory "
				   "of 1-%u bytes",
				   cs_group_rank(t->g),
				   op == CS_IPC_OP_PS_CKPT ? "checkpoint"
							   : "restore",
				   t->name, CS_IPC_PS_PATH_MAX - 1);
		return plen < 2 ? -EINVAL : -ENAMETOOLONG;
	}
	if (t->ctl_busy) {
		cs__client_set_err(t->c,
				   "rank %d %s of PS table '%s': a checkpoint "
				   "or restore of it is still running (wait "
				   "for it first)",
				   cs_group_rank(t->g),
				   op == CS_IPC_OP_PS_CKPT ? "checkpoint"
							   : "restore",
				   t->name);
		return -EBUSY;
	}
	o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	o->t = t;
	o->op = op;
	o->plen = plen;
	o->stage = op == CS_IPC_OP_PS_CKPT ? CTL_BARRIER : CTL_SHARD;
	memcpy((uint8_t *)cs_buf_ptr(t->agree) + PS_CTL_PATH_OFF, dir, plen);
	t->ctl_busy = true;
	ret = cs__comp_stages(t->c, ctl_next, ctl_fin, o, req);
	if (ret) {
		t->ctl_busy = false;
		free(o);
	}
	return ret;
}

cs_export int cs_ps_checkpoint(struct cs_ps_table *t, const char *dir,
			       cs_req_t *req)
{
	return ctl_post(t, CS_IPC_OP_PS_CKPT, dir, req);
}

cs_export int cs_ps_table_restore(struct cs_ps_table *t, const char *dir,
				  cs_req_t *req)
{
	return ctl_post(t, CS_IPC_OP_PS_RESTORE, dir, req);
}

cs_export uint64_t cs_ps_table_clock(const struct cs_ps_table *t)
{
	return t->clock;
}

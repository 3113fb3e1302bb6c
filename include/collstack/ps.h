/* SPDX-License-Identifier: MIT */
/*
 * collstack parameter server: the trainer API (libcollstack).
 *
 * The types in the first half are shared with the engines in
 * collectives/ps/ (they are what a table is). The functions of the second
 * half create tables on a group, push sparse gradients and pull rows
 * through the local sidecar, which carries them to the owning shards on
 * its transport core (docs/ps.md, "Trainer API"); cs_ps_checkpoint() writes
 * every shard to a file and cs_ps_table_restore() loads a new table from
 * them. A table with a memory budget keeps its cold rows in a spill file
 * of the sidecar's ps.spill_dir.
 *
 *	struct cs_ps_table_attr a;
 *	struct cs_ps_table *t;
 *
 *	cs_ps_table_attr_init(&a, 16, 1000000, CS_PS_OPT_ADAGRAD);
 *	cs_ps_table_create(g, "emb", &a, &t);
 *	// keys and grads inside cs_bufs
 *	cs_ps_push(t, step, keys, grads, n, &r);
 *	cs_wait(c, r, -1);
 *	cs_ps_pull(t, step + 1, keys, n, rows, &r);
 *	cs_wait(c, r, -1);
 */
#ifndef COLLSTACK_PS_H
#define COLLSTACK_PS_H

#include <stdint.h>

#include <collstack/collstack.h>
#include <collstack/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Update mode of a table. Values are part of the checkpoint layout. */
enum cs_ps_mode {
	CS_PS_SYNC = 0, /* version v applied once every worker pushed v */
	CS_PS_ASYNC = 1, /* applied on arrival, pulls never wait */
	CS_PS_SSP = 2, /* applied on arrival; a pull at clock t waits while
			* any worker has completed fewer than t - s versions */
};

/* Server-side optimizer. Values are part of the checkpoint layout. */
enum cs_ps_opt_kind {
	CS_PS_OPT_SGD = 0,
	CS_PS_OPT_MOMENTUM = 1,
	CS_PS_OPT_ADAGRAD = 2,
	CS_PS_OPT_ADAM = 3,
	CS_PS_OPT_COUNT
};

/* Initial value of rows that do not exist yet. */
enum cs_ps_init_kind {
	CS_PS_INIT_ZERO = 0,
	CS_PS_INIT_CONST = 1, /* every value = scale */
	CS_PS_INIT_UNIFORM = 2, /* U(-scale, scale) from (seed, key, index) */
	CS_PS_INIT_COUNT
};

struct cs_ps_opt {
	enum cs_ps_opt_kind kind;
	float lr;
	float momentum; /* momentum */
	float beta1, beta2; /* adam */
	float eps; /* adagrad, adam */
	float initial_acc; /* adagrad: accumulator start value */
};

struct cs_ps_init {
	enum cs_ps_init_kind kind;
	uint64_t seed;
	float scale;
};

/* ---- the trainer API (libcollstack; docs/ps.md "Trainer API") ------- */

struct cs_group;
struct cs_ps_table;

/**
 * struct cs_ps_table_attr - a table as the trainer describes it
 * @dim: values per row
 * @dtype: CS_F32, CS_F64, CS_F16 or CS_BF16 (rows are stored and carried
 *	in this type; the optimizer computes in f32)
 * @key_max: keys are 0 .. key_max - 1
 * @mode: update mode; @staleness: s of CS_PS_SSP
 * @opt: server-side optimizer (cs_ps_table_attr_init() sets the
 *	defaults of its kind)
 * @init: initializer of rows never pushed
 * @mem_budget: bytes of rows (values and optimizer state) each shard
 *	keeps in memory, the rest in a spill file in the sidecar's
 *	ps.spill_dir (read back with io_uring); 0: all in memory. At least
 *	64 rows (cs_ps_frame_bytes() each, collectives/ps/ps.h)
 */
struct cs_ps_table_attr {
	uint32_t dim;
	enum cs_dtype dtype;
	uint64_t key_max;
	enum cs_ps_mode mode;
	uint32_t staleness;
	struct cs_ps_opt opt;
	struct cs_ps_init init;
	uint64_t mem_budget;
};

/**
 * cs_ps_table_attr_init - fill @a with a table of @dim f32 values per row,
 *	keys below @key_max, sync, SGD (lr 0.01), zero initializer
 * @a: out
 * @dim: values per row
 * @key_max: keys are 0 .. @key_max - 1
 * @opt: the optimizer kind (its default parameters: lr 0.01, momentum
 *	0.9, adam 0.9 / 0.999, eps 1e-8 (adam) / 1e-10 (adagrad))
 */
void cs_ps_table_attr_init(struct cs_ps_table_attr *a, uint32_t dim,
			   uint64_t key_max, enum cs_ps_opt_kind opt);

/**
 * cs_ps_table_create - create a table, collectively
 * @g: the group: every rank calls it, in the same order as its other
 *	operations on @g, with the same @name and @attr; each rank is a
 *	worker of the table (worker rank = group rank)
 * @name: the table's name (1-31 bytes)
 * @attr: what it is
 * @out: the table
 *
 * The key space is sharded by consistent hashing over the sidecars of the
 * group's nodes (over this node alone for a group whose ranks are all
 * here). Completes an allreduce of the attributes on @g: on return every
 * rank has created it, so pushes may start at once.
 * Returns: 0, -EINVAL (bad attribute, or another rank's differ: the table
 * is not created; also a @attr->mem_budget of fewer than 64 rows),
 * -EOPNOTSUPP (the sidecar has no parameter server), -ENOENT / -ENOTDIR /
 * -EACCES (a budget, and the sidecar's ps.spill_dir is missing or not
 * writable), -ENOTSUP (a budget, and no liburing in the sidecar),
 * -EMSGSIZE (a row does not fit a frame),
 * -ENOSPC, or the group's error; cs_errmsg() says which.
 */
int cs_ps_table_create(struct cs_group *g, const char *name,
		       const struct cs_ps_table_attr *attr,
		       struct cs_ps_table **out);

/**
 * cs_ps_table_destroy - close the table, collectively (a barrier on the
 *	group first, so that no rank still pushes to this node's shard)
 * @t: table (may be NULL); freed in every case
 *
 * Requests still in flight end with CS_ERR_CANCELLED. Once no rank of a
 * node holds the table, that node's shard is gone.
 * Returns: 0, or the barrier's error.
 */
int cs_ps_table_destroy(struct cs_ps_table *t);

/**
 * cs_ps_push - post sparse gradients for one version
 * @t: table
 * @version: this worker's clock (0, 1, 2 ...; sync and ssp: every worker
 *	pushes every version, with @n 0 where it has no key)
 * @keys: @n keys inside a cs_buf; duplicates are summed on the worker
 * @rows: @n rows of the table's dtype and dim inside a cs_buf
 * @n: keys (0: an empty version)
 * @req: out: completes (cs_wait) once every owning shard took the push;
 *	CS_ERR_PEER_LOST when a shard's node stopped answering (cs_errmsg()
 *	names it)
 *
 * The keys and rows are copied when the sidecar takes the request: the
 * buffers may be reused once it completed. A push is applied exactly
 * once, whatever the network did to it.
 * Returns: 0, -EFAULT (a buffer outside this client's), -EAGAIN, -ENOTCONN.
 */
int cs_ps_push(struct cs_ps_table *t, uint64_t version, const uint64_t *keys,
	       const void *rows, size_t n, cs_req_t *req);

/**
 * cs_ps_pull - post a read of rows
 * @t: table
 * @clock: this worker's clock (sync: answered once versions < @clock are
 *	applied everywhere; ssp: once every worker completed @clock - s;
 *	async: at once)
 * @keys: @n keys inside a cs_buf (at least one)
 * @n: keys
 * @rows: @n rows inside a cs_buf, written before completion
 * @req: out
 *
 * A request that is not answered within the sidecar's coll.deadline ends
 * with CS_ERR_TIMEOUT (a sync pull waits for every worker's pushes).
 * Returns: as cs_ps_push().
 */
int cs_ps_pull(struct cs_ps_table *t, uint64_t clock, const uint64_t *keys,
	       size_t n, void *rows, cs_req_t *req);

/**
 * cs_ps_checkpoint - write the table to files, collectively
 * @t: table: every rank of its group calls it (in the same order as its
 *	other operations on the group, none of which may be posted until
 *	this one completed)
 * @dir: an existing, writable directory, the same on every rank (a shared
 *	file system is not needed: each node writes its own shard)
 * @req: out: completes (cs_wait) once every shard's file is in place, or
 *	on every rank with a failed shard's error (the largest errno of
 *	those that failed; cs_errmsg() names the directory, the node and
 *	the reason: -ENOENT, -ENOTDIR, -EACCES ... for @dir, -EBUSY)
 *
 * A barrier first: the checkpoint holds every push completed by any rank
 * before every rank called it (sync: the versions complete by then; pull
 * at the next clock first to make sure they were applied). Then the lowest
 * rank of each node drives its node's shard: the sidecar copies it out in
 * paced steps on the lcore that serves the table (at most ps.ckpt_share
 * of its time) while pushes and pulls go on, and a writer thread writes
 * <dir>/<table name>.shard<S>.ckpt (S: the shard, the node of a group
 * spanning nodes, 0 for a group on one node) as <file>.tmp, fsyncs it and
 * renames it into place; a failure leaves the previous file. A push
 * posted before the request completed may or may not be in it. @t must
 * not be destroyed before it completed.
 * Returns: 0, -EBUSY (this rank's previous checkpoint or restore of @t has
 * not completed), -EINVAL, -ENAMETOOLONG, -EAGAIN, -ENOTCONN.
 */
int cs_ps_checkpoint(struct cs_ps_table *t, const char *dir, cs_req_t *req);

/**
 * cs_ps_table_restore - load a new table from cs_ps_checkpoint()'s files,
 *	collectively
 * @t: a table just created (no push or pull yet) with the attributes of
 *	the one checkpointed; its group may have another size and span
 *	other nodes (a group re-formed after a node was lost, a larger one):
 *	each shard loads the rows it owns under the new shard map from
 *	every file of the checkpoint, optimizer state included
 * @dir: where the files are
 * @req: out: completes once every shard is loaded, or with a failed
 *	shard's error, as cs_ps_checkpoint(): -ENOENT (a shard's file is
 *	missing: not a complete set), -EINVAL (a file of another table: its
 *	name, dim, dtype, row size, key range or optimizer), -EBADMSG (a
 *	damaged file, or files not of one checkpoint: another clock than
 *	shard 0's, another shard count, rows of another shard), -EEXIST
 *	(the table has rows already); cs_errmsg() names the directory, the
 *	node, the reason and the file's shard
 *
 * Every file is checked before a row is loaded: a refused set loads
 * nothing on that shard; other shards may have loaded theirs: destroy
 * the table and create it again. After it completed,
 * cs_ps_table_clock() is the checkpoint's clock: in sync and ssp, workers
 * push versions from there on.
 * Returns: as cs_ps_checkpoint().
 */
int cs_ps_table_restore(struct cs_ps_table *t, const char *dir, cs_req_t *req);

/* The clock @t was restored at (0 for a table not restored). */
uint64_t cs_ps_table_clock(const struct cs_ps_table *t);

/* Values per row, element type and bytes per row of @t. */
uint32_t cs_ps_table_dim(const struct cs_ps_table *t);
enum cs_dtype cs_ps_table_dtype(const struct cs_ps_table *t);
size_t cs_ps_table_row_bytes(const struct cs_ps_table *t);

#ifdef __cplusplus
}
#endif

#endif

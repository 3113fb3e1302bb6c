/* SPDX-License-Identifier: MIT */
/*
 * collstack parameter server: trainer API — A SKETCH, NOT YET WIRED.
 *
 * The types in the first half are real and shared with the engines in
 * collectives/ps/ (they are what a table is). The functions in the second
 * half are the API the trainer will get once the PS engines are plugged
 * into the transport core and the sidecar's IPC: today NO library exports
 * them, and a program calling them does not link. The header is not
 * installed. See docs/ps.md for what is built and what is missing.
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

/* ---- not yet wired: no library exports what follows -------------------- */

struct cs_group;
struct cs_ps_table;

/**
 * struct cs_ps_table_attr - a table as the trainer describes it
 * @dim: values per row
 * @dtype: CS_F32, CS_F64, CS_F16 or CS_BF16
 * @key_max: keys are 0 .. key_max - 1
 * @mode: update mode; @staleness: s of CS_PS_SSP
 * @opt: server-side optimizer
 * @init: initializer
 * @mem_budget: bytes of rows a server shard keeps in memory (0: all);
 *	beyond it cold rows go to the sidecar's spill file (ps.spill_dir)
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
 * cs_ps_table_create - create (or join) a table, collectively
 * @g: the workers (every rank calls it with the same @name and @attr)
 * @name: the table's name
 * @attr: what it is
 * @out: the table
 *
 * The key space is sharded over the group's server sidecars by consistent
 * hashing (a sidecar started as a worker only holds no shard).
 * Returns: 0, -EINVAL (bad attribute, or another rank's differs).
 */
int cs_ps_table_create(struct cs_group *g, const char *name,
		       const struct cs_ps_table_attr *attr,
		       struct cs_ps_table **out);
int cs_ps_table_destroy(struct cs_ps_table *t);

/**
 * cs_ps_push - post sparse gradients for one version
 * @t: table
 * @version: this worker's clock (0, 1, 2 ...)
 * @keys: @n keys inside a cs_buf; duplicates are summed on the worker
 * @rows: @n rows of the table's dtype inside a cs_buf
 * @req: out: completes (cs_wait) once every owning shard took the push;
 *	CS_ERR_PEER_LOST when a shard is lost (cs_lost_node names it)
 *
 * A push is applied exactly once, whatever the network did to it.
 */
int cs_ps_push(struct cs_ps_table *t, uint64_t version, const uint64_t *keys,
	       const void *rows, size_t n, cs_req_t *req);

/**
 * cs_ps_pull - post a read of rows
 * @clock: this worker's clock (sync: answered once versions < @clock are
 *	applied everywhere; ssp: once every worker completed @clock - s)
 * @keys: @n keys inside a cs_buf; @rows: @n rows written before completion
 */
int cs_ps_pull(struct cs_ps_table *t, uint64_t clock, const uint64_t *keys,
	       size_t n, void *rows, cs_req_t *req);

/**
 * cs_ps_checkpoint - every shard writes its part of the table to its
 *	sidecar's ps.checkpoint_dir (atomically, off the dataplane)
 */
int cs_ps_checkpoint(struct cs_ps_table *t, cs_req_t *req);

#ifdef __cplusplus
}
#endif

#endif

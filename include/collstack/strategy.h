/* SPDX-License-Identifier: MIT */
/*
 * Strategies: how a parameter group's gradients are exchanged, chosen per
 * group and switchable between steps.
 *
 * A strategy is a small ops table. Built-ins are registered when the
 * library loads; others come from shared objects (cs_strategy_load()) that
 * export CS_STRATEGY_PLUGIN_SYMBOL. A job (struct cs_strat_job) holds the
 * parameter groups of one trainer, each with its current strategy:
 *
 *	cs_strat_job_open(c, g, &j);
 *	cs_strat_job_config(j, "strategies.conf");  // plugin + group lines
 *	for (step = 0; ; step++) {
 *		if (want_ps)
 *			cs_strat_job_request(j, emb, "ps");
 *		cs_strat_job_step(j, step);	    // every rank, every step
 *		cs_strat_job_exchange(j, dense, grads, n, CS_F32);
 *		...
 *	}
 *
 * cs_strat_job_step() agrees on switches: the requests of every rank go
 * into a small control vector that is allreduced (max) through the group,
 * so every rank switches the same group at the same step, whichever rank
 * asked. The vector also carries the step number, so ranks that are not
 * at the same step are told so instead of mixing steps.
 *
 * Built-ins: "allreduce" (cs_allreduce, sum; the sidecar picks direct,
 * ring or two-level), "rs-ag" (cs_reduce_scatter then cs_all_gather: the
 * same sum in two operations), "local" (no exchange: for parameters that
 * live on one rank only), "ps" (the sum through a parameter-server table
 * of the group: only rows that are not all zero are pushed; f32, f16,
 * bf16; refused at open where the sidecar has no parameter server).
 * "alltoall" (the sum as two cs_alltoall()s: each rank sums its block of
 * every rank's gradient, then every sum goes to every rank; f32, f64,
 * i32, i64).
 */
#ifndef COLLSTACK_STRATEGY_H
#define COLLSTACK_STRATEGY_H

#include <stddef.h>
#include <stdint.h>

#include <collstack/collstack.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of struct cs_strategy_ops; a plug-in built for another is refused. */
#define CS_STRATEGY_ABI 1
/* What a plug-in exports: const struct cs_strategy_ops *NAME(void). */
#define CS_STRATEGY_PLUGIN_SYMBOL "cs_strategy_plugin"
#define CS_STRATEGY_NAME_MAX 32

/**
 * struct cs_strategy_ctx - what a strategy works with
 * @client: the trainer's connection
 * @group: the communication group of the job
 * @rank: this trainer's rank in @group
 * @size: ranks in @group
 * @param_group: the parameter group's name
 */
struct cs_strategy_ctx {
	struct cs_client *client;
	struct cs_group *group;
	int rank, size;
	const char *param_group;
};

/**
 * struct cs_strategy_ops - one strategy
 * @abi: CS_STRATEGY_ABI
 * @name: unique, at most CS_STRATEGY_NAME_MAX - 1 characters
 * @help: one line
 * @open: set up for a parameter group (state through @state); may refuse
 *	with a negative error and a reason in @why
 * @exchange: exchange @count elements of @grad in place (inside a buffer
 *	of cs_buf_alloc()); every rank ends with the same values
 * @close: release @state (may be NULL)
 */
struct cs_strategy_ops {
	uint32_t abi;
	const char *name;
	const char *help;
	int (*open)(const struct cs_strategy_ctx *ctx, void **state, char *why,
		    size_t whylen);
	int (*exchange)(void *state, const struct cs_strategy_ctx *ctx,
			void *grad, size_t count, enum cs_dtype dtype,
			char *why, size_t whylen);
	void (*close)(void *state);
};

/**
 * cs_strategy_register - add @ops to the process's registry
 * Returns: 0, -EINVAL (bad table or ABI), -EEXIST (name taken), -ENOSPC.
 */
int cs_strategy_register(const struct cs_strategy_ops *ops);

/**
 * cs_strategy_load - dlopen() @path and register the strategy it exports
 *	(loading the same object again is not an error)
 * @path: shared object
 * @out: out (may be NULL), the strategy
 * @why: room for the reason of a failure (dlerror(), ABI, name)
 * @whylen: its size
 * Returns: 0, -ENOENT (cannot be loaded), -EINVAL (no or bad table),
 *	-EEXIST (name taken).
 */
int cs_strategy_load(const char *path, const struct cs_strategy_ops **out,
		     char *why, size_t whylen);

/** cs_strategy_find - the registered strategy named @name, or NULL */
const struct cs_strategy_ops *cs_strategy_find(const char *name);

/**
 * cs_strategy_list - up to @max registered strategies into @out
 * Returns: how many are registered (may exceed @max).
 */
unsigned cs_strategy_list(const struct cs_strategy_ops **out, unsigned max);

struct cs_strat_job;

/* Parameter groups of a job. */
#define CS_STRAT_MAX_GROUPS 64

/**
 * cs_strat_job_open - a job over group @g of client @c
 * Returns: 0, -EINVAL, -ENOMEM, or cs_buf_alloc()'s error.
 */
int cs_strat_job_open(struct cs_client *c, struct cs_group *g,
		      struct cs_strat_job **out);

/** cs_strat_job_close - close every group's strategy and free @j */
void cs_strat_job_close(struct cs_strat_job *j);

/**
 * cs_strat_job_add - a parameter group @name using @strategy
 * @index: out (may be NULL), the group's index
 * Returns: 0, -EEXIST, -ENOSPC, -ENOENT (no such strategy), or the
 *	strategy's refusal (cs_strat_job_errmsg() says why).
 */
int cs_strat_job_add(struct cs_strat_job *j, const char *name,
		     const char *strategy, unsigned *index);

/**
 * cs_strat_job_config - read a strategy file: one directive a line,
 *	'#' comments, blank lines ignored:
 *	    plugin PATH             load a strategy from a shared object
 *	    group NAME STRATEGY     a parameter group and its strategy
 * Returns: 0, or the first error (cs_strat_job_errmsg() names the file
 *	and line).
 */
int cs_strat_job_config(struct cs_strat_job *j, const char *path);

/**
 * cs_strat_job_find - index of the parameter group @name
 * Returns: the index, or -ENOENT.
 */
int cs_strat_job_find(const struct cs_strat_job *j, const char *name);

/**
 * cs_strat_job_request - ask to switch group @index to @strategy at the
 *	next cs_strat_job_step() (of every rank)
 * Returns: 0, -EINVAL, -ENOENT (no such strategy here).
 */
int cs_strat_job_request(struct cs_strat_job *j, unsigned index,
			 const char *strategy);

/**
 * cs_strat_job_step - start step @step: agree on switches with the group
 * @j: the job
 * @step: the step every rank is at
 *
 * Collective: every rank of the group calls it once per step, before
 * that step's exchanges. A switch that every rank agreed on but whose new
 * strategy refuses to open leaves the group on its old strategy and
 * returns the refusal (on every rank: they all try the same switch).
 *
 * Returns: 0; CS_ERR_BAD_DESC when ranks are at different steps or a
 *	requested strategy is unknown on this rank; the new strategy's
 *	refusal; an error of the control allreduce.
 */
int cs_strat_job_step(struct cs_strat_job *j, uint64_t step);

/**
 * cs_strat_job_exchange - exchange @count elements of @grad with group
 *	@index's current strategy
 * Returns: 0 or the strategy's error (cs_strat_job_errmsg()).
 */
int cs_strat_job_exchange(struct cs_strat_job *j, unsigned index, void *grad,
			  size_t count, enum cs_dtype dtype);

/** cs_strat_job_current - name of group @index's strategy, or NULL */
const char *cs_strat_job_current(const struct cs_strat_job *j, unsigned index);

/** cs_strat_job_errmsg - what the last failed call of @j was about */
const char *cs_strat_job_errmsg(const struct cs_strat_job *j);

#ifdef __cplusplus
}
#endif

#endif

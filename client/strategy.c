/* SPDX-License-Identifier: MIT */
/*
 * Strategies per parameter group (collstack/strategy.h): the registry, the
 * built-ins, plug-ins through dlopen(), and jobs that switch a group's
 * strategy at a step every rank agrees on.
 */
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal_strategy.h"
#include "collstack/strategy.h"
#include "internal/util.h"

#define CS_STRAT_REG_MAX 32

static const struct cs_strategy_ops *reg[CS_STRAT_REG_MAX];
static unsigned nreg;
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;

/* ---- built-ins ------------------------------------------------------------
 */

int cs_strat_wait(const struct cs_strategy_ctx *ctx, int ret, cs_req_t r,
		  const char *what, char *why, size_t whylen)
{
	if (!ret)
		ret = cs_wait(ctx->client, r, -1);
	if (ret)
		snprintf(why, whylen, "%s of group '%s': %s", what,
			 ctx->param_group, cs_errmsg(ctx->client));
	return ret;
}

static int ar_exchange(void *state, const struct cs_strategy_ctx *ctx,
		       void *grad, size_t count, enum cs_dtype dtype, char *why,
		       size_t whylen)
{
	cs_req_t r = 0;
	int ret;

	(void)state;
	ret = cs_allreduce(ctx->group, grad, grad, count, dtype, CS_SUM, &r);
	return cs_strat_wait(ctx, ret, r, "allreduce", why, whylen);
}

/*
 * Reduce-scatter then all-gather, in place, on the largest prefix that
 * splits evenly over the ranks; the remainder (fewer elements than ranks)
 * goes through one allreduce. Each segment's sum is computed once, by its
 * owner, and then copied, so every rank holds the same bits.
 */
static int rsag_exchange(void *state, const struct cs_strategy_ctx *ctx,
			 void *grad, size_t count, enum cs_dtype dtype,
			 char *why, size_t whylen)
{
	size_t per = count / (size_t)ctx->size, esz = cs_dtype_size(dtype);
	char *base = grad;
	cs_req_t r = 0;
	int ret = 0;

	(void)state;
	if (per) {
		char *mine = base + (size_t)ctx->rank * per * esz;

		ret = cs_reduce_scatter(ctx->group, base, mine, per, dtype,
					CS_SUM, &r);
		ret = cs_strat_wait(ctx, ret, r, "reduce-scatter", why, whylen);
		if (!ret) {
			ret = cs_all_gather(ctx->group, mine, base, per, dtype,
					    &r);
			ret = cs_strat_wait(ctx, ret, r, "all-gather", why,
					    whylen);
		}
	}
	if (!ret && count % (size_t)ctx->size)
		ret = ar_exchange(NULL, ctx, base + per * ctx->size * esz,
				  count % (size_t)ctx->size, dtype, why,
				  whylen);
	return ret;
}

static int local_exchange(void *state, const struct cs_strategy_ctx *ctx,
			  void *grad, size_t count, enum cs_dtype dtype,
			  char *why, size_t whylen)
{
	(void)state, (void)ctx, (void)grad, (void)count, (void)dtype;
	(void)why, (void)whylen;
	return 0;
}

static const struct cs_strategy_ops builtin[] = {
	{ CS_STRATEGY_ABI, "allreduce",
	  "one allreduce (sum); the sidecar picks direct, ring or two-level",
	  NULL, ar_exchange, NULL },
	{ CS_STRATEGY_ABI, "rs-ag",
	  "reduce-scatter then all-gather (the same sum, two operations)", NULL,
	  rsag_exchange, NULL },
	{ CS_STRATEGY_ABI, "local",
	  "no exchange: parameters that live on one rank only", NULL,
	  local_exchange, NULL },
	{ CS_STRATEGY_ABI, "ps",
	  "sum through a parameter-server table (pushes only non-zero rows)",
	  cs_strat_ps_open, cs_strat_ps_exchange, cs_strat_ps_close },
	{ CS_STRATEGY_ABI, "alltoall",
	  "the sum as two all-to-alls (reduce, then gather; f32/f64/i32/i64)",
	  cs_strat_a2a_open, cs_strat_a2a_exchange, cs_strat_a2a_close },
};

static int reg_add(const struct cs_strategy_ops *ops);

static void reg_init(void)
{
	for (size_t i = 0; i < sizeof(builtin) / sizeof(builtin[0]); i++)
		reg_add(&builtin[i]);
}

/* ---- registry -------------------------------------------------------------
 */

/* The name's id in the control vector: FNV-1a, 62 bits, never 0. */
static int64_t name_id(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return (int64_t)(h >> 2) | 1;
}

static const struct cs_strategy_ops *find_locked(const char *name)
{
	for (unsigned i = 0; i < nreg; i++)
		if (!strcmp(reg[i]->name, name))
			return reg[i];
	return NULL;
}

static int reg_add(const struct cs_strategy_ops *ops)
{
	int ret = 0;

	if (!ops || ops->abi != CS_STRATEGY_ABI || !ops->name ||
	    !ops->name[0] || strlen(ops->name) >= CS_STRATEGY_NAME_MAX ||
	    !ops->exchange)
		return -EINVAL;
	pthread_mutex_lock(&reg_lock);
	for (unsigned i = 0; i < nreg && !ret; i++)
		if (!strcmp(reg[i]->name, ops->name) ||
		    name_id(reg[i]->name) == name_id(ops->name))
			ret = -EEXIST;
	if (!ret && nreg == CS_STRAT_REG_MAX)
		ret = -ENOSPC;
	if (!ret)
		reg[nreg++] = ops;
	pthread_mutex_unlock(&reg_lock);
	return ret;
}

cs_export int cs_strategy_register(const struct cs_strategy_ops *ops)
{
	pthread_once(&reg_once, reg_init);
	return reg_add(ops);
}

cs_export const struct cs_strategy_ops *cs_strategy_find(const char *name)
{
	const struct cs_strategy_ops *o;

	pthread_once(&reg_once, reg_init);
	if (!name)
		return NULL;
	pthread_mutex_lock(&reg_lock);
	o = find_locked(name);
	pthread_mutex_unlock(&reg_lock);
	return o;
}

static const struct cs_strategy_ops *find_id(int64_t id)
{
	const struct cs_strategy_ops *o = NULL;

	pthread_mutex_lock(&reg_lock);
	for (unsigned i = 0; i < nreg && !o; i++)
		if (name_id(reg[i]->name) == id)
			o = reg[i];
	pthread_mutex_unlock(&reg_lock);
	return o;
}

cs_export unsigned cs_strategy_list(const struct cs_strategy_ops **out,
				    unsigned max)
{
	unsigned n;

	pthread_once(&reg_once, reg_init);
	pthread_mutex_lock(&reg_lock);
	n = nreg;
	for (unsigned i = 0; i < n && i < max; i++)
		out[i] = reg[i];
	pthread_mutex_unlock(&reg_lock);
	return n;
}

cs_export int cs_strategy_load(const char *path,
			       const struct cs_strategy_ops **out, char *why,
			       size_t whylen)
{
	const struct cs_strategy_ops *(*get)(void);
	const struct cs_strategy_ops *ops;
	void *h;
	int ret = 0;

	pthread_once(&reg_once, reg_init);
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(why, whylen, "plugin %s: %s", path, dlerror());
		return -ENOENT;
	}
	*(void **)&get = dlsym(h, CS_STRATEGY_PLUGIN_SYMBOL);
	ops = get ? get() : NULL;
	if (!ops) {
		snprintf(why, whylen, "plugin %s: no %s() or it returned NULL",
			 path, CS_STRATEGY_PLUGIN_SYMBOL);
		ret = -EINVAL;
		goto out_close;
	}
	if (ops->abi != CS_STRATEGY_ABI) {
		snprintf(why, whylen,
			 "plugin %s: strategy ABI %u, this library takes %u",
			 path, ops->abi, CS_STRATEGY_ABI);
		ret = -EINVAL;
		goto out_close;
	}
	pthread_mutex_lock(&reg_lock);
	for (unsigned i = 0; i < nreg; i++)
		if (reg[i] == ops) /* the same object again: already there */
			ret = 1;
	pthread_mutex_unlock(&reg_lock);
	if (ret == 1) {
		dlclose(h); /* drops the reference this dlopen() added */
		if (out)
			*out = ops;
		return 0;
	}
	ret = reg_add(ops);
	if (ret) {
		snprintf(why, whylen, "plugin %s: strategy '%s': %s", path,
			 ops->name ? ops->name : "(no name)",
			 ret == -EEXIST	  ? "a strategy of that name (or id) "
					    "is registered already"
			 : ret == -ENOSPC ? "the registry is full"
					  : "bad ops table (name, exchange)");
		goto out_close;
	}
	if (out)
		*out = ops;
	return 0; /* the handle stays open: the ops live in it */

out_close:
	dlclose(h);
	return ret;
}

/* ---- jobs -------------------------------------------------------------------
 */

struct strat_group {
	char name[64];
	const struct cs_strategy_ops *ops;
	void *state;
	int64_t request; /* name id wanted at the next step, 0: none */
	struct cs_strategy_ctx ctx;
};

struct cs_strat_job {
	struct cs_client *c;
	struct cs_group *g;
	struct cs_buf *ctl; /* the control vector: groups + 2 */
	struct strat_group grp[CS_STRAT_MAX_GROUPS];
	unsigned ngrp;
	char err[512];
};

static int jerr(struct cs_strat_job *j, int ret, const char *fmt, ...)
{
	va_list ap;

	if (!j)
		return ret;
	va_start(ap, fmt);
	vsnprintf(j->err, sizeof(j->err), fmt, ap);
	va_end(ap);
	return ret;
}

cs_export int cs_strat_job_open(struct cs_client *c, struct cs_group *g,
				struct cs_strat_job **out)
{
	struct cs_strat_job *j;
	int ret;

	if (!c || !g || !out)
		return -EINVAL;
	pthread_once(&reg_once, reg_init);
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->c = c;
	j->g = g;
	ret = cs_buf_alloc(c, (CS_STRAT_MAX_GROUPS + 2) * sizeof(int64_t),
			   &j->ctl);
	if (ret) {
		free(j);
		return ret;
	}
	*out = j;
	return 0;
}

cs_export void cs_strat_job_close(struct cs_strat_job *j)
{
	if (!j)
		return;
	for (unsigned i = 0; i < j->ngrp; i++)
		if (j->grp[i].ops->close)
			j->grp[i].ops->close(j->grp[i].state);
	cs_buf_free(j->ctl);
	free(j);
}

cs_export const char *cs_strat_job_errmsg(const struct cs_strat_job *j)
{
	return j ? j->err : "no job";
}

cs_export int cs_strat_job_find(const struct cs_strat_job *j, const char *name)
{
	for (unsigned i = 0; j && name && i < j->ngrp; i++)
		if (!strcmp(j->grp[i].name, name))
			return (int)i;
	return -ENOENT;
}

cs_export const char *cs_strat_job_current(const struct cs_strat_job *j,
					   unsigned index)
{
	return j && index < j->ngrp ? j->grp[index].ops->name : NULL;
}

/* Open @ops for group @sg; on success the old strategy is closed. */
static int switch_to(struct cs_strat_job *j, struct strat_group *sg,
		     const struct cs_strategy_ops *ops)
{
	char why[400] = "";
	void *st = NULL;
	int ret = ops->open ? ops->open(&sg->ctx, &st, why, sizeof(why)) : 0;

	if (ret)
		return jerr(j, ret, "%s",
			    why[0] ? why : "the strategy refused to open");
	if (sg->ops && sg->ops->close)
		sg->ops->close(sg->state);
	sg->ops = ops;
	sg->state = st;
	return 0;
}

cs_export int cs_strat_job_add(struct cs_strat_job *j, const char *name,
			       const char *strategy, unsigned *index)
{
	const struct cs_strategy_ops *ops;
	struct strat_group *sg;
	int ret;

	if (!j || !name || !name[0] || strlen(name) >= sizeof(sg->name))
		return jerr(j, -EINVAL, "bad parameter group name");
	if (cs_strat_job_find(j, name) >= 0)
		return jerr(j, -EEXIST, "parameter group '%s' exists already",
			    name);
	if (j->ngrp == CS_STRAT_MAX_GROUPS)
		return jerr(j, -ENOSPC, "more than %d parameter groups",
			    CS_STRAT_MAX_GROUPS);
	ops = cs_strategy_find(strategy);
	if (!ops)
		return jerr(j, -ENOENT,
			    "parameter group '%s': no strategy '%s' "
			    "(built-ins: allreduce, rs-ag, local, ps, "
			    "alltoall; others need a plugin line)",
			    name, strategy ? strategy : "(null)");
	sg = &j->grp[j->ngrp];
	memset(sg, 0, sizeof(*sg));
	snprintf(sg->name, sizeof(sg->name), "%s", name);
	sg->ctx = (struct cs_strategy_ctx){
		.client = j->c,
		.group = j->g,
		.rank = cs_group_rank(j->g),
		.size = cs_group_size(j->g),
		.param_group = sg->name,
	};
	ret = switch_to(j, sg, ops);
	if (ret)
		return ret;
	if (index)
		*index = j->ngrp;
	j->ngrp++;
	return 0;
}

/* Split @line into up to @max words in place; returns how many. */
static unsigned words(char *line, char **w, unsigned max)
{
	unsigned n = 0;
	char *p = line;

	while (*p) {
		while (isspace((unsigned char)*p))
			p++;
		if (!*p || *p == '#')
			break;
		if (n == max)
			return max + 1;
		w[n++] = p;
		while (*p && !isspace((unsigned char)*p))
			p++;
		if (*p)
			*p++ = 0;
	}
	return n;
}

cs_export int cs_strat_job_config(struct cs_strat_job *j, const char *path)
{
	char line[1024], why[400], *w[4], msg[512];
	unsigned lineno = 0, n;
	FILE *f;
	int ret = 0;

	if (!j || !path)
		return -EINVAL;
	f = fopen(path, "r");
	if (!f)
		return jerr(j, -errno, "%s: %s", path, strerror(errno));
	while (!ret && fgets(line, sizeof(line), f)) {
		lineno++;
		if (!strchr(line, '\n') && !feof(f)) {
			ret = jerr(j, -EINVAL, "%s:%u: line too long", path,
				   lineno);
			break;
		}
		n = words(line, w, 3);
		if (!n)
			continue;
		if (!strcmp(w[0], "plugin") && n == 2) {
			ret = cs_strategy_load(w[1], NULL, why, sizeof(why));
			if (ret)
				jerr(j, ret, "%s:%u: %s", path, lineno, why);
		} else if (!strcmp(w[0], "group") && n == 3) {
			ret = cs_strat_job_add(j, w[1], w[2], NULL);
			if (ret) {
				snprintf(msg, sizeof(msg), "%s", j->err);
				jerr(j, ret, "%s:%u: %s", path, lineno, msg);
			}
		} else {
			ret = jerr(j, -EINVAL,
				   "%s:%u: expected 'plugin PATH' or 'group "
				   "NAME STRATEGY', got '%s' with %u word%s",
				   path, lineno, w[0], n > 3 ? 4 : n,
				   n == 1 ? "" : "s");
		}
	}
	fclose(f);
	return ret;
}

cs_export int cs_strat_job_request(struct cs_strat_job *j, unsigned index,
				   const char *strategy)
{
	if (!j || index >= j->ngrp)
		return jerr(j, -EINVAL, "no parameter group %u", index);
	if (!cs_strategy_find(strategy))
		return jerr(j, -ENOENT, "no strategy '%s'",
			    strategy ? strategy : "(null)");
	j->grp[index].request = name_id(strategy);
	return 0;
}

cs_export int cs_strat_job_step(struct cs_strat_job *j, uint64_t step)
{
	char first_msg[sizeof(j->err)] = "";
	int64_t *v;
	cs_req_t r = 0;
	int ret, first = 0;

	if (!j)
		return -EINVAL;
	if (step > INT64_MAX)
		return jerr(j, -EINVAL, "step %llu out of range",
			    (unsigned long long)step);
	v = cs_buf_ptr(j->ctl);
	for (unsigned i = 0; i < j->ngrp; i++)
		v[i] = j->grp[i].request;
	v[j->ngrp] = (int64_t)step;
	v[j->ngrp + 1] = -(int64_t)step;
	ret = cs_allreduce(j->g, v, v, j->ngrp + 2, CS_I64, CS_MAX, &r);
	if (!ret)
		ret = cs_wait(j->c, r, -1);
	if (ret)
		return jerr(j, ret, "step %llu: control allreduce: %s",
			    (unsigned long long)step, cs_errmsg(j->c));
	if (v[j->ngrp] != -v[j->ngrp + 1])
		return jerr(j, CS_ERR_BAD_DESC,
			    "step %llu: ranks are at different steps "
			    "(from %lld to %lld)",
			    (unsigned long long)step,
			    (long long)-v[j->ngrp + 1], (long long)v[j->ngrp]);
	for (unsigned i = 0; i < j->ngrp; i++) {
		struct strat_group *sg = &j->grp[i];
		const struct cs_strategy_ops *ops;

		sg->request = 0;
		if (!v[i] || v[i] == name_id(sg->ops->name))
			continue;
		ops = find_id(v[i]);
		if (!ops)
			ret = jerr(j, CS_ERR_BAD_DESC,
				   "step %llu: group '%s': another rank asked "
				   "for a strategy this rank does not have "
				   "(load the same plugins everywhere)",
				   (unsigned long long)step, sg->name);
		else
			ret = switch_to(j, sg, ops);
		if (ret && !first) {
			first = ret;
			snprintf(first_msg, sizeof(first_msg), "%s", j->err);
		}
	}
	if (first) /* every switch was tried; report the first refusal */
		snprintf(j->err, sizeof(j->err), "%s", first_msg);
	return first;
}

cs_export int cs_strat_job_exchange(struct cs_strat_job *j, unsigned index,
				    void *grad, size_t count,
				    enum cs_dtype dtype)
{
	struct strat_group *sg;
	char why[400] = "";
	int ret;

	if (!j || index >= j->ngrp)
		return jerr(j, -EINVAL, "no parameter group %u", index);
	sg = &j->grp[index];
	ret = sg->ops->exchange(sg->state, &sg->ctx, grad, count, dtype, why,
				sizeof(why));
	if (ret)
		jerr(j, ret, "%s", why[0] ? why : cs_strerror(ret));
	return ret;
}

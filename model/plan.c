/* SPDX-License-Identifier: MIT */
/*
 * collstack plan: read a model's parameter groups, predict each strategy's
 * communication time per step with the cost model, pick the fastest.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "model/model.h"
#include "model/model_json.h"

static const char *const strat_names[CS_PLAN_STRAT_COUNT] = {
	[CS_PLAN_ALLREDUCE] = "allreduce",
	[CS_PLAN_PS] = "ps",
	[CS_PLAN_ALLTOALL] = "alltoall",
	[CS_PLAN_LOCAL] = "local",
};

/*
 * The strategy a strategies file names for a pick: the same, except that
 * all-to-all for an MoE layer is expert parallelism, which is the model's
 * own code (tokens through cs_moe_dispatch()/cs_moe_combine()), with the
 * experts' gradients on "local" (each expert lives on one rank).
 */
static const char *config_name(enum cs_plan_strat s, enum cs_plan_kind k)
{
	if (s == CS_PLAN_ALLTOALL && k == CS_PLAN_MOE)
		return "local";
	return cs_plan_strat_name(s);
}

const char *cs_plan_strat_name(enum cs_plan_strat s)
{
	return (unsigned)s < CS_PLAN_STRAT_COUNT ? strat_names[s] : "?";
}

void cs_plan_free(struct cs_plan *p)
{
	free(p->g);
	p->g = NULL;
	p->ngroups = 0;
}

/* A number > 0 (or >= 0 with @zero_ok) at group @i's @key. */
static int num(json_t *o, const char *path, unsigned i, const char *key,
	       bool zero_ok, double *out, char *err, size_t errlen)
{
	json_t *v = json_object_get(o, key);
	double d = json_number_value(v);

	if (!json_is_number(v) || !isfinite(d) || d < 0 || (!zero_ok && !d) ||
	    d > 1e15) {
		snprintf(err, errlen, "%s: groups[%u].%s: %s", path, i, key,
			 v ? "not a number in range (> 0)" : "missing");
		return -EINVAL;
	}
	*out = d;
	return 0;
}

static int load_group(json_t *o, const char *path, unsigned i,
		      struct cs_plan_group *g, char *err, size_t errlen)
{
	json_t *name = json_object_get(o, "name"), *kind, *rep;
	const char *k;

	if (!json_is_object(o)) {
		snprintf(err, errlen, "%s: groups[%u]: not an object", path, i);
		return -EINVAL;
	}
	if (!json_is_string(name) || !json_string_value(name)[0] ||
	    strlen(json_string_value(name)) >= sizeof(g->name)) {
		snprintf(err, errlen,
			 "%s: groups[%u].name: missing or not a string of "
			 "1..%zu characters",
			 path, i, sizeof(g->name) - 1);
		return -EINVAL;
	}
	snprintf(g->name, sizeof(g->name), "%s", json_string_value(name));
	kind = json_object_get(o, "kind");
	k = json_is_string(kind) ? json_string_value(kind) : "";
	rep = json_object_get(o, "replicated");
	if (rep && !json_is_boolean(rep)) {
		snprintf(err, errlen,
			 "%s: groups[%u].replicated: not true/false", path, i);
		return -EINVAL;
	}
	g->replicated = !rep || json_is_true(rep);
	if (!strcmp(k, "dense")) {
		g->kind = CS_PLAN_DENSE;
		return num(o, path, i, "params", false, &g->params, err,
			   errlen);
	}
	if (!strcmp(k, "sparse")) {
		g->kind = CS_PLAN_SPARSE;
		if (num(o, path, i, "rows", false, &g->rows, err, errlen) ||
		    num(o, path, i, "dim", false, &g->dim, err, errlen) ||
		    num(o, path, i, "rows_per_step", true, &g->rows_per_step,
			err, errlen))
			return -EINVAL;
		if (g->rows_per_step > g->rows) {
			snprintf(err, errlen,
				 "%s: groups[%u].rows_per_step: more than "
				 "rows (%.0f > %.0f)",
				 path, i, g->rows_per_step, g->rows);
			return -EINVAL;
		}
		g->params = g->rows * g->dim;
		return 0;
	}
	if (!strcmp(k, "moe")) {
		g->kind = CS_PLAN_MOE;
		if (num(o, path, i, "params", false, &g->params, err, errlen) ||
		    num(o, path, i, "tokens", false, &g->tokens, err, errlen) ||
		    num(o, path, i, "hidden", false, &g->hidden, err, errlen) ||
		    num(o, path, i, "topk", false, &g->topk, err, errlen) ||
		    num(o, path, i, "layers", false, &g->layers, err, errlen))
			return -EINVAL;
		return 0;
	}
	snprintf(err, errlen, "%s: groups[%u].kind: %s (dense, sparse or moe)",
		 path, i, kind ? "unknown" : "missing");
	return -EINVAL;
}

int cs_plan_load(const char *path, struct cs_plan *p, char *err, size_t errlen)
{
	json_t *root, *groups, *v;
	size_t n;
	int ret = -EINVAL;

	memset(p, 0, sizeof(*p));
	ret = cs_model_json_read(path, &root, err, errlen);
	if (ret)
		return ret;
	ret = -EINVAL;
	v = json_object_get(root, "name");
	snprintf(p->name, sizeof(p->name), "%s",
		 json_is_string(v) ? json_string_value(v) : path);
	p->dtype_bytes = 4;
	v = json_object_get(root, "dtype_bytes");
	if (v && (!json_is_integer(v) || json_integer_value(v) < 1 ||
		  json_integer_value(v) > 8)) {
		snprintf(err, errlen, "%s: dtype_bytes: a whole number 1..8",
			 path);
		goto out;
	}
	if (v)
		p->dtype_bytes = (uint32_t)json_integer_value(v);
	v = json_object_get(root, "ranks_per_node");
	if (v && (!json_is_integer(v) || json_integer_value(v) < 1 ||
		  json_integer_value(v) > 1024)) {
		snprintf(err, errlen,
			 "%s: ranks_per_node: a whole number 1..1024", path);
		goto out;
	}
	if (v)
		p->rpn = (uint32_t)json_integer_value(v);
	groups = json_object_get(root, "groups");
	n = json_array_size(groups);
	if (!json_is_array(groups) || !n || n > 1024) {
		snprintf(err, errlen, "%s: groups: %s", path,
			 groups ? "must be an array of 1..1024 groups"
				: "missing");
		goto out;
	}
	p->g = calloc(n, sizeof(*p->g));
	if (!p->g) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		if (load_group(json_array_get(groups, i), path, (unsigned)i,
			       &p->g[i], err, errlen))
			goto out_free;
		for (size_t k = 0; k < i; k++)
			if (!strcmp(p->g[k].name, p->g[i].name)) {
				snprintf(err, errlen,
					 "%s: groups[%zu].name: '%s' twice",
					 path, i, p->g[i].name);
				goto out_free;
			}
		p->ngroups++;
	}
	ret = 0;
	goto out;
out_free:
	cs_plan_free(p);
out:
	json_decref(root);
	return ret;
}

int cs_plan_cost(const struct cs_model *m, const struct cs_plan_group *g,
		 uint32_t dtype_bytes, enum cs_plan_strat s, uint32_t ranks,
		 uint32_t rpn, double *ns, double *bytes)
{
	struct cs_model_case c = { .ranks = ranks, .rpn = rpn };
	double b = 0, reps = 1;
	int ret;

	switch (s) {
	case CS_PLAN_ALLREDUCE:
		/* the whole gradient, dense (a sparse table's too) */
		c.op = CS_MODEL_ALLREDUCE;
		b = g->params * dtype_bytes;
		break;
	case CS_PLAN_PS:
		if (g->kind == CS_PLAN_MOE)
			return -ENOTSUP;
		c.op = CS_MODEL_PS_NET;
		b = (g->kind == CS_PLAN_SPARSE ? g->rows_per_step * g->dim
					       : g->params) *
		    dtype_bytes;
		break;
	case CS_PLAN_ALLTOALL:
		/* expert parallel: tokens travel (dispatch and combine,
		 * forward and backward: 4 per layer), experts stay local */
		if (g->kind != CS_PLAN_MOE)
			return -ENOTSUP;
		c.op = CS_MODEL_ALLTOALL;
		b = g->tokens * g->topk * g->hidden * dtype_bytes;
		reps = 4 * g->layers;
		break;
	case CS_PLAN_LOCAL:
		if (g->replicated)
			return -ENOTSUP;
		*ns = 0;
		if (bytes)
			*bytes = 0;
		return 0;
	default:
		return -EINVAL;
	}
	c.bytes = (uint64_t)b;
	if (bytes)
		*bytes = b * reps;
	if (!c.bytes) {
		*ns = 0;
		return 0;
	}
	ret = cs_model_predict(m, &c, ns, NULL, NULL, 0);
	if (!ret)
		*ns *= reps;
	return ret;
}

static void fmt_bytes(double b, char *s, size_t n)
{
	if (b >= 1 << 30)
		snprintf(s, n, "%.1fG", b / (1 << 30));
	else if (b >= 1 << 20)
		snprintf(s, n, "%.1fM", b / (1 << 20));
	else if (b >= 1 << 10)
		snprintf(s, n, "%.1fK", b / (1 << 10));
	else
		snprintf(s, n, "%.0f", b);
}

static void fmt_us(int ret, double ns, char *s, size_t n)
{
	if (ret == -ENOTSUP)
		snprintf(s, n, "-");
	else if (ret)
		snprintf(s, n, "n/a");
	else
		snprintf(s, n, "%.1f", ns / 1000);
}

static const char *const kind_names[] = { "dense", "sparse", "moe" };

int cs_plan_print(const struct cs_model *m, const struct cs_plan *p,
		  uint32_t ranks, uint32_t rpn, FILE *out, FILE *conf)
{
	double total = 0, single[CS_PLAN_STRAT_COUNT] = { 0 };
	bool single_ok[CS_PLAN_STRAT_COUNT];
	char cell[CS_PLAN_STRAT_COUNT][32], sz[16];

	for (unsigned s = 0; s < CS_PLAN_STRAT_COUNT; s++)
		single_ok[s] = true;
	fprintf(out,
		"# plan for '%s': %u ranks, %u per node (%u nodes), model "
		"fitted on %u %s nodes\n"
		"# predicted communication time per step, us (- = does not "
		"apply); config: the strategy a strategies file names\n",
		p->name, ranks, rpn, ranks / rpn, m->fit_nodes, m->source);
	fprintf(out, "%-16s %-7s %9s %12s %12s %12s %8s %-10s %s\n", "group",
		"kind", "grad", "allreduce", "ps", "alltoall", "local", "pick",
		"config");
	for (unsigned i = 0; i < p->ngroups; i++) {
		const struct cs_plan_group *g = &p->g[i];
		double ns[CS_PLAN_STRAT_COUNT], best = INFINITY;
		int ret[CS_PLAN_STRAT_COUNT], pick = -1;

		for (unsigned s = 0; s < CS_PLAN_STRAT_COUNT; s++) {
			ret[s] = cs_plan_cost(m, g, p->dtype_bytes,
					      (enum cs_plan_strat)s, ranks, rpn,
					      &ns[s], NULL);
			fmt_us(ret[s], ns[s], cell[s], sizeof(cell[s]));
			if (ret[s]) {
				single_ok[s] = false;
				continue;
			}
			single[s] += ns[s];
			if (ns[s] < best) {
				best = ns[s];
				pick = (int)s;
			}
		}
		if (pick < 0) {
			fprintf(stderr,
				"plan: group '%s': no strategy can be "
				"predicted with this model\n",
				g->name);
			return -ENODATA;
		}
		/* a strategies file's line is "group NAME STRATEGY" */
		if (conf && strpbrk(g->name, " \t\r\n#")) {
			fprintf(stderr,
				"plan: group '%s': a name with blanks or '#' "
				"cannot be written to a strategies file\n",
				g->name);
			return -EINVAL;
		}
		fmt_bytes(g->params * p->dtype_bytes, sz, sizeof(sz));
		fprintf(out, "%-16s %-7s %9s %12s %12s %12s %8s %-10s %s\n",
			g->name, kind_names[g->kind], sz,
			cell[CS_PLAN_ALLREDUCE], cell[CS_PLAN_PS],
			cell[CS_PLAN_ALLTOALL], cell[CS_PLAN_LOCAL],
			strat_names[pick],
			config_name((enum cs_plan_strat)pick, g->kind));
		if (conf)
			fprintf(conf, "%sgroup %s %s\n",
				i ? ""
				  : "# collstack plan: the config column\n",
				g->name,
				config_name((enum cs_plan_strat)pick, g->kind));
		total += best;
	}
	fprintf(out, "# total per step: plan %.1f us", total / 1000);
	for (unsigned s = 0; s < CS_PLAN_STRAT_COUNT; s++)
		if (single_ok[s])
			fprintf(out, "; all %s %.1f us", strat_names[s],
				single[s] / 1000);
	fprintf(out, "\n# alltoall for a moe group is expert parallelism: "
		     "its experts on 'local', the tokens through "
		     "cs_moe_dispatch()/cs_moe_combine()\n");
	return 0;
}

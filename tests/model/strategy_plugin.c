/* SPDX-License-Identifier: MIT */
/*
 * A strategy plug-in for the tests: "halves" exchanges a gradient as two
 * allreduces, one per half (the same sum by another path), and counts its
 * opens and closes in its state.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <collstack/strategy.h>

struct halves {
	unsigned long exchanges;
};

static int h_open(const struct cs_strategy_ctx *ctx, void **state, char *why,
		  size_t whylen)
{
	struct halves *h = calloc(1, sizeof(*h));

	if (!h) {
		snprintf(why, whylen, "halves for '%s': out of memory",
			 ctx->param_group);
		return -ENOMEM;
	}
	*state = h;
	return 0;
}

static int h_exchange(void *state, const struct cs_strategy_ctx *ctx,
		      void *grad, size_t count, enum cs_dtype dtype, char *why,
		      size_t whylen)
{
	struct halves *h = state;
	size_t first = count / 2, esz = cs_dtype_size(dtype);
	char *p = grad;
	cs_req_t r[2];
	int ret;

	ret = cs_allreduce(ctx->group, p, p, first, dtype, CS_SUM, &r[0]);
	if (!ret)
		ret = cs_allreduce(ctx->group, p + first * esz, p + first * esz,
				   count - first, dtype, CS_SUM, &r[1]);
	if (!ret)
		ret = cs_wait(ctx->client, r[0], -1);
	if (!ret)
		ret = cs_wait(ctx->client, r[1], -1);
	if (ret)
		snprintf(why, whylen, "halves for '%s': %s", ctx->param_group,
			 cs_errmsg(ctx->client));
	h->exchanges++;
	return ret;
}

static void h_close(void *state)
{
	free(state);
}

static const struct cs_strategy_ops halves = {
	.abi = CS_STRATEGY_ABI,
	.name = "halves",
	.help = "two allreduces, one per half (test plug-in)",
	.open = h_open,
	.exchange = h_exchange,
	.close = h_close,
};

__attribute__((visibility("default"))) const struct cs_strategy_ops *
cs_strategy_plugin(void)
{
	return &halves;
}

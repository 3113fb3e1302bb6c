/* SPDX-License-Identifier: MIT */
/* A plug-in built for another strategy ABI: the loader must refuse it. */
#include <collstack/strategy.h>

static int never(void *state, const struct cs_strategy_ctx *ctx, void *grad,
		 size_t count, enum cs_dtype dtype, char *why, size_t whylen)
{
	(void)state, (void)ctx, (void)grad, (void)count, (void)dtype;
	(void)why, (void)whylen;
	return 0;
}

static const struct cs_strategy_ops future = {
	.abi = CS_STRATEGY_ABI + 98,
	.name = "future",
	.exchange = never,
};

__attribute__((visibility("default"))) const struct cs_strategy_ops *
cs_strategy_plugin(void)
{
	return &future;
}

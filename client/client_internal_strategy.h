/* SPDX-License-Identifier: MIT */
/* Built-in strategies that live in files of their own (client/strategy*.c). */
#ifndef CS_CLIENT_INTERNAL_STRATEGY_H
#define CS_CLIENT_INTERNAL_STRATEGY_H

#include <stdbool.h>
#include <stddef.h>

#include "collstack/strategy.h"

/*
 * After posting (@ret, request @r): wait, and put what failed and why in
 * @why. Returns 0 or the error.
 */
int cs_strat_wait(const struct cs_strategy_ctx *ctx, int ret, cs_req_t r,
		  const char *what, char *why, size_t whylen);

/* 0 if @c's sidecar serves PS tables, else -EOPNOTSUPP (ps_client.c). */
int cs__ps_probe(struct cs_client *c, char *why, size_t whylen);

/* "ps": the group summed through a two-bank PS table (strategy_ps.c). */
int cs_strat_ps_open(const struct cs_strategy_ctx *ctx, void **state, char *why,
		     size_t whylen);
int cs_strat_ps_exchange(void *state, const struct cs_strategy_ctx *ctx,
			 void *grad, size_t count, enum cs_dtype dtype,
			 char *why, size_t whylen);
void cs_strat_ps_close(void *state);

/* "alltoall": the sum as two cs_alltoall()s (strategy_a2a.c). */
int cs_strat_a2a_open(const struct cs_strategy_ctx *ctx, void **state,
		      char *why, size_t whylen);
int cs_strat_a2a_exchange(void *state, const struct cs_strategy_ctx *ctx,
			  void *grad, size_t count, enum cs_dtype dtype,
			  char *why, size_t whylen);
void cs_strat_a2a_close(void *state);

#endif

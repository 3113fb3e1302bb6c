/* SPDX-License-Identifier: MIT */
/*
 * The "alltoall" strategy: a parameter group's sum as two all-to-alls
 * (cs_alltoall), the exchange pattern of an all-to-all based allreduce.
 *
 * The @count elements are cut into N blocks of B = ceil(count / N) (the
 * last padded with zeros). The first all-to-all gives rank j block j of
 * every rank; it sums them in rank order, so the sum of block j is
 * computed once, by its owner; the second all-to-all sends that sum to
 * every rank (the owner's block repeated N times in its send buffer). Each
 * rank moves 2 (N - 1) B elements, as a ring reduce-scatter plus
 * all-gather does, in two operations instead of 2 (N - 1) steps; across
 * nodes the sidecars carry each as one aggregated flow per node pair.
 * Every rank ends with the same bits. Sums in f32, f64, i32 and i64 (f16
 * and bf16 refused: no half-precision kernels in libcollstack); the ranks
 * must be laid out as cs_alltoall() requires (contiguous per node).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal_strategy.h"

struct a2a_strat {
	struct cs_buf *send, *recv;
	size_t cap; /* bytes of each */
};

int cs_strat_a2a_open(const struct cs_strategy_ctx *ctx, void **state,
		      char *why, size_t whylen)
{
	(void)ctx, (void)why, (void)whylen;
	*state = calloc(1, sizeof(struct a2a_strat));
	return *state ? 0 : -ENOMEM;
}

void cs_strat_a2a_close(void *state)
{
	struct a2a_strat *s = state;

	if (!s)
		return;
	cs_buf_free(s->send);
	cs_buf_free(s->recv);
	free(s);
}

#define SUM_BLOCKS(T)                                                          \
	do {                                                                   \
		T *o = out;                                                    \
		const T *b = in;                                               \
		for (size_t k = 0; k < n; k++)                                 \
			o[k] = b[k];                                           \
		for (int r = 1; r < nb; r++)                                   \
			for (size_t k = 0; k < n; k++)                         \
				o[k] += b[(size_t)r * n + k];                  \
	} while (0)

/* @out = the sum, in block order, of @nb blocks of @n elements at @in. */
static void sum_blocks(void *out, const void *in, size_t n, int nb,
		       enum cs_dtype dtype)
{
	switch (dtype) {
	case CS_F32:
		SUM_BLOCKS(float);
		break;
	case CS_F64:
		SUM_BLOCKS(double);
		break;
	case CS_I32:
		SUM_BLOCKS(int32_t);
		break;
	default:
		SUM_BLOCKS(int64_t);
		break;
	}
}

int cs_strat_a2a_exchange(void *state, const struct cs_strategy_ctx *ctx,
			  void *grad, size_t count, enum cs_dtype dtype,
			  char *why, size_t whylen)
{
	struct a2a_strat *s = state;
	size_t esz = cs_dtype_size(dtype), n = (size_t)ctx->size;
	size_t blk = (count + n - 1) / n, bb = blk * esz, need = n * bb;
	uint8_t *snd, *rcv;
	cs_req_t r = 0;
	int ret;

	if (!count)
		return 0;
	if (dtype != CS_F32 && dtype != CS_F64 && dtype != CS_I32 &&
	    dtype != CS_I64) {
		snprintf(why, whylen,
			 "strategy 'alltoall' for group '%s': %s is not "
			 "offered (sums in f32, f64, i32, i64)",
			 ctx->param_group, cs_dtype_name(dtype));
		return -EINVAL;
	}
	if (need > s->cap) {
		cs_buf_free(s->send);
		cs_buf_free(s->recv);
		s->send = s->recv = NULL;
		s->cap = 0;
		ret = cs_buf_alloc(ctx->client, need, &s->send);
		if (!ret)
			ret = cs_buf_alloc(ctx->client, need, &s->recv);
		if (ret) {
			snprintf(why, whylen,
				 "strategy 'alltoall' for group '%s': %zu "
				 "bytes of buffers: %d",
				 ctx->param_group, 2 * need, ret);
			return ret;
		}
		s->cap = need;
	}
	snd = cs_buf_ptr(s->send);
	rcv = cs_buf_ptr(s->recv);
	memcpy(snd, grad, count * esz);
	memset(snd + count * esz, 0, need - count * esz);
	/* block j of every rank to rank j */
	ret = cs_alltoall(ctx->group, snd, rcv, blk, dtype, &r);
	ret = cs_strat_wait(ctx, ret, r, "all-to-all (reduce)", why, whylen);
	if (ret)
		return ret;
	sum_blocks(snd, rcv, blk, ctx->size, dtype);
	for (size_t j = 1; j < n; j++)
		memcpy(snd + j * bb, snd, bb);
	/* every rank's summed block to every rank */
	ret = cs_alltoall(ctx->group, snd, rcv, blk, dtype, &r);
	ret = cs_strat_wait(ctx, ret, r, "all-to-all (gather)", why, whylen);
	if (ret)
		return ret;
	memcpy(grad, rcv, count * esz);
	return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * The "ps" strategy: a parameter group's gradients summed through a
 * parameter-server table (collstack/ps.h) instead of an allreduce.
 *
 * The group's elements are cut into rows of PS_DIM values. The table has
 * two banks of those rows (keys 0 .. n-1 and n .. 2n-1), sync mode, SGD
 * with lr 1 and a zero initializer, so a bank that holds zeros and takes
 * the pushes of version v holds exactly -(sum of the pushes): 0 - 1 * G is
 * exact. Exchange v uses bank v & 1:
 *
 *	push	the rows of this rank's gradient that are not all zero (a
 *		sparse embedding gradient pushes only the rows it touched);
 *		rank 0 also pushes, into the other bank, the rows it pulled
 *		from that bank at exchange v - 1: w - w = 0, so that bank is
 *		zero again before exchange v + 1 uses it
 *	pull	the rows of bank v & 1 that some rank pushed, at clock v + 1
 *		(answered once every worker's version v is applied on every
 *		shard); which rows is agreed by an allreduce (max) of one byte
 *		per row, posted beside the push
 *
 * and the gradient becomes the pulled rows negated (a sign flip, exact),
 * the same bits on every rank; rows no rank pushed are zero.
 *
 * The table is made, collectively, at the group's first exchange on "ps"
 * and sized for it; a later exchange of fewer elements uses the first
 * rows, one of more (or of another type) makes a bigger table, again
 * together (every rank passes the same count to a collective exchange). The sum
 *is the shards' f32 sum, so f32, f16 and bf16 are offered; f64 and integers are
 *refused (the table's optimizer computes in f32).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal_strategy.h"
#include "collstack/ps.h"

#define PS_DIM 64 /* values per table row */

struct ps_strat {
	struct cs_ps_table *t;
	struct cs_buf *keys, *push, *pull, *map;
	size_t count, nrows, nreset; /* the table's capacity */
	size_t cur, cur_rows; /* this exchange's elements and rows */
	enum cs_dtype dtype;
	uint64_t version;
	uint64_t *reset; /* rank 0: rows of the other bank to zero (keys) */
};

/* Destroy the table (collectively) and free the buffers; @s is zeroed. */
static void ps_reset(struct ps_strat *s)
{
	if (s->t)
		cs_ps_table_destroy(s->t);
	cs_buf_free(s->keys);
	cs_buf_free(s->push);
	cs_buf_free(s->pull);
	cs_buf_free(s->map);
	free(s->reset);
	memset(s, 0, sizeof(*s));
}

int cs_strat_ps_open(const struct cs_strategy_ctx *ctx, void **state, char *why,
		     size_t whylen)
{
	struct ps_strat *s;
	char what[200] = "";
	int ret = cs__ps_probe(ctx->client, what, sizeof(what));

	if (ret) {
		snprintf(why, whylen, "strategy 'ps' for group '%s': %s",
			 ctx->param_group, what);
		return ret == -EOPNOTSUPP ? -ENOTSUP : ret;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	*state = s;
	return 0;
}

void cs_strat_ps_close(void *state)
{
	if (!state)
		return;
	ps_reset(state);
	free(state);
}

/* The table's name: "st." and the parameter group's (a hash if long). */
static void table_name(const char *group, char *out, size_t len)
{
	uint64_t h = 1469598103934665603ull;

	if (strlen(group) + 3 < len) {
		snprintf(out, len, "st.%s", group);
		return;
	}
	for (const char *p = group; *p; p++)
		h = (h ^ (uint8_t)*p) * 1099511628211ull;
	snprintf(out, len, "st.%.16s.%08x", group, (unsigned)(h ^ h >> 32));
}

/* First exchange: the table and the buffers, collectively. */
static int ps_setup(struct ps_strat *s, const struct cs_strategy_ctx *ctx,
		    size_t count, enum cs_dtype dtype, char *why, size_t whylen)
{
	struct cs_ps_table_attr a;
	size_t esz = cs_dtype_size(dtype), rowb = PS_DIM * esz;
	char name[32];
	int ret;

	if (dtype != CS_F32 && dtype != CS_F16 && dtype != CS_BF16) {
		snprintf(why, whylen,
			 "strategy 'ps' for group '%s': %s is not offered "
			 "(the table sums in f32: f32, f16 or bf16)",
			 ctx->param_group, cs_dtype_name(dtype));
		return -EINVAL;
	}
	s->count = count;
	s->dtype = dtype;
	s->nrows = (count + PS_DIM - 1) / PS_DIM;
	cs_ps_table_attr_init(&a, PS_DIM, 2 * (uint64_t)s->nrows,
			      CS_PS_OPT_SGD);
	a.dtype = dtype;
	a.mode = CS_PS_SYNC;
	a.opt.lr = 1.0f;
	a.init.kind = CS_PS_INIT_ZERO;
	table_name(ctx->param_group, name, sizeof(name));
	ret = cs_buf_alloc(ctx->client, 2 * s->nrows * sizeof(uint64_t),
			   &s->keys);
	if (!ret)
		ret = cs_buf_alloc(ctx->client, 2 * s->nrows * rowb, &s->push);
	if (!ret)
		ret = cs_buf_alloc(ctx->client, s->nrows * rowb, &s->pull);
	if (!ret)
		ret = cs_buf_alloc(ctx->client, s->nrows, &s->map);
	if (!ret && ctx->rank == 0) {
		s->reset = calloc(s->nrows, sizeof(*s->reset));
		ret = s->reset ? 0 : -ENOMEM;
	}
	if (ret) {
		snprintf(why, whylen,
			 "strategy 'ps' for group '%s': %zu elements: no "
			 "buffers (%d)",
			 ctx->param_group, count, ret);
		return ret;
	}
	ret = cs_ps_table_create(ctx->group, name, &a, &s->t);
	if (ret) {
		s->t = NULL;
		snprintf(why, whylen,
			 "strategy 'ps' for group '%s': table '%s': %s",
			 ctx->param_group, name, cs_errmsg(ctx->client));
	}
	return ret;
}

static bool row_is_zero(const uint8_t *row, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (row[i])
			return false;
	return true;
}

/*
 * Pulled rows (-G, in row order, only those @map marks) into @grad as G:
 * the sign bit of every non-zero value flipped (zero stays +0, as a sum
 * of zeros is); rows no rank pushed become zeros. Rank 0 notes the rows
 * to zero at the next exchange.
 */
static void take_pulled(struct ps_strat *s, const struct cs_strategy_ctx *ctx,
			uint8_t *grad, uint64_t bank)
{
	size_t esz = cs_dtype_size(s->dtype), rowb = PS_DIM * esz, k = 0;
	const uint8_t *pull = cs_buf_ptr(s->pull), *map = cs_buf_ptr(s->map);

	s->nreset = 0;
	for (size_t r = 0; r < s->cur_rows; r++) {
		size_t n = r + 1 < s->cur_rows ? PS_DIM : s->cur - r * PS_DIM;
		const uint8_t *row = pull + k * rowb;

		if (!map[r]) {
			memset(grad + r * rowb, 0, n * esz);
			continue;
		}
		if (ctx->rank == 0 && !row_is_zero(row, rowb))
			s->reset[s->nreset++] = bank * s->nrows + r;
		for (size_t i = 0; i < n; i++) {
			const uint8_t *src = row + i * esz;
			uint8_t *dst = grad + (r * PS_DIM + i) * esz;

			memcpy(dst, src, esz);
			if (!row_is_zero(src, esz))
				dst[esz - 1] ^= 0x80; /* little-endian sign */
		}
		/* rank 0 zeroes it from the copy kept in its reset area */
		if (ctx->rank == 0 && s->nreset &&
		    s->reset[s->nreset - 1] == bank * s->nrows + r)
			memmove((uint8_t *)cs_buf_ptr(s->pull) +
					(s->nreset - 1) * rowb,
				row, rowb);
		k++;
	}
}

int cs_strat_ps_exchange(void *state, const struct cs_strategy_ctx *ctx,
			 void *grad, size_t count, enum cs_dtype dtype,
			 char *why, size_t whylen)
{
	struct ps_strat *s = state;
	size_t esz = cs_dtype_size(dtype), rowb = PS_DIM * esz, n = 0;
	uint64_t bank, *keys;
	uint8_t *push, *map, *g = grad;
	cs_req_t r = 0, rm = 0;
	int ret, ret2;

	if (!count)
		return 0;
	/* every rank sees the same count: a bigger table, together */
	if (s->t && (count > s->count || dtype != s->dtype))
		ps_reset(s);
	if (!s->t) {
		ret = ps_setup(s, ctx, count, dtype, why, whylen);
		if (ret) {
			ps_reset(s);
			return ret;
		}
	}
	bank = s->version & 1;
	s->cur = count;
	s->cur_rows = (count + PS_DIM - 1) / PS_DIM;
	keys = cs_buf_ptr(s->keys);
	push = cs_buf_ptr(s->push);
	map = cs_buf_ptr(s->map);
	for (size_t row = 0; row < s->cur_rows; row++) {
		size_t len = row + 1 < s->cur_rows
				     ? rowb
				     : (count - row * PS_DIM) * esz;

		map[row] = !row_is_zero(g + row * rowb, len);
		if (!map[row])
			continue;
		keys[n] = bank * s->nrows + row;
		memcpy(push + n * rowb, g + row * rowb, len);
		memset(push + n * rowb + len, 0, rowb - len);
		n++;
	}
	/* rank 0: zero the other bank (its rows pulled last time, as -G) */
	for (size_t i = 0; i < s->nreset; i++, n++) {
		keys[n] = s->reset[i];
		memcpy(push + n * rowb,
		       (uint8_t *)cs_buf_ptr(s->pull) + i * rowb, rowb);
	}
	/* which rows some rank pushed: one byte per row, max */
	ret = cs_allreduce(ctx->group, map, map, s->cur_rows, CS_U8, CS_MAX,
			   &rm);
	if (ret)
		return cs_strat_wait(ctx, ret, rm, "PS row map", why, whylen);
	ret = cs_ps_push(s->t, s->version, keys, push, n, &r);
	ret = cs_strat_wait(ctx, ret, r, "PS push", why, whylen);
	ret2 = cs_strat_wait(ctx, 0, rm, "PS row map", why, ret ? 0 : whylen);
	if (ret || ret2)
		return ret ? ret : ret2;
	n = 0;
	for (size_t row = 0; row < s->cur_rows; row++)
		if (map[row])
			keys[n++] = bank * s->nrows + row;
	if (n) {
		ret = cs_ps_pull(s->t, s->version + 1, keys, n,
				 cs_buf_ptr(s->pull), &r);
		ret = cs_strat_wait(ctx, ret, r, "PS pull", why, whylen);
		if (ret)
			return ret;
	}
	take_pulled(s, ctx, g, bank);
	s->version++;
	return 0;
}

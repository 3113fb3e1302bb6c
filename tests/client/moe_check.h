/* SPDX-License-Identifier: MIT */
/*
 * Trainers' MoE (collstack/moe.h) checked against a single-process
 * reference: every rank computes every rank's tokens (they are a function
 * of rank and token), so it knows exactly which rows each of its experts
 * must receive, from where, in which order, and the bits of each combined
 * output. Shared by tests/client/test_client.c (one node) and
 * tests/netns/cs_trainer_moe.c (across nodes).
 */
#ifndef CS_TEST_MOE_CHECK_H
#define CS_TEST_MOE_CHECK_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collstack/collstack.h"
#include "collstack/moe.h"

#define MC_H 12
#define MC_K 3
#define MC_TMAX 9
#define MC_PER 2 /* experts per rank */

/* Rank @s's tokens in round @rd: 0 .. MC_TMAX, one rank none at all. */
static uint32_t mc_ntok(int s, int size, int rd)
{
	if (s == (rd + 1) % size)
		return 0;
	return (uint32_t)((s * 5 + rd * 3) % (MC_TMAX + 1));
}

static float mc_x(int s, uint32_t t, uint32_t h, int rd)
{
	return (float)((s * 131 + (int)t * 17 + (int)h * 7 + rd) % 97) / 8.0f -
	       6.0f;
}

/* Expert of slot @j of token @t of rank @s (-1: none); distinct slots. */
static int32_t mc_idx(int s, uint32_t t, uint32_t j, int E, int rd)
{
	uint32_t base = (uint32_t)(s * 7 + (int)t * 3 + rd) % (uint32_t)E;

	if ((s + (int)t + (int)j + rd) % 5 == 0)
		return -1;
	/* a hot expert: slot 0 of every third token goes to expert 0 */
	if (j == 0 && t % 3 == 0)
		return 0;
	return (int32_t)((base + 1 + j) % (uint32_t)E) == 0
		       ? (int32_t)((base + 1 + j + MC_K) % (uint32_t)E)
		       : (int32_t)((base + 1 + j) % (uint32_t)E);
}

/* Weights that are not dyadic: the products round, so that another
 * order of summation gives other bits (the node-sum checks rely on it). */
static float mc_w(int s, uint32_t t, uint32_t j)
{
	return 0.25f + 0.013f * (float)((s + 3 * (int)t + 5 * (int)j) % 11) +
	       0.1f * (float)j;
}

/* The expert's function. */
static float mc_f(int32_t e, float v)
{
	return v * (float)(e + 1) - 0.5f * (float)e;
}

static void mc_inputs(int s, int size, int rd, float *x, int32_t *idx, float *w)
{
	uint32_t T = mc_ntok(s, size, rd);
	int E = MC_PER * size;

	for (uint32_t t = 0; t < T; t++) {
		for (uint32_t h = 0; h < MC_H; h++)
			x[t * MC_H + h] = mc_x(s, t, h, rd);
		for (uint32_t j = 0; j < MC_K; j++) {
			idx[t * MC_K + j] = mc_idx(s, t, j, E, rd);
			w[t * MC_K + j] = mc_w(s, t, j);
		}
	}
	/* distinct experts per token: drop repeats */
	for (uint32_t t = 0; t < T; t++)
		for (uint32_t j = 0; j < MC_K; j++)
			for (uint32_t i = 0; i < j; i++)
				if (idx[t * MC_K + j] >= 0 &&
				    idx[t * MC_K + i] == idx[t * MC_K + j])
					idx[t * MC_K + j] = -1;
}

/*
 * The combined value of token @t (top-k @idx, weights @w, input @v): the
 * sum in slot order, or with @G > 0 (CS_MOE_LAYER_NODE_SUM, @G ranks per
 * node) each node's slots summed in slot order, those sums in node order.
 */
static float mc_ref(const int32_t *idx, const float *w, float v, int size,
		    int G)
{
	float acc = 0.0f;

	for (int b = 0; b < (G ? size / G : 1); b++) {
		float part = 0.0f;
		int any = 0;

		for (uint32_t j = 0; j < MC_K; j++)
			if (idx[j] >= 0 && (!G || idx[j] / MC_PER / G == b)) {
				part += w[j] * mc_f(idx[j], v);
				any = 1;
			}
		if (!G)
			return part;
		if (any)
			acc += part;
	}
	return acc;
}

/* One dispatch + combine; every value checked (@G: as mc_ref()). Returns
 * 0 or a code. */
static long mc_differ; /* node-sum values whose slot-order sum differs */

static int mc_round_ns(struct cs_client *c, struct cs_moe_layer *l, int rank,
		       int size, int rd, int64_t wait_ns, int G)
{
	static float x[MC_TMAX * MC_H], w[MC_TMAX * MC_K], out[MC_TMAX * MC_H];
	static float rx[MC_TMAX * MC_H], rw[MC_TMAX * MC_K];
	static int32_t idx[MC_TMAX * MC_K], ridx[MC_TMAX * MC_K];
	uint32_t T = mc_ntok(rank, size, rd), nl;
	cs_req_t r;

	mc_inputs(rank, size, rd, x, idx, w);
	if (cs_moe_dispatch(l, T, x, idx, w, &r))
		return 20;
	if (cs_wait(c, r, wait_ns)) {
		fprintf(stderr, "rank %d dispatch: %s\n", rank, cs_errmsg(c));
		return 21;
	}
	nl = cs_moe_local_experts(l);
	if (nl != MC_PER)
		return 22;
	for (uint32_t i = 0; i < nl; i++) {
		uint32_t e, n, k = 0;
		const float *rows;
		const uint32_t *sr, *st, *ss;
		float *y;

		if (cs_moe_rows(l, i, &e, &n, &rows, &sr, &st, &ss) ||
		    e != (uint32_t)(rank * MC_PER) + i)
			return 23;
		/* the reference: sources ascending, their tokens ascending */
		for (int s = 0; s < size; s++) {
			uint32_t Ts = mc_ntok(s, size, rd);

			mc_inputs(s, size, rd, rx, ridx, rw);
			for (uint32_t t = 0; t < Ts; t++)
				for (uint32_t j = 0; j < MC_K; j++) {
					if (ridx[t * MC_K + j] != (int32_t)e)
						continue;
					if (k >= n || sr[k] != (uint32_t)s ||
					    st[k] != t || ss[k] != j ||
					    memcmp(&rows[k * MC_H],
						   &rx[t * MC_H], 4 * MC_H))
						return 24;
					k++;
				}
		}
		if (k != n)
			return 25;
		y = cs_moe_layer_out(l, i);
		for (uint32_t q = 0; q < n * MC_H; q++)
			y[q] = mc_f((int32_t)e, rows[q]);
	}
	for (uint32_t q = 0; q < T * MC_H; q++)
		out[q] = -1234.0f;
	if (cs_moe_combine(l, NULL, out, &r))
		return 26;
	if (cs_wait(c, r, wait_ns)) {
		fprintf(stderr, "rank %d combine: %s\n", rank, cs_errmsg(c));
		return 27;
	}
	for (uint32_t t = 0; t < T; t++)
		for (uint32_t h = 0; h < MC_H; h++) {
			float acc = mc_ref(&idx[t * MC_K], &w[t * MC_K],
					   x[t * MC_H + h], size, G),
			      slot = mc_ref(&idx[t * MC_K], &w[t * MC_K],
					    x[t * MC_H + h], size, 0);

			mc_differ += memcmp(&acc, &slot, 4) != 0;
			if (memcmp(&acc, &out[t * MC_H + h], 4)) {
				fprintf(stderr,
					"rank %d token %u [%u]: %g, not %g\n",
					rank, t, h, out[t * MC_H + h], acc);
				return 28;
			}
		}
	return 0;
}

static int mc_round(struct cs_client *c, struct cs_moe_layer *l, int rank,
		    int size, int rd, int64_t wait_ns)
{
	return mc_round_ns(c, l, rank, size, rd, wait_ns, 0);
}

/* Bad input on rank @bad (kind @how): every rank's dispatch fails with
 * CS_ERR_BAD_DESC naming it. */
static int mc_bad(struct cs_client *c, struct cs_moe_layer *l, int rank,
		  int size, int bad, int how, int64_t wait_ns)
{
	static float x[(MC_TMAX + 1) * MC_H], w[(MC_TMAX + 1) * MC_K];
	static int32_t idx[(MC_TMAX + 1) * MC_K];
	uint32_t T = MC_TMAX;
	char want[32];
	cs_req_t r;
	int ret;

	mc_inputs(rank, size, 0, x, idx, w);
	T = mc_ntok(rank, size, 0);
	if (rank == bad) {
		if (!T)
			T = 1;
		switch (how) {
		case 0: /* expert index = E */
			idx[0] = MC_PER * size;
			break;
		case 1: /* negative, not "none" */
			idx[0] = -2;
			break;
		case 2: /* too many tokens */
			T = MC_TMAX + 1;
			break;
		default: /* NULL buffer */
			if (cs_moe_dispatch(l, T, NULL, idx, w, &r))
				return 30;
			goto wait;
		}
	}
	ret = cs_moe_dispatch(l, T, x, idx, w, &r);
	if (ret) {
		fprintf(stderr, "rank %d bad input %d: posted: %d %s\n", rank,
			how, ret, cs_errmsg(c));
		return 30;
	}
wait:
	ret = cs_wait(c, r, wait_ns);
	snprintf(want, sizeof(want), "rank %d", bad);
	if (ret != CS_ERR_BAD_DESC || !strstr(cs_errmsg(c), want)) {
		fprintf(stderr, "rank %d bad input %d: %d %s\n", rank, how, ret,
			cs_errmsg(c));
		return 31;
	}
	if (cs_moe_rows(l, 0, &(uint32_t){ 0 }, &(uint32_t){ 0 },
			&(const float *){ NULL }, &(const uint32_t *){ NULL },
			&(const uint32_t *){ NULL },
			&(const uint32_t *){ NULL }) != -ENOENT)
		return 32;
	return 0;
}

/* The whole check: @rounds good rounds, the four bad inputs, one more
 * good round (the group goes on). Returns 0 or a code. */
static int mc_run(struct cs_client *c, struct cs_group *g, int rank, int size,
		  int rounds, int64_t wait_ns)
{
	struct cs_moe_layer_cfg cfg = { .tokens = MC_TMAX,
					.hidden = MC_H,
					.topk = MC_K,
					.experts = (uint32_t)(MC_PER * size),
					.experts_per_rank = MC_PER };
	struct cs_moe_layer *l;
	int ret = 0;

	if (cs_moe_layer_create(g, &cfg, &l))
		return 10;
	for (int rd = 0; rd < rounds && !ret; rd++)
		ret = mc_round(c, l, rank, size, rd, wait_ns);
	for (int how = 0; how < 4 && !ret; how++)
		ret = mc_bad(c, l, rank, size, (how + 1) % size, how, wait_ns);
	if (!ret)
		ret = mc_round(c, l, rank, size, rounds, wait_ns);
	cs_moe_layer_free(l);
	return ret;
}

/* Layers whose @flags on the odd ranks differ from the even ranks'
 * (@odd): the dispatch refused on every rank naming rank 1, nothing sent.
 * Returns 0 or a code. */
static int mc_differ_refused(struct cs_client *c, struct cs_group *g, int rank,
			     int size, uint32_t flags, uint32_t odd,
			     int64_t wait_ns)
{
	struct cs_moe_layer_cfg cfg = { .tokens = MC_TMAX,
					.hidden = MC_H,
					.topk = MC_K,
					.experts = (uint32_t)(MC_PER * size),
					.experts_per_rank = MC_PER,
					.flags = rank % 2 ? odd : flags };
	static float x[MC_TMAX * MC_H], w[MC_TMAX * MC_K];
	static int32_t idx[MC_TMAX * MC_K];
	struct cs_moe_layer *l;
	cs_req_t r;
	int ret;

	if (cs_moe_layer_create(g, &cfg, &l))
		return 42;
	mc_inputs(rank, size, 0, x, idx, w);
	if (cs_moe_dispatch(l, mc_ntok(rank, size, 0), x, idx, w, &r)) {
		cs_moe_layer_free(l);
		return 43;
	}
	ret = cs_wait(c, r, wait_ns);
	if (ret != CS_ERR_BAD_DESC ||
	    !strstr(cs_errmsg(c), "rank 1 posted another kind of exchange")) {
		fprintf(stderr, "rank %d layers that differ (%u, %u): %d %s\n",
			rank, flags, odd, ret, cs_errmsg(c));
		cs_moe_layer_free(l);
		return 44;
	}
	if (rank == 0)
		printf("moe flags %u / %u on the odd ranks: refused: %s\n",
		       flags, odd, cs_errmsg(c));
	cs_moe_layer_free(l);
	return 0;
}

/*
 * A layer with @flags (CS_MOE_LAYER_NODE_SUM and/or CS_MOE_LAYER_NODE_ROWS)
 * with @G ranks per node: @rounds rounds, every row and every bit checked
 * (against the node-order reference with NODE_SUM); then the four bad
 * inputs; then layers that differ (the flags on the odd ranks only; with
 * both flags, NODE_SUM alone on the odd ranks too): the dispatch refused
 * on every rank naming rank 1, nothing sent; then a proper round.
 */
static int mc_run_flags(struct cs_client *c, struct cs_group *g, int rank,
			int size, int G, uint32_t flags, int rounds,
			int64_t wait_ns)
{
	struct cs_moe_layer_cfg cfg = { .tokens = MC_TMAX,
					.hidden = MC_H,
					.topk = MC_K,
					.experts = (uint32_t)(MC_PER * size),
					.experts_per_rank = MC_PER,
					.flags = flags };
	const int RG = flags & CS_MOE_LAYER_NODE_SUM ? G : 0;
	static float w[MC_TMAX * MC_K];
	struct cs_moe_layer *l;
	int ret = 0;

	if (cs_moe_layer_create(g, &cfg, &l))
		return 40;
	if (RG && cs_moe_set_weights(l, w) != -EINVAL)
		return 41;
	mc_differ = 0;
	for (int rd = 0; rd < rounds && !ret; rd++)
		ret = mc_round_ns(c, l, rank, size, rd, wait_ns, RG);
	/* the data tells the node order from the slot order on rank 0
	 * (one node: the same order) */
	if (!ret && RG && rank == 0 && size > G) {
		printf("moe node-sum: %ld values of rank 0 differ from the "
		       "slot order's\n",
		       mc_differ);
		if (!mc_differ)
			ret = 46;
	}
	for (int how = 0; how < 4 && !ret; how++)
		ret = mc_bad(c, l, rank, size, (how + 1) % size, how, wait_ns);
	cs_moe_layer_free(l);
	if (!ret)
		ret = mc_differ_refused(c, g, rank, size, 0, flags, wait_ns);
	if (!ret && flags == (CS_MOE_LAYER_NODE_SUM | CS_MOE_LAYER_NODE_ROWS))
		ret = mc_differ_refused(c, g, rank, size, flags,
					CS_MOE_LAYER_NODE_SUM, wait_ns);
	if (ret)
		return ret;
	if (cs_moe_layer_create(g, &cfg, &l))
		return 45;
	ret = mc_round_ns(c, l, rank, size, rounds, wait_ns, RG);
	cs_moe_layer_free(l);
	return ret;
}

#endif

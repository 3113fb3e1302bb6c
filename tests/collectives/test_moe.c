/* SPDX-License-Identifier: MIT */
/* MoE dispatch/combine (collectives/moe.h): refusals of bad routing
 * before anything is sent, and the dispatch rows a rank builds. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "collectives/moe.h"
#include "collstack/types.h"

static const uint32_t erank[4] = { 0, 0, 1, 1 };

static struct cs_moe_cfg cfg(void)
{
	return (struct cs_moe_cfg){
		.nranks = 2,
		.rank = 0,
		.ranks_per_node = 1,
		.tokens = 2,
		.max_tokens = 2,
		.hidden = 3,
		.topk = 2,
		.experts = 4,
		.expert_rank = erank,
		.mtu_payload = 512,
		.group = 1,
		.epoch = 1,
		.op_dispatch = 1,
		.op_combine = 2,
	};
}

static int try(const int32_t *idx)
{
	struct cs_moe_cfg c = cfg();
	float x[6] = { 0 }, w[4] = { 1, 1, 1, 1 };
	struct cs_moe *m = NULL;
	int ret = cs_moe_create(&c, x, idx, w, &m);

	cs_moe_free(m);
	return ret;
}

Test(moe, bad_routing_refused)
{
	const int32_t ok[4] = { 0, 2, -1, 3 };
	const int32_t big[4] = { 0, 4, 1, 2 }; /* expert >= E */
	const int32_t neg[4] = { 0, -2, 1, 2 }; /* negative, not -1 */
	const int32_t dup[4] = { 1, 1, 0, 2 }; /* same expert twice */
	struct cs_moe_cfg c = cfg();
	uint32_t bad_map[4] = { 0, 0, 2, 1 }; /* rank 2 of 2 */
	float x[6] = { 0 }, w[4] = { 0 };
	struct cs_moe *m = NULL;

	cr_assert_eq(try(ok), 0);
	cr_assert_eq(try(big), CS_ERR_BAD_DESC);
	cr_assert_eq(try(neg), CS_ERR_BAD_DESC);
	cr_assert_eq(try(dup), CS_ERR_BAD_DESC);
	c.expert_rank = bad_map;
	cr_assert_eq(cs_moe_create(&c, x, ok, w, &m), CS_ERR_BAD_DESC);
	c = cfg();
	c.topk = CS_MOE_MAX_TOPK + 1;
	cr_assert_eq(cs_moe_create(&c, x, ok, w, &m), -EINVAL);
	c = cfg();
	c.tokens = 3; /* more than max_tokens */
	cr_assert_eq(cs_moe_create(&c, x, ok, w, &m), -EINVAL);
}

Test(moe, a_token_travels_once_per_rank)
{
	/* token 0 -> experts 0 (rank 0) and 2 (rank 1); token 1 -> 3 and
	 * 2 (both rank 1): rank 1 gets two rows, not three */
	const int32_t idx[4] = { 0, 2, 3, 2 };
	struct cs_moe_cfg c = cfg();
	float x[6] = { 1, 2, 3, 4, 5, 6 }, w[4] = { 1, 1, 1, 1 };
	struct cs_moe *m = NULL;
	struct cs_a2a_params p;

	cr_assert_eq(cs_moe_create(&c, x, idx, w, &m), 0);
	cs_moe_dispatch_params(m, &p);
	cr_assert(p.flags & CS_A2A_F_RECV_DYNAMIC);
	cr_assert_eq(p.esz, 4 * (2 + 2 + 3));
	cr_assert_eq(p.sendcounts[0], 1); /* token 0 for expert 0 */
	cr_assert_eq(p.sendcounts[1], 2, "3 slots, 2 rows");
	cr_assert_null(p.recvcounts);
	cs_moe_free(m);
}

/* ---- rows once per node (CS_MOE_F_NODE_ROWS) ---------------------------- */

#define NR 4 /* 2 nodes of 2 ranks */
#define NT 6
#define NK 3
#define NH 2

static const uint32_t nerank[8] = { 0, 0, 1, 1, 2, 2, 3, 3 };

struct nworld {
	struct cs_moe *m[NR];
	float x[NR][NT * NH], w[NR][NT * NK];
	int32_t idx[NR][NT * NK];
	uint8_t *recv[NR];
	uint64_t rc[NR][NR], rd[NR][NR];
	uint64_t rows; /* dispatch rows sent, all ranks */
};

/* Experts (r + t + 3j) % 8 instead of (r + t + j) % 8: a token's lowest
 * slot on a node is on either of its ranks (node_rows_fwd_*). */
static bool nw_mix;

/* Build the 4 layers and deliver every dispatch block by hand. */
static void nw_dispatch(struct nworld *w, uint32_t flags)
{
	struct cs_a2a_params p[NR];

	memset(w, 0, sizeof(*w));
	for (uint32_t r = 0; r < NR; r++) {
		struct cs_moe_cfg c = {
			.nranks = NR,
			.rank = r,
			.ranks_per_node = 2,
			.tokens = NT,
			.max_tokens = NT,
			.hidden = NH,
			.topk = NK,
			.experts = 8,
			.expert_rank = nerank,
			.mtu_payload = 512,
			.flags = flags,
			.group = 1,
			.epoch = 1,
			.op_dispatch = 1,
			.op_combine = 2,
		};

		for (uint32_t t = 0; t < NT; t++) {
			for (uint32_t h = 0; h < NH; h++)
				w->x[r][t * NH + h] =
					(float)(r * 100 + t * 10 + h) * 0.37f;
			for (uint32_t j = 0; j < NK; j++) {
				/* token t: experts (r + t + j) % 8, with a
				 * "none" now and then */
				w->idx[r][t * NK + j] =
					(t + j) % 5 == 4
						? -1
						: (int32_t)((r + t +
							     (nw_mix ? 3 : 1) *
								     j) %
							    8);
				w->w[r][t * NK + j] = 0.1f * (float)(j + 1) +
						      0.013f * (float)t;
			}
		}
		cr_assert_eq(cs_moe_create(&c, w->x[r], w->idx[r], w->w[r],
					   &w->m[r]),
			     0);
		cs_moe_dispatch_params(w->m[r], &p[r]);
		cr_assert_eq(p[r].flags & CS_MOE_F_NODE_ROWS, 0,
			     "not an all-to-all flag");
	}
	for (uint32_t d = 0; d < NR; d++) {
		uint64_t at = 0;

		w->recv[d] = malloc(NR * NT * p[d].esz);
		for (uint32_t s = 0; s < NR; s++) {
			w->rc[d][s] = p[s].sendcounts[d];
			w->rd[d][s] = at;
			memcpy(w->recv[d] + at * p[d].esz,
			       (const uint8_t *)p[s].sendbuf +
				       p[s].sdispls[d] * p[s].esz,
			       w->rc[d][s] * p[s].esz);
			at += w->rc[d][s];
			w->rows += w->rc[d][s];
		}
	}
}

static int nw_finish(struct nworld *w, uint32_t r, bool node)
{
	uint32_t b = r / 2;
	const void *rb[2] = { w->recv[2 * b], w->recv[2 * b + 1] };
	const uint64_t *rc[2] = { w->rc[2 * b], w->rc[2 * b + 1] };
	const uint64_t *rd[2] = { w->rd[2 * b], w->rd[2 * b + 1] };

	if (!node)
		return cs_moe_dispatch_finish_at(w->m[r], w->recv[r], w->rc[r],
						 w->rd[r]);
	return cs_moe_dispatch_finish_node(w->m[r], 2, rb, rc, rd);
}

static void nw_free(struct nworld *w)
{
	for (uint32_t r = 0; r < NR; r++) {
		cs_moe_free(w->m[r]);
		free(w->recv[r]);
	}
}

Test(moe, node_rows_deliver_what_rank_rows_do)
{
	static struct nworld a, b;

	nw_dispatch(&a, 0);
	nw_dispatch(&b, CS_MOE_F_NODE_ROWS);
	cr_assert_lt(b.rows, a.rows, "a token crosses once per node");
	for (uint32_t r = 0; r < NR; r++) {
		cr_assert_eq(nw_finish(&a, r, false), 0);
		cr_assert_eq(nw_finish(&b, r, true), 0);
		for (uint32_t i = 0;; i++) {
			uint32_t e1, e2, n1, n2;
			const float *r1, *r2;
			const uint32_t *s1, *s2, *t1, *t2, *j1, *j2;
			int g1 = cs_moe_local(a.m[r], i, &e1, &n1, &r1, &s1,
					      &t1, &j1);
			int g2 = cs_moe_local(b.m[r], i, &e2, &n2, &r2, &s2,
					      &t2, &j2);

			cr_assert_eq(g1, g2);
			if (g1)
				break;
			cr_assert_eq(e1, e2);
			cr_assert_eq(n1, n2, "rank %u expert %u", r, e1);
			cr_assert(n1 > 0);
			cr_assert_arr_eq(s1, s2, n1 * 4);
			cr_assert_arr_eq(t1, t2, n1 * 4,
					 "(source, token) order");
			cr_assert_arr_eq(j1, j2, n1 * 4);
			cr_assert_arr_eq(r1, r2, n1 * NH * 4);
		}
	}
	nw_free(&a);
	nw_free(&b);
}

Test(moe, node_rows_spread_and_checked)
{
	static struct nworld w;
	uint64_t in[NR] = { 0 };
	uint32_t *row;

	nw_dispatch(&w, CS_MOE_F_NODE_ROWS);
	/* the rows for a node are spread over its two ranks */
	for (uint32_t d = 0; d < NR; d++)
		for (uint32_t s = 0; s < NR; s++)
			in[d] += w.rc[d][s];
	cr_assert_leq(in[0] > in[1] ? in[0] - in[1] : in[1] - in[0], 4);
	cr_assert_leq(in[2] > in[3] ? in[2] - in[3] : in[3] - in[2], 4);
	/* a layer with the flag reads the node's rows, not one rank's */
	cr_assert_eq(nw_finish(&w, 0, false), -EINVAL);
	/* a row naming an expert of the other node is refused */
	cr_assert_gt(w.rc[0][1], 0);
	row = (uint32_t *)(w.recv[0] + w.rd[0][1] * 4 * (2 + NK + NH));
	for (uint32_t j = 0; j < NK; j++)
		if (row[1] >> j & 1)
			row[2 + j] = 7; /* rank 3's: node 1 */
	cr_assert_eq(nw_finish(&w, 1, true), CS_ERR_PROTO);
	nw_free(&w);
}

static float nw_expert(uint32_t e, float v)
{
	return v * (1.0f + 0.31f * (float)e) + 0.7f;
}

Test(moe, node_sum_partial_sums_per_node)
{
	static struct nworld w;
	struct cs_a2a_params p[NR];
	float out[NR][NT * NH];
	uint8_t *crecv[NR];
	uint64_t differ = 0;

	nw_dispatch(&w, CS_MOE_F_NODE_ROWS | CS_MOE_F_NODE_SUM);
	for (uint32_t r = 0; r < NR; r++) {
		uint32_t e, n;
		const float *rows;
		const uint32_t *src, *tok, *slot;

		cr_assert_eq(nw_finish(&w, r, true), 0);
		for (uint32_t i = 0;
		     !cs_moe_local(w.m[r], i, &e, &n, &rows, &src, &tok, &slot);
		     i++) {
			float *y = cs_moe_expert_out(w.m[r], i);

			for (uint32_t v = 0; v < n * NH; v++)
				y[v] = nw_expert(e, rows[v]);
		}
	}
	for (uint32_t r = 0; r < NR; r++) {
		struct cs_moe *nm[2] = { w.m[r / 2 * 2], w.m[r / 2 * 2 + 1] };

		cr_assert_eq(cs_moe_combine_params_node(w.m[r], nm, 2, &p[r]),
			     0);
		cr_assert_eq(cs_moe_combine_params_node(w.m[r], nm, 2, &p[r]),
			     -EINVAL, "once");
	}
	/* deliver: one row back per dispatch row */
	for (uint32_t d = 0; d < NR; d++) {
		crecv[d] = p[d].recvbuf;
		for (uint32_t s = 0; s < NR; s++) {
			cr_assert_eq(p[s].sendcounts[d], p[d].recvcounts[s]);
			cr_assert_eq(p[d].recvcounts[s], w.rc[s][d],
				     "as many rows back as went out");
			memcpy(crecv[d] + p[d].rdispls[s] * p[d].esz,
			       (const uint8_t *)p[s].sendbuf +
				       p[s].sdispls[d] * p[s].esz,
			       p[d].recvcounts[s] * p[d].esz);
		}
	}
	for (uint32_t r = 0; r < NR; r++) {
		cr_assert_eq(cs_moe_combine_finish(w.m[r], out[r]), 0);
		for (uint32_t t = 0; t < NT; t++)
			for (uint32_t h = 0; h < NH; h++) {
				float acc = 0, slot = 0;

				for (uint32_t b = 0; b < 2; b++) {
					float part = 0;
					bool any = false;

					for (uint32_t j = 0; j < NK; j++) {
						int32_t e =
							w.idx[r][t * NK + j];

						if (e < 0 || nerank[e] / 2 != b)
							continue;
						any = true;
						part += w.w[r][t * NK + j] *
							nw_expert(
								(uint32_t)e,
								w.x[r][t * NH +
								       h]);
					}
					if (any)
						acc += part;
				}
				for (uint32_t j = 0; j < NK; j++) {
					int32_t e = w.idx[r][t * NK + j];

					if (e >= 0)
						slot += w.w[r][t * NK + j] *
							nw_expert(
								(uint32_t)e,
								w.x[r][t * NH +
								       h]);
				}
				cr_assert(!memcmp(&out[r][t * NH + h], &acc, 4),
					  "rank %u token %u: %a, want %a", r, t,
					  (double)out[r][t * NH + h],
					  (double)acc);
				differ += memcmp(&acc, &slot, 4) != 0;
			}
	}
	cr_assert_gt(differ, 0, "the node order is not the slot order here");
	/* a partial sum from a rank the token's row did not go to */
	{
		uint32_t *row = (uint32_t *)crecv[0];

		row[0] = (row[0] + 1) % NT;
		cr_assert_eq(cs_moe_combine_finish(w.m[0], out[0]),
			     CS_ERR_PROTO);
	}
	nw_free(&w);
}

/* Write every rank's expert outputs (nw_expert of its rows). */
static void nw_outputs(struct nworld *w, bool node)
{
	for (uint32_t r = 0; r < NR; r++) {
		uint32_t e, n;
		const float *rows;
		const uint32_t *src, *tok, *slot;

		cr_assert_eq(nw_finish(w, r, node), 0);
		for (uint32_t i = 0; !cs_moe_local(w->m[r], i, &e, &n, &rows,
						   &src, &tok, &slot);
		     i++) {
			float *y = cs_moe_expert_out(w->m[r], i);

			for (uint32_t v = 0; v < n * NH; v++)
				y[v] = nw_expert(e, rows[v]);
		}
	}
}

/* Deliver the blocks of @p (every rank's) into fresh buffers @recv. */
static void nw_deliver(const struct cs_a2a_params *p, uint8_t **recv)
{
	for (uint32_t d = 0; d < NR; d++) {
		uint64_t rows = 0;

		for (uint32_t s = 0; s < NR; s++)
			rows += p[d].recvcounts[s];
		recv[d] = calloc(rows + 1, p[d].esz);
		for (uint32_t s = 0; s < NR; s++) {
			cr_assert_eq(p[s].sendcounts[d], p[d].recvcounts[s],
				     "%u -> %u: both ends agree", s, d);
			memcpy(recv[d] + p[d].rdispls[s] * p[d].esz,
			       (const uint8_t *)p[s].sendbuf +
				       p[s].sdispls[d] * p[s].esz,
			       p[d].recvcounts[s] * p[d].esz);
		}
	}
}

/*
 * CS_MOE_F_NODE_SUM_GATHER (the trainers' path): rank rows, the outputs
 * gathered inside the node to the token's leader, one row per (token,
 * node) back: the same bits as CS_MOE_F_NODE_ROWS | CS_MOE_F_NODE_SUM,
 * no gather row across nodes, fewer combine rows than per slot.
 */
Test(moe, node_sum_gather_same_bits)
{
	static struct nworld ns, ga, pl;
	struct cs_a2a_params p[NR], g[NR];
	static float o_ns[NR][NT * NH], o_ga[NR][NT * NH];
	uint8_t *crecv[NR], *grecv[NR];
	uint64_t rows_ga = 0, rows_pl = 0, cross = 0;

	/* the engine's node sum (shared memory), the reference */
	nw_dispatch(&ns, CS_MOE_F_NODE_ROWS | CS_MOE_F_NODE_SUM);
	nw_outputs(&ns, true);
	for (uint32_t r = 0; r < NR; r++) {
		struct cs_moe *nm[2] = { ns.m[r / 2 * 2], ns.m[r / 2 * 2 + 1] };

		cr_assert_eq(cs_moe_combine_params_node(ns.m[r], nm, 2, &p[r]),
			     0);
	}
	nw_deliver(p, crecv);
	for (uint32_t r = 0; r < NR; r++) {
		cr_assert_eq(
			cs_moe_combine_finish_at(ns.m[r], crecv[r], o_ns[r]),
			0);
		free(crecv[r]);
	}
	/* the per-slot combine: its rows, to compare */
	nw_dispatch(&pl, 0);
	nw_outputs(&pl, false);
	for (uint32_t r = 0; r < NR; r++) {
		cs_moe_combine_params(pl.m[r], &p[r]);
		for (uint32_t d = 0; d < NR; d++)
			rows_pl += d / 2 != r / 2 ? p[r].sendcounts[d] : 0;
	}
	/* the gather */
	nw_dispatch(&ga, CS_MOE_F_NODE_SUM_GATHER);
	nw_outputs(&ga, false);
	for (uint32_t r = 0; r < NR; r++) {
		cr_assert_eq(
			cs_moe_combine_params_node(ga.m[r], NULL, 2, &p[r]),
			-EINVAL);
		cr_assert_eq(cs_moe_gather_params(ga.m[r], &g[r]), 0);
		cr_assert_eq(cs_moe_gather_params(ga.m[r], &g[r]), -EINVAL,
			     "once");
		cr_assert_eq(g[r].esz, cs_moe_gather_row(ga.m[r]));
		for (uint32_t d = 0; d < NR; d++)
			if (d / 2 != r / 2)
				cr_assert_eq(g[r].sendcounts[d], 0,
					     "the gather stays in the node");
			else
				cross += g[r].sendcounts[d];
	}
	cr_assert_gt(cross, 0, "some outputs are gathered here");
	for (uint32_t d = 0; d < NR; d++) {
		/* the exchange sets the receive buffers: deliver into ours */
		g[d].recvbuf = NULL;
	}
	nw_deliver(g, grecv);
	for (uint32_t r = 0; r < NR; r++) {
		cr_assert_eq(cs_moe_combine_params_gathered(
				     ga.m[r], grecv[r], g[r].recvcounts,
				     g[r].rdispls, &p[r]),
			     0);
		for (uint32_t d = 0; d < NR; d++)
			rows_ga += d / 2 != r / 2 ? p[r].sendcounts[d] : 0;
	}
	nw_deliver(p, crecv);
	for (uint32_t r = 0; r < NR; r++) {
		cr_assert_eq(
			cs_moe_combine_finish_at(ga.m[r], crecv[r], o_ga[r]),
			0);
		cr_assert(!memcmp(o_ga[r], o_ns[r], sizeof(o_ga[r])),
			  "rank %u: the node sum's bits", r);
	}
	cr_assert_lt(rows_ga, rows_pl, "fewer rows across nodes (%llu, %llu)",
		     (unsigned long long)rows_ga, (unsigned long long)rows_pl);
	/* gathered rows that are not the ones expected: refused */
	{
		static struct nworld w2;
		struct cs_a2a_params g2[NR], p2;
		uint8_t *gr2[NR];
		uint64_t rc[NR];
		uint32_t r = 0, d;

		nw_dispatch(&w2, CS_MOE_F_NODE_SUM_GATHER);
		nw_outputs(&w2, false);
		for (uint32_t q = 0; q < NR; q++) {
			cr_assert_eq(cs_moe_gather_params(w2.m[q], &g2[q]), 0);
			g2[q].recvbuf = NULL;
		}
		nw_deliver(g2, gr2);
		while (r < NR && !g2[r].recvcounts[r ^ 1])
			r++;
		cr_assert_lt(r, NR, "a rank gathers from its neighbour");
		d = r ^ 1;
		/* one row fewer than expected */
		memcpy(rc, g2[r].recvcounts, sizeof(rc));
		rc[d]--;
		cr_assert_eq(cs_moe_combine_params_gathered(w2.m[r], gr2[r], rc,
							    g2[r].rdispls, &p2),
			     CS_ERR_PROTO);
		/* a row naming a source that sent no such token */
		nw_free(&w2);
		for (uint32_t q = 0; q < NR; q++)
			free(gr2[q]);
		nw_dispatch(&w2, CS_MOE_F_NODE_SUM_GATHER);
		nw_outputs(&w2, false);
		for (uint32_t q = 0; q < NR; q++) {
			cr_assert_eq(cs_moe_gather_params(w2.m[q], &g2[q]), 0);
			g2[q].recvbuf = NULL;
		}
		nw_deliver(g2, gr2);
		((uint32_t *)(gr2[r] + g2[r].rdispls[d] * g2[r].esz))[1] = NT;
		cr_assert_eq(cs_moe_combine_params_gathered(w2.m[r], gr2[r],
							    g2[r].recvcounts,
							    g2[r].rdispls, &p2),
			     CS_ERR_PROTO);
		nw_free(&w2);
		for (uint32_t q = 0; q < NR; q++)
			free(gr2[q]);
	}
	for (uint32_t r = 0; r < NR; r++) {
		free(crecv[r]);
		free(grecv[r]);
	}
	nw_free(&ns);
	nw_free(&pl);
	nw_free(&ga);
}

/* CS_MOE_F_NODE_ROWS_FWD: the forward exchange of every rank, delivered by
 * hand (its receive counts from the senders'), into @fr / @fc / @fd. */
static void nw_forward(struct nworld *w, uint8_t **fr, uint64_t (*fc)[NR],
		       uint64_t (*fd)[NR], uint64_t *cross)
{
	struct cs_a2a_params p[NR];

	for (uint32_t r = 0; r < NR; r++) {
		cr_assert_eq(cs_moe_forward_params(w->m[r], w->recv[r],
						   w->rc[r], w->rd[r], &p[r]),
			     0);
		cr_assert_eq(cs_moe_forward_params(w->m[r], w->recv[r],
						   w->rc[r], w->rd[r], &p[r]),
			     -EINVAL, "once");
		cr_assert_eq(p[r].esz, cs_moe_forward_row(w->m[r]));
		for (uint32_t d = 0; d < NR; d++)
			cr_assert(d / 2 == r / 2 || !p[r].sendcounts[d],
				  "the forward stays in the node");
	}
	for (uint32_t r = 0; r < NR; r++)
		cr_assert(p[r].sendcounts[r ^ 1],
			  "rank %u forwards rows to its neighbour", r);
	for (uint32_t d = 0; d < NR; d++) {
		uint64_t at = 0;

		fr[d] = malloc(NR * NT * p[d].esz);
		for (uint32_t s = 0; s < NR; s++) {
			fc[d][s] = p[s].sendcounts[d];
			fd[d][s] = at;
			memcpy(fr[d] + at * p[d].esz,
			       (const uint8_t *)p[s].sendbuf +
				       p[s].sdispls[d] * p[s].esz,
			       fc[d][s] * p[d].esz);
			at += fc[d][s];
			*cross += fc[d][s];
		}
	}
}

/* The rows, sources, tokens and slots of every local expert: equal. */
static void nw_same_rows(struct nworld *a, struct nworld *b)
{
	for (uint32_t r = 0; r < NR; r++)
		for (uint32_t i = 0;; i++) {
			uint32_t e1, e2, n1, n2;
			const float *r1, *r2;
			const uint32_t *s1, *s2, *t1, *t2, *j1, *j2;
			int g1 = cs_moe_local(a->m[r], i, &e1, &n1, &r1, &s1,
					      &t1, &j1);
			int g2 = cs_moe_local(b->m[r], i, &e2, &n2, &r2, &s2,
					      &t2, &j2);

			cr_assert_eq(g1, g2);
			if (g1)
				break;
			cr_assert_eq(e1, e2);
			cr_assert_eq(n1, n2, "rank %u expert %u", r, e1);
			cr_assert_arr_eq(s1, s2, n1 * 4);
			cr_assert_arr_eq(t1, t2, n1 * 4,
					 "(source, token) order");
			cr_assert_arr_eq(j1, j2, n1 * 4);
			cr_assert_arr_eq(r1, r2, n1 * NH * 4);
		}
}

static uint64_t nw_cross_rows(const struct nworld *w)
{
	uint64_t k = 0;

	for (uint32_t d = 0; d < NR; d++)
		for (uint32_t s = 0; s < NR; s++)
			k += s / 2 != d / 2 ? w->rc[d][s] : 0;
	return k;
}

/*
 * CS_MOE_F_NODE_ROWS_FWD (the trainers' node rows): rows to the token's
 * leader of each node, forwarded inside the node: every rank gets what
 * rank rows give it, fewer rows cross nodes; with the gather, the node
 * sum's bits; rows not for this rank refused.
 */
Test(moe, node_rows_fwd_deliver_what_rank_rows_do)
{
	static struct nworld a, f, fg, ga;
	static uint8_t *fr[NR], *gr[NR];
	static uint64_t fc[NR][NR], fd[NR][NR], gc[NR][NR], gd[NR][NR];
	uint64_t fwd = 0, gfwd = 0;

	nw_mix = true;
	nw_dispatch(&a, 0);
	nw_dispatch(&f, CS_MOE_F_NODE_ROWS_FWD);
	cr_assert_lt(nw_cross_rows(&f), nw_cross_rows(&a),
		     "a token crosses once per node (%llu, %llu)",
		     (unsigned long long)nw_cross_rows(&f),
		     (unsigned long long)nw_cross_rows(&a));
	cr_assert_eq(nw_finish(&f, 0, false), -EINVAL, "forward first");
	nw_forward(&f, fr, fc, fd, &fwd);
	cr_assert_gt(fwd, 0, "some rows are forwarded");
	for (uint32_t r = 0; r < NR; r++) {
		cr_assert_eq(nw_finish(&a, r, false), 0);
		cr_assert_eq(
			cs_moe_dispatch_finish_fwd(f.m[r], fr[r], fc[r], fd[r]),
			0);
	}
	nw_same_rows(&a, &f);
	/* with the node sum's gather: the same combine bits */
	nw_dispatch(&ga, CS_MOE_F_NODE_SUM_GATHER);
	nw_dispatch(&fg, CS_MOE_F_NODE_ROWS_FWD | CS_MOE_F_NODE_SUM_GATHER);
	nw_forward(&fg, gr, gc, gd, &gfwd);
	for (uint32_t r = 0; r < NR; r++) {
		cr_assert_eq(cs_moe_dispatch_finish_fwd(fg.m[r], gr[r], gc[r],
							gd[r]),
			     0);
		cr_assert_eq(nw_finish(&ga, r, false), 0);
	}
	nw_same_rows(&ga, &fg);
	{
		struct cs_moe *two[2][NR];
		static float o[2][NR][NT * NH];

		for (uint32_t r = 0; r < NR; r++) {
			two[0][r] = ga.m[r];
			two[1][r] = fg.m[r];
		}
		for (int v = 0; v < 2; v++) {
			struct cs_a2a_params g[NR], p[NR];
			uint8_t *grecv[NR], *crecv[NR];

			for (uint32_t r = 0; r < NR; r++) {
				uint32_t e, n;
				const float *rows;
				const uint32_t *s, *t, *j;

				for (uint32_t i = 0;
				     !cs_moe_local(two[v][r], i, &e, &n, &rows,
						   &s, &t, &j);
				     i++) {
					float *y =
						cs_moe_expert_out(two[v][r], i);

					for (uint32_t k = 0; k < n * NH; k++)
						y[k] = nw_expert(e, rows[k]);
				}
				cr_assert_eq(
					cs_moe_gather_params(two[v][r], &g[r]),
					0);
				g[r].recvbuf = NULL;
			}
			nw_deliver(g, grecv);
			for (uint32_t r = 0; r < NR; r++)
				cr_assert_eq(cs_moe_combine_params_gathered(
						     two[v][r], grecv[r],
						     g[r].recvcounts,
						     g[r].rdispls, &p[r]),
					     0);
			nw_deliver(p, crecv);
			for (uint32_t r = 0; r < NR; r++) {
				cr_assert_eq(cs_moe_combine_finish_at(two[v][r],
								      crecv[r],
								      o[v][r]),
					     0);
				free(crecv[r]);
				free(grecv[r]);
			}
		}
		cr_assert(!memcmp(o[0], o[1], sizeof(o[0])),
			  "the node sum's bits");
	}
	nw_mix = false;
	nw_free(&a);
	nw_free(&f);
	nw_free(&fg);
	nw_free(&ga);
	for (uint32_t r = 0; r < NR; r++) {
		free(fr[r]);
		free(gr[r]);
	}
}

Test(moe, node_rows_fwd_checked)
{
	static struct nworld w;
	static uint8_t *fr[NR];
	static uint64_t fc[NR][NR], fd[NR][NR];
	struct cs_a2a_params p;
	uint64_t fwd = 0, rc[NR];
	uint32_t r = 0, s, d;

	nw_mix = true;
	/* a first-exchange row for a token another rank of the node leads */
	nw_dispatch(&w, CS_MOE_F_NODE_ROWS_FWD);
	while (r < NR && !w.rc[r][r ^ 2])
		r++;
	cr_assert_lt(r, NR);
	memset(rc, 0, sizeof(rc));
	rc[r ^ 2] = w.rc[r][r ^ 2];
	cr_assert_eq(
		cs_moe_forward_params(w.m[r ^ 1], w.recv[r], rc, w.rd[r], &p),
		CS_ERR_PROTO, "rank %u's rows, not %u's", r, r ^ 1);
	nw_free(&w);
	/* forwarded rows: from another node, or a token twice */
	nw_dispatch(&w, CS_MOE_F_NODE_ROWS_FWD);
	nw_forward(&w, fr, fc, fd, &fwd);
	for (r = 0; r < NR && !fc[r][r ^ 1]; r++)
		;
	cr_assert_lt(r, NR, "a rank is forwarded rows");
	s = r ^ 1;
	d = r ^ 2; /* a rank of the other node */
	memcpy(rc, fc[r], sizeof(rc));
	rc[d] = rc[s];
	rc[s] = 0;
	{
		uint64_t rd[NR];

		memcpy(rd, fd[r], sizeof(rd));
		rd[d] = rd[s];
		cr_assert_eq(cs_moe_dispatch_finish_fwd(w.m[r], fr[r], rc, rd),
			     CS_ERR_PROTO, "not from this node");
	}
	/* the first forwarded row a second time */
	cr_assert_gt(fc[r][s], 1);
	{
		uint8_t *row = fr[r] + fd[r][s] * cs_moe_forward_row(w.m[r]);

		memcpy(row + cs_moe_forward_row(w.m[r]), row,
		       cs_moe_forward_row(w.m[r]));
		cr_assert_eq(
			cs_moe_dispatch_finish_fwd(w.m[r], fr[r], fc[r], fd[r]),
			CS_ERR_PROTO, "a token twice");
	}
	nw_free(&w);
	for (uint32_t q = 0; q < NR; q++)
		free(fr[q]);
	nw_mix = false;
}

/* SPDX-License-Identifier: MIT */
/* MoE dispatch and combine on the all-to-all engine (moe.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/moe.h"
#include "collstack/types.h"

/*
 * Rows on the wire (u32 words, host order like the rest of the payload):
 *   dispatch: token, slot mask, expert[K], x[H]     (f32 values)
 *   combine:  token, slot, y[H]
 * The engine's element is one row, so counts are rows.
 */

struct cs_moe {
	struct cs_moe_cfg c;
	uint32_t *erank;
	const float *x, *w;
	const int32_t *idx;
	uint32_t n, K, H, T;
	uint32_t G; /* ranks per node */
	bool node_rows; /* CS_MOE_F_NODE_ROWS with G > 1 */
	bool node_sum; /* CS_MOE_F_NODE_SUM (and node_rows), or gather */
	bool gather; /* CS_MOE_F_NODE_SUM_GATHER */
	bool fwd; /* CS_MOE_F_NODE_ROWS_FWD */
	size_t drow, crow; /* row bytes */
	/* dispatch */
	uint64_t *dsc, *dsd;
	uint8_t *dsend, *drecv;
	uint64_t dsend_rows, drecv_cap;
	/* local experts and what they received */
	uint32_t nloc;
	uint32_t *loc_e, *loc_cnt;
	uint64_t *loc_off;
	int32_t *loc_of; /* [E]: local index or -1 */
	uint64_t ltotal;
	float *lrows, *lout;
	uint32_t *lsrc, *ltok, *lslot;
	/* node_sum: the dispatch rows this rank received and their sources,
	 * in (source, token) order */
	const uint32_t **rrow;
	uint32_t *rsrc;
	uint64_t nrrow;
	uint32_t *dest; /* node_rows: [T][M] the rank a token's row for
			 * node b goes to (UINT32_MAX: none); gather: the
			 * token's leader on node b */
	/* gather: each received row's [token, mask, ids[K], w[K]] (rrow
	 * points here), its leader on this node; the gather exchange */
	uint32_t *rcopy, *lead;
	uint64_t *gsc, *gsd, *grc, *grd;
	uint8_t *gsend;
	size_t grow;
	/* fwd: the first exchange's rows kept here (this rank's slots), per
	 * source (osc, osd); the forward exchange's send side */
	uint8_t *own, *fsend;
	uint64_t *osc, *osd, *fsc, *fsd;
	/* combine */
	uint64_t *csc, *csd, *crc, *crd;
	uint8_t *csend, *crecv;
};

static uint32_t slot_mask(const struct cs_moe *m, uint32_t t, uint32_t d)
{
	uint32_t mask = 0;

	for (uint32_t j = 0; j < m->K; j++) {
		int32_t e = m->idx[(size_t)t * m->K + j];

		if (e >= 0 && m->erank[e] == d)
			mask |= 1u << j;
	}
	return mask;
}

/* The slots of token @t whose experts are on node @b. */
static uint32_t node_mask(const struct cs_moe *m, uint32_t t, uint32_t b)
{
	uint32_t mask = 0;

	for (uint32_t j = 0; j < m->K; j++) {
		int32_t e = m->idx[(size_t)t * m->K + j];

		if (e >= 0 && m->erank[e] / m->G == b)
			mask |= 1u << j;
	}
	return mask;
}

static uint32_t *row_u32(uint8_t *base, size_t row, uint64_t i)
{
	return (uint32_t *)(base + i * row);
}

void cs_moe_free(struct cs_moe *m)
{
	if (!m)
		return;
	free(m->erank);
	free(m->dest);
	free(m->rcopy);
	free(m->lead);
	free(m->gsc);
	free(m->gsd);
	free(m->grc);
	free(m->grd);
	free(m->gsend);
	free(m->own);
	free(m->fsend);
	free(m->osc);
	free(m->osd);
	free(m->fsc);
	free(m->fsd);
	free(m->rrow);
	free(m->rsrc);
	free(m->dsc);
	free(m->dsd);
	free(m->dsend);
	free(m->drecv);
	free(m->loc_e);
	free(m->loc_cnt);
	free(m->loc_off);
	free(m->loc_of);
	free(m->lrows);
	free(m->lout);
	free(m->lsrc);
	free(m->ltok);
	free(m->lslot);
	free(m->csc);
	free(m->csd);
	free(m->crc);
	free(m->crd);
	free(m->csend);
	free(m->crecv);
	free(m);
}

static int moe_check(const struct cs_moe_cfg *c, const int32_t *idx)
{
	if (!c->nranks || c->rank >= c->nranks || !c->topk ||
	    c->topk > CS_MOE_MAX_TOPK || !c->hidden || !c->experts ||
	    c->tokens > c->max_tokens || !c->expert_rank)
		return -EINVAL;
	if ((c->flags & CS_MOE_F_NODE_ROWS) &&
	    (!c->ranks_per_node || c->nranks % c->ranks_per_node))
		return -EINVAL;
	if ((c->flags & CS_MOE_F_NODE_SUM) &&
	    (!(c->flags & CS_MOE_F_NODE_ROWS) || c->ranks_per_node < 2))
		return -EINVAL;
	if ((c->flags & CS_MOE_F_NODE_SUM_GATHER) &&
	    ((c->flags & (CS_MOE_F_NODE_ROWS | CS_MOE_F_NODE_SUM)) ||
	     !c->ranks_per_node || c->nranks % c->ranks_per_node))
		return -EINVAL;
	if ((c->flags & CS_MOE_F_NODE_ROWS_FWD) &&
	    ((c->flags & (CS_MOE_F_NODE_ROWS | CS_MOE_F_NODE_SUM)) ||
	     !c->ranks_per_node || c->nranks % c->ranks_per_node))
		return -EINVAL;
	for (uint32_t e = 0; e < c->experts; e++)
		if (c->expert_rank[e] >= c->nranks)
			return CS_ERR_BAD_DESC;
	for (uint32_t t = 0; t < c->tokens; t++)
		for (uint32_t j = 0; j < c->topk; j++) {
			int32_t e = idx[(size_t)t * c->topk + j];

			if (e == -1)
				continue;
			if (e < 0 || (uint32_t)e >= c->experts)
				return CS_ERR_BAD_DESC;
			for (uint32_t i = 0; i < j; i++)
				if (idx[(size_t)t * c->topk + i] == e)
					return CS_ERR_BAD_DESC;
		}
	return 0;
}

/*
 * CS_MOE_F_NODE_ROWS: a token's row goes once to each node holding one of
 * its experts, to one rank of it (the one this rank has given the fewest
 * rows so far, scanning from its own local index: every rank of the far
 * node, so every rail, gets 1/G of them), with the slots of the whole
 * node; the node's ranks read each other's rows (finish_node).
 */
static int node_dest(struct cs_moe *m)
{
	uint32_t G = m->G, M = m->n / G, me = m->c.rank % G;
	uint64_t *load = calloc(m->n, sizeof(*load));

	m->dest = malloc(((size_t)m->T * M + 1) * sizeof(*m->dest));
	if (!load || !m->dest) {
		free(load);
		return -ENOMEM;
	}
	for (uint32_t t = 0; t < m->T; t++)
		for (uint32_t b = 0; b < M; b++) {
			uint32_t best = UINT32_MAX;

			if (node_mask(m, t, b))
				for (uint32_t i = 0; i < G; i++) {
					uint32_t d = b * G + (me + i) % G;

					if (best == UINT32_MAX ||
					    load[d] < load[best])
						best = d;
				}
			if (best != UINT32_MAX)
				load[best]++;
			m->dest[(size_t)t * M + b] = best;
		}
	free(load);
	return 0;
}

/* gather: the rank of node @b holding the lowest slot of top-k @ids
 * there (UINT32_MAX: none). */
static uint32_t leader(const struct cs_moe *m, const int32_t *ids, uint32_t b)
{
	for (uint32_t j = 0; j < m->K; j++)
		if (ids[j] >= 0 && m->erank[ids[j]] / m->G == b)
			return m->erank[ids[j]];
	return UINT32_MAX;
}

static int gather_dest(struct cs_moe *m)
{
	uint32_t M = m->n / m->G;

	m->dest = malloc(((size_t)m->T * M + 1) * sizeof(*m->dest));
	if (!m->dest)
		return -ENOMEM;
	for (uint32_t t = 0; t < m->T; t++)
		for (uint32_t b = 0; b < M; b++)
			m->dest[(size_t)t * M + b] =
				leader(m, &m->idx[(size_t)t * m->K], b);
	return 0;
}

/* The slots of token @t that rank @d's row carries (0: no row). */
static uint32_t row_mask(const struct cs_moe *m, uint32_t t, uint32_t d)
{
	uint32_t b = d / m->G;

	if (m->fwd) /* to the token's leader on node b */
		return m->dest[(size_t)t * (m->n / m->G) + b] == d
			       ? node_mask(m, t, b)
			       : 0;
	if (!m->node_rows)
		return slot_mask(m, t, d);
	if (m->dest[(size_t)t * (m->n / m->G) + b] != d)
		return 0;
	return node_mask(m, t, b);
}

int cs_moe_create(const struct cs_moe_cfg *cfg, const float *x,
		  const int32_t *idx, const float *w, struct cs_moe **out)
{
	struct cs_moe *m;
	uint64_t rows = 0;
	int ret;

	*out = NULL;
	if (!cfg || (cfg->tokens && (!x || !idx || !w)))
		return -EINVAL;
	ret = moe_check(cfg, idx);
	if (ret)
		return ret;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->c = *cfg;
	m->x = x;
	m->idx = idx;
	m->w = w;
	m->n = cfg->nranks;
	m->K = cfg->topk;
	m->H = cfg->flags & CS_MOE_F_NO_VALUES ? 0 : cfg->hidden;
	m->T = cfg->tokens;
	m->G = cfg->ranks_per_node ? cfg->ranks_per_node : 1;
	m->node_rows = (cfg->flags & CS_MOE_F_NODE_ROWS) && m->G > 1;
	m->node_sum = m->node_rows && (cfg->flags & CS_MOE_F_NODE_SUM);
	m->gather = cfg->flags & CS_MOE_F_NODE_SUM_GATHER;
	m->node_sum |= m->gather;
	m->fwd = cfg->flags & CS_MOE_F_NODE_ROWS_FWD;
	m->grow = 4 * ((size_t)3 + m->H);
	/* node_sum: the K weights at the end (the node sums for the owner) */
	m->drow = 4 * ((size_t)2 + m->K + m->H + (m->node_sum ? m->K : 0));
	m->crow = 4 * ((size_t)2 + m->H);
	m->erank = malloc(cfg->experts * sizeof(*m->erank));
	m->dsc = calloc(m->n, sizeof(uint64_t));
	m->dsd = calloc(m->n, sizeof(uint64_t));
	m->drecv_cap = (uint64_t)cfg->max_tokens * m->n;
	ret = -ENOMEM;
	if (!m->erank || !m->dsc || !m->dsd)
		goto out_free;
	memcpy(m->erank, cfg->expert_rank, cfg->experts * sizeof(*m->erank));
	m->c.expert_rank = m->erank;
	if (m->node_rows || m->gather || m->fwd) {
		ret = m->gather || m->fwd ? gather_dest(m) : node_dest(m);
		if (ret)
			goto out_free;
	}
	for (uint32_t d = 0; d < m->n; d++) {
		m->dsd[d] = rows;
		for (uint32_t t = 0; t < m->T; t++)
			m->dsc[d] += row_mask(m, t, d) != 0;
		rows += m->dsc[d];
	}
	m->dsend_rows = rows;
	m->dsend = malloc(rows ? rows * m->drow : 1);
	m->drecv = malloc(m->drecv_cap ? m->drecv_cap * m->drow : 1);
	ret = -ENOMEM;
	if (!m->dsend || !m->drecv)
		goto out_free;
	rows = 0;
	for (uint32_t d = 0; d < m->n; d++)
		for (uint32_t t = 0; t < m->T; t++) {
			uint32_t mask = row_mask(m, t, d), *r;

			if (!mask)
				continue;
			r = row_u32(m->dsend, m->drow, rows++);
			r[0] = t;
			r[1] = mask;
			memcpy(&r[2], &idx[(size_t)t * m->K], 4 * m->K);
			memcpy(&r[2 + m->K], &x[(size_t)t * m->H], 4 * m->H);
			if (m->node_sum)
				memcpy(&r[2 + m->K + m->H],
				       &w[(size_t)t * m->K], 4 * m->K);
		}
	*out = m;
	return 0;
out_free:
	cs_moe_free(m);
	return ret;
}

static void moe_params(const struct cs_moe *m, struct cs_a2a_params *p,
		       size_t row, uint32_t op)
{
	memset(p, 0, sizeof(*p));
	p->nranks = m->n;
	p->rank = m->c.rank;
	p->ranks_per_node = m->c.ranks_per_node;
	p->esz = (uint32_t)row;
	p->mtu_payload = m->c.mtu_payload;
	p->flags = m->c.flags & (CS_A2A_F_NO_BUCKET | CS_A2A_F_RAIL);
	p->group = m->c.group;
	p->epoch = m->c.epoch;
	p->op_id = op;
}

void cs_moe_dispatch_params(struct cs_moe *m, struct cs_a2a_params *p)
{
	moe_params(m, p, m->drow, m->c.op_dispatch);
	p->flags |= CS_A2A_F_RECV_DYNAMIC;
	p->sendbuf = m->dsend;
	p->send_count = m->dsend_rows;
	p->recvbuf = m->drecv;
	p->recv_count = m->drecv_cap;
	p->sendcounts = m->dsc;
	p->sdispls = m->dsd;
}

/* A received dispatch row: every slot of its mask names an expert here
 * (node_rows: on this node). */
static int row_ok(const struct cs_moe *m, const uint32_t *r)
{
	if (r[0] >= m->c.max_tokens || !r[1] || (m->K < 32 && r[1] >> m->K))
		return CS_ERR_PROTO;
	for (uint32_t j = 0; j < m->K; j++) {
		int32_t e = (int32_t)r[2 + j];

		if (!(r[1] >> j & 1))
			continue;
		if (e < 0 || (uint32_t)e >= m->c.experts)
			return CS_ERR_PROTO;
		if (m->node_rows ? m->erank[e] / m->G != m->c.rank / m->G
				 : m->loc_of[e] < 0)
			return CS_ERR_PROTO;
	}
	return 0;
}

static int cmp_tok(const void *x, const void *y)
{
	uint32_t a = **(const uint32_t *const *)x,
		 b = **(const uint32_t *const *)y;

	return a < b ? -1 : a > b;
}

/*
 * The rows from source @s, in token order, into @out (room checked by the
 * caller): @np parts (the node's ranks' receive buffers with node_rows,
 * else one), each holding @rc[j][s] rows at @rd[j][s] of @recv[j].
 * Returns: how many, or CS_ERR_PROTO (a bad row, a token twice).
 */
static int64_t src_rows(const struct cs_moe *m, uint32_t s, uint32_t np,
			const void *const *recv, const uint64_t *const *rc,
			const uint64_t *const *rd, const uint32_t **out)
{
	uint64_t k = 0;

	for (uint32_t j = 0; j < np; j++)
		for (uint64_t i = 0; i < rc[j][s]; i++) {
			const uint32_t *r = row_u32((uint8_t *)recv[j], m->drow,
						    rd[j][s] + i);

			if (row_ok(m, r))
				return CS_ERR_PROTO;
			out[k++] = r;
		}
	if (np > 1) /* each part is in token order; together they are not */
		qsort(out, k, sizeof(*out), cmp_tok);
	for (uint64_t i = 1; i < k; i++)
		if (out[i][0] <= out[i - 1][0])
			return CS_ERR_PROTO;
	return (int64_t)k;
}

/* gather: keep what the combine needs of each received row (the receive
 * buffer is reused meanwhile): token, mask, ids, weights; its leader. */
static int gather_keep(struct cs_moe *m)
{
	size_t w = 2 + 2 * (size_t)m->K;

	m->rcopy = malloc((m->nrrow ? m->nrrow : 1) * w * 4);
	m->lead = malloc((m->nrrow ? m->nrrow : 1) * sizeof(*m->lead));
	if (!m->rcopy || !m->lead)
		return -ENOMEM;
	for (uint64_t i = 0; i < m->nrrow; i++) {
		const uint32_t *r = m->rrow[i];
		uint32_t *c = &m->rcopy[i * w];

		memcpy(c, r, 4 * (2 + (size_t)m->K));
		for (uint32_t j = 0; j < m->K; j++) /* every id: leader() */
			if ((int32_t)c[2 + j] < -1 ||
			    (int32_t)c[2 + j] >= (int32_t)m->c.experts)
				return CS_ERR_PROTO;
		memcpy(&c[2 + m->K], &r[2 + m->K + m->H], 4 * (size_t)m->K);
		m->rrow[i] = c;
		m->lead[i] =
			leader(m, (const int32_t *)&c[2], m->c.rank / m->G);
	}
	return 0;
}

static int finish_parts(struct cs_moe *m, uint32_t np, const void *const *recv,
			const uint64_t *const *rc, const uint64_t *const *rd)
{
	uint32_t me = np > 1 ? m->c.rank % m->G : 0;
	const uint32_t **rows = NULL;
	uint64_t most = 0;
	uint32_t *fill = NULL;
	int ret = -ENOMEM;

	if (m->loc_off)
		return -EALREADY;
	m->loc_of = malloc(m->c.experts * sizeof(*m->loc_of));
	m->loc_e = malloc(m->c.experts * sizeof(*m->loc_e));
	m->loc_cnt = calloc(m->c.experts, sizeof(*m->loc_cnt));
	m->loc_off = calloc(m->c.experts + 1, sizeof(*m->loc_off));
	if (!m->loc_of || !m->loc_e || !m->loc_cnt || !m->loc_off)
		return -ENOMEM;
	for (uint32_t e = 0; e < m->c.experts; e++) {
		m->loc_of[e] = -1;
		if (m->erank[e] == m->c.rank) {
			m->loc_of[e] = (int32_t)m->nloc;
			m->loc_e[m->nloc++] = e;
		}
	}
	for (uint32_t s = 0; s < m->n; s++) {
		uint64_t k = 0;

		for (uint32_t j = 0; j < np; j++)
			k += rc[j][s];
		most = CS_MAX(most, k);
	}
	rows = malloc((most ? most : 1) * sizeof(*rows));
	if (!rows)
		goto out;
	if (m->node_sum) { /* what this rank sums and returns */
		for (uint32_t s = 0; s < m->n; s++)
			m->nrrow += rc[me][s];
		m->rrow = malloc((m->nrrow ? m->nrrow : 1) * sizeof(*m->rrow));
		m->rsrc = malloc((m->nrrow ? m->nrrow : 1) * sizeof(*m->rsrc));
		if (!m->rrow || !m->rsrc)
			goto out;
		m->nrrow = 0;
		for (uint32_t s = 0; s < m->n; s++)
			for (uint64_t i = 0; i < rc[me][s]; i++) {
				m->rsrc[m->nrrow] = s;
				m->rrow[m->nrrow++] =
					row_u32((uint8_t *)recv[me], m->drow,
						rd[me][s] + i);
			}
		if (m->gather) {
			ret = gather_keep(m);
			if (ret)
				goto out;
			ret = -ENOMEM;
		}
	}
	/* count, checking every row */
	for (uint32_t s = 0; s < m->n; s++) {
		int64_t k = src_rows(m, s, np, recv, rc, rd, rows);

		if (k < 0) {
			ret = (int)k;
			goto out;
		}
		for (int64_t i = 0; i < k; i++)
			for (uint32_t j = 0; j < m->K; j++)
				if ((rows[i][1] >> j & 1) &&
				    m->loc_of[rows[i][2 + j]] >= 0)
					m->loc_cnt[m->loc_of[rows[i][2 + j]]]++;
	}
	for (uint32_t l = 0; l < m->nloc; l++)
		m->loc_off[l + 1] = m->loc_off[l] + m->loc_cnt[l];
	m->ltotal = m->loc_off[m->nloc];
	m->lrows = malloc((m->ltotal ? m->ltotal : 1) * m->H * sizeof(float));
	m->lout = calloc((m->ltotal ? m->ltotal : 1) * m->H, sizeof(float));
	m->lsrc = malloc((m->ltotal ? m->ltotal : 1) * sizeof(uint32_t));
	m->ltok = malloc((m->ltotal ? m->ltotal : 1) * sizeof(uint32_t));
	m->lslot = malloc((m->ltotal ? m->ltotal : 1) * sizeof(uint32_t));
	fill = calloc(m->nloc ? m->nloc : 1, sizeof(*fill));
	if (!m->lrows || !m->lout || !m->lsrc || !m->ltok || !m->lslot || !fill)
		goto out;
	/* (source, token) order within each expert: sources ascending,
	 * each source's rows in its token order */
	for (uint32_t s = 0; s < m->n; s++) {
		int64_t k = src_rows(m, s, np, recv, rc, rd, rows);

		for (int64_t i = 0; i < k; i++) {
			const uint32_t *r = rows[i];

			for (uint32_t j = 0; j < m->K; j++) {
				int32_t l;
				uint64_t at;

				if (!(r[1] >> j & 1))
					continue;
				l = m->loc_of[r[2 + j]];
				if (l < 0) /* another rank's of the node */
					continue;
				at = m->loc_off[l] + fill[l]++;
				m->lsrc[at] = s;
				m->ltok[at] = r[0];
				m->lslot[at] = j;
				memcpy(&m->lrows[at * m->H], &r[2 + m->K],
				       4 * m->H);
			}
		}
	}
	ret = 0;
out:
	free(rows);
	free(fill);
	return ret;
}

int cs_moe_dispatch_finish_at(struct cs_moe *m, const void *recv,
			      const uint64_t *rc, const uint64_t *rd)
{
	const void *base = recv ? recv : m->drecv;

	if (m->node_rows || m->fwd)
		return -EINVAL; /* the node's rows: cs_moe_dispatch_finish_node
				 * or _fwd */
	return finish_parts(m, 1, &base, &rc, &rd);
}

int cs_moe_dispatch_finish_node(struct cs_moe *m, uint32_t nlocal,
				const void *const *recv,
				const uint64_t *const *rc,
				const uint64_t *const *rd)
{
	if (m->fwd || nlocal != (m->node_rows ? m->G : 1))
		return -EINVAL;
	return finish_parts(m, nlocal, recv, rc, rd);
}

/* The slots of top-k @ids whose experts are on rank @d. */
static uint32_t ids_mask(const struct cs_moe *m, const int32_t *ids, uint32_t d)
{
	uint32_t mask = 0;

	for (uint32_t j = 0; j < m->K; j++)
		if (ids[j] >= 0 && m->erank[ids[j]] == d)
			mask |= 1u << j;
	return mask;
}

/* fwd: top-k @ids read from a row: -1 or an expert (leader() and
 * ids_mask() index erank with them). */
static bool ids_ok(const struct cs_moe *m, const int32_t *ids)
{
	for (uint32_t j = 0; j < m->K; j++)
		if (ids[j] < -1 ||
		    (ids[j] >= 0 && (uint32_t)ids[j] >= m->c.experts))
			return false;
	return true;
}

/* fwd: a row of the first exchange is this node's row of its token and
 * this rank its leader: the mask is the node's slots, the lowest is ours. */
static int fwd_row_ok(const struct cs_moe *m, const uint32_t *r)
{
	const int32_t *ids = (const int32_t *)&r[2];
	uint32_t node = m->c.rank / m->G, mask = 0;

	if (r[0] >= m->c.max_tokens || !ids_ok(m, ids))
		return CS_ERR_PROTO;
	for (uint32_t j = 0; j < m->K; j++)
		if (ids[j] >= 0 && m->erank[ids[j]] / m->G == node)
			mask |= 1u << j;
	if (!mask || r[1] != mask || leader(m, ids, node) != m->c.rank)
		return CS_ERR_PROTO;
	return 0;
}

size_t cs_moe_forward_row(const struct cs_moe *m)
{
	return 4 + m->drow;
}

int cs_moe_forward_params(struct cs_moe *m, const void *recv,
			  const uint64_t *rc, const uint64_t *rd,
			  struct cs_a2a_params *p)
{
	uint32_t base = m->c.rank / m->G * m->G, me = m->c.rank;
	size_t frow = cs_moe_forward_row(m);
	uint64_t total = 0, rows = 0, kept = 0, *fill = NULL;
	int ret = -ENOMEM;

	if (!m->fwd || m->osc || m->loc_off)
		return -EINVAL;
	for (uint32_t s = 0; s < m->n; s++)
		total += rc[s];
	if (total > m->drecv_cap) /* a source sent a token twice */
		return CS_ERR_PROTO;
	m->osc = calloc(m->n, sizeof(uint64_t));
	m->osd = calloc(m->n, sizeof(uint64_t));
	m->fsc = calloc(m->n, sizeof(uint64_t));
	m->fsd = calloc(m->n, sizeof(uint64_t));
	m->own = malloc((total ? total : 1) * m->drow);
	fill = calloc(m->n, sizeof(uint64_t));
	if (!m->osc || !m->osd || !m->fsc || !m->fsd || !m->own || !fill)
		goto out;
	/* check and count: every row is kept here (its leader holds a
	 * slot), and goes on to each other rank of the node with a slot */
	for (uint32_t s = 0; s < m->n; s++)
		for (uint64_t i = 0; i < rc[s]; i++) {
			const uint32_t *r =
				row_u32((uint8_t *)recv, m->drow, rd[s] + i);

			ret = fwd_row_ok(m, r);
			if (!ret && i &&
			    r[0] <= row_u32((uint8_t *)recv, m->drow,
					    rd[s] + i - 1)[0])
				ret = CS_ERR_PROTO; /* token order, once */
			if (ret)
				goto out;
			m->osc[s]++;
			for (uint32_t q = base; q < base + m->G; q++)
				m->fsc[q] +=
					q != me &&
					ids_mask(m, (const int32_t *)&r[2], q);
		}
	for (uint32_t d = 0; d < m->n; d++) {
		m->fsd[d] = rows;
		rows += m->fsc[d];
		m->osd[d] = kept;
		kept += m->osc[d];
	}
	ret = -ENOMEM;
	m->fsend = malloc((rows ? rows : 1) * frow);
	if (!m->fsend)
		goto out;
	kept = 0;
	for (uint32_t s = 0; s < m->n; s++)
		for (uint64_t i = 0; i < rc[s]; i++) {
			const uint32_t *r =
				row_u32((uint8_t *)recv, m->drow, rd[s] + i);
			const int32_t *ids = (const int32_t *)&r[2];
			uint32_t *o = row_u32(m->own, m->drow, kept++);

			memcpy(o, r, m->drow);
			o[1] = ids_mask(m, ids, me);
			for (uint32_t q = base; q < base + m->G; q++) {
				uint32_t mask = ids_mask(m, ids, q);

				if (q == me || !mask)
					continue;
				o = row_u32(m->fsend, frow,
					    m->fsd[q] + fill[q]++);
				o[0] = s;
				memcpy(&o[1], r, m->drow);
				o[2] = mask; /* q's slots only */
			}
		}
	moe_params(m, p, frow, m->c.op_dispatch);
	p->flags |= CS_A2A_F_RECV_DYNAMIC;
	p->sendbuf = m->fsend;
	p->send_count = rows;
	p->recv_count = m->drecv_cap;
	p->sendcounts = m->fsc;
	p->sdispls = m->fsd;
	ret = 0;
out:
	free(fill);
	return ret;
}

int cs_moe_dispatch_finish_fwd(struct cs_moe *m, const void *frecv,
			       const uint64_t *rc, const uint64_t *rd)
{
	uint32_t node = m->c.rank / m->G;
	size_t frow = cs_moe_forward_row(m);
	uint64_t total = 0, *cnt, *at, *fc, *fd;
	const uint32_t **ptr = NULL;
	int ret = CS_ERR_PROTO;

	if (!m->fwd || !m->osc || m->loc_off)
		return -EINVAL;
	cnt = calloc(4 * (size_t)m->n, sizeof(uint64_t));
	if (!cnt)
		return -ENOMEM;
	at = cnt + m->n;
	fc = at + m->n;
	fd = fc + m->n;
	/* forwarded rows come from the other ranks of this node, each from
	 * the token's leader here, naming a source */
	for (uint32_t d = 0; d < m->n; d++) {
		if (rc[d] && (d / m->G != node || d == m->c.rank))
			goto out;
		for (uint64_t i = 0; i < rc[d]; i++) {
			const uint32_t *f =
				row_u32((uint8_t *)frecv, frow, rd[d] + i);

			if (f[0] >= m->n || f[1] >= m->c.max_tokens ||
			    !ids_ok(m, (const int32_t *)&f[3]) ||
			    leader(m, (const int32_t *)&f[3], node) != d)
				goto out;
			cnt[f[0]]++;
		}
	}
	for (uint32_t s = 0; s < m->n; s++) {
		cnt[s] += m->osc[s];
		at[s] = total;
		total += cnt[s];
	}
	if (total > m->drecv_cap) /* a token twice: src_rows() says so */
		goto out;
	ret = -ENOMEM;
	ptr = malloc((total ? total : 1) * sizeof(*ptr));
	if (!ptr)
		goto out;
	/* each source's rows, kept and forwarded, then in token order */
	memcpy(fd, at, m->n * sizeof(uint64_t));
	for (uint32_t s = 0; s < m->n; s++)
		for (uint64_t i = 0; i < m->osc[s]; i++)
			ptr[at[s]++] = row_u32(m->own, m->drow, m->osd[s] + i);
	for (uint32_t d = 0; d < m->n; d++)
		for (uint64_t i = 0; i < rc[d]; i++) {
			const uint32_t *f =
				row_u32((uint8_t *)frecv, frow, rd[d] + i);

			ptr[at[f[0]]++] = &f[1];
		}
	for (uint32_t s = 0; s < m->n; s++) {
		qsort(&ptr[fd[s]], cnt[s], sizeof(*ptr), cmp_tok);
		fc[s] = cnt[s];
	}
	for (uint64_t i = 0; i < total; i++)
		memcpy(m->drecv + i * m->drow, ptr[i], m->drow);
	{
		const void *base = m->drecv;
		const uint64_t *c1 = fc, *d1 = fd;

		ret = finish_parts(m, 1, &base, &c1, &d1);
	}
out:
	free(ptr);
	free(cnt);
	return ret;
}

const void *cs_moe_dispatch_recv(const struct cs_moe *m)
{
	return m->drecv;
}

int cs_moe_local(const struct cs_moe *m, uint32_t i, uint32_t *expert,
		 uint32_t *count, const float **rows, const uint32_t **src_rank,
		 const uint32_t **src_token, const uint32_t **src_slot)
{
	uint64_t o;

	if (!m->loc_off || i >= m->nloc)
		return -ENOENT;
	o = m->loc_off[i];
	*expert = m->loc_e[i];
	*count = m->loc_cnt[i];
	*rows = &m->lrows[o * m->H];
	*src_rank = &m->lsrc[o];
	*src_token = &m->ltok[o];
	*src_slot = &m->lslot[o];
	return 0;
}

float *cs_moe_expert_out(struct cs_moe *m, uint32_t i)
{
	if (!m->loc_off || i >= m->nloc)
		return NULL;
	return &m->lout[m->loc_off[i] * m->H];
}

/* The combine's buffers and count tables in @p: @rows rows to send, room
 * for @rr. */
static void combine_bufs(const struct cs_moe *m, struct cs_a2a_params *p,
			 uint64_t rows, uint64_t rr)
{
	p->sendbuf = m->csend;
	p->send_count = rows;
	p->recvbuf = m->crecv;
	p->recv_count = rr;
	p->sendcounts = m->csc;
	p->sdispls = m->csd;
	p->recvcounts = m->crc;
	p->rdispls = m->crd;
}

void cs_moe_combine_params(struct cs_moe *m, struct cs_a2a_params *p)
{
	uint64_t rows = 0, rr = 0;

	moe_params(m, p, m->crow, m->c.op_combine);
	if (m->node_sum)
		return; /* cs_moe_combine_params_node(); no arrays: refused */
	m->csc = calloc(m->n, sizeof(uint64_t));
	m->csd = calloc(m->n, sizeof(uint64_t));
	m->crc = calloc(m->n, sizeof(uint64_t));
	m->crd = calloc(m->n, sizeof(uint64_t));
	if (!m->csc || !m->csd || !m->crc || !m->crd)
		return; /* cs_a2a_node_init() refuses the NULL arrays */
	for (uint64_t i = 0; i < m->ltotal; i++)
		m->csc[m->lsrc[i]]++;
	for (uint32_t d = 0; d < m->n; d++) {
		m->csd[d] = rows;
		rows += m->csc[d];
		/* what rank d returns: one row per slot of ours it holds */
		for (uint32_t t = 0; t < m->T; t++)
			m->crc[d] += (uint64_t)__builtin_popcount(
				slot_mask(m, t, d));
		m->crd[d] = rr;
		rr += m->crc[d];
	}
	m->csend = malloc(rows ? rows * m->crow : 1);
	m->crecv = malloc(rr ? rr * m->crow : 1);
	if (!m->csend || !m->crecv)
		return;
	{
		uint64_t *fill = calloc(m->n, sizeof(*fill));

		if (!fill)
			return;
		for (uint64_t i = 0; i < m->ltotal; i++) {
			uint32_t s = m->lsrc[i], *r;

			r = row_u32(m->csend, m->crow, m->csd[s] + fill[s]++);
			r[0] = m->ltok[i];
			r[1] = m->lslot[i];
			memcpy(&r[2], &m->lout[i * m->H], 4 * m->H);
		}
		free(fill);
	}
	combine_bufs(m, p, rows, rr);
}

/* Local expert @l of @m: its output row for (source @s, token @t), NULL
 * if it has none. */
static const float *expert_out(const struct cs_moe *m, int32_t l, uint32_t s,
			       uint32_t t)
{
	uint64_t lo = m->loc_off[l], hi = m->loc_off[l + 1];

	while (lo < hi) { /* rows in (source, token) order */
		uint64_t mid = (lo + hi) / 2;

		if (m->lsrc[mid] < s || (m->lsrc[mid] == s && m->ltok[mid] < t))
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == m->loc_off[l + 1] || m->lsrc[lo] != s || m->ltok[lo] != t)
		return NULL;
	return &m->lout[lo * m->H];
}

int cs_moe_combine_params_node(struct cs_moe *m, struct cs_moe *const *node,
			       uint32_t nlocal, struct cs_a2a_params *p)
{
	uint32_t G = m->G, base = m->c.rank / G * G;
	uint64_t rr = 0;

	if (!m->node_sum || m->gather || nlocal != G || !m->loc_off || m->csc)
		return -EINVAL;
	for (uint32_t k = 0; k < G; k++)
		if (!node[k] || node[k]->c.rank != base + k ||
		    !node[k]->loc_off)
			return -EINVAL;
	moe_params(m, p, m->crow, m->c.op_combine);
	m->csc = calloc(m->n, sizeof(uint64_t));
	m->csd = calloc(m->n, sizeof(uint64_t));
	m->crc = calloc(m->n, sizeof(uint64_t));
	m->crd = calloc(m->n, sizeof(uint64_t));
	m->csend = malloc((m->nrrow ? m->nrrow : 1) * m->crow);
	if (!m->csc || !m->csd || !m->crc || !m->crd || !m->csend)
		return -ENOMEM;
	/* one row back per dispatch row, both ways: what this rank was sent
	 * goes back to its source, what it sent comes back */
	for (uint64_t i = 0; i < m->nrrow; i++)
		m->csc[m->rsrc[i]]++;
	for (uint32_t s = 1; s < m->n; s++)
		m->csd[s] = m->csd[s - 1] + m->csc[s - 1];
	for (uint32_t d = 0; d < m->n; d++) {
		m->crc[d] = m->dsc[d];
		m->crd[d] = rr;
		rr += m->crc[d];
	}
	m->crecv = malloc((rr ? rr : 1) * m->crow);
	if (!m->crecv)
		return -ENOMEM;
	/* rrow is in (source, token) order: row i goes to csend row i */
	for (uint64_t i = 0; i < m->nrrow; i++) {
		const uint32_t *r = m->rrow[i];
		uint32_t *o = row_u32(m->csend, m->crow, i);
		float *acc = (float *)&o[2];
		float wj;

		o[0] = r[0];
		o[1] = r[1];
		memset(acc, 0, 4 * m->H);
		/* the node's slots of the token, in slot order */
		for (uint32_t j = 0; j < m->K; j++) {
			const struct cs_moe *q;
			const float *y;

			if (!(r[1] >> j & 1))
				continue;
			q = node[m->erank[r[2 + j]] - base];
			y = expert_out(q, q->loc_of[r[2 + j]], m->rsrc[i],
				       r[0]);
			if (!y)
				return CS_ERR_PROTO;
			memcpy(&wj, &r[2 + m->K + m->H + j], 4);
			for (uint32_t h = 0; h < m->H; h++)
				acc[h] += wj * y[h];
		}
	}
	combine_bufs(m, p, m->nrrow, rr);
	return 0;
}

/* gather: the received row of (source @s, token @t), or -1. */
static int64_t rrow_of(const struct cs_moe *m, uint32_t s, uint32_t t)
{
	uint64_t lo = 0, hi = m->nrrow;

	while (lo < hi) { /* in (source, token) order */
		uint64_t mid = (lo + hi) / 2;

		if (m->rsrc[mid] < s ||
		    (m->rsrc[mid] == s && m->rrow[mid][0] < t))
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == m->nrrow || m->rsrc[lo] != s || m->rrow[lo][0] != t)
		return -1;
	return (int64_t)lo;
}

size_t cs_moe_gather_row(const struct cs_moe *m)
{
	return m->grow;
}

void cs_moe_gather_sizes(const struct cs_moe *m, uint64_t *csend_rows,
			 uint64_t *crecv_rows)
{
	uint32_t M = m->n / m->G;

	*csend_rows = *crecv_rows = 0;
	for (uint64_t k = 0; m->gather && m->lead && k < m->nrrow; k++)
		*csend_rows += m->lead[k] == m->c.rank;
	for (size_t a = 0; m->gather && a < (size_t)m->T * M; a++)
		*crecv_rows += m->dest[a] != UINT32_MAX;
}

int cs_moe_gather_params(struct cs_moe *m, struct cs_a2a_params *p)
{
	uint32_t node = m->c.rank / m->G;
	uint64_t rows = 0, rr = 0, *fill;

	if (!m->gather || !m->loc_off || m->gsc)
		return -EINVAL;
	moe_params(m, p, m->grow, m->c.op_combine);
	m->gsc = calloc(m->n, sizeof(uint64_t));
	m->gsd = calloc(m->n, sizeof(uint64_t));
	m->grc = calloc(m->n, sizeof(uint64_t));
	m->grd = calloc(m->n, sizeof(uint64_t));
	fill = calloc(m->n, sizeof(uint64_t));
	if (!m->gsc || !m->gsd || !m->grc || !m->grd || !fill) {
		free(fill);
		return -ENOMEM;
	}
	/* what goes: each output whose token another rank leads here */
	for (uint64_t i = 0; i < m->ltotal; i++) {
		int64_t k = rrow_of(m, m->lsrc[i], m->ltok[i]);

		if (k >= 0 && m->lead[k] != m->c.rank)
			m->gsc[m->lead[k]]++;
	}
	/* what comes: the node's other slots of the tokens led here */
	for (uint64_t k = 0; k < m->nrrow; k++) {
		const uint32_t *r = m->rrow[k];

		if (m->lead[k] != m->c.rank)
			continue;
		for (uint32_t j = 0; j < m->K; j++) {
			int32_t e = (int32_t)r[2 + j];

			if (e >= 0 && m->erank[e] / m->G == node &&
			    m->erank[e] != m->c.rank)
				m->grc[m->erank[e]]++;
		}
	}
	for (uint32_t d = 0; d < m->n; d++) {
		m->gsd[d] = rows;
		rows += m->gsc[d];
		m->grd[d] = rr;
		rr += m->grc[d];
	}
	m->gsend = malloc((rows ? rows : 1) * m->grow);
	if (!m->gsend) {
		free(fill);
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < m->ltotal; i++) {
		int64_t k = rrow_of(m, m->lsrc[i], m->ltok[i]);
		uint32_t d, *r;

		if (k < 0 || m->lead[k] == m->c.rank)
			continue;
		d = m->lead[k];
		r = row_u32(m->gsend, m->grow, m->gsd[d] + fill[d]++);
		r[0] = m->lsrc[i];
		r[1] = m->ltok[i];
		r[2] = m->lslot[i];
		memcpy(&r[3], &m->lout[i * m->H], 4 * m->H);
	}
	free(fill);
	p->sendbuf = m->gsend;
	p->send_count = rows;
	p->recvbuf = NULL;
	p->recv_count = rr;
	p->sendcounts = m->gsc;
	p->sdispls = m->gsd;
	p->recvcounts = m->grc;
	p->rdispls = m->grd;
	return 0;
}

int cs_moe_combine_params_gathered(struct cs_moe *m, const void *grecv,
				   const uint64_t *rc, const uint64_t *rd,
				   struct cs_a2a_params *p)
{
	uint32_t node = m->c.rank / m->G, M = m->n / m->G;
	uint64_t rows = 0, rr = 0, o = 0;
	const float **got;
	int ret = 0;

	if (!m->gather || !m->gsc || m->csc)
		return -EINVAL;
	for (uint32_t d = 0; d < m->n; d++)
		if (rc[d] != m->grc[d])
			return CS_ERR_PROTO;
	got = calloc((m->nrrow ? m->nrrow : 1) * m->K, sizeof(*got));
	if (!got)
		return -ENOMEM;
	/* every gathered output: a node slot of a token led here, once */
	for (uint32_t d = 0; d < m->n && !ret; d++)
		for (uint64_t i = 0; i < rc[d] && !ret; i++) {
			const uint32_t *r =
				row_u32((uint8_t *)grecv, m->grow, rd[d] + i);
			int64_t k = rrow_of(m, r[0], r[1]);
			int32_t e;

			if (k < 0 || m->lead[k] != m->c.rank || r[2] >= m->K ||
			    got[k * m->K + r[2]]) {
				ret = CS_ERR_PROTO;
				break;
			}
			e = (int32_t)m->rrow[k][2 + r[2]];
			if (e < 0 || m->erank[e] != d || d == m->c.rank) {
				ret = CS_ERR_PROTO;
				break;
			}
			got[k * m->K + r[2]] = (const float *)&r[3];
		}
	m->csc = calloc(m->n, sizeof(uint64_t));
	m->csd = calloc(m->n, sizeof(uint64_t));
	m->crc = calloc(m->n, sizeof(uint64_t));
	m->crd = calloc(m->n, sizeof(uint64_t));
	if (!ret && (!m->csc || !m->csd || !m->crc || !m->crd))
		ret = -ENOMEM;
	if (ret)
		goto out;
	/* one row back per token led here, to its source; one per (token,
	 * node) comes, from the token's leader there */
	for (uint64_t k = 0; k < m->nrrow; k++)
		m->csc[m->rsrc[k]] += m->lead[k] == m->c.rank;
	for (size_t a = 0; a < (size_t)m->T * M; a++)
		if (m->dest[a] != UINT32_MAX)
			m->crc[m->dest[a]]++;
	for (uint32_t d = 0; d < m->n; d++) {
		m->csd[d] = rows;
		rows += m->csc[d];
		m->crd[d] = rr;
		rr += m->crc[d];
	}
	m->csend = malloc((rows ? rows : 1) * m->crow);
	m->crecv = malloc((rr ? rr : 1) * m->crow);
	if (!m->csend || !m->crecv) {
		ret = -ENOMEM;
		goto out;
	}
	/* rrow is in (source, token) order: so are the rows to each source */
	for (uint64_t k = 0; k < m->nrrow && !ret; k++) {
		const uint32_t *r = m->rrow[k];
		uint32_t *w, mask = 0;
		float *acc;

		if (m->lead[k] != m->c.rank)
			continue;
		w = row_u32(m->csend, m->crow, o++);
		acc = (float *)&w[2];
		memset(acc, 0, 4 * m->H);
		/* the node's slots of the token, in slot order (as
		 * cs_moe_combine_params_node()) */
		for (uint32_t j = 0; j < m->K; j++) {
			int32_t e = (int32_t)r[2 + j];
			const float *y;
			float wj;

			if (e < 0 || m->erank[e] / m->G != node)
				continue;
			mask |= 1u << j;
			y = m->erank[e] == m->c.rank
				    ? expert_out(m, m->loc_of[e], m->rsrc[k],
						 r[0])
				    : got[k * m->K + j];
			if (!y) {
				ret = CS_ERR_PROTO;
				break;
			}
			memcpy(&wj, &r[2 + m->K + j], 4);
			for (uint32_t h = 0; h < m->H; h++)
				acc[h] += wj * y[h];
		}
		w[0] = r[0];
		w[1] = mask;
	}
	if (!ret) {
		moe_params(m, p, m->crow, m->c.op_combine);
		combine_bufs(m, p, rows, rr);
	}
out:
	free(got);
	return ret;
}

/* node_sum: out[t] = the sum over nodes b, in node order, of what node b
 * returned for the token (itself a sum in slot order). */
static int combine_finish_node(struct cs_moe *m, const void *recv, float *out)
{
	uint32_t M = m->n / m->G;
	size_t cells = (size_t)m->T * M;
	const float **part = calloc(cells ? cells : 1, sizeof(*part));
	int ret = 0;

	if (!part)
		return -ENOMEM;
	for (uint32_t d = 0; d < m->n && !ret; d++)
		for (uint64_t i = 0; i < m->crc[d] && !ret; i++) {
			const uint32_t *r = row_u32((uint8_t *)recv, m->crow,
						    m->crd[d] + i);
			size_t at = (size_t)r[0] * M + d / m->G;

			/* one row per (token, node), from the rank its
			 * dispatch row went to, with that row's slots */
			if (r[0] >= m->T || m->dest[at] != d || part[at] ||
			    r[1] != node_mask(m, r[0], d / m->G))
				ret = CS_ERR_PROTO;
			else
				part[at] = (const float *)&r[2];
		}
	for (uint32_t t = 0; t < m->T && !ret; t++)
		for (uint32_t h = 0; h < m->H && !ret; h++) {
			float acc = 0.0f;

			for (uint32_t b = 0; b < M; b++) {
				size_t at = (size_t)t * M + b;

				if (m->dest[at] == UINT32_MAX)
					continue;
				if (!part[at]) {
					ret = CS_ERR_PROTO;
					break;
				}
				acc += part[at][h];
			}
			out[(size_t)t * m->H + h] = acc;
		}
	free(part);
	return ret;
}

int cs_moe_combine_finish(struct cs_moe *m, float *out)
{
	return cs_moe_combine_finish_at(m, m->crecv, out);
}

int cs_moe_combine_finish_at(struct cs_moe *m, const void *recv, float *out)
{
	size_t slots = (size_t)m->T * m->K;
	const float **y;
	int ret = 0;

	if (m->node_sum)
		return combine_finish_node(m, recv, out);
	y = calloc(slots ? slots : 1, sizeof(*y));
	if (!y)
		return -ENOMEM;
	for (uint32_t d = 0; d < m->n && !ret; d++)
		for (uint64_t i = 0; i < m->crc[d] && !ret; i++) {
			const uint32_t *r = row_u32((uint8_t *)recv, m->crow,
						    m->crd[d] + i);
			size_t at = (size_t)r[0] * m->K + r[1];
			int32_t e;

			if (r[0] >= m->T || r[1] >= m->K || y[at]) {
				ret = CS_ERR_PROTO;
				break;
			}
			e = m->idx[at];
			if (e < 0 || m->erank[e] != d) {
				ret = CS_ERR_PROTO;
				break;
			}
			y[at] = (const float *)&r[2];
		}
	/* fixed order: slot 0, 1, ..., k-1, whatever arrived when */
	for (uint32_t t = 0; t < m->T && !ret; t++)
		for (uint32_t h = 0; h < m->H; h++) {
			float acc = 0.0f;

			for (uint32_t j = 0; j < m->K; j++) {
				size_t at = (size_t)t * m->K + j;

				if (m->idx[at] < 0)
					continue;
				if (!y[at]) {
					ret = CS_ERR_PROTO;
					break;
				}
				acc += m->w[at] * y[at][h];
			}
			out[(size_t)t * m->H + h] = acc;
		}
	free(y);
	return ret;
}

void cs_moe_wire(const struct cs_moe *m, size_t *drow, size_t *crow,
		 const void **dsend, uint64_t *dsend_rows, const void **csend,
		 uint64_t *csend_rows, uint64_t *crecv_rows)
{
	uint64_t cs = 0, cr = 0;

	for (uint32_t d = 0; m->csc && m->crc && d < m->n; d++) {
		cs += m->csc[d];
		cr += m->crc[d];
	}
	*drow = m->drow;
	*crow = m->crow;
	*dsend = m->dsend;
	*dsend_rows = m->dsend_rows;
	*csend = m->csend;
	*csend_rows = cs;
	*crecv_rows = cr;
}

void cs_moe_combine_layout(const struct cs_moe *m, struct cs_a2a_params *p)
{
	memset(p, 0, sizeof(*p));
	p->recvcounts = m->crc;
	p->rdispls = m->crd;
	p->sendcounts = m->csc;
	p->sdispls = m->csd;
}

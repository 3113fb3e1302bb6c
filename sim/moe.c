/* SPDX-License-Identifier: MIT */
/*
 * collstack sim moe: dispatch (op 1), the experts, combine (op 2) over the
 * transport core, one core per rank, every rank's NIC on one switch (as
 * sim/a2a.c). A node's combine starts once every rank of the node has its
 * dispatch (the node's engines share their descriptors). Values are small
 * multiples of 1/256 and the experts affine maps, so the reference below
 * does the same float operations in the same order: equal bits or wrong.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/moe.h"
#include "collstack/types.h"
#include "sim/moe.h"
#include "sim/sim.h"

#define MO_GROUP 1

struct mo;

struct mo_rank {
	struct mo *m;
	uint32_t id;
	struct cs_tp *tp;
	float *x, *w, *out;
	int32_t *idx;
	struct cs_moe *moe;
	struct cs_a2a *eng[2];
	uint32_t phase; /* ops done */
	bool posted[2];
	/* synth: per receive-buffer row, the weighted sum of the tail bytes
	 * that arrived (mo_vsum); the combine's receive buffer */
	uint64_t *acc[2];
	const uint8_t *crecv;
};

struct mo_vctx {
	struct mo *m;
	uint32_t op; /* 0 dispatch, 1 combine */
};

struct mo_trace {
	cs_ns_t next, last; /* the window's end and start */
	uint64_t *busy; /* [2n] NIC links' busy_ps at the window's start */
	float *u; /* [nw][2n] each link's busy fraction per window */
	cs_ns_t *at; /* [nw] each window's end */
	uint32_t nw, capw;
	cs_ns_t *node_disp; /* [n / G] the node's dispatch done */
	cs_ns_t *rank_end[2]; /* [n] the rank's dispatch, combine done */
	struct cs_tp_stats *st0; /* [n] counters when dispatch ended */
};

struct mo {
	const struct cs_moe_sim_cfg *cfg;
	struct cs_sim *sim;
	uint32_t n, G;
	bool rail; /* CS_A2A_RAIL */
	uint32_t *erank;
	struct mo_rank *rk;
	struct cs_a2a_node **node[2]; /* [n / G] per op */
	uint32_t *node_left; /* ranks of the node without their dispatch */
	uint32_t ndone, nfailed, ndisp;
	cs_ns_t t_disp, t_end;
	uint64_t wrong, checked, rows;
	uint64_t *busy0, *bytes0; /* [2n] NIC links at dispatch's end */
	struct mo_trace *tr; /* --trace; NULL: off */
	char first[200];
	/* synth */
	struct cs_a2a_virt virt[2];
	struct mo_vctx vctx[2];
	bool corrupted;
	uint8_t *vtmp;
};

static uint64_t mo_hash(uint64_t a, uint64_t b, uint64_t c)
{
	uint64_t z =
		a ^ (b * 0x9e3779b97f4a7c15ull) ^ (c * 0xd1b54a32d192ed03ull);

	z = (z ^ (z >> 29)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 32)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static float mo_expert(uint32_t e, float v)
{
	return v * (1.0f + (float)e / 64.0f) + (float)e * 0.25f;
}

static void mo_fail(struct mo *m, const char *what, uint32_t r, int err)
{
	if (!m->nfailed++ && !m->wrong)
		snprintf(m->first, sizeof(m->first), "rank %u: %s: %s", r, what,
			 cs_strerror(err));
	cs_sim_stop(m->sim);
}

/* ---- synthetic payloads (--payload synth) ------------------------------- */

/*
 * Values: x of (rank s, token t, value h) is the full mode's (a multiple
 * of 1/256 in [-1000/256, 1000/256] from mo_hash); bf16: rounded to
 * nearest even. An expert's output: mo_expert() of it (bf16: of its f32
 * value, rounded). A combine row: the expert output of one slot (per
 * slot), or with --node-sum the node's slots' w * y summed in f32 in slot
 * order (bf16: rounded once at the end). With f32 these are the full
 * mode's bits exactly.
 */
static uint16_t mo_bf16(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	u += 0x7fffu + (u >> 16 & 1); /* nearest even; values are finite */
	return (uint16_t)(u >> 16);
}

static float mo_unbf16(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static float mo_x(const struct mo *m, uint32_t s, uint32_t t, uint32_t h)
{
	const struct cs_moe_sim_cfg *c = m->cfg;
	float v = (float)((int)(mo_hash(c->net.seed, s,
					(uint64_t)t * c->hidden + h) %
				2001) -
			  1000) /
		  256.0f;

	return c->vbytes == 2 ? mo_unbf16(mo_bf16(v)) : v;
}

static float mo_y(const struct mo *m, uint32_t e, float x)
{
	float y = mo_expert(e, x);

	return m->cfg->vbytes == 2 ? mo_unbf16(mo_bf16(y)) : y;
}

/* Value @h of the tail of row @row (stored words) on op @op, from rank
 * @src to rank @dst: its bits (f32 or bf16). */
static uint32_t mo_value(const struct mo *m, uint32_t op, uint32_t src,
			 uint32_t dst, const uint32_t *row, uint32_t h)
{
	const struct cs_moe_sim_cfg *c = m->cfg;
	const struct mo_rank *o = &m->rk[dst];
	uint32_t t = row[0], bits;
	float v;

	if (op == 0) {
		v = mo_x(m, src, t, h);
	} else if (!c->node_sum) { /* row[1]: the slot */
		v = mo_y(m, (uint32_t)o->idx[(size_t)t * c->topk + row[1]],
			 mo_x(m, dst, t, h));
	} else { /* row[1]: the node's slots */
		float x = mo_x(m, dst, t, h);

		v = 0.0f;
		for (uint32_t j = 0; j < c->topk; j++)
			if (row[1] >> j & 1)
				v += o->w[(size_t)t * c->topk + j] *
				     mo_y(m,
					  (uint32_t)o->idx[(size_t)t * c->topk +
							   j],
					  x);
	}
	if (c->vbytes == 2)
		return mo_bf16(v);
	memcpy(&bits, &v, 4);
	return bits;
}

/* Tail bytes [off, off + len) of @row, little-endian values. A row whose
 * header is out of range (never from a correct engine) gives zeros. */
static void mo_tail(const struct mo *m, uint32_t op, uint32_t src, uint32_t dst,
		    const uint8_t *elem, uint64_t off, uint8_t *out,
		    uint32_t len)
{
	const struct cs_moe_sim_cfg *c = m->cfg;
	uint32_t row[2], vb = c->vbytes;

	memcpy(row, elem, sizeof(row));
	if (src >= m->n || dst >= m->n || row[0] >= c->tokens ||
	    (op == 1 && !c->node_sum && row[1] >= c->topk) ||
	    (op == 1 && !c->node_sum &&
	     m->rk[dst].idx[(size_t)row[0] * c->topk + row[1]] < 0)) {
		memset(out, 0, len);
		return;
	}
	for (uint64_t i = 0; i < len;) {
		uint64_t p = off + i;
		uint32_t h = (uint32_t)(p / vb), b = (uint32_t)(p % vb);
		uint32_t v = mo_value(m, op, src, dst, row, h);

		for (; b < vb && i < len; b++, i++)
			out[i] = (uint8_t)(v >> (8 * b));
	}
}

/* Position-weighted sum of tail bytes [off, off + len): every byte of a
 * row counts once, at its place; one wrong, missing or misplaced byte
 * always changes it (odd weights), several could cancel only by design. */
static uint64_t mo_vsum(const uint8_t *p, uint64_t off, uint32_t len)
{
	uint64_t s = 0;

	for (uint32_t i = 0; i < len; i++)
		s += (uint64_t)(p[i] + 1u) *
		     ((2 * (off + i) + 1) * 0x9e3779b97f4a7c15ull);
	return s;
}

static void mo_vgen(void *arg, uint32_t src, uint32_t dst, const uint8_t *elem,
		    uint64_t off, uint8_t *out, uint32_t len)
{
	const struct mo_vctx *v = arg;

	mo_tail(v->m, v->op, src, dst, elem, off, out, len);
}

static void mo_vgot(void *arg, uint32_t src, uint32_t dst, uint64_t idx,
		    const uint8_t *in, uint64_t off, uint32_t len)
{
	const struct mo_vctx *v = arg;
	struct mo *m = v->m;
	uint64_t s;

	if (dst >= m->n || !m->rk[dst].acc[v->op])
		return;
	s = mo_vsum(in, off, len);
	if (m->cfg->corrupt == v->op + 1 && !m->corrupted && len &&
	    src / m->cfg->net.rpn != dst / m->cfg->net.rpn) {
		uint8_t b = in[0] ^ 1; /* as if it arrived so */

		m->corrupted = true;
		s -= mo_vsum(in, off, 1);
		s += mo_vsum(&b, off, 1);
	}
	m->rk[dst].acc[v->op][idx] += s;
}

/* The weighted sum a row's whole tail must have. */
static uint64_t mo_want(struct mo *m, uint32_t op, uint32_t src, uint32_t dst,
			const uint8_t *elem)
{
	uint64_t tail = (uint64_t)m->cfg->hidden * m->cfg->vbytes, s = 0;

	for (uint64_t off = 0; off < tail; off += 4096) {
		uint32_t n = (uint32_t)CS_MIN(4096, tail - off);

		mo_tail(m, op, src, dst, elem, off, m->vtmp, n);
		s += mo_vsum(m->vtmp, off, n);
	}
	return s;
}

/* Every row rank @r received in op @op (its receive buffer @rb of rows of
 * @rsz stored bytes, the engine's layout): its tail as it must be.
 * Returns the rows. */
static uint64_t mo_check_tails(struct mo *m, struct mo_rank *r, uint32_t op,
			       const uint8_t *rb, size_t rsz)
{
	const uint64_t *rc, *rd;
	uint64_t rows = 0;

	cs_a2a_recv_layout(r->eng[op], &rc, &rd);
	for (uint32_t s = 0; s < m->n; s++)
		for (uint64_t i = 0; i < rc[s]; i++) {
			uint64_t at = rd[s] + i;
			const uint8_t *e = rb + at * rsz;
			/* dispatch: s's row; combine: the row s returns
			 * for r's token */
			uint64_t want = mo_want(m, op, s, r->id, e);
			uint32_t tok;

			rows++;
			m->checked += m->cfg->hidden;
			if (want == r->acc[op][at])
				continue;
			memcpy(&tok, e, 4);
			if (!m->wrong++)
				snprintf(m->first, sizeof(m->first),
					 "rank %u %s row %llu (from rank %u, "
					 "token %u): values differ",
					 r->id, op ? "combine" : "dispatch",
					 (unsigned long long)at, s, tok);
		}
	return rows;
}

/* synth: the combine rows rank @r must get: one per slot (per (token,
 * node) with node_sum) that names an expert. */
static uint64_t mo_combine_rows(const struct mo *m, const struct mo_rank *r)
{
	const struct cs_moe_sim_cfg *c = m->cfg;
	uint64_t n = 0;

	for (uint32_t t = 0; t < c->tokens; t++) {
		uint32_t nodes[CS_MOE_MAX_TOPK], nn = 0;

		for (uint32_t j = 0; j < c->topk; j++) {
			int32_t e = r->idx[(size_t)t * c->topk + j];
			uint32_t b;
			bool dup = false;

			if (e < 0)
				continue;
			if (!c->node_sum) {
				n++;
				continue;
			}
			b = m->erank[e] / m->G;
			for (uint32_t i = 0; i < nn; i++)
				dup |= nodes[i] == b;
			if (!dup)
				nodes[nn++] = b;
		}
		n += nn;
	}
	return n;
}

/* ---- tokens and the reference ------------------------------------------- */

static void mo_tokens(struct mo *m, struct mo_rank *r, const double *cdf)
{
	const struct cs_moe_sim_cfg *c = m->cfg;
	uint64_t rng = mo_hash(c->net.seed, r->id, 77) | 1;

	for (uint64_t i = 0; !c->synth && i < (uint64_t)c->tokens * c->hidden;
	     i++)
		r->x[i] = (float)((int)(mo_hash(c->net.seed, r->id, i) % 2001) -
				  1000) /
			  256.0f;
	for (uint32_t t = 0; t < c->tokens; t++)
		for (uint32_t j = 0; j < c->topk; j++) {
			int32_t *s = &r->idx[(size_t)t * c->topk + j];
			bool dup;

			r->w[(size_t)t * c->topk + j] =
				(float)(cs_rand_next(&rng) % 1000 + 1) /
				1024.0f;
			if (cs_rand_next(&rng) % 16 == 0) {
				*s = -1; /* "none" */
				continue;
			}
			do { /* inverse CDF, distinct within the token */
				double u = cs_rand_unit(&rng);
				uint32_t lo = 0, hi = c->experts - 1;

				while (lo < hi) {
					uint32_t mid = (lo + hi) / 2;

					if (cdf[mid] < u)
						lo = mid + 1;
					else
						hi = mid;
				}
				*s = (int32_t)lo;
				dup = false;
				for (uint32_t i = 0; i < j; i++)
					dup |= r->idx[(size_t)t * c->topk +
						      i] == *s;
			} while (dup);
		}
}

/* Dispatch at rank @d: every local expert's rows, in (source, token)
 * order, with the right values and origins. */
static void mo_check_dispatch(struct mo *m, struct mo_rank *r)
{
	const struct cs_moe_sim_cfg *c = m->cfg;
	uint32_t e, cnt;
	const float *rows;
	const uint32_t *src, *tok, *slot;

	for (uint32_t i = 0;
	     !cs_moe_local(r->moe, i, &e, &cnt, &rows, &src, &tok, &slot);
	     i++) {
		uint64_t k = 0;

		for (uint32_t s = 0; s < m->n; s++)
			for (uint32_t t = 0; t < c->tokens; t++)
				for (uint32_t j = 0; j < c->topk; j++) {
					const struct mo_rank *q = &m->rk[s];

					if (q->idx[(size_t)t * c->topk + j] !=
					    (int32_t)e)
						continue;
					m->checked++;
					if (k >= cnt || src[k] != s ||
					    tok[k] != t || slot[k] != j ||
					    (!c->synth &&
					     memcmp(&rows[k * c->hidden],
						    &q->x[(size_t)t *
							  c->hidden],
						    4 * c->hidden))) {
						if (!m->wrong++)
							snprintf(
								m->first,
								sizeof(m->first),
								"rank %u expert %u row %llu: not "
								"rank %u token %u slot %u",
								r->id, e,
								(unsigned long long)
									k,
								s, t, j);
					}
					k++;
				}
		if (k != cnt && !m->wrong++)
			snprintf(m->first, sizeof(m->first),
				 "rank %u expert %u: %u rows, want %llu", r->id,
				 e, cnt, (unsigned long long)k);
	}
}

static void mo_check_combine(struct mo *m, struct mo_rank *r)
{
	const struct cs_moe_sim_cfg *c = m->cfg;
	/* the reference's groups: the nodes (node_sum), or all ranks */
	uint32_t gs = c->node_sum ? m->G : m->n, nb = m->n / gs;

	for (uint32_t t = 0; t < c->tokens; t++)
		for (uint32_t h = 0; h < c->hidden; h++) {
			float acc = 0.0f, got;

			for (uint32_t b = 0; b < nb; b++) {
				float part = 0.0f;
				bool any = false;

				for (uint32_t j = 0; j < c->topk; j++) {
					size_t at = (size_t)t * c->topk + j;
					int32_t e = r->idx[at];

					if (e < 0 || m->erank[e] / gs != b)
						continue;
					any = true;
					part += r->w[at] *
						mo_expert(
							(uint32_t)e,
							r->x[(size_t)t *
								     c->hidden +
							     h]);
				}
				/* node_sum: partial sums per node, in node
				 * order; else one "node", slot order */
				if (any)
					acc += part;
			}
			got = r->out[(size_t)t * c->hidden + h];
			m->checked++;
			if (memcmp(&got, &acc, sizeof(acc)) && !m->wrong++)
				snprintf(m->first, sizeof(m->first),
					 "rank %u token %u value %u: got %a "
					 "want %a",
					 r->id, t, h, (double)got, (double)acc);
		}
}

/* ---- the ranks ---------------------------------------------------------- */

static unsigned mo_room(void *owner)
{
	struct mo_rank *r = owner;
	const struct cs_a2a_sim_cfg *c = &r->m->cfg->net;
	uint64_t q = cs_sim_backlog(r->m->sim, r->id, (r->id + 1) % r->m->n);

	if (q >= c->nic_ring)
		return 0;
	return (unsigned)((c->nic_ring - q) / (c->mtu + 142) + 1);
}

static void mo_xmit(void *owner, uint32_t node, const struct cs_pkt_hdr *h,
		    const void *payload, uint32_t len)
{
	struct mo_rank *r = owner;

	(void)cs_sim_send(r->m->sim, r->id, node, h, payload, len);
}

static void mo_notify(void *arg, uint32_t local);

/* Every rank of node @b has its dispatch: the experts run, the combine
 * of the node is set up (posted by each rank's next service). */
static void mo_node_combine(struct mo *m, uint32_t b)
{
	const struct cs_moe_sim_cfg *c = m->cfg;
	struct cs_a2a_params p[CS_A2A_MAX_RPN];
	int ret = 0;

	for (uint32_t k = 0; !ret && k < m->G; k++) {
		struct mo_rank *r = &m->rk[b * m->G + k];
		uint32_t e, cnt;
		const float *rows;
		const uint32_t *src, *tok, *slot;

		if (c->node_rows) {
			const void *rb[CS_A2A_MAX_RPN];
			const uint64_t *rc[CS_A2A_MAX_RPN], *rd[CS_A2A_MAX_RPN];

			/* the node's receive buffers: its shared memory */
			for (uint32_t j = 0; j < m->G; j++) {
				const struct mo_rank *q = &m->rk[b * m->G + j];

				rb[j] = cs_moe_dispatch_recv(q->moe);
				cs_a2a_recv_layout(q->eng[0], &rc[j], &rd[j]);
			}
			ret = cs_moe_dispatch_finish_node(r->moe, m->G, rb, rc,
							  rd);
		} else {
			ret = cs_moe_dispatch_finish(r->moe, r->eng[0]);
		}
		if (ret) {
			mo_fail(m, "dispatch result", r->id, ret);
			return;
		}
		mo_check_dispatch(m, r);
		if (c->synth)
			mo_check_tails(m, r, 0, cs_moe_dispatch_recv(r->moe),
				       4 * ((size_t)2 + c->topk +
					    (c->node_sum ? c->topk : 0)));
		for (uint32_t i = 0;
		     !c->synth && !cs_moe_local(r->moe, i, &e, &cnt, &rows,
						&src, &tok, &slot);
		     i++) {
			float *y = cs_moe_expert_out(r->moe, i);

			for (uint64_t v = 0; v < (uint64_t)cnt * c->hidden; v++)
				y[v] = mo_expert(e, rows[v]);
		}
	}
	for (uint32_t k = 0; !ret && k < m->G; k++) {
		struct mo_rank *r = &m->rk[b * m->G + k];
		struct cs_moe *nm[CS_A2A_MAX_RPN];

		if (c->node_sum) { /* the node's outputs: shared memory */
			for (uint32_t j = 0; j < m->G; j++)
				nm[j] = m->rk[b * m->G + j].moe;
			ret = cs_moe_combine_params_node(r->moe, nm, m->G,
							 &p[k]);
		} else {
			cs_moe_combine_params(r->moe, &p[k]);
		}
		p[k].deadline = c->net.time_limit_ns;
		p[k].start = cs_sim_now(m->sim);
		if (!ret && c->synth) {
			p[k].virt = &m->virt[1];
			r->crecv = p[k].recvbuf;
			r->acc[1] = calloc(p[k].recv_count + 1, 8);
			if (!r->acc[1])
				ret = -ENOMEM;
		}
	}
	if (!ret)
		ret = cs_a2a_node_init(p, m->G, &m->node[1][b]);
	if (!ret)
		cs_a2a_node_set_notify(m->node[1][b], mo_notify,
				       &m->rk[b * m->G]);
	for (uint32_t k = 0; !ret && k < m->G; k++)
		ret = cs_a2a_init(m->node[1][b], k,
				  &m->rk[b * m->G + k].eng[1]);
	if (ret) {
		mo_fail(m, "combine set-up", b * m->G, ret);
		return;
	}
	for (uint32_t k = 0; k < m->G; k++)
		cs_sim_timer(m->sim, m->rk[b * m->G + k].id,
			     cs_sim_now(m->sim));
}

/* NIC link @i of the 2n (rank -> switch, then switch -> rank) */
static const struct cs_sim_link_stats *mo_link(const struct mo *m, uint32_t i)
{
	uint32_t sw = cs_sim_nodes(m->sim) - 1, r = m->rk[i % m->n].id;
	int l = i < m->n ? cs_sim_link_find(m->sim, r, sw)
			 : cs_sim_link_find(m->sim, sw, r);

	return l >= 0 ? cs_sim_link_stats(m->sim, (uint32_t)l) : NULL;
}

/* The busiest NIC link since @busy0/@bytes0. */
static void mo_link_max(const struct mo *m, const uint64_t *busy0,
			const uint64_t *bytes0, uint64_t *busy, uint64_t *bytes)
{
	*busy = *bytes = 0;
	for (uint32_t i = 0; i < 2 * m->n; i++) {
		const struct cs_sim_link_stats *ls = mo_link(m, i);
		uint64_t b;

		if (!ls)
			continue;
		b = ls->busy_ps - busy0[i];
		if (b > *busy) {
			*busy = b;
			*bytes = ls->bytes - bytes0[i];
		}
	}
}

static void mo_done(void *owner, void *user, int status, uint32_t culprit)
{
	struct mo_rank *r = owner;
	struct mo *m = r->m;
	uint32_t b = r->id / m->G;

	(void)user;
	if (status) {
		char what[32];

		snprintf(what, sizeof(what), "op %u (rank %u)", r->phase + 1,
			 culprit);
		mo_fail(m, what, r->id, status);
		return;
	}
	if (m->tr)
		m->tr->rank_end[r->phase][r->id] = cs_sim_now(m->sim);
	if (r->phase++ == 0) {
		if (++m->ndisp == m->n) {
			for (uint32_t i = 0; m->tr && i < m->n; i++)
				cs_tp_get_stats(m->rk[i].tp, &m->tr->st0[i]);
			m->t_disp = cs_sim_now(m->sim);
			for (uint32_t i = 0; i < 2 * m->n; i++) {
				const struct cs_sim_link_stats *ls =
					mo_link(m, i);

				m->busy0[i] = ls ? ls->busy_ps : 0;
				m->bytes0[i] = ls ? ls->bytes : 0;
			}
		}
		if (!--m->node_left[b]) {
			if (m->tr)
				m->tr->node_disp[b] = cs_sim_now(m->sim);
			/* combine: set up by the node's next service */
			m->node_left[b] = UINT32_MAX;
			cs_sim_timer(m->sim, r->id, cs_sim_now(m->sim));
		}
		return;
	}
	if (cs_moe_combine_finish(r->moe, r->out)) {
		mo_fail(m, "combine result", r->id, CS_ERR_PROTO);
		return;
	}
	if (!m->cfg->synth) {
		mo_check_combine(m, r);
	} else {
		uint64_t got = mo_check_tails(m, r, 1, r->crecv, 8),
			 want = mo_combine_rows(m, r);

		if (got != want && !m->wrong++)
			snprintf(m->first, sizeof(m->first),
				 "rank %u: %llu combine rows, want %llu", r->id,
				 (unsigned long long)got,
				 (unsigned long long)want);
	}
	if (++m->ndone == m->n) {
		m->t_end = cs_sim_now(m->sim);
		cs_sim_stop(m->sim);
	}
}

static const struct cs_tp_io mo_io = {
	.tx_room = mo_room,
	.xmit = mo_xmit,
	.done = mo_done,
};

/* ---- the timeline (--trace) --------------------------------------------- */

static void mo_trace_free(struct mo_trace *t)
{
	if (!t)
		return;
	free(t->busy);
	free(t->u);
	free(t->at);
	free(t->node_disp);
	free(t->rank_end[0]);
	free(t->rank_end[1]);
	free(t->st0);
	free(t);
}

static int mo_trace_new(struct mo *m)
{
	struct mo_trace *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	m->tr = t;
	t->next = m->cfg->trace_win_ns;
	t->busy = calloc(2 * m->n, sizeof(*t->busy));
	t->node_disp = calloc(m->n / m->G, sizeof(*t->node_disp));
	t->rank_end[0] = calloc(m->n, sizeof(cs_ns_t));
	t->rank_end[1] = calloc(m->n, sizeof(cs_ns_t));
	t->st0 = calloc(m->n, sizeof(*t->st0));
	if (!t->busy || !t->node_disp || !t->rank_end[0] || !t->rank_end[1] ||
	    !t->st0)
		return -ENOMEM;
	return 0;
}

/* Each NIC link's busy fraction since the last window (called from every
 * service: a window ends at the first event after its end). */
static void mo_trace_sample(struct mo *m, cs_ns_t now)
{
	struct mo_trace *t = m->tr;
	uint32_t L = 2 * m->n;

	if (now < t->next)
		return;
	if (t->nw == t->capw) {
		uint32_t cap = t->capw ? 2 * t->capw : 256;
		float *u = realloc(t->u, (size_t)cap * L * sizeof(*u));
		cs_ns_t *at;

		if (u)
			t->u = u;
		at = u ? realloc(t->at, cap * sizeof(*at)) : NULL;
		if (!at)
			return; /* the timeline stops; the run goes on */
		t->at = at;
		t->capw = cap;
	}
	for (uint32_t i = 0; i < L; i++) {
		const struct cs_sim_link_stats *ls = mo_link(m, i);
		uint64_t b = ls ? ls->busy_ps : 0;

		t->u[(size_t)t->nw * L + i] =
			(float)((double)(b - t->busy[i]) /
				(1e3 * (double)(now - t->last)));
		t->busy[i] = b;
	}
	t->at[t->nw++] = now;
	t->last = now;
	t->next = now + m->cfg->trace_win_ns;
}

/* Sessions that resent much or timed out, at the run's end: where a
 * tail's frames went. */
static void mo_trace_sessions(const struct mo *m, FILE *f)
{
	fprintf(f, "# sessions with retx >= 32 or timeouts >= 2: rank -> "
		   "peer, rel counters, srtt/rto us, path rate Gb/s\n");
	for (uint32_t i = 0; i < m->n; i++) {
		const struct cs_rel *r;
		uint32_t node;

		for (uint32_t k = 0;
		     (r = cs_tp_sess_at(m->rk[i].tp, k, &node)) != NULL; k++) {
			const struct cs_rel_stats *s = &r->st;

			if (s->retx < 32 && s->timeouts < 2)
				continue;
			fprintf(f,
				"sess %u -> %u: data=%llu retx=%llu fast=%llu "
				"tlp=%llu timeouts=%llu spurious=%llu "
				"parked=%llu resumes=%llu srtt_us=%.1f "
				"rto_us=%.1f rate_gbps=%.2f\n",
				i, node, (unsigned long long)s->data_sent,
				(unsigned long long)s->retx,
				(unsigned long long)s->fast_retx,
				(unsigned long long)s->tlp,
				(unsigned long long)s->timeouts,
				(unsigned long long)s->spurious_rto,
				(unsigned long long)s->parked,
				(unsigned long long)s->resumes, r->srtt / 1e3,
				r->rto / 1e3,
				r->path ? r->path->cc.rate * 8 / 1e9 : 0.0);
		}
	}
}

static void mo_trace_write(const struct mo *m)
{
	const struct mo_trace *t = m->tr;
	FILE *f = m->cfg->trace;
	uint32_t L = 2 * m->n, best = 0, last = 0;
	uint64_t bb = 0, peak_held = 0;
	struct cs_tp_stats a = { 0 }, d = { 0 }, s;

	for (uint32_t b = 0; b < m->n / m->G; b++)
		fprintf(f, "node %u dispatch_done_us=%.1f\n", b,
			t->node_disp[b] / 1e3);
	for (uint32_t i = 0; i < m->n; i++) {
		fprintf(f,
			"rank %u dispatch_done_us=%.1f combine_done_us=%.1f\n",
			i, t->rank_end[0][i] / 1e3, t->rank_end[1][i] / 1e3);
		cs_tp_get_stats(m->rk[i].tp, &s);
#define MO_ADD(x) (a.x += s.x, d.x += t->st0[i].x)
		MO_ADD(tx_data);
		MO_ADD(tx_retx);
		MO_ADD(rel_timeouts);
		MO_ADD(rel_spurious);
		MO_ADD(rel_fast_retx);
		MO_ADD(rel_tlp);
		MO_ADD(rel_dup_rcvd);
		MO_ADD(rx_held);
		MO_ADD(rx_replayed);
		MO_ADD(rx_hold_full);
		MO_ADD(tx_resumes);
		MO_ADD(rel_parked);
		MO_ADD(rel_resumes);
		MO_ADD(rel_park_probes);
#undef MO_ADD
		peak_held = CS_MAX(peak_held, s.peak_held);
	}
	/* counters at the last dispatch's end; combine: what came after
	 * (a node's combine may start before: its frames count there) */
#define MO_PR(x)                                                               \
	fprintf(f, "tp %s dispatch=%llu combine=%llu\n", #x,                   \
		(unsigned long long)d.x, (unsigned long long)(a.x - d.x))
	MO_PR(tx_data);
	MO_PR(tx_retx);
	MO_PR(rel_timeouts);
	MO_PR(rel_spurious);
	MO_PR(rel_fast_retx);
	MO_PR(rel_tlp);
	MO_PR(rel_dup_rcvd);
	MO_PR(rx_held);
	MO_PR(rx_replayed);
	MO_PR(rx_hold_full);
	MO_PR(tx_resumes);
	MO_PR(rel_parked);
	MO_PR(rel_resumes);
	MO_PR(rel_park_probes);
#undef MO_PR
	/* the most frames one core held at once (against tp.hold_frames) */
	fprintf(f, "tp peak_held_per_core=%llu\n",
		(unsigned long long)peak_held);
	for (uint32_t i = 0; i < L; i++) {
		const struct cs_sim_link_stats *ls = mo_link(m, i);

		if (ls && ls->busy_ps - m->busy0[i] > bb) {
			bb = ls->busy_ps - m->busy0[i];
			best = i;
		}
	}
	fprintf(f, "combine busiest link: %s of rank %u (%.1f us busy)\n",
		best < m->n ? "up" : "down", best % m->n, bb / 1e6);
	for (uint32_t i = 1; i < m->n; i++)
		if (t->rank_end[1][i] > t->rank_end[1][last])
			last = i;
	fprintf(f, "last combine: rank %u\n", last);
	fprintf(f, "# window end_us: up links mean min max, down links mean "
		   "min max, the combine's busiest link, the last rank's up "
		   "and down links\n");
	for (uint32_t w = 0; w < t->nw; w++) {
		const float *u = &t->u[(size_t)w * L];
		double sm[2] = { 0, 0 }, mn[2] = { 9, 9 }, mx[2] = { 0, 0 };

		for (uint32_t i = 0; i < L; i++) {
			uint32_t k = i >= m->n;

			sm[k] += u[i];
			mn[k] = CS_MIN(mn[k], (double)u[i]);
			mx[k] = CS_MAX(mx[k], (double)u[i]);
		}
		fprintf(f,
			"win %.0f: %.2f %.2f %.2f  %.2f %.2f %.2f  %.2f  %.2f "
			"%.2f\n",
			t->at[w] / 1e3, sm[0] / m->n, mn[0], mx[0],
			sm[1] / m->n, mn[1], mx[1], (double)u[best],
			(double)u[last], (double)u[m->n + last]);
	}
	mo_trace_sessions(m, f);
}

static void mo_service(struct mo_rank *r, cs_ns_t now)
{
	struct mo *m = r->m;
	const struct cs_a2a_sim_cfg *c = &m->cfg->net;
	uint32_t b = r->id / m->G;
	uint64_t q;
	cs_ns_t wake;
	int ret;

	if (m->tr)
		mo_trace_sample(m, now);
	if (m->node_left[b] == UINT32_MAX) {
		m->node_left[b] = 0;
		mo_node_combine(m, b);
		if (m->nfailed)
			return;
	}
	for (uint32_t op = 0; op < 2; op++) {
		if (r->posted[op] || !r->eng[op])
			continue;
		r->posted[op] = true;
		ret = cs_tp_post(r->tp, MO_GROUP, op + 1, &cs_a2a_flow_ops,
				 r->eng[op], 1u << 20, r, now);
		if (ret) {
			mo_fail(m, "post", r->id, ret);
			return;
		}
	}
	cs_tp_poll(r->tp, now);
	wake = cs_tp_next_deadline(r->tp, now);
	q = cs_sim_backlog(m->sim, r->id, (r->id + 1) % m->n);
	if (q >= c->nic_ring / 2)
		wake = CS_MIN(wake,
			      now + (cs_ns_t)((double)q * 8 / c->gbps / 2) + 1);
	if (m->node_left[b] == UINT32_MAX)
		wake = now + 1;
	if (wake != CS_NS_NEVER)
		cs_sim_timer(m->sim, r->id, wake <= now ? now + 1 : wake);
}

static void mo_rx(struct cs_sim *sim, void *ctx, const struct cs_sim_pkt *pkt,
		  cs_ns_t now)
{
	struct mo_rank *r = ctx;

	(void)sim;
	cs_tp_rx(r->tp, pkt->src, &pkt->hdr, pkt->data, now);
	mo_service(r, now);
}

static void mo_timer(struct cs_sim *sim, void *ctx, cs_ns_t now)
{
	(void)sim;
	mo_service(ctx, now);
}

static const struct cs_sim_node_ops mo_ops = {
	.rx = mo_rx,
	.timer = mo_timer,
};

static void mo_notify(void *arg, uint32_t local)
{
	struct mo_rank *first = arg;

	cs_sim_timer(first->m->sim, first->id + local,
		     cs_sim_now(first->m->sim));
}

/* ---- set-up ------------------------------------------------------------- */

static int mo_setup(struct mo *m)
{
	const struct cs_moe_sim_cfg *c = m->cfg;
	const struct cs_a2a_sim_cfg *nc = &c->net;
	struct cs_sim_link_params host = {
		.gbps = nc->gbps,
		.delay_ns = nc->delay_ns,
		.loss = nc->loss,
	};
	struct cs_sim_link_params port = host;
	struct cs_xport_params xp = nc->xp;
	struct cs_a2a_params p[CS_A2A_MAX_RPN];
	uint32_t *ids = malloc(m->n * sizeof(*ids));
	double *cdf = malloc(c->experts * sizeof(*cdf)), sum = 0;
	int ret = ids && cdf ? 0 : -ENOMEM;

	port.queue_bytes = nc->port_buffer;
	xp.cc.line_gbps = nc->gbps;
	if (xp.cc.min_gbps > xp.cc.line_gbps)
		xp.cc.min_gbps = xp.cc.line_gbps;
	for (uint32_t e = 0; !ret && e < c->experts; e++) {
		sum += 1.0 / pow(e + 1.0, c->skew);
		cdf[e] = sum;
		m->erank[e] = (uint32_t)((uint64_t)e * m->n / c->experts);
	}
	for (uint32_t e = 0; !ret && e < c->experts; e++)
		cdf[e] /= sum;
	for (uint32_t i = 0; !ret && i < m->n; i++) {
		struct mo_rank *r = &m->rk[i];
		size_t tk = (size_t)c->tokens * c->topk;

		r->m = m;
		ret = cs_sim_node_add(m->sim, &mo_ops, r, &r->id);
		if (!ret)
			ret = cs_tp_create(&nc->tp, &xp, &mo_io, r, r->id, 1,
					   &r->tp);
		ids[i] = r->id;
		/* synth: no values stored (x is never read) */
		r->x = malloc(
			c->synth ? 4 : ((size_t)c->tokens * c->hidden + 1) * 4);
		r->out = malloc(
			c->synth ? 4 : ((size_t)c->tokens * c->hidden + 1) * 4);
		r->w = malloc((tk + 1) * 4);
		r->idx = malloc((tk + 1) * 4);
		if (!ret && (!r->x || !r->out || !r->w || !r->idx))
			ret = -ENOMEM;
		if (!ret)
			mo_tokens(m, r, cdf);
	}
	if (!ret)
		ret = cs_sim_star(m->sim, ids, m->n, &host, &port, NULL);
	for (uint32_t i = 0; !ret && i < m->n; i++)
		ret = cs_tp_group_add(m->rk[i].tp, MO_GROUP, ids, m->n, NULL);
	for (uint32_t b = 0; !ret && b < m->n / m->G; b++) {
		for (uint32_t k = 0; !ret && k < m->G; k++) {
			struct mo_rank *r = &m->rk[b * m->G + k];
			struct cs_moe_cfg mc = {
				.nranks = m->n,
				.rank = r->id,
				.ranks_per_node = m->G,
				.tokens = c->tokens,
				.max_tokens = c->tokens,
				.hidden = c->hidden,
				.topk = c->topk,
				.experts = c->experts,
				.expert_rank = m->erank,
				.mtu_payload = nc->mtu,
				.flags = (nc->no_bucket ? CS_A2A_F_NO_BUCKET
							: 0) |
					 (m->rail ? CS_A2A_F_RAIL : 0) |
					 (c->node_rows ? CS_MOE_F_NODE_ROWS
						       : 0) |
					 (c->node_sum ? CS_MOE_F_NODE_SUM : 0) |
					 (c->synth ? CS_MOE_F_NO_VALUES : 0),
				.group = MO_GROUP,
				.epoch = 1,
				.op_dispatch = 1,
				.op_combine = 2,
			};

			ret = cs_moe_create(&mc, r->x, r->idx, r->w, &r->moe);
			if (!ret) {
				cs_moe_dispatch_params(r->moe, &p[k]);
				p[k].deadline = nc->time_limit_ns;
			}
			if (!ret && c->synth) {
				p[k].virt = &m->virt[0];
				r->acc[0] = calloc(p[k].recv_count + 1, 8);
				if (!r->acc[0])
					ret = -ENOMEM;
			}
		}
		if (!ret)
			ret = cs_a2a_node_init(p, m->G, &m->node[0][b]);
		for (uint32_t k = 0; !ret && k < m->G; k++)
			ret = cs_a2a_init(m->node[0][b], k,
					  &m->rk[b * m->G + k].eng[0]);
		if (!ret) {
			cs_a2a_node_set_notify(m->node[0][b], mo_notify,
					       &m->rk[b * m->G]);
			m->node_left[b] = m->G;
		}
	}
	free(ids);
	free(cdf);
	return ret;
}

static void mo_free(struct mo *m)
{
	for (uint32_t i = 0; m->rk && i < m->n; i++) {
		struct mo_rank *r = &m->rk[i];

		cs_tp_destroy(r->tp);
		cs_a2a_free(r->eng[0]);
		cs_a2a_free(r->eng[1]);
		cs_moe_free(r->moe);
		free(r->x);
		free(r->out);
		free(r->w);
		free(r->idx);
		free(r->acc[0]);
		free(r->acc[1]);
	}
	free(m->vtmp);
	mo_trace_free(m->tr);
	for (uint32_t b = 0; m->node[0] && b < m->n / m->G; b++) {
		cs_a2a_node_free(m->node[0][b]);
		cs_a2a_node_free(m->node[1][b]);
	}
	free(m->node[0]);
	free(m->node[1]);
	free(m->node_left);
	free(m->busy0);
	free(m->bytes0);
	free(m->rk);
	free(m->erank);
	cs_sim_destroy(m->sim);
}

int cs_moe_sim_cfg_default(struct cs_moe_sim_cfg *c)
{
	memset(c, 0, sizeof(*c));
	c->tokens = 128;
	c->hidden = 256;
	c->topk = 4;
	c->experts = 32;
	c->vbytes = 4;
	c->trace_win_ns = 50000;
	return cs_a2a_sim_cfg_default(&c->net);
}

/*
 * The bound's bytes: for every token, its row once to every other node
 * that holds one of its experts (what a token must cross at least, the
 * two-level scheme's count); per node the larger of what leaves and what
 * arrives, the largest over the nodes.
 */
static int mo_node_bytes(const struct mo *m, uint64_t *max)
{
	const struct cs_moe_sim_cfg *c = m->cfg;
	uint32_t L = c->net.rpn, nn = m->n / L;
	uint64_t row = (uint64_t)c->hidden * c->vbytes;
	uint64_t *out = calloc(nn, sizeof(*out)), *in = calloc(nn, sizeof(*in));
	uint32_t *seen = calloc(nn, sizeof(*seen)), mark = 0;

	if (!out || !in || !seen) {
		free(out);
		free(in);
		free(seen);
		return -ENOMEM;
	}
	for (uint32_t r = 0; r < m->n; r++)
		for (uint32_t t = 0; t < c->tokens; t++) {
			mark++;
			for (uint32_t j = 0; j < c->topk; j++) {
				int32_t e =
					m->rk[r].idx[(size_t)t * c->topk + j];
				uint32_t dn;

				if (e < 0)
					continue;
				dn = m->erank[e] / L;
				if (dn == r / L || seen[dn] == mark)
					continue;
				seen[dn] = mark;
				out[r / L] += row;
				in[dn] += row;
			}
		}
	*max = 0;
	for (uint32_t k = 0; k < nn; k++)
		*max = CS_MAX(*max, CS_MAX(out[k], in[k]));
	free(out);
	free(in);
	free(seen);
	return 0;
}

int cs_moe_sim_run(const struct cs_moe_sim_cfg *c,
		   struct cs_moe_sim_result *res)
{
	const struct cs_a2a_sim_cfg *nc = &c->net;
	struct cs_sim_params sp = { .seed = nc->seed };
	struct mo m = { .cfg = c };
	int ret;

	memset(res, 0, sizeof(*res));
	if (nc->ranks < 2 || nc->ranks > CS_A2A_MAX_RANKS || !nc->rpn ||
	    nc->rpn > CS_A2A_MAX_RPN || nc->ranks % nc->rpn || !c->hidden ||
	    !c->topk || c->topk > CS_MOE_MAX_TOPK || c->topk > c->experts ||
	    !c->experts || nc->nodata || nc->tp.max_nodes <= nc->ranks ||
	    (c->vbytes != 4 && (c->vbytes != 2 || !c->synth)) ||
	    (c->corrupt && !c->synth) || c->corrupt > 2)
		return -EINVAL;
	res->algo = nc->algo != CS_A2A_AUTO
			    ? nc->algo
			    : cs_a2a_choose(nc->ranks, nc->rpn,
					    (uint64_t)c->tokens * c->hidden *
						    c->vbytes * c->topk /
						    nc->ranks);
	if (res->algo != CS_A2A_FLAT && nc->ranks / nc->rpn < 2)
		return -EINVAL;
	m.n = nc->ranks;
	m.G = res->algo != CS_A2A_FLAT ? nc->rpn : 1;
	m.rail = res->algo == CS_A2A_RAIL;
	if ((c->node_rows || c->node_sum) && m.G < 2)
		return -EINVAL; /* rows per node need the node's memory */
	sp.max_payload = nc->mtu;
	ret = cs_sim_create(&m.sim, &sp);
	if (ret)
		return ret;
	m.rk = calloc(m.n, sizeof(*m.rk));
	m.erank = calloc(c->experts, sizeof(*m.erank));
	m.node[0] = calloc(m.n / m.G, sizeof(*m.node[0]));
	m.node[1] = calloc(m.n / m.G, sizeof(*m.node[1]));
	m.node_left = calloc(m.n / m.G, sizeof(*m.node_left));
	m.busy0 = calloc(2 * m.n, sizeof(*m.busy0));
	if (c->synth) {
		/* dispatch rows: token, mask, ids (, weights), then x at
		 * byte 4 (2 + K); combine rows: token, slot or mask, then y */
		for (uint32_t op = 0; op < 2; op++) {
			m.vctx[op] = (struct mo_vctx){ .m = &m, .op = op };
			m.virt[op] = (struct cs_a2a_virt){
				.tail = c->hidden * c->vbytes,
				.at = op ? 8 : 4 * (2 + c->topk),
				.gen = mo_vgen,
				.got = mo_vgot,
				.arg = &m.vctx[op],
			};
		}
		m.vtmp = malloc(4096);
		if (!m.vtmp) {
			ret = -ENOMEM;
			goto out;
		}
	}
	m.bytes0 = calloc(2 * m.n, sizeof(*m.bytes0));
	ret = m.rk && m.erank && m.node[0] && m.node[1] && m.node_left &&
			      m.busy0 && m.bytes0
		      ? mo_setup(&m)
		      : -ENOMEM;
	if (!ret)
		ret = mo_node_bytes(&m, &res->node_bytes_max);
	if (ret)
		goto out;
	if (c->trace && c->trace_win_ns)
		ret = mo_trace_new(&m);
	if (ret)
		goto out;
	for (uint32_t i = 0; i < m.n; i++)
		cs_sim_timer(m.sim, m.rk[i].id, 0);
	ret = cs_sim_run(m.sim, nc->time_limit_ns + CS_NS_PER_S);
	if (ret > 0)
		ret = 0;
	res->done = m.ndone;
	res->failed = m.nfailed;
	res->wrong = m.wrong;
	res->checked = m.checked;
	res->t_dispatch_ns = m.t_disp;
	res->time_ns = m.t_end;
	snprintf(res->first, sizeof(res->first), "%s", m.first);
	if (m.ndisp == m.n) {
		/* dispatch: the snapshot at its end */
		for (uint32_t i = 0; i < 2 * m.n; i++)
			if (m.busy0[i] > res->link_busy_ps[0]) {
				res->link_busy_ps[0] = m.busy0[i];
				res->link_bytes[0] = m.bytes0[i];
			}
		mo_link_max(&m, m.busy0, m.bytes0, &res->link_busy_ps[1],
			    &res->link_bytes[1]);
	}
	if (m.tr) /* also of a run that failed: where it stood */
		mo_trace_write(&m);
	for (uint32_t i = 0; i < m.n; i++) {
		struct cs_tp_stats ts;
		int l = cs_sim_link_find(m.sim, cs_sim_nodes(m.sim) - 1,
					 m.rk[i].id);
		const struct cs_sim_link_stats *ls =
			l >= 0 ? cs_sim_link_stats(m.sim, (uint32_t)l) : NULL;
		struct cs_a2a_stats es;

		cs_tp_get_stats(m.rk[i].tp, &ts);
		res->retx += ts.tx_retx;
		if (m.rk[i].eng[0]) {
			cs_a2a_get_stats(m.rk[i].eng[0], &es);
			res->disp_bytes += es.tx_bytes;
		}
		if (ls) {
			res->max_queue = CS_MAX(res->max_queue, ls->queue_max);
			res->drops += ls->drop_queue;
		}
	}
out:
	mo_free(&m);
	return ret;
}

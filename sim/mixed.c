/* SPDX-License-Identifier: MIT */
/*
 * collstack sim mixed: many groups, many operations of random kinds and
 * sizes, all in flight together, each rank posting in its own random
 * order, over the transport core (transport/tp.h) that collstackd runs,
 * one core per simulated node. Every element of every result is checked.
 *
 * Group 1 spans every rank; the others a random subset in a random ring
 * order. Operation k of group g is the same everywhere (kind, size, type,
 * operator, root: drawn from the seed), posted as op id k + 1; a rank
 * posts its operations in a random order, one every [0, --post-gap) ns,
 * so that frames of operations a rank has not posted yet arrive (held by
 * the core, fed to the operation when it is posted).
 *
 * Values are small integers so that every reduction is exact in every
 * type and order: a result is right or wrong, bit for bit.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll_data.h"
#include "collectives/ring.h"
#include "sim/mixed.h"
#include "sim/sim.h"
#include "transport/tp.h"

struct mx_desc {
	enum cs_coll_kind kind;
	enum cs_dtype dtype;
	enum cs_redop op;
	size_t count;
	uint32_t root;
};

struct mx_group {
	uint32_t id, n;
	uint32_t *nodes; /* nodes[rank] */
	int32_t *rank_of; /* [ranks] */
	struct mx_desc *ops; /* [ops] */
	/* per op: the reduced values every rank's result is checked
	 * against, computed once and freed when the last rank is done */
	double **want;
	uint32_t *pending; /* ranks not done with it */
};

struct mx;

/* One rank's instance of one operation. */
struct mx_inst {
	struct mx_node *nd;
	uint32_t g, k;
	struct cs_coll *c;
	void *send, *recv;
	bool done;
};

struct mx_node {
	struct mx *m;
	uint32_t id;
	struct cs_tp *tp;
	struct mx_inst *inst; /* to post, in posting order */
	uint32_t ninst, nposted, ndone;
	cs_ns_t next_post;
	uint64_t rng;
};

struct mx {
	const struct cs_mixed_cfg *cfg;
	struct cs_sim *sim;
	struct mx_group *g;
	struct mx_node *nd;
	uint64_t total, done, failed, wrong;
	cs_ns_t t_end;
	uint32_t peak;
	char first[200];
};

/* ---- data -------------------------------------------------------------- */

static uint64_t mx_hash(uint64_t a, uint64_t b, uint64_t c)
{
	uint64_t z = a ^ (b * 0x9e3779b97f4a7c15ull) ^
		     (c * 0xd1b54a32d192ed03ull);

	z = (z ^ (z >> 29)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 32)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Rank @r's input element @i of operation (@g, @k). */
static double mx_value(const struct mx *m, uint32_t g, uint32_t k,
		       const struct mx_desc *d, uint32_t r, uint64_t i)
{
	uint64_t h = mx_hash(m->cfg->seed ^ ((uint64_t)g << 40 | k),
			     r + 1, i);

	switch (d->op) {
	case CS_SUM:
		return (double)(int)(h % 7) - 3;
	case CS_PROD:
		return (h & 1) ? 1 : -1;
	default:
		return (double)(int)(h % 2001) - 1000;
	}
}

static void mx_put(enum cs_dtype t, void *buf, size_t i, double v)
{
	switch (t) {
	case CS_F32:
		((float *)buf)[i] = (float)v;
		break;
	case CS_F64:
		((double *)buf)[i] = v;
		break;
	case CS_I32:
		((int32_t *)buf)[i] = (int32_t)v;
		break;
	default:
		((int64_t *)buf)[i] = (int64_t)v;
		break;
	}
}

static double mx_get(enum cs_dtype t, const void *buf, size_t i)
{
	switch (t) {
	case CS_F32:
		return ((const float *)buf)[i];
	case CS_F64:
		return ((const double *)buf)[i];
	case CS_I32:
		return ((const int32_t *)buf)[i];
	default:
		return (double)((const int64_t *)buf)[i];
	}
}

/* The reduction over the group's ranks of element @i of their inputs. */
static double mx_reduced(const struct mx *m, uint32_t gi, uint32_t k,
			 const struct mx_desc *d, uint64_t i)
{
	const struct mx_group *g = &m->g[gi];
	double v = mx_value(m, gi, k, d, 0, i);

	for (uint32_t r = 1; r < g->n; r++)
		v = cs_td_red(d->op, v, mx_value(m, gi, k, d, r, i));
	return v;
}

static bool mx_reducing(enum cs_coll_kind k)
{
	return k == CS_COLL_ALLREDUCE || k == CS_COLL_REDUCE ||
	       k == CS_COLL_REDUCE_SCATTER;
}

/* The reduced vector of op @k of group @gi (NULL: no memory). */
static const double *mx_want(struct mx *m, uint32_t gi, uint32_t k)
{
	struct mx_group *g = &m->g[gi];
	const struct mx_desc *d = &g->ops[k];
	size_t n = d->count * (d->kind == CS_COLL_REDUCE_SCATTER ? g->n : 1);

	if (!g->want[k]) {
		g->want[k] = malloc((n ? n : 1) * sizeof(double));
		for (size_t i = 0; g->want[k] && i < n; i++)
			g->want[k][i] = mx_reduced(m, gi, k, d, i);
	}
	return g->want[k];
}

/* Elements of the send and receive buffers of rank @r. */
static void mx_sizes(const struct mx_desc *d, uint32_t n, size_t *ns,
		     size_t *nr)
{
	switch (d->kind) {
	case CS_COLL_REDUCE_SCATTER:
		*ns = (size_t)n * d->count;
		*nr = d->count;
		break;
	case CS_COLL_ALL_GATHER:
		*ns = d->count;
		*nr = (size_t)n * d->count;
		break;
	case CS_COLL_BARRIER:
		*ns = *nr = 0;
		break;
	default:
		*ns = *nr = d->count;
		break;
	}
}

/* What rank @r's receive buffer must hold at element @x. */
static double mx_expect(const struct mx *m, const struct mx_inst *in,
			const struct mx_desc *d, const double *want,
			uint32_t r, size_t x)
{
	switch (d->kind) {
	case CS_COLL_REDUCE_SCATTER:
		return want[(uint64_t)r * d->count + x];
	case CS_COLL_ALL_GATHER:
		return mx_value(m, in->g, in->k, d, (uint32_t)(x / d->count),
				x % d->count);
	case CS_COLL_BROADCAST:
		return mx_value(m, in->g, in->k, d, d->root, x);
	default:
		return want[x];
	}
}

static void mx_verify(struct mx *m, struct mx_inst *in)
{
	const struct mx_group *g = &m->g[in->g];
	const struct mx_desc *d = &g->ops[in->k];
	uint32_t r = (uint32_t)g->rank_of[in->nd->id];
	size_t ns, nr;
	uint64_t bad = 0;

	const double *wv = NULL;

	mx_sizes(d, g->n, &ns, &nr);
	if (d->kind == CS_COLL_REDUCE && r != d->root)
		nr = 0; /* a non-root's buffer holds partial sums */
	if (nr && mx_reducing(d->kind)) {
		wv = mx_want(m, in->g, in->k);
		if (!wv) {
			m->failed++;
			snprintf(m->first, sizeof(m->first),
				 "out of memory checking results");
			return;
		}
	}
	for (size_t x = 0; x < nr; x++) {
		double want = mx_expect(m, in, d, wv, r, x);
		double got = mx_get(d->dtype, in->recv, x);

		if (got != want && !bad++ && !m->wrong)
			snprintf(m->first, sizeof(m->first),
				 "group %u op %u (%s) rank %u element %zu: "
				 "got %g want %g",
				 g->id, in->k + 1, cs_coll_kind_name(d->kind),
				 r, x, got, want);
	}
	m->wrong += bad;
}

/* ---- the nodes --------------------------------------------------------- */

static unsigned mx_room(void *owner)
{
	(void)owner;
	return 64;
}

static void mx_xmit(void *owner, uint32_t node, const struct cs_pkt_hdr *h,
		    const void *payload, uint32_t len)
{
	struct mx_node *nd = owner;

	/* -ENOBUFS: tail-dropped at the NIC, like the wire; the transport
	 * recovers it */
	(void)cs_sim_send(nd->m->sim, nd->id, node, h,
			  nd->m->cfg->nodata ? NULL : payload, len);
}

static void mx_done(void *owner, void *user, int status, uint32_t culprit)
{
	struct mx_node *nd = owner;
	struct mx_inst *in = user;
	struct mx *m = nd->m;

	in->done = true;
	nd->ndone++;
	m->done++;
	if (status) {
		if (!m->failed++ && !m->wrong)
			snprintf(m->first, sizeof(m->first),
				 "node %u group %u op %u: %s (rank %u)",
				 nd->id, m->g[in->g].id, in->k + 1,
				 cs_strerror(status), culprit);
	} else if (!m->cfg->nodata) {
		mx_verify(m, in);
	}
	if (!--m->g[in->g].pending[in->k]) {
		free(m->g[in->g].want[in->k]);
		m->g[in->g].want[in->k] = NULL;
	}
	cs_coll_free(in->c);
	in->c = NULL;
	free(in->send);
	free(in->recv);
	in->send = in->recv = NULL;
	if (m->done == m->total) {
		m->t_end = cs_sim_now(m->sim);
		cs_sim_stop(m->sim);
	}
}

static const struct cs_tp_io mx_io = {
	.tx_room = mx_room,
	.xmit = mx_xmit,
	.done = mx_done,
};

static int mx_post(struct mx_node *nd, struct mx_inst *in, cs_ns_t now)
{
	struct mx *m = nd->m;
	const struct mx_group *g = &m->g[in->g];
	const struct mx_desc *d = &g->ops[in->k];
	uint32_t r = (uint32_t)g->rank_of[nd->id];
	size_t esz = cs_dtype_size(d->dtype), ns, nr;
	struct cs_coll_params p;
	int ret;

	mx_sizes(d, g->n, &ns, &nr);
	if (!m->cfg->nodata && ns + nr) {
		in->send = malloc(ns ? ns * esz : 1);
		in->recv = malloc(nr ? nr * esz : 1);
		if (!in->send || !in->recv)
			return -ENOMEM;
		for (size_t x = 0; x < ns; x++)
			mx_put(d->dtype, in->send, x,
			       mx_value(m, in->g, in->k, d, r, x));
		memset(in->recv, 0, nr * esz);
	}
	cs_coll_params_default(&p, &m->cfg->coll);
	cs_coll_params_op(&p, d->kind, g->n, r, d->root, in->send, in->recv,
			  d->count, d->dtype, d->op);
	p.group = g->id;
	p.op_id = in->k + 1;
	p.epoch = cs_tp_epoch(nd->tp);
	p.start = now;
	if (m->cfg->nodata)
		p.flags |= CS_COLL_F_NODATA;
	ret = cs_coll_init(&p, &in->c);
	if (ret)
		return ret;
	ret = cs_tp_post(nd->tp, g->id, in->k + 1, &cs_coll_flow_ops, in->c,
			 (uint64_t)CS_MAX(ns, nr) * esz, in, now);
	if (ret) {
		cs_coll_free(in->c);
		in->c = NULL;
	}
	return ret;
}

static void mx_service(struct mx_node *nd, cs_ns_t now)
{
	struct mx *m = nd->m;
	cs_ns_t wake;
	uint32_t fl;
	int ret;

	while (nd->nposted < nd->ninst && now >= nd->next_post) {
		ret = mx_post(nd, &nd->inst[nd->nposted], now);
		if (ret) {
			snprintf(m->first, sizeof(m->first),
				 "node %u: post failed: %s", nd->id,
				 cs_strerror(ret));
			m->failed++;
			cs_sim_stop(m->sim);
			return;
		}
		nd->nposted++;
		if (m->cfg->post_gap_ns)
			nd->next_post =
				now + cs_rand_next(&nd->rng) %
					      m->cfg->post_gap_ns;
	}
	cs_tp_poll(nd->tp, now);
	fl = cs_tp_in_flight(nd->tp);
	if (fl > m->peak)
		m->peak = fl;
	wake = cs_tp_next_deadline(nd->tp, now);
	if (nd->nposted < nd->ninst)
		wake = CS_MIN(wake, nd->next_post);
	cs_sim_timer(m->sim, nd->id, wake <= now ? now + 1 : wake);
}

static void mx_rx(struct cs_sim *sim, void *ctx, const struct cs_sim_pkt *pkt,
		  cs_ns_t now)
{
	struct mx_node *nd = ctx;

	(void)sim;
	cs_tp_rx(nd->tp, pkt->src, &pkt->hdr, pkt->data, now);
	mx_service(nd, now);
}

static void mx_timer(struct cs_sim *sim, void *ctx, cs_ns_t now)
{
	(void)sim;
	mx_service(ctx, now);
}

static const struct cs_sim_node_ops mx_node_ops = {
	.rx = mx_rx,
	.timer = mx_timer,
};

/* ---- set-up ------------------------------------------------------------ */

static const enum cs_coll_kind mx_kinds[] = {
	CS_COLL_ALLREDUCE, CS_COLL_ALLREDUCE,	   CS_COLL_REDUCE_SCATTER,
	CS_COLL_ALL_GATHER, CS_COLL_BROADCAST,	   CS_COLL_REDUCE,
	CS_COLL_BARRIER,
};
static const enum cs_dtype mx_types[] = { CS_F32, CS_F64, CS_I32, CS_I64 };

static void mx_shuffle(uint32_t *v, uint32_t n, uint64_t *rng)
{
	for (uint32_t i = n; i > 1; i--) {
		uint32_t j = (uint32_t)(cs_rand_next(rng) % i), t = v[i - 1];

		v[i - 1] = v[j];
		v[j] = t;
	}
}

static int mx_groups(struct mx *m, uint64_t *rng)
{
	const struct cs_mixed_cfg *c = m->cfg;
	double lo = log((double)c->min_bytes), hi = log((double)c->max_bytes);
	uint32_t *perm = malloc(c->ranks * sizeof(*perm));

	m->g = calloc(c->groups, sizeof(*m->g));
	if (!perm || !m->g) {
		free(perm);
		return -ENOMEM;
	}
	for (uint32_t gi = 0; gi < c->groups; gi++) {
		struct mx_group *g = &m->g[gi];

		for (uint32_t i = 0; i < c->ranks; i++)
			perm[i] = i;
		g->id = gi + 1;
		g->n = c->ranks;
		if (gi) { /* a random subset of 2 .. ranks, random order */
			mx_shuffle(perm, c->ranks, rng);
			g->n = 2 + (uint32_t)(cs_rand_next(rng) %
					      (c->ranks - 1));
		}
		g->nodes = malloc(g->n * sizeof(*g->nodes));
		g->rank_of = malloc(c->ranks * sizeof(*g->rank_of));
		g->ops = calloc(c->ops, sizeof(*g->ops));
		g->want = calloc(c->ops, sizeof(*g->want));
		g->pending = calloc(c->ops, sizeof(*g->pending));
		if (!g->nodes || !g->rank_of || !g->ops || !g->want ||
		    !g->pending) {
			free(perm);
			return -ENOMEM;
		}
		memset(g->rank_of, 0xff, c->ranks * sizeof(*g->rank_of));
		for (uint32_t r = 0; r < g->n; r++) {
			g->nodes[r] = perm[r];
			g->rank_of[perm[r]] = (int32_t)r;
		}
		for (uint32_t k = 0; k < c->ops; k++) {
			struct mx_desc *d = &g->ops[k];
			double b = exp(lo + (hi - lo) * cs_rand_unit(rng));
			size_t esz;

			d->kind = mx_kinds[cs_rand_next(rng) %
					   CS_ARRAY_SIZE(mx_kinds)];
			d->dtype = mx_types[cs_rand_next(rng) %
					    CS_ARRAY_SIZE(mx_types)];
			d->op = (enum cs_redop)(cs_rand_next(rng) %
						CS_REDOP_COUNT);
			d->root = (uint32_t)(cs_rand_next(rng) % g->n);
			if (c->kind >= 0) {
				d->kind = (enum cs_coll_kind)c->kind;
				d->dtype = CS_F32;
				d->op = CS_SUM;
				d->root = 0;
				b = (double)c->bytes;
			}
			esz = cs_dtype_size(d->dtype);
			/* the size is the op's largest buffer */
			if (d->kind == CS_COLL_REDUCE_SCATTER ||
			    d->kind == CS_COLL_ALL_GATHER)
				b /= g->n;
			d->count = (size_t)b / esz ? (size_t)b / esz : 1;
			g->pending[k] = g->n;
			if (d->kind == CS_COLL_BARRIER)
				d->count = 0;
		}
	}
	free(perm);
	return 0;
}

static int mx_nodes(struct mx *m, uint64_t *rng)
{
	const struct cs_mixed_cfg *c = m->cfg;
	struct cs_sim_link_params lp = {
		.gbps = c->gbps,
		.delay_ns = c->delay_ns,
		.queue_bytes = 4u << 20,
		.loss = c->loss,
	};
	uint32_t sw, id, up;
	int ret;

	m->nd = calloc(c->ranks, sizeof(*m->nd));
	if (!m->nd)
		return -ENOMEM;
	for (uint32_t i = 0; i < c->ranks; i++) {
		struct mx_node *nd = &m->nd[i];

		nd->m = m;
		nd->rng = cs_rand_next(rng) | 1;
		ret = cs_sim_node_add(m->sim, &mx_node_ops, nd, &id);
		if (ret)
			return ret;
		nd->id = id;
		ret = cs_tp_create(&c->tp, &c->xp, &mx_io, nd, id, 1, &nd->tp);
		if (ret)
			return ret;
	}
	if (c->ring) { /* neighbours only: ring traffic of group 1 */
		ret = 0;
		for (uint32_t i = 0; !ret && i < c->ranks; i++)
			if (c->ranks > 2 || i == 0)
				ret = cs_sim_link_pair(m->sim, i,
						       (i + 1) % c->ranks, &lp,
						       NULL, NULL);
		(void)sw;
		(void)up;
	} else {
		ret = cs_sim_switch_add(m->sim, 500, &sw);
		for (uint32_t i = 0; !ret && i < c->ranks; i++) {
			ret = cs_sim_link_pair(m->sim, i, sw, &lp, &up, NULL);
			if (!ret)
				ret = cs_sim_route_default(m->sim, i, up);
		}
	}
	for (uint32_t i = 0; !ret && i < c->ranks; i++) {
		struct mx_node *nd = &m->nd[i];
		uint32_t *order;

		for (uint32_t gi = 0; !ret && gi < c->groups; gi++)
			if (m->g[gi].rank_of[i] >= 0)
				ret = cs_tp_group_add(nd->tp, m->g[gi].id,
						      m->g[gi].nodes,
						      m->g[gi].n, NULL);
		if (ret)
			break;
		nd->inst = calloc((size_t)c->groups * c->ops,
				  sizeof(*nd->inst));
		order = malloc((size_t)c->groups * c->ops * sizeof(*order));
		if (!nd->inst || !order) {
			free(order);
			return -ENOMEM;
		}
		for (uint32_t gi = 0; gi < c->groups; gi++)
			for (uint32_t k = 0;
			     m->g[gi].rank_of[i] >= 0 && k < c->ops; k++)
				order[nd->ninst++] = gi * c->ops + k;
		mx_shuffle(order, nd->ninst, &nd->rng);
		for (uint32_t j = 0; j < nd->ninst; j++) {
			nd->inst[j].nd = nd;
			nd->inst[j].g = order[j] / c->ops;
			nd->inst[j].k = order[j] % c->ops;
		}
		free(order);
		m->total += nd->ninst;
		cs_sim_timer(m->sim, nd->id, 0);
	}
	return ret;
}

static void mx_free(struct mx *m)
{
	for (uint32_t i = 0; m->nd && i < m->cfg->ranks; i++) {
		struct mx_node *nd = &m->nd[i];

		cs_tp_destroy(nd->tp);
		for (uint32_t j = 0; j < nd->ninst; j++) {
			cs_coll_free(nd->inst[j].c);
			free(nd->inst[j].send);
			free(nd->inst[j].recv);
		}
		free(nd->inst);
	}
	for (uint32_t gi = 0; m->g && gi < m->cfg->groups; gi++) {
		free(m->g[gi].nodes);
		free(m->g[gi].rank_of);
		free(m->g[gi].ops);
		for (uint32_t k = 0; m->g[gi].want && k < m->cfg->ops; k++)
			free(m->g[gi].want[k]);
		free(m->g[gi].want);
		free(m->g[gi].pending);
	}
	free(m->g);
	free(m->nd);
	cs_sim_destroy(m->sim);
}

int cs_mixed_cfg_default(struct cs_mixed_cfg *c)
{
	int ret;

	memset(c, 0, sizeof(*c));
	c->ranks = 8;
	c->groups = 4;
	c->ops = 64;
	c->min_bytes = 4;
	c->max_bytes = 16u << 20;
	c->gbps = 100;
	c->delay_ns = 1000;
	c->post_gap_ns = 5000;
	c->seed = 1;
	c->time_limit_ns = 60 * CS_NS_PER_S;
	c->kind = -1;
	ret = cs_xport_params_default(&c->xp);
	if (!ret)
		ret = cs_tp_params_default(&c->tp);
	if (!ret)
		ret = cs_cfg_defaults(cs_coll_cfg_table, cs_coll_cfg_table_len,
				      &c->coll);
	return ret;
}

int cs_mixed_run(const struct cs_mixed_cfg *c, struct cs_mixed_result *res)
{
	struct cs_sim_params sp = { .seed = c->seed };
	struct mx m = { .cfg = c };
	uint64_t rng = c->seed * 0x2545f4914f6cdd1dull + 7;
	struct cs_tp_stats ts;
	int ret;

	memset(res, 0, sizeof(*res));
	if (c->ranks < 2 || !c->groups || !c->ops ||
	    c->min_bytes > c->max_bytes || !c->min_bytes ||
	    c->tp.max_nodes <= c->ranks || (c->kind >= 0 && !c->bytes) ||
	    c->kind >= CS_COLL_KIND_COUNT || (c->ring && c->groups > 1))
		return -EINVAL;
	sp.max_payload = c->coll.mtu_payload;
	ret = cs_sim_create(&m.sim, &sp);
	if (ret)
		return ret;
	ret = mx_groups(&m, &rng);
	if (!ret)
		ret = mx_nodes(&m, &rng);
	if (!ret) {
		ret = cs_sim_run(m.sim, c->time_limit_ns);
		if (ret > 0)
			ret = 0;
	}
	res->ops = m.total;
	res->done = m.done;
	res->failed = m.failed;
	res->wrong = m.wrong;
	res->time_ns = m.t_end;
	res->peak_in_flight = m.peak;
	snprintf(res->first, sizeof(res->first), "%s", m.first);
	for (uint32_t i = 0; !ret && i < c->ranks; i++) {
		cs_tp_get_stats(m.nd[i].tp, &ts);
		res->held += ts.rx_held;
		res->retx += ts.tx_retx;
		res->fillers += ts.tx_fillers;
		res->proto += ts.rx_proto + ts.rx_not_member + ts.rx_bad_src;
		res->hold_full += ts.rx_hold_full;
		res->sessions += ts.sessions;
	}
	mx_free(&m);
	return ret;
}

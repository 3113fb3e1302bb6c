/* SPDX-License-Identifier: MIT */
/*
 * collstack sim alltoall: one all-to-all(v) over the transport core, one
 * core per rank (sim/a2a.h). Rank r is simulated node r, with its own
 * NIC link to one output-queued switch (port buffers tail-drop). Ranks
 * r*L .. r*L + L-1 form a node: with the two-level algorithm they share a
 * struct cs_a2a_node, and the intra-node exchange is a memory copy.
 *
 * The NIC: the core hands a rank's NIC frames only while fewer than
 * nic_ring bytes wait on its link (tx_room), and is polled again when
 * they have drained, so a sender never overruns its own NIC; what it
 * overruns is the switch port of a receiver (incast), which is what the
 * schedule, the pacing and the credit are there to prevent.
 *
 * Element x of the block from s to d holds a hash of (seed, s, d, x); a
 * rank's result is checked element by element when its operation ends.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collstack/types.h"
#include "sim/a2a.h"
#include "sim/sim.h"

#define A2A_GROUP 1
#define A2A_OP 1
#define A2A_ESZ 4

struct as;

struct as_rank {
	struct as *m;
	uint32_t id;
	struct cs_tp *tp;
	struct cs_a2a *eng;
	uint32_t *send, *recv;
	uint64_t *sc, *sd, *rc, *rd;
	uint64_t ns, nr; /* elements */
	bool posted, done;
	int status;
	uint32_t culprit;
	cs_ns_t t_done; /* when its operation completed */
};

struct as {
	const struct cs_a2a_sim_cfg *cfg;
	struct cs_sim *sim;
	uint32_t n, G;
	enum cs_a2a_algo algo;
	uint64_t *cnt; /* [s * n + d] elements */
	struct as_rank *rk;
	struct cs_a2a_node **node; /* [n / G] */
	uint32_t ndone, nfailed;
	cs_ns_t t_end;
	uint64_t wrong, checked;
	char first[200];
};

static uint32_t as_value(uint64_t seed, uint32_t s, uint32_t d, uint64_t x)
{
	uint64_t z = seed ^ ((uint64_t)s << 40) ^ ((uint64_t)d << 20) ^
		     (x * 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 29)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 32)) * 0x94d049bb133111ebull;
	return (uint32_t)(z ^ (z >> 31));
}

/* ---- the traffic matrix ------------------------------------------------- */

/* Block sizes: even (bytes / n each) or skewed: one in eight empty, the
 * rest u^4-distributed with a few large ones (mean about bytes / n). */
static void as_matrix(struct as *m, uint64_t *rng)
{
	const struct cs_a2a_sim_cfg *c = m->cfg;
	uint64_t avg = c->bytes / m->n / A2A_ESZ;

	for (uint64_t i = 0; i < (uint64_t)m->n * m->n; i++) {
		double u;

		if (!c->uneven) {
			m->cnt[i] = avg;
			continue;
		}
		u = cs_rand_unit(rng);
		if (cs_rand_next(rng) % 8 == 0)
			m->cnt[i] = 0;
		else
			m->cnt[i] = (uint64_t)((double)avg *
					       (0.05 + 4.75 * u * u * u * u));
	}
}

/* ---- the ranks ---------------------------------------------------------- */

static unsigned as_room(void *owner)
{
	struct as_rank *r = owner;
	const struct cs_a2a_sim_cfg *c = r->m->cfg;
	uint64_t q = cs_sim_backlog(r->m->sim, r->id, (r->id + 1) % r->m->n);

	if (q >= c->nic_ring)
		return 0;
	return (unsigned)((c->nic_ring - q) / (c->mtu + 142) + 1);
}

static void as_xmit(void *owner, uint32_t node, const struct cs_pkt_hdr *h,
		    const void *payload, uint32_t len)
{
	struct as_rank *r = owner;

	(void)cs_sim_send(r->m->sim, r->id, node, h,
			  r->m->cfg->nodata ? NULL : payload, len);
}

static void as_verify(struct as *m, struct as_rank *r)
{
	const uint64_t *rc = r->rc, *rd = r->rd;
	uint32_t d = r->id;

	/* dynamic: where the engine put them (and the counts it learnt) */
	if (m->cfg->dynamic)
		cs_a2a_recv_layout(r->eng, &rc, &rd);
	for (uint32_t s = 0; s < m->n; s++) {
		if (rc[s] != r->rc[s] && !m->wrong++)
			snprintf(m->first, sizeof(m->first),
				 "rank %u: %llu elements from rank %u, want "
				 "%llu",
				 d, (unsigned long long)rc[s], s,
				 (unsigned long long)r->rc[s]);
		for (uint64_t x = 0; x < CS_MIN(rc[s], r->rc[s]); x++) {
			uint32_t got = r->recv[rd[s] + x];
			uint32_t want = as_value(m->cfg->seed, s, d, x);

			m->checked++;
			if (got != want && !m->wrong++)
				snprintf(m->first, sizeof(m->first),
					 "rank %u: element %llu of the block "
					 "from rank %u: got %08x want %08x",
					 d, (unsigned long long)x, s, got,
					 want);
		}
	}
}

static void as_done(void *owner, void *user, int status, uint32_t culprit)
{
	struct as_rank *r = owner;
	struct as *m = r->m;

	(void)user;
	r->done = true;
	r->status = status;
	r->culprit = culprit;
	r->t_done = cs_sim_now(m->sim);
	m->ndone++;
	if (status) {
		if (!m->nfailed++ && !m->wrong)
			snprintf(m->first, sizeof(m->first),
				 "rank %u: %s (rank %u)", r->id,
				 cs_strerror(status), culprit);
	} else if (!m->cfg->nodata) {
		as_verify(m, r);
	}
	if (m->ndone == m->n) {
		m->t_end = cs_sim_now(m->sim);
		cs_sim_stop(m->sim);
	}
}

static const struct cs_tp_io as_io = {
	.tx_room = as_room,
	.xmit = as_xmit,
	.done = as_done,
};

static void as_service(struct as_rank *r, cs_ns_t now)
{
	struct as *m = r->m;
	const struct cs_a2a_sim_cfg *c = m->cfg;
	uint64_t q;
	cs_ns_t wake;
	int ret;

	if (!r->posted) {
		r->posted = true;
		ret = cs_tp_post(r->tp, A2A_GROUP, A2A_OP, &cs_a2a_flow_ops,
				 r->eng, r->ns * A2A_ESZ, r, now);
		if (ret) {
			snprintf(m->first, sizeof(m->first),
				 "rank %u: post failed: %s", r->id,
				 cs_strerror(ret));
			m->nfailed++;
			cs_sim_stop(m->sim);
			return;
		}
	}
	cs_tp_poll(r->tp, now);
	if (r->done)
		return;
	wake = cs_tp_next_deadline(r->tp, now);
	/* a full NIC: come back when it has drained */
	q = cs_sim_backlog(m->sim, r->id, (r->id + 1) % m->n);
	if (q >= c->nic_ring / 2)
		wake = CS_MIN(wake,
			      now + (cs_ns_t)((double)q * 8 / c->gbps / 2) + 1);
	cs_sim_timer(m->sim, r->id, wake <= now ? now + 1 : wake);
}

static void as_rx(struct cs_sim *sim, void *ctx, const struct cs_sim_pkt *pkt,
		  cs_ns_t now)
{
	struct as_rank *r = ctx;

	(void)sim;
	cs_tp_rx(r->tp, pkt->src, &pkt->hdr, pkt->data, now);
	as_service(r, now);
}

static void as_timer(struct cs_sim *sim, void *ctx, cs_ns_t now)
{
	(void)sim;
	as_service(ctx, now);
}

static const struct cs_sim_node_ops as_ops = {
	.rx = as_rx,
	.timer = as_timer,
};

/* A local rank's result became final through another's engine. */
static void as_notify(void *arg, uint32_t local)
{
	struct as_rank *first = arg;
	struct as *m = first->m;

	cs_sim_timer(m->sim, first->id + local, cs_sim_now(m->sim));
}

/* ---- set-up ------------------------------------------------------------- */

static int as_rank_bufs(struct as *m, struct as_rank *r)
{
	uint32_t n = m->n, i = r->id;

	r->sc = malloc(n * sizeof(uint64_t));
	r->sd = malloc(n * sizeof(uint64_t));
	r->rc = malloc(n * sizeof(uint64_t));
	r->rd = malloc(n * sizeof(uint64_t));
	if (!r->sc || !r->sd || !r->rc || !r->rd)
		return -ENOMEM;
	for (uint32_t d = 0; d < n; d++) {
		r->sc[d] = m->cnt[(uint64_t)i * n + d];
		r->sd[d] = r->ns;
		r->ns += r->sc[d];
		r->rc[d] = m->cnt[(uint64_t)d * n + i];
		r->rd[d] = r->nr;
		r->nr += r->rc[d];
	}
	if (m->cfg->nodata)
		return 0;
	r->send = malloc(r->ns ? r->ns * A2A_ESZ : 1);
	r->recv = calloc(r->nr ? r->nr : 1, A2A_ESZ);
	if (!r->send || !r->recv)
		return -ENOMEM;
	for (uint32_t d = 0; d < n; d++)
		for (uint64_t x = 0; x < r->sc[d]; x++)
			r->send[r->sd[d] + x] = as_value(m->cfg->seed, i, d, x);
	return 0;
}

static int as_engines(struct as *m)
{
	const struct cs_a2a_sim_cfg *c = m->cfg;
	struct cs_a2a_params *lp = calloc(m->G, sizeof(*lp));
	int ret = 0;

	if (!lp)
		return -ENOMEM;
	for (uint32_t b = 0; !ret && b < m->n / m->G; b++) {
		for (uint32_t k = 0; k < m->G; k++) {
			struct as_rank *r = &m->rk[b * m->G + k];
			struct cs_a2a_params *p = &lp[k];

			memset(p, 0, sizeof(*p));
			p->nranks = m->n;
			p->rank = r->id;
			p->ranks_per_node = m->G;
			p->esz = A2A_ESZ;
			p->sendbuf = r->send;
			p->send_count = r->ns;
			p->recvbuf = r->recv;
			p->recv_count = r->nr;
			p->sendcounts = r->sc;
			p->sdispls = r->sd;
			/* dynamic: the receiver knows only its room */
			p->recvcounts = c->dynamic ? NULL : r->rc;
			p->rdispls = c->dynamic ? NULL : r->rd;
			p->mtu_payload = c->mtu;
			p->flags = (c->nodata ? CS_A2A_F_NODATA : 0) |
				   (c->no_bucket ? CS_A2A_F_NO_BUCKET : 0) |
				   (c->dynamic ? CS_A2A_F_RECV_DYNAMIC : 0) |
				   (m->algo == CS_A2A_RAIL ? CS_A2A_F_RAIL : 0);
			p->group = A2A_GROUP;
			p->epoch = 1;
			p->op_id = A2A_OP;
			p->deadline = c->time_limit_ns;
		}
		ret = cs_a2a_node_init(lp, m->G, &m->node[b]);
		if (ret)
			break;
		cs_a2a_node_set_notify(m->node[b], as_notify, &m->rk[b * m->G]);
		for (uint32_t k = 0; !ret && k < m->G; k++)
			ret = cs_a2a_init(m->node[b], k,
					  &m->rk[b * m->G + k].eng);
	}
	free(lp);
	return ret;
}

static int as_net(struct as *m)
{
	const struct cs_a2a_sim_cfg *c = m->cfg;
	struct cs_sim_link_params host = {
		.gbps = c->gbps,
		.delay_ns = c->delay_ns,
		.loss = c->loss,
	};
	struct cs_sim_link_params port = host;
	struct cs_xport_params xp = c->xp;
	uint32_t *ids = malloc(m->n * sizeof(*ids));
	uint32_t *members = ids;
	uint32_t senders;
	int ret = 0;

	if (!ids)
		return -ENOMEM;
	port.queue_bytes = c->port_buffer;
	xp.cc.line_gbps = c->gbps;
	if (xp.cc.min_gbps > xp.cc.line_gbps)
		xp.cc.min_gbps = xp.cc.line_gbps;
	/* Credit: a receiver's budget split evenly over the ranks that send
	 * to it (every other rank, flat; one per other node, two-level).
	 * Each session then has at most credit_init + one frame of new data
	 * unreceived, so at most the budget + a frame per sender waits
	 * towards any receiver, whatever the schedule does. */
	senders = m->G > 1 ? m->n / m->G - 1 : m->n - 1;
	if (c->credit) {
		xp.rel.credit = true;
		xp.rel.credit_init = CS_MAX(c->credit / CS_MAX(senders, 1),
					    (uint64_t)c->mtu);
	}
	for (uint32_t i = 0; !ret && i < m->n; i++) {
		struct as_rank *r = &m->rk[i];

		r->m = m;
		ret = cs_sim_node_add(m->sim, &as_ops, r, &r->id);
		if (!ret)
			ret = cs_tp_create(&c->tp, &xp, &as_io, r, r->id, 1,
					   &r->tp);
		ids[i] = r->id;
	}
	if (!ret)
		ret = cs_sim_star(m->sim, ids, m->n, &host, &port, NULL);
	for (uint32_t i = 0; !ret && i < m->n; i++)
		ret = cs_tp_group_add(m->rk[i].tp, A2A_GROUP, members, m->n,
				      NULL);
	free(ids);
	return ret;
}

static void as_free(struct as *m)
{
	for (uint32_t i = 0; m->rk && i < m->n; i++) {
		struct as_rank *r = &m->rk[i];

		cs_tp_destroy(r->tp);
		cs_a2a_free(r->eng);
		free(r->send);
		free(r->recv);
		free(r->sc);
		free(r->sd);
		free(r->rc);
		free(r->rd);
	}
	for (uint32_t b = 0; m->node && b < m->n / m->G; b++)
		cs_a2a_node_free(m->node[b]);
	free(m->node);
	free(m->rk);
	free(m->cnt);
	cs_sim_destroy(m->sim);
}

int cs_a2a_sim_cfg_default(struct cs_a2a_sim_cfg *c)
{
	int ret;

	memset(c, 0, sizeof(*c));
	c->ranks = 8;
	c->rpn = 1;
	c->bytes = 1u << 20;
	c->algo = CS_A2A_AUTO;
	c->gbps = 100;
	c->delay_ns = 1000;
	c->port_buffer = 1u << 20;
	c->nic_ring = 64u << 10;
	c->mtu = 8896;
	c->seed = 1;
	c->time_limit_ns = 10 * CS_NS_PER_S;
	ret = cs_xport_params_default(&c->xp);
	if (!ret)
		ret = cs_tp_params_default(&c->tp);
	return ret;
}

/*
 * Jain's fairness index of the senders' rates (bytes sent / the time the
 * rank's operation completed), over the ranks that send anything:
 * (sum x)^2 / (k sum x^2), 1 when every sender got the same rate.
 */
static double as_jain(const struct as *m)
{
	double s = 0, s2 = 0;
	uint32_t k = 0;

	for (uint32_t i = 0; i < m->n; i++) {
		const struct as_rank *r = &m->rk[i];
		double x;

		if (!r->done || r->status || !r->ns || !r->t_done)
			continue;
		x = (double)r->ns / (double)r->t_done;
		s += x;
		s2 += x * x;
		k++;
	}
	return k && s2 > 0 ? s * s / ((double)k * s2) : 0;
}

/* What ran: the mean block decides auto (cs_a2a_choose()). */
static enum cs_a2a_algo as_algo(const struct cs_a2a_sim_cfg *c)
{
	if (c->algo != CS_A2A_AUTO)
		return c->algo;
	return cs_a2a_choose(c->ranks, c->rpn, c->bytes / c->ranks);
}

int cs_a2a_sim_run(const struct cs_a2a_sim_cfg *c,
		   struct cs_a2a_sim_result *res)
{
	struct cs_sim_params sp = { .seed = c->seed };
	struct as m = { .cfg = c };
	uint64_t rng = c->seed * 0x2545f4914f6cdd1dull + 11;
	struct cs_tp_stats ts;
	struct cs_a2a_stats es;
	int ret;

	memset(res, 0, sizeof(*res));
	if (c->ranks < 2 || c->ranks > CS_A2A_MAX_RANKS || !c->rpn ||
	    c->rpn > CS_A2A_MAX_RPN || c->ranks % c->rpn || !c->mtu ||
	    !c->gbps || !c->nic_ring || c->tp.max_nodes <= c->ranks ||
	    (c->dynamic && c->nodata))
		return -EINVAL;
	res->algo = as_algo(c);
	if (res->algo != CS_A2A_FLAT && c->ranks / c->rpn < 2)
		return -EINVAL;
	m.n = c->ranks;
	m.algo = res->algo;
	m.G = res->algo != CS_A2A_FLAT ? c->rpn : 1;
	sp.max_payload = c->mtu;
	ret = cs_sim_create(&m.sim, &sp);
	if (ret)
		return ret;
	m.cnt = malloc((size_t)m.n * m.n * sizeof(*m.cnt));
	m.rk = calloc(m.n, sizeof(*m.rk));
	m.node = calloc(m.n / m.G, sizeof(*m.node));
	ret = m.cnt && m.rk && m.node ? 0 : -ENOMEM;
	if (!ret) {
		as_matrix(&m, &rng);
		ret = as_net(&m);
	}
	for (uint32_t i = 0; !ret && i < m.n; i++)
		ret = as_rank_bufs(&m, &m.rk[i]);
	if (!ret)
		ret = as_engines(&m);
	if (ret)
		goto out;
	for (uint32_t i = 0; i < m.n; i++)
		cs_sim_timer(m.sim, m.rk[i].id, 0);
	ret = cs_sim_run(m.sim, c->time_limit_ns + CS_NS_PER_S);
	if (ret > 0)
		ret = 0;
	res->done = m.ndone;
	res->failed = m.nfailed;
	res->wrong = m.wrong;
	res->checked = m.checked;
	res->time_ns = m.t_end;
	snprintf(res->first, sizeof(res->first), "%s", m.first);
	res->jain = as_jain(&m);
	for (uint32_t i = 0; i < m.n; i++) {
		struct as_rank *r = &m.rk[i];
		int l = cs_sim_link_find(m.sim, cs_sim_nodes(m.sim) - 1, r->id);
		const struct cs_sim_link_stats *ls =
			l >= 0 ? cs_sim_link_stats(m.sim, (uint32_t)l) : NULL;

		res->max_bytes = CS_MAX(res->max_bytes, r->ns * A2A_ESZ);
		res->total_bytes += r->ns * A2A_ESZ;
		for (uint32_t d = 0; d < m.n; d++)
			if (d / m.G != i / m.G)
				res->net_bytes += r->sc[d] * A2A_ESZ;
		cs_tp_get_stats(r->tp, &ts);
		res->frames += ts.tx_data;
		res->retx += ts.tx_retx;
		res->proto += ts.rx_proto + ts.rx_not_member + ts.rx_bad_src;
		cs_a2a_get_stats(r->eng, &es);
		res->staged += es.staged_bytes;
		if (ls) {
			res->max_queue = CS_MAX(res->max_queue, ls->queue_max);
			res->drops += ls->drop_queue;
		}
	}
out:
	as_free(&m);
	return ret;
}

/* SPDX-License-Identifier: MIT */
/*
 * collstack sim allreduce | reduce-scatter | all-gather | broadcast:
 * N ring-collective engines over cs_rel sessions in the discrete-event
 * simulator, checked element by element against a closed formula.
 *
 * Topology: a ring of point-to-point links (rank r <-> r+1), each direction
 * `--link-gbps` with `--delay-us` propagation delay, seeded loss,
 * duplication and reordering at the far end. Every rank has one cs_rel
 * session per (peer, channel) and one cs_path (pacer + congestion
 * controller) per peer shared by its channels. The engine is pulled one
 * packet at a time per channel, only when the session's window and pacer
 * allow it, so nothing queues in the driver.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cmds.h"
#include "collectives/ring.h"
#include "control/rel.h"
#include "tests/coll_sim/coll_data.h"
#include "tests/sim/scen.h"
#include "tests/sim/sim.h"

#define SC_MAX_PATHS 2		/* ring and chain: successor, predecessor */

struct sc_cfg {
	enum cs_coll_kind kind;
	uint32_t ranks;
	uint64_t bytes;
	enum cs_dtype dtype;
	enum cs_redop op;
	uint32_t channels;
	uint64_t chunk;
	uint32_t window;
	uint32_t mtu;
	double loss, dup, reorder;
	uint64_t reorder_ns;
	uint64_t seed;
	double gbps;
	double delay_us;
	uint32_t root;
	bool nodata, oop, alt_dir, verbose;
	bool random_data;	/* full-mantissa floats, checked with a bound */
	double time_limit_ms;
	struct cs_xport_params xp;
};

struct sc_rank;

struct sc_sess {
	struct cs_rel rel;
	struct sc_rank *rk;
	uint32_t peer, ch;
};

struct sc_drv;

struct sc_rank {
	struct sc_drv *d;
	uint32_t id;
	struct cs_coll *op;
	uint8_t *send, *recv;
	struct cs_path path[SC_MAX_PATHS];
	uint32_t path_peer[SC_MAX_PATHS];
	uint32_t npaths;
	struct sc_sess *sess;	/* distinct (peer, channel) sessions */
	uint32_t nsess;
	struct sc_sess **snext, **sprev;	/* per channel, or NULL */
	struct cs_coll_tx *pend;	/* per channel: pulled, not sent */
	bool *has_pend;
	bool ready, done;
	cs_ns_t ready_at;
	uint64_t frame_bytes, frames, pure_acks, stale, fillers;
};

struct sc_drv {
	const struct sc_cfg *cfg;
	struct cs_sim *sim;
	struct sc_rank *rk;
	uint32_t n, ndone;
	size_t count;		/* elements (per rank for RS/AG) */
	size_t esz;
	uint64_t violations;
	char why[200];
};

static void sc_violation(struct sc_drv *d, const char *fmt, uint32_t a,
			 uint64_t b)
{
	if (!d->violations++)
		snprintf(d->why, sizeof(d->why), fmt, a, b);
	cs_sim_stop(d->sim);
}

static void sc_xmit(struct sc_rank *rk, uint32_t dst, struct cs_pkt_hdr *h,
		    const void *payload, uint32_t len)
{
	int ret = cs_sim_send(rk->d->sim, rk->id, dst, h, payload, len);

	if (ret == -EINVAL)
		sc_violation(rk->d, "rank %u: cs_sim_send refused (%" PRIu64
				    ")", rk->id, len);
	rk->frames++;
	rk->frame_bytes += CS_PROTO_FRAME_OVERHEAD + len;
}

static void sc_acked(void *owner, uint64_t cookie, uint32_t len)
{
	struct sc_rank *rk = owner;

	(void)len;
	if (cs_coll_on_acked(rk->op, cookie))
		sc_violation(rk->d, "rank %u: ack for unknown cookie %" PRIx64,
			     rk->id, cookie);
}

static const struct cs_rel_ops sc_rel_ops = { .acked = sc_acked };

static struct sc_sess *sc_find(struct sc_rank *rk, uint32_t peer,
			       uint32_t ch)
{
	for (uint32_t i = 0; i < rk->nsess; i++)
		if (rk->sess[i].peer == peer && rk->sess[i].ch == ch)
			return &rk->sess[i];
	return NULL;
}

static void sc_service(struct sc_rank *rk, cs_ns_t now)
{
	struct sc_drv *d = rk->d;
	cs_ns_t wake = CS_NS_NEVER, t;
	struct cs_coll_tx tx;
	struct cs_pkt_hdr h;
	uint32_t seq, len, C = cs_coll_channels(rk->op);
	uint64_t cookie;
	int ret;

	/* 1. retransmissions, rebuilt from cookies */
	for (uint32_t i = 0; i < rk->nsess; i++) {
		struct sc_sess *s = &rk->sess[i];

		while (!cs_rel_next_retx(&s->rel, &seq, &cookie, &len)) {
			const void *pl;

			t = cs_rel_retx_time(&s->rel, len, now);
			if (t > now) {
				wake = CS_MIN(wake, t);
				break;
			}
			ret = cs_coll_rebuild(rk->op, cookie, &tx);
			if (ret == -ESTALE) {
				/* the engine proved the peer holds it: check
				 * that, and send a zero-length filler */
				if (!cs_coll_rx_has(d->rk[s->peer].op,
						    tx.hdr.step, tx.hdr.channel,
						    tx.hdr.offset))
					sc_violation(d, "rank %u: stale retx "
						     "of an undelivered packet"
						     " (cookie %" PRIx64 ")",
						     rk->id, cookie);
				rk->stale++;
				rk->fillers++;
				h = tx.hdr;
				h.len = 0;
				pl = NULL;
				len = 0;
			} else if (ret) {
				sc_violation(d, "rank %u: rebuild failed for "
					     "cookie %" PRIx64, rk->id, cookie);
				return;
			} else {
				h = tx.hdr;
				pl = d->cfg->nodata ? NULL : tx.payload;
				len = tx.len;
			}
			if (cs_rel_stamp_retx(&s->rel, &h, seq, now))
				continue;
			sc_xmit(rk, s->peer, &h, pl, len);
		}
	}
	/* 2. new data, per channel */
	for (uint32_t c = 0; c < C; c++) {
		struct sc_sess *s = rk->snext[c];
		struct cs_coll_tx *p = &rk->pend[c];

		if (!s)
			continue;
		for (;;) {
			if (!rk->has_pend[c]) {
				if (!cs_coll_next_on(rk->op, now, c, p, 1))
					break;
				rk->has_pend[c] = true;
			}
			t = cs_rel_tx_time(&s->rel, p->len, now);
			if (t > now) {
				if (t != CS_NS_NEVER)
					wake = CS_MIN(wake, t);
				break;
			}
			h = p->hdr;
			if (cs_rel_stamp(&s->rel, &h, p->cookie, p->len, now))
				break;
			sc_xmit(rk, s->peer, &h, d->cfg->nodata ? NULL :
				p->payload, p->len);
			rk->has_pend[c] = false;
		}
	}
	/* 3. pure ACKs owed; 4. the node's timer */
	for (uint32_t i = 0; i < rk->nsess; i++) {
		struct sc_sess *s = &rk->sess[i];

		if (cs_rel_ack_due(&s->rel, now)) {
			memset(&h, 0, sizeof(h));
			h.version = CS_PROTO_VERSION;
			h.src = (uint16_t)rk->id;
			h.channel = (uint16_t)s->ch;
			cs_rel_build_ack(&s->rel, &h, now);
			sc_xmit(rk, s->peer, &h, NULL, 0);
			rk->pure_acks++;
		}
		if (cs_rel_failed(&s->rel))
			sc_violation(d, "rank %u: session to rank %" PRIu64
				     " failed (timeouts)", rk->id, s->peer);
		wake = CS_MIN(wake, cs_rel_next_deadline(&s->rel));
	}
	cs_sim_timer(d->sim, rk->id, wake);
	if (!rk->ready && cs_coll_result_ready(rk->op)) {
		rk->ready = true;
		rk->ready_at = now;
	}
	if (!rk->done && cs_coll_done(rk->op)) {
		rk->done = true;
		if (++d->ndone == d->n)
			cs_sim_stop(d->sim);
	}
}

static void sc_rx(struct cs_sim *sim, void *ctx, const struct cs_sim_pkt *pkt,
		  cs_ns_t now)
{
	struct sc_rank *rk = ctx;
	struct sc_sess *s = sc_find(rk, pkt->src, pkt->hdr.channel);
	int m, ret;

	(void)sim;
	if (!s) {
		sc_violation(rk->d, "rank %u: packet from unexpected rank %"
			     PRIu64, rk->id, pkt->src);
		return;
	}
	m = cs_rel_on_packet(&s->rel, &pkt->hdr, now);
	if ((m & CS_REL_DELIVER) && pkt->hdr.type == CS_PKT_DATA) {
		ret = cs_coll_on_data(rk->op, now, &pkt->hdr, pkt->data);
		if (ret < 0)
			sc_violation(rk->d, "rank %u: engine rejected a "
				     "packet at offset %" PRIu64, rk->id,
				     pkt->hdr.offset);
	}
	sc_service(rk, now);
}

static void sc_timer(struct cs_sim *sim, void *ctx, cs_ns_t now)
{
	struct sc_rank *rk = ctx;

	(void)sim;
	for (uint32_t i = 0; i < rk->nsess; i++)
		cs_rel_on_timer(&rk->sess[i].rel, now);
	sc_service(rk, now);
}

static const struct cs_sim_node_ops sc_node_ops = {
	.rx = sc_rx,
	.timer = sc_timer,
};

static uint32_t sc_isn(uint32_t from, uint32_t to, uint32_t ch)
{
	/* near the wrap, so long runs cross it */
	return 0xfffff000u + (uint32_t)(cs_td_hash(ch, from, to) & 0xfff);
}

static struct cs_path *sc_path(struct sc_rank *rk, uint32_t peer)
{
	for (uint32_t i = 0; i < rk->npaths; i++)
		if (rk->path_peer[i] == peer)
			return &rk->path[i];
	if (rk->npaths == SC_MAX_PATHS)
		return NULL;
	if (cs_path_init(&rk->path[rk->npaths], &rk->d->cfg->xp.pacer,
			 &rk->d->cfg->xp.cc))
		return NULL;
	rk->path_peer[rk->npaths] = peer;
	return &rk->path[rk->npaths++];
}

static int sc_add_sess(struct sc_rank *rk, uint32_t peer, uint32_t ch,
		       struct sc_sess **out)
{
	struct sc_sess *s = sc_find(rk, peer, ch);
	struct cs_path *path;
	int ret;

	if (!s) {
		path = sc_path(rk, peer);
		if (!path)
			return -EINVAL;
		s = &rk->sess[rk->nsess];
		ret = cs_rel_init(&s->rel, &rk->d->cfg->xp.rel, path,
				  &sc_rel_ops, rk, sc_isn(rk->id, peer, ch),
				  sc_isn(peer, rk->id, ch));
		if (ret)
			return ret;
		s->rk = rk;
		s->peer = peer;
		s->ch = ch;
		rk->nsess++;
	}
	*out = s;
	return 0;
}

/* ---- data ------------------------------------------------------------- */

static size_t sc_send_elems(const struct sc_drv *d)
{
	return d->cfg->kind == CS_COLL_REDUCE_SCATTER ? d->n * d->count :
							d->count;
}

static size_t sc_recv_elems(const struct sc_drv *d)
{
	return d->cfg->kind == CS_COLL_ALL_GATHER ? d->n * d->count :
						    d->count;
}

static uint64_t sc_in_index(const struct sc_drv *d, uint32_t r, size_t x)
{
	return d->cfg->kind == CS_COLL_ALL_GATHER ?
	       (uint64_t)r * d->count + x : x;
}

/* Rank r's input element for logical index i, as the dtype holds it. */
static double sc_value(const struct sc_drv *d, uint32_t r, uint64_t i)
{
	const struct sc_cfg *c = d->cfg;
	uint8_t tmp[8];

	if (!c->random_data)
		return cs_td_value(c->dtype, c->op, d->n, c->seed, r, i);
	cs_td_store(c->dtype, tmp, 0, cs_td_random(c->op, c->seed, r, i));
	return cs_td_load(c->dtype, tmp, 0);
}

static int sc_alloc_data(struct sc_drv *d, struct sc_rank *rk)
{
	const struct sc_cfg *cfg = d->cfg;
	size_t ns = sc_send_elems(d), nr = sc_recv_elems(d), es = d->esz;
	uint32_t r = rk->id;
	bool bc_nonroot = cfg->kind == CS_COLL_BROADCAST && r != cfg->root;

	if (cfg->nodata)
		return 0;
	if (!cfg->oop) {
		/* in place: one buffer per rank */
		size_t big = ns > nr ? ns : nr;

		rk->recv = malloc(big * es + 1);
		if (!rk->recv)
			return -ENOMEM;
		rk->send = rk->recv;
		if (cfg->kind == CS_COLL_REDUCE_SCATTER)
			rk->recv = rk->send + r * d->count * es;
		else if (cfg->kind == CS_COLL_ALL_GATHER)
			rk->send = rk->recv + r * d->count * es;
	} else {
		rk->send = malloc(ns * es + 1);
		rk->recv = malloc(nr * es + 1);
		if (!rk->send || !rk->recv)
			return -ENOMEM;
		memset(rk->recv, 0x5a, nr * es);
	}
	if (bc_nonroot)
		return 0;
	for (size_t x = 0; x < ns; x++)
		cs_td_store(cfg->dtype, rk->send, x,
			    sc_value(d, r, sc_in_index(d, r, x)));
	return 0;
}

static void sc_free_data(struct sc_drv *d, struct sc_rank *rk)
{
	const struct sc_cfg *cfg = d->cfg;

	if (cfg->nodata)
		return;
	if (cfg->oop) {
		free(rk->send);
		free(rk->recv);
	} else if (cfg->kind == CS_COLL_REDUCE_SCATTER) {
		free(rk->send);
	} else if (cfg->kind == CS_COLL_ALL_GATHER) {
		free(rk->recv);
	} else {
		free(rk->recv);
	}
}

/*
 * Random floats: the reduction in double, and how far a correctly
 * computed result in the element type may be from it (each of the n-1
 * roundings errs by at most eps times the partial result).
 */
static double sc_reduce_ref(const struct sc_drv *d, uint64_t i, double *tol)
{
	const struct sc_cfg *c = d->cfg;
	double acc = sc_value(d, 0, i), mag = fabs(acc);

	for (uint32_t r = 1; r < d->n; r++) {
		double v = sc_value(d, r, i);

		switch (c->op) {
		case CS_SUM:
			acc += v;
			mag += fabs(v);
			break;
		case CS_PROD:
			acc *= v;
			break;
		case CS_MIN:
			acc = v < acc ? v : acc;
			break;
		default:
			acc = v > acc ? v : acc;
			break;
		}
	}
	if (c->op == CS_PROD)
		mag = fabs(acc) * 2;
	*tol = c->op == CS_MIN || c->op == CS_MAX ? 0 :
	       (d->n + 1) * cs_td_eps(c->dtype) * mag;
	return acc;
}

/* Element x of rank r's result must be this (within *tol). */
static double sc_expect(const struct sc_drv *d, uint32_t r, size_t x,
			double *tol)
{
	const struct sc_cfg *c = d->cfg;
	uint64_t i = x;

	*tol = 0;
	switch (c->kind) {
	case CS_COLL_ALLREDUCE:
	case CS_COLL_REDUCE_SCATTER:
		if (c->kind == CS_COLL_REDUCE_SCATTER)
			i = (uint64_t)r * d->count + x;
		if (c->random_data)
			return sc_reduce_ref(d, i, tol);
		return cs_td_expect(c->dtype, c->op, d->n, c->seed, i);
	case CS_COLL_ALL_GATHER:
		return sc_value(d, (uint32_t)(x / d->count), x);
	default:
		return sc_value(d, c->root, x);
	}
}

/* Count wrong elements; describe the first. */
static uint64_t sc_verify(struct sc_drv *d, char *first, size_t flen)
{
	size_t nr = sc_recv_elems(d);
	uint64_t wrong = 0;
	bool same_for_all = d->cfg->kind == CS_COLL_ALLREDUCE ||
			    d->cfg->kind == CS_COLL_ALL_GATHER ||
			    d->cfg->kind == CS_COLL_BROADCAST;

	for (size_t x = 0; x < nr; x++) {
		double want = 0, tol = 0;

		for (uint32_t r = 0; r < d->n; r++) {
			double got;

			if (r == 0 || !same_for_all)
				want = sc_expect(d, r, x, &tol);
			got = cs_td_load(d->cfg->dtype, d->rk[r].recv, x);
			if (!(fabs(got - want) <= tol) && !wrong++)
				snprintf(first, flen,
					 "rank %u elem %zu got %.9g want %.9g"
					 " (tolerance %.3g)", r, x, got, want,
					 tol);
			/* the same bits everywhere, not just close */
			if (same_for_all && r &&
			    memcmp(d->rk[r].recv + x * d->esz,
				   d->rk[0].recv + x * d->esz, d->esz) &&
			    !wrong++)
				snprintf(first, flen,
					 "rank %u elem %zu not bit-identical "
					 "to rank 0", r, x);
		}
	}
	return wrong;
}

/* ---- the run ---------------------------------------------------------- */

/* Factor f in "ideal bytes per rank = f * S" and busbw = algbw * f. */
static double sc_factor(enum cs_coll_kind k, uint32_t n)
{
	if (n < 2)
		return 0;
	switch (k) {
	case CS_COLL_ALLREDUCE:
		return 2.0 * (n - 1) / n;
	case CS_COLL_BROADCAST:
		return 1.0;
	default:
		return (double)(n - 1) / n;
	}
}

/* Hops on the critical path of a perfectly pipelined ring / chain. */
static double sc_hops(enum cs_coll_kind k, uint32_t n)
{
	return k == CS_COLL_ALLREDUCE ? 2.0 * (n - 1) : (double)(n - 1);
}

static int sc_setup(struct sc_drv *d)
{
	const struct sc_cfg *cfg = d->cfg;
	struct cs_sim_params sp = {
		.seed = cfg->seed,
		.max_payload = cfg->mtu - 20 - 8 - CS_PROTO_HDR_WIRE_LEN,
	};
	struct cs_sim_link_params lp = {
		.gbps = cfg->gbps,
		.delay_ns = (uint64_t)(cfg->delay_us * 1000 + 0.5),
		.loss = cfg->loss,
		.dup = cfg->dup,
		.reorder = cfg->reorder,
		.reorder_ns = cfg->reorder_ns,
	};
	struct cs_coll_params p;
	int ret;

	ret = cs_sim_create(&d->sim, &sp);
	if (ret)
		return ret;
	d->rk = calloc(d->n, sizeof(*d->rk));
	if (!d->rk)
		return -ENOMEM;
	for (uint32_t r = 0; r < d->n; r++) {
		struct sc_rank *rk = &d->rk[r];
		uint32_t id, C;

		rk->d = d;
		rk->id = r;
		ret = cs_sim_node_add(d->sim, &sc_node_ops, rk, &id);
		if (ret)
			return ret;
		ret = sc_alloc_data(d, rk);
		if (ret)
			return ret;
		cs_coll_params_default(&p, NULL);
		p.kind = cfg->kind;
		p.nranks = d->n;
		p.rank = r;
		p.root = cfg->root;
		p.sendbuf = rk->send;
		p.recvbuf = rk->recv;
		p.count = d->count;
		p.dtype = cfg->dtype;
		p.op = cfg->op;
		if (cfg->channels)
			p.channels = cfg->channels;
		if (cfg->chunk)
			p.chunk = cfg->chunk;
		if (cfg->window)
			p.window = cfg->window;
		p.mtu_payload = sp.max_payload;
		p.flags = (cfg->nodata ? CS_COLL_F_NODATA : 0) |
			  (cfg->alt_dir ? CS_COLL_F_ALT_DIR : 0);
		p.op_id = 1;
		ret = cs_coll_init(&p, &rk->op);
		if (ret)
			return ret;
		C = cs_coll_channels(rk->op);
		rk->sess = calloc(2 * C, sizeof(*rk->sess));
		rk->snext = calloc(C, sizeof(void *));
		rk->sprev = calloc(C, sizeof(void *));
		rk->pend = calloc(C, sizeof(*rk->pend));
		rk->has_pend = calloc(C, sizeof(bool));
		if (!rk->sess || !rk->snext || !rk->sprev || !rk->pend ||
		    !rk->has_pend)
			return -ENOMEM;
	}
	/* sessions: every rank to its successor and predecessor per channel,
	 * both ends, so ACKs have a session even where no data flows back */
	for (uint32_t r = 0; r < d->n; r++) {
		struct sc_rank *rk = &d->rk[r];
		uint32_t C = cs_coll_channels(rk->op);

		for (uint32_t c = 0; c < C; c++) {
			int64_t nx, pv;

			cs_coll_chan_peers(rk->op, c, &nx, &pv);
			if (nx >= 0) {
				ret = sc_add_sess(rk, (uint32_t)nx, c,
						  &rk->snext[c]);
				if (ret)
					return ret;
			}
			if (pv >= 0) {
				ret = sc_add_sess(rk, (uint32_t)pv, c,
						  &rk->sprev[c]);
				if (ret)
					return ret;
			}
		}
	}
	/* the ring of links */
	for (uint32_t r = 0; d->n > 1 && r < d->n; r++) {
		uint32_t nx = (r + 1) % d->n;

		if (cs_sim_link_find(d->sim, r, nx) >= 0)
			continue;
		ret = cs_sim_link_pair(d->sim, r, nx, &lp, NULL, NULL);
		if (ret)
			return ret;
	}
	for (uint32_t r = 0; r < d->n; r++)
		cs_sim_timer(d->sim, r, 0);
	return 0;
}

static void sc_teardown(struct sc_drv *d)
{
	for (uint32_t r = 0; d->rk && r < d->n; r++) {
		struct sc_rank *rk = &d->rk[r];

		for (uint32_t i = 0; i < rk->nsess; i++)
			cs_rel_fini(&rk->sess[i].rel);
		cs_coll_free(rk->op);
		sc_free_data(d, rk);
		free(rk->sess);
		free(rk->snext);
		free(rk->sprev);
		free(rk->pend);
		free(rk->has_pend);
	}
	free(d->rk);
	cs_sim_destroy(d->sim);
}

static int sc_run(const struct sc_cfg *cfg)
{
	struct sc_drv d = { .cfg = cfg, .n = cfg->ranks };
	const char *name = cs_coll_kind_name(cfg->kind);
	double f = sc_factor(cfg->kind, cfg->ranks), bound_ns, time_ns;
	double algbw, ideal, max_sent = 0, max_wire = 0;
	uint64_t wrong = 0, retx = 0, timeouts = 0, stale = 0, acks = 0;
	cs_ns_t t_end = 0, limit;
	char first[160] = "";
	int ret, rc = 0;

	d.esz = cs_dtype_size(cfg->dtype);
	d.count = cfg->bytes / d.esz;
	if (cfg->kind == CS_COLL_REDUCE_SCATTER ||
	    cfg->kind == CS_COLL_ALL_GATHER)
		d.count /= cfg->ranks;
	ret = sc_setup(&d);
	if (ret) {
		fprintf(stderr, "sim %s: set-up failed: %s\n", name,
			cs_strerror(ret));
		sc_teardown(&d);
		return 2;
	}
	limit = (cs_ns_t)(cfg->time_limit_ms * 1e6);
	ret = cs_sim_run(d.sim, limit);
	for (uint32_t r = 0; r < d.n; r++) {
		struct sc_rank *rk = &d.rk[r];

		if (!rk->ready && !d.violations)
			snprintf(d.why, sizeof(d.why),
				 "rank %u never completed (sim run %d)", r,
				 ret);
		t_end = CS_MAX(t_end, rk->ready_at);
		max_sent = CS_MAX(max_sent, (double)rk->frame_bytes);
		max_wire = CS_MAX(max_wire, (double)(rk->frame_bytes +
				  CS_SIM_WIRE_EXTRA * rk->frames));
		stale += rk->stale;
		acks += rk->pure_acks;
		for (uint32_t i = 0; i < rk->nsess; i++) {
			const struct cs_rel_stats *st =
				cs_rel_stats(&rk->sess[i].rel);

			retx += st->retx;
			timeouts += st->timeouts;
		}
	}
	if (!d.violations && d.ndone != d.n && !d.why[0])
		snprintf(d.why, sizeof(d.why), "not every rank finished");
	if (d.violations || d.ndone != d.n) {
		printf("%s FAIL ranks=%u bytes=%" PRIu64 " seed=%" PRIu64
		       ": %s\n", name, cfg->ranks, cfg->bytes, cfg->seed,
		       d.why);
		sc_teardown(&d);
		return 1;
	}
	if (!cfg->nodata) {
		wrong = sc_verify(&d, first, sizeof(first));
		if (wrong) {
			printf("%s FAIL ranks=%u bytes=%" PRIu64 " seed=%"
			       PRIu64 " wrong=%" PRIu64 ": %s\n", name,
			       cfg->ranks, cfg->bytes, cfg->seed, wrong,
			       first);
			sc_teardown(&d);
			return 1;
		}
	}
	time_ns = (double)t_end;
	bound_ns = sc_hops(cfg->kind, cfg->ranks) * cfg->delay_us * 1000 +
		   f * (double)cfg->bytes * 8 / cfg->gbps;
	if (cfg->kind == CS_COLL_BROADCAST)
		bound_ns = sc_hops(cfg->kind, cfg->ranks) * cfg->delay_us *
			   1000 + (double)cfg->bytes * 8 / cfg->gbps;
	if (cfg->ranks < 2)
		bound_ns = 0;
	algbw = time_ns > 0 ? (double)cfg->bytes * 8 / time_ns : 0;
	ideal = f * (double)cfg->bytes;
	printf("%s ok ranks=%u bytes=%" PRIu64 " time_us=%.3f algbw_gbps=%.3f"
	       " busbw_gbps=%.3f sent_per_rank_over_ideal=%.4f"
	       " time_over_bound=%.4f\n", name, cfg->ranks, cfg->bytes,
	       time_ns / 1000, algbw, algbw * (cfg->kind == CS_COLL_BROADCAST
					       ? 1.0 : f),
	       ideal > 0 ? max_sent / ideal : 0,
	       bound_ns > 0 ? time_ns / bound_ns : 0);
	if (cfg->verbose)
		fprintf(stderr, "  seed=%" PRIu64 " mtu=%u payload/pkt=%u "
			"channels=%u bound_us=%.3f retx=%" PRIu64
			" timeouts=%" PRIu64 " stale_refused=%" PRIu64
			" pure_acks=%" PRIu64 " events=%" PRIu64
			" max_frame_bytes_per_rank=%.0f"
			" wire_bytes_over_ideal=%.4f (with %d B/frame of"
			" preamble, IFG, FCS) nodata=%d\n",
			cfg->seed, cfg->mtu,
			cfg->mtu - 20 - 8 - CS_PROTO_HDR_WIRE_LEN,
			cs_coll_channels(d.rk[0].op), bound_ns / 1000, retx,
			timeouts, stale, acks, cs_sim_events(d.sim), max_sent,
			ideal > 0 ? max_wire / ideal : 0, CS_SIM_WIRE_EXTRA,
			cfg->nodata);
	sc_teardown(&d);
	return rc;
}

/* ---- command line ----------------------------------------------------- */

static int sc_size(const char *s, uint64_t *out)
{
	char *end;
	double v = strtod(s, &end);
	double mul = 1;

	if (end == s || v < 0)
		return -EINVAL;
	if (*end == 'K' || *end == 'k')
		mul = 1024;
	else if (*end == 'M' || *end == 'm')
		mul = 1024.0 * 1024;
	else if (*end == 'G' || *end == 'g')
		mul = 1024.0 * 1024 * 1024;
	else if (*end)
		return -EINVAL;
	if (*end && end[1] && strcmp(end + 1, "iB") && strcmp(end + 1, "B"))
		return -EINVAL;
	*out = (uint64_t)(v * mul);
	return 0;
}

static void sc_usage(const char *name, FILE *out)
{
	fprintf(out,
		"usage: collstack sim %s --ranks N --bytes S [options]\n"
		"  --ranks N          ranks in the ring (1..%u)\n"
		"  --bytes S          buffer bytes (K/M/G suffixes); for\n"
		"                     reduce-scatter, all-gather: the total,\n"
		"                     N x the per-rank part\n"
		"  --dtype T          f32 f64 f16 bf16 i32 i64 u8 (f32)\n"
		"  --op O             sum prod min max (sum)\n"
		"  --channels C       rings (coll.channels)\n"
		"  --chunk B          bytes per pipelined chunk (coll.chunk)\n"
		"  --window W         unacknowledged chunks per channel\n"
		"  --mtu M            IP MTU (9000: 8896 payload bytes)\n"
		"  --loss P           frame loss probability per link\n"
		"  --dup P            frame duplication probability\n"
		"  --reorder P        probability a frame is held back\n"
		"  --reorder-us D     ... by up to D microseconds (5)\n"
		"  --seed K           PRNG seed for data and impairments (1);\n"
		"                     'random': from the clock (printed)\n"
		"  --data D           exact: small integers, exact in every\n"
		"                     type (default); random: full-mantissa\n"
		"                     floats, checked against a rounding\n"
		"                     bound and for the same bits on every\n"
		"                     rank\n"
		"  --link-gbps G      link rate (100)\n"
		"  --delay-us D       one-hop propagation delay (1)\n"
		"  --root R           broadcast root (0)\n"
		"  --oop              out of place (default: in place)\n"
		"  --alt-dir          odd channels run the ring backwards\n"
		"  --no-data          timing only: payload bytes are neither\n"
		"                     carried nor checked (huge sizes)\n"
		"  --time-limit-ms T  give up after T ms of simulated time\n"
		"  --set KEY=VALUE    transport key (rel.*, pacer.*, cc.*)\n"
		"  --verbose          counters on stderr\n",
		name, CS_COLL_MAX_RANKS);
}

static int sc_main(enum cs_coll_kind kind, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "ranks", required_argument, NULL, 'n' },
		{ "bytes", required_argument, NULL, 'b' },
		{ "dtype", required_argument, NULL, 't' },
		{ "op", required_argument, NULL, 'o' },
		{ "channels", required_argument, NULL, 'c' },
		{ "chunk", required_argument, NULL, 'k' },
		{ "window", required_argument, NULL, 'w' },
		{ "mtu", required_argument, NULL, 'm' },
		{ "loss", required_argument, NULL, 'l' },
		{ "dup", required_argument, NULL, 'D' },
		{ "reorder", required_argument, NULL, 'R' },
		{ "reorder-us", required_argument, NULL, 'U' },
		{ "seed", required_argument, NULL, 's' },
		{ "data", required_argument, NULL, 'X' },
		{ "link-gbps", required_argument, NULL, 'g' },
		{ "delay-us", required_argument, NULL, 'd' },
		{ "root", required_argument, NULL, 'r' },
		{ "oop", no_argument, NULL, 'O' },
		{ "alt-dir", no_argument, NULL, 'A' },
		{ "no-data", no_argument, NULL, 'N' },
		{ "time-limit-ms", required_argument, NULL, 'T' },
		{ "set", required_argument, NULL, 'S' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *name = cs_coll_kind_name(kind);
	struct sc_cfg cfg = {
		.kind = kind, .ranks = 0, .dtype = CS_F32, .op = CS_SUM,
		.mtu = 9000, .seed = 1, .gbps = 100, .delay_us = 1,
		.reorder_ns = 5000, .time_limit_ms = 60000,
	};
	char err[160], *eq;
	uint64_t v;
	int o;

	if (cs_xport_params_default(&cfg.xp))
		return 2;
	optind = 1;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'n':
			cfg.ranks = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'b':
			if (sc_size(optarg, &cfg.bytes))
				goto bad;
			break;
		case 't':
			if (cs_dtype_parse(optarg, &cfg.dtype))
				goto bad;
			break;
		case 'o':
			if (cs_redop_parse(optarg, &cfg.op))
				goto bad;
			break;
		case 'c':
			cfg.channels = (uint32_t)strtoul(optarg, NULL, 0);
			if (!cfg.channels)
				goto bad;
			break;
		case 'k':
			if (sc_size(optarg, &cfg.chunk) || !cfg.chunk)
				goto bad;
			break;
		case 'w':
			cfg.window = (uint32_t)strtoul(optarg, NULL, 0);
			if (!cfg.window)
				goto bad;
			break;
		case 'm':
			cfg.mtu = (uint32_t)strtoul(optarg, NULL, 0);
			if (cfg.mtu < 20 + 8 + CS_PROTO_HDR_WIRE_LEN + 8 ||
			    cfg.mtu > 65535)
				goto bad;
			break;
		case 'l':
			cfg.loss = strtod(optarg, NULL);
			break;
		case 'D':
			cfg.dup = strtod(optarg, NULL);
			break;
		case 'R':
			cfg.reorder = strtod(optarg, NULL);
			break;
		case 'U':
			cfg.reorder_ns = (uint64_t)(strtod(optarg, NULL) * 1e3);
			break;
		case 's':
			if (!strcmp(optarg, "random"))
				cfg.seed = (uint64_t)time(NULL) * 1000003u ^
					   (uint64_t)getpid();
			else
				cfg.seed = strtoull(optarg, NULL, 0);
			break;
		case 'X':
			if (!strcmp(optarg, "random"))
				cfg.random_data = true;
			else if (strcmp(optarg, "exact"))
				goto bad;
			break;
		case 'g':
			cfg.gbps = strtod(optarg, NULL);
			if (!(cfg.gbps > 0))
				goto bad;
			break;
		case 'd':
			cfg.delay_us = strtod(optarg, NULL);
			if (cfg.delay_us < 0)
				goto bad;
			break;
		case 'r':
			cfg.root = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'O':
			cfg.oop = true;
			break;
		case 'A':
			cfg.alt_dir = true;
			break;
		case 'N':
			cfg.nodata = true;
			break;
		case 'T':
			cfg.time_limit_ms = strtod(optarg, NULL);
			break;
		case 'S':
			eq = strchr(optarg, '=');
			if (!eq)
				goto bad;
			*eq = 0;
			if (cs_xport_params_set(&cfg.xp, optarg, eq + 1, err,
						sizeof(err))) {
				fprintf(stderr, "sim %s: %s\n", name, err);
				return 2;
			}
			break;
		case 'v':
			cfg.verbose = true;
			break;
		case 'h':
			sc_usage(name, stdout);
			return 0;
		default:
			goto bad;
		}
	}
	if (!cfg.ranks || cfg.ranks > CS_COLL_MAX_RANKS ||
	    cfg.root >= cfg.ranks || optind != argc)
		goto bad;
	if (!(cfg.loss >= 0 && cfg.loss < 1 && cfg.dup >= 0 && cfg.dup < 1 &&
	      cfg.reorder >= 0 && cfg.reorder <= 1))
		goto bad;
	v = cs_dtype_size(cfg.dtype) *
	    ((kind == CS_COLL_REDUCE_SCATTER || kind == CS_COLL_ALL_GATHER) ?
	     cfg.ranks : 1);
	if (cfg.random_data && !cs_td_eps(cfg.dtype)) {
		fprintf(stderr, "sim %s: --data random needs a floating type\n",
			name);
		return 2;
	}
	if (cfg.bytes % v) {
		fprintf(stderr, "sim %s: --bytes must be a multiple of %" PRIu64
			"\n", name, v);
		return 2;
	}
	cfg.xp.cc.line_gbps = cfg.gbps;
	return sc_run(&cfg);
bad:
	sc_usage(name, stderr);
	return 2;
}

int cs_cmd_sim_allreduce(int argc, char **argv)
{
	return sc_main(CS_COLL_ALLREDUCE, argc, argv);
}

int cs_cmd_sim_reduce_scatter(int argc, char **argv)
{
	return sc_main(CS_COLL_REDUCE_SCATTER, argc, argv);
}

int cs_cmd_sim_all_gather(int argc, char **argv)
{
	return sc_main(CS_COLL_ALL_GATHER, argc, argv);
}

int cs_cmd_sim_broadcast(int argc, char **argv)
{
	return sc_main(CS_COLL_BROADCAST, argc, argv);
}

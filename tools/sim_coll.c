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
#include "control/member.h"
#include "control/rel.h"
#include "tests/coll_sim/coll_data.h"
#include "tests/sim/scen.h"
#include "tests/sim/sim.h"

/* ring and chain: successor and predecessor; direct exchange: every peer */
#define SC_MAX_PATHS CS_COLL_MAX_CHANNELS

struct sc_cfg {
	enum cs_coll_kind kind;
	uint32_t ranks;
	uint64_t bytes;
	enum cs_dtype dtype;
	enum cs_redop op;
	uint32_t channels;
	uint64_t chunk;
	uint32_t window;
	int64_t direct_max; /* -1: coll.direct_max's default */
	uint32_t mtu;
	double loss, dup, reorder;
	uint64_t reorder_ns;
	uint64_t seed;
	double gbps;
	double delay_us;
	uint32_t root;
	bool nodata, oop, alt_dir, verbose;
	bool random_data; /* full-mantissa floats, checked with a bound */
	double time_limit_ms;
	struct cs_xport_params xp;
	/* membership and failures (allreduce): see "Membership" below */
	bool member; /* star topology + coordinator + heartbeats */
	int64_t fail_rank; /* -1: none */
	int64_t stall_rank; /* -1: none */
	cs_ns_t fail_at, stall_at;
	cs_ns_t deadline; /* per operation; 0: none */
	struct cs_member_params mp;
	bool reform, grow;
	uint32_t show_diag; /* diagnostic lines printed */
};

#define SC_MAX_VIEWS 4
#define SC_OPS 2 /* the first allreduce, the one after */

/* A group view: epoch and members (node ids, in ring order). */
struct sc_view {
	uint32_t epoch, n;
	uint32_t *node; /* node[group rank] */
	uint32_t lost; /* node lost to make this view, or NONE */
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
	struct sc_sess *sess; /* distinct (peer, channel) sessions */
	uint32_t nsess;
	struct sc_sess **snext, **sprev; /* per channel, or NULL */
	struct cs_coll_tx *pend; /* per channel: pulled, not sent */
	bool *has_pend;
	bool ready, done;
	cs_ns_t ready_at;
	uint64_t frame_bytes, frames, pure_acks, stale, fillers;
	/* membership */
	const struct sc_view *view; /* the view rk->op runs in */
	uint32_t grank; /* rank in that view */
	uint32_t epoch; /* current epoch (headers, drop check) */
	uint32_t opno; /* 0: no op yet; 1, 2: which op */
	uint32_t done_opno; /* last op completed (sent with heartbeats) */
	cs_ns_t asked_at; /* last early heartbeat (missed view) */
	cs_ns_t op_start;
	struct cs_member_fd mfd;
	bool coord_lost;
	int status[SC_OPS + 1]; /* per op: 0 ok, error, -EINPROGRESS */
	uint32_t culprit[SC_OPS + 1];
	cs_ns_t report_at[SC_OPS + 1];
	bool reported[SC_OPS + 1];
	bool has_wait;
	struct cs_coll_wait wait;
	char diag[200];
	uint64_t stale_dropped, future_dropped;
};

struct sc_drv {
	const struct sc_cfg *cfg;
	struct cs_sim *sim;
	struct sc_rank *rk;
	uint32_t n, ndone;
	uint32_t nnodes; /* rank structs: n, plus a joiner (--grow) */
	/* membership: the coordinator, a node of its own on the switch */
	uint32_t coord;
	struct cs_coord_fd cfd;
	struct sc_view views[SC_MAX_VIEWS];
	uint32_t nviews;
	uint32_t joiner; /* node waiting to join, or NONE */
	uint32_t *done_op; /* per node: last op it reported done */
	uint32_t last_lost;
	cs_ns_t declared_at;
	uint32_t reports[SC_OPS + 1], finished[SC_OPS + 1];
	cs_ns_t t0[SC_OPS + 1], t1[SC_OPS + 1]; /* first start, last result */
	double *want1; /* --grow: op 1's result, checked at its end */
	uint64_t wrong1;
	char first1[160];
	uint64_t injected, rel_failed;
	size_t count; /* elements (per rank for RS/AG) */
	size_t esz;
	uint64_t violations;
	char why[200];
};

/* Membership mode (cfg->member), defined under "Membership" below. */
static bool sc_member_active(const struct sc_rank *rk, cs_ns_t now);
static void sc_member_timer(struct sc_rank *rk, cs_ns_t now, cs_ns_t wake);
static void sc_member_op_done(struct sc_rank *rk, cs_ns_t now);
static bool sc_member_rx(struct sc_rank *rk, const struct cs_sim_pkt *pkt,
			 cs_ns_t now);
static bool sc_member_on_timer(struct sc_rank *rk, cs_ns_t now);

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
		sc_violation(rk->d,
			     "rank %u: cs_sim_send refused (%" PRIu64 ")",
			     rk->id, len);
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

static struct sc_sess *sc_find(struct sc_rank *rk, uint32_t peer, uint32_t ch)
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
	uint32_t seq, len, C;
	uint64_t cookie;
	int ret;

	if (d->cfg->member && !sc_member_active(rk, now)) {
		sc_member_timer(rk, now, CS_NS_NEVER);
		return;
	}
	C = cs_coll_channels(rk->op);
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
				if (d->rk[s->peer].epoch == rk->epoch &&
				    !cs_coll_rx_has(d->rk[s->peer].op,
						    tx.hdr.step, tx.hdr.channel,
						    tx.hdr.offset))
					sc_violation(d,
						     "rank %u: stale retx "
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
				sc_violation(d,
					     "rank %u: rebuild failed for "
					     "cookie %" PRIx64,
					     rk->id, cookie);
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
			sc_xmit(rk, s->peer, &h,
				d->cfg->nodata ? NULL : p->payload, p->len);
			rk->has_pend[c] = false;
		}
	}
	/* 3. pure ACKs owed; 4. the node's timer */
	for (uint32_t i = 0; i < rk->nsess; i++) {
		struct sc_sess *s = &rk->sess[i];

		if (cs_rel_ack_due(&s->rel, now)) {
			memset(&h, 0, sizeof(h));
			h.version = CS_PROTO_VERSION;
			h.src = (uint16_t)rk->grank;
			h.channel = (uint16_t)s->ch;
			h.epoch = rk->epoch;
			cs_rel_build_ack(&s->rel, &h, now);
			sc_xmit(rk, s->peer, &h, NULL, 0);
			rk->pure_acks++;
		}
		if (cs_rel_failed(&s->rel) && !d->cfg->member)
			sc_violation(d,
				     "rank %u: session to rank %" PRIu64
				     " failed (timeouts)",
				     rk->id, s->peer);
		wake = CS_MIN(wake, cs_rel_next_deadline(&s->rel));
	}
	if (!rk->ready && cs_coll_result_ready(rk->op)) {
		rk->ready = true;
		rk->ready_at = now;
	}
	if (d->cfg->member) {
		sc_member_timer(rk, now, wake);
		if (!rk->done && cs_coll_done(rk->op)) {
			rk->done = true;
			sc_member_op_done(rk, now);
		}
		return;
	}
	cs_sim_timer(d->sim, rk->id, wake);
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
	struct sc_sess *s;
	int m, ret;

	(void)sim;
	if (rk->d->cfg->member && !sc_member_rx(rk, pkt, now))
		return;
	s = sc_find(rk, pkt->src, pkt->hdr.channel);
	if (!s) {
		sc_violation(rk->d,
			     "rank %u: packet from unexpected rank %" PRIu64,
			     rk->id, pkt->src);
		return;
	}
	m = cs_rel_on_packet(&s->rel, &pkt->hdr, now);
	if ((m & CS_REL_DELIVER) && pkt->hdr.type == CS_PKT_DATA) {
		ret = cs_coll_on_data(rk->op, now, &pkt->hdr, pkt->data);
		if (ret == CS_COLL_RX_STALE)
			rk->stale_dropped++;
		if (ret < 0)
			sc_violation(rk->d,
				     "rank %u: engine rejected a "
				     "packet at offset %" PRIu64,
				     rk->id, pkt->hdr.offset);
	}
	sc_service(rk, now);
}

static void sc_timer(struct cs_sim *sim, void *ctx, cs_ns_t now)
{
	struct sc_rank *rk = ctx;

	(void)sim;
	if (rk->d->cfg->member && !sc_member_on_timer(rk, now))
		return;
	for (uint32_t i = 0; i < rk->nsess; i++)
		cs_rel_on_timer(&rk->sess[i].rel, now);
	sc_service(rk, now);
}

static const struct cs_sim_node_ops sc_node_ops = {
	.rx = sc_rx,
	.timer = sc_timer,
};

static uint32_t sc_isn(uint32_t from, uint32_t to, uint32_t ch, uint32_t epoch)
{
	/* near the wrap, so long runs cross it; a new epoch, new numbers */
	return 0xfffff000u +
	       (uint32_t)(cs_td_hash(ch | (uint64_t)epoch << 16, from, to) &
			  0xfff);
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
				  &sc_rel_ops, rk,
				  sc_isn(rk->id, peer, ch, rk->epoch),
				  sc_isn(peer, rk->id, ch, rk->epoch));
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
	return d->cfg->kind == CS_COLL_REDUCE_SCATTER ? d->n * d->count
						      : d->count;
}

static size_t sc_recv_elems(const struct sc_drv *d)
{
	return d->cfg->kind == CS_COLL_ALL_GATHER ? d->n * d->count : d->count;
}

static uint64_t sc_in_index(const struct sc_drv *d, uint32_t r, size_t x)
{
	return d->cfg->kind == CS_COLL_ALL_GATHER ? (uint64_t)r * d->count + x
						  : x;
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
	*tol = c->op == CS_MIN || c->op == CS_MAX
		       ? 0
		       : (d->n + 1) * cs_td_eps(c->dtype) * mag;
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
					 " (tolerance %.3g)",
					 r, x, got, want, tol);
			/* the same bits everywhere, not just close */
			if (same_for_all && r &&
			    memcmp(d->rk[r].recv + x * d->esz,
				   d->rk[0].recv + x * d->esz, d->esz) &&
			    !wrong++)
				snprintf(first, flen,
					 "rank %u elem %zu not bit-identical "
					 "to rank 0",
					 r, x);
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

/* Will the engine run the first view's operation as a direct exchange? */
static bool sc_direct(const struct sc_drv *d)
{
	const struct sc_cfg *cfg = d->cfg;
	struct cs_coll_params p;

	cs_coll_params_default(&p, NULL);
	if (cfg->direct_max >= 0)
		p.direct_max = (uint64_t)cfg->direct_max;
	p.kind = cfg->kind;
	p.nranks = d->n;
	p.count = d->count;
	p.dtype = cfg->dtype;
	return cs_coll_is_direct(&p);
}

/* A host's link to the switch: host -> switch -> host is one link delay. */
static struct cs_sim_link_params sc_switch_link(const struct sc_cfg *cfg)
{
	return (struct cs_sim_link_params){
		.gbps = cfg->gbps,
		.delay_ns = (uint64_t)(cfg->delay_us * 500 + 0.5),
		.loss = cfg->loss,
		.dup = cfg->dup,
		.reorder = cfg->reorder,
		.reorder_ns = cfg->reorder_ns,
	};
}

/* Every rank on one switch. */
static int sc_star(struct sc_drv *d)
{
	struct cs_sim_link_params lp = sc_switch_link(d->cfg);
	uint32_t *hosts = calloc(d->n, sizeof(*hosts));
	int ret;

	if (!hosts)
		return -ENOMEM;
	for (uint32_t r = 0; r < d->n; r++)
		hosts[r] = r;
	ret = cs_sim_star(d->sim, hosts, d->n, &lp, &lp, NULL);
	free(hosts);
	return ret;
}

/* Create rk's operation as rank g of view v, and its sessions. */
static int sc_rank_open(struct sc_drv *d, struct sc_rank *rk,
			const struct sc_view *v, uint32_t g)
{
	const struct sc_cfg *cfg = d->cfg;
	struct cs_coll_params p;
	uint32_t C;
	int ret;

	cs_coll_params_default(&p, NULL);
	p.kind = cfg->kind;
	p.nranks = v->n;
	p.rank = g;
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
	if (cfg->direct_max >= 0)
		p.direct_max = (uint64_t)cfg->direct_max;
	p.mtu_payload = cfg->mtu - 20 - 8 - CS_PROTO_HDR_WIRE_LEN;
	p.flags = (cfg->nodata ? CS_COLL_F_NODATA : 0) |
		  (cfg->alt_dir ? CS_COLL_F_ALT_DIR : 0);
	p.epoch = v->epoch;
	p.op_id = rk->opno;
	p.start = rk->op_start;
	if (cfg->deadline)
		p.deadline = cfg->deadline;
	ret = cs_coll_init(&p, &rk->op);
	if (ret)
		return ret;
	rk->view = v;
	rk->grank = g;
	rk->epoch = v->epoch;
	rk->ready = rk->done = false;
	C = cs_coll_channels(rk->op);
	if (!rk->sess) {
		rk->sess = calloc(2 * C, sizeof(*rk->sess));
		rk->snext = calloc(C, sizeof(void *));
		rk->sprev = calloc(C, sizeof(void *));
		rk->pend = calloc(C, sizeof(*rk->pend));
		rk->has_pend = calloc(C, sizeof(bool));
		if (!rk->sess || !rk->snext || !rk->sprev || !rk->pend ||
		    !rk->has_pend)
			return -ENOMEM;
	}
	/* sessions to the successor and the predecessor per channel, both
	 * ends, so ACKs have a session even where no data flows back */
	for (uint32_t c = 0; c < C; c++) {
		int64_t nx, pv;

		rk->snext[c] = rk->sprev[c] = NULL;
		rk->has_pend[c] = false;
		cs_coll_chan_peers(rk->op, c, &nx, &pv);
		if (nx >= 0) {
			ret = sc_add_sess(rk, v->node[nx], c, &rk->snext[c]);
			if (ret)
				return ret;
		}
		if (pv >= 0) {
			ret = sc_add_sess(rk, v->node[pv], c, &rk->sprev[c]);
			if (ret)
				return ret;
		}
	}
	return 0;
}

/* Free rk's operation and sessions (a new epoch starts from scratch). */
static void sc_rank_close(struct sc_rank *rk)
{
	struct cs_coll_stats st;

	for (uint32_t i = 0; i < rk->nsess; i++)
		cs_rel_fini(&rk->sess[i].rel);
	rk->nsess = 0;
	rk->npaths = 0;
	if (rk->op) {
		cs_coll_get_stats(rk->op, &st);
		rk->stale_dropped += st.rx_stale_epoch;
	}
	cs_coll_free(rk->op);
	rk->op = NULL;
}

static int sc_member_setup(struct sc_drv *d);

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
	struct sc_view *v0 = &d->views[0];
	int ret;

	ret = cs_sim_create(&d->sim, &sp);
	if (ret)
		return ret;
	d->nnodes = d->n + (cfg->grow ? 1 : 0);
	d->joiner = cfg->grow ? d->n : CS_SIM_NODE_NONE;
	d->last_lost = CS_SIM_NODE_NONE;
	d->rk = calloc(d->nnodes, sizeof(*d->rk));
	v0->node = calloc(d->n, sizeof(*v0->node));
	if (!d->rk || !v0->node)
		return -ENOMEM;
	d->nviews = 1;
	v0->n = d->n;
	v0->epoch = cfg->member ? 1 : 0;
	v0->lost = CS_SIM_NODE_NONE;
	for (uint32_t r = 0; r < d->n; r++)
		v0->node[r] = r;
	for (uint32_t r = 0; r < d->nnodes; r++) {
		struct sc_rank *rk = &d->rk[r];
		uint32_t id;

		rk->d = d;
		rk->id = r;
		rk->status[1] = rk->status[2] = -EINPROGRESS;
		ret = cs_sim_node_add(d->sim, &sc_node_ops, rk, &id);
		if (ret)
			return ret;
		ret = sc_alloc_data(d, rk);
		if (ret)
			return ret;
		if (r >= d->n)
			continue; /* the joiner: no op until admitted */
		rk->opno = 1;
		ret = sc_rank_open(d, rk, v0, r);
		if (ret)
			return ret;
	}
	if (cfg->member) {
		ret = sc_member_setup(d);
		if (ret)
			return ret;
	} else if (sc_direct(d)) {
		/* a direct exchange talks to every rank: a switch */
		ret = sc_star(d);
		if (ret)
			return ret;
	} else {
		/* the ring of links */
		for (uint32_t r = 0; d->n > 1 && r < d->n; r++) {
			uint32_t nx = (r + 1) % d->n;

			if (cs_sim_link_find(d->sim, r, nx) >= 0)
				continue;
			ret = cs_sim_link_pair(d->sim, r, nx, &lp, NULL, NULL);
			if (ret)
				return ret;
		}
	}
	for (uint32_t r = 0; r < d->nnodes; r++)
		cs_sim_timer(d->sim, r, 0);
	return 0;
}

static void sc_teardown(struct sc_drv *d)
{
	for (uint32_t r = 0; d->rk && r < d->nnodes; r++) {
		struct sc_rank *rk = &d->rk[r];

		sc_rank_close(rk);
		sc_free_data(d, rk);
		free(rk->sess);
		free(rk->snext);
		free(rk->sprev);
		free(rk->pend);
		free(rk->has_pend);
	}
	for (uint32_t i = 0; i < d->nviews; i++)
		free(d->views[i].node);
	if (d->cfg->member)
		cs_coord_fd_fini(&d->cfd);
	free(d->want1);
	free(d->done_op);
	free(d->rk);
	cs_sim_destroy(d->sim);
}

/* ---- Membership ------------------------------------------------------
 *
 * With --fail-rank, --stall-rank, --deadline-us, --grow (allreduce only)
 * the ranks sit on a star (one output-queued switch) together with a
 * coordinator, a node of its own. Every rank's sidecar sends a heartbeat
 * (CS_PKT_HEARTBEAT, a frame on the rank's uplink like any other) every
 * member.hb_interval; the coordinator runs cs_coord_fd, answers each
 * heartbeat with the current epoch and, when a rank has been silent for
 * member.fail_timeout, advances the epoch and sends the new view (CS_PKT_CTRL
 * SC_CTRL_VIEW: epoch, lost node) to every survivor. A survivor aborts its
 * in-flight operation with CS_ERR_PEER_LOST naming the lost rank and, with
 * --reform, starts the next allreduce in the new view at once: new epoch,
 * new ring order without the lost rank, new transport sessions. The member
 * list of a view is what the coordinator's table would carry; here the
 * driver keeps it (d->views) and the packet names the epoch.
 *
 * Every data packet carries its epoch: a packet of an older epoch is
 * dropped and counted (stale) before the transport sees it, one of a newer
 * epoch (its sender got the view first) is dropped too and repaired by the
 * sender's retransmission.
 *
 * A stalled rank (--stall-rank) stops processing collective traffic (a hung
 * trainer) while its sidecar keeps heartbeating: only the operation
 * deadline (--deadline-us) catches it. Each rank then reports
 * CS_ERR_TIMEOUT with cs_coll_waiting_on()'s line; following the "waits on"
 * links from rank to rank, as the coordinator would with the reports,
 * ends at the stalled rank.
 *
 * --grow: a node on the switch heartbeats from the start; the coordinator
 * admits it (CS_MEMBER_JOINING) and, once every member reported the first
 * allreduce done (SC_CTRL_DONE), i.e. at the operation boundary, announces
 * a view of n + 1 in which the next allreduce runs.
 */
enum { SC_CTRL_VIEW = 1, SC_CTRL_DONE = 2 };

static bool sc_stalled(const struct sc_rank *rk, cs_ns_t now)
{
	const struct sc_cfg *cfg = rk->d->cfg;

	return cfg->stall_rank == (int64_t)rk->id && now >= cfg->stall_at;
}

static bool sc_member_active(const struct sc_rank *rk, cs_ns_t now)
{
	int st;

	if (!rk->op || sc_stalled(rk, now))
		return false;
	st = cs_coll_status(rk->op, NULL);
	return st == 0 || st == -EINPROGRESS;
}

static void sc_member_timer(struct sc_rank *rk, cs_ns_t now, cs_ns_t wake)
{
	wake = CS_MIN(wake, cs_member_fd_deadline(&rk->mfd));
	if (rk->op && !sc_stalled(rk, now))
		wake = CS_MIN(wake, cs_coll_next_deadline(rk->op));
	cs_sim_timer(rk->d->sim, rk->id, wake);
}

static void sc_ctl_hdr(struct cs_pkt_hdr *h, uint8_t type, uint32_t src,
		       uint32_t epoch)
{
	memset(h, 0, sizeof(*h));
	h->version = CS_PROTO_VERSION;
	h->type = type;
	h->src = (uint16_t)src;
	h->epoch = epoch;
}

static const struct sc_view *sc_view_of(const struct sc_drv *d, uint32_t epoch)
{
	for (uint32_t i = 0; i < d->nviews; i++)
		if (d->views[i].epoch == epoch)
			return &d->views[i];
	return NULL;
}

static int64_t sc_view_rank(const struct sc_view *v, uint32_t node)
{
	for (uint32_t g = 0; g < v->n; g++)
		if (v->node[g] == node)
			return g;
	return -1;
}

static void sc_fill(struct sc_drv *d, struct sc_rank *rk, uint32_t n,
		    uint32_t g, uint64_t seed)
{
	const struct sc_cfg *cfg = d->cfg;

	if (cfg->nodata)
		return;
	for (size_t x = 0; x < d->count; x++)
		cs_td_store(cfg->dtype, rk->send, x,
			    cs_td_value(cfg->dtype, cfg->op, n, seed, g, x));
}

static void sc_check_end(struct sc_drv *d);

static void sc_report(struct sc_rank *rk, int err, uint32_t culprit,
		      cs_ns_t now)
{
	struct sc_drv *d = rk->d;
	uint32_t o = rk->opno;

	rk->status[o] = err;
	rk->culprit[o] = culprit;
	rk->report_at[o] = now;
	rk->reported[o] = true;
	d->reports[o]++;
	sc_check_end(d);
}

/* --grow: the next op overwrites op 1's result, so check it now. */
static void sc_check_op1(struct sc_drv *d, const struct sc_rank *rk)
{
	const struct sc_cfg *cfg = d->cfg;

	for (size_t x = 0; x < d->count; x++) {
		double got = cs_td_load(cfg->dtype, rk->recv, x);

		if (got != d->want1[x] && !d->wrong1++)
			snprintf(d->first1, sizeof(d->first1),
				 "op 1 rank %u "
				 "elem %zu got %.9g want %.9g",
				 rk->grank, x, got, d->want1[x]);
	}
}

static void sc_member_op_done(struct sc_rank *rk, cs_ns_t now)
{
	struct sc_drv *d = rk->d;
	struct cs_pkt_hdr h;

	if (cs_coll_status(rk->op, NULL) != 0)
		return;
	rk->status[rk->opno] = 0;
	rk->report_at[rk->opno] = now;
	rk->done_opno = rk->opno;
	d->finished[rk->opno]++;
	if (!d->t0[rk->opno] || rk->op_start < d->t0[rk->opno])
		d->t0[rk->opno] = rk->op_start;
	d->t1[rk->opno] = CS_MAX(d->t1[rk->opno], rk->ready_at);
	if (d->want1 && rk->opno == 1)
		sc_check_op1(d, rk);
	/* the coordinator learns the operation boundary */
	sc_ctl_hdr(&h, CS_PKT_CTRL, rk->id, rk->epoch);
	h.step = SC_CTRL_DONE;
	h.op = rk->opno;
	cs_sim_send(d->sim, rk->id, d->coord, &h, NULL, 0);
	sc_check_end(d);
}

/* The engine aborted the op at its deadline: report what it waited for. */
static void sc_timeout(struct sc_rank *rk, cs_ns_t now)
{
	cs_coll_abort_wait(rk->op, &rk->wait);
	rk->has_wait = rk->wait.kind != CS_COLL_WAIT_NONE;
	cs_coll_wait_format(rk->op, &rk->wait, rk->diag, sizeof(rk->diag));
	sc_report(rk, CS_ERR_TIMEOUT,
		  rk->has_wait ? rk->view->node[rk->wait.peer]
			       : CS_SIM_NODE_NONE,
		  now);
}

/* A new view: abort what runs in the old one; maybe start the next op. */
static void sc_new_view(struct sc_rank *rk, uint32_t epoch, cs_ns_t now)
{
	struct sc_drv *d = rk->d;
	const struct sc_cfg *cfg = d->cfg;
	const struct sc_view *v = sc_view_of(d, epoch);
	int64_t g;
	int ret;

	if (!v) {
		sc_violation(d, "rank %u: view of unknown epoch %" PRIu64,
			     rk->id, epoch);
		return;
	}
	if (rk->op && cs_coll_status(rk->op, NULL) == -EINPROGRESS) {
		int err = v->lost != CS_SIM_NODE_NONE ? CS_ERR_PEER_LOST
						      : CS_ERR_EPOCH;
		int64_t cg = v->lost != CS_SIM_NODE_NONE
				     ? sc_view_rank(rk->view, v->lost)
				     : -1;

		cs_coll_abort(rk->op, err, cg >= 0 ? (uint32_t)cg : UINT32_MAX);
		sc_report(rk, err, v->lost, now);
	}
	rk->epoch = epoch; /* older packets are stale from now on */
	g = sc_view_rank(v, rk->id);
	if (g < 0 || (v->lost != CS_SIM_NODE_NONE && !cfg->reform))
		return;
	if ((uint32_t)(v - d->views) + 1 > SC_OPS)
		return;
	sc_rank_close(rk);
	rk->opno = (uint32_t)(v - d->views) + 1;
	rk->op_start = now;
	sc_fill(d, rk, v->n, (uint32_t)g, cfg->seed + rk->opno - 1);
	ret = sc_rank_open(d, rk, v, (uint32_t)g);
	if (ret) {
		sc_violation(d,
			     "rank %u: cannot start the next op (%" PRIu64 ")",
			     rk->id, (uint64_t)-ret);
		return;
	}
	sc_service(rk, now);
}

static void sc_from_coord(struct sc_rank *rk, const struct cs_sim_pkt *pkt,
			  cs_ns_t now)
{
	const struct cs_pkt_hdr *h = &pkt->hdr;

	if (h->type == CS_PKT_HEARTBEAT ||
	    (h->type == CS_PKT_CTRL && h->step == SC_CTRL_VIEW)) {
		if (cs_member_fd_on_view(&rk->mfd, h->epoch, now) &&
		    !sc_stalled(rk, now)) {
			sc_new_view(rk, h->epoch, now);
			return;
		}
	}
	if (sc_member_active(rk, now))
		sc_service(rk, now);
	else
		sc_member_timer(rk, now, CS_NS_NEVER);
}

static void sc_send_hb(struct sc_rank *rk);

/* Returns true when the packet goes on to the transport and the engine. */
static bool sc_member_rx(struct sc_rank *rk, const struct cs_sim_pkt *pkt,
			 cs_ns_t now)
{
	if (pkt->src == rk->d->coord) {
		sc_from_coord(rk, pkt, now);
		return false;
	}
	if (sc_stalled(rk, now))
		return false;
	if (pkt->hdr.epoch != rk->epoch) {
		if ((int32_t)(pkt->hdr.epoch - rk->epoch) < 0) {
			rk->stale_dropped++;
		} else {
			/* a view announcement was lost: ask at once (the
			 * coordinator's answer carries the epoch), again
			 * after rel.rto_min if that is lost too */
			rk->future_dropped++;
			if (!rk->asked_at ||
			    now >= rk->asked_at + rk->d->cfg->xp.rel.rto_min) {
				rk->asked_at = now;
				sc_send_hb(rk);
			}
		}
		return false;
	}
	return rk->op != NULL;
}

static void sc_send_hb(struct sc_rank *rk)
{
	struct cs_pkt_hdr h;

	sc_ctl_hdr(&h, CS_PKT_HEARTBEAT, rk->id, rk->mfd.epoch);
	h.op = rk->done_opno;
	cs_sim_send(rk->d->sim, rk->id, rk->d->coord, &h, NULL, 0);
	rk->frames++;
	rk->frame_bytes += CS_PROTO_FRAME_OVERHEAD;
}

/* Heartbeats and the deadline; true: go on with the transport timers. */
static bool sc_member_on_timer(struct sc_rank *rk, cs_ns_t now)
{
	unsigned act = cs_member_fd_poll(&rk->mfd, now);

	if (act & CS_MEMBER_SEND_HB)
		sc_send_hb(rk);
	if (act & CS_MEMBER_COORD_LOST)
		rk->coord_lost = true;
	if (!sc_stalled(rk, now) && rk->op &&
	    cs_coll_check_deadline(rk->op, now))
		sc_timeout(rk, now);
	if (!sc_member_active(rk, now)) {
		sc_member_timer(rk, now, CS_NS_NEVER);
		return false;
	}
	return true;
}

/* ---- the coordinator ---- */

static void sc_coord_arm(struct sc_drv *d)
{
	cs_sim_timer(d->sim, d->coord, cs_coord_fd_deadline(&d->cfd));
}

static void sc_coord_announce(struct sc_drv *d, const struct sc_view *v)
{
	struct cs_pkt_hdr h;

	sc_ctl_hdr(&h, CS_PKT_CTRL, d->coord, v->epoch);
	h.step = SC_CTRL_VIEW;
	h.offset = v->lost;
	for (uint32_t g = 0; g < v->n; g++)
		cs_sim_send(d->sim, d->coord, v->node[g], &h, NULL, 0);
}

/* A new view from the current one: without @lost, or with the joiner. */
static struct sc_view *sc_coord_view(struct sc_drv *d, const uint32_t *lost,
				     unsigned nlost, uint32_t join)
{
	const struct sc_view *cur = &d->views[d->nviews - 1];
	struct sc_view *v;

	if (d->nviews == SC_MAX_VIEWS)
		return NULL;
	v = &d->views[d->nviews];
	v->node = calloc(cur->n + 1, sizeof(*v->node));
	if (!v->node)
		return NULL;
	d->nviews++;
	v->epoch = d->cfd.epoch;
	v->lost = nlost ? lost[0] : CS_SIM_NODE_NONE;
	for (uint32_t g = 0; g < cur->n; g++) {
		bool gone = false;

		for (unsigned i = 0; i < nlost; i++)
			gone |= cur->node[g] == lost[i];
		if (!gone)
			v->node[v->n++] = cur->node[g];
	}
	if (join != CS_SIM_NODE_NONE)
		v->node[v->n++] = join;
	return v;
}

static void sc_coord_rx(struct cs_sim *sim, void *ctx,
			const struct cs_sim_pkt *pkt, cs_ns_t now)
{
	struct sc_drv *d = ctx;
	const struct sc_view *cur = &d->views[d->nviews - 1];
	struct cs_pkt_hdr h;
	struct sc_view *v;

	(void)sim;
	if (pkt->hdr.type == CS_PKT_HEARTBEAT) {
		if (cs_coord_fd_heard(&d->cfd, pkt->src, now) == 0) {
			sc_ctl_hdr(&h, CS_PKT_HEARTBEAT, d->coord,
				   d->cfd.epoch);
			h.offset = d->last_lost;
			cs_sim_send(d->sim, d->coord, pkt->src, &h, NULL, 0);
		}
	} else if (pkt->hdr.type == CS_PKT_CTRL &&
		   pkt->hdr.step == SC_CTRL_DONE) {
		cs_coord_fd_heard(&d->cfd, pkt->src, now);
	}
	/* DONE, repeated in every heartbeat (datagrams may be lost) */
	if (pkt->src < d->nnodes && pkt->hdr.op > d->done_op[pkt->src] &&
	    (pkt->hdr.type == CS_PKT_HEARTBEAT ||
	     pkt->hdr.type == CS_PKT_CTRL)) {
		uint32_t o = (uint32_t)(cur - d->views) + 1, k = 0;

		d->done_op[pkt->src] = pkt->hdr.op;
		for (uint32_t g = 0; g < cur->n; g++)
			k += d->done_op[cur->node[g]] >= o;
		/* every member done: the operation boundary, admit */
		if (k == cur->n && d->joiner != CS_SIM_NODE_NONE) {
			d->cfd.state[d->joiner] = CS_MEMBER_ALIVE;
			d->cfd.alive++;
			d->cfd.last_heard[d->joiner] = now;
			d->cfd.epoch++;
			v = sc_coord_view(d, NULL, 0, d->joiner);
			if (!v) {
				sc_violation(d,
					     "coordinator: no room for view"
					     " %u (%" PRIu64 " views)",
					     d->cfd.epoch, (uint64_t)d->nviews);
				return;
			}
			d->joiner = CS_SIM_NODE_NONE;
			sc_coord_announce(d, v);
		}
	}
	sc_coord_arm(d);
}

static void sc_coord_timer(struct cs_sim *sim, void *ctx, cs_ns_t now)
{
	struct sc_drv *d = ctx;
	uint32_t lost[8];
	unsigned k = cs_coord_fd_poll(&d->cfd, now, lost, CS_ARRAY_SIZE(lost));
	struct sc_view *v;

	(void)sim;
	if (k) {
		v = sc_coord_view(d, lost, k, CS_SIM_NODE_NONE);
		if (!v) {
			sc_violation(
				d,
				"coordinator: no room for view %u (%" PRIu64
				" views)",
				d->cfd.epoch, (uint64_t)d->nviews);
			return;
		}
		if (!d->declared_at)
			d->declared_at = now;
		d->last_lost = lost[0];
		sc_coord_announce(d, v);
	}
	sc_coord_arm(d);
}

static const struct cs_sim_node_ops sc_coord_ops = {
	.rx = sc_coord_rx,
	.timer = sc_coord_timer,
};

static int sc_member_setup(struct sc_drv *d)
{
	const struct sc_cfg *cfg = d->cfg;
	struct cs_sim_link_params lp = sc_switch_link(cfg);
	uint32_t *hosts;
	int ret;

	ret = cs_sim_node_add(d->sim, &sc_coord_ops, d, &d->coord);
	if (ret)
		return ret;
	ret = cs_coord_fd_init(&d->cfd, &cfg->mp, d->nnodes, 1, 0);
	if (ret)
		return ret;
	d->done_op = calloc(d->nnodes, sizeof(*d->done_op));
	if (!d->done_op)
		return -ENOMEM;
	if (d->joiner != CS_SIM_NODE_NONE) {
		d->cfd.state[d->joiner] = CS_MEMBER_JOINING;
		d->cfd.alive--;
	}
	for (uint32_t r = 0; r < d->nnodes; r++)
		cs_member_fd_init(&d->rk[r].mfd, &cfg->mp, 1, 0);
	hosts = calloc(d->nnodes + 1, sizeof(*hosts));
	if (!hosts)
		return -ENOMEM;
	for (uint32_t r = 0; r < d->nnodes; r++)
		hosts[r] = r;
	hosts[d->nnodes] = d->coord;
	ret = cs_sim_star(d->sim, hosts, d->nnodes + 1, &lp, &lp, NULL);
	free(hosts);
	if (ret)
		return ret;
	if (cfg->grow && !cfg->nodata) {
		d->want1 = malloc(CS_MAX(d->count, 1) * sizeof(double));
		if (!d->want1)
			return -ENOMEM;
		for (size_t x = 0; x < d->count; x++)
			d->want1[x] = cs_td_expect(cfg->dtype, cfg->op, d->n,
						   cfg->seed, x);
	}
	if (cfg->fail_rank >= 0) {
		ret = cs_sim_node_fail_at(d->sim, (uint32_t)cfg->fail_rank,
					  cfg->fail_at);
		if (ret)
			return ret;
	}
	sc_coord_arm(d);
	return 0;
}

/* One packet of the old epoch, as a delayed frame of the old group would
 * arrive: between two survivors already in the new epoch. */
static void sc_inject_stale(struct sc_drv *d, uint32_t busy)
{
	const struct sc_view *v = &d->views[d->nviews - 1];
	struct cs_pkt_hdr h;

	for (uint32_t g = 0; g + 1 < v->n; g++) {
		uint32_t a = v->node[g], b = v->node[g + 1];

		if (a == busy || b == busy || d->rk[b].epoch != v->epoch)
			continue;
		sc_ctl_hdr(&h, CS_PKT_DATA, a, v->epoch - 1);
		h.op = 1;
		h.flags = CS_PKT_F_RETX;
		if (!cs_sim_send(d->sim, a, b, &h, NULL, 0))
			d->injected++;
		return;
	}
}

static void sc_check_end(struct sc_drv *d)
{
	const struct sc_cfg *cfg = d->cfg;
	bool end;

	if (cfg->stall_rank >= 0) {
		end = d->reports[1] >= d->n - 1;
	} else if (cfg->fail_rank >= 0) {
		if (cfg->reform && !d->injected && d->reports[1] >= d->n - 1)
			sc_inject_stale(d, CS_SIM_NODE_NONE);
		end = cfg->reform ? d->finished[2] >= d->n - 1
				  : d->reports[1] >= d->n - 1;
	} else if (cfg->grow) {
		end = d->finished[2] >= d->n + 1;
	} else {
		end = d->finished[1] + d->reports[1] >= d->n;
	}
	if (end)
		cs_sim_stop(d->sim);
}

/* Check every rank's result of op @o in view @v. */
static uint64_t sc_verify_view(struct sc_drv *d, const struct sc_view *v,
			       uint32_t o, char *first, size_t flen)
{
	const struct sc_cfg *cfg = d->cfg;
	uint64_t wrong = 0, seed = cfg->seed + o - 1;
	const uint8_t *r0 = d->rk[v->node[0]].recv;

	if (cfg->nodata)
		return 0;
	for (size_t x = 0; x < d->count; x++) {
		double want = cs_td_expect(cfg->dtype, cfg->op, v->n, seed, x);

		for (uint32_t g = 0; g < v->n; g++) {
			const uint8_t *b = d->rk[v->node[g]].recv;
			double got = cs_td_load(cfg->dtype, b, x);

			if ((got != want ||
			     memcmp(b + x * d->esz, r0 + x * d->esz, d->esz)) &&
			    !wrong++)
				snprintf(first, flen,
					 "rank %u (node %u) elem "
					 "%zu got %.9g want %.9g",
					 g, v->node[g], x, got, want);
		}
	}
	return wrong;
}

/* Time of op @o: first start to last result. */
static double sc_op_us(const struct sc_drv *d, const struct sc_view *v,
		       uint32_t o)
{
	(void)v;
	return d->t1[o] > d->t0[o] ? (double)(d->t1[o] - d->t0[o]) / 1000 : 0;
}

static int sc_member_result(struct sc_drv *d, int simret)
{
	const struct sc_cfg *cfg = d->cfg;
	const char *name = cs_coll_kind_name(cfg->kind);
	uint64_t stale = 0, future = 0, wrong;
	uint32_t good = 0, want = 0, coord_lost = 0;
	double max_us = 0, bound_us = 2.0 * cfg->mp.fail_timeout / 1000;
	char first[200] = "";
	int rc = 0;

	for (uint32_t r = 0; r < d->nnodes; r++) {
		struct sc_rank *rk = &d->rk[r];

		if (rk->op) {
			struct cs_coll_stats st;

			cs_coll_get_stats(rk->op, &st);
			stale += st.rx_stale_epoch;
		}
		stale += rk->stale_dropped;
		future += rk->future_dropped;
		coord_lost += rk->coord_lost;
	}
	if (d->violations) {
		printf("%s FAIL ranks=%u seed=%" PRIu64 ": %s\n", name, d->n,
		       cfg->seed, d->why);
		return 1;
	}
	if (cfg->fail_rank >= 0) {
		uint32_t R = (uint32_t)cfg->fail_rank, bad = CS_SIM_NODE_NONE;

		for (uint32_t r = 0; r < d->n; r++) {
			struct sc_rank *rk = &d->rk[r];
			double us;

			if (r == R)
				continue;
			want++;
			us = rk->reported[1] ? ((double)rk->report_at[1] -
						(double)cfg->fail_at) /
						       1000
					     : 0;
			if (rk->reported[1] &&
			    rk->status[1] == CS_ERR_PEER_LOST &&
			    rk->culprit[1] == R && us <= bound_us)
				good++;
			else if (bad == CS_SIM_NODE_NONE)
				bad = r;
			max_us = CS_MAX(max_us, us);
		}
		if (good != want)
			rc = 1;
		printf("%s peer_lost %s ranks=%u lost=%u"
		       " survivors_reported=%u/%u max_report_us=%.3f"
		       " bound_us=%.3f detect_us=%.3f"
		       " epoch=%u stale_dropped=%" PRIu64 " injected=%" PRIu64
		       "\n",
		       name, rc ? "FAIL" : "ok", d->n, R, good, want, max_us,
		       bound_us,
		       d->declared_at ? ((double)d->declared_at -
					 (double)cfg->fail_at) /
						1000
				      : 0,
		       d->nviews > 1 ? d->views[1].epoch : 1, stale,
		       d->injected);
		if (bad != CS_SIM_NODE_NONE)
			printf("  first bad survivor: rank %u reported=%d "
			       "status=%s culprit=%d (sim run %d)\n",
			       bad, d->rk[bad].reported[1],
			       cs_strerror(d->rk[bad].status[1]),
			       (int)d->rk[bad].culprit[1], simret);
		if (cfg->reform) {
			const struct sc_view *v =
				d->nviews > 1 ? &d->views[1] : NULL;

			if (!v || d->finished[2] != v->n ||
			    (d->injected && !stale)) {
				printf("%s reform FAIL: %u of %u finished, "
				       "stale_dropped=%" PRIu64 " (sim run %d)"
				       "\n",
				       name, d->finished[2], v ? v->n : 0,
				       stale, simret);
				return 1;
			}
			wrong = sc_verify_view(d, v, 2, first, sizeof(first));
			printf("%s reform %s ranks=%u epoch=%u bytes=%" PRIu64
			       " time_us=%.3f wrong=%" PRIu64
			       " future_dropped=%" PRIu64 "%s%s\n",
			       name, wrong ? "FAIL" : "ok", v->n, v->epoch,
			       cfg->bytes, sc_op_us(d, v, 2), wrong, future,
			       wrong ? ": " : "", first);
			rc |= wrong ? 1 : 0;
		}
	} else if (cfg->stall_rank >= 0) {
		uint32_t R = (uint32_t)cfg->stall_rank, named = 0, direct = 0;
		uint32_t shown = 0;
		const struct sc_view *v = &d->views[0];

		for (uint32_t r = 0; r < d->n; r++) {
			struct sc_rank *rk = &d->rk[r];
			uint32_t x = r, hops = 0;

			if (r == R)
				continue;
			want++;
			if (!rk->reported[1] || rk->status[1] != CS_ERR_TIMEOUT)
				continue;
			good++;
			max_us =
				CS_MAX(max_us, (double)rk->report_at[1] / 1000);
			direct += rk->culprit[1] == R;
			/* follow "waits on" to the rank that did not report */
			while (x != R && d->rk[x].has_wait && hops++ < d->n)
				x = v->node[d->rk[x].wait.peer];
			named += x == R;
		}
		rc = good == want && named == want ? 0 : 1;
		printf("%s deadline %s ranks=%u stalled=%u"
		       " reported_timeout=%u/%u stuck_rank_named=%u/%u"
		       " waits_on_stalled_directly=%u"
		       " deadline_us=%.3f max_report_us=%.3f epoch=%u\n",
		       name, rc ? "FAIL" : "ok", d->n, R, good, want, named,
		       want, direct, (double)cfg->deadline / 1000, max_us,
		       d->cfd.epoch);
		/* the ranks next to the stalled one first, in ring order */
		for (uint32_t k = 1; k < d->n && shown < cfg->show_diag; k++) {
			struct sc_rank *rk = &d->rk[(R + k) % d->n];

			if (!rk->reported[1])
				continue;
			printf("  %s\n", rk->diag);
			shown++;
		}
		if (good > shown)
			printf("  ... and %u more\n", good - shown);
	} else if (cfg->grow) {
		const struct sc_view *v = d->nviews > 1 ? &d->views[1] : NULL;

		if (!v || d->finished[2] != v->n || d->finished[1] != d->n) {
			printf("%s grow FAIL: %u of %u finished the first op, "
			       "%u of %u the second (sim run %d)\n",
			       name, d->finished[1], d->n, d->finished[2],
			       v ? v->n : 0, simret);
			return 1;
		}
		wrong = d->wrong1;
		snprintf(first, sizeof(first), "%s", d->first1);
		wrong += sc_verify_view(d, v, 2, first, sizeof(first));
		rc = wrong ? 1 : 0;
		printf("%s grow %s ranks=%u->%u epoch=%u bytes=%" PRIu64
		       " time_us=%.3f,%.3f wrong=%" PRIu64 "%s%s\n",
		       name, rc ? "FAIL" : "ok", d->n, v->n, v->epoch,
		       cfg->bytes, sc_op_us(d, &d->views[0], 1),
		       sc_op_us(d, v, 2), wrong, wrong ? ": " : "", first);
	} else {
		wrong = sc_verify_view(d, &d->views[0], 1, first,
				       sizeof(first));
		rc = wrong || d->finished[1] != d->n ? 1 : 0;
		printf("%s member %s ranks=%u bytes=%" PRIu64 " time_us=%.3f"
		       " wrong=%" PRIu64 " finished=%u%s%s\n",
		       name, rc ? "FAIL" : "ok", d->n, cfg->bytes,
		       sc_op_us(d, &d->views[0], 1), wrong, d->finished[1],
		       wrong ? ": " : "", first);
		for (uint32_t r = 0; r < d->n && d->reports[1]; r++) {
			if (!d->rk[r].reported[1])
				continue;
			printf("  %u ranks failed with %s, first: %s\n",
			       d->reports[1], cs_strerror(d->rk[r].status[1]),
			       d->rk[r].diag[0] ? d->rk[r].diag : "-");
			break;
		}
	}
	if (cfg->verbose)
		fprintf(stderr,
			"  seed=%" PRIu64 " events=%" PRIu64
			" hb_interval_us=%.3f fail_timeout_us=%.3f"
			" stale_dropped=%" PRIu64 " future_dropped=%" PRIu64
			" coord_lost_reports=%u views=%u sim_now_us=%.3f\n",
			cfg->seed, cs_sim_events(d->sim),
			(double)cfg->mp.hb_interval / 1000,
			(double)cfg->mp.fail_timeout / 1000, stale, future,
			coord_lost, d->nviews,
			(double)cs_sim_now(d->sim) / 1000);
	return rc;
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
	if (cfg->member) {
		rc = sc_member_result(&d, ret);
		sc_teardown(&d);
		return rc;
	}
	for (uint32_t r = 0; r < d.n; r++) {
		struct sc_rank *rk = &d.rk[r];

		if (!rk->ready && !d.violations)
			snprintf(d.why, sizeof(d.why),
				 "rank %u never completed (sim run %d)", r,
				 ret);
		t_end = CS_MAX(t_end, rk->ready_at);
		max_sent = CS_MAX(max_sent, (double)rk->frame_bytes);
		max_wire = CS_MAX(max_wire,
				  (double)(rk->frame_bytes +
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
		       ": %s\n",
		       name, cfg->ranks, cfg->bytes, cfg->seed, d.why);
		sc_teardown(&d);
		return 1;
	}
	if (!cfg->nodata) {
		wrong = sc_verify(&d, first, sizeof(first));
		if (wrong) {
			printf("%s FAIL ranks=%u bytes=%" PRIu64
			       " seed=%" PRIu64 " wrong=%" PRIu64 ": %s\n",
			       name, cfg->ranks, cfg->bytes, cfg->seed, wrong,
			       first);
			sc_teardown(&d);
			return 1;
		}
	}
	time_ns = (double)t_end;
	bound_ns = sc_hops(cfg->kind, cfg->ranks) * cfg->delay_us * 1000 +
		   f * (double)cfg->bytes * 8 / cfg->gbps;
	if (cfg->kind == CS_COLL_BROADCAST)
		bound_ns =
			sc_hops(cfg->kind, cfg->ranks) * cfg->delay_us * 1000 +
			(double)cfg->bytes * 8 / cfg->gbps;
	if (cfg->ranks < 2)
		bound_ns = 0;
	algbw = time_ns > 0 ? (double)cfg->bytes * 8 / time_ns : 0;
	ideal = f * (double)cfg->bytes;
	printf("%s ok ranks=%u bytes=%" PRIu64 " time_us=%.3f algbw_gbps=%.3f"
	       " busbw_gbps=%.3f sent_per_rank_over_ideal=%.4f"
	       " time_over_bound=%.4f\n",
	       name, cfg->ranks, cfg->bytes, time_ns / 1000, algbw,
	       algbw * (cfg->kind == CS_COLL_BROADCAST ? 1.0 : f),
	       ideal > 0 ? max_sent / ideal : 0,
	       bound_ns > 0 ? time_ns / bound_ns : 0);
	if (cfg->verbose)
		fprintf(stderr,
			"  seed=%" PRIu64 " mtu=%u payload/pkt=%u "
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
		"  --direct-max B     allreduce up to B bytes as a direct\n"
		"                     exchange on a switch (coll.direct_max;\n"
		"                     0: always the ring of links)\n"
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
		"  --verbose          counters on stderr\n"
		"membership and failures (allreduce; ranks on a switch with a\n"
		"coordinator node, heartbeats on the same links):\n"
		"  --fail-rank R      node R dies at --fail-at-us: every\n"
		"                     survivor must report CS_ERR_PEER_LOST\n"
		"                     naming R within 2 x fail timeout\n"
		"  --fail-at-us T     when (simulated time, us)\n"
		"  --reform           then the n-1 survivors run the next\n"
		"                     allreduce in the new epoch (verified)\n"
		"  --stall-rank R     node R stops processing collective\n"
		"                     traffic at --stall-at-us (heartbeats go\n"
		"                     on); needs --deadline-us\n"
		"  --stall-at-us T    when\n"
		"  --deadline-us D    per-operation deadline: CS_ERR_TIMEOUT\n"
		"                     with a line saying what it waits for\n"
		"  --show-diag K      diagnostic lines printed (8)\n"
		"  --grow             a new node joins at the operation\n"
		"                     boundary; the next allreduce has n+1\n"
		"  --membership       the star and coordinator, no failure\n"
		"  --hb-interval-ms H member.hb_interval (100)\n"
		"  --fail-timeout-ms F member.fail_timeout (1000)\n",
		name, CS_COLL_MAX_RANKS);
}

/* Options of the membership scenarios that do not fit together. */
static int sc_member_check(const struct sc_cfg *c, const char *name)
{
	const char *why = NULL;

	if (c->kind != CS_COLL_ALLREDUCE)
		why = "membership scenarios run allreduce only";
	else if (c->oop || c->random_data)
		why = "membership scenarios run in place with exact data";
	else if (c->ranks < 2 || c->ranks > 65000)
		why = "membership scenarios need 2 .. 65000 ranks";
	else if (c->fail_rank >= (int64_t)c->ranks ||
		 c->stall_rank >= (int64_t)c->ranks)
		why = "--fail-rank / --stall-rank: no such rank";
	else if (c->fail_rank >= 0 && c->stall_rank >= 0)
		why = "one of --fail-rank and --stall-rank";
	else if ((c->fail_rank >= 0 || c->stall_rank >= 0) && c->grow)
		why = "--grow runs without a failure";
	else if (c->reform && c->fail_rank < 0)
		why = "--reform needs --fail-rank";
	else if (c->stall_rank >= 0 && !c->deadline)
		why = "--stall-rank needs --deadline-us";
	else if (c->stall_rank >= 0 && c->deadline >= c->mp.fail_timeout)
		why = "--deadline-us must be below the fail timeout";
	else if (c->fail_rank >= 0 && c->deadline &&
		 c->deadline <= 2 * c->mp.fail_timeout)
		why = "with --fail-rank the deadline must exceed 2 x "
		      "fail timeout";
	else if (!c->mp.hb_interval || !c->mp.fail_timeout ||
		 c->mp.hb_interval >= c->mp.fail_timeout)
		why = "need 0 < --hb-interval-ms < --fail-timeout-ms";
	if (why)
		fprintf(stderr, "sim %s: %s\n", name, why);
	return why ? -EINVAL : 0;
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
		{ "direct-max", required_argument, NULL, 1011 },
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
		{ "fail-rank", required_argument, NULL, 1000 },
		{ "fail-at-us", required_argument, NULL, 1001 },
		{ "reform", no_argument, NULL, 1002 },
		{ "stall-rank", required_argument, NULL, 1003 },
		{ "stall-at-us", required_argument, NULL, 1004 },
		{ "deadline-us", required_argument, NULL, 1005 },
		{ "show-diag", required_argument, NULL, 1006 },
		{ "grow", no_argument, NULL, 1007 },
		{ "membership", no_argument, NULL, 1008 },
		{ "hb-interval-ms", required_argument, NULL, 1009 },
		{ "fail-timeout-ms", required_argument, NULL, 1010 },
		{ 0 },
	};
	const char *name = cs_coll_kind_name(kind);
	struct sc_cfg cfg = {
		.kind = kind,
		.ranks = 0,
		.dtype = CS_F32,
		.op = CS_SUM,
		.mtu = 9000,
		.seed = 1,
		.gbps = 100,
		.delay_us = 1,
		.reorder_ns = 5000,
		.time_limit_ms = 60000,
		.fail_rank = -1,
		.stall_rank = -1,
		.show_diag = 8,
		.direct_max = -1,
	};
	char err[160], *eq;
	uint64_t v;
	int o;

	if (cs_xport_params_default(&cfg.xp) ||
	    cs_cfg_defaults(cs_member_cfg, cs_member_cfg_len, &cfg.mp))
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
		case 1011:
			if (sc_size(optarg, &v) || v > (1ull << 30))
				goto bad;
			cfg.direct_max = (int64_t)v;
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
		case 1000:
			cfg.fail_rank = strtoll(optarg, NULL, 0);
			cfg.member = true;
			break;
		case 1001:
			cfg.fail_at = (cs_ns_t)(strtod(optarg, NULL) * 1e3);
			break;
		case 1002:
			cfg.reform = true;
			break;
		case 1003:
			cfg.stall_rank = strtoll(optarg, NULL, 0);
			cfg.member = true;
			break;
		case 1004:
			cfg.stall_at = (cs_ns_t)(strtod(optarg, NULL) * 1e3);
			break;
		case 1005:
			cfg.deadline = (cs_ns_t)(strtod(optarg, NULL) * 1e3);
			if (!cfg.deadline)
				goto bad;
			cfg.member = true;
			break;
		case 1006:
			cfg.show_diag = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 1007:
			cfg.grow = true;
			cfg.member = true;
			break;
		case 1008:
			cfg.member = true;
			break;
		case 1009:
			cfg.mp.hb_interval =
				(uint64_t)(strtod(optarg, NULL) * 1e6);
			break;
		case 1010:
			cfg.mp.fail_timeout =
				(uint64_t)(strtod(optarg, NULL) * 1e6);
			break;
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
	    ((kind == CS_COLL_REDUCE_SCATTER || kind == CS_COLL_ALL_GATHER)
		     ? cfg.ranks
		     : 1);
	if (cfg.random_data && !cs_td_eps(cfg.dtype)) {
		fprintf(stderr, "sim %s: --data random needs a floating type\n",
			name);
		return 2;
	}
	if (cfg.bytes % v) {
		fprintf(stderr,
			"sim %s: --bytes must be a multiple of %" PRIu64 "\n",
			name, v);
		return 2;
	}
	if (cfg.member && sc_member_check(&cfg, name))
		return 2;
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

/* SPDX-License-Identifier: MIT */
/*
 * collstack sim allreduce | reduce-scatter | all-gather | broadcast over
 * the transport core (sim/coll.h).
 *
 * Every simulated node runs one struct cs_tp, as collstackd's lcore does:
 * frames in through cs_tp_rx(), time through cs_tp_poll(), frames out
 * through the io callbacks onto the simulated NIC. The operation is the
 * ring engine (collectives/ring.h) posted to the core as group 1, op id 1
 * (cs_coll_flow_ops). Sessions, ACK/SACK, retransmission, pacing and
 * routing are the core's; this file only builds the topology, posts,
 * verifies and counts.
 *
 * Topology: a ring of point-to-point links (rank r <-> r+1), each
 * direction --link-gbps with --delay-us, seeded loss, duplication and
 * reordering at the far end; a switch (host -> switch -> host is one
 * --delay-us) when the engine runs a direct exchange.
 *
 * Membership (cfg->member): the ranks and one coordinator node sit on a
 * switch. The coordinator node runs the real coordinator (struct
 * cs_coord, control/boot.c) and every rank the real member (struct
 * cs_boot_member): the join handshake with the job token, the table, the
 * heartbeats (cs_boot_member_poll()), failure detection
 * (cs_coord_on_timer() at cs_coord_next_deadline()) and the views. Their
 * messages are encoded with cs_boot_encode() and carried, as collstackd
 * carries them over TCP, by a byte stream per member (struct sco_stream:
 * in-order delivery, cumulative ACK, go-back-N after rel.rto_min) in
 * CS_PKT_CTRL frames on the same lossy links as the data. A rank posts
 * its operation when it holds the table; a view that names a lost rank is
 * cs_tp_peer_lost() on the rank's core (its operation ends with
 * CS_ERR_PEER_LOST naming that rank); with --reform the survivors replace
 * the core for the new epoch (as collstackd does on a new view, carrying
 * the RTT estimates over: cs_tp_seed_rtt()) and run the next allreduce;
 * with --grow a node joins after the group formed
 * (cs_coord_allow_growth()) and is admitted once every member finished
 * the first operation (cs_coord_admit_joining(): the scenario decides
 * where the operation boundary is, as the trainers would). A stalled rank
 * (--stall-rank) stops its data path but keeps heartbeating: only the
 * operation deadline catches it, and every other rank's CS_ERR_TIMEOUT
 * names what it waited for (cs_coll_abort_wait()).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll_data.h"
#include "control/boot.h"
#include "sim/coll.h"
#include "sim/sim.h"

#define SCO_MAX_VIEWS 4
/* the first operation, the one after a view change, and (a loss, then a
 * join: --fail-rank --reform --grow) the one after the next */
#define SCO_OPS 3
#define SCO_GROUP 1
#define SCO_TOKEN "collstack-sim"
#define SCO_STREAM_WIN (64u << 10) /* bytes in flight per control stream */

/* A group view: epoch and members (node ids, in rank order). */
struct sco_view {
	uint32_t epoch, n;
	uint32_t *node; /* node[group rank] */
};

/*
 * One direction pair of a control connection (member <-> coordinator):
 * a byte stream of encoded boot messages. Segments carry their stream
 * offset in h.offset, every frame acknowledges in h.ack (the next byte
 * expected); a segment that is not the next one is dropped and
 * re-acknowledged, and the sender goes back to its first unacknowledged
 * byte when nothing was acknowledged for rel.rto_min.
 */
struct sco_stream {
	uint32_t self, peer; /* nodes */
	uint8_t *tx; /* bytes from offset @base on */
	size_t tx_len, tx_cap;
	uint64_t base, una, nxt;
	cs_ns_t rto_at;
	uint8_t *rx; /* received in order, not yet parsed */
	size_t rx_len, rx_cap;
	uint64_t rcv;
	bool ack_due; /* bytes arrived: acknowledge (on data if any goes) */
	bool closed;
};

struct sco;

struct sco_node {
	struct sco *s;
	uint32_t id;
	struct cs_tp *tp;
	struct cs_coll *op;
	uint8_t *send, *recv;
	const struct sco_view *view; /* the view the operation runs in */
	uint32_t opno; /* 0: none yet */
	cs_ns_t op_start, ready_at;
	bool ready, done;
	uint64_t frames, frame_bytes;
	struct cs_tp_stats old; /* summed over replaced cores */
	/* membership */
	struct cs_boot_member *bm;
	struct sco_stream st;
	bool coord_lost;
	int status[SCO_OPS + 1];
	uint32_t culprit[SCO_OPS + 1]; /* node */
	cs_ns_t report_at[SCO_OPS + 1];
	bool reported[SCO_OPS + 1];
	bool has_wait;
	struct cs_coll_wait wait;
	char diag[200];
	uint32_t seen_epoch; /* the last epoch its member applied */
};

struct sco {
	const struct cs_simcoll_cfg *cfg;
	struct cs_sim *sim;
	struct sco_node *nd;
	uint32_t n, nnodes, ndone;
	size_t count, esz;
	struct cs_flow_ops ops; /* cs_coll_flow_ops, rebuild checked */
	uint64_t violations, stale_checked;
	char why[200];
	/* membership */
	uint32_t coord; /* its node */
	struct cs_coord co;
	struct sco_stream *cst; /* per member node: the coordinator's end */
	uint32_t joiner; /* --grow: the node that joins, or NONE */
	bool joiner_open, boundary;
	uint8_t *enc; /* CS_BOOT_MAX_MSG */
	struct cs_node_addr *tbl; /* decode room */
	uint32_t *lost; /* decode room */
	struct sco_view views[SCO_MAX_VIEWS];
	uint32_t nviews;
	cs_ns_t formed_at, fail_abs, stall_abs, declared_at;
	uint32_t reports[SCO_OPS + 1], finished[SCO_OPS + 1];
	cs_ns_t t0[SCO_OPS + 1], t1[SCO_OPS + 1];
	double *want1; /* --grow: op 1's result, checked at its end */
	uint64_t wrong1, injected;
	/* per epoch: when the coordinator moved to it, when the last member
	 * applied it, how many did (a view settles) */
	cs_ns_t issued_at[SCO_MAX_VIEWS + 2], applied_at[SCO_MAX_VIEWS + 2];
	uint32_t applied[SCO_MAX_VIEWS + 2];
	uint32_t co_epoch;
	char first1[160];
};

/* The rebuild check below needs the run; the simulator is one thread. */
static struct sco *sco_cur;

static void sco_violation(struct sco *s, const char *fmt, uint32_t a,
			  uint64_t b)
{
	if (!s->violations++)
		snprintf(s->why, sizeof(s->why), fmt, a, b);
	cs_sim_stop(s->sim);
}

static bool sco_stalled(const struct sco_node *nd, cs_ns_t now)
{
	const struct cs_simcoll_cfg *c = nd->s->cfg;

	return c->stall_rank == (int64_t)nd->id && nd->s->stall_abs &&
	       now >= nd->s->stall_abs;
}

/* ---- data ------------------------------------------------------------- */

static size_t sco_send_elems(const struct sco *s)
{
	return s->cfg->kind == CS_COLL_REDUCE_SCATTER ? s->n * s->count
						      : s->count;
}

static size_t sco_recv_elems(const struct sco *s)
{
	return s->cfg->kind == CS_COLL_ALL_GATHER ? s->n * s->count : s->count;
}

static uint64_t sco_in_index(const struct sco *s, uint32_t r, size_t x)
{
	return s->cfg->kind == CS_COLL_ALL_GATHER ? (uint64_t)r * s->count + x
						  : x;
}

/* Rank r's input element for logical index i, as the dtype holds it. */
static double sco_value(const struct sco *s, uint32_t r, uint64_t i)
{
	const struct cs_simcoll_cfg *c = s->cfg;
	uint8_t tmp[8];

	if (!c->random_data)
		return cs_td_value(c->dtype, c->op, s->n, c->seed, r, i);
	cs_td_store(c->dtype, tmp, 0, cs_td_random(c->op, c->seed, r, i));
	return cs_td_load(c->dtype, tmp, 0);
}

static int sco_alloc_data(struct sco *s, struct sco_node *nd)
{
	const struct cs_simcoll_cfg *cfg = s->cfg;
	size_t ns = sco_send_elems(s), nr = sco_recv_elems(s), es = s->esz;
	uint32_t r = nd->id;

	if (cfg->nodata)
		return 0;
	if (!cfg->oop) {
		/* in place: one buffer per rank */
		nd->recv = malloc((ns > nr ? ns : nr) * es + 1);
		if (!nd->recv)
			return -ENOMEM;
		nd->send = nd->recv;
		if (cfg->kind == CS_COLL_REDUCE_SCATTER)
			nd->recv = nd->send + r * s->count * es;
		else if (cfg->kind == CS_COLL_ALL_GATHER)
			nd->send = nd->recv + r * s->count * es;
	} else {
		nd->send = malloc(ns * es + 1);
		nd->recv = malloc(nr * es + 1);
		if (!nd->send || !nd->recv)
			return -ENOMEM;
		memset(nd->recv, 0x5a, nr * es);
	}
	if (cfg->kind == CS_COLL_BROADCAST && r != cfg->root)
		return 0;
	if (r >= s->n)
		return 0; /* the joiner: filled for the operation it joins */
	for (size_t x = 0; x < ns; x++)
		cs_td_store(cfg->dtype, nd->send, x,
			    sco_value(s, r, sco_in_index(s, r, x)));
	return 0;
}

static void sco_free_data(struct sco *s, struct sco_node *nd)
{
	const struct cs_simcoll_cfg *cfg = s->cfg;

	if (cfg->nodata)
		return;
	if (cfg->oop) {
		free(nd->send);
		free(nd->recv);
	} else if (cfg->kind == CS_COLL_REDUCE_SCATTER) {
		free(nd->send);
	} else {
		free(nd->recv);
	}
}

/*
 * Random floats: the reduction in double, and how far a correctly
 * computed result in the element type may be from it (each of the n-1
 * roundings errs by at most eps times the partial result).
 */
static double sco_reduce_ref(const struct sco *s, uint64_t i, double *tol)
{
	const struct cs_simcoll_cfg *c = s->cfg;
	double acc = sco_value(s, 0, i), mag = fabs(acc);

	for (uint32_t r = 1; r < s->n; r++) {
		double v = sco_value(s, r, i);

		acc = cs_td_red(c->op, acc, v);
		mag += fabs(v);
	}
	if (c->op == CS_PROD)
		mag = fabs(acc) * 2;
	*tol = c->op == CS_MIN || c->op == CS_MAX
		       ? 0
		       : (s->n + 1) * cs_td_eps(c->dtype) * mag;
	return acc;
}

/* Element x of rank r's result must be this (within *tol). */
static double sco_expect(const struct sco *s, uint32_t r, size_t x, double *tol)
{
	const struct cs_simcoll_cfg *c = s->cfg;
	uint64_t i = x;

	*tol = 0;
	switch (c->kind) {
	case CS_COLL_ALLREDUCE:
	case CS_COLL_REDUCE_SCATTER:
		if (c->kind == CS_COLL_REDUCE_SCATTER)
			i = (uint64_t)r * s->count + x;
		if (c->random_data)
			return sco_reduce_ref(s, i, tol);
		return cs_td_expect(c->dtype, c->op, s->n, c->seed, i);
	case CS_COLL_ALL_GATHER:
		return sco_value(s, (uint32_t)(x / s->count), x);
	default:
		return sco_value(s, c->root, x);
	}
}

/* Count wrong elements; describe the first. */
static uint64_t sco_verify(struct sco *s, char *first, size_t flen)
{
	size_t nr = sco_recv_elems(s);
	uint64_t wrong = 0;
	bool same_for_all = s->cfg->kind == CS_COLL_ALLREDUCE ||
			    s->cfg->kind == CS_COLL_ALL_GATHER ||
			    s->cfg->kind == CS_COLL_BROADCAST;

	for (size_t x = 0; x < nr; x++) {
		double want = 0, tol = 0;

		for (uint32_t r = 0; r < s->n; r++) {
			double got;

			if (r == 0 || !same_for_all)
				want = sco_expect(s, r, x, &tol);
			got = cs_td_load(s->cfg->dtype, s->nd[r].recv, x);
			if (!(fabs(got - want) <= tol) && !wrong++)
				snprintf(first, flen,
					 "rank %u elem %zu got %.9g want %.9g"
					 " (tolerance %.3g)",
					 r, x, got, want, tol);
			/* the same bits everywhere, not just close */
			if (same_for_all && r &&
			    memcmp(s->nd[r].recv + x * s->esz,
				   s->nd[0].recv + x * s->esz, s->esz) &&
			    !wrong++)
				snprintf(first, flen,
					 "rank %u elem %zu not bit-identical "
					 "to rank 0",
					 r, x);
		}
	}
	return wrong;
}

/* Membership: rank g of an n-rank view, op @o's input (exact data). */
static void sco_fill(struct sco *s, struct sco_node *nd, uint32_t n, uint32_t g,
		     uint32_t o)
{
	const struct cs_simcoll_cfg *cfg = s->cfg;

	if (cfg->nodata)
		return;
	for (size_t x = 0; x < s->count; x++)
		cs_td_store(cfg->dtype, nd->send, x,
			    cs_td_value(cfg->dtype, cfg->op, n,
					cfg->seed + o - 1, g, x));
}

/* Check every rank's result of op @o in view @v. */
static uint64_t sco_verify_view(struct sco *s, const struct sco_view *v,
				uint32_t o, char *first, size_t flen)
{
	const struct cs_simcoll_cfg *cfg = s->cfg;
	uint64_t wrong = 0, seed = cfg->seed + o - 1;
	const uint8_t *r0 = s->nd[v->node[0]].recv;

	if (cfg->nodata)
		return 0;
	for (size_t x = 0; x < s->count; x++) {
		double want = cs_td_expect(cfg->dtype, cfg->op, v->n, seed, x);

		for (uint32_t g = 0; g < v->n; g++) {
			const uint8_t *b = s->nd[v->node[g]].recv;
			double got = cs_td_load(cfg->dtype, b, x);

			if ((got != want ||
			     memcmp(b + x * s->esz, r0 + x * s->esz, s->esz)) &&
			    !wrong++)
				snprintf(first, flen,
					 "rank %u (node %u) elem "
					 "%zu got %.9g want %.9g",
					 g, v->node[g], x, got, want);
		}
	}
	return wrong;
}

/* ---- the engine, as the core sees it ---------------------------------- */

/*
 * The ring engine's own entry points, with one check on rebuild: when the
 * engine says the receiver provably holds a frame (-ESTALE: the core then
 * sends a filler instead of bytes that may have been overwritten), the
 * receiving rank's engine must in fact have it.
 */
static int sco_rebuild(void *f, uint64_t cookie, struct cs_flow_tx *out)
{
	struct sco *s = sco_cur;
	int ret = cs_coll_flow_ops.rebuild(f, cookie, out);
	const struct sco_node *me = NULL, *peer;

	if (ret != -ESTALE || !s)
		return ret;
	for (uint32_t i = 0; i < s->nnodes && !me; i++)
		if (s->nd[i].op == f)
			me = &s->nd[i];
	if (!me || out->dst >= me->view->n)
		return ret;
	peer = &s->nd[me->view->node[out->dst]];
	s->stale_checked++;
	if (peer->view == me->view && peer->op &&
	    !cs_coll_rx_has(peer->op, out->hdr.step, out->hdr.channel,
			    out->hdr.offset))
		sco_violation(s,
			      "rank %u: stale retx of an undelivered packet"
			      " (cookie %" PRIx64 ")",
			      me->id, cookie);
	return ret;
}

/* ---- the control stream (membership) ---------------------------------- */

static uint32_t sco_mss(const struct sco *s)
{
	return s->cfg->mtu - 20 - 8 - CS_PROTO_HDR_WIRE_LEN;
}

static void sco_ctl_hdr(struct cs_pkt_hdr *h, uint8_t type, uint32_t src,
			uint32_t epoch)
{
	memset(h, 0, sizeof(*h));
	h->version = CS_PROTO_VERSION;
	h->type = type;
	h->src = (uint16_t)src;
	h->epoch = epoch;
}

static void sco_stream_init(struct sco_stream *st, uint32_t self, uint32_t peer)
{
	memset(st, 0, sizeof(*st));
	st->self = self;
	st->peer = peer;
	st->rto_at = CS_NS_NEVER;
}

static void sco_stream_fini(struct sco_stream *st)
{
	free(st->tx);
	free(st->rx);
}

static void sco_stream_frame(struct sco *s, struct sco_stream *st, uint64_t off,
			     uint32_t len)
{
	struct cs_pkt_hdr h;

	sco_ctl_hdr(&h, CS_PKT_CTRL, st->self, 0);
	h.flags = CS_PKT_F_ACK;
	h.ack = (uint32_t)st->rcv;
	h.offset = off;
	st->ack_due = false;
	(void)cs_sim_send(s->sim, st->self, st->peer, &h,
			  len ? st->tx + (off - st->base) : NULL, len);
}

/* A pure ACK, unless data sent since the bytes arrived carried it. */
static void sco_stream_ack(struct sco *s, struct sco_stream *st)
{
	if (st->ack_due && !st->closed)
		sco_stream_frame(s, st, st->nxt, 0);
	st->ack_due = false;
}

/* Send what the window allows. */
static void sco_stream_push(struct sco *s, struct sco_stream *st, cs_ns_t now)
{
	uint64_t end = st->base + st->tx_len;

	if (st->closed)
		return;
	while (st->nxt < end && st->nxt - st->una < SCO_STREAM_WIN) {
		uint32_t len =
			(uint32_t)CS_MIN(end - st->nxt, (uint64_t)sco_mss(s));

		sco_stream_frame(s, st, st->nxt, len);
		st->nxt += len;
		if (st->rto_at == CS_NS_NEVER)
			st->rto_at = now + s->cfg->xp.rel.rto_min;
	}
}

static void sco_stream_send(struct sco *s, struct sco_stream *st,
			    const struct cs_boot_msg *m, cs_ns_t now)
{
	int len = cs_boot_encode(m, s->enc, CS_BOOT_MAX_MSG);

	if (len < 0) {
		sco_violation(s,
			      "node %u: cannot encode a boot message (%" PRIu64
			      ")",
			      st->self, (uint64_t)-len);
		return;
	}
	if (st->tx_len + (size_t)len > st->tx_cap) {
		size_t cap = CS_MAX(2 * st->tx_cap, st->tx_len + (size_t)len);
		uint8_t *p = realloc(st->tx, cap);

		if (!p) {
			sco_violation(s, "node %u: out of memory (%" PRIu64 ")",
				      st->self, (uint64_t)cap);
			return;
		}
		st->tx = p;
		st->tx_cap = cap;
	}
	memcpy(st->tx + st->tx_len, s->enc, (size_t)len);
	st->tx_len += (size_t)len;
	sco_stream_push(s, st, now);
}

static void sco_stream_timer(struct sco *s, struct sco_stream *st, cs_ns_t now)
{
	if (st->closed)
		st->rto_at = CS_NS_NEVER; /* nothing is resent any more */
	if (now < st->rto_at)
		return;
	st->rto_at = CS_NS_NEVER;
	st->nxt = st->una; /* go back */
	sco_stream_push(s, st, now);
}

/*
 * A control frame arrived on @st: take its ACK, its bytes if they are the
 * next ones. Returns true when new bytes were appended to st->rx (parse
 * them with sco_stream_next()); the caller acknowledges with
 * sco_stream_ack() once its answers (which carry the ACK) went out.
 */
static bool sco_stream_rx(struct sco *s, struct sco_stream *st,
			  const struct cs_sim_pkt *pkt, cs_ns_t now)
{
	const struct cs_pkt_hdr *h = &pkt->hdr;
	uint64_t ack = h->ack;
	bool grew = false;

	if ((h->flags & CS_PKT_F_ACK) && ack > st->una && ack <= st->nxt) {
		size_t k = (size_t)(ack - st->base);

		memmove(st->tx, st->tx + k, st->tx_len - k);
		st->tx_len -= k;
		st->base = st->una = ack;
		st->rto_at = st->una < st->nxt ? now + s->cfg->xp.rel.rto_min
					       : CS_NS_NEVER;
		sco_stream_push(s, st, now);
	}
	if (!pkt->len || !pkt->data)
		return false;
	if (h->offset == st->rcv) {
		if (st->rx_len + pkt->len > st->rx_cap) {
			size_t cap =
				CS_MAX(2 * st->rx_cap, st->rx_len + pkt->len);
			uint8_t *p = realloc(st->rx, cap);

			if (!p)
				return false; /* dropped: resent */
			st->rx = p;
			st->rx_cap = cap;
		}
		memcpy(st->rx + st->rx_len, pkt->data, pkt->len);
		st->rx_len += pkt->len;
		st->rcv += pkt->len;
		grew = true;
	}
	st->ack_due = true; /* also for a duplicate: its ACK was lost */
	return grew;
}

/* The next complete message in st->rx: 1, 0 (none yet), or an error. */
static int sco_stream_next(struct sco *s, struct sco_stream *st,
			   struct cs_boot_msg *m)
{
	int len;

	memset(m, 0, sizeof(*m));
	m->table = s->tbl;
	m->lost = s->lost;
	m->cap = CS_BOOT_MAX_RANKS;
	len = cs_boot_decode(st->rx, st->rx_len, m);
	if (len <= 0)
		return len;
	memmove(st->rx, st->rx + len, st->rx_len - (size_t)len);
	st->rx_len -= (size_t)len;
	return 1;
}

/* ---- the nodes --------------------------------------------------------- */

static void sco_check_end(struct sco *s);

static void sco_service(struct sco_node *nd, cs_ns_t now)
{
	struct sco *s = nd->s;
	cs_ns_t wake = CS_NS_NEVER;
	struct cs_boot_msg hb;

	if (nd->tp && !sco_stalled(nd, now)) {
		cs_tp_poll(nd->tp, now);
		if (nd->op && !nd->ready && cs_coll_result_ready(nd->op)) {
			nd->ready = true;
			nd->ready_at = now;
		}
		wake = cs_tp_next_deadline(nd->tp, now);
	}
	if (nd->bm) {
		unsigned a = cs_boot_member_poll(nd->bm, now, &hb);

		if (a & CS_BOOT_M_REPLY)
			sco_stream_send(s, &nd->st, &hb, now);
		if (a & CS_BOOT_M_COORD_LOST)
			nd->coord_lost = true;
		sco_stream_timer(s, &nd->st, now);
		wake = CS_MIN(wake, cs_boot_member_deadline(nd->bm));
		wake = CS_MIN(wake, nd->st.rto_at);
	}
	if (wake != CS_NS_NEVER && wake <= now)
		wake = now + 1;
	cs_sim_timer(s->sim, nd->id, wake);
}

static unsigned sco_room(void *owner)
{
	(void)owner;
	return 64;
}

static void sco_xmit(void *owner, uint32_t node, const struct cs_pkt_hdr *h,
		     const void *payload, uint32_t len)
{
	struct sco_node *nd = owner;
	int ret = cs_sim_send(nd->s->sim, nd->id, node, h,
			      nd->s->cfg->nodata ? NULL : payload, len);

	/* other errors are a NIC drop or a dead node: the core recovers */
	if (ret == -EINVAL)
		sco_violation(nd->s,
			      "rank %u: cs_sim_send refused (%" PRIu64 ")",
			      nd->id, len);
	nd->frames++;
	nd->frame_bytes += CS_PROTO_FRAME_OVERHEAD + len;
}

static void sco_report(struct sco_node *nd, int err, uint32_t culprit,
		       cs_ns_t now)
{
	struct sco *s = nd->s;
	uint32_t o = nd->opno;

	nd->status[o] = err;
	nd->culprit[o] = culprit;
	nd->report_at[o] = now;
	nd->reported[o] = true;
	s->reports[o]++;
	sco_check_end(s);
}

/* --grow: the next op overwrites op 1's result, so check it now. */
static void sco_check_op1(struct sco *s, const struct sco_node *nd)
{
	const struct cs_simcoll_cfg *cfg = s->cfg;

	for (size_t x = 0; x < s->count; x++) {
		double got = cs_td_load(cfg->dtype, nd->recv, x);

		if (got != s->want1[x] && !s->wrong1++)
			snprintf(s->first1, sizeof(s->first1),
				 "op 1 node %u elem %zu got %.9g want %.9g",
				 nd->id, x, got, s->want1[x]);
	}
}

/* --grow: the operation after which the joiner is admitted (after a loss:
 * the survivors' re-formed one). */
static uint32_t sco_grow_op(const struct sco *s)
{
	return s->cfg->fail_rank >= 0 ? 2 : 1;
}

static void sco_member_done(struct sco_node *nd, cs_ns_t now)
{
	struct sco *s = nd->s;
	uint32_t o = nd->opno;

	nd->status[o] = 0;
	nd->report_at[o] = now;
	s->finished[o]++;
	if (!s->t0[o] || nd->op_start < s->t0[o])
		s->t0[o] = nd->op_start;
	s->t1[o] = CS_MAX(s->t1[o], nd->ready ? nd->ready_at : now);
	if (s->want1 && o == 1)
		sco_check_op1(s, nd);
	if (s->joiner != CS_SIM_NODE_NONE && o == sco_grow_op(s) &&
	    s->finished[o] == s->n - (o > 1)) {
		/* every member is done: the operation boundary */
		if (o > 1) /* op 3 overwrites the re-formed op's result */
			s->wrong1 = sco_verify_view(s, nd->view, o, s->first1,
						    sizeof(s->first1));
		s->boundary = true;
		cs_sim_timer(s->sim, s->coord, now);
	}
	sco_check_end(s);
}

static void sco_done(void *owner, void *user, int status, uint32_t culprit)
{
	struct sco_node *nd = owner;
	struct sco *s = nd->s;
	cs_ns_t now = cs_sim_now(s->sim);
	uint32_t node = culprit < nd->view->n ? nd->view->node[culprit]
					      : CS_SIM_NODE_NONE;

	(void)user;
	nd->done = true;
	if (!s->cfg->member) {
		if (status) {
			snprintf(s->why, sizeof(s->why),
				 "rank %u: the operation ended with %s "
				 "(rank %d)",
				 nd->id, cs_strerror(status), (int)culprit);
			s->violations++;
			cs_sim_stop(s->sim);
		} else if (++s->ndone == s->n) {
			cs_sim_stop(s->sim);
		}
		return;
	}
	if (!status) {
		sco_member_done(nd, now);
		return;
	}
	if (status == CS_ERR_TIMEOUT) {
		cs_coll_abort_wait(nd->op, &nd->wait);
		nd->has_wait = nd->wait.kind != CS_COLL_WAIT_NONE;
		cs_coll_wait_format(nd->op, &nd->wait, nd->diag,
				    sizeof(nd->diag));
		if (nd->has_wait && nd->wait.peer < nd->view->n)
			node = nd->view->node[nd->wait.peer];
	}
	sco_report(nd, status, node, now);
}

static const struct cs_tp_io sco_io = {
	.tx_room = sco_room,
	.xmit = sco_xmit,
	.done = sco_done,
};

static void sco_stats_add(struct cs_tp_stats *a, const struct cs_tp_stats *b)
{
	a->rx_stale_epoch += b->rx_stale_epoch;
	a->rx_future_epoch += b->rx_future_epoch;
	a->rel_retx += b->rel_retx;
	a->rel_timeouts += b->rel_timeouts;
	a->tx_fillers += b->tx_fillers;
	a->tx_acks += b->tx_acks;
}

/* Counters of @nd's cores, the current one included. */
static void sco_node_stats(const struct sco_node *nd, struct cs_tp_stats *st)
{
	*st = nd->old;
	if (nd->tp) {
		struct cs_tp_stats cur;

		cs_tp_get_stats(nd->tp, &cur);
		sco_stats_add(st, &cur);
	}
}

/*
 * Start operation @o as a member of view @v: a core for the view's epoch
 * (replacing the old one, whose RTT estimates it starts from), group 1 =
 * the view, the engine posted as op id @o.
 */
static int sco_start(struct sco_node *nd, const struct sco_view *v, uint32_t o,
		     cs_ns_t now)
{
	struct sco *s = nd->s;
	const struct cs_simcoll_cfg *cfg = s->cfg;
	struct cs_coll_params p;
	struct cs_tp *tp, *old = nd->tp;
	cs_ns_t srtt, var;
	uint32_t g;
	int ret;

	ret = cs_tp_create(&cfg->tp, &cfg->xp, &sco_io, nd, nd->id, v->epoch,
			   &tp);
	if (ret)
		return ret;
	ret = cs_tp_group_add(tp, SCO_GROUP, v->node, v->n, &g);
	if (ret) {
		cs_tp_destroy(tp);
		return ret;
	}
	for (uint32_t r = 0; old && r < v->n; r++)
		if (v->node[r] != nd->id &&
		    !cs_tp_peer_rtt(old, v->node[r], &srtt, &var))
			cs_tp_seed_rtt(tp, v->node[r], srtt, var);
	if (old) {
		struct cs_tp_stats st;

		cs_tp_get_stats(old, &st);
		sco_stats_add(&nd->old, &st);
		cs_tp_destroy(old);
	}
	nd->tp = tp;
	cs_coll_free(nd->op);
	nd->op = NULL;
	if (o > 1)
		sco_fill(s, nd, v->n, g, o);
	cs_coll_params_default(&p, NULL);
	cs_coll_params_op(&p, cfg->kind, v->n, g, cfg->root, nd->send, nd->recv,
			  s->count, cfg->dtype, cfg->op);
	if (cfg->channels)
		p.channels = cfg->channels;
	if (cfg->chunk)
		p.chunk = cfg->chunk;
	if (cfg->window)
		p.window = cfg->window;
	if (cfg->direct_max >= 0)
		p.direct_max = (uint64_t)cfg->direct_max;
	p.mtu_payload = sco_mss(s);
	p.flags = (cfg->nodata ? CS_COLL_F_NODATA : 0) |
		  (cfg->alt_dir ? CS_COLL_F_ALT_DIR : 0);
	p.group = SCO_GROUP;
	p.epoch = v->epoch;
	p.op_id = o;
	p.start = now;
	if (cfg->deadline)
		p.deadline = cfg->deadline;
	ret = cs_coll_init(&p, &nd->op);
	if (ret)
		return ret;
	nd->view = v;
	nd->opno = o;
	nd->op_start = now;
	nd->ready = nd->done = false;
	return cs_tp_post(tp, SCO_GROUP, o, &s->ops, nd->op,
			  (uint64_t)s->count * s->esz, nd, now);
}

static void sco_rx(struct cs_sim *sim, void *ctx, const struct cs_sim_pkt *pkt,
		   cs_ns_t now);

static void sco_timer(struct cs_sim *sim, void *ctx, cs_ns_t now)
{
	(void)sim;
	sco_service(ctx, now);
}

static const struct cs_sim_node_ops sco_node_ops = {
	.rx = sco_rx,
	.timer = sco_timer,
};

/* ---- membership: the member side -------------------------------------- */

/* The view of @nd's table (its alive members in rank order), recorded
 * once per epoch; every member must derive the same one. */
static const struct sco_view *sco_view_of(struct sco_node *nd)
{
	struct sco *s = nd->s;
	const struct cs_boot_member *b = nd->bm;
	struct sco_view *v = NULL;
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->nviews; i++)
		if (s->views[i].epoch == b->epoch)
			v = &s->views[i];
	for (uint32_t r = 0; r < b->world; r++)
		n += b->table[r].state == CS_MEMBER_ALIVE;
	if (v) {
		uint32_t k = 0;

		for (uint32_t r = 0; r < b->world; r++)
			if (b->table[r].state == CS_MEMBER_ALIVE &&
			    (k >= v->n || v->node[k++] != r))
				k = v->n + 1;
		if (k != v->n || n != v->n) {
			sco_violation(s,
				      "node %u: its view of epoch %" PRIu64
				      " differs",
				      nd->id, b->epoch);
			return NULL;
		}
		return v;
	}
	if (s->nviews == SCO_MAX_VIEWS) {
		sco_violation(s, "node %u: no room for view %" PRIu64, nd->id,
			      b->epoch);
		return NULL;
	}
	v = &s->views[s->nviews];
	v->node = calloc(n ? n : 1, sizeof(*v->node));
	if (!v->node) {
		sco_violation(s, "node %u: out of memory (%" PRIu64 ")", nd->id,
			      n);
		return NULL;
	}
	s->nviews++;
	v->epoch = b->epoch;
	for (uint32_t r = 0; r < b->world; r++)
		if (b->table[r].state == CS_MEMBER_ALIVE)
			v->node[v->n++] = r; /* ranks are node ids */
	return v;
}

/* Run the next operation in the view @nd's table makes, if it is a
 * member: op 1 in the first view, op 2 in the second. */
static void sco_member_start(struct sco_node *nd, cs_ns_t now)
{
	const struct sco_view *v = sco_view_of(nd);
	uint32_t o;
	int ret;

	if (!v)
		return;
	o = (uint32_t)(v - nd->s->views) + 1;
	if (o > SCO_OPS || o <= nd->opno)
		return;
	for (uint32_t g = 0; g < v->n; g++) {
		if (v->node[g] != nd->id)
			continue;
		ret = sco_start(nd, v, o, now);
		if (ret)
			sco_violation(nd->s,
				      "rank %u: cannot start op %" PRIu64,
				      nd->id, o);
		return;
	}
}

/* A view naming lost ranks: their operation ends, the survivors may run
 * the next one in the new epoch. */
static void sco_member_view(struct sco_node *nd, const uint32_t *lost,
			    unsigned nl, cs_ns_t now)
{
	const struct cs_simcoll_cfg *cfg = nd->s->cfg;

	if (sco_stalled(nd, now) || !nd->tp)
		return;
	for (unsigned i = 0; i < nl; i++)
		cs_tp_peer_lost(nd->tp, lost[i]);
	cs_tp_poll(nd->tp, now); /* the operation's io->done */
	if (cfg->reform && nd->opno == 1)
		sco_member_start(nd, now);
}

static void sco_member_msgs(struct sco_node *nd, cs_ns_t now)
{
	struct sco *s = nd->s;
	struct cs_boot_msg m, reply;
	uint32_t lost[64];
	unsigned nl;
	int k, r;

	while ((k = sco_stream_next(s, &nd->st, &m)) > 0) {
		r = cs_boot_member_on_msg(nd->bm, &m, now, &reply, lost,
					  CS_ARRAY_SIZE(lost), &nl);
		if (r < 0) {
			snprintf(s->why, sizeof(s->why),
				 "node %u: bootstrap failed: %s", nd->id,
				 nd->bm->error);
			s->violations++;
			cs_sim_stop(s->sim);
			return;
		}
		if (nd->bm->epoch != nd->seen_epoch &&
		    nd->bm->epoch < CS_ARRAY_SIZE(s->applied)) {
			nd->seen_epoch = nd->bm->epoch;
			s->applied[nd->seen_epoch]++;
			s->applied_at[nd->seen_epoch] = now;
		}
		if (r & CS_BOOT_M_REPLY)
			sco_stream_send(s, &nd->st, &reply, now);
		if ((r & CS_BOOT_M_TABLE) && !sco_stalled(nd, now))
			sco_member_start(nd, now);
		if (r & CS_BOOT_M_VIEW)
			sco_member_view(nd, lost, nl, now);
	}
	if (k < 0)
		sco_violation(s,
			      "node %u: malformed control stream (%" PRIu64 ")",
			      nd->id, (uint64_t)-k);
}

static void sco_rx(struct cs_sim *sim, void *ctx, const struct cs_sim_pkt *pkt,
		   cs_ns_t now)
{
	struct sco_node *nd = ctx;
	struct sco *s = nd->s;

	(void)sim;
	if (s->cfg->member && pkt->src == s->coord) {
		if (sco_stream_rx(s, &nd->st, pkt, now))
			sco_member_msgs(nd, now);
		sco_stream_ack(s, &nd->st);
	} else if (nd->tp && !sco_stalled(nd, now)) {
		cs_tp_rx(nd->tp, pkt->src, &pkt->hdr, pkt->data, now);
	}
	sco_service(nd, now);
}

/* ---- membership: the coordinator node ---------------------------------- */

/* Every survivor is done with op 1 (completed or reported): after the
 * loss was declared nothing can change any more. */
static bool sco_survivors_done(const struct sco *s)
{
	for (uint32_t r = 0; r < s->n; r++)
		if (r != (uint32_t)s->cfg->fail_rank && !s->nd[r].reported[1] &&
		    s->nd[r].status[1] != 0)
			return false;
	return true;
}

static void co_send(void *ctx, uint32_t conn, const struct cs_boot_msg *m)
{
	struct sco *s = ctx;

	sco_stream_send(s, &s->cst[conn], m, cs_sim_now(s->sim));
}

static void co_close(void *ctx, uint32_t conn)
{
	struct sco *s = ctx;

	s->cst[conn].closed = true;
	s->cst[conn].rto_at = CS_NS_NEVER;
}

static void co_lost(void *ctx, uint32_t rank, uint32_t epoch)
{
	struct sco *s = ctx;

	(void)rank;
	(void)epoch;
	if (!s->declared_at)
		s->declared_at = cs_sim_now(s->sim);
	sco_check_end(s);
}

static struct cs_coord_out sco_co_out(struct sco *s)
{
	struct cs_coord_out o = { co_send, co_close, co_lost, s };

	return o;
}

/* The group formed: the scenario's clock starts; the joiner connects. */
static void sco_co_formed(struct sco *s, cs_ns_t now)
{
	const struct cs_simcoll_cfg *cfg = s->cfg;
	struct cs_coord_out o = sco_co_out(s);

	if (s->formed_at || !s->co.complete)
		return;
	s->formed_at = now;
	if (cfg->fail_rank >= 0) {
		s->fail_abs = now + cfg->fail_at;
		if (cs_sim_node_fail_at(s->sim, (uint32_t)cfg->fail_rank,
					s->fail_abs))
			sco_violation(s, "cannot fail node %u (%" PRIu64 ")",
				      (uint32_t)cfg->fail_rank, 0);
	}
	if (cfg->stall_rank >= 0)
		s->stall_abs = CS_MAX(now + cfg->stall_at, (cs_ns_t)1);
	if (s->joiner != CS_SIM_NODE_NONE && !s->joiner_open) {
		s->joiner_open = true;
		cs_coord_on_open(&s->co, s->joiner, now, &o);
	}
}

/* The coordinator moved to a new epoch (a view goes out): when. */
static void sco_co_epoch(struct sco *s, cs_ns_t now)
{
	uint32_t e = s->co.complete ? (uint32_t)s->co.fd.epoch : 0;

	if (e != s->co_epoch && e < CS_ARRAY_SIZE(s->issued_at)) {
		s->co_epoch = e;
		s->issued_at[e] = now;
	}
}

static void sco_co_arm(struct sco *s)
{
	cs_ns_t t = cs_coord_next_deadline(&s->co);

	for (uint32_t i = 0; i < s->nnodes; i++)
		t = CS_MIN(t, s->cst[i].rto_at);
	cs_sim_timer(s->sim, s->coord, t);
}

static void sco_co_rx(struct cs_sim *sim, void *ctx,
		      const struct cs_sim_pkt *pkt, cs_ns_t now)
{
	struct sco *s = ctx;
	struct cs_coord_out o = sco_co_out(s);
	struct sco_stream *st;
	struct cs_boot_msg m;
	int k = 0;

	(void)sim;
	if (pkt->src >= s->nnodes)
		return;
	st = &s->cst[pkt->src];
	if (sco_stream_rx(s, st, pkt, now)) {
		while (!st->closed && (k = sco_stream_next(s, st, &m)) > 0)
			cs_coord_on_msg(&s->co, pkt->src, &m, now, &o);
		if (!st->closed && k < 0)
			cs_coord_on_close(&s->co, pkt->src, now, &o);
	}
	sco_stream_ack(s, st);
	sco_co_formed(s, now);
	sco_co_epoch(s, now);
	sco_co_arm(s);
}

static void sco_co_timer(struct cs_sim *sim, void *ctx, cs_ns_t now)
{
	struct sco *s = ctx;
	struct cs_coord_out o = sco_co_out(s);

	(void)sim;
	cs_coord_on_timer(&s->co, now, &o);
	if (s->boundary) {
		s->boundary = false;
		cs_coord_admit_joining(&s->co, now, &o);
	}
	for (uint32_t i = 0; i < s->nnodes; i++)
		sco_stream_timer(s, &s->cst[i], now);
	sco_co_epoch(s, now);
	sco_co_arm(s);
}

static const struct cs_sim_node_ops sco_co_ops = {
	.rx = sco_co_rx,
	.timer = sco_co_timer,
};

/* One packet of the old epoch, as a delayed frame of the old group would
 * arrive: between two survivors already in the new epoch. It is handed to
 * the receiver's core directly, as if it had just come off the wire (on
 * a lossy link the wire might drop it, and the check would prove
 * nothing). */
static void sco_inject_stale(struct sco *s)
{
	const struct sco_view *v = &s->views[s->nviews - 1];
	struct cs_pkt_hdr h;

	for (uint32_t g = 0; g + 1 < v->n; g++) {
		uint32_t a = v->node[g], b = v->node[g + 1];

		if (s->nd[b].view != v)
			continue;
		sco_ctl_hdr(&h, CS_PKT_DATA, a, v->epoch - 1);
		h.group = SCO_GROUP;
		h.op = 1;
		h.flags = CS_PKT_F_RETX;
		cs_tp_rx(s->nd[b].tp, a, &h, NULL, cs_sim_now(s->sim));
		s->injected++;
		return;
	}
}

static void sco_check_end(struct sco *s)
{
	const struct cs_simcoll_cfg *cfg = s->cfg;
	bool end;

	if (cfg->stall_rank >= 0) {
		end = s->reports[1] >= s->n - 1;
	} else if (cfg->fail_rank >= 0) {
		if (cfg->reform && !s->injected && s->reports[1] >= s->n - 1)
			sco_inject_stale(s);
		end = cfg->reform && cfg->grow ? s->finished[3] >= s->n
		      : cfg->reform	       ? s->finished[2] >= s->n - 1
					       : s->reports[1] >= s->n - 1 ||
					      (s->declared_at &&
					       sco_survivors_done(s));
	} else if (cfg->grow) {
		end = s->finished[2] >= s->n + 1;
	} else {
		end = s->finished[1] + s->reports[1] >= s->n;
	}
	if (end)
		cs_sim_stop(s->sim);
}

/* ---- set-up ------------------------------------------------------------ */

/* Will the engine run the operation as a direct exchange? */
static bool sco_direct(const struct sco *s)
{
	const struct cs_simcoll_cfg *cfg = s->cfg;
	struct cs_coll_params p;

	cs_coll_params_default(&p, NULL);
	if (cfg->direct_max >= 0)
		p.direct_max = (uint64_t)cfg->direct_max;
	p.kind = cfg->kind;
	p.nranks = s->n;
	p.count = s->count;
	p.dtype = cfg->dtype;
	return cs_coll_is_direct(&p);
}

static struct cs_sim_link_params sco_link(const struct cs_simcoll_cfg *cfg,
					  double delay_us)
{
	return (struct cs_sim_link_params){
		.gbps = cfg->gbps,
		.delay_ns = (uint64_t)(delay_us * 1000 + 0.5),
		.loss = cfg->loss,
		.dup = cfg->dup,
		.reorder = cfg->reorder,
		.reorder_ns = cfg->reorder_ns,
	};
}

/* Hosts on one switch: host -> switch -> host is one link delay. */
static int sco_star(struct sco *s, uint32_t n, bool coord)
{
	struct cs_sim_link_params lp = sco_link(s->cfg, s->cfg->delay_us / 2);
	uint32_t *hosts = calloc(n + 1, sizeof(*hosts));
	int ret;

	if (!hosts)
		return -ENOMEM;
	for (uint32_t r = 0; r < n; r++)
		hosts[r] = r;
	if (coord)
		hosts[n++] = s->coord;
	ret = cs_sim_star(s->sim, hosts, n, &lp, &lp, NULL);
	free(hosts);
	return ret;
}

static int sco_member_setup(struct sco *s)
{
	const struct cs_simcoll_cfg *cfg = s->cfg;
	struct cs_coord_out o = sco_co_out(s);
	struct cs_node_addr self;
	int ret;

	ret = cs_sim_node_add(s->sim, &sco_co_ops, s, &s->coord);
	if (ret)
		return ret;
	s->enc = malloc(CS_BOOT_MAX_MSG);
	s->tbl = calloc(CS_BOOT_MAX_RANKS, sizeof(*s->tbl));
	s->lost = calloc(CS_BOOT_MAX_RANKS, sizeof(*s->lost));
	s->cst = calloc(s->nnodes, sizeof(*s->cst));
	if (!s->enc || !s->tbl || !s->lost || !s->cst)
		return -ENOMEM;
	ret = cs_coord_init(&s->co, SCO_TOKEN, s->n, s->nnodes, &cfg->mp,
			    cfg->seed);
	if (!ret && cfg->grow)
		ret = cs_coord_allow_growth(&s->co, 1);
	if (ret)
		return ret;
	for (uint32_t r = 0; r < s->nnodes; r++) {
		struct sco_node *nd = &s->nd[r];

		nd->bm = malloc(sizeof(*nd->bm));
		if (!nd->bm)
			return -ENOMEM;
		memset(&self, 0, sizeof(self));
		self.ip = 0x0a000001 + r; /* what the table carries */
		self.udp_port = 4791;
		self.queues = 1;
		ret = cs_boot_member_init(nd->bm, SCO_TOKEN, (int32_t)r, &self,
					  &cfg->mp, cfg->seed * 131 + r + 1);
		if (ret)
			return ret;
		sco_stream_init(&nd->st, r, s->coord);
		sco_stream_init(&s->cst[r], s->coord, r);
	}
	ret = sco_star(s, s->nnodes, true);
	if (ret)
		return ret;
	if (cfg->grow && cfg->fail_rank < 0 && !cfg->nodata) {
		s->want1 = malloc(CS_MAX(s->count, 1) * sizeof(double));
		if (!s->want1)
			return -ENOMEM;
		for (size_t x = 0; x < s->count; x++)
			s->want1[x] = cs_td_expect(cfg->dtype, cfg->op, s->n,
						   cfg->seed, x);
	}
	/* the members connect at once; the joiner once the group formed */
	for (uint32_t r = 0; r < s->n; r++)
		cs_coord_on_open(&s->co, r, 0, &o);
	sco_co_arm(s);
	return 0;
}

static int sco_setup(struct sco *s)
{
	const struct cs_simcoll_cfg *cfg = s->cfg;
	struct cs_sim_params sp = {
		.seed = cfg->seed,
		.max_payload = sco_mss(s),
	};
	struct cs_sim_link_params lp = sco_link(cfg, cfg->delay_us);
	struct sco_view *v0 = &s->views[0];
	int ret;

	s->ops = cs_coll_flow_ops;
	s->ops.rebuild = sco_rebuild;
	ret = cs_sim_create(&s->sim, &sp);
	if (ret)
		return ret;
	s->nnodes = s->n + (cfg->grow ? 1 : 0);
	s->joiner = cfg->grow ? s->n : CS_SIM_NODE_NONE;
	s->nd = calloc(s->nnodes, sizeof(*s->nd));
	if (!s->nd)
		return -ENOMEM;
	for (uint32_t r = 0; r < s->nnodes; r++) {
		struct sco_node *nd = &s->nd[r];
		uint32_t id;

		nd->s = s;
		nd->id = r;
		for (uint32_t o = 1; o <= SCO_OPS; o++)
			nd->status[o] = -EINPROGRESS;
		ret = cs_sim_node_add(s->sim, &sco_node_ops, nd, &id);
		if (ret)
			return ret;
		ret = sco_alloc_data(s, nd);
		if (ret)
			return ret;
	}
	if (cfg->member)
		return sco_member_setup(s);
	/* no membership: one view, every rank posts at time 0 */
	v0->node = calloc(s->n, sizeof(*v0->node));
	if (!v0->node)
		return -ENOMEM;
	s->nviews = 1;
	v0->n = s->n;
	v0->epoch = 1;
	for (uint32_t r = 0; r < s->n; r++)
		v0->node[r] = r;
	for (uint32_t r = 0; r < s->n; r++) {
		ret = sco_start(&s->nd[r], v0, 1, 0);
		if (ret)
			return ret;
		cs_sim_timer(s->sim, r, 0);
	}
	if (sco_direct(s))
		return sco_star(s, s->n, false); /* it talks to every rank */
	for (uint32_t r = 0; s->n > 1 && r < s->n; r++) {
		uint32_t nx = (r + 1) % s->n;

		if (cs_sim_link_find(s->sim, r, nx) >= 0)
			continue;
		ret = cs_sim_link_pair(s->sim, r, nx, &lp, NULL, NULL);
		if (ret)
			return ret;
	}
	return 0;
}

static void sco_teardown(struct sco *s)
{
	for (uint32_t r = 0; s->nd && r < s->nnodes; r++) {
		struct sco_node *nd = &s->nd[r];

		cs_tp_destroy(nd->tp);
		cs_coll_free(nd->op);
		sco_free_data(s, nd);
		free(nd->bm);
		sco_stream_fini(&nd->st);
		if (s->cst)
			sco_stream_fini(&s->cst[r]);
	}
	for (uint32_t i = 0; i < s->nviews; i++)
		free(s->views[i].node);
	if (s->cfg->member)
		cs_coord_fini(&s->co);
	free(s->cst);
	free(s->enc);
	free(s->tbl);
	free(s->lost);
	free(s->want1);
	free(s->nd);
	cs_sim_destroy(s->sim);
}

/* ---- results ----------------------------------------------------------- */

static void sco_plain_result(struct sco *s, struct cs_simcoll_result *res)
{
	struct cs_tp_stats st;

	for (uint32_t r = 0; r < s->n; r++) {
		struct sco_node *nd = &s->nd[r];

		if (!nd->ready && !s->violations && !s->why[0])
			snprintf(s->why, sizeof(s->why),
				 "rank %u never completed (sim run %d)", r,
				 res->sim_ret);
		res->time_ns = CS_MAX(res->time_ns, nd->ready_at);
		res->max_sent = CS_MAX(res->max_sent, (double)nd->frame_bytes);
		res->max_wire =
			CS_MAX(res->max_wire,
			       (double)(nd->frame_bytes +
					CS_SIM_WIRE_EXTRA * nd->frames));
		sco_node_stats(nd, &st);
		res->retx += st.rel_retx;
		res->timeouts += st.rel_timeouts;
		res->fillers += st.tx_fillers;
		res->pure_acks += st.tx_acks;
	}
	res->all_done = s->ndone == s->n;
	if (!s->violations && !res->all_done && !s->why[0])
		snprintf(s->why, sizeof(s->why), "not every rank finished");
	res->channels = s->n && s->nd[0].op ? cs_coll_channels(s->nd[0].op) : 0;
	if (!s->violations && res->all_done && !s->cfg->nodata)
		res->wrong = sco_verify(s, res->first, sizeof(res->first));
}

static cs_ns_t sco_op_ns(const struct sco *s, uint32_t o)
{
	return s->t1[o] > s->t0[o] ? s->t1[o] - s->t0[o] : 0;
}

/* A loss, then a join: op 2's check (at its end), op 3's, and how long
 * each new view took to reach all its members. */
static void sco_join_result(struct sco *s, struct cs_simcoll_result *res)
{
	const struct sco_view *v3 = s->nviews > 2 ? &s->views[2] : NULL;

	res->wrong = s->wrong1;
	snprintf(res->first, sizeof(res->first), "%s", s->first1);
	res->join_n = v3 ? v3->n : 0;
	if (v3 && s->finished[3] == v3->n)
		res->wrong += sco_verify_view(s, v3, 3, res->first,
					      sizeof(res->first));
	for (uint32_t i = 1; i < s->nviews && i < 3; i++) {
		uint32_t e = s->views[i].epoch;

		if (e >= CS_ARRAY_SIZE(s->applied) || !s->issued_at[e])
			continue;
		res->epochs[i - 1] = e;
		res->settled[i - 1] = s->applied[e];
		res->settle_ns[i - 1] = s->applied_at[e] - s->issued_at[e];
		res->view_members[i - 1] = s->views[i].n;
	}
}

static void sco_member_result(struct sco *s, struct cs_simcoll_result *res)
{
	const struct cs_simcoll_cfg *cfg = s->cfg;
	const struct sco_view *v2 = s->nviews > 1 ? &s->views[1] : NULL;
	struct cs_tp_stats st;

	for (uint32_t r = 0; r < s->nnodes; r++) {
		sco_node_stats(&s->nd[r], &st);
		res->stale_dropped += st.rx_stale_epoch;
		res->future_dropped += st.rx_future_epoch;
		res->coord_lost += s->nd[r].coord_lost;
	}
	res->injected = s->injected;
	res->views = s->nviews;
	res->coord_epoch = s->co.complete ? s->co.fd.epoch : 0;
	res->epoch = v2 ? v2->epoch : CS_MAX(res->coord_epoch, 1u);
	res->view_n = v2 ? v2->n : 0;
	memcpy(res->finished, s->finished, sizeof(res->finished));
	memcpy(res->reports, s->reports, sizeof(res->reports));
	for (uint32_t o = 1; o <= SCO_OPS; o++)
		res->op_ns[o] = sco_op_ns(s, o);
	res->bad = CS_SIM_NODE_NONE;
	if (cfg->fail_rank >= 0) {
		uint32_t R = (uint32_t)cfg->fail_rank;
		cs_ns_t bound = 2 * cfg->mp.fail_timeout;

		res->mode = CS_SIMCOLL_PEER_LOST;
		res->detect_ns = s->declared_at > s->fail_abs
					 ? s->declared_at - s->fail_abs
					 : 0;
		for (uint32_t r = 0; r < s->n; r++) {
			const struct sco_node *nd = &s->nd[r];
			cs_ns_t t = nd->reported[1] && nd->report_at[1] >
							       s->fail_abs
					    ? nd->report_at[1] - s->fail_abs
					    : 0;

			if (r == R)
				continue;
			res->want++;
			if (nd->reported[1] &&
			    nd->status[1] == CS_ERR_PEER_LOST &&
			    nd->culprit[1] == R && t <= bound)
				res->good++;
			else if (res->bad == CS_SIM_NODE_NONE)
				res->bad = r;
			res->max_report_ns = CS_MAX(res->max_report_ns, t);
		}
		if (res->bad != CS_SIM_NODE_NONE) {
			res->bad_reported = s->nd[res->bad].reported[1];
			res->bad_status = s->nd[res->bad].status[1];
			res->bad_culprit = s->nd[res->bad].culprit[1];
		}
		if (cfg->reform && cfg->grow) /* op 2 was checked at its end */
			sco_join_result(s, res);
		else if (cfg->reform && v2 && s->finished[2] == v2->n)
			res->wrong = sco_verify_view(s, v2, 2, res->first,
						     sizeof(res->first));
	} else if (cfg->stall_rank >= 0) {
		uint32_t R = (uint32_t)cfg->stall_rank;
		const struct sco_view *v = &s->views[0];

		res->mode = CS_SIMCOLL_DEADLINE;
		res->diag =
			calloc(CS_MAX(cfg->show_diag, 1), sizeof(*res->diag));
		for (uint32_t r = 0; r < s->n; r++) {
			const struct sco_node *nd = &s->nd[r];
			uint32_t x = r, hops = 0;

			if (r == R)
				continue;
			res->want++;
			if (!nd->reported[1] || nd->status[1] != CS_ERR_TIMEOUT)
				continue;
			res->good++;
			res->max_report_ns =
				CS_MAX(res->max_report_ns,
				       nd->report_at[1] - nd->op_start);
			res->direct += nd->culprit[1] == R;
			/* follow "waits on" to the rank that did not report */
			while (x != R && s->nd[x].has_wait && hops++ < s->n)
				x = v->node[s->nd[x].wait.peer];
			res->named += x == R;
		}
		/* the ranks next to the stalled one first, in ring order */
		for (uint32_t k = 1;
		     res->diag && k < s->n && res->ndiag < cfg->show_diag;
		     k++) {
			const struct sco_node *nd = &s->nd[(R + k) % s->n];

			if (nd->reported[1])
				snprintf(res->diag[res->ndiag++],
					 sizeof(res->diag[0]), "%s", nd->diag);
		}
	} else if (cfg->grow) {
		res->mode = CS_SIMCOLL_GROW;
		res->wrong = s->wrong1;
		snprintf(res->first, sizeof(res->first), "%s", s->first1);
		if (v2 && s->finished[2] == v2->n)
			res->wrong += sco_verify_view(s, v2, 2, res->first,
						      sizeof(res->first));
	} else {
		res->mode = CS_SIMCOLL_MEMBER;
		if (s->nviews)
			res->wrong =
				sco_verify_view(s, &s->views[0], 1, res->first,
						sizeof(res->first));
		for (uint32_t r = 0; r < s->n && s->reports[1]; r++) {
			if (!s->nd[r].reported[1])
				continue;
			res->fail_status = s->nd[r].status[1];
			snprintf(res->fail_diag, sizeof(res->fail_diag), "%s",
				 s->nd[r].diag[0] ? s->nd[r].diag : "-");
			break;
		}
	}
}

/* ---- entry points ------------------------------------------------------ */

double cs_simcoll_factor(enum cs_coll_kind k, uint32_t n)
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

double cs_simcoll_hops(enum cs_coll_kind k, uint32_t n)
{
	return k == CS_COLL_ALLREDUCE ? 2.0 * (n - 1) : (double)(n - 1);
}

int cs_simcoll_defaults(struct cs_simcoll_cfg *c, enum cs_coll_kind kind)
{
	int ret;

	memset(c, 0, sizeof(*c));
	c->kind = kind;
	c->dtype = CS_F32;
	c->op = CS_SUM;
	c->mtu = 9000;
	c->seed = 1;
	c->gbps = 100;
	c->delay_us = 1;
	c->reorder_ns = 5000;
	c->time_limit_ms = 60000;
	c->fail_rank = -1;
	c->stall_rank = -1;
	c->show_diag = 8;
	c->direct_max = -1;
	ret = cs_xport_params_default(&c->xp);
	if (!ret)
		ret = cs_tp_params_default(&c->tp);
	if (!ret)
		ret = cs_cfg_defaults(cs_member_cfg, cs_member_cfg_len, &c->mp);
	return ret;
}

const char *cs_simcoll_check(const struct cs_simcoll_cfg *c)
{
	if (!c->member)
		return NULL;
	if (c->kind != CS_COLL_ALLREDUCE)
		return "membership scenarios run allreduce only";
	if (c->oop || c->random_data)
		return "membership scenarios run in place with exact data";
	if (c->ranks < 2 || c->ranks + (c->grow ? 1 : 0) > CS_BOOT_MAX_RANKS)
		return "membership scenarios need 2 .. 1024 ranks (the "
		       "coordinator's table)";
	if (c->fail_rank >= (int64_t)c->ranks ||
	    c->stall_rank >= (int64_t)c->ranks)
		return "--fail-rank / --stall-rank: no such rank";
	if (c->fail_rank >= 0 && c->stall_rank >= 0)
		return "one of --fail-rank and --stall-rank";
	if ((c->stall_rank >= 0 || (c->fail_rank >= 0 && !c->reform)) &&
	    c->grow)
		return "--grow runs without a failure, or after a loss with "
		       "--reform (a loss, then a join)";
	if (c->reform && c->fail_rank < 0)
		return "--reform needs --fail-rank";
	if (c->stall_rank >= 0 && !c->deadline)
		return "--stall-rank needs --deadline-us";
	if (c->stall_rank >= 0 && c->deadline >= c->mp.fail_timeout)
		return "--deadline-us must be below the fail timeout";
	if (c->fail_rank >= 0 && c->deadline &&
	    c->deadline <= 2 * c->mp.fail_timeout)
		return "with --fail-rank the deadline must exceed 2 x fail "
		       "timeout";
	if (!c->mp.hb_interval || !c->mp.fail_timeout ||
	    c->mp.hb_interval >= c->mp.fail_timeout)
		return "need 0 < --hb-interval-ms < --fail-timeout-ms";
	return NULL;
}

int cs_simcoll_run(const struct cs_simcoll_cfg *c,
		   struct cs_simcoll_result *res)
{
	struct sco s = { .cfg = c, .n = c->ranks };
	struct cs_simcoll_cfg cc;
	int ret;

	memset(res, 0, sizeof(*res));
	if (!c->ranks || c->mtu < 20 + 8 + CS_PROTO_HDR_WIRE_LEN + 8 ||
	    cs_simcoll_check(c))
		return -EINVAL;
	/* the core's node ids: the ranks, the joiner, the coordinator */
	cc = *c;
	cc.tp.max_nodes = CS_MAX(cc.tp.max_nodes, c->ranks + 3);
	cc.xp.cc.line_gbps = c->gbps;
	s.cfg = &cc;
	s.esz = cs_dtype_size(c->dtype);
	s.count = c->bytes / s.esz;
	if (c->kind == CS_COLL_REDUCE_SCATTER || c->kind == CS_COLL_ALL_GATHER)
		s.count /= c->ranks;
	sco_cur = &s;
	ret = sco_setup(&s);
	if (ret) {
		sco_teardown(&s);
		sco_cur = NULL;
		return ret;
	}
	res->sim_ret = cs_sim_run(s.sim, (cs_ns_t)(c->time_limit_ms * 1e6));
	res->events = cs_sim_events(s.sim);
	res->sim_now = cs_sim_now(s.sim);
	if (c->member)
		sco_member_result(&s, res);
	else
		sco_plain_result(&s, res);
	res->violation = s.violations || (!c->member && !res->all_done);
	res->stale_checked = s.stale_checked;
	snprintf(res->why, sizeof(res->why), "%s", s.why);
	sco_teardown(&s);
	sco_cur = NULL;
	return 0;
}

void cs_simcoll_result_fini(struct cs_simcoll_result *res)
{
	free(res->diag);
	res->diag = NULL;
}

// SPDX-License-Identifier: MIT
/*
 * PS push/pull carried by the transport core (transport/ps_flow.h): three
 * nodes, each a cs_tp with one cs_ps_flow posted, joined by an in-memory
 * wire that loses frames (data, retransmissions and ACKs alike, seeded).
 * Node 0 and 1 are server and worker, node 2 a worker only. Workers train
 * a sync SGD table; the values are small dyadic numbers and lr a power of
 * two, so the table must equal the serial reference exactly, and every
 * gradient row must have been taken exactly once. Also: pushes whose ACKs
 * are lost (retransmitted, duplicates at the session), a malformed push
 * (rejected, nothing applied), a lost peer, the flow's bad inputs.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/ps/ps.h"
#include "collectives/ps/ps_wire.h"
#include "collstack/types.h"
#include "transport/ps_flow.h"
#include "transport/tp.h"

#define NODES 3
#define SERVERS 2
#define QMAX 65536
#define DIM 4
#define KEYS 32
#define ITERS 12
#define KPP 6 /* keys per push (with duplicates) */
#define GROUP 7
#define OP 1
#define MSS 1400

struct frame {
	uint32_t src, dst;
	struct cs_pkt_hdr h;
	uint8_t *data;
};

struct node {
	uint32_t id;
	struct cs_tp *tp;
	struct cs_ps_flow *flow;
	struct cs_ps_store *st; /* nodes < SERVERS */
	struct cs_ps_worker *w;
	int status;
	uint32_t culprit;
	/* worker progress: iteration, ops in flight, a failure */
	uint32_t it;
	uint32_t inflight;
	int op_err;
	uint32_t op_peer;
	float pulled[KPP * DIM];
	uint64_t keys[KPP];
};

static struct frame q[QMAX];
static unsigned qn;
static struct node nodes[NODES];
static bool dead[NODES];
static cs_ns_t now;
static unsigned loss_pm; /* frames lost per mille */
static cs_ns_t drop_acks; /* node 0's ACKs are lost until then */
static unsigned seed = 1;
static struct cs_ps_shardmap map;
static struct cs_ps_table_spec spec;
/* setup(): this node's flow is posted only after LATE_ROUNDS rounds of
 * training (its peers' frames wait in its core's hold), or -1 */
static int late = -1;
#define LATE_ROUNDS 50

static unsigned t_room(void *owner)
{
	(void)owner;
	return 64;
}

static void t_xmit(void *owner, uint32_t node, const struct cs_pkt_hdr *h,
		   const void *payload, uint32_t len)
{
	struct node *nd = owner;
	struct frame *f;

	cr_assert_lt(qn, QMAX);
	if (loss_pm && (unsigned)(rand_r(&seed) % 1000) < loss_pm)
		return;
	f = &q[qn++];
	f->src = nd->id;
	f->dst = node;
	f->h = *h;
	/* node 0's acknowledgements are lost: pure ACKs vanish, data frames
	 * arrive without theirs */
	if (now < drop_acks && nd->id == 0 && (h->flags & CS_PKT_F_ACK)) {
		if (h->type == CS_PKT_ACK) {
			qn--;
			return;
		}
		f->h.flags &= (uint16_t)~CS_PKT_F_ACK;
	}
	f->data = NULL;
	if (len) {
		f->data = malloc(len);
		memcpy(f->data, payload, len);
	}
}

static void t_done(void *owner, void *user, int status, uint32_t culprit)
{
	struct node *nd = owner;

	(void)user;
	nd->status = status;
	nd->culprit = culprit;
}

static const struct cs_tp_io t_io = { t_room, t_xmit, t_done, NULL };

/* ---- PS glue: node rank == server id == worker rank -------------------- */

static void f_rx(void *ctx, uint32_t src, const void *msg, size_t len,
		 cs_ns_t t)
{
	struct node *nd = ctx;

	(void)cs_ps_flow_route(nd->st, nd->w, src, msg, len, t);
}

static int st_send(void *ctx, uint32_t worker, const void *msg, size_t len)
{
	struct node *nd = ctx;

	return cs_ps_flow_send(nd->flow, worker, msg, len);
}

static int wk_send(void *ctx, uint32_t server, const void *msg, size_t len)
{
	struct node *nd = ctx;

	return cs_ps_flow_send(nd->flow, server, msg, len);
}

static void wk_done(void *ctx, uint64_t op, int rc, uint32_t peer)
{
	struct node *nd = ctx;

	(void)op;
	nd->inflight--;
	if (rc && !nd->op_err) {
		nd->op_err = rc;
		nd->op_peer = peer;
	}
}

/* Gradient of (worker, iteration, key slot, value): multiples of 1/4. */
static float grad(uint32_t w, uint32_t t, uint32_t i, uint32_t j)
{
	return (float)((int)((w * 7 + t * 3 + i * 5 + j) % 9) - 4) / 4.0f;
}

static uint64_t key_of(uint32_t w, uint32_t t, uint32_t i)
{
	/* slot 0 and 1 repeat a key: combined on the worker */
	return (uint64_t)((i == 1 ? 0 : i) * 5 + w * 3 + t) % KEYS;
}

static void setup(unsigned loss)
{
	struct cs_tp_params tp;
	struct cs_xport_params xp;
	uint32_t members[NODES] = { 0, 1, 2 }, srv[SERVERS] = { 0, 1 };

	cr_assert_eq(cs_tp_params_default(&tp), 0);
	cr_assert_eq(cs_xport_params_default(&xp), 0);
	tp.max_nodes = 16;
	memset(nodes, 0, sizeof(nodes));
	memset(dead, 0, sizeof(dead));
	qn = 0;
	now = 1000;
	loss_pm = loss;
	drop_acks = 0;
	seed = 1;
	memset(&spec, 0, sizeof(spec));
	spec.id = 3;
	spec.dim = DIM;
	spec.dtype = CS_F32;
	spec.key_max = KEYS;
	spec.mode = CS_PS_SYNC;
	spec.workers = NODES;
	cs_ps_opt_defaults(&spec.opt, CS_PS_OPT_SGD);
	spec.opt.lr = 0.5f;
	spec.init.kind = CS_PS_INIT_CONST;
	spec.init.scale = 1.0f;
	cr_assert_eq(cs_ps_shardmap_init(&map, srv, SERVERS, 16), 0);
	for (uint32_t i = 0; i < NODES; i++) {
		struct node *nd = &nodes[i];
		struct cs_ps_store_cfg sc = { .server = i,
					      .map = &map,
					      .msg_max = MSS,
					      .parked_max = 64 };
		struct cs_ps_store_io sio = { st_send, nd };
		/* the core retransmits: the worker's own timer stays out of
		 * the way (1 s of virtual time) */
		struct cs_ps_worker_cfg wc = { .rank = i,
					       .map = &map,
					       .msg_max = MSS,
					       .rto = 1000000000,
					       .rto_max = 1000000000 };
		struct cs_ps_worker_io wio = { wk_send, wk_done, nd };

		nd->id = i;
		nd->status = -EINPROGRESS;
		cr_assert_eq(cs_tp_create(&tp, &xp, &t_io, nd, i, 5, &nd->tp),
			     0);
		cr_assert_eq(
			cs_tp_group_add(nd->tp, GROUP, members, NODES, NULL),
			0);
		cr_assert_eq(
			cs_ps_flow_create(NODES, i, MSS, f_rx, nd, &nd->flow),
			0);
		if (i < SERVERS) {
			cr_assert_eq(cs_ps_store_create(&nd->st, &sc, &sio), 0);
			cr_assert_eq(
				cs_ps_store_add_table(nd->st, &spec, 0, NULL),
				0);
		}
		cr_assert_eq(cs_ps_worker_create(&nd->w, &wc, &wio), 0);
		cr_assert_eq(cs_ps_worker_add_table(nd->w, &spec), 0);
		if ((int)i != late)
			cr_assert_eq(cs_tp_post(nd->tp, GROUP, OP,
						&cs_ps_flow_ops, nd->flow, 0,
						NULL, now),
				     0);
	}
}

static void teardown(void)
{
	for (uint32_t i = 0; i < NODES; i++) {
		cs_tp_destroy(nodes[i].tp);
		cs_ps_flow_destroy(nodes[i].flow);
		cs_ps_store_destroy(nodes[i].st);
		cs_ps_worker_destroy(nodes[i].w);
	}
	cs_ps_shardmap_fini(&map);
	for (unsigned i = 0; i < qn; i++)
		free(q[i].data);
	qn = 0;
}

/* One round: deliver, let stores apply, drain local messages, poll; time
 * jumps to the next deadline when nothing is on the wire. */
static void round_once(void)
{
	static struct frame cur[QMAX];
	unsigned n = qn;
	cs_ns_t next = CS_NS_NEVER;

	memcpy(cur, q, n * sizeof(cur[0]));
	qn = 0;
	for (unsigned i = 0; i < n; i++) {
		if (!dead[cur[i].src] && !dead[cur[i].dst])
			cs_tp_rx(nodes[cur[i].dst].tp, cur[i].src, &cur[i].h,
				 cur[i].data, now);
		free(cur[i].data);
	}
	for (uint32_t i = 0; i < NODES; i++) {
		struct node *nd = &nodes[i];

		if (dead[i])
			continue;
		while (cs_ps_flow_drain_local(nd->flow, now, 256))
			if (nd->st)
				cr_assert_eq(cs_ps_store_flush(nd->st), 0);
		if (nd->st)
			cr_assert_eq(cs_ps_store_flush(nd->st), 0);
		cs_ps_flow_drain_local(nd->flow, now, 256);
		cs_tp_poll(nd->tp, now);
		next = CS_MIN(next, cs_tp_next_deadline(nd->tp, now));
	}
	now += 1000;
	/* (not while a late post is due: the jump would expire the frames
	 * its core holds, before the post) */
	if (!qn && next != CS_NS_NEVER && next > now && late < 0)
		now = next;
}

/* Worker @w's next step: push iteration it, pull at clock it + 1. */
static void worker_step(struct node *nd)
{
	float rows[KPP * DIM];
	uint64_t op;

	for (uint32_t i = 0; i < KPP; i++) {
		nd->keys[i] = key_of(nd->id, nd->it, i);
		for (uint32_t j = 0; j < DIM; j++)
			rows[i * DIM + j] = grad(nd->id, nd->it, i, j);
	}
	cr_assert_eq(cs_ps_worker_push(nd->w, spec.id, nd->it, nd->keys, rows,
				       KPP, now, &op),
		     0);
	cr_assert_eq(cs_ps_worker_pull(nd->w, spec.id, nd->it + 1, nd->keys,
				       KPP, nd->pulled, now, &op),
		     0);
	nd->inflight += 2;
	nd->it++;
}

/* Run every worker through ITERS iterations (bounded rounds). */
static void train(void)
{
	for (unsigned r = 0; r < 200000; r++) {
		bool all = true;

		if (late >= 0 && r == LATE_ROUNDS) {
			struct cs_tp_stats st;

			cs_tp_get_stats(nodes[late].tp, &st);
			cr_assert_gt(st.rx_held, 0, "nothing was held");
			cr_assert_eq(cs_tp_post(nodes[late].tp, GROUP, OP,
						&cs_ps_flow_ops,
						nodes[late].flow, 0, NULL, now),
				     0);
			late = -1;
		}
		for (uint32_t i = 0; i < NODES; i++) {
			struct node *nd = &nodes[i];

			if ((int)i == late) { /* not posted yet */
				all = false;
				continue;
			}

			cr_assert_eq(nd->op_err, 0, "node %u: op failed %d", i,
				     nd->op_err);
			if (!nd->inflight && nd->it < ITERS)
				worker_step(nd);
			if (nd->inflight || nd->it < ITERS)
				all = false;
		}
		if (all)
			return;
		round_once();
	}
	for (uint32_t i = 0; i < NODES; i++) {
		struct cs_tp_stats st;

		cs_tp_get_stats(nodes[i].tp, &st);
		fprintf(stderr, "node %u it %u inflight %u status %d: ", i,
			nodes[i].it, nodes[i].inflight, nodes[i].status);
		cs_tp_stats_print(&st, stderr);
	}
	cr_assert_fail("training did not finish");
}

/* The serial reference: per version, sum every worker's rows per key. */
static void reference(float *ref)
{
	for (uint32_t k = 0; k < KEYS * DIM; k++)
		ref[k] = 1.0f;
	for (uint32_t t = 0; t < ITERS; t++) {
		float g[KEYS * DIM] = { 0 };
		bool touched[KEYS] = { false };

		for (uint32_t w = 0; w < NODES; w++)
			for (uint32_t i = 0; i < KPP; i++) {
				uint64_t k = key_of(w, t, i);

				touched[k] = true;
				for (uint32_t j = 0; j < DIM; j++)
					g[k * DIM + j] += grad(w, t, i, j);
			}
		for (uint32_t k = 0; k < KEYS; k++)
			for (uint32_t j = 0; touched[k] && j < DIM; j++)
				ref[k * DIM + j] -= 0.5f * g[k * DIM + j];
	}
}

static uint64_t ref_grad_rows(void)
{
	uint64_t n = 0;

	for (uint32_t t = 0; t < ITERS; t++)
		for (uint32_t w = 0; w < NODES; w++)
			for (uint32_t i = 0; i < KPP; i++)
				n += i != 1; /* slot 1 repeats slot 0's key */
	return n;
}

static void check_table(void)
{
	float ref[KEYS * DIM];
	uint64_t grads = 0, dup = 0;

	reference(ref);
	for (uint64_t k = 0; k < KEYS; k++) {
		uint32_t s = cs_ps_shard_of(&map, spec.id, k);
		float row[DIM];

		cr_assert_eq(cs_ps_store_peek(nodes[s].st, spec.id, k, row), 0);
		for (uint32_t j = 0; j < DIM; j++)
			cr_assert_eq(row[j], ref[k * DIM + j],
				     "key %lu [%u]: %g, reference %g",
				     (unsigned long)k, j, row[j],
				     ref[k * DIM + j]);
	}
	for (uint32_t s = 0; s < SERVERS; s++) {
		const struct cs_ps_store_stats *ss =
			cs_ps_store_stats(nodes[s].st);

		grads += ss->grads_in;
		dup += ss->push_dup;
		cr_assert_eq(ss->rejected, 0);
	}
	/* every gradient row taken once; nothing reached the store twice:
	 * the core's sessions kept the retransmissions away */
	cr_assert_eq(grads, ref_grad_rows());
	cr_assert_eq(dup, 0);
	for (uint32_t i = 0; i < NODES; i++)
		cr_assert_eq(cs_ps_worker_stats(nodes[i].w)->retransmits, 0);
}

static void close_all(void)
{
	for (uint32_t i = 0; i < NODES; i++)
		cs_ps_flow_close(nodes[i].flow);
	for (unsigned r = 0; r < 100000; r++) {
		bool all = true;

		for (uint32_t i = 0; i < NODES; i++)
			all = all && nodes[i].status != -EINPROGRESS;
		if (all)
			break;
		round_once();
	}
	for (uint32_t i = 0; i < NODES; i++)
		cr_assert_eq(nodes[i].status, 0, "node %u: %d", i,
			     nodes[i].status);
}

/* Node 0 (server and worker) posts its flow late: the frames its peers
 * sent it meanwhile are held by its core and replayed at the post. */
Test(tp_ps, late_post_held_frames_replayed)
{
	late = 0;
	setup(0);
	train();
	check_table();
	close_all();
	teardown();
}

Test(tp_ps, sync_sgd_exact_no_loss)
{
	setup(0);
	train();
	check_table();
	close_all();
	teardown();
}

Test(tp_ps, sync_sgd_exact_with_loss)
{
	struct cs_tp_stats st, sum = { 0 };

	setup(100); /* 10 % of every frame lost */
	train();
	check_table();
	for (uint32_t i = 0; i < NODES; i++) {
		cs_tp_get_stats(nodes[i].tp, &st);
		sum.tx_retx += st.tx_retx;
	}
	cr_assert_gt(sum.tx_retx, 0, "loss did not force retransmissions");
	close_all();
	teardown();
}

/* Node 0's ACKs are lost: the pushes to it are sent again, arrive twice,
 * and are applied once. */
Test(tp_ps, retransmitted_push_applied_once)
{
	struct cs_tp_stats st;
	uint64_t dup_rcvd = 0;

	setup(0);
	drop_acks = now + 50000000; /* 50 ms */
	train();
	/* the last pushes are resent until node 0's ACKs get through */
	close_all();
	check_table();
	cs_tp_get_stats(nodes[0].tp, &st);
	dup_rcvd = st.rel_dup_rcvd;
	cr_assert_gt(dup_rcvd, 0, "no duplicate reached node 0's sessions");
	teardown();
}

/* A push whose rows do not match the table's dim, carried by the core:
 * refused with an error reply, nothing applied. */
Test(tp_ps, malformed_push_rejected_nothing_applied)
{
	uint8_t buf[512];
	struct cs_ps_msg m = { 0 };
	float row[DIM * 2] = { 5, 5, 5, 5, 5, 5, 5, 5 }, got[DIM];
	size_t len;
	uint64_t key = 0;
	uint32_t s;

	setup(50);
	s = cs_ps_shard_of(&map, spec.id, key);
	m.type = CS_PS_MSG_PUSH;
	m.table = spec.id;
	m.worker = 2;
	m.nparts = 1;
	m.nkeys = 1;
	m.dim = DIM * 2; /* the table's rows have DIM values */
	m.dtype = CS_F32;
	len = cs_ps_wire_len(m.type, 1, m.dim, m.dtype, 0);
	cr_assert(len && len <= sizeof(buf));
	cs_ps_wire_put_hdr(buf, &m);
	cs_ps_wire_put_key(buf, 0, key);
	cs_ps_wire_put_row(buf, &m, 0, row);
	cr_assert_eq(cs_ps_flow_send(nodes[2].flow, s, buf, len), 0);
	for (unsigned r = 0;
	     r < 20000 && !cs_ps_store_stats(nodes[s].st)->rejected; r++)
		round_once();
	cr_assert_eq(cs_ps_store_stats(nodes[s].st)->rejected, 1);
	cr_assert_eq(cs_ps_store_stats(nodes[s].st)->push_applied, 0);
	cr_assert_eq(cs_ps_store_peek(nodes[s].st, spec.id, key, got), 0);
	for (uint32_t j = 0; j < DIM; j++)
		cr_assert_eq(got[j], 1.0f);
	/* the error reply reached node 2's worker, which asked nothing */
	for (unsigned r = 0;
	     r < 20000 && !cs_ps_worker_stats(nodes[2].w)->dup_replies; r++)
		round_once();
	cr_assert_eq(cs_ps_worker_stats(nodes[2].w)->dup_replies, 1);
	teardown();
}

/* A server's node is declared lost: the flows end with CS_ERR_PEER_LOST
 * naming its rank. */
Test(tp_ps, lost_server_named)
{
	setup(0);
	dead[1] = true;
	cr_assert_eq(cs_tp_peer_lost(nodes[0].tp, 1), 0);
	cr_assert_eq(cs_tp_peer_lost(nodes[2].tp, 1), 0);
	round_once();
	cr_assert_eq(nodes[0].status, CS_ERR_PEER_LOST);
	cr_assert_eq(nodes[0].culprit, 1);
	cr_assert_eq(nodes[2].status, CS_ERR_PEER_LOST);
	cr_assert_eq(nodes[2].culprit, 1);
	cr_assert_eq(cs_ps_flow_send(nodes[0].flow, 2, "x", 1), -EPIPE);
	teardown();
}

static uint8_t f_got[4096];
static size_t f_got_len;

static void f_frag_rx(void *ctx, uint32_t src, const void *msg, size_t len,
		      cs_ns_t now)
{
	(void)ctx, (void)src, (void)now;
	cr_assert_leq(len, sizeof(f_got));
	memcpy(f_got, msg, len);
	f_got_len = len;
}

Test(tp_ps, flow_bad_inputs)
{
	struct cs_ps_flow *f;
	static uint8_t big[CS_PS_FLOW_MSG_MAX + 1];

	cr_assert_eq(cs_ps_flow_create(0, 0, MSS, f_rx, NULL, &f), -EINVAL);
	cr_assert_eq(cs_ps_flow_create(2, 2, MSS, f_rx, NULL, &f), -EINVAL);
	cr_assert_eq(cs_ps_flow_create(2, 0, MSS, f_rx, NULL, &f), 0);
	cr_assert_eq(cs_ps_flow_send(f, 2, big, 4), -EINVAL);
	cr_assert_eq(cs_ps_flow_send(f, 1, big, 0), -EINVAL);
	cr_assert_eq(cs_ps_flow_send(f, 1, big, sizeof(big)), -EMSGSIZE);
	cr_assert_eq(cs_ps_flow_send(f, 1, big, MSS), 0);
	cr_assert_eq(cs_ps_flow_backlog(f), 1);
	/* a longer message: one frame per MSS bytes */
	cr_assert_eq(cs_ps_flow_send(f, 1, big, 2 * MSS + 1), 0);
	cr_assert_eq(cs_ps_flow_backlog(f), 4);
	cs_ps_flow_close(f);
	cr_assert_eq(cs_ps_flow_send(f, 1, big, 4), -EPIPE);
	/* unknown cookies are refused, not followed */
	cr_assert_eq(cs_ps_flow_ops.on_acked(f, 12345), -ENOENT);
	cs_ps_flow_destroy(f);
	/* a frame sent to another rank (flooded by a switch) is refused */
	{
		struct cs_pkt_hdr h = {
			.type = CS_PKT_DATA, .src = 1, .channel = 2, .len = 4
		};

		cr_assert_eq(cs_ps_flow_create(3, 0, MSS, f_rx, NULL, &f), 0);
		cr_assert_eq(cs_ps_flow_ops.on_data(f, 0, &h, "PS\x01\x01"),
			     -EPROTO);
		h.channel = 0;
		h.len = 0;
		cr_assert_eq(cs_ps_flow_ops.on_data(f, 0, &h, NULL), -EPROTO);
		cs_ps_flow_destroy(f);
	}
	/* fragments: reassembled once whole; malformed, overlapping and
	 * oversized ones refused and counted */
	{
		struct cs_pkt_hdr h = {
			.type = CS_PKT_DATA, .src = 1, .channel = 0, .step = 7
		};
		struct cs_ps_flow_stats fs;
		static uint8_t msg[3 * 100 + 10];

		for (size_t i = 0; i < sizeof(msg); i++)
			msg[i] = (uint8_t)(i * 7 + 1);
		f_got_len = 0;
		cr_assert_eq(cs_ps_flow_create(2, 0, MSS, f_frag_rx, NULL, &f),
			     0);
#define FRAG(len_, unit_, idx_)                                                \
	((uint64_t)(len_) << 32 | (uint64_t)(unit_) << 16 | (idx_))
		/* too long a message, too small a unit */
		h.len = 100;
		h.offset = FRAG(CS_PS_FLOW_MSG_MAX + 1, 100, 0);
		cr_assert_eq(cs_ps_flow_ops.on_data(f, 0, &h, msg), -EPROTO);
		h.offset = FRAG(sizeof(msg), 32, 0);
		cr_assert_eq(cs_ps_flow_ops.on_data(f, 0, &h, msg), -EPROTO);
		/* an index past the end, a length that does not fit it */
		h.offset = FRAG(sizeof(msg), 100, 4);
		cr_assert_eq(cs_ps_flow_ops.on_data(f, 0, &h, msg), -EPROTO);
		h.len = 99;
		h.offset = FRAG(sizeof(msg), 100, 1);
		cr_assert_eq(cs_ps_flow_ops.on_data(f, 0, &h, msg + 100),
			     -EPROTO);
		/* out of order: 3 (last, 10 bytes), 1, 0, a copy of 1, 2 */
		h.len = 10;
		h.offset = FRAG(sizeof(msg), 100, 3);
		cr_assert_geq(cs_ps_flow_ops.on_data(f, 0, &h, msg + 300), 0);
		h.len = 100;
		h.offset = FRAG(sizeof(msg), 100, 1);
		cr_assert_geq(cs_ps_flow_ops.on_data(f, 0, &h, msg + 100), 0);
		h.offset = FRAG(sizeof(msg), 100, 0);
		cr_assert_geq(cs_ps_flow_ops.on_data(f, 0, &h, msg), 0);
		h.offset = FRAG(sizeof(msg), 100, 1);
		cr_assert_eq(cs_ps_flow_ops.on_data(f, 0, &h, msg + 100),
			     -EPROTO);
		/* the same id with another length: refused */
		h.offset = FRAG(sizeof(msg) + 100, 100, 2);
		cr_assert_eq(cs_ps_flow_ops.on_data(f, 0, &h, msg + 200),
			     -EPROTO);
		cr_assert_eq(f_got_len, 0);
		h.offset = FRAG(sizeof(msg), 100, 2);
		cr_assert_geq(cs_ps_flow_ops.on_data(f, 0, &h, msg + 200), 0);
		cr_assert_eq(f_got_len, sizeof(msg));
		cr_assert_arr_eq(f_got, msg, sizeof(msg));
		cs_ps_flow_get_stats(f, &fs);
		cr_assert_eq(fs.rx, 1);
		cr_assert_eq(fs.frag_rx, 4);
		cr_assert_eq(fs.frag_bad, 2);
		cr_assert_eq(fs.rx_bad, 6);
		/* a partial message left at destroy is freed */
		h.step = 8;
		h.offset = FRAG(sizeof(msg), 100, 0);
		cr_assert_geq(cs_ps_flow_ops.on_data(f, 0, &h, msg), 0);
		/* first fragments of 1 MiB messages: partial ones of one
		 * sender hold at most 32 MiB (the 32nd new one is refused,
		 * the 311-byte one above holding some) */
		h.len = 100;
		for (uint32_t k = 0; k < 32; k++) {
			h.step = 100 + k;
			h.offset = FRAG(CS_PS_FLOW_MSG_MAX, 100, 0);
			int r = cs_ps_flow_ops.on_data(f, 0, &h, msg);

			cr_assert(k < 31 ? r >= 0 : r == -EPROTO,
				  "message %u: %d", k, r);
		}
#undef FRAG
		cs_ps_flow_destroy(f);
	}
	/* a message of no known type, or for a part the node lacks */
	cr_assert_eq(cs_ps_flow_route(NULL, NULL, 0, "PS\x01\x09", 4, 0),
		     -EPROTO);
	cr_assert_eq(cs_ps_flow_route(NULL, NULL, 0, "PS\x01\x01", 4, 0),
		     -EPROTO);
	cr_assert_eq(cs_ps_flow_route(NULL, NULL, 0, "PS", 2, 0), -EPROTO);
}

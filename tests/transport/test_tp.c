/* SPDX-License-Identifier: MIT */
/*
 * The transport core (transport/tp.h) between three nodes joined by an
 * in-memory wire with a fake clock: groups over subsets posted in
 * different orders, op id reuse, frames of unknown operations, stale
 * epochs, foreign sources, membership that disagrees, a lost peer.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/ring.h"
#include "collstack/types.h"
#include "transport/tp.h"

#define NODES 3
#define QMAX 65536

struct frame {
	uint32_t src, dst;
	struct cs_pkt_hdr h;
	uint8_t *data;
};

struct node {
	uint32_t id;
	struct cs_tp *tp;
	int status[64];
	uint32_t culprit[64];
	int ndone;
	int ready[64]; /* io->ready calls (tp.early) */
};

static struct frame q[QMAX];
static unsigned qn;
/* drop the next @drop_left first transmissions of DATA on engine channel
 * @drop_ch from node @drop_src (0: none) */
static unsigned drop_left;
static uint32_t drop_src, drop_ch;
static int64_t drop_dst = -1; /* ... and to this node only (-1: any) */
static uint32_t ar_channels; /* ar_post(): 0: the default */
static struct node nodes[NODES];
static bool dead[NODES];
static cs_ns_t now;
/* tp.early and the io the nodes get (setup_nodes()); pump() drops pure
 * ACKs addressed to drop_acks_to while it is a node id */
static bool early_on;
static const struct cs_tp_io *use_io;
static int64_t drop_acks_to = -1;
/* tp.rx_budget and rel.credit for setup_nodes() (0: off) */
static uint64_t rx_budget;
/* pump() with slow0: node 0's link takes SLOW0_BYTES a round (1 us: 16
 * Gb/s), the rest waits in its queue; peak_to0 is that queue's most DATA
 * payload bytes */
static bool slow0;
/* pump(): node stalled_node is descheduled until stall_until: frames to
 * it wait in the queue, and it does not poll (-1: none) */
static int64_t stalled_node = -1;
static cs_ns_t stall_until;
static uint64_t peak_to0;
#define SLOW0_BYTES 2000u
static struct frame slowq[QMAX];
static unsigned slowq_n;

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
	if (drop_left && nd->id == drop_src && h->type == CS_PKT_DATA &&
	    h->channel == drop_ch && !(h->flags & CS_PKT_F_RETX) &&
	    (drop_dst < 0 || (int64_t)node == drop_dst)) {
		drop_left--;
		return;
	}
	f = &q[qn++];
	f->src = nd->id;
	f->dst = node;
	f->h = *h;
	f->data = NULL;
	if (len) {
		f->data = malloc(len);
		memcpy(f->data, payload, len);
	}
}

static void t_done(void *owner, void *user, int status, uint32_t culprit)
{
	struct node *nd = owner;
	uintptr_t slot = (uintptr_t)user;

	nd->status[slot] = status;
	nd->culprit[slot] = culprit;
	nd->ndone++;
}

static const struct cs_tp_io t_io = { t_room, t_xmit, t_done };

static void t_ready(void *owner, void *user)
{
	struct node *nd = owner;
	uintptr_t slot = (uintptr_t)user;

	/* before its io->done, once */
	cr_assert_eq(nd->status[slot], -EINPROGRESS);
	nd->ready[slot]++;
}

static const struct cs_tp_io t_io_early = { t_room, t_xmit, t_done, t_ready };

static void setup_nodes(uint32_t max_timeouts, uint32_t hold)
{
	struct cs_tp_params tp;
	struct cs_xport_params xp;

	cr_assert_eq(cs_tp_params_default(&tp), 0);
	cr_assert_eq(cs_xport_params_default(&xp), 0);
	tp.max_nodes = 16;
	tp.hold_frames = hold;
	tp.hold_ttl = 1000000; /* 1 ms */
	tp.early = early_on;
	tp.rx_budget = rx_budget;
	if (rx_budget) {
		xp.rel.credit = true;
		xp.rel.credit_init = rx_budget / 2;
	}
	xp.rel.max_timeouts = max_timeouts;
	memset(nodes, 0, sizeof(nodes));
	memset(dead, 0, sizeof(dead));
	qn = 0;
	drop_left = 0;
	drop_dst = -1;
	ar_channels = 0;
	stalled_node = -1;
	now = 1000;
	for (uint32_t i = 0; i < NODES; i++) {
		nodes[i].id = i;
		for (int k = 0; k < 64; k++)
			nodes[i].status[k] = -EINPROGRESS;
		cr_assert_eq(cs_tp_create(&tp, &xp, use_io ? use_io : &t_io,
					  &nodes[i], i, 5, &nodes[i].tp),
			     0);
	}
}

static void teardown_nodes(void)
{
	for (uint32_t i = 0; i < NODES; i++)
		cs_tp_destroy(nodes[i].tp);
	for (unsigned i = 0; i < qn; i++)
		free(q[i].data);
	qn = 0;
}

/* Deliver what is queued (to and from live nodes), then poll everyone;
 * the clock moves 1 us a round. */
static void pump(unsigned rounds)
{
	static struct frame cur[QMAX];

	for (unsigned r = 0; r < rounds; r++) {
		unsigned n = 0;

		if (slow0) { /* node 0's frames join its link's queue */
			uint64_t backlog = 0, budget = SLOW0_BYTES;
			unsigned k = 0;

			for (unsigned i = 0; i < qn; i++) {
				if (q[i].dst == 0) {
					cr_assert_lt(slowq_n, QMAX);
					slowq[slowq_n++] = q[i];
				} else {
					cur[n++] = q[i];
				}
			}
			for (unsigned i = 0; i < slowq_n; i++)
				if (slowq[i].h.type == CS_PKT_DATA)
					backlog += slowq[i].h.len;
			if (backlog > peak_to0)
				peak_to0 = backlog;
			while (k < slowq_n && budget >= 64) {
				uint32_t l = slowq[k].h.len + 64;

				budget = budget > l ? budget - l : 0;
				cur[n++] = slowq[k++];
			}
			memmove(slowq, slowq + k,
				(slowq_n - k) * sizeof(slowq[0]));
			slowq_n -= k;
		} else {
			n = qn;
			memcpy(cur, q, n * sizeof(cur[0]));
		}
		qn = 0;
		for (unsigned i = 0; i < n; i++) {
			if ((int64_t)cur[i].dst == stalled_node &&
			    now < stall_until) {
				cr_assert_lt(qn, QMAX);
				q[qn++] = cur[i]; /* waits, data and all */
				continue;
			}
			if (!dead[cur[i].src] && !dead[cur[i].dst] &&
			    !(cur[i].h.type == CS_PKT_ACK &&
			      (int64_t)cur[i].dst == drop_acks_to))
				cs_tp_rx(nodes[cur[i].dst].tp, cur[i].src,
					 &cur[i].h, cur[i].data, now);
			free(cur[i].data);
		}
		for (uint32_t k = 0; k < NODES; k++)
			if (!dead[k] &&
			    !((int64_t)k == stalled_node && now < stall_until))
				cs_tp_poll(nodes[k].tp, now);
		now += 1000;
	}
}

/* An allreduce (sum of f32 rank + 1 + i) of @count elements on @nd. */
struct ar {
	struct cs_coll *c;
	float *buf;
	size_t count;
	uint32_t n;
};

static void ar_post(struct ar *a, struct node *nd, uint32_t group,
		    uint32_t op_id, uint32_t n, uint32_t rank, size_t count,
		    uintptr_t slot, uint64_t deadline)
{
	struct cs_coll_params p;

	a->buf = malloc(count * sizeof(float));
	a->count = count;
	a->n = n;
	for (size_t i = 0; i < count; i++)
		a->buf[i] = (float)(rank + 1 + i % 7);
	cs_coll_params_default(&p, NULL);
	p.kind = CS_COLL_ALLREDUCE;
	p.nranks = n;
	p.rank = rank;
	p.sendbuf = a->buf;
	p.recvbuf = a->buf;
	p.count = count;
	p.dtype = CS_F32;
	p.op = CS_SUM;
	p.epoch = cs_tp_epoch(nd->tp);
	p.start = now;
	p.deadline = deadline;
	if (ar_channels) { /* the ring, on this many channels */
		p.channels = ar_channels;
		p.direct_max = 0;
	}
	cr_assert_eq(cs_coll_init(&p, &a->c), 0);
	cr_assert_eq(cs_tp_post(nd->tp, group, op_id, &cs_coll_flow_ops, a->c,
				count * sizeof(float), (void *)slot, now),
		     0);
}

static void ar_check(const struct ar *a)
{
	for (size_t i = 0; i < a->count; i++) {
		float want = 0;

		for (uint32_t r = 0; r < a->n; r++)
			want += (float)(r + 1 + i % 7);
		cr_assert_eq(a->buf[i], want, "element %zu: %g, want %g", i,
			     a->buf[i], want);
	}
}

static void ar_free(struct ar *a)
{
	cs_coll_free(a->c);
	free(a->buf);
}

Test(tp, groups_posted_in_opposite_orders)
{
	const uint32_t all[] = { 0, 1, 2 }, sub[] = { 2, 0 };
	struct ar a[NODES], b[2];

	setup_nodes(8, 256);
	for (uint32_t i = 0; i < NODES; i++)
		cr_assert_eq(cs_tp_group_add(nodes[i].tp, 10, all, 3, NULL), 0);
	cr_assert_eq(cs_tp_group_add(nodes[2].tp, 20, sub, 2, NULL), 0);
	cr_assert_eq(cs_tp_group_add(nodes[0].tp, 20, sub, 2, NULL), 0);
	/* node 0: group 10, then 20; node 2: 20 first, 10 only later */
	ar_post(&a[0], &nodes[0], 10, 1, 3, 0, 100000, 0, 0);
	ar_post(&b[1], &nodes[0], 20, 1, 2, 1, 3000, 1, 0);
	ar_post(&a[1], &nodes[1], 10, 1, 3, 1, 100000, 0, 0);
	ar_post(&b[0], &nodes[2], 20, 1, 2, 0, 3000, 1, 0);
	pump(50);
	ar_post(&a[2], &nodes[2], 10, 1, 3, 2, 100000, 0, 0);
	pump(2000);
	for (uint32_t i = 0; i < NODES; i++) {
		cr_assert_eq(nodes[i].status[0], 0, "node %u: %d", i,
			     nodes[i].status[0]);
		ar_check(&a[i]);
		ar_free(&a[i]);
	}
	cr_assert_eq(nodes[0].status[1], 0);
	cr_assert_eq(nodes[2].status[1], 0);
	ar_check(&b[0]);
	ar_check(&b[1]);
	ar_free(&b[0]);
	ar_free(&b[1]);
	{
		struct cs_tp_stats st;

		cs_tp_get_stats(nodes[2].tp, &st);
		/* group 10's frames reached node 2 before it posted */
		cr_assert_gt(st.rx_held, 0);
		cr_assert_eq(st.rx_replayed, st.rx_held);
		cr_assert_eq(st.rx_not_member + st.rx_proto + st.rx_bad_src, 0);
	}
	teardown_nodes();
}

Test(tp, op_id_reuse_refused)
{
	const uint32_t all[] = { 0, 1, 2 };
	struct ar a[NODES];

	setup_nodes(8, 256);
	for (uint32_t i = 0; i < NODES; i++) {
		cr_assert_eq(cs_tp_group_add(nodes[i].tp, 10, all, 3, NULL), 0);
		ar_post(&a[i], &nodes[i], 10, 7, 3, i, 1000, 0, 0);
	}
	cr_assert_eq(cs_tp_post(nodes[0].tp, 10, 7, &cs_coll_flow_ops, a[0].c,
				4000, NULL, now),
		     -EEXIST);
	pump(500);
	for (uint32_t i = 0; i < NODES; i++) {
		cr_assert_eq(nodes[i].status[0], 0);
		ar_check(&a[i]);
	}
	/* finished: its id stays taken */
	cr_assert_eq(cs_tp_post(nodes[0].tp, 10, 7, &cs_coll_flow_ops, a[0].c,
				4000, NULL, now),
		     -EEXIST);
	cr_assert_eq(cs_tp_post(nodes[0].tp, 99, 1, &cs_coll_flow_ops, a[0].c,
				4000, NULL, now),
		     -ENOENT);
	cr_assert_eq(cs_tp_group_add(nodes[0].tp, 10, all, 3, NULL), -EEXIST);
	for (uint32_t i = 0; i < NODES; i++)
		ar_free(&a[i]);
	teardown_nodes();
}

Test(tp, bad_groups_refused)
{
	const uint32_t dup[] = { 0, 1, 0 }, far[] = { 0, 99 },
		       without_me[] = { 1, 2 };

	setup_nodes(8, 256);
	cr_assert_eq(cs_tp_group_add(nodes[0].tp, 1, dup, 3, NULL), -EINVAL);
	cr_assert_eq(cs_tp_group_add(nodes[0].tp, 1, far, 2, NULL), -EINVAL);
	cr_assert_eq(cs_tp_group_add(nodes[0].tp, 1, without_me, 2, NULL),
		     -EINVAL);
	cr_assert_eq(cs_tp_group_add(nodes[0].tp, 0, dup, 2, NULL), -EINVAL);
	teardown_nodes();
}

/* Frames that must never reach an engine: counted and dropped. */
Test(tp, foreign_and_stale_frames)
{
	struct cs_pkt_hdr h;
	struct cs_tp_stats st;
	uint8_t pl[16] = { 0 };

	setup_nodes(8, 4);
	memset(&h, 0, sizeof(h));
	h.version = CS_PROTO_VERSION;
	h.type = CS_PKT_DATA;
	h.epoch = 5;
	h.group = 7;
	h.op = 9;
	h.len = sizeof(pl);
	cs_tp_rx(nodes[0].tp, 0, &h, pl, now); /* from itself */
	cs_tp_rx(nodes[0].tp, 1000, &h, pl, now); /* no such node */
	h.epoch = 4;
	cs_tp_rx(nodes[0].tp, 1, &h, pl, now);
	h.epoch = 6;
	cs_tp_rx(nodes[0].tp, 1, &h, pl, now);
	h.epoch = 5;
	h.type = CS_PKT_HEARTBEAT;
	cs_tp_rx(nodes[0].tp, 1, &h, pl, now);
	cs_tp_get_stats(nodes[0].tp, &st);
	cr_assert_eq(st.rx_bad_src, 3);
	cr_assert_eq(st.rx_stale_epoch, 1);
	cr_assert_eq(st.rx_future_epoch, 1);
	cr_assert_eq(st.rx_held, 0);
	teardown_nodes();
}

/* A frame of an op nobody posts here is held, then dropped at its ttl;
 * once the hold is full, new ones are left unacknowledged. */
Test(tp, held_frames_expire_and_hold_is_bounded)
{
	const uint32_t all[] = { 0, 1, 2 };
	struct cs_tp_stats st;
	struct ar a;

	setup_nodes(8, 2);
	cr_assert_eq(cs_tp_group_add(nodes[1].tp, 10, all, 3, NULL), 0);
	/* node 1 alone posts an op of group 10: node 2 never learns of it,
	 * node 0 never posts */
	ar_post(&a, &nodes[1], 10, 1, 3, 1, 64 * 1024, 0, 500000);
	pump(100);
	cs_tp_get_stats(nodes[2].tp, &st);
	cr_assert_eq(st.rx_held, 2, "held %lu", (unsigned long)st.rx_held);
	cr_assert_gt(st.rx_hold_full, 0);
	pump(1200); /* past the hold ttl (1 ms) and the op's deadline */
	cs_tp_get_stats(nodes[2].tp, &st);
	cr_assert_eq(st.rx_hold_expired, 2);
	cr_assert_eq(nodes[1].status[0], CS_ERR_TIMEOUT);
	ar_free(&a);
	teardown_nodes();
}

/*
 * Node 0 thinks group 10 is {0, 1}; node 2 thinks it is {0, 2}: node 2's
 * frames reach node 0 as a non-member's and never its op; both end at
 * their deadline instead of summing the wrong ranks.
 */
Test(tp, disagreeing_membership_never_mixes)
{
	const uint32_t g01[] = { 0, 1 }, g02[] = { 0, 2 };
	struct cs_tp_stats st;
	struct ar a0, a2;

	setup_nodes(8, 256);
	cr_assert_eq(cs_tp_group_add(nodes[0].tp, 10, g01, 2, NULL), 0);
	cr_assert_eq(cs_tp_group_add(nodes[2].tp, 10, g02, 2, NULL), 0);
	ar_post(&a0, &nodes[0], 10, 1, 2, 0, 1000, 0, 300000);
	ar_post(&a2, &nodes[2], 10, 1, 2, 1, 1000, 0, 300000);
	pump(400);
	cs_tp_get_stats(nodes[0].tp, &st);
	cr_assert_gt(st.rx_not_member, 0);
	cr_assert_eq(nodes[0].status[0], CS_ERR_TIMEOUT);
	cr_assert_eq(nodes[2].status[0], CS_ERR_TIMEOUT);
	ar_free(&a0);
	ar_free(&a2);
	teardown_nodes();
}

/* Node 1 dies mid-operation: the others' ops end with CS_ERR_PEER_LOST
 * naming its rank (node 2's session gives up, node 0 hears it from
 * membership), and an op posted after membership said so ends at once. */
Test(tp, lost_peer_named)
{
	const uint32_t ring[] = { 2, 1, 0 }; /* node 1 is rank 1 */
	struct ar a[NODES], late;

	setup_nodes(3, 256);
	for (uint32_t i = 0; i < NODES; i++)
		cr_assert_eq(cs_tp_group_add(nodes[i].tp, 10, ring, 3, NULL),
			     0);
	for (uint32_t i = 0; i < NODES; i++)
		ar_post(&a[i], &nodes[i], 10, 1, 3, 2 - i, 4u << 20, 0, 0);
	pump(3);
	dead[1] = true;
	/* node 2 (rank 0) sends to rank 1: its session gives up */
	for (unsigned k = 0; k < 200000 && !nodes[2].ndone; k++)
		pump(1);
	cr_assert_eq(nodes[2].status[0], CS_ERR_PEER_LOST);
	cr_assert_eq(nodes[2].culprit[0], 1);
	/* node 0 only hears from it: membership tells it */
	cr_assert_eq(nodes[0].ndone, 0);
	cr_assert_eq(cs_tp_peer_lost(nodes[0].tp, 1), 0);
	pump(1);
	cr_assert_eq(nodes[0].status[0], CS_ERR_PEER_LOST);
	cr_assert_eq(nodes[0].culprit[0], 1);
	ar_post(&late, &nodes[0], 10, 2, 3, 2, 1000, 1, 0);
	pump(1);
	cr_assert_eq(nodes[0].status[1], CS_ERR_PEER_LOST);
	for (uint32_t i = 0; i < NODES; i++)
		ar_free(&a[i]);
	ar_free(&late);
	teardown_nodes();
}

/*
 * A session that gives up on its peer (node 1 silent for a while: slow,
 * descheduled) ends every op with it, except one kept on stalls (a
 * service's long-lived flow, cs_tp_keep_on_stall()): that one goes on
 * when the peer answers again, to an exact result. A lost peer still
 * ends it.
 */
Test(tp, kept_op_outlives_a_stalled_session)
{
	const uint32_t pair[] = { 0, 1 };
	struct ar kept[2], plain[2], last;

	setup_nodes(3, 256);
	for (uint32_t i = 0; i < 2; i++)
		cr_assert_eq(cs_tp_group_add(nodes[i].tp, 10, pair, 2, NULL),
			     0);
	for (uint32_t i = 0; i < 2; i++) {
		ar_post(&kept[i], &nodes[i], 10, 1, 2, i, 1u << 20, 0, 0);
		cr_assert_eq(cs_tp_keep_on_stall(nodes[i].tp, 10, 1), 0);
		ar_post(&plain[i], &nodes[i], 10, 2, 2, i, 1u << 20, 1, 0);
	}
	cr_assert_eq(cs_tp_keep_on_stall(nodes[0].tp, 10, 99), -ENOENT);
	pump(3);
	dead[1] = true;
	for (unsigned k = 0; k < 200000 && !nodes[0].ndone; k++)
		pump(1);
	cr_assert_eq(nodes[0].status[1], CS_ERR_PEER_LOST);
	cr_assert_eq(nodes[0].status[0], -EINPROGRESS,
		     "the kept op ended with the session: %d",
		     nodes[0].status[0]);
	dead[1] = false;
	for (unsigned k = 0; k < 200000 && nodes[0].status[0] == -EINPROGRESS;
	     k++)
		pump(1);
	pump(200);
	for (uint32_t i = 0; i < 2; i++) {
		cr_assert_eq(nodes[i].status[0], 0, "node %u: %d", i,
			     nodes[i].status[0]);
		ar_check(&kept[i]);
	}
	/* membership ends a kept op */
	ar_post(&last, &nodes[0], 10, 3, 2, 0, 1u << 20, 2, 0);
	cr_assert_eq(cs_tp_keep_on_stall(nodes[0].tp, 10, 3), 0);
	cr_assert_eq(cs_tp_peer_lost(nodes[0].tp, 1), 0);
	pump(1);
	cr_assert_eq(nodes[0].status[2], CS_ERR_PEER_LOST);
	for (uint32_t i = 0; i < 2; i++) {
		ar_free(&kept[i]);
		ar_free(&plain[i]);
	}
	ar_free(&last);
	teardown_nodes();
}

/*
 * tp.early: a direct exchange (small allreduce) is reported ready once its
 * result is in, while its own frame still waits for an ACK (every pure ACK
 * to node 0 is lost); the core then resends it and ends the op when the
 * ACK gets through. Without tp.early (or without io->ready) the owner
 * hears nothing before io->done.
 */
static void early_case(bool on, const struct cs_tp_io *io)
{
	const uint32_t pair[] = { 0, 1 };
	struct ar a[2];
	struct cs_tp_stats st;

	early_on = on;
	use_io = io;
	setup_nodes(8, 256);
	for (uint32_t i = 0; i < 2; i++)
		cr_assert_eq(cs_tp_group_add(nodes[i].tp, 10, pair, 2, NULL),
			     0);
	drop_acks_to = 0;
	ar_post(&a[0], &nodes[0], 10, 1, 2, 0, 16, 0, 0);
	ar_post(&a[1], &nodes[1], 10, 1, 2, 1, 16, 0, 0);
	pump(20);
	cr_assert_eq(nodes[0].status[0], -EINPROGRESS,
		     "node 0 finished with its frame unacknowledged");
	cr_assert_eq(nodes[0].ready[0], on && io == &t_io_early ? 1 : 0);
	if (nodes[0].ready[0])
		ar_check(&a[0]); /* the result is final at ready */
	drop_acks_to = -1;
	pump(20000); /* the RTO fires; the resent frame's ACK gets through */
	for (uint32_t i = 0; i < 2; i++) {
		cr_assert_eq(nodes[i].status[0], 0, "node %u: %d", i,
			     nodes[i].status[0]);
		ar_check(&a[i]);
		ar_free(&a[i]);
	}
	cs_tp_get_stats(nodes[0].tp, &st);
	cr_assert_eq(st.ops_early, nodes[0].ready[0] ? 1u : 0u);
	cr_assert_eq(st.tx_retx_early > 0, nodes[0].ready[0] > 0);
	cr_assert_gt(st.tx_retx, 0);
	teardown_nodes();
	early_on = false;
	use_io = NULL;
}

Test(tp, early_ready_before_last_ack)
{
	early_case(true, &t_io_early);
}

Test(tp, early_off_waits_for_ack)
{
	early_case(false, &t_io_early);
	early_case(true, &t_io); /* no io->ready: nothing early either */
}

/* An id reused (trainer groups) while its early op still resends: the new
 * op is posted, the old one ends (its owner had its result already). */
Test(tp, early_op_id_reuse_ends_the_lingering_op)
{
	const uint32_t pair[] = { 0, 1 };
	struct ar a[2], b[2];
	struct cs_tp_stats st;

	early_on = true;
	use_io = &t_io_early;
	setup_nodes(8, 256);
	for (uint32_t i = 0; i < 2; i++) {
		cr_assert_eq(cs_tp_group_add(nodes[i].tp, 10, pair, 2, NULL),
			     0);
		cr_assert_eq(cs_tp_group_reuse_ids(nodes[i].tp, 10), 0);
	}
	drop_acks_to = 0;
	ar_post(&a[0], &nodes[0], 10, 1, 2, 0, 16, 0, 0);
	ar_post(&a[1], &nodes[1], 10, 1, 2, 1, 16, 0, 0);
	pump(20);
	cr_assert_eq(nodes[0].ready[0], 1);
	pump(2000); /* node 1 is done; node 0 still resends, unheard */
	cr_assert_eq(nodes[1].status[0], 0);
	cr_assert_eq(nodes[0].status[0], -EINPROGRESS);
	ar_post(&b[0], &nodes[0], 10, 1, 2, 0, 16, 1, 0);
	cr_assert_eq(nodes[0].status[0], CS_ERR_CANCELLED);
	ar_post(&b[1], &nodes[1], 10, 1, 2, 1, 16, 1, 0);
	drop_acks_to = -1;
	pump(20000);
	for (uint32_t i = 0; i < 2; i++) {
		cr_assert_eq(nodes[i].status[1], 0, "node %u: %d", i,
			     nodes[i].status[1]);
		ar_check(&b[i]);
		ar_check(&a[i]);
		ar_free(&a[i]);
		ar_free(&b[i]);
	}
	cs_tp_get_stats(nodes[0].tp, &st);
	cr_assert_eq(st.ops_early, 2u);
	cr_assert_eq(st.early_dropped, 1u);
	teardown_nodes();
	early_on = false;
	use_io = NULL;
}

/*
 * tp.rx_budget with rel.credit: two nodes send node 0 their whole input at
 * once (a direct exchange of 256 KiB) over node 0's slow link; node 0
 * splits its budget over them, so the link's queue stays within the budget
 * and a little slack; without it the senders' windows fill it. Results
 * exact either way.
 */
static uint64_t incast_peak(uint64_t budget)
{
	const uint32_t all[] = { 0, 1, 2 };
	const size_t count = 65536;
	struct cs_coll_params p;
	struct ar a[NODES];
	struct cs_tp_stats st;

	rx_budget = budget;
	peak_to0 = 0;
	slow0 = true;
	setup_nodes(8, 256);
	for (uint32_t i = 0; i < NODES; i++) {
		cr_assert_eq(cs_tp_group_add(nodes[i].tp, 10, all, 3, NULL), 0);
		a[i].buf = malloc(count * sizeof(float));
		a[i].count = count;
		a[i].n = NODES;
		for (size_t k = 0; k < count; k++)
			a[i].buf[k] = (float)(i + 1 + k % 7);
		cs_coll_params_default(&p, NULL);
		p.kind = CS_COLL_ALLREDUCE;
		p.nranks = NODES;
		p.rank = i;
		p.sendbuf = a[i].buf;
		p.recvbuf = a[i].buf;
		p.count = count;
		p.dtype = CS_F32;
		p.op = CS_SUM;
		p.direct_max = 1u << 30; /* every rank sends to every other */
		p.epoch = cs_tp_epoch(nodes[i].tp);
		p.start = now;
		cr_assert(cs_coll_is_direct(&p));
		cr_assert_eq(cs_coll_init(&p, &a[i].c), 0);
		cr_assert_eq(cs_tp_post(nodes[i].tp, 10, 1, &cs_coll_flow_ops,
					a[i].c, count * sizeof(float),
					(void *)(uintptr_t)0, now),
			     0);
	}
	pump(400000);
	for (uint32_t i = 0; i < NODES; i++) {
		cr_assert_eq(nodes[i].status[0], 0, "node %u: %d", i,
			     nodes[i].status[0]);
		ar_check(&a[i]);
		ar_free(&a[i]);
	}
	cs_tp_get_stats(nodes[0].tp, &st);
	if (budget) {
		cr_assert_eq(st.peak_senders, 2);
		cr_assert_gt(st.grants_set, 0);
	} else {
		cr_assert_eq(st.grants_set, 0);
	}
	cr_assert_eq(slowq_n, 0);
	slow0 = false;
	teardown_nodes();
	rx_budget = 0;
	return peak_to0;
}

Test(tp, rx_budget_bounds_incast)
{
	const uint64_t budget = 64 * 1024;
	uint64_t with = incast_peak(budget), without = incast_peak(0);

	cr_log_info("most bytes queued towards node 0: %llu with a %llu "
		    "budget, %llu without",
		    (unsigned long long)with, (unsigned long long)budget,
		    (unsigned long long)without);
	/* slack: a shrunk grant takes effect as what was granted drains */
	cr_assert_leq(with, budget + 2 * 9000);
	cr_assert_gt(without, 2 * budget);
}

/*
 * An op cancelled on one node (its trainer died) is announced to the
 * group: the others end theirs with the same error, blaming that node's
 * rank, at once rather than at their deadline; a member that had not
 * posted it yet ends it at its post. A retransmission for it is answered
 * again (the announcement may be lost).
 */
Test(tp, cancel_is_announced_to_the_group)
{
	const uint32_t all[] = { 0, 1, 2 };
	struct ar a[NODES];
	struct cs_tp_stats st;

	setup_nodes(8, 256);
	for (uint32_t i = 0; i < NODES; i++)
		cr_assert_eq(cs_tp_group_add(nodes[i].tp, 10, all, 3, NULL), 0);
	ar_post(&a[0], &nodes[0], 10, 7, 3, 0, 100000, 0, 0);
	ar_post(&a[2], &nodes[2], 10, 7, 3, 2, 100000, 0, 0);
	pump(5);
	cr_assert_eq(cs_tp_cancel(nodes[2].tp, 10, 7, CS_ERR_CANCELLED), 0);
	pump(20);
	cr_assert_eq(nodes[2].status[0], CS_ERR_CANCELLED);
	cr_assert_eq(nodes[0].status[0], CS_ERR_CANCELLED,
		     "node 0 was not told: %d", nodes[0].status[0]);
	cr_assert_eq(nodes[0].culprit[0], 2);
	/* node 1 posts it only now: it ends at once, the same way */
	ar_post(&a[1], &nodes[1], 10, 7, 3, 1, 100000, 0, 0);
	pump(2);
	cr_assert_eq(nodes[1].status[0], CS_ERR_CANCELLED);
	cr_assert_eq(nodes[1].culprit[0], 2);
	cs_tp_get_stats(nodes[2].tp, &st);
	cr_assert_geq(st.tx_aborts, 2);
	cs_tp_get_stats(nodes[0].tp, &st);
	cr_assert_eq(st.tx_aborts, 0, "an abort was echoed");
	for (uint32_t i = 0; i < NODES; i++)
		ar_free(&a[i]);
	teardown_nodes();
}

/* Op 8 of group 10 between nodes 0 and 1, node 0 first (its frames held
 * at node 1 for a while): both end well, exact. With @hold_full_was, node
 * 1's rx_hold_full must not have moved from it while they were held. */
static void next_op_runs(const uint64_t *hold_full_was)
{
	struct ar next[2];
	struct cs_tp_stats st;

	ar_post(&next[0], &nodes[0], 10, 8, 2, 0, 4096, 1, 0);
	pump(3);
	cs_tp_get_stats(nodes[1].tp, &st);
	if (hold_full_was)
		cr_assert_eq(st.rx_hold_full, *hold_full_was);
	ar_post(&next[1], &nodes[1], 10, 8, 2, 1, 4096, 1, 0);
	pump(20);
	for (uint32_t i = 0; i < 2; i++) {
		cr_assert_eq(nodes[i].status[1], 0, "node %u: %d", i,
			     nodes[i].status[1]);
		ar_check(&next[i]);
		ar_free(&next[i]);
	}
}

/*
 * Frames held for an op this node then refuses (its trainer's part was
 * cancelled before it reached the core: the IPC side's verdict refuses
 * it) leave the hold at once: kept until tp.hold_ttl they would take the
 * room of the next op's early frames, which would then go unacknowledged.
 */
Test(tp, refuse_drops_held_frames)
{
	const uint32_t two[] = { 0, 1 };
	struct cs_tp_stats st, st2;
	struct ar never;

	setup_nodes(8, 4);
	for (uint32_t i = 0; i < 2; i++)
		cr_assert_eq(cs_tp_group_add(nodes[i].tp, 10, two, 2, NULL), 0);
	ar_post(&never, &nodes[0], 10, 7, 2, 0, 64 * 1024, 0, 0);
	pump(20); /* node 1 never posts op 7: it holds what it can */
	cs_tp_get_stats(nodes[1].tp, &st);
	cr_assert_eq(st.rx_held, 4);
	cr_assert_eq(cs_tp_refuse(nodes[1].tp, 10, 7, CS_ERR_CANCELLED), 0);
	cs_tp_get_stats(nodes[1].tp, &st2);
	cr_assert_eq(st2.rx_done_op, st.rx_done_op + 4,
		     "the held frames stayed (%lu dropped)",
		     (unsigned long)(st2.rx_done_op - st.rx_done_op));
	pump(20);
	cr_assert_eq(nodes[0].status[0], CS_ERR_CANCELLED);
	cr_assert_eq(nodes[0].culprit[0], 1);
	/* the next op: node 0 first, its frames held at node 1 (room) */
	next_op_runs(&st2.rx_hold_full);
	ar_free(&never);
	teardown_nodes();
}

/*
 * An op dropped because the node view moved on (cs_tp_drop) is not
 * announced: a peer that has not seen the new view yet must not end its
 * op with a bare cancellation; it keeps waiting for its own view.
 */
Test(tp, drop_is_not_announced)
{
	const uint32_t all[] = { 0, 1, 2 };
	struct ar a[NODES];
	struct cs_tp_stats st;

	setup_nodes(8, 256);
	for (uint32_t i = 0; i < NODES; i++)
		cr_assert_eq(cs_tp_group_add(nodes[i].tp, 10, all, 3, NULL), 0);
	ar_post(&a[0], &nodes[0], 10, 7, 3, 0, 100000, 0, 0);
	ar_post(&a[2], &nodes[2], 10, 7, 3, 2, 100000, 0, 0);
	pump(5);
	cr_assert_eq(cs_tp_drop(nodes[2].tp, 10, 7, CS_ERR_PEER_LOST), 0);
	cr_assert_eq(cs_tp_drop(nodes[2].tp, 10, 99, CS_ERR_PEER_LOST),
		     -ENOENT);
	pump(20);
	cr_assert_eq(nodes[2].status[0], CS_ERR_PEER_LOST);
	cr_assert_eq(nodes[0].ndone, 0, "node 0 ended it: %d",
		     nodes[0].status[0]);
	cs_tp_get_stats(nodes[2].tp, &st);
	cr_assert_eq(st.tx_aborts, 0, "the drop was announced");
	cr_assert_eq(cs_tp_cancel(nodes[0].tp, 10, 7, CS_ERR_CANCELLED), 0);
	pump(5);
	cr_assert_eq(nodes[0].status[0], CS_ERR_CANCELLED);
	ar_free(&a[0]);
	ar_free(&a[2]);
	teardown_nodes();
}

/* Groups whose ids restart (trainer groups): a failure is answered only
 * while it is recent, so the id's op of a later incarnation, whose data
 * reaches the node that failed the old one before it posts the new one,
 * is held for it rather than told to abort. */
Test(tp, reused_id_after_a_failure_runs)
{
	const uint32_t all[] = { 0, 1, 2 };
	struct ar a[NODES], b[NODES];

	setup_nodes(8, 256);
	for (uint32_t i = 0; i < NODES; i++) {
		cr_assert_eq(cs_tp_group_add(nodes[i].tp, 10, all, 3, NULL), 0);
		cr_assert_eq(cs_tp_group_reuse_ids(nodes[i].tp, 10), 0);
	}
	for (uint32_t i = 0; i < NODES; i++)
		ar_post(&a[i], &nodes[i], 10, 7, 3, i, 100000, 0, 0);
	pump(3);
	cr_assert_eq(cs_tp_cancel(nodes[2].tp, 10, 7, CS_ERR_CANCELLED), 0);
	pump(20);
	for (uint32_t i = 0; i < NODES; i++)
		cr_assert_eq(nodes[i].status[0], CS_ERR_CANCELLED, "node %u",
			     i);
	now += 300000000; /* a new incarnation, later */
	ar_post(&b[0], &nodes[0], 10, 7, 3, 0, 1000, 1, 0);
	ar_post(&b[1], &nodes[1], 10, 7, 3, 1, 1000, 1, 0);
	pump(50); /* their frames reach node 2 first */
	ar_post(&b[2], &nodes[2], 10, 7, 3, 2, 1000, 1, 0);
	pump(5000);
	for (uint32_t i = 0; i < NODES; i++) {
		cr_assert_eq(nodes[i].status[1], 0, "node %u: %d", i,
			     nodes[i].status[1]);
		ar_check(&b[i]);
		ar_free(&b[i]);
		ar_free(&a[i]);
	}
	teardown_nodes();
}

/*
 * A member whose part ended by a peer's abort passes it on: a third member
 * that posts its part only after that (ids that restart: it did not keep
 * the abort) and sends only to the second one is answered by it, instead
 * of having its frames held there until its own deadline. Group order
 * {1, 0, 2}: on the ring node 1 sends to node 0 alone.
 */
Test(tp, peer_abort_is_passed_on_to_a_late_member)
{
	const uint32_t order[] = { 1, 0, 2 };
	struct ar a[NODES];
	struct cs_tp_stats st;

	setup_nodes(8, 256);
	ar_channels = 1;
	for (uint32_t i = 0; i < NODES; i++) {
		cr_assert_eq(cs_tp_group_add(nodes[i].tp, 10, order, 3, NULL),
			     0);
		cr_assert_eq(cs_tp_group_reuse_ids(nodes[i].tp, 10), 0);
	}
	ar_post(&a[0], &nodes[0], 10, 7, 3, 1, 100000, 0, 0);
	ar_post(&a[2], &nodes[2], 10, 7, 3, 2, 100000, 0, 0);
	pump(5);
	cr_assert_eq(cs_tp_cancel(nodes[2].tp, 10, 7, CS_ERR_CANCELLED), 0);
	pump(20);
	cr_assert_eq(nodes[0].status[0], CS_ERR_CANCELLED);
	ar_post(&a[1], &nodes[1], 10, 7, 3, 0, 100000, 0, 0);
	pump(20);
	cr_assert_eq(nodes[1].status[0], CS_ERR_CANCELLED,
		     "the late member was not told: %d", nodes[1].status[0]);
	cr_assert_eq(nodes[1].culprit[0], 2, "blamed rank %u",
		     nodes[1].culprit[0]);
	cs_tp_get_stats(nodes[0].tp, &st);
	cr_assert_eq(st.rx_held, 0);
	cr_assert_gt(st.tx_aborts, 0);
	for (uint32_t i = 0; i < NODES; i++)
		ar_free(&a[i]);
	ar_channels = 0;
	teardown_nodes();
}

/*
 * Ids that restart: a refusal older than TP_ABORT_REUSE_TTL is no longer
 * answered (the id could be a later incarnation's), so a member that
 * posts the refused op only then has its frames held. When they fill the
 * hold they go, and the refusal is told again, so the late member ends
 * its part and the hold is free for the next operation's early frames.
 */
Test(tp, stale_refusal_gives_up_a_full_hold)
{
	const uint32_t two[] = { 0, 1 };
	struct cs_tp_stats st;
	struct ar late;

	setup_nodes(8, 4);
	ar_channels = 1;
	for (uint32_t i = 0; i < 2; i++) {
		cr_assert_eq(cs_tp_group_add(nodes[i].tp, 10, two, 2, NULL), 0);
		cr_assert_eq(cs_tp_group_reuse_ids(nodes[i].tp, 10), 0);
	}
	cr_assert_eq(cs_tp_refuse(nodes[1].tp, 10, 7, CS_ERR_CANCELLED), 0);
	pump(5);
	now += 300000000; /* past TP_ABORT_REUSE_TTL */
	ar_post(&late, &nodes[0], 10, 7, 2, 0, 64 * 1024, 0, 0);
	pump(40);
	cr_assert_eq(nodes[0].status[0], CS_ERR_CANCELLED,
		     "the late member was not told: %d", nodes[0].status[0]);
	cr_assert_eq(nodes[0].culprit[0], 1);
	cs_tp_get_stats(nodes[1].tp, &st);
	cr_assert_eq(st.rx_held, 4);
	cr_assert_eq(st.rx_hold_reclaimed, 4);
	cr_assert_eq(st.rx_hold_full, 0);
	/* the next op: node 0 first, its frames held at node 1 */
	next_op_runs(&st.rx_hold_full);
	ar_free(&late);
	ar_channels = 0;
	teardown_nodes();
}

/* Op 1 of group 10 (nodes 0 and 1) on one channel, to the end: the
 * session on channel 0 between them measures the RTT. */
static void measure_rtt_0_1(struct ar a[2])
{
	ar_channels = 1;
	for (uint32_t i = 0; i < 2; i++)
		ar_post(&a[i], &nodes[i], 10, 1, 2, i, 256, 0, 0);
	pump(200);
	cr_assert_eq(nodes[0].ndone + nodes[1].ndone, 2);
}

/*
 * A session set up when the peer is already known starts from the RTT the
 * other sessions to it measured (they share its path): a tail loss on it
 * is repaired by a probe or an RTT-based timeout, tens of microseconds,
 * not after rel.rto_init (1 ms: 1000 rounds here) with no estimate.
 */
Test(tp, new_session_starts_from_the_peers_rtt)
{
	const uint32_t pair[] = { 0, 1 };
	struct ar a[2], b[2];
	cs_ns_t srtt, var;
	unsigned rounds = 0;

	setup_nodes(64, 256);
	for (uint32_t i = 0; i < 2; i++)
		cr_assert_eq(cs_tp_group_add(nodes[i].tp, 10, pair, 2, NULL),
			     0);
	/* op 1 on one channel: the session on channel 0 measures the RTT */
	measure_rtt_0_1(a);
	cr_assert_eq(cs_tp_peer_rtt(nodes[0].tp, 1, &srtt, &var), 0);
	cr_assert_lt(srtt, 100000, "srtt %llu ns", (unsigned long long)srtt);
	/* op 2 on two channels: channel 1 rides on a new session; node 0's
	 * frames on it (one per step: reduce-scatter, all-gather) are lost,
	 * so no later frame's ACK can reveal the loss: only a probe or a
	 * timeout can */
	ar_channels = 2;
	drop_src = 0;
	drop_ch = 1;
	drop_left = 2;
	for (uint32_t i = 0; i < 2; i++)
		ar_post(&b[i], &nodes[i], 10, 2, 2, i, 256, 1, 0);
	while (nodes[0].ndone + nodes[1].ndone < 4 && rounds < 3000) {
		pump(1);
		rounds++;
	}
	cr_assert_eq(drop_left, 0, "the frame to drop was never sent");
	cr_assert_eq(nodes[0].status[1], 0);
	cr_assert_eq(nodes[1].status[1], 0);
	cr_assert_lt(rounds, 500,
		     "the loss on the new session took %u us to repair",
		     rounds);
	for (uint32_t i = 0; i < 2; i++) {
		ar_check(&b[i]);
		ar_free(&a[i]);
		ar_free(&b[i]);
	}
	teardown_nodes();
}

/*
 * At a job's start no session has an RTT estimate. Node 0 runs one
 * allreduce with node 1 and one with node 2 at once; its frames to node 2
 * (one per step) are lost, so its session to node 2 measures nothing. It
 * takes the estimate its session to node 1 measured as soon as there is
 * one (cs_tp_poll(), rtt_seeded_late), and the loss is repaired by an
 * RTT-based probe or timeout, not after rel.rto_init (1 ms: 1000 rounds
 * here).
 */
Test(tp, session_with_no_estimate_takes_the_cores)
{
	const uint32_t g1[] = { 0, 1 }, g2[] = { 0, 2 };
	struct ar a[2], b[2];
	struct cs_tp_stats st;
	unsigned rounds = 0;

	setup_nodes(64, 256);
	cr_assert_eq(cs_tp_group_add(nodes[0].tp, 10, g1, 2, NULL), 0);
	cr_assert_eq(cs_tp_group_add(nodes[1].tp, 10, g1, 2, NULL), 0);
	cr_assert_eq(cs_tp_group_add(nodes[0].tp, 11, g2, 2, NULL), 0);
	cr_assert_eq(cs_tp_group_add(nodes[2].tp, 11, g2, 2, NULL), 0);
	ar_channels = 1;
	drop_src = 0;
	drop_dst = 2;
	drop_ch = 0;
	drop_left = 2;
	ar_post(&a[0], &nodes[0], 10, 1, 2, 0, 256, 0, 0);
	ar_post(&a[1], &nodes[1], 10, 1, 2, 1, 256, 0, 0);
	ar_post(&b[0], &nodes[0], 11, 1, 2, 0, 256, 1, 0);
	ar_post(&b[1], &nodes[2], 11, 1, 2, 1, 256, 0, 0);
	while (nodes[0].ndone + nodes[1].ndone + nodes[2].ndone < 4 &&
	       rounds < 3000) {
		pump(1);
		rounds++;
	}
	cr_assert_eq(drop_left, 0, "the frames to drop were never sent");
	cr_assert_eq(nodes[0].status[0], 0);
	cr_assert_eq(nodes[0].status[1], 0);
	cr_assert_eq(nodes[2].status[0], 0);
	cr_assert_lt(rounds, 500, "the loss took %u us to repair", rounds);
	cs_tp_get_stats(nodes[0].tp, &st);
	cr_assert_geq(st.rtt_seeded_late, 1);
	for (uint32_t i = 0; i < 2; i++) {
		ar_check(&a[i]);
		ar_check(&b[i]);
		ar_free(&a[i]);
		ar_free(&b[i]);
	}
	teardown_nodes();
}

/*
 * Node 1 is descheduled for 3 ms in the middle of an allreduce with node
 * 0 (frames to it wait, it does not poll). Node 0's session (RTO 200 us)
 * times out, spuriously, unless node 0 found itself away 1.5 ms before
 * (cs_tp_away(): CPUs shared with its peers): every session's RTO floor
 * is then tp.away_floor (3) times that, and the peer's stall passes with
 * no timeout. A stall too short to matter raises nothing. Exact results
 * either way.
 */
static void peer_stall(cs_ns_t away, struct cs_tp_stats *st)
{
	const uint32_t pair[] = { 0, 1 };
	struct ar a[2];
	unsigned k;

	setup_nodes(64, 256);
	for (uint32_t i = 0; i < 2; i++) {
		cr_assert_eq(cs_tp_group_add(nodes[i].tp, 10, pair, 2, NULL),
			     0);
		ar_post(&a[i], &nodes[i], 10, 1, 2, i, 1u << 18, 0, 0);
	}
	pump(30);
	cs_tp_away(nodes[0].tp, 20000, now);
	cs_tp_away(nodes[0].tp, away, now);
	stalled_node = 1;
	stall_until = now + 3000000;
	pump(10);
	cr_assert_eq(nodes[0].status[0], -EINPROGRESS,
		     "the allreduce ended before the stall");
	for (k = 0; k < 400000 && nodes[0].ndone + nodes[1].ndone < 2; k++)
		pump(1);
	for (uint32_t i = 0; i < 2; i++) {
		cr_assert_eq(nodes[i].status[0], 0, "node %u: %d", i,
			     nodes[i].status[0]);
		ar_check(&a[i]);
		ar_free(&a[i]);
	}
	cs_tp_get_stats(nodes[0].tp, st);
	teardown_nodes();
}

Test(tp, own_stall_keeps_a_peers_from_timing_out)
{
	struct cs_tp_stats st;

	peer_stall(0, &st);
	cr_assert_geq(st.rel_timeouts, 1, "no timeout to avoid");
	cr_assert_eq(st.away_raised, 0); /* 20 us: under rel.rto_min */
	cr_assert_eq(st.away_max, 20000);
	peer_stall(1500000, &st);
	cr_assert_eq(st.rel_timeouts, 0, "%" PRIu64 " timeouts",
		     st.rel_timeouts);
	cr_assert_eq(st.away_raised, 1);
	cr_assert_eq(st.away_max, 1500000);
}

/* An owner that replaces its core carries the RTT over. */
Test(tp, seed_rtt_checked)
{
	cs_ns_t srtt, var;

	setup_nodes(8, 16);
	cr_assert_eq(cs_tp_seed_rtt(nodes[0].tp, 0, 1000, 500), -EINVAL);
	cr_assert_eq(cs_tp_seed_rtt(nodes[0].tp, 16, 1000, 500), -EINVAL);
	cr_assert_eq(cs_tp_seed_rtt(nodes[0].tp, 1, 0, 0), -EINVAL);
	cr_assert_eq(cs_tp_peer_rtt(nodes[0].tp, 1, &srtt, &var), -ENOENT);
	cr_assert_eq(cs_tp_seed_rtt(nodes[0].tp, 1, 3000, 700), 0);
	cr_assert_eq(cs_tp_peer_rtt(nodes[0].tp, 1, &srtt, &var), 0);
	cr_assert_eq(srtt, 3000);
	cr_assert_eq(var, 700);
	teardown_nodes();
}

/*
 * An owner descheduled for 50 ms (a loaded machine) finds, when it runs
 * again, its retransmission timer long expired and the peers' ACKs queued
 * in its receive queue behind other frames; it reads the queue in bursts,
 * polling between them, as collstackd's lcore does. Nothing was lost, so
 * no timeout may fire: the loss timers wait for the queue to drain
 * (tp.rx_stall). Without that, the poll after the first burst timed the
 * session to node 1 out.
 */
Test(tp, descheduled_owner_reads_acks_before_timing_out)
{
	const uint32_t g01[] = { 0, 1 }, g02[] = { 0, 2 };
	struct ar a[2], b[2], c[2];
	struct cs_tp_stats st0, st1;
	static struct frame backlog[QMAX], cur[QMAX];
	unsigned nb = 0, k = 0;

	setup_nodes(64, 4096);
	for (uint32_t i = 0; i < 2; i++) {
		cr_assert_eq(cs_tp_group_add(nodes[i].tp, 10, g01, 2, NULL), 0);
		cr_assert_eq(cs_tp_group_add(nodes[2 * i].tp, 11, g02, 2, NULL),
			     0);
	}
	/* op 1 of group 10: the session 0 -> 1 learns its RTT */
	measure_rtt_0_1(a);
	/* bulk ops on both groups; a few rounds, so data is in flight */
	for (uint32_t i = 0; i < 2; i++) {
		ar_post(&b[i], &nodes[i], 10, 2, 2, i, 1 << 16, 1, 0);
		ar_post(&c[i], &nodes[2 * i], 11, 1, 2, i, 1 << 16, 2, 0);
	}
	pump(3);
	cs_tp_get_stats(nodes[0].tp, &st0);
	/* node 0 is descheduled: nodes 1 and 2 run 40 us (their ACKs for
	 * what node 0 sent leave: ack_delay 20 us); what they send node 0
	 * waits in its queue */
	for (unsigned r = 0; r < 40; r++) {
		unsigned n = qn;

		memcpy(cur, q, n * sizeof(cur[0]));
		qn = 0;
		for (unsigned i = 0; i < n; i++) {
			if (cur[i].dst == 0) {
				backlog[nb++] = cur[i];
				continue;
			}
			cs_tp_rx(nodes[cur[i].dst].tp, cur[i].src, &cur[i].h,
				 cur[i].data, now);
			free(cur[i].data);
		}
		cs_tp_poll(nodes[1].tp, now);
		cs_tp_poll(nodes[2].tp, now);
		now += 1000;
	}
	for (unsigned i = 0; i < qn; i++)
		backlog[nb++] = q[i];
	qn = 0;
	/* in the queue, node 2's frames come first, then node 1's */
	for (uint32_t src = 2; src >= 1; src--)
		for (unsigned i = 0; i < nb; i++)
			if (backlog[i].src == src)
				cur[k++] = backlog[i];
	cr_assert_eq(k, nb);
	cr_assert_gt(nb, 16, "only %u frames queued for node 0", nb);
	cr_assert(cur[0].src == 2 && cur[nb - 1].src == 1);
	/* node 0 runs again 50 ms later: bursts of 8 frames, a poll after
	 * each, then a poll with the queue empty */
	now += 50000000;
	for (unsigned i = 0; i < nb; i += 8) {
		for (unsigned j = i; j < nb && j < i + 8; j++) {
			cs_tp_rx(nodes[0].tp, cur[j].src, &cur[j].h,
				 cur[j].data, now);
			free(cur[j].data);
		}
		cs_tp_poll(nodes[0].tp, now);
		now += 100;
	}
	cs_tp_poll(nodes[0].tp, now);
	cs_tp_get_stats(nodes[0].tp, &st1);
	cr_assert_gt(st1.timers_held, st0.timers_held);
	cr_assert_eq(st1.rel_timeouts, st0.rel_timeouts,
		     "%llu spurious timeout(s) after the stall",
		     (unsigned long long)(st1.rel_timeouts - st0.rel_timeouts));
	/* the ops still finish, exact */
	pump(20000);
	for (uint32_t i = 0; i < 2; i++) {
		cr_assert_eq(nodes[i].status[1], 0);
		cr_assert_eq(nodes[2 * i].status[2], 0);
		ar_check(&b[i]);
		ar_check(&c[i]);
		ar_free(&a[i]);
		ar_free(&b[i]);
		ar_free(&c[i]);
	}
	teardown_nodes();
}

/*
 * Node 0 sends a 256 KiB allreduce long before node 1 posts its part, and
 * node 1 can hold 2 frames: the rest are refused, reported busy and
 * parked at node 0 (no loss, no timeout, no rate cut). Node 1's post
 * resumes them: both end well and exact within 100 us of the late post.
 * (Before parking, the refused frames went unacknowledged: the sender's
 * RTO fired while it waited, and each timeout halved its path's rate.)
 */
Test(tp, refused_frames_park_and_resume_at_the_post)
{
	const uint32_t two[] = { 0, 1 };
	struct cs_tp_stats s0, s1;
	struct ar a[2];
	unsigned rounds = 0;

	setup_nodes(8, 2);
	ar_channels = 1;
	for (uint32_t i = 0; i < 2; i++)
		cr_assert_eq(cs_tp_group_add(nodes[i].tp, 10, two, 2, NULL), 0);
	ar_post(&a[0], &nodes[0], 10, 1, 2, 0, 64 * 1024, 0, 0);
	pump(800); /* 0.8 ms: rel.rto_min is 200 us; tp.hold_ttl 1 ms */
	cs_tp_get_stats(nodes[0].tp, &s0);
	cs_tp_get_stats(nodes[1].tp, &s1);
	cr_assert_eq(s1.rx_held, 2);
	cr_assert_gt(s1.rx_hold_full, 0);
	cr_assert_gt(s0.rel_parked, 0);
	cr_assert_eq(s0.rel_timeouts, 0, "%lu timeouts while parked",
		     (unsigned long)s0.rel_timeouts);
	cr_assert_eq(s0.rel_fast_retx + s0.rel_tlp, 0);
	cr_assert_eq(nodes[0].status[0], -EINPROGRESS);
	ar_post(&a[1], &nodes[1], 10, 1, 2, 1, 64 * 1024, 0, 0);
	while (nodes[0].ndone + nodes[1].ndone < 2 && rounds < 5000) {
		pump(1);
		rounds++;
	}
	cr_assert_lt(rounds, 100, "ended %u us after the late post", rounds);
	for (uint32_t i = 0; i < 2; i++) {
		cr_assert_eq(nodes[i].status[0], 0, "node %u: %d", i,
			     nodes[i].status[0]);
		ar_check(&a[i]);
		ar_free(&a[i]);
	}
	cs_tp_get_stats(nodes[0].tp, &s0);
	cs_tp_get_stats(nodes[1].tp, &s1);
	cr_assert_gt(s1.tx_resumes, 0);
	cr_assert_gt(s0.rel_resumes, 0);
	cr_assert_eq(s0.rel_timeouts, 0);
	ar_channels = 0;
	teardown_nodes();
}

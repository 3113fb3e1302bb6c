/* SPDX-License-Identifier: MIT */
/*
 * The transport core (tp.h): sessions per (peer, session channel) that
 * outlive operations, routing of frames to operations by (epoch, group,
 * op id), a hold for frames of operations not posted yet, and the
 * scheduler between operations. docs/transport-core.md draws a frame's
 * path.
 *
 * How a frame finds its operation again on retransmission: every session
 * keeps one slot per sequence number in its window (seq & mask), holding
 * the operation and the engine's cookie; the cookie cs_rel keeps is the
 * slot's index. At most a window of sequence numbers is in flight, so a
 * slot is free again before its index comes round. An operation that ends
 * with frames still in flight (aborted) clears its slots: those sequence
 * numbers are then resent as zero-length fillers (CS_PKT_F_FILLER), which
 * the receiving core never hands to an engine.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "collstack/types.h"
#include "transport/tp.h"
#include "observe/tp_hooks.h" /* observe/: timeline and metrics */

#define TP_DONE_WIN 1024u /* finished op ids remembered per group */

const struct cs_cfg_entry cs_tp_cfg[] = {
	{ "tp.sess_channels", CS_CFG_U32,
	  offsetof(struct cs_tp_params, sess_channels), "4", 1, 64,
	  "reliable sessions per peer; engine channel c uses session "
	  "c % this (same on every node)" },
	{ "tp.small_bytes", CS_CFG_SIZE,
	  offsetof(struct cs_tp_params, small_bytes), "64K", 0, 1e12,
	  "operations of at most this size are latency class: they send "
	  "before bulk ones and their frames are acknowledged at once" },
	{ "tp.quantum", CS_CFG_U32, offsetof(struct cs_tp_params, quantum),
	  "16", 1, 65536,
	  "frames a bulk operation sends per round-robin turn" },
	{ "tp.hold_frames", CS_CFG_U32,
	  offsetof(struct cs_tp_params, hold_frames), "1024", 0, 1 << 20,
	  "frames of operations not posted here yet that are kept, each in "
	  "a buffer of the largest frame it held, allocated on first use "
	  "(beyond it they are refused: their senders park them until "
	  "this node posts an operation or the hold drains to half)" },
	{ "tp.hold_ttl", CS_CFG_NS, offsetof(struct cs_tp_params, hold_ttl),
	  "30s", 1000, 1e13,
	  "a held frame whose operation is not posted within this long is "
	  "dropped and counted (rx_hold_expired)" },
	{ "tp.max_ops", CS_CFG_U32, offsetof(struct cs_tp_params, max_ops),
	  "1024", 1, 1 << 20, "operations in flight at once per core" },
	{ "tp.max_groups", CS_CFG_U32,
	  offsetof(struct cs_tp_params, max_groups), "256", 1, 1 << 16,
	  "groups known at once per core" },
	{ "tp.max_nodes", CS_CFG_U32, offsetof(struct cs_tp_params, max_nodes),
	  "1024", 2, 1 << 16, "node ids are below this" },
	{ "tp.early", CS_CFG_BOOL, offsetof(struct cs_tp_params, early), "1", 0,
	  1,
	  "an operation whose engine resends from its own copy (a direct "
	  "exchange) is reported ready to its owner once its result is "
	  "final, before its own last frames are acknowledged; the core "
	  "goes on resending them (io->ready)" },
	{ "tp.rx_budget", CS_CFG_SIZE, offsetof(struct cs_tp_params, rx_budget),
	  "0", 0, 1ull << 32,
	  "receiver credit: bytes this node lets all its senders have in "
	  "flight towards it, split evenly over the sessions that sent it "
	  "data within tp.rx_active (senders honour it with rel.credit=1; "
	  "0: every session keeps rel.credit_init)" },
	{ "tp.rx_stall", CS_CFG_NS, offsetof(struct cs_tp_params, rx_stall),
	  "50us", 0, 1e10,
	  "a poll this long after the previous one that finds frames "
	  "waiting runs no loss timer (RTO, probe, RACK) until the receive "
	  "queue is drained or as long again has passed: the owner was "
	  "descheduled, and the ACKs may be queued (0: off)" },
	{ "tp.away_floor", CS_CFG_U32,
	  offsetof(struct cs_tp_params, away_floor), "3", 0, 64,
	  "the sidecar's own stalls (its lcore away from the port: "
	  "descheduled or busy) raise every session's RTO floor to this "
	  "many times the stall, halving every rel.rto_learn: peers sharing "
	  "CPUs the same way stall as long, and a timeout then would be "
	  "spurious (0: off)" },
	{ "tp.rx_active", CS_CFG_NS, offsetof(struct cs_tp_params, rx_active),
	  "1ms", 1000, 1e10,
	  "a session counts as sending to this node for tp.rx_budget while "
	  "its last new data is this recent" },
};
const size_t cs_tp_cfg_len = CS_ARRAY_SIZE(cs_tp_cfg);

struct tp_op;

struct tp_slot {
	struct tp_op *op; /* NULL: resend as a filler */
	uint64_t cookie; /* the engine's */
};

struct tp_sess {
	struct cs_rel rel;
	struct cs_tp *tp;
	struct tp_slot *slot; /* window entries, by seq & mask */
	uint32_t node, ch;
	cs_ns_t last_rx; /* new data last arrived (tp.rx_budget) */
	uint64_t grant; /* what tp_grants() last set (0: not yet) */
	bool busy; /* refused a frame (hold full), peer not resumed yet */
	uint64_t busy_posts; /* tp->posts at its last refusal */
};

struct tp_peer {
	struct cs_path path;
	bool lost; /* a session to it failed */
	cs_ns_t seed_srtt, seed_var; /* cs_tp_seed_rtt(); 0: none */
	struct tp_sess *sess[]; /* sess_channels, set up on first use */
};

struct tp_group {
	uint32_t id, n, rank;
	uint32_t *nodes; /* nodes[rank] */
	int32_t *rank_of; /* [max_nodes], -1: not a member */
	uint32_t live; /* ops in flight */
	bool reuse; /* cs_tp_group_reuse_ids() */
	uint32_t done_id[TP_DONE_WIN];
	uint64_t done_valid[TP_DONE_WIN / 64];
};

struct tp_op {
	struct tp_group *g;
	uint32_t id;
	const struct cs_flow_ops *ops;
	void *flow;
	void *user;
	bool latency;
	uint32_t nch;
	struct cs_flow_tx *pend; /* per channel: pulled, not sent */
	bool *has_pend;
	struct tp_sess **sess; /* per channel: where it sends (NULL: nothing) */
	uint32_t slots; /* frames in flight in sessions */
	bool ready; /* io->ready told (tp.early) */
	bool peer_aborted; /* ended by a peer's TP_CTRL_ABORT: not echoed */
	bool keep_on_stall; /* cs_tp_keep_on_stall() */
	struct tp_op *hnext;
};

struct tp_held {
	struct cs_pkt_hdr hdr;
	uint32_t src;
	cs_ns_t at;
	uint8_t *data; /* kept for reuse; grown to the largest frame */
	uint32_t cap;
};

/* An operation that failed here, or that a peer said failed there: kept
 * so that a peer still sending for it is told (TP_CTRL_ABORT), and so
 * that a peer's abort of one not posted here yet ends it at its post. */
#define TP_ABORTS 64
#define TP_ABORT_RETELL 100000 /* ns between two answers to one op's data */
#define TP_ABORT_REUSE_TTL                                                     \
	200000000 /* ns: answered, in groups whose ids                         \
		   * restart */
#define TP_CTRL_ABORT                                                          \
	1 /* CS_PKT_CTRL, in hdr.step; hdr.offset: -error,                     \
	   * hdr.credit: the culprit's node (UINT32_MAX: none) */
struct tp_abort {
	uint32_t group, op, culprit_node;
	int err;
	bool valid, remote; /* remote: a peer's, for an op not posted here */
	/* local, in a group whose ids restart, past TP_ABORT_REUSE_TTL: not
	 * answered (a later incarnation's op may carry the id), its frames
	 * held, until the hold fills (tp_hold_reclaim()); sticky: answered
	 * again since, until this node posts the id */
	bool stale, sticky;
	uint32_t from; /* remote: the node that said so */
	cs_ns_t at, told; /* when, and when a peer was last told */
};

struct cs_tp {
	struct cs_tp_params p;
	struct cs_xport_params xp;
	const struct cs_tp_io *io;
	void *owner;
	uint32_t self, epoch;
	struct tp_peer **peer; /* [max_nodes] */
	struct tp_sess **sess; /* every session, for timers and ACKs */
	uint32_t nsess, sess_cap;
	struct tp_group **groups;
	uint32_t ngroups;
	struct tp_op **ops; /* in flight, in posting order */
	uint32_t nops;
	struct tp_op **hash;
	uint32_t hmask;
	struct tp_held *held;
	uint32_t nheld;
	uint32_t nbusy; /* sessions with busy set */
	uint64_t posts; /* cs_tp_post() calls that posted an op */
	uint32_t rr; /* next bulk op's turn */
	unsigned room; /* frames io->xmit takes in this poll */
	cs_ns_t grant_at; /* tp_grants() next runs */
	struct tp_abort aborts[TP_ABORTS];
	uint32_t abort_next;
	cs_ns_t now; /* the last time given (cs_tp_rx(), cs_tp_poll()) */
	/* Loss timers wait for the receive queue (cs_tp_poll()): the last
	 * poll, frames handed in since, and while frames keep coming after
	 * a gap, until when the loss timers are held. */
	cs_ns_t last_poll;
	uint32_t rx_since_poll;
	bool draining;
	cs_ns_t drain_until;
	/* tp.away_floor times the owner's longest recent stall
	 * (cs_tp_away()), and when it was set */
	cs_ns_t away_floor, away_at;
	struct cs_tp_stats st;
};

/* tp_grants() runs at most this often, and at once when a session starts
 * sending; no grant goes below TP_GRANT_MIN (two jumbo frames). */
#define TP_GRANT_PERIOD 50000 /* ns */
#define TP_GRANT_MIN (2u * 9000u)

int cs_tp_params_default(struct cs_tp_params *p)
{
	return cs_cfg_defaults(cs_tp_cfg, cs_tp_cfg_len, p);
}

/* ---- sessions ---------------------------------------------------------- */

static void tp_acked(void *owner, uint64_t cookie, uint32_t len)
{
	struct tp_sess *s = owner;
	struct tp_slot *sl = &s->slot[cookie & s->rel.mask];
	struct tp_op *op = sl->op;

	(void)len;
	if (!op)
		return;
	sl->op = NULL;
	op->slots--;
	if (op->ops->on_acked(op->flow, sl->cookie))
		s->tp->st.bad_acked++;
}

static const struct cs_rel_ops tp_rel_ops = { .acked = tp_acked };

/* Both ends derive a session's first sequence numbers from who talks to
 * whom on which session channel in which epoch; near the wrap, so long
 * runs cross it. */
static uint32_t tp_isn(uint32_t from, uint32_t to, uint32_t ch, uint32_t epoch)
{
	uint64_t z = (uint64_t)from * 0x9e3779b97f4a7c15ull ^
		     (uint64_t)to * 0xd1b54a32d192ed03ull ^
		     ((uint64_t)ch << 32 | epoch);

	z = (z ^ (z >> 29)) * 0xbf58476d1ce4e5b9ull;
	z ^= z >> 32;
	return 0xfffff000u + (uint32_t)(z & 0xfff);
}

static struct tp_peer *tp_peer(struct cs_tp *tp, uint32_t node)
{
	struct tp_peer *pr = tp->peer[node];

	if (pr)
		return pr;
	pr = calloc(1, sizeof(*pr) + tp->p.sess_channels * sizeof(pr->sess[0]));
	if (!pr)
		return NULL;
	if (cs_path_init(&pr->path, &tp->xp.pacer, &tp->xp.cc)) {
		free(pr);
		return NULL;
	}
	tp->peer[node] = pr;
	return pr;
}

/* The best RTT estimate for a new session to @pr: what the other
 * sessions to the peer measured (they share its path), else what the
 * owner seeded (cs_tp_seed_rtt(): an earlier core's estimate). */
static bool tp_peer_rtt(const struct tp_peer *pr, uint32_t nch, cs_ns_t *srtt,
			cs_ns_t *var)
{
	for (uint32_t c = 0; c < nch; c++)
		if (pr->sess[c] &&
		    cs_rel_stats(&pr->sess[c]->rel)->rtt_samples &&
		    cs_rel_rtt(&pr->sess[c]->rel, srtt, var))
			return true;
	if (!pr->seed_srtt)
		return false;
	*srtt = pr->seed_srtt;
	*var = pr->seed_var;
	return true;
}

/* The largest RTT estimate any session of this core measured (every
 * peer of a job is a few switch hops away): the last resort for a
 * session whose own peer gave it none. */
static bool tp_core_rtt(const struct cs_tp *tp, cs_ns_t *srtt, cs_ns_t *var)
{
	*srtt = *var = 0;
	for (uint32_t i = 0; i < tp->nsess; i++) {
		const struct cs_rel *r = &tp->sess[i]->rel;
		cs_ns_t s, v;

		if (cs_rel_stats(r)->rtt_samples && cs_rel_rtt(r, &s, &v) &&
		    s > *srtt) {
			*srtt = s;
			*var = v;
		}
	}
	return *srtt != 0;
}

/* The core's RTT estimate for late seeding, found once per poll. */
struct tp_core_est {
	bool done;
	cs_ns_t srtt, var;
};

/*
 * A session that sent with no estimate (all are set up before any RTT
 * was measured, at a job's start) would wait rel.rto_init (1 ms, then
 * doubling) for any loss of its first frames or of their ACKs: it takes
 * one from the peer's other sessions or, failing that, from the core, as
 * soon as one exists (cs_rel_seed_rtt_late(); counter rtt_seeded_late).
 */
static void tp_seed_late(struct cs_tp *tp, struct tp_sess *s, cs_ns_t now,
			 struct tp_core_est *ce)
{
	cs_ns_t srtt, var;

	if (!tp_peer_rtt(tp->peer[s->node], tp->p.sess_channels, &srtt, &var)) {
		if (!ce->done) {
			ce->done = true;
			tp_core_rtt(tp, &ce->srtt, &ce->var);
		}
		if (!ce->srtt)
			return;
		srtt = ce->srtt;
		var = ce->var;
	}
	cs_rel_seed_rtt_late(&s->rel, srtt, var, now);
	tp->st.rtt_seeded_late++;
}

/* The RTO floor the owner's own stalls ask for (cs_tp_away()) at @now:
 * halved every rel.rto_learn, as a session's learnt floor is. */
static cs_ns_t tp_away_floor(const struct cs_tp *tp, cs_ns_t now)
{
	return cs_rel_floor_at(tp->away_floor, tp->away_at,
			       tp->xp.rel.rto_learn, now);
}

void cs_tp_away(struct cs_tp *tp, cs_ns_t away, cs_ns_t now)
{
	cs_ns_t f = (cs_ns_t)tp->p.away_floor * away, cur;

	if (away > tp->st.away_max)
		tp->st.away_max = away;
	if (!tp->p.away_floor || !tp->xp.rel.rto_learn ||
	    f < tp->xp.rel.rto_min)
		return;
	/* a floor raised by less than a quarter is not worth a pass over
	 * every session */
	cur = tp_away_floor(tp, now);
	if (f <= cur + cur / 4)
		return;
	tp->away_floor = f;
	tp->away_at = now;
	tp->st.away_raised++;
	for (uint32_t i = 0; i < tp->nsess; i++)
		cs_rel_raise_floor(&tp->sess[i]->rel, f, now);
}

/* A new session starts from its peer's RTT instead of rel.rto_init with
 * no estimate (which would leave a loss on it to a 1 ms timeout, with no
 * tail loss probe): sessions on other channels and new cores after a view
 * change then recover as fast as the ones that measured. */
static void tp_seed(const struct tp_peer *pr, struct tp_sess *s)
{
	cs_ns_t srtt, var;

	if (tp_peer_rtt(pr, s->tp->p.sess_channels, &srtt, &var))
		cs_rel_seed_rtt(&s->rel, srtt, var);
}

/* The session to @node on session channel @ch, set up on first use (the
 * only allocation a frame can cause: once per peer and channel). */
static struct tp_sess *tp_sess(struct cs_tp *tp, uint32_t node, uint32_t ch)
{
	struct tp_peer *pr = tp_peer(tp, node);
	struct tp_sess *s;

	if (!pr)
		return NULL;
	if (pr->sess[ch])
		return pr->sess[ch];
	if (tp->nsess == tp->sess_cap) {
		uint32_t cap = tp->sess_cap ? 2 * tp->sess_cap : 16;
		struct tp_sess **v = realloc(tp->sess, cap * sizeof(*v));

		if (!v)
			return NULL;
		tp->sess = v;
		tp->sess_cap = cap;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->slot = calloc(tp->xp.rel.window, sizeof(*s->slot));
	if (!s->slot ||
	    cs_rel_init(&s->rel, &tp->xp.rel, &pr->path, &tp_rel_ops, s,
			tp_isn(tp->self, node, ch, tp->epoch),
			tp_isn(node, tp->self, ch, tp->epoch))) {
		free(s->slot);
		free(s);
		return NULL;
	}
	s->tp = tp;
	s->node = node;
	s->ch = ch;
	tp_seed(pr, s);
	cs_rel_raise_floor(&s->rel, tp_away_floor(tp, tp->now), tp->now);
	pr->sess[ch] = s;
	tp->sess[tp->nsess++] = s;
	tp->st.sessions++;
	return s;
}

/* ---- groups and operations -------------------------------------------- */

static struct tp_group *tp_group(const struct cs_tp *tp, uint32_t id)
{
	for (uint32_t i = 0; i < tp->ngroups; i++)
		if (tp->groups[i]->id == id)
			return tp->groups[i];
	return NULL;
}

static bool tp_recently_done(const struct tp_group *g, uint32_t id)
{
	uint32_t i = id % TP_DONE_WIN;

	return !g->reuse && (g->done_valid[i / 64] >> (i % 64) & 1) &&
	       g->done_id[i] == id;
}

static void tp_mark_done(struct tp_group *g, uint32_t id)
{
	uint32_t i = id % TP_DONE_WIN;

	g->done_valid[i / 64] |= 1ull << (i % 64);
	g->done_id[i] = id;
}

static uint32_t tp_hash(const struct cs_tp *tp, uint32_t group, uint32_t id)
{
	uint64_t z = ((uint64_t)group << 32 | id) * 0x9e3779b97f4a7c15ull;

	return (uint32_t)(z >> 40) & tp->hmask;
}

static struct tp_op *tp_op_find(const struct cs_tp *tp, uint32_t group,
				uint32_t id)
{
	struct tp_op *op = tp->hash[tp_hash(tp, group, id)];

	while (op && (op->g->id != group || op->id != id))
		op = op->hnext;
	return op;
}

static void tp_op_unhash(struct cs_tp *tp, struct tp_op *op)
{
	struct tp_op **pp = &tp->hash[tp_hash(tp, op->g->id, op->id)];

	while (*pp != op)
		pp = &(*pp)->hnext;
	*pp = op->hnext;
}

int cs_tp_group_add(struct cs_tp *tp, uint32_t id, const uint32_t *nodes,
		    uint32_t n, uint32_t *rank)
{
	struct tp_group *g;
	int64_t me = -1;

	if (!id || !n || !nodes)
		return -EINVAL;
	if (tp_group(tp, id))
		return -EEXIST;
	if (tp->ngroups == tp->p.max_groups)
		return -ENOSPC;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->nodes = malloc(n * sizeof(*g->nodes));
	g->rank_of = malloc(tp->p.max_nodes * sizeof(*g->rank_of));
	if (!g->nodes || !g->rank_of)
		goto out_free;
	memset(g->rank_of, 0xff, tp->p.max_nodes * sizeof(*g->rank_of));
	for (uint32_t r = 0; r < n; r++) {
		if (nodes[r] >= tp->p.max_nodes || g->rank_of[nodes[r]] >= 0)
			goto out_inval;
		g->rank_of[nodes[r]] = (int32_t)r;
		g->nodes[r] = nodes[r];
		if (nodes[r] == tp->self)
			me = r;
	}
	if (me < 0)
		goto out_inval;
	g->id = id;
	g->n = n;
	g->rank = (uint32_t)me;
	tp->groups[tp->ngroups++] = g;
	if (rank)
		*rank = g->rank;
	return 0;
out_inval:
	free(g->rank_of);
	free(g->nodes);
	free(g);
	return -EINVAL;
out_free:
	free(g->rank_of);
	free(g->nodes);
	free(g);
	return -ENOMEM;
}

int cs_tp_group_remove(struct cs_tp *tp, uint32_t id)
{
	for (uint32_t i = 0; i < tp->ngroups; i++) {
		struct tp_group *g = tp->groups[i];

		if (g->id != id)
			continue;
		if (g->live)
			return -EBUSY;
		tp->groups[i] = tp->groups[--tp->ngroups];
		free(g->rank_of);
		free(g->nodes);
		free(g);
		return 0;
	}
	return -ENOENT;
}

/* A new DATA frame for @op from node @src: to its engine, in ranks. */
static void tp_deliver(struct cs_tp *tp, struct tp_op *op, struct tp_sess *s,
		       uint32_t src, const struct cs_pkt_hdr *h,
		       const void *payload, cs_ns_t now)
{
	int32_t rank = op->g->rank_of[src];
	struct cs_pkt_hdr hh;
	int ret;

	if (rank < 0) {
		tp->st.rx_not_member++;
		return;
	}
	hh = *h;
	hh.src = (uint16_t)rank;
	ret = op->ops->on_data(op->flow, now, &hh, payload);
	if (ret < 0)
		tp->st.rx_proto++;
	/* the senders of a small op, and of an op's last frames, wait for
	 * these ACKs to finish: no coalescing delay for them. An engine
	 * whose streams end at different times (all-to-all: a stream per
	 * peer) names each stream's last frame itself (CS_FLOW_RX_ACK_NOW),
	 * else every sender but the last waits rel.ack_delay for it. */
	if (s && (op->latency || ret == CS_FLOW_RX_ACK_NOW ||
		  (op->ops->result_ready && op->ops->result_ready(op->flow))))
		cs_rel_ack_at_once(&s->rel);
}

/* Keep a frame of an operation not posted here yet (room was checked). */
static void tp_hold(struct cs_tp *tp, uint32_t src, const struct cs_pkt_hdr *h,
		    const void *payload, cs_ns_t now)
{
	struct tp_held *k = &tp->held[tp->nheld];

	if (h->len > k->cap) {
		uint8_t *d = realloc(k->data, h->len);

		if (!d) {
			/* not kept, but acknowledged: the op will miss it and
			 * end at its deadline; counted like an expiry */
			tp->st.rx_hold_expired++;
			return;
		}
		k->data = d;
		k->cap = h->len;
	}
	k->hdr = *h;
	k->src = src;
	k->at = now;
	if (h->len)
		memcpy(k->data, payload, h->len);
	tp->nheld++;
	tp->st.rx_held++;
	if (tp->nheld > tp->st.peak_held)
		tp->st.peak_held = tp->nheld;
}

/* Held frame @i stays, at position *@j (swapped: buffers are kept). */
static void tp_held_keep(struct cs_tp *tp, uint32_t i, uint32_t *j)
{
	if (i != *j) {
		struct tp_held t = tp->held[*j];

		tp->held[*j] = tp->held[i];
		tp->held[i] = t;
	}
	(*j)++;
}

/* Feed @op the frames held for it; keep the others in order. */
static void tp_replay(struct cs_tp *tp, struct tp_op *op, cs_ns_t now)
{
	uint32_t j = 0;

	for (uint32_t i = 0; i < tp->nheld; i++) {
		struct tp_held *k = &tp->held[i];

		if (k->hdr.group == op->g->id && k->hdr.op == op->id) {
			struct tp_sess *s =
				tp->peer[k->src]
					? tp->peer[k->src]
						  ->sess[k->hdr.channel %
							 tp->p.sess_channels]
					: NULL;

			tp_deliver(tp, op, s, k->src, &k->hdr, k->data, now);
			tp->st.rx_replayed++;
			continue;
		}
		tp_held_keep(tp, i, &j);
	}
	tp->nheld = j;
}

static void tp_abort_unposted(struct cs_tp *tp, const struct tp_held *k);

static void tp_expire_held(struct cs_tp *tp, cs_ns_t now)
{
	uint32_t j = 0;

	for (uint32_t i = 0; i < tp->nheld; i++) {
		struct tp_held *k = &tp->held[i];

		if (now - k->at >= tp->p.hold_ttl) {
			tp->st.rx_hold_expired++;
			tp_abort_unposted(tp, k);
			continue;
		}
		tp_held_keep(tp, i, &j);
	}
	tp->nheld = j;
}

static bool tp_group_lost(const struct cs_tp *tp, const struct tp_group *g,
			  uint32_t *rank)
{
	for (uint32_t r = 0; r < g->n; r++) {
		const struct tp_peer *pr = tp->peer[g->nodes[r]];

		if (pr && pr->lost) {
			*rank = r;
			return true;
		}
	}
	return false;
}

/* ---- aborts (TP_CTRL_ABORT) --------------------------------------------- */

static bool tp_room(struct cs_tp *tp);
static void tp_xmit(struct cs_tp *tp, uint32_t node, struct cs_pkt_hdr *h,
		    const void *payload, uint32_t len);

static struct tp_abort *tp_abort_find(struct cs_tp *tp, uint32_t group,
				      uint32_t id, bool remote)
{
	for (uint32_t i = 0; i < TP_ABORTS; i++) {
		struct tp_abort *a = &tp->aborts[i];

		if (a->valid && a->group == group && a->op == id &&
		    a->remote == remote)
			return a;
	}
	return NULL;
}

static struct tp_abort *tp_abort_add(struct cs_tp *tp, uint32_t group,
				     uint32_t id, bool remote)
{
	struct tp_abort *a = tp_abort_find(tp, group, id, remote);

	if (!a)
		a = &tp->aborts[tp->abort_next++ % TP_ABORTS];
	memset(a, 0, sizeof(*a));
	a->group = group;
	a->op = id;
	a->remote = remote;
	a->valid = true;
	return a;
}

/* Tell @node that operation @a failed here. Best effort: with no room
 * now, the peer's next frame for it asks again. */
static void tp_tell_abort(struct cs_tp *tp, uint32_t node, struct tp_abort *a)
{
	struct cs_pkt_hdr h;

	if (!tp_room(tp))
		return;
	memset(&h, 0, sizeof(h));
	h.version = CS_PROTO_VERSION;
	h.type = CS_PKT_CTRL;
	h.step = TP_CTRL_ABORT;
	h.group = a->group;
	h.op = a->op;
	h.offset = (uint32_t)-a->err;
	h.credit = a->culprit_node;
	tp_xmit(tp, node, &h, NULL, 0);
	a->told = tp->now;
	tp->st.tx_aborts++;
}

/* A held frame expired (tp.hold_ttl): this node has not posted its
 * operation in that long. Its sender, which has it acknowledged, would
 * wait until its own deadline: it is told the operation timed out here
 * (naming this node), and so is every later frame of it. */
static void tp_abort_unposted(struct cs_tp *tp, const struct tp_held *k)
{
	struct tp_group *g = tp_group(tp, k->hdr.group);
	struct tp_abort *a;

	if (!g || tp_op_find(tp, k->hdr.group, k->hdr.op))
		return;
	a = tp_abort_find(tp, k->hdr.group, k->hdr.op, false);
	if (!a) {
		a = tp_abort_add(tp, k->hdr.group, k->hdr.op, false);
		a->err = CS_ERR_TIMEOUT;
		a->culprit_node = tp->self;
		a->at = tp->now;
	}
	if (tp->now - a->told >= TP_ABORT_RETELL || a->told < a->at)
		tp_tell_abort(tp, k->src, a);
}

/* A peer's TP_CTRL_ABORT: its part of (group, op) failed with an error;
 * ours ends with the same one (blaming whom the peer blamed), or, not
 * posted yet, at its post. */
static void tp_on_abort(struct cs_tp *tp, uint32_t src,
			const struct cs_pkt_hdr *h, cs_ns_t now)
{
	struct tp_group *g = tp_group(tp, h->group);
	struct tp_op *op;
	struct tp_abort *a;
	int err = -(int)(uint32_t)h->offset;
	uint32_t culprit;

	if (h->step != TP_CTRL_ABORT || h->len) {
		tp->st.rx_proto++;
		return;
	}
	if (!g || g->rank_of[src] < 0) {
		tp->st.rx_not_member++;
		return;
	}
	if (err > CS_ERR_PEER_LOST || err < CS_ERR_PROTO)
		err = CS_ERR_PROTO; /* not one of ours: a peer gone wrong */
	culprit = h->credit < tp->p.max_nodes && g->rank_of[h->credit] >= 0
			  ? (uint32_t)g->rank_of[h->credit]
			  : (uint32_t)g->rank_of[src];
	tp->st.rx_aborts++;
	op = tp_op_find(tp, h->group, h->op);
	if (op) {
		op->peer_aborted = true;
		op->ops->abort(op->flow, err, culprit);
		return;
	}
	/* ids that restart (trainer groups) could meet a later op of the
	 * same id: only remembered for groups whose ids never repeat */
	if (g->reuse || tp_recently_done(g, h->op))
		return;
	a = tp_abort_add(tp, h->group, h->op, true);
	a->err = err;
	a->culprit_node = g->nodes[culprit];
	a->from = src;
	a->at = now;
}

static void tp_finish(struct cs_tp *tp, uint32_t idx, int status,
		      uint32_t culprit);

int cs_tp_post(struct cs_tp *tp, uint32_t group, uint32_t op_id,
	       const struct cs_flow_ops *ops, void *flow, uint64_t bytes,
	       void *user, cs_ns_t now)
{
	struct tp_group *g = tp_group(tp, group);
	struct tp_op *op;
	uint32_t h, culprit;
	int ret = -ENOMEM;

	if (!g)
		return -ENOENT;
	op = tp_op_find(tp, group, op_id);
	if (op && op->ready && g->reuse) {
		/* its owner has its result: the id's new op wins, the old
		 * one's unacknowledged frames are given up on */
		tp->st.early_dropped++;
		op->peer_aborted = true; /* nothing to tell: it succeeded */
		op->ops->abort(op->flow, CS_ERR_CANCELLED, UINT32_MAX);
		for (uint32_t i = 0; i < tp->nops; i++)
			if (tp->ops[i] == op) {
				tp_finish(tp, i, CS_ERR_CANCELLED, UINT32_MAX);
				break;
			}
		op = NULL;
	}
	if (tp_op_find(tp, group, op_id) || tp_recently_done(g, op_id))
		return -EEXIST;
	if (tp->nops == tp->p.max_ops)
		return -ENOSPC;
	op = calloc(1, sizeof(*op));
	if (!op)
		return -ENOMEM;
	op->nch = ops->channels(flow);
	op->pend = calloc(op->nch ? op->nch : 1, sizeof(*op->pend));
	op->has_pend = calloc(op->nch ? op->nch : 1, sizeof(*op->has_pend));
	op->sess = calloc(op->nch ? op->nch : 1, sizeof(*op->sess));
	if (!op->pend || !op->has_pend || !op->sess)
		goto out_free;
	/* the sessions each channel sends on, set up now rather than on
	 * the packet path */
	for (uint32_t c = 0; c < op->nch; c++) {
		int64_t peer = ops->chan_peer(flow, c);

		if (peer < 0)
			continue;
		if ((uint64_t)peer >= g->n) {
			ret = -EINVAL;
			goto out_free;
		}
		op->sess[c] =
			tp_sess(tp, g->nodes[peer], c % tp->p.sess_channels);
		if (!op->sess[c])
			goto out_free;
	}
	op->g = g;
	op->id = op_id;
	op->ops = ops;
	op->flow = flow;
	op->user = user;
	op->latency = bytes <= tp->p.small_bytes;
	h = tp_hash(tp, group, op_id);
	op->hnext = tp->hash[h];
	tp->hash[h] = op;
	tp->ops[tp->nops++] = op;
	g->live++;
	tp->st.ops_posted++;
	tp->posts++;
	cs_obs_tp_post(now, group, op_id, g->n, bytes); /* observe/ */
	if (tp->nops > tp->st.peak_ops)
		tp->st.peak_ops = tp->nops;
	{
		struct tp_abort *a = tp_abort_find(tp, group, op_id, false);

		if (a) /* an earlier op of this id (ids that restart) */
			a->valid = false;
		a = tp_abort_find(tp, group, op_id, true);
		if (a && now - a->at > tp->p.hold_ttl)
			a->valid = false;
		if (a && a->valid) { /* a peer said it failed there */
			int32_t r = g->rank_of[a->culprit_node];

			a->valid = false;
			op->peer_aborted = true;
			ops->abort(flow, a->err,
				   r >= 0 ? (uint32_t)r : UINT32_MAX);
			return 0;
		}
	}
	/* a member already lost: it ends at the next poll, not at its
	 * deadline */
	if (tp_group_lost(tp, g, &culprit))
		ops->abort(flow, CS_ERR_PEER_LOST, culprit);
	else
		tp_replay(tp, op, now);
	return 0;
out_free:
	free(op->sess);
	free(op->pend);
	free(op->has_pend);
	free(op);
	return ret;
}

/* Frames held for (@group, @op), which will never be posted here, go:
 * kept, they would take the room of other operations' early frames until
 * tp.hold_ttl (their senders are told of the refusal). */
static void tp_unhold(struct cs_tp *tp, uint32_t group, uint32_t op)
{
	uint32_t j = 0;

	for (uint32_t i = 0; i < tp->nheld; i++) {
		struct tp_held *k = &tp->held[i];

		if (k->hdr.group == group && k->hdr.op == op) {
			tp->st.rx_done_op++;
			continue;
		}
		tp_held_keep(tp, i, &j);
	}
	tp->nheld = j;
}

/*
 * The hold is full, and part of it may be frames of operations that failed
 * here (or whose peer said so) longer ago than TP_ABORT_REUSE_TTL, in a
 * group whose ids restart: no longer answered (the id could be a later
 * incarnation's), so a member that posted its part late keeps sending
 * them, and they would hold the room of every other operation's early
 * frames, unacknowledged, until the sessions to their senders give up.
 * Those frames go and the failure is told again, for good (sticky) until
 * this node posts the id. Returns the number of frames that went.
 */
static uint32_t tp_hold_reclaim(struct cs_tp *tp)
{
	uint32_t before = tp->nheld;

	for (uint32_t i = 0; i < TP_ABORTS; i++) {
		struct tp_abort *a = &tp->aborts[i];
		struct tp_group *g = tp_group(tp, a->group);
		uint32_t n = tp->nheld;

		if (!a->valid || a->remote || !a->stale || !g)
			continue;
		tp_unhold(tp, a->group, a->op);
		if (tp->nheld == n)
			continue;
		a->stale = false;
		a->sticky = true;
		for (uint32_t r = 0; r < g->n; r++)
			if (g->nodes[r] != tp->self &&
			    !(tp->peer[g->nodes[r]] &&
			      tp->peer[g->nodes[r]]->lost))
				tp_tell_abort(tp, g->nodes[r], a);
	}
	tp->st.rx_hold_reclaimed += before - tp->nheld;
	return before - tp->nheld;
}

int cs_tp_refuse(struct cs_tp *tp, uint32_t group, uint32_t op_id, int err)
{
	struct tp_group *g = tp_group(tp, group);
	struct tp_abort *a;

	if (!g)
		return -ENOENT;
	if (err > CS_ERR_PEER_LOST || err < CS_ERR_PROTO)
		return -EINVAL;
	if (tp_op_find(tp, group, op_id))
		return -EEXIST;
	tp_unhold(tp, group, op_id);
	a = tp_abort_add(tp, group, op_id, false);
	a->err = err;
	a->culprit_node = tp->self;
	a->at = tp->now;
	for (uint32_t r = 0; r < g->n; r++)
		if (g->nodes[r] != tp->self &&
		    !(tp->peer[g->nodes[r]] && tp->peer[g->nodes[r]]->lost))
			tp_tell_abort(tp, g->nodes[r], a);
	return 0;
}

int cs_tp_group_reuse_ids(struct cs_tp *tp, uint32_t id)
{
	struct tp_group *g = tp_group(tp, id);

	if (!g)
		return -ENOENT;
	g->reuse = true;
	return 0;
}

int cs_tp_cancel(struct cs_tp *tp, uint32_t group, uint32_t op_id, int err)
{
	struct tp_op *op = tp_op_find(tp, group, op_id);

	if (!op)
		return -ENOENT;
	op->ops->abort(op->flow, err, UINT32_MAX);
	return 0;
}

int cs_tp_keep_on_stall(struct cs_tp *tp, uint32_t group, uint32_t op_id)
{
	struct tp_op *op = tp_op_find(tp, group, op_id);

	if (!op)
		return -ENOENT;
	op->keep_on_stall = true;
	return 0;
}

int cs_tp_drop(struct cs_tp *tp, uint32_t group, uint32_t op_id, int err)
{
	struct tp_op *op = tp_op_find(tp, group, op_id);

	if (!op)
		return -ENOENT;
	op->peer_aborted = true; /* tp_finish() tells nobody */
	op->ops->abort(op->flow, err, UINT32_MAX);
	return 0;
}

/* @op ended: forget it, clear its slots, tell the owner. */
static void tp_finish(struct cs_tp *tp, uint32_t idx, int status,
		      uint32_t culprit)
{
	struct tp_op *op = tp->ops[idx];
	struct tp_group *g = op->g;

	tp_op_unhash(tp, op);
	memmove(&tp->ops[idx], &tp->ops[idx + 1],
		(tp->nops - idx - 1) * sizeof(tp->ops[0]));
	tp->nops--;
	g->live--;
	tp_mark_done(g, op->id);
	for (uint32_t r = 0; op->slots && r < g->n; r++) {
		struct tp_peer *pr = tp->peer[g->nodes[r]];

		for (uint32_t c = 0; pr && c < tp->p.sess_channels; c++) {
			struct tp_sess *s = pr->sess[c];

			for (uint32_t i = 0; s && i <= s->rel.mask; i++)
				if (s->slot[i].op == op) {
					s->slot[i].op = NULL;
					op->slots--;
				}
		}
	}
	if (status)
		tp->st.ops_failed++;
	else
		tp->st.ops_done++;
	cs_obs_tp_done(g->id, op->id, status); /* observe/ */
	/* failed here: every other member is told, so that none waits for
	 * it until its deadline (and a peer's abort is not echoed) */
	if (status) {
		struct tp_abort *a = tp_abort_add(tp, g->id, op->id, false);

		a->err = status;
		a->culprit_node =
			culprit < g->n ? g->nodes[culprit] : UINT32_MAX;
		a->at = tp->now;
		/* ended by a peer's abort (or dropped): not echoed, but a
		 * member that posts its part only now is answered when its
		 * frames come, as by the node that failed it */
		for (uint32_t r = 0; !op->peer_aborted && r < g->n; r++) {
			uint32_t node = g->nodes[r];

			if (node != tp->self &&
			    !(tp->peer[node] && tp->peer[node]->lost))
				tp_tell_abort(tp, node, a);
		}
	}
	free(op->pend);
	free(op->has_pend);
	free(op->sess);
	tp->io->done(tp->owner, op->user, status, culprit);
	free(op);
}

/* ---- receive ----------------------------------------------------------- */

/* A session learnt from a spurious timeout how late its peer can be
 * (rel.rto_learn): that is the peer's scheduling, not the session's, so
 * the other sessions to it take the floor too instead of each timing out
 * on its own first stall. */
static void tp_share_floor(struct cs_tp *tp, const struct tp_sess *from,
			   cs_ns_t now)
{
	const struct tp_peer *pr = tp->peer[from->node];

	for (uint32_t c = 0; pr && c < tp->p.sess_channels; c++)
		if (pr->sess[c] && pr->sess[c] != from)
			cs_rel_take_floor(&pr->sess[c]->rel, &from->rel, now);
}

void cs_tp_rx(struct cs_tp *tp, uint32_t src, const struct cs_pkt_hdr *h,
	      const void *payload, cs_ns_t now)
{
	uint64_t spur;
	struct tp_op *op = NULL;
	struct tp_group *g = NULL;
	struct tp_sess *s;
	bool data, hold = false;
	int m;

	tp->st.rx_frames++;
	tp->rx_since_poll++;
	tp->now = now;
	if (unlikely(src >= tp->p.max_nodes || src == tp->self ||
		     (h->type != CS_PKT_DATA && h->type != CS_PKT_ACK &&
		      h->type != CS_PKT_NACK && h->type != CS_PKT_CTRL))) {
		tp->st.rx_bad_src++;
		return;
	}
	if (unlikely(h->epoch != tp->epoch)) {
		if ((int32_t)(h->epoch - tp->epoch) < 0)
			tp->st.rx_stale_epoch++;
		else
			tp->st.rx_future_epoch++;
		return;
	}
	if (h->type == CS_PKT_CTRL) {
		tp_on_abort(tp, src, h, now);
		return;
	}
	data = h->type == CS_PKT_DATA && !(h->flags & CS_PKT_F_FILLER);
	if (data) {
		op = tp_op_find(tp, h->group, h->op);
		if (!op) {
			struct tp_abort *a =
				tp_abort_find(tp, h->group, h->op, false);

			g = tp_group(tp, h->group);
			/* ids that restart (trainer groups): a later
			 * incarnation's op may carry it; answer only while
			 * the failure is recent */
			if (a && g && g->reuse && !a->sticky &&
			    now - a->at > TP_ABORT_REUSE_TTL)
				a->stale = true;
			if (a && a->stale)
				a = NULL;
			hold = !a && (!g || !tp_recently_done(g, h->op));
			/* it failed here: tell its sender (again) */
			if (a && (now - a->told >= TP_ABORT_RETELL ||
				  a->told < a->at))
				tp_tell_abort(tp, src, a);
		}
	}
	s = tp_sess(tp, src, h->channel % tp->p.sess_channels);
	if (unlikely(!s)) {
		tp->st.rx_bad_src++;
		return;
	}
	spur = s->rel.st.spurious_rto;
	/* No room to keep it: frames held for ops that failed here go
	 * first (this one's among them: it is answered, not held); with
	 * none, refuse it: its sender is told that we are busy (not a
	 * loss) and parks it until tp_resume() says there may be room.
	 * A duplicate goes through, so that its ACK is repeated. */
	if (hold && tp->nheld == tp->p.hold_frames &&
	    cs_rel_rx_new(&s->rel, h->seq)) {
		if (tp_hold_reclaim(tp) &&
		    tp_abort_find(tp, h->group, h->op, false))
			hold = false;
		if (hold && tp->nheld == tp->p.hold_frames) {
			tp->st.rx_hold_full++;
			cs_rel_busy(&s->rel, h, now);
			if (!s->busy) {
				s->busy = true;
				tp->nbusy++;
			}
			s->busy_posts = tp->posts;
			if (unlikely(s->rel.st.spurious_rto != spur))
				tp_share_floor(tp, s, now);
			return;
		}
	}
	m = cs_rel_on_packet(&s->rel, h, now);
	cs_obs_tp_rx(now, src, h, &s->rel, m); /* observe/ */
	if (unlikely(s->rel.st.spurious_rto != spur))
		tp_share_floor(tp, s, now);
	if (!(m & CS_REL_DELIVER) || !data)
		return;
	if (tp->p.rx_budget) {
		/* a session that starts sending: split the budget anew */
		if (!s->last_rx || now - s->last_rx >= tp->p.rx_active)
			tp->grant_at = 0;
		s->last_rx = now;
	}
	if (op)
		tp_deliver(tp, op, s, src, h, payload, now);
	else if (hold)
		tp_hold(tp, src, h, payload, now);
	else
		tp->st.rx_done_op++;
}

/* ---- transmit ---------------------------------------------------------- */

static bool tp_room(struct cs_tp *tp)
{
	if (!tp->room)
		tp->room = tp->io->tx_room(tp->owner);
	return tp->room != 0;
}

static void tp_xmit(struct cs_tp *tp, uint32_t node, struct cs_pkt_hdr *h,
		    const void *payload, uint32_t len)
{
	h->src = (uint16_t)tp->self;
	h->epoch = tp->epoch;
	h->len = len;
	tp->io->xmit(tp->owner, node, h, payload, len);
	tp->room--;
	tp->st.tx_frames++;
}

/* Retransmissions @s wants now, rebuilt from the slots. */
static unsigned tp_resend(struct cs_tp *tp, struct tp_sess *s, cs_ns_t now)
{
	struct cs_flow_tx tx;
	struct cs_pkt_hdr h;
	unsigned sent = 0;
	uint32_t seq, len;
	uint64_t cookie;

	while (!cs_rel_next_retx(&s->rel, &seq, &cookie, &len)) {
		struct tp_slot *sl = &s->slot[cookie & s->rel.mask];
		const void *pl = NULL;
		int ret = -ESTALE;

		if (cs_rel_retx_time(&s->rel, len, now) > now || !tp_room(tp))
			break;
		if (sl->op) {
			ret = sl->op->ops->rebuild(sl->op->flow, sl->cookie,
						   &tx);
			if (ret && ret != -ESTALE) {
				sl->op->ops->abort(sl->op->flow, CS_ERR_PROTO,
						   UINT32_MAX);
				tp->st.bad_rebuild++;
			}
		}
		if (!ret) {
			tp->st.tx_retx_early += sl->op->ready;
			h = tx.hdr;
			h.group = sl->op->g->id;
			h.op = sl->op->id;
			pl = tx.payload;
			len = tx.len;
		} else {
			/* the receiver provably holds it, or nobody needs it
			 * any more: keep the sequence number, send no bytes */
			memset(&h, 0, sizeof(h));
			h.version = CS_PROTO_VERSION;
			h.type = CS_PKT_DATA;
			h.flags = CS_PKT_F_FILLER;
			h.channel = (uint16_t)s->ch;
			len = 0;
			tp->st.tx_fillers++;
		}
		h.len = len;
		uint64_t fr = s->rel.st.fast_retx,
			 tl = s->rel.st.tlp; /* observe/ */
		if (cs_rel_stamp_retx(&s->rel, &h, seq, now))
			break;
		tp_xmit(tp, s->node, &h, pl, len);
		cs_obs_tp_retx(now, s->node, &h, len, &s->rel, fr,
			       tl); /* observe/ */
		tp->st.tx_retx++;
		sent++;
	}
	return sent;
}

/* New frames of @op, up to @quota; false once the port has no room. */
static unsigned tp_serve(struct cs_tp *tp, struct tp_op *op, cs_ns_t now,
			 unsigned quota, bool *full)
{
	const struct cs_flow_ops *o = op->ops;
	unsigned sent = 0;

	for (uint32_t c = 0; c < op->nch && sent < quota; c++) {
		struct cs_flow_tx *p = &op->pend[c];
		struct tp_sess *s = op->sess[c];
		struct cs_pkt_hdr h;
		uint32_t idx;

		if (!s)
			continue;
		while (sent < quota) {
			if (!op->has_pend[c]) {
				if (!o->next(op->flow, now, c, p, 1))
					break;
				op->has_pend[c] = true;
			}
			cs_ns_t t = cs_rel_tx_time(&s->rel, p->len, now);

			if (t > now) {
				cs_obs_tp_stall(now, s->node, op->g->id, op->id,
						&s->rel, t); /* observe/ */
				break;
			}
			if (!tp_room(tp)) {
				*full = true;
				return sent;
			}
			h = p->hdr;
			h.group = op->g->id;
			h.op = op->id;
			idx = s->rel.snd_nxt & s->rel.mask;
			if (cs_rel_stamp(&s->rel, &h, idx, p->len, now))
				break;
			s->slot[idx].op = op;
			s->slot[idx].cookie = p->cookie;
			op->slots++;
			tp_xmit(tp, s->node, &h, p->payload, p->len);
			cs_obs_tp_tx(now, s->node, &h, p->len); /* observe/ */
			tp->st.tx_data++;
			op->has_pend[c] = false;
			sent++;
		}
	}
	return sent;
}

/* Latency class first, as much as it has; then the bulk ops in turn, a
 * quantum each, until none sends or the port is full. */
static unsigned tp_schedule(struct cs_tp *tp, cs_ns_t now)
{
	unsigned sent = 0, round;
	bool full = false;
	uint32_t nbulk = 0;

	for (uint32_t i = 0; i < tp->nops && !full; i++) {
		if (tp->ops[i]->latency)
			sent += tp_serve(tp, tp->ops[i], now, UINT32_MAX,
					 &full);
		else
			nbulk++;
	}
	do {
		round = 0;
		for (uint32_t k = 0, seen = 0;
		     k < tp->nops && !full && seen < nbulk; k++) {
			struct tp_op *op = tp->ops[(tp->rr + k) % tp->nops];

			if (op->latency)
				continue;
			seen++;
			round += tp_serve(tp, op, now, tp->p.quantum, &full);
		}
		sent += round;
		if (tp->nops)
			tp->rr = (tp->rr + 1) % tp->nops;
	} while (round && !full);
	return sent;
}

/*
 * Sessions that refused frames because the hold was full ask their peers
 * to resend them once there may be room: an operation was posted here
 * since (frames held for it went to it), or the hold drained to half.
 * A frame that still finds no room is refused again.
 */
static void tp_resume(struct cs_tp *tp)
{
	bool room = tp->p.hold_frames && 2 * tp->nheld <= tp->p.hold_frames;

	for (uint32_t i = 0; tp->nbusy && i < tp->nsess; i++) {
		struct tp_sess *s = tp->sess[i];

		if (!s->busy || !(room || s->busy_posts != tp->posts))
			continue;
		cs_rel_resume(&s->rel);
		s->busy = false;
		tp->nbusy--;
		tp->st.tx_resumes++;
	}
}

static unsigned tp_acks(struct cs_tp *tp, cs_ns_t now)
{
	unsigned sent = 0;
	struct cs_pkt_hdr h;

	for (uint32_t i = 0; i < tp->nsess; i++) {
		struct tp_sess *s = tp->sess[i];

		/* at most two: an ACK and its SACK extension */
		for (int k = 0; k < 2 && cs_rel_ack_due(&s->rel, now); k++) {
			if (!tp_room(tp))
				return sent;
			memset(&h, 0, sizeof(h));
			h.version = CS_PROTO_VERSION;
			h.channel = (uint16_t)s->ch;
			cs_rel_build_ack(&s->rel, &h, now);
			tp_xmit(tp, s->node, &h, NULL, 0);
			tp->st.tx_acks++;
			sent++;
		}
	}
	return sent;
}

/* Every op whose group holds @node ends with CS_ERR_PEER_LOST (on a
 * session's stall (@stall), not those kept on stalls). */
static void tp_fail_ops_of(struct cs_tp *tp, uint32_t node, bool stall)
{
	for (uint32_t i = 0; i < tp->nops; i++) {
		struct tp_op *op = tp->ops[i];
		int32_t r = op->g->rank_of[node];

		if (r >= 0 && !(stall && op->keep_on_stall))
			op->ops->abort(op->flow, CS_ERR_PEER_LOST, (uint32_t)r);
	}
}

/* Membership lost @node: its ops end, and every later one at its post. */
static void tp_peer_lost(struct cs_tp *tp, uint32_t node)
{
	struct tp_peer *pr = tp->peer[node];

	if (pr->lost)
		return;
	pr->lost = true;
	tp_fail_ops_of(tp, node, false);
}

/*
 * A session gave up on its peer (rel.max_timeouts without progress): the
 * ops in flight to it end with CS_ERR_PEER_LOST naming it, and the session
 * goes on (the peer may only have been slow to post, or descheduled): only
 * membership says a node is gone for good (cs_tp_peer_lost()).
 */
static void tp_sess_failed(struct cs_tp *tp, struct tp_sess *s, cs_ns_t now)
{
	tp->st.sess_failed++;
	tp_fail_ops_of(tp, s->node, true);
	cs_rel_revive(&s->rel, now);
}

int cs_tp_peer_lost(struct cs_tp *tp, uint32_t node)
{
	if (node >= tp->p.max_nodes || node == tp->self || !tp_peer(tp, node))
		return -EINVAL;
	tp_peer_lost(tp, node);
	return 0;
}

/*
 * tp.rx_budget: the sessions that sent new data within tp.rx_active share
 * the budget evenly; an idle one is granted the share it would get if it
 * started now, so that no burst of newcomers overruns the budget by more
 * than one share each. The sender honours the grant with rel.credit (a
 * grant only ever grows the limit the peer already has: a shrunk one
 * takes effect as the data in flight drains).
 */
static void tp_grants(struct cs_tp *tp, cs_ns_t now)
{
	uint32_t active = 0;
	uint64_t share, idle;

	if (now < tp->grant_at)
		return;
	tp->grant_at = now + TP_GRANT_PERIOD;
	for (uint32_t i = 0; i < tp->nsess; i++) {
		const struct tp_sess *s = tp->sess[i];

		active += s->last_rx && now - s->last_rx < tp->p.rx_active;
	}
	if (active > tp->st.peak_senders)
		tp->st.peak_senders = active;
	share = CS_MAX(tp->p.rx_budget / (active ? active : 1),
		       (uint64_t)TP_GRANT_MIN);
	idle = CS_MAX(tp->p.rx_budget / (active + 1), (uint64_t)TP_GRANT_MIN);
	for (uint32_t i = 0; i < tp->nsess; i++) {
		struct tp_sess *s = tp->sess[i];
		uint64_t g = s->last_rx && now - s->last_rx < tp->p.rx_active
				     ? share
				     : idle;

		if (g != s->grant) {
			cs_rel_set_grant(&s->rel, g);
			s->grant = g;
			tp->st.grants_set++;
		}
	}
}

/*
 * May the sessions' loss timers (RTO, tail loss probe, RACK) fire in this
 * poll? Not while ACKs may still wait unread in the owner's receive
 * queue: an owner that was descheduled for a while (a loaded machine)
 * finds, when it runs again, its timers expired and the peers' ACKs
 * queued behind one receive burst of other frames; judged then, every
 * packet in flight looks lost (a spurious timeout). So after a gap of at
 * least tp.rx_stall between two polls, when frames came in since the
 * last one, the loss timers wait until a poll with none (the queue is
 * drained), but no longer than that gap: the time the owner was away is
 * given to its receive path, once (the poll that ends a wait runs the
 * timers, so back-to-back gaps cannot starve them). Timers that do not
 * judge loss (delayed ACK, credit refresh) always run.
 */
static bool tp_loss_timers_ok(struct cs_tp *tp, cs_ns_t now)
{
	cs_ns_t gap =
		tp->last_poll && now > tp->last_poll ? now - tp->last_poll : 0;
	bool ok = true;

	if (!tp->rx_since_poll) {
		tp->draining = false;
	} else if (tp->draining) {
		ok = now >= tp->drain_until;
		tp->draining = !ok;
	} else if (tp->p.rx_stall && gap >= tp->p.rx_stall) {
		tp->draining = true;
		tp->drain_until = now + gap;
		ok = false;
	}
	tp->rx_since_poll = 0;
	tp->last_poll = now;
	return ok;
}

unsigned cs_tp_poll(struct cs_tp *tp, cs_ns_t now)
{
	struct tp_core_est ce = { 0 };
	cs_ns_t srtt, var;
	unsigned work = 0;
	uint32_t culprit;
	bool loss_ok;
	int st;

	tp->room = 0;
	cs_trace_now(now); /* observe/ */
	tp->now = now;
	if (tp->p.rx_budget)
		tp_grants(tp, now);
	loss_ok = tp_loss_timers_ok(tp, now);
	for (uint32_t i = 0; i < tp->nsess; i++) {
		struct tp_sess *s = tp->sess[i];

		if (unlikely(!cs_rel_rtt(&s->rel, &srtt, &var)) &&
		    !cs_rel_idle(&s->rel))
			tp_seed_late(tp, s, now, &ce);
		if (now >= cs_rel_next_deadline(&s->rel)) {
			if (loss_ok) {
				cs_rel_on_timer(&s->rel, now);
			} else {
				cs_rel_on_ack_timers(&s->rel, now);
				tp->st.timers_held++;
			}
		}
		if (unlikely(cs_rel_failed(&s->rel)))
			tp_sess_failed(tp, s, now);
	}
	/* ACKs before data: a port our own data keeps full must not
	 * starve them (their senders would time out, cut their rates and
	 * resend what arrived); a resume rides on the next ACK */
	if (tp->nbusy)
		tp_resume(tp);
	work += tp_acks(tp, now);
	for (uint32_t i = 0; i < tp->nsess; i++)
		work += tp_resend(tp, tp->sess[i], now);
	work += tp_schedule(tp, now);
	if (tp->nheld)
		tp_expire_held(tp, now);
	for (uint32_t i = 0; i < tp->nops;) {
		struct tp_op *op = tp->ops[i];

		if (op->ops->check_deadline)
			op->ops->check_deadline(op->flow, now);
		culprit = UINT32_MAX;
		st = op->ops->status(op->flow, &culprit);
		if (st == -EINPROGRESS) {
			if (!op->ready && tp->p.early && tp->io->ready &&
			    op->ops->early_ok && op->ops->early_ok(op->flow)) {
				op->ready = true;
				tp->st.ops_early++;
				tp->io->ready(tp->owner, op->user);
				work++;
			}
			i++;
			continue;
		}
		tp_finish(tp, i, st, culprit);
		work++;
	}
	return work;
}

cs_ns_t cs_tp_next_deadline(const struct cs_tp *tp, cs_ns_t now)
{
	cs_ns_t t = CS_NS_NEVER;

	for (uint32_t i = 0; i < tp->nsess; i++)
		t = CS_MIN(t, cs_rel_next_deadline(&tp->sess[i]->rel));
	for (uint32_t i = 0; i < tp->nops; i++) {
		const struct tp_op *op = tp->ops[i];

		if (op->ops->deadline)
			t = CS_MIN(t, op->ops->deadline(op->flow));
		/* a paced frame waiting for its time */
		for (uint32_t c = 0; c < op->nch; c++) {
			const struct tp_sess *s = op->sess[c];
			cs_ns_t w;

			if (!op->has_pend[c] || !s)
				continue;
			w = cs_rel_tx_time(&s->rel, op->pend[c].len, now);
			if (w != CS_NS_NEVER)
				t = CS_MIN(t, w);
		}
	}
	if (tp->nheld)
		t = CS_MIN(t, tp->held[0].at + tp->p.hold_ttl);
	return t;
}

uint32_t cs_tp_epoch(const struct cs_tp *tp)
{
	return tp->epoch;
}

uint32_t cs_tp_in_flight(const struct cs_tp *tp)
{
	return tp->nops;
}

void cs_tp_get_stats(const struct cs_tp *tp, struct cs_tp_stats *st)
{
	*st = tp->st;
	for (uint32_t i = 0; i < tp->nsess; i++) {
		const struct cs_rel_stats *rs = cs_rel_stats(&tp->sess[i]->rel);

		st->rel_retx += rs->retx;
		st->rel_timeouts += rs->timeouts;
		st->rel_dup_rcvd += rs->dup_rcvd;
		st->rel_fast_retx += rs->fast_retx;
		st->rel_tlp += rs->tlp;
		st->rel_spurious += rs->spurious_rto;
		st->rel_stale_rcvd += rs->stale_rcvd;
		st->rel_parked += rs->parked;
		st->rel_resumes += rs->resumes;
		st->rel_park_probes += rs->park_probes;
	}
}

void cs_tp_stats_print(const struct cs_tp_stats *st, FILE *out)
{
	fprintf(out,
		"rx_frames=%" PRIu64 " rx_stale_epoch=%" PRIu64
		" rx_future_epoch=%" PRIu64 " rx_bad_src=%" PRIu64
		" rx_not_member=%" PRIu64 " rx_done_op=%" PRIu64
		" rx_proto=%" PRIu64 " rx_held=%" PRIu64 " rx_replayed=%" PRIu64
		" rx_hold_full=%" PRIu64 " rx_hold_expired=%" PRIu64
		" rx_hold_reclaimed=%" PRIu64 " tx_frames=%" PRIu64
		" tx_data=%" PRIu64 " tx_retx=%" PRIu64 " tx_fillers=%" PRIu64
		" tx_acks=%" PRIu64 " ops_early=%" PRIu64
		" tx_retx_early=%" PRIu64 " early_dropped=%" PRIu64
		" grants_set=%" PRIu64 " peak_senders=%" PRIu64
		" tx_aborts=%" PRIu64 " rx_aborts=%" PRIu64
		" ops_posted=%" PRIu64 " ops_done=%" PRIu64
		" ops_failed=%" PRIu64 " sessions=%" PRIu64 " peak_ops=%" PRIu64
		" rel_timeouts=%" PRIu64 " bad_acked=%" PRIu64
		" bad_rebuild=%" PRIu64 " sess_failed=%" PRIu64
		" rel_stale_rcvd=%" PRIu64 " timers_held=%" PRIu64
		" tx_resumes=%" PRIu64 " rel_parked=%" PRIu64
		" rel_resumes=%" PRIu64 " rel_park_probes=%" PRIu64
		" peak_held=%" PRIu64 " rtt_seeded_late=%" PRIu64
		" away_raised=%" PRIu64 " away_max=%" PRIu64 "\n",
		st->rx_frames, st->rx_stale_epoch, st->rx_future_epoch,
		st->rx_bad_src, st->rx_not_member, st->rx_done_op, st->rx_proto,
		st->rx_held, st->rx_replayed, st->rx_hold_full,
		st->rx_hold_expired, st->rx_hold_reclaimed, st->tx_frames,
		st->tx_data, st->tx_retx, st->tx_fillers, st->tx_acks,
		st->ops_early, st->tx_retx_early, st->early_dropped,
		st->grants_set, st->peak_senders, st->tx_aborts, st->rx_aborts,
		st->ops_posted, st->ops_done, st->ops_failed, st->sessions,
		st->peak_ops, st->rel_timeouts, st->bad_acked, st->bad_rebuild,
		st->sess_failed, st->rel_stale_rcvd, st->timers_held,
		st->tx_resumes, st->rel_parked, st->rel_resumes,
		st->rel_park_probes, st->peak_held, st->rtt_seeded_late,
		st->away_raised, st->away_max);
}

/* ---- set-up ------------------------------------------------------------ */

int cs_tp_create(const struct cs_tp_params *p, const struct cs_xport_params *xp,
		 const struct cs_tp_io *io, void *owner, uint32_t self,
		 uint32_t epoch, struct cs_tp **out)
{
	struct cs_tp *tp;
	uint32_t hsize = 1;

	if (!p || !xp || !io || !io->tx_room || !io->xmit || !io->done ||
	    !p->sess_channels || !p->max_ops || !p->max_groups ||
	    self >= p->max_nodes || cs_rel_params_check(&xp->rel, NULL, 0))
		return -EINVAL;
	tp = calloc(1, sizeof(*tp));
	if (!tp)
		return -ENOMEM;
	tp->p = *p;
	tp->xp = *xp;
	tp->io = io;
	tp->owner = owner;
	tp->self = self;
	tp->epoch = epoch;
	while (hsize < 2 * p->max_ops)
		hsize <<= 1;
	tp->hmask = hsize - 1;
	tp->peer = calloc(p->max_nodes, sizeof(*tp->peer));
	tp->groups = calloc(p->max_groups, sizeof(*tp->groups));
	tp->ops = calloc(p->max_ops, sizeof(*tp->ops));
	tp->hash = calloc(hsize, sizeof(*tp->hash));
	tp->held =
		calloc(p->hold_frames ? p->hold_frames : 1, sizeof(*tp->held));
	if (!tp->peer || !tp->groups || !tp->ops || !tp->hash || !tp->held) {
		cs_tp_destroy(tp);
		return -ENOMEM;
	}
	*out = tp;
	return 0;
}

void cs_tp_destroy(struct cs_tp *tp)
{
	if (!tp)
		return;
	for (uint32_t i = 0; i < tp->nops; i++) {
		free(tp->ops[i]->pend);
		free(tp->ops[i]->has_pend);
		free(tp->ops[i]->sess);
		free(tp->ops[i]);
	}
	for (uint32_t i = 0; i < tp->nsess; i++) {
		cs_rel_fini(&tp->sess[i]->rel);
		free(tp->sess[i]->slot);
		free(tp->sess[i]);
	}
	for (uint32_t i = 0; tp->peer && i < tp->p.max_nodes; i++)
		free(tp->peer[i]);
	for (uint32_t i = 0; i < tp->ngroups; i++) {
		free(tp->groups[i]->rank_of);
		free(tp->groups[i]->nodes);
		free(tp->groups[i]);
	}
	for (uint32_t i = 0; tp->held && i < tp->p.hold_frames; i++)
		free(tp->held[i].data);
	free(tp->held);
	free(tp->hash);
	free(tp->ops);
	free(tp->groups);
	free(tp->sess);
	free(tp->peer);
	free(tp);
}

int cs_tp_peer_rtt(const struct cs_tp *tp, uint32_t node, cs_ns_t *srtt,
		   cs_ns_t *rttvar)
{
	if (node >= tp->p.max_nodes || !tp->peer[node])
		return -ENOENT;
	return tp_peer_rtt(tp->peer[node], tp->p.sess_channels, srtt, rttvar)
		       ? 0
		       : -ENOENT;
}

int cs_tp_seed_rtt(struct cs_tp *tp, uint32_t node, cs_ns_t srtt,
		   cs_ns_t rttvar)
{
	struct tp_peer *pr;

	if (node >= tp->p.max_nodes || node == tp->self || !srtt)
		return -EINVAL;
	pr = tp_peer(tp, node);
	if (!pr)
		return -ENOMEM;
	pr->seed_srtt = srtt;
	pr->seed_var = rttvar;
	return 0;
}

const struct cs_rel *cs_tp_sess_at(const struct cs_tp *tp, uint32_t i,
				   uint32_t *node)
{
	if (i >= tp->nsess)
		return NULL;
	*node = tp->sess[i]->node;
	return &tp->sess[i]->rel;
}

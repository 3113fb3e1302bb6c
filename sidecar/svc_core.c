/* SPDX-License-Identifier: MIT */
/*
 * collstackd's collective service on the transport core.
 *
 * Lcore 0 owns one struct cs_tp for the current view: its sessions belong
 * to the peers (the view's ring indices are the core's node ids; group 1
 * holds every node of the view), and every operation is an engine posted
 * to it. The control and IPC threads build an operation (buffers, engine:
 * all allocation happens there) and hand it to the lcore through a short
 * locked inbox; the lcore posts it, runs the core and reports the verdict
 * through the operation's state (and an eventfd). An operation is freed
 * by the thread that built it once the lcore released it: after the
 * core's completion, or when the core was replaced for a new view.
 *
 * Frames are tagged and checked here when auth.enable is on (frame_auth.c,
 * keys from service.c); collstack run's buffers of 1 MiB and more are
 * registered with the port for zero copy; a direct exchange is reported
 * done at result-ready (tp.early, coll.direct_early) while the core goes
 * on resending its frames until they are acknowledged. Not yet: the
 * lcores beyond the first (every session lives on lcore 0).
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define CS_LOG_MODULE "core"
#include "internal/log.h"
#include "svc_core.h"
#include "svc_ps.h"
#include "frame_auth.h"
#include "daemon_boot.h"
#include "collectives/coll_data.h"
#include "transport/tp.h"
#include "collectives/alltoall.h"
#include "observe/tp_hooks.h" /* observe/ */

#define CORE_TXQ CS_PORT_BURST
/* Both over every node of the view: collstack run's ops, whose ids are
 * never reused, and trainer ops, whose ids restart when a group of the
 * same name forms again (daemon_ipc.c: its hash and sequence number). */
#define CORE_GROUP 1u
#define CORE_TRAINERS 2u
#define CORE_MAX_LIVE 256 /* ops posted on the lcore at once */
/* collstack run mixed's kind for an all-to-all (past the ring kinds) */
#define MX_ALLTOALL 16u
/* Buffers of collstack run from this size are registered for zero copy. */
#define CORE_ZC_MIN (1u << 20)

enum { OP_PREPARED = 0, OP_DONE = 1, OP_FAILED = 2 };

struct core_op {
	uint32_t op_id, n, rank, epoch;
	enum cs_dtype dtype;
	uint64_t seed;
	size_t count, bytes;
	uint8_t *buf; /* collstack run's: owned */
	size_t buf_len;
	struct cs_port *zc_port; /* @buf registered with it (zero copy) */
	struct cs_coll *coll;
	atomic_int state;
	atomic_bool released; /* the lcore holds it no more */
	atomic_bool cancel;
	bool reported; /* lcore: the outcome is out (state, notify) */
	int status;
	uint32_t culprit;
	atomic_int *notify; /* trainer op: 1 or an error */
	cs_ns_t t_post, t_ready, t_done;
	struct core_op *next; /* inbox, graveyard */
	/* collstack run mixed: a group of its own over @nodes (its ranks),
	 * an op of any ring kind; or, with @forget, the group's end */
	uint32_t group;
	uint32_t *nodes;
	enum cs_coll_kind kind;
	enum cs_redop redop;
	uint32_t root;
	uint8_t *sbuf; /* its send buffer, when not in place */
	/* or an all-to-all (kind MX_ALLTOALL): its engine and node, and
	 * sendcounts, sdispls, recvcounts, rdispls (n each) */
	struct cs_a2a *a2a;
	struct cs_a2a_node *a2a_node;
	uint64_t *a2a_cnt;
	bool forget;
	/* a trainer group's ops: op ids restart when a group of the same
	 * name is formed again (cs_tp_group_reuse_ids) */
	bool reuse_ids;
	int refuse; /* trainer op @op_id refused here with this error */
	struct core_op *mx_next; /* the control side's list */
	struct core_op *ext_next; /* trainer op: s->ext */
	bool ext_put; /* trainer op: its owner is done with it */
	struct cs_svc_ps *ps; /* collstack run ps: the job (svc_ps.h) */
	/* or a service's long-lived flow (cs_core_svc_flow_post) */
	const struct cs_flow_ops *fops;
	void *farg;
	unsigned (*fpoll)(void *fpoll_arg, cs_ns_t now);
	void *fpoll_arg;
	bool fkeep; /* cs_svc_flow.keep_on_stall */
	struct core_op *flow_next; /* s->flows */
};

/*
 * One lane per lcore that runs sessions: its own core (its sessions to
 * every peer), its own operations and frames. With the udp port and
 * port.queues = Q, lane q runs on queue q's lcore and sends to the peers'
 * port.udp_port + q, where their lane q listens: a session's frames stay
 * on one lcore at both ends, and no lock is taken on the packet path. An
 * operation runs on lane (group, op id) mod Q, the same on every node.
 */
struct core_lane {
	struct cs_core_svc *s;
	unsigned q;
	/* lcore-only */
	struct cs_tp *tp;
	uint32_t tp_epoch;
	struct core_op *live[CORE_MAX_LIVE];
	unsigned nlive;
	struct cs_pbuf stash[CORE_TXQ];
	unsigned nstash;
	struct cs_pbuf txq[CORE_TXQ];
	unsigned ntxq;
	/* auth.enable: txq[ntagged..ntxq) wait for their tags, made in a
	 * row just before the burst goes out (core_tag_burst()) */
	struct core_untagged {
		struct cs_pkt_hdr h; /* as sent */
		const uint8_t *payload; /* the bytes the frame carries */
		uint8_t *out; /* where nonce and tag go */
		uint32_t epoch; /* the view's when it was queued */
	} untagged[CORE_TXQ];
	unsigned ntagged;
	uint64_t tx_retry, tx_too_big, rx_no_core, post_refused;
	uint64_t cores, early_unacked;
	/* the peer table the core was built from */
	unsigned built_rank, built_npeers;
	struct cs_peer built_peers[CS_DRV_MAX_PEERS];
	/* hand-over */
	pthread_mutex_t lock; /* inbox, snap */
	struct core_op *inbox;
	atomic_bool pending;
	atomic_bool renew; /* the peer table was rebuilt: check it */
	atomic_uint_fast64_t gen; /* lcore rounds */
	struct cs_tp_stats snap; /* the lane's core, copied now and then */
};

struct cs_core_svc {
	struct cs_daemon *d;
	struct cs_frame_auth *auth; /* auth.enable: lcore-only; or NULL */
	struct cs_xport_params xp;
	struct cs_coll_cfg coll;
	struct cs_tp_params tpp;
	struct core_lane lane[CS_PORT_MAX_QUEUES];
	unsigned nlanes;
	uint64_t rx_other_q; /* frames on a queue that runs no lane */
	atomic_bool pause;
	atomic_uint table_epoch; /* the view the peer table holds (boot) */
	/* control side */
	pthread_mutex_t ctl; /* control vs. IPC thread */
	struct core_op *run_op; /* collstack run's last prepared */
	uint32_t run_next; /* one past its id (0: none yet): ar_next_op */
	/* trainer ops, many in flight (each its own handle, notify and
	 * verdict): the ones their owner holds, and the finished ones it
	 * let go of (ext_put) until the lcore released them, so that
	 * cs_core_svc_stop_ext() can still end an early one */
	struct core_op *ext;
	struct core_op *grave; /* replaced, not released yet */
	struct core_op *mx; /* collstack run mixed's ops, not waited yet */
	struct core_op *ps_op; /* collstack run ps's job, not forgotten yet */
	struct core_op *flows; /* services' flows, not freed yet */
	const struct cs_pst_cfg *ps_cfg; /* ps.*: set before any job */
	int done_fd;
	atomic_int notify_fd;
};

/* ---- lcore side --------------------------------------------------------- */

/*
 * auth.enable: tag the queued frames, in the order queued (their nonces'
 * counters follow it), each while the next one's payload is brought into
 * cache (cs_frame_auth_tag_next()). A payload is most often not in cache
 * when it is tagged (the engine's buffer, sent zero copy), and a tag that
 * waits for memory took twice as long as one that does not
 * (docs/bench-auth.md); tagged one by one in core_xmit(), each frame
 * waited. core_rx() checks a received burst the same way.
 */
static void core_tag_burst(struct core_lane *l)
{
	for (unsigned i = l->ntagged; i < l->ntxq; i++) {
		const struct core_untagged *u = &l->untagged[i];
		const struct core_untagged *nx =
			i + 1 < l->ntxq ? &l->untagged[i + 1] : NULL;

		cs_frame_auth_tag_next(l->s->auth, l->q, u->epoch, &u->h,
				       u->payload, nx ? nx->payload : NULL,
				       nx ? nx->h.len : 0, u->out);
	}
	l->ntagged = l->ntxq;
}

static bool core_flush(struct core_lane *l)
{
	unsigned sent;

	if (!l->ntxq)
		return true;
	if (l->s->auth && l->ntagged < l->ntxq)
		core_tag_burst(l);
	sent = cs_port_tx_burst(l->s->d->port, l->q, l->txq, l->ntxq);
	if (sent < l->ntxq) {
		memmove(l->txq, l->txq + sent,
			(l->ntxq - sent) * sizeof(l->txq[0]));
		l->tx_retry++;
	}
	l->ntxq -= sent;
	l->ntagged = l->ntxq; /* the ones left were tagged */
	return l->ntxq == 0;
}

/* Room for one more frame: a buffer in hand and a place in the queue. */
static unsigned core_room(void *owner)
{
	struct core_lane *l = owner;

	if (l->ntxq == CORE_TXQ && !core_flush(l))
		return 0;
	if (!l->nstash) {
		l->nstash = cs_port_tx_alloc(l->s->d->port, l->q, l->stash,
					     CORE_TXQ);
		if (!l->nstash)
			return 0;
	}
	return 1;
}

static void core_xmit(void *owner, uint32_t node, const struct cs_pkt_hdr *h,
		      const void *payload, uint32_t len)
{
	struct core_lane *l = owner;
	struct cs_core_svc *s = l->s;
	struct cs_pbuf *b = &l->stash[l->nstash - 1];
	struct cs_pkt_hdr hh = *h;
	uint32_t off = CS_PROTO_FRAME_OVERHEAD;
	int flen;

	if (s->auth) { /* nonce and tag go between header and payload */
		off += cs_frame_auth_room(s->auth);
		hh.flags |= cs_frame_auth_flags(s->auth);
	}
	if (unlikely(off + len > b->cap)) {
		l->tx_too_big++;
		return;
	}
	flen = cs_drv_frame_hdr_lane(&s->d->drv, b->data, b->cap, &hh, node,
				     s->nlanes > 1 ? l->q : 0);
	if (flen < 0) {
		l->tx_too_big++;
		return;
	}
	/* The payload: referenced where the port can send registered
	 * memory as is (dpdk, port.zero_copy), else copied after the
	 * header. */
	b->len = off;
	if (len && cs_port_attach(s->d->port, l->q, b, (void *)payload, len)) {
		l->tx_too_big++;
		return;
	}
	if (s->auth) { /* over the header as sent and the payload the frame
			* carries (its copy, or the memory it references),
			* in place, at the flush */
		struct core_untagged *u = &l->untagged[l->ntxq];

		u->h = hh;
		u->payload = b->len == off + len ? b->data + off : payload;
		u->out = b->data + CS_PROTO_FRAME_OVERHEAD;
		u->epoch = atomic_load_explicit(&s->d->view.epoch,
						memory_order_relaxed);
	}
	l->txq[l->ntxq++] = *b;
	l->nstash--;
}

/* Tell the op's owner its outcome (once). */
static void core_report(struct cs_core_svc *s, struct core_op *op, int status,
			uint32_t culprit, cs_ns_t now)
{
	uint64_t one = 1;

	if (op->reported)
		return;
	op->reported = true;
	op->status = status;
	op->culprit = culprit;
	op->t_done = now;
	if (!op->t_ready)
		op->t_ready = now;
	atomic_store_explicit(&op->state, status ? OP_FAILED : OP_DONE,
			      memory_order_release);
	if (op->notify) {
		int fd = atomic_load_explicit(&s->notify_fd,
					      memory_order_relaxed);

		atomic_store_explicit(op->notify, status ? status : 1,
				      memory_order_release);
		if (fd >= 0)
			(void)!write(fd, &one, sizeof(one));
	} else if (s->done_fd >= 0) {
		(void)!write(s->done_fd, &one, sizeof(one));
	}
}

/* The outcome, and the op is the control side's to free. */
static void core_verdict(struct core_lane *l, struct core_op *op, int status,
			 uint32_t culprit, cs_ns_t now)
{
	if (op->reported && status)
		l->early_unacked++; /* its result was in; the ACKs were not */
	core_report(l->s, op, status, culprit, now);
	atomic_store_explicit(&op->released, true, memory_order_release);
}

static void core_done(void *owner, void *user, int status, uint32_t culprit)
{
	struct core_lane *l = owner;
	struct core_op *op = user;

	for (unsigned i = 0; i < l->nlive; i++)
		if (l->live[i] == op) {
			l->live[i] = l->live[--l->nlive];
			break;
		}
	core_verdict(l, op, status, culprit, cs_lcore_now());
}

/* tp.early: the result is in and the engine resends from its own copy:
 * the owner has its answer now, the core keeps the engine. */
static void core_ready(void *owner, void *user)
{
	core_report(((struct core_lane *)owner)->s, user, 0, UINT32_MAX,
		    cs_lcore_now());
}

static const struct cs_tp_io core_io = {
	.tx_room = core_room,
	.xmit = core_xmit,
	.done = core_done,
	.ready = core_ready,
};

/* A core for the view the peer table now holds; the ops of the old one
 * end with CS_ERR_PEER_LOST (their view lost a member). */
static void core_renew(struct core_lane *l, uint32_t epoch, cs_ns_t now)
{
	struct cs_core_svc *s = l->s;
	struct cs_drv *drv = &s->d->drv;
	uint32_t nodes[CS_DRV_MAX_PEERS];
	int ret;

	struct cs_tp *old = l->tp;

	for (unsigned i = 0; i < l->nlive; i++)
		core_verdict(l, l->live[i], CS_ERR_PEER_LOST, UINT32_MAX, now);
	l->nlive = 0;
	l->tp = NULL;
	l->tp_epoch = epoch;
	ret = cs_tp_create(&s->tpp, &s->xp, &core_io, l, drv->rank, epoch,
			   &l->tp);
	if (ret) {
		CS_ERR("no transport core for epoch %u: %s", epoch,
		       cs_strerror(ret));
		cs_tp_destroy(old);
		return;
	}
	/* the RTT each peer still in the table had: new sessions start from
	 * it rather than from rel.rto_init */
	for (uint32_t i = 0; old && i < l->built_npeers; i++) {
		cs_ns_t srtt, var;

		for (uint32_t j = 0; j < drv->npeers; j++)
			if (j != drv->rank &&
			    !memcmp(&drv->peers[j], &l->built_peers[i],
				    sizeof(drv->peers[j])) &&
			    !cs_tp_peer_rtt(old, i, &srtt, &var))
				(void)cs_tp_seed_rtt(l->tp, j, srtt, var);
	}
	cs_tp_destroy(old);
	l->built_rank = drv->rank;
	l->built_npeers = drv->npeers;
	memcpy(l->built_peers, drv->peers, drv->npeers * sizeof(drv->peers[0]));
	for (uint32_t i = 0; i < drv->npeers; i++)
		nodes[i] = i;
	if (drv->npeers >= 2)
		ret = cs_tp_group_add(l->tp, CORE_GROUP, nodes, drv->npeers,
				      NULL);
	if (!ret && drv->npeers >= 2)
		ret = cs_tp_group_add(l->tp, CORE_TRAINERS, nodes, drv->npeers,
				      NULL);
	if (!ret && drv->npeers >= 2)
		ret = cs_tp_group_reuse_ids(l->tp, CORE_TRAINERS);
	if (ret)
		CS_ERR("transport core: group of %u nodes refused: %s",
		       drv->npeers, cs_strerror(ret));
	l->cores++;
}

/* The peer table differs from the one the core was built from (a view
 * applied after the lcore had already moved to its epoch). The same table
 * keeps the core: its sessions must outlive a rebuild that changed
 * nothing, or frames the peers saw acknowledged would be forgotten. */
static bool core_table_moved(const struct core_lane *l)
{
	const struct cs_drv *drv = &l->s->d->drv;

	return drv->rank != l->built_rank || drv->npeers != l->built_npeers ||
	       memcmp(drv->peers, l->built_peers,
		      drv->npeers * sizeof(drv->peers[0]));
}

/* The transport group of @op: its own, the trainers' (a trainer op or
 * its refusal) or collstack run's. */
static uint32_t op_group(const struct core_op *op)
{
	return op->group		  ? op->group
	       : op->notify || op->refuse ? CORE_TRAINERS
					  : CORE_GROUP;
}

/* Post what the control and IPC threads handed over. */
static void core_take(struct core_lane *l, cs_ns_t now)
{
	struct core_op *op, *list;
	int ret;

	pthread_mutex_lock(&l->lock);
	list = l->inbox;
	l->inbox = NULL;
	atomic_store(&l->pending, false);
	pthread_mutex_unlock(&l->lock);
	/* the inbox is last-in first: post in the order handed over */
	for (struct core_op *rev = NULL;; list = op) {
		if (!list) {
			list = rev;
			break;
		}
		op = list->next;
		list->next = rev;
		rev = list;
	}
	for (; list; list = op) {
		op = list->next;
		list->next = NULL;
		list->t_post = now;
		if (atomic_load(&list->cancel)) {
			core_verdict(l, list, CS_ERR_CANCELLED, UINT32_MAX,
				     now);
			continue;
		}
		if (list->epoch != l->tp_epoch) {
			core_verdict(l, list, CS_ERR_PEER_LOST, UINT32_MAX,
				     now);
			continue;
		}
		/* run mixed: its group on first use (the same member list on
		 * every node: collstack run mixed sends it to each); a trainer
		 * group over some nodes the same way (every member computes
		 * the same list from the group's node set) */
		if (list->group && list->nodes) {
			ret = cs_tp_group_add(l->tp, list->group, list->nodes,
					      list->n, NULL);
			if (!ret && list->reuse_ids)
				ret = cs_tp_group_reuse_ids(l->tp, list->group);
			if (ret && ret != -EEXIST) {
				l->post_refused++;
				core_verdict(l, list, CS_ERR_BAD_DESC,
					     UINT32_MAX, now);
				continue;
			}
		}
		if (list->refuse) {
			ret = cs_tp_refuse(l->tp, op_group(list), list->op_id,
					   list->refuse);
			if (ret)
				CS_WARN("op %#x: the refusal was not announced:"
					" %s",
					list->op_id, cs_strerror(ret));
			core_verdict(l, list, 0, UINT32_MAX, now);
			continue;
		}
		if (list->forget) {
			cs_tp_group_remove(l->tp, list->group);
			core_verdict(l, list, 0, UINT32_MAX, now);
			continue;
		}
		ret = l->nlive == CORE_MAX_LIVE
			      ? -ENOSPC
			      : cs_tp_post(l->tp,
					   list->group	  ? list->group
					   : list->notify ? CORE_TRAINERS
							  : CORE_GROUP,
					   list->op_id,
					   list->fops  ? list->fops
					   : list->ps  ? &cs_ps_flow_ops
					   : list->a2a ? &cs_a2a_flow_ops
						       : &cs_coll_flow_ops,
					   list->fops ? list->farg
					   : list->ps ? (void *)cs_svc_ps_flow(
								list->ps)
					   : list->a2a ? (void *)list->a2a
						       : (void *)list->coll,
					   list->bytes, list, now);
		if (ret) {
			l->post_refused++;
			CS_WARN("op %#x refused by the transport core: %s",
				list->op_id, cs_strerror(ret));
			core_verdict(l, list, CS_ERR_BAD_DESC, UINT32_MAX, now);
			continue;
		}
		if (list->fkeep)
			cs_tp_keep_on_stall(l->tp, op_group(list), list->op_id);
		l->live[l->nlive++] = list;
	}
}

static void core_rx(void *arg, unsigned q, struct cs_pbuf *v,
		    struct cs_wire_pkt *pk, unsigned n, cs_ns_t now)
{
	struct cs_core_svc *s = arg;
	struct core_lane *l = &s->lane[q];
	uint32_t view_epoch;

	(void)v;
	if (q >= s->nlanes) { /* a queue that runs no lane */
		s->rx_other_q += n;
		return;
	}
	if (!l->tp || atomic_load_explicit(&s->pause, memory_order_acquire)) {
		l->rx_no_core += n;
		return;
	}
	view_epoch =
		atomic_load_explicit(&s->d->view.epoch, memory_order_relaxed);
	cs_trace_rx_burst(true);
	for (unsigned i = 0; i < n; i++) {
		const struct cs_pkt_hdr *h = &pk[i].hdr;

		/* ctlplane: frames of an older epoch are dropped (and
		 * counted where `stats` shows them) before any check */
		if (unlikely((int32_t)(h->epoch - view_epoch) < 0)) {
			atomic_fetch_add_explicit(&s->d->view.rx_stale_epoch, 1,
						  memory_order_relaxed);
			continue;
		}
		/* auth.enable: nothing unauthenticated reaches the core */
		if (s->auth && !cs_frame_auth_rx_ok(s->auth, q, view_epoch, h,
						    pk[i].payload))
			continue;
		cs_tp_rx(l->tp, h->src, h, pk[i].payload, now);
	}
	cs_trace_rx_burst(false);
}

static unsigned core_tx(void *arg, unsigned q, cs_ns_t now)
{
	struct cs_core_svc *s = arg;
	struct core_lane *l = &s->lane[q < s->nlanes ? q : 0];
	uint32_t epoch;
	unsigned work;

	if (q >= s->nlanes)
		return 0;
	atomic_fetch_add_explicit(&l->gen, 1, memory_order_release);
	if (!core_flush(l))
		return l->ntxq;
	if (atomic_load_explicit(&s->pause, memory_order_acquire))
		return 0;
	epoch = atomic_load_explicit(&s->d->view.epoch, memory_order_acquire);
	/* with the bootstrap, no core before the view's table is applied:
	 * its frames wait unacknowledged (their senders resend them) */
	if (s->d->boot && epoch != atomic_load_explicit(&s->table_epoch,
							memory_order_acquire)) {
		if (l->tp && epoch != l->tp_epoch) {
			for (unsigned i = 0; i < l->nlive; i++)
				core_verdict(l, l->live[i], CS_ERR_PEER_LOST,
					     UINT32_MAX, now);
			l->nlive = 0;
			cs_tp_destroy(l->tp);
			l->tp = NULL;
		}
		if (!l->tp)
			return 0;
	}
	if (!l->tp || epoch != l->tp_epoch ||
	    (atomic_exchange_explicit(&l->renew, false, memory_order_acq_rel) &&
	     core_table_moved(l)))
		core_renew(l, epoch, now);
	if (!l->tp)
		return 0;
	for (unsigned i = 0; i < l->nlive; i++)
		if (atomic_load_explicit(&l->live[i]->cancel,
					 memory_order_relaxed))
			cs_tp_cancel(l->tp,
				     l->live[i]->group	  ? l->live[i]->group
				     : l->live[i]->notify ? CORE_TRAINERS
							  : CORE_GROUP,
				     l->live[i]->op_id, CS_ERR_CANCELLED);
	if (atomic_load_explicit(&l->pending, memory_order_acquire))
		core_take(l, now);
	work = 0;
	for (unsigned i = 0; i < l->nlive; i++)
		if (l->live[i]->ps) /* collstack run ps: train, apply */
			work += cs_svc_ps_poll(l->live[i]->ps, now);
		else if (l->live[i]->fops) /* a service's flow */
			work += l->live[i]->fpoll(l->live[i]->fpoll_arg, now);
		else if (!l->live[i]->t_ready &&
			 (l->live[i]->a2a
				  ? cs_a2a_result_ready(l->live[i]->a2a)
				  : cs_coll_result_ready(l->live[i]->coll)))
			l->live[i]->t_ready = now;
	cs_tp_away(l->tp, cs_lcore_away(), now);
	work += cs_tp_poll(l->tp, now);
	cs_obs_tp_publish(l->tp, now); /* observe/: metric snapshot */
	core_flush(l);
	if (!pthread_mutex_trylock(&l->lock)) {
		cs_tp_get_stats(l->tp, &l->snap);
		pthread_mutex_unlock(&l->lock);
	}
	return work;
}

/* ---- control side ------------------------------------------------------ */

static void sleep_us(unsigned us)
{
	struct timespec ts = { 0, (long)us * 1000 };

	nanosleep(&ts, NULL);
}

static void op_free(struct core_op *op)
{
	if (!op)
		return;
	cs_coll_free(op->coll);
	cs_a2a_free(op->a2a);
	cs_a2a_node_free(op->a2a_node);
	cs_svc_ps_free(op->ps);
	free(op->a2a_cnt);
	/* Frames still queued may point into a registered buffer: the
	 * lcore flushes them on its next rounds. Never free it under them
	 * (after a second, leak it: the process is stuck anyway). */
	if (op->zc_port &&
	    cs_port_unreg_mem_wait(op->zc_port, op->buf, op->buf_len,
				   CS_NS_PER_S) == -EBUSY) {
		CS_WARN("op %#x: frames still point into its buffer; leaving "
			"%zu bytes allocated",
			op->op_id, op->buf_len);
		op->buf = NULL;
	}
	free(op->buf);
	free(op->sbuf);
	free(op->nodes);
	free(op);
}

/* Free what the lcore released; keep the rest for later. */
static void core_bury(struct cs_core_svc *s, struct core_op *op)
{
	struct core_op **pp = &s->grave;

	if (op) {
		op->next = s->grave;
		s->grave = op;
	}
	while (*pp) {
		struct core_op *o = *pp;

		if (atomic_load_explicit(&o->released, memory_order_acquire)) {
			*pp = o->next;
			op_free(o);
		} else {
			pp = &o->next;
		}
	}
}

static struct core_op *op_new(uint32_t op_id, uint32_t epoch);
static void ext_prune(struct cs_core_svc *s);

/* The lane operation (@group, @op_id) runs on: the same on every node
 * (with the same port.queues). */
static struct core_lane *lane_of(struct cs_core_svc *s, uint32_t group,
				 uint32_t op_id)
{
	return &s->lane[(group * 2654435761u ^ op_id) % s->nlanes];
}

static void lane_hand(struct core_lane *l, struct core_op *op)
{
	atomic_store(&op->released, false);
	pthread_mutex_lock(&l->lock);
	op->next = l->inbox;
	l->inbox = op;
	atomic_store_explicit(&l->pending, true, memory_order_release);
	pthread_mutex_unlock(&l->lock);
	cs_lcore_kick(&l->s->d->lcores[l->q]);
}

static void core_hand(struct cs_core_svc *s, struct core_op *op)
{
	lane_hand(lane_of(s, op_group(op), op->op_id), op);
}

/* A group's end reaches every lane (each knows the group). */
static int core_forget(struct cs_core_svc *s, uint32_t group)
{
	for (unsigned q = 0; q < s->nlanes; q++) {
		struct core_op *op = op_new(0, atomic_load(&s->d->view.epoch));

		if (!op)
			return -ENOMEM;
		op->group = group;
		op->forget = true;
		pthread_mutex_lock(&s->ctl);
		lane_hand(&s->lane[q], op);
		core_bury(s, op);
		pthread_mutex_unlock(&s->ctl);
	}
	return 0;
}

void cs_core_svc_pause(struct cs_core_svc *s)
{
	atomic_store_explicit(&s->pause, true, memory_order_release);
	for (unsigned q = 0; q < s->nlanes; q++) {
		struct core_lane *l = &s->lane[q];
		uint_fast64_t g;

		if (cs_lcore_is_self(&s->d->lcores[q]))
			continue; /* between two of its own calls */
		g = atomic_load(&l->gen);
		for (unsigned i = 0; atomic_load(&l->gen) < g + 2; i++) {
			if (i % 1000 == 999 && cs_daemon_signalled(s->d))
				break;
			cs_lcore_kick(&s->d->lcores[q]);
			sleep_us(10);
		}
	}
}

void cs_core_svc_resume(struct cs_core_svc *s, uint32_t epoch)
{
	if (epoch)
		atomic_store_explicit(&s->table_epoch, epoch,
				      memory_order_release);
	/* the peer table may have changed under the same epoch (the lcore
	 * saw the new epoch before the table was rebuilt for it) */
	for (unsigned q = 0; q < s->nlanes; q++)
		atomic_store_explicit(&s->lane[q].renew, true,
				      memory_order_release);
	atomic_store_explicit(&s->pause, false, memory_order_release);
	for (unsigned q = 0; q < s->nlanes; q++)
		cs_lcore_kick(&s->d->lcores[q]);
}

/* Every lane's counters, summed (peak_ops and peak_senders: the most of
 * any lane). */
static void core_snap(struct cs_core_svc *s, struct cs_tp_stats *st)
{
	memset(st, 0, sizeof(*st));
	for (unsigned q = 0; q < s->nlanes; q++) {
		struct core_lane *l = &s->lane[q];
		struct cs_tp_stats one;
		const uint64_t *src = (const uint64_t *)&one;
		uint64_t *dst = (uint64_t *)st;

		pthread_mutex_lock(&l->lock);
		one = l->snap;
		pthread_mutex_unlock(&l->lock);
		for (size_t k = 0; k < sizeof(one) / sizeof(uint64_t); k++)
			dst[k] += src[k];
		st->peak_ops =
			CS_MAX(st->peak_ops - one.peak_ops, one.peak_ops);
		st->peak_senders = CS_MAX(st->peak_senders - one.peak_senders,
					  one.peak_senders);
		st->away_max =
			CS_MAX(st->away_max - one.away_max, one.away_max);
	}
}

/* A lane counter summed over the lanes. */
#define LANE_SUM(s, field)                                                     \
	({                                                                     \
		uint64_t sum_ = 0;                                             \
		for (unsigned q_ = 0; q_ < (s)->nlanes; q_++)                  \
			sum_ += (s)->lane[q_].field;                           \
		sum_;                                                          \
	})

static struct core_op *op_new(uint32_t op_id, uint32_t epoch)
{
	struct core_op *op = calloc(1, sizeof(*op));

	if (!op)
		return NULL;
	op->op_id = op_id;
	op->epoch = epoch;
	atomic_init(&op->state, OP_PREPARED);
	atomic_init(&op->released, true); /* until handed over */
	atomic_init(&op->cancel, false);
	op->culprit = UINT32_MAX;
	return op;
}

/* The engine of @op on @p, its payload capped to the port's frames. */
static int op_engine(struct cs_core_svc *s, struct core_op *op,
		     struct cs_coll_params *p, char *msg, size_t mlen)
{
	uint32_t fmax = cs_core_svc_frame_payload(s);
	int ret;

	if (p->mtu_payload > fmax)
		p->mtu_payload = fmax;
	p->epoch = op->epoch;
	p->op_id = op->op_id;
	p->start = cs_lcore_now(); /* the deadline runs from here */
	p->group = CORE_GROUP;
	ret = cs_coll_init(p, &op->coll);
	if (ret)
		snprintf(msg, mlen, "engine refused the operation: %s",
			 cs_strerror(ret));
	return ret;
}

/* An all-to-all's block from rank @s to rank @d, element @x: distinct
 * for every (source, destination, element). */
static double a2a_value(const struct core_op *op, uint32_t s, uint32_t d,
			size_t x)
{
	return cs_td_value(op->dtype, CS_SUM, op->n, op->seed + d, s, x);
}

/* Every element of @op's result, against collectives/coll_data.h. */
static uint64_t op_verify(const struct core_op *op, char *first, size_t flen)
{
	if (op->a2a) {
		uint64_t wrong = 0;

		first[0] = 0;
		for (uint32_t src = 0; src < op->n; src++)
			for (size_t x = 0; x < op->count; x++) {
				double got = cs_td_load(op->dtype, op->buf,
							src * op->count + x),
				       want = a2a_value(op, src, op->rank, x);

				if (got != want && !wrong++)
					snprintf(first, flen,
						 " first_wrong=%zu from=%u "
						 "got=%g want=%g",
						 x, src, got, want);
			}
		return wrong;
	}
	size_t nr =
		op->kind == CS_COLL_ALL_GATHER ? op->n * op->count : op->count;
	uint64_t wrong = 0;

	first[0] = 0;
	if (op->kind == CS_COLL_REDUCE && op->rank != op->root)
		return 0; /* a partial sum there */
	for (size_t x = 0; x < nr; x++) {
		double want, got = cs_td_load(op->dtype, op->buf, x);

		switch (op->kind) {
		case CS_COLL_REDUCE_SCATTER:
			want = cs_td_expect(op->dtype, op->redop, op->n,
					    op->seed,
					    (uint64_t)op->rank * op->count + x);
			break;
		case CS_COLL_ALL_GATHER:
			want = cs_td_value(op->dtype, op->redop, op->n,
					   op->seed, (uint32_t)(x / op->count),
					   x % op->count);
			break;
		case CS_COLL_BROADCAST:
			want = cs_td_value(op->dtype, op->redop, op->n,
					   op->seed, op->root, x);
			break;
		default:
			want = cs_td_expect(op->dtype, op->redop, op->n,
					    op->seed, x);
			break;
		}
		if (got != want && !wrong++)
			snprintf(first, flen, " first_wrong=%zu got=%g want=%g",
				 x, got, want);
	}
	return wrong;
}

static int run_prepare(struct cs_core_svc *s, uint32_t op_id, size_t bytes,
		       enum cs_dtype dt, uint64_t seed, char *out, size_t len)
{
	struct cs_drv *drv = &s->d->drv;
	size_t esz = cs_dtype_size(dt);
	struct cs_coll_params p;
	struct core_op *op;
	int ret;

	if (!esz || bytes % esz || drv->npeers < 2) {
		snprintf(out, len,
			 "err bytes must be a multiple of %zu and the peer "
			 "table must list 2+ nodes",
			 esz);
		return -EINVAL;
	}
	op = op_new(op_id, atomic_load(&s->d->view.epoch));
	if (!op)
		return -ENOMEM;
	op->n = drv->npeers;
	op->rank = drv->rank;
	op->dtype = dt;
	op->seed = seed;
	op->bytes = bytes;
	op->count = bytes / esz;
	op->buf_len = (bytes + 4095) / 4096 * 4096 + 4096;
	op->buf = aligned_alloc(4096, op->buf_len);
	if (!op->buf) {
		op_free(op);
		return -ENOMEM;
	}
	for (size_t i = 0; i < op->count; i++)
		cs_td_store(dt, op->buf, i,
			    cs_td_value(dt, CS_SUM, op->n, seed, op->rank, i));
	/* zero copy where the port can (its memory map changes: not for
	 * the small ops, whose copy costs less) */
	if (bytes >= CORE_ZC_MIN &&
	    cs_port_reg_mem(s->d->port, op->buf, op->buf_len) == 0)
		op->zc_port = s->d->port;
	cs_coll_params_default(&p, &s->coll);
	cs_coll_params_op(&p, CS_COLL_ALLREDUCE, op->n, op->rank, 0, op->buf,
			  op->buf, op->count, dt, CS_SUM);
	ret = op_engine(s, op, &p, out, len);
	if (ret) {
		op_free(op);
		return ret;
	}
	core_bury(s, s->run_op);
	s->run_op = op;
	s->run_next = op_id + 1 ? op_id + 1 : 1;
	snprintf(out, len,
		 "ok op=%u rank=%u n=%u count=%zu channels=%u payload=%u "
		 "core=1",
		 op_id, op->rank, op->n, op->count, cs_coll_channels(op->coll),
		 p.mtu_payload);
	return 0;
}

static void run_wait(struct cs_core_svc *s, uint32_t op_id, unsigned ms,
		     bool check, char *out, size_t len)
{
	struct core_op *op = s->run_op;
	cs_ns_t deadline = cs_lcore_now() + (cs_ns_t)ms * CS_NS_PER_MS;
	struct pollfd pf = { .fd = s->done_fd, .events = POLLIN };
	struct cs_tp_stats st;
	char first[128] = "", w[40] = "";
	uint64_t v;
	int state;

	if (!op || op->op_id != op_id) {
		snprintf(out, len, "err no operation %u", op_id);
		return;
	}
	for (unsigned t = 0;; t++) {
		state = atomic_load_explicit(&op->state, memory_order_acquire);
		if (state != OP_PREPARED || cs_lcore_now() >= deadline ||
		    (t % 100 == 0 && cs_daemon_signalled(s->d)))
			break;
		if (atomic_load(&s->d->view.epoch) != op->epoch) {
			snprintf(out, len,
				 "err peer_lost rank=%d epoch=%u op=%u "
				 "(CS_ERR_PEER_LOST)",
				 atomic_load(&s->d->view.lost_rank),
				 atomic_load(&s->d->view.epoch), op_id);
			atomic_store(&op->cancel, true);
			return;
		}
		if (poll(&pf, 1, 10) > 0)
			(void)!read(s->done_fd, &v, sizeof(v));
	}
	if (state == OP_PREPARED) {
		snprintf(out, len, "err op %u timed out after %u ms", op_id,
			 ms);
		atomic_store(&op->cancel, true);
		return;
	}
	if (state == OP_FAILED) {
		snprintf(out, len, "err op %u failed: %s (rank %d)", op_id,
			 cs_strerror(op->status),
			 op->culprit == UINT32_MAX ? -1 : (int)op->culprit);
		return;
	}
	if (check)
		snprintf(w, sizeof(w), " wrong=%" PRIu64,
			 op_verify(op, first, sizeof(first)));
	core_snap(s, &st);
	/* retransmission counters are the node's totals so far */
	snprintf(out, len,
		 "ok op=%u ns=%" PRIu64 " ready_ns=%" PRIu64 "%s retx=%" PRIu64
		 " timeouts=%" PRIu64 " dup=%" PRIu64 " fillers=%" PRIu64
		 " proto_err=%" PRIu64 "%s",
		 op_id, op->t_done - op->t_post, op->t_ready - op->t_post, w,
		 st.tx_retx, st.rel_timeouts, st.rel_dup_rcvd, st.tx_fillers,
		 st.rx_proto, first);
}

/* ---- collstack run mixed ---------------------------------------------- */

/*
 * "mx_post GROUP OP KIND COUNT DTYPE REDOP ROOT SEED N0,N1,...": an op of
 * a group over nodes N0.. (ranks in that order), on buffers of its own
 * filled from SEED (collectives/coll_data.h), posted at once. Groups
 * below 16 are the service's own.
 */
/*
 * @op's all-to-all engine (collectives/alltoall.h), flat with one rank
 * per node (op->n of them, this one op->rank): op->count elements from
 * @sendbuf to every rank, op->count from every rank into @recvbuf (n x
 * op->count each, rank order, never overlapping), frames of @group. The
 * deadline: @deadline ns after now (0: coll.deadline). Returns 0 or an
 * error (CS_ERR_BAD_DESC, -EINVAL, -E2BIG, -ENOMEM).
 */
static int a2a_engine(struct cs_core_svc *s, struct core_op *op,
		      const void *sendbuf, void *recvbuf, uint32_t group,
		      uint64_t deadline, const uint64_t *counts)
{
	uint32_t n = op->n, fmax = cs_core_svc_frame_payload(s);
	struct cs_a2a_params p = { 0 };
	uint64_t *c;
	int ret;

	c = op->a2a_cnt = malloc(4 * (size_t)n * sizeof(*c));
	if (!c)
		return -ENOMEM;
	for (uint32_t r = 0; r < n; r++) {
		c[r] = c[2 * n + r] = op->count;
		c[n + r] = c[3 * n + r] = (uint64_t)r * op->count;
	}
	p.send_count = p.recv_count = (uint64_t)n * op->count;
	if (counts) { /* an all-to-all-v: packed node after node */
		p.send_count = p.recv_count = 0;
		for (uint32_t r = 0; r < n; r++) {
			c[r] = counts[r];
			c[2 * n + r] = counts[n + r];
			c[n + r] = p.send_count;
			c[3 * n + r] = p.recv_count;
			p.send_count += c[r];
			p.recv_count += c[2 * n + r];
		}
	}
	p.nranks = n;
	p.rank = op->rank;
	p.ranks_per_node = 1;
	p.esz = (uint32_t)cs_dtype_size(op->dtype);
	p.sendbuf = sendbuf;
	p.recvbuf = recvbuf;
	p.sendcounts = c;
	p.sdispls = c + n;
	p.recvcounts = c + 2 * n;
	p.rdispls = c + 3 * n;
	p.mtu_payload = CS_MIN(s->coll.mtu_payload, fmax);
	p.group = group;
	p.epoch = op->epoch;
	p.op_id = op->op_id;
	p.start = cs_lcore_now();
	p.deadline = deadline ? deadline : s->coll.deadline;
	ret = cs_a2a_node_init(&p, 1, &op->a2a_node);
	if (!ret)
		ret = cs_a2a_init(op->a2a_node, 0, &op->a2a);
	return ret;
}

/* @op as a flat all-to-all of op->count elements to every rank of its
 * group, its send buffer filled (collectives/coll_data.h). */
static int mx_a2a(struct cs_core_svc *s, struct core_op *op, char *out,
		  size_t len)
{
	int ret;

	for (uint32_t r = 0; r < op->n; r++)
		for (size_t x = 0; x < op->count; x++)
			cs_td_store(op->dtype, op->sbuf, r * op->count + x,
				    a2a_value(op, op->rank, r, x));
	ret = a2a_engine(s, op, op->sbuf, op->buf, op->group, 0, NULL);
	if (ret)
		snprintf(out, len, "err all-to-all refused: %s",
			 cs_strerror(ret));
	return ret;
}

static void mx_post(struct cs_core_svc *s, const char *args, char *out,
		    size_t len)
{
	unsigned group, op_id, kind, root;
	unsigned long long count, seed;
	char dts[16], rops[16], list[2048], *save = NULL, *tok;
	uint32_t nodes[CS_DRV_MAX_PEERS], n = 0;
	int64_t me = -1;
	struct cs_coll_params p;
	struct core_op *op;
	enum cs_dtype dt;
	enum cs_redop ro;
	size_t ns, nr, esz;

	if (sscanf(args, "%u %u %u %llu %15s %15s %u %llu %2047s", &group,
		   &op_id, &kind, &count, dts, rops, &root, &seed, list) != 9 ||
	    cs_dtype_parse(dts, &dt) || cs_redop_parse(rops, &ro) ||
	    group < 16 || (kind >= CS_COLL_BARRIER && kind != MX_ALLTOALL) ||
	    !count || count > (1ull << 32)) {
		snprintf(out, len,
			 "err usage: mx_post GROUP(>=16) OP KIND(0-4, 16: "
			 "all-to-all) COUNT DTYPE REDOP ROOT SEED N0,N1,...");
		return;
	}
	for (tok = strtok_r(list, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		unsigned long v = strtoul(tok, NULL, 10);

		if (n == CS_DRV_MAX_PEERS || v >= s->d->drv.npeers) {
			snprintf(out, len, "err node %s: not in the view", tok);
			return;
		}
		for (uint32_t i = 0; i < n; i++)
			if (nodes[i] == v) {
				snprintf(out, len, "err node %lu twice", v);
				return;
			}
		if (v == s->d->drv.rank)
			me = n;
		nodes[n++] = (uint32_t)v;
	}
	if (n < 2 || me < 0 || root >= n) {
		snprintf(out, len,
			 "err a group of 2+ nodes with this one, root inside");
		return;
	}
	op = op_new(op_id, atomic_load(&s->d->view.epoch));
	if (!op) {
		snprintf(out, len, "err no memory");
		return;
	}
	esz = cs_dtype_size(dt);
	ns = nr = count;
	if (kind == CS_COLL_REDUCE_SCATTER || kind == MX_ALLTOALL)
		ns = n * count; /* all-to-all: COUNT to each rank */
	if (kind == CS_COLL_ALL_GATHER || kind == MX_ALLTOALL)
		nr = n * count;
	if ((uint64_t)CS_MAX(ns, nr) * esz > (1ull << 32)) {
		op_free(op);
		snprintf(out, len, "err %llu elements per rank: too many",
			 count);
		return;
	}
	op->group = group;
	op->n = n;
	op->rank = (uint32_t)me;
	op->kind = kind;
	op->dtype = dt;
	op->redop = ro;
	op->root = root;
	op->seed = seed;
	op->count = count;
	op->bytes = CS_MAX(ns, nr) * esz;
	op->nodes = malloc(n * sizeof(*op->nodes));
	op->sbuf = malloc(ns * esz);
	op->buf = calloc(nr, esz);
	if (!op->nodes || !op->sbuf || !op->buf) {
		op_free(op);
		snprintf(out, len, "err no memory for %llu elements", count);
		return;
	}
	memcpy(op->nodes, nodes, n * sizeof(*nodes));
	if (kind == MX_ALLTOALL) {
		if (mx_a2a(s, op, out, len)) {
			op_free(op);
			return;
		}
		goto hand;
	}
	for (size_t x = 0; x < ns; x++)
		cs_td_store(dt, op->sbuf, x,
			    cs_td_value(dt, ro, n, seed, op->rank, x));
	cs_coll_params_default(&p, &s->coll);
	cs_coll_params_op(&p, kind, n, op->rank, root, op->sbuf, op->buf, count,
			  dt, ro);
	if (op_engine(s, op, &p, out, len)) {
		op_free(op);
		return;
	}
hand:
	pthread_mutex_lock(&s->ctl);
	op->mx_next = s->mx;
	s->mx = op;
	core_hand(s, op);
	pthread_mutex_unlock(&s->ctl);
	snprintf(out, len, "ok group=%u op=%u rank=%u n=%u", group, op_id,
		 op->rank, n);
}

/* "mx_wait GROUP OP MS [nocheck]": its verdict and every element checked;
 * with nocheck the op stays for a later mx_wait that checks (so that a
 * timed loop does not time the checks). */
static void mx_wait(struct cs_core_svc *s, const char *args, char *out,
		    size_t len)
{
	struct pollfd pf = { .fd = s->done_fd, .events = POLLIN };
	unsigned group, op_id, ms;
	struct core_op *op, **pp;
	char first[128], flag[16] = "";
	cs_ns_t deadline;
	int state, nf;
	uint64_t v;

	nf = sscanf(args, "%u %u %u %15s", &group, &op_id, &ms, flag);
	if (nf < 3 || (nf == 4 && strcmp(flag, "nocheck"))) {
		snprintf(out, len, "err usage: mx_wait GROUP OP MS [nocheck]");
		return;
	}
	pthread_mutex_lock(&s->ctl);
	for (pp = &s->mx; *pp; pp = &(*pp)->mx_next)
		if ((*pp)->group == group && (*pp)->op_id == op_id)
			break;
	op = *pp;
	if (op)
		*pp = op->mx_next;
	pthread_mutex_unlock(&s->ctl);
	if (!op) {
		snprintf(out, len, "err no operation %u of group %u", op_id,
			 group);
		return;
	}
	deadline = cs_lcore_now() + (cs_ns_t)ms * CS_NS_PER_MS;
	for (;;) {
		state = atomic_load_explicit(&op->state, memory_order_acquire);
		if (state != OP_PREPARED || cs_lcore_now() >= deadline ||
		    cs_daemon_signalled(s->d))
			break;
		if (poll(&pf, 1, 10) > 0)
			(void)!read(s->done_fd, &v, sizeof(v));
	}
	if (state == OP_PREPARED) {
		atomic_store(&op->cancel, true);
		snprintf(out, len, "err group %u op %u timed out after %u ms",
			 group, op_id, ms);
	} else if (state == OP_FAILED) {
		snprintf(out, len, "err group %u op %u failed: %s (rank %d)",
			 group, op_id, cs_strerror(op->status),
			 op->culprit == UINT32_MAX ? -1 : (int)op->culprit);
	} else if (nf == 4) {
		snprintf(out, len, "ok group=%u op=%u ns=%" PRIu64, group,
			 op_id, op->t_done - op->t_post);
		pthread_mutex_lock(&s->ctl);
		op->mx_next = s->mx;
		s->mx = op;
		pthread_mutex_unlock(&s->ctl);
		return;
	} else {
		uint64_t wrong = op_verify(op, first, sizeof(first));

		snprintf(out, len,
			 "ok group=%u op=%u ns=%" PRIu64 " wrong=%" PRIu64 "%s",
			 group, op_id, op->t_done - op->t_post, wrong, first);
	}
	pthread_mutex_lock(&s->ctl);
	core_bury(s, op);
	pthread_mutex_unlock(&s->ctl);
}

/* "mx_forget GROUP": the group ends (after its ops were waited for). */
static void mx_forget(struct cs_core_svc *s, const char *args, char *out,
		      size_t len)
{
	unsigned group;

	if (sscanf(args, "%u", &group) != 1 || group < 16) {
		snprintf(out, len, "err usage: mx_forget GROUP(>=16)");
		return;
	}
	if (core_forget(s, group)) {
		snprintf(out, len, "err no memory");
		return;
	}
	snprintf(out, len, "ok");
}

/* ---- collstack run ps: the job's op (requests in sidecar/svc_ps.c) ---- */

uint32_t cs_core_svc_frame_payload(const struct cs_core_svc *s)
{
	return s->d->port->frame_max - CS_PROTO_FRAME_OVERHEAD -
	       cs_frame_auth_room(s->auth); /* nonce and tag */
}

void cs_core_svc_view(const struct cs_core_svc *s, uint32_t *self,
		      uint32_t *npeers)
{
	*self = s->d->drv.rank;
	*npeers = s->d->drv.npeers;
}

uint32_t cs_core_svc_epoch(const struct cs_core_svc *s)
{
	return atomic_load_explicit(&s->d->view.epoch, memory_order_acquire);
}

int cs_core_svc_lost_node(const struct cs_core_svc *s, uint32_t *nlost)
{
	*nlost = atomic_load_explicit(&s->d->view.nlost, memory_order_acquire);
	return atomic_load_explicit(&s->d->view.lost_rank,
				    memory_order_acquire);
}

void cs_core_svc_set_ps_cfg(struct cs_core_svc *s, const struct cs_pst_cfg *c)
{
	s->ps_cfg = c;
}

const struct cs_pst_cfg *cs_core_svc_ps_cfg(const struct cs_core_svc *s)
{
	return s->ps_cfg;
}

int cs_core_svc_ps_post(struct cs_core_svc *s, uint32_t op_id,
			struct cs_svc_ps *ps, uint32_t *nodes, uint32_t n)
{
	struct core_op *op;
	int ret = 0;

	pthread_mutex_lock(&s->ctl);
	if (s->ps_op)
		ret = -EBUSY;
	pthread_mutex_unlock(&s->ctl);
	if (ret)
		return ret;
	op = op_new(op_id, atomic_load(&s->d->view.epoch));
	if (!op)
		return -ENOMEM;
	op->ps = ps;
	op->nodes = nodes;
	op->n = n;
	op->group = CS_SVC_PS_GROUP;
	op->bytes = 0; /* latency class: small messages */
	pthread_mutex_lock(&s->ctl);
	s->ps_op = op;
	core_hand(s, op);
	pthread_mutex_unlock(&s->ctl);
	return 0;
}

struct cs_svc_ps *cs_core_svc_ps_job(struct cs_core_svc *s, int *status,
				     uint32_t *culprit)
{
	struct core_op *op;

	pthread_mutex_lock(&s->ctl);
	op = s->ps_op;
	pthread_mutex_unlock(&s->ctl);
	if (!op)
		return NULL;
	*status = atomic_load_explicit(&op->state, memory_order_acquire) ==
				  OP_FAILED
			  ? op->status
			  : 0;
	*culprit = op->culprit;
	return op->ps;
}

void cs_core_svc_ps_kick(struct cs_core_svc *s)
{
	pthread_mutex_lock(&s->ctl);
	if (s->ps_op)
		cs_lcore_kick(&s->d->lcores[lane_of(s, CS_SVC_PS_GROUP,
						    s->ps_op->op_id)
						    ->q]);
	pthread_mutex_unlock(&s->ctl);
}

int cs_core_svc_ps_end(struct cs_core_svc *s)
{
	struct core_op *op;
	cs_ns_t until = cs_lcore_now() + 2 * CS_NS_PER_S;

	pthread_mutex_lock(&s->ctl);
	op = s->ps_op;
	s->ps_op = NULL;
	pthread_mutex_unlock(&s->ctl);
	if (!op)
		return -ENOENT;
	/* the group can go only once its op ended there (a group with an
	 * op in flight stays: the next job, over other nodes, would then
	 * run in the old member list) */
	atomic_store(&op->cancel, true);
	cs_lcore_kick(&s->d->lcores[lane_of(s, CS_SVC_PS_GROUP, op->op_id)->q]);
	while (!atomic_load_explicit(&op->released, memory_order_acquire) &&
	       cs_lcore_now() < until)
		sleep_us(1000);
	pthread_mutex_lock(&s->ctl);
	core_bury(s, op);
	pthread_mutex_unlock(&s->ctl);
	return core_forget(s, CS_SVC_PS_GROUP);
}

/* ---- services' long-lived flows (svc_ps_trainer.c) ---------------------- */

int cs_core_svc_flow_post(struct cs_core_svc *s, const struct cs_svc_flow *f,
			  uint32_t *nodes, uint32_t n, struct cs_core_flow **h)
{
	struct core_op *op = op_new(f->op_id, atomic_load(&s->d->view.epoch));

	if (!op)
		return -ENOMEM;
	op->fops = f->ops;
	op->farg = f->arg;
	op->fpoll = f->poll;
	op->fpoll_arg = f->poll_arg;
	op->fkeep = f->keep_on_stall;
	op->nodes = nodes;
	op->n = n;
	op->group = f->group;
	op->bytes = 0; /* latency class: small messages */
	pthread_mutex_lock(&s->ctl);
	op->flow_next = s->flows;
	s->flows = op;
	core_hand(s, op);
	pthread_mutex_unlock(&s->ctl);
	*h = (struct cs_core_flow *)op;
	return 0;
}

int cs_core_svc_flow_state(const struct cs_core_flow *h, uint32_t *culprit)
{
	const struct core_op *op = (const struct core_op *)h;

	if (!atomic_load_explicit(&op->released, memory_order_acquire))
		return 0;
	*culprit = op->culprit;
	return op->status ? op->status : 1;
}

void cs_core_svc_flow_kick(struct cs_core_svc *s, struct cs_core_flow *h)
{
	struct core_op *op = (struct core_op *)h;

	cs_lcore_kick(&s->d->lcores[lane_of(s, op->group, op->op_id)->q]);
}

void cs_core_svc_flow_cancel(struct cs_core_svc *s, struct cs_core_flow *h)
{
	atomic_store(&((struct core_op *)h)->cancel, true);
	cs_core_svc_flow_kick(s, h);
}

void cs_core_svc_flow_free(struct cs_core_svc *s, struct cs_core_flow *h)
{
	struct core_op *op = (struct core_op *)h;

	pthread_mutex_lock(&s->ctl);
	for (struct core_op **pp = &s->flows; *pp; pp = &(*pp)->flow_next)
		if (*pp == op) {
			*pp = op->flow_next;
			break;
		}
	core_bury(s, op);
	pthread_mutex_unlock(&s->ctl);
}

void cs_core_svc_wake_ipc(struct cs_core_svc *s)
{
	int fd = atomic_load_explicit(&s->notify_fd, memory_order_relaxed);

	if (fd >= 0)
		(void)!write(fd, &(uint64_t){ 1 }, sizeof(uint64_t));
	else /* ipc.on_lcore: lcore 0 serves the trainers */
		cs_lcore_kick(&s->d->lcores[0]);
}

cs_ns_t cs_core_svc_deadline(const struct cs_core_svc *s)
{
	return s->coll.deadline;
}

int cs_core_svc_refuse(struct cs_core_svc *s, uint32_t op_id, uint32_t epoch,
		       int err, uint32_t group, const uint32_t *nodes,
		       uint32_t nnodes)
{
	struct core_op *op = op_new(op_id, epoch);

	if (!op)
		return -ENOMEM;
	op->refuse = err;
	if (nnodes) {
		op->group = group;
		op->n = nnodes;
		op->reuse_ids = true;
		op->nodes = malloc(nnodes * sizeof(*op->nodes));
		if (!op->nodes) {
			op_free(op);
			return -ENOMEM;
		}
		memcpy(op->nodes, nodes, nnodes * sizeof(*nodes));
	}
	pthread_mutex_lock(&s->ctl);
	core_hand(s, op);
	core_bury(s, op);
	pthread_mutex_unlock(&s->ctl);
	cs_lcore_kick(&s->d->lcores[0]);
	return 0;
}

int cs_core_svc_ctl(struct cs_core_svc *s, const char *req, const char *args,
		    char *out, size_t len)
{
	unsigned long long bytes, seed;
	unsigned op_id, ms;
	enum cs_dtype dt;
	char dts[16];

	/* the id collstack run starts from: ids are never reused (the core
	 * refuses one among a group's last 1024), not even by two runs
	 * started within the same second */
	if (!strcmp(req, "ar_next_op")) {
		pthread_mutex_lock(&s->ctl);
		snprintf(out, len, "ok next=%u", s->run_next);
		pthread_mutex_unlock(&s->ctl);
		return 0;
	}
	if (!strcmp(req, "ar_prepare")) {
		if (sscanf(args, "%u %llu %15s %llu", &op_id, &bytes, dts,
			   &seed) != 4 ||
		    cs_dtype_parse(dts, &dt)) {
			snprintf(out, len,
				 "err usage: ar_prepare OP BYTES DTYPE SEED");
			return 0;
		}
		pthread_mutex_lock(&s->ctl);
		if (run_prepare(s, op_id, (size_t)bytes, dt, seed, out, len) &&
		    strncmp(out, "err", 3))
			snprintf(out, len, "err ar_prepare failed");
		pthread_mutex_unlock(&s->ctl);
		return 0;
	}
	if (!strcmp(req, "ar_start")) {
		pthread_mutex_lock(&s->ctl);
		if (sscanf(args, "%u", &op_id) != 1 || !s->run_op ||
		    s->run_op->op_id != op_id || s->run_op->t_post ||
		    !atomic_load(&s->run_op->released)) {
			snprintf(out, len, "err no prepared operation %s",
				 args);
		} else {
			core_hand(s, s->run_op);
			snprintf(out, len, "ok");
		}
		pthread_mutex_unlock(&s->ctl);
		return 0;
	}
	if (!strcmp(req, "ar_wait")) {
		char flag[16] = "";
		int nf = sscanf(args, "%u %u %15s", &op_id, &ms, flag);

		if (nf < 2 || (nf == 3 && strcmp(flag, "nocheck"))) {
			snprintf(out, len,
				 "err usage: ar_wait OP MS [nocheck]");
			return 0;
		}
		run_wait(s, op_id, ms, nf < 3, out, len);
		return 0;
	}
	if (!strcmp(req, "ar_check")) {
		struct core_op *op = s->run_op;
		char first[128];

		if (sscanf(args, "%u", &op_id) != 1 || !op ||
		    op->op_id != op_id || atomic_load(&op->state) != OP_DONE) {
			snprintf(out, len, "err no finished operation %s",
				 args);
			return 0;
		}
		snprintf(out, len, "ok op=%u wrong=%" PRIu64 "%s", op_id,
			 op_verify(op, first, sizeof(first)), first);
		return 0;
	}
	if (!strcmp(req, "mx_rank")) {
		snprintf(out, len, "ok rank=%u n=%u", s->d->drv.rank,
			 s->d->drv.npeers);
		return 0;
	}
	if (!strcmp(req, "mx_post")) {
		mx_post(s, args, out, len);
		return 0;
	}
	if (!strcmp(req, "mx_wait")) {
		mx_wait(s, args, out, len);
		return 0;
	}
	if (!strcmp(req, "mx_forget")) {
		mx_forget(s, args, out, len);
		return 0;
	}
	if (!strncmp(req, "ps_", 3)) /* collstack run ps */
		return cs_svc_ps_ctl(s, req, args, out, len);
	if (!strcmp(req, "ar_stats")) {
		struct cs_fa_counts fa = { 0 };
		struct cs_tp_stats st;

		core_snap(s, &st);
		if (s->auth)
			cs_frame_auth_counts(s->auth, &fa);
		/* the keys collstack stats reads, then the core's own */
		snprintf(out, len,
			 "ok core=1 ops_freed=%" PRIu64 " data_sent=%" PRIu64
			 " retx=%" PRIu64 " fast_retx=%" PRIu64 " tlp=%" PRIu64
			 " timeouts=%" PRIu64 " spurious=%" PRIu64
			 " dup_rcvd=%" PRIu64 " tx_retry=%" PRIu64
			 " rx_no_core=%" PRIu64 " post_refused=%" PRIu64
			 " cores=%" PRIu64 " tx_too_big=%" PRIu64
			 " early_unacked=%" PRIu64
			 " auth=%d rx_auth_fail=%" PRIu64
			 " rx_auth_notag=%" PRIu64 " auth_rekey=%" PRIu64
			 " lanes=%u rx_other_q=%" PRIu64 " ",
			 st.ops_done + st.ops_failed, st.tx_data, st.tx_retx,
			 st.rel_fast_retx, st.rel_tlp, st.rel_timeouts,
			 st.rel_spurious, st.rel_dup_rcvd,
			 LANE_SUM(s, tx_retry), LANE_SUM(s, rx_no_core),
			 LANE_SUM(s, post_refused), LANE_SUM(s, cores),
			 LANE_SUM(s, tx_too_big), LANE_SUM(s, early_unacked),
			 s->auth != NULL, fa.rx_fail, fa.rx_notag, fa.rekey,
			 s->nlanes, s->rx_other_q);
		for (unsigned q = 0; q < s->nlanes; q++) {
			size_t l = strlen(out);
			struct cs_tp_stats one;

			pthread_mutex_lock(&s->lane[q].lock);
			one = s->lane[q].snap;
			pthread_mutex_unlock(&s->lane[q].lock);
			snprintf(out + l, len > l ? len - l : 0, "%s%" PRIu64,
				 q ? "," : "lane_ops=",
				 one.ops_done + one.ops_failed);
		}
		strncat(out, " ", len - strlen(out) - 1);
		{
			char line[2048];
			FILE *f = fmemopen(line, sizeof(line), "w");
			size_t l = strlen(out);

			if (f) {
				cs_tp_stats_print(&st, f);
				fclose(f);
				line[strcspn(line, "\n")] = 0;
				snprintf(out + l, len > l ? len - l : 0, "%s",
					 line);
			}
		}
		return 0;
	}
	return -ENOENT;
}

/* ---- trainer operations ------------------------------------------------ */

int cs_core_svc_start(struct cs_core_svc *s, const struct cs_ar_coll *c,
		      uint32_t n, uint32_t rank, struct cs_ar_ext **h,
		      char *msg, size_t mlen)
{
	struct cs_coll_params p;
	struct core_op *op;
	int ret;

	op = op_new(c->op_id, c->epoch);
	if (!op)
		return -ENOMEM;
	op->n = n;
	op->rank = rank;
	op->dtype = c->dtype;
	op->count = c->count;
	op->bytes = c->count * cs_dtype_size(c->dtype);
	op->notify = c->notify;
	if (c->nnodes) { /* a group over some nodes: its own */
		op->group = c->group;
		op->reuse_ids = true;
		op->nodes = malloc(c->nnodes * sizeof(*op->nodes));
		if (!op->nodes) {
			op_free(op);
			return -ENOMEM;
		}
		memcpy(op->nodes, c->nodes, c->nnodes * sizeof(*op->nodes));
	}
	if (c->alltoall) { /* one engine rank per node (daemon_ipc.h) */
		op->bytes *= n;
		if (c->a2a_counts) {
			op->count = 0;
			op->bytes = 0;
			for (uint32_t r = 0; r < n; r++)
				op->bytes += c->a2a_counts[r] *
					     cs_dtype_size(c->dtype);
		}
		ret = a2a_engine(s, op, c->sendbuf, c->recvbuf, op_group(op),
				 c->deadline, c->a2a_counts);
		if (ret) {
			snprintf(msg, mlen, "all-to-all refused: %s",
				 cs_strerror(ret));
			op_free(op);
			return ret;
		}
		goto hand;
	}
	cs_coll_params_default(&p, &s->coll);
	cs_coll_params_op(&p, c->kind, n, rank, c->root,
			  c->sendbuf ? c->sendbuf : c->recvbuf, c->recvbuf,
			  c->count, c->dtype, c->redop);
	if (c->deadline)
		p.deadline = c->deadline;
	ret = op_engine(s, op, &p, msg, mlen);
	if (ret) {
		op_free(op);
		return ret;
	}
hand:
	pthread_mutex_lock(&s->ctl);
	ext_prune(s);
	op->ext_next = s->ext;
	s->ext = op;
	core_hand(s, op);
	pthread_mutex_unlock(&s->ctl);
	*h = (struct cs_ar_ext *)op;
	return 0;
}

int cs_core_svc_failed_peer(const struct cs_ar_ext *h)
{
	const struct core_op *op = (const struct core_op *)h;

	if (!op || atomic_load(&op->state) != OP_FAILED ||
	    op->culprit == UINT32_MAX)
		return -1;
	if (op->nodes && op->notify) /* a trainer group over some nodes */
		return op->culprit < op->n ? (int)op->nodes[op->culprit] : -1;
	return (int)op->culprit;
}

int cs_core_svc_times(const struct cs_ar_ext *h, cs_ns_t *picked,
		      cs_ns_t *ready, cs_ns_t *done)
{
	const struct core_op *op = (const struct core_op *)h;

	if (!op || atomic_load(&op->state) == OP_PREPARED)
		return -ENOENT;
	*picked = op->t_post;
	*ready = op->t_ready;
	*done = op->t_done;
	return 0;
}

void cs_core_svc_set_notify_fd(struct cs_core_svc *s, int fd)
{
	atomic_store(&s->notify_fd, fd);
}

void cs_core_svc_flush(struct cs_core_svc *s)
{
	if (cs_lcore_is_self(&s->d->lcores[0]))
		core_flush(&s->lane[0]);
}

/*
 * Trainer op @op is abandoned (its group failed or the trainers left):
 * the lcore cancels it, and the caller may reuse the buffers only once it
 * was released, so wait for that (bounded: a stop signal ends the wait
 * and the op is left allocated). Under s->ctl.
 */
static void ext_stop(struct cs_core_svc *s, struct core_op *op)
{
	struct core_lane *l = lane_of(s, op_group(op), op->op_id);

	if (!atomic_load(&op->released) &&
	    cs_lcore_is_self(&s->d->lcores[l->q]) && l->tp &&
	    !atomic_load(&l->pending)) {
		/* on the lcore, between two of its rounds: end it now. The
		 * view moved on (a node lost): the peers learn that from
		 * their own view; a cancellation told first would reach one
		 * that has not seen it yet as a bare CS_ERR_CANCELLED. */
		if (atomic_load_explicit(&s->d->view.epoch,
					 memory_order_acquire) != l->tp_epoch)
			cs_tp_drop(l->tp, op_group(op), op->op_id,
				   CS_ERR_PEER_LOST);
		else
			cs_tp_cancel(l->tp, op_group(op), op->op_id,
				     CS_ERR_CANCELLED);
		cs_tp_poll(l->tp, cs_lcore_now());
		core_flush(l);
	}
	if (!atomic_load(&op->released)) {
		atomic_store(&op->cancel, true);
		cs_lcore_kick(&s->d->lcores[l->q]);
		for (unsigned i = 0; !atomic_load(&op->released); i++) {
			if (cs_lcore_is_self(&s->d->lcores[l->q]) ||
			    (i % 1000 == 999 && cs_daemon_signalled(s->d)))
				break;
			sleep_us(10);
		}
	}
}

/* Free the trainer ops let go of and released by the lcore. Under
 * s->ctl. */
static void ext_prune(struct cs_core_svc *s)
{
	for (struct core_op **pp = &s->ext, *op; (op = *pp);) {
		if (op->ext_put &&
		    atomic_load_explicit(&op->released, memory_order_acquire)) {
			*pp = op->ext_next;
			op_free(op);
		} else {
			pp = &op->ext_next;
		}
	}
}

void cs_core_svc_ext_stop(struct cs_core_svc *s, struct cs_ar_ext *h)
{
	struct core_op *op = (struct core_op *)h;

	pthread_mutex_lock(&s->ctl);
	ext_stop(s, op);
	op->ext_put = true;
	ext_prune(s);
	pthread_mutex_unlock(&s->ctl);
}

void cs_core_svc_ext_put(struct cs_core_svc *s, struct cs_ar_ext *h)
{
	pthread_mutex_lock(&s->ctl);
	((struct core_op *)h)->ext_put = true;
	ext_prune(s);
	pthread_mutex_unlock(&s->ctl);
}

/* Every trainer op still on the lcore: the ones let go of (early ones
 * still resending) and any still held. */
void cs_core_svc_stop_ext(struct cs_core_svc *s)
{
	pthread_mutex_lock(&s->ctl);
	for (struct core_op *op = s->ext; op; op = op->ext_next) {
		ext_stop(s, op);
		op->ext_put = true;
	}
	ext_prune(s);
	pthread_mutex_unlock(&s->ctl);
}

bool cs_core_svc_ext_unsettled(struct cs_core_svc *s)
{
	bool ret = false;

	pthread_mutex_lock(&s->ctl);
	for (const struct core_op *op = s->ext; op && !ret; op = op->ext_next)
		ret = op->ext_put &&
		      atomic_load_explicit(&op->state, memory_order_acquire) ==
			      OP_DONE &&
		      !atomic_load_explicit(&op->released,
					    memory_order_acquire);
	pthread_mutex_unlock(&s->ctl);
	return ret;
}

/* ---- set-up ------------------------------------------------------------ */

int cs_core_svc_init(struct cs_daemon *d, const struct cs_xport_params *xp,
		     const struct cs_coll_cfg *coll,
		     const struct cs_tp_params *tp, struct cs_frame_auth *auth,
		     struct cs_core_svc **out)
{
	struct cs_core_svc *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	s->d = d;
	s->xp = *xp;
	s->coll = *coll;
	s->auth = auth;
	s->tpp = *tp;
	/* lanes: one per queue on the udp port, whose queue q listens on
	 * port.udp_port + q (a peer's lane q reaches this lane q); one
	 * elsewhere (the other queues' frames are counted, rx_other_q) */
	s->nlanes = 1;
	if (!strcmp(d->port->conf.type, "udp") && d->port->conf.queues > 1)
		s->nlanes = CS_MIN(d->port->conf.queues,
				   (uint32_t)CS_PORT_MAX_QUEUES);
	for (unsigned q = 0; q < s->nlanes; q++) {
		struct core_lane *l = &s->lane[q];

		l->s = s;
		l->q = q;
		pthread_mutex_init(&l->lock, NULL);
		atomic_init(&l->pending, false);
		atomic_init(&l->renew, false);
		atomic_init(&l->gen, 0);
	}
	pthread_mutex_init(&s->ctl, NULL);
	atomic_init(&s->pause, false);
	atomic_init(&s->table_epoch, cs_daemon_boot_table_epoch(d));
	atomic_init(&s->notify_fd, -1);
	s->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	d->drv.rx_fn = core_rx;
	d->drv.tx_fn = core_tx;
	d->drv.fn_arg = s;
	CS_INFO("collective service on the transport core: %u lane(s)%s",
		s->nlanes,
		s->nlanes > 1 ? " (lane q on queue q, port.udp_port + q)" : "");
	*out = s;
	return 0;
}

void cs_core_svc_fini(struct cs_core_svc *s)
{
	if (!s)
		return;
	/* the lcores are stopped */
	for (unsigned q = 0; q < s->nlanes; q++) {
		struct core_lane *l = &s->lane[q];

		cs_port_release(s->d->port, q, l->txq, l->ntxq);
		cs_port_release(s->d->port, q, l->stash, l->nstash);
		cs_tp_destroy(l->tp);
		/* every op is run_op, in s->ext or in the grave, whether it
		 * was in the inbox, live or done */
		for (unsigned i = 0; i < l->nlive; i++)
			atomic_store(&l->live[i]->released, true);
		pthread_mutex_destroy(&l->lock);
	}
	for (struct core_op *op = s->grave; op; op = op->next)
		atomic_store(&op->released, true);
	for (struct core_op *op = s->mx, *nx; op; op = nx) {
		nx = op->mx_next;
		op_free(op);
	}
	for (struct core_op *op = s->flows, *nx; op; op = nx) {
		nx = op->flow_next;
		op_free(op);
	}
	core_bury(s, NULL);
	op_free(s->run_op);
	for (struct core_op *op = s->ext; op; op = op->ext_next) {
		op->ext_put = true;
		atomic_store(&op->released, true);
	}
	ext_prune(s);
	pthread_mutex_destroy(&s->ctl);
	if (s->done_fd >= 0)
		close(s->done_fd);
	free(s);
}

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
#include "frame_auth.h"
#include "collectives/coll_data.h"
#include "transport/tp.h"

#define CORE_TXQ CS_PORT_BURST
/* Both over every node of the view: collstack run's ops, whose ids are
 * never reused, and trainer ops, whose ids restart when a group of the
 * same name forms again (daemon_ipc.c: its hash and sequence number). */
#define CORE_GROUP 1u
#define CORE_TRAINERS 2u
#define CORE_MAX_LIVE 256 /* ops posted on the lcore at once */
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
	bool forget;
	int refuse; /* trainer op @op_id refused here with this error */
	struct core_op *mx_next; /* the control side's list */
};

struct cs_core_svc {
	struct cs_daemon *d;
	struct cs_frame_auth *auth; /* auth.enable: lcore-only; or NULL */
	struct cs_xport_params xp;
	struct cs_coll_cfg coll;
	struct cs_tp_params tpp;
	/* lcore-only */
	struct cs_tp *tp;
	uint32_t tp_epoch;
	struct core_op *live[CORE_MAX_LIVE];
	unsigned nlive;
	struct cs_pbuf stash[CORE_TXQ];
	unsigned nstash;
	struct cs_pbuf txq[CORE_TXQ];
	unsigned ntxq;
	uint64_t tx_retry, tx_too_big, rx_other_q, rx_no_core, post_refused;
	uint64_t cores, early_unacked;
	/* hand-over */
	pthread_mutex_t lock; /* inbox, snap */
	struct core_op *inbox;
	atomic_bool pending;
	atomic_bool pause;
	atomic_bool renew; /* the peer table was rebuilt: check it */
	/* lcore: the peer table the core was built from */
	unsigned built_rank, built_npeers;
	struct cs_peer built_peers[CS_DRV_MAX_PEERS];
	atomic_uint_fast64_t gen; /* lcore rounds */
	struct cs_tp_stats snap; /* the lcore's core, copied now and then */
	/* control side */
	pthread_mutex_t ctl; /* control vs. IPC thread */
	struct core_op *run_op; /* collstack run's last prepared */
	uint32_t run_next; /* one past its id (0: none yet): ar_next_op */
	struct core_op *ext_op; /* the last trainer op */
	struct core_op *grave; /* replaced, not released yet */
	struct core_op *mx; /* collstack run mixed's ops, not waited yet */
	int done_fd;
	atomic_int notify_fd;
};

/* ---- lcore side --------------------------------------------------------- */

static bool core_flush(struct cs_core_svc *s)
{
	unsigned sent;

	if (!s->ntxq)
		return true;
	sent = cs_port_tx_burst(s->d->port, 0, s->txq, s->ntxq);
	if (sent < s->ntxq) {
		memmove(s->txq, s->txq + sent,
			(s->ntxq - sent) * sizeof(s->txq[0]));
		s->tx_retry++;
	}
	s->ntxq -= sent;
	return s->ntxq == 0;
}

/* Room for one more frame: a buffer in hand and a place in the queue. */
static unsigned core_room(void *owner)
{
	struct cs_core_svc *s = owner;

	if (s->ntxq == CORE_TXQ && !core_flush(s))
		return 0;
	if (!s->nstash) {
		s->nstash = cs_port_tx_alloc(s->d->port, 0, s->stash, CORE_TXQ);
		if (!s->nstash)
			return 0;
	}
	return 1;
}

static void core_xmit(void *owner, uint32_t node, const struct cs_pkt_hdr *h,
		      const void *payload, uint32_t len)
{
	struct cs_core_svc *s = owner;
	struct cs_pbuf *b = &s->stash[s->nstash - 1];
	struct cs_pkt_hdr hh = *h;
	uint32_t off = CS_PROTO_FRAME_OVERHEAD;
	int flen;

	if (s->auth) { /* the tag goes between header and payload */
		off += CS_PROTO_TAG_LEN;
		hh.flags |= CS_PKT_F_AUTH;
	}
	if (unlikely(off + len > b->cap)) {
		s->tx_too_big++;
		return;
	}
	flen = cs_drv_frame_hdr(&s->d->drv, b->data, b->cap, &hh, node,
				s->d->port->udp_port);
	if (flen < 0) {
		s->tx_too_big++;
		return;
	}
	/* The payload: referenced where the port can send registered
	 * memory as is (dpdk, port.zero_copy), else copied after the
	 * header. */
	b->len = off;
	if (len && cs_port_attach(s->d->port, 0, b, (void *)payload, len)) {
		s->tx_too_big++;
		return;
	}
	if (s->auth) /* over the header as sent and the payload, in place */
		cs_frame_auth_tag(s->auth,
				  atomic_load_explicit(&s->d->view.epoch,
						       memory_order_relaxed),
				  &hh, payload,
				  b->data + CS_PROTO_FRAME_OVERHEAD);
	s->txq[s->ntxq++] = *b;
	s->nstash--;
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
static void core_verdict(struct cs_core_svc *s, struct core_op *op, int status,
			 uint32_t culprit, cs_ns_t now)
{
	if (op->reported && status)
		s->early_unacked++; /* its result was in; the ACKs were not */
	core_report(s, op, status, culprit, now);
	atomic_store_explicit(&op->released, true, memory_order_release);
}

static void core_done(void *owner, void *user, int status, uint32_t culprit)
{
	struct cs_core_svc *s = owner;
	struct core_op *op = user;

	for (unsigned i = 0; i < s->nlive; i++)
		if (s->live[i] == op) {
			s->live[i] = s->live[--s->nlive];
			break;
		}
	core_verdict(s, op, status, culprit, cs_lcore_now());
}

/* tp.early: the result is in and the engine resends from its own copy:
 * the owner has its answer now, the core keeps the engine. */
static void core_ready(void *owner, void *user)
{
	core_report(owner, user, 0, UINT32_MAX, cs_lcore_now());
}

static const struct cs_tp_io core_io = {
	.tx_room = core_room,
	.xmit = core_xmit,
	.done = core_done,
	.ready = core_ready,
};

/* A core for the view the peer table now holds; the ops of the old one
 * end with CS_ERR_PEER_LOST (their view lost a member). */
static void core_renew(struct cs_core_svc *s, uint32_t epoch, cs_ns_t now)
{
	struct cs_drv *drv = &s->d->drv;
	uint32_t nodes[CS_DRV_MAX_PEERS];
	int ret;

	for (unsigned i = 0; i < s->nlive; i++)
		core_verdict(s, s->live[i], CS_ERR_PEER_LOST, UINT32_MAX, now);
	s->nlive = 0;
	cs_tp_destroy(s->tp);
	s->tp = NULL;
	s->tp_epoch = epoch;
	ret = cs_tp_create(&s->tpp, &s->xp, &core_io, s, drv->rank, epoch,
			   &s->tp);
	if (ret) {
		CS_ERR("no transport core for epoch %u: %s", epoch,
		       cs_strerror(ret));
		return;
	}
	s->built_rank = drv->rank;
	s->built_npeers = drv->npeers;
	memcpy(s->built_peers, drv->peers,
	       drv->npeers * sizeof(drv->peers[0]));
	for (uint32_t i = 0; i < drv->npeers; i++)
		nodes[i] = i;
	if (drv->npeers >= 2)
		ret = cs_tp_group_add(s->tp, CORE_GROUP, nodes, drv->npeers,
				      NULL);
	if (!ret && drv->npeers >= 2)
		ret = cs_tp_group_add(s->tp, CORE_TRAINERS, nodes,
				      drv->npeers, NULL);
	if (!ret && drv->npeers >= 2)
		ret = cs_tp_group_reuse_ids(s->tp, CORE_TRAINERS);
	if (ret)
		CS_ERR("transport core: group of %u nodes refused: %s",
		       drv->npeers, cs_strerror(ret));
	s->cores++;
}

/* The peer table differs from the one the core was built from (a view
 * applied after the lcore had already moved to its epoch). The same table
 * keeps the core: its sessions must outlive a rebuild that changed
 * nothing, or frames the peers saw acknowledged would be forgotten. */
static bool core_table_moved(const struct cs_core_svc *s)
{
	const struct cs_drv *drv = &s->d->drv;

	return drv->rank != s->built_rank || drv->npeers != s->built_npeers ||
	       memcmp(drv->peers, s->built_peers,
		      drv->npeers * sizeof(drv->peers[0]));
}

/* Post what the control and IPC threads handed over. */
static void core_take(struct cs_core_svc *s, cs_ns_t now)
{
	struct core_op *op, *list;
	int ret;

	pthread_mutex_lock(&s->lock);
	list = s->inbox;
	s->inbox = NULL;
	atomic_store(&s->pending, false);
	pthread_mutex_unlock(&s->lock);
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
			core_verdict(s, list, CS_ERR_CANCELLED, UINT32_MAX,
				     now);
			continue;
		}
		if (list->epoch != s->tp_epoch) {
			core_verdict(s, list, CS_ERR_PEER_LOST, UINT32_MAX, now);
			continue;
		}
		if (list->refuse) {
			ret = cs_tp_refuse(s->tp, CORE_TRAINERS, list->op_id,
					   list->refuse);
			if (ret)
				CS_WARN("op %#x: the refusal was not announced:"
					" %s",
					list->op_id, cs_strerror(ret));
			core_verdict(s, list, 0, UINT32_MAX, now);
			continue;
		}
		if (list->forget) {
			cs_tp_group_remove(s->tp, list->group);
			core_verdict(s, list, 0, UINT32_MAX, now);
			continue;
		}
		/* run mixed: its group on first use (the same member list on
		 * every node: collstack run mixed sends it to each) */
		if (list->group && list->nodes) {
			ret = cs_tp_group_add(s->tp, list->group, list->nodes,
					      list->n, NULL);
			if (ret && ret != -EEXIST) {
				s->post_refused++;
				core_verdict(s, list, CS_ERR_BAD_DESC,
					     UINT32_MAX, now);
				continue;
			}
		}
		ret = s->nlive == CORE_MAX_LIVE
			      ? -ENOSPC
			      : cs_tp_post(s->tp,
					   list->group    ? list->group
					   : list->notify ? CORE_TRAINERS
							  : CORE_GROUP,
					   list->op_id,
					   &cs_coll_flow_ops, list->coll,
					   list->bytes, list, now);
		if (ret) {
			s->post_refused++;
			CS_WARN("op %#x refused by the transport core: %s",
				list->op_id, cs_strerror(ret));
			core_verdict(s, list, CS_ERR_BAD_DESC, UINT32_MAX, now);
			continue;
		}
		s->live[s->nlive++] = list;
	}
}

static void core_rx(void *arg, unsigned q, struct cs_pbuf *v,
		    struct cs_wire_pkt *pk, unsigned n, cs_ns_t now)
{
	struct cs_core_svc *s = arg;
	uint32_t view_epoch;

	(void)v;
	if (q != 0) { /* the core belongs to queue 0's lcore */
		s->rx_other_q += n;
		return;
	}
	if (!s->tp || atomic_load_explicit(&s->pause, memory_order_acquire)) {
		s->rx_no_core += n;
		return;
	}
	view_epoch = atomic_load_explicit(&s->d->view.epoch,
					  memory_order_relaxed);
	for (unsigned i = 0; i < n; i++) {
		const struct cs_pkt_hdr *h = &pk[i].hdr;

		/* ctlplane: frames of an older epoch are dropped (and
		 * counted where `stats` shows them) before any check */
		if (unlikely((int32_t)(h->epoch - view_epoch) < 0)) {
			atomic_fetch_add_explicit(&s->d->view.rx_stale_epoch,
						  1, memory_order_relaxed);
			continue;
		}
		/* auth.enable: nothing unauthenticated reaches the core */
		if (s->auth && !cs_frame_auth_rx_ok(s->auth, view_epoch, h,
						     pk[i].payload))
			continue;
		cs_tp_rx(s->tp, h->src, h, pk[i].payload, now);
	}
}

static unsigned core_tx(void *arg, unsigned q, cs_ns_t now)
{
	struct cs_core_svc *s = arg;
	uint32_t epoch;
	unsigned work;

	atomic_fetch_add_explicit(&s->gen, 1, memory_order_release);
	if (q != 0 || !core_flush(s))
		return s->ntxq;
	if (atomic_load_explicit(&s->pause, memory_order_acquire))
		return 0;
	epoch = atomic_load_explicit(&s->d->view.epoch, memory_order_acquire);
	if (!s->tp || epoch != s->tp_epoch ||
	    (atomic_exchange_explicit(&s->renew, false, memory_order_acq_rel) &&
	     core_table_moved(s)))
		core_renew(s, epoch, now);
	if (!s->tp)
		return 0;
	for (unsigned i = 0; i < s->nlive; i++)
		if (atomic_load_explicit(&s->live[i]->cancel,
					 memory_order_relaxed))
			cs_tp_cancel(s->tp,
				     s->live[i]->group    ? s->live[i]->group
				     : s->live[i]->notify ? CORE_TRAINERS
							  : CORE_GROUP,
				     s->live[i]->op_id, CS_ERR_CANCELLED);
	if (atomic_load_explicit(&s->pending, memory_order_acquire))
		core_take(s, now);
	for (unsigned i = 0; i < s->nlive; i++)
		if (!s->live[i]->t_ready &&
		    cs_coll_result_ready(s->live[i]->coll))
			s->live[i]->t_ready = now;
	work = cs_tp_poll(s->tp, now);
	core_flush(s);
	if (!pthread_mutex_trylock(&s->lock)) {
		cs_tp_get_stats(s->tp, &s->snap);
		pthread_mutex_unlock(&s->lock);
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

static void core_hand(struct cs_core_svc *s, struct core_op *op)
{
	atomic_store(&op->released, false);
	pthread_mutex_lock(&s->lock);
	op->next = s->inbox;
	s->inbox = op;
	atomic_store_explicit(&s->pending, true, memory_order_release);
	pthread_mutex_unlock(&s->lock);
	cs_lcore_kick(&s->d->lcores[0]);
}

void cs_core_svc_pause(struct cs_core_svc *s)
{
	uint_fast64_t g;

	atomic_store_explicit(&s->pause, true, memory_order_release);
	if (cs_lcore_is_self(&s->d->lcores[0]))
		return; /* between two of its own calls: nothing in use */
	g = atomic_load(&s->gen);
	for (unsigned i = 0; atomic_load(&s->gen) < g + 2; i++) {
		if (i % 1000 == 999 && cs_daemon_signalled(s->d))
			break;
		cs_lcore_kick(&s->d->lcores[0]);
		sleep_us(10);
	}
}

void cs_core_svc_resume(struct cs_core_svc *s)
{
	/* the peer table may have changed under the same epoch (the lcore
	 * saw the new epoch before the table was rebuilt for it) */
	atomic_store_explicit(&s->renew, true, memory_order_release);
	atomic_store_explicit(&s->pause, false, memory_order_release);
	cs_lcore_kick(&s->d->lcores[0]);
}

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
	uint32_t fmax = s->d->port->frame_max - CS_PROTO_FRAME_OVERHEAD -
			(s->auth ? CS_PROTO_TAG_LEN : 0); /* the tag's room */
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

/* Every element of @op's result, against tests/coll_sim/coll_data.h. */
static uint64_t op_verify(const struct core_op *op, char *first, size_t flen)
{
	size_t nr = op->kind == CS_COLL_ALL_GATHER ? op->n * op->count
						    : op->count;
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
	p.kind = CS_COLL_ALLREDUCE;
	p.nranks = op->n;
	p.rank = op->rank;
	p.sendbuf = op->buf;
	p.recvbuf = op->buf;
	p.count = op->count;
	p.dtype = dt;
	p.op = CS_SUM;
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
	pthread_mutex_lock(&s->lock);
	st = s->snap;
	pthread_mutex_unlock(&s->lock);
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
 * filled from SEED (tests/coll_sim/coll_data.h), posted at once. Groups
 * below 16 are the service's own.
 */
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
		   &op_id, &kind, &count, dts, rops, &root, &seed,
		   list) != 9 ||
	    cs_dtype_parse(dts, &dt) || cs_redop_parse(rops, &ro) ||
	    group < 16 || kind >= CS_COLL_BARRIER || !count ||
	    count > (1ull << 32)) {
		snprintf(out, len,
			 "err usage: mx_post GROUP(>=16) OP KIND(0-4) COUNT "
			 "DTYPE REDOP ROOT SEED N0,N1,...");
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
	if (kind == CS_COLL_REDUCE_SCATTER)
		ns = n * count;
	if (kind == CS_COLL_ALL_GATHER)
		nr = n * count;
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
	for (size_t x = 0; x < ns; x++)
		cs_td_store(dt, op->sbuf, x,
			    cs_td_value(dt, ro, n, seed, op->rank, x));
	cs_coll_params_default(&p, &s->coll);
	p.kind = kind;
	p.nranks = n;
	p.rank = op->rank;
	p.root = root;
	p.sendbuf = op->sbuf;
	p.recvbuf = op->buf;
	p.count = count;
	p.dtype = dt;
	p.op = ro;
	if (op_engine(s, op, &p, out, len)) {
		op_free(op);
		return;
	}
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
	struct core_op *op;
	unsigned group;

	if (sscanf(args, "%u", &group) != 1 || group < 16) {
		snprintf(out, len, "err usage: mx_forget GROUP(>=16)");
		return;
	}
	op = op_new(0, atomic_load(&s->d->view.epoch));
	if (!op) {
		snprintf(out, len, "err no memory");
		return;
	}
	op->group = group;
	op->forget = true;
	pthread_mutex_lock(&s->ctl);
	core_hand(s, op);
	core_bury(s, op);
	pthread_mutex_unlock(&s->ctl);
	snprintf(out, len, "ok");
}

int cs_core_svc_refuse(struct cs_core_svc *s, uint32_t op_id, uint32_t epoch,
		       int err)
{
	struct core_op *op = op_new(op_id, epoch);

	if (!op)
		return -ENOMEM;
	op->refuse = err;
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
			snprintf(out, len, "err usage: ar_wait OP MS [nocheck]");
			return 0;
		}
		run_wait(s, op_id, ms, nf < 3, out, len);
		return 0;
	}
	if (!strcmp(req, "ar_check")) {
		struct core_op *op = s->run_op;
		char first[128];

		if (sscanf(args, "%u", &op_id) != 1 || !op ||
		    op->op_id != op_id ||
		    atomic_load(&op->state) != OP_DONE) {
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
	if (!strcmp(req, "ar_stats")) {
		struct cs_tp_stats st;

		pthread_mutex_lock(&s->lock);
		st = s->snap;
		pthread_mutex_unlock(&s->lock);
		/* the keys collstack stats reads, then the core's own */
		snprintf(out, len,
			 "ok core=1 ops_freed=%" PRIu64 " data_sent=%" PRIu64
			 " retx=%" PRIu64 " fast_retx=%" PRIu64
			 " tlp=%" PRIu64 " timeouts=%" PRIu64
			 " spurious=%" PRIu64
			 " dup_rcvd=%" PRIu64 " tx_retry=%" PRIu64
			 " rx_no_core=%" PRIu64 " post_refused=%" PRIu64
			 " cores=%" PRIu64 " tx_too_big=%" PRIu64
			 " early_unacked=%" PRIu64
			 " auth=%d rx_auth_fail=%" PRIu64
			 " rx_auth_notag=%" PRIu64 " auth_rekey=%" PRIu64 " ",
			 st.ops_done + st.ops_failed, st.tx_data, st.tx_retx,
			 st.rel_fast_retx, st.rel_tlp, st.rel_timeouts,
			 st.rel_spurious, st.rel_dup_rcvd, s->tx_retry,
			 s->rx_no_core, s->post_refused, s->cores,
			 s->tx_too_big, s->early_unacked, s->auth != NULL,
			 s->auth ? s->auth->rx_fail : 0,
			 s->auth ? s->auth->rx_notag : 0,
			 s->auth ? s->auth->rekey : 0);
		{
			char line[1024];
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
		      uint32_t n, uint32_t rank, char *msg, size_t mlen)
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
	cs_coll_params_default(&p, &s->coll);
	p.kind = c->kind;
	p.nranks = n;
	p.rank = rank;
	p.root = c->root;
	p.sendbuf = c->sendbuf ? c->sendbuf : c->recvbuf;
	p.recvbuf = c->recvbuf;
	p.count = c->count;
	p.dtype = c->dtype;
	p.op = c->redop;
	ret = op_engine(s, op, &p, msg, mlen);
	if (ret) {
		op_free(op);
		return ret;
	}
	pthread_mutex_lock(&s->ctl);
	core_bury(s, s->ext_op);
	s->ext_op = op;
	core_hand(s, op);
	pthread_mutex_unlock(&s->ctl);
	return 0;
}

int cs_core_svc_failed_peer(struct cs_core_svc *s)
{
	const struct core_op *op = s->ext_op;

	if (!op || atomic_load(&op->state) != OP_FAILED ||
	    op->culprit == UINT32_MAX)
		return -1;
	return (int)op->culprit;
}

int cs_core_svc_times(struct cs_core_svc *s, cs_ns_t *picked, cs_ns_t *ready,
		      cs_ns_t *done)
{
	const struct core_op *op = s->ext_op;

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
		core_flush(s);
}

/*
 * The trainer op is abandoned (its group failed or the trainers left):
 * the lcore cancels it, and the caller may reuse the buffers only once it
 * was released, so wait for that (bounded: a stop signal ends the wait
 * and the op is left allocated).
 */
void cs_core_svc_stop_ext(struct cs_core_svc *s)
{
	struct core_op *op;

	pthread_mutex_lock(&s->ctl);
	op = s->ext_op;
	if (op && !atomic_load(&op->released) &&
	    cs_lcore_is_self(&s->d->lcores[0]) && s->tp &&
	    !atomic_load(&s->pending)) {
		/* on the lcore, between two of its rounds: end it now */
		cs_tp_cancel(s->tp, CORE_TRAINERS, op->op_id,
			     CS_ERR_CANCELLED);
		cs_tp_poll(s->tp, cs_lcore_now());
		core_flush(s);
	}
	if (op && !atomic_load(&op->released)) {
		atomic_store(&op->cancel, true);
		cs_lcore_kick(&s->d->lcores[0]);
		for (unsigned i = 0; !atomic_load(&op->released); i++) {
			if (cs_lcore_is_self(&s->d->lcores[0]) ||
			    (i % 1000 == 999 && cs_daemon_signalled(s->d)))
				break;
			sleep_us(10);
		}
	}
	pthread_mutex_unlock(&s->ctl);
}

bool cs_core_svc_ext_unsettled(struct cs_core_svc *s)
{
	const struct core_op *op;
	bool ret;

	pthread_mutex_lock(&s->ctl);
	op = s->ext_op;
	ret = op &&
	      atomic_load_explicit(&op->state, memory_order_acquire) ==
		      OP_DONE &&
	      !atomic_load_explicit(&op->released, memory_order_acquire);
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
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->ctl, NULL);
	atomic_init(&s->pending, false);
	atomic_init(&s->pause, false);
	atomic_init(&s->renew, false);
	atomic_init(&s->gen, 0);
	atomic_init(&s->notify_fd, -1);
	s->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	d->drv.rx_fn = core_rx;
	d->drv.tx_fn = core_tx;
	d->drv.fn_arg = s;
	CS_INFO("collective service on the transport core");
	*out = s;
	return 0;
}

void cs_core_svc_fini(struct cs_core_svc *s)
{
	if (!s)
		return;
	/* the lcores are stopped */
	cs_port_release(s->d->port, 0, s->txq, s->ntxq);
	cs_port_release(s->d->port, 0, s->stash, s->nstash);
	cs_tp_destroy(s->tp);
	/* every op is run_op, ext_op or in the grave, whether it was in
	 * the inbox, live or done */
	for (unsigned i = 0; i < s->nlive; i++)
		atomic_store(&s->live[i]->released, true);
	for (struct core_op *op = s->grave; op; op = op->next)
		atomic_store(&op->released, true);
	for (struct core_op *op = s->mx, *nx; op; op = nx) {
		nx = op->mx_next;
		op_free(op);
	}
	core_bury(s, NULL);
	op_free(s->run_op);
	op_free(s->ext_op);
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_destroy(&s->ctl);
	if (s->done_fd >= 0)
		close(s->done_fd);
	free(s);
}

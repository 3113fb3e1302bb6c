// SPDX-License-Identifier: MIT
/*
 * collstackd's point-to-point send and receive for trainers (svc_p2p.h):
 * one message flow on the transport core, rendezvous transfers driven by
 * the lcore that runs it; requests from the IPC side through a locked
 * queue.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CS_LOG_MODULE "p2p"
#include "internal/log.h"
#include "internal/wire.h"
#include "svc_core.h"
#include "svc_p2p.h"
#include "transport/ps_flow.h"

/* Message types (the first byte). */
enum {
	P2P_RTS = 1, /* sender -> receiver: a transfer of @len bytes */
	P2P_CTS = 2, /* receiver -> sender: matched, send it */
	P2P_DATA = 3, /* sender -> receiver: bytes at @off */
	P2P_FIN = 4, /* receiver -> sender: every byte is in */
	P2P_ABORT_RECV = 5, /* to the receiver: ended with @status */
	P2P_ABORT_SEND = 6, /* to the sender: ended with @status */
};

/*
 * Every message starts with this header, big-endian: type (1 byte), 3
 * zero bytes, status (i32), group key (u64), the transfer's sender and
 * receiver ranks, its tag, aux (u32 each: an ABORT's detail, a mismatch's
 * bytes), sequence number, offset, length (u64 each). DATA carries its
 * bytes after it.
 */
#define P2P_HDR 56u

struct p2p_hdr {
	uint8_t type;
	int32_t status;
	uint64_t gkey;
	uint32_t src, dst, tag, aux;
	uint64_t seq, off, len;
};

/* Messages queued or unacknowledged on the flow before DATA waits. */
#define P2P_WINDOW 256u
/* RTSs held for receives not posted yet (beyond: refused, -ENOBUFS). */
#define P2P_UNEXPECTED_MAX 4096u

/* Where a transfer is. */
enum {
	X_RTS, /* send: RTS sent, waiting for CTS */
	X_STREAM, /* send: DATA going out */
	X_FIN, /* send: every byte out, waiting for FIN */
	X_POSTED, /* receive: waiting for its RTS */
	X_RECV, /* receive: CTS sent, DATA coming in */
};

struct xfer {
	struct cs_ipc_p2p_req *r;
	uint32_t node; /* the flow rank of the other side's node */
	uint8_t phase;
	uint64_t off; /* send: bytes sent; receive: bytes in */
	cs_ns_t deadline; /* 0: none */
	struct xfer *next;
};

/* A rank whose trainer is gone from this node (IPC side -> lcore). */
struct dead {
	uint64_t gkey;
	uint32_t rank;
	struct dead *next;
};

/* An RTS that no posted receive matched yet. */
struct rts {
	struct p2p_hdr h;
	uint32_t node;
	struct rts *next;
};

struct cs_p2p {
	struct cs_core_svc *core;
	pthread_mutex_t lock;
	/* IPC -> lcore, under @lock */
	struct cs_ipc_p2p_req *inq, **inq_tail;
	struct dead *gone_q; /* ranks gone, for the lcore */
	atomic_bool pending;
	/* the flow (set up by the IPC side before it is posted) */
	struct cs_ps_flow *flow;
	struct cs_core_flow *h; /* NULL: none now */
	bool local; /* over this node alone */
	uint32_t self; /* this node */
	uint32_t mss;
	/* lcore (the IPC side's once the flow ended) */
	struct xfer *xs;
	struct rts *unexp;
	unsigned nunexp;
	bool wake;
	uint64_t rx_bad;
	uint8_t *frame; /* a DATA message being built (mss bytes) */
};

/* ---- wire ---------------------------------------------------------------- */

static void hdr_put(uint8_t *b, const struct p2p_hdr *h)
{
	memset(b, 0, P2P_HDR);
	b[0] = h->type;
	cs_put_be32(b + 4, (uint32_t)h->status);
	cs_put_be64(b + 8, h->gkey);
	cs_put_be32(b + 16, h->src);
	cs_put_be32(b + 20, h->dst);
	cs_put_be32(b + 24, h->tag);
	cs_put_be32(b + 28, h->aux);
	cs_put_be64(b + 32, h->seq);
	cs_put_be64(b + 40, h->off);
	cs_put_be64(b + 48, h->len);
}

static int hdr_get(const uint8_t *b, size_t len, struct p2p_hdr *h)
{
	if (len < P2P_HDR || b[1] || b[2] || b[3])
		return -EPROTO;
	h->type = b[0];
	h->status = (int32_t)cs_get_be32(b + 4);
	h->gkey = cs_get_be64(b + 8);
	h->src = cs_get_be32(b + 16);
	h->dst = cs_get_be32(b + 20);
	h->tag = cs_get_be32(b + 24);
	h->aux = cs_get_be32(b + 28);
	h->seq = cs_get_be64(b + 32);
	h->off = cs_get_be64(b + 40);
	h->len = cs_get_be64(b + 48);
	if (h->type < P2P_RTS || h->type > P2P_ABORT_SEND)
		return -EPROTO;
	if (h->type != P2P_DATA && len != P2P_HDR)
		return -EPROTO;
	/* a status is 0, one of ours or a negative errno */
	if (h->status > 0 || h->status < -100000)
		return -EPROTO;
	return 0;
}

/* The header of a message about @r's transfer. */
static struct p2p_hdr hdr_of(const struct cs_ipc_p2p_req *r, uint8_t type)
{
	return (struct p2p_hdr){
		.type = type,
		.gkey = r->gkey,
		.src = r->recv ? r->peer : r->rank,
		.dst = r->recv ? r->rank : r->peer,
		.tag = r->tag,
		.seq = r->seq,
		.len = r->len,
	};
}

static int send_hdr(struct cs_p2p *p, uint32_t node, const struct p2p_hdr *h)
{
	uint8_t b[P2P_HDR];

	hdr_put(b, h);
	return cs_ps_flow_send(p->flow, node, b, sizeof(b));
}

/* ---- transfers (lcore) --------------------------------------------------- */

/* The request is done: the IPC side's now (or freed, its trainer gone). */
static void req_finish(struct cs_ipc_p2p_req *r, int status, unsigned detail,
		       int32_t peer, uint32_t aux)
{
	r->status = status;
	r->detail = (uint16_t)detail;
	r->err_peer = status ? peer : -1;
	r->aux = aux;
	if (atomic_exchange_explicit(&r->state, CS_IPC_P2P_DONE,
				     memory_order_acq_rel) == CS_IPC_P2P_ORPHAN)
		cs_ipc_p2p_req_free(r);
}

static void xfer_end(struct cs_p2p *p, struct xfer *x, int status,
		     unsigned detail, int32_t peer, uint32_t aux)
{
	for (struct xfer **pp = &p->xs; *pp; pp = &(*pp)->next)
		if (*pp == x) {
			*pp = x->next;
			break;
		}
	req_finish(x->r, status, detail, peer, aux);
	free(x);
	p->wake = true;
}

/* The flow rank of the node that holds @rank of @r's group. */
static uint32_t node_of(const struct cs_p2p *p, const struct cs_ipc_p2p_req *r,
			uint32_t rank)
{
	if (p->local)
		return 0;
	if (r->size == r->local_size)
		return p->self;
	return rank / r->local_size;
}

/* A receive meets its RTS (@h from @node): sizes must agree. */
static void recv_match(struct cs_p2p *p, struct xfer *x,
		       const struct p2p_hdr *h)
{
	struct p2p_hdr m = hdr_of(x->r, P2P_CTS);
	int32_t src = (int32_t)x->r->peer;

	if (h->len != x->r->len) {
		m.type = P2P_ABORT_SEND;
		m.status = CS_ERR_BAD_DESC;
		m.aux = (uint32_t)CS_MIN(x->r->len, UINT32_MAX);
		(void)send_hdr(p, x->node, &m);
		xfer_end(p, x, CS_ERR_BAD_DESC, CS_IPC_BAD_MISMATCH, src,
			 (uint32_t)CS_MIN(h->len, UINT32_MAX));
		return;
	}
	if (!x->r->len) { /* nothing comes: done */
		m.type = P2P_FIN;
		(void)send_hdr(p, x->node, &m);
		xfer_end(p, x, 0, 0, -1, 0);
		return;
	}
	x->phase = X_RECV;
	(void)send_hdr(p, x->node, &m);
}

static bool same(const struct p2p_hdr *a, const struct p2p_hdr *b)
{
	return a->gkey == b->gkey && a->src == b->src && a->dst == b->dst &&
	       a->tag == b->tag && a->seq == b->seq;
}

/* The transfer a message from @node is about: the receive (@recv) or the
 * send of (gkey, src, dst, tag, seq). */
static struct xfer *xfer_find(struct cs_p2p *p, const struct p2p_hdr *h,
			      bool recv, uint32_t node)
{
	for (struct xfer *x = p->xs; x; x = x->next) {
		struct p2p_hdr k;

		if (x->r->recv != recv || x->node != node)
			continue;
		k = hdr_of(x->r, 0);
		if (same(&k, h))
			return x;
	}
	return NULL;
}

/* Start @r: a send's RTS, or a receive that may meet a held RTS. */
static void req_start(struct cs_p2p *p, struct cs_ipc_p2p_req *r, cs_ns_t now)
{
	cs_ns_t dl = cs_core_svc_deadline(p->core);
	struct xfer *x = calloc(1, sizeof(*x));
	struct p2p_hdr k;
	int ret;

	if (!x) {
		req_finish(r, -ENOMEM, 0, -1, 0);
		p->wake = true;
		return;
	}
	x->r = r;
	x->node = node_of(p, r, r->peer);
	x->deadline = dl ? now + dl : 0;
	x->next = p->xs;
	p->xs = x;
	if (!r->recv) {
		x->phase = X_RTS;
		k = hdr_of(r, P2P_RTS);
		ret = send_hdr(p, x->node, &k);
		if (ret)
			xfer_end(p, x, ret, 0, -1, 0);
		return;
	}
	x->phase = X_POSTED;
	k = hdr_of(r, 0);
	for (struct rts **pp = &p->unexp, *u; (u = *pp); pp = &u->next)
		if (u->node == x->node && same(&u->h, &k)) {
			*pp = u->next;
			p->nunexp--;
			recv_match(p, x, &u->h);
			free(u);
			return;
		}
}

/* Refuse an RTS to a rank that is gone: the sender's transfer ends with
 * CS_ERR_PEER_LOST naming it. */
static void refuse_gone(struct cs_p2p *p, uint32_t node,
			const struct p2p_hdr *h)
{
	struct p2p_hdr m = *h;

	m.type = P2P_ABORT_SEND;
	m.status = CS_ERR_PEER_LOST;
	m.aux = 0;
	(void)send_hdr(p, node, &m);
}

/*
 * Rank @d's trainer is gone: the RTSs held for it are refused (their
 * senders end with CS_ERR_PEER_LOST naming it). Not remembered further: a
 * later RTS for that rank waits like any other (a new job's trainer may
 * take the rank, with its own numbering) and its sender ends at its
 * deadline if nobody receives it.
 */
static void mark_dead(struct cs_p2p *p, struct dead *d)
{
	for (struct rts **pp = &p->unexp, *u; (u = *pp);) {
		if (u->h.gkey != d->gkey || u->h.dst != d->rank) {
			pp = &u->next;
			continue;
		}
		*pp = u->next;
		p->nunexp--;
		refuse_gone(p, u->node, &u->h);
		free(u);
	}
	free(d);
}

/* What the IPC side queued. */
static void take(struct cs_p2p *p, cs_ns_t now)
{
	struct cs_ipc_p2p_req *list, *nx;
	struct dead *gone;

	pthread_mutex_lock(&p->lock);
	list = p->inq;
	p->inq = NULL;
	p->inq_tail = &p->inq;
	gone = p->gone_q;
	p->gone_q = NULL;
	atomic_store_explicit(&p->pending, false, memory_order_relaxed);
	pthread_mutex_unlock(&p->lock);
	for (struct dead *nd; gone; gone = nd) {
		nd = gone->next;
		mark_dead(p, gone);
	}
	for (; list; list = nx) {
		nx = list->next;
		if (atomic_load_explicit(&list->state, memory_order_acquire) ==
		    CS_IPC_P2P_ORPHAN) { /* its trainer is gone */
			cs_ipc_p2p_req_free(list);
			continue;
		}
		req_start(p, list, now);
	}
}

static void on_rts(struct cs_p2p *p, uint32_t node, const struct p2p_hdr *h)
{
	struct xfer *x = xfer_find(p, h, true, node);
	struct rts *u;

	if (x && x->phase == X_POSTED) {
		recv_match(p, x, h);
		return;
	}
	if (x) { /* a second RTS for one transfer */
		p->rx_bad++;
		return;
	}

	if (p->nunexp >= P2P_UNEXPECTED_MAX || !(u = calloc(1, sizeof(*u)))) {
		struct p2p_hdr m = *h;

		m.type = P2P_ABORT_SEND;
		m.status = -ENOBUFS;
		(void)send_hdr(p, node, &m);
		return;
	}
	u->h = *h;
	u->node = node;
	u->next = p->unexp;
	p->unexp = u;
	p->nunexp++;
}

static void on_data(struct cs_p2p *p, uint32_t node, const struct p2p_hdr *h,
		    const uint8_t *data, size_t len)
{
	struct xfer *x = xfer_find(p, h, true, node);
	struct p2p_hdr m;

	if (!x || x->phase != X_RECV || h->off > x->r->len ||
	    len > x->r->len - h->off || !len) {
		/* a receive that ended meanwhile (timed out, its trainer
		 * gone): not an error of the peer's */
		if (x)
			p->rx_bad++;
		return;
	}
	memcpy(x->r->buf + h->off, data, len);
	x->off += len; /* the flow delivers every frame once */
	if (x->off < x->r->len)
		return;
	m = hdr_of(x->r, P2P_FIN);
	(void)send_hdr(p, x->node, &m);
	xfer_end(p, x, 0, 0, -1, 0);
}

/* The completion's detail for an ABORT's status: whose side ended it. */
static unsigned abort_detail(int status)
{
	if (status == CS_ERR_BAD_DESC)
		return CS_IPC_BAD_MISMATCH; /* sizes differ */
	if (status == CS_ERR_PEER_LOST)
		return CS_IPC_LOST_RANK; /* the other trainer is gone */
	return 0;
}

static void p2p_rx(void *ctx, uint32_t src, const void *msg, size_t len,
		   cs_ns_t now)
{
	struct cs_p2p *p = ctx;
	struct p2p_hdr h;
	struct xfer *x;

	/* a trainer of this node queued its receive before the RTS came */
	if (atomic_load_explicit(&p->pending, memory_order_acquire))
		take(p, now);
	if (hdr_get(msg, len, &h)) {
		p->rx_bad++;
		return;
	}
	switch (h.type) {
	case P2P_RTS:
		on_rts(p, src, &h);
		break;
	case P2P_DATA:
		on_data(p, src, &h, (const uint8_t *)msg + P2P_HDR,
			len - P2P_HDR);
		break;
	case P2P_CTS:
		x = xfer_find(p, &h, false, src);
		if (x && x->phase == X_RTS)
			x->phase = X_STREAM;
		else
			p->rx_bad++;
		break;
	case P2P_FIN:
		x = xfer_find(p, &h, false, src);
		if (x)
			xfer_end(p, x, 0, 0, -1, 0);
		else
			p->rx_bad++;
		break;
	case P2P_ABORT_SEND:
		x = xfer_find(p, &h, false, src);
		if (x)
			xfer_end(p, x, h.status ? h.status : CS_ERR_PROTO,
				 abort_detail(h.status), (int32_t)h.dst, h.aux);
		break;
	case P2P_ABORT_RECV:
		x = xfer_find(p, &h, true, src);
		if (x) {
			xfer_end(p, x, h.status ? h.status : CS_ERR_PROTO,
				 abort_detail(h.status), (int32_t)h.src, h.aux);
			break;
		}
		/* the sender gave up before the receive was posted */
		for (struct rts **pp = &p->unexp, *u; (u = *pp); pp = &u->next)
			if (u->node == src && same(&u->h, &h)) {
				*pp = u->next;
				p->nunexp--;
				free(u);
				break;
			}
		break;
	}
}

/* Send what the window lets out of every streaming transfer. */
static unsigned stream(struct cs_p2p *p)
{
	size_t chunk = p->mss - P2P_HDR;
	unsigned work = 0;
	bool more = true;

	/* round robin, one frame per transfer and pass */
	while (more && cs_ps_flow_backlog(p->flow) < P2P_WINDOW) {
		more = false;
		for (struct xfer *x = p->xs, *nx; x; x = nx) {
			struct p2p_hdr h;
			size_t n;
			int ret;

			nx = x->next;
			if (x->phase != X_STREAM)
				continue;
			n = CS_MIN(chunk, x->r->len - x->off);
			h = hdr_of(x->r, P2P_DATA);
			h.off = x->off;
			hdr_put(p->frame, &h);
			memcpy(p->frame + P2P_HDR, x->r->buf + x->off, n);
			ret = cs_ps_flow_send(p->flow, x->node, p->frame,
					      P2P_HDR + n);
			if (ret) {
				xfer_end(p, x, ret, 0, -1, 0);
				continue;
			}
			x->off += n;
			work++;
			if (x->off == x->r->len)
				x->phase = X_FIN;
			else
				more = true;
		}
	}
	return work;
}

/* Transfers whose trainer is gone or whose deadline passed end; their
 * other side is told. */
static void reap(struct cs_p2p *p, cs_ns_t now)
{
	for (struct xfer *x = p->xs, *nx; x; x = nx) {
		bool orphan = atomic_load_explicit(&x->r->state,
						   memory_order_acquire) ==
			      CS_IPC_P2P_ORPHAN;
		bool late = x->deadline && now >= x->deadline;
		struct p2p_hdr m;
		int st = orphan ? CS_ERR_PEER_LOST : CS_ERR_TIMEOUT;

		nx = x->next;
		if (!orphan && !late)
			continue;
		/* the other side knows of it once an RTS went out (send)
		 * or came in (receive) */
		if (!x->r->recv || x->phase == X_RECV) {
			m = hdr_of(x->r, x->r->recv ? P2P_ABORT_SEND
						    : P2P_ABORT_RECV);
			m.status = st;
			(void)send_hdr(p, x->node, &m);
		}
		xfer_end(p, x, st, 0, -1, 0);
	}
}

static unsigned p2p_poll(void *arg, cs_ns_t now)
{
	struct cs_p2p *p = arg;
	unsigned work = 0;

	if (atomic_load_explicit(&p->pending, memory_order_acquire)) {
		take(p, now);
		work++;
	}
	work += cs_ps_flow_drain_local(p->flow, now, 256);
	work += stream(p);
	work += cs_ps_flow_drain_local(p->flow, now, 256);
	reap(p, now);
	if (p->wake) {
		p->wake = false;
		cs_core_svc_wake_ipc(p->core);
		work++;
	}
	return work;
}

/* ---- the IPC side -------------------------------------------------------- */

/* End everything left with @err (the flow is gone: ours now). */
static void teardown(struct cs_p2p *p, int err, int32_t node)
{
	unsigned detail = err == CS_ERR_PEER_LOST ? CS_IPC_LOST_SESSION : 0;

	pthread_mutex_lock(&p->lock);
	for (struct cs_ipc_p2p_req *r = p->inq, *nx; r; r = nx) {
		nx = r->next;
		if (atomic_load(&r->state) == CS_IPC_P2P_ORPHAN)
			cs_ipc_p2p_req_free(r);
		else
			req_finish(r, err, detail, node, 0);
	}
	p->inq = NULL;
	p->inq_tail = &p->inq;
	atomic_store(&p->pending, false);
	pthread_mutex_unlock(&p->lock);
	while (p->xs)
		xfer_end(p, p->xs, err, detail, node, 0);
	for (struct rts *u = p->unexp, *nx; u; u = nx) {
		nx = u->next;
		free(u);
	}
	p->unexp = NULL;
	p->nunexp = 0;
}

/* The lcore let go of the flow: end what is left, free it. */
static void flow_ended(struct cs_p2p *p, int st, uint32_t culprit)
{
	int err = st == 1 ? CS_ERR_CANCELLED : st;
	int32_t node =
		culprit == UINT32_MAX || p->local ? -1 : (int32_t)culprit;

	cs_core_svc_flow_free(p->core, p->h);
	p->h = NULL;
	if (p->xs || p->inq)
		CS_INFO("point-to-point flow ended: %s (node %d); its "
			"transfers fail",
			cs_strerror(err), (int)node);
	teardown(p, err, node);
	cs_ps_flow_destroy(p->flow);
	p->flow = NULL;
}

/* A flow for the current view, posted. */
static int flow_start(struct cs_p2p *p)
{
	uint32_t self, npeers, n, epoch = cs_core_svc_epoch(p->core);
	uint32_t *nodes;
	int ret;

	cs_core_svc_view(p->core, &self, &npeers);
	p->local = npeers < 2;
	p->self = self;
	n = p->local ? 1 : npeers;
	p->mss = cs_core_svc_frame_payload(p->core);
	if (p->mss <= P2P_HDR)
		return -EMSGSIZE;
	free(p->frame);
	p->frame = malloc(p->mss);
	nodes = malloc(n * sizeof(*nodes));
	if (!nodes || !p->frame) {
		free(nodes);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++)
		nodes[i] = p->local ? self : i;
	ret = cs_ps_flow_create(n, p->local ? 0 : self, p->mss, p2p_rx, p,
				&p->flow);
	if (!ret)
		ret = cs_core_svc_flow_post(
			p->core,
			&(struct cs_svc_flow){
				.group = p->local ? CS_P2P_GROUP_LOCAL
						  : CS_P2P_GROUP,
				.op_id = CS_P2P_OP_BASE + (epoch & 0xffff),
				.ops = &cs_ps_flow_ops,
				.arg = p->flow,
				.poll = p2p_poll,
				.poll_arg = p,
				.keep_on_stall = true },
			nodes, n, &p->h);
	if (ret) {
		free(nodes);
		cs_ps_flow_destroy(p->flow);
		p->flow = NULL;
		return ret;
	}
	CS_INFO("point-to-point flow: %u node(s), op %#x, view epoch %u", n,
		CS_P2P_OP_BASE + (epoch & 0xffff), epoch);
	return 0;
}

static int p2p_submit(void *ctx, struct cs_ipc_p2p_req *r, unsigned *detail)
{
	struct cs_p2p *p = ctx;
	uint32_t self, npeers, L = r->local_size;
	int ret;

	cs_core_svc_view(p->core, &self, &npeers);
	/* node k holds ranks k L .. k L + L - 1, the same L everywhere */
	if (r->size != L &&
	    (!L || r->size % L || r->size / L != CS_MAX(npeers, 1u) ||
	     r->rank / L != self)) {
		*detail = CS_IPC_BAD_LAYOUT;
		return CS_ERR_BAD_DESC;
	}
	if (!p->h) {
		ret = flow_start(p);
		if (ret)
			return ret;
	}
	r->next = NULL;
	pthread_mutex_lock(&p->lock);
	*p->inq_tail = r;
	p->inq_tail = &r->next;
	atomic_store_explicit(&p->pending, true, memory_order_release);
	pthread_mutex_unlock(&p->lock);
	cs_core_svc_flow_kick(p->core, p->h);
	return 0;
}

static void p2p_gone(void *ctx, uint64_t gkey, uint32_t rank)
{
	struct cs_p2p *p = ctx;
	struct dead *d;

	if (!p->h) /* no flow: no transfer here, nothing to refuse */
		return;
	d = calloc(1, sizeof(*d));
	if (!d)
		return;
	d->gkey = gkey;
	d->rank = rank;
	pthread_mutex_lock(&p->lock);
	d->next = p->gone_q;
	p->gone_q = d;
	atomic_store_explicit(&p->pending, true, memory_order_release);
	pthread_mutex_unlock(&p->lock);
	cs_core_svc_flow_kick(p->core, p->h);
}

static unsigned p2p_ipc_poll(void *ctx)
{
	struct cs_p2p *p = ctx;
	uint32_t culprit = UINT32_MAX;
	int st = p->h ? cs_core_svc_flow_state(p->h, &culprit) : 0;

	if (!st)
		return 0;
	flow_ended(p, st, culprit);
	return 1;
}

const struct cs_ipc_p2p_ops cs_p2p_ipc_ops = {
	.submit = p2p_submit,
	.poll = p2p_ipc_poll,
	.gone = p2p_gone,
};

int cs_p2p_create(struct cs_ar_svc *svc, struct cs_p2p **out)
{
	struct cs_p2p *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	p->core = cs_ar_svc_core(svc);
	pthread_mutex_init(&p->lock, NULL);
	p->inq_tail = &p->inq;
	atomic_init(&p->pending, false);
	*out = p;
	return 0;
}

void cs_p2p_destroy(struct cs_p2p *p)
{
	struct timespec ms = { 0, 1000000 };
	uint32_t culprit = UINT32_MAX;
	int st = 0;

	if (!p)
		return;
	if (p->h) {
		cs_core_svc_flow_cancel(p->core, p->h);
		for (unsigned i = 0; i < 2000; i++) {
			st = cs_core_svc_flow_state(p->h, &culprit);
			if (st)
				break;
			nanosleep(&ms, NULL);
		}
		if (!st) { /* the lcore may still use it: leave it */
			CS_WARN("point-to-point flow did not end; left as is");
			return;
		}
		flow_ended(p, st, culprit);
	}
	teardown(p, CS_ERR_CANCELLED, -1);
	for (struct dead *d = p->gone_q, *nx; d; d = nx) {
		nx = d->next;
		free(d);
	}
	pthread_mutex_destroy(&p->lock);
	free(p->frame);
	free(p);
}

/* SPDX-License-Identifier: MIT */
/* The discrete-event network simulator: event heap, links, switches, pool. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

#define PS_PER_NS 1000ull
#define PS_NEVER UINT64_MAX
#define POOL_CHUNK 1024
#define LINEAR_ROUTES 8 /* more links than this: a dense table */

enum ev_type {
	EV_TX_DONE, /* a link serialized its head frame */
	EV_ARRIVE, /* a frame reaches the far end of a link */
	EV_FORWARD, /* a switch hands a frame to a port */
	EV_TIMER, /* an endpoint's timer */
	EV_FAIL, /* a node dies */
};

struct ev {
	uint64_t t; /* ps */
	uint64_t order; /* insertion order: ties replay */
	void *ptr;
	uint32_t type;
	uint32_t idx;
};

struct pkt {
	struct cs_sim_pkt pub;
	struct pkt *next;
	uint8_t *buf; /* max_payload bytes, allocated lazily */
	uint32_t frame; /* bytes of link time */
	bool corrupt;
};

struct link {
	uint32_t from, to;
	struct cs_sim_link_params p;
	double ps_per_byte;
	uint64_t delay_ps;
	struct pkt *head, *tail;
	uint64_t qbytes; /* queued, including the frame in service */
	bool busy;
	uint32_t n_out;
	uint64_t out_start[CS_SIM_MAX_OUTAGES], out_end[CS_SIM_MAX_OUTAGES];
	struct cs_sim_link_stats st;
};

struct node {
	const struct cs_sim_node_ops *ops;
	void *ctx;
	bool is_switch;
	bool dead;
	uint64_t latency_ps;
	uint64_t timer_at; /* ps; PS_NEVER: none */
	uint64_t armed_at; /* earliest timer event in the heap */
	int64_t default_link; /* -1: none */
	uint32_t *links; /* outgoing link ids */
	uint32_t nlinks, cap_links;
	uint32_t *dense; /* dst -> link + 1 (0: none) */
	uint32_t dense_nodes, dense_links;
};

struct cs_sim {
	struct cs_sim_params p;
	uint64_t rng;
	uint64_t now; /* ps */
	uint64_t order;
	uint64_t events;
	bool stop;

	struct ev *heap;
	size_t nheap, capheap;

	struct node *nodes;
	uint32_t nnodes, capnodes;
	struct link *links;
	uint32_t nlinks, caplinks;

	struct pkt *free_pkts;
	void **chunks;
	size_t nchunks, capchunks;
};

/* ---- growable arrays (set-up time and pool high-water only) ---- */

static int grow(void **arr, uint32_t *cap, size_t elem, uint32_t need)
{
	uint32_t ncap;
	void *n;

	if (need <= *cap)
		return 0;
	ncap = *cap ? *cap * 2 : 16;
	while (ncap < need)
		ncap *= 2;
	n = realloc(*arr, ncap * elem);
	if (!n)
		return -ENOMEM;
	*arr = n;
	*cap = ncap;
	return 0;
}

/* ---- event heap ---- */

static inline bool ev_before(const struct ev *a, const struct ev *b)
{
	return a->t < b->t || (a->t == b->t && a->order < b->order);
}

static int push(struct cs_sim *sim, uint64_t t, uint32_t type, uint32_t idx,
		void *ptr)
{
	struct ev e = { t, sim->order++, ptr, type, idx };
	size_t i;

	if (sim->nheap == sim->capheap) {
		size_t ncap = sim->capheap ? sim->capheap * 2 : 1024;
		struct ev *n = realloc(sim->heap, ncap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		sim->heap = n;
		sim->capheap = ncap;
	}
	i = sim->nheap++;
	while (i) {
		size_t up = (i - 1) / 2;

		if (!ev_before(&e, &sim->heap[up]))
			break;
		sim->heap[i] = sim->heap[up];
		i = up;
	}
	sim->heap[i] = e;
	return 0;
}

static struct ev pop(struct cs_sim *sim)
{
	struct ev top = sim->heap[0], last = sim->heap[--sim->nheap];
	size_t i = 0, n = sim->nheap;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= n)
			break;
		if (c + 1 < n && ev_before(&sim->heap[c + 1], &sim->heap[c]))
			c++;
		if (!ev_before(&sim->heap[c], &last))
			break;
		sim->heap[i] = sim->heap[c];
		i = c;
	}
	if (n)
		sim->heap[i] = last;
	return top;
}

/* ---- packet pool ---- */

static struct pkt *pkt_get(struct cs_sim *sim)
{
	struct pkt *p;

	if (!sim->free_pkts) {
		struct pkt *chunk = calloc(POOL_CHUNK, sizeof(*chunk));

		if (!chunk)
			return NULL;
		if (sim->nchunks == sim->capchunks) {
			size_t ncap = sim->capchunks ? sim->capchunks * 2 : 16;
			void **n = realloc(sim->chunks, ncap * sizeof(*n));

			if (!n) {
				free(chunk);
				return NULL;
			}
			sim->chunks = n;
			sim->capchunks = ncap;
		}
		sim->chunks[sim->nchunks++] = chunk;
		for (size_t i = 0; i < POOL_CHUNK; i++) {
			chunk[i].next = sim->free_pkts;
			sim->free_pkts = &chunk[i];
		}
	}
	p = sim->free_pkts;
	sim->free_pkts = p->next;
	p->next = NULL;
	p->corrupt = false;
	return p;
}

static void pkt_put(struct cs_sim *sim, struct pkt *p)
{
	p->next = sim->free_pkts;
	sim->free_pkts = p;
}

/* Give @p a copy of @data; the buffer stays with the pool entry. */
static int pkt_fill(struct cs_sim *sim, struct pkt *p, const void *data,
		    uint32_t len)
{
	if (!data) {
		p->pub.data = NULL;
		return 0;
	}
	if (!p->buf) {
		p->buf = malloc(sim->p.max_payload ? sim->p.max_payload : 1);
		if (!p->buf)
			return -ENOMEM;
	}
	memcpy(p->buf, data, len);
	p->pub.data = p->buf;
	return 0;
}

/* ---- set-up ---- */

int cs_sim_create(struct cs_sim **out, const struct cs_sim_params *p)
{
	struct cs_sim *sim;

	if (!p->max_payload)
		return -EINVAL;
	sim = calloc(1, sizeof(*sim));
	if (!sim)
		return -ENOMEM;
	sim->p = *p;
	sim->rng = p->seed;
	*out = sim;
	return 0;
}

void cs_sim_destroy(struct cs_sim *sim)
{
	if (!sim)
		return;
	for (size_t i = 0; i < sim->nchunks; i++) {
		struct pkt *chunk = sim->chunks[i];

		for (size_t j = 0; j < POOL_CHUNK; j++)
			free(chunk[j].buf);
		free(chunk);
	}
	for (uint32_t i = 0; i < sim->nnodes; i++) {
		free(sim->nodes[i].links);
		free(sim->nodes[i].dense);
	}
	free(sim->chunks);
	free(sim->heap);
	free(sim->nodes);
	free(sim->links);
	free(sim);
}

static int node_new(struct cs_sim *sim, uint32_t *id, struct node **out)
{
	struct node *n;

	if (grow((void **)&sim->nodes, &sim->capnodes, sizeof(*n),
		 sim->nnodes + 1))
		return -ENOMEM;
	n = &sim->nodes[sim->nnodes];
	memset(n, 0, sizeof(*n));
	n->timer_at = PS_NEVER;
	n->armed_at = PS_NEVER;
	n->default_link = -1;
	*id = sim->nnodes++;
	*out = n;
	return 0;
}

int cs_sim_node_add(struct cs_sim *sim, const struct cs_sim_node_ops *ops,
		    void *ctx, uint32_t *id)
{
	struct node *n;
	int ret = node_new(sim, id, &n);

	if (ret)
		return ret;
	n->ops = ops;
	n->ctx = ctx;
	return 0;
}

int cs_sim_switch_add(struct cs_sim *sim, uint64_t latency_ns, uint32_t *id)
{
	struct node *n;
	int ret = node_new(sim, id, &n);

	if (ret)
		return ret;
	n->is_switch = true;
	n->latency_ps = latency_ns * PS_PER_NS;
	return 0;
}

int cs_sim_link_find(const struct cs_sim *sim, uint32_t from, uint32_t to)
{
	const struct node *n;

	if (from >= sim->nnodes)
		return -ENOENT;
	n = &sim->nodes[from];
	for (uint32_t i = 0; i < n->nlinks; i++)
		if (sim->links[n->links[i]].to == to)
			return (int)n->links[i];
	return -ENOENT;
}

int cs_sim_link_add(struct cs_sim *sim, uint32_t from, uint32_t to,
		    const struct cs_sim_link_params *p, uint32_t *id)
{
	struct node *n;
	struct link *l;

	if (from >= sim->nnodes || to >= sim->nnodes || from == to ||
	    !(p->gbps > 0) || p->loss < 0 || p->loss > 1 || p->dup < 0 ||
	    p->dup > 1 || p->reorder < 0 || p->reorder > 1 || p->corrupt < 0 ||
	    p->corrupt > 1)
		return -EINVAL;
	if (cs_sim_link_find(sim, from, to) >= 0)
		return -EEXIST;
	n = &sim->nodes[from];
	if (grow((void **)&n->links, &n->cap_links, sizeof(uint32_t),
		 n->nlinks + 1) ||
	    grow((void **)&sim->links, &sim->caplinks, sizeof(*l),
		 sim->nlinks + 1))
		return -ENOMEM;
	l = &sim->links[sim->nlinks];
	memset(l, 0, sizeof(*l));
	l->from = from;
	l->to = to;
	l->p = *p;
	l->ps_per_byte = 8e3 / p->gbps;
	l->delay_ps = p->delay_ns * PS_PER_NS;
	n->links[n->nlinks++] = sim->nlinks;
	if (id)
		*id = sim->nlinks;
	sim->nlinks++;
	return 0;
}

int cs_sim_link_pair(struct cs_sim *sim, uint32_t a, uint32_t b,
		     const struct cs_sim_link_params *p, uint32_t *ab,
		     uint32_t *ba)
{
	int ret = cs_sim_link_add(sim, a, b, p, ab);

	return ret ? ret : cs_sim_link_add(sim, b, a, p, ba);
}

int cs_sim_route_default(struct cs_sim *sim, uint32_t node, uint32_t link)
{
	if (node >= sim->nnodes || link >= sim->nlinks ||
	    sim->links[link].from != node)
		return -EINVAL;
	sim->nodes[node].default_link = link;
	return 0;
}

int cs_sim_link_outage(struct cs_sim *sim, uint32_t link, cs_ns_t start,
		       cs_ns_t end)
{
	struct link *l;

	if (link >= sim->nlinks || end <= start)
		return -EINVAL;
	l = &sim->links[link];
	if (l->n_out == CS_SIM_MAX_OUTAGES)
		return -ENOSPC;
	l->out_start[l->n_out] = start * PS_PER_NS;
	l->out_end[l->n_out] = end * PS_PER_NS;
	l->n_out++;
	return 0;
}

int cs_sim_node_fail_at(struct cs_sim *sim, uint32_t node, cs_ns_t t)
{
	if (node >= sim->nnodes)
		return -EINVAL;
	return push(sim, t * PS_PER_NS, EV_FAIL, node, NULL);
}

int cs_sim_star(struct cs_sim *sim, const uint32_t *hosts, uint32_t n,
		const struct cs_sim_link_params *host_link,
		const struct cs_sim_link_params *port_link, uint32_t *sw)
{
	uint32_t s, up;
	int ret = cs_sim_switch_add(sim, 0, &s);

	for (uint32_t i = 0; !ret && i < n; i++) {
		ret = cs_sim_link_add(sim, hosts[i], s, host_link, &up);
		if (!ret)
			ret = cs_sim_link_add(sim, s, hosts[i], port_link,
					      NULL);
		if (!ret)
			ret = cs_sim_route_default(sim, hosts[i], up);
	}
	if (!ret && sw)
		*sw = s;
	return ret;
}

/* ---- routing ---- */

static int route(struct cs_sim *sim, uint32_t from, uint32_t dst)
{
	struct node *n = &sim->nodes[from];

	if (n->nlinks <= LINEAR_ROUTES) {
		for (uint32_t i = 0; i < n->nlinks; i++)
			if (sim->links[n->links[i]].to == dst)
				return (int)n->links[i];
		return (int)n->default_link;
	}
	if (n->dense_nodes != sim->nnodes || n->dense_links != n->nlinks) {
		uint32_t *d = realloc(n->dense, sim->nnodes * sizeof(*d));

		if (!d)
			return -1;
		memset(d, 0, sim->nnodes * sizeof(*d));
		for (uint32_t i = 0; i < n->nlinks; i++)
			d[sim->links[n->links[i]].to] = n->links[i] + 1;
		n->dense = d;
		n->dense_nodes = sim->nnodes;
		n->dense_links = n->nlinks;
	}
	if (dst < n->dense_nodes && n->dense[dst])
		return (int)n->dense[dst] - 1;
	return (int)n->default_link;
}

/* ---- links ---- */

static uint64_t ser_ps(const struct link *l, uint32_t frame)
{
	return (uint64_t)llround(frame * l->ps_per_byte);
}

static void start_tx(struct cs_sim *sim, struct link *l, uint32_t id)
{
	l->busy = true;
	push(sim, sim->now + ser_ps(l, l->head->frame), EV_TX_DONE, id, NULL);
}

/* Put @p on link @id's queue; it is freed on a tail drop. */
static int enqueue(struct cs_sim *sim, uint32_t id, struct pkt *p)
{
	struct link *l = &sim->links[id];

	if (l->p.queue_bytes && l->qbytes + p->frame > l->p.queue_bytes) {
		l->st.drop_queue++;
		pkt_put(sim, p);
		return -ENOBUFS;
	}
	if (l->p.ecn_bytes && l->qbytes > l->p.ecn_bytes) {
		p->pub.hdr.flags |= CS_PKT_F_CE;
		l->st.ecn_marked++;
	}
	l->qbytes += p->frame;
	if (l->qbytes > l->st.queue_max)
		l->st.queue_max = l->qbytes;
	p->next = NULL;
	if (l->tail)
		l->tail->next = p;
	else
		l->head = p;
	l->tail = p;
	if (!l->busy)
		start_tx(sim, l, id);
	return 0;
}

static bool in_outage(const struct link *l, uint64_t t)
{
	for (uint32_t i = 0; i < l->n_out; i++)
		if (t >= l->out_start[i] && t < l->out_end[i])
			return true;
	return false;
}

static inline bool chance(struct cs_sim *sim, double p)
{
	return p > 0 && cs_rand_unit(&sim->rng) < p;
}

/* Serialization done: the frame is on the wire; draw its fate. */
static void tx_done(struct cs_sim *sim, uint32_t id)
{
	struct link *l = &sim->links[id];
	struct pkt *p = l->head;
	uint64_t arrive, ser = ser_ps(l, p->frame);

	l->head = p->next;
	if (!l->head)
		l->tail = NULL;
	l->qbytes -= p->frame;
	l->busy = false;
	l->st.frames++;
	l->st.bytes += p->frame;
	l->st.payload += p->pub.len;
	l->st.busy_ps += ser;
	if (l->head)
		start_tx(sim, l, id);

	arrive = sim->now + l->delay_ps;
	if (sim->nodes[l->from].dead) {
		l->st.drop_dead++;
		goto drop;
	}
	if (chance(sim, l->p.loss)) {
		l->st.drop_loss++;
		goto drop;
	}
	if (chance(sim, l->p.corrupt)) {
		/* Flip one bit; the receiving NIC's FCS check drops it. */
		uint64_t r = cs_sim_rand(sim);

		if (p->pub.data && p->pub.len)
			p->buf[r % p->pub.len] ^= (uint8_t)(1u << (r >> 61));
		else
			p->pub.hdr.offset ^= 1ull << (r >> 58);
		p->corrupt = true;
	}
	if (chance(sim, l->p.reorder) && l->p.reorder_ns) {
		arrive += cs_sim_rand(sim) % (l->p.reorder_ns * PS_PER_NS);
		l->st.reordered++;
	}
	if (in_outage(l, arrive)) {
		l->st.drop_outage++;
		goto drop;
	}
	if (chance(sim, l->p.dup)) {
		struct pkt *d = pkt_get(sim);

		if (d && !pkt_fill(sim, d, p->pub.data, p->pub.len)) {
			d->pub.hdr = p->pub.hdr;
			d->pub.src = p->pub.src;
			d->pub.dst = p->pub.dst;
			d->pub.len = p->pub.len;
			d->frame = p->frame;
			d->corrupt = p->corrupt;
			l->st.dups++;
			push(sim, arrive, EV_ARRIVE, id, d);
		} else if (d) {
			pkt_put(sim, d);
		}
	}
	push(sim, arrive, EV_ARRIVE, id, p);
	return;
drop:
	pkt_put(sim, p);
}

static void arrive(struct cs_sim *sim, uint32_t id, struct pkt *p)
{
	struct link *l = &sim->links[id];
	struct node *n = &sim->nodes[l->to];

	if (n->dead) {
		l->st.drop_dead++;
		goto drop;
	}
	if (p->corrupt) {
		l->st.drop_corrupt++;
		goto drop;
	}
	l->st.delivered++;
	if (n->is_switch) {
		if (n->latency_ps) {
			push(sim, sim->now + n->latency_ps, EV_FORWARD, l->to,
			     p);
			return;
		}
		int out = route(sim, l->to, p->pub.dst);

		if (out < 0)
			goto drop;
		enqueue(sim, (uint32_t)out, p);
		return;
	}
	if (n->ops && n->ops->rx)
		n->ops->rx(sim, n->ctx, &p->pub, sim->now / PS_PER_NS);
drop:
	pkt_put(sim, p);
}

static void forward(struct cs_sim *sim, uint32_t sw, struct pkt *p)
{
	int out = route(sim, sw, p->pub.dst);

	if (out < 0 || sim->nodes[sw].dead) {
		pkt_put(sim, p);
		return;
	}
	enqueue(sim, (uint32_t)out, p);
}

/* ---- endpoint calls ---- */

int cs_sim_send(struct cs_sim *sim, uint32_t node, uint32_t dst,
		const struct cs_pkt_hdr *hdr, const void *data, uint32_t len)
{
	struct pkt *p;
	int out;

	if (node >= sim->nnodes || dst >= sim->nnodes ||
	    len > sim->p.max_payload || sim->nodes[node].is_switch)
		return -EINVAL;
	if (sim->nodes[node].dead)
		return -ENETDOWN;
	out = route(sim, node, dst);
	if (out < 0)
		return -EHOSTUNREACH;
	p = pkt_get(sim);
	if (!p)
		return -ENOMEM;
	if (pkt_fill(sim, p, data, len)) {
		pkt_put(sim, p);
		return -ENOMEM;
	}
	p->pub.hdr = *hdr;
	p->pub.hdr.len = len;
	p->pub.src = node;
	p->pub.dst = dst;
	p->pub.len = len;
	p->frame = CS_PROTO_FRAME_OVERHEAD + len + CS_SIM_WIRE_EXTRA;
	return enqueue(sim, (uint32_t)out, p);
}

uint64_t cs_sim_backlog(const struct cs_sim *sim, uint32_t node, uint32_t dst)
{
	int l = route((struct cs_sim *)sim, node, dst);
	const struct link *lk;

	if (l < 0)
		return 0;
	lk = &sim->links[l];
	return lk->busy ? lk->qbytes - lk->head->frame : lk->qbytes;
}

void cs_sim_timer(struct cs_sim *sim, uint32_t node, cs_ns_t at)
{
	struct node *n;
	uint64_t t;

	if (node >= sim->nnodes)
		return;
	n = &sim->nodes[node];
	if (at == CS_NS_NEVER) {
		n->timer_at = PS_NEVER;
		return;
	}
	t = at * PS_PER_NS;
	if (t < sim->now)
		t = sim->now;
	n->timer_at = t;
	/* One heap entry per earlier deadline; a later one is re-armed when
	 * the earlier entry pops (lazy), so pushing a deadline back costs
	 * nothing. */
	if (t < n->armed_at && !push(sim, t, EV_TIMER, node, NULL))
		n->armed_at = t;
}

static void timer_ev(struct cs_sim *sim, uint32_t node, uint64_t t)
{
	struct node *n = &sim->nodes[node];

	if (t == n->armed_at)
		n->armed_at = PS_NEVER;
	if (n->dead || n->timer_at == PS_NEVER)
		return;
	if (n->timer_at <= t) {
		n->timer_at = PS_NEVER;
		if (n->ops && n->ops->timer)
			n->ops->timer(sim, n->ctx, t / PS_PER_NS);
	} else if (n->timer_at < n->armed_at &&
		   !push(sim, n->timer_at, EV_TIMER, node, NULL)) {
		n->armed_at = n->timer_at;
	}
}

cs_ns_t cs_sim_now(const struct cs_sim *sim)
{
	return sim->now / PS_PER_NS;
}

uint64_t cs_sim_rand(struct cs_sim *sim)
{
	return cs_rand_next(&sim->rng);
}

void cs_sim_stop(struct cs_sim *sim)
{
	sim->stop = true;
}

int cs_sim_run(struct cs_sim *sim, cs_ns_t until)
{
	uint64_t until_ps =
		until >= UINT64_MAX / PS_PER_NS ? PS_NEVER : until * PS_PER_NS;

	sim->stop = false;
	while (sim->nheap) {
		struct ev e;

		if (sim->heap[0].t > until_ps)
			return 2;
		e = pop(sim);
		sim->now = e.t;
		sim->events++;
		switch (e.type) {
		case EV_TX_DONE:
			tx_done(sim, e.idx);
			break;
		case EV_ARRIVE:
			arrive(sim, e.idx, e.ptr);
			break;
		case EV_FORWARD:
			forward(sim, e.idx, e.ptr);
			break;
		case EV_TIMER:
			timer_ev(sim, e.idx, e.t);
			break;
		case EV_FAIL:
			sim->nodes[e.idx].dead = true;
			break;
		}
		if (sim->stop)
			return 1;
	}
	return 0;
}

const struct cs_sim_link_stats *cs_sim_link_stats(const struct cs_sim *sim,
						  uint32_t link)
{
	return link < sim->nlinks ? &sim->links[link].st : NULL;
}

uint64_t cs_sim_events(const struct cs_sim *sim)
{
	return sim->events;
}

uint32_t cs_sim_nodes(const struct cs_sim *sim)
{
	return sim->nnodes;
}

uint32_t cs_sim_links(const struct cs_sim *sim)
{
	return sim->nlinks;
}

/* SPDX-License-Identifier: MIT */
/* Simulated scenarios: a p2p transfer and an N-to-1 incast over cs_rel. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sim/scen.h"

/* ---- a byte stream over one cs_rel session ---- */

/*
 * One direction of data per flow: a sender streams @bytes from @src; the
 * receiver places each delivered packet at its offset and counts how
 * often each packet index was delivered (must be exactly once). The
 * cookie of a packet is its index; the source buffer is never written,
 * so a retransmission rebuilt from it is byte-identical (rel.h, (a)).
 */
struct flow {
	struct cs_rel rel;
	struct cs_path path;
	uint32_t peer; /* remote node */
	uint32_t payload;
	uint64_t bytes;
	/* sender */
	bool sender;
	const uint8_t *src; /* NULL: synthetic payload */
	uint64_t next_off;
	/* receiver */
	uint8_t *dst;
	uint8_t *seen; /* deliveries per packet index */
	uint64_t rcvd;
	uint64_t delivered_twice;
	uint64_t bad; /* offsets or lengths that make no sense */
	cs_ns_t done_at;
	cs_ns_t next_t; /* when service() wants to run again */
};

struct ep {
	struct cs_sim *sim;
	uint32_t id;
	struct flow **flows; /* by remote node id; NULL: none */
	uint32_t nflows_cap;
	struct flow **list; /* the flows of this endpoint */
	uint32_t nlist;
	uint64_t send_err;
	/* after a delivery on @f, e.g. the receiver's credit scheduler */
	void (*after_rx)(void *ctx, struct flow *f);
	void *after_ctx;
};

static uint32_t pkt_len(const struct flow *f, uint64_t off)
{
	return (uint32_t)CS_MIN((uint64_t)f->payload, f->bytes - off);
}

static void fill_hdr(struct cs_pkt_hdr *h, uint32_t me, uint64_t off, bool last)
{
	memset(h, 0, sizeof(*h));
	h->version = CS_PROTO_VERSION;
	h->type = CS_PKT_DATA;
	h->src = (uint16_t)me;
	h->group = 1;
	h->epoch = 1;
	h->op = 1;
	h->offset = off;
	h->flags = last ? CS_PKT_F_LAST : 0;
}

static void xmit(struct ep *ep, struct flow *f, const struct cs_pkt_hdr *h,
		 uint64_t off)
{
	const void *data = h->len && f->src ? f->src + off : NULL;

	if (cs_sim_send(ep->sim, ep->id, f->peer, h, data, h->len))
		ep->send_err++; /* a NIC drop: repaired like any loss */
}

/* Send what may be sent now; return when to look again. */
static cs_ns_t service(struct ep *ep, struct flow *f, cs_ns_t now)
{
	struct cs_pkt_hdr h;
	cs_ns_t next = cs_rel_next_deadline(&f->rel);
	uint64_t cookie;
	uint32_t seq, len;

	while (!cs_rel_next_retx(&f->rel, &seq, &cookie, &len)) {
		cs_ns_t t = cs_rel_retx_time(&f->rel, len, now);
		uint64_t off = cookie * f->payload;

		if (t > now) {
			next = CS_MIN(next, t);
			break;
		}
		fill_hdr(&h, ep->id, off, off + len == f->bytes);
		if (cs_rel_stamp_retx(&f->rel, &h, seq, now))
			break;
		xmit(ep, f, &h, off);
	}
	while (f->sender && f->next_off < f->bytes && !f->rel.n_lost) {
		uint64_t off = f->next_off;
		cs_ns_t t;

		len = pkt_len(f, off);
		t = cs_rel_tx_time(&f->rel, len, now);
		if (t > now) {
			next = CS_MIN(next, t);
			break;
		}
		fill_hdr(&h, ep->id, off, off + len == f->bytes);
		if (cs_rel_stamp(&f->rel, &h, off / f->payload, len, now))
			break;
		xmit(ep, f, &h, off);
		f->next_off += len;
	}
	/* An ACK, and the SACK extension that may follow it. */
	while (cs_rel_ack_due(&f->rel, now)) {
		memset(&h, 0, sizeof(h));
		h.version = CS_PROTO_VERSION;
		h.src = (uint16_t)ep->id;
		h.group = 1;
		h.epoch = 1;
		cs_rel_build_ack(&f->rel, &h, now);
		xmit(ep, f, &h, 0);
	}
	return CS_MIN(next, cs_rel_next_deadline(&f->rel));
}

/* Run the flows that are due (their timers, then service()), and set the
 * endpoint's timer to the earliest next time. A flow is due when its
 * time came or something poked it (next_t = 0). */
static void rearm(struct ep *ep, cs_ns_t now)
{
	cs_ns_t next = CS_NS_NEVER;

	for (uint32_t i = 0; i < ep->nlist; i++) {
		struct flow *f = ep->list[i];

		if (f->next_t <= now) {
			cs_rel_on_timer(&f->rel, now);
			f->next_t = service(ep, f, now);
		}
		next = CS_MIN(next, f->next_t);
	}
	if (next != CS_NS_NEVER && next <= now)
		next = now + 1;
	cs_sim_timer(ep->sim, ep->id, next);
}

static void deliver(struct flow *f, const struct cs_sim_pkt *pkt, cs_ns_t now)
{
	uint64_t off = pkt->hdr.offset, idx = off / f->payload;

	if (!pkt->len)
		return; /* a filler (rel.h (b)): not sent here */
	if (off % f->payload || off >= f->bytes ||
	    pkt->len != pkt_len(f, off)) {
		f->bad++;
		return;
	}
	if (f->seen[idx]++) {
		f->delivered_twice++;
		return;
	}
	if (f->dst && pkt->data)
		memcpy(f->dst + off, pkt->data, pkt->len);
	f->rcvd += pkt->len;
	if (f->rcvd == f->bytes)
		f->done_at = now;
}

static void ep_rx(struct cs_sim *sim, void *ctx, const struct cs_sim_pkt *pkt,
		  cs_ns_t now)
{
	struct ep *ep = ctx;
	struct flow *f = pkt->src < ep->nflows_cap ? ep->flows[pkt->src] : NULL;
	int m;

	(void)sim;
	if (!f)
		return;
	m = cs_rel_on_packet(&f->rel, &pkt->hdr, now);
	if (m & CS_REL_DELIVER) {
		deliver(f, pkt, now);
		if (ep->after_rx)
			ep->after_rx(ep->after_ctx, f);
	}
	f->next_t = 0;
	rearm(ep, now);
}

static void ep_timer(struct cs_sim *sim, void *ctx, cs_ns_t now)
{
	struct ep *ep = ctx;

	(void)sim;
	rearm(ep, now);
}

static const struct cs_sim_node_ops ep_ops = {
	.rx = ep_rx,
	.timer = ep_timer,
};

static int ep_init(struct ep *ep, struct cs_sim *sim, uint32_t nodes_max,
		   uint32_t flows_max)
{
	memset(ep, 0, sizeof(*ep));
	ep->sim = sim;
	ep->flows = calloc(nodes_max, sizeof(*ep->flows));
	ep->list = calloc(flows_max, sizeof(*ep->list));
	ep->nflows_cap = nodes_max;
	if (!ep->flows || !ep->list)
		return -ENOMEM;
	return cs_sim_node_add(sim, &ep_ops, ep, &ep->id);
}

static void ep_fini(struct ep *ep)
{
	free(ep->flows);
	free(ep->list);
}

/* A flow endpoint of @ep towards @peer: a sender of @src (NULL: synthetic
 * bytes) unless @recv, a receiver that keeps the bytes when @copy. */
static int flow_init(struct flow *f, struct ep *ep, uint32_t peer,
		     const struct cs_xport_params *xp, uint32_t isn_tx,
		     uint32_t isn_rx, uint64_t bytes, uint32_t payload,
		     const uint8_t *src, bool recv, bool copy)
{
	int ret;

	memset(f, 0, sizeof(*f));
	f->peer = peer;
	f->bytes = bytes;
	f->payload = payload;
	f->sender = !recv;
	f->src = src;
	ret = cs_path_init(&f->path, &xp->pacer, &xp->cc);
	if (ret)
		return ret;
	ret = cs_rel_init(&f->rel, &xp->rel, &f->path, NULL, f, isn_tx, isn_rx);
	if (ret)
		return ret;
	if (recv) {
		f->seen = calloc(CS_DIV_ROUND_UP(bytes, payload) + 1, 1);
		if (copy)
			f->dst = malloc(bytes ? bytes : 1);
		if (!f->seen || (copy && !f->dst))
			return -ENOMEM;
	}
	ep->flows[peer] = f;
	ep->list[ep->nlist++] = f;
	return 0;
}

static void flow_fini(struct flow *f)
{
	cs_rel_fini(&f->rel);
	free(f->seen);
	free(f->dst);
}

/* 64-bit FNV-1a over 8-byte words (tail bytewise). */
static uint64_t csum(const uint8_t *p, uint64_t n)
{
	uint64_t h = 0xcbf29ce484222325ull, w;
	uint64_t i = 0;

	for (; i + 8 <= n; i += 8) {
		memcpy(&w, p + i, 8);
		h = (h ^ w) * 0x100000001b3ull;
		h ^= h >> 29;
	}
	for (; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

static uint8_t *pattern(uint64_t bytes, uint64_t seed)
{
	uint8_t *b = malloc(bytes ? bytes : 1);
	uint64_t s = seed ^ 0x5eed5eed5eedull, i, w;

	if (!b)
		return NULL;
	for (i = 0; i + 8 <= bytes; i += 8) {
		w = cs_rand_next(&s);
		memcpy(b + i, &w, 8);
	}
	for (; i < bytes; i++)
		b[i] = (uint8_t)cs_rand_next(&s);
	return b;
}

/* ---- p2p ---- */

int cs_sim_p2p_defaults(struct cs_sim_p2p_cfg *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->bytes = 64ull << 20;
	cfg->seed = 1;
	cfg->link.gbps = 100;
	cfg->link.delay_ns = 2000;
	cfg->link.reorder_ns = 5000;
	cfg->payload = CS_SIM_MTU_PAYLOAD;
	cfg->time_limit = 60 * CS_NS_PER_S;
	return cs_xport_params_default(&cfg->xp);
}

int cs_sim_p2p_run(const struct cs_sim_p2p_cfg *cfg,
		   struct cs_sim_p2p_result *res)
{
	struct cs_sim_params sp = { .seed = cfg->seed,
				    .max_payload = CS_SIM_MTU_PAYLOAD };
	struct cs_xport_params xp = cfg->xp;
	struct flow tx = { 0 }, rx = { 0 };
	struct ep a, b;
	struct cs_sim *sim = NULL;
	uint32_t ab;
	uint8_t *src = NULL;
	int ret;

	memset(res, 0, sizeof(*res));
	if (!cfg->payload || cfg->payload > CS_SIM_MTU_PAYLOAD || !cfg->bytes)
		return -EINVAL;
	xp.cc.line_gbps = cfg->link.gbps;
	if (xp.cc.min_gbps > xp.cc.line_gbps)
		xp.cc.min_gbps = xp.cc.line_gbps;
	ret = cs_sim_create(&sim, &sp);
	if (ret)
		return ret;
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	if (!cfg->synthetic)
		src = pattern(cfg->bytes, cfg->seed);
	ret = src || cfg->synthetic ? 0 : -ENOMEM;
	if (!ret)
		ret = ep_init(&a, sim, 2, 1);
	if (!ret)
		ret = ep_init(&b, sim, 2, 1);
	if (!ret)
		ret = cs_sim_link_pair(sim, a.id, b.id, &cfg->link, &ab, NULL);
	if (!ret)
		ret = flow_init(&tx, &a, b.id, &xp, cfg->isn, cfg->isn + 7,
				cfg->bytes, cfg->payload, src, false, false);
	if (!ret)
		ret = flow_init(&rx, &b, a.id, &xp, cfg->isn + 7, cfg->isn,
				cfg->bytes, cfg->payload, NULL, true,
				!cfg->synthetic);
	if (!ret && cfg->outage_len)
		ret = cs_sim_link_outage(sim, ab, cfg->outage_start,
					 cfg->outage_start + cfg->outage_len);
	if (!ret && cfg->fail_at)
		ret = cs_sim_node_fail_at(sim, b.id, cfg->fail_at);
	if (ret)
		goto out;

	rearm(&a, 0);
	cs_sim_run(sim, cfg->time_limit);

	res->bytes_delivered = rx.rcvd;
	res->packets = tx.rel.st.data_sent;
	res->retx = tx.rel.st.retx;
	res->fast_retx = tx.rel.st.fast_retx;
	res->timeouts = tx.rel.st.timeouts;
	res->dup_rcvd = rx.rel.st.dup_rcvd;
	res->delivered_twice = rx.delivered_twice;
	res->acks = rx.rel.st.acks_sent;
	res->events = cs_sim_events(sim);
	if (!cfg->synthetic) {
		res->csum_src = csum(src, cfg->bytes);
		res->csum_dst = csum(rx.dst, cfg->bytes);
	}
	res->time_ns = rx.done_at;
	if (rx.done_at)
		res->goodput_frac = (double)cfg->bytes * 8 /
				    ((double)rx.done_at * cfg->link.gbps);
	if (rx.rcvd != cfg->bytes)
		snprintf(res->why, sizeof(res->why),
			 "delivered %llu of %llu bytes%s",
			 (unsigned long long)rx.rcvd,
			 (unsigned long long)cfg->bytes,
			 cs_rel_failed(&tx.rel) ? " (session failed)" : "");
	else if (rx.delivered_twice || rx.bad)
		snprintf(res->why, sizeof(res->why),
			 "%llu packets delivered twice, %llu malformed",
			 (unsigned long long)rx.delivered_twice,
			 (unsigned long long)rx.bad);
	else if (res->csum_src != res->csum_dst)
		snprintf(res->why, sizeof(res->why), "checksum differs");
	else if (!cs_rel_idle(&tx.rel))
		snprintf(res->why, sizeof(res->why),
			 "sender never saw the last ACK");
	else
		res->ok = true;
out:
	flow_fini(&tx);
	flow_fini(&rx);
	ep_fini(&a);
	ep_fini(&b);
	free(src);
	cs_sim_destroy(sim);
	return ret;
}

/* ---- incast ---- */

/*
 * The receiver's credit scheduler. While the budget covers a packet per
 * active sender, every active sender gets an equal share. Otherwise K =
 * budget / frame senders at a time hold a one-packet grant; a holder whose
 * packet arrived passes the grant on, round robin. Either way the bytes in
 * flight towards the receiver stay within the budget (+ under one packet
 * per holder), whatever N is.
 */
enum { SCHED_IDLE, SCHED_HOLDER, SCHED_DONE };

struct credit_sched {
	struct flow *rx;
	uint32_t n, next, nholders, active;
	uint64_t budget, bytes;
	uint32_t payload, frame;
	bool fair;
	uint8_t *state; /* SCHED_* per sender */
	uint64_t *granted_at; /* rcvd when the grant was given */
};

static void grant(struct flow *f, uint64_t bytes)
{
	if (f->rel.grant != bytes) {
		cs_rel_set_grant(&f->rel, bytes);
		f->next_t = 0; /* tell the sender now */
	}
}

/* Even shares for every active sender (when the budget holds a packet
 * for each): recomputed only when the number of active senders changes. */
static void sched_share(struct credit_sched *s)
{
	s->fair = true;
	for (uint32_t i = 0; i < s->n; i++)
		grant(&s->rx[i],
		      s->state[i] == SCHED_DONE ? 0 : s->budget / s->active);
}

/* After a delivery on @f (NULL: start): O(1) except when a sender
 * finishes or the holders' ring has to skip finished senders. */
static void sched_update(void *ctx, struct flow *f)
{
	struct credit_sched *s = ctx;
	uint32_t k;

	if (f) {
		uint32_t i = (uint32_t)(f - s->rx);

		if (s->state[i] == SCHED_HOLDER &&
		    f->rcvd != s->granted_at[i]) {
			s->state[i] = SCHED_IDLE;
			s->nholders--;
			grant(f, 0);
		}
		if (f->rcvd == s->bytes && s->state[i] != SCHED_DONE) {
			if (s->state[i] == SCHED_HOLDER)
				s->nholders--;
			s->state[i] = SCHED_DONE;
			grant(f, 0);
			if (!--s->active)
				return;
			if (s->budget / s->active >= s->payload) {
				sched_share(s);
				return;
			}
		}
	}
	if (s->fair || !s->active)
		return;
	k = (uint32_t)CS_MAX(1, s->budget / s->frame);
	for (uint32_t tries = 0; s->nholders < k && tries < s->n; tries++) {
		uint32_t i = s->next;

		s->next = (s->next + 1) % s->n;
		if (s->state[i] != SCHED_IDLE)
			continue;
		s->state[i] = SCHED_HOLDER;
		s->nholders++;
		s->granted_at[i] = s->rx[i].rcvd;
		grant(&s->rx[i], 1);
	}
}

int cs_sim_incast_defaults(struct cs_sim_incast_cfg *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->senders = 16;
	cfg->bytes = 4ull << 20;
	cfg->seed = 1;
	cfg->link.gbps = 100;
	cfg->link.delay_ns = 1000;
	cfg->link.reorder_ns = 5000;
	cfg->port_buffer = 1ull << 20;
	cfg->credit_budget = 256ull << 10;
	cfg->payload = CS_SIM_MTU_PAYLOAD;
	cfg->time_limit = 60 * CS_NS_PER_S;
	return cs_xport_params_default(&cfg->xp);
}

int cs_sim_incast_run(const struct cs_sim_incast_cfg *cfg,
		      struct cs_sim_incast_result *res)
{
	struct cs_sim_params sp = { .seed = cfg->seed,
				    .max_payload = CS_SIM_MTU_PAYLOAD };
	struct cs_xport_params xp = cfg->xp;
	struct cs_sim_link_params host = cfg->link, port = cfg->link;
	uint32_t n = cfg->senders, nodes = n + 2, sw, *ids = NULL;
	struct flow *tx = NULL, *rx = NULL;
	struct ep *eps = NULL, *recv;
	struct cs_sim *sim = NULL;
	struct credit_sched cs = { 0 };
	double sum = 0, sum2 = 0;
	cs_ns_t end = 0;
	int ret, down;

	memset(res, 0, sizeof(*res));
	if (!n || n > 4096 || !cfg->bytes || !cfg->payload ||
	    cfg->payload > CS_SIM_MTU_PAYLOAD)
		return -EINVAL;
	xp.cc.line_gbps = cfg->link.gbps;
	if (xp.cc.min_gbps > xp.cc.line_gbps)
		xp.cc.min_gbps = xp.cc.line_gbps;
	xp.rel.credit = cfg->credit_budget != 0;
	/* Both ends assume the same initial grant: a fair share when the
	 * budget holds a packet per sender, else none (the scheduler hands
	 * out one-packet grants from t = 0). */
	if (xp.rel.credit)
		xp.rel.credit_init = cfg->credit_budget / n >= cfg->payload
					     ? cfg->credit_budget / n
					     : 0;
	host.queue_bytes = 0; /* NIC rings: the pacer bounds them */
	port.queue_bytes = cfg->port_buffer;
	port.ecn_bytes = cfg->ecn_bytes;

	ret = cs_sim_create(&sim, &sp);
	if (ret)
		return ret;
	eps = calloc(n + 1, sizeof(*eps));
	tx = calloc(n, sizeof(*tx));
	rx = calloc(n, sizeof(*rx));
	ids = calloc(n + 1, sizeof(*ids));
	cs.state = calloc(n, 1);
	cs.granted_at = calloc(n, sizeof(*cs.granted_at));
	ret = eps && tx && rx && ids && cs.state && cs.granted_at ? 0 : -ENOMEM;
	recv = eps ? &eps[n] : NULL;
	for (uint32_t i = 0; !ret && i <= n; i++) {
		ret = ep_init(&eps[i], sim, nodes, i == n ? n : 1);
		if (!ret)
			ids[i] = eps[i].id;
	}
	if (!ret)
		ret = cs_sim_star(sim, ids, n + 1, &host, &port, &sw);
	for (uint32_t i = 0; !ret && i < n; i++) {
		/* Synthetic payloads: incast checks counts, not bytes. */
		ret = flow_init(&tx[i], &eps[i], recv->id, &xp, 100 * i, 7 * i,
				cfg->bytes, cfg->payload, NULL, false, false);
		if (!ret)
			ret = flow_init(&rx[i], recv, eps[i].id, &xp, 7 * i,
					100 * i, cfg->bytes, cfg->payload, NULL,
					true, false);
	}
	if (ret)
		goto out;
	if (xp.rel.credit) {
		cs.rx = rx;
		cs.n = n;
		cs.budget = cfg->credit_budget;
		cs.bytes = cfg->bytes;
		cs.payload = cfg->payload;
		cs.frame = cfg->payload + xp.pacer.frame_overhead;
		cs.active = n;
		recv->after_rx = sched_update;
		recv->after_ctx = &cs;
		if (cfg->credit_budget / n >= cfg->payload)
			sched_share(&cs);
		else
			sched_update(&cs, NULL);
		rearm(recv, 0);
	}

	for (uint32_t i = 0; i < n; i++)
		rearm(&eps[i], 0);
	cs_sim_run(sim, cfg->time_limit);

	down = cs_sim_link_find(sim, sw, recv->id);
	res->ok = true;
	for (uint32_t i = 0; i < n; i++) {
		if (rx[i].rcvd != cfg->bytes || rx[i].delivered_twice ||
		    rx[i].bad || !cs_rel_idle(&tx[i].rel)) {
			if (res->ok)
				snprintf(res->why, sizeof(res->why),
					 "sender %u: %llu of %llu bytes, "
					 "%llu twice",
					 i, (unsigned long long)rx[i].rcvd,
					 (unsigned long long)cfg->bytes,
					 (unsigned long long)rx[i]
						 .delivered_twice);
			res->ok = false;
			continue;
		}
		end = CS_MAX(end, rx[i].done_at);
		sum += (double)cfg->bytes / (double)rx[i].done_at;
		sum2 += ((double)cfg->bytes / (double)rx[i].done_at) *
			((double)cfg->bytes / (double)rx[i].done_at);
		res->retx += tx[i].rel.st.retx;
		res->timeouts += tx[i].rel.st.timeouts;
	}
	for (uint32_t l = 0; l < cs_sim_links(sim); l++) {
		const struct cs_sim_link_stats *st = cs_sim_link_stats(sim, l);

		res->drops += st->drop_queue + st->drop_loss + st->drop_outage +
			      st->drop_corrupt;
	}
	res->time_ns = end;
	res->events = cs_sim_events(sim);
	if (down >= 0 && end) {
		const struct cs_sim_link_stats *st =
			cs_sim_link_stats(sim, (uint32_t)down);

		res->queue_max = st->queue_max;
		res->util = (double)st->busy_ps / ((double)end * 1000);
		res->goodput_frac = (double)cfg->bytes * n * 8 /
				    ((double)end * cfg->link.gbps);
	}
	if (res->ok && sum2 > 0)
		res->jain = sum * sum / (n * sum2);
out:
	for (uint32_t i = 0; tx && rx && i < n; i++) {
		flow_fini(&tx[i]);
		flow_fini(&rx[i]);
	}
	for (uint32_t i = 0; eps && i <= n; i++)
		ep_fini(&eps[i]);
	free(eps);
	free(tx);
	free(rx);
	free(ids);
	free(cs.state);
	free(cs.granted_at);
	cs_sim_destroy(sim);
	return ret;
}

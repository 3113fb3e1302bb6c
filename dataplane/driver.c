/* SPDX-License-Identifier: MIT */
/* The dataplane driver: receive filter, dispatch and the raw blaster. */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#define CS_LOG_MODULE "drv"
#include "internal/log.h"
#include "internal/proto.h"
#include "dataplane/driver.h"
#include "dataplane/wire.h"

static_assert(CS_WIRE_L4_END == CS_PORT_HDRS_LEN, "outer header length");

int cs_drv_init(struct cs_drv *d, struct cs_port *port, unsigned rank)
{
	memset(d, 0, sizeof(*d));
	if (rank >= CS_DRV_MAX_PEERS)
		return -EINVAL;
	d->port = port;
	d->rank = rank;
	d->nq = port->conf.queues ? port->conf.queues : 1;
	atomic_init(&d->raw_req, 0);
	return 0;
}

int cs_drv_load_peers(struct cs_drv *d, const char *path)
{
	char line[512], ip[64], mac[64], name[64];
	unsigned rank, port, lineno = 0;
	FILE *f = fopen(path, "r");

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		char *hash = strchr(line, '#');
		struct cs_peer *p;
		int n;

		lineno++;
		if (hash)
			*hash = 0;
		name[0] = 0;
		n = sscanf(line, "%u %63s %63s %u %63s", &rank, ip, mac, &port,
			   name);
		if (n <= 0)
			continue;
		if (n < 4 || rank >= CS_DRV_MAX_PEERS || !port || port > 65535)
			goto bad;
		p = &d->peers[rank];
		if (inet_pton(AF_INET, ip, &p->ip) != 1 ||
		    cs_port_parse_mac(mac, p->mac))
			goto bad;
		p->port = (uint16_t)port;
		snprintf(p->name, sizeof(p->name), "%s", n == 5 ? name : "");
		if (rank + 1 > d->npeers)
			d->npeers = rank + 1;
	}
	fclose(f);
	return 0;
bad:
	CS_ERR("%s:%u: expected 'rank ip mac udp_port [name]'", path, lineno);
	fclose(f);
	return -EINVAL;
}

/* The frame's Ethernet, IPv4 and UDP headers from @sport to @dport. */
static int frame_hdr(const struct cs_drv *d, uint8_t *f, uint32_t cap,
		     struct cs_pkt_hdr *h, unsigned dst, uint16_t sport,
		     uint16_t dport)
{
	const struct cs_peer *p = &d->peers[dst];
	struct cs_wire_addr src = { .port = sport }, to = { .port = dport };

	memcpy(src.mac, d->port->mac, 6);
	memcpy(to.mac, p->mac, 6);
	src.ip = ntohl(d->port->ip);
	to.ip = ntohl(p->ip);
	h->version = CS_PROTO_VERSION;
	h->src = (uint16_t)d->rank;
	return cs_wire_encode(f, cap, &src, &to, h, NULL);
}

int cs_drv_frame_hdr(const struct cs_drv *d, uint8_t *f, uint32_t cap,
		     struct cs_pkt_hdr *h, unsigned dst, uint16_t sport)
{
	return frame_hdr(d, f, cap, h, dst, sport, d->peers[dst].port);
}

int cs_drv_frame_hdr_lane(const struct cs_drv *d, uint8_t *f, uint32_t cap,
			  struct cs_pkt_hdr *h, unsigned dst, unsigned lane)
{
	return frame_hdr(d, f, cap, h, dst,
			 (uint16_t)(d->port->udp_port + lane),
			 (uint16_t)(d->peers[dst].port + lane));
}

int cs_drv_raw_start(struct cs_drv *d, unsigned dst, uint32_t frame_len,
		     cs_ns_t until)
{
	if (dst >= d->npeers || !d->peers[dst].port || dst == d->rank ||
	    frame_len < CS_DRV_HDR_LEN || frame_len > d->port->frame_max)
		return -EINVAL;
	d->raw_dst = dst;
	d->raw_len = frame_len;
	d->raw_until = until;
	atomic_fetch_add_explicit(&d->raw_req, 1, memory_order_release);
	return 0;
}

/* Is @dst (a frame's destination MAC) this port's own address or the
 * broadcast address? collstack sends unicast only; a Linux bridge floods
 * unicast to an address it has not learned to every port, so a sidecar on
 * a bridge sees frames meant for its neighbours. */
static inline bool mac_for_us(const struct cs_port *p, const uint8_t *dst)
{
	static const uint8_t bcast[6] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };

	return !memcmp(dst, p->mac, 6) || !memcmp(dst, bcast, 6);
}

/* Decode; a frame that is not a valid collstack frame for us is counted
 * by cause and dropped. Returns the type, or 0. */
static inline uint8_t classify(struct cs_drv *d, struct cs_drv_q *q,
			       const struct cs_pbuf *b, struct cs_wire_pkt *pk)
{
	int rc;

	/* Shorter than a MAC: the codec counts it as malformed. */
	if (unlikely(b->len >= 6 && !mac_for_us(d->port, b->data))) {
		q->rx_other_mac++;
		q->rx_foreign++;
		return 0;
	}
	rc = cs_wire_decode_ex(b->data, b->len, d->port->udp_port, 0, pk);

	cs_wire_count(&q->wire, rc);
	if (unlikely(rc)) {
		if (rc == CS_WIRE_E_ETHERTYPE || rc == CS_WIRE_E_PROTO ||
		    rc == CS_WIRE_E_UDP_PORT || rc == CS_WIRE_E_IP_VERSION)
			q->rx_foreign++;
		else
			q->rx_malformed++;
		return 0;
	}
	return pk->hdr.type;
}

static unsigned raw_tx(struct cs_drv *d, unsigned qi, struct cs_drv_q *q,
		       cs_ns_t now)
{
	struct cs_pbuf v[CS_PORT_BURST];
	unsigned got, sent;

	if (now >= q->raw_until) {
		q->raw_active = false;
		q->tx_raw_end = now;
		return 0;
	}
	got = cs_port_tx_alloc(d->port, qi, v, CS_PORT_BURST);
	if (!got) {
		q->tx_nobuf++;
		return 0;
	}
	/* Headers only: the payload is whatever the buffer held. */
	for (unsigned i = 0; i < got; i++) {
		memcpy(v[i].data, q->raw_tmpl, sizeof(q->raw_tmpl));
		v[i].len = q->raw_len;
	}
	sent = cs_port_tx_burst(d->port, qi, v, got);
	cs_port_release(d->port, qi, v + sent, got - sent);
	q->tx_raw_pkts += sent;
	q->tx_raw_bytes += (uint64_t)sent * q->raw_len;
	return sent;
}

static void raw_begin(struct cs_drv *d, unsigned qi, struct cs_drv_q *q,
		      cs_ns_t now)
{
	q->raw_len = d->raw_len;
	q->raw_until = d->raw_until;
	struct cs_pkt_hdr h = { .type = CS_PKT_RAW,
				.channel = (uint16_t)qi,
				.len = q->raw_len - CS_DRV_HDR_LEN };
	uint8_t frame[CS_DRV_HDR_LEN];

	/* Each queue its own source port, so RSS and fanout spread them;
	 * the payload is not written, so encode headers in a scratch frame
	 * that only has room for them. */
	if (cs_drv_frame_hdr(d, frame, sizeof(frame) + h.len, &h, d->raw_dst,
			     (uint16_t)(d->port->udp_port + qi)) < 0) {
		q->raw_active = false;
		return;
	}
	memcpy(q->raw_tmpl, frame, sizeof(q->raw_tmpl));
	q->tx_raw_pkts = q->tx_raw_bytes = 0;
	q->rx_raw_pkts = q->rx_raw_bytes = 0;
	q->rx_raw_first = q->rx_raw_last = 0;
	q->tx_raw_start = now;
	q->tx_raw_end = 0;
	q->raw_active = true;
}

unsigned cs_drv_poll(void *arg, unsigned qi, cs_ns_t now)
{
	struct cs_drv *d = arg;
	struct cs_drv_q *q = &d->q[qi];
	struct cs_pbuf v[CS_PORT_BURST], keep[CS_PORT_BURST];
	struct cs_wire_pkt pk[CS_PORT_BURST];
	unsigned got, nkeep = 0, work;
	uint64_t req;

	got = cs_port_rx_burst(d->port, qi, v, CS_PORT_BURST);
	work = got;
	for (unsigned i = 0; i < got; i++) {
		uint8_t type = classify(d, q, &v[i], &pk[nkeep]);

		q->rx_frames++;
		if (type == CS_PKT_RAW) {
			if (!q->rx_raw_pkts)
				q->rx_raw_first = now;
			q->rx_raw_last = now;
			q->rx_raw_pkts++;
			q->rx_raw_bytes += v[i].len;
		} else if (type && d->rx_fn) {
			keep[nkeep++] = v[i];
			continue;
		} else if (type) {
			q->rx_unhandled++;
		}
		cs_port_release(d->port, qi, &v[i], 1);
	}
	if (nkeep) {
		d->rx_fn(d->fn_arg, qi, keep, pk, nkeep, now);
		cs_port_release(d->port, qi, keep, nkeep);
	}
	req = atomic_load_explicit(&d->raw_req, memory_order_acquire);
	if (unlikely(req != q->raw_seen)) {
		q->raw_seen = req;
		raw_begin(d, qi, q, now);
	}
	if (q->raw_active)
		work += raw_tx(d, qi, q, now);
	if (d->tx_fn)
		work += d->tx_fn(d->fn_arg, qi, now);
	return work;
}

static inline uint64_t rd(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

void cs_drv_totals(struct cs_drv *d, struct cs_drv_totals *t)
{
	cs_ns_t rf = 0, rl = 0, ts = 0, te = 0;

	memset(t, 0, sizeof(*t));
	for (unsigned i = 0; i < d->nq; i++) {
		struct cs_drv_q *q = &d->q[i];
		cs_ns_t a = rd(&q->rx_raw_first), b = rd(&q->rx_raw_last);
		cs_ns_t s = rd(&q->tx_raw_start), e = rd(&q->tx_raw_end);

		/* A starved lcore may not have noticed the end yet: its
		 * blast stops at raw_until anyway. */
		if (s && !e)
			e = rd(&q->raw_until);

		t->rx_frames += rd(&q->rx_frames);
		t->rx_foreign += rd(&q->rx_foreign);
		t->rx_other_mac += rd(&q->rx_other_mac);
		t->rx_malformed += rd(&q->rx_malformed);
		t->rx_unhandled += rd(&q->rx_unhandled);
		t->rx_raw_pkts += rd(&q->rx_raw_pkts);
		t->rx_raw_bytes += rd(&q->rx_raw_bytes);
		t->tx_raw_pkts += rd(&q->tx_raw_pkts);
		t->tx_raw_bytes += rd(&q->tx_raw_bytes);
		t->tx_nobuf += rd(&q->tx_nobuf);
		if (a && (!rf || a < rf))
			rf = a;
		if (b > rl)
			rl = b;
		if (s && (!ts || s < ts))
			ts = s;
		if (e > te)
			te = e;
	}
	t->rx_raw_ns = rl > rf ? rl - rf : 0;
	t->tx_raw_ns = te > ts ? te - ts : 0;
}

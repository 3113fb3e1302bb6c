/* SPDX-License-Identifier: MIT */
/*
 * The loop port: an in-memory back-end for tests. Frames sent on a loop
 * port arrive on its connected peer (or on itself when unconnected). One
 * thread drives both ends; buffers come from a fixed pool made at open, and
 * a full receive ring refuses the frame (tx_burst returns fewer), like a
 * NIC whose TX ring is full.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define CS_LOG_MODULE "port"
#include "internal/log.h"
#include "dataplane/port.h"

struct loop_buf {
	struct loop_port *owner;
	uint8_t *data;
};

struct loop_port {
	struct cs_port port;
	struct loop_port *peer;
	unsigned nbufs, nfree;
	struct loop_buf *bufs;
	struct loop_buf **free;
	uint8_t *mem;
	/* receive FIFO */
	unsigned rx_cap, rx_head, rx_tail;
	struct cs_pbuf *rx;
	struct cs_port_stats st;
};

static inline struct loop_port *lp_of(struct cs_port *p)
{
	return cs_container_of(p, struct loop_port, port);
}

static unsigned loop_rx_burst(struct cs_port *p, unsigned q, struct cs_pbuf *v,
			      unsigned n)
{
	struct loop_port *lp = lp_of(p);
	unsigned i = 0;

	(void)q;
	while (i < n && lp->rx_head != lp->rx_tail) {
		v[i] = lp->rx[lp->rx_head % lp->rx_cap];
		lp->rx_head++;
		lp->st.rx_pkts++;
		lp->st.rx_bytes += v[i].len;
		i++;
	}
	return i;
}

static unsigned loop_tx_alloc(struct cs_port *p, unsigned q, struct cs_pbuf *v,
			      unsigned n)
{
	struct loop_port *lp = lp_of(p);
	unsigned i;

	(void)q;
	for (i = 0; i < n && lp->nfree; i++) {
		struct loop_buf *b = lp->free[--lp->nfree];

		v[i].data = b->data;
		v[i].len = 0;
		v[i].cap = lp->port.frame_max;
		v[i].handle = b;
	}
	return i;
}

static void loop_release(struct cs_port *p, unsigned q, struct cs_pbuf *v,
			 unsigned n)
{
	(void)p;
	(void)q;
	for (unsigned i = 0; i < n; i++) {
		struct loop_buf *b = v[i].handle;

		b->owner->free[b->owner->nfree++] = b;
	}
}

static unsigned loop_tx_burst(struct cs_port *p, unsigned q, struct cs_pbuf *v,
			      unsigned n)
{
	struct loop_port *lp = lp_of(p);
	struct loop_port *dst = lp->peer ? lp->peer : lp;
	unsigned i;

	(void)q;
	for (i = 0; i < n; i++) {
		if (dst->rx_tail - dst->rx_head == dst->rx_cap)
			break;
		dst->rx[dst->rx_tail % dst->rx_cap] = v[i];
		dst->rx_tail++;
		lp->st.tx_pkts++;
		lp->st.tx_bytes += v[i].len;
	}
	return i;
}

static void loop_stats(struct cs_port *p, struct cs_port_stats *st)
{
	*st = lp_of(p)->st;
}

static void loop_close(struct cs_port *p)
{
	struct loop_port *lp = lp_of(p);

	if (lp->peer)
		lp->peer->peer = NULL;
	free(lp->rx);
	free(lp->free);
	free(lp->bufs);
	free(lp->mem);
	free(lp);
}

static int loop_open(const struct cs_port_conf *conf, struct cs_port **out)
{
	struct loop_port *lp;
	uint32_t stride;

	lp = calloc(1, sizeof(*lp));
	if (!lp)
		return -ENOMEM;
	lp->port.ops = &cs_port_loop_ops;
	lp->port.conf = *conf;
	lp->port.conf.queues = 1;
	lp->port.frame_max = conf->mtu + CS_PORT_ETH_LEN;
	lp->port.udp_port = (uint16_t)conf->udp_port;
	lp->port.numa = -1;
	if (inet_pton(AF_INET, conf->ip, &lp->port.ip) != 1)
		goto out_free;
	if (conf->mac[0] && cs_port_parse_mac(conf->mac, lp->port.mac))
		goto out_free;
	lp->nbufs = conf->rx_desc + conf->tx_desc;
	lp->rx_cap = conf->rx_desc;
	stride = (lp->port.frame_max + 63) & ~63u;
	lp->mem = aligned_alloc(64, (size_t)stride * lp->nbufs);
	lp->bufs = calloc(lp->nbufs, sizeof(*lp->bufs));
	lp->free = calloc(lp->nbufs, sizeof(*lp->free));
	lp->rx = calloc(lp->rx_cap, sizeof(*lp->rx));
	if (!lp->mem || !lp->bufs || !lp->free || !lp->rx) {
		loop_close(&lp->port);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < lp->nbufs; i++) {
		lp->bufs[i].owner = lp;
		lp->bufs[i].data = lp->mem + (size_t)i * stride;
		lp->free[lp->nfree++] = &lp->bufs[i];
	}
	*out = &lp->port;
	return 0;
out_free:
	CS_ERR("loop port: bad port.ip '%s' or port.mac '%s'", conf->ip,
	       conf->mac);
	free(lp);
	return -EINVAL;
}

int cs_port_loop_connect(struct cs_port *a, struct cs_port *b)
{
	if (a->ops != &cs_port_loop_ops || b->ops != &cs_port_loop_ops)
		return -EINVAL;
	lp_of(a)->peer = lp_of(b);
	lp_of(b)->peer = lp_of(a);
	return 0;
}

const struct cs_port_ops cs_port_loop_ops = {
	.name = "loop",
	.open = loop_open,
	.rx_burst = loop_rx_burst,
	.tx_alloc = loop_tx_alloc,
	.tx_burst = loop_tx_burst,
	.release = loop_release,
	.stats = loop_stats,
	.close = loop_close,
};

/* SPDX-License-Identifier: MIT */
/*
 * The udp port: kernel UDP sockets driven by io_uring. The portable
 * fallback (no hugepages, no root) and the baseline that shows what kernel
 * bypass buys.
 *
 * On the wire it carries only the collstack header and payload as the UDP
 * payload; the kernel owns Ethernet/IP/UDP. To keep every port alike, the
 * port still deals in whole frames: on transmit it reads the destination
 * IPv4 address and UDP port from the frame's headers and sends the bytes
 * after them; on receive it writes Ethernet/IPv4/UDP headers (source
 * address from recvmsg, IPv4 checksum valid, UDP checksum 0) in front of
 * the datagram, which recvmsg placed 42 bytes into the buffer.
 *
 * Each queue has its own socket and its own ring. Queue q binds
 * port.udp_port + q: a datagram reaches the queue its destination port
 * names, so a sender chooses the receiving queue (its own queue's
 * number, by convention: a session's frames stay on one lcore at both
 * ends; the services run every session on queue 0 and send to the base
 * port). Sockets sharing one port through SO_REUSEPORT, as before, had
 * the kernel pick the socket by a hash of the addresses, so a peer's
 * frames landed on queue 1 as often as not and were dropped there: with
 * port.queues=2 every operation failed ("peer lost"). Receive is one multishot
 * recvmsg request whose buffers are the receive slots, registered as a ring of
 * provided buffers: release() gives a slot back to that ring, and when the
 * kernel finds it empty the request stops and the next rx_burst() arms it
 * again. Where the kernel has no multishot receive, up to rx_posted single
 * recvmsg requests are posted at a time and the other slots (and the released
 * ones) wait on a free list. Never one request per slot: on an empty socket
 * each request is a poll waiter, and every datagram wakes every waiter (one
 * receives, the rest find nothing and wait again); with 512 posted that herd
 * took three quarters of the lcore: 2.4 instead of 10.7 Gbit/s per direction on
 * the raw blast. Transmit
 * slots come from a free list and return to it when their sendmsg
 * completes. At most one system call per burst, none for an idle poll.
 *
 * UDP GSO (port.udp_gso): a run of frames in a burst to one peer whose
 * datagrams have one size (the last may be shorter) goes out as one
 * sendmsg with UDP_SEGMENT, its iovecs gathered from every frame: the
 * kernel cuts the payload at that size, so each datagram on the wire is
 * exactly one of our frames, header included. The run crosses the IP
 * output path, the veths and the bridge as one packet and is cut into
 * datagrams at the receiving socket (or by a device that cannot carry
 * it). The first frame's slot leads the run and frees the others when
 * its sendmsg completes.
 *
 * UDP GRO (port.udp_gro, multishot receive only): the sockets set UDP_GRO,
 * so a GSO run that crossed veths and a bridge whole (offloads on) reaches
 * the socket as one datagram of up to 64 KiB, with its segment size in a
 * control message, instead of being cut into datagrams there: one socket
 * enqueue, one copy to user space and one completion per run instead of
 * per frame. The multishot request then receives into a ring of 64 KiB
 * buffers (GRO_BUFS per queue), and rx_burst() copies each segment into a
 * receive slot with the frame headers in front of it (the slots wait on
 * the free list, as without multishot). A run that does not fit the
 * burst or the free slots stays pending, its buffer lent, until the next
 * rx_burst(). Off: the kernel cuts every run into datagrams at the socket
 * and the multishot request receives each into a slot, no copy.
 */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <linux/sock_diag.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CS_LOG_MODULE "udp"
#include "internal/log.h"
#include "dataplane/port.h"

enum { SLOT_RX = 1, SLOT_TX = 2, RX_MULTI = 3, KICK_POLL = 4 };

/* Multishot recvmsg writes this in front of the payload in its buffer:
 * struct io_uring_recvmsg_out, then the sender's address. */
#define MS_HDR                                                                 \
	(sizeof(struct io_uring_recvmsg_out) + sizeof(struct sockaddr_in))
static_assert(MS_HDR <= CS_PORT_HDRS_LEN,
	      "the frame headers must cover the recvmsg header");
/* so that the payload lands CS_PORT_HDRS_LEN into the slot, as with
 * recvmsg, and the frame headers are written over the recvmsg header */
#define MS_OFF (CS_PORT_HDRS_LEN - MS_HDR)
#define MS_BGID 0

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#ifndef SOL_UDP
#define SOL_UDP 17
#endif
/* GRO receive buffers per queue (a power of two: a provided-buffer ring),
 * each room for the largest datagram behind the recvmsg header, the
 * address and the UDP_GRO control message */
#define GRO_BUFS 32u
#define GRO_BUF_LEN (65536u + 256u)
/* frames in one GSO send; its payload stays under the 64 KiB an IPv4
 * packet (and so a GSO skb) may hold */
#define GSO_FRAMES CS_PORT_BURST
#define GSO_BYTES 65000u

struct slot {
	struct msghdr mh;
	struct iovec iov[2];
	struct slot *gnext; /* the rest of a GSO run this slot leads */
	struct iovec *giov; /* a leader's gathered iovecs (2 per frame) */
	/* UDP_SEGMENT's control message (CMSG_SPACE(2): 24 bytes here; not
	 * a constant expression for every compiler, hence checked at open) */
	uint64_t cmsg[4];
	struct sockaddr_in sa;
	uint8_t *buf;
	uint32_t idx;
	uint8_t kind;
	struct udp_queue *q;
};

struct udp_queue {
	int fd;
	struct io_uring ring;
	bool ring_ok;
	unsigned nrx, ntx, ntx_free;
	unsigned nrx_free, rx_posted, rx_post_max;
	/* multishot recvmsg into a ring of provided buffers (the slots):
	 * one request, one poll waiter, however many datagrams */
	bool ms, ms_armed;
	struct io_uring_buf_ring *br;
	unsigned br_entries;
	struct msghdr ms_mh; /* its template: the address length */
	uint64_t rx_nobuf; /* the multishot stopped: no buffer was free */
	/* port.udp_gro: the buffer ring holds GRO_BUFS buffers of
	 * GRO_BUF_LEN at gro_mem; the receive slots are on rx_free */
	bool gro;
	uint8_t *gro_mem;
	/* a datagram not yet all handed up: its buffer, the next segment,
	 * the bytes left, the segment size, its sender */
	int pend_bid; /* -1: none */
	const uint8_t *pend_data;
	uint32_t pend_left, pend_seg;
	struct sockaddr_in pend_sa;
	bool pend_multi; /* of several segments */
	uint64_t rx_gro; /* frames that arrived in a datagram of several */
	struct slot *rx, *tx;
	struct slot **tx_free, **rx_free;
	uint8_t *mem;
	unsigned unsubmitted;
	bool coop; /* COOP_TASKRUN + TASKRUN_FLAG ring */
	bool gso; /* port.udp_gso, until the kernel refuses one */
	/* wait(): a poll request on its kick fd, so that the ring's wait
	 * ends when that fd is readable (one at a time) */
	int poll_fd;
	bool poll_armed;
	struct iovec *giov_mem;
	/* counters, written by this queue's lcore only */
	uint64_t rx_pkts, rx_bytes, tx_pkts, tx_bytes, rx_dropped, tx_errors;
	uint64_t tx_gso; /* frames that left in a GSO send of several */
};

struct udp_port {
	struct cs_port port;
	unsigned nq;
	struct udp_queue q[CS_PORT_MAX_QUEUES];
};

static inline struct udp_port *up_of(struct cs_port *p)
{
	return cs_container_of(p, struct udp_port, port);
}

static inline uint64_t ud_make(uint8_t kind, uint32_t idx)
{
	return (uint64_t)kind << 32 | idx;
}

static void post_recv(struct udp_port *up, struct udp_queue *q, struct slot *s)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&q->ring);

	if (unlikely(!sqe)) {
		/* The SQ is sized for every slot; flush and retry once. */
		io_uring_submit(&q->ring);
		q->unsubmitted = 0;
		sqe = io_uring_get_sqe(&q->ring);
		if (!sqe)
			return;
	}
	s->iov[0].iov_base = s->buf + CS_PORT_HDRS_LEN;
	s->iov[0].iov_len = up->port.frame_max - CS_PORT_HDRS_LEN;
	s->mh.msg_name = &s->sa;
	s->mh.msg_namelen = sizeof(s->sa);
	s->mh.msg_iov = s->iov;
	s->mh.msg_iovlen = 1;
	s->mh.msg_control = NULL;
	s->mh.msg_controllen = 0;
	s->mh.msg_flags = 0;
	io_uring_prep_recvmsg(sqe, q->fd, &s->mh, 0);
	io_uring_sqe_set_data64(sqe, ud_make(SLOT_RX, s->idx));
	q->unsubmitted++;
}

/* Give @s back to the kernel's buffer ring (multishot). */
static void ms_give(struct udp_port *up, struct udp_queue *q, struct slot *s)
{
	io_uring_buf_ring_add(q->br, s->buf + MS_OFF,
			      up->port.frame_max - MS_OFF,
			      (unsigned short)s->idx,
			      io_uring_buf_ring_mask(q->br_entries), 0);
	io_uring_buf_ring_advance(q->br, 1);
}

/* Post free receive slots up to rx_post_max; or, multishot, the request
 * itself when it has stopped. */
static void refill(struct udp_port *up, struct udp_queue *q)
{
	if (q->ms) {
		struct io_uring_sqe *sqe;

		if (q->ms_armed || !(sqe = io_uring_get_sqe(&q->ring)))
			return;
		io_uring_prep_recvmsg_multishot(sqe, q->fd, &q->ms_mh, 0);
		sqe->flags |= IOSQE_BUFFER_SELECT;
		sqe->buf_group = MS_BGID;
		io_uring_sqe_set_data64(sqe, ud_make(RX_MULTI, 0));
		q->ms_armed = true;
		q->unsubmitted++;
		return;
	}
	while (q->rx_posted < q->rx_post_max && q->nrx_free) {
		post_recv(up, q, q->rx_free[--q->nrx_free]);
		q->rx_posted++;
	}
}

/* A datagram the multishot request put in a provided buffer: the frame
 * in @out (true), or dropped, its buffer given back (false). */
static bool ms_frame(struct udp_port *up, struct udp_queue *q,
		     const struct io_uring_cqe *cqe, struct cs_pbuf *out)
{
	struct cs_port *p = &up->port;
	unsigned bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
	struct io_uring_recvmsg_out o;
	struct sockaddr_in sa;
	struct slot *s;
	uint32_t flen;

	if (bid >= q->br_entries) { /* not one of ours: never given */
		q->rx_dropped++;
		return false;
	}
	s = &q->rx[bid];
	/* The layout MS_HDR assumes (the header is read by copy: it sits
	 * MS_OFF into the slot, not aligned for the struct). */
	if (cqe->res >= (int)MS_HDR)
		memcpy(&o, s->buf + MS_OFF, sizeof(o));
	if (cqe->res < (int)MS_HDR || (o.flags & MSG_TRUNC) || o.controllen ||
	    o.namelen != sizeof(sa)) {
		q->rx_dropped++;
		ms_give(up, q, s);
		return false;
	}
	memcpy(&sa, s->buf + MS_OFF + sizeof(o), sizeof(sa));
	if (sa.sin_family != AF_INET) {
		q->rx_dropped++;
		ms_give(up, q, s);
		return false;
	}
	flen = CS_PORT_HDRS_LEN + (uint32_t)cqe->res - (uint32_t)MS_HDR;
	cs_port_frame_hdrs(s->buf, flen, p->mac, p->mac, sa.sin_addr.s_addr,
			   p->ip, ntohs(sa.sin_port), p->udp_port);
	memset(s->buf + 6, 0, 6); /* source MAC: unknown */
	out->data = s->buf;
	out->len = flen;
	out->cap = p->frame_max;
	out->handle = s;
	q->rx_pkts++;
	q->rx_bytes += flen;
	return true;
}

/* GRO: give receive buffer @bid back to the kernel's ring. */
static void gro_give(struct udp_queue *q, unsigned bid)
{
	io_uring_buf_ring_add(q->br, q->gro_mem + (size_t)bid * GRO_BUF_LEN,
			      GRO_BUF_LEN, (unsigned short)bid,
			      io_uring_buf_ring_mask(q->br_entries), 0);
	io_uring_buf_ring_advance(q->br, 1);
}

/* GRO: hand up the pending datagram's segments, each copied into a
 * receive slot behind its frame headers, into v[got..n); the buffer goes
 * back to the kernel once every segment is out. Returns the new got. */
static unsigned gro_drain(struct udp_port *up, struct udp_queue *q,
			  struct cs_pbuf *v, unsigned got, unsigned n)
{
	struct cs_port *p = &up->port;

	while (q->pend_left && got < n && q->nrx_free) {
		struct slot *s = q->rx_free[--q->nrx_free];
		uint32_t len =
			q->pend_left < q->pend_seg ? q->pend_left : q->pend_seg;
		uint32_t flen = CS_PORT_HDRS_LEN + len;

		memcpy(s->buf + CS_PORT_HDRS_LEN, q->pend_data, len);
		cs_port_frame_hdrs(s->buf, flen, p->mac, p->mac,
				   q->pend_sa.sin_addr.s_addr, p->ip,
				   ntohs(q->pend_sa.sin_port), p->udp_port);
		memset(s->buf + 6, 0, 6); /* source MAC: unknown */
		v[got].data = s->buf;
		v[got].len = flen;
		v[got].cap = p->frame_max;
		v[got].handle = s;
		got++;
		q->pend_data += len;
		q->pend_left -= len;
		q->rx_pkts++;
		q->rx_bytes += flen;
		if (q->pend_multi)
			q->rx_gro++;
	}
	if (!q->pend_left && q->pend_bid >= 0) {
		gro_give(q, (unsigned)q->pend_bid);
		q->pend_bid = -1;
	}
	return got;
}

/* GRO: a completion of the multishot request; its datagram becomes the
 * pending one (a bad one is dropped, its buffer given back). */
static void gro_take(struct udp_port *up, struct udp_queue *q,
		     const struct io_uring_cqe *cqe)
{
	unsigned bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
	struct io_uring_recvmsg_out *o;
	struct cmsghdr *cm;
	uint32_t len, seg = 0;

	if (bid >= q->br_entries) { /* not one of ours: never given */
		q->rx_dropped++;
		return;
	}
	o = io_uring_recvmsg_validate(q->gro_mem + (size_t)bid * GRO_BUF_LEN,
				      cqe->res, &q->ms_mh);
	if (!o || (o->flags & MSG_TRUNC) ||
	    o->namelen != sizeof(struct sockaddr_in))
		goto drop;
	memcpy(&q->pend_sa, io_uring_recvmsg_name(o), sizeof(q->pend_sa));
	if (q->pend_sa.sin_family != AF_INET)
		goto drop;
	for (cm = io_uring_recvmsg_cmsg_firsthdr(o, &q->ms_mh); cm;
	     cm = io_uring_recvmsg_cmsg_nexthdr(o, &q->ms_mh, cm)) {
		int v;

		if (cm->cmsg_level != SOL_UDP || cm->cmsg_type != UDP_GRO ||
		    cm->cmsg_len < CMSG_LEN(sizeof(v)))
			continue;
		memcpy(&v, CMSG_DATA(cm), sizeof(v));
		seg = v > 0 ? (uint32_t)v : 0;
	}
	len = io_uring_recvmsg_payload_length(o, cqe->res, &q->ms_mh);
	if (!seg || seg > len)
		seg = len; /* one datagram, not coalesced */
	if (!len || seg > up->port.frame_max - CS_PORT_HDRS_LEN)
		goto drop;
	q->pend_bid = (int)bid;
	q->pend_data = io_uring_recvmsg_payload(o, &q->ms_mh);
	q->pend_left = len;
	q->pend_seg = seg;
	q->pend_multi = len > seg;
	return;
drop:
	q->rx_dropped++;
	gro_give(q, bid);
}

static unsigned udp_rx_burst(struct cs_port *p, unsigned qi, struct cs_pbuf *v,
			     unsigned n)
{
	struct udp_port *up = up_of(p);
	struct udp_queue *q = &up->q[qi];
	struct io_uring_cqe *cqe;
	unsigned head, seen = 0, got = 0;

	if (q->pend_bid >= 0) {
		got = gro_drain(up, q, v, 0, n);
		if (q->pend_bid >= 0)
			return got; /* the burst or the free slots are full */
	}
	refill(up, q);

	/*
	 * Enter the kernel only when there is something to do there:
	 * requests to submit, or completions waiting for this task to run
	 * them (IORING_SQ_TASKRUN, with COOP_TASKRUN rings). An idle poll
	 * then costs no system call.
	 */
	if (q->unsubmitted ||
	    (!io_uring_cq_ready(&q->ring) &&
	     (!q->coop ||
	      (IO_URING_READ_ONCE(*q->ring.sq.kflags) & IORING_SQ_TASKRUN)))) {
		io_uring_submit_and_get_events(&q->ring);
		q->unsubmitted = 0;
	}
	io_uring_for_each_cqe(&q->ring, head, cqe)
	{
		uint64_t ud = io_uring_cqe_get_data64(cqe);
		uint32_t idx = (uint32_t)ud;

		if ((ud >> 32) == KICK_POLL) {
			q->poll_armed = false; /* the next wait arms it again */
		} else if ((ud >> 32) == SLOT_TX) {
			struct slot *s = &q->tx[idx], *nx;
			unsigned frames = 0;

			for (; s; s = nx) { /* the leader and its run */
				nx = s->gnext;
				s->gnext = NULL;
				q->tx_free[q->ntx_free++] = s;
				frames++;
			}
			if (cqe->res < 0) {
				q->tx_errors += frames;
				if (frames > 1 && q->gso &&
				    (cqe->res == -EINVAL || cqe->res == -EIO)) {
					q->gso = false;
					CS_WARN("udp: the kernel refused a GSO "
						"send (%s): one datagram per "
						"send from now on",
						strerror(-cqe->res));
				}
			} else {
				q->tx_bytes += (unsigned)cqe->res;
				if (frames > 1) /* a GSO send */
					q->tx_gso += frames;
			}
		} else if ((ud >> 32) == RX_MULTI) {
			if (got == n)
				break; /* leave it for the next burst */
			if (!(cqe->flags & IORING_CQE_F_MORE))
				q->ms_armed = false; /* refill() re-arms */
			if (cqe->res == -ENOBUFS)
				q->rx_nobuf++;
			if (q->gro && cqe->flags & IORING_CQE_F_BUFFER) {
				gro_take(up, q, cqe);
				got = gro_drain(up, q, v, got, n);
				if (q->pend_bid >= 0) {
					seen++; /* this one is taken */
					break;
				}
			} else if (cqe->flags & IORING_CQE_F_BUFFER &&
				   ms_frame(up, q, cqe, &v[got])) {
				got++;
			}
		} else {
			struct slot *s = &q->rx[idx];

			if (got == n)
				break; /* leave it for the next burst */
			q->rx_posted--;
			if (cqe->res <= 0 || (s->mh.msg_flags & MSG_TRUNC) ||
			    s->sa.sin_family != AF_INET) {
				q->rx_dropped++;
				q->rx_free[q->nrx_free++] = s; /* next burst */
			} else {
				uint32_t flen =
					CS_PORT_HDRS_LEN + (uint32_t)cqe->res;

				cs_port_frame_hdrs(s->buf, flen, p->mac, p->mac,
						   s->sa.sin_addr.s_addr, p->ip,
						   ntohs(s->sa.sin_port),
						   p->udp_port);
				memset(s->buf + 6, 0,
				       6); /* source MAC: unknown */
				v[got].data = s->buf;
				v[got].len = flen;
				v[got].cap = p->frame_max;
				v[got].handle = s;
				got++;
				q->rx_pkts++;
				q->rx_bytes += flen;
			}
		}
		seen++;
	}
	io_uring_cq_advance(&q->ring, seen);
	return got;
}

static unsigned udp_tx_alloc(struct cs_port *p, unsigned qi, struct cs_pbuf *v,
			     unsigned n)
{
	struct udp_port *up = up_of(p);
	struct udp_queue *q = &up->q[qi];
	unsigned i;

	for (i = 0; i < n && q->ntx_free; i++) {
		struct slot *s = q->tx_free[--q->ntx_free];

		s->iov[1].iov_len = 0;
		v[i].data = s->buf;
		v[i].len = 0;
		v[i].cap = p->frame_max;
		v[i].handle = s;
	}
	return i;
}

static void udp_release(struct cs_port *p, unsigned qi, struct cs_pbuf *v,
			unsigned n)
{
	struct udp_port *up = up_of(p);
	struct udp_queue *q = &up->q[qi];

	for (unsigned i = 0; i < n; i++) {
		struct slot *s = v[i].handle;

		if (s->kind == SLOT_RX && s->q->ms && !s->q->gro)
			ms_give(up, s->q, s);
		else if (s->kind == SLOT_RX) /* posted by the next burst */
			s->q->rx_free[s->q->nrx_free++] = s;
		else
			s->q->tx_free[s->q->ntx_free++] = s;
	}
	(void)q;
}

static inline bool tx_ipv4(const struct cs_pbuf *b)
{
	return b->len >= CS_PORT_HDRS_LEN && b->data[12] == 0x08 &&
	       b->data[13] == 0x00;
}

/* Bytes of the datagram frame @b sends: after its headers, attachment
 * included. */
static inline uint32_t tx_dgram_len(const struct cs_pbuf *b)
{
	const struct slot *s = b->handle;

	return b->len - CS_PORT_HDRS_LEN + (uint32_t)s->iov[1].iov_len;
}

/* Same destination address and port as the frame @a? */
static inline bool tx_same_peer(const struct cs_pbuf *a,
				const struct cs_pbuf *b)
{
	return !memcmp(a->data + CS_PORT_ETH_LEN + 16,
		       b->data + CS_PORT_ETH_LEN + 16, 4) &&
	       !memcmp(a->data + CS_PORT_L4_OFF + 2,
		       b->data + CS_PORT_L4_OFF + 2, 2);
}

/*
 * How many frames from v[0] go in one GSO send: the following frames to
 * the same peer with the same datagram size, the last of them possibly
 * shorter, within GSO_FRAMES and GSO_BYTES.
 */
static unsigned gso_run(const struct udp_queue *q, const struct cs_pbuf *v,
			unsigned n)
{
	uint32_t seg = tx_dgram_len(&v[0]), total = seg;
	unsigned k = 1;

	if (!q->gso)
		return 1;
	while (k < n && k < GSO_FRAMES && tx_ipv4(&v[k]) &&
	       tx_same_peer(&v[0], &v[k])) {
		uint32_t l = tx_dgram_len(&v[k]);

		if (l > seg || !l || total + l > GSO_BYTES)
			break;
		total += l;
		k++;
		if (l < seg)
			break; /* a shorter one ends the run */
	}
	return k;
}

/*
 * Leader @s sends the run v[0..k-1] (gso_run()) as one sendmsg: every
 * frame's datagram bytes, attachments included, gathered into its iovecs,
 * UDP_SEGMENT set to the first one's size, and the others' slots chained
 * to it so that its completion frees them.
 */
static void gso_prepare(struct slot *s, const struct cs_pbuf *v, unsigned k)
{
	uint16_t seg = (uint16_t)tx_dgram_len(&v[0]);
	struct slot **link = &s->gnext;
	struct cmsghdr *cm;
	unsigned nio = 0;

	for (unsigned j = 0; j < k; j++) {
		struct slot *m = v[j].handle;

		s->giov[nio].iov_base = v[j].data + CS_PORT_HDRS_LEN;
		s->giov[nio++].iov_len = v[j].len - CS_PORT_HDRS_LEN;
		if (m->iov[1].iov_len)
			s->giov[nio++] = m->iov[1];
		if (j) {
			*link = m;
			link = &m->gnext;
			m->gnext = NULL;
		}
	}
	s->mh.msg_iov = s->giov;
	s->mh.msg_iovlen = nio;
	s->mh.msg_control = s->cmsg;
	s->mh.msg_controllen = CMSG_SPACE(sizeof(seg));
	cm = CMSG_FIRSTHDR(&s->mh);
	cm->cmsg_level = SOL_UDP;
	cm->cmsg_type = UDP_SEGMENT;
	cm->cmsg_len = CMSG_LEN(sizeof(seg));
	memcpy(CMSG_DATA(cm), &seg, sizeof(seg));
}

static unsigned udp_tx_burst(struct cs_port *p, unsigned qi, struct cs_pbuf *v,
			     unsigned n)
{
	struct udp_port *up = up_of(p);
	struct udp_queue *q = &up->q[qi];
	unsigned i;

	for (i = 0; i < n;) {
		struct slot *s = v[i].handle;
		const uint8_t *f = v[i].data;
		struct io_uring_sqe *sqe;
		unsigned k;

		if (unlikely(!tx_ipv4(&v[i]))) {
			/* Not an IPv4 frame: nothing we can address. */
			q->tx_errors++;
			s->q->tx_free[s->q->ntx_free++] = s;
			i++;
			continue;
		}
		sqe = io_uring_get_sqe(&q->ring);
		if (unlikely(!sqe))
			break;
		s->sa.sin_family = AF_INET;
		memcpy(&s->sa.sin_addr.s_addr, f + CS_PORT_ETH_LEN + 16, 4);
		memcpy(&s->sa.sin_port, f + CS_PORT_L4_OFF + 2, 2);
		s->mh.msg_name = &s->sa;
		s->mh.msg_namelen = sizeof(s->sa);
		s->mh.msg_flags = 0;
		s->gnext = NULL;
		k = gso_run(q, v + i, n - i);
		if (k > 1) {
			gso_prepare(s, v + i, k);
		} else {
			s->iov[0].iov_base = s->buf + CS_PORT_HDRS_LEN;
			s->iov[0].iov_len = v[i].len - CS_PORT_HDRS_LEN;
			s->mh.msg_iov = s->iov;
			s->mh.msg_iovlen = s->iov[1].iov_len ? 2 : 1;
			s->mh.msg_control = NULL;
			s->mh.msg_controllen = 0;
		}
		io_uring_prep_sendmsg(sqe, q->fd, &s->mh, 0);
		io_uring_sqe_set_data64(sqe, ud_make(SLOT_TX, s->idx));
		q->tx_pkts += k;
		q->unsubmitted++;
		i += k;
	}
	if (q->unsubmitted) {
		io_uring_submit(&q->ring);
		q->unsubmitted = 0;
	}
	return i;
}

/* The kernel gathers the iovecs; the frame headers must already count the
 * attached bytes. One attachment per frame. */
static int udp_attach(struct cs_port *p, unsigned qi, struct cs_pbuf *b,
		      void *ext, uint32_t len)
{
	struct slot *s = b->handle;

	(void)p;
	(void)qi;
	if (s->iov[1].iov_len)
		return -ENOSPC;
	s->iov[1].iov_base = ext;
	s->iov[1].iov_len = len;
	return 0;
}

/* Wakes on receive, on a send's completion, and when @kick_fd is
 * readable: a poll request on it joins the ring (one at a time; its
 * completion is reaped by the next rx_burst). */
static int udp_wait(struct cs_port *p, unsigned qi, cs_ns_t timeout_ns,
		    int kick_fd)
{
	struct udp_queue *q = &up_of(p)->q[qi];
	struct __kernel_timespec ts = {
		.tv_sec = (long long)(timeout_ns / CS_NS_PER_S),
		.tv_nsec = (long long)(timeout_ns % CS_NS_PER_S),
	};
	struct io_uring_cqe *cqe;
	int ret;

	if (q->pend_bid >= 0)
		return 0; /* frames of a GRO datagram are waiting */
	if (kick_fd >= 0 && (!q->poll_armed || q->poll_fd != kick_fd)) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&q->ring);

		if (sqe) {
			io_uring_prep_poll_add(sqe, kick_fd, POLLIN);
			io_uring_sqe_set_data64(sqe, ud_make(KICK_POLL, 0));
			q->poll_armed = true;
			q->poll_fd = kick_fd;
		}
	}
	ret = io_uring_submit_and_wait_timeout(&q->ring, &cqe, 1, &ts, NULL);
	q->unsubmitted = 0;
	return ret < 0 && ret != -ETIME && ret != -EINTR ? ret : 0;
}

static bool udp_wait_sees_fd(struct cs_port *p)
{
	(void)p;
	return true;
}

static bool udp_wakes_on_rx(struct cs_port *p, unsigned q)
{
	(void)p;
	(void)q;
	return true; /* the ring's receive completes the wait */
}

static void udp_stats(struct cs_port *p, struct cs_port_stats *st)
{
	struct udp_port *up = up_of(p);

	for (unsigned i = 0; i < up->nq; i++) {
		const struct udp_queue *q = &up->q[i];

		st->rx_pkts += q->rx_pkts;
		st->rx_bytes += q->rx_bytes;
		st->tx_pkts += q->tx_pkts;
		st->tx_bytes += q->tx_bytes;
		st->rx_dropped += q->rx_dropped;
		/* datagrams the kernel dropped before they reached us: a
		 * full receive buffer (SO_MEMINFO, Linux 4.12+) */
		if (q->fd >= 0) {
			uint32_t mi[SK_MEMINFO_VARS];
			socklen_t l = sizeof(mi);

			if (!getsockopt(q->fd, SOL_SOCKET, SO_MEMINFO, mi,
					&l) &&
			    l > SK_MEMINFO_DROPS * sizeof(mi[0]))
				st->rx_dropped += mi[SK_MEMINFO_DROPS];
		}
		st->rx_nombuf += q->rx_nobuf;
		st->tx_errors += q->tx_errors;
		st->tx_gso += q->tx_gso;
		st->rx_gro += q->rx_gro;
	}
}

static void queue_fini(struct udp_queue *q)
{
	if (q->ring_ok)
		io_uring_queue_exit(&q->ring);
	if (q->fd >= 0)
		close(q->fd);
	free(q->rx);
	free(q->tx);
	free(q->tx_free);
	free(q->rx_free);
	free(q->br); /* the ring is gone: unregistered with it */
	free(q->gro_mem);
	free(q->mem);
	free(q->giov_mem);
}

static void udp_close(struct cs_port *p)
{
	struct udp_port *up = up_of(p);

	for (unsigned i = 0; i < up->nq; i++)
		queue_fini(&up->q[i]);
	free(up);
}

/*
 * Multishot receive (kernel 6.0 and later): the receive slots become a
 * ring of provided buffers (a power of two of them: the rest stay unused).
 * Where the kernel refuses, receive falls back to port.rx_posted single
 * requests.
 */
static void ms_init(struct udp_port *up, struct udp_queue *q)
{
	struct io_uring_buf_reg reg = { 0 };
	unsigned n = 1;
	size_t len;
	int ret;

	if (!up->port.conf.rx_multishot) {
		if (up->port.conf.udp_gro)
			CS_INFO("udp: port.udp_gro needs port.rx_multishot: "
				"off");
		return;
	}
	if (up->port.conf.udp_gro) {
		int one = 1;

		q->gro_mem = aligned_alloc(64, (size_t)GRO_BUFS * GRO_BUF_LEN);
		if (q->gro_mem &&
		    !setsockopt(q->fd, SOL_UDP, UDP_GRO, &one, sizeof(one))) {
			n = GRO_BUFS;
		} else {
			CS_INFO("udp: no UDP GRO (%s): datagrams one by one",
				q->gro_mem ? strerror(errno) : "no memory");
			free(q->gro_mem);
			q->gro_mem = NULL;
		}
	}
	while (!q->gro_mem && n * 2 <= q->nrx && n * 2 <= 32768)
		n *= 2;
	len = (size_t)n * sizeof(struct io_uring_buf);
	len = (len + 4095) & ~(size_t)4095;
	q->br = aligned_alloc(4096, len);
	if (!q->br)
		return;
	io_uring_buf_ring_init(q->br);
	reg.ring_addr = (uint64_t)(uintptr_t)q->br;
	reg.ring_entries = n;
	reg.bgid = MS_BGID;
	ret = io_uring_register_buf_ring(&q->ring, &reg, 0);
	if (ret) {
		CS_INFO("udp: no multishot receive (%s): %u recvmsg requests "
			"posted at once instead",
			strerror(-ret), q->rx_post_max);
		free(q->br);
		q->br = NULL;
		free(q->gro_mem);
		q->gro_mem = NULL;
		return;
	}
	q->br_entries = n;
	q->ms_mh.msg_namelen = sizeof(struct sockaddr_in);
	q->ms = true;
	if (q->gro_mem) {
		/* the slots stay on the free list; segments are copied in */
		q->gro = true;
		q->ms_mh.msg_controllen = CMSG_SPACE(sizeof(int));
		for (unsigned i = 0; i < n; i++)
			gro_give(q, i);
		return;
	}
	for (unsigned i = 0; i < n; i++)
		ms_give(up, q, &q->rx[i]);
	q->nrx_free = 0; /* the free list is for single requests */
}

static int queue_init(struct udp_port *up, struct udp_queue *q)
{
	const struct cs_port_conf *c = &up->port.conf;
	struct sockaddr_in sa = { .sin_family = AF_INET };
	uint32_t stride = (up->port.frame_max + 63) & ~63u;
	int buf = (int)c->sock_buf, ret;
	unsigned entries;

	q->pend_bid = -1;
	q->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (q->fd < 0)
		return -errno;
	if (buf > 0) {
		/* Best effort: FORCE needs CAP_NET_ADMIN, plain is capped. */
		if (setsockopt(q->fd, SOL_SOCKET, SO_RCVBUFFORCE, &buf,
			       sizeof(buf)))
			setsockopt(q->fd, SOL_SOCKET, SO_RCVBUF, &buf,
				   sizeof(buf));
		if (setsockopt(q->fd, SOL_SOCKET, SO_SNDBUFFORCE, &buf,
			       sizeof(buf)))
			setsockopt(q->fd, SOL_SOCKET, SO_SNDBUF, &buf,
				   sizeof(buf));
	}
	sa.sin_port = htons((uint16_t)(up->port.udp_port + (q - up->q)));
	sa.sin_addr.s_addr = up->port.ip;
	if (bind(q->fd, (struct sockaddr *)&sa, sizeof(sa)))
		return -errno;
	q->nrx = c->rx_desc;
	q->ntx = c->tx_desc;
	q->rx_post_max = c->rx_posted < q->nrx ? c->rx_posted : q->nrx;
	if (!q->rx_post_max)
		q->rx_post_max = 1;
	entries = q->nrx + q->ntx;
	/* Completions run as task work of the submitting thread only when
	 * it enters the kernel, and the ring flags say when it should. */
	ret = io_uring_queue_init(entries, &q->ring,
				  IORING_SETUP_COOP_TASKRUN |
					  IORING_SETUP_TASKRUN_FLAG);
	q->coop = ret == 0;
	if (ret == -EINVAL) /* kernel before 5.19 */
		ret = io_uring_queue_init(entries, &q->ring, 0);
	if (ret)
		return ret;
	q->ring_ok = true;
	q->mem = aligned_alloc(64, (size_t)stride * entries);
	q->rx = calloc(q->nrx, sizeof(*q->rx));
	q->tx = calloc(q->ntx, sizeof(*q->tx));
	q->tx_free = calloc(q->ntx, sizeof(*q->tx_free));
	q->rx_free = calloc(q->nrx, sizeof(*q->rx_free));
	if (!q->mem || !q->rx || !q->tx || !q->tx_free || !q->rx_free)
		return -ENOMEM;
	for (unsigned i = q->nrx; i-- > 0;) {
		q->rx[i] = (struct slot){ .buf = q->mem + (size_t)i * stride,
					  .idx = i,
					  .kind = SLOT_RX,
					  .q = q };
		q->rx_free[q->nrx_free++] = &q->rx[i];
	}
	ms_init(up, q);
	refill(up, q);
	q->gso = c->udp_gso &&
		 CMSG_SPACE(sizeof(uint16_t)) <= sizeof(q->tx[0].cmsg);
	if (q->gso) {
		q->giov_mem = calloc((size_t)q->ntx * 2 * GSO_FRAMES,
				     sizeof(struct iovec));
		if (!q->giov_mem)
			return -ENOMEM;
	}
	for (unsigned i = 0; i < q->ntx; i++) {
		q->tx[i] = (struct slot){
			.buf = q->mem + (size_t)(q->nrx + i) * stride,
			.idx = i,
			.kind = SLOT_TX,
			.q = q,
			.giov = q->gso ? q->giov_mem +
						 (size_t)i * 2 * GSO_FRAMES
				       : NULL
		};
		q->tx_free[q->ntx_free++] = &q->tx[i];
	}
	/* Not submitted here: the first rx_burst() does it from the lcore,
	 * which then owns the requests (their completions are its task
	 * work, not the opening thread's). */
	return 0;
}

static int udp_open(const struct cs_port_conf *conf, struct cs_port **out)
{
	struct udp_port *up;
	int ret;

	*out = NULL;
	up = calloc(1, sizeof(*up));
	if (!up)
		return -ENOMEM;
	for (unsigned i = 0; i < CS_PORT_MAX_QUEUES; i++)
		up->q[i].fd = -1;
	up->port.ops = &cs_port_udp_ops;
	up->port.conf = *conf;
	up->port.frame_max = conf->mtu + CS_PORT_ETH_LEN;
	up->port.udp_port = (uint16_t)conf->udp_port;
	up->port.numa = -1;
	up->nq = conf->queues ? conf->queues : 1;
	/* queue q listens on udp_port + q */
	if (up->nq > CS_PORT_MAX_QUEUES || conf->udp_port == 0 ||
	    conf->udp_port + up->nq - 1 > 65535 ||
	    inet_pton(AF_INET, conf->ip, &up->port.ip) != 1 ||
	    (conf->mac[0] && cs_port_parse_mac(conf->mac, up->port.mac))) {
		CS_ERR("bad port.ip '%s', port.mac '%s', port.udp_port %u or "
		       "port.queues %u (queue q listens on port.udp_port + q)",
		       conf->ip, conf->mac, conf->udp_port, conf->queues);
		free(up);
		return -EINVAL;
	}
	for (unsigned i = 0; i < up->nq; i++) {
		ret = queue_init(up, &up->q[i]);
		if (ret) {
			CS_ERR("udp queue %u on %s:%u: %s", i, conf->ip,
			       conf->udp_port + i, strerror(-ret));
			up->nq = i + 1;
			udp_close(&up->port);
			return ret;
		}
	}
	if (up->q[0].ms)
		CS_INFO("udp port on %s:%u: %u queue(s), %u recv slots "
			"(multishot recvmsg%s) + %u send slots each, frames "
			"up to %u bytes, GSO %s, GRO %s",
			conf->ip, conf->udp_port, up->nq,
			up->q[0].gro ? conf->rx_desc : up->q[0].br_entries,
			up->q[0].gro ? " into 64 KiB buffers" : "",
			conf->tx_desc, up->port.frame_max,
			conf->udp_gso ? "on" : "off",
			up->q[0].gro ? "on" : "off");
	else
		CS_INFO("udp port on %s:%u: %u queue(s), %u recv slots (%u "
			"posted at once) + %u send slots each, frames up to "
			"%u bytes, GSO %s",
			conf->ip, conf->udp_port, up->nq, conf->rx_desc,
			up->q[0].rx_post_max, conf->tx_desc, up->port.frame_max,
			conf->udp_gso ? "on" : "off");
	*out = &up->port;
	return 0;
}

const struct cs_port_ops cs_port_udp_ops = {
	.name = "udp",
	.open = udp_open,
	.rx_burst = udp_rx_burst,
	.tx_alloc = udp_tx_alloc,
	.tx_burst = udp_tx_burst,
	.release = udp_release,
	.attach = udp_attach,
	.wait = udp_wait,
	.wakes_on_rx = udp_wakes_on_rx,
	.wait_sees_fd = udp_wait_sees_fd,
	.stats = udp_stats,
	.close = udp_close,
};

/* Test hook: the socket of queue @q of a udp port (tests/dataplane). */
int cs__udp_port_fd(struct cs_port *p, unsigned q)
{
	struct udp_port *up = up_of(p);

	return q < up->nq ? up->q[q].fd : -1;
}

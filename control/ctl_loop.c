/* SPDX-License-Identifier: MIT */
/* io_uring event loop for the control plane's TCP connections. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CS_LOG_MODULE "ctl"
#include "internal/log.h"

#include "control/ctl_loop.h"

#define CTL_BUF (CS_BOOT_MAX_MSG + 64)
#define CTL_RING_ENTRIES 256

enum { OP_ACCEPT = 1, OP_RECV = 2, OP_SEND = 3 };

struct conn {
	int fd;
	bool recv_armed, send_armed, closing;
	uint32_t rx_len, tx_len, tx_inflight;
	uint8_t *rx, *tx;
};

struct cs_ctl_loop {
	struct io_uring ring;
	struct cs_ctl_handler h;
	uint32_t max;
	struct conn *c;
	int lfd;
	bool accept_armed;
	struct cs_node_addr table[CS_BOOT_MAX_RANKS];
	uint32_t lost[CS_BOOT_MAX_RANKS];
};

static inline uint64_t ud(uint32_t conn, unsigned op)
{
	return (uint64_t)conn << 8 | op;
}

static struct io_uring_sqe *sqe_get(struct cs_ctl_loop *l)
{
	struct io_uring_sqe *s = io_uring_get_sqe(&l->ring);

	if (!s) {
		io_uring_submit(&l->ring);
		s = io_uring_get_sqe(&l->ring);
	}
	return s;
}

int cs_ctl_loop_init(struct cs_ctl_loop **out, uint32_t max_conns,
		     const struct cs_ctl_handler *h)
{
	struct cs_ctl_loop *l;
	int err;

	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->c = calloc(max_conns, sizeof(*l->c));
	if (!l->c) {
		err = -ENOMEM;
		goto out_free_loop;
	}
	err = io_uring_queue_init(CTL_RING_ENTRIES, &l->ring, 0);
	if (err)
		goto out_free_conns;
	for (uint32_t i = 0; i < max_conns; i++)
		l->c[i].fd = -1;
	l->max = max_conns;
	l->h = *h;
	l->lfd = -1;
	*out = l;
	return 0;

out_free_conns:
	free(l->c);
out_free_loop:
	free(l);
	return err;
}

static void conn_release(struct conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	free(c->rx);
	free(c->tx);
	memset(c, 0, sizeof(*c));
	c->fd = -1;
}

void cs_ctl_loop_fini(struct cs_ctl_loop *l)
{
	if (!l)
		return;
	for (uint32_t i = 0; i < l->max; i++)
		if (l->c[i].fd >= 0)
			conn_release(&l->c[i]);
	if (l->lfd >= 0)
		close(l->lfd);
	io_uring_queue_exit(&l->ring);
	free(l->c);
	free(l);
}

static void arm_accept(struct cs_ctl_loop *l)
{
	struct io_uring_sqe *s;

	if (l->lfd < 0 || l->accept_armed)
		return;
	s = sqe_get(l);
	if (!s)
		return;
	io_uring_prep_accept(s, l->lfd, NULL, NULL, SOCK_CLOEXEC);
	io_uring_sqe_set_data64(s, ud(0, OP_ACCEPT));
	l->accept_armed = true;
}

static void arm_recv(struct cs_ctl_loop *l, uint32_t id)
{
	struct conn *c = &l->c[id];
	struct io_uring_sqe *s;

	if (c->recv_armed || c->closing)
		return;
	s = sqe_get(l);
	if (!s)
		return;
	io_uring_prep_recv(s, c->fd, c->rx + c->rx_len, CTL_BUF - c->rx_len, 0);
	io_uring_sqe_set_data64(s, ud(id, OP_RECV));
	c->recv_armed = true;
}

static void arm_send(struct cs_ctl_loop *l, uint32_t id)
{
	struct conn *c = &l->c[id];
	struct io_uring_sqe *s;

	if (c->send_armed || !c->tx_len)
		return;
	s = sqe_get(l);
	if (!s)
		return;
	io_uring_prep_send(s, c->fd, c->tx, c->tx_len, MSG_NOSIGNAL);
	io_uring_sqe_set_data64(s, ud(id, OP_SEND));
	c->send_armed = true;
	c->tx_inflight = c->tx_len;
}

static int conn_add(struct cs_ctl_loop *l, int fd, uint32_t *id)
{
	int one = 1;

	for (uint32_t i = 0; i < l->max; i++) {
		struct conn *c = &l->c[i];

		if (c->fd >= 0 || c->recv_armed || c->send_armed)
			continue;
		c->rx = malloc(CTL_BUF);
		c->tx = malloc(CTL_BUF);
		if (!c->rx || !c->tx) {
			free(c->rx);
			free(c->tx);
			c->rx = c->tx = NULL;
			return -ENOMEM;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c->fd = fd;
		*id = i;
		arm_recv(l, i);
		return 0;
	}
	return -ENOSPC;
}

int cs_ctl_listen(struct cs_ctl_loop *l, const char *ip, uint16_t *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t alen = sizeof(a);
	int one = 1, fd, err;

	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1)
		return -EINVAL;
	a.sin_port = htons(*port);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 128)) {
		err = -errno;
		close(fd);
		return err;
	}
	getsockname(fd, (struct sockaddr *)&a, &alen);
	*port = ntohs(a.sin_port);
	l->lfd = fd;
	arm_accept(l);
	io_uring_submit(&l->ring);
	return 0;
}

int cs_ctl_loop_connect(struct cs_ctl_loop *l, const char *ip, uint16_t port,
			int timeout_ms, uint32_t *conn)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons(port) };
	struct pollfd p;
	int fd, err = 0;
	socklen_t el = sizeof(err);

	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1)
		return -EINVAL;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	/* Connect is set-up, not steady state: a plain non-blocking
	 * connect with a bounded wait keeps the error reporting simple. */
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) &&
	    errno != EINPROGRESS) {
		err = -errno;
		goto out_close;
	}
	p.fd = fd;
	p.events = POLLOUT;
	if (poll(&p, 1, timeout_ms) != 1) {
		err = -ETIMEDOUT;
		goto out_close;
	}
	getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
	if (err) {
		err = -err;
		goto out_close;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	err = conn_add(l, fd, conn);
	if (err)
		goto out_close;
	io_uring_submit(&l->ring);
	return 0;

out_close:
	close(fd);
	return err;
}

int cs_ctl_loop_send(struct cs_ctl_loop *l, uint32_t conn,
		     const struct cs_boot_msg *m)
{
	struct conn *c;
	int n;

	if (conn >= l->max || l->c[conn].fd < 0 || l->c[conn].closing)
		return -EBADF;
	c = &l->c[conn];
	/* While a send is in flight, append behind it; the completion
	 * handler shifts what was sent out of the buffer. */
	n = cs_boot_encode(m, c->tx + c->tx_len, CTL_BUF - c->tx_len);
	if (n < 0)
		return n == -ENOSPC ? -ENOBUFS : n;
	c->tx_len += (uint32_t)n;
	arm_send(l, conn);
	return 0;
}

void cs_ctl_close(struct cs_ctl_loop *l, uint32_t conn)
{
	struct conn *c;

	if (conn >= l->max || l->c[conn].fd < 0)
		return;
	c = &l->c[conn];
	c->closing = true;
	/* Let queued bytes (a REFUSE, say) go out; then shut down. */
	if (!c->send_armed)
		shutdown(c->fd, SHUT_RDWR);
}

static void conn_gone(struct cs_ctl_loop *l, uint32_t id, bool notify)
{
	struct conn *c = &l->c[id];

	if (c->fd < 0)
		return;
	shutdown(c->fd, SHUT_RDWR);
	c->closing = true;
	if (c->recv_armed || c->send_armed)
		return; /* released when the last completion arrives */
	conn_release(c);
	if (notify && l->h.on_close)
		l->h.on_close(l->h.ctx, id);
}

static void on_recv(struct cs_ctl_loop *l, uint32_t id, int res)
{
	struct conn *c = &l->c[id];
	uint32_t off = 0;

	c->recv_armed = false;
	if (res <= 0 || c->closing) {
		conn_gone(l, id, true);
		return;
	}
	c->rx_len += (uint32_t)res;
	for (;;) {
		struct cs_boot_msg m = { .table = l->table,
					 .lost = l->lost,
					 .cap = CS_BOOT_MAX_RANKS };
		int n = cs_boot_decode(c->rx + off, c->rx_len - off, &m);

		if (n == 0)
			break;
		if (n < 0) {
			CS_WARN("connection %u: malformed control message (%s); closing",
				id, strerror(-n));
			conn_gone(l, id, true);
			return;
		}
		off += (uint32_t)n;
		if (l->h.on_msg)
			l->h.on_msg(l->h.ctx, id, &m);
		if (c->fd < 0 || c->closing)
			return;
	}
	memmove(c->rx, c->rx + off, c->rx_len - off);
	c->rx_len -= off;
	arm_recv(l, id);
}

static void on_send(struct cs_ctl_loop *l, uint32_t id, int res)
{
	struct conn *c = &l->c[id];

	c->send_armed = false;
	if (res < 0) {
		conn_gone(l, id, true);
		return;
	}
	memmove(c->tx, c->tx + res, c->tx_len - (uint32_t)res);
	c->tx_len -= (uint32_t)res;
	if (c->closing) {
		if (c->tx_len && c->fd >= 0) {
			arm_send(l, id);
			return;
		}
		conn_gone(l, id, !c->recv_armed);
		return;
	}
	arm_send(l, id);
}

int cs_ctl_run(struct cs_ctl_loop *l, int timeout_ms)
{
	struct __kernel_timespec ts = {
		.tv_sec = timeout_ms / 1000,
		.tv_nsec = (long long)(timeout_ms % 1000) * 1000000,
	};
	struct io_uring_cqe *cqe;
	int n = 0, err;

	io_uring_submit(&l->ring);
	err = io_uring_wait_cqe_timeout(&l->ring, &cqe, &ts);
	if (err == -ETIME || err == -EINTR)
		return 0;
	if (err)
		return err;
	while (io_uring_peek_cqe(&l->ring, &cqe) == 0) {
		uint64_t u = io_uring_cqe_get_data64(cqe);
		uint32_t id = (uint32_t)(u >> 8);
		int res = cqe->res;

		io_uring_cqe_seen(&l->ring, cqe);
		n++;
		switch (u & 0xff) {
		case OP_ACCEPT:
			l->accept_armed = false;
			if (res >= 0) {
				uint32_t cid;

				if (conn_add(l, res, &cid)) {
					CS_WARN("control: no room for a new connection");
					close(res);
				} else if (l->h.on_open) {
					l->h.on_open(l->h.ctx, cid);
				}
			}
			arm_accept(l);
			break;
		case OP_RECV:
			if (id < l->max)
				on_recv(l, id, res);
			break;
		case OP_SEND:
			if (id < l->max)
				on_send(l, id, res);
			break;
		}
	}
	io_uring_submit(&l->ring);
	return n;
}

/* SPDX-License-Identifier: MIT */
/* libcollstack: connection, shared buffers, groups, posting and completion. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client_internal.h"
#include "shm_ring.h"

enum req_state { REQ_FREE = 0, REQ_POSTED, REQ_DONE };

struct req {
	uint64_t id;
	uint8_t state;
	uint8_t op;
	uint16_t detail;
	int32_t status;
	int32_t peer;
	uint32_t epoch; /* CS_IPC_LOST_NODE: the view that lost @peer */
	uint64_t count;
	uint64_t seq; /* the group's k-th operation (k = seq) */
	uint8_t dtype, redop;
	uint32_t root, tag; /* send/recv: the peer rank and the tag */
	struct cs_group *g;
};

struct cs_buf {
	struct cs_client *c;
	struct cs_buf *next;
	int fd; /* -1 for a device range */
	void *mem;
	size_t len;
	uint32_t seg;
	bool dev; /* a device range: nothing mapped here */
};

static void buf_release(struct cs_buf *b)
{
	if (!b->dev)
		cs_shm_unmap(b->mem, b->len);
	if (b->fd >= 0)
		close(b->fd);
	free(b);
}

struct rd_room {
	struct cs_buf *b;
	struct rd_room *next;
};

struct cs_group {
	struct cs_client *c;
	struct cs_group *next;
	uint32_t handle;
	int rank, size, local_rank, local_size;
	bool elastic; /* CS_GROUP_ELASTIC: completions update rank, size */
	uint64_t pending;
	uint64_t posted; /* operations posted: the next one's index */
	char name[CS_IPC_NAME_MAX];
	/* cs_alltoallv()'s count tables, one per request slot of the
	 * client (CS_IPC_RING_SLOTS of CS_IPC_A2AV_BYTES(vtab_n)): a slot's
	 * table is not written again before its request finished, and the
	 * sidecar copies it when it takes the descriptor */
	struct cs_buf *vtab;
	uint32_t vtab_n;
	/* cs_reduce()'s room for the result on ranks other than the root
	 * (discarded; shared by the group's operations, grown by a new
	 * buffer: an older one may still be written by one in flight) */
	struct cs_buf *scratch[24];
	unsigned nscratch;
	size_t scratch_len;
	/* cs_reduce()'s rooms for a non-root rank's block of the reduction
	 * (read again by its send to the root: one per operation in
	 * flight, taken at the post, given back when it finished) */
	struct rd_room *rd_free;
	bool subset; /* joined with a node set (cs_group_join_nodes, split) */
	unsigned nsplit; /* cs_group_split() calls: names the groups made */
};

/*
 * A request made of several (cs_gather()'s and cs_scatter()'s root: one
 * receive or send per rank): its id has CS_COMP_BIT set; it finishes once
 * every part did, with the first error among them.
 */
#define CS_COMP_BIT (1ull << 63)

struct comp {
	cs_req_t id;
	uint32_t n;
	cs_req_t *sub; /* 0: finished */
	int status;
	char err[256];
	struct comp *next;
	/* once every part finished well: the result (cs__comp_wrap()) */
	int (*fin)(void *arg, int status, char *err, size_t len);
	void *fin_arg;
	/* a request in stages (cs_reduce()): once every part finished well,
	 * step() may post the next stage's parts into sub[] (room for
	 * cap of them) and return 1; 0: done; < 0: failed (c->err says
	 * why). Lock held. @own is freed with the request, after done(). */
	int (*step)(struct cs_client *c, struct comp *k);
	void (*done)(struct cs_client *c, struct comp *k);
	/* cs__comp_stages(): posts the next stage */
	int (*stage)(void *arg, cs_req_t *sub);
	void *own;
	uint32_t cap;
};

struct cs_client {
	pthread_mutex_t lock;
	int fd;
	int efd;
	int ctrl_fd;
	void *ctrl_mem;
	size_t ctrl_len;
	struct cs_ipc_ctrl *ctrl;
	struct cs_ring sq, cq;
	struct cs_buf *bufs;
	struct cs_group *groups;
	uint64_t next_id;
	unsigned spin_polls;
	unsigned spin_yield; /* sched_yield() every this many polls */
	unsigned spin_free; /* ... after this many (a quick answer) */
	/* CS_CLIENT_SLOW_MEMORY after a wait outlasted CS_CLIENT_QUICK_NS,
	 * one less per quick one: while > 0, cs_wait() yields at once */
	unsigned slow_answers;
	int64_t spin_ns; /* and spin at most this long */
	bool dead;
	/* CS_CLIENT_REDUCE_ENV: 0 auto, 1 allreduce, 2 scatter-gather */
	uint8_t reduce_how;
	struct req reqs[CS_IPC_RING_SLOTS];
	unsigned last_detail;
	int last_peer;
	int last_lost_node; /* node whose loss failed the last request */
	uint32_t node; /* the sidecar's ring index (its hello's reply) */
	char err[256];
	struct comp *comps;
	uint64_t next_comp;
};

static const char *const op_names[CS_IPC_OP_COUNT] = {
	[CS_IPC_OP_NONE] = "op 0",
	[CS_IPC_OP_ALLREDUCE] = "allreduce",
	[CS_IPC_OP_REDUCE_SCATTER] = "reduce-scatter",
	[CS_IPC_OP_ALL_GATHER] = "all-gather",
	[CS_IPC_OP_BROADCAST] = "broadcast",
	[CS_IPC_OP_BARRIER] = "barrier",
	[CS_IPC_OP_ALLTOALL] = "all-to-all",
	[CS_IPC_OP_ALLTOALLV] = "all-to-all-v",
	[CS_IPC_OP_ALLTOALLV_DYN] = "all-to-all-v (counts sent along)",
};

static const char *const bad_names[CS_IPC_BAD_COUNT_] = {
	[CS_IPC_BAD_NONE] = "bad descriptor",
	[CS_IPC_BAD_OP] = "unknown operation",
	[CS_IPC_BAD_GROUP] = "not a group of this trainer",
	[CS_IPC_BAD_DTYPE] = "unknown element type",
	[CS_IPC_BAD_REDOP] = "unknown reduction",
	[CS_IPC_BAD_COUNT] = "element count out of range",
	[CS_IPC_BAD_SEND_SEG] = "send buffer: unknown segment",
	[CS_IPC_BAD_RECV_SEG] = "recv buffer: unknown segment",
	[CS_IPC_BAD_SEND_RANGE] = "send buffer runs past its segment",
	[CS_IPC_BAD_RECV_RANGE] = "recv buffer runs past its segment",
	[CS_IPC_BAD_ALIGN] = "buffer offset not a multiple of element size",
	[CS_IPC_BAD_OVERLAP] = "send and recv overlap (and not in place)",
	[CS_IPC_BAD_ROOT] = "root rank out of range",
	[CS_IPC_BAD_FLAGS] = "reserved fields not zero",
	[CS_IPC_BAD_MISMATCH] = "differs from another rank's call",
	[CS_IPC_BAD_PEER] = "another rank posted a bad call",
	[CS_IPC_BAD_GROUP_SIZE] = "the nodes disagree on the group's size",
	[CS_IPC_BAD_GROUP_RANK] = "a rank of the group is on two nodes",
	[CS_IPC_BAD_GROUP_MISSING] = "a rank of the group is on no node",
	[CS_IPC_BAD_LAYOUT] = "all-to-all across nodes needs the same number "
			      "L of ranks on every node, node k holding "
			      "ranks k*L .. k*L+L-1 in local-rank order",
	[CS_IPC_BAD_PS_TABLE] = "not a PS table of this trainer (never "
				"created, or destroyed)",
	[CS_IPC_BAD_PS_ROW] = "rows of another type or size than the "
			      "table's",
	[CS_IPC_BAD_A2AV_TABLE] = "all-to-all-v count table: unknown "
				  "segment, outside it, or not 8-aligned",
	[CS_IPC_BAD_A2AV_COUNTS] = "all-to-all-v counts do not add up",
	[CS_IPC_BAD_DYN_ROOM] = "no room for what the others send to",
	[CS_IPC_BAD_DYN_TAG] = "posted another kind of exchange than rank 0 "
			       "(an MoE layer with node-sum or node-rows on "
			       "some ranks only?)",
	[CS_IPC_BAD_PS_KEY] = "a key is not below the table's key_max",
	[CS_IPC_BAD_PIPE] = "refused on every node: the nodes' sidecars "
			    "cut it into slices differently (ipc.dev_pipe)",
};

static bool is_ps_op(unsigned op)
{
	return op == CS_IPC_OP_PS_PUSH || op == CS_IPC_OP_PS_PULL ||
	       op == CS_IPC_OP_PS_CKPT || op == CS_IPC_OP_PS_RESTORE;
}

static bool is_p2p_op(unsigned op)
{
	return op == CS_IPC_OP_SEND || op == CS_IPC_OP_RECV;
}

static const char *op_name(unsigned op)
{
	if (op == CS_IPC_OP_PS_CKPT || op == CS_IPC_OP_PS_RESTORE)
		return op == CS_IPC_OP_PS_CKPT ? "ps checkpoint" : "ps restore";
	if (is_ps_op(op))
		return op == CS_IPC_OP_PS_PUSH ? "ps push" : "ps pull";
	if (is_p2p_op(op))
		return op == CS_IPC_OP_SEND ? "send" : "recv";
	return op < CS_IPC_OP_COUNT ? op_names[op] : "unknown op";
}

__attribute__((format(printf, 2, 3))) static void set_err(struct cs_client *c,
							  const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
}

/* ---- control messages ------------------------------------------------- */

/* Send @m with @nfd fds and wait for the reply. Lock held. */
static int rpc(struct cs_client *c, struct cs_ipc_msg *m, const int *fds,
	       int nfd, struct cs_ipc_msg *r)
{
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} cb;
	struct iovec iov = { m, sizeof(*m) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (c->dead)
		return -ENOTCONN;
	m->version = CS_IPC_VERSION;
	if (nfd) {
		struct cmsghdr *h;

		memset(&cb, 0, sizeof(cb));
		mh.msg_control = cb.buf;
		mh.msg_controllen = CMSG_SPACE((size_t)nfd * sizeof(int));
		h = CMSG_FIRSTHDR(&mh);
		h->cmsg_level = SOL_SOCKET;
		h->cmsg_type = SCM_RIGHTS;
		h->cmsg_len = CMSG_LEN((size_t)nfd * sizeof(int));
		memcpy(CMSG_DATA(h), fds, (size_t)nfd * sizeof(int));
	}
	do
		n = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof(*m))
		goto out_dead;
	do
		n = recv(c->fd, r, sizeof(*r), 0);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof(*r) || r->type != CS_IPC_MSG_REPLY)
		goto out_dead;
	r->u.reply.text[CS_IPC_MSG_TEXT - 1] = 0;
	return r->u.reply.status;

out_dead:
	c->dead = true;
	return -ENOTCONN;
}

/* ---- connection ------------------------------------------------------- */

static int ctrl_setup(struct cs_client *c)
{
	size_t sq_len = cs_ring_region_size(sizeof(struct cs_ipc_sqe),
					    CS_IPC_RING_SLOTS);
	size_t cq_len = cs_ring_region_size(sizeof(struct cs_ipc_cqe),
					    CS_IPC_RING_SLOTS);
	size_t sq_off = sizeof(struct cs_ipc_ctrl);
	size_t cq_off = sq_off + sq_len;
	int ret;

	c->ctrl_len = cq_off + cq_len;
	ret = cs_shm_create("collstack-ctrl", c->ctrl_len, &c->ctrl_fd,
			    &c->ctrl_mem);
	if (ret)
		return ret;
	c->ctrl = c->ctrl_mem;
	c->ctrl->version = CS_IPC_VERSION;
	c->ctrl->sq_off = sq_off;
	c->ctrl->sq_len = sq_len;
	c->ctrl->cq_off = cq_off;
	c->ctrl->cq_len = cq_len;
	c->ctrl->magic = CS_IPC_CTRL_MAGIC;
	if (cs_ring_format((char *)c->ctrl_mem + sq_off, sq_len,
			   sizeof(struct cs_ipc_sqe), CS_IPC_RING_SLOTS) ||
	    cs_ring_format((char *)c->ctrl_mem + cq_off, cq_len,
			   sizeof(struct cs_ipc_cqe), CS_IPC_RING_SLOTS) ||
	    cs_ring_attach(&c->sq, (char *)c->ctrl_mem + sq_off, sq_len,
			   CS_RING_PRODUCER, sizeof(struct cs_ipc_sqe)) ||
	    cs_ring_attach(&c->cq, (char *)c->ctrl_mem + cq_off, cq_len,
			   CS_RING_CONSUMER, sizeof(struct cs_ipc_cqe)))
		return -EINVAL;
	return 0;
}

cs_export int cs_connect(const char *path, struct cs_client **out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct cs_ipc_msg m = { .type = CS_IPC_MSG_HELLO }, r;
	struct cs_client *c;
	int fds[2], ret;

	if (!out)
		return -EINVAL;
	if (!path)
		path = getenv(CS_SOCKET_ENV);
	if (!path || !*path)
		path = CS_DEFAULT_SOCKET;
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path));
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	c->ctrl_fd = c->efd = -1;
	c->last_lost_node = -1;
	c->next_id = 1;
	c->spin_polls = CS_CLIENT_SPIN_POLLS;
	{
		const char *e = getenv(CS_CLIENT_SPIN_ENV);

		if (e && *e)
			c->spin_polls = (unsigned)strtoul(e, NULL, 10);
		c->spin_ns = CS_CLIENT_SPIN_US * 1000ll;
		e = getenv(CS_CLIENT_SPIN_US_ENV);
		if (e && *e)
			c->spin_ns = (int64_t)strtoull(e, NULL, 10) * 1000;
		c->spin_free = CS_CLIENT_SPIN_FREE;
		e = getenv(CS_CLIENT_SPIN_FREE_ENV);
		if (e && *e)
			c->spin_free = (unsigned)strtoul(e, NULL, 10);
		e = getenv(CS_CLIENT_REDUCE_ENV);
		if (e && !strcmp(e, "allreduce"))
			c->reduce_how = 1;
		else if (e && !strcmp(e, "scatter-gather"))
			c->reduce_how = 2;
		c->spin_yield = CS_CLIENT_SPIN_YIELD;
		e = getenv(CS_CLIENT_SPIN_YIELD_ENV);
		if (e && *e && strtoul(e, NULL, 10) > 0)
			c->spin_yield = (unsigned)strtoul(e, NULL, 10);
	}
	c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (c->fd < 0) {
		ret = -errno;
		goto out_free;
	}
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa))) {
		ret = -errno;
		goto out_close;
	}
	/* A sidecar that stops answering must not hang the trainer. */
	{
		struct timeval tv = { .tv_sec = CS_CLIENT_RPC_TIMEOUT_S };

		setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	}
	c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->efd < 0) {
		ret = -errno;
		goto out_close;
	}
	ret = ctrl_setup(c);
	if (ret)
		goto out_ctrl;
	m.u.hello.ctrl_len = c->ctrl_len;
	m.u.hello.pid = (uint32_t)getpid();
	fds[0] = c->ctrl_fd;
	fds[1] = c->efd;
	ret = rpc(c, &m, fds, 2, &r);
	/* A sidecar with every trainer slot taken answers -EUSERS at once
	 * and hangs up, possibly before our hello went out: its answer
	 * may still be waiting. */
	if (ret == -ENOTCONN &&
	    recv(c->fd, &r, sizeof(r), MSG_DONTWAIT) == (ssize_t)sizeof(r) &&
	    r.type == CS_IPC_MSG_REPLY && r.u.reply.status < 0)
		ret = r.u.reply.status;
	if (ret == -ENOTCONN)
		ret = -ECONNRESET; /* refused (credentials) */
	if (ret)
		goto out_ctrl;
	c->node = r.u.reply.value;
	*out = c;
	return 0;

out_ctrl:
	if (c->ctrl_mem)
		cs_shm_unmap(c->ctrl_mem, c->ctrl_len);
	if (c->ctrl_fd >= 0)
		close(c->ctrl_fd);
	if (c->efd >= 0)
		close(c->efd);
out_close:
	close(c->fd);
out_free:
	pthread_mutex_destroy(&c->lock);
	free(c);
	return ret;
}

cs_export void cs_disconnect(struct cs_client *c)
{
	if (!c)
		return;
	/* Closing the socket is the signal: the sidecar drops everything. */
	close(c->fd);
	while (c->bufs) {
		struct cs_buf *b = c->bufs;

		c->bufs = b->next;
		buf_release(b);
	}
	/* (unfinished composites first: done() gives a reduce's room back
	 * to its group, freed below; the rooms' buffers went above) */
	while (c->comps) {
		struct comp *k = c->comps;

		c->comps = k->next;
		if (k->done)
			k->done(c, k);
		free(k->sub);
		free(k->own);
		free(k);
	}
	while (c->groups) {
		struct cs_group *g = c->groups;

		c->groups = g->next;
		while (g->rd_free) {
			struct rd_room *m = g->rd_free;

			g->rd_free = m->next;
			free(m);
		}
		free(g);
	}
	cs_shm_unmap(c->ctrl_mem, c->ctrl_len);
	close(c->ctrl_fd);
	close(c->efd);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

cs_export const char *cs_errmsg(const struct cs_client *c)
{
	return c ? c->err : "no client";
}

cs_export int cs_lost_node(const struct cs_client *c)
{
	return c ? c->last_lost_node : -1;
}

/* ---- buffers ---------------------------------------------------------- */

cs_export int cs_buf_alloc(struct cs_client *c, size_t len, struct cs_buf **out)
{
	struct cs_ipc_msg m = { .type = CS_IPC_MSG_REG_SEG }, r;
	struct cs_buf *b;
	int ret;

	if (!c || !out || !len)
		return -EINVAL;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	ret = cs_shm_create("collstack-buf", len, &b->fd, &b->mem);
	if (ret) {
		set_err(c, "buffer of %zu bytes: %s", len, strerror(-ret));
		goto out_free;
	}
	b->len = CS_DIV_ROUND_UP(len, (size_t)sysconf(_SC_PAGESIZE)) *
		 (size_t)sysconf(_SC_PAGESIZE);
	b->c = c;
	m.u.reg.len = b->len;
	pthread_mutex_lock(&c->lock);
	ret = rpc(c, &m, &b->fd, 1, &r);
	if (ret) {
		set_err(c, "register buffer of %zu bytes: %s", len,
			ret == -ENOTCONN ? "sidecar gone" : r.u.reply.text);
		pthread_mutex_unlock(&c->lock);
		goto out_unmap;
	}
	b->seg = r.u.reply.value;
	b->next = c->bufs;
	c->bufs = b;
	pthread_mutex_unlock(&c->lock);
	*out = b;
	return 0;

out_unmap:
	cs_shm_unmap(b->mem, b->len);
	close(b->fd);
out_free:
	free(b);
	return ret;
}

cs_export int cs_buf_register_dev(struct cs_client *c,
				  const struct cs_dev_mem *m, size_t off,
				  size_t len, struct cs_buf **out)
{
	struct cs_ipc_msg msg = { .type = CS_IPC_MSG_REG_DEV }, r;
	int fd = -1, ret;
	struct cs_buf *b;

	if (!c || !m || !out || !len || !m->base ||
	    (m->kind != CS_DEV_CUDA_IPC && m->kind != CS_DEV_POSIX_FD) ||
	    off > m->alloc_len || len > m->alloc_len - off ||
	    (m->kind == CS_DEV_POSIX_FD && m->fd < 0))
		return -EINVAL;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->c = c;
	b->fd = -1;
	b->dev = true;
	b->mem = (uint8_t *)m->base + off;
	b->len = len;
	msg.u.dev.off = off;
	msg.u.dev.len = len;
	msg.u.dev.kind = (uint32_t)m->kind;
	memcpy(msg.u.dev.uuid, m->uuid, sizeof(msg.u.dev.uuid));
	memcpy(msg.u.dev.handle, m->handle, sizeof(msg.u.dev.handle));
	if (m->kind == CS_DEV_POSIX_FD)
		fd = m->fd;
	pthread_mutex_lock(&c->lock);
	ret = rpc(c, &msg, fd >= 0 ? &fd : NULL, fd >= 0 ? 1 : 0, &r);
	if (ret) {
		set_err(c, "register device range of %zu bytes: %s", len,
			ret == -ENOTCONN ? "sidecar gone" : r.u.reply.text);
		pthread_mutex_unlock(&c->lock);
		free(b);
		return ret;
	}
	b->seg = r.u.reply.value;
	b->next = c->bufs;
	c->bufs = b;
	pthread_mutex_unlock(&c->lock);
	*out = b;
	return 0;
}

cs_export void *cs_buf_ptr(const struct cs_buf *b)
{
	return b->mem;
}

cs_export size_t cs_buf_len(const struct cs_buf *b)
{
	return b->len;
}

cs_export int cs_buf_free(struct cs_buf *b)
{
	struct cs_ipc_msg m = { .type = CS_IPC_MSG_UNREG_SEG }, r;
	struct cs_client *c;
	struct cs_buf **pp;
	int ret;

	if (!b)
		return 0;
	c = b->c;
	pthread_mutex_lock(&c->lock);
	m.u.unreg.seg = b->seg;
	ret = rpc(c, &m, NULL, 0, &r);
	if (ret && ret != -ENOTCONN) {
		set_err(c, "free buffer: %s", r.u.reply.text);
		pthread_mutex_unlock(&c->lock);
		return ret;
	}
	for (pp = &c->bufs; *pp; pp = &(*pp)->next)
		if (*pp == b) {
			*pp = b->next;
			break;
		}
	pthread_mutex_unlock(&c->lock);
	buf_release(b);
	return 0;
}

/* Which registered segment holds [p, p+len)? Lock held. */
static int locate(struct cs_client *c, const void *p, size_t len, uint32_t *seg,
		  uint64_t *off)
{
	for (struct cs_buf *b = c->bufs; b; b = b->next) {
		uintptr_t s = (uintptr_t)b->mem, a = (uintptr_t)p;

		if (a >= s && a - s <= b->len && len <= b->len - (a - s)) {
			*seg = b->seg;
			*off = a - s;
			return 0;
		}
	}
	return -EFAULT;
}

/* Which registered segment holds the byte at @p (not one that ends
 * there: two mappings may be adjacent)? Lock held. */
static int locate_start(struct cs_client *c, const void *p, uint32_t *seg,
			uint64_t *off)
{
	for (struct cs_buf *b = c->bufs; b; b = b->next) {
		uintptr_t s = (uintptr_t)b->mem, a = (uintptr_t)p;

		if (a >= s && a - s < b->len) {
			*seg = b->seg;
			*off = a - s;
			return 0;
		}
	}
	return -EFAULT;
}

static_assert(CS_GROUP_ELASTIC == CS_IPC_JOIN_ELASTIC, "one flag, two names");

/* ---- groups ----------------------------------------------------------- */

cs_export int cs_group_join(struct cs_client *c, const char *name, int rank,
			    int size, int local_rank, int local_size,
			    struct cs_group **out)
{
	return cs_group_join_ex(c, name, rank, size, local_rank, local_size, 0,
				out);
}

/* cs_group_join_ex() over the nodes in @nodes (NULL: every node). */
static int group_join(struct cs_client *c, const char *name, int rank, int size,
		      int local_rank, int local_size, unsigned flags,
		      const uint64_t *nodes, struct cs_group **out)
{
	struct cs_ipc_msg m = { .type = CS_IPC_MSG_JOIN }, r;
	struct cs_group *g;
	int ret;

	if (!c || !name || !out)
		return -EINVAL;
	if (strlen(name) >= CS_IPC_NAME_MAX) {
		set_err(c, "rank %d join: group name longer than %d bytes",
			rank, CS_IPC_NAME_MAX - 1);
		return -EINVAL;
	}
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	snprintf(m.u.join.name, sizeof(m.u.join.name), "%s", name);
	m.u.join.rank = rank;
	m.u.join.size = size;
	m.u.join.local_rank = local_rank;
	m.u.join.local_size = local_size;
	m.u.join.flags = flags; /* CS_GROUP_* are CS_IPC_JOIN_* */
	if (nodes)
		memcpy(m.u.join.nodes, nodes, sizeof(m.u.join.nodes));
	pthread_mutex_lock(&c->lock);
	ret = rpc(c, &m, NULL, 0, &r);
	if (ret) {
		set_err(c, "rank %d join group '%s': %s", rank, name,
			ret == -ENOTCONN ? "sidecar gone" : r.u.reply.text);
		pthread_mutex_unlock(&c->lock);
		free(g);
		return ret;
	}
	g->c = c;
	g->handle = r.u.reply.value;
	g->rank = rank;
	g->size = size;
	g->local_rank = local_rank;
	g->local_size = local_size;
	g->elastic = flags & CS_GROUP_ELASTIC;
	g->subset = nodes != NULL;
	snprintf(g->name, sizeof(g->name), "%s", name);
	g->next = c->groups;
	c->groups = g;
	pthread_mutex_unlock(&c->lock);
	*out = g;
	return 0;
}

cs_export int cs_group_join_ex(struct cs_client *c, const char *name, int rank,
			       int size, int local_rank, int local_size,
			       unsigned flags, struct cs_group **out)
{
	return group_join(c, name, rank, size, local_rank, local_size, flags,
			  NULL, out);
}

cs_export int cs_group_join_nodes(struct cs_client *c, const char *name,
				  int rank, int size, int local_rank,
				  int local_size, const int *nodes, int nnodes,
				  struct cs_group **out)
{
	uint64_t set[CS_IPC_NODE_WORDS] = { 0 };

	if (!c || (nnodes && !nodes) || nnodes < 0)
		return -EINVAL;
	for (int i = 0; i < nnodes; i++) {
		if (nodes[i] < 0 || nodes[i] >= CS_IPC_SUBSET_NODES) {
			set_err(c,
				"rank %d join group '%s': node %d: groups "
				"over some nodes take nodes 0..%d",
				rank, name ? name : "?", nodes[i],
				CS_IPC_SUBSET_NODES - 1);
			return -EINVAL;
		}
		set[nodes[i] / 64] |= 1ull << (nodes[i] % 64);
	}
	return group_join(c, name, rank, size, local_rank, local_size, 0,
			  nnodes && local_size < size ? set : NULL, out);
}

cs_export int cs_node_index(const struct cs_client *c)
{
	return c ? (int)c->node : -EINVAL;
}

/* The k-th split of @p: "<p's name>/k.color", or, when that is too long,
 * the name's hash in its place (every rank makes the same). */
static void split_name(const struct cs_group *p, unsigned k, int color,
		       char *out, size_t len)
{
	uint32_t h = 2166136261u;

	if ((size_t)snprintf(out, len, "%s/%u.%d", p->name, k, color) < len)
		return;
	for (const char *s = p->name; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	snprintf(out, len, "#%08x/%u.%d", h, k, color);
}

cs_export int cs_group_split(struct cs_group *parent, int color, int key,
			     struct cs_group **out)
{
	uint64_t nodes[CS_IPC_NODE_WORDS] = { 0 };
	int rank = 0, size = 0, lr = 0, ls = 0;
	char name[CS_IPC_NAME_MAX];
	struct cs_client *c;
	struct cs_buf *b;
	unsigned k;
	int32_t *v;
	cs_req_t req;
	int ret;

	if (!parent || !out)
		return -EINVAL;
	c = parent->c;
	*out = NULL;
	if (color < CS_SPLIT_NONE || parent->elastic) {
		set_err(c, "rank %d split of group '%s': %s", parent->rank,
			parent->name,
			parent->elastic
				? "an elastic group cannot be split"
				: "color must be >= 0 or CS_SPLIT_NONE");
		return -EINVAL;
	}
	k = parent->nsplit++; /* every rank counts the same calls */
	ret = cs_buf_alloc(c, (size_t)parent->size * 4 * sizeof(int32_t), &b);
	if (ret)
		return ret;
	v = cs_buf_ptr(b);
	v[parent->rank * 4] = color;
	v[parent->rank * 4 + 1] = key;
	v[parent->rank * 4 + 2] = (int32_t)c->node;
	v[parent->rank * 4 + 3] = 0;
	ret = cs_all_gather(parent, v + parent->rank * 4, v, 4, CS_I32, &req);
	if (!ret)
		ret = cs_wait(c, req, -1);
	if (ret || color == CS_SPLIT_NONE)
		goto out;
	/* the ranks of @color, ordered by (key, parent rank); local ranks
	 * in the same order among those on this node */
	for (int r = 0; r < parent->size; r++) {
		const int32_t *e = v + r * 4;
		bool before = e[1] < key || (e[1] == key && r < parent->rank);
		uint32_t node = (uint32_t)e[2];

		if (e[0] != color)
			continue;
		size++;
		rank += before;
		if (node == c->node) {
			ls++;
			lr += before;
		}
		if (node >= CS_IPC_SUBSET_NODES) {
			set_err(c,
				"rank %d split of group '%s': rank %d is on "
				"node %u; groups over some nodes take nodes "
				"below %d",
				parent->rank, parent->name, r, node,
				CS_IPC_SUBSET_NODES);
			ret = -EINVAL;
			goto out;
		}
		nodes[node / 64] |= 1ull << (node % 64);
	}
	split_name(parent, k, color, name, sizeof(name));
	ret = group_join(c, name, rank, size, lr, ls, 0,
			 ls < size ? nodes : NULL, out);
out:
	cs_buf_free(b);
	return ret;
}

static bool env_int(const char *name, int *v)
{
	const char *s = getenv(name);
	char *end;
	long x;

	if (!s || !*s)
		return false;
	x = strtol(s, &end, 10);
	/* Slurm writes "4(x2)" for per-node counts: take the number. */
	if (end == s || x < 0 || x > INT32_MAX)
		return false;
	*v = (int)x;
	return true;
}

cs_export int cs_group_join_env(struct cs_client *c, const char *name,
				struct cs_group **out)
{
	int rank, size, lr, ls, el;

	if (!c)
		return -EINVAL;
	if (env_int("RANK", &rank) && env_int("WORLD_SIZE", &size)) {
		if (!env_int("LOCAL_RANK", &lr) ||
		    !env_int("LOCAL_WORLD_SIZE", &ls)) {
			lr = rank;
			ls = size;
		}
	} else if (env_int("SLURM_PROCID", &rank) &&
		   env_int("SLURM_NTASKS", &size)) {
		if (!env_int("SLURM_LOCALID", &lr) ||
		    (!env_int("SLURM_NTASKS_PER_NODE", &ls) &&
		     !env_int("SLURM_TASKS_PER_NODE", &ls))) {
			lr = rank;
			ls = size;
		}
	} else {
		set_err(c,
			"join group '%s': neither RANK/WORLD_SIZE nor "
			"SLURM_PROCID/SLURM_NTASKS is set",
			name ? name : "");
		return -ENOENT;
	}
	return cs_group_join_ex(
		c, name, rank, size, lr, ls,
		env_int("COLLSTACK_ELASTIC", &el) && el ? CS_GROUP_ELASTIC : 0,
		out);
}

cs_export int cs_group_rank(const struct cs_group *g)
{
	return g->rank;
}

cs_export int cs_group_size(const struct cs_group *g)
{
	return g->size;
}

cs_export int cs_group_leave(struct cs_group *g)
{
	struct cs_ipc_msg m = { .type = CS_IPC_MSG_LEAVE }, r;
	struct cs_client *c;
	struct cs_group **pp;
	int ret;

	if (!g)
		return 0;
	c = g->c;
	pthread_mutex_lock(&c->lock);
	if (g->pending) {
		set_err(c, "rank %d leave group '%s': %llu operations pending",
			g->rank, g->name, (unsigned long long)g->pending);
		pthread_mutex_unlock(&c->lock);
		return -EBUSY;
	}
	m.u.leave.group = g->handle;
	ret = rpc(c, &m, NULL, 0, &r);
	/* (its count tables go after the unlock: cs_buf_free() locks) */
	if (ret && ret != -ENOTCONN) {
		set_err(c, "rank %d leave group '%s': %s", g->rank, g->name,
			r.u.reply.text);
		pthread_mutex_unlock(&c->lock);
		return ret;
	}
	for (pp = &c->groups; *pp; pp = &(*pp)->next)
		if (*pp == g) {
			*pp = g->next;
			break;
		}
	pthread_mutex_unlock(&c->lock);
	if (g->vtab)
		cs_buf_free(g->vtab);
	for (unsigned i = 0; i < g->nscratch; i++)
		cs_buf_free(g->scratch[i]);
	while (g->rd_free) {
		struct rd_room *m = g->rd_free;

		g->rd_free = m->next;
		cs_buf_free(m->b);
		free(m);
	}
	free(g);
	return 0;
}

/* ---- posting and completion ------------------------------------------- */

/*
 * The sidecar went to sleep on its sockets (idle for ipc.quiet_after):
 * a message wakes it. Lock held (no reply comes, so no request/reply pair
 * of another thread can be split).
 */
static void wake_sidecar(struct cs_client *c)
{
	struct cs_ipc_msg m = { .type = CS_IPC_MSG_WAKE,
				.version = CS_IPC_VERSION };

	/* Pairs with the sidecar's store of sq_asleep and its look at the
	 * ring (cs_ipc_server_sleep_prepare). */
	atomic_thread_fence(memory_order_seq_cst);
	if (!atomic_load_explicit(&c->ctrl->sq_asleep, memory_order_relaxed) ||
	    !atomic_exchange_explicit(&c->ctrl->sq_asleep, 0,
				      memory_order_relaxed))
		return;
	/* EAGAIN: messages wait unread, so the sidecar wakes anyway */
	(void)send(c->fd, &m, sizeof(m), MSG_DONTWAIT | MSG_NOSIGNAL);
}

/*
 * Make the @n request slots from c->next_id on free, moving next_id past
 * busy ones: a request's slot is its id modulo CS_IPC_RING_SLOTS, and a
 * request that stays unfinished for long (a checkpoint of a large PS
 * table, a receive nobody sends to yet) must not stop the next
 * CS_IPC_RING_SLOTS - 1 requests from being posted while it lasts. Ids
 * stay increasing (the sidecar only echoes them). Returns false when no
 * @n consecutive slots are free. Lock held.
 */
static bool reserve_locked(struct cs_client *c, uint32_t n)
{
	for (uint32_t tries = 0; tries < CS_IPC_RING_SLOTS; tries++) {
		uint32_t i = 0;

		while (i < n &&
		       c->reqs[(c->next_id + i) % CS_IPC_RING_SLOTS].state ==
			       REQ_FREE)
			i++;
		if (i == n)
			return true;
		c->next_id += i + 1; /* past the busy one */
	}
	return false;
}

/* Post @d (user_id filled in here). Lock held. */
static int post_locked(struct cs_client *c, struct cs_group *g,
		       struct cs_ipc_sqe *d, cs_req_t *req)
{
	struct req *q;

	if (c->dead)
		return -ENOTCONN;
	(void)reserve_locked(c, 1);
	q = &c->reqs[c->next_id % CS_IPC_RING_SLOTS];
	if (q->state != REQ_FREE) {
		set_err(c, "%s: %u requests unfinished; test or wait first",
			op_name(d->op), CS_IPC_RING_SLOTS);
		return -EAGAIN;
	}
	d->user_id = c->next_id;
	if (!cs_ring_enqueue_burst(&c->sq, d, 1)) {
		/* Cannot happen: at most CS_IPC_RING_SLOTS are posted. */
		set_err(c, "%s: submission ring full", op_name(d->op));
		return -EAGAIN;
	}
	wake_sidecar(c);
	*q = (struct req){ .id = c->next_id,
			   .state = REQ_POSTED,
			   .op = d->op,
			   .count = d->count,
			   .dtype = d->dtype,
			   .redop = d->redop,
			   .root = d->root,
			   .tag = d->reserved0,
			   .seq = g ? g->posted : 0,
			   .g = g };
	if (g) {
		g->pending++;
		g->posted++;
	}
	*req = c->next_id++;
	return 0;
}

static int post(struct cs_group *g, unsigned op, const void *send, void *recv,
		size_t count, enum cs_dtype dtype, enum cs_redop redop,
		int root, cs_req_t *req)
{
	struct cs_client *c = g->c;
	struct cs_ipc_sqe d = {
		.group = g->handle,
		.op = (uint8_t)op,
		.dtype = (uint8_t)dtype,
		.redop = (uint8_t)redop,
		.count = count,
		.root = (uint32_t)root,
	};
	size_t esz = cs_dtype_size(dtype), slen = 0, rlen = 0;

	if (!req)
		return -EINVAL;
	/* joined with rank -1 (a node that joined): no size until the
	 * group's first operation, which must need none */
	if (g->size < 1 && op != CS_IPC_OP_ALLREDUCE &&
	    op != CS_IPC_OP_BARRIER) {
		pthread_mutex_lock(&c->lock);
		set_err(c,
			"%s on group '%s': the group has no size yet (joined "
			"with rank -1): its first operation must be an "
			"allreduce or a barrier",
			op_name(op), g->name);
		pthread_mutex_unlock(&c->lock);
		return -EINVAL;
	}
	switch (op) {
	case CS_IPC_OP_ALLREDUCE:
		slen = rlen = count * esz;
		break;
	case CS_IPC_OP_REDUCE_SCATTER:
		slen = count * esz * (size_t)g->size;
		rlen = count * esz;
		break;
	case CS_IPC_OP_ALL_GATHER:
		slen = count * esz;
		rlen = count * esz * (size_t)g->size;
		break;
	case CS_IPC_OP_BROADCAST:
		rlen = count * esz;
		break;
	case CS_IPC_OP_ALLTOALL:
		slen = rlen = count * esz * (size_t)g->size;
		break;
	default:
		break;
	}
	return cs__client_post_bufs(g, &d, send, slen, recv,
				    op == CS_IPC_OP_BARRIER ? 0 : rlen, req);
}

static int post_bufs_locked(struct cs_group *g, struct cs_ipc_sqe *d,
			    const void *send, size_t slen, const void *recv,
			    size_t rlen, cs_req_t *req)
{
	struct cs_client *c = g->c;
	const char *which = NULL;
	int ret;

	if (slen &&
	    (!send || locate(c, send, slen, &d->send_seg, &d->send_off)))
		which = "send";
	else if (rlen &&
		 (!recv || locate(c, recv, rlen, &d->recv_seg, &d->recv_off)))
		which = "recv";
	if (which) {
		set_err(c,
			"rank %d %s on group '%s': %s buffer is not inside "
			"a cs_buf_alloc() buffer of this client",
			g->rank, op_name(d->op), g->name, which);
		return -EFAULT;
	}
	ret = post_locked(c, g, d, req);
	if (ret == -ENOTCONN)
		set_err(c, "rank %d %s on group '%s': sidecar gone", g->rank,
			op_name(d->op), g->name);
	return ret;
}

int cs__client_post_bufs_locked(struct cs_group *g, struct cs_ipc_sqe *d,
				const void *send, size_t slen, const void *recv,
				size_t rlen, cs_req_t *req)
{
	return post_bufs_locked(g, d, send, slen, recv, rlen, req);
}

int cs__client_post_bufs(struct cs_group *g, struct cs_ipc_sqe *d,
			 const void *send, size_t slen, const void *recv,
			 size_t rlen, cs_req_t *req)
{
	int ret;

	pthread_mutex_lock(&g->c->lock);
	ret = post_bufs_locked(g, d, send, slen, recv, rlen, req);
	pthread_mutex_unlock(&g->c->lock);
	return ret;
}

cs_export int cs_allreduce(struct cs_group *g, const void *send, void *recv,
			   size_t count, enum cs_dtype dtype, enum cs_redop op,
			   cs_req_t *req)
{
	return post(g, CS_IPC_OP_ALLREDUCE, send, recv, count, dtype, op, 0,
		    req);
}

cs_export int cs_reduce_scatter(struct cs_group *g, const void *send,
				void *recv, size_t count, enum cs_dtype dtype,
				enum cs_redop op, cs_req_t *req)
{
	return post(g, CS_IPC_OP_REDUCE_SCATTER, send, recv, count, dtype, op,
		    0, req);
}

cs_export int cs_all_gather(struct cs_group *g, const void *send, void *recv,
			    size_t count, enum cs_dtype dtype, cs_req_t *req)
{
	return post(g, CS_IPC_OP_ALL_GATHER, send, recv, count, dtype, 0, 0,
		    req);
}

cs_export int cs_broadcast(struct cs_group *g, void *buf, size_t count,
			   enum cs_dtype dtype, int root, cs_req_t *req)
{
	return post(g, CS_IPC_OP_BROADCAST, NULL, buf, count, dtype, 0, root,
		    req);
}

cs_export int cs_alltoall(struct cs_group *g, const void *send, void *recv,
			  size_t count, enum cs_dtype dtype, cs_req_t *req)
{
	return post(g, CS_IPC_OP_ALLTOALL, send, recv, count, dtype, 0, 0, req);
}

/*
 * @g's count tables for @n ranks (struct cs_group.vtab), allocated at its
 * first cs_alltoallv() and again when an elastic group grew.
 */
static int a2av_tables(struct cs_group *g, uint32_t n)
{
	struct cs_client *c = g->c;
	struct cs_buf *b;
	int ret;

	if (g->vtab && g->vtab_n >= n)
		return 0;
	if (g->vtab) {
		if (g->pending) {
			pthread_mutex_lock(&c->lock);
			set_err(c,
				"rank %d all-to-all-v on group '%s': the group "
				"grew to %u ranks; finish its pending requests "
				"first",
				g->rank, g->name, n);
			pthread_mutex_unlock(&c->lock);
			return -EAGAIN;
		}
		cs_buf_free(g->vtab);
		g->vtab = NULL;
	}
	ret = cs_buf_alloc(c, CS_IPC_RING_SLOTS * CS_IPC_A2AV_BYTES(n), &b);
	if (ret)
		return ret;
	g->vtab = b;
	g->vtab_n = n;
	return 0;
}

cs_export int cs_alltoallv(struct cs_group *g, const void *send,
			   const size_t *sendcounts, const size_t *sdispls,
			   void *recv, const size_t *recvcounts,
			   const size_t *rdispls, enum cs_dtype dtype,
			   cs_req_t *req)
{
	struct cs_ipc_sqe d = { .op = CS_IPC_OP_ALLTOALLV,
				.dtype = (uint8_t)dtype };
	const char *which = NULL;
	struct cs_client *c;
	uint32_t n;
	int ret;

	if (!g || !req || !sendcounts || !sdispls || !recvcounts || !rdispls)
		return -EINVAL;
	c = g->c;
	if (g->size < 1) {
		pthread_mutex_lock(&c->lock);
		set_err(c,
			"all-to-all-v on group '%s': the group has no size "
			"yet (joined with rank -1): its first operation must "
			"be an allreduce or a barrier",
			g->name);
		pthread_mutex_unlock(&c->lock);
		return -EINVAL;
	}
	n = (uint32_t)g->size;
	ret = a2av_tables(g, n);
	if (ret)
		return ret;
	d.group = g->handle;
	pthread_mutex_lock(&c->lock);
	/* the buffers' start only: the sidecar checks every block against
	 * the segment, so that a bad one fails the operation on every rank
	 * (CS_IPC_BAD_*_RANGE here, CS_IPC_BAD_PEER there) */
	if (!send || locate_start(c, send, &d.send_seg, &d.send_off))
		which = "send";
	else if (!recv || locate_start(c, recv, &d.recv_seg, &d.recv_off))
		which = "recv";
	if (which) {
		set_err(c,
			"rank %d all-to-all-v on group '%s': %s buffer is not "
			"inside a cs_buf_alloc() buffer of this client",
			g->rank, g->name, which);
		pthread_mutex_unlock(&c->lock);
		return -EFAULT;
	}
	/* the table of the slot this request takes, unless no slot is free
	 * (post_locked() refuses it then: -EAGAIN) */
	if (reserve_locked(c, 1)) {
		uint64_t off = (c->next_id % CS_IPC_RING_SLOTS) *
			       CS_IPC_A2AV_BYTES(g->vtab_n);
		uint64_t *t = (uint64_t *)((uint8_t *)g->vtab->mem + off);

		for (uint32_t j = 0; j < n; j++) {
			t[j] = sendcounts[j];
			t[n + j] = sdispls[j];
			t[2 * n + j] = recvcounts[j];
			t[3 * n + j] = rdispls[j];
		}
		d.reserved0 = g->vtab->seg;
		d.reserved1 = off;
	}
	ret = post_locked(c, g, &d, req);
	if (ret == -ENOTCONN)
		set_err(c, "rank %d all-to-all-v on group '%s': sidecar gone",
			g->rank, g->name);
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int cs__comp_wrap(struct cs_client *c, cs_req_t sub,
		  int (*fin)(void *arg, int status, char *err, size_t len),
		  void *arg, cs_req_t *req)
{
	struct comp *cp = calloc(1, sizeof(*cp));

	if (!cp)
		return -ENOMEM;
	cp->sub = malloc(sizeof(*cp->sub));
	if (!cp->sub) {
		free(cp);
		return -ENOMEM;
	}
	cp->sub[0] = sub;
	cp->n = 1;
	cp->fin = fin;
	cp->fin_arg = arg;
	pthread_mutex_lock(&c->lock);
	cp->id = CS_COMP_BIT | c->next_comp++;
	cp->next = c->comps;
	c->comps = cp;
	*req = cp->id;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

/* The next stage of a cs__comp_stages() request. Lock held. */
static int stages_step(struct cs_client *c, struct comp *k)
{
	int ret = k->stage(k->fin_arg, &k->sub[0]);

	(void)c;
	if (ret > 0)
		k->n = 1;
	return ret;
}

int cs__comp_stages(struct cs_client *c, int (*next)(void *arg, cs_req_t *sub),
		    int (*fin)(void *arg, int status, char *err, size_t len),
		    void *arg, cs_req_t *req)
{
	struct comp *cp = calloc(1, sizeof(*cp));
	int ret;

	if (!cp)
		return -ENOMEM;
	cp->sub = calloc(1, sizeof(*cp->sub));
	if (!cp->sub) {
		free(cp);
		return -ENOMEM;
	}
	cp->cap = 1;
	cp->stage = next;
	cp->step = stages_step;
	cp->fin = fin;
	cp->fin_arg = arg;
	pthread_mutex_lock(&c->lock);
	ret = next(arg, &cp->sub[0]);
	if (ret <= 0) {
		pthread_mutex_unlock(&c->lock);
		free(cp->sub);
		free(cp);
		return ret ? ret : -EINVAL;
	}
	cp->n = 1;
	cp->id = CS_COMP_BIT | c->next_comp++;
	cp->next = c->comps;
	c->comps = cp;
	*req = cp->id;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

static int alltoallv_dyn_locked(struct cs_group *g, const void *send,
				uint64_t *table, void *recv, size_t room,
				enum cs_dtype dtype, uint32_t root,
				cs_req_t *req)
{
	struct cs_ipc_sqe d = { .op = CS_IPC_OP_ALLTOALLV_DYN,
				.dtype = (uint8_t)dtype,
				.count = room,
				.root = root };
	struct cs_client *c = g->c;
	uint32_t seg;
	uint64_t off;

	d.group = g->handle;
	if (locate_start(c, send, &d.send_seg, &d.send_off) ||
	    locate_start(c, recv, &d.recv_seg, &d.recv_off) ||
	    locate_start(c, table, &seg, &off)) {
		set_err(c,
			"rank %d all-to-all-v (counts sent along) on group "
			"'%s': a buffer is not inside a cs_buf_alloc() buffer",
			g->rank, g->name);
		return -EFAULT;
	}
	d.reserved0 = seg;
	d.reserved1 = off;
	return post_locked(c, g, &d, req);
}

int cs__alltoallv_dyn_locked(struct cs_group *g, const void *send,
			     uint64_t *table, void *recv, size_t room,
			     enum cs_dtype dtype, uint32_t root, cs_req_t *req)
{
	return alltoallv_dyn_locked(g, send, table, recv, room, dtype, root,
				    req);
}

int cs__alltoallv_dyn(struct cs_group *g, const void *send, uint64_t *table,
		      void *recv, size_t room, enum cs_dtype dtype,
		      uint32_t root, cs_req_t *req)
{
	struct cs_client *c = g->c;
	int ret;

	pthread_mutex_lock(&c->lock);
	ret = alltoallv_dyn_locked(g, send, table, recv, room, dtype, root,
				   req);
	pthread_mutex_unlock(&c->lock);
	return ret;
}

cs_export int cs_barrier(struct cs_group *g, cs_req_t *req)
{
	return post(g, CS_IPC_OP_BARRIER, NULL, NULL, 0, CS_F32, 0, 0, req);
}

/* ---- rooted collectives (cs_reduce, cs_gather, cs_scatter) ------------ */

/* Tags of the library's own point-to-point messages (users': below
 * CS_TAG_RESERVED). */
#define TAG_GATHER (CS_TAG_RESERVED + 1)
#define TAG_SCATTER (CS_TAG_RESERVED + 2)
#define TAG_REDUCE (CS_TAG_RESERVED + 3)

/* cs_reduce() of at most this many bytes goes as an allreduce (see
 * cs_reduce() in collstack.h): 4 nodes x 2 trainers, af_packet, loaded
 * machine, 6 December, two runs each (ms, two stages / allreduce): 64
 * KiB 3.37, 1.18 / 1.15, 1.18; 128 KiB 1.79, 1.66 / 1.83, 1.83; 256 KiB
 * 2.79, 2.65 / 3.26, 3.09 (docs/p2p.md). */
#define CS_REDUCE_ALLREDUCE_MAX (64u << 10)

/* Room for @len bytes no one reads (the group's, grown on demand). */
static void *scratch(struct cs_group *g, size_t len)
{
	struct cs_buf *b;

	if (g->nscratch && g->scratch_len >= len)
		return cs_buf_ptr(g->scratch[g->nscratch - 1]);
	if (g->nscratch == sizeof(g->scratch) / sizeof(g->scratch[0]))
		return NULL;
	len = len < 2 * g->scratch_len ? 2 * g->scratch_len : len;
	if (cs_buf_alloc(g->c, len, &b))
		return NULL;
	g->scratch[g->nscratch++] = b;
	g->scratch_len = len;
	return cs_buf_ptr(b);
}

static int rooted_check(struct cs_group *g, const char *what,
			enum cs_dtype dtype, int root, cs_req_t *req)
{
	if (!g || !req)
		return -EINVAL;
	if (!cs_dtype_size(dtype) || root < 0 || root >= g->size) {
		pthread_mutex_lock(&g->c->lock);
		set_err(g->c, "rank %d %s on group '%s': %s", g->rank, what,
			g->name,
			!cs_dtype_size(dtype) ? "unknown element type"
					      : "root rank out of range");
		pthread_mutex_unlock(&g->c->lock);
		return -EINVAL;
	}
	return 0;
}

/* cs_reduce() as an allreduce whose result only @root keeps: small
 * reductions, groups on one node, and the groups a reduce-scatter and a
 * gather cannot carry. */
static int reduce_by_allreduce(struct cs_group *g, const void *send, void *recv,
			       size_t count, enum cs_dtype dtype,
			       enum cs_redop op, int root, cs_req_t *req)
{
	void *to = recv;

	if (g->rank != root) {
		to = scratch(g, count * cs_dtype_size(dtype));
		if (!to) {
			pthread_mutex_lock(&g->c->lock);
			set_err(g->c,
				"rank %d reduce on group '%s': no memory "
				"for the discarded result",
				g->rank, g->name);
			pthread_mutex_unlock(&g->c->lock);
			return -ENOMEM;
		}
	}
	return cs_allreduce(g, send, to, count, dtype, op, req);
}

/*
 * Can cs_reduce() of @count elements of @esz bytes go as a reduce-scatter
 * and a gather? Only from what every rank of a group laid out as
 * cs_send() needs it knows alike (its size, this call), and its own place:
 * node k holds ranks k x L .. k x L + L - 1 (a rank of another layout
 * takes the allreduce; its send to the root would be refused).
 */
static bool reduce_split(const struct cs_group *g, size_t count, size_t esz)
{
	int L = g->local_size;
	bool forced = g->c->reduce_how == 2;

	if (g->c->reduce_how == 1 || g->size < 2 || g->elastic || g->subset ||
	    count < (size_t)g->size ||
	    (!forced && count * esz <= CS_REDUCE_ALLREDUCE_MAX))
		return false;
	/* one node: the allreduce moves nothing over the network and
	 * reduces in shared memory, where point to point copies each block
	 * through a message flow (much slower: docs/p2p.md) */
	if (g->size == L)
		return forced; /* any numbering */
	return L > 0 && g->size % L == 0 && g->rank % L == g->local_rank &&
	       g->rank / L == (int)g->c->node;
}

/* A room of @len bytes for a non-root rank's block (the group's pool). */
static struct rd_room *room_get(struct cs_group *g, size_t len)
{
	struct cs_client *c = g->c;
	struct rd_room *m, *small = NULL;

	pthread_mutex_lock(&c->lock);
	m = g->rd_free;
	if (m)
		g->rd_free = m->next;
	pthread_mutex_unlock(&c->lock);
	if (m && m->b->len >= len)
		return m;
	small = m; /* too small: make a new one of the size asked now */
	m = calloc(1, sizeof(*m));
	if (m && cs_buf_alloc(c, len, &m->b)) {
		free(m);
		m = NULL;
	}
	if (small) {
		cs_buf_free(small->b);
		free(small);
	}
	return m;
}

/* The state of one cs_reduce() carried in two stages (struct comp.own). */
struct rd_op {
	struct cs_group *g;
	uint8_t *recv; /* the root's @recv */
	struct rd_room *room; /* a non-root rank's block (and tail) */
	size_t cnt; /* elements of each rank's block */
	uint32_t root;
	uint8_t dtype, redop;
	bool gathered; /* stage 2 posted */
	size_t count;
};

/* A failure names the reduce, then the part that failed. */
static int rd_fin(void *arg, int status, char *err, size_t len)
{
	struct rd_op *o = arg;
	char part[256];

	if (!status)
		return 0;
	snprintf(part, sizeof(part), "%s", err);
	snprintf(err, len, "rank %d reduce of %zu x %s %s to rank %u (%s): %s",
		 o->g->rank, o->count, cs_dtype_name((enum cs_dtype)o->dtype),
		 cs_redop_name((enum cs_redop)o->redop), o->root,
		 o->gathered ? "its gather" : "its reduce-scatter", part);
	return status;
}

/* Stage 2, once the reduce-scatter (and the tail's allreduce) finished
 * well: the blocks go to the root. Lock held. */
static int rd_step(struct cs_client *c, struct comp *k)
{
	struct rd_op *o = k->own;
	struct cs_group *g = o->g;
	size_t len = o->cnt * cs_dtype_size((enum cs_dtype)o->dtype);
	uint32_t n = (uint32_t)g->size, m = 0;
	struct cs_ipc_sqe d = { .group = g->handle,
				.dtype = o->dtype,
				.count = o->cnt,
				.reserved0 = TAG_REDUCE };
	int ret = 0;

	if (o->gathered)
		return 0;
	o->gathered = true;
	if ((uint32_t)g->rank != o->root) {
		d.op = CS_IPC_OP_SEND;
		d.root = o->root;
		ret = post_bufs_locked(g, &d, o->room->b->mem, len, NULL, 0,
				       &k->sub[0]);
		if (ret)
			return ret;
		k->n = 1;
		return 1;
	}
	if (n > 1 && !reserve_locked(c, n - 1)) {
		set_err(c,
			"rank %d reduce on group '%s': its gather needs "
			"%u requests, fewer slots free of %u (test or "
			"wait for the others first); the other ranks' "
			"sends end at coll.deadline",
			g->rank, g->name, n - 1, CS_IPC_RING_SLOTS);
		return -EAGAIN;
	}
	d.op = CS_IPC_OP_RECV;
	for (uint32_t j = 0; j < n; j++) {
		if (j == o->root)
			continue;
		d.root = j;
		ret = post_bufs_locked(g, &d, NULL, 0, o->recv + j * len, len,
				       &k->sub[m]);
		if (ret)
			break;
		m++;
	}
	k->n = m;
	if (ret && !m)
		return ret;
	if (ret) { /* the sidecar is gone: the posted parts end so */
		k->status = ret;
		snprintf(k->err, sizeof(k->err), "%s", c->err);
	}
	return 1;
}

/* @m (may be NULL) goes back to @g's pool. Lock held. */
static void room_put(struct cs_group *g, struct rd_room *m)
{
	if (m) {
		m->next = g->rd_free;
		g->rd_free = m;
	}
}

/* The room goes back to the group's pool. Lock held. */
static void rd_done(struct cs_client *c, struct comp *k)
{
	struct rd_op *o = k->own;

	(void)c;
	room_put(o->g, o->room);
}

cs_export int cs_reduce(struct cs_group *g, const void *send, void *recv,
			size_t count, enum cs_dtype dtype, enum cs_redop op,
			int root, cs_req_t *req)
{
	int ret = rooted_check(g, "reduce", dtype, root, req);
	size_t esz, n, cnt, tail, len;
	struct cs_client *c;
	struct rd_op *o;
	struct comp *cp;
	uint8_t *blk;

	if (ret)
		return ret;
	esz = cs_dtype_size(dtype);
	if (g->rank == root && !recv && count) {
		pthread_mutex_lock(&g->c->lock);
		set_err(g->c,
			"rank %d reduce on group '%s': the root's recv buffer "
			"is NULL",
			g->rank, g->name);
		pthread_mutex_unlock(&g->c->lock);
		return -EFAULT;
	}
	if (!reduce_split(g, count, esz))
		return reduce_by_allreduce(g, send, recv, count, dtype, op,
					   root, req);
	c = g->c;
	n = (size_t)g->size;
	cnt = count / n; /* the reduce-scatter's elements per rank */
	tail = count - cnt * n; /* the rest (< n): an allreduce */
	len = cnt * esz;
	o = calloc(1, sizeof(*o));
	cp = calloc(1, sizeof(*cp));
	if (!o || !cp || !(cp->sub = calloc(n + 1, sizeof(*cp->sub)))) {
		free(o);
		free(cp);
		return -ENOMEM;
	}
	cp->cap = (uint32_t)n + 1;
	*o = (struct rd_op){ .g = g,
			     .recv = recv,
			     .cnt = cnt,
			     .root = (uint32_t)root,
			     .dtype = (uint8_t)dtype,
			     .redop = (uint8_t)op,
			     .count = count };
	if (g->rank != root) {
		o->room = room_get(g, (cnt + tail) * esz);
		if (!o->room) {
			pthread_mutex_lock(&c->lock);
			set_err(c,
				"rank %d reduce on group '%s': no memory for "
				"its block of %zu bytes",
				g->rank, g->name, (cnt + tail) * esz);
			pthread_mutex_unlock(&c->lock);
			ret = -ENOMEM;
			goto out_free;
		}
	}
	pthread_mutex_lock(&c->lock);
	if (!reserve_locked(c, tail ? 2 : 1)) {
		set_err(c, "reduce: %u requests unfinished; test or wait first",
			CS_IPC_RING_SLOTS);
		ret = -EAGAIN;
		goto out_unlock;
	}
	blk = o->room ? o->room->b->mem : (uint8_t *)recv + (size_t)root * len;
	{
		struct cs_ipc_sqe d = { .group = g->handle,
					.op = CS_IPC_OP_REDUCE_SCATTER,
					.dtype = (uint8_t)dtype,
					.redop = (uint8_t)op,
					.count = cnt };

		ret = post_bufs_locked(g, &d, send, n * len, blk, len,
				       &cp->sub[0]);
		if (ret)
			goto out_unlock;
		cp->n = 1;
	}
	if (tail) {
		struct cs_ipc_sqe d = { .group = g->handle,
					.op = CS_IPC_OP_ALLREDUCE,
					.dtype = (uint8_t)dtype,
					.redop = (uint8_t)op,
					.count = tail };
		uint8_t *to = o->room ? o->room->b->mem + len
				      : (uint8_t *)recv + n * len;

		/* (the slot is free: only the sidecar gone fails it, and
		 * then what was posted no longer matters) */
		ret = post_bufs_locked(g, &d, (const uint8_t *)send + n * len,
				       tail * esz, to, tail * esz, &cp->sub[1]);
		if (ret)
			goto out_unlock;
		cp->n = 2;
	}
	cp->step = rd_step;
	cp->done = rd_done;
	cp->fin = rd_fin;
	cp->fin_arg = o;
	cp->own = o;
	cp->id = CS_COMP_BIT | c->next_comp++;
	cp->next = c->comps;
	c->comps = cp;
	*req = cp->id;
	pthread_mutex_unlock(&c->lock);
	return 0;

out_unlock:
	room_put(g, o->room);
	pthread_mutex_unlock(&c->lock);
out_free:
	free(cp->sub);
	free(cp);
	free(o);
	return ret;
}

/*
 * The root's side of a gather or scatter: one receive (@gather) or send
 * per other rank, of block j of @buf, as one composite request; its own
 * block is copied now. All parts are posted under the lock, so either all
 * are or none.
 */
static int rooted_root(struct cs_group *g, bool gather, const void *send,
		       void *recv, size_t count, enum cs_dtype dtype,
		       cs_req_t *req)
{
	struct cs_client *c = g->c;
	size_t len = count * cs_dtype_size(dtype);
	uint32_t n = (uint32_t)g->size, k = 0;
	struct comp *cp = calloc(1, sizeof(*cp));
	int ret = 0;

	if (!cp || !(cp->sub = calloc(n, sizeof(*cp->sub)))) {
		free(cp);
		return -ENOMEM;
	}
	pthread_mutex_lock(&c->lock);
	{ /* every block inside a buffer of the client, before any post */
		uint32_t seg;
		uint64_t off;

		if (len && n > 1 &&
		    locate(c, gather ? recv : send, (size_t)n * len, &seg,
			   &off)) {
			set_err(c,
				"rank %d %s on group '%s': %s buffer (%u "
				"blocks) is not inside a cs_buf_alloc() "
				"buffer of this client",
				g->rank, gather ? "gather" : "scatter", g->name,
				gather ? "recv" : "send", n);
			ret = -EFAULT;
			goto out;
		}
	}
	if (n > 1 && !reserve_locked(c, n - 1)) {
		set_err(c,
			"rank %d %s on group '%s': %u requests needed, "
			"fewer slots free of %u; test or wait first",
			g->rank, gather ? "gather" : "scatter", g->name, n - 1,
			CS_IPC_RING_SLOTS);
		ret = -EAGAIN;
		goto out;
	}
	for (uint32_t j = 0; j < n; j++) {
		uint8_t *blk = (uint8_t *)(gather ? recv : (void *)send) +
			       (size_t)j * len;
		struct cs_ipc_sqe d = {
			.group = g->handle,
			.op = gather ? CS_IPC_OP_RECV : CS_IPC_OP_SEND,
			.dtype = (uint8_t)dtype,
			.count = count,
			.root = j,
			.reserved0 = gather ? TAG_GATHER : TAG_SCATTER
		};

		if ((int)j == g->rank) {
			if (len)
				memmove(gather ? blk : recv,
					gather ? send : blk, len);
			continue;
		}
		ret = gather ? post_bufs_locked(g, &d, NULL, 0, blk, len,
						&cp->sub[k])
			     : post_bufs_locked(g, &d, blk, len, NULL, 0,
						&cp->sub[k]);
		if (ret)
			goto out;
		k++;
	}
	cp->n = k;
	cp->id = CS_COMP_BIT | c->next_comp++;
	cp->next = c->comps;
	c->comps = cp;
	*req = cp->id;
out:
	/* (slots and buffers checked: a post fails only with the sidecar
	 * gone, when what was posted no longer matters) */
	pthread_mutex_unlock(&c->lock);
	if (ret) {
		free(cp->sub);
		free(cp);
	}
	return ret;
}

cs_export int cs_gather(struct cs_group *g, const void *send, void *recv,
			size_t count, enum cs_dtype dtype, int root,
			cs_req_t *req)
{
	int ret = rooted_check(g, "gather", dtype, root, req);
	struct cs_ipc_sqe d;

	if (ret)
		return ret;
	if (g->rank == root)
		return rooted_root(g, true, send, recv, count, dtype, req);
	d = (struct cs_ipc_sqe){ .group = g->handle,
				 .op = CS_IPC_OP_SEND,
				 .dtype = (uint8_t)dtype,
				 .count = count,
				 .root = (uint32_t)root,
				 .reserved0 = TAG_GATHER };
	return cs__client_post_bufs(g, &d, send, count * cs_dtype_size(dtype),
				    NULL, 0, req);
}

cs_export int cs_scatter(struct cs_group *g, const void *send, void *recv,
			 size_t count, enum cs_dtype dtype, int root,
			 cs_req_t *req)
{
	int ret = rooted_check(g, "scatter", dtype, root, req);
	struct cs_ipc_sqe d;

	if (ret)
		return ret;
	if (g->rank == root)
		return rooted_root(g, false, send, recv, count, dtype, req);
	d = (struct cs_ipc_sqe){ .group = g->handle,
				 .op = CS_IPC_OP_RECV,
				 .dtype = (uint8_t)dtype,
				 .count = count,
				 .root = (uint32_t)root,
				 .reserved0 = TAG_SCATTER };
	return cs__client_post_bufs(g, &d, NULL, 0, recv,
				    count * cs_dtype_size(dtype), req);
}

/* Move completions from the ring into the request table. Lock held. */
static void reap(struct cs_client *c)
{
	struct cs_ipc_cqe e[CS_CLIENT_REAP_BURST];
	unsigned n;

	do {
		n = cs_ring_dequeue_burst(&c->cq, e, CS_CLIENT_REAP_BURST);
		for (unsigned i = 0; i < n; i++) {
			struct req *q =
				&c->reqs[e[i].user_id % CS_IPC_RING_SLOTS];

			if (q->state != REQ_POSTED || q->id != e[i].user_id)
				continue;
			q->state = REQ_DONE;
			q->status = e[i].status;
			q->detail = e[i].detail;
			q->peer = e[i].peer;
			q->epoch = e[i].epoch;
			/* an elastic group re-formed: its new size, rank */
			if (q->g && q->g->elastic && e[i].size) {
				q->g->size = (int)e[i].size;
				q->g->rank = e[i].rank;
			}
		}
	} while (n == CS_CLIENT_REAP_BURST);
}

/* A send or receive's error (svc_p2p.h says where each comes from). */
static void describe_p2p(struct cs_client *c, const struct req *q,
			 const char *what)
{
	if (q->status == CS_ERR_BAD_DESC && q->detail == CS_IPC_BAD_MISMATCH)
		set_err(c,
			"%s: refused: the matching %s of rank %d is %u bytes, "
			"this one %llu (both must be the same size)",
			what, q->op == CS_IPC_OP_SEND ? "recv" : "send",
			(int)q->peer, q->epoch,
			(unsigned long long)q->count *
				cs_dtype_size((enum cs_dtype)q->dtype));
	else if (q->status == CS_ERR_BAD_DESC)
		set_err(c, "%s: %s", what,
			q->detail < CS_IPC_BAD_COUNT_ ? bad_names[q->detail]
						      : "bad descriptor");
	else if (q->status == CS_ERR_PEER_LOST &&
		 q->detail == CS_IPC_LOST_RANK && q->peer >= 0)
		set_err(c,
			"%s: rank %d is gone (its trainer left or died "
			"during the transfer)",
			what, (int)q->peer);
	else if (q->status == CS_ERR_PEER_LOST && q->detail == CS_IPC_LOST_NODE)
		set_err(c,
			"%s: node %d was lost (its sidecar left the view, "
			"epoch %u); the group's ranks there are gone",
			what, (int)q->peer, q->epoch);
	else if (q->status == CS_ERR_PEER_LOST)
		set_err(c,
			"%s: the sidecars' point-to-point flow ended (a node "
			"lost or a new view of the nodes)",
			what);
	else if (q->status == CS_ERR_TIMEOUT)
		set_err(c,
			"%s: no matching %s within the sidecar's "
			"coll.deadline (or the other side gave up)",
			what, q->op == CS_IPC_OP_SEND ? "recv" : "send");
	else if (q->status == -ENOBUFS)
		set_err(c,
			"%s: refused: the receiving sidecar holds too many "
			"sends no receive was posted for",
			what);
	else
		set_err(c, "%s: %s", what, cs_strerror(q->status));
}

static void describe_failure(struct cs_client *c, const struct req *q)
{
	char what[160];
	const char *gname = q->g ? q->g->name : "?";
	int rank = q->g ? q->g->rank : -1;

	if (is_p2p_op(q->op)) {
		snprintf(what, sizeof(what),
			 "rank %d %s #%llu on group '%s' (%llu x %s %s rank "
			 "%u, tag %u)",
			 rank, op_name(q->op), (unsigned long long)q->id, gname,
			 (unsigned long long)q->count,
			 cs_dtype_name((enum cs_dtype)q->dtype),
			 q->op == CS_IPC_OP_SEND ? "to" : "from", q->root,
			 q->tag);
		describe_p2p(c, q, what);
		return;
	}
	if (q->op == CS_IPC_OP_ALLTOALLV || q->op == CS_IPC_OP_ALLTOALLV_DYN)
		snprintf(what, sizeof(what),
			 "rank %d %s #%llu on group '%s' (%s, counts per "
			 "rank)",
			 rank, op_name(q->op), (unsigned long long)q->id, gname,
			 cs_dtype_name((enum cs_dtype)q->dtype));
	else if (q->op == CS_IPC_OP_BARRIER || q->op >= CS_IPC_OP_COUNT)
		snprintf(what, sizeof(what),
			 "rank %d %s #%llu on group "
			 "'%s'",
			 rank, op_name(q->op), (unsigned long long)q->id,
			 gname);
	else
		snprintf(what, sizeof(what),
			 "rank %d %s #%llu on group "
			 "'%s' (%llu x %s%s%s)",
			 rank, op_name(q->op), (unsigned long long)q->id, gname,
			 (unsigned long long)q->count,
			 cs_dtype_name((enum cs_dtype)q->dtype),
			 q->op == CS_IPC_OP_ALLREDUCE ||
					 q->op == CS_IPC_OP_REDUCE_SCATTER
				 ? " "
				 : "",
			 q->op == CS_IPC_OP_ALLREDUCE ||
					 q->op == CS_IPC_OP_REDUCE_SCATTER
				 ? cs_redop_name((enum cs_redop)q->redop)
				 : "");
	if (q->status == CS_ERR_BAD_DESC && q->detail == CS_IPC_BAD_GROUP_SIZE)
		set_err(c,
			"%s: refused: node %d joined the group with size %u "
			"(the nodes disagree on its membership); the group is "
			"failed: form it again with one size on every node",
			what, (int)q->peer, q->epoch);
	else if (q->status == CS_ERR_BAD_DESC &&
		 q->detail == CS_IPC_BAD_GROUP_RANK)
		set_err(c,
			"%s: refused: node %d claims rank %u of the group, "
			"which another node claims too (the nodes disagree on "
			"its membership); the group is failed",
			what, (int)q->peer, q->epoch);
	else if (q->status == CS_ERR_BAD_DESC &&
		 q->detail == CS_IPC_BAD_GROUP_MISSING)
		set_err(c,
			"%s: refused: rank %u of the group is on no node (the "
			"nodes disagree on its membership); the group is "
			"failed",
			what, q->epoch);
	else if (q->status == CS_ERR_BAD_DESC &&
		 q->detail == CS_IPC_BAD_A2AV_COUNTS)
		set_err(c,
			"%s: refused on every rank, nothing sent: the counts "
			"do not add up: rank %d's sendcounts[%u] differs from "
			"rank %u's recvcounts[%d]",
			what, (int)q->peer, q->epoch, q->epoch, (int)q->peer);
	else if (q->status == CS_ERR_BAD_DESC && q->detail == CS_IPC_BAD_PS_KEY)
		set_err(c, "%s: key [%u] is not below the table's key_max",
			what, q->epoch);
	else if (q->status == CS_ERR_BAD_DESC &&
		 q->detail == CS_IPC_BAD_DYN_TAG)
		set_err(c,
			"%s: refused on every rank, nothing sent: rank %d "
			"posted another kind of exchange than rank 0 (an MoE "
			"layer with CS_MOE_LAYER_NODE_SUM or _NODE_ROWS on "
			"some ranks only?)",
			what, (int)q->peer);
	else if (q->status == CS_ERR_BAD_DESC && q->detail == CS_IPC_BAD_PIPE)
		set_err(c,
			"%s: refused on every node, nothing sent: node %d cuts "
			"it into slices at ipc.dev_pipe=%u bytes (0: not at "
			"all), this sidecar otherwise; set one ipc.dev_pipe on "
			"every sidecar",
			what, (int)q->peer, q->epoch);
	else if (q->status == CS_ERR_BAD_DESC && q->peer >= 0)
		set_err(c, "%s: %s: rank %d", what,
			q->detail < CS_IPC_BAD_COUNT_ ? bad_names[q->detail]
						      : "bad descriptor",
			(int)q->peer);
	else if (q->status == CS_ERR_BAD_DESC)
		set_err(c, "%s: %s", what,
			q->detail < CS_IPC_BAD_COUNT_ ? bad_names[q->detail]
						      : "bad descriptor");
	else if (is_ps_op(q->op) && q->status == CS_ERR_PEER_LOST &&
		 q->detail == CS_IPC_LOST_NODE && q->peer >= 0)
		set_err(c,
			"%s: node %d was lost (its sidecar left the view): its "
			"shard is gone and the table's flow ended here; create "
			"the table again and restore it from its last "
			"checkpoint",
			what, (int)q->peer);
	else if (is_ps_op(q->op) && q->status == CS_ERR_PEER_LOST &&
		 q->peer < 0)
		set_err(c,
			"%s: the table's flow ended here (a new view of the "
			"nodes): create the table again",
			what);
	else if (is_ps_op(q->op) && q->status == CS_ERR_TIMEOUT)
		set_err(c,
			"%s: no answer within the sidecar's coll.deadline (a "
			"sync pull waits for every worker's pushes of the "
			"versions below its clock)",
			what);
	else if (q->status == CS_ERR_PEER_LOST &&
		 q->detail == CS_IPC_LOST_NODE && q->g && q->g->elastic)
		set_err(c,
			"%s, op %llu of the group: node %d was lost (its "
			"sidecar left the view, epoch %u); the group is "
			"elastic: its next operation re-forms it on the nodes "
			"left",
			what, (unsigned long long)q->seq, (int)q->peer,
			q->epoch);
	else if (q->status == CS_ERR_EPOCH && q->detail == CS_IPC_EPOCH_RESIZED)
		set_err(c,
			"%s, op %llu of the group: the group was re-formed "
			"before it (now size %d, this trainer rank %d): post it "
			"again for the new size",
			what, (unsigned long long)q->seq,
			q->g ? q->g->size : -1, q->g ? q->g->rank : -1);
	else if (q->status == CS_ERR_PEER_LOST && q->detail == CS_IPC_LOST_NODE)
		set_err(c,
			"%s, op %llu of the group: node %d was lost (its "
			"sidecar left the view, epoch %u); the group's ranks "
			"there are gone: form a new group without them",
			what, (unsigned long long)q->seq, (int)q->peer,
			q->epoch);
	else if (q->status == CS_ERR_PEER_LOST &&
		 q->detail == CS_IPC_LOST_SESSION)
		set_err(c,
			"%s, op %llu of the group: node %d stopped answering "
			"(its sidecar dropped the operation, or the node is "
			"gone)",
			what, (unsigned long long)q->seq, (int)q->peer);
	else if (q->status == CS_ERR_PEER_LOST)
		set_err(c, "%s, op %llu of the group: rank %d was lost", what,
			(unsigned long long)q->seq, (int)q->peer);
	else if (q->status == CS_ERR_TIMEOUT &&
		 q->detail == CS_IPC_TIMEOUT_UNPOSTED && q->peer >= 0)
		set_err(c,
			"%s, op %llu of the group: timed out: rank %d (local "
			"rank %u on this node) did not post it within "
			"ipc.match_deadline; the group is failed: form a new "
			"one",
			what, (unsigned long long)q->seq, (int)q->peer,
			q->epoch);
	else if (q->status == CS_ERR_TIMEOUT &&
		 q->detail == CS_IPC_TIMEOUT_UNPOSTED)
		set_err(c,
			"%s, op %llu of the group: timed out: local rank %u "
			"on this node never joined the group (within "
			"ipc.match_deadline); the group is failed: form a new "
			"one",
			what, (unsigned long long)q->seq, q->epoch);
	else if (is_ps_op(q->op) && q->status == CS_ERR_CANCELLED &&
		 q->peer >= 0)
		set_err(c,
			"%s: node %d ended the table (no rank there holds it "
			"any more: destroyed, or its trainers are gone)",
			what, (int)q->peer);
	else if (is_ps_op(q->op) && q->peer >= 0)
		set_err(c, "%s: server node %d: %s", what, (int)q->peer,
			cs_strerror(q->status));
	else
		set_err(c, "%s: %s", what, cs_strerror(q->status));
	c->last_detail = q->detail;
	c->last_peer = q->peer;
	c->last_lost_node =
		q->status == CS_ERR_PEER_LOST && q->detail == CS_IPC_LOST_NODE
			? q->peer
			: -1;
}

static int test_locked(struct cs_client *c, cs_req_t req);

/* A composite request: done once every part is, with the first error. */
static int comp_test_locked(struct cs_client *c, cs_req_t req)
{
	struct comp **pp, *k;
	bool pending = false;
	int st;

	for (pp = &c->comps; (k = *pp) && k->id != req; pp = &k->next)
		;
	if (!k) {
		set_err(c, "request %llu: unknown or already finished",
			(unsigned long long)req);
		return -EINVAL;
	}
	for (uint32_t i = 0; i < k->n; i++) {
		if (!k->sub[i])
			continue;
		st = test_locked(c, k->sub[i]);
		if (st == -EINPROGRESS) {
			pending = true;
			continue;
		}
		if (st && !k->status) {
			k->status = st;
			snprintf(k->err, sizeof(k->err), "%s", c->err);
		}
		k->sub[i] = 0;
	}
	if (pending)
		return -EINPROGRESS;
	if (k->step && !k->status) {
		st = k->step(c, k);
		if (st > 0)
			return -EINPROGRESS;
		if (st < 0) {
			k->status = st;
			snprintf(k->err, sizeof(k->err), "%s", c->err);
		}
	}
	*pp = k->next;
	if (k->fin)
		k->status =
			k->fin(k->fin_arg, k->status, k->err, sizeof(k->err));
	if (k->done)
		k->done(c, k);
	st = k->status;
	if (st)
		snprintf(c->err, sizeof(c->err), "%s", k->err);
	free(k->sub);
	free(k->own);
	free(k);
	return st;
}

static int test_locked(struct cs_client *c, cs_req_t req)
{
	struct req *q = &c->reqs[req % CS_IPC_RING_SLOTS];
	int st;

	if (req & CS_COMP_BIT)
		return comp_test_locked(c, req);

	if (q->id != req || q->state == REQ_FREE) {
		set_err(c, "request %llu: unknown or already finished",
			(unsigned long long)req);
		return -EINVAL;
	}
	if (q->state == REQ_POSTED)
		reap(c);
	if (q->state == REQ_POSTED)
		return -EINPROGRESS;
	st = q->status;
	if (st)
		describe_failure(c, q);
	if (q->g)
		q->g->pending--;
	q->state = REQ_FREE;
	return st;
}

cs_export int cs_test(struct cs_client *c, cs_req_t req)
{
	int ret;

	pthread_mutex_lock(&c->lock);
	ret = test_locked(c, req);
	pthread_mutex_unlock(&c->lock);
	return ret;
}

cs_export int cs_event_fd(const struct cs_client *c)
{
	return c->efd;
}

cs_export int cs_event_arm(struct cs_client *c)
{
	uint64_t v;

	/* Drain old wake-ups, then arm, then look again (see kick_trainer). */
	while (read(c->efd, &v, sizeof(v)) > 0)
		;
	atomic_store_explicit(&c->ctrl->cq_armed, 1, memory_order_seq_cst);
	atomic_thread_fence(memory_order_seq_cst);
	return cs_ring_count(&c->cq) ? 1 : 0;
}

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

cs_export int cs_wait(struct cs_client *c, cs_req_t req, int64_t timeout_ns)
{
	int64_t t0 = mono_ns(), now;
	int64_t deadline = timeout_ns < 0 ? INT64_MAX : t0 + timeout_ns;
	unsigned spins = 0;
	int ret;

	for (;;) {
		pthread_mutex_lock(&c->lock);
		ret = test_locked(c, req);
		if (ret != -EINPROGRESS) {
			if (spins && mono_ns() - t0 > CS_CLIENT_QUICK_NS)
				c->slow_answers = CS_CLIENT_SLOW_MEMORY;
			else if (c->slow_answers)
				c->slow_answers--;
			pthread_mutex_unlock(&c->lock);
			return ret;
		}
		if (c->dead) {
			set_err(c, "request %llu: sidecar gone",
				(unsigned long long)req);
			pthread_mutex_unlock(&c->lock);
			return -ENOTCONN;
		}
		pthread_mutex_unlock(&c->lock);
		now = mono_ns();
		if (now >= deadline) {
			set_err(c, "request %llu: timed out",
				(unsigned long long)req);
			return CS_ERR_TIMEOUT;
		}
		if (++spins < c->spin_polls && now - t0 < c->spin_ns) {
			if ((spins > c->spin_free || c->slow_answers) &&
			    !(spins % c->spin_yield))
				sched_yield();
			continue;
		}
		if (cs_event_arm(c))
			continue;
		{
			struct pollfd p[2] = {
				{ .fd = c->efd, .events = POLLIN },
				{ .fd = c->fd, .events = POLLIN },
			};
			int64_t left = deadline - mono_ns();
			int ms = left > 100000000 ? 100
						  : (int)(left / 1000000) + 1;

			/* The socket only speaks when spoken to: readable
			 * or hung up here means the sidecar is gone. */
			if (poll(p, 2, ms) > 0 && p[1].revents) {
				pthread_mutex_lock(&c->lock);
				c->dead = true;
				pthread_mutex_unlock(&c->lock);
			}
		}
	}
}

/* ---- test hooks ------------------------------------------------------- */

unsigned cs__client_slow_answers(struct cs_client *c)
{
	unsigned n;

	pthread_mutex_lock(&c->lock);
	n = c->slow_answers;
	pthread_mutex_unlock(&c->lock);
	return n;
}

bool cs__client_answer_ready(struct cs_client *c)
{
	bool ready;

	pthread_mutex_lock(&c->lock);
	ready = cs_ring_count(&c->cq) > 0;
	pthread_mutex_unlock(&c->lock);
	return ready;
}

int cs__client_post_raw(struct cs_client *c, const struct cs_ipc_sqe *d,
			cs_req_t *req)
{
	struct cs_ipc_sqe copy = *d;
	struct cs_group *g = NULL;
	int ret;

	pthread_mutex_lock(&c->lock);
	for (struct cs_group *x = c->groups; x; x = x->next)
		if (x->handle == d->group)
			g = x;
	ret = post_locked(c, g, &copy, req);
	pthread_mutex_unlock(&c->lock);
	return ret;
}

/* ---- for ps_client.c (client_internal.h) ------------------------------ */

struct cs_client *cs__group_client(const struct cs_group *g)
{
	return g->c;
}

int cs__group_local_size(const struct cs_group *g)
{
	return g->local_size;
}

const char *cs__group_name(const struct cs_group *g)
{
	return g->name;
}

int cs__client_rpc(struct cs_client *c, struct cs_ipc_msg *m,
		   struct cs_ipc_msg *r)
{
	int ret;

	pthread_mutex_lock(&c->lock);
	ret = rpc(c, m, NULL, 0, r);
	pthread_mutex_unlock(&c->lock);
	return ret;
}

void cs__client_set_err(struct cs_client *c, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&c->lock);
	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&c->lock);
}

uint32_t cs__buf_seg(const struct cs_buf *b)
{
	return b->seg;
}

uint32_t cs__group_handle(const struct cs_group *g)
{
	return g->handle;
}

void cs__client_last_fail(const struct cs_client *c, unsigned *detail,
			  int *peer)
{
	*detail = c->last_detail;
	*peer = c->last_peer;
}

struct cs_ipc_ctrl *cs__client_ctrl(struct cs_client *c)
{
	return c->ctrl;
}

/* SPDX-License-Identifier: MIT */
/* Trainer IPC server: accept, map, poll submission rings, run local groups. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define CS_LOG_MODULE "ipc"
#include "client/shm_ring.h"
#include "collectives/reduce.h"
#include "internal/log.h"
#include "ipc_ps.h" /* parameter-server tables */
#include "ipc_p2p.h" /* point-to-point send and receive */
#include "ipc_server.h"
#include "observe/flight.h" /* observe/: flight recorder, trace */

#define IPC_MAX_FDS 4 /* fds accepted in one message */
#define IPC_MSGS_PER_POLL 16 /* control messages per trainer */
#define IPC_MAX_CTRL_BYTES (1u << 20) /* control segment size limit */
#define IPC_MAX_GROUP_SIZE (1u << 20)
/* Cross-node operations of one group started at once (ipc.group_inflight),
 * at most. */
#define IPC_MAX_GROUP_INFLIGHT 64u
/*
 * Instances of a group in its window: a trainer has at most
 * CS_IPC_RING_SLOTS operations taken and not completed, and an instance
 * may complete before the older ones only if it was started, i.e. lies
 * within ipc.group_inflight of the group's oldest unfinished one (whose
 * slot stays taken until then). So a trainer's operations of one group
 * span at most this many sequence numbers, and no two share a slot.
 */
#define IPC_WINDOW (CS_IPC_RING_SLOTS + IPC_MAX_GROUP_INFLIGHT)
/* Long reductions and copies run in pieces of IPC_PIECE bytes with the
 * backend's progress hook between them (cs_ipc_backend.progress). */
#define IPC_PIECE ((size_t)4 << 20)
/* ipc.dev_chunk and ipc.dev_depth, at most (and the chunk at least) */
#define IPC_DEV_CHUNK_MIN 4096u
#define IPC_DEV_CHUNK_MAX ((uint64_t)1 << 30)
#define IPC_DEV_DEPTH_MAX 256u
/* ipc.dev_pipe: 0 (off) or within these; an instance is cut into at most
 * IPC_PIPE_MAX_SLICES slices (larger ones if it must: the backend's ids
 * tell that many apart), and its copies in run at most IPC_PIPE_AHEAD
 * slices ahead of its network step */
#define IPC_DEV_PIPE_MIN ((uint64_t)64 << 10)
#define IPC_DEV_PIPE_MAX ((uint64_t)1 << 30)
#define IPC_PIPE_MAX_SLICES 2048u
#define IPC_PIPE_AHEAD 4u

const struct cs_cfg_entry cs_ipc_cfg_table[] = {
	{ "ipc.socket", CS_CFG_STR, offsetof(struct cs_ipc_cfg, socket_path),
	  "/run/collstack/collstack.sock", CS_CFG_NO_BOUNDS,
	  "Unix socket trainers connect to" },
	{ "ipc.max_trainers", CS_CFG_U32,
	  offsetof(struct cs_ipc_cfg, max_trainers), "64", 1, 4096,
	  "trainers connected at once" },
	{ "ipc.max_segments", CS_CFG_U32,
	  offsetof(struct cs_ipc_cfg, max_segments), "64", 1, 65536,
	  "shared buffers per trainer" },
	{ "ipc.max_groups", CS_CFG_U32, offsetof(struct cs_ipc_cfg, max_groups),
	  "64", 1, 65536, "groups per sidecar" },
	{ "ipc.max_trainer_groups", CS_CFG_U32,
	  offsetof(struct cs_ipc_cfg, max_trainer_groups), "16", 1, 65536,
	  "groups one trainer may be in at once (so one trainer cannot "
	  "take every group slot of the sidecar; at most ipc.max_groups)" },
	{ "ipc.max_op_bytes", CS_CFG_SIZE,
	  offsetof(struct cs_ipc_cfg, max_op_bytes), "16G", 1, 1e15,
	  "largest buffer one operation may name" },
	{ "ipc.max_segment_bytes", CS_CFG_SIZE,
	  offsetof(struct cs_ipc_cfg, max_segment_bytes), "64G", 4096, 1e15,
	  "largest shared buffer a trainer may register" },
	{ "ipc.sock_poll_interval", CS_CFG_NS,
	  offsetof(struct cs_ipc_cfg, sock_poll_interval), "1ms", 0, 1e9,
	  "how often the socket side (accept, messages, hang-ups) is polled" },
	{ "ipc.sq_burst", CS_CFG_U32, offsetof(struct cs_ipc_cfg, sq_burst),
	  "32", 1, CS_IPC_RING_SLOTS,
	  "descriptors taken from one trainer per poll" },
	{ "ipc.allowed_gid", CS_CFG_U64,
	  offsetof(struct cs_ipc_cfg, allowed_gid), "4294967295", 0,
	  4294967295.0,
	  "group id also allowed to connect (4294967295: none, only the "
	  "sidecar's uid)" },
	{ "ipc.match_deadline", CS_CFG_NS,
	  offsetof(struct cs_ipc_cfg, match_deadline), "120s", 0, 3.6e12,
	  "an operation some trainers of a group on this node posted fails "
	  "with CS_ERR_TIMEOUT, naming a local rank that did not post it, "
	  "when that rank has not posted it this long (0: never); the group "
	  "is then failed (as coll.deadline, its default)" },
	{ "ipc.hello_deadline", CS_CFG_NS,
	  offsetof(struct cs_ipc_cfg, hello_deadline), "5s", 1000000, 3.6e12,
	  "a connection that has not sent its hello this long after it was "
	  "accepted is closed (so connections that never say hello cannot "
	  "hold the trainer slots)" },
	{ "ipc.group_inflight", CS_CFG_U32,
	  offsetof(struct cs_ipc_cfg, group_inflight), "8", 1,
	  IPC_MAX_GROUP_INFLIGHT,
	  "cross-node operations of one group running at once (a DDP job's "
	  "gradient buckets overlap; each takes a staging buffer of the "
	  "group's pool of this many); they complete in any order, each to "
	  "its own request (1: one at a time, in posting order)" },
	{ "ipc.dev_chunk", CS_CFG_SIZE, offsetof(struct cs_ipc_cfg, dev_chunk),
	  "4M", IPC_DEV_CHUNK_MIN, (double)IPC_DEV_CHUNK_MAX,
	  "bytes per copy piece between a trainer's device range and its "
	  "pinned host shadow (4K to 1G)" },
	{ "ipc.dev_depth", CS_CFG_U32, offsetof(struct cs_ipc_cfg, dev_depth),
	  "8", 1, IPC_DEV_DEPTH_MAX,
	  "device <-> shadow copy pieces in flight at once in the sidecar, "
	  "over all operations (with asynchronous device copies)" },
	{ "ipc.dev_pipe", CS_CFG_SIZE, offsetof(struct cs_ipc_cfg, dev_pipe),
	  "0", 0, (double)IPC_DEV_PIPE_MAX,
	  "a cross-node allreduce or broadcast larger than this runs in "
	  "slices of this size, each slice's network step overlapped with "
	  "the next one's device copy in and the previous one's copy out "
	  "(sidecars with asynchronous device copies only; 0: never, else "
	  "64K to 1G; the same on every node: a group's nodes compare it, "
	  "and an operation they would cut differently is refused)" },
	{ "ipc.dev_pipe_any", CS_CFG_BOOL,
	  offsetof(struct cs_ipc_cfg, dev_pipe_any), "0", CS_CFG_NO_BOUNDS,
	  "cut operations at ipc.dev_pipe in a sidecar without device "
	  "copies too (host buffers: nothing to overlap; checks the cut "
	  "across nodes without a GPU; the same on every node)" },
	{ "ipc.dev_reduce", CS_CFG_BOOL,
	  offsetof(struct cs_ipc_cfg, dev_reduce), "0", CS_CFG_NO_BOUNDS,
	  "an allreduce (f32, f16, bf16) whose local rank 0 receives into "
	  "device memory: reduce the local ranks' contributions into it on "
	  "the device (their chunks copied from the pinned shadows into "
	  "device scratch, the kernel on the sidecar's stream) instead of on "
	  "the CPU (CUDA sidecars; 0: always on the CPU)" },
};
const size_t cs_ipc_cfg_table_len = CS_ARRAY_SIZE(cs_ipc_cfg_table);

struct seg {
	void *base; /* a device segment: its host shadow */
	size_t len;
	uint32_t refs; /* parts of pending ops naming it */
	bool used;
	void *dev; /* a device segment: the device ops' cookie, else NULL */
};

struct trainer;
struct group;

/* A trainer's place in a group. */
struct member {
	struct group *g;
	struct trainer *t;
	int32_t rank;
	uint32_t local_rank;
	uint32_t handle; /* index in t->groups */
	uint64_t seq; /* sequence number of its next op */
};

/* One local rank's descriptor of one collective instance. */
struct part {
	bool arrived;
	uint16_t bad; /* enum cs_ipc_bad, 0 if valid */
	struct trainer *t;
	uint64_t user_id;
	struct cs_ipc_sqe d;
	struct seg *send_seg, *recv_seg;
	uint8_t *send, *recv;
	/* an all-to-all-v: its count table, copied when taken (4 x @vn:
	 * sendcounts, sdispls, recvcounts, rdispls; @vn the group's size
	 * then), and the bytes its blocks span from @send and @recv. @v is
	 * kept (grown, never shrunk) from one instance of the slot to the
	 * next; freed with the group. */
	uint64_t *v;
	uint32_t vcap, vn;
	size_t vslen, vrlen;
	/* CS_IPC_OP_ALLTOALLV_DYN: the trainer's table, where the receive
	 * counts and displacements go back on success, and its segment
	 * (held like @send_seg: not unregistered under the operation) */
	uint64_t *vuser;
	struct seg *vuser_seg;
	bool dev_eio; /* its device result could not be written back */
};

static bool is_a2av(unsigned op)
{
	return op == CS_IPC_OP_ALLTOALLV || op == CS_IPC_OP_ALLTOALLV_DYN;
}

/* The k-th op of a group: one part per local rank. */
struct inst {
	bool active;
	/* finished before an older instance of its group: the completions
	 * are out, the slot stays taken until the older ones finish */
	bool done;
	bool inter; /* waiting for the backend */
	bool in_recv0; /* the backend works on local rank 0's recv buffer */
	/* an all-to-all-v across nodes: 1 while its count matrix is
	 * exchanged, 2 while its data is (a2av_data()) */
	uint8_t a2av_step;
	size_t a2av_recv_at; /* its data from the nodes, in the staging */
	uint64_t seq;
	uint32_t arrived;
	cs_ns_t first_at; /* when its first part arrived */
	uint64_t cookie;
	struct part *parts; /* local_size of them */
	struct stage *stage; /* its staging buffer while it runs, or NULL */
	/* inter: its step, prepared; parked: the backend had no room for
	 * it yet (inter_start) */
	bool parked;
	struct cs_ipc_inter_op op;
	/* asynchronous device copies (dev_pump()): its phase, its pieces
	 * in flight, where the next one starts (part, range, bytes), a copy
	 * in failed, what it finishes with after its copies out, and its
	 * place in the server's list of instances that copy */
	uint8_t dev_phase; /* enum dev_phase */
	bool dev_err;
	/* its local reduction runs on the device (DEV_RED): the CPU's is
	 * skipped (reduce_local_at()) */
	bool dev_red;
	uint32_t dev_busy;
	uint32_t dev_l, dev_r;
	size_t dev_at;
	int32_t fin_status, fin_peer;
	uint16_t fin_detail;
	uint32_t fin_aux;
	struct group *dev_g;
	struct inst *dev_next;
	/*
	 * A pipelined instance (DEV_PIPE, pipe_start()): @pipe_n slices of
	 * @pipe_elems elements (0: not pipelined); the next slice whose
	 * network step starts (@pipe_net; @pipe_wire: the one before is on
	 * the wire), slices whose step ended (@pipe_done); the copy in's
	 * cursor is dev_l / dev_r / dev_at in slice @pipe_in, with its
	 * pieces in flight by slice (@pipe_in_busy, slice % IPC_PIPE_AHEAD);
	 * the copy out's cursor: slice @pipe_out, part, range, bytes.
	 */
	uint32_t pipe_n;
	uint64_t pipe_elems;
	uint32_t pipe_net, pipe_done, pipe_in, pipe_out;
	bool pipe_wire;
	uint32_t pipe_in_busy[IPC_PIPE_AHEAD];
	uint32_t pout_l, pout_r;
	size_t pout_at;
};

enum dev_phase {
	DEV_NONE, /* no asynchronous device copy */
	DEV_IN, /* its device inputs go to their shadows */
	DEV_RUN, /* copied in: running */
	DEV_OUT, /* its results go back to the device */
	DEV_DONE, /* copied out: its completions may go */
	/* pipelined (ipc.dev_pipe): slices copy in, go on the wire and
	 * copy out at once, each slice in that order */
	DEV_PIPE,
	/* ipc.dev_reduce (after DEV_IN): the local ranks' contributions
	 * reduced into local rank 0's recv range on the device (DEV_RED),
	 * then that result copied to its shadow (DEV_RES); then DEV_RUN
	 * with the reduction done (inst.dev_red) */
	DEV_RED,
	DEV_RES,
};

/* One device copy piece in flight: whose, and the device ops' token. */
struct dev_xfer {
	struct inst *in; /* NULL: a free slot */
	uint32_t part;
	uint64_t token;
	/* DEV_PIPE: a copy out (else in), of this slice */
	bool out;
	uint32_t slice;
};

/* A staging buffer of a group's pool: kept between operations (grown,
 * never shrunk), taken by one running instance at a time. */
struct stage {
	uint8_t *buf;
	size_t len;
	bool busy;
};

struct group {
	bool used;
	bool failed;
	/* CS_IPC_JOIN_ELASTIC: a new view re-forms the group (regroup)
	 * instead of failing it */
	bool elastic;
	/* re-formed at the next cross-node operation (cs_ipc_server_view
	 * moved it to a new view, or this node joined it with no rank yet:
	 * size 0, ranks -1; the backend numbers it) */
	bool regroup;
	/* its last membership check found the node-block layout
	 * (cs_ipc_server_set_blocked) */
	bool blocked;
	/* what its last membership check found of the nodes' cut sizes
	 * (cs_ipc_server_set_pipe): pipe_told false: nothing yet (this
	 * node's ipc.dev_pipe alone decides); pipe_ok: every node cuts
	 * alike; else an allreduce or broadcast of more than pipe_limit
	 * bytes is refused (node pipe_node cuts at pipe_val bytes) */
	bool pipe_told, pipe_ok;
	uint64_t pipe_limit;
	int32_t pipe_node;
	uint32_t pipe_val;
	/* the nodes it spans (struct cs_ipc_msg.u.join.nodes): all zero,
	 * every node */
	uint64_t nodes[CS_IPC_NODE_WORDS];
	uint64_t seq_base; /* the first operation of its current view */
	int32_t fail_status; /* what its operations complete with then */
	int32_t lost_rank; /* group rank, or node rank (lost_detail) */
	uint16_t lost_detail; /* enum cs_ipc_lost, cs_ipc_timeout, ... */
	/* the completions' aux word (cs_ipc_cqe.epoch): CS_IPC_LOST_NODE:
	 * the view that lost it; CS_IPC_TIMEOUT_UNPOSTED: the local rank */
	uint32_t lost_epoch;
	cs_ns_t head_at; /* when its oldest pending op became the oldest */
	uint32_t epoch; /* the node view it was formed in */
	uint32_t id;
	uint32_t gen; /* bumped when the slot is reused */
	char name[CS_IPC_NAME_MAX];
	uint32_t size, local_size, nmembers;
	struct member *m[CS_IPC_MAX_LOCAL]; /* by local rank */
	int32_t ranks[CS_IPC_MAX_LOCAL]; /* global rank by local rank */
	uint64_t next_done; /* its oldest unfinished instance */
	uint64_t next_run; /* instances before it were started (in order) */
	struct inst *win; /* IPC_WINDOW of them */
	struct part *part_mem;
	struct stage *pool; /* cfg.group_inflight of them */
};

struct trainer {
	int fd;
	int efd;
	pid_t pid;
	bool hello;
	bool kick;
	cs_ns_t accepted_at; /* its hello is due by + cfg.hello_deadline */
	void *ctrl_mem;
	size_t ctrl_len;
	struct cs_ipc_ctrl *ctrl;
	struct cs_ring sq, cq;
	struct seg *segs;
	struct member **groups; /* by handle */
	uint32_t inflight; /* taken, completion not in the CQ */
	struct cs_ipc_cqe backlog[CS_IPC_RING_SLOTS];
	uint32_t bl_head, bl_count;
	struct cs_ipc_ps_tr *ps; /* its PS tables (ipc_ps.c) */
	struct cs_ipc_p2p_tr *p2p; /* its send/recv counters (ipc_p2p.c) */
};

struct cs_ipc_server {
	struct cs_ipc_cfg cfg;
	struct cs_ipc_backend be;
	bool have_be;
	const struct cs_ipc_dev_ops *dev_ops;
	void *dev_ctx;
	uint32_t node; /* this node's ring index (cs_ipc_server_set_node) */
	int lfd;
	uid_t uid;
	cs_ns_t next_sock_poll;
	struct trainer **tr; /* max_trainers slots */
	/* one past the highest slot in use: the rounds scan only up to it
	 * (scanning all 64 slots twice a round took 4 % of a polling lcore
	 * serving one trainer) */
	uint32_t tr_end;
	struct group *groups; /* max_groups slots */
	struct pollfd *pfd;
	struct cs_ipc_stats st;
	uint32_t epoch; /* the backend's node view (cs_ipc_server_view) */
	cs_ns_t now; /* of the current cs_ipc_server_poll() */
	struct cs_ipc_ps *ps; /* PS tables (ipc_ps.c), NULL: none */
	struct cs_ipc_p2p *p2p; /* send/recv (ipc_p2p.c), NULL: none */
	/* an all-to-all-v's count table while validate() checks it */
	uint64_t *vtab;
	size_t vtab_cap; /* u64 */
	/* asynchronous device copies: cfg.dev_depth slots, how many are
	 * taken, and the instances that copy, in the order they began */
	struct dev_xfer *xf;
	uint32_t xf_used;
	struct inst *dev_head;
};

/* ---- completions ------------------------------------------------------ */

static void kick_trainer(struct trainer *t)
{
	uint64_t one = 1;

	if (!t->kick)
		return;
	t->kick = false;
	/* Pairs with the trainer's store of cq_armed and re-check of the CQ. */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_exchange_explicit(&t->ctrl->cq_armed, 0,
				     memory_order_seq_cst))
		if (write(t->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			CS_WARN("pid %d: eventfd write: %s", (int)t->pid,
				strerror(errno));
}

static int flush_backlog(struct trainer *t)
{
	int n = 0;

	while (t->bl_count) {
		if (!cs_ring_enqueue_burst(&t->cq, &t->backlog[t->bl_head], 1))
			break;
		t->bl_head = (t->bl_head + 1) % CS_IPC_RING_SLOTS;
		t->bl_count--;
		t->inflight--;
		t->kick = true;
		n++;
	}
	return n;
}

/* Complete one taken descriptor of @t with @c. Never fails: see inflight. */
static void complete_cqe(struct cs_ipc_server *s, struct trainer *t,
			 const struct cs_ipc_cqe *cq)
{
	struct cs_ipc_cqe c = *cq;

	if (c.status)
		s->st.ops_failed++;
	else
		s->st.ops_done++;
	if (!t)
		return;
	t->kick = true;
	if (!t->bl_count && cs_ring_enqueue_burst(&t->cq, &c, 1)) {
		t->inflight--;
		return;
	}
	/* inflight < CS_IPC_RING_SLOTS, so the backlog has room. */
	t->backlog[(t->bl_head + t->bl_count) % CS_IPC_RING_SLOTS] = c;
	t->bl_count++;
}

static void complete_ex(struct cs_ipc_server *s, struct trainer *t,
			uint64_t user_id, int status, unsigned detail,
			int32_t peer, uint32_t epoch)
{
	struct cs_ipc_cqe c = {
		.user_id = user_id,
		.status = status,
		.detail = (uint16_t)detail,
		.peer = peer,
		.epoch = epoch,
	};

	complete_cqe(s, t, &c);
}

static void complete(struct cs_ipc_server *s, struct trainer *t,
		     uint64_t user_id, int status, unsigned detail,
		     int32_t peer)
{
	complete_ex(s, t, user_id, status, detail, peer, 0);
}

/* ---- groups and instances --------------------------------------------- */

/*
 * The backend's name for operation @seq of @g: the group's slot and
 * generation, then the operation's index in the group's current view
 * (counted from the operation that re-formed it, seq_base), which every
 * node of the view agrees on even when they had run different numbers of
 * operations before it, or none (a node that joined).
 */
static uint64_t cookie_of(const struct group *g, uint64_t seq)
{
	return ((uint64_t)g->id << 48) ^ ((uint64_t)g->gen << 32) ^
	       ((seq - g->seq_base) & 0xffffffffu);
}

static void part_release(struct part *p)
{
	if (p->send_seg)
		p->send_seg->refs--;
	if (p->recv_seg)
		p->recv_seg->refs--;
	if (p->vuser_seg)
		p->vuser_seg->refs--;
	p->send_seg = p->recv_seg = p->vuser_seg = NULL;
	p->vuser = NULL;
	p->arrived = false;
	p->dev_eio = false;
	p->t = NULL;
}

/* Bytes an operation reads from its send buffer and writes to its recv. */
static void op_lens(const struct group *g, const struct cs_ipc_sqe *d,
		    size_t *slen, size_t *rlen)
{
	size_t n = d->count * cs_dtype_size((enum cs_dtype)d->dtype);

	*slen = *rlen = 0;
	switch (d->op) {
	case CS_IPC_OP_ALLREDUCE:
		*slen = *rlen = n;
		break;
	case CS_IPC_OP_REDUCE_SCATTER:
		*slen = n * g->size;
		*rlen = n;
		break;
	case CS_IPC_OP_ALL_GATHER:
		*slen = n;
		*rlen = n * g->size;
		break;
	case CS_IPC_OP_BROADCAST:
		*rlen = n;
		break;
	case CS_IPC_OP_ALLTOALL:
		*slen = *rlen = n * g->size;
		break;
	default:
		break;
	}
}

/* The same for a taken part (an all-to-all-v's spans are in its table). */
static void part_lens(const struct group *g, const struct part *p, size_t *slen,
		      size_t *rlen)
{
	if (is_a2av(p->d.op)) {
		*slen = p->vslen;
		*rlen = p->vrlen;
		return;
	}
	op_lens(g, &p->d, slen, rlen);
}

static void progress(struct cs_ipc_server *s);

/*
 * Device ops without copy_start / copy_poll: copy [@off, @off + @len) of a
 * device segment to its shadow (@in) or back and wait, in ipc.dev_chunk
 * pieces with the backend's progress hook between them: a polling lcore
 * serving the IPC keeps serving its port.
 */
static int dev_copy(struct cs_ipc_server *s, struct seg *sg, uint8_t *host,
		    size_t len, bool in)
{
	uint64_t off = (uint64_t)(host - (uint8_t *)sg->base);

	for (size_t done = 0; done < len;) {
		size_t n = CS_MIN(len - done, (size_t)s->cfg.dev_chunk);
		int err =
			in ? s->dev_ops->to_host(s->dev_ctx, sg->dev,
						 off + done, host + done, n)
			   : s->dev_ops->from_host(s->dev_ctx, sg->dev,
						   off + done, host + done, n);

		if (err)
			return -EIO;
		done += n;
		if (done < len)
			progress(s);
	}
	return 0;
}

/* A device recv range: the result goes from the shadow to the device. */
static int dev_out(struct cs_ipc_server *s, struct group *g, struct part *p)
{
	size_t slen, rlen;

	part_lens(g, p, &slen, &rlen);
	return dev_copy(s, p->recv_seg, p->recv, rlen, false);
}

/* Device send ranges (and a broadcast's recv) into their shadows. */
static int dev_in(struct cs_ipc_server *s, struct group *g, struct inst *in)
{
	for (uint32_t l = 0; l < g->local_size; l++) {
		struct part *p = &in->parts[l];
		struct seg *ss = p->send_seg, *rs = p->recv_seg;
		size_t slen, rlen;

		part_lens(g, p, &slen, &rlen);
		if (ss && ss->dev && dev_copy(s, ss, p->send, slen, true))
			return -EIO;
		if (rs && rs->dev && p->d.op == CS_IPC_OP_BROADCAST &&
		    dev_copy(s, rs, p->recv, rlen, true))
			return -EIO;
	}
	return 0;
}

/* ---- asynchronous device copies -------------------------------------- */

static bool dev_async(const struct cs_ipc_server *s)
{
	return s->dev_ops && s->dev_ops->copy_start && s->dev_ops->copy_poll;
}

/*
 * The size this sidecar cuts a large cross-node allreduce or broadcast
 * at (ipc.dev_pipe, with asynchronous device copies or ipc.dev_pipe_any),
 * 0 if it does not cut. Handed to the backend with every step
 * (cs_ipc_inter_op.pipe): the group's membership check compares it
 * across the nodes.
 */
static uint64_t pipe_bytes(const struct cs_ipc_server *s)
{
	return (dev_async(s) || s->cfg.dev_pipe_any) && s->have_be
		       ? s->cfg.dev_pipe
		       : 0;
}

/*
 * Range @r (0: send, 1: recv) of part @l of @in that phase @phase copies:
 * DEV_IN the device send ranges (and a broadcast's recv) into their
 * shadows, DEV_OUT the device recv ranges back (the same as the
 * synchronous dev_in() and dev_out()). Returns false if there is none.
 */
static bool dev_range(const struct group *g, const struct inst *in,
		      unsigned phase, uint32_t l, uint32_t r, struct seg **sg,
		      uint8_t **host, size_t *len)
{
	const struct part *p = &in->parts[l];
	size_t slen, rlen;

	if (!p->arrived || p->bad)
		return false;
	part_lens(g, p, &slen, &rlen);
	if (phase == DEV_IN && !r && p->send_seg && p->send_seg->dev) {
		*sg = p->send_seg;
		*host = p->send;
		*len = slen;
	} else if (r && p->recv_seg && p->recv_seg->dev &&
		   (phase == DEV_OUT || p->d.op == CS_IPC_OP_BROADCAST) &&
		   /* reduced there on this node alone: it holds the result */
		   !(phase == DEV_OUT && in->dev_red && !l &&
		     g->local_size == g->size)) {
		*sg = p->recv_seg;
		*host = p->recv;
		*len = rlen;
	} else {
		return false;
	}
	return *len != 0;
}

static bool dev_needs(const struct group *g, const struct inst *in,
		      unsigned phase)
{
	struct seg *sg;
	uint8_t *host;
	size_t len;

	for (uint32_t l = 0; l < g->local_size; l++)
		for (uint32_t r = 0; r < 2; r++)
			if (dev_range(g, in, phase, l, r, &sg, &host, &len))
				return true;
	return false;
}

static void dev_unlink(struct cs_ipc_server *s, struct inst *in)
{
	for (struct inst **pp = &s->dev_head; *pp; pp = &(*pp)->dev_next)
		if (*pp == in) {
			*pp = in->dev_next;
			break;
		}
	in->dev_next = NULL;
}

/*
 * Issue @in's next pieces while the server has free slots (ipc.dev_depth
 * over all instances; dev_pump() serves them in the order they began
 * copying). A copy that does not start fails like one that does not
 * finish: DEV_IN, the instance (dev_err); DEV_OUT, that part's result
 * (dev_eio, the rest of its range skipped).
 */
static void pipe_issue(struct cs_ipc_server *s, struct group *g,
		       struct inst *in);

static void red_issue(struct cs_ipc_server *s, struct group *g,
		      struct inst *in);

static void dev_issue(struct cs_ipc_server *s, struct group *g, struct inst *in)
{
	uint32_t slot = 0;

	if (in->dev_phase == DEV_PIPE) {
		pipe_issue(s, g, in);
		return;
	}
	if (in->dev_phase == DEV_RED || in->dev_phase == DEV_RES) {
		red_issue(s, g, in);
		return;
	}

	while (s->xf_used < s->cfg.dev_depth && !in->dev_err &&
	       in->dev_l < g->local_size) {
		struct part *p = &in->parts[in->dev_l];
		struct seg *sg;
		uint8_t *host;
		size_t len, n;
		uint64_t tok = 0;
		int err;

		if (!dev_range(g, in, in->dev_phase, in->dev_l, in->dev_r, &sg,
			       &host, &len) ||
		    in->dev_at >= len ||
		    (in->dev_phase == DEV_OUT && p->dev_eio)) {
			in->dev_at = 0;
			if (++in->dev_r == 2) {
				in->dev_r = 0;
				in->dev_l++;
			}
			continue;
		}
		n = CS_MIN(len - in->dev_at, (size_t)s->cfg.dev_chunk);
		while (s->xf[slot].in)
			slot++;
		err = s->dev_ops->copy_start(
			s->dev_ctx, sg->dev,
			(uint64_t)(host + in->dev_at - (uint8_t *)sg->base),
			host + in->dev_at, n, in->dev_phase == DEV_IN, &tok);
		if (err) {
			CS_WARN("device copy of %zu bytes did not start: %s", n,
				cs_strerror(err));
			if (in->dev_phase == DEV_IN)
				in->dev_err = true;
			else
				p->dev_eio = true;
			continue;
		}
		s->xf[slot] = (struct dev_xfer){ .in = in,
						 .part = in->dev_l,
						 .token = tok };
		s->xf_used++;
		in->dev_busy++;
		in->dev_at += n;
	}
}

/*
 * Range @r of part @l of pipelined @in (DEV_PIPE), cut to slice @k:
 * copied in (!@out: dev_range()'s DEV_IN) or out (DEV_OUT). Both an
 * allreduce's and a broadcast's ranges are the operation's elements, so a
 * slice is the same element range in each. False if there is none.
 */
static bool pipe_range(const struct group *g, const struct inst *in, bool out,
		       uint32_t k, uint32_t l, uint32_t r, struct seg **sg,
		       uint8_t **host, size_t *len)
{
	size_t esz = cs_dtype_size((enum cs_dtype)in->parts[0].d.dtype);
	size_t a = (size_t)k * in->pipe_elems * esz;

	if (!dev_range(g, in, out ? DEV_OUT : DEV_IN, l, r, sg, host, len) ||
	    a >= *len)
		return false;
	*host += a;
	*len = CS_MIN(*len - a, (size_t)in->pipe_elems * esz);
	return true;
}

/*
 * Issue pipelined @in's next pieces while the server has free slots:
 * first its copies in, slice after slice, at most IPC_PIPE_AHEAD slices
 * ahead of the next network step; then the copies out of the slices whose
 * step ended. After a failed copy in nothing more is issued (the
 * instance fails with -EIO); a failed copy out skips the rest of that
 * part's result (-EIO for it), as dev_issue().
 */
static void pipe_issue(struct cs_ipc_server *s, struct group *g,
		       struct inst *in)
{
	uint32_t slot = 0;

	while (s->xf_used < s->cfg.dev_depth && !in->dev_err) {
		bool out;
		uint32_t k, *cl, *cr;
		size_t *ca, len, n;
		struct seg *sg;
		uint8_t *host;
		uint64_t tok = 0;
		int err;

		if (in->pipe_in < in->pipe_n &&
		    in->pipe_in < in->pipe_net + IPC_PIPE_AHEAD) {
			out = false;
			k = in->pipe_in;
			cl = &in->dev_l;
			cr = &in->dev_r;
			ca = &in->dev_at;
		} else if (in->pipe_out < in->pipe_done) {
			out = true;
			k = in->pipe_out;
			cl = &in->pout_l;
			cr = &in->pout_r;
			ca = &in->pout_at;
		} else {
			break;
		}
		if (*cl >= g->local_size) { /* slice k: every piece issued */
			*cl = *cr = 0;
			*ca = 0;
			if (out)
				in->pipe_out++;
			else
				in->pipe_in++;
			continue;
		}
		if (!pipe_range(g, in, out, k, *cl, *cr, &sg, &host, &len) ||
		    *ca >= len || (out && in->parts[*cl].dev_eio)) {
			*ca = 0;
			if (++*cr == 2) {
				*cr = 0;
				++*cl;
			}
			continue;
		}
		n = CS_MIN(len - *ca, (size_t)s->cfg.dev_chunk);
		while (s->xf[slot].in)
			slot++;
		err = s->dev_ops->copy_start(
			s->dev_ctx, sg->dev,
			(uint64_t)(host + *ca - (uint8_t *)sg->base),
			host + *ca, n, !out, &tok);
		if (err) {
			CS_WARN("device copy of %zu bytes did not start: %s", n,
				cs_strerror(err));
			if (!out)
				in->dev_err = true;
			else
				in->parts[*cl].dev_eio = true;
			continue;
		}
		s->xf[slot] = (struct dev_xfer){ .in = in,
						 .part = *cl,
						 .token = tok,
						 .out = out,
						 .slice = k };
		s->xf_used++;
		in->dev_busy++;
		if (!out)
			in->pipe_in_busy[k % IPC_PIPE_AHEAD]++;
		if (in->pipe_wire)
			s->st.pipe_overlap++;
		*ca += n;
	}
}

/* ---- local reduction on the device (ipc.dev_reduce) ------------------ */

/*
 * Whether @in's local reduction runs on the device: an allreduce of
 * several local ranks (f32, f16, bf16: the types of gpu/kernels.cu)
 * whose result lands in device memory (local rank 0's recv range, the
 * accumulator of reduce_local()), in a sidecar with asynchronous device
 * copies and reduce_start, and ipc.dev_reduce on. A host destination,
 * and every other case, reduces on the CPU as before.
 */
static bool dev_red_wanted(const struct cs_ipc_server *s, const struct group *g,
			   const struct inst *in)
{
	const struct part *p0 = &in->parts[0];

	return s->cfg.dev_reduce && dev_async(s) && s->dev_ops->reduce_start &&
	       p0->d.op == CS_IPC_OP_ALLREDUCE && g->local_size > 1 &&
	       p0->recv_seg && p0->recv_seg->dev && p0->d.count &&
	       (p0->d.dtype == CS_F32 || p0->d.dtype == CS_F16 ||
		p0->d.dtype == CS_BF16);
}

/*
 * Issue @in's next DEV_RED or DEV_RES pieces. DEV_RED: local rank l's
 * contribution (its send: the shadow DEV_IN filled, or host memory) is
 * reduced into local rank 0's recv range on the device, rank after rank
 * (rank 0's own copied there first unless it is in place): in each
 * element the CPU's order (reduce_local_at()), so the same bits. The
 * device ops run these pieces in the order they start. DEV_RES: that
 * range's result to its shadow, where the rest of the operation (the
 * fan-out, the cross-node step, the copies out) finds it. A piece that
 * does not start fails the instance (dev_err), as a copy in.
 */
static void red_issue(struct cs_ipc_server *s, struct group *g, struct inst *in)
{
	struct part *p0 = &in->parts[0];
	struct seg *sg = p0->recv_seg;
	size_t esz = cs_dtype_size((enum cs_dtype)p0->d.dtype);
	size_t len = p0->d.count * esz;
	uint64_t base = (uint64_t)(p0->recv - (uint8_t *)sg->base);
	uint32_t slot = 0;

	while (s->xf_used < s->cfg.dev_depth && !in->dev_err) {
		uint32_t l = in->dev_l;
		bool res = in->dev_phase == DEV_RES;
		uint64_t tok = 0;
		size_t n;
		int err;

		if (l >= (res ? 1u : g->local_size))
			break;
		if (in->dev_at >= len || (!res && !l && p0->send == p0->recv)) {
			in->dev_at = 0;
			in->dev_l++;
			continue;
		}
		/* whole elements per piece (ipc.dev_chunk need not be a
		 * multiple of the element size) */
		n = CS_MIN(len - in->dev_at,
			   (size_t)s->cfg.dev_chunk - s->cfg.dev_chunk % esz);
		while (s->xf[slot].in)
			slot++;
		if (res)
			err = s->dev_ops->copy_start(
				s->dev_ctx, sg->dev, base + in->dev_at,
				p0->recv + in->dev_at, n, true, &tok);
		else
			err = s->dev_ops->reduce_start(
				s->dev_ctx, sg->dev, base + in->dev_at,
				in->parts[l].send + in->dev_at, n,
				(enum cs_dtype)p0->d.dtype,
				(enum cs_redop)p0->d.redop, !l, &tok);
		if (err) {
			CS_WARN("device %s of %zu bytes did not start: %s",
				res ? "copy" : "reduction", n,
				cs_strerror(err));
			in->dev_err = true;
			break;
		}
		if (!res)
			s->st.dev_reduce_pieces++;
		s->xf[slot] =
			(struct dev_xfer){ .in = in, .part = l, .token = tok };
		s->xf_used++;
		in->dev_busy++;
		in->dev_at += n;
	}
}

/* Start copying @in's device ranges in (DEV_IN) or out (DEV_OUT). */
/* Put @in at the end of the sidecar's list of instances copying, in
 * @phase, its copies not started yet. */
static void dev_enqueue(struct cs_ipc_server *s, struct group *g,
			struct inst *in, unsigned phase)
{
	struct inst **pp = &s->dev_head;

	in->dev_phase = (uint8_t)phase;
	in->dev_err = false;
	in->dev_l = in->dev_r = 0;
	in->dev_at = 0;
	in->dev_g = g;
	while (*pp)
		pp = &(*pp)->dev_next;
	*pp = in;
	in->dev_next = NULL;
}

static void dev_start(struct cs_ipc_server *s, struct group *g, struct inst *in,
		      unsigned phase)
{
	dev_enqueue(s, g, in, phase);
	dev_issue(s, g, in);
}

/* A finished piece of slot @x: @ret from copy_poll (1 or an error). */
static void dev_xfer_end(struct cs_ipc_server *s, struct dev_xfer *x, int ret)
{
	struct inst *in = x->in;
	/* a copy in fails the instance, a copy out that part's result */
	bool copy_in =
		in->dev_phase == DEV_PIPE ? !x->out : in->dev_phase != DEV_OUT;

	if (ret < 0) {
		CS_WARN("device copy failed: %s", cs_strerror(ret));
		if (copy_in)
			in->dev_err = true;
		else
			in->parts[x->part].dev_eio = true;
	}
	if (in->dev_phase == DEV_PIPE && !x->out)
		in->pipe_in_busy[x->slice % IPC_PIPE_AHEAD]--;
	x->in = NULL;
	s->xf_used--;
	in->dev_busy--;
}

/*
 * @in ends while it copies (its group failed, a trainer died, a copy in
 * failed): wait for its pieces in flight, whose device range and shadow
 * must stay until they are done (the caller is about to let them go),
 * and take it off the list. The device ops finish every copy (CUDA: an
 * event that completes or reports an error), so this ends.
 */
static void dev_drain(struct cs_ipc_server *s, struct inst *in)
{
	for (uint32_t i = 0; in->dev_busy && i < s->cfg.dev_depth; i++) {
		struct dev_xfer *x = &s->xf[i];
		int ret;

		if (x->in != in)
			continue;
		while (!(ret = s->dev_ops->copy_poll(s->dev_ctx, x->token)))
			sched_yield();
		dev_xfer_end(s, x, ret);
	}
	dev_unlink(s, in);
	in->dev_phase = DEV_NONE;
	in->dev_err = false;
}

static void inst_finish_ex(struct cs_ipc_server *s, struct group *g,
			   struct inst *in, int status, unsigned detail,
			   int32_t peer, uint32_t aux);
static void inst_finish(struct cs_ipc_server *s, struct group *g,
			struct inst *in, int status, unsigned detail,
			int32_t peer);
static void send_verdict(struct cs_ipc_server *s, struct group *g, uint64_t seq,
			 int status, unsigned detail, int32_t peer);
static void run_now(struct cs_ipc_server *s, struct group *g, struct inst *in);
static void run_ready(struct cs_ipc_server *s, struct group *g);
static bool pipe_advance(struct cs_ipc_server *s, struct group *g,
			 struct inst *in);

/* @in's copies of its current phase are all done: on to the next one. */
static void dev_phase_done(struct cs_ipc_server *s, struct group *g,
			   struct inst *in)
{
	dev_unlink(s, in);
	if (in->dev_phase == DEV_OUT) {
		in->dev_phase = DEV_DONE;
		inst_finish_ex(s, g, in, in->fin_status, in->fin_detail,
			       in->fin_peer, in->fin_aux);
	} else if (in->dev_err) {
		in->dev_phase = DEV_NONE;
		in->dev_red = false;
		send_verdict(s, g, in->seq, -EIO, 0, -1);
		inst_finish(s, g, in, -EIO, 0, -1);
	} else if (in->dev_red && in->dev_phase == DEV_IN) {
		s->st.dev_reduce_ops++;
		dev_start(s, g, in, DEV_RED);
	} else if (in->dev_phase == DEV_RED) {
		dev_start(s, g, in, DEV_RES);
	} else {
		in->dev_phase = DEV_RUN;
		run_now(s, g, in);
	}
	run_ready(s, g);
}

/*
 * One round of device copies (cs_ipc_server_poll): poll every piece in
 * flight, issue new ones, and move the instances whose pieces are all
 * done on (run them, or post their completions). Returns the work done,
 * at least 1 while copies are in flight (the caller must not sleep).
 */
static int dev_pump(struct cs_ipc_server *s)
{
	int work = 0;

	if (!s->xf_used && !s->dev_head)
		return 0;
	for (uint32_t i = 0; s->xf_used && i < s->cfg.dev_depth; i++) {
		struct dev_xfer *x = &s->xf[i];
		int ret;

		if (!x->in)
			continue;
		ret = s->dev_ops->copy_poll(s->dev_ctx, x->token);
		if (ret) {
			dev_xfer_end(s, x, ret);
			work++;
		}
	}
again: /* a phase that ends may start or end others: from the head again */
	for (struct inst *in = s->dev_head; in; in = in->dev_next) {
		struct group *g = in->dev_g;

		if (in->dev_phase == DEV_PIPE) {
			if (pipe_advance(s, g, in)) { /* it finished */
				run_ready(s, g);
				work++;
				goto again;
			}
			continue;
		}
		dev_issue(s, g, in);
		if (!in->dev_busy &&
		    (in->dev_err || in->dev_l >= g->local_size ||
		     (in->dev_phase == DEV_RES && in->dev_l >= 1))) {
			dev_phase_done(s, g, in);
			work++;
			goto again;
		}
	}
	return work + (s->xf_used || s->dev_head);
}

/*
 * @in's completions are out: give its staging buffer back and free its
 * slot, or, when an older instance of the group still runs (it finished
 * out of order), keep the slot until that one is done too. The group's
 * oldest unfinished instance moves past every finished one.
 */
static void inst_retire(struct cs_ipc_server *s, struct group *g,
			struct inst *in)
{
	struct inst *nx;

	if (in->stage)
		in->stage->busy = false;
	in->stage = NULL;
	in->inter = false;
	in->parked = false;
	in->a2av_step = 0;
	in->arrived = 0;
	in->pipe_n = 0;
	in->pipe_wire = false;
	in->dev_red = false;
	if (in->seq != g->next_done) {
		in->done = true;
		return;
	}
	in->active = false;
	for (g->next_done++;; g->next_done++) {
		nx = &g->win[g->next_done % IPC_WINDOW];
		if (!nx->active || !nx->done || nx->seq != g->next_done)
			break;
		nx->active = false;
		nx->done = false;
	}
	if (g->next_run < g->next_done)
		g->next_run = g->next_done;
	g->head_at = s->now;
}

/* Complete every arrived part of @in with the same status (a part whose
 * device result could not be written back gets -EIO); @aux goes to the
 * completions' aux word (cs_ipc_cqe.epoch). */
static void inst_finish_ex(struct cs_ipc_server *s, struct group *g,
			   struct inst *in, int status, unsigned detail,
			   int32_t peer, uint32_t aux)
{
	bool copied = in->dev_phase == DEV_DONE;

	/* ended while it copies: its pieces in flight finish first */
	if (in->dev_phase == DEV_IN || in->dev_phase == DEV_OUT ||
	    in->dev_phase == DEV_PIPE || in->dev_phase == DEV_RED ||
	    in->dev_phase == DEV_RES)
		dev_drain(s, in);
	/* a result for device memory: copied out first, completed after */
	if (!status && !copied && dev_async(s) && dev_needs(g, in, DEV_OUT)) {
		in->fin_status = status;
		in->fin_detail = (uint16_t)detail;
		in->fin_peer = peer;
		in->fin_aux = aux;
		dev_start(s, g, in, DEV_OUT);
		return;
	}
	in->dev_phase = DEV_NONE;
	for (uint32_t l = 0; l < g->local_size; l++) {
		struct part *p = &in->parts[l];
		int st = status;

		if (!p->arrived)
			continue;
		cs_obs_ipc_done(s->now, g->id, in->seq, l,
				status); /* observe/ */
		if (!st && copied && p->dev_eio)
			st = -EIO;
		else if (!st && !copied && p->recv_seg && p->recv_seg->dev)
			st = dev_out(s, g, p);
		if (!st && p->d.op == CS_IPC_OP_ALLTOALLV_DYN && p->vuser &&
		    p->vn == g->size) /* the counts go back with the rows */
			memcpy(p->vuser + 2 * (size_t)g->size,
			       p->v + 2 * (size_t)g->size,
			       2 * sizeof(uint64_t) * g->size);
		if (st != status)
			complete(s, p->t, p->user_id, st, 0, -1);
		else if (p->bad && status == CS_ERR_BAD_DESC)
			complete(s, p->t, p->user_id, status, p->bad, -1);
		else if (g->elastic) /* tell the size and rank it ran at */
			complete_cqe(s, p->t,
				     &(struct cs_ipc_cqe){
					     .user_id = p->user_id,
					     .status = status,
					     .detail = (uint16_t)detail,
					     .peer = peer,
					     .epoch = aux,
					     .size = g->size,
					     .rank = g->ranks[l],
				     });
		else
			complete_ex(s, p->t, p->user_id, status, detail, peer,
				    aux);
		part_release(p);
	}
	inst_retire(s, g, in);
}

static void inst_finish(struct cs_ipc_server *s, struct group *g,
			struct inst *in, int status, unsigned detail,
			int32_t peer)
{
	inst_finish_ex(s, g, in, status, detail, peer,
		       g->failed && status == g->fail_status ? g->lost_epoch
							     : 0);
}

static size_t esz_of(const struct part *p)
{
	return cs_dtype_size((enum cs_dtype)p->d.dtype);
}

/*
 * A staging buffer of at least @len bytes for @in, from its group's pool:
 * the smallest free one that is large enough, else the largest free one,
 * grown (its old bytes are not kept). Given back when @in finishes
 * (inst_retire). At most cfg.group_inflight instances of a group run at
 * once, each holding one, so a free one is always there.
 */
static int stage_take(struct cs_ipc_server *s, struct group *g, struct inst *in,
		      size_t len)
{
	struct stage *fit = NULL, *big = NULL;

	for (uint32_t i = 0; i < s->cfg.group_inflight; i++) {
		struct stage *st = &g->pool[i];

		if (st->busy)
			continue;
		if (st->len >= len && (!fit || st->len < fit->len))
			fit = st;
		if (!big || st->len > big->len)
			big = st;
	}
	if (!fit && big) {
		uint8_t *b = malloc(len);

		if (!b)
			return -ENOMEM;
		free(big->buf);
		big->buf = b;
		big->len = len;
		fit = big;
	}
	if (!fit) /* cannot happen: see above */
		return -EBUSY;
	fit->busy = true;
	in->stage = fit;
	return 0;
}

/* @in's staging buffer (stage_take() first). */
static uint8_t *staging_of(const struct inst *in)
{
	return in->stage->buf;
}

/* Which local rank holds global rank @r, or -1. */
static int local_of(const struct group *g, uint32_t r)
{
	for (uint32_t l = 0; l < g->local_size; l++)
		if (g->ranks[l] == (int32_t)r)
			return (int)l;
	return -1;
}

static void progress(struct cs_ipc_server *s)
{
	if (s->have_be && s->be.progress)
		s->be.progress(s->be.ctx);
}

/* memcpy() of @len bytes in pieces (the two do not overlap). */
static void copy_pieces(struct cs_ipc_server *s, void *dst, const void *src,
			size_t len)
{
	for (size_t off = 0; off < len; off += IPC_PIECE) {
		size_t m = CS_MIN(IPC_PIECE, len - off);

		memcpy((uint8_t *)dst + off, (const uint8_t *)src + off, m);
		if (off + m < len)
			progress(s);
	}
}

/*
 * Reduce every local send buffer into @acc, in local-rank order, piece by
 * piece (element by element the same operations in the same order, so the
 * same bits). The kernels are collectives/reduce.h's, the ones the
 * cross-node engines use: one set of NaN, tie and signed-zero rules for
 * both levels, and acc = op(acc, send[l]) in rank order is exactly the
 * direct exchange's order (ring.c), so a group reduced here and the same
 * group spread over nodes give the same bits.
 */
static void reduce_local_at(struct cs_ipc_server *s, struct group *g,
			    struct inst *in, uint8_t *acc, size_t from,
			    size_t n)
{
	struct part *p0 = &in->parts[0];
	size_t esz = esz_of(p0), piece = IPC_PIECE / esz, fb = from * esz;
	cs_reduce_fn fn = cs_reduce_get((enum cs_dtype)p0->d.dtype,
					(enum cs_redop)p0->d.redop);

	/* reduced on the device already (DEV_RED), the result in acc */
	if (in->dev_red)
		return;
	/* acc is local rank 0's send (in place) or clear of every send */
	if (g->local_size == 1) {
		if (acc != p0->send + fb)
			copy_pieces(s, acc, p0->send + fb, n * esz);
		return;
	}
	if (!fn) /* validate() let no bad dtype or redop through */
		return;
	for (size_t off = 0; off < n; off += piece) {
		size_t m = CS_MIN(piece, n - off), b = off * esz;
		uint32_t l = 1;

		/* acc = send0 op send1: no copy first */
		fn(acc + b, (uint8_t *)p0->send + fb + b,
		   (uint8_t *)in->parts[l++].send + fb + b, m);
		for (; l < g->local_size; l++)
			fn(acc + b, acc + b,
			   (uint8_t *)in->parts[l].send + fb + b, m);
		if (off + m < n)
			progress(s);
	}
}

static void reduce_local(struct cs_ipc_server *s, struct group *g,
			 struct inst *in, uint8_t *acc, size_t n)
{
	reduce_local_at(s, g, in, acc, 0, n);
}

/*
 * An all-to-all across nodes (L local ranks, nodes of L ranks each, node
 * k holding ranks k x L + l): the staging buffer's first half is what
 * this node sends, by destination node j, source local rank l and
 * destination local rank m; its second half what it receives, by source
 * node i, source local rank l' and local rank m. Each node pair's L x L
 * blocks are contiguous: one aggregated flow per pair.
 */
static void a2a_stage(struct group *g, struct inst *in, size_t blk)
{
	uint32_t L = g->local_size, nn = g->size / L;
	uint8_t *out = staging_of(in);

	for (uint32_t j = 0; j < nn; j++)
		for (uint32_t l = 0; l < L; l++)
			for (uint32_t m = 0; m < L; m++)
				memcpy(out + ((size_t)(j * L + l) * L + m) *
						       blk,
				       in->parts[l].send +
					       (size_t)(j * L + m) * blk,
				       blk);
}

/* Local rank @m's blocks out of the second half of the staging buffer. */
static void a2a_unstage(struct group *g, const struct inst *inst, uint32_t m,
			uint8_t *recv, size_t blk)
{
	uint32_t L = g->local_size;
	const uint8_t *in = staging_of(inst) + (size_t)g->size * L * blk;

	for (uint32_t r = 0; r < g->size; r++) /* r = i x L + l' */
		memcpy(recv + (size_t)r * blk, in + ((size_t)r * L + m) * blk,
		       blk);
}

/*
 * An all-to-all-v's count matrix across nodes (a2av_counts()): row r holds
 * rank r's send counts (n), then its receive counts (n). Then the
 * node-level counts (to each node, from each node), then what this node
 * sends, by destination node j, source local rank l, destination local
 * rank m (an all-to-all's order, a2a_stage()), then what it receives.
 */
static size_t a2av_nodes_at(uint32_t n)
{
	return 2 * sizeof(uint64_t) * (size_t)n * n;
}

static size_t a2av_send_at(uint32_t n, uint32_t nn)
{
	return a2av_nodes_at(n) + 2 * sizeof(uint64_t) * (size_t)nn;
}

/*
 * Whether the counts add up: what rank i sends to j (@sc of i's table)
 * equals what j expects from i. The first pair that does not, in rank
 * order of i then j, in *@bi, *@bj. One node: every table is here.
 */
static bool a2av_local_bad(const struct group *g, const struct inst *in,
			   int32_t *bi, int32_t *bj)
{
	uint32_t n = g->size;

	for (uint32_t i = 0; i < n; i++) {
		int li = local_of(g, i);

		for (uint32_t j = 0; li >= 0 && j < n; j++) {
			int lj = local_of(g, j);

			if (lj >= 0 &&
			    in->parts[li].v[j] != in->parts[lj].v[2 * n + i]) {
				*bi = (int32_t)i;
				*bj = (int32_t)j;
				return true;
			}
		}
	}
	return false;
}

/* The same over the whole group's count matrix (a2av_nodes_at()). */
static bool a2av_matrix_bad(const uint64_t *M, uint32_t n, int32_t *bi,
			    int32_t *bj)
{
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t j = 0; j < n; j++)
			if (M[(size_t)i * 2 * n + j] !=
			    M[(size_t)j * 2 * n + n + i]) {
				*bi = (int32_t)i;
				*bj = (int32_t)j;
				return true;
			}
	return false;
}

/* The received blocks of an all-to-all-v across nodes, out of the
 * staging buffer into each local rank's recv at its displacements. */
static void a2av_unstage(struct cs_ipc_server *s, struct group *g,
			 struct inst *in)
{
	uint32_t n = g->size, L = g->local_size, nn = n / L;
	const uint64_t *M = (const uint64_t *)staging_of(in);
	const uint8_t *src = staging_of(in) + in->a2av_recv_at;
	size_t esz = esz_of(&in->parts[0]);

	for (uint32_t i = 0; i < nn; i++)
		for (uint32_t l = 0; l < L; l++)
			for (uint32_t m = 0; m < L; m++) {
				const struct part *p = &in->parts[m];
				uint32_t r = (uint32_t)g->ranks[m],
					 q = i * L + l;
				size_t b = M[(size_t)q * 2 * n + r] * esz;

				copy_pieces(s, p->recv + p->v[3 * n + q] * esz,
					    src, b);
				src += b;
			}
}

/* Copy the result from the staging buffer to every local rank. */
static void fan_out(struct cs_ipc_server *s, struct group *g, struct inst *in)
{
	struct part *p0 = &in->parts[0];
	size_t esz = esz_of(p0), blk = p0->d.count * esz;

	for (uint32_t l = 0; l < g->local_size; l++) {
		struct part *p = &in->parts[l];

		switch (p->d.op) {
		case CS_IPC_OP_ALLREDUCE:
		case CS_IPC_OP_BROADCAST:
			if (!in->in_recv0)
				copy_pieces(s, p->recv, staging_of(in), blk);
			else if (l) /* local rank 0 holds the result */
				copy_pieces(s, p->recv, p0->recv, blk);
			break;
		case CS_IPC_OP_REDUCE_SCATTER:
			copy_pieces(s, p->recv,
				    staging_of(in) + (size_t)g->ranks[l] * blk,
				    blk);
			break;
		case CS_IPC_OP_ALL_GATHER:
			if (!in->in_recv0)
				copy_pieces(s, p->recv, staging_of(in),
					    blk * g->size);
			else if (l)
				copy_pieces(s, p->recv, p0->recv,
					    blk * g->size);
			break;
		case CS_IPC_OP_ALLTOALL:
			if (!in->in_recv0)
				a2a_unstage(g, in, l, p->recv, blk);
			break;
		default:
			break;
		}
	}
	if (is_a2av(p0->d.op))
		a2av_unstage(s, g, in);
}

/*
 * An all-to-all-v with receive counts sent along (CS_IPC_OP_ALLTOALLV_DYN):
 * the count matrix @M (a2av_nodes_at(), rows of every rank: its
 * sendcounts, then its receive room with the CS_IPC_DYN_BAD_INPUT flag
 * in its top bit (DYN_BAD_BIT), where
 * the receive counts go otherwise). Refuse the operation when a rank's
 * input was bad or a rank lacks room (the same verdict on every node: each
 * has the whole matrix); else write the receive side (the transpose) into
 * the matrix and into every local rank's table, packed in source order.
 * Returns 0 or 1 (refused: finished).
 */
#define DYN_BAD_BIT (1ull << 63)

static int dyn_matrix(struct cs_ipc_server *s, struct group *g, struct inst *in,
		      uint64_t *M)
{
	uint32_t n = g->size;

	for (uint32_t r = 0; r < n; r++)
		if (M[(size_t)r * 2 * n + n] & DYN_BAD_BIT) {
			inst_finish(s, g, in, CS_ERR_BAD_DESC, CS_IPC_BAD_PEER,
				    (int32_t)r);
			return 1;
		}
	/* the kind of exchange (its tag) is rank 0's on every rank */
	for (uint32_t r = 1; n > 1 && r < n; r++)
		if (M[(size_t)r * 2 * n + n + 1] != M[n + 1]) {
			inst_finish(s, g, in, CS_ERR_BAD_DESC,
				    CS_IPC_BAD_DYN_TAG, (int32_t)r);
			return 1;
		}
	for (uint32_t r = 0; r < n; r++) {
		uint64_t sum = 0;

		for (uint32_t i = 0; i < n; i++)
			sum += M[(size_t)i * 2 * n + r];
		if (sum > M[(size_t)r * 2 * n + n]) {
			inst_finish(s, g, in, CS_ERR_BAD_DESC,
				    CS_IPC_BAD_DYN_ROOM, (int32_t)r);
			return 1;
		}
	}
	for (uint32_t r = 0; r < n; r++)
		for (uint32_t i = 0; i < n; i++)
			M[(size_t)r * 2 * n + n + i] = M[(size_t)i * 2 * n + r];
	for (uint32_t l = 0; l < g->local_size; l++) {
		uint64_t *v = in->parts[l].v, at = 0;
		uint32_t r = (uint32_t)g->ranks[l];

		for (uint32_t i = 0; i < n; i++) {
			v[2 * n + i] = M[(size_t)r * 2 * n + n + i];
			v[3 * n + i] = at;
			at += v[2 * n + i];
		}
	}
	return 0;
}

/* Put a dynamic all-to-all-v's matrix row of local rank @l into @row. */
static void dyn_row(const struct group *g, const struct part *p, uint64_t *row)
{
	uint32_t n = g->size;

	memcpy(row, p->v, sizeof(uint64_t) * n);
	memset(row + n, 0, sizeof(uint64_t) * n);
	/* the room (below max_op_bytes), the flag in its top bit */
	row[n] = p->d.count |
		 (p->d.root & CS_IPC_DYN_BAD_INPUT ? DYN_BAD_BIT : 0);
	if (n > 1) /* the tag (dyn_matrix() compares them) */
		row[n + 1] = (p->d.root & CS_IPC_DYN_TAG_MASK) >>
			     CS_IPC_DYN_TAG_SHIFT;
}

/* The same on one node: every row is here. */
static int dyn_local(struct cs_ipc_server *s, struct group *g, struct inst *in)
{
	uint32_t n = g->size;
	uint64_t *M = calloc(2 * (size_t)n * n, sizeof(*M));
	int ret;

	if (!M) {
		inst_finish(s, g, in, -ENOMEM, 0, -1);
		return 1;
	}
	for (uint32_t l = 0; l < g->local_size; l++)
		dyn_row(g, &in->parts[l], M + (size_t)g->ranks[l] * 2 * n);
	ret = dyn_matrix(s, g, in, M);
	free(M);
	return ret;
}

/* Every local rank is in and valid: run it on this node. */
static void run_local(struct cs_ipc_server *s, struct group *g, struct inst *in)
{
	struct part *p0 = &in->parts[0];
	size_t esz = esz_of(p0), n = p0->d.count, blk = n * esz;
	int root;

	switch (p0->d.op) {
	case CS_IPC_OP_ALLREDUCE:
		/* One reduction into rank 0's buffer, then only copies. */
		reduce_local(s, g, in, p0->recv, n);
		for (uint32_t l = 1; l < g->local_size; l++)
			copy_pieces(s, in->parts[l].recv, p0->recv, blk);
		break;
	case CS_IPC_OP_REDUCE_SCATTER:
		/* Staged: a rank's recv may sit inside its send (in place). */
		if (stage_take(s, g, in, blk * g->size)) {
			inst_finish(s, g, in, -ENOMEM, 0, -1);
			return;
		}
		reduce_local(s, g, in, staging_of(in), n * g->size);
		fan_out(s, g, in);
		break;
	case CS_IPC_OP_ALL_GATHER:
		for (uint32_t l = 0; l < g->local_size; l++) {
			struct part *src = &in->parts[l];

			for (uint32_t m = 0; m < g->local_size; m++) {
				uint8_t *dst = in->parts[m].recv +
					       (size_t)g->ranks[l] * blk;

				if (dst != src->send)
					memcpy(dst, src->send, blk);
			}
		}
		break;
	case CS_IPC_OP_BROADCAST:
		root = local_of(g, p0->d.root);
		for (uint32_t l = 0; l < g->local_size; l++)
			if ((int)l != root)
				memcpy(in->parts[l].recv, in->parts[root].recv,
				       blk);
		break;
	case CS_IPC_OP_ALLTOALL: /* send and recv never overlap */
		for (uint32_t l = 0; l < g->local_size; l++)
			for (uint32_t m = 0; m < g->local_size; m++)
				memcpy(in->parts[m].recv +
					       (size_t)g->ranks[l] * blk,
				       in->parts[l].send +
					       (size_t)g->ranks[m] * blk,
				       blk);
		break;
	case CS_IPC_OP_ALLTOALLV_DYN:
	case CS_IPC_OP_ALLTOALLV: {
		uint32_t n = g->size;
		int32_t bi, bj;

		/* counts sent along: the receive side is filled in here */
		if (p0->d.op == CS_IPC_OP_ALLTOALLV_DYN && dyn_local(s, g, in))
			return; /* refused on every rank, nothing moved */

		if (a2av_local_bad(g, in, &bi, &bj)) { /* nothing moved */
			inst_finish_ex(s, g, in, CS_ERR_BAD_DESC,
				       CS_IPC_BAD_A2AV_COUNTS, bi,
				       (uint32_t)bj);
			return;
		}
		for (uint32_t l = 0; l < g->local_size; l++) {
			const struct part *src = &in->parts[l];

			for (uint32_t m = 0; m < g->local_size; m++) {
				struct part *dst = &in->parts[m];
				uint32_t i = (uint32_t)g->ranks[l],
					 j = (uint32_t)g->ranks[m];

				copy_pieces(s,
					    dst->recv + dst->v[3 * n + i] * esz,
					    src->send + src->v[n + j] * esz,
					    src->v[j] * esz);
			}
		}
		break;
	}
	default: /* barrier */
		break;
	}
	inst_finish(s, g, in, 0, 0, -1);
}

/*
 * Hand @in's prepared step to the backend. One that is not its group's
 * oldest unfinished instance, which the backend has no room for now
 * (-EBUSY: it keeps room for every group's oldest), is parked and handed
 * over again once an instance of its group finished (run_ready()); its
 * local part is done and is not redone. Any other refusal fails it.
 */
static void inter_start(struct cs_ipc_server *s, struct group *g,
			struct inst *in)
{
	int ret;

	in->op.pipe = pipe_bytes(s);
	ret = s->be.start_inter_node(s->be.ctx, &in->op);
	in->parked = ret == -EBUSY && in->seq != g->next_done;
	if (ret && !in->parked) {
		in->inter = false;
		inst_finish(s, g, in, ret, 0, -1);
	}
}

/*
 * An all-to-all-v across nodes runs in two steps of the backend, with the
 * same cookie: first every node learns every rank's counts (a2av_counts(),
 * an allreduce of the count matrix, each row from the one node that has
 * it and zero elsewhere, so the sum is the rows bit for bit), so that
 * every node refuses counts that do not add up, the same pair, before
 * anything moved; then the data goes node to node (a2av_data()), an
 * all-to-all with a count per node pair. Staging (a2av_nodes_at()): the
 * matrix, the node counts, this node's outgoing bytes, its incoming ones.
 */
static size_t a2av_need(const struct group *g, const struct inst *in)
{
	uint32_t n = g->size, nn = n / g->local_size;
	size_t esz = esz_of(&in->parts[0]), out = 0, inb = 0;

	for (uint32_t l = 0; l < g->local_size; l++) {
		for (uint32_t j = 0; j < n; j++) {
			out += in->parts[l].v[j] * esz;
			if (in->parts[l].d.op == CS_IPC_OP_ALLTOALLV)
				inb += in->parts[l].v[2 * n + j] * esz;
		}
		if (in->parts[l].d.op == CS_IPC_OP_ALLTOALLV_DYN)
			inb += in->parts[l].d.count * esz; /* its room */
	}
	return a2av_send_at(n, nn) + ((out + 7) & ~(size_t)7) + inb;
}

static void a2av_counts(struct group *g, struct inst *in,
			struct cs_ipc_inter_op *op)
{
	uint32_t n = g->size;
	uint64_t *M = (uint64_t *)staging_of(in);

	memset(M, 0, a2av_nodes_at(n));
	for (uint32_t l = 0; l < g->local_size; l++) {
		uint64_t *row = M + (size_t)g->ranks[l] * 2 * n;

		if (in->parts[l].d.op == CS_IPC_OP_ALLTOALLV_DYN) {
			dyn_row(g, &in->parts[l], row);
			continue;
		}
		/* sendcounts, recvcounts: the table's [0, n), [2n, 3n) */
		memcpy(row, in->parts[l].v, sizeof(uint64_t) * n);
		memcpy(row + n, in->parts[l].v + 2 * n, sizeof(uint64_t) * n);
	}
	op->kind = CS_IPC_INTER_ALLREDUCE;
	op->dtype = CS_I64;
	op->redop = CS_SUM;
	op->count = 2 * (uint64_t)n * n;
	op->block = 0;
	op->buf = M;
	in->a2av_step = 1;
}

/* The nodes @g spans (struct cs_ipc_inter_op.nodes), NULL: every node. */
static const uint64_t *nodes_of(const struct group *g)
{
	for (unsigned i = 0; i < CS_IPC_NODE_WORDS; i++)
		if (g->nodes[i])
			return g->nodes;
	return NULL;
}

/* Part of the group is on other nodes: combine here, then the backend. */
static void run_inter(struct cs_ipc_server *s, struct group *g, struct inst *in)
{
	struct part *p0 = &in->parts[0];
	size_t esz = esz_of(p0), n = p0->d.count, blk = n * esz;
	struct cs_ipc_inter_op op = {
		.cookie = cookie_of(g, in->seq),
		.group = g->name,
		.group_size = g->size,
		.local_size = g->local_size,
		.local_ranks = g->ranks,
		.dtype = (enum cs_dtype)p0->d.dtype,
		.redop = (enum cs_redop)p0->d.redop,
		.root = p0->d.root,
		.count = n,
		.block = n,
		.epoch = g->epoch,
		.regroup = g->regroup,
		.blocked = g->blocked && !g->regroup,
		.nodes = nodes_of(g),
	};
	size_t need = 0;
	int root, ret;

	if (!s->have_be) {
		inst_finish(s, g, in, -EOPNOTSUPP, 0, -1);
		return;
	}
	switch (p0->d.op) {
	case CS_IPC_OP_ALLREDUCE: /* in local rank 0's recv buffer */
		break;
	case CS_IPC_OP_BROADCAST:
		need = blk;
		break;
	case CS_IPC_OP_REDUCE_SCATTER:
		need = blk * g->size;
		break;
	case CS_IPC_OP_ALLTOALL: /* what goes out, what comes in */
		if (g->local_size > 1)
			need = 2 * blk * g->size * g->local_size;
		break;
	case CS_IPC_OP_ALLTOALLV:
	case CS_IPC_OP_ALLTOALLV_DYN:
		need = a2av_need(g, in);
		break;
	default:
		break;
	}
	ret = stage_take(s, g, in, need ? need : 1);
	if (ret) {
		inst_finish(s, g, in, ret, 0, -1);
		return;
	}
	in->in_recv0 = false;
	switch (p0->d.op) {
	case CS_IPC_OP_ALLREDUCE:
		/*
		 * Combined in local rank 0's recv buffer and reduced across
		 * nodes right there: no staging copy in, one copy out fewer
		 * (in place with one trainer per node: no copy at all). Safe
		 * against that trainer's exit: its segments are unmapped only
		 * after the backend's cancel() has let go of the buffer, and
		 * a finished operation no longer touches its buffer
		 * (sidecar/svc_core.c).
		 */
		op.kind = CS_IPC_INTER_ALLREDUCE;
		op.buf = p0->recv;
		in->in_recv0 = true;
		/* One local rank, out of place: the network reads its send
		 * buffer itself (no 1:1 copy into recv first, which took
		 * CPU from the lcores: 64 MiB per operation). The buffers
		 * do not overlap (checked at post). */
		if (g->local_size == 1 && p0->send != p0->recv) {
			op.sendbuf = p0->send;
			break;
		}
		reduce_local(s, g, in, p0->recv, n);
		break;
	case CS_IPC_OP_REDUCE_SCATTER:
		/* The node sum of everything; across nodes the backend
		 * reduces at least the local ranks' blocks (as a ring
		 * reduce-scatter when the group is laid out in node blocks,
		 * op.blocked, else as an allreduce of it all); each rank
		 * keeps its block. */
		op.kind = CS_IPC_INTER_REDUCE_SCATTER;
		op.count = n * g->size;
		/* one local rank: the network reads its send buffer into
		 * the staging buffer (a recv inside it is written only
		 * by fan_out(), after the network is done with it) */
		if (g->local_size == 1) {
			op.sendbuf = p0->send;
			break;
		}
		reduce_local(s, g, in, staging_of(in), n * g->size);
		break;
	case CS_IPC_OP_ALL_GATHER:
		op.kind = CS_IPC_INTER_ALL_GATHER;
		op.count = n * g->size;
		/* In local rank 0's recv buffer: every local rank's block
		 * placed there (rank 0's is there already when in place),
		 * the backend fills the others, and fan_out() copies the
		 * result to the other local ranks only (with one local
		 * rank: nothing to copy). */
		for (uint32_t l = 0; l < g->local_size; l++) {
			uint8_t *own = p0->recv + (size_t)g->ranks[l] * blk;

			if (in->parts[l].send != own)
				memcpy(own, in->parts[l].send, blk);
		}
		op.buf = p0->recv;
		in->in_recv0 = true;
		break;
	case CS_IPC_OP_ALLTOALL:
		/* node to node: L x L blocks from each node to each */
		op.kind = CS_IPC_INTER_ALLTOALL;
		op.block = n * g->local_size * g->local_size;
		op.count = n * g->size * g->local_size;
		if (g->local_size == 1) {
			/* its buffers are laid out so already: no copy */
			op.sendbuf = p0->send;
			op.buf = p0->recv;
			in->in_recv0 = true;
			break;
		}
		a2a_stage(g, in, blk);
		op.sendbuf = staging_of(in);
		op.buf = staging_of(in) + blk * g->size * g->local_size;
		break;
	case CS_IPC_OP_ALLTOALLV:
	case CS_IPC_OP_ALLTOALLV_DYN:
		a2av_counts(g, in, &op);
		break;
	case CS_IPC_OP_BROADCAST:
		op.kind = CS_IPC_INTER_BROADCAST;
		if (g->local_size == 1) {
			/* in its recv buffer: the root's data is there, and
			 * the backend zeroes it on a node without the root */
			op.buf = p0->recv;
			in->in_recv0 = true;
			break;
		}
		root = local_of(g, p0->d.root);
		if (root >= 0)
			memcpy(staging_of(in), in->parts[root].recv, blk);
		break;
	default:
		op.kind = CS_IPC_INTER_BARRIER;
		op.count = 0;
		break;
	}
	if (!op.buf)
		op.buf = staging_of(in);
	in->inter = true;
	in->cookie = op.cookie;
	in->op = op;
	inter_start(s, g, in);
}

/*
 * An all-to-all across nodes is exchanged node to node (run_inter): the
 * ranks of a node must be contiguous in local-rank order, and the group
 * size a multiple of the local size (the backend checks that every node
 * has as many, at the ring index its ranks say).
 */
static bool a2a_layout_ok(const struct group *g)
{
	uint32_t L = g->local_size;

	if (L == g->size)
		return true; /* one node: no layout needed */
	if (!L || g->size % L || g->ranks[0] < 0 || (uint32_t)g->ranks[0] % L)
		return false;
	for (uint32_t l = 1; l < L; l++)
		if (g->ranks[l] != g->ranks[0] + (int32_t)l)
			return false;
	return true;
}

/*
 * @in of a group spanning nodes is refused here (@status, @detail, @peer):
 * the other nodes run their part of it and would wait for this node's
 * until their transport gives up on it ("stopped answering"). The
 * backend tells them why instead (CS_IPC_INTER_VERDICT).
 */
static void send_verdict_at(struct cs_ipc_server *s, struct group *g,
			    uint64_t seq, uint32_t slice, uint32_t slices,
			    int status, unsigned detail, int32_t peer)
{
	struct cs_ipc_inter_op op = {
		.slice = slice,
		.slices = slices,
		.cookie = cookie_of(g, seq),
		.group = g->name,
		.group_size = g->size,
		.local_size = g->local_size,
		.local_ranks = g->ranks,
		.kind = CS_IPC_INTER_VERDICT,
		.epoch = g->epoch,
		.nodes = nodes_of(g),
		.status = status,
		.detail = (uint16_t)detail,
		.peer = peer,
	};
	int ret;

	if (!s->have_be || !s->be.verdicts || g->local_size == g->size)
		return;
	ret = s->be.start_inter_node(s->be.ctx, &op);
	if (ret)
		CS_WARN("group '%s' op %llu: the other nodes are not told "
			"why it failed here (%s)",
			g->name, (unsigned long long)seq, cs_strerror(ret));
}

static void send_verdict(struct cs_ipc_server *s, struct group *g, uint64_t seq,
			 int status, unsigned detail, int32_t peer)
{
	send_verdict_at(s, g, seq, 0, 0, status, detail, peer);
}

/* ---- pipelined device instances (ipc.dev_pipe) ------------------------ */

/*
 * Whether @in is cut into slices: a cross-node allreduce or broadcast of
 * more than ipc.dev_pipe bytes in a sidecar with asynchronous device
 * copies (or ipc.dev_pipe_any). Whether its buffers are on a device
 * does not count: every node must cut the same operation alike (the
 * backend matches the slices' steps by their number), and another node
 * may have it in host memory.
 */
static bool pipe_wanted(const struct cs_ipc_server *s, const struct group *g,
			const struct inst *in)
{
	const struct part *p0 = &in->parts[0];
	uint64_t cut = pipe_bytes(s);

	return cut && g->local_size != g->size &&
	       (p0->d.op == CS_IPC_OP_ALLREDUCE ||
		p0->d.op == CS_IPC_OP_BROADCAST) &&
	       p0->d.count * esz_of(p0) > cut;
}

/*
 * Whether @in must be refused because the group's nodes would cut it
 * differently: its membership check found another cut size on some node
 * (cs_ipc_server_set_pipe), and @in is an allreduce or broadcast over
 * nodes of more bytes than the smallest one (some node cuts it, and not
 * every node alike). Every node of the group holds the same check's
 * result and refuses the same operations, so none of them starts a step
 * (no verdict needed); operations that no node cuts run.
 */
static bool pipe_refused(const struct group *g, const struct inst *in)
{
	const struct part *p0 = &in->parts[0];

	return g->pipe_told && !g->pipe_ok && g->local_size != g->size &&
	       (p0->d.op == CS_IPC_OP_ALLREDUCE ||
		p0->d.op == CS_IPC_OP_BROADCAST) &&
	       p0->d.count * esz_of(p0) > g->pipe_limit;
}

/*
 * The slice of pipelined @in whose step the other nodes wait in for this
 * node's part: the one on the wire here (or parked), else the next one.
 */
static uint32_t pipe_wait_slice(const struct inst *in)
{
	return in->pipe_wire ? in->pipe_net - 1 : in->pipe_net;
}

/*
 * Slice @k of pipelined @in is in (its device pieces, every node's own):
 * combine it here as run_inter() does the whole and hand its step to the
 * backend, with the instance's cookie and the slice's number.
 */
static void pipe_step(struct cs_ipc_server *s, struct group *g, struct inst *in)
{
	struct part *p0 = &in->parts[0];
	uint32_t k = in->pipe_net;
	size_t esz = esz_of(p0), from = (size_t)k * in->pipe_elems;
	size_t m = CS_MIN((size_t)in->pipe_elems, (size_t)p0->d.count - from);
	size_t a = from * esz;
	struct cs_ipc_inter_op op = in->op;
	int root;

	op.slice = k;
	op.slices = in->pipe_n;
	op.count = op.block = m;
	op.sendbuf = NULL;
	if (k) { /* the first slice checks the group (or re-forms it) */
		op.again = true;
		op.regroup = false;
	}
	if (p0->d.op == CS_IPC_OP_ALLREDUCE) {
		op.buf = p0->recv + a;
		if (g->local_size == 1 && p0->send != p0->recv)
			op.sendbuf = p0->send + a;
		else
			reduce_local_at(s, g, in, p0->recv + a, from, m);
	} else if (in->in_recv0) { /* broadcast, one local rank */
		op.buf = p0->recv + a;
	} else {
		op.buf = staging_of(in) + a;
		root = local_of(g, p0->d.root);
		if (root >= 0)
			memcpy(op.buf, in->parts[root].recv + a, m * esz);
	}
	in->pipe_net++;
	in->pipe_wire = true;
	in->inter = true;
	in->op = op;
	inter_start(s, g, in);
}

/* The step of pipelined @in's slice pipe_done ended well: its result to
 * every local rank (fan_out() of that slice), then on. */
static void pipe_step_done(struct cs_ipc_server *s, struct group *g,
			   struct inst *in)
{
	struct part *p0 = &in->parts[0];
	size_t esz = esz_of(p0), from = (size_t)in->pipe_done * in->pipe_elems;
	size_t m = CS_MIN((size_t)in->pipe_elems, (size_t)p0->d.count - from);
	size_t a = from * esz;

	for (uint32_t l = 0; l < g->local_size; l++) {
		struct part *p = &in->parts[l];

		if (!in->in_recv0)
			copy_pieces(s, p->recv + a, staging_of(in) + a,
				    m * esz);
		else if (l)
			copy_pieces(s, p->recv + a, p0->recv + a, m * esz);
	}
	in->pipe_done++;
	in->pipe_wire = false;
	in->inter = false;
	if (pipe_advance(s, g, in))
		run_ready(s, g);
}

/*
 * Move pipelined @in on: issue its pieces, start the next slice's step
 * once its pieces are in and the step before ended, and post its
 * completions once every slice's result is out. A failed copy in: once
 * the step on the wire (if any) ended and its pieces in flight are done,
 * the other nodes are told (a verdict naming the slice they wait in next)
 * and every local rank gets -EIO. Returns true if @in finished.
 */
static bool pipe_advance(struct cs_ipc_server *s, struct group *g,
			 struct inst *in)
{
	pipe_issue(s, g, in);
	if (in->dev_err) {
		if (in->pipe_wire || in->dev_busy)
			return false;
		dev_unlink(s, in);
		in->dev_phase = DEV_NONE;
		send_verdict_at(s, g, in->seq, pipe_wait_slice(in), in->pipe_n,
				-EIO, 0, -1);
		inst_finish(s, g, in, -EIO, 0, -1);
		return true;
	}
	if (!in->pipe_wire && in->pipe_net < in->pipe_n &&
	    in->pipe_in > in->pipe_net &&
	    !in->pipe_in_busy[in->pipe_net % IPC_PIPE_AHEAD]) {
		pipe_step(s, g, in);
		if (in->dev_phase != DEV_PIPE) /* refused: finished */
			return true;
		pipe_issue(s, g, in); /* one slice more may copy in now */
	}
	if (in->pipe_done == in->pipe_n && in->pipe_out == in->pipe_n &&
	    !in->dev_busy) {
		dev_unlink(s, in);
		in->dev_phase = DEV_DONE;
		inst_finish_ex(s, g, in, 0, 0, -1, 0);
		return true;
	}
	return false;
}

/*
 * Cut @in (pipe_wanted()) into slices of ipc.dev_pipe bytes (larger if
 * it would take more than IPC_PIPE_MAX_SLICES: the same on every node)
 * and start its copies in; its first step starts when slice 0 is in.
 */
static void pipe_start(struct cs_ipc_server *s, struct group *g,
		       struct inst *in)
{
	struct part *p0 = &in->parts[0];
	size_t esz = esz_of(p0);
	uint64_t n = p0->d.count;
	uint64_t e = s->cfg.dev_pipe / esz;
	struct cs_ipc_inter_op op = {
		.cookie = cookie_of(g, in->seq),
		.group = g->name,
		.group_size = g->size,
		.local_size = g->local_size,
		.local_ranks = g->ranks,
		.kind = p0->d.op == CS_IPC_OP_ALLREDUCE
				? CS_IPC_INTER_ALLREDUCE
				: CS_IPC_INTER_BROADCAST,
		.dtype = (enum cs_dtype)p0->d.dtype,
		.redop = (enum cs_redop)p0->d.redop,
		.root = p0->d.root,
		.epoch = g->epoch,
		.regroup = g->regroup,
		.blocked = g->blocked && !g->regroup,
		.nodes = nodes_of(g),
	};
	int ret;

	if (e < (n + IPC_PIPE_MAX_SLICES - 1) / IPC_PIPE_MAX_SLICES)
		e = (n + IPC_PIPE_MAX_SLICES - 1) / IPC_PIPE_MAX_SLICES;
	if (!e)
		e = 1;
	/* a broadcast with several local ranks goes through the staging */
	ret = stage_take(s, g, in,
			 p0->d.op == CS_IPC_OP_BROADCAST && g->local_size > 1
				 ? n * esz
				 : 1);
	if (ret) {
		inst_finish(s, g, in, ret, 0, -1);
		return;
	}
	in->in_recv0 = p0->d.op == CS_IPC_OP_ALLREDUCE || g->local_size == 1;
	in->op = op;
	in->cookie = op.cookie;
	in->inter = false;
	in->pipe_elems = e;
	in->pipe_n = (uint32_t)((n + e - 1) / e);
	s->st.pipe_ops++;
	s->st.pipe_slices += in->pipe_n;
	in->pipe_net = in->pipe_done = in->pipe_in = in->pipe_out = 0;
	in->pipe_wire = false;
	memset(in->pipe_in_busy, 0, sizeof(in->pipe_in_busy));
	in->pout_l = in->pout_r = 0;
	in->pout_at = 0;
	dev_enqueue(s, g, in, DEV_PIPE);
	pipe_advance(s, g, in);
}

/* Every local rank posted @in, and it may start (run_ready()): run it. */
static void try_run(struct cs_ipc_server *s, struct group *g, struct inst *in)
{
	struct part *p0 = &in->parts[0];
	int32_t bad_rank = -1; /* -1 too: a rank not numbered yet */
	bool bad = false;

	for (uint32_t l = 0; l < g->local_size; l++) {
		struct part *p = &in->parts[l];

		if (p->bad && !bad) {
			bad_rank = g->ranks[l];
			bad = true;
		}
	}
	if (bad) {
		send_verdict(s, g, in->seq, CS_ERR_BAD_DESC, CS_IPC_BAD_PEER,
			     bad_rank);
		inst_finish(s, g, in, CS_ERR_BAD_DESC, CS_IPC_BAD_PEER,
			    bad_rank);
		return;
	}
	for (uint32_t l = 1; l < g->local_size; l++) {
		const struct cs_ipc_sqe *a = &p0->d, *b = &in->parts[l].d;

		if (a->op != b->op ||
		    (a->op != CS_IPC_OP_ALLTOALLV_DYN &&
		     a->count != b->count) ||
		    (a->op != CS_IPC_OP_BARRIER && a->dtype != b->dtype) ||
		    ((a->op == CS_IPC_OP_ALLREDUCE ||
		      a->op == CS_IPC_OP_REDUCE_SCATTER) &&
		     a->redop != b->redop) ||
		    (a->op == CS_IPC_OP_BROADCAST && a->root != b->root)) {
			send_verdict(s, g, in->seq, CS_ERR_BAD_DESC,
				     CS_IPC_BAD_MISMATCH, g->ranks[l]);
			inst_finish(s, g, in, CS_ERR_BAD_DESC,
				    CS_IPC_BAD_MISMATCH, g->ranks[l]);
			return;
		}
	}
	/* every local rank is numbered now (not yet when one posts) */
	if ((p0->d.op == CS_IPC_OP_ALLTOALL || is_a2av(p0->d.op)) &&
	    !a2a_layout_ok(g)) {
		send_verdict(s, g, in->seq, CS_ERR_BAD_DESC, CS_IPC_BAD_LAYOUT,
			     -1);
		inst_finish(s, g, in, CS_ERR_BAD_DESC, CS_IPC_BAD_LAYOUT, -1);
		return;
	}
	if (pipe_refused(g, in)) {
		inst_finish_ex(s, g, in, CS_ERR_BAD_DESC, CS_IPC_BAD_PIPE,
			       g->pipe_node, g->pipe_val);
		return;
	}
	/* large enough to be cut in slices (on every node alike): each
	 * slice's network step beside the next one's copies in */
	if (pipe_wanted(s, g, in)) {
		pipe_start(s, g, in);
		return;
	}
	/* device inputs: copied in first, run when they are all there
	 * (dev_pump()), while other instances go on */
	in->dev_red = dev_red_wanted(s, g, in);
	if (in->dev_red && !dev_needs(g, in, DEV_IN)) {
		s->st.dev_reduce_ops++;
		dev_start(s, g, in, DEV_RED);
		return;
	}
	if (dev_async(s) && dev_needs(g, in, DEV_IN)) {
		dev_start(s, g, in, DEV_IN);
		return;
	}
	if (s->dev_ops && !dev_async(s) && dev_in(s, g, in)) {
		inst_finish(s, g, in, -EIO, 0, -1);
		return;
	}
	run_now(s, g, in);
}

static void run_now(struct cs_ipc_server *s, struct group *g, struct inst *in)
{
	if (g->local_size == g->size)
		run_local(s, g, in);
	else
		run_inter(s, g, in);
}

/*
 * Whether instance @seq of @g, which every local rank posted, may start
 * now (the ones before it have). The group's oldest unfinished one
 * always may; later ones run beside it, up to ipc.group_inflight from the
 * oldest, except while the oldest is the group's first operation in its
 * view (the nodes check its membership first, which may refuse the
 * group) or re-forms the group (its size may change).
 */
static bool may_start(const struct cs_ipc_server *s, const struct group *g,
		      uint64_t seq)
{
	if (seq == g->next_done)
		return true;
	if (g->regroup || g->next_done == g->seq_base)
		return false;
	return seq - g->next_done < s->cfg.group_inflight;
}

/* Start, in posting order, every instance of @g that may start. */
static void run_ready(struct cs_ipc_server *s, struct group *g)
{
	/* parked steps first: nothing newer starts before them */
	for (uint64_t q = g->next_done; q < g->next_run; q++) {
		struct inst *in = &g->win[q % IPC_WINDOW];

		if (!in->active || in->done || in->seq != q || !in->parked)
			continue;
		inter_start(s, g, in);
		if (in->seq == q && in->parked)
			return;
	}
	while (!g->failed) {
		uint64_t q = g->next_run;
		struct inst *in = &g->win[q % IPC_WINDOW];

		if (!in->active || in->done || in->seq != q ||
		    in->arrived < g->local_size || !may_start(s, g, q))
			return;
		g->next_run = q + 1;
		try_run(s, g, in);
		if (in->seq == q && in->parked)
			return;
	}
}

/*
 * The running instance of @g that the backend calls @cookie, or NULL
 * (stale: finished, cancelled, or of an older incarnation). Its index
 * since the view began is the cookie's low half (cookie_of()).
 */
static struct inst *inst_of(struct group *g, uint64_t cookie)
{
	uint64_t seq = g->next_done +
		       (uint32_t)((uint32_t)cookie -
				  (uint32_t)(g->next_done - g->seq_base));
	struct inst *in = &g->win[seq % IPC_WINDOW];

	if (seq - g->next_done >= IPC_MAX_GROUP_INFLIGHT || !in->active ||
	    in->done || in->seq != seq || !in->inter || in->cookie != cookie)
		return NULL;
	return in;
}

/* The group in use that @cookie names (its top 16 bits), or NULL. */
static struct group *group_of(struct cs_ipc_server *s, uint64_t cookie)
{
	uint32_t gid = (uint32_t)(cookie >> 48);

	if (gid >= s->cfg.max_groups || !s->groups[gid].used)
		return NULL;
	return &s->groups[gid];
}

/*
 * An all-to-all-v's count matrix is here (a2av_counts()): refuse counts
 * that do not add up (every node finds the same pair: nothing is sent),
 * else pack this node's blocks and hand the data step to the backend.
 */
static void a2av_data(struct cs_ipc_server *s, struct group *g, struct inst *in)
{
	uint32_t n = g->size, L = g->local_size, nn = n / L;
	uint8_t *st = staging_of(in), *out = st + a2av_send_at(n, nn), *o;
	uint64_t *M = (uint64_t *)st;
	uint64_t *nc = (uint64_t *)(st + a2av_nodes_at(n)), total = 0;
	size_t esz = esz_of(&in->parts[0]);
	struct cs_ipc_inter_op op = in->op;
	int32_t bi, bj;

	in->inter = false;
	if (in->parts[0].vn != n) { /* re-formed at another size */
		inst_finish(s, g, in, CS_ERR_EPOCH, CS_IPC_EPOCH_RESIZED, -1);
		return;
	}
	if (in->parts[0].d.op == CS_IPC_OP_ALLTOALLV_DYN &&
	    dyn_matrix(s, g, in, M))
		return; /* every node refuses it alike: nothing sent */
	if (a2av_matrix_bad(M, n, &bi, &bj)) {
		inst_finish_ex(s, g, in, CS_ERR_BAD_DESC,
			       CS_IPC_BAD_A2AV_COUNTS, bi, (uint32_t)bj);
		return;
	}
	for (uint32_t k = 0; k < nn; k++) {
		nc[k] = nc[nn + k] = 0;
		for (uint32_t l = 0; l < L; l++)
			for (uint32_t m = 0; m < L; m++) {
				uint32_t r = (uint32_t)g->ranks[l],
					 q = (uint32_t)g->ranks[m];

				nc[k] += M[(size_t)r * 2 * n + k * L + m];
				nc[nn + k] +=
					M[(size_t)(k * L + l) * 2 * n + q];
			}
	}
	for (size_t x = 0; x < (size_t)n * n; x++)
		total |= M[(x / n) * 2 * n + x % n];
	if (!total) { /* nothing to move anywhere: every node sees it */
		inst_finish(s, g, in, 0, 0, -1);
		return;
	}
	o = out;
	for (uint32_t j = 0; j < nn; j++)
		for (uint32_t l = 0; l < L; l++)
			for (uint32_t m = 0; m < L; m++) {
				const struct part *p = &in->parts[l];
				size_t b = p->v[j * L + m] * esz;

				copy_pieces(s, o,
					    p->send + p->v[n + j * L + m] * esz,
					    b);
				o += b;
			}
	in->a2av_recv_at =
		a2av_send_at(n, nn) + (((size_t)(o - out) + 7) & ~(size_t)7);
	op.kind = CS_IPC_INTER_ALLTOALL;
	op.dtype = (enum cs_dtype)in->parts[0].d.dtype;
	op.sendbuf = out;
	op.buf = st + in->a2av_recv_at;
	op.a2a_counts = nc;
	op.count = 0;
	for (uint32_t k = 0; k < nn; k++)
		op.count += nc[nn + k];
	op.block = 0;
	op.again = true;
	op.regroup = false;
	in->a2av_step = 2;
	in->inter = true;
	in->op = op;
	inter_start(s, g, in);
}

void cs_ipc_server_inter_done(struct cs_ipc_server *s, uint64_t cookie,
			      int status)
{
	cs_ipc_server_inter_fail(s, cookie, status, 0, -1);
}

void cs_ipc_server_inter_fail(struct cs_ipc_server *s, uint64_t cookie,
			      int status, unsigned detail, int32_t peer)
{
	cs_ipc_server_inter_fail_ex(s, cookie, status, detail, peer, 0);
}

void cs_ipc_server_inter_fail_ex(struct cs_ipc_server *s, uint64_t cookie,
				 int status, unsigned detail, int32_t peer,
				 uint32_t aux)
{
	struct group *g = group_of(s, cookie);
	struct inst *in;

	if (!g)
		return;
	in = inst_of(g, cookie);
	if (!in)
		return;
	if (!status && in->pipe_n) { /* a slice's step: the next ones */
		pipe_step_done(s, g, in);
		run_ready(s, g);
		return;
	}
	if (!status && in->a2av_step == 1) { /* its counts are in */
		a2av_data(s, g, in);
		run_ready(s, g);
		return;
	}
	if (!status)
		fan_out(s, g, in);
	in->inter = false;
	inst_finish_ex(s, g, in, status, status ? detail : 0,
		       status ? peer : -1, status ? aux : 0);
	run_ready(s, g);
}

static void group_break(struct cs_ipc_server *s, struct group *g, int status,
			unsigned detail, int32_t peer, uint32_t aux);

void cs_ipc_server_inter_refuse(struct cs_ipc_server *s, uint64_t cookie,
				int status, unsigned detail, int32_t peer,
				uint32_t aux)
{
	struct group *g = group_of(s, cookie);
	struct inst *in;

	if (!g || !status)
		return;
	in = inst_of(g, cookie);
	if (!in)
		return;
	/* the backend let go of it: no cancel() from end_pending() */
	in->inter = false;
	group_break(s, g, status, detail, peer, aux);
}

/*
 * End every pending instance of @g with @status. A cross-node step still
 * running is taken back from the backend first: it works in the staging
 * buffer or a member's own segment, which may be about to go.
 */
static void end_pending(struct cs_ipc_server *s, struct group *g, int status,
			unsigned detail, int32_t peer, uint32_t aux)
{
	uint64_t from = g->next_done;

	/* oldest first: each one finished moves next_done on */
	for (uint64_t q = from; q < from + IPC_WINDOW; q++) {
		struct inst *in = &g->win[q % IPC_WINDOW];

		if (!in->active || in->done || in->seq != q)
			continue;
		if (in->inter && !in->parked && s->have_be && s->be.cancel)
			s->be.cancel(s->be.ctx, in->cookie);
		inst_finish_ex(s, g, in, status, detail, peer, aux);
	}
}

/*
 * Fail every pending instance of @g: a member is gone (@detail
 * CS_IPC_LOST_RANK: @lost is a rank of the group), or a whole node
 * (CS_IPC_LOST_NODE: @lost is its node rank, lost in view @epoch).
 */
static void group_fail(struct cs_ipc_server *s, struct group *g, int32_t lost,
		       unsigned detail, uint32_t epoch)
{
	if (!g->failed) {
		g->failed = true;
		g->fail_status = CS_ERR_PEER_LOST;
		g->lost_rank = lost;
		g->lost_detail = (uint16_t)detail;
		g->lost_epoch = epoch;
		if (detail == CS_IPC_LOST_NODE)
			CS_INFO("group '%s': node %d lost (view epoch %u); "
				"pending and later operations fail",
				g->name, (int)lost, epoch);
		else
			CS_INFO("group '%s': rank %d gone; pending and later "
				"operations fail",
				g->name, (int)lost);
	}
	end_pending(s, g, g->fail_status, g->lost_detail, g->lost_rank,
		    g->lost_epoch);
}

/*
 * Fail @g for good with @status (not a lost member): its pending and later
 * operations complete with it, @detail, @peer and @aux (the completions'
 * aux word); joining it again is refused, so the trainers form a new one.
 */
static void group_break(struct cs_ipc_server *s, struct group *g, int status,
			unsigned detail, int32_t peer, uint32_t aux)
{
	if (!g->failed) {
		g->failed = true;
		g->fail_status = status;
		g->lost_rank = peer;
		g->lost_detail = (uint16_t)detail;
		g->lost_epoch = aux;
	}
	end_pending(s, g, g->fail_status, g->lost_detail, g->lost_rank,
		    g->lost_epoch);
}

/*
 * ipc.match_deadline: the oldest pending operation of a group waits for a
 * local rank that does not post it (a live trainer stuck elsewhere, or a
 * local rank that never joined). Its parts that did arrive complete with
 * CS_ERR_TIMEOUT naming that rank, and the group fails: the late rank's
 * operation would pair with the others' next one otherwise. Counted from
 * the first part's arrival, or from when the operation became the
 * group's oldest (the ranks may wait for the one before to post it).
 * Returns the number of groups failed.
 */
static int check_deadlines(struct cs_ipc_server *s, cs_ns_t now)
{
	int n = 0;

	if (!s->cfg.match_deadline)
		return 0;
	for (uint32_t i = 0; i < s->cfg.max_groups; i++) {
		struct group *g = &s->groups[i];
		struct inst *in;
		cs_ns_t since;
		uint32_t l;

		if (!g->used || g->failed)
			continue;
		in = &g->win[g->next_done % IPC_WINDOW];
		if (!in->active || in->seq != g->next_done || in->inter ||
		    !in->arrived || in->arrived >= g->local_size)
			continue;
		since = CS_MAX(in->first_at, g->head_at);
		if (now - since < s->cfg.match_deadline)
			continue;
		for (l = 0; l < g->local_size && in->parts[l].arrived; l++)
			;
		CS_WARN("group '%s': op %llu: local rank %u (rank %d) did "
			"not post it within ipc.match_deadline (%llu ms); %u "
			"of %u posted; the group fails with CS_ERR_TIMEOUT",
			g->name, (unsigned long long)in->seq, l,
			(int)g->ranks[l],
			(unsigned long long)(s->cfg.match_deadline / 1000000),
			in->arrived, g->local_size);
		group_break(s, g, CS_ERR_TIMEOUT, CS_IPC_TIMEOUT_UNPOSTED,
			    g->ranks[l], l);
		n++;
	}
	return n;
}

cs_ns_t cs_ipc_server_next_deadline(const struct cs_ipc_server *s)
{
	cs_ns_t next = 0;

	/* connections that owe their hello (check_hello) */
	for (uint32_t i = 0; i < s->tr_end; i++) {
		const struct trainer *t = s->tr[i];
		cs_ns_t at;

		if (!t || t->hello)
			continue;
		at = t->accepted_at + s->cfg.hello_deadline;
		if (!next || at < next)
			next = at;
	}
	if (!s->cfg.match_deadline)
		return next;
	for (uint32_t i = 0; i < s->cfg.max_groups; i++) {
		const struct group *g = &s->groups[i];
		const struct inst *in;
		cs_ns_t at;

		if (!g->used || g->failed)
			continue;
		in = &g->win[g->next_done % IPC_WINDOW];
		if (!in->active || in->seq != g->next_done || in->inter ||
		    !in->arrived || in->arrived >= g->local_size)
			continue;
		at = CS_MAX(in->first_at, g->head_at) + s->cfg.match_deadline;
		if (!next || at < next)
			next = at;
	}
	return next;
}

int cs_ipc_server_regroup(struct cs_ipc_server *s, uint64_t cookie,
			  uint32_t size, const int32_t *ranks)
{
	struct group *g = group_of(s, cookie);
	struct inst *in;

	if (!g || g->failed || !g->elastic)
		return -ENOENT;
	in = inst_of(g, cookie);
	if (!in)
		return -ENOENT;
	if (size < g->local_size || size > IPC_MAX_GROUP_SIZE)
		return -EINVAL;
	for (uint32_t l = 0; l < g->local_size; l++)
		if (ranks[l] < 0 || (uint32_t)ranks[l] >= size)
			return -EINVAL;
	if (size != g->size)
		CS_INFO("group '%s' re-formed in view epoch %u: size %u -> %u",
			g->name, g->epoch, g->size, size);
	for (uint32_t l = 0; l < g->local_size; l++) {
		g->ranks[l] = ranks[l];
		if (g->m[l])
			g->m[l]->rank = ranks[l];
	}
	g->size = size;
	g->regroup = false;
	return 0;
}

void cs_ipc_server_set_node(struct cs_ipc_server *s, uint32_t node)
{
	s->node = node;
}

int cs_ipc_server_set_blocked(struct cs_ipc_server *s, uint64_t cookie,
			      bool blocked)
{
	struct group *g = group_of(s, cookie);

	if (!g || g->failed || !inst_of(g, cookie))
		return -ENOENT;
	g->blocked = blocked;
	return 0;
}

int cs_ipc_server_set_pipe(struct cs_ipc_server *s, uint64_t cookie, bool ok,
			   uint64_t limit, int32_t node, uint32_t val)
{
	struct group *g = group_of(s, cookie);

	if (!g || g->failed || !inst_of(g, cookie))
		return -ENOENT;
	if (!ok && !g->pipe_told)
		CS_WARN("group '%s': node %d cuts large allreduces and "
			"broadcasts at ipc.dev_pipe=%u bytes, this node at "
			"%llu (0: not cut): those of more than %llu bytes are "
			"refused; set the same ipc.dev_pipe (and "
			"ipc.dev_pipe_any, GPU support) on every sidecar",
			g->name, (int)node, val,
			(unsigned long long)pipe_bytes(s),
			(unsigned long long)limit);
	g->pipe_told = true;
	g->pipe_ok = ok;
	g->pipe_limit = limit;
	g->pipe_node = node;
	g->pipe_val = val;
	return 0;
}

unsigned cs_ipc_server_view(struct cs_ipc_server *s, uint32_t epoch,
			    int32_t lost_node)
{
	unsigned n = 0;

	s->epoch = epoch;
	for (uint32_t i = 0; i < s->cfg.max_groups; i++) {
		struct group *g = &s->groups[i];

		/* groups on this node alone never used the lost node */
		if (!g->used || g->local_size == g->size || g->epoch == epoch)
			continue;
		if (!g->failed)
			n++;
		if (g->elastic && !g->failed) {
			/* what was in flight used the old view: it ends, the
			 * group goes on in the new one */
			CS_INFO("group '%s' (elastic): view epoch %u, node %d "
				"lost; pending operations fail, the next one "
				"re-forms the group",
				g->name, epoch, (int)lost_node);
			end_pending(s, g,
				    lost_node < 0 ? CS_ERR_EPOCH
						  : CS_ERR_PEER_LOST,
				    lost_node < 0 ? CS_IPC_EPOCH_GREW
						  : CS_IPC_LOST_NODE,
				    lost_node, epoch);
			g->epoch = epoch;
			g->regroup = true;
			g->blocked = false; /* until the next check says */
			g->pipe_told = false; /* ... on other nodes */
			g->seq_base = g->next_done;
			continue;
		}
		if (lost_node < 0) /* the view grew */
			group_break(s, g, CS_ERR_EPOCH, CS_IPC_EPOCH_GREW, -1,
				    epoch);
		else
			group_fail(s, g, lost_node, CS_IPC_LOST_NODE, epoch);
	}
	return n;
}

/* The last member left: drop its own pending parts quietly. */
static void group_cancel(struct cs_ipc_server *s, struct group *g)
{
	end_pending(s, g, CS_ERR_CANCELLED, 0, -1, 0);
}

static void group_free(struct cs_ipc_server *s, struct group *g)
{
	for (size_t i = 0;
	     g->part_mem && i < (size_t)IPC_WINDOW * g->local_size; i++)
		free(g->part_mem[i].v);
	free(g->win);
	free(g->part_mem);
	for (uint32_t i = 0; g->pool && i < s->cfg.group_inflight; i++)
		free(g->pool[i].buf);
	free(g->pool);
	uint32_t id = g->id, gen = g->gen;

	memset(g, 0, sizeof(*g));
	g->id = id;
	g->gen = gen + 1;
}

static void member_remove(struct cs_ipc_server *s, struct member *m)
{
	struct group *g = m->g;

	g->m[m->local_rank] = NULL;
	g->ranks[m->local_rank] = -1;
	m->t->groups[m->handle] = NULL;
	if (--g->nmembers == 0) {
		group_free(s, g);
		s->st.groups--;
	}
	free(m);
}

/* ---- descriptors ------------------------------------------------------ */

/* @off/@len must lie inside the segment; returns the pointer or NULL. */
static uint8_t *seg_range(struct seg *sg, uint64_t off, uint64_t len)
{
	if (off > sg->len || len > sg->len - off)
		return NULL;
	return (uint8_t *)sg->base + off;
}

static struct seg *seg_get(struct cs_ipc_server *s, struct trainer *t,
			   uint32_t id)
{
	if (id >= s->cfg.max_segments || !t->segs[id].used)
		return NULL;
	return &t->segs[id];
}

static bool overlap(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
	return a < b + bl && b < a + al;
}

/*
 * An all-to-all-v's count table (CS_IPC_A2AV_BYTES in the trainer's
 * memory): copied into s->vtab (the trainer may change it after this),
 * then every block checked against its buffer's segment. Zero-count
 * blocks are not checked (their displacement is never used). Returns 0 or
 * an enum cs_ipc_bad.
 */
static unsigned validate_a2av(struct cs_ipc_server *s, struct member *m,
			      const struct cs_ipc_sqe *d, struct part *p)
{
	struct trainer *t = m->t;
	uint32_t n = m->g->size;
	size_t esz = cs_dtype_size((enum cs_dtype)d->dtype);
	uint64_t max = s->cfg.max_op_bytes / esz, ext[2] = { 0, 0 };
	uint64_t sum[2] = { 0, 0 };
	struct seg *ts = seg_get(s, t, d->reserved0);
	const uint8_t *tab;

	bool dyn = d->op == CS_IPC_OP_ALLTOALLV_DYN;

	if (dyn ? d->count > max : d->count)
		return CS_IPC_BAD_COUNT;
	if (dyn && (d->root & ~(CS_IPC_DYN_BAD_INPUT | CS_IPC_DYN_TAG_MASK)))
		return CS_IPC_BAD_ROOT;
	if (!ts || ts->dev || d->reserved1 % 8)
		return CS_IPC_BAD_A2AV_TABLE;
	tab = seg_range(ts, d->reserved1, CS_IPC_A2AV_BYTES(n));
	if (!tab)
		return CS_IPC_BAD_A2AV_TABLE;
	if (s->vtab_cap < 4 * (size_t)n) {
		uint64_t *v = realloc(s->vtab, 4 * (size_t)n * sizeof(*v));

		if (!v)
			return CS_IPC_BAD_COUNT;
		s->vtab = v;
		s->vtab_cap = 4 * (size_t)n;
	}
	memcpy(s->vtab, tab, CS_IPC_A2AV_BYTES(n));
	p->vuser = dyn ? (uint64_t *)tab : NULL;
	p->vuser_seg = dyn ? ts : NULL;
	if (dyn) /* the receive side: filled in when the counts are known */
		ext[1] = d->count;
	for (uint32_t k = 0; k < (dyn ? 1u : 2u); k++) { /* send, recv */
		const uint64_t *c = s->vtab + 2 * k * n, *dp = c + n;

		for (uint32_t j = 0; j < n; j++) {
			if (c[j] > max || (c[j] && dp[j] > max))
				return CS_IPC_BAD_COUNT;
			sum[k] += c[j];
			if (c[j] && dp[j] + c[j] > ext[k])
				ext[k] = dp[j] + c[j];
		}
		if (sum[k] > max)
			return CS_IPC_BAD_COUNT;
	}
	p->vslen = ext[0] * esz;
	p->vrlen = ext[1] * esz;
	p->send_seg = seg_get(s, t, d->send_seg);
	if (!p->send_seg)
		return CS_IPC_BAD_SEND_SEG;
	p->recv_seg = seg_get(s, t, d->recv_seg);
	if (!p->recv_seg)
		return CS_IPC_BAD_RECV_SEG;
	if (d->send_off % esz || d->recv_off % esz)
		return CS_IPC_BAD_ALIGN;
	p->send = seg_range(p->send_seg, d->send_off, p->vslen);
	if (!p->send)
		return CS_IPC_BAD_SEND_RANGE;
	p->recv = seg_range(p->recv_seg, d->recv_off, p->vrlen);
	if (!p->recv)
		return CS_IPC_BAD_RECV_RANGE;
	if (overlap(p->send, p->vslen, p->recv, p->vrlen))
		return CS_IPC_BAD_OVERLAP;
	return 0;
}

/*
 * Check @d (a private copy) for member @m and fill @p. Returns 0 or the
 * enum cs_ipc_bad of the first bad field.
 */
static unsigned validate(struct cs_ipc_server *s, struct member *m,
			 const struct cs_ipc_sqe *d, struct part *p)
{
	struct trainer *t = m->t;
	struct group *g = m->g;
	size_t esz = cs_dtype_size((enum cs_dtype)d->dtype);
	uint64_t slen = 0, rlen = 0, max_elems;
	bool reducing = d->op == CS_IPC_OP_ALLREDUCE ||
			d->op == CS_IPC_OP_REDUCE_SCATTER;
	bool needs_send =
		d->op != CS_IPC_OP_BROADCAST && d->op != CS_IPC_OP_BARRIER;

	if (d->flags || (!is_a2av(d->op) && (d->reserved0 || d->reserved1)))
		return CS_IPC_BAD_FLAGS;
	if (d->op == CS_IPC_OP_BARRIER)
		return d->count ? CS_IPC_BAD_COUNT : 0;
	if (!esz)
		return CS_IPC_BAD_DTYPE;
	if (reducing && d->redop >= CS_REDOP_COUNT)
		return CS_IPC_BAD_REDOP;
	/* a group joined with no rank yet learns its size at its first
	 * operation: only one that needs none can be that */
	if (!g->size && d->op != CS_IPC_OP_ALLREDUCE)
		return CS_IPC_BAD_OP;
	if (is_a2av(d->op))
		return validate_a2av(s, m, d, p);
	max_elems = s->cfg.max_op_bytes / esz;
	if (d->op == CS_IPC_OP_REDUCE_SCATTER ||
	    d->op == CS_IPC_OP_ALL_GATHER || d->op == CS_IPC_OP_ALLTOALL)
		max_elems /= g->size;
	if (d->count == 0 || d->count > max_elems)
		return CS_IPC_BAD_COUNT;
	switch (d->op) {
	case CS_IPC_OP_ALLREDUCE:
		slen = rlen = d->count * esz;
		break;
	case CS_IPC_OP_REDUCE_SCATTER:
		slen = d->count * esz * g->size;
		rlen = d->count * esz;
		break;
	case CS_IPC_OP_ALL_GATHER:
		slen = d->count * esz;
		rlen = d->count * esz * g->size;
		break;
	case CS_IPC_OP_ALLTOALL: /* the layout: in try_run() */
		slen = rlen = d->count * esz * g->size;
		break;
	default: /* broadcast: in place in the recv buffer */
		if (d->root >= g->size)
			return CS_IPC_BAD_ROOT;
		rlen = d->count * esz;
		if (d->send_seg || d->send_off)
			return CS_IPC_BAD_SEND_SEG;
		break;
	}
	p->recv_seg = seg_get(s, t, d->recv_seg);
	if (!p->recv_seg)
		return CS_IPC_BAD_RECV_SEG;
	if (needs_send) {
		p->send_seg = seg_get(s, t, d->send_seg);
		if (!p->send_seg)
			return CS_IPC_BAD_SEND_SEG;
		if (d->send_off % esz)
			return CS_IPC_BAD_ALIGN;
		p->send = seg_range(p->send_seg, d->send_off, slen);
		if (!p->send)
			return CS_IPC_BAD_SEND_RANGE;
	}
	if (d->recv_off % esz)
		return CS_IPC_BAD_ALIGN;
	p->recv = seg_range(p->recv_seg, d->recv_off, rlen);
	if (!p->recv)
		return CS_IPC_BAD_RECV_RANGE;
	if (needs_send && overlap(p->send, slen, p->recv, rlen)) {
		size_t own = (size_t)m->rank * d->count * esz;
		bool in_place =
			(d->op == CS_IPC_OP_ALLREDUCE && p->send == p->recv) ||
			(d->op == CS_IPC_OP_REDUCE_SCATTER &&
			 p->send + own == p->recv) ||
			(d->op == CS_IPC_OP_ALL_GATHER &&
			 p->recv + own == p->send);

		if (!in_place)
			return CS_IPC_BAD_OVERLAP;
	}
	return 0;
}

/* Take one descriptor (already copied out of the ring). */
static void take(struct cs_ipc_server *s, struct trainer *t,
		 const struct cs_ipc_sqe *d)
{
	struct member *m;
	struct group *g;
	struct inst *in;
	struct part *p, tmp = { 0 };
	uint64_t *v;
	uint32_t vcap;
	unsigned bad;

	t->inflight++;
	if (cs_ipc_ps_is_op(d->op)) { /* ipc_ps.c */
		cs_ipc_ps_take(s, t, d);
		return;
	}
	if (cs_ipc_p2p_is_op(d->op)) { /* ipc_p2p.c */
		cs_ipc_p2p_take(s, t, d);
		return;
	}
	if (d->op == CS_IPC_OP_NONE || d->op >= CS_IPC_OP_COUNT) {
		s->st.bad_desc++;
		complete(s, t, d->user_id, CS_ERR_BAD_DESC, CS_IPC_BAD_OP, -1);
		return;
	}
	if (d->group >= s->cfg.max_groups || !t->groups[d->group]) {
		s->st.bad_desc++;
		complete(s, t, d->user_id, CS_ERR_BAD_DESC, CS_IPC_BAD_GROUP,
			 -1);
		return;
	}
	m = t->groups[d->group];
	g = m->g;
	if (g->failed) {
		complete_ex(s, t, d->user_id, g->fail_status, g->lost_detail,
			    g->lost_rank, g->lost_epoch);
		return;
	}
	bad = validate(s, m, d, &tmp);
	if (bad) {
		s->st.bad_desc++;
		/* It still takes its place in the group's sequence, so the
		 * other ranks' matching op fails too instead of hanging. */
		tmp.send_seg = tmp.recv_seg = tmp.vuser_seg = NULL;
		tmp.vuser = NULL;
		tmp.send = tmp.recv = NULL;
	}
	in = &g->win[m->seq % IPC_WINDOW];
	if (!in->active) {
		in->active = true;
		in->seq = m->seq;
		in->arrived = 0;
		in->first_at = s->now;
	}
	p = &in->parts[m->local_rank];
	if (in->seq != m->seq || in->done || p->arrived) {
		/* Cannot happen (see IPC_WINDOW); be safe. */
		CS_ERR("group '%s': window slot clash at seq %llu", g->name,
		       (unsigned long long)m->seq);
		complete(s, t, d->user_id, -EOVERFLOW, 0, -1);
		return;
	}
	m->seq++;
	v = p->v;
	vcap = p->vcap;
	if (!bad && is_a2av(d->op) && vcap < 4 * g->size) {
		uint64_t *nv = realloc(v, 4 * (size_t)g->size * sizeof(*nv));

		if (nv) {
			v = nv;
			vcap = 4 * g->size;
		} else { /* as a bad one: it still takes its place */
			bad = CS_IPC_BAD_COUNT;
			s->st.bad_desc++;
			tmp.send_seg = tmp.recv_seg = tmp.vuser_seg = NULL;
			tmp.send = tmp.recv = NULL;
			tmp.vuser = NULL;
		}
	}
	*p = tmp;
	p->v = v;
	p->vcap = vcap;
	if (!bad && is_a2av(d->op)) {
		memcpy(p->v, s->vtab, CS_IPC_A2AV_BYTES(g->size));
		p->vn = g->size;
	}
	p->arrived = true;
	p->bad = (uint16_t)bad;
	p->t = t;
	p->user_id = d->user_id;
	p->d = *d;
	if (p->send_seg)
		p->send_seg->refs++;
	if (p->recv_seg)
		p->recv_seg->refs++;
	if (p->vuser_seg)
		p->vuser_seg->refs++;
	in->arrived++;
	cs_obs_ipc_post(s->now, g->id, g->name, g->size, g->local_size,
			g->ranks, in->seq, m->local_rank, d->op,
			d->count); /* observe/ */
	run_ready(s, g);
}

static int poll_sq(struct cs_ipc_server *s, struct trainer *t)
{
	struct cs_ipc_sqe d[CS_IPC_RING_SLOTS];
	unsigned room, n;
	int done;

	done = flush_backlog(t);
	if (cs_ring_error(&t->sq) || cs_ring_error(&t->cq))
		return done;
	room = CS_IPC_RING_SLOTS - t->inflight;
	n = cs_ring_dequeue_burst(&t->sq, d, CS_MIN(room, s->cfg.sq_burst));
	for (unsigned i = 0; i < n; i++)
		take(s, t, &d[i]);
	return done + (int)n;
}

/* ---- trainers --------------------------------------------------------- */

static void seg_unmap(struct cs_ipc_server *s, struct seg *sg);

/*
 * Which of @g's instances from its oldest unfinished one on (bit k: that
 * one + k) some local ranks posted and that have not finished: the ones
 * the other nodes may be running (they start no operation of the group
 * further than ipc.group_inflight past it either).
 */
static uint64_t pending_mask(const struct cs_ipc_server *s,
			     const struct group *g)
{
	uint64_t mask = 0;

	if (g->failed)
		return 0;
	for (uint32_t k = 0; k < s->cfg.group_inflight; k++) {
		const struct inst *in =
			&g->win[(g->next_done + k) % IPC_WINDOW];

		if (in->active && !in->done && in->seq == g->next_done + k)
			mask |= 1ull << k;
	}
	return mask;
}

static void trainer_drop(struct cs_ipc_server *s, uint32_t slot,
			 const char *why)
{
	struct trainer *t = s->tr[slot];

	CS_INFO("trainer pid %d: %s; cancelling its operations", (int)t->pid,
		why);
	cs_ipc_ps_trainer_gone(s, t);
	cs_ipc_p2p_trainer_gone(s, t);
	for (uint32_t h = 0; h < s->cfg.max_groups; h++) {
		struct member *m = t->groups[h];

		if (!m)
			continue;
		struct group *g = m->g;
		/* the other nodes wait for this one in those ops: tell them
		 * the rank is lost (after the backend let go of the ops),
		 * in the slice they wait in if one is pipelined */
		uint64_t seq = g->next_done, tell = pending_mask(s, g);
		uint32_t sl[IPC_MAX_GROUP_INFLIGHT],
			nsl[IPC_MAX_GROUP_INFLIGHT];

		for (unsigned k = 0; k < IPC_MAX_GROUP_INFLIGHT; k++) {
			const struct inst *in = &g->win[(seq + k) % IPC_WINDOW];

			sl[k] = nsl[k] = 0;
			if (tell >> k & 1 && in->pipe_n) {
				sl[k] = pipe_wait_slice(in);
				nsl[k] = in->pipe_n;
			}
		}

		/* Completions to @t itself are discarded below. */
		if (g->nmembers > 1)
			group_fail(s, g, m->rank, CS_IPC_LOST_RANK, 0);
		else
			group_cancel(s, g);
		for (unsigned k = 0; k < IPC_MAX_GROUP_INFLIGHT; k++)
			if (tell >> k & 1)
				send_verdict_at(s, g, seq + k, sl[k], nsl[k],
						CS_ERR_PEER_LOST,
						CS_IPC_LOST_RANK, m->rank);
		member_remove(s, m);
	}
	for (uint32_t i = 0; i < s->cfg.max_segments; i++)
		if (t->segs[i].used)
			seg_unmap(s, &t->segs[i]);
	if (t->ctrl_mem)
		cs_shm_unmap(t->ctrl_mem, t->ctrl_len);
	if (t->efd >= 0)
		close(t->efd);
	close(t->fd);
	free(t->segs);
	free(t->groups);
	free(t);
	s->tr[slot] = NULL;
	while (s->tr_end && !s->tr[s->tr_end - 1])
		s->tr_end--;
	s->st.trainers--;
	s->st.trainers_lost++;
}

static int reply(struct trainer *t, int status, uint32_t value,
		 const char *text)
{
	struct cs_ipc_msg r = { .type = CS_IPC_MSG_REPLY,
				.version = CS_IPC_VERSION };

	r.u.reply.status = status;
	r.u.reply.value = value;
	if (text)
		snprintf(r.u.reply.text, sizeof(r.u.reply.text), "%s", text);
	if (send(t->fd, &r, sizeof(r), MSG_DONTWAIT | MSG_NOSIGNAL) !=
	    (ssize_t)sizeof(r))
		return -EPIPE;
	return 0;
}

static bool is_eventfd(int fd)
{
	char path[64], link[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	if (n < 0)
		return false;
	link[n] = 0;
	return !strcmp(link, "anon_inode:[eventfd]");
}

static int handle_hello(struct cs_ipc_server *s, struct trainer *t,
			const struct cs_ipc_msg *msg, int *fds, int nfd,
			char *why, size_t wl)
{
	uint64_t sq_off, sq_len, cq_off, cq_len;
	struct cs_ipc_ctrl *c;
	struct cs_ring sq, cq;
	size_t len = sizeof(*c);
	void *mem;
	int ret;

	(void)s;
	(void)msg;
	if (t->hello || nfd != 2) {
		snprintf(why, wl, "hello needs 2 fds, once");
		return -EPROTO;
	}
	if (!is_eventfd(fds[1])) {
		snprintf(why, wl, "second fd is not an eventfd");
		return -EBADF;
	}
	ret = cs_shm_map(fds[0], &len, &mem);
	if (ret) {
		snprintf(why, wl, "control segment: %s", strerror(-ret));
		return ret;
	}
	c = mem;
	if (len > IPC_MAX_CTRL_BYTES) {
		snprintf(why, wl, "control segment too large");
		ret = -EFBIG;
		goto out_unmap;
	}
	sq_off = c->sq_off;
	sq_len = c->sq_len;
	cq_off = c->cq_off;
	cq_len = c->cq_len;
	if (c->magic != CS_IPC_CTRL_MAGIC || c->version != CS_IPC_VERSION) {
		snprintf(why, wl, "control segment: bad magic or version");
		ret = -EPROTO;
		goto out_unmap;
	}
	if (sq_off < sizeof(*c) || cq_off < sizeof(*c) || sq_off > len ||
	    sq_len > len - sq_off || cq_off > len || cq_len > len - cq_off ||
	    (sq_off < cq_off + cq_len && cq_off < sq_off + sq_len)) {
		snprintf(why, wl, "control segment: bad ring offsets");
		ret = -EINVAL;
		goto out_unmap;
	}
	ret = cs_ring_attach(&sq, (uint8_t *)c + sq_off, sq_len,
			     CS_RING_CONSUMER, sizeof(struct cs_ipc_sqe));
	if (!ret && sq.capacity != CS_IPC_RING_SLOTS)
		ret = -EINVAL;
	if (!ret)
		ret = cs_ring_attach(&cq, (uint8_t *)c + cq_off, cq_len,
				     CS_RING_PRODUCER,
				     sizeof(struct cs_ipc_cqe));
	if (!ret && cq.capacity != CS_IPC_RING_SLOTS)
		ret = -EINVAL;
	if (ret) {
		snprintf(why, wl, "rings: %s", strerror(-ret));
		goto out_unmap;
	}
	t->ctrl_mem = mem;
	t->ctrl_len = len;
	t->ctrl = c;
	t->sq = sq;
	t->cq = cq;
	t->efd = fds[1];
	fds[1] = -1;
	fcntl(t->efd, F_SETFL, fcntl(t->efd, F_GETFL) | O_NONBLOCK);
	t->hello = true;
	return 0;

out_unmap:
	cs_shm_unmap(mem, len);
	return ret;
}

static int handle_reg(struct cs_ipc_server *s, struct trainer *t,
		      const struct cs_ipc_msg *msg, int *fds, int nfd,
		      uint32_t *val, char *why, size_t wl)
{
	size_t len = msg->u.reg.len;
	uint32_t i;
	void *m;
	int ret;

	if (nfd != 1) {
		snprintf(why, wl, "register needs exactly 1 fd");
		return -EPROTO;
	}
	if (!len || len > s->cfg.max_segment_bytes) {
		snprintf(why, wl, "segment size out of range");
		return -EINVAL;
	}
	for (i = 0; i < s->cfg.max_segments && t->segs[i].used; i++)
		;
	if (i == s->cfg.max_segments) {
		snprintf(why, wl, "too many segments (ipc.max_segments)");
		return -ENOSPC;
	}
	ret = cs_shm_map(fds[0], &len, &m);
	if (ret) {
		snprintf(why, wl, "segment: %s", strerror(-ret));
		return ret;
	}
	if (len > s->cfg.max_segment_bytes) {
		cs_shm_unmap(m, len);
		snprintf(why, wl, "segment size out of range");
		return -EINVAL;
	}
	t->segs[i] = (struct seg){ .base = m, .len = len, .used = true };
	if (s->have_be && s->be.reg_mem)
		s->be.reg_mem(s->be.ctx, m, len);
	*val = i;
	return 0;
}

/* A range of a device allocation (gpu/ maps it), used through a shadow. */
static int handle_reg_dev(struct cs_ipc_server *s, struct trainer *t,
			  const struct cs_ipc_msg *msg, int *fds, int nfd,
			  uint32_t *val, char *why, size_t wl)
{
	size_t len = msg->u.dev.len;
	void *cookie = NULL, *shadow;
	uint32_t i;
	int ret;

	if (!s->dev_ops) {
		snprintf(why, wl, "this sidecar has no GPU support");
		return -EOPNOTSUPP;
	}
	if (nfd > 1 || (nfd == 1) != (msg->u.dev.kind == CS_IPC_DEV_POSIX_FD)) {
		snprintf(why, wl,
			 "device registration: 1 fd for a POSIX-fd "
			 "handle, none otherwise");
		return -EPROTO;
	}
	if (!len || len > s->cfg.max_segment_bytes || msg->u.dev.pad) {
		snprintf(why, wl, "device range size out of range");
		return -EINVAL;
	}
	for (i = 0; i < s->cfg.max_segments && t->segs[i].used; i++)
		;
	if (i == s->cfg.max_segments) {
		snprintf(why, wl, "too many segments (ipc.max_segments)");
		return -ENOSPC;
	}
	ret = s->dev_ops->map(s->dev_ctx, (uint32_t)t->pid, msg->u.dev.kind,
			      msg->u.dev.handle, msg->u.dev.uuid,
			      msg->u.dev.off, len, nfd ? fds[0] : -1, &cookie,
			      why, wl);
	if (nfd)
		fds[0] = -1; /* taken over */
	if (ret)
		return ret;
	shadow = s->dev_ops->shadow_alloc(s->dev_ctx, len);
	if (!shadow) {
		s->dev_ops->unmap(s->dev_ctx, cookie);
		snprintf(why, wl, "no memory for a %zu-byte host shadow", len);
		return -ENOMEM;
	}
	t->segs[i] = (struct seg){
		.base = shadow, .len = len, .used = true, .dev = cookie
	};
	if (s->have_be && s->be.reg_mem)
		s->be.reg_mem(s->be.ctx, shadow, len);
	*val = i;
	return 0;
}

void cs_ipc_server_set_dev(struct cs_ipc_server *s,
			   const struct cs_ipc_dev_ops *ops, void *ctx)
{
	s->dev_ops = ops;
	s->dev_ctx = ctx;
}

/* Unmap a trainer's segment once the backend let go of it. */
static void seg_unmap(struct cs_ipc_server *s, struct seg *sg)
{
	if (s->have_be && s->be.unreg_mem &&
	    s->be.unreg_mem(s->be.ctx, sg->base, sg->len)) {
		CS_ERR("a segment of %zu bytes is still referenced by the "
		       "port; left mapped",
		       sg->len);
		return;
	}
	if (sg->dev) {
		s->dev_ops->unmap(s->dev_ctx, sg->dev);
		s->dev_ops->shadow_free(s->dev_ctx, sg->base, sg->len);
		return;
	}
	cs_shm_unmap(sg->base, sg->len);
}

static int handle_unreg(struct cs_ipc_server *s, struct trainer *t,
			const struct cs_ipc_msg *msg, char *why, size_t wl)
{
	struct seg *sg = seg_get(s, t, msg->u.unreg.seg);

	if (!sg) {
		snprintf(why, wl, "no such segment");
		return -ENOENT;
	}
	if (sg->refs) {
		snprintf(why, wl, "segment used by pending operations");
		return -EBUSY;
	}
	seg_unmap(s, sg);
	memset(sg, 0, sizeof(*sg));
	return 0;
}

static struct group *group_find(struct cs_ipc_server *s, const char *name)
{
	for (uint32_t i = 0; i < s->cfg.max_groups; i++)
		if (s->groups[i].used && !strcmp(s->groups[i].name, name))
			return &s->groups[i];
	return NULL;
}

static int group_new(struct cs_ipc_server *s, const char *name, uint32_t size,
		     uint32_t local_size, struct group **out)
{
	struct group *g = NULL;

	for (uint32_t i = 0; i < s->cfg.max_groups && !g; i++)
		if (!s->groups[i].used)
			g = &s->groups[i];
	if (!g)
		return -ENOSPC;
	g->win = calloc(IPC_WINDOW, sizeof(*g->win));
	g->part_mem =
		calloc((size_t)IPC_WINDOW * local_size, sizeof(*g->part_mem));
	g->pool = calloc(s->cfg.group_inflight, sizeof(*g->pool));
	if (!g->win || !g->part_mem || !g->pool) {
		free(g->win);
		free(g->part_mem);
		free(g->pool);
		g->win = NULL;
		g->part_mem = NULL;
		g->pool = NULL;
		return -ENOMEM;
	}
	for (uint32_t k = 0; k < IPC_WINDOW; k++)
		g->win[k].parts = &g->part_mem[(size_t)k * local_size];
	for (uint32_t l = 0; l < CS_IPC_MAX_LOCAL; l++)
		g->ranks[l] = -1;
	snprintf(g->name, sizeof(g->name), "%s", name);
	g->size = size;
	g->local_size = local_size;
	g->epoch = s->epoch;
	g->head_at = s->now;
	g->blocked = false; /* until its membership check says */
	g->pipe_told = false;
	g->used = true;
	s->st.groups++;
	*out = g;
	return 0;
}

static int handle_join(struct cs_ipc_server *s, struct trainer *t,
		       const struct cs_ipc_msg *msg, uint32_t *val, char *why,
		       size_t wl)
{
	char name[CS_IPC_NAME_MAX];
	int32_t rank = msg->u.join.rank, size = msg->u.join.size;
	int32_t lr = msg->u.join.local_rank, ls = msg->u.join.local_size;
	uint32_t max_h = CS_MIN(s->cfg.max_groups, s->cfg.max_trainer_groups);
	bool newcomer, subset = false;
	struct member *m;
	struct group *g;
	uint32_t h;
	int ret;

	memcpy(name, msg->u.join.name, sizeof(name));
	if (!memchr(name, 0, sizeof(name)) || !name[0]) {
		snprintf(why, wl, "group name empty or not terminated");
		return -EINVAL;
	}
	if (msg->u.join.flags & ~CS_IPC_JOIN_FLAGS) {
		snprintf(why, wl, "unknown join flags %#x",
			 msg->u.join.flags & ~CS_IPC_JOIN_FLAGS);
		return -EINVAL;
	}
	for (unsigned i = 0; i < CS_IPC_NODE_WORDS; i++)
		subset |= msg->u.join.nodes[i] != 0;
	/* a group over some nodes: this node among them, numbered in one
	 * view (an elastic group is re-numbered in the next) */
	if (subset && (msg->u.join.flags & CS_IPC_JOIN_ELASTIC)) {
		snprintf(why, wl,
			 "a group over some of the nodes cannot be "
			 "elastic");
		return -EINVAL;
	}
	if (subset &&
	    (s->node >= CS_IPC_SUBSET_NODES ||
	     !(msg->u.join.nodes[s->node / 64] >> (s->node % 64) & 1))) {
		snprintf(why, wl,
			 "the group's nodes do not include this one (node "
			 "%u)",
			 s->node);
		return -EINVAL;
	}
	/* rank and size -1: an elastic group's rank on a node that joined
	 * the cluster; the group tells them at its first operation */
	newcomer = rank == -1 && size == -1 &&
		   (msg->u.join.flags & CS_IPC_JOIN_ELASTIC);
	if (newcomer && ls >= 1 && (uint32_t)ls <= CS_IPC_MAX_LOCAL &&
	    lr >= 0 && lr < ls) {
		size = 0;
	} else if (size < 1 || (uint32_t)size > IPC_MAX_GROUP_SIZE ||
		   rank < 0 || rank >= size || ls < 1 || ls > size ||
		   (uint32_t)ls > CS_IPC_MAX_LOCAL || lr < 0 || lr >= ls) {
		snprintf(why, wl, "bad rank %d/%d or local rank %d/%d",
			 (int)rank, (int)size, (int)lr, (int)ls);
		return -EINVAL;
	}
	for (h = 0; h < max_h && t->groups[h]; h++)
		;
	if (h == max_h) {
		snprintf(why, wl,
			 "this trainer is in %u groups already "
			 "(ipc.max_trainer_groups)",
			 max_h);
		return -ENOSPC;
	}
	g = group_find(s, name);
	if (g) {
		if (g->failed && g->lost_detail == CS_IPC_LOST_NODE) {
			snprintf(why, wl,
				 "group '%.32s' lost node %d (epoch %u); "
				 "join a new group",
				 name, (int)g->lost_rank, g->lost_epoch);
			return CS_ERR_EPOCH;
		}
		if (g->failed && g->fail_status == CS_ERR_BAD_DESC) {
			snprintf(why, wl,
				 "group '%.32s' refused: nodes disagree on "
				 "it (node %d); join a new one",
				 name, (int)g->lost_rank);
			return CS_ERR_EPOCH;
		}
		if (g->failed && g->fail_status == CS_ERR_EPOCH) {
			snprintf(why, wl,
				 "group '%.24s' was formed before a node "
				 "joined (epoch %u); join a new one",
				 name, g->lost_epoch);
			return CS_ERR_EPOCH;
		}
		if (g->failed && g->fail_status == CS_ERR_TIMEOUT) {
			snprintf(why, wl,
				 "group '%.32s' timed out waiting for rank "
				 "%d; join a new group",
				 name, (int)g->lost_rank);
			return CS_ERR_EPOCH;
		}
		if (g->failed) {
			snprintf(why, wl,
				 "group '%.32s' lost rank %d; join "
				 "a new group",
				 name, (int)g->lost_rank);
			return CS_ERR_EPOCH;
		}
		if (g->size != (uint32_t)size ||
		    g->local_size != (uint32_t)ls) {
			snprintf(why, wl,
				 "group '%.32s' has size %u, "
				 "local size %u",
				 name, g->size, g->local_size);
			return -EINVAL;
		}
		if (g->elastic != !!(msg->u.join.flags & CS_IPC_JOIN_ELASTIC)) {
			snprintf(why, wl, "group '%.32s' is %selastic", name,
				 g->elastic ? "" : "not ");
			return -EINVAL;
		}
		if (memcmp(g->nodes, msg->u.join.nodes, sizeof(g->nodes))) {
			snprintf(why, wl,
				 "group '%.24s': the ranks here disagree "
				 "on its nodes",
				 name);
			return -EINVAL;
		}
		/* one connection, one rank of a group: else one trainer
		 * could hold every local slot of a group and the real
		 * trainers of those ranks would be refused */
		for (uint32_t l = 0; l < g->local_size; l++) {
			if (!g->m[l] || g->m[l]->t != t)
				continue;
			snprintf(why, wl,
				 "this trainer holds rank %d (local rank %u) "
				 "of group '%.24s' already",
				 (int)g->ranks[l], l, name);
			return -EEXIST;
		}
		if (g->m[lr] ||
		    (rank >= 0 && local_of(g, (uint32_t)rank) >= 0)) {
			snprintf(why, wl,
				 "rank %d / local rank %d already "
				 "joined",
				 (int)rank, (int)lr);
			return -EEXIST;
		}
	} else {
		ret = group_new(s, name, (uint32_t)size, (uint32_t)ls, &g);
		if (ret) {
			snprintf(why, wl, "no room for a new group");
			return ret;
		}
		g->elastic = msg->u.join.flags & CS_IPC_JOIN_ELASTIC;
		g->regroup = newcomer;
		memcpy(g->nodes, msg->u.join.nodes, sizeof(g->nodes));
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		if (!g->nmembers) {
			group_free(s, g);
			s->st.groups--;
		}
		return -ENOMEM;
	}
	m->g = g;
	m->t = t;
	m->rank = rank;
	m->local_rank = (uint32_t)lr;
	m->handle = h;
	m->seq = g->next_done;
	g->m[lr] = m;
	g->ranks[lr] = rank;
	g->nmembers++;
	t->groups[h] = m;
	*val = h;
	return 0;
}

static int handle_leave(struct cs_ipc_server *s, struct trainer *t,
			const struct cs_ipc_msg *msg, char *why, size_t wl)
{
	uint32_t h = msg->u.leave.group;
	struct member *m;
	struct group *g;

	if (h >= s->cfg.max_groups || !t->groups[h]) {
		snprintf(why, wl, "no such group handle");
		return -ENOENT;
	}
	m = t->groups[h];
	g = m->g;
	/* A failed group has nothing pending (group_fail finished it). */
	if (!g->failed && m->seq != g->next_done) {
		snprintf(why, wl, "operations still pending on the group");
		return -EBUSY;
	}
	/* The others cannot run collectives without it any more. */
	if (g->nmembers > 1)
		group_fail(s, g, m->rank, CS_IPC_LOST_RANK, 0);
	cs_ipc_p2p_leave(s, t, h); /* before the member goes */
	member_remove(s, m);
	return 0;
}

/* Read and answer this trainer's messages. Returns <0 to drop it. */
static int trainer_read(struct cs_ipc_server *s, struct trainer *t, int *work)
{
	for (int k = 0; k < IPC_MSGS_PER_POLL; k++) {
		union {
			char buf[CMSG_SPACE(IPC_MAX_FDS * sizeof(int))];
			struct cmsghdr align;
		} cb;
		struct cs_ipc_msg msg;
		char extra, why[CS_IPC_MSG_TEXT] = "";
		bool answer = true; /* every message but a wake-up gets one */
		struct iovec iov[2] = { { &msg, sizeof(msg) }, { &extra, 1 } };
		struct msghdr mh = { .msg_iov = iov,
				     .msg_iovlen = 2,
				     .msg_control = cb.buf,
				     .msg_controllen = sizeof(cb.buf) };
		int fds[IPC_MAX_FDS], nfd = 0, ret;
		uint32_t val = 0;
		ssize_t n;

		n = recvmsg(t->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		if (n == 0)
			return -ECONNRESET;
		(*work)++;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c;
		     c = CMSG_NXTHDR(&mh, c)) {
			if (c->cmsg_level != SOL_SOCKET ||
			    c->cmsg_type != SCM_RIGHTS)
				continue;
			size_t cnt = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			int *p = (int *)CMSG_DATA(c);

			for (size_t i = 0; i < cnt; i++) {
				if (nfd < IPC_MAX_FDS)
					fds[nfd++] = p[i];
				else
					close(p[i]);
			}
		}
		if (n != (ssize_t)sizeof(msg) || (mh.msg_flags & MSG_CTRUNC) ||
		    msg.version != CS_IPC_VERSION) {
			snprintf(why, sizeof(why), "malformed message");
			ret = -EPROTO;
		} else if (!t->hello && msg.type != CS_IPC_MSG_HELLO) {
			snprintf(why, sizeof(why), "hello first");
			ret = -EPROTO;
		} else {
			switch (msg.type) {
			case CS_IPC_MSG_HELLO:
				ret = handle_hello(s, t, &msg, fds, nfd, why,
						   sizeof(why));
				val = s->node;
				break;
			case CS_IPC_MSG_REG_SEG:
				ret = handle_reg(s, t, &msg, fds, nfd, &val,
						 why, sizeof(why));
				break;
			case CS_IPC_MSG_UNREG_SEG:
				ret = handle_unreg(s, t, &msg, why,
						   sizeof(why));
				break;
			case CS_IPC_MSG_REG_DEV:
				ret = handle_reg_dev(s, t, &msg, fds, nfd, &val,
						     why, sizeof(why));
				break;
			case CS_IPC_MSG_JOIN:
				ret = handle_join(s, t, &msg, &val, why,
						  sizeof(why));
				break;
			case CS_IPC_MSG_LEAVE:
				ret = handle_leave(s, t, &msg, why,
						   sizeof(why));
				break;
			case CS_IPC_MSG_PS_CREATE:
			case CS_IPC_MSG_PS_DESTROY:
				ret = cs_ipc_ps_msg(s, t, &msg, &val, why,
						    sizeof(why));
				break;
			case CS_IPC_MSG_WAKE: /* its work is in the SQ */
				ret = 0;
				answer = false;
				break;
			default:
				snprintf(why, sizeof(why), "unknown message");
				ret = -EPROTO;
				break;
			}
		}
		/* Handlers set the fds they keep to -1. */
		for (int i = 0; i < nfd; i++)
			if (fds[i] >= 0)
				close(fds[i]);
		if (!answer)
			continue;
		if (ret)
			s->st.bad_msg++;
		if (reply(t, ret, val, ret ? why : NULL))
			return -EPIPE;
		if (ret && !t->hello)
			return ret; /* a failed hello ends the session */
	}
	return 0;
}

/*
 * Every slot is taken: say so (-EUSERS, the trainer's cs_connect returns
 * it) rather than only hang up, which the trainer would see as a reset.
 * The reply is queued before its hello arrives; the client reads it as
 * the hello's answer.
 */
static void refuse_full(struct cs_ipc_server *s, int fd, pid_t pid)
{
	struct trainer tmp = { .fd = fd };
	char why[CS_IPC_MSG_TEXT];

	snprintf(why, sizeof(why),
		 "sidecar full: %u trainers connected (ipc.max_trainers)",
		 s->cfg.max_trainers);
	CS_WARN("refused trainer pid %d: %s", (int)pid, why);
	(void)reply(&tmp, -EUSERS, 0, why);
	s->st.refused++;
	s->st.full++;
	close(fd);
}

/*
 * Close connections that have not said hello within ipc.hello_deadline of
 * their accept: without it, connections that never send one would hold
 * every trainer slot for ever. They get a reply saying why (-ETIMEDOUT).
 * Returns the number closed.
 */
static int check_hello(struct cs_ipc_server *s, cs_ns_t now)
{
	int n = 0;

	for (uint32_t i = 0; i < s->tr_end; i++) {
		struct trainer *t = s->tr[i];
		char why[CS_IPC_MSG_TEXT];

		if (!t || t->hello ||
		    now - t->accepted_at < s->cfg.hello_deadline)
			continue;
		snprintf(why, sizeof(why),
			 "no hello within %llu ms of connecting "
			 "(ipc.hello_deadline)",
			 (unsigned long long)(s->cfg.hello_deadline / 1000000));
		CS_WARN("closed the connection of pid %d: %s", (int)t->pid,
			why);
		(void)reply(t, -ETIMEDOUT, 0, why);
		s->st.hello_timeouts++;
		trainer_drop(s, i, why);
		n++;
	}
	return n;
}

static int accept_one(struct cs_ipc_server *s)
{
	struct ucred cr;
	socklen_t cl = sizeof(cr);
	struct trainer *t;
	uint32_t slot;
	int fd;

	fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0)
		return errno == EAGAIN || errno == EINTR ||
				       errno == ECONNABORTED
			       ? 0
			       : -errno;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) ||
	    !(cr.uid == s->uid || (s->cfg.allowed_gid < CS_IPC_NO_GID &&
				   cr.gid == (gid_t)s->cfg.allowed_gid))) {
		CS_WARN("refused a trainer: uid %d gid %d not allowed",
			(int)cr.uid, (int)cr.gid);
		s->st.refused++;
		close(fd);
		return 1;
	}
	for (slot = 0; slot < s->cfg.max_trainers && s->tr[slot]; slot++)
		;
	if (slot == s->cfg.max_trainers) {
		refuse_full(s, fd, cr.pid);
		return 1;
	}
	t = calloc(1, sizeof(*t));
	if (t) {
		t->segs = calloc(s->cfg.max_segments, sizeof(*t->segs));
		t->groups = calloc(s->cfg.max_groups, sizeof(*t->groups));
	}
	if (!t || !t->segs || !t->groups) {
		CS_WARN("refused trainer pid %d: out of memory", (int)cr.pid);
		if (t) {
			free(t->segs);
			free(t->groups);
			free(t);
		}
		s->st.refused++;
		close(fd);
		return 1;
	}
	t->fd = fd;
	t->efd = -1;
	t->pid = cr.pid;
	t->accepted_at = s->now;
	s->tr[slot] = t;
	if (slot >= s->tr_end)
		s->tr_end = slot + 1;
	s->st.trainers++;
	s->st.accepted++;
	return 1;
}

static int poll_sockets(struct cs_ipc_server *s)
{
	uint32_t n = 0, map[1 + 4096];
	int work = 0, ret;

	for (;;) {
		ret = accept_one(s);
		if (ret < 0)
			return ret;
		if (!ret)
			break;
		work++;
	}
	for (uint32_t i = 0; i < s->tr_end; i++) {
		if (!s->tr[i])
			continue;
		s->pfd[n] =
			(struct pollfd){ .fd = s->tr[i]->fd, .events = POLLIN };
		map[n++] = i;
	}
	if (!n || poll(s->pfd, n, 0) <= 0)
		return work;
	for (uint32_t k = 0; k < n; k++) {
		struct trainer *t = s->tr[map[k]];
		short re = s->pfd[k].revents;

		if (!re)
			continue;
		ret = re & POLLIN ? trainer_read(s, t, &work) : -ECONNRESET;
		if (!ret && (re & (POLLHUP | POLLERR)))
			ret = -ECONNRESET;
		if (ret < 0) {
			trainer_drop(s, map[k],
				     ret == -ECONNRESET ? "hung up"
							: "protocol error");
			work++;
		}
	}
	return work;
}

int cs_ipc_server_poll(struct cs_ipc_server *s, cs_ns_t now)
{
	int work = 0, ret;

	s->now = now;
	if (now >= s->next_sock_poll) {
		s->next_sock_poll = now + s->cfg.sock_poll_interval;
		ret = poll_sockets(s);
		if (ret < 0)
			return ret;
		work += ret + check_deadlines(s, now) + check_hello(s, now);
	}
	for (uint32_t i = 0; i < s->tr_end; i++) {
		struct trainer *t = s->tr[i];

		if (!t || !t->hello)
			continue;
		work += poll_sq(s, t);
		if (cs_ring_error(&t->sq) || cs_ring_error(&t->cq)) {
			trainer_drop(s, i, "corrupted its rings");
			work++;
		}
	}
	work += (int)cs_ipc_ps_poll(s);
	work += (int)cs_ipc_p2p_poll(s);
	work += dev_pump(s);
	/* Kicks last: completions of one trainer's op may land on others. */
	for (uint32_t i = 0; i < s->tr_end; i++)
		if (s->tr[i] && s->tr[i]->hello)
			kick_trainer(s->tr[i]);
	return work;
}

int cs_ipc_server_sleep_prepare(struct cs_ipc_server *s, struct pollfd *pfd)
{
	bool work = false;
	int n = 0;

	pfd[n++] = (struct pollfd){ .fd = s->lfd, .events = POLLIN };
	for (uint32_t i = 0; i < s->tr_end; i++) {
		struct trainer *t = s->tr[i];

		if (!t)
			continue;
		pfd[n++] = (struct pollfd){ .fd = t->fd, .events = POLLIN };
		if (!t->hello)
			continue;
		atomic_store_explicit(&t->ctrl->sq_asleep, 1,
				      memory_order_seq_cst);
		if (t->bl_count || t->kick)
			work = true;
	}
	/* Pairs with the trainer's publish of a descriptor, then its look
	 * at sq_asleep (client.c wake_sidecar). */
	atomic_thread_fence(memory_order_seq_cst);
	if (s->xf_used || s->dev_head) /* device copies to poll */
		work = true;
	for (uint32_t i = 0; i < s->tr_end && !work; i++) {
		struct trainer *t = s->tr[i];

		if (t && t->hello && cs__ring_avail(&t->sq, 1))
			work = true;
	}
	if (work) {
		cs_ipc_server_sleep_done(s);
		return 0;
	}
	return n;
}

void cs_ipc_server_sleep_done(struct cs_ipc_server *s)
{
	for (uint32_t i = 0; i < s->tr_end; i++) {
		struct trainer *t = s->tr[i];

		if (t && t->hello)
			atomic_store_explicit(&t->ctrl->sq_asleep, 0,
					      memory_order_relaxed);
	}
	s->next_sock_poll = 0; /* what woke us may be on a socket */
}

int cs_ipc_server_create(const struct cs_ipc_cfg *cfg,
			 const struct cs_ipc_backend *be,
			 struct cs_ipc_server **out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct cs_ipc_server *s;
	int ret;

	if (!cfg || !out || !cfg->max_trainers || !cfg->max_segments ||
	    !cfg->max_groups || cfg->max_trainers > 4096 || !cfg->sq_burst ||
	    cfg->sq_burst > CS_IPC_RING_SLOTS || !cfg->group_inflight ||
	    cfg->group_inflight > IPC_MAX_GROUP_INFLIGHT)
		return -EINVAL;
	if (cfg->dev_chunk < IPC_DEV_CHUNK_MIN ||
	    cfg->dev_chunk > IPC_DEV_CHUNK_MAX) {
		CS_ERR("ipc.dev_chunk: %llu bytes, not within 4K..1G",
		       (unsigned long long)cfg->dev_chunk);
		return -EINVAL;
	}
	if (!cfg->dev_depth || cfg->dev_depth > IPC_DEV_DEPTH_MAX) {
		CS_ERR("ipc.dev_depth: %u, not within 1..%u", cfg->dev_depth,
		       IPC_DEV_DEPTH_MAX);
		return -EINVAL;
	}
	if (cfg->dev_pipe && (cfg->dev_pipe < IPC_DEV_PIPE_MIN ||
			      cfg->dev_pipe > IPC_DEV_PIPE_MAX)) {
		CS_ERR("ipc.dev_pipe: %llu bytes, not 0 (off) or within "
		       "64K..1G",
		       (unsigned long long)cfg->dev_pipe);
		return -EINVAL;
	}
	if (strlen(cfg->socket_path) >= sizeof(sa.sun_path) ||
	    !cfg->socket_path[0])
		return -ENAMETOOLONG;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->cfg = *cfg;
	if (be && be->start_inter_node) {
		s->be = *be;
		s->have_be = true;
	}
	s->uid = getuid();
	s->tr = calloc(cfg->max_trainers, sizeof(*s->tr));
	s->groups = calloc(cfg->max_groups, sizeof(*s->groups));
	s->pfd = calloc(cfg->max_trainers, sizeof(*s->pfd));
	s->xf = calloc(cfg->dev_depth, sizeof(*s->xf));
	if (!s->tr || !s->groups || !s->pfd || !s->xf) {
		ret = -ENOMEM;
		goto out_free;
	}
	for (uint32_t i = 0; i < cfg->max_groups; i++)
		s->groups[i].id = i;
	s->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC,
			0);
	if (s->lfd < 0) {
		ret = -errno;
		goto out_free;
	}
	memcpy(sa.sun_path, cfg->socket_path, strlen(cfg->socket_path));
	/* A stale socket file is replaced; a live sidecar is not. */
	if (!connect(s->lfd, (struct sockaddr *)&sa, sizeof(sa))) {
		ret = -EADDRINUSE;
		goto out_close;
	}
	close(s->lfd);
	s->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC,
			0);
	if (s->lfd < 0) {
		ret = -errno;
		goto out_free;
	}
	unlink(cfg->socket_path);
	if (bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    listen(s->lfd, 64)) {
		ret = -errno;
		goto out_close;
	}
	*out = s;
	return 0;

out_close:
	close(s->lfd);
out_free:
	free(s->tr);
	free(s->groups);
	free(s->pfd);
	free(s->xf);
	free(s);
	return ret;
}

void cs_ipc_server_stats(const struct cs_ipc_server *s, struct cs_ipc_stats *st)
{
	*st = s->st;
}

void cs_ipc_server_destroy(struct cs_ipc_server *s)
{
	if (!s)
		return;
	for (uint32_t i = 0; i < s->cfg.max_trainers; i++)
		if (s->tr[i])
			trainer_drop(s, i, "server shutting down");
	cs_ipc_ps_fini(s);
	cs_ipc_p2p_fini(s);
	close(s->lfd);
	unlink(s->cfg.socket_path);
	free(s->tr);
	free(s->groups);
	free(s->pfd);
	free(s->vtab);
	free(s->xf);
	free(s);
}

/* ---- for ipc_ps.c (declared in ipc_ps.h) ------------------------------ */

struct cs_ipc_ps **cs__ipc_ps_state(struct cs_ipc_server *s)
{
	return &s->ps;
}

struct cs_ipc_ps_tr **cs__ipc_trainer_ps(struct trainer *t)
{
	return &t->ps;
}

struct cs_ipc_p2p **cs__ipc_p2p_state(struct cs_ipc_server *s)
{
	return &s->p2p;
}

struct cs_ipc_p2p_tr **cs__ipc_trainer_p2p(struct trainer *t)
{
	return &t->p2p;
}

int cs__ipc_member(struct cs_ipc_server *s, struct trainer *t, uint32_t handle,
		   struct cs__ipc_member_info *mi)
{
	struct member *m;

	if (handle >= s->cfg.max_groups || !t->groups[handle])
		return -ENOENT;
	m = t->groups[handle];
	mi->group = m->g->name;
	mi->rank = m->rank;
	mi->size = m->g->size;
	mi->local_size = m->g->local_size;
	mi->fail_status = m->g->failed ? m->g->fail_status : 0;
	mi->fail_detail = m->g->lost_detail;
	mi->fail_peer = m->g->lost_rank;
	mi->fail_aux = m->g->lost_epoch;
	return 0;
}

uint8_t *cs__ipc_seg(struct cs_ipc_server *s, struct trainer *t, uint32_t seg,
		     uint64_t off, uint64_t len, bool hold)
{
	struct seg *sg = seg_get(s, t, seg);
	uint8_t *p;

	if (!sg || sg->dev) /* device memory: not for PS rows */
		return NULL;
	p = seg_range(sg, off, len);
	if (p && hold)
		sg->refs++;
	return p;
}

void cs__ipc_seg_put(struct cs_ipc_server *s, struct trainer *t, uint32_t seg)
{
	struct seg *sg = seg_get(s, t, seg);

	if (sg && sg->refs)
		sg->refs--;
}

void cs__ipc_complete(struct cs_ipc_server *s, struct trainer *t,
		      uint64_t user_id, int status, unsigned detail,
		      int32_t peer, uint32_t aux)
{
	if (status == CS_ERR_BAD_DESC)
		s->st.bad_desc++;
	complete_ex(s, t, user_id, status, detail, peer, aux);
}

/* SPDX-License-Identifier: MIT */
/*
 * collstackd's trainer service: serves libcollstack on a Unix socket and
 * runs the cross-node step of every multi-node group operation over the
 * port (two-level collectives, see docs/ipcd.md).
 *
 * Threads. The IPC server (control/ipc) is polled by a thread of its own:
 * the control thread blocks while it serves long requests (ar_wait), and
 * trainers must not wait for that. When the server and the backend have
 * had nothing to do for ipc.idle_spin, the thread naps ipc.idle_sleep per
 * round; after ipc.quiet_after it stops polling and sleeps in poll(2) on
 * everything that can bring work: the listener, the trainers' sockets (a
 * trainer that posts while the sidecar sleeps sends a wake-up message,
 * see sq_asleep in ipc_proto.h), the lcore's eventfd (a cross-node
 * verdict) and the boot thread's news of a new view; at most
 * ipc.quiet_sleep. An idle sidecar thus costs no CPU, and a busy lcore on
 * the same core is not preempted 20000 times a second for nothing.
 *
 * Cross-node step. The server hands over the node's combined data (the
 * local ranks already reduced, in local-rank order, into its staging
 * buffer) through start_inter_node(). The backend runs one allreduce over
 * the port on that buffer on the transport core (svc_core.c: ring engine,
 * sessions per peer) on lcore 0. All-gather and broadcast ride the same
 * allreduce as an integer sum over the raw bytes (every byte is zero
 * except the ones one node supplies, so the sum is that node's bytes,
 * bit for bit); a barrier is a one-element allreduce. When the group is
 * laid out in node blocks (as many ranks on every node, node i's
 * consecutive and in node order), reduce-scatter and all-gather run as
 * such (launch()), with half the bytes.
 *
 * Operation ids need no orchestrator: the k-th operation of a group has
 * the same k on every node (every node's server numbers a group's
 * operations from 0 in posting order), so the id is derived from (group
 * name, k). Frames of an operation a node has not started yet are held by
 * the transport core (tp.hold_frames; beyond that left unacknowledged, and
 * their senders retransmit until it starts).
 *
 * Completion comes back from the lcore through one atomic int per
 * operation, which this thread polls: no lock on the hot path. Operations
 * of different groups run at once (up to ipc.inflight; each its own slot,
 * handle on the core, verdict and check buffer), matched across the nodes
 * by id, so groups posted in different orders on different nodes do not
 * wait for each other. A group's own start in order (schedule()) and run
 * together, up to the server's ipc.group_inflight, and complete in any
 * order; those that are not their group's oldest take at most
 * ipc.pipelined slots, so that every group's oldest always finds one
 * (be_start()). The core's sessions outlive operations, so a finished
 * operation's last ACKs are the session's business (and an early one's frames
 * are resent by the core until acknowledged). Once no group is left on this
 * node and ipc.linger has passed, it is removed, so a later run that reuses a
 * group name (k restarts at 0) cannot meet a stale operation.
 *
 * Peer loss (ctlplane, with the bootstrap). Every cross-node operation
 * belongs to the node view (group epoch) its group was formed in and runs
 * on that view's ring. When the view moves on (a sidecar was lost), this
 * thread notices it within one round: the running operations are taken
 * off the lcore, and every cross-node group formed in the older view fails
 * through the server (cs_ipc_server_view): its running, queued and later
 * operations complete with CS_ERR_PEER_LOST naming the lost node and the
 * epoch. The survivors' trainers then form a new group, which runs on
 * the alive members only.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <poll.h>
#include <sched.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#define CS_LOG_MODULE "ipcd"
#include "internal/log.h"
#include "internal/config.h"
#include "control/ipc/ipc_server.h"
#include "daemon.h"
#include "daemon_ipc.h"
#include "svc_ps_trainer.h"
#include "svc_p2p.h"
#include "cs_config.h"
#if CS_HAVE_CUDA
#include "gpu/gpu.h" /* struct cs_gpu_nic */
#include "gpu/ipc_dev.h" /* trainers' device buffers (docs/gpu.md) */
#endif

#define IPCD_QUEUE 64 /* cross-node operations waiting (groups) */
/* operations of failed groups that succeeded here, remembered at once */
#define IPCD_OK_MAX 16
#define IPCD_SOCK_NAME "collstack.sock"

struct ipcd_conf {
	struct cs_ipc_cfg ipc;
	bool enable;
	bool on_lcore;
	cs_ns_t idle_spin;
	cs_ns_t idle_sleep;
	cs_ns_t linger;
	cs_ns_t quiet_after;
	cs_ns_t quiet_sleep;
	char trace_dir[CS_CFG_STR_MAX];
	uint32_t inflight;
	uint32_t pipelined;
};

static_assert(sizeof(struct ipcd_conf) <=
		      sizeof(((struct cs_daemon_conf *)0)->ipc),
	      "IPC settings do not fit the daemon's config area");

#define IC(f) offsetof(struct ipcd_conf, f)

static const struct cs_cfg_entry ipcd_cfg[] = {
	{ "ipc.enable", CS_CFG_BOOL, IC(enable), "1", CS_CFG_NO_BOUNDS,
	  "serve trainers (libcollstack) on ipc.socket" },
	{ "ipc.on_lcore", CS_CFG_BOOL, IC(on_lcore), "1", CS_CFG_NO_BOUNDS,
	  "serve trainers on lcore 0 itself, after its port work each "
	  "round, instead of on a thread of their own: no hand-off between "
	  "the two on a trainer operation's path (the ipc.idle_* and "
	  "ipc.quiet_* keys then do not apply; a port whose wait watches "
	  "no trainer socket keeps the thread)" },
	{ "ipc.idle_spin", CS_CFG_NS, IC(idle_spin), "200us", 0, 1e10,
	  "IPC thread: keep polling this long after the last work" },
	{ "ipc.idle_sleep", CS_CFG_NS, IC(idle_sleep), "50us", 1000, 1e9,
	  "IPC thread: then sleep this long per round" },
	{ "ipc.linger", CS_CFG_NS, IC(linger), "50ms", 0, 1e10,
	  "once no group is left, keep the last cross-node operation "
	  "acknowledging retransmissions this long, then remove it" },
	{ "ipc.quiet_after", CS_CFG_NS, IC(quiet_after), "2ms", 0, 1e10,
	  "IPC thread: after this long without work, sleep until a trainer, "
	  "the lcore or a new view wakes it" },
	{ "ipc.quiet_sleep", CS_CFG_NS, IC(quiet_sleep), "20ms", 1e5, 1e9,
	  "IPC thread: the longest such sleep (housekeeping: ipc.linger)" },
	{ "ipc.trace_dir", CS_CFG_STR, IC(trace_dir), "", CS_CFG_NO_BOUNDS,
	  "if set, time every cross-node operation (launched, picked up by "
	  "the lcore, result ready, last ACK, verdict seen; the first "
	  "65536) and write them to <dir>/ipc-<node.rank>.txt at exit "
	  "(scripts/op-breakdown.py)" },
	{ "ipc.inflight", CS_CFG_U32, IC(inflight), "24", 1, IPCD_QUEUE,
	  "cross-node operations on the port at once, of every group (1: "
	  "one after another, in the order they came, as before: then "
	  "groups must be posted in the same order on every node); groups "
	  "posted in different orders on different nodes complete as long "
	  "as at most ipc.inflight - ipc.pipelined of them wait on each "
	  "other" },
	{ "ipc.pipelined", CS_CFG_U32, IC(pipelined), "8", 0, IPCD_QUEUE / 2,
	  "of those, and of the ones waiting for a slot, at most this many "
	  "that are not their group's oldest (a group's later buckets, "
	  "ipc.group_inflight): the rest is kept for every group's oldest "
	  "(0: a group's operations run one at a time)" },
};

/* One cross-node operation's timestamps (CLOCK_MONOTONIC ns), when
 * ipc.trace_dir is set. */
struct ipcd_trace {
	uint32_t op_id;
	uint32_t kind;
	uint64_t bytes;
	cs_ns_t launched, picked, ready, done, seen;
};

#define IPCD_TRACE_MAX 65536

struct ipcd_op {
	struct cs_ipc_inter_op op;
	uint32_t op_id;
	bool used; /* the slot holds an op of the server's */
	/* the server's verdict on an op it refused (send_verdict): it waits
	 * for no cs_ipc_server_inter_done() */
	bool verdict_only;
	uint64_t order; /* arrival: a group's ops start in this order */
	bool running; /* on the lcore (or nothing to exchange) */
	bool checking; /* what runs is its membership check */
	bool verdicting; /* ... or its verdict exchange */
	atomic_int notify; /* the lcore's verdict on what runs */
	struct cs_ar_ext *h; /* what runs, on the lcore */
	int32_t *chk; /* check/verdict buffer: chk_n slots */
	uint32_t chk_n, chk_pos; /* ring size, this node's slot */
	int32_t barrier_word;
	bool check; /* the group's membership check runs first */
	/* it failed on a silent node (@pm_node): the verdict exchange runs
	 * to learn whether a node refused it (see launch_verdict) */
	bool postmortem;
	int pm_status, pm_node;
	/* an all-to-all this node refused (a2a_layout): its verdict exchange
	 * tells the other nodes, then its ranks fail with CS_IPC_BAD_LAYOUT */
	bool a2a_refused;
	unsigned tries; /* verdict exchange: attempts so far */
	cs_ns_t verdict_end; /* ... and when it stops trying */
	/* the group's name: a verdict's group may be gone (op.group is the
	 * server's, valid only while the op is pending there) */
	char name[CS_IPC_NAME_MAX];
	cs_ns_t launched; /* ipc.trace_dir */
	/* a group over some nodes (cs_group_split): their set (copied:
	 * op.nodes is the server's), and, for the current view, their ring
	 * indexes in ring order (grp_ring(); @nnodes 0: every node) */
	bool has_mask;
	uint64_t mask[CS_IPC_NODE_WORDS];
	uint32_t nodes[CS_IPC_SUBSET_NODES];
	uint32_t nnodes;
};

/*
 * The membership check (before a group's first cross-node operation):
 * every node of the ring puts its view of the group into its own slot of
 * a buffer of ring-size slots and the buffer is summed across the nodes
 * (the other slots are zero, so every node ends with every slot). Words
 * of a slot: present (1), node rank, group size, local size, the node's
 * cut size (cs_ipc_inter_op.pipe: ipc.dev_pipe where it cuts, else 0),
 * how many slices it cut the checked operation into (0: not cut), then
 * the group rank + 1 of each local rank (0: none).
 */
#define IPCD_CHK_HDR 6
#define IPCD_CHK_PIPE 4
#define IPCD_CHK_SLICES 5
#define IPCD_CHK_WORDS (IPCD_CHK_HDR + CS_IPC_MAX_LOCAL)
/* The verdict exchange: per node present (1), node rank, status, detail,
 * peer + 1 (status 0: this node did not refuse the operation). */
#define IPCD_VERDICT_WORDS 5
/* Attempts of a refusing node's verdict exchange (the other nodes join it
 * once the refusal, announced to them, ended their part of the op), and
 * the time all attempts of a verdict or post-mortem exchange may take. A
 * node may never join: its part of the op completed before this node
 * failed it (a rank died after the exchange, before the results were
 * handed out). The exchange only refines an error the ranks get anyway,
 * and the next cross-node operations wait behind it, so it is bounded
 * well below tp.hold_ttl (after which a peer's frames of those
 * operations, held here meanwhile, would be answered as timed out). */
#define IPCD_VERDICT_TRIES 4
#define IPCD_VERDICT_BUDGET (3 * CS_NS_PER_S)

/*
 * ipc.on_lcore: trainer segments are registered with the port by a thread
 * of its own, not by lcore 0 (rte_extmem_register and a DMA map took
 * 3.4-4.4 ms for a 256 MiB segment here: the lcore's peers would wait).
 * Until a segment is registered its frames are copied.
 */
#define IPCD_REGQ 32

struct ipcd_reg {
	pthread_t thr;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct {
		void *addr;
		size_t len;
	} q[IPCD_REGQ];
	unsigned n;
	void *busy; /* being registered now (NULL: none) */
	bool stop;
	bool started; /* else be_reg_mem() registers at once */
	uint64_t done, full;
};

struct cs_daemon_ipc {
	struct cs_daemon *d;
	struct ipcd_conf *cf;
	struct cs_ipc_server *srv;
	struct cs_gpu_ipc *gpu; /* device buffers: NULL without a GPU */
	struct cs_pst *pst; /* parameter-server tables (svc_ps_trainer.c) */
	struct cs_p2p *p2p; /* point-to-point send/recv (svc_p2p.c) */
	pthread_t thr;
	atomic_bool stop;
	bool hosted; /* ipc.on_lcore: lcore 0 runs ipc_side() */
	bool broken; /* ipc.on_lcore: the listener broke */
	struct cs_lcore_side side; /* ipc.on_lcore */
	int epfd; /* ipc.on_lcore: lcore 0 waits on it */
	uint64_t ep_accepted, ep_lost; /* trainers when epfd was filled */
	int efd; /* the lcore's verdicts wake the IPC thread (-1: naps) */
	/* quiet(): efd, listener, trainers (NULL: naps); ipc.on_lcore:
	 * listener, trainers */
	struct pollfd *pfd;
	/* IPC thread only */
	struct ipcd_op q[IPCD_QUEUE]; /* slots (stable: the lcore writes
				       * their notify) */
	uint32_t count; /* slots used */
	uint32_t nrunning; /* ops running (at most ipc.inflight) */
	uint64_t next_order;
	bool installed; /* an engine may still be on the lcore */
	cs_ns_t done_at;
	/* the last ops whose cross-node part succeeded here, though their
	 * group failed before the results were handed out: their verdicts
	 * would wait for nodes that are done with them (ok_note()) */
	uint64_t ok_cookie[IPCD_OK_MAX];
	unsigned nok;
	uint32_t epoch; /* the node view the queued operations belong to */
	unsigned nlost_seen; /* view.nlost at the last view: unchanged when
			      * a view only grew (a node joined) */
	uint64_t started, finished, failed, lost;
	struct ipcd_trace *trace; /* ipc.trace_dir: IPCD_TRACE_MAX of them */
	uint32_t ntrace;
	struct ipcd_reg reg; /* ipc.on_lcore */
};

static struct ipcd_conf *ipcd_conf(struct cs_daemon_conf *c)
{
	return (struct ipcd_conf *)(void *)c->ipc;
}

int cs_daemon_ipc_defaults(struct cs_daemon_conf *c)
{
	struct ipcd_conf *ic = ipcd_conf(c);
	int ret;

	ret = cs_cfg_defaults(cs_ipc_cfg_table, cs_ipc_cfg_table_len, &ic->ipc);
	if (ret)
		return ret;
	/* empty: <run_dir>/collstack.sock, decided at start */
	ic->ipc.socket_path[0] = 0;
	return cs_cfg_defaults(ipcd_cfg, CS_ARRAY_SIZE(ipcd_cfg), ic);
}

int cs_daemon_ipc_set_key(struct cs_daemon_conf *c, const char *key,
			  const char *val, char *err, size_t errlen)
{
	struct ipcd_conf *ic = ipcd_conf(c);
	int ret;

	ret = cs_cfg_set(ipcd_cfg, CS_ARRAY_SIZE(ipcd_cfg), ic, key, val, err,
			 errlen);
	if (ret != -ENOENT)
		return ret;
	ret = cs_cfg_set(cs_ipc_cfg_table, cs_ipc_cfg_table_len, &ic->ipc, key,
			 val, err, errlen);
	/* 0 (off) or 64K..1G: the table's bounds cannot say "or 0" */
	if (!ret && !strcmp(key, "ipc.dev_pipe") && ic->ipc.dev_pipe &&
	    ic->ipc.dev_pipe < (64u << 10)) {
		snprintf(err, errlen,
			 "config key 'ipc.dev_pipe': value '%s' is neither 0 "
			 "(off) nor within [64K, 1G]",
			 val);
		return -EINVAL;
	}
	return ret;
}

void cs_daemon_ipc_help(FILE *out)
{
	fprintf(out, "\ntrainer IPC (libcollstack; ipc.socket default here: "
		     "<run_dir>/" IPCD_SOCK_NAME ", trainers find it through "
		     "$COLLSTACK_SOCKET):\n");
	cs_cfg_help(ipcd_cfg, CS_ARRAY_SIZE(ipcd_cfg), out);
	cs_cfg_help(cs_ipc_cfg_table, cs_ipc_cfg_table_len, out);
}

/* ---- the backend ------------------------------------------------------- */

static cs_ns_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (cs_ns_t)ts.tv_sec * CS_NS_PER_S + (cs_ns_t)ts.tv_nsec;
}

/* ipc.trace_dir: the timestamps of @o, whose verdict was just seen */
static void trace_op(struct cs_daemon_ipc *x, const struct ipcd_op *o,
		     cs_ns_t seen)
{
	struct ipcd_trace *t;

	if (x->ntrace == IPCD_TRACE_MAX)
		return;
	t = &x->trace[x->ntrace];
	if (cs_ar_svc_ext_times(o->h, &t->picked, &t->ready, &t->done))
		return;
	t->op_id = o->op_id;
	t->kind = (uint32_t)o->op.kind;
	t->bytes = (uint64_t)o->op.count * cs_dtype_size(o->op.dtype);
	t->launched = o->launched;
	t->seen = seen;
	x->ntrace++;
}

/* ipc.trace_dir: <dir>/ipc-<rank>.txt, one line per operation */
static void trace_write(struct cs_daemon_ipc *x)
{
	char path[2 * CS_CFG_STR_MAX];
	FILE *f;

	snprintf(path, sizeof(path), "%s/ipc-%u.txt", x->cf->trace_dir,
		 x->d->conf.rank);
	f = fopen(path, "w");
	if (!f) {
		CS_WARN("ipc.trace_dir: %s: %s", path, strerror(errno));
		return;
	}
	fprintf(f,
		"# collstackd node %u: cross-node operations, "
		"CLOCK_MONOTONIC ns\n# op_id kind bytes launched picked "
		"ready done seen\n",
		x->d->conf.rank);
	for (uint32_t i = 0; i < x->ntrace; i++) {
		const struct ipcd_trace *t = &x->trace[i];

		fprintf(f, "%u %u %llu %llu %llu %llu %llu %llu\n", t->op_id,
			t->kind, (unsigned long long)t->bytes,
			(unsigned long long)t->launched,
			(unsigned long long)t->picked,
			(unsigned long long)t->ready,
			(unsigned long long)t->done,
			(unsigned long long)t->seen);
	}
	if (fclose(f))
		CS_WARN("ipc.trace_dir: %s: %s", path, strerror(errno));
	else
		CS_INFO("ipc.trace_dir: %u operations in %s", x->ntrace, path);
}

/* FNV-1a of the group name: 7 bits of the id keep groups apart. */
static uint32_t name_hash(const char *s)
{
	uint32_t h = 2166136261u;

	while (*s)
		h = (h ^ (uint8_t)*s++) * 16777619u;
	return h;
}

/*
 * The id of the k-th operation of a group: the top bit keeps it apart from
 * `collstack run` ids, the next tells a ring kind (OP_ID_RING_KIND, set
 * by launch()), the next a control exchange of the group's (OP_ID_CTRL:
 * its membership check, a verdict), then 11 bits of the name's hash xor
 * the group's view epoch, 18 bits of k. k is the low half of the server's
 * cookie (the instance's sequence number). Operations of different groups
 * run at once and are matched by this id alone: 11 bits make two groups'
 * ids meet once in 2048 pairs of names (5 bits did once in 32, which was
 * harmless only while one operation ran at a time in the same order); k
 * wraps after 262144 operations of a group, one at a time each.
 */
static uint32_t op_id_of(const struct cs_ipc_inter_op *op)
{
	/* The view's epoch in the hash bits: an elastic group re-formed in
	 * a new view counts k from 0 again (cs_ipc_server_regroup), and the
	 * transport core must not take its operations for the ones of the
	 * same k in the view before (they may still be remembered there). */
	/* A pipelined instance's slices (cs_ipc_inter_op.slice, at most
	 * 2048) run as steps of their own: slice s xors s x 0x5a3 (odd, so
	 * every slice of one operation gets other hash bits) into them;
	 * slice 0, and an operation that is not cut, has the plain id. */
	return 0x80000000u |
	       ((name_hash(op->group) ^ op->epoch ^ (op->slice * 0x5a3u)) &
		0x7ff) << 18 |
	       ((uint32_t)op->cookie & 0x3ffff);
}

static bool root_is_local(const struct cs_ipc_inter_op *op)
{
	for (uint32_t l = 0; l < op->local_size; l++)
		if ((uint32_t)op->local_ranks[l] == op->root)
			return true;
	return false;
}

/* Op ids of the ring kinds below (reduce-scatter, all-gather as such):
 * never the id of the same op run as a sum elsewhere. */
#define OP_ID_RING_KIND 0x40000000u
/* Control exchanges of a group: its membership check (op k = 0's id with
 * this bit) and the verdict of op k (op k's id with this bit and
 * OP_ID_RING_KIND): never a data operation's id. */
#define OP_ID_CTRL 0x20000000u
#define OP_ID_CHECK(id) ((id) | OP_ID_CTRL)
#define OP_ID_VERDICT(id) ((id) | OP_ID_CTRL | OP_ID_RING_KIND)

/* An op of a failed group that succeeded here: no verdict for it. */
static void ok_note(struct cs_daemon_ipc *x, uint64_t cookie)
{
	if (x->nok == IPCD_OK_MAX) /* the oldest goes */
		memmove(x->ok_cookie, x->ok_cookie + 1,
			--x->nok * sizeof(x->ok_cookie[0]));
	x->ok_cookie[x->nok++] = cookie;
}

/* Forget @cookie (@group: every op of its group); whether it was noted. */
static bool ok_take(struct cs_daemon_ipc *x, uint64_t cookie, bool group)
{
	bool found = false;

	for (unsigned i = 0; i < x->nok;) {
		if (group ? x->ok_cookie[i] >> 32 == cookie >> 32
			  : x->ok_cookie[i] == cookie) {
			x->ok_cookie[i] = x->ok_cookie[--x->nok];
			found = true;
			continue;
		}
		i++;
	}
	return found;
}

static void op_running(struct cs_daemon_ipc *x, struct ipcd_op *o);
/* This node's ring index and the ring's size in the current view; a
 * failure other than -EAGAIN (the view moved) is logged for @group. */
static int ring_pos(struct cs_daemon_ipc *x, const char *group, uint32_t *pos,
		    uint32_t *nn)
{
	char msg[160];
	int ret = cs_ar_svc_ring_pos(x->d->svc, x->epoch, pos, nn, msg,
				     sizeof(msg));

	if (ret && ret != -EAGAIN)
		CS_WARN("group '%s': %s", group, msg);
	return ret;
}

/*
 * The transport group of the operations of a group over some nodes: from
 * its node set, so the same on each of them (bit 30: apart from the
 * sidecar's own groups and collstack run's).
 */
static uint32_t subset_group(const uint64_t *mask)
{
	uint32_t h = 2166136261u;

	for (unsigned i = 0; i < CS_IPC_NODE_WORDS; i++)
		for (unsigned b = 0; b < 64; b += 8)
			h = (h ^ (uint8_t)(mask[i] >> b)) * 16777619u;
	return 0x40000000u | (h & 0x3fffffffu);
}

/*
 * ring_pos() for @o's group: every node's ring, or, for a group over some
 * nodes (o->has_mask), theirs: *@pos this node's index among them, *@nn
 * how many, o->nodes their ring indexes (o->nnodes; 0 when the set is
 * every node of the view, which is the view's ring). Every member
 * computes the same from the same set. -EINVAL (logged) for a set with a
 * node the view does not have.
 */
static int grp_ring(struct cs_daemon_ipc *x, struct ipcd_op *o, uint32_t *pos,
		    uint32_t *nn)
{
	uint32_t self, n, k = 0;
	int ret = ring_pos(x, o->name, &self, &n);

	o->nnodes = 0;
	*pos = self;
	*nn = n;
	if (ret || !o->has_mask)
		return ret;
	for (uint32_t i = 0; i < CS_IPC_SUBSET_NODES; i++) {
		if (!(o->mask[i / 64] >> (i % 64) & 1))
			continue;
		if (i >= n) {
			CS_WARN("group '%s' spans node %u, the view has %u "
				"nodes",
				o->name, i, n);
			return -EINVAL;
		}
		if (i == self)
			*pos = k;
		o->nodes[k++] = i;
	}
	if (self >= CS_IPC_SUBSET_NODES ||
	    !(o->mask[self / 64] >> (self % 64) & 1) || k < 2) {
		CS_WARN("group '%s': its %u nodes leave out this one (%u)",
			o->name, k, self);
		return -EINVAL;
	}
	if (k == n) { /* every node: the view's ring */
		*pos = self;
		return 0;
	}
	o->nnodes = k;
	*nn = k;
	return 0;
}

/* @c runs in @o's group's ring (grp_ring() ran). */
static void grp_coll(const struct ipcd_op *o, struct cs_ar_coll *c)
{
	if (!o->nnodes)
		return;
	c->nodes = o->nodes;
	c->nnodes = o->nnodes;
	c->group = subset_group(o->mask);
}

/* cs_ar_svc_refuse() in @o's group's ring (grp_ring() ran). */
static int grp_refuse(struct cs_daemon_ipc *x, const struct ipcd_op *o,
		      uint32_t op_id, int err)
{
	return cs_ar_svc_refuse_in(x->d->svc, op_id, x->epoch, err,
				   subset_group(o->mask), o->nodes, o->nnodes);
}

static void op_let_go(struct cs_daemon_ipc *x, struct ipcd_op *o);

/*
 * The slots of one of @o's small exchanges among the group's nodes
 * (@words int32 a node, summed as i32 over @c: each node fills only its
 * own, the others stay zero): o->chk, with this node's slot returned, its
 * first two words set (present, this node's rank). NULL with *@ret set
 * when the group has no ring here or memory is short.
 */
static int32_t *slots_new(struct cs_daemon_ipc *x, struct ipcd_op *o,
			  size_t words, struct cs_ar_coll *c, int *ret)
{
	uint32_t pos, nn;
	int32_t *slot;

	*ret = grp_ring(x, o, &pos, &nn);
	if (*ret)
		return NULL;
	grp_coll(o, c);
	free(o->chk);
	o->chk = calloc((size_t)nn * words, sizeof(*o->chk));
	if (!o->chk) {
		*ret = -ENOMEM;
		return NULL;
	}
	o->chk_n = nn;
	o->chk_pos = pos;
	slot = o->chk + (size_t)pos * words;
	slot[0] = 1;
	slot[1] = (int32_t)x->d->conf.rank;
	c->recvbuf = o->chk;
	c->count = (size_t)nn * words;
	return slot;
}

/* Start the exchange @c of slots_new(); @what names it in a warning. As
 * launch(). */
static int slots_start(struct cs_daemon_ipc *x, struct ipcd_op *o,
		       struct cs_ar_coll *c, const char *group,
		       const char *what)
{
	char msg[160];
	int ret;

	atomic_store(&o->notify, 0);
	ret = cs_ar_svc_start_coll(x->d->svc, c, &o->h, msg, sizeof(msg));
	if (ret == -EAGAIN)
		return ret;
	if (ret) {
		CS_WARN("group '%s' %s %#x: %s", group, what, c->op_id, msg);
		return ret;
	}
	op_running(x, o);
	return 0;
}

/*
 * Operation k of a group was refused on some node (a bad or mismatched
 * descriptor of a trainer there: CS_IPC_INTER_VERDICT from its server),
 * and that node never ran its part, so the other nodes' part failed on a
 * silent node. To tell those ranks why, every node runs one more small
 * exchange for op k: the refusing node at once (the verdict takes op k's
 * place in its queue), the others once op k failed on a silent node (the
 * post-mortem). Each node's slot says whether it refused and with what;
 * a refusal found there completes op k with that error instead of
 * CS_ERR_PEER_LOST. If no node refused (a node really went silent), the
 * exchange fails the same way and op k keeps its own error. As launch().
 */
static int launch_verdict(struct cs_daemon_ipc *x, struct ipcd_op *o)
{
	const struct cs_ipc_inter_op *op = &o->op;
	struct cs_ar_coll c = {
		.op_id = OP_ID_VERDICT(o->op_id),
		.epoch = x->epoch,
		.kind = CS_COLL_ALLREDUCE,
		.dtype = CS_I32,
		.redop = CS_SUM,
		.notify = &o->notify,
	};
	int32_t *slot;
	cs_ns_t now;
	int ret;

	slot = slots_new(x, o, IPCD_VERDICT_WORDS, &c, &ret);
	if (!slot)
		return ret;
	if (op->kind == CS_IPC_INTER_VERDICT) {
		slot[2] = op->status;
		slot[3] = op->detail;
		slot[4] = op->peer + 1;
		/* the other nodes' part of op k (and, for k = 0, of the
		 * group's membership check, which this node never runs) ends
		 * at once naming this node; then this exchange tells them
		 * why */
		int why = op->status <= CS_ERR_PEER_LOST &&
					  op->status >= CS_ERR_PROTO
				  ? op->status
				  : CS_ERR_BAD_DESC;

		/* under both ids op k may run as elsewhere: as a sum, and
		 * as a ring kind (reduce-scatter, all-gather in node blocks,
		 * all-to-all) */
		if (!o->tries && !o->a2a_refused &&
		    (grp_refuse(x, o, o->op_id, why) ||
		     grp_refuse(x, o, o->op_id | OP_ID_RING_KIND, why) ||
		     ((uint32_t)op->cookie == 0 &&
		      grp_refuse(x, o, OP_ID_CHECK(o->op_id), why))))
			CS_WARN("group '%s': op %#x: the refusal was not "
				"announced",
				o->name, o->op_id);
	}
	now = now_ns();
	if (!o->tries)
		o->verdict_end = now + IPCD_VERDICT_BUDGET;
	c.deadline = o->verdict_end > now ? o->verdict_end - now : 1;
	ret = slots_start(x, o, &c, o->name, "verdict");
	if (!ret)
		o->verdicting = true;
	return ret;
}

/* Start @o's membership check (see IPCD_CHK_WORDS); as launch(). */
static int launch_check(struct cs_daemon_ipc *x, struct ipcd_op *o)
{
	const struct cs_ipc_inter_op *op = &o->op;
	struct cs_ar_coll c = {
		.op_id = OP_ID_CHECK(o->op_id),
		.epoch = x->epoch,
		.kind = CS_COLL_ALLREDUCE,
		.dtype = CS_I32,
		.redop = CS_SUM,
		.notify = &o->notify,
	};
	int32_t *slot;
	int ret;

	slot = slots_new(x, o, IPCD_CHK_WORDS, &c, &ret);
	if (!slot)
		return ret;
	slot[2] = (int32_t)op->group_size;
	slot[3] = (int32_t)op->local_size;
	/* at most 1G (ipc.dev_pipe's bound): fits */
	slot[IPCD_CHK_PIPE] = (int32_t)op->pipe;
	slot[IPCD_CHK_SLICES] = (int32_t)op->slices;
	/* rank + 1; -1: a rank with no number yet (joined with this node) */
	for (uint32_t l = 0; l < op->local_size && l < CS_IPC_MAX_LOCAL; l++)
		slot[IPCD_CHK_HDR + l] =
			op->local_ranks[l] < 0 ? -1 : op->local_ranks[l] + 1;
	ret = slots_start(x, o, &c, op->group, "membership check");
	if (!ret)
		o->checking = true;
	return ret;
}

/* A re-formed group's old size: what its nodes that had one say (those
 * that joined say 0; they all say the same, else check_refuses() names
 * one). */
static uint32_t chk_size(const struct ipcd_op *o)
{
	uint32_t size = 0;

	for (uint32_t j = 0; j < o->chk_n; j++) {
		const int32_t *sl = o->chk + (size_t)j * IPCD_CHK_WORDS;

		if (sl[0] == 1 && sl[2] > 0 && (uint32_t)sl[2] > size)
			size = (uint32_t)sl[2];
	}
	return size;
}

/*
 * What every node said about @o's group (o->chk after the check):
 * false if they agree, else true with what to fail the group with. Every
 * node sees the same slots; each names a node other than itself. An
 * elastic group re-formed in a new view (op.regroup) may miss ranks: they
 * were on the lost nodes.
 */
static bool check_refuses(struct cs_daemon_ipc *x, const struct ipcd_op *o,
			  unsigned *detail, int32_t *peer, uint32_t *aux)
{
	const struct cs_ipc_inter_op *op = &o->op;
	uint32_t size = op->regroup ? chk_size(o) : op->group_size;
	uint32_t n = o->chk_n;
	uint32_t *owner = NULL; /* node slot + 1 claiming each rank */
	bool refused = false;

	/* sizes, and every slot filled (a node without the group); when
	 * re-formed, the nodes that joined (size 0) have none yet */
	for (uint32_t j = 0; j < n; j++) {
		const int32_t *sl = o->chk + (size_t)j * IPCD_CHK_WORDS;

		if (j == o->chk_pos || (op->regroup && sl[0] == 1 && !sl[2]))
			continue;
		if (sl[0] != 1 || (uint32_t)sl[2] != size) {
			*detail = CS_IPC_BAD_GROUP_SIZE;
			*peer = sl[0] == 1 ? sl[1] : (int32_t)j;
			*aux = sl[0] == 1 ? (uint32_t)sl[2] : 0;
			CS_ERR("group '%s' refused: node %d joined it with "
			       "size %u, this node (%u) with size %u",
			       op->group, (int)*peer, *aux, x->d->conf.rank,
			       size);
			return true;
		}
	}
	owner = calloc(size, sizeof(*owner));
	if (!owner) { /* cannot tell: let the group run unchecked */
		CS_WARN("group '%s': membership not checked (no memory)",
			op->group);
		return false;
	}
	/* ranks claimed twice; this node's slot first, so that a rank it
	 * claims names the other node */
	for (uint32_t j = 0; j < n && !refused; j++) {
		uint32_t jj = j == 0 ? o->chk_pos : j == o->chk_pos ? 0 : j;
		const int32_t *sl = o->chk + (size_t)jj * IPCD_CHK_WORDS;

		for (uint32_t l = 0; l < CS_IPC_MAX_LOCAL; l++) {
			int32_t r = sl[IPCD_CHK_HDR + l] - 1;

			if (r < 0 || (uint32_t)r >= size)
				continue;
			if (!owner[r]) {
				owner[r] = jj + 1;
				continue;
			}
			/* the first claim was this node's or another's */
			if (owner[r] - 1 != o->chk_pos)
				jj = owner[r] - 1;
			*detail = CS_IPC_BAD_GROUP_RANK;
			*peer = o->chk[(size_t)jj * IPCD_CHK_WORDS + 1];
			*aux = (uint32_t)r;
			refused = true;
			break;
		}
	}
	if (refused) {
		CS_ERR("group '%s' refused: rank %u is claimed by node %d "
		       "and by another node",
		       op->group, *aux, (int)*peer);
		free(owner);
		return true;
	}
	for (uint32_t r = 0; r < size && !op->regroup; r++)
		if (!owner[r]) {
			*detail = CS_IPC_BAD_GROUP_MISSING;
			*peer = -1;
			*aux = r;
			CS_ERR("group '%s' refused: rank %u (of %u) is on no "
			       "node",
			       op->group, r, size);
			refused = true;
			break;
		}
	free(owner);
	return refused;
}

/*
 * An elastic group's first operation in a new view (op.regroup), once its
 * membership check agreed: the slots say which of its old ranks live on
 * the nodes of the new view, and which ranks have no number yet (nodes
 * that joined). The old ones keep their order and are numbered from 0
 * again (the new rank of old rank r is the number of ranks below r that
 * are left); the new ones follow, in ring order of their nodes and local
 * order within a node. Every node computes the same from the same slots.
 * Hands the result to the server; returns 0, CS_ERR_EPOCH when the
 * operation's buffers were laid out for the old size (all-gather,
 * reduce-scatter: posted again, it runs), or an error.
 */
static int regroup(struct cs_daemon_ipc *x, struct ipcd_op *o)
{
	struct cs_ipc_inter_op *op = &o->op;
	uint32_t old = chk_size(o), kept = 0, fresh = 0, size;
	int32_t ranks[CS_IPC_MAX_LOCAL];
	uint8_t *left;
	int ret;

	left = calloc(old + 1, 1);
	if (!left)
		return -ENOMEM;
	for (uint32_t j = 0; j < o->chk_n; j++) {
		const int32_t *sl = o->chk + (size_t)j * IPCD_CHK_WORDS;

		for (uint32_t l = 0; l < CS_IPC_MAX_LOCAL && sl[0] == 1; l++) {
			int32_t r = sl[IPCD_CHK_HDR + l] - 1;

			if (r >= 0 && (uint32_t)r < old)
				left[r] = 1;
			/* ours: numbered after the old ones, below */
			if (r == -2 && j == o->chk_pos && l < op->local_size)
				ranks[l] = -(int32_t)fresh - 1;
			fresh += r == -2;
		}
	}
	for (uint32_t r = 0; r < old; r++)
		kept += left[r];
	size = kept + fresh;
	for (uint32_t l = 0; l < op->local_size; l++) {
		if (op->local_ranks[l] < 0) { /* joined: after the old ones */
			ranks[l] = (int32_t)kept - ranks[l] - 1;
			continue;
		}
		ranks[l] = 0;
		for (int32_t r = 0; r < op->local_ranks[l] && (uint32_t)r < old;
		     r++)
			ranks[l] += left[r];
	}
	free(left);
	ret = cs_ipc_server_regroup(x->srv, op->cookie, size, ranks);
	if (ret) {
		CS_WARN("group '%s': not re-formed: %s", o->name,
			cs_strerror(ret));
		return ret;
	}
	CS_INFO("group '%s' re-formed in view epoch %u: %u of its %u ranks "
		"left, %u joined (%u nodes)",
		o->name, x->epoch, kept, old, fresh, o->chk_n);
	op->group_size = size;
	op->regroup = false;
	if (size != old && (op->kind == CS_IPC_INTER_ALL_GATHER ||
			    op->kind == CS_IPC_INTER_REDUCE_SCATTER))
		return CS_ERR_EPOCH;
	return 0;
}

/* The sum trick: the blocks of ranks not on this node are zero. */
static void zero_remote_blocks(const struct cs_ipc_inter_op *op, size_t esz)
{
	size_t blk = (size_t)op->block * esz;

	for (uint32_t r = 0; r < op->group_size; r++) {
		bool local = false;

		for (uint32_t l = 0; l < op->local_size && !local; l++)
			local = (uint32_t)op->local_ranks[l] == r;
		if (!local)
			memset((uint8_t *)op->buf + (size_t)r * blk, 0, blk);
	}
}

/*
 * Whether @o's group, whose membership check just agreed (o->chk), is laid
 * out in node blocks: every node of the ring holds L = size / nodes ranks,
 * the node at ring index j ranks j L .. j L + L - 1. Every node sees the
 * same slots, so every node decides the same.
 */
static bool chk_blocked(const struct ipcd_op *o)
{
	uint32_t n = o->chk_n, size = o->op.group_size, L;

	if (!n || size % n)
		return false;
	L = size / n;
	if (L > CS_IPC_MAX_LOCAL)
		return false;
	for (uint32_t j = 0; j < n; j++) {
		const int32_t *sl = o->chk + (size_t)j * IPCD_CHK_WORDS;

		if (sl[0] != 1 || (uint32_t)sl[3] != L)
			return false;
		for (uint32_t l = 0; l < L; l++) {
			int32_t r = sl[IPCD_CHK_HDR + l] - 1;

			if (r < 0 || (uint32_t)r / L != j)
				return false;
		}
	}
	return true;
}

/*
 * Whether @op (a reduce-scatter or all-gather) may run as such on the
 * ring (see launch()): 1 with *@pos this node's ring index, 0, or a
 * negative error (-EAGAIN: the view moved). It may when the group's
 * membership check found node blocks (op->blocked, the same on every
 * node): node i's L ranks' blocks are then one block of the ring.
 */
static int ring_layout(struct cs_daemon_ipc *x, struct ipcd_op *o,
		       uint32_t *pos)
{
	const struct cs_ipc_inter_op *op = &o->op;
	uint32_t nn, L = op->local_size;
	int ret;

	if (!op->blocked || !op->block)
		return 0;
	ret = grp_ring(x, o, pos, &nn);
	if (ret)
		return ret;
	/* what the check found, still so in this view (else it fails) */
	return op->group_size == nn * L &&
	       (uint32_t)op->local_ranks[0] / L == *pos &&
	       op->count >= (uint64_t)op->group_size * op->block;
}

/*
 * An all-to-all runs node to node (CS_IPC_INTER_ALLTOALL): this node's
 * ranks must be the block of its ring index (*@pos), every node holding
 * as many. Otherwise it is refused here: announced so to the group (the
 * other nodes' part ends at once, naming this node), and @o becomes the
 * verdict exchange that tells them why (launch_verdict(), detail
 * CS_IPC_BAD_LAYOUT); its own ranks fail with that once it is done.
 * Returns 0 (*@pos set), 2 (refused: the verdict exchange runs), -EAGAIN
 * (the view moved) or another error.
 */
static int a2a_layout(struct cs_daemon_ipc *x, struct ipcd_op *o, uint32_t *pos)
{
	struct cs_ipc_inter_op *op = &o->op;
	uint32_t nn, L = op->local_size;
	int ret;

	ret = grp_ring(x, o, pos, &nn);
	if (ret)
		return ret;
	if (op->group_size == nn * L &&
	    (uint32_t)op->local_ranks[0] == *pos * L)
		return 0;
	CS_WARN("group '%s': all-to-all refused: %u ranks here from rank %d, "
		"the group has %u over %u nodes; node %u must hold ranks "
		"%u..%u (the same number on every node, in ring order)",
		op->group, L, (int)op->local_ranks[0], op->group_size, nn, *pos,
		*pos * L, *pos * L + L - 1);
	if (grp_refuse(x, o, o->op_id | OP_ID_RING_KIND, CS_ERR_BAD_DESC))
		CS_WARN("group '%s': the refusal was not announced", op->group);
	o->a2a_refused = true;
	op->kind = CS_IPC_INTER_VERDICT;
	op->status = CS_ERR_BAD_DESC;
	op->detail = CS_IPC_BAD_LAYOUT;
	op->peer = -1;
	ret = launch_verdict(x, o);
	return ret ? ret : 2;
}

/*
 * Start @o on the port; returns 0, 1 (nothing to exchange) or a
 * negative error.
 *
 * When the group is laid out in node blocks (op->blocked: the membership
 * check found L ranks on every node, node i holding ranks i L .. i L +
 * L - 1; node order = rank order as docs/ipcd.md asks), reduce-scatter
 * and all-gather run as such on the ring, a node's L blocks one block of
 * it: (n-1)/n of the buffer across each link instead of the sum's
 * 2(n-1)/n. Each needs every node's data, so no node finishes one before
 * every node finished the one before. Every node
 * sees the same and decides the same; should one not (ranks out of node
 * order), its op id differs (OP_ID_RING_KIND) and the op fails on a
 * timeout instead of mixing frames of two algorithms. Otherwise they ride
 * an allreduce: all-gather and broadcast as an integer sum over the raw
 * bytes (every byte zero except the ones one node supplies, so the sum is
 * those bytes bit for bit), reduce-scatter as the allreduce of everything.
 */
static int launch(struct cs_daemon_ipc *x, struct ipcd_op *o)
{
	const struct cs_ipc_inter_op *op = &o->op;
	size_t esz = cs_dtype_size(op->dtype), bytes = op->count * esz;
	struct cs_ar_coll c = {
		.op_id = o->op_id,
		.epoch = x->epoch,
		.kind = CS_COLL_ALLREDUCE,
		.recvbuf = op->buf,
		.count = op->count,
		.dtype = op->dtype,
		.redop = op->redop,
		.notify = &o->notify,
	};
	uint32_t pos = 0;
	size_t node_block = 0;
	int ring = 0;
	char msg[160];
	int ret;

	op_let_go(x, o);
	/* a later op of its group: those are long finished */
	ok_take(x, op->cookie, true);
	if (op->kind == CS_IPC_INTER_VERDICT || o->postmortem)
		return launch_verdict(x, o);
	if (o->check)
		return launch_check(x, o);
	if (op->kind == CS_IPC_INTER_REDUCE_SCATTER ||
	    op->kind == CS_IPC_INTER_ALL_GATHER) {
		ring = ring_layout(x, o, &pos);
		if (ring < 0)
			return ring; /* -EAGAIN: on_view() fails it */
		/* the node's L ranks' blocks, consecutive */
		node_block = (size_t)op->block * op->local_size;
	}
	switch (op->kind) {
	case CS_IPC_INTER_ALLREDUCE:
		c.sendbuf = op->sendbuf; /* out of place: the engine reads it */
		break;
	case CS_IPC_INTER_REDUCE_SCATTER:
		c.sendbuf = op->sendbuf;
		if (ring) { /* this node's block of the node sums, in @buf */
			c.kind = CS_COLL_REDUCE_SCATTER;
			c.count = node_block;
			c.sendbuf = op->sendbuf ? op->sendbuf : op->buf;
			c.recvbuf = (uint8_t *)op->buf +
				    (size_t)pos * node_block * esz;
		}
		break;
	case CS_IPC_INTER_BROADCAST:
		/* Not the engine's chain: its root is done once the next
		 * node has everything, and may then run two operations ahead
		 * of a node that still waits for the root's last ACK of an
		 * earlier one (only the operation before is kept to answer
		 * it). An allreduce needs every node, so no node gets more
		 * than one ahead. */
		if (!root_is_local(op))
			memset(op->buf, 0, bytes);
		goto sum_of_bytes;
	case CS_IPC_INTER_ALL_GATHER:
		if (ring) {
			c.kind = CS_COLL_ALL_GATHER;
			c.count = node_block;
			c.sendbuf = (uint8_t *)op->buf +
				    (size_t)pos * node_block * esz;
			break;
		}
		zero_remote_blocks(op, esz);
	sum_of_bytes:
		/* x + 0 + ... + 0 == x exactly for integers */
		c.redop = CS_SUM;
		if (bytes % 4 == 0) {
			c.dtype = CS_I32;
			c.count = bytes / 4;
		} else {
			c.dtype = CS_U8;
			c.count = bytes;
		}
		break;
	case CS_IPC_INTER_ALLTOALL:
		ret = a2a_layout(x, o, &pos);
		if (ret == 2)
			return 0; /* its verdict exchange runs instead */
		if (ret)
			return ret;
		c.alltoall = true;
		c.sendbuf = op->sendbuf;
		c.count = op->block;
		if (op->a2a_counts) { /* an all-to-all-v's data step */
			c.a2a_counts = op->a2a_counts;
			c.count = 1; /* something moves (the server knows) */
		}
		break;
	case CS_IPC_INTER_BARRIER:
		o->barrier_word = 0;
		c.recvbuf = &o->barrier_word;
		c.dtype = CS_I32;
		c.redop = CS_SUM;
		c.count = 1;
		break;
	default:
		CS_WARN("group '%s': cross-node operation kind %d is not "
			"supported",
			op->group, (int)op->kind);
		return -EOPNOTSUPP;
	}
	if (!c.count)
		return 1; /* nothing to exchange: done now */
	/* a group over some nodes: its ring (ring_layout() and a2a_layout()
	 * looked it up already) */
	if (o->has_mask && !ring && !c.alltoall) {
		uint32_t p, nn;

		ret = grp_ring(x, o, &p, &nn);
		if (ret)
			return ret;
	}
	grp_coll(o, &c);
	if (c.kind != CS_COLL_ALLREDUCE || c.alltoall) {
		c.op_id |= OP_ID_RING_KIND;
		c.rank = pos;
	}
	atomic_store(&o->notify, 0);
	if (x->trace)
		o->launched = now_ns();
	ret = cs_ar_svc_start_coll(x->d->svc, &c, &o->h, msg, sizeof(msg));
	if (ret == -EAGAIN)
		return ret; /* the view moved: on_view() fails it */
	if (ret) {
		CS_WARN("group '%s' op %#x: %s", op->group, c.op_id, msg);
		return ret;
	}
	op_running(x, o);
	x->started++;
	return 0;
}

/* @o runs on the lcore (its handle taken), or has nothing to exchange. */
static void op_running(struct cs_daemon_ipc *x, struct ipcd_op *o)
{
	if (!o->running)
		x->nrunning++;
	o->running = true;
	x->installed = true;
}

static void op_idle(struct cs_daemon_ipc *x, struct ipcd_op *o)
{
	if (o->running)
		x->nrunning--;
	o->running = false;
	o->checking = false;
	o->verdicting = false;
}

/* What @o ran has its verdict: the lcore may keep an early one resending
 * (cs_ar_svc_stop_ext() ends that once no group is left). */
static void op_let_go(struct cs_daemon_ipc *x, struct ipcd_op *o)
{
	if (o->h)
		cs_ar_svc_ext_put(x->d->svc, o->h);
	o->h = NULL;
}

/* @o is abandoned: off the lcore before its buffers go. */
static void op_stop(struct cs_daemon_ipc *x, struct ipcd_op *o)
{
	if (o->h)
		cs_ar_svc_ext_stop(x->d->svc, o->h);
	o->h = NULL;
	op_idle(x, o);
}

static void slot_free(struct cs_daemon_ipc *x, struct ipcd_op *o)
{
	op_let_go(x, o);
	op_idle(x, o);
	free(o->chk);
	o->chk = NULL;
	o->used = false;
	x->count--;
}

/* ctlplane: the node view moved on since the queued ops were formed. */
static bool view_moved(const struct cs_daemon_ipc *x)
{
	return atomic_load_explicit(&x->d->view.epoch, memory_order_acquire) !=
	       x->epoch;
}

/* A refusal of @o's group by its membership check (@group), or of @o
 * alone by another node (its verdict). */
struct ipcd_refusal {
	bool group;
	unsigned detail;
	int32_t peer;
	uint32_t aux;
};

/*
 * Finish @o with @status (@node: the node that stopped answering it, or
 * -1; @ref: its group is refused, or NULL). What waits starts in the same
 * round (schedule()). Returns work done.
 */
static unsigned finish_and_next_ex(struct cs_daemon_ipc *x, struct ipcd_op *o,
				   int status, int node,
				   const struct ipcd_refusal *ref, cs_ns_t now)
{
	uint64_t cookie = o->op.cookie;

	if (status)
		x->failed++;
	else
		x->finished++;
	slot_free(x, o);
	x->done_at = now;
	/* may call start_inter_node() again (the next instance) */
	if (ref && ref->group)
		cs_ipc_server_inter_refuse(x->srv, cookie, status, ref->detail,
					   ref->peer, ref->aux);
	else if (ref)
		cs_ipc_server_inter_fail_ex(x->srv, cookie, status, ref->detail,
					    ref->peer, ref->aux);
	else if (status == CS_ERR_PEER_LOST && node >= 0)
		cs_ipc_server_inter_fail(x->srv, cookie, status,
					 CS_IPC_LOST_SESSION, node);
	else
		cs_ipc_server_inter_done(x->srv, cookie, status);
	return 1;
}

static unsigned finish_and_next(struct cs_daemon_ipc *x, struct ipcd_op *o,
				int status, int node, cs_ns_t now)
{
	return finish_and_next_ex(x, o, status, node, NULL, now);
}

/*
 * The op to start next: the oldest waiting one whose group's older ops
 * all run already (a group's ops start in the order they came, the same
 * on every node, and run together: the server hands over at most
 * ipc.group_inflight of a group, ipc.pipelined of all groups beyond
 * each one's oldest), while fewer than ipc.inflight run. Groups do not
 * wait for each other: their ops are matched across the nodes by id, so
 * two groups posted in opposite orders on two nodes both run.
 */
static struct ipcd_op *next_op(struct cs_daemon_ipc *x)
{
	struct ipcd_op *best = NULL;

	if (x->nrunning >= x->cf->inflight)
		return NULL;
	for (unsigned i = 0; i < IPCD_QUEUE; i++) {
		struct ipcd_op *o = &x->q[i];
		bool first = true;

		if (!o->used || o->running || (best && best->order < o->order))
			continue;
		/* ... and no running op of another group has its id (two
		 * names whose hash bits meet: not both on the core at once) */
		for (unsigned j = 0; j < IPCD_QUEUE && first; j++) {
			const struct ipcd_op *p = &x->q[j];

			first = j == i || !p->used ||
				((p->op.cookie >> 32 != o->op.cookie >> 32 ||
				  p->order > o->order || p->running) &&
				 (!p->running || p->op_id != o->op_id));
		}
		if (first)
			best = o;
	}
	return best;
}

/* Start what may start. Returns work done. */
static unsigned schedule(struct cs_daemon_ipc *x, cs_ns_t now)
{
	unsigned work = 0;
	struct ipcd_op *o;
	int ret;

	while (!view_moved(x) && (o = next_op(x))) {
		ret = launch(x, o);
		if (ret == -EAGAIN)
			return work + 1; /* the view moved: on_view() next */
		work++;
		if (!ret)
			continue;
		/* 1: nothing to exchange, done now; else failed at once */
		finish_and_next(x, o, ret == 1 ? 0 : ret, -1, now);
	}
	return work;
}

/*
 * What the nodes of @o's group cut large operations at (their
 * IPCD_CHK_PIPE words, after the check): every node computes the same
 * from the same slots. Tells the server (cs_ipc_server_set_pipe). Returns
 * true if they differ and some node cut the checked operation itself
 * (the nodes' steps of it do not match: it is refused, *@ref says with
 * what), else false.
 */
static bool check_pipe(struct cs_daemon_ipc *x, const struct ipcd_op *o,
		       struct ipcd_refusal *ref)
{
	const int32_t *me = o->chk + (size_t)o->chk_pos * IPCD_CHK_WORDS;
	uint64_t limit = UINT64_MAX;
	int32_t node = -1;
	uint32_t val = 0;
	bool ok = true, cut = false;

	for (uint32_t j = 0; j < o->chk_n; j++) {
		const int32_t *sl = o->chk + (size_t)j * IPCD_CHK_WORDS;

		if (sl[0] != 1)
			continue;
		if (sl[IPCD_CHK_PIPE] > 0 &&
		    (uint64_t)sl[IPCD_CHK_PIPE] < limit)
			limit = (uint64_t)sl[IPCD_CHK_PIPE];
		cut |= sl[IPCD_CHK_SLICES] != 0;
		if (sl[IPCD_CHK_PIPE] != me[IPCD_CHK_PIPE] && ok) {
			ok = false;
			node = sl[1];
			val = (uint32_t)sl[IPCD_CHK_PIPE];
		}
	}
	if (cs_ipc_server_set_pipe(x->srv, o->op.cookie, ok, limit, node, val))
		return false; /* gone: nothing to refuse */
	if (ok || !cut)
		return false;
	CS_ERR("group '%s' op %#x refused: node %d cuts it at ipc.dev_pipe=%u "
	       "bytes, this node (%u) at %d (0: not cut): set the same "
	       "ipc.dev_pipe on every sidecar",
	       o->name, o->op_id, (int)node, val, x->d->conf.rank,
	       (int)me[IPCD_CHK_PIPE]);
	*ref = (struct ipcd_refusal){
		.group = false,
		.detail = CS_IPC_BAD_PIPE,
		.peer = node,
		.aux = val,
	};
	return true;
}

/*
 * @o's membership check is done: refuse its group if the nodes
 * disagree (every node does, each naming another node), else run the
 * operation itself. Returns work done.
 */
static unsigned check_done(struct cs_daemon_ipc *x, struct ipcd_op *o,
			   cs_ns_t now)
{
	struct ipcd_refusal ref;
	int ret;

	op_idle(x, o);
	ref.group = true;
	if (check_refuses(x, o, &ref.detail, &ref.peer, &ref.aux))
		return finish_and_next_ex(x, o, CS_ERR_BAD_DESC, -1, &ref, now);
	o->check = false;
	if (check_pipe(x, o, &ref))
		return finish_and_next_ex(x, o, CS_ERR_BAD_DESC, -1, &ref, now);
	if (o->nnodes) {
		char list[96];
		size_t n = 0;

		for (uint32_t i = 0; i < o->nnodes && n < sizeof(list) - 12;
		     i++)
			n += (size_t)snprintf(list + n, sizeof(list) - n,
					      "%s%u", i ? "," : "",
					      o->nodes[i]);
		CS_INFO("group '%s': over %u of the nodes (ring indexes %s): "
			"its ring and sessions' group are theirs",
			o->name, o->nnodes, list);
	}
	/* re-formed: the slots hold the old numbering; the new one is
	 * not checked for blocks (its ops ride allreduces) */
	o->op.blocked = !o->op.regroup && chk_blocked(o);
	if (cs_ipc_server_set_blocked(x->srv, o->op.cookie, o->op.blocked))
		CS_WARN("group '%s': gone before its layout was noted",
			o->name);
	else if (o->op.blocked)
		CS_INFO("group '%s': %u ranks per node in node blocks: its "
			"reduce-scatters and all-gathers run on the ring",
			o->name, o->op.local_size);
	if (o->op.regroup) {
		ret = regroup(x, o);
		if (ret == CS_ERR_EPOCH) {
			ref = (struct ipcd_refusal){
				.detail = CS_IPC_EPOCH_RESIZED,
				.peer = -1,
			};
			return finish_and_next_ex(x, o, ret, -1, &ref, now);
		}
		if (ret)
			return finish_and_next(x, o, ret, -1, now);
	}
	if (view_moved(x))
		return 1; /* on_view() fails it */
	ret = launch(x, o);
	if (ret == 1)
		return finish_and_next(x, o, 0, -1, now);
	if (ret < 0 && ret != -EAGAIN)
		return finish_and_next(x, o, ret, -1, now);
	return 1;
}

/* Trainer segments: registered with the port so that frames of a
 * cross-node allreduce (in local rank 0's recv buffer) reference them
 * instead of copying (dpdk, port.zero_copy). Whole pages: a mapping is. */
static size_t page_len(size_t len)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);

	return (len + pg - 1) / pg * pg;
}

static void reg_now(struct cs_daemon_ipc *x, void *addr, size_t len)
{
	int ret = cs_port_reg_mem(x->d->port, addr, page_len(len));

	if (ret && ret != -ENOTSUP)
		CS_INFO("trainer segment of %zu bytes not registered (%s): "
			"its frames are copied",
			len, cs_strerror(ret));
}

static void *reg_main(void *arg)
{
	struct cs_daemon_ipc *x = arg;
	struct ipcd_reg *r = &x->reg;

	pthread_mutex_lock(&r->mu);
	for (;;) {
		void *addr;
		size_t len;

		while (!r->n && !r->stop)
			pthread_cond_wait(&r->cv, &r->mu);
		if (r->stop)
			break;
		addr = r->q[0].addr;
		len = r->q[0].len;
		r->n--;
		memmove(&r->q[0], &r->q[1], r->n * sizeof(r->q[0]));
		r->busy = addr;
		pthread_mutex_unlock(&r->mu);
		reg_now(x, addr, len);
		pthread_mutex_lock(&r->mu);
		r->busy = NULL;
		r->done++;
		pthread_cond_broadcast(&r->cv);
	}
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

static void reg_start(struct cs_daemon_ipc *x)
{
	struct ipcd_reg *r = &x->reg;
	int ret;

	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	ret = pthread_create(&r->thr, NULL, reg_main, x);
	if (ret) {
		CS_WARN("no thread for registering trainer segments (%s): "
			"lcore 0 registers them itself",
			strerror(ret));
		pthread_cond_destroy(&r->cv);
		pthread_mutex_destroy(&r->mu);
		return;
	}
	pthread_setname_np(r->thr, "cs-reg");
	r->started = true;
}

/* After the server is gone: nothing is queued any more. */
static void reg_stop(struct cs_daemon_ipc *x)
{
	struct ipcd_reg *r = &x->reg;

	if (!r->started)
		return;
	pthread_mutex_lock(&r->mu);
	r->stop = true;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
	pthread_join(r->thr, NULL);
	r->started = false;
	pthread_cond_destroy(&r->cv);
	pthread_mutex_destroy(&r->mu);
	CS_INFO("trainer segments: %llu registered by a thread of their own, "
		"%llu left unregistered (queue full)",
		(unsigned long long)r->done, (unsigned long long)r->full);
}

static void be_reg_mem(void *ctx, void *addr, size_t len)
{
	struct cs_daemon_ipc *x = ctx;
	struct ipcd_reg *r = &x->reg;

	if (!r->started) {
		reg_now(x, addr, len);
		return;
	}
	pthread_mutex_lock(&r->mu);
	if (r->n == IPCD_REGQ) {
		r->full++;
		pthread_mutex_unlock(&r->mu);
		CS_INFO("trainer segment of %zu bytes not registered (%u "
			"waiting already): its frames are copied",
			len, IPCD_REGQ);
		return;
	}
	r->q[r->n].addr = addr;
	r->q[r->n].len = len;
	r->n++;
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

static int be_unreg_mem(void *ctx, void *addr, size_t len)
{
	struct cs_daemon_ipc *x = ctx;
	struct ipcd_reg *r = &x->reg;

	/* Not registered yet: take it off the queue, or wait for the
	 * registration under way (a trainer that leaves right after it
	 * came; the only wait of the lcore here). */
	if (r->started) {
		pthread_mutex_lock(&r->mu);
		for (unsigned i = 0; i < r->n; i++)
			if (r->q[i].addr == addr) {
				r->n--;
				memmove(&r->q[i], &r->q[i + 1],
					(r->n - i) * sizeof(r->q[0]));
				break;
			}
		while (r->busy == addr)
			pthread_cond_wait(&r->cv, &r->mu);
		pthread_mutex_unlock(&r->mu);
	}

	/* On the lcore (ipc.on_lcore) nothing else sends its queued
	 * frames: it does so now, and then no frame can still point here. */
	cs_ar_svc_flush(x->d->svc);
	/* -ENOENT: never registered (copies) */
	return cs_port_unreg_mem_wait(x->d->port, addr, page_len(len),
				      x->hosted ? 0 : CS_NS_PER_S) == -EBUSY
		       ? -EBUSY
		       : 0;
}

/* ipc.on_lcore: between the pieces of a long intra-node reduction or
 * copy, one round of the lcore's own port work (the lcore is between two
 * of its rounds here), so that its peers do not wait for it meanwhile:
 * reducing 8 trainers' 256 MiB takes the better part of a second. */
static void be_progress(void *ctx)
{
	struct cs_daemon_ipc *x = ctx;
	struct cs_lcore *l = &x->d->lcores[0];

	if (cs_lcore_is_self(l)) /* not while the server is torn down */
		l->fn(l->arg, l->q, now_ns());
}

/* Whether an op of @cookie's group is queued (waiting or running; the
 * server's verdicts do not count: no operation of the server waits for
 * them). */
static bool group_queued(const struct cs_daemon_ipc *x, uint64_t cookie)
{
	for (unsigned i = 0; i < IPCD_QUEUE; i++)
		if (x->q[i].used && !x->q[i].verdict_only &&
		    x->q[i].op.cookie >> 32 == cookie >> 32)
			return true;
	return false;
}

/* Queued ops that are not their group's oldest (ipc.pipelined). */
static unsigned pipelined(const struct cs_daemon_ipc *x)
{
	unsigned n = 0;

	for (unsigned i = 0; i < IPCD_QUEUE; i++) {
		const struct ipcd_op *o = &x->q[i];

		if (!o->used || o->verdict_only)
			continue;
		for (unsigned j = 0; j < IPCD_QUEUE; j++)
			if (x->q[j].used && !x->q[j].verdict_only &&
			    x->q[j].order < o->order &&
			    x->q[j].op.cookie >> 32 == o->op.cookie >> 32) {
				n++;
				break;
			}
	}
	return n;
}

static int be_start(void *ctx, const struct cs_ipc_inter_op *op)
{
	struct cs_daemon_ipc *x = ctx;
	struct ipcd_op *o = NULL;

	if (op->kind == CS_IPC_INTER_VERDICT && ok_take(x, op->cookie, false))
		return 0; /* nothing to tell: every node has its part of it */
	if (x->count == IPCD_QUEUE)
		return -EBUSY;
	/* not its group's oldest: only within ipc.pipelined (the server
	 * hands it over again once one of its group finished) */
	if (op->kind != CS_IPC_INTER_VERDICT &&
	    pipelined(x) >= x->cf->pipelined && group_queued(x, op->cookie))
		return -EBUSY;
	if (x->d->drv.npeers < 2) {
		CS_WARN("group '%s' spans nodes but node.peers lists fewer "
			"than 2 nodes",
			op->group);
		return -EOPNOTSUPP;
	}
	for (unsigned i = 0; i < IPCD_QUEUE && !o; i++)
		if (!x->q[i].used)
			o = &x->q[i];
	o->op = *op;
	o->op_id = op_id_of(op);
	o->used = true;
	o->verdict_only = op->kind == CS_IPC_INTER_VERDICT;
	o->order = x->next_order++;
	/* a group's first operation (k = 0 on every node): its nodes check
	 * first that they agree on who is in it (launch_check) */
	o->check = op->kind != CS_IPC_INTER_VERDICT && !op->again &&
		   ((uint32_t)op->cookie == 0 || op->regroup);
	o->postmortem = false;
	o->a2a_refused = false;
	o->tries = 0;
	o->h = NULL;
	o->chk = NULL;
	atomic_store(&o->notify, 0);
	snprintf(o->name, sizeof(o->name), "%s", op->group);
	o->has_mask = op->nodes != NULL;
	memset(o->mask, 0, sizeof(o->mask));
	if (op->nodes)
		memcpy(o->mask, op->nodes, sizeof(o->mask));
	o->op.nodes = NULL; /* the server's: see o->mask */
	o->nnodes = 0;
	x->count++;
	/* started by schedule(), later in this round (start_inter_node may
	 * not complete it from in here) */
	return 0;
}

static void be_cancel(void *ctx, uint64_t cookie)
{
	struct cs_daemon_ipc *x = ctx;

	for (unsigned i = 0; i < IPCD_QUEUE; i++) {
		struct ipcd_op *o = &x->q[i];

		if (!o->used || o->op.cookie != cookie)
			continue;
		if (o->running) {
			/* its cross-node part succeeded: no verdict follows */
			if (!o->checking && !o->verdicting &&
			    atomic_load(&o->notify) > 0)
				ok_note(x, cookie);
			/* The staging buffer is about to go: the lcore must
			 * let go of it first. The peers' sessions time out
			 * and fail. */
			op_stop(x, o);
			x->failed++;
		}
		slot_free(x, o);
		return; /* what waits starts in the next poll round */
	}
}

/*
 * ctlplane: the node view moved on (a sidecar was lost). Fail what runs
 * and what waits at once, and with them every cross-node group of the
 * older view; the next operations run on the new view's ring.
 */
/* Tell the server this node's ring index in view x->epoch (trainers learn
 * it at hello; cs_group_split() gathers it). */
static void tell_node(struct cs_daemon_ipc *x)
{
	uint32_t pos, nn;
	char msg[160];

	if (!cs_ar_svc_ring_pos(x->d->svc, x->epoch, &pos, &nn, msg,
				sizeof(msg)))
		cs_ipc_server_set_node(x->srv, pos);
}

static unsigned on_view(struct cs_daemon_ipc *x, cs_ns_t now)
{
	uint32_t e =
		atomic_load_explicit(&x->d->view.epoch, memory_order_acquire);
	unsigned nl = atomic_load(&x->d->view.nlost);
	/* -1: nobody lost, the view grew (a node joined) */
	int lost =
		nl != x->nlost_seen ? atomic_load(&x->d->view.lost_rank) : -1;
	uint32_t ops = x->count, running = x->nrunning;
	unsigned groups;

	/* the lcore lets go of the staging buffers before the server
	 * completes the operations (and may reuse the buffers) */
	for (unsigned i = 0; i < IPCD_QUEUE; i++)
		if (x->q[i].used && x->q[i].running)
			op_stop(x, &x->q[i]);
	x->epoch = e;
	tell_node(x);
	/* cancels (be_cancel) and fails the queued ops of those groups */
	groups = cs_ipc_server_view(x->srv, e, lost);
	/* None should be left (every queued op was of an older view's
	 * group); a stray one fails too rather than run on the new ring. */
	for (unsigned i = 0; i < IPCD_QUEUE; i++) {
		struct ipcd_op *o = &x->q[i];
		uint64_t cookie = o->op.cookie;

		if (!o->used || o->running)
			continue;
		slot_free(x, o);
		cs_ipc_server_inter_done(x->srv, cookie, CS_ERR_PEER_LOST);
	}
	x->failed += ops;
	x->lost += ops;
	x->done_at = now;
	x->nlost_seen = nl;
	if (lost < 0)
		CS_INFO("view epoch %u: a node joined; %u cross-node "
			"operation(s) and %u group(s) formed before end "
			"(elastic groups re-form at their next operation)",
			e, ops, groups);
	else if (ops || groups)
		CS_ERR("view epoch %u: node %d lost; %u cross-node "
		       "operation(s) (%u running) of %u group(s) fail with "
		       "CS_ERR_PEER_LOST",
		       e, lost, ops, running, groups);
	else
		CS_INFO("view epoch %u: node %d lost; no cross-node "
			"operation was pending",
			e, lost);
	return 1;
}

static unsigned verdict_done(struct cs_daemon_ipc *x, struct ipcd_op *o, int v,
			     cs_ns_t now);

/* @o's lcore verdict @v is in. Returns the work done. */
static unsigned op_done(struct cs_daemon_ipc *x, struct ipcd_op *o, int v,
			cs_ns_t now)
{
	int node;

	if (o->verdicting)
		return verdict_done(x, o, v, now);
	if (v > 0 && o->checking)
		return check_done(x, o, now);
	if (v > 0) {
		if (x->trace) /* no clock read on the hot path otherwise */
			trace_op(x, o, now_ns());
		return finish_and_next(x, o, 0, -1, now);
	}
	node = cs_ar_svc_ext_failed_node(x->d->svc, o->h);
	/* a silent node, or one that announced its refusal */
	if ((v == CS_ERR_PEER_LOST || v == CS_ERR_BAD_DESC) && node >= 0 &&
	    !view_moved(x)) {
		/* a silent node: did it refuse the op? (launch_verdict) */
		int ret;

		o->postmortem = true;
		o->pm_status = v;
		o->pm_node = node;
		op_idle(x, o);
		ret = launch(x, o);
		if (!ret)
			return 1;
		if (ret == -EAGAIN)
			return 1; /* on_view() fails it */
	}
	CS_WARN("group '%s' op %#x failed across nodes: %s (node %d stopped "
		"answering)",
		o->op.group, o->op_id, cs_strerror(v), node);
	return finish_and_next(x, o, v, node, now);
}

/* The IPC thread's share of the backend; returns the work done. */
static unsigned backend_poll(struct cs_daemon_ipc *x, cs_ns_t now)
{
	unsigned work = 0;
	struct cs_ipc_stats st;

	if (unlikely(view_moved(x)))
		return on_view(x, now);
	for (unsigned i = 0; i < IPCD_QUEUE && x->nrunning; i++) {
		struct ipcd_op *o = &x->q[i];
		int v;

		if (!o->used || !o->running)
			continue;
		v = atomic_load_explicit(&o->notify, memory_order_acquire);
		if (v)
			work += op_done(x, o, v, now);
	}
	if (x->count)
		return work + schedule(x, now);
	if (!x->installed || now - x->done_at < x->cf->linger)
		return work;
	/* While a group lives its next ops keep the sessions busy; only
	 * once no group is left may nothing acknowledge the last ones. */
	cs_ipc_server_stats(x->srv, &st);
	/* an early op still resending what a peer may lack is kept (up to
	 * 20 x ipc.linger: a peer that long silent is gone) */
	if (!st.groups && cs_ar_svc_ext_unsettled(x->d->svc) &&
	    now - x->done_at < 20 * x->cf->linger)
		return work;
	if (!st.groups) {
		cs_ar_svc_stop_ext(x->d->svc);
		x->installed = false;
	}
	return work;
}

/*
 * @o's verdict exchange ended (@v: its notify value). The refusing
 * node's own verdict: nothing more to do (its ranks have the error).
 * A post-mortem: a node's refusal becomes op k's error; else op k keeps
 * its own.
 */
static unsigned verdict_done(struct cs_daemon_ipc *x, struct ipcd_op *o, int v,
			     cs_ns_t now)
{
	struct ipcd_refusal ref = { .group = false };

	op_idle(x, o);
	if (o->op.kind == CS_IPC_INTER_VERDICT) {
		if (v < 0 && ++o->tries < IPCD_VERDICT_TRIES &&
		    now < o->verdict_end && !view_moved(x) && !launch(x, o))
			return 1; /* the others may not be there yet */
		if (v < 0)
			CS_WARN("group '%s': the other nodes were not told why "
				"op %u failed here (%s)",
				o->name, (uint32_t)o->op.cookie,
				cs_strerror(v));
		if (o->a2a_refused) { /* its ranks fail with the reason */
			ref.detail = CS_IPC_BAD_LAYOUT;
			ref.peer = -1;
			return finish_and_next_ex(x, o, CS_ERR_BAD_DESC, -1,
						  &ref, now);
		}
		/* the server ignores it: that instance is finished */
		return finish_and_next(x, o, v < 0 ? v : 0, -1, now);
	}
	for (uint32_t j = 0; v > 0 && j < o->chk_n; j++) {
		const int32_t *sl = o->chk + (size_t)j * IPCD_VERDICT_WORDS;

		if (j == o->chk_pos || sl[0] != 1 || !sl[2])
			continue;
		ref.detail = (unsigned)sl[3];
		ref.peer = sl[4] - 1;
		CS_WARN("group '%s' op %#x: refused on node %d (%s, rank %d); "
			"its ranks here fail with that",
			o->name, o->op_id, (int)sl[1], cs_strerror(sl[2]),
			(int)ref.peer);
		return finish_and_next_ex(x, o, sl[2], -1, &ref, now);
	}
	CS_WARN("group '%s' op %#x failed across nodes: %s (node %d stopped "
		"answering%s)",
		o->name, o->op_id, cs_strerror(o->pm_status), o->pm_node,
		v > 0 ? "; it refused nothing" : "");
	return finish_and_next(x, o, o->pm_status, o->pm_node, now);
}

/* ---- the thread -------------------------------------------------------- */

/* One round of the trainer service (IPC thread or lcore 0): the server,
 * then the backend. Returns the work done, or a negative error once the
 * listener broke (trainers are no longer served). */
static int serve_round(struct cs_daemon_ipc *x, cs_ns_t now)
{
	int n = cs_ipc_server_poll(x->srv, now);

	if (n < 0) {
		CS_ERR("IPC listener broke: %s; trainers are no longer served",
		       cs_strerror(n));
		return n;
	}
	return n + (int)backend_poll(x, now);
}

/* Idle since ipc.quiet_after: sleep until something can bring work. */
static void quiet(struct cs_daemon_ipc *x, cs_ns_t *last)
{
	struct timespec ts = { (time_t)(x->cf->quiet_sleep / CS_NS_PER_S),
			       (long)(x->cf->quiet_sleep % CS_NS_PER_S) };
	int n, ret;
	uint64_t v;

	x->pfd[0] = (struct pollfd){ .fd = x->efd, .events = POLLIN };
	n = cs_ipc_server_sleep_prepare(x->srv, x->pfd + 1);
	if (!n) { /* a trainer posted meanwhile */
		*last = now_ns();
		return;
	}
	ret = ppoll(x->pfd, (nfds_t)n + 1, &ts, NULL);
	cs_ipc_server_sleep_done(x->srv);
	if (ret > 0) { /* woken: poll again, spin a while */
		if (x->pfd[0].revents)
			(void)!read(x->efd, &v, sizeof(v));
		*last = now_ns();
	}
}

static void *ipc_main(void *arg)
{
	struct cs_daemon_ipc *x = arg;
	struct timespec nap = { 0, (long)x->cf->idle_sleep };
	struct pollfd pfd = { .fd = x->efd, .events = POLLIN };
	cs_ns_t last = now_ns();
	uint64_t v;

	/* short naps stay short (the default slack is 50 us) */
	prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	while (!atomic_load_explicit(&x->stop, memory_order_relaxed)) {
		cs_ns_t now = now_ns();
		int n = serve_round(x, now);

		if (n < 0)
			break;
		if (n > 0) {
			last = now;
			continue;
		}
		if (now - last < x->cf->idle_spin) {
			/* spin, but leave the CPU to whatever else is
			 * runnable (trainers, lcores: on a shared machine
			 * the one we wait for) */
			sched_yield();
			continue;
		}
		if (x->pfd && now - last >= x->cf->quiet_after) {
			quiet(x, &last);
			continue;
		}
		/* nap; the lcore's verdict on a cross-node op ends it */
		if (x->efd < 0) {
			nanosleep(&nap, NULL);
		} else if (ppoll(&pfd, 1, &nap, NULL) > 0 &&
			   read(x->efd, &v, sizeof(v)) > 0) {
			last = now_ns();
		}
	}
	return NULL;
}

/* ipc.on_lcore: before lcore 0 waits, what quiet() waits on joins its
 * wait: the listener and the trainers' sockets (a trainer that posts to a
 * sleeping sidecar writes to its socket) in an epoll set that also holds
 * the lcore's kick eventfd. -EAGAIN: a trainer posted meanwhile. */
static int ipc_side_prepare(void *arg)
{
	struct cs_daemon_ipc *x = arg;
	struct cs_ipc_stats st;
	int n;

	if (x->broken)
		return x->epfd;
	n = cs_ipc_server_sleep_prepare(x->srv, x->pfd);
	if (!n)
		return -EAGAIN;
	/* The set changes only when a trainer comes or goes (a closed
	 * socket leaves it by itself; a reused fd number must be added
	 * again): no system calls for it otherwise. */
	cs_ipc_server_stats(x->srv, &st);
	if (st.accepted == x->ep_accepted && st.trainers_lost == x->ep_lost)
		return x->epfd;
	x->ep_accepted = st.accepted;
	x->ep_lost = st.trainers_lost;
	/* one already in it gives EEXIST */
	for (int i = 0; i < n; i++) {
		struct epoll_event ev = { .events = EPOLLIN,
					  .data.fd = x->pfd[i].fd };

		if (epoll_ctl(x->epfd, EPOLL_CTL_ADD, x->pfd[i].fd, &ev) &&
		    errno != EEXIST)
			CS_WARN("ipc.on_lcore: epoll fd %d: %s", x->pfd[i].fd,
				strerror(errno));
	}
	return x->epfd;
}

static void ipc_side_done(void *arg)
{
	struct cs_daemon_ipc *x = arg;

	if (!x->broken)
		cs_ipc_server_sleep_done(x->srv);
}

/* ipc.on_lcore: the IPC thread's round, on lcore 0 after its own work. */
static unsigned ipc_side(void *arg, unsigned q, cs_ns_t now)
{
	struct cs_daemon_ipc *x = arg;
	int n;

	(void)q;
	if (unlikely(x->broken))
		return 0;
	n = serve_round(x, now);
	x->broken = n < 0;
	return n < 0 ? 0 : (unsigned)n;
}

/* ipc.on_lcore: the epoll set lcore 0 waits on (its kick eventfd in it:
 * kicks and new views wake it); the lcore sees its own verdicts, so no
 * eventfd of ours. */
static int hosted_init(struct cs_daemon_ipc *x)
{
	struct cs_lcore *l = &x->d->lcores[0];
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = l->kick_fd };
	int ret;

	x->efd = -1;
	x->side = (struct cs_lcore_side){ .fn = ipc_side, .arg = x };
	if (l->kick_fd < 0)
		return 0; /* a busy lcore never waits */
	x->pfd = calloc(1 + (size_t)x->cf->ipc.max_trainers, sizeof(*x->pfd));
	if (!x->pfd)
		return -ENOMEM;
	x->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (x->epfd < 0 || epoll_ctl(x->epfd, EPOLL_CTL_ADD, l->kick_fd, &ev)) {
		ret = -errno;
		CS_ERR("ipc.on_lcore: epoll: %s", strerror(errno));
		if (x->epfd >= 0)
			close(x->epfd);
		free(x->pfd);
		return ret;
	}
	x->ep_accepted = UINT64_MAX; /* the listener is not in it yet */
	x->side.prepare = ipc_side_prepare;
	x->side.done = ipc_side_done;
	return 0;
}

int cs_daemon_ipc_start(struct cs_daemon *d)
{
	struct ipcd_conf *cf = ipcd_conf(&d->conf);
	struct cs_ipc_backend be;
	struct cs_daemon_ipc *x;
	int ret, n;

	if (!cf->enable)
		return 0;
	if (!cf->ipc.socket_path[0]) {
		n = snprintf(cf->ipc.socket_path, sizeof(cf->ipc.socket_path),
			     "%s/" IPCD_SOCK_NAME, d->conf.port.run_dir);
		if (n >= (int)sizeof(cf->ipc.socket_path)) {
			CS_ERR("ipc.socket: run_dir %s is too long",
			       d->conf.port.run_dir);
			return -ENAMETOOLONG;
		}
	}
	x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	x->d = d;
	x->cf = cf;
	if (cf->trace_dir[0]) {
		if (access(cf->trace_dir, W_OK)) {
			ret = -errno;
			CS_ERR("ipc.trace_dir %s: %s", cf->trace_dir,
			       strerror(-ret));
			free(x);
			return ret;
		}
		x->trace = calloc(IPCD_TRACE_MAX, sizeof(*x->trace));
		if (!x->trace) {
			free(x);
			return -ENOMEM;
		}
	}
	/* A port whose wait does not watch an fd: there a trainer's post
	 * would wait for the end of the lcore's sleep. (dpdk ppoll()s it,
	 * udp polls it through its ring.) */
	x->hosted = cf->on_lcore && atomic_load(&d->lcores[0].running);
	if (x->hosted && !cs_port_wait_sees_fd(d->port)) {
		x->hosted = false;
		CS_INFO("ipc.on_lcore: the %s port's wait does not watch the "
			"trainers' sockets: they are served by a thread",
			d->port->conf.type);
	}
	x->epfd = -1;
	if (x->hosted) {
		ret = hosted_init(x);
		if (ret) {
			free(x->trace);
			free(x);
			return ret;
		}
	} else {
		x->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (x->efd >= 0)
			x->pfd = calloc(2 + (size_t)cf->ipc.max_trainers,
					sizeof(*x->pfd));
	}
	atomic_init(&x->stop, false);
	for (unsigned i = 0; i < IPCD_QUEUE; i++)
		atomic_init(&x->q[i].notify, 0);
	be = (struct cs_ipc_backend){ .ctx = x,
				      .start_inter_node = be_start,
				      .cancel = be_cancel,
				      .reg_mem = be_reg_mem,
				      .unreg_mem = be_unreg_mem,
				      .progress =
					      x->hosted ? be_progress : NULL,
				      .verdicts = true };
	ret = cs_ipc_server_create(&cf->ipc, &be, &x->srv);
	if (ret) {
		CS_ERR("ipc.socket %s: %s", cf->ipc.socket_path,
		       cs_strerror(ret));
		goto out_free;
	}
#if CS_HAVE_CUDA
	{
		/* device ranges are registered with the running port when it
		 * has hooks for them (dpdk); it outlives the IPC side */
		struct cs_gpu_nic nic;
		bool has_nic = !cs_port_gpu_nic(d->port, &nic);

		if (!cs_gpu_ipc_create(0, d->conf.port.type,
				       has_nic ? &nic : NULL, &x->gpu))
			cs_ipc_server_set_dev(x->srv, &cs_gpu_ipc_ops, x->gpu);
	}
#endif
	if (cs_pst_create(d->svc, &x->pst) ||
	    cs_ipc_server_set_ps(x->srv, &cs_pst_ipc_ops, x->pst))
		CS_WARN("no parameter-server tables for trainers: no memory");
	if (cs_p2p_create(d->svc, &x->p2p) ||
	    cs_ipc_server_set_p2p(x->srv, &cs_p2p_ipc_ops, x->p2p))
		CS_WARN("no point-to-point send/recv for trainers: no memory");
	/* ctlplane: groups formed from now on belong to this view */
	x->epoch = atomic_load(&d->view.epoch);
	x->nlost_seen = atomic_load(&d->view.nlost);
	cs_ipc_server_view(x->srv, x->epoch, -1);
	tell_node(x);
	cs_ar_svc_set_notify_fd(d->svc, x->efd);
	/* a new view wakes quiet(), or the lcore */
	atomic_store(&d->view.wake_fd,
		     x->hosted ? d->lcores[0].kick_fd : x->efd);
	if (x->hosted) {
		reg_start(x);
		cs_lcore_set_side(&d->lcores[0], &x->side);
		CS_INFO("ipc.on_lcore: trainers are served by lcore 0 (their "
			"segments registered by a thread of their own)");
	} else {
		ret = -pthread_create(&x->thr, NULL, ipc_main, x);
		if (ret)
			goto out_srv;
		pthread_setname_np(x->thr, "cs-ipc");
	}
	d->ipc = x;
	CS_INFO("trainers: COLLSTACK_SOCKET=%s (node %u of %u)",
		cf->ipc.socket_path, d->conf.rank,
		d->drv.npeers ? d->drv.npeers : 1); /* no peers: this node */
	return 0;
out_srv:
	atomic_store(&d->view.wake_fd, -1);
	cs_ar_svc_set_notify_fd(d->svc, -1);
	cs_ipc_server_destroy(x->srv);
	cs_pst_destroy(x->pst);
	cs_p2p_destroy(x->p2p);
out_free:
	if (x->efd >= 0)
		close(x->efd);
	if (x->epfd >= 0)
		close(x->epfd);
	free(x->pfd);
	free(x->trace);
	free(x);
	return ret;
}

void cs_daemon_ipc_stop(struct cs_daemon *d)
{
	struct cs_daemon_ipc *x = d->ipc;

	if (!x)
		return;
	atomic_store(&x->stop, true);
	atomic_store(&d->view.wake_fd, -1);
	if (x->hosted) {
		/* from here on only this thread touches the server */
		cs_lcore_set_side(&d->lcores[0], NULL);
	} else {
		if (x->efd >= 0) /* out of a quiet() sleep now */
			(void)!write(x->efd, &(uint64_t){ 1 },
				     sizeof(uint64_t));
		pthread_join(x->thr, NULL);
	}
	/* what the device pipeline did (ipc.dev_pipe; scripts/gpu-check.sh
	 * reads this line) */
	{
		struct cs_ipc_stats st;

		cs_ipc_server_stats(x->srv, &st);
		if (st.pipe_ops)
			CS_INFO("device pipeline: %llu operations in %llu "
				"slices; %llu copy pieces ran beside their own "
				"operation's network step",
				(unsigned long long)st.pipe_ops,
				(unsigned long long)st.pipe_slices,
				(unsigned long long)st.pipe_overlap);
		if (st.dev_reduce_ops) /* ipc.dev_reduce */
			CS_INFO("device reductions: %llu allreduces reduced "
				"on the device in %llu pieces",
				(unsigned long long)st.dev_reduce_ops,
				(unsigned long long)st.dev_reduce_pieces);
	}
	/* destroying the server cancels what is still running */
	cs_ipc_server_destroy(x->srv);
	cs_pst_destroy(x->pst); /* PS tables: their flows end */
	cs_p2p_destroy(x->p2p); /* send/recv: its flow ends */
#if CS_HAVE_CUDA
	cs_gpu_ipc_destroy(x->gpu);
#endif
	reg_stop(x);
	if (x->installed)
		cs_ar_svc_stop_ext(d->svc);
	/* no trainer op is installed now: the lcore writes no more */
	cs_ar_svc_set_notify_fd(d->svc, -1);
	if (x->efd >= 0)
		close(x->efd);
	if (x->epfd >= 0)
		close(x->epfd);
	CS_INFO("trainer IPC stopped: %llu cross-node ops done, %llu failed "
		"(%llu of them on a lost node)",
		(unsigned long long)x->finished, (unsigned long long)x->failed,
		(unsigned long long)x->lost);
	if (x->trace)
		trace_write(x);
	for (unsigned i = 0; i < IPCD_QUEUE; i++)
		free(x->q[i].chk);
	free(x->pfd);
	free(x->trace);
	free(x);
	d->ipc = NULL;
}

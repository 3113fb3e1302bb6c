/* SPDX-License-Identifier: MIT */
/* The sidecar's trainer IPC server: sockets, segments, rings, local groups. */
#ifndef CS_IPC_SERVER_H
#define CS_IPC_SERVER_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "collstack/types.h"
#include "internal/config.h"
#include "internal/util.h"
#include "ipc_proto.h"

/*
 * The server is driven by one thread calling cs_ipc_server_poll() in a
 * loop (the sidecar's control thread, or a test's mini sidecar). Each call:
 *  - every sock_poll_interval: accepts trainers (SO_PEERCRED checked),
 *    reads their control messages (SCM_RIGHTS fds), notices hang-ups;
 *  - always: drains up to sq_burst descriptors from every trainer's
 *    submission ring (no system call), validates each one, matches it with
 *    the other local ranks' descriptors of the same group and, once all
 *    local ranks are in, runs the operation;
 *  - always: polls the device copies in flight (cs_ipc_dev_ops copy_poll),
 *    issues the next pieces, runs the operations whose inputs are in and
 *    completes those whose results are out;
 *  - publishes completions and kicks eventfds of trainers that sleep;
 *  - every sock_poll_interval: fails groups whose oldest operation waited
 *    ipc.match_deadline for a local rank that did not post it.
 *
 * Groups: a group is (name, size); the trainers on this node are its local
 * ranks 0..local_size-1. When local_size == size the whole group is on this
 * node and operations complete here. Otherwise the node's combined data is
 * handed to the backend's start_inter_node() (the network engine), which
 * calls cs_ipc_server_inter_done() when the other nodes are done; the
 * result is then fanned out to every local rank. Without a backend such
 * operations complete with -EOPNOTSUPP.
 *
 * Results are bit-identical on every local rank: the reduction is done
 * once, in local-rank order, into one buffer, and then only copied. It uses
 * the kernels of collectives/reduce.h (the cross-node engines' kernels, with
 * their NaN, tie and signed-zero rules), so a node-local reduction gives the
 * bits the direct exchange gives for the same inputs spread over nodes.
 */

struct cs_ipc_server;

#define CS_IPC_NO_GID 4294967295ull /* (gid_t)-1: never a real group */

/* Runtime settings (see cs_ipc_cfg_table for names, defaults, bounds). */
struct cs_ipc_cfg {
	char socket_path[CS_CFG_STR_MAX];
	uint32_t max_trainers;
	uint32_t max_segments; /* per trainer */
	uint32_t max_groups; /* per server */
	uint32_t max_trainer_groups; /* groups one trainer may be in */
	uint64_t max_op_bytes; /* largest buffer an op may name */
	uint64_t max_segment_bytes;
	cs_ns_t sock_poll_interval;
	uint32_t sq_burst; /* descriptors per trainer per poll */
	uint64_t allowed_gid; /* CS_IPC_NO_GID: only our uid */
	cs_ns_t match_deadline; /* 0: local matching waits forever */
	cs_ns_t hello_deadline; /* a connection must say hello by then */
	/* cross-node operations of one group started at once (from its
	 * oldest unfinished one; each its own staging buffer) */
	uint32_t group_inflight;
	/* device segments: bytes per copy piece between a device range and
	 * its shadow, and pieces in flight at once in the whole server */
	uint64_t dev_chunk;
	uint32_t dev_depth;
	/* a cross-node allreduce or broadcast of more bytes than this runs
	 * as slices of this many bytes, pipelined with their device copies
	 * (0: never; only with asynchronous device copies) */
	uint64_t dev_pipe;
	/* cut at dev_pipe without asynchronous device copies too (host
	 * buffers: nothing overlaps; checks the cut across nodes) */
	bool dev_pipe_any;
	/* an allreduce whose local rank 0's recv range is on the device:
	 * the local ranks' contributions are reduced into it on the
	 * device (cs_ipc_dev_ops reduce_start), not on the CPU */
	bool dev_reduce;
};

extern const struct cs_cfg_entry cs_ipc_cfg_table[];
extern const size_t cs_ipc_cfg_table_len;

/* What the backend is asked to do across nodes, on @buf. */
enum cs_ipc_inter_kind {
	CS_IPC_INTER_ALLREDUCE = 1, /* reduce @buf over nodes */
	/* @buf holds the local ranks' blocks (@block elements each) at
	 * their global offsets; fill in the other blocks (what they hold
	 * before is undefined) */
	CS_IPC_INTER_ALL_GATHER = 2,
	CS_IPC_INTER_BROADCAST = 3, /* @buf from the root's node */
	CS_IPC_INTER_BARRIER = 4,
	/* @count = group size x @block elements, the node's sum (in @buf,
	 * or @sendbuf); reduce over nodes at least the blocks of the local
	 * ranks, into @buf at their global offsets */
	CS_IPC_INTER_REDUCE_SCATTER = 5,
	/*
	 * This node refused the group's operation (a bad or mismatched
	 * descriptor of a local rank), or lost a local rank while the
	 * operation was pending; its ranks here already have the error
	 * (@status, @detail, @peer). Tell the other nodes, whose ranks wait
	 * for this node in the same operation, so that theirs end with it
	 * too and not as a silent node. No buffer; no inter_done needed (one
	 * is ignored). Only to a backend with cs_ipc_backend.verdicts.
	 */
	CS_IPC_INTER_VERDICT = 6,
	/*
	 * A node-level all-to-all: @sendbuf holds, for each node j in ring
	 * order, @block elements for node j; @buf receives @block elements
	 * from each node i at i x @block (@count = nodes x @block). The
	 * group's node k holds ranks k x L .. k x L + L - 1 (L = @local_size,
	 * the same on every node; the server checked its own node's ranks,
	 * the backend checks the ring index). With @a2a_counts (an
	 * all-to-all-v): @sendbuf holds @a2a_counts[j] elements for node j,
	 * node after node, and @buf receives @a2a_counts[nodes + i] from
	 * node i, node after node (@count and @block are then unused).
	 */
	CS_IPC_INTER_ALLTOALL = 7,
};

/* One cross-node step. Valid until cs_ipc_server_inter_done or cancel. */
struct cs_ipc_inter_op {
	uint64_t cookie; /* hand back to inter_done / cancel */
	const char *group; /* group name */
	uint32_t group_size; /* ranks over all nodes */
	uint32_t local_size;
	const int32_t *local_ranks; /* global rank of each local rank */
	enum cs_ipc_inter_kind kind;
	enum cs_dtype dtype;
	enum cs_redop redop;
	uint32_t root; /* broadcast root (global rank) */
	/* the instance's own staging buffer (one of the group's pool), or
	 * a local rank's buffer */
	void *buf;
	/* allreduce, reduce-scatter: the input when it is not @buf (NULL:
	 * in place in @buf). Set with one local rank: its send buffer, and
	 * @buf (its recv buffer, or the staging buffer of a reduce-scatter)
	 * holds nothing yet. Stays mapped as long as @buf does. */
	const void *sendbuf;
	uint64_t count; /* elements in @buf */
	uint64_t block; /* elements per rank (all-gather, reduce-scatter) */
	uint32_t epoch; /* the node view the group was formed in */
	/* an elastic group's first operation in a new view (@epoch): the
	 * nodes re-form the group first and the backend hands the new size
	 * and ranks to cs_ipc_server_regroup() before it runs the step */
	bool regroup;
	/* the group's membership check found it laid out in node blocks:
	 * every node holds size / nodes ranks, the node at ring index i
	 * ranks i L .. i L + L - 1 (cs_ipc_server_set_blocked()); the same
	 * on every node, so reduce-scatter and all-gather may run as such */
	bool blocked;
	/* CS_IPC_INTER_ALLTOALL of an all-to-all-v: 2 x nodes counts (to
	 * each node, then from each node, ring order), or NULL */
	const uint64_t *a2a_counts;
	/* the nodes the group spans (CS_IPC_NODE_WORDS words, bit i: ring
	 * index i; a group made by cs_group_split()), or NULL: every node */
	const uint64_t *nodes;
	/* a later step of an instance whose first step ran already (an
	 * all-to-all-v: its counts, then its data): no membership check,
	 * and the same cookie */
	bool again;
	/*
	 * A pipelined instance (ipc.dev_pipe): its cross-node step runs as
	 * @slices steps, one after the other, with the same cookie: this is
	 * step @slice (0 .. @slices - 1; @again from the second on), on
	 * elements [@slice x the slice's size, + @count) of the instance.
	 * Every node derives the same slices from the operation's size and
	 * ipc.dev_pipe, so the backend tells the steps apart by @slice. An
	 * instance that is not split: @slice 0, @slices 0. A verdict of a
	 * pipelined instance names the slice the other nodes wait in.
	 */
	uint32_t slice, slices;
	/* this node's cut size (ipc.dev_pipe where it cuts, else 0), set
	 * by the server on every step: the group's membership check
	 * compares it across the nodes (cs_ipc_server_set_pipe) */
	uint64_t pipe;
	/* CS_IPC_INTER_VERDICT: the completion its ranks here got */
	int32_t status;
	uint16_t detail;
	int32_t peer;
};

/* The network side, supplied by the integrator (collstackd). */
struct cs_ipc_backend {
	void *ctx;
	/* Start @op; return 0, or a negative error to fail it now. */
	int (*start_inter_node)(void *ctx, const struct cs_ipc_inter_op *op);
	/* Forget @cookie (a local rank died); no inter_done must follow. */
	void (*cancel)(void *ctx, uint64_t cookie);
	/* Optional: a trainer's segment was mapped (register it with the
	 * port for zero copy), or is about to be unmapped: return 0 once
	 * nothing points into it any more, else it stays mapped (leaked). */
	void (*reg_mem)(void *ctx, void *addr, size_t len);
	int (*unreg_mem)(void *ctx, void *addr, size_t len);
	/* Optional: called between the pieces (IPC_PIECE bytes) of a long
	 * intra-node reduction or copy, so that a server polled by a
	 * port's lcore (collstackd ipc.on_lcore) keeps serving the port. */
	void (*progress)(void *ctx);
	/* The backend takes CS_IPC_INTER_VERDICT steps (without it none is
	 * handed to it). */
	bool verdicts;
};

/*
 * Device memory, supplied by gpu/ (collstackd built with CUDA): a trainer
 * registers a range of a device allocation (CS_IPC_MSG_REG_DEV) and uses
 * it like any segment. The server keeps a host copy of the range (the
 * shadow, from @shadow_alloc: pinned), fills the part an operation reads
 * from the device before it runs and writes the part it wrote back after
 * it succeeded; everything in between runs on the shadow. @owner is the
 * trainer's pid.
 *
 * The copies go in pieces of ipc.dev_chunk bytes. With @copy_start and
 * @copy_poll (both or neither) they are asynchronous: an operation's
 * pieces are issued (at most ipc.dev_depth in flight in the server) and
 * polled by cs_ipc_server_poll(), so other operations run meanwhile.
 * Without them, @to_host / @from_host copy one piece and return when it
 * is done (the server waits, the backend's progress hook between pieces).
 */
struct cs_ipc_dev_ops {
	/* map the range; @fd (-1 if none) is taken over; *cookie names it */
	int (*map)(void *ctx, uint32_t owner, uint32_t kind,
		   const uint8_t *handle, const uint8_t *uuid, uint64_t off,
		   uint64_t len, int fd, void **cookie, char *why,
		   size_t whylen);
	void (*unmap)(void *ctx, void *cookie);
	/* copy @len bytes at @off of the range to @host / from @host */
	int (*to_host)(void *ctx, void *cookie, uint64_t off, void *host,
		       size_t len);
	int (*from_host)(void *ctx, void *cookie, uint64_t off,
			 const void *host, size_t len);
	void *(*shadow_alloc)(void *ctx, size_t len);
	void (*shadow_free)(void *ctx, void *p, size_t len);
	/*
	 * Optional: start copying @len bytes at @off of the range to @host
	 * (@to_host) or from it; *@token names the copy. 0 or a negative
	 * error (nothing started then).
	 */
	int (*copy_start)(void *ctx, void *cookie, uint64_t off, void *host,
			  size_t len, bool to_host, uint64_t *token);
	/*
	 * Whether copy @token is done: 1 (done), 0 (still running) or a
	 * negative error (it failed). After 1 or an error the token is
	 * spent. The server polls every started copy until then before the
	 * range is unmapped or its shadow freed or reused.
	 */
	int (*copy_poll)(void *ctx, uint64_t token);
	/*
	 * Optional (with @copy_start): start reducing @len bytes of host
	 * memory at @host (a chunk that landed in pinned memory: a local
	 * rank's contribution in its shadow) into the range at @off on the
	 * device, element by element with the rules of
	 * collectives/reduce.h: range = op(range, chunk), or range = chunk
	 * when @first. The pieces run in the order they were started (one
	 * stream: a piece reads what the pieces before it wrote). *@token
	 * is polled by @copy_poll. 0, -EOPNOTSUPP (no kernel for @t) or a
	 * negative error (nothing started then).
	 */
	int (*reduce_start)(void *ctx, void *cookie, uint64_t off,
			    const void *host, size_t len, enum cs_dtype t,
			    enum cs_redop op, bool first, uint64_t *token);
};

/**
 * cs_ipc_server_set_dev - let trainers register device memory
 * @s: server
 * @ops: the device side (NULL: refuse device registrations, the default)
 * @ctx: for @ops
 */
void cs_ipc_server_set_dev(struct cs_ipc_server *s,
			   const struct cs_ipc_dev_ops *ops, void *ctx);

/* Counters for tests, `collstack top` and metrics. */
struct cs_ipc_stats {
	uint64_t trainers; /* connected now */
	uint64_t accepted; /* trainers accepted, ever */
	uint64_t refused; /* credentials or limits */
	uint64_t ops_done; /* completed with status 0 */
	uint64_t ops_failed; /* completed with an error */
	uint64_t bad_desc; /* descriptors rejected */
	uint64_t bad_msg; /* control messages rejected */
	uint64_t trainers_lost; /* hung up or killed */
	uint64_t groups; /* live groups */
	uint64_t hello_timeouts; /* closed: no hello within the deadline */
	uint64_t full; /* refused: every trainer slot taken */
	/* pipelined device instances (ipc.dev_pipe): how many, their
	 * slices, and their device copy pieces started while a step of the
	 * same instance was on the wire (its copies beside its own network
	 * step) */
	uint64_t pipe_ops;
	uint64_t pipe_slices;
	uint64_t pipe_overlap;
	/* allreduces reduced on the device (ipc.dev_reduce), and their
	 * reduce_start pieces */
	uint64_t dev_reduce_ops;
	uint64_t dev_reduce_pieces;
};

/**
 * cs_ipc_server_create - listen on a Unix socket for trainers
 * @cfg: settings (copied); a stale cfg->socket_path is replaced
 * @be: the cross-node backend, or NULL for single-node groups only (copied)
 * @out: the server
 *
 * Returns: 0, -EADDRINUSE if a server already answers on the path, or a
 * negative errno.
 */
int cs_ipc_server_create(const struct cs_ipc_cfg *cfg,
			 const struct cs_ipc_backend *be,
			 struct cs_ipc_server **out);

/**
 * cs_ipc_server_poll - do one round of server work
 * @s: server
 * @now: current time (ns, any monotonic origin)
 *
 * Never blocks. Returns: the number of things done (descriptors taken,
 * completions posted, messages handled, trainers accepted or lost): 0 means
 * idle, so the caller may back off. Negative only for a broken listener.
 */
int cs_ipc_server_poll(struct cs_ipc_server *s, cs_ns_t now);

/**
 * cs_ipc_server_sleep_prepare - get ready to sleep until a trainer acts
 * @s: server
 * @pfd: room for 1 + cfg.max_trainers entries
 *
 * For a caller that found the server idle for a while and wants to sleep
 * in poll(2) rather than poll the submission rings: asks every trainer to
 * send a wake-up message after it posts (sq_asleep), then looks at every
 * ring once more. Returns the number of entries filled in @pfd (the
 * listener and every trainer's socket: what to sleep on, besides the
 * caller's own fds), or 0 when work came in after all (nothing is armed
 * then: poll again instead of sleeping). After the sleep, whatever ended
 * it, call cs_ipc_server_sleep_done().
 */
int cs_ipc_server_sleep_prepare(struct cs_ipc_server *s, struct pollfd *pfd);
void cs_ipc_server_sleep_done(struct cs_ipc_server *s);

/**
 * cs_ipc_server_next_deadline - when a local match may next time out
 * @s: server
 *
 * A caller that sleeps (cs_ipc_server_sleep_prepare) must poll again by
 * then: an operation that some local ranks of a group posted and another
 * did not fails at that time (ipc.match_deadline) with CS_ERR_TIMEOUT, and
 * a connection that has not sent its hello is closed (ipc.hello_deadline).
 *
 * Returns: the time (the clock of cs_ipc_server_poll's @now), or 0 if no
 * operation waits for a local rank and every connection said hello.
 */
cs_ns_t cs_ipc_server_next_deadline(const struct cs_ipc_server *s);

/**
 * cs_ipc_server_inter_done - the backend finished a cross-node step
 * @s: server
 * @cookie: from the cs_ipc_inter_op
 * @status: 0 or a negative error for every local rank
 *
 * Call from the thread that calls cs_ipc_server_poll. Unknown or stale
 * cookies are ignored.
 */
void cs_ipc_server_inter_done(struct cs_ipc_server *s, uint64_t cookie,
			      int status);

/**
 * cs_ipc_server_inter_fail - cs_ipc_server_inter_done() with the culprit
 * @s: server
 * @cookie: from the cs_ipc_inter_op
 * @status: a negative error for every local rank (0: as inter_done)
 * @detail: for the completions (enum cs_ipc_lost for CS_ERR_PEER_LOST)
 * @peer: the rank or node @detail names, or -1
 */
void cs_ipc_server_inter_fail(struct cs_ipc_server *s, uint64_t cookie,
			      int status, unsigned detail, int32_t peer);

/* cs_ipc_server_inter_fail() with the completions' aux word too */
void cs_ipc_server_inter_fail_ex(struct cs_ipc_server *s, uint64_t cookie,
				 int status, unsigned detail, int32_t peer,
				 uint32_t aux);

/**
 * cs_ipc_server_inter_refuse - the backend refuses a group's cross-node step
 * @s: server
 * @cookie: from the cs_ipc_inter_op
 * @status: a negative error (CS_ERR_BAD_DESC for a membership the nodes
 *	disagree on)
 * @detail: for the completions (enum cs_ipc_bad: CS_IPC_BAD_GROUP_*)
 * @peer: the node (or rank) @detail names, or -1
 * @aux: the completions' aux word (cs_ipc_cqe.epoch)
 *
 * As cs_ipc_server_inter_fail(), and the whole group fails with it: its
 * pending and later operations complete with the same error, joining it
 * again is refused. Call from the thread that calls cs_ipc_server_poll.
 */
void cs_ipc_server_inter_refuse(struct cs_ipc_server *s, uint64_t cookie,
				int status, unsigned detail, int32_t peer,
				uint32_t aux);

/**
 * cs_ipc_server_view - the backend's view of the nodes moved on
 * @s: server
 * @epoch: the new view (group epoch)
 * @lost_node: the node (sidecar rank) the view lost, or -1 if unknown
 *
 * Groups formed from now on belong to @epoch. An elastic group spanning
 * nodes (CS_IPC_JOIN_ELASTIC) moves to @epoch: its pending operations end
 * with CS_ERR_PEER_LOST as below, but it is not failed: its next
 * operation re-forms it on the nodes of the new view (regroup). Every
 * other group spanning nodes
 * that was formed in another view fails (at start-up there are no groups
 * yet): its
 * operations still pending (a cross-node one is cancelled through the
 * backend's cancel() first) and all its later ones complete with
 * CS_ERR_PEER_LOST, detail CS_IPC_LOST_NODE, naming @lost_node and
 * @epoch; joining it again is refused (CS_ERR_EPOCH), so the survivors
 * form a new group. Call from the thread that calls cs_ipc_server_poll.
 *
 * Returns: the number of groups that failed.
 */
unsigned cs_ipc_server_view(struct cs_ipc_server *s, uint32_t epoch,
			    int32_t lost_node);

/*
 * cs_ipc_server_set_node - this node's ring index in the current view:
 * told to trainers in the hello's reply (cs_group_split() gathers it), and
 * a group over some nodes must include it.
 */
void cs_ipc_server_set_node(struct cs_ipc_server *s, uint32_t node);

/*
 * cs_ipc_server_set_blocked - the membership check of group operation
 * @cookie's group agreed; @blocked: whether it found the node-block
 * layout (struct cs_ipc_inter_op.blocked), handed with the group's later
 * operations until its next check. Returns 0 or -ENOENT.
 */
int cs_ipc_server_set_blocked(struct cs_ipc_server *s, uint64_t cookie,
			      bool blocked);

/**
 * cs_ipc_server_set_pipe - what the group's nodes cut large operations at
 * @s: server
 * @cookie: the step whose membership check ran (cs_ipc_inter_op.pipe of
 *	every node compared)
 * @ok: every node of the group has the same cut size
 * @limit: else: the smallest cut size of a node that cuts (an allreduce
 *	or broadcast of at most this many bytes is cut by no node)
 * @node: else: a node (sidecar rank) whose cut size is not this node's
 * @val: its cut size (0: it does not cut)
 *
 * Every node of the group is told the same. From then on an allreduce or
 * broadcast of the group over nodes of more than @limit bytes (which the
 * nodes would cut differently and whose steps would not match) is
 * refused on every node with CS_ERR_BAD_DESC, CS_IPC_BAD_PIPE naming
 * @node (aux word @val), without a step; the others run. The step of
 * @cookie itself is the backend's to end (it may have been cut already).
 * Until a check told it (and with a backend that does not check), this
 * node cuts by its own ipc.dev_pipe. Returns 0 or -ENOENT.
 */
int cs_ipc_server_set_pipe(struct cs_ipc_server *s, uint64_t cookie, bool ok,
			   uint64_t limit, int32_t node, uint32_t val);

/**
 * cs_ipc_server_regroup - an elastic group's nodes re-formed it
 * @s: server
 * @cookie: the cross-node step that carried cs_ipc_inter_op.regroup
 * @size: the group's new size (its ranks on every node of the new view)
 * @ranks: the new group rank of each local rank (local_size of them)
 *
 * The group takes the new size and ranks (completions of elastic groups
 * carry them to the trainers). The step then runs as usual, unless its
 * buffers depend on the size (all-gather, reduce-scatter) and the size
 * changed: the backend ends it then with cs_ipc_server_inter_fail(...,
 * CS_ERR_EPOCH, CS_IPC_EPOCH_RESIZED, -1). Call from the thread that calls
 * cs_ipc_server_poll.
 *
 * Returns: 0, or -ENOENT (unknown or stale @cookie), -EINVAL (bad
 * numbers).
 */
int cs_ipc_server_regroup(struct cs_ipc_server *s, uint64_t cookie,
			  uint32_t size, const int32_t *ranks);

/**
 * cs_ipc_server_stats - read the counters
 * @s: server
 * @st: out
 */
void cs_ipc_server_stats(const struct cs_ipc_server *s,
			 struct cs_ipc_stats *st);

/**
 * cs_ipc_server_destroy - drop every trainer and close the socket
 * @s: server (may be NULL)
 */
void cs_ipc_server_destroy(struct cs_ipc_server *s);

#endif

/* SPDX-License-Identifier: MIT */
/* collstackd's trainer service: the IPC thread and its cross-node backend. */
#ifndef CS_TOOLS_DAEMON_IPC_H
#define CS_TOOLS_DAEMON_IPC_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "collstack/types.h"
#include "collectives/ring.h"

struct cs_daemon;
struct cs_daemon_conf;
struct cs_ar_svc;
/* One trainer operation on the lcore (cs_ar_svc_start_coll()). */
struct cs_ar_ext;

/* Hooks called by collstackd.c (sidecar/daemon_ipc.c). */
int cs_daemon_ipc_defaults(struct cs_daemon_conf *c);
int cs_daemon_ipc_set_key(struct cs_daemon_conf *c, const char *key,
			  const char *val, char *err, size_t errlen);
void cs_daemon_ipc_help(FILE *out);
/* After the lcores started: listen for trainers, start the IPC thread. */
int cs_daemon_ipc_start(struct cs_daemon *d);
/* Before the lcores stop (no-op if not started). */
void cs_daemon_ipc_stop(struct cs_daemon *d);

/* One cross-node collective for cs_ar_svc_start_coll(). */
struct cs_ar_coll {
	uint32_t op_id; /* the same on every node */
	uint32_t epoch; /* the node view (group epoch); 0 with static peers */
	enum cs_coll_kind kind; /* allreduce, reduce-scatter, all-gather,
				 * broadcast (collectives/ring.h) */
	uint32_t root; /* broadcast: ring index of the root's node */
	uint32_t rank; /* not allreduce: the ring index the buffers were laid
			* out for (cs_ar_svc_ring_pos); checked */
	const void *sendbuf; /* NULL: in place in @recvbuf */
	void *recvbuf;
	size_t count; /* elements, as struct cs_coll_params counts them */
	enum cs_dtype dtype;
	enum cs_redop redop;
	atomic_int *notify; /* set by the lcore to 1 or a negative error */
	cs_ns_t deadline; /* from the post; 0: coll.deadline */
	/* @kind is ignored: a node-level all-to-all of @count elements from
	 * every node to every node (ring index order; @sendbuf and @recvbuf
	 * hold ring size x @count, never overlapping) */
	bool alltoall;
	/* with @alltoall, NULL or an all-to-all-v's counts per node (ring
	 * order, elements): 2 x ring size, to each node then from each;
	 * node after node in @sendbuf and @recvbuf (@count ignored) */
	const uint64_t *a2a_counts;
	/* a group over some of the nodes: @nnodes ring indexes in ring
	 * order (this node among them), a transport group of its own,
	 * @group (nonzero, the same on each of them); the ring and its
	 * indexes (@rank, @root, @a2a_counts) are theirs. @nnodes 0: every
	 * node of the view */
	const uint32_t *nodes;
	uint32_t nnodes;
	uint32_t group;
};

/**
 * cs_ar_svc_start_coll - run a collective across the nodes
 * @s: the collective service
 * @c: what, on which buffers (NCCL's conventions, collectives/ring.h);
 *	the buffers stay valid until *@c->notify is set or
 *	cs_ar_svc_ext_stop()
 * @h: out: its handle, for cs_ar_svc_ext_*(); give it back with
 *	cs_ar_svc_ext_put() after the verdict, or cs_ar_svc_ext_stop()
 * @msg: why it failed
 * @mlen: size of @msg
 *
 * Many run at once (each its own @c->notify and handle), matched across
 * the nodes by @c->op_id alone, never by the order they were started
 * in. Runs on the ring
 * of view @c->epoch (applied first if the peer table is older; the lcore
 * is quiesced for that) with the ring index of this node. Control path:
 * allocates. Returns: 0, -EAGAIN if the view is no longer @c->epoch
 * (nothing started), CS_ERR_PEER_LOST if this node is out of the view,
 * or a negative errno.
 */
int cs_ar_svc_start_coll(struct cs_ar_svc *s, const struct cs_ar_coll *c,
			 struct cs_ar_ext **h, char *msg, size_t mlen);

/**
 * cs_ar_svc_ring_pos - this node's ring index and the ring's size in view
 *	@epoch (applied first, as cs_ar_svc_start_coll() does)
 * Returns 0, -EAGAIN if the view is no longer @epoch, or an error (@msg
 * says why).
 */
int cs_ar_svc_ring_pos(struct cs_ar_svc *s, uint32_t epoch, uint32_t *rank,
		       uint32_t *n, char *msg, size_t mlen);

/**
 * cs_ar_svc_ext_times - when the lcore picked up trainer operation @h,
 *	when its result was ready and when its last frame was
 *	acknowledged (CLOCK_MONOTONIC ns); for ipc.trace_dir
 * Call after its verdict (*notify) was seen. Returns 0 or -ENOENT.
 */
int cs_ar_svc_ext_times(const struct cs_ar_ext *h, cs_ns_t *picked,
			cs_ns_t *ready, cs_ns_t *done);

/**
 * cs_ar_svc_set_notify_fd - an eventfd the lcore writes to after it stored
 * the verdict of a trainer operation (-1: none); set before the first one
 */
void cs_ar_svc_set_notify_fd(struct cs_ar_svc *s, int fd);

/**
 * cs_ar_svc_ext_failed_node - the node whose session gave up, when
 * trainer operation @h failed that way
 * @s: the collective service
 * @h: the operation
 *
 * Returns: the node's rank (node.rank), or -1 (not failed, or failed
 * otherwise).
 */
int cs_ar_svc_ext_failed_node(struct cs_ar_svc *s, const struct cs_ar_ext *h);

/**
 * cs_ar_svc_ext_unsettled - does a finished trainer op (given back with
 * cs_ar_svc_ext_put()) still resend frames no peer has acknowledged (an early
 * op, coll.direct_early)? Uninstalling it now could leave a peer without them.
 * @s: the collective service
 */
bool cs_ar_svc_ext_unsettled(struct cs_ar_svc *s);

/**
 * cs_ar_svc_refuse - trainer operation @op_id of view @epoch was refused
 *	on this node with @err (a CS_ERR_* code): the other nodes' part of it
 *	ends with that error, naming this node, instead of waiting for it
 * Returns: 0 or -ENOMEM.
 */
int cs_ar_svc_refuse(struct cs_ar_svc *s, uint32_t op_id, uint32_t epoch,
		     int err);
/* cs_ar_svc_refuse() for an operation of a group over some nodes
 * (struct cs_ar_coll's @group, @nodes, @nnodes; 0 nodes: every node). */
int cs_ar_svc_refuse_in(struct cs_ar_svc *s, uint32_t op_id, uint32_t epoch,
			int err, uint32_t group, const uint32_t *nodes,
			uint32_t nnodes);

/**
 * cs_ar_svc_stop_ext - take every trainer operation off the lcore (the
 * ones given back that still resend, and any still held); on return the
 * lcore touches none of their buffers
 * @s: the collective service
 */
void cs_ar_svc_stop_ext(struct cs_ar_svc *s);

/**
 * cs_ar_svc_ext_stop - take trainer operation @h off the lcore: on return
 * the lcore no longer touches its buffers, and @h is gone
 * @s: the collective service
 * @h: from cs_ar_svc_start_coll()
 */
void cs_ar_svc_ext_stop(struct cs_ar_svc *s, struct cs_ar_ext *h);

/**
 * cs_ar_svc_ext_put - give back trainer operation @h after its verdict
 * (an early one goes on resending its frames from the engine's copy
 * until acknowledged, or cs_ar_svc_stop_ext()); @h is gone
 * @s: the collective service
 * @h: from cs_ar_svc_start_coll()
 */
void cs_ar_svc_ext_put(struct cs_ar_svc *s, struct cs_ar_ext *h);

/**
 * cs_ar_svc_flush - on lcore 0 (ipc.on_lcore): hand the frames it queued
 * to the port now (before trainer memory they may point into goes);
 * elsewhere nothing
 */
void cs_ar_svc_flush(struct cs_ar_svc *s);

#endif

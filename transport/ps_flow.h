/* SPDX-License-Identifier: MIT */
/*
 * cs_ps_flow: parameter-server messages (collectives/ps/ps_wire.h) carried
 * by the transport core as one long-lived operation of the PS group.
 *
 * Every PS node (server, worker, or both) posts one cs_ps_flow to its core
 * under the same (group, op id). The flow has one channel per rank of the
 * group (channel r sends to rank r). A PS message up to the mss is one
 * DATA frame; a longer one (up to CS_PS_FLOW_MSG_MAX) is cut into frames
 * of mss bytes (the last shorter), each carrying in its header the
 * message's id per destination (hdr.step), its length, the fragment size
 * and the fragment's index (hdr.offset: len << 32 | unit << 16 | index),
 * and reassembled at the receiver: a fragment whose length does not match
 * its index, that overlaps one already taken, or whose message length or
 * unit differ from its message's is refused and counted (frag_bad).
 * The store's and the worker's send callbacks call cs_ps_flow_send(), the
 * core's sessions stamp, pace, acknowledge and retransmit the frames, and
 * each message reaches the receiving node's rx callback exactly once,
 * when its last fragment arrives (messages from one sender may complete
 * in another order than they were sent). A message to the node itself (a
 * sidecar that is server and worker) never leaves: it waits in a local
 * queue that cs_ps_flow_drain_local() hands to the rx callback.
 *
 * Exactly-once holds twice over: a retransmitted frame is a duplicate at
 * its session (cs_rel) and never reaches the flow, and a push that does
 * reach the store twice (a worker that resent it after a core was
 * replaced) is caught by the store's push-id window.
 *
 * The operation ends when the owner closed it (cs_ps_flow_close()) and
 * every frame handed to the core was acknowledged (status 0), or when the
 * core aborts it: a lost peer (CS_ERR_PEER_LOST naming its rank), a
 * refusal announced by a peer. Messages are copied at send; the copy is
 * freed when its frame is acknowledged.
 */
#ifndef CS_TRANSPORT_PS_FLOW_H
#define CS_TRANSPORT_PS_FLOW_H

#include <stddef.h>
#include <stdint.h>

#include "transport/flow.h"

struct cs_ps_flow;

/* A message from group rank @src (untrusted bytes, @len of them). */
typedef void (*cs_ps_flow_rx_fn)(void *ctx, uint32_t src, const void *msg,
				 size_t len, cs_ns_t now);

struct cs_ps_flow_stats {
	uint64_t sent; /* messages queued to other ranks */
	uint64_t local; /* messages to this rank (never on the wire) */
	uint64_t acked; /* frames acknowledged */
	uint64_t rx; /* messages handed to the rx callback from peers */
	uint64_t rx_bad; /* frames refused (empty, not from a peer, sent
			  * to another rank) */
	uint64_t rebuilt; /* frames rebuilt for a retransmission */
	uint64_t frag_tx; /* frames of messages sent in several */
	uint64_t frag_rx; /* fragments taken into a reassembly */
	uint64_t frag_bad; /* fragments refused (of those in rx_bad):
			    * overlapping, a length or unit that differ
			    * from their message's, too many partial */
};

/* Largest message: one longer than a frame's payload goes as fragments
 * (one frame each), reassembled at the receiver. */
#define CS_PS_FLOW_MSG_MAX (1u << 20)

/* The flow's entry points for cs_tp_post(). */
extern const struct cs_flow_ops cs_ps_flow_ops;

/**
 * cs_ps_flow_create - a PS message flow for rank @self of @n
 * @n: ranks in the PS group (>= 1)
 * @self: this node's rank (< @n)
 * @mss: a frame's payload (64 to 65535): longer messages are fragmented
 * @rx: where messages go (also called from inside cs_tp_rx())
 * @ctx: passed to @rx
 * @out: the flow
 * Returns: 0, -EINVAL, -ENOMEM.
 */
int cs_ps_flow_create(uint32_t n, uint32_t self, uint32_t mss,
		      cs_ps_flow_rx_fn rx, void *ctx, struct cs_ps_flow **out);

/* Free the flow (after its io->done, or with its core destroyed). */
void cs_ps_flow_destroy(struct cs_ps_flow *f);

/**
 * cs_ps_flow_send - queue message @msg for rank @dst (copied)
 * Returns: 0, -EINVAL (bad rank, empty message), -EMSGSIZE (over
 *	CS_PS_FLOW_MSG_MAX), -EPIPE (closed or aborted), -ENOMEM.
 */
int cs_ps_flow_send(struct cs_ps_flow *f, uint32_t dst, const void *msg,
		    size_t len);

/**
 * cs_ps_flow_drain_local - hand the messages this node sent itself to the
 * rx callback (in order; what the callback sends meanwhile is handed on in
 * the same call, up to @max messages)
 * Returns: messages delivered.
 */
unsigned cs_ps_flow_drain_local(struct cs_ps_flow *f, cs_ns_t now,
				unsigned max);

/* No more sends: the operation completes once every frame is acked. */
void cs_ps_flow_close(struct cs_ps_flow *f);

/* Frames queued or not yet acknowledged (local messages included). */
uint64_t cs_ps_flow_backlog(const struct cs_ps_flow *f);

void cs_ps_flow_get_stats(const struct cs_ps_flow *f,
			  struct cs_ps_flow_stats *st);

struct cs_ps_store;
struct cs_ps_worker;

/**
 * cs_ps_flow_route - hand a received PS message to this node's part
 * @st: the node's shard store, or NULL (a worker only)
 * @w: the node's worker engine, or NULL (a server only)
 * @src: the sender's group rank (a server's id is its group rank)
 * @msg: the bytes (untrusted), @len of them
 * @now: current time
 *
 * Pushes and pulls go to @st, push acknowledgements and pull replies to
 * @w; each validates the message itself. A message of no known type, or
 * for a part this node does not run, is refused here.
 * Returns: 0 (handed on), -EPROTO (refused), -ENOMEM.
 */
int cs_ps_flow_route(struct cs_ps_store *st, struct cs_ps_worker *w,
		     uint32_t src, const void *msg, size_t len, cs_ns_t now);

#endif

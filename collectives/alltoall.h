/* SPDX-License-Identifier: MIT */
/*
 * All-to-all and all-to-all-v as a sans-IO engine of the transport core
 * (transport/flow.h): flat (a channel per peer) or two-level (ranks
 * grouped into nodes; one aggregated, bucketed flow per node pair,
 * forwarded to the node's ranks on arrival). docs/alltoall.md has the
 * schedule, the choice between the two and the measurements.
 *
 * Both algorithms are one engine: a "node" of G ranks (G = 1: flat, every
 * rank its own node) owns a struct cs_a2a_node holding the G local ranks'
 * descriptors; each local rank runs one struct cs_a2a (one flow posted to
 * its own transport core). For node pair (a, b), a != b, the stream is the
 * concatenation of the blocks (a*G + j -> b*G + k) for j, k in 0 .. G-1
 * (j major), cut into frames of mtu_payload bytes (bucketing: blocks are
 * packed, a frame may carry the tail of one block and the head of the
 * next). The stream leaves from local rank c % G of node a and arrives at
 * local rank c % G of node b, where c = (b - a - 1) mod M is the node
 * pair's channel (M nodes): the channels of a sender, in the order the
 * core serves them (0 first), name destinations a+1, a+2, ..., a shifted
 * schedule under which the senders of one moment aim at different
 * receivers instead of all at node 0 (incast by construction). With
 * CS_A2A_F_RAIL every local rank i carries every node pair, with only the
 * blocks for local rank i of the far node: all G NICs busy at any M.
 *
 * Blocks inside a node never touch the network: they are copied from the
 * local sender's buffer into the local receiver's at cs_a2a_node_init()
 * (the intra-node exchange; shared memory in the sidecar, a memory copy
 * in the simulator). Two-level streams are staged (gathered from the G
 * local send buffers into one contiguous buffer per stream, the
 * intra-node stage) and that buffer stays pinned until the operation
 * ends: a retransmission carries the original bytes (control/rel.h rule
 * (a)). A flat stream is one block and is sent from the caller's buffer
 * in place (zero copy; the buffer is pinned, rule (a) again).
 *
 * The engine never allocates after init, never reads a clock, never does
 * I/O. The G engines of a node share their node (same thread: the
 * simulator, one sidecar lcore).
 */
#ifndef CS_COLLECTIVES_ALLTOALL_H
#define CS_COLLECTIVES_ALLTOALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal/proto.h"
#include "internal/util.h"
#include "transport/flow.h"

/* Flags of struct cs_a2a_params. */
#define CS_A2A_F_NODATA 0x1u /* timing only: buffers are never touched */
#define CS_A2A_F_NO_BUCKET 0x2u /* every block starts a new frame */
/*
 * Counts in the same operation: receivers do not know what they will get
 * (recvcounts and rdispls are ignored, may be NULL). Every stream starts
 * with a count frame (frame 0: the G*G block sizes, u64 elements, host
 * order) and its data frames leave only once that frame is acknowledged,
 * so a receiver never sees data it cannot place (one extra round trip,
 * for every stream at once). A block is placed where its count frame
 * found room: the receive buffer (recv_count elements) fills in arrival
 * order; cs_a2a_recv_layout() tells where each source's block went.
 * Blocks inside the node are placed first, in local order. Not with
 * CS_A2A_F_NODATA.
 */
#define CS_A2A_F_RECV_DYNAMIC 0x4u
/*
 * Rail-aligned two-level (G > 1): node pair (a, b) is carried by G
 * streams instead of one, local rank i of a to local rank i of b, stream
 * i holding the blocks (a*G + j -> b*G + i), j = 0 .. G-1 (gathered from
 * the node's send buffers, as NCCL's PXN does): every rank sends M - 1
 * streams and receives M - 1, so all G NICs of a node carry 1/G of its
 * traffic whatever M is, and a stream lands at its final receiver.
 */
#define CS_A2A_F_RAIL 0x8u

/**
 * struct cs_a2a_virt - virtual element tails (the simulator's synthetic
 * payloads, `collstack sim moe --payload synth`; docs/alltoall.md)
 * @tail: bytes of each element that are never stored
 * @at: where they sit in the element on the wire (0 .. esz)
 * @gen: the tail bytes [@off, @off + @len) of the element @elem (its esz
 *	stored bytes) that rank @src sends to rank @dst, into @out
 * @got: tail bytes [@off, @off + @len) of element @idx of rank @dst's
 *	receive buffer (from rank @src) arrived, at @in (each byte once)
 * @arg: their first argument
 *
 * On the wire an element is esz + @tail bytes: stored bytes [0, @at), the
 * tail, stored bytes [@at, esz). Buffers, counts and displacements hold
 * the stored bytes only (elements of esz), frames and stream offsets the
 * wire ones: the same frames as a run whose elements are esz + @tail
 * bytes. The intra-node exchange hands each tail from @gen to @got
 * directly. A frame's payload is built into the engine's buffer for its
 * channel (a rebuild: one more): it is valid until the next next() of
 * that channel or the next rebuild, so the transport's xmit must copy it
 * (the simulator's does; the sidecar's does not: not for the sidecar).
 * Not with CS_A2A_F_NODATA. Every local rank of a node names the same.
 */
struct cs_a2a_virt {
	uint32_t tail, at;
	void (*gen)(void *arg, uint32_t src, uint32_t dst, const uint8_t *elem,
		    uint64_t off, uint8_t *out, uint32_t len);
	void (*got)(void *arg, uint32_t src, uint32_t dst, uint64_t idx,
		    const uint8_t *in, uint64_t off, uint32_t len);
	void *arg;
};

#define CS_A2A_MAX_RANKS 16384
#define CS_A2A_MAX_RPN 64 /* ranks per node */

/* Algorithms (cs_a2a_choose()). */
enum cs_a2a_algo {
	CS_A2A_AUTO = 0,
	CS_A2A_FLAT = 1,
	CS_A2A_TWO_LEVEL = 2,
	CS_A2A_RAIL = 3, /* two-level with CS_A2A_F_RAIL */
};

/**
 * struct cs_a2a_params - one rank's all-to-all(v) as posted
 * @nranks: ranks in the group
 * @rank: this rank (its node is rank / @ranks_per_node)
 * @ranks_per_node: G: 1 runs flat, > 1 two-level (rail-aligned with
 *	CS_A2A_F_RAIL); divides @nranks
 * @esz: bytes per element (counts and displacements are in elements)
 * @sendbuf: @send_count elements
 * @recvbuf: @recv_count elements
 * @sendcounts: [nranks]: elements for each destination
 * @sdispls: [nranks]: where each destination's block starts in @sendbuf
 * @recvcounts: [nranks]: elements from each source
 * @rdispls: [nranks]: where each source's block goes in @recvbuf
 * @mtu_payload: payload bytes per frame
 * @flags: CS_A2A_F_*
 * @group: group id, @epoch: its epoch, @op_id: operation id (headers)
 * @start: when posted, @deadline: ns after @start (0: none)
 * @virt: NULL, or virtual element tails (struct cs_a2a_virt)
 *
 * Every count and displacement is checked: a block must lie inside its
 * buffer, received blocks must not overlap, and what rank s sends to d
 * must be what d expects from s (checked inside a node, where both are
 * known; across nodes the receiver rejects any frame that does not fit
 * its own counts).
 */
struct cs_a2a_params {
	uint32_t nranks, rank, ranks_per_node;
	uint32_t esz;
	const void *sendbuf;
	uint64_t send_count;
	void *recvbuf;
	uint64_t recv_count;
	const uint64_t *sendcounts, *sdispls;
	const uint64_t *recvcounts, *rdispls;
	uint32_t mtu_payload;
	uint32_t flags;
	uint32_t group, epoch, op_id;
	cs_ns_t start;
	uint64_t deadline;
	const struct cs_a2a_virt *virt;
};

/* Return values of cs_a2a_on_data() >= 0 (and CS_FLOW_RX_ACK_NOW: new,
 * the last frame of its stream or a count frame). */
#define CS_A2A_RX_NEW 0
#define CS_A2A_RX_DUP 1
#define CS_A2A_RX_STALE 2 /* older epoch */
#define CS_A2A_RX_LATE 3 /* after an abort */

struct cs_a2a_node;
struct cs_a2a;

/**
 * cs_a2a_node_init - the node of @nlocal ranks: validate every local
 * descriptor, do the intra-node exchange, set up the shared state
 * @local: the descriptors of the node's ranks, in local order (local k is
 *	rank node * G + k); counts and displacements are copied
 * @nlocal: G (== local[k].ranks_per_node)
 * @out: the node
 * Returns: 0, CS_ERR_BAD_DESC (a descriptor that does not add up),
 *	-EINVAL (bad parameters), -E2BIG, -ENOMEM.
 */
int cs_a2a_node_init(const struct cs_a2a_params *local, uint32_t nlocal,
		     struct cs_a2a_node **out);

/**
 * cs_a2a_node_set_notify - @fn(@arg, local) is called when a local
 * rank's result became final through another local rank's engine (its
 * transport core should be polled: nothing of its own arrived)
 */
void cs_a2a_node_set_notify(struct cs_a2a_node *nd,
			    void (*fn)(void *arg, uint32_t local), void *arg);

/**
 * cs_a2a_node_free - free the node (after its engines; NULL is fine)
 */
void cs_a2a_node_free(struct cs_a2a_node *nd);

/**
 * cs_a2a_init - the engine of local rank @local of @nd
 * @nd: the node
 * @local: 0 .. G-1
 * @out: the engine (post it with cs_a2a_flow_ops)
 * Returns: 0, -EINVAL, -ENOMEM.
 */
int cs_a2a_init(struct cs_a2a_node *nd, uint32_t local, struct cs_a2a **out);

/**
 * cs_a2a_free - free an engine (NULL is fine)
 */
void cs_a2a_free(struct cs_a2a *a);

/* Counters of one engine. */
struct cs_a2a_stats {
	uint64_t tx_frames, tx_bytes; /* first transmissions */
	uint64_t rx_frames, rx_bytes; /* new frames placed */
	uint64_t rx_dup, rebuilds;
	uint64_t staged_bytes; /* copied into stream buffers (two-level) */
	uint64_t local_bytes; /* copied inside the node, by the node */
	uint32_t tx_streams, rx_streams;
};

void cs_a2a_get_stats(const struct cs_a2a *a, struct cs_a2a_stats *st);

/**
 * cs_a2a_recv_layout - where each source's block landed in this rank's
 * receive buffer: @counts[s] elements at @displs[s] (arrays of nranks,
 * owned by the node; final once cs_a2a_status() is 0). With
 * CS_A2A_F_RECV_DYNAMIC this is how the counts arrive; without, they are
 * a copy of the caller's.
 */
void cs_a2a_recv_layout(const struct cs_a2a *a, const uint64_t **counts,
			const uint64_t **displs);

/**
 * cs_a2a_stream_frames - frames of a stream of blocks, as both ends cut
 * it: @nblk block sizes in bytes (zero-size blocks carry nothing),
 * @mtu payload bytes per frame, @bucket: packed (true) or one frame
 * boundary at every block start (false)
 */
uint64_t cs_a2a_stream_frames(const uint64_t *blk, uint32_t nblk, uint32_t mtu,
			      bool bucket);

/**
 * cs_a2a_choose - flat or two-level for @n ranks, @rpn per node and
 * @block_bytes, the mean block size (docs/alltoall.md: the rule and the
 * measurements behind it). Two-level when there are at least 2 nodes,
 * at least 3/4 of a node's NICs carry a stream (4 (M - 1) >= 3 rpn: the
 * node pairs are spread over the local ranks) and the mean block is at
 * most CS_A2A_TWO_LEVEL_MAX_BLOCK; flat otherwise.
 * Returns: CS_A2A_FLAT or CS_A2A_TWO_LEVEL.
 */
enum cs_a2a_algo cs_a2a_choose(uint32_t n, uint32_t rpn, uint64_t block_bytes);

/* The two-level rule's crossover (docs/alltoall.md). */
#define CS_A2A_TWO_LEVEL_MAX_BLOCK (64u << 10)

/* The engine's entry points (flow.h), and their plain names for tests. */
extern const struct cs_flow_ops cs_a2a_flow_ops;

uint32_t cs_a2a_channels(const struct cs_a2a *a);
int64_t cs_a2a_chan_peer(const struct cs_a2a *a, uint32_t ch);
unsigned cs_a2a_next(struct cs_a2a *a, uint32_t ch, struct cs_flow_tx *out,
		     unsigned max);
int cs_a2a_on_data(struct cs_a2a *a, const struct cs_pkt_hdr *h,
		   const void *payload);
int cs_a2a_on_acked(struct cs_a2a *a, uint64_t cookie);
int cs_a2a_rebuild(struct cs_a2a *a, uint64_t cookie, struct cs_flow_tx *out);
int cs_a2a_status(const struct cs_a2a *a, uint32_t *culprit);
int cs_a2a_abort(struct cs_a2a *a, int err, uint32_t culprit);
bool cs_a2a_result_ready(const struct cs_a2a *a);

#endif

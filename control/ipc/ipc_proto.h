/* SPDX-License-Identifier: MIT */
/* Trainer <-> sidecar IPC: control messages, descriptors and completions. */
#ifndef CS_IPC_PROTO_H
#define CS_IPC_PROTO_H

/*
 * A trainer talks to its sidecar two ways:
 *
 *  - control messages (struct cs_ipc_msg, one per SOCK_SEQPACKET packet) on
 *    a Unix socket: hello (with the control segment and an eventfd as
 *    SCM_RIGHTS), register / unregister a buffer segment (a sealed memfd),
 *    join / leave a group. Each gets one reply. These are the slow path.
 *  - the control segment: a memfd holding struct cs_ipc_ctrl, then a
 *    submission ring (trainer -> sidecar, struct cs_ipc_sqe slots) and a
 *    completion ring (sidecar -> trainer, struct cs_ipc_cqe slots). The
 *    sidecar polls the submission ring: no system call per operation.
 *
 * Every field a trainer writes is untrusted; the sidecar validates it.
 * All layouts here are ABI: append only, bump CS_IPC_VERSION otherwise.
 */

#include <assert.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>

#include "internal/util.h"

#define CS_IPC_VERSION 2u /* 2: sq_asleep, CS_IPC_MSG_WAKE */
#define CS_IPC_CTRL_MAGIC 0x4c52544353432325ull /* "%#CSCTRL" */
#define CS_IPC_NAME_MAX 64 /* group name, NUL included */
#define CS_IPC_MSG_TEXT 96 /* reply text, NUL included */
#define CS_IPC_RING_SLOTS 256u /* submission and completion */
#define CS_IPC_MAX_LOCAL 64u /* trainers of one group per node */
#define CS_IPC_PS_NAME_MAX 32 /* PS table name, NUL included */
/* A group over some of the nodes names them in a bit set of this many
 * 64-bit words: node ring indexes below CS_IPC_SUBSET_NODES. */
#define CS_IPC_NODE_WORDS 2
#define CS_IPC_SUBSET_NODES (64 * CS_IPC_NODE_WORDS)

/* Collective operations (struct cs_ipc_sqe.op). */
enum cs_ipc_opcode {
	CS_IPC_OP_NONE = 0,
	CS_IPC_OP_ALLREDUCE = 1,
	CS_IPC_OP_REDUCE_SCATTER = 2,
	CS_IPC_OP_ALL_GATHER = 3,
	CS_IPC_OP_BROADCAST = 4,
	CS_IPC_OP_BARRIER = 5,
	CS_IPC_OP_ALLTOALL = 6,
	CS_IPC_OP_ALLTOALLV = 7, /* per-pair counts: CS_IPC_A2AV_BYTES */
	/* receive counts not known by the receiver: they travel with the
	 * rows (CS_IPC_A2AV_BYTES table, below) */
	CS_IPC_OP_ALLTOALLV_DYN = 8,
	CS_IPC_OP_COUNT
};

/*
 * Parameter-server operations (control/ipc/ipc_ps.c), numbered apart from
 * the collectives: they are not matched across ranks. Their descriptor:
 * @group the table handle (CS_IPC_MSG_PS_CREATE's reply), @count keys,
 * @dtype and @root the row's type and values per row as the trainer
 * knows them (checked against the table's), @send_seg/@send_off the keys
 * (u64), @recv_seg/@recv_off the rows (read by a push, written by a pull),
 * @reserved1 the version (push) or clock (pull); @redop, @flags and
 * @reserved0 0.
 */
#define CS_IPC_OP_PS_PUSH 24u
#define CS_IPC_OP_PS_PULL 25u
/*
 * A table's checkpoint and restore (docs/ps.md, "Trainer API"): @group
 * the table handle, @count the bytes of a directory's path (its NUL
 * included, at most CS_IPC_PS_PATH_MAX) at @send_seg/@send_off, and
 * CS_IPC_PS_CTL_RESULT bytes (8-aligned) at @recv_seg/@recv_off where the
 * sidecar writes the outcome (struct cs_ipc_ps_ctl_result) before it
 * completes the descriptor with status 0; @dtype, @root, @redop, @flags,
 * @reserved0 and @reserved1 0.
 */
#define CS_IPC_OP_PS_CKPT 28u
#define CS_IPC_OP_PS_RESTORE 29u
#define CS_IPC_PS_PATH_MAX 4000u

/*
 * The outcome of CS_IPC_OP_PS_CKPT / _RESTORE, made to be allreduced (max)
 * over the group as it is: @err is 0, or (e << 32) | the node whose
 * shard failed, e = (why << 24) | (file << 8) | positive errno: a
 * restore's refusal says why (enum cs_ps_restore_why of
 * collectives/ps/ps_io.h, 0 for any other error) and the shard number of
 * the checkpoint file that made it refuse; @clock the shard's clock (the
 * snapshot's, or the restored one) and @nclock its negation, both INT64_MIN
 * from a rank that does not drive its node's shard (only the lowest local rank
 * does).
 */
struct cs_ipc_ps_ctl_result {
	int64_t err;
	int64_t clock;
	int64_t nclock;
};
#define CS_IPC_PS_CTL_RESULT 24u
static_assert(sizeof(struct cs_ipc_ps_ctl_result) == CS_IPC_PS_CTL_RESULT,
	      "the control result's layout");

/*
 * Point-to-point (control/ipc/ipc_p2p.c), not matched across ranks either:
 * @group the trainer's group handle, @count elements of @dtype, @root the
 * peer's rank in the group (the destination of a send, the source of a
 * receive), @reserved0 the tag; a send's data at @send_seg/@send_off, a
 * receive's room at @recv_seg/@recv_off; @redop, @flags and @reserved1 0.
 * The k-th send from rank a to rank b with tag t meets the k-th receive of
 * b from a with tag t; both must have the same size in bytes.
 */
#define CS_IPC_OP_SEND 26u
#define CS_IPC_OP_RECV 27u

/*
 * Submission descriptor, one 64-byte slot. Buffers are (segment id, byte
 * offset) pairs; segment ids are those the sidecar returned when the
 * trainer registered the segment. @count is in elements: the whole buffer
 * for allreduce and broadcast, the per-rank block for reduce-scatter (recv)
 * and all-gather (send). Barrier ignores buffers and needs count 0.
 * All-to-all-v: @count 0; @send_off/@recv_off the buffers' element 0 (the
 * displacements count from there); @reserved0 and @reserved1 the segment
 * and byte offset (a multiple of 8) of its count table, the table
 * below (CS_IPC_A2AV_BYTES) in the trainer's memory, read once when the sidecar
 * takes the descriptor (later changes to it are not seen).
 */
struct cs_ipc_sqe {
	uint64_t user_id; /* echoed in the completion */
	uint32_t group; /* the trainer's group handle */
	uint8_t op; /* enum cs_ipc_opcode */
	uint8_t dtype; /* enum cs_dtype */
	uint8_t redop; /* enum cs_redop */
	uint8_t flags; /* 0 */
	uint64_t count;
	uint32_t send_seg;
	uint32_t recv_seg;
	uint64_t send_off;
	uint64_t recv_off;
	uint32_t root; /* broadcast root rank */
	uint32_t reserved0;
	uint64_t reserved1;
};
static_assert(sizeof(struct cs_ipc_sqe) == 64, "sqe is one cache line");

/*
 * The count table of an all-to-all-v (CS_IPC_OP_ALLTOALLV), n = the group's
 * size: four arrays of n u64 (sendcounts, sdispls, recvcounts, rdispls), in
 * elements of the descriptor's dtype, MPI's meaning. Every block must lie
 * inside its segment, the send and the receive extents must not overlap, and
 * what rank i sends to j must be what j expects from i (checked across every
 * rank before anything moves: CS_IPC_BAD_A2AV_COUNTS on every rank otherwise).
 */
#define CS_IPC_A2AV_BYTES(n) (32u * (uint64_t)(n))

/*
 * CS_IPC_OP_ALLTOALLV_DYN: the same table, but only sendcounts and sdispls
 * are read; @count is the receive room (elements from @recv_off); @root 0,
 * or 1: this rank's own input was bad (the trainer library found it so,
 * e.g. an MoE expert index out of range): the operation is refused on
 * every rank with CS_ERR_BAD_DESC (CS_IPC_BAD_PEER naming it), nothing
 * sent. On success the sidecar writes recvcounts and rdispls into the
 * table (the rows of each source rank, packed in source rank order from
 * @recv_off) before the completion. Room too small on some rank: refused
 * on every rank (CS_IPC_BAD_DYN_ROOM naming it). Across nodes the count
 * matrix travels in a first step of the same operation (as for
 * CS_IPC_OP_ALLTOALLV), then the rows.
 */
#define CS_IPC_DYN_BAD_INPUT 1u
/*
 * Bits 8..15 of @root: a tag naming the kind of exchange (0 for a plain
 * one; the MoE layer's node-sum and node-rows steps use 1..6,
 * client/moe.c). Every rank of the operation must post the same tag: the
 * tags travel in the count matrix and a rank whose tag differs from rank
 * 0's fails the operation on every rank (CS_IPC_BAD_DYN_TAG naming it),
 * nothing sent.
 */
#define CS_IPC_DYN_TAG_SHIFT 8
#define CS_IPC_DYN_TAG_MASK 0xff00u

/* Which descriptor field a CS_ERR_BAD_DESC completion complains about. */
enum cs_ipc_bad {
	CS_IPC_BAD_NONE = 0,
	CS_IPC_BAD_OP,
	CS_IPC_BAD_GROUP,
	CS_IPC_BAD_DTYPE,
	CS_IPC_BAD_REDOP,
	CS_IPC_BAD_COUNT,
	CS_IPC_BAD_SEND_SEG,
	CS_IPC_BAD_RECV_SEG,
	CS_IPC_BAD_SEND_RANGE, /* offset/length outside the segment */
	CS_IPC_BAD_RECV_RANGE,
	CS_IPC_BAD_ALIGN, /* offset not a multiple of the element size */
	CS_IPC_BAD_OVERLAP, /* send and recv overlap (not in place) */
	CS_IPC_BAD_ROOT,
	CS_IPC_BAD_FLAGS, /* flags or reserved fields not zero */
	CS_IPC_BAD_MISMATCH, /* differs from the other ranks' descriptor */
	CS_IPC_BAD_PEER, /* another rank's descriptor was bad */
	/*
	 * The group's nodes disagree on its membership (checked across the
	 * nodes before a group's first cross-node operation; the group is
	 * failed). @peer: the node (sidecar rank) that disagrees; the aux
	 * word (@epoch): the size it joined the group with (GROUP_SIZE), the
	 * rank it claims as well (GROUP_RANK); GROUP_MISSING: @peer -1, the
	 * aux word a rank no node has.
	 */
	CS_IPC_BAD_GROUP_SIZE,
	CS_IPC_BAD_GROUP_RANK,
	CS_IPC_BAD_GROUP_MISSING,
	/* an all-to-all across nodes: the ranks of a node are not numbered
	 * contiguously in local-rank order, or nodes differ in their count
	 * of ranks (collstack.h, cs_alltoall) */
	CS_IPC_BAD_LAYOUT,
	/* parameter server (ipc_ps.c): the table handle is none of this
	 * trainer's (never created, destroyed, or failed); the rows' type or
	 * size differs from the table's; a key is not below the table's
	 * key_max (the completion's aux word: the index of the first one) */
	CS_IPC_BAD_PS_TABLE,
	CS_IPC_BAD_PS_ROW,
	CS_IPC_BAD_PS_KEY,
	/* all-to-all-v: the count table's segment or range is bad (unknown
	 * segment, outside it, not 8-aligned) */
	CS_IPC_BAD_A2AV_TABLE,
	/* all-to-all-v: what rank @peer sends to rank (aux word) differs
	 * from what that rank expects from it; every rank gets this */
	CS_IPC_BAD_A2AV_COUNTS,
	/* all-to-all-v with receive counts sent along: rank @peer has not
	 * the room for what the others send it; every rank gets this */
	CS_IPC_BAD_DYN_ROOM,
	/* all-to-all-v with receive counts sent along: rank @peer posted
	 * another kind of exchange than rank 0 (its tag, bits 8..15 of
	 * @root, differs: e.g. an MoE layer with node-sum on some ranks
	 * only); every rank gets this, nothing sent */
	CS_IPC_BAD_DYN_TAG,
	/* an allreduce or broadcast across nodes that the group's nodes
	 * would cut into slices differently (ipc.dev_pipe, ipc.dev_pipe_any
	 * or GPU support differ between the sidecars); refused on every
	 * node, nothing sent. @peer: a node (sidecar rank) that cuts
	 * otherwise than this one; the aux word: its cut size in bytes (0:
	 * it does not cut) */
	CS_IPC_BAD_PIPE,
	CS_IPC_BAD_COUNT_
};

/*
 * What @peer of a CS_ERR_PEER_LOST completion names (its @detail). Older
 * sidecars leave @detail 0 there: a rank of the group.
 */
enum cs_ipc_lost {
	CS_IPC_LOST_RANK = 0, /* a rank of the group (trainer gone) */
	CS_IPC_LOST_NODE = 1, /* a node (sidecar rank) lost from the view */
	CS_IPC_LOST_SESSION = 2, /* a node stopped answering this operation
				  * (the transport gave up on it) */
};

/* What a CS_ERR_TIMEOUT completion's @peer names (its @detail). */
enum cs_ipc_timeout {
	CS_IPC_TIMEOUT_OTHER = 0, /* the operation's own deadline */
	/* ipc.match_deadline: @peer is the group rank of a trainer on this
	 * node that did not post the operation (-1: its local rank never
	 * joined), @epoch its local rank; the group is failed */
	CS_IPC_TIMEOUT_UNPOSTED = 1,
};
/* What a CS_ERR_EPOCH completion means (its @detail). */
enum cs_ipc_epoch {
	CS_IPC_EPOCH_OTHER = 0,
	/* an elastic group was re-formed in a new view before this
	 * operation, whose buffers were laid out for the old size (an
	 * all-gather or reduce-scatter): post it again for the new size
	 * (@size, @rank of the completion) */
	CS_IPC_EPOCH_RESIZED = 1,
	/* a node joined the cluster (the view grew) while the operation
	 * was pending: an elastic group re-forms at its next operation;
	 * any other group spanning nodes is failed (form a new one) */
	CS_IPC_EPOCH_GREW = 2,
};
/* Flags of a join (struct cs_ipc_msg.u.join.flags). */
#define CS_IPC_JOIN_ELASTIC 0x1u /* re-form on a new view, don't fail */
#define CS_IPC_JOIN_FLAGS CS_IPC_JOIN_ELASTIC

/* Completion, one 32-byte slot. */
struct cs_ipc_cqe {
	uint64_t user_id;
	int32_t status; /* 0 or negative errno / CS_ERR_* */
	uint16_t detail; /* enum cs_ipc_bad for CS_ERR_BAD_DESC,
			  * enum cs_ipc_lost for CS_ERR_PEER_LOST,
			  * enum cs_ipc_timeout for CS_ERR_TIMEOUT */
	uint16_t reserved;
	int32_t peer; /* the rank at fault (bad peer, lost), or -1 */
	/* an aux word (was reserved1, always 0 before): CS_IPC_LOST_NODE:
	 * the view that lost it; CS_IPC_TIMEOUT_UNPOSTED: the local rank
	 * that did not post; CS_IPC_BAD_GROUP_*: see there; else 0 */
	uint32_t epoch;
	/* elastic groups: the group's size and this trainer's rank in it
	 * when the operation completed (they change when the group is
	 * re-formed in a new view); 0 and 0 otherwise (was reserved2) */
	uint32_t size;
	int32_t rank;
};
static_assert(sizeof(struct cs_ipc_cqe) == 32, "cqe is 32 bytes");

/*
 * Start of the control segment. The rings live at the given offsets
 * (each CS_CACHE_LINE aligned, inside the segment, not overlapping).
 * cq_armed: the trainer sets it before sleeping on its eventfd; the
 * sidecar, after publishing completions, swaps it to 0 and writes the
 * eventfd if it was set.
 * sq_asleep: the mirror image. The sidecar sets it before it sleeps
 * without polling the submission ring (idle for ipc.quiet_after); the
 * trainer, after publishing a descriptor, swaps it to 0 and sends a
 * CS_IPC_MSG_WAKE if it was set. Both sides fence between their store and
 * their load, so either the sidecar sees the descriptor or the trainer
 * sees the flag.
 */
struct cs_ipc_ctrl {
	uint64_t magic;
	uint32_t version;
	uint32_t flags;
	uint64_t sq_off, sq_len;
	uint64_t cq_off, cq_len;
	alignas(CS_CACHE_LINE) _Atomic uint32_t cq_armed;
	alignas(CS_CACHE_LINE) _Atomic uint32_t sq_asleep;
};
static_assert(offsetof(struct cs_ipc_ctrl, cq_armed) == CS_CACHE_LINE,
	      "armed flag on its own line");
static_assert(offsetof(struct cs_ipc_ctrl, sq_asleep) == 2 * CS_CACHE_LINE,
	      "asleep flag on its own line");

enum cs_ipc_msg_type {
	CS_IPC_MSG_HELLO = 1, /* fds: control memfd, eventfd */
	CS_IPC_MSG_REG_SEG = 2, /* fd: a sealed memfd */
	CS_IPC_MSG_UNREG_SEG = 3,
	CS_IPC_MSG_JOIN = 4,
	CS_IPC_MSG_LEAVE = 5,
	CS_IPC_MSG_WAKE = 6, /* no body, no reply: see sq_asleep */
	CS_IPC_MSG_REG_DEV = 7, /* a device range (gpu/); fd: a VMM
				 * allocation's, for CS_IPC_DEV_POSIX_FD */
	/* parameter server (ipc_ps.c): open a table for one rank of a group
	 * (reply: the table handle), close it */
	CS_IPC_MSG_PS_CREATE = 24,
	CS_IPC_MSG_PS_DESTROY = 25,
	CS_IPC_MSG_REPLY = 100,
};

/* How a trainer shares a device allocation (struct cs_ipc_msg.u.dev). */
enum cs_ipc_dev_kind {
	CS_IPC_DEV_CUDA_IPC = 1, /* a CUDA IPC handle in @handle */
	CS_IPC_DEV_POSIX_FD = 2, /* a CUDA VMM allocation's POSIX fd, sent
				  * with the message */
};

/* One control message or reply; always exactly this size on the wire. */
struct cs_ipc_msg {
	uint32_t type;
	uint32_t version;
	union {
		struct {
			uint64_t ctrl_len;
			uint32_t pid;
			uint32_t pad;
		} hello;
		struct {
			uint64_t len;
		} reg;
		struct {
			uint32_t seg;
		} unreg;
		/* [off, off + len) of a device allocation (unregister it with
		 * CS_IPC_MSG_UNREG_SEG like any segment) */
		struct {
			uint64_t off;
			uint64_t len;
			uint32_t kind; /* enum cs_ipc_dev_kind */
			uint32_t pad; /* 0 */
			uint8_t uuid[16]; /* the device's */
			uint8_t handle[64]; /* cudaIpcMemHandle_t */
		} dev;
		struct {
			char name[CS_IPC_NAME_MAX];
			int32_t rank, size;
			int32_t local_rank, local_size;
			uint32_t flags; /* CS_IPC_JOIN_* (0 before) */
			/* the nodes (ring indexes of the view, bit i: node
			 * i) the group spans when not every node: a group
			 * made by cs_group_split(); all zero: every node */
			uint64_t nodes[CS_IPC_NODE_WORDS];
		} join;
		struct {
			uint32_t group;
		} leave;
		/* a parameter-server table for rank @group's member (every
		 * rank of the group opens it with the same fields) */
		struct cs_ipc_ps_create {
			uint32_t group; /* the trainer's group handle */
			uint32_t dim; /* values per row */
			uint64_t key_max; /* keys 0 .. key_max - 1 */
			uint8_t dtype; /* enum cs_dtype */
			uint8_t mode; /* enum cs_ps_mode */
			uint8_t opt; /* enum cs_ps_opt_kind */
			uint8_t init; /* enum cs_ps_init_kind */
			uint32_t staleness; /* ssp */
			float lr, momentum, beta1, beta2, eps, initial_acc;
			float scale; /* initializer */
			uint32_t nonce; /* the ranks agreed on it: names
					 * this incarnation of the table */
			uint64_t seed; /* initializer */
			uint64_t mem_budget; /* bytes a shard; 0: no SSD tier */
			char name[CS_IPC_PS_NAME_MAX];
		} ps_create;
		struct {
			uint32_t table; /* handle */
		} ps_destroy;
		struct {
			int32_t status; /* 0 or negative */
			uint32_t value; /* segment id, group handle; hello:
					 * this node's ring index */
			char text[CS_IPC_MSG_TEXT];
		} reply;
	} u;
};
static_assert(sizeof(struct cs_ipc_msg) == 112,
	      "the device registration fits the old message size");

#endif

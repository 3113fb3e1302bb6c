/* SPDX-License-Identifier: MIT */
/* libcollstack: the trainer API (connect, buffers, groups, collectives). */
#ifndef COLLSTACK_COLLSTACK_H
#define COLLSTACK_COLLSTACK_H

/*
 * A trainer connects to the sidecar on its node (collstackd), allocates
 * shared buffers that both processes map, joins a group and posts
 * asynchronous collectives on them. Posting writes a descriptor into a
 * shared-memory submission ring (no system call); the sidecar writes the
 * result straight into the trainer's buffer and a completion into the
 * completion ring. cs_test() polls, cs_wait() spins briefly and then
 * sleeps on an eventfd.
 *
 *	struct cs_client *c;
 *	struct cs_group *g;
 *	struct cs_buf *b;
 *	cs_req_t r;
 *
 *	cs_connect(NULL, &c);			// COLLSTACK_SOCKET or default
 *	cs_group_join_env(c, "dp", &g);		// torchrun / Slurm variables
 *	cs_buf_alloc(c, n * sizeof(float), &b);
 *	float *x = cs_buf_ptr(b);
 *	...
 *	cs_allreduce(g, x, x, n, CS_F32, CS_SUM, &r);
 *	if (cs_wait(c, r, -1))
 *		fprintf(stderr, "%s\n", cs_errmsg(c));
 *
 * Conventions: functions return 0 or a negative error code (-errno or
 * CS_ERR_*, see collstack/types.h and cs_strerror()); cs_errmsg() then
 * says what failed, for which rank and which operation. Objects come back
 * through out-parameters. A client may be used from several threads (calls
 * are serialised by a lock). Every posted request must be finished with
 * cs_test() returning something other than -EINPROGRESS, or cs_wait().
 *
 * Buffers passed to the collectives must lie inside buffers from
 * cs_buf_alloc() of the same client; the sidecar reads and writes them in
 * place (zero copy). Requests are matched across ranks in posting order
 * per group, but several of a group may run at once (the sidecar's
 * ipc.group_inflight) and finish in any order, each one to its own
 * request: a buffer one pending request writes must not be read or
 * written by another pending one (as with MPI's non-blocking
 * collectives).
 */

#include <stddef.h>
#include <stdint.h>

#include <collstack/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where cs_connect() looks when it is given no path. */
#define CS_SOCKET_ENV "COLLSTACK_SOCKET"
#define CS_DEFAULT_SOCKET "/run/collstack/collstack.sock"

struct cs_client;
struct cs_buf;
struct cs_group;

/* A posted operation. */
typedef uint64_t cs_req_t;

/**
 * cs_connect - connect to the local sidecar
 * @path: Unix socket path; NULL: $COLLSTACK_SOCKET, else CS_DEFAULT_SOCKET
 * @out: the client
 *
 * Sets up the shared submission and completion rings and the eventfd.
 *
 * Returns: 0 or a negative errno (-ENOENT, -ECONNREFUSED: no sidecar;
 * -EUSERS: every trainer slot of the sidecar is taken (ipc.max_trainers);
 * -ETIMEDOUT: our hello came after ipc.hello_deadline; -EACCES,
 * -ECONNRESET: refused by the sidecar).
 */
int cs_connect(const char *path, struct cs_client **out);

/**
 * cs_disconnect - close the connection and free everything
 * @c: client (may be NULL)
 *
 * Groups and buffers of @c are freed with it; pending operations are
 * cancelled by the sidecar.
 */
void cs_disconnect(struct cs_client *c);

/**
 * cs_errmsg - what the last failed call on @c was about
 * @c: client
 *
 * Returns: a message naming the rank, the operation and the cause; valid
 * until the next call on @c. "" if nothing failed yet.
 */
const char *cs_errmsg(const struct cs_client *c);

/**
 * cs_lost_node - which node's loss failed the last failed request
 * @c: client
 *
 * When a sidecar (a whole node) drops out of the group's view, every
 * operation of a group spanning it completes with CS_ERR_PEER_LOST, and
 * so does every later one on that group; cs_errmsg() names the node, the
 * view epoch, the group and the operation. The survivors then form a new
 * group (a new name, without the lost node's ranks).
 *
 * Returns: the lost node's rank (the sidecar's node.rank), or -1 if the
 * last failed request was not failed by a lost node.
 */
int cs_lost_node(const struct cs_client *c);

/**
 * cs_buf_alloc - allocate a buffer shared with the sidecar
 * @c: client
 * @len: bytes (rounded up to the page size)
 * @out: the buffer; cs_buf_ptr() gives its address
 *
 * Returns: 0 or a negative errno.
 */
int cs_buf_alloc(struct cs_client *c, size_t len, struct cs_buf **out);

/**
 * cs_buf_ptr - address of a shared buffer in this process
 * @b: buffer
 *
 * Returns: the start of the mapping.
 */
void *cs_buf_ptr(const struct cs_buf *b);

/**
 * cs_buf_len - usable length of a shared buffer
 * @b: buffer
 *
 * Returns: the length in bytes.
 */
size_t cs_buf_len(const struct cs_buf *b);

/**
 * cs_buf_free - unregister and unmap a shared buffer
 * @b: buffer (may be NULL)
 *
 * Returns: 0, or -EBUSY if operations naming it are still pending (the
 * buffer is then left alone).
 */
int cs_buf_free(struct cs_buf *b);

/* How a device allocation is shared with the sidecar (cs_buf_register_dev). */
enum cs_dev_kind {
	CS_DEV_CUDA_IPC = 1, /* cudaIpcGetMemHandle() of the allocation */
	CS_DEV_POSIX_FD = 2, /* a CUDA VMM allocation exported as a POSIX fd */
};

/* A device allocation of this process, described for the sidecar. */
struct cs_dev_mem {
	enum cs_dev_kind kind;
	int fd; /* CS_DEV_POSIX_FD: the allocation's fd (stays the caller's) */
	unsigned char handle[64]; /* CS_DEV_CUDA_IPC: the cudaIpcMemHandle_t */
	unsigned char uuid[16]; /* the device's (cudaDeviceProp.uuid) */
	void *base; /* the allocation's start in this process */
	size_t alloc_len; /* its size (cuMemGetAddressRange) */
};

/**
 * cs_buf_register_dev - share a range of a device allocation
 * @c: client
 * @m: the allocation
 * @off: start of the range inside it
 * @len: bytes
 * @out: the buffer: cs_buf_ptr() is @m->base + @off, a device address
 *
 * Pointers inside the range may then be passed to the collectives like
 * those of cs_buf_alloc() buffers. The sidecar maps the allocation once
 * (later ranges of it reuse the mapping), reads a range an operation
 * reads when the operation starts and writes its result back before the
 * completion: finish the kernels that write the send buffer before
 * posting (e.g. cudaStreamSynchronize). Free with cs_buf_free().
 *
 * Returns: 0, -EOPNOTSUPP (the sidecar has no GPU support), -ENODEV (the
 * allocation is on another device than the sidecar's), -ENOENT (the
 * sidecar cannot open it: freed, or not an allocation), -EINVAL (the range
 * runs past the allocation), or another negative errno; cs_errmsg() says
 * which.
 */
int cs_buf_register_dev(struct cs_client *c, const struct cs_dev_mem *m,
			size_t off, size_t len, struct cs_buf **out);

/**
 * cs_group_join - create or join a group
 * @c: client
 * @name: group name, shared by all its ranks (at most 63 bytes)
 * @rank: this trainer's rank, 0 .. @size-1
 * @size: ranks in the group, over all nodes
 * @local_rank: rank among the group's trainers on this node
 * @local_size: the group's trainers on this node
 * @out: the group
 *
 * Operations may be posted at once; they run when every local rank has
 * posted its matching operation (the k-th operation of each rank on a group
 * forms one collective). One that a local rank does not post within the
 * sidecar's ipc.match_deadline finishes with CS_ERR_TIMEOUT on the ranks
 * that did (cs_errmsg() names the missing rank; unlike cs_wait()'s own
 * timeout the request is finished) and the group fails. Before a group's
 * first operation across nodes the nodes check that they agree on its
 * membership; if not (another size, a rank on two nodes or on none) its
 * operations finish with CS_ERR_BAD_DESC naming the disagreeing node.
 *
 * A client holds at most one rank of a group, and is in at most the
 * sidecar's ipc.max_trainer_groups groups at once.
 *
 * Returns: 0, -EINVAL (bad numbers, or they disagree with the group),
 * -EEXIST (rank taken, or @c holds a rank of the group already),
 * CS_ERR_EPOCH (the group lost a rank), -ENOSPC (no room for a group on
 * the sidecar, or @c is in ipc.max_trainer_groups groups).
 */
int cs_group_join(struct cs_client *c, const char *name, int rank, int size,
		  int local_rank, int local_size, struct cs_group **out);

/* Flags of cs_group_join_ex(). */
#define CS_GROUP_ELASTIC 0x1u

/**
 * cs_group_join_ex - cs_group_join() with flags
 * @c: client
 * @name: as cs_group_join()
 * @rank: as cs_group_join()
 * @size: as cs_group_join()
 * @local_rank: as cs_group_join()
 * @local_size: as cs_group_join()
 * @flags: 0, or CS_GROUP_ELASTIC: when a node of the group is lost (the
 *	sidecars' view moves on, with the bootstrap or etcd rendezvous),
 *	the group is not failed: its operations pending then end with
 *	CS_ERR_PEER_LOST, and its next operation re-forms it on the nodes
 *	left (the lost node's ranks out, the others renumbered in their
 *	order) and runs there, without a new join. cs_group_size() and
 *	cs_group_rank() give the new size and rank once an operation of the
 *	re-formed group completed. An all-gather or reduce-scatter (buffers
 *	laid out for a size) that happens to be that first operation ends
 *	with CS_ERR_EPOCH instead ("re-formed ... post it again"). Every
 *	rank of the group must join it with the same flags. The nodes re-form
 *	the group at the same operation only if each node had posted as
 *	many of its operations when the view moved (a loss between steps).
 * @out: the group
 *
 * Returns: as cs_group_join(); -EINVAL also for unknown flags or flags
 * other than the group's.
 */
int cs_group_join_ex(struct cs_client *c, const char *name, int rank, int size,
		     int local_rank, int local_size, unsigned flags,
		     struct cs_group **out);

/**
 * cs_group_join_nodes - cs_group_join() of a group that spans only some of
 *	the nodes: their indexes (cs_node_index() of a trainer on each),
 *	@nnodes of them, this trainer's among them, every rank giving the
 *	same set. Its operations across nodes run over those nodes only.
 *	Not elastic; nodes below CS_IPC_SUBSET_NODES (128). @nnodes 0:
 *	cs_group_join().
 * Returns: as cs_group_join().
 */
int cs_group_join_nodes(struct cs_client *c, const char *name, int rank,
			int size, int local_rank, int local_size,
			const int *nodes, int nnodes, struct cs_group **out);

/* The index of @c's sidecar among the nodes (its ring index in the view
 * at connect: node i of node.peers with static peers). */
int cs_node_index(const struct cs_client *c);

/* cs_group_split()'s color of a rank that joins no new group. */
#define CS_SPLIT_NONE (-1)

/**
 * cs_group_split - make groups of some of @parent's ranks (MPI_Comm_split,
 *	ncclCommSplit); every rank of @parent calls it, in the same order
 *	as its other calls on @parent
 * @parent: the group (not elastic)
 * @color: the ranks that give the same color form one new group; >= 0,
 *	or CS_SPLIT_NONE: this rank joins none (*@out is NULL)
 * @key: orders the new group's ranks (ties: @parent's rank order)
 * @out: the new group
 *
 * The ranks exchange color, key and node with an all-gather on @parent
 * (it runs as @parent's next operation), then each joins its group,
 * named after @parent, the call and @color. A new group may span any
 * subset of the nodes: its operations across nodes run over those nodes
 * only (their own ring and sessions' group on the transport core), beside
 * other groups' operations. Such a group cannot be elastic and its nodes
 * must be among the first CS_IPC_SUBSET_NODES (128) of the view; the view
 * must not change between the connect and the split.
 *
 * Returns: 0, -EINVAL, an error of the all-gather, or as cs_group_join().
 */
int cs_group_split(struct cs_group *parent, int color, int key,
		   struct cs_group **out);

/**
 * cs_group_join_env - join a group using the launcher's variables
 * @c: client
 * @name: group name
 * @out: the group
 *
 * Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (torchrun) or else
 * SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and the first number of
 * SLURM_NTASKS_PER_NODE / SLURM_TASKS_PER_NODE. Without local variables,
 * the whole group is taken to be on this node. COLLSTACK_ELASTIC=1 joins
 * it elastic (CS_GROUP_ELASTIC).
 *
 * Returns: as cs_group_join(), or -ENOENT if no launcher variables are set.
 */
int cs_group_join_env(struct cs_client *c, const char *name,
		      struct cs_group **out);

/**
 * cs_group_rank - this trainer's rank in @g
 * @g: group
 *
 * Returns: the rank (an elastic group's changes when it is re-formed).
 */
int cs_group_rank(const struct cs_group *g);

/**
 * cs_group_size - ranks in @g
 * @g: group
 *
 * Returns: the size (an elastic group's changes when it is re-formed).
 */
int cs_group_size(const struct cs_group *g);

/**
 * cs_group_leave - leave a group and free @g
 * @g: group (may be NULL)
 *
 * The other ranks' later operations on the group fail with
 * CS_ERR_PEER_LOST.
 *
 * Returns: 0, or -EBUSY if operations on it are pending (@g stays valid).
 */
int cs_group_leave(struct cs_group *g);

/**
 * cs_allreduce - post recv[i] = op over all ranks of send[i]
 * @g: group
 * @send: @count elements inside a cs_buf
 * @recv: @count elements inside a cs_buf; may equal @send (in place)
 * @count: elements
 * @dtype: element type
 * @op: reduction
 * @req: out: the request to test or wait for
 *
 * Every rank gets bit-identical results.
 *
 * Returns: 0, -EFAULT (a pointer is outside this client's buffers),
 * -EAGAIN (all 256 request slots of this client hold unfinished requests:
 * test or wait for some; one request left unfinished for long does not
 * stop the others), -ENOTCONN (sidecar gone).
 */
int cs_allreduce(struct cs_group *g, const void *send, void *recv, size_t count,
		 enum cs_dtype dtype, enum cs_redop op, cs_req_t *req);

/**
 * cs_reduce_scatter - post a reduction whose block r goes to rank r
 * @g: group
 * @send: size * @count elements
 * @recv: @count elements: block rank() of the reduction; may be inside
 *        @send at block rank() (in place)
 * @count: elements per rank
 * @dtype: element type
 * @op: reduction
 * @req: out: the request
 *
 * Returns: as cs_allreduce().
 */
int cs_reduce_scatter(struct cs_group *g, const void *send, void *recv,
		      size_t count, enum cs_dtype dtype, enum cs_redop op,
		      cs_req_t *req);

/**
 * cs_all_gather - post: every rank gets every rank's block, in rank order
 * @g: group
 * @send: @count elements
 * @recv: size * @count elements; @send may be its block rank() (in place)
 * @count: elements per rank
 * @dtype: element type
 * @req: out: the request
 *
 * Returns: as cs_allreduce().
 */
int cs_all_gather(struct cs_group *g, const void *send, void *recv,
		  size_t count, enum cs_dtype dtype, cs_req_t *req);

/**
 * cs_broadcast - post: @buf of rank @root is copied to every rank's @buf
 * @g: group
 * @buf: @count elements inside a cs_buf
 * @count: elements
 * @dtype: element type
 * @root: the source rank
 * @req: out: the request
 *
 * Returns: as cs_allreduce().
 */
int cs_broadcast(struct cs_group *g, void *buf, size_t count,
		 enum cs_dtype dtype, int root, cs_req_t *req);

/**
 * cs_alltoall - post: block j of every rank's @send goes to rank j, where
 * it lands as block i (i: the sender's rank) of @recv
 * @g: group
 * @send: size * @count elements
 * @recv: size * @count elements; must not overlap @send
 * @count: elements per block (the same to every rank)
 * @dtype: element type
 * @req: out: the request
 *
 * Across nodes the ranks of one node exchange through the sidecar, and
 * each pair of nodes carries one aggregated flow (two-level: a block
 * crosses the network once). That needs the ranks of every node numbered
 * contiguously in local-rank order (node k: ranks k x L to k x L + L - 1,
 * what torchrun gives), the same number L on every node; other layouts
 * fail with CS_ERR_BAD_DESC (detail: CS_IPC_BAD_LAYOUT).
 *
 * Returns: as cs_allreduce().
 */
int cs_alltoall(struct cs_group *g, const void *send, void *recv, size_t count,
		enum cs_dtype dtype, cs_req_t *req);

/**
 * cs_send - post: send @count elements of @buf to rank @dst of @g
 * @g: group
 * @buf: the data (read once, when the sidecar takes the request: the
 *	buffer may be reused as soon as cs_send() returns)
 * @count: elements (0: an empty message)
 * @dtype: element type (only its size matters: bytes are moved)
 * @dst: the receiving rank, not this one
 * @tag: matched with the receive's tag (below CS_TAG_RESERVED)
 * @req: out: the request
 *
 * Not collective: only @dst takes part, with cs_recv(). The k-th send of
 * this rank to @dst with @tag meets the k-th receive of @dst from this
 * rank with @tag (messages between two ranks with one tag arrive in
 * order), on the same node or across nodes, and both must be the same
 * size in bytes (else both fail with CS_ERR_BAD_DESC, detail
 * CS_IPC_BAD_MISMATCH). The send completes once the receive has every
 * byte. Across nodes the ranks must be laid out as for cs_alltoall() (node
 * k holds ranks k x L .. k x L + L - 1); a group on one node may be any.
 * A receive that never comes ends the send with CS_ERR_TIMEOUT after the
 * sidecar's coll.deadline; a receiving trainer that dies ends it with
 * CS_ERR_PEER_LOST naming its rank. Carried by collstackd (svc_p2p.c);
 * other sidecars refuse it (CS_ERR_BAD_DESC, CS_IPC_BAD_OP).
 *
 * Returns: as cs_allreduce().
 */
int cs_send(struct cs_group *g, const void *buf, size_t count,
	    enum cs_dtype dtype, int dst, unsigned tag, cs_req_t *req);

/* Tags from here up are the library's own (cs_gather(), cs_scatter(),
 * cs_reduce()):
 * cs_send() and cs_recv() refuse them (-EINVAL). */
#define CS_TAG_RESERVED 0xffff0000u

/**
 * cs_recv - post: receive @count elements from rank @src of @g into @buf
 * @g: group
 * @buf: room for the data (written when the request completes)
 * @count: elements; the matching send's size in bytes must be the same
 * @dtype: element type
 * @src: the sending rank, not this one
 * @tag: the matching send's tag
 * @req: out: the request
 *
 * See cs_send(). Returns: as cs_allreduce().
 */
int cs_recv(struct cs_group *g, void *buf, size_t count, enum cs_dtype dtype,
	    int src, unsigned tag, cs_req_t *req);

/**
 * cs_alltoallv - post: @sendcounts[j] elements at @sdispls[j] of every
 * rank's @send go to rank j, where they land at @rdispls[i] of its @recv
 * (i: the sender's rank); MPI_Alltoallv's meaning
 * @g: group
 * @send: element 0 of the send buffer, inside a cs_buf
 * @sendcounts: [size]: elements for each rank (0: nothing)
 * @sdispls: [size]: where each rank's block starts in @send, in elements
 * @recv: element 0 of the receive buffer, inside a cs_buf; no block of it
 *        may overlap the span of @send's blocks
 * @recvcounts: [size]: elements from each rank; @recvcounts[i] of rank j
 *        must equal @sendcounts[j] of rank i
 * @rdispls: [size]: where each rank's block goes in @recv, in elements
 * @dtype: element type
 * @req: out: the request
 *
 * The four arrays are copied before this returns (into a table in shared
 * memory the sidecar reads; the group's first call allocates it, a cs_buf
 * of 256 x 32 x size bytes, one table per request slot, freed at
 * cs_group_leave()). The sidecar checks every block with a non-zero
 * count against the segment of @send or @recv: one outside it fails the
 * operation with
 * CS_ERR_BAD_DESC (CS_IPC_BAD_SEND_RANGE / _RECV_RANGE) on this rank and
 * CS_IPC_BAD_PEER on the others. Counts that do not add up across the
 * ranks fail it with CS_ERR_BAD_DESC (CS_IPC_BAD_A2AV_COUNTS, naming the
 * first pair in rank order) on every rank; nothing is sent then. Across
 * nodes it goes as cs_alltoall() does (the same layout rule, two-level),
 * after one exchange of the counts (every node checks them all): an
 * allreduce of 16 x size x size bytes. Received blocks that overlap each
 * other leave those elements undefined.
 *
 * Returns: as cs_allreduce(), and -EINVAL (a NULL array, or a group
 * without a size yet).
 */
int cs_alltoallv(struct cs_group *g, const void *send, const size_t *sendcounts,
		 const size_t *sdispls, void *recv, const size_t *recvcounts,
		 const size_t *rdispls, enum cs_dtype dtype, cs_req_t *req);

/**
 * cs_reduce - post: @recv of rank @root = @op over ranks of @send
 * @g: group
 * @send: @count elements
 * @recv: @count elements on @root (may be @send: in place); ignored on
 *	the other ranks (may be NULL)
 * @count: elements
 * @dtype: element type
 * @op: reduction
 * @root: the rank that gets the result
 * @req: out: the request
 *
 * Collective. With count = size x b + t (t < size), carried in two
 * stages (Rabenseifner's reduce): a cs_reduce_scatter() of the first
 * size x b elements (block i, b elements, to rank i: the root's straight
 * into its @recv) and, beside it, a cs_allreduce() of the t last ones;
 * once those finished well, each other rank sends its block to @root
 * (cs_send(), tag CS_TAG_RESERVED + 3) and @root receives each into
 * place. Each rank other than @root receives about (size - 1) / size of
 * the data (the reduce-scatter's) and sends its block, where an
 * allreduce would bring it the result too; @root receives about twice
 * that. The second stage is posted by cs_test() / cs_wait() of the
 * request (no thread); the root's request holds size - 1 of the
 * client's request slots then (fails with -EAGAIN, and the others'
 * sends at coll.deadline, if fewer are free), another rank's one. A
 * rank other than @root reduces into a buffer of the group's (one per
 * reduction in flight, kept for the next) and leaves @send as it was.
 *
 * Carried as a cs_allreduce() whose result only @root keeps instead,
 * where that costs less or the two stages cannot run: a group on one
 * node (the allreduce is a reduction in shared memory there, no
 * network; point to point copies every block through a message flow),
 * at most 64 KiB (CS_REDUCE_ALLREDUCE_MAX in client.c: where the two
 * stages' extra round trips cost more than the bytes they save, as
 * measured on 4 nodes), fewer elements than ranks, an elastic group, a
 * group across nodes made with a node set (cs_group_join_nodes(),
 * cs_group_split()), and ranks not numbered as
 * cs_send() needs across nodes (node k holds ranks k x L .. k x L + L -
 * 1, local rank = rank mod L; decided from this rank's own numbering:
 * where the ranks of one group decide differently they post different
 * operations, a case not tested). COLLSTACK_REDUCE=allreduce in the
 * environment at cs_connect() makes every cs_reduce() an allreduce,
 * =scatter-gather takes the two stages wherever they can run (one node
 * and small sizes too); every rank of a group must see the same.
 *
 * Results: exact for integers and min / max; for floating-point sums
 * and products the order of the reduction is the reduce-scatter's (the
 * allreduce's for the tail), which need not round like cs_allreduce()
 * of the whole buffer. A failure
 * of either stage fails the request with that stage's error (a lost
 * rank: CS_ERR_PEER_LOST; a rank whose first stage failed sends
 * nothing: the root's receive ends at coll.deadline).
 *
 * Returns: as cs_allreduce(); -EFAULT for a NULL @recv on @root;
 * -EINVAL for an unknown @dtype or @root out of range (nothing posted).
 */
int cs_reduce(struct cs_group *g, const void *send, void *recv, size_t count,
	      enum cs_dtype dtype, enum cs_redop op, int root, cs_req_t *req);

/**
 * cs_gather - post: block i (@count elements) of @recv on rank @root =
 * rank i's @send
 * @g: group
 * @send: @count elements (in a cs_buf, except on @root)
 * @recv: size x @count elements on @root (in a cs_buf); ignored elsewhere
 * @count: elements per rank
 * @dtype: element type
 * @root: the rank that gathers
 * @req: out: the request
 *
 * Collective. Carried as point-to-point messages (cs_send() to @root;
 * @root posts one receive per rank and copies its own block now): @root
 * receives exactly (size - 1) x @count elements. The root's request is
 * one for all of them (size - 1 of the client's request slots stay in
 * use until it finished: -EAGAIN when fewer are free). Tags from
 * CS_TAG_RESERVED up carry these messages.
 *
 * Returns: as cs_allreduce().
 */
int cs_gather(struct cs_group *g, const void *send, void *recv, size_t count,
	      enum cs_dtype dtype, int root, cs_req_t *req);

/**
 * cs_scatter - post: rank i's @recv = block i (@count elements) of
 * @send on rank @root
 * @g: group
 * @send: size x @count elements on @root (in a cs_buf); ignored elsewhere
 * @recv: @count elements (in a cs_buf, except on @root)
 * @count: elements per rank
 * @dtype: element type
 * @root: the rank that scatters
 * @req: out: the request
 *
 * Collective; the mirror of cs_gather() (@root sends each rank its block,
 * one request for all of them).
 *
 * Returns: as cs_allreduce().
 */
int cs_scatter(struct cs_group *g, const void *send, void *recv, size_t count,
	       enum cs_dtype dtype, int root, cs_req_t *req);

/**
 * cs_barrier - post a barrier: completes once every rank has posted it
 * @g: group
 * @req: out: the request
 *
 * Returns: as cs_allreduce().
 */
int cs_barrier(struct cs_group *g, cs_req_t *req);

/**
 * cs_test - has a request finished?
 * @c: client
 * @req: a request posted on @c and not finished yet
 *
 * Never blocks and makes no system call. Once it returns something other
 * than -EINPROGRESS the request is finished and @req may not be used again.
 *
 * Returns: -EINPROGRESS, 0 (done), the operation's error (CS_ERR_BAD_DESC,
 * CS_ERR_PEER_LOST, ...; see cs_errmsg()), or -EINVAL for an unknown @req.
 */
int cs_test(struct cs_client *c, cs_req_t req);

/**
 * cs_wait - wait for a request to finish
 * @c: client
 * @req: request
 * @timeout_ns: nanoseconds to wait at most; negative: no limit
 *
 * Spins briefly, then sleeps on the eventfd: at most COLLSTACK_SPIN_POLLS
 * polls (default 2000) and COLLSTACK_SPIN_US microseconds (default 50),
 * read from the environment at cs_connect(); while spinning it yields the
 * CPU every COLLSTACK_SPIN_YIELD polls (default 1) after the first
 * COLLSTACK_SPIN_FREE (default 32), or from the first poll for 8 waits
 * after one that took longer than 2 microseconds (its answer needed other
 * processes, which need the CPU).
 *
 * Returns: as cs_test(), or CS_ERR_TIMEOUT (the request stays pending),
 * or -ENOTCONN if the sidecar went away.
 */
int cs_wait(struct cs_client *c, cs_req_t req, int64_t timeout_ns);

/**
 * cs_event_fd - the eventfd the sidecar signals completions on
 * @c: client
 *
 * For an event loop: call cs_event_arm(), and if it returns 0, wait for
 * the fd to be readable, then call cs_test() on pending requests. Reading
 * the fd is optional (cs_event_arm() drains it).
 *
 * Returns: the fd (owned by @c).
 */
int cs_event_fd(const struct cs_client *c);

/**
 * cs_event_arm - ask for the eventfd to be signalled on the next completion
 * @c: client
 *
 * Returns: 0 (armed: safe to sleep on cs_event_fd()), or 1 if completions
 * are already waiting (do not sleep).
 */
int cs_event_arm(struct cs_client *c);

#ifdef __cplusplus
}
#endif
#endif

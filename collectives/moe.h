/* SPDX-License-Identifier: MIT */
/*
 * MoE dispatch and combine on the all-to-all engine (alltoall.h).
 *
 * dispatch: every token (a row of H f32 values) travels once to every
 * rank that holds one of its top-k experts (not once per expert: DeepEP's
 * rule), as a row [token, slot mask, the k expert ids, H values]. The
 * receivers do not know how many rows come: the counts travel in the same
 * operation (CS_A2A_F_RECV_DYNAMIC). Each rank then holds, per local
 * expert (in expert order), its rows in (source rank, token) order, with
 * the source rank, token and top-k slot of each.
 *
 * combine: each rank returns its experts' outputs, one row [token, slot,
 * H values] per (token, slot), to the token's owner (counts known to both
 * ends: an ordinary all-to-all-v), which sums w[t][j] * y[t][j] over
 * j = 0 .. k-1 in that fixed order: the result is bit-identical across
 * runs, arrival orders and algorithms.
 *
 * Top-k index -1 means "no expert" (the slot is skipped); any other index
 * outside [0, E), a repeated expert in one token's top-k, or an expert
 * mapped to no rank is refused (CS_ERR_BAD_DESC) before anything is sent.
 */
#ifndef CS_COLLECTIVES_MOE_H
#define CS_COLLECTIVES_MOE_H

#include <stdint.h>

#include "collectives/alltoall.h"

#define CS_MOE_MAX_TOPK 32

/*
 * Flag of struct cs_moe_cfg: a token's dispatch row crosses the network
 * once per destination node, not once per destination rank (DeepEP's
 * rule), when ranks_per_node > 1. The row goes to one rank of that node
 * (spread evenly over its ranks, so over its NICs) with the slots of every
 * expert of the node; each rank of the node then takes its own slots from
 * the rows every rank of its node received (cs_moe_dispatch_finish_node:
 * the node's receive buffers are shared memory). What each rank gets,
 * and in which order, is unchanged.
 */
#define CS_MOE_F_NODE_ROWS 0x100u
/*
 * With CS_MOE_F_NODE_ROWS: combine returns one row per (token, node), not
 * one per (token, slot). The rank of the node that received a token's
 * dispatch row (which then carries the token's K weights) sums
 * w[t][j] * y[t][j] over the node's slots j in slot order, from the
 * outputs of every rank of the node (cs_moe_combine_params_node(): shared
 * memory), and the owner sums those partial sums in node order. A fixed
 * order again (the same bits run after run, whatever the arrival order),
 * but a different one from the slot-order sum: the bits differ from it
 * (DeepEP's combine reduces inside the node the same way).
 */
#define CS_MOE_F_NODE_SUM 0x200u
/*
 * Instead of CS_MOE_F_NODE_ROWS | CS_MOE_F_NODE_SUM, for ranks that do not
 * share memory (the trainers' path, client/moe.c): dispatch rows go once
 * per destination rank as without the flags, carrying the token's K
 * weights; combine goes in two exchanges: (1) the gather: each rank sends
 * its outputs [source, token, slot, y[H]] to the token's leader on its
 * node (the rank holding the token's lowest slot there), an exchange
 * inside the node only (cs_moe_gather_params()); (2) the leader sums
 * w[t][j] * y[t][j] over the node's slots j in slot order and returns one
 * row per (token, node) (cs_moe_combine_params_gathered()), the owner sums
 * them in node order. The same bits as CS_MOE_F_NODE_SUM's (the same
 * grouping and order, every node's part summed by one rank), fewer rows
 * across nodes than the per-slot combine; ranks_per_node >= 1 (1: a
 * rank's slots summed by that rank).
 */
#define CS_MOE_F_NODE_SUM_GATHER 0x400u
/*
 * CS_MOE_F_NODE_ROWS for ranks that do not share memory (the trainers'
 * path, client/moe.c; alone or with CS_MOE_F_NODE_SUM_GATHER, not with the
 * first two flags): dispatch is two exchanges. (1) A token's row goes once
 * to each node holding one of its experts, to its *leader* there (the rank
 * holding the token's lowest slot on that node, the gather's leader), with
 * the node's slots in its mask. (2) The forward, inside the node only
 * (cs_moe_forward_params()): the leader keeps its own slots and sends each
 * other rank of its node with a slot of the token the row [source, token,
 * that rank's slots, ids, x (, w)]. cs_moe_dispatch_finish_fwd() then lays
 * out what came as cs_moe_dispatch_finish_at() lays out rank rows: what
 * each rank gets, and in which order, is what it gets without the flag,
 * and the combine (per slot, or gathered) is unchanged. ranks_per_node
 * >= 1 (1: nothing to forward).
 */
#define CS_MOE_F_NODE_ROWS_FWD 0x800u
/*
 * Rows without their values (the simulator's synthetic payloads, `sim moe
 * --payload synth`): the layer runs as with hidden 0 (rows of headers
 * only: token, mask, ids (, weights); combine rows token, slot or mask; no
 * expert inputs or outputs are stored or summed) and the caller sets
 * struct cs_a2a_virt on both operations' parameters, so that the values
 * travel as virtual tails (alltoall.h) at their place in the row:
 * dispatch at byte 4 (2 + K), combine at byte 8. x may point anywhere
 * (it is never read), cs_moe_combine_finish() writes nothing.
 */
#define CS_MOE_F_NO_VALUES 0x1000u

/**
 * struct cs_moe_cfg - one rank's MoE layer
 * @nranks, @rank, @ranks_per_node: as struct cs_a2a_params (G)
 * @tokens: T, this rank's tokens
 * @max_tokens: the most tokens any rank has (bounds the receive room)
 * @hidden: H values per token
 * @topk: K
 * @experts: E
 * @expert_rank: [E] the rank holding each expert
 * @mtu_payload, @flags (CS_A2A_F_NO_BUCKET, CS_A2A_F_RAIL,
 *	CS_MOE_F_NODE_ROWS, CS_MOE_F_NODE_SUM), @group, @epoch
 * @op_dispatch, @op_combine: the two operations' ids
 */
struct cs_moe_cfg {
	uint32_t nranks, rank, ranks_per_node;
	uint32_t tokens, max_tokens, hidden, topk, experts;
	const uint32_t *expert_rank;
	uint32_t mtu_payload, flags, group, epoch;
	uint32_t op_dispatch, op_combine;
};

struct cs_moe;

/**
 * cs_moe_create - validate a rank's tokens and build its dispatch
 * @cfg: the layer (copied; expert_rank is copied)
 * @x: [tokens][hidden] inputs
 * @idx: [tokens][topk] expert indices (-1: none)
 * @w: [tokens][topk] weights
 * @out: the layer's state for this rank (x, idx and w are read here and
 *	in cs_moe_combine_finish(): keep them)
 * Returns: 0, CS_ERR_BAD_DESC, -EINVAL, -ENOMEM.
 */
int cs_moe_create(const struct cs_moe_cfg *cfg, const float *x,
		  const int32_t *idx, const float *w, struct cs_moe **out);

void cs_moe_free(struct cs_moe *m);

/**
 * cs_moe_dispatch_params - the all-to-all of the dispatch (RECV_DYNAMIC):
 * build a struct cs_a2a_node from the node's ranks' params, an engine,
 * post it with op id cfg->op_dispatch
 */
void cs_moe_dispatch_params(struct cs_moe *m, struct cs_a2a_params *p);

/**
 * cs_moe_dispatch_finish_at - the same on rows received elsewhere (the
 * trainer API, client/moe.c): @recv (NULL: the engine's own receive
 * buffer) holds @counts[s] rows from rank s at row @displs[s]
 */
/**
 * cs_moe_dispatch_finish - the dispatch engine @a completed: lay out the
 * rows per local expert
 * Returns: 0, CS_ERR_PROTO (a row naming an expert not here, a bad
 *	token), -ENOMEM.
 */
int cs_moe_dispatch_finish_at(struct cs_moe *m, const void *recv,
			      const uint64_t *counts, const uint64_t *displs);

/**
 * cs_moe_dispatch_finish_node - the same with CS_MOE_F_NODE_ROWS: the
 * rows every rank of the node received: local rank j's in @recv[j] (its
 * cs_moe_dispatch_recv() or shared copy), @counts[j][s] rows from rank s
 * at row @displs[j][s]
 * @nlocal: ranks_per_node (1 without the flag)
 * Returns: as cs_moe_dispatch_finish_at(); -EINVAL for a wrong @nlocal.
 *	cs_moe_dispatch_finish_at() refuses a layer with the flag.
 * With CS_MOE_F_NODE_SUM this rank's own rows (@recv[rank % G]) are
 * read again by cs_moe_combine_params_node(): keep them till then.
 */
int cs_moe_dispatch_finish_node(struct cs_moe *m, uint32_t nlocal,
				const void *const *recv,
				const uint64_t *const *counts,
				const uint64_t *const *displs);

/**
 * cs_moe_forward_params - with CS_MOE_F_NODE_ROWS_FWD, the first exchange
 * completed: @recv holds @rc[s] rows from rank s at row @rd[s]; check them
 * (each this node's row of a token led here, each source's in token order,
 * once), keep this rank's slots, and describe the forward exchange (rows
 * of cs_moe_forward_row() bytes, counts in rows, only to ranks of this
 * node; receive counts dynamic, room max_tokens x nranks rows). @recv may
 * be reused once this returns.
 * Returns: 0, -EINVAL (no flag, called twice), -ENOMEM, CS_ERR_PROTO.
 */
int cs_moe_forward_params(struct cs_moe *m, const void *recv,
			  const uint64_t *rc, const uint64_t *rd,
			  struct cs_a2a_params *p);

/* The forward's row: [source, the dispatch row] (bytes). */
size_t cs_moe_forward_row(const struct cs_moe *m);

/**
 * cs_moe_dispatch_finish_fwd - the forward completed: @frecv holds @rc[d]
 * rows from rank d at row @rd[d]; with the rows kept by
 * cs_moe_forward_params(), lay out this rank's rows per local expert as
 * cs_moe_dispatch_finish_at() does
 * Returns: 0, -EINVAL (no flag, no forward_params, called twice), -ENOMEM,
 *	CS_ERR_PROTO (a row from another node or not from its leader, a
 *	token twice, a slot not here).
 */
int cs_moe_dispatch_finish_fwd(struct cs_moe *m, const void *frecv,
			       const uint64_t *rc, const uint64_t *rd);

/* The dispatch's receive buffer (cs_moe_dispatch_params()'s recvbuf). */
const void *cs_moe_dispatch_recv(const struct cs_moe *m);

static inline int cs_moe_dispatch_finish(struct cs_moe *m,
					 const struct cs_a2a *a)
{
	const uint64_t *rc, *rd;

	cs_a2a_recv_layout(a, &rc, &rd);
	return cs_moe_dispatch_finish_at(m, NULL, rc, rd);
}

/**
 * cs_moe_local - what dispatch delivered for local expert number @i
 * (local experts in increasing expert id)
 * @expert: out: its id
 * @count: out: rows
 * @rows: out: [count][hidden]
 * @src_rank, @src_token, @src_slot: out: [count] where each row came from
 * Returns: 0 or -ENOENT (no such local expert).
 */
int cs_moe_local(const struct cs_moe *m, uint32_t i, uint32_t *expert,
		 uint32_t *count, const float **rows, const uint32_t **src_rank,
		 const uint32_t **src_token, const uint32_t **src_slot);

/**
 * cs_moe_expert_out - where local expert @i's outputs go: [count][hidden]
 * (write them before cs_moe_combine_params())
 */
float *cs_moe_expert_out(struct cs_moe *m, uint32_t i);

/**
 * cs_moe_combine_params - pack the outputs and describe the combine
 * all-to-all-v (post with op id cfg->op_combine)
 */
void cs_moe_combine_params(struct cs_moe *m, struct cs_a2a_params *p);

/**
 * cs_moe_combine_params_node - cs_moe_combine_params() with
 * CS_MOE_F_NODE_SUM: the node's partial sums of the rows this rank
 * received in dispatch
 * @node: the layers of the node's ranks, in local order (@m among them),
 *	every one with its dispatch finished and its expert outputs written
 * @nlocal: ranks_per_node
 * Returns: 0, -EINVAL (no CS_MOE_F_NODE_SUM, a wrong node, a dispatch not
 *	finished, called twice), -ENOMEM, CS_ERR_PROTO (an output missing).
 */
int cs_moe_combine_params_node(struct cs_moe *m, struct cs_moe *const *node,
			       uint32_t nlocal, struct cs_a2a_params *p);

/**
 * cs_moe_gather_params - with CS_MOE_F_NODE_SUM_GATHER, after the
 * dispatch finished and the expert outputs are written: the gather
 * exchange (counts known at both ends, only inside the node; rows of
 * cs_moe_gather_row() bytes, counts in rows)
 * Returns: 0, -EINVAL (no flag, dispatch not finished, called twice),
 *	-ENOMEM.
 */
int cs_moe_gather_params(struct cs_moe *m, struct cs_a2a_params *p);

/* The gather's row: [source, token, slot, y[H]] (bytes). */
size_t cs_moe_gather_row(const struct cs_moe *m);

/* After the dispatch finished, with CS_MOE_F_NODE_SUM_GATHER: the rows the
 * combine after the gather will send (the tokens led here) and receive
 * (one per (token, node)). */
void cs_moe_gather_sizes(const struct cs_moe *m, uint64_t *csend_rows,
			 uint64_t *crecv_rows);

/**
 * cs_moe_combine_params_gathered - the gather completed: @grecv holds
 * @rc[d] rows from rank d at row @rd[d]; sum the node's slots of every
 * token this rank leads and describe the combine (as
 * cs_moe_combine_params(); cs_moe_combine_finish() then sums the nodes)
 * Returns: 0, -EINVAL (no gather posted), -ENOMEM, CS_ERR_PROTO (rows
 *	not the ones expected: a count, a token not led here, a slot twice).
 */
int cs_moe_combine_params_gathered(struct cs_moe *m, const void *grecv,
				   const uint64_t *rc, const uint64_t *rd,
				   struct cs_a2a_params *p);

/**
 * cs_moe_combine_finish - the combine completed: @out[t] = sum over
 * j = 0 .. k-1 of w[t][j] * y[t][j], in that order (CS_MOE_F_NODE_SUM:
 * the sum over nodes, in node order, of each node's sum in slot order)
 * @out: [tokens][hidden]
 * Returns: 0 or CS_ERR_PROTO (a row for a (token, slot) that was not
 *	sent to that rank, or came twice).
 */
int cs_moe_combine_finish(struct cs_moe *m, float *out);

/* The same on rows received elsewhere: @recv laid out as the params'
 * recvcounts and rdispls say (client/moe.c). */
int cs_moe_combine_finish_at(struct cs_moe *m, const void *recv, float *out);

/* The combine's counts and displacements (rows), after
 * cs_moe_combine_params(), in @p (only those four fields). */
void cs_moe_combine_layout(const struct cs_moe *m, struct cs_a2a_params *p);

/* The packed rows and their sizes (the trainer API copies them into its
 * shared buffers): the dispatch's after cs_moe_create(), the combine's
 * after cs_moe_combine_params(). */
void cs_moe_wire(const struct cs_moe *m, size_t *drow, size_t *crow,
		 const void **dsend, uint64_t *dsend_rows, const void **csend,
		 uint64_t *csend_rows, uint64_t *crecv_rows);

#endif

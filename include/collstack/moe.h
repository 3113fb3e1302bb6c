/* SPDX-License-Identifier: MIT */
/*
 * Mixture-of-experts dispatch and combine for trainers, through the node's
 * sidecar (libcollstack; docs/alltoall.md, "Trainers' MoE").
 *
 *	struct cs_moe_layer_cfg cfg = { .tokens = T, .hidden = H,
 *		.topk = K, .experts = E, .experts_per_rank = E / size };
 *	cs_moe_layer_create(g, &cfg, &l);
 *	cs_moe_dispatch(l, t, x, idx, w, &r);	// t <= T tokens of this rank
 *	cs_wait(c, r, -1);
 *	for (i = 0; i < cs_moe_local_experts(l); i++) {
 *		cs_moe_rows(l, i, &e, &n, &rows, &src, &tok, &slot);
 *		... expert e on n rows of H, out into cs_moe_layer_out(l, i)
 *	}
 *	cs_moe_combine(l, NULL, out, &r);	// out: t x H
 *	cs_wait(c, r, -1);
 *
 * float32 values only. Collective: every rank of the group calls each
 * function in the same order.
 *
 * dispatch sends every token once to every rank holding one of its top-k
 * experts; the receivers do not know how many rows come: the counts travel
 * in the same operation as the rows (CS_IPC_OP_ALLTOALLV_DYN), there is no
 * separate count exchange to post. combine returns every expert output to
 * its token's owner, which sums w[t][j] * y[t][j] over j = 0 .. k-1 in that
 * order: the same bits whatever the arrival order, run after run.
 *
 * Top-k index -1 means "no expert" (the slot is skipped). Bad input on any
 * rank (an index >= E or below -1, one expert twice in a token's top-k,
 * more tokens than cfg.tokens, a NULL buffer) fails the dispatch with
 * CS_ERR_BAD_DESC on every rank of the group (cs_errmsg(): "another
 * rank posted a bad call: rank R", R the rank that had it), nothing sent.
 * With CS_MOE_LAYER_NODE_SUM (cfg.flags, the same on every rank: a rank
 * whose layer differs fails the dispatch on every rank, CS_ERR_BAD_DESC,
 * "rank R posted another kind of exchange than rank 0") combine sends one
 * row per (token, node) across the network instead of one per (token,
 * expert): the outputs of a node's experts are first gathered inside the
 * node to one rank (the one holding the token's lowest slot there), which
 * sums w[t][j] * y[t][j] over the node's slots in slot order; the owner
 * then sums those in node order. A fixed order, but not the slot order's
 * bits (docs/alltoall.md, "Trainers' MoE"). The weights travel with the
 * dispatch (4 K bytes more per row): cs_moe_set_weights() is refused.
 * With CS_MOE_LAYER_NODE_ROWS (the same on every rank, checked the same
 * way) dispatch sends a token's row across the network once per node
 * holding one of its experts instead of once per rank: to the node's rank
 * holding the token's lowest slot there, which forwards it inside the
 * node to the node's other ranks with a slot of the token (a second
 * exchange in the same request). What each rank gets, and the combine's
 * bits, are those without the flag; it may be set with or without
 * CS_MOE_LAYER_NODE_SUM.
 * Across nodes the group must be laid out as for cs_alltoall(). The
 * group's size and this rank are read at cs_moe_layer_create(): an elastic
 * group that re-formed at another size needs a new layer.
 */
#ifndef COLLSTACK_MOE_H
#define COLLSTACK_MOE_H

#include <stdint.h>

#include "collstack/collstack.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * struct cs_moe_layer_cfg - an MoE layer, the same on every rank
 * @tokens: the most tokens a rank dispatches at once
 * @hidden: H, values per token (float32)
 * @topk: K, experts per token (1 .. 32)
 * @experts: E
 * @expert_rank: [E] the rank holding each expert, or NULL: rank r holds
 *	experts r P .. r P + P - 1 (P = @experts_per_rank)
 * @experts_per_rank: P (with @expert_rank NULL)
 * @flags: 0, CS_MOE_LAYER_NODE_SUM, CS_MOE_LAYER_NODE_ROWS or both
 */
struct cs_moe_layer_cfg {
	uint32_t tokens, hidden, topk, experts;
	const uint32_t *expert_rank;
	uint32_t experts_per_rank;
	uint32_t flags;
};

/* cfg.flags: combine sums each node's slots on that node (see above). */
#define CS_MOE_LAYER_NODE_SUM 1u
/* cfg.flags: dispatch crosses to each node once per token (see above). */
#define CS_MOE_LAYER_NODE_ROWS 2u

struct cs_moe_layer;

/**
 * cs_moe_layer_create - the layer of this rank of @g
 * Returns: 0, -EINVAL (a bad cfg: refused on this rank only, nothing is
 *	posted; an unknown flag; NODE_SUM or NODE_ROWS on a group whose
 *	size is not a multiple of its trainers on this node), -ENOMEM, or
 *cs_buf_alloc()'s error.
 */
int cs_moe_layer_create(struct cs_group *g, const struct cs_moe_layer_cfg *cfg,
			struct cs_moe_layer **out);

/**
 * cs_moe_dispatch - post: this rank's @ntokens tokens to their experts
 * @x: [ntokens][hidden] (any memory; packed before this returns)
 * @idx: [ntokens][topk] expert indices, -1: none
 * @w: [ntokens][topk] weights (copied: used by cs_moe_combine())
 * @req: out: the request; once it succeeded cs_moe_rows() tells what came
 * Returns: as cs_alltoallv() (bad input is not refused here: the request
 *	fails on every rank), -EINVAL (@l or @req NULL, a combine pending).
 */
int cs_moe_dispatch(struct cs_moe_layer *l, uint32_t ntokens, const float *x,
		    const int32_t *idx, const float *w, cs_req_t *req);

/* The experts this rank holds (cs_moe_rows()' @i: 0 .. this - 1). */
uint32_t cs_moe_local_experts(const struct cs_moe_layer *l);

/**
 * cs_moe_rows - what the last dispatch delivered for local expert @i (in
 * increasing expert id): @count rows of H values at @rows, each from
 * token @src_token[r] of rank @src_rank[r], its top-k slot @src_slot[r];
 * rows in (source rank, token) order
 * Returns: 0 or -ENOENT (no such local expert, or no dispatch done).
 */
int cs_moe_rows(const struct cs_moe_layer *l, uint32_t i, uint32_t *expert,
		uint32_t *count, const float **rows, const uint32_t **src_rank,
		const uint32_t **src_token, const uint32_t **src_slot);

/* Where local expert @i's @count outputs (count x H) go, or NULL. */
float *cs_moe_layer_out(struct cs_moe_layer *l, uint32_t i);

/**
 * cs_moe_combine - post: the experts' outputs back to their tokens
 * @expert_out: every local expert's outputs, one row per cs_moe_rows()
 *	row, expert after expert (count x H each), or NULL: they were
 *	written into cs_moe_layer_out()
 * @out: [ntokens][hidden], written when the request succeeds: out[t] =
 *	sum over j = 0 .. k-1 (slots with an expert) of w[t][j] * y[t][j]
 *	(CS_MOE_LAYER_NODE_SUM: the sum in node order of each node's sum in
 *	slot order; the request is then two exchanges, the gather inside
 *	the nodes and the combine)
 * Returns: as cs_moe_dispatch(); -EINVAL without a dispatch done.
 */
int cs_moe_combine(struct cs_moe_layer *l, const float *expert_out, float *out,
		   cs_req_t *req);

/**
 * cs_moe_set_weights - replace the last dispatch's weights (@ntokens x
 * topk, copied) before cs_moe_combine(): for callers that know them only
 * after the experts ran
 * Returns: 0 or -EINVAL (no dispatch done, a request pending, NULL, a
 *	CS_MOE_LAYER_NODE_SUM layer: its weights went with the dispatch).
 */
int cs_moe_set_weights(struct cs_moe_layer *l, const float *w);

/* Free the layer (no request of it pending). */
void cs_moe_layer_free(struct cs_moe_layer *l);

#ifdef __cplusplus
}
#endif

#endif

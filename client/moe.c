/* SPDX-License-Identifier: MIT */
/*
 * MoE dispatch and combine for trainers (collstack/moe.h): the rows are
 * built, checked and summed by the engine-level MoE (collectives/moe.c);
 * they travel through the sidecar as an all-to-all-v whose receive counts
 * go along with the rows (CS_IPC_OP_ALLTOALLV_DYN), in bytes (CS_U8).
 * CS_MOE_LAYER_NODE_SUM: the engine's CS_MOE_F_NODE_SUM_GATHER, its
 * combine two exchanges in one request (cs__comp_stages()): the gather
 * inside the nodes, then the node sums; every exchange tagged (TAG_*) so
 * that ranks whose layers differ are refused.
 * CS_MOE_LAYER_NODE_ROWS: the engine's CS_MOE_F_NODE_ROWS_FWD, the
 * dispatch two exchanges in one request: a token's row to its leader on
 * each node, then the leaders' forward inside the nodes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_internal.h"
#include "collectives/moe.h"
#include "collstack/moe.h"

/* The exchanges' tags (ipc_proto.h CS_IPC_DYN_TAG_SHIFT): a plain layer's
 * are 0 (as before tags), a node-sum layer's these. */
enum {
	TAG_NS_DISPATCH = 1,
	TAG_NS_GATHER = 2,
	TAG_NS_COMBINE = 3,
	TAG_NR_DISPATCH = 4, /* node rows, per-slot combine */
	TAG_NRNS_DISPATCH = 5, /* node rows and node sum */
	TAG_NR_FORWARD = 6,
};

struct cs_moe_layer {
	struct cs_group *g;
	struct cs_client *c;
	struct cs_moe_layer_cfg cfg;
	uint32_t n, rank;
	uint32_t *erank;
	int32_t *idx; /* copies of the last dispatch's top-k */
	float *w;
	uint32_t ntok;
	struct cs_moe *m; /* the last dispatch, or NULL */
	bool rows_ok; /* its rows are laid out (dispatch finished well) */
	bool busy; /* a request of the layer is pending */
	float *out; /* the pending combine's result */
	/* shared with the sidecar: the count table, the rows */
	struct cs_buf *tab, *sbuf, *rbuf;
	/* CS_MOE_LAYER_NODE_SUM: ranks per node; the combine's stage and
	 * sizes, the engine's error of a stage */
	bool node_sum;
	uint32_t G;
	int cstage, cerr;
	uint64_t grecv_room, crecv_room;
	struct cs_a2a_params gp; /* the gather's (the engine's arrays) */
	/* CS_MOE_LAYER_NODE_ROWS: the dispatch's stage, the engine's error
	 * of its forward step, the first exchange's rows and room */
	bool node_rows;
	int dstage, derr;
	uint64_t dsend_rows, droom;
};

static uint32_t tag(const struct cs_moe_layer *l, uint32_t t)
{
	return l->node_sum ? t << CS_IPC_DYN_TAG_SHIFT : 0;
}

/* The dispatch's first exchange's tag. */
static uint32_t dispatch_tag(const struct cs_moe_layer *l)
{
	uint32_t t = l->node_rows ? (l->node_sum ? TAG_NRNS_DISPATCH
						 : TAG_NR_DISPATCH)
				  : (l->node_sum ? TAG_NS_DISPATCH : 0);

	return t << CS_IPC_DYN_TAG_SHIFT;
}

static int grow(struct cs_moe_layer *l, struct cs_buf **b, size_t len)
{
	if (!len)
		len = 64;
	if (*b && cs_buf_len(*b) >= len)
		return 0;
	if (*b)
		cs_buf_free(*b);
	*b = NULL;
	return cs_buf_alloc(l->c, len, b);
}

cs_export int cs_moe_layer_create(struct cs_group *g,
				  const struct cs_moe_layer_cfg *cfg,
				  struct cs_moe_layer **out)
{
	struct cs_moe_layer *l;
	int ret = -ENOMEM;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!g || !cfg || !cfg->hidden || !cfg->topk ||
	    (cfg->flags & ~(CS_MOE_LAYER_NODE_SUM | CS_MOE_LAYER_NODE_ROWS)) ||
	    cfg->topk > CS_MOE_MAX_TOPK || !cfg->experts ||
	    cs_group_size(g) < 1 ||
	    (!cfg->expert_rank &&
	     (uint64_t)cfg->experts_per_rank * (uint32_t)cs_group_size(g) !=
		     cfg->experts))
		return -EINVAL;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->g = g;
	l->c = cs__group_client(g);
	l->cfg = *cfg;
	l->n = (uint32_t)cs_group_size(g);
	l->rank = (uint32_t)cs_group_rank(g);
	l->node_sum = cfg->flags & CS_MOE_LAYER_NODE_SUM;
	l->node_rows = cfg->flags & CS_MOE_LAYER_NODE_ROWS;
	l->G = 1;
	if (l->node_sum || l->node_rows) {
		int L = cs__group_local_size(g);

		if (L < 1 || l->n % (uint32_t)L) {
			free(l);
			return -EINVAL;
		}
		l->G = (uint32_t)L;
	}
	l->erank = malloc(cfg->experts * sizeof(*l->erank));
	l->idx = malloc(((size_t)cfg->tokens * cfg->topk + 1) * 4);
	l->w = malloc(((size_t)cfg->tokens * cfg->topk + 1) * 4);
	if (!l->erank || !l->idx || !l->w)
		goto fail;
	for (uint32_t e = 0; e < cfg->experts; e++) {
		l->erank[e] = cfg->expert_rank ? cfg->expert_rank[e]
					       : e / cfg->experts_per_rank;
		if (l->erank[e] >= l->n) {
			ret = -EINVAL;
			goto fail;
		}
	}
	l->cfg.expert_rank = l->erank;
	ret = grow(l, &l->tab, CS_IPC_A2AV_BYTES(l->n));
	if (ret)
		goto fail;
	*out = l;
	return 0;
fail:
	cs_moe_layer_free(l);
	return ret;
}

cs_export void cs_moe_layer_free(struct cs_moe_layer *l)
{
	if (!l)
		return;
	cs_moe_free(l->m);
	if (l->tab)
		cs_buf_free(l->tab);
	if (l->sbuf)
		cs_buf_free(l->sbuf);
	if (l->rbuf)
		cs_buf_free(l->rbuf);
	free(l->erank);
	free(l->idx);
	free(l->w);
	free(l);
}

/* The receive counts the sidecar wrote back, in rows. */
static int table_rows(struct cs_moe_layer *l, size_t row, uint64_t *rc,
		      uint64_t *rd, char *err, size_t len)
{
	const uint64_t *t = cs_buf_ptr(l->tab);

	for (uint32_t s = 0; s < l->n; s++) {
		if (t[2 * l->n + s] % row || t[3 * l->n + s] % row) {
			snprintf(err, len,
				 "moe: rank %u sent %llu bytes, not whole rows",
				 s, (unsigned long long)t[2 * l->n + s]);
			return CS_ERR_PROTO;
		}
		rc[s] = t[2 * l->n + s] / row;
		rd[s] = t[3 * l->n + s] / row;
	}
	return 0;
}

/*
 * The start of an exchange's finish: the request's outcome, then the rows
 * each rank sent here (*@rc: 2 x n, counts then displacements, to free;
 * @dispatch: of the dispatch's rows, else of the combine's).
 */
static int fin_rows(struct cs_moe_layer *l, int status, bool dispatch,
		    uint64_t **rc, char *err, size_t len)
{
	size_t drow, crow;
	const void *ds, *cs;
	uint64_t dn, cn, crn;

	l->busy = false;
	*rc = NULL;
	if (status) /* its message is in @err already */
		return status;
	*rc = calloc(2 * (size_t)l->n, sizeof(**rc));
	if (!*rc)
		return -ENOMEM;
	cs_moe_wire(l->m, &drow, &crow, &ds, &dn, &cs, &cn, &crn);
	return table_rows(l, dispatch ? drow : crow, *rc, *rc + l->n, err, len);
}

static int dispatch_fin(void *arg, int status, char *err, size_t len)
{
	struct cs_moe_layer *l = arg;
	uint64_t *rc;
	int ret = fin_rows(l, status, true, &rc, err, len);

	if (!rc) /* failed before the rows were read */
		return ret;
	if (!ret)
		ret = cs_moe_dispatch_finish_at(l->m, cs_buf_ptr(l->rbuf), rc,
						rc + l->n);
	if (ret)
		snprintf(err, len,
			 "moe dispatch: the rows received do not fit this "
			 "rank's experts (%s)",
			 cs_strerror(ret));
	l->rows_ok = !ret;
	free(rc);
	return ret;
}

/* Fill the layer's table with @sc/@sd rows of @row bytes. */
static void table_fill(struct cs_moe_layer *l, size_t row, const uint64_t *sc,
		       const uint64_t *sd)
{
	uint64_t *t = cs_buf_ptr(l->tab);

	for (uint32_t d = 0; d < l->n; d++) {
		t[d] = sc[d] * row;
		t[l->n + d] = sd[d] * row;
	}
}

/* Post the rows of @m's table (the counts in rows) from sbuf into rbuf. */
static int post_rows(struct cs_moe_layer *l, size_t row, const uint64_t *sc,
		     const uint64_t *sd, uint64_t room_rows, uint32_t root,
		     int (*fin)(void *, int, char *, size_t), cs_req_t *req)
{
	uint64_t *t = cs_buf_ptr(l->tab);
	cs_req_t sub;
	int ret;

	bool bad = root & CS_IPC_DYN_BAD_INPUT;

	for (uint32_t d = 0; d < l->n; d++) {
		t[d] = bad ? 0 : sc[d] * row;
		t[l->n + d] = bad ? 0 : sd[d] * row;
	}
	ret = cs__alltoallv_dyn(l->g, cs_buf_ptr(l->sbuf), t,
				cs_buf_ptr(l->rbuf), room_rows * row, CS_U8,
				root, &sub);
	if (ret)
		return ret;
	l->busy = true;
	ret = cs__comp_wrap(l->c, sub, fin, l, req);
	if (ret) { /* cannot happen but for memory: wait it out */
		cs_wait(l->c, sub, -1);
		l->busy = false;
	}
	return ret;
}

/* The forward's rows from this rank: each row of the first exchange goes
 * to the node's other ranks holding one of its slots, at most min(G - 1,
 * K - 1) of them. */
static uint64_t forward_most(const struct cs_moe_layer *l)
{
	return l->droom * CS_MIN(l->G - 1, l->cfg.topk - 1);
}

/*
 * The node-rows dispatch's stages (client lock held): 0 the rows to the
 * leaders (in sbuf already), 1 the forward inside the node (none with one
 * trainer per node), 2 done. An engine error of the forward step (a row
 * not for this rank) still posts the forward, flagged, so that every rank
 * fails and none waits.
 */
static int dispatch_next(void *arg, cs_req_t *sub)
{
	struct cs_moe_layer *l = arg;
	size_t drow, crow, frow = cs_moe_forward_row(l->m);
	const void *ds, *cs;
	uint64_t dn, cn, crn, *rc;
	struct cs_a2a_params p;
	uint32_t root = TAG_NR_FORWARD << CS_IPC_DYN_TAG_SHIFT;
	int ret;

	cs_moe_wire(l->m, &drow, &crow, &ds, &dn, &cs, &cn, &crn);
	if (l->dstage == 0) {
		cs_moe_dispatch_params(l->m, &p);
		l->dstage = 1;
		table_fill(l, drow, p.sendcounts, p.sdispls);
		ret = cs__alltoallv_dyn_locked(
			l->g, cs_buf_ptr(l->sbuf), cs_buf_ptr(l->tab),
			cs_buf_ptr(l->rbuf), l->droom * drow, CS_U8,
			dispatch_tag(l), sub);
		return ret ? ret : 1;
	}
	if (l->dstage == 2)
		return 0;
	l->dstage = 2;
	rc = calloc(2 * (size_t)l->n, sizeof(*rc));
	if (!rc)
		ret = -ENOMEM;
	else
		ret = table_rows(l, drow, rc, rc + l->n, (char[8]){ 0 }, 8);
	if (!ret)
		ret = cs_moe_forward_params(l->m, cs_buf_ptr(l->rbuf), rc,
					    rc + l->n, &p);
	free(rc);
	if (ret) {
		l->derr = ret < 0 ? ret : CS_ERR_PROTO;
		root |= CS_IPC_DYN_BAD_INPUT;
	}
	if (l->G == 1) /* nothing to forward: fin lays the rows out */
		return 0;
	if (!ret) {
		uint64_t rows = 0;

		for (uint32_t d = 0; d < l->n; d++)
			rows += p.sendcounts[d];
		if (rows > forward_most(l)) { /* cannot be: refuse */
			l->derr = CS_ERR_PROTO;
			root |= CS_IPC_DYN_BAD_INPUT;
		} else {
			memcpy(cs_buf_ptr(l->sbuf), p.sendbuf, rows * frow);
			table_fill(l, frow, p.sendcounts, p.sdispls);
		}
	}
	if (root & CS_IPC_DYN_BAD_INPUT)
		memset(cs_buf_ptr(l->tab), 0, 2 * l->n * sizeof(uint64_t));
	ret = cs__alltoallv_dyn_locked(l->g, cs_buf_ptr(l->sbuf),
				       cs_buf_ptr(l->tab), cs_buf_ptr(l->rbuf),
				       l->droom * frow, CS_U8, root, sub);
	return ret ? ret : 1;
}

static int dispatch_fwd_fin(void *arg, int status, char *err, size_t len)
{
	struct cs_moe_layer *l = arg;
	uint64_t *rc;
	int ret;

	l->busy = false;
	if (l->derr) { /* the forward step failed here */
		snprintf(err, len,
			 "moe dispatch: the node rows received here are not "
			 "this rank's to forward (%s)",
			 cs_strerror(l->derr));
		ret = l->derr;
		l->derr = 0;
		return ret;
	}
	if (status) /* its message is in @err already */
		return status;
	rc = calloc(2 * (size_t)l->n, sizeof(*rc));
	if (!rc)
		return -ENOMEM;
	ret = l->G > 1 ? table_rows(l, cs_moe_forward_row(l->m), rc, rc + l->n,
				    err, len)
		       : 0;
	if (!ret)
		ret = cs_moe_dispatch_finish_fwd(l->m, cs_buf_ptr(l->rbuf), rc,
						 rc + l->n);
	if (ret)
		snprintf(err, len,
			 "moe dispatch: the rows forwarded here do not fit "
			 "this rank's experts (%s)",
			 cs_strerror(ret));
	l->rows_ok = !ret;
	free(rc);
	return ret;
}

/* cs_moe_dispatch() of a CS_MOE_LAYER_NODE_ROWS layer (@dn rows built). */
static int dispatch_node_rows(struct cs_moe_layer *l, uint64_t dn,
			      uint64_t room, cs_req_t *req)
{
	size_t drow, crow, frow = cs_moe_forward_row(l->m);
	const void *ds, *cs;
	uint64_t n, cn, crn;
	int ret;

	cs_moe_wire(l->m, &drow, &crow, &ds, &n, &cs, &cn, &crn);
	l->droom = room;
	/* room for both exchanges now: no allocation in the stages */
	ret = grow(l, &l->sbuf, CS_MAX(dn * drow, forward_most(l) * frow));
	if (ret)
		return ret;
	memcpy(cs_buf_ptr(l->sbuf), ds, dn * drow);
	l->dstage = 0;
	l->derr = 0;
	l->busy = true;
	ret = cs__comp_stages(l->c, dispatch_next, dispatch_fwd_fin, l, req);
	if (ret)
		l->busy = false;
	return ret;
}

cs_export int cs_moe_dispatch(struct cs_moe_layer *l, uint32_t ntokens,
			      const float *x, const int32_t *idx,
			      const float *w, cs_req_t *req)
{
	const uint32_t K = l ? l->cfg.topk : 0;
	struct cs_moe_cfg mc;
	struct cs_a2a_params p;
	size_t drow, crow;
	const void *ds, *cs;
	uint64_t dn, cn, crn, room;
	bool bad;
	int ret;

	if (!l || !req || l->busy)
		return -EINVAL;
	cs_moe_free(l->m);
	l->m = NULL;
	l->rows_ok = false;
	l->ntok = 0;
	mc = (struct cs_moe_cfg){
		.nranks = l->n,
		.rank = l->rank,
		.ranks_per_node = l->G,
		.flags = (l->node_sum ? CS_MOE_F_NODE_SUM_GATHER : 0) |
			 (l->node_rows ? CS_MOE_F_NODE_ROWS_FWD : 0),
		.tokens = ntokens,
		.max_tokens = l->cfg.tokens,
		.hidden = l->cfg.hidden,
		.topk = K,
		.experts = l->cfg.experts,
		.expert_rank = l->erank
	};
	bad = ntokens > l->cfg.tokens || (ntokens && (!x || !idx || !w));
	if (!bad) {
		memcpy(l->idx, idx, (size_t)ntokens * K * 4);
		memcpy(l->w, w, (size_t)ntokens * K * 4);
		ret = cs_moe_create(&mc, x, l->idx, l->w, &l->m);
		if (ret == -ENOMEM)
			return ret;
		bad = ret != 0;
	}
	/* the room: every rank may send each of its tokens here once */
	drow = 4 * ((size_t)2 + K + l->cfg.hidden + (l->node_sum ? K : 0));
	room = (uint64_t)l->cfg.tokens * l->n;
	/* node rows: the forward's rows are one word longer */
	ret = grow(l, &l->rbuf, room * (drow + (l->node_rows ? 4 : 0)));
	if (ret)
		return ret;
	if (bad) { /* nothing of ours goes: the op fails on every rank */
		cs_moe_free(l->m);
		l->m = NULL;
		ret = grow(l, &l->sbuf, 64);
		if (ret)
			return ret;
		return post_rows(l, drow, NULL, NULL, room,
				 CS_IPC_DYN_BAD_INPUT | dispatch_tag(l),
				 dispatch_fin, req);
	}
	l->ntok = ntokens;
	cs_moe_wire(l->m, &drow, &crow, &ds, &dn, &cs, &cn, &crn);
	if (l->node_rows)
		return dispatch_node_rows(l, dn, room, req);
	ret = grow(l, &l->sbuf, dn * drow);
	if (ret)
		return ret;
	memcpy(cs_buf_ptr(l->sbuf), ds, dn * drow);
	cs_moe_dispatch_params(l->m, &p);
	return post_rows(l, drow, p.sendcounts, p.sdispls, room,
			 tag(l, TAG_NS_DISPATCH), dispatch_fin, req);
}

cs_export uint32_t cs_moe_local_experts(const struct cs_moe_layer *l)
{
	uint32_t k = 0;

	for (uint32_t e = 0; l && e < l->cfg.experts; e++)
		k += l->erank[e] == l->rank;
	return k;
}

cs_export int cs_moe_rows(const struct cs_moe_layer *l, uint32_t i,
			  uint32_t *expert, uint32_t *count, const float **rows,
			  const uint32_t **src_rank, const uint32_t **src_token,
			  const uint32_t **src_slot)
{
	if (!l || !l->m || !l->rows_ok)
		return -ENOENT;
	return cs_moe_local(l->m, i, expert, count, rows, src_rank, src_token,
			    src_slot);
}

cs_export float *cs_moe_layer_out(struct cs_moe_layer *l, uint32_t i)
{
	if (!l || !l->m || !l->rows_ok)
		return NULL;
	return cs_moe_expert_out(l->m, i);
}

static int combine_fin(void *arg, int status, char *err, size_t len)
{
	struct cs_moe_layer *l = arg;
	struct cs_a2a_params p;
	uint64_t *rc;
	int ret;

	if (l->cerr) { /* a stage of the node sum failed here */
		snprintf(err, len,
			 "moe combine: the outputs gathered in this node do "
			 "not match the tokens dispatched (%s)",
			 cs_strerror(l->cerr));
		status = l->cerr;
		l->cerr = 0;
	}
	ret = fin_rows(l, status, false, &rc, err, len);
	if (!rc) /* failed before the rows were read */
		return ret;
	/* what came is what this rank sent out (collectives/moe.c's
	 * layout, the sidecar's: packed in rank order) */
	cs_moe_combine_layout(l->m, &p);
	for (uint32_t d = 0; !ret && d < l->n; d++)
		if (rc[d] != p.recvcounts[d] || rc[l->n + d] != p.rdispls[d])
			ret = CS_ERR_PROTO;
	if (!ret)
		ret = cs_moe_combine_finish_at(l->m, cs_buf_ptr(l->rbuf),
					       l->out);
	if (ret)
		snprintf(err, len,
			 "moe combine: the outputs received do not match the "
			 "tokens dispatched (%s)",
			 cs_strerror(ret));
	free(rc);
	return ret;
}

/* The node sums of the gathered rows (@rc: 2 x n, counts then
 * displacements, in rows; freed here), then post the combine. */
static int post_sums(struct cs_moe_layer *l, uint64_t *rc, cs_req_t *sub)
{
	struct cs_a2a_params p;
	const void *ds, *cs;
	uint64_t dn, cn, crn;
	size_t drow, crow;
	int ret = cs_moe_combine_params_gathered(l->m, cs_buf_ptr(l->rbuf), rc,
						 rc + l->n, &p);

	free(rc);
	if (ret)
		return l->cerr = ret < 0 ? ret : CS_ERR_PROTO;
	cs_moe_wire(l->m, &drow, &crow, &ds, &dn, &cs, &cn, &crn);
	memcpy(cs_buf_ptr(l->sbuf), cs, cn * crow);
	table_fill(l, crow, p.sendcounts, p.sdispls);
	ret = cs__alltoallv_dyn_locked(l->g, cs_buf_ptr(l->sbuf),
				       cs_buf_ptr(l->tab), cs_buf_ptr(l->rbuf),
				       l->crecv_room * crow, CS_U8,
				       tag(l, TAG_NS_COMBINE), sub);
	return ret ? ret : 1;
}

/*
 * The node-sum combine's stages (client lock held): 0 the gather (its rows
 * in sbuf already; none with one trainer per node: G is the same on every
 * node, the layout was checked at dispatch), 1 the node sums of what came,
 * then the combine, 2 done.
 */
static int combine_next(void *arg, cs_req_t *sub)
{
	struct cs_moe_layer *l = arg;
	size_t grow = cs_moe_gather_row(l->m);
	uint64_t *rc;
	int ret;

	if (l->cstage == 0 && l->G > 1) {
		l->cstage = 1;
		table_fill(l, grow, l->gp.sendcounts, l->gp.sdispls);
		ret = cs__alltoallv_dyn_locked(
			l->g, cs_buf_ptr(l->sbuf), cs_buf_ptr(l->tab),
			cs_buf_ptr(l->rbuf), l->grecv_room * grow, CS_U8,
			tag(l, TAG_NS_GATHER), sub);
		return ret ? ret : 1;
	}
	if (l->cstage == 2)
		return 0;
	/* stage 1 (or 0 with nothing to gather): the sums, the combine */
	rc = calloc(2 * (size_t)l->n, sizeof(*rc));
	if (!rc)
		return l->cerr = -ENOMEM;
	if (l->cstage == 1) {
		ret = table_rows(l, grow, rc, rc + l->n, (char[8]){ 0 }, 8);
		if (ret) {
			free(rc);
			return l->cerr = ret;
		}
	}
	l->cstage = 2;
	return post_sums(l, rc, sub);
}

/* cs_moe_combine() of a CS_MOE_LAYER_NODE_SUM layer (outputs written). */
static int combine_node_sum(struct cs_moe_layer *l, float *out, cs_req_t *req)
{
	size_t grw = cs_moe_gather_row(l->m),
	       crow = 4 * ((size_t)2 + l->cfg.hidden);
	struct cs_a2a_params p;
	uint64_t gs = 0, cs, cr;
	int ret = cs_moe_gather_params(l->m, &p);

	l->gp = p;
	if (ret)
		return ret == -EINVAL ? -EINVAL : -ENOMEM;
	l->grecv_room = 0;
	for (uint32_t d = 0; d < l->n; d++) {
		gs += p.sendcounts[d];
		l->grecv_room += p.recvcounts[d];
	}
	cs_moe_gather_sizes(l->m, &cs, &cr);
	l->crecv_room = cr;
	/* room for both exchanges now: no allocation in the stages */
	ret = grow(l, &l->sbuf, CS_MAX(gs * grw, cs * crow));
	if (!ret)
		ret = grow(l, &l->rbuf, CS_MAX(l->grecv_room * grw, cr * crow));
	if (ret)
		return ret;
	memcpy(cs_buf_ptr(l->sbuf), p.sendbuf, gs * grw);
	l->out = out;
	l->rows_ok = false; /* the rows are consumed: dispatch again */
	l->cstage = 0;
	l->cerr = 0;
	l->busy = true;
	ret = cs__comp_stages(l->c, combine_next, combine_fin, l, req);
	if (ret)
		l->busy = false;
	return ret;
}

cs_export int cs_moe_combine(struct cs_moe_layer *l, const float *expert_out,
			     float *out, cs_req_t *req)
{
	struct cs_a2a_params p;
	size_t drow, crow;
	const void *ds, *cs;
	uint64_t dn, cn, crn;
	int ret;

	if (!l || !req || l->busy || !l->m || !l->rows_ok)
		return -EINVAL;
	crow = 4 * ((size_t)2 + l->cfg.hidden);
	if (!out && l->ntok) { /* bad: the op fails on every rank */
		l->rows_ok = false;
		return post_rows(l, crow, NULL, NULL, 0,
				 CS_IPC_DYN_BAD_INPUT |
					 tag(l, l->G > 1 ? TAG_NS_GATHER
							 : TAG_NS_COMBINE),
				 combine_fin, req);
	}
	if (expert_out) {
		uint64_t rows = 0;

		for (uint32_t i = 0; i < cs_moe_local_experts(l); i++) {
			uint32_t e, k;
			const float *r;
			const uint32_t *a, *b, *s;

			cs_moe_local(l->m, i, &e, &k, &r, &a, &b, &s);
			rows += k;
		}
		if (rows)
			memcpy(cs_moe_expert_out(l->m, 0), expert_out,
			       rows * l->cfg.hidden * sizeof(float));
	}
	if (l->node_sum)
		return combine_node_sum(l, out, req);
	cs_moe_combine_params(l->m, &p);
	if (!p.sendcounts || !p.recvcounts || !p.sendbuf || !p.recvbuf)
		return -ENOMEM;
	cs_moe_wire(l->m, &drow, &crow, &ds, &dn, &cs, &cn, &crn);
	ret = grow(l, &l->sbuf, cn * crow);
	if (!ret)
		ret = grow(l, &l->rbuf, crn * crow);
	if (ret)
		return ret;
	memcpy(cs_buf_ptr(l->sbuf), cs, cn * crow);
	l->out = out;
	l->rows_ok = false; /* the rows are consumed: dispatch again */
	return post_rows(l, crow, p.sendcounts, p.sdispls, crn, 0, combine_fin,
			 req);
}

cs_export int cs_moe_set_weights(struct cs_moe_layer *l, const float *w)
{
	if (!l || !w || l->busy || !l->m || !l->rows_ok || l->node_sum)
		return -EINVAL;
	/* the engine-level MoE reads them from here (cs_moe_create()) */
	memcpy(l->w, w, (size_t)l->ntok * l->cfg.topk * sizeof(float));
	return 0;
}

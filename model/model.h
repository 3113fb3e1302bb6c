/* SPDX-License-Identifier: MIT */
/*
 * The cost model (collstack model, collstack plan): measured constants of
 * a network and of collstack's protocol, and the formulas that turn them
 * into the time of one operation at N ranks.
 *
 * The constants are fitted from short runs at 4 nodes (tools/cmd_model.c);
 * the formulas follow the algorithms the engines run, step by step, so
 * that what grows with N (ring steps, window stalls, frames per peer,
 * streams per NIC, the slowest of many messages) is computed, not
 * extrapolated. docs/model.md derives each formula and lists what it
 * leaves out.
 *
 * Times are in nanoseconds, sizes in bytes.
 */
#ifndef CS_MODEL_MODEL_H
#define CS_MODEL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Operations the model predicts (collstack model predict --op). */
enum cs_model_op {
	CS_MODEL_ALLREDUCE = 0, /* what the engine picks: direct or ring */
	CS_MODEL_ALLREDUCE_RING, /* the ring, whatever the size */
	CS_MODEL_ALLREDUCE_DIRECT, /* direct exchange, whatever the size */
	CS_MODEL_ALLREDUCE_TWO_LEVEL, /* node reduce, ring of nodes, copy */
	CS_MODEL_ALLTOALL, /* cs_a2a_choose()'s algorithm */
	CS_MODEL_ALLTOALL_FLAT,
	CS_MODEL_ALLTOALL_TWO_LEVEL,
	CS_MODEL_PS, /* one sync push + pull: the PS path's own constants */
	CS_MODEL_PS_NET, /* the same, its bytes at the network's beta */
	CS_MODEL_OP_COUNT
};

/**
 * struct cs_model - a fitted model
 * @source: "sim" or "cluster": where the constants were measured
 * @fit_nodes: nodes of the fit runs
 * @alpha_ns: one ring step's latency (propagation and processing)
 * @direct_alpha_ns: fixed cost of a direct-exchange allreduce
 * @beta_ns: per payload byte on a link
 * @frame_ns: per frame besides its payload (headers, gaps)
 * @ack_turn_ns: how long a full window waits for its ACK (delayed ACKs)
 * @incast: extra per-byte cost when every rank sends to every rank
 *	(fraction of @beta_ns; 0: none seen)
 * @a2a_alpha_ns: fixed cost of one all-to-all
 * @reduce_ns: per byte reduced (the simulator charges none)
 * @copy_ns: per byte copied in a node's memory
 * @ps_round_ns: fixed cost of one PS iteration (pull and push round trips)
 * @ps_tail_ns: how much the slowest of M messages adds: tail x M/(M+1)
 * @ps_beta_ns: per byte a PS worker pushes (and pulls), measured on the
 *	PS path (message parts, per-row work; no links)
 * @have_a2a, @have_ps: those constants were measured (a cluster fit
 *	cannot: the sidecar carries neither yet)
 * @channels, @chunk, @window, @mtu_payload, @direct_max, @max_direct_peers,
 * @ack_every, @small_bytes: protocol settings of the fit runs
 *	(configuration, not measured); a prediction assumes the target runs
 *	the same. @small_bytes is the transport core's latency class
 *	(tp.small_bytes): an operation that small has its frames
 *	acknowledged at once, so its window never waits for a delayed ACK
 */
struct cs_model {
	char source[16];
	uint32_t fit_nodes;
	double alpha_ns, direct_alpha_ns, beta_ns, frame_ns, ack_turn_ns;
	double incast, a2a_alpha_ns, reduce_ns, copy_ns;
	double ps_round_ns, ps_tail_ns, ps_beta_ns;
	bool have_a2a, have_ps;
	uint32_t channels, window, mtu_payload, max_direct_peers, ack_every;
	uint64_t chunk, direct_max, small_bytes;
};

/**
 * struct cs_model_case - what to predict
 * @op: the operation
 * @ranks: N
 * @rpn: ranks per node (L); divides @ranks
 * @bytes: allreduce: the buffer; all-to-all: a rank's send buffer; PS:
 *	the bytes a worker pushes (and pulls back) per step
 * @servers: PS shards (0: one per node, N / L)
 */
struct cs_model_case {
	enum cs_model_op op;
	uint32_t ranks, rpn;
	uint64_t bytes;
	uint32_t servers;
};

/**
 * cs_model_defaults - protocol settings from the engines' configuration
 *	tables and zero constants
 * @m: out
 * Returns: 0 or -EINVAL.
 */
int cs_model_defaults(struct cs_model *m);

/**
 * cs_model_predict - time of one operation
 * @m: the model
 * @c: the case
 * @ns: out, the predicted time
 * @algo: out (may be NULL), the algorithm the prediction assumes
 * @why: room for a reason when the case cannot be predicted
 * @whylen: its size
 * Returns: 0, -EINVAL for a bad case, -ENODATA when @m lacks the
 *	constants the operation needs (@why says which).
 */
int cs_model_predict(const struct cs_model *m, const struct cs_model_case *c,
		     double *ns, const char **algo, char *why, size_t whylen);

/**
 * cs_model_op_parse - "allreduce", "allreduce-ring", ..., "alltoall", "ps"
 * Returns: 0 or -EINVAL.
 */
int cs_model_op_parse(const char *s, enum cs_model_op *op);
const char *cs_model_op_name(enum cs_model_op op);

/**
 * cs_model_lsq - least squares: @coef (k) minimising |X coef - y|
 * @x: n rows of k columns, row-major
 * @y: n values
 * @n: rows (>= k)
 * @k: columns, 1..CS_MODEL_LSQ_MAX
 * @coef: out
 * Returns: 0, or -EINVAL when too few rows or the columns are dependent.
 */
#define CS_MODEL_LSQ_MAX 6
int cs_model_lsq(const double *x, const double *y, size_t n, size_t k,
		 double *coef);

/**
 * cs_model_save - write @m as JSON to @f
 * Returns: 0 or -EIO.
 */
int cs_model_save(const struct cs_model *m, FILE *f);

/**
 * cs_model_load - read a model file written by cs_model_save()
 * @path: file
 * @m: out
 * @err: room for a message naming the file and the key at fault
 * @errlen: its size
 * Returns: 0, -ENOENT, -EINVAL (malformed: @err says where), -ENOTSUP
 *	(built without jansson).
 */
int cs_model_load(const char *path, struct cs_model *m, char *err,
		  size_t errlen);

/* ---- ring steps (exposed for the fit and the tests) ---------------------- */

/**
 * struct cs_model_ring - the schedule of one ring allreduce
 * @seg: bytes per channel per step
 * @chunk: bytes per chunk (seg cut into @chunks of at most this)
 * @chunks: chunks per channel per step
 * @frames: frames per chunk
 * @steps: 2 (N - 1)
 */
struct cs_model_ring {
	double seg, chunk;
	uint64_t chunks, frames, steps;
};

void cs_model_ring_shape(const struct cs_model *m, uint32_t n, uint64_t bytes,
			 struct cs_model_ring *r);

/* ---- the fit (model/fit.c) ------------------------------------------------
 */

/**
 * struct cs_model_run - one measured run
 * @ranks: N (all-to-all: N = nodes x ranks per node; PS: workers)
 * @servers: PS shards
 * @bytes: as struct cs_model_case
 * @mtu_payload, @window, @chunk: settings the run used (0: the model's)
 * @ns: measured time (PS: per iteration)
 */
struct cs_model_run {
	uint32_t ranks, servers;
	uint64_t bytes;
	uint32_t mtu_payload, window;
	uint64_t chunk;
	double ns;
};

/*
 * Each fits some constants of @m from @n runs of one kind, using the
 * constants fitted before it (call them in this order). Returns 0,
 * -EINVAL (too few or unsuitable runs), -ERANGE (a non-physical result).
 *
 * beta:    large ring allreduces at two or more MTUs -> beta, frame
 * alpha:   ring allreduces with fewer chunks than the window -> alpha
 * direct:  direct-exchange allreduces (<= direct_max) -> direct_alpha
 * ack:     ring allreduces whose window stalls -> ack_turn
 * a2a:     flat all-to-alls (any N) -> a2a_alpha, incast
 * ps:      PS iterations (W, K, bytes per worker) -> ps_round, ps_tail,
 *          ps_beta (needs M = W K and bytes both to vary)
 * cluster: allreduces of one MTU on a real cluster -> alpha, beta,
 *          direct_alpha (frame cost folded into beta, no ACK turn)
 */
int cs_model_fit_beta(struct cs_model *m, const struct cs_model_run *r,
		      size_t n);
int cs_model_fit_alpha(struct cs_model *m, const struct cs_model_run *r,
		       size_t n);
int cs_model_fit_direct(struct cs_model *m, const struct cs_model_run *r,
			size_t n);
int cs_model_fit_ack(struct cs_model *m, const struct cs_model_run *r,
		     size_t n);
int cs_model_fit_a2a(struct cs_model *m, const struct cs_model_run *r,
		     size_t n);
int cs_model_fit_ps(struct cs_model *m, const struct cs_model_run *r, size_t n);
int cs_model_fit_cluster(struct cs_model *m, const struct cs_model_run *r,
			 size_t n);

/* ---- the planner (collstack plan) --------------------------------------- */

enum cs_plan_kind { CS_PLAN_DENSE, CS_PLAN_SPARSE, CS_PLAN_MOE };

/* Strategies the planner compares (columns of its table). */
enum cs_plan_strat {
	CS_PLAN_ALLREDUCE,
	CS_PLAN_PS,
	CS_PLAN_ALLTOALL,
	CS_PLAN_LOCAL,
	CS_PLAN_STRAT_COUNT
};

/**
 * struct cs_plan_group - one parameter group of a model description
 * @params: dense and MoE: parameters (experts: all of a layer's experts)
 * @rows, @dim, @rows_per_step: sparse: the table and the rows a step
 *	touches on one rank
 * @tokens, @hidden, @topk, @layers: MoE: tokens per rank per step, their
 *	width, experts per token, MoE layers in the group
 * @replicated: false: the group lives on one rank (local only is valid)
 */
struct cs_plan_group {
	char name[64];
	enum cs_plan_kind kind;
	double params, rows, dim, rows_per_step;
	double tokens, hidden, topk, layers;
	bool replicated;
};

struct cs_plan {
	char name[64];
	uint32_t dtype_bytes;
	uint32_t rpn; /* ranks per node from the file (0: not given) */
	unsigned ngroups;
	struct cs_plan_group *g;
};

/**
 * cs_plan_load - read a model description (docs/model.md, examples/)
 * Returns: 0, -ENOENT, -EINVAL (@err names the file and the key),
 *	-ENOMEM.
 */
int cs_plan_load(const char *path, struct cs_plan *p, char *err, size_t errlen);
void cs_plan_free(struct cs_plan *p);

/**
 * cs_plan_cost - one group's predicted communication time per step with
 *	strategy @s at @ranks ranks, @rpn per node
 * @ns: out
 * @bytes: out (may be NULL), bytes a rank hands to the strategy per step
 * Returns: 0, -ENOTSUP (the strategy does not apply to the group),
 *	-ENODATA (the model lacks the constants), -EINVAL.
 */
int cs_plan_cost(const struct cs_model *m, const struct cs_plan_group *g,
		 uint32_t dtype_bytes, enum cs_plan_strat s, uint32_t ranks,
		 uint32_t rpn, double *ns, double *bytes);
const char *cs_plan_strat_name(enum cs_plan_strat s);

/**
 * cs_plan_print - the table: per group, each strategy's time and the pick
 * @out: the table
 * @conf: NULL, or where the picks go as a strategies file
 *	(cs_strat_job_config(): one "group NAME STRATEGY" line per group)
 * Returns: 0, or a negative error when no strategy applies to a group.
 */
int cs_plan_print(const struct cs_model *m, const struct cs_plan *p,
		  uint32_t ranks, uint32_t rpn, FILE *out, FILE *conf);

#endif

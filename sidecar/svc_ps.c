// SPDX-License-Identifier: MIT
/*
 * collstackd's parameter-server service (svc_ps.h): one PS job's store
 * and worker engine on the lcore, their messages through a cs_ps_flow.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "collectives/ps/ps.h"
#include "collectives/ps/ps_io.h"
#include "collectives/ps/ps_pattern.h"
#include "collectives/ps/ps_wire.h"
#include "internal/log.h"
#include "svc_core.h"
#include "svc_ps.h"
#include "svc_ps_trainer.h"

#define PS_TABLE CS_PS_PAT_TABLE
#define PS_NODES_MAX 64u
#define PS_DIM_MAX 256u
#define PS_KPP_MAX 65536u
#define PS_ROWS_MAX (1u << 24)
#define PS_SPILL_QDEPTH 64u

enum ps_pattern { PS_PUSHPULL, PS_PUSH, PS_PULL };
static const char *const ps_pattern_names[] = { "pushpull", "push", "pull" };

struct cs_svc_ps {
	uint32_t n, rank; /* group */
	uint32_t workers; /* ranks with a worker */
	uint32_t wrank_node[PS_NODES_MAX]; /* worker rank -> group rank */
	int32_t my_wrank; /* -1: no worker here */
	bool server;
	uint32_t iters, warm, steps; /* timed steps, warm-up steps, all */
	uint64_t versions; /* pushed by every worker over the job */
	enum ps_pattern pattern;
	bool bad; /* worker 0 first sends two malformed pushes */
	struct cs_ps_table_spec spec;
	struct cs_ps_pat pat;
	struct cs_ps_shardmap map;
	struct cs_ps_flow *flow;
	struct cs_ps_store *st;
	/* budget=BYTES: the shard's SSD tier (a file in ps.spill_dir) */
	uint64_t budget;
	struct cs_ps_uring_spill *spill;
	struct cs_ps_spill_ops spill_ops; /* its ops (ps.spill_async) */
	char spill_path[320];
	uint64_t held, in_mem; /* the shard's rows at the check */
	struct cs_ps_worker *w;
	uint32_t *tot; /* every key's pushes over the job */
	uint32_t *lo; /* every worker's pushes of versions < lo_v */
	uint32_t *own; /* this worker's completed pushes */
	uint64_t lo_v;
	uint64_t grads_want; /* this shard's grads_in at the end */
	/* lcore: the worker's progress */
	uint32_t it;
	uint32_t inflight;
	int op_err;
	uint32_t op_peer;
	uint64_t *keys;
	float *grads, *pulled;
	uint64_t pull_clock; /* of the step in flight; 0: no pull */
	bool pushed; /* the step in flight pushed */
	uint64_t pushes, pulls, rows_timed;
	cs_ns_t t0, t_step, t_timed, t_timed_end;
	cs_ns_t *lat; /* [iters] */
	bool worker_done, server_done;
	bool checking; /* the shard is complete: being checked */
	uint64_t check_k; /* the next key of that check */
	uint64_t wrong, checked, shard_wrong, shard_rows;
	uint64_t send_err; /* messages the flow refused at send (lost) */
	uint64_t retx_logged; /* the worker's retransmits, last logged */
	/* the lcore's longest time between two polls of the job: a node
	 * that did not run (descheduled, stopped) stalls every worker */
	cs_ns_t last_poll, max_gap;
	/* lcore -> control */
	char summary[1024];
	atomic_int final; /* 0 running, 1 done, < 0 failed */
	atomic_bool go; /* control -> lcore: every node's flow is posted */
	/* control -> lcore: every worker of the job did its last step, the
	 * shard may be checked (ps_check) */
	atomic_bool check_go;
	/* lcore -> control: this node's worker did its last step (or the
	 * node has none) */
	atomic_bool steps_done;
};

static void ps_fail(struct cs_svc_ps *ps, int err, const char *why)
{
	if (atomic_load_explicit(&ps->final, memory_order_relaxed))
		return;
	snprintf(ps->summary, sizeof(ps->summary), "%s", why);
	atomic_store_explicit(&ps->final, err < 0 ? err : -EIO,
			      memory_order_release);
}

static void ps_rx(void *ctx, uint32_t src, const void *msg, size_t len,
		  cs_ns_t now)
{
	struct cs_svc_ps *ps = ctx;

	/* a refused message is counted by the store or the worker */
	(void)cs_ps_flow_route(ps->st, ps->w, src, msg, len, now);
}

static int ps_st_send(void *ctx, uint32_t worker, const void *msg, size_t len)
{
	struct cs_svc_ps *ps = ctx;
	int ret;

	if (worker >= ps->workers)
		return -EINVAL;
	ret = cs_ps_flow_send(ps->flow, ps->wrank_node[worker], msg, len);
	ps->send_err += ret != 0;
	return ret;
}

static int ps_wk_send(void *ctx, uint32_t server, const void *msg, size_t len)
{
	struct cs_svc_ps *ps = ctx;
	int ret = cs_ps_flow_send(ps->flow, server, msg, len);

	ps->send_err += ret != 0;
	return ret;
}

static void ps_wk_done(void *ctx, uint64_t op, int rc, uint32_t peer)
{
	struct cs_svc_ps *ps = ctx;

	(void)op;
	ps->inflight--;
	if (rc && !ps->op_err) {
		ps->op_err = rc;
		ps->op_peer = peer;
	}
}

static int ps_parse_nodes(char *list, uint32_t self, uint32_t npeers,
			  uint32_t *nodes, uint32_t *n, int64_t *me)
{
	char *save = NULL;

	*n = 0;
	*me = -1;
	for (char *tok = strtok_r(list, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		unsigned long v = strtoul(tok, NULL, 10);

		if (*n == PS_NODES_MAX || v >= npeers)
			return -EINVAL;
		for (uint32_t i = 0; i < *n; i++)
			if (nodes[i] == v)
				return -EINVAL;
		if (v == self)
			*me = *n;
		nodes[(*n)++] = (uint32_t)v;
	}
	return *me < 0 ? -EINVAL : 0;
}

/* The job's options after the node list: KEY=VALUE ... */
struct ps_opts {
	enum cs_ps_mode mode;
	uint32_t stale;
	enum ps_pattern pattern;
	unsigned warm;
	double skew;
	bool dense, bad;
	uint32_t msg; /* largest PS message (0: CS_PS_FLOW_MSG_MAX) */
	uint64_t budget; /* bytes of a shard's rows in memory (0: all) */
};

static int ps_parse_opts(const char *s, struct ps_opts *o, char *err,
			 size_t elen)
{
	char tok[64], *end;
	int skip;

	while (sscanf(s, " %63s%n", tok, &skip) == 1) {
		char *v = strchr(tok, '=');
		unsigned long u;
		unsigned k;

		s += skip;
		if (!v)
			goto bad;
		*v++ = 0;
		if (!strcmp(tok, "mode")) {
			if (cs_ps_mode_parse(v, &o->mode, &o->stale))
				goto bad;
		} else if (!strcmp(tok, "pattern")) {
			for (k = 0; k < CS_ARRAY_SIZE(ps_pattern_names); k++)
				if (!strcmp(v, ps_pattern_names[k]))
					break;
			if (k == CS_ARRAY_SIZE(ps_pattern_names))
				goto bad;
			o->pattern = (enum ps_pattern)k;
		} else if (!strcmp(tok, "warmup")) {
			u = strtoul(v, &end, 10);
			if (*end || end == v || u > 10000)
				goto bad;
			o->warm = (unsigned)u;
		} else if (!strcmp(tok, "skew")) {
			o->skew = strtod(v, &end);
			if (*end || end == v ||
			    !(o->skew >= 0 && o->skew <= 10))
				goto bad;
		} else if (!strcmp(tok, "msg")) {
			u = strtoul(v, &end, 10);
			if (*end || end == v || u < CS_PS_MSG_MIN ||
			    u > CS_PS_FLOW_MSG_MAX)
				goto bad;
			o->msg = (uint32_t)u;
		} else if (!strcmp(tok, "budget")) {
			unsigned long long b = strtoull(v, &end, 10);

			if (*end || end == v || v[0] == '-')
				goto bad;
			o->budget = b;
		} else if (!strcmp(tok, "dense") || !strcmp(tok, "bad")) {
			if (strcmp(v, "0") && strcmp(v, "1"))
				goto bad;
			*(tok[0] == 'd' ? &o->dense : &o->bad) = v[0] == '1';
		} else {
			goto bad;
		}
		continue;
	bad:
		snprintf(err, elen,
			 "option %s%s%s: not one of mode=sync|async|ssp:S "
			 "pattern=pushpull|push|pull warmup=N skew=Z dense=0|1 "
			 "bad=0|1 msg=BYTES(256-1048576) budget=BYTES",
			 tok, v ? "=" : "", v ? v : "");
		return -EINVAL;
	}
	return 0;
}

/*
 * budget=BYTES: the shard's SSD tier, a new file in ps.spill_dir (as a
 * trainer table's; removed when the job is freed), read while the lcore
 * serves on unless ps.spill_async=0. Returns 0 or -errno, why in @err.
 */
static int ps_spill_new(struct cs_svc_ps *ps, const struct cs_pst_cfg *pcfg,
			uint32_t op_id, struct cs_ps_spill *sp, char *err,
			size_t elen)
{
	const char *dir = pcfg ? pcfg->spill_dir : "", *e;
	char prefix[64];
	int ret;

	snprintf(prefix, sizeof(prefix), "cs-psjob-%ld-%08x-n%u",
		 (long)getpid(), op_id, ps->rank);
	ret = cs_pst_spill_new(pcfg, prefix, PS_SPILL_QDEPTH, &ps->spill,
			       &ps->spill_ops, sp, ps->spill_path,
			       sizeof(ps->spill_path), &e);
	if (ret) {
		CS_WARN("ps job: budget=%" PRIu64 " refused: no spill file in "
			"ps.spill_dir '%s': %s",
			ps->budget, dir, e);
		snprintf(err, elen,
			 "budget: no spill file in ps.spill_dir '%s': %s", dir,
			 e);
	}
	return ret;
}

/* Every node's bookkeeping: totals, this shard's expected grads. */
static int ps_setup_counts(struct cs_svc_ps *ps)
{
	uint32_t rows = (uint32_t)ps->spec.key_max;

	ps->tot = calloc(rows, sizeof(*ps->tot));
	if (!ps->tot)
		return -ENOMEM;
	cs_ps_pat_count(&ps->pat, 0, ps->versions, ps->tot);
	if (ps->server && cs_ps_pat_grads_of(&ps->pat, ps->versions, &ps->map,
					     ps->rank, &ps->grads_want))
		return -ENOMEM;
	if (ps->my_wrank < 0)
		return 0;
	ps->lo = calloc(rows, sizeof(*ps->lo));
	ps->own = calloc(rows, sizeof(*ps->own));
	ps->lat = calloc(ps->iters, sizeof(*ps->lat));
	ps->keys = calloc(ps->pat.kpp, sizeof(*ps->keys));
	ps->grads = calloc((size_t)ps->pat.kpp * ps->spec.dim, sizeof(float));
	ps->pulled = calloc((size_t)ps->pat.kpp * ps->spec.dim, sizeof(float));
	return ps->lo && ps->own && ps->lat && ps->keys && ps->grads &&
			       ps->pulled
		       ? 0
		       : -ENOMEM;
}

int cs_svc_ps_create(const char *args, uint32_t self, uint32_t npeers,
		     uint32_t mss, uint32_t op_id,
		     const struct cs_pst_cfg *pcfg, uint32_t **nodes,
		     uint32_t *n, struct cs_svc_ps **out, char *err,
		     size_t elen)
{
	char roles[PS_NODES_MAX + 1], list[1024];
	uint32_t nl[PS_NODES_MAX], srv[PS_NODES_MAX], nsrv = 0;
	unsigned iters, rows, dim, kpp;
	struct ps_opts o = { .mode = CS_PS_SYNC };
	int64_t me;
	int skip = 0;
	uint32_t msg_max;
	struct cs_svc_ps *ps;

	if (sscanf(args, "%64s %u %u %u %u %1023s%n", roles, &iters, &rows,
		   &dim, &kpp, list, &skip) != 6 ||
	    !iters || iters > 100000 || rows < 1 || rows > PS_ROWS_MAX ||
	    !dim || dim > PS_DIM_MAX || !kpp || kpp > PS_KPP_MAX) {
		snprintf(err, elen,
			 "usage: ps_start ROLES(s|w|b per node) ITERS ROWS "
			 "DIM(1-256) KPP(1-65536) N0,N1,... [KEY=VALUE...]");
		return -EINVAL;
	}
	if (ps_parse_opts(args + skip, &o, err, elen))
		return -EINVAL;
	msg_max = o.msg ? o.msg : CS_PS_FLOW_MSG_MAX;
	if (o.dense && kpp != rows) {
		snprintf(err, elen,
			 "dense=1: every key each push (KPP = ROWS)");
		return -EINVAL;
	}
	if (ps_parse_nodes(list, self, npeers, nl, n, &me) ||
	    strlen(roles) != *n || *n < 2) {
		snprintf(err, elen,
			 "a node list of 2+ distinct view nodes with this one, "
			 "one role each");
		return -EINVAL;
	}
	ps = calloc(1, sizeof(*ps));
	if (!ps)
		return -ENOMEM;
	ps->n = *n;
	ps->rank = (uint32_t)me;
	ps->my_wrank = -1;
	ps->iters = iters;
	ps->warm = o.warm;
	ps->pattern = o.pattern;
	ps->bad = o.bad;
	/* push: one more (untimed) step pulls what was pushed */
	ps->steps = ps->warm + iters + (o.pattern == PS_PUSH);
	ps->versions = o.pattern == PS_PULL ? ps->warm : ps->warm + iters;
	for (uint32_t r = 0; r < *n; r++) {
		if (!strchr("swb", roles[r])) {
			snprintf(err, elen, "role %c: not s, w or b", roles[r]);
			free(ps);
			return -EINVAL;
		}
		if (roles[r] != 'w')
			srv[nsrv++] = r;
		if (roles[r] != 's') {
			if (r == ps->rank)
				ps->my_wrank = (int32_t)ps->workers;
			ps->wrank_node[ps->workers++] = r;
		}
	}
	if (!nsrv || !ps->workers) {
		snprintf(err, elen, "a job needs a server and a worker");
		free(ps);
		return -EINVAL;
	}
	ps->server = roles[ps->rank] != 'w';
	ps->spec.id = PS_TABLE;
	ps->spec.dim = dim;
	ps->spec.dtype = CS_F32;
	ps->spec.key_max = rows;
	ps->spec.mode = o.mode;
	ps->spec.staleness = o.stale;
	ps->spec.workers = ps->workers;
	cs_ps_opt_defaults(&ps->spec.opt, CS_PS_OPT_SGD);
	ps->spec.opt.lr = CS_PS_PAT_LR;
	ps->spec.init.kind = CS_PS_INIT_CONST;
	ps->spec.init.scale = 1.0f;
	ps->budget = o.budget;
	if (ps->server && o.budget &&
	    cs_ps_budget_check(&ps->spec, o.budget, err, elen)) {
		free(ps);
		return -EINVAL;
	}
	atomic_init(&ps->final, 0);
	atomic_init(&ps->go, false);
	atomic_init(&ps->check_go, false);
	atomic_init(&ps->steps_done, false);
	if (cs_ps_pat_init(&ps->pat, rows, kpp, ps->workers, dim, o.skew,
			   o.dense) ||
	    cs_ps_shardmap_init(&ps->map, srv, nsrv, 64) ||
	    cs_ps_flow_create(ps->n, ps->rank, mss, ps_rx, ps, &ps->flow))
		goto fail;
	if (cs_ps_wire_len(CS_PS_MSG_PUSH, 1, dim, CS_F32, 0) > mss) {
		snprintf(err, elen,
			 "a row of %u bytes does not fit a frame (%u bytes of "
			 "payload): a larger MTU",
			 dim * 4, mss);
		cs_svc_ps_free(ps);
		return -EINVAL;
	}
	if (cs_ps_wire_len(CS_PS_MSG_PUSH, 1, dim, CS_F32, 0) > msg_max) {
		snprintf(err, elen, "msg=%u: less than one row's message",
			 msg_max);
		cs_svc_ps_free(ps);
		return -EINVAL;
	}
	if (o.bad && ps->versions * CS_DIV_ROUND_UP((uint64_t)ps->pat.kpp *
							    (8 + 4 * dim),
						    msg_max - CS_PS_WIRE_HDR) >=
			     CS_PS_DEDUP_WINDOW - 1) {
		snprintf(err, elen,
			 "bad=1: a short job (its pushes to one server must "
			 "stay below %u ids)",
			 CS_PS_DEDUP_WINDOW - 1);
		cs_svc_ps_free(ps);
		return -EINVAL;
	}
	if (ps->server) {
		struct cs_ps_store_cfg sc = { .server = ps->rank,
					      .map = &ps->map,
					      .msg_max = msg_max,
					      .parked_max = 4096 };
		struct cs_ps_store_io sio = { ps_st_send, ps };
		struct cs_ps_spill sp;
		int ret;

		if (ps->budget) {
			ret = ps_spill_new(ps, pcfg, op_id, &sp, err, elen);
			if (ret) {
				cs_svc_ps_free(ps);
				return ret;
			}
		}
		if (cs_ps_store_create(&ps->st, &sc, &sio) ||
		    cs_ps_store_add_table(ps->st, &ps->spec, ps->budget,
					  ps->budget ? &sp : NULL))
			goto fail;
	}
	if (ps->my_wrank >= 0) {
		/* the core's sessions retransmit; the worker's own timer
		 * (5 s) only covers a core that was replaced, or (1 s) a
		 * push a server dropped because it came more than
		 * CS_PS_AHEAD versions early and its parking was full (push
		 * only, sync / ssp). A short one resends whole messages the
		 * core still queues (a push to one server is one message of
		 * many frames) and feeds the queue. */
		bool early = o.pattern == PS_PUSH && o.mode != CS_PS_ASYNC;
		cs_ns_t rto = early ? CS_NS_PER_S : 5 * CS_NS_PER_S;
		struct cs_ps_worker_cfg wc = { .rank = (uint32_t)ps->my_wrank,
					       .map = &ps->map,
					       .msg_max = msg_max,
					       .rto = rto,
					       .rto_max = 5 * CS_NS_PER_S };
		struct cs_ps_worker_io wio = { ps_wk_send, ps_wk_done, ps };

		if (cs_ps_worker_create(&ps->w, &wc, &wio) ||
		    cs_ps_worker_add_table(ps->w, &ps->spec))
			goto fail;
	} else {
		ps->worker_done = true;
		atomic_store_explicit(&ps->steps_done, true,
				      memory_order_release);
	}
	if (!ps->server)
		ps->server_done = true;
	if (ps_setup_counts(ps))
		goto fail;
	*nodes = malloc(*n * sizeof(**nodes));
	if (!*nodes)
		goto fail;
	memcpy(*nodes, nl, *n * sizeof(**nodes));
	*out = ps;
	return 0;
fail:
	cs_svc_ps_free(ps);
	snprintf(err, elen, "no memory");
	return -ENOMEM;
}

void cs_svc_ps_free(struct cs_svc_ps *ps)
{
	if (!ps)
		return;
	cs_ps_worker_destroy(ps->w);
	if (ps->spill && ps->st) {
		char sum[320];

		cs_ps_store_spill_summary(ps->st, PS_TABLE, sum, sizeof(sum));
		CS_INFO("ps job: spill file %s removed: %s", ps->spill_path,
			sum);
	}
	cs_ps_store_destroy(ps->st);
	cs_ps_spill_close(ps->spill); /* removes the file */
	cs_ps_flow_destroy(ps->flow);
	cs_ps_shardmap_fini(&ps->map);
	cs_ps_pat_fini(&ps->pat);
	free(ps->tot);
	free(ps->lo);
	free(ps->own);
	free(ps->lat);
	free(ps->keys);
	free(ps->grads);
	free(ps->pulled);
	free(ps);
}

struct cs_ps_flow *cs_svc_ps_flow(struct cs_svc_ps *ps)
{
	return ps->flow;
}

/*
 * Two pushes a server must refuse, with nothing applied: one for a table
 * nobody serves (-ENOENT), one of the job's table with rows one value
 * longer (-EBADMSG). The second takes push id CS_PS_DEDUP_WINDOW - 1 of
 * worker 0 at that server, which the job's own pushes never reach (bad=1
 * jobs are short: ps_start refuses more versions).
 */
static int ps_send_bad(struct cs_svc_ps *ps)
{
	uint8_t buf[CS_PS_WIRE_HDR + 8 + 4 * (PS_DIM_MAX + 1)];
	float row[PS_DIM_MAX + 1] = { 0 };
	uint32_t srv = cs_ps_shard_of(&ps->map, PS_TABLE, 0);

	for (int k = 0; k < 2; k++) {
		struct cs_ps_msg m = { .type = CS_PS_MSG_PUSH,
				       .table = k ? PS_TABLE : PS_TABLE + 1,
				       .worker = (uint32_t)ps->my_wrank,
				       .id = k ? CS_PS_DEDUP_WINDOW - 1 : 0,
				       .nparts = 1,
				       .nkeys = 1,
				       .dim = ps->spec.dim + 1,
				       .dtype = CS_F32 };
		size_t len = cs_ps_wire_len(m.type, 1, m.dim, m.dtype, 0);
		int ret;

		if (!len || len > sizeof(buf))
			return -EINVAL;
		cs_ps_wire_put_hdr(buf, &m);
		cs_ps_wire_put_key(buf, 0, 0);
		cs_ps_wire_put_row(buf, &m, 0, row);
		ret = cs_ps_flow_send(ps->flow, srv, buf, len);
		if (ret)
			return ret;
	}
	return 0;
}

/* Issue step it: a push of version it and/or a pull (ps_pattern). */
static void ps_step(struct cs_svc_ps *ps, cs_ns_t now)
{
	uint32_t w = (uint32_t)ps->my_wrank, kpp = ps->pat.kpp;
	bool timed = ps->it >= ps->warm && ps->it < ps->warm + ps->iters;
	bool push, pull;
	uint64_t op, clock;
	int ret = 0;

	switch (ps->pattern) {
	case PS_PUSH:
		push = ps->it < ps->versions;
		pull = !push;
		clock = ps->versions;
		break;
	case PS_PULL:
		push = ps->it < ps->warm;
		pull = true;
		clock = push ? ps->it + 1u : ps->warm;
		break;
	default:
		push = pull = true;
		clock = ps->it + 1u;
		break;
	}
	/* keys of this step; the final pull of a push job asks for the
	 * keys of the last version */
	cs_ps_pat_keys(&ps->pat, w,
		       ps->pattern == PS_PUSH && pull ? ps->versions - 1
						      : ps->it,
		       ps->keys);
	if (push) {
		cs_ps_pat_grads(&ps->pat, ps->keys, kpp, ps->grads);
		ret = cs_ps_worker_push(ps->w, PS_TABLE, ps->it, ps->keys,
					ps->grads, kpp, now, &op);
		ps->inflight += !ret;
		ps->pushes += !ret;
	}
	if (!ret && pull) {
		ret = cs_ps_worker_pull(ps->w, PS_TABLE, clock, ps->keys, kpp,
					ps->pulled, now, &op);
		ps->inflight += !ret;
		ps->pulls += !ret;
	}
	if (ret) {
		ps_fail(ps, ret, "worker: push/pull refused");
		return;
	}
	ps->pushed = push;
	ps->pull_clock = pull ? clock : 0;
	if (timed)
		ps->rows_timed += (uint64_t)kpp * (push + pull);
	if (ps->it == ps->warm)
		ps->t_timed = now;
	ps->t_step = now;
	ps->it++;
}

/*
 * The step in flight completed: count its push, check its pull. A row of
 * a pull at clock c has seen every worker's pushes of versions < c (sync),
 * those of versions < c - s at least (ssp:s), this worker's own completed
 * pushes at least (async), and never more than the job's pushes.
 */
static void ps_step_done(struct cs_svc_ps *ps, cs_ns_t now)
{
	uint32_t kpp = ps->pat.kpp, d = ps->spec.dim, s = ps->spec.staleness;
	uint32_t step = ps->it - 1;

	if (step >= ps->warm && step < ps->warm + ps->iters) {
		ps->lat[step - ps->warm] = now - ps->t_step;
		ps->t_timed_end = now;
	}
	if (ps->pull_clock) {
		uint64_t lo_v =
			cs_ps_pat_lo_version(ps->spec.mode, s, ps->pull_clock);

		if (lo_v > ps->lo_v) {
			cs_ps_pat_count(&ps->pat, ps->lo_v, lo_v, ps->lo);
			ps->lo_v = lo_v;
		}
		for (uint32_t i = 0; i < kpp; i++) {
			uint64_t k = ps->keys[i], lo, hi;

			cs_ps_pat_bounds(ps->spec.mode, ps->lo[k], ps->own[k],
					 ps->tot[k], &lo, &hi);
			ps->wrong += cs_ps_pat_check(&ps->pat, k,
						     ps->pulled + (size_t)i * d,
						     lo, hi) != 0;
			ps->checked++;
		}
	}
	/* the pull of this step went out after its push: own pushes
	 * count from the next pull on */
	if (ps->pushed)
		for (uint32_t i = 0; i < kpp; i++)
			ps->own[ps->keys[i]]++;
}

/*
 * This server's shard against the job's totals, exactly, PS_CHECK_KEYS
 * keys per poll: the lcore that checks also serves the network, and a
 * worker still in its last step (a late one) needs this node's ACKs and
 * replies meanwhile. Checked in one go, a 100,000-row table of 1 KiB rows
 * kept this node from polling for 30-50 ms, and the late worker's step
 * took that long. Returns true once every key was looked at.
 */
#define PS_CHECK_KEYS 2048u

static bool ps_check_shard(struct cs_svc_ps *ps)
{
	uint64_t end = ps->check_k + PS_CHECK_KEYS;
	float row[PS_DIM_MAX];

	if (end > ps->spec.key_max)
		end = ps->spec.key_max;
	for (uint64_t k = ps->check_k; k < end; k++) {
		if (cs_ps_shard_of(&ps->map, PS_TABLE, k) != ps->rank)
			continue;
		if (cs_ps_store_peek(ps->st, PS_TABLE, k, row) ||
		    cs_ps_pat_check(&ps->pat, k, row, ps->tot[k], ps->tot[k]))
			ps->shard_wrong++;
		ps->checked++;
		ps->shard_rows++;
	}
	ps->check_k = end;
	return end == ps->spec.key_max;
}

static int ps_cmp_ns(const void *a, const void *b)
{
	cs_ns_t x = *(const cs_ns_t *)a, y = *(const cs_ns_t *)b;

	return x < y ? -1 : x > y;
}

static void ps_finish(struct cs_svc_ps *ps, cs_ns_t now)
{
	double secs = (double)(now - ps->t0) / 1e9, tsecs = 0;
	const struct cs_ps_store_stats *ss =
		ps->st ? cs_ps_store_stats(ps->st) : NULL;
	const struct cs_ps_worker_stats *ws =
		ps->w ? cs_ps_worker_stats(ps->w) : NULL;
	struct cs_ps_flow_stats fs;
	double p50 = 0, p99 = 0;

	if (ps->w) {
		qsort(ps->lat, ps->iters, sizeof(*ps->lat), ps_cmp_ns);
		p50 = (double)ps->lat[(ps->iters - 1) / 2] / 1e3;
		p99 = (double)ps->lat[(uint32_t)ceil(0.99 * ps->iters) - 1] /
		      1e3;
		tsecs = (double)(ps->t_timed_end - ps->t_timed) / 1e9;
	}
	cs_ps_flow_get_stats(ps->flow, &fs);
	snprintf(ps->summary, sizeof(ps->summary),
		 "role=%s pattern=%s mode=%s pushes=%" PRIu64 " pulls=%" PRIu64
		 " rows_checked=%" PRIu64 " wrong=%" PRIu64
		 " shard_wrong=%" PRIu64 " grads_in=%" PRIu64
		 " push_dup=%" PRIu64 " push_early=%" PRIu64
		 " rejected=%" PRIu64 " worker_retx=%" PRIu64
		 " msgs_sent=%" PRIu64 " msgs_local=%" PRIu64
		 " secs=%.6f timed_secs=%.6f"
		 " timed_rows=%" PRIu64 " p50_us=%.1f p99_us=%.1f"
		 " shard_rows=%" PRIu64 " shard_mem_rows=%" PRIu64
		 " spill_rd=%" PRIu64 " spill_rd_async=%" PRIu64
		 " spill_rd_push=%" PRIu64 " flow_rx_bad=%" PRIu64
		 " flow_frag_bad=%" PRIu64 " send_err=%" PRIu64
		 " pull_busy=%" PRIu64 " pull_dup=%" PRIu64
		 " retx_push=%" PRIu64 " retx_pull=%" PRIu64
		 " pull_waits=%" PRIu64 " dup_replies=%" PRIu64
		 " bad_replies=%" PRIu64 " max_poll_gap_us=%.0f",
		 ps->server && ps->my_wrank >= 0 ? "both"
		 : ps->server			 ? "server"
						 : "worker",
		 ps_pattern_names[ps->pattern], cs_ps_mode_name(ps->spec.mode),
		 ps->pushes, ps->pulls, ps->checked, ps->wrong, ps->shard_wrong,
		 ss ? ss->grads_in : 0, ss ? ss->push_dup : 0,
		 ss ? ss->push_early : 0, ss ? ss->rejected : 0,
		 ws ? ws->retransmits : 0, fs.sent, fs.local, secs, tsecs,
		 ps->rows_timed, p50, p99, ps->shard_rows, ps->in_mem,
		 ss ? ss->spill_reads : 0, ss ? ss->spill_reads_async : 0,
		 ss ? ss->push_reads_async : 0, fs.rx_bad, fs.frag_bad,
		 ps->send_err, ss ? ss->pull_busy : 0, ss ? ss->pull_dup : 0,
		 ws ? ws->retx_push : 0, ws ? ws->retx_pull : 0,
		 ws ? ws->pull_waits : 0, ws ? ws->dup_replies : 0,
		 ws ? ws->bad_replies : 0, (double)ps->max_gap / 1e3);
	atomic_store_explicit(&ps->final, 1, memory_order_release);
}

/* Sync: every version applied. Async and ssp: every push taken (the
 * flush before this applied it). */
static bool ps_shard_complete(struct cs_svc_ps *ps)
{
	/* what this node took from itself since the last flush */
	if (cs_ps_store_flush(ps->st))
		return false;
	/* pushes' updates parked for their rows on disk: not yet */
	if (cs_ps_store_io_pending(ps->st))
		return false;
	if (ps->spec.mode == CS_PS_SYNC)
		return cs_ps_store_clock(ps->st, PS_TABLE) >= ps->versions;
	return cs_ps_store_stats(ps->st)->grads_in >= ps->grads_want;
}

/* The worker's own timer resent messages: the core did not deliver them
 * or their replies within rto (log it, with where the flow stands). */
static void ps_log_retx(struct cs_svc_ps *ps)
{
	const struct cs_ps_worker_stats *ws = cs_ps_worker_stats(ps->w);
	struct cs_ps_flow_stats fs;

	if (ws->retransmits == ps->retx_logged)
		return;
	cs_ps_flow_get_stats(ps->flow, &fs);
	CS_WARN("ps job: the worker's timer resent %" PRIu64
		" message(s) at step %u (pushes %" PRIu64 " pulls %" PRIu64
		" in all; pull waits %" PRIu64 "; flow sent=%" PRIu64
		" acked=%" PRIu64 " rx=%" PRIu64 " rx_bad=%" PRIu64
		" frag_bad=%" PRIu64 " backlog=%" PRIu64
		"; store push_dup=%" PRIu64 " push_early=%" PRIu64
		" pull_dup=%" PRIu64 " pull_busy=%" PRIu64 ")",
		ws->retransmits - ps->retx_logged, ps->it, ws->retx_push,
		ws->retx_pull, ws->pull_waits, fs.sent, fs.acked, fs.rx,
		fs.rx_bad, fs.frag_bad, cs_ps_flow_backlog(ps->flow),
		ps->st ? cs_ps_store_stats(ps->st)->push_dup : 0,
		ps->st ? cs_ps_store_stats(ps->st)->push_early : 0,
		ps->st ? cs_ps_store_stats(ps->st)->pull_dup : 0,
		ps->st ? cs_ps_store_stats(ps->st)->pull_busy : 0);
	ps->retx_logged = ws->retransmits;
}

unsigned cs_svc_ps_poll(struct cs_svc_ps *ps, cs_ns_t now)
{
	unsigned work = 0;

	/* after this node's verdict it still serves its peers (a late pull,
	 * the last replies) until the job is forgotten */
	if (!ps->t0)
		ps->t0 = now;
	if (ps->last_poll && now - ps->last_poll > ps->max_gap) {
		ps->max_gap = now - ps->last_poll;
		if (ps->max_gap >= CS_NS_PER_S)
			CS_WARN("ps job: this node's lcore did not poll the "
				"job for %.3f s (step %u)",
				(double)ps->max_gap / 1e9, ps->it);
	}
	ps->last_poll = now;
	/* what this node sent itself (a server and worker both here) */
	while (cs_ps_flow_drain_local(ps->flow, now, 256))
		work++;
	if (ps->st && cs_ps_store_flush(ps->st)) {
		ps_fail(ps, -EIO, "store: flush failed");
		return work;
	}
	work += cs_ps_flow_drain_local(ps->flow, now, 256);
	if (ps->st && cs_ps_store_io_pending(ps->st))
		work++; /* reads in flight: poll again soon */
	if (atomic_load_explicit(&ps->final, memory_order_relaxed))
		return work;
	if (ps->w) {
		if (ps->op_err) {
			char why[128];

			snprintf(why, sizeof(why),
				 "worker: op failed: %d (server %u) at "
				 "step %u",
				 ps->op_err, ps->op_peer, ps->it);
			ps_fail(ps, ps->op_err, why);
			return work;
		}
		if (!atomic_load_explicit(&ps->go, memory_order_acquire)) {
			/* not before every node posted its flow */
		} else if (ps->inflight || ps->worker_done) {
			/* the step in flight, or all done */
		} else {
			if (ps->it)
				ps_step_done(ps, now);
			else if (ps->bad && ps->my_wrank == 0 &&
				 ps_send_bad(ps))
				ps_fail(ps, -EIO,
					"worker: bad pushes not sent");
			if (ps->it < ps->steps) {
				ps_step(ps, now);
				work++;
			} else {
				ps->worker_done = true;
				atomic_store_explicit(&ps->steps_done, true,
						      memory_order_release);
			}
		}
		cs_ps_worker_tick(ps->w, now);
		ps_log_retx(ps);
	}
	/* a server checks its shard once every worker of the job did its
	 * last step (ps_check, sent by `collstack run ps` after every
	 * node's ps_steps): checking earlier takes CPU from the workers
	 * still timing their steps (in a pull job the shards are complete
	 * after the warm-up pushes: the first timed pulls took 6-17 ms
	 * where the others took 2 ms; at the end, the last worker's last
	 * steps 2-4 ms) */
	if (ps->st && !ps->server_done && !ps->checking &&
	    atomic_load_explicit(&ps->check_go, memory_order_acquire) &&
	    ps_shard_complete(ps))
		ps->checking = true;
	if (ps->checking && !ps_check_shard(ps)) {
		work++; /* more keys to check: no idle wait */
	} else if (ps->checking) {
		cs_ps_store_nrows(ps->st, PS_TABLE, &ps->held, &ps->in_mem);
		ps->wrong += ps->shard_wrong;
		ps->checking = false;
		ps->server_done = true;
	}
	if (ps->worker_done && ps->server_done)
		ps_finish(ps, now);
	return work;
}

int cs_svc_ps_result(struct cs_svc_ps *ps, char *out, size_t len)
{
	int f = atomic_load_explicit(&ps->final, memory_order_acquire);
	struct cs_ps_flow_stats fs;

	if (f) {
		snprintf(out, len, "%s", ps->summary);
		return f;
	}
	/* running: where it stands (read racily, for a report only) */
	cs_ps_flow_get_stats(ps->flow, &fs);
	snprintf(out, len,
		 "step=%u inflight=%u rejected=%" PRIu64 " flow_sent=%" PRIu64
		 " flow_acked=%" PRIu64 " flow_rx=%" PRIu64
		 " flow_rebuilt=%" PRIu64,
		 ps->it, ps->inflight,
		 ps->st ? cs_ps_store_stats(ps->st)->rejected : 0, fs.sent,
		 fs.acked, fs.rx, fs.rebuilt);
	return 0;
}

/* ---- control requests (collstack run ps) -------------------------------- */

static void ps_start(struct cs_core_svc *s, const char *args, char *out,
		     size_t len)
{
	char err[160] = "";
	uint32_t self, npeers, *nodes = NULL, n = 0;
	struct cs_svc_ps *ps;
	unsigned op_id;
	int skip = 0, ret;

	if (sscanf(args, "%u %n", &op_id, &skip) != 1 || !skip) {
		snprintf(out, len,
			 "err usage: ps_start OP ROLES ITERS ROWS "
			 "DIM KPP N0,N1,...");
		return;
	}
	cs_core_svc_view(s, &self, &npeers);
	ret = cs_svc_ps_create(
		args + skip, self, npeers, cs_core_svc_frame_payload(s), op_id,
		cs_core_svc_ps_cfg(s), &nodes, &n, &ps, err, sizeof(err));
	if (ret) {
		snprintf(out, len, "err %s", err);
		return;
	}
	ret = cs_core_svc_ps_post(s, op_id, ps, nodes, n);
	if (ret) {
		cs_svc_ps_free(ps);
		free(nodes);
		snprintf(out, len, "err %s",
			 ret == -EBUSY ? "a PS job runs (ps_forget it first)"
				       : "no memory");
		return;
	}
	snprintf(out, len, "ok op=%u n=%u", op_id, n);
}

static void ps_wait(struct cs_core_svc *s, const char *args, char *out,
		    size_t len)
{
	char res[1024];
	unsigned ms;
	struct timespec ts = { 0, 1000000 };
	struct cs_svc_ps *ps;
	struct cs_ps_flow_stats fs;
	uint32_t culprit = UINT32_MAX;
	int f = 0, status = 0;

	ps = cs_core_svc_ps_job(s, &status, &culprit);
	if (sscanf(args, "%u", &ms) != 1 || !ps) {
		snprintf(out, len, "err usage: ps_wait MS (after ps_start)");
		return;
	}
	for (unsigned t = 0;; t++) {
		f = cs_svc_ps_result(ps, res, sizeof(res));
		if (f || status || t >= ms)
			break;
		nanosleep(&ts, NULL);
		(void)cs_core_svc_ps_job(s, &status, &culprit);
	}
	cs_ps_flow_get_stats(ps->flow, &fs);
	if (f > 0)
		snprintf(out, len, "ok %s", res);
	else if (f < 0)
		snprintf(out, len,
			 "err %s (flow_sent=%" PRIu64 " flow_rx=%" PRIu64
			 " flow_rebuilt=%" PRIu64 ")",
			 res, fs.sent, fs.rx, fs.rebuilt);
	else if (status)
		snprintf(out, len, "err the PS flow failed: %s (rank %d)",
			 cs_strerror(status),
			 culprit == UINT32_MAX ? -1 : (int)culprit);
	else
		snprintf(out, len, "err timed out after %u ms: %s", ms, res);
}

/* Until this node's worker did its last step (at once for a server-only
 * node), the job failed, or MS ms passed. */
static void ps_steps(struct cs_core_svc *s, const char *args, char *out,
		     size_t len)
{
	struct timespec ts = { 0, 1000000 };
	uint32_t culprit = UINT32_MAX;
	struct cs_svc_ps *ps;
	int status = 0, f = 0;
	char res[1024];
	unsigned ms;

	ps = cs_core_svc_ps_job(s, &status, &culprit);
	if (sscanf(args, "%u", &ms) != 1 || !ps) {
		snprintf(out, len, "err usage: ps_steps MS (after ps_start)");
		return;
	}
	for (unsigned t = 0;; t++) {
		if (atomic_load_explicit(&ps->steps_done,
					 memory_order_acquire)) {
			snprintf(out, len, "ok");
			return;
		}
		f = cs_svc_ps_result(ps, res, sizeof(res));
		if (f < 0) {
			snprintf(out, len, "err %s", res);
			return;
		}
		if (status) {
			snprintf(out, len,
				 "err the PS flow failed: %s (rank %d)",
				 cs_strerror(status),
				 culprit == UINT32_MAX ? -1 : (int)culprit);
			return;
		}
		if (t >= ms)
			break;
		nanosleep(&ts, NULL);
		(void)cs_core_svc_ps_job(s, &status, &culprit);
	}
	snprintf(out, len, "err timed out after %u ms: %s", ms, res);
}

int cs_svc_ps_ctl(struct cs_core_svc *s, const char *req, const char *args,
		  char *out, size_t len)
{
	struct cs_svc_ps *ps;
	uint32_t culprit;
	int status;

	if (!strcmp(req, "ps_start")) {
		ps_start(s, args, out, len);
	} else if (!strcmp(req, "ps_wait")) {
		ps_wait(s, args, out, len);
	} else if (!strcmp(req, "ps_go")) {
		ps = cs_core_svc_ps_job(s, &status, &culprit);
		if (ps) {
			atomic_store_explicit(&ps->go, true,
					      memory_order_release);
			cs_core_svc_ps_kick(s); /* its lcore may be idle */
		}
		snprintf(out, len, ps ? "ok" : "err no PS job (ps_start)");
	} else if (!strcmp(req, "ps_steps")) {
		ps_steps(s, args, out, len);
	} else if (!strcmp(req, "ps_check")) {
		ps = cs_core_svc_ps_job(s, &status, &culprit);
		if (ps) {
			atomic_store_explicit(&ps->check_go, true,
					      memory_order_release);
			cs_core_svc_ps_kick(s);
		}
		snprintf(out, len, ps ? "ok" : "err no PS job (ps_start)");
	} else if (!strcmp(req, "ps_forget")) {
		status = cs_core_svc_ps_end(s);
		snprintf(out, len,
			 status == -ENOENT ? "ok none"
			 : status	   ? "err no memory"
					   : "ok");
	} else {
		return -ENOENT;
	}
	return 0;
}

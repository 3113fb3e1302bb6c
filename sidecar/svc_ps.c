// SPDX-License-Identifier: MIT
/*
 * collstackd's parameter-server service (svc_ps.h): one PS job's store
 * and worker engine on the lcore, their messages through a cs_ps_flow.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collectives/ps/ps.h"
#include "svc_core.h"
#include "svc_ps.h"

#define PS_TABLE 1u
#define PS_LR 0.5f
#define PS_NODES_MAX 64u

struct cs_svc_ps {
	uint32_t n, rank; /* group */
	uint32_t workers; /* ranks with a worker */
	uint32_t wrank_node[PS_NODES_MAX]; /* worker rank -> group rank */
	int32_t my_wrank; /* -1: no worker here */
	bool server;
	uint32_t iters, kpp;
	struct cs_ps_table_spec spec;
	struct cs_ps_shardmap map;
	struct cs_ps_flow *flow;
	struct cs_ps_store *st;
	struct cs_ps_worker *w;
	/* lcore: the worker's progress */
	uint32_t it;
	uint32_t inflight;
	int op_err;
	uint32_t op_peer;
	uint64_t *keys;
	float *grads, *pulled;
	uint64_t pushes, pulls;
	cs_ns_t t0, t_end;
	bool worker_done, server_done;
	uint64_t wrong, checked;
	/* lcore -> control */
	char summary[512];
	atomic_int final; /* 0 running, 1 done, < 0 failed */
	atomic_bool go; /* control -> lcore: every node's flow is posted */
};

/* Gradient (worker, iteration, slot, value): multiples of 1/4. */
static float ps_grad(uint32_t w, uint32_t t, uint32_t i, uint32_t j)
{
	return (float)((int)((w * 7 + t * 3 + i * 5 + j) % 9) - 4) / 4.0f;
}

static uint64_t ps_key(const struct cs_svc_ps *ps, uint32_t w, uint32_t t,
		       uint32_t i)
{
	return (i * 2654435761u + w * 40503u + t * 977u) % ps->spec.key_max;
}

/* The serial reference of one row after @iters versions. */
static void ps_ref_row(const struct cs_svc_ps *ps, uint64_t key, float *row)
{
	uint32_t d = ps->spec.dim;

	for (uint32_t j = 0; j < d; j++)
		row[j] = 1.0f;
	for (uint32_t t = 0; t < ps->iters; t++) {
		bool touched = false;
		float g[CS_PS_DIM_MAX > 256 ? 256 : CS_PS_DIM_MAX] = { 0 };

		for (uint32_t w = 0; w < ps->workers; w++)
			for (uint32_t i = 0; i < ps->kpp; i++) {
				if (ps_key(ps, w, t, i) != key)
					continue;
				touched = true;
				for (uint32_t j = 0; j < d; j++)
					g[j] += ps_grad(w, t, i, j);
			}
		for (uint32_t j = 0; touched && j < d; j++)
			row[j] -= PS_LR * g[j];
	}
}

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

	if (worker >= ps->workers)
		return -EINVAL;
	return cs_ps_flow_send(ps->flow, ps->wrank_node[worker], msg, len);
}

static int ps_wk_send(void *ctx, uint32_t server, const void *msg, size_t len)
{
	struct cs_svc_ps *ps = ctx;

	return cs_ps_flow_send(ps->flow, server, msg, len);
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

int cs_svc_ps_create(const char *args, uint32_t self, uint32_t npeers,
		     uint32_t mss, uint32_t **nodes, uint32_t *n,
		     struct cs_svc_ps **out, char *err, size_t elen)
{
	char roles[PS_NODES_MAX + 1], list[1024];
	uint32_t nl[PS_NODES_MAX], srv[PS_NODES_MAX], nsrv = 0;
	unsigned iters, rows, dim, kpp;
	int64_t me;
	struct cs_svc_ps *ps;
	int ret = -ENOMEM;

	if (sscanf(args, "%64s %u %u %u %u %1023s", roles, &iters, &rows, &dim,
		   &kpp, list) != 6 ||
	    !iters || iters > 10000 || rows < 1 || !dim || dim > 256 || !kpp ||
	    kpp > 4096) {
		snprintf(err, elen,
			 "usage: ps_start ROLES(s|w|b per node) ITERS ROWS "
			 "DIM(1-256) KPP(1-4096) N0,N1,...");
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
	ps->kpp = kpp;
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
	ps->spec.mode = CS_PS_SYNC;
	ps->spec.workers = ps->workers;
	cs_ps_opt_defaults(&ps->spec.opt, CS_PS_OPT_SGD);
	ps->spec.opt.lr = PS_LR;
	ps->spec.init.kind = CS_PS_INIT_CONST;
	ps->spec.init.scale = 1.0f;
	atomic_init(&ps->final, 0);
	atomic_init(&ps->go, false);
	if (cs_ps_shardmap_init(&ps->map, srv, nsrv, 64))
		goto out_free;
	if (cs_ps_flow_create(ps->n, ps->rank, mss, ps_rx, ps, &ps->flow))
		goto out_map;
	if (ps->server) {
		struct cs_ps_store_cfg sc = { .server = ps->rank,
					      .map = &ps->map,
					      .msg_max = mss,
					      .parked_max = 4096 };
		struct cs_ps_store_io sio = { ps_st_send, ps };

		if (cs_ps_store_create(&ps->st, &sc, &sio) ||
		    cs_ps_store_add_table(ps->st, &ps->spec, 0, NULL))
			goto out_parts;
	}
	if (ps->my_wrank >= 0) {
		/* the core's sessions retransmit; the worker's own timer
		 * (1 s) only covers a core that was replaced */
		struct cs_ps_worker_cfg wc = { .rank = (uint32_t)ps->my_wrank,
					       .map = &ps->map,
					       .msg_max = mss,
					       .rto = CS_NS_PER_S,
					       .rto_max = CS_NS_PER_S };
		struct cs_ps_worker_io wio = { ps_wk_send, ps_wk_done, ps };

		ps->keys = calloc(kpp, sizeof(*ps->keys));
		ps->grads = calloc((size_t)kpp * dim, sizeof(float));
		ps->pulled = calloc((size_t)kpp * dim, sizeof(float));
		if (!ps->keys || !ps->grads || !ps->pulled ||
		    cs_ps_worker_create(&ps->w, &wc, &wio) ||
		    cs_ps_worker_add_table(ps->w, &ps->spec))
			goto out_parts;
	} else {
		ps->worker_done = true;
	}
	if (!ps->server)
		ps->server_done = true;
	*nodes = malloc(*n * sizeof(**nodes));
	if (!*nodes)
		goto out_parts;
	memcpy(*nodes, nl, *n * sizeof(**nodes));
	*out = ps;
	return 0;
out_parts:
	cs_ps_worker_destroy(ps->w);
	cs_ps_store_destroy(ps->st);
	cs_ps_flow_destroy(ps->flow);
	free(ps->keys);
	free(ps->grads);
	free(ps->pulled);
out_map:
	cs_ps_shardmap_fini(&ps->map);
out_free:
	free(ps);
	snprintf(err, elen, "no memory");
	return ret;
}

void cs_svc_ps_free(struct cs_svc_ps *ps)
{
	if (!ps)
		return;
	cs_ps_worker_destroy(ps->w);
	cs_ps_store_destroy(ps->st);
	cs_ps_flow_destroy(ps->flow);
	cs_ps_shardmap_fini(&ps->map);
	free(ps->keys);
	free(ps->grads);
	free(ps->pulled);
	free(ps);
}

struct cs_ps_flow *cs_svc_ps_flow(struct cs_svc_ps *ps)
{
	return ps->flow;
}

/* Push iteration it, then pull at clock it + 1 (sync: after it). */
static void ps_step(struct cs_svc_ps *ps, cs_ns_t now)
{
	uint32_t w = (uint32_t)ps->my_wrank, d = ps->spec.dim;
	uint64_t op;
	int ret;

	for (uint32_t i = 0; i < ps->kpp; i++) {
		ps->keys[i] = ps_key(ps, w, ps->it, i);
		for (uint32_t j = 0; j < d; j++)
			ps->grads[i * d + j] = ps_grad(w, ps->it, i, j);
	}
	ret = cs_ps_worker_push(ps->w, PS_TABLE, ps->it, ps->keys, ps->grads,
				ps->kpp, now, &op);
	if (!ret)
		ret = cs_ps_worker_pull(ps->w, PS_TABLE, ps->it + 1, ps->keys,
					ps->kpp, ps->pulled, now, &op);
	if (ret) {
		ps_fail(ps, ret, "worker: push/pull refused");
		return;
	}
	ps->inflight += 2;
	ps->pushes++;
	ps->pulls++;
	ps->it++;
}

/* The rows of the last pull against the reference. */
static void ps_check_pull(struct cs_svc_ps *ps)
{
	float ref[256];
	uint32_t d = ps->spec.dim;

	for (uint32_t i = 0; i < ps->kpp; i++) {
		ps_ref_row(ps, ps->keys[i], ref);
		ps->wrong += memcmp(ref, ps->pulled + (size_t)i * d,
				    d * sizeof(float)) != 0;
		ps->checked++;
	}
}

/* This server's shard against the reference. */
static void ps_check_shard(struct cs_svc_ps *ps)
{
	float ref[256], row[256];

	for (uint64_t k = 0; k < ps->spec.key_max; k++) {
		if (cs_ps_shard_of(&ps->map, PS_TABLE, k) != ps->rank)
			continue;
		ps_ref_row(ps, k, ref);
		if (cs_ps_store_peek(ps->st, PS_TABLE, k, row)) {
			ps->wrong++;
			continue;
		}
		ps->wrong +=
			memcmp(ref, row, ps->spec.dim * sizeof(float)) != 0;
		ps->checked++;
	}
}

static void ps_finish(struct cs_svc_ps *ps, cs_ns_t now)
{
	double secs = (double)(now - ps->t0) / 1e9;
	const struct cs_ps_store_stats *ss =
		ps->st ? cs_ps_store_stats(ps->st) : NULL;
	struct cs_ps_flow_stats fs;

	cs_ps_flow_get_stats(ps->flow, &fs);
	snprintf(ps->summary, sizeof(ps->summary),
		 "role=%s pushes=%" PRIu64 " pulls=%" PRIu64
		 " rows_checked=%" PRIu64 " wrong=%" PRIu64 " grads_in=%" PRIu64
		 " push_dup=%" PRIu64 " rejected=%" PRIu64 " msgs_sent=%" PRIu64
		 " msgs_local=%" PRIu64 " secs=%.6f",
		 ps->server && ps->my_wrank >= 0 ? "both"
		 : ps->server			 ? "server"
						 : "worker",
		 ps->pushes, ps->pulls, ps->checked, ps->wrong,
		 ss ? ss->grads_in : 0, ss ? ss->push_dup : 0,
		 ss ? ss->rejected : 0, fs.sent, fs.local, secs);
	atomic_store_explicit(&ps->final, 1, memory_order_release);
}

unsigned cs_svc_ps_poll(struct cs_svc_ps *ps, cs_ns_t now)
{
	unsigned work = 0;

	/* after this node's verdict it still serves its peers (a late pull,
	 * the last replies) until the job is forgotten */
	if (!ps->t0)
		ps->t0 = now;
	/* what this node sent itself (a server and worker both here) */
	while (cs_ps_flow_drain_local(ps->flow, now, 256))
		work++;
	if (ps->st && cs_ps_store_flush(ps->st)) {
		ps_fail(ps, -EIO, "store: flush failed");
		return work;
	}
	work += cs_ps_flow_drain_local(ps->flow, now, 256);
	if (atomic_load_explicit(&ps->final, memory_order_relaxed))
		return work;
	if (ps->w) {
		if (ps->op_err) {
			char why[128];

			snprintf(why, sizeof(why),
				 "worker: op failed: %d (server %u) at "
				 "iteration %u",
				 ps->op_err, ps->op_peer, ps->it);
			ps_fail(ps, ps->op_err, why);
			return work;
		}
		if (!atomic_load_explicit(&ps->go, memory_order_acquire)) {
			/* not before every node posted its flow */
		} else if (!ps->inflight && ps->it < ps->iters) {
			ps_step(ps, now);
			work++;
		} else if (!ps->inflight && !ps->worker_done) {
			ps_check_pull(ps);
			ps->worker_done = true;
		}
		cs_ps_worker_tick(ps->w, now);
	}
	if (ps->st && !ps->server_done &&
	    cs_ps_store_clock(ps->st, PS_TABLE) >= ps->iters) {
		ps_check_shard(ps);
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
		 "iteration=%u inflight=%u rejected=%" PRIu64
		 " flow_sent=%" PRIu64 " flow_acked=%" PRIu64
		 " flow_rx=%" PRIu64 " flow_rebuilt=%" PRIu64,
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
	ret = cs_svc_ps_create(args + skip, self, npeers,
			       CS_MIN(cs_core_svc_frame_payload(s), 1024u),
			       &nodes, &n, &ps, err, sizeof(err));
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
	char res[512];
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

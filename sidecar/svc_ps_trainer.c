// SPDX-License-Identifier: MIT
/*
 * collstackd's parameter-server tables for trainers (svc_ps_trainer.h):
 * a flow, a shard store and worker engines per table, driven by the lcore
 * that runs the flow; requests from the IPC side through a locked queue.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CS_LOG_MODULE "pst"
#include "collectives/ps/ps_io.h"
#include "collectives/ps/ps_wire.h"
#include "dataplane/lcore.h"
#include "internal/log.h"
#include "svc_core.h"
#include "svc_ps_trainer.h"
#include "transport/ps_flow.h"

/* Every table has this id in its own store and worker engines (each holds
 * one table; the flow says which table a message is for). */
#define PST_TABLE 0u
#define PST_VNODES 64u
#define PST_PARKED_MAX 4096u
/* The core's sessions retransmit; the worker's own timer only covers a
 * core that was replaced (as collstack run ps's workers). */
#define PST_RTO (1 * CS_NS_PER_S)
#define PST_RTO_MAX (5 * CS_NS_PER_S)
#define PST_KEY_MAX (CS_IPC_NAME_MAX + CS_IPC_PS_NAME_MAX + 16)
/* A checkpoint: writes in flight, bytes per chunk handed to the writer,
 * the length of one paced snapshot step, and the writer's backlog that
 * holds the next step back. */
#define PST_CKPT_QDEPTH 16u
#define PST_CKPT_CHUNK (1u << 20)
#define PST_CKPT_STEP_NS (200 * CS_NS_PER_US)
#define PST_CKPT_QUEUED_MAX ((size_t)64 << 20)
/* A restore loads the rows its reader thread kept in steps of this many
 * between the lcore's other work. */
#define PST_RESTORE_STEP_ROWS 4096u
/* The spill file's io_uring: reads (or writes) in flight at once; a
 * pull whose rows on disk are more than this is read the blocking way. */
#define PST_SPILL_QDEPTH 256u

const struct cs_cfg_entry cs_pst_cfg[] = {
	{ "ps.ckpt_share", CS_CFG_DOUBLE,
	  offsetof(struct cs_pst_cfg, ckpt_share), "0.05", 1e-4, 1,
	  "share of its lcore's time a trainer table's checkpoint may take "
	  "to copy rows out (cs_ps_checkpoint; pushes and pulls are served "
	  "in the rest)" },
	{ "ps.spill_dir", CS_CFG_STR, offsetof(struct cs_pst_cfg, spill_dir),
	  "/var/tmp", CS_CFG_NO_BOUNDS,
	  "directory (absolute) of the spill files of trainer tables created "
	  "with a mem_budget: the rows beyond the budget, one file per table "
	  "and node, removed when the table is destroyed or the sidecar "
	  "exits" },
	{ "ps.spill_async", CS_CFG_BOOL,
	  offsetof(struct cs_pst_cfg, spill_async), "1", CS_CFG_NO_BOUNDS,
	  "a pull of rows on disk starts their reads and is answered on a later "
	  "poll, the lcore serving on meanwhile (0: the lcore waits for the "
	  "reads, as pushes' rows always are)" },
};

const size_t cs_pst_cfg_len = CS_ARRAY_SIZE(cs_pst_cfg);

/* A push or pull the worker engine runs. */
struct pst_op {
	uint64_t op; /* the engine's id */
	bool done; /* finished while being issued: @rc, @peer */
	int rc;
	uint32_t peer;
	struct cs_ipc_ps_req *r; /* NULL once it timed out */
	void *out; /* a pull's rows: r->rows, or ours once r timed out */
	cs_ns_t deadline; /* 0: none */
	struct pst_op *next;
};

struct pst_table;

/* A checkpoint running on the table's lcore. */
struct pst_ckpt {
	struct cs_ps_ckpt *w; /* the writer; NULL: none running */
	struct cs_ps_snap_pace pace;
	bool snapping; /* snapshot steps remain */
	int rc; /* the snapshot's failure */
	uint64_t clock;
	struct cs_ipc_ps_req *r; /* the driving rank's request */
	char path[PATH_MAX];
	/* a restore: its reader thread, request and directory */
	struct cs_ps_restore *rs;
	struct cs_ipc_ps_req *rs_r;
	char dir[CS_IPC_PS_PATH_MAX];
};

/* One local rank's worker engine. */
struct pst_worker {
	struct pst_table *t;
	uint32_t rank;
	struct cs_ps_worker *w;
	struct pst_op *ops; /* in flight (lcore) */
	/* the op being handed to the engine, which may finish it before
	 * its id is known (a push that sends nothing) */
	struct pst_op *issuing;
	atomic_bool closing; /* set under p->lock: the rank closed it */
	struct pst_worker *next;
};

struct pst_table {
	struct cs_pst *p;
	struct pst_table *next; /* p->tables (IPC side) */
	char key[PST_KEY_MAX]; /* group / name # nonce */
	char name[CS_IPC_PS_NAME_MAX]; /* the table's, as created */
	uint32_t op_id;
	bool local_only; /* CS_PST_GROUP_LOCAL */
	struct cs_ps_table_spec spec;
	uint32_t n, self; /* flow ranks: nodes (or this one alone) */
	uint32_t nlocal; /* ranks here holding it open (IPC side) */
	struct cs_ps_shardmap map;
	struct cs_ps_flow *flow;
	struct cs_ps_store *st;
	struct cs_ps_uring_spill *spill; /* the SSD tier, or NULL */
	struct cs_ps_spill_ops spill_ops; /* its ops (ps.spill_async) */
	char spill_path[PATH_MAX];
	uint64_t mem_budget;
	uint32_t *wnode; /* worker rank -> flow rank, learnt from pushes */
	struct cs_core_flow *h; /* NULL once the IPC side took it over */
	/* IPC -> lcore, under p->lock */
	struct cs_ipc_ps_req *inq, **inq_tail;
	struct pst_worker *fresh; /* workers to link */
	atomic_bool pending;
	/* lcore (the IPC side's once the flow ended) */
	struct pst_worker *workers;
	bool wake;
	uint64_t rx_bad;
	struct pst_ckpt ck;
	/* IPC side, once the flow ended */
	int err;
	uint32_t culprit; /* a node, maybe with PST_VIEW_LOST */
	uint32_t nlost0; /* nodes lost from the view when it was made */
};

struct cs_pst {
	struct cs_core_svc *core;
	struct cs_pst_cfg cfg; /* ps.ckpt_share, ps.spill_dir, ... */
	pthread_mutex_t lock;
	struct pst_table *tables; /* IPC side */
};

/* ---- requests ------------------------------------------------------------ */

/* A culprit that left the view (the flow ended at a new view): its
 * sidecar rank with this bit, so that its requests say "node N was lost"
 * (CS_IPC_LOST_NODE) rather than "stopped answering". */
#define PST_VIEW_LOST 0x80000000u

/* The request is done: the IPC side's now (or freed, its trainer gone). */
static void req_finish(struct cs_ipc_ps_req *r, int status, uint32_t peer)
{
	bool view = peer != UINT32_MAX && (peer & PST_VIEW_LOST);

	r->status = status;
	r->peer = peer == UINT32_MAX ? -1 : (int32_t)(peer & ~PST_VIEW_LOST);
	r->detail = status != CS_ERR_PEER_LOST ? 0
		    : view		       ? CS_IPC_LOST_NODE
					       : CS_IPC_LOST_SESSION;
	if (atomic_exchange_explicit(&r->state, CS_IPC_PS_DONE,
				     memory_order_acq_rel) == CS_IPC_PS_ORPHAN)
		cs_ipc_ps_req_free(r);
}

/* The flow rank of a server as the trainers see it: a node. */
static uint32_t pst_node(const struct pst_table *t, uint32_t rank)
{
	uint32_t self, npeers;

	if (!t->local_only)
		return rank;
	cs_core_svc_view(t->p->core, &self, &npeers);
	return rank == 0 ? self : UINT32_MAX;
}

static void op_done(void *ctx, uint64_t id, int rc, uint32_t peer)
{
	struct pst_worker *w = ctx;

	for (struct pst_op **pp = &w->ops, *o; (o = *pp); pp = &o->next) {
		if (o->op != id)
			continue;
		*pp = o->next;
		if (o->r) {
			req_finish(o->r, rc,
				   rc ? pst_node(w->t, peer) : UINT32_MAX);
			w->t->wake = true;
		} else {
			free(o->out); /* it timed out: the rows are ours */
		}
		free(o);
		return;
	}
	if (w->issuing) { /* inside cs_ps_worker_push/pull */
		w->issuing->done = true;
		w->issuing->rc = rc;
		w->issuing->peer = peer;
	}
}

static int wk_send(void *ctx, uint32_t server, const void *msg, size_t len)
{
	struct pst_worker *w = ctx;

	return cs_ps_flow_send(w->t->flow, server, msg, len);
}

static int st_send(void *ctx, uint32_t worker, const void *msg, size_t len)
{
	struct pst_table *t = ctx;

	if (worker >= t->spec.workers || t->wnode[worker] == UINT32_MAX)
		return -EINVAL;
	return cs_ps_flow_send(t->flow, t->wnode[worker], msg, len);
}

/* End every request of @w with @err and free it (its engine too). */
static void worker_free(struct pst_worker *w, int err, uint32_t peer)
{
	for (struct pst_op *o = w->ops; o; o = o->next)
		if (o->r) {
			o->out = NULL; /* a pull's rows are the request's */
			req_finish(o->r, err, peer);
			o->r = NULL;
		}
	/* its ops end now (CS_ERR_CANCELLED): op_done() frees them */
	cs_ps_worker_reset(w->w);
	cs_ps_worker_destroy(w->w);
	free(w);
}

static struct pst_worker *worker_of(struct pst_table *t, uint32_t rank)
{
	for (struct pst_worker *w = t->workers; w; w = w->next)
		if (w->rank == rank &&
		    !atomic_load_explicit(&w->closing, memory_order_relaxed))
			return w;
	return NULL;
}

/* ---- checkpoint and restore (lcore) ------------------------------------- */

/* The node this shard serves from (the one a failure names). */
static uint32_t pst_self_node(const struct pst_table *t)
{
	return pst_node(t, t->self);
}

/*
 * Whether rank @wrank drives this node's shard for a checkpoint or
 * restore: the lowest rank of the group here (every local rank opened the
 * table before its create returned, so all are linked by now).
 */
static bool pst_driver(const struct pst_table *t, uint32_t wrank)
{
	for (const struct pst_worker *w = t->workers; w; w = w->next)
		if (w->rank < wrank &&
		    !atomic_load_explicit(&w->closing, memory_order_relaxed))
			return false;
	return true;
}

/* A checkpoint's or restore's outcome, in the trainer's result buffer
 * (struct cs_ipc_ps_ctl_result); the descriptor itself succeeds. */
static void ctl_finish_why(struct pst_table *t, struct cs_ipc_ps_req *r, int rc,
			   bool driver, uint64_t clock, uint32_t why,
			   uint32_t shard)
{
	struct cs_ipc_ps_ctl_result *v = r->rows;
	/* errno in the low byte of the high word, then the file's shard
	 * and why a restore refused it (ipc_proto.h) */
	uint64_t e = ((uint64_t)(why & 0xf) << 24) |
		     ((uint64_t)(shard & 0xffff) << 8) | ((uint64_t)-rc & 0xff);

	v->err = rc ? (int64_t)((e << 32) | pst_self_node(t)) : 0;
	v->clock = driver ? (int64_t)clock : INT64_MIN;
	v->nclock = driver ? -(int64_t)clock : INT64_MIN;
	req_finish(r, 0, UINT32_MAX);
	t->wake = true;
}

static void ctl_finish(struct pst_table *t, struct cs_ipc_ps_req *r, int rc,
		       bool driver, uint64_t clock)
{
	ctl_finish_why(t, r, rc, driver, clock, 0, 0);
}

/* <dir>/<table name>.shard<server>.ckpt, or -ENAMETOOLONG, or -EINVAL
 * for a table name that would name another folder (a '/' in it). */
static int ckpt_path(const struct pst_table *t, const char *dir, char *out,
		     size_t len)
{
	return cs_ps_ckpt_shard_path(out, len, dir, t->name, t->self);
}

/* @r's shard file in @path (PATH_MAX bytes), unless a checkpoint runs
 * here or the name does not fit: then @r is finished with that error
 * (-EBUSY, ...), which is returned. */
static int ctl_path(struct pst_table *t, struct cs_ipc_ps_req *r, char *path)
{
	int rc = t->ck.w || t->ck.rs ? -EBUSY
				     : ckpt_path(t, r->path, path, PATH_MAX);

	if (rc)
		ctl_finish(t, r, rc, true, 0);
	return rc;
}

/* Start this shard's checkpoint: the writer's thread, then the snapshot,
 * whose steps pst_ckpt_pump() runs. */
static void ckpt_begin(struct pst_table *t, struct cs_ipc_ps_req *r)
{
	struct cs_ps_snap_sink sink;
	char path[PATH_MAX];
	int rc;

	if (ctl_path(t, r, path))
		return;
	/* what is complete is applied first: a version every worker pushed
	 * before the checkpoint is in it */
	if (cs_ps_store_flush(t->st))
		CS_WARN("table %s: store flush failed", t->key);
	rc = cs_ps_ckpt_start(&t->ck.w, path, t->st, PST_TABLE, PST_CKPT_QDEPTH,
			      &sink);
	if (rc) {
		t->ck.w = NULL;
		ctl_finish(t, r, rc, true, 0);
		return;
	}
	rc = cs_ps_store_snap_begin(t->st, PST_TABLE, &sink, PST_CKPT_CHUNK);
	if (rc) { /* the writer waits for an end: give it one */
		sink.end(sink.ctx, 0, rc);
		(void)cs_ps_ckpt_wait(t->ck.w);
		t->ck.w = NULL;
		ctl_finish(t, r, rc, true, 0);
		return;
	}
	t->ck.clock = cs_ps_store_snap_clock(t->st);
	cs_ps_ckpt_set_clock(t->ck.w, t->ck.clock);
	/* which shard of which map: a restore onto other shards needs it */
	cs_ps_ckpt_set_shard(t->ck.w, t->self, t->n, PST_VNODES,
			     cs_ps_ckpt_name_tag(t->name));
	/* the share was validated when the config was read */
	(void)cs_ps_snap_pace_init(&t->ck.pace, t->p->cfg.ckpt_share,
				   PST_CKPT_STEP_NS);
	t->ck.snapping = true;
	t->ck.rc = 0;
	t->ck.r = r;
	memcpy(t->ck.path, path, sizeof(path));
}

/* The running checkpoint's next snapshot step, when the pacer lets it;
 * its request ends once the writer renamed the file into place. */
static unsigned ckpt_pump(struct pst_table *t, cs_ns_t now)
{
	cs_ns_t a;
	int rc;

	if (!t->ck.w)
		return 0;
	if (t->ck.snapping) {
		if (!cs_ps_snap_pace_due(&t->ck.pace, now))
			return 0;
		a = cs_lcore_now();
		rc = cs_ps_store_snap_step(t->st, t->ck.pace.rows);
		cs_ps_snap_pace_done(&t->ck.pace, a, cs_lcore_now(),
				     cs_ps_ckpt_queued(t->ck.w),
				     PST_CKPT_QUEUED_MAX);
		if (rc == 1)
			return 1;
		t->ck.snapping = false; /* ended: the sink was told */
		t->ck.rc = rc;
	}
	if (!cs_ps_ckpt_done(t->ck.w))
		return 0;
	rc = cs_ps_ckpt_wait(t->ck.w);
	t->ck.w = NULL;
	if (!rc)
		rc = t->ck.rc;
	if (rc)
		CS_WARN("table %s: checkpoint to %s failed: %s", t->key,
			t->ck.path, cs_strerror(rc));
	else
		CS_INFO("table %s: checkpoint %s written: clock %" PRIu64
			", %" PRIu64 " paced steps (the last of %u rows), "
			"held %" PRIu64 " times by the writer",
			t->key, t->ck.path, t->ck.clock, t->ck.pace.steps,
			t->ck.pace.rows, t->ck.pace.held);
	ctl_finish(t, t->ck.r, rc, true, t->ck.clock);
	t->ck.r = NULL;
	return 1;
}

/* The flow ended with a checkpoint running (IPC side, the lcore let go):
 * the snapshot is finished here, the writer waited for, and the request
 * ends with the flow's error. */
static void ckpt_abandon(struct pst_table *t)
{
	if (t->ck.rs) { /* the reader thread touches no store: wait */
		(void)cs_ps_restore_finish(t->ck.rs, NULL);
		t->ck.rs = NULL;
		req_finish(t->ck.rs_r, t->err, t->culprit);
		t->ck.rs_r = NULL;
	}
	if (!t->ck.w)
		return;
	while (t->ck.snapping && cs_ps_store_snap_step(t->st, UINT32_MAX) == 1)
		;
	t->ck.snapping = false;
	(void)cs_ps_ckpt_wait(t->ck.w);
	t->ck.w = NULL;
	if (t->ck.r) /* (freed there if its trainer is gone) */
		req_finish(t->ck.r, t->err, t->culprit);
	t->ck.r = NULL;
}

/*
 * Load this shard from a checkpoint, written by this table's layout or
 * another (resharding). Runs on the lcore (the store is its), right after
 * create: a reader thread (cs_ps_restore_start, its own io_uring) reads
 * and checks every file the new map needs and keeps this shard's rows;
 * restore_pump() loads them in steps once all passed, so the table is
 * left empty if a file is refused and the lcore serves its other flows
 * while the files are read.
 */
static void restore_run(struct pst_table *t, struct cs_ipc_ps_req *r)
{
	struct cs_ps_restore_src src;
	char path[PATH_MAX];
	int rc;

	if (ctl_path(t, r, path))
		return;
	snprintf(t->ck.dir, sizeof(t->ck.dir), "%s", r->path);
	src = (struct cs_ps_restore_src){ .dir = t->ck.dir,
					  .name = t->name,
					  .tag = cs_ps_ckpt_name_tag(t->name),
					  .map = &t->map,
					  .self = t->self };
	rc = cs_ps_restore_start(&t->ck.rs, t->st, PST_TABLE, &src);
	if (rc) {
		t->ck.rs = NULL;
		CS_WARN("table %s: restore from %s refused: %s", t->key,
			t->ck.dir, cs_strerror(rc));
		ctl_finish_why(t, r, rc, true, 0,
			       rc == -EEXIST ? CS_PS_RS_NOT_EMPTY : 0, 0);
		return;
	}
	t->ck.rs_r = r;
}

/* The running restore's next step, once its files are read. */
static unsigned restore_pump(struct pst_table *t)
{
	struct cs_ps_restore_info in;
	int rc;

	if (!t->ck.rs || !cs_ps_restore_ready(t->ck.rs))
		return 0;
	if (cs_ps_restore_step(t->ck.rs, PST_RESTORE_STEP_ROWS) == 1)
		return 1;
	rc = cs_ps_restore_finish(t->ck.rs, &in);
	t->ck.rs = NULL;
	if (rc)
		CS_WARN("table %s: restore from %s refused: %s (shard %u's "
			"file, reason %d)",
			t->key, t->ck.dir, cs_strerror(rc), in.bad_shard,
			(int)in.why);
	else
		CS_INFO("table %s: restored from %s at clock %" PRIu64
			": a checkpoint of %u shard(s) onto %u, %u file(s) "
			"read, %" PRIu64 " of %" PRIu64 " rows are this "
			"shard's",
			t->key, t->ck.dir, in.clock, in.nshards, t->n,
			in.files_read, in.rows_loaded, in.recs_read);
	ctl_finish_why(t, t->ck.rs_r, rc, true, rc ? 0 : in.clock,
		       rc ? in.why : 0, rc ? in.bad_shard : 0);
	t->ck.rs_r = NULL;
	return 1;
}

/* A checkpoint or restore request of rank r->wrank. */
static void ctl_issue(struct pst_table *t, struct cs_ipc_ps_req *r)
{
	if (!worker_of(t, r->wrank)) { /* the rank closed the table */
		req_finish(r, CS_ERR_CANCELLED, UINT32_MAX);
		t->wake = true;
		return;
	}
	if (!pst_driver(t, r->wrank))
		ctl_finish(t, r, 0, false, 0);
	else if (r->ctl == CS_IPC_PS_CTL_CKPT)
		ckpt_begin(t, r);
	else
		restore_run(t, r);
}

/* Hand @r to its worker engine. */
static void req_issue(struct pst_table *t, struct cs_ipc_ps_req *r, cs_ns_t now)
{
	struct pst_worker *w = worker_of(t, r->wrank);
	cs_ns_t deadline = cs_core_svc_deadline(t->p->core);
	struct pst_op *o;
	int ret;

	if (r->ctl) {
		ctl_issue(t, r);
		return;
	}
	if (!w) { /* the rank closed the table meanwhile */
		req_finish(r, CS_ERR_CANCELLED, UINT32_MAX);
		t->wake = true;
		return;
	}
	o = calloc(1, sizeof(*o));
	if (!o) {
		req_finish(r, -ENOMEM, UINT32_MAX);
		t->wake = true;
		return;
	}
	w->issuing = o;
	if (r->pull)
		ret = cs_ps_worker_pull(w->w, PST_TABLE, r->clock, r->keys,
					r->n, r->rows, now, &o->op);
	else
		ret = cs_ps_worker_push(w->w, PST_TABLE, r->clock, r->keys,
					r->rows, r->n, now, &o->op);
	w->issuing = NULL;
	if (ret || o->done) {
		req_finish(r, ret ? ret : o->rc,
			   ret || !o->rc ? UINT32_MAX : pst_node(t, o->peer));
		free(o);
		t->wake = true;
		return;
	}
	o->r = r;
	o->out = r->pull ? r->rows : NULL;
	o->deadline = deadline ? now + deadline : 0;
	o->next = w->ops;
	w->ops = o;
}

/* lcore: what the IPC side queued: new workers, closed ones, requests. */
static void table_take(struct pst_table *t, cs_ns_t now)
{
	struct cs_ipc_ps_req *list, *nx;
	struct pst_worker *fresh;

	pthread_mutex_lock(&t->p->lock);
	list = t->inq;
	t->inq = NULL;
	t->inq_tail = &t->inq;
	fresh = t->fresh;
	t->fresh = NULL;
	atomic_store_explicit(&t->pending, false, memory_order_relaxed);
	while (fresh) {
		struct pst_worker *w = fresh;

		fresh = w->next;
		w->next = t->workers;
		t->workers = w;
	}
	/* closed workers leave (their flag is set under the lock) */
	for (struct pst_worker **pp = &t->workers, *w; (w = *pp);) {
		if (!atomic_load(&w->closing)) {
			pp = &w->next;
			continue;
		}
		*pp = w->next;
		worker_free(w, CS_ERR_CANCELLED, UINT32_MAX);
		t->wake = true;
	}
	pthread_mutex_unlock(&t->p->lock);
	for (; list; list = nx) {
		nx = list->next;
		if (atomic_load_explicit(&list->state, memory_order_acquire) ==
		    CS_IPC_PS_ORPHAN) { /* its trainer is gone */
			cs_ipc_ps_req_free(list);
			continue;
		}
		req_issue(t, list, now);
	}
}

/* ---- the flow (lcore) ------------------------------------------------------
 */

static void pst_rx(void *ctx, uint32_t src, const void *msg, size_t len,
		   cs_ns_t now)
{
	struct pst_table *t = ctx;
	struct cs_ps_msg m;
	struct pst_worker *w;

	/* a trainer of this node queued a table's first requests before a
	 * peer's push for it can arrive: take them first */
	if (atomic_load_explicit(&t->pending, memory_order_acquire))
		table_take(t, now);
	if (cs_ps_wire_decode(msg, len, &m)) {
		t->rx_bad++;
		return;
	}
	switch (m.type) {
	case CS_PS_MSG_PUSH:
	case CS_PS_MSG_PULL:
		/* replies to worker w go where its requests come from */
		if (m.worker < t->spec.workers)
			t->wnode[m.worker] = src;
		(void)cs_ps_store_rx(t->st, msg, len); /* counts refusals */
		break;
	default:
		w = worker_of(t, m.worker);
		if (w)
			(void)cs_ps_worker_rx(w->w, src, msg, len, now);
		else
			t->rx_bad++;
		break;
	}
}

/* Requests past coll.deadline end with CS_ERR_TIMEOUT (the engine keeps
 * waiting for its reply: a pull's rows are then ours to free). */
static void table_deadlines(struct pst_table *t, cs_ns_t now)
{
	for (struct pst_worker *w = t->workers; w; w = w->next)
		for (struct pst_op *o = w->ops; o; o = o->next) {
			if (!o->r || !o->deadline || now < o->deadline)
				continue;
			if (o->r->pull)
				o->r->rows = NULL;
			req_finish(o->r, CS_ERR_TIMEOUT, UINT32_MAX);
			o->r = NULL;
			t->wake = true;
		}
}

static unsigned pst_poll(void *arg, cs_ns_t now)
{
	struct pst_table *t = arg;
	unsigned work = 0;

	if (atomic_load_explicit(&t->pending, memory_order_acquire)) {
		table_take(t, now);
		work++;
	}
	work += cs_ps_flow_drain_local(t->flow, now, 256);
	if (cs_ps_store_flush(t->st))
		CS_WARN("table %s: store flush failed", t->key);
	work += cs_ps_flow_drain_local(t->flow, now, 256);
	for (struct pst_worker *w = t->workers; w; w = w->next)
		cs_ps_worker_tick(w->w, now);
	table_deadlines(t, now);
	work += ckpt_pump(t, now);
	work += restore_pump(t);
	if (cs_ps_store_io_pending(t->st))
		work++; /* a pull's reads in flight: poll again soon */
	if (t->wake) {
		t->wake = false;
		cs_core_svc_wake_ipc(t->p->core);
		work++;
	}
	return work;
}

/* ---- tables (IPC side) ------------------------------------------------------
 */

static uint32_t fnv1a(const char *s)
{
	uint32_t h = 2166136261u;

	while (*s)
		h = (h ^ (uint8_t)*s++) * 16777619u;
	return h;
}

static bool spec_eq(const struct cs_ps_table_spec *a,
		    const struct cs_ps_table_spec *b)
{
	return a->dim == b->dim && a->dtype == b->dtype &&
	       a->key_max == b->key_max && a->mode == b->mode &&
	       a->staleness == b->staleness && a->workers == b->workers &&
	       a->opt.kind == b->opt.kind && a->opt.lr == b->opt.lr &&
	       a->opt.momentum == b->opt.momentum &&
	       a->opt.beta1 == b->opt.beta1 && a->opt.beta2 == b->opt.beta2 &&
	       a->opt.eps == b->opt.eps &&
	       a->opt.initial_acc == b->opt.initial_acc &&
	       a->init.kind == b->init.kind && a->init.seed == b->init.seed &&
	       a->init.scale == b->init.scale;
}

/* The lcore let go of the flow (or never will run it again): end what is
 * left with the flow's error and free the engines. */
static void table_teardown(struct pst_table *t)
{
	struct cs_ipc_ps_req *r, *nx;

	ckpt_abandon(t);
	for (r = t->inq; r; r = nx) {
		nx = r->next;
		if (atomic_load(&r->state) == CS_IPC_PS_ORPHAN)
			cs_ipc_ps_req_free(r);
		else
			req_finish(r, t->err, t->culprit);
	}
	t->inq = NULL;
	t->inq_tail = &t->inq;
	for (struct pst_worker *w = t->fresh, *x; w; w = x) {
		x = w->next;
		worker_free(w, t->err, t->culprit);
	}
	t->fresh = NULL;
	for (struct pst_worker *w = t->workers, *x; w; w = x) {
		x = w->next;
		worker_free(w, t->err, t->culprit);
	}
	t->workers = NULL;
}

static void table_free(struct pst_table *t)
{
	if (t->spill && t->st) {
		char sum[320];

		cs_ps_store_spill_summary(t->st, PST_TABLE, sum, sizeof(sum));
		CS_INFO("table %s: spill file %s removed: %s", t->key,
			t->spill_path, sum);
	}
	cs_ps_store_destroy(t->st);
	cs_ps_spill_close(t->spill); /* removes the file */
	cs_ps_flow_destroy(t->flow);
	cs_ps_shardmap_fini(&t->map);
	free(t->wnode);
	free(t);
}

int cs_pst_spill_new(const struct cs_pst_cfg *cfg, const char *prefix,
		     unsigned qdepth, struct cs_ps_uring_spill **u,
		     struct cs_ps_spill_ops *ops, struct cs_ps_spill *sp,
		     char *path, size_t plen, const char **e)
{
	int ret;

	*u = NULL;
	if (!cfg || cfg->spill_dir[0] != '/') {
		*e = "not an absolute path";
		return -EINVAL;
	}
	ret = cs_ps_spill_create(u, cfg->spill_dir, prefix, qdepth, sp, path,
				 plen);
	if (ret) {
		*e = ret == -ENOTSUP ? "collstackd was built without liburing"
				     : strerror(-ret);
		*u = NULL;
		return ret;
	}
	*ops = *sp->ops;
	if (!cfg->spill_async) {
		ops->read_start = NULL;
		ops->read_poll = NULL;
	}
	sp->ops = ops;
	return 0;
}

/* The table's spill file in ps.spill_dir (the SSD tier behind its
 * memory budget): -errno with the reason in @why. */
static int spill_new(struct cs_pst *p, struct pst_table *t,
		     struct cs_ps_spill *sp, char *why, size_t wl)
{
	char prefix[64];
	const char *e;
	int ret;

	snprintf(prefix, sizeof(prefix), "cs-pst-%ld-%08x-n%u", (long)getpid(),
		 t->op_id, t->self);
	ret = cs_pst_spill_new(&p->cfg, prefix, PST_SPILL_QDEPTH, &t->spill,
			       &t->spill_ops, sp, t->spill_path,
			       sizeof(t->spill_path), &e);
	if (ret) {
		CS_WARN("table %s: mem_budget %" PRIu64 " refused: no spill "
			"file in ps.spill_dir '%s': %s",
			t->key, t->mem_budget, p->cfg.spill_dir, e);
		/* (a 96-byte reply: the log has the whole line) */
		snprintf(why, wl, "no spill file in ps.spill_dir '%s': %s",
			 p->cfg.spill_dir, e);
	}
	return ret;
}

/* A new table: its map, store and flow, posted to the core. */
static int table_new(struct cs_pst *p, const struct cs_ipc_ps_open *o,
		     const struct cs_ps_table_spec *spec, const char *key,
		     struct pst_table **out, char *why, size_t wl)
{
	uint32_t self, npeers, mss = cs_core_svc_frame_payload(p->core);
	uint32_t *servers = NULL, *nodes = NULL;
	struct pst_table *t;
	int ret = -ENOMEM;

	cs_core_svc_view(p->core, &self, &npeers);
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->p = p;
	snprintf(t->key, sizeof(t->key), "%s", key);
	snprintf(t->name, sizeof(t->name), "%s", o->name);
	t->spec = *spec;
	t->mem_budget = o->mem_budget;
	t->local_only = o->size == o->local_size || npeers < 2;
	t->n = t->local_only ? 1 : npeers;
	t->self = t->local_only ? 0 : self;
	/* the same id on every node; two tables whose hashes collide on a
	 * node get -EEXIST from the core (refused at post) */
	t->op_id = fnv1a(key);
	t->inq_tail = &t->inq;
	atomic_init(&t->pending, false);
	t->err = CS_ERR_CANCELLED;
	t->culprit = UINT32_MAX;
	(void)cs_core_svc_lost_node(p->core, &t->nlost0);
	servers = malloc(t->n * sizeof(*servers));
	nodes = malloc(t->n * sizeof(*nodes));
	t->wnode = malloc(t->spec.workers * sizeof(*t->wnode));
	if (!servers || !nodes || !t->wnode)
		goto out_free;
	memset(t->wnode, 0xff, t->spec.workers * sizeof(*t->wnode));
	for (uint32_t i = 0; i < t->n; i++) {
		servers[i] = i; /* a server's id is its flow rank */
		nodes[i] = t->local_only ? self : i;
	}
	ret = cs_ps_shardmap_init(&t->map, servers, t->n, PST_VNODES);
	if (!ret)
		ret = cs_ps_flow_create(t->n, t->self, mss, pst_rx, t,
					&t->flow);
	if (!ret) {
		struct cs_ps_store_cfg sc = { .server = t->self,
					      .map = &t->map,
					      .msg_max = CS_PS_FLOW_MSG_MAX,
					      .parked_max = PST_PARKED_MAX };
		struct cs_ps_store_io sio = { st_send, t };

		struct cs_ps_spill sp = { 0 };

		ret = cs_ps_store_create(&t->st, &sc, &sio);
		if (!ret && o->mem_budget) {
			ret = spill_new(p, t, &sp, why, wl);
			if (ret)
				goto out_free;
		}
		if (!ret)
			ret = cs_ps_store_add_table(t->st, &t->spec,
						    (size_t)o->mem_budget,
						    o->mem_budget ? &sp : NULL);
	}
	if (ret) {
		snprintf(why, wl, "no table: %s", cs_strerror(ret));
		goto out_free;
	}
	ret = cs_core_svc_flow_post(
		p->core,
		&(struct cs_svc_flow){ .group = t->local_only
							? CS_PST_GROUP_LOCAL
							: CS_PST_GROUP,
				       .op_id = t->op_id,
				       .ops = &cs_ps_flow_ops,
				       .arg = t->flow,
				       .poll = pst_poll,
				       .poll_arg = t },
		nodes, t->n, &t->h);
	if (ret) {
		snprintf(why, wl, "no memory");
		goto out_free;
	}
	free(servers);
	*out = t;
	CS_INFO("table %s: rows of %u %s, keys < %" PRIu64
		", %s, %s, %u workers, %u server(s), op %#x",
		t->key, t->spec.dim, cs_dtype_name(t->spec.dtype),
		t->spec.key_max, cs_ps_mode_name(t->spec.mode),
		cs_ps_opt_name(t->spec.opt.kind), t->spec.workers, t->n,
		t->op_id);
	if (t->spill)
		CS_INFO("table %s: at most %" PRIu64 " bytes of rows in memory "
			"(%" PRIu64 " rows of %zu bytes), the rest in %s",
			t->key, t->mem_budget,
			t->mem_budget / cs_ps_frame_bytes(&t->spec),
			cs_ps_frame_bytes(&t->spec), t->spill_path);
	return 0;
out_free:
	free(servers);
	free(nodes);
	table_free(t);
	return ret;
}

static int pst_open(void *ctx, const struct cs_ipc_ps_open *o, void **table,
		    char *why, size_t wl)
{
	struct cs_pst *p = ctx;
	uint32_t mss = cs_core_svc_frame_payload(p->core);
	char key[PST_KEY_MAX];
	struct cs_ps_table_spec spec = o->spec;
	struct pst_table *t;
	struct pst_worker *w;
	int ret;

	spec.id = PST_TABLE;
	spec.workers = o->size;
	if (o->size > CS_PS_WORKERS_MAX || cs_ps_spec_check(&spec)) {
		snprintf(why, wl,
			 "bad table: dim 1-%u, dtype f32/f64/f16/bf16, "
			 "key_max >= 1, a known mode, optimizer and "
			 "initializer, lr > 0",
			 CS_PS_DIM_MAX);
		return -EINVAL;
	}
	if (cs_ps_budget_check(&spec, o->mem_budget, why, wl)) {
		CS_WARN("PS table %s/%s refused: %s", o->group, o->name, why);
		return -EINVAL;
	}
	if (cs_ps_wire_len(CS_PS_MSG_PUSH, 1, spec.dim, spec.dtype, 0) > mss) {
		snprintf(why, wl,
			 "a row of %zu bytes does not fit a frame (%u bytes "
			 "of payload): a larger MTU",
			 cs_ps_row_bytes(&spec), mss);
		return -EMSGSIZE;
	}
	snprintf(key, sizeof(key), "%s/%s#%08x", o->group, o->name, o->nonce);
	for (t = p->tables; t; t = t->next)
		if (!strcmp(t->key, key))
			break;
	if (t && !t->h) {
		snprintf(why, wl, "table %s failed here: %s", key,
			 cs_strerror(t->err));
		return t->err;
	}
	if (t && !spec_eq(&t->spec, &spec)) {
		snprintf(why, wl,
			 "table %s: another rank on this node opened it with "
			 "other attributes",
			 key);
		return -EINVAL;
	}
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->rank = o->rank;
	atomic_init(&w->closing, false);
	if (!t) {
		ret = table_new(p, o, &spec, key, &t, why, wl);
		if (ret) {
			free(w);
			return ret;
		}
		t->next = p->tables;
		p->tables = t;
	}
	w->t = t;
	{
		struct cs_ps_worker_cfg wc = { .rank = o->rank,
					       .map = &t->map,
					       .msg_max = CS_PS_FLOW_MSG_MAX,
					       .rto = PST_RTO,
					       .rto_max = PST_RTO_MAX };
		struct cs_ps_worker_io wio = { wk_send, op_done, w };

		ret = cs_ps_worker_create(&w->w, &wc, &wio);
		if (!ret)
			ret = cs_ps_worker_add_table(w->w, &t->spec);
	}
	pthread_mutex_lock(&p->lock);
	for (struct pst_worker *x = t->workers; x && !ret; x = x->next)
		if (x->rank == o->rank && !atomic_load(&x->closing))
			ret = -EEXIST;
	for (struct pst_worker *x = t->fresh; x && !ret; x = x->next)
		if (x->rank == o->rank)
			ret = -EEXIST;
	if (!ret) {
		w->next = t->fresh;
		t->fresh = w;
		t->nlocal++;
		atomic_store_explicit(&t->pending, true, memory_order_release);
	}
	pthread_mutex_unlock(&p->lock);
	if (ret) {
		snprintf(why, wl, "table %s: %s", key,
			 ret == -EEXIST ? "rank opened it already"
					: cs_strerror(ret));
		cs_ps_worker_destroy(w->w);
		free(w);
		return ret;
	}
	cs_core_svc_flow_kick(p->core, t->h);
	*table = t;
	return 0;
}

static void pst_close(void *ctx, void *table, uint32_t wrank)
{
	struct cs_pst *p = ctx;
	struct pst_table *t = table;
	bool last;

	pthread_mutex_lock(&p->lock);
	for (struct pst_worker *w = t->workers; w; w = w->next)
		if (w->rank == wrank)
			atomic_store(&w->closing, true);
	for (struct pst_worker *w = t->fresh; w; w = w->next)
		if (w->rank == wrank)
			atomic_store(&w->closing, true);
	last = !--t->nlocal;
	atomic_store_explicit(&t->pending, true, memory_order_release);
	pthread_mutex_unlock(&p->lock);
	if (!t->h)
		return; /* ended already: freed by the next poll if last */
	if (last) /* no rank here uses it: the flow ends (its peers' too) */
		cs_core_svc_flow_cancel(p->core, t->h);
	else
		cs_core_svc_flow_kick(p->core, t->h);
}

static int pst_submit(void *ctx, void *table, struct cs_ipc_ps_req *r)
{
	struct cs_pst *p = ctx;
	struct pst_table *t = table;

	if (!t->h)
		return t->err;
	r->next = NULL;
	pthread_mutex_lock(&p->lock);
	*t->inq_tail = r;
	t->inq_tail = &r->next;
	atomic_store_explicit(&t->pending, true, memory_order_release);
	pthread_mutex_unlock(&p->lock);
	cs_core_svc_flow_kick(p->core, t->h);
	return 0;
}

/* A table whose flow the lcore let go of: ours now. */
static void table_ended(struct cs_pst *p, struct pst_table *t, int st,
			uint32_t culprit)
{
	t->err = st == 1 ? CS_ERR_CANCELLED : st;
	t->culprit = culprit == UINT32_MAX ? UINT32_MAX : pst_node(t, culprit);
	if (st == CS_ERR_PEER_LOST && culprit == UINT32_MAX && !t->local_only) {
		/* a new view ended it: name the node it lost, if one was */
		uint32_t nl;
		int lost = cs_core_svc_lost_node(p->core, &nl);

		if (lost >= 0 && nl != t->nlost0)
			t->culprit = (uint32_t)lost | PST_VIEW_LOST;
	}
	cs_core_svc_flow_free(p->core, t->h);
	t->h = NULL;
	if (t->nlocal) /* a peer ended it, or a session or view did */
		CS_INFO("table %s: its flow ended: %s (node %d%s)", t->key,
			cs_strerror(t->err),
			t->culprit == UINT32_MAX
				? -1
				: (int)(t->culprit & ~PST_VIEW_LOST),
			t->culprit != UINT32_MAX && (t->culprit & PST_VIEW_LOST)
				? ", lost from the view"
				: "");
	pthread_mutex_lock(&p->lock);
	table_teardown(t);
	pthread_mutex_unlock(&p->lock);
}

static unsigned pst_ipc_poll(void *ctx)
{
	struct cs_pst *p = ctx;
	unsigned work = 0;

	for (struct pst_table **pp = &p->tables, *t; (t = *pp);) {
		uint32_t culprit = UINT32_MAX;
		int st = t->h ? cs_core_svc_flow_state(t->h, &culprit) : 0;

		if (st) {
			table_ended(p, t, st, culprit);
			work++;
		}
		if (!t->h && !t->nlocal) {
			*pp = t->next;
			table_free(t);
			continue;
		}
		if (!t->h && atomic_load(&t->pending)) {
			/* closed after it ended, or requests raced its end */
			pthread_mutex_lock(&p->lock);
			atomic_store(&t->pending, false);
			table_teardown(t);
			pthread_mutex_unlock(&p->lock);
		}
		pp = &t->next;
	}
	return work;
}

const struct cs_ipc_ps_ops cs_pst_ipc_ops = {
	.open = pst_open,
	.close = pst_close,
	.submit = pst_submit,
	.poll = pst_ipc_poll,
};

int cs_pst_create(struct cs_ar_svc *svc, struct cs_pst **out)
{
	struct cs_pst *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	p->core = cs_ar_svc_core(svc);
	p->cfg = *cs_ar_svc_pst_cfg(svc);
	pthread_mutex_init(&p->lock, NULL);
	*out = p;
	return 0;
}

void cs_pst_destroy(struct cs_pst *p)
{
	struct timespec ms = { 0, 1000000 };

	if (!p)
		return;
	for (struct pst_table *t = p->tables; t; t = t->next)
		if (t->h)
			cs_core_svc_flow_cancel(p->core, t->h);
	for (struct pst_table *t = p->tables, *nx; t; t = nx) {
		uint32_t culprit = UINT32_MAX;
		int st = 0;

		nx = t->next;
		for (unsigned i = 0; t->h && i < 2000; i++) {
			st = cs_core_svc_flow_state(t->h, &culprit);
			if (st)
				break;
			nanosleep(&ms, NULL);
		}
		if (t->h && !st) { /* the lcore may still use it: leave it */
			CS_WARN("table %s: its flow did not end; left as is",
				t->key);
			continue;
		}
		if (t->h)
			table_ended(p, t, st, culprit);
		table_free(t);
	}
	pthread_mutex_destroy(&p->lock);
	free(p);
}

// SPDX-License-Identifier: MIT
/*
 * Deterministic multi-worker, multi-server PS scenario: W worker engines
 * and K shard stores exchange their messages over an in-memory queue that
 * loses, duplicates and reorders them (seeded), in virtual time. With
 * --carrier tp (the default of `collstack sim ps`) every node runs a
 * transport core (transport/tp.h) with one cs_ps_flow (ps_flow.h) posted:
 * the PS messages are frames of the core, and what the queue loses,
 * duplicates and reorders are those frames, data, retransmissions and
 * ACKs alike. With --carrier queue (ps_scen's default) the queue carries
 * the PS messages themselves and the workers retransmit. Each
 * worker trains for --iters iterations (pull its keys, compute a gradient,
 * push it); the final table is compared with a single-process reference:
 * bit for bit in sync mode (the gradient there also depends on the pulled
 * rows, so every pull is checked too), within float reordering for async
 * and ssp with SGD; for every mode the gradient rows taken by the servers
 * must equal the ones pushed (no loss, nothing applied twice), and in ssp
 * no pull may be answered while a worker is more than s versions behind.
 *
 *   ps_scen [--workers W] [--servers K] [--rows R] [--dim D]
 *           [--keys-per-push P] [--iters I] [--mode sync|async|ssp:S]
 *           [--opt sgd|momentum|adagrad|adam] [--dtype f32|f16|bf16|f64]
 *           [--skew Z] [--loss P] [--dup P] [--seed N] [--msg-max B]
 *           [--frame B] [--expect-clean 0|1] [--slow W] [--budget ROWS]
 * [--vnodes V]
 *           [--ckpt-at C --kill-server K --kill-at T] [--max-share X]
 *
 * max_server_share is the largest server's count of gradient rows taken
 * over the mean; --max-share fails the run above X.
 *
 * With --kill-server, every server checkpoints its table (a snapshot into
 * memory) when all workers finished iteration C; server K dies when
 * worker 0 reaches iteration T. The first worker operation that fails
 * must fail with CS_ERR_PEER_LOST naming server K; the job then recovers
 * as a PS job does: every worker cancels what it had in flight
 * (cs_ps_worker_reset), messages of the old epoch are dropped (the
 * transport core does that by epoch), every server restarts from its
 * checkpoint, and training goes on from iteration C. The final table must
 * still match the reference (bit for bit in sync).
 *
 * Prints one line "ps ok ..." (exit 0) or "ps FAIL ..." (exit 1).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/ps/ps.h"
#include "collectives/ps/ps_wire.h"
#include "sim/ps.h"
#include "transport/ps_flow.h"
#include "transport/tp.h"

struct qmsg {
	struct cs_pkt_hdr h; /* --carrier tp: a frame of the core */
	bool frame;
	cs_ns_t at;
	uint64_t seq;
	uint32_t src, dst;
	uint8_t *buf;
	size_t len;
};

struct opts {
	uint32_t workers, servers, rows, dim, kpp, iters, vnodes;
	enum cs_ps_mode mode;
	uint32_t stale;
	enum cs_ps_opt_kind opt;
	enum cs_dtype dtype;
	double skew, loss, dup;
	uint64_t seed;
	size_t msg_max;
	size_t frame; /* --carrier tp: a frame's payload (0: msg_max) */
	int slow;
	uint32_t budget;
	uint32_t ckpt_at, kill_at;
	double max_share; /* fail above this (0: no check) */
	int kill; /* server index killed at iteration kill_at, or -1 */
	bool tp; /* --carrier tp: the messages ride the transport core */
	bool bad_push; /* worker 0 first sends a push of the wrong dim */
	bool clean; /* --expect-clean: no push early, resent or refused */
};

#define SRV_BASE 1000u
#define LINK_NS 2000ull
#define JITTER_NS 3000ull
#define COMPUTE_NS 5000ull

static struct opts o;
static struct qmsg *q;
static uint32_t nq, capq;
static uint64_t qseq, rng, n_lost, n_dup, n_sent;
static cs_ns_t now;

static struct cs_ps_table_spec spec;
static struct cs_ps_shardmap map;
static struct cs_ps_store **srv;
static struct cs_ps_worker **wk;

struct wstate {
	uint32_t t; /* iteration */
	int phase; /* 0 idle, 1 pulling, 2 pushing, 3 finished */
	cs_ns_t ready_at;
	uint64_t op;
	int op_rc;
	bool op_done;
	uint64_t *keys;
	uint8_t *pulled;
	uint8_t *grads;
	uint32_t n;
};
static struct wstate *ws;
static uint64_t *pushes_issued; /* per worker: versions pushed so far */

/* kill and recovery */
struct snapcap {
	uint8_t *p;
	size_t len;
	uint64_t nrec;
	int ended, rc;
};
static struct snapcap *ckpt; /* per server */
static bool ckpt_taken, killed, recovered, resetting;
static uint32_t nfail, first_fail_peer;
static int first_fail_rc;
static double *zipf_cdf;

/* --carrier tp: node (= rank of the PS group) r is worker r for r <
 * workers, else server r - workers; each runs a core with one cs_ps_flow */
#define PS_GROUP 1u
#define PS_OP 1u
static struct cs_tp **tps;
static struct cs_ps_flow **flows;
static uint64_t pushes_done, pulls_done;

static void die(const char *fmt, ...)
{
	va_list ap;

	printf("ps FAIL mode=%s seed=%llu: ", cs_ps_mode_name(o.mode),
	       (unsigned long long)o.seed);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	exit(1);
}

/* ---- the lossy queue ---------------------------------------------------- */

static void q_put(uint32_t src, uint32_t dst, const struct cs_pkt_hdr *h,
		  const void *buf, size_t len, cs_ns_t at)
{
	if (nq == capq) {
		capq = capq ? capq * 2 : 1024;
		q = realloc(q, sizeof(*q) * capq);
		if (!q)
			die("out of memory");
	}
	q[nq].frame = h != NULL;
	if (h)
		q[nq].h = *h;
	q[nq].buf = malloc(len ? len : 1);
	if (!q[nq].buf)
		die("out of memory");
	if (len)
		memcpy(q[nq].buf, buf, len);
	q[nq].len = len;
	q[nq].src = src;
	q[nq].dst = dst;
	q[nq].at = at;
	q[nq].seq = qseq++;
	nq++;
}

static uint32_t rank_of(uint32_t id)
{
	return id >= SRV_BASE ? o.workers + id - SRV_BASE : id;
}

/* A message, or (tp) a frame of the core: lost, delayed, duplicated. */
static void wire(uint32_t src, uint32_t dst, const struct cs_pkt_hdr *h,
		 const void *buf, size_t len)
{
	n_sent++;
	if (cs_rand_unit(&rng) < o.loss) {
		n_lost++;
		return;
	}
	q_put(src, dst, h, buf, len,
	      now + LINK_NS + cs_rand_next(&rng) % JITTER_NS);
	if (cs_rand_unit(&rng) < o.dup) {
		n_dup++;
		q_put(src, dst, h, buf, len,
		      now + LINK_NS + cs_rand_next(&rng) % (4 * JITTER_NS));
	}
}

static void carry(uint32_t src, uint32_t dst, const void *buf, size_t len)
{
	int rc;

	if (!o.tp) {
		wire(src, dst, NULL, buf, len);
		return;
	}
	rc = cs_ps_flow_send(flows[rank_of(src)], rank_of(dst), buf, len);
	if (rc)
		die("flow send %u -> %u: %d", src, dst, rc);
}

static unsigned tp_room(void *owner)
{
	(void)owner;
	return 256;
}

static void tp_xmit(void *owner, uint32_t node, const struct cs_pkt_hdr *h,
		    const void *payload, uint32_t len)
{
	wire((uint32_t)(uintptr_t)owner, node, h, payload, len);
}

static void tp_done(void *owner, void *user, int status, uint32_t culprit)
{
	(void)user;
	if (status)
		die("node %u: PS flow ended with %d (rank %u)",
		    (unsigned)(uintptr_t)owner, status, culprit);
}

static const struct cs_tp_io tp_io = { tp_room, tp_xmit, tp_done, NULL };

/* A message out of node @rank's flow: to its store or its worker. */
static void tp_msg(void *ctx, uint32_t src, const void *msg, size_t len,
		   cs_ns_t t)
{
	uint32_t r = (uint32_t)(uintptr_t)ctx;
	uint32_t from = src < o.workers ? src : SRV_BASE + src - o.workers;
	int rc;

	rc = cs_ps_flow_route(r < o.workers ? NULL : srv[r - o.workers],
			      r < o.workers ? wk[r] : NULL, from, msg, len, t);
	if (rc)
		die("node %u: message from %u refused: %d", r, src, rc);
}

static void tp_setup(void)
{
	uint32_t n = o.workers + o.servers;
	uint32_t *members = malloc(sizeof(*members) * n);
	struct cs_tp_params tp;
	struct cs_xport_params xp;

	tps = calloc(n, sizeof(*tps));
	flows = calloc(n, sizeof(*flows));
	if (!members || !tps || !flows || cs_tp_params_default(&tp) ||
	    cs_xport_params_default(&xp))
		die("tp set-up");
	tp.max_nodes = n;
	tp.max_ops = 4;
	for (uint32_t r = 0; r < n; r++)
		members[r] = r;
	for (uint32_t r = 0; r < n; r++) {
		void *ctx = (void *)(uintptr_t)r;

		if (cs_tp_create(&tp, &xp, &tp_io, ctx, r, 1, &tps[r]) ||
		    cs_tp_group_add(tps[r], PS_GROUP, members, n, NULL) ||
		    cs_ps_flow_create(n, r,
				      (uint32_t)(o.frame ? o.frame : o.msg_max),
				      tp_msg, ctx, &flows[r]) ||
		    cs_tp_post(tps[r], PS_GROUP, PS_OP, &cs_ps_flow_ops,
			       flows[r], 0, NULL, now))
			die("tp set-up of node %u", r);
	}
	free(members);
}

/* A push for a table nobody serves (its rows one value longer than the
 * real table's): the server must refuse it and apply nothing (the final
 * table still matches the reference, which never saw it). */
static void send_bad_push(void)
{
	struct cs_ps_msg m = { .type = CS_PS_MSG_PUSH,
			       .table = spec.id + 1,
			       .worker = 0,
			       .id = 0,
			       .nparts = 1,
			       .nkeys = 1,
			       .dim = spec.dim + 1,
			       .dtype = spec.dtype };
	size_t len = cs_ps_wire_len(m.type, 1, m.dim, m.dtype, 0);
	uint8_t *buf = calloc(1, len ? len : 1);
	uint8_t *row = calloc(m.dim, 8);
	uint64_t key = 0;

	if (!len || !buf || !row)
		die("bad push: set-up");
	cs_ps_wire_put_hdr(buf, &m);
	cs_ps_wire_put_key(buf, 0, key);
	cs_ps_wire_put_row(buf, &m, 0, row);
	carry(0, cs_ps_shard_of(&map, spec.id, key), buf, len);
	free(buf);
	free(row);
}

static void tp_fini(struct cs_tp_stats *sum)
{
	memset(sum, 0, sizeof(*sum));
	for (uint32_t r = 0; tps && r < o.workers + o.servers; r++) {
		struct cs_tp_stats st;

		cs_tp_get_stats(tps[r], &st);
		sum->tx_data += st.tx_data;
		sum->tx_retx += st.tx_retx;
		sum->rel_dup_rcvd += st.rel_dup_rcvd;
		cs_tp_destroy(tps[r]);
		cs_ps_flow_destroy(flows[r]);
	}
	free(tps);
	free(flows);
}

static int srv_send(void *ctx, uint32_t worker, const void *msg, size_t len)
{
	carry((uint32_t)(uintptr_t)ctx, worker, msg, len);
	return 0;
}

static int wk_send(void *ctx, uint32_t server, const void *msg, size_t len)
{
	carry((uint32_t)(uintptr_t)ctx, server, msg, len);
	return 0;
}

static void wk_done(void *ctx, uint64_t op, int rc, uint32_t peer)
{
	struct wstate *s = &ws[(uintptr_t)ctx];

	if (op != s->op)
		die("worker %u: completion of unknown op %llu",
		    (unsigned)(uintptr_t)ctx, (unsigned long long)op);
	if (resetting && rc == CS_ERR_CANCELLED)
		return;
	if (rc && o.kill >= 0) {
		if (!nfail++) {
			first_fail_peer = peer;
			first_fail_rc = rc;
		}
		return;
	}
	if (rc)
		die("worker %u: op failed: %d (server %u)",
		    (unsigned)(uintptr_t)ctx, rc, peer);
	s->op_done = true;
	s->op_rc = rc;
	if (s->phase == 1)
		pulls_done++;
	else if (s->phase == 2)
		pushes_done++;
}

/* ---- in-memory SSD tier -------------------------------------------------- */

struct memspill {
	uint8_t *p;
	size_t cap;
};

static int ms_write(void *ctx, struct cs_ps_io_req *r, unsigned n)
{
	struct memspill *m = ctx;

	for (unsigned i = 0; i < n; i++) {
		if (r[i].off + r[i].len > m->cap) {
			size_t cap = m->cap ? m->cap : 1 << 16;

			while (cap < r[i].off + r[i].len)
				cap *= 2;
			m->p = realloc(m->p, cap);
			if (!m->p)
				return -ENOMEM;
			memset(m->p + m->cap, 0xa5, cap - m->cap);
			m->cap = cap;
		}
		memcpy(m->p + r[i].off, r[i].buf, r[i].len);
	}
	return 0;
}

static int ms_read(void *ctx, struct cs_ps_io_req *r, unsigned n)
{
	struct memspill *m = ctx;

	for (unsigned i = 0; i < n; i++) {
		if (r[i].off + r[i].len > m->cap)
			return -EIO;
		memcpy(r[i].buf, m->p + r[i].off, r[i].len);
	}
	return 0;
}

static const struct cs_ps_spill_ops ms_ops = { ms_write, ms_read };

/* ---- workload ------------------------------------------------------------ */

static uint64_t mix(uint64_t z)
{
	return cs_rand_next(&z);
}

static float grad_base(uint32_t w, uint32_t t, uint64_t key, uint32_t j)
{
	uint64_t h = mix(o.seed ^ mix(w * 0x10001ull + t) ^ mix(key) ^
			 mix(j + 0x77));

	return (float)((double)(h >> 11) * 0x1p-53 * 2.0 - 1.0) * 0.1f;
}

/* The keys of (worker, iteration): Zipf-skewed, duplicates kept. */
static void draw_keys(uint32_t w, uint32_t t, uint64_t *keys)
{
	uint64_t r = mix(o.seed * 31 + w) ^ mix(t + 0x1234);

	for (uint32_t i = 0; i < o.kpp; i++) {
		double u = cs_rand_unit(&r);
		uint32_t lo = 0, hi = o.rows - 1;

		while (lo < hi) {
			uint32_t mid = (lo + hi) / 2;

			if (zipf_cdf[mid] < u)
				lo = mid + 1;
			else
				hi = mid;
		}
		/* scatter ranks over the key space so hot keys are not
		 * all small numbers */
		keys[i] = (uint64_t)((lo * 2654435761ull) % o.rows);
	}
}

/* Gradient of one row: a function of (w, t, key) and, in sync mode, of the
 * pulled row (so a wrong pull changes the result). */
static void make_grad(uint32_t w, uint32_t t, uint64_t key,
		      const uint8_t *pulled, uint8_t *g)
{
	float pf[4096], gf[4096];

	cs_ps_row_to_f32(o.dtype, pulled, pf, o.dim);
	for (uint32_t j = 0; j < o.dim; j++) {
		gf[j] = grad_base(w, t, key, j);
		if (o.mode == CS_PS_SYNC)
			gf[j] += 0.01f * pf[j];
	}
	cs_ps_row_from_f32(o.dtype, gf, g, o.dim);
}

/* ---- serial reference -----------------------------------------------------
 */

struct ref {
	uint8_t *val;
	float *state;
	uint32_t *step;
	uint8_t *exists;
};
static struct ref ref;
static uint64_t ref_grads; /* unique (worker, version, key) rows */

static void ref_row(uint64_t k, uint8_t *out)
{
	size_t rb = cs_ps_row_bytes(&spec);

	if (ref.exists[k])
		memcpy(out, ref.val + rb * k, rb);
	else
		cs_ps_init_row(&spec, k, out);
}

static void ref_run(void)
{
	size_t rb = cs_ps_row_bytes(&spec);
	unsigned sfl = cs_ps_state_floats(&spec);
	uint32_t d = o.dim, W = o.workers, P = o.kpp;
	uint64_t *keys = malloc(sizeof(*keys) * P);
	uint8_t *row = malloc(rb), *g = malloc(rb * P);
	float *gf = malloc(sizeof(float) * d * P);
	/* per version: acc per key */
	float *acc = calloc((size_t)o.rows * d, sizeof(float));
	uint8_t *has = calloc(o.rows, 1);
	float *w32 = malloc(sizeof(float) * d);

	ref.val = calloc(o.rows, rb);
	ref.state = calloc((size_t)o.rows * (sfl ? sfl : 1), sizeof(float));
	ref.step = calloc(o.rows, sizeof(uint32_t));
	ref.exists = calloc(o.rows, 1);
	if (!keys || !row || !g || !gf || !acc || !has || !w32 || !ref.val ||
	    !ref.state || !ref.step || !ref.exists)
		die("out of memory");
	for (uint32_t t = 0; t < o.iters; t++) {
		for (uint32_t w = 0; w < W; w++) {
			int u;

			draw_keys(w, t, keys);
			for (uint32_t i = 0; i < P; i++) {
				ref_row(keys[i], row);
				make_grad(w, t, keys[i], row, g + rb * i);
				cs_ps_row_to_f32(o.dtype, g + rb * i,
						 gf + (size_t)d * i, d);
			}
			u = cs_ps_combine(keys, gf, P, d);
			if (u < 0)
				die("combine");
			if (o.kill < 0 || t >= o.ckpt_at)
				ref_grads +=
					(uint64_t)u; /* after a restore the
						      * servers count anew */
			/* the wire carries the dtype */
			for (int i = 0; i < u; i++) {
				float *a = acc + (size_t)d * keys[i];

				cs_ps_row_from_f32(o.dtype, gf + (size_t)d * i,
						   row, d);
				cs_ps_row_to_f32(o.dtype, row,
						 gf + (size_t)d * i, d);
				for (uint32_t j = 0; j < d; j++)
					a[j] = has[keys[i]]
						       ? a[j] + gf[(size_t)d *
									   i +
								   j]
						       : gf[(size_t)d * i + j];
				has[keys[i]] = 1;
			}
		}
		for (uint64_t k = 0; k < o.rows; k++) {
			if (!has[k])
				continue;
			if (!ref.exists[k]) {
				cs_ps_init_row(&spec, k, ref.val + rb * k);
				cs_ps_opt_state_init(
					&spec, ref.state + (size_t)sfl * k);
				ref.exists[k] = 1;
			}
			cs_ps_row_to_f32(o.dtype, ref.val + rb * k, w32, d);
			cs_ps_opt_apply(&spec, w32, ref.state + (size_t)sfl * k,
					&ref.step[k], acc + (size_t)d * k);
			cs_ps_row_from_f32(o.dtype, w32, ref.val + rb * k, d);
			has[k] = 0;
		}
	}
	free(keys);
	free(row);
	free(g);
	free(gf);
	free(acc);
	free(has);
	free(w32);
}

/* ---- the run ------------------------------------------------------------- */

static void deliver(struct qmsg *m)
{
	int rc;

	if (m->frame) {
		cs_tp_rx(tps[m->dst], m->src, &m->h, m->len ? m->buf : NULL,
			 now);
	} else if (m->dst >= SRV_BASE && !srv[m->dst - SRV_BASE]) {
		/* a dead server */
	} else if (m->dst >= SRV_BASE) {
		rc = cs_ps_store_rx(srv[m->dst - SRV_BASE], m->buf, m->len);
		if (rc)
			die("store rx: %d", rc);
	} else {
		rc = cs_ps_worker_rx(wk[m->dst], m->src, m->buf, m->len, now);
		if (rc)
			die("worker rx: %d", rc);
	}
	free(m->buf);
}

static int qcmp(const void *a, const void *b)
{
	const struct qmsg *x = a, *y = b;

	if (x->at != y->at)
		return x->at < y->at ? -1 : 1;
	return x->seq < y->seq ? -1 : (x->seq > y->seq);
}

static void worker_step(uint32_t w)
{
	struct wstate *s = &ws[w];
	size_t rb = cs_ps_row_bytes(&spec);
	int rc;

	if (s->phase == 0 && o.kill >= 0 && !ckpt_taken && s->t == o.ckpt_at)
		return; /* wait for the checkpoint */
	/* --bad-push: training starts once its error reply reached worker 0
	 * (which knows no such table: a bad reply, counted) */
	if (o.bad_push && !cs_ps_worker_stats(wk[0])->bad_replies)
		return;
	if (s->phase == 0 && now >= s->ready_at) {
		if (s->t == o.iters) {
			s->phase = 3;
			return;
		}
		draw_keys(w, s->t, s->keys);
		s->op_done = false;
		rc = cs_ps_worker_pull(wk[w], spec.id, s->t, s->keys, o.kpp,
				       s->pulled, now, &s->op);
		if (rc)
			die("pull: %d", rc);
		s->phase = 1;
	}
	if (s->phase == 1 && s->op_done) {
		uint64_t behind = UINT64_MAX;

		/* independent staleness check: every worker issued at least
		 * t - s pushes when this pull was answered */
		for (uint32_t v = 0; v < o.workers; v++)
			behind = CS_MIN(behind, pushes_issued[v]);
		if (o.mode == CS_PS_SSP && s->t > o.stale &&
		    behind < s->t - o.stale)
			die("worker %u pulled at clock %u while a worker had "
			    "pushed only %llu versions (s=%u)",
			    w, s->t, (unsigned long long)behind, o.stale);
		if (o.mode == CS_PS_SYNC && behind < s->t)
			die("sync pull at %u answered early", s->t);
		for (uint32_t i = 0; i < o.kpp; i++)
			make_grad(w, s->t, s->keys[i], s->pulled + rb * i,
				  s->grads + rb * i);
		s->op_done = false;
		rc = cs_ps_worker_push(wk[w], spec.id, s->t, s->keys, s->grads,
				       o.kpp, now, &s->op);
		if (rc)
			die("push: %d", rc);
		pushes_issued[w]++;
		s->phase = 2;
	}
	if (s->phase == 2 && s->op_done) {
		s->t++;
		s->phase = 0;
		s->ready_at = now + COMPUTE_NS * ((int)w == o.slow ? 8 : 1);
	}
}

static void usage(void)
{
	fprintf(stderr,
		"usage: collstack sim ps | ps_scen [--workers W] [--servers K] [--rows R] "
		"[--dim D] [--keys-per-push P] [--iters I] "
		"[--mode sync|async|ssp:S] [--opt sgd|momentum|adagrad|adam] "
		"[--dtype T] [--skew Z] [--loss P] [--dup P] [--seed N] "
		"[--msg-max B] [--frame B] [--expect-clean 0|1] [--slow W] [--budget ROWS] [--vnodes V] "
		"[--ckpt-at C --kill-server K --kill-at T] [--max-share X] "
		"[--row-bytes B] [--optimizer O] [--carrier tp|queue] "
		"[--bad-push 1]\n");
	exit(2);
}

static void parse(int argc, char **argv, bool tp)
{
	uint32_t row_bytes = 0;

	o = (struct opts){ .workers = 8,
			   .servers = 4,
			   .rows = 2000,
			   .dim = 8,
			   .kpp = 64,
			   .iters = 20,
			   .vnodes = 128,
			   .mode = CS_PS_SYNC,
			   .opt = CS_PS_OPT_ADAM,
			   .dtype = CS_F32,
			   .skew = 1.1,
			   .loss = 0.02,
			   .dup = 0.02,
			   .seed = 1,
			   .msg_max = 1400,
			   .slow = -1,
			   .kill = -1,
			   .tp = tp };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!v)
			usage();
		i++;
		if (!strcmp(a, "--workers"))
			o.workers = (uint32_t)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--servers"))
			o.servers = (uint32_t)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--rows"))
			o.rows = (uint32_t)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--dim"))
			o.dim = (uint32_t)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--keys-per-push"))
			o.kpp = (uint32_t)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--iters"))
			o.iters = (uint32_t)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--vnodes"))
			o.vnodes = (uint32_t)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--mode")) {
			if (cs_ps_mode_parse(v, &o.mode, &o.stale))
				usage();
		} else if (!strcmp(a, "--carrier")) {
			if (strcmp(v, "tp") && strcmp(v, "queue"))
				usage();
			o.tp = !strcmp(v, "tp");
		} else if (!strcmp(a, "--bad-push")) {
			o.bad_push = atoi(v) != 0;
		} else if (!strcmp(a, "--row-bytes")) {
			row_bytes = (uint32_t)strtoul(v, NULL, 0);
		} else if (!strcmp(a, "--opt") || !strcmp(a, "--optimizer")) {
			if (cs_ps_opt_parse(v, &o.opt))
				usage();
		} else if (!strcmp(a, "--dtype")) {
			if (cs_dtype_parse(v, &o.dtype))
				usage();
		} else if (!strcmp(a, "--skew"))
			o.skew = strtod(v, NULL);
		else if (!strcmp(a, "--loss"))
			o.loss = strtod(v, NULL);
		else if (!strcmp(a, "--dup"))
			o.dup = strtod(v, NULL);
		else if (!strcmp(a, "--seed"))
			o.seed = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--msg-max"))
			o.msg_max = strtoul(v, NULL, 0);
		else if (!strcmp(a, "--frame"))
			o.frame = strtoul(v, NULL, 0);
		else if (!strcmp(a, "--expect-clean"))
			o.clean = atoi(v) != 0;
		else if (!strcmp(a, "--slow"))
			o.slow = atoi(v);
		else if (!strcmp(a, "--budget"))
			o.budget = (uint32_t)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--max-share"))
			o.max_share = strtod(v, NULL);
		else if (!strcmp(a, "--ckpt-at"))
			o.ckpt_at = (uint32_t)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--kill-server"))
			o.kill = atoi(v);
		else if (!strcmp(a, "--kill-at"))
			o.kill_at = (uint32_t)strtoul(v, NULL, 0);
		else
			usage();
	}
	if (row_bytes) { /* --row-bytes: dim of the dtype */
		size_t e = cs_dtype_size(o.dtype);

		if (!e || row_bytes % e) {
			fprintf(stderr,
				"--row-bytes %u is not a whole number "
				"of %s values\n",
				row_bytes, cs_dtype_name(o.dtype));
			exit(2);
		}
		o.dim = (uint32_t)(row_bytes / e);
	}
	if (o.tp && o.kill >= 0) {
		fprintf(stderr, "--kill-server needs --carrier queue (a core "
				"that lost a peer is not replaced here)\n");
		exit(2);
	}
	if (!o.workers || o.workers > 1024 || !o.servers || o.servers > 256 ||
	    !o.rows || !o.dim || o.dim > 4096 || !o.kpp || o.loss < 0 ||
	    o.loss >= 0.5 || o.dup < 0 || o.dup > 0.5)
		usage();
	if (o.kill >= 0 && ((uint32_t)o.kill >= o.servers ||
			    o.ckpt_at >= o.kill_at || o.kill_at >= o.iters))
		usage();
}

static struct memspill *mspill;

static void make_store(uint32_t k)
{
	struct cs_ps_store_cfg cfg = { .server = SRV_BASE + k,
				       .map = &map,
				       .msg_max = o.msg_max,
				       .parked_max = 4 * o.workers };
	struct cs_ps_store_io io = { srv_send,
				     (void *)(uintptr_t)(SRV_BASE + k) };
	struct cs_ps_spill sp = { &ms_ops, &mspill[k] };
	size_t rb = cs_ps_row_bytes(&spec);
	size_t frame = ((rb + 7) & ~7ul) +
		       ((cs_ps_state_floats(&spec) * 4 + 7) & ~7ul);
	int rc;

	rc = cs_ps_store_create(&srv[k], &cfg, &io);
	if (rc)
		die("store create: %d", rc);
	rc = cs_ps_store_add_table(srv[k], &spec,
				   o.budget ? o.budget * frame : 0,
				   o.budget ? &sp : NULL);
	if (rc)
		die("add table: %d", rc);
}

static int cap_chunk(void *ctx, void *buf, size_t len, uint64_t nrec)
{
	struct snapcap *c = ctx;

	c->p = realloc(c->p, c->len + len);
	if (!c->p)
		die("out of memory");
	memcpy(c->p + c->len, buf, len);
	c->len += len;
	c->nrec += nrec;
	free(buf);
	return 0;
}

static void cap_end(void *ctx, uint64_t nrec, int rc)
{
	struct snapcap *c = ctx;

	c->ended = 1;
	c->rc = rc;
	if (nrec != c->nrec)
		die("snapshot counted %llu records, handed %llu",
		    (unsigned long long)nrec, (unsigned long long)c->nrec);
}

/* Every worker finished iteration C (and, in sync, every server applied
 * it): snapshot every server, in steps, as a pump would. */
static void maybe_checkpoint(void)
{
	if (o.kill < 0 || ckpt_taken)
		return;
	for (uint32_t w = 0; w < o.workers; w++)
		if (ws[w].phase != 0 || ws[w].t != o.ckpt_at)
			return;
	for (uint32_t k = 0; k < o.servers; k++)
		if (o.mode == CS_PS_SYNC &&
		    cs_ps_store_clock(srv[k], spec.id) != o.ckpt_at)
			return;
	for (uint32_t k = 0; k < o.servers; k++) {
		struct cs_ps_snap_sink sink = { cap_chunk, cap_end, &ckpt[k] };
		int rc = cs_ps_store_snap_begin(srv[k], spec.id, &sink, 8192);

		while (rc == 0 && !ckpt[k].ended)
			rc = cs_ps_store_snap_step(srv[k], 100) < 0 ? -1 : 0;
		if (rc || ckpt[k].rc)
			die("checkpoint of server %u failed", k);
	}
	ckpt_taken = true;
}

static void maybe_kill(void)
{
	if (o.kill < 0 || killed || !ckpt_taken || ws[0].t < o.kill_at)
		return;
	cs_ps_store_destroy(srv[o.kill]);
	srv[o.kill] = NULL;
	killed = true;
}

/* PS_SCEN_DEBUG: each worker's, server's and flow's counters when the
 * run made no progress (docs/ps.md). */
static void stall_dump(void)
{
	for (uint32_t w = 0; w < o.workers; w++) {
		const struct cs_ps_worker_stats *x = cs_ps_worker_stats(wk[w]);
		fprintf(stderr,
			"W%u sent=%llu retx=%llu push=%llu pull=%llu waits=%llu replies=%llu dup=%llu bad=%llu\n",
			w, (unsigned long long)x->msgs_sent,
			(unsigned long long)x->retransmits,
			(unsigned long long)x->retx_push,
			(unsigned long long)x->retx_pull,
			(unsigned long long)x->pull_waits,
			(unsigned long long)x->replies,
			(unsigned long long)x->dup_replies,
			(unsigned long long)x->bad_replies);
	}
	for (uint32_t k = 0; k < o.servers; k++) {
		const struct cs_ps_store_stats *x = cs_ps_store_stats(srv[k]);
		fprintf(stderr,
			"S%u applied=%llu dup=%llu early=%llu parked=%llu rej=%llu pparked=%llu pdup=%llu served=%llu busy=%llu\n",
			k, (unsigned long long)x->push_applied,
			(unsigned long long)x->push_dup,
			(unsigned long long)x->push_early,
			(unsigned long long)x->push_parked,
			(unsigned long long)x->rejected,
			(unsigned long long)x->pulls_parked,
			(unsigned long long)x->pull_dup,
			(unsigned long long)x->pulls_served,
			(unsigned long long)x->pull_busy);
	}
	for (uint32_t r = 0; o.tp && r < o.workers + o.servers; r++) {
		struct cs_ps_flow_stats x;
		cs_ps_flow_get_stats(flows[r], &x);
		fprintf(stderr,
			"F%u sent=%llu local=%llu acked=%llu rx=%llu rx_bad=%llu frag_bad=%llu backlog=%llu\n",
			r, (unsigned long long)x.sent,
			(unsigned long long)x.local,
			(unsigned long long)x.acked, (unsigned long long)x.rx,
			(unsigned long long)x.rx_bad,
			(unsigned long long)x.frag_bad,
			(unsigned long long)cs_ps_flow_backlog(flows[r]));
	}
}

/* The first failure: check it names the dead server, then roll the job
 * back to the checkpoint. */
static void maybe_recover(void)
{
	size_t fb, rec;

	if (!nfail || recovered)
		return;
	if (first_fail_rc != CS_ERR_PEER_LOST ||
	    first_fail_peer != SRV_BASE + (uint32_t)o.kill)
		die("first failure: %d naming server %u; want "
		    "CS_ERR_PEER_LOST naming %u",
		    first_fail_rc, first_fail_peer, SRV_BASE + o.kill);
	resetting = true;
	for (uint32_t w = 0; w < o.workers; w++) {
		cs_ps_worker_reset(wk[w]);
		ws[w].t = o.ckpt_at;
		ws[w].phase = 0;
		ws[w].ready_at = now;
		pushes_issued[w] = o.ckpt_at;
	}
	resetting = false;
	for (uint32_t i = 0; i < nq; i++) /* the old epoch's messages */
		free(q[i].buf);
	nq = 0;
	for (uint32_t k = 0; k < o.servers; k++) {
		cs_ps_store_destroy(srv[k]);
		make_store(k);
		fb = cs_ps_store_frame_bytes(srv[k], spec.id);
		rec = sizeof(struct cs_ps_rec_head) + fb;
		for (size_t off = 0; off < ckpt[k].len; off += rec) {
			struct cs_ps_rec_head h;

			memcpy(&h, ckpt[k].p + off, sizeof(h));
			if (cs_ps_store_load_rec(srv[k], spec.id, &h,
						 ckpt[k].p + off + sizeof(h),
						 fb))
				die("restore of server %u failed", k);
		}
		cs_ps_store_set_clock(srv[k], spec.id, o.ckpt_at);
	}
	recovered = true;
}

int cs_sim_ps(int argc, char **argv, bool tp)
{
	struct cs_tp_stats tst;
	uint32_t *sids;
	size_t rb;
	double zsum = 0;
	uint64_t grads_in = 0, dups = 0, applied = 0, rows_max = 0;
	uint64_t retx = 0, combined = 0, spill_rd = 0, spill_wr = 0;
	uint32_t max_stale = 0;
	uint64_t rejected = 0, pull_busy = 0;
	double worst = 0;
	int rc;

	parse(argc, argv, tp);
	rng = o.seed * 0x9e3779b97f4a7c15ull + 1;
	memset(&spec, 0, sizeof(spec));
	spec.id = 3;
	spec.dim = o.dim;
	spec.dtype = o.dtype;
	spec.key_max = o.rows;
	spec.mode = o.mode;
	spec.staleness = o.stale;
	spec.workers = o.workers;
	cs_ps_opt_defaults(&spec.opt, o.opt);
	spec.init.kind = CS_PS_INIT_UNIFORM;
	spec.init.seed = o.seed;
	spec.init.scale = 0.05f;
	if (cs_ps_spec_check(&spec))
		die("bad table spec");
	rb = cs_ps_row_bytes(&spec);

	zipf_cdf = malloc(sizeof(double) * o.rows);
	for (uint32_t i = 0; i < o.rows; i++) {
		zsum += 1.0 / pow(i + 1.0, o.skew);
		zipf_cdf[i] = zsum;
	}
	for (uint32_t i = 0; i < o.rows; i++)
		zipf_cdf[i] /= zsum;

	sids = malloc(sizeof(*sids) * o.servers);
	for (uint32_t k = 0; k < o.servers; k++)
		sids[k] = SRV_BASE + k;
	if (cs_ps_shardmap_init(&map, sids, o.servers, o.vnodes))
		die("shard map");
	srv = calloc(o.servers, sizeof(*srv));
	mspill = calloc(o.servers, sizeof(*mspill));
	ckpt = calloc(o.servers, sizeof(*ckpt));
	for (uint32_t k = 0; k < o.servers; k++)
		make_store(k);
	wk = calloc(o.workers, sizeof(*wk));
	ws = calloc(o.workers, sizeof(*ws));
	pushes_issued = calloc(o.workers, sizeof(*pushes_issued));
	for (uint32_t w = 0; w < o.workers; w++) {
		struct cs_ps_worker_cfg cfg = {
			.rank = w,
			.map = &map,
			.msg_max = o.msg_max,
			/* over the core, its sessions retransmit: the
			 * worker's own timer stays out of their way */
			.rto = o.tp ? CS_NS_PER_S : 20 * LINK_NS,
			.rto_max = o.tp ? CS_NS_PER_S : 200 * LINK_NS,
			/* a dead server is declared after 12 sends; a
			 * waiting one answers "in progress" */
			.max_tries = o.kill >= 0 ? 12 : 0,
		};
		struct cs_ps_worker_io io = { wk_send, wk_done,
					      (void *)(uintptr_t)w };

		rc = cs_ps_worker_create(&wk[w], &cfg, &io);
		if (!rc)
			rc = cs_ps_worker_add_table(wk[w], &spec);
		if (rc)
			die("worker: %d", rc);
		ws[w].keys = malloc(sizeof(uint64_t) * o.kpp);
		ws[w].pulled = malloc(rb * o.kpp);
		ws[w].grads = malloc(rb * o.kpp);
	}

	if (o.tp)
		tp_setup();
	if (o.bad_push)
		send_bad_push();
	for (uint64_t round = 0;; round++) {
		cs_ns_t next = UINT64_MAX;
		uint32_t fin = 0, i;

		/* deliver every message due now, in time order */
		if (nq)
			qsort(q, nq, sizeof(*q), qcmp);
		for (i = 0; i < nq && q[i].at <= now; i++)
			;
		{
			uint32_t due = i;
			struct qmsg *batch =
				malloc(sizeof(*batch) * (due ? due : 1));

			if (due) {
				memcpy(batch, q, sizeof(*q) * due);
				memmove(q, q + due, sizeof(*q) * (nq - due));
			}
			nq -= due;
			for (i = 0; i < due; i++)
				deliver(&batch[i]);
			free(batch);
		}
		for (uint32_t k = 0; k < o.servers; k++) {
			rc = srv[k] ? cs_ps_store_flush(srv[k]) : 0;
			if (rc)
				die("flush: %d", rc);
		}
		maybe_checkpoint();
		maybe_kill();
		for (uint32_t w = 0; w < o.workers; w++) {
			worker_step(w);
			next = CS_MIN(next, cs_ps_worker_tick(wk[w], now));
			fin += ws[w].phase == 3;
			/* (a worker held for the checkpoint waits for
			 * the others, not for a time) */
			if (ws[w].phase == 0 && ws[w].ready_at > now)
				next = CS_MIN(next, ws[w].ready_at);
		}
		if (nfail && !recovered) {
			maybe_recover();
			continue;
		}
		for (uint32_t r = 0; o.tp && r < o.workers + o.servers; r++) {
			cs_tp_poll(tps[r], now);
			next = CS_MIN(next, cs_tp_next_deadline(tps[r], now));
			/* the last frames' ACKs too */
			fin -= fin == o.workers && cs_ps_flow_backlog(flows[r]);
		}
		if (fin == o.workers && !nq)
			break;
		for (i = 0; i < nq; i++)
			next = CS_MIN(next, q[i].at);
		if (next == UINT64_MAX)
			die("stalled at %llu ns: nothing in flight, %u of %u "
			    "workers finished",
			    (unsigned long long)now, fin, o.workers);
		if (getenv("PS_SCEN_DEBUG") && round % 20000 == 0) {
			fprintf(stderr, "round %llu now %llu nq %u:",
				(unsigned long long)round,
				(unsigned long long)now, nq);
			for (uint32_t w = 0; w < o.workers; w++)
				fprintf(stderr, " %u/%d/%u", ws[w].t,
					ws[w].phase,
					cs_ps_worker_inflight(wk[w]));
			for (uint32_t k = 0; k < o.servers; k++)
				fprintf(stderr, " S%llu",
					(unsigned long long)cs_ps_store_clock(
						srv[k], spec.id));
			fprintf(stderr, "\n");
		}
		if (next > now)
			now = next;
		if (now > 100ull * CS_NS_PER_S) {
			if (getenv("PS_SCEN_DEBUG"))
				stall_dump();
			die("no progress in 100 s of virtual time");
		}
	}

	ref_run();
	for (uint32_t k = 0; k < o.servers; k++) {
		const struct cs_ps_store_stats *s = cs_ps_store_stats(srv[k]);

		grads_in += s->grads_in;
		dups += s->push_dup;
		applied += s->push_applied;
		rows_max = CS_MAX(rows_max, s->grads_in);
		max_stale = CS_MAX(max_stale, s->max_staleness);
		spill_rd += s->spill_reads;
		spill_wr += s->spill_writes;
		/* a pull told to come back (a full parking) is flow
		 * control, not a refusal: counted apart */
		rejected += s->rejected - s->pull_busy;
		pull_busy += s->pull_busy;
	}
	for (uint32_t w = 0; w < o.workers; w++) {
		retx += cs_ps_worker_stats(wk[w])->retransmits;
		combined += cs_ps_worker_stats(wk[w])->keys_combined;
	}
	if (o.clean) {
		uint64_t early = 0, bad = 0;

		for (uint32_t k = 0; k < o.servers; k++)
			early += cs_ps_store_stats(srv[k])->push_early;
		for (uint32_t r = 0; o.tp && flows && r < o.workers + o.servers;
		     r++) {
			struct cs_ps_flow_stats fs;

			if (!flows[r])
				continue;
			cs_ps_flow_get_stats(flows[r], &fs);
			bad += fs.rx_bad;
		}
		if (early || retx || dups || bad)
			die("--expect-clean: push_early=%llu worker_retx=%llu "
			    "server_dups=%llu flow_rx_bad=%llu",
			    (unsigned long long)early, (unsigned long long)retx,
			    (unsigned long long)dups, (unsigned long long)bad);
	}
	if (rejected != (o.bad_push ? 1u : 0u))
		die("servers refused %llu messages, %u expected",
		    (unsigned long long)rejected, o.bad_push ? 1u : 0u);
	if (o.kill >= 0 && !recovered)
		die("server %d was never found dead", o.kill);
	if (grads_in != ref_grads)
		die("servers took %llu gradient rows, workers pushed %llu",
		    (unsigned long long)grads_in,
		    (unsigned long long)ref_grads);
	if (o.max_share > 0 &&
	    (double)rows_max * o.servers / (double)(grads_in ? grads_in : 1) >
		    o.max_share)
		die("a server took %.2f x the mean load (limit %.2f)",
		    (double)rows_max * o.servers /
			    (double)(grads_in ? grads_in : 1),
		    o.max_share);
	if (o.mode == CS_PS_SSP && max_stale > o.stale)
		die("a pull was served %u versions stale (s=%u)", max_stale,
		    o.stale);

	{
		uint8_t *a = malloc(rb), *b = malloc(rb);
		float *fa = malloc(sizeof(float) * o.dim);
		float *fb = malloc(sizeof(float) * o.dim);
		uint64_t bad = 0;

		for (uint64_t key = 0; key < o.rows; key++) {
			uint32_t s = cs_ps_shard_of(&map, spec.id, key);

			rc = cs_ps_store_peek(srv[s - SRV_BASE], spec.id, key,
					      a);
			if (rc)
				die("peek: %d", rc);
			ref_row(key, b);
			if (o.mode == CS_PS_SYNC) {
				bad += memcmp(a, b, rb) != 0;
				continue;
			}
			cs_ps_row_to_f32(o.dtype, a, fa, o.dim);
			cs_ps_row_to_f32(o.dtype, b, fb, o.dim);
			for (uint32_t j = 0; j < o.dim; j++) {
				double e = fabs((double)fa[j] - fb[j]);

				if (!isfinite(fa[j]))
					die("key %llu: not finite",
					    (unsigned long long)key);
				worst = fmax(worst, e);
				/* SGD sums the same gradients in another
				 * order: rounding only */
				if (o.opt == CS_PS_OPT_SGD &&
				    e > 1e-4 * (1.0 + fabs(fb[j])))
					bad++;
			}
		}
		if (bad)
			die("%llu rows differ from the reference (worst %g)",
			    (unsigned long long)bad, worst);
		free(a);
		free(b);
		free(fa);
		free(fb);
	}
	tp_fini(&tst);
	printf("ps ok carrier=%s mode=%s%s%.0u opt=%s dtype=%s workers=%u servers=%u "
	       "rows=%u iters=%u msgs=%llu lost=%llu dup=%llu retx=%llu "
	       "server_dups=%llu combined=%llu push_msgs=%llu "
	       "max_staleness=%u spill_rd=%llu spill_wr=%llu "
	       "max_server_share=%.2f %s%s virt_ms=%.3f tp_frames=%llu "
	       "tp_retx=%llu tp_dup_rcvd=%llu pushes_per_s=%.0f "
	       "pulls_per_s=%.0f rejected=%llu pull_busy=%llu\n",
	       o.tp ? "tp" : "queue", cs_ps_mode_name(o.mode),
	       o.mode == CS_PS_SSP ? ":" : "",
	       o.mode == CS_PS_SSP ? o.stale : 0u, cs_ps_opt_name(o.opt),
	       cs_dtype_name(o.dtype), o.workers, o.servers, o.rows, o.iters,
	       (unsigned long long)n_sent, (unsigned long long)n_lost,
	       (unsigned long long)n_dup, (unsigned long long)retx,
	       (unsigned long long)dups, (unsigned long long)combined,
	       (unsigned long long)applied, max_stale,
	       (unsigned long long)spill_rd, (unsigned long long)spill_wr,
	       (double)rows_max * o.servers / (double)(grads_in ? grads_in : 1),
	       o.mode == CS_PS_SYNC	? "exact=bitwise"
	       : o.opt == CS_PS_OPT_SGD ? "within=1e-4"
					: "conserved",
	       recovered ? " recovered_from_lost_server=1" : "",
	       (double)now / 1e6, (unsigned long long)tst.tx_data,
	       (unsigned long long)tst.tx_retx,
	       (unsigned long long)tst.rel_dup_rcvd,
	       (double)pushes_done * 1e9 / (double)(now ? now : 1),
	       (double)pulls_done * 1e9 / (double)(now ? now : 1),
	       (unsigned long long)rejected, (unsigned long long)pull_busy);
	for (uint32_t w = 0; w < o.workers; w++) {
		cs_ps_worker_destroy(wk[w]);
		free(ws[w].keys);
		free(ws[w].pulled);
		free(ws[w].grads);
	}
	for (uint32_t k = 0; k < o.servers; k++) {
		cs_ps_store_destroy(srv[k]);
		free(mspill[k].p);
	}
	cs_ps_shardmap_fini(&map);
	for (uint32_t k = 0; k < o.servers; k++)
		free(ckpt[k].p);
	free(ckpt);
	free(mspill);
	free(srv);
	free(wk);
	free(ws);
	free(pushes_issued);
	free(sids);
	free(zipf_cdf);
	free(q);
	free(ref.val);
	free(ref.state);
	free(ref.step);
	free(ref.exists);
	return 0;
}

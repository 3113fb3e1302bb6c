// SPDX-License-Identifier: MIT
/*
 * One reduction for both levels: the same inputs reduced node-locally (N
 * trainers on one sidecar, through the IPC server) and across nodes (N
 * ranks of the ring engine, one per node) give the same bits, for every
 * dtype and operator, with NaNs, ties and signed zeros in the data.
 *
 * The node-local reduction folds the ranks in rank order 0, 1, ..., N-1,
 * as the cross-node direct exchange does (ring.c): there every input bit
 * pattern must come out the same, NaN payloads and the sign of a zero
 * chosen by a tie included. The ring reduces each segment in its ring
 * order (a rotation of rank order), so there only data whose result does
 * not depend on the order is compared: integers, exact small floats, one
 * NaN pattern, equal values, no -0 beside +0. The old scalar kernels of
 * the IPC server (ipc_reduce.c) failed both: their min/max dropped NaNs.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collectives/ring.h"
#include "collstack/collstack.h"
#include "internal/log.h"
#include "../coll_sim/ring_harness.h"
#include "sidecar_loop.h"

#define N_RANKS 4
#define N_ELEMS 1000
#define WAIT_NS (60 * 1000000000ll) /* generous: loaded 2-core boxes */

static const enum cs_dtype types[] = { CS_F32, CS_F64, CS_F16, CS_BF16,
				       CS_I32, CS_I64, CS_U8 };
#define N_TYPES (sizeof(types) / sizeof(types[0]))
#define N_OPS CS_REDOP_COUNT
#define ELEM_MAX 8

/* What the trainers hand back: each rank's result of each reduction. */
struct out {
	uint8_t res[2][N_TYPES][N_OPS][N_RANKS][N_ELEMS * ELEM_MAX];
	int failed_at; /* first failing (set, type, op), or -1 */
	char msg[256];
};

static uint64_t mix(uint64_t x)
{
	x ^= x >> 31;
	x *= 0x7fb5d329728ea185ull;
	x ^= x >> 27;
	x *= 0x81dadef4bc2dd44dull;
	return x ^ (x >> 33);
}

/* Store the double @v as type @t (exact for the values used below). */
static void put(enum cs_dtype t, void *dst, double v)
{
	float f = (float)v;
	uint32_t u;

	switch (t) {
	case CS_F32:
		memcpy(dst, &f, 4);
		break;
	case CS_F64:
		memcpy(dst, &v, 8);
		break;
	case CS_BF16:
		memcpy(&u, &f, 4);
		memcpy(dst, (uint16_t[]){ (uint16_t)(u >> 16) }, 2);
		break;
	default: /* f16: small integers and halves only */
	{
		uint16_t h;

		if (v == 0) {
			h = signbit(v) ? 0x8000 : 0;
		} else if (isinf(v)) {
			h = v < 0 ? 0xfc00 : 0x7c00;
		} else {
			double a = fabs(v);
			int e = 0;

			while (a >= 2) {
				a /= 2;
				e++;
			}
			while (a < 1) {
				a *= 2;
				e--;
			}
			h = (uint16_t)((v < 0 ? 0x8000 : 0) |
				       (uint16_t)((e + 15) << 10) |
				       (uint16_t)((a - 1) * 1024));
		}
		memcpy(dst, &h, 2);
	}
	}
}

/* A NaN of type @t; @k picks the sign and payload (0: the one NaN). */
static void put_nan(enum cs_dtype t, void *dst, unsigned k)
{
	uint32_t f = 0x7fc00000u | (k & 0xff) << 8 | (k & 0x100 ? 1u << 31 : 0);
	uint64_t d = 0x7ff8000000000000ull | (uint64_t)(k & 0xff) << 20 |
		     (k & 0x100 ? 1ull << 63 : 0);
	uint16_t h = (uint16_t)(0x7e00 | (k & 0x1f) | (k & 0x100 ? 0x8000 : 0));
	uint16_t b = (uint16_t)(0x7fc0 | (k & 0x1f) | (k & 0x100 ? 0x8000 : 0));

	switch (t) {
	case CS_F32:
		memcpy(dst, &f, 4);
		break;
	case CS_F64:
		memcpy(dst, &d, 8);
		break;
	case CS_F16:
		memcpy(dst, &h, 2);
		break;
	default:
		memcpy(dst, &b, 2);
		break;
	}
}

/*
 * Element @i of rank @r's input. @any: everything (random bit patterns,
 * NaNs of several payloads, +0 and -0 side by side, infinities, equal
 * values, inexact sums); else only data whose result is order-free.
 */
static void gen(enum cs_dtype t, enum cs_redop op, bool any, uint32_t r,
		size_t i, void *dst)
{
	uint64_t h = mix((uint64_t)t << 48 ^ (uint64_t)op << 40 ^
			 (uint64_t)r << 32 ^ i ^ (any ? 1ull << 60 : 0));
	unsigned cls = (unsigned)(h % 10);
	size_t sz = cs_dtype_size(t);
	double small = (double)((int)((h >> 8) % 17) - 8);

	if (t == CS_I32 || t == CS_I64 || t == CS_U8) {
		/* wrap-around sum and prod, min and max: order-free */
		uint64_t v = cls < 3 ? (uint64_t)(int64_t)small : mix(h);

		if (cls == 3)
			v = i; /* the same on every rank: ties */
		memcpy(dst, &v, sz);
		return;
	}
	if (op == CS_PROD)
		small = (double)((int)((h >> 8) % 7) - 3); /* |prod| <= 81 */
	if (!any) {
		if (cls == 0)
			put_nan(t, dst, 0);
		else if (cls == 1)
			put(t, dst, (double)(i % 5)); /* ties */
		else
			put(t, dst, small);
		return;
	}
	switch (cls) {
	case 0:
		put_nan(t, dst, (unsigned)(h >> 16)); /* payload per rank */
		break;
	case 1:
		put(t, dst, (h >> 20) & 1 ? -0.0 : 0.0);
		break;
	case 2:
		put(t, dst, (h >> 20) & 1 ? -INFINITY : INFINITY);
		break;
	case 3:
		put(t, dst, (double)(i % 3)); /* ties */
		break;
	case 4:
		memcpy(dst, (uint64_t[]){ mix(h) }, sz); /* any pattern */
		break;
	default: /* inexact sums */
		if (t == CS_F16 || t == CS_BF16)
			put(t, dst, small + (double)((h >> 20) & 3) * 0.25);
		else
			put(t, dst, small / 3 + (double)(h >> 40) * 1e-7);
		break;
	}
}

static int connect_retry(const char *path, struct cs_client **c)
{
	int ret = -ENOENT;

	for (int i = 0; i < 1000; i++) {
		ret = cs_connect(path, c);
		if (ret != -ENOENT && ret != -ECONNREFUSED)
			return ret;
		usleep(5000);
	}
	return ret;
}

/* A trainer: every (data set, type, op) as one node-local allreduce. */
static int trainer(const char *path, uint32_t rank, struct out *o)
{
	size_t bytes = N_ELEMS * ELEM_MAX;
	struct cs_client *c;
	struct cs_group *g;
	struct cs_buf *b;
	uint8_t *send, *recv;
	cs_req_t req;

	if (connect_retry(path, &c) ||
	    cs_group_join(c, "parity", (int)rank, N_RANKS, (int)rank, N_RANKS,
			  &g) ||
	    cs_buf_alloc(c, 2 * bytes, &b))
		return 2;
	send = cs_buf_ptr(b);
	recv = send + bytes;
	for (int set = 0; set < 2; set++)
		for (size_t ti = 0; ti < N_TYPES; ti++)
			for (int op = 0; op < N_OPS; op++) {
				enum cs_dtype t = types[ti];
				size_t sz = cs_dtype_size(t);

				for (size_t i = 0; i < N_ELEMS; i++)
					gen(t, (enum cs_redop)op, set, rank, i,
					    send + i * sz);
				if (cs_allreduce(g, send, recv, N_ELEMS, t,
						 (enum cs_redop)op, &req) ||
				    cs_wait(c, req, WAIT_NS)) {
					snprintf(o->msg, sizeof(o->msg), "%s",
						 cs_errmsg(c));
					return 3;
				}
				memcpy(o->res[set][ti][op][rank], recv,
				       N_ELEMS * sz);
			}
	cs_disconnect(c);
	return 0;
}

static volatile sig_atomic_t sc_stop;

static void sc_on_term(int sig)
{
	(void)sig;
	sc_stop = 1;
}

/* Node-local: a sidecar and N_RANKS trainers, results in @o. */
static void run_node_local(struct out *o)
{
	char path[108];
	sigset_t block, old;
	pid_t sc, tr[N_RANKS];
	int st;

	snprintf(path, sizeof(path), "/tmp/cs-parity-%d.sock", (int)getpid());
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigprocmask(SIG_BLOCK, &block, &old);
	sc = fork();
	cr_assert_geq(sc, 0);
	if (!sc) {
		struct sigaction sa = { .sa_handler = sc_on_term };

		sigaction(SIGTERM, &sa, NULL);
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		sigprocmask(SIG_SETMASK, &old, NULL);
		cs_log_level = CS_LOG_WARN;
		_exit(cs_test_sidecar_loop(path, &sc_stop, NULL, NULL) ? 1 : 0);
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	for (uint32_t r = 0; r < N_RANKS; r++) {
		tr[r] = fork();
		cr_assert_geq(tr[r], 0);
		if (!tr[r]) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			_exit(trainer(path, r, o));
		}
	}
	for (uint32_t r = 0; r < N_RANKS; r++) {
		cr_assert_eq(waitpid(tr[r], &st, 0), tr[r]);
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
			  "trainer %u: status %d: %s", r, st, o->msg);
	}
	kill(sc, SIGTERM);
	cr_assert_eq(waitpid(sc, &st, 0), sc);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "sidecar status %d",
		  st);
}

/* Cross-node: the same inputs on N_RANKS ranks of the engine (one per
 * node), through the in-process network of the ring tests, with loss and
 * duplicates; @res[r] gets rank r's result. */
static void run_cross_node(int set, size_t ti, int op, bool direct,
			   uint8_t *res[N_RANKS])
{
	enum cs_dtype t = types[ti];
	size_t sz = cs_dtype_size(t);
	struct rh_net w = {
		.n = N_RANKS,
		.rng = 7 + ti * 4 + (size_t)op,
		.loss = 0.05,
		.dup = 0.05,
	};
	uint8_t *in[N_RANKS];
	struct cs_coll_params p;

	w.ops = calloc(N_RANKS, sizeof(void *));
	cr_assert(w.ops);
	for (uint32_t r = 0; r < N_RANKS; r++) {
		in[r] = malloc(N_ELEMS * sz);
		cr_assert(in[r]);
		for (size_t i = 0; i < N_ELEMS; i++)
			gen(t, (enum cs_redop)op, set, r, i, in[r] + i * sz);
		cs_coll_params_default(&p, NULL);
		p.kind = CS_COLL_ALLREDUCE;
		p.nranks = N_RANKS;
		p.rank = r;
		p.sendbuf = in[r];
		p.recvbuf = res[r];
		p.count = N_ELEMS;
		p.dtype = t;
		p.op = (enum cs_redop)op;
		p.chunk = 256;
		p.mtu_payload = 64;
		p.direct_max = direct ? N_ELEMS * sz : 0;
		cr_assert_eq(cs_coll_is_direct(&p), direct);
		cr_assert_eq(cs_coll_init(&p, &w.ops[r]), 0);
	}
	cr_assert(rh_run(&w, 100000000), "%s %s: %s", cs_dtype_name(t),
		  cs_redop_name((enum cs_redop)op), w.err);
	for (uint32_t r = 0; r < N_RANKS; r++) {
		cs_coll_free(w.ops[r]);
		free(in[r]);
	}
	free(w.ops);
}

/* The index of the first element where @a and @b differ, or -1. */
static long first_diff(const uint8_t *a, const uint8_t *b, size_t sz)
{
	for (size_t i = 0; i < N_ELEMS; i++)
		if (memcmp(a + i * sz, b + i * sz, sz))
			return (long)i;
	return -1;
}

static void check(int set, bool direct)
{
	struct out *o = mmap(NULL, sizeof(*o), PROT_READ | PROT_WRITE,
			     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	uint8_t *res[N_RANKS];

	cr_assert_neq(o, MAP_FAILED);
	run_node_local(o);
	for (uint32_t r = 0; r < N_RANKS; r++)
		res[r] = malloc(N_ELEMS * ELEM_MAX);
	for (size_t ti = 0; ti < N_TYPES; ti++)
		for (int op = 0; op < N_OPS; op++) {
			enum cs_dtype t = types[ti];
			size_t sz = cs_dtype_size(t);
			const uint8_t *local = o->res[set][ti][op][0];

			run_cross_node(set, ti, op, direct, res);
			for (uint32_t r = 0; r < N_RANKS; r++) {
				long d = first_diff(o->res[set][ti][op][r],
						    local, sz);
				long x = first_diff(res[r], local, sz);
				uint64_t lv = 0, xv = 0;

				cr_assert_eq(d, -1,
					     "%s %s: local rank %u differs "
					     "from local rank 0 at %ld",
					     cs_dtype_name(t),
					     cs_redop_name((enum cs_redop)op),
					     r, d);
				if (x >= 0) {
					memcpy(&lv, local + (size_t)x * sz, sz);
					memcpy(&xv, res[r] + (size_t)x * sz,
					       sz);
				}
				cr_assert_eq(x, -1,
					     "%s %s (%s): node %u's result "
					     "differs from the node-local one "
					     "at element %ld: %#llx vs %#llx",
					     cs_dtype_name(t),
					     cs_redop_name((enum cs_redop)op),
					     direct ? "direct" : "ring", r, x,
					     (unsigned long long)xv,
					     (unsigned long long)lv);
			}
		}
	for (uint32_t r = 0; r < N_RANKS; r++)
		free(res[r]);
	munmap(o, sizeof(*o));
}

/* Everything, bit for bit: rank order on both levels. */
Test(reduce_parity, local_equals_direct_exchange, .timeout = 300)
{
	check(1, true);
}

/* Order-free data: the ring's rotated order may not change a bit either. */
Test(reduce_parity, local_equals_ring, .timeout = 300)
{
	check(0, false);
}

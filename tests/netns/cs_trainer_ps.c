/* SPDX-License-Identifier: MIT */
/*
 * cs-trainer-ps: one trainer of the parameter-server API (collstack/ps.h)
 * for tests/netns/test_ps_trainers.sh. Rank and layout from RANK,
 * WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE; the sidecar from
 * COLLSTACK_SOCKET.
 *
 *   cs-trainer-ps train [--steps S] [--dim D] [--rows K] [--kpp P]
 *		[--mode sync|async|ssp:S] [--group NAME]
 *	A table of K rows of D f32 (constant initializer 1, SGD, lr 0.5).
 *	Step s: push version s (P keys of a pattern of (rank, step), some
 *	of them twice, gradients (1 + (rank + 3s + key + j) % 8) / 64),
 *	then pull those keys at clock s + 1. The gradients are dyadic and
 *	lr a power of two, so the table is exact in f32 whatever the order
 *	of the sums: every rank keeps the serial reference itself. sync:
 *	every pulled row equals the reference after versions 0..s, bit for
 *	bit; every mode: after a barrier, a pull of every key equals the
 *	reference after all versions. Prints
 *	"ps_trainer ok rank=R mode=M steps=S rows_checked=N wrong=0".
 *
 *   cs-trainer-ps spill_refused
 *	(every sidecar's ps.spill_dir missing) A table with a mem_budget
 *	is refused -ENOENT on every rank, the message naming ps.spill_dir;
 *	the same table without a budget works. Prints
 *	"ps_trainer spill_refused_ok rank=R".
 *
 *   cs-trainer-ps hold --budget BYTES
 *	A table with the budget, 600 rows pushed, held open (300 s) while
 *	the script stops the sidecars: "ps_trainer held rank=R".
 *
 *   --budget BYTES (any subcommand, before or after its arguments): the
 *	mem_budget of the tables of train and ckpt (rows beyond it on the
 *	SSD tier, per shard)
 *
 *   cs-trainer-ps bad
 *	Bad inputs, each with its named error, then a good table works:
 *	push before any create, unknown table handle, rows of another size
 *	or type, a key outside the table, a pull of zero keys, a key buffer
 *	outside the trainer's segments, a destroyed table, bad attributes
 *	(dim 0, an integer dtype, a mem_budget of fewer than 64 rows, a
 *	row larger than a frame).
 *	A push of zero keys is an empty version and succeeds. Prints
 *	"ps_trainer bad_ok rank=R cases=N".
 *
 *   cs-trainer-ps mismatch
 *	Rank 1 creates the table with another lr: every rank gets -EINVAL
 *	("another rank created it with other attributes"). Prints
 *	"ps_trainer mismatch_ok rank=R".
 *
 *   cs-trainer-ps deadline
 *	(for a sidecar with a short coll.deadline) Every rank pulls at clock
 *	3 before anyone pushed: the pull must end with CS_ERR_TIMEOUT. Then
 *	every rank pushes versions 0..2 (the timed-out pull is served
 *	meanwhile and dropped by the sidecar) and pulls at clock 3: served,
 *	rows as the reference. Prints "ps_trainer deadline_ok rank=R".
 *
 *   cs-trainer-ps die DIE_RANK
 *	Every rank pushes version 0 and pulls at clock 2 (never served:
 *	nobody pushes version 1); rank DIE_RANK exits while its pull is in
 *	flight. Every other rank's pull must end with an error within 60 s
 *	(not hang). Prints "ps_trainer died_ok rank=R err=E msg=...".
 *
 *   cs-trainer-ps ckpt DIR
 *	(DIR: an existing, empty directory seen by every node) Table "ck"
 *	(600 rows of 4 f32, sync, SGD lr 0.5, constant 1): versions 0..4
 *	pushed, every row pulled at clock 5 (the rows at checkpoint time),
 *	cs_ps_checkpoint to DIR/ok; a second one posted before the first
 *	completed is refused -EBUSY; a checkpoint to DIR/missing (no such
 *	directory) ends -ENOENT and one to DIR/file/x (a file in the way)
 *	-ENOTDIR, each message naming the directory; version 5 pushed and
 *	pulled at clock 6 (the rows after it), versions 6..9 pushed (the
 *	sidecar served on). A new "ck" restored from DIR/ok: its clock is 5,
 *	every row pulled at clock 5 equals the rows at checkpoint time, bit
 *	for bit, and version 5 pushed again gives the same rows after it.
 *	Then restores refused: a table of another dim (-EINVAL), a table
 *	with no file (-ENOENT), the files with one byte flipped (DIR/bad,
 *	-EBADMSG), a checkpoint of a table named "sub/ck" (-EINVAL);
 *	descriptors of a hostile trainer (a path without its
 *	NUL, a misaligned or foreign result buffer, a dtype) refused as bad
 *	descriptors; a table created after them works. Prints
 *	"ps_trainer ckpt_ok rank=R clock=5 rows=600 equal=600".
 *
 *   cs-trainer-ps recover DIR GO  (joins its group elastic)
 *	Recovery of a lost node driven by the trainers (test_ps_trainers.sh
 *	pstr_4x1_recover). Table "rc" (600 rows of 4 f32, sync, momentum
 *	0.5, lr 0.5, constant 1, dyadic gradients): versions 0..5 pushed by
 *	every rank (each pull at the next clock equal to the reference, bit
 *	for bit), every row pulled at clock 6 (the rows at checkpoint time),
 *	cs_ps_checkpoint to DIR; versions 6 and 7 pushed (lost later). Then
 *	"ps_trainer phase1 rank=R" and a pull at clock 9 that nobody's push
 *	lets through: the test kills a node's sidecar meanwhile, and the
 *	pull must end with CS_ERR_PEER_LOST naming that node ("ps_trainer
 *	lost rank=R err=... msg=..."). Once the file GO exists: a barrier
 *	re-forms the elastic group on the nodes left (size, rank: new), the
 *	table is destroyed and created again (its shards: the nodes left),
 *	restored from DIR (clock 6, every row equal to the rows at
 *	checkpoint time), and versions 6..11 pushed by the ranks left (their
 *	new ranks' patterns), every pull checked against the reference (4
 *	workers up to version 5, the ranks left after it, momentum state
 *	included). Rank 0 writes the final table (600 x 4 f32) to
 *	DIR/final.f32 for tests/netns/ps_recover_check.py. Prints
 *	"ps_trainer recover_ok rank=R size=S clock=6 rows=600 equal=600
 *	final_wrong=0".
 *
 * Exit 0 on success, 1 on a failed check, 2 on usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client/client_internal.h"
#include "collstack/ps.h"

#define WAIT_NS (120 * 1000000000ll)

static int rank, world, lrank, lworld;
static uint64_t budget; /* --budget: the tables' mem_budget */
static struct cs_client *c;
static struct cs_group *g;

static int env(const char *n, int dflt)
{
	const char *s = getenv(n);

	return s && *s ? atoi(s) : dflt;
}

static int fail(const char *what, int ret)
{
	printf("ps_trainer FAIL rank=%d %s: %s: %s\n", rank, what,
	       cs_strerror(ret), cs_errmsg(c));
	return 1;
}

/* The keys rank @r pushes at step @s: a pattern, every fifth one the
 * previous one again (duplicates are combined on the worker). */
static void step_keys(int r, uint32_t s, uint32_t p, uint64_t k, uint64_t *keys)
{
	for (uint32_t i = 0; i < p; i++)
		keys[i] = i % 5 == 4
				  ? keys[i - 1]
				  : ((uint64_t)r * 7919 + s * 104729 + i * 31) %
					    k;
}

static float grad(int r, uint32_t s, uint64_t key, uint32_t j)
{
	return (float)(1 + (r + 3 * s + key + j) % 8) / 64.0f;
}

/* Every rank's pushes of version @s into @ref (SGD, lr 0.5; exact). */
static void ref_apply(float *ref, uint32_t s, uint32_t d, uint32_t p,
		      uint64_t k, uint64_t *keys)
{
	for (int r = 0; r < world; r++) {
		step_keys(r, s, p, k, keys);
		for (uint32_t i = 0; i < p; i++)
			for (uint32_t j = 0; j < d; j++)
				ref[keys[i] * d + j] -=
					0.5f * grad(r, s, keys[i], j);
	}
}

static int wait_ok(cs_req_t r, const char *what)
{
	int ret = cs_wait(c, r, WAIT_NS);

	return ret ? fail(what, ret) : 0;
}

static int train(int argc, char **argv)
{
	uint32_t steps = 10, d = 8, p = 64;
	uint64_t k = 5000, wrong = 0, checked = 0;
	struct timespec t0, t1;
	double secs;
	struct cs_ps_table_attr a;
	struct cs_ps_table *t;
	struct cs_buf *b;
	const char *mode = "sync";
	uint64_t *keys, *all;
	float *rows, *ref;
	cs_req_t r;
	int ret;

	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--steps"))
			steps = (uint32_t)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--dim"))
			d = (uint32_t)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--rows"))
			k = (uint64_t)atoll(argv[i + 1]);
		else if (!strcmp(argv[i], "--kpp"))
			p = (uint32_t)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--mode"))
			mode = argv[i + 1];
		else if (strcmp(argv[i], "--group") &&
			 strcmp(argv[i], "--budget"))
			return 2;
	}
	if (!steps || !d || !p || !k || p > k)
		return 2;
	cs_ps_table_attr_init(&a, d, k, CS_PS_OPT_SGD);
	a.opt.lr = 0.5f;
	a.init.kind = CS_PS_INIT_CONST;
	a.init.scale = 1.0f;
	a.mem_budget = budget;
	if (!strcmp(mode, "async")) {
		a.mode = CS_PS_ASYNC;
	} else if (!strncmp(mode, "ssp:", 4)) {
		a.mode = CS_PS_SSP;
		a.staleness = (uint32_t)atoi(mode + 4);
	} else if (strcmp(mode, "sync")) {
		return 2;
	}
	ret = cs_buf_alloc(c, (size_t)k * (8 + 4 * d) + p * (8 + 4 * d), &b);
	if (ret)
		return fail("buffer", ret);
	keys = cs_buf_ptr(b);
	rows = (float *)(keys + p);
	all = (uint64_t *)(rows + (size_t)p * d);
	ref = malloc(k * d * sizeof(float));
	if (!ref)
		return fail("reference", -ENOMEM);
	for (uint64_t i = 0; i < k * d; i++)
		ref[i] = 1.0f;
	ret = cs_ps_table_create(g, "emb", &a, &t);
	if (ret)
		return fail("create", ret);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (uint32_t s = 0; s < steps; s++) {
		step_keys(rank, s, p, k, keys);
		for (uint32_t i = 0; i < p; i++)
			for (uint32_t j = 0; j < d; j++)
				rows[i * d + j] = grad(rank, s, keys[i], j);
		ret = cs_ps_push(t, s, keys, rows, p, &r);
		if (ret || wait_ok(r, "push"))
			return ret ? fail("push", ret) : 1;
		step_keys(rank, s, p, k, keys);
		ret = cs_ps_pull(t, s + 1, keys, p, rows, &r);
		if (ret || wait_ok(r, "pull"))
			return ret ? fail("pull", ret) : 1;
		/* the reference after version s (ref_apply clobbers the
		 * key buffer: the pulled rows are checked against keys
		 * computed again) */
		ref_apply(ref, s, d, p, k, all);
		if (a.mode != CS_PS_SYNC)
			continue;
		step_keys(rank, s, p, k, all);
		for (uint32_t i = 0; i < p; i++, checked++)
			wrong += !!memcmp(rows + i * d, ref + all[i] * d,
					  d * sizeof(float));
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	secs = (double)(t1.tv_sec - t0.tv_sec) +
	       (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	/* every rank's pushes are in: the whole table */
	ret = cs_barrier(g, &r);
	if (ret || wait_ok(r, "barrier"))
		return ret ? fail("barrier", ret) : 1;
	for (uint64_t i = 0; i < k; i += p) {
		uint32_t n = (uint32_t)(k - i < p ? k - i : p);

		for (uint32_t j = 0; j < n; j++)
			keys[j] = i + j;
		ret = cs_ps_pull(t, steps, keys, n, rows, &r);
		if (ret || wait_ok(r, "final pull"))
			return ret ? fail("final pull", ret) : 1;
		for (uint32_t j = 0; j < n; j++, checked++)
			wrong += !!memcmp(rows + j * d, ref + (i + j) * d,
					  d * sizeof(float));
	}
	ret = cs_ps_table_destroy(t);
	if (ret)
		return fail("destroy", ret);
	printf("ps_trainer %s rank=%d mode=%s steps=%u rows_checked=%llu "
	       "wrong=%llu\n",
	       wrong ? "FAIL" : "ok", rank, mode, steps,
	       (unsigned long long)checked, (unsigned long long)wrong);
	/* this rank's steps (a push, then a pull, each waited for) */
	printf("ps_trainer rate rank=%d mode=%s budget=%llu rows=%llu dim=%u "
	       "kpp=%u steps=%u secs=%.3f pushes_per_s=%.0f pulls_per_s=%.0f "
	       "pushpull_per_s=%.0f\n",
	       rank, mode, (unsigned long long)budget, (unsigned long long)k, d,
	       p, steps, secs, steps / secs, steps / secs, 2.0 * steps / secs);
	free(ref);
	cs_buf_free(b);
	return wrong ? 1 : 0;
}

/* A raw descriptor of a PS op (what a hostile trainer may write). */
static int raw(uint8_t op, uint32_t handle, uint64_t count, uint8_t dtype,
	       uint32_t dim, uint32_t kseg, uint64_t koff, uint32_t rseg,
	       uint64_t roff, unsigned want_detail, const char *what)
{
	struct cs_ipc_sqe d = { .op = op,
				.group = handle,
				.count = count,
				.dtype = dtype,
				.root = dim,
				.send_seg = kseg,
				.send_off = koff,
				.recv_seg = rseg,
				.recv_off = roff };
	unsigned detail;
	cs_req_t r;
	int ret, peer;

	ret = cs__client_post_raw(c, &d, &r);
	if (!ret)
		ret = cs_wait(c, r, WAIT_NS);
	cs__client_last_fail(c, &detail, &peer);
	if (ret != CS_ERR_BAD_DESC || detail != want_detail) {
		printf("ps_trainer FAIL rank=%d bad %s: got %s detail %u, "
		       "want detail %u: %s\n",
		       rank, what, cs_strerror(ret), detail, want_detail,
		       cs_errmsg(c));
		return 1;
	}
	printf("  %s: %s\n", what, cs_errmsg(c));
	return 0;
}

static int bad_create(const struct cs_ps_table_attr *a, int want,
		      const char *what)
{
	struct cs_ps_table *t = NULL;
	int ret = cs_ps_table_create(g, "bad", a, &t);

	if (ret != want) {
		printf("ps_trainer FAIL rank=%d create %s: got %s, want %s: "
		       "%s\n",
		       rank, what, cs_strerror(ret), cs_strerror(want),
		       cs_errmsg(c));
		if (!ret)
			cs_ps_table_destroy(t);
		return 1;
	}
	printf("  create %s: %s\n", what, cs_errmsg(c));
	return 0;
}

static int bad(void)
{
	const uint32_t d = 4, k = 100;
	struct cs_ps_table_attr a;
	struct cs_ps_table *t, *t2;
	struct cs_buf *b;
	uint64_t *keys;
	float *rows;
	uint32_t seg, h;
	cs_req_t r;
	int ret, n = 0, cases = 0;

	ret = cs_buf_alloc(c, 4096, &b);
	if (ret)
		return fail("buffer", ret);
	seg = cs__buf_seg(b);
	keys = cs_buf_ptr(b);
	rows = (float *)(keys + 16);
	for (int i = 0; i < 16; i++)
		keys[i] = (uint64_t)i;
	/* push before any create: no table handle 0 yet */
	n += raw(CS_IPC_OP_PS_PUSH, 0, 1, CS_F32, d, seg, 0, seg, 128,
		 CS_IPC_BAD_PS_TABLE, "push before create");
	cases++;
	cs_ps_table_attr_init(&a, d, k, CS_PS_OPT_SGD);
	ret = cs_ps_table_create(g, "t", &a, &t);
	if (ret)
		return fail("create", ret);
	h = cs__ps_table_handle(t);
	n += raw(CS_IPC_OP_PS_PUSH, h + 7, 1, CS_F32, d, seg, 0, seg, 128,
		 CS_IPC_BAD_PS_TABLE, "unknown table");
	n += raw(CS_IPC_OP_PS_PULL, 1u << 30, 1, CS_F32, d, seg, 0, seg, 128,
		 CS_IPC_BAD_PS_TABLE, "table handle out of range");
	n += raw(CS_IPC_OP_PS_PUSH, h, 2, CS_F32, d + 1, seg, 0, seg, 128,
		 CS_IPC_BAD_PS_ROW, "row size mismatch");
	n += raw(CS_IPC_OP_PS_PUSH, h, 2, CS_F64, d, seg, 0, seg, 128,
		 CS_IPC_BAD_PS_ROW, "row type mismatch");
	keys[1] = k; /* one past the last key */
	n += raw(CS_IPC_OP_PS_PUSH, h, 2, CS_F32, d, seg, 0, seg, 128,
		 CS_IPC_BAD_PS_KEY, "key outside the table");
	keys[1] = 1;
	n += raw(CS_IPC_OP_PS_PULL, h, 0, CS_F32, d, seg, 0, seg, 128,
		 CS_IPC_BAD_COUNT, "pull of zero keys");
	n += raw(CS_IPC_OP_PS_PULL, h, 2, CS_F32, d, seg + 5, 0, seg, 128,
		 CS_IPC_BAD_SEND_SEG, "keys in no segment");
	n += raw(CS_IPC_OP_PS_PULL, h, 600, CS_F32, d, seg, 0, seg, 128,
		 CS_IPC_BAD_SEND_RANGE, "keys past the segment");
	n += raw(CS_IPC_OP_PS_PULL, h, 2, CS_F32, d, seg, 3, seg, 128,
		 CS_IPC_BAD_ALIGN, "keys not aligned");
	cases += 9;
	/* a push of zero keys is an empty version: fine (sync: version 0) */
	ret = cs_ps_push(t, 0, NULL, NULL, 0, &r);
	if (ret || (ret = cs_wait(c, r, WAIT_NS)))
		return fail("empty push", ret);
	/* and the table still works: version 0 applied (nothing), a row
	 * is the initializer's */
	ret = cs_ps_pull(t, 1, keys, 2, rows, &r);
	if (ret || (ret = cs_wait(c, r, WAIT_NS)))
		return fail("pull after the bad ones", ret);
	if (rows[0] != 0.0f || rows[2 * d - 1] != 0.0f)
		return fail("pull after the bad ones: not the initializer's",
			    -EIO);
	ret = cs_ps_table_destroy(t);
	if (ret)
		return fail("destroy", ret);
	n += raw(CS_IPC_OP_PS_PUSH, h, 1, CS_F32, d, seg, 0, seg, 128,
		 CS_IPC_BAD_PS_TABLE, "destroyed table");
	cases++;
	/* bad attributes: refused before anything is created */
	a.dim = 0;
	n += bad_create(&a, -EINVAL, "dim 0");
	a.dim = d;
	a.dtype = CS_I32;
	n += bad_create(&a, -EINVAL, "integer rows");
	a.dtype = CS_F32;
	a.mem_budget = 100; /* 6 rows of 16 bytes: fewer than 64 */
	n += bad_create(&a, -EINVAL, "mem_budget");
	a.mem_budget = 0;
	a.dim = 4096; /* 16 KiB rows: larger than any frame */
	n += bad_create(&a, -EMSGSIZE, "row larger than a frame");
	a.dim = d;
	a.opt.lr = -1.0f;
	n += bad_create(&a, -EINVAL, "negative lr");
	cases += 5;
	/* after all that: a table works */
	cs_ps_table_attr_init(&a, d, k, CS_PS_OPT_ADAGRAD);
	ret = cs_ps_table_create(g, "t2", &a, &t2);
	if (ret)
		return fail("create after the bad ones", ret);
	ret = cs_ps_push(t2, 0, keys, rows, 2, &r);
	if (!ret)
		ret = cs_wait(c, r, WAIT_NS);
	if (!ret)
		ret = cs_ps_pull(t2, 1, keys, 2, rows, &r);
	if (!ret)
		ret = cs_wait(c, r, WAIT_NS);
	if (ret)
		return fail("push and pull after the bad ones", ret);
	ret = cs_ps_table_destroy(t2);
	if (ret)
		return fail("destroy", ret);
	if (n)
		return 1;
	printf("ps_trainer bad_ok rank=%d cases=%d\n", rank, cases);
	return 0;
}

/* (ps.spill_dir missing) A table with a budget is refused by every rank,
 * its message naming the directory; the same table without one works. */
static int spill_refused(void)
{
	struct cs_ps_table_attr a;
	struct cs_ps_table *t = NULL;
	struct cs_buf *b;
	uint64_t *keys;
	float *rows;
	cs_req_t r;
	int ret;

	cs_ps_table_attr_init(&a, 4, 1000, CS_PS_OPT_SGD);
	a.mem_budget = 1 << 20;
	ret = cs_ps_table_create(g, "sp", &a, &t);
	if (ret != -ENOENT || !strstr(cs_errmsg(c), "ps.spill_dir")) {
		printf("ps_trainer FAIL rank=%d spill_refused: got %s, want "
		       "No such file or directory: %s\n",
		       rank, cs_strerror(ret), cs_errmsg(c));
		if (!ret)
			cs_ps_table_destroy(t);
		return 1;
	}
	printf("  create with a missing spill dir: %s\n", cs_errmsg(c));
	a.mem_budget = 0;
	ret = cs_buf_alloc(c, 4096, &b);
	if (ret)
		return fail("buffer", ret);
	keys = cs_buf_ptr(b);
	rows = (float *)(keys + 16);
	for (int i = 0; i < 16; i++) {
		keys[i] = (uint64_t)i * 61;
		for (int j = 0; j < 4; j++)
			rows[i * 4 + j] = 0.25f;
	}
	ret = cs_ps_table_create(g, "sp", &a, &t);
	if (ret)
		return fail("create without a budget", ret);
	ret = cs_ps_push(t, 0, keys, rows, 16, &r);
	if (!ret)
		ret = cs_wait(c, r, WAIT_NS);
	if (!ret)
		ret = cs_ps_pull(t, 1, keys, 16, rows, &r);
	if (!ret)
		ret = cs_wait(c, r, WAIT_NS);
	if (ret)
		return fail("push and pull without a budget", ret);
	ret = cs_ps_table_destroy(t);
	if (ret)
		return fail("destroy", ret);
	cs_buf_free(b);
	printf("ps_trainer spill_refused_ok rank=%d\n", rank);
	return 0;
}

/* A table with --budget, 600 rows pushed (most on the SSD tier), held
 * open until the sidecar goes (the script stops it): prints
 * "ps_trainer held rank=R", then waits at most 300 s. */
static int hold(void)
{
	struct cs_ps_table_attr a;
	struct cs_ps_table *t;
	struct cs_buf *b;
	uint64_t *keys;
	float *rows;
	cs_req_t r;
	int ret;

	cs_ps_table_attr_init(&a, 4, 100000, CS_PS_OPT_SGD);
	a.mem_budget = budget;
	ret = cs_buf_alloc(c, 600 * (8 + 16), &b);
	if (ret)
		return fail("buffer", ret);
	keys = cs_buf_ptr(b);
	rows = (float *)(keys + 600);
	for (int i = 0; i < 600; i++) {
		keys[i] = (uint64_t)i * 97 + (uint64_t)rank;
		for (int j = 0; j < 4; j++)
			rows[i * 4 + j] = 0.5f;
	}
	ret = cs_ps_table_create(g, "hold", &a, &t);
	if (ret)
		return fail("create", ret);
	ret = cs_ps_push(t, 0, keys, rows, 600, &r);
	if (ret || wait_ok(r, "push"))
		return ret ? fail("push", ret) : 1;
	printf("ps_trainer held rank=%d\n", rank);
	sleep(300);
	return 0;
}

static int mismatch(void)
{
	struct cs_ps_table_attr a;
	struct cs_ps_table *t = NULL;
	int ret;

	cs_ps_table_attr_init(&a, 4, 100, CS_PS_OPT_SGD);
	if (rank == 1)
		a.opt.lr = 0.5f;
	ret = cs_ps_table_create(g, "mm", &a, &t);
	if (ret != -EINVAL || !strstr(cs_errmsg(c), "other attributes")) {
		printf("ps_trainer FAIL rank=%d mismatch: got %s: %s\n", rank,
		       cs_strerror(ret), cs_errmsg(c));
		return 1;
	}
	printf("ps_trainer mismatch_ok rank=%d: %s\n", rank, cs_errmsg(c));
	return 0;
}

/* A page of a cs_buf: 8 keys, then rows (float) (never freed: the
 * trainer exits after its case). */
static int scratch(uint64_t **keys, float **rows)
{
	struct cs_buf *b;
	int ret = cs_buf_alloc(c, 4096, &b);

	if (ret)
		return ret;
	*keys = cs_buf_ptr(b);
	*rows = (float *)(*keys + 8);
	return 0;
}

static int deadline(void)
{
	struct cs_ps_table_attr a;
	struct cs_ps_table *t;
	uint64_t *keys;
	float *rows;
	cs_req_t r;
	int ret;

	ret = scratch(&keys, &rows);
	if (ret)
		return fail("buffer", ret);
	cs_ps_table_attr_init(&a, 1, 100, CS_PS_OPT_SGD);
	a.opt.lr = 0.5f;
	ret = cs_ps_table_create(g, "dl", &a, &t);
	if (ret)
		return fail("create", ret);
	keys[0] = 7;
	ret = cs_ps_pull(t, 3, keys, 1, rows, &r);
	if (ret)
		return fail("pull", ret);
	ret = cs_wait(c, r, WAIT_NS);
	if (ret != CS_ERR_TIMEOUT) {
		printf("ps_trainer FAIL rank=%d deadline: got %s: %s\n", rank,
		       cs_strerror(ret), cs_errmsg(c));
		return 1;
	}
	printf("  timed out: %s\n", cs_errmsg(c));
	/* every rank timed out before anyone pushes */
	ret = cs_barrier(g, &r);
	if (ret || wait_ok(r, "barrier"))
		return ret ? fail("barrier", ret) : 1;
	for (uint32_t v = 0; v < 3; v++) {
		rows[0] = 1.0f;
		ret = cs_ps_push(t, v, keys, rows, 1, &r);
		if (ret || wait_ok(r, "push"))
			return ret ? fail("push", ret) : 1;
	}
	ret = cs_ps_pull(t, 3, keys, 1, rows, &r);
	if (ret || wait_ok(r, "pull after the timeout"))
		return ret ? fail("pull after the timeout", ret) : 1;
	/* 3 versions of every rank's gradient 1, lr 0.5, from 0 */
	if (rows[0] != -1.5f * (float)world) {
		printf("ps_trainer FAIL rank=%d deadline: row %g, want %g\n",
		       rank, rows[0], -1.5 * world);
		return 1;
	}
	ret = cs_ps_table_destroy(t);
	if (ret)
		return fail("destroy", ret);
	printf("ps_trainer deadline_ok rank=%d\n", rank);
	return 0;
}

static int die(int who)
{
	struct cs_ps_table_attr a;
	struct cs_ps_table *t;
	uint64_t *keys;
	float *rows;
	cs_req_t r;
	int ret;

	ret = scratch(&keys, &rows);
	if (ret)
		return fail("buffer", ret);
	for (int i = 0; i < 8; i++) {
		keys[i] = (uint64_t)(rank * 8 + i);
		rows[i] = 1.0f;
	}
	cs_ps_table_attr_init(&a, 1, 1000, CS_PS_OPT_SGD);
	ret = cs_ps_table_create(g, "die", &a, &t);
	if (ret)
		return fail("create", ret);
	ret = cs_ps_push(t, 0, keys, rows, 8, &r);
	if (ret || wait_ok(r, "push"))
		return ret ? fail("push", ret) : 1;
	ret = cs_ps_pull(t, 2, keys, 8, rows, &r); /* never served */
	if (ret)
		return fail("pull", ret);
	if (rank == who) {
		usleep(300000); /* the others' pulls are in flight too */
		printf("ps_trainer dying rank=%d\n", rank);
		fflush(stdout);
		_exit(0);
	}
	ret = cs_wait(c, r, 60 * 1000000000ll);
	if (!ret || ret == CS_ERR_TIMEOUT) {
		printf("ps_trainer FAIL rank=%d die: the pull %s\n", rank,
		       ret ? "hangs (60 s)" : "was served");
		return 1;
	}
	printf("ps_trainer died_ok rank=%d err=%s msg=%s\n", rank,
	       cs_strerror(ret), cs_errmsg(c));
	return 0;
}

#define CK_ROWS 600u
#define CK_DIM 4u
#define CK_KPP 40u

/* Rank @r's push of version @v to "ck": keys and gradients. */
static void ck_push_rows(uint32_t v, uint64_t *keys, float *rows)
{
	step_keys(rank, v, CK_KPP, CK_ROWS, keys);
	for (uint32_t i = 0; i < CK_KPP; i++)
		for (uint32_t j = 0; j < CK_DIM; j++)
			rows[i * CK_DIM + j] = grad(rank, v, keys[i], j);
}

static int ck_create(const char *name, uint32_t dim, struct cs_ps_table **t)
{
	struct cs_ps_table_attr a;
	int ret;

	cs_ps_table_attr_init(&a, dim, CK_ROWS, CS_PS_OPT_SGD);
	a.opt.lr = 0.5f;
	a.init.kind = CS_PS_INIT_CONST;
	a.init.scale = 1.0f;
	a.mem_budget = budget;
	ret = cs_ps_table_create(g, name, &a, t);
	return ret ? fail("create", ret) : 0;
}

/* Push versions [v0, v1) of this rank. */
static int ck_push(struct cs_ps_table *t, uint32_t v0, uint32_t v1,
		   uint64_t *keys, float *rows)
{
	cs_req_t r;
	int ret;

	for (uint32_t v = v0; v < v1; v++) {
		ck_push_rows(v, keys, rows);
		ret = cs_ps_push(t, v, keys, rows, CK_KPP, &r);
		if (ret || wait_ok(r, "push"))
			return ret ? fail("push", ret) : 1;
	}
	return 0;
}

/* Every row at @clock into @out. */
static int ck_pull_all(struct cs_ps_table *t, uint64_t clock, uint64_t *keys,
		       float *rows, float *out)
{
	cs_req_t r;
	int ret;

	for (uint32_t i = 0; i < CK_ROWS; i += CK_KPP) {
		for (uint32_t j = 0; j < CK_KPP; j++)
			keys[j] = i + j;
		ret = cs_ps_pull(t, clock, keys, CK_KPP, rows, &r);
		if (ret || wait_ok(r, "pull"))
			return ret ? fail("pull", ret) : 1;
		memcpy(out + (size_t)i * CK_DIM, rows,
		       CK_KPP * CK_DIM * sizeof(float));
	}
	return 0;
}

/* A checkpoint or restore that must fail with @want, its message naming
 * @dir and containing @why. */
static int ck_refused(struct cs_ps_table *t, bool ckpt, const char *dir,
		      int want, const char *why, const char *what)
{
	cs_req_t r;
	int ret = ckpt ? cs_ps_checkpoint(t, dir, &r)
		       : cs_ps_table_restore(t, dir, &r);

	if (!ret)
		ret = cs_wait(c, r, WAIT_NS);
	if (ret != want || !strstr(cs_errmsg(c), dir) ||
	    !strstr(cs_errmsg(c), why)) {
		printf("ps_trainer FAIL rank=%d ckpt %s: got %s (want %s): "
		       "%s\n",
		       rank, what, cs_strerror(ret), cs_strerror(want),
		       cs_errmsg(c));
		return 1;
	}
	printf("  %s: %s\n", what, cs_errmsg(c));
	return 0;
}

/* Rank 0: DIR/bad holds DIR/ok's files with their last byte flipped. */
static int ck_corrupt(const char *dir)
{
	char from[512], to[512];
	static uint8_t buf[1 << 20];

	snprintf(to, sizeof(to), "%s/bad", dir);
	if (mkdir(to, 0700) && errno != EEXIST)
		return -errno;
	for (int s = 0; s < 64; s++) {
		FILE *f, *o;
		size_t n;

		snprintf(from, sizeof(from), "%s/ok/ck.shard%d.ckpt", dir, s);
		snprintf(to, sizeof(to), "%s/bad/ck.shard%d.ckpt", dir, s);
		f = fopen(from, "rb");
		if (!f)
			continue;
		n = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		if (!n || n == sizeof(buf))
			return -EFBIG;
		buf[n - 1] ^= 0x40; /* a record's byte: its checksum fails */
		o = fopen(to, "wb");
		if (!o || fwrite(buf, 1, n, o) != n)
			return -EIO;
		fclose(o);
	}
	return 0;
}

static int ckpt(const char *dir)
{
	char ok[256], missing[256], notdir[256], bad[256];
	float *snap, *after5, *got;
	struct cs_ps_table *t;
	uint64_t *keys;
	float *rows;
	struct cs_buf *b;
	cs_req_t r, r2;
	uint32_t equal = 0;
	int ret;

	snprintf(ok, sizeof(ok), "%s/ok", dir);
	snprintf(missing, sizeof(missing), "%s/missing", dir);
	snprintf(notdir, sizeof(notdir), "%s/file/x", dir);
	snprintf(bad, sizeof(bad), "%s/bad", dir);
	ret = cs_buf_alloc(c, CK_KPP * (8 + 4 * CK_DIM), &b);
	if (ret)
		return fail("buffer", ret);
	keys = cs_buf_ptr(b);
	rows = (float *)(keys + CK_KPP);
	snap = calloc(3 * CK_ROWS * CK_DIM, sizeof(float));
	if (!snap)
		return fail("memory", -ENOMEM);
	after5 = snap + CK_ROWS * CK_DIM;
	got = after5 + CK_ROWS * CK_DIM;
	if (rank == 0) {
		int fd;

		snprintf(bad, sizeof(bad), "%s/file", dir);
		fd = open(bad, O_CREAT | O_WRONLY, 0600);
		if (fd < 0 || (mkdir(ok, 0700) && errno != EEXIST))
			return fail("test directories", -errno);
		close(fd);
		snprintf(bad, sizeof(bad), "%s/bad", dir);
	}
	if (ck_create("ck", CK_DIM, &t) || ck_push(t, 0, 5, keys, rows) ||
	    ck_pull_all(t, 5, keys, rows, snap))
		return 1;
	ret = cs_ps_checkpoint(t, ok, &r);
	if (ret)
		return fail("checkpoint", ret);
	ret = cs_ps_checkpoint(t, ok, &r2);
	if (ret != -EBUSY) {
		printf("ps_trainer FAIL rank=%d ckpt: a second checkpoint "
		       "while one runs: %s, want busy\n",
		       rank, cs_strerror(ret));
		return 1;
	}
	printf("  second checkpoint: %s\n", cs_errmsg(c));
	if (wait_ok(r, "checkpoint"))
		return 1;
	if (ck_refused(t, true, missing, -ENOENT, "No such file",
		       "checkpoint to a missing directory") ||
	    ck_refused(t, true, notdir, -ENOTDIR, "Not a directory",
		       "checkpoint under a file"))
		return 1;
	if (ck_push(t, 5, 6, keys, rows) ||
	    ck_pull_all(t, 6, keys, rows, after5) ||
	    ck_push(t, 6, 10, keys, rows) ||
	    ck_pull_all(t, 10, keys, rows, got))
		return 1;
	if (!memcmp(got, snap, CK_ROWS * CK_DIM * sizeof(float))) {
		printf("ps_trainer FAIL rank=%d ckpt: the table did not move "
		       "after the checkpoint\n",
		       rank);
		return 1;
	}
	ret = cs_ps_table_destroy(t);
	if (ret)
		return fail("destroy", ret);
	/* a new table from the files */
	if (ck_create("ck", CK_DIM, &t))
		return 1;
	ret = cs_ps_table_restore(t, ok, &r);
	if (ret || wait_ok(r, "restore"))
		return ret ? fail("restore", ret) : 1;
	if (cs_ps_table_clock(t) != 5) {
		printf("ps_trainer FAIL rank=%d ckpt: restored at clock %llu, "
		       "want 5\n",
		       rank, (unsigned long long)cs_ps_table_clock(t));
		return 1;
	}
	if (ck_pull_all(t, 5, keys, rows, got))
		return 1;
	for (uint32_t i = 0; i < CK_ROWS; i++)
		equal += !memcmp(got + i * CK_DIM, snap + i * CK_DIM,
				 CK_DIM * sizeof(float));
	if (equal != CK_ROWS) {
		printf("ps_trainer FAIL rank=%d ckpt: %u of %u rows equal the "
		       "rows at checkpoint time\n",
		       rank, equal, CK_ROWS);
		return 1;
	}
	if (ck_push(t, 5, 6, keys, rows) || ck_pull_all(t, 6, keys, rows, got))
		return 1;
	if (memcmp(got, after5, CK_ROWS * CK_DIM * sizeof(float))) {
		printf("ps_trainer FAIL rank=%d ckpt: version 5 on the restored "
		       "table differs from the first run's\n",
		       rank);
		return 1;
	}
	ret = cs_ps_table_destroy(t);
	if (ret)
		return fail("destroy", ret);
	/* refused restores */
	if (ck_create("ck", CK_DIM + 1, &t) ||
	    ck_refused(t, false, ok, -EINVAL, "another table's",
		       "restore of another dim") ||
	    cs_ps_table_destroy(t))
		return 1;
	if (ck_create("nofile", CK_DIM, &t) ||
	    ck_refused(t, false, ok, -ENOENT, "No such file",
		       "restore without a file") ||
	    cs_ps_table_destroy(t))
		return 1;
	if (ck_create("sub/ck", CK_DIM, &t) ||
	    ck_refused(t, true, ok, -EINVAL, "not a file name",
		       "checkpoint of a table named sub/ck") ||
	    cs_ps_table_destroy(t))
		return 1;
	if (rank == 0) {
		ret = ck_corrupt(dir);
		if (ret)
			return fail("corrupt copies", ret);
	}
	ret = cs_barrier(g, &r);
	if (ret || wait_ok(r, "barrier"))
		return ret ? fail("barrier", ret) : 1;
	if (ck_create("ck", CK_DIM, &t) ||
	    ck_refused(t, false, bad, -EBADMSG, "damaged",
		       "restore of a damaged file") ||
	    cs_ps_table_destroy(t))
		return 1;
	/* hostile descriptors, then the sidecar serves on */
	if (ck_create("ck", CK_DIM, &t))
		return 1;
	{
		uint32_t h = cs__ps_table_handle(t), seg = cs__buf_seg(b);
		int n = 0;

		memcpy(keys, "abcdefgh", 8); /* no NUL in its 3 bytes */
		n += raw(CS_IPC_OP_PS_CKPT, h, 3, 0, 0, seg, 0, seg, 64,
			 CS_IPC_BAD_COUNT, "checkpoint path without its NUL");
		strcpy((char *)keys, "/tmp");
		n += raw(CS_IPC_OP_PS_CKPT, h, 5, 0, 0, seg, 0, seg, 68,
			 CS_IPC_BAD_ALIGN, "checkpoint result misaligned");
		n += raw(CS_IPC_OP_PS_RESTORE, h, 5, 0, 0, seg, 0, seg + 5, 64,
			 CS_IPC_BAD_RECV_SEG, "restore result outside");
		n += raw(CS_IPC_OP_PS_CKPT, h, 5, CS_F64, 0, seg, 0, seg, 64,
			 CS_IPC_BAD_FLAGS, "checkpoint with a dtype");
		if (n)
			return 1;
	}
	if (ck_push(t, 0, 1, keys, rows) ||
	    ck_pull_all(t, 1, keys, rows, got) || cs_ps_table_destroy(t))
		return 1;
	printf("ps_trainer ckpt_ok rank=%d clock=5 rows=%u equal=%u\n", rank,
	       CK_ROWS, equal);
	free(snap);
	cs_buf_free(b);
	return 0;
}

#define RC_ROWS 600u
#define RC_DIM 4u
#define RC_KPP 40u
#define RC_CKPT 6u /* versions before the checkpoint */
#define RC_LOST 8u /* versions pushed before the node is lost */
#define RC_END 12u /* versions in all */

/* The reference of "rc": rows, momentum state. */
static float rc_w[RC_ROWS * RC_DIM], rc_m[RC_ROWS * RC_DIM];

/* Version @v pushed by ranks 0 .. @n - 1 into the reference (sync: the
 * gradients of every worker summed, one momentum step per touched row). */
static void rc_ref_version(uint32_t v, int n)
{
	static float g[RC_ROWS * RC_DIM];
	static bool hit[RC_ROWS];
	uint64_t keys[RC_KPP];

	memset(g, 0, sizeof(g));
	memset(hit, 0, sizeof(hit));
	for (int r = 0; r < n; r++) {
		step_keys(r, v, RC_KPP, RC_ROWS, keys);
		for (uint32_t i = 0; i < RC_KPP; i++) {
			hit[keys[i]] = true;
			for (uint32_t j = 0; j < RC_DIM; j++)
				g[keys[i] * RC_DIM + j] +=
					grad(r, v, keys[i], j);
		}
	}
	for (uint32_t k = 0; k < RC_ROWS; k++)
		for (uint32_t j = 0; hit[k] && j < RC_DIM; j++) {
			uint32_t x = k * RC_DIM + j;

			rc_m[x] = 0.5f * rc_m[x] + g[x];
			rc_w[x] -= 0.5f * rc_m[x];
		}
}

static int rc_create(struct cs_ps_table **t)
{
	struct cs_ps_table_attr a;
	int ret;

	cs_ps_table_attr_init(&a, RC_DIM, RC_ROWS, CS_PS_OPT_MOMENTUM);
	a.opt.lr = 0.5f;
	a.opt.momentum = 0.5f;
	a.init.kind = CS_PS_INIT_CONST;
	a.init.scale = 1.0f;
	ret = cs_ps_table_create(g, "rc", &a, t);
	return ret ? fail("create rc", ret) : 0;
}

/* Push version @v as group rank @me, then pull its keys at @v + 1: equal
 * to the reference (which the caller moved past @v). */
static int rc_step(struct cs_ps_table *t, int me, uint32_t v, uint64_t *keys,
		   float *rows)
{
	cs_req_t r;
	int ret;

	step_keys(me, v, RC_KPP, RC_ROWS, keys);
	for (uint32_t i = 0; i < RC_KPP; i++)
		for (uint32_t j = 0; j < RC_DIM; j++)
			rows[i * RC_DIM + j] = grad(me, v, keys[i], j);
	ret = cs_ps_push(t, v, keys, rows, RC_KPP, &r);
	if (ret || wait_ok(r, "push"))
		return ret ? fail("push", ret) : 1;
	ret = cs_ps_pull(t, v + 1, keys, RC_KPP, rows, &r);
	if (ret || wait_ok(r, "pull"))
		return ret ? fail("pull", ret) : 1;
	for (uint32_t i = 0; i < RC_KPP; i++)
		if (memcmp(rows + i * RC_DIM, rc_w + keys[i] * RC_DIM,
			   RC_DIM * sizeof(float))) {
			printf("ps_trainer FAIL rank=%d recover: version %u: "
			       "row %llu differs from the reference\n",
			       rank, v, (unsigned long long)keys[i]);
			return 1;
		}
	return 0;
}

/* Every row of "rc" at @clock into @out. */
static int rc_pull_all(struct cs_ps_table *t, uint64_t clock, uint64_t *keys,
		       float *rows, float *out)
{
	cs_req_t r;
	int ret;

	for (uint32_t i = 0; i < RC_ROWS; i += RC_KPP) {
		for (uint32_t j = 0; j < RC_KPP; j++)
			keys[j] = i + j;
		ret = cs_ps_pull(t, clock, keys, RC_KPP, rows, &r);
		if (ret || wait_ok(r, "pull all"))
			return ret ? fail("pull all", ret) : 1;
		memcpy(out + (size_t)i * RC_DIM, rows,
		       RC_KPP * RC_DIM * sizeof(float));
	}
	return 0;
}

static int rc_wait_file(const char *path)
{
	for (int i = 0; i < 600 * 20; i++) {
		if (!access(path, F_OK))
			return 0;
		usleep(50000);
	}
	printf("ps_trainer FAIL rank=%d recover: no %s\n", rank, path);
	return 1;
}

static int recover(const char *dir, const char *go)
{
	static float snap[RC_ROWS * RC_DIM], got[RC_ROWS * RC_DIM];
	static float ck_m[RC_ROWS * RC_DIM];
	struct cs_ps_table *t;
	uint32_t equal = 0, wrong = 0;
	int n0 = world, me, size, ret;
	uint64_t *keys;
	float *rows;
	struct cs_buf *b;
	cs_req_t r;

	ret = cs_buf_alloc(c, RC_KPP * (8 + 4 * RC_DIM), &b);
	if (ret)
		return fail("buffer", ret);
	keys = cs_buf_ptr(b);
	rows = (float *)(keys + RC_KPP);
	for (uint32_t x = 0; x < RC_ROWS * RC_DIM; x++)
		rc_w[x] = 1.0f;
	if (rc_create(&t))
		return 1;
	for (uint32_t v = 0; v < RC_CKPT; v++) {
		rc_ref_version(v, n0);
		if (rc_step(t, rank, v, keys, rows))
			return 1;
	}
	if (rc_pull_all(t, RC_CKPT, keys, rows, snap))
		return 1;
	ret = cs_ps_checkpoint(t, dir, &r);
	if (ret || wait_ok(r, "checkpoint"))
		return ret ? fail("checkpoint", ret) : 1;
	/* the reference's momentum at checkpoint time (restored later) */
	memcpy(ck_m, rc_m, sizeof(ck_m));
	for (uint32_t x = 0; x < RC_ROWS * RC_DIM; x++)
		wrong += snap[x] != rc_w[x];
	if (wrong) {
		printf("ps_trainer FAIL rank=%d recover: %u values at the "
		       "checkpoint differ from the reference\n",
		       rank, wrong);
		return 1;
	}
	/* versions after the checkpoint, lost with the node */
	for (uint32_t v = RC_CKPT; v < RC_LOST; v++) {
		rc_ref_version(v, n0);
		if (rc_step(t, rank, v, keys, rows))
			return 1;
	}
	printf("ps_trainer phase1 rank=%d\n", rank);
	/* a pull that waits for version RC_LOST, which nobody pushes */
	for (uint32_t j = 0; j < RC_KPP; j++)
		keys[j] = j * 15;
	ret = cs_ps_pull(t, RC_LOST + 1, keys, RC_KPP, rows, &r);
	if (!ret)
		ret = cs_wait(c, r, WAIT_NS);
	printf("ps_trainer lost rank=%d err=%s msg=%s\n", rank,
	       cs_strerror(ret), cs_errmsg(c));
	if (ret != CS_ERR_PEER_LOST)
		return 1;
	if (rc_wait_file(go))
		return 1;
	/* the group re-forms on the nodes left at its next operation */
	for (int i = 0;; i++) {
		ret = cs_barrier(g, &r);
		if (!ret)
			ret = cs_wait(c, r, WAIT_NS);
		if (!ret)
			break;
		printf("  barrier after the loss: %s: %s\n", cs_strerror(ret),
		       cs_errmsg(c));
		if (ret != CS_ERR_PEER_LOST || i == 2)
			return fail("barrier after the loss", ret);
	}
	me = cs_group_rank(g);
	size = cs_group_size(g);
	printf("  re-formed: rank %d -> %d, size %d -> %d\n", rank, me, n0,
	       size);
	ret = cs_ps_table_destroy(t);
	if (ret)
		printf("  destroy of the failed table: %s: %s\n",
		       cs_strerror(ret), cs_errmsg(c));
	if (rc_create(&t))
		return 1;
	ret = cs_ps_table_restore(t, dir, &r);
	if (ret || wait_ok(r, "restore"))
		return ret ? fail("restore", ret) : 1;
	if (cs_ps_table_clock(t) != RC_CKPT) {
		printf("ps_trainer FAIL rank=%d recover: restored at clock "
		       "%llu, want %u\n",
		       rank, (unsigned long long)cs_ps_table_clock(t), RC_CKPT);
		return 1;
	}
	if (rc_pull_all(t, RC_CKPT, keys, rows, got))
		return 1;
	for (uint32_t i = 0; i < RC_ROWS; i++)
		equal += !memcmp(got + i * RC_DIM, snap + i * RC_DIM,
				 RC_DIM * sizeof(float));
	if (equal != RC_ROWS) {
		printf("ps_trainer FAIL rank=%d recover: %u of %u rows equal "
		       "the rows at checkpoint time\n",
		       rank, equal, RC_ROWS);
		return 1;
	}
	/* the reference from the checkpoint on: the ranks left */
	memcpy(rc_w, snap, sizeof(rc_w));
	memcpy(rc_m, ck_m, sizeof(rc_m));
	for (uint32_t v = RC_CKPT; v < RC_END; v++) {
		rc_ref_version(v, size);
		if (rc_step(t, me, v, keys, rows))
			return 1;
	}
	if (rc_pull_all(t, RC_END, keys, rows, got))
		return 1;
	for (uint32_t x = 0; x < RC_ROWS * RC_DIM; x++)
		wrong += got[x] != rc_w[x];
	if (me == 0) {
		char path[512];
		FILE *f;

		snprintf(path, sizeof(path), "%s/final.f32", dir);
		f = fopen(path, "wb");
		if (!f || fwrite(got, sizeof(got), 1, f) != 1 || fclose(f))
			return fail("final.f32", -EIO);
	}
	ret = cs_ps_table_destroy(t);
	if (ret)
		return fail("destroy", ret);
	printf("ps_trainer %s rank=%d size=%d clock=%u rows=%u equal=%u "
	       "final_wrong=%u\n",
	       wrong ? "FAIL" : "recover_ok", me, size, RC_CKPT, RC_ROWS, equal,
	       wrong);
	cs_buf_free(b);
	return wrong ? 1 : 0;
}

int main(int argc, char **argv)
{
	const char *name = "ps";
	int ret;

	if (argc < 2)
		return 2;
	for (int i = 2; i + 1 < argc; i++)
		if (!strcmp(argv[i], "--group"))
			name = argv[i + 1];
		else if (!strcmp(argv[i], "--budget"))
			budget = strtoull(argv[i + 1], NULL, 0);
	setvbuf(stdout, NULL, _IOLBF, 0);
	rank = env("RANK", 0);
	world = env("WORLD_SIZE", 1);
	lrank = env("LOCAL_RANK", rank);
	lworld = env("LOCAL_WORLD_SIZE", world);
	ret = cs_connect(NULL, &c);
	if (ret) {
		printf("ps_trainer FAIL rank=%d connect: %s\n", rank,
		       cs_strerror(ret));
		return 1;
	}
	/* recover: elastic, so that the group outlives the lost node */
	ret = cs_group_join_ex(
		c, name, rank, world, lrank, lworld,
		!strcmp(argv[1], "recover") ? CS_GROUP_ELASTIC : 0, &g);
	if (ret)
		return fail("join", ret);
	if (!strcmp(argv[1], "train"))
		ret = train(argc, argv);
	else if (!strcmp(argv[1], "bad"))
		ret = bad();
	else if (!strcmp(argv[1], "mismatch"))
		ret = mismatch();
	else if (!strcmp(argv[1], "deadline"))
		ret = deadline();
	else if (!strcmp(argv[1], "die") && argc > 2)
		ret = die(atoi(argv[2]));
	else if (!strcmp(argv[1], "hold"))
		ret = hold();
	else if (!strcmp(argv[1], "spill_refused"))
		ret = spill_refused();
	else if (!strcmp(argv[1], "ckpt") && argc > 2)
		ret = ckpt(argv[2]);
	else if (!strcmp(argv[1], "recover") && argc > 3)
		ret = recover(argv[2], argv[3]);
	else
		ret = 2;
	cs_group_leave(g);
	cs_disconnect(c);
	return ret;
}

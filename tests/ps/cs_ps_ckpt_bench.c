// SPDX-License-Identifier: MIT
/*
 * cs-ps-ckpt-bench: how much a trainer table's checkpoint slows the pushes
 * that go on while it runs, through a sidecar (docs/ps.md, "Trainer
 * tables: checkpoints"; issue 24's "a checkpoint of a 1 GiB shard slows
 * pushes by less than 10 % while it runs").
 *
 *	collstack launch -T N ... -- cs-ps-ckpt-bench DIR [--mb MB]
 *		[--dim D] [--kpp P] [--secs S]
 *
 * Every rank joins the launcher's group; a table of MB MiB of f32 rows of
 * D values (async: a push is applied when it arrives, no rank waits for
 * another) is filled (every row pushed once), then each rank pushes
 * batches of P random keys back to back, one in flight, and counts them
 * in three windows: S seconds before the checkpoint, while
 * cs_ps_checkpoint(DIR) is in flight (posted by every rank, the pushes
 * going on meanwhile), S seconds after it. Rank 0 prints
 *
 *	ps_ckpt_bench ranks=N table_mib=MB row_bytes=B kpp=P
 *	  before_rows_per_s=.. during_rows_per_s=.. after_rows_per_s=..
 *	  ckpt_s=.. slowdown_pct=..
 *
 * (rates summed over the ranks, each rank's own window; slowdown = 1 -
 * during / mean(before, after)), and the checkpoint file's size. Exits
 * non-zero on any failed call. A benchmark, not a test: nothing is
 * asserted about the figures.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "collstack/collstack.h"
#include "collstack/ps.h"

static struct cs_client *c;
static struct cs_group *g;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int fail(const char *what, int ret)
{
	fprintf(stderr, "cs-ps-ckpt-bench: rank %d: %s: %s (%s)\n",
		g ? cs_group_rank(g) : -1, what, cs_strerror(ret),
		c ? cs_errmsg(c) : "");
	return 1;
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Push batches of @p random keys, one in flight, until @until (seconds,
 * monotonic) or, with @ck, until @ck completed. Returns the rows pushed
 * and the window's length in @secs, or a negative error. */
static long long push_window(struct cs_ps_table *t, uint64_t *ver,
			     uint64_t *keys, float *rows, uint32_t p,
			     uint64_t key_max, uint64_t *seed, double until,
			     cs_req_t ck, int *ck_ret, double *secs)
{
	double t0 = now_s();
	long long n = 0;
	cs_req_t r;
	int ret;

	for (;;) {
		if (ck) {
			ret = cs_test(c, ck);
			if (ret != -EINPROGRESS) {
				*ck_ret = ret;
				break;
			}
		} else if (now_s() >= until) {
			break;
		}
		for (uint32_t i = 0; i < p; i++)
			keys[i] = rnd(seed) % key_max;
		ret = cs_ps_push(t, (*ver)++, keys, rows, p, &r);
		if (!ret)
			ret = cs_wait(c, r, 60 * 1000000000ll);
		if (ret)
			return ret > 0 ? -ret : ret;
		n += p;
	}
	*secs = now_s() - t0;
	return n;
}

int main(int argc, char **argv)
{
	uint32_t dim = 256, p = 256, mb = 1024;
	double secs = 5, w[3], *rate, *all, ck_s;
	uint64_t ver = 0, seed, key_max;
	struct cs_ps_table_attr a;
	struct cs_ps_table *t;
	struct cs_buf *b, *rb;
	const char *dir;
	uint64_t *keys;
	float *rows;
	cs_req_t r, ck;
	int ret, ck_ret = 0, rank, size;

	if (argc < 2) {
		fprintf(stderr, "usage: cs-ps-ckpt-bench DIR [--mb MB] "
				"[--dim D] [--kpp P] [--secs S]\n");
		return 2;
	}
	dir = argv[1];
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--mb"))
			mb = (uint32_t)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--dim"))
			dim = (uint32_t)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--kpp"))
			p = (uint32_t)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--secs"))
			secs = atof(argv[i + 1]);
		else
			return 2;
	}
	key_max = ((uint64_t)mb << 20) / (4ull * dim);
	if (!dim || !p || p > 4096 || !mb || secs <= 0 || p > key_max)
		return 2;
	ret = cs_connect(NULL, &c);
	if (ret)
		return fail("connect", ret);
	ret = cs_group_join_env(c, "ckb", &g);
	if (ret)
		return fail("join", ret);
	rank = cs_group_rank(g);
	size = cs_group_size(g);
	seed = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1);
	cs_ps_table_attr_init(&a, dim, key_max, CS_PS_OPT_SGD);
	a.mode = CS_PS_ASYNC;
	ret = cs_ps_table_create(g, "ckb", &a, &t);
	if (ret)
		return fail("create", ret);
	ret = cs_buf_alloc(c, (size_t)4096 * 8 + 6 * sizeof(double), &b);
	if (!ret)
		ret = cs_buf_alloc(c, (size_t)4096 * dim * 4, &rb);
	if (ret)
		return fail("buffer", ret);
	keys = cs_buf_ptr(b);
	rate = (double *)(keys + 4096); /* allreduce operands: in a cs_buf */
	all = rate + 3;
	rows = cs_buf_ptr(rb);
	for (size_t i = 0; i < (size_t)4096 * dim; i++)
		rows[i] = 1e-3f;
	/* fill: rank k pushes keys k, k + N, ... so every row exists */
	for (uint64_t k0 = (uint64_t)rank * 4096; k0 < key_max;
	     k0 += (uint64_t)size * 4096) {
		uint32_t n =
			(uint32_t)(key_max - k0 < 4096 ? key_max - k0 : 4096);

		for (uint32_t i = 0; i < n; i++)
			keys[i] = k0 + i;
		ret = cs_ps_push(t, ver++, keys, rows, n, &r);
		if (!ret)
			ret = cs_wait(c, r, 120 * 1000000000ll);
		if (ret)
			return fail("fill", ret);
	}
	ret = cs_barrier(g, &r);
	if (!ret)
		ret = cs_wait(c, r, 120 * 1000000000ll);
	if (ret)
		return fail("barrier", ret);
	/* before */
	long long n0 = push_window(t, &ver, keys, rows, p, key_max, &seed,
				   now_s() + secs, 0, NULL, &w[0]);
	if (n0 < 0)
		return fail("push (before)", (int)n0);
	ret = cs_barrier(g, &r);
	if (!ret)
		ret = cs_wait(c, r, 120 * 1000000000ll);
	if (ret)
		return fail("barrier", ret);
	/* during */
	ck_s = now_s();
	ret = cs_ps_checkpoint(t, dir, &ck);
	if (ret)
		return fail("checkpoint", ret);
	long long n1 = push_window(t, &ver, keys, rows, p, key_max, &seed, 0,
				   ck, &ck_ret, &w[1]);
	ck_s = now_s() - ck_s;
	if (n1 < 0)
		return fail("push (during)", (int)n1);
	if (ck_ret)
		return fail("checkpoint", ck_ret);
	/* after */
	long long n2 = push_window(t, &ver, keys, rows, p, key_max, &seed,
				   now_s() + secs, 0, NULL, &w[2]);
	if (n2 < 0)
		return fail("push (after)", (int)n2);
	rate[0] = (double)n0 / w[0];
	rate[1] = w[1] > 0 ? (double)n1 / w[1] : 0;
	rate[2] = (double)n2 / w[2];
	ret = cs_allreduce(g, rate, all, 3, CS_F64, CS_SUM, &r);
	if (!ret)
		ret = cs_wait(c, r, 60 * 1000000000ll);
	if (ret)
		return fail("allreduce", ret);
	if (rank == 0) {
		char path[4096];
		struct stat st;

		snprintf(path, sizeof(path), "%s/ckb.shard0.ckpt", dir);
		printf("ps_ckpt_bench ranks=%d table_mib=%u row_bytes=%u "
		       "kpp=%u before_rows_per_s=%.0f during_rows_per_s=%.0f "
		       "after_rows_per_s=%.0f ckpt_s=%.3f during_pushes=%lld "
		       "slowdown_pct=%.1f file_bytes=%lld\n",
		       size, mb, dim * 4, p, all[0], all[1], all[2], ck_s,
		       n1 / p, 100.0 * (1.0 - all[1] / ((all[0] + all[2]) / 2)),
		       stat(path, &st) ? -1ll : (long long)st.st_size);
	}
	ret = cs_ps_table_destroy(t);
	if (ret)
		return fail("destroy", ret);
	cs_buf_free(b);
	cs_buf_free(rb);
	cs_group_leave(g);
	cs_disconnect(c);
	return 0;
}

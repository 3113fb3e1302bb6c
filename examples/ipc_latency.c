/* SPDX-License-Identifier: MIT */
/*
 * ipc_latency: per-operation latency through the local sidecar, measured
 * by the trainer: post + completion of an empty operation (a barrier of a
 * one-rank group) or a small allreduce over the node's ranks. Prints the
 * median and p99 of every rank (rank 0 last). scripts/bench-ipc.sh runs it.
 *
 *   ipc_latency --op barrier|allreduce [--bytes B] [--iters K] [--warmup W]
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <collstack/collstack.h>

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	int iters = 100000, warmup = 1000, barrier = 1, ret;
	size_t bytes = 8;
	struct cs_client *c;
	struct cs_group *g;
	struct cs_buf *b;
	double *lat;
	cs_req_t r;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--op"))
			barrier = !strcmp(argv[i + 1], "barrier");
		else if (!strcmp(argv[i], "--bytes"))
			bytes = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--iters"))
			iters = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--warmup"))
			warmup = atoi(argv[i + 1]);
	}
	if (iters < 1 || bytes < 4) {
		fprintf(stderr, "ipc_latency: bad arguments\n");
		return 2;
	}
	lat = calloc((size_t)iters, sizeof(*lat));
	if (!lat)
		return 1;
	ret = cs_connect(NULL, &c);
	if (ret) {
		fprintf(stderr, "ipc_latency: connect: %s\n", cs_strerror(ret));
		return 1;
	}
	ret = cs_group_join_env(c, "ipclat", &g);
	if (!ret)
		ret = cs_buf_alloc(c, bytes, &b);
	if (ret) {
		fprintf(stderr, "ipc_latency: %s\n", cs_errmsg(c));
		return 1;
	}
	for (int i = 0; i < warmup + iters; i++) {
		float *x = cs_buf_ptr(b);
		double t0 = now_us();

		ret = barrier ? cs_barrier(g, &r)
			      : cs_allreduce(g, x, x, bytes / sizeof(float),
					     CS_F32, CS_SUM, &r);
		if (!ret)
			ret = cs_wait(c, r, -1);
		if (ret) {
			fprintf(stderr, "ipc_latency: %s\n", cs_errmsg(c));
			return 1;
		}
		if (i >= warmup)
			lat[i - warmup] = now_us() - t0;
	}
	qsort(lat, (size_t)iters, sizeof(*lat), cmp);
	printf("rank %d/%d: %s %zu B x %d: median %.3f us, p99 %.3f us\n",
	       cs_group_rank(g), cs_group_size(g),
	       barrier ? "barrier (empty op)" : "allreduce",
	       barrier ? 0 : bytes, iters, lat[(iters - 1) / 2],
	       lat[(size_t)(iters * 0.99)]);
	cs_group_leave(g);
	cs_disconnect(c);
	free(lat);
	return 0;
}

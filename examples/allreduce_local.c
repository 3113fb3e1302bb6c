/* SPDX-License-Identifier: MIT */
/* Example: allreduce through the local sidecar with libcollstack. */
/*
 * Start a sidecar, then one process per rank, e.g. two ranks on one node:
 *
 *   build/tests/client/mini_sidecar /tmp/cs.sock &
 *   export COLLSTACK_SOCKET=/tmp/cs.sock WORLD_SIZE=2 LOCAL_WORLD_SIZE=2
 *   RANK=0 LOCAL_RANK=0 build/examples/allreduce_local &
 *   RANK=1 LOCAL_RANK=1 build/examples/allreduce_local
 *
 * Without RANK/WORLD_SIZE (or Slurm's variables) it runs as a single rank.
 * Options: --count N (floats, default 1M), --iters K (default 100).
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <collstack/collstack.h>

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	size_t count = 1 << 20;
	int iters = 100, rank, size, ret, bad = 0;
	struct cs_client *c;
	struct cs_group *g;
	struct cs_buf *b;
	double t0, t;
	cs_req_t r;
	float *x;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--count"))
			count = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--iters"))
			iters = atoi(argv[i + 1]);
	}
	ret = cs_connect(NULL, &c);
	if (ret) {
		fprintf(stderr, "connect: %s\n", cs_strerror(ret));
		return 1;
	}
	ret = cs_group_join_env(c, "example", &g);
	if (ret == -ENOENT)
		ret = cs_group_join(c, "example", 0, 1, 0, 1, &g);
	if (ret || (ret = cs_buf_alloc(c, count * sizeof(float), &b))) {
		fprintf(stderr, "%s\n", cs_errmsg(c));
		return 1;
	}
	rank = cs_group_rank(g);
	size = cs_group_size(g);
	x = cs_buf_ptr(b);

	t0 = now_s();
	for (int it = 0; it < iters; it++) {
		for (size_t i = 0; i < count; i++)
			x[i] = (float)(rank + 1);
		ret = cs_allreduce(g, x, x, count, CS_F32, CS_SUM, &r);
		if (!ret)
			ret = cs_wait(c, r, -1);
		if (ret) {
			fprintf(stderr, "%s\n", cs_errmsg(c));
			return 1;
		}
		for (size_t i = 0; i < count; i++)
			bad += x[i] != (float)(size * (size + 1) / 2);
	}
	t = (now_s() - t0) / iters;
	printf("rank %d/%d: allreduce of %zu floats x %d: %.1f us each "
	       "(incl. refilling the buffer), %s\n",
	       rank, size, count, iters, t * 1e6,
	       bad ? "WRONG RESULTS" : "results ok");
	cs_buf_free(b);
	cs_group_leave(g);
	cs_disconnect(c);
	return bad ? 1 : 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * cs-trainer-join: one trainer that joins a group as told (a hostile
 * trainer's join, for tests/netns/test_trainers.sh membership cases) and
 * posts one collective, then reports what came back.
 *
 *   COLLSTACK_SOCKET=... cs-trainer-join GROUP RANK SIZE LOCAL_RANK \
 *	LOCAL_SIZE allreduce|all_gather|reduce_scatter|alltoall|barrier \
 *	[N_OPS [COUNT]]
 *
 * COUNT: elements per operation (default 1024; a rank that posts another
 * count than its peers on the node has its operation refused there); a
 * list "C0,C1,...": operation k posts Ck (the last one from then on).
 *
 * Output, one line per operation (flushed): "ok op=K sum=<f32 sum of the
 * result>" or "error op=K status=<code> msg=<cs_errmsg>".
 * Each rank contributes rank + 1 to every element (alltoall: COUNT to
 * every rank; each block received is checked to hold its sender's rank +
 * 1, all-gather's block j to hold j + 1, reduce-scatter's block (COUNT)
 * and every element of an allreduce the sum of every rank's,
 * SIZE (SIZE + 1) / 2; else "wrong op=K
 * elements=<how many>"). Exit 0 once every
 * operation reported (success or error), 1 when setup failed, 2 on usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <collstack/collstack.h>

#define JOIN_COUNT 1024 /* elements, default */
#define JOIN_COUNTS 16 /* COUNT list entries at most */
#define JOIN_WAIT_NS (300 * 1000000000ll)

int main(int argc, char **argv)
{
	int rank, size, lr, ls, nops = 1, ret;
	size_t count_max = JOIN_COUNT, counts[JOIN_COUNTS] = { JOIN_COUNT };
	unsigned ncounts = 1;
	struct cs_client *c;
	struct cs_group *g;
	struct cs_buf *b;
	const char *op;
	float *x, *y;

	if (argc < 7 || argc > 9) {
		fprintf(stderr, "usage: cs-trainer-join GROUP RANK SIZE "
				"LOCAL_RANK LOCAL_SIZE "
				"allreduce|all_gather|reduce_scatter|alltoall|"
				"barrier [N_OPS "
				"[COUNT]]\n");
		return 2;
	}
	rank = atoi(argv[2]);
	size = atoi(argv[3]);
	lr = atoi(argv[4]);
	ls = atoi(argv[5]);
	op = argv[6];
	if (argc >= 8)
		nops = atoi(argv[7]);
	if (argc == 9) {
		const char *p = argv[8];

		ncounts = 0;
		count_max = 0;
		while (*p && ncounts < JOIN_COUNTS) {
			char *end;

			counts[ncounts] = (size_t)strtoul(p, &end, 10);
			if (end == p || !counts[ncounts] ||
			    counts[ncounts] > (1 << 24) ||
			    (*end && *end != ','))
				break;
			if (counts[ncounts] > count_max)
				count_max = counts[ncounts];
			ncounts++;
			p = *end ? end + 1 : end;
		}
		if (*p)
			count_max = 0;
	}
	if (size < 1 || !count_max) {
		fprintf(stderr, "bad SIZE or COUNT\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	ret = cs_connect(NULL, &c);
	if (ret) {
		printf("setup connect: %s\n", cs_strerror(ret));
		return 1;
	}
	ret = cs_group_join(c, argv[1], rank, size, lr, ls, &g);
	if (ret) {
		printf("setup join: %s: %s\n", cs_strerror(ret), cs_errmsg(c));
		return 1;
	}
	ret = cs_buf_alloc(
		c, (size_t)(2 * size + 1) * count_max * sizeof(float), &b);
	if (ret) {
		printf("setup buffer: %s\n", cs_strerror(ret));
		return 1;
	}
	x = cs_buf_ptr(b);
	y = x + (size_t)size * count_max;
	for (int k = 0; k < nops; k++) {
		size_t count = counts[(unsigned)k < ncounts ? (unsigned)k
							    : ncounts - 1];
		size_t n = count;
		cs_req_t r;
		double sum = 0;
		size_t wrong = 0;

		for (size_t i = 0; i < (size_t)size * count; i++)
			x[i] = (float)(rank + 1);
		if (!strcmp(op, "allreduce")) {
			ret = cs_allreduce(g, x, y, count, CS_F32, CS_SUM, &r);
		} else if (!strcmp(op, "all_gather")) {
			ret = cs_all_gather(g, x, y, count, CS_F32, &r);
			n = (size_t)size * count;
		} else if (!strcmp(op, "reduce_scatter")) {
			ret = cs_reduce_scatter(g, x, y, count, CS_F32, CS_SUM,
						&r);
		} else if (!strcmp(op, "alltoall")) {
			n = (size_t)size * count;
			for (size_t i = 0; i < n; i++)
				y[i] = -1.0f;
			ret = cs_alltoall(g, x, y, count, CS_F32, &r);
		} else if (!strcmp(op, "barrier")) {
			ret = cs_barrier(g, &r);
			n = 0;
		} else {
			fprintf(stderr, "unknown operation %s\n", op);
			return 2;
		}
		if (!ret)
			ret = cs_wait(c, r, JOIN_WAIT_NS);
		if (ret) { /* the public API's view: code and message */
			printf("error op=%d status=%d msg=%s\n", k, ret,
			       cs_errmsg(c));
			continue;
		}
		for (size_t i = 0; i < n; i++) {
			sum += y[i];
			if (!strcmp(op, "alltoall") ||
			    !strcmp(op, "all_gather"))
				wrong += y[i] != (float)(i / count + 1);
			else if (!strcmp(op, "reduce_scatter") ||
				 !strcmp(op, "allreduce"))
				wrong += y[i] != (float)(size * (size + 1) / 2);
		}
		if (wrong)
			printf("wrong op=%d elements=%zu\n", k, wrong);
		else
			printf("ok op=%d sum=%.0f\n", k, sum);
	}
	cs_disconnect(c);
	return 0;
}

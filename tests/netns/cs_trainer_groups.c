/* SPDX-License-Identifier: MIT */
/*
 * cs-trainer-groups: one trainer in several groups at once, posting one
 * allreduce on each group per round in the order given, all in flight
 * together, then waiting for them (tests/netns/test_trainers.sh
 * groups_*: two nodes post the same groups in opposite orders).
 *
 *   COLLSTACK_SOCKET=... cs-trainer-groups RANK SIZE LOCAL_RANK \
 *	LOCAL_SIZE GROUP[,GROUP...] ROUNDS [COUNT [serial]]
 *
 * serial: each allreduce waited for before the next is posted (DDP
 * without overlap, scripts/bench-overlap.sh --trainers compares).
 *
 * Rank r contributes (r + 1) * (g + 1) + k to every element of round k
 * of the g-th group in sorted name order (the same g on every node,
 * whatever order it posts in); every element of every result is checked
 * exactly, after the round's waits (time_us= counts posts and waits
 * only). Prints "ok groups=G rounds=K wrong=0 time_us=T" and exits 0, or
 * prints
 * what failed and exits 1; 2 on usage.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <collstack/collstack.h>

#define GROUPS_MAX 32
#define GROUPS_COUNT 4096 /* elements, default */
#define GROUPS_WAIT_NS (120 * 1000000000ll)

int main(int argc, char **argv)
{
	char *names[GROUPS_MAX], *list, *save = NULL, *tok;
	struct cs_group *g[GROUPS_MAX];
	unsigned gid[GROUPS_MAX];
	int rank, size, lr, ls, rounds, ng = 0, ret;
	size_t count = GROUPS_COUNT;
	unsigned long long wrong = 0;
	struct cs_client *c;
	struct cs_buf *b;
	struct timespec t0, t1;
	double us = 0;
	bool serial = false;
	float *buf;

	if (argc < 7 || argc > 9) {
		fprintf(stderr, "usage: cs-trainer-groups RANK SIZE "
				"LOCAL_RANK LOCAL_SIZE GROUP[,GROUP...] "
				"ROUNDS [COUNT [serial]]\n");
		return 2;
	}
	serial = argc == 9 && !strcmp(argv[8], "serial");
	count = argc >= 8 ? (size_t)atol(argv[7]) : count;
	rounds = atoi(argv[6]);
	if (argc == 9 && !serial) {
		fprintf(stderr, "unknown mode %s\n", argv[8]);
		return 2;
	}
	{ /* RANK SIZE LOCAL_RANK LOCAL_SIZE */
		int *v[] = { &rank, &size, &lr, &ls };

		for (int i = 0; i < 4; i++)
			*v[i] = atoi(argv[1 + i]);
	}
	list = argv[5];
	for (tok = strtok_r(list, ",", &save); tok && ng < GROUPS_MAX;
	     tok = strtok_r(NULL, ",", &save))
		names[ng++] = tok;
	if (size < 1 || rank < 0 || rank >= size || !ng || tok || rounds < 1 ||
	    !count || count > (1 << 22)) {
		fprintf(stderr,
			"bad RANK, SIZE, GROUP list, ROUNDS or COUNT\n");
		return 2;
	}
	for (int i = 0; i < ng; i++) { /* its index in sorted name order */
		gid[i] = 0;
		for (int j = 0; j < ng; j++)
			gid[i] += strcmp(names[j], names[i]) < 0;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	ret = cs_connect(NULL, &c);
	if (ret) {
		printf("setup connect: %s\n", cs_strerror(ret));
		return 1;
	}
	for (int i = 0; i < ng; i++) {
		ret = cs_group_join(c, names[i], rank, size, lr, ls, &g[i]);
		if (ret) {
			printf("setup join %s: %s: %s\n", names[i],
			       cs_strerror(ret), cs_errmsg(c));
			return 1;
		}
	}
	ret = cs_buf_alloc(c, (size_t)ng * count * sizeof(float), &b);
	if (ret) {
		printf("setup buffer: %s\n", cs_strerror(ret));
		return 1;
	}
	buf = cs_buf_ptr(b);
	for (int k = 0; k < rounds; k++) {
		cs_req_t r[GROUPS_MAX];

		for (int i = 0; i < ng; i++)
			for (size_t e = 0; e < count; e++)
				buf[(size_t)i * count + e] =
					(float)((rank + 1) * (int)(gid[i] + 1) +
						k);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (int i = 0; i < ng; i++) {
			float *x = buf + (size_t)i * count;

			ret = cs_allreduce(g[i], x, x, count, CS_F32, CS_SUM,
					   &r[i]);
			if (ret) {
				printf("error round=%d group=%s post: %s\n", k,
				       names[i], cs_strerror(ret));
				return 1;
			}
			if (!serial && i + 1 < ng)
				continue;
			for (int j = serial ? i : 0; j <= i; j++) {
				ret = cs_wait(c, r[j], GROUPS_WAIT_NS);
				if (ret) {
					printf("error round=%d group=%s "
					       "status=%d msg=%s\n",
					       k, names[j], ret, cs_errmsg(c));
					return 1;
				}
			}
		}
		clock_gettime(CLOCK_MONOTONIC, &t1);
		us += (double)(t1.tv_sec - t0.tv_sec) * 1e6 +
		      (double)(t1.tv_nsec - t0.tv_nsec) / 1e3;
		for (int i = 0; i < ng; i++) {
			const float *x = buf + (size_t)i * count;
			float want = (float)((int)(gid[i] + 1) * size *
						     (size + 1) / 2 +
					     size * k);

			for (size_t e = 0; e < count; e++)
				if (x[e] != want && !wrong++)
					printf("wrong round=%d group=%s "
					       "element=%zu got=%g want=%g\n",
					       k, names[i], e, x[e], want);
		}
	}
	printf("%s groups=%d rounds=%d wrong=%llu time_us=%.1f\n",
	       wrong ? "FAIL" : "ok", ng, rounds, wrong, us);
	cs_disconnect(c);
	return wrong ? 1 : 0;
}

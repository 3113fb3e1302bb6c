/* SPDX-License-Identifier: MIT */
/*
 * cs-trainer-elastic: a trainer of an elastic group (CS_GROUP_ELASTIC) for
 * tests/netns/test_failure.sh elastic_*: it runs one allreduce per step and
 * never joins again, whatever happens to the cluster between steps.
 *
 *   RANK=r WORLD_SIZE=n COLLSTACK_SOCKET=... \
 *	cs-trainer-elastic GROUP GO_PREFIX STEPS
 *
 * Step 1 runs at once; step s > 1 once the file GO_PREFIX.s exists (the
 * test moves the cluster between steps). Every element of the allreduce
 * (1024 x i32) is 1 << r, r the rank the trainer was started with, so the
 * sum says exactly which ranks took part. A step that fails with
 * CS_ERR_PEER_LOST (it was in flight when a node went) is tried again, at
 * most 3 times. Output, one line per event (flushed):
 *   "step S size=N rank=R sum=X"      (N, R: cs_group_size/rank after it)
 *   "step S lost status=C msg=..."    (then tried again)
 *   "step S error status=C msg=..."   (then exit 1)
 * With ELASTIC_JOIN=S (S >= 2) the trainer is one of a node that joined
 * the cluster: it joins the group with rank and size -1 (numbered by the
 * group at its next operation) and starts at step S (RANK still says what
 * it adds).
 * Exit 0 after STEPS steps; 1 on errors, 2 on usage, 3 on unequal elements.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <collstack/collstack.h>

#define COUNT 1024
#define GO_WAIT_S 300
#define TRIES 3

static int env_int(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? atoi(v) : -1;
}

static int wait_go(const char *prefix, int step)
{
	char path[512];

	snprintf(path, sizeof(path), "%s.%d", prefix, step);
	for (int i = 0; i < GO_WAIT_S * 20; i++) {
		if (!access(path, F_OK))
			return 0;
		usleep(50000);
	}
	printf("step %d error status=%d msg=no %s within %d s\n", step,
	       -ETIMEDOUT, path, GO_WAIT_S);
	return -ETIMEDOUT;
}

/* One step: 0, or the failed status (reported). */
static int step_once(struct cs_client *c, struct cs_group *g, int32_t *x,
		     int me, int step)
{
	cs_req_t r;
	int ret;

	for (int i = 0; i < COUNT; i++)
		x[i] = (int32_t)1 << me;
	ret = cs_allreduce(g, x, x, COUNT, CS_I32, CS_SUM, &r);
	if (!ret)
		ret = cs_wait(c, r, -1);
	if (ret) {
		printf("step %d %s status=%d msg=%s\n", step,
		       ret == CS_ERR_PEER_LOST ? "lost" : "error", ret,
		       cs_errmsg(c));
		return ret;
	}
	for (int i = 1; i < COUNT; i++)
		if (x[i] != x[0]) {
			printf("step %d error status=0 msg=element %d is %d, "
			       "element 0 %d\n",
			       step, i, (int)x[i], (int)x[0]);
			return 3;
		}
	printf("step %d size=%d rank=%d sum=%d\n", step, cs_group_size(g),
	       cs_group_rank(g), (int)x[0]);
	return 0;
}

int main(int argc, char **argv)
{
	int me = env_int("RANK"), n = env_int("WORLD_SIZE"), steps, ret;
	int first = env_int("ELASTIC_JOIN");
	bool late = first >= 2;
	struct cs_client *c;
	struct cs_group *g;
	struct cs_buf *b;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 4 || me < 0 || n < 1 || me >= n || me > 30 ||
	    (steps = atoi(argv[3])) < 1) {
		fprintf(stderr, "usage: RANK=r WORLD_SIZE=n %s GROUP "
				"GO_PREFIX STEPS\n",
			argv[0]);
		return 2;
	}
	ret = cs_connect(NULL, &c);
	if (ret) {
		printf("step 0 error status=%d msg=connect\n", ret);
		return 1;
	}
	ret = cs_buf_alloc(c, COUNT * sizeof(int32_t), &b);
	if (!ret)
		ret = cs_group_join_ex(c, argv[1], late ? -1 : me,
				       late ? -1 : n, 0, 1, CS_GROUP_ELASTIC,
				       &g);
	if (ret) {
		printf("step 0 error status=%d msg=%s\n", ret, cs_errmsg(c));
		return 1;
	}
	for (int s = late ? first : 1; s <= steps; s++) {
		if (s > 1 && wait_go(argv[2], s))
			return 1;
		for (int t = 0; t < TRIES; t++) {
			ret = step_once(c, g, cs_buf_ptr(b), me, s);
			if (ret != CS_ERR_PEER_LOST)
				break;
		}
		if (ret)
			return ret == 3 ? 3 : 1;
	}
	cs_disconnect(c);
	return 0;
}

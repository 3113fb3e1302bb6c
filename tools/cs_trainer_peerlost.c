/* SPDX-License-Identifier: MIT */
/*
 * cs-trainer-peerlost: a trainer that lives through the loss of a node.
 * Joins a group from the launcher variables (RANK, WORLD_SIZE, LOCAL_RANK,
 * LOCAL_WORLD_SIZE; the ranks of node k are k*L .. k*L+L-1), runs in-place
 * allreduces of -c elements (f32, checked element by element) until one
 * fails, prints what failed and when, and with -r then forms the group of
 * the survivors (the lost node's L ranks out, the others renumbered) and
 * checks -m allreduces on it.
 *
 *   RANK=1 WORLD_SIZE=4 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
 *   COLLSTACK_SOCKET=... cs-trainer-peerlost -c 4M -g train -r -m 3
 *
 * Output lines (one per event, flushed): "ok iter=K" every -p iterations,
 * "lost t=<CLOCK_REALTIME s> iter=K status=<code> node=<n> msg=<...>",
 * "reformed group=<name> rank=<r> size=<s> iters=<m> wrong=<w>".
 * Exit: 0 when a loss was seen and (with -r) the new group's allreduces
 * were all correct; 1 on errors, 2 on usage, 3 when -n iterations passed
 * without a loss, 4 on wrong elements.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <collstack/collstack.h>

#include "bench_util.h"

static int env_int(const char *name, int def)
{
	const char *v = getenv(name);

	return v && *v ? atoi(v) : def;
}

static double now_real(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Small integers: float sums stay exact, so the check can be exact. */
static float val(int rank, size_t i)
{
	return (float)((rank * 7 + (int)(i % 97)) % 13);
}

/* One in-place allreduce of @count floats on @g; *@wrong counts misses. */
static int allreduce_checked(struct cs_client *c, struct cs_group *g, float *x,
			     size_t count, long *wrong)
{
	int rank = cs_group_rank(g), n = cs_group_size(g);
	float want[97];
	cs_req_t r = 0;
	int ret;

	for (size_t i = 0; i < count; i++)
		x[i] = val(rank, i);
	ret = cs_allreduce(g, x, x, count, CS_F32, CS_SUM, &r);
	if (!ret)
		ret = cs_wait(c, r, -1);
	if (ret)
		return ret;
	for (size_t i = 0; i < 97; i++) {
		want[i] = 0;
		for (int k = 0; k < n; k++)
			want[i] += val(k, i);
	}
	for (size_t i = 0; i < count; i++)
		if (memcmp(&x[i], &want[i % 97], sizeof(float)))
			(*wrong)++;
	return 0;
}

int main(int argc, char **argv)
{
	size_t count = 4u << 20;
	long iters = 0, after = 3, every = 10, wrong = 0, it;
	const char *group = "peerlost";
	int reform = 0, ret, lost_node;
	int rank = env_int("RANK", -1), size = env_int("WORLD_SIZE", -1);
	int lrank = env_int("LOCAL_RANK", 0);
	int lsize = env_int("LOCAL_WORLD_SIZE", 1);
	struct cs_client *c = NULL;
	struct cs_group *g = NULL;
	struct cs_buf *b = NULL;
	char name[64];
	float *x;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "-r")) {
			reform = 1;
			continue;
		}
		if (!v)
			goto usage;
		i++;
		if (!strcmp(a, "-c"))
			count = cs_bench_parse_size(v);
		else if (!strcmp(a, "-n"))
			iters = atol(v);
		else if (!strcmp(a, "-m"))
			after = atol(v);
		else if (!strcmp(a, "-p"))
			every = atol(v);
		else if (!strcmp(a, "-g"))
			group = v;
		else
			goto usage;
	}
	if (!count || after < 1 || every < 1 || iters < 0 || rank < 0 ||
	    size < 2 || rank >= size || lsize < 1 || size % lsize ||
	    lrank < 0 || lrank >= lsize || strlen(group) > 40)
		goto usage;
	ret = cs_connect(NULL, &c);
	if (ret) {
		fprintf(stderr, "rank %d: connect: %s\n", rank,
			cs_strerror(ret));
		return 1;
	}
	ret = cs_buf_alloc(c, count * sizeof(float), &b);
	if (!ret)
		ret = cs_group_join(c, group, rank, size, lrank, lsize, &g);
	if (ret) {
		fprintf(stderr, "rank %d: set-up: %s (%s)\n", rank,
			cs_strerror(ret), cs_errmsg(c));
		goto out_fail;
	}
	x = cs_buf_ptr(b);
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("joined group=%s rank=%d size=%d node=%d count=%zu\n", group,
	       rank, size, rank / lsize, count);
	for (it = 0; !iters || it < iters; it++) {
		ret = allreduce_checked(c, g, x, count, &wrong);
		if (ret)
			break;
		if (wrong) {
			printf("wrong iter=%ld elements=%ld\n", it, wrong);
			goto out_wrong;
		}
		if (it % every == 0)
			printf("ok iter=%ld\n", it);
	}
	if (!ret) {
		printf("no loss in %ld iterations\n", it);
		cs_disconnect(c);
		return 3;
	}
	lost_node = cs_lost_node(c);
	printf("lost t=%.6f iter=%ld status=%d (%s) node=%d msg=%s\n",
	       now_real(), it, ret, cs_strerror(ret), lost_node, cs_errmsg(c));
	if (ret != CS_ERR_PEER_LOST || lost_node < 0)
		goto out_fail;
	if (!reform)
		goto out_ok;
	/* The survivors: node k's ranks move down by L past the lost node. */
	cs_group_leave(g);
	g = NULL;
	if (rank / lsize > lost_node)
		rank -= lsize;
	size -= lsize;
	snprintf(name, sizeof(name), "%s.lost%d", group, lost_node);
	ret = cs_group_join(c, name, rank, size, lrank, lsize, &g);
	if (ret) {
		fprintf(stderr, "rank %d: join %s: %s (%s)\n", rank, name,
			cs_strerror(ret), cs_errmsg(c));
		goto out_fail;
	}
	for (it = 0; it < after; it++) {
		ret = allreduce_checked(c, g, x, count, &wrong);
		if (ret) {
			fprintf(stderr, "rank %d: group %s: %s (%s)\n", rank,
				name, cs_strerror(ret), cs_errmsg(c));
			goto out_fail;
		}
	}
	printf("reformed group=%s rank=%d size=%d iters=%ld wrong=%ld "
	       "t=%.6f\n",
	       name, rank, size, after, wrong, now_real());
	if (wrong)
		goto out_wrong;
out_ok:
	cs_group_leave(g);
	cs_disconnect(c);
	return 0;
out_wrong:
	cs_disconnect(c);
	return 4;
out_fail:
	cs_disconnect(c);
	return 1;
usage:
	fprintf(stderr,
		"usage: RANK=.. WORLD_SIZE=.. [LOCAL_RANK=.. "
		"LOCAL_WORLD_SIZE=..] %s [-c COUNT[K|M]] [-g GROUP] [-n ITERS "
		"(0: until an error)] [-p PRINT_EVERY] [-r [-m ITERS_AFTER]]\n",
		argv[0]);
	return 2;
}

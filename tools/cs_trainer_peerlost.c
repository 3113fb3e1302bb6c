/* SPDX-License-Identifier: MIT */
/*
 * cs-trainer-peerlost: a trainer that lives through the loss of a node.
 * Joins a group from the launcher variables (RANK, WORLD_SIZE, LOCAL_RANK,
 * LOCAL_WORLD_SIZE; the ranks of node k are k*L .. k*L+L-1), runs in-place
 * allreduces of -c elements (f32, checked element by element) until one
 * fails, prints what failed and when, and with -r then forms the group of
 * the survivors (the lost node's L ranks out, the others renumbered) and
 * checks -m allreduces on it. With -k K every iteration is K allreduces
 * on buffers of their own, all posted before any is waited for (DDP's
 * buckets): on the loss each of them either finished before it or fails
 * with CS_ERR_PEER_LOST, and none waits beyond that.
 *
 *   RANK=1 WORLD_SIZE=4 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
 *   COLLSTACK_SOCKET=... cs-trainer-peerlost -c 4M -g train -r -m 3
 *
 * Output lines (one per event, flushed): "ok iter=K" every -p iterations,
 * "lost t=<CLOCK_REALTIME s> iter=K status=<code> node=<n> msg=<...>"
 * (the first failure), "buckets=K done=D lost=L other=O" (-k: how the
 * iteration's buckets ended; other: any other error),
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

#define PEERLOST_MAX_BUCKETS 64

/* How the buckets of the last iteration ended (-k). */
struct outcome {
	int done, lost, other;
	int first; /* the first error (in bucket order), 0: none */
	char msg[512]; /* cs_errmsg() of it */
};

/*
 * @nb in-place allreduces of @count floats on @g, bucket j at x + j x
 * @count with its values shifted by 7 j, all posted, then each waited
 * for; *@wrong counts misses in the ones that succeeded. Returns 0, or
 * the first error (in bucket order; *@out says how each ended).
 */
static int allreduce_checked(struct cs_client *c, struct cs_group *g, float *x,
			     size_t count, int nb, long *wrong,
			     struct outcome *out)
{
	int rank = cs_group_rank(g), n = cs_group_size(g), posted;
	cs_req_t r[PEERLOST_MAX_BUCKETS];
	int st[PEERLOST_MAX_BUCKETS];
	float want[97];

	memset(out, 0, sizeof(*out));
	for (int j = 0; j < nb; j++)
		for (size_t i = 0; i < count; i++)
			x[(size_t)j * count + i] = val(rank, i + 7 * (size_t)j);
	for (posted = 0; posted < nb; posted++) {
		st[posted] = cs_allreduce(g, x + (size_t)posted * count,
					  x + (size_t)posted * count, count,
					  CS_F32, CS_SUM, &r[posted]);
		if (st[posted])
			break;
	}
	for (int j = 0; j < nb; j++) {
		if (j < posted)
			st[j] = cs_wait(c, r[j], -1);
		else if (j > posted)
			st[j] = st[posted];
		if (!st[j])
			out->done++;
		else if (st[j] == CS_ERR_PEER_LOST)
			out->lost++;
		else
			out->other++;
		if (st[j] && !out->first) {
			out->first = st[j];
			snprintf(out->msg, sizeof(out->msg), "%s",
				 cs_errmsg(c));
		}
	}
	for (size_t i = 0; i < 97; i++) {
		want[i] = 0;
		for (int k = 0; k < n; k++)
			want[i] += val(k, i);
	}
	for (int j = 0; j < nb; j++)
		for (size_t i = 0; !st[j] && i < count; i++)
			if (memcmp(&x[(size_t)j * count + i],
				   &want[(i + 7 * (size_t)j) % 97],
				   sizeof(float)))
				(*wrong)++;
	return out->first;
}

int main(int argc, char **argv)
{
	size_t count = 4u << 20;
	long iters = 0, after = 3, every = 10, wrong = 0, it;
	const char *group = "peerlost";
	int reform = 0, ret, lost_node, nb = 1;
	struct outcome oc;
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
		else if (!strcmp(a, "-k"))
			nb = atoi(v);
		else
			goto usage;
	}
	if (!count || after < 1 || every < 1 || iters < 0 || rank < 0 ||
	    size < 2 || rank >= size || lsize < 1 || size % lsize ||
	    lrank < 0 || lrank >= lsize || strlen(group) > 40 || nb < 1 ||
	    nb > PEERLOST_MAX_BUCKETS)
		goto usage;
	ret = cs_connect(NULL, &c);
	if (ret) {
		fprintf(stderr, "rank %d: connect: %s\n", rank,
			cs_strerror(ret));
		return 1;
	}
	ret = cs_buf_alloc(c, count * sizeof(float) * (size_t)nb, &b);
	if (!ret)
		ret = cs_group_join(c, group, rank, size, lrank, lsize, &g);
	if (ret) {
		fprintf(stderr, "rank %d: set-up: %s (%s)\n", rank,
			cs_strerror(ret), cs_errmsg(c));
		goto out_fail;
	}
	x = cs_buf_ptr(b);
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("joined group=%s rank=%d size=%d node=%d count=%zu buckets=%d\n",
	       group, rank, size, rank / lsize, count, nb);
	for (it = 0; !iters || it < iters; it++) {
		ret = allreduce_checked(c, g, x, count, nb, &wrong, &oc);
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
	       now_real(), it, ret, cs_strerror(ret), lost_node, oc.msg);
	printf("buckets=%d done=%d lost=%d other=%d\n", nb, oc.done, oc.lost,
	       oc.other);
	if (wrong) {
		printf("wrong iter=%ld elements=%ld\n", it, wrong);
		goto out_wrong;
	}
	if (ret != CS_ERR_PEER_LOST || lost_node < 0 || oc.other)
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
		ret = allreduce_checked(c, g, x, count, nb, &wrong, &oc);
		if (ret) {
			fprintf(stderr, "rank %d: group %s: %s (%s)\n", rank,
				name, cs_strerror(ret), oc.msg);
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
		"(0: until an error)] [-p PRINT_EVERY] [-k BUCKETS] "
		"[-r [-m ITERS_AFTER]]\n",
		argv[0]);
	return 2;
}

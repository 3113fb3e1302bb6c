/* SPDX-License-Identifier: MIT */
/*
 * cs-trainer-mixed: one trainer of `collstack run mixed --trainers T`
 * (tools/cmd_run_mixed.c starts them through tools/trainers.c). Every
 * trainer derives the same plan from the seed:
 *
 * - G groups: group 0 over every rank; each other one, by the seed, over
 *   every rank again, over one "column" (local rank c of every node: a
 *   group spanning every node with one trainer each, the shape of a
 *   tensor-parallel group), over the trainers of one node (local only),
 *   or over every trainer of some of the nodes (at least 2; made with
 *   cs_group_split() of group 0, its ranks in node order);
 * - K operations per group, each of a random kind (allreduce,
 *   reduce-scatter, all-gather, broadcast, barrier), type, operator and
 *   size (log-uniform in [MIN, MAX] bytes), the same sequence on every
 *   member of the group;
 *
 * and posts all of its operations at once, interleaving its groups in an
 * order of its own (every rank a different one), then waits for all of
 * them (in another order of its own) and checks every element against
 * the closed formulas of collectives/coll_data.h. Groups are matched
 * across the sidecars by name and sequence, never by posting order.
 *
 *   RANK=.. WORLD_SIZE=.. LOCAL_RANK=.. LOCAL_WORLD_SIZE=..
 *   COLLSTACK_SOCKET=.. cs-trainer-mixed [-g G] [-k K] [-s SEED]
 *	[-b MIN] [-e MAX] [-t WAIT_S]
 *
 * Prints "mixed ok rank=R groups=G ops=N wrong=0 time_us=T" and exits 0,
 * or says what failed (stdout and stderr) and exits 1; 2 on usage.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <collstack/collstack.h>

#include "collectives/coll_data.h"

#define MX_GROUPS_MAX 16
#define MX_OPS_MAX 256 /* requests one client may have unfinished */

enum mx_kind { MX_AR, MX_RS, MX_AG, MX_BC, MX_BAR, MX_KINDS };

static const char *const kind_name[MX_KINDS] = { "allreduce", "reduce-scatter",
						 "all-gather", "broadcast",
						 "barrier" };

struct mx_group {
	char name[48];
	bool split; /* over some nodes: cs_group_split() of group 0 */
	bool member;
	int rank, size, lrank, lsize; /* this trainer's place in it */
	struct cs_group *g;
};

struct mx_op {
	unsigned g, k;
	enum mx_kind kind;
	enum cs_dtype dt;
	enum cs_redop ro;
	int root;
	uint64_t count; /* per rank for reduce-scatter / all-gather */
	uint64_t seed;
	size_t soff, roff; /* byte offsets in the buffer */
	cs_req_t req;
};

static uint64_t hash3(uint64_t a, uint64_t b, uint64_t c)
{
	return cs_td_hash(a, b, c);
}

/* The groups, from the seed: the same on every trainer. */
static void plan_groups(struct mx_group *gr, unsigned ng, uint64_t seed,
			int rank, int world, int lr, int ls)
{
	int nodes = world / ls, node = rank / ls;

	for (unsigned i = 0; i < ng; i++) {
		uint64_t h = hash3(seed, 1000 + i, 7);
		unsigned shape = i ? (unsigned)(h % 4) : 0;
		struct mx_group *x = &gr[i];

		snprintf(x->name, sizeof(x->name), "mx%" PRIx64 ".%u", seed, i);
		if (shape == 3 && nodes > 2 && nodes <= 32) { /* some nodes */
			int cnt = 0, pos = 0;

			for (int n = 0; n < nodes; n++)
				cnt += (int)(h >> (8 + n) & 1);
			for (int n = 0; n < nodes && cnt < 2; n++)
				if (!(h >> (8 + n) & 1)) {
					h |= 1ull << (8 + n);
					cnt++;
				}
			for (int n = 0; n < node; n++)
				pos += (int)(h >> (8 + n) & 1);
			x->split = true;
			x->member = h >> (8 + node) & 1;
			x->rank = pos * ls + lr;
			x->size = cnt * ls;
			x->lrank = lr;
			x->lsize = ls;
		} else if (shape == 1 && ls > 1) { /* column c: one per node */
			int c = (int)((h >> 8) % (uint64_t)ls);

			x->member = lr == c;
			x->rank = node;
			x->size = nodes;
			x->lrank = 0;
			x->lsize = 1;
		} else if (shape == 2 && nodes > 1) { /* node k only */
			int k = (int)((h >> 8) % (uint64_t)nodes);

			x->member = node == k;
			x->rank = lr;
			x->size = ls;
			x->lrank = lr;
			x->lsize = ls;
		} else { /* every rank */
			x->member = true;
			x->rank = rank;
			x->size = world;
			x->lrank = lr;
			x->lsize = ls;
		}
	}
}

/* Operation @k of group @g, from the seed (the same on its members). */
static void plan_op(struct mx_op *o, const struct mx_group *x, unsigned g,
		    unsigned k, uint64_t seed, uint64_t minb, uint64_t maxb)
{
	uint64_t h = hash3(seed, g, 100000 + k);
	double u =
		(double)(hash3(seed, g, 200000 + k) >> 11) / 9007199254740992.0;
	uint64_t bytes =
		(uint64_t)exp(log((double)minb) +
			      u * (log((double)maxb) - log((double)minb)));
	size_t esz;

	o->g = g;
	o->k = k;
	o->kind = (enum mx_kind)(h % MX_KINDS);
	o->dt = (enum cs_dtype)((h >> 8) % CS_DTYPE_COUNT);
	o->ro = (enum cs_redop)((h >> 16) % CS_REDOP_COUNT);
	o->root = (int)((h >> 24) % (uint64_t)x->size);
	o->seed = hash3(seed, g, 300000 + k);
	esz = cs_dtype_size(o->dt);
	o->count = bytes < minb ? minb / esz : bytes / esz;
	if (o->kind == MX_RS || o->kind == MX_AG)
		o->count = o->count / (uint64_t)x->size;
	if (!o->count)
		o->count = 1;
	if (o->kind == MX_BAR)
		o->count = 0;
}

/* Bytes of the send and receive areas of @o. */
static void op_bytes(const struct mx_op *o, int size, size_t *s, size_t *r)
{
	size_t esz = cs_dtype_size(o->dt), n = (size_t)o->count;

	switch (o->kind) {
	case MX_RS:
		*s = n * (size_t)size * esz;
		*r = n * esz;
		break;
	case MX_AG:
		*s = n * esz;
		*r = n * (size_t)size * esz;
		break;
	case MX_BAR:
		*s = *r = 0;
		break;
	case MX_BC:
		*s = 0;
		*r = n * esz;
		break;
	default:
		*s = *r = n * esz;
	}
}

static void fill(const struct mx_op *o, const struct mx_group *x, char *base)
{
	uint64_t n = o->count;

	switch (o->kind) {
	case MX_AR:
		for (uint64_t i = 0; i < n; i++)
			cs_td_store(o->dt, base + o->soff, i,
				    cs_td_value(o->dt, o->ro, (uint32_t)x->size,
						o->seed, (uint32_t)x->rank, i));
		memset(base + o->roff, 0x5a, n * cs_dtype_size(o->dt));
		break;
	case MX_RS:
		for (uint64_t i = 0; i < n * (uint64_t)x->size; i++)
			cs_td_store(o->dt, base + o->soff, i,
				    cs_td_value(o->dt, o->ro, (uint32_t)x->size,
						o->seed, (uint32_t)x->rank, i));
		memset(base + o->roff, 0x5a, n * cs_dtype_size(o->dt));
		break;
	case MX_AG:
		for (uint64_t i = 0; i < n; i++)
			cs_td_store(o->dt, base + o->soff, i,
				    cs_td_value(o->dt, CS_SUM,
						(uint32_t)x->size, o->seed,
						(uint32_t)x->rank, i));
		memset(base + o->roff, 0x5a,
		       n * (uint64_t)x->size * cs_dtype_size(o->dt));
		break;
	case MX_BC:
		if (x->rank == o->root)
			for (uint64_t i = 0; i < n; i++)
				cs_td_store(o->dt, base + o->roff, i,
					    cs_td_value(o->dt, CS_SUM,
							(uint32_t)x->size,
							o->seed,
							(uint32_t)o->root, i));
		else
			memset(base + o->roff, 0x5a, n * cs_dtype_size(o->dt));
		break;
	default:
		break;
	}
}

static int post(struct mx_op *o, const struct mx_group *x, char *base)
{
	void *s = base + o->soff, *r = base + o->roff;

	switch (o->kind) {
	case MX_AR:
		return cs_allreduce(x->g, s, r, o->count, o->dt, o->ro,
				    &o->req);
	case MX_RS:
		return cs_reduce_scatter(x->g, s, r, o->count, o->dt, o->ro,
					 &o->req);
	case MX_AG:
		return cs_all_gather(x->g, s, r, o->count, o->dt, &o->req);
	case MX_BC:
		return cs_broadcast(x->g, r, o->count, o->dt, o->root, &o->req);
	default:
		return cs_barrier(x->g, &o->req);
	}
}

/* Elements of @o's result that differ from the formula; the first one is
 * described on stdout. */
static uint64_t check(const struct mx_op *o, const struct mx_group *x,
		      const char *base, int rank)
{
	const char *r = base + o->roff;
	uint64_t wrong = 0, n = o->count, tot = n;
	uint32_t size = (uint32_t)x->size;

	if (o->kind == MX_AG)
		tot = n * size;
	if (o->kind == MX_BAR)
		tot = 0;
	for (uint64_t i = 0; i < tot; i++) {
		double got = cs_td_load(o->dt, r, i), want;

		switch (o->kind) {
		case MX_AR:
			want = cs_td_expect(o->dt, o->ro, size, o->seed, i);
			break;
		case MX_RS:
			want = cs_td_expect(o->dt, o->ro, size, o->seed,
					    (uint64_t)x->rank * n + i);
			break;
		case MX_AG:
			want = cs_td_value(o->dt, CS_SUM, size, o->seed,
					   (uint32_t)(i / n), i % n);
			break;
		default:
			want = cs_td_value(o->dt, CS_SUM, size, o->seed,
					   (uint32_t)o->root, i);
		}
		if (got != want && !wrong++)
			printf("wrong rank=%d group=%s op=%u kind=%s type=%d "
			       "redop=%d count=%" PRIu64 " element=%" PRIu64
			       " got=%g want=%g\n",
			       rank, x->name, o->k, kind_name[o->kind], o->dt,
			       o->ro, n, i, got, want);
	}
	return wrong;
}

static int env_int(const char *name, int dflt)
{
	const char *v = getenv(name);

	return v && *v ? atoi(v) : dflt;
}

static void shuffle(unsigned *v, unsigned n, uint64_t seed)
{
	for (unsigned i = n; i > 1; i--) {
		unsigned j = (unsigned)(hash3(seed, i, 9) % i), t = v[i - 1];

		v[i - 1] = v[j];
		v[j] = t;
	}
}

int main(int argc, char **argv)
{
	static struct mx_group gr[MX_GROUPS_MAX];
	static struct mx_op op[MX_OPS_MAX];
	static unsigned order[MX_OPS_MAX];
	unsigned ng = 4, nk = 16, nop = 0, wait_s = 120, nsplit = 0;
	uint64_t seed = 1, minb = 4, maxb = 1 << 20, wrong = 0;
	int rank = env_int("RANK", 0), world = env_int("WORLD_SIZE", 1);
	int lr = env_int("LOCAL_RANK", 0), ls = env_int("LOCAL_WORLD_SIZE", 1);
	unsigned next[MX_GROUPS_MAX] = { 0 };
	struct timespec t0, t1;
	struct cs_client *c;
	struct cs_buf *b;
	size_t total = 0;
	char *base;
	int o, ret;

	while ((o = getopt(argc, argv, "g:k:s:b:e:t:")) != -1) {
		switch (o) {
		case 'g':
			ng = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'k':
			nk = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 's':
			seed = strtoull(optarg, NULL, 0);
			break;
		case 'b':
			minb = strtoull(optarg, NULL, 0);
			break;
		case 'e':
			maxb = strtoull(optarg, NULL, 0);
			break;
		case 't':
			wait_s = (unsigned)strtoul(optarg, NULL, 0);
			break;
		default:
			return 2;
		}
	}
	if (optind != argc || !ng || ng > MX_GROUPS_MAX || !nk ||
	    (uint64_t)ng * nk > MX_OPS_MAX || !minb || maxb < minb ||
	    maxb > (64u << 20) || ls < 1 || world < ls || world % ls ||
	    rank < 0 || rank >= world || lr < 0 || lr >= ls || !wait_s) {
		fprintf(stderr,
			"cs-trainer-mixed: bad arguments or environment "
			"(groups 1..%d, groups x ops <= %d, 1 <= MIN <= MAX "
			"<= 64 MiB, RANK/WORLD_SIZE/LOCAL_*)\n",
			MX_GROUPS_MAX, MX_OPS_MAX);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	plan_groups(gr, ng, seed, rank, world, lr, ls);
	for (unsigned i = 0; i < ng; i++) {
		if (!gr[i].member)
			continue;
		for (unsigned k = 0; k < nk; k++) {
			struct mx_op *x = &op[nop++];
			size_t sb, rb;

			plan_op(x, &gr[i], i, k, seed, minb, maxb);
			op_bytes(x, gr[i].size, &sb, &rb);
			x->soff = total;
			total += (sb + 63) & ~(size_t)63;
			x->roff = total;
			total += (rb + 63) & ~(size_t)63;
		}
	}
	ret = cs_connect(NULL, &c);
	if (ret) {
		fprintf(stderr, "cs-trainer-mixed rank %d: connect: %s\n", rank,
			cs_strerror(ret));
		return 1;
	}
	for (unsigned i = 0; i < ng; i++) {
		struct mx_group *x = &gr[i];

		if (x->split) { /* every rank of group 0 takes part */
			ret = cs_group_split(gr[0].g,
					     x->member ? 0 : CS_SPLIT_NONE,
					     rank, &x->g);
			if (!ret && x->member &&
			    (cs_group_rank(x->g) != x->rank ||
			     cs_group_size(x->g) != x->size)) {
				fprintf(stderr,
					"cs-trainer-mixed rank %d: split %s: "
					"rank %d of %d, planned %d of %d\n",
					rank, x->name, cs_group_rank(x->g),
					cs_group_size(x->g), x->rank, x->size);
				return 1;
			}
		} else if (x->member) {
			ret = cs_group_join(c, x->name, x->rank, x->size,
					    x->lrank, x->lsize, &x->g);
		}
		if (ret) {
			fprintf(stderr,
				"cs-trainer-mixed rank %d: join %s: %s: %s\n",
				rank, x->name, cs_strerror(ret), cs_errmsg(c));
			return 1;
		}
	}
	ret = cs_buf_alloc(c, total ? total : 64, &b);
	if (ret) {
		fprintf(stderr,
			"cs-trainer-mixed rank %d: %zu-byte buffer: %s\n", rank,
			total, cs_strerror(ret));
		return 1;
	}
	base = cs_buf_ptr(b);
	for (unsigned i = 0; i < nop; i++)
		fill(&op[i], &gr[op[i].g], base);
	/* this trainer's own interleaving of its groups: a shuffled list of
	 * group indices, one entry per operation; the n-th entry of group g
	 * posts g's n-th operation (a group's own order is kept) */
	for (unsigned i = 0; i < nop; i++)
		order[i] = op[i].g;
	shuffle(order, nop, hash3(seed, (uint64_t)rank, 11));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (unsigned i = 0; i < nop; i++) {
		unsigned g = order[i], j = 0;

		while (op[j].g != g)
			j++;
		j += next[g]++;
		order[i] = j;
		ret = post(&op[j], &gr[g], base);
		if (ret) {
			printf("error rank=%d group=%s op=%u post: %s\n", rank,
			       gr[g].name, op[j].k, cs_strerror(ret));
			fprintf(stderr, "cs-trainer-mixed rank %d: post: %s\n",
				rank, cs_strerror(ret));
			return 1;
		}
	}
	shuffle(order, nop, hash3(seed, (uint64_t)rank, 13));
	for (unsigned i = 0; i < nop; i++) {
		struct mx_op *x = &op[order[i]];

		ret = cs_wait(c, x->req, (int64_t)wait_s * 1000000000ll);
		if (ret) {
			printf("error rank=%d group=%s op=%u kind=%s: %s: %s\n",
			       rank, gr[x->g].name, x->k, kind_name[x->kind],
			       cs_strerror(ret), cs_errmsg(c));
			fprintf(stderr,
				"cs-trainer-mixed rank %d: group %s op %u "
				"(%s): %s: %s\n",
				rank, gr[x->g].name, x->k, kind_name[x->kind],
				cs_strerror(ret), cs_errmsg(c));
			return 1;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	for (unsigned i = 0; i < nop; i++)
		wrong += check(&op[i], &gr[op[i].g], base, rank);
	for (unsigned i = 0; i < ng; i++)
		nsplit += gr[i].split;
	printf("mixed %s rank=%d groups=%u split_groups=%u ops=%u bytes=%zu "
	       "wrong=%" PRIu64 " time_us=%.1f\n",
	       wrong ? "FAILED" : "ok", rank, ng, nsplit, nop, total, wrong,
	       (double)(t1.tv_sec - t0.tv_sec) * 1e6 +
		       (double)(t1.tv_nsec - t0.tv_nsec) / 1e3);
	if (wrong)
		fprintf(stderr,
			"cs-trainer-mixed rank %d: %" PRIu64
			" wrong elements\n",
			rank, wrong);
	for (unsigned i = 0; i < ng; i++)
		if (gr[i].member)
			cs_group_leave(gr[i].g);
	cs_buf_free(b);
	cs_disconnect(c);
	return wrong ? 1 : 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * `collstack run mixed`: many groups over subsets of a running cluster's
 * sidecars, each with operations of random ring kinds (and flat
 * all-to-alls), types
 * and sizes, posted in a different order on every sidecar and all in
 * flight together over the transport core; every element is checked by
 * the sidecar that holds it (mx_post / mx_wait / mx_forget,
 * sidecar/svc_core.c). Buffers are the sidecars' own: trainers are not
 * involved.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmds.h"
#include "collstack/types.h"
#include "sidecar/ctl.h"
#include "dataplane/lcore.h"
#include "internal/util.h"
#include "trainers.h"

#define MX_MAX_NODES 64

struct mx_op {
	uint32_t g, k; /* group index, op index */
	unsigned kind, root;
	uint64_t count;
	enum cs_dtype dt;
	enum cs_redop ro;
};

struct mx_group {
	uint32_t id, n;
	uint32_t node[MX_MAX_NODES]; /* cluster index, in rank order */
	bool member[MX_MAX_NODES];
};

static void mx_usage(FILE *out)
{
	fprintf(out,
		"usage: collstack run mixed [--groups G] [--ops K] [--seed S]\n"
		"       [--min-bytes B] [--max-bytes B] [--timeout MS]\n"
		"       [--trainers T] [--cluster ENV]\n\n"
		"G groups (the first over every sidecar, the others over\n"
		"random subsets in random order), K operations each of random\n"
		"ring kinds or all-to-all, types, operators and sizes, posted in a different\n"
		"order on every sidecar, all in flight; every element checked.\n"
		"--trainers T: through T trainers per node (cs-trainer-mixed,\n"
		"libcollstack), groups over every rank, one trainer per node\n"
		"or one node's trainers (at most 16 groups, groups x ops <= 256).\n"
		"Prints 'mixed ok ...' or\n"
		"'mixed FAILED ...' (exit 1). Defaults: 4 groups, 16 ops,\n"
		"4 B .. 1 MiB, seed 1, 120000 ms.\n");
}

/*
 * `run mixed --trainers T`: the same through trainers (cs-trainer-mixed,
 * T per node, tools/trainers.c): groups over every rank, over one trainer
 * of every node, or over one node's trainers; every trainer posts all of
 * its operations in an order of its own and checks every element.
 */
static int mx_trainers(const char *env, int tpn, unsigned long groups,
		       unsigned long ops, uint64_t seed, uint64_t lo,
		       uint64_t hi, unsigned long timeout_ms)
{
	static const char *const flag[6] = {
		"-g", "-k", "-s", "-b", "-e", "-t"
	};
	char a[6][32], *args[13];
	struct cs_trainers tr = { .cmd = "collstack run mixed",
				  .default_name = "cs-trainer-mixed",
				  .env = env,
				  .args = args,
				  .tpn = tpn,
				  .netns = true,
				  .pin = true };
	unsigned wait_s = (unsigned)((timeout_ms + 999) / 1000);
	int na = 0, ret;

	if (groups > 16 || groups * ops > 256) {
		fprintf(stderr, "collstack run mixed: with --trainers, at most "
				"16 groups and 256 operations per trainer "
				"(groups x ops)\n");
		return 2;
	}
	snprintf(a[0], sizeof(a[0]), "%lu", groups);
	snprintf(a[1], sizeof(a[1]), "%lu", ops);
	snprintf(a[2], sizeof(a[2]), "%" PRIu64, seed);
	snprintf(a[3], sizeof(a[3]), "%" PRIu64, lo);
	snprintf(a[4], sizeof(a[4]), "%" PRIu64, hi);
	snprintf(a[5], sizeof(a[5]), "%u", wait_s);
	for (int i = 0; i < 6; i++) {
		args[na++] = (char *)flag[i];
		args[na++] = a[i];
	}
	args[na] = NULL;
	tr.timeout_s = wait_s + 60;
	ret = cs_trainers_run(&tr);
	printf("mixed %s trainers_per_node=%d groups=%lu ops=%lu seed=%" PRIu64
	       " (%s)\n",
	       ret ? "FAILED" : "ok", tpn, groups, ops, seed,
	       ret ? "see the lines above"
		   : "every trainer checked every "
		     "element: wrong=0");
	return ret ? 1 : 0;
}

static int mx_size(const char *s, uint64_t *out)
{
	unsigned long long v;

	if (cs_sim_parse_size(s, &v) || !v)
		return -EINVAL;
	*out = v;
	return 0;
}

static void mx_shuffle(uint32_t *v, uint32_t n, uint64_t *rng)
{
	for (uint32_t i = n; i > 1; i--) {
		uint32_t j = (uint32_t)(cs_rand_next(rng) % i), t = v[i - 1];

		v[i - 1] = v[j];
		v[j] = t;
	}
}

/* The cluster's control folders and each sidecar's node id in the view
 * (mx_rank); returns the number of sidecars or -1 (said why). */
int cs_run_cluster(const char *cmd, const char *env,
		   char (*names)[CS_CTL_NAME_MAX], char (*dirs)[320],
		   uint32_t *rank_of)
{
	char root[256], reply[512];
	double v;
	int n;

	n = cs_ctl_cluster_cli(cmd, env, names, MX_MAX_NODES, root,
			       sizeof(root), 2);
	for (int i = 0; i < n; i++) {
		snprintf(dirs[i], sizeof(dirs[i]), "%.255s/%.63s", root,
			 names[i]);
		if (cs_ctl_call(dirs[i], "mx_rank", reply, sizeof(reply),
				10000) ||
		    cs_ctl_kv(reply, "rank", &v)) {
			fprintf(stderr, "%s: %s: %s\n", cmd, names[i], reply);
			return -1;
		}
		rank_of[i] = (uint32_t)v;
	}
	return n;
}

int cs_cmd_run_mixed(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "groups", required_argument, NULL, 'g' },
		{ "ops", required_argument, NULL, 'k' },
		{ "seed", required_argument, NULL, 's' },
		{ "min-bytes", required_argument, NULL, 'b' },
		{ "max-bytes", required_argument, NULL, 'e' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "cluster", required_argument, NULL, 'c' },
		{ "trainers", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	static const enum cs_dtype types[] = { CS_F32, CS_F64, CS_I32, CS_I64 };
	unsigned long tpn = 0;
	char names[MX_MAX_NODES][CS_CTL_NAME_MAX];
	char dirs[MX_MAX_NODES][320], req[4096], reply[CS_CTL_LINE];
	unsigned long groups = 4, ops = 16, timeout = 120000;
	uint64_t lo = 4, hi = 1 << 20, seed = 1, rng, wrong = 0;
	uint32_t rank_of[MX_MAX_NODES], *order[MX_MAX_NODES] = { 0 };
	uint32_t norder[MX_MAX_NODES] = { 0 }, maxlen = 0, base;
	uint64_t failed = 0, instances = 0, peak = 0;
	const char *env = cs_ctl_env();
	struct mx_group *g = NULL;
	struct mx_op *op = NULL;
	cs_ns_t t0, t1;
	double v;
	int n, o, ret = 1;

	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'g':
			if (cs_parse_whole(optarg, 1, 1000, &groups))
				goto bad;
			break;
		case 'k':
			if (cs_parse_whole(optarg, 1, 100000, &ops))
				goto bad;
			break;
		case 's':
			seed = strtoull(optarg, NULL, 0);
			break;
		case 'b':
			if (mx_size(optarg, &lo))
				goto bad;
			break;
		case 'e':
			if (mx_size(optarg, &hi))
				goto bad;
			break;
		case 'T':
			if (cs_parse_whole(optarg, 1, 1ul << 31, &timeout))
				goto bad;
			break;
		case 'c':
			env = optarg;
			break;
		case 't':
			if (cs_parse_whole(optarg, 1, CS_TRAINERS_MAX_TPN,
					   &tpn))
				goto bad;
			break;
		case 'h':
			mx_usage(stdout);
			return 0;
		default:
			goto bad;
		}
	}
	if (lo > hi || optind != argc) {
	bad:
		mx_usage(stderr);
		return 2;
	}
	if (tpn)
		return mx_trainers(env, (int)tpn, groups, ops, seed, lo, hi,
				   timeout);
	n = cs_run_cluster("collstack run mixed", env, names, dirs, rank_of);
	if (n < 0)
		return 1;
	rng = seed * 0x9e3779b97f4a7c15ull + 1;
	g = calloc(groups, sizeof(*g));
	op = calloc(groups * ops, sizeof(*op));
	if (!g || !op)
		goto out;
	/* ids unique to this run: a group's op ids then never repeat */
	base = 16 + (uint32_t)((uint64_t)time(NULL) % 1000000) * 1024;
	for (uint32_t gi = 0; gi < groups; gi++) {
		uint32_t perm[MX_MAX_NODES];

		for (int i = 0; i < n; i++)
			perm[i] = (uint32_t)i;
		mx_shuffle(perm, (uint32_t)n, &rng);
		g[gi].id = base + gi;
		g[gi].n = gi ? 2 + (uint32_t)(cs_rand_next(&rng) % (n - 1))
			     : (uint32_t)n;
		for (uint32_t r = 0; r < g[gi].n; r++) {
			g[gi].node[r] = perm[r];
			g[gi].member[perm[r]] = true;
		}
		for (uint32_t k = 0; k < ops; k++) {
			struct mx_op *p = &op[gi * ops + k];
			double b = exp(log((double)lo) +
				       (log((double)hi) - log((double)lo)) *
					       cs_rand_unit(&rng));
			size_t esz;

			p->g = gi;
			p->k = k;
			/* the 5 ring kinds and (16) a flat all-to-all */
			p->kind = (unsigned)(cs_rand_next(&rng) % 6);
			if (p->kind == 5)
				p->kind = 16;
			p->dt = types[cs_rand_next(&rng) % 4];
			p->ro = (enum cs_redop)(cs_rand_next(&rng) %
						CS_REDOP_COUNT);
			p->root = (unsigned)(cs_rand_next(&rng) % g[gi].n);
			esz = cs_dtype_size(p->dt);
			/* RS, AG, all-to-all: COUNT per rank */
			if (p->kind == 1 || p->kind == 2 || p->kind == 16)
				b /= g[gi].n;
			p->count = (uint64_t)b / esz ? (uint64_t)b / esz : 1;
		}
	}
	/* every sidecar's own order of its operations */
	for (int i = 0; i < n; i++) {
		order[i] = malloc(groups * ops * sizeof(uint32_t));
		if (!order[i])
			goto out;
		for (uint32_t x = 0; x < groups * ops; x++)
			if (g[op[x].g].member[i])
				order[i][norder[i]++] = x;
		mx_shuffle(order[i], norder[i], &rng);
		if (norder[i] > maxlen)
			maxlen = norder[i];
		instances += norder[i];
	}
	printf("# collstack run mixed: %d sidecars, %lu groups, %lu ops each, "
	       "%" PRIu64 " instances, %" PRIu64 " B .. %" PRIu64 " B\n",
	       n, groups, ops, instances, lo, hi);
	t0 = cs_lcore_now();
	/* round robin over the sidecars, each in its own order */
	for (uint32_t j = 0; j < maxlen; j++)
		for (int i = 0; i < n; i++) {
			const struct mx_op *p;
			const struct mx_group *gr;
			size_t l;

			if (j >= norder[i])
				continue;
			p = &op[order[i][j]];
			gr = &g[p->g];
			l = (size_t)snprintf(req, sizeof(req),
					     "mx_post %u %u %u %" PRIu64
					     " %s %s %u %" PRIu64 " ",
					     gr->id, p->k + 1, p->kind,
					     p->count, cs_dtype_name(p->dt),
					     cs_redop_name(p->ro), p->root,
					     seed + p->g * 1000 + p->k);
			for (uint32_t r = 0; r < gr->n && l < sizeof(req); r++)
				l += (size_t)snprintf(req + l, sizeof(req) - l,
						      "%s%u", r ? "," : "",
						      rank_of[gr->node[r]]);
			if (cs_ctl_call(dirs[i], req, reply, sizeof(reply),
					10000)) {
				fprintf(stderr, "# %s: %s\n", names[i], reply);
				failed++;
			}
		}
	for (int i = 0; i < n; i++)
		for (uint32_t j = 0; j < norder[i]; j++) {
			const struct mx_op *p = &op[order[i][j]];

			snprintf(req, sizeof(req), "mx_wait %u %u %lu",
				 g[p->g].id, p->k + 1, timeout);
			if (cs_ctl_call(dirs[i], req, reply, sizeof(reply),
					(int)timeout + 10000)) {
				fprintf(stderr, "# %s: %s\n", names[i], reply);
				failed++;
				continue;
			}
			if (!cs_ctl_kv(reply, "wrong", &v) && v > 0) {
				fprintf(stderr, "# %s: %s\n", names[i], reply);
				wrong += (uint64_t)v;
			}
		}
	t1 = cs_lcore_now();
	for (int i = 0; i < n; i++) {
		if (!cs_ctl_call(dirs[i], "ar_stats", reply, sizeof(reply),
				 10000) &&
		    !cs_ctl_kv(reply, "peak_ops", &v) && v > peak)
			peak = (uint64_t)v;
		for (uint32_t gi = 0; gi < groups; gi++) {
			if (!g[gi].member[i])
				continue;
			snprintf(req, sizeof(req), "mx_forget %u", g[gi].id);
			(void)cs_ctl_call(dirs[i], req, reply, sizeof(reply),
					  10000);
		}
	}
	ret = failed || wrong ? 1 : 0;
	printf("mixed %s sidecars=%d groups=%lu ops=%lu instances=%" PRIu64
	       " failed=%" PRIu64 " wrong=%" PRIu64
	       " time_us=%.1f peak_in_flight=%" PRIu64 " seed=%" PRIu64 "\n",
	       ret ? "FAILED" : "ok", n, groups, ops, instances, failed, wrong,
	       (t1 - t0) / 1e3, peak, seed);
out:
	for (int i = 0; i < n; i++)
		free(order[i]);
	free(g);
	free(op);
	return ret;
}

/*
 * `collstack run buckets`: DDP's gradient buckets. --buckets allreduces of
 * --bytes over every sidecar, posted back to back (all in flight) or, with
 * --serial, each waited for before the next is posted; one line with the
 * time of the whole set. scripts/bench-overlap.sh compares the two.
 */
int cs_cmd_run_buckets(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "buckets", required_argument, NULL, 'n' },
		{ "bytes", required_argument, NULL, 'B' },
		{ "serial", no_argument, NULL, 'S' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "cluster", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	char names[MX_MAX_NODES][CS_CTL_NAME_MAX];
	char dirs[MX_MAX_NODES][320], req[4096], reply[CS_CTL_LINE], list[1024];
	uint32_t rank_of[MX_MAX_NODES];
	unsigned long buckets = 16, timeout = 120000;
	uint64_t bytes = 4u << 20, wrong = 0, failed = 0;
	const char *env = cs_ctl_env();
	bool serial = false;
	uint32_t group;
	size_t l = 0;
	cs_ns_t t0, t1;
	double v;
	int n, o;

	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'n':
			if (cs_parse_whole(optarg, 1, 100000, &buckets))
				goto bad;
			break;
		case 'B':
			if (mx_size(optarg, &bytes) || bytes < 4)
				goto bad;
			break;
		case 'S':
			serial = true;
			break;
		case 'T':
			if (cs_parse_whole(optarg, 1, 1ul << 31, &timeout))
				goto bad;
			break;
		case 'c':
			env = optarg;
			break;
		case 'h':
			printf("usage: collstack run buckets [--buckets N] "
			       "[--bytes B] [--serial] [--timeout MS]\n");
			return 0;
		default:
		bad:
			fprintf(stderr, "usage: collstack run buckets "
					"[--buckets N] [--bytes B] [--serial] "
					"[--timeout MS]\n");
			return 2;
		}
	}
	n = cs_run_cluster("collstack run buckets", env, names, dirs, rank_of);
	if (n < 0)
		return 1;
	for (int i = 0; i < n; i++)
		l += (size_t)snprintf(list + l, sizeof(list) - l, "%s%u",
				      i ? "," : "", rank_of[i]);
	group = 16 + (uint32_t)((uint64_t)time(NULL) % 1000000) * 1024 + 1023;
	t0 = cs_lcore_now();
	for (uint32_t b = 0; b < buckets; b++) {
		uint32_t last = serial ? b : (uint32_t)buckets - 1;

		for (int i = 0; i < n; i++) {
			snprintf(req, sizeof(req),
				 "mx_post %u %u 0 %" PRIu64 " f32 sum 0 %u %s",
				 group, b + 1, bytes / 4, b + 1, list);
			if (cs_ctl_call(dirs[i], req, reply, sizeof(reply),
					10000)) {
				fprintf(stderr, "# %s: %s\n", names[i], reply);
				failed++;
			}
		}
		if (b != last)
			continue;
		/* wait for what was posted: one bucket, or all of them */
		for (uint32_t w = serial ? b : 0; w <= b; w++)
			for (int i = 0; i < n; i++) {
				snprintf(req, sizeof(req),
					 "mx_wait %u %u %lu nocheck", group,
					 w + 1, timeout);
				if (cs_ctl_call(dirs[i], req, reply,
						sizeof(reply),
						(int)timeout + 10000)) {
					fprintf(stderr, "# %s: %s\n", names[i],
						reply);
					failed++;
				}
			}
	}
	t1 = cs_lcore_now();
	/* then every element of every bucket, untimed */
	for (uint32_t b = 0; b < buckets; b++)
		for (int i = 0; i < n; i++) {
			snprintf(req, sizeof(req), "mx_wait %u %u %lu", group,
				 b + 1, timeout);
			if (cs_ctl_call(dirs[i], req, reply, sizeof(reply),
					(int)timeout + 10000) ||
			    cs_ctl_kv(reply, "wrong", &v)) {
				if (!failed++)
					fprintf(stderr, "# %s: %s\n", names[i],
						reply);
			} else {
				wrong += (uint64_t)v;
			}
		}
	for (int i = 0; i < n; i++) {
		snprintf(req, sizeof(req), "mx_forget %u", group);
		(void)cs_ctl_call(dirs[i], req, reply, sizeof(reply), 10000);
	}
	printf("buckets %s mode=%s sidecars=%d buckets=%lu bytes=%" PRIu64
	       " time_us=%.1f per_bucket_us=%.1f failed=%" PRIu64
	       " wrong=%" PRIu64 "\n",
	       failed || wrong ? "FAILED" : "ok",
	       serial ? "serial" : "overlapped", n, buckets, bytes,
	       (t1 - t0) / 1e3, (t1 - t0) / 1e3 / buckets, failed, wrong);
	return failed || wrong ? 1 : 0;
}

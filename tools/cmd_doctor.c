/* SPDX-License-Identifier: MIT */
/*
 * collstack doctor: gathers every sidecar's flight recorder (the last
 * operations of each trainer group with which local ranks posted and
 * completed them; observe/flight.h) and says, for each group, which
 * operation is stuck and who holds it up, as PyTorch's Flight Recorder
 * analysis does:
 *
 *   group 'train' (4 ranks): op 17 (allreduce) pending for 3.2 s
 *     posted by ranks {0,1,3}
 *     missing ranks: {2}
 *       rank 2: node csn1, local rank 0: joined, did not post op 17
 *
 * A rank no node knows "did not join". When every rank posted and the
 * operation is still not done it names the nodes where it is not done
 * (waiting on the network: `collstack trace` shows the frames).
 *
 * Exit status: 0 nothing stuck, 3 something stuck, 1 a sidecar did not
 * answer, 2 bad arguments.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <time.h>

#include "cmds.h"
#include "obs_fetch.h"
#include "observe/flight.h"
#include "observe/tjson.h"

#define CMD "collstack doctor"
#define TIMEOUT_MS 5000
#define MAX_RANKS 4096
#define MAX_GROUPS 64

struct nop { /* one node's record of one op */
	uint64_t seq, posted, done, age_ns;
	unsigned kind;
	int status;
	long long dur;
};

struct ngroup { /* one node's record of one group */
	int node;
	char name[CS_FL_NAME];
	unsigned size, local;
	int ranks[CS_FL_LOCAL];
	struct nop ops[CS_FL_OPS];
	unsigned nops;
};

static struct ngroup recs[CS_OBS_CLI_NODES * CS_FL_GROUPS];
static unsigned nrecs;
static uint64_t min_age_ns = 1000000000ull; /* --min-age */

static void usage(FILE *out)
{
	fprintf(out,
		"usage: collstack doctor [--min-age SECONDS] [--cluster FILE]"
		"\n       collstack doctor --from DIR [--trigger ID] "
		"[--min-age SECONDS]\n\n"
		"Gathers each sidecar's flight recorder (the last %d "
		"operations of each\ntrainer group) and names, per group, the "
		"oldest operation not done\neverywhere and the ranks that did "
		"not post it (\"missing ranks: {...}\")\nor the nodes where it "
		"waits on the network. An operation pending for less\nthan "
		"--min-age (default 1 s) is in flight, not stuck.\n"
		"--from reads the records the sidecars wrote on their own "
		"(flight.dir:\nTRIGGER.NODE.flight, when an operation passed "
		"flight.auto_after or a\npeer was lost) instead: those of "
		"--trigger, default the newest.\n",
		CS_FL_OPS);
}

static int parse(int node, char *text)
{
	struct ngroup *g = NULL;
	char *save = NULL;

	for (char *l = strtok_r(text, "\n", &save); l;
	     l = strtok_r(NULL, "\n", &save)) {
		if (!strncmp(l, "group ", 6)) {
			char ranks[1024] = "", *rs = NULL;
			unsigned gid, k = 0;

			if (nrecs == CS_OBS_CLI_NODES * CS_FL_GROUPS)
				return -ENOSPC;
			g = &recs[nrecs];
			memset(g, 0, sizeof(*g));
			if (sscanf(l, "group %u %63s %u %u %1023s", &gid,
				   g->name, &g->size, &g->local, ranks) < 4)
				return -EPROTO;
			for (char *t = strtok_r(ranks, ",", &rs);
			     t && k < CS_FL_LOCAL; t = strtok_r(NULL, ",", &rs))
				g->ranks[k++] = atoi(t);
			g->node = node;
			nrecs++;
		} else if (!strncmp(l, "op ", 3) && g && g->nops < CS_FL_OPS) {
			struct nop *o = &g->ops[g->nops];
			unsigned gid;

			if (sscanf(l,
				   "op %u %" SCNu64 " %u %*u %" SCNx64
				   " %" SCNx64 " %d %" SCNu64 " %lld",
				   &gid, &o->seq, &o->kind, &o->posted,
				   &o->done, &o->status, &o->age_ns,
				   &o->dur) != 8)
				return -EPROTO;
			g->nops++;
		}
	}
	return 0;
}

static const struct nop *find_op(const struct ngroup *g, uint64_t seq)
{
	for (unsigned k = 0; k < g->nops; k++)
		if (g->ops[k].seq == seq)
			return &g->ops[k];
	return NULL;
}

static void print_set(const char *what, const bool *in, unsigned n)
{
	bool first = true;

	printf("%s{", what);
	for (unsigned r = 0; r < n; r++)
		if (in[r]) {
			printf("%s%u", first ? "" : ",", r);
			first = false;
		}
	printf("}\n");
}

/* Diagnose every node's records of group @name. Returns 1 when stuck. */
static int diagnose(const struct cs_obs_cluster *cl, const char *name)
{
	static bool posted[MAX_RANKS], known[MAX_RANKS];
	static int where[MAX_RANKS], lrank[MAX_RANKS];
	uint64_t stuck = UINT64_MAX, last_done = 0;
	unsigned size = 0, kind = 0;
	bool any_done = false;
	uint64_t age = 0;

	memset(known, 0, sizeof(known));
	for (unsigned i = 0; i < nrecs; i++) {
		const struct ngroup *g = &recs[i];
		uint64_t all =
			g->local >= 64 ? UINT64_MAX : (1ull << g->local) - 1;

		if (strcmp(g->name, name))
			continue;
		size = g->size < MAX_RANKS ? g->size : MAX_RANKS;
		for (unsigned l = 0; l < g->local && l < CS_FL_LOCAL; l++)
			if (g->ranks[l] >= 0 && g->ranks[l] < MAX_RANKS) {
				known[g->ranks[l]] = true;
				where[g->ranks[l]] = g->node;
				lrank[g->ranks[l]] = (int)l;
			}
		for (unsigned k = 0; k < g->nops; k++) {
			const struct nop *o = &g->ops[k];

			if ((o->done & all) == all && o->dur >= 0) {
				any_done = true;
				if (o->seq > last_done)
					last_done = o->seq;
			} else if (o->seq < stuck) {
				stuck = o->seq;
			}
		}
	}
	/* an op some node finished and another never recorded is stuck
	 * on the latter: the oldest such seq after the others' */
	for (unsigned i = 0; i < nrecs && any_done; i++) {
		const struct ngroup *g = &recs[i];

		if (strcmp(g->name, name))
			continue;
		for (uint64_t s = last_done;
		     s + 1 > 0 && s + CS_FL_OPS > last_done; s--) {
			if (find_op(g, s))
				break;
			if (s < stuck)
				stuck = s;
			if (!s)
				break;
		}
	}
	if (stuck == UINT64_MAX) {
		printf("group '%s' (%u ranks): nothing pending; last op done "
		       "everywhere: %" PRIu64 "\n",
		       name, size, last_done);
		return 0;
	}
	memset(posted, 0, sizeof(posted));
	for (unsigned i = 0; i < nrecs; i++) {
		const struct ngroup *g = &recs[i];
		const struct nop *o;

		if (strcmp(g->name, name) || !(o = find_op(g, stuck)))
			continue;
		kind = o->kind;
		if (o->age_ns > age)
			age = o->age_ns;
		for (unsigned l = 0; l < g->local && l < 64; l++)
			if (o->posted >> l & 1 && g->ranks[l] >= 0 &&
			    g->ranks[l] < MAX_RANKS)
				posted[g->ranks[l]] = true;
	}
	if (age < min_age_ns) {
		printf("group '%s' (%u ranks): op %" PRIu64 " in flight "
		       "(%.3f s), not stuck\n",
		       name, size, stuck, (double)age / 1e9);
		return 0;
	}
	printf("group '%s' (%u ranks): op %" PRIu64 " (%s) pending for %.1f "
	       "s\n",
	       name, size, stuck,
	       kind < 8 && cs_obs_op_kind[kind] ? cs_obs_op_kind[kind] : "?",
	       (double)age / 1e9);
	print_set("  posted by ranks ", posted, size);
	{
		bool missing[MAX_RANKS] = { 0 }, some = false;

		for (unsigned r = 0; r < size; r++)
			some |= missing[r] = !posted[r];
		if (some) {
			print_set("  missing ranks: ", missing, size);
			for (unsigned r = 0; r < size; r++) {
				if (!missing[r])
					continue;
				if (known[r])
					printf("    rank %u: node %s, local "
					       "rank %d: joined, did not post "
					       "op %" PRIu64 "\n",
					       r, cl->names[where[r]], lrank[r],
					       stuck);
				else
					printf("    rank %u: on no node: did "
					       "not join\n",
					       r);
			}
			return 1;
		}
	}
	printf("  every rank posted; not done on node(s):");
	for (unsigned i = 0; i < nrecs; i++) {
		const struct ngroup *g = &recs[i];
		const struct nop *o;

		if (!strcmp(g->name, name) && (o = find_op(g, stuck)) &&
		    o->dur < 0)
			printf(" %s", cl->names[g->node]);
	}
	printf(" (waiting on the network: see collstack trace)\n");
	return 1;
}

/* The records of one trigger in @dir: every TRIGGER.NODE.flight file.
 * Without @want, the trigger of the newest file. */
static int load_dir(const char *dir, const char *want,
		    struct cs_obs_cluster *cl)
{
	char trig[128] = "", path[1024];
	struct dirent *e;
	time_t newest = 0;
	DIR *dp = opendir(dir);

	if (!dp) {
		fprintf(stderr, "%s: %s: %s\n", CMD, dir, strerror(errno));
		return -errno;
	}
	if (want)
		snprintf(trig, sizeof(trig), "%s", want);
	while (!want && (e = readdir(dp))) {
		size_t n = strlen(e->d_name);
		const char *dot = strchr(e->d_name, '.');
		struct stat st;

		if (n < 8 || strcmp(e->d_name + n - 7, ".flight") || !dot ||
		    (size_t)(dot - e->d_name) >= sizeof(trig))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (stat(path, &st) || st.st_mtime < newest)
			continue;
		newest = st.st_mtime;
		snprintf(trig, sizeof(trig), "%.*s", (int)(dot - e->d_name),
			 e->d_name);
	}
	rewinddir(dp);
	cl->n = 0;
	while (trig[0] && (e = readdir(dp)) && cl->n < CS_OBS_CLI_NODES) {
		size_t tl = strlen(trig), n = strlen(e->d_name);
		char *text = NULL;
		size_t len = 0;
		FILE *f;
		int r;

		if (strncmp(e->d_name, trig, tl) || e->d_name[tl] != '.' ||
		    n < tl + 9 || strcmp(e->d_name + n - 7, ".flight") ||
		    n - tl - 8 >= sizeof(cl->names[0]))
			continue;
		snprintf(cl->names[cl->n], sizeof(cl->names[0]), "%.*s",
			 (int)(n - tl - 8), e->d_name + tl + 1);
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		f = fopen(path, "r");
		if (f) {
			text = calloc(1, 1 << 20);
			len = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
			fclose(f);
		}
		r = text ? parse(cl->n, text) : -errno;
		free(text);
		if (r) {
			printf("%s: %s\n", path, strerror(-r));
			continue;
		}
		printf("# %s: %zu bytes\n", path, len);
		cl->n++;
	}
	closedir(dp);
	if (!cl->n) {
		fprintf(stderr, "%s: no flight record%s%s in %s\n", CMD,
			trig[0] ? " of trigger " : "", trig, dir);
		return -ENOENT;
	}
	printf("# trigger %s: %d record(s)\n", trig, cl->n);
	return 0;
}

int cs_cmd_doctor(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "cluster", required_argument, NULL, 'c' },
		{ "min-age", required_argument, NULL, 'm' },
		{ "from", required_argument, NULL, 'f' },
		{ "trigger", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	static struct cs_obs_cluster cl;
	const char *env = cs_ctl_env(), *names[MAX_GROUPS], *from = NULL,
		   *trigger = NULL;
	double age;
	unsigned ngroups = 0;
	int o, ret = 0, stuck = 0;

	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'm':
			if (cs_obs_cli_num(CMD, "--min-age", optarg, 0, 1e6,
					   &age))
				return 2;
			min_age_ns = (uint64_t)(age * 1e9);
			break;
		case 'f':
			from = optarg;
			break;
		case 't':
			trigger = optarg;
			break;
		default:
			if ((o = cs_obs_cli_opt(o, &env, usage)) >= 0)
				return o;
		}
	}
	if (cs_obs_cli_rest(CMD, argc, argv, usage))
		return 2;
	nrecs = 0;
	if (trigger && !from) {
		fprintf(stderr, "%s: --trigger goes with --from\n", CMD);
		return 2;
	}
	if (from && load_dir(from, trigger, &cl))
		return 1;
	if (!from && cs_obs_cluster_load(CMD, env, &cl))
		return 1;
	for (int i = 0; !from && i < cl.n; i++) {
		char dir[512], line[CS_CTL_LINE], *body;
		size_t len;
		int r;

		cs_obs_node_dir(&cl, i, dir, sizeof(dir));
		r = cs_obs_fetch(dir, "flight", line, sizeof(line), &body, &len,
				 TIMEOUT_MS);
		if (!r)
			r = parse(i, body);
		free(body);
		if (r) {
			printf("%-10s no flight record: %s\n", cl.names[i],
			       strerror(-r));
			ret = 1;
		}
	}
	for (unsigned i = 0; i < nrecs; i++) {
		bool seen = false;

		for (unsigned k = 0; k < ngroups && !seen; k++)
			seen = !strcmp(names[k], recs[i].name);
		if (!seen && ngroups < MAX_GROUPS)
			names[ngroups++] = recs[i].name;
	}
	printf("# collstack doctor: %d sidecar(s), %u group(s)\n", cl.n,
	       ngroups);
	for (unsigned k = 0; k < ngroups; k++)
		stuck |= diagnose(&cl, names[k]);
	return ret ? ret : stuck ? 3 : 0;
}

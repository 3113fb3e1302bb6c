/* SPDX-License-Identifier: MIT */
/*
 * Strategies per parameter group against a real sidecar (mini_sidecar):
 * the registry and plug-in loader, config-file errors named by line, and
 * 4 trainer processes that switch groups' strategies at agreed steps
 * (asked by one rank each), with every result exact across the switches;
 * PS refused with its reason on every rank (mini_sidecar has no parameter
 * server); all-to-all taken at step 6; ranks at
 * different steps told so.
 *
 *   strategy_switch MINI_SIDECAR PLUGIN.so BAD_PLUGIN.so
 *
 * Exit 0 when every check held; each failure prints a line.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <collstack/strategy.h>

#define RANKS 4
#define STEPS 10
#define COUNT 1003 /* not a multiple of RANKS: rs-ag's tail path */

static int failures;
static const char *plugin, *bad_plugin;
static char dir[64], sock[128];

static void fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stdout, "FAIL: ");
	vfprintf(stdout, fmt, ap);
	fprintf(stdout, "\n");
	va_end(ap);
	failures++;
}

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond))                                                   \
			fail(__VA_ARGS__);                                     \
	} while (0)

static void registry_checks(void)
{
	static const struct cs_strategy_ops dup = {
		CS_STRATEGY_ABI, "allreduce", "", NULL, NULL, NULL
	};
	static const struct cs_strategy_ops old = { 0,	  "old", "",
						    NULL, NULL,	 NULL };
	const struct cs_strategy_ops *list[16], *o;
	char why[400];
	unsigned n;

	CHECK(cs_strategy_find("allreduce"), "built-in allreduce missing");
	CHECK(cs_strategy_find("rs-ag") && cs_strategy_find("local") &&
		      cs_strategy_find("ps") && cs_strategy_find("alltoall"),
	      "a built-in is missing");
	CHECK(!cs_strategy_find("nope"), "found a strategy never registered");
	n = cs_strategy_list(list, 16);
	CHECK(n == 5, "registry holds %u strategies, want 5 built-ins", n);
	CHECK(cs_strategy_register(&dup) == -EINVAL,
	      "a table without exchange registered");
	CHECK(cs_strategy_register(&old) == -EINVAL,
	      "a table of another ABI registered");
	CHECK(cs_strategy_load("/nonexistent/x.so", &o, why, sizeof(why)) ==
			      -ENOENT &&
		      strstr(why, "/nonexistent/x.so"),
	      "missing plug-in: %s", why);
	CHECK(cs_strategy_load(bad_plugin, &o, why, sizeof(why)) == -EINVAL &&
		      strstr(why, "ABI"),
	      "plug-in of another ABI: %s", why);
	CHECK(cs_strategy_load(plugin, &o, why, sizeof(why)) == 0 &&
		      !strcmp(o->name, "halves"),
	      "plug-in did not load: %s", why);
	CHECK(cs_strategy_load(plugin, &o, why, sizeof(why)) == 0 &&
		      cs_strategy_list(list, 16) == 6,
	      "the same plug-in loaded twice: %s", why);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (!f || fputs(text, f) < 0 || fclose(f)) {
		fail("cannot write %s", path);
		exit(1);
	}
}

/* Config files that must fail, each with a message naming its line. */
static void config_checks(struct cs_client *c, struct cs_group *g)
{
	static const struct {
		const char *text, *want;
		int ret;
	} bad[] = {
		{ "# ok\n\nstrategy dense allreduce\n", ":3: expected",
		  -EINVAL },
		{ "group dense\n", ":1: expected", -EINVAL },
		{ "group dense allreduce extra\n", ":1: expected", -EINVAL },
		{ "group dense nosuch\n",
		  ":1: parameter group 'dense': no "
		  "strategy 'nosuch'",
		  -ENOENT },
		{ "group a local\ngroup a local\n",
		  ":2: parameter group 'a' "
		  "exists",
		  -EEXIST },
		{ "plugin /nonexistent/p.so\n", ":1: plugin /nonexistent/p.so",
		  -ENOENT },
		{ "group emb ps\n",
		  ":1: strategy 'ps' for group 'emb': "
		  "this sidecar has no parameter server",
		  -ENOTSUP },
	};
	char path[192];

	snprintf(path, sizeof(path), "%s/bad.conf", dir);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct cs_strat_job *j;
		int ret;

		if (cs_strat_job_open(c, g, &j)) {
			fail("job open");
			return;
		}
		write_file(path, bad[i].text);
		ret = cs_strat_job_config(j, path);
		CHECK(ret == bad[i].ret &&
			      strstr(cs_strat_job_errmsg(j), path) &&
			      strstr(cs_strat_job_errmsg(j), bad[i].want),
		      "config %zu: ret %d (want %d): '%s' (want '%s')", i, ret,
		      bad[i].ret, cs_strat_job_errmsg(j), bad[i].want);
		cs_strat_job_close(j);
	}
	CHECK(cs_strat_job_open(c, g, NULL) == -EINVAL, "job open without out");
}

/* Rank r's gradient of group gi at step s; the sum over ranks is exact. */
static float grad_of(int r, unsigned gi, unsigned s, size_t i)
{
	return (float)((r + 1) * (int)(gi + 1) + (int)(i % 97) + (int)s);
}

static float sum_of(unsigned gi, unsigned s, size_t i)
{
	float t = 0;

	for (int r = 0; r < RANKS; r++)
		t += grad_of(r, gi, s, i);
	return t;
}

static int trainer(int rank)
{
	static const char *const names[] = { "dense", "emb", "halves", "mine" };
	struct cs_client *c;
	struct cs_group *g;
	struct cs_strat_job *j;
	struct cs_buf *b;
	char conf[192], text[512];
	float *x;
	int ret;

	if (cs_connect(sock, &c) ||
	    cs_group_join(c, "strat", rank, RANKS, rank, RANKS, &g) ||
	    cs_buf_alloc(c, 4 * COUNT * sizeof(float), &b)) {
		fail("rank %d: connect/join/alloc", rank);
		return 1;
	}
	if (rank == 0)
		config_checks(c, g);
	/* every rank loads the plug-in: a switch needs it everywhere */
	snprintf(conf, sizeof(conf), "%s/job.conf", dir);
	if (rank == 0) {
		snprintf(text, sizeof(text),
			 "# the test job\nplugin %s\n"
			 "group dense allreduce\ngroup emb allreduce   # emb\n"
			 "group halves halves\ngroup mine local\n",
			 plugin);
		write_file(conf, text);
	}
	x = cs_buf_ptr(b);
	/* the config is written by rank 0: wait for it through the group */
	{
		cs_req_t r;

		if (cs_barrier(g, &r) || cs_wait(c, r, -1)) {
			fail("rank %d: barrier", rank);
			return 1;
		}
	}
	if (cs_strat_job_open(c, g, &j) || cs_strat_job_config(j, conf)) {
		fail("rank %d: job: %s", rank, j ? cs_strat_job_errmsg(j) : "");
		return 1;
	}
	for (unsigned s = 0; s < STEPS; s++) {
		if (s == 3 && rank == 1)
			cs_strat_job_request(j, 1, "rs-ag");
		if (s == 3 && rank == 2)
			cs_strat_job_request(j, 0, "halves");
		if (s == 5 && rank == 0)
			cs_strat_job_request(j, 1, "ps");
		if (s == 6 && rank == 3)
			cs_strat_job_request(j, 0, "alltoall");
		if (s == 8 && rank == 3)
			cs_strat_job_request(j, 1, "allreduce");
		ret = cs_strat_job_step(j, s);
		if (s == 5)
			CHECK(ret == -ENOTSUP &&
				      strstr(cs_strat_job_errmsg(j),
					     "has no parameter server"),
			      "rank %d step 5: ps switch: %d '%s'", rank, ret,
			      cs_strat_job_errmsg(j));
		else
			CHECK(ret == 0, "rank %d step %u: %s", rank, s,
			      cs_strat_job_errmsg(j));
		CHECK(!strcmp(cs_strat_job_current(j, 0),
			      s >= 6   ? "alltoall"
			      : s >= 3 ? "halves"
				       : "allreduce") &&
			      !strcmp(cs_strat_job_current(j, 1),
				      s >= 3 && s < 8 ? "rs-ag" : "allreduce"),
		      "rank %d step %u: strategies %s, %s", rank, s,
		      cs_strat_job_current(j, 0), cs_strat_job_current(j, 1));
		for (unsigned gi = 0; gi < 4; gi++) {
			float *v = x + gi * COUNT;

			for (size_t i = 0; i < COUNT; i++)
				v[i] = grad_of(rank, gi, s, i);
			ret = cs_strat_job_exchange(j, gi, v, COUNT, CS_F32);
			CHECK(!ret, "rank %d step %u %s: %s", rank, s,
			      names[gi], cs_strat_job_errmsg(j));
			for (size_t i = 0; !ret && i < COUNT; i++) {
				float want = gi == 3 ? grad_of(rank, gi, s, i)
						     : sum_of(gi, s, i);

				if (v[i] != want) {
					fail("rank %d step %u %s (%s): [%zu] "
					     "= %g, want %g",
					     rank, s, names[gi],
					     cs_strat_job_current(j, gi), i,
					     v[i], want);
					break;
				}
			}
		}
	}
	/* rank 0 one step ahead: every rank is told */
	ret = cs_strat_job_step(j, rank == 0 ? STEPS + 1 : STEPS);
	CHECK(ret == CS_ERR_BAD_DESC &&
		      strstr(cs_strat_job_errmsg(j), "different steps"),
	      "rank %d: step mismatch not reported: %d '%s'", rank, ret,
	      cs_strat_job_errmsg(j));
	cs_strat_job_close(j);
	cs_buf_free(b);
	cs_group_leave(g);
	cs_disconnect(c);
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	pid_t sc, kids[RANKS];
	struct stat st;
	int status, rc = 0;

	if (argc != 4) {
		fprintf(stderr, "usage: strategy_switch MINI_SIDECAR PLUGIN.so "
				"BAD_PLUGIN.so\n");
		return 2;
	}
	plugin = argv[2];
	bad_plugin = argv[3];
	registry_checks();
	fflush(stdout); /* before fork: the children would print it again */
	snprintf(dir, sizeof(dir), "/tmp/cs_strat_XXXXXX");
	if (!mkdtemp(dir))
		return 1;
	snprintf(sock, sizeof(sock), "%s/cs.sock", dir);
	sc = fork();
	if (!sc) {
		execl(argv[1], argv[1], sock, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 1000 && stat(sock, &st); i++)
		usleep(10000);
	for (int r = 0; r < RANKS; r++) {
		kids[r] = fork();
		if (!kids[r]) {
			int krc;

			failures = 0;
			krc = trainer(r);
			fflush(stdout);
			_exit(krc);
		}
	}
	for (int r = 0; r < RANKS; r++) {
		if (waitpid(kids[r], &status, 0) < 0 || !WIFEXITED(status) ||
		    WEXITSTATUS(status))
			rc = 1;
	}
	kill(sc, SIGTERM);
	waitpid(sc, &status, 0);
	{
		char p[192];

		snprintf(p, sizeof(p), "%s/job.conf", dir);
		unlink(p);
		snprintf(p, sizeof(p), "%s/bad.conf", dir);
		unlink(p);
		rmdir(dir);
	}
	if (failures)
		rc = 1;
	printf("strategy_switch: %s (%d ranks, %d steps, switches at 3 and 8, "
	       "refusals at 5 and 6)\n",
	       rc ? "FAIL" : "ok", RANKS, STEPS);
	return rc;
}

/* SPDX-License-Identifier: MIT */
/*
 * collstack model fit | predict | check, and collstack plan.
 *
 * fit runs short operations at 4 nodes, on the simulator (this same
 * program's `sim` commands and the PS scenario, tests/ps/ps_scen) or on
 * the running cluster (`collstack run allreduce`), and fits the cost
 * model's constants (model/model.h) by least squares; check runs the
 * simulator at 8, 64 and 256 ranks and prints each prediction's error.
 * The runs are child processes: their output lines are the interface, as
 * for a user, and a run that fails is reported with its own line.
 */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cmds.h"
#include "model/cs_model_config.h"

#if CS_HAVE_MODEL
#include "collectives/reduce.h"
#include "model/model.h"

/* ---- child runs --------------------------------------------------------- */

static bool verbose;

/*
 * Run @argv (argv[0] a path), its stdout into @out; returns its exit
 * status, or -1 when it could not run.
 */
static int run_child(char *const argv[], char *out, size_t outlen)
{
	int fd[2], st;
	size_t got = 0;
	ssize_t r;
	pid_t pid;

	if (verbose) {
		fprintf(stderr, "  $");
		for (int i = 0; argv[i]; i++)
			fprintf(stderr, " %s", argv[i]);
		fprintf(stderr, "\n");
	}
	if (pipe(fd))
		return -1;
	fflush(stdout);
	pid = fork();
	if (pid < 0) {
		close(fd[0]);
		close(fd[1]);
		return -1;
	}
	if (!pid) {
		dup2(fd[1], 1);
		close(fd[0]);
		close(fd[1]);
		execv(argv[0], argv);
		fprintf(stderr, "collstack model: cannot run %s: %s\n", argv[0],
			strerror(errno));
		_exit(127);
	}
	close(fd[1]);
	while ((r = read(fd[0], out + got, outlen - 1 - got)) > 0) {
		got += (size_t)r;
		if (got == outlen - 1) { /* drain the rest */
			char sink[4096];

			while (read(fd[0], sink, sizeof(sink)) > 0)
				;
			break;
		}
	}
	out[got] = 0;
	close(fd[0]);
	if (waitpid(pid, &st, 0) < 0)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char self_path[PATH_MAX];

static int find_self(void)
{
	ssize_t n =
		readlink("/proc/self/exe", self_path, sizeof(self_path) - 1);

	if (n <= 0)
		return -1;
	self_path[n] = 0;
	return 0;
}

/* tests/ps/ps_scen: $CS_PS_SCEN, or beside the build's tools/ folder. */
static const char *ps_scen_path(void)
{
	static char p[PATH_MAX + 32];
	const char *env = getenv("CS_PS_SCEN");
	char dir[PATH_MAX];

	if (env && *env)
		return env;
	snprintf(dir, sizeof(dir), "%s", self_path);
	snprintf(p, sizeof(p), "%s/../tests/ps/ps_scen", dirname(dir));
	return access(p, X_OK) ? NULL : p;
}

/* The number after "key=" in @s. */
static int field(const char *s, const char *key, double *out)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), " %s=", key);
	p = strstr(s, pat);
	if (!p)
		return -1;
	*out = strtod(p + strlen(pat), NULL);
	return 0;
}

/*
 * One simulator run: `collstack sim ARGS...`, its "time_us" in ns.
 * @what names it in errors.
 */
static int sim_time(const char *const args[], double *ns)
{
	char *argv[40], out[4096];
	int n = 0, st;
	double us;

	argv[n++] = self_path;
	argv[n++] = (char *)"sim";
	for (int i = 0; args[i] && n < 38; i++)
		argv[n++] = (char *)args[i];
	argv[n] = NULL;
	st = run_child(argv, out, sizeof(out));
	if (st || !strstr(out, " ok ") || field(out, "time_us", &us)) {
		fprintf(stderr,
			"collstack model: sim %s %s failed (exit %d): %s",
			args[0], args[1] ? args[1] : "", st,
			out[0] ? out : "no output\n");
		return -1;
	}
	*ns = us * 1000;
	return 0;
}

static void fmt_size(uint64_t b, char *s, size_t n)
{
	snprintf(s, n, "%llu", (unsigned long long)b);
}

/* sim allreduce at @n ranks, @bytes; extra args (NULL-terminated) */
static int sim_ar(const char *kind, uint32_t n, uint64_t bytes, const char *e1,
		  const char *e2, const char *e3, const char *e4, double *ns)
{
	char r[16], b[32];
	const char *a[16] = { kind, "--ranks", r, "--bytes", b, "--no-data" };
	int i = 6;

	snprintf(r, sizeof(r), "%u", n);
	fmt_size(bytes, b, sizeof(b));
	for (const char *const *e = (const char *const[]){ e1, e2, e3, e4 };
	     i < 10 && *e; e++)
		a[i++] = *e;
	a[i] = NULL;
	return sim_time(a, ns);
}

static int sim_a2a(uint32_t nodes, uint32_t rpn, uint64_t bytes,
		   const char *algo, double *ns)
{
	char m[16], l[16], b[32];
	const char *a[] = { "alltoall", "--nodes",  m,	 "--ranks-per-node",
			    l,		"--bytes",  b,	 "--algo",
			    algo,	"--nodata", NULL };

	snprintf(m, sizeof(m), "%u", nodes);
	snprintf(l, sizeof(l), "%u", rpn);
	fmt_size(bytes, b, sizeof(b));
	return sim_time(a, ns);
}

/* The PS scenario's settings for the fit and the check. */
#define PS_ROWS "100000"
#define PS_DIM 16
#define PS_KPP 64
#define PS_ITERS 10

/* PS scenario: W workers, K servers, sync; ns per iteration */
static int ps_run(const char *scen, uint32_t w, uint32_t k, uint32_t keys,
		  double *ns)
{
	char ws[16], ks[16], dim[16], kpp[16], it[16], out[4096];
	char *argv[] = { (char *)scen, "--workers",
			 ws,	       "--servers",
			 ks,	       "--rows",
			 PS_ROWS,      "--dim",
			 dim,	       "--keys-per-push",
			 kpp,	       "--iters",
			 it,	       "--mode",
			 "sync",       "--opt",
			 "sgd",	       "--loss",
			 "0",	       "--dup",
			 "0",	       NULL };
	double ms;
	int st;

	snprintf(ws, sizeof(ws), "%u", w);
	snprintf(ks, sizeof(ks), "%u", k);
	snprintf(dim, sizeof(dim), "%d", PS_DIM);
	snprintf(kpp, sizeof(kpp), "%u", keys);
	snprintf(it, sizeof(it), "%d", PS_ITERS);
	st = run_child(argv, out, sizeof(out));
	if (st || strncmp(out, "ps ok", 5) || field(out, "virt_ms", &ms)) {
		fprintf(stderr, "collstack model: %s failed (exit %d): %s",
			scen, st, out[0] ? out : "no output\n");
		return -1;
	}
	*ns = ms * 1e6 / PS_ITERS;
	return 0;
}

/* Bytes a PS worker pushes per iteration in the scenario (f32 rows). */
static uint64_t ps_bytes(void)
{
	return (uint64_t)PS_KPP * PS_DIM * 4;
}

/* ---- fit ------------------------------------------------------------------
 */

#define FIT_RANKS 4

static void host_rates(struct cs_model *m);

static int fit_step(const char *what, int ret)
{
	if (ret)
		fprintf(stderr, "collstack model fit: %s: %s\n", what,
			ret == -ERANGE ? "the runs give a non-physical value"
				       : "the runs do not determine it");
	return ret;
}

static int fit_sim(struct cs_model *m, const char *ps_scen)
{
	static const uint64_t big[] = { 4u << 20, 16u << 20 };
	static const uint32_t mtus[] = { 9000, 1500 };
	static const uint64_t small[] = { 32u << 10, 48u << 10, 64u << 10 };
	static const uint64_t tiny[] = { 4u << 10, 8u << 10, 16u << 10 };
	static const uint64_t stall[] = { 256u << 10, 512u << 10 };
	static const uint64_t a2a[] = { 16u << 10, 64u << 10, 256u << 10 };
	struct cs_model_run r[8];
	char mtu[16], ch[16];
	double ns, ns2;
	size_t k = 0;

	snprintf(m->source, sizeof(m->source), "sim");
	m->fit_nodes = FIT_RANKS;
	fprintf(stderr, "fit: beta, frame cost (ring, %u ranks, 2 MTUs)\n",
		FIT_RANKS);
	for (size_t i = 0; i < 2; i++)
		for (size_t j = 0; j < 2; j++) {
			snprintf(mtu, sizeof(mtu), "%u", mtus[j]);
			if (sim_ar("allreduce", FIT_RANKS, big[i], "--mtu", mtu,
				   NULL, NULL, &ns))
				return -1;
			r[k++] = (struct cs_model_run){
				.ranks = FIT_RANKS,
				.bytes = big[i],
				.mtu_payload = mtus[j] - 20 - 8 - 76,
				.ns = ns
			};
		}
	if (fit_step("beta", cs_model_fit_beta(m, r, k)))
		return -1;

	fprintf(stderr, "fit: alpha (ring steps, %u ranks, small)\n",
		FIT_RANKS);
	for (k = 0; k < 3; k++) {
		if (sim_ar("allreduce", FIT_RANKS, small[k], NULL, NULL, NULL,
			   NULL, &ns))
			return -1;
		r[k] = (struct cs_model_run){ .ranks = FIT_RANKS,
					      .bytes = small[k],
					      .ns = ns };
	}
	if (fit_step("alpha", cs_model_fit_alpha(m, r, k)))
		return -1;

	fprintf(stderr, "fit: direct exchange (%u ranks, <= %llu bytes)\n",
		FIT_RANKS, (unsigned long long)m->direct_max);
	k = 0;
	for (size_t i = 0; i < 3; i++) {
		if (tiny[i] > m->direct_max)
			continue;
		if (sim_ar("allreduce", FIT_RANKS, tiny[i], NULL, NULL, NULL,
			   NULL, &ns))
			return -1;
		r[k++] = (struct cs_model_run){ .ranks = FIT_RANKS,
						.bytes = tiny[i],
						.ns = ns };
	}
	m->direct_alpha_ns = m->alpha_ns;
	if (k && fit_step("direct", cs_model_fit_direct(m, r, k)))
		return -1;

	fprintf(stderr, "fit: ACK turn-around (window 1, one-frame chunks)\n");
	snprintf(ch, sizeof(ch), "%u", m->mtu_payload);
	for (k = 0; k < 2; k++) {
		if (sim_ar("allreduce", FIT_RANKS, stall[k], "--window", "1",
			   "--chunk", ch, &ns))
			return -1;
		r[k] = (struct cs_model_run){ .ranks = FIT_RANKS,
					      .bytes = stall[k],
					      .window = 1,
					      .chunk = m->mtu_payload,
					      .ns = ns };
	}
	if (fit_step("ACK turn-around", cs_model_fit_ack(m, r, k)))
		return -1;

	/*
	 * The simulator charges no time for reductions and copies (an
	 * all-to-all's staging, a reduce-scatter's sums): the difference of
	 * a reduce-scatter and an all-gather shows it. A node does spend
	 * it, so the model takes this host's kernels (two-level allreduce).
	 */
	fprintf(stderr, "fit: reduction (reduce-scatter vs all-gather, and "
			"this host's kernels)\n");
	if (sim_ar("reduce-scatter", FIT_RANKS, 16u << 20, NULL, NULL, NULL,
		   NULL, &ns) ||
	    sim_ar("all-gather", FIT_RANKS, 16u << 20, NULL, NULL, NULL, NULL,
		   &ns2))
		return -1;
	fprintf(stderr,
		"fit:   simulator: %.5f ns per byte reduced (none "
		"charged); host kernels:",
		(ns - ns2) / ((FIT_RANKS - 1.0) / FIT_RANKS * (16u << 20)));
	host_rates(m);
	fprintf(stderr, " reduce %.4f ns/B, copy %.4f ns/B\n", m->reduce_ns,
		m->copy_ns);

	fprintf(stderr, "fit: all-to-all (4 nodes x 2, flat)\n");
	for (k = 0; k < 3; k++) {
		if (sim_a2a(4, 2, a2a[k], "flat", &ns))
			return -1;
		r[k] = (struct cs_model_run){ .ranks = 8,
					      .bytes = a2a[k],
					      .ns = ns };
	}
	if (fit_step("all-to-all", cs_model_fit_a2a(m, r, k)))
		return -1;

	if (!ps_scen) {
		fprintf(stderr, "fit: no PS scenario (tests/ps/ps_scen; set "
				"CS_PS_SCEN): the model has no PS constants\n");
		return 0;
	}
	fprintf(stderr,
		"fit: PS (scenario: 1 x 1 and 4 workers x 1/2/4 "
		"servers, %d and %d keys per push)\n",
		PS_KPP, 4 * PS_KPP);
	for (k = 0; k < 8; k++) {
		uint32_t w = k < 2 ? 1 : 4;
		uint32_t srv = k < 2 ? 1 : 1u << ((k - 2) / 2);
		uint32_t kpp = k % 2 ? 4 * PS_KPP : PS_KPP;

		if (ps_run(ps_scen, w, srv, kpp, &ns))
			return -1;
		r[k] = (struct cs_model_run){ .ranks = w,
					      .servers = srv,
					      .bytes = (uint64_t)kpp * PS_DIM *
						       4,
					      .ns = ns };
	}
	return fit_step("PS", cs_model_fit_ps(m, r, k));
}

/* Host reduction and copy rates: what a node spends per byte. */
static void host_rates(struct cs_model *m)
{
	const size_t n = 4u << 20; /* floats: 16 MiB */
	cs_reduce_fn fn = cs_reduce_get(CS_F32, CS_SUM);
	float *a = calloc(n, sizeof(float)), *b = calloc(n, sizeof(float));
	struct timespec t0, t1;
	double best_r = INFINITY, best_c = INFINITY;

	if (!a || !b || !fn)
		goto out;
	for (int it = 0; it < 5; it++) {
		clock_gettime(CLOCK_MONOTONIC, &t0);
		fn(a, a, b, n);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		best_r = fmin(best_r, (t1.tv_sec - t0.tv_sec) * 1e9 +
					      (t1.tv_nsec - t0.tv_nsec));
		clock_gettime(CLOCK_MONOTONIC, &t0);
		memcpy(b, a, n * sizeof(float));
		clock_gettime(CLOCK_MONOTONIC, &t1);
		best_c = fmin(best_c, (t1.tv_sec - t0.tv_sec) * 1e9 +
					      (t1.tv_nsec - t0.tv_nsec));
	}
	m->reduce_ns = best_r / (n * sizeof(float));
	m->copy_ns = best_c / (n * sizeof(float));
out:
	free(a);
	free(b);
}

/*
 * On the running cluster: `collstack run allreduce` over a range of sizes
 * (its rows: size count type op time_us ...); alpha, beta and the direct
 * exchange's fixed cost by cs_model_fit_cluster(); reduce and copy rates
 * from this host's kernels.
 */
static int fit_cluster(struct cs_model *m, const char *iters)
{
	char *argv[] = { self_path, "run", "allreduce", "-b",	       "4K",
			 "-e",	    "16M", "--iters",	(char *)iters, NULL };
	static char out[1 << 16];
	struct cs_model_run r[64], clean[64];
	bool lossy[64];
	unsigned ranks = 0;
	char *line, *save;
	size_t k = 0, kc = 0, ring = 0;
	int st;

	snprintf(m->source, sizeof(m->source), "cluster");
	st = run_child(argv, out, sizeof(out));
	if (st) {
		fprintf(stderr,
			"collstack model fit --cluster: 'collstack run "
			"allreduce' failed (exit %d); is a cluster up "
			"(scripts/cluster.sh up 4, CS_CLUSTER_ENV)?\n%s",
			st, out);
		return -1;
	}
	/* a row followed by "#   N retransmissions over I iterations"
	 * was slowed by losses and timeouts: left out when enough clean
	 * rows remain (a loaded machine's timeouts are not its alpha) */
	for (line = strtok_r(out, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		unsigned long long size, count, retx;
		char type[16], op[16];
		double us;

		if (sscanf(line, "# collstack run allreduce: %u ranks",
			   &ranks) == 1)
			continue;
		if (sscanf(line, "#   %llu retransmissions", &retx) == 1 && k &&
		    retx)
			lossy[k - 1] = true;
		if (line[0] == '#')
			continue;
		if (sscanf(line, "%llu %llu %15s %15s %lf", &size, &count, type,
			   op, &us) != 5 ||
		    k == 64 || ranks < 2)
			continue;
		lossy[k] = false;
		r[k++] = (struct cs_model_run){ .ranks = ranks,
						.bytes = size,
						.ns = us * 1000 };
	}
	for (size_t i = 0; i < k; i++)
		if (!lossy[i]) {
			clean[kc++] = r[i];
			ring += r[i].bytes > m->direct_max;
		}
	m->fit_nodes = ranks;
	fprintf(stderr,
		"fit: %zu sizes from 'collstack run allreduce' on "
		"%u sidecars, %zu without retransmissions%s\n",
		k, ranks, kc,
		ring >= 2 ? " (fitted on those)" : " (too few: fitted on all)");
	if (ring >= 2) {
		memcpy(r, clean, kc * sizeof(r[0]));
		k = kc;
	}
	if (fit_step("alpha, beta", cs_model_fit_cluster(m, r, k)))
		return -1;
	host_rates(m);
	return 0;
}

static void fit_usage(FILE *out)
{
	fprintf(out,
		"usage: collstack model fit [--sim | --cluster] [-o FILE] "
		"[--iters I] [--verbose]\n"
		"  --sim       short runs on the simulator, 4 nodes (default)\n"
		"  --cluster   collstack run allreduce on the running cluster\n"
		"              (scripts/cluster.sh, CS_CLUSTER_ENV); all-to-all\n"
		"              and PS are not carried there yet: not fitted\n"
		"  -o FILE     the model file (default: standard output)\n"
		"  --iters I   iterations per size on the cluster (5)\n");
}

static int cmd_fit(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "sim", no_argument, NULL, 's' },
		{ "cluster", no_argument, NULL, 'c' },
		{ "output", required_argument, NULL, 'o' },
		{ "iters", required_argument, NULL, 'i' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *outp = NULL, *iters = "5";
	bool cluster = false;
	unsigned long it;
	struct cs_model m;
	FILE *f = stdout;
	int o, ret;

	optind = 1;
	while ((o = getopt_long(argc, argv, "o:hv", opts, NULL)) != -1) {
		switch (o) {
		case 's':
			cluster = false;
			break;
		case 'c':
			cluster = true;
			break;
		case 'o':
			outp = optarg;
			break;
		case 'i':
			if (cs_parse_whole(optarg, 1, 10000, &it)) {
				fprintf(stderr, "model fit: bad --iters '%s'\n",
					optarg);
				return 2;
			}
			iters = optarg;
			break;
		case 'v':
			verbose = true;
			break;
		case 'h':
			fit_usage(stdout);
			return 0;
		default:
			fit_usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		fit_usage(stderr);
		return 2;
	}
	if (cs_model_defaults(&m))
		return 1;
	ret = cluster ? fit_cluster(&m, iters) : fit_sim(&m, ps_scen_path());
	if (ret) {
		fprintf(stderr, "collstack model fit: failed\n");
		return 1;
	}
	if (outp) {
		f = fopen(outp, "w");
		if (!f) {
			fprintf(stderr, "collstack model fit: %s: %s\n", outp,
				strerror(errno));
			return 1;
		}
	}
	ret = cs_model_save(&m, f);
	if (outp && fclose(f))
		ret = -EIO;
	if (ret) {
		fprintf(stderr, "collstack model fit: cannot write %s\n",
			outp ? outp : "standard output");
		return 1;
	}
	fprintf(stderr,
		"fit: alpha %.0f ns, direct %.0f ns, beta %.5f ns/B (%.1f Gb/s), "
		"frame %.1f ns, ACK turn %.0f ns, incast %.3f, all-to-all "
		"%.0f ns, reduce %.4f ns/B, PS round %.0f ns + tail %.0f ns + %.5f ns/B%s%s\n",
		m.alpha_ns, m.direct_alpha_ns, m.beta_ns,
		m.beta_ns > 0 ? 8 / m.beta_ns : 0, m.frame_ns, m.ack_turn_ns,
		m.incast, m.a2a_alpha_ns, m.reduce_ns, m.ps_round_ns,
		m.ps_tail_ns, m.ps_beta_ns, outp ? " -> " : "",
		outp ? outp : "");
	return 0;
}

/* ---- predict --------------------------------------------------------------
 */

static int load_model(const char *path, struct cs_model *m)
{
	char err[400];
	int ret = cs_model_load(path, m, err, sizeof(err));

	if (ret)
		fprintf(stderr, "collstack model: %s\n", err);
	return ret;
}

static int parse_u32(const char *opt, const char *s, uint32_t max,
		     uint32_t *out)
{
	unsigned long v;

	if (cs_parse_whole(s, 1, max, &v)) {
		fprintf(stderr,
			"collstack model: %s: '%s' is not a whole "
			"number in 1..%u\n",
			opt, s, max);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

static void predict_usage(FILE *out)
{
	fprintf(out,
		"usage: collstack model predict [-m MODEL.json] --ranks N "
		"[--ranks-per-node L]\n"
		"          --op OP --bytes S [--servers K]\n"
		"  OP: allreduce (the engine's choice: direct or ring; "
		"two-level when L > 1),\n"
		"      allreduce-ring, allreduce-direct, allreduce-two-level,\n"
		"      alltoall (cs_a2a_choose()), alltoall-flat, "
		"alltoall-two-level,\n"
		"      ps (a sync push + pull of S bytes per worker, K "
		"shards: default N/L)\n"
		"  S: allreduce: the buffer; alltoall: a rank's send buffer\n"
		"  MODEL.json: default model.json (collstack model fit -o "
		"model.json)\n");
}

static int cmd_predict(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "ranks", required_argument, NULL, 'n' },
		{ "ranks-per-node", required_argument, NULL, 'l' },
		{ "op", required_argument, NULL, 'o' },
		{ "bytes", required_argument, NULL, 'b' },
		{ "servers", required_argument, NULL, 'k' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct cs_model_case c = { .op = CS_MODEL_OP_COUNT, .rpn = 1 };
	const char *mp = "model.json", *algo;
	unsigned long long b;
	bool have_bytes = false;
	struct cs_model m;
	char why[300];
	double ns;
	int o, ret;

	optind = 1;
	while ((o = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
		switch (o) {
		case 'm':
			mp = optarg;
			break;
		case 'n':
			if (parse_u32("--ranks", optarg, 1u << 20, &c.ranks))
				return 2;
			break;
		case 'l':
			if (parse_u32("--ranks-per-node", optarg, 1024, &c.rpn))
				return 2;
			break;
		case 'k':
			if (parse_u32("--servers", optarg, 1u << 20,
				      &c.servers))
				return 2;
			break;
		case 'o':
			if (cs_model_op_parse(optarg, &c.op)) {
				fprintf(stderr,
					"collstack model: unknown --op "
					"'%s'\n",
					optarg);
				predict_usage(stderr);
				return 2;
			}
			break;
		case 'b':
			if (cs_sim_parse_size(optarg, &b)) {
				fprintf(stderr,
					"collstack model: bad --bytes "
					"'%s'\n",
					optarg);
				return 2;
			}
			c.bytes = b;
			have_bytes = true;
			break;
		case 'h':
			predict_usage(stdout);
			return 0;
		default:
			predict_usage(stderr);
			return 2;
		}
	}
	if (optind != argc || !c.ranks || !have_bytes ||
	    c.op == CS_MODEL_OP_COUNT) {
		fprintf(stderr, "collstack model predict: --ranks, --op and "
				"--bytes are needed\n");
		predict_usage(stderr);
		return 2;
	}
	if (c.ranks % c.rpn) {
		fprintf(stderr,
			"collstack model predict: --ranks-per-node %u "
			"does not divide --ranks %u\n",
			c.rpn, c.ranks);
		return 2;
	}
	if (load_model(mp, &m))
		return 1;
	ret = cs_model_predict(&m, &c, &ns, &algo, why, sizeof(why));
	if (ret) {
		fprintf(stderr, "collstack model predict: %s\n", why);
		return 1;
	}
	printf("predict %s ranks=%u ranks_per_node=%u bytes=%llu algo=%s "
	       "time_us=%.3f model=%s(%u nodes)\n",
	       cs_model_op_name(c.op), c.ranks, c.rpn,
	       (unsigned long long)c.bytes, algo, ns / 1000, m.source,
	       m.fit_nodes);
	return 0;
}

/* ---- check ----------------------------------------------------------------
 */

struct check_stats {
	unsigned cases, failed_runs, over;
	double max_err, max_err_big;
	double tol;
};

static void check_line(struct check_stats *s, const char *op, uint32_t n,
		       uint32_t rpn, uint64_t bytes, const char *algo,
		       double sim_ns, double model_ns)
{
	double err = (model_ns - sim_ns) / sim_ns * 100;

	printf("check %-9s ranks=%-3u rpn=%u bytes=%-8llu algo=%-9s "
	       "sim_us=%-9.2f model_us=%-9.2f error=%+.1f%%\n",
	       op, n, rpn, (unsigned long long)bytes, algo, sim_ns / 1000,
	       model_ns / 1000, err);
	fflush(stdout);
	s->cases++;
	s->max_err = fmax(s->max_err, fabs(err));
	if (n >= 64) {
		s->max_err_big = fmax(s->max_err_big, fabs(err));
		if (fabs(err) > s->tol)
			s->over++;
	}
}

static void check_fail(struct check_stats *s, const char *op, uint32_t n)
{
	printf("check %-9s ranks=%-3u FAILED: the simulator run failed "
	       "(see above)\n",
	       op, n);
	s->failed_runs++;
}

static void check_usage(FILE *out)
{
	fprintf(out,
		"usage: collstack model check [-m MODEL.json] [--quick] "
		"[--tolerance PCT]\n"
		"Runs the simulator at 8, 64 and 256 ranks (allreduce, "
		"all-to-all, the PS\nscenario) and prints one line per case "
		"with the prediction's error.\n"
		"  --quick        8 and 64 ranks, small sizes (the test "
		"suite's run)\n"
		"  --big          also all-to-all 1 MiB at 256 ranks (about "
		"30 s, 1 GB)\n"
		"  --tolerance P  exit 1 when a case at 64+ ranks is off by "
		"more (15)\n");
}

static int cmd_check(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "quick", no_argument, NULL, 'q' },
		{ "big", no_argument, NULL, 'B' },
		{ "tolerance", required_argument, NULL, 't' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	static const uint32_t ar_n[] = { 8, 64, 256 };
	static const uint64_t ar_b[] = { 4u << 10, 64u << 10, 1u << 20,
					 16u << 20 };
	static const uint32_t a2a_nodes[] = { 4, 8, 32 },
			      a2a_rpn[] = { 2, 8, 8 };
	static const uint64_t a2a_b[] = { 16u << 10, 64u << 10, 1u << 20 };
	static const uint32_t ps_w[] = { 8, 64, 256 };
	struct check_stats st = { .tol = 15 };
	const char *mp = "model.json", *algo, *scen;
	bool quick = false, big = false;
	struct cs_model m;
	char *end;
	int o;

	optind = 1;
	while ((o = getopt_long(argc, argv, "m:hv", opts, NULL)) != -1) {
		switch (o) {
		case 'm':
			mp = optarg;
			break;
		case 'q':
			quick = true;
			break;
		case 'B':
			big = true;
			break;
		case 't':
			st.tol = strtod(optarg, &end);
			if (*end || !(st.tol > 0)) {
				fprintf(stderr,
					"model check: bad --tolerance "
					"'%s'\n",
					optarg);
				return 2;
			}
			break;
		case 'v':
			verbose = true;
			break;
		case 'h':
			check_usage(stdout);
			return 0;
		default:
			check_usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		check_usage(stderr);
		return 2;
	}
	if (load_model(mp, &m))
		return 1;
	printf("# model check: %s, fitted on %u %s nodes; sim = collstack sim "
	       "(100 Gb/s, 1 us links), PS = tests/ps/ps_scen (sync)\n",
	       mp, m.fit_nodes, m.source);
	for (size_t i = 0; i < 3; i++) {
		if (quick && ar_n[i] > 64)
			continue;
		for (size_t j = 0; j < 4; j++) {
			struct cs_model_case c = { CS_MODEL_ALLREDUCE, ar_n[i],
						   1, ar_b[j], 0 };
			double sim, pred;

			if (quick && ar_b[j] > (1u << 20))
				continue;
			if (sim_ar("allreduce", ar_n[i], ar_b[j], NULL, NULL,
				   NULL, NULL, &sim)) {
				check_fail(&st, "allreduce", ar_n[i]);
				continue;
			}
			cs_model_predict(&m, &c, &pred, &algo, NULL, 0);
			check_line(&st, "allreduce", ar_n[i], 1, ar_b[j], algo,
				   sim, pred);
		}
	}
	for (size_t i = 0; i < 3; i++) {
		uint32_t n = a2a_nodes[i] * a2a_rpn[i];

		if (quick && n > 64)
			continue;
		for (size_t j = 0; j < 3; j++) {
			struct cs_model_case c = { CS_MODEL_ALLTOALL, n,
						   a2a_rpn[i], a2a_b[j], 0 };
			double sim, pred;
			char why[300];

			if ((quick || (n > 64 && !big)) &&
			    a2a_b[j] > (64u << 10))
				continue; /* 256 x 1 MiB: 24 s, 900 MB */
			if (cs_model_predict(&m, &c, &pred, &algo, why,
					     sizeof(why))) {
				printf("check alltoall ranks=%u: %s\n", n, why);
				st.failed_runs++;
				continue;
			}
			if (sim_a2a(a2a_nodes[i], a2a_rpn[i], a2a_b[j], algo,
				    &sim)) {
				check_fail(&st, "alltoall", n);
				continue;
			}
			check_line(&st, "alltoall", n, a2a_rpn[i], a2a_b[j],
				   algo, sim, pred);
		}
	}
	scen = ps_scen_path();
	for (size_t i = 0; i < 3; i++) {
		struct cs_model_case c = { CS_MODEL_PS, ps_w[i], 1, ps_bytes(),
					   4 };
		double sim, pred;
		char why[300];

		if (quick && ps_w[i] > 64)
			continue;
		if (!scen) {
			printf("check ps ranks=%u: skipped: no PS scenario "
			       "(tests/ps/ps_scen; set CS_PS_SCEN)\n",
			       ps_w[i]);
			st.failed_runs++;
			continue;
		}
		if (cs_model_predict(&m, &c, &pred, &algo, why, sizeof(why))) {
			printf("check ps ranks=%u: %s\n", ps_w[i], why);
			st.failed_runs++;
			continue;
		}
		if (ps_run(scen, ps_w[i], 4, PS_KPP, &sim)) {
			check_fail(&st, "ps", ps_w[i]);
			continue;
		}
		check_line(&st, "ps", ps_w[i], 1, ps_bytes(), "sync-4srv", sim,
			   pred);
	}
	printf("# %u cases, %u not run; largest error %.1f%%, at 64+ ranks "
	       "%.1f%%; %u at 64+ ranks beyond %.0f%%\n",
	       st.cases, st.failed_runs, st.max_err, st.max_err_big, st.over,
	       st.tol);
	return st.failed_runs || st.over ? 1 : 0;
}

/* ---- plan -----------------------------------------------------------------
 */

static void plan_usage(FILE *out)
{
	fprintf(out,
		"usage: collstack plan MODEL.json --ranks N [--ranks-per-node "
		"L] [-m COST.json] [-o STRATEGIES]\n"
		"MODEL.json describes the parameter groups (docs/model.md, "
		"examples/hybrid_model.json);\nCOST.json is the fitted cost "
		"model (default model.json: collstack model fit -o model.json);\n"
		"-o writes the picks as a strategies file (its config column: "
		"cs_strat_job_config()).\n");
}

int cs_cmd_plan(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "ranks", required_argument, NULL, 'n' },
		{ "ranks-per-node", required_argument, NULL, 'l' },
		{ "model", required_argument, NULL, 'm' },
		{ "output", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *mp = "model.json", *op = NULL;
	uint32_t ranks = 0, rpn = 0;
	struct cs_model m;
	struct cs_plan p;
	FILE *conf = NULL;
	char err[400];
	int o, ret;

	optind = 1;
	while ((o = getopt_long(argc, argv, "m:o:h", opts, NULL)) != -1) {
		switch (o) {
		case 'n':
			if (parse_u32("--ranks", optarg, 1u << 20, &ranks))
				return 2;
			break;
		case 'l':
			if (parse_u32("--ranks-per-node", optarg, 1024, &rpn))
				return 2;
			break;
		case 'm':
			mp = optarg;
			break;
		case 'o':
			op = optarg;
			break;
		case 'h':
			plan_usage(stdout);
			return 0;
		default:
			plan_usage(stderr);
			return 2;
		}
	}
	if (optind != argc - 1 || !ranks) {
		plan_usage(stderr);
		return 2;
	}
	if (load_model(mp, &m))
		return 1;
	ret = cs_plan_load(argv[optind], &p, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "collstack plan: %s\n",
			ret == -ENOMEM ? "out of memory" : err);
		return 1;
	}
	if (!rpn)
		rpn = p.rpn ? p.rpn : 1;
	if (ranks % rpn) {
		fprintf(stderr,
			"collstack plan: %u ranks per node do not "
			"divide %u ranks\n",
			rpn, ranks);
		cs_plan_free(&p);
		return 2;
	}
	if (op && !(conf = fopen(op, "w"))) {
		fprintf(stderr, "collstack plan: %s: %s\n", op,
			strerror(errno));
		cs_plan_free(&p);
		return 1;
	}
	ret = cs_plan_print(&m, &p, ranks, rpn, stdout, conf);
	cs_plan_free(&p);
	if (conf && (fclose(conf) || ret)) {
		if (!ret)
			fprintf(stderr, "collstack plan: %s: %s\n", op,
				strerror(errno));
		unlink(op);
		return 1;
	}
	return ret ? 1 : 0;
}

static void model_usage(FILE *out)
{
	fprintf(out,
		"usage: collstack model fit|predict|check [OPTIONS]\n"
		"  fit      measure the constants from short runs (4 nodes)\n"
		"  predict  time of one operation at N ranks\n"
		"  check    predictions against the simulator at 8/64/256 "
		"ranks\n"
		"'collstack model SUBCOMMAND --help' for its options; "
		"docs/model.md explains the model.\n");
}

int cs_cmd_model(int argc, char **argv)
{
	if (find_self()) {
		fprintf(stderr, "collstack model: cannot find this program "
				"(/proc/self/exe)\n");
		return 1;
	}
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		model_usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "fit"))
		return cmd_fit(argc - 1, argv + 1);
	if (!strcmp(argv[1], "predict"))
		return cmd_predict(argc - 1, argv + 1);
	if (!strcmp(argv[1], "check"))
		return cmd_check(argc - 1, argv + 1);
	fprintf(stderr, "collstack model: unknown subcommand '%s'\n", argv[1]);
	model_usage(stderr);
	return 2;
}

#else /* !CS_HAVE_MODEL */

int cs_cmd_model(int argc, char **argv)
{
	(void)argc, (void)argv;
	fprintf(stderr, "collstack model: built without jansson "
			"(libjansson-dev), which reads the model files\n");
	return 1;
}

int cs_cmd_plan(int argc, char **argv)
{
	return cs_cmd_model(argc, argv);
}

#endif

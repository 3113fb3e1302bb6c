// SPDX-License-Identifier: MIT
/*
 * `collstack bench -o ps`: parameter-server push, pull and push+pull of
 * sparse rows, and the dense case, through a running cluster's sidecars
 * (one PS job per line, cs_ps_job_run() in cmd_run_ps.c; the job itself
 * is sidecar/svc_ps.c). Each worker runs the warm-up steps, then the timed
 * steps back to back, each one its push and/or pull issued and waited
 * for; every pulled row and every server's shard is checked exactly
 * (collectives/ps/ps_pattern.h). Per line: time_us = the slowest worker's
 * timed seconds / steps, p50/p99 = the largest of the workers' own
 * per-step percentiles, rows_per_s = rows pushed + pulled by all workers
 * over the slowest worker's timed seconds, GB_per_s = rows_per_s * row
 * bytes. Dense: every key each step, busbw = bytes / time * 2(n-1)/n.
 * tools/mpi_bench.c -o ps prints the same line for Open MPI.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "sidecar/ctl.h"

static void usage(FILE *out)
{
	fprintf(out,
		"usage: collstack bench -o ps [--pattern push,pull,pushpull]\n"
		"       [--row-bytes 64,1024] [--keys-per-push P] [--rows N]\n"
		"       [--skew Z] [--mode sync|async|ssp:S] [-n ITERS]\n"
		"       [-w WARMUP] [--dense BYTES|0] [--dense-row-bytes B]\n"
		"       [--roles R] [--msg-max BYTES] [--budget BYTES]\n"
		"       [--timeout MS] [--cluster ENV]\n\n"
		"One line per pattern and row size, then the dense case\n"
		"(push+pull of every key of a BYTES table, default 1M; 0: none;\n"
		"--pattern none: the dense case only).\n"
		"Defaults: all three patterns, rows of 64 and 1024 bytes, 256\n"
		"keys per push over 100000 rows, uniform keys (Z 0), sync, 100\n"
		"timed steps after 5 warm-up steps, dense rows of 1024 bytes,\n"
		"PS messages up to 1 MiB (--msg-max: smaller ones; a message\n"
		"longer than a frame goes as several). --budget: each server\n"
		"keeps BYTES of its shard's rows in memory, the rest on the\n"
		"SSD tier (a file in the sidecars' ps.spill_dir; 0, the\n"
		"default: every row in memory).\n");
}

static int one(const char *env, const char *roles, const char *pattern,
	       unsigned row_bytes, unsigned kpp, unsigned rows,
	       const char *skew, const char *mode, unsigned iters,
	       unsigned warm, unsigned ms, bool dense, unsigned long msg,
	       unsigned long long budget)
{
	struct cs_ps_job_res r;
	char job[256];
	double t, rps, n;
	int ret;

	snprintf(job, sizeof(job),
		 "%u %u %u %u mode=%s pattern=%s warmup=%u skew=%s dense=%d",
		 iters, rows, row_bytes / 4, kpp, mode, pattern, warm, skew,
		 dense);
	if (msg) /* only when asked: older sidecars know no msg= */
		snprintf(job + strlen(job), sizeof(job) - strlen(job),
			 " msg=%lu", msg);
	if (budget)
		snprintf(job + strlen(job), sizeof(job) - strlen(job),
			 " budget=%llu", budget);
	ret = cs_ps_job_run(env, roles, job, ms, false, &r);
	if (ret)
		return ret;
	t = r.timed_secs / iters;
	rps = r.timed_secs > 0 ? r.timed_rows / r.timed_secs : 0;
	n = r.nodes;
	if (dense) {
		double bytes = (double)rows * row_bytes, alg = bytes / t / 1e9;

		printf("ps-bench stack=collstack pattern=dense bytes=%.0f "
		       "row_bytes=%u mode=%s nodes=%d roles=%s iters=%u "
		       "time_us=%.1f p50_us=%.1f p99_us=%.1f rows_per_s=%.0f "
		       "algbw_GBps=%.3f busbw_GBps=%.3f wrong=0 "
		       "rows_checked=%.0f worker_retx=%.0f push_early=%.0f "
		       "flow_bad=%.0f send_err=%.0f pull_busy=%.0f "
		       "max_poll_gap_ms=%.1f",
		       bytes, row_bytes, mode, r.nodes, r.roles, iters, t * 1e6,
		       r.p50_us, r.p99_us, rps, alg, alg * 2 * (n - 1) / n,
		       r.checked, r.retx, r.early, r.flow_bad, r.send_err,
		       r.pull_busy, r.max_gap_us / 1e3);
	} else {
		printf("ps-bench stack=collstack pattern=%s row_bytes=%u "
		       "keys_per_push=%u rows=%u skew=%s mode=%s nodes=%d "
		       "roles=%s iters=%u time_us=%.1f p50_us=%.1f "
		       "p99_us=%.1f rows_per_s=%.0f GB_per_s=%.3f wrong=0 "
		       "rows_checked=%.0f worker_retx=%.0f push_early=%.0f "
		       "flow_bad=%.0f send_err=%.0f pull_busy=%.0f "
		       "max_poll_gap_ms=%.1f",
		       pattern, row_bytes, kpp, rows, skew, mode, r.nodes,
		       r.roles, iters, t * 1e6, r.p50_us, r.p99_us, rps,
		       rps * row_bytes / 1e9, r.checked, r.retx, r.early,
		       r.flow_bad, r.send_err, r.pull_busy, r.max_gap_us / 1e3);
	}
	if (budget) /* a line without it: every row in memory */
		printf(" budget=%llu", budget);
	printf("\n");
	fflush(stdout);
	return 0;
}

int cs_cmd_bench_ps(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "pattern", required_argument, NULL, 'P' },
		{ "row-bytes", required_argument, NULL, 'B' },
		{ "keys-per-push", required_argument, NULL, 'k' },
		{ "rows", required_argument, NULL, 'r' },
		{ "skew", required_argument, NULL, 'z' },
		{ "mode", required_argument, NULL, 'm' },
		{ "dense", required_argument, NULL, 'D' },
		{ "dense-row-bytes", required_argument, NULL, 'E' },
		{ "roles", required_argument, NULL, 'R' },
		{ "msg-max", required_argument, NULL, 'M' },
		{ "budget", required_argument, NULL, 'G' },
		{ "timeout", required_argument, NULL, 't' },
		{ "cluster", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *env = cs_ctl_env(), *roles = NULL, *mode = "sync",
		   *skew = "0";
	char patterns[128] = "push,pull,pushpull", sizes[128] = "64,1024";
	unsigned long kpp = 256, rows = 100000, iters = 100, warm = 5,
		      drb = 1024, ms = 600000, msg = 0, v;
	unsigned long long dense = 1 << 20, budget = 0;
	char *save, *p, *tok;
	int o, ret = 0;

	while ((o = getopt_long(argc, argv, "o:n:w:h", opts, NULL)) != -1) {
		int bad = 0;

		switch (o) {
		case 'o':
			bad = strcmp(optarg, "ps") != 0;
			break;
		case 'P':
			snprintf(patterns, sizeof(patterns), "%s", optarg);
			break;
		case 'B':
			snprintf(sizes, sizeof(sizes), "%s", optarg);
			break;
		case 'k':
			bad = cs_parse_whole(optarg, 1, 65536, &kpp);
			break;
		case 'r':
			bad = cs_parse_whole(optarg, 1, 1 << 24, &rows);
			break;
		case 'z':
			skew = optarg;
			bad = strtod(optarg, &p) < 0 || *p || p == optarg;
			break;
		case 'm':
			mode = optarg;
			bad = !!strpbrk(optarg, " \t\n");
			break;
		case 'n':
			bad = cs_parse_whole(optarg, 1, 100000, &iters);
			break;
		case 'w':
			bad = cs_parse_whole(optarg, 0, 10000, &warm);
			break;
		case 'D':
			bad = strcmp(optarg, "0") &&
			      cs_sim_parse_size(optarg, &dense);
			if (!strcmp(optarg, "0"))
				dense = 0;
			break;
		case 'E':
			bad = cs_parse_whole(optarg, 4, 1024, &drb) || drb % 4;
			break;
		case 'R':
			roles = optarg;
			break;
		case 'M':
			bad = cs_parse_whole(optarg, 256, 1 << 20, &msg);
			break;
		case 'G':
			bad = strcmp(optarg, "0") &&
			      cs_sim_parse_size(optarg, &budget);
			if (!strcmp(optarg, "0"))
				budget = 0;
			break;
		case 't':
			bad = cs_parse_whole(optarg, 1, 86400000, &ms);
			break;
		case 'c':
			env = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			bad = 1;
		}
		if (bad) {
			fprintf(stderr,
				"collstack bench -o ps: -%c %s: not "
				"valid\n",
				o, optarg ? optarg : "");
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	printf("# collstack bench -o ps: %s\n", env);
	if (!strcmp(patterns, "none")) /* the dense case only */
		sizes[0] = 0;
	for (p = sizes; (tok = strtok_r(p, ",", &save)); p = NULL) {
		char pats[128], *s2, *q, *pat;

		if (cs_parse_whole(tok, 4, 1024, &v) || v % 4) {
			fprintf(stderr,
				"collstack bench -o ps: row bytes %s: "
				"4 to 1024, a multiple of 4\n",
				tok);
			return 2;
		}
		snprintf(pats, sizeof(pats), "%s", patterns);
		for (q = pats; (pat = strtok_r(q, ",", &s2)); q = NULL) {
			if (strcmp(pat, "push") && strcmp(pat, "pull") &&
			    strcmp(pat, "pushpull")) {
				fprintf(stderr,
					"collstack bench -o ps: "
					"pattern %s: push, pull or "
					"pushpull\n",
					pat);
				return 2;
			}
			ret |= one(env, roles, pat, (unsigned)v, (unsigned)kpp,
				   (unsigned)rows, skew, mode, (unsigned)iters,
				   (unsigned)warm, (unsigned)ms, false, msg,
				   budget);
		}
	}
	if (dense) {
		unsigned long long drows = dense / drb;

		if (!drows || drows > 65536 || dense % drb) {
			fprintf(stderr,
				"collstack bench -o ps: --dense %llu: "
				"a multiple of the row bytes, at most "
				"65536 rows\n",
				dense);
			return 2;
		}
		ret |= one(env, roles, "pushpull", (unsigned)drb,
			   (unsigned)drows, (unsigned)drows, "0", mode,
			   (unsigned)iters, (unsigned)warm, (unsigned)ms, true,
			   msg, budget);
	}
	return ret ? 1 : 0;
}

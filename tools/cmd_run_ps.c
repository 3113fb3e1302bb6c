// SPDX-License-Identifier: MIT
/*
 * `collstack run ps`: a parameter-server job over a running cluster's
 * sidecars (ps_start / ps_go / ps_wait / ps_forget, sidecar/svc_core.c and
 * sidecar/svc_ps.c). Each sidecar is a server, a worker or both (--roles,
 * one letter per sidecar in the cluster's order); the workers push and
 * pull an SGD table for --iters versions in the update mode --mode, every
 * message a frame of the sidecars' transport cores; every worker checks
 * every row it pulls and every server its shard at the end, exactly
 * (collectives/ps/ps_pattern.h). cs_ps_job_run() is shared with
 * `collstack bench -o ps` (cmd_bench_ps.c).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cmds.h"
#include "sidecar/ctl.h"

#define PS_MAX_NODES 64

int cs_ps_job_run(const char *env, const char *roles, const char *job,
		  unsigned ms, bool print_nodes, struct cs_ps_job_res *r)
{
	static char names[PS_MAX_NODES][CS_CTL_NAME_MAX],
		dirs[PS_MAX_NODES][320];
	uint32_t rank_of[PS_MAX_NODES];
	char list[1024] = "", req[1400], reply[CS_CTL_LINE];
	unsigned op_id, rows = 0;
	double v, shard_rows = 0;
	int n, failed = 0, counted = 0, steps_ok = 1;

	memset(r, 0, sizeof(*r));
	n = cs_run_cluster("collstack ps", env, names, dirs, rank_of);
	if (n < 0)
		return 1;
	if (roles && strlen(roles) != (size_t)n) {
		fprintf(stderr,
			"collstack ps: --roles %s: %d letters "
			"needed (one per sidecar)\n",
			roles, n);
		return 2;
	}
	for (int i = 0; i < n; i++) {
		size_t l = strlen(list);

		r->roles[i] = roles ? roles[i] : 'b';
		snprintf(list + l, sizeof(list) - l, "%s%u", i ? "," : "",
			 rank_of[i]);
	}
	r->roles[n] = 0;
	r->nodes = n;
	/* the PS group's op ids are never reused within a sidecar's life */
	op_id = ((uint32_t)time(NULL) * 2654435761u ^ (uint32_t)getpid() ^
		 (uint32_t)clock()) &
		0x7fffffff;
	/* job: "ITERS ROWS DIM KPP" then options "KEY=VALUE ..." */
	{
		char head[64], rest[512] = "";
		int skip = 0;
		unsigned a, b, c, d;

		if (sscanf(job, "%u %u %u %u%n", &a, &b, &c, &d, &skip) != 4)
			return 2;
		rows = b;
		snprintf(head, sizeof(head), "%u %u %u %u", a, b, c, d);
		snprintf(rest, sizeof(rest), "%s", job + skip);
		snprintf(req, sizeof(req), "ps_start %u %s %s %s%s", op_id,
			 r->roles, head, list, rest);
	}
	for (int i = 0; i < n; i++)
		if (cs_ctl_call(dirs[i], req, reply, sizeof(reply), 60000) ||
		    strncmp(reply, "ok", 2)) {
			printf("ps FAILED %s: ps_start: %s\n", names[i], reply);
			failed = 1;
			n = i; /* forget what started */
			break;
		}
	/* then the workers start: nothing is sent to a node before its
	 * flow is posted */
	for (int i = 0; i < n && !failed; i++)
		if (cs_ctl_call(dirs[i], "ps_go", reply, sizeof(reply),
				10000) ||
		    strncmp(reply, "ok", 2)) {
			printf("ps FAILED %s: ps_go: %s\n", names[i], reply);
			failed = 1;
		}
	/* every worker's last step, then the servers check their shards
	 * (not while some worker still times its steps) */
	snprintf(req, sizeof(req), "ps_steps %u", ms);
	for (int i = 0; i < n && !failed && steps_ok; i++) {
		if (cs_ctl_call(dirs[i], req, reply, sizeof(reply),
				(int)ms + 10000)) {
			printf("ps FAILED %s: ps_steps: %s\n", names[i], reply);
			failed = 1;
		} else if (!strncmp(reply, "err timed out", 13)) {
			printf("ps FAILED %s: %s\n", names[i], reply);
			failed = 1;
		} else if (strncmp(reply, "ok", 2)) {
			steps_ok = 0; /* the job failed: ps_wait says how */
		}
	}
	for (int i = 0; i < n && !failed && steps_ok; i++)
		if (cs_ctl_call(dirs[i], "ps_check", reply, sizeof(reply),
				10000) ||
		    strncmp(reply, "ok", 2)) {
			printf("ps FAILED %s: ps_check: %s\n", names[i], reply);
			failed = 1;
		}
	snprintf(req, sizeof(req), "ps_wait %u", ms);
	for (int i = 0; i < n && !failed; i++) {
		if (cs_ctl_call(dirs[i], req, reply, sizeof(reply),
				(int)ms + 10000) ||
		    strncmp(reply, "ok", 2)) {
			printf("ps FAILED %s: %s\n", names[i], reply);
			failed = 1;
			/* every other node's view of it, then stop */
			for (int k = 0; k < n; k++)
				if (k != i) {
					(void)cs_ctl_call(dirs[k], "ps_wait 1",
							  reply, sizeof(reply),
							  10000);
					printf("  %s %s\n", names[k], reply);
				}
			break;
		}
		if (print_nodes)
			printf("  %s %s\n", names[i], reply + 3);
		if (!cs_ctl_kv(reply, "pushes", &v))
			r->pushes += v;
		if (!cs_ctl_kv(reply, "pulls", &v))
			r->pulls += v;
		if (!cs_ctl_kv(reply, "wrong", &v))
			r->wrong += v;
		if (!cs_ctl_kv(reply, "rows_checked", &v))
			r->checked += v;
		if (!cs_ctl_kv(reply, "rejected", &v))
			r->rejected += v;
		if (!cs_ctl_kv(reply, "worker_retx", &v))
			r->retx += v;
		if (!cs_ctl_kv(reply, "push_early", &v))
			r->early += v;
		if (!cs_ctl_kv(reply, "flow_rx_bad", &v))
			r->flow_bad += v;
		if (!cs_ctl_kv(reply, "send_err", &v))
			r->send_err += v;
		if (!cs_ctl_kv(reply, "pull_busy", &v))
			r->pull_busy += v;
		if (!cs_ctl_kv(reply, "max_poll_gap_us", &v) &&
		    v > r->max_gap_us)
			r->max_gap_us = v;
		if (!cs_ctl_kv(reply, "secs", &v) && v > r->secs)
			r->secs = v;
		if (r->roles[i] != 's') {
			if (!cs_ctl_kv(reply, "timed_secs", &v) &&
			    v > r->timed_secs)
				r->timed_secs = v;
			if (!cs_ctl_kv(reply, "timed_rows", &v))
				r->timed_rows += v;
			if (!cs_ctl_kv(reply, "p50_us", &v) && v > r->p50_us)
				r->p50_us = v;
			if (!cs_ctl_kv(reply, "p99_us", &v) && v > r->p99_us)
				r->p99_us = v;
		}
		if (r->roles[i] != 'w' && !cs_ctl_kv(reply, "shard_rows", &v)) {
			shard_rows += v;
			counted++;
		}
		if (r->roles[i] != 'w' && !cs_ctl_kv(reply, "grads_in", &v)) {
			r->gsum += v;
			r->gmax = v > r->gmax ? v : r->gmax;
			r->nsrv++;
		}
	}
	for (int i = 0; i < n; i++)
		(void)cs_ctl_call(dirs[i], "ps_forget", reply, sizeof(reply),
				  10000);
	if (failed)
		return 1;
	if (r->wrong || !r->checked) {
		printf("ps FAILED wrong=%.0f rows_checked=%.0f\n", r->wrong,
		       r->checked);
		return 1;
	}
	/* every row of the table is in exactly one shard, checked there
	 * (each server reports it; a sidecar older than this reports none) */
	if (counted && shard_rows != rows) {
		printf("ps FAILED the shards checked %.0f rows of %u\n",
		       shard_rows, rows);
		return 1;
	}
	return 0;
}

static void ps_usage(FILE *out)
{
	fprintf(out,
		"usage: collstack run ps [--roles R] [--iters I] [--rows N]\n"
		"       [--dim D] [--keys-per-push P] [--mode M] [--skew Z]\n"
		"       [--bad-push] [--budget BYTES] [--timeout MS]\n"
		"       [--cluster ENV]\n\n"
		"R: one letter per sidecar, in the cluster's order: s (server),\n"
		"w (worker), b (both); default every sidecar both. M: sync\n"
		"(default), async or ssp:S. Z: Zipf exponent of the keys (0,\n"
		"the default: uniform). --bad-push: worker 0 first sends a push\n"
		"for an unknown table and one with the wrong row size; the\n"
		"servers must refuse both (rejected=2) and apply nothing.\n"
		"--budget: each server keeps BYTES of its shard's rows in\n"
		"memory (at least 64 rows), the rest on the SSD tier, a file\n"
		"in the sidecars' ps.spill_dir (0, the default: all in\n"
		"memory).\n"
		"Prints 'ps ok ...' or 'ps FAILED ...' (exit 1). Defaults: 20\n"
		"iters, 10000 rows, dim 16, 64 keys per push, 60000 ms.\n");
}

int cs_cmd_run_ps(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "roles", required_argument, NULL, 'r' },
		{ "iters", required_argument, NULL, 'i' },
		{ "rows", required_argument, NULL, 'n' },
		{ "dim", required_argument, NULL, 'd' },
		{ "keys-per-push", required_argument, NULL, 'p' },
		{ "mode", required_argument, NULL, 'm' },
		{ "skew", required_argument, NULL, 'z' },
		{ "bad-push", no_argument, NULL, 'B' },
		{ "budget", required_argument, NULL, 'G' },
		{ "timeout", required_argument, NULL, 't' },
		{ "cluster", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *env = cs_ctl_env(), *roles = NULL, *mode = "sync",
		   *skew = "0";
	unsigned iters = 20, rows = 10000, dim = 16, kpp = 64, ms = 60000;
	struct cs_ps_job_res r;
	unsigned long long budget = 0;
	char job[256], *end;
	int c, bad = 0, ret;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'r':
			roles = optarg;
			break;
		case 'i':
			iters = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'n':
			rows = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'd':
			dim = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'p':
			kpp = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'm':
			mode = optarg;
			break;
		case 'z':
			skew = optarg;
			break;
		case 'B':
			bad = 1;
			break;
		case 'G':
			budget = strtoull(optarg, &end, 0);
			if (*end || end == optarg || optarg[0] == '-') {
				fprintf(stderr,
					"collstack run ps: --budget %s: not a "
					"number of bytes\n",
					optarg);
				return 2;
			}
			break;
		case 't':
			ms = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'c':
			env = optarg;
			break;
		case 'h':
			ps_usage(stdout);
			return 0;
		default:
			ps_usage(stderr);
			return 2;
		}
	}
	if (strpbrk(mode, " \t\n") || strpbrk(skew, " \t\n")) {
		ps_usage(stderr);
		return 2;
	}
	snprintf(job, sizeof(job), "%u %u %u %u mode=%s skew=%s bad=%d", iters,
		 rows, dim, kpp, mode, skew, bad);
	if (budget) /* only when asked: older sidecars know no budget= */
		snprintf(job + strlen(job), sizeof(job) - strlen(job),
			 " budget=%llu", budget);
	ret = cs_ps_job_run(env, roles, job, ms, true, &r);
	if (ret)
		return ret;
	if (bad && r.rejected != 2) {
		printf("ps FAILED rejected=%.0f (2 malformed pushes sent)\n",
		       r.rejected);
		return 1;
	}
	printf("ps ok nodes=%d roles=%s mode=%s iters=%u rows=%u dim=%u "
	       "keys_per_push=%u rows_checked=%.0f wrong=0 rejected=%.0f "
	       "secs=%.3f pushes_per_s=%.0f pulls_per_s=%.0f "
	       "max_server_share=%.2f budget=%llu\n",
	       r.nodes, r.roles, mode, iters, rows, dim, kpp, r.checked,
	       r.rejected, r.secs, r.secs > 0 ? r.pushes / r.secs : 0,
	       r.secs > 0 ? r.pulls / r.secs : 0,
	       r.gsum > 0 ? r.gmax * r.nsrv / r.gsum : 0, budget);
	return 0;
}

/* SPDX-License-Identifier: MIT */
/* Subcommands of the collstack CLI: each returns the process exit code. */
#ifndef CS_TOOLS_CMDS_H
#define CS_TOOLS_CMDS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

int cs_cmd_selftest(int argc, char **argv);
int cs_cmd_bench_ring(int argc, char **argv);
int cs_cmd_bench(int argc, char **argv);
int cs_cmd_bench_ops(int argc, char **argv);
int cs_cmd_run(int argc, char **argv);
int cs_cmd_run_mixed(int argc, char **argv);
int cs_cmd_launch(int argc, char **argv);
int cs_cmd_run_buckets(int argc, char **argv);
int cs_cmd_run_ps(int argc, char **argv);
int cs_cmd_bench_ps(int argc, char **argv);
/* One PS job over a cluster's sidecars (cmd_run_ps.c): what it reported. */
struct cs_ps_job_res {
	int nodes;
	char roles[65];
	double pushes, pulls, wrong, checked, rejected, retx, early;
	/* what no timer should have had to recover: frames the PS flow
	 * refused, messages it refused at send, pulls refused -EBUSY */
	double flow_bad, send_err, pull_busy;
	/* the longest a node's lcore did not poll the job (slowest node) */
	double max_gap_us;
	double secs, timed_secs, timed_rows, p50_us, p99_us; /* slowest */
	double gsum, gmax;
	unsigned nsrv;
};
/* @job: "ITERS ROWS DIM KPP [KEY=VALUE...]" (ps_start); @roles NULL: all
 * both. Prints a FAILED line itself. Returns 0, 1 (failed), 2 (usage). */
int cs_ps_job_run(const char *env, const char *roles, const char *job,
		  unsigned ms, bool print_nodes, struct cs_ps_job_res *r);
/* The cluster's control folders and each sidecar's node id in the view
 * (cmd_run_mixed.c); returns the number of sidecars (at most 64) or -1. */
int cs_run_cluster(const char *cmd, const char *env, char (*names)[64],
		   char (*dirs)[320], uint32_t *rank_of);
int cs_cmd_stats(int argc, char **argv);
int cs_cmd_trace(int argc, char **argv);
int cs_cmd_top(int argc, char **argv);
int cs_cmd_doctor(int argc, char **argv);
int cs_cmd_sim(int argc, char **argv);
int cs_cmd_sim_p2p(int argc, char **argv);
int cs_cmd_sim_incast(int argc, char **argv);
int cs_cmd_sim_allreduce(int argc, char **argv);
int cs_cmd_sim_reduce_scatter(int argc, char **argv);
int cs_cmd_sim_all_gather(int argc, char **argv);
int cs_cmd_sim_broadcast(int argc, char **argv);
int cs_cmd_sim_mixed(int argc, char **argv);
int cs_cmd_sim_alltoall(int argc, char **argv);
int cs_cmd_sim_moe(int argc, char **argv);
int cs_cmd_sim_ps(int argc, char **argv);
int cs_cmd_model(int argc, char **argv);
int cs_cmd_plan(int argc, char **argv);
/* "64M", "1G", "4096": bytes with K/M/G (x1024) suffixes; 0 or -EINVAL. */
int cs_sim_parse_size(const char *s, unsigned long long *out);
/* A whole number in [min, max], nothing before or after it; 0 or -EINVAL. */
int cs_parse_whole(const char *s, unsigned long min, unsigned long max,
		   unsigned long *out);
int cs_cmd_bench_ring(int argc, char **argv);
int cs_cmd_bench_reduce(int argc, char **argv);
/* bench-reduce with default settings; quick: small sizes, for selftest. */
int cs_bench_reduce_run(FILE *out, bool quick);

#endif

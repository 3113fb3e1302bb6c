// SPDX-License-Identifier: MIT
/*
 * `collstack run ps`: a parameter-server job over a running cluster's
 * sidecars (ps_start / ps_wait / ps_forget, sidecar/svc_core.c and
 * sidecar/svc_ps.c). Each sidecar is a server, a worker or both (--roles,
 * one letter per sidecar in the cluster's order); the workers train a sync
 * SGD table for --iters versions, every message a frame of the sidecars'
 * transport cores; every server checks its shard and every worker its
 * last pull against the serial reference, exactly.
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

static void ps_usage(FILE *out)
{
	fprintf(out,
		"usage: collstack run ps [--roles R] [--iters I] [--rows N]\n"
		"       [--dim D] [--keys-per-push P] [--timeout MS]\n"
		"       [--cluster ENV]\n\n"
		"R: one letter per sidecar, in the cluster's order: s (server),\n"
		"w (worker), b (both); default every sidecar both. Prints\n"
		"'ps ok ...' or 'ps FAILED ...' (exit 1). Defaults: 20 iters,\n"
		"10000 rows, dim 16, 64 keys per push, 60000 ms.\n");
}

int cs_cmd_run_ps(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "roles", required_argument, NULL, 'r' },
		{ "iters", required_argument, NULL, 'i' },
		{ "rows", required_argument, NULL, 'n' },
		{ "dim", required_argument, NULL, 'd' },
		{ "keys-per-push", required_argument, NULL, 'p' },
		{ "timeout", required_argument, NULL, 't' },
		{ "cluster", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	static char names[PS_MAX_NODES][CS_CTL_NAME_MAX],
		dirs[PS_MAX_NODES][320];
	uint32_t rank_of[PS_MAX_NODES];
	const char *env = cs_ctl_env(), *roles = NULL;
	unsigned iters = 20, rows = 10000, dim = 16, kpp = 64, ms = 60000;
	char list[1024] = "", req[1400], reply[1024], rl[PS_MAX_NODES + 1];
	double pushes = 0, pulls = 0, wrong = 0, checked = 0, secs = 0;
	double gmax = 0, gsum = 0, v;
	unsigned nsrv = 0, op_id;
	int c, n, failed = 0;

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
	n = cs_run_cluster("collstack run ps", env, names, dirs, rank_of);
	if (n < 0)
		return 1;
	if (roles && strlen(roles) != (size_t)n) {
		fprintf(stderr,
			"collstack run ps: --roles %s: %d letters "
			"needed (one per sidecar)\n",
			roles, n);
		return 2;
	}
	for (int i = 0; i < n; i++) {
		size_t l = strlen(list);

		rl[i] = roles ? roles[i] : 'b';
		snprintf(list + l, sizeof(list) - l, "%s%u", i ? "," : "",
			 rank_of[i]);
	}
	rl[n] = 0;
	/* the PS group's op ids are never reused within a sidecar's life */
	op_id = ((uint32_t)time(NULL) * 2654435761u ^ (uint32_t)getpid()) &
		0x7fffffff;
	snprintf(req, sizeof(req), "ps_start %u %s %u %u %u %u %s", op_id, rl,
		 iters, rows, dim, kpp, list);
	for (int i = 0; i < n; i++)
		if (cs_ctl_call(dirs[i], req, reply, sizeof(reply), 10000) ||
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
		printf("  %s %s\n", names[i], reply + 3);
		if (!cs_ctl_kv(reply, "pushes", &v))
			pushes += v;
		if (!cs_ctl_kv(reply, "pulls", &v))
			pulls += v;
		if (!cs_ctl_kv(reply, "wrong", &v))
			wrong += v;
		if (!cs_ctl_kv(reply, "rows_checked", &v))
			checked += v;
		if (!cs_ctl_kv(reply, "secs", &v) && v > secs)
			secs = v;
		if (rl[i] != 'w' && !cs_ctl_kv(reply, "grads_in", &v)) {
			gsum += v;
			gmax = v > gmax ? v : gmax;
			nsrv++;
		}
	}
	for (int i = 0; i < n; i++)
		(void)cs_ctl_call(dirs[i], "ps_forget", reply, sizeof(reply),
				  10000);
	if (failed)
		return 1;
	if (wrong || !checked) {
		printf("ps FAILED wrong=%.0f rows_checked=%.0f\n", wrong,
		       checked);
		return 1;
	}
	printf("ps ok nodes=%d roles=%s iters=%u rows=%u dim=%u "
	       "keys_per_push=%u rows_checked=%.0f wrong=0 secs=%.3f "
	       "pushes_per_s=%.0f pulls_per_s=%.0f max_server_share=%.2f\n",
	       n, rl, iters, rows, dim, kpp, checked, secs,
	       secs > 0 ? pushes / secs : 0, secs > 0 ? pulls / secs : 0,
	       gsum > 0 ? gmax * nsrv / gsum : 0);
	return 0;
}

/* SPDX-License-Identifier: MIT */
/* collstack: the command-line tool (selftest, benchmarks, simulator, ...). */
#include <stdio.h>
#include <string.h>

#include "cs_config.h"
#include "cmds.h"

struct cmd {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *help;
};

/* One line per subcommand. */
static const struct cmd cmds[] = {
	{ "version", NULL, "print the version" },
	{ "selftest", cs_cmd_selftest,
	  "codec, auth and reduction checks + benchmark" },
	{ "bench-ring", cs_cmd_bench_ring,
	  "shm SPSC ring: slots/s, 2 processes" },
	{ "bench-reduce", cs_cmd_bench_reduce,
	  "reduction kernels: GB/s per dtype x op vs memcpy" },
	{ "bench", cs_cmd_bench,
	  "bench raw: bidirectional raw port rate of 2 sidecars" },
	{ "run", cs_cmd_run,
	  "run allreduce: real allreduces across the cluster's sidecars" },
	{ "launch", cs_cmd_launch,
	  "a program T times per node of a cluster (RANK, ... set)" },
	{ "stats", cs_cmd_stats,
	  "health counters of the cluster's sidecars, one row per node" },
	{ "trace", cs_cmd_trace,
	  "merged timeline of the cluster as Trace Event JSON" },
	{ "top", cs_cmd_top, "live table per node and per peer, with health" },
	{ "doctor", cs_cmd_doctor,
	  "flight recorders: which ranks a stuck op waits for" },
	{ "sim", cs_cmd_sim, "simulated network scenarios (p2p, incast, ...)" },
	{ "model", cs_cmd_model,
	  "cost model: fit, predict, check against the simulator" },
	{ "plan", cs_cmd_plan,
	  "strategy per parameter group from the cost model" },
};

static void usage(FILE *out)
{
	fprintf(out, "usage: collstack COMMAND [ARGS...]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		fprintf(out, "  %-14s %s\n", cmds[i].name, cmds[i].help);
	fprintf(out, "\n'collstack COMMAND --help' describes a command.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
		printf("collstack %s\n", CS_VERSION);
		return 0;
	}
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (cmds[i].fn && !strcmp(argv[1], cmds[i].name))
			return cmds[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "collstack: unknown command '%s'\n\n", argv[1]);
	usage(stderr);
	return 2;
}

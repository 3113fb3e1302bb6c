/* SPDX-License-Identifier: MIT */
/*
 * collstack bench -o OP: collectives the way trainers run them. From the
 * root namespace, starts --trainers-per-node trainer processes
 * (cs-trainer-bench, linking libcollstack) in every node's namespace of a
 * scripts/cluster.sh cluster (`ip netns exec NODE ...`), each connected to
 * its node's sidecar socket; rank 0's rows (tools/mpi_bench.c columns)
 * are printed, every other trainer's stdout is dropped (stderr is kept).
 *
 * Ranks: node i's trainers are global ranks i*T .. i*T+T-1 (node order of
 * the cluster file), so node rank = the node's place in the cross-node
 * ring, as collstackd assumes.
 *
 * CPUs: a trainer starts on its sidecar's CPUs when the sidecar is pinned
 * to fewer CPUs than this command may use (scripts/cluster.sh --cpus, the
 * default), as a real node's trainers share its cores; --no-pin leaves the
 * trainers where the scheduler puts them.
 */
#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "sidecar/ctl.h"
#include "trainers.h"

static void usage(FILE *out)
{
	fprintf(out,
		"usage: collstack bench -o allreduce|reduce_scatter|all_gather|broadcast|"
		"alltoall|alltoallv|sendrecv|reduce|moe "
		"[-b MIN] [-e MAX] [-f F]\n"
		"          [-n ITERS] [-w WARMUP] [-m b2b|iter] [-k K] "
		"[--trainers-per-node T] "
		"[--cluster FILE]\n"
		"          [--trainer PATH] [--timeout S] [--no-netns] "
		"[--no-pin]\n"
		"          [--skew S] [--seed N] [--zero PCT] [--silent R] "
		"[--sink R] [--bad counts|displ]   (alltoallv)\n"
		"          [--node-sum] [--node-rows]   (moe)\n"
		"       collstack bench raw ...   (raw port rate)\n"
		"       collstack bench -o ps ...   (parameter server: "
		"-o ps --help)\n\n"
		"Starts T trainers per node (cs-trainer-bench, next to this "
		"binary) in each\nnamespace of the cluster (default $CS_CLUSTER_ENV or %s), "
		"connected to that node's\nsidecar; prints rank 0's rows: "
		"size count type redop root time(us) algbw\nbusbw #wrong "
		"p50(us) p99(us) place cpu(s/GB).\n-m b2b (default): "
		"a barrier, then the iterations back to back (nccl-tests);\n"
		"-m iter: each iteration refilled and fenced by a barrier.\n"
		"-k K: each iteration posts K buckets of the size (buffers of "
		"their own) before\nwaiting for any (DDP); time, p50 and p99 "
		"per bucket.\n"
		"-o alltoallv: per-pair counts (tools/zipf_split.h, as "
		"cs-mpi-bench): Zipf weights\n1/(k+1)^S (--skew, 0: equal) "
		"over one order of the ranks drawn from --seed,\nabout PCT "
		"%% of the blocks empty (--zero), rank R sends nothing "
		"(--silent) or\nreceives everything (--sink); --bad first "
		"posts one that must be refused on\nevery rank.\n"
		"-o reduce: cs_reduce, sum to rank 0 (the others' recv NULL; "
		"busbw = algbw).\n"
		"-o moe: cs_moe_dispatch + cs_moe_combine (collstack/moe.h); "
		"SIZE is a rank's\ntokens (512 f32 each, top-2 of 2 experts "
		"per rank), -e at most 8M; own columns; --node-sum: "
		"a layer with\nCS_MOE_LAYER_NODE_SUM (one combine row per "
		"(token, node) across nodes); --node-rows: "
		"CS_MOE_LAYER_NODE_ROWS (one\ndispatch row per (token, node) "
		"across nodes).\n"
		"--no-netns runs the trainers here "
		"(sidecars on loopback).\nA trainer runs on its sidecar's "
		"CPUs when the sidecar is pinned (cluster.sh\n--cpus); "
		"--no-pin: anywhere.\n",
		CS_CTL_DEFAULT_ENV);
}

/*
 * The options passed on to every trainer are checked here, once: a bad
 * one would otherwise fail (or be half read) in each trainer of each
 * namespace.
 */
static bool pass_ok(int o, const char *v)
{
	unsigned long long sz;
	unsigned long x;

	switch (o) {
	case 'o':
		return !strcmp(v, "allreduce") ||
		       !strcmp(v, "reduce_scatter") ||
		       !strcmp(v, "all_gather") || !strcmp(v, "broadcast") ||
		       !strcmp(v, "alltoall") || !strcmp(v, "alltoallv") ||
		       !strcmp(v, "sendrecv") || !strcmp(v, "moe") ||
		       !strcmp(v, "reduce");
	case 'b':
	case 'e':
		return !cs_sim_parse_size(v, &sz) && sz >= 1;
	case 'f':
		return !cs_parse_whole(v, 2, 1024, &x);
	case 'n':
		return !cs_parse_whole(v, 1, 100000000, &x);
	case 'w':
		return !cs_parse_whole(v, 0, 100000000, &x);
	case 'k':
		return !cs_parse_whole(v, 1, 64, &x);
	case 'm':
		return !strcmp(v, "b2b") || !strcmp(v, "iter");
	case 'S':
		return strspn(v, "0123456789.") == strlen(v) && *v &&
		       atof(v) <= 16;
	case 'D':
		return !cs_parse_whole(v, 0, ULONG_MAX, &x);
	case 'Z':
		return !cs_parse_whole(v, 0, 100, &x);
	case 'L':
	case 'K':
		return !cs_parse_whole(v, 0, 1u << 20, &x);
	case 'B':
		return !strcmp(v, "counts") || !strcmp(v, "displ");
	}
	return false;
}

/* Bench options that pass through to every trainer. */
static const char pass_opts[] = "obefnwmkSDZLKB";

int cs_cmd_bench_ops(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "cluster", required_argument, NULL, 'c' },
		{ "trainers-per-node", required_argument, NULL, 'T' },
		{ "trainer", required_argument, NULL, 'p' },
		{ "timeout", required_argument, NULL, 't' },
		{ "no-netns", no_argument, NULL, 'N' },
		{ "no-pin", no_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		/* -o alltoallv's shape, passed on */
		{ "skew", required_argument, NULL, 'S' },
		{ "seed", required_argument, NULL, 'D' },
		{ "zero", required_argument, NULL, 'Z' },
		{ "silent", required_argument, NULL, 'L' },
		{ "sink", required_argument, NULL, 'K' },
		{ "bad", required_argument, NULL, 'B' },
		{ "node-sum", no_argument, NULL, 'U' },
		{ "node-rows", no_argument, NULL, 'R' },
		{ 0 }
	};
	struct cs_trainers tr = { .cmd = "collstack bench",
				  .default_name = "cs-trainer-bench" };
	char trainer[PATH_MAX] = "", *targs[32];
	const char *env = cs_ctl_env();
	int tpn = 1, o, ntargs = 0, netns = 1, pin = 1;
	unsigned timeout = 600;
	unsigned long num;

	while ((o = getopt_long(argc, argv, "o:b:e:f:n:w:m:k:h", opts, NULL)) !=
	       -1) {
		switch (o) {
		case 'c':
			env = optarg;
			break;
		case 'T':
			if (cs_parse_whole(optarg, 1, CS_TRAINERS_MAX_TPN,
					   &num)) {
				fprintf(stderr,
					"collstack bench: --trainers-per-node "
					"%s: a whole number from 1 to %d\n",
					optarg, CS_TRAINERS_MAX_TPN);
				return 2;
			}
			tpn = (int)num;
			break;
		case 'p':
			snprintf(trainer, sizeof(trainer), "%s", optarg);
			break;
		case 't':
			if (cs_parse_whole(optarg, 1, 86400, &num)) {
				fprintf(stderr,
					"collstack bench: --timeout %s: whole "
					"seconds from 1 to 86400\n",
					optarg);
				return 2;
			}
			timeout = (unsigned)num;
			break;
		case 'N':
			netns = 0;
			break;
		case 'P':
			pin = 0;
			break;
		case 'U': /* -o moe: passed on as a pair, like the others */
			if (ntargs + 3 >= 32) {
				usage(stderr);
				return 2;
			}
			targs[ntargs++] = "--node-sum";
			targs[ntargs++] = "1";
			break;
		case 'R': /* -o moe, as --node-sum */
			if (ntargs + 3 >= 32) {
				usage(stderr);
				return 2;
			}
			targs[ntargs++] = "--node-rows";
			targs[ntargs++] = "1";
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			if (!strchr(pass_opts, o) || ntargs + 3 >= 32) {
				usage(stderr);
				return 2;
			}
			if (!pass_ok(o, optarg)) {
				fprintf(stderr,
					"collstack bench: -%c %s: not a "
					"valid value\n",
					o, optarg);
				usage(stderr);
				return 2;
			}
			targs[ntargs++] = o == 'o'   ? "-o"
					  : o == 'b' ? "-b"
					  : o == 'e' ? "-e"
					  : o == 'f' ? "-f"
					  : o == 'n' ? "-n"
					  : o == 'm' ? "-m"
					  : o == 'k' ? "-k"
					  : o == 'S' ? "--skew"
					  : o == 'D' ? "--seed"
					  : o == 'Z' ? "--zero"
					  : o == 'L' ? "--silent"
					  : o == 'K' ? "--sink"
					  : o == 'B' ? "--bad"
						     : "-w";
			targs[ntargs++] = optarg;
			break;
		}
	}
	targs[ntargs] = NULL;
	if (tpn < 1 || tpn > CS_TRAINERS_MAX_TPN || optind != argc) {
		usage(stderr);
		return 2;
	}
	tr.env = env;
	tr.prog = trainer;
	tr.args = targs;
	tr.tpn = tpn;
	tr.netns = netns;
	tr.pin = pin;
	tr.timeout_s = timeout;
	return cs_trainers_run(&tr);
}

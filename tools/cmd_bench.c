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
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cmds.h"
#include "sidecar/ctl.h"

#define BENCH_MAX_NODES 64
#define BENCH_MAX_TPN 16
#define BENCH_SOCK "collstack.sock"

static void usage(FILE *out)
{
	fprintf(out,
		"usage: collstack bench -o allreduce|reduce_scatter|all_gather|broadcast|"
		"alltoall "
		"[-b MIN] [-e MAX] [-f F]\n"
		"          [-n ITERS] [-w WARMUP] [-m b2b|iter] "
		"[--trainers-per-node T] "
		"[--cluster FILE]\n"
		"          [--trainer PATH] [--timeout S] [--no-netns] "
		"[--no-pin]\n"
		"       collstack bench raw ...   (raw port rate)\n\n"
		"Starts T trainers per node (cs-trainer-bench, next to this "
		"binary) in each\nnamespace of the cluster (default $CS_CLUSTER_ENV or %s), "
		"connected to that node's\nsidecar; prints rank 0's rows: "
		"size count type redop root time(us) algbw\nbusbw #wrong "
		"p50(us) p99(us) place cpu(s/GB).\n-m b2b (default): "
		"a barrier, then the iterations back to back (nccl-tests);\n"
		"-m iter: each iteration refilled and fenced by a barrier.\n"
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
		       !strcmp(v, "alltoall");
	case 'b':
	case 'e':
		return !cs_sim_parse_size(v, &sz) && sz >= 1;
	case 'f':
		return !cs_parse_whole(v, 2, 1024, &x);
	case 'n':
		return !cs_parse_whole(v, 1, 100000000, &x);
	case 'w':
		return !cs_parse_whole(v, 0, 100000000, &x);
	case 'm':
		return !strcmp(v, "b2b") || !strcmp(v, "iter");
	}
	return false;
}

static int default_trainer(char *out, size_t len)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char *slash;

	if (n <= 0)
		return -errno;
	self[n] = 0;
	slash = strrchr(self, '/');
	if (!slash)
		return -ENOENT;
	*slash = 0;
	if ((size_t)snprintf(out, len, "%s/cs-trainer-bench", self) >= len)
		return -ENAMETOOLONG;
	return 0;
}

static void kill_all(pid_t *pids, int n)
{
	for (int i = 0; i < n; i++)
		if (pids[i] > 0)
			kill(pids[i], SIGTERM);
}

/*
 * The CPUs of node @name's sidecar (its pid file in the cluster's run
 * folder), if it is pinned to fewer CPUs than we may use; else false.
 */
static bool sidecar_cpus(const char *root, const char *name, cpu_set_t *set)
{
	char path[PATH_MAX], comm[32] = "";
	cpu_set_t mine;
	long pid = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s/pid", root, name);
	f = fopen(path, "r");
	if (!f)
		return false;
	if (fscanf(f, "%ld", &pid) != 1)
		pid = 0;
	fclose(f);
	if (pid <= 0 || pid > INT_MAX)
		return false;
	snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
	f = fopen(path, "r");
	if (!f)
		return false;
	if (!fgets(comm, sizeof(comm), f))
		comm[0] = 0;
	fclose(f);
	if (strcmp(comm, "collstackd\n"))
		return false; /* a stale pid file */
	if (sched_getaffinity((pid_t)pid, sizeof(*set), set) ||
	    sched_getaffinity(0, sizeof(mine), &mine))
		return false;
	return CPU_COUNT(set) < CPU_COUNT(&mine);
}

/* Bench options that pass through to every trainer. */
static const char pass_opts[] = "obefnwm";

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
		{ 0 }
	};
	char names[BENCH_MAX_NODES][CS_CTL_NAME_MAX], root[256];
	char trainer[PATH_MAX], *targs[32];
	const char *env = cs_ctl_env();
	static pid_t pids[BENCH_MAX_NODES * BENCH_MAX_TPN];
	int tpn = 1, n, nt = 0, o, ntargs = 0, ret = 0, netns = 1, pin = 1;
	unsigned timeout = 600;
	unsigned long num;
	time_t deadline;

	trainer[0] = 0;
	targs[ntargs++] = "ip";
	targs[ntargs++] = "netns";
	targs[ntargs++] = "exec";
	targs[ntargs++] = NULL; /* node */
	targs[ntargs++] = trainer;
	while ((o = getopt_long(argc, argv, "o:b:e:f:n:w:m:h", opts, NULL)) !=
	       -1) {
		switch (o) {
		case 'c':
			env = optarg;
			break;
		case 'T':
			if (cs_parse_whole(optarg, 1, BENCH_MAX_TPN, &num)) {
				fprintf(stderr,
					"collstack bench: --trainers-per-node "
					"%s: a whole number from 1 to %d\n",
					optarg, BENCH_MAX_TPN);
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
						     : "-w";
			targs[ntargs++] = optarg;
			break;
		}
	}
	targs[ntargs] = NULL;
	if (tpn < 1 || tpn > BENCH_MAX_TPN || optind != argc) {
		usage(stderr);
		return 2;
	}
	if (!trainer[0] && (ret = default_trainer(trainer, sizeof(trainer)))) {
		fprintf(stderr, "collstack bench: trainer binary: %s\n",
			strerror(-ret));
		return 1;
	}
	n = cs_ctl_cluster_cli("collstack bench", env, names, BENCH_MAX_NODES,
			       root, sizeof(root), 1);
	if (n < 0)
		return 1;
	printf("# collstack bench: %d node(s) x %d trainer(s) (%s..%s), "
	       "sidecars from %s\n",
	       n, tpn, names[0], names[n - 1], env);
	fflush(stdout);
	for (int i = 0; i < n; i++) {
		cpu_set_t cpus;
		bool pinned = pin && sidecar_cpus(root, names[i], &cpus);

		for (int l = 0; l < tpn; l++) {
			char v[5][PATH_MAX];
			pid_t p;

			snprintf(v[0], sizeof(v[0]), "%d", i * tpn + l);
			snprintf(v[1], sizeof(v[1]), "%d", n * tpn);
			snprintf(v[2], sizeof(v[2]), "%d", l);
			snprintf(v[3], sizeof(v[3]), "%d", tpn);
			snprintf(v[4], sizeof(v[4]), "%.255s/%.63s/%s", root,
				 names[i], BENCH_SOCK);
			p = fork();
			if (p < 0) {
				ret = -errno;
				break;
			}
			if (!p) {
				setenv("RANK", v[0], 1);
				setenv("WORLD_SIZE", v[1], 1);
				setenv("LOCAL_RANK", v[2], 1);
				setenv("LOCAL_WORLD_SIZE", v[3], 1);
				setenv("COLLSTACK_SOCKET", v[4], 1);
				if (pinned &&
				    sched_setaffinity(0, sizeof(cpus), &cpus))
					fprintf(stderr,
						"collstack bench: trainer %s "
						"on its sidecar's CPUs: %s\n",
						v[0], strerror(errno));
				if (i || l) {
					int fd = open("/dev/null", O_WRONLY);

					if (fd >= 0)
						dup2(fd, 1);
				}
				targs[3] = names[i];
				if (netns)
					execvp("ip", targs);
				else
					execv(trainer, targs + 4);
				fprintf(stderr, "collstack bench: %s: %s\n",
					netns ? "ip" : trainer,
					strerror(errno));
				_exit(127);
			}
			pids[nt++] = p;
		}
		if (ret)
			break;
	}
	if (ret) {
		fprintf(stderr, "collstack bench: fork: %s\n", strerror(-ret));
		kill_all(pids, nt);
	}
	deadline = time(NULL) + timeout;
	for (int left = nt; left > 0;) {
		int st;
		pid_t p = waitpid(-1, &st, WNOHANG);

		if (p < 0)
			break;
		if (!p) {
			if (time(NULL) > deadline) {
				fprintf(stderr,
					"collstack bench: timed out "
					"after %u s, stopping the trainers\n",
					timeout);
				kill_all(pids, nt);
				deadline = time(NULL) + 3600;
				ret = -ETIMEDOUT;
			}
			usleep(20000);
			continue;
		}
		for (int k = 0; k < nt; k++) {
			if (pids[k] != p)
				continue;
			pids[k] = 0;
			left--;
			if (!WIFEXITED(st) || WEXITSTATUS(st)) {
				fprintf(stderr,
					"collstack bench: trainer rank "
					"%d (%s) %s %d\n",
					k, names[k / tpn],
					WIFEXITED(st) ? "exited"
						      : "killed by signal",
					WIFEXITED(st) ? WEXITSTATUS(st)
						      : WTERMSIG(st));
				ret = ret ? ret : -EIO;
			}
		}
	}
	return ret ? 1 : 0;
}

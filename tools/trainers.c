/* SPDX-License-Identifier: MIT */
/*
 * Trainer processes for the CLI (tools/trainers.h): started from the root
 * namespace with `ip netns exec NODE` (or here, for sidecars on
 * loopback), each connected to its node's sidecar socket, waited for with
 * a deadline.
 *
 * CPUs: a trainer starts on its sidecar's CPUs when the sidecar is pinned
 * to fewer CPUs than this command may use (scripts/cluster.sh --cpus, the
 * default), as a real node's trainers share its cores.
 */
#include <errno.h>
#include <getopt.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cmds.h"
#include "sidecar/ctl.h"
#include "trainers.h"

#define TRAINERS_SOCK "collstack.sock"
#define TRAINERS_MAX_ARGS 64

/* @name next to this program's binary. */
static int next_to_self(const char *name, char *out, size_t len)
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
	if ((size_t)snprintf(out, len, "%s/%s", self, name) >= len)
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

	snprintf(path, sizeof(path), "%.255s/%.63s/pid", root, name);
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

/* In the child: the environment, CPUs and stdout of trainer @rank, then
 * exec. Never returns. */
static void start_one(const struct cs_trainers *t, char **argv, int node,
		      int local, int nodes, const char *root, const char *name,
		      const cpu_set_t *cpus)
{
	char v[5][PATH_MAX];

	snprintf(v[0], sizeof(v[0]), "%d", node * t->tpn + local);
	snprintf(v[1], sizeof(v[1]), "%d", nodes * t->tpn);
	snprintf(v[2], sizeof(v[2]), "%d", local);
	snprintf(v[3], sizeof(v[3]), "%d", t->tpn);
	snprintf(v[4], sizeof(v[4]), "%.255s/%.63s/%s", root, name,
		 TRAINERS_SOCK);
	setenv("RANK", v[0], 1);
	setenv("WORLD_SIZE", v[1], 1);
	setenv("LOCAL_RANK", v[2], 1);
	setenv("LOCAL_WORLD_SIZE", v[3], 1);
	setenv("COLLSTACK_SOCKET", v[4], 1);
	if (cpus && sched_setaffinity(0, sizeof(*cpus), cpus))
		fprintf(stderr, "%s: trainer %s on its sidecar's CPUs: %s\n",
			t->cmd, v[0], strerror(errno));
	if ((node || local) && !t->all_output) {
		int fd = open("/dev/null", O_WRONLY);

		if (fd >= 0)
			dup2(fd, 1);
	}
	argv[3] = (char *)name;
	if (t->netns)
		execvp("ip", argv);
	else
		execvp(argv[4], argv + 4);
	fprintf(stderr, "%s: %s: %s\n", t->cmd, t->netns ? "ip" : argv[4],
		strerror(errno));
	_exit(127);
}

int cs_trainers_run(const struct cs_trainers *t)
{
	static pid_t pids[CS_TRAINERS_MAX_NODES * CS_TRAINERS_MAX_TPN];
	char names[CS_TRAINERS_MAX_NODES][CS_CTL_NAME_MAX], root[256];
	char prog[PATH_MAX], *argv[TRAINERS_MAX_ARGS];
	int n, nt = 0, na = 0, ret = 0;
	time_t deadline;

	if (t->tpn < 1 || t->tpn > CS_TRAINERS_MAX_TPN)
		return 1;
	if (t->prog && t->prog[0])
		snprintf(prog, sizeof(prog), "%s", t->prog);
	else if ((ret = next_to_self(t->default_name, prog, sizeof(prog)))) {
		fprintf(stderr, "%s: trainer binary: %s\n", t->cmd,
			strerror(-ret));
		return 1;
	}
	argv[na++] = "ip";
	argv[na++] = "netns";
	argv[na++] = "exec";
	argv[na++] = NULL; /* the node */
	argv[na++] = prog;
	for (char *const *a = t->args; a && *a; a++) {
		if (na + 1 >= TRAINERS_MAX_ARGS) {
			fprintf(stderr, "%s: too many trainer arguments\n",
				t->cmd);
			return 1;
		}
		argv[na++] = *a;
	}
	argv[na] = NULL;
	n = cs_ctl_cluster_cli(t->cmd, t->env, names, CS_TRAINERS_MAX_NODES,
			       root, sizeof(root), 1);
	if (n < 0)
		return 1;
	printf("# %s: %d node(s) x %d trainer(s) (%s..%s), sidecars from %s\n",
	       t->cmd, n, t->tpn, names[0], names[n - 1], t->env);
	fflush(stdout);
	for (int i = 0; i < n && !ret; i++) {
		cpu_set_t cpus;
		bool pinned = t->pin && sidecar_cpus(root, names[i], &cpus);

		for (int l = 0; l < t->tpn; l++) {
			pid_t p = fork();

			if (p < 0) {
				ret = -errno;
				break;
			}
			if (!p)
				start_one(t, argv, i, l, n, root, names[i],
					  pinned ? &cpus : NULL);
			pids[nt++] = p;
		}
	}
	if (ret) {
		fprintf(stderr, "%s: fork: %s\n", t->cmd, strerror(-ret));
		kill_all(pids, nt);
	}
	deadline = time(NULL) + t->timeout_s;
	for (int left = nt; left > 0;) {
		int st;
		pid_t p = waitpid(-1, &st, WNOHANG);

		if (p < 0)
			break;
		if (!p) {
			if (time(NULL) > deadline) {
				fprintf(stderr,
					"%s: timed out after %u s, stopping "
					"the trainers\n",
					t->cmd, t->timeout_s);
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
					"%s: trainer rank %d (%s) %s %d\n",
					t->cmd, k, names[k / t->tpn],
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

static void launch_usage(FILE *out)
{
	fprintf(out,
		"usage: collstack launch [-T TRAINERS_PER_NODE] [--cluster ENV]\n"
		"          [--timeout S] [--all-output] [--no-netns] [--no-pin]\n"
		"          -- PROGRAM [ARGS...]\n\n"
		"Runs PROGRAM T times on every node of a running cluster\n"
		"(default $CS_CLUSTER_ENV or %s), in the node's\n"
		"namespace, with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE\n"
		"(node i: ranks i*T .. i*T+T-1) and COLLSTACK_SOCKET set, as\n"
		"torchrun or mpirun would: what libcollstack's cs_group_join_env()\n"
		"and Python's Client().join(name) read. Rank 0's stdout is\n"
		"shown (--all-output: every rank's); exits 0 when every process\n"
		"exited 0. Defaults: T 1, timeout 3600 s.\n",
		CS_CTL_DEFAULT_ENV);
}

int cs_cmd_launch(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "trainers-per-node", required_argument, NULL, 'T' },
		{ "cluster", required_argument, NULL, 'c' },
		{ "timeout", required_argument, NULL, 't' },
		{ "all-output", no_argument, NULL, 'a' },
		{ "no-netns", no_argument, NULL, 'N' },
		{ "no-pin", no_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	struct cs_trainers t = { .cmd = "collstack launch",
				 .env = cs_ctl_env(),
				 .tpn = 1,
				 .netns = true,
				 .pin = true,
				 .timeout_s = 3600 };
	unsigned long v;
	int o;

	while ((o = getopt_long(argc, argv, "+T:h", opts, NULL)) != -1) {
		switch (o) {
		case 'T':
			if (cs_parse_whole(optarg, 1, CS_TRAINERS_MAX_TPN,
					   &v)) {
				fprintf(stderr,
					"collstack launch: -T %s: a whole "
					"number from 1 to %d\n",
					optarg, CS_TRAINERS_MAX_TPN);
				return 2;
			}
			t.tpn = (int)v;
			break;
		case 'c':
			t.env = optarg;
			break;
		case 't':
			if (cs_parse_whole(optarg, 1, 7 * 86400, &v)) {
				fprintf(stderr,
					"collstack launch: --timeout %s: whole "
					"seconds from 1 to 604800\n",
					optarg);
				return 2;
			}
			t.timeout_s = (unsigned)v;
			break;
		case 'a':
			t.all_output = true;
			break;
		case 'N':
			t.netns = false;
			break;
		case 'P':
			t.pin = false;
			break;
		case 'h':
			launch_usage(stdout);
			return 0;
		default:
			launch_usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "collstack launch: no PROGRAM to run\n");
		launch_usage(stderr);
		return 2;
	}
	t.prog = argv[optind];
	t.args = argv + optind + 1;
	return cs_trainers_run(&t);
}

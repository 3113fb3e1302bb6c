/* SPDX-License-Identifier: MIT */
/*
 * collstack run allreduce: real allreduces across the sidecars that
 * scripts/cluster.sh started, on their own buffers, every element checked
 * by every sidecar; nccl-tests-style rows (size first, #wrong last).
 *
 * Per operation: "ar_prepare" to every sidecar (each builds its buffer,
 * engine and sessions), then "ar_start" to every one, then "ar_wait ...
 * nocheck", then "ar_check" (each checks every element of its result once
 * all are done). The time of an operation is the slowest rank's, from its
 * own start to its last acknowledgement; the row shows the mean over
 * --iters.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "collstack/types.h"
#include "cmds.h"
#include "sidecar/ctl.h"

#define MAX_NODES 64

static void usage(FILE *out)
{
	fprintf(out,
		"usage: collstack run allreduce [--bytes S | -b MIN -e MAX] "
		"[--dtype T]\n"
		"          [--iters I] [--warmup W] [--seed N] [--timeout MS] "
		"[--cluster FILE]\n"
		"          [--exclude-lost] [--per-op]\n\n"
		"Sizes take K/M/G suffixes; -b/-e run every power-of-two step "
		"from MIN to MAX.\nThe sidecars come from the state file of "
		"scripts/cluster.sh (default\n$CS_CLUSTER_ENV or %s).\n"
		"--exclude-lost skips sidecars that are gone (after a peer "
		"was lost, the\nsurvivors rebuild their ring from the group "
		"view).\n--per-op prints every sidecar's account of every timed "
		"operation (time to\nresult and to the last acknowledgement, "
		"frames, retransmissions, timeouts).\nA lost peer ends the "
		"run with CS_ERR_PEER_LOST naming its rank; a stalled\nsidecar "
		"with CS_ERR_TIMEOUT "
		"naming it.\n",
		CS_CTL_DEFAULT_ENV);
}

/* A whole number in [min, 2^31): iterations, warm-ups, milliseconds. */
static int parse_count(const char *s, unsigned min, unsigned *out)
{
	unsigned long v;

	if (cs_parse_whole(s, min, 0x7fffffffUL, &v)) {
		fprintf(stderr,
			"collstack run: '%s' is not a whole number "
			"from %u\n",
			s, min);
		return -1;
	}
	*out = (unsigned)v;
	return 0;
}

static int parse_size(const char *s, unsigned long long *out)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || v < 0)
		return -EINVAL;
	switch (*end) {
	case 'k':
	case 'K':
		v *= 1024;
		end++;
		break;
	case 'm':
	case 'M':
		v *= 1024 * 1024;
		end++;
		break;
	case 'g':
	case 'G':
		v *= 1024.0 * 1024 * 1024;
		end++;
		break;
	default:
		break;
	}
	if (*end == 'i' || *end == 'B')
		end += *end == 'i' ? (end[1] == 'B' ? 2 : 1) : 1;
	if (*end)
		return -EINVAL;
	*out = (unsigned long long)v;
	return 0;
}

struct node {
	char name[CS_CTL_NAME_MAX];
	char dir[512];
	int fd;
	char reply[CS_CTL_LINE];
};

/*
 * Send @req (formatted per node by the caller) to all, then read all.
 * ctlplane: every reply is read (a failure names every node it concerns):
 * a peer_lost reply is reported as CS_ERR_PEER_LOST naming the rank, a
 * sidecar that does not answer in time as CS_ERR_TIMEOUT naming it.
 */
/*
 * A sidecar's control connection broke (it died) between operations or
 * while one was being set up: with the bootstrap, the survivors' view
 * says which rank was lost once they have detected it (member.fail_
 * timeout; a killed process at once). Ask them for up to 10 s, so the run
 * ends with the same CS_ERR_PEER_LOST as when the loss hits an operation
 * in flight. Returns CS_ERR_PEER_LOST, or 0 (static peers, or no view
 * moved).
 */
static int explain_gone(struct node *nd, int n, const bool *gone)
{
	for (int round = 0; round < 100; round++) {
		for (int i = 0; i < n; i++) {
			double lost = -1, ep = 0;
			char r[CS_CTL_LINE];

			if (gone[i] || cs_ctl_send(nd[i].fd, "ping") ||
			    cs_ctl_recv(nd[i].fd, r, sizeof(r), 2000) < 0)
				continue;
			if (strstr(r, "boot=static"))
				return 0; /* no membership: nothing to ask */
			if (!cs_ctl_kv(r, "lost", &lost) && lost >= 0 &&
			    !cs_ctl_kv(r, "epoch", &ep)) {
				fprintf(stderr,
					"collstack: CS_ERR_PEER_LOST: rank %d "
					"lost (group epoch %d), reported by "
					"%s\n",
					(int)lost, (int)ep, nd[i].name);
				return CS_ERR_PEER_LOST;
			}
		}
		usleep(100000);
	}
	return 0;
}

static int round_trip(struct node *nd, int n, char reqs[][128], int timeout_ms)
{
	bool sent[MAX_NODES], gone[MAX_NODES] = { false };
	int err = 0;

	for (int i = 0; i < n; i++) {
		sent[i] = !cs_ctl_send(nd[i].fd, reqs[i]);
		if (!sent[i]) {
			fprintf(stderr,
				"collstack: %s: cannot send '%s': "
				"sidecar gone\n",
				nd[i].name, reqs[i]);
			gone[i] = true;
			err = -EIO;
		}
	}
	/* Replies in arrival order, so one stalled sidecar does not hide
	 * the others' answers; once a loss is reported the rest get 2 s. */
	for (int left = n, wait_ms = timeout_ms; left > 0;) {
		struct pollfd pfd[MAX_NODES];
		int idx[MAX_NODES], np = 0, pr;

		for (int i = 0; i < n; i++)
			if (sent[i]) {
				pfd[np] = (struct pollfd){ .fd = nd[i].fd,
							   .events = POLLIN };
				idx[np++] = i;
			}
		if (!np)
			break;
		pr = poll(pfd, (nfds_t)np, wait_ms);
		if (pr <= 0) {
			for (int k = 0; k < np; k++)
				fprintf(stderr,
					"collstack: CS_ERR_TIMEOUT: %s "
					"(node %d) stalled: no reply to '%s' "
					"within %d ms\n",
					nd[idx[k]].name, idx[k], reqs[idx[k]],
					wait_ms);
			if (!err || err == -EIO)
				err = CS_ERR_TIMEOUT;
			break;
		}
		for (int k = 0; k < np; k++) {
			int i = idx[k], r;

			if (!pfd[k].revents)
				continue;
			sent[i] = false;
			left--;
			r = cs_ctl_recv(nd[i].fd, nd[i].reply,
					sizeof(nd[i].reply), 2000);
			if (r < 0) {
				fprintf(stderr,
					"collstack: %s: no reply to "
					"'%s': %s\n",
					nd[i].name, reqs[i], strerror(-r));
				gone[i] = true;
				if (!err)
					err = r;
			} else if (strncmp(nd[i].reply, "ok", 2)) {
				double lr = -1, ep = 0;

				fprintf(stderr, "collstack: %s: %s\n",
					nd[i].name, nd[i].reply);
				if (strstr(nd[i].reply, "peer_lost") &&
				    !cs_ctl_kv(nd[i].reply, "rank", &lr) &&
				    !cs_ctl_kv(nd[i].reply, "epoch", &ep)) {
					fprintf(stderr,
						"collstack: "
						"CS_ERR_PEER_LOST: rank %d "
						"lost (group epoch %d), "
						"reported by %s\n",
						(int)lr, (int)ep, nd[i].name);
					err = CS_ERR_PEER_LOST;
					if (wait_ms > 2000)
						wait_ms = 2000;
				} else if (!err) {
					err = -EPROTO;
				}
			}
		}
	}
	for (int i = 0; i < n; i++)
		if (gone[i]) {
			/* once: the survivors' view names whoever was lost */
			if (err != CS_ERR_PEER_LOST && err != CS_ERR_TIMEOUT &&
			    explain_gone(nd, n, gone))
				return CS_ERR_PEER_LOST;
			break;
		}
	return err;
}

static double kv(const char *line, const char *key)
{
	double v = 0;

	cs_ctl_kv(line, key, &v);
	return v;
}

static int run_allreduce(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "cluster", required_argument, NULL, 'c' },
		{ "bytes", required_argument, NULL, 'B' },
		{ "minbytes", required_argument, NULL, 'b' },
		{ "maxbytes", required_argument, NULL, 'e' },
		{ "dtype", required_argument, NULL, 't' },
		{ "iters", required_argument, NULL, 'n' },
		{ "warmup", required_argument, NULL, 'w' },
		{ "seed", required_argument, NULL, 's' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "exclude-lost", no_argument, NULL, 'x' },
		{ "per-op", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	static struct node nd[MAX_NODES];
	static char reqs[MAX_NODES][128];
	char names[MAX_NODES][CS_CTL_NAME_MAX], root[256];
	const char *env = cs_ctl_env(), *dts = "f32";
	unsigned long long lo = 1 << 20, hi = 0, seed = 1;
	unsigned iters = 5, warmup = 1, timeout = 60000;
	uint64_t wrong_all = 0;
	enum cs_dtype dt;
	uint32_t op_id;
	int n, o, ret = 1;
	bool exclude_lost = false; /* ctlplane */
	bool per_op = false;

	while ((o = getopt_long(argc, argv, "b:e:n:w:t:h", opts, NULL)) != -1) {
		switch (o) {
		case 'c':
			env = optarg;
			break;
		case 'B':
		case 'b':
			if (parse_size(optarg, &lo))
				goto bad;
			if (o == 'B')
				hi = lo;
			break;
		case 'e':
			if (parse_size(optarg, &hi))
				goto bad;
			break;
		case 't':
			dts = optarg;
			break;
		case 'n':
			if (parse_count(optarg, 1, &iters))
				goto bad;
			break;
		case 'w':
			if (parse_count(optarg, 0, &warmup))
				goto bad;
			break;
		case 's':
			seed = strtoull(optarg, NULL, 0);
			break;
		case 'T':
			if (parse_count(optarg, 1, &timeout))
				goto bad;
			break;
		case 'x':
			exclude_lost = true;
			break;
		case 'v':
			per_op = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!hi)
		hi = lo;
	if (cs_dtype_parse(dts, &dt) || !iters || hi < lo || !lo) {
	bad:
		usage(stderr);
		return 2;
	}
	n = cs_ctl_cluster_cli("collstack run", env, names, MAX_NODES, root,
			       sizeof(root), 2);
	if (n < 0)
		return 1;
	for (int i = 0; i < n; i++) {
		snprintf(nd[i].name, sizeof(nd[i].name), "%.63s", names[i]);
		snprintf(nd[i].dir, sizeof(nd[i].dir), "%.255s/%.63s", root,
			 names[i]);
		nd[i].fd = cs_ctl_connect(nd[i].dir);
		if (nd[i].fd < 0 && exclude_lost) {
			/* ctlplane: a dead sidecar; the survivors' ring
			 * comes from their view, without it */
			printf("# skipping %s: %s (--exclude-lost)\n",
			       nd[i].name, strerror(-nd[i].fd));
			memmove(&names[i], &names[i + 1],
				(size_t)(n - i - 1) * sizeof(names[0]));
			n--;
			i--;
			continue;
		}
		if (nd[i].fd < 0) {
			fprintf(stderr, "collstack: sidecar %s: %s\n",
				nd[i].name, strerror(-nd[i].fd));
			goto out;
		}
	}
	/* past every id a sidecar has seen (a run started in the same
	 * second as the last one must not reuse its ids) */
	op_id = (uint32_t)time(NULL) << 8;
	for (int i = 0; i < n; i++)
		snprintf(reqs[i], sizeof(reqs[i]), "ar_next_op");
	if (round_trip(nd, n, reqs, timeout))
		goto out;
	for (int i = 0; i < n; i++) {
		double nx;

		if (!cs_ctl_kv(nd[i].reply, "next", &nx) && nx > 0 &&
		    (int32_t)((uint32_t)nx - 1 - op_id) >= 0)
			op_id = (uint32_t)nx - 1; /* op_id++ comes first */
	}
	printf("# collstack run allreduce: %d ranks (%s..%s), dtype %s, "
	       "iters %u, warmup %u, sidecars from %s\n#\n",
	       n, names[0], names[n - 1], cs_dtype_name(dt), iters, warmup,
	       env);
	printf("# %10s %12s %8s %6s %10s %8s %8s %8s\n", "size", "count",
	       "type", "redop", "time", "algbw", "busbw", "#wrong");
	printf("# %10s %12s %8s %6s %10s %8s %8s %8s\n", "(B)", "(elements)",
	       "", "", "(us)", "(GB/s)", "(GB/s)", "");
	for (unsigned long long sz = lo; sz <= hi; sz *= 2) {
		size_t esz = cs_dtype_size(dt);
		unsigned long long bytes = sz / esz * esz;
		double tsum = 0, retx = 0;
		uint64_t wrong = 0;

		for (unsigned it = 0; it < warmup + iters; it++) {
			double tmax = 0;

			op_id++;
			for (int i = 0; i < n; i++)
				snprintf(reqs[i], sizeof(reqs[i]),
					 "ar_prepare %u %llu %s %llu", op_id,
					 bytes, cs_dtype_name(dt), seed + it);
			if (round_trip(nd, n, reqs, timeout))
				goto out;
			for (int i = 0; i < n; i++)
				snprintf(reqs[i], sizeof(reqs[i]),
					 "ar_start %u", op_id);
			if (round_trip(nd, n, reqs, timeout))
				goto out;
			for (int i = 0; i < n; i++)
				snprintf(reqs[i], sizeof(reqs[i]),
					 "ar_wait %u %u nocheck", op_id,
					 timeout);
			/* the sidecars give up after --timeout themselves */
			if (round_trip(nd, n, reqs, timeout + 30000))
				goto out;
			for (int i = 0; i < n; i++) {
				double t = kv(nd[i].reply, "ns");

				if (t > tmax)
					tmax = t;
				if (it >= warmup)
					retx += kv(nd[i].reply, "retx");
				if (per_op && it >= warmup)
					printf("#   %s iter %u: %s\n",
					       nd[i].name, it - warmup,
					       nd[i].reply);
			}
			/* Every sidecar checks every element, once all are
			 * done: a check on a shared core would otherwise
			 * slow a sidecar that is still finishing. */
			for (int i = 0; i < n; i++)
				snprintf(reqs[i], sizeof(reqs[i]),
					 "ar_check %u", op_id);
			if (round_trip(nd, n, reqs, timeout + 30000))
				goto out;
			for (int i = 0; i < n; i++) {
				wrong += (uint64_t)kv(nd[i].reply, "wrong");
				if (kv(nd[i].reply, "wrong") > 0)
					fprintf(stderr, "# %s: %s\n",
						nd[i].name, nd[i].reply);
			}
			if (it >= warmup)
				tsum += tmax;
		}
		{
			double us = tsum / iters / 1e3;
			double algbw = us > 0 ? bytes / us / 1e3 : 0;
			double busbw = algbw * 2.0 * (n - 1) / n;

			printf("  %10llu %12llu %8s %6s %10.1f %8.3f %8.3f "
			       "%8llu\n",
			       bytes, bytes / esz, cs_dtype_name(dt), "sum", us,
			       algbw, busbw, (unsigned long long)wrong);
			if (retx > 0)
				printf("#   %.0f retransmissions over %u "
				       "iterations\n",
				       retx, iters);
			fflush(stdout);
		}
		wrong_all += wrong;
		if (sz > hi / 2)
			break;
	}
	printf("# Out of bounds values : %llu %s\n",
	       (unsigned long long)wrong_all, wrong_all ? "FAILED" : "OK");
	ret = wrong_all ? 1 : 0;
out:
	for (int i = 0; i < n; i++)
		if (nd[i].fd > 0)
			close(nd[i].fd);
	return ret;
}

int cs_cmd_run(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fprintf(argc < 2 ? stderr : stdout,
			"usage: collstack run allreduce [ARGS]  (allreduce "
			"across the cluster's sidecars)\n"
			"       collstack run mixed [ARGS]      (many groups "
			"and ops in flight)\n"
			"       collstack run buckets [ARGS]    (DDP buckets, "
			"overlapped or --serial)\n"
			"       collstack run ps [ARGS]         (parameter-server "
			"push/pull, sync SGD)\n");
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "allreduce"))
		return run_allreduce(argc - 1, argv + 1);
	if (!strcmp(argv[1], "mixed"))
		return cs_cmd_run_mixed(argc - 1, argv + 1);
	if (!strcmp(argv[1], "buckets"))
		return cs_cmd_run_buckets(argc - 1, argv + 1);
	if (!strcmp(argv[1], "ps"))
		return cs_cmd_run_ps(argc - 1, argv + 1);
	fprintf(stderr, "collstack run: unknown collective '%s'\n", argv[1]);
	return 2;
}

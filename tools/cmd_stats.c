/* SPDX-License-Identifier: MIT */
/*
 * collstack stats: the health counters of every sidecar of the cluster
 * that scripts/cluster.sh started, one row per node: what its port moved
 * and dropped, what its lcores did, and what its reliable sessions had to
 * resend (the "stats" and "ar_stats" control requests, cumulative since
 * each sidecar started; docs/dataplane.md lists every field). --raw
 * prints both reply lines as they are.
 *
 * Exit status: 0, 1 when a sidecar did not answer (its row says why), 2
 * for bad arguments.
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "sidecar/ctl.h"

#define MAX_NODES 64
#define TIMEOUT_MS 5000

static void usage(FILE *out)
{
	fprintf(out,
		"usage: collstack stats [--cluster FILE] [--raw]\n\n"
		"The health counters of each sidecar of the cluster, one row "
		"per node,\ncumulative since the sidecar started:\n"
		"  rx/tx      frames the port received and sent\n"
		"  drop       frames the port or its ring dropped (rx_dropped "
		"+ rx_nombuf + tx_errors;\n"
		"             on the udp port rx_nombuf counts receives that "
		"ran out of buffers\n"
		"             and were re-armed: the datagrams wait in the "
		"socket, none is lost)\n"
		"  bad        malformed or foreign frames the codec dropped "
		"(rx_malformed + rx_foreign)\n"
		"  fault      frames the fault shim dropped (f_dropped)\n"
		"  waits      times an idle lcore waited (lcore_waits)\n"
		"  ops        operations finished and freed (ops_freed)\n"
		"  retx       retransmissions (of which after a SACK, as a "
		"tail-loss probe)\n"
		"  rto        retransmission timeouts (of which spurious)\n"
		"  dup        duplicate frames received\n"
		"  lost       ranks the group view lost\n"
		"  stall      the longest its lcore was away from the port "
		"(ms: descheduled\n"
		"             or busy; its RTO floor is tp.away_floor times "
		"the recent one)\n"
		"The sidecars come from the state file of scripts/cluster.sh "
		"(default\n$CS_CLUSTER_ENV or %s). --raw prints each sidecar's "
		"'stats' and\n'ar_stats' replies as they are.\n",
		CS_CTL_DEFAULT_ENV);
}

static unsigned long long kv(const char *line, const char *key)
{
	double v = 0;

	cs_ctl_kv(line, key, &v);
	return (unsigned long long)v;
}

static void row(const char *name, const char *st, const char *ar)
{
	char retx[48], rto[40];

	snprintf(retx, sizeof(retx), "%llu(%llu,%llu)", kv(ar, "retx"),
		 kv(ar, "fast_retx"), kv(ar, "tlp"));
	snprintf(rto, sizeof(rto), "%llu(%llu)", kv(ar, "timeouts"),
		 kv(ar, "spurious"));
	printf("%-10s %12llu %12llu %8llu %6llu %8llu %10llu %8llu %16s "
	       "%11s %8llu %5llu %6.1f\n",
	       name, kv(st, "rx_pkts"), kv(st, "tx_pkts"),
	       kv(st, "rx_dropped") + kv(st, "rx_nombuf") + kv(st, "tx_errors"),
	       kv(st, "rx_malformed") + kv(st, "rx_foreign"),
	       kv(st, "f_dropped"), kv(st, "lcore_waits"), kv(ar, "ops_freed"),
	       retx, rto, kv(ar, "dup_rcvd"), kv(st, "nlost"),
	       (double)kv(ar, "away_max") / 1e6);
}

int cs_cmd_stats(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "cluster", required_argument, NULL, 'c' },
		{ "raw", no_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	static char st[CS_CTL_LINE], ar[CS_CTL_LINE];
	char names[MAX_NODES][CS_CTL_NAME_MAX], root[256], dir[512];
	const char *env = cs_ctl_env();
	bool raw = false;
	int n, o, ret = 0;

	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'c':
			env = optarg;
			break;
		case 'r':
			raw = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "collstack stats: unexpected '%s'\n",
			argv[optind]);
		usage(stderr);
		return 2;
	}
	n = cs_ctl_cluster_cli("collstack stats", env, names, MAX_NODES, root,
			       sizeof(root), 1);
	if (n < 0)
		return 1;
	printf("# collstack stats: %d sidecar(s) from %s\n", n, env);
	if (!raw)
		printf("%-10s %12s %12s %8s %6s %8s %10s %8s %16s %11s %8s "
		       "%5s %6s\n",
		       "# node", "rx", "tx", "drop", "bad", "fault", "waits",
		       "ops", "retx(sack,tlp)", "rto(spur)", "dup", "lost",
		       "stall");
	for (int i = 0; i < n; i++) {
		const char *last = st; /* the reply a failure left */
		int r;

		snprintf(dir, sizeof(dir), "%.255s/%.63s", root, names[i]);
		r = cs_ctl_call(dir, "stats", st, sizeof(st), TIMEOUT_MS);
		if (!r) {
			last = ar;
			r = cs_ctl_call(dir, "ar_stats", ar, sizeof(ar),
					TIMEOUT_MS);
		}
		if (r == -EPROTO) /* an "err ..." reply: say it */
			printf("%-10s no stats: %s\n", names[i], last);
		else if (r)
			printf("%-10s unreachable: %s\n", names[i],
			       strerror(-r));
		else if (raw)
			printf("%s stats: %s\n%s ar_stats: %s\n", names[i], st,
			       names[i], ar);
		else
			row(names[i], st, ar);
		ret |= r != 0;
	}
	return ret;
}

/* SPDX-License-Identifier: MIT */
/*
 * collstack top: a live table of every sidecar of the cluster and of each
 * of its peers, refreshed every --interval seconds (like top; Ctrl-C
 * quits), from the sidecars' metrics (the control socket's "metrics"
 * request: the text /metrics serves). Rates are over the last interval;
 * a peer path whose p99 RTT or loss rate leaves the cluster's normal
 * range is flagged (observe/health.h). --once prints one table (two
 * samples --interval apart) and exits.
 *
 * Exit status: 0, 1 when a sidecar did not answer, 2 for bad arguments.
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmds.h"
#include "obs_fetch.h"
#include "obs_prom.h"
#include "observe/health.h"
#include "observe/metrics.h"

#define CMD "collstack top"
#define TIMEOUT_MS 5000
#define MAX_PATHS (CS_OBS_CLI_NODES * CS_OBS_MAX_PEERS)

static void usage(FILE *out)
{
	fprintf(out,
		"usage: collstack top [--once] [--interval SECONDS] "
		"[--cluster FILE]\n\n"
		"Live table of the cluster's sidecars (per node, then per "
		"peer path):\n"
		"  node rows: frames/s and MB/s in and out of the port, drops, "
		"retransmits/s,\n    trainer ops/s, ops pending, CPU %% of "
		"the recording threads\n"
		"  peer rows: srtt and p99 RTT (us), MB/s out, retransmits, "
		"timeouts,\n    duplicates, loss %% (retransmits / frames), "
		"stalls, and FLAGS:\n    RTT or LOSS when the path is out of "
		"the cluster's normal range\n    (%.0fx the median p99 and > "
		"%.0f us; %.0fx the median loss and > %.0f %%;\n    paths "
		"with fewer than %d frames sent are not judged)\n"
		"--once: one table from two samples --interval apart "
		"(default 1 s).\n",
		CS_HEALTH_RTT_FACTOR, CS_HEALTH_RTT_FLOOR_S * 1e6,
		CS_HEALTH_LOSS_FACTOR, CS_HEALTH_LOSS_FLOOR * 100,
		CS_HEALTH_MIN_FRAMES);
}

struct snap {
	struct cs_prom m[CS_OBS_CLI_NODES];
	bool ok[CS_OBS_CLI_NODES];
	char why[CS_OBS_CLI_NODES][96];
};

static int sample(const struct cs_obs_cluster *cl, struct snap *s)
{
	int ret = 0;

	for (int i = 0; i < cl->n; i++) {
		char dir[512], line[CS_CTL_LINE], *body;
		size_t len;
		int r;

		cs_obs_node_dir(cl, i, dir, sizeof(dir));
		r = cs_obs_fetch(dir, "metrics", line, sizeof(line), &body,
				 &len, TIMEOUT_MS);
		if (!r)
			r = cs_prom_parse(body, &s->m[i]);
		free(body);
		s->ok[i] = !r;
		if (r)
			snprintf(s->why[i], sizeof(s->why[i]), "%s",
				 strerror(-r));
		ret |= r != 0;
	}
	return ret;
}

static double rate(const struct snap *a, const struct snap *b, int i,
		   double dt, const char *name, const char *m1,
		   const char *m2)
{
	return (cs_prom_sum(&b->m[i], name, m1, m2) -
		cs_prom_sum(&a->m[i], name, m1, m2)) /
	       dt;
}

/* p99 of the RTT histogram of @peer on node @i, from @p's counts. */
static double p99(const struct cs_prom *p, const char *peer)
{
	double cum[CS_OBS_NBUCKETS + 1];
	char le[32];

	for (unsigned k = 0; k < CS_OBS_NBUCKETS; k++) {
		snprintf(le, sizeof(le), "le=\"%g\"", cs_obs_bucket_s[k]);
		cum[k] = cs_prom_sum(p, "collstack_peer_rtt_seconds_bucket",
				     peer, le);
	}
	cum[CS_OBS_NBUCKETS] = cs_prom_sum(
		p, "collstack_peer_rtt_seconds_bucket", peer, "le=\"+Inf\"");
	return cs_health_quantile(cs_obs_bucket_s, cum, CS_OBS_NBUCKETS, 0.99);
}

static void table(const struct cs_obs_cluster *cl, const struct snap *a,
		  const struct snap *b, double dt)
{
	static struct cs_health_path hp[MAX_PATHS];
	static int hnode[MAX_PATHS], hpeer[MAX_PATHS];
	unsigned np = 0, bad;

	printf("%-10s %9s %9s %8s %8s %7s %7s %7s %7s %5s\n", "NODE", "rx fr/s",
	       "tx fr/s", "rx MB/s", "tx MB/s", "drops", "retx/s", "ops/s",
	       "pending", "cpu%");
	for (int i = 0; i < cl->n; i++) {
		if (!a->ok[i] || !b->ok[i]) {
			printf("%-10s unreachable: %s\n", cl->names[i],
			       b->ok[i] ? a->why[i] : b->why[i]);
			continue;
		}
		printf("%-10s %9.0f %9.0f %8.2f %8.2f %7.0f %7.0f %7.1f %7.0f "
		       "%5.1f\n",
		       cl->names[i],
		       rate(a, b, i, dt, "collstack_port_frames_total",
			    "direction=\"rx\"", NULL),
		       rate(a, b, i, dt, "collstack_port_frames_total",
			    "direction=\"tx\"", NULL),
		       rate(a, b, i, dt, "collstack_port_bytes_total",
			    "direction=\"rx\"", NULL) / 1e6,
		       rate(a, b, i, dt, "collstack_port_bytes_total",
			    "direction=\"tx\"", NULL) / 1e6,
		       cs_prom_sum(&b->m[i], "collstack_dropped_frames_total",
				   NULL, NULL),
		       rate(a, b, i, dt, "collstack_peer_retransmits_total",
			    NULL, NULL),
		       rate(a, b, i, dt, "collstack_ops_total", NULL, NULL),
		       cs_prom_sum(&b->m[i], "collstack_ipc_pending_ops", NULL,
				   NULL),
		       100 * rate(a, b, i, dt,
				  "collstack_thread_cpu_seconds_total", NULL,
				  NULL));
		for (int p = 0; p < CS_OBS_MAX_PEERS && np < MAX_PATHS; p++) {
			char peer[24];
			double tx, retx;

			snprintf(peer, sizeof(peer), "peer=\"%d\"", p);
			if (!cs_prom_sum(&b->m[i], "collstack_peer_srtt_seconds",
					 peer, NULL) &&
			    !cs_prom_sum(&b->m[i], "collstack_peer_frames_total",
					 peer, NULL))
				continue;
			tx = cs_prom_sum(&b->m[i], "collstack_peer_frames_total",
					 peer, "direction=\"tx\"");
			retx = cs_prom_sum(&b->m[i],
					   "collstack_peer_retransmits_total",
					   peer, NULL);
			hp[np] = (struct cs_health_path){
				.p99_s = p99(&b->m[i], peer),
				.loss = tx > 0 ? retx / tx : -1,
				.frames = tx,
			};
			hnode[np] = i;
			hpeer[np++] = p;
		}
	}
	bad = cs_health_judge(hp, np);
	printf("\n%-10s %4s %8s %8s %8s %8s %8s %6s %6s %6s %8s %s\n", "NODE",
	       "PEER", "srtt us", "p99 us", "tx MB/s", "retx", "timeouts",
	       "dup", "loss%", "stalls", "frames", "FLAGS");
	for (unsigned k = 0; k < np; k++) {
		const struct cs_prom *m = &b->m[hnode[k]];
		char peer[24];

		snprintf(peer, sizeof(peer), "peer=\"%d\"", hpeer[k]);
		char q[16] = "-";

		if (hp[k].p99_s >= 0)
			snprintf(q, sizeof(q), "%.1f", hp[k].p99_s * 1e6);
		printf("%-10s %4d %8.1f %8s %8.2f %8.0f %8.0f %6.0f %6.2f "
		       "%6.0f %8.0f %s%s\n",
		       cl->names[hnode[k]], hpeer[k],
		       cs_prom_sum(m, "collstack_peer_srtt_seconds", peer,
				   NULL) * 1e6,
		       q,
		       rate(a, b, hnode[k], dt, "collstack_peer_bytes_total",
			    peer, "direction=\"tx\"") / 1e6,
		       cs_prom_sum(m, "collstack_peer_retransmits_total", peer,
				   NULL),
		       cs_prom_sum(m, "collstack_peer_timeouts_total", peer,
				   NULL),
		       cs_prom_sum(m, "collstack_peer_duplicates_total", peer,
				   NULL),
		       hp[k].loss >= 0 ? 100 * hp[k].loss : 0,
		       cs_prom_sum(m, "collstack_peer_stalls_total", peer,
				   NULL),
		       cs_prom_sum(m, "collstack_peer_frames_total", peer,
				   "direction=\"tx\""),
		       hp[k].flags & CS_HEALTH_RTT ? "RTT " : "",
		       hp[k].flags & CS_HEALTH_LOSS ? "LOSS" : "");
	}
	printf("%u of %u peer path(s) flagged\n", bad, np);
}

static void nap(double s)
{
	struct timespec ts = { (time_t)s,
			       (long)((s - (double)(time_t)s) * 1e9) };

	nanosleep(&ts, NULL);
}

int cs_cmd_top(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "once", no_argument, NULL, '1' },
		{ "interval", required_argument, NULL, 'i' },
		{ "cluster", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	static struct cs_obs_cluster cl;
	static struct snap s[2];
	const char *env = cs_ctl_env();
	double interval = 1;
	bool once = false;
	int o, cur = 0, ret;

	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case '1':
			once = true;
			break;
		case 'i':
			if (cs_obs_cli_num(CMD, "--interval", optarg, 0.05, 3600,
					   &interval))
				return 2;
			break;
		default:
			if ((o = cs_obs_cli_opt(o, &env, usage)) >= 0)
				return o;
		}
	}
	if (cs_obs_cli_rest(CMD, argc, argv, usage))
		return 2;
	if (cs_obs_cluster_load(CMD, env, &cl))
		return 1;
	sample(&cl, &s[0]);
	for (;;) {
		nap(interval);
		ret = sample(&cl, &s[cur ^ 1]);
		if (!once)
			printf("\033[H\033[2J");
		printf("collstack top: %d node(s), rates over %.2f s\n\n", cl.n,
		       interval);
		table(&cl, &s[cur], &s[cur ^ 1], interval);
		fflush(stdout);
		cur ^= 1;
		if (once)
			break;
	}
	for (int i = 0; i < 2; i++)
		for (int k = 0; k < cl.n; k++)
			cs_prom_free(&s[i].m[k]);
	return ret;
}

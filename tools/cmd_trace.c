/* SPDX-License-Identifier: MIT */
/*
 * collstack trace --out FILE.json [--last SECONDS] [--delays]: gather
 * the timeline rings of every sidecar of the cluster, put their clocks
 * onto one clock and write one Chrome / Perfetto Trace Event JSON
 * (observe/tjson.h). --clock auto (default): host when every sidecar
 * reads this machine's clock, else hb. --clock host: this process's clock,
 * which every sidecar shares (same boot id and time namespace offset in
 * its "clock" reply; observe/clock.h cs_clock_host_id): each offset is the
 * sidecar's own injected skew, exactly. --clock hb: the coordinator's,
 * with the offsets every sidecar keeps from its stamped heartbeats
 * (control/member.h struct cs_hb_clock); --clock ctl, or when a sidecar
 * has no such estimate: this process's, by Cristian's method over the
 * control socket (the exchange with the shortest round trip of --samples).
 * Prints each node's offset and its error bound; --delays then prints
 * the data frames' delays from send to handling (observe/tdelay.h).
 *
 * Exit status: 0, 1 when a sidecar did not answer or the file could not
 * be written, 2 for bad arguments.
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cmds.h"
#include "obs_fetch.h"
#include "observe/clock.h"
#include "observe/obs_sidecar.h"
#include "observe/tdelay.h"
#include "observe/tjson.h"

#define CMD "collstack trace"
#define TIMEOUT_MS 10000
#define MAX_SAMPLES 256

static void usage(FILE *out)
{
	fprintf(out,
		"usage: collstack trace --out FILE.json [--last SECONDS] "
		"[--delays]\n"
		"       [--clock auto|host|hb|ctl] [--samples N] "
		"[--cluster FILE]\n"
		"       collstack trace --on | --off [--cluster FILE]\n\n"
		"Gathers every sidecar's timeline (trace.enable=1), aligns "
		"their clocks\n(--clock host: this machine's, when every "
		"sidecar reads it, as in a\nnamespace cluster: exact; "
		"--clock hb: the coordinator's, with the offsets\nthe "
		"sidecars keep from their heartbeats; --clock ctl, or when one "
		"has none:\nthis process's, from N exchanges over the control "
		"socket, default 16;\nauto, the default: host where it can, "
		"else hb; the error bound is\nprinted) and writes "
		"one Trace Event JSON file: open it in\nhttps://ui.perfetto.dev "
		"or chrome://tracing. Each node is a process, each\nlcore and "
		"trainer rank a thread. --last keeps the newest SECONDS.\n"
		"--delays also prints, per pair of nodes, the delays of the "
		"data frames\nfrom their send to their handling by the "
		"receiver's lcore (min, p50, p90,\np99, max).\n"
		"--on / --off switch recording on every sidecar (trace.enable "
		"at start).\n"
		"The sidecars come from the state file of scripts/cluster.sh "
		"(default\n$CS_CLUSTER_ENV or %s).\n",
		CS_CTL_DEFAULT_ENV);
}

static cs_ns_t mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (cs_ns_t)ts.tv_sec * 1000000000ull + (cs_ns_t)ts.tv_nsec;
}

/* @k clock exchanges with the sidecar in @dir. */
static int clock_of(const char *dir, unsigned k, struct cs_clock_est *est)
{
	struct cs_clock_sample s[MAX_SAMPLES];
	char line[CS_CTL_LINE];
	int fd = cs_ctl_connect(dir), ret = 0;
	unsigned n = 0;
	double now;

	if (fd < 0)
		return fd;
	for (; n < k && !ret; n++) {
		s[n].t0 = mono();
		ret = cs_ctl_send(fd, "clock");
		if (!ret && cs_ctl_recv(fd, line, sizeof(line), TIMEOUT_MS) < 0)
			ret = -EIO;
		s[n].t1 = mono();
		if (!ret && cs_ctl_kv(line, "now", &now))
			ret = -EPROTO;
		s[n].remote = (cs_ns_t)now;
	}
	close(fd);
	return ret ? ret : cs_clock_estimate(s, n, est);
}

/* The heartbeat estimate of the sidecar in @dir: its clock minus the
 * coordinator's. On failure @why says why. */
static int clock_hb_of(const char *dir, struct cs_clock_est *est,
		       double *samples, char *why, size_t len)
{
	char line[CS_CTL_LINE];
	double off, bound;
	int r = cs_ctl_call(dir, "clock_hb", line, sizeof(line), TIMEOUT_MS);

	if (r) {
		snprintf(why, len, "%s", r == -EPROTO ? line : strerror(-r));
		return r;
	}
	if (cs_ctl_kv(line, "offset", &off) ||
	    cs_ctl_kv(line, "bound", &bound) ||
	    cs_ctl_kv(line, "samples", samples)) {
		snprintf(why, len, "malformed reply: %.200s", line);
		return -EPROTO;
	}
	est->offset = (int64_t)off;
	est->bound = (cs_ns_t)bound;
	return 0;
}

/* The sidecar in @dir: whether it reads @host's clock (its skew then in
 * @skew) and its node id as its frames name it (-1: not said). */
static int host_of(const char *dir, const char *host, bool *same, int64_t *skew,
		   long *id)
{
	char line[CS_CTL_LINE], theirs[128];
	double v;
	int r = cs_ctl_call(dir, "clock", line, sizeof(line), TIMEOUT_MS);

	*same = false;
	*skew = 0;
	*id = -1;
	if (r)
		return r;
	if (!cs_ctl_kv(line, "node", &v))
		*id = (long)v;
	if (!host[0] || cs_ctl_word(line, "host", theirs, sizeof(theirs)) ||
	    strcmp(theirs, host) || cs_ctl_kv(line, "skew", &v))
		return 0;
	*same = true;
	*skew = (int64_t)v;
	return 0;
}

/* --on, --off: switch recording on every sidecar. */
static int switch_all(const char *env, bool on)
{
	static struct cs_obs_cluster cl;
	char dir[512], reply[CS_CTL_LINE];
	int ret = 0;

	if (cs_obs_cluster_load(CMD, env, &cl))
		return 1;
	for (int i = 0; i < cl.n; i++) {
		int r;

		cs_obs_node_dir(&cl, i, dir, sizeof(dir));
		r = cs_ctl_call(dir, on ? "trace_on 1" : "trace_on 0", reply,
				sizeof(reply), TIMEOUT_MS);
		printf("%-10s %s\n", cl.names[i],
		       r == -EPROTO || !r ? reply : strerror(-r));
		ret |= r != 0;
	}
	return ret;
}

/* Split a trace_dump body into rings. */
static int parse_dump(char *body, size_t len, struct cs_tj_node *nd,
		      size_t *events, unsigned long long *recorded)
{
	size_t off = 0;

	nd->nrings = 0;
	nd->rings = calloc(CS_TRACE_MAX_RINGS, sizeof(*nd->rings));
	if (!nd->rings)
		return -ENOMEM;
	while (off < len) {
		struct cs_obs_ring_hdr h;
		struct cs_tj_ring *r;

		if (len - off < sizeof(h) || nd->nrings == CS_TRACE_MAX_RINGS)
			return -EPROTO;
		memcpy(&h, body + off, sizeof(h));
		off += sizeof(h);
		if (h.n > (len - off) / sizeof(struct cs_trace_ev))
			return -EPROTO;
		r = &nd->rings[nd->nrings++];
		memcpy(r->name, h.name, sizeof(r->name));
		r->name[sizeof(r->name) - 1] = 0;
		for (char *p = r->name; *p; p++) /* it goes into JSON */
			if (*p == '"' || *p == '\\' || (unsigned char)*p < 32)
				*p = '_';
		r->tid = h.tid;
		r->n = h.n;
		r->ev = (struct cs_trace_ev *)(body + off); /* aligned: 8 */
		off += h.n * sizeof(struct cs_trace_ev);
		*events += h.n;
		*recorded += h.n + h.lost_lo; /* mod 2^32 */
	}
	return 0;
}

int cs_cmd_trace(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "out", required_argument, NULL, 'o' },
		{ "delays", no_argument, NULL, 'd' },
		{ "on", no_argument, NULL, '1' },
		{ "off", no_argument, NULL, '0' },
		{ "last", required_argument, NULL, 'l' },
		{ "samples", required_argument, NULL, 's' },
		{ "clock", required_argument, NULL, 'k' },
		{ "cluster", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	static struct cs_obs_cluster cl;
	struct cs_tj_node nodes[CS_OBS_CLI_NODES];
	char *bodies[CS_OBS_CLI_NODES] = { 0 };
	const char *env = cs_ctl_env(), *outp = NULL;
	double last = 0, num;
	unsigned samples = 16;
	enum { C_AUTO, C_HOST, C_HB, C_CTL } mode = C_AUTO;
	bool hb = true, host = true, delays = false;
	char myhost[128] = "";
	bool same[CS_OBS_CLI_NODES];
	int64_t skew[CS_OBS_CLI_NODES];
	uint32_t ids[CS_OBS_CLI_NODES];
	struct cs_clock_est hbest[CS_OBS_CLI_NODES];
	double hbn[CS_OBS_CLI_NODES];
	cs_ns_t worst = 0;
	struct cs_tj_stats st;
	int o, ret = 0, set = 0;
	FILE *f;

	while ((o = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
		switch (o) {
		case 'o':
			outp = optarg;
			break;
		case '0':
		case '1':
			set = o;
			break;
		case 'l':
			if (cs_obs_cli_num(CMD, "--last", optarg, 1e-6, 1e6,
					   &last))
				return 2;
			break;
		case 'k':
			if (!strcmp(optarg, "auto")) {
				mode = C_AUTO;
			} else if (!strcmp(optarg, "host")) {
				mode = C_HOST;
			} else if (!strcmp(optarg, "hb")) {
				mode = C_HB;
			} else if (!strcmp(optarg, "ctl")) {
				mode = C_CTL;
			} else {
				fprintf(stderr,
					"%s: --clock auto, host, hb or ctl, "
					"not '%s'\n",
					CMD, optarg);
				return 2;
			}
			break;
		case 'd':
			delays = true;
			break;
		case 's':
			if (cs_obs_cli_num(CMD, "--samples", optarg, 1,
					   MAX_SAMPLES, &num))
				return 2;
			samples = (unsigned)num;
			break;
		default:
			if ((o = cs_obs_cli_opt(o, &env, usage)) >= 0)
				return o;
		}
	}
	if (cs_obs_cli_rest(CMD, argc, argv, usage))
		return 2;
	if (set)
		return switch_all(env, set == '1');
	if (!outp) {
		fprintf(stderr, "%s: --out FILE (or --on, --off) is needed\n",
			CMD);
		usage(stderr);
		return 2;
	}
	if (cs_obs_cluster_load(CMD, env, &cl))
		return 1;
	/* which clock each sidecar reads, and its node id */
	if (cs_clock_host_id(myhost, sizeof(myhost)))
		myhost[0] = 0;
	for (int i = 0; i < cl.n; i++) {
		char dir[512];
		long id;
		int r;

		cs_obs_node_dir(&cl, i, dir, sizeof(dir));
		r = host_of(dir, myhost, &same[i], &skew[i], &id);
		if (r || id < 0)
			id = i; /* an older sidecar: the cluster's order */
		ids[i] = (uint32_t)id;
		/* one that does not answer is named by the fetch below */
		if (!r && !same[i] && host && mode != C_CTL && mode != C_HB)
			printf("%-10s does not read this machine's clock%s\n",
			       cl.names[i],
			       mode == C_HOST ? "" : ": heartbeat offsets");
		host = host && same[i];
	}
	if (mode == C_HOST && !host) {
		fprintf(stderr,
			"%s: --clock host needs every sidecar on this "
			"machine's clock (same boot id and time namespace)\n",
			CMD);
		return 1;
	}
	host = host && (mode == C_HOST || mode == C_AUTO);
	hb = !host && mode != C_CTL;
	/* one reference for all: the heartbeat offsets only when every
	 * sidecar has one */
	for (int i = 0; hb && i < cl.n; i++) {
		char dir[512], why[CS_CTL_LINE];

		cs_obs_node_dir(&cl, i, dir, sizeof(dir));
		if (clock_hb_of(dir, &hbest[i], &hbn[i], why, sizeof(why))) {
			printf("%-10s %s: clocks from the control socket "
			       "instead\n",
			       cl.names[i], why);
			hb = false;
		}
	}
	printf("clock reference: %s\n",
	       host ? "this machine's (every sidecar reads it)"
	       : hb ? "the coordinator's (heartbeat offsets)"
		    : "this process's (control-socket exchanges)");
	for (int i = 0; i < cl.n; i++) {
		char dir[512], line[CS_CTL_LINE];
		struct cs_clock_est est;
		size_t blen, events = 0;
		unsigned long long recorded = 0;
		int r = 0;

		nodes[i] = (struct cs_tj_node){ .name = cl.names[i] };
		cs_obs_node_dir(&cl, i, dir, sizeof(dir));
		if (host)
			est = (struct cs_clock_est){ .offset = skew[i] };
		else if (hb)
			est = hbest[i];
		else
			r = clock_of(dir, samples, &est);
		if (!r)
			r = cs_obs_fetch(dir, "trace_dump", line, sizeof(line),
					 &bodies[i], &blen, TIMEOUT_MS);
		if (!r)
			r = parse_dump(bodies[i], blen, &nodes[i], &events,
				       &recorded);
		if (r) {
			printf("%-10s no trace: %s%s%s\n", cl.names[i],
			       strerror(-r), r == -EPROTO ? ": " : "",
			       r == -EPROTO ? line : "");
			ret = 1;
			continue;
		}
		nodes[i].offset = est.offset;
		if (est.bound > worst)
			worst = est.bound;
		printf("%-10s clock offset %+.9f s +- %.9f s (%s), %u ring(s), "
		       "%zu event(s) (%llu recorded)\n",
		       cl.names[i], (double)est.offset / 1e9,
		       (double)est.bound / 1e9,
		       host ? "host"
		       : hb ? "heartbeats"
			    : "control",
		       nodes[i].nrings, events, recorded);
	}
	f = fopen(outp, "w");
	if (!f) {
		fprintf(stderr, "collstack trace: %s: %s\n", outp,
			strerror(errno));
		ret = 1;
		goto out;
	}
	o = cs_tj_write(f, nodes, (unsigned)cl.n, (cs_ns_t)(last * 1e9), &st);
	if (fclose(f) || o) {
		fprintf(stderr, "collstack trace: writing %s failed\n", outp);
		ret = 1;
		goto out;
	}
	if (!st.events)
		fprintf(stderr,
			"%s: no events recorded: is recording off? (collstack "
			"trace --on, or trace.enable=1 at start)\n",
			CMD);
	printf("wrote %s: %zu event(s) from %u of %d node(s), %.6f s; clock "
	       "error bound %.9f s\n",
	       outp, st.events, st.nodes_with_events, cl.n,
	       (double)(st.last_ns - st.first_ns) / 1e9, (double)worst / 1e9);
	if (delays) {
		unsigned cap = (unsigned)(cl.n * cl.n + 1);
		struct cs_td_row *rows = calloc(cap, sizeof(*rows));
		struct cs_td_stats ds;

		o = rows ? cs_td_compute(nodes, ids, (unsigned)cl.n,
					 (cs_ns_t)(last * 1e9), rows, cap, &ds)
			 : -ENOMEM;
		if (o < 0) {
			fprintf(stderr, "%s: delays: %s\n", CMD, strerror(-o));
			ret = 1;
		} else {
			cs_td_print(stdout, nodes, rows, (unsigned)o, &ds);
		}
		free(rows);
	}
out:
	for (int i = 0; i < cl.n; i++) {
		free(bodies[i]);
		free(nodes[i].rings);
	}
	return ret;
}

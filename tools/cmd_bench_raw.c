/* SPDX-License-Identifier: MIT */
/*
 * collstack bench raw: the bidirectional raw rate of the port layer. Two
 * sidecars blast protocol-free CS_PKT_RAW frames at each other at the same
 * time; each reports what it sent and received. This is the ceiling an
 * allreduce over the same port and link can be compared with.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmds.h"
#include "sidecar/ctl.h"
#include "internal/proto.h"

static void usage(FILE *out)
{
	fprintf(out,
		"usage: collstack bench raw [--cluster FILE] [--a NAME] "
		"[--b NAME]\n"
		"                           [--seconds S] [--size FRAME_BYTES]\n"
		"\nBoth sidecars blast CS_PKT_RAW frames at each other for S "
		"seconds (default 5);\nframes default to the largest the port "
		"carries. Sidecars are found through\nthe state file of "
		"scripts/cluster.sh (default $CS_CLUSTER_ENV or %s);\n--a/--b default to its "
		"first two nodes.\n",
		CS_CTL_DEFAULT_ENV);
}

struct side {
	char name[CS_CTL_NAME_MAX];
	char dir[512];
	int fd;
	double rank, frame_max;
	char reply[CS_CTL_LINE];
};

static int ping(struct side *s)
{
	char r[CS_CTL_LINE];
	int ret = cs_ctl_call(s->dir, "ping", r, sizeof(r), 5000);

	if (ret) {
		fprintf(stderr, "collstack: sidecar %s (%s): %s\n", s->name,
			s->dir, ret == -EPROTO ? r : strerror(-ret));
		return ret;
	}
	if (cs_ctl_kv(r, "rank", &s->rank) ||
	    cs_ctl_kv(r, "frame_max", &s->frame_max))
		return -EPROTO;
	return 0;
}

static double kv(const char *line, const char *key)
{
	double v = 0;

	cs_ctl_kv(line, key, &v);
	return v;
}

static void row(const char *label, const char *tx, const char *rx, double flen)
{
	double tns = kv(tx, "tx_ns"), rns = kv(rx, "rx_ns");
	double tp = kv(tx, "tx_pkts"), rp = kv(rx, "rx_pkts");
	double tb = kv(tx, "tx_bytes"), rb = kv(rx, "rx_bytes");
	double pay = flen - CS_PROTO_FRAME_OVERHEAD;

	printf("%-16s %10.0f %9.3f %9.2f %10.0f %9.3f %9.2f %11.2f %7.2f\n",
	       label, tp, tns ? tp / tns * 1e3 : 0, tns ? tb * 8 / tns : 0, rp,
	       rns ? rp / rns * 1e3 : 0, rns ? rb * 8 / rns : 0,
	       rns ? rp * pay * 8 / rns : 0, tp ? 100.0 * (1 - rp / tp) : 0);
}

static int bench_raw(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "cluster", required_argument, NULL, 'c' },
		{ "a", required_argument, NULL, 'a' },
		{ "b", required_argument, NULL, 'b' },
		{ "seconds", required_argument, NULL, 's' },
		{ "size", required_argument, NULL, 'z' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	char names[64][CS_CTL_NAME_MAX], root[256], req[128];
	const char *env = cs_ctl_env(), *a = NULL, *b = NULL;
	struct side s[2] = { 0 };
	double secs = 5, size = 0;
	int n, o, ret = 1;

	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'c':
			env = optarg;
			break;
		case 'a':
			a = optarg;
			break;
		case 'b':
			b = optarg;
			break;
		case 's':
			secs = atof(optarg);
			break;
		case 'z':
			size = atof(optarg);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (secs <= 0 || secs > 600) {
		fprintf(stderr, "collstack: --seconds must be in (0, 600]\n");
		return 2;
	}
	n = cs_ctl_cluster_cli("collstack bench raw", env, names, 64, root,
			       sizeof(root), 1);
	if (n < 0)
		return 1;
	if ((!a || !b) && n < 2) {
		fprintf(stderr, "collstack: %s lists %d node(s), need 2\n", env,
			n);
		return 1;
	}
	snprintf(s[0].name, sizeof(s[0].name), "%s", a ? a : names[0]);
	snprintf(s[1].name, sizeof(s[1].name), "%s", b ? b : names[1]);
	for (int i = 0; i < 2; i++) {
		snprintf(s[i].dir, sizeof(s[i].dir), "%.255s/%.63s", root,
			 s[i].name);
		s[i].fd = -1;
		if (ping(&s[i]))
			return 1;
	}
	if (!size)
		size = s[0].frame_max < s[1].frame_max ? s[0].frame_max
						       : s[1].frame_max;
	/* Both requests go out before either reply is read. */
	for (int i = 0; i < 2; i++) {
		s[i].fd = cs_ctl_connect(s[i].dir);
		if (s[i].fd < 0) {
			fprintf(stderr, "collstack: %s: %s\n", s[i].name,
				strerror(-s[i].fd));
			goto out;
		}
	}
	for (int i = 0; i < 2; i++) {
		snprintf(req, sizeof(req), "raw %.0f %.0f %.0f", s[1 - i].rank,
			 secs * 1000, size);
		if (cs_ctl_send(s[i].fd, req))
			goto out;
	}
	for (int i = 0; i < 2; i++) {
		int r = cs_ctl_recv(s[i].fd, s[i].reply, sizeof(s[i].reply),
				    (int)(secs * 1000) + 15000);

		if (r < 0 || strncmp(s[i].reply, "ok", 2)) {
			fprintf(stderr, "collstack: %s: %s\n", s[i].name,
				r < 0 ? strerror(-r) : s[i].reply);
			goto out;
		}
	}
	printf("# collstack bench raw: %s <-> %s at once, %.1f s, frames of "
	       "%.0f bytes (%.0f collstack payload)\n",
	       s[0].name, s[1].name, secs, size,
	       size - CS_PROTO_FRAME_OVERHEAD);
	printf("%-16s %10s %9s %9s %10s %9s %9s %11s %7s\n", "# direction",
	       "tx_frames", "tx_Mpps", "tx_Gbps", "rx_frames", "rx_Mpps",
	       "rx_Gbps", "payload_Gbps", "loss%");
	{
		char l0[160], l1[160];

		snprintf(l0, sizeof(l0), "%s->%s", s[0].name, s[1].name);
		snprintf(l1, sizeof(l1), "%s->%s", s[1].name, s[0].name);
		row(l0, s[0].reply, s[1].reply, size);
		row(l1, s[1].reply, s[0].reply, size);
	}
	{
		double g0 = kv(s[1].reply, "rx_ns"),
		       g1 = kv(s[0].reply, "rx_ns");
		double r0 = g0 ? kv(s[1].reply, "rx_bytes") * 8 / g0 : 0;
		double r1 = g1 ? kv(s[0].reply, "rx_bytes") * 8 / g1 : 0;

		printf("# bidirectional: %.2f Gbit/s per direction (mean of "
		       "received frame bytes), %.2f Gbit/s both ways\n",
		       (r0 + r1) / 2, r0 + r1);
	}
	ret = 0;
out:
	for (int i = 0; i < 2; i++)
		if (s[i].fd >= 0)
			close(s[i].fd);
	return ret;
}

int cs_cmd_bench(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		/* both: -o OP (trainers, cmd_bench.c) and raw */
		char *help[] = { argv[0], "--help", NULL };

		if (argc < 2)
			fprintf(stderr, "collstack bench: which benchmark?\n");
		cs_cmd_bench_ops(2, help);
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "raw"))
		return bench_raw(argc - 1, argv + 1);
	for (int i = 1; i < argc; i++) /* -o ps: sidecar jobs */
		if ((!strcmp(argv[i], "-o") && i + 1 < argc &&
		     !strcmp(argv[i + 1], "ps")) ||
		    !strcmp(argv[i], "-ops"))
			return cs_cmd_bench_ps(argc, argv);
	if (argv[1][0] == '-') /* -o OP ...: trainers (cmd_bench.c) */
		return cs_cmd_bench_ops(argc, argv);
	fprintf(stderr, "collstack bench: unknown benchmark '%s'\n", argv[1]);
	return 2;
}

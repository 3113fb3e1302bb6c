/* SPDX-License-Identifier: MIT */
/* `collstack sim SUBCOMMAND`: scenarios run in the network simulator. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "sim/ps.h"
#include "sim/scen.h"

struct sim_cmd {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *help;
};

/* One line per subcommand (other files add theirs; declare in cmds.h). */
static const struct sim_cmd sim_cmds[] = {
	{ "p2p", cs_cmd_sim_p2p, "move --bytes between two endpoints" },
	{ "incast", cs_cmd_sim_incast,
	  "N senders into one receiver via a switch" },
	{ "allreduce", cs_cmd_sim_allreduce, "ring allreduce, N ranks" },
	{ "reduce-scatter", cs_cmd_sim_reduce_scatter, "ring reduce-scatter" },
	{ "all-gather", cs_cmd_sim_all_gather, "ring all-gather" },
	{ "broadcast", cs_cmd_sim_broadcast, "pipelined chain" },
	{ "mixed", cs_cmd_sim_mixed,
	  "many groups and ops in flight over the transport core" },
	{ "alltoall", cs_cmd_sim_alltoall,
	  "all-to-all(v), flat or two-level, over the transport core" },
	{ "moe", cs_cmd_sim_moe, "MoE dispatch and combine over all-to-all" },
	{ "ps", cs_cmd_sim_ps,
	  "parameter-server push/pull over the transport core" },
};

static void sim_usage(FILE *out)
{
	fprintf(out, "usage: collstack sim SUBCOMMAND [OPTIONS]\n\n");
	for (size_t i = 0; i < sizeof(sim_cmds) / sizeof(sim_cmds[0]); i++)
		fprintf(out, "  %-18s %s\n", sim_cmds[i].name,
			sim_cmds[i].help);
	fprintf(out,
		"\n'collstack sim SUBCOMMAND --help' for its options;"
		" 'collstack sim --help-config' lists the transport keys.\n");
}

int cs_cmd_sim(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		sim_usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "--help-config")) {
		cs_xport_params_help(stdout);
		return 0;
	}
	for (size_t i = 0; i < sizeof(sim_cmds) / sizeof(sim_cmds[0]); i++)
		if (!strcmp(argv[1], sim_cmds[i].name))
			return sim_cmds[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "collstack sim: unknown subcommand '%s'\n\n", argv[1]);
	sim_usage(stderr);
	return 2;
}

/* ---- option parsing shared by the transport scenarios ---- */

int cs_sim_parse_size(const char *s, unsigned long long *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || errno || v < 0)
		return -EINVAL;
	if (!*end)
		;
	else if (!strcmp(end, "K") || !strcmp(end, "k") || !strcmp(end, "KiB"))
		v *= 1024;
	else if (!strcmp(end, "M") || !strcmp(end, "m") || !strcmp(end, "MiB"))
		v *= 1024 * 1024;
	else if (!strcmp(end, "G") || !strcmp(end, "g") || !strcmp(end, "GiB"))
		v *= 1024.0 * 1024 * 1024;
	else
		return -EINVAL;
	*out = (unsigned long long)v;
	return 0;
}

int cs_parse_whole(const char *s, unsigned long min, unsigned long max,
		   unsigned long *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

static int size_arg(const char *s, uint64_t *out)
{
	unsigned long long v;
	int ret = cs_sim_parse_size(s, &v);

	if (!ret)
		*out = v;
	return ret;
}

static int parse_double(const char *s, double lo, double hi, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || *end || errno || v < lo || v > hi)
		return -EINVAL;
	*out = v;
	return 0;
}

/*
 * Options common to the transport scenarios. Returns 1 if argv[*i] was
 * one of them (consuming its value), 0 if not, -1 on a bad value.
 */
static int common_opt(int argc, char **argv, int *i,
		      struct cs_sim_link_params *lp, uint64_t *seed,
		      struct cs_xport_params *xp)
{
	const char *o = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
	char err[160];
	double d;
	int ret = 0;

	if (!strcmp(o, "--loss"))
		ret = v ? parse_double(v, 0, 1, &lp->loss) : -EINVAL;
	else if (!strcmp(o, "--dup"))
		ret = v ? parse_double(v, 0, 1, &lp->dup) : -EINVAL;
	else if (!strcmp(o, "--reorder"))
		ret = v ? parse_double(v, 0, 1, &lp->reorder) : -EINVAL;
	else if (!strcmp(o, "--corrupt"))
		ret = v ? parse_double(v, 0, 1, &lp->corrupt) : -EINVAL;
	else if (!strcmp(o, "--reorder-us") && v &&
		 !(ret = parse_double(v, 0, 1e9, &d)))
		lp->reorder_ns = (uint64_t)(d * 1000);
	else if (!strcmp(o, "--link-gbps"))
		ret = v ? parse_double(v, 0.001, 1e6, &lp->gbps) : -EINVAL;
	else if (!strcmp(o, "--delay-us") && v &&
		 !(ret = parse_double(v, 0, 1e9, &d)))
		lp->delay_ns = (uint64_t)(d * 1000);
	else if (!strcmp(o, "--seed") && v)
		*seed = strtoull(v, NULL, 0);
	else if (!strcmp(o, "--set") && v) {
		char key[128], *eq = strchr(v, '=');

		if (!eq || (size_t)(eq - v) >= sizeof(key)) {
			fprintf(stderr, "--set wants key=value, got '%s'\n", v);
			return -1;
		}
		memcpy(key, v, eq - v);
		key[eq - v] = 0;
		if (cs_xport_params_set(xp, key, eq + 1, err, sizeof(err))) {
			fprintf(stderr, "%s\n", err);
			return -1;
		}
	} else if (!strcmp(o, "--reorder-us") || !strcmp(o, "--delay-us") ||
		   !strcmp(o, "--seed") || !strcmp(o, "--set"))
		ret = -EINVAL;
	else
		return 0;
	if (ret) {
		fprintf(stderr, "bad value for %s: '%s'\n", o, v ? v : "");
		return -1;
	}
	(*i)++;
	return 1;
}

static const char common_help[] =
	"  --loss P --dup P --reorder P --corrupt P   per-frame probabilities\n"
	"  --reorder-us D     extra delay of a reordered frame, up to D (5)\n"
	"  --link-gbps G      link rate (100)\n"
	"  --delay-us D       propagation delay per link\n"
	"  --seed K           PRNG seed (1): the run replays bit for bit\n"
	"  --set key=value    a transport key (collstack sim --help-config)\n";

int cs_cmd_sim_p2p(int argc, char **argv)
{
	struct cs_sim_p2p_cfg cfg;
	struct cs_sim_p2p_result res;
	char err[160];
	double d;
	int ret;

	if (cs_sim_p2p_defaults(&cfg))
		return 2;
	for (int i = 1; i < argc; i++) {
		const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		ret = common_opt(argc, argv, &i, &cfg.link, &cfg.seed, &cfg.xp);
		if (ret < 0)
			return 2;
		if (ret)
			continue;
		if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
			printf("usage: collstack sim p2p --bytes S [OPTIONS]\n"
			       "  --bytes S          bytes to move (64M)\n"
			       "  --payload B        payload per packet (8896)"
			       "\n"
			       "  --isn N            first sequence number\n"
			       "  --outage-ms T:L    data link down from T for "
			       "L ms\n"
			       "  --fail-ms T        the receiver dies at T\n"
			       "  --synthetic        no payload bytes (counts "
			       "only)\n%s",
			       common_help);
			return 0;
		} else if (!strcmp(o, "--bytes") && v &&
			   !size_arg(v, &cfg.bytes)) {
			i++;
		} else if (!strcmp(o, "--payload") && v) {
			cfg.payload = (uint32_t)strtoul(v, NULL, 0);
			i++;
		} else if (!strcmp(o, "--synthetic")) {
			cfg.synthetic = true;
		} else if (!strcmp(o, "--isn") && v) {
			cfg.isn = (uint32_t)strtoul(v, NULL, 0);
			i++;
		} else if (!strcmp(o, "--outage-ms") && v) {
			double t, l;

			if (sscanf(v, "%lf:%lf", &t, &l) != 2 || t < 0 ||
			    l < 0) {
				fprintf(stderr, "--outage-ms wants T:L\n");
				return 2;
			}
			cfg.outage_start = (cs_ns_t)(t * 1e6);
			cfg.outage_len = (cs_ns_t)(l * 1e6);
			i++;
		} else if (!strcmp(o, "--fail-ms") && v &&
			   !parse_double(v, 0, 1e9, &d)) {
			cfg.fail_at = (cs_ns_t)(d * 1e6);
			i++;
		} else {
			fprintf(stderr, "collstack sim p2p: bad option '%s'\n",
				o);
			return 2;
		}
	}
	if (cs_rel_params_check(&cfg.xp.rel, err, sizeof(err))) {
		fprintf(stderr, "collstack sim p2p: %s\n", err);
		return 2;
	}
	ret = cs_sim_p2p_run(&cfg, &res);
	if (ret) {
		fprintf(stderr, "collstack sim p2p: %s\n", strerror(-ret));
		return 2;
	}
	printf("p2p %s bytes=%llu time_us=%.3f goodput_frac=%.4f retrans=%llu "
	       "fast_retrans=%llu timeouts=%llu dups_dropped=%llu acks=%llu "
	       "events=%llu%s%s\n",
	       res.ok ? "ok" : "FAIL", (unsigned long long)res.bytes_delivered,
	       res.time_ns / 1e3, res.goodput_frac,
	       (unsigned long long)res.retx, (unsigned long long)res.fast_retx,
	       (unsigned long long)res.timeouts,
	       (unsigned long long)res.dup_rcvd, (unsigned long long)res.acks,
	       (unsigned long long)res.events,
	       res.ok ? "" : " why=", res.ok ? "" : res.why);
	return res.ok ? 0 : 1;
}

int cs_cmd_sim_incast(int argc, char **argv)
{
	struct cs_sim_incast_cfg cfg;
	struct cs_sim_incast_result res;
	char err[160];
	int ret;

	if (cs_sim_incast_defaults(&cfg))
		return 2;
	for (int i = 1; i < argc; i++) {
		const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		ret = common_opt(argc, argv, &i, &cfg.link, &cfg.seed, &cfg.xp);
		if (ret < 0)
			return 2;
		if (ret)
			continue;
		if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
			printf("usage: collstack sim incast --senders N "
			       "[OPTIONS]\n"
			       "  --senders N        senders (16)\n"
			       "  --bytes S          bytes per sender (4M)\n"
			       "  --port-buffer B    switch buffer per port "
			       "(1M)\n"
			       "  --credit B         receiver credit budget, "
			       "0: off (256K)\n"
			       "  --ecn B            switch ECN threshold "
			       "(0: off)\n%s",
			       common_help);
			return 0;
		} else if (!strcmp(o, "--senders") && v) {
			cfg.senders = (uint32_t)strtoul(v, NULL, 0);
			i++;
		} else if (!strcmp(o, "--bytes") && v &&
			   !size_arg(v, &cfg.bytes)) {
			i++;
		} else if (!strcmp(o, "--port-buffer") && v &&
			   !size_arg(v, &cfg.port_buffer)) {
			i++;
		} else if (!strcmp(o, "--credit") && v &&
			   !size_arg(v, &cfg.credit_budget)) {
			i++;
		} else if (!strcmp(o, "--ecn") && v &&
			   !size_arg(v, &cfg.ecn_bytes)) {
			i++;
		} else {
			fprintf(stderr,
				"collstack sim incast: bad option '%s'\n", o);
			return 2;
		}
	}
	if (cs_rel_params_check(&cfg.xp.rel, err, sizeof(err))) {
		fprintf(stderr, "collstack sim incast: %s\n", err);
		return 2;
	}
	ret = cs_sim_incast_run(&cfg, &res);
	if (ret) {
		fprintf(stderr, "collstack sim incast: %s\n", strerror(-ret));
		return 2;
	}
	printf("incast %s senders=%u bytes=%llu time_us=%.3f rx_util=%.4f "
	       "goodput_frac=%.4f max_queue=%llu bound=%llu drops=%llu "
	       "jain=%.4f retrans=%llu timeouts=%llu events=%llu%s%s\n",
	       res.ok ? "ok" : "FAIL", cfg.senders,
	       (unsigned long long)cfg.bytes, res.time_ns / 1e3, res.util,
	       res.goodput_frac, (unsigned long long)res.queue_max,
	       (unsigned long long)cfg.port_buffer,
	       (unsigned long long)res.drops, res.jain,
	       (unsigned long long)res.retx, (unsigned long long)res.timeouts,
	       (unsigned long long)res.events,
	       res.ok ? "" : " why=", res.ok ? "" : res.why);
	return res.ok ? 0 : 1;
}

int cs_cmd_sim_ps(int argc, char **argv)
{
	return cs_sim_ps(argc, argv, true);
}

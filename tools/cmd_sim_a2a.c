/* SPDX-License-Identifier: MIT */
/* `collstack sim alltoall`: one all-to-all(v) over the transport core in
 * the simulator, flat or two-level (sim/a2a.c). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "sim/a2a.h"

static void a2a_usage(FILE *out)
{
	fprintf(out,
		"usage: collstack sim alltoall [--ranks N | --nodes M]\n"
		"       [--ranks-per-node L] [--bytes S] [--uneven]\n"
		"       [--algo flat|two-level|auto] [--no-bucket] [--loss P]\n"
		"       [--seed K] [--credit B] [--link-gbps G] [--delay-us D]\n"
		"       [--port-buffer B] [--mtu B] [--time-limit-ms T]\n"
		"       [--nodata] [--dynamic] [--set key=value]...\n\n"
		"One all-to-all over N ranks (N = M x L with --nodes), each\n"
		"rank with its own link to one switch; ranks of a node share\n"
		"memory (the two-level algorithm's intra-node stage). S is a\n"
		"rank's send buffer (N blocks of S/N; --uneven: skewed sizes,\n"
		"some empty: all-to-all-v). --dynamic: receivers learn their\n"
		"counts in the same operation. Every element is checked. Prints\n"
		"'alltoall ok ...' or 'alltoall FAILED ...' (exit 1).\n"
		"busbw = algbw x (N-1)/N; bound_us: the largest send buffer's\n"
		"network share at the link rate. Defaults: 8 ranks, L 1,\n"
		"1 MiB, auto, 100 Gb/s, 1 us per link, 1 MiB port buffers,\n"
		"no credit. --set takes rel.*, pacer.*, cc.* and tp.* keys.\n");
}

static int a2a_set(struct cs_a2a_sim_cfg *c, const char *kv)
{
	char key[128], err[160] = "";
	const char *eq = strchr(kv, '=');
	int ret;

	if (!eq || (size_t)(eq - kv) >= sizeof(key)) {
		fprintf(stderr, "--set wants key=value, got '%s'\n", kv);
		return -EINVAL;
	}
	memcpy(key, kv, eq - kv);
	key[eq - kv] = 0;
	ret = cs_xport_params_set(&c->xp, key, eq + 1, err, sizeof(err));
	if (ret == -ENOENT)
		ret = cs_cfg_set(cs_tp_cfg, cs_tp_cfg_len, &c->tp, key, eq + 1,
				 err, sizeof(err));
	if (ret == -ENOENT)
		fprintf(stderr, "unknown key '%s'\n", key);
	else if (ret)
		fprintf(stderr, "%s\n", err);
	return ret;
}

static const char *algo_name(enum cs_a2a_algo a)
{
	return a == CS_A2A_TWO_LEVEL ? "two-level"
	       : a == CS_A2A_FLAT    ? "flat"
				     : "auto";
}

int cs_cmd_sim_alltoall(int argc, char **argv)
{
	struct cs_a2a_sim_result r;
	struct cs_a2a_sim_cfg c;
	unsigned long u, nodes = 0;
	unsigned long long sz;
	double d, busbw, bound;
	char *end;
	bool ok;
	int ret;

	if (cs_a2a_sim_cfg_default(&c))
		return 1;
	for (int i = 1; i < argc; i++) {
		const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int bad = 0;

		if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
			a2a_usage(stdout);
			return 0;
		} else if (!strcmp(o, "--uneven")) {
			c.uneven = true;
			continue;
		} else if (!strcmp(o, "--no-bucket")) {
			c.no_bucket = true;
			continue;
		} else if (!strcmp(o, "--nodata")) {
			c.nodata = true;
			continue;
		} else if (!strcmp(o, "--dynamic")) {
			c.dynamic = true;
			continue;
		} else if (!v) {
			bad = 1;
		} else if (!strcmp(o, "--ranks")) {
			bad = cs_parse_whole(v, 2, CS_A2A_MAX_RANKS, &u);
			c.ranks = (uint32_t)u;
		} else if (!strcmp(o, "--nodes")) {
			bad = cs_parse_whole(v, 1, CS_A2A_MAX_RANKS, &nodes);
		} else if (!strcmp(o, "--ranks-per-node")) {
			bad = cs_parse_whole(v, 1, CS_A2A_MAX_RPN, &u);
			c.rpn = (uint32_t)u;
		} else if (!strcmp(o, "--mtu")) {
			bad = cs_parse_whole(v, 64, 65536, &u);
			c.mtu = (uint32_t)u;
		} else if (!strcmp(o, "--bytes") || !strcmp(o, "--credit") ||
			   !strcmp(o, "--port-buffer")) {
			bad = cs_sim_parse_size(v, &sz);
			if (!strcmp(o, "--bytes"))
				c.bytes = sz;
			else if (!strcmp(o, "--credit"))
				c.credit = sz;
			else
				c.port_buffer = sz;
		} else if (!strcmp(o, "--algo")) {
			if (!strcmp(v, "flat"))
				c.algo = CS_A2A_FLAT;
			else if (!strcmp(v, "two-level"))
				c.algo = CS_A2A_TWO_LEVEL;
			else if (!strcmp(v, "auto"))
				c.algo = CS_A2A_AUTO;
			else
				bad = 1;
		} else if (!strcmp(o, "--seed")) {
			c.seed = strtoull(v, &end, 0);
			bad = end == v || *end;
		} else if (!strcmp(o, "--set")) {
			if (a2a_set(&c, v))
				return 2;
		} else {
			d = strtod(v, &end);
			bad = end == v || *end || d < 0;
			if (!strcmp(o, "--loss"))
				bad |= d >= 1, c.loss = d;
			else if (!strcmp(o, "--link-gbps"))
				bad |= d == 0, c.gbps = d;
			else if (!strcmp(o, "--delay-us"))
				c.delay_ns = (uint64_t)(d * 1e3);
			else if (!strcmp(o, "--time-limit-ms"))
				bad |= d == 0, c.time_limit_ns =
						       (uint64_t)(d * 1e6);
			else {
				fprintf(stderr,
					"collstack sim alltoall: unknown "
					"option '%s'\n",
					o);
				a2a_usage(stderr);
				return 2;
			}
		}
		if (bad) {
			fprintf(stderr,
				"collstack sim alltoall: bad value for %s\n",
				o);
			return 2;
		}
		i++;
	}
	if (nodes)
		c.ranks = (uint32_t)(nodes * c.rpn);
	if (c.ranks < 2 || c.ranks % c.rpn ||
	    (c.algo == CS_A2A_TWO_LEVEL && c.ranks / c.rpn < 2)) {
		fprintf(stderr, "collstack sim alltoall: --ranks must be a "
				"multiple (two-level: 2 or more) of "
				"--ranks-per-node\n");
		return 2;
	}
	if (c.tp.max_nodes <= c.ranks)
		c.tp.max_nodes = c.ranks + 1;
	ret = cs_a2a_sim_run(&c, &r);
	if (ret) {
		fprintf(stderr, "collstack sim alltoall: %s\n",
			ret == -EINVAL ? "bad settings" : strerror(-ret));
		return 1;
	}
	ok = r.done == c.ranks && !r.failed && !r.wrong && !r.proto &&
	     (c.nodata || r.checked == r.total_bytes / 4);
	busbw = r.time_ns ? (double)r.total_bytes / c.ranks * 8 /
				    (double)r.time_ns * (c.ranks - 1) /
				    c.ranks
			  : 0;
	bound = (double)r.max_bytes * (c.ranks - 1) / c.ranks * 8 / c.gbps;
	printf("alltoall %s ranks=%u ranks_per_node=%u algo=%s%s bytes=%" PRIu64
	       "%s%s time_us=%.1f busbw_gbps=%.2f bound_us=%.1f"
	       " max_queue_bytes=%" PRIu64 " drops=%" PRIu64
	       " frames=%" PRIu64 " retx=%" PRIu64 " staged=%" PRIu64
	       " checked=%" PRIu64 " wrong=%" PRIu64 " loss=%g seed=%" PRIu64
	       "\n",
	       ok ? "ok" : "FAILED", c.ranks, c.rpn, algo_name(r.algo),
	       c.no_bucket ? "(unbucketed)" : "", c.bytes,
	       c.uneven ? " uneven" : "", c.dynamic ? " dynamic" : "", r.time_ns / 1e3, busbw, bound / 1e3,
	       r.max_queue, r.drops, r.frames, r.retx, r.staged, r.checked,
	       r.wrong, c.loss, c.seed);
	if (!ok)
		printf("alltoall: %s\n",
		       r.first[0] ? r.first
				  : "not every rank completed in time");
	return ok ? 0 : 1;
}

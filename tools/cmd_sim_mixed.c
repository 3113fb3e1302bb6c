/* SPDX-License-Identifier: MIT */
/* `collstack sim mixed`: many groups and operations in flight over the
 * transport core in the simulator (sim/mixed.c). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "sim/mixed.h"

static void mixed_usage(FILE *out)
{
	fprintf(out,
		"usage: collstack sim mixed [--ranks N] [--groups G] [--ops K]\n"
		"       [--loss P] [--seed S] [--min-bytes B] [--max-bytes B]\n"
		"       [--link-gbps G] [--delay-us D] [--post-gap-us D]\n"
		"       [--time-limit-ms T] [--nodata] [--set key=value]...\n\n"
		"G groups (group 1 over every rank, the others over random\n"
		"subsets in random ring order), each posting K operations of\n"
		"random kinds (allreduce, reduce-scatter, all-gather,\n"
		"broadcast, reduce, barrier), types, operators and sizes\n"
		"(log-uniform in [min, max]: 4 B .. 16 MiB), every rank in its\n"
		"own random order, all in flight together over the transport\n"
		"core; every element is checked. Prints 'mixed ok ...' or\n"
		"'mixed FAILED ...' (exit 1). Defaults: 8 ranks, 4 groups,\n"
		"64 ops, no loss, seed 1, 100 Gb/s, 1 us per link.\n"
		"--set takes rel.*, pacer.*, cc.*, tp.* and coll.* keys.\n");
}

static int mixed_set(struct cs_mixed_cfg *c, const char *kv)
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
		ret = cs_cfg_set(cs_coll_cfg_table, cs_coll_cfg_table_len,
				 &c->coll, key, eq + 1, err, sizeof(err));
	if (ret == -ENOENT)
		fprintf(stderr, "unknown key '%s'\n", key);
	else if (ret)
		fprintf(stderr, "%s\n", err);
	return ret;
}

int cs_cmd_sim_mixed(int argc, char **argv)
{
	struct cs_mixed_result r;
	struct cs_mixed_cfg c;
	unsigned long u;
	unsigned long long sz;
	double d;
	char *end;
	int ret;

	if (cs_mixed_cfg_default(&c))
		return 1;
	for (int i = 1; i < argc; i++) {
		const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int bad = 0;

		if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
			mixed_usage(stdout);
			return 0;
		} else if (!strcmp(o, "--nodata")) {
			c.nodata = true;
			continue;
		} else if (!v) {
			bad = 1;
		} else if (!strcmp(o, "--ranks")) {
			bad = cs_parse_whole(v, 2, 65535, &u);
			c.ranks = (uint32_t)u;
		} else if (!strcmp(o, "--groups")) {
			bad = cs_parse_whole(v, 1, 4096, &u);
			c.groups = (uint32_t)u;
		} else if (!strcmp(o, "--ops")) {
			bad = cs_parse_whole(v, 1, 1 << 20, &u);
			c.ops = (uint32_t)u;
		} else if (!strcmp(o, "--min-bytes")) {
			bad = cs_sim_parse_size(v, &sz) || !sz;
			c.min_bytes = sz;
		} else if (!strcmp(o, "--max-bytes")) {
			bad = cs_sim_parse_size(v, &sz) || !sz;
			c.max_bytes = sz;
		} else if (!strcmp(o, "--seed")) {
			c.seed = strtoull(v, &end, 0);
			bad = end == v || *end;
		} else if (!strcmp(o, "--set")) {
			if (mixed_set(&c, v))
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
			else if (!strcmp(o, "--post-gap-us"))
				c.post_gap_ns = (uint64_t)(d * 1e3);
			else if (!strcmp(o, "--time-limit-ms"))
				c.time_limit_ns = (uint64_t)(d * 1e6);
			else {
				fprintf(stderr,
					"collstack sim mixed: unknown option "
					"'%s'\n",
					o);
				mixed_usage(stderr);
				return 2;
			}
		}
		if (bad) {
			fprintf(stderr, "collstack sim mixed: bad value for %s\n",
				o);
			return 2;
		}
		i++;
	}
	if (c.min_bytes > c.max_bytes) {
		fprintf(stderr, "collstack sim mixed: --min-bytes > --max-bytes\n");
		return 2;
	}
	if (c.tp.max_nodes <= c.ranks)
		c.tp.max_nodes = c.ranks + 1;
	ret = cs_mixed_run(&c, &r);
	if (ret) {
		fprintf(stderr, "collstack sim mixed: %s\n", strerror(-ret));
		return 1;
	}
	bool ok = r.done == r.ops && !r.failed && !r.wrong && !r.proto;

	printf("mixed %s ranks=%u groups=%u ops=%u instances=%" PRIu64
	       " done=%" PRIu64 " failed=%" PRIu64 " wrong=%" PRIu64
	       " time_us=%.1f peak_in_flight=%u held=%" PRIu64
	       " retx=%" PRIu64 " fillers=%" PRIu64 " hold_full=%" PRIu64
	       " bad_frames=%" PRIu64 " sessions=%" PRIu64 " loss=%g seed=%"
	       PRIu64 "\n",
	       ok ? "ok" : "FAILED", c.ranks, c.groups, c.ops, r.ops, r.done,
	       r.failed, r.wrong, r.time_ns / 1e3, r.peak_in_flight, r.held,
	       r.retx, r.fillers, r.hold_full, r.proto, r.sessions, c.loss,
	       c.seed);
	if (!ok)
		printf("mixed: %s\n",
		       r.first[0] ? r.first
				  : "not every operation completed in time");
	return ok ? 0 : 1;
}
